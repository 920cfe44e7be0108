// The fused recurrent gated delta rule on CUDA: decode (T = 1) and short multi-token calls.
//
// Work is cut into tiles: K x TILE of one head's state (TILE value columns in the KV layout, value
// rows in VK), TILE = 32 or 64, so even batch-1 decode has V/TILE * HV blocks. Each state element
// is read once and written once per call, 16 bytes at a time.
//
// One 128-thread block per tile. The tile lives in shared memory in per-thread slots (slot i of
// thread t at i * 128 + t), brought in with cp.async: the bytes in flight hold no registers, and
// each thread only ever touches its own slots, so loading needs no barrier. Registers stay low
// and many blocks fit on an SM, which is what keeps enough state in flight (docs/PERFORMANCE.md
// has the variants measured: registers-resident tiles, persistent double-buffered blocks and
// barrier-free warp strips were all slower).
//
// Per token a block stages q, k, v and the gates, makes one pass over its slots for k^T S' and
// q^T S' (S' the decayed state), reduces them, and a second pass writes S' + k u^T (back to the
// slots between tokens, to the pool after the last). The output uses
// o = scale * (q^T S' + (q . k) u), so both reductions come from the first pass.
#include "cuda_common.cuh"

#include <math.h>
#include <stdlib.h>

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxK = 256;
constexpr int kMaxTile = 64;

// The kernel's arguments hold only what it reads, in the order it reads them. Kernel
// parameters come through the constant cache, cold at every launch, and a batch-1 step is short
// enough for its misses to show: with the whole gdn_delta_rule_args (its 80-byte tensors, about
// 1 KiB in all) they were the batch-1 kernel's largest stall (Nsight Compute, H200: the uniform
// constant loads held 24% of its stall samples, 14 of them on distinct lines).
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

// The state is read once per call: in the KV layout its loads carry an L2 evict-first policy,
// so they do not push out the lines the stores are still writing back (measured on an H200:
// 0.868 -> 0.90 of copy bandwidth at B = 256, 0.790 -> 0.84 at B = 64; the 256-byte L2 prefetch
// hint on top, or evict-first on the stores as well, measured slower). The VK tiles load without
// it: with the hint, the 64-row VK tile meets "illegal instruction" on an H200 (CUDA 13.0), a
// code-generation fault: compute-sanitizer stops at the hinted cp.async, whose SASS (LDGSTS)
// takes its policy from an odd uniform register, desc[UR1], that nothing writes (the 32-row VK
// and the KV tiles use an even pair set up before). The 32-row VK tile with the hint ran: H200,
// B = 64 / 256 at 32 rows, 85.3 -> 83.5 us and 341.4 -> 319.2 us, still slower than the unhinted
// 64-row tile the launch picks there (85.6 and 308.4 us).
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

// Value columns (rows) per tile. 32 keeps batch-1 decode spread over many blocks; 64 halves the
// per-tile fixed cost (token staging, barriers) per byte when there are tiles to spare (K <= 128:
// a 256 x 64 tile would not fit). GDN_CUDA_DECODE_TILE=32|64 forces one (benchmarking).
int decode_tile(const gdn_delta_rule_problem *p)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("GDN_CUDA_DECODE_TILE");
        forced = e && (atoi(e) == 32 || atoi(e) == 64) ? atoi(e) : 0;
    }
    if (p->K > 128)
        return 32;
    if (forced)
        return forced;
    return p->seqs.count * p->HV * ((p->V + 31) / 32) >= 8192 ? 64 : 32;
}

template <class Tile, int TILE>
gdn_status launch(gdn_context *ctx, dr_args d, int64_t N, cudaStream_t stream)
{
    d.tiles_per_head = (d.V + TILE - 1) / TILE;
    d.tiles = d.tiles_per_head * d.HV * N;
    recurrent_tiles<Tile, TILE, min_blocks(Tile::SLOTS)><<<(unsigned)d.tiles, kThreads, 0,
                                                           stream>>>(d);
    return cuda_check(ctx, "gdn_delta_rule");
}

} // namespace

// AUTO runs the chunked form for prefill-sized calls (32 tokens or more per sequence on
// average) when the shapes fit it, the recurrent kernel otherwise.
static bool use_chunked(const gdn_delta_rule_problem *p)
{
    if (p->a.algorithm != GDN_ALGO_AUTO)
        return p->a.algorithm == GDN_ALGO_CHUNKED;
    char why[8];
    const int64_t N = p->seqs.count, tokens = p->seqs.cu_seqlens ? p->T : N * p->T;
    return N > 0 && tokens >= 32 * N && cuda_chunked_supported(p, why, sizeof why) == GDN_OK;
}

extern "C" size_t cuda_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    (void)ctx;
    return use_chunked(p) ? cuda_chunked_workspace(p) : 0;
}

extern "C" gdn_status cuda_check_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    static const char *fn = "gdn_delta_rule";
    if (p->a.algorithm == GDN_ALGO_CHUNKED) {
        char why[256];
        if (cuda_chunked_supported(p, why, sizeof why) != GDN_OK)
            return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "%s", why);
    }
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
    if (use_chunked(p))
        return cuda_delta_rule_chunked(ctx, p, workspace);
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
