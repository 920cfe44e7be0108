"""FLA-compatible functions over NumPy arrays and torch tensors (the causal-conv1d ones are in
conv.py), and the argument adapters both modules share.

Every function takes arrays in libgdn's layouts (token-major), allocates its outputs in the
caller's framework and device, and runs on:
  - the cuda backend for CUDA tensors, on torch's current stream;
  - the best host backend otherwise (`backend=` overrides: "ref", "cpu", "auto").
Errors raise gdn.GdnError (gdn.GdnValueError for bad arguments) with libgdn's message; a call
refused for its arguments writes nothing (every check runs before the first write into a
caller's array).

Copies. Arrays are handed to libgdn in place whenever its C API can read them, which is any
strides at all except: a last dimension that is not contiguous (activations, q/k/v, g, beta, the
conv weight), and, for NumPy arrays only, negative strides, unaligned data or strides that are
not whole elements. Such an input is copied (contiguously) before the call; a state pool written
in place that libgdn cannot address (NumPy only) is worked on in a copy that is copied back after
the call succeeds. Index arrays (cu_seqlens, slots, flags) are copied to the data's device when
they are not there, and when they repeat elements (stride 0). The other copies are FLA's
initial_state and causal-conv1d's initial_states (read, never written: libgdn works on a private
copy) and the float32 copies of mixed q / k / v dtypes (chunk_gated_delta_rule).
Arrays that are written in place must be writable (not read-only, no stride-0 repeats). Output
rows of padding sequences (slot -1) are zeros; empty inputs give empty outputs.
"""
import ctypes
import os
import warnings

import numpy as np

from . import _lib, torch_ops as _torch_ops
from ._lib import (A_FORMS, ACT_NONE, ACT_SILU, ALGORITHMS, CHUNK_SIZE_AUTO, ERR_SHAPE, GVAS,
                   PRECISIONS, SCALE_AUTO, SOFTPLUS_THRESHOLD, STATE_KV, STATE_VK, GdnValueError,
                   check, describe, lib)


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


# ---- argument adapters: what libgdn reads in place, and copies of what it cannot ---------------

_TorchTensor = _lib.TORCH_TENSOR
_ARRAY_TYPES = _lib.ARRAY_TYPES


def _element_strides(x):
    """x's strides in elements, or None for a NumPy array libgdn cannot address at all
    (unaligned data, or byte strides that are not whole elements)."""
    if isinstance(x, _TorchTensor):
        return x.stride()
    size = x.itemsize
    if not x.flags.aligned or any(s % size for s in x.strides):
        return None
    return [s // size for s in x.strides]


def _addressable(x, last_contiguous, no_repeats=False):
    """Can libgdn's C API read x where it is? Strides must be >= 0 (torch's always are); with
    last_contiguous, the last dimension must have stride 1 (when it has more than one element);
    with no_repeats, no dimension of more than one element may have stride 0."""
    if isinstance(x, _TorchTensor):
        if x.ndim == 0 or x.numel() == 0:
            return True  # describe() names rank 0, and gives empty arrays a layout of their own
        strides, one = x.stride(), 1
    else:
        if x.ndim == 0 or x.size == 0:
            return True
        strides, one = x.strides, x.itemsize  # in bytes: one element is itemsize
        if not x.flags.aligned or any(s % one for s in strides):
            return False
    if min(strides) < 0:
        return False
    if last_contiguous and strides[-1] != one and x.shape[-1] > 1:
        return False
    return not (no_repeats and 0 in strides and
                any(s == 0 and n > 1 for n, s in zip(x.shape, strides)))


def _contiguous(x):
    """A contiguous copy (NumPy: always a new, aligned array; ascontiguousarray would hand an
    unaligned contiguous one back as it is)."""
    return x.contiguous() if isinstance(x, _TorchTensor) else np.array(x, order="C")


def _readable(x, last_contiguous=True):
    """x itself when libgdn can read it in place, else a contiguous copy (same dtype/device)."""
    if not isinstance(x, _ARRAY_TYPES):
        return x  # None, or a wrong type for describe() to name
    return x if _addressable(x, last_contiguous) else _contiguous(x)


def _index(x, like):
    """An index array (cu_seqlens, slots, flags; lists too) on like's framework and device,
    copied if libgdn cannot read it there (negative strides, repeated elements)."""
    if x is None:
        return None
    x = _lib.on_device_of(x, like)
    if _addressable(x, last_contiguous=False, no_repeats=True):
        return x
    return _contiguous(x)


def _in_place(x):
    """The array libgdn writes for the caller's x: x itself, or (for a NumPy array with negative
    strides or unaligned data) a contiguous copy to be copied back with _copy_back() after the
    call succeeds. Run check_writable(x) first."""
    if not isinstance(x, np.ndarray) or _addressable(x, last_contiguous=False):
        return x  # None, a torch tensor (always addressable), or an array libgdn can write
    return _contiguous(x)


def _copy_back(x, work):
    if work is not x:
        np.copyto(x, work)


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


# ---- FLA's keywords ----------------------------------------------------------------------------

# FLA keywords that libgdn has no use for: accepted (with strict=True too) and ignored.
# cu_seqlens_cpu and chunk_indices are FLA's precomputed helpers for cu_seqlens; gk, gv,
# cp_context and head_first are accepted at the values that leave the math alone (None, None,
# None, False) and refused at any other (_REFUSED).
_FLA_IGNORED = frozenset({"cu_seqlens_cpu", "chunk_indices"})
# keyword -> (is the value one that changes the math?, why it is refused)
_REFUSED = {
    "gk": (lambda x: x is not None, "gk (per-channel key gates) is not supported by libgdn: it "
                                    "changes the recurrence"),
    "gv": (lambda x: x is not None, "gv (per-channel value gates) is not supported by libgdn: "
                                    "it changes the recurrence"),
    "cp_context": (lambda x: x is not None, "cp_context (context parallelism) is not supported "
                                            "by libgdn"),
    "head_first": (bool, "head_first=True ([B, H, T, ...] inputs) is not supported: pass "
                         "[B, T, H, ...] (FLA removed head_first too)"),
    # vLLM's fork of fused_recurrent_gated_delta_rule: silently ignored they would lose states
    "ssm_state_indices": (lambda x: x is not None, "ssm_state_indices (vLLM) is not supported: "
                                                   "pass state_pool= and state_indices="),
    "inplace_final_state": (bool, "inplace_final_state (vLLM) is not supported: pass the states "
                                  "as state_pool= to have them updated in place"),
    "num_accepted_tokens": (lambda x: x is not None, "num_accepted_tokens (vLLM speculative "
                                                     "decoding) is not supported by libgdn"),
}


def _strict(strict):
    """strict=None follows the environment: GDN_STRICT_KWARGS=1 makes unknown keywords errors."""
    if strict is None:
        return os.environ.get("GDN_STRICT_KWARGS", "").strip().lower() in ("1", "true", "yes")
    return bool(strict)


def _fla_keywords(fn, kwargs, *, strict, state_v_first):
    """Applies the keywords that reach a delta-rule function's **kwargs and returns the state
    layout (state_v_first: None means not given, i.e. False). transpose_state_layout is FLA's
    older name of state_v_first (a DeprecationWarning; giving both is a ValueError, as FLA);
    the keywords of _REFUSED raise ValueError at values that change the math; FLA's helpers
    (_FLA_IGNORED) are ignored; any other keyword is ignored too (as FLA's **kwargs swallows
    it), or a TypeError naming it with strict."""
    if not kwargs:
        return bool(state_v_first)
    kwargs = dict(kwargs)
    if "transpose_state_layout" in kwargs:  # as FLA: a DeprecationWarning, both names refused
        transpose = bool(kwargs.pop("transpose_state_layout"))
        if state_v_first is not None:
            raise ValueError(f"{fn}: pass state_v_first or transpose_state_layout (its older "
                             "name), not both")
        if not _torch_ops.compiling():  # (torch.compile cannot trace a warning)
            warnings.warn(f"{fn}: transpose_state_layout is the older name of state_v_first",
                          DeprecationWarning, stacklevel=3)
        state_v_first = transpose
    for name, (changes_math, why) in _REFUSED.items():
        if name in kwargs and changes_math(kwargs[name]):
            raise ValueError(f"{fn}: {why}")
    _unknown_keywords(fn, {k: v for k, v in kwargs.items()
                           if k not in _FLA_IGNORED and k not in _REFUSED}, strict)
    return bool(state_v_first)


def _unknown_keywords(fn, kwargs, strict):
    """Keywords fn does not know: ignored (as FLA's **kwargs swallows them), or a TypeError
    naming them with strict (strict=None: GDN_STRICT_KWARGS=1 in the environment)."""
    if kwargs and _strict(strict):
        raise TypeError(f"{fn}() got unexpected keyword argument(s) "
                        f"{', '.join(map(repr, sorted(kwargs)))} (strict: unset "
                        "GDN_STRICT_KWARGS or pass strict=False to have unknown keywords "
                        "ignored, as FLA does)")


# ---- the gated delta rule -------------------------------------------------------------------

_FLOAT32_16 = ("float32", "float16", "bfloat16")


def _one_qkv_dtype(q, k, v):
    """q, k and v in one dtype, as libgdn takes them: as they are when their dtypes agree, else
    float32 copies of those that are not float32 (bf16 / f16 -> f32 is exact, so nothing is lost;
    the math then runs in float32). Other dtypes are left for describe() to name."""
    if q.dtype is k.dtype is v.dtype:
        return q, k, v  # one dtype (the common case, without naming it)
    names = [str(t.dtype).replace("torch.", "") for t in (q, k, v)]
    if len(set(names)) == 1 or not all(n in _FLOAT32_16 for n in names):
        return q, k, v

    def float32(t):  # one copy, contiguous: no second one for a strided t
        if _lib.is_torch(t):
            return t.to(_lib.torch.float32, memory_format=_lib.torch.contiguous_format)
        return t.astype(np.float32, order="C")
    return tuple(t if n == "float32" else float32(t) for t, n in zip((q, k, v), names))


def _float32_copy(x):
    """A private, contiguous float32 copy with no autograd history (the pool libgdn works on for
    an initial_state it must not write: the CUDA backend reads pools in 16-byte pieces, which a
    transposed view would not give, and a copy that kept x's history would hand back wrong
    gradients)."""
    if _lib.is_torch(x):
        return x.detach().to(_lib.torch.float32, memory_format=_lib.torch.contiguous_format,
                             copy=True)
    return np.array(x, dtype=np.float32, order="C")


def _delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None,
                dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                state_v_first=False, cu_seqlens=None, state_pool=None, state_indices=None,
                has_initial_state=None, gva="block", chunk_size=None, algorithm="auto",
                precision="auto", backend=None, out=None, out_dtype_of="v"):
    """The one gdn_delta_rule call behind both public delta-rule functions. Options are keyword
    arguments named as in the public functions; their defaults are libgdn's. out_dtype_of ("q"
    or "v") names the input whose dtype the output takes (FLA: q for chunk, v for recurrent).
    Returns (o, final state or None).

    The native fast path (_lib.fast, _fastcall.c) runs the call when it can do exactly what the
    code below does; it declines (NotImplemented) whatever needs a copy, a conversion or an
    error of this code's, and then the code below runs."""
    fast = _lib.fast
    if fast is not None:
        gva_value, algorithm_value = GVAS.get(gva), ALGORITHMS.get(algorithm)
        precision_value = PRECISIONS.get(precision)
        if gva_value is not None and algorithm_value is not None and precision_value is not None:
            result = fast.delta_rule(
                backend, q, k, v, g, beta, initial_state, state_pool, state_indices,
                has_initial_state, cu_seqlens, A_log, dt_bias, scale, state_v_first, gva_value,
                algorithm_value, chunk_size, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                use_beta_sigmoid_in_kernel, allow_neg_eigval, precision_value,
                output_final_state, out_dtype_of == "q", out)
            if result is not NotImplemented:
                return result
    if gva not in GVAS:
        raise ValueError(f"gva is {gva!r}, expected 'block' (FLA, HF) or 'tiled' (ggml, GGUF)")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm is {algorithm!r}, expected one of {sorted(ALGORITHMS)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision is {precision!r}, expected one of {sorted(PRECISIONS)}")
    dev = _lib.common_device(q, k, v, g, beta, initial_state, state_pool, A_log, dt_bias, out)
    ctx = _lib.context(backend, dev)
    out_dtype = (q if out_dtype_of == "q" else v).dtype
    q, k, v = (_readable(t) for t in _one_qkv_dtype(q, k, v))
    g, beta = _readable(g), _readable(beta)
    A_log, dt_bias = _readable(A_log, False), _readable(dt_bias, False)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    cu = _index(cu_seqlens, q)
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
    pool = _in_place(state_pool)  # FLA's initial_state is read, never written: libgdn gets a copy
    if pool is None and (initial_state is not None or output_final_state):
        pool = (_lib.zeros(q, state_shape, _lib.float32_of(q)) if initial_state is None
                else _float32_copy(initial_state))
    slots = _index(state_indices, q)
    flags = _index(has_initial_state, q)
    if out is not None:  # the caller's array: the rows of skipped sequences keep their values
        _check_shape(out, "out", tuple(v.shape), "v's shape")
        _lib.check_writable(out, "out")
        o = out
    else:  # rows of padding sequences (slot -1) are skipped by libgdn: they must read as zeros
        o = (_lib.empty if slots is None else _lib.zeros)(v, v.shape, out_dtype)
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
    if state_pool is not None:
        _copy_back(state_pool, pool)
        pool = state_pool
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


_FLA_CALL_NOTES = """
    FLA parity of the call: inputs may have any strides; q, k, v, g, beta whose last dimension
    is not contiguous (e.g. HF's views of a conv output) are copied, as are NumPy arrays with
    negative strides (module docstring, "Copies"); everything else is read in place. q, k and v
    may differ in dtype (e.g. q, k float32 and v bfloat16): those that are not float32 are then
    copied to float32 and the math runs in float32 (no rounding of the inputs), and o takes
    {out}'s dtype, as FLA's does. transpose_state_layout is accepted as the older name of
    state_v_first (both given and different: ValueError). Keywords libgdn ignores:
    cu_seqlens_cpu, chunk_indices, and cp_context=None, head_first=False, gk=None, gv=None;
    any other unknown keyword (HF passes some, e.g. use_cache) is ignored as FLA's **kwargs does,
    unless strict=True or the environment has GDN_STRICT_KWARGS=1: then it is a TypeError naming
    it. Refused with ValueError because they change the math: gk, gv (per-channel gates),
    cp_context, head_first=True, and vLLM's ssm_state_indices, inplace_final_state,
    num_accepted_tokens (use state_pool= / state_indices=)."""


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=None, cu_seqlens=None, *, use_gate_in_kernel=False,
                           A_log=None, dt_bias=None, state_pool=None, state_indices=None,
                           has_initial_state=None, gva="block", chunk_size=None,
                           algorithm="auto", precision="auto", backend=None, out=None,
                           strict=None, **kwargs):
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
    backend; out (an array o is written into and returned as, instead of a new one: v's shape,
    a float dtype of the call's framework and device, last dim contiguous; the rows of skipped
    sequences keep what they held; saves an allocation per call, eager mode only); strict (see
    below).
    """
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        _lib.eager_only(out, "chunk_gated_delta_rule")
        return _torch_ops.chunk_gated_delta_rule(
            q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens,
            use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
            state_pool=state_pool, state_indices=state_indices,
            has_initial_state=has_initial_state, gva=gva, chunk_size=chunk_size,
            algorithm=algorithm, precision=precision, backend=backend, strict=strict, **kwargs)
    state_v_first = _fla_keywords("chunk_gated_delta_rule", kwargs, strict=strict,
                                  state_v_first=state_v_first)
    return _delta_rule(
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens, state_pool=state_pool,
        state_indices=state_indices, has_initial_state=has_initial_state, gva=gva,
        chunk_size=chunk_size, algorithm=algorithm, precision=precision, backend=backend,
        out=out, out_dtype_of="q")


if chunk_gated_delta_rule.__doc__:  # None under python -OO
    chunk_gated_delta_rule.__doc__ += _FLA_CALL_NOTES.format(out="q")  # FLA: o.to(q.dtype)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=None, cu_seqlens=None, *, state_pool=None,
                                     state_indices=None, has_initial_state=None, gva="block",
                                     backend=None, out=None, strict=None, **kwargs):
    """Decode and short calls: FLA's fused_recurrent_gated_delta_rule (same arguments and
    returns as chunk_gated_delta_rule, less chunk_size, algorithm and precision: it always runs
    the recurrent form, in float32). Unlike FLA's, g and beta are the 4th and 5th positional
    arguments (FLA has gk, gv between them): pass FLA's gk / gv by keyword, or not at all.
    """
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        _lib.eager_only(out, "fused_recurrent_gated_delta_rule")
        return _torch_ops.fused_recurrent_gated_delta_rule(
            q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval,
            state_v_first, cu_seqlens, state_pool=state_pool, state_indices=state_indices,
            has_initial_state=has_initial_state, gva=gva, backend=backend, strict=strict,
            **kwargs)
    state_v_first = _fla_keywords("fused_recurrent_gated_delta_rule", kwargs, strict=strict,
                                  state_v_first=state_v_first)
    return _delta_rule(
        q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens, state_pool=state_pool,
        state_indices=state_indices, has_initial_state=has_initial_state, gva=gva,
        algorithm="recurrent", backend=backend, out=out, out_dtype_of="v")


if fused_recurrent_gated_delta_rule.__doc__:
    fused_recurrent_gated_delta_rule.__doc__ += _FLA_CALL_NOTES.format(out="v")  # FLA: like v


# ---- gating, norms ---------------------------------------------------------------------------

def fused_gdn_gating(A_log, a, b, dt_bias=None, beta=1.0, threshold=20.0, *,
                     allow_neg_eigval=False, a_form="A_log", backend=None):
    """g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) (2 sigmoid(b) with
    allow_neg_eigval), in float32, shaped like a. b may be None (then beta is None).
    a_form="neg_exp" takes GGUF's ssm_a = -exp(A_log) in place of A_log. a and b whose last
    dimension is not contiguous are copied (module docstring, "Copies")."""
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        return _torch_ops.fused_gdn_gating(A_log, a, b, dt_bias, beta, threshold,
                                           allow_neg_eigval=allow_neg_eigval, a_form=a_form,
                                           backend=backend)
    if beta != 1.0:
        raise ValueError("softplus beta other than 1.0 is not supported")
    dev = _lib.common_device(A_log, a, b, dt_bias)
    ctx = _lib.context(backend, dev)
    a, b = _readable(a), _readable(b)
    A_log, dt_bias = _readable(A_log, False), _readable(dt_bias, False)
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
    """x / sqrt(sum(x^2) + eps) over the last dimension, in x's dtype (an x whose last
    dimension is not contiguous is copied first)."""
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        return _torch_ops.l2norm(x, eps, backend=backend)
    ctx = _lib.context(backend, _lib.device_of(x))
    x = _readable(x)
    out = _lib.empty(x, x.shape)
    tx, to = describe(x, "x"), describe(out, "out")
    check(lib.gdn_l2norm(ctx, ctypes.byref(tx), ctypes.byref(to), eps), ctx)
    return out


def rms_norm_gated(x, g, weight, bias=None, activation="swish", residual=None, prenorm=False,
                   residual_in_fp32=False, eps=1e-6, *, norm_before_gate=True,
                   weight_offset=False, backend=None):
    """FLA's rms_norm_gated: x / sqrt(mean(x^2) + eps) * weight * silu(g) over the last
    dimension (norm_before_gate=False: rmsnorm(x * silu(g)) * weight; weight_offset: 1 + w).
    g may be None (no gate). bias, residual and prenorm are not supported. x and g whose last
    dimension is not contiguous are copied first."""
    if _torch_ops.compiling():  # torch.compile: one torch.ops.gdn op (torch_ops.py)
        return _torch_ops.rms_norm_gated(x, g, weight, bias, activation, residual, prenorm,
                                         residual_in_fp32, eps, norm_before_gate=norm_before_gate,
                                         weight_offset=weight_offset, backend=backend)
    if bias is not None or residual is not None or prenorm:
        raise ValueError("bias, residual and prenorm are not supported by libgdn's gated RMSNorm")
    if _activation(activation) != ACT_SILU:
        raise ValueError("only the swish/silu gate is supported")
    del residual_in_fp32
    ctx = _lib.context(backend, _lib.common_device(x, g, weight))
    x, g, weight = _readable(x), _readable(g), _readable(weight, False)
    out = _lib.empty(x, x.shape)
    a = lib.gdn_rmsnorm_default_args()
    a.x, a.z, a.weight, a.out = (describe(x, "x"), describe(g, "g"), describe(weight, "weight"),
                                 describe(out, "out"))
    a.eps = eps
    a.weight_offset = int(bool(weight_offset))
    a.norm_before_gate = int(bool(norm_before_gate))
    check(lib.gdn_rmsnorm_gated(ctx, ctypes.byref(a)), ctx)
    return out
