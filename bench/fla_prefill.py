"""libgdn's CUDA chunked prefill against FLA's chunk_gated_delta_rule on the same inputs.

Rows (T H HV seqs): the tensor-core prefill issue's table (one sequence of T tokens), a
tensor-parallel-2 row (32768 8 16) and a packed varlen row (32768 16 32 8: B=1, 8 sequences of
4096 tokens, cu_seqlens on the device: int64 for FLA, as its LongTensor wants, int32 for libgdn,
as vLLM's query_start_loc; the initial state then has one row per sequence). K=V=128, bf16
q/k/v, f32 g and beta, an f32 initial state and the f32 final state returned, q/k L2 norm in the
kernel. libgdn runs each row in both precision modes, "fast" (tensor-core operands rounded once,
as FLA's) and "high" (hi + lo operands), against the same FLA timing: gdn_fast_ms, gdn_high_ms,
fla_ms, vs_fla_fast = fla_ms / gdn_fast_ms, vs_fla_high = fla_ms / gdn_high_ms (above 1: libgdn
faster). All sides get the same tensors; outputs and final states are compared with FLA's
(gdn_fast_vs_fla, gdn_fast_state_vs_fla, gdn_high_vs_fla, gdn_high_state_vs_fla: relative L2;
libgdn's accuracy against float64 is tested in tests/test_cuda.c).

Times: triton.testing.do_bench medians (device time between events around each call, including
each side's Python launch path), same process; each side timed in ROUNDS rounds alternating with
the others, its best median kept, after all ran for about WARM_S seconds (FLA's first row used to
read up to 2x its later figures: clocks and Triton's first launches, not the kernels). Then again
as device time alone: a few calls captured in one CUDA graph and replayed (*_graph_ms,
vs_fla_graph_fast, vs_fla_graph_high), which leaves out each side's Python and launch path: FLA
launches eight kernels a call (two of them torch fills), and on a slow host its eager time is
the host's (8192/32 on an H100: 0.87 ms eager against 0.57 ms of kernels).

Peers (optional): where bench/peer_kernels.py exists, its load_peers() returns {name: fn} with
fn(q, k, v, g, beta, h0, cu_seqlens) -> (o, final_state) (cu_seqlens None, or the int64 device
tensor of the varlen row); each peer is timed in the same rounds and graphs, adding <name>_ms,
<name>_graph_ms, vs_<name>_fast = <name>_ms / gdn_fast_ms, vs_<name>_high, vs_<name>_graph_fast
and <name>_vs_fla, <name>_state_vs_fla. A peer that raises on a row is reported and gets nan
there.

FLA is pinned to its own Triton kernels (fla_decode.import_fla_op). Environment: GDN_BENCH_ROUNDS
(default 3), GDN_BENCH_ROWS (indices into ROWS, e.g. "0,1,6"; default all), GDN_BENCH_PEERS=0
(no peer columns: FlashQLA's TileLang kernels take about a minute to compile), GDN_BENCH_GATES
("randn", the default: g = logsigmoid(randn + 3), about -4.8 a 64-token chunk; "model": a
Qwen3-Next-like gate per value head, g = -A softplus(a + dt_bias) with A in (1, 16), dt_bias
for dt in (0.001, 0.1) log-uniform and a ~ randn, about -0.1 to -150 a chunk by head, for which
the time of a segment's start state depends on how far decay reaches: FlashQLA's and libgdn's
split calls both shorten it by the gates).

FLA's code must sit in .fla/fla (fetched, never committed). Writes JSON to argv[1] if given.
"""
import json
import math
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
# T (all tokens of the call), H, HV, sequences packed into T (1: no cu_seqlens)
ROWS = [(8192, 16, 32, 1), (32768, 16, 32, 1), (32768, 16, 32, 8), (32768, 8, 16, 1),
        (32768, 4, 8, 1), (32768, 2, 4, 1), (131072, 2, 4, 1)]
MODES = ("fast", "high")
ROUNDS = int(os.environ.get("GDN_BENCH_ROUNDS", "3"))
if os.environ.get("GDN_BENCH_ROWS"):
    ROWS = [ROWS[int(i)] for i in os.environ["GDN_BENCH_ROWS"].split(",")]
WARM_S = 2.0
GRAPH_CALLS = 4
NAN = float("nan")


def flops(T, HV, seqs=1):
    """The chunked form's multiply-adds per 64-token chunk (of each sequence) and head, 2 flops
    each."""
    C, chunks = 64, seqs * -(-(T // seqs) // 64) * HV
    return 2.0 * chunks * (C * C * (3 * K + 2 * V) + 3 * C * K * V)


def model_gates(T, HV, dev):
    """g [1, T, HV] as a Qwen3-Next layer makes it at initialisation: -A softplus(a + dt_bias)
    per value head, A uniform in (1, 16), dt_bias = softplus^-1(dt) for dt log-uniform in
    (0.001, 0.1), the projection's a ~ randn."""
    A = 1.0 + 15.0 * torch.rand(HV, device=dev)
    dt = torch.exp(math.log(0.001) + (math.log(0.1) - math.log(0.001)) * torch.rand(HV, device=dev))
    dt_bias = torch.log(torch.expm1(dt))
    a = torch.randn(1, T, HV, device=dev)
    return -A * torch.nn.functional.softplus(a + dt_bias)


def make_inputs(T, H, HV, dev="cuda", seqs=1):
    """q, k, v (bf16), g (log-decay), beta, h0 (f32, one row per sequence) for B=1 and T tokens
    (seqs sequences packed, for a varlen call); g as GDN_BENCH_GATES says."""
    q = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, T, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, T, HV, V, device=dev, dtype=torch.bfloat16)
    if os.environ.get("GDN_BENCH_GATES", "randn") == "model":
        g = model_gates(T, HV, dev)
    else:
        g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, device=dev) + 3.0)
    beta = torch.rand(1, T, HV, device=dev)
    h0 = 0.1 * torch.randn(seqs, HV, K, V, device=dev)
    return q, k, v, g, beta, h0


def load_peer_kernels():
    """{name: fn} from bench/peer_kernels.py's load_peers(), or {} where there is none."""
    try:
        from peer_kernels import load_peers
    except ImportError:
        return {}
    try:
        peers = dict(load_peers())
    except Exception as e:  # a peer module that fails to load must not stop the FLA comparison
        print(f"peer_kernels.load_peers() failed: {type(e).__name__}: {e}", flush=True)
        return {}
    taken = {"gdn", "gdn_fast", "gdn_high", "fla"}
    for name in [n for n in peers if n in taken]:
        print(f"peer {name!r}: the name is taken, skipped", flush=True)
        del peers[name]
    return peers


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
        return NAN


def peer_failed(name, what, e):
    """Prints a peer's exception (its first line): the peer gets nan for the rest of the row."""
    first = (str(e).splitlines() or [""])[0]
    print(f"peer {name}: {what} failed: {type(e).__name__}: {first}", flush=True)


def bench_row(fla, peers, T, H, HV, N, first):
    """One row: libgdn in each mode, FLA and the peers on the same inputs."""
    q, k, v, g, beta, h0 = make_inputs(T, H, HV, seqs=N)
    cu64 = cu32 = None
    if N > 1:
        cu64 = torch.arange(0, T + 1, T // N, device="cuda", dtype=torch.int64)
        cu32 = cu64.to(torch.int32)

    def run_fla():
        return fla(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True,
                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu64)

    def gdn_runner(mode):
        def run_gdn():
            return gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                              output_final_state=True,
                                              use_qk_l2norm_in_kernel=True, cu_seqlens=cu32,
                                              algorithm="chunked", precision=mode)
        return run_gdn

    def peer_runner(fn):
        return lambda: fn(q, k, v, g, beta, h0, cu64)

    # every side once: the outputs compared, argument errors (libgdn, FLA) raised here
    runs = {"fla": run_fla, **{f"gdn_{m}": gdn_runner(m) for m in MODES}}
    o_f, s_f = run_fla()
    errs = {}
    for m in MODES:
        o, s = runs[f"gdn_{m}"]()
        errs[f"gdn_{m}_vs_fla"], errs[f"gdn_{m}_state_vs_fla"] = rel(o, o_f), rel(s, s_f)
        del o, s
    shape = f"T={T} H={H} HV={HV} seqs={N}"
    for name, fn in peers.items():
        errs[f"{name}_vs_fla"] = errs[f"{name}_state_vs_fla"] = NAN
        try:
            o, s = peer_runner(fn)()
            torch.cuda.synchronize()
        except Exception as e:
            peer_failed(name, shape, e)
            continue
        runs[name] = peer_runner(fn)
        try:  # a peer whose results cannot be compared is still timed
            errs[f"{name}_vs_fla"] = rel(o, o_f)
            errs[f"{name}_state_vs_fla"] = NAN if s is None else rel(s, s_f)
        except Exception as e:
            peer_failed(name, f"{shape}: comparing with FLA", e)
        del o, s
    torch.cuda.synchronize()
    del o_f, s_f
    if first:
        failed = set()

        def guarded(name, fn):  # a peer that raises while warming up is dropped from the row
            def call():
                if name not in failed:
                    try:
                        fn()
                    except Exception as e:
                        peer_failed(name, "warm-up", e)
                        failed.add(name)
            return call

        warm_up(*(guarded(n, fn) if n in peers else fn for n, fn in runs.items()),
                seconds=WARM_S)
        for name in failed:
            del runs[name]

    # alternating rounds: every side once a round, its best median kept
    t = {name: float("inf") for name in runs}
    for _ in range(ROUNDS):
        for name, fn in list(runs.items()):
            if name not in peers:
                t[name] = min(t[name], do_bench(fn, warmup=5, rep=200, return_mode="median"))
                continue
            try:
                t[name] = min(t[name], do_bench(fn, warmup=5, rep=200, return_mode="median"))
            except Exception as e:
                peer_failed(name, "timing", e)
                t[name] = NAN
                del runs[name]
    for name in peers:
        t.setdefault(name, NAN)
    gt = {}
    for name in ("fla", *(f"gdn_{m}" for m in MODES), *peers):
        if name not in runs:
            gt[name] = NAN
        elif name not in peers:
            gt[name] = graph_ms(runs[name], "FLA" if name == "fla" else f"libgdn {name[4:]}")
        else:
            try:
                gt[name] = graph_ms(runs[name], name)
            except Exception as e:
                peer_failed(name, "CUDA graph", e)
                gt[name] = NAN

    row = {"op": "prefill", "B": 1, "seqs": N, "T": T, "H": H, "HV": HV, "K": K, "V": V,
           "dtype": "bf16", "fla_ms": t["fla"], "fla_graph_ms": gt["fla"],
           "fla_tflops": flops(T, HV, N) / (t["fla"] * 1e9)}
    for m in MODES:
        row[f"gdn_{m}_ms"] = t[f"gdn_{m}"]
        row[f"gdn_{m}_graph_ms"] = gt[f"gdn_{m}"]
        row[f"vs_fla_{m}"] = t["fla"] / t[f"gdn_{m}"]
        row[f"vs_fla_graph_{m}"] = gt["fla"] / gt[f"gdn_{m}"]
        row[f"gdn_{m}_tflops"] = flops(T, HV, N) / (t[f"gdn_{m}"] * 1e9)
    for name in peers:
        row[f"{name}_ms"], row[f"{name}_graph_ms"] = t[name], gt[name]
        for m in MODES:
            row[f"vs_{name}_{m}"] = t[name] / t[f"gdn_{m}"]
        row[f"vs_{name}_graph_fast"] = gt[name] / gt["gdn_fast"]
    row["device"] = torch.cuda.get_device_name()
    row.update(errs)
    del q, k, v, g, beta, h0, cu64, cu32, runs
    torch.cuda.empty_cache()
    return row


def fmt(x, spec):
    return format(x, spec) if not math.isnan(x) else format("nan", spec[:spec.index(".")] + "s")


def main():
    torch.manual_seed(0)
    fla = import_fla_op("fla.ops.gated_delta_rule.chunk", "chunk_gated_delta_rule")
    peers = load_peer_kernels() if os.environ.get("GDN_BENCH_PEERS") != "0" else {}
    if peers:
        print(f"peers: {', '.join(peers)}", flush=True)
    rows = []
    for T, H, HV, N in ROWS:
        row = bench_row(fla, peers, T, H, HV, N, first=not rows)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\nprefill on {torch.cuda.get_device_name()}: libgdn chunked (fast and high precision) "
          f"vs FLA chunk_gated_delta_rule; seqs > 1: varlen, T tokens in all")
    print("eager: do_bench medians (best of rounds); graph: device time per call in a CUDA graph; "
          "vs_fla: FLA's time / libgdn's")
    print(f"{'T':>7} {'H':>3} {'HV':>3} {'seqs':>4} {'mode':>4} {'gdn ms':>9} {'FLA ms':>9} "
          f"{'vs_fla':>7} {'gdn graph':>9} {'FLA graph':>9} {'vs_fla':>7} "
          f"{'gdn TF/s':>9} {'out diff':>9} {'state diff':>10}")
    for r in rows:
        for m in MODES:
            print(f"{r['T']:>7} {r['H']:>3} {r['HV']:>3} {r['seqs']:>4} {m:>4} "
                  f"{fmt(r[f'gdn_{m}_ms'], '>9.3f')} {fmt(r['fla_ms'], '>9.3f')} "
                  f"{fmt(r[f'vs_fla_{m}'], '>7.2f')} {fmt(r[f'gdn_{m}_graph_ms'], '>9.3f')} "
                  f"{fmt(r['fla_graph_ms'], '>9.3f')} {fmt(r[f'vs_fla_graph_{m}'], '>7.2f')} "
                  f"{fmt(r[f'gdn_{m}_tflops'], '>9.1f')} {fmt(r[f'gdn_{m}_vs_fla'], '>9.2e')} "
                  f"{fmt(r[f'gdn_{m}_state_vs_fla'], '>10.2e')}")
    for name in peers:
        print(f"\npeer {name}: vs_{name} = {name}'s time / libgdn's (above 1: libgdn faster); "
              f"diffs against FLA")
        print(f"{'T':>7} {'H':>3} {'HV':>3} {'seqs':>4} {'ms':>9} {'graph ms':>9} "
              f"{'vs fast':>7} {'vs high':>7} {'vs fast graph':>13} {'out diff':>9} "
              f"{'state diff':>10}")
        for r in rows:
            print(f"{r['T']:>7} {r['H']:>3} {r['HV']:>3} {r['seqs']:>4} "
                  f"{fmt(r[f'{name}_ms'], '>9.3f')} {fmt(r[f'{name}_graph_ms'], '>9.3f')} "
                  f"{fmt(r[f'vs_{name}_fast'], '>7.2f')} {fmt(r[f'vs_{name}_high'], '>7.2f')} "
                  f"{fmt(r[f'vs_{name}_graph_fast'], '>13.2f')} "
                  f"{fmt(r[f'{name}_vs_fla'], '>9.2e')} {fmt(r[f'{name}_state_vs_fla'], '>10.2e')}")


if __name__ == "__main__":
    main()
