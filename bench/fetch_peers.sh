#!/usr/bin/env bash
# Fetches the peer GDN prefill kernels that bench/peer_kernels.py calls into .peers/ (ignored by
# git; name it in the GPU call's carry). Run here, where PyPI answers; nothing is built.
#
# What fits the GPU machine's carry limit (64 MiB for the whole tree, libgdn's sources and .fla
# included):
#  - FlashQLA 0.1.3 over TileLang 0.1.15, apache-tvm-ffi 0.1.12 (tilelang wants <0.1.13) and
#    z3-solver 4.15.4.0 (libtvm_compiler.so links libz3.so.4.15): 78 MiB as wheels, so the wheels
#    are unpacked (python3 -m zipfile -e), the parts never read at run time dropped (TVM's C++
#    sources, CUTLASS's tools, z3's headers and z3 binary, z3's second copy of libz3.so, made a
#    link) and the rest packed as .peers/flashqla.tar.xz (about 34 MiB). peer_kernels.load_peers()
#    unpacks it on first use (into $GDN_PEERS_SITE, default /tmp/gdn_peers_site).
#    Everything else it needs is on the GPU machine already (torch, triton, numpy, ml-dtypes,
#    cloudpickle, psutil, tqdm, typing-extensions; nvcc for TileLang's kernels).
#  - FlashInfer does not fit: flashinfer-python 0.7.4 is a 97 MiB wheel (716 MiB unpacked), and
#    its SM90 GDN kernels need CuTe DSL, nvidia-cutlass-dsl-libs-cu13 4.8.1: 88 MiB as a wheel,
#    238 MiB unpacked, 61 MiB even as .tar.xz. Not fetched.
#
# Wheels for CPython 3.12 on x86_64 (the GPU machine's python3 is 3.12); pinned by version and
# sha256. PEERS_PYTHON_VERSION=3.x fetches for another (the hashes then no longer match: the
# tvm-ffi wheel is per Python version; set PEERS_NO_HASHES=1 to skip the check).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PEERS_PYTHON_VERSION:-3.12}

grep -qx '/.peers/' .gitignore || { echo ".gitignore does not ignore /.peers/" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/req.txt" <<'EOF'
flash-qla==0.1.3 --hash=sha256:4a76f76edfc98e0f161c2f0fee73f7d7267276d954339dec4fb5d2e077aff061
tilelang==0.1.15 --hash=sha256:ca021a3450ad84b8fe7deb1b659c8d3d2e4b0855fdb59e2992a5349acf019881
apache-tvm-ffi==0.1.12 --hash=sha256:dc0acd7eeb0e451d5e3f686af3ba0b495fdbf97b5b54cf9a0f770cdafe0e691a
z3-solver==4.15.4.0 --hash=sha256:7e103a6f203f505b8b8b8e5c931cc407c95b61556512d4921c1ddc0b3f41b08e
EOF
if [ -n "${PEERS_NO_HASHES:-}" ]; then sed -i 's/ --hash=.*//' "$tmp/req.txt"; fi

python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$tmp/whl" -r "$tmp/req.txt"
ls -l "$tmp/whl"

mkdir "$tmp/site"
for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
s=$tmp/site
rm -rf "$s"/tilelang/3rdparty/tvm/src "$s"/tilelang/3rdparty/cutlass/tools "$s"/z3/include \
  "$s"/z3_solver-*.data
if cmp -s "$s/z3/lib/libz3.so" "$s/z3/lib/libz3.so.4.15"; then
  ln -sf libz3.so.4.15 "$s/z3/lib/libz3.so"
fi

rm -rf .peers
mkdir .peers
echo "packing (xz -9e, a few minutes)..."
tar -C "$s" --owner=0 --group=0 -cf - . | xz -9e -T1 > .peers/flashqla.tar.xz
du -sh .peers
