"""gdn's torch custom ops on CUDA: opcheck, torch.compile(fullgraph=True) of a GatedDeltaNet
layer against eager mode, and CUDA-graph capture of a decode step (torch.cuda.graph of the eager
step, and torch.compile's mode="reduce-overhead"), pools included.

Skipped without torch >= 2.4 (torch.library.custom_op), without a CUDA device, or with a libgdn
built without its CUDA backend. The CPU versions are in test_torch_ops.py, whose layer and
inputs these tests reuse.
"""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import gdn  # noqa: E402
from gdn import torch_ops  # noqa: E402
from gdn._lib import BACKENDS, lib as _libgdn  # noqa: E402

if not torch_ops.available:
    pytest.skip("torch.library.custom_op needs torch >= 2.4", allow_module_level=True)
if not _libgdn.gdn_backend_available(BACKENDS["cuda"]):  # a CPU-only build on a GPU machine
    pytest.skip("this libgdn has no usable CUDA backend", allow_module_level=True)

from test_torch_ops import (TinyGatedDeltaNet, _all_cases, _same, decode_inputs,  # noqa: E402
                            layer_inputs, op_call)

DEV = "cuda"


def _to_cuda(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def _cuda_cases():
    for p in _all_cases():
        op, args, kwargs = p.values
        kwargs = {n: _to_cuda(a) for n, a in kwargs.items() if n != "chunk_size"}
        yield pytest.param(op, [_to_cuda(a) for a in args], kwargs, id=p.id)


def _cloned(args, kwargs):
    c = lambda x: x.clone() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return [c(a) for a in args], {n: c(a) for n, a in kwargs.items()}


@pytest.mark.parametrize("op, args, kwargs", list(_cuda_cases()))
def test_opcheck_cuda(op, args, kwargs):
    torch.library.opcheck(getattr(torch.ops.gdn, op), *op_call(op, *_cloned(args, kwargs)))


@pytest.mark.parametrize("op, args, kwargs", list(_cuda_cases()))
def test_op_matches_public_function_cuda(op, args, kwargs):
    a1, k1 = _cloned(args, kwargs)
    a2, k2 = _cloned(args, kwargs)
    want = getattr(gdn, op)(*a1, **k1)
    got = getattr(torch_ops, op)(*a2, **k2)
    torch.cuda.synchronize()
    assert _same(got, want)
    for x, y in zip(a1 + list(k1.values()), a2 + list(k2.values())):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)


def _layer(dtype):
    layer = TinyGatedDeltaNet().to(DEV)
    if dtype != torch.float32:  # activations, projections and norm weight in dtype;
        for m in (layer.in_proj_qkvz, layer.in_proj_ba, layer.out_proj):  # gating params f32
            m.to(dtype)
        layer.conv_weight.data = layer.conv_weight.data.to(dtype)
        layer.norm_weight.data = layer.norm_weight.data.to(dtype)
    return layer


def _close(got, want, dtype):
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_compiled_layer_matches_eager_cuda(dtype):
    torch._dynamo.reset()
    layer = _layer(dtype)
    x, h0, c0 = layer_inputs(layer, device=DEV)
    x, c0 = x.to(dtype), c0.to(dtype)
    with torch.no_grad():
        explanation = torch._dynamo.explain(layer)(x, h0, c0)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(layer, fullgraph=True)
        want, got = layer(x, h0, c0), compiled(x, h0, c0)
    for a, b in zip(got, want):
        _close(a, b, dtype)


def _decode_setup():
    layer = TinyGatedDeltaNet().to(DEV)
    x, conv_pool, state_pool, slots = decode_inputs(layer, device=DEV)
    steps = [x + 0.5 * i for i in range(4)]
    return layer, steps, conv_pool, state_pool, slots


def _eager_decode(layer, steps, conv_pool, state_pool, slots):
    """Eager outputs and final pools, on copies of the pools."""
    conv_pool, state_pool = conv_pool.clone(), state_pool.clone()
    with torch.no_grad():
        outs = [layer.decode(x, conv_pool, state_pool, slots) for x in steps]
    return outs, conv_pool, state_pool


def test_cuda_graph_capture_of_eager_decode_step():
    """torch.cuda.graph of one decode step (static input, pools and slots), replayed once per
    token: the outputs and the pools match eager calls."""
    layer, steps, conv_pool, state_pool, slots = _decode_setup()
    want, want_conv, want_state = _eager_decode(layer, steps, conv_pool, state_pool, slots)
    static_x = steps[0].clone()
    with torch.no_grad():
        # warm up on a side stream (libgdn reserves its workspace), on scratch pools
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                layer.decode(static_x, conv_pool.clone(), state_pool.clone(), slots)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = layer.decode(static_x, conv_pool, state_pool, slots)
    got = []
    for x in steps:
        static_x.copy_(x)
        graph.replay()
        got.append(static_out.clone())
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        _close(a, b, torch.float32)
    _close(conv_pool, want_conv, torch.float32)
    _close(state_pool, want_state, torch.float32)


class _DecodeWithPools(torch.nn.Module):
    """The pools as buffers: static addresses, which cudagraph trees may update in place."""

    def __init__(self, layer, conv_pool, state_pool, slots):
        super().__init__()
        self.layer = layer
        self.register_buffer("conv_pool", conv_pool)
        self.register_buffer("state_pool", state_pool)
        self.register_buffer("slots", slots)

    def forward(self, x):
        return self.layer.decode(x, self.conv_pool, self.state_pool, self.slots)


def test_compiled_decode_reduce_overhead():
    """torch.compile(mode="reduce-overhead"): inductor's CUDA graphs (cudagraph trees) of the
    decode step, pools updated in place across replays, against eager."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    layer, steps, conv_pool, state_pool, slots = _decode_setup()
    want, want_conv, want_state = _eager_decode(layer, steps, conv_pool, state_pool, slots)
    module = _DecodeWithPools(layer, conv_pool, state_pool, slots)
    compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
    got = []
    with torch.no_grad():
        for x in steps:
            torch.compiler.cudagraph_mark_step_begin()
            got.append(compiled(x).clone())
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        _close(a, b, torch.float32)
    _close(module.conv_pool, want_conv, torch.float32)
    _close(module.state_pool, want_state, torch.float32)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
