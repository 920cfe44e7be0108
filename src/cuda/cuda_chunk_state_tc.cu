// chunk_state_tc: the state pass of the chunked form for bf16 / f16 inputs on mma.sync, its
// output variant (the whole pass of an unsplit call, or a split call's second pass) and its maps
// variant (a split call's first pass, cuda_chunk_stitch.cu).
#include "cuda_chunk_pass.cuh"

namespace {

// ---- the state pass on 16-bit tensor cores -------------------------------------------------
//
// The same pass as chunk_state for bf16/f16 inputs, built for the sequential chain: 8 warps;
// the chunk's W, Q, K', U (f32) and Aqk (W and Aqk as hi and lo) come in one chunk ahead (two
// stages, shared layout fixed at compile time; one bulk copy per part on sm_90, cp.async
// elsewhere), its decay and row factors into registers one chunk ahead too; every operand
// reaches the tensor cores by ldmatrix; the f32 state lives in registers (warp w owns state
// rows 16w..16w+15, all 32 columns) and its 16-bit copy is rewritten after each chunk (three
// barriers a chunk: loads in, V' done, state reads done). Warp w computes rows 16 (w % 4).. of
// V' and O, columns 16 (w / 4)..

// x, y as hi (at hi) and lo (at lo) 16-bit parts of policy P (split_pair); hi alone for a
// policy of the fast mode (S: the policy whose split decides, P: the parts' type).
template <class P, class S = P>
__device__ __forceinline__ void store_pair_split(typename P::st *hi, typename P::st *lo, float x,
                                                 float y)
{
    unsigned h, l;
    split_pair<P>(x, y, h, l);
    *reinterpret_cast<unsigned *>(hi) = h;
    if constexpr (S::split)
        *reinterpret_cast<unsigned *>(lo) = l;
}

// A warp's 16 x 16 output block (rows m0.. of the chunk at token tok0, columns c0..) to out,
// rows < len and columns < V only, in pairs of columns where both are < V: an output of the
// inputs' 16-bit type (policy P) by one test and one 4-byte store (the general store_out_pair
// there cost 2% on the T = 8192, HV = 32 prefill row), others by store_out_pair.
template <class P>
__device__ __forceinline__ void store_out_tile(const gdn_tensor &out, int64_t row, int64_t tok0,
                                               int64_t hv, int m0, int len, int c0, int V,
                                               const float (&acc)[2][4])
{
    using E = typename P::st;
    constexpr gdn_dtype own = P::is_f16 ? GDN_F16 : GDN_BF16;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = m0 + acc_row(2 * h);
        if (r >= len)
            continue;
        const int64_t base = tok_off(out, row, tok0 + r, hv);
#pragma unroll
        for (int jt = 0; jt < 2; jt++) {
            const int v = c0 + acc_col(jt, 2 * h);
            const float x = acc[jt][2 * h], y = acc[jt][2 * h + 1];
            E *pair = static_cast<E *>(out.data) + base + v;
            if (out.dtype == own && v + 1 < V && reinterpret_cast<uintptr_t>(pair) % 4 == 0)
                store_pair(pair, x, y);
            else if (v + 1 < V)
                store_out_pair(out, base + v, x, y);
            else if (v < V)
                st(out, base + v, x);
        }
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kBulkStage = true;
#else
constexpr bool kBulkStage = false;
#endif

// Chunk ch's operands of the state pass (ks: its key head's Qd / Kd block) into the stage at
// shared address `stage`: W (and its lo part when SPLIT) and K' always, U's tile of this block's columns unless `u_in` is
// false (a map's M columns: V' = -W S), Q' and Aqk only for the output pass (OUT). With bulk
// copies only thread 0 calls this, and the stage is ready when bar's phase completes; else every
// thread calls it and the stage is ready after cp.async.wait_group 0 (and a barrier). Aqk's lo
// part comes only when SPLIT.
template <class E, int KP, bool OUT, bool BULK, bool SPLIT>
__device__ __forceinline__ void stage_chunk(const chunk_pass_args &p, unsigned stage, unsigned bar,
                                            int64_t ch, int64_t ks, const key_at &at, int v0,
                                            bool u_in)
{
    constexpr int es = sizeof(E), kb = tc_key_block(KP, es), ub = tc_u_tile();
    constexpr int ab = SPLIT ? tc_aq_block(es) : tc_aq_part(es);
    constexpr tc_layout L = tc_layout_for(KP, es);
    const chunk_parts c = chunk_parts_of<E, KP>(p, ch, ks, v0);
    if (BULK)
        mbar_expect(bar, kb * ((OUT ? 3 : 2) + SPLIT) + (u_in ? ub : 0) + (OUT ? ab : 0));
    stage_part<BULK>(stage + L.w, c.w, kb, bar);
    if (SPLIT)
        stage_part<BULK>(stage + L.wl, c.wl, kb, bar);
    if (BULK && p.direct_keys) { // (KP a multiple of 64: swizzled panels, kb = their bytes)
        stage_key_panels<KP>(stage + L.k, kPanelBytes, &p.kmap, at, bar);
        if (OUT)
            stage_key_panels<KP>(stage + L.q, kPanelBytes, &p.qmap, at, bar);
    } else {
        stage_part<BULK>(stage + L.k, c.k, kb, bar);
        if (OUT)
            stage_part<BULK>(stage + L.q, c.q, kb, bar);
    }
    if (u_in)
        stage_part<BULK>(stage + L.u, c.u, ub, bar);
    if (OUT)
        stage_part<BULK>(stage + L.a, c.aq, ab, bar);
    if (!BULK)
        cp_async_commit();
}

// A chunk's per-row factors for this thread's rows r and r + 8 of the chunk, and its decay.
// They come from global memory, so the pass loads them a chunk ahead (their latency was
// exposed every chunk otherwise).
struct chunk_factors {
    float decay;    // e^(G_last)
    float ek0, ek8; // the update's e^(G_last - G) / ||k|| (16-bit path)
    float eg0, eg8; // the output's scale e^G / ||q|| (output pass only)
};

template <bool OUT>
__device__ __forceinline__ chunk_factors load_factors(const chunk_pass_args &p, int64_t ch, int r)
{
    chunk_factors f;
    f.decay = p.work.gl[ch];
    f.ek0 = p.work.ek[ch * kC + r], f.ek8 = p.work.ek[ch * kC + r + 8];
    f.eg0 = OUT ? p.work.eg[ch * kC + r] : 0.0f, f.eg8 = OUT ? p.work.eg[ch * kC + r + 8] : 0.0f;
    return f;
}

// Warp w's state rows (16w..16w+15, 32 columns) as hi and lo 16-bit parts.
template <int KP, class P>
__device__ __forceinline__ void store_state_split(typename P::st *Sh, typename P::st *Sl, int ld,
                                                  const float (&S)[4][4])
{
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int jt = 0; jt < 4; jt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const int at = (16 * warp + acc_row(e)) * ld + acc_col(jt, e);
            store_pair_split<P>(Sh + at, Sl + at, S[jt][e], S[jt][e + 1]); // (hi alone: fast)
        }
}

// The state pass over one segment of one sequence for one 32-column tile of one head.
// OUT: the output pass (pass 2 above, and the whole pass when the call is not split): tiles
// over V, outputs written, the last segment's state to the pool. !OUT: the maps (pass 1): tiles
// over K + V, no output, [M | N] to p.maps.
template <class P, int KP, bool OUT>
__global__ void __launch_bounds__(kTcThreads, 1)
    chunk_state_tc(const __grid_constant__ chunk_pass_args p)
{
    using E = typename P::st;
    // 1024-byte aligned (tc_bytes has room): the tensor maps' 128-byte swizzle (direct_keys)
    // follows the shared address, tile_at the offset in the stage
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char *const smem = smem_raw + (sbase - raw);
    constexpr tc_layout L = tc_layout_for(KP, sizeof(E));
    constexpr bool kswz = tc_swizzled(KP, sizeof(E)), qswz = tc_swizzled(kC, sizeof(E));
    // V' as hi + lo, the output's right operand (prec_out)
    out_st *const Vn = reinterpret_cast<out_st *>(smem + L.vn), *const Vnl = Vn + kC * L.ldu;
    // diag(e^(G_last - G) / ||k||) V' as hi + lo: the state update's right operand, whose single
    // rounding would land in the state every chunk (with long memory, ~1e-3 of it)
    E *const Vkh = reinterpret_cast<E *>(smem + L.vk), *const Vkl = Vkh + kC * L.ldu;
    // S as two 16-bit tiles, Sh + Sl = S to about 16 bits, the right operand of W S and Q S
    E *const Sh = reinterpret_cast<E *>(smem + L.sb), *const Sl = Sh + KP * L.ldu;
    const ck_pool &a = p.pool;
    state_block b;
    if (!state_block_for<OUT>(p, blockIdx.x, kVT, KP, b))
        return;
    const int tile = b.tile, v0 = b.v0;
    const int64_t hv = b.hv, slot = b.slot, n = b.n, seg = b.seg;
    const bool last_seg = b.last_seg, m_cols = b.m_cols, init = b.init;
    float *const state = b.state;
    const int warp = threadIdx.x >> 5, mt = warp & 3, nh = warp >> 2;
    const bool kv = a.state_layout == GDN_STATE_KV;
    const int64_t s2 = a.state.stride[2], s3 = a.state.stride[3];
    // this warp holds state rows 16w..16w+15; known at compile time when every warp does, so the
    // state update and the output below are one block of code the compiler can interleave
    const bool owns = KP == 16 * (kTcThreads / 32) || 16 * warp < KP;
    float S[4][4];
#pragma unroll
    for (int jt = 0; jt < 4; jt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = 16 * warp + acc_row(e), v = v0 + acc_col(jt, e);
            if (m_cols)
                S[jt][e] = owns && r == v && r < p.shape.K ? 1.0f : 0.0f;
            else if (OUT && seg > 0)
                S[jt][e] = owns ? stitched_start(p, slot, hv, r, v) : 0.0f;
            else
                S[jt][e] = OUT && owns && init && r < p.shape.K && v < p.shape.V
                               ? state[kv ? r * s2 + v * s3 : v * s2 + r * s3]
                               : 0.0f;
        }
    if (owns)
        store_state_split<KP, P>(Sh, Sl, L.ldu, S);
    const seq_info s = seq_span(p.seqs.cu_seqlens, p.shape.T, n);
    const int64_t all = chunk_first(p.seqs, n + 1) - chunk_first(p.seqs, n);
    const int64_t c0 = seg * p.segc, first = chunk_first(p.seqs, n) + c0;
    const int64_t nch = all - c0 < p.segc ? all - c0 : p.segc;
    const int frow = 16 * mt + acc_row(0); // this thread's first row of V' and O
    // stage i's mbarrier (bulk staging): its phase n completes when chunk 2n + i has landed
    __shared__ __align__(8) unsigned long long stage_bar[2];
    const unsigned bar0 = static_cast<unsigned>(__cvta_generic_to_shared(stage_bar));
    const int64_t kh = key_head_of(p.shape, hv);
    auto stage_into = [&](int i, int64_t jj) { // the segment's chunk jj
        const int64_t c = first + jj; // (of all sequences' chunks)
        const key_at at{kh, s.t0 + kC * (c0 + jj), s.row};
        if (!kBulkStage || threadIdx.x == 0)
            stage_chunk<E, KP, OUT, kBulkStage, P::split>(p, sbase + i * L.stage, bar0 + 8 * i,
                                                c * p.shape.HV + hv, key_slot(p.shape, c, kh), at,
                                                v0, !m_cols);
    };
    chunk_factors next{};
    if (nch > 0) {
        if (kBulkStage && threadIdx.x == 0) {
            mbar_init(bar0);
            mbar_init(bar0 + 8);
        }
        __syncthreads(); // the barriers are initialised
        stage_into(0, 0);
        next = load_factors<OUT>(p, first * p.shape.HV + hv, frow);
    }
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.shape.HV + hv, tok0 = s.t0 + kC * (c0 + j);
        const int len = (int)(s.len - kC * (c0 + j) < kC ? s.len - kC * (c0 + j) : kC);
        const unsigned char *stg = smem + (j & 1) * L.stage;
        const E *Ws = reinterpret_cast<const E *>(stg + L.w);
        const E *Qs = reinterpret_cast<const E *>(stg + L.q);
        const E *Ks = reinterpret_cast<const E *>(stg + L.k);
        const E *Wls = reinterpret_cast<const E *>(stg + L.wl);
        const float *Us = reinterpret_cast<const float *>(stg + L.u);
        const out_st *As = reinterpret_cast<const out_st *>(stg + L.a);
        const out_st *Als = reinterpret_cast<const out_st *>(stg + L.a + tc_aq_part(2));
        if constexpr (kBulkStage) {
            mbar_wait(bar0 + 8 * (unsigned)(j & 1), (unsigned)(j >> 1) & 1u);
            if constexpr (kswz)
                if (p.direct_keys && len < kC)
                    zero_panel_rows(smem + (j & 1) * L.stage + L.k, kPanelBytes, KP / kPanel,
                                    len, threadIdx.x, kTcThreads);
        } else {
            cp_async_wait_groups<0>();
        }
        __syncthreads(); // chunk j and the state copy are in; stage (j + 1) & 1 is free
        const chunk_factors fac = next;
        if (j + 1 < nch) {
            stage_into((int)((j + 1) & 1), j + 1);
            next = load_factors<OUT>(p, ch + p.shape.HV, frow);
        }
        const float decay = fac.decay;
        unsigned fa[4], fb[4];
        // this warp's B fragments of S (hi, lo; its 16 columns, all KP rows): V' and the output
        // both take them, so they are loaded once a chunk
        unsigned sh[KP / 16][4], sl[KP / 16][4];
        { // V' = U - W S, W and S as hi + lo (all but lo x lo)
            const float ek0 = fac.ek0, ek8 = fac.ek8; // the update's factor for this thread's rows
            float acc[2][4], acl[2][4];
            float(&lo)[2][4] = lo_chain<P>(acc, acl); // the lo parts' products (split_pair)
            acc_zero(acc);
            acc_zero(lo);
#pragma unroll
            for (int ks = 0; ks < KP / 16; ks++) {
                frag_b2(sh[ks], Sh, L.ldu, 16 * ks, 16 * nh);
                if constexpr (P::split) {
                    frag_a<kswz>(fa, Wls, L.ldk, 16 * mt, 16 * ks);
                    mma2<P>(lo[0], lo[1], fa, sh[ks]);
                }
                frag_a<kswz>(fa, Ws, L.ldk, 16 * mt, 16 * ks);
                mma2<P>(acc[0], acc[1], fa, sh[ks]);
                if constexpr (P::split) {
                    frag_b2(sl[ks], Sl, L.ldu, 16 * ks, 16 * nh);
                    mma2<P>(lo[0], lo[1], fa, sl[ks]);
                }
            }
            add_lo<P>(acc, acl);
#pragma unroll
            for (int jt = 0; jt < 2; jt++)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = 16 * mt + acc_row(e), c = 16 * nh + acc_col(jt, e);
                    const float2 u = m_cols ? make_float2(0.0f, 0.0f)
                                            : *reinterpret_cast<const float2 *>(Us + u_index(r, c));
                    const float x = u.x - acc[jt][e], y = u.y - acc[jt][e + 1];
                    const float f = e == 0 ? ek0 : ek8;
                    store_pair_split<prec_out, P>(Vn + r * L.ldu + c, Vnl + r * L.ldu + c, x, y);
                    store_pair_split<P>(Vkh + r * L.ldu + c, Vkl + r * L.ldu + c, f * x, f * y);
                }
        }
        __syncthreads(); // V' complete
        // S <- decay S + K^T diag(ek) V' before the output, so that its products issue ahead of
        // the output's (the output reads the 16-bit copies of the old S, rewritten after the
        // barrier below, which every chunk still waits on)
        if (owns) {
            float Sa[4][4]; // (f16: the lo parts' products, split_pair)
            float(&SL)[4][4] = lo_chain<P>(S, Sa);
#pragma unroll
            for (int jt = 0; jt < 4; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    S[jt][e] *= decay;
            if constexpr (lo_scaled<P>())
                acc_zero(Sa);
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 16) {
                frag_a_trans<kswz>(fa, Ks, L.ldk, 16 * warp, k0);
                frag_b2(fb, Vkh, L.ldu, k0, 0);
                mma2<P>(S[0], S[1], fa, fb);
                frag_b2(fb, Vkh, L.ldu, k0, 16);
                mma2<P>(S[2], S[3], fa, fb);
                if constexpr (P::split) {
                    frag_b2(fb, Vkl, L.ldu, k0, 0);
                    mma2<P>(SL[0], SL[1], fa, fb);
                    frag_b2(fb, Vkl, L.ldu, k0, 16);
                    mma2<P>(SL[2], SL[3], fa, fb);
                }
            }
            add_lo<P>(S, Sa);
        }
        if (OUT) { // O = scale e^G (Q S) + Aqk V', the row factor applied in f32
            const float eg0 = fac.eg0, eg8 = fac.eg8; // scale e^G of this thread's output rows
            float acc[2][4], acl[2][4];
            float(&lo)[2][4] = lo_chain<P>(acc, acl);
            acc_zero(acc);
            acc_zero(lo);
#pragma unroll
            for (int ks = 0; ks < KP / 16; ks++) {
                frag_a<kswz>(fa, Qs, L.ldk, 16 * mt, 16 * ks);
                mma2<P>(acc[0], acc[1], fa, sh[ks]);
                if constexpr (P::split)
                    mma2<P>(lo[0], lo[1], fa, sl[ks]);
            }
            add_lo<P>(acc, acl);
#pragma unroll
            for (int jt = 0; jt < 2; jt++) {
                acc[jt][0] *= eg0, acc[jt][1] *= eg0;
                acc[jt][2] *= eg8, acc[jt][3] *= eg8;
            }
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 16) { // Aqk and V' as hi + lo, all but lo x lo
                frag_b2(fb, Vn, L.ldu, k0, 16 * nh);
                if constexpr (P::split) {
                    unsigned fbl[4];
                    frag_b2(fbl, Vnl, L.ldu, k0, 16 * nh);
                    frag_a<qswz>(fa, Als, L.ldq, 16 * mt, k0);
                    mma2<prec_out>(acc[0], acc[1], fa, fb);
                    frag_a<qswz>(fa, As, L.ldq, 16 * mt, k0);
                    mma2<prec_out>(acc[0], acc[1], fa, fbl);
                } else {
                    frag_a<qswz>(fa, As, L.ldq, 16 * mt, k0);
                }
                mma2<prec_out>(acc[0], acc[1], fa, fb);
            }
            store_out_tile<P>(p.out, s.row, tok0, hv, 16 * mt, len, v0 + 16 * nh, (int)p.shape.V,
                              acc);
        }
        __syncthreads(); // every read of the 16-bit copies for this chunk is done
        if (owns)
            store_state_split<KP, P>(Sh, Sl, L.ldu, S);
    }
    if (!owns)
        return;
    if (!OUT) { // [M | N] of this segment, columns tile * 32 ..
        float *MN = p.maps + (slot * p.shape.HV + hv) * (int64_t)KP * (KP + p.VP);
#pragma unroll
        for (int jt = 0; jt < 4; jt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                MN[(16 * warp + acc_row(e)) * (KP + p.VP) + tile * kVT + acc_col(jt, e)] = S[jt][e];
        return;
    }
    if (!state || !last_seg)
        return;
#pragma unroll
    for (int jt = 0; jt < 4; jt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = 16 * warp + acc_row(e), v = v0 + acc_col(jt, e);
            if (r < p.shape.K && v < p.shape.V)
                state[kv ? r * s2 + v * s3 : v * s2 + r * s3] = S[jt][e];
        }
}

template <class P, int KP>
void launch_for(bool out, const chunk_pass_args &a, int64_t nslots, int smem, cudaStream_t stream)
{
    const int64_t VT = a.VP / kVT;
    if (!out) {
        cudaFuncSetAttribute(chunk_state_tc<P, KP, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        const unsigned blocks = (unsigned)((KP / kVT + VT) * a.shape.HV * nslots);
        chunk_state_tc<P, KP, false><<<blocks, kTcThreads, smem, stream>>>(a);
        return;
    }
    cudaFuncSetAttribute(chunk_state_tc<P, KP, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         smem);
    const unsigned blocks = (unsigned)(VT * a.shape.HV * nslots);
    chunk_state_tc<P, KP, true><<<blocks, kTcThreads, smem, stream>>>(a);
}

template <class P>
void launch_for(int KP, bool out, const chunk_pass_args &a, int64_t nslots, int smem,
                cudaStream_t stream)
{
    switch (KP) {
    case 32: launch_for<P, 32>(out, a, nslots, smem, stream); break;
    case 64: launch_for<P, 64>(out, a, nslots, smem, stream); break;
    case 96: launch_for<P, 96>(out, a, nslots, smem, stream); break;
    default: launch_for<P, 128>(out, a, nslots, smem, stream); break;
    }
}

} // namespace

void launch_chunk_state_tc(gdn_dtype dt, bool fast, int KP, bool out, const chunk_pass_args &a,
                           int64_t nslots, int smem, cudaStream_t stream)
{
    if (dt == GDN_F16 && fast)
        launch_for<prec_f16_fast>(KP, out, a, nslots, smem, stream);
    else if (dt == GDN_F16)
        launch_for<prec_f16>(KP, out, a, nslots, smem, stream);
    else if (fast)
        launch_for<prec_bf16_fast>(KP, out, a, nslots, smem, stream);
    else
        launch_for<prec_bf16>(KP, out, a, nslots, smem, stream);
}
