"""gdn's functions as torch custom ops (torch.library), for torch.compile, torch.export and CUDA
graphs.

With torch >= 2.4 (torch.library.custom_op and register_fake), importing gdn registers these
operators in the namespace "gdn" (torch.ops.gdn.<name>); with an older torch, or none, nothing
is registered (`available` is False) and the public functions are plain Python calls, as before.

How they are used. In eager mode the public functions (gdn.chunk_gated_delta_rule, ...) run
their implementation directly: the ops are not involved (the routing check costs ~0.1 us). Only
while torch.compile's Dynamo (or torch.export) traces a call (torch.compiler.is_compiling(), the
first check in each public function) does the public function forward to the wrapper of the
same name here, which
applies the Python-only parts of the call (FLA's keywords, list-valued indices, the outputs that
are the caller's own arrays) around one torch.ops.gdn op. Dynamo records that op as one opaque
node whose shapes come from its fake implementation, so a model that calls gdn compiles with
fullgraph=True, and the compiled graph runs the same libgdn code as eager mode. The ops can
also be called directly (torch.ops.gdn.l2norm(x, 1e-6, None)), eagerly or in a traced graph.

Schemas (Tensor(a!) marks the tensors written in place; every other tensor is only read; all
outputs are new tensors, never inputs or views of inputs). An optional tensor written in place
comes right after the required arguments and has no default: torch leaves trailing arguments
that equal their defaults out of the calls it boxes, and an in-place argument left out that way
breaks its version counting (torch 2.11: IndexError in opcheck and compiled graphs). So the ops'
argument order differs from the public functions' there:

  gdn::chunk_gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor? g, Tensor? beta,
      Tensor(a!)? state_pool, float? scale, Tensor? initial_state, bool output_final_state,
      bool use_qk_l2norm_in_kernel, bool use_beta_sigmoid_in_kernel, bool allow_neg_eigval,
      bool state_v_first, Tensor? cu_seqlens, bool use_gate_in_kernel, Tensor? A_log,
      Tensor? dt_bias, Tensor? state_indices, Tensor? has_initial_state, str gva,
      int? chunk_size, str algorithm, str precision, str? backend)
      -> (Tensor o, Tensor final_state)
  gdn::fused_recurrent_gated_delta_rule(the same, less chunk_size, algorithm and precision)
      -> (Tensor o, Tensor final_state)
      state_pool is updated in place. final_state is a new float32 [N, HV, K, V] ([N, HV, V, K]
      with state_v_first) when output_final_state and there is no state_pool, else an empty
      tensor [0]: the wrapper returns None, or state_pool itself, as the public function does.
  gdn::causal_conv1d_fn(Tensor x, Tensor weight, Tensor(a!)? final_states_out,
      Tensor(b!)? conv_states, Tensor? bias, Tensor? seq_idx, Tensor? initial_states,
      bool return_final_states, str? activation, Tensor? cache_indices,
      Tensor? has_initial_state, Tensor? query_start_loc, str? backend)
      -> (Tensor out, Tensor final_states)
      conv_states (the pool) and final_states_out are written in place. final_states is new
      only when return_final_states and neither of them is given (else empty [0]; the wrapper
      returns conv_states / final_states_out itself, or only out).
  gdn::causal_conv1d_update(Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor? bias,
      str? activation, Tensor? cache_seqlens, Tensor? conv_state_indices, str? backend)
      -> Tensor
      conv_state is written in place.
  gdn::fused_gdn_gating(Tensor A_log, Tensor a, Tensor? b, Tensor? dt_bias, float beta,
      float threshold, bool allow_neg_eigval, str a_form, str? backend)
      -> (Tensor g, Tensor beta)            beta is empty [0] when b is None (wrapper: None)
  gdn::l2norm(Tensor x, float eps, str? backend) -> Tensor
  gdn::rms_norm_gated(Tensor x, Tensor? g, Tensor? weight, Tensor? bias, str? activation,
      Tensor? residual, bool prenorm, bool residual_in_fp32, float eps, bool norm_before_gate,
      bool weight_offset, str? backend) -> Tensor
      (the last three mutate nothing)

(torch.ops.gdn.<name>.default._schema prints the exact schema, with the defaults, which are the
public functions'.) Arguments mean what they mean for the public functions, whose docstrings
say more; the ops take no **kwargs and no strict (the wrappers apply those). Argument errors
are raised by the op when it runs (at the compiled graph's run), as gdn.GdnValueError /
ValueError with the public function's message.

Outputs have the public functions' shapes, dtypes and devices, in one of two layouts, which the
fake implementations promise and the real ones keep: contiguous, or for causal-conv1d's
[.., C, T] outputs the transpose of a contiguous [.., T, C] array (the public functions' own
layouts, except that a final state copied from a non-contiguous initial_state(s) comes back
contiguous). libgdn has no backward: the wrappers detach the inputs that require grad, so the
outputs do not require grad, as in eager mode (the ops called directly on such inputs give
outputs whose backward raises).

Tracing. The wrappers run in Dynamo's trace: what they decide there (FLA's keywords, strict /
GDN_STRICT_KWARGS) is decided once per compilation. A keyword refused there (gk, head_first=True,
an unknown one with strict) raises its ValueError / TypeError without fullgraph; with
fullgraph=True, torch 2.5 reports it as torch._dynamo.exc.Unsupported ("Observed exception")
without the message (call the function eagerly to see it).

CUDA graphs. The ops run the CUDA backend on torch's current stream; with index tensors
(slots, cu_seqlens, flags) on the device and conv states exactly W - 1 wide, a call does not
synchronize the host, and its outputs come from torch's allocator, so a decode step can be
captured: torch.cuda.graph around the eager step, or torch.compile(mode="reduce-overhead") with
the pools as module buffers (tests/test_gpu_torch.py). Warm up once before capturing: libgdn
reserves its CUDA workspace on first use. A conv state wider than W - 1 with conv_state_indices /
cache_indices shifts its older columns through a boolean mask (one device sync): not capturable.
"""
import threading
from typing import Optional, Tuple

from . import _lib

torch = _lib.torch
_custom_op = getattr(getattr(torch, "library", None), "custom_op", None)
_register_fake = getattr(getattr(torch, "library", None), "register_fake", None)

available = _custom_op is not None and _register_fake is not None
"""True when the ops are registered (torch >= 2.4); else the public functions never route."""

__all__ = ["available", "compiling", "OPS"]

# the names of the ops; torch.ops.gdn.<name> once registered
OPS = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d_fn",
       "causal_conv1d_update", "fused_gdn_gating", "l2norm", "rms_norm_gated")

_local = threading.local()  # .inside: a real implementation is running on this thread


if not available:
    def compiling():
        """False: without torch.library.custom_op the public functions never route."""
        return False
else:
    Tensor = torch.Tensor
    _dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
    _is_compiling = torch.compiler.is_compiling

    def compiling():
        """True while a public function should call its op: Dynamo is tracing it (both checks
        are constants True for Dynamo, so it traces nothing else), or another torch tracer
        (torch.export's) runs it outside an op's own implementation. In eager mode: one call."""
        return _is_compiling() and (_dynamo_compiling() or not getattr(_local, "inside", False))


class _Inside:
    """Marks this thread as running an op's real implementation: the public function it calls
    must not route back to the op (torch.compiler.is_compiling() is True all through
    torch.export, whose tracing could run one)."""

    def __enter__(self):
        self.before = getattr(_local, "inside", False)
        _local.inside = True

    def __exit__(self, *exc):
        _local.inside = self.before


_inside = _Inside


def _nothing(like):
    """The empty tensor an op returns for "no tensor" (custom ops cannot return None) and for an
    output that is one of its inputs (they cannot return an input)."""
    return torch.empty(0, dtype=torch.float32, device=like.device)


# Layouts. Inductor lays out its use of an op's outputs by the fake implementation's strides,
# so the real ones must have exactly those. The fakes promise two layouts: contiguous, and (for
# causal-conv1d's [.., C, T] outputs) the transpose of a contiguous [.., T, C] array, as the
# public functions allocate them; the real implementations check for them (a no-op) and copy
# into them otherwise, whatever the Python implementation below them returns.

def _contiguous(t):
    return t if t.is_contiguous() else t.contiguous()


def _channels_last(t):
    """t ([.., C, T]) as the transposed view of a contiguous [.., T, C] array."""
    tt = t.transpose(-1, -2)
    return t if tt.is_contiguous() else tt.contiguous().transpose(-1, -2)


def _channels_last_empty(like, shape):
    return like.new_empty((*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)


def _read_only(x):
    """What the op gets for a tensor it only reads: x, detached where it requires grad (libgdn
    has no backward: eager outputs never require grad, and neither do the op's)."""
    return x.detach() if isinstance(x, torch.Tensor) and x.requires_grad else x


def _indices(x, like):
    """An index argument (cu_seqlens, slots, flags) as a tensor: lists are accepted by the public
    functions, ops take tensors."""
    if x is None or isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(x, device=like.device)


def _registered():
    """Are the ops there already (another copy of this module, e.g. after importlib.reload,
    registered them)? They are then used as they are: registering twice is an error."""
    try:
        return all(getattr(torch.ops.gdn, name) is not None for name in OPS)
    except (AttributeError, RuntimeError):
        return False


if available and not _registered():
    # ---- the gated delta rule -------------------------------------------------------------

    def _delta_rule_fake(q, v, out_dtype, initial_state, output_final_state, state_v_first,
                         cu_seqlens, state_pool):
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        o = v.new_empty(v.shape, dtype=out_dtype)
        if not output_final_state or state_pool is not None:
            return o, _nothing(q)
        if initial_state is not None:  # a float32 copy of it
            return o, initial_state.new_empty(initial_state.shape, dtype=torch.float32)
        N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
        shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        return o, q.new_empty(shape, dtype=torch.float32)

    def _delta_rule_result(q, result, output_final_state, state_pool):
        o, final = result
        if not output_final_state or state_pool is not None or final is None:
            return _contiguous(o), _nothing(q)
        return _contiguous(o), _contiguous(final)

    @_custom_op("gdn::chunk_gated_delta_rule", mutates_args=("state_pool",))
    def _chunk_op(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], beta: Optional[Tensor],
                  state_pool: Optional[Tensor], scale: Optional[float] = None,
                  initial_state: Optional[Tensor] = None,
                  output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                  use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                  state_v_first: bool = False, cu_seqlens: Optional[Tensor] = None,
                  use_gate_in_kernel: bool = False, A_log: Optional[Tensor] = None,
                  dt_bias: Optional[Tensor] = None, state_indices: Optional[Tensor] = None,
                  has_initial_state: Optional[Tensor] = None, gva: str = "block",
                  chunk_size: Optional[int] = None, algorithm: str = "auto",
                  precision: str = "auto", backend: Optional[str] = None
                  ) -> Tuple[Tensor, Tensor]:
        from .ops import chunk_gated_delta_rule
        with _inside():
            result = chunk_gated_delta_rule(
                q, k, v, g, beta, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                state_v_first, cu_seqlens, use_gate_in_kernel=use_gate_in_kernel, A_log=A_log,
                dt_bias=dt_bias, state_pool=state_pool, state_indices=state_indices,
                has_initial_state=has_initial_state, gva=gva, chunk_size=chunk_size,
                algorithm=algorithm, precision=precision, backend=backend, strict=False)
        return _delta_rule_result(q, result, output_final_state, state_pool)

    @_chunk_op.register_fake
    def _(q, k, v, g, beta, state_pool, scale=None, initial_state=None, output_final_state=False,
          use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
          allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, use_gate_in_kernel=False,
          A_log=None, dt_bias=None, state_indices=None, has_initial_state=None,
          gva="block", chunk_size=None, algorithm="auto", precision="auto", backend=None):
        return _delta_rule_fake(q, v, q.dtype, initial_state, output_final_state, state_v_first,
                                cu_seqlens, state_pool)

    @_custom_op("gdn::fused_recurrent_gated_delta_rule", mutates_args=("state_pool",))
    def _recurrent_op(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor],
                      beta: Optional[Tensor], state_pool: Optional[Tensor],
                      scale: Optional[float] = None,
                      initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                      use_qk_l2norm_in_kernel: bool = False, use_gate_in_kernel: bool = False,
                      A_log: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None,
                      use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                      state_v_first: bool = False, cu_seqlens: Optional[Tensor] = None,
                      state_indices: Optional[Tensor] = None,
                      has_initial_state: Optional[Tensor] = None, gva: str = "block",
                      backend: Optional[str] = None) -> Tuple[Tensor, Tensor]:
        from .ops import fused_recurrent_gated_delta_rule
        with _inside():
            result = fused_recurrent_gated_delta_rule(
                q, k, v, g, beta, scale, initial_state, output_final_state,
                use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log, dt_bias,
                use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens,
                state_pool=state_pool, state_indices=state_indices,
                has_initial_state=has_initial_state, gva=gva, backend=backend, strict=False)
        return _delta_rule_result(q, result, output_final_state, state_pool)

    @_recurrent_op.register_fake
    def _(q, k, v, g, beta, state_pool, scale=None, initial_state=None, output_final_state=False,
          use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
          use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False,
          cu_seqlens=None, state_indices=None, has_initial_state=None, gva="block",
          backend=None):
        return _delta_rule_fake(q, v, v.dtype, initial_state, output_final_state, state_v_first,
                                cu_seqlens, state_pool)

    # ---- causal conv1d --------------------------------------------------------------------

    @_custom_op("gdn::causal_conv1d_fn", mutates_args=("final_states_out", "conv_states"))
    def _conv_op(x: Tensor, weight: Tensor, final_states_out: Optional[Tensor],
                 conv_states: Optional[Tensor], bias: Optional[Tensor] = None,
                 seq_idx: Optional[Tensor] = None, initial_states: Optional[Tensor] = None,
                 return_final_states: bool = False, activation: Optional[str] = None,
                 cache_indices: Optional[Tensor] = None,
                 has_initial_state: Optional[Tensor] = None,
                 query_start_loc: Optional[Tensor] = None,
                 backend: Optional[str] = None) -> Tuple[Tensor, Tensor]:
        from .conv import causal_conv1d_fn
        with _inside():
            result = causal_conv1d_fn(
                x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out,
                activation, conv_states=conv_states, cache_indices=cache_indices,
                has_initial_state=has_initial_state, query_start_loc=query_start_loc,
                backend=backend)
        if not return_final_states:
            return _channels_last(result), _nothing(x)
        out, final = result
        if conv_states is not None or final_states_out is not None:
            return _channels_last(out), _nothing(x)  # the caller's own: the wrapper returns it
        return _channels_last(out), _contiguous(final)

    @_conv_op.register_fake
    def _(x, weight, final_states_out, conv_states, bias=None, seq_idx=None, initial_states=None,
          return_final_states=False, activation=None, cache_indices=None,
          has_initial_state=None, query_start_loc=None, backend=None):
        # out is a [B, C, T] view of a [B, T, C] array ([C, T] of [T, C] for varlen x)
        out = _channels_last_empty(x, x.shape)
        C = x.shape[-2]
        if x.ndim == 2:
            N = None if query_start_loc is None else query_start_loc.shape[0] - 1
        else:
            N = x.shape[0] if query_start_loc is None else query_start_loc.shape[0] - 1
        if (not return_final_states or conv_states is not None or
                final_states_out is not None or N is None):
            return out, _nothing(x)
        if initial_states is None:
            return out, x.new_empty((N, C, weight.shape[-1] - 1))
        return out, initial_states.new_empty(initial_states.shape)  # a copy of them

    @_custom_op("gdn::causal_conv1d_update", mutates_args=("conv_state",))
    def _conv_update_op(x: Tensor, conv_state: Tensor, weight: Tensor,
                        bias: Optional[Tensor] = None, activation: Optional[str] = None,
                        cache_seqlens: Optional[Tensor] = None,
                        conv_state_indices: Optional[Tensor] = None,
                        backend: Optional[str] = None) -> Tensor:
        from .conv import causal_conv1d_update
        with _inside():
            out = causal_conv1d_update(x, conv_state, weight, bias, activation, cache_seqlens,
                                       conv_state_indices, backend=backend)
        return _channels_last(out) if x.ndim == 3 and x.shape[-1] != 1 else _contiguous(out)

    @_conv_update_op.register_fake
    def _(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
          conv_state_indices=None, backend=None):
        if x.ndim == 3 and x.shape[-1] != 1:  # [B, C, L]: a view of [B, L, C]
            return _channels_last_empty(x, x.shape)
        return x.new_empty(x.shape)

    # ---- gating, norms --------------------------------------------------------------------

    @_custom_op("gdn::fused_gdn_gating", mutates_args=())
    def _gating_op(A_log: Tensor, a: Tensor, b: Optional[Tensor] = None,
                   dt_bias: Optional[Tensor] = None, beta: float = 1.0, threshold: float = 20.0,
                   allow_neg_eigval: bool = False, a_form: str = "A_log",
                   backend: Optional[str] = None) -> Tuple[Tensor, Tensor]:
        from .ops import fused_gdn_gating
        with _inside():
            g, beta_out = fused_gdn_gating(A_log, a, b, dt_bias, beta, threshold,
                                           allow_neg_eigval=allow_neg_eigval, a_form=a_form,
                                           backend=backend)
        return _contiguous(g), (_nothing(a) if beta_out is None else _contiguous(beta_out))

    @_gating_op.register_fake
    def _(A_log, a, b=None, dt_bias=None, beta=1.0, threshold=20.0, allow_neg_eigval=False,
          a_form="A_log", backend=None):
        g = a.new_empty(a.shape, dtype=torch.float32)
        return g, (_nothing(a) if b is None else a.new_empty(a.shape, dtype=torch.float32))

    @_custom_op("gdn::l2norm", mutates_args=())
    def _l2norm_op(x: Tensor, eps: float = 1e-6, backend: Optional[str] = None) -> Tensor:
        from .ops import l2norm
        with _inside():
            return _contiguous(l2norm(x, eps, backend=backend))

    @_l2norm_op.register_fake
    def _(x, eps=1e-6, backend=None):
        return x.new_empty(x.shape)

    @_custom_op("gdn::rms_norm_gated", mutates_args=())
    def _rms_norm_gated_op(x: Tensor, g: Optional[Tensor], weight: Optional[Tensor],
                           bias: Optional[Tensor] = None, activation: Optional[str] = "swish",
                           residual: Optional[Tensor] = None, prenorm: bool = False,
                           residual_in_fp32: bool = False, eps: float = 1e-6,
                           norm_before_gate: bool = True, weight_offset: bool = False,
                           backend: Optional[str] = None) -> Tensor:
        from .ops import rms_norm_gated
        with _inside():
            return _contiguous(rms_norm_gated(x, g, weight, bias, activation, residual, prenorm,
                                              residual_in_fp32, eps,
                                              norm_before_gate=norm_before_gate,
                                              weight_offset=weight_offset, backend=backend))

    @_rms_norm_gated_op.register_fake
    def _(x, g, weight, bias=None, activation="swish", residual=None, prenorm=False,
          residual_in_fp32=False, eps=1e-6, norm_before_gate=True, weight_offset=False,
          backend=None):
        return x.new_empty(x.shape)

if available:
    _ops = torch.ops.gdn


# ---- the wrappers the public functions forward to while compiling ---------------------------
# Same signatures as the public functions. They apply what only Python can (FLA's keywords,
# lists as index tensors, an output that is the caller's own tensor, None for "no tensor") and
# call the op once; what they run before the op must stay trivially traceable by Dynamo.

def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=None, cu_seqlens=None, *, use_gate_in_kernel=False,
                           A_log=None, dt_bias=None, state_pool=None, state_indices=None,
                           has_initial_state=None, gva="block", chunk_size=None,
                           algorithm="auto", precision="auto", backend=None, strict=None,
                           **kwargs):
    from .ops import _fla_keywords
    state_v_first = _fla_keywords("chunk_gated_delta_rule", kwargs, strict=strict,
                                  state_v_first=state_v_first)
    r = _read_only
    o, final = _ops.chunk_gated_delta_rule(
        r(q), r(k), r(v), r(g), r(beta), state_pool, scale, r(initial_state),
        bool(output_final_state), bool(use_qk_l2norm_in_kernel),
        bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval), state_v_first,
        _indices(cu_seqlens, q), bool(use_gate_in_kernel), r(A_log), r(dt_bias),
        _indices(state_indices, q), _indices(has_initial_state, q), gva, chunk_size,
        algorithm, precision, backend)
    if not output_final_state:
        return o, None
    return o, (state_pool if state_pool is not None else final)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=None, cu_seqlens=None, *, state_pool=None,
                                     state_indices=None, has_initial_state=None, gva="block",
                                     backend=None, strict=None, **kwargs):
    from .ops import _fla_keywords
    state_v_first = _fla_keywords("fused_recurrent_gated_delta_rule", kwargs, strict=strict,
                                  state_v_first=state_v_first)
    r = _read_only
    o, final = _ops.fused_recurrent_gated_delta_rule(
        r(q), r(k), r(v), r(g), r(beta), state_pool, scale, r(initial_state),
        bool(output_final_state), bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
        r(A_log), r(dt_bias), bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
        state_v_first, _indices(cu_seqlens, q), _indices(state_indices, q),
        _indices(has_initial_state, q), gva, backend)
    if not output_final_state:
        return o, None
    return o, (state_pool if state_pool is not None else final)


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None, *,
                     conv_states=None, cache_indices=None, has_initial_state=None,
                     query_start_loc=None, backend=None):
    r = _read_only
    out, final = _ops.causal_conv1d_fn(
        r(x), r(weight), final_states_out, conv_states, r(bias), _indices(seq_idx, x),
        r(initial_states), bool(return_final_states), activation, _indices(cache_indices, x),
        _indices(has_initial_state, x), _indices(query_start_loc, x), backend)
    if not return_final_states:
        return out
    if conv_states is not None:
        return out, conv_states
    return out, (final_states_out if final_states_out is not None else final)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None, *, backend=None):
    r = _read_only
    return _ops.causal_conv1d_update(r(x), conv_state, r(weight), r(bias), activation,
                                     _indices(cache_seqlens, x),
                                     _indices(conv_state_indices, x), backend)


def fused_gdn_gating(A_log, a, b, dt_bias=None, beta=1.0, threshold=20.0, *,
                     allow_neg_eigval=False, a_form="A_log", backend=None):
    r = _read_only
    g, beta_out = _ops.fused_gdn_gating(r(A_log), r(a), r(b), r(dt_bias), float(beta),
                                        float(threshold), bool(allow_neg_eigval), a_form, backend)
    return g, (None if b is None else beta_out)


def l2norm(x, eps=1e-6, *, backend=None):
    return _ops.l2norm(_read_only(x), float(eps), backend)


def rms_norm_gated(x, g, weight, bias=None, activation="swish", residual=None, prenorm=False,
                   residual_in_fp32=False, eps=1e-6, *, norm_before_gate=True,
                   weight_offset=False, backend=None):
    r = _read_only
    return _ops.rms_norm_gated(r(x), r(g), r(weight), r(bias), activation, r(residual),
                               bool(prenorm), bool(residual_in_fp32), float(eps),
                               bool(norm_before_gate), bool(weight_offset), backend)
