// The fused recurrent gated delta rule on CUDA: decode (T = 1) and short multi-token calls.
//
// One block of 128 threads owns a K x 32 tile of one head's state (32 value columns, or 32 value
// rows in the VK layout) and keeps it in registers for the whole call: every state element is
// read once and written once, with 16-byte accesses. Splitting V over blocks gives V/32 * HV
// blocks even at batch 1. Per token the block stages q, k, v and the gates in shared memory,
// then uses o = scale * (q^T S' + (q . k) u), with S' the decayed state and u the delta, so that
// both reductions over K come from one pass over the registers.
#include "cuda_common.cuh"

#include <math.h>

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;     // value columns (KV) or value rows (VK) per block
constexpr int kMaxK = 256;

struct dr_args {
    gdn_delta_rule_args a;    // tensors by value: device pointers, strides, options
    int64_t T, H, HV, K, V, S, ratio;
    float scale;
    bool has_state;
};

struct token_smem {
    float q[kMaxK], k[kMaxK];
    float v[kTile];
    float red[2][kWarps][kTile];  // KV layout: per-warp partial k^T S and q^T S
    float decay, beta, qk, inv_q, inv_k;
};

// Stages token `tok` of value head hv: q and k rows (raw), the block's 32 values, and in one
// warp the norms, q . k and the gates. Ends with a barrier.
__device__ void stage_token(const dr_args &p, token_smem &sm, int64_t row, int64_t tok,
                            int64_t hv, int64_t kh, int64_t vbase)
{
    const gdn_delta_rule_args &a = p.a;
    const int tid = threadIdx.x;
    const int64_t qo = row * a.q.stride[0] + tok * a.q.stride[1] + kh * a.q.stride[2];
    const int64_t ko = row * a.k.stride[0] + tok * a.k.stride[1] + kh * a.k.stride[2];
    for (int i = tid; i < p.K; i += kThreads) {
        sm.q[i] = ld(a.q, qo + i);
        sm.k[i] = ld(a.k, ko + i);
    }
    if (tid < kTile) {
        int64_t vi = vbase + tid;
        sm.v[tid] = vi < p.V ? ld(a.v, row * a.v.stride[0] + tok * a.v.stride[1] +
                                         hv * a.v.stride[2] + vi)
                             : 0.0f;
    }
    __syncthreads();
    if (tid < 32) {
        float sq = 0.0f, sk = 0.0f, qk = 0.0f;
        for (int i = tid; i < p.K; i += 32) {
            float x = sm.q[i], y = sm.k[i];
            sq += x * x;
            sk += y * y;
            qk += x * y;
        }
        for (int o = 16; o; o >>= 1) {
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
            qk += __shfl_xor_sync(0xffffffffu, qk, o);
        }
        if (tid == 0) {
            float iq = 1.0f, ik = 1.0f;
            if (a.qk_l2norm) {
                iq = 1.0f / sqrtf(sq + GDN_L2NORM_EPS);
                ik = 1.0f / sqrtf(sk + GDN_L2NORM_EPS);
            }
            float g = a.g.data ? ld(a.g, row * a.g.stride[0] + tok * a.g.stride[1] +
                                             hv * a.g.stride[2])
                               : 0.0f;
            float b = ld(a.beta, row * a.beta.stride[0] + tok * a.beta.stride[1] +
                                     hv * a.beta.stride[2]);
            if (a.gate_in_kernel) {
                g = gate_g(a.gating, hv, g);
                b = gate_beta(a.gating, b);
            }
            sm.inv_q = iq;
            sm.inv_k = ik;
            sm.qk = qk * iq * ik;
            sm.decay = expf(g);
            sm.beta = b;
        }
    }
    __syncthreads();
}

// Common prologue: the sequence's slot (or -1 to skip), span and whether it starts from state.
struct head_task {
    int64_t slot;
    seq_info seq;
    bool init;
    int64_t kh;
    float *state;  // this head's state in the pool (null without a pool)
};

__device__ bool head_task_for(const dr_args &p, head_task &h)
{
    const gdn_delta_rule_args &a = p.a;
    const int64_t n = blockIdx.z, hv = blockIdx.y;
    h.slot = -1;
    h.state = nullptr;
    if (p.has_state) {
        h.slot = seq_slot(a.state_slots, n, p.S);
        if (h.slot < 0)
            return false; // padding: nothing is read or written
        h.state = static_cast<float *>(a.state.data) + h.slot * a.state.stride[0] +
                  hv * a.state.stride[1];
    }
    h.seq = seq_span(a.cu_seqlens, p.T, n);
    h.init = p.has_state &&
             (!a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0);
    h.kh = a.gva == GDN_GVA_BLOCK ? hv / p.ratio : hv % p.H;
    return true;
}

// KV layout: state rows are keys, columns (contiguous) values. Thread t holds 4 columns
// (t % 8) of rows t / 8 + 16 i: a warp reads 4 full 128-byte row segments per access.
template <int KT>
__global__ void __launch_bounds__(kThreads) recurrent_kv(const dr_args p)
{
    constexpr int R = KT / 16;
    __shared__ token_smem sm;
    head_task h;
    if (!head_task_for(p, h))
        return;
    const gdn_delta_rule_args &a = p.a;
    const int tid = threadIdx.x, vg = tid & 7, kg = tid >> 3, warp = tid >> 5, lane = tid & 31;
    const int64_t hv = blockIdx.y, vbase = (int64_t)blockIdx.x * kTile, v0 = vbase + vg * 4;
    const bool vok = v0 < p.V;
    const int64_t rs = a.state.stride[2];

    float s[R][4];
#pragma unroll
    for (int i = 0; i < R; i++) {
        int k = kg + 16 * i;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (h.init && vok && k < p.K)
            x = *reinterpret_cast<const float4 *>(h.state + k * rs + v0);
        s[i][0] = x.x, s[i][1] = x.y, s[i][2] = x.z, s[i][3] = x.w;
    }
    for (int64_t t = 0; t < h.seq.len; t++) {
        const int64_t tok = h.seq.t0 + t;
        stage_token(p, sm, h.seq.row, tok, hv, h.kh, vbase);
        const float decay = sm.decay, ik = sm.inv_k, iq = sm.inv_q;
        float kk[R], pk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < R; i++) {
            int k = kg + 16 * i;
            kk[i] = k < p.K ? sm.k[k] * ik : 0.0f;
            float qq = k < p.K ? sm.q[k] * iq : 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[i][j] *= decay;
                pk[j] += kk[i] * s[i][j];
                pq[j] += qq * s[i][j];
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            for (int o = 8; o < 32; o <<= 1) {
                pk[j] += __shfl_xor_sync(0xffffffffu, pk[j], o);
                pq[j] += __shfl_xor_sync(0xffffffffu, pq[j], o);
            }
        if (lane < 8)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                sm.red[0][warp][vg * 4 + j] = pk[j];
                sm.red[1][warp][vg * 4 + j] = pq[j];
            }
        __syncthreads();
        const int64_t oo = h.seq.row * a.out.stride[0] + tok * a.out.stride[1] +
                           hv * a.out.stride[2];
        float u[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float ks = 0.0f, qs = 0.0f;
#pragma unroll
            for (int w = 0; w < kWarps; w++) {
                ks += sm.red[0][w][vg * 4 + j];
                qs += sm.red[1][w][vg * 4 + j];
            }
            u[j] = sm.beta * (sm.v[vg * 4 + j] - ks);
            if (kg == 0 && v0 + j < p.V)
                st(a.out, oo + v0 + j, p.scale * (qs + sm.qk * u[j]));
        }
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] += kk[i] * u[j];
        __syncthreads(); // the next token reuses sm
    }
    if (h.state && vok)
#pragma unroll
        for (int i = 0; i < R; i++) {
            int k = kg + 16 * i;
            if (k < p.K)
                *reinterpret_cast<float4 *>(h.state + k * rs + v0) =
                    make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        }
}

// VK layout: state rows are values, columns (contiguous) keys. Warp w holds rows w + 4 i of
// the block's 32; lane l holds keys 4 (l + 32 m) .. +3. Reductions over K stay in the warp.
template <int M>
__global__ void __launch_bounds__(kThreads) recurrent_vk(const dr_args p)
{
    constexpr int R = kTile / kWarps;
    __shared__ token_smem sm;
    head_task h;
    if (!head_task_for(p, h))
        return;
    const gdn_delta_rule_args &a = p.a;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t hv = blockIdx.y, vbase = (int64_t)blockIdx.x * kTile;
    const int64_t rs = a.state.stride[2];

    float s[R][M][4];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            int64_t v = vbase + warp + kWarps * i;
            int k4 = 4 * (lane + 32 * m);
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (h.init && v < p.V && k4 < p.K)
                x = *reinterpret_cast<const float4 *>(h.state + v * rs + k4);
            s[i][m][0] = x.x, s[i][m][1] = x.y, s[i][m][2] = x.z, s[i][m][3] = x.w;
        }
    for (int64_t t = 0; t < h.seq.len; t++) {
        const int64_t tok = h.seq.t0 + t;
        stage_token(p, sm, h.seq.row, tok, hv, h.kh, vbase);
        const float decay = sm.decay, ik = sm.inv_k, iq = sm.inv_q;
        float kk[M][4], qq[M][4];
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int k = 4 * (lane + 32 * m) + j;
                kk[m][j] = k < p.K ? sm.k[k] * ik : 0.0f;
                qq[m][j] = k < p.K ? sm.q[k] * iq : 0.0f;
            }
        const int64_t oo = h.seq.row * a.out.stride[0] + tok * a.out.stride[1] +
                           hv * a.out.stride[2];
#pragma unroll
        for (int i = 0; i < R; i++) {
            float pk = 0.0f, pq = 0.0f;
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s[i][m][j] *= decay;
                    pk += kk[m][j] * s[i][m][j];
                    pq += qq[m][j] * s[i][m][j];
                }
            for (int o = 16; o; o >>= 1) {
                pk += __shfl_xor_sync(0xffffffffu, pk, o);
                pq += __shfl_xor_sync(0xffffffffu, pq, o);
            }
            const int r = warp + kWarps * i;
            const float u = sm.beta * (sm.v[r] - pk);
            if (lane == 0 && vbase + r < p.V)
                st(a.out, oo + vbase + r, p.scale * (pq + sm.qk * u));
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][m][j] += kk[m][j] * u;
        }
        __syncthreads(); // the next token reuses sm
    }
    if (h.state)
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int m = 0; m < M; m++) {
                int64_t v = vbase + warp + kWarps * i;
                int k4 = 4 * (lane + 32 * m);
                if (v < p.V && k4 < p.K)
                    *reinterpret_cast<float4 *>(h.state + v * rs + k4) =
                        make_float4(s[i][m][0], s[i][m][1], s[i][m][2], s[i][m][3]);
            }
}

} // namespace

extern "C" gdn_status cuda_check_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    static const char *fn = "gdn_delta_rule";
    if (p->a.algorithm == GDN_ALGO_CHUNKED)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "algorithm is GDN_ALGO_CHUNKED, which the cuda backend does not have yet "
                        "(use GDN_ALGO_RECURRENT or GDN_ALGO_AUTO)");
    if (p->K > kMaxK)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "K is %lld, expected <= %d on cuda",
                        (long long)p->K, kMaxK);
    if (p->seqs.count > 65535 || p->HV > 65535)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "%lld sequences x %lld value heads, expected at most 65535 of each on cuda",
                        (long long)p->seqs.count, (long long)p->HV);
    if (!p->has_state)
        return GDN_OK;
    const gdn_tensor *s = &p->a.state;
    if (s->dtype != GDN_F32)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "state.dtype is %s, expected f32 on cuda", gdn_dtype_name(s->dtype));
    bool kv = p->a.state_layout == GDN_STATE_KV;
    int64_t inner = kv ? p->V : p->K;
    bool vec_ok = s->stride[3] == 1 && inner % 4 == 0 && s->stride[0] % 4 == 0 &&
                  s->stride[1] % 4 == 0 && s->stride[2] % 4 == 0 &&
                  (uintptr_t)s->data % 16 == 0;
    if (!vec_ok)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "the cuda backend reads the state pool 16 bytes at a time: expected "
                        "state.stride[3] == 1, %s %% 4 == 0, the other strides multiples of 4 "
                        "and a 16-byte aligned pointer", kv ? "V" : "K");
    return GDN_OK;
}

extern "C" gdn_status cuda_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                      void *workspace)
{
    (void)workspace;
    int64_t N = p->seqs.count;
    if (N == 0)
        return GDN_OK;
    dr_args d;
    d.a = p->a;
    d.T = p->T, d.H = p->H, d.HV = p->HV, d.K = p->K, d.V = p->V, d.S = p->S;
    d.ratio = p->ratio;
    d.scale = (float)p->scale;
    d.has_state = p->has_state;
    dim3 grid((unsigned)((p->V + kTile - 1) / kTile), (unsigned)p->HV, (unsigned)N);
    cudaStream_t stream = cuda_stream(ctx);
    if (p->a.state_layout == GDN_STATE_KV || !p->has_state) {
        if (p->K <= 64)
            recurrent_kv<64><<<grid, kThreads, 0, stream>>>(d);
        else if (p->K <= 128)
            recurrent_kv<128><<<grid, kThreads, 0, stream>>>(d);
        else
            recurrent_kv<256><<<grid, kThreads, 0, stream>>>(d);
    } else {
        if (p->K <= 128)
            recurrent_vk<1><<<grid, kThreads, 0, stream>>>(d);
        else
            recurrent_vk<2><<<grid, kThreads, 0, stream>>>(d);
    }
    return cuda_check(ctx, "gdn_delta_rule");
}
