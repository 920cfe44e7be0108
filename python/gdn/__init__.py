"""gdn: Gated DeltaNet kernels from libgdn, for NumPy arrays and PyTorch tensors.

Drop-in functions with FLA's and causal-conv1d's names and arguments:
    chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, fused_gdn_gating,
    causal_conv1d_fn, causal_conv1d_update, rms_norm_gated (and l2norm).
libgdn is loaded from $GDN_LIBRARY, else from beside this package, else from the library path;
import raises ImportError if its structs differ in size from the binding's ctypes mirrors, or
if it is too old to report them (gdn_struct_size).
"""
from ._lib import GdnError, GdnValueError
from ._lib import lib as _libgdn
from .ops import (causal_conv1d_fn, causal_conv1d_update, chunk_gated_delta_rule,
                  fused_gdn_gating, fused_recurrent_gated_delta_rule, l2norm, rms_norm_gated)

__version__ = "0.1.0"
libgdn_version = _libgdn.gdn_version_string().decode()

__all__ = ["GdnError", "GdnValueError", "causal_conv1d_fn", "causal_conv1d_update",
           "chunk_gated_delta_rule", "fused_gdn_gating", "fused_recurrent_gated_delta_rule",
           "l2norm", "rms_norm_gated", "libgdn_version"]
