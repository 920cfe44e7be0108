#!/usr/bin/env bash
# FLA's GDN tests (tests/ops/test_gdn.py of its checkout in .fla) with libgdn's functions in
# place of FLA's (bench/fla_test_swap.py), on the GPU machine after a build in ./build. Prints
# the failures, pytest's summary and the plugin's sorting of them: tests whose body calls
# .backward() (libgdn has none yet) and the others, which must be none. Log: $OUT/fla_tests.txt.
# GDN_FLA_TESTS_SELECT: a pytest -k expression (e.g. leaving out the tests of FLA's own kernels
# that the swap does not touch, whose Triton autotuning takes minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .fla/tests/ops/test_gdn.py ] || { echo "no .fla/tests/ops/test_gdn.py"; exit 0; }
# FLA pinned to its Triton kernels; its GQA cases run too (FLA_DISABLE_BACKEND_DISPATCH=1)
(cd .fla && export GDN_LIBRARY=../build/libgdn.so FLA_FLASH_QLA=0 FLA_DISABLE_BACKEND_DISPATCH=1 \
   PYTHONPATH=.:../python:../bench${PYTHONPATH:+:$PYTHONPATH} &&
 timeout "${GDN_FLA_TESTS_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider \
   -p fla_test_swap ${GDN_FLA_PLUGINS:-} -rf ${GDN_FLA_TESTS_SELECT:+-k "$GDN_FLA_TESTS_SELECT"} \
   tests/ops/test_gdn.py) > "$out/fla_tests.txt" 2>&1
grep -E "^(FAILED|ERROR)" "$out/fla_tests.txt" | cut -c1-220 | head -60
tail -1 "$out/fla_tests.txt"
grep "^libgdn swap:" "$out/fla_tests.txt" | head -30
