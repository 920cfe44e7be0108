"""libgdn's CUDA chunked prefill against FLA's chunk_gated_delta_rule on the same inputs.

Rows: the tensor-core prefill issue's table. B=1, K=V=128, bf16 q/k/v, f32 g and beta, an f32
initial state and the f32 final state returned, q/k L2 norm in the kernel. Both sides get the
same tensors; outputs and final states are compared with each other (libgdn's accuracy against
float64 is tested in tests/test_cuda.c). Times: triton.testing.do_bench medians (device time
between events around each call, including each side's Python launch path), same process; each
side timed in ROUNDS rounds alternating with the other, its best median kept, after both ran for
about WARM_S seconds (FLA's first row used to read up to 2x its later figures: clocks and
Triton's first launches, not the kernels). Then again as device time alone: a few calls captured
in one CUDA graph and replayed (graph_ms, vs_fla_graph), which leaves out each side's Python and
launch path: FLA launches eight kernels a call (two of them torch fills), and on a slow host its
eager time is the host's (8192/32 on an H100: 0.87 ms eager against 0.57 ms of kernels).
FLA's code must sit in .fla/fla (fetched, never committed). Writes JSON to argv[1] if given.
"""
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import gdn  # noqa: E402  (the package in python/, libgdn from GDN_LIBRARY)
from fla_decode import graph_time_us, import_fla_op, rel  # noqa: E402

K = V = 128
ROWS = [(8192, 16, 32), (32768, 16, 32), (32768, 4, 8), (32768, 2, 4), (131072, 2, 4)]
ROUNDS = 3
WARM_S = 2.0
GRAPH_CALLS = 4


def flops(T, HV):
    """The chunked form's multiply-adds per 64-token chunk and head, 2 flops each."""
    C, chunks = 64, -(-T // 64) * HV
    return 2.0 * chunks * (C * C * (3 * K + 2 * V) + 3 * C * K * V)


def make_inputs(T, H, HV, dev="cuda"):
    """q, k, v (bf16), g (log-decay), beta, h0 (f32) for one sequence of T tokens."""
    q = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, T, HV, V, device=dev, dtype=torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, device=dev) + 3.0)
    beta = torch.rand(1, T, HV, device=dev)
    h0 = 0.1 * torch.randn(1, HV, K, V, device=dev)
    return q, k, v, g, beta, h0


def warm_up(*fns, seconds):
    """Calls fns in turn, waiting for each round, until about `seconds` have passed."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for fn in fns:
            fn()
        torch.cuda.synchronize()


def graph_ms(fn, who):
    """Device ms per call of fn in a CUDA graph (graph_time_us), or nan where it cannot be
    captured."""
    try:
        return graph_time_us(lambda i: fn(), n_calls=GRAPH_CALLS) * 1e-3
    except RuntimeError as e:
        print(f"{who}: no CUDA graph ({str(e).splitlines()[0]})", flush=True)
        return float("nan")


def main():
    torch.manual_seed(0)
    fla = import_fla_op("fla.ops.gated_delta_rule.chunk", "chunk_gated_delta_rule")
    rows = []
    for T, H, HV in ROWS:
        q, k, v, g, beta, h0 = make_inputs(T, H, HV)

        def run_fla():
            return fla(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                       use_qk_l2norm_in_kernel=True)

        def run_gdn():
            return gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                              output_final_state=True,
                                              use_qk_l2norm_in_kernel=True, algorithm="chunked")

        o_f, s_f = run_fla()
        o_g, s_g = run_gdn()
        torch.cuda.synchronize()
        errs = {"gdn_vs_fla": rel(o_g, o_f), "gdn_state_vs_fla": rel(s_g, s_f)}
        if not rows:
            warm_up(run_fla, run_gdn, seconds=WARM_S)
        t_fla, t_gdn = float("inf"), float("inf")
        for _ in range(ROUNDS):
            t_fla = min(t_fla, do_bench(run_fla, warmup=5, rep=200, return_mode="median"))
            t_gdn = min(t_gdn, do_bench(run_gdn, warmup=5, rep=200, return_mode="median"))
        g_fla, g_gdn = graph_ms(run_fla, "FLA"), graph_ms(run_gdn, "libgdn")
        row = {"op": "prefill", "B": 1, "T": T, "H": H, "HV": HV, "K": K, "V": V,
               "dtype": "bf16", "gdn_ms": t_gdn, "fla_ms": t_fla, "vs_fla": t_fla / t_gdn,
               "gdn_graph_ms": g_gdn, "fla_graph_ms": g_fla, "vs_fla_graph": g_fla / g_gdn,
               "gdn_tflops": flops(T, HV) / (t_gdn * 1e9), "fla_tflops": flops(T, HV) / (t_fla * 1e9),
               "device": torch.cuda.get_device_name(), **errs}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v, g, beta, h0, o_f, s_f, o_g, s_g
        torch.cuda.empty_cache()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\nprefill on {torch.cuda.get_device_name()}: libgdn chunked vs FLA chunk_gated_delta_rule")
    print("eager: do_bench medians (best of rounds); graph: device time per call in a CUDA graph")
    print(f"{'T':>7} {'H':>3} {'HV':>3} {'gdn ms':>9} {'FLA ms':>9} {'vs_fla':>7} "
          f"{'gdn graph':>9} {'FLA graph':>9} {'vs_fla':>7} "
          f"{'gdn TF/s':>9} {'out diff':>9} {'state diff':>10}")
    for r in rows:
        print(f"{r['T']:>7} {r['H']:>3} {r['HV']:>3} {r['gdn_ms']:>9.3f} {r['fla_ms']:>9.3f} "
              f"{r['vs_fla']:>7.2f} {r['gdn_graph_ms']:>9.3f} {r['fla_graph_ms']:>9.3f} "
              f"{r['vs_fla_graph']:>7.2f} {r['gdn_tflops']:>9.1f} {r['gdn_vs_fla']:>9.2e} "
              f"{r['gdn_state_vs_fla']:>10.2e}")


if __name__ == "__main__":
    main()
