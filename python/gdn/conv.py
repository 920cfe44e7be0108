"""causal-conv1d's functions, causal_conv1d_fn and causal_conv1d_update, over libgdn's gdn_conv1d
and gdn_conv1d_update (ops.py's module docstring says what is copied when; the same holds here).

Conv states. libgdn's C API keeps the last W - 1 inputs of a sequence (W = the kernel width) in
a state of exactly W - 1 columns. causal-conv1d's states may be wider, [.., C, L] with
L >= W - 1 (HF keeps L = W): the newest inputs are at the end, the newest W - 1 of them are the
ones the conv reads, and a call that consumes T tokens shifts the whole state left by T and
appends them (state = the last L of old state ++ new tokens). Here libgdn gets the view of the
last W - 1 columns, in place, and the older L - (W - 1) columns are shifted in Python: their
new values (a [N, C, L - W + 1] array taken from the old state and the tokens) are gathered
before the call and written after it succeeds (with conv_state_indices / cache_indices the
write picks the live slots with a mask: on CUDA, one device sync). A state of exactly W - 1
columns costs nothing extra.
"""
import ctypes
import functools

import numpy as np

from . import _lib, torch_ops as _torch_ops
from ._lib import ACT_NONE, ACT_SILU, ERR_DTYPE, ERR_SHAPE, GdnValueError, check, describe, lib
from .ops import (_activation, _check_shape, _copy_back, _in_place, _index, _readable,
                  _unknown_keywords)

_MAX_WIDTH = 16  # GDN_CONV_MAX_WIDTH: widths outside 2..16 are left for libgdn to name


def _weight_2d(weight):
    return weight.reshape(weight.shape[0], weight.shape[-1]) if weight.ndim == 3 else weight


def _channels_last(x):
    """x [B, C, T] (causal-conv1d) as the [B, T, C] view libgdn reads; a copy only if the
    channels are not contiguous."""
    return _readable(x.transpose(-1, -2) if _lib.is_torch(x) else np.swapaxes(x, -1, -2))


def _swap_last(x):
    return x.transpose(-1, -2) if _lib.is_torch(x) else np.swapaxes(x, -1, -2)


def _window(W):
    """W - 1 when W is a width libgdn takes, else None (libgdn names the bad width)."""
    return W - 1 if 2 <= W <= _MAX_WIDTH else None


def _check_out(out, x):
    """causal_conv1d_update's out=: x's shape, one token per sequence, writable."""
    if x.ndim == 3 and x.shape[-1] != 1:
        raise ValueError(f"out= takes one token per sequence (x [B, C] or [B, C, 1]); x is "
                         f"{list(np.shape(x))}")
    _check_shape(out, "out", tuple(np.shape(x)), "x's shape")
    _lib.check_writable(out, "out")


def _check_width(state, name, w):
    """A conv state keeps at least the W - 1 inputs the conv reads."""
    if state is not None and w is not None and np.ndim(state) == 3 and np.shape(state)[2] < w:
        raise GdnValueError(ERR_SHAPE, f"{name}.shape[2] is {np.shape(state)[2]}, expected >= "
                                       f"{w} (width - 1: the state keeps the last W - 1 inputs)")


def _newest(state, w):
    """The view of state's last w columns: what libgdn reads and writes."""
    if state is None or w is None or state.ndim != 3:
        return state  # libgdn names what is wrong with it
    return state[:, :, state.shape[2] - w:]


def _older_columns(state, xt, cu, slots, flags, w):
    """The shift of a state wider than w = W - 1 columns, gathered before the call: (slots,
    values [N, C, E]) with E = L - w, the values state[slot_n, :, :E] takes after it, i.e. the
    inputs at positions T_n .. T_n + E - 1 of (old state ++ sequence n's tokens). xt is the
    channels-last input [B, T, C] (with cu, its one row holds the packed sequences); flags == 0
    starts a sequence from zeros. None when there is nothing to shift, or when the arguments are
    wrong (libgdn refuses the call then, naming them)."""
    if state is None or w is None or state.ndim != 3 or state.shape[2] <= w or xt.ndim != 3:
        return None
    S, C, L = state.shape
    E = L - w
    if S == 0 or xt.shape[2] != C:
        return None
    xt, cu, slots, flags = (_lib.on_device_of(t, state) for t in (xt, cu, slots, flags))
    if _lib.is_torch(state):
        torch = _lib.torch
        arange = functools.partial(torch.arange, device=state.device)
        clip, where, zeros_like = torch.clamp, torch.where, torch.zeros_like

        def long(x):
            return x.long()
    else:
        arange, clip, where, zeros_like = np.arange, np.clip, np.where, np.zeros_like

        def long(x):
            return x.astype(np.int64)
    if cu is None:
        N = xt.shape[0]
        rows, starts, lengths = arange(N), 0 * arange(N), 0 * arange(N) + xt.shape[1]
    else:
        if cu.ndim != 1 or cu.shape[0] < 1:
            return None
        c = long(cu)
        N = c.shape[0] - 1
        rows, starts, lengths = 0 * arange(N), c[:-1], c[1:] - c[:-1]
    slot = arange(N) if slots is None else long(slots)
    if tuple(slot.shape) != (N,) or (flags is not None and tuple(flags.shape) != (N,)):
        return None
    p = lengths[:, None] + arange(E)[None, :]                  # [N, E] positions in old ++ tokens
    vals = state[clip(slot, 0, S - 1)[:, None], :, clip(p, 0, L - 1)]       # [N, E, C]
    if flags is not None:
        vals = where((flags != 0)[:, None, None], vals, zeros_like(vals))
    T = xt.shape[1]
    if T > 0:
        tok = xt[rows[:, None], clip(starts[:, None] + p - L, 0, T - 1), :]  # [N, E, C]
        tok = tok.to(state.dtype) if _lib.is_torch(tok) else tok.astype(state.dtype)
        vals = where((p >= L)[:, :, None], tok, vals)
    return (None if slots is None else slot), _swap_last(vals)


def _shift_older_columns(state, plan):
    """Writes what _older_columns gathered (after the call succeeded)."""
    if plan is None:
        return
    slot, vals = plan
    E = vals.shape[-1]
    if slot is None:
        state[:vals.shape[0], :, :E] = vals
    else:
        live = slot >= 0  # padding sequences (slot -1) write nothing
        state[slot[live], :, :E] = vals[live]


def _conv_call(ctx, xt, weight, bias, out, state, slots, flags, cu, activation,
               names=("conv_states", "cache_indices")):
    """One gdn_conv1d: x, out [B, T, C]; state the [S, C, W-1] view libgdn updates (or None);
    names: the caller's names of state and slots, for describe()'s messages."""
    a = lib.gdn_conv1d_default_args()
    keep = (xt, weight, bias, out, state, cu, slots, flags)
    a.x, a.weight, a.bias, a.out = (describe(xt, "x"), describe(weight, "weight"),
                                    describe(bias, "bias"), describe(out, "out"))
    a.conv_state, a.state_slots = describe(state, names[0]), describe(slots, names[1])
    a.has_initial_state = describe(flags, "has_initial_state")
    a.cu_seqlens = describe(cu, "query_start_loc")
    a.activation = _activation(activation)
    check(lib.gdn_conv1d(ctx, ctypes.byref(a)), ctx)
    del keep


def _check_states(x, name, N, C, w):
    """FLA-style states [N, C, L]: exactly one row per sequence, L >= W - 1 columns."""
    if x is None:
        return
    _check_shape(x, name, (N, C, (np.shape(x) or (0,))[-1]),
                 "[N, C, L >= W-1]: one state per sequence")
    _check_width(x, name, w)


def _check_states_out(out, name, N, C, w):
    """final_states_out is written after the call: check it as thoroughly as libgdn would."""
    if out is None:
        return
    _lib.check_writable(out, name)
    _check_states(out, name, N, C, w)
    floating = out.dtype.is_floating_point if _lib.is_torch(out) else out.dtype.kind == "f"
    if not floating:
        raise GdnValueError(ERR_DTYPE,
                            f"{name}: dtype {out.dtype}, expected a floating-point dtype")


def _seq_idx_offsets(seq_idx, B, T, like, compact=None):
    """causal-conv1d's seq_idx [B, T] as libgdn's varlen offsets over the B * T tokens packed in
    one row: a sequence ends at every change of seq_idx and at the end of every batch row.
    compact (default: not on CUDA) gives one offset per sequence; else, for CUDA tensors, the
    offsets are computed without reading seq_idx on the host (no device sync, CUDA-graph safe):
    B * T + 1 of them, each token's sequence listed at its run's first token and empty sequences
    at the others (cu[t + 1] = the end of the run holding token t)."""
    s = _lib.on_device_of(seq_idx, like)
    if tuple(s.shape) != (B, T):
        raise GdnValueError(ERR_SHAPE, f"seq_idx.shape is {tuple(s.shape)}, expected ({B}, {T}) "
                                       "(x's batch and tokens)")
    torch = _lib.torch if _lib.is_torch(s) else None
    ends = torch.ones((B, T), dtype=torch.bool, device=s.device) if torch else np.ones((B, T), bool)
    ends[:, :-1] = s[:, 1:] != s[:, :-1]
    ends = ends.reshape(-1)
    if compact is None:
        compact = not (torch and s.is_cuda)
    if torch is None:
        return np.concatenate([[0], np.flatnonzero(ends) + 1]).astype(np.int64)
    zero = torch.zeros(1, dtype=torch.int64, device=s.device)
    if compact:
        return torch.cat([zero, torch.nonzero(ends).reshape(-1) + 1])
    pos = torch.arange(1, B * T + 1, device=s.device)
    run_end = torch.where(ends, pos, torch.full_like(pos, B * T))
    run_end = torch.flip(torch.cummin(torch.flip(run_end, [0]), 0).values, [0])
    return torch.cat([zero, run_end])


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None, *,
                     conv_states=None, cache_indices=None, has_initial_state=None,
                     query_start_loc=None, backend=None, strict=None, **kwargs):
    """causal-conv1d's causal_conv1d_fn. x [B, C, T] (or [C, T_total] with query_start_loc for
    varlen, as vLLM), weight [C, W] (or [C, 1, W]); initial_states / final states [N, C, L]
    (N = B, or len(query_start_loc) - 1; L >= W - 1, usually W - 1: module docstring). Returns
    out shaped like x (and the final states when return_final_states; final_states_out, if
    given, is filled only when the call succeeds; its width L sets the final states' width,
    else initial_states' does, else W - 1).
    seq_idx [B, T] (int) marks the sequence of each token of a packed batch: the conv does not
    reach across a change of seq_idx (nor across batch rows); B > 1 is fine. A change starts a
    new sequence (sequences are runs of equal values, as Mamba-2 packs them). As in
    causal-conv1d it does not combine with states. The rows of x are packed into one libgdn
    varlen row: a view when x's token rows are evenly spaced, else a copy.
    libgdn extras: conv_states [S, C, L] updated in place, with cache_indices (slot per
    sequence, -1 = skip: that sequence's output comes back as zeros) and has_initial_state.
    Copies: x whose channels are not contiguous (a plain contiguous [B, C, T] x is: pass the
    transpose of a [B, T, C] buffer to avoid it) and initial_states (never written).
    Other keywords (HF's layers pass their own through) are ignored, or a TypeError naming them
    with strict=True or GDN_STRICT_KWARGS=1."""
    _unknown_keywords("causal_conv1d_fn", kwargs, strict)
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        return _torch_ops.causal_conv1d_fn(
            x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out,
            activation, conv_states=conv_states, cache_indices=cache_indices,
            has_initial_state=has_initial_state, query_start_loc=query_start_loc, backend=backend)
    if initial_states is not None and conv_states is not None:
        raise ValueError("pass initial_states or conv_states, not both")
    varlen = x.ndim == 2
    if varlen and query_start_loc is None:
        raise ValueError("a 2-D x [C, T_total] needs query_start_loc")
    if seq_idx is not None:
        if varlen or query_start_loc is not None:
            raise ValueError("seq_idx takes x [B, C, T]; pass seq_idx or query_start_loc, not both")
        if (initial_states is not None or return_final_states or conv_states is not None or
                cache_indices is not None or has_initial_state is not None):
            raise ValueError("seq_idx does not combine with states (initial_states, "
                             "return_final_states, conv_states), as in causal-conv1d: use "
                             "query_start_loc for varlen batches with states")
    xt = _channels_last(x[None] if varlen else x)  # [B, T, C]
    weight, bias = _readable(_weight_2d(weight)), _readable(bias, False)
    B, T, C = xt.shape
    w = _window(weight.shape[-1])
    ctx = _lib.context(backend, _lib.common_device(x, weight, bias, conv_states, initial_states,
                                                   final_states_out))
    if seq_idx is not None:
        cu = _seq_idx_offsets(seq_idx, B, T, x)
        out = _lib.empty(x, (B, T, C))
        _conv_call(ctx, xt.reshape(1, B * T, C), weight, bias, out.reshape(1, B * T, C), None,
                   None, None, cu, activation)
        return _swap_last(out)
    cu = _index(query_start_loc, x)
    N = B if cu is None else cu.shape[0] - 1
    if not return_final_states:
        final_states_out = None  # causal-conv1d ignores it then
    # nothing is written before libgdn has validated the call: the final states are computed in
    # a private pool and copied to final_states_out only after success
    _lib.check_writable(conv_states, "conv_states")
    _check_width(conv_states, "conv_states", w)
    _check_states(initial_states, "initial_states", N, C, w)
    _check_states_out(final_states_out, "final_states_out", N, C, w)
    # the final states are as wide as final_states_out, else as initial_states, else W - 1
    width = next((np.shape(s)[2] for s in (final_states_out, initial_states) if s is not None),
                 max(weight.shape[-1] - 1, 0))
    pool = _in_place(conv_states)
    if pool is None and (initial_states is not None or return_final_states):
        pool = _private_pool(x, initial_states, (N, C, width))
    slots, flags = _index(cache_indices, x), _index(has_initial_state, x)
    # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
    out = (_lib.empty if slots is None else _lib.zeros)(x, (B, T, C))
    plan = _older_columns(pool, xt, cu, slots, flags, w)
    _conv_call(ctx, xt, weight, bias, out, _newest(pool, w), slots, flags, cu, activation)
    _shift_older_columns(pool, plan)
    if conv_states is not None:
        _copy_back(conv_states, pool)
        pool = conv_states
    elif final_states_out is not None:
        _lib.copy_into(final_states_out, pool)
        pool = final_states_out
    y = _swap_last(out)
    y = y[0] if varlen else y
    return (y, pool) if return_final_states else y


def _private_pool(x, initial_states, shape):
    """FLA-style states are read, never written: libgdn works on a private copy, as wide as the
    final states (shape[2]); initial_states' newest columns go at its end, zeros before them."""
    if initial_states is None:
        return _lib.zeros(x, shape)
    if np.shape(initial_states)[-1] == shape[2]:
        return _lib.copy_of(initial_states)
    pool = _lib.zeros(initial_states, shape)
    n = min(shape[2], initial_states.shape[-1])  # final states at least W - 1 wide: n >= W - 1
    pool[:, :, shape[2] - n:] = initial_states[:, :, initial_states.shape[-1] - n:]
    return pool


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None, *, backend=None, out=None, strict=None,
                         **kwargs):
    """causal-conv1d's causal_conv1d_update: x [B, C] (one token per sequence) or [B, C, L] (L
    tokens per sequence, e.g. speculative verification: one libgdn prefill call);
    conv_state [S, C, state_len], state_len >= W - 1, updated in place: the whole state shifts
    left by L and takes the new tokens at its end (module docstring). Row
    conv_state_indices[b] (or b) is sequence b's; -1 = skip, and that sequence's output comes
    back as zeros. Returns out shaped like x (for L > 1, a [B, C, L] view of a [B, L, C] array).
    cache_seqlens (the circular-buffer mode) is not supported. Copies: an x whose channels are
    not contiguous (for L > 1 a contiguous [B, C, L] x is; HF's transposed projections are
    not). out (one token per sequence): an array shaped like x that the output is written into
    and returned as (x itself too, as vLLM's update does), channels contiguous; the rows of
    skipped sequences keep what they held; eager mode only. Other keywords are ignored, or a
    TypeError with strict (as causal_conv1d_fn)."""
    _unknown_keywords("causal_conv1d_update", kwargs, strict)
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        _lib.eager_only(out, "causal_conv1d_update")
        return _torch_ops.causal_conv1d_update(x, conv_state, weight, bias, activation,
                                               cache_seqlens, conv_state_indices, backend=backend)
    return _conv1d_update(x, conv_state, weight, bias, activation, cache_seqlens,
                          conv_state_indices, backend=backend, out=out)


_ACTIVATIONS = {None: ACT_NONE, "none": ACT_NONE, "identity": ACT_NONE, "silu": ACT_SILU,
                "swish": ACT_SILU}  # ops._activation's names, for the fast path's lookup


def _conv1d_update(x, conv_state, weight, bias, activation, cache_seqlens, conv_state_indices,
                   *, backend, out=None):
    """causal_conv1d_update's work. The native fast path (_lib.fast, _fastcall.c) runs the call
    when it can do exactly what the code below does (a [B, C] or [B, C, 1] x, a state exactly
    W - 1 wide, nothing to copy or refuse); else it declines and the code below runs."""
    fast = _lib.fast
    if fast is not None:
        try:
            code = _ACTIVATIONS.get(activation)
        except TypeError:  # unhashable: _activation() names it
            code = None
        if code is not None:
            result = fast.conv1d_update(backend, x, conv_state, weight, bias, code,
                                        cache_seqlens, conv_state_indices, out)
            if result is not NotImplemented:
                return result
    if cache_seqlens is not None:
        raise ValueError("cache_seqlens (circular conv state) is not supported")
    weight, bias = _readable(_weight_2d(weight)), _readable(bias, False)
    w = _window(weight.shape[-1])
    _lib.check_writable(conv_state, "conv_state")
    _check_width(conv_state, "conv_state", w)
    ctx = _lib.context(backend, _lib.common_device(x, conv_state, weight, bias, out))
    slots = _index(conv_state_indices, x)
    if out is not None:
        _check_out(out, x)
    state = _in_place(conv_state)
    if x.ndim == 3 and x.shape[-1] != 1:  # several tokens per sequence: libgdn's prefill
        xt = _channels_last(x)  # [B, L, C]
        out = (_lib.empty if slots is None else _lib.zeros)(xt, xt.shape)
        plan = _older_columns(state, xt, None, slots, None, w)
        _conv_call(ctx, xt, weight, bias, out, _newest(state, w), slots, None, None, activation,
                   names=("conv_state", "conv_state_indices"))
        _shift_older_columns(state, plan)
        _copy_back(conv_state, state)
        return _swap_last(out)
    x2 = _readable(x[..., 0] if x.ndim == 3 else x)  # e.g. x[:, :, t] of a [B, C, T] x
    given = out
    if given is not None:  # the caller's array: the rows of skipped sequences keep their values
        out = given[..., 0] if given.ndim == 3 else given
    else:  # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
        out = (_lib.empty if slots is None else _lib.zeros)(x2, x2.shape)
    plan = None if x2.ndim != 2 else _older_columns(state, x2[:, None, :], None, slots, None, w)
    a = lib.gdn_conv1d_update_default_args()
    view = _newest(state, w)
    keep = (x2, weight, bias, out, view, slots)
    a.x, a.weight, a.bias, a.out = (describe(x2, "x"), describe(weight, "weight"),
                                    describe(bias, "bias"), describe(out, "out"))
    a.conv_state, a.state_slots = (describe(view, "conv_state"),
                                   describe(slots, "conv_state_indices"))
    a.activation = _activation(activation)
    check(lib.gdn_conv1d_update(ctx, ctypes.byref(a)), ctx)
    del keep
    _shift_older_columns(state, plan)
    _copy_back(conv_state, state)
    if given is not None:
        return given
    return out[..., None] if x.ndim == 3 else out
