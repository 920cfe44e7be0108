// The chunked WY form of the gated delta rule on CUDA (prefill), on tensor cores.
//
// Two to five launches, all stream-ordered, no host synchronization:
//   1. chunk_offsets: one block turns the sequence lengths (cu_seqlens on the device, or state
//      slots that skip sequences) into each sequence's first chunk, so the other kernels find
//      their chunk without the host ever reading cu_seqlens. Equal-length sequences that all run
//      skip it: their first chunks are multiples of T's (chunk_first).
//   2. chunk_prep, one block per (chunk, value head), all chunks in parallel: gates and their
//      cumulative sum G, L2-normalised q and k, A = diag(beta) (K K^T * exp(G_i - G_j)) strictly
//      lower, its exact inverse T = (I + A)^-1 (16 x 16 diagonal blocks by forward substitution,
//      then block rows; the 16-bit path merges them pairwise), W = T diag(beta e^G) K,
//      U = T diag(beta) V, the masked Aqk = scale (Q K^T * exp(G_i - G_j)) (j <= i),
//      Q' = scale e^G Q and K' = e^(G_last - G) K
//      (the 16-bit path keeps Q and K as they came and their row factors apart).
//      Everything goes to the workspace, except on sm_90 the 16-bit path's q and k, which the
//      state passes take straight from the inputs through TMA tensor maps (direct_keys).
//   3. chunk_state, one block per (32 value columns, value head, sequence), chunks in order: the
//      state tile S (K x 32, f32, shared memory) gives V' = U - W S, the output
//      O = Q' S + Aqk V', and S <- e^G_last S + K'^T V'. The last S goes back to the pool.
//      Calls with few heads and sequences split each sequence into segments that run in parallel
//      (two more launches: their maps, then a stitch; "sequence splitting" below).
// The precision policy follows the input dtype (cuda_mma.cuh): bf16 and f16 operands with f32
// accumulation, f32 inputs as split tf32. The state and U are always f32; W, Q', K', Aqk and V'
// are stored in the policy's type (bf16/f16/f32), W and Aqk on the 16-bit path as hi + lo parts
// (Aqk and the output's V' in bf16 for f16 inputs too: prec_out, below).
//
// f32 inputs run the kernels above (chunk_prep, chunk_state: generic fragment loads, 4 warps).
// bf16/f16 inputs run chunk_prep_tc and chunk_state_tc, the same steps built for speed: ldmatrix
// operands, cp.async staging, the diagonal inverse blocks in registers, the state in registers.
// On sm_90a the split calls' state pass is chunk_state_wg instead (warpgroup products, 64 value
// columns a warpgroup, one or two warpgroups a block; use_wg and plan_state say when).
// Their precision keeps in mind long memory (slow decay, T >> K), where the state predicts the
// new values and V' = U - W S = T (beta v - beta e^G k S) is a small difference of large terms:
// an operand rounded to 16 bits before that difference costs 2^-9 of the large terms, and the
// state carries the error on. So nothing that feeds the difference or the state is rounded
// once: q and k stay the exact 16-bit inputs, their inverse L2 norms and the decay factors
// (scale e^G for Q, e^(G_last - G) for K) applied to f32 results; W and U are T's columns
// scaled in f32 by their row factors (beta e^G / ||k||, beta), as hi + lo 16-bit parts, times
// the exact k and v rows (two products each), W stored as hi + lo, U kept f32; the state enters
// W S and Q S as hi + lo, and the update's scaled V' too (T split because an ill-conditioned
// chunk makes T's entries large and V' = T (...) a cancellation too). Measured on
// long-memory cases (H200): state errors from 1.4e-3 to 2.9e-3 with single-rounded operands;
// 1e-4 to 1.4e-3 with all but T split; 1.7e-6 to 7.8e-6 with T split too. The output's Aqk V'
// takes both as hi + lo too (all but lo x lo). Rounded once, they left f32 outputs 2.1e-3 off
// float64 on average (H100, random problems), and bf16 outputs of one-token problems, one
// product with no sum to average its roundings, past the 5e-3 bar in 4 to 6 of 1500; as hi + lo
// 4.7e-6 on average and 1e-5 at worst, for 3-6% more time on the prefill rows. Keeping only
// the diagonal 16 x 16 blocks as hi + lo was slower (a runtime branch in the mma.sync pass, and
// wgmma serialized on the narrow products) and 130 times less accurate. Aqk and V' are made
// here, not inputs, so that product runs in bf16 for f16 inputs too (prec_out): as f16 parts, an
// Aqk below 2^-3 had its lo part among f16's subnormals, 2^-25 apart, which costs an Aqk of 1e-3
// 3e-5 of itself (one-token outputs with small scores 2.8e-4 off, against 4e-6 for f32
// arithmetic; twenty-ninth session). The parts that meet an f16 input stay f16 (the state in
// W S and Q S, W's lo, T's lo, the update's V'): their lo parts are scaled by 2^11 (split_pair)
// and their products summed apart, then scaled back. Unscaled, small values (v and the states
// 1e-3 of their usual size) left f16 inputs' outputs up to 2.7e-4 and states 4.5e-4 off; scaled,
// 7.5e-6 and 1.8e-6 at worst, for 2-5% more time on f16's prefill rows (the wgmma pass waits
// for the lo products before the hi ones; thirtieth session).
#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "cuda_wgmma.cuh"

#include <cuda.h> // CUtensorMap (the driver's encoder is reached through the runtime)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kC = 64;          // chunk length
constexpr int kThreads = 128;   // 4 warps: one 16-row tile of a chunk each
constexpr int kVT = 32;         // value columns per state block
constexpr int kMaxDim = 128;    // K and V (shared memory budget)

__host__ __device__ constexpr int64_t round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

// Chunks of a run of `tokens` tokens, the last one partial.
__host__ __device__ constexpr int64_t chunks_for(int64_t tokens) { return (tokens + kC - 1) / kC; }

// chunk_state_tc's shared memory for K <= KP and a 16-bit type of es bytes: two stages of W (hi,
// lo), Q, K, U (f32), Aqk (hi, lo); V' (hi, lo); the update's scaled V' (hi, lo); two 16-bit copies
// of S (hi, lo). A compile-time constant in the kernel, so every shared address is a per-thread
// base plus an immediate; dims_for copies it for the host. On the 16-bit path the workspace holds
// each chunk's W, W lo, Q, K and Aqk (hi, lo) with the same padded rows, and U as 32-column tiles
// (u_index), so a stage's parts arrive by one linear copy each. Rows of W, Q, K (KP wide) and Aqk
// (64 wide) that are a multiple of 128 bytes go unpadded with their 16-byte pieces swizzled
// (tile_at in cuda_mma.cuh): ldmatrix reads them without bank conflicts, and every row is whole
// 32-byte sectors. Other widths (KP = 32, 96) get 32-byte pads: with 16-byte pads half the sectors
// the preparation wrote were shared by two rows, and its time went from 360 to 550-600 us
// (measured, T = 8192, HV = 32); 32-byte pads cost 2-way conflicts in ldmatrix instead (the state
// pass of K = 128 took 406 us with them, against 344 us with the conflict-free 16-byte pads).
// Element (r, c) of a U tile (64 rows of 32 f32, unpadded) in the 16-bit path's workspace and
// stages: each row's 8-float groups XOR-swizzled by (r / 2) % 4. The state passes and the
// preparation touch U in accumulator layouts, a warp at once on 8 consecutive rows (pairs of
// columns) or on 4 rows 2 apart (single columns), which the swizzle spreads over all 32 banks.
// (Rows padded to 40 floats did that too, for 25% more bytes; the passes took the same time
// either way, H200, twenty-first session.)
template <int ld> // row length (floats), a multiple of 32
__host__ __device__ constexpr int swizzled_index(int r, int c)
{
    return r * ld + (c ^ (8 * ((r >> 1) & 3)));
}
__host__ __device__ constexpr int u_index(int r, int c) { return swizzled_index<kVT>(r, c); }

// The policy of the output's Aqk V' on the 16-bit path: bf16 hi + lo whatever the input type
// (both operands are made by the kernels; see the precision note at the top).
using prec_out = prec_bf16;
using out_st = prec_out::st;

struct tc_layout {
    int ldk, ldu, ldq;                                 // row strides (elements)
    int w, wl, q, k, u, a, stage, vn, vk, sb, bytes;   // byte offsets; stage: one stage's size
};

// A row of n 16-bit elements of es bytes: unpadded and swizzled when whole 128-byte lines, else
// padded by 32 bytes (above).
__host__ __device__ constexpr bool tc_swizzled(int n, int es) { return n * es % 128 == 0; }
__host__ __device__ constexpr int tc_ld(int n, int es)
{
    return tc_swizzled(n, es) ? n : n + 32 / es;
}
// Bytes per (chunk, value head) of the 16-bit path's workspace arrays: W, W lo, Q, K (rows of
// ldk); Aqk's hi and its lo part (rows of ldq, the lo block right after the hi one); U (VP / 32
// tiles of 64 rows of 32 floats, u_index).
__host__ __device__ constexpr int tc_key_block(int KP, int es) { return kC * tc_ld(KP, es) * es; }
__host__ __device__ constexpr int tc_aq_part(int es) { return kC * tc_ld(kC, es) * es; } // hi or lo
__host__ __device__ constexpr int tc_aq_block(int es) { return 2 * tc_aq_part(es); }
__host__ __device__ constexpr int tc_u_tile() { return kC * kVT * 4; }

__host__ __device__ constexpr tc_layout tc_layout_for(int KP, int es)
{
    tc_layout L{};
    L.ldk = tc_ld(KP, es), L.ldu = kVT + 16 / es, L.ldq = tc_ld(kC, es);
    L.w = 0;
    L.wl = L.w + round_up(kC * L.ldk * es, 16);
    L.q = L.wl + round_up(kC * L.ldk * es, 16);
    L.k = L.q + round_up(kC * L.ldk * es, 16);
    L.u = L.k + round_up(kC * L.ldk * es, 16);
    L.a = L.u + round_up(tc_u_tile(), 16);
    L.stage = L.a + round_up(tc_aq_block(es), 16);
    L.vn = 2 * L.stage;
    L.vk = L.vn + round_up(2 * kC * L.ldu * es, 16);
    L.sb = L.vk + round_up(2 * kC * L.ldu * es, 16);
    L.bytes = L.sb + round_up(2 * KP * L.ldu * es, 16);
    return L;
}

// chunk_prep_tc's shared memory for K <= KP and a 16-bit type of es bytes: q and k tiles (rows of
// ldk); f32 A, T and scratch Xs (row stride ldf, even so that pairs load 8 bytes at a time; the
// second merge's X tile, before that each warp's 1 KiB of staging); per-token G, beta, the norms
// and W's row factors; then the v tile, whose size alone depends on V. A compile-time constant
// in the kernel, like tc_layout: the offsets as kernel parameters were read from the constant
// bank at each use, and those reads stalled (Nsight Compute: 13% of the kernel's stall samples
// on ULDC/LDC, T = 8192, HV = 32).
struct prep_tc_layout {
    int ldk, ldf;                                          // row strides (elements)
    int k, q, a, t, x, g, b, iq, ik, sw, v;                // byte offsets
};

__host__ __device__ constexpr prep_tc_layout prep_tc_layout_for(int KP, int es)
{
    prep_tc_layout L{};
    L.ldk = KP + 16 / es, L.ldf = kC + 4;
    L.k = 0;
    L.q = L.k + (int)round_up(kC * L.ldk * es, 16);
    L.a = L.q + (int)round_up(kC * L.ldk * es, 16);
    L.t = L.a + kC * L.ldf * 4;
    L.x = L.t + kC * L.ldf * 4;
    L.g = L.x + 32 * L.ldf * 4;
    L.b = L.g + kC * 4;
    L.iq = L.b + kC * 4;
    L.ik = L.iq + kC * 4;
    L.sw = L.ik + kC * 4;
    L.v = L.sw + (int)round_up((kC + 2) * 4, 16);
    return L;
}

// Shapes, strides and offsets shared by the host and both kernels.
struct ck_dims {
    int KP, VP;                 // K, V rounded up to 32
    int ldk, ldv, ldu, ldq;     // shared row strides (elements of the stored type)
    int lda, lds, ldx;          // f32 shared row strides: A/T, state tile, block-row scratch
    // shared-memory byte offsets
    int p_k, p_q, p_v, p_a, p_t, p_x, p_g, p_b, prep_bytes;
    int s_w, s_q, s_k, s_u, s_aq, s_vn, s_s, state_bytes;
    int tc_bytes;               // chunk_state_tc's shared memory (tc_layout, aligned to 1024)
    int prep_tc_bytes;          // chunk_prep_tc's (prep_tc_layout, then the v tile)
};

struct ck_args {
    gdn_delta_rule_args a;
    int64_t T, H, HV, K, V, S, ratio, N;
    int64_t nc;                 // chunk slots in the workspace (an upper bound)
    float scale;
    bool has_state;
    ck_dims d;
    // Without cu_seqlens and state_slots every sequence has T tokens and runs: its first chunk
    // and segment slot are n times seq_chunks and seq_slots, and chunk_offsets is skipped. Else
    // they come from the tables chunk_offsets builds (read them through chunk_first, slot_first).
    bool uniform;
    int64_t seq_chunks, seq_slots;
    int64_t *chunk_off;         // [N + 1] first chunk of each sequence
    // Segments (chunk_state_tc): each sequence's chunks in runs of segc that run in parallel,
    // stitched through their maps (see "sequence splitting" below). segc >= every sequence's
    // chunk count when the call is not split: one segment per sequence.
    int64_t segc, nslots;       // chunks per segment; segment slots (an upper bound)
    int64_t *seg_off;           // [N + 1] first segment slot of each sequence
    float *maps;                // [nslots, HV, KP, KP + VP] f32: a segment's [M | N]
    bool wg;                    // the state pass is chunk_state_wg (else chunk_state_tc)
    int nw_maps, nw_out;        // chunk_state_wg's warpgroups per block in each pass
    float *gl;                  // [nc, HV] exp(G_last)
    float *eg;                  // [nc, HV, 64] scale exp(G_i) (16-bit path: Q is stored unscaled)
    float *ek;                  // [nc, HV, 64] 16-bit path: exp(G_last - G_i) / ||k_i|| (Kd holds
                                // k as it came; the factor scales V' in the state update)
    // Per (chunk, value head): the f32 path [64, KP] for W, Qd, Kd, [64, VP] for U and
    // [64, 64] for Aq; the 16-bit path tc_key_block / tc_u_tile / tc_aq_block bytes laid out as
    // the state pass's stage (swizzled or padded rows, U in 32-column tiles, f32). The 16-bit
    // path's Qd and Kd are per (chunk, key head) instead (key_slot): the value heads of a key
    // head share them, and only the first of them writes them.
    void *W, *Qd, *Kd;
    // 16-bit path with bulk staging (sm_90): the state passes take q's and k's swizzled panels
    // straight from the inputs through these tensor maps (key_panel_map), and the preparation
    // writes no Qd / Kd (direct_keys); else they come from Qd / Kd.
    bool direct_keys;
    CUtensorMap qmap, kmap;
    void *Wl;                   // 16-bit path: W's lo part (W is W + Wl)
    void *U;
    void *Aq;
};

ck_dims dims_for(int64_t K, int64_t V, int es)
{
    ck_dims d;
    const int pad = 16 / es;    // keeps 16-byte rows and staggers banks
    d.KP = (int)round_up(K, 32), d.VP = (int)round_up(V, 32);
    d.ldk = d.KP + pad, d.ldv = d.VP + pad, d.ldu = kVT + pad, d.ldq = kC + pad;
    d.lda = kC + 1, d.lds = kVT + 4, d.ldx = kC + 1;
    int at = 0;
    auto take = [&at](int bytes) { int o = at; at += (int)round_up(bytes, 16); return o; };
    d.p_k = take(kC * d.ldk * es);
    d.p_q = take(kC * d.ldk * es);
    d.p_v = take(kC * d.ldv * es);
    d.p_a = take(kC * d.lda * 4);
    d.p_t = take(kC * d.lda * 4);
    d.p_x = take(16 * d.ldx * 4);
    d.p_g = take(kC * 4);
    d.p_b = take(kC * 4);
    d.prep_bytes = at;
    at = 0;
    d.s_w = take(kC * d.ldk * es);
    d.s_q = take(kC * d.ldk * es);
    d.s_k = take(kC * d.ldk * es);
    d.s_u = take(kC * d.ldu * es);
    d.s_aq = take(kC * d.ldq * es);
    d.s_vn = take(kC * d.ldu * es);
    d.s_s = take(d.KP * d.lds * 4);
    d.state_bytes = at;
    d.tc_bytes = tc_layout_for(d.KP, es).bytes + 1024; // + the alignment of the dynamic area
    d.prep_tc_bytes = prep_tc_layout_for(d.KP, es).v + (int)round_up(kC * d.ldv * es, 16);
    return d;
}

// Chunks of sequence n (0 for a padded sequence: it is skipped).
__device__ int64_t chunks_of(const ck_args &p, int64_t n)
{
    if (p.has_state && seq_slot(p.a.state_slots, n, p.S) < 0)
        return 0;
    int64_t len = seq_span(p.a.cu_seqlens, p.T, n).len;
    return len > 0 ? chunks_for(len) : 0;
}

// Segments of a sequence of `chunks` chunks in runs of segc (at least one: an empty sequence
// still carries its state through).
__host__ __device__ constexpr int64_t segments_for(int64_t chunks, int64_t segc)
{
    return chunks > 0 ? (chunks + segc - 1) / segc : 1;
}

// Segments of sequence n once chunk_off is known.
__device__ int64_t segments_of(const ck_args &p, int64_t n)
{
    return segments_for(p.chunk_off[n + 1] - p.chunk_off[n], p.segc);
}

// chunk_off[n] = chunks of the sequences before n, clamped to the workspace's nc; seg_off[n] the
// same for segments, clamped to nslots.
__global__ void __launch_bounds__(1024) chunk_offsets(const ck_args p)
{
    __shared__ int64_t part[1024];
    const int tid = threadIdx.x;
    const int64_t per = (p.N + 1023) / 1024, lo = tid * per;
    const int64_t hi = lo + per < p.N ? lo + per : p.N;
    int64_t sum = 0;
    for (int64_t n = lo; n < hi; n++)
        sum += chunks_of(p, n);
    part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) { // inclusive scan
        int64_t x = tid >= o ? part[tid - o] : 0;
        __syncthreads();
        part[tid] += x;
        __syncthreads();
    }
    int64_t base = tid ? part[tid - 1] : 0;
    for (int64_t n = lo; n < hi; n++) {
        p.chunk_off[n] = base < p.nc ? base : p.nc;
        base += chunks_of(p, n);
    }
    if (tid == 1023)
        p.chunk_off[p.N] = part[1023] < p.nc ? part[1023] : p.nc;
    __syncthreads(); // chunk_off is complete (global writes of this block are visible after it)
    // seg_off: the same scan over segments per sequence (at least one: an empty sequence still
    // carries its state through)
    sum = 0;
    for (int64_t n = lo; n < hi; n++)
        sum += segments_of(p, n);
    part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {
        int64_t x = tid >= o ? part[tid - o] : 0;
        __syncthreads();
        part[tid] += x;
        __syncthreads();
    }
    base = tid ? part[tid - 1] : 0;
    for (int64_t n = lo; n < hi; n++) {
        p.seg_off[n] = base < p.nslots ? base : p.nslots;
        base += segments_of(p, n);
    }
    if (tid == 1023)
        p.seg_off[p.N] = part[1023] < p.nslots ? part[1023] : p.nslots;
}

// The sequence chunk c belongs to: the last n with chunk_off[n] <= c.
__device__ int64_t sequence_of_chunk(const int64_t *off, int64_t N, int64_t c)
{
    int64_t lo = 0, hi = N - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (off[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Sequence n's first chunk (n = N: the chunks of all) and first segment slot.
__device__ __forceinline__ int64_t chunk_first(const ck_args &p, int64_t n)
{
    return p.uniform ? n * p.seq_chunks : p.chunk_off[n];
}

__device__ __forceinline__ int64_t slot_first(const ck_args &p, int64_t n)
{
    return p.uniform ? n * p.seq_slots : p.seg_off[n];
}

// The sequences chunk c and segment slot `slot` belong to.
__device__ __forceinline__ int64_t sequence_at_chunk(const ck_args &p, int64_t c)
{
    return p.uniform ? c / p.seq_chunks : sequence_of_chunk(p.chunk_off, p.N, c);
}

__device__ __forceinline__ int64_t sequence_at_slot(const ck_args &p, int64_t slot)
{
    return p.uniform ? slot / p.seq_slots : sequence_of_chunk(p.seg_off, p.N, slot);
}

__device__ __forceinline__ int64_t tok_off(const gdn_tensor &t, int64_t row, int64_t tok,
                                           int64_t head)
{
    return row * t.stride[0] + tok * t.stride[1] + head * t.stride[2];
}

// Where sequence n's state of head hv lives in the pool (null without a pool) and whether the
// pass starts from it. False for a padded sequence: nothing of it is read or written.
__device__ __forceinline__ bool sequence_state(const ck_args &p, int64_t n, int64_t hv,
                                               float *&state, bool &init)
{
    const gdn_delta_rule_args &a = p.a;
    state = nullptr;
    init = false;
    if (!p.has_state)
        return true;
    const int64_t slot = seq_slot(a.state_slots, n, p.S);
    if (slot < 0)
        return false;
    state = static_cast<float *>(a.state.data) + slot * a.state.stride[0] + hv * a.state.stride[1];
    init = !a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0;
    return true;
}

// Where chunk c of value head hv lies. False past the last chunk.
struct chunk_task {
    seq_info s;       // its sequence
    int64_t t0, kh, ch;  // first token, key head, workspace index (c * HV + hv)
    int len;          // tokens in the chunk (<= 64)
};

// The key head of value head hv (GVA, block or tiled).
__device__ __forceinline__ int64_t key_head_of(const ck_args &p, int64_t hv)
{
    return p.a.gva == GDN_GVA_BLOCK ? hv / p.ratio : hv % p.H;
}

__device__ __forceinline__ bool chunk_task_for(const ck_args &p, int64_t c, int64_t hv,
                                               chunk_task &t)
{
    if (c >= chunk_first(p, p.N))
        return false;
    const int64_t n = sequence_at_chunk(p, c), j = c - chunk_first(p, n);
    t.s = seq_span(p.a.cu_seqlens, p.T, n);
    t.t0 = t.s.t0 + kC * j;
    t.len = (int)(t.s.len - kC * j < kC ? t.s.len - kC * j : kC);
    t.kh = key_head_of(p, hv);
    t.ch = c * p.HV + hv;
    return true;
}

// The 16-bit path's Qd / Kd block of chunk c's key head kh (shared by its value heads).
__device__ __forceinline__ int64_t key_slot(const ck_args &p, int64_t c, int64_t kh)
{
    return c * p.H + kh;
}

// Whether value head hv is the first of its key head's (the one that writes Qd / Kd).
__device__ __forceinline__ bool first_of_key_head(const ck_args &p, int64_t hv)
{
    return p.a.gva == GDN_GVA_BLOCK ? hv % p.ratio == 0 : hv < p.H;
}

// Threads 0..63: the chunk's gates (zero past its end), beta into Bs and, in Gs, the cumulative
// log-decay within each 32-token half (the caller adds Gs[31] to the second half after a barrier).
__device__ __forceinline__ void stage_gates(const ck_args &p, const chunk_task &t, int64_t hv,
                                            float *Gs, float *Bs)
{
    const int tid = threadIdx.x, lane = tid & 31;
    if (tid >= kC)
        return;
    const gdn_delta_rule_args &a = p.a;
    float g = 0.0f, b = 0.0f;
    if (tid < t.len) {
        const int64_t tok = t.t0 + tid;
        g = a.g.data ? ld(a.g, tok_off(a.g, t.s.row, tok, hv)) : 0.0f;
        b = ld(a.beta, tok_off(a.beta, t.s.row, tok, hv));
        if (a.gate_in_kernel) {
            g = gate_g(a.gating, hv, g);
            b = gate_beta(a.gating, b);
        }
    }
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, g, o);
        if (lane >= o)
            g += y;
    }
    Gs[tid] = g;
    Bs[tid] = b;
}

// Row i of q or k (KP wide, zero past K and for rows past the chunk), L2-normalised on request;
// one warp per row.
template <class E>
__device__ void stage_key_row(E *dst, const gdn_tensor &t, int64_t off, bool valid, int K, int KP,
                              bool l2)
{
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    if (valid)
        for (int x = lane; x < K; x += 32) {
            float v = ld(t, off + x);
            ss += v * v;
        }
    for (int o = 16; o; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = l2 ? 1.0f / sqrtf(ss + GDN_L2NORM_EPS) : 1.0f;
    for (int x = lane; x < KP; x += 32)
        dst[x] = from_f32<E>(valid && x < K ? ld(t, off + x) * inv : 0.0f);
}

// Tm = (I + Am)^-1 for strictly lower 64 x 64 Am (f32, row stride lda): the four 16 x 16
// diagonal blocks by forward substitution (one warp each), then block rows I = 1..3:
// T_IJ = -T_II sum_{J <= M < I} A_IM T_MJ. Tm must be zero on entry.
__device__ void unit_lower_inverse(const float *Am, float *Tm, float *Xs, int lda, int ldx)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, b0 = 16 * warp;
    if (lane < 16) {
        for (int i = 0; i < 16; i++) {
            const float *arow = Am + (b0 + i) * lda + b0;
            float s = 0.0f;
            if (lane < i) {
                s = arow[lane];
                for (int m = lane + 1; m < i; m++)
                    s += arow[m] * Tm[(b0 + m) * lda + b0 + lane];
            }
            Tm[(b0 + i) * lda + b0 + lane] = lane < i ? -s : lane == i ? 1.0f : 0.0f;
            __syncwarp(0xffffu);
        }
    }
    __syncthreads();
    for (int I = 1; I < 4; I++) {
        const int w = 16 * I;
        for (int idx = tid; idx < 16 * w; idx += kThreads) {
            const int r = idx / w, c = idx % w;
            float x = 0.0f;
            for (int m = c; m < w; m++)
                x += Am[(w + r) * lda + m] * Tm[m * lda + c];
            Xs[r * ldx + c] = x;
        }
        __syncthreads();
        for (int idx = tid; idx < 16 * w; idx += kThreads) {
            const int r = idx / w, c = idx % w;
            float y = 0.0f;
            for (int m = 0; m <= r; m++)
                y += Tm[(w + r) * lda + w + m] * Xs[m * ldx + c];
            Tm[(w + r) * lda + c] = -y;
        }
        __syncthreads();
    }
}

template <class P>
__global__ void __launch_bounds__(kThreads) chunk_prep(const ck_args p)
{
    using E = typename P::st;
    extern __shared__ __align__(16) unsigned char smem[];
    const ck_dims &d = p.d;
    E *Ks = reinterpret_cast<E *>(smem + d.p_k), *Qs = reinterpret_cast<E *>(smem + d.p_q);
    E *Vs = reinterpret_cast<E *>(smem + d.p_v);
    float *Am = reinterpret_cast<float *>(smem + d.p_a), *Tm = reinterpret_cast<float *>(smem + d.p_t);
    float *Xs = reinterpret_cast<float *>(smem + d.p_x);
    float *Gs = reinterpret_cast<float *>(smem + d.p_g), *Bs = reinterpret_cast<float *>(smem + d.p_b);
    const gdn_delta_rule_args &a = p.a;
    const int64_t hv = blockIdx.y;
    chunk_task ct;
    if (!chunk_task_for(p, blockIdx.x, hv, ct))
        return;
    const seq_info s = ct.s;
    const int64_t t0 = ct.t0, kh = ct.kh, ch = ct.ch;
    const int len = ct.len;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    stage_gates(p, ct, hv, Gs, Bs);
    for (int i = warp; i < kC; i += kThreads / 32) {
        const int64_t tok = t0 + i;
        const bool valid = i < len;
        stage_key_row(Ks + i * d.ldk, a.k, tok_off(a.k, s.row, tok, kh), valid, (int)p.K, d.KP,
                      a.qk_l2norm);
        stage_key_row(Qs + i * d.ldk, a.q, tok_off(a.q, s.row, tok, kh), valid, (int)p.K, d.KP,
                      a.qk_l2norm);
        const int64_t vo = tok_off(a.v, s.row, tok, hv);
        for (int x = lane; x < d.VP; x += 32)
            Vs[i * d.ldv + x] = from_f32<E>(valid && x < p.V ? ld(a.v, vo + x) : 0.0f);
    }
    for (int idx = tid; idx < kC * kC; idx += kThreads)
        Tm[(idx / kC) * d.lda + idx % kC] = 0.0f;
    __syncthreads();
    if (tid >= 32 && tid < kC)
        Gs[tid] += Gs[31];
    __syncthreads();

    { // A = diag(beta) (K K^T * decay) strictly lower; Aqk = scale (Q K^T * decay), j <= i
        const int m0 = 16 * warp;
        float acc[8][4];
        acc_zero(acc);
        warp_mma<P>(acc, view(Ks, d.ldk, 1), view(Ks, 1, d.ldk), m0, 0, d.KP);
#pragma unroll
        for (int jt = 0; jt < 8; jt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + acc_row(e), cc = acc_col(jt, e);
                Am[r * d.lda + cc] = cc < r ? Bs[r] * acc[jt][e] * expf(Gs[r] - Gs[cc]) : 0.0f;
            }
        acc_zero(acc);
        warp_mma<P>(acc, view(Qs, d.ldk, 1), view(Ks, 1, d.ldk), m0, 0, d.KP);
        E *aq = static_cast<E *>(p.Aq) + ch * kC * kC;
#pragma unroll
        for (int jt = 0; jt < 8; jt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + acc_row(e), cc = acc_col(jt, e);
                aq[r * kC + cc] =
                    from_f32<E>(cc <= r ? p.scale * acc[jt][e] * expf(Gs[r] - Gs[cc]) : 0.0f);
            }
    }
    __syncthreads();
    unit_lower_inverse(Am, Tm, Xs, d.lda, d.ldx);

    { // Q' and K' to the workspace; K and V scaled in place into W's and U's right operands
        const float GL = Gs[kC - 1];
        E *qd = static_cast<E *>(p.Qd) + ch * kC * d.KP, *kd = static_cast<E *>(p.Kd) + ch * kC * d.KP;
        for (int idx = tid; idx < kC * d.KP; idx += kThreads) {
            const int i = idx / d.KP, x = idx % d.KP;
            const float q = to_f32(Qs[i * d.ldk + x]), k = to_f32(Ks[i * d.ldk + x]);
            qd[idx] = from_f32<E>(p.scale * expf(Gs[i]) * q);
            kd[idx] = from_f32<E>(expf(GL - Gs[i]) * k);
            Ks[i * d.ldk + x] = from_f32<E>(Bs[i] * expf(Gs[i]) * k);
        }
        for (int idx = tid; idx < kC * d.VP; idx += kThreads) {
            const int i = idx / d.VP, x = idx % d.VP;
            Vs[i * d.ldv + x] = from_f32<E>(Bs[i] * to_f32(Vs[i * d.ldv + x]));
        }
        if (tid == 0)
            p.gl[ch] = expf(GL);
    }
    __syncthreads();

    { // W = T (diag(beta e^G) K), U = T (diag(beta) V)
        const int m0 = 16 * warp;
        E *w = static_cast<E *>(p.W) + ch * kC * d.KP, *u = static_cast<E *>(p.U) + ch * kC * d.VP;
        for (int n0 = 0; n0 < d.KP; n0 += 32) {
            float acc[4][4];
            acc_zero(acc);
            warp_mma<P>(acc, view(static_cast<const float *>(Tm), d.lda, 1), view(Ks, d.ldk, 1),
                        m0, n0, kC);
#pragma unroll
            for (int jt = 0; jt < 4; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    w[(m0 + acc_row(e)) * d.KP + n0 + acc_col(jt, e)] = from_f32<E>(acc[jt][e]);
        }
        for (int n0 = 0; n0 < d.VP; n0 += 32) {
            float acc[4][4];
            acc_zero(acc);
            warp_mma<P>(acc, view(static_cast<const float *>(Tm), d.lda, 1), view(Vs, d.ldv, 1),
                        m0, n0, kC);
#pragma unroll
            for (int jt = 0; jt < 4; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    u[(m0 + acc_row(e)) * d.VP + n0 + acc_col(jt, e)] = from_f32<E>(acc[jt][e]);
        }
    }
}

// rows x bytes_per_row from global (row stride gstride bytes) to shared (row stride sstride).
__device__ __forceinline__ void stage_rows(void *dst, int sstride, const void *src, int64_t gstride,
                                           int rows, int row_bytes)
{
    const int per_row = row_bytes / 16;
    for (int idx = threadIdx.x; idx < rows * per_row; idx += kThreads) {
        const int r = idx / per_row, c16 = idx % per_row;
        cp_async16(static_cast<unsigned char *>(dst) + r * sstride + c16 * 16,
                   static_cast<const unsigned char *>(src) + r * gstride + c16 * 16);
    }
}

template <class P>
__global__ void __launch_bounds__(kThreads) chunk_state(const ck_args p)
{
    using E = typename P::st;
    constexpr int es = sizeof(E);
    extern __shared__ __align__(16) unsigned char smem[];
    const ck_dims &d = p.d;
    E *Ws = reinterpret_cast<E *>(smem + d.s_w), *Qs = reinterpret_cast<E *>(smem + d.s_q);
    E *Ks = reinterpret_cast<E *>(smem + d.s_k), *Us = reinterpret_cast<E *>(smem + d.s_u);
    E *As = reinterpret_cast<E *>(smem + d.s_aq), *Vn = reinterpret_cast<E *>(smem + d.s_vn);
    float *Ss = reinterpret_cast<float *>(smem + d.s_s);
    const gdn_delta_rule_args &a = p.a;
    const int64_t nvt = d.VP / kVT, id = blockIdx.x;
    const int vt = (int)(id % nvt);
    const int64_t hv = (id / nvt) % p.HV, n = id / (nvt * p.HV);
    const int tid = threadIdx.x, warp = tid >> 5;
    float *state;
    bool init;
    if (!sequence_state(p, n, hv, state, init))
        return; // a padded sequence
    const bool kv = a.state_layout == GDN_STATE_KV;
    const int64_t s2 = a.state.stride[2], s3 = a.state.stride[3];
    const int v0 = vt * kVT;
    for (int idx = tid; idx < d.KP * kVT; idx += kThreads) {
        const int r = idx / kVT, cc = idx % kVT, v = v0 + cc;
        float x = 0.0f;
        if (init && r < p.K && v < p.V)
            x = state[kv ? r * s2 + v * s3 : v * s2 + r * s3];
        Ss[r * d.lds + cc] = x;
    }
    const seq_info s = seq_span(a.cu_seqlens, p.T, n);
    const int64_t first = chunk_first(p, n), nch = chunk_first(p, n + 1) - first;
    const int m0 = 16 * warp;
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.HV + hv, tok0 = s.t0 + kC * j;
        const int len = (int)(s.len - kC * j < kC ? s.len - kC * j : kC);
        const int64_t kbytes = (int64_t)kC * d.KP * es;
        stage_rows(Ws, d.ldk * es, static_cast<const E *>(p.W) + ch * kC * d.KP, d.KP * es, kC,
                   d.KP * es);
        stage_rows(Qs, d.ldk * es, static_cast<const unsigned char *>(p.Qd) + ch * kbytes,
                   d.KP * es, kC, d.KP * es);
        stage_rows(Ks, d.ldk * es, static_cast<const unsigned char *>(p.Kd) + ch * kbytes,
                   d.KP * es, kC, d.KP * es);
        stage_rows(Us, d.ldu * es, static_cast<const E *>(p.U) + ch * kC * d.VP + v0, d.VP * es,
                   kC, kVT * es);
        stage_rows(As, d.ldq * es, static_cast<const E *>(p.Aq) + ch * kC * kC, kC * es, kC,
                   kC * es);
        cp_async_wait_all();
        const float decay = p.gl[ch];
        __syncthreads();
        { // V' = U - W S
            float acc[4][4];
            acc_zero(acc);
            warp_mma<P>(acc, view(static_cast<const E *>(Ws), d.ldk, 1),
                        view(static_cast<const float *>(Ss), d.lds, 1), m0, 0, d.KP);
#pragma unroll
            for (int jt = 0; jt < 4; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + acc_row(e), cc = acc_col(jt, e);
                    Vn[r * d.ldu + cc] = from_f32<E>(to_f32(Us[r * d.ldu + cc]) - acc[jt][e]);
                }
        }
        __syncthreads();
        { // O = Q' S + Aqk V'
            float acc[4][4];
            acc_zero(acc);
            warp_mma<P>(acc, view(static_cast<const E *>(Qs), d.ldk, 1),
                        view(static_cast<const float *>(Ss), d.lds, 1), m0, 0, d.KP);
            warp_mma<P>(acc, view(static_cast<const E *>(As), d.ldq, 1),
                        view(static_cast<const E *>(Vn), d.ldu, 1), m0, 0, kC);
#pragma unroll
            for (int jt = 0; jt < 4; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + acc_row(e), v = v0 + acc_col(jt, e);
                    if (r < len && v < p.V)
                        st(a.out, tok_off(a.out, s.row, tok0 + r, hv) + v, acc[jt][e]);
                }
        }
        // dS = K'^T V' (rows of the state: K, up to two 16-row tiles per warp)
        float ds[kMaxDim / 64][4][4];
#pragma unroll
        for (int mt = 0; mt < kMaxDim / 64; mt++) {
            acc_zero(ds[mt]);
            const int r0 = 16 * (warp + 4 * mt);
            if (r0 < d.KP)
                warp_mma<P>(ds[mt], view(static_cast<const E *>(Ks), 1, d.ldk),
                            view(static_cast<const E *>(Vn), d.ldu, 1), r0, 0, kC);
        }
        __syncthreads(); // every read of S for this chunk is done
#pragma unroll
        for (int mt = 0; mt < kMaxDim / 64; mt++) {
            const int r0 = 16 * (warp + 4 * mt);
            if (r0 < d.KP)
#pragma unroll
                for (int jt = 0; jt < 4; jt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float *x = Ss + (r0 + acc_row(e)) * d.lds + acc_col(jt, e);
                        *x = decay * *x + ds[mt][jt][e];
                    }
        }
    }
    __syncthreads();
    if (!state)
        return;
    for (int idx = tid; idx < d.KP * kVT; idx += kThreads) {
        const int r = idx / kVT, cc = idx % kVT, v = v0 + cc;
        if (r < p.K && v < p.V)
            state[kv ? r * s2 + v * s3 : v * s2 + r * s3] = Ss[r * d.lds + cc];
    }
}

// ---- chunk preparation on 16-bit tensor cores ----------------------------------------------
//
// chunk_prep for bf16/f16 inputs: 8 warps, q/k/v rows by 16-byte loads, the norms from shared
// memory, every product by ldmatrix + mma, the 16 x 16 diagonal inverses by forward
// substitution in registers (lane j carries column j), merged pairwise into 32 x 32 and 64 x 64
// blocks by split-tf32 products (f32 accuracy), per-token exponentials computed once.

constexpr int kPrepThreads = 256;

// x, y to dst[0], dst[1] (shared or global; dst 4-byte aligned for 16-bit types: one store).
template <class E>
__device__ __forceinline__ void store_pair(E *dst, float x, float y)
{
    if constexpr (sizeof(E) == 2) {
        E v[2] = {from_f32<E>(x), from_f32<E>(y)};
        *reinterpret_cast<unsigned *>(dst) = *reinterpret_cast<unsigned *>(v);
    } else {
        dst[0] = x, dst[1] = y;
    }
}

// x, y as hi (at hi) and lo (at lo) 16-bit parts of policy P (split_pair).
template <class P>
__device__ __forceinline__ void store_pair_split(typename P::st *hi, typename P::st *lo, float x,
                                                 float y)
{
    unsigned h, l;
    split_pair<P>(x, y, h, l);
    *reinterpret_cast<unsigned *>(hi) = h;
    *reinterpret_cast<unsigned *>(lo) = l;
}

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
                                             int64_t t0, int64_t head, int len, int np)
{
    constexpr int rows = kPrepThreads / 16; // rows per round
    static_assert(kC % rows == 0, "whole rounds");
    static_assert(kMaxDim <= 16 * 8, "a half-warp of 16-byte pieces covers a row");
    const int x = 8 * (threadIdx.x & 15), i0 = threadIdx.x >> 4;
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
                                                float *Ik, float *Iq)
{
    static_assert(kPrepThreads == 4 * kC, "two threads per q and k row");
    constexpr int pieces = KP / 8;
    const int r = threadIdx.x >> 1, h = threadIdx.x & 1;
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

// Tm = (I + Am)^-1, Am strictly lower 64 x 64 (f32, row stride ld), in three steps: the four
// 16 x 16 diagonal blocks by forward substitution (inverse_diag_block, warps 0-3 one each); then
// blocks merge pairwise, 16 -> 32 (inverse_merge16, warps 0-3) -> 64 (inverse_merge32, all
// warps): the inverse of [[L11, 0], [A21, L22]] has T21 = -T22 (A21 T11). The products are
// split-tf32 (f32 accuracy) and skip the k-steps that would meet T's zero blocks above the
// diagonal, which zero_upper_blocks fills meanwhile. Warps 4-7 make Aqk while warps 0-3 run the
// first two steps.

// Diagonal block b (rows and columns 16 b..) of Tm from Am's, one warp (lane j carries column
// j). Reads only Am's rows of block b.
__device__ __forceinline__ void inverse_diag_block(const float *Am, float *Tm, int ld, int b)
{
    const int lane = threadIdx.x & 31, b0 = 16 * b, j = lane & 15;
    const float *blk = Am + b0 * ld + b0;
    // Right-looking: once t[i] is final it is folded into every later row's sum, so the
    // dependent chain is 15 steps of one multiply-add (row by row it was 120).
    float t[16], sum[16];
#pragma unroll
    for (int i = 0; i < 16; i++)
        sum[i] = 0.0f;
    t[0] = j == 0 ? 1.0f : 0.0f;
#pragma unroll
    for (int i = 0; i < 15; i++) {
#pragma unroll
        for (int r = i + 1; r < 16; r++)
            sum[r] += blk[r * ld + i] * t[i];
        t[i + 1] = i + 1 == j ? 1.0f : i + 1 > j ? -sum[i + 1] : 0.0f;
    }
    if (lane < 16)
#pragma unroll
        for (int i = 0; i < 16; i++)
            Tm[(b0 + i) * ld + b0 + j] = t[i];
}

// sign * acc (a warp's 16 x 8 accumulator tile) to the f32 tile at x, row stride ld.
__device__ __forceinline__ void store_acc_16x8(float *x, int ld, const float (&acc)[1][4],
                                               float sign)
{
#pragma unroll
    for (int e = 0; e < 4; e++)
        x[acc_row(e) * ld + acc_col(0, e)] = sign * acc[0][e];
}

// The 32 x 32 diagonal blocks' off-diagonal parts, warp w < 4 on block pair w / 2, columns
// 8 (w % 2)..: X = A21 T11 for its own 8 columns, through its 512 bytes of scratch, then
// T21 = -T22 X. Needs the four diagonal blocks and Am's rows written and visible.
__device__ __forceinline__ void inverse_merge16(const float *Am, float *Tm, int ld, float *scratch)
{
    const int warp = threadIdx.x >> 5, o = 32 * (warp >> 1), n1 = 8 * (warp & 1);
    float acc[1][4];
    acc_zero(acc);
    warp_mma<prec_tf32x3>(acc, view(Am + (o + 16) * ld + o, ld, 1),
                          view(Tm + o * ld + o + n1, ld, 1), 0, 0, 16);
    store_acc_16x8(scratch, 8, acc, 1.0f); // row stride 8: the B fragments read it conflict-free
    __syncwarp();
    acc_zero(acc);
    warp_mma<prec_tf32x3>(acc, view(Tm + (o + 16) * ld + o + 16, ld, 1), view(scratch, 8, 1), 0,
                          0, 16);
    store_acc_16x8(Tm + (o + 16) * ld + o + n1, ld, acc, -1.0f);
}

// The 64 x 64 inverse's lower-left 32 x 32 block, warp w on rows 16 (w / 4).. and columns
// 8 (w % 4)..: X = A21 T11 into Xs (32 x ld), a barrier, then T21 = -T22 X. k-steps that would
// meet T's zero blocks are skipped: X's columns 16.. start at k = 16, T22's rows ..15 stop at
// k = 16. Ends with a barrier (Tm whole, Xs free).
__device__ __forceinline__ void inverse_merge32(const float *Am, float *Tm, float *Xs, int ld)
{
    const int warp = threadIdx.x >> 5, m2 = 16 * (warp >> 2), n2 = 8 * (warp & 3);
    const int k0 = n2 < 16 ? 0 : 16;
    float acc[1][4];
    acc_zero(acc);
    warp_mma<prec_tf32x3>(acc, view(Am + (32 + m2) * ld + k0, ld, 1),
                          view(Tm + k0 * ld + n2, ld, 1), 0, 0, 32 - k0);
    store_acc_16x8(Xs + m2 * ld + n2, ld, acc, 1.0f);
    __syncthreads();
    acc_zero(acc);
    warp_mma<prec_tf32x3>(acc, view(Tm + (32 + m2) * ld + 32, ld, 1), view(Xs + n2, ld, 1), 0, 0,
                          m2 + 16);
    store_acc_16x8(Tm + (32 + m2) * ld + n2, ld, acc, -1.0f);
    __syncthreads();
}

// Tm's six 16 x 16 blocks above the diagonal to zero, by warps 4-7 (the merges never read them;
// W and U's products read T whole).
__device__ __forceinline__ void zero_upper_blocks(float *Tm, int ld)
{
    for (int i = threadIdx.x - 128; i < 48 * 16; i += 128) { // rows 0..47, 16-byte pieces
        const int r = i / 16, c = 4 * (i % 16);
        if (c >= 16 * (r / 16 + 1))
            *reinterpret_cast<float4 *>(Tm + r * ld + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// Warpgroup wg's threads only (warps 4 wg .. 4 wg + 3; named barrier 1 + wg, 0 being
// __syncthreads'): the other warps do other work meanwhile.
__device__ __forceinline__ void sync_warpgroup(int wg)
{
    asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}

// Chunk c's q and k tiles (rows of ld, 16-bit) to key head kh's Qd / Kd blocks in the state
// pass's layout, by warps 4-7 (a half-warp a row, 16 bytes a thread). Only the key head's first
// value head's block runs it: the tiles are the same for all of them.
template <class E, int KP>
__device__ __forceinline__ void copy_key_tiles(const ck_args &p, int64_t c, int64_t kh,
                                               const E *Qs, const E *Ks, int ld)
{
    constexpr int ldg = tc_layout_for(KP, sizeof(E)).ldk, kblk = kC * ldg;
    constexpr bool kswz = tc_swizzled(KP, sizeof(E));
    static_assert(KP <= 16 * 8, "a half-warp of 16-byte pieces covers a row");
    const int64_t ks = key_slot(p, c, kh);
    E *qd = static_cast<E *>(p.Qd) + ks * kblk, *kd = static_cast<E *>(p.Kd) + ks * kblk;
    const int x = 8 * (threadIdx.x & 15);
    if (x >= KP)
        return;
    for (int i = (threadIdx.x - 128) >> 4; i < kC; i += 8) {
        const int at = i * ld + x, gat = tile_at<kswz>(i, x, ldg);
        *reinterpret_cast<uint4 *>(qd + gat) = *reinterpret_cast<const uint4 *>(Qs + at);
        *reinterpret_cast<uint4 *>(kd + gat) = *reinterpret_cast<const uint4 *>(Ks + at);
    }
}

template <class P, int KP>
__global__ void __launch_bounds__(kPrepThreads, 2) chunk_prep_tc(const ck_args p)
{
    using E = typename P::st;
    extern __shared__ __align__(16) unsigned char smem[];
    const ck_dims &d = p.d;
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
    const gdn_delta_rule_args &a = p.a;
    const int64_t hv = blockIdx.y;
    chunk_task ct;
    if (!chunk_task_for(p, blockIdx.x, hv, ct))
        return;
    const seq_info s = ct.s;
    const int64_t t0 = ct.t0, kh = ct.kh, ch = ct.ch;
    const int len = ct.len;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int VP = d.VP;
    // W, W lo, Q and K go to the workspace in the state pass's shared layout (tc_layout): rows of
    // ldg elements, swizzled or padded
    constexpr int ldg = tc_layout_for(KP, sizeof(E)).ldk, kblk = kC * ldg;
    constexpr bool kswz = tc_swizzled(KP, sizeof(E));

    if (rows16_ok(a.k, p.K) && rows16_ok(a.q, p.K) && rows16_ok(a.v, p.V)) {
        // every row is whole 16-byte pieces: one round of cp.async for the whole chunk, in
        // flight while the gates load
        stage_rows16<E>(Ks, L.ldk, a.k, s.row, t0, kh, len, KP);
        stage_rows16<E>(Qs, L.ldk, a.q, s.row, t0, kh, len, KP);
        stage_rows16<E>(Vs, d.ldv, a.v, s.row, t0, hv, len, VP);
        stage_gates(p, ct, hv, Gs, Bs);
        cp_async_wait_all();
    } else {
        stage_gates(p, ct, hv, Gs, Bs);
        for (int i = warp; i < kC; i += kPrepThreads / 32) {
            const int64_t tok = t0 + i;
            const bool valid = i < len;
            load_row16(Ks + i * L.ldk, a.k, tok_off(a.k, s.row, tok, kh), valid, (int)p.K, KP);
            load_row16(Qs + i * L.ldk, a.q, tok_off(a.q, s.row, tok, kh), valid, (int)p.K, KP);
            load_row16(Vs + i * d.ldv, a.v, tok_off(a.v, s.row, tok, hv), valid, (int)p.V, VP);
        }
    }
    __syncthreads();
    if (tid >= 32 && tid < kC)
        Gs[tid] += Gs[31];
    stage_inv_norms<P, KP>(Ks, Qs, L.ldk, a.qk_l2norm, Ik, Iq);
    __syncthreads();
    if (tid < kC) { // per token: W's row factors, and Q's and K's to the workspace (per value
                    // head: scale e^G / ||q|| and e^(G_last - G) / ||k||; Q and K go out as they
                    // came, during the inverse)
        const float eg = expf(Gs[tid]);
        Sw[tid] = Bs[tid] * eg * Ik[tid]; // (they scale T's columns)
        p.eg[ch * kC + tid] = p.scale * eg * Iq[tid];
        p.ek[ch * kC + tid] = expf(Gs[kC - 1] - Gs[tid]) * Ik[tid];
        if (tid == 0)
            p.gl[ch] = expf(Gs[kC - 1]);
        if constexpr (P::is_f16) { // their largest magnitude per warp, at Sw[64 + warp]
            const unsigned m = __reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(Sw[tid])));
            if ((tid & 31) == 0)
                Sw[kC + (tid >> 5)] = __uint_as_float(m);
        }
    }
    // Each warp's 1 KiB of the scratch Xs (the first merge's X tile, the 16-byte stores' staging).
    float *scratch = Xs + 256 * warp;
    static_assert(32 * L.ldf * 4 >= kPrepThreads / 32 * 1024, "Xs holds 1 KiB a warp");
    { // A = diag(beta) (K K^T * decay) strictly lower and the inverse's first steps (warps 0-3),
      // while warps 4-7 make Aqk
        const int m0 = 16 * (warp & 3);
        const E *X = warp < 4 ? Ks : Qs;
        float acc[8][4];
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
        if (warp < 4) {
#pragma unroll
            for (int jt = 0; jt < 8; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + acc_row(e), cc = acc_col(jt, e);
                    Am[r * L.ldf + cc] =
                        cc < r ? Bs[r] * Ik[r] * Ik[cc] * acc[jt][e] * __expf(Gs[r] - Gs[cc])
                               : 0.0f;
                }
            __syncwarp(); // the diagonal block reads only this warp's rows of A
            inverse_diag_block(Am, Tm, L.ldf, warp);
            sync_warpgroup(0); // warps 0-3
            inverse_merge16(Am, Tm, L.ldf, scratch);
        } else {
            constexpr int ldq = tc_ld(kC, sizeof(E));
            constexpr bool qswz = tc_swizzled(kC, sizeof(E));
            out_st *aq = static_cast<out_st *>(p.Aq) + ch * (tc_aq_block(2) / 2); // (prec_out)
            out_st *aql = aq + tc_aq_part(2) / 2;                                  // the lo part
            // 16 x 16 blocks, 16 bytes a lane through the warp's scratch
#pragma unroll
            for (int b = 0; b < 4; b++) {
                unsigned hw[2][2], lw[2][2];
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int jt = 2 * b + j, e = 2 * h;
                        const int r = m0 + acc_row(e), cc = acc_col(jt, e);
                        const float f = p.scale * Iq[r];
                        const float x =
                            cc <= r ? f * Ik[cc] * acc[jt][e] * __expf(Gs[r] - Gs[cc]) : 0.0f;
                        const float y = cc + 1 <= r ? f * Ik[cc + 1] * acc[jt][e + 1] *
                                                          __expf(Gs[r] - Gs[cc + 1])
                                                    : 0.0f;
                        split_pair<prec_out>(x, y, hw[j][h], lw[j][h]);
                    }
                unsigned char *stage = reinterpret_cast<unsigned char *>(scratch);
                store_block16<qswz>(aq, ldq, m0, 16 * b, hw, stage);
                store_block16<qswz>(aql, ldq, m0, 16 * b, lw, stage + 512);
            }
            zero_upper_blocks(Tm, L.ldf); // for W and U's products, which read T whole
            if (first_of_key_head(p, hv) && !p.direct_keys) // and Q and K as they came go to
                copy_key_tiles<E, KP>(p, blockIdx.x, kh, Qs, Ks, L.ldk); // the workspace
        }
    }
    __syncthreads();
    inverse_merge32(Am, Tm, Xs, L.ldf);
    { // W = T diag(beta e^G / ||k||) K (warps 0-3) and U = T diag(beta) V (warps 4-7), warp w
      // rows 16 (w % 4).., all columns: each warp builds its T fragments once. With long memory
      // the state pass's V' = U - W S is a small difference of large terms, so the cancellation
      // must happen in f32: U stays f32, W goes out as hi + lo 16-bit parts, and the products
      // lose nothing to 16 bits. Their right operands are the exact 16-bit k and v rows; the row
      // factors scale T's columns in f32, and that product enters as hi + lo parts. (T rounded
      // once, shared by U and W, only scales V' = T (beta v - beta e^G k S) when T is well
      // conditioned; on some long-memory draws it left the state 1e-3 off, against 6e-6 with T
      // split.)
        const int m0 = 16 * (warp & 3);
        const bool isw = warp < 4;
        E *w = static_cast<E *>(p.W) + ch * kblk, *wl = static_cast<E *>(p.Wl) + ch * kblk;
        float *u = static_cast<float *>(p.U) + ch * (VP / kVT) * (tc_u_tile() / 4);
        const float2 wpow = w_scale_pow2<P>(Sw + kC);
        unsigned char *stage = reinterpret_cast<unsigned char *>(scratch);
        const E *B = isw ? Ks : Vs;
        const int ldb = isw ? L.ldk : d.ldv, n = isw ? KP : VP;
        const float down = isw ? wpow.x : 1.0f;
        unsigned ta[4][4], tl[4][4], fb[4]; // T diag(row factors) as hi + lo fragments
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
            frag_a_f32_cols_split<P>(ta[ks], tl[ks], Tm, L.ldf, m0, 16 * ks, isw ? Sw : Bs, down);
        for (int nb = 0; nb < n; nb += 16) {
            float acc[2][4], acl[2][4]; // the hi and lo products: two chains, not one
            acc_zero(acc);
            acc_zero(acl);
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                frag_b2(fb, B, ldb, 16 * ks, nb);
                mma2<P>(acc[0], acc[1], ta[ks], fb);
                mma2<P>(acl[0], acl[1], tl[ks], fb);
            }
#pragma unroll
            for (int jt = 0; jt < 2; jt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[jt][e] += acl[jt][e] * (1.0f / P::lo_scale); // (split_pair)
            if (isw) { // hi + lo parts, 16 bytes a lane through the warp's scratch
                unsigned hw[2][2], lw[2][2];
#pragma unroll
                for (int jt = 0; jt < 2; jt++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        split_pair<P>(wpow.y * acc[jt][2 * h], wpow.y * acc[jt][2 * h + 1],
                                      hw[jt][h], lw[jt][h]);
                store_block16<kswz>(w, ldg, m0, nb, hw, stage);
                store_block16<kswz>(wl, ldg, m0, nb, lw, stage + 512);
            } else {
#pragma unroll
                for (int jt = 0; jt < 2; jt++)
#pragma unroll
                    for (int e = 0; e < 4; e += 2) {
                        const int c = nb + acc_col(jt, e); // U tile c / 32, column c % 32
                        store_pair(u + (c / kVT) * (kC * kVT) + u_index(m0 + acc_row(e), c % kVT),
                                   acc[jt][e], acc[jt][e + 1]);
                    }
            }
        }
    }
}

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

constexpr int kTcThreads = 256;

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

// A warp's 16 x 16 output block (rows m0.. of the chunk at token tok0, columns c0..) to out,
// rows < len and columns < V only, in pairs of columns where both are < V: an output of the
// inputs' 16-bit type (policy P) by the one test and 4-byte store this path always had (the
// general store_out_pair there cost the T = 8192, HV = 32 row 2%), others by store_out_pair.
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

// ---- staging: one linear copy per part of a stage ---------------------------------------------
//
// The workspace holds every part of a stage with its shared-memory row padding (tc_layout), so a
// part is one contiguous block. On sm_90 one thread moves each block with a bulk copy
// (cp.async.bulk) completing on the stage's mbarrier; elsewhere every thread copies 16 bytes at a
// time with cp.async. (Per-thread copies of padded rows held a quarter of the pass's stall
// samples on their address registers; bulk copies one row at a time were slower still.) On sm_90
// q and k need no copy in the workspace: a TMA tensor map over each input takes a chunk's
// 64 x 64 panels to the stage in tile_at's swizzle (the copies took 6% of the preparation's time
// at T = 131072, HV = 4 on the H100; docs/PERFORMANCE.md, thirty-second session).

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kBulkStage = true;
#else
constexpr bool kBulkStage = false;
#endif

[[maybe_unused]] __device__ __forceinline__ void mbar_init(unsigned bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;\n" ::"r"(bar)
                 : "memory");
#endif
}

// Orders this thread's accesses to shared memory before later bulk copies into it (the generic
// and the async proxy).
[[maybe_unused]] __device__ __forceinline__ void fence_proxy_async()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Arrives on bar, expecting `bytes` of bulk copies before its phase completes. The proxy fence
// orders the block's earlier reads of the stage (ordered by a barrier) before the copies' writes.
[[maybe_unused]] __device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes)
{
    fence_proxy_async();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
#endif
}

[[maybe_unused]] __device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
#endif
}

constexpr int kPanelBytes = kPanel * kPanel * 2; // a swizzled 16-bit panel (tile_at)

// Where a chunk's q and k rows lie in the inputs (direct_keys): key head, first token, batch row.
struct key_at {
    int64_t head, tok, row;
};

// A chunk's q or k block from a key panel map (key_panel_map) to the shared address dst, on bar:
// its KP / 64 boxes (64 tokens x 64 elements of the head and batch row `at` names), each a
// 1024-byte aligned panel swizzled as tile_at's, `step` bytes apart. Elements past the
// tensor's ends arrive as zeros and count towards bar's bytes.
template <int KP>
__device__ __forceinline__ void stage_key_panels(unsigned dst, unsigned step,
                                                 const CUtensorMap *map, const key_at &at,
                                                 unsigned bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
    for (int pn = 0; pn < KP / kPanel; pn++)
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx"
                     "::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst + pn * step),
                     "l"(reinterpret_cast<uint64_t>(map)), "r"(pn * kPanel), "r"((int)at.head),
                     "r"((int)at.tok), "r"((int)at.row), "r"(bar)
                     : "memory");
#else
    (void)dst, (void)step, (void)map, (void)at, (void)bar;
#endif
}

// Rows len..63 of a swizzled key block (KP / 64 panels, tile_at) to zero, by nthreads threads
// from tid. With direct_keys a sequence's last chunk brings in the next sequence's rows; they
// meet only V's zero rows in the update, but 0 x Inf is NaN, and one sequence's NaN must not
// reach another's state.
template <int KP>
__device__ __forceinline__ void zero_key_rows(unsigned char *blk, int len, int tid, int nthreads)
{
    constexpr int pieces = KP / 8; // 16-byte pieces a row
    for (int i = len * pieces + tid; i < kC * pieces; i += nthreads)
        *reinterpret_cast<uint4 *>(blk + 2 * tile_at<true>(i / pieces, 8 * (i % pieces), KP)) =
            make_uint4(0u, 0u, 0u, 0u);
}

// `bytes` (a multiple of 16, both ends 16-byte aligned) from src to the shared address dst:
// one bulk copy on bar (the calling thread alone), or every thread's cp.async.
template <bool BULK>
__device__ __forceinline__ void stage_part(unsigned dst, const void *src, int bytes, unsigned bar)
{
    if constexpr (BULK) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                     "[%0], [%1], %2, [%3];\n" ::"r"(dst),
                     "l"(src), "r"(bytes), "r"(bar)
                     : "memory");
#endif
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
__device__ __forceinline__ chunk_parts chunk_parts_of(const ck_args &p, int64_t ch, int64_t ks,
                                                      int v0)
{
    constexpr int kb = tc_key_block(KP, sizeof(E)), ab = tc_aq_block(sizeof(E));
    chunk_parts c;
    c.w = static_cast<const unsigned char *>(p.W) + ch * kb;
    c.wl = static_cast<const unsigned char *>(p.Wl) + ch * kb;
    c.q = static_cast<const unsigned char *>(p.Qd) + ks * kb;
    c.k = static_cast<const unsigned char *>(p.Kd) + ks * kb;
    c.u = static_cast<const unsigned char *>(p.U) +
          (ch * (p.d.VP / kVT) + v0 / kVT) * (int64_t)tc_u_tile();
    c.aq = static_cast<const unsigned char *>(p.Aq) + ch * ab;
    return c;
}

// Chunk ch's operands of the state pass (ks: its key head's Qd / Kd block) into the stage at
// shared address `stage`: W and K' always, U's tile of this block's columns unless `u_in` is
// false (a map's M columns: V' = -W S), Q' and Aqk only for the output pass (OUT). With bulk
// copies only thread 0 calls this, and the stage is ready when bar's phase completes; else every
// thread calls it and the stage is ready after cp.async.wait_group 0 (and a barrier).
template <class E, int KP, bool OUT, bool BULK>
__device__ __forceinline__ void stage_chunk(const ck_args &p, unsigned stage, unsigned bar,
                                            int64_t ch, int64_t ks, const key_at &at, int v0,
                                            bool u_in)
{
    constexpr int es = sizeof(E), kb = tc_key_block(KP, es), ab = tc_aq_block(es),
                  ub = tc_u_tile();
    constexpr tc_layout L = tc_layout_for(KP, es);
    const chunk_parts c = chunk_parts_of<E, KP>(p, ch, ks, v0);
    if (BULK)
        mbar_expect(bar, kb * (OUT ? 4 : 3) + (u_in ? ub : 0) + (OUT ? ab : 0));
    stage_part<BULK>(stage + L.w, c.w, kb, bar);
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
__device__ __forceinline__ chunk_factors load_factors(const ck_args &p, int64_t ch, int r)
{
    chunk_factors f;
    f.decay = p.gl[ch];
    f.ek0 = p.ek[ch * kC + r], f.ek8 = p.ek[ch * kC + r + 8];
    f.eg0 = OUT ? p.eg[ch * kC + r] : 0.0f, f.eg8 = OUT ? p.eg[ch * kC + r + 8] : 0.0f;
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
            store_pair_split<P>(Sh + at, Sl + at, S[jt][e], S[jt][e + 1]);
        }
}

// ---- sequence splitting --------------------------------------------------------------------
//
// A chunk maps the state linearly, S_next = (decay I - K'^T W) S + K'^T U, so a run of chunks
// (a segment) maps it as S_end = M S_start + N. With few (value tile, head, sequence) blocks
// (few heads, long sequences) each sequence's chunks are cut into segments of segc chunks:
//   pass 1 (chunk_state_tc<MAPS>): every segment but the last runs the state pass on the
//     K x (K + V) "state" [I | 0] with inputs [0 | U]: its columns come out as [M | N]. Column
//     tiles are independent, so this is the same kernel with K / 32 more tiles and no output.
//   the stitch (stitch_starts): S_j = M_{j-1} S_{j-1} + N_{j-1} for j = 1.., in split tf32
//     (about 21 bits), from the sequence's initial state, each written over N_{j-1};
//   pass 2 (chunk_state_tc<OUT>): segment j starts from S_j, then runs its chunks with outputs;
//     the last segment writes the state back.
// Each pass has (segments x heads x tiles) blocks in parallel, against (heads x tiles) unsplit.
// chunk_state_wg (sm_90a) runs both passes the same way with 64-column tiles.

// Segment j > 0 of a split sequence starts from the state the stitch left in the N part of its
// predecessor's map (stitch_starts): row k, column v of value head hv.
__device__ __forceinline__ float stitched_start(const ck_args &p, int64_t slot, int64_t hv, int k,
                                                int v)
{
    const int64_t ldm = p.d.KP + p.d.VP;
    return p.maps[((slot - 1) * p.HV + hv) * p.d.KP * ldm + k * ldm + p.d.KP + v];
}

// The stitch (16-bit path, split calls), between the maps pass and the output pass: for each
// sequence, head and C value columns, S_j = M_{j-1} S_{j-1} + N_{j-1} for its segments j = 1..,
// from the sequence's initial state, each S_j written over N_{j-1} (which it no longer needs).
// The chain is serial, so its blocks are made narrow (C = 8 or 16, launch_stitch) to spread it
// over the SMs: each step is then short, and every block reads whole Ms, which L2 serves. Each
// M and its N columns come into shared memory by coalesced cp.async, the next pair while the
// block works on the current one; warp w computes rows 16w.. of S_j on tensor cores
// (stitch_rows_tc).
constexpr int kStitchThreads = 256, kStitchLd = kMaxDim + 4, kStitchMaxCols = 16; // C <= 16
constexpr int kStitchBuf = kMaxDim * (kStitchLd + kStitchMaxCols); // floats: an M, N's columns
constexpr int kStitchLds = 24; // S_j's row stride in floats: its B fragments conflict-free
static_assert(kStitchThreads / 32 * 16 >= kMaxDim, "a warp per 16 rows of S");

__host__ __device__ constexpr int stitch_bytes() { return 2 * kStitchBuf * 4; }
// With its static S tile: what a block needs (plan_state splits only where the device has it).
__host__ __device__ constexpr int stitch_smem()
{
    return stitch_bytes() + kMaxDim * kStitchLds * 4;
}

// M (KP x KP) and its N's C columns from v0 (row stride ldm in global memory) into buf; every
// thread, one cp.async group.
template <int C, int KP>
__device__ __forceinline__ void stage_map(float *buf, const float *MN, int ldm, int v0)
{
    float *Ns = buf + kMaxDim * kStitchLd;
    for (int i = threadIdx.x; i < KP * KP / 4; i += kStitchThreads) {
        const int r = i / (KP / 4), c = 4 * (i % (KP / 4));
        cp_async16(buf + r * kStitchLd + c, MN + (int64_t)r * ldm + c);
    }
    for (int i = threadIdx.x; i < KP * C / 4; i += kStitchThreads) {
        const int r = i / (C / 4), c = 4 * (i % (C / 4));
        cp_async16(Ns + r * C + c, MN + (int64_t)r * ldm + KP + v0 + c);
    }
    cp_async_commit();
}

// Rows m0..m0+15 of S_{i+1} = M_i S_i + N_i for the block's C columns (acc: the warp's
// accumulator tiles) in split tf32: M's and S's elements as hi + lo parts (split_trunc),
// three products (hi hi, hi lo, lo hi) carrying about 21 bits. M's fragments by ldmatrix (an
// 8 x 4 block of f32 is an 8 x 8 block of 16-bit halves: one instruction per k-step, not four
// loads), S's from its rows of kStitchLds; the k-steps rotate over four accumulator sets, so the
// dependent chain is a quarter as long. (Per-thread f32 FMA took 2.4 us a step in blocks of 4
// columns and 3.1 us in blocks of 8, this 2.2 us in blocks of 8: docs/PERFORMANCE.md.)
template <int C, int KP>
__device__ __forceinline__ void stitch_rows_tc(float (&acc)[C / 8][4], const float *Ms,
                                               const float *Ns, const float *Ss, int m0)
{
    constexpr int NT = C / 8;
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    float part[4][NT][4];
#pragma unroll
    for (int s = 0; s < 4; s++)
        acc_zero(part[s]);
    const float *arow = Ms + (m0 + (l & 7) + 8 * ((l >> 3) & 1)) * kStitchLd + 4 * (l >> 4);
#pragma unroll
    for (int k0 = 0; k0 < KP; k0 += 8) {
        unsigned a[4], ah[4], al[4];
        ldsm_x4(a, arow + k0);
#pragma unroll
        for (int q = 0; q < 4; q++)
            prec_tf32x3::split_trunc(__uint_as_float(a[q]), ah[q], al[q]);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            unsigned bh[2], bl[2];
            prec_tf32x3::split_trunc(Ss[(k0 + t) * kStitchLds + 8 * j + g], bh[0], bl[0]);
            prec_tf32x3::split_trunc(Ss[(k0 + t + 4) * kStitchLds + 8 * j + g], bh[1], bl[1]);
            float (&d)[4] = part[(k0 / 8) % 4][j];
            prec_tf32x3::mma(d, al, bh);
            prec_tf32x3::mma(d, ah, bl);
            prec_tf32x3::mma(d, ah, bh);
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = Ns[(m0 + acc_row(e)) * C + acc_col(j, e)] +
                        ((part[0][j][e] + part[1][j][e]) + (part[2][j][e] + part[3][j][e]));
}

template <int C, int KP> // KP a compile-time size: the staging's index arithmetic is shifts
__global__ void __launch_bounds__(kStitchThreads) stitch_starts(const ck_args p)
{
    static_assert(C == 8 || C == 16, "whole 8-column tiles, at most kStitchMaxCols");
    extern __shared__ __align__(16) float Mbuf[]; // two (M, N's columns) pairs
    __shared__ __align__(16) float Ss[kMaxDim * kStitchLds]; // (stitch_smem)
    const int VP = p.d.VP, ldm = KP + VP, m0 = 16 * (threadIdx.x >> 5);
    const int64_t tiles = VP / C, n = blockIdx.x / (tiles * p.HV);
    const int64_t hv = blockIdx.x / tiles % p.HV;
    const int v0 = (int)(blockIdx.x % tiles) * C;
    const int64_t slot0 = slot_first(p, n), count = slot_first(p, n + 1) - slot0;
    float *state;
    bool init;
    if (count < 2 || !sequence_state(p, n, hv, state, init))
        return;
    const bool kv = p.a.state_layout == GDN_STATE_KV;
    const int64_t s2 = p.a.state.stride[2], s3 = p.a.state.stride[3];
    auto maps_of = [&](int64_t i) {
        return p.maps + ((slot0 + i) * p.HV + hv) * (int64_t)KP * ldm;
    };
    stage_map<C, KP>(Mbuf, maps_of(0), ldm, v0);
    for (int i = threadIdx.x; i < KP * C; i += kStitchThreads) {
        const int k = i / C, c = i % C, v = v0 + c;
        Ss[k * kStitchLds + c] =
            init && k < p.K && v < p.V ? state[kv ? k * s2 + v * s3 : v * s2 + k * s3] : 0.0f;
    }
    for (int64_t i = 0; i + 1 < count; i++) {
        const float *Ms = Mbuf + (i & 1) * kStitchBuf, *Ns = Ms + kMaxDim * kStitchLd;
        if (i + 2 < count) {
            stage_map<C, KP>(Mbuf + ((i + 1) & 1) * kStitchBuf, maps_of(i + 1), ldm, v0);
            cp_async_wait_groups<1>();
        } else {
            cp_async_wait_groups<0>();
        }
        __syncthreads(); // M_i, N_i's columns and S_i complete in shared memory
        float acc[C / 8][4];
        if (m0 < KP)
            stitch_rows_tc<C, KP>(acc, Ms, Ns, Ss, m0);
        __syncthreads(); // every read of S_i, M_i and N_i done
        if (m0 < KP)
#pragma unroll
            for (int j = 0; j < C / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + acc_row(e), c = acc_col(j, e);
                    Ss[r * kStitchLds + c] = acc[j][e];
                    maps_of(i)[r * ldm + KP + v0 + c] = acc[j][e];
                }
    }
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
__device__ __forceinline__ bool state_block_for(const ck_args &p, int64_t id, int cols, int KP,
                                                state_block &b)
{
    const int64_t ntiles = (OUT ? 0 : KP / cols) + p.d.VP / cols;
    b.tile = (int)(id % ntiles);
    b.hv = (id / ntiles) % p.HV, b.slot = id / (ntiles * p.HV);
    if (b.slot >= slot_first(p, p.N))
        return false;
    b.n = sequence_at_slot(p, b.slot), b.seg = b.slot - slot_first(p, b.n);
    b.last_seg = b.slot + 1 == slot_first(p, b.n + 1);
    if (!OUT && b.last_seg)
        return false;
    b.m_cols = !OUT && b.tile < KP / cols;
    b.v0 = (OUT || b.m_cols ? b.tile : b.tile - KP / cols) * cols;
    return sequence_state(p, b.n, b.hv, b.state, b.init);
}

// The state pass over one segment of one sequence for one 32-column tile of one head.
// OUT: the output pass (pass 2 above, and the whole pass when the call is not split): tiles
// over V, outputs written, the last segment's state to the pool. !OUT: the maps (pass 1): tiles
// over K + V, no output, [M | N] to p.maps.
template <class P, int KP, bool OUT>
__global__ void __launch_bounds__(kTcThreads, 1) chunk_state_tc(const __grid_constant__ ck_args p)
{
    using E = typename P::st;
    // 1024-byte aligned (tc_bytes has room): the tensor maps' 128-byte swizzle (direct_keys)
    // follows the shared address, tile_at the offset in the stage
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char *const smem = smem_raw + (sbase - raw);
    const ck_dims &d = p.d;
    constexpr tc_layout L = tc_layout_for(KP, sizeof(E));
    constexpr bool kswz = tc_swizzled(KP, sizeof(E)), qswz = tc_swizzled(kC, sizeof(E));
    // V' as hi + lo, the output's right operand (prec_out)
    out_st *const Vn = reinterpret_cast<out_st *>(smem + L.vn), *const Vnl = Vn + kC * L.ldu;
    // diag(e^(G_last - G) / ||k||) V' as hi + lo: the state update's right operand, whose single
    // rounding would land in the state every chunk (with long memory, ~1e-3 of it)
    E *const Vkh = reinterpret_cast<E *>(smem + L.vk), *const Vkl = Vkh + kC * L.ldu;
    // S as two 16-bit tiles, Sh + Sl = S to about 16 bits, the right operand of W S and Q S
    E *const Sh = reinterpret_cast<E *>(smem + L.sb), *const Sl = Sh + KP * L.ldu;
    const gdn_delta_rule_args &a = p.a;
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
                S[jt][e] = owns && r == v && r < p.K ? 1.0f : 0.0f;
            else if (OUT && seg > 0)
                S[jt][e] = owns ? stitched_start(p, slot, hv, r, v) : 0.0f;
            else
                S[jt][e] = OUT && owns && init && r < p.K && v < p.V
                               ? state[kv ? r * s2 + v * s3 : v * s2 + r * s3]
                               : 0.0f;
        }
    if (owns)
        store_state_split<KP, P>(Sh, Sl, L.ldu, S);
    const seq_info s = seq_span(a.cu_seqlens, p.T, n);
    const int64_t all = chunk_first(p, n + 1) - chunk_first(p, n);
    const int64_t c0 = seg * p.segc, first = chunk_first(p, n) + c0;
    const int64_t nch = all - c0 < p.segc ? all - c0 : p.segc;
    const int frow = 16 * mt + acc_row(0); // this thread's first row of V' and O
    // stage i's mbarrier (bulk staging): its phase n completes when chunk 2n + i has landed
    __shared__ __align__(8) unsigned long long stage_bar[2];
    const unsigned bar0 = static_cast<unsigned>(__cvta_generic_to_shared(stage_bar));
    const int64_t kh = key_head_of(p, hv);
    auto stage_into = [&](int i, int64_t jj) { // the segment's chunk jj
        const int64_t c = first + jj; // (of all sequences' chunks)
        const key_at at{kh, s.t0 + kC * (c0 + jj), s.row};
        if (!kBulkStage || threadIdx.x == 0)
            stage_chunk<E, KP, OUT, kBulkStage>(p, sbase + i * L.stage, bar0 + 8 * i,
                                                c * p.HV + hv, key_slot(p, c, kh), at, v0,
                                                !m_cols);
    };
    chunk_factors next{};
    if (nch > 0) {
        if (kBulkStage && threadIdx.x == 0) {
            mbar_init(bar0);
            mbar_init(bar0 + 8);
        }
        __syncthreads(); // the barriers are initialised
        stage_into(0, 0);
        next = load_factors<OUT>(p, first * p.HV + hv, frow);
    }
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.HV + hv, tok0 = s.t0 + kC * (c0 + j);
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
                    zero_key_rows<KP>(smem + (j & 1) * L.stage + L.k, len, threadIdx.x,
                                      kTcThreads);
        } else {
            cp_async_wait_groups<0>();
        }
        __syncthreads(); // chunk j and the state copy are in; stage (j + 1) & 1 is free
        const chunk_factors fac = next;
        if (j + 1 < nch) {
            stage_into((int)((j + 1) & 1), j + 1);
            next = load_factors<OUT>(p, ch + p.HV, frow);
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
                frag_a<kswz>(fa, Wls, L.ldk, 16 * mt, 16 * ks);
                mma2<P>(lo[0], lo[1], fa, sh[ks]);
                frag_a<kswz>(fa, Ws, L.ldk, 16 * mt, 16 * ks);
                mma2<P>(acc[0], acc[1], fa, sh[ks]);
                frag_b2(sl[ks], Sl, L.ldu, 16 * ks, 16 * nh);
                mma2<P>(lo[0], lo[1], fa, sl[ks]);
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
                    store_pair_split<prec_out>(Vn + r * L.ldu + c, Vnl + r * L.ldu + c, x, y);
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
                frag_b2(fb, Vkl, L.ldu, k0, 0);
                mma2<P>(SL[0], SL[1], fa, fb);
                frag_b2(fb, Vkl, L.ldu, k0, 16);
                mma2<P>(SL[2], SL[3], fa, fb);
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
                unsigned fbl[4];
                frag_b2(fb, Vn, L.ldu, k0, 16 * nh);
                frag_b2(fbl, Vnl, L.ldu, k0, 16 * nh);
                frag_a<qswz>(fa, Als, L.ldq, 16 * mt, k0);
                mma2<prec_out>(acc[0], acc[1], fa, fb);
                frag_a<qswz>(fa, As, L.ldq, 16 * mt, k0);
                mma2<prec_out>(acc[0], acc[1], fa, fbl);
                mma2<prec_out>(acc[0], acc[1], fa, fb);
            }
            store_out_tile<P>(a.out, s.row, tok0, hv, 16 * mt, len, v0 + 16 * nh, (int)p.V, acc);
        }
        __syncthreads(); // every read of the 16-bit copies for this chunk is done
        if (owns)
            store_state_split<KP, P>(Sh, Sl, L.ldu, S);
    }
    if (!owns)
        return;
    if (!OUT) { // [M | N] of this segment, columns tile * 32 ..
        float *MN = p.maps + (slot * p.HV + hv) * (int64_t)KP * (KP + d.VP);
#pragma unroll
        for (int jt = 0; jt < 4; jt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                MN[(16 * warp + acc_row(e)) * (KP + d.VP) + tile * kVT + acc_col(jt, e)] = S[jt][e];
        return;
    }
    if (!state || !last_seg)
        return;
#pragma unroll
    for (int jt = 0; jt < 4; jt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = 16 * warp + acc_row(e), v = v0 + acc_col(jt, e);
            if (r < p.K && v < p.V)
                state[kv ? r * s2 + v * s3 : v * s2 + r * s3] = S[jt][e];
        }
}

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

constexpr int kWgThreads = 128; // one warpgroup
constexpr int kWgCols = 64;     // value columns per warpgroup
constexpr int kWgUBytes = (kWgCols / kVT) * tc_u_tile(); // a warpgroup's U tiles in a stage

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

// One stage of chunk_state_wg with NW warpgroups: byte offsets, every panel 1024-byte aligned.
// W's and Q's panels alternate (wq: W's panel p at 2p, Q's at 2p + 1), so that [W; Q] is one
// 128-row right operand of S^T (V' and the output's Q S in one product). Warpgroup w's U tiles
// are at u + w * kWgUBytes; once it has read them they hold its output tile (no region of its
// own: two warpgroups' stages fill the 227 KB an SM gives a block). The second stage starts
// `stage` bytes after the first and needs only `used` of them; the two stages' mbarriers follow
// (bar; in the dynamic area, as static shared memory would be padded to its 1024-byte alignment).
struct wg_layout {
    int wq, wl, k, a, u, ek, eg, used, stage, bar, bytes;
};

__host__ __device__ constexpr wg_layout wg_layout_for(int KP, int NW)
{
    wg_layout L{};
    const int kb = kC * KP * 2; // a 16-bit key block (KP / 64 panels)
    L.wq = 0, L.wl = 2 * kb, L.k = 3 * kb, L.a = 4 * kb;
    L.u = L.a + tc_aq_block(2); // Aqk hi, then lo
    L.ek = L.u + NW * kWgUBytes;
    L.eg = L.ek + kC * 4;
    L.used = L.eg + kC * 4;
    L.stage = (int)round_up(L.used, 1024);
    L.bar = (int)round_up(L.stage + L.used, 8);
    L.bytes = L.bar + 16 + 1024; // + the alignment of the dynamic area to 1024
    return L;
}
static_assert(kC * kWgCols * 4 <= kWgUBytes && kC * (kWgCols + 8) * 2 <= kWgUBytes,
              "the output tile (f32, or 16-bit rows of kWgCols + 8) fits in U's place");

// Chunk ch's stage for chunk_state_wg (thread 0 only; ready when bar's phase completes): W,
// W lo, K and the update's row factors always, U's 2 NW tiles of this block's columns from v0
// unless !u_in (a map's M columns), Q, Aqk and the output's row factors for the output pass.
template <int KP, bool OUT, int NW>
__device__ __forceinline__ void stage_chunk_wg(const ck_args &p, unsigned stage, unsigned bar,
                                               int64_t ch, int64_t ks, const key_at &at, int v0,
                                               bool u_in)
{
    using E = __nv_bfloat16; // the workspace's 16-bit blocks are the same for f16
    constexpr int kb = tc_key_block(KP, 2), ab = tc_aq_block(2);
    constexpr int ub = NW * kWgUBytes; // the NW warpgroups' tiles are adjacent in the workspace
    constexpr wg_layout L = wg_layout_for(KP, NW);
    const chunk_parts c = chunk_parts_of<E, KP>(p, ch, ks, v0);
    mbar_expect(bar, 3 * kb + kC * 4 + (u_in ? ub : 0) + (OUT ? kb + ab + kC * 4 : 0));
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
    stage_part<true>(stage + L.wl, c.wl, kb, bar);
    if (p.direct_keys)
        stage_key_panels<KP>(stage + L.k, kPanelBytes, &p.kmap, at, bar);
    else
        stage_part<true>(stage + L.k, c.k, kb, bar);
    stage_part<true>(stage + L.ek, p.ek + ch * kC, kC * 4, bar);
    if (OUT) {
        stage_part<true>(stage + L.a, c.aq, ab, bar);
        stage_part<true>(stage + L.eg, p.eg + ch * kC, kC * 4, bar);
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
// (store_out_pair).
template <class P>
__device__ __forceinline__ void store_out_wg(const gdn_tensor &out, unsigned char *tile,
                                             const float *o, int64_t row, int64_t tok0, int64_t hv,
                                             int v0, int len, int V, bool pairs, int wg)
{
    using E = typename P::st;
    const int tid = threadIdx.x % kWgThreads, lane = tid & 31, warp = tid >> 5;
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
// K + V columns of [M | N]). NW = 2 runs only for KP = VP = 128 (wg_width_max), where M and N
// have two tiles each: a block's two tiles are both of M or both of N, of one head and segment
// (so both warpgroups return together below), and their U tiles are adjacent.
template <class P, int KP, bool OUT, int NW>
__global__ void __launch_bounds__(NW *kWgThreads, 1)
    chunk_state_wg(const __grid_constant__ ck_args p)
{
    static_assert(NW == 1 || (NW == 2 && KP == 128), "two warpgroups only for K = V = 128");
#ifdef GDN_WGMMA
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    constexpr wg_layout L = wg_layout_for(KP, NW);
    constexpr int NKS = KP / 16, NS = KP / 2; // k-steps over the state's rows; its registers
    const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char *smem = smem_raw + (sbase - raw);
    const ck_dims &d = p.d;
    const gdn_delta_rule_args &a = p.a;
    const int wg = NW > 1 ? (int)(threadIdx.x / kWgThreads) : 0;
    state_block b; // the blocks' tiles in order: all warpgroups share the head and segment
    if (!state_block_for<OUT>(p, blockIdx.x * NW + wg, kWgCols, KP, b))
        return;
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
            S[i] = v == k && k < p.K ? 1.0f : 0.0f;
        else if (OUT && seg > 0)
            S[i] = stitched_start(p, slot, hv, k, v);
        else
            S[i] = OUT && init && k < p.K && v < p.V
                       ? state[kv ? k * s2 + v * s3 : v * s2 + k * s3]
                       : 0.0f;
    }
    const seq_info s = seq_span(a.cu_seqlens, p.T, n);
    const int64_t all = chunk_first(p, n + 1) - chunk_first(p, n);
    const int64_t c0 = seg * p.segc, first = chunk_first(p, n) + c0;
    const int64_t nch = all - c0 < p.segc ? all - c0 : p.segc;
    const unsigned bar0 = sbase + L.bar; // the two stages' barriers
    const int64_t kh = key_head_of(p, hv);
    const bool out_pairs = OUT && out_pairs_ok<P>(a.out, v0, (int)p.V);
    auto stage_into = [&](int i, int64_t jj) { // the segment's chunk jj (thread 0's v0 is the
        const int64_t c = first + jj;              // block's first column)
        const key_at at{kh, s.t0 + kC * (c0 + jj), s.row};
        if (threadIdx.x == 0)
            stage_chunk_wg<KP, OUT, NW>(p, sbase + i * L.stage, bar0 + 8 * i, c * p.HV + hv,
                                        key_slot(p, c, kh), at, v0, !m_cols);
    };
    float next_decay = 0.0f;
    if (nch > 0) {
        if (threadIdx.x == 0) {
            mbar_init(bar0);
            mbar_init(bar0 + 8);
        }
        __syncthreads(); // the barriers are initialised
        stage_into(0, 0);
        next_decay = p.gl[first * p.HV + hv];
    }
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.HV + hv, tok0 = s.t0 + kC * (c0 + j);
        const int len = (int)(s.len - kC * (c0 + j) < kC ? s.len - kC * (c0 + j) : kC);
        const unsigned sst = sbase + (unsigned)(j & 1) * L.stage;
        const unsigned char *stg = smem + (j & 1) * L.stage;
        mbar_wait(bar0 + 8 * (unsigned)(j & 1), (unsigned)(j >> 1) & 1u);
        const bool zero = p.direct_keys && len < kC; // (the products read K by the async proxy)
        if (zero) {
            zero_key_rows<KP>(smem + (j & 1) * L.stage + L.k, len, threadIdx.x, NW * kWgThreads);
            fence_proxy_async();
        }
        // chunk j is in; every thread is done with chunk j - 1 (its products waited for, its
        // output tile in stage (j + 1) & 1 stored), so that stage is free
        if (j > 0 || zero)
            __syncthreads();
        const float decay = next_decay;
        if (j + 1 < nch) {
            stage_into((int)((j + 1) & 1), j + 1);
            next_decay = p.gl[ch + p.HV];
        }
        // S^T as hi + lo A fragments: k-step ks holds keys 16ks..16ks+15
        unsigned sh[NKS][4], sl[NKS][4];
#pragma unroll
        for (int ks = 0; ks < NKS; ks++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                split_pair<P>(S[8 * ks + 2 * q], S[8 * ks + 2 * q + 1], sh[ks][q], sl[ks][q]);
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
            acc[i] = OUT && i < 32 ? -u_at(i) * P::lo_scale : 0.0f;
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
            wg_mma<P::is_f16, 1, 0, 2 * NA>(acc, sl[ks], dwq);
            wg_mma<P::is_f16, 1, 0, 64>(acc, sh[ks], dwl);
        }
        if constexpr (scaled) {
            wg_lo_products_done<P, NA>(acc);
#pragma unroll
            for (int ks = 0; ks < NKS; ks++)
                wg_mma<P::is_f16, 1, 0, 2 * NA>(acc, sh[ks], wq_desc(ks));
        }
        if constexpr (OUT) {
            wg_commit_wait();
        } else {
            wg_hold<NA>(acc);
            wg_commit();
            float u[32];
#pragma unroll
            for (int i = 0; i < 32; i++)
                u[i] = u_at(i);
#pragma unroll
            for (int i = 0; i < NS; i++) // S's fragments, not S, are the products' operands
                S[i] *= decay * P::lo_scale; // (the update's lo products come first, below)
            wg_wait_all();
            wg_hold<NA>(acc);
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
        auto k_desc = [&](int ks) { return wg_desc(sst + L.k + ks * 2048, kPanelBytes, 1024); };
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t dk = k_desc(ks);
            if (!scaled)
                wg_mma<P::is_f16, 1, 1, KP>(S, vh[ks], dk);
            wg_mma<P::is_f16, 1, 1, KP>(S, vl[ks], dk);
            if (OUT) { // V'^T Aqk^T, both as hi + lo (all but lo x lo)
                const uint64_t da = wg_desc(sst + L.a + ks * 32, 16, 1024);
                const uint64_t dal = wg_desc(sst + L.a + tc_aq_part(2) + ks * 32, 16, 1024);
                wg_mma<prec_out::is_f16, 1, 0, 64>(ot, vs[ks], dal);
                wg_mma<prec_out::is_f16, 1, 0, 64>(ot, vsl[ks], da);
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
            store_out_wg<P>(a.out, smem + (j & 1) * L.stage + L.u + wg * kWgUBytes, ot, s.row,
                            tok0, hv, v0, len, (int)p.V, out_pairs, wg);
        }
    }
    if (!OUT) { // [M | N] of this segment, columns tile * 64 ..
        float *MN = p.maps + (slot * p.HV + hv) * (int64_t)KP * (KP + d.VP);
#pragma unroll
        for (int i = 0; i < NS; i++) {
            const int v = vr + 8 * ((i >> 1) & 1), k = 8 * (i >> 2) + 2 * t + (i & 1);
            MN[k * (KP + d.VP) + tile * kWgCols + v] = S[i];
        }
        return;
    }
    if (!state || !last_seg)
        return;
#pragma unroll
    for (int i = 0; i < NS; i++) {
        const int v = v0 + vr + 8 * ((i >> 1) & 1), k = 8 * (i >> 2) + 2 * t + (i & 1);
        if (k < p.K && v < p.V)
            state[kv ? k * s2 + v * s3 : v * s2 + k * s3] = S[i];
    }
#else
    (void)p;
#endif
}

int elem_size(gdn_dtype dt) { return dt == GDN_F32 ? 4 : 2; }

// Chunk slots the workspace holds: every sequence's chunks, bounded without reading
// cu_seqlens (each sequence adds at most one partial chunk).
int64_t chunk_bound(const gdn_delta_rule_problem *p)
{
    const int64_t N = p->seqs.count;
    if (!p->seqs.cu_seqlens)
        return N * chunks_for(p->T);
    return chunks_for(p->T) + N;
}

// An attribute of the current device, or 0 where it cannot be read.
int device_attr(cudaDeviceAttr what)
{
    int dev = 0, x = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&x, what, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return x;
}

int device_sms() { return device_attr(cudaDevAttrMultiProcessorCount); }
int max_shared_optin() { return device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin); }

// Whether the current device runs chunk_state_wg's sm_90a code (not an image built for another
// architecture, where the kernel is empty). Asked once per device.
bool wg_loaded()
{
    static signed char known[64];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64)
        return false;
    if (!known[dev]) {
        cudaFuncAttributes fa;
        const bool ok = cudaFuncGetAttributes(&fa, chunk_state_wg<prec_bf16, 128, true, 1>) ==
                            cudaSuccess &&
                        fa.ptxVersion >= 90 && fa.binaryVersion == 90;
        cudaGetLastError();
        known[dev] = ok ? 1 : -1;
    }
    return known[dev] > 0;
}

// Whether the state passes may take q and k straight from the inputs (direct_keys): 16-bit
// inputs, K padded to whole 64-element panels (swizzled blocks), and the sm_90a kernels running
// (bulk staging; the same image as chunk_state_wg's). GDN_CUDA_KEY_TILES=copy keeps the
// preparation's Qd / Kd copies (tests).
bool direct_keys_possible(const gdn_delta_rule_problem *p)
{
    const char *e = getenv("GDN_CUDA_KEY_TILES");
    if (e && strcmp(e, "copy") == 0)
        return false;
    return elem_size(p->a.q.dtype) == 2 && round_up(p->K, 32) % kPanel == 0 && wg_loaded();
}

// A tensor map over a 16-bit token tensor t ([B, T, heads, n], the last dim contiguous) whose box
// is one swizzled key panel (stage_key_panels): 64 elements x 64 tokens of one head and batch row,
// zeros past n and past T. False where the driver's encoder cannot be reached or refuses t (its
// address and strides must be multiples of 16 bytes): the caller then copies the keys.
bool key_panel_map(CUtensorMap *m, const gdn_tensor &t)
{
    typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static const encode_fn encode = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            f = nullptr;
        }
        return reinterpret_cast<encode_fn>(f);
    }();
    if (!encode || t.ndim != 4 || t.stride[3] != 1)
        return false;
    for (int i = 0; i < 4; i++)
        if (t.shape[i] < 1 || t.shape[i] > INT32_MAX)
            return false;
    // a dim of one element has no stride of its own: give it one the encoder takes
    const int64_t s2 = t.shape[2] > 1 ? t.stride[2] : t.shape[3];
    const int64_t s1 = t.shape[1] > 1 ? t.stride[1] : s2 * t.shape[2];
    const int64_t s0 = t.shape[0] > 1 ? t.stride[0] : s1 * t.shape[1];
    const cuuint64_t dim[4] = {(cuuint64_t)t.shape[3], (cuuint64_t)t.shape[2],
                               (cuuint64_t)t.shape[1], (cuuint64_t)t.shape[0]};
    const cuuint64_t stride[3] = {(cuuint64_t)s2 * 2, (cuuint64_t)s1 * 2, (cuuint64_t)s0 * 2};
    const cuuint32_t box[4] = {kPanel, 1, kC, 1}, unit[4] = {1, 1, 1, 1};
    return encode(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, t.data, dim, stride, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the unsplit mma.sync state pass would leave most SMs idle: at most half as many
// (32-column tile, head, sequence) blocks as SMs. Such calls are split into segments.
bool few_state_blocks(const gdn_delta_rule_problem *p)
{
    return 2 * (round_up(p->V, kVT) / kVT) * p->HV * p->seqs.count <= device_sms();
}

// Whether a call with too many state blocks for few_state_blocks, but no more than one wave of
// them, runs faster in two segments on warpgroup products (maps, stitch, output pass; each pass
// half the chunk steps) than unsplit on chunk_state_tc. Uniform-length calls only (the host
// does not read cu_seqlens), and only where the stitch fits (else plan_state would not split).
// The model, 0.01 us, fitted on the H200 at T = 8192 and 32768, HV = 32 (docs/PERFORMANCE.md,
// twenty-fifth session): chunk_state_tc 2.18 us a chunk step + 8 us; split, 1.42 + 2.24 us a
// step of the maps and the output pass, + 5.6 and 35 us a call (each pass's time at the two
// lengths, solved for a step and a fixed part), + 17 us of stitch. So sequences of more than
// about 140 chunks split (32768 tokens: 1124 -> 995 us measured), shorter ones do not (8192:
// 287 unsplit against 292 split).
struct pass_cost {
    int64_t step, fixed; // 0.01 us
};
constexpr pass_cost kTcUnsplit = {218, 800}, kWgMaps1 = {142, 560}, kWgOut1 = {224, 3500};
constexpr int64_t kStitchOnce = 1700;

bool two_segments_pay(const gdn_delta_rule_problem *p)
{
    const int64_t blocks = round_up(p->V, kVT) / kVT * p->HV * p->seqs.count;
    if (p->seqs.cu_seqlens || blocks > device_sms() || max_shared_optin() < stitch_smem())
        return false;
    const int64_t c = chunks_for(p->T), half = (c + 1) / 2;
    const int64_t split = (kWgMaps1.step + kWgOut1.step) * half + kWgMaps1.fixed +
                          kWgOut1.fixed + kStitchOnce;
    return split < kTcUnsplit.step * c + kTcUnsplit.fixed;
}

// Whether this call's state pass runs chunk_state_wg or chunk_state_tc. chunk_state_wg needs
// 16-bit inputs, K and V in {64, 128} after rounding up to 32 (V: a multiple of 64), its shared
// memory and the sm_90a code loaded; it runs the calls that are split into segments (few heads
// and sequences, or long ones where two segments pay), where it measured 10-25% faster than
// chunk_state_tc, and not the others, where chunk_state_tc's 128-plus blocks of 32 columns
// measured 5-10% faster than its half as many of 64 (H200; docs/PERFORMANCE.md).
// GDN_CUDA_STATE_PASS=mma or wgmma forces one (tests, comparisons; wgmma only where it can run).
bool use_wg(const gdn_delta_rule_problem *p)
{
    if (elem_size(p->a.q.dtype) != 2)
        return false;
    const int64_t KP = round_up(p->K, 32), VP = round_up(p->V, 32);
    if ((KP != 64 && KP != 128) || VP % kWgCols != 0)
        return false;
    const char *e = getenv("GDN_CUDA_STATE_PASS");
    if (e && strcmp(e, "mma") == 0)
        return false;
    if (max_shared_optin() < wg_layout_for((int)KP, 1).bytes || !wg_loaded())
        return false;
    return (e && strcmp(e, "wgmma") == 0) || few_state_blocks(p) || two_segments_pay(p);
}

// The widths chunk_state_wg's blocks may have, in warpgroups: 2 when K and V round up to 128, so
// that each head's M and N have two 64-column tiles each (a block's pair shares its head, its
// segment and whether U comes in) and the two warpgroups' stages fit the device's shared memory;
// else only 1. Two a block run about 1.25 times one's work per step (below), so they pay where
// blocks would otherwise queue in waves, not where each SM would hold one block anyway.
int wg_width_max(const gdn_delta_rule_problem *p)
{
    if (round_up(p->K, 32) != 128 || round_up(p->V, 32) != 128)
        return 1;
    return max_shared_optin() >= wg_layout_for(128, 2).bytes ? 2 : 1;
}

int64_t longer(int64_t a, int64_t b) { return a > b ? a : b; }

// Waves of `blocks` blocks at one block per SM.
int64_t waves(int64_t blocks, int64_t sms) { return (blocks + sms - 1) / sms; }

// How a call's state pass runs: chunks per segment (at least every sequence's chunk count when
// not split) and chunk_state_wg's warpgroups per block in the maps and the output pass.
struct state_plan {
    int64_t segc;
    int nw_maps, nw_out;
};

// Step times (0.01 us) of the split kernels, from which plan_state models a call: per chunk step
// of a block and wave of the maps and the output pass, per segment boundary of the stitch.
// chunk_state_wg's are the H200's, fitted to the passes' times at T = 32768 and 131072, HV = 4
// (docs/PERFORMANCE.md, twenty-first session): one warpgroup a block 1.47 and 2.25 us, two 2.24
// and 3.6 us, the stitch 2.3 us. chunk_state_tc keeps the nineteenth session's ratios 2 : 4 : 3.
// These chains bind on the H200; on the H100 the passes are bound by the bytes they stage (one
// wave of 128-chunk segments took as long as two of 63), which pass_bytes models.
struct step_costs {
    int64_t maps, out;
};
constexpr step_costs kWgSteps[3] = {{0, 0}, {147, 225}, {224, 360}}; // by warpgroups a block
constexpr int64_t kWgStitchStep = 230;
constexpr step_costs kTcSteps = {200, 400};
constexpr int64_t kTcStitchStep = 300;

// Bytes a split pass moves per (chunk, value head), and the maps pass per map: the blocks it
// stages (W hi + lo, U and the decay factors; the key head's k rows, from the workspace or on
// sm_90 the inputs, shared by its HV / H value heads through L2; the output pass also Aqk
// hi + lo, q and the output rows), or the map it writes.
struct pass_bytes {
    int64_t maps, map, out;
};

pass_bytes split_pass_bytes(const gdn_delta_rule_problem *p)
{
    const int64_t KP = round_up(p->K, 32), VP = round_up(p->V, 32), share = p->HV / p->H;
    const int64_t kb = tc_key_block((int)KP, 2), ub = VP / kVT * tc_u_tile();
    const int64_t maps = 2 * kb + ub + kb / share + kC * 4;
    const int64_t out = maps + tc_aq_block(2) + kb / share + kC * 4 +
                        kC * p->V * elem_size(p->a.out.dtype);
    return pass_bytes{maps, KP * (KP + VP) * 4, out};
}

// Bytes the split passes stream per 0.01 us, or 0 where the device does not say: the memory's
// peak (memory_peak_bytes_per_s) times 0.795, what the output pass reached on the H100
// where it was bound by bytes (pass_bytes' 944 MB at 131072 / 4 in 354 us, peak 3.35 TB/s;
// thirtieth session; the plans at the issue's rows and a few more shapes are the same from 0.77
// to 0.9). Asked once per device.
int64_t stream_bytes_per_step_unit()
{
    static int64_t known[64]; // 0: not asked yet; -1: the device does not say
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        cudaGetLastError();
        return 0;
    }
    if (!known[dev]) {
        const int64_t rate = (int64_t)(memory_peak_bytes_per_s(dev) * 0.795 * 1e-8);
        known[dev] = rate > 0 ? rate : -1;
    }
    return known[dev] > 0 ? known[dev] : 0;
}

// The plan for a call (sequence splitting, above chunk_state_tc). Split only 16-bit inputs, only
// where the stitch's shared memory fits the device, and only when few_state_blocks (the state
// pass runs one block per SM) or, on warpgroup products, two_segments_pay; then into the G
// segments per sequence, and with the warpgroups per block, that minimise the modelled time: per
// pass, its step time x chunks per segment x waves of its blocks (the maps pass KT + VT tiles of
// cols value columns per head and segment but the last, cols the block's width, the output pass
// VT tiles), or the time its bytes take at the device's rate where that is longer, plus the
// stitch's step per segment boundary. Ties go to fewer segments and warpgroups.
// Unsplit calls run one warpgroup a block. GDN_CUDA_SEGMENT_CHUNKS=n forces n chunks a segment,
// GDN_CUDA_WG_WIDTH=n or m,o the warpgroups per block of both passes or of the maps (m) and the
// output pass (o); a width that cannot run is ignored (testing and benchmarking).
state_plan plan_state(const gdn_delta_rule_problem *p, bool wg)
{
    const int64_t chunks = chunks_for(p->T), most = chunks > 1 ? chunks : 1;
    const int top = wg ? wg_width_max(p) : 1;
    int lo_m = 1, hi_m = top, lo_o = 1, hi_o = top;
    const char *ew = getenv("GDN_CUDA_WG_WIDTH");
    int fm = 0, fo = 0;
    const int nf = ew ? sscanf(ew, "%d,%d", &fm, &fo) : 0;
    fo = nf == 1 ? fm : fo;
    if (nf >= 1 && fm >= 1 && fm <= top)
        lo_m = hi_m = fm;
    if (nf >= 1 && fo >= 1 && fo <= top)
        lo_o = hi_o = fo;
    const char *es = getenv("GDN_CUDA_SEGMENT_CHUNKS");
    const int64_t asked = es ? atoll(es) : 0, forced = asked > 0 ? (asked < most ? asked : most) : 0;
    const bool split = elem_size(p->a.q.dtype) == 2 && max_shared_optin() >= stitch_smem() &&
                       (forced || few_state_blocks(p) || (wg && two_segments_pay(p)));
    if (!split)
        return state_plan{most, lo_m, lo_o}; // (1 unless forced)
    const int dev_sms = device_sms(); // (0 where it cannot be read)
    const int64_t sms = dev_sms > 0 ? dev_sms : 1, N = p->seqs.count;
    const int64_t heads = p->HV * N;
    const int64_t per_seq = p->seqs.cu_seqlens ? (most + N - 1) / N : most;
    // blocks per head and segment of each pass, by warpgroups a block (once, not per candidate)
    int64_t maps_tiles[3] = {0, 0, 0}, out_tiles[3] = {0, 0, 0};
    for (int nw = 1; nw <= top; nw++) {
        const int64_t cols = wg ? kWgCols * nw : kVT;
        out_tiles[nw] = round_up(p->V, cols) / cols;
        maps_tiles[nw] = round_up(p->K, cols) / cols + out_tiles[nw];
    }
    const pass_bytes pb = split_pass_bytes(p);
    const int64_t rate = stream_bytes_per_step_unit();
    const int64_t out_floor = rate > 0 ? per_seq * heads * pb.out / rate : 0;
    state_plan best{most, lo_m, lo_o};
    int64_t best_cost = -1;
    auto consider = [&](int64_t segc, int64_t G) {
        const int64_t maps_floor =
            rate > 0 ? (G - 1) * heads * (segc * pb.maps + pb.map) / rate : 0;
        for (int m = lo_m; m <= hi_m; m++)
            for (int o = lo_o; o <= hi_o; o++) {
                const step_costs sm = wg ? kWgSteps[m] : kTcSteps, so = wg ? kWgSteps[o] : kTcSteps;
                const int64_t maps = (G - 1) * maps_tiles[m] * heads;
                const int64_t cost =
                    longer(sm.maps * segc * waves(maps, sms), maps_floor) +
                    longer(so.out * segc * waves(G * out_tiles[o] * heads, sms), out_floor) +
                    (wg ? kWgStitchStep : kTcStitchStep) * (G - 1);
                if (best_cost < 0 || cost < best_cost)
                    best = state_plan{segc, m, o}, best_cost = cost;
            }
    };
    if (forced)
        consider(forced, (per_seq + forced - 1) / forced);
    else // below 4 chunks a segment the stitch costs more; past one segment per SM the output
         // pass only gains waves (no G at all: too short to split, best stays unsplit)
        for (int64_t G = 2; G <= sms && (per_seq + G - 1) / G >= 4; G++)
            consider((per_seq + G - 1) / G, G);
    return best;
}

// Segment slots: one per sequence unsplit; without cu_seqlens exactly N x a T-token sequence's
// segments (the device's seq_slots; a sequence its slot skips has one); else a bound without
// reading cu_seqlens.
int64_t segment_slots(const gdn_delta_rule_problem *p, int64_t segc)
{
    const int64_t most = chunks_for(p->T), N = p->seqs.count;
    if (!p->seqs.cu_seqlens)
        return N * segments_for(most, segc);
    return segc >= most ? N : N + (chunk_bound(p) + segc - 1) / segc;
}

struct ws_layout {
    size_t off, gl, eg, ek, W, Wl, Qd, Kd, U, Aq, seg_off, maps, total;
    state_plan plan;
    int64_t nslots;
    bool wg; // the state pass is chunk_state_wg (use_wg), decided once for both
};

ws_layout workspace_layout(const gdn_delta_rule_problem *p)
{
    const int es = elem_size(p->a.q.dtype);
    const ck_dims d = dims_for(p->K, p->V, es);
    const size_t nch = (size_t)(chunk_bound(p) * p->HV);
    ws_layout w;
    size_t at = 0;
    auto take = [&at](size_t bytes) { size_t o = at; at += (bytes + 255) / 256 * 256; return o; };
    w.off = take((size_t)(p->seqs.count + 1) * sizeof(int64_t));
    w.gl = take(nch * sizeof(float));
    w.eg = take(nch * kC * sizeof(float));
    w.ek = take(es == 2 ? nch * kC * sizeof(float) : 0);
    const bool tc = es == 2; // the 16-bit path's padded blocks (tc_key_block, ...)
    const size_t kblk = tc ? (size_t)tc_key_block(d.KP, es) : (size_t)kC * d.KP * es;
    const size_t ublk = tc ? (size_t)(d.VP / kVT) * tc_u_tile() : (size_t)kC * d.VP * 4;
    const size_t ablk = tc ? (size_t)tc_aq_block(es) : (size_t)kC * kC * es;
    w.W = take(nch * kblk);
    w.Wl = take(tc ? nch * kblk : 0);
    // the 16-bit path keeps one Qd / Kd block per (chunk, key head) (key_slot)
    const size_t nqk = tc ? (size_t)(chunk_bound(p) * p->H) : nch;
    w.Qd = take(nqk * kblk);
    w.Kd = take(nqk * kblk);
    w.U = take(nch * ublk);
    w.Aq = take(nch * ablk);
    w.wg = use_wg(p);
    w.plan = plan_state(p, w.wg);
    w.nslots = segment_slots(p, w.plan.segc);
    w.seg_off = take((size_t)(p->seqs.count + 1) * sizeof(int64_t));
    const bool split = w.nslots > p->seqs.count;
    w.maps = take(split ? (size_t)(w.nslots * p->HV) * d.KP * (d.KP + d.VP) * sizeof(float) : 0);
    w.total = at;
    return w;
}

template <int C, int KP>
void launch_stitch_cols(const ck_args &k, cudaStream_t stream)
{
    cudaFuncSetAttribute(stitch_starts<C, KP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         stitch_bytes());
    stitch_starts<C, KP><<<(unsigned)(k.N * k.HV * (k.d.VP / C)), kStitchThreads,
                           stitch_bytes(), stream>>>(k);
}

// The stitch in blocks of 8 columns where that leaves at most one block per SM, else of 16 (VP
// is a multiple of 32): its chain is latency bound, and narrower blocks cut each step.
// GDN_CUDA_STITCH_COLS=8|16 forces a width (tests).
template <int KP>
void launch_stitch(const ck_args &k, cudaStream_t stream)
{
    const int64_t sms = device_sms(), heads = k.N * k.HV;
    const char *e = getenv("GDN_CUDA_STITCH_COLS");
    int cols = e ? atoi(e) : 0;
    if (cols != 8 && cols != 16)
        cols = heads * (k.d.VP / 8) <= sms ? 8 : 16;
    if (cols == 8)
        launch_stitch_cols<8, KP>(k, stream);
    else
        launch_stitch_cols<16, KP>(k, stream);
}

// One of chunk_state_wg's passes (OUT: the output pass, else the maps) with NW warpgroups a
// block: a block per NW x 64 columns of [M | N] (maps) or of V, head and segment slot.
template <class P, int KP, bool OUT, int NW>
void launch_state_wg(const ck_args &k, cudaStream_t stream)
{
    constexpr int bytes = wg_layout_for(KP, NW).bytes, cols = NW * kWgCols;
    const int64_t tiles = (OUT ? 0 : KP / cols) + k.d.VP / cols;
    cudaFuncSetAttribute(chunk_state_wg<P, KP, OUT, NW>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    chunk_state_wg<P, KP, OUT, NW><<<(unsigned)(tiles * k.HV * k.nslots), NW * kWgThreads, bytes,
                                     stream>>>(k);
}

// launch_state_wg with nw warpgroups a block: 2 only where plan_state chose it, which
// wg_width_max allows only for K = V = 128 (a block's two tiles must be one head's).
template <class P, int KP, bool OUT>
void launch_state_wg_nw(const ck_args &k, int nw, cudaStream_t stream)
{
    if constexpr (KP == 128)
        if (nw == 2)
            return launch_state_wg<P, KP, OUT, 2>(k, stream);
    launch_state_wg<P, KP, OUT, 1>(k, stream);
}

// The 16-bit kernels for K <= KP: the preparation, then the state pass (split calls first make
// every segment's maps and stitch the segments' starting states).
template <class P, int KP>
void launch_tc(const ck_args &k, cudaStream_t stream)
{
    cudaFuncSetAttribute(chunk_prep_tc<P, KP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k.d.prep_tc_bytes);
    if (k.nc > 0)
        chunk_prep_tc<P, KP><<<dim3((unsigned)k.nc, (unsigned)k.HV), kPrepThreads,
                               k.d.prep_tc_bytes, stream>>>(k);
    const bool split = k.nslots > k.N;
    if constexpr (KP == 64 || KP == 128) {
        if (k.wg) {
            if (split) {
                launch_state_wg_nw<P, KP, false>(k, k.nw_maps, stream);
                launch_stitch<KP>(k, stream);
            }
            launch_state_wg_nw<P, KP, true>(k, k.nw_out, stream);
            return;
        }
    }
    const int64_t VT = k.d.VP / kVT;
    if (split) {
        cudaFuncSetAttribute(chunk_state_tc<P, KP, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, k.d.tc_bytes);
        const unsigned blocks = (unsigned)((KP / kVT + VT) * k.HV * k.nslots);
        chunk_state_tc<P, KP, false><<<blocks, kTcThreads, k.d.tc_bytes, stream>>>(k);
        launch_stitch<KP>(k, stream);
    }
    cudaFuncSetAttribute(chunk_state_tc<P, KP, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k.d.tc_bytes);
    const unsigned blocks = (unsigned)(VT * k.HV * k.nslots);
    chunk_state_tc<P, KP, true><<<blocks, kTcThreads, k.d.tc_bytes, stream>>>(k);
}

template <class P>
gdn_status launch_chunked(gdn_context *ctx, ck_args &k, cudaStream_t stream)
{
    if (!k.uniform)
        chunk_offsets<<<1, 1024, 0, stream>>>(k);
    const dim3 chunks((unsigned)k.nc, (unsigned)k.HV);
    if constexpr (P::KS == 16) {
        switch (k.d.KP) {
        case 32: launch_tc<P, 32>(k, stream); break;
        case 64: launch_tc<P, 64>(k, stream); break;
        case 96: launch_tc<P, 96>(k, stream); break;
        default: launch_tc<P, 128>(k, stream); break;
        }
    } else {
        cudaFuncSetAttribute(chunk_prep<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             k.d.prep_bytes);
        if (k.nc > 0)
            chunk_prep<P><<<chunks, kThreads, k.d.prep_bytes, stream>>>(k);
        cudaFuncSetAttribute(chunk_state<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             k.d.state_bytes);
        const unsigned blocks = (unsigned)((int64_t)(k.d.VP / kVT) * k.HV * k.N);
        chunk_state<P><<<blocks, kThreads, k.d.state_bytes, stream>>>(k);
    }
    return cuda_check(ctx, "gdn_delta_rule");
}

} // namespace

extern "C" gdn_status cuda_chunked_supported(const gdn_delta_rule_problem *p, char *why, size_t n)
{
    if (p->K > kMaxDim || p->V > kMaxDim) {
        snprintf(why, n, "K is %lld and V %lld, expected both <= %d for the chunked form on cuda",
                 (long long)p->K, (long long)p->V, kMaxDim);
        return GDN_ERR_UNSUPPORTED;
    }
    const int es = elem_size(p->a.q.dtype);
    const ck_dims d = dims_for(p->K, p->V, es);
    const int prep = es == 2 ? d.prep_tc_bytes : d.prep_bytes;
    const int pass = es == 2 ? d.tc_bytes : d.state_bytes;
    // + the state pass's static shared memory (its two stage barriers, 16 bytes)
    const int need = (prep > pass ? prep : pass) + 16;
    const int have = max_shared_optin();
    if (need > have) {
        snprintf(why, n, "the chunked form needs %d bytes of shared memory per block for these "
                 "shapes and dtype, the device allows %d", need, have);
        return GDN_ERR_UNSUPPORTED;
    }
    return GDN_OK;
}

extern "C" size_t cuda_chunked_workspace(const gdn_delta_rule_problem *p)
{
    return workspace_layout(p).total;
}

extern "C" gdn_status cuda_delta_rule_chunked(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                              void *workspace)
{
    if (p->seqs.count == 0)
        return GDN_OK;
    ck_args k;
    k.a = p->a;
    k.T = p->T, k.H = p->H, k.HV = p->HV, k.K = p->K, k.V = p->V, k.S = p->S;
    k.ratio = p->ratio, k.N = p->seqs.count;
    k.nc = chunk_bound(p);
    k.scale = (float)p->scale;
    k.has_state = p->has_state;
    k.d = dims_for(p->K, p->V, elem_size(p->a.q.dtype));
    const ws_layout w = workspace_layout(p);
    unsigned char *base = static_cast<unsigned char *>(workspace);
    k.chunk_off = reinterpret_cast<int64_t *>(base + w.off);
    k.gl = reinterpret_cast<float *>(base + w.gl);
    k.eg = reinterpret_cast<float *>(base + w.eg);
    k.ek = reinterpret_cast<float *>(base + w.ek);
    k.W = base + w.W, k.Wl = base + w.Wl, k.Qd = base + w.Qd, k.Kd = base + w.Kd;
    k.U = base + w.U, k.Aq = base + w.Aq;
    k.segc = w.plan.segc, k.nslots = w.nslots;
    k.wg = w.wg, k.nw_maps = w.plan.nw_maps, k.nw_out = w.plan.nw_out;
    k.seg_off = reinterpret_cast<int64_t *>(base + w.seg_off);
    // every sequence T tokens long and run: no cu_seqlens, no slots (validation then holds the
    // pool to a slot per sequence); nc is then exactly N x seq_chunks (chunk_bound)
    k.uniform = !p->seqs.cu_seqlens && !p->seqs.slots;
    k.seq_chunks = chunks_for(k.T);
    k.seq_slots = segments_for(k.seq_chunks, k.segc);
    k.maps = reinterpret_cast<float *>(base + w.maps);
    k.direct_keys = direct_keys_possible(p) && key_panel_map(&k.qmap, p->a.q) &&
                    key_panel_map(&k.kmap, p->a.k);
    cudaStream_t stream = cuda_stream(ctx);
    switch (p->a.q.dtype) {
    case GDN_BF16: return launch_chunked<prec_bf16>(ctx, k, stream);
    case GDN_F16: return launch_chunked<prec_f16>(ctx, k, stream);
    default: return launch_chunked<prec_tf32x3>(ctx, k, stream);
    }
}
