// The fused recurrent gated delta rule on CUDA: decode (T = 1) and short multi-token calls. Two
// kernels, picked by decode_tile; each reads every state element once and writes it once per
// call, 16 bytes at a time.
//
// recurrent_warps (small batches, calls of several tokens, the VK layout): one warp owns K x 8 of
// one head's state in registers; nothing is shared between warps, so there is no barrier, and a
// step's chain is two global round trips (slot lookup, then state and token together) before the
// stores.
//
// recurrent_tiles (larger KV batches of one token): work is cut into tiles of K x TILE (TILE = 32
// or 64 value columns in the KV layout, value rows in VK), one 128-thread block per tile. The tile
// lives in shared memory in per-thread slots (slot i of thread t at i * 128 + t), brought in with
// cp.async: the bytes in flight hold no registers, and each thread only ever touches its own
// slots, so loading needs no barrier. Registers stay low and many blocks fit on an SM, which is
// what keeps enough state in flight at large batches (docs/PERFORMANCE.md has the widths
// measured). Per token a block stages q, k, v and the gates, makes one pass over its slots for
// k^T S' and q^T S' (S' the decayed state), reduces them, and a second pass writes S' + k u^T
// (back to the slots between tokens, to the pool after the last).
// Both use o = scale * (q^T S' + (q . k) u), so both reductions come from the first pass.
#include "cuda_async_copy.cuh"
#include "cuda_common.cuh"

#include <math.h>
#include <stdlib.h>

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxK = GDN_CUDA_MAX_K;
constexpr int kMaxTile = 64;

// The kernel's arguments hold only what it reads, in the order it reads them. Kernel
// parameters come through the constant cache, cold at every launch, and a batch-1 step is short
// enough for its misses to show: with the whole gdn_delta_rule_args (its 80-byte tensors, about
// 1 KiB in all) they were the batch-1 kernel's largest stall (Nsight Compute, docs/PERFORMANCE.md).
template <int R>
struct ktensor {
    void *data;
    int64_t stride[R]; // the leading R element strides
    gdn_dtype dtype;
};

template <int R>
ktensor<R> ktensor_of(const gdn_tensor &t)
{
    ktensor<R> k;
    k.data = t.data;
    k.dtype = t.dtype;
    for (int i = 0; i < R; i++)
        k.stride[i] = t.stride[i];
    return k;
}

struct kgating {
    ktensor<1> A, dt_bias;
    gdn_a_form a_form;
    float softplus_threshold;
    int32_t allow_neg_eigval;
};

struct dr_tensors {
    ktensor<1> state_slots, cu_seqlens, has_initial_state; // the tile's lookup
    ktensor<3> state;
    gdn_gva gva;
    int32_t qk_l2norm, gate_in_kernel;
    ktensor<3> g, beta, q, k, v, out; // the token
    kgating gating;
};

struct dr_args {
    int64_t tiles, tiles_per_head, HV, S, T, H, ratio, K, V;
    float scale;
    bool has_state;
    dr_tensors a;
};

dr_tensors dr_tensors_of(const gdn_delta_rule_args &a)
{
    dr_tensors t;
    t.state_slots = ktensor_of<1>(a.state_slots);
    t.cu_seqlens = ktensor_of<1>(a.cu_seqlens);
    t.has_initial_state = ktensor_of<1>(a.has_initial_state);
    t.state = ktensor_of<3>(a.state);
    t.gva = a.gva;
    t.qk_l2norm = a.qk_l2norm;
    t.gate_in_kernel = a.gate_in_kernel;
    t.g = ktensor_of<3>(a.g);
    t.beta = ktensor_of<3>(a.beta);
    t.q = ktensor_of<3>(a.q);
    t.k = ktensor_of<3>(a.k);
    t.v = ktensor_of<3>(a.v);
    t.out = ktensor_of<3>(a.out);
    t.gating.A = ktensor_of<1>(a.gating.A);
    t.gating.dt_bias = ktensor_of<1>(a.gating.dt_bias);
    t.gating.a_form = a.gating.a_form;
    t.gating.softplus_threshold = a.gating.softplus_threshold;
    t.gating.allow_neg_eigval = a.gating.allow_neg_eigval;
    return t;
}

struct token_smem {
    float q[kMaxK], k[kMaxK];
    float v[kMaxTile];
    float red[2][kWarps][kMaxTile];  // KV layout: per-warp partial k^T S' and q^T S'
};

// What every thread needs of the current token besides q and k in shared memory.
struct token_scalars {
    float decay, beta, qk, inv_q, inv_k;
};

// A token's scalars from its sums q.q, k.k and q.k and its raw g and beta (value head hv): the
// inverse norms (1 without the in-kernel L2 norm), the normalised q . k, and the decay e^g and
// beta, gated in the kernel when asked. Both decode kernels take them from here.
__device__ __forceinline__ token_scalars token_scalars_of(const dr_tensors &a, int64_t hv, float g,
                                                          float b, float sq, float sk, float qk)
{
    token_scalars ts;
    ts.inv_q = a.qk_l2norm ? 1.0f / sqrtf(sq + GDN_L2NORM_EPS) : 1.0f;
    ts.inv_k = a.qk_l2norm ? 1.0f / sqrtf(sk + GDN_L2NORM_EPS) : 1.0f;
    ts.qk = qk * ts.inv_q * ts.inv_k;
    if (a.gate_in_kernel) {
        g = gate_g(a.gating, hv, g);
        b = gate_beta(a.gating, b);
    }
    ts.decay = expf(g);
    ts.beta = b;
    return ts;
}

// The state is read once per call: in the KV layout its loads carry an L2 evict-first policy,
// so they do not push out the lines the stores are still writing back (about 4 points more of
// copy bandwidth at B = 64 and 256 on an H200; the 256-byte L2 prefetch hint on top, or
// evict-first on the stores as well, measured slower; docs/PERFORMANCE.md). The VK tiles load
// without it: with the hint, the 64-row VK tile meets "illegal instruction" on an H200 (CUDA
// 13.0), a code-generation fault: compute-sanitizer stops at the hinted cp.async, whose SASS
// (LDGSTS) takes its policy from an odd uniform register, desc[UR1], that nothing writes (the
// 32-row VK and the KV tiles use an even pair set up before); and the 32-row VK tile with the
// hint was still slower than the unhinted 64-row tile the launch picks.
__device__ __forceinline__ unsigned long long evict_first_policy()
{
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

// A state copy: with the evict-first policy, or plain.
template <bool EVICT_FIRST>
__device__ __forceinline__ void state_copy16(void *smem, const void *gmem,
                                             unsigned long long policy)
{
    if (EVICT_FIRST) {
        unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst),
                     "l"(gmem), "l"(policy));
    } else {
        cp_async16(smem, gmem);
    }
}

// Loads state float4 `src` into a slot, or zeros the slot when there is nothing to load.
template <bool EVICT_FIRST>
__device__ __forceinline__ void slot_load(float4 *slot, const float *src, bool valid,
                                          unsigned long long policy)
{
    if (valid)
        state_copy16<EVICT_FIRST>(slot, src, policy);
    else
        *slot = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Stages token `tok` of value head hv: q and k rows and the tile's values in shared memory (one
// barrier); then every warp reduces the norms and q . k itself and every thread reads the gates,
// so no second barrier is needed.
template <int TILE>
__device__ token_scalars stage_token(const dr_args &p, token_smem &sm, int64_t row, int64_t tok,
                                     int64_t hv, int64_t kh, int64_t vbase)
{
    const dr_tensors &a = p.a;
    const int tid = threadIdx.x;
    float g = a.g.data ? ld(a.g, row * a.g.stride[0] + tok * a.g.stride[1] + hv * a.g.stride[2])
                       : 0.0f;
    float b = ld(a.beta, row * a.beta.stride[0] + tok * a.beta.stride[1] + hv * a.beta.stride[2]);
    const int64_t qo = row * a.q.stride[0] + tok * a.q.stride[1] + kh * a.q.stride[2];
    const int64_t ko = row * a.k.stride[0] + tok * a.k.stride[1] + kh * a.k.stride[2];
    for (int i = tid; i < p.K; i += kThreads) {
        sm.q[i] = ld(a.q, qo + i);
        sm.k[i] = ld(a.k, ko + i);
    }
    if (tid < TILE) {
        int64_t vi = vbase + tid;
        sm.v[tid] = vi < p.V ? ld(a.v, row * a.v.stride[0] + tok * a.v.stride[1] +
                                         hv * a.v.stride[2] + vi)
                             : 0.0f;
    }
    __syncthreads();
    float sq = 0.0f, sk = 0.0f, qk = 0.0f;
    for (int i = tid & 31; i < p.K; i += 32) {
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
    return token_scalars_of(a, hv, g, b, sq, sk, qk);
}

// One tile of work: which head and value range, where its state lives, which tokens it runs.
struct tile_task {
    int64_t hv, vbase, kh;
    seq_info seq;
    bool init;     // starts from the pool (else from zeros)
    float *state;  // this head's state in the pool (null without a pool)
};

// Tile `id` (value range fastest, then head, then sequence). False past the last tile and for
// a padded sequence: nothing of it is read or written.
__device__ bool tile_task_for(const dr_args &p, int64_t id, int tile, tile_task &t)
{
    if (id >= p.tiles)
        return false;
    const dr_tensors &a = p.a;
    t.vbase = (id % p.tiles_per_head) * tile;
    const int64_t nh = id / p.tiles_per_head, n = nh / p.HV;
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

// KV layout: state rows are keys, columns (contiguous) values. With G = TILE / 4 column groups,
// thread t's slot i holds columns v0 .. v0+3 (v0 = vbase + 4 (t % G)) of row t / G + (128 / G) i:
// a warp reads whole 128- or 256-byte row segments.
template <int KT, int TILE>
struct kv_tile {
    static constexpr int G = TILE / 4, KG = kThreads / G, SLOTS = KT / KG;

    __device__ static void load(const dr_args &p, const tile_task &t, float4 *slots)
    {
        const int tid = threadIdx.x, vg = tid % G, kg = tid / G;
        const int64_t v0 = t.vbase + vg * 4, rs = p.a.state.stride[2];
        const unsigned long long policy = evict_first_policy();
#pragma unroll
        for (int i = 0; i < SLOTS; i++) {
            int k = kg + KG * i;
            slot_load<true>(&slots[i * kThreads + tid], t.state + k * rs + v0,
                      t.init && v0 < p.V && k < p.K, policy);
        }
    }

    __device__ static void run(const dr_args &p, const tile_task &t, float4 *slots,
                               token_smem &sm)
    {
        const dr_tensors &a = p.a;
        const int tid = threadIdx.x, vg = tid % G, kg = tid / G, warp = tid >> 5, lane = tid & 31;
        const int64_t v0 = t.vbase + vg * 4, rs = a.state.stride[2];
        const bool vok = v0 < p.V;
        for (int64_t s = 0; s < t.seq.len; s++) {
            const int64_t tok = t.seq.t0 + s;
            const bool last = s + 1 == t.seq.len;
            const token_scalars ts = stage_token<TILE>(p, sm, t.seq.row, tok, t.hv, t.kh, t.vbase);
            if (s == 0)
                cp_async_wait_all(); // this thread's slots have arrived
            float pk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < SLOTS; i++) {
                int k = kg + KG * i;
                float kk = k < p.K ? sm.k[k] * ts.inv_k : 0.0f;
                float qq = k < p.K ? sm.q[k] * ts.inv_q : 0.0f;
                float4 x = slots[i * kThreads + tid];
                float xs[4] = {x.x * ts.decay, x.y * ts.decay, x.z * ts.decay, x.w * ts.decay};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    pk[j] += kk * xs[j];
                    pq[j] += qq * xs[j];
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++)
                for (int o = G; o < 32; o <<= 1) {
                    pk[j] += __shfl_xor_sync(0xffffffffu, pk[j], o);
                    pq[j] += __shfl_xor_sync(0xffffffffu, pq[j], o);
                }
            if (lane < G)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    sm.red[0][warp][vg * 4 + j] = pk[j];
                    sm.red[1][warp][vg * 4 + j] = pq[j];
                }
            __syncthreads();
            const int64_t oo = t.seq.row * a.out.stride[0] + tok * a.out.stride[1] +
                               t.hv * a.out.stride[2];
            float u[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float ks = 0.0f, qs = 0.0f;
#pragma unroll
                for (int w = 0; w < kWarps; w++) {
                    ks += sm.red[0][w][vg * 4 + j];
                    qs += sm.red[1][w][vg * 4 + j];
                }
                u[j] = ts.beta * (sm.v[vg * 4 + j] - ks);
                if (kg == 0 && v0 + j < p.V)
                    st(a.out, oo + v0 + j, p.scale * (qs + ts.qk * u[j]));
            }
#pragma unroll
            for (int i = 0; i < SLOTS; i++) {
                int k = kg + KG * i;
                float kk = k < p.K ? sm.k[k] * ts.inv_k : 0.0f;
                float4 x = slots[i * kThreads + tid];
                float4 y = make_float4(x.x * ts.decay + kk * u[0], x.y * ts.decay + kk * u[1],
                                       x.z * ts.decay + kk * u[2], x.w * ts.decay + kk * u[3]);
                if (!last)
                    slots[i * kThreads + tid] = y;
                else if (t.state && vok && k < p.K)
                    __stcs(reinterpret_cast<float4 *>(t.state + k * rs + v0), y);
            }
            __syncthreads(); // the next token reuses sm
        }
        if (t.seq.len == 0 && t.state && vok) { // an empty sequence still writes its state
            cp_async_wait_all();
#pragma unroll
            for (int i = 0; i < SLOTS; i++) {
                int k = kg + KG * i;
                if (k < p.K)
                    *reinterpret_cast<float4 *>(t.state + k * rs + v0) = slots[i * kThreads + tid];
            }
        }
    }
};

// VK layout: state rows are values, columns (contiguous) keys. Warp w's rows are w + 4 i of the
// tile's TILE; lane l's keys are 4 (l + 32 m) .. +3, m < M = KT / 128. Reductions over K stay
// inside the warp.
template <int KT, int TILE>
struct vk_tile {
    static constexpr int M = KT / 128, R = TILE / kWarps, SLOTS = R * M;

    __device__ static void load(const dr_args &p, const tile_task &t, float4 *slots)
    {
        const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        const int64_t rs = p.a.state.stride[2];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int m = 0; m < M; m++) {
                int64_t v = t.vbase + warp + kWarps * i;
                int k4 = 4 * (lane + 32 * m);
                slot_load<false>(&slots[(i * M + m) * kThreads + tid], t.state + v * rs + k4,
                                 t.init && v < p.V && k4 < p.K, 0);
            }
    }

    __device__ static void run(const dr_args &p, const tile_task &t, float4 *slots,
                               token_smem &sm)
    {
        const dr_tensors &a = p.a;
        const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        const int64_t rs = a.state.stride[2];
        for (int64_t s = 0; s < t.seq.len; s++) {
            const int64_t tok = t.seq.t0 + s;
            const bool last = s + 1 == t.seq.len;
            const token_scalars ts = stage_token<TILE>(p, sm, t.seq.row, tok, t.hv, t.kh, t.vbase);
            if (s == 0)
                cp_async_wait_all();
            float kk[M][4], qq[M][4];
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int k = 4 * (lane + 32 * m) + j;
                    kk[m][j] = k < p.K ? sm.k[k] * ts.inv_k : 0.0f;
                    qq[m][j] = k < p.K ? sm.q[k] * ts.inv_q : 0.0f;
                }
            const int64_t oo = t.seq.row * a.out.stride[0] + tok * a.out.stride[1] +
                               t.hv * a.out.stride[2];
#pragma unroll
            for (int i = 0; i < R; i++) {
                const int64_t v = t.vbase + warp + kWarps * i;
                float pk = 0.0f, pq = 0.0f;
                float4 x[M];
#pragma unroll
                for (int m = 0; m < M; m++) {
                    x[m] = slots[(i * M + m) * kThreads + tid];
                    float xs[4] = {x[m].x * ts.decay, x[m].y * ts.decay, x[m].z * ts.decay,
                                   x[m].w * ts.decay};
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        pk += kk[m][j] * xs[j];
                        pq += qq[m][j] * xs[j];
                    }
                }
                for (int o = 16; o; o >>= 1) {
                    pk += __shfl_xor_sync(0xffffffffu, pk, o);
                    pq += __shfl_xor_sync(0xffffffffu, pq, o);
                }
                const float u = ts.beta * (sm.v[warp + kWarps * i] - pk);
                if (lane == 0 && v < p.V)
                    st(a.out, oo + v, p.scale * (pq + ts.qk * u));
#pragma unroll
                for (int m = 0; m < M; m++) {
                    float4 y = make_float4(x[m].x * ts.decay + kk[m][0] * u,
                                           x[m].y * ts.decay + kk[m][1] * u,
                                           x[m].z * ts.decay + kk[m][2] * u,
                                           x[m].w * ts.decay + kk[m][3] * u);
                    int k4 = 4 * (lane + 32 * m);
                    if (!last)
                        slots[(i * M + m) * kThreads + tid] = y;
                    else if (t.state && v < p.V && k4 < p.K)
                        __stcs(reinterpret_cast<float4 *>(t.state + v * rs + k4), y);
                }
            }
            __syncthreads(); // the next token reuses sm
        }
        if (t.seq.len == 0 && t.state) { // an empty sequence still writes its state
            cp_async_wait_all();
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    int64_t v = t.vbase + warp + kWarps * i;
                    int k4 = 4 * (lane + 32 * m);
                    if (v < p.V && k4 < p.K)
                        *reinterpret_cast<float4 *>(t.state + v * rs + k4) =
                            slots[(i * M + m) * kThreads + tid];
                }
        }
    }
};

// ---- small batches: one warp per 8 value columns, the state in registers ----
// With few tiles (batch-1 decode: 128 of 32 columns) a step lasts as long as one tile's chain of
// dependent steps, not as long as its bytes take. Here a warp owns K x 8 of one head's state in
// registers and shares nothing with other warps: no barrier, the reductions over K are shuffles.
// The chain is kept to two global round trips: the slot lookup goes out first, the token's loads
// (they need no slot) while it is in flight, the state's loads once it arrives; q, k and v are
// read with their type known at compile time, so no load waits behind a branch on the dtype (with
// the runtime switch of ld() every element's load sat in its own branch region and the loads ran
// one after another).
//
// Lane l = 2a + h holds values v = vbase + 4h .. +3 of keys k = 4 (a + 16 m) + i (m < KT / 64,
// i < 4). In the KV layout a lane's 16-byte piece is key k's four values (lane pairs read whole
// 32-byte sectors); in VK it is value v's four keys 4 (a + 16 m) .. +3 (16 lanes read 256
// contiguous bytes). Either way the reductions over K run over a (shuffles xor 2 .. 16).

constexpr int kWarpCols = 8;
// The warp kernel runs calls of at most this many 32-column tiles (see decode_tile).
constexpr int kWarpTiles32 = 2048;

// ld() without a branch around the load: both widths are predicated loads, so the warp goes on
// issuing while the element is in flight.
template <class Tensor>
__device__ __forceinline__ float ld_nowait(const Tensor &t, int64_t off)
{
    const bool wide = t.dtype == GDN_F32;
    const float f = wide ? static_cast<const float *>(t.data)[off] : 0.0f;
    const unsigned short h = wide ? 0 : static_cast<const unsigned short *>(t.data)[off];
    if (wide)
        return f;
    return t.dtype == GDN_BF16 ? __uint_as_float((unsigned)h << 16)
                               : __half2float(__ushort_as_half(h));
}

// The key of a lane's element (m, i): 4 (a + 16 m) + i, a = lane / 2.
__device__ __forceinline__ int warp_key(int m, int i)
{
    return 4 * ((threadIdx.x & 31) / 2 + 16 * m) + i;
}

// One token of the warp's tile: the lane's q and k elements, its four values (as loaded: they are
// converted when used, so that no conversion waits for its load while later loads are still to
// be issued), g and beta (the in-kernel gating is applied when the token is used).
template <int KT, class E>
struct warp_token {
    static constexpr int M = KT / 64;
    E q[M][4], k[M][4], v[4];
    float g, b;

    __device__ void load(const dr_args &p, const tile_task &t, int64_t tok)
    {
        const dr_tensors &a = p.a;
        const int64_t row = t.seq.row, v0 = t.vbase + 4 * (threadIdx.x & 1);
        const E *qp = static_cast<const E *>(a.q.data) + row * a.q.stride[0] +
                      tok * a.q.stride[1] + t.kh * a.q.stride[2];
        const E *kp = static_cast<const E *>(a.k.data) + row * a.k.stride[0] +
                      tok * a.k.stride[1] + t.kh * a.k.stride[2];
        const E *vp = static_cast<const E *>(a.v.data) + row * a.v.stride[0] +
                      tok * a.v.stride[1] + t.hv * a.v.stride[2];
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = warp_key(m, i);
                q[m][i] = key < p.K ? qp[key] : E(0.0f);
                k[m][i] = key < p.K ? kp[key] : E(0.0f);
            }
#pragma unroll
        for (int c = 0; c < 4; c++)
            v[c] = v0 + c < p.V ? vp[v0 + c] : E(0.0f);
        g = a.g.data ? ld_nowait(a.g, row * a.g.stride[0] + tok * a.g.stride[1] +
                                          t.hv * a.g.stride[2])
                     : 0.0f;
        b = ld_nowait(a.beta, row * a.beta.stride[0] + tok * a.beta.stride[1] +
                                  t.hv * a.beta.stride[2]);
    }
};

// The warp's K x 8 piece of the state: s[m][i][c] at key 4 (a + 16 m) + i, value vbase + 4h + c.
template <int KT, bool KV>
struct warp_state {
    static constexpr int M = KT / 64;
    float s[M][4][4];

    // Piece j of group m: key 4 (a + 16 m) + j's four values (KV), or value vbase + 4h + j's
    // four keys (VK); its address and whether it is inside the state.
    __device__ static float *piece(const dr_args &p, const tile_task &t, int m, int j, bool &in)
    {
        const int64_t rs = p.a.state.stride[2], v0 = t.vbase + 4 * (threadIdx.x & 1);
        if (KV) {
            const int k = warp_key(m, j);
            in = k < p.K && v0 < p.V;
            return t.state + k * rs + v0;
        }
        in = v0 + j < p.V && warp_key(m, 0) < p.K;
        return t.state + (v0 + j) * rs + warp_key(m, 0);
    }

    __device__ void load(const dr_args &p, const tile_task &t)
    {
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bool in;
                const float *src = piece(p, t, m, j, in);
                const float4 x = in && t.init ? __ldcs(reinterpret_cast<const float4 *>(src))
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                const float e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    if (KV)
                        s[m][j][c] = e[c];
                    else
                        s[m][c][j] = e[c];
                }
            }
    }

    __device__ void store(const dr_args &p, const tile_task &t) const
    {
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                bool in;
                float *dst = piece(p, t, m, j, in);
                const float4 y = KV ? make_float4(s[m][j][0], s[m][j][1], s[m][j][2], s[m][j][3])
                                    : make_float4(s[m][0][j], s[m][1][j], s[m][2][j], s[m][3][j]);
                if (in)
                    __stcs(reinterpret_cast<float4 *>(dst), y);
            }
    }
};

// Sum over the 16 lanes of a pair index a (the lanes sharing h).
__device__ __forceinline__ float sum_over_keys(float x)
{
#pragma unroll
    for (int o = 2; o < 32; o <<= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// One token through the warp's state: o = scale (q^T S' + (q . k) u), S' = e^g S,
// u = beta (v - k^T S'), then S = S' + k u^T (q and k L2-normalised first when asked).
template <int KT, bool KV, class E>
__device__ __forceinline__ void warp_step(const dr_args &p, const tile_task &t, int64_t tok,
                                          const warp_token<KT, E> &x, warp_state<KT, KV> &w)
{
    constexpr int M = KT / 64;
    const dr_tensors &a = p.a;
    float q[M][4], k[M][4];
    float sq = 0.0f, sk = 0.0f, qk = 0.0f, pk[4], pq[4];
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[m][i] = to_f32(x.q[m][i]), k[m][i] = to_f32(x.k[m][i]);
            sq += q[m][i] * q[m][i];
            sk += k[m][i] * k[m][i];
            qk += q[m][i] * k[m][i];
        }
#pragma unroll
    for (int c = 0; c < 4; c++) {
        pk[c] = pq[c] = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                pk[c] += k[m][i] * w.s[m][i][c];
                pq[c] += q[m][i] * w.s[m][i][c];
            }
    }
    sq = sum_over_keys(sq), sk = sum_over_keys(sk), qk = sum_over_keys(qk);
#pragma unroll
    for (int c = 0; c < 4; c++)
        pk[c] = sum_over_keys(pk[c]), pq[c] = sum_over_keys(pq[c]);
    const token_scalars ts = token_scalars_of(a, t.hv, x.g, x.b, sq, sk, qk);
    const int64_t v0 = t.vbase + 4 * (threadIdx.x & 1);
    const int64_t oo = t.seq.row * a.out.stride[0] + tok * a.out.stride[1] + t.hv * a.out.stride[2];
    float u[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        u[c] = ts.beta * (to_f32(x.v[c]) - ts.decay * ts.inv_k * pk[c]);
        const float o = p.scale * (ts.decay * ts.inv_q * pq[c] + ts.qk * u[c]);
        if ((threadIdx.x & 31) < 2 && v0 + c < p.V)
            st(a.out, oo + v0 + c, o);
    }
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float kn = k[m][i] * ts.inv_k;
#pragma unroll
            for (int c = 0; c < 4; c++)
                w.s[m][i][c] = ts.decay * w.s[m][i][c] + kn * u[c];
        }
}

template <int KT, bool KV, class E>
__global__ void __launch_bounds__(kThreads) recurrent_warps(const dr_args p)
{
    const dr_tensors &a = p.a;
    // The tile, as tile_task_for maps it (value range fastest, then head, then sequence).
    const unsigned id = blockIdx.x * kWarps + threadIdx.x / 32;
    if (id >= p.tiles)
        return; // uniform across the warp; the kernel has no barrier
    const unsigned per_head = (unsigned)p.tiles_per_head, nh = id / per_head;
    const unsigned n = nh / (unsigned)p.HV;
    tile_task t;
    t.vbase = (int64_t)(id - nh * per_head) * kWarpCols;
    t.hv = nh - n * (unsigned)p.HV;
    t.kh = a.gva == GDN_GVA_BLOCK ? t.hv / p.ratio : t.hv % p.H;
    t.seq = seq_span(a.cu_seqlens, p.T, n);
    // The slot and the initial-state flag are on the state's path: their loads go out first,
    // and nothing waits for them until the token's loads are out too.
    const int64_t slot = p.has_state ? seq_slot(a.state_slots, n, p.S) : -1;
    const bool fresh = a.has_initial_state.data && ld_index(a.has_initial_state, n) == 0;
    warp_token<KT, E> next;
    if (t.seq.len > 0)
        next.load(p, t, t.seq.t0);
    t.state = nullptr;
    if (p.has_state) {
        if (slot < 0)
            return; // a padded sequence: nothing of it is read or written
        t.state = static_cast<float *>(a.state.data) + slot * a.state.stride[0] +
                  t.hv * a.state.stride[1];
    }
    t.init = p.has_state && !fresh;
    warp_state<KT, KV> w;
    w.load(p, t);
    for (int64_t s = 0; s < t.seq.len; s++) {
        const warp_token<KT, E> x = next;
        if (s + 1 < t.seq.len)
            next.load(p, t, t.seq.t0 + s + 1);
        warp_step(p, t, t.seq.t0 + s, x, w);
    }
    if (t.state) // after the last token; an empty sequence writes back what it read
        w.store(p, t);
}

// Resident blocks per SM the register budget must allow: with the tile in shared memory there
// is nothing worth holding in registers across the two passes, and more resident blocks mean
// more state in flight. 16 KiB tiles: 6 blocks (<= 85 registers); 32 KiB tiles: 5 (<= 102).
__host__ __device__ constexpr int min_blocks(int slots) { return slots <= 8 ? 6 : slots <= 16 ? 5 : 4; }

template <class Tile, int TILE, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) recurrent_tiles(const dr_args p)
{
    __shared__ float4 slots[Tile::SLOTS * kThreads];
    __shared__ token_smem sm;
    tile_task t;
    if (!tile_task_for(p, blockIdx.x, TILE, t))
        return; // a padded sequence: uniform across the block, so no barrier is skipped by half
    Tile::load(p, t, slots);
    Tile::run(p, t, slots, sm);
}

// Value columns (rows) per tile: 8 (recurrent_warps) while the batch is small, then 64 (the tile
// kernel; 32 when K > 128, where a 256 x 64 tile would not fit in shared memory). In the KV
// layout the warp kernel is the fastest while the call has at most kWarpTiles32 tiles of 32
// columns (B = 16 at HV = 32, V = 128; H200), the 64-wide tiles beyond. In the VK layout the
// warp's loads are 256 contiguous bytes per 16 lanes (in KV, 32-byte pieces of 16 rows), and it
// is the fastest at every batch; with two tokens or more per sequence (speculative verification)
// it keeps its state in registers across the tokens and wins at every batch too
// (docs/PERFORMANCE.md has the timings). GDN_CUDA_DECODE_TILE=8|32|64 forces one (tests,
// benchmarks).
int decode_tile(const gdn_delta_rule_problem *p)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("GDN_CUDA_DECODE_TILE");
        const int f = e ? atoi(e) : 0;
        forced = f == 8 || f == 32 || f == 64 ? f : 0;
    }
    if (forced)
        return p->K > 128 && forced == 64 ? 32 : forced;
    const int64_t N = p->seqs.count, tiles32 = N * p->HV * ((p->V + 31) / 32);
    const int64_t tokens = p->seqs.cu_seqlens ? p->T : N * p->T;
    const bool vk = p->has_state && p->a.state_layout == GDN_STATE_VK;
    if (tiles32 <= kWarpTiles32 || (p->K <= 128 && (vk || tokens >= 2 * N)))
        return kWarpCols;
    return p->K > 128 ? 32 : 64;
}

template <int KT, bool KV, class E>
gdn_status launch_warps(gdn_context *ctx, dr_args d, int64_t N, cudaStream_t stream)
{
    d.tiles_per_head = (d.V + kWarpCols - 1) / kWarpCols;
    d.tiles = d.tiles_per_head * d.HV * N;
    recurrent_warps<KT, KV, E><<<(unsigned)((d.tiles + kWarps - 1) / kWarps), kThreads, 0,
                                 stream>>>(d);
    return cuda_check(ctx, "gdn_delta_rule");
}

template <bool KV, class E>
gdn_status launch_warps_for(gdn_context *ctx, const dr_args &d, int64_t N, cudaStream_t stream)
{
    return d.K <= 64    ? launch_warps<64, KV, E>(ctx, d, N, stream)
           : d.K <= 128 ? launch_warps<128, KV, E>(ctx, d, N, stream)
                        : launch_warps<256, KV, E>(ctx, d, N, stream);
}

template <bool KV>
gdn_status launch_warps_typed(gdn_context *ctx, const dr_args &d, gdn_dtype dt, int64_t N,
                              cudaStream_t stream)
{
    return dt == GDN_BF16  ? launch_warps_for<KV, __nv_bfloat16>(ctx, d, N, stream)
           : dt == GDN_F16 ? launch_warps_for<KV, __half>(ctx, d, N, stream)
                           : launch_warps_for<KV, float>(ctx, d, N, stream);
}

template <class Tile, int TILE>
gdn_status launch(gdn_context *ctx, dr_args d, int64_t N, cudaStream_t stream)
{
    d.tiles_per_head = (d.V + TILE - 1) / TILE;
    d.tiles = d.tiles_per_head * d.HV * N;
    const unsigned grid = (unsigned)d.tiles;
    recurrent_tiles<Tile, TILE, min_blocks(Tile::SLOTS)><<<grid, kThreads, 0, stream>>>(d);
    return cuda_check(ctx, "gdn_delta_rule");
}

} // namespace

// The recurrent form of a call (cuda_delta_rule_op.cu picks it): the kernel decode_tile says.
extern "C" gdn_status cuda_delta_rule_recurrent(gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    const int64_t N = p->seqs.count;
    if (N == 0)
        return GDN_OK;
    dr_args d;
    d.a = dr_tensors_of(p->a);
    d.T = p->T, d.H = p->H, d.HV = p->HV, d.K = p->K, d.V = p->V, d.S = p->S;
    d.ratio = p->ratio;
    d.scale = (float)p->scale;
    d.has_state = p->has_state;
    cudaStream_t stream = cuda_stream(ctx);
    const bool kv = p->a.state_layout == GDN_STATE_KV || !p->has_state;
    const int tile = decode_tile(p);
    if (tile == kWarpCols)
        return kv ? launch_warps_typed<true>(ctx, d, p->a.q.dtype, N, stream)
                  : launch_warps_typed<false>(ctx, d, p->a.q.dtype, N, stream);
    if (kv) {
        if (tile == 64)
            return p->K <= 64 ? launch<kv_tile<64, 64>, 64>(ctx, d, N, stream)
                              : launch<kv_tile<128, 64>, 64>(ctx, d, N, stream);
        return p->K <= 64    ? launch<kv_tile<64, 32>, 32>(ctx, d, N, stream)
               : p->K <= 128 ? launch<kv_tile<128, 32>, 32>(ctx, d, N, stream)
                             : launch<kv_tile<256, 32>, 32>(ctx, d, N, stream);
    }
    if (tile == 64)
        return launch<vk_tile<128, 64>, 64>(ctx, d, N, stream);
    return p->K <= 128 ? launch<vk_tile<128, 32>, 32>(ctx, d, N, stream)
                       : launch<vk_tile<256, 32>, 32>(ctx, d, N, stream);
}
