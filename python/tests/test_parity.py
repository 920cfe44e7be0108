"""FLA and causal-conv1d parity of the call itself: the keywords, strides, dtypes and conv-state
forms that FLA's and causal-conv1d's functions accept, checked against independent float64
NumPy implementations (the delta-rule references of test_ops.py, and a causal conv1d here).

causal-conv1d's semantics, as written below (nothing is taken from libgdn or gdn): a conv state
[B, C, L], L >= W - 1, holds the most recent inputs at its end; a call on T tokens reads
xp = state ++ x, y[t] = act(bias + sum_i w[i] xp[L - (W-1) + t + i]), and leaves the state
xp[..., -L:] (the whole state shifted left by T). With seq_idx [B, T], token t's output sums
only the inputs t - (W-1) + i (inside its row) whose seq_idx equals seq_idx[t].
Fresh random inputs per test (the seed is printed; GDN_TEST_SEED=<n> replays it). Torch cases
skip where torch is missing.
"""
import os
import secrets

import numpy as np
import pytest

import gdn
from test_ops import (TOL, assert_close, f32, make_inputs, normal, ref_delta_rule, ref_gating,
                      ref_l2norm, ref_sigmoid, swap_kv)

DELTA_RULES = [gdn.chunk_gated_delta_rule, gdn.fused_recurrent_gated_delta_rule]
K, V = 16, 24


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("GDN_TEST_SEED") or secrets.randbits(63))
    print(f"{request.node.name}: seed {seed} (replay with GDN_TEST_SEED={seed})")
    return np.random.default_rng(seed)


def torch_or_skip():
    return pytest.importorskip("torch")


# ---- NumPy float64 causal conv1d ------------------------------------------------------------

def ref_conv_states(x, w, bias=None, state=None, width=None, activation=None):
    """x [B, C, T], w [C, W]; state [B, C, L] (None: zeros, L = width or W - 1).
    Returns y [B, C, T] and the new state [B, C, L]."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, C, T = x.shape
    W = w.shape[1]
    state = (np.zeros((B, C, width or W - 1)) if state is None
             else np.asarray(state, np.float64))
    L = state.shape[-1]
    xp = np.concatenate([state, x], axis=-1)
    y = np.zeros((B, C, T))
    for t in range(T):
        y[:, :, t] = np.einsum("bci,ci->bc", xp[:, :, L - (W - 1) + t:L + t + 1], w)
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None]
    if activation == "silu":
        y = y * ref_sigmoid(y)
    return y, xp[:, :, xp.shape[-1] - L:]


def ref_conv_seq_idx(x, w, seq_idx, bias=None, activation=None):
    """x [B, C, T], seq_idx [B, T]: a token reads only inputs of its own seq_idx."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, C, T = x.shape
    W = w.shape[1]
    y = np.zeros((B, C, T))
    for b in range(B):
        for t in range(T):
            for i in range(W):
                s = t - (W - 1) + i
                if s >= 0 and seq_idx[b, s] == seq_idx[b, t]:
                    y[b, :, t] += w[:, i] * x[b, :, s]
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None]
    return y * ref_sigmoid(y) if activation == "silu" else y


def runs(rng, T, W):
    """seq_idx of one row: runs of lengths 1 .. 2W (some shorter than W - 1), increasing ids."""
    ids, start = [], int(rng.integers(0, 5))
    while len(ids) < T:
        ids += [start] * int(rng.integers(1, 2 * W + 1))
        start += int(rng.integers(1, 3))
    return np.array(ids[:T], np.int32)


# ---- 1. keywords ---------------------------------------------------------------------------

FLA_KNOWN = dict(cu_seqlens_cpu=None, chunk_indices=None, cp_context=None, head_first=False,
                 gk=None, gv=None)


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_unknown_and_fla_only_keywords_are_ignored(rng, fn, monkeypatch):
    monkeypatch.delenv("GDN_STRICT_KWARGS", raising=False)
    x = make_inputs(rng, 2, 11, 2, 4, K, V)
    want_o, want_s = fn(**x, output_final_state=True)
    for extra in (dict(use_cache=True, layer_idx=3), FLA_KNOWN,
                  dict(FLA_KNOWN, use_cache=False, strict=False)):
        o, s = fn(**x, output_final_state=True, **extra)
        assert np.array_equal(o, want_o) and np.array_equal(s, want_s)
    o, s = fn(**x, output_final_state=True, strict=True, **FLA_KNOWN)  # FLA's own: accepted
    assert np.array_equal(o, want_o)


def test_conv_functions_ignore_unknown_keywords_unless_strict(rng, monkeypatch):
    """HF's layers pass their own keywords (**kwargs) to causal_conv1d_fn."""
    monkeypatch.delenv("GDN_STRICT_KWARGS", raising=False)
    x = rng.standard_normal((2, 6, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    want = gdn.causal_conv1d_fn(x, w, activation="silu")
    got = gdn.causal_conv1d_fn(x, w, activation="silu", position_ids=None, layer_idx=1)
    assert np.array_equal(got, want)
    with pytest.raises(TypeError, match="'layer_idx'"):
        gdn.causal_conv1d_fn(x, w, activation="silu", layer_idx=1, strict=True)
    state = np.zeros((2, 6, 3), np.float32)
    gdn.causal_conv1d_update(x[:, :, 0], state, w, use_cache=True)
    with pytest.raises(TypeError, match="'use_cache'"):
        gdn.causal_conv1d_update(x[:, :, 0], state, w, use_cache=True, strict=True)


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_strict_makes_unknown_keywords_errors(rng, fn, monkeypatch):
    x = make_inputs(rng, 1, 5, 1, 2, K, V)
    monkeypatch.delenv("GDN_STRICT_KWARGS", raising=False)
    with pytest.raises(TypeError, match=r"'layer_idx', 'use_cache'"):
        fn(**x, use_cache=True, layer_idx=0, strict=True)
    monkeypatch.setenv("GDN_STRICT_KWARGS", "1")
    with pytest.raises(TypeError, match=r"'use_cache'"):
        fn(**x, use_cache=True)
    fn(**x, use_cache=True, strict=False)                      # the keyword wins over the env
    fn(**x, **FLA_KNOWN)                                       # FLA's own keywords pass


@pytest.mark.parametrize("name", ["gk", "gv", "cp_context", "head_first", "ssm_state_indices",
                                  "inplace_final_state", "num_accepted_tokens"])
@pytest.mark.parametrize("fn", DELTA_RULES)
def test_keywords_that_change_the_math_are_refused(rng, fn, name):
    x = make_inputs(rng, 2, 6, 2, 2, K, V)
    value = {"gk": normal(rng, 2, 6, 2, K), "gv": normal(rng, 2, 6, 2, V),
             "cp_context": object(), "head_first": True, "inplace_final_state": True,
             "ssm_state_indices": np.array([0, 1], np.int32),
             "num_accepted_tokens": np.array([1, 1], np.int32)}[name]
    pool0 = normal(rng, 3, 2, K, V)
    pool = pool0.copy()
    with pytest.raises(ValueError, match=name):
        fn(**x, state_pool=pool, strict=False, **{name: value})
    assert np.array_equal(pool, pool0)


# ---- 2. transpose_state_layout -------------------------------------------------------------

@pytest.mark.parametrize("fn", DELTA_RULES)
def test_transpose_state_layout_is_state_v_first(rng, fn):
    x = make_inputs(rng, 2, 9, 1, 3, K, V)
    h0 = 0.5 * normal(rng, 2, 3, K, V)
    want_o, want_s = ref_delta_rule(**x, h0=h0)
    with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
        o, s = fn(**x, initial_state=swap_kv(h0), output_final_state=True,
                  transpose_state_layout=True)
    assert s.shape == (2, 3, V, K)
    assert_close(o, want_o)
    assert_close(swap_kv(s), want_s)
    with pytest.warns(DeprecationWarning):
        o, s = fn(**x, initial_state=h0, output_final_state=True, transpose_state_layout=False)
    assert_close(s, want_s)
    for a, b in ((True, False), (False, True), (True, True)):  # both names: refused, as FLA
        with pytest.raises(ValueError, match="transpose_state_layout"):
            fn(**x, state_v_first=a, transpose_state_layout=b)


# ---- 3. strides ------------------------------------------------------------------------------

def hf_conv_views(buf, H, HV, T):
    """HF's torch path: the conv output [B, D, T + W - 1] cut to T tokens and transposed to
    [B, T, D] (channel stride T + W - 1), then split and reshaped into q, k, v views."""
    B = buf.shape[0]
    mixed = buf[:, :, :T].transpose(0, 2, 1) if isinstance(buf, np.ndarray) else \
        buf[:, :, :T].transpose(1, 2)
    q = mixed[..., :H * K].reshape(B, T, H, K)
    k = mixed[..., H * K:2 * H * K].reshape(B, T, H, K)
    v = mixed[..., 2 * H * K:].reshape(B, T, HV, V)
    return q, k, v


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_hf_views_with_channel_stride_333(rng, framework):
    B, T, W, H, HV = 2, 330, 4, 1, 2
    buf = normal(rng, B, 2 * H * K + HV * V, T + W - 1)
    g = rng.uniform(-0.3, 0.0, (B, T, HV)).astype(f32)
    beta = rng.uniform(0.05, 0.95, (B, T, HV)).astype(f32)
    if framework == "torch":
        torch = torch_or_skip()
        buf, g, beta = torch.from_numpy(buf), torch.from_numpy(g), torch.from_numpy(beta)
    q, k, v = hf_conv_views(buf, H, HV, T)
    strides = [t.stride() if framework == "torch" else [s // 4 for s in t.strides]
               for t in (q, k, v)]
    assert all(s[-1] == 333 for s in strides)
    npy = [np.asarray(t) for t in (q, k, v, g, beta)]
    want_o, want_s = ref_delta_rule(*npy, l2norm=True)
    for fn in DELTA_RULES:
        o, s = fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)
        assert_close(np.asarray(o), want_o)
        assert_close(np.asarray(s), want_s)
        o_c, _ = fn(*(np.ascontiguousarray(t) for t in npy), use_qk_l2norm_in_kernel=True)
        assert np.array_equal(np.asarray(o), o_c)              # a copy, the same bytes


def unaligned_copy(a):
    """a's values in an array whose data is not aligned to its itemsize."""
    raw = bytearray(a.nbytes + 2)
    out = np.frombuffer(raw, dtype=a.dtype, count=a.size, offset=2).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


def test_numpy_views_libgdn_cannot_read_are_copied(rng):
    """Negative strides, unaligned data, a non-unit last stride and stride-0 index arrays are
    copied; a broadcast input (stride 0 in an outer dimension) is read in place; a state pool
    with negative strides is still updated in the caller's array."""
    N, T, H, HV, S = 3, 10, 2, 4, 5
    x = make_inputs(rng, N, T, H, HV, K, V)
    q = x["q"][:, :, ::-1]                                      # negative head stride
    k = unaligned_copy(x["k"])
    v = np.broadcast_to(x["v"][:1], x["v"].shape)               # stride 0 over the batch
    g = np.repeat(x["g"], 2, axis=-1)[..., ::2]                 # last stride 2
    beta = x["beta"][:, ::-1]
    A_log = rng.uniform(-1.0, 0.5, 2 * HV).astype(f32)[::-2]    # negative stride
    dt_bias = normal(rng, HV)[::-1]
    a = normal(rng, N, T, HV)
    slots = np.array([1, -1, 4], np.int64)[::-1]                # [4, -1, 1], negative stride
    has = np.broadcast_to(np.array([1], np.uint8), (N,))        # stride 0: copied
    pool_buf = 0.5 * normal(rng, S, HV, K, V)
    for fn in DELTA_RULES:
        pool = pool_buf.copy()[::-1]                            # negative slot stride
        pool0 = pool.copy()
        o, ret = fn(q, k, v, a, beta, state_pool=pool, state_indices=slots,
                    has_initial_state=has, use_gate_in_kernel=True, A_log=A_log,
                    dt_bias=dt_bias, output_final_state=True)
        assert ret is pool
        g_want = ref_gating(A_log, a, None, dt_bias)[0]
        want_o, want_s = ref_delta_rule(q, k, v, g_want, beta, h0=pool0[np.maximum(slots, 0)])
        live = [0, 2]
        assert_close(o[live], want_o[live])
        assert not o[1].any()
        assert_close(pool[slots[live]], want_s[live])
        assert np.array_equal(pool[[0, 2, 3]], pool0[[0, 2, 3]])
        o2, _ = fn(q, k, v, g, beta, cu_seqlens=None)
        assert_close(o2, ref_delta_rule(q, k, v, g, beta)[0])
    xv = make_inputs(rng, 1, 12, H, HV, K, V)                   # cu_seqlens: a list, reversed view
    cu = np.array([12, 7, 3, 0], np.int32)[::-1]
    o, s = gdn.chunk_gated_delta_rule(**xv, cu_seqlens=list(cu), output_final_state=True)
    o2, s2 = gdn.chunk_gated_delta_rule(**xv, cu_seqlens=cu, output_final_state=True)
    want_o, want_s = ref_delta_rule(**xv, cu_seqlens=[0, 3, 7, 12])
    for got_o, got_s in ((o, s), (o2, s2)):
        assert_close(got_o, want_o)
        assert_close(got_s, want_s)


def test_torch_strided_states_and_inputs(rng):
    torch = torch_or_skip()
    N, T, H, HV = 2, 13, 2, 2
    x = make_inputs(rng, N, T, H, HV, K, V)
    h0 = 0.5 * normal(rng, N, HV, K, V)
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    g_wide = torch.from_numpy(np.repeat(x["g"], 3, axis=-1))[..., 1::3]  # last stride 3
    # a KV pool that is the transpose of a VK buffer: any strides, updated in place
    vk = torch.from_numpy(swap_kv(h0).copy())
    pool = vk.transpose(-1, -2)
    h0_strided = torch.from_numpy(np.repeat(h0, 2, axis=-1))[..., ::2]
    for fn in DELTA_RULES:
        vk.copy_(torch.from_numpy(swap_kv(h0)))
        o, s = fn(t["q"], t["k"], t["v"], g_wide, t["beta"], state_pool=pool,
                  output_final_state=True)
        want_o, want_s = ref_delta_rule(**x, h0=h0)
        assert s is pool
        assert_close(o.numpy(), want_o)
        assert_close(swap_kv(vk.numpy()), want_s)
        o2, s2 = fn(**t, initial_state=h0_strided, output_final_state=True)
        assert_close(o2.numpy(), want_o)
        assert_close(s2.numpy(), want_s)
        # an initial_state is copied, never written: the copy is contiguous (the CUDA backend
        # reads pools 16 bytes at a time), also from a transposed view
        o3, s3 = fn(**t, initial_state=torch.from_numpy(swap_kv(h0)).transpose(-1, -2),
                    output_final_state=True)
        assert s3.is_contiguous()
        assert_close(o3.numpy(), want_o)
        assert_close(s3.numpy(), want_s)


def test_gating_and_norms_take_strided_inputs(rng):
    HV, D = 6, 20
    A_log, dt_bias = normal(rng, 2 * HV)[::2], normal(rng, HV)[::-1]
    ab = normal(rng, 9, 2 * HV)
    a, b = ab[:, ::2], ab[:, 1::2]                              # last stride 2
    g, beta = gdn.fused_gdn_gating(A_log, a, b, dt_bias)
    want_g, want_beta = ref_gating(A_log, a, b, dt_bias)
    assert_close(g, want_g)
    assert_close(beta, want_beta)
    x = normal(rng, 3, 5, 2 * D)[..., ::-2]
    assert_close(gdn.l2norm(x), ref_l2norm(x))
    z, w = normal(rng, 3, 5, D), normal(rng, 2 * D)[::2]
    xd = np.asarray(x, np.float64)
    want = xd / np.sqrt(np.mean(xd * xd, -1, keepdims=True) + 1e-6) * w * z * ref_sigmoid(z)
    assert_close(gdn.rms_norm_gated(x, z.T.copy().T, w), want)


# ---- 4. mixed q / k / v dtypes -------------------------------------------------------------

@pytest.mark.parametrize("fn", DELTA_RULES)
@pytest.mark.parametrize("v_dtype", ["bfloat16", "float16"])
def test_torch_f32_qk_with_half_v(rng, fn, v_dtype):
    """FLA takes q, k float32 with v 16-bit: the math runs in float32 on v's exact values; o
    has q's dtype from chunk (FLA: o.to(q.dtype)) and v's from fused_recurrent (FLA: like v)."""
    torch = torch_or_skip()
    x = make_inputs(rng, 2, 21, 2, 4, K, V)
    h0 = 0.5 * normal(rng, 2, 4, K, V)
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    t["v"] = t["v"].to(getattr(torch, v_dtype))
    v_before = t["v"].clone()
    o, s = fn(**t, initial_state=torch.from_numpy(h0), output_final_state=True)
    want_o, want_s = ref_delta_rule(x["q"], x["k"], t["v"].float().numpy(), x["g"], x["beta"],
                                    h0=h0)
    chunk = fn is gdn.chunk_gated_delta_rule
    assert o.dtype == (torch.float32 if chunk else t["v"].dtype) and s.dtype == torch.float32
    assert_close(o.float().numpy(), want_o, TOL if chunk else 4e-3)  # 16-bit o: one rounding
    assert_close(s.numpy(), want_s)
    assert torch.equal(t["v"], v_before)
    t["q"] = t["q"].to(torch.bfloat16)                          # q 16-bit, k and v not
    t["v"] = torch.from_numpy(x["v"])
    o, _ = fn(**t)
    want_o, _ = ref_delta_rule(t["q"].float().numpy(), x["k"], x["v"], x["g"], x["beta"])
    assert o.dtype == (torch.bfloat16 if chunk else torch.float32)
    assert_close(o.float().numpy(), want_o, 4e-3 if chunk else TOL)


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_outputs_carry_no_autograd_history(rng, fn):
    """libgdn has no backward: with inputs that require grad, neither o nor the final state may
    require grad (a final state derived from initial_state by autograd would hand back silently
    wrong gradients, e.g. the identity to h0), and initial_state is not written."""
    torch = torch_or_skip()
    x = make_inputs(rng, 1, 19, 2, 4, K, V)
    t = {n: torch.from_numpy(a).requires_grad_() for n, a in x.items()}
    h0 = torch.from_numpy(0.5 * normal(rng, 1, 4, K, V)).requires_grad_()
    h0_before = h0.detach().clone()
    o, s = fn(**t, initial_state=h0, output_final_state=True)
    assert not o.requires_grad and not s.requires_grad
    assert o.grad_fn is None and s.grad_fn is None
    assert torch.equal(h0.detach(), h0_before)
    want_o, want_s = ref_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                    h0=h0_before.numpy())
    assert_close(o.numpy(), want_o)
    assert_close(s.numpy(), want_s)


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_numpy_f32_qk_with_f16_v(rng, fn):
    x = make_inputs(rng, 1, 17, 1, 2, K, V)
    x["v"] = x["v"].astype(np.float16)
    o, s = fn(**x, output_final_state=True)
    want_o, want_s = ref_delta_rule(**x)
    chunk = fn is gdn.chunk_gated_delta_rule
    assert o.dtype == (f32 if chunk else np.float16)
    assert_close(o, want_o, TOL if chunk else 1e-3)
    assert_close(s, want_s)


# ---- 5a. conv states wider than W - 1 ------------------------------------------------------

@pytest.mark.parametrize("extra", [0, 1, 3])
@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("with_slots", [False, True])
def test_conv_update_states_of_any_width(rng, extra, W, with_slots):
    """Token-by-token decode, x [B, C] and [B, C, 1] alternately, on states [.., C, W-1+extra]:
    outputs and the whole shifted state match causal-conv1d's semantics; padding rows (-1)
    give zeros and leave their slots alone; slots nobody names stay byte-identical."""
    B, C, T = 3, 13, 7
    L = W - 1 + extra
    x, w, bias = normal(rng, B, C, T), normal(rng, C, W), normal(rng, C)
    slots = np.array([4, -1, 1], np.int32) if with_slots else None
    S = 6 if with_slots else B
    pool0 = normal(rng, S, C, L)
    pool = pool0.copy()
    ys = []
    for t in range(T):
        xt = x[:, :, t] if t % 2 else x[:, :, t:t + 1]
        y = gdn.causal_conv1d_update(xt, pool, w, bias, "silu", conv_state_indices=slots)
        ys.append(y if y.ndim == 3 else y[:, :, None])
    rows = np.arange(B) if slots is None else np.maximum(slots, 0)
    want_y, want_state = ref_conv_states(x, w, bias, pool0[rows], activation="silu")
    live = [0, 2] if with_slots else [0, 1, 2]
    y = np.concatenate(ys, axis=-1)
    assert_close(y[live], want_y[live])
    assert_close(pool[rows[live]], want_state[live])
    if with_slots:
        assert not y[1].any()
        assert np.array_equal(pool[[0, 2, 3, 5]], pool0[[0, 2, 3, 5]])


# ---- 5b. several tokens per causal_conv1d_update -------------------------------------------

@pytest.mark.parametrize("extra", [0, 1, 5])
@pytest.mark.parametrize("steps", [(3,), (2, 1, 5), (7, 2)])
def test_conv_update_several_tokens(rng, extra, steps):
    B, C, W = 2, 11, 4
    L = W - 1 + extra
    T = sum(steps)
    x, w = normal(rng, B, C, T), normal(rng, C, W)
    slots = np.array([2, 0], np.int64)
    pool0 = normal(rng, 4, C, L)
    pool = pool0.copy()
    ys, t0 = [], 0
    for n in steps:
        chunk = x[:, :, t0:t0 + n]
        if n % 2:                                               # a [B, C, n] view of [B, n, C]
            chunk = np.ascontiguousarray(chunk.transpose(0, 2, 1)).transpose(0, 2, 1)
        y = gdn.causal_conv1d_update(chunk, pool, w, None, None, conv_state_indices=slots)
        assert y.shape == (B, C, n)
        ys.append(y)
        t0 += n
    want_y, want_state = ref_conv_states(x, w, None, pool0[slots])
    assert_close(np.concatenate(ys, axis=-1), want_y)
    assert_close(pool[slots], want_state)
    assert np.array_equal(pool[[1, 3]], pool0[[1, 3]])


def test_conv_update_several_tokens_equals_one_at_a_time(rng):
    B, C, W, T = 3, 9, 3, 5
    x, w, bias = normal(rng, B, C, T), normal(rng, C, W), normal(rng, C)
    state0 = normal(rng, B, C, W)                               # HF keeps W columns
    many, one = state0.copy(), state0.copy()
    y_many = gdn.causal_conv1d_update(x, many, w, bias, "silu")
    y_one = np.concatenate([gdn.causal_conv1d_update(x[:, :, t], one, w, bias, "silu")[..., None]
                            for t in range(T)], axis=-1)
    assert_close(y_many, y_one)
    assert_close(many, one)


def test_torch_conv_update_wide_state_and_slots(rng):
    torch = torch_or_skip()
    B, C, W, L, T = 3, 10, 4, 6, 3
    x, w = normal(rng, B, C, T), normal(rng, C, W)
    slots = np.array([1, -1, 3], np.int32)
    pool0 = normal(rng, 5, C, L)
    pool = torch.from_numpy(pool0.copy())
    y = gdn.causal_conv1d_update(torch.from_numpy(x), pool, torch.from_numpy(w), None, "silu",
                                 conv_state_indices=torch.from_numpy(slots))
    y2 = gdn.causal_conv1d_update(torch.from_numpy(x[:, :, 0]), pool, torch.from_numpy(w), None,
                                  "silu", conv_state_indices=torch.from_numpy(slots))
    full = np.concatenate([x, x[:, :, :1]], axis=-1)
    want_y, want_state = ref_conv_states(full, w, None, pool0[np.maximum(slots, 0)],
                                         activation="silu")
    live = [0, 2]
    assert_close(y.numpy()[live], want_y[live, :, :T])
    assert_close(y2.numpy()[live], want_y[live, :, T])
    assert_close(pool.numpy()[slots[live]], want_state[live])
    assert not y[1].any() and not y2[1].any()
    assert np.array_equal(pool.numpy()[[0, 2, 4]], pool0[[0, 2, 4]])


def test_conv_fn_states_of_any_width(rng):
    B, C, W, T = 2, 7, 4, 5
    x, w = normal(rng, B, C, T), normal(rng, C, W)
    init = normal(rng, B, C, W + 1)
    init0 = init.copy()
    y, final = gdn.causal_conv1d_fn(x, w, initial_states=init, return_final_states=True)
    want_y, want_final = ref_conv_states(x, w, None, init)
    assert final.shape == init.shape
    assert_close(y, want_y)
    assert_close(final, want_final)
    assert np.array_equal(init, init0)
    narrow = normal(rng, B, C, W - 1)                           # widened by final_states_out
    out = np.full((B, C, W + 2), np.nan, f32)
    y, final = gdn.causal_conv1d_fn(x[:, :, :2], w, initial_states=narrow,
                                    return_final_states=True, final_states_out=out)
    padded = np.concatenate([np.zeros((B, C, 3)), narrow], axis=-1)
    want_y, want_final = ref_conv_states(x[:, :, :2], w, None, padded)
    assert final is out
    assert_close(y, want_y)
    assert_close(out, want_final)


def test_conv_fn_wide_pool_varlen(rng):
    """conv_states [S, C, L > W-1] in place, varlen with sequences shorter and longer than L,
    padding (-1) and a fresh start (has_initial_state 0)."""
    lens = [5, 0, 1, 2, 9, 3]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    C, W, L, S = 6, 3, 5, 8
    x, w, bias = normal(rng, C, int(cu[-1])), normal(rng, C, W), normal(rng, C)
    idx = np.array([7, 2, -1, 0, 4, 5], np.int32)
    has = np.array([1, 1, 1, 0, 1, 1], np.uint8)
    pool0 = normal(rng, S, C, L)
    pool = pool0.copy()
    y = gdn.causal_conv1d_fn(x, w, bias, conv_states=pool, cache_indices=idx,
                             has_initial_state=has, query_start_loc=cu, activation="silu")
    for n, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        if idx[n] < 0:
            assert not y[:, s:e].any()
            continue
        want_y, want_state = ref_conv_states(x[None, :, s:e], w, bias,
                                             pool0[idx[n]][None] * has[n], activation="silu")
        assert_close(y[:, s:e], want_y[0])
        assert_close(pool[idx[n]], want_state[0])
    assert np.array_equal(pool[[1, 3, 6]], pool0[[1, 3, 6]])


def test_conv_states_narrower_than_window_are_refused(rng):
    C, W = 5, 4
    x, w = normal(rng, 2, C, 3), normal(rng, C, W)
    with pytest.raises(gdn.GdnValueError, match=r"^conv_state\.shape\[2\] is 2, expected >= 3"):
        gdn.causal_conv1d_update(x[:, :, 0], normal(rng, 2, C, 2), w)
    with pytest.raises(gdn.GdnValueError, match=r"^initial_states\.shape\[2\] is 1"):
        gdn.causal_conv1d_fn(x, w, initial_states=normal(rng, 2, C, 1))
    with pytest.raises(gdn.GdnValueError, match=r"^conv_states\.shape\[2\] is 2"):
        gdn.causal_conv1d_fn(x, w, conv_states=normal(rng, 2, C, 2))


def test_wide_state_failing_call_writes_nothing(rng):
    C, W = 5, 3
    w = normal(rng, C, W)
    pool0 = normal(rng, 3, C, W + 2)
    pool = pool0.copy()
    for x in (normal(rng, 2, C), normal(rng, 2, C, 4)):
        with pytest.raises(gdn.GdnValueError, match="both 1"):
            gdn.causal_conv1d_update(x, pool, w, conv_state_indices=np.array([1, 1], np.int32))
        assert np.array_equal(pool, pool0)
    with pytest.raises(gdn.GdnValueError, match="expected < 3"):
        gdn.causal_conv1d_fn(normal(rng, 2, C, 4), w, conv_states=pool,
                             cache_indices=np.array([0, 3], np.int32))
    assert np.array_equal(pool, pool0)


# ---- 5c. seq_idx -------------------------------------------------------------------------------

@pytest.mark.parametrize("B,W", [(1, 4), (3, 4), (2, 2), (3, 3)])
def test_conv_seq_idx(rng, B, W):
    C, T = 9, 23
    seq_idx = np.stack([runs(rng, T, W) for _ in range(B)])
    x_btc = normal(rng, B, T, C)
    w, bias = normal(rng, C, W), normal(rng, C)
    want = ref_conv_seq_idx(x_btc.transpose(0, 2, 1), w, seq_idx, bias, "silu")
    for x in (x_btc.transpose(0, 2, 1), np.ascontiguousarray(x_btc.transpose(0, 2, 1))):
        y = gdn.causal_conv1d_fn(x, w, bias, seq_idx=seq_idx, activation="silu")
        assert y.shape == (B, C, T)
        assert_close(y, want)
    same = np.zeros((B, T), np.int32)                           # one id: the plain conv
    assert_close(gdn.causal_conv1d_fn(x, w, seq_idx=same),
                 ref_conv_states(x, w)[0])


def test_torch_conv_seq_idx_both_offset_forms(rng):
    """On CUDA the offsets are computed on the device without a sync (one per token, most of the
    sequences empty): both forms, run on the CPU here, give causal-conv1d's result."""
    torch = torch_or_skip()
    B, C, T, W = 3, 8, 19, 4
    seq_idx = np.stack([runs(rng, T, W) for _ in range(B)])
    x, w = normal(rng, B, C, T), normal(rng, C, W)
    want = ref_conv_seq_idx(x, w, seq_idx)
    tx, tw, ts = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(seq_idx)
    assert_close(gdn.causal_conv1d_fn(tx, tw, seq_idx=ts).numpy(), want)
    packed = x.transpose(1, 0, 2).reshape(C, B * T)             # [C, B*T]
    sequences = 1 + int((seq_idx[:, 1:] != seq_idx[:, :-1]).sum()) + (B - 1)
    for compact in (True, False):
        cu = gdn.conv._seq_idx_offsets(ts, B, T, tx, compact=compact)
        assert cu.shape[0] == (sequences if compact else B * T) + 1
        y = gdn.causal_conv1d_fn(torch.from_numpy(packed), tw, query_start_loc=cu)
        assert_close(y.numpy().reshape(C, B, T).transpose(1, 0, 2), want)


def test_conv_seq_idx_refusals(rng):
    C, W, B, T = 4, 3, 2, 6
    x, w = normal(rng, B, C, T), normal(rng, C, W)
    seq_idx = np.zeros((B, T), np.int32)
    for kw in (dict(initial_states=normal(rng, B, C, W - 1)), dict(return_final_states=True),
               dict(conv_states=normal(rng, B, C, W - 1))):
        with pytest.raises(ValueError, match="seq_idx"):
            gdn.causal_conv1d_fn(x, w, seq_idx=seq_idx, **kw)
    with pytest.raises(gdn.GdnValueError, match=r"seq_idx\.shape is \(2, 5\)"):
        gdn.causal_conv1d_fn(x, w, seq_idx=seq_idx[:, :5])


# ---- 7. out=: the caller's output array ----------------------------------------------------

@pytest.mark.parametrize("fn", DELTA_RULES)
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_delta_rule_into_out_matches_float64(rng, fn, framework):
    """o written into out (odd sizes, a pool with a padding slot): the float64 recurrence in
    the rows that run, out's own values in the padding sequence's rows, out itself returned."""
    B, T, H, HV = 3, 13, 1, 3
    x = make_inputs(rng, B, T, H, HV, K, V)
    pool0 = 0.5 * normal(rng, 5, HV, K, V)
    slots = np.array([4, -1, 0], np.int32)
    fill = normal(rng, B, T, HV, V)
    pool, out = pool0.copy(), fill.copy()
    args = [x[n] for n in ("q", "k", "v", "g", "beta")]
    if framework == "torch":
        torch = torch_or_skip()
        args = [torch.from_numpy(a) for a in args]
        pool, out, slots = (torch.from_numpy(a) for a in (pool, out, slots))
    o, _ = fn(*args, state_pool=pool, state_indices=slots, out=out)
    assert o is out
    o, pool = np.asarray(o), np.asarray(pool)
    live = [0, 2]
    want_o, want_s = ref_delta_rule(*(x[n][live] for n in ("q", "k", "v", "g", "beta")),
                                    h0=pool0[[4, 0]])
    assert_close(o[live], want_o)
    assert_close(pool[[4, 0]], want_s)
    assert np.array_equal(o[1], fill[1])                       # padding: not written
    assert np.array_equal(pool[[1, 2, 3]], pool0[[1, 2, 3]])


@pytest.mark.parametrize("in_place", [False, True])
def test_conv_update_into_out_matches_float64(rng, in_place):
    """One token per sequence into out (or over x): the float64 conv in the rows that run, the
    padding row keeps out's (x's) values."""
    B, C, W = 3, 13, 4
    x, w, bias = normal(rng, B, C), normal(rng, C, W), normal(rng, C)
    pool0 = normal(rng, 5, C, W - 1)
    pool, slots = pool0.copy(), np.array([4, -1, 1], np.int32)
    x_before = x.copy()
    out = x if in_place else normal(rng, B, C)
    out_before = out.copy()
    y = gdn.causal_conv1d_update(x, pool, w, bias, "silu", conv_state_indices=slots, out=out)
    assert y is out
    live, rows = [0, 2], [4, 1]
    want_y, want_state = ref_conv_states(x_before[live][:, :, None], w, bias, pool0[rows],
                                         activation="silu")
    assert_close(y[live], want_y[:, :, 0])
    assert_close(pool[rows], want_state)
    assert np.array_equal(y[1], out_before[1])
