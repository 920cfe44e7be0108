// Shared pieces of the CUDA backend: element access by runtime dtype, error reporting, and the
// op entry points the backend table (cuda_backend.cu) points at.
#ifndef GDN_CUDA_COMMON_CUH
#define GDN_CUDA_COMMON_CUH

#include "../core/gdn_internal.h"
#include "cuda_chunk_plan.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Element access works on gdn_tensor and on any kernel-side copy of what a kernel reads of one
// (members data, dtype and stride[], as the decode kernel's compact arguments).

// Element off of a float tensor as f32 (kernels compute in f32; the reference is float64).
template <class Tensor>
__device__ __forceinline__ float ld(const Tensor &t, int64_t off)
{
    switch (t.dtype) {
    case GDN_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(t.data)[off]);
    case GDN_F16: return __half2float(static_cast<const __half *>(t.data)[off]);
    default: return static_cast<const float *>(t.data)[off];
    }
}

template <class Tensor>
__device__ __forceinline__ void st(const Tensor &t, int64_t off, float v)
{
    switch (t.dtype) {
    case GDN_BF16: static_cast<__nv_bfloat16 *>(t.data)[off] = __float2bfloat16_rn(v); break;
    case GDN_F16: static_cast<__half *>(t.data)[off] = __float2half_rn(v); break;
    default: static_cast<float *>(t.data)[off] = v; break;
    }
}

// Elements of a type known at compile time to and from f32.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class E> __device__ __forceinline__ E from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Element i of a rank-1 index or flag tensor (i32, i64, u8).
template <class Tensor>
__device__ __forceinline__ int64_t ld_index(const Tensor &t, int64_t i)
{
    int64_t off = i * t.stride[0];
    switch (t.dtype) {
    case GDN_I64: return static_cast<const int64_t *>(t.data)[off];
    case GDN_U8: return static_cast<const uint8_t *>(t.data)[off];
    default: return static_cast<const int32_t *>(t.data)[off];
    }
}

// Offset of row r of a tensor whose leading ndim-1 dims are flattened (as gdn_row_offset).
__device__ __forceinline__ int64_t row_offset(const gdn_tensor &t, int64_t r)
{
    int64_t off = 0;
    for (int d = t.ndim - 2; d >= 0; d--) {
        off += (r % t.shape[d]) * t.stride[d];
        r /= t.shape[d];
    }
    return off;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + __expf(-x)); }

// softplus(x) = log1p(exp(x)), x above the threshold; x + log1p(exp(-x)) for x > 0 so that a
// large threshold cannot overflow.
__device__ __forceinline__ float softplusf_(float x, float threshold)
{
    if (x > threshold)
        return x;
    return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

template <class Gating>
__device__ __forceinline__ float gate_g(const Gating &p, int64_t h, float a)
{
    float A = ld(p.A, h * p.A.stride[0]);
    float dt = p.dt_bias.data ? ld(p.dt_bias, h * p.dt_bias.stride[0]) : 0.0f;
    float rate = p.a_form == GDN_A_LOG ? -expf(A) : A;
    return rate * softplusf_(a + dt, p.softplus_threshold);
}

template <class Gating>
__device__ __forceinline__ float gate_beta(const Gating &p, float b)
{
    return (p.allow_neg_eigval ? 2.0f : 1.0f) * sigmoidf_(b);
}

// Slot and span of sequence n of a batch described by (cu_seqlens, T).
struct seq_info {
    int64_t row, t0, len;
};

template <class Tensor>
__device__ __forceinline__ seq_info seq_span(const Tensor &cu, int64_t T, int64_t n)
{
    seq_info s;
    if (cu.data) {
        s.row = 0;
        s.t0 = ld_index(cu, n);
        s.len = ld_index(cu, n + 1) - s.t0;
    } else {
        s.row = n;
        s.t0 = 0;
        s.len = T;
    }
    return s;
}

// Slot of sequence n, or -1 to skip it. Out-of-range device-side slots are skipped too: the
// host cannot check device memory without synchronizing, and a skip is safer than a stray write.
template <class Tensor>
__device__ __forceinline__ int64_t seq_slot(const Tensor &slots, int64_t n, int64_t S)
{
    int64_t s = slots.data ? ld_index(slots, n) : n;
    return s < S ? s : -1;
}

// Device `device`'s peak memory bandwidth in bytes per second (2 transfers a clock over the
// bus), or 0 where it does not say. The clock's query is slow (351 us on the H100): what runs on
// every call caches it.
inline double memory_peak_bytes_per_s(int device)
{
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return 2e3 * khz * (bits / 8);
}

// Turns the last CUDA error (if any) into GDN_ERR_CUDA with CUDA's message. Inline here, with
// cuda_stream, so that the op files depend on this header alone and the op table's file
// (cuda_backend.cu) is the only one that names the ops: no call runs both ways between files.
static inline gdn_status cuda_check(gdn_context *ctx, const char *fn)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess)
        return GDN_OK;
    return gdn_fail(ctx, GDN_ERR_CUDA, fn, "CUDA error %s: %s", cudaGetErrorName(err),
                    cudaGetErrorString(err));
}

// The stream the context's ops are enqueued on.
static inline cudaStream_t cuda_stream(const gdn_context *ctx)
{
    return static_cast<cudaStream_t>(ctx->opts.cuda_stream);
}

#ifdef __cplusplus
extern "C" {
#endif

gdn_status cuda_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p);
gdn_status cuda_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p);
gdn_status cuda_check_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p);
gdn_status cuda_gating(gdn_context *ctx, const gdn_gating_problem *p);
gdn_status cuda_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p);
gdn_status cuda_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p);
gdn_status cuda_check_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p);
gdn_status cuda_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p, void *workspace);
size_t cuda_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p);

// The gated delta rule. cuda_delta_rule_op.cu holds the entry points above: the check plans the
// call (cuda_chunk_plan.h) and keeps the plan in the context's cuda_ctx_state, where the size
// query and the run that follow in the same call read it; the run takes the recurrent kernels
// (cuda_delta_rule.cu, K up to GDN_CUDA_MAX_K) or the chunked form (cuda_delta_rule_chunked.cu
// and the cuda_chunk_* stages).
#define GDN_CUDA_MAX_K 256

typedef struct cuda_ctx_state {
    cuda_chunk_caps caps;                  // the device's, read at the first chunk-sized call
    bool caps_known;
    cuda_delta_rule_plan plan;             // the plan of the call in progress
    const gdn_delta_rule_problem *plan_of; // the problem it was made for (NULL: none)
} cuda_ctx_state;

gdn_status cuda_delta_rule_recurrent(gdn_context *ctx, const gdn_delta_rule_problem *p);
// The current device's capabilities, as the planner reads them.
void cuda_chunk_device_caps(cuda_chunk_caps *caps);
gdn_status cuda_delta_rule_chunked(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                   const cuda_chunk_plan *plan, void *workspace);

#ifdef __cplusplus
}
#endif

#endif
