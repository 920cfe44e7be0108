"""Tests of the package's build (python/setup.py): a wheel built from the package sources carries
libgdn as gdn/libgdn.so, is tagged for the platform, and once installed imports and runs from
another directory with no GDN_LIBRARY set.

The wheel packages the library this test session loaded (GDN_PREBUILT_LIBRARY), so no CMake
build runs here and the sources are copied to a temporary directory first: nothing is written
into the checkout. Skipped where this Python has no pip, setuptools or wheel.
"""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import gdn

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("pip", "setuptools", "wheel")),
    reason="needs pip, setuptools and wheel (Debian: python3-pip python3-setuptools "
           "python3-wheel)")


def _copy_package_sources(dest):
    os.makedirs(os.path.join(dest, "gdn"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(PYTHON_DIR, name), dest)
    for path in glob.glob(os.path.join(PYTHON_DIR, "gdn", "*.py")):
        shutil.copy(path, os.path.join(dest, "gdn"))


def _env(**changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GDN_LIBRARY", "GDN_PREBUILT_LIBRARY", "PYTHONPATH")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **changes)
    return env


def _pip(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "pip"] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


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

    r = _pip(["install", "--no-deps", "--no-index", "--target", site, wheel], cwd=elsewhere,
             env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    script = ("import numpy as np, gdn; print(gdn.info()); "
              "x = np.arange(1, 9, dtype=np.float32).reshape(2, 4); "
              "y = gdn.l2norm(x); "
              "assert np.allclose((y * y).sum(-1), 1, atol=1e-5), y; print('ok')")
    r = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, capture_output=True,
                       text=True, timeout=120, env=_env(PYTHONPATH=site))
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
