#!/usr/bin/env bash
# The CPU backend on a bigger host (the GPU machines' CPUs have AMX): a CPU-only build, the CPU
# tests at every ISA level the host has, `gdn info`, the peaks, and `gdn bench --backend cpu` on 2
# threads (the CPU issue's setting). Usage: bash bench/cpu_run.sh [threads]; results under $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
out=${OUT:-/tmp}
jobs=$(nproc)
cmake -S . -B build-cpu -DGDN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-cpu -j"$jobs" 2>&1 | grep -E "warning|error" || true
./build-cpu/tools/gdn info
echo "== CPU tests"
(cd build-cpu && ctest -L cpu -j4 --output-on-failure 2>&1 | tail -5)
./build-cpu/tests/test_cpu | grep -E "amx|passed|FAIL" | head -20
echo "== the peaks per ISA level on $threads threads"
./build-cpu/tools/gdn bench --backend cpu --threads "$threads" --op peak
echo "== gdn bench --backend cpu --threads $threads"
./build-cpu/tools/gdn bench --backend cpu --threads "$threads" --json "$out/cpu_bench.json"
python3 - "$out/cpu_bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
print("op       dtype isa     B     T  HV        ms   tokens/s  GFLOP/s  peak        peak_frac  vs_base")
for r in rows:
    print(f"{r['op']:8} {r['dtype']:5} {r['isa']:6} {r['B']:3} {r['T']:5} {r['HV']:3} {r['ms']:9.3f} "
          f"{r['tokens_per_s']:10.0f} {r['gflops']:8.1f}  {r['peak']}:{r['peak_gflops']:.0f} "
          f"{r['peak_fraction']:7.3f} {r['vs_baseline']:8.2f}")
PY
