// chunk_prep_tc: the preparation of the chunked form for bf16 / f16 inputs, one block of 8 warps
// per (chunk, value head), all chunks in parallel. It makes what chunk_prep makes (the f32 path,
// cuda_chunk_prep.cu) in the 16-bit path's precision (cuda_delta_rule_chunked.cu): W as hi + lo
// parts, U in f32, Aqk as bf16 hi + lo (prec_out), q and k as they came with their row factors
// apart (eg, ek), every block in the state passes' stage layout (cuda_chunk_layout.h). The fast
// mode's policies (P::split false) write the hi parts alone, from products of T rounded once.
// Where the state passes take q and k straight from the inputs (direct_keys, sm_90) it writes
// no copy of them. For the fast mode's unsplit fused pass it can run beside the state pass
// (chunk_prep_tc_beside): a persistent grid on the SMs the pass leaves free, two chunks a block
// at once, a flag per chunk and value head.
#include "cuda_async_copy.cuh"
#include "cuda_chunk_device.cuh"
#include "cuda_chunk_inverse.cuh"
#include "cuda_mbarrier.cuh"

namespace {

// The threads that prepare one chunk: 256 (eight warps) of the block, from the block's first
// (one team, the kernel's grid a block per chunk and value head) or from 256 (the second of the
// two teams of a block that prepares chunks beside the state pass). tid and warp count from the
// team's first thread; its barriers are named (1 + 3 team: the team, then one for each half,
// warps 0-3 and warps 4-7).
struct prep_team {
    int tid, warp, bar;
    __device__ warp_group all() const { return warp_group{warp, 8, tid, bar}; }
    __device__ warp_group half(int h) const
    {
        return warp_group{warp & 3, 4, tid & (kWgThreads - 1), bar + 1 + h};
    }
    __device__ void sync() const { sync_named(bar, kPrepThreads); }
    __device__ void sync_low() const { sync_named(bar + 1, kWgThreads); } // warps 0-3
};

__device__ __forceinline__ prep_team prep_team_of(int team)
{
    const int tid = threadIdx.x - team * kPrepThreads;
    return prep_team{tid, tid >> 5, 1 + 3 * team};
}

// ---- chunk preparation on 16-bit tensor cores ----------------------------------------------
//
// chunk_prep for bf16/f16 inputs: 8 warps, q/k/v rows by 16-byte loads, the norms from shared
// memory, every product by ldmatrix + mma, the 16 x 16 diagonal inverses by forward
// substitution in registers (lane j carries column j), merged pairwise into 32 x 32 and 64 x 64
// blocks by tf32 products (inverse_policy), per-token exponentials computed once.

// Row `off` of a 16-bit tensor into dst (n valid elements, zero to np): 16-byte loads when the
// row is aligned, one element at a time otherwise. One warp.
template <class E>
__device__ __forceinline__ void load_row16(E *dst, const gdn_tensor &t, int64_t off, bool valid,
                                           int n, int np)
{
    const int lane = threadIdx.x & 31;
    const E *src = static_cast<const E *>(t.data) + off;
    const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
    if (valid && vec) {
        for (int x = 8 * lane; x < n; x += 256)
            *reinterpret_cast<uint4 *>(dst + x) = __ldg(reinterpret_cast<const uint4 *>(src + x));
        for (int x = n + lane; x < np; x += 32)
            dst[x] = from_f32<E>(0.0f);
    } else {
        for (int x = lane; x < np; x += 32)
            dst[x] = valid && x < n ? src[x] : from_f32<E>(0.0f);
    }
}

// Whether every token row of t (n elements of 16 bits) starts on 16 bytes and is whole
// 16-byte pieces.
__device__ __forceinline__ bool rows16_ok(const gdn_tensor &t, int64_t n)
{
    return n % 8 == 0 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride[0] % 8 == 0 &&
           t.stride[1] % 8 == 0 && t.stride[2] % 8 == 0;
}

// The chunk's 64 token rows of head `head` (np <= 128 elements wide, zero past the tensor's last
// dim and past len) into dst (row stride ld), by cp.async: a half-warp per row, each thread one
// 16-byte piece of every 16th row. The source pointer steps by 16 rows, so a copy costs a few
// instructions (the index arithmetic per copy was 15% of the preparation's instructions).
// Needs rows16_ok.
template <class E>
__device__ __forceinline__ void stage_rows16(E *dst, int ld, const gdn_tensor &t, int64_t row,
                                             int64_t t0, int64_t head, int len, int np, int tid)
{
    constexpr int rows = kPrepThreads / 16; // rows per round
    static_assert(kC % rows == 0, "whole rounds");
    static_assert(kMaxDim <= 16 * 8, "a half-warp of 16-byte pieces covers a row");
    const int x = 8 * (tid & 15), i0 = tid >> 4;
    if (x >= np)
        return;
    const bool in_row = x < t.shape[3];
    const int64_t step = rows * t.stride[1];
    const E *base = static_cast<const E *>(t.data);
    const E *src = base + row * t.stride[0] + head * t.stride[2] + (t0 + i0) * t.stride[1] + x;
    E *to = dst + i0 * ld + x;
#pragma unroll
    for (int j = 0; j < kC / rows; j++, src += step) {
        const bool valid = in_row && i0 + rows * j < len;
        cp_async16_zfill(to + rows * j * ld, valid ? src : base, valid);
    }
}

// A 16-byte piece of eight 16-bit elements of the policy's type as f32.
template <class P>
__device__ __forceinline__ void unpack8(float (&f)[8], uint4 u)
{
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 t = P::unpack(w[i]);
        f[2 * i] = t.x, f[2 * i + 1] = t.y;
    }
}

// Ik[i] = 1 / ||k_i||, Iq[i] = 1 / ||q_i|| for the chunk's 64 rows (the in-kernel L2 norm, as the
// reference; 1 without it). Two threads per row, 16-byte reads; the two halves of a row take
// alternate runs of four pieces, so the eight threads of a shared-memory wavefront (four rows,
// row starts 16 bytes apart modulo 128 at KP = 64 and 128) hit distinct banks.
template <class P, int KP>
__device__ __forceinline__ void stage_inv_norms(const typename P::st *Ks,
                                                const typename P::st *Qs, int ld, bool l2,
                                                float *Ik, float *Iq, int tid)
{
    static_assert(kPrepThreads == 4 * kC, "two threads per q and k row");
    constexpr int pieces = KP / 8;
    const int r = tid >> 1, h = tid & 1;
    if (!l2) { // the same for the whole block: no shuffle below is left half-done
        if (h == 0)
            (r < kC ? Ik : Iq)[r % kC] = 1.0f;
        return;
    }
    const typename P::st *row = r < kC ? Ks + r * ld : Qs + (r - kC) * ld;
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < pieces / 2; j++) {
        const int c = pieces % 8 == 0 ? (j & 3) + 4 * h + 8 * (j >> 2) : j + h * (pieces / 2);
        float f[8];
        unpack8<P>(f, *reinterpret_cast<const uint4 *>(row + 8 * c));
#pragma unroll
        for (int i = 0; i < 8; i++)
            ss += f[i] * f[i];
    }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    if (h == 0)
        (r < kC ? Ik : Iq)[r % kC] = 1.0f / sqrtf(ss + GDN_L2NORM_EPS);
}

// B fragments of two n-tiles (16 x 16 at (k0, n0)) of B = Y^T, Y row-major [n][k].
template <class E>
__device__ __forceinline__ void frag_b2_trans(unsigned (&b)[4], const E *y, int ld, int k0, int n0)
{
    const int l = threadIdx.x & 31;
    ldsm_x4(b, y + (n0 + (l & 7) + 8 * (l >> 4)) * ld + k0 + 8 * ((l >> 3) & 1));
}

// A fragment (16 x 16 at (m0, k0)) of t diag(cs) f, t f32 row-major, as hi + lo parts in the
// policy's type (split_pair: hi the elements rounded, lo what rounding left, scaled for f16).
// f is a power of two (w_scale_pow2): it scales exactly.
template <class P>
__device__ __forceinline__ void frag_a_f32_cols_split(unsigned (&hi)[4], unsigned (&lo)[4],
                                                      const float *t, int ld, int m0, int k0,
                                                      const float *cs, float f)
{
    const int g = (threadIdx.x & 31) >> 2, c = k0 + 2 * (threadIdx.x & 3);
    const float *r0 = t + (m0 + g) * ld, *r1 = r0 + 8 * ld;
    const float2 s0 = *reinterpret_cast<const float2 *>(cs + c);
    const float2 s1 = *reinterpret_cast<const float2 *>(cs + c + 8);
    const float2 x[4] = {*reinterpret_cast<const float2 *>(r0 + c),
                         *reinterpret_cast<const float2 *>(r1 + c),
                         *reinterpret_cast<const float2 *>(r0 + c + 8),
                         *reinterpret_cast<const float2 *>(r1 + c + 8)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 s = i < 2 ? s0 : s1;
        split_pair<P>(x[i].x * s.x * f, x[i].y * s.y * f, hi[i], lo[i]);
    }
}

// The power of two (down, up = 1 / down) that brings W's row factors, largest magnitudes
// m2[0], m2[1] (one per warp), into [1/2, 1) before they scale T's columns in f16: the factors
// carry 1 / ||k|| (up to 1e3 with the L2 norm) and f16 tops at 65504, while small factors would
// lose their lo parts' bits to f16's subnormals. W comes out of the product times up, exactly.
// bf16 has f32's range: (1, 1), m2 not read.
template <class P>
__device__ __forceinline__ float2 w_scale_pow2(const float *m2)
{
    if constexpr (!P::is_f16)
        return make_float2(1.0f, 1.0f);
    const float m = fmaxf(m2[0], m2[1]);
    if (!(m > 0.0f) || !isfinite(m))
        return make_float2(1.0f, 1.0f);
    int ex;
    frexpf(m, &ex);
    return make_float2(ldexpf(1.0f, -ex), ldexpf(1.0f, ex));
}

// Chunk c's q and k tiles (rows of ld, 16-bit) to key head kh's Qd / Kd blocks in the state
// pass's layout, by warps 4-7 (a half-warp a row, 16 bytes a thread). Only the key head's first
// value head's block runs it: the tiles are the same for all of them.
template <class E, int KP>
__device__ __forceinline__ void copy_key_tiles(const chunk_prep_tc_args &p, int64_t c, int64_t kh,
                                               const E *Qs, const E *Ks, int ld, int tid)
{
    constexpr int ldg = tc_layout_for(KP, sizeof(E)).ldk, kblk = kC * ldg;
    constexpr bool kswz = tc_swizzled(KP, sizeof(E));
    static_assert(KP <= 16 * 8, "a half-warp of 16-byte pieces covers a row");
    const int64_t ks = key_slot(p.shape, c, kh);
    E *qd = static_cast<E *>(p.work.Qd) + ks * kblk, *kd = static_cast<E *>(p.work.Kd) + ks * kblk;
    const int x = 8 * (tid & 15);
    if (x >= KP)
        return;
    for (int i = (tid - 128) >> 4; i < kC; i += 8) {
        const int at = i * ld + x, gat = tile_at<kswz>(i, x, ldg);
        *reinterpret_cast<uint4 *>(qd + gat) = *reinterpret_cast<const uint4 *>(Qs + at);
        *reinterpret_cast<uint4 *>(kd + gat) = *reinterpret_cast<const uint4 *>(Ks + at);
    }
}

// The fused pass's T diag(beta) to its place in chunk ch's Aq block (fused_aq_block: the fast
// mode's rounded once to the inputs' type, the high mode's as hi + lo parts, split_pair), in the
// swizzled layout of Aqk, in eight parts (rows 16 (t % 4).., columns 32 (t / 4)..) that the
// group's warps take in turn, 16 bytes a lane through the warp's scratch (the lo part's through
// its second 512 bytes). Needs T whole (its blocks above the diagonal zero).
template <class P>
__device__ __forceinline__ void store_t_beta(const chunk_prep_tc_args &p, int64_t ch,
                                             const float *Tm, int ld, const float *Bs,
                                             unsigned char *scratch, const warp_group &g)
{
    using E = typename P::st;
    constexpr int ldq = tc_ld(kC, sizeof(E));
    constexpr bool qswz = tc_swizzled(kC, sizeof(E));
    E *at = reinterpret_cast<E *>(static_cast<unsigned char *>(p.work.Aq) +
                                  ch * fused_aq_block(P::split) + fused_tb_at(P::split));
    E *lo = at + tc_aq_part(2) / sizeof(E);
    for (int u = g.warp; u < 8; u += g.nwarps) {
        const int m0 = 16 * (u & 3);
#pragma unroll
        for (int b = 2 * (u >> 2); b < 2 * (u >> 2) + 2; b++) {
            unsigned hw[2][2], lw[2][2];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = m0 + acc_row(2 * h), c = acc_col(2 * b + j, 2 * h);
                    const float2 t = *reinterpret_cast<const float2 *>(Tm + r * ld + c);
                    split_pair<P>(t.x * Bs[c], t.y * Bs[c + 1], hw[j][h], lw[j][h]);
                }
            store_block16<qswz>(at, ldq, m0, 16 * b, hw, scratch);
            if constexpr (P::split)
                store_block16<qswz>(lo, ldq, m0, 16 * b, lw, scratch + 512);
        }
    }
}

// A warp's 16 x 64 accumulator tile (rows m0.., acc_row / acc_col) to the f32 tile x (row stride
// ld), and back: each thread its own elements, so no barrier is needed between the two.
__device__ __forceinline__ void acc_rows_to(float *x, int ld, int m0, const float (&acc)[8][4])
{
#pragma unroll
    for (int jt = 0; jt < 8; jt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2)
            *reinterpret_cast<float2 *>(x + (m0 + acc_row(e)) * ld + acc_col(jt, e)) =
                make_float2(acc[jt][e], acc[jt][e + 1]);
}

__device__ __forceinline__ void acc_rows_from(float (&acc)[8][4], const float *x, int ld, int m0)
{
#pragma unroll
    for (int jt = 0; jt < 8; jt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const float2 v =
                *reinterpret_cast<const float2 *>(x + (m0 + acc_row(e)) * ld + acc_col(jt, e));
            acc[jt][e] = v.x, acc[jt][e + 1] = v.y;
        }
}

// Token t's factors of chunk ch to the workspace (t < 64; per value head: the output's scale
// e^G / ||q||, the update's e^(G_last - G) / ||k||, the fused pass's e^G / ||k||, the chunk's
// decay) and, for W's products, its row factors beta e^G / ||k|| in Sw (f16: their largest
// magnitude per warp at Sw[64 + warp]).
template <class P, bool FUSED>
__device__ __forceinline__ void store_factors(const chunk_prep_tc_args &p, int64_t ch,
                                              const float *Gs, const float *Bs, const float *Ik,
                                              const float *Iq, float *Sw, int t)
{
    const float eg = expf(Gs[t]);
    p.work.eg[ch * kC + t] = p.scale * eg * Iq[t];
    p.work.ek[ch * kC + t] = expf(Gs[kC - 1] - Gs[t]) * Ik[t];
    if (t == 0)
        p.work.gl[ch] = expf(Gs[kC - 1]);
    if constexpr (FUSED) {
        p.work.ew[ch * kC + t] = eg * Ik[t];
    } else {
        Sw[t] = Bs[t] * eg * Ik[t]; // (they scale T's columns)
        if constexpr (P::is_f16) {
            const unsigned m = __reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(Sw[t])));
            if ((t & 31) == 0)
                Sw[kC + (t >> 5)] = __uint_as_float(m);
        }
    }
}

// e^(a - b) on the special-function unit, results below f32's normal range flushed to zero
// (__expf spends three more instructions keeping them subnormal): the decay factors of A and
// Aqk, where a subnormal factor is far under what either keeps.
__device__ __forceinline__ float exp_diff(float a, float b)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((a - b) * 1.44269504088896341f));
    return y;
}

// The thread's two accumulator rows' factors and gates (rows m0 + acc_row(0) and that + 8) for
// A's and Aqk's elements: f = lead[r] f2[r] (lead null: lead_all f2[r]) and G_r, read from
// shared memory once, before any store: read inside each element's expression they would be
// read again after every store to A, which the compiler must assume aliases them.
struct decay_rows {
    float f[2], g[2];
    __device__ decay_rows(int m0, const float *lead, float lead_all, const float *f2,
                          const float *Gs)
    {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = m0 + acc_row(2 * i);
            f[i] = (lead ? lead[r] : lead_all) * f2[r], g[i] = Gs[r];
        }
    }
};

// A's rows m0.. (strictly lower: beta_r e^(G_r - G_c) k_r.k_c / (||k_r|| ||k_c||)) from a warp's
// rows of K K^T in acc. The mask is a select: the unselected value may be infinite or NaN.
__device__ __forceinline__ void a_rows(float *Am, int ld, int m0, const float (&acc)[8][4],
                                       const float *Bs, const float *Ik, const float *Gs)
{
    const decay_rows d(m0, Bs, 0.0f, Ik, Gs);
#pragma unroll
    for (int jt = 0; jt < 8; jt++) {
        const int c0 = acc_col(jt, 0); // even: the pairs below are 8-byte aligned
        const float2 fc = *reinterpret_cast<const float2 *>(Ik + c0);
        const float2 gc = *reinterpret_cast<const float2 *>(Gs + c0);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int i = e >> 1, r = m0 + acc_row(e), cc = c0 + (e & 1);
            const float v = d.f[i] * (e & 1 ? fc.y : fc.x) * acc[jt][e] *
                            exp_diff(d.g[i], e & 1 ? gc.y : gc.x);
            Am[r * ld + cc] = cc < r ? v : 0.0f;
        }
    }
}

// Aqk's rows m0.. (lower with the diagonal: scale e^(G_r - G_c) q_r.k_c / (||q_r|| ||k_c||))
// from a warp's rows of Q K^T in acc, to chunk ch's Aq block (prec_out; with its lo part where
// P::split; FUSED: the fused pass's block, fused_aq_block), in 16 x 16 blocks, 16 bytes a lane
// through the warp's scratch.
template <class P, bool FUSED>
__device__ __forceinline__ void store_aqk_rows(const chunk_prep_tc_args &p, int64_t ch, int m0,
                                               const float (&acc)[8][4], const float *Iq,
                                               const float *Ik, const float *Gs, float *scratch)
{
    using E = typename P::st;
    constexpr int ldq = tc_ld(kC, sizeof(E));
    constexpr bool qswz = tc_swizzled(kC, sizeof(E));
    constexpr int block = FUSED ? fused_aq_block(P::split) : tc_aq_block(2);
    constexpr int first = FUSED ? fused_aqk_at(P::split) : 0;
    out_st *aq = reinterpret_cast<out_st *>(static_cast<unsigned char *>(p.work.Aq) +
                                            ch * block + first); // (prec_out)
    out_st *aql = aq + tc_aq_part(2) / 2;                         // the lo part
    const decay_rows d(m0, nullptr, p.scale, Iq, Gs);
#pragma unroll
    for (int b = 0; b < 4; b++) {
        unsigned hw[2][2], lw[2][2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int jt = 2 * b + j, c0 = acc_col(jt, 0);
            const float2 fc = *reinterpret_cast<const float2 *>(Ik + c0);
            const float2 gc = *reinterpret_cast<const float2 *>(Gs + c0);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int e = 2 * h, r = m0 + acc_row(e);
                const float f = d.f[h], g = d.g[h];
                const float x = f * fc.x * acc[jt][e] * exp_diff(g, gc.x);
                const float y = f * fc.y * acc[jt][e + 1] * exp_diff(g, gc.y);
                split_pair<prec_out>(c0 <= r ? x : 0.0f, c0 + 1 <= r ? y : 0.0f, hw[j][h],
                                     lw[j][h]);
            }
        }
        unsigned char *stage = reinterpret_cast<unsigned char *>(scratch);
        store_block16<qswz>(aq, ldq, m0, 16 * b, hw, stage);
        if constexpr (P::split)
            store_block16<qswz>(aql, ldq, m0, 16 * b, lw, stage + 512);
    }
}

// One value head's A, T, gates (Gs, Bs: 64 floats each) in shared memory.
struct head_tiles {
    float *Am, *Tm, *Gs, *Bs;
};

// Chunk task ct's gates of value head hv (into h0, by threads 0-63) and, where the fused
// pass prepares two heads at once (FUSED, two), of hv + hstep (into h1, by threads 128-191);
// after a barrier, finish_head_gates completes their cumulative decays (stage_gates).
template <bool FUSED>
__device__ __forceinline__ void
stage_head_gates(const ck_tokens &a, const chunk_task &ct, int64_t hv, int64_t hstep, bool two,
                 const head_tiles &h0, const head_tiles &h1, int tid)
{
    stage_gates(a, ct, hv, h0.Gs, h0.Bs, tid);
    if (FUSED && two && tid >= kWgThreads)
        stage_gates(a, ct, hv + hstep, h1.Gs, h1.Bs, tid - kWgThreads);
}

template <bool FUSED>
__device__ __forceinline__ void finish_head_gates(const head_tiles &h0, const head_tiles &h1,
                                                  bool two, int tid)
{
    if (tid >= 32 && tid < kC)
        h0.Gs[tid] += h0.Gs[31];
    if (FUSED && two && tid >= kWgThreads + 32 && tid < kWgThreads + kC)
        h1.Gs[tid - kWgThreads] += h1.Gs[31];
}

// Chunk c's value heads hv and hv + hstep at once, one on each half of the team (warps 0-3 and
// 4-7, each half its own tiles, h0 and h1), for the fused pass: the factors, A, the inverse (its
// 32 x 32 merge's X in A's block above the diagonal), Aqk and T diag(beta), from the key head's
// products kkK (K K^T) and kkQ (Q K^T) in shared memory, each half's gates staged. Each half
// raises its head's flag (p.ready) once its blocks are out; the team is not synchronised.
template <class P>
__device__ __forceinline__ void
prep_head_pair(const chunk_prep_tc_args &p, const head_tiles &h0, const head_tiles &h1,
               const float *kkK, const float *kkQ, int ld, const float *Ik, const float *Iq,
               float *scratch, int64_t c, int64_t hv, int64_t hstep, const prep_team &tm)
{
    const int h = tm.warp >> 2;
    const warp_group g = tm.half(h);
    const head_tiles t = h ? h1 : h0;
    const int64_t ch = c * p.shape.HV + hv + h * hstep;
    const int m0 = 16 * g.warp;
    if (g.tid < kC)
        store_factors<P, true>(p, ch, t.Gs, t.Bs, Ik, Iq, nullptr, g.tid);
    float acc[8][4];
    acc_rows_from(acc, kkK, ld, m0);
    a_rows(t.Am, ld, m0, acc, t.Bs, Ik, t.Gs);
    __syncwarp(); // the diagonal block reads only this warp's rows of A
    inverse_diag_block(t.Am, t.Tm, ld, g.warp);
    g.sync();
    inverse_merge16<inverse_policy<P>>(t.Am, t.Tm, ld, scratch, g.warp);
    __syncwarp(); // (the warp's scratch is read)
    acc_rows_from(acc, kkQ, ld, m0);
    store_aqk_rows<P, true>(p, ch, m0, acc, Iq, Ik, t.Gs, scratch);
    zero_upper_blocks(t.Tm, ld, g.tid, kWgThreads);
    g.sync();
    inverse_merge32<inverse_policy<P>>(t.Am, t.Tm, t.Am + 32, ld, g);
    store_t_beta<P>(p, ch, t.Tm, ld, t.Bs, reinterpret_cast<unsigned char *>(scratch), g);
    g.sync(); // the head's blocks are out
    if (p.ready && g.tid == 0)
        flag_release(p.ready + ch);
}

// Chunk c of `count` value heads of one key head, from hv0 (first_value_head), on a team of 256
// threads, in its shared memory smem (prep_tc_layout, then the v tile or, for the fused pass, a
// second head's tiles: prep_fused_bytes): the key head's work (q and k's loads and norms, the
// products K K^T and Q K^T) once, then each value head's (gates, A, the inverse, Aqk, and
// T diag(beta) or W and U), two at once on the team's halves where the fused pass has two left
// (prep_head_pair), else one on the whole team. More than one value head only for the fused pass,
// which takes no v tile. With p.ready each head's flag goes up once its blocks are out, and the
// team is synchronised on return; without, it returns with its own work done.
template <class P, int KP, bool FUSED>
__device__ __forceinline__ void prep_chunk(const chunk_prep_tc_args &p, unsigned char *smem,
                                           int64_t c, int64_t hv0, int count, const prep_team &tm)
{
    using E = typename P::st;
    constexpr prep_tc_layout L = prep_tc_layout_for(KP, sizeof(E));
    E *Ks = reinterpret_cast<E *>(smem + L.k), *Qs = reinterpret_cast<E *>(smem + L.q);
    E *Vs = reinterpret_cast<E *>(smem + L.v);
    float *Am = reinterpret_cast<float *>(smem + L.a), *Tm = reinterpret_cast<float *>(smem + L.t);
    float *Xs = reinterpret_cast<float *>(smem + L.x);
    float *Gs = reinterpret_cast<float *>(smem + L.g), *Bs = reinterpret_cast<float *>(smem + L.b);
    // 1 / ||q_i||, 1 / ||k_i|| (1 without the in-kernel L2 norm). q and k stay the exact 16-bit
    // inputs and the norms scale the f32 results: rounding normalised rows to 16 bits would
    // cost q.k up to 2^-9 of |q||k|, much more than 2^-9 of q.k when the two are near orthogonal.
    float *Iq = reinterpret_cast<float *>(smem + L.iq);
    float *Ik = reinterpret_cast<float *>(smem + L.ik);
    float *Sw = reinterpret_cast<float *>(smem + L.sw); // [64 + 2]
    // the fused pass's second head's tiles, in the v tile's place and after it
    float *Am2 = reinterpret_cast<float *>(smem + L.v), *Tm2 = Am2 + kC * L.ldf;
    float *Gs2 = Tm2 + kC * L.ldf, *Bs2 = Gs2 + kC;
    const head_tiles h0 = {Am, Tm, Gs, Bs}, h1 = {Am2, Tm2, Gs2, Bs2};
    const ck_tokens &a = p.in;
    chunk_task ct;
    if (!chunk_task_for(p.seqs, p.shape, c, hv0, ct))
        return;
    const seq_info s = ct.s;
    const int64_t t0 = ct.t0, kh = ct.kh, hstep = value_head_step(p.shape);
    const int len = ct.len;
    const int tid = tm.tid, warp = tm.warp;
    const int VP = p.VP;
    // W, W lo, Q and K go to the workspace in the state pass's shared layout (tc_layout): rows of
    // ldg elements, swizzled or padded
    constexpr int ldg = tc_layout_for(KP, sizeof(E)).ldk, kblk = kC * ldg;
    constexpr bool kswz = tc_swizzled(KP, sizeof(E));

    if (rows16_ok(a.k, p.shape.K) && rows16_ok(a.q, p.shape.K) && rows16_ok(a.v, p.shape.V)) {
        // every row is whole 16-byte pieces: one round of cp.async for the whole chunk, in
        // flight while the gates load
        stage_rows16<E>(Ks, L.ldk, a.k, s.row, t0, kh, len, KP, tid);
        stage_rows16<E>(Qs, L.ldk, a.q, s.row, t0, kh, len, KP, tid);
        if (!FUSED) // (the fused pass reads v itself)
            stage_rows16<E>(Vs, p.ldv, a.v, s.row, t0, hv0, len, VP, tid);
        stage_head_gates<FUSED>(p.in, ct, hv0, hstep, count > 1, h0, h1, tid);
        cp_async_wait_all();
    } else {
        stage_head_gates<FUSED>(p.in, ct, hv0, hstep, count > 1, h0, h1, tid);
        for (int i = warp; i < kC; i += kPrepThreads / 32) {
            const int64_t tok = t0 + i;
            const bool valid = i < len;
            load_row16(Ks + i * L.ldk, a.k, tok_off(a.k, s.row, tok, kh), valid, (int)p.shape.K,
                       KP);
            load_row16(Qs + i * L.ldk, a.q, tok_off(a.q, s.row, tok, kh), valid, (int)p.shape.K,
                       KP);
            if (!FUSED)
                load_row16(Vs + i * p.ldv, a.v, tok_off(a.v, s.row, tok, hv0), valid,
                           (int)p.shape.V, VP);
        }
    }
    tm.sync();
    finish_head_gates<FUSED>(h0, h1, count > 1, tid);
    stage_inv_norms<P, KP>(Ks, Qs, L.ldk, a.qk_l2norm, Ik, Iq, tid);
    tm.sync();
    // K K^T (warps 0-3) and Q K^T (warps 4-7), rows 16 (w % 4)..: the same for every value head
    const int m0 = 16 * (warp & 3);
    float acc[8][4];
    {
        const E *X = warp < 4 ? Ks : Qs;
        acc_zero(acc);
        unsigned fa[4], fb[4];
        for (int k0 = 0; k0 < KP; k0 += 16) {
            frag_a(fa, X, L.ldk, m0, k0);
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                frag_b2_trans(fb, Ks, L.ldk, k0, 16 * nt);
                mma2<P>(acc[2 * nt], acc[2 * nt + 1], fa, fb);
            }
        }
    }
    // The fused pass's value heads all start from these products, which would not stay in
    // registers through the inverse (spills): they go to k's and q's tiles, read no more, and
    // each thread takes its own elements back per value head
    float *kk = reinterpret_cast<float *>(warp < 4 ? Ks : Qs);
    static_assert(!FUSED || kC * L.ldf * 4 <= L.q - L.k, "an f32 product fits a tile's place");
    static_assert(!FUSED || (L.v + 2 * kC * L.ldf * 4 + 2 * kC * 4 == prep_fused_bytes(KP)),
                  "a second head's tiles after the v tile's place");
    if constexpr (FUSED) {
        tm.sync(); // every warp is done reading K and Q
        acc_rows_to(kk, L.ldf, m0, acc);
        if (count > 1)
            tm.sync(); // (a pair's halves read each other's rows)
    }
    // Each warp's 1 KiB of the scratch Xs (the first merge's X tile, the 16-byte stores' staging).
    float *scratch = Xs + 256 * warp;
    static_assert(32 * L.ldf * 4 >= kPrepThreads / 32 * 1024, "Xs holds 1 KiB a warp");
    for (int i = 0; i < count;) {
        const int64_t hv = hv0 + i * hstep, ch = c * p.shape.HV + hv;
        const bool pair = FUSED && i + 1 < count;
        if (i > 0) { // (the last heads' readers of the gates are past the barrier that ended them)
            stage_head_gates<FUSED>(p.in, ct, hv, hstep, pair, h0, h1, tid);
            tm.sync();
            finish_head_gates<FUSED>(h0, h1, pair, tid);
            tm.sync();
        }
        if (pair) {
            prep_head_pair<P>(p, h0, h1, reinterpret_cast<const float *>(Ks),
                              reinterpret_cast<const float *>(Qs), L.ldf, Ik, Iq, scratch, c, hv,
                              hstep, tm);
            i += 2;
            if (p.ready || i < count)
                tm.sync(); // the team's shared memory free
            continue;
        }
        i++;
        if constexpr (FUSED)
            acc_rows_from(acc, kk, L.ldf, m0);
        if (tid < kC)
            store_factors<P, FUSED>(p, ch, Gs, Bs, Ik, Iq, Sw, tid);
        if (warp < 4) { // A and the inverse's first steps, while warps 4-7 make Aqk
            a_rows(Am, L.ldf, m0, acc, Bs, Ik, Gs);
            __syncwarp(); // the diagonal block reads only this warp's rows of A
            inverse_diag_block(Am, Tm, L.ldf, warp);
            tm.sync_low(); // warps 0-3
            inverse_merge16<inverse_policy<P>>(Am, Tm, L.ldf, scratch, warp);
        } else {
            store_aqk_rows<P, FUSED>(p, ch, m0, acc, Iq, Ik, Gs, scratch);
            zero_upper_blocks(Tm, L.ldf, tid - 128, 128); // (W, U and T diag(beta) read T)
            if (first_of_key_head(p.shape, hv) && !p.direct_keys) // Q and K as they came
                copy_key_tiles<E, KP>(p, c, kh, Qs, Ks, L.ldk, tid);  // to the workspace
        }
        tm.sync();
        inverse_merge32<inverse_policy<P>>(Am, Tm, Xs, L.ldf, tm.all());
        if constexpr (FUSED) {
            store_t_beta<P>(p, ch, Tm, L.ldf, Bs, reinterpret_cast<unsigned char *>(scratch),
                            tm.all());
            if (p.ready || i < count)
                tm.sync(); // the head's blocks are out, the team's shared memory free
            if (p.ready && tid == 0)
                flag_release(p.ready + ch);
            continue;
        }
        { // W = T diag(beta e^G / ||k||) K (warps 0-3) and U = T diag(beta) V (warps 4-7), warp w
          // rows 16 (w % 4).., all columns: each warp builds its T fragments once. With long memory
          // the state pass's V' = U - W S is a small difference of large terms, so the cancellation
          // must happen in f32: U stays f32, W goes out as hi + lo 16-bit parts, and the products
          // lose nothing to 16 bits. Their right operands are the exact 16-bit k and v rows; the
          // row factors scale T's columns in f32, and that product enters as hi + lo parts. (T
          // rounded once, shared by U and W, only scales V' = T (beta v - beta e^G k S) when T is
          // well conditioned; on some long-memory draws it left the state 1e-3 off, against 6e-6
          // with T split.)
            const bool isw = warp < 4;
            E *w = static_cast<E *>(p.work.W) + ch * kblk;
            E *wl = static_cast<E *>(p.work.Wl) + ch * kblk;
            float *u = static_cast<float *>(p.work.U) + ch * (VP / kVT) * (tc_u_tile() / 4);
            const float2 wpow = w_scale_pow2<P>(Sw + kC);
            unsigned char *stage = reinterpret_cast<unsigned char *>(scratch);
            const E *B = isw ? Ks : Vs;
            const int ldb = isw ? L.ldk : p.ldv, n = isw ? KP : VP;
            const float down = isw ? wpow.x : 1.0f;
            unsigned ta[4][4], tl[4][4], fb[4]; // T diag(row factors) as hi + lo fragments
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
                frag_a_f32_cols_split<P>(ta[ks], tl[ks], Tm, L.ldf, m0, 16 * ks, isw ? Sw : Bs,
                                         down);
            for (int nb = 0; nb < n; nb += 16) {
                float wacc[2][4], wacl[2][4]; // the hi and lo products: two chains, not one
                acc_zero(wacc);
                acc_zero(wacl);
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    frag_b2(fb, B, ldb, 16 * ks, nb);
                    mma2<P>(wacc[0], wacc[1], ta[ks], fb);
                    if constexpr (P::split)
                        mma2<P>(wacl[0], wacl[1], tl[ks], fb);
                }
                if constexpr (P::split)
#pragma unroll
                    for (int jt = 0; jt < 2; jt++)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            wacc[jt][e] += wacl[jt][e] * (1.0f / P::lo_scale); // (split_pair)
                if (isw) { // hi + lo parts, 16 bytes a lane through the warp's scratch
                    unsigned hw[2][2], lw[2][2];
#pragma unroll
                    for (int jt = 0; jt < 2; jt++)
#pragma unroll
                        for (int h = 0; h < 2; h++)
                            split_pair<P>(wpow.y * wacc[jt][2 * h], wpow.y * wacc[jt][2 * h + 1],
                                          hw[jt][h], lw[jt][h]);
                    store_block16<kswz>(w, ldg, m0, nb, hw, stage);
                    if constexpr (P::split)
                        store_block16<kswz>(wl, ldg, m0, nb, lw, stage + 512);
                } else {
#pragma unroll
                    for (int jt = 0; jt < 2; jt++)
#pragma unroll
                        for (int e = 0; e < 4; e += 2) {
                            const int c = nb + acc_col(jt, e); // U tile c / 32, column c % 32
                            store_pair(u + (c / kVT) * (kC * kVT) +
                                           u_index(m0 + acc_row(e), c % kVT),
                                       wacc[jt][e], wacc[jt][e + 1]);
                        }
                }
            }
        }
        break; // (one value head a team where the pass reads W and U)
    }
}

// One chunk a block (blockIdx.x), all chunks in parallel, and one value head (blockIdx.y), or
// for the fused pass (FUSED, p.fused) one key head's value heads.
template <class P, int KP, bool FUSED>
__global__ void __launch_bounds__(kPrepThreads, 2) chunk_prep_tc(const chunk_prep_tc_args p)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t head = blockIdx.y;
    if constexpr (FUSED)
        prep_chunk<P, KP, true>(p, smem, blockIdx.x, first_value_head(p.shape, head),
                                (int)p.shape.ratio, prep_team_of(0));
    else
        prep_chunk<P, KP, false>(p, smem, blockIdx.x, head, 1, prep_team_of(0));
}

// Beside the state pass (p.ready; equal-length sequences): a persistent grid of two-team
// blocks, each team its own shared memory (smem bytes apart) and its own (chunk, key head)
// tasks in the order the state pass's blocks need them (chunk j of every sequence and head,
// then chunk j + 1), raising each value head's flag for the chunk in p.ready (chunk x HV +
// head) once its blocks are in the workspace. It lets the state pass launch at once
// (programmatic dependent launch) and never waits on it: at most a block per free SM (as many as
// keep pace with the pass, prep_beside_blocks), two teams hiding each other's latency, as two
// blocks a SM do.
template <class P, int KP>
__global__ void __launch_bounds__(2 * kPrepThreads, 1)
    chunk_prep_tc_beside(const chunk_prep_tc_args p, int smem_bytes)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    grid_launch_dependents();
    const int team = threadIdx.x / kPrepThreads;
    const prep_team tm = prep_team_of(team);
    unsigned char *smem = smem_raw + team * smem_bytes;
    const int64_t tasks = p.ntasks;
    const int64_t heads = p.shape.N * p.shape.H; // (tasks a step: N x H)
    for (int64_t t = 2 * blockIdx.x + team; t < tasks; t += 2 * gridDim.x) {
        const int64_t j = t / heads, n = t % heads / p.shape.H, kh = t % p.shape.H;
        prep_chunk<P, KP, true>(p, smem, n * p.seqs.seq_chunks + j,
                                first_value_head(p.shape, kh), (int)p.shape.ratio, tm);
        // (it ends with the team synchronised, the chunk's flags up)
    }
}

// The fused pass's preparation (K = 128; not f16's high mode, whose lo parts are scaled).
template <class P>
auto fused_kernel()
{
    if constexpr (lo_scaled<P>())
        return chunk_prep_tc<P, 128, false>; // (never launched: the plan has no fused pass)
    else
        return chunk_prep_tc<P, 128, true>;
}

template <class P>
void launch_for(int KP, const chunk_prep_tc_args &a, int64_t nc, int smem, cudaStream_t stream)
{
    auto kernel = KP == 32 ? chunk_prep_tc<P, 32, false>
                  : KP == 64 ? chunk_prep_tc<P, 64, false>
                  : KP == 96 ? chunk_prep_tc<P, 96, false>
                  : a.fused  ? fused_kernel<P>()
                             : chunk_prep_tc<P, 128, false>;
    if (a.fused)
        smem = prep_fused_bytes(128);
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (nc > 0)
        kernel<<<dim3((unsigned)nc, (unsigned)(a.fused ? a.shape.H : a.shape.HV)), kPrepThreads,
                 smem, stream>>>(a);
}

template <class P>
void launch_beside(const chunk_prep_tc_args &a, int blocks, cudaStream_t stream)
{
    const int team_bytes = prep_fused_team_bytes(128); // (each team's area 128-byte aligned)
    cudaFuncSetAttribute(chunk_prep_tc_beside<P, 128>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * team_bytes);
    if (blocks > 0)
        chunk_prep_tc_beside<P, 128>
            <<<(unsigned)blocks, 2 * kPrepThreads, 2 * team_bytes, stream>>>(a, team_bytes);
}

} // namespace

void launch_chunk_prep_tc_beside(gdn_dtype dt, const chunk_prep_tc_args &a, int blocks,
                                 cudaStream_t stream)
{
    if (dt == GDN_F16)
        launch_beside<prec_f16_fast>(a, blocks, stream);
    else
        launch_beside<prec_bf16_fast>(a, blocks, stream);
}

void launch_chunk_prep_tc(gdn_dtype dt, bool fast, int KP, const chunk_prep_tc_args &a,
                          int64_t nc, int smem, cudaStream_t stream)
{
    if (dt == GDN_F16 && fast)
        launch_for<prec_f16_fast>(KP, a, nc, smem, stream);
    else if (dt == GDN_F16)
        launch_for<prec_f16>(KP, a, nc, smem, stream);
    else if (fast)
        launch_for<prec_bf16_fast>(KP, a, nc, smem, stream);
    else
        launch_for<prec_bf16>(KP, a, nc, smem, stream);
}
