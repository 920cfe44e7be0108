"""Tests of the gdn Python package against independent NumPy float64 implementations.

Every expectation here is computed in this file, straight from the formulas of docs/MATH.md
(nothing is produced by libgdn or copied from src/):
  - gated delta rule, per head:  S = exp(g) S;  u = beta (v - S^T k);  S = S + k u^T;
    o = scale S^T q  (scale defaults to 1/sqrt(K)); key head h // (HV/H) (block) or h % H (tiled);
  - gating:  g = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b) (2 sigmoid(b));
  - causal conv:  y[c][t] = act(bias[c] + sum_i w[c][i] x[c][t-(W-1)+i]);
  - norms:  x / sqrt(sum x^2 + eps)  and  x / sqrt(mean x^2 + eps) * w * silu(z).
Results are compared by relative L2 error, ||got - want|| / ||want|| <= 1e-5 for float32 data.

Each test draws fresh random inputs; the seed is printed (pytest shows it on failure) and
GDN_TEST_SEED=<n> replays it.
"""
import os
import secrets

import numpy as np
import pytest

import gdn

f32 = np.float32
TOL = 1e-5


# ---- helpers -------------------------------------------------------------------------------

@pytest.fixture
def rng(request):
    seed = int(os.environ.get("GDN_TEST_SEED") or secrets.randbits(63))
    print(f"{request.node.name}: seed {seed} (replay with GDN_TEST_SEED={seed})")
    return np.random.default_rng(seed)


def assert_close(got, want, tol=TOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert np.all(np.isfinite(got)), "non-finite values"
    err, ref = np.linalg.norm(got - want), np.linalg.norm(want)
    assert err <= tol * ref, f"relative L2 error {err / ref if ref else err:.3g} > {tol}"


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(x.dtype)


def make_inputs(rng, B, T, H, HV, K=32, V=48, unit_keys=True):
    """q, k [B, T, H, K]; v [B, T, HV, V]; g in [-0.5, 0]; beta in (0, 1); all float32."""
    k = normal(rng, B, T, H, K)
    return dict(q=normal(rng, B, T, H, K), k=unit(k) if unit_keys else k, v=normal(rng, B, T, HV, V),
                g=rng.uniform(-0.5, 0.0, (B, T, HV)).astype(f32),
                beta=rng.uniform(0.01, 0.99, (B, T, HV)).astype(f32))


def swap_kv(state):
    """[..., K, V] <-> [..., V, K], as a contiguous array."""
    return np.ascontiguousarray(np.swapaxes(state, -1, -2))


# ---- NumPy float64 references ---------------------------------------------------------------

def ref_l2norm(x, eps=1e-6):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def ref_softplus(x, threshold=20.0):
    return np.where(x > threshold, x, np.log1p(np.exp(np.minimum(x, threshold))))


def ref_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def ref_gating(A_log, a, b=None, dt_bias=None, threshold=20.0, allow_neg_eigval=False):
    a = np.asarray(a, np.float64) + (0.0 if dt_bias is None else np.asarray(dt_bias, np.float64))
    g = -np.exp(np.asarray(A_log, np.float64)) * ref_softplus(a, threshold)
    beta = None if b is None else (2.0 if allow_neg_eigval else 1.0) * ref_sigmoid(b)
    return g, beta


def ref_delta_rule(q, k, v, g=None, beta=None, scale=None, h0=None, cu_seqlens=None,
                   gva="block", l2norm=False):
    """The recurrence token by token in float64. q, k [B, T, H, K]; v [B, T, HV, V];
    g, beta [B, T, HV]; h0 [N, HV, K, V] or None. Returns o [B, T, HV, V], states [N, HV, K, V]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, T, H, K = q.shape
    HV, V = v.shape[2:]
    g = np.zeros((B, T, HV)) if g is None else np.asarray(g, np.float64)
    beta = np.ones((B, T, HV)) if beta is None else np.asarray(beta, np.float64)
    if l2norm:
        q, k = ref_l2norm(q), ref_l2norm(k)
    scale = K ** -0.5 if scale is None else scale
    kh = np.arange(HV) // (HV // H) if gva == "block" else np.arange(HV) % H  # key head per h
    if cu_seqlens is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        seqs = [(0, int(s), int(e)) for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    o = np.zeros(v.shape)
    states = np.zeros((len(seqs), HV, K, V))
    for n, (b, t0, t1) in enumerate(seqs):
        S = np.zeros((HV, K, V)) if h0 is None else np.array(h0[n], np.float64)
        for t in range(t0, t1):
            qt, kt = q[b, t, kh], k[b, t, kh]                            # [HV, K]
            S = np.exp(g[b, t])[:, None, None] * S                       # decay first
            u = beta[b, t][:, None] * (v[b, t] - np.einsum("hkv,hk->hv", S, kt))
            S = S + kt[:, :, None] * u[:, None, :]                       # rank-1 write
            o[b, t] = scale * np.einsum("hkv,hk->hv", S, qt)             # read after write
        states[n] = S
    return o, states


def ref_conv(x, w, bias=None, init=None, activation=None):
    """x [B, C, T], w [C, W], init [B, C, W-1] (oldest first) or None (zeros).
    Returns y [B, C, T] and the new state [B, C, W-1] (the last W-1 inputs)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, C, T = x.shape
    W = w.shape[1]
    init = np.zeros((B, C, W - 1)) if init is None else np.asarray(init, np.float64)
    xp = np.concatenate([init, x], axis=-1)                  # xp[..., j] = x[..., j - (W-1)]
    y = sum(w[None, :, i, None] * xp[:, :, i:i + T] for i in range(W))
    if bias is not None:
        y = y + np.asarray(bias, np.float64)[None, :, None]
    if activation == "silu":
        y = y * ref_sigmoid(y)
    return y, xp[:, :, xp.shape[-1] - (W - 1):]


def ref_conv_varlen(x, w, cu, bias=None, init=None, activation=None):
    """x [C, T_total] with sequences cu[n]..cu[n+1]; init [N, C, W-1] or None."""
    ys, states = [], []
    for n, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        y, st = ref_conv(x[None, :, s:e], w, bias, None if init is None else init[n:n + 1],
                         activation)
        ys.append(y[0])
        states.append(st[0])
    return np.concatenate(ys, axis=-1), np.stack(states)


def ref_rms_norm_gated(x, z, w, eps, norm_before_gate=True, weight_offset=False):
    x = np.asarray(x, np.float64)
    gate = 1.0 if z is None else np.asarray(z, np.float64) * ref_sigmoid(z)
    w = 1.0 if w is None else np.asarray(w, np.float64) + (1.0 if weight_offset else 0.0)

    def rms(y):
        return y / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + eps)
    return rms(x) * w * gate if norm_before_gate else rms(x * gate) * w


# ---- 1. fused_recurrent_gated_delta_rule ----------------------------------------------------

RECURRENT_CASES = {
    "plain":         dict(B=2, T=37, H=2, HV=2),
    "gva2_init":     dict(B=1, T=50, H=2, HV=4, init=True),
    "gva4_scale":    dict(B=2, T=19, H=1, HV=4, scale=0.3),
    "tiled_init":    dict(B=1, T=23, H=2, HV=4, gva="tiled", init=True),
    "v_first_init":  dict(B=2, T=21, H=2, HV=4, init=True, state_v_first=True),
    "v_first_zeros": dict(B=1, T=9, H=2, HV=2, K=16, V=16, state_v_first=True),
    "l2norm_tiled":  dict(B=1, T=33, H=3, HV=6, l2=True, gva="tiled"),
    "one_token":     dict(B=3, T=1, H=2, HV=4, K=64, V=32, init=True),
}


@pytest.mark.parametrize("backend", [None, "ref"])
@pytest.mark.parametrize("case", sorted(RECURRENT_CASES))
def test_fused_recurrent_matches_reference(rng, case, backend):
    c = dict(dict(K=32, V=48, init=False, scale=None, gva="block", l2=False,
                  state_v_first=False), **RECURRENT_CASES[case])
    x = make_inputs(rng, c["B"], c["T"], c["H"], c["HV"], c["K"], c["V"], unit_keys=not c["l2"])
    h0 = 0.5 * normal(rng, c["B"], c["HV"], c["K"], c["V"]) if c["init"] else None
    h0_arg = None if h0 is None else (swap_kv(h0) if c["state_v_first"] else h0.copy())
    o, final = gdn.fused_recurrent_gated_delta_rule(
        **x, scale=c["scale"], initial_state=h0_arg, output_final_state=True,
        use_qk_l2norm_in_kernel=c["l2"], state_v_first=c["state_v_first"], gva=c["gva"],
        backend=backend)
    want_o, want_state = ref_delta_rule(**x, scale=c["scale"], h0=h0, gva=c["gva"],
                                        l2norm=c["l2"])
    assert o.dtype == f32 and o.shape == x["v"].shape
    assert_close(o, want_o)
    assert_close(swap_kv(final) if c["state_v_first"] else final, want_state)
    if h0 is not None:  # FLA semantics: initial_state is read, never written
        assert np.array_equal(h0_arg, swap_kv(h0) if c["state_v_first"] else h0)


def test_fused_recurrent_defaults(rng):
    """g=None (no decay), beta=None (1), output_final_state=False returns None."""
    x = make_inputs(rng, 2, 13, 2, 4)
    o, final = gdn.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"])
    assert final is None
    assert_close(o, ref_delta_rule(x["q"], x["k"], x["v"])[0])


@pytest.mark.parametrize("fn", ["fused_recurrent", "chunk"])
@pytest.mark.parametrize("gate,sigmoid,neg", [(True, True, False), (True, True, True),
                                              (True, False, False), (False, True, False),
                                              (False, True, True), (False, False, True)])
def test_in_kernel_gating(rng, fn, gate, sigmoid, neg):
    """use_gate_in_kernel (g holds raw a) and use_beta_sigmoid_in_kernel (beta holds logits b),
    together and each alone; allow_neg_eigval makes beta = 2 sigmoid(b) and leaves a given beta
    as it is."""
    B, T, H, HV = 2, 29, 2, 4
    x = make_inputs(rng, B, T, H, HV)
    A_log = rng.uniform(-1.5, 0.5, HV).astype(f32)
    dt_bias = rng.uniform(-1.0, 1.0, HV).astype(f32)
    a, b = normal(rng, B, T, HV), normal(rng, B, T, HV)
    if not sigmoid and neg:
        x["beta"] = rng.uniform(1.0, 1.99, (B, T, HV)).astype(f32)
    g_want = ref_gating(A_log, a, None, dt_bias)[0] if gate else x["g"]
    beta_want = (2.0 if neg else 1.0) * ref_sigmoid(b) if sigmoid else x["beta"]
    kw = dict(use_gate_in_kernel=gate, A_log=A_log if gate else None,
              dt_bias=dt_bias if gate else None, use_beta_sigmoid_in_kernel=sigmoid,
              allow_neg_eigval=neg, output_final_state=True)
    f = (gdn.fused_recurrent_gated_delta_rule if fn == "fused_recurrent"
         else gdn.chunk_gated_delta_rule)
    o, final = f(x["q"], x["k"], x["v"], a if gate else x["g"], b if sigmoid else x["beta"], **kw)
    want_o, want_state = ref_delta_rule(x["q"], x["k"], x["v"], g_want, beta_want)
    assert_close(o, want_o)
    assert_close(final, want_state)


@pytest.mark.parametrize("cu_dtype", [np.int32, np.int64])
def test_fused_recurrent_varlen(rng, cu_dtype):
    lens = [5, 0, 1, 17, 9]                                   # an empty and a one-token sequence
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(cu_dtype)
    N, H, HV = len(lens), 2, 4
    x = make_inputs(rng, 1, int(cu[-1]), H, HV)
    h0 = 0.5 * normal(rng, N, HV, 32, 48)
    o, final = gdn.fused_recurrent_gated_delta_rule(**x, initial_state=h0, output_final_state=True,
                                                    cu_seqlens=cu)
    want_o, want_state = ref_delta_rule(**x, h0=h0, cu_seqlens=cu)
    assert_close(o, want_o)
    assert_close(final, want_state)
    assert np.array_equal(final[1], h0[1])                    # the empty sequence keeps its state


# ---- 2. chunk_gated_delta_rule --------------------------------------------------------------

@pytest.mark.parametrize("backend", [None, "ref"])
@pytest.mark.parametrize("chunk_size,T", [(16, 45), (32, 100), (64, 10), (64, 130), (128, 77)])
def test_chunk_matches_reference_and_recurrent(rng, chunk_size, T, backend):
    B, H, HV = 2, 2, 4
    x = make_inputs(rng, B, T, H, HV)
    h0 = 0.5 * normal(rng, B, HV, 32, 48)
    want_o, want_state = ref_delta_rule(**x, h0=h0)
    rec_o, rec_state = gdn.fused_recurrent_gated_delta_rule(**x, initial_state=h0,
                                                            output_final_state=True)
    for algorithm in ("chunked", "auto"):
        o, final = gdn.chunk_gated_delta_rule(**x, initial_state=h0, output_final_state=True,
                                              chunk_size=chunk_size, algorithm=algorithm,
                                              backend=backend)
        assert_close(o, want_o)
        assert_close(final, want_state)
        assert_close(o, rec_o)
        assert_close(final, rec_state)


@pytest.mark.parametrize("backend", [None, "ref"])
def test_chunk_precision_modes(rng, backend):
    """f32 inputs: "fast", "high" and "auto" give the same bytes (16-bit products only take
    16-bit inputs); any other string is refused, naming precision."""
    x = make_inputs(rng, 1, 150, 2, 4)
    outs = [gdn.chunk_gated_delta_rule(**x, output_final_state=True, precision=p,
                                       backend=backend) for p in ("auto", "fast", "high")]
    for o, s in outs[1:]:
        assert np.array_equal(o, outs[0][0]) and np.array_equal(s, outs[0][1])
    with pytest.raises(ValueError, match="precision"):
        gdn.chunk_gated_delta_rule(**x, precision="medium", backend=backend)


def test_chunk_varlen_v_first_tiled(rng):
    lens = [0, 40, 1, 16, 3]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    x = make_inputs(rng, 1, int(cu[-1]), 2, 4, K=48, V=32, unit_keys=False)
    h0 = 0.5 * normal(rng, len(lens), 4, 48, 32)
    o, final = gdn.chunk_gated_delta_rule(**x, scale=0.2, initial_state=swap_kv(h0),
                                          output_final_state=True, use_qk_l2norm_in_kernel=True,
                                          state_v_first=True, cu_seqlens=cu, gva="tiled",
                                          chunk_size=16, algorithm="chunked")
    want_o, want_state = ref_delta_rule(**x, scale=0.2, h0=h0, cu_seqlens=cu, gva="tiled",
                                        l2norm=True)
    assert_close(o, want_o)
    assert_close(swap_kv(final), want_state)


# ---- 3. zero-copy strided views -------------------------------------------------------------

def test_qkv_views_of_fused_projection(rng):
    B, T, H, HV, K, V = 2, 27, 2, 4, 32, 48
    fused = normal(rng, B, T, 2 * H * K + HV * V)
    q = fused[..., :H * K].reshape(B, T, H, K)
    k = fused[..., H * K:2 * H * K].reshape(B, T, H, K)
    v = fused[..., 2 * H * K:].reshape(B, T, HV, V)
    assert all(np.shares_memory(t, fused) for t in (q, k, v)) and not q.flags.c_contiguous
    gb = np.concatenate([rng.uniform(-0.5, 0.0, (B, T, HV)),       # g and beta side by side
                         rng.uniform(0.01, 0.99, (B, T, HV))], axis=-1).astype(f32)
    g, beta = gb[..., :HV], gb[..., HV:]
    kw = dict(use_qk_l2norm_in_kernel=True, output_final_state=True)
    for f in (gdn.fused_recurrent_gated_delta_rule, gdn.chunk_gated_delta_rule):
        o, final = f(q, k, v, g, beta, **kw)
        o_c, final_c = f(*(np.ascontiguousarray(t) for t in (q, k, v, g, beta)), **kw)
        assert np.array_equal(o, o_c) and np.array_equal(final, final_c)
        want_o, want_state = ref_delta_rule(q, k, v, g, beta, l2norm=True)
        assert_close(o, want_o)
        assert_close(final, want_state)


def test_strided_g_and_beta(rng):
    """A token stride ([:, ::2]) is read in place; a non-unit last stride or a negative stride
    (which libgdn's C API cannot read) is copied by the package, with the same result
    (test_parity.py has the rest of the stride cases)."""
    x = make_inputs(rng, 2, 15, 2, 4)
    g2 = rng.uniform(-0.5, 0.0, (2, 30, 4)).astype(f32)
    b2 = rng.uniform(0.01, 0.99, (2, 30, 4)).astype(f32)
    o, _ = gdn.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], g2[:, ::2], b2[:, 1::2])
    want_o, _ = ref_delta_rule(x["q"], x["k"], x["v"], g2[:, ::2], b2[:, 1::2])
    assert_close(o, want_o)
    g8 = rng.uniform(-0.5, 0.0, (2, 15, 8)).astype(f32)
    o, _ = gdn.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], g8[..., ::2], x["beta"])
    assert_close(o, ref_delta_rule(x["q"], x["k"], x["v"], g8[..., ::2], x["beta"])[0])
    b_rev = x["beta"][:, ::-1]
    o, _ = gdn.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], b_rev)
    assert_close(o, ref_delta_rule(x["q"], x["k"], x["v"], x["g"], b_rev)[0])


# ---- 4. the in-place state pool -------------------------------------------------------------

def test_pool_two_call_prefill_equals_one_call(rng):
    """Slots [4, -1, 1]: sequence 1 is padding; sequence 2 starts from zeros
    (has_initial_state 0) although its slot holds data. Slots 0, 2, 3 are never touched."""
    N, S, T, T1, H, HV = 3, 5, 40, 23, 2, 4
    x = make_inputs(rng, N, T, H, HV)
    pool0 = 0.5 * normal(rng, S, HV, 32, 48)
    slots = np.array([4, -1, 1], np.int32)
    has = np.array([1, 1, 0], np.uint8)
    one = pool0.copy()
    o_one, ret = gdn.chunk_gated_delta_rule(**x, state_pool=one, state_indices=slots,
                                            has_initial_state=has, output_final_state=True)
    assert ret is one
    two = pool0.copy()
    first = {n: t[:, :T1] for n, t in x.items()}
    second = {n: t[:, T1:] for n, t in x.items()}
    o1, _ = gdn.chunk_gated_delta_rule(**first, state_pool=two, state_indices=slots,
                                       has_initial_state=has)
    o2, _ = gdn.chunk_gated_delta_rule(**second, state_pool=two, state_indices=slots,
                                       has_initial_state=np.ones(N, np.int32))
    o_two = np.concatenate([o1, o2], axis=1)
    h0 = np.stack([pool0[4], np.zeros_like(pool0[0]), np.zeros_like(pool0[0])])
    want_o, want_state = ref_delta_rule(**x, h0=h0)
    for pool, o in ((one, o_one), (two, o_two)):
        assert_close(o[[0, 2]], want_o[[0, 2]])
        assert_close(pool[[4, 1]], want_state[[0, 2]])
        assert np.array_equal(pool[[0, 2, 3]], pool0[[0, 2, 3]])   # byte-identical
    assert_close(o_two[[0, 2]], o_one[[0, 2]])
    assert_close(two[[4, 1]], one[[4, 1]])


@pytest.mark.parametrize("state_v_first", [False, True])
def test_pool_decode_after_prefill_equals_longer_prefill(rng, state_v_first):
    N, S, T0, T, H, HV = 2, 4, 20, 26, 1, 2
    x = make_inputs(rng, N, T, H, HV)
    slots = np.array([3, 0], np.int64)
    pool0 = 0.5 * normal(rng, S, HV, 32, 48)
    pool0_arg = swap_kv(pool0) if state_v_first else pool0
    kw = dict(state_indices=slots, state_v_first=state_v_first)

    stepped = pool0_arg.copy()
    outs = [gdn.chunk_gated_delta_rule(**{n: t[:, :T0] for n, t in x.items()},
                                       state_pool=stepped, **kw)[0]]
    for t in range(T0, T):  # decode: one token per call
        outs.append(gdn.fused_recurrent_gated_delta_rule(
            **{n: a[:, t:t + 1] for n, a in x.items()}, state_pool=stepped, **kw)[0])
    o_stepped = np.concatenate(outs, axis=1)

    longer = pool0_arg.copy()
    o_long, _ = gdn.chunk_gated_delta_rule(**x, state_pool=longer, **kw)
    want_o, want_state = ref_delta_rule(**x, h0=pool0[slots])
    kv = swap_kv if state_v_first else np.asarray
    assert_close(o_stepped, o_long)
    assert_close(stepped, longer)
    assert_close(o_stepped, want_o)
    assert_close(kv(stepped)[slots], want_state)
    assert np.array_equal(stepped[[1, 2]], pool0_arg[[1, 2]])


def test_pool_varlen_padding_and_empty_sequences(rng):
    """Varlen with the pool: an empty sequence that continues keeps its slot byte-identical, an
    empty new sequence (has_initial_state 0) gets a zero state, a padded sequence (-1) writes
    nothing, unnamed slots stay byte-identical."""
    lens = [7, 0, 1, 0, 12]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    slots = np.array([3, 1, -1, 0, 2], np.int32)
    has = np.array([1, 1, 1, 0, 0], np.int32)
    x = make_inputs(rng, 1, int(cu[-1]), 2, 2)
    pool0 = 0.5 * normal(rng, 6, 2, 32, 48)
    pool = pool0.copy()
    o, _ = gdn.fused_recurrent_gated_delta_rule(**x, cu_seqlens=cu, state_pool=pool,
                                                state_indices=slots, has_initial_state=has)
    h0 = np.stack([pool0[3], pool0[1], pool0[0], pool0[0], pool0[0]]) * has[:, None, None, None]
    want_o, want_state = ref_delta_rule(**x, h0=h0, cu_seqlens=cu)
    rows = np.r_[cu[0]:cu[1], cu[4]:cu[5]]                   # the two non-empty, unpadded ones
    assert_close(o[:, rows], want_o[:, rows])
    assert_close(pool[[3, 2]], want_state[[0, 4]])
    assert np.array_equal(pool[1], pool0[1])
    assert np.array_equal(pool[0], np.zeros_like(pool0[0]))
    assert np.array_equal(pool[[4, 5]], pool0[[4, 5]])


@pytest.mark.parametrize("slots,match", [([0, 0], "both 0"), ([0, 3], "expected < 3")])
def test_pool_bad_slots_raise_and_write_nothing(rng, slots, match):
    x = make_inputs(rng, 2, 5, 2, 2)
    pool0 = normal(rng, 3, 2, 32, 48)
    pool = pool0.copy()
    with pytest.raises(gdn.GdnValueError, match=match):
        gdn.fused_recurrent_gated_delta_rule(**x, state_pool=pool,
                                             state_indices=np.array(slots, np.int32))
    assert np.array_equal(pool, pool0)


# ---- 5. fused_gdn_gating --------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(37, 6), (2, 9, 6), (6,)])
def test_gating_matches_formula(rng, shape):
    HV = shape[-1]
    A_log = rng.uniform(-2.0, 1.0, HV).astype(f32)
    dt_bias = normal(rng, HV)
    a, b = 3 * normal(rng, *shape), 3 * normal(rng, *shape)
    g, beta = gdn.fused_gdn_gating(A_log, a, b, dt_bias)
    want_g, want_beta = ref_gating(A_log, a, b, dt_bias)
    assert g.dtype == f32 and beta.dtype == f32 and g.shape == shape and beta.shape == shape
    assert_close(g, want_g)
    assert_close(beta, want_beta)


def test_gating_threshold(rng):
    """softplus(x) = x above the threshold; log1p(exp(x)) below; no overflow for large x."""
    HV = 8
    A_log = rng.uniform(-1.0, 1.0, HV).astype(f32)
    x = np.concatenate([rng.uniform(-4.0, 1.5, (16, HV)), rng.uniform(2.5, 6.0, (16, HV))])
    a = x.astype(f32)
    g, _ = gdn.fused_gdn_gating(A_log, a, None, threshold=2.0)
    assert_close(g, ref_gating(A_log, a, threshold=2.0)[0])
    assert np.linalg.norm(g - ref_gating(A_log, a)[0]) > 1e-3 * np.linalg.norm(g)  # it matters
    big = np.array([[30.0, 80.0, 100.0, 1e3, 1e4, -30.0, -100.0, 0.0]], f32)
    g, _ = gdn.fused_gdn_gating(A_log, big, None)           # default threshold 20
    assert_close(g, ref_gating(A_log, big)[0])


def test_gating_neg_exp_form_and_options(rng):
    HV = 5
    A_log = rng.uniform(-2.0, 1.0, HV).astype(f32)
    a, b = normal(rng, 3, 11, HV), normal(rng, 3, 11, HV)
    want_g, want_beta = ref_gating(A_log, a, b, allow_neg_eigval=True)
    ssm_a = (-np.exp(A_log.astype(np.float64))).astype(f32)   # GGUF stores -exp(A_log)
    g, beta = gdn.fused_gdn_gating(ssm_a, a, b, a_form="neg_exp", allow_neg_eigval=True)
    assert_close(g, ref_gating(np.log(-ssm_a.astype(np.float64)), a)[0])
    assert_close(g, want_g)
    assert_close(beta, want_beta)
    assert beta.max() > 1.0                                    # 2 sigmoid(b) reaches above 1
    g_only, beta_none = gdn.fused_gdn_gating(A_log, a, None)
    assert beta_none is None
    assert_close(g_only, want_g)


def test_gating_half_precision_input_gives_float32(rng):
    HV = 4
    A_log, dt_bias = normal(rng, HV), normal(rng, HV)
    a, b = normal(rng, 7, HV).astype(np.float16), normal(rng, 7, HV).astype(np.float16)
    g, beta = gdn.fused_gdn_gating(A_log, a, b, dt_bias)
    assert g.dtype == f32 and beta.dtype == f32 and g.shape == a.shape
    want_g, want_beta = ref_gating(A_log, a, b, dt_bias)      # from the f16 values themselves
    assert_close(g, want_g)
    assert_close(beta, want_beta)


# ---- 6. causal conv1d ----------------------------------------------------------------------

@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("W,with_bias,weight_3d", [(4, True, False), (2, False, True),
                                                   (3, True, True)])
def test_conv_matches_formula(rng, activation, W, with_bias, weight_3d):
    B, C, T = 2, 24, 19
    x = normal(rng, B, C, T)
    w, bias = normal(rng, C, W), (normal(rng, C) if with_bias else None)
    y = gdn.causal_conv1d_fn(x, w[:, None, :] if weight_3d else w, bias, activation=activation)
    assert y.shape == x.shape and y.dtype == f32
    assert_close(y, ref_conv(x, w, bias, activation=activation)[0])


def test_conv_transposed_view_is_zero_copy(rng):
    B, T, C, W = 2, 17, 40, 4
    x_btc = normal(rng, B, T, C)
    x = x_btc.transpose(0, 2, 1)                               # [B, C, T] view, channels contiguous
    from gdn.conv import _channels_last                         # what the package hands libgdn
    assert np.shares_memory(_channels_last(x), x_btc)           # is x_btc itself, not a copy
    w, bias = normal(rng, C, W), normal(rng, C)
    y = gdn.causal_conv1d_fn(x, w, bias, activation="silu")
    assert np.array_equal(y, gdn.causal_conv1d_fn(np.ascontiguousarray(x), w, bias,
                                                  activation="silu"))
    assert_close(y, ref_conv(x, w, bias, activation="silu")[0])


def test_conv_initial_and_final_states(rng):
    B, C, T, W = 3, 16, 2, 4                                   # T < W - 1: state keeps old inputs
    x, w, bias = normal(rng, B, C, T), normal(rng, C, W), normal(rng, C)
    init = normal(rng, B, C, W - 1)
    init0 = init.copy()
    y, final = gdn.causal_conv1d_fn(x, w, bias, initial_states=init, return_final_states=True,
                                    activation="silu")
    want_y, want_final = ref_conv(x, w, bias, init, "silu")
    assert_close(y, want_y)
    assert_close(final, want_final)
    assert np.array_equal(init, init0)
    out = np.full((B, C, W - 1), np.nan, f32)                   # final_states_out is filled
    y0, final0 = gdn.causal_conv1d_fn(x, w, bias, return_final_states=True, final_states_out=out)
    assert final0 is out
    want_y0, want_final0 = ref_conv(x, w, bias)
    assert_close(y0, want_y0)
    assert_close(final0, want_final0)


def test_conv_varlen(rng):
    lens = [5, 0, 1, 2, 30]                                     # empty, shorter than W - 1
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    C, W = 20, 4
    x, w = normal(rng, C, int(cu[-1])), normal(rng, C, W)
    y, final = gdn.causal_conv1d_fn(x, w, query_start_loc=cu, return_final_states=True,
                                    activation="silu")
    want_y, want_final = ref_conv_varlen(x, w, cu, activation="silu")
    assert y.shape == x.shape
    assert_close(y, want_y)
    assert_close(final, want_final)
    init = normal(rng, len(lens), C, W - 1)
    y, final = gdn.causal_conv1d_fn(x, w, query_start_loc=cu, initial_states=init,
                                    return_final_states=True)
    want_y, want_final = ref_conv_varlen(x, w, cu, init=init)
    assert_close(y, want_y)
    assert_close(final, want_final)


def test_conv_state_pool(rng):
    """conv_states [S, C, W-1] updated in place; cache_indices with -1 padding; has_initial_state.
    Sequence 1 is padding, sequence 2 starts from zeros; unnamed slots stay byte-identical."""
    lens = [6, 3, 1, 9]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    C, W, S = 12, 4, 6
    x, w, bias = normal(rng, C, int(cu[-1])), normal(rng, C, W), normal(rng, C)
    pool0 = normal(rng, S, C, W - 1)
    pool = pool0.copy()
    idx = np.array([5, -1, 0, 2], np.int32)
    has = np.array([1, 1, 0, 1], np.uint8)
    y = gdn.causal_conv1d_fn(x, w, bias, conv_states=pool, cache_indices=idx,
                             has_initial_state=has, query_start_loc=cu, activation="silu")
    init = pool0[np.maximum(idx, 0)] * has[:, None, None]
    want_y, want_final = ref_conv_varlen(x, w, cu, bias, init, "silu")
    live = np.r_[cu[0]:cu[1], cu[2]:cu[4]]
    assert_close(y[:, live], want_y[:, live])
    assert_close(pool[[5, 0, 2]], want_final[[0, 2, 3]])
    assert np.array_equal(pool[[1, 3, 4]], pool0[[1, 3, 4]])


@pytest.mark.parametrize("activation", [None, "silu"])
def test_conv_update_after_prefill_equals_full_conv(rng, activation):
    B, C, T0, T, W = 3, 24, 7, 12, 4
    x, w, bias = normal(rng, B, C, T), normal(rng, C, W), normal(rng, C)
    y0, state = gdn.causal_conv1d_fn(x[:, :, :T0], w, bias, return_final_states=True,
                                     activation=activation)
    ys = [y0]
    for t in range(T0, T):
        if t % 3 == 0:    # x [B, C], contiguous
            yt = gdn.causal_conv1d_update(np.ascontiguousarray(x[:, :, t]), state, w, bias,
                                          activation)[:, :, None]
        elif t % 3 == 1:  # x [B, C], a strided view (channel stride T)
            yt = gdn.causal_conv1d_update(x[:, :, t], state, w, bias, activation)[:, :, None]
        else:             # x [B, C, 1]
            yt = gdn.causal_conv1d_update(x[:, :, t:t + 1], state, w, bias, activation)
        assert yt.shape == (B, C, 1)
        ys.append(yt)
    want_y, want_state = ref_conv(x, w, bias, activation=activation)
    assert_close(np.concatenate(ys, axis=-1), want_y)
    assert_close(state, want_state)


def test_conv_update_state_indices(rng):
    C, W, S = 8, 4, 5
    x, w = normal(rng, 3, C), normal(rng, C, W)
    pool0 = normal(rng, S, C, W - 1)
    pool = pool0.copy()
    idx = np.array([4, -1, 1], np.int64)
    y = gdn.causal_conv1d_update(x, pool, w, None, "silu", conv_state_indices=idx)
    want_y, want_state = ref_conv(x[[0, 2], :, None], w, None, pool0[[4, 1]], "silu")
    assert_close(y[[0, 2]], want_y[..., 0])
    assert_close(pool[[4, 1]], want_state)
    assert np.array_equal(pool[[0, 2, 3]], pool0[[0, 2, 3]])


# ---- 7. norms -------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("weight_offset", [False, True])
def test_rms_norm_gated(rng, norm_before_gate, weight_offset):
    x, z, w = normal(rng, 2, 9, 4, 48), 2 * normal(rng, 2, 9, 4, 48), normal(rng, 48)
    y = gdn.rms_norm_gated(x, z, w, eps=1e-5, norm_before_gate=norm_before_gate,
                           weight_offset=weight_offset)
    assert y.shape == x.shape and y.dtype == f32
    assert_close(y, ref_rms_norm_gated(x, z, w, 1e-5, norm_before_gate, weight_offset))


def test_rms_norm_without_gate_or_weight(rng):
    x, w = normal(rng, 13, 3, 40), normal(rng, 40)
    assert_close(gdn.rms_norm_gated(x, None, w), ref_rms_norm_gated(x, None, w, 1e-6))
    assert_close(gdn.rms_norm_gated(x, None, None, eps=1e-3),
                 ref_rms_norm_gated(x, None, None, 1e-3))


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_l2norm(rng, eps):
    x = normal(rng, 2, 11, 3, 33)
    y = gdn.l2norm(x, eps=eps)
    assert y.shape == x.shape and y.dtype == f32
    assert_close(y, ref_l2norm(x, eps))


# ---- 8. errors ------------------------------------------------------------------------------

def test_error_wrong_head_count_names_argument(rng):
    x = make_inputs(rng, 1, 5, 2, 4)
    k3 = unit(normal(rng, 1, 5, 3, 32))
    with pytest.raises(gdn.GdnValueError, match=r"k\.shape"):
        gdn.fused_recurrent_gated_delta_rule(x["q"], k3, x["v"], x["g"], x["beta"])
    with pytest.raises(gdn.GdnValueError, match=r"k\.shape"):
        gdn.chunk_gated_delta_rule(x["q"], k3, x["v"], x["g"], x["beta"])


@pytest.mark.parametrize("name", ["q", "v", "g", "beta"])
def test_error_float64_input_names_argument(rng, name):
    x = make_inputs(rng, 1, 5, 2, 2)
    x[name] = x[name].astype(np.float64)
    with pytest.raises(gdn.GdnValueError, match=rf"^{name}: dtype float64"):
        gdn.fused_recurrent_gated_delta_rule(**x)


def test_error_other_ops_name_argument(rng):
    with pytest.raises(gdn.GdnValueError, match=r"weight\.shape"):
        gdn.causal_conv1d_fn(normal(rng, 2, 6, 5), normal(rng, 7, 4))
    with pytest.raises(gdn.GdnValueError, match=r"^a: dtype float64"):
        gdn.fused_gdn_gating(normal(rng, 4), np.zeros((3, 4)), None)
    with pytest.raises(gdn.GdnValueError, match=r"z\.shape"):
        gdn.rms_norm_gated(normal(rng, 2, 8), normal(rng, 2, 7), None)


def test_error_initial_state_and_pool_together(rng):
    x = make_inputs(rng, 1, 4, 1, 1)
    state = np.zeros((1, 1, 32, 48), f32)
    with pytest.raises(ValueError, match="not both"):
        gdn.fused_recurrent_gated_delta_rule(**x, initial_state=state, state_pool=state.copy())
    assert not state.any()


# ---- 9. torch (CPU) -------------------------------------------------------------------------

def test_torch_cpu_fused_recurrent(rng):
    torch = pytest.importorskip("torch")
    x = make_inputs(rng, 2, 21, 2, 4)
    h0 = 0.5 * normal(rng, 2, 4, 32, 48)
    tx = {n: torch.from_numpy(a) for n, a in x.items()}
    th0 = torch.from_numpy(h0.copy())
    o, final = gdn.fused_recurrent_gated_delta_rule(**tx, initial_state=th0,
                                                    output_final_state=True)
    assert isinstance(o, torch.Tensor) and isinstance(final, torch.Tensor)
    want_o, want_state = ref_delta_rule(**x, h0=h0)
    assert_close(o.numpy(), want_o)
    assert_close(final.numpy(), want_state)
    assert np.array_equal(th0.numpy(), h0)
