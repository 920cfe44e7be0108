// chunk_prep: the preparation of the chunked form for f32 inputs, one block of 4 warps per
// (chunk, value head), all chunks in parallel. From the chunk's gates, q, k and v it makes, in
// the policy's precision (split tf32, cuda_mma.cuh): the cumulative log-decay G,
// A = diag(beta) (K K^T * exp(G_i - G_j)) strictly lower and its exact inverse
// T = (I + A)^-1 (unit_lower_inverse), W = T diag(beta e^G) K, U = T diag(beta) V, the masked
// Aqk = scale (Q K^T * exp(G_i - G_j)) (j <= i), Q' = scale e^G Q and K' = e^(G_last - G) K,
// all to the workspace for chunk_state (cuda_chunk_state.cu), with exp(G_last) per chunk.
#include "cuda_chunk_device.cuh"

namespace {

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
__global__ void __launch_bounds__(kThreads) chunk_prep(const chunk_prep_args p)
{
    using E = typename P::st;
    extern __shared__ __align__(16) unsigned char smem[];
    const ck_dims &d = p.d;
    E *Ks = reinterpret_cast<E *>(smem + d.p_k), *Qs = reinterpret_cast<E *>(smem + d.p_q);
    E *Vs = reinterpret_cast<E *>(smem + d.p_v);
    float *Am = reinterpret_cast<float *>(smem + d.p_a), *Tm = reinterpret_cast<float *>(smem + d.p_t);
    float *Xs = reinterpret_cast<float *>(smem + d.p_x);
    float *Gs = reinterpret_cast<float *>(smem + d.p_g), *Bs = reinterpret_cast<float *>(smem + d.p_b);
    const ck_tokens &a = p.in;
    const int64_t hv = blockIdx.y;
    chunk_task ct;
    if (!chunk_task_for(p.seqs, p.shape, blockIdx.x, hv, ct))
        return;
    const seq_info s = ct.s;
    const int64_t t0 = ct.t0, kh = ct.kh, ch = ct.ch;
    const int len = ct.len;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    stage_gates(p.in, ct, hv, Gs, Bs, threadIdx.x);
    for (int i = warp; i < kC; i += kThreads / 32) {
        const int64_t tok = t0 + i;
        const bool valid = i < len;
        stage_key_row(Ks + i * d.ldk, a.k, tok_off(a.k, s.row, tok, kh), valid, (int)p.shape.K,
                      d.KP, a.qk_l2norm);
        stage_key_row(Qs + i * d.ldk, a.q, tok_off(a.q, s.row, tok, kh), valid, (int)p.shape.K,
                      d.KP, a.qk_l2norm);
        const int64_t vo = tok_off(a.v, s.row, tok, hv);
        for (int x = lane; x < d.VP; x += 32)
            Vs[i * d.ldv + x] = from_f32<E>(valid && x < p.shape.V ? ld(a.v, vo + x) : 0.0f);
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
        E *aq = static_cast<E *>(p.work.Aq) + ch * kC * kC;
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
        E *qd = static_cast<E *>(p.work.Qd) + ch * kC * d.KP;
        E *kd = static_cast<E *>(p.work.Kd) + ch * kC * d.KP;
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
            p.work.gl[ch] = expf(GL);
    }
    __syncthreads();

    { // W = T (diag(beta e^G) K), U = T (diag(beta) V)
        const int m0 = 16 * warp;
        E *w = static_cast<E *>(p.work.W) + ch * kC * d.KP;
        E *u = static_cast<E *>(p.work.U) + ch * kC * d.VP;
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

} // namespace

void launch_chunk_prep(const chunk_prep_args &a, int64_t nc, int smem, cudaStream_t stream)
{
    cudaFuncSetAttribute(chunk_prep<prec_tf32x3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         smem);
    if (nc > 0)
        chunk_prep<prec_tf32x3><<<dim3((unsigned)nc, (unsigned)a.shape.HV), kThreads, smem,
                                  stream>>>(a);
}
