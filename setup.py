"""`pip install --no-build-isolation .` at the repository root: the gdn package of python/, with
libgdn built into it, exactly as `pip install ./python` builds it (python/setup.py)."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "gdn_python_setup", os.path.join(os.path.dirname(os.path.abspath(__file__)), "python",
                                     "setup.py"))
_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_setup)
# build/python/: setuptools' own build tree kept apart from a CMake tree in build/
_setup.setup_gdn(package_root="python", options={"build": {"build_base": "build/python"}})
