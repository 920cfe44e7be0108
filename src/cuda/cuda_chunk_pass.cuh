// What the 16-bit state passes share, chunk_state_tc (mma.sync, cuda_chunk_state_tc.cu) and
// chunk_state_wg (warpgroup products, cuda_chunk_state_wg.cu): which tile, head and segment a
// block runs, where a chunk's parts lie in the workspace and how they reach a stage, where a
// split sequence's segment starts, and the output's paired stores.
#ifndef GDN_CUDA_CHUNK_PASS_CUH
#define GDN_CUDA_CHUNK_PASS_CUH

#include "cuda_async_copy.cuh"
#include "cuda_chunk_device.cuh"
#include "cuda_mbarrier.cuh"

// x, y to out's elements off and off + 1 (both columns < V): one 4-byte (16-bit types) or 8-byte
// (f32) store where the pair is aligned to it, else one element at a time.
__device__ __forceinline__ void store_out_pair(const gdn_tensor &out, int64_t off, float x, float y)
{
    const int es = out.dtype == GDN_F32 ? 4 : 2; // element bytes
    if ((reinterpret_cast<uintptr_t>(out.data) + off * es) % (2 * es) != 0) {
        st(out, off, x);
        st(out, off + 1, y);
    } else if (out.dtype == GDN_BF16) {
        store_pair(static_cast<__nv_bfloat16 *>(out.data) + off, x, y);
    } else if (out.dtype == GDN_F16) {
        store_pair(static_cast<__half *>(out.data) + off, x, y);
    } else {
        *reinterpret_cast<float2 *>(static_cast<float *>(out.data) + off) = make_float2(x, y);
    }
}

// ---- staging: one linear copy per part of a stage ---------------------------------------------
//
// The workspace holds every part of a stage with its shared-memory row padding (tc_layout), so a
// part is one contiguous block. On sm_90 one thread moves each block with a bulk copy
// (cp.async.bulk) completing on the stage's mbarrier; elsewhere every thread copies 16 bytes at a
// time with cp.async. (Per-thread copies of padded rows held a quarter of the pass's stall
// samples on their address registers; bulk copies one row at a time were slower still.) On sm_90
// q and k need no copy in the workspace: a TMA tensor map over each input takes a chunk's
// 64 x 64 panels to the stage in tile_at's swizzle (the copies took 6% of the preparation's time
// at T = 131072, HV = 4 on an H100; docs/PERFORMANCE.md).

inline constexpr int kPanelBytes = kPanel * kPanel * 2; // a swizzled 16-bit panel (tile_at)

// Where a chunk's q and k rows lie in the inputs (direct_keys): key head, first token, batch row.
struct key_at {
    int64_t head, tok, row;
};

// A chunk's q or k block from a token panel map (token_panel_map) to the shared address dst, on bar:
// its KP / 64 boxes (64 tokens x 64 elements of the head and batch row `at` names), each a
// 1024-byte aligned panel swizzled as tile_at's, `step` bytes apart. Elements past the
// tensor's ends arrive as zeros and count towards bar's bytes.
template <int KP>
__device__ __forceinline__ void stage_key_panels(unsigned dst, unsigned step,
                                                 const CUtensorMap *map, const key_at &at,
                                                 unsigned bar)
{
#pragma unroll
    for (int pn = 0; pn < KP / kPanel; pn++)
        tensor_copy_4d_g2s(dst + pn * step, map, pn * kPanel, (int)at.head, (int)at.tok,
                           (int)at.row, bar);
}

// Rows len..63 of n swizzled 64-token panels `step` bytes apart (tile_at's: the swizzle moves
// 16-byte pieces within a 128-byte row, so a row is zeroed whole) by nthreads threads from tid:
// a key block (KP / 64 panels, kPanelBytes apart; the fused pass's K panels lie between Q's)
// and the fused pass's v panels. With direct_keys a sequence's last chunk brings in the next
// sequence's rows; they meet only zero rows of V' in the update, but 0 x Inf is NaN, and one
// sequence's NaN must not reach another's state.
__device__ __forceinline__ void zero_panel_rows(unsigned char *blk, int step, int n, int len,
                                                int tid, int nthreads)
{
    const int per = (kC - len) * 8; // 16-byte pieces past row len in a panel
    for (int i = tid; i < n * per; i += nthreads)
        *reinterpret_cast<uint4 *>(blk + (i / per) * step + len * 128 + 16 * (i % per)) =
            make_uint4(0u, 0u, 0u, 0u);
}

// `bytes` (a multiple of 16, both ends 16-byte aligned) from src to the shared address dst:
// one bulk copy on bar (the calling thread alone), or every thread's cp.async.
template <bool BULK>
__device__ __forceinline__ void stage_part(unsigned dst, const void *src, int bytes, unsigned bar)
{
    if constexpr (BULK) {
        bulk_copy_g2s(dst, src, bytes, bar);
    } else {
        (void)bar;
        const unsigned char *g = static_cast<const unsigned char *>(src);
        for (int o = 16 * threadIdx.x; o < bytes; o += 16 * kTcThreads)
            cp_async16s(dst + o, g + o);
    }
}

// Where chunk ch's parts of a state-pass stage lie in the 16-bit workspace (ks: its key head's
// Qd / Kd block; u: U's 32-column tile holding value column v0, the next tile after it).
struct chunk_parts {
    const unsigned char *w, *wl, *q, *k, *u, *aq;
};

template <class E, int KP>
__device__ __forceinline__ chunk_parts chunk_parts_of(const chunk_pass_args &p, int64_t ch,
                                                      int64_t ks, int v0)
{
    constexpr int kb = tc_key_block(KP, sizeof(E)), ab = tc_aq_block(sizeof(E));
    chunk_parts c;
    c.w = static_cast<const unsigned char *>(p.work.W) + ch * kb;
    c.wl = static_cast<const unsigned char *>(p.work.Wl) + ch * kb;
    c.q = static_cast<const unsigned char *>(p.work.Qd) + ks * kb;
    c.k = static_cast<const unsigned char *>(p.work.Kd) + ks * kb;
    c.u = static_cast<const unsigned char *>(p.work.U) +
          (ch * (p.VP / kVT) + v0 / kVT) * (int64_t)tc_u_tile();
    c.aq = static_cast<const unsigned char *>(p.work.Aq) + ch * ab;
    return c;
}

// Segment j > 0 of a split sequence starts from the state the stitch left in the N part of its
// predecessor's map (stitch_starts): row k, column v of value head hv.
__device__ __forceinline__ float stitched_start(const chunk_pass_args &p, int64_t slot,
                                                int64_t hv, int k, int v)
{
    const int64_t ldm = p.KP + p.VP;
    return p.maps[((slot - 1) * p.shape.HV + hv) * p.KP * ldm + k * ldm + p.KP + v];
}

// Which (column tile, head, segment slot) a state-pass block runs, for tiles of `cols` value
// columns. The maps pass (!OUT) has KP / cols more tiles per head: those below KP / cols are
// columns of M (identity start, no U), the rest of N. False when the block has nothing to do:
// past the last slot, the map of a sequence's last segment (never used), or a padded sequence.
struct state_block {
    int tile, v0;             // tile index; its first column of V (of M for m_cols)
    int64_t hv, slot, n, seg; // value head, segment slot, its sequence and segment there
    bool last_seg, m_cols;
    float *state;             // the sequence's state in the pool, and whether the pass starts
    bool init;                // from it (sequence_state)
};

template <bool OUT>
__device__ __forceinline__ bool state_block_for(const chunk_pass_args &p, int64_t id, int cols,
                                                int KP, state_block &b)
{
    const int64_t ntiles = (OUT ? 0 : KP / cols) + p.VP / cols;
    b.tile = (int)(id % ntiles);
    b.hv = (id / ntiles) % p.shape.HV, b.slot = id / (ntiles * p.shape.HV);
    if (b.slot >= slot_first(p.seqs, p.shape.N))
        return false;
    b.n = sequence_at_slot(p.seqs, p.shape, b.slot), b.seg = b.slot - slot_first(p.seqs, b.n);
    b.last_seg = b.slot + 1 == slot_first(p.seqs, b.n + 1);
    if (!OUT && b.last_seg)
        return false;
    b.m_cols = !OUT && b.tile < KP / cols;
    b.v0 = (OUT || b.m_cols ? b.tile : b.tile - KP / cols) * cols;
    return sequence_state(p.pool, p.shape, b.n, b.hv, b.state, b.init);
}

// ---- a map from its segment's last chunks ----------------------------------------------------
//
// A segment's map sends the state it starts from to its end: S_end = M S_start + N. A chunk's
// transition, the product of its tokens' e^(g_t) (I - beta_t k_t k_t^T), has norm at most
// e^(G_last) (the workspace's gl) where ||k_t|| <= 1 (the in-kernel L2 norm) and beta_t lies in
// [0, 2]. So where the last w chunks' gl multiply to less than e^kTailLog = 2^-64, whatever the
// segment held before them (the exact state there) reaches the exact end times less than 2^-64:
// 40 bits under f32's precision of that state. FlashQLA cuts at e^-10 (4.5e-5 of the state, near
// the high mode's 5e-5 bar); this cut's tails are about four times as long. The maps pass then
// runs only those w chunks, from zeros, for N, and M, the whole segment's transition, is 0
// (flagged in m_zero, so the stitch takes N alone). On the benchmark's gates, logsigmoid(randn +
// 3) (about -4.8 a chunk), that is about 10 chunks of a segment's 128; on the tests'
// logsigmoid(randn) (-52) one; on long memory no tail gets there and the map runs its whole
// segment. A NaN or Inf in a skipped chunk's k, v, g or beta, or in the state entering the
// segment, shows in that segment's outputs (the output pass runs every chunk) but no longer in
// later segments' states.
constexpr float kTailLog = -44.3614f; // ln 2^-64

// The last chunks of a segment (nch chunks from `first`, chunk c0 of sequence s; value head hv)
// that its map needs, w, where the bound above holds (then M = 0); 0 where no tail of the segment
// gets below e^kTailLog or a beta in it lies outside [0, 2] (a NaN fails either). The same for
// every thread of the block, which must all call it: the block's first warp walks back from the
// segment's end 32 chunks at a time (a prefix sum of log gl across the lanes) and leaves w in
// *slot (shared memory); then every thread checks its share of the tail's beta.
__device__ __forceinline__ int64_t segment_tail(const chunk_pass_args &p, int64_t first,
                                                int64_t nch, int64_t hv, const seq_info &s,
                                                int64_t c0, int *slot)
{
    if (threadIdx.x < 32) {
        const unsigned all = 0xffffffffu;
        const int lane = (int)threadIdx.x;
        int64_t w = 0;      // the tail's chunks, counted from the segment's end (0: none)
        float after = 0.0f; // log gl summed over the chunks after this round's
        for (int64_t base = 0; base < nch && w == 0; base += 32) {
            const int64_t j = nch - 1 - base - lane; // this lane's chunk in the segment
            float lg = j >= 0 ? logf(p.work.gl[(first + j) * p.shape.HV + hv]) : 0.0f;
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_up_sync(all, lg, o);
                if (lane >= o)
                    lg += y;
            }
            lg += after;
            const unsigned hit = __ballot_sync(all, j >= 0 && lg < kTailLog);
            if (hit)
                w = base + __ffs(hit);
            after = __shfl_sync(all, lg, 31);
        }
        if (lane == 0)
            *slot = (int)w;
    }
    __syncthreads();
    const int64_t w = *slot;
    // (a maps segment is never its sequence's last: its chunks are whole)
    const int64_t t0 = s.t0 + kC * (c0 + nch - w);
    bool ok = w > 0;
    for (int64_t i = threadIdx.x; i < kC * w; i += blockDim.x) { // (no early exit: loads overlap)
        float b = ld(p.tail.beta, tok_off(p.tail.beta, s.row, t0 + i, hv));
        if (p.tail.gate_in_kernel)
            b = gate_beta(p.tail.gating, b);
        ok &= b >= 0.0f && b <= 2.0f;
    }
    return __syncthreads_and(ok) ? w : 0;
}

#endif
