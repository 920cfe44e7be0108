"""Builds the gdn package with libgdn inside: `pip install --no-build-isolation ./python` (or
`pip install --no-build-isolation .` at the repository root, whose setup.py runs this file).

The build_py step configures and builds libgdn's shared library with CMake from the repository
this directory sits in (CUDA backend included when nvcc is found) and puts the library, as
gdn/libgdn.so, into the wheel, which is therefore tagged for the platform. No network is used.

The build_ext step compiles gdn._fast (gdn/_fastcall.c against ../include/gdn.h), the optional
native fast path of the per-call marshalling. It needs Python's headers (Debian: python3-dev)
and a C compiler; when it cannot be built (no headers, no gdn.h beside a copy of python/, a
compiler error) the build goes on without it, with a warning, and the package runs its
pure-Python path. On CPython >= 3.11 it uses the stable ABI: the wheel is tagged
cp311-abi3-<platform> (any CPython >= 3.11); older Pythons get their own tag (cp3X-cp3X-...);
a wheel without the extension is py3-none-<platform> (libgdn itself is loaded through ctypes,
so then one wheel serves every Python 3).

Environment:
  GDN_PREBUILT_LIBRARY  path of an already built libgdn.so to package instead of building one
                        (symlinks are resolved; CMake is then not run at all)
  GDN_CMAKE_ARGS        extra CMake configure options, shell-quoted, e.g. "-DGDN_CUDA=OFF"
  GDN_CUDA_ARCHS        CMAKE_CUDA_ARCHITECTURES, e.g. "90a" or "80;90a" (default: CMakeLists.txt's)
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: every CPU this process may use)

The CMake build directory lives under setuptools' build_temp (python/build/ or build/python/)
and is reused by later builds; delete it to start over.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # bdist_wheel moved into setuptools (70.1); older setups have it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # no wheel support at all: pip cannot build a wheel either
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))  # python/
ROOT = os.path.dirname(HERE)                       # the repository: CMakeLists.txt, src/, include/
LIBRARY = "libgdn.so"
FASTCALL_SOURCE = os.path.join("gdn", "_fastcall.c")  # relative to the package root
# The stable ABI has the buffer protocol (PyObject_GetBuffer) from 3.11 on; free-threaded builds
# have no stable ABI
LIMITED_API = (3, 11)
USE_LIMITED_API = sys.version_info >= LIMITED_API and not sysconfig.get_config_var(
    "Py_GIL_DISABLED")


def _version():
    with open(os.path.join(HERE, "gdn", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _fail(message):
    sys.exit("gdn: cannot build the package: " + message)


def _run(cmd):
    print("gdn: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.check_call(cmd)


def build_libgdn(build_temp):
    """Path of the libgdn shared library to package: $GDN_PREBUILT_LIBRARY, or one built with
    CMake in build_temp/libgdn from the repository at ROOT."""
    prebuilt = os.environ.get("GDN_PREBUILT_LIBRARY")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            _fail(f"GDN_PREBUILT_LIBRARY={prebuilt} is not a file")
        return os.path.realpath(prebuilt)
    if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")) or \
            not os.path.isfile(os.path.join(ROOT, "include", "gdn.h")):
        _fail(f"libgdn's sources are not at {ROOT} (no CMakeLists.txt and include/gdn.h there). "
              "Build the package from a libgdn checkout (`pip install ./python`, or `pip install "
              ".` at its root), or set GDN_PREBUILT_LIBRARY=/path/to/libgdn.so to package a "
              "library built elsewhere")
    cmake = shutil.which("cmake")
    if not cmake:
        _fail("cmake is not on PATH (Debian: apt-get install cmake gcc make), or set "
              "GDN_PREBUILT_LIBRARY=/path/to/libgdn.so")
    build_dir = os.path.join(os.path.abspath(build_temp), "libgdn")
    configure = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGDN_BUILD_TESTS=OFF", "-DGDN_BUILD_TOOLS=OFF", "-DGDN_CUDA=AUTO"]
    archs = os.environ.get("GDN_CUDA_ARCHS")
    # unset: drop any value an earlier build cached, so CMakeLists.txt's default applies
    configure.append(f"-DCMAKE_CUDA_ARCHITECTURES={archs}" if archs
                     else "-UCMAKE_CUDA_ARCHITECTURES")
    configure += shlex.split(os.environ.get("GDN_CMAKE_ARGS", ""))
    _run(configure)
    build = [cmake, "--build", build_dir, "--target", "gdn_shared"]
    if not os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        build += ["-j", str(jobs or 1)]
    _run(build)
    built = os.path.join(build_dir, LIBRARY)
    if not os.path.isfile(built):
        _fail(f"the CMake build did not produce {built}")
    return os.path.realpath(built)  # libgdn.so -> libgdn.so.0 -> libgdn.so.0.1.0: the real file


class BuildPyWithLibgdn(build_py):
    """build_py, then libgdn built (or $GDN_PREBUILT_LIBRARY taken) and copied in as
    gdn/libgdn.so: into the build tree, or beside the sources for an editable install."""

    def _library_target(self):
        if getattr(self, "editable_mode", False):
            return os.path.join(os.path.abspath(self.get_package_dir("gdn")), LIBRARY)
        return os.path.join(self.build_lib, "gdn", LIBRARY)

    def run(self):
        super().run()
        library = build_libgdn(self.get_finalized_command("build").build_temp)
        target = self._library_target()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.remove(target)  # never write through a symlink a stale copy left there
        shutil.copyfile(library, target)
        shutil.copymode(library, target)
        print(f"gdn: packaged {library} as {target}", flush=True)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        target = self._library_target()
        if not getattr(self, "editable_mode", False) and target not in outputs:
            outputs.append(target)
        return outputs


def fastcall_extension(package_root="."):
    """The Extension of gdn._fast (package_root: the directory holding gdn/, relative to the
    current directory), or None when its source or include/gdn.h is not there. optional=True:
    a failed compile is a warning, not a failed build."""
    include = os.path.join(ROOT, "include")
    if not (os.path.isfile(os.path.join(HERE, FASTCALL_SOURCE)) and
            os.path.isfile(os.path.join(include, "gdn.h"))):
        return None
    macros, compile_args = [], []
    if USE_LIMITED_API:
        macros.append(("Py_LIMITED_API", "0x%02X%02X0000" % LIMITED_API))
    if sysconfig.get_platform().startswith(("linux", "macosx")):
        compile_args = ["-std=c11", "-O2"]
    return Extension("gdn._fast", sources=[os.path.join(package_root, FASTCALL_SOURCE)],
                     depends=[os.path.join(package_root, "gdn", "_fastcall_args.h")],
                     include_dirs=[include], define_macros=macros,
                     extra_compile_args=compile_args, py_limited_api=USE_LIMITED_API,
                     optional=True)


class BinaryDistribution(Distribution):
    """The package carries a native library: a platform wheel, installed into platlib."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibgdn}
if bdist_wheel is not None:
    class BdistWheelAnyPython(bdist_wheel):
        """Tags the wheel py3-none-<platform> when it holds no gdn._fast (libgdn is loaded with
        ctypes, not linked against any one Python's ABI); with it, cp311-abi3-<platform> (the
        stable ABI) or this Python's own tag."""

        def _has_fastcall(self):
            if not self.distribution.ext_modules:
                return False
            build_ext = self.get_finalized_command("build_ext")
            return any(os.path.isfile(p) for p in build_ext.get_outputs())

        def get_tag(self):
            tag = super().get_tag()
            if not self._has_fastcall():
                return ("py3", "none", tag[2])
            if USE_LIMITED_API:
                return ("cp%d%d" % LIMITED_API, "abi3", tag[2])
            return tag

    cmdclass["bdist_wheel"] = BdistWheelAnyPython


def setup_gdn(package_root=".", **kwargs):
    """setup() for the gdn package found in package_root (relative to the current directory:
    "." here, "python" from the repository root)."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    extension = fastcall_extension(package_root)
    if extension is None:
        print("gdn: not building gdn._fast (the native fast path): "
              f"{os.path.join(HERE, FASTCALL_SOURCE)} or {os.path.join(ROOT, 'include', 'gdn.h')} "
              "is missing; the package runs its pure-Python path", flush=True)
    setup(name="gdn", version=_version(),
          description="Gated DeltaNet kernels (libgdn) for NumPy arrays and PyTorch tensors",
          long_description=readme, long_description_content_type="text/markdown",
          python_requires=">=3.9", install_requires=["numpy"],
          packages=["gdn"], package_dir={"": package_root},
          package_data={"gdn": [LIBRARY]}, include_package_data=False, zip_safe=False,
          ext_modules=[extension] if extension is not None else [],
          distclass=BinaryDistribution, cmdclass=cmdclass, **kwargs)


if __name__ == "__main__":
    setup_gdn()
