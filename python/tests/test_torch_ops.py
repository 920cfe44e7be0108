"""gdn's torch custom ops (gdn/torch_ops.py), on CPU tensors.

- torch.library.opcheck on every op (schema and mutations, fake implementation against the real
  one, AOT dispatch with dynamic shapes);
- the public functions route to the ops only while torch.compile traces them: eager calls do
  not touch them, and with a torch that has no torch.library.custom_op (or none at all) they
  are plain calls;
- a small GatedDeltaNet layer (projections, causal conv, gating, l2norm, chunked delta rule
  with states, gated RMSNorm) compiled with torch.compile(fullgraph=True) gives eager's outputs,
  without graph breaks; so does a decode step whose state pools are updated in place.
The GPU versions (and CUDA-graph capture) are in test_gpu_torch.py.
"""
import inspect
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import gdn  # noqa: E402
from gdn import torch_ops  # noqa: E402


def _import_torch_compile():
    """Imports torch._dynamo now. Its import of triton imports setuptools, which fails where
    setuptools' distutils shim has turned itself off, as it does for the rest of the process
    once anything asks importlib.util.find_spec("pip") (test_packaging.py does, at collection)
    in a virtual environment over system packages; setuptools' stdlib mode imports cleanly."""
    if "torch._dynamo" in sys.modules or not torch_ops.available:
        return
    before = os.environ.get("SETUPTOOLS_USE_DISTUTILS")
    os.environ["SETUPTOOLS_USE_DISTUTILS"] = before or "stdlib"
    try:
        import torch._dynamo  # noqa: F401
        import torch.testing._internal.optests  # noqa: F401  (opcheck's)
    finally:
        if before is None:
            del os.environ["SETUPTOOLS_USE_DISTUTILS"]


_import_torch_compile()

needs_ops = pytest.mark.skipif(not torch_ops.available,
                               reason="torch.library.custom_op needs torch >= 2.4")


def test_ops_registered_exactly_when_custom_op_exists():
    has_custom_op = hasattr(torch.library, "custom_op") and hasattr(torch.library,
                                                                    "register_fake")
    assert torch_ops.available == has_custom_op
    if has_custom_op:
        for name in torch_ops.OPS:
            assert getattr(torch.ops.gdn, name).default is not None
    else:  # older torch: the public functions never route
        assert torch_ops.compiling() is False


def test_public_functions_are_plain_calls_without_custom_op(monkeypatch):
    """What a torch without custom_op gets (compiling() is constantly False there): the public
    functions run as they always did."""
    monkeypatch.setattr(torch_ops, "compiling", lambda: False)
    x = torch.randn(3, 8)
    assert torch.allclose(gdn.l2norm(x), x / x.norm(dim=-1, keepdim=True), atol=1e-5)


# ---- inputs ----------------------------------------------------------------------------------

def _gen(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda *s: torch.randn(*s, generator=g)


def delta_inputs(seed=0, B=2, T=9, H=2, HV=4, K=16, V=8, dtype=torch.float32):
    r = _gen(seed)
    q, k = r(B, T, H, K).to(dtype), r(B, T, H, K).to(dtype)
    k = torch.nn.functional.normalize(k.float(), dim=-1).to(dtype)
    v = r(B, T, HV, V).to(dtype)
    g = -torch.sigmoid(r(B, T, HV))
    beta = torch.sigmoid(r(B, T, HV))
    return q, k, v, g, beta


def _delta_cases():
    q, k, v, g, beta = delta_inputs()
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    r = _gen(1)
    h0 = 0.3 * r(B, HV, K, V)
    pool = 0.3 * r(5, HV, K, V)
    slots = torch.tensor([3, -1], dtype=torch.int32)
    cu = torch.tensor([0, 4, 9, 18], dtype=torch.int64)
    packed = [t.reshape(1, B * T, *t.shape[2:]) for t in (q, k, v, g, beta)]
    h0_varlen = 0.3 * r(3, HV, K, V)
    A_log, dt_bias, a, b = r(HV), r(HV), r(B, T, HV), r(B, T, HV)
    bf = delta_inputs(dtype=torch.bfloat16)
    chunk = {
        "plain": ((q, k, v, g, beta), {}),
        "initial_and_final_state": ((q, k, v, g, beta),
                                    dict(initial_state=h0, output_final_state=True)),
        "final_state_from_zeros_vk": ((q, k, v, g, beta),
                                      dict(output_final_state=True, state_v_first=True)),
        "state_pool_in_place": ((q, k, v, g, beta),
                                dict(state_pool=pool, state_indices=slots,
                                     output_final_state=True)),
        "varlen": (tuple(packed), dict(cu_seqlens=cu, initial_state=h0_varlen,
                                       output_final_state=True, scale=0.5)),
        "gate_in_kernel_l2norm": ((q, k, v, a, b),
                                  dict(use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                                       use_beta_sigmoid_in_kernel=True,
                                       use_qk_l2norm_in_kernel=True)),
        "bf16": (bf, dict(output_final_state=True, chunk_size=16)),
        "strided_initial_state": ((q, k, v, g, beta),
                                  dict(initial_state=h0.transpose(-1, -2).contiguous()
                                       .transpose(-1, -2), output_final_state=True)),
    }
    d = delta_inputs(T=1)
    recurrent = {
        "decode_pool": (d, dict(state_pool=pool, state_indices=slots,
                                use_qk_l2norm_in_kernel=True)),
        "no_gates": (d[:3], dict(initial_state=h0, output_final_state=True)),
        "final_state_only": ((q, k, v, g, beta), dict(output_final_state=True)),
        "pool_with_flags": (d, dict(state_pool=pool, state_indices=torch.tensor([0, 1]),
                                    has_initial_state=torch.tensor([True, False]),
                                    output_final_state=True)),
    }
    return chunk, recurrent


def _conv_cases():
    r = _gen(2)
    B, C, T, W = 2, 12, 7, 4
    x, w, bias = r(B, C, T), r(C, W), r(C)
    h0, wide = r(B, C, W - 1), r(B, C, W + 2)
    pool = r(4, C, W - 1)
    fn = {
        "plain": ((x, w), {}),
        "silu_bias_w3d": ((x, w[:, None, :], bias), dict(activation="silu")),
        "initial_final": ((x, w, bias), dict(initial_states=h0, return_final_states=True,
                                             activation="silu")),
        "wide_states": ((x, w), dict(initial_states=wide, return_final_states=True)),
        "strided_initial_states": ((x, w), dict(initial_states=r(B, W - 1, C).transpose(1, 2),
                                                return_final_states=True)),
        "final_states_out": ((x, w), dict(return_final_states=True,
                                          final_states_out=torch.zeros(B, C, W - 1))),
        "pool_varlen": ((r(C, 11), w, bias),
                        dict(conv_states=pool, cache_indices=torch.tensor([2, 0, -1]),
                             has_initial_state=torch.tensor([True, False, True]),
                             query_start_loc=torch.tensor([0, 3, 8, 11], dtype=torch.int32),
                             activation="silu")),
        "pool_return_final": ((x, w), dict(conv_states=pool, cache_indices=torch.tensor([1, 3]),
                                           return_final_states=True)),
        "seq_idx": ((x, w, bias), dict(seq_idx=torch.tensor([[0, 0, 0, 1, 1, 2, 2]] * 2))),
        "channels_last_x": ((r(B, T, C).transpose(1, 2), w), dict(activation="silu")),
    }
    update = {
        "decode_2d": ((r(3, C), r(5, C, W - 1), w, bias),
                      dict(activation="silu", conv_state_indices=torch.tensor([4, -1, 0]))),
        "decode_3d": ((r(3, C, 1), r(3, C, W - 1), w), {}),
        "several_tokens": ((r(3, C, 3), r(3, C, W - 1), w, bias), dict(activation="silu")),
        "wide_state": ((r(3, C), r(3, C, W + 1), w), dict(conv_state_indices=torch.tensor(
            [2, 0, 1]))),
    }
    return fn, update


def _other_cases():
    r = _gen(3)
    B, T, HV, V = 2, 5, 4, 8
    return {
        "fused_gdn_gating": {
            "a_b": ((r(HV), r(B, T, HV), r(B, T, HV), r(HV)), {}),
            "no_b": ((r(HV), r(B, T, HV), None, r(HV)), dict(threshold=10.0)),
            "neg_eigval": ((r(HV), r(B * T, HV), r(B * T, HV)), dict(allow_neg_eigval=True)),
        },
        "l2norm": {
            "f32": ((r(B, T, HV, V),), {}),
            "bf16_eps": ((r(B, T, V).bfloat16(),), dict(eps=1e-5)),
            "strided": ((r(B, T, 2 * V)[..., ::2],), {}),
        },
        "rms_norm_gated": {
            "gate": ((r(B, T, HV, V), r(B, T, HV, V), r(V)), {}),
            "no_gate": ((r(B, T, V), None, r(V)), dict(eps=1e-5)),
            "gate_first_offset": ((r(B, T, V), r(B, T, V), r(V)),
                                  dict(norm_before_gate=False, weight_offset=True)),
        },
    }


def _all_cases():
    chunk, recurrent = _delta_cases()
    fn, update = _conv_cases()
    groups = {"chunk_gated_delta_rule": chunk, "fused_recurrent_gated_delta_rule": recurrent,
              "causal_conv1d_fn": fn, "causal_conv1d_update": update, **_other_cases()}
    return [pytest.param(op, args, kwargs, id=f"{op}-{case}")
            for op, cases in groups.items() for case, (args, kwargs) in cases.items()]


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _cloned(args, kwargs):
    return [_clone(a) for a in args], {n: _clone(a) for n, a in kwargs.items()}


# ---- 1. opcheck ------------------------------------------------------------------------------

def op_call(op, args, kwargs):
    """(args, kwargs) for torch.ops.gdn.<op> from a public function's call: every argument by
    name (the ops put the optional tensors they write right after the required arguments, with
    no default: torch_ops.py says why), those the call leaves out as None where the op has no
    default for them."""
    bound = inspect.signature(getattr(torch_ops, op)).bind(*args, **kwargs).arguments
    schema = getattr(torch.ops.gdn, op).default._schema
    named = {a.name: bound[a.name] for a in schema.arguments if a.name in bound}
    for a in schema.arguments:
        if a.name not in named and not a.has_default_value():
            named[a.name] = None
    return (), named


@needs_ops
@pytest.mark.parametrize("op, args, kwargs", _all_cases())
def test_opcheck(op, args, kwargs):
    """Schema (what is mutated, no aliasing outputs), fake vs real (shapes, dtypes, strides),
    AOT dispatch with static and dynamic shapes."""
    torch.library.opcheck(getattr(torch.ops.gdn, op), *op_call(op, *_cloned(args, kwargs)))


def _same(a, b):
    """Equal values, shapes, dtypes and devices (strides may differ: the ops give the few
    non-contiguous results of the public functions, a float32 copy of a strided initial state,
    their fakes' layouts; opcheck checks those against the fakes)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            and torch.equal(a, b))


@needs_ops
@pytest.mark.parametrize("op, args, kwargs", _all_cases())
def test_op_matches_public_function(op, args, kwargs):
    """The wrapper around each op (what a compiled graph runs) gives the public function's
    result exactly, including the arrays it mutates and returns (None, or the caller's own
    pool), bit for bit."""
    a1, k1 = _cloned(args, kwargs)
    a2, k2 = _cloned(args, kwargs)
    want = getattr(gdn, op)(*a1, **k1)
    got = getattr(torch_ops, op)(*a2, **k2)
    assert _same(got, want)
    for x, y in zip(a1 + list(k1.values()), a2 + list(k2.values())):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)  # the same in-place updates
    if isinstance(want, tuple):  # a returned pool is the caller's own tensor in both
        for name in ("state_pool", "conv_states", "final_states_out"):
            if name in k1 and want[1] is not None:
                assert (want[1] is k1[name]) == (got[1] is k2[name])


# ---- 2. routing ------------------------------------------------------------------------------

class _RecordOps(torch.utils._python_dispatch.TorchDispatchMode if hasattr(
        torch.utils, "_python_dispatch") else object):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@needs_ops
def test_eager_calls_do_not_go_through_the_ops():
    q, k, v, g, beta = delta_inputs()
    with _RecordOps() as rec:
        gdn.chunk_gated_delta_rule(q, k, v, g, beta)
        gdn.l2norm(q)
    assert not [n for n in rec.names if n.startswith("gdn.")]
    with _RecordOps() as rec:
        torch.ops.gdn.l2norm(q)
    assert "gdn.l2norm.default" in rec.names


# ---- 3. torch.compile of a GatedDeltaNet layer ---------------------------------------------

class TinyGatedDeltaNet(torch.nn.Module):
    """Qwen3-Next's GatedDeltaNet layer in miniature: in_proj -> causal conv (silu) -> q, k, v;
    a, b -> fused_gdn_gating; l2norm(q), l2norm(k); chunked delta rule with states; gated
    RMSNorm with z; out_proj. decode() is one token per sequence on state pools, in place."""

    def __init__(self, hidden=32, H=2, HV=4, K=16, V=8, W=4, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.H, self.HV, self.K, self.V = H, HV, K, V
        self.key_dim, self.value_dim = H * K, HV * V
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.in_proj_qkvz = torch.nn.Linear(hidden, self.conv_dim + self.value_dim, bias=False)
        self.in_proj_ba = torch.nn.Linear(hidden, 2 * HV, bias=False)
        self.conv_weight = torch.nn.Parameter(0.4 * torch.randn(self.conv_dim, 1, W))
        self.A_log = torch.nn.Parameter(torch.log(torch.rand(HV) * 4 + 1))
        self.dt_bias = torch.nn.Parameter(torch.randn(HV) * 0.5)
        self.norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(V))
        self.out_proj = torch.nn.Linear(self.value_dim, hidden, bias=False)

    def _project(self, x):
        qkvz = self.in_proj_qkvz(x)
        qkv, z = qkvz.split([self.conv_dim, self.value_dim], dim=-1)
        b, a = self.in_proj_ba(x).chunk(2, dim=-1)
        return qkv, z, a, b

    def _heads(self, y, lead):
        q, k, v = y.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return (q.reshape(*lead, self.H, self.K), k.reshape(*lead, self.H, self.K),
                v.reshape(*lead, self.HV, self.V))

    def _out(self, o, z, lead):
        o = gdn.rms_norm_gated(o, z.reshape(*lead, self.HV, self.V), self.norm_weight, eps=1e-6)
        return self.out_proj(o.reshape(*lead, self.value_dim))

    def forward(self, x, initial_state, conv_initial):
        B, T, _ = x.shape
        qkv, z, a, b = self._project(x)
        y, conv_final = gdn.causal_conv1d_fn(qkv.transpose(1, 2), self.conv_weight, None,
                                             initial_states=conv_initial,
                                             return_final_states=True, activation="silu")
        q, k, v = self._heads(y.transpose(1, 2), (B, T))
        q, k = gdn.l2norm(q), gdn.l2norm(k)
        g, beta = gdn.fused_gdn_gating(self.A_log, a, b, self.dt_bias)
        o, final = gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=initial_state,
                                              output_final_state=True, use_cache=True,
                                              cu_seqlens_cpu=None)
        return self._out(o, z, (B, T)), final, conv_final

    def decode(self, x, conv_pool, state_pool, slots):
        B = x.shape[0]
        qkv, z, a, b = self._project(x)
        y = gdn.causal_conv1d_update(qkv, conv_pool, self.conv_weight, None, "silu",
                                     conv_state_indices=slots)
        q, k, v = self._heads(y, (B, 1))
        o, _ = gdn.fused_recurrent_gated_delta_rule(
            q, k, v, a[:, None], b[:, None], use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias,
            use_beta_sigmoid_in_kernel=True, state_pool=state_pool, state_indices=slots)
        return self._out(o, z, (B, 1))


def layer_inputs(layer, B=2, T=19, seed=5, device="cpu"):
    r = _gen(seed)
    x = r(B, T, layer.in_proj_qkvz.in_features)
    h0 = 0.2 * r(B, layer.HV, layer.K, layer.V)
    c0 = r(B, layer.conv_dim, layer.conv_weight.shape[-1] - 1)
    return x.to(device), h0.to(device), c0.to(device)


def decode_inputs(layer, B=3, S=5, seed=6, device="cpu"):
    r = _gen(seed)
    x = r(B, layer.in_proj_qkvz.in_features)
    conv_pool = r(S, layer.conv_dim, layer.conv_weight.shape[-1] - 1)
    state_pool = 0.2 * r(S, layer.HV, layer.K, layer.V)
    slots = torch.tensor([4, -1, 1], dtype=torch.int32)
    return [t.to(device) for t in (x, conv_pool, state_pool, slots)]


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def _backend():
    """inductor (the default backend) needs a C++ compiler on CPU: gcc is there in CI images
    with torch; aot_eager (the same graph, no code generation) otherwise."""
    import shutil
    return "inductor" if (shutil.which("g++") or shutil.which("c++")) else "aot_eager"


@needs_ops
def test_compiled_layer_has_no_graph_breaks():
    layer = TinyGatedDeltaNet()
    x, h0, c0 = layer_inputs(layer)
    with torch.no_grad():
        explanation = torch._dynamo.explain(layer)(x, h0, c0)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    gdn_ops = {str(n.target).replace(".default", "") for gm in explanation.graphs
               for n in gm.graph.nodes if str(n.target).startswith("gdn.")}
    assert gdn_ops == {"gdn.causal_conv1d_fn", "gdn.l2norm", "gdn.fused_gdn_gating",
                       "gdn.chunk_gated_delta_rule", "gdn.rms_norm_gated"}


@needs_ops
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad_enabled"])
def test_compiled_layer_matches_eager(grad):
    torch._dynamo.reset()
    layer = TinyGatedDeltaNet()
    x, h0, c0 = layer_inputs(layer)
    compiled = torch.compile(layer, fullgraph=True, backend=_backend())
    with torch.set_grad_enabled(grad):
        want = layer(x, h0, c0)
        got = compiled(x, h0, c0)
        got2 = compiled(*layer_inputs(layer, seed=8))  # same shapes: no recompile
        want2 = layer(*layer_inputs(layer, seed=8))
    for a, b in zip(got + got2, want + want2):
        assert_close(a, b)
    assert got[0].requires_grad == want[0].requires_grad == grad
    assert not got[1].requires_grad and not got[2].requires_grad


@needs_ops
def test_compiled_decode_updates_pools_in_place():
    torch._dynamo.reset()
    layer = TinyGatedDeltaNet()
    x, conv_pool, state_pool, slots = decode_inputs(layer)
    eager_pools = (conv_pool.clone(), state_pool.clone())
    compiled = torch.compile(layer.decode, fullgraph=True, backend=_backend())
    with torch.no_grad():
        for step in range(3):
            xs = x + step
            want = layer.decode(xs, *eager_pools, slots)
            got = compiled(xs, conv_pool, state_pool, slots)
            assert_close(got, want)
            assert_close(conv_pool, eager_pools[0])
            assert_close(state_pool, eager_pools[1])
    assert got[1].abs().sum() == 0  # slot -1 (padding): zero rows, through out_proj
    fresh = decode_inputs(layer)
    assert not torch.equal(state_pool[4], fresh[2][4])  # slot 4 updated in place
    assert torch.equal(state_pool[0], fresh[2][0])      # slot 0 untouched
    with torch.no_grad():
        explanation = torch._dynamo.explain(layer.decode)(*fresh)
    assert explanation.graph_break_count == 0, explanation.break_reasons


@needs_ops
def test_compiled_calls_keep_the_python_semantics():
    """FLA keywords, list indices, None and the caller's own pool as returned values, and
    argument errors (raised when the compiled graph runs, with the public function's type)."""
    torch._dynamo.reset()
    q, k, v, g, beta = delta_inputs(T=1)
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    pool = torch.randn(4, HV, V, K)

    def step(q, k, v, g, beta, pool):
        o, final = gdn.fused_recurrent_gated_delta_rule(
            q, k, v, g, beta, state_pool=pool, state_indices=[2, 0], output_final_state=True,
            transpose_state_layout=True, cu_seqlens_cpu=None, use_cache=True)  # (eager: warns)
        o2, none = gdn.chunk_gated_delta_rule(q, k, v, g, beta)
        return o, final, o2, none

    want_pool = pool.clone()
    want = step(q, k, v, g, beta, want_pool)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, g, beta, pool)
    assert got[3] is None and want[3] is None
    for a, b in zip(got[:3], want[:3]):
        assert_close(a, b)
    assert_close(pool, want_pool)

    def bad(q, k, v, g, beta):
        return gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(1, 1, 1, 1),
                                          output_final_state=True)
    with pytest.raises(gdn.GdnValueError, match="initial_state.shape"):
        bad(q, k, v, g, beta)
    with pytest.raises(gdn.GdnValueError, match="initial_state.shape"):
        torch.compile(bad, fullgraph=True, backend="aot_eager")(q, k, v, g, beta)


@needs_ops
def test_compiled_conv_varlen_with_pools_and_returned_states():
    torch._dynamo.reset()
    r = _gen(9)
    C, W = 12, 4
    x, w = r(C, 11), r(C, W)
    pool = r(4, C, W + 1)  # wider than W - 1: the Python-side shift runs inside the op
    qsl = torch.tensor([0, 3, 8, 11], dtype=torch.int32)

    def f(x, w, pool, out):
        y, states = gdn.causal_conv1d_fn(x, w, None, conv_states=pool, cache_indices=[2, 0, -1],
                                         has_initial_state=[True, False, True],
                                         query_start_loc=qsl, activation="silu",
                                         return_final_states=True)
        y2, final = gdn.causal_conv1d_fn(x[None, :, :5], w, return_final_states=True,
                                         final_states_out=out)
        return y, states, y2, final

    want_pool, want_out = pool.clone(), torch.zeros(1, C, W - 1)
    got_pool, got_out = pool.clone(), torch.zeros(1, C, W - 1)
    want = f(x, w, want_pool, want_out)
    got = torch.compile(f, fullgraph=True, backend=_backend())(x, w, got_pool, got_out)
    for a, b in zip(got, want):
        assert_close(a, b)
    assert_close(got_pool, want_pool)
    assert_close(got_out, want_out)
    assert got[1] is got_pool and got[3] is got_out  # the caller's own tensors, as in eager


@needs_ops
def test_out_is_refused_in_a_full_graph_and_runs_eagerly_after_a_break():
    """out= is for eager calls: a full graph cannot take it (the op allocates o); without
    fullgraph, Dynamo breaks the graph there and the call runs eagerly into out."""
    torch._dynamo.reset()
    q, k, v, g, beta = delta_inputs()

    def step(q, k, v, g, beta, out):
        return gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, out=out)[0] * 2.0

    out = torch.zeros_like(v)
    with pytest.raises(Exception, match="out="):
        torch.compile(step, fullgraph=True, backend=_backend())(q, k, v, g, beta, out)
    torch._dynamo.reset()
    got = torch.compile(step, backend=_backend())(q, k, v, g, beta, out)
    want, _ = gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta)
    assert_close(got, 2.0 * want)
    assert_close(out, want)


@needs_ops
def test_conv_update_out_is_refused_in_a_full_graph():
    torch._dynamo.reset()
    r = _gen(4)
    x, state, weight = r(3, 12), r(3, 12, 3), r(12, 4)

    def step(x, state, weight, out):
        return gdn.causal_conv1d_update(x, state, weight, None, "silu", out=out)

    with pytest.raises(Exception, match="out="):
        torch.compile(step, fullgraph=True, backend=_backend())(x, state, weight, x)
