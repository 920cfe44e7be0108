// Device helpers the chunked prefill's kernels share: where a block's sequence, chunk, segment
// and pool state are, the gates of a chunk, and a few stores and index maps.
#ifndef GDN_CUDA_CHUNK_DEVICE_CUH
#define GDN_CUDA_CHUNK_DEVICE_CUH

#include "cuda_chunk.cuh"
#include "cuda_mma.cuh"

// Element (r, c) of a U tile (64 rows of 32 f32, unpadded) in the 16-bit path's workspace and
// stages: each row's 8-float groups XOR-swizzled by (r / 2) % 4. The state passes and the
// preparation touch U in accumulator layouts, a warp at once on 8 consecutive rows (pairs of
// columns) or on 4 rows 2 apart (single columns), which the swizzle spreads over all 32 banks
// (rows padded to 40 floats did that too, for 25% more bytes and no time gained).
template <int ld> // row length (floats), a multiple of 32
__host__ __device__ constexpr int swizzled_index(int r, int c)
{
    return r * ld + (c ^ (8 * ((r >> 1) & 3)));
}
__host__ __device__ constexpr int u_index(int r, int c) { return swizzled_index<kVT>(r, c); }

// The policy of the output's Aqk V' on the 16-bit path: bf16 hi + lo whatever the input type
// (both operands are made by the kernels; see the precision note in cuda_delta_rule_chunked.cu).
using prec_out = prec_bf16;
using out_st = prec_out::st;

// ---- sequences, chunks, segments ------------------------------------------------------------

// The sequence chunk c belongs to: the last n with off[n] <= c.
__device__ inline int64_t sequence_of_chunk(const int64_t *off, int64_t N, int64_t c)
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
__device__ __forceinline__ int64_t chunk_first(const ck_seqs &p, int64_t n)
{
    return p.uniform ? n * p.seq_chunks : p.chunk_off[n];
}

__device__ __forceinline__ int64_t slot_first(const ck_seqs &p, int64_t n)
{
    return p.uniform ? n * p.seq_slots : p.seg_off[n];
}

// The sequences chunk c and segment slot `slot` belong to (of z.N).
__device__ __forceinline__ int64_t sequence_at_chunk(const ck_seqs &p, const ck_shape &z,
                                                     int64_t c)
{
    return p.uniform ? c / p.seq_chunks : sequence_of_chunk(p.chunk_off, z.N, c);
}

__device__ __forceinline__ int64_t sequence_at_slot(const ck_seqs &p, const ck_shape &z,
                                                    int64_t slot)
{
    return p.uniform ? slot / p.seq_slots : sequence_of_chunk(p.seg_off, z.N, slot);
}

// Element offset of token `tok` of batch row `row`, head `head` of a [B, T, heads, dim] tensor.
__device__ __forceinline__ int64_t tok_off(const gdn_tensor &t, int64_t row, int64_t tok,
                                           int64_t head)
{
    return row * t.stride[0] + tok * t.stride[1] + head * t.stride[2];
}

// Where sequence n's state of head hv lives in the pool of z.S slots (null without a pool) and
// whether the pass starts from it. False for a padded sequence: nothing of it is read or written.
__device__ __forceinline__ bool sequence_state(const ck_pool &a, const ck_shape &z, int64_t n,
                                               int64_t hv, float *&state, bool &init)
{
    state = nullptr;
    init = false;
    if (!a.has_state)
        return true;
    const int64_t slot = seq_slot(a.state_slots, n, z.S);
    if (slot < 0)
        return false;
    state = static_cast<float *>(a.state.data) + slot * a.state.stride[0] + hv * a.state.stride[1];
    init = !a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0;
    return true;
}

// The key head of value head hv (GVA, block or tiled).
__device__ __forceinline__ int64_t key_head_of(const ck_shape &p, int64_t hv)
{
    return p.gva == GDN_GVA_BLOCK ? hv / p.ratio : hv % p.H;
}

// Key head kh's value heads: first_value_head(kh) + i value_head_step apart, i < ratio.
__device__ __forceinline__ int64_t first_value_head(const ck_shape &p, int64_t kh)
{
    return p.gva == GDN_GVA_BLOCK ? kh * p.ratio : kh;
}

__device__ __forceinline__ int64_t value_head_step(const ck_shape &p)
{
    return p.gva == GDN_GVA_BLOCK ? 1 : p.H;
}

// The 16-bit path's Qd / Kd block of chunk c's key head kh (shared by its value heads).
__device__ __forceinline__ int64_t key_slot(const ck_shape &p, int64_t c, int64_t kh)
{
    return c * p.H + kh;
}

// Whether value head hv is the first of its key head's (the one that writes Qd / Kd).
__device__ __forceinline__ bool first_of_key_head(const ck_shape &p, int64_t hv)
{
    return p.gva == GDN_GVA_BLOCK ? hv % p.ratio == 0 : hv < p.H;
}

// Where chunk c of value head hv lies. False past the last chunk.
struct chunk_task {
    seq_info s;       // its sequence
    int64_t t0, kh, ch;  // first token, key head, workspace index (c * HV + hv)
    int len;          // tokens in the chunk (<= 64)
};

__device__ __forceinline__ bool chunk_task_for(const ck_seqs &p, const ck_shape &z, int64_t c,
                                               int64_t hv, chunk_task &t)
{
    if (c >= chunk_first(p, z.N))
        return false;
    const int64_t n = sequence_at_chunk(p, z, c), j = c - chunk_first(p, n);
    t.s = seq_span(p.cu_seqlens, z.T, n);
    t.t0 = t.s.t0 + kC * j;
    t.len = (int)(t.s.len - kC * j < kC ? t.s.len - kC * j : kC);
    t.kh = key_head_of(z, hv);
    t.ch = c * z.HV + hv;
    return true;
}

// ---- the preparations' common steps -------------------------------------------------------

// Threads tid 0..63 (tid: the thread's index among those preparing the chunk): the chunk's
// gates (zero past its end), beta into Bs and, in Gs, the cumulative log-decay within each
// 32-token half (the caller adds Gs[31] to the second half after a barrier): stage_gates, or its
// two steps apart, token tid's gate and beta (gate_values: loads that can be issued early, into
// registers) and the scan and stores (store_gates).
struct gate_pair {
    float g, b;
};

__device__ __forceinline__ gate_pair gate_values(const ck_tokens &a, const chunk_task &t,
                                                 int64_t hv, int tid)
{
    gate_pair v = {0.0f, 0.0f};
    if (tid < t.len) {
        const int64_t tok = t.t0 + tid;
        v.g = a.g.data ? ld(a.g, tok_off(a.g, t.s.row, tok, hv)) : 0.0f;
        v.b = ld(a.beta, tok_off(a.beta, t.s.row, tok, hv));
        if (a.gate_in_kernel) {
            v.g = gate_g(a.gating, hv, v.g);
            v.b = gate_beta(a.gating, v.b);
        }
    }
    return v;
}

__device__ __forceinline__ void store_gates(gate_pair v, float *Gs, float *Bs, int tid)
{
    const int lane = tid & 31;
    if (tid >= kC)
        return;
    float g = v.g;
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, g, o);
        if (lane >= o)
            g += y;
    }
    Gs[tid] = g;
    Bs[tid] = v.b;
}

__device__ __forceinline__ void stage_gates(const ck_tokens &a, const chunk_task &t, int64_t hv,
                                            float *Gs, float *Bs, int tid)
{
    store_gates(tid < kC ? gate_values(a, t, hv, tid) : gate_pair{0.0f, 0.0f}, Gs, Bs, tid);
}

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

#endif
