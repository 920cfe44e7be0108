// Warpgroup tensor-core products (wgmma, sm_90a) for the chunked delta rule's state pass.
//
// One warpgroup (4 warps, 128 threads) computes a 64 x N block D += A B with
//   A: 64 x 16 per instruction, from registers: warp w holds rows 16w..16w+15 in the layout of
//      mma.sync's m16n8k16 A fragment (a[0] rows g, k 2t..2t+1; a[1] rows g + 8; a[2], a[3] the
//      same at k + 8), so an accumulator converts to an A operand without moving data;
//   B: 16 x N from shared memory, named by a matrix descriptor;
//   D: f32, warp w rows 16w.., element 4j + e at row g + 8 (e / 2), column 8j + 2t + (e % 2)
//      (g = lane / 4, t = lane % 4): mma.sync's accumulator layout, n-tile after n-tile.
// B tiles are stored the way the 128-byte swizzle of the descriptors expects: "panels" of 64
// 16-bit columns, each row of a panel one 128-byte line whose 16-byte pieces are XOR-ed with the
// row index mod 8 (tile_at in cuda_mma.cuh), every panel 1024-byte aligned. That one layout
// serves both orientations:
//   K-major B (B[k][n] = X[n][k], X row-major [n][k]: W, Q and Aqk as the right operand of
//     S^T X^T): 8-row groups of n are 1024 bytes apart (SBO), a k-step of 16 moves the start 32
//     bytes along the line, k = 64.. is the next panel;
//   MN-major B (B[k][n] = X[k][n], X row-major [k][n]: K in the update V'^T K): n = 64.. is the
//     next panel (LBO = the panel's size), 8-row groups of k are 1024 bytes apart (SBO), a k-step
//     of 16 moves the start 2048 bytes.
// Compiled only for sm_90a (GDN_WGMMA); elsewhere the functions are empty and the host never
// launches a kernel that uses them (chunk_state_wg_loaded in cuda_chunk_state_wg.cu).
#ifndef GDN_CUDA_WGMMA_CUH
#define GDN_CUDA_WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GDN_WGMMA 1
#endif

// A shared-memory matrix descriptor: start address, leading and stride byte offsets, 128-byte
// swizzle.
__device__ __forceinline__ uint64_t wg_desc(unsigned saddr, unsigned lbo, unsigned sbo)
{
    return (uint64_t)((saddr & 0x3ffffu) >> 4) | (uint64_t)((lbo >> 4) & 0x3fffu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fffu) << 32 | 1ull << 62;
}

// Orders earlier register writes (accumulators, A operands) before the next wgmma.
__device__ __forceinline__ void wg_fence()
{
#ifdef GDN_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// Closes the group of wgmma issued so far; the warpgroup goes on while it runs (wg_wait_all).
// Its accumulators must then be held by wg_hold before the close and after the wait.
__device__ __forceinline__ void wg_commit()
{
#ifdef GDN_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until no wgmma of this warpgroup is in flight.
__device__ __forceinline__ void wg_wait_all()
{
#ifdef GDN_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// Closes the group of wgmma issued so far and waits until none is in flight.
__device__ __forceinline__ void wg_commit_wait()
{
    wg_commit();
    wg_wait_all();
}

// Makes n accumulators read and rewritten at this point of the program, so that the compiler
// moves none of their uses across it (while a committed group still writes them, a use moved
// past the wait would see the old value).
template <int n>
__device__ __forceinline__ void wg_hold(float *d)
{
#pragma unroll
    for (int i = 0; i < n; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

#define GDN_WG_D32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GDN_WG_OUT32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GDN_WG_D64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GDN_WG_OUT64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 x N, f32: N / 2 registers a thread) += SA * A (registers) B (descriptor), N = 64 or
// 128; SA = 1 or -1; TB = 1: B is MN-major. F16: f16 operands, else bf16 (TY: the PTX type).
// d is a register array (constant indices only). scale-d is a predicate set from a register
// operand (always 1: D accumulates).
#define GDN_WG_N64(TY)                                                                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %39, 0;\nwgmma.mma_async.sync.aligned."    \
                 "m64n64k16.f32." TY "." TY " {" GDN_WG_D32 "}, {%32, %33, %34, %35}, "          \
                 "%36, p, %37, 1, %38;\n}\n"                                                    \
                 : GDN_WG_OUT32                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(SA), "n"(TB), "r"(1))
#define GDN_WG_N128(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %71, 0;\nwgmma.mma_async.sync.aligned."    \
                 "m64n128k16.f32." TY "." TY " {" GDN_WG_D64 "}, {%64, %65, %66, %67}, "         \
                 "%68, p, %69, 1, %70;\n}\n"                                                    \
                 : GDN_WG_OUT64                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(SA), "n"(TB), "r"(1))
template <bool F16, int SA, int TB, int N>
__device__ __forceinline__ void wg_mma(float *d, const unsigned (&a)[4], uint64_t desc)
{
    static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
#ifdef GDN_WGMMA
    if constexpr (N == 64 && F16)
        GDN_WG_N64("f16");
    else if constexpr (N == 64)
        GDN_WG_N64("bf16");
    else if constexpr (F16)
        GDN_WG_N128("f16");
    else
        GDN_WG_N128("bf16");
#else
    (void)d, (void)a, (void)desc;
#endif
}

#undef GDN_WG_N64
#undef GDN_WG_N128
#undef GDN_WG_D32
#undef GDN_WG_OUT32
#undef GDN_WG_D64
#undef GDN_WG_OUT64

#endif
