"""Test-session setup: gdn._fast, the binding's optional native fast path, built from this
checkout so that the tests run the binding as an installed package runs it.

GDN_FASTCALL (gdn/_lib.py reads it) decides:
  unset / auto  build gdn/_fastcall.c with python/setup.py's build_ext into a temporary
                directory (nothing is written into the checkout; about a second) and point
                GDN_FASTCALL at it; where it cannot be built (no Python headers or setuptools:
                Debian python3-dev python3-setuptools; no C compiler) the session runs the
                pure-Python path, says why in a warning, and test_fastcall.py skips its
                extension half
  1 / on        the same, but a failed build is an error: CI sets this where the extension must
                be tested
  0 / off       no extension: the pure-Python path only
  a path        that built extension file, as it is
"""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/


def _build_fastcall():
    """(path of the built extension, its temporary directory) or (None, why not)."""
    include = sysconfig.get_paths().get("include") or ""
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return None, f"no Python.h in {include!r} (Debian: apt-get install python3-dev)"
    if importlib.util.find_spec("setuptools") is None:  # python/setup.py builds it
        return None, "no setuptools (Debian: apt-get install python3-setuptools)"
    tmp = tempfile.mkdtemp(prefix="gdn-fastcall-")
    cmd = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib",
           os.path.join(tmp, "lib"), "--build-temp", os.path.join(tmp, "tmp")]
    try:
        r = subprocess.run(cmd, cwd=PYTHON_DIR, capture_output=True, text=True, timeout=600)
        output = (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        output, r = str(e), None
    found = sorted(glob.glob(os.path.join(tmp, "lib", "gdn", "_fast.*")))
    if r is None or r.returncode != 0 or not found:
        shutil.rmtree(tmp, ignore_errors=True)
        return None, "python/setup.py build_ext did not build it: " + output[-2000:]
    return found[0], tmp


def pytest_configure(config):
    choice = os.environ.get("GDN_FASTCALL", "").strip().lower()
    if choice not in ("", "auto", "1", "on", "yes", "true"):
        return  # off, or a built file named: as it is
    path, detail = _build_fastcall()
    if path is None:
        if choice in ("1", "on", "yes", "true"):
            raise pytest.UsageError(f"GDN_FASTCALL={choice}: gdn._fast cannot be built: {detail}")
        os.environ["GDN_FASTCALL"] = "0"  # not a stale in-place build either
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"gdn._fast (the native fast path) not built, testing the pure-Python path only: "
            f"{detail}"), stacklevel=2)
        return
    os.environ["GDN_FASTCALL"] = path
    config._gdn_fastcall_dir = detail


def pytest_unconfigure(config):
    tmp = getattr(config, "_gdn_fastcall_dir", None)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
