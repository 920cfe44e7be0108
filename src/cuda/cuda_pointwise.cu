// Gating, L2 norm and gated RMSNorm on CUDA: one thread per gate, one warp per normalised row.
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 256;

__global__ void gating_kernel(const gdn_gating_problem p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.rows * p.HV)
        return;
    const int64_t r = idx / p.HV, h = idx % p.HV;
    const int64_t ao = row_offset(p.a, r) + h, go = row_offset(p.g_out, r) + h;
    // read both inputs before writing either output: outputs may be their inputs
    const float a = ld(p.a, ao);
    float b = 0.0f;
    int64_t bo = 0, beo = 0;
    if (p.b.data) {
        bo = row_offset(p.b, r) + h;
        beo = row_offset(p.beta_out, r) + h;
        b = ld(p.b, bo);
    }
    st(p.g_out, go, gate_g(p.p, h, a));
    if (p.b.data)
        st(p.beta_out, beo, gate_beta(p.p, b));
}

__device__ float warp_sum(float x)
{
    for (int o = 16; o; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__global__ void l2norm_kernel(const gdn_l2norm_problem p)
{
    const int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (r >= p.rows)
        return;
    const int64_t xo = row_offset(p.x, r), oo = row_offset(p.out, r);
    float ss = 0.0f;
    for (int64_t d = lane; d < p.D; d += 32) {
        float x = ld(p.x, xo + d);
        ss += x * x;
    }
    const float inv = 1.0f / sqrtf(warp_sum(ss) + (float)p.eps);
    for (int64_t d = lane; d < p.D; d += 32)
        st(p.out, oo + d, ld(p.x, xo + d) * inv);
}

__global__ void rmsnorm_kernel(const gdn_rmsnorm_problem p)
{
    const int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (r >= p.rows)
        return;
    const gdn_rmsnorm_args &a = p.a;
    const bool gated = a.z.data != nullptr;
    const int64_t xo = row_offset(a.x, r), oo = row_offset(a.out, r);
    const int64_t zo = gated ? row_offset(a.z, r) : 0;
    float ss = 0.0f;
    for (int64_t d = lane; d < p.D; d += 32) {
        float x = ld(a.x, xo + d);
        if (gated && !a.norm_before_gate)
            x *= siluf_(ld(a.z, zo + d));
        ss += x * x;
    }
    const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)p.D + a.eps);
    for (int64_t d = lane; d < p.D; d += 32) {
        float x = ld(a.x, xo + d);
        float gate = gated ? siluf_(ld(a.z, zo + d)) : 1.0f;
        float w = a.weight.data ? ld(a.weight, d * a.weight.stride[0]) : 0.0f;
        w = a.weight_offset ? 1.0f + w : (a.weight.data ? w : 1.0f);
        st(a.out, oo + d, x * gate * inv * w);
    }
}

unsigned blocks_for(int64_t threads) { return (unsigned)((threads + kThreads - 1) / kThreads); }

} // namespace

extern "C" gdn_status cuda_gating(gdn_context *ctx, const gdn_gating_problem *p)
{
    if (p->rows * p->HV > 0)
        gating_kernel<<<blocks_for(p->rows * p->HV), kThreads, 0, cuda_stream(ctx)>>>(*p);
    return cuda_check(ctx, "gdn_gating");
}

extern "C" gdn_status cuda_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p)
{
    if (p->rows > 0)
        l2norm_kernel<<<blocks_for(p->rows * 32), kThreads, 0, cuda_stream(ctx)>>>(*p);
    return cuda_check(ctx, "gdn_l2norm");
}

extern "C" gdn_status cuda_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p)
{
    if (p->rows > 0)
        rmsnorm_kernel<<<blocks_for(p->rows * 32), kThreads, 0, cuda_stream(ctx)>>>(*p);
    return cuda_check(ctx, "gdn_rmsnorm_gated");
}
