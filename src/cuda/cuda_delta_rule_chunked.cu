// The chunked WY form of the gated delta rule on CUDA (prefill), on tensor cores.
//
// Three launches, all stream-ordered, no host synchronization:
//   1. chunk_offsets: one block turns the sequence lengths (cu_seqlens on the device, or the
//      equal-length T) into each sequence's first chunk, so the other kernels find their chunk
//      without the host ever reading cu_seqlens.
//   2. chunk_prep, one block per (chunk, value head), all chunks in parallel: gates and their
//      cumulative sum G, L2-normalised q and k, A = diag(beta) (K K^T * exp(G_i - G_j)) strictly
//      lower, its exact inverse T = (I + A)^-1 (16 x 16 diagonal blocks by forward substitution,
//      then block rows), W = T diag(beta e^G) K, U = T diag(beta) V, the masked
//      Aqk = scale (Q K^T * exp(G_i - G_j)) (j <= i), Q' = scale e^G Q and K' = e^(G_last - G) K.
//      Everything goes to the workspace.
//   3. chunk_state, one block per (32 value columns, value head, sequence), chunks in order: the
//      state tile S (K x 32, f32, shared memory) gives V' = U - W S, the output
//      O = Q' S + Aqk V', and S <- e^G_last S + K'^T V'. The last S goes back to the pool.
// Every product runs through cuda_mma.cuh's warp products; the precision policy follows the
// input dtype (bf16 and f16 operands with f32 accumulation; f32 inputs as split tf32). The state
// is always f32; W, U, Q', K', Aqk and V' are stored in the policy's type (bf16/f16/f32).
#include "cuda_common.cuh"
#include "cuda_mma.cuh"

#include <stdio.h>

namespace {

constexpr int kC = 64;          // chunk length
constexpr int kThreads = 128;   // 4 warps: one 16-row tile of a chunk each
constexpr int kVT = 32;         // value columns per state block
constexpr int kMaxDim = 128;    // K and V (shared memory budget)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Shapes, strides and offsets shared by the host and both kernels.
struct ck_dims {
    int KP, VP;                 // K, V rounded up to 32
    int ldk, ldv, ldu, ldq;     // shared row strides (elements of the stored type)
    int lda, lds, ldx;          // f32 shared row strides: A/T, state tile, block-row scratch
    // shared-memory byte offsets
    int p_k, p_q, p_v, p_a, p_t, p_x, p_g, p_b, prep_bytes;
    int s_w, s_q, s_k, s_u, s_aq, s_vn, s_s, state_bytes;
};

struct ck_args {
    gdn_delta_rule_args a;
    int64_t T, H, HV, K, V, S, ratio, N;
    int64_t nc;                 // chunk slots in the workspace (an upper bound)
    float scale;
    bool has_state;
    ck_dims d;
    int64_t *chunk_off;         // [N + 1] first chunk of each sequence
    float *gl;                  // [nc, HV] exp(G_last)
    void *W, *Qd, *Kd;          // [nc, HV, 64, KP]
    void *U;                    // [nc, HV, 64, VP]
    void *Aq;                   // [nc, HV, 64, 64]
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
    return d;
}

// Chunks of sequence n (0 for a padded sequence: it is skipped).
__device__ int64_t chunks_of(const ck_args &p, int64_t n)
{
    if (p.has_state && seq_slot(p.a.state_slots, n, p.S) < 0)
        return 0;
    int64_t len = seq_span(p.a.cu_seqlens, p.T, n).len;
    return len > 0 ? (len + kC - 1) / kC : 0;
}

// chunk_off[n] = chunks of the sequences before n, clamped to the workspace's nc.
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

__device__ __forceinline__ int64_t tok_off(const gdn_tensor &t, int64_t row, int64_t tok,
                                           int64_t head)
{
    return row * t.stride[0] + tok * t.stride[1] + head * t.stride[2];
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
    const int64_t c = blockIdx.x, hv = blockIdx.y;
    if (c >= p.chunk_off[p.N])
        return;
    const int64_t n = sequence_of_chunk(p.chunk_off, p.N, c);
    const seq_info s = seq_span(a.cu_seqlens, p.T, n);
    const int64_t j = c - p.chunk_off[n], t0 = s.t0 + kC * j;
    const int len = (int)(s.len - kC * j < kC ? s.len - kC * j : kC);
    const int64_t kh = a.gva == GDN_GVA_BLOCK ? hv / p.ratio : hv % p.H;
    const int64_t ch = c * p.HV + hv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    if (tid < kC) { // gates, and the warp-level part of the cumulative sum
        float g = 0.0f, b = 0.0f;
        if (tid < len) {
            const int64_t tok = t0 + tid;
            g = a.g.data ? ld(a.g, tok_off(a.g, s.row, tok, hv)) : 0.0f;
            b = ld(a.beta, tok_off(a.beta, s.row, tok, hv));
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

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
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
    float *state = nullptr;
    if (p.has_state) {
        const int64_t slot = seq_slot(a.state_slots, n, p.S);
        if (slot < 0)
            return;
        state = static_cast<float *>(a.state.data) + slot * a.state.stride[0] +
                hv * a.state.stride[1];
    }
    const bool init =
        p.has_state && (!a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0);
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
    const int64_t first = p.chunk_off[n], nch = p.chunk_off[n + 1] - first;
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
        asm volatile("cp.async.wait_all;\n" ::: "memory");
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

int elem_size(gdn_dtype dt) { return dt == GDN_F32 ? 4 : 2; }

// Chunk slots the workspace holds: every sequence's chunks, bounded without reading
// cu_seqlens (each sequence adds at most one partial chunk).
int64_t chunk_bound(const gdn_delta_rule_problem *p)
{
    const int64_t N = p->seqs.count;
    if (!p->seqs.cu_seqlens)
        return N * ((p->T + kC - 1) / kC);
    return (p->T + kC - 1) / kC + N;
}

struct ws_layout {
    size_t off, gl, W, Qd, Kd, U, Aq, total;
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
    w.W = take(nch * kC * d.KP * es);
    w.Qd = take(nch * kC * d.KP * es);
    w.Kd = take(nch * kC * d.KP * es);
    w.U = take(nch * kC * d.VP * es);
    w.Aq = take(nch * kC * kC * es);
    w.total = at;
    return w;
}

int max_shared_optin()
{
    int dev = 0, bytes = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
        cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return bytes;
}

template <class P>
gdn_status launch_chunked(gdn_context *ctx, ck_args &k, cudaStream_t stream)
{
    cudaFuncSetAttribute(chunk_prep<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k.d.prep_bytes);
    cudaFuncSetAttribute(chunk_state<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         k.d.state_bytes);
    chunk_offsets<<<1, 1024, 0, stream>>>(k);
    if (k.nc > 0)
        chunk_prep<P><<<dim3((unsigned)k.nc, (unsigned)k.HV), kThreads, k.d.prep_bytes, stream>>>(k);
    const int64_t blocks = (int64_t)(k.d.VP / kVT) * k.HV * k.N;
    chunk_state<P><<<(unsigned)blocks, kThreads, k.d.state_bytes, stream>>>(k);
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
    const ck_dims d = dims_for(p->K, p->V, elem_size(p->a.q.dtype));
    const int need = d.prep_bytes > d.state_bytes ? d.prep_bytes : d.state_bytes;
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
    k.W = base + w.W, k.Qd = base + w.Qd, k.Kd = base + w.Kd, k.U = base + w.U, k.Aq = base + w.Aq;
    cudaStream_t stream = cuda_stream(ctx);
    switch (p->a.q.dtype) {
    case GDN_BF16: return launch_chunked<prec_bf16>(ctx, k, stream);
    case GDN_F16: return launch_chunked<prec_f16>(ctx, k, stream);
    default: return launch_chunked<prec_tf32x3>(ctx, k, stream);
    }
}
