#!/usr/bin/env bash
# Iteration loop on the GPU machine: sm_90a-only build, the CUDA tests, gdn check, a per-kernel
# profile of one prefill shape and the FLA prefill comparison. `bash bench/gpu_quick.sh [T H HV]`
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
. bench/cuda_build.sh
cuda_build 90a "$out/build.log" -DGDN_BUILD_TESTS=ON || exit 1
ctest --test-dir build -R "cuda" --output-on-failure > "$out/ctest.log" 2>&1
grep -E "tests passed|Failed|FAIL" "$out/ctest.log" | head -20
./build/tools/gdn check --backend cuda > "$out/check_cuda.txt" 2>&1; tail -1 "$out/check_cuda.txt"
grep -E "fail" "$out/check_cuda.txt" | head
export GDN_LIBRARY=build/libgdn.so PYTHONUNBUFFERED=1
python3 bench/profile_prefill.py "$@" 2>&1 | tail -30
[ -d .fla/fla ] && python3 bench/fla_prefill.py "$out/fla_prefill.json" 2>&1 | tail -18
if [ -n "${GDN_NCU:-}" ] && command -v ncu >/dev/null; then
  timeout 240 ncu --kernel-name "regex:$GDN_NCU" --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 bench/profile_prefill.py "$@" 2>&1 |
    grep -vE "^==PROF==|^  *$| 0(\.00)?$" | tail -45
fi
exit 0
