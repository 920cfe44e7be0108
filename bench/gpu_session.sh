#!/usr/bin/env bash
# One short GPU-machine call that checks what needs a GPU, most important first, for when device
# time is scarce: an sm_90a build of the library, the gdn tool and the fast-mode CUDA test;
# `gdn bench` prefill rows (both precision modes); the Python GPU tests (precision against FLA,
# FLA parity, the HF transformers model, torch custom ops and CUDA graphs); the call-overhead
# benchmark; FLA's own test file with libgdn swapped in; the FLA prefill comparison (one round).
# Wheels in .whl (e.g. einops for FLA's tests) are installed first. Logs go to $OUT.
# GDN_SESSION_SHORT=1 stops before FLA's test file and the FLA comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
nvidia-smi -L
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{ cmake -S . -B build -DGDN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGDN_WERROR=ON &&
  cmake --build build -j"$(nproc)" --target gdn gdn_shared test_cuda_fast; } > "$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "== build ok"
timeout 60 ./build/tests/test_cuda_fast > "$out/test_cuda_fast.txt" 2>&1
echo "test_cuda_fast rc=$?"; grep -E "fast mode|FAIL|passed" "$out/test_cuda_fast.txt" | head -12
timeout 40 ./build/tools/gdn bench --backend cuda --op prefill --json "$out/bench.json" \
  > "$out/bench.txt" 2>&1; tail -16 "$out/bench.txt"
export GDN_LIBRARY=$PWD/build/libgdn.so PYTHONUNBUFFERED=1
(export PYTHONPATH=${PYTHONPATH:-}:python; timeout 110 python3 -m pytest -q -s -p no:cacheprovider \
  python/tests/test_gpu_precision.py python/tests/test_gpu_hf.py python/tests/test_gpu_torch.py \
  python/tests/test_gpu_fla.py > "$out/pytest_gpu.txt" 2>&1
 grep -E "error vs|logits|passed|failed|^FAILED|Error" "$out/pytest_gpu.txt" | head -30
 timeout 30 python3 bench/py_overhead.py > "$out/py_overhead.txt" 2>&1; tail -12 "$out/py_overhead.txt")
[ -n "${GDN_SESSION_SHORT:-}" ] && exit 0  # the essentials only
GDN_FLA_TESTS_TIMEOUT=90 timeout 100 bash bench/fla_tests.sh
GDN_BENCH_ROUNDS=1 timeout 70 python3 bench/fla_prefill.py "$out/fla_prefill.json" > "$out/fla_prefill.txt" 2>&1
tail -18 "$out/fla_prefill.txt"
exit 0
