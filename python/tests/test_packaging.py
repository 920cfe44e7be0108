"""Tests of the package's build (python/setup.py): a wheel built from the package sources carries
libgdn as gdn/libgdn.so, is tagged for the platform, and once installed imports and runs from
another directory with no GDN_LIBRARY set. Built from a copy of python/ alone (no include/gdn.h
beside it) it has no gdn._fast and is tagged py3-none-<platform>; with the header it carries
gdn._fast too (where this Python has its headers) and is tagged for the stable ABI.

The wheel packages the library this test session loaded (GDN_PREBUILT_LIBRARY), so no CMake
build runs here and the sources are copied to a temporary directory first: nothing is written
into the checkout. Skipped where this Python has no pip, setuptools or wheel.
"""
import glob
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import gdn

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
HEADER = os.path.join(os.path.dirname(PYTHON_DIR), "include", "gdn.h")

def _installed(name):
    """Whether a distribution is installed, from its metadata: importlib.util.find_spec("pip")
    would run setuptools' distutils shim's pip hook, which drops distutils from sys.modules
    and breaks torch inductor's C++ builds later in the same test session."""
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


pytestmark = pytest.mark.skipif(
    not all(_installed(m) for m in ("pip", "setuptools", "wheel")),
    reason="needs pip, setuptools and wheel (Debian: python3-pip python3-setuptools "
           "python3-wheel)")


def _copy_package_sources(dest):
    os.makedirs(os.path.join(dest, "gdn"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(PYTHON_DIR, name), dest)
    for pattern in ("*.py", "*.c", "*.h"):
        for path in glob.glob(os.path.join(PYTHON_DIR, "gdn", pattern)):
            shutil.copy(path, os.path.join(dest, "gdn"))


def _env(**changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GDN_LIBRARY", "GDN_PREBUILT_LIBRARY", "PYTHONPATH", "GDN_FASTCALL")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **changes)
    return env


def _pip(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "pip"] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _install_and_run(wheel, site, elsewhere, script):
    """pip-installs the wheel into site, then runs script from elsewhere with only site on
    the path; the finished process."""
    r = _pip(["install", "--no-deps", "--no-index", "--target", site, wheel], cwd=elsewhere,
             env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return subprocess.run([sys.executable, "-c", script], cwd=elsewhere, capture_output=True,
                          text=True, timeout=120, env=_env(PYTHONPATH=site))


def test_wheel_bundles_libgdn_and_imports_from_anywhere(tmp_path):
    sources, wheels, site, elsewhere = (str(tmp_path / d) for d in
                                        ("src", "wheels", "site", "elsewhere"))
    _copy_package_sources(sources)
    os.makedirs(elsewhere)
    library = gdn._loaded_library_path()
    r = _pip(["wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels, sources],
             cwd=elsewhere, env=_env(GDN_PREBUILT_LIBRARY=library))
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = glob.glob(os.path.join(wheels, "gdn-*.whl"))
    tag = os.path.basename(wheel)[len(f"gdn-{gdn.__version__}-"):]  # platform; any Python 3
    assert tag.startswith("py3-none-") and tag != "py3-none-any.whl", wheel
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "gdn/libgdn.so" in names and "gdn/__init__.py" in names, names
        assert z.read("gdn/libgdn.so") == open(library, "rb").read()
        assert not [n for n in names if n.startswith("gdn/libgdn.so.")], names

    script = ("import numpy as np, gdn; print(gdn.info()); "
              "x = np.arange(1, 9, dtype=np.float32).reshape(2, 4); "
              "y = gdn.l2norm(x); "
              "assert np.allclose((y * y).sum(-1), 1, atol=1e-5), y; "
              "assert gdn._lib.fast is None, gdn._lib.fast; print('ok')")
    r = _install_and_run(wheel, site, elsewhere, script)
    assert r.returncode == 0, r.stdout + r.stderr
    bundled = os.path.realpath(os.path.join(site, "gdn", "libgdn.so"))
    assert f"at {bundled}\n" in r.stdout and r.stdout.endswith("ok\n"), r.stdout
    assert "backends available: ref" in r.stdout, r.stdout


def test_building_without_the_c_sources_says_what_to_do(tmp_path):
    sources = str(tmp_path / "src")  # no CMakeLists.txt in its parent, no GDN_PREBUILT_LIBRARY
    _copy_package_sources(sources)
    r = _pip(["wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w",
              str(tmp_path / "wheels"), sources], cwd=str(tmp_path), env=_env())
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "libgdn's sources are not at" in out and "GDN_PREBUILT_LIBRARY" in out, out


@pytest.mark.skipif(not os.path.isfile(os.path.join(sysconfig.get_paths().get("include") or "",
                                                    "Python.h")),
                    reason="no Python.h: gdn._fast cannot be built (Debian: python3-dev)")
def test_wheel_with_the_fast_path(tmp_path):
    """With include/gdn.h beside the package sources, the wheel carries gdn._fast (stable ABI
    on CPython >= 3.11), and the installed package uses it for a decode call."""
    sources, wheels, site, elsewhere = (str(tmp_path / d) for d in
                                        ("src", "wheels", "site", "elsewhere"))
    _copy_package_sources(sources)
    os.makedirs(tmp_path / "include")
    shutil.copy(HEADER, tmp_path / "include")  # ../include/gdn.h, as in a checkout
    os.makedirs(elsewhere)
    r = _pip(["wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels, sources],
             cwd=elsewhere, env=_env(GDN_PREBUILT_LIBRARY=gdn._loaded_library_path()))
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = glob.glob(os.path.join(wheels, "gdn-*.whl"))
    tag = os.path.basename(wheel)[len(f"gdn-{gdn.__version__}-"):]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    extensions = [n for n in names if n.startswith("gdn/_fast") and not n.endswith(".c")]
    assert len(extensions) == 1, names
    if sys.version_info >= (3, 11) and not sysconfig.get_config_var("Py_GIL_DISABLED"):
        assert tag.startswith("cp311-abi3-") and extensions[0].endswith(".abi3.so"), (tag, names)
    else:
        assert tag.startswith(f"cp{sys.version_info[0]}{sys.version_info[1]}-"), tag

    script = ("import numpy as np, gdn\n"
              "from gdn import _lib\n"
              "assert _lib.fast is not None and _lib.fast.__file__.startswith(%r), _lib.fast\n"
              "q = k = np.ones((1, 1, 2, 8), np.float32); v = np.ones((1, 1, 2, 4), np.float32)\n"
              "g = np.zeros((1, 1, 2), np.float32); beta = np.ones((1, 1, 2), np.float32)\n"
              "pool = np.zeros((3, 2, 8, 4), np.float32)\n"
              "o, _ = gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, state_pool=pool,\n"
              "                                            state_indices=np.array([1], np.int32))\n"
              "assert pool[1].any() and not pool[0].any() and o.any(); print('ok')\n"
              % os.path.join(site, "gdn"))
    r = _install_and_run(wheel, site, elsewhere, script)
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), r.stdout + r.stderr
