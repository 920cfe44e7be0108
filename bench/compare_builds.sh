#!/usr/bin/env bash
# Two builds of libgdn on one GPU, timed in one call: `bash bench/compare_builds.sh BASE_DIR
# [ROUNDS]` builds the source tree in BASE_DIR (e.g. a `git worktree add .scratch/base REV`,
# carried to the GPU machine) and this tree (sm_90a + sm_80, -Werror), runs this tree's CUDA tests,
# then `gdn bench --backend cuda` of each build ROUNDS times (default 3), alternating base and
# new, and prints every row's milliseconds side by side (min over the rounds, and new / base).
# GDN_ARCHS picks the CUDA architectures (default "80;90a"), GDN_CTEST_REGEX narrows the CUDA
# tests (default: every test labelled cuda), GDN_BENCH_ARGS adds options to every `gdn bench`
# (e.g. "--op prefill --precision fast"), and GDN_COMPARE_VARIANTS runs the new build's bench
# once more a round under each space-separated variant, a variant being env assignments joined
# by commas (e.g. "GDN_CUDA_BESIDE=0 GDN_CUDA_BESIDE=0,GDN_CUDA_SEGMENT_CHUNKS=32"), each a
# column of its own. Logs and JSON go to $OUT (or ./gpu-out).
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
variants=${GDN_COMPARE_VARIANTS:-}
bench() { # NAME DIR ROUND [ENV ...]
  local name=$1 dir=$2 r=$3; shift 3
  env "$@" ./$dir/tools/gdn bench --backend cuda ${GDN_BENCH_ARGS:-} \
    --json "$out/bench_${name}_$r.json" > "$out/bench_${name}_$r.txt" 2>&1 ||
    echo "bench $name round $r failed"
}
for r in $(seq 1 "$rounds"); do
  bench base build-base "$r"
  bench new build "$r"
  i=0
  for v in $variants; do
    i=$((i + 1)); bench "v$i" build "$r" ${v//,/ }
  done
done
python3 - "$out" "$rounds" $variants <<'EOF'
import json, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rows(which):
    best = {}
    for r in range(1, rounds + 1):
        try:
            data = json.load(open(f"{out}/bench_{which}_{r}.json"))
        except (OSError, ValueError):
            continue
        for row in data:
            key = (row["op"], row.get("B"), row["T"], row["H"], row["HV"], row.get("seqs", 1),
                   row.get("mode", "-"))
            best.setdefault(key, []).append(row["ms"])
    return best
base, new = rows("base"), rows("new")
extra = [rows(f"v{i + 1}") for i in range(len(variants))]
for i, v in enumerate(variants):
    print(f"v{i + 1}: the new build with {v.replace(',', ' ')}")
print(f"{'op':8} {'B':>4} {'T':>7} {'H':>3} {'HV':>3} {'seqs':>4} {'mode':>4} {'base ms (min..max)':>24} "
      f"{'new ms (min..max)':>24} {'new/base':>8}" + "".join(f" {f'v{i + 1} ms':>9}" for i in
                                                          range(len(variants))))
nan = [float('nan')]
for key in base:
    b, n = base[key], new.get(key, nan)
    print(f"{key[0]:8} {key[1]:>4} {key[2]:>7} {key[3]:>3} {key[4]:>3} {key[5]:>4} {key[6]:>4} "
          f"{min(b):11.4f}..{max(b):<11.4f} {min(n):11.4f}..{max(n):<11.4f} "
          f"{min(n) / min(b):8.3f}" + "".join(f" {min(x.get(key, nan)):9.4f}" for x in extra))
EOF
exit 0
