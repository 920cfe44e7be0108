#!/usr/bin/env python3
"""Where the host time of one decode call goes: the parts of bench/py_overhead.py's decode case
(fused_recurrent_gated_delta_rule, B = 1, HV = 32, K = V = 128, a pool of 4 with int32 slots),
each timed alone on the same arrays.

    GDN_LIBRARY=build/libgdn.so PYTHONPATH=python python3 bench/py_host_parts.py [torch-cuda|numpy]

Rows (microseconds per call, the best of 7 rounds of 2000 calls, no synchronization in the
timed loop; on CUDA the queue is drained between rounds):
  public call       the whole call, as an engine makes it
  libgdn call       gdn_delta_rule on a struct prepared once (validation, planning, launch)
  output zeros      the output array, zero-filled (the binding's choice for padded rows)
  output empty      the same array uninitialised
  context           the binding's context() for the call's device (on CUDA: with the stream)
  current stream    torch's current stream alone (CUDA)
  describe x8       the attributes the fast path reads from each of the call's 8 arrays
The public call less the parts is the binding's own Python and C glue.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import py_overhead as po  # noqa: E402
from gdn import _lib  # noqa: E402


def best_us(fn, calls=2000, rounds=7, sync=None):
    times = []
    for _ in range(rounds):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
        if sync:
            sync()
    return 1e6 * min(times)


def main():
    framework = sys.argv[1] if len(sys.argv) > 1 else (
        "torch-cuda" if po.torch is not None and po.torch.cuda.is_available() else "numpy")
    case = po.decode_case()
    a = po.in_framework(case.arrays, framework)
    cuda = framework == "torch-cuda"
    device = ("cuda", a["q"].device.index or 0) if cuda else "cpu"
    sync = po.torch.cuda.synchronize if cuda else None
    prepared = po.Prepared(case, a, device)
    v, shape = a["v"], case.out_shape(a)
    rows = [("public call", lambda: case.call(a))]
    if po.FAST is not None:
        rows.append(("libgdn call", lambda: prepared.run(1)))
    if cuda:
        rows += [("output zeros", lambda: v.new_zeros(shape)),
                 ("output empty", lambda: v.new_empty(shape)),
                 ("context", lambda: _lib.context(None, device)),
                 ("current stream", lambda: _lib._current_stream(device[1]))]
        arrays = [a[n] for n in ("q", "k", "v", "g", "beta", "pool", "slots")] + [v]
        rows.append(("describe x8", lambda: [(t.dtype, t.shape, t.stride(), t.data_ptr(),
                                              t.is_cuda, t.get_device()) for t in arrays]))
    else:
        np = po.np
        rows += [("output zeros", lambda: np.zeros(shape, v.dtype)),
                 ("output empty", lambda: np.empty(shape, v.dtype)),
                 ("context", lambda: _lib.context(None, device))]
    print(f"{framework}, fast path {'loaded' if po.FAST is not None else 'not loaded'}"
          + (f", {po.torch.cuda.get_device_name()}" if cuda else ""))
    for name, fn in rows:
        fn()
        print(f"  {name:<16} {best_us(fn, sync=sync):8.2f} us")


if __name__ == "__main__":
    main()
