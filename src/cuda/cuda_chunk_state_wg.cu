// chunk_state_wg: the 16-bit state pass on warpgroup products (wgmma), built for sm_90a alone
// (CMakeLists.txt compiles this file only for 90a, and only when 90a is among the
// architectures; the dispatcher then has GDN_CUDA_WG and asks chunk_state_wg_loaded before the
// plan picks it). Its output and maps variants run the same passes as chunk_state_tc's.
#include "cuda_chunk_pass.cuh"
#include "cuda_wgmma.cuh"

namespace {

// ---- the state pass on warpgroup products (sm_90a) ------------------------------------------
//
// chunk_state_tc's pass for KP in {64, 128} and VP a multiple of 64 (K, V rounded up to 32),
// one warpgroup per 64 value columns of a head, built on wgmma (cuda_wgmma.cuh). It runs the
// pass transposed, so that the state is the products' left operand and stays in registers:
//   V'^T = U^T - S^T W^T        (S^T: 64 value rows x KP, hi + lo; W, W lo from the stage)
//   O^T  = (S^T Q^T) diag(scale e^G / ||q||) + V'^T Aqk^T   (V' and Aqk as hi + lo)
//   S^T <- e^G_last S^T + (V'^T diag(e^(G_last - G) / ||k||)) K   (the scaled V'^T as hi + lo)
// Every left operand is an accumulator turned into A fragments in registers, every right operand
// is read by the tensor cores from the stage (the 128-byte-swizzled panels the workspace holds),
// so per chunk the only shared-memory traffic besides the products' own operand reads is the
// stage's bulk copies and the output tile. The precision policy is chunk_state_tc's.
// Warp w of a warpgroup holds value rows 16w..16w+15 of every accumulator (layout in
// cuda_wgmma.cuh). A block runs NW warpgroups (1 or 2) on NW adjacent 64-column tiles of one head
// and segment: they share the stage's W, Q, K and Aqk (each its own U tiles), and with two
// warpgroups on an SM one's non-product phases (fragments, factors, output) overlap the other's
// products, which one warpgroup alone leaves as a chain of latencies.

constexpr int kWgUBytes = wg_u_bytes(); // a warpgroup's U tiles in a stage

// Between f16's lo products and its hi products in chunk_state_wg (split_pair): waits for the lo
// group, brings its n accumulators (which it ran on times lo_scale) back, and fences for the hi
// group.
template <class P, int n>
__device__ __forceinline__ void wg_lo_products_done(float *d)
{
    wg_commit_wait();
    wg_hold<n>(d);
#pragma unroll
    for (int i = 0; i < n; i++)
        d[i] *= 1.0f / P::lo_scale;
    wg_fence();
}

static_assert(kC * kWgCols * 4 <= kWgUBytes && kC * (kWgCols + 8) * 2 <= kWgUBytes,
              "the output tile (f32, or 16-bit rows of kWgCols + 8) fits in U's place");

// Chunk ch's stage for the fused pass (thread 0 only; ready when bar's phase completes): K's
// panels where W's go (so that [K; Q] is one right operand, and the update reads K there), T
// diag(beta) (fast: in Aqk's lo part; SPLIT: hi + lo in k's place, wg_fused_aq_at), ew in W lo's
// place, the update's row factors, v's NW panels of this block's columns from v0 in U's place
// unless !u_in (a map's M columns), and for the output pass Q, Aqk and the output's row factors.
// The Aq block (fused_aq_block) is laid out so that each pass stages what it reads of it by one
// copy.
template <int KP, bool OUT, int NW, bool SPLIT>
__device__ __forceinline__ void stage_chunk_fused(const chunk_pass_args &p, unsigned stage,
                                                  unsigned bar, int64_t ch, const key_at &at,
                                                  int64_t hv, int v0, bool u_in)
{
    constexpr int kb = KP * kPanel * 2, ap = tc_aq_part(2);
    constexpr wg_layout L = wg_layout_for(KP, NW);
    // the Aq block's bytes this pass reads (the maps pass: T diag(beta) alone), from where
    constexpr int ab = OUT ? fused_aq_block(SPLIT) : (SPLIT ? 2 : 1) * ap;
    constexpr int from = OUT ? 0 : fused_tb_at(SPLIT);
    constexpr int to = wg_fused_aq_at(L, SPLIT) + from;
    const unsigned char *aq =
        static_cast<const unsigned char *>(p.work.Aq) + ch * fused_aq_block(SPLIT);
    mbar_expect(bar, (OUT ? 2 : 1) * kb + (u_in ? NW * kPanelBytes : 0) + ab +
                         (OUT ? 3 : 2) * kC * 4);
    stage_key_panels<KP>(stage + L.wq, 2 * kPanelBytes, &p.kmap, at, bar);
    if (OUT)
        stage_key_panels<KP>(stage + L.wq + kPanelBytes, 2 * kPanelBytes, &p.qmap, at, bar);
    if (u_in)
#pragma unroll
        for (int w = 0; w < NW; w++)
            tensor_copy_4d_g2s(stage + L.u + w * kWgUBytes, &p.vmap, v0 + w * kWgCols, (int)hv,
                               (int)at.tok, (int)at.row, bar);
    stage_part<true>(stage + to, aq + from, ab, bar);
    stage_part<true>(stage + L.wl, p.work.ew + ch * kC, kC * 4, bar);
    stage_part<true>(stage + L.ek, p.work.ek + ch * kC, kC * 4, bar);
    if (OUT)
        stage_part<true>(stage + L.eg, p.work.eg + ch * kC, kC * 4, bar);
}

// The fused pass's V': with S^T K^T in acc[0..31] (value rows x chunk rows), W'^T = v^T - (S^T
// K^T) diag(ew) (v's panel at vt, zero for a map's M columns), rounded once to the inputs' type
// (the high mode: as hi + lo parts), then acc[0..31] = -V'^T = -W'^T (T diag(beta))^T on the
// warpgroup's products (T diag(beta) at the shared address tb, swizzled as Aqk; the high mode's
// lo part at tb + its size, and all products of hi and lo parts but lo x lo). V' = U - W S = T
// diag(beta) (v - diag(e^G / ||k||) K S): the difference is taken in f32 before any rounding,
// so long memory's cancellation loses nothing to it (docs/DESIGN.md).
template <class P>
__device__ __forceinline__ void fused_new_values(float *acc, const typename P::st *vt, bool v_in,
                                                 const float *ew, unsigned tb, int vr, int t)
{
    static_assert(!lo_scaled<P>(), "lo parts that sum with the hi products");
    unsigned wf[4][4], wl[4][4];
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        // v^T's A fragment over chunk rows 16 ks..: pairs (c, c + 1) at value v, as acc's
        // (read where !v_in too, then dropped by a select: wgmma after a branch on v_in would be
        // serialised, as ptxas cannot tell that v_in is the same across the warpgroup)
        unsigned va[4];
        frag_a_trans<true>(va, vt, kPanel, vr & ~15, 16 * ks);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = 8 * ks + 2 * q, c = 16 * ks + 8 * (q >> 1) + 2 * t;
            const float2 f = *reinterpret_cast<const float2 *>(ew + c);
            const float2 vv = P::unpack(v_in ? va[q] : 0u);
            split_pair<P>(vv.x - f.x * acc[i], vv.y - f.y * acc[i + 1], wf[ks][q], wl[ks][q]);
        }
    }
#pragma unroll
    for (int i = 0; i < 32; i++)
        acc[i] = 0.0f;
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        const uint64_t d = wg_desc(tb + ks * 32, 16, 1024);
        if constexpr (P::split) {
            const uint64_t dl = wg_desc(tb + tc_aq_part(2) + ks * 32, 16, 1024);
            wg_mma<P::is_f16, -1, 0, 64>(acc, wl[ks], d);
            wg_mma<P::is_f16, -1, 0, 64>(acc, wf[ks], dl);
        }
        wg_mma<P::is_f16, -1, 0, 64>(acc, wf[ks], d);
    }
    wg_commit_wait();
}

// Chunk ch's stage for chunk_state_wg (thread 0 only; ready when bar's phase completes): W,
// W lo (SPLIT), K and the update's row factors always, U's 2 NW tiles of this block's columns from v0
// unless !u_in (a map's M columns), Q, Aqk (its lo part: SPLIT) and the output's row factors
// for the output pass.
template <int KP, bool OUT, int NW, bool SPLIT>
__device__ __forceinline__ void stage_chunk_wg(const chunk_pass_args &p, unsigned stage,
                                               unsigned bar, int64_t ch, int64_t ks,
                                               const key_at &at, int v0, bool u_in)
{
    using E = __nv_bfloat16; // the workspace's 16-bit blocks are the same for f16
    constexpr int kb = tc_key_block(KP, 2), ab = SPLIT ? tc_aq_block(2) : tc_aq_part(2);
    constexpr int ub = NW * kWgUBytes; // the NW warpgroups' tiles are adjacent in the workspace
    constexpr wg_layout L = wg_layout_for(KP, NW);
    const chunk_parts c = chunk_parts_of<E, KP>(p, ch, ks, v0);
    mbar_expect(bar, (2 + SPLIT) * kb + kC * 4 + (u_in ? ub : 0) + (OUT ? kb + ab + kC * 4 : 0));
    if (u_in)
        stage_part<true>(stage + L.u, c.u, ub, bar);
#pragma unroll
    for (int pn = 0; pn < KP / kPanel; pn++) {
        const unsigned w = stage + L.wq + 2 * pn * kPanelBytes;
        stage_part<true>(w, c.w + pn * kPanelBytes, kPanelBytes, bar);
        if (OUT && !p.direct_keys)
            stage_part<true>(w + kPanelBytes, c.q + pn * kPanelBytes, kPanelBytes, bar);
    }
    if (OUT && p.direct_keys) // Q's panels between W's
        stage_key_panels<KP>(stage + L.wq + kPanelBytes, 2 * kPanelBytes, &p.qmap, at, bar);
    if (SPLIT)
        stage_part<true>(stage + L.wl, c.wl, kb, bar);
    if (p.direct_keys)
        stage_key_panels<KP>(stage + L.k, kPanelBytes, &p.kmap, at, bar);
    else
        stage_part<true>(stage + L.k, c.k, kb, bar);
    stage_part<true>(stage + L.ek, p.work.ek + ch * kC, kC * 4, bar);
    if (OUT) {
        stage_part<true>(stage + L.a, c.aq, ab, bar);
        stage_part<true>(stage + L.eg, p.work.eg + ch * kC, kC * 4, bar);
    }
}

// The 16-bit output tile (rows of ld elements, one per token) to `out`, 16 bytes a thread.
template <class E, int ld>
__device__ __forceinline__ void copy_out_pairs(const gdn_tensor &out, const unsigned char *tile,
                                               int64_t row, int64_t tok0, int64_t hv, int v0,
                                               int len)
{
    const int tid = threadIdx.x % kWgThreads, x = 8 * (tid & 7); // this warpgroup's threads
    E *dst = static_cast<E *>(out.data) + tok_off(out, row, tok0 + (tid >> 3), hv) + v0 + x;
    const E *src = reinterpret_cast<const E *>(tile) + (tid >> 3) * ld + x;
#pragma unroll 1
    for (int r = 0; r < kC / 16; r++)
        if ((tid >> 3) + 16 * r < len)
            *reinterpret_cast<uint4 *>(dst + 16 * r * out.stride[1]) =
                *reinterpret_cast<const uint4 *>(src + 16 * r * ld);
}

// Whether this warpgroup's 64 output columns from v0 can leave as 16-bit pairs: an output of the
// inputs' 16-bit type whose rows are 16-byte aligned. The same for every chunk of the block.
template <class P>
__device__ __forceinline__ bool out_pairs_ok(const gdn_tensor &out, int v0, int V)
{
    return out.dtype == (P::is_f16 ? GDN_F16 : GDN_BF16) && v0 + kWgCols <= V &&
           reinterpret_cast<uintptr_t>(out.data) % 16 == 0 && out.stride[0] % 8 == 0 &&
           out.stride[1] % 8 == 0 && out.stride[2] % 8 == 0;
}

// Warpgroup wg's output tile (O^T in registers, 64 value rows x 64 tokens) to `out`, through
// shared memory (`tile`, the warpgroup's U tiles: every thread of the warpgroup has read them)
// so that each token's 64 values leave as whole 16-byte pieces: as 16-bit pairs, transposed by
// stmatrix, where out_pairs_ok said so, else as f32 through the generic store in pairs of columns
// (store_out_pair). A whole chunk's 16-bit pairs, where omap is given, go to the tile in the
// map's 128-byte swizzle and leave by one bulk tensor store that the warpgroup's first thread
// issues (and must see read, bulk_stores_wait, before the tile is written again): the
// warpgroup's chain of steps no longer waits on the copy-out.
template <class P>
__device__ __forceinline__ void store_out_wg(const gdn_tensor &out, unsigned char *tile,
                                             const float *o, int64_t row, int64_t tok0, int64_t hv,
                                             int v0, int len, int V, bool pairs, int wg,
                                             const CUtensorMap *omap)
{
    using E = typename P::st;
    const int tid = threadIdx.x % kWgThreads, lane = tid & 31, warp = tid >> 5;
    if (pairs && omap && len == kC) {
        const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
        const int m = lane >> 3, c = lane & 7, v = 16 * warp + 8 * (m & 1);
#pragma unroll
        for (int j = 0; j < 8; j += 2) { // as below, rows of 128 bytes, swizzled (tile_at)
            const int r = 8 * (j + (m >> 1)) + c;
            stsm_x4_trans(base + (unsigned)(r * 128 + ((((v >> 3) ^ r) & 7) << 4)),
                          P::pack(o[4 * j], o[4 * j + 1]), P::pack(o[4 * j + 2], o[4 * j + 3]),
                          P::pack(o[4 * j + 4], o[4 * j + 5]),
                          P::pack(o[4 * j + 6], o[4 * j + 7]));
        }
        fence_proxy_async();
        sync_warpgroup(wg);
        if (tid == 0)
            tensor_copy_4d_s2g(omap, v0, (int)hv, (int)tok0, (int)row, base);
        return;
    }
    if (pairs) {
        constexpr int ld = kWgCols + 8; // 144-byte rows: a matrix's eight rows in distinct banks
        const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
        const int m = lane >> 3, c = lane & 7, v = 16 * warp + 8 * (m & 1);
#pragma unroll
        for (int j = 0; j < 8; j += 2) // n-tiles j, j + 1 (tokens 8j..8j+15), both 8-row halves
            stsm_x4_trans(base + (unsigned)(((8 * (j + (m >> 1)) + c) * ld + v) * 2),
                              P::pack(o[4 * j], o[4 * j + 1]), P::pack(o[4 * j + 2], o[4 * j + 3]),
                              P::pack(o[4 * j + 4], o[4 * j + 5]),
                              P::pack(o[4 * j + 6], o[4 * j + 7]));
        fence_proxy_async();
        sync_warpgroup(wg);
        copy_out_pairs<E, ld>(out, tile, row, tok0, hv, v0, len);
        return;
    }
    float *t = reinterpret_cast<float *>(tile); // rows of 64 swizzled like U's: conflict-free
    const int vr = 16 * warp + (lane >> 2);
#pragma unroll
    for (int i = 0; i < 32; i++)
        t[swizzled_index<kWgCols>(8 * (i >> 2) + 2 * (lane & 3) + (i & 1),
                                  vr + 8 * ((i >> 1) & 1))] = o[i];
    fence_proxy_async();
    sync_warpgroup(wg);
    for (int i = tid; i < kC * kWgCols / 8; i += kWgThreads) {
        const int c = i >> 3, x = 8 * (i & 7), v = v0 + x;
        if (c >= len)
            continue;
        const int64_t at = tok_off(out, row, tok0 + c, hv) + v;
        for (int e = 0; e < 8 && v + e < V; e += 2) {
            const float y0 = t[swizzled_index<kWgCols>(c, x + e)];
            const float y1 = t[swizzled_index<kWgCols>(c, x + e + 1)];
            if (v + e + 1 < V)
                store_out_pair(out, at + e, y0, y1);
            else
                st(out, at + e, y0);
        }
    }
}

// The state pass over one segment of one sequence for NW x 64 value columns of one head, 64 a
// warpgroup; OUT and the maps pass as in chunk_state_tc (the maps pass's tiles run over the
// K + V columns of [M | N]; with p.tail.on a map runs only the last chunks of its segment that
// still reach the segment's end, segment_tail). NW = 2 runs only for KP = VP = 128
// (wg_width_max), where M and N have two tiles each: a block's two tiles are both of M or both of
// N, of one head and segment (so both warpgroups return together below), and their U tiles are
// adjacent.
template <class P, int KP, bool OUT, int NW, bool FUSED>
__global__ void __launch_bounds__(NW *kWgThreads, 1)
    chunk_state_wg(const __grid_constant__ chunk_pass_args p)
{
    static_assert(NW == 1 || (NW == 2 && KP == 128), "two warpgroups only for K = V = 128");
    static_assert(!FUSED || !lo_scaled<P>(), "no fused pass for f16's high mode");
    static_assert(!FUSED || !P::split ||
                      (KP == 128 && wg_fused_aq_at(wg_layout_for(KP, NW), true) ==
                                        wg_layout_for(KP, NW).k),
                  "the high mode's fused Aq block in k's place");
#ifdef GDN_WGMMA
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    constexpr wg_layout L = wg_layout_for(KP, NW);
    constexpr int NKS = KP / 16, NS = KP / 2; // k-steps over the state's rows; its registers
    const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char *smem = smem_raw + (sbase - raw);
    const ck_pool &a = p.pool;
    const int wg = NW > 1 ? (int)(threadIdx.x / kWgThreads) : 0;
    // Beside the preparation (p.ready: the fused output pass, unsplit), each chunk is staged
    // once its flag is up (its decay with it, in the stage), and the block ends after the
    // preparation's grid, so that the stream's next work follows both (grid_dependency_wait
    // before every return)
    const bool beside = OUT && FUSED && p.ready;
    state_block b; // the blocks' tiles in order: all warpgroups share the head and segment
    if (!state_block_for<OUT>(p, blockIdx.x * NW + wg, kWgCols, KP, b)) {
        if (beside)
            grid_dependency_wait();
        return;
    }
    const int tile = b.tile, v0 = b.v0;
    const int64_t hv = b.hv, slot = b.slot, n = b.n, seg = b.seg;
    const bool last_seg = b.last_seg, m_cols = b.m_cols, init = b.init;
    float *const state = b.state;
    const bool kv = a.state_layout == GDN_STATE_KV;
    const int64_t s2 = a.state.stride[2], s3 = a.state.stride[3];
    const int lane = threadIdx.x & 31, t = lane & 3;
    const int vr = 16 * (threadIdx.x % kWgThreads >> 5) + (lane >> 2); // value rows vr, vr + 8
    // S^T: element 4j + e at value row vr + 8 (e / 2), state row (key) 8j + 2t + (e % 2)
    float S[NS];
#pragma unroll
    for (int i = 0; i < NS; i++) {
        const int v = v0 + vr + 8 * ((i >> 1) & 1), k = 8 * (i >> 2) + 2 * t + (i & 1);
        if (m_cols)
            S[i] = v == k && k < p.shape.K ? 1.0f : 0.0f;
        else if (OUT && seg > 0)
            S[i] = stitched_start(p, slot, hv, k, v);
        else
            S[i] = OUT && init && k < p.shape.K && v < p.shape.V
                       ? state[kv ? k * s2 + v * s3 : v * s2 + k * s3]
                       : 0.0f;
    }
    const seq_info s = seq_span(p.seqs.cu_seqlens, p.shape.T, n);
    const int64_t all = chunk_first(p.seqs, n + 1) - chunk_first(p.seqs, n);
    int64_t c0 = seg * p.segc, first = chunk_first(p.seqs, n) + c0;
    int64_t nch = all - c0 < p.segc ? all - c0 : p.segc;
    if (!OUT && p.tail.on) { // the map from the segment's last chunks that still reach its end
        const int64_t w =
            segment_tail(p, first, nch, hv, s, c0, reinterpret_cast<int *>(smem + L.gl));
        if (m_cols && tile == 0 && threadIdx.x == 0) // (every call writes it: no stale flag)
            p.tail.m_zero[slot * p.shape.HV + hv] = w > 0;
        if (w > 0 && m_cols) // M = 0: what enters the segment no longer reaches its end, and
            return;          // the stitch reads no M flagged zero, so none is written
        if (w > 0) {
            const int64_t skip = nch - w;
            c0 += skip, first += skip, nch = w;
        }
    }
    const unsigned bar0 = sbase + L.bar; // the two stages' barriers
    const int64_t kh = key_head_of(p.shape, hv);
    const bool out_pairs = OUT && out_pairs_ok<P>(p.out, v0, (int)p.shape.V);
    auto stage_into = [&](int i, int64_t jj) { // the segment's chunk jj (thread 0's v0 is the
        const int64_t c = first + jj;              // block's first column)
        const key_at at{kh, s.t0 + kC * (c0 + jj), s.row};
        if (threadIdx.x != 0)
            return;
        if (beside) { // the chunk's decay goes with its stage (the stage's barrier publishes it)
            flag_acquire_wait(p.ready + c * p.shape.HV + hv);
            *reinterpret_cast<float *>(smem + i * L.stage + L.gl) =
                p.work.gl[c * p.shape.HV + hv];
        }
        if constexpr (FUSED)
            stage_chunk_fused<KP, OUT, NW, P::split>(p, sbase + i * L.stage, bar0 + 8 * i,
                                                     c * p.shape.HV + hv, at, hv, v0, !m_cols);
        else
            stage_chunk_wg<KP, OUT, NW, P::split>(p, sbase + i * L.stage, bar0 + 8 * i,
                                                  c * p.shape.HV + hv, key_slot(p.shape, c, kh),
                                                  at, v0, !m_cols);
    };
    float next_decay = 0.0f;
    if (nch > 0) {
        if (threadIdx.x == 0) {
            mbar_init(bar0);
            mbar_init(bar0 + 8);
        }
        __syncthreads(); // the barriers are initialised
        stage_into(0, 0);
        if (!beside)
            next_decay = p.work.gl[first * p.shape.HV + hv];
    }
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.shape.HV + hv, tok0 = s.t0 + kC * (c0 + j);
        const int len = (int)(s.len - kC * (c0 + j) < kC ? s.len - kC * (c0 + j) : kC);
        const unsigned sst = sbase + (unsigned)(j & 1) * L.stage;
        const unsigned char *stg = smem + (j & 1) * L.stage;
        mbar_wait(bar0 + 8 * (unsigned)(j & 1), (unsigned)(j >> 1) & 1u);
        const bool zero = p.direct_keys && len < kC; // (the products read K by the async proxy)
        if (zero) {
            unsigned char *st = smem + (j & 1) * L.stage;
            // K's panels (FUSED: between Q's), and FUSED v's rows too
            zero_panel_rows(st + (FUSED ? L.wq : L.k), (FUSED ? 2 : 1) * kPanelBytes,
                            KP / kPanel, len, threadIdx.x, NW * kWgThreads);
            if (FUSED && !m_cols)
                zero_panel_rows(st + L.u, kWgUBytes, NW, len, threadIdx.x, NW * kWgThreads);
            fence_proxy_async();
        }
        // chunk j is in; every thread is done with chunk j - 1 (its products waited for, its
        // output tile in stage (j + 1) & 1 stored, or read by the bulk store), so that stage is
        // free
        if (OUT && p.out_map && threadIdx.x % kWgThreads == 0)
            bulk_stores_wait<true>();
        if (j > 0 || zero)
            __syncthreads();
        const float decay = beside ? *reinterpret_cast<const float *>(stg + L.gl) : next_decay;
        if (j + 1 < nch) {
            stage_into((int)((j + 1) & 1), j + 1);
            if (!beside)
                next_decay = p.work.gl[ch + p.shape.HV];
        }
        // S^T as hi + lo A fragments: k-step ks holds keys 16ks..16ks+15
        unsigned sh[NKS][4], sl[NKS][4];
#pragma unroll
        for (int ks = 0; ks < NKS; ks++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                split_pair<P>(S[8 * ks + 2 * q], S[8 * ks + 2 * q + 1], sh[ks][q], sl[ks][q]);
        // (the fast mode's policies take sh alone: sl, vsl and vl below are never read)
        // acc: columns 0..63 end as -V'^T = (W S - U)^T (value rows x chunk rows), columns
        // 64..127 (output pass) as O^T = S^T Q^T. The output pass puts -U^T in them before the
        // products (it has no registers to hold U^T beside them); the maps pass loads U^T and
        // decays S while the products run (at one warpgroup per SM the step is a chain of
        // latencies)
        constexpr int NA = OUT ? 64 : 32;
        // U^T's element i of the accumulator layout: value v = vr + 8 ((i / 2) % 2) (U's tile
        // vr / 32 for both), chunk row c = 8 (i / 4) + 2t + i % 2, whose swizzle (c / 2) % 4 is
        // t for every i: u_index(c, v) = u_index(2t, v) + 32 (c - 2t), offsets known at compile
        // time from two per-thread pointers
        const float *Us = reinterpret_cast<const float *>(stg + L.u + wg * kWgUBytes) +
                          (vr >> 5) * (kC * kVT);
        const float *U0 = Us + u_index(2 * t, vr & 31), *U8 = Us + u_index(2 * t, (vr + 8) & 31);
        auto u_at = [&](int i) {
            return m_cols ? 0.0f : ((i >> 1) & 1 ? U8 : U0)[kVT * (8 * (i >> 2) + (i & 1))];
        };
        // With f16's scaled lo parts (split_pair) the lo products run first, as a group of their
        // own on the accumulator times lo_scale (no registers for a second one), which is then
        // scaled back before the hi products
        constexpr bool scaled = lo_scaled<P>();
        float acc[NA];
#pragma unroll
        for (int i = 0; i < NA; i++)
            acc[i] = OUT && !FUSED && i < 32 ? -u_at(i) * P::lo_scale : 0.0f;
        // (FUSED: [K; Q] in [W; Q]'s place, and V' from v and T diag(beta) after the products)
        const unsigned tb = sst + wg_fused_aq_at(L, P::split) + fused_tb_at(P::split);
        const auto *vt = reinterpret_cast<const typename P::st *>(stg + L.u + wg * kWgUBytes);
        const float *ew = reinterpret_cast<const float *>(stg + L.wl);
        // k-step ks's 16 columns: in panel ks / 4 of W lo (wl); W's panel ks / 4 is panel
        // 2 (ks / 4) of wq, with Q's next to it
        auto at = [](int ks) { return (unsigned)((ks >> 2) * kPanelBytes + (ks & 3) * 32); };
        auto wq_desc = [&](int ks) {
            return wg_desc(sst + L.wq + at(ks) + (ks >> 2) * kPanelBytes, 16, 1024);
        };
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            const uint64_t dwq = wq_desc(ks), dwl = wg_desc(sst + L.wl + at(ks), 16, 1024);
            if (!scaled)
                wg_mma<P::is_f16, 1, 0, 2 * NA>(acc, sh[ks], dwq); // [W; Q] or W alone
            if constexpr (P::split) {
                wg_mma<P::is_f16, 1, 0, 2 * NA>(acc, sl[ks], dwq);
                if constexpr (!FUSED) // (the fused pass's K is exact: no lo part)
                    wg_mma<P::is_f16, 1, 0, 64>(acc, sh[ks], dwl);
            }
        }
        if constexpr (scaled) {
            wg_lo_products_done<P, NA>(acc);
#pragma unroll
            for (int ks = 0; ks < NKS; ks++)
                wg_mma<P::is_f16, 1, 0, 2 * NA>(acc, sh[ks], wq_desc(ks));
        }
        if constexpr (OUT) {
            wg_commit_wait();
            if constexpr (FUSED)
                fused_new_values<P>(acc, vt, true, ew, tb, vr, t);
        } else {
            wg_hold<NA>(acc);
            wg_commit();
            float u[32];
            if constexpr (!FUSED)
#pragma unroll
                for (int i = 0; i < 32; i++)
                    u[i] = u_at(i);
#pragma unroll
            for (int i = 0; i < NS; i++) // S's fragments, not S, are the products' operands
                S[i] *= decay * P::lo_scale; // (the update's lo products come first, below)
            wg_wait_all();
            wg_hold<NA>(acc);
            if constexpr (FUSED)
                fused_new_values<P>(acc, vt, !m_cols, ew, tb, vr, t);
            else
#pragma unroll
                for (int i = 0; i < 32; i++)
                    acc[i] -= u[i];
        }
        // V'^T as A fragments over the chunk's rows: as hi + lo for Aqk V' (output pass), and
        // scaled by the update's factor as hi + lo
        const float *ek = reinterpret_cast<const float *>(stg + L.ek);
        unsigned vs[4][4], vsl[4][4], vh[4][4], vl[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int i = 8 * ks + 2 * q, c = 16 * ks + 8 * (q >> 1) + 2 * t;
                const float2 f = *reinterpret_cast<const float2 *>(ek + c);
                const float x = -acc[i], y = -acc[i + 1];
                if (OUT)
                    split_pair<prec_out>(x, y, vs[ks][q], vsl[ks][q]);
                split_pair<P>(x * f.x, y * f.y, vh[ks][q], vl[ks][q]);
            }
        float *ot = acc + (OUT ? 32 : 0); // O^T (output pass)
        if (OUT) {
            const float *eg = reinterpret_cast<const float *>(stg + L.eg);
#pragma unroll
            for (int i = 0; i < 32; i++)
                ot[i] *= eg[8 * (i >> 2) + 2 * t + (i & 1)];
        }
        if (OUT) // (the maps pass did this above)
#pragma unroll
            for (int i = 0; i < NS; i++)
                S[i] *= decay * P::lo_scale; // (scaled: as the products above)
        auto k_desc = [&](int ks) { // (FUSED: K's panels are W's, between Q's)
            return FUSED ? wg_desc(sst + L.wq + ks * 2048, 2 * kPanelBytes, 1024)
                         : wg_desc(sst + L.k + ks * 2048, kPanelBytes, 1024);
        };
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t dk = k_desc(ks);
            if (!scaled)
                wg_mma<P::is_f16, 1, 1, KP>(S, vh[ks], dk);
            if constexpr (P::split)
                wg_mma<P::is_f16, 1, 1, KP>(S, vl[ks], dk);
            if (OUT) { // V'^T Aqk^T, both as hi + lo (all but lo x lo; hi alone: fast)
                const uint64_t da = wg_desc(sst + L.a + ks * 32, 16, 1024);
                const uint64_t dal = wg_desc(sst + L.a + tc_aq_part(2) + ks * 32, 16, 1024);
                if constexpr (P::split) {
                    wg_mma<prec_out::is_f16, 1, 0, 64>(ot, vs[ks], dal);
                    wg_mma<prec_out::is_f16, 1, 0, 64>(ot, vsl[ks], da);
                }
                wg_mma<prec_out::is_f16, 1, 0, 64>(ot, vs[ks], da);
            }
        }
        if constexpr (scaled) { // S back from its scale, then the hi products
            wg_lo_products_done<P, NS>(S);
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
                wg_mma<P::is_f16, 1, 1, KP>(S, vh[ks], k_desc(ks));
        }
        wg_commit_wait();
        if (OUT) {
            sync_warpgroup(wg); // every thread of the warpgroup has read its U tiles
            store_out_wg<P>(p.out, smem + (j & 1) * L.stage + L.u + wg * kWgUBytes, ot, s.row,
                            tok0, hv, v0, len, (int)p.shape.V, out_pairs, wg,
                            p.out_map ? &p.omap : nullptr);
        }
    }
    if (OUT && p.out_map && threadIdx.x % kWgThreads == 0)
        bulk_stores_wait<false>(); // (the tile's shared memory lives as long as the block)
    if (!OUT) { // [M | N] of this segment, columns tile * 64 ..
        float *MN = p.maps + (slot * p.shape.HV + hv) * (int64_t)KP * (KP + p.VP);
#pragma unroll
        for (int i = 0; i < NS; i++) {
            const int v = vr + 8 * ((i >> 1) & 1), k = 8 * (i >> 2) + 2 * t + (i & 1);
            MN[k * (KP + p.VP) + tile * kWgCols + v] = S[i];
        }
        return;
    }
    if (beside)
        grid_dependency_wait();
    if (!state || !last_seg)
        return;
#pragma unroll
    for (int i = 0; i < NS; i++) {
        const int v = v0 + vr + 8 * ((i >> 1) & 1), k = 8 * (i >> 2) + 2 * t + (i & 1);
        if (k < p.shape.K && v < p.shape.V)
            state[kv ? k * s2 + v * s3 : v * s2 + k * s3] = S[i];
    }
#else
    (void)p;
#endif
}

// One of chunk_state_wg's passes (OUT: the output pass, else the maps) with NW warpgroups a
// block: a block per NW x 64 columns of [M | N] (maps) or of V, head and segment slot.
// after_prep: the pass may start while the kernel before it in the stream (the preparation
// beside it) runs (programmatic dependent launch; the pass waits on its flags).
template <class P, int KP, bool OUT, int NW, bool FUSED>
void launch_state_wg_as(const chunk_pass_args &k, int64_t nslots, cudaStream_t stream,
                        bool after_prep)
{
    constexpr int bytes = wg_layout_for(KP, NW).bytes, cols = NW * kWgCols;
    const int64_t tiles = (OUT ? 0 : KP / cols) + k.VP / cols;
    auto kernel = chunk_state_wg<P, KP, OUT, NW, FUSED>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3((unsigned)(tiles * k.shape.HV * nslots));
    cfg.blockDim = dim3(NW * kWgThreads);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = after_prep ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, k);
}

// The fused pass where the arguments ask for it (the plan's: K = V = 128, not f16's high mode),
// else W and U's.
template <class P, int KP, bool OUT, int NW>
void launch_state_wg(const chunk_pass_args &k, int64_t nslots, cudaStream_t stream,
                     bool after_prep)
{
    if constexpr (!lo_scaled<P>() && (KP == 128 || !P::split))
        if (k.fused)
            return launch_state_wg_as<P, KP, OUT, NW, true>(k, nslots, stream, after_prep);
    launch_state_wg_as<P, KP, OUT, NW, false>(k, nslots, stream, after_prep);
}

// launch_state_wg with nw warpgroups a block: 2 only where plan_state chose it, which
// wg_width_max allows only for K = V = 128 (a block's two tiles must be one head's).
template <class P, int KP, bool OUT>
void launch_state_wg_nw(const chunk_pass_args &k, int nw, int64_t nslots, cudaStream_t stream,
                        bool after_prep)
{
    if constexpr (KP == 128)
        if (nw == 2)
            return launch_state_wg<P, KP, OUT, 2>(k, nslots, stream, after_prep);
    launch_state_wg<P, KP, OUT, 1>(k, nslots, stream, after_prep);
}

template <class P, int KP>
void launch_for(bool out, int nw, const chunk_pass_args &a, int64_t nslots, cudaStream_t stream,
                bool after_prep)
{
    if (out)
        launch_state_wg_nw<P, KP, true>(a, nw, nslots, stream, after_prep);
    else
        launch_state_wg_nw<P, KP, false>(a, nw, nslots, stream, after_prep);
}

} // namespace

// Whether the current device runs chunk_state_wg's sm_90a code (not an image built for another
// architecture, where the kernel is empty). Asked once per device.
bool chunk_state_wg_loaded()
{
    static signed char known[64];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64)
        return false;
    if (!known[dev]) {
        cudaFuncAttributes fa;
        const bool ok =
            cudaFuncGetAttributes(&fa, chunk_state_wg<prec_bf16, 128, true, 1, false>) ==
                cudaSuccess &&
            fa.ptxVersion >= 90 && fa.binaryVersion == 90;
        cudaGetLastError();
        known[dev] = ok ? 1 : -1;
    }
    return known[dev] > 0;
}

namespace {
template <class P>
void launch_for_kp(int KP, bool out, int nw, const chunk_pass_args &a, int64_t nslots,
                   cudaStream_t stream, bool after_prep)
{
    if (KP == 64)
        launch_for<P, 64>(out, nw, a, nslots, stream, after_prep);
    else
        launch_for<P, 128>(out, nw, a, nslots, stream, after_prep);
}
} // namespace

void launch_chunk_state_wg(gdn_dtype dt, bool fast, int KP, bool out, int nw,
                           const chunk_pass_args &a, int64_t nslots, cudaStream_t stream,
                           bool after_prep)
{
    if (dt == GDN_F16 && fast)
        launch_for_kp<prec_f16_fast>(KP, out, nw, a, nslots, stream, after_prep);
    else if (dt == GDN_F16)
        launch_for_kp<prec_f16>(KP, out, nw, a, nslots, stream, after_prep);
    else if (fast)
        launch_for_kp<prec_bf16_fast>(KP, out, nw, a, nslots, stream, after_prep);
    else
        launch_for_kp<prec_bf16>(KP, out, nw, a, nslots, stream, after_prep);
}
