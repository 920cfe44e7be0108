"""Minimal ctypes view of libgdn's C API for the benchmark scripts (torch tensors in, no copies).

This is bench-only glue: the Python package (python/gdn) is the supported binding.
"""
import ctypes
import os

import torch

F32, BF16, F16, I32, I64, U8 = range(6)
BACKEND_REF, BACKEND_CPU, BACKEND_CUDA = 1, 2, 3
ALGO_AUTO, ALGO_RECURRENT, ALGO_CHUNKED = 0, 1, 2
_DTYPES = {torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16,
           torch.int32: I32, torch.int64: I64, torch.uint8: U8, torch.bool: U8}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class Gating(ctypes.Structure):
    _fields_ = [("A", Tensor), ("dt_bias", Tensor), ("a_form", ctypes.c_int),
                ("softplus_threshold", ctypes.c_float), ("allow_neg_eigval", ctypes.c_int32)]


class DeltaRuleArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "g", "beta", "out", "state", "state_slots",
                                      "has_initial_state", "cu_seqlens")] + [
        ("scale", ctypes.c_float), ("state_layout", ctypes.c_int), ("gva", ctypes.c_int),
        ("algorithm", ctypes.c_int), ("chunk_size", ctypes.c_int32),
        ("qk_l2norm", ctypes.c_int32), ("gate_in_kernel", ctypes.c_int32), ("gating", Gating)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("num_threads", ctypes.c_int32),
                ("cuda_device", ctypes.c_int32), ("cuda_stream", ctypes.c_void_p),
                ("cpu_isa", ctypes.c_int)]


def load(path=None):
    lib = ctypes.CDLL(path or os.environ.get("GDN_LIBRARY", "build/libgdn.so"))
    lib.gdn_context_default_options.restype = ContextOptions
    lib.gdn_context_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ContextOptions)]
    lib.gdn_last_error.restype = ctypes.c_char_p
    lib.gdn_last_error.argtypes = [ctypes.c_void_p]
    lib.gdn_context_set_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.gdn_delta_rule_default_args.restype = DeltaRuleArgs
    lib.gdn_delta_rule.argtypes = [ctypes.c_void_p, ctypes.POINTER(DeltaRuleArgs)]
    return lib


def tensor(t):
    """A gdn_tensor describing torch tensor t (None: absent)."""
    d = Tensor()
    if t is None:
        return d
    d.data = t.data_ptr()
    d.dtype = _DTYPES[t.dtype]
    d.ndim = t.dim()
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        d.shape[i], d.stride[i] = n, s
    return d


class Context:
    def __init__(self, lib, backend=BACKEND_CUDA):
        self.lib = lib
        o = lib.gdn_context_default_options()
        o.backend = backend
        self.ptr = ctypes.c_void_p()
        if lib.gdn_context_create(ctypes.byref(self.ptr), ctypes.byref(o)) != 0:
            raise RuntimeError(lib.gdn_last_error(None).decode())

    def delta_rule(self, **kw):
        a = self.lib.gdn_delta_rule_default_args()
        for name, value in kw.items():
            setattr(a, name, tensor(value) if (value is None or torch.is_tensor(value)) else value)
        self.lib.gdn_context_set_stream(self.ptr, torch.cuda.current_stream().cuda_stream)
        if self.lib.gdn_delta_rule(self.ptr, ctypes.byref(a)) != 0:
            raise RuntimeError(self.lib.gdn_last_error(self.ptr).decode())
