#!/usr/bin/env bash
# FLA's GDN tests (tests/ops/test_gdn.py of its checkout in .fla) with libgdn's functions in
# place of FLA's (bench/fla_test_swap.py), on the GPU machine after a build in ./build. Prints
# pytest's summary and how many failures need a backward pass (libgdn has none yet): those
# raise "does not require grad" or "element 0 of tensors". Log: $OUT/fla_tests.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .fla/tests/ops/test_gdn.py ] || { echo "no .fla/tests/ops/test_gdn.py"; exit 0; }
(cd .fla && GDN_LIBRARY=../build/libgdn.so PYTHONPATH=.:../python:../bench FLA_FLASH_QLA=0 \
  timeout "${GDN_FLA_TESTS_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider -p fla_test_swap -rf tests/ops/test_gdn.py) \
  > "$out/fla_tests.txt" 2>&1
tail -1 "$out/fla_tests.txt"
failed=$(grep -c "^FAILED" "$out/fla_tests.txt")
backward=$(grep "^FAILED" "$out/fla_tests.txt" | grep -c -E "does not require grad|element 0 of tensors")
echo "FLA's test_gdn.py with libgdn: $failed failed, $backward of them need a backward pass"
grep "^FAILED" "$out/fla_tests.txt" | grep -v -E "does not require grad|element 0 of tensors" | head -20
