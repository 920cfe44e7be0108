"""FLA- and causal-conv1d-compatible functions over NumPy arrays and torch tensors.

Every function takes arrays in libgdn's layouts (token-major, last dimension contiguous, any other
strides), allocates its outputs in the caller's framework and device, and runs on:
  - the cuda backend for CUDA tensors, on torch's current stream;
  - the best host backend otherwise (`backend=` overrides: "ref", "cpu", "auto").
Errors raise gdn.GdnError (gdn.GdnValueError for bad arguments) with libgdn's message; a call
refused for its arguments writes nothing (every check runs before the first write into a
caller's array).
Arrays that are written in place must be writable (not read-only, no stride-0 repeats). Output
rows of padding sequences (slot -1) are zeros; empty inputs give empty outputs.
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import (A_FORMS, ACT_NONE, ACT_SILU, ALGORITHMS, CHUNK_SIZE_AUTO, PRECISIONS, ERR_DTYPE, ERR_SHAPE,
                   GVAS, SCALE_AUTO, SOFTPLUS_THRESHOLD, STATE_KV, STATE_VK, GdnValueError, check,
                   describe, lib)


def _activation(name):
    """The gdn_activation for causal-conv1d's activation argument."""
    if name in (None, "none", "identity"):
        return ACT_NONE
    if name in ("silu", "swish"):
        return ACT_SILU
    raise ValueError(f"activation is {name!r}, expected None, 'silu' or 'swish'")


def _sigmoid(x, scale):
    if _lib.is_torch(x):
        return scale * _lib.torch.sigmoid(x.float())
    return (scale / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def _gating_params(A_log, dt_bias, *, a_form, threshold, allow_neg_eigval):
    """A gdn_gating_params; A_log and dt_bias are described, not copied (keep them alive)."""
    if a_form not in A_FORMS:
        raise ValueError(f"a_form is {a_form!r}, expected 'A_log' or 'neg_exp' (GGUF ssm_a)")
    p = lib.gdn_gating_default_params()
    p.A = describe(A_log, "A_log")
    p.dt_bias = describe(dt_bias, "dt_bias")
    p.a_form = A_FORMS[a_form]
    p.softplus_threshold = threshold
    p.allow_neg_eigval = int(bool(allow_neg_eigval))
    return p


# ---- shared checks ---------------------------------------------------------------------------

def _check_shape(x, name, expected, what):
    """FLA-style per-sequence states have exactly one row per sequence: libgdn would take extra
    rows as unused pool slots and hand them back, so the shape is checked here, by name."""
    if x is None:
        return
    shape = np.shape(x)  # lists are accepted where a copy is made anyway
    if len(shape) != len(expected):
        raise GdnValueError(ERR_SHAPE,
                            f"{name}.ndim is {len(shape)}, expected {len(expected)} ({what})")
    for d, (n, want) in enumerate(zip(shape, expected)):
        if n != want:
            raise GdnValueError(ERR_SHAPE, f"{name}.shape[{d}] is {n}, expected {want} ({what})")


# ---- the gated delta rule -------------------------------------------------------------------

def _delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                state_v_first=False, cu_seqlens=None, state_pool=None, state_indices=None,
                has_initial_state=None, gva="block", chunk_size=None, algorithm="auto",
                precision="auto", backend=None):
    """The one gdn_delta_rule call behind both public delta-rule functions. Options are keyword
    arguments named as in the public functions; their defaults are libgdn's. Returns (o, final
    state or None)."""
    if gva not in GVAS:
        raise ValueError(f"gva is {gva!r}, expected 'block' (FLA, HF) or 'tiled' (ggml, GGUF)")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm is {algorithm!r}, expected one of {sorted(ALGORITHMS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision is {precision!r}, expected one of {sorted(PRECISIONS)}")
    dev = _lib.common_device(q, k, v, g, beta, initial_state, state_pool, A_log, dt_bias)
    ctx = _lib.context(backend, dev)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    cu = _lib.on_device_of(cu_seqlens, q)  # lists and host arrays are accepted too
    N = B if cu is None else cu.shape[0] - 1
    if state_pool is not None and initial_state is not None:
        raise ValueError("pass initial_state (FLA style) or state_pool (in place), not both")
    _lib.check_writable(state_pool, "state_pool")
    state_shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
    _check_shape(initial_state, "initial_state", state_shape,
                 "one state per sequence: N = " + ("B" if cu is None else "len(cu_seqlens) - 1"))
    if beta is None:
        beta = _lib.zeros(q, (B, T, HV), _lib.float32_of(q)) + 1.0
    g, beta, gate_in_kernel = _split_gating(
        g, beta, gate=use_gate_in_kernel, beta_sigmoid=use_beta_sigmoid_in_kernel, A_log=A_log,
        dt_bias=dt_bias, allow_neg_eigval=allow_neg_eigval, backend=backend)
    pool = state_pool  # FLA's initial_state is read, never written: libgdn gets a copy
    if pool is None and (initial_state is not None or output_final_state):
        pool = (_lib.zeros(q, state_shape, _lib.float32_of(q)) if initial_state is None
                else initial_state.float().clone() if _lib.is_torch(initial_state)
                else np.array(initial_state, dtype=np.float32))
    slots = _lib.on_device_of(state_indices, q)
    flags = _lib.on_device_of(has_initial_state, q)
    # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
    o = _lib.empty(v, v.shape) if slots is None else _lib.zeros(v, v.shape)
    a = lib.gdn_delta_rule_default_args()
    keep = (q, k, v, g, beta, o, pool, cu, slots, flags, A_log, dt_bias)  # alive until the call
    a.q, a.k, a.v = describe(q, "q"), describe(k, "k"), describe(v, "v")
    a.g, a.beta, a.out = describe(g, "g"), describe(beta, "beta"), describe(o, "out")
    a.state, a.state_slots = describe(pool, "state"), describe(slots, "state_indices")
    a.has_initial_state = describe(flags, "has_initial_state")
    a.cu_seqlens = describe(cu, "cu_seqlens")
    a.scale = SCALE_AUTO if scale is None else float(scale)
    a.state_layout = STATE_VK if state_v_first else STATE_KV
    a.gva = GVAS[gva]
    a.algorithm = ALGORITHMS[algorithm]
    a.precision = PRECISIONS[precision]
    a.chunk_size = int(chunk_size or CHUNK_SIZE_AUTO)
    a.qk_l2norm = int(bool(use_qk_l2norm_in_kernel))
    a.gate_in_kernel = int(gate_in_kernel)
    if gate_in_kernel:
        a.gating = _gating_params(A_log, dt_bias, a_form="A_log", threshold=SOFTPLUS_THRESHOLD,
                                  allow_neg_eigval=allow_neg_eigval)
    check(lib.gdn_delta_rule(ctx, ctypes.byref(a)), ctx)
    del keep
    return o, (pool if output_final_state else None)


def _split_gating(g, beta, *, gate, beta_sigmoid, A_log, dt_bias, allow_neg_eigval, backend):
    """(g, beta, gate_in_kernel) for gdn_delta_rule. libgdn gates g (from the raw a) and beta
    (from the raw b) together, in the kernel; when FLA's flags ask for only one of the two, that
    half is done here and the kernel gets gate_in_kernel off."""
    gate = bool(gate)
    if gate == bool(beta_sigmoid):
        return g, beta, gate
    if gate:
        g = fused_gdn_gating(A_log, g, None, dt_bias, backend=backend)[0]
    else:
        beta = _sigmoid(beta, 2.0 if allow_neg_eigval else 1.0)
    return g, beta, False


def _reject_unknown(kwargs, allowed_none=("cu_seqlens_cpu", "chunk_indices", "cp_context")):
    for name, value in kwargs.items():
        if name not in allowed_none:
            raise TypeError(f"unexpected keyword argument {name!r}")
        if value is not None and name == "cp_context":
            raise ValueError("cp_context (context parallelism) is not supported")


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, *, use_gate_in_kernel=False,
                           A_log=None, dt_bias=None, state_pool=None, state_indices=None,
                           has_initial_state=None, gva="block", chunk_size=None,
                           algorithm="auto", precision="auto", backend=None, **kwargs):
    """Prefill: FLA's chunk_gated_delta_rule. q, k [B, T, H, K]; v [B, T, HV, V]; g, beta
    [B, T, HV]; initial_state [N, HV, K, V] ([N, HV, V, K] with state_v_first). Returns
    (o [B, T, HV, V], final_state or None); scale None or 0 means 1/sqrt(K).
    initial_state has exactly one row per sequence (N = B, or len(cu_seqlens) - 1) and is never
    written. algorithm="auto" lets the backend choose (chunked where it has it). libgdn extras:
    state_pool (updated in place; it may have more slots than sequences) with state_indices
    (slot per sequence, -1 = skip: that sequence's output rows come back as zeros) and
    has_initial_state; gva="tiled"; chunk_size (16, 32, 64, 128; None: the backend's choice);
    precision ("fast", the default "auto": tensor-core operands of bf16 / f16 inputs rounded once,
    within 5e-3 of float64; "high": hi + lo operands, f32 outputs and states within 5e-5);
    backend."""
    _reject_unknown(kwargs)
    return _delta_rule(
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens, state_pool=state_pool,
        state_indices=state_indices, has_initial_state=has_initial_state, gva=gva,
        chunk_size=chunk_size, algorithm=algorithm, precision=precision, backend=backend)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, cu_seqlens=None, *, state_pool=None,
                                     state_indices=None, has_initial_state=None, gva="block",
                                     backend=None, **kwargs):
    """Decode and short calls: FLA's fused_recurrent_gated_delta_rule (same arguments and
    returns as chunk_gated_delta_rule, less chunk_size and algorithm: it always runs the
    recurrent form; gk/gv per-channel gates are not supported)."""
    for name in ("gk", "gv"):
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"{name} (per-channel gates) is not supported by libgdn")
    _reject_unknown(kwargs)
    return _delta_rule(
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens, state_pool=state_pool,
        state_indices=state_indices, has_initial_state=has_initial_state, gva=gva,
        algorithm="recurrent", backend=backend)


# ---- gating, norms ---------------------------------------------------------------------------

def fused_gdn_gating(A_log, a, b, dt_bias=None, beta=1.0, threshold=20.0, *,
                     allow_neg_eigval=False, a_form="A_log", backend=None):
    """g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) (2 sigmoid(b) with
    allow_neg_eigval), in float32, shaped like a. b may be None (then beta is None).
    a_form="neg_exp" takes GGUF's ssm_a = -exp(A_log) in place of A_log."""
    if beta != 1.0:
        raise ValueError("softplus beta other than 1.0 is not supported")
    dev = _lib.common_device(A_log, a, b, dt_bias)
    ctx = _lib.context(backend, dev)
    g_out = _lib.empty(a, a.shape, _lib.float32_of(a))
    beta_out = None if b is None else _lib.empty(a, a.shape, _lib.float32_of(a))
    p = _gating_params(A_log, dt_bias, a_form=a_form, threshold=threshold,
                       allow_neg_eigval=allow_neg_eigval)
    ta, tb, tg, tbeta = (describe(a, "a"), describe(b, "b"), describe(g_out, "g_out"),
                         describe(beta_out, "beta_out"))
    check(lib.gdn_gating(ctx, ctypes.byref(ta), ctypes.byref(tb), ctypes.byref(p),
                         ctypes.byref(tg), ctypes.byref(tbeta)), ctx)
    return g_out, beta_out


def l2norm(x, eps=1e-6, *, backend=None):
    """x / sqrt(sum(x^2) + eps) over the last dimension, in x's dtype."""
    ctx = _lib.context(backend, _lib.device_of(x))
    out = _lib.empty(x, x.shape)
    tx, to = describe(x, "x"), describe(out, "out")
    check(lib.gdn_l2norm(ctx, ctypes.byref(tx), ctypes.byref(to), eps), ctx)
    return out


def rms_norm_gated(x, g, weight, bias=None, activation="swish", residual=None, prenorm=False,
                   residual_in_fp32=False, eps=1e-6, *, norm_before_gate=True,
                   weight_offset=False, backend=None):
    """FLA's rms_norm_gated: x / sqrt(mean(x^2) + eps) * weight * silu(g) over the last
    dimension (norm_before_gate=False: rmsnorm(x * silu(g)) * weight; weight_offset: 1 + w).
    g may be None (no gate). bias, residual and prenorm are not supported."""
    if bias is not None or residual is not None or prenorm:
        raise ValueError("bias, residual and prenorm are not supported by libgdn's gated RMSNorm")
    if _activation(activation) != ACT_SILU:
        raise ValueError("only the swish/silu gate is supported")
    del residual_in_fp32
    ctx = _lib.context(backend, _lib.common_device(x, g, weight))
    out = _lib.empty(x, x.shape)
    a = lib.gdn_rmsnorm_default_args()
    a.x, a.z, a.weight, a.out = (describe(x, "x"), describe(g, "g"), describe(weight, "weight"),
                                 describe(out, "out"))
    a.eps = eps
    a.weight_offset = int(bool(weight_offset))
    a.norm_before_gate = int(bool(norm_before_gate))
    check(lib.gdn_rmsnorm_gated(ctx, ctypes.byref(a)), ctx)
    return out


# ---- causal conv1d ---------------------------------------------------------------------------

def _weight_2d(weight):
    return weight.reshape(weight.shape[0], weight.shape[-1]) if weight.ndim == 3 else weight


def _last_dim_contiguous(x):
    """x itself when its last dimension is contiguous (as libgdn requires), else a copy."""
    stride = x.stride()[-1] if _lib.is_torch(x) else x.strides[-1] // x.itemsize
    if stride != 1 and x.shape[-1] > 1:
        x = x.contiguous() if _lib.is_torch(x) else np.ascontiguousarray(x)
    return x


def _channels_last(x):
    """x [B, C, T] (causal-conv1d) as the [B, T, C] view libgdn reads; a copy only if the
    channels are not contiguous."""
    return _last_dim_contiguous(x.transpose(-1, -2) if _lib.is_torch(x) else np.swapaxes(x, -1, -2))


def _check_states_out(out, name, shape):
    """final_states_out is written after the call: check it as thoroughly as libgdn would."""
    if out is None:
        return
    _lib.check_writable(out, name)
    _check_shape(out, name, shape, "[N, C, W-1]: one state per sequence")
    floating = out.dtype.is_floating_point if _lib.is_torch(out) else out.dtype.kind == "f"
    if not floating:
        raise GdnValueError(ERR_DTYPE,
                            f"{name}: dtype {out.dtype}, expected a floating-point dtype")


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None, *,
                     conv_states=None, cache_indices=None, has_initial_state=None,
                     query_start_loc=None, backend=None):
    """causal-conv1d's causal_conv1d_fn. x [B, C, T] (or [C, T_total] with query_start_loc for
    varlen, as vLLM), weight [C, W]; initial_states / final states [N, C, W-1] (N = B, or
    len(query_start_loc) - 1). Returns out shaped like x (and the final states when
    return_final_states; final_states_out, if given, is filled only when the call succeeds).
    libgdn extras: conv_states [S, C, W-1] updated in place, with cache_indices (slot per
    sequence, -1 = skip: that sequence's output comes back as zeros) and has_initial_state."""
    if seq_idx is not None:
        raise ValueError("seq_idx is not supported: use query_start_loc (varlen offsets)")
    if initial_states is not None and conv_states is not None:
        raise ValueError("pass initial_states or conv_states, not both")
    varlen = x.ndim == 2
    if varlen and query_start_loc is None:
        raise ValueError("a 2-D x [C, T_total] needs query_start_loc")
    xt = _channels_last(x[None] if varlen else x)  # [B, T, C]
    weight = _weight_2d(weight)
    B, T, C = xt.shape
    W = weight.shape[-1]
    cu = _lib.on_device_of(query_start_loc, x)
    N = B if cu is None else cu.shape[0] - 1
    # nothing is written before libgdn has validated the call: the final states are computed in
    # a private pool and copied to final_states_out only after success
    state_shape = (N, C, max(W - 1, 0))  # libgdn names a bad width
    _lib.check_writable(conv_states, "conv_states")
    _check_shape(initial_states, "initial_states", state_shape,
                 "[N, C, W-1]: one state per sequence")
    _check_states_out(final_states_out, "final_states_out", state_shape)
    ctx = _lib.context(backend, _lib.common_device(x, weight, bias, conv_states, initial_states,
                                                   final_states_out))
    pool = conv_states
    if pool is None and (initial_states is not None or return_final_states):
        pool = (_lib.zeros(x, state_shape) if initial_states is None
                else _lib.copy_of(initial_states))
    slots = _lib.on_device_of(cache_indices, x)
    flags = _lib.on_device_of(has_initial_state, x)
    # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
    out = _lib.empty(x, (B, T, C)) if slots is None else _lib.zeros(x, (B, T, C))
    a = lib.gdn_conv1d_default_args()
    keep = (xt, weight, bias, out, pool, cu, slots, flags)
    a.x, a.weight, a.bias, a.out = (describe(xt, "x"), describe(weight, "weight"),
                                    describe(bias, "bias"), describe(out, "out"))
    a.conv_state, a.state_slots = describe(pool, "conv_states"), describe(slots, "cache_indices")
    a.has_initial_state = describe(flags, "has_initial_state")
    a.cu_seqlens = describe(cu, "query_start_loc")
    a.activation = _activation(activation)
    check(lib.gdn_conv1d(ctx, ctypes.byref(a)), ctx)
    del keep
    if final_states_out is not None and pool is not conv_states:
        _lib.copy_into(final_states_out, pool)
        pool = final_states_out
    y = out.transpose(-1, -2) if _lib.is_torch(out) else np.swapaxes(out, -1, -2)
    y = y[0] if varlen else y
    return (y, pool) if return_final_states else y


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None, *, backend=None):
    """causal-conv1d's causal_conv1d_update for one token: x [B, C] (or [B, C, 1]);
    conv_state [S, C, W-1] updated in place (row conv_state_indices[b], or b; -1 = skip, and
    that row of the output comes back as zeros). Returns out shaped like x."""
    if cache_seqlens is not None:
        raise ValueError("cache_seqlens (circular conv state) is not supported")
    squeeze = x.ndim == 3
    if squeeze and x.shape[-1] != 1:
        raise ValueError("causal_conv1d_update takes one token per sequence "
                         "(x [B, C] or [B, C, 1])")
    x2 = _last_dim_contiguous(x[..., 0] if squeeze else x)  # e.g. x[:, :, t] of a [B, C, T] x
    weight = _weight_2d(weight)
    if conv_state.shape[-1] != weight.shape[-1] - 1:
        raise ValueError(f"conv_state has {conv_state.shape[-1]} columns, expected width - 1 = "
                         f"{weight.shape[-1] - 1}")
    _lib.check_writable(conv_state, "conv_state")
    ctx = _lib.context(backend, _lib.common_device(x, conv_state, weight, bias))
    slots = _lib.on_device_of(conv_state_indices, x)
    # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
    out = _lib.empty(x2, x2.shape) if slots is None else _lib.zeros(x2, x2.shape)
    a = lib.gdn_conv1d_update_default_args()
    keep = (x2, weight, bias, out, conv_state, slots)
    a.x, a.weight, a.bias, a.out = (describe(x2, "x"), describe(weight, "weight"),
                                    describe(bias, "bias"), describe(out, "out"))
    a.conv_state, a.state_slots = (describe(conv_state, "conv_state"),
                                   describe(slots, "conv_state_indices"))
    a.activation = _activation(activation)
    check(lib.gdn_conv1d_update(ctx, ctypes.byref(a)), ctx)
    del keep
    return out[..., None] if squeeze else out
