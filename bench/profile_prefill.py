"""Per-kernel device time of one prefill call, libgdn's chunked form and FLA's, side by side.

Usage: python3 bench/profile_prefill.py [T H HV]  (default 8192 16 32; K = V = 128, bf16).
libgdn runs in each precision mode of GDN_PRECISIONS (default "fast,high").
Uses torch.profiler (CUPTI), so it needs nothing beyond PyTorch; FLA's code must sit in .fla/fla.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import gdn  # noqa: E402
from fla_decode import import_fla_op  # noqa: E402
from fla_prefill import make_inputs  # noqa: E402


def profile(name, fn, reps=5):
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n = e.name[:70]
            rows[n] = rows.get(n, 0.0) + e.device_time / reps
    total = sum(rows.values())
    print(f"{name}: {total / 1e3:.3f} ms of kernels per call")
    for n, us in sorted(rows.items(), key=lambda x: -x[1]):
        print(f"  {us:10.1f} us  {100 * us / total:5.1f}%  {n}")


def main():
    T, H, HV = (int(x) for x in sys.argv[1:4]) if len(sys.argv) >= 4 else (8192, 16, 32)
    q, k, v, g, beta, h0 = make_inputs(T, H, HV)
    print(f"T={T} H={H} HV={HV} K=V=128 on {torch.cuda.get_device_name()}")
    for mode in os.environ.get("GDN_PRECISIONS", "fast,high").split(","):
        profile(f"libgdn {mode}", lambda: gdn.chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=h0, output_final_state=True,
            use_qk_l2norm_in_kernel=True, algorithm="chunked", precision=mode))
    if os.path.isdir(".fla/fla"):
        fla = import_fla_op("fla.ops.gated_delta_rule.chunk", "chunk_gated_delta_rule")
        profile("FLA", lambda: fla(q, k, v, g=g, beta=beta, initial_state=h0,
                                   output_final_state=True, use_qk_l2norm_in_kernel=True))


if __name__ == "__main__":
    main()
