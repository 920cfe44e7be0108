"""gdn: Gated DeltaNet kernels from libgdn, for NumPy arrays and PyTorch tensors.

Drop-in functions with FLA's and causal-conv1d's names and arguments:
    chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, fused_gdn_gating,
    causal_conv1d_fn, causal_conv1d_update, rms_norm_gated (and l2norm).
print(gdn.info()) says which libgdn was loaded, from where, and what it can run on.
libgdn is loaded from $GDN_LIBRARY, else from beside this package, else from the library path;
import raises ImportError if its structs differ in size from the binding's ctypes mirrors, or
if it is too old to report them (gdn_struct_size).
"""
from ._lib import GdnError, GdnValueError
from ._lib import lib as _libgdn
from .conv import causal_conv1d_fn, causal_conv1d_update
from .ops import (chunk_gated_delta_rule, fused_gdn_gating, fused_recurrent_gated_delta_rule,
                  l2norm, rms_norm_gated)

__version__ = "0.1.0"
libgdn_version = _libgdn.gdn_version_string().decode()

__all__ = ["GdnError", "GdnValueError", "causal_conv1d_fn", "causal_conv1d_update",
           "chunk_gated_delta_rule", "fused_gdn_gating", "fused_recurrent_gated_delta_rule",
           "info", "l2norm", "rms_norm_gated", "libgdn_version"]


def _loaded_library_path():
    """The file the loaded libgdn came from (dladdr of one of its functions), else the name it
    was loaded by."""
    import ctypes
    import os

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    name = getattr(_libgdn, "_name", None) or repr(_libgdn)
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.restype, dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        found = DlInfo()
        address = ctypes.cast(_libgdn.gdn_version_string, ctypes.c_void_p)
        if dladdr(address, ctypes.byref(found)) and found.dli_fname:
            return os.path.realpath(os.fsdecode(found.dli_fname))
    except (AttributeError, OSError):  # no dladdr (not glibc/musl): the name is what we have
        pass
    return name


def info():
    """A few lines on this package and the libgdn it loaded, for bug reports and logs: versions,
    the library's file, the backends compiled in and usable here, the CPU's SIMD features and
    the CUDA devices (print(gdn.info()))."""
    import ctypes

    from . import _lib
    lines = [f"gdn {__version__} (Python binding), libgdn {libgdn_version} at "
             f"{_loaded_library_path()}"]
    backends = []
    for name in ("ref", "cpu", "cuda"):
        if _libgdn.gdn_backend_available(_lib.BACKENDS[name]):
            backends.append(name)
    lines.append("backends available: " + ", ".join(backends))
    try:
        features = _libgdn.gdn_cpu_features
        features.restype, features.argtypes = ctypes.c_uint, []
        bits = features()
        names = ["avx2+fma", "avx512", "avx512-bf16", "amx-bf16", "f16c"]  # GDN_CPU_* bits
        lines.append("cpu features: " + (" ".join(n for i, n in enumerate(names)
                                                   if bits >> i & 1) or "none"))
    except AttributeError:
        pass
    try:
        count, name = _libgdn.gdn_cuda_device_count, _libgdn.gdn_cuda_device_name
    except AttributeError:
        count = None
    if count is not None:
        count.restype, count.argtypes = ctypes.c_int, []
        name.restype = ctypes.c_int
        name.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        buf = ctypes.create_string_buffer(256)
        n = count()
        if n == 0:
            compiled = name(0, buf, len(buf)) != _lib.ERR_BACKEND
            lines.append("cuda: " + ("compiled in; no device (or no driver)" if compiled
                                     else "not compiled in (libgdn was built without nvcc)"))
        for device in range(n):
            status = name(device, buf, len(buf))
            lines.append(f"cuda device {device}: " + (buf.value.decode() if status == _lib.OK
                                                      else _libgdn.gdn_strerror(status).decode()))
    return "\n".join(lines)
