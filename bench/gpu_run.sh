#!/usr/bin/env bash
# On the GPU machine, in one command: build with CUDA (sm_80 + sm_90a), run every test (CPU and
# GPU; ctest's test_cuda_tile32/64 rerun test_cuda with the decode tile kernel forced), `gdn check
# --backend cuda` (three times: as chosen, then with 32- and 64-wide decode tiles), `gdn bench
# --backend cuda` (decode and prefill rows; decode in the VK layout too), the
# demo, the Python tests, and FLA side by side (decode and prefill) when its
# code is in .fla/. Logs and JSON go to $OUT (or ./gpu-out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
nvidia-smi -L 2>&1 | tee "$out/device.txt"
. bench/cuda_build.sh
cuda_build "80;90a" "$out/build.log" -DGDN_WERROR=ON || exit 1
echo "== build ok"
ctest --test-dir build --output-on-failure > "$out/ctest.log" 2>&1; ctest_rc=$?
grep -E "tests passed|Failed|Skipped|\(Failed\)|\*\*\*" "$out/ctest.log"
./build/tools/gdn check --backend cuda > "$out/check_cuda.txt" 2>&1; check_rc=$?
tail -3 "$out/check_cuda.txt"
# gdn check's problems are small (the decode kernel's warp tiles): its cases again with the tile
# kernel that larger batches run, both widths (ctest's test_cuda_tile32/64 do the same for test_cuda)
for tile in 32 64; do
  GDN_CUDA_DECODE_TILE=$tile ./build/tools/gdn check --backend cuda > "$out/check_cuda_tile$tile.txt" 2>&1 ||
    check_rc="$check_rc+tile$tile"
  grep -E "passed|FAIL|error" "$out/check_cuda_tile$tile.txt" | tail -3
done
./build/tools/gdn bench --backend cuda --op decode --layout vk > "$out/bench_cuda_vk.txt" 2>&1
./build/tools/gdn bench --backend cuda --json "$out/bench_cuda.json" > "$out/bench_cuda.txt" 2>&1
./build/tools/gdn demo --backend cuda --dtype bf16 > "$out/demo_cuda.txt" 2>&1; demo_rc=$?
py_rc=skipped
if python3 -c "import pytest, numpy, torch" 2>/dev/null; then
  GDN_LIBRARY=build/libgdn.so PYTHONPATH=python python3 -m pytest -q -p no:cacheprovider \
    python/tests > "$out/pytest.txt" 2>&1; py_rc=$?
  tail -3 "$out/pytest.txt"
else
  echo "python tests: pytest/numpy/torch not importable here"
fi
fla_rc=skipped
if [ -d .fla/fla ]; then
  GDN_LIBRARY=build/libgdn.so PYTHONUNBUFFERED=1 python3 bench/fla_decode.py "$out/fla_decode.json" \
    > "$out/fla_decode.txt" 2>&1; fla_rc=$?
  GDN_LIBRARY=build/libgdn.so PYTHONUNBUFFERED=1 python3 bench/fla_prefill.py "$out/fla_prefill.json" \
    > "$out/fla_prefill.txt" 2>&1 || fla_rc="$fla_rc+prefill failed"
fi
echo
echo "== summary: ctest rc=$ctest_rc  check rc=$check_rc  demo rc=$demo_rc  pytest rc=$py_rc  fla rc=$fla_rc"
cat "$out/demo_cuda.txt" | tail -9
cat "$out/bench_cuda.txt" | tail -15
sed -n '/bw_fraction/,+4p' "$out/bench_cuda_vk.txt"
[ -f "$out/fla_decode.txt" ] && tail -7 "$out/fla_decode.txt"
[ -f "$out/fla_prefill.txt" ] && tail -18 "$out/fla_prefill.txt"
[ -d .fla/tests ] && bash bench/fla_tests.sh
exit 0
