#!/usr/bin/env python3
"""Host time per call of the Python binding (python/gdn), beside the kernel's own time.

    GDN_LIBRARY=build/libgdn.so PYTHONPATH=python python3 bench/py_overhead.py [--json FILE|-]

Cases (Qwen3-Next's linear-attention layer sizes: H = 16, HV = 32, K = V = 128):
  decode       fused_recurrent_gated_delta_rule, B = 1, T = 1, state_pool [S = 4, HV, K, V] with
               state_indices (int32 slot 2)
  decode_out   the same into the caller's output array (out=), as an engine with its own
               buffers calls it: no allocation and no zero fill per call
  conv_update  causal_conv1d_update, x [1, C = 2 H K + HV V = 8192], W = 4, conv_state
               [S = 4, C, W - 1] with conv_state_indices
  conv_update_out
               conv_update into the caller's output array (out=)
  prefill      chunk_gated_delta_rule, B = 1, T = 4096, state_pool with state_indices
Frameworks: numpy (the best host backend), torch-cuda (torch CUDA tensors, when torch and a
device are there), torch-cpu (opt-in). Paths: fast (the native extension gdn._fast, when it is
built and loaded) and python (the pure-Python path: _lib.fast set to None). Run it against
another checkout's python/ to compare with an older binding (it then has the python path only).

Host memory (numpy, torch-cpu), per call, medians over --rounds rounds of --calls calls (--stat
min: the best round instead, steadier on a machine whose speed swings):
  total       wall time of the public call (time.perf_counter around a run of calls)
  kernel      the kernel alone: libgdn's entry point called --calls times in C on an argument
              struct prepared once for the same arrays (gdn._fast.time_calls; without the
              extension a ctypes loop, less the cost of a ctypes call of gdn_version_string)
  host        total - kernel (the two figures above)
  host_incall per round: total - the time spent inside libgdn during those same calls (fast path: the
              extension's kernel_clock; python path: perf_counter around the ctypes call, so
              ctypes' own argument conversion counts as kernel there). Both calls and kernel see
              the same machine at the same moment, so this one is robust to a noisy machine;
              host is the brief's definition and needs a quiet one.
CUDA (torch-cuda):
  total       wall time of --calls calls and one torch.cuda.synchronize(), per call
  kernel      CUDA events around --calls launches of the prepared call (GPU time per kernel)
  host        time.perf_counter around each call, with no synchronization in it (the time
              until the call returns; the queue is drained every 32 calls, outside the timing)
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import gdn
from gdn import _lib

torch = getattr(_lib, "torch", None)
FAST = getattr(_lib, "fast", None)
H, HV, K, V, S, W = 16, 32, 128, 128, 4, 4
STAT = [statistics.median]  # --stat
CONV_DIM = 2 * H * K + HV * V


# ---- inputs ----------------------------------------------------------------------------------

def delta_inputs(T, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, T, H, K), dtype=np.float32)
    k = rng.standard_normal((1, T, H, K), dtype=np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # keeps the states bounded over many calls
    v = rng.standard_normal((1, T, HV, V), dtype=np.float32)
    g = (-0.1 * rng.random((1, T, HV))).astype(np.float32)
    beta = rng.random((1, T, HV), dtype=np.float32)
    pool = np.zeros((S, HV, K, V), np.float32)
    slots = np.array([2], np.int32)
    return dict(q=q, k=k, v=v, g=g, beta=beta, pool=pool, slots=slots)


def conv_inputs(seed=1):
    rng = np.random.default_rng(seed)
    return dict(x=rng.standard_normal((1, CONV_DIM), dtype=np.float32),
                state=np.zeros((S, CONV_DIM, W - 1), np.float32),
                weight=(0.1 * rng.standard_normal((CONV_DIM, W))).astype(np.float32),
                slots=np.array([1], np.int32))


class Case:
    """A public call and its kernel-only twin (libgdn entry point, prepared argument struct)."""

    def __init__(self, name, arrays, call, entry, fill_args, out_shape):
        self.name, self.arrays, self.call = name, arrays, call
        self.entry, self.fill_args, self.out_shape = entry, fill_args, out_shape


def decode_case(T=1, name="decode", into_out=False):
    a = delta_inputs(T)
    if into_out:  # the output written into the caller's array (out=) instead of a new one
        a["out"] = np.zeros_like(a["v"])
    if T == 1:
        def call(a):
            return gdn.fused_recurrent_gated_delta_rule(
                a["q"], a["k"], a["v"], a["g"], a["beta"], state_pool=a["pool"],
                state_indices=a["slots"], out=a.get("out"))
        algorithm = _lib.ALGO_RECURRENT
    else:
        def call(a):
            return gdn.chunk_gated_delta_rule(
                a["q"], a["k"], a["v"], a["g"], a["beta"], state_pool=a["pool"],
                state_indices=a["slots"])
        algorithm = _lib.ALGO_AUTO

    def fill(a, out):
        args = _lib.lib.gdn_delta_rule_default_args()
        for field, key in (("q", "q"), ("k", "k"), ("v", "v"), ("g", "g"), ("beta", "beta"),
                           ("state", "pool"), ("state_slots", "slots")):
            setattr(args, field, _lib.describe(a[key], field))
        args.out = _lib.describe(out, "out")
        args.algorithm = algorithm
        return args
    return Case(name, a, call, "gdn_delta_rule", fill, lambda a: a["v"].shape)


def conv_case(into_out=False):
    arrays = conv_inputs()
    if into_out:  # into the caller's output array (out=)
        arrays["out"] = np.zeros_like(arrays["x"])

    def call(a):
        return gdn.causal_conv1d_update(a["x"], a["state"], a["weight"], None, "silu",
                                        conv_state_indices=a["slots"], out=a.get("out"))

    def fill(a, out):
        args = _lib.lib.gdn_conv1d_update_default_args()
        args.x, args.weight = _lib.describe(a["x"], "x"), _lib.describe(a["weight"], "weight")
        args.conv_state = _lib.describe(a["state"], "conv_state")
        args.state_slots = _lib.describe(a["slots"], "slots")
        args.out = _lib.describe(out, "out")
        args.activation = _lib.ACT_SILU
        return args
    return Case("conv_update", arrays, call, "gdn_conv1d_update", fill, lambda a: a["x"].shape)


CASES = {"decode": lambda: decode_case(), "decode_out": lambda: decode_case(into_out=True),
         "conv_update": conv_case, "conv_update_out": lambda: conv_case(into_out=True),
         "prefill": lambda: decode_case(T=4096, name="prefill")}


def in_framework(arrays, framework):
    if framework == "numpy":
        return arrays
    device = "cuda" if framework == "torch-cuda" else "cpu"
    return {k: torch.from_numpy(x).to(device) for k, x in arrays.items()}


def new_like(x, shape):
    return np.zeros(shape, x.dtype) if isinstance(x, np.ndarray) else x.new_zeros(shape)


# ---- the kernel alone ------------------------------------------------------------------------

class Prepared:
    """The case's libgdn call on a struct prepared once: run(n) calls it n times."""

    def __init__(self, case, arrays, device):
        self.out = new_like(next(iter(arrays.values())), case.out_shape(arrays))
        self.args = case.fill_args(arrays, self.out)
        self.ctx = _lib.context(None, device)
        self.fn = getattr(_lib.lib, case.entry)
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value
        self.pointer = ctypes.byref(self.args)

    def run(self, n):
        """Seconds for n calls (C loop with the extension; else a ctypes loop)."""
        if FAST is not None:
            seconds, status = FAST.time_calls(self.address, self.ctx.value,
                                              ctypes.addressof(self.args), n)
        else:
            fn, ctx, p = self.fn, self.ctx, self.pointer
            t0 = time.perf_counter()
            for _ in range(n):
                status = fn(ctx, p)
            seconds = time.perf_counter() - t0 - n * ctypes_call_cost()
        if status != _lib.OK:
            _lib.check(status, self.ctx)
        return seconds


_CTYPES_COST = []


def ctypes_call_cost():
    """Seconds a ctypes call costs by itself (gdn_version_string, which does nothing)."""
    if not _CTYPES_COST:
        fn, n = _lib.lib.gdn_version_string, 20000
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
        _CTYPES_COST.append(best)
    return _CTYPES_COST[0]


class InCallClock:
    """Time spent inside libgdn by the public calls themselves: the extension's kernel_clock on
    the fast path; on the python path a perf_counter wrapper around the ctypes entry point."""

    def __init__(self, entry, path):
        self.entry, self.path, self.seconds = entry, path, 0.0

    def __enter__(self):
        if self.path == "fast":
            FAST.kernel_clock(True)
        else:
            self.real = getattr(_lib.lib, self.entry)
            real, clock, perf = self.real, self, time.perf_counter

            def timed(*args):
                t0 = perf()
                status = real(*args)
                clock.seconds += perf() - t0
                return status
            setattr(_lib.lib, self.entry, timed)
        return self

    def __exit__(self, *exc):
        if self.path == "fast":
            self.seconds = FAST.kernel_clock(False)[1]
        else:
            setattr(_lib.lib, self.entry, self.real)


# ---- measuring -------------------------------------------------------------------------------

def measure_host_memory(case, arrays, path, calls, rounds):
    call = case.call
    prepared = Prepared(case, arrays, "cpu")
    for _ in range(max(1, min(calls, 50))):  # warm up: contexts, threads, caches
        call(arrays)
    prepared.run(max(1, min(calls, 50)))
    totals, kernels, incall_hosts, incall_kernels = [], [], [], []
    for _ in range(rounds):  # interleaved: the calls and the kernel see the same machine
        with InCallClock(case.entry, path) as clock:
            t0 = time.perf_counter()
            for _ in range(calls):
                call(arrays)
            total = (time.perf_counter() - t0) / calls
        kernel = prepared.run(calls) / calls
        totals.append(total)
        kernels.append(kernel)
        incall_kernels.append(clock.seconds / calls)
        incall_hosts.append(total - clock.seconds / calls)
    med = STAT[0]
    total, kernel = med(totals), med(kernels)
    return dict(total_us=1e6 * total, kernel_us=1e6 * kernel, host_us=1e6 * (total - kernel),
                host_incall_us=1e6 * med(incall_hosts),
                kernel_incall_us=1e6 * med(incall_kernels))


def measure_cuda(case, arrays, path, calls, rounds):
    call = case.call
    device = arrays["q" if "q" in arrays else "x"].device
    prepared = Prepared(case, arrays, ("cuda", device.index or 0))
    for _ in range(max(1, min(calls, 50))):
        call(arrays)
    torch.cuda.synchronize()
    hosts, totals, kernels = [], [], []
    perf = time.perf_counter
    for _ in range(rounds):
        for i in range(calls):
            t0 = perf()
            call(arrays)
            hosts.append(perf() - t0)
            if i % 32 == 31:
                torch.cuda.synchronize()  # a full launch queue would block the calls
        torch.cuda.synchronize()
        t0 = perf()
        for _ in range(calls):
            call(arrays)
        torch.cuda.synchronize()
        totals.append((perf() - t0) / calls)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        prepared.run(calls)
        end.record()
        end.synchronize()
        kernels.append(start.elapsed_time(end) * 1e-3 / calls)
    med = STAT[0]
    return dict(total_us=1e6 * med(totals), kernel_us=1e6 * med(kernels),
                host_us=1e6 * med(hosts), host_incall_us=None, kernel_incall_us=None)


def run_row(case_name, framework, path, calls, rounds):
    case = CASES[case_name]()
    arrays = in_framework(case.arrays, framework)
    saved = getattr(_lib, "fast", None)
    if hasattr(_lib, "fast"):
        _lib.fast = FAST if path == "fast" else None
    try:
        if framework == "torch-cuda":
            numbers = measure_cuda(case, arrays, path, calls, rounds)
        else:
            numbers = measure_host_memory(case, arrays, path, calls, rounds)
    finally:
        if hasattr(_lib, "fast"):
            _lib.fast = saved
    return dict(case=case_name, framework=framework, path=path, calls=calls, rounds=rounds,
                stat=STAT[0].__name__, **numbers)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="decode,decode_out,conv_update,conv_update_out,prefill")
    p.add_argument("--frameworks", default=None,
                   help="numpy, torch-cuda, torch-cpu (default: numpy, and torch-cuda when a "
                        "CUDA device is there)")
    p.add_argument("--paths", default="fast,python")
    p.add_argument("--calls", type=int, default=2000, help="calls per round (decode, conv)")
    p.add_argument("--prefill-calls", type=int, default=None,
                   help="calls per round for prefill (default 3 on the host, 20 on CUDA)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--prefill-rounds", type=int, default=3)
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="per-round figure reported (each column on its own)")
    p.add_argument("--json", default=None, help="also write the rows as JSON to FILE ('-': "
                                                "stdout, instead of the table)")
    opts = p.parse_args()
    STAT[0] = min if opts.stat == "min" else statistics.median
    cuda = torch is not None and torch.cuda.is_available()
    frameworks = (opts.frameworks.split(",") if opts.frameworks else
                  ["numpy"] + (["torch-cuda"] if cuda else []))
    paths = [x for x in opts.paths.split(",") if x != "fast" or FAST is not None]
    rows = []
    table = opts.json != "-"
    if table:
        print(f"gdn {gdn.__version__}, libgdn {gdn.libgdn_version}; fast path: "
              f"{getattr(FAST, '__file__', None) or 'not loaded'}")
        print(f"{'case':<15} {'framework':<11} {'path':<7} {'total_us':>10} {'kernel_us':>10} "
              f"{'host_us':>9} {'host_incall_us':>15}")
    for case_name in opts.cases.split(","):
        for framework in frameworks:
            if framework.startswith("torch") and (torch is None or
                                                  (framework == "torch-cuda" and not cuda)):
                continue
            for path in paths:
                if case_name == "prefill":
                    calls = opts.prefill_calls or (20 if framework == "torch-cuda" else 3)
                    rounds = opts.prefill_rounds
                else:
                    calls, rounds = opts.calls, opts.rounds
                row = run_row(case_name, framework, path, calls, rounds)
                rows.append(row)
                if table:
                    incall = row["host_incall_us"]
                    print(f"{case_name:<15} {framework:<11} {path:<7} {row['total_us']:10.1f} "
                          f"{row['kernel_us']:10.1f} {row['host_us']:9.1f} "
                          f"{'-' if incall is None else format(incall, '.1f'):>15}", flush=True)
    result = dict(python=sys.version.split()[0], machine=platform.machine(),
                  node=platform.node(), cpus=os.cpu_count(), numpy=np.__version__,
                  torch=getattr(torch, "__version__", None), gdn=gdn.__version__,
                  libgdn=gdn.libgdn_version, fast_path=getattr(FAST, "__file__", None),
                  device=torch.cuda.get_device_name() if cuda else None, rows=rows)
    if opts.json == "-":
        json.dump(result, sys.stdout, indent=1)
        print()
    elif opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
