#!/usr/bin/env bash
# Bytes and unit utilisation of each libgdn prefill kernel, by Nsight Compute, on the GPU machine:
# `bash bench/ncu_prefill.sh [T H HV ...]` (default: the 131072/4, 32768/8 and 8192/32 rows of the
# prefill table). One call's kernels per shape (preparation, maps pass, stitch, output pass):
# duration (under the profiler's locked clocks), DRAM bytes read and written, DRAM throughput and
# the tensor pipe's busy cycles as a share of peak, L1 throughput, warp slots filled.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/cuda_build.sh
cuda_build 90a /tmp/ncu_build.log -DGDN_BUILD_TESTS=OFF || exit 1
export GDN_LIBRARY=$PWD/build/libgdn.so PYTHONUNBUFFERED=1
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
metrics+=",l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active"
shapes=("$@")
[ ${#shapes[@]} -ge 3 ] || shapes=(131072 2 4 32768 4 8 8192 16 32)
for ((i = 0; i + 2 < ${#shapes[@]}; i += 3)); do
  echo "== T=${shapes[i]} H=${shapes[i+1]} HV=${shapes[i+2]}"
  # profile_prefill.py looks for FLA in ./.fla: run it from /tmp so that only libgdn runs
  timeout 300 ncu --kernel-name "regex:chunk_prep|chunk_state|stitch" --launch-count 4 \
    --metrics "$metrics" bash -c "cd /tmp && python3 $PWD/bench/profile_prefill.py \
    ${shapes[i]} ${shapes[i+1]} ${shapes[i+2]}" 2>&1 |
    grep -E "^  [a-zA-Z_].*\(|gpu__|dram__|sm__|l1tex" | sed -E 's/ +/ /g' | cut -c1-110
done
