#!/usr/bin/env bash
# One short GPU-machine call that checks what needs a GPU, most important first, for when device
# time is scarce. Parts, in order (GDN_SESSION_PARTS picks some; default all):
#   cuda_test    the fast-mode CUDA test (tests/test_cuda_fast.c)
#   bench        `gdn bench` prefill rows, both precision modes
#   variants     `gdn bench` fast prefill rows under each state-pass override (GDN_BENCH_VARIANTS:
#                space-separated env assignments joined by commas, e.g. "GDN_CUDA_FUSED=0
#                GDN_CUDA_STATE_PASS=wgmma,GDN_CUDA_FUSED=0"; default those two and wgmma fused)
#   pytest       the Python GPU tests (HF transformers model, torch custom ops and CUDA graphs,
#                FLA parity, precision against FLA); GDN_PYTEST_TIMEOUT seconds (default 300),
#                GDN_PYTEST_FILES a subset (names under python/tests)
#   overhead     the call-overhead benchmark, with the native fast path built here
#                (GDN_OVERHEAD_ARGS: its options, e.g. --cases decode,conv_update)
#   parts        where a decode call's host time goes (bench/py_host_parts.py)
#   fla_tests    FLA's own test file with libgdn swapped in (GDN_FLA_TESTS_TIMEOUT, default 200)
#   fla_prefill  the FLA prefill comparison with peer columns, one round (GDN_BENCH_ROWS picks
#                rows, GDN_BENCH_PEERS=0 leaves the peers out; GDN_FLA_PREFILL_TIMEOUT)
#   profile      (asked for by name only) per-kernel times of prefill rows, bench/profile_prefill.py:
#                GDN_PROFILE_ROWS "T,H,HV ..." (default "8192,16,32 131072,2,4"), each under the
#                default plan and under each assignment of GDN_PROFILE_VARIANTS (e.g.
#                "GDN_CUDA_TAIL=0"), GDN_PRECISIONS its modes (default fast)
# An sm_90a build of the library comes first (and of gdn._fast where Python's headers are).
# Wheels in .whl (e.g. einops for FLA's tests) are installed first. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
parts=" ${GDN_SESSION_PARTS:-cuda_test bench variants pytest overhead parts fla_tests fla_prefill} "
want() { [[ $parts == *" $1 "* ]] && echo "== $1 $(date +%T)"; }
nvidia-smi -L
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{ cmake -S . -B build -DGDN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGDN_WERROR=ON &&
  cmake --build build -j"$(nproc)" --target gdn gdn_shared test_cuda_fast; } > "$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
echo "== build ok $(date +%T)"
export GDN_LIBRARY=$PWD/build/libgdn.so PYTHONUNBUFFERED=1
fast=$( (cd python && python3 setup.py -q build_ext --build-lib /tmp/gdnfast/lib \
  --build-temp /tmp/gdnfast/tmp > "$out/fastcall_build.log" 2>&1); ls /tmp/gdnfast/lib/gdn/_fast.* 2>/dev/null | head -1)
[ -n "$fast" ] && export GDN_FASTCALL=$fast
echo "gdn._fast: ${fast:-not built ($(tail -1 "$out/fastcall_build.log"))}"
if want cuda_test; then
  timeout 150 ./build/tests/test_cuda_fast > "$out/test_cuda_fast.txt" 2>&1
  echo "test_cuda_fast rc=$?"; grep -E "fast mode|FAIL|passed" "$out/test_cuda_fast.txt" | head -12
fi
if want bench; then
  timeout 40 ./build/tools/gdn bench --backend cuda --op prefill --json "$out/bench.json" \
    > "$out/bench.txt" 2>&1; tail -16 "$out/bench.txt"
fi
if want variants; then
  for v in ${GDN_BENCH_VARIANTS:-GDN_CUDA_FUSED=0 GDN_CUDA_STATE_PASS=wgmma GDN_CUDA_STATE_PASS=wgmma,GDN_CUDA_FUSED=0}; do
    echo "-- ${v//,/ }"
    env ${v//,/ } timeout 40 ./build/tools/gdn bench --backend cuda --op prefill --precision fast \
      > "$out/bench_${v//[=,]/_}.txt" 2>&1; tail -8 "$out/bench_${v//[=,]/_}.txt"
  done
fi
if want pytest; then
  (export PYTHONPATH=${PYTHONPATH:-}:python
   files=${GDN_PYTEST_FILES:-test_gpu_hf.py test_gpu_torch.py test_gpu_fla.py test_gpu_precision.py}
   timeout "${GDN_PYTEST_TIMEOUT:-300}" python3 -m pytest -q -s -rfs -p no:cacheprovider --durations=12 \
     ${files//test_/python/tests/test_} > "$out/pytest_gpu.txt" 2>&1
   grep -E "error vs|logits|passed|failed|^FAILED|^SKIPPED|Error" "$out/pytest_gpu.txt" | head -40)
fi
if want overhead; then
  PYTHONPATH=${PYTHONPATH:-}:python timeout 60 python3 bench/py_overhead.py ${GDN_OVERHEAD_ARGS:-} > "$out/py_overhead.txt" 2>&1
  tail -12 "$out/py_overhead.txt"
fi
if want parts; then
  PYTHONPATH=${PYTHONPATH:-}:python timeout 60 python3 bench/py_host_parts.py > "$out/py_host_parts.txt" 2>&1
  cat "$out/py_host_parts.txt"
fi
if want fla_tests; then
  # FLA's tests of its own kernels, which the swap does not touch, are left out unless
  # GDN_FLA_TESTS_SELECT says otherwise ("" runs them all)
  GDN_FLA_TESTS_SELECT=${GDN_FLA_TESTS_SELECT-not test_gate and not prepare_wy and not flash_qla and not blackwell} \
    GDN_FLA_TESTS_TIMEOUT=${GDN_FLA_TESTS_TIMEOUT:-200} timeout 300 bash bench/fla_tests.sh
fi
if want profile; then # (not in the default parts)
  for row in ${GDN_PROFILE_ROWS:-8192,16,32 131072,2,4}; do
    for v in "" ${GDN_PROFILE_VARIANTS:-}; do
      echo "-- ${row//,/ \/ } ${v:-default}"
      env ${v//,/ } GDN_PRECISIONS=${GDN_PRECISIONS:-fast} timeout 60 \
        python3 bench/profile_prefill.py ${row//,/ } 2>&1 | grep -E "ms of kernels|^ +[0-9.]+ us"
    done
  done
fi
if want fla_prefill; then
  GDN_BENCH_ROUNDS=1 timeout "${GDN_FLA_PREFILL_TIMEOUT:-200}" python3 bench/fla_prefill.py \
    "$out/fla_prefill.json" > "$out/fla_prefill.txt" 2>&1
  grep -v TileLang "$out/fla_prefill.txt" | tail -24
fi
exit 0
