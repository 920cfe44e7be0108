"""libgdn's CUDA decode against FLA's fused_recurrent_gated_delta_rule on the same inputs.

Decode: B sequences of one token, H=16, HV=32, K=V=128, bf16 q/k/v, f32 g/beta, f32 state, q/k
L2 norm in the kernel. Both are checked against a float64 evaluation of the recurrence, and timed
the same way: 20 calls captured in one CUDA graph, each on a different state buffer (the states
span >= 256 MiB so that L2 never holds them), replayed and timed with events (median of 5).
FLA's code must sit in .fla/fla (fetched, never committed). Writes JSON to argv[1] if given.
"""
import json
import math
import os
import sys
import types

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import gdn  # noqa: E402  (the package in python/, libgdn from GDN_LIBRARY)

H, HV, K, V = 16, 32, 128, 128


def import_fla_op(module, name):
    """FLA's op `name` from `module`, importing only fla.ops (not fla/__init__.py's models).
    FLA is pinned to its own Triton kernels: without FLA_FLASH_QLA=0 and
    FLA_DISABLE_BACKEND_DISPATCH=1 it hands chunk_gated_delta_rule to FlashQLA (TileLang)
    wherever that package imports, and "vs_fla" would time FlashQLA."""
    import importlib
    os.environ.setdefault("FLA_FLASH_QLA", "0")
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    root = os.path.abspath(".fla/fla")
    if "fla" not in sys.modules:
        pkg = types.ModuleType("fla")
        pkg.__path__, pkg.__version__ = [root], "0"
        sys.modules["fla"] = pkg
        ops = types.ModuleType("fla.ops")
        ops.__path__ = [os.path.join(root, "ops")]
        sys.modules["fla.ops"] = ops
    return getattr(importlib.import_module(module), name)


def reference(q, k, v, gg, beta, h0):
    """float64 decode step: decay, delta write, read (SPEC section 1), q/k L2-normalised."""
    q, k, v = (x.double()[:, 0] for x in (q, k, v))
    r = HV // H
    q = torch.nn.functional.normalize(q, dim=-1, eps=0).repeat_interleave(r, dim=1)
    k = torch.nn.functional.normalize(k, dim=-1, eps=0).repeat_interleave(r, dim=1)
    S = h0.double() * gg.double()[:, 0, :, None, None].exp()
    u = beta.double()[:, 0, :, None] * (v - torch.einsum("bhk,bhkv->bhv", k, S))
    S = S + k[..., None] * u[..., None, :]
    o = torch.einsum("bhk,bhkv->bhv", q, S) / math.sqrt(K)
    return o[:, None], S


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def graph_time_us(fn, n_calls=20):
    """Device microseconds per call: fn(i) for i < n_calls captured in one graph, replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n_calls):
            fn(i)
    times = []
    for _ in range(6):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n_calls)
    return sorted(times[1:])[2]


def main():
    torch.manual_seed(0)
    dev = "cuda"
    fla = import_fla_op("fla.ops.gated_delta_rule.fused_recurrent",
                        "fused_recurrent_gated_delta_rule")
    rows = []
    for B in (1, 16, 64, 256):
        q = torch.randn(B, 1, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, 1, H, K, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, 1, HV, V, device=dev, dtype=torch.bfloat16)
        gg = -0.5 * torch.rand(B, 1, HV, device=dev)
        beta = torch.rand(B, 1, HV, device=dev)
        per_call = B * HV * K * V * 4
        R = max(2, -(-(256 << 20) // per_call))
        h0s = [0.1 * torch.randn(B, HV, K, V, device=dev) for _ in range(R)]
        pools = [h.clone() for h in h0s]

        o_ref, s_ref = reference(q, k, v, gg, beta, h0s[0])
        o_fla, s_fla = fla(q, k, v, g=gg, beta=beta, initial_state=h0s[0], output_final_state=True,
                           use_qk_l2norm_in_kernel=True)
        out, _ = gdn.fused_recurrent_gated_delta_rule(q, k, v, gg, beta, state_pool=pools[0],
                                                      use_qk_l2norm_in_kernel=True)
        torch.cuda.synchronize()
        errs = {"gdn_vs_ref": rel(out, o_ref), "fla_vs_ref": rel(o_fla, o_ref),
                "gdn_vs_fla": rel(out, o_fla), "gdn_state_vs_ref": rel(pools[0], s_ref),
                "fla_state_vs_ref": rel(s_fla, s_ref)}

        def run_fla(i):
            fla(q, k, v, g=gg, beta=beta, initial_state=h0s[i % R], output_final_state=True,
                use_qk_l2norm_in_kernel=True)

        def run_gdn(i):
            gdn.fused_recurrent_gated_delta_rule(q, k, v, gg, beta, state_pool=pools[i % R],
                                                 use_qk_l2norm_in_kernel=True)

        t_fla, t_gdn = graph_time_us(run_fla), graph_time_us(run_gdn)
        # eager: one call after another from Python, as triton.testing.do_bench times it (this
        # includes each side's host overhead: FLA's wrapper and Triton launch, gdn's ctypes path)
        e_fla = do_bench(lambda: run_fla(0), warmup=25, rep=200, return_mode="median") * 1e3
        e_gdn = do_bench(lambda: run_gdn(0), warmup=25, rep=200, return_mode="median") * 1e3
        row = {"op": "decode", "B": B, "H": H, "HV": HV, "K": K, "V": V, "dtype": "bf16",
               "gdn_us": t_gdn, "fla_us": t_fla, "vs_fla": t_fla / t_gdn,
               "gdn_eager_us": e_gdn, "fla_eager_us": e_fla, "vs_fla_eager": e_fla / e_gdn,
               "state_gb_s": 2 * per_call / (t_gdn * 1e3), **errs,
               "device": torch.cuda.get_device_name()}
        rows.append(row)
        del h0s, pools
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)
    print(f"libgdn vs FLA fused_recurrent_gated_delta_rule, decode, {rows[0]['device']}")
    print("graph: device us per call in a CUDA graph; eager: do_bench median of calls from Python")
    print(f"{'B':>5} {'gdn us':>8} {'fla us':>8} {'vs_fla':>7} {'gdn eag':>8} {'fla eag':>8} "
          f"{'vs_fla':>7} {'gdn err':>9} {'fla err':>9} {'gdn~fla':>9}")
    for r in rows:
        print(f"{r['B']:>5} {r['gdn_us']:>8.2f} {r['fla_us']:>8.2f} {r['vs_fla']:>7.2f} "
              f"{r['gdn_eager_us']:>8.2f} {r['fla_eager_us']:>8.2f} {r['vs_fla_eager']:>7.2f} "
              f"{r['gdn_vs_ref']:>9.2e} {r['fla_vs_ref']:>9.2e} {r['gdn_vs_fla']:>9.2e}")


if __name__ == "__main__":
    main()
