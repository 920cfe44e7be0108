"""ctypes view of libgdn's C API (include/gdn.h), array adapters and contexts.

Nothing here copies data: NumPy arrays and torch tensors are described to libgdn by pointer,
dtype, shape and element strides. PyTorch is optional and only used when it is importable.
"""
import ctypes
import ctypes.util
import itertools
import os
import threading

import numpy as np

try:  # PyTorch support activates when torch is importable
    import torch
except ImportError:  # pragma: no cover - exercised on machines without torch
    torch = None

F32, BF16, F16, I32, I64, U8 = range(6)
BACKENDS = {"auto": 0, "ref": 1, "cpu": 2, "cuda": 3}
ALGORITHMS = {"auto": 0, "recurrent": 1, "chunked": 2}
MAX_DIMS = 4

_NP_DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
              np.dtype(np.int64): I64, np.dtype(np.uint8): U8, np.dtype(np.bool_): U8}
_TORCH_DTYPES = {}
if torch is not None:
    _TORCH_DTYPES = {torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16,
                     torch.int32: I32, torch.int64: I64, torch.uint8: U8, torch.bool: U8}


class GdnError(RuntimeError):
    """A libgdn call failed; the message is libgdn's, naming the argument and expected value."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class GdnValueError(GdnError, ValueError):
    """Bad arguments (null, dtype, shape, stride or value errors)."""


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS)]


class GatingParams(ctypes.Structure):
    _fields_ = [("A", Tensor), ("dt_bias", Tensor), ("a_form", ctypes.c_int),
                ("softplus_threshold", ctypes.c_float), ("allow_neg_eigval", ctypes.c_int32)]


class Conv1dArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("x", "weight", "bias", "out", "conv_state", "state_slots",
                                      "has_initial_state", "cu_seqlens")] + [
        ("activation", ctypes.c_int)]


class Conv1dUpdateArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("x", "weight", "bias", "out", "conv_state",
                                      "state_slots")] + [("activation", ctypes.c_int)]


class RmsnormArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("x", "z", "weight", "out")] + [
        ("eps", ctypes.c_float), ("weight_offset", ctypes.c_int32),
        ("norm_before_gate", ctypes.c_int32)]


class DeltaRuleArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "g", "beta", "out", "state", "state_slots",
                                      "has_initial_state", "cu_seqlens")] + [
        ("scale", ctypes.c_float), ("state_layout", ctypes.c_int), ("gva", ctypes.c_int),
        ("algorithm", ctypes.c_int), ("chunk_size", ctypes.c_int32),
        ("qk_l2norm", ctypes.c_int32), ("gate_in_kernel", ctypes.c_int32),
        ("gating", GatingParams)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("num_threads", ctypes.c_int32),
                ("cuda_device", ctypes.c_int32), ("cuda_stream", ctypes.c_void_p),
                ("cpu_isa", ctypes.c_int)]


def _candidates():
    env = os.environ.get("GDN_LIBRARY")
    if env:
        return [env]  # an explicit choice is not second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.startswith("libgdn.so")]
    system = ctypes.util.find_library("gdn")
    return found + ([system] if system else []) + ["libgdn.so"]


def _load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("gdn: cannot load libgdn (set GDN_LIBRARY, put libgdn.so beside the "
                          "package, or install it on the library path): " + "; ".join(errors))
    sig = [
        ("gdn_version_string", ctypes.c_char_p, []),
        ("gdn_strerror", ctypes.c_char_p, [ctypes.c_int]),
        ("gdn_last_error", ctypes.c_char_p, [ctypes.c_void_p]),
        ("gdn_context_default_options", ContextOptions, []),
        ("gdn_context_create", ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ContextOptions)]),
        ("gdn_context_destroy", None, [ctypes.c_void_p]),
        ("gdn_context_set_stream", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        ("gdn_backend_available", ctypes.c_int, [ctypes.c_int]),
        ("gdn_conv1d_default_args", Conv1dArgs, []),
        ("gdn_conv1d", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Conv1dArgs)]),
        ("gdn_conv1d_update_default_args", Conv1dUpdateArgs, []),
        ("gdn_conv1d_update", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Conv1dUpdateArgs)]),
        ("gdn_gating_default_params", GatingParams, []),
        ("gdn_gating", ctypes.c_int, [ctypes.c_void_p] + [ctypes.POINTER(Tensor)] * 2 +
         [ctypes.POINTER(GatingParams)] + [ctypes.POINTER(Tensor)] * 2),
        ("gdn_l2norm", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(Tensor),
                                      ctypes.POINTER(Tensor), ctypes.c_float]),
        ("gdn_rmsnorm_default_args", RmsnormArgs, []),
        ("gdn_rmsnorm_gated", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(RmsnormArgs)]),
        ("gdn_delta_rule_default_args", DeltaRuleArgs, []),
        ("gdn_delta_rule", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(DeltaRuleArgs)]),
    ]
    for name, restype, argtypes in sig:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


lib = _load()
_INPUT_ERRORS = {1, 2, 3, 4, 5}  # NULL, DTYPE, SHAPE, STRIDE, VALUE


def check(status, ctx):
    if status != 0:
        msg = lib.gdn_last_error(ctx).decode() or lib.gdn_strerror(status).decode()
        raise (GdnValueError if status in _INPUT_ERRORS else GdnError)(status, msg)


# ---- arrays --------------------------------------------------------------------------------

def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def device_of(x):
    """'cpu' or ('cuda', index) for an array or tensor; None for None."""
    if x is None:
        return None
    if is_torch(x) and x.is_cuda:
        return ("cuda", x.device.index if x.device.index is not None else 0)
    return "cpu"


def numel(x):
    return x.numel() if is_torch(x) else x.size


# Zero-element tensors get their own address here: torch reports NULL for them (NULL is libgdn's
# "absent"), and libgdn treats an output at an input's address as an in-place call, so two empty
# tensors of one call must not share one. Nothing is ever read or written through these.
_NOWHERE_SLOTS = 1024
_nowhere = (ctypes.c_int64 * (2 * _NOWHERE_SLOTS))()  # 16 bytes a slot, 8-byte aligned
_nowhere_turn = itertools.count()


def _address_for_empty():
    return ctypes.addressof(_nowhere) + 16 * (next(_nowhere_turn) % _NOWHERE_SLOTS)


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def describe(x, name):
    """A gdn_tensor for a NumPy array or torch tensor (None: absent). No copy is made."""
    t = Tensor()
    if x is None:
        return t
    if x.ndim > MAX_DIMS or x.ndim < 1:
        raise GdnValueError(3, f"{name}: rank {x.ndim}, expected 1 to {MAX_DIMS}")
    if is_torch(x):
        if x.dtype not in _TORCH_DTYPES:
            raise GdnValueError(2, f"{name}: dtype {x.dtype} is not one libgdn takes "
                                   "(float32, bfloat16, float16; int32/int64/uint8 for indices)")
        t.data, t.dtype = x.data_ptr(), _TORCH_DTYPES[x.dtype]
        strides = x.stride()
    elif isinstance(x, np.ndarray):
        if x.dtype not in _NP_DTYPES:
            raise GdnValueError(2, f"{name}: dtype {x.dtype} is not one libgdn takes "
                                   "(float32, float16; int32/int64/uint8 for indices)")
        if any(s % x.itemsize for s in x.strides):
            raise GdnValueError(4, f"{name}: byte strides {x.strides} are not whole elements")
        t.data, t.dtype = x.ctypes.data, _NP_DTYPES[x.dtype]
        strides = [s // x.itemsize for s in x.strides]
    else:
        raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")
    if numel(x) == 0:  # NumPy gives empty arrays stride 0 everywhere; no element, no layout
        t.data, strides = _address_for_empty(), _contiguous_strides(x.shape)
    t.ndim = x.ndim
    for i, (n, s) in enumerate(zip(x.shape, strides)):
        t.shape[i], t.stride[i] = n, s
    return t


def check_writable(x, name):
    """Refuses an array that libgdn would write but that cannot take it: a read-only NumPy array
    (a read-only memmap would crash the process) or a view that repeats elements (stride 0, as
    np.broadcast_to and torch's expand make), whose rows would overwrite each other. Runs before
    anything is written."""
    if not (is_torch(x) or isinstance(x, np.ndarray)) or numel(x) == 0:
        return  # None, or nothing to write; describe() names a wrong type
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise GdnValueError(5, f"{name} is read-only (writeable=False), expected an array that "
                               "can be written in place")
    strides = x.stride() if is_torch(x) else x.strides
    for d, (n, s) in enumerate(zip(x.shape, strides)):
        if n > 1 and s == 0:
            raise GdnValueError(4, f"{name}.stride[{d}] is 0 with shape[{d}] = {n}: its elements "
                                   "share memory (a broadcast or expanded view), expected an "
                                   "array that can be written in place")


def empty(like, shape, dtype=None):
    """Uninitialised output in `like`'s framework and device; dtype defaults to like's."""
    if is_torch(like):
        return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)
    return np.empty(shape, dtype=dtype or like.dtype)


def zeros(like, shape, dtype=None):
    """Zero-filled output in `like`'s framework and device: for outputs whose rows libgdn may
    skip (padding sequences), which must not come back as stale memory."""
    if is_torch(like):
        return torch.zeros(shape, dtype=dtype or like.dtype, device=like.device)
    return np.zeros(shape, dtype=dtype or like.dtype)


def copy_of(x):
    """A private copy, same framework, device and dtype."""
    return x.clone() if is_torch(x) else np.array(x)


def copy_into(dst, src):
    """dst[...] = src, across frameworks (a NumPy and a torch CPU array may meet in one call)."""
    if is_torch(dst):
        dst.copy_(src if is_torch(src) else torch.from_numpy(np.asarray(src)))
    else:
        np.copyto(dst, src.float().cpu().numpy() if is_torch(src) else src, casting="unsafe")


def float32_of(like):
    return torch.float32 if is_torch(like) else np.float32


def on_device_of(x, like):
    """x (an index array) moved to like's framework/device if it is not there already."""
    if x is None:
        return None
    if is_torch(like):
        if not is_torch(x):
            x = torch.as_tensor(np.asarray(x))
        return x.to(like.device) if x.device != like.device else x
    if is_torch(x):
        return x.cpu().numpy()
    return np.asarray(x)


# ---- contexts ------------------------------------------------------------------------------

class _Counter:
    def __init__(self):
        self.value, self.lock = 0, threading.Lock()

    def add(self, change):
        with self.lock:
            self.value += change


_live = _Counter()  # contexts created and not yet destroyed, all threads


class _ThreadContexts(dict):
    """One thread's contexts by (backend, device). The thread-local that holds it lets go of it
    when the thread ends, and the contexts (each with its cpu worker threads) go with it: short-
    lived threads must not leave thread pools behind."""

    def __init__(self):
        super().__init__()
        self.pid = os.getpid()

    # bound at definition: at interpreter exit the module's globals may already be gone
    def __del__(self, destroy=lib.gdn_context_destroy, live=_live, getpid=os.getpid):
        if getpid() != self.pid:
            return  # inherited through fork: the parent's to destroy
        while self:
            destroy(self.popitem()[1])
            live.add(-1)


_local = threading.local()  # .contexts: a _ThreadContexts, made on a thread's first call


def _forget_contexts_after_fork():
    """A forked child makes contexts of its own on demand and leaves the parent's alone: a CUDA
    context does not survive fork(), and the parent's cpu contexts stay the parent's (libgdn
    would run them in the child, but two processes' bookkeeping of one context is a trap)."""
    _local.contexts = _ThreadContexts()
    _live.__init__()


os.register_at_fork(after_in_child=_forget_contexts_after_fork)


def live_contexts():
    """How many contexts exist now, over all threads (for tests and leak hunts)."""
    return _live.value


def context(backend, device):
    """The calling thread's context for (backend, device), created on its first call and
    destroyed when the thread ends. On CUDA it is pointed at torch's current stream before every
    call."""
    if backend is None:
        backend = "cuda" if isinstance(device, tuple) else "auto"
    if backend not in BACKENDS:
        raise ValueError(f"backend is {backend!r}, expected one of {sorted(BACKENDS)}")
    if (backend == "cuda") != isinstance(device, tuple):
        raise ValueError(f"backend {backend!r} does not match the tensors' device {device!r}: "
                         "the cuda backend takes CUDA tensors, host backends take host memory")
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = _ThreadContexts()
    key = (backend, device)
    ctx = cache.get(key)
    if ctx is None:
        opts = lib.gdn_context_default_options()
        opts.backend = BACKENDS[backend]
        if isinstance(device, tuple):
            opts.cuda_device = device[1]
        ctx = ctypes.c_void_p()
        status = lib.gdn_context_create(ctypes.byref(ctx), ctypes.byref(opts))
        if status != 0:
            raise GdnError(status, lib.gdn_last_error(None).decode())
        cache[key] = ctx
        _live.add(+1)
    if isinstance(device, tuple):
        lib.gdn_context_set_stream(ctx, torch.cuda.current_stream(device[1]).cuda_stream)
    return ctx


def common_device(*xs):
    devs = {device_of(x) for x in xs if x is not None}
    if len(devs) > 1:
        raise ValueError(f"tensors are on different devices: {sorted(map(str, devs))}")
    return devs.pop() if devs else "cpu"
