"""Tests of the binding's view of the C API itself (gdn/_lib.py), not of the ops:

  - the ctypes struct mirrors have the sizes the loaded library reports (gdn_struct_size), and
    the import-time check refuses a mirror out of step with the library, or a library too old to
    report its sizes;
  - the named constants equal the enum values of include/gdn.h (parsed from the header when the
    source tree is at hand) and the library's own names for them (gdn_strerror,
    gdn_backend_name, gdn_dtype_name, the default argument structs).
"""
import ctypes
import ctypes.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gdn
from gdn import _lib

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "gdn.h")


def run_python(script):
    """Runs `script` in a child interpreter that imports this same gdn package."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gdn.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)


# ---- struct sizes ------------------------------------------------------------------------------

def test_struct_mirrors_match_the_library():
    _lib.check_struct_sizes(_lib.lib)  # what import ran; must not raise
    for name, mirror in _lib.STRUCT_MIRRORS.items():
        assert _lib.lib.gdn_struct_size(name.encode()) == ctypes.sizeof(mirror), name
    assert _lib.lib.gdn_struct_size(b"gdn_context") == 0  # opaque: no mirror, no size


def test_a_mirror_with_an_extra_field_is_caught():
    class LongerArgs(_lib.DeltaRuleArgs):
        _fields_ = [("extra", ctypes.c_int64)]

    ours = ctypes.sizeof(LongerArgs)
    theirs = ctypes.sizeof(_lib.DeltaRuleArgs)
    with pytest.raises(ImportError) as e:
        _lib.check_struct_sizes(_lib.lib, {"gdn_delta_rule_args": LongerArgs})
    msg = str(e.value)
    assert "gdn_delta_rule_args" in msg and "LongerArgs" in msg
    assert f"is {theirs} bytes in libgdn" in msg and f"is {ours} bytes" in msg


def test_a_monkeypatched_wrong_mirror_is_caught(monkeypatch):
    class ShortRmsnormArgs(ctypes.Structure):  # eps and the flags left out
        _fields_ = [(n, _lib.Tensor) for n in ("x", "z", "weight", "out")]

    monkeypatch.setitem(_lib.STRUCT_MIRRORS, "gdn_rmsnorm_args", ShortRmsnormArgs)
    with pytest.raises(ImportError, match=r"struct gdn_rmsnorm_args is \d+ bytes in libgdn .* "
                                          r"ShortRmsnormArgs is \d+ bytes"):
        _lib.check_struct_sizes(_lib.lib)


def test_a_struct_the_library_does_not_know_is_caught():
    with pytest.raises(ImportError, match="does not know a struct named gdn_no_such_struct"):
        _lib.check_struct_sizes(_lib.lib, {"gdn_no_such_struct": _lib.Tensor})


def test_a_library_without_gdn_struct_size_is_too_old():
    class OldLibrary:
        _name = "/old/libgdn.so"

    with pytest.raises(ImportError, match=r"libgdn at /old/libgdn.so is too old .*"
                                          r"gdn_struct_size"):
        _lib.check_struct_sizes(OldLibrary())


# The same failures at import, through a ctypes.CDLL that hides gdn_struct_size or misreports one
# size: import gdn itself must refuse.
_PATCHED_IMPORT = """
import ctypes
class PatchedCDLL(ctypes.CDLL):
    def __getattr__(self, name):
        if name == "gdn_struct_size" and MODE == "old":
            raise AttributeError(name)
        fn = super().__getattr__(name)
        if name != "gdn_struct_size":
            return fn
        fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
        def lying(struct_name):
            n = fn(struct_name)
            return n + 8 if struct_name == b"gdn_conv1d_args" else n
        return lying
ctypes.CDLL = PatchedCDLL
try:
    import gdn
except ImportError as e:
    print("ImportError:", e)
else:
    print("imported")
"""


@pytest.mark.parametrize("mode", ["old", "lying"])
def test_import_refuses_a_library_out_of_step(mode):
    r = run_python(f"MODE = {mode!r}\n" + _PATCHED_IMPORT)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("ImportError: gdn:"), out
    if mode == "old":
        assert "too old" in out and "gdn_struct_size" in out
    else:
        size = ctypes.sizeof(_lib.Conv1dArgs)
        assert (f"struct gdn_conv1d_args is {size + 8} bytes" in out
                and f"Conv1dArgs is {size} bytes" in out), out


def test_import_refuses_a_library_that_is_not_libgdn():
    libm = ctypes.util.find_library("m")
    if not libm:
        pytest.skip("no libm to stand in for a foreign library")
    r = run_python("import os, sys\n"
                   f"os.environ['GDN_LIBRARY'] = {libm!r}\n"
                   "try:\n    import gdn\nexcept ImportError as e:\n    print('ImportError:', e)")
    assert r.returncode == 0, r.stderr
    assert "does not export gdn_version_string()" in r.stdout, r.stdout


# ---- constants ---------------------------------------------------------------------------------

def _header_enums():
    """{NAME without GDN_: value} for every enumerator of include/gdn.h."""
    if not os.path.exists(HEADER):
        pytest.skip("include/gdn.h is not beside this checkout of the package")
    text = re.sub(r"/\*.*?\*/", "", open(HEADER).read(), flags=re.S)
    enums = {}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, flags=re.S):
        for name, value in re.findall(r"GDN_(\w+)\s*=\s*(\d+)", body):
            enums[name] = int(value)
    assert len(enums) > 40  # the parse found the enums
    return enums, text


def test_constants_mirror_every_enum_of_the_header():
    enums, text = _header_enums()
    missing = sorted(n for n in enums if not hasattr(_lib, n))
    assert not missing, f"enumerators of gdn.h without a constant in _lib.py: {missing}"
    wrong = {n: (getattr(_lib, n), v) for n, v in enums.items() if getattr(_lib, n) != v}
    assert not wrong, f"_lib.py value vs gdn.h value: {wrong}"
    assert f"#define GDN_MAX_DIMS {_lib.MAX_DIMS}" in text
    assert f"#define GDN_SOFTPLUS_THRESHOLD {_lib.SOFTPLUS_THRESHOLD}f" in text


def test_struct_mirrors_cover_every_struct_of_the_header():
    _, text = _header_enums()
    assert set(re.findall(r"typedef struct (gdn_\w+) \{", text)) == set(_lib.STRUCT_MIRRORS)


STATUSES = ["OK", "ERR_NULL", "ERR_DTYPE", "ERR_SHAPE", "ERR_STRIDE", "ERR_VALUE",
            "ERR_UNSUPPORTED", "ERR_BACKEND", "ERR_NO_MEMORY", "ERR_WORKSPACE", "ERR_CUDA",
            "ERR_INTERNAL", "ERR_BUSY"]


@pytest.mark.parametrize("name", STATUSES)
def test_status_constants_are_the_librarys(name):
    assert _lib.lib.gdn_strerror(getattr(_lib, name)).decode().startswith(f"GDN_{name}:")


def test_backend_and_dtype_constants_are_the_librarys():
    for name, value in _lib.BACKENDS.items():
        assert _lib.lib.gdn_backend_name(value).decode() == name
    for name, size in [("F32", 4), ("BF16", 2), ("F16", 2), ("I32", 4), ("I64", 8), ("U8", 1)]:
        value = getattr(_lib, name)
        assert _lib.lib.gdn_dtype_name(value).decode() == name.lower()
        assert _lib.lib.gdn_dtype_size(value) == size


def test_default_args_are_the_named_defaults():
    a = _lib.lib.gdn_delta_rule_default_args()
    assert (a.state_layout, a.gva, a.algorithm) == (_lib.STATE_KV, _lib.GVA_BLOCK, _lib.ALGO_AUTO)
    assert (a.scale, a.chunk_size) == (_lib.SCALE_AUTO, _lib.CHUNK_SIZE_AUTO)
    assert a.gating.a_form == _lib.A_LOG
    assert a.gating.softplus_threshold == _lib.SOFTPLUS_THRESHOLD
    assert _lib.lib.gdn_gating_default_params().a_form == _lib.A_LOG
    assert _lib.lib.gdn_conv1d_default_args().activation == _lib.ACT_SILU
    assert _lib.lib.gdn_conv1d_update_default_args().activation == _lib.ACT_SILU
    assert _lib.lib.gdn_context_default_options().backend == _lib.BACKEND_AUTO
    assert _lib.lib.gdn_context_default_options().cpu_isa == _lib.ISA_AUTO


def test_option_tables_name_the_constants():
    assert _lib.ALGORITHMS == {"auto": _lib.ALGO_AUTO, "recurrent": _lib.ALGO_RECURRENT,
                               "chunked": _lib.ALGO_CHUNKED}
    assert _lib.GVAS == {"block": _lib.GVA_BLOCK, "tiled": _lib.GVA_TILED}
    assert _lib.A_FORMS == {"A_log": _lib.A_LOG, "neg_exp": _lib.A_NEG_EXP}


def test_argument_errors_carry_the_named_status():
    ro = np.zeros((1, 4, 16, 8), np.float32)
    ro.flags.writeable = False
    q = np.zeros((1, 2, 2, 16), np.float32)
    v = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(gdn.GdnValueError) as e:
        gdn.fused_recurrent_gated_delta_rule(q, q, v, state_pool=ro)
    assert e.value.status == _lib.ERR_VALUE
    with pytest.raises(gdn.GdnValueError) as e:
        gdn.l2norm(np.zeros((2, 3), np.float64))
    assert e.value.status == _lib.ERR_DTYPE
    with pytest.raises(gdn.GdnValueError) as e:  # libgdn's own refusal: k's head dim
        gdn.fused_recurrent_gated_delta_rule(q, q[..., :8], v)
    assert e.value.status == _lib.ERR_SHAPE
