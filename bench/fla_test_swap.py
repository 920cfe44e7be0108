"""A pytest plugin that runs FLA's own GDN tests against libgdn: FLA's chunk_gated_delta_rule
and fused_recurrent_gated_delta_rule are replaced by libgdn's before the test module imports
them. From the repository root, with FLA's checkout in .fla (never committed):

    cd .fla && GDN_LIBRARY=../build/libgdn.so PYTHONPATH=.:../python:../bench \\
        python3 -m pytest -p fla_test_swap tests/ops/test_gdn.py

Tests that call .backward() on libgdn's outputs fail (libgdn has no backward yet);
bench/fla_tests.sh counts them apart.
"""
import fla.ops.gated_delta_rule as fla_gdr

import gdn

fla_gdr.chunk_gated_delta_rule = gdn.chunk_gated_delta_rule
fla_gdr.fused_recurrent_gated_delta_rule = gdn.fused_recurrent_gated_delta_rule
