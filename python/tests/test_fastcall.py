"""The native fast path (gdn._fast, gdn/_fastcall.c) against the pure-Python path.

Every case runs twice on fresh, identical inputs: with _lib.fast set to None (the pure-Python
path) and with the extension (through a recorder that notes whether it ran the call or declined
it). The two must agree bit for bit: outputs (type, dtype, shape, strides, bytes), what the call
wrote into the caller's arrays, which of them it returned, and, for bad input, the exception's
type, message and status, with nothing written. Each case also says whether the fast path is
meant to run it (the decode calls above all) or to hand it back to Python (copies, conversions,
FLA-style states, the binding's own refusals).

Without the extension (not built: conftest.py says why; or GDN_FASTCALL=0) the comparisons are
skipped and only the pure-Python half runs.
"""
import ctypes
import threading

import numpy as np
import pytest

import gdn
from gdn import _lib

torch = _lib.torch
FAST = _lib.fast
needs_fast = pytest.mark.skipif(
    FAST is None, reason="gdn._fast is not loaded (not built, or GDN_FASTCALL=0: conftest.py)")
FRAMEWORKS = ["numpy"] + (["torch"] if torch is not None else [])


# ---- recording which path ran, and what a call did ---------------------------------------------

class Recorder:
    """Stands in for _lib.fast: forwards to the extension and records, per call, True when it
    ran the call (returned, or raised libgdn's error) and False when it declined."""

    def __init__(self, fast):
        self.fast, self.ran = fast, []

    def _call(self, fn, args):
        try:
            result = fn(*args)
        except Exception:
            self.ran.append(True)
            raise
        self.ran.append(result is not NotImplemented)
        return result

    def delta_rule(self, *args):
        return self._call(self.fast.delta_rule, args)

    def conv1d_update(self, *args):
        return self._call(self.fast.conv1d_update, args)


def snapshot(x):
    """A comparable picture of x: arrays by type, dtype, shape, strides and bytes."""
    if isinstance(x, (tuple, list)):
        return type(x).__name__, [snapshot(y) for y in x]
    if isinstance(x, dict):
        return {k: snapshot(v) for k, v in sorted(x.items())}
    if isinstance(x, np.ndarray):
        return ("numpy", str(x.dtype), x.shape, x.strides, np.ascontiguousarray(x).tobytes())
    if torch is not None and isinstance(x, torch.Tensor):
        flat = x.detach().cpu().contiguous()
        if flat.dtype == torch.bfloat16:
            flat = flat.view(torch.int16)
        return ("torch", str(x.dtype), tuple(x.shape), x.stride(), str(x.device),
                flat.numpy().tobytes())
    return x


def outcome(fn, make):
    """What fn(*args, **kwargs) of make()'s fresh inputs did: ("ok", result, identities) or
    ("raised", type, message, status), and the inputs after it."""
    args, kwargs = make()
    inputs = list(args) + [kwargs[k] for k in sorted(kwargs)]
    try:
        result = fn(*args, **kwargs)
    except Exception as e:  # compared, not swallowed
        return ("raised", type(e), str(e), getattr(e, "status", None)), snapshot(inputs)
    returned = result if isinstance(result, tuple) else (result,)
    same = [[r is x for x in inputs] for r in returned]  # which inputs came back
    return ("ok", snapshot(result), same), snapshot(inputs)


def compare(monkeypatch, fn, make, fast_runs):
    """Runs fn both ways and checks they agree; fast_runs: whether the fast path must run the
    call (True), decline it (False), or never be asked (None: the binding refuses the call
    first). Returns the Python path's outcome."""
    monkeypatch.setattr(_lib, "fast", None)
    expected = outcome(fn, make)
    if FAST is None:
        return expected
    recorder = Recorder(FAST)
    monkeypatch.setattr(_lib, "fast", recorder)
    got = outcome(fn, make)
    monkeypatch.setattr(_lib, "fast", FAST)
    assert got[0][0] == expected[0][0], (got[0][:3], expected[0][:3])
    assert got == expected
    if fast_runs is None:
        assert recorder.ran == [], recorder.ran
    else:
        assert recorder.ran and all(r == fast_runs for r in recorder.ran), recorder.ran
    return expected


# ---- inputs --------------------------------------------------------------------------------

def as_framework(xp, x):
    """x (a NumPy array) in the case's framework: a copy for torch (CPU)."""
    if xp == "numpy" or not isinstance(x, np.ndarray):
        return x
    return torch.from_numpy(np.array(x))


def swap(x, a, b):
    return x.transpose(a, b) if torch is not None and isinstance(x, torch.Tensor) \
        else np.swapaxes(x, a, b)


B, T1, H, HV, K, V, S = 3, 1, 2, 4, 16, 8, 5


def decode_inputs(xp, *, T=T1, Bn=B, dtype=np.float32, seed=0, pool_slots=S, v_first=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((Bn, T, H, K)).astype(dtype)
    k = rng.standard_normal((Bn, T, H, K)).astype(dtype)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((Bn, T, HV, V)).astype(dtype)
    g = (-rng.random((Bn, T, HV)) * 0.5).astype(np.float32)
    beta = rng.random((Bn, T, HV)).astype(np.float32)
    pool = rng.standard_normal((pool_slots, HV) + ((V, K) if v_first else (K, V)))
    pool = pool.astype(np.float32)
    return [as_framework(xp, x) for x in (q, k, v, g, beta, pool)]


def slots(xp, values, dtype=np.int32):
    return as_framework(xp, np.array(values, dtype=dtype))


recurrent = gdn.fused_recurrent_gated_delta_rule
chunk = gdn.chunk_gated_delta_rule


def decode_case(xp, *, slot_values=(2, -1, 0), slot_dtype=np.int32, out=None, **options):
    """out: None, or the dtype of an out= array (filled with 7: what skipped rows keep)."""
    def make():
        q, k, v, g, beta, pool = decode_inputs(xp, v_first=options.get("state_v_first", False))
        kwargs = dict(state_pool=pool, **options)
        if slot_values is not None:
            kwargs["state_indices"] = slots(xp, slot_values, slot_dtype)
        if out is not None:
            kwargs["out"] = as_framework(xp, np.full(np.shape(v), 7.0, out))
        return (q, k, v, g, beta), kwargs
    return make


# ---- the delta rule: calls the fast path runs -------------------------------------------------

RUN_DELTA = {
    "decode_pool_slots": lambda xp: decode_case(xp),
    "decode_final_state_is_the_pool": lambda xp: decode_case(xp, output_final_state=True),
    "decode_int64_slots_and_flags": lambda xp: decode_case(
        xp, slot_values=(4, 1, -1), slot_dtype=np.int64,
        has_initial_state=slots(xp, [1, 0, 1], np.uint8)),
    "decode_options": lambda xp: decode_case(
        xp, scale=0.5, use_qk_l2norm_in_kernel=True, state_v_first=True, gva="tiled",
        backend="ref"),
    "decode_gating_in_kernel": lambda xp: decode_case(
        xp, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
        A_log=as_framework(xp, np.linspace(-1, 1, HV).astype(np.float32)),
        dt_bias=as_framework(xp, np.linspace(0, 1, HV).astype(np.float32))),
    "decode_into_out": lambda xp: decode_case(xp, out=np.float32, output_final_state=True),
    "decode_into_f16_out": lambda xp: decode_case(xp, out=np.float16),
}


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(RUN_DELTA))
def test_delta_rule_fast_path_runs_and_agrees(monkeypatch, xp, case):
    result = compare(monkeypatch, recurrent, RUN_DELTA[case](xp), fast_runs=True)
    assert result[0][0] == "ok", result[0]


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_padding_rows_are_zero_and_the_pool_is_returned(monkeypatch, xp):
    (q, k, v, g, beta), kwargs = decode_case(xp, output_final_state=True)()
    pool = kwargs["state_pool"]
    before = np.array(pool)
    o, final = recurrent(q, k, v, g, beta, **kwargs)
    assert final is pool
    assert not np.asarray(o)[1].any() and np.asarray(o)[0].any()  # slot -1: zeros
    assert np.array_equal(np.asarray(pool)[[1, 3, 4]], before[[1, 3, 4]])  # untouched slots


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_out_is_written_and_returned_and_padding_rows_keep_their_values(monkeypatch, xp):
    (q, k, v, g, beta), kwargs = decode_case(xp)()
    want, _ = recurrent(q, k, v, g, beta, **kwargs)  # a new o: the padding row is zeros
    (q, k, v, g, beta), kwargs = decode_case(xp, out=np.float32)()
    out = kwargs["out"]
    o, _ = recurrent(q, k, v, g, beta, **kwargs)
    assert o is out
    assert np.array_equal(np.asarray(o)[[0, 2]], np.asarray(want)[[0, 2]])
    assert (np.asarray(o)[1] == 7.0).all()  # slot -1: not written (SPEC), as before the call


def _out_wrong_shape(xp):
    (q, k, v, g, beta), kwargs = decode_case(xp)()
    kwargs["out"] = as_framework(xp, np.zeros((B, T1, HV, V + 1), np.float32))
    return (q, k, v, g, beta), kwargs


def _out_strided(xp):
    (q, k, v, g, beta), kwargs = decode_case(xp)()
    kwargs["out"] = as_framework(xp, np.zeros((B, T1, HV, 2 * V), np.float32))[..., ::2]
    return (q, k, v, g, beta), kwargs


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("make, fast_runs", [(_out_wrong_shape, False), (_out_strided, True)])
def test_bad_out_is_refused_by_name_and_nothing_written(monkeypatch, xp, make, fast_runs):
    """A wrong shape: the fast path declines and the binding names it; a last dim that is not
    contiguous: libgdn refuses it (either path), naming out."""
    result = compare(monkeypatch, recurrent, lambda: make(xp), fast_runs=fast_runs)
    assert result[0][0] == "raised" and "out" in str(result[0][2]), result[0]


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_decode_without_slots_and_without_state(monkeypatch, xp):
    def no_slots():
        q, k, v, g, beta, pool = decode_inputs(xp, pool_slots=B)
        return (q, k, v, g, beta), dict(state_pool=pool)

    def stateless():
        q, k, v, g, beta, _ = decode_inputs(xp)
        return (q, k, v, g, beta), {}
    compare(monkeypatch, recurrent, no_slots, fast_runs=True)
    compare(monkeypatch, recurrent, stateless, fast_runs=True)


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_strided_views_are_read_in_place(monkeypatch, xp):
    """Outer-dimension strides (a slice of a bigger batch, a pool of every other slot) need no
    copy: the fast path runs them."""
    def make():
        q, k, v, g, beta, _ = decode_inputs(xp, Bn=2 * B)
        *_, pool = decode_inputs(xp, pool_slots=2 * S)
        return (q[::2], k[::2], v[::2], g[::2], beta[::2]), dict(
            state_pool=pool[::2], state_indices=slots(xp, [1, -1, 4]), output_final_state=True)
    compare(monkeypatch, recurrent, make, fast_runs=True)


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_half_precision_inputs(monkeypatch, xp):
    def make():
        q, k, v, g, beta, pool = decode_inputs(xp, dtype=np.float16)
        return (q, k, v, g, beta), dict(state_pool=pool, state_indices=slots(xp, [0, 1, 2]))
    compare(monkeypatch, recurrent, make, fast_runs=True)


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_chunked_prefill(monkeypatch, xp):
    def varlen():
        q, k, v, g, beta, pool = decode_inputs(xp, T=40, Bn=1)
        return (q, k, v, g, beta), dict(
            state_pool=pool, state_indices=slots(xp, [3, 0]), cu_seqlens=slots(xp, [0, 7, 40]),
            has_initial_state=slots(xp, [0, 1]), chunk_size=16, output_final_state=True)

    def plain():
        q, k, v, g, beta, _ = decode_inputs(xp, T=33, Bn=2)
        return (q, k, v, g, beta), dict(algorithm="chunked", precision="high")
    compare(monkeypatch, chunk, varlen, fast_runs=True)
    compare(monkeypatch, chunk, plain, fast_runs=True)


# ---- the delta rule: calls handed back to the Python path ----------------------------------

def _initial_state(xp):
    q, k, v, g, beta, pool = decode_inputs(xp, pool_slots=B)
    return (q, k, v, g, beta), dict(initial_state=pool, output_final_state=True)


def _final_without_pool(xp):
    q, k, v, g, beta, _ = decode_inputs(xp)
    return (q, k, v, g, beta), dict(output_final_state=True)


def _no_beta(xp):
    q, k, v, g, _, pool = decode_inputs(xp)
    return (q, k, v, g, None), dict(state_pool=pool, state_indices=[0, 1, 2])


def _list_slots(xp):
    q, k, v, g, beta, pool = decode_inputs(xp)
    return (q, k, v, g, beta), dict(state_pool=pool, state_indices=[0, -1, 2])


def _last_dim_strided(xp):
    q, k, v, g, beta, pool = decode_inputs(xp)
    return (strided_last(xp, q), k, v, g, beta), dict(state_pool=pool,
                                                      state_indices=slots(xp, [0, 1, 2]))


def _mixed_dtypes(xp):
    q, k, v, g, beta, pool = decode_inputs(xp)
    v = v.astype(np.float16) if xp == "numpy" else v.half()
    return (q, k, v, g, beta), dict(state_pool=pool, state_indices=slots(xp, [0, 1, 2]))


def _one_gating_only(xp):
    make = decode_case(xp, use_gate_in_kernel=True,
                       A_log=as_framework(xp, np.zeros(HV, np.float32)),
                       dt_bias=as_framework(xp, np.zeros(HV, np.float32)))
    return make()


def _empty_batch(xp):
    q, k, v, g, beta, pool = decode_inputs(xp, Bn=0)
    return (q, k, v, g, beta), dict(state_pool=pool, state_indices=slots(xp, []))


DECLINED_DELTA = {"initial_state": _initial_state, "final_without_pool": _final_without_pool,
                  "no_beta": _no_beta, "list_slots": _list_slots,
                  "last_dim_strided": _last_dim_strided, "mixed_dtypes": _mixed_dtypes,
                  "one_gating_only": _one_gating_only, "empty_batch": _empty_batch}


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(DECLINED_DELTA))
def test_delta_rule_declined_calls_agree(monkeypatch, xp, case):
    result = compare(monkeypatch, recurrent, lambda: DECLINED_DELTA[case](xp), fast_runs=False)
    assert result[0][0] == "ok", result[0]


def test_numpy_only_copies_are_declined(monkeypatch):
    """NumPy layouts libgdn cannot address (negative strides, unaligned data): the Python path
    works on copies (and copies the pool back)."""
    def reversed_pool():
        q, k, v, g, beta, pool = decode_inputs("numpy")
        return (q, k, v, g, beta), dict(state_pool=pool[::-1], state_indices=slots("numpy",
                                                                                   [0, 1, 2]))

    def unaligned_q():
        q, k, v, g, beta, pool = decode_inputs("numpy")
        raw = np.zeros(2 * q.size + 2, np.uint8)[1:1 + 2 * q.size].view(np.float16)
        q16 = raw.reshape(q.shape)
        q16[...] = q
        assert not q16.flags.aligned
        return (q16, k.astype(np.float16), v.astype(np.float16), g, beta), dict(state_pool=pool)
    compare(monkeypatch, recurrent, reversed_pool, fast_runs=False)
    compare(monkeypatch, recurrent, unaligned_q, fast_runs=False)


# ---- the delta rule: bad input, the same error either way, nothing written ---------------------

def _bad(xp, *, run, **change):
    def make():
        (q, k, v, g, beta), kwargs = decode_case(xp)()
        args = dict(q=q, k=k, v=v, g=g, beta=beta)
        for name, fn in change.items():
            if name in args:
                args[name] = fn(args[name])
            else:
                kwargs[name] = fn(kwargs.get(name))
        return (args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"),
                args.pop("beta")), kwargs
    return make, run


def _read_only(x):
    if isinstance(x, np.ndarray):
        x.flags.writeable = False
        return x
    return x[:1].expand(S, *x.shape[1:])  # torch: a stride-0 view


BAD_DELTA = {
    # libgdn's refusals, through the fast path
    "duplicate_slots": lambda xp: _bad(xp, run=True, state_indices=lambda s: s * 0),
    "slot_out_of_range": lambda xp: _bad(xp, run=True, state_indices=lambda s: s + S),
    "k_heads_differ": lambda xp: _bad(xp, run=True, k=lambda k: k[:, :, :1]),
    "g_wrong_dtype": lambda xp: _bad(xp, run=True, g=lambda g: g.astype(np.int32)
                                     if isinstance(g, np.ndarray) else g.int()),
    # the binding's, in the Python path
    "read_only_pool": lambda xp: _bad(xp, run=False, state_pool=_read_only),
    "q_rank_3": lambda xp: _bad(xp, run=False, q=lambda q: q[:, 0]),
    "q_float64": lambda xp: _bad(xp, run=False, q=lambda q: q.astype(np.float64)
                                 if isinstance(q, np.ndarray) else q.double()),
    "scale_not_a_number": lambda xp: _bad(xp, run=False, scale=lambda _: "abc"),
    "backend_mismatch": lambda xp: _bad(xp, run=False, backend=lambda _: "cuda"),
    "q_a_list": lambda xp: _bad(xp, run=False, q=lambda q: np.asarray(q).tolist()),
}


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(BAD_DELTA))
def test_delta_rule_errors_agree(monkeypatch, xp, case):
    make, run = BAD_DELTA[case](xp)
    result = compare(monkeypatch, recurrent, make, fast_runs=run)
    assert result[0][0] == "raised", result[0]


def test_bad_options(monkeypatch):
    """Option strings the binding does not know are refused before the fast path is asked; a
    chunk size libgdn refuses goes through it, to libgdn's error."""
    for options in (dict(gva="nope"), dict(algorithm="nope"), dict(precision="nope")):
        result = compare(monkeypatch, chunk, decode_case("numpy", **options), fast_runs=None)
        assert result[0][:2] == ("raised", ValueError), (options, result[0])
    result = compare(monkeypatch, chunk, decode_case("numpy", chunk_size=48), fast_runs=True)
    assert result[0][:2] == ("raised", gdn.GdnValueError), result[0]


# ---- causal_conv1d_update -------------------------------------------------------------------

C, W = 24, 4


def conv_inputs(xp, *, x_shape=(B, C), width=W - 1, x_dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(x_dtype)
    weight = rng.standard_normal((C, W)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    state = rng.standard_normal((S, C, width)).astype(np.float32)
    return [as_framework(xp, a) for a in (x, weight, bias, state)]


def conv_case(xp, *, slot_values=(2, -1, 0), activation="silu", **shape):
    def make():
        x, weight, bias, state = conv_inputs(xp, **shape)
        idx = None if slot_values is None else slots(xp, slot_values)
        return (x, state, weight, bias, activation, None, idx), {}
    return make


def _conv_3d_weight(xp):
    x, weight, bias, state = conv_inputs(xp, x_shape=(B, C, 1))
    return (x, state[:B], weight[:, None, :], None, None), {}


def _conv_vllm_layout(xp):
    x, weight, bias, state = conv_inputs(xp)
    buf = as_framework(xp, np.ascontiguousarray(np.swapaxes(np.asarray(state), 1, 2)))
    return (x, swap(buf, 1, 2), weight, bias, "swish", None, slots(xp, [4, 0, -1])), {}


def strided_last(xp, x):
    """x's values in a view whose last dimension has stride 2 (libgdn needs 1: a copy)."""
    return as_framework(xp, np.repeat(np.asarray(x), 2, axis=-1))[..., ::2]


# positions in causal_conv1d_update's arguments
X, STATE, ACTIVATION, CACHE_SEQLENS, INDICES = 0, 1, 4, 5, 6


def conv_changed(xp, position, change, **options):
    args, kwargs = conv_case(xp, **options)()
    args = list(args)
    args[position] = change(args[position])
    return tuple(args), kwargs


def _conv_into_out(xp, x_shape=(B, C)):
    """out= an array of x's shape filled with 7 (what the padding row keeps)."""
    (x, state, weight, bias, act, _, idx), _ = conv_case(xp, x_shape=x_shape)()
    return (x, state, weight, bias, act, None, idx), dict(
        out=as_framework(xp, np.full(x_shape, 7.0, np.float32)))


def _conv_in_place(xp):
    """out=x: the output over x, as vLLM's causal_conv1d_update writes it."""
    (x, state, weight, bias, act, _, idx), _ = conv_case(xp)()
    return (x, state, weight, bias, act, None, idx), dict(out=x)


RUN_CONV = {
    "x_2d_slots": lambda xp: conv_case(xp)(),
    "into_out": _conv_into_out,
    "into_out_3d": lambda xp: _conv_into_out(xp, x_shape=(B, C, 1)),
    "in_place": _conv_in_place,
    "x_3d_weight_3d": _conv_3d_weight,
    "vllm_state_layout": _conv_vllm_layout,
    "half_x_f32_state": lambda xp: conv_case(xp, x_dtype=np.float16, activation=None)(),
    # libgdn's refusals, through the fast path
    "duplicate_slots": lambda xp: conv_case(xp, slot_values=(1, 1, 0))(),
    "channels_differ": lambda xp: conv_changed(xp, X, lambda x: x[:, :C - 1]),
}
DECLINED_CONV = {
    "wider_state": lambda xp: conv_case(xp, width=W)(),
    "several_tokens": lambda xp: conv_case(xp, x_shape=(B, C, 3))(),
    "cache_seqlens": lambda xp: conv_changed(xp, CACHE_SEQLENS, lambda _: slots(xp, [0, 0, 0])),
    "unknown_activation": lambda xp: conv_case(xp, activation="relu")(),
    "read_only_state": lambda xp: conv_changed(xp, STATE, _read_only),
    "x_channels_strided": lambda xp: conv_changed(xp, X, lambda x: strided_last(xp, x)),
    "list_slots": lambda xp: conv_changed(xp, INDICES, lambda _: [2, -1, 0]),
}


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(RUN_CONV))
def test_conv_update_fast_path_runs_and_agrees(monkeypatch, xp, case):
    compare(monkeypatch, gdn.causal_conv1d_update, lambda: RUN_CONV[case](xp), fast_runs=True)


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(DECLINED_CONV))
def test_conv_update_declined_calls_agree(monkeypatch, xp, case):
    asked = case != "unknown_activation"  # that one is refused before the fast path is asked
    compare(monkeypatch, gdn.causal_conv1d_update, lambda: DECLINED_CONV[case](xp),
            fast_runs=False if asked else None)


def _conv_out_wrong_shape(xp):
    args, _ = conv_case(xp)()
    return args, dict(out=as_framework(xp, np.zeros((B, C + 1), np.float32)))


def _conv_out_several_tokens(xp):
    args, _ = conv_case(xp, x_shape=(B, C, 3))()
    return args, dict(out=as_framework(xp, np.zeros((B, C, 3), np.float32)))


@pytest.mark.parametrize("xp", FRAMEWORKS)
@pytest.mark.parametrize("make", [_conv_out_wrong_shape, _conv_out_several_tokens])
def test_conv_update_bad_out_is_refused_by_name(monkeypatch, xp, make):
    result = compare(monkeypatch, gdn.causal_conv1d_update, lambda: make(xp), fast_runs=False)
    assert result[0][0] == "raised" and "out" in result[0][2], result[0]


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_conv_update_out_is_returned_and_padding_rows_keep_their_values(xp):
    (x, state, weight, bias, act, _, idx), kwargs = _conv_into_out(xp)
    got = gdn.causal_conv1d_update(x, state, weight, bias, act, conv_state_indices=idx,
                                   **kwargs)
    (x, state, weight, bias, act, _, idx), _ = conv_case(xp)()
    want = gdn.causal_conv1d_update(x, state, weight, bias, act, conv_state_indices=idx)
    assert got is kwargs["out"]
    assert np.array_equal(np.asarray(got)[[0, 2]], np.asarray(want)[[0, 2]])
    assert (np.asarray(got)[1] == 7.0).all()


@pytest.mark.parametrize("xp", FRAMEWORKS)
def test_conv_update_padding_rows_are_zero(xp):
    (x, state, weight, bias, act, _, idx), _ = conv_case(xp)()
    out = gdn.causal_conv1d_update(x, state, weight, bias, act, conv_state_indices=idx)
    assert not np.asarray(out)[1].any() and np.asarray(out)[0].any()


# ---- the extension itself ------------------------------------------------------------------

@needs_fast
def test_threads_share_nothing(monkeypatch):
    """Each thread gets its own context; concurrent fast calls give the sequential results."""
    def run(seed):
        q, k, v, g, beta, pool = decode_inputs("numpy", T=2)
        o, _ = recurrent(q * seed, k, v, g, beta, state_pool=pool, state_indices=[0, 1, 2])
        return np.concatenate([o.ravel(), pool.ravel()])
    expected = [run(s) for s in range(1, 9)]
    results = [None] * 8

    def worker(i):
        for _ in range(20):
            results[i] = run(i + 1)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        assert np.array_equal(got, want)


@needs_fast
def test_struct_sizes_match_the_library():
    for name, size in FAST.struct_sizes().items():
        assert _lib.lib.gdn_struct_size(name.encode()) == size, name


@needs_fast
def test_time_calls_runs_a_prepared_call():
    q, k, v, g, beta, pool = decode_inputs("numpy")
    o, idx = np.zeros_like(v), np.array([0, 1, 2], np.int32)
    a = _lib.lib.gdn_delta_rule_default_args()
    a.q, a.k, a.v, a.g, a.beta = (_lib.describe(x, n) for x, n in
                                  ((q, "q"), (k, "k"), (v, "v"), (g, "g"), (beta, "beta")))
    a.out, a.state, a.state_slots = (_lib.describe(o, "out"), _lib.describe(pool, "state"),
                                     _lib.describe(idx, "slots"))
    ctx = _lib.context(None, "cpu")
    fn = ctypes.cast(_lib.lib.gdn_delta_rule, ctypes.c_void_p).value
    seconds, status = FAST.time_calls(fn, ctx.value, ctypes.addressof(a), 3)
    assert status == _lib.OK and seconds > 0 and o.any()
    a.state_slots = _lib.describe(np.array([0, 0, 1], np.int32), "slots")
    assert FAST.time_calls(fn, ctx.value, ctypes.addressof(a), 1)[1] == _lib.ERR_VALUE


@needs_fast
def test_kernel_clock_counts_the_fast_calls():
    (q, k, v, g, beta), kwargs = decode_case("numpy")()
    FAST.kernel_clock(True)
    for _ in range(3):
        recurrent(q, k, v, g, beta, **kwargs)
    calls, seconds = FAST.kernel_clock(False)
    assert calls == 3 and seconds > 0
    recurrent(q, k, v, g, beta, **kwargs)
    assert FAST.kernel_clock(False) == (0, 0.0)  # off: nothing counted


class _FakeFast:
    BINDING_VERSION = _lib.FAST_BINDING_VERSION

    def __init__(self, sizes):
        self.sizes, self.set_up = sizes, False

    def struct_sizes(self):
        return self.sizes

    def setup(self, **kwargs):
        self.set_up = True


def test_an_extension_from_another_header_or_binding_is_not_used(monkeypatch):
    fake = _FakeFast({"gdn_delta_rule_args": 1})
    monkeypatch.setattr(_lib, "_import_fast", lambda choice: fake)
    monkeypatch.setenv("GDN_FASTCALL", "auto")
    with pytest.warns(RuntimeWarning, match="another gdn.h"):
        assert _lib._load_fast() is None
    monkeypatch.setenv("GDN_FASTCALL", "1")
    with pytest.raises(ImportError, match="another gdn.h"):
        _lib._load_fast()
    assert not fake.set_up
    monkeypatch.setenv("GDN_FASTCALL", "0")
    assert _lib._load_fast() is None
    stale = _FakeFast({})
    stale.BINDING_VERSION = _lib.FAST_BINDING_VERSION + 1  # called with other arguments
    monkeypatch.setattr(_lib, "_import_fast", lambda choice: stale)
    monkeypatch.setenv("GDN_FASTCALL", "auto")
    with pytest.warns(RuntimeWarning, match="another version of the binding"):
        assert _lib._load_fast() is None
    assert not stale.set_up
    good = _FakeFast({"gdn_tensor": ctypes.sizeof(_lib.Tensor)})
    monkeypatch.setattr(_lib, "_import_fast", lambda choice: good)
    monkeypatch.setenv("GDN_FASTCALL", "auto")
    assert _lib._load_fast() is good and good.set_up


def test_a_missing_extension(monkeypatch):
    def missing(choice):
        raise ImportError("no module named gdn._fast")
    monkeypatch.setattr(_lib, "_import_fast", missing)
    monkeypatch.setenv("GDN_FASTCALL", "")
    assert _lib._load_fast() is None  # allowed to be absent: the pure-Python path
    monkeypatch.setenv("GDN_FASTCALL", "on")
    with pytest.raises(ImportError, match="GDN_FASTCALL=on"):
        _lib._load_fast()
