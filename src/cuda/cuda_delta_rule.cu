// The fused recurrent gated delta rule on CUDA: decode (T = 1) and short multi-token calls.
//
// Work is cut into warp tasks: a warp owns a strip of one head's state (16 value columns x K in
// the KV layout, 8 value rows x K in VK) for the whole call, so even batch-1 decode has
// V/16 * HV (or V/8 * HV) warps. Every state element is read once and written once per call, 16
// bytes at a time. Warps never wait for one another: q and k reach the lanes that need them by
// shuffles, norms and reductions are warp reductions, and there is no block barrier at all.
//
// A warp's strip lives in shared memory in per-thread slots (slot i of thread t at
// i * blockDim + t), loaded with cp.async: the bytes in flight hold no registers and each thread
// only touches its own slots, so residency is bounded by the strip's bytes, not by registers or
// synchronisation. Per token a warp makes one pass over its slots for k^T S' and q^T S' (S' the
// decayed state), reduces them across lanes, and a second pass writes S' + k u^T (back to the
// slots between tokens, to the pool after the last). The output uses
// o = scale * (q^T S' + (q . k) u), so both reductions come from the first pass.
#include "cuda_common.cuh"

#include <math.h>

namespace {

constexpr int kWarpsPerBlock = 2;
constexpr int kThreads = 32 * kWarpsPerBlock;
constexpr int kMaxK = 256;
constexpr int kKvStrip = 16;  // value columns per warp, KV layout
constexpr int kVkStrip = 8;   // value rows per warp, VK layout

struct dr_args {
    gdn_delta_rule_args a;    // tensors by value: device pointers, strides, options
    int64_t T, H, HV, K, V, S, ratio, N;
    int64_t strips_per_head, tasks;
    float scale;
    bool has_state;
};

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}

__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Loads state float4 `src` into a slot, or zeros the slot when there is nothing to load.
__device__ __forceinline__ void slot_load(float4 *slot, const float *src, bool valid)
{
    if (valid)
        cp_async16(slot, src);
    else
        *slot = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

__device__ __forceinline__ float warp_sum(float x)
{
    for (int o = 16; o; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// One warp's task: which head and value range, where its state lives, which tokens it runs.
struct warp_task {
    int64_t hv, vbase, kh;
    seq_info seq;
    bool init;     // starts from the pool (else from zeros)
    float *state;  // this head's state in the pool (null without a pool)
};

// Task `id` (strip fastest, then head, then sequence). False when there is nothing to do: past
// the last task, or a padded sequence (nothing of it is read or written).
__device__ bool warp_task_for(const dr_args &p, int64_t id, int strip, warp_task &t)
{
    if (id >= p.tasks)
        return false;
    const gdn_delta_rule_args &a = p.a;
    t.vbase = (id % p.strips_per_head) * strip;
    const int64_t nh = id / p.strips_per_head, n = nh / p.HV;
    t.hv = nh % p.HV;
    t.state = nullptr;
    if (p.has_state) {
        int64_t slot = seq_slot(a.state_slots, n, p.S);
        if (slot < 0)
            return false;
        t.state = static_cast<float *>(a.state.data) + slot * a.state.stride[0] +
                  t.hv * a.state.stride[1];
    }
    t.seq = seq_span(a.cu_seqlens, p.T, n);
    t.init = p.has_state &&
             (!a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0);
    t.kh = a.gva == GDN_GVA_BLOCK ? t.hv / p.ratio : t.hv % p.H;
    return true;
}

// Per-warp staging of one token: q and k (normalised when asked) in the warp's own shared
// memory, written and read by the warp alone (__syncwarp, no block barrier).
struct warp_token {
    float q[kMaxK], k[kMaxK];
};

struct token_scalars {
    float decay, beta, qk;
};

__device__ token_scalars stage_token(const dr_args &p, const warp_task &t, int64_t tok,
                                     warp_token &w)
{
    const gdn_delta_rule_args &a = p.a;
    const int lane = threadIdx.x & 31;
    const int64_t row = t.seq.row, hv = t.hv;
    float g = a.g.data ? ld(a.g, row * a.g.stride[0] + tok * a.g.stride[1] + hv * a.g.stride[2])
                       : 0.0f;
    float b = ld(a.beta, row * a.beta.stride[0] + tok * a.beta.stride[1] + hv * a.beta.stride[2]);
    const int64_t qo = row * a.q.stride[0] + tok * a.q.stride[1] + t.kh * a.q.stride[2];
    const int64_t ko = row * a.k.stride[0] + tok * a.k.stride[1] + t.kh * a.k.stride[2];
    float sq = 0.0f, sk = 0.0f, qk = 0.0f;
    __syncwarp(); // the previous token's readers are done with w
    for (int i = lane; i < p.K; i += 32) {
        const float x = ld(a.q, qo + i), y = ld(a.k, ko + i);
        w.q[i] = x;
        w.k[i] = y;
        sq += x * x;
        sk += y * y;
        qk += x * y;
    }
    sq = warp_sum(sq), sk = warp_sum(sk), qk = warp_sum(qk);
    const float iq = a.qk_l2norm ? 1.0f / sqrtf(sq + GDN_L2NORM_EPS) : 1.0f;
    const float ik = a.qk_l2norm ? 1.0f / sqrtf(sk + GDN_L2NORM_EPS) : 1.0f;
    __syncwarp();
    for (int i = lane; i < p.K; i += 32) {
        w.q[i] *= iq;
        w.k[i] *= ik;
    }
    __syncwarp();
    if (a.gate_in_kernel) {
        g = gate_g(a.gating, hv, g);
        b = gate_beta(a.gating, b);
    }
    token_scalars ts;
    ts.qk = qk * iq * ik;
    ts.decay = expf(g);
    ts.beta = b;
    return ts;
}

// KV layout: state rows are keys, columns (contiguous) values. Lane l of a warp holds columns
// vbase + 4 (l % 4) .. +3 of rows l / 4 + 8 i (i < KT / 8): a warp reads 8 rows x 64 bytes.
// Key r = l/4 + 8 i sits in lane (r % 32) of register r / 32 = i / 4 of the staged token.
template <int KT>
__device__ void run_kv(const dr_args &p, const warp_task &t, float4 *slots, warp_token &w)
{
    constexpr int R = KT / 8;
    const gdn_delta_rule_args &a = p.a;
    const int lane = threadIdx.x & 31, vg = lane & 3, kg = lane >> 2, stride = blockDim.x;
    const int me = threadIdx.x;
    const int64_t v0 = t.vbase + vg * 4, rs = a.state.stride[2];
    const bool vok = v0 < p.V;
#pragma unroll
    for (int i = 0; i < R; i++) {
        int k = kg + 8 * i;
        slot_load(&slots[i * stride + me], t.state + k * rs + v0, t.init && vok && k < p.K);
    }
    for (int64_t s = 0; s < t.seq.len; s++) {
        const int64_t tok = t.seq.t0 + s;
        const token_scalars r = stage_token(p, t, tok, w);
        float vv[4];
        const int64_t vo = t.seq.row * a.v.stride[0] + tok * a.v.stride[1] + t.hv * a.v.stride[2];
#pragma unroll
        for (int j = 0; j < 4; j++)
            vv[j] = v0 + j < p.V ? ld(a.v, vo + v0 + j) : 0.0f;
        if (s == 0)
            cp_async_wait_all(); // this thread's slots have arrived
        float pk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
        for (int i = 0; i < R; i++) {
            const int k = kg + 8 * i;
            const float kk = k < p.K ? w.k[k] : 0.0f, qq = k < p.K ? w.q[k] : 0.0f;
            const float4 x = slots[i * stride + me];
            const float xs[4] = {x.x * r.decay, x.y * r.decay, x.z * r.decay, x.w * r.decay};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                pk[j] += kk * xs[j];
                pq[j] += qq * xs[j];
            }
        }
        float u[4];
        const int64_t oo = t.seq.row * a.out.stride[0] + tok * a.out.stride[1] +
                           t.hv * a.out.stride[2];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            for (int o = 4; o < 32; o <<= 1) { // sum over the 8 row groups
                pk[j] += __shfl_xor_sync(0xffffffffu, pk[j], o);
                pq[j] += __shfl_xor_sync(0xffffffffu, pq[j], o);
            }
            u[j] = r.beta * (vv[j] - pk[j]);
            if (kg == 0 && v0 + j < p.V)
                st(a.out, oo + v0 + j, p.scale * (pq[j] + r.qk * u[j]));
        }
        const bool last = s + 1 == t.seq.len;
#pragma unroll 4
        for (int i = 0; i < R; i++) {
            const int k = kg + 8 * i;
            const float kk = k < p.K ? w.k[k] : 0.0f;
            const float4 x = slots[i * stride + me];
            const float4 y = make_float4(x.x * r.decay + kk * u[0], x.y * r.decay + kk * u[1],
                                         x.z * r.decay + kk * u[2], x.w * r.decay + kk * u[3]);
            if (!last)
                slots[i * stride + me] = y;
            else if (t.state && vok && k < p.K)
                __stcs(reinterpret_cast<float4 *>(t.state + k * rs + v0), y);
        }
    }
    if (t.seq.len == 0 && t.state && vok) { // an empty sequence still writes its state
        cp_async_wait_all();
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int k = kg + 8 * i;
            if (k < p.K)
                *reinterpret_cast<float4 *>(t.state + k * rs + v0) = slots[i * stride + me];
        }
    }
}

// VK layout: state rows are values, columns (contiguous) keys. The warp's rows are vbase + i
// (i < 8); lane l holds keys 4 (l + 32 m) .. +3 (m < KT / 128) of each, so a warp reads whole
// rows and every reduction over K is a warp sum.
template <int KT>
__device__ void run_vk(const dr_args &p, const warp_task &t, float4 *slots)
{
    constexpr int M = KT / 128, R = kVkStrip;
    const gdn_delta_rule_args &a = p.a;
    const int lane = threadIdx.x & 31, stride = blockDim.x, me = threadIdx.x;
    const int64_t rs = a.state.stride[2];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int64_t v = t.vbase + i;
            const int k4 = 4 * (lane + 32 * m);
            slot_load(&slots[(i * M + m) * stride + me], t.state + v * rs + k4,
                      t.init && v < p.V && k4 < p.K);
        }
    for (int64_t s = 0; s < t.seq.len; s++) {
        const int64_t tok = t.seq.t0 + s;
        const bool last = s + 1 == t.seq.len;
        // this lane's keys 4 (lane + 32 m) + j, normalised like stage_token's
        const int64_t row = t.seq.row, hv = t.hv;
        float g = a.g.data ? ld(a.g, row * a.g.stride[0] + tok * a.g.stride[1] +
                                         hv * a.g.stride[2])
                           : 0.0f;
        float b = ld(a.beta, row * a.beta.stride[0] + tok * a.beta.stride[1] +
                                 hv * a.beta.stride[2]);
        const int64_t qo = row * a.q.stride[0] + tok * a.q.stride[1] + t.kh * a.q.stride[2];
        const int64_t ko = row * a.k.stride[0] + tok * a.k.stride[1] + t.kh * a.k.stride[2];
        float kk[M][4], qq[M][4], sq = 0.0f, sk = 0.0f, qk = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int k = 4 * (lane + 32 * m) + j;
                qq[m][j] = k < p.K ? ld(a.q, qo + k) : 0.0f;
                kk[m][j] = k < p.K ? ld(a.k, ko + k) : 0.0f;
                sq += qq[m][j] * qq[m][j];
                sk += kk[m][j] * kk[m][j];
                qk += qq[m][j] * kk[m][j];
            }
        sq = warp_sum(sq), sk = warp_sum(sk), qk = warp_sum(qk);
        const float iq = a.qk_l2norm ? 1.0f / sqrtf(sq + GDN_L2NORM_EPS) : 1.0f;
        const float ik = a.qk_l2norm ? 1.0f / sqrtf(sk + GDN_L2NORM_EPS) : 1.0f;
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                qq[m][j] *= iq;
                kk[m][j] *= ik;
            }
        qk *= iq * ik;
        if (a.gate_in_kernel) {
            g = gate_g(a.gating, hv, g);
            b = gate_beta(a.gating, b);
        }
        const float decay = expf(g);
        const int64_t vo = row * a.v.stride[0] + tok * a.v.stride[1] + hv * a.v.stride[2];
        const int64_t oo = row * a.out.stride[0] + tok * a.out.stride[1] + hv * a.out.stride[2];
        // lane i < 8 fetches value vbase + i; every lane gets it by shuffle
        const float vmine = lane < R && t.vbase + lane < p.V ? ld(a.v, vo + t.vbase + lane) : 0.0f;
        if (s == 0)
            cp_async_wait_all();
#pragma unroll 2
        for (int i = 0; i < R; i++) {
            const int64_t v = t.vbase + i;
            float pk = 0.0f, pq = 0.0f;
            float4 x[M];
#pragma unroll
            for (int m = 0; m < M; m++) {
                x[m] = slots[(i * M + m) * stride + me];
                const float xs[4] = {x[m].x * decay, x[m].y * decay, x[m].z * decay,
                                     x[m].w * decay};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    pk += kk[m][j] * xs[j];
                    pq += qq[m][j] * xs[j];
                }
            }
            pk = warp_sum(pk), pq = warp_sum(pq);
            const float u = b * (__shfl_sync(0xffffffffu, vmine, i) - pk);
            if (lane == 0 && v < p.V)
                st(a.out, oo + v, p.scale * (pq + qk * u));
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float4 y = make_float4(x[m].x * decay + kk[m][0] * u,
                                             x[m].y * decay + kk[m][1] * u,
                                             x[m].z * decay + kk[m][2] * u,
                                             x[m].w * decay + kk[m][3] * u);
                const int k4 = 4 * (lane + 32 * m);
                if (!last)
                    slots[(i * M + m) * stride + me] = y;
                else if (t.state && v < p.V && k4 < p.K)
                    __stcs(reinterpret_cast<float4 *>(t.state + v * rs + k4), y);
            }
        }
    }
    if (t.seq.len == 0 && t.state) { // an empty sequence still writes its state
        cp_async_wait_all();
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int m = 0; m < M; m++) {
                const int64_t v = t.vbase + i;
                const int k4 = 4 * (lane + 32 * m);
                if (v < p.V && k4 < p.K)
                    *reinterpret_cast<float4 *>(t.state + v * rs + k4) =
                        slots[(i * M + m) * stride + me];
            }
    }
}

// Float4 slots per thread for each layout and key size.
__host__ __device__ constexpr int kv_slots(int kt) { return kt / 8; }
__host__ __device__ constexpr int vk_slots(int kt) { return kVkStrip * (kt / 128); }

// Resident blocks per SM the register budget must allow. The strip sits in shared memory, so
// nothing is worth keeping in registers across the two passes; 10 blocks (20 warps, <= 96
// registers a thread) keep 160 KiB of state in flight per SM for K <= 128.
__host__ __device__ constexpr int min_blocks(int kt) { return kt > 128 ? 6 : 10; }

template <int KT, bool KV>
__global__ void __launch_bounds__(kThreads, min_blocks(KT)) recurrent_warps(const dr_args p)
{
    constexpr int SLOTS = KV ? kv_slots(KT) : vk_slots(KT);
    __shared__ float4 slots[SLOTS * kThreads];
    __shared__ warp_token staged[KV ? kWarpsPerBlock : 1];
    const int64_t id = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    warp_task t;
    if (!warp_task_for(p, id, KV ? kKvStrip : kVkStrip, t))
        return; // warps are independent: a warp with nothing to do simply leaves
    if constexpr (KV)
        run_kv<KT>(p, t, slots, staged[threadIdx.x >> 5]);
    else
        run_vk<KT>(p, t, slots);
}

template <int KT, bool KV>
gdn_status launch(gdn_context *ctx, dr_args d, cudaStream_t stream)
{
    const int strip = KV ? kKvStrip : kVkStrip;
    d.strips_per_head = (d.V + strip - 1) / strip;
    d.tasks = d.strips_per_head * d.HV * d.N;
    const int64_t blocks = (d.tasks + kWarpsPerBlock - 1) / kWarpsPerBlock;
    recurrent_warps<KT, KV><<<(unsigned)blocks, kThreads, 0, stream>>>(d);
    return cuda_check(ctx, "gdn_delta_rule");
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
    const int64_t N = p->seqs.count;
    if (N == 0)
        return GDN_OK;
    dr_args d;
    d.a = p->a;
    d.T = p->T, d.H = p->H, d.HV = p->HV, d.K = p->K, d.V = p->V, d.S = p->S;
    d.ratio = p->ratio;
    d.N = N;
    d.scale = (float)p->scale;
    d.has_state = p->has_state;
    cudaStream_t stream = cuda_stream(ctx);
    if (p->a.state_layout == GDN_STATE_KV || !p->has_state)
        return p->K <= 64    ? launch<64, true>(ctx, d, stream)
               : p->K <= 128 ? launch<128, true>(ctx, d, stream)
                             : launch<256, true>(ctx, d, stream);
    return p->K <= 128 ? launch<128, false>(ctx, d, stream) : launch<256, false>(ctx, d, stream);
}
