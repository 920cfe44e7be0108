// chunk_state: the state pass of the chunked form for f32 inputs, one block of 4 warps per
// (32 value columns, value head, sequence), its chunks in order: the state tile S (K x 32, f32,
// shared memory) gives V' = U - W S, the output O = Q' S + Aqk V', and S <- e^G_last S + K'^T V'
// (chunk_prep's workspace arrays staged by cp.async). The last S goes back to the pool.
#include "cuda_async_copy.cuh"
#include "cuda_chunk_device.cuh"

namespace {

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
__global__ void __launch_bounds__(kThreads) chunk_state(const chunk_state_args p)
{
    using E = typename P::st;
    constexpr int es = sizeof(E);
    extern __shared__ __align__(16) unsigned char smem[];
    const ck_dims &d = p.d;
    E *Ws = reinterpret_cast<E *>(smem + d.s_w), *Qs = reinterpret_cast<E *>(smem + d.s_q);
    E *Ks = reinterpret_cast<E *>(smem + d.s_k), *Us = reinterpret_cast<E *>(smem + d.s_u);
    E *As = reinterpret_cast<E *>(smem + d.s_aq), *Vn = reinterpret_cast<E *>(smem + d.s_vn);
    float *Ss = reinterpret_cast<float *>(smem + d.s_s);
    const ck_pool &a = p.pool;
    const int64_t nvt = d.VP / kVT, id = blockIdx.x;
    const int vt = (int)(id % nvt);
    const int64_t hv = (id / nvt) % p.shape.HV, n = id / (nvt * p.shape.HV);
    const int tid = threadIdx.x, warp = tid >> 5;
    float *state;
    bool init;
    if (!sequence_state(p.pool, p.shape, n, hv, state, init))
        return; // a padded sequence
    const bool kv = a.state_layout == GDN_STATE_KV;
    const int64_t s2 = a.state.stride[2], s3 = a.state.stride[3];
    const int v0 = vt * kVT;
    for (int idx = tid; idx < d.KP * kVT; idx += kThreads) {
        const int r = idx / kVT, cc = idx % kVT, v = v0 + cc;
        float x = 0.0f;
        if (init && r < p.shape.K && v < p.shape.V)
            x = state[kv ? r * s2 + v * s3 : v * s2 + r * s3];
        Ss[r * d.lds + cc] = x;
    }
    const seq_info s = seq_span(p.seqs.cu_seqlens, p.shape.T, n);
    const int64_t first = chunk_first(p.seqs, n), nch = chunk_first(p.seqs, n + 1) - first;
    const int m0 = 16 * warp;
    for (int64_t j = 0; j < nch; j++) {
        const int64_t ch = (first + j) * p.shape.HV + hv, tok0 = s.t0 + kC * j;
        const int len = (int)(s.len - kC * j < kC ? s.len - kC * j : kC);
        const int64_t kbytes = (int64_t)kC * d.KP * es;
        stage_rows(Ws, d.ldk * es, static_cast<const E *>(p.work.W) + ch * kC * d.KP, d.KP * es, kC,
                   d.KP * es);
        stage_rows(Qs, d.ldk * es, static_cast<const unsigned char *>(p.work.Qd) + ch * kbytes,
                   d.KP * es, kC, d.KP * es);
        stage_rows(Ks, d.ldk * es, static_cast<const unsigned char *>(p.work.Kd) + ch * kbytes,
                   d.KP * es, kC, d.KP * es);
        stage_rows(Us, d.ldu * es, static_cast<const E *>(p.work.U) + ch * kC * d.VP + v0,
                   d.VP * es, kC, kVT * es);
        stage_rows(As, d.ldq * es, static_cast<const E *>(p.work.Aq) + ch * kC * kC, kC * es, kC,
                   kC * es);
        cp_async_wait_all();
        const float decay = p.work.gl[ch];
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
                    if (r < len && v < p.shape.V)
                        st(p.out, tok_off(p.out, s.row, tok0 + r, hv) + v, acc[jt][e]);
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
        if (r < p.shape.K && v < p.shape.V)
            state[kv ? r * s2 + v * s3 : v * s2 + r * s3] = Ss[r * d.lds + cc];
    }
}

} // namespace

void launch_chunk_state(const chunk_state_args &a, int smem, cudaStream_t stream)
{
    cudaFuncSetAttribute(chunk_state<prec_tf32x3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         smem);
    const unsigned blocks = (unsigned)((int64_t)(a.d.VP / kVT) * a.shape.HV * a.shape.N);
    chunk_state<prec_tf32x3><<<blocks, kThreads, smem, stream>>>(a);
}
