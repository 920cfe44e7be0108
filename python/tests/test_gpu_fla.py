"""gdn on CUDA torch tensors against FLA's Triton kernels on the same inputs.

Skipped without torch, without a CUDA device, or without FLA's code: FLA is never part of this
repository; point GDN_FLA_PATH at a checkout's fla/ package (default: .fla/fla in the repo root,
an ignored folder).
"""
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import gdn  # noqa: E402
from gdn._lib import BACKENDS, lib as _libgdn  # noqa: E402

if not _libgdn.gdn_backend_available(BACKENDS["cuda"]):  # a CPU-only build on a GPU machine
    pytest.skip("this libgdn has no usable CUDA backend", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _import_fla():
    path = os.environ.get("GDN_FLA_PATH", os.path.join(ROOT, ".fla", "fla"))
    if not os.path.isdir(path):
        return None
    # FLA's own Triton kernels, not a backend it would dispatch to (FlashQLA where it imports)
    os.environ.setdefault("FLA_FLASH_QLA", "0")
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    pkg = types.ModuleType("fla")  # skip fla/__init__.py (models, layers): only ops are needed
    pkg.__path__, pkg.__version__ = [path], "0"
    sys.modules.setdefault("fla", pkg)
    ops = types.ModuleType("fla.ops")
    ops.__path__ = [os.path.join(path, "ops")]
    sys.modules.setdefault("fla.ops", ops)
    from fla.ops.gated_delta_rule.chunk import chunk_gated_delta_rule
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule
    return types.SimpleNamespace(chunk=chunk_gated_delta_rule,
                                 recurrent=fused_recurrent_gated_delta_rule)


fla = _import_fla()
needs_fla = pytest.mark.skipif(fla is None, reason="FLA's code not found (GDN_FLA_PATH)")


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def inputs(B, T, H, HV, K, V, seed, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    q, k = r(B, T, H, K).to(dtype), r(B, T, H, K).to(dtype)
    v = r(B, T, HV, V).to(dtype)
    gate = -0.5 * torch.rand(B, T, HV, device="cuda", generator=g)
    beta = torch.rand(B, T, HV, device="cuda", generator=g)
    h0 = 0.1 * r(B, HV, K, V)
    return q, k, v, gate, beta, h0


@needs_fla
@pytest.mark.parametrize("T", [1, 7])
def test_fused_recurrent_matches_fla(T):
    q, k, v, g, beta, h0 = inputs(3, T, 4, 8, 128, 64, seed=T)
    o, s = gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                output_final_state=True,
                                                use_qk_l2norm_in_kernel=True)
    o_f, s_f = fla.recurrent(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True)
    assert o.dtype == v.dtype and o.is_cuda
    assert rel(o, o_f) < 5e-3 and rel(s, s_f) < 5e-3


@needs_fla
def test_gate_in_kernel_matches_fla():
    q, k, v, a, b, h0 = inputs(2, 5, 2, 4, 64, 64, seed=3)
    A_log = torch.rand(4, device="cuda") * 2
    dt_bias = torch.randn(4, device="cuda") * 0.3
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
              use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
              use_beta_sigmoid_in_kernel=True)
    o, s = gdn.fused_recurrent_gated_delta_rule(q, k, v, a, b, **kw)
    o_f, s_f = fla.recurrent(q, k, v, g=a, beta=b, **kw)
    assert rel(o, o_f) < 5e-3 and rel(s, s_f) < 5e-3


@needs_fla
def test_chunk_prefill_matches_fla_varlen():
    """Ours against float64 at the bf16 bar (5e-3), and against FLA at the sum of two such bars:
    FLA also rounds its normalised q, k and its W, U operands to bf16 (the two sit ~5.2e-3 apart
    at the benchmark's shapes); a convention mismatch (decay sign, state layout, varlen offsets)
    shows as O(1)."""
    lens = [1, 130, 77, 64]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int64)
    T = int(cu[-1])
    q, k, v, g, beta, _ = inputs(1, T, 2, 4, 128, 128, seed=5)
    h0 = 0.1 * torch.randn(len(lens), 4, 128, 128, device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(6))
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
              cu_seqlens=cu)
    o, s = gdn.chunk_gated_delta_rule(q, k, v, g, beta, **kw)
    o_f, s_f = fla.chunk(q, k, v, g, beta, **kw)
    o_r, s_r = gdn.chunk_gated_delta_rule(
        *(x.cpu() for x in (q, k, v, g, beta)), initial_state=h0.cpu(), output_final_state=True,
        use_qk_l2norm_in_kernel=True, cu_seqlens=cu.cpu(), backend="ref")
    assert rel(o.cpu(), o_r) < 5e-3 and rel(s.cpu(), s_r) < 5e-3
    assert rel(o, o_f) < 1e-2 and rel(s, s_f) < 1e-2


def test_fused_projection_views_are_zero_copy_and_exact():
    B, T, H, HV, K, V = 2, 3, 2, 4, 64, 32
    proj = torch.randn(B, T, 2 * H * K + HV * V, device="cuda", dtype=torch.bfloat16)
    q = proj[..., : H * K].view(B, T, H, K)
    k = proj[..., H * K: 2 * H * K].view(B, T, H, K)
    v = proj[..., 2 * H * K:].view(B, T, HV, V)
    g = -0.3 * torch.rand(B, T, HV, device="cuda")
    beta = torch.rand(B, T, HV, device="cuda")
    o_view, _ = gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta,
                                                     use_qk_l2norm_in_kernel=True)
    o_copy, _ = gdn.fused_recurrent_gated_delta_rule(q.contiguous(), k.contiguous(),
                                                     v.contiguous(), g, beta,
                                                     use_qk_l2norm_in_kernel=True)
    assert torch.equal(o_view, o_copy)


def test_runs_on_the_current_stream_and_matches_the_host_backend():
    q, k, v, g, beta, h0 = inputs(2, 4, 2, 2, 32, 32, seed=9, dtype=torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o, s = gdn.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                    output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
    side.synchronize()
    o_h, s_h = gdn.fused_recurrent_gated_delta_rule(
        *(x.cpu() for x in (q, k, v, g, beta)), initial_state=h0.cpu(), output_final_state=True,
        use_qk_l2norm_in_kernel=True, backend="ref")
    assert rel(o.cpu(), o_h) < 1e-5 and rel(s.cpu(), s_h) < 1e-5


def test_conv_and_norms_on_cuda_match_the_host_backend():
    x = torch.randn(2, 40, 9, device="cuda")
    w = torch.randn(40, 4, device="cuda") * 0.5
    y, st = gdn.causal_conv1d_fn(x, w, activation="silu", return_final_states=True)
    y_h, st_h = gdn.causal_conv1d_fn(x.cpu(), w.cpu(), activation="silu",
                                     return_final_states=True, backend="ref")
    assert rel(y.cpu(), y_h) < 1e-5 and rel(st.cpu(), st_h) < 1e-5
    o, z, wn = torch.randn(5, 4, 64, device="cuda"), torch.randn(5, 4, 64, device="cuda"), \
        torch.rand(64, device="cuda")
    n = gdn.rms_norm_gated(o, z, wn)
    n_h = gdn.rms_norm_gated(o.cpu(), z.cpu(), wn.cpu(), backend="ref")
    assert rel(n.cpu(), n_h) < 1e-5


def test_errors_carry_libgdn_messages():
    q, k, v, g, beta, _ = inputs(1, 2, 2, 4, 32, 32, seed=1)
    with pytest.raises(gdn.GdnValueError, match="k.shape"):
        gdn.fused_recurrent_gated_delta_rule(q, k[:, :, :1], v, g, beta)
