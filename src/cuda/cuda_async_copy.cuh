// Asynchronous copies from global to shared memory, and the tensor maps that the bulk tensor
// copies read.
//   cp.async (sm_80 and up): 16 bytes a thread, held in no register while in flight; a thread
//     waits for its own copies (all, or all but the last N committed groups).
//   cp.async.bulk (sm_90): one thread moves a contiguous block; the copy completes on an
//     mbarrier (cuda_mbarrier.cuh), which counts its bytes.
//   cp.async.bulk.tensor (sm_90, TMA): one thread moves a box of a tensor that a tensor map
//     describes (made on the host by the driver's encoder, tensor_map_encoder), also completing
//     on an mbarrier; elements past the tensor's ends arrive as zeros. The other way, shared to
//     global, a box's elements past the tensor's ends are not written, and the copy completes in
//     the issuing thread's bulk groups, which it waits on.
// The sm_90 copies compile to nothing for older architectures, where no kernel issues them.
#ifndef GDN_CUDA_ASYNC_COPY_CUH
#define GDN_CUDA_ASYNC_COPY_CUH

#include <cuda.h> // CUtensorMap and its encoder's types (the encoder is found through the runtime)
#include <cuda_runtime.h>
#include <stdint.h>

// ---- cp.async --------------------------------------------------------------------------------

// 16 bytes from global to the shared-memory address dst (a 32-bit shared-window address).
__device__ __forceinline__ void cp_async16s(unsigned dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// 16 bytes from global to the shared-memory pointer smem.
__device__ __forceinline__ void cp_async16(void *smem, const void *src)
{
    cp_async16s(static_cast<unsigned>(__cvta_generic_to_shared(smem)), src);
}

// cp_async16, or 16 zero bytes when !valid (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async16_zfill(void *smem, const void *src, bool valid)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}

// Waits for all of this thread's cp.async copies.
__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Closes this thread's group of cp.async copies issued so far (cp_async_wait_groups waits on it).
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_groups()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- bulk copies (sm_90) ---------------------------------------------------------------------

// `bytes` (a multiple of 16, both ends 16-byte aligned) from src to the shared address dst by
// one bulk copy, issued by the calling thread alone, completing on the mbarrier at bar.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void *src, int bytes,
                                              unsigned bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

// The box of a 4-d tensor map (a kernel parameter, __grid_constant__) whose first element has
// coordinates (c0, c1, c2, c3), innermost first, to the shared address dst, completing on the
// mbarrier at bar. The box lands in the map's shared-memory layout (its swizzle follows dst).
__device__ __forceinline__ void tensor_copy_4d_g2s(unsigned dst, const CUtensorMap *map, int c0,
                                                   int c1, int c2, int c3, unsigned bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx"
                 "::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "r"(bar)
                 : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)bar;
#endif
}

// The box of a 4-d tensor map at coordinates (c0, c1, c2, c3) from the shared address src
// (laid out as the map's box, with its swizzle), issued by the calling thread alone; then the
// thread's bulk group closed.
__device__ __forceinline__ void tensor_copy_4d_s2g(const CUtensorMap *map, int c0, int c1, int c2,
                                                   int c3, unsigned src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], "
                 "[%5];\n"
                 "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
                 : "memory");
#else
    (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)src;
#endif
}

// Waits until the calling thread's bulk stores have read their shared memory (READ) or are
// complete.
template <bool READ>
__device__ __forceinline__ void bulk_stores_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (READ)
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// ---- tensor maps (host) ----------------------------------------------------------------------

// The driver's cuTensorMapEncodeTiled, reached through the runtime (no link against libcuda),
// or null where the driver does not have it. Looked up once.
typedef CUresult (*tensor_map_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                         const cuuint64_t *, const cuuint64_t *,
                                         const cuuint32_t *, const cuuint32_t *,
                                         CUtensorMapInterleave, CUtensorMapSwizzle,
                                         CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline tensor_map_encode_fn tensor_map_encoder()
{
    static const tensor_map_encode_fn encode = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            f = nullptr;
        }
        return reinterpret_cast<tensor_map_encode_fn>(f);
    }();
    return encode;
}

#endif
