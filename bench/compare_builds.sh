#!/usr/bin/env bash
# Two builds of libgdn on one GPU, timed in one call: `bash bench/compare_builds.sh BASE_DIR
# [ROUNDS]` builds the source tree in BASE_DIR (e.g. a `git worktree add .scratch/base REV`,
# carried to the GPU machine) and this tree (sm_90a + sm_80, -Werror), runs this tree's CUDA tests,
# then `gdn bench --backend cuda` of each build ROUNDS times (default 3), alternating base and
# new, and prints every row's milliseconds side by side (min over the rounds, and new / base).
# GDN_ARCHS picks the CUDA architectures (default "80;90a"), GDN_CTEST_REGEX narrows the CUDA
# tests (default: every test labelled cuda). Logs and JSON go to $OUT (or
# ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: bench/compare_builds.sh BASE_DIR [ROUNDS]}
rounds=${2:-3}
out=${OUT:-gpu-out}
mkdir -p "$out"
nvidia-smi -L 2>&1 | tee "$out/device.txt"
build() { # SRC BUILD_DIR LOG
  { cmake -S "$1" -B "$2" -DGDN_CUDA=ON -DGDN_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="${GDN_ARCHS:-80;90a}" &&
    cmake --build "$2" -j"$(nproc)"; } > "$3" 2>&1 || { tail -40 "$3"; return 1; }
}
build "$base" build-base "$out/build_base.log" & base_pid=$!
build . build "$out/build_new.log" || exit 1
wait $base_pid || exit 1
echo "== builds ok"
ctest --test-dir build -L cuda ${GDN_CTEST_REGEX:+-R "$GDN_CTEST_REGEX"} --output-on-failure \
  > "$out/ctest_cuda.log" 2>&1
grep -E "tests passed|\(Failed\)|\*\*\*Failed" "$out/ctest_cuda.log"
./build/tools/gdn check --backend cuda > "$out/check_cuda.txt" 2>&1; tail -1 "$out/check_cuda.txt"
for r in $(seq 1 "$rounds"); do
  for which in base new; do
    dir=build; [ $which = base ] && dir=build-base
    ./$dir/tools/gdn bench --backend cuda --json "$out/bench_${which}_$r.json" \
      > "$out/bench_${which}_$r.txt" 2>&1 || echo "bench $which round $r failed"
  done
done
python3 - "$out" "$rounds" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(which):
    best = {}
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/bench_{which}_{r}.json")):
            key = (row["op"], row.get("B"), row["T"], row["H"], row["HV"], row.get("seqs", 1),
                   row.get("mode", "-"))
            best.setdefault(key, []).append(row["ms"])
    return best
base, new = rows("base"), rows("new")
print(f"{'op':8} {'B':>4} {'T':>7} {'H':>3} {'HV':>3} {'seqs':>4} {'mode':>4} {'base ms (min..max)':>24} "
      f"{'new ms (min..max)':>24} {'new/base':>8}")
for key in base:
    b, n = base[key], new.get(key, [float('nan')])
    print(f"{key[0]:8} {key[1]:>4} {key[2]:>7} {key[3]:>3} {key[4]:>3} {key[5]:>4} {key[6]:>4} "
          f"{min(b):11.4f}..{max(b):<11.4f} {min(n):11.4f}..{max(n):<11.4f} "
          f"{min(n) / min(b):8.3f}")
EOF
exit 0
