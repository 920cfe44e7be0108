"""A pytest plugin that runs FLA's own GDN tests against libgdn: FLA's chunk_gated_delta_rule
and fused_recurrent_gated_delta_rule are replaced by libgdn's before the test module imports
them. From the repository root, with FLA's checkout in .fla (never committed):

    cd .fla && GDN_LIBRARY=../build/libgdn.so PYTHONPATH=.:../python:../bench \\
        python3 -m pytest -p fla_test_swap tests/ops/test_gdn.py

libgdn has no backward yet: a test whose body calls .backward() fails on libgdn's outputs
(they carry no autograd history). The terminal summary sorts the failures into those tests and
the others (the line "libgdn swap: ..."), which bench/fla_tests.sh reports.
"""
import inspect

import fla.ops.gated_delta_rule as fla_gdr

import gdn

fla_gdr.chunk_gated_delta_rule = gdn.chunk_gated_delta_rule
fla_gdr.fused_recurrent_gated_delta_rule = gdn.fused_recurrent_gated_delta_rule

_failed = {"backward": [], "other": []}


def _calls_backward(item):
    try:
        return ".backward(" in inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False


def pytest_runtest_logreport(report):
    if report.failed:
        kind = "backward" if getattr(report, "gdn_backward", False) else "other"
        _failed[kind].append(report.nodeid)


def pytest_configure(config):
    config.pluginmanager.register(_Tagger(), "gdn_backward_tagger")


class _Tagger:
    import pytest as _pytest

    @_pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        outcome.get_result().gdn_backward = _calls_backward(item)


def pytest_terminal_summary(terminalreporter):
    b, o = _failed["backward"], _failed["other"]
    terminalreporter.write_line(f"libgdn swap: {len(b)} failed tests call .backward() (libgdn has "
                                f"none yet), {len(o)} other failures")
    for nodeid in o:
        terminalreporter.write_line(f"libgdn swap: other failure: {nodeid}")
