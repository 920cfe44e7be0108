"""ctypes view of libgdn's C API (include/gdn.h), array adapters and contexts.

This module is the one place that mirrors include/gdn.h: its enum values (status codes, dtypes,
backends, activations, a_form, state layouts, GVA, algorithms) as named constants, and its
structs as ctypes.Structure classes, whose sizes are checked against the loaded library's
gdn_struct_size() at import (ImportError on a mismatch, or for a library too old to say).

Nothing here copies data: NumPy arrays and torch tensors are described to libgdn by pointer,
dtype, shape and element strides. PyTorch is optional and only used when it is importable.
"""
import ctypes
import ctypes.util
import importlib
import importlib.machinery
import importlib.util
import itertools
import os
import struct
import threading
import warnings

import numpy as np

try:  # PyTorch support activates when torch is importable
    import torch
except ImportError:  # pragma: no cover - exercised on machines without torch
    torch = None

# ---- constants: the enums and sentinels of include/gdn.h, mirrored here and only here ---------

# gdn_status
OK = 0
ERR_NULL = 1         # a required pointer, or a required tensor's data, is NULL
ERR_DTYPE = 2        # a tensor's dtype is not one the argument accepts
ERR_SHAPE = 3        # a rank or extent disagrees with the others
ERR_STRIDE = 4       # a stride is not allowed
ERR_VALUE = 5        # an option or index value is out of range
ERR_UNSUPPORTED = 6  # valid request the selected backend does not implement
ERR_BACKEND = 7      # backend not compiled in, or no device for it
ERR_NO_MEMORY = 8
ERR_WORKSPACE = 9
ERR_CUDA = 10
ERR_INTERNAL = 11
ERR_BUSY = 12        # the context is in use by another thread's call

# gdn_dtype
F32, BF16, F16, I32, I64, U8 = 0, 1, 2, 3, 4, 5

# gdn_backend
BACKEND_AUTO, BACKEND_REF, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2, 3
# gdn_cpu_isa
ISA_AUTO, ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_AMX = 0, 1, 2, 3, 4
# gdn_bf16_products
BF16_PRODUCTS_F32, BF16_PRODUCTS_AVX512BF16, BF16_PRODUCTS_AMX = 0, 1, 2
# gdn_activation
ACT_SILU, ACT_NONE = 0, 1
# gdn_a_form
A_LOG, A_NEG_EXP = 0, 1
# gdn_state_layout
STATE_KV, STATE_VK = 0, 1
# gdn_gva
GVA_BLOCK, GVA_TILED = 0, 1
# gdn_algorithm
ALGO_AUTO, ALGO_RECURRENT, ALGO_CHUNKED = 0, 1, 2
# gdn_precision
PRECISION_AUTO, PRECISION_FAST, PRECISION_HIGH = 0, 1, 2

MAX_DIMS = 4                # GDN_MAX_DIMS
SOFTPLUS_THRESHOLD = 20.0   # GDN_SOFTPLUS_THRESHOLD
SCALE_AUTO = 0.0            # gdn_delta_rule_args.scale: 0 = 1/sqrt(K)
CHUNK_SIZE_AUTO = 0         # gdn_delta_rule_args.chunk_size: 0 = backend's choice

# The binding's option strings, by the enum value each one names
BACKENDS = {"auto": BACKEND_AUTO, "ref": BACKEND_REF, "cpu": BACKEND_CPU, "cuda": BACKEND_CUDA}
ALGORITHMS = {"auto": ALGO_AUTO, "recurrent": ALGO_RECURRENT, "chunked": ALGO_CHUNKED}
GVAS = {"block": GVA_BLOCK, "tiled": GVA_TILED}
PRECISIONS = {"auto": PRECISION_AUTO, "fast": PRECISION_FAST, "high": PRECISION_HIGH}
A_FORMS = {"A_log": A_LOG, "neg_exp": A_NEG_EXP}
# argument errors (GdnValueError); every other failing status is a GdnError
_INPUT_ERRORS = frozenset({ERR_NULL, ERR_DTYPE, ERR_SHAPE, ERR_STRIDE, ERR_VALUE})

_NP_DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
              np.dtype(np.int64): I64, np.dtype(np.uint8): U8, np.dtype(np.bool_): U8}
_TORCH_DTYPES = {}
if torch is not None:
    _TORCH_DTYPES = {torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16,
                     torch.int32: I32, torch.int64: I64, torch.uint8: U8, torch.bool: U8}
# isinstance() targets: () matches nothing, so the checks need no "torch is not None" first
TORCH_TENSOR = torch.Tensor if torch is not None else ()
ARRAY_TYPES = (np.ndarray,) + ((torch.Tensor,) if torch is not None else ())


class GdnError(RuntimeError):
    """A libgdn call failed; the message is libgdn's, naming the argument and expected value."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class GdnValueError(GdnError, ValueError):
    """Bad arguments (null, dtype, shape, stride or value errors)."""


# ---- struct mirrors: field for field as in include/gdn.h; enums are C ints ------------------
# check_struct_sizes() compares each with the library's own sizeof at import.

class Tensor(ctypes.Structure):
    """gdn_tensor."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS)]


class GatingParams(ctypes.Structure):
    """gdn_gating_params."""
    _fields_ = [("A", Tensor), ("dt_bias", Tensor), ("a_form", ctypes.c_int),
                ("softplus_threshold", ctypes.c_float), ("allow_neg_eigval", ctypes.c_int32)]


class Conv1dArgs(ctypes.Structure):
    """gdn_conv1d_args."""
    _fields_ = [(n, Tensor) for n in ("x", "weight", "bias", "out", "conv_state", "state_slots",
                                      "has_initial_state", "cu_seqlens")] + [
        ("activation", ctypes.c_int)]


class Conv1dUpdateArgs(ctypes.Structure):
    """gdn_conv1d_update_args."""
    _fields_ = [(n, Tensor) for n in ("x", "weight", "bias", "out", "conv_state",
                                      "state_slots")] + [("activation", ctypes.c_int)]


class RmsnormArgs(ctypes.Structure):
    """gdn_rmsnorm_args."""
    _fields_ = [(n, Tensor) for n in ("x", "z", "weight", "out")] + [
        ("eps", ctypes.c_float), ("weight_offset", ctypes.c_int32),
        ("norm_before_gate", ctypes.c_int32)]


class DeltaRuleArgs(ctypes.Structure):
    """gdn_delta_rule_args."""
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "g", "beta", "out", "state", "state_slots",
                                      "has_initial_state", "cu_seqlens")] + [
        ("scale", ctypes.c_float), ("state_layout", ctypes.c_int), ("gva", ctypes.c_int),
        ("algorithm", ctypes.c_int), ("chunk_size", ctypes.c_int32),
        ("qk_l2norm", ctypes.c_int32), ("gate_in_kernel", ctypes.c_int32),
        ("gating", GatingParams), ("precision", ctypes.c_int)]


class ContextOptions(ctypes.Structure):
    """gdn_context_options."""
    _fields_ = [("backend", ctypes.c_int), ("num_threads", ctypes.c_int32),
                ("cuda_device", ctypes.c_int32), ("cuda_stream", ctypes.c_void_p),
                ("cpu_isa", ctypes.c_int)]


# C struct name -> its ctypes mirror: every struct of gdn.h that crosses the boundary by value
STRUCT_MIRRORS = {"gdn_tensor": Tensor, "gdn_context_options": ContextOptions,
                  "gdn_conv1d_args": Conv1dArgs, "gdn_conv1d_update_args": Conv1dUpdateArgs,
                  "gdn_gating_params": GatingParams, "gdn_rmsnorm_args": RmsnormArgs,
                  "gdn_delta_rule_args": DeltaRuleArgs}


def _library_name(lib):
    return getattr(lib, "_name", None) or repr(lib)


def check_struct_sizes(lib, mirrors=None):
    """Raises ImportError unless every ctypes mirror (mirrors: {C name: ctypes.Structure},
    default STRUCT_MIRRORS) has the size gdn_struct_size() of `lib` reports for its C struct: a
    mirror out of step with the header would misread memory silently. A library without
    gdn_struct_size is too old for this binding (ImportError too)."""
    try:
        struct_size = lib.gdn_struct_size
    except AttributeError:
        raise ImportError(f"gdn: libgdn at {_library_name(lib)} is too old for this binding: it "
                          "does not export gdn_struct_size(), which the binding needs to check "
                          "its struct mirrors; rebuild libgdn or point GDN_LIBRARY at a newer "
                          "one") from None
    struct_size.restype, struct_size.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
    for name, mirror in (STRUCT_MIRRORS if mirrors is None else mirrors).items():
        theirs, ours = struct_size(name.encode()), ctypes.sizeof(mirror)
        if theirs != ours:
            known = "" if theirs else f" (0: libgdn does not know a struct named {name})"
            raise ImportError(f"gdn: struct {name} is {theirs} bytes in libgdn at "
                              f"{_library_name(lib)}{known} but its ctypes mirror "
                              f"{mirror.__name__} is {ours} bytes: the binding and the library "
                              "come from different versions of include/gdn.h")


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
        ("gdn_backend_name", ctypes.c_char_p, [ctypes.c_int]),
        ("gdn_dtype_name", ctypes.c_char_p, [ctypes.c_int]),
        ("gdn_dtype_size", ctypes.c_size_t, [ctypes.c_int]),
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
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"gdn: {path} does not export {name}(): not libgdn, or a libgdn "
                              "too old for this binding") from None
        fn.restype, fn.argtypes = restype, argtypes
    return lib


lib = _load()
check_struct_sizes(lib)


def check(status, ctx):
    """Raises GdnValueError (argument errors) or GdnError for a failing status of a call on ctx,
    with libgdn's message."""
    if status != OK:
        msg = lib.gdn_last_error(ctx).decode() or lib.gdn_strerror(status).decode()
        raise (GdnValueError if status in _INPUT_ERRORS else GdnError)(status, msg)


# ---- arrays --------------------------------------------------------------------------------

def is_torch(x):
    return isinstance(x, TORCH_TENSOR)


def device_of(x):
    """'cpu' or ('cuda', index) for an array or tensor; None for None."""
    if x is None:
        return None
    if isinstance(x, TORCH_TENSOR) and x.is_cuda:
        index = x.device.index
        return ("cuda", index if index is not None else 0)
    return "cpu"


def numel(x):
    return x.numel() if isinstance(x, TORCH_TENSOR) else x.size


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


# gdn_tensor field for field (native alignment, as the C compiler lays it out): describe() packs
# one in a single call; its size is checked against the ctypes mirror below
_TENSOR_LAYOUT = struct.Struct(f"@Pii{MAX_DIMS}q{MAX_DIMS}q")
_NO_DIMS = (0,) * MAX_DIMS
_pack_tensor = _TENSOR_LAYOUT.pack
_tensor_from_bytes = Tensor.from_buffer_copy
if _TENSOR_LAYOUT.size != ctypes.sizeof(Tensor):  # pragma: no cover - a platform's ABI quirk
    raise ImportError(f"gdn: gdn_tensor packs to {_TENSOR_LAYOUT.size} bytes, its ctypes mirror "
                      f"is {ctypes.sizeof(Tensor)}")


def describe(x, name):
    """A gdn_tensor for a NumPy array or torch tensor (None: absent). No copy is made."""
    if x is None:
        return Tensor()
    ndim = x.ndim
    if ndim > MAX_DIMS or ndim < 1:
        raise GdnValueError(ERR_SHAPE, f"{name}: rank {ndim}, expected 1 to {MAX_DIMS}")
    if isinstance(x, TORCH_TENSOR):
        code = _TORCH_DTYPES.get(x.dtype)
        if code is None:
            raise GdnValueError(ERR_DTYPE, f"{name}: dtype {x.dtype} is not one libgdn takes "
                                           "(float32, bfloat16, float16; int32/int64/uint8 for "
                                           "indices)")
        data, strides, empty = x.data_ptr(), x.stride(), x.numel() == 0
    elif isinstance(x, np.ndarray):
        code = _NP_DTYPES.get(x.dtype)
        if code is None:
            raise GdnValueError(ERR_DTYPE, f"{name}: dtype {x.dtype} is not one libgdn takes "
                                           "(float32, float16; int32/int64/uint8 for indices)")
        size, strides = x.itemsize, x.strides
        if any(s % size for s in strides):
            raise GdnValueError(ERR_STRIDE,
                                f"{name}: byte strides {x.strides} are not whole elements")
        data, strides, empty = x.ctypes.data, [s // size for s in strides], x.size == 0
    else:
        raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")
    if empty:  # NumPy gives empty arrays stride 0 everywhere; no element, no layout
        data, strides = _address_for_empty(), _contiguous_strides(x.shape)
    pad = _NO_DIMS[ndim:]
    return _tensor_from_bytes(_pack_tensor(data, code, ndim, *x.shape, *pad, *strides, *pad))


def check_writable(x, name):
    """Refuses an array that libgdn would write but that cannot take it: a read-only NumPy array
    (a read-only memmap would crash the process) or a view that repeats elements (stride 0, as
    np.broadcast_to and torch's expand make), whose rows would overwrite each other. Runs before
    anything is written."""
    if not isinstance(x, ARRAY_TYPES) or numel(x) == 0:
        return  # None, or nothing to write; describe() names a wrong type
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise GdnValueError(ERR_VALUE, f"{name} is read-only (writeable=False), expected an "
                                       "array that can be written in place")
    strides = x.stride() if isinstance(x, TORCH_TENSOR) else x.strides
    if 0 not in strides:
        return
    for d, (n, s) in enumerate(zip(x.shape, strides)):
        if n > 1 and s == 0:
            raise GdnValueError(ERR_STRIDE, f"{name}.stride[{d}] is 0 with shape[{d}] = {n}: its "
                                            "elements share memory (a broadcast or expanded "
                                            "view), expected an array that can be written in "
                                            "place")


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


def eager_only(out, fn):
    """out= while torch.compile traces: refused (the ops allocate their outputs)."""
    if out is not None:
        raise ValueError(f"{fn}: out= is for eager calls; under torch.compile the op "
                         "allocates its output")


def copy_of(x):
    """A private copy, same framework, device and dtype, with no autograd history."""
    return x.detach().clone() if is_torch(x) else np.array(x)


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
        self.streams = {}  # the stream each CUDA context was last pointed at

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
        if status != OK:
            raise GdnError(status, lib.gdn_last_error(None).decode())
        cache[key] = ctx
        _live.add(+1)
    if isinstance(device, tuple):  # a ctypes call only when torch's current stream changed
        stream = _current_stream(device[1])
        if cache.streams.get(key) != stream:
            lib.gdn_context_set_stream(ctx, stream)
            cache.streams[key] = stream
    return ctx


def _current_stream_of_torch(index):
    return torch.cuda.current_stream(index).cuda_stream


# torch's current CUDA stream (a cudaStream_t as an int) for a device index: through the raw
# getter torch's own compiled code uses (no Stream object per call) when this torch has it
_current_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None) or \
    _current_stream_of_torch


def common_device(*xs):
    found = None
    for x in xs:
        if x is None:
            continue
        dev = device_of(x)
        if found is None:
            found = dev
        elif dev != found:
            devs = {device_of(x) for x in xs if x is not None}
            raise ValueError(f"tensors are on different devices: {sorted(map(str, devs))}")
    return "cpu" if found is None else found


# ---- the optional native fast path (gdn._fast, built from _fastcall.c) ------------------------

FAST_BINDING_VERSION = 3  # _fastcall.c's BINDING_VERSION: the calls' arguments as made here


def _fast_choice():
    """GDN_FASTCALL: unset, "" or "auto": use gdn._fast when it imports; "0" (off, no, false):
    never (the pure-Python path runs); "1" (on, yes, true): gdn._fast must import; anything
    else: the path of a built _fast extension file to load (for source trees and tests)."""
    choice = os.environ.get("GDN_FASTCALL", "").strip()
    lowered = choice.lower()
    if lowered in ("", "auto"):
        return "auto"
    if lowered in ("0", "off", "no", "false"):
        return "off"
    if lowered in ("1", "on", "yes", "true"):
        return "on"
    return choice


def _import_fast(choice):
    if choice in ("auto", "on"):
        return importlib.import_module(__package__ + "._fast")
    loader = importlib.machinery.ExtensionFileLoader(__package__ + "._fast", choice)
    spec = importlib.util.spec_from_file_location(__package__ + "._fast", choice, loader=loader)
    if spec is None:
        raise ImportError(f"not an extension module file: {choice}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _load_fast():
    """gdn._fast set up for `lib`, or None: GDN_FASTCALL says whether to try (_fast_choice);
    where it is only allowed (auto), an extension that does not import, or that was compiled
    from a gdn.h whose structs differ from the loaded library's, is passed over (with a warning
    for the latter) and the pure-Python path runs; where it is asked for, those are ImportErrors.
    """
    choice = _fast_choice()
    if choice == "off":
        return None
    try:
        fast = _import_fast(choice)
    except ImportError as e:
        if choice == "auto":
            return None
        raise ImportError(f"gdn: GDN_FASTCALL={os.environ.get('GDN_FASTCALL')} asks for the "
                          f"native fast path, which does not import: {e}") from e
    message = None
    if getattr(fast, "BINDING_VERSION", None) != FAST_BINDING_VERSION:
        message = (f"gdn: the native fast path ({getattr(fast, '__file__', '?')}) is from "
                   f"another version of the binding (BINDING_VERSION "
                   f"{getattr(fast, 'BINDING_VERSION', None)}, expected {FAST_BINDING_VERSION}); "
                   "rebuild it")
    else:
        wrong = {name: (size, lib.gdn_struct_size(name.encode()))
                 for name, size in fast.struct_sizes().items()
                 if size != lib.gdn_struct_size(name.encode())}
        if wrong:
            message = (f"gdn: the native fast path ({getattr(fast, '__file__', '?')}) was "
                       f"compiled from another gdn.h than libgdn at {_library_name(lib)} "
                       f"(struct: (its size, the library's): {wrong}); rebuild it")
    if message:
        if choice != "auto":
            raise ImportError(message)
        warnings.warn(message + "; the pure-Python path runs", RuntimeWarning, stacklevel=2)
        return None

    def address(fn):
        return ctypes.cast(fn, ctypes.c_void_p).value

    fast.setup(delta_rule=address(lib.gdn_delta_rule),
               delta_rule_default_args=address(lib.gdn_delta_rule_default_args),
               gating_default_params=address(lib.gdn_gating_default_params),
               conv1d_update=address(lib.gdn_conv1d_update),
               conv1d_update_default_args=address(lib.gdn_conv1d_update_default_args),
               ndarray=np.ndarray, zeros=np.zeros, empty=np.empty, context=context, check=check,
               tensor=torch.Tensor if torch is not None else None,
               torch_dtypes=tuple(_TORCH_DTYPES.items()))
    return fast


fast = _load_fast()
"""gdn._fast, the native fast path (_fastcall.c), or None: the pure-Python path runs. The ops
try it first and run their Python path when it declines a call (it returns NotImplemented); a
test may set it to None to compare the two."""
