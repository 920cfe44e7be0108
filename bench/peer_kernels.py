"""Peer GDN prefill kernels behind one calling convention, for bench/fla_prefill.py.

load_peers() returns {"flashinfer": fn, "flashqla": fn}, holding only the peers that import here
(none: {}). Each fn(q, k, v, g, beta, h0, cu_seqlens) -> (o, final_state) takes FLA's
conventions and converts to the peer's:
  q, k        [1, T, H, K] bf16          v     [1, T, HV, V] bf16 (GVA: HV a multiple of H)
  g           [1, T, HV] f32, log-decay  beta  [1, T, HV] f32
  h0          [N, HV, K, V] f32 (FLA's state layout)
  cu_seqlens  None (one sequence) or an int32/int64 tensor [N+1] on the device
  o           [1, T, HV, V] bf16          final_state [N, HV, K, V] f32
with q/k L2-normalised as FLA's use_qk_l2norm_in_kernel=True does (x * rsqrt(sum(x^2) + 1e-6),
in f32) and scale 1/sqrt(K). Both peers take GVA (HV > H) themselves, so no head is repeated.

Where the peers come from: bench/fetch_peers.sh fills .peers/ (ignored by git, carried to the GPU
machine). A .peers/*.tar.xz archive (packages that fit the carry limit only so packed) is unpacked
on first use into $GDN_PEERS_SITE (default /tmp/gdn_peers_site, outside the repo); that folder and
.peers then go first on sys.path, so an installed copy of a peer is used only where .peers has
none. FlashInfer does not fit the carry limit (see fetch_peers.sh): it loads only where installed.
Nothing is built or fetched here; each peer compiles its kernels at first call (FlashQLA:
TileLang through the machine's nvcc, found from CUDA_HOME, PATH or /usr/local/cuda, with its own
CUTLASS headers, into ~/.tilelang/cache; FlashInfer: CuTe DSL's bundled compiler), so the first
call of each shape is slow (tens of seconds) and must stay out of the timing (the benchmark calls
every side once before it times them).

No code of either project is copied here: only their public entry points are called.
"""
import math
import os
import site
import sys
import tarfile
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_DIR = os.path.join(_ROOT, ".peers")
# where .peers/*.tar.xz is unpacked: outside the repo, so that carrying .peers never carries it
SITE_DIR = os.environ.get("GDN_PEERS_SITE", os.path.join(tempfile.gettempdir(), "gdn_peers_site"))


def _unpack_archives():
    """Unpacks each .peers/*.tar.xz into SITE_DIR once (a stamp file per archive and size)."""
    if not os.path.isdir(PEERS_DIR):
        return
    for name in sorted(os.listdir(PEERS_DIR)):
        if not name.endswith(".tar.xz"):
            continue
        path = os.path.join(PEERS_DIR, name)
        stamp = os.path.join(SITE_DIR, f".{name}.{os.path.getsize(path)}.done")
        if os.path.exists(stamp):
            continue
        os.makedirs(SITE_DIR, exist_ok=True)
        with tarfile.open(path, "r:xz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(SITE_DIR, filter="data")
            else:
                tar.extractall(SITE_DIR)
        open(stamp, "w").close()


def _put_peers_on_path():
    """SITE_DIR and .peers first on sys.path, their .pth files run (nvidia-cutlass-dsl's puts
    its dsl_packages folder on the path that way, were it ever unpacked there)."""
    _unpack_archives()
    for d in (PEERS_DIR, SITE_DIR):  # each goes first in turn: SITE_DIR ends up first
        if os.path.isdir(d) and d not in sys.path:
            before = list(sys.path)
            site.addsitedir(d)
            sys.path[:] = [p for p in sys.path if p not in before] + before


class _Derived:
    """One tensor derived from another (a transposed copy, a cast), made again only when the
    source is another tensor or was written in place since. Holding the source keeps its memory
    from being reused by a new tensor at the same address."""

    def __init__(self, make):
        self.make, self.src, self.version, self.out = make, None, None, None

    def __call__(self, src):
        if self.src is not src or self.version != src._version:
            self.src, self.version, self.out = src, src._version, self.make(src)
        return self.out


def _flashinfer():
    """FlashInfer's chunk_gated_delta_rule (flashinfer/gdn_prefill.py): packed varlen q/k/v
    [T, H, D] (one head size D = K = V), g/beta [T, HV] f32, states [N, HV, V, K] f32 (k last),
    cu_seqlens required, GQA and GVA native. On SM90 it runs CuTe DSL kernels
    (flashinfer/gdn_kernels/delta_rule_dsl/delta_rule_sm90.py, and the context-parallel
    delta_rule_cp_sm90.py when batch x heads is small: use_cp="auto")."""
    import torch
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    # FlashInfer keeps the state as [N, HV, V, K]. The initial state is transposed into that
    # layout once per h0 (and again only if h0 changes), not in every timed call, as a caller
    # that keeps its states in FlashInfer's layout would; FLA and libgdn likewise get their own
    # layout. The final state comes back as a transposed view ([N, HV, K, V] indexing, not
    # contiguous): no copy in the timed call either.
    h0_vk = _Derived(lambda h: h.transpose(-1, -2).contiguous())
    # the longest sequence, read back once per cu_seqlens tensor (lets its context-parallel
    # path size its grid; optional); cu_seqlens itself goes as it comes (its SM90 kernels are
    # compiled for int32 or int64 offsets)
    cu_max = _Derived(lambda c: int((c[1:] - c[:-1]).max().item()))
    one_seq = {}

    def run(q, k, v, g, beta, h0, cu_seqlens):
        T = q.shape[1]
        if cu_seqlens is None:
            key = (T, q.device)
            if key not in one_seq:
                one_seq[key] = torch.tensor([0, T], dtype=torch.int32, device=q.device)
            cu, max_len = one_seq[key], T
        else:
            cu, max_len = cu_seqlens, cu_max(cu_seqlens)
        o, s = chunk_gated_delta_rule(
            q[0], k[0], v[0],
            # g is log-decay: gate_domain="log" makes FlashInfer take exp(g) itself (one
            # elementwise pass in the call; its kernels take the linear alpha)
            g=g[0], beta=beta[0],
            scale=1.0 / math.sqrt(q.shape[-1]),
            initial_state=None if h0 is None else h0_vk(h0),
            output_final_state=True,
            cu_seqlens=cu,
            # FlashInfer honours this with a separate normalising pass (its
            # gdn_kernels/qk_l2norm.py, eps 1e-6 in f32, rounded back to bf16) before the
            # chunked kernels, inside the timed call
            use_qk_l2norm_in_kernel=True,
            max_seqlen=max_len,
            gate_domain="log",
        )
        return o.unsqueeze(0), s.transpose(-1, -2)

    return run


def _flashqla():
    """FlashQLA's chunk_gated_delta_rule (flash_qla/ops/gated_delta_rule/chunk/__init__.py):
    FLA's own calling convention, TileLang kernels (chunk/hopper/ on SM90), bf16/f16 q/k/v,
    GVA native, state [N, HV, K, V] f32 (state_v_first=False), automatic intra-card context
    parallelism for few long sequences (auto_cp=True, its default)."""
    from flash_qla import chunk_gated_delta_rule

    def run(q, k, v, g, beta, h0, cu_seqlens):
        # use_qk_l2norm_in_kernel: FlashQLA normalises q and k in a torch.compile'd pass
        # (flash_qla/utils/math.py, eps 1e-6 in f32) before its kernels, inside the timed call
        return chunk_gated_delta_rule(
            q, k, v, g, beta,
            scale=1.0 / math.sqrt(q.shape[-1]),
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_seqlens,
        )

    return run


_PEERS = {"flashinfer": _flashinfer, "flashqla": _flashqla}


def load_peers(verbose=True):
    """{name: fn} for each peer that imports (an import needs a CUDA device: both pick their
    kernels for the device's architecture when imported)."""
    try:
        _put_peers_on_path()
    except Exception as e:  # a broken archive leaves the installed copies, if any
        if verbose:
            print(f"peer_kernels: unpacking .peers failed: {type(e).__name__}: {e}", flush=True)
    peers = {}
    for name, make in _PEERS.items():
        try:
            peers[name] = make()
        except Exception as e:  # ImportError where absent; others where it cannot run here
            if verbose:
                first = (str(e).splitlines() or [""])[0]
                print(f"peer {name}: not loaded ({type(e).__name__}: {first})", flush=True)
    return peers


if __name__ == "__main__":
    # a small check on a GPU machine: each peer against a float64 recurrence
    import torch

    def reference(q, k, v, g, beta, h0, cu):
        """float64 token-by-token gated delta rule, FLA's conventions, q/k L2-normalised."""
        q, k, v, g, beta = (x[0].double() for x in (q, k, v, g, beta))
        r = v.shape[1] // q.shape[1]
        q = torch.nn.functional.normalize(q, dim=-1, eps=1e-12).repeat_interleave(r, dim=1)
        k = torch.nn.functional.normalize(k, dim=-1, eps=1e-12).repeat_interleave(r, dim=1)
        o, states = torch.empty_like(v), []
        bounds = [0, q.shape[0]] if cu is None else cu.tolist()
        for n in range(len(bounds) - 1):
            S = h0[n].double().clone()
            for t in range(bounds[n], bounds[n + 1]):
                S = S * g[t].exp()[:, None, None]
                u = beta[t][:, None] * (v[t] - torch.einsum("hk,hkv->hv", k[t], S))
                S = S + k[t][:, :, None] * u[:, None, :]
                o[t] = torch.einsum("hk,hkv->hv", q[t], S) / math.sqrt(q.shape[-1])
            states.append(S)
        return o[None], torch.stack(states)

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()

    torch.manual_seed(0)
    dev, T, H, HV, D = "cuda", 256, 2, 4, 128
    peers = load_peers()
    print(f"peers: {sorted(peers)}")
    for seqs in (1, 2):
        q = torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, T, HV, D, device=dev, dtype=torch.bfloat16)
        g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, device=dev) + 3.0)
        beta = torch.rand(1, T, HV, device=dev)
        h0 = 0.1 * torch.randn(seqs, HV, D, D, device=dev)
        cu = None if seqs == 1 else torch.tensor([0, 100, T], device=dev, dtype=torch.int64)
        o_ref, s_ref = reference(q, k, v, g, beta, h0, cu)
        for name, fn in peers.items():
            try:
                o, s = fn(q, k, v, g, beta, h0, cu)
                print(f"{name} seqs={seqs}: o {tuple(o.shape)} rel {rel(o, o_ref):.2e}, "
                      f"state {tuple(s.shape)} rel {rel(s, s_ref):.2e}")
            except Exception as e:
                print(f"{name} seqs={seqs}: {type(e).__name__}: {e}")
