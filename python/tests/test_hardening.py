"""Regression tests for the binding's defences against hostile or unusual callers.

  - arrays libgdn writes (state pools, conv states, final_states_out) are refused when they
    cannot take the writes: read-only, or repeating elements (stride 0);
  - a failing call leaves every caller buffer byte-identical (validation before any write);
  - output rows of padding sequences (slot -1) come back as zeros, not stale memory;
  - empty inputs (B = 0, T = 0, no sequences) give empty outputs;
  - a thread's contexts (and their cpu worker threads) go away when the thread ends;
  - FLA-style initial states have exactly one row per sequence.
"""
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gdn
from gdn import _lib

f32 = np.float32
H, HV, K, V = 2, 4, 16, 8
C, W = 12, 4


def rand(*shape, seed=0):
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(f32)


def qkv(B, T, seed=0):
    """Delta-rule inputs: q, k [B, T, H, K]; v [B, T, HV, V]; g <= 0; beta in (0, 1)."""
    k = rand(B, T, H, K, seed=seed + 1)
    k /= np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), 1e-6)
    return dict(q=rand(B, T, H, K, seed=seed), k=k, v=rand(B, T, HV, V, seed=seed + 2),
                g=-np.abs(rand(B, T, HV, seed=seed + 3)) * 0.1,
                beta=np.full((B, T, HV), 0.5, f32))


def poisoned(*shape, seed=7):
    """Random values with NaNs sprinkled in: what a buffer of an engine may hold."""
    x = rand(*shape, seed=seed)
    x.reshape(-1)[::5] = np.nan
    return x


def snapshot(*xs):
    return [x.tobytes() for x in xs]


def changed(before, *xs):
    """Positions of the arrays whose bytes differ from `before` (a snapshot of them)."""
    return [i for i, (b, x) in enumerate(zip(before, xs)) if x.tobytes() != b]


def run_python(script):
    """Runs `script` in a child interpreter that imports this same gdn package: for calls that
    could crash or hang the interpreter."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gdn.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)


DELTA_RULES = [gdn.chunk_gated_delta_rule, gdn.fused_recurrent_gated_delta_rule]


# ---- 7. arrays that are written must be writable ---------------------------------------------

@pytest.mark.parametrize("fn", DELTA_RULES)
def test_read_only_state_pool_is_refused(fn):
    pool = poisoned(3, HV, K, V)
    pool.flags.writeable = False
    before = snapshot(pool)
    with pytest.raises(gdn.GdnValueError, match=r"^state_pool is read-only"):
        fn(**qkv(2, 3), state_pool=pool)
    assert changed(before, pool) == []


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_broadcast_state_pool_is_refused(fn):
    base = poisoned(1, HV, K, V)
    with pytest.raises(gdn.GdnValueError, match=r"^state_pool"):
        fn(**qkv(2, 3), state_pool=np.broadcast_to(base, (3, HV, K, V)))   # read-only view
    repeated = np.lib.stride_tricks.as_strided(base, (3, HV, K, V), (0,) + base.strides[1:])
    assert repeated.flags.writeable
    before = snapshot(base)
    with pytest.raises(gdn.GdnValueError, match=r"^state_pool\.stride\[0\] is 0"):
        fn(**qkv(2, 3), state_pool=repeated)
    assert changed(before, base) == []


def test_conv_states_read_only_or_repeating_are_refused():
    x, w = rand(2, C, 5), rand(C, W)
    pool = poisoned(3, C, W - 1)
    pool.flags.writeable = False
    with pytest.raises(gdn.GdnValueError, match=r"^conv_states is read-only"):
        gdn.causal_conv1d_fn(x, w, conv_states=pool)
    with pytest.raises(gdn.GdnValueError, match=r"^conv_state is read-only"):
        gdn.causal_conv1d_update(x[:, :, 0], pool, w)
    base = poisoned(3, C, 1)
    repeated = np.lib.stride_tricks.as_strided(base, (3, C, W - 1), base.strides[:2] + (0,))
    before = snapshot(base)
    with pytest.raises(gdn.GdnValueError, match=r"^conv_states\.stride\[2\] is 0"):
        gdn.causal_conv1d_fn(x, w, conv_states=repeated)
    with pytest.raises(gdn.GdnValueError, match=r"^conv_state\.stride\[2\] is 0"):
        gdn.causal_conv1d_update(x[:, :, 0], repeated, w)
    assert changed(before, base) == []


def test_final_states_out_read_only_or_repeating_is_refused():
    x, w = rand(2, C, 5), rand(C, W)
    out = poisoned(2, C, W - 1)
    out.flags.writeable = False
    with pytest.raises(gdn.GdnValueError, match=r"^final_states_out is read-only"):
        gdn.causal_conv1d_fn(x, w, return_final_states=True, final_states_out=out)
    base = poisoned(1, C, W - 1)
    repeated = np.lib.stride_tricks.as_strided(base, (2, C, W - 1), (0,) + base.strides[1:])
    with pytest.raises(gdn.GdnValueError, match=r"^final_states_out\.stride\[0\] is 0"):
        gdn.causal_conv1d_fn(x, w, initial_states=rand(2, C, W - 1), return_final_states=True,
                             final_states_out=repeated)


def test_read_only_memmap_pool_is_refused_not_a_crash(tmp_path):
    """A read-only memmap used to kill the interpreter (SIGSEGV): run it in a child process."""
    path = tmp_path / "pool.f32"
    poisoned(3, HV, K, V).tofile(path)
    script = f"""
import numpy as np, gdn
pool = np.memmap({str(path)!r}, dtype=np.float32, mode="r", shape=(3, {HV}, {K}, {V}))
q, v = np.ones((2, 3, {H}, {K}), np.float32), np.ones((2, 3, {HV}, {V}), np.float32)
g, beta = np.zeros((2, 3, {HV}), np.float32), np.ones((2, 3, {HV}), np.float32)
try:
    gdn.fused_recurrent_gated_delta_rule(q, q, v, g, beta, state_pool=pool)
except gdn.GdnValueError as e:
    print("refused:", e)
"""
    child = run_python(script)
    assert child.returncode == 0, f"exit status {child.returncode}: {child.stderr[-2000:]}"
    assert "refused: state_pool is read-only" in child.stdout
    assert path.read_bytes() == poisoned(3, HV, K, V).tobytes()


def test_torch_expanded_outputs_are_refused():
    torch = pytest.importorskip("torch")
    x = {n: torch.from_numpy(a) for n, a in qkv(2, 3).items()}
    pool = torch.zeros(1, HV, K, V).expand(3, HV, K, V)
    with pytest.raises(gdn.GdnValueError, match=r"^state_pool\.stride\[0\] is 0"):
        gdn.chunk_gated_delta_rule(**x, state_pool=pool)
    conv = torch.zeros(3, C, 1).expand(3, C, W - 1)
    with pytest.raises(gdn.GdnValueError, match=r"^conv_state\.stride\[2\] is 0"):
        gdn.causal_conv1d_update(torch.ones(3, C), conv, torch.ones(C, W))
    out = torch.zeros(1, C, W - 1).expand(2, C, W - 1)
    with pytest.raises(gdn.GdnValueError, match=r"^final_states_out\.stride\[0\] is 0"):
        gdn.causal_conv1d_fn(torch.ones(2, C, 5), torch.ones(C, W), return_final_states=True,
                             final_states_out=out)


# ---- 8. validation before any write ----------------------------------------------------------

@pytest.mark.parametrize("with_initial", [True, False])
def test_conv_bad_width_writes_nothing(with_initial):
    """Width 17 is refused by libgdn; final_states_out used to be filled (or zeroed) first."""
    x, w = rand(2, C, 5), rand(C, 17)
    init = rand(2, C, 16) if with_initial else None
    out = poisoned(2, C, 16, seed=9)
    before = snapshot(x, w, out)
    with pytest.raises(gdn.GdnValueError, match=r"weight\.shape\[1\] \(width W\) is 17"):
        gdn.causal_conv1d_fn(x, w, initial_states=init, return_final_states=True,
                             final_states_out=out)
    assert changed(before, x, w, out) == []


def test_conv_final_states_out_is_filled_on_success():
    x, w, init = rand(2, C, 5), rand(C, W), rand(2, C, W - 1)
    want = gdn.causal_conv1d_fn(x, w, initial_states=init, return_final_states=True)[1]
    out = poisoned(2, C, W - 1)
    y, final = gdn.causal_conv1d_fn(x, w, initial_states=init, return_final_states=True,
                                    final_states_out=out)
    assert final is out and np.array_equal(out, want)
    init_in_place = init.copy()                                # final_states_out = initial_states
    gdn.causal_conv1d_fn(x, w, initial_states=init_in_place, return_final_states=True,
                         final_states_out=init_in_place)
    assert np.array_equal(init_in_place, want)


def failing_calls():
    """One failing call per public function, each with the caller's buffers (poisoned) that
    the call could write or read: (name, call, buffers)."""
    x = qkv(2, 3)
    pool = poisoned(3, HV, K, V)
    bad_k = rand(2, 3, H + 1, K)
    yield ("chunk_gated_delta_rule",
           lambda: gdn.chunk_gated_delta_rule(**dict(x, k=bad_k), state_pool=pool),
           [pool, bad_k] + list(x.values()))
    pool2 = poisoned(3, HV, K, V)
    bad_beta = rand(2, 3, HV + 1)
    yield ("fused_recurrent_gated_delta_rule",
           lambda: gdn.fused_recurrent_gated_delta_rule(**dict(x, beta=bad_beta), state_pool=pool2,
                                                        state_indices=np.array([2, 0], np.int32)),
           [pool2, bad_beta] + list(x.values()))
    A_log, a, b = poisoned(HV), poisoned(5, HV), poisoned(5, HV)
    yield ("fused_gdn_gating", lambda: gdn.fused_gdn_gating(A_log, a, b, poisoned(HV + 1)),
           [A_log, a, b])
    xc, conv_pool, wide = poisoned(2, C, 5), poisoned(4, C, 16), poisoned(C, 17)
    yield ("causal_conv1d_fn",
           lambda: gdn.causal_conv1d_fn(xc, wide, conv_states=conv_pool,
                                        cache_indices=np.array([3, 1], np.int32)),
           [xc, conv_pool, wide])
    init, states_out = poisoned(2, C, 16, seed=8), poisoned(2, C, 16)
    yield ("causal_conv1d_fn:final_states_out",
           lambda: gdn.causal_conv1d_fn(xc, wide, initial_states=init, return_final_states=True,
                                        final_states_out=states_out),
           [xc, init, states_out, wide])
    xu, conv_state, w_bad = poisoned(2, C), poisoned(2, C, W - 1), poisoned(C + 1, W)
    yield ("causal_conv1d_update", lambda: gdn.causal_conv1d_update(xu, conv_state, w_bad),
           [xu, conv_state, w_bad])
    xn, z = poisoned(3, 8), poisoned(3, 7)
    yield ("rms_norm_gated", lambda: gdn.rms_norm_gated(xn, z, None), [xn, z])
    xl = poisoned(3, 8)
    yield ("l2norm", lambda: gdn.l2norm(xl, eps=-1.0), [xl])


@pytest.mark.parametrize("name,call,buffers", list(failing_calls()),
                         ids=[c[0] for c in failing_calls()])
def test_failing_call_leaves_buffers_byte_identical(name, call, buffers):
    before = snapshot(*buffers)
    with pytest.raises(gdn.GdnValueError):
        call()
    assert changed(before, *buffers) == [], f"{name} wrote into a caller buffer before failing"


# ---- 9. rows of padding sequences are zeros --------------------------------------------------

def stale_heap(*shape):
    """Leaves freed NaN-filled memory of this size behind, where the next allocation of the same
    size usually lands: uninitialised outputs then show NaN."""
    junk = np.full(shape, np.nan, f32)
    del junk


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_padding_rows_of_delta_rule_output_are_zero(fn):
    x = qkv(3, 5)
    pool = np.zeros((4, HV, K, V), f32)
    for _ in range(5):
        stale_heap(*x["v"].shape)
        o, _ = fn(**x, state_pool=pool, state_indices=np.array([0, -1, 2], np.int32))
        assert np.array_equal(o[1], np.zeros_like(o[1]))
        assert np.all(np.isfinite(o))


def test_padding_rows_of_conv_outputs_are_zero():
    lens = [4, 3, 2]
    cu = np.array([0, 4, 7, 9], np.int32)
    x, w = rand(C, 9), rand(C, W)
    for _ in range(5):
        stale_heap(1, 9, C)
        y = gdn.causal_conv1d_fn(x, w, conv_states=np.zeros((3, C, W - 1), f32),
                                 cache_indices=np.array([0, -1, 1], np.int32),
                                 query_start_loc=cu, activation="silu")
        assert np.array_equal(y[:, 4:7], np.zeros((C, lens[1]), f32))
        assert np.all(np.isfinite(y))
        stale_heap(3, C)
        yu = gdn.causal_conv1d_update(rand(3, C), np.zeros((2, C, W - 1), f32), w,
                                      conv_state_indices=np.array([1, -1, 0], np.int32))
        assert np.array_equal(yu[1], np.zeros(C, f32))
        assert np.all(np.isfinite(yu))


# ---- 10. empty inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("B,T", [(0, 5), (2, 0), (0, 0)])
@pytest.mark.parametrize("fn", DELTA_RULES)
def test_delta_rule_empty_batch_or_tokens(fn, B, T):
    h0 = rand(B, HV, K, V)
    o, final = fn(**qkv(B, T), initial_state=h0, output_final_state=True)
    assert o.shape == (B, T, HV, V) and final.shape == (B, HV, K, V)
    assert np.array_equal(final, h0)                    # no token: the state is unchanged
    pool = poisoned(3, HV, K, V)
    pool0 = pool.copy()
    o, _ = fn(**qkv(B, T), state_pool=pool, state_indices=np.arange(B, dtype=np.int32),
              has_initial_state=np.zeros(B, np.int32))   # new sequences start from zeros
    assert o.shape == (B, T, HV, V)
    if T == 0:
        assert not pool[:B].any()
    assert changed(snapshot(pool0[B:]), pool[B:]) == []


@pytest.mark.parametrize("fn", DELTA_RULES)
def test_delta_rule_no_sequences_varlen(fn):
    x = qkv(1, 0)
    pool = poisoned(3, HV, K, V)
    before = snapshot(pool)
    o, final = fn(**x, cu_seqlens=np.array([0], np.int32), initial_state=rand(0, HV, K, V),
                  output_final_state=True)
    assert o.shape == (1, 0, HV, V) and final.shape == (0, HV, K, V)
    o, _ = fn(**x, cu_seqlens=np.array([0], np.int64), state_pool=pool,
              state_indices=np.zeros(0, np.int32))
    assert o.shape == (1, 0, HV, V) and changed(before, pool) == []
    with pytest.raises(gdn.GdnValueError, match="cu_seqlens"):
        fn(**qkv(1, 2), cu_seqlens=np.array([0], np.int32))


@pytest.mark.parametrize("shape", [(0, 5, HV), (3, 0, HV), (0,)])
def test_gating_and_norms_empty(shape):
    a = np.zeros(shape + (HV,) if shape == (0,) else shape, f32)
    g, beta = gdn.fused_gdn_gating(rand(a.shape[-1]), a, a.copy())
    assert g.shape == a.shape and beta.shape == a.shape
    x = np.zeros(a.shape[:-1] + (8,), f32)
    assert gdn.l2norm(x).shape == x.shape
    assert gdn.rms_norm_gated(x, x.copy(), np.ones(8, f32)).shape == x.shape


@pytest.mark.parametrize("B,T", [(0, 5), (2, 0), (0, 0)])
def test_conv_empty(B, T):
    x, w = np.zeros((B, C, T), f32), rand(C, W)
    y, final = gdn.causal_conv1d_fn(x, w, initial_states=rand(B, C, W - 1),
                                    return_final_states=True, activation="silu")
    assert y.shape == (B, C, T) and final.shape == (B, C, W - 1)
    y = gdn.causal_conv1d_update(np.zeros((B, C), f32), np.zeros((B, C, W - 1), f32), w)
    assert y.shape == (B, C)
    y = gdn.causal_conv1d_update(np.zeros((B, C, 1), f32), np.zeros((3, C, W - 1), f32), w,
                                 conv_state_indices=np.zeros(B, np.int32) - 1)
    assert y.shape == (B, C, 1)


def test_conv_no_sequences_varlen():
    y, final = gdn.causal_conv1d_fn(np.zeros((C, 0), f32), rand(C, W),
                                    query_start_loc=np.array([0], np.int32),
                                    return_final_states=True)
    assert y.shape == (C, 0) and final.shape == (0, C, W - 1)


def test_torch_empty_tensors():
    torch = pytest.importorskip("torch")
    x = {n: torch.from_numpy(a) for n, a in qkv(0, 4).items()}
    o, final = gdn.chunk_gated_delta_rule(**x, output_final_state=True)
    assert tuple(o.shape) == (0, 4, HV, V) and tuple(final.shape) == (0, HV, K, V)
    g, beta = gdn.fused_gdn_gating(torch.zeros(HV), torch.zeros(2, 0, HV), torch.zeros(2, 0, HV))
    assert tuple(g.shape) == (2, 0, HV)
    y = gdn.causal_conv1d_fn(torch.zeros(2, C, 0), torch.ones(C, W))
    assert tuple(y.shape) == (2, C, 0)


# ---- 11. contexts of finished threads are destroyed ------------------------------------------

def os_threads():
    return len(os.listdir("/proc/self/task"))


def settled_thread_count(limit, seconds=5.0):
    """The OS thread count once it is at most `limit` (exiting threads take a moment)."""
    deadline = time.monotonic() + seconds
    while True:
        gc.collect()
        n = os_threads()
        if n <= limit or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def run_short_lived_threads(x, count=50):
    """`count` threads, 10 at a time, each calling two ops (one context) and ending."""
    errors = []

    def two_calls():
        try:
            gdn.fused_recurrent_gated_delta_rule(**x)
            gdn.l2norm(x["q"])
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    for _ in range(count // 10):
        batch = [threading.Thread(target=two_calls) for _ in range(10)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    assert not errors


def test_short_lived_threads_leave_no_os_threads():
    """Each thread's context has a pool of cpu worker threads; it used to outlive the thread."""
    x = qkv(1, 2)
    gdn.fused_recurrent_gated_delta_rule(**x)             # this thread's context exists already
    gc.collect()
    threads0 = os_threads()
    run_short_lived_threads(x)
    assert settled_thread_count(threads0 + 2) <= threads0 + 2


def test_short_lived_threads_leave_no_contexts():
    x = qkv(1, 2)
    gdn.fused_recurrent_gated_delta_rule(**x)
    gc.collect()
    contexts0 = _lib.live_contexts()
    run_short_lived_threads(x)
    deadline = time.monotonic() + 5.0                    # a thread's locals go as it exits
    while _lib.live_contexts() > contexts0 and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.02)
    assert _lib.live_contexts() == contexts0


def test_one_context_per_thread_across_many_calls():
    x = qkv(1, 1)
    created = []

    def calls():
        before = _lib.live_contexts()
        for _ in range(200):
            gdn.fused_recurrent_gated_delta_rule(**x)
        created.append(_lib.live_contexts() - before)
        contexts = _lib._local.contexts
        created.append(len(contexts))

    t = threading.Thread(target=calls)
    t.start()
    t.join()
    assert created == [1, 1]


def test_forked_child_makes_its_own_contexts():
    """A forked child has none of the parent's cpu worker threads: it must neither use nor
    destroy (join) the parent's contexts, whether it calls ops or just exits."""
    script = """
import os, sys, numpy as np, gdn
x = np.ones((3, 8), np.float32)
gdn.l2norm(x)                                   # the parent's context, with its workers
for calls in (1, 0):
    pid = os.fork()
    if pid == 0:
        for _ in range(calls):
            gdn.l2norm(x)
        sys.exit(0)                             # a normal exit: thread-locals are released
    _, status = os.waitpid(pid, 0)
    print("child", calls, os.waitstatus_to_exitcode(status))
"""
    child = run_python(script)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split("\n")[:2] == ["child 1 0", "child 0 0"]


# ---- 12a. FLA initial_state has one row per sequence -----------------------------------------

@pytest.mark.parametrize("extra", [1, -1])
@pytest.mark.parametrize("fn", DELTA_RULES)
def test_initial_state_rows_must_match_sequences(fn, extra):
    x = qkv(2, 3)
    with pytest.raises(gdn.GdnValueError,
                       match=r"^initial_state\.shape\[0\] is %d, expected 2" % (2 + extra)):
        fn(**x, initial_state=rand(2 + extra, HV, K, V), output_final_state=True)
    cu = np.array([0, 1, 4, 6], np.int32)                 # varlen: 3 sequences
    xv = qkv(1, 6)
    with pytest.raises(gdn.GdnValueError,
                       match=r"^initial_state\.shape\[0\] is %d, expected 3" % (3 + extra)):
        fn(**xv, cu_seqlens=cu, initial_state=rand(3 + extra, HV, K, V), output_final_state=True)
    with pytest.raises(gdn.GdnValueError, match=r"^initial_state\.shape\[2\] is 8, expected 16"):
        fn(**x, initial_state=rand(2, HV, V, K))          # a VK state without state_v_first


def test_state_pool_may_have_more_slots_than_sequences():
    x = qkv(2, 3)
    pool = np.zeros((5, HV, K, V), f32)
    _, ret = gdn.chunk_gated_delta_rule(**x, state_pool=pool, output_final_state=True)
    assert ret is pool and pool[:2].any() and not pool[2:].any()


@pytest.mark.parametrize("extra", [1, -1])
def test_conv_initial_states_rows_must_match_sequences(extra):
    with pytest.raises(gdn.GdnValueError,
                       match=r"^initial_states\.shape\[0\] is %d, expected 2" % (2 + extra)):
        gdn.causal_conv1d_fn(rand(2, C, 5), rand(C, W), initial_states=rand(2 + extra, C, W - 1),
                             return_final_states=True)
