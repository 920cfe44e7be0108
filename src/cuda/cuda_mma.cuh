// Warp-level tensor-core matrix products for the chunked delta rule (mma.sync, sm_80 and up).
//
// A precision policy names the operand type the products run in and the type intermediates are
// stored in:
//   prec_bf16    bf16 operands, m16n8k16, f32 accumulation (bf16 inputs)
//   prec_f16     f16 operands, m16n8k16, f32 accumulation (f16 inputs)
//   prec_tf32x3  f32 inputs: each operand split into a tf32 high part and a tf32 remainder, three
//                m16n8k8 products (hi*hi + hi*lo + lo*hi) carry about 21 bits; each k-step's
//                three summed apart and added in f32 (mma_step_tf32x3), which makes a dot
//                product as accurate as an f32 FMA chain: the 1e-5 bar f32 inputs are held to.
//   prec_tf32x3_trunc, prec_tf32_once  the 16-bit preparation's inverse (inverse_policy): the
//                same products from truncating splits, or one tf32 product a k-step.
// Matrices are read through views (pointer, row stride, column stride, in elements), so a
// transpose is a view, not a copy. Any element type is converted to f32 and then to the
// policy's operand type as the fragment is built.
#ifndef GDN_CUDA_MMA_CUH
#define GDN_CUDA_MMA_CUH

#include "cuda_common.cuh" // to_f32, from_f32

// A read-only matrix view: element (r, c) at p[r * rs + c * cs].
template <class E>
struct mview {
    const E *p;
    int rs, cs;
    __device__ __forceinline__ float at(int r, int c) const { return to_f32(p[r * rs + c * cs]); }
};

template <class E>
__device__ __forceinline__ mview<E> view(const E *p, int rs, int cs)
{
    mview<E> v;
    v.p = p, v.rs = rs, v.cs = cs;
    return v;
}

// Accumulator element e of n-tile j of a warp's 16 x 8*NT block: row and column in the block.
__device__ __forceinline__ int acc_row(int e) { return ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int j, int e) { return 8 * j + 2 * (threadIdx.x & 3) + (e & 1); }

struct prec_bf16 {
    using st = __nv_bfloat16;
    static constexpr bool is_f16 = false;
    static constexpr bool split = true; // the high mode: operands as hi + lo (split_pair)
    static constexpr float lo_scale = 1.0f; // (split_pair)
    static constexpr int KS = 16;
    __device__ static __forceinline__ unsigned pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&v);
    }
    // The two elements of a pair made by pack (lo in the low 16 bits), as f32.
    __device__ static __forceinline__ float2 unpack(unsigned w)
    {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    }
    __device__ static __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4],
                                               const unsigned (&b)[2])
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

struct prec_f16 {
    using st = __half;
    static constexpr bool is_f16 = true;
    static constexpr bool split = true;
    static constexpr float lo_scale = 2048.0f; // 2^11 (split_pair)
    static constexpr int KS = 16;
    __device__ static __forceinline__ unsigned pack(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&v);
    }
    __device__ static __forceinline__ float2 unpack(unsigned w)
    {
        return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xffffu))),
                           __half2float(__ushort_as_half((unsigned short)(w >> 16))));
    }
    __device__ static __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4],
                                               const unsigned (&b)[2])
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

// The fast mode's policies (GDN_PRECISION_FAST): every operand rounded once to the inputs' type,
// no lo parts and no lo products; f32 accumulation and state as in the high mode.
struct prec_bf16_fast : prec_bf16 {
    static constexpr bool split = false;
};
struct prec_f16_fast : prec_f16 {
    static constexpr bool split = false;
    static constexpr float lo_scale = 1.0f;
};

// x, y as hi and lo words of the 16-bit policy P: hi the pair rounded, lo what the rounding
// left times P::lo_scale, rounded (x = hi + lo / lo_scale to about 2^-16 of x in bf16, 2^-22 in
// f16). The one split of the 16-bit paths. f16's lo parts are scaled by 2^11 because what f16
// rounding leaves is about 2^-11 of x, which falls among f16's subnormals (2^-24 apart) for any
// x below about 2^-3: unscaled, the lo part of a value near 1e-3 kept 3 bits. Scaled, it is as
// normal as x is (and no larger: |x - hi| <= 2^-11 |x|). Every product of a lo part therefore
// sums apart from the hi products (its own accumulator, or a group before them) and is scaled
// back by 1 / lo_scale, a power of two: exact. bf16 has f32's range and lo_scale 1.
template <class P>
__device__ __forceinline__ void split_pair(float x, float y, unsigned &hi, unsigned &lo)
{
    hi = P::pack(x, y);
    const float2 h = P::unpack(hi);
    lo = P::pack((x - h.x) * P::lo_scale, (y - h.y) * P::lo_scale);
}

// Whether P's lo parts are scaled (split_pair): their products then sum apart from the hi ones.
template <class P>
__device__ __forceinline__ constexpr bool lo_scaled()
{
    return P::split && P::lo_scale != 1.0f;
}

// The accumulator P's lo products go to: acl when they are scaled, else acc itself (acl is then
// never touched, and the compiler drops it).
template <class P, class A>
__device__ __forceinline__ A &lo_chain(A &acc, A &acl)
{
    if constexpr (lo_scaled<P>())
        return acl;
    else
        return acc;
}

// acc += acl / lo_scale where P's lo parts are scaled (the lo products of lo_chain), else nothing.
template <class P, int M, int N>
__device__ __forceinline__ void add_lo(float (&acc)[M][N], const float (&acl)[M][N])
{
    if constexpr (lo_scaled<P>())
#pragma unroll
        for (int i = 0; i < M; i++)
#pragma unroll
            for (int j = 0; j < N; j++)
                acc[i][j] += acl[i][j] * (1.0f / P::lo_scale);
}

struct prec_tf32x3 {
    using st = float;
    static constexpr int KS = 8;
    static constexpr bool once = false; // three products a k-step (prec_tf32_once: one)
    __device__ static __forceinline__ unsigned tf32(float x)
    {
        unsigned r;
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
        return r;
    }
    // x = hi + lo to about 21 bits, both tf32.
    __device__ static __forceinline__ void split(float x, unsigned &hi, unsigned &lo)
    {
        hi = tf32(x);
        lo = tf32(x - __uint_as_float(hi));
    }
    // The same in two instructions: hi is x truncated to tf32 and lo the exact f32 rest, which
    // the tensor cores read truncated to tf32 (lo's lost bits are 2^-21 of x).
    __device__ static __forceinline__ void split_trunc(float x, unsigned &hi, unsigned &lo)
    {
        hi = __float_as_uint(x) & 0xffffe000u;
        lo = __float_as_uint(x - __uint_as_float(hi));
    }
    __device__ static __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4],
                                               const unsigned (&b)[2])
    {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    __device__ static __forceinline__ void split_operand(float x, unsigned &hi, unsigned &lo)
    {
        split(x, hi, lo);
    }
};

// Split tf32 with truncating splits (split_trunc: two instructions where sm_90 runs each
// cvt.rna.tf32 in three and a constant). |lo| reaches 2^-10 |x| (2^-11 rounded), so the dropped
// lo * lo term reaches 2^-20 |a b| (2^-22), and the three terms' truncations bias the product
// toward zero: about 20 bits, for products whose results leave in fewer (the preparation's
// inverse where T leaves as one bf16 part or hi + lo bf16 parts, inverse_policy), not for the
// f32 inputs' 1e-5 bar nor for f16's hi + lo parts (about 22 bits).
struct prec_tf32x3_trunc : prec_tf32x3 {
    __device__ static __forceinline__ void split_operand(float x, unsigned &hi, unsigned &lo)
    {
        split_trunc(x, hi, lo);
    }
};

// One tf32 product a k-step, the operands' f32 bits read as tf32 (the tensor cores ignore the
// low 13 mantissa bits: about 10 bits), accumulated by the tensor cores: FLA's precision for
// its inverse's merges, for the fast mode's, whose T leaves rounded once to 16 bits.
struct prec_tf32_once : prec_tf32x3 {
    static constexpr bool once = true;
};

// One k-step of acc += A[m0:m0+16, k0:k0+KS] B[k0:k0+KS, n0:n0+8NT] (16-bit policies).
template <class P, int NT, class EA, class EB>
__device__ __forceinline__ void mma_step(float (&acc)[NT][4], const mview<EA> &A,
                                         const mview<EB> &B, int m0, int n0, int k0)
{
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const int r0 = m0 + g, r1 = r0 + 8, c0 = k0 + 2 * t, c1 = c0 + 8;
    unsigned a[4];
    a[0] = P::pack(A.at(r0, c0), A.at(r0, c0 + 1));
    a[1] = P::pack(A.at(r1, c0), A.at(r1, c0 + 1));
    a[2] = P::pack(A.at(r0, c1), A.at(r0, c1 + 1));
    a[3] = P::pack(A.at(r1, c1), A.at(r1, c1 + 1));
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int n = n0 + 8 * j + g;
        unsigned b[2];
        b[0] = P::pack(B.at(c0, n), B.at(c0 + 1, n));
        b[1] = P::pack(B.at(c1, n), B.at(c1 + 1, n));
        P::mma(acc[j], a, b);
    }
}

// The split-tf32 k-step (k = 8; P::once: one tf32 product, accumulated by the tensor cores).
// With rounding splits (prec_tf32x3), its three products go to a fresh accumulator that is then
// added to acc in f32: the tensor cores' own accumulation truncates toward zero, and a chain of
// them over a whole 96-long dot product measured errors of 5.0 units of 2^-24 sum |a b| at the
// 99th percentile (14.5 at most, biased toward zero), where k-steps summed in f32 measured 0.8
// (2.6 at most; a CUDA-core FMA chain 1.6 and 5.7). That matters where a dot product cancels,
// e.g. q.k of a one-token chunk (H100, 2^21 random unit vectors).
template <class P, int NT, class EA, class EB>
__device__ __forceinline__ void mma_step_tf32x3(float (&acc)[NT][4], const mview<EA> &A,
                                                const mview<EB> &B, int m0, int n0, int k0)
{
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const int r0 = m0 + g, r1 = r0 + 8, c0 = k0 + t, c1 = c0 + 4;
    if constexpr (P::once) {
        const unsigned a[4] = {__float_as_uint(A.at(r0, c0)), __float_as_uint(A.at(r1, c0)),
                               __float_as_uint(A.at(r0, c1)), __float_as_uint(A.at(r1, c1))};
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int n = n0 + 8 * j + g;
            const unsigned b[2] = {__float_as_uint(B.at(c0, n)), __float_as_uint(B.at(c1, n))};
            P::mma(acc[j], a, b);
        }
        return;
    }
    unsigned ah[4], al[4];
    P::split_operand(A.at(r0, c0), ah[0], al[0]);
    P::split_operand(A.at(r1, c0), ah[1], al[1]);
    P::split_operand(A.at(r0, c1), ah[2], al[2]);
    P::split_operand(A.at(r1, c1), ah[3], al[3]);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int n = n0 + 8 * j + g;
        unsigned bh[2], bl[2];
        P::split_operand(B.at(c0, n), bh[0], bl[0]);
        P::split_operand(B.at(c1, n), bh[1], bl[1]);
        float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        prec_tf32x3::mma(step, al, bh);
        prec_tf32x3::mma(step, ah, bl);
        prec_tf32x3::mma(step, ah, bh);
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] += step[e];
    }
}

// acc (a warp's 16 x 8*NT block at (m0, n0)) += A[m0:, 0:kd] B[0:kd, n0:], kd a multiple of 16.
template <class P, int NT, class EA, class EB>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], mview<EA> A, mview<EB> B, int m0,
                                         int n0, int kd)
{
    for (int k0 = 0; k0 < kd; k0 += 16) {
        if constexpr (P::KS == 8) {
            mma_step_tf32x3<P, NT>(acc, A, B, m0, n0, k0);
            mma_step_tf32x3<P, NT>(acc, A, B, m0, n0, k0 + 8);
        } else {
            mma_step<P, NT>(acc, A, B, m0, n0, k0);
        }
    }
}

// ---- 16-bit operands straight from shared memory (ldmatrix) ---------------------------------
// Tiles are row-major in shared memory with rows 16-byte aligned; ld is the row stride in
// elements.

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void *p)
{
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void *p)
{
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Four 8 x 8 matrices of 16-bit pairs (a warp's accumulator fragment layout: lane l holds row
// l / 4, columns 2 (l % 4) and + 1; matrix m in register m) to shared memory (stmatrix, sm_90):
// matrix m's row i goes to the address lane 8m + i gives; _trans stores each matrix transposed.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_STMATRIX 1
__device__ __forceinline__ void stsm_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2,
                                        unsigned r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

__device__ __forceinline__ void stsm_x4_trans(unsigned addr, unsigned r0, unsigned r1,
                                              unsigned r2, unsigned r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     addr),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
#endif

// Element (r, c) of a 16-bit tile of row stride ld. SWZ: a 64-row tile whose width is a multiple
// of 64, stored as panels of 64 columns (panel c / 64 at element 4096 (c / 64)), each panel's
// rows one 128-byte line whose 16-byte pieces are XOR-swizzled by the row (piece c / 8 % 8 of row
// r stored at piece (c / 8 % 8) ^ (r % 8)); ld is not used. The eight rows of an ldmatrix read hit
// distinct banks without padding, each 32-byte sector still holds two pieces of one row, and a
// panel is exactly the 128-byte-swizzled layout of the wgmma descriptors (cuda_wgmma.cuh).
constexpr int kPanel = 64; // rows and columns of a swizzled panel
template <bool SWZ>
__host__ __device__ __forceinline__ int tile_at(int r, int c, int ld)
{
    return SWZ ? (c >> 6) * (kPanel * kPanel) + r * kPanel + ((((c >> 3) ^ r) & 7) << 3) + (c & 7)
               : r * ld + c;
}

// A warp's 16 x 16 block of 16-bit elements, held as mma accumulator pairs (w[j][h]: row
// 8 h + lane / 4, columns 8 j + 2 (lane % 4) and the next), to rows m0.. and columns n0.. of
// a global tile (tile_at<SWZ>, row stride ld) through 512 bytes of the warp's shared scratch
// (16-byte aligned), so that each lane stores one whole 16-byte piece: 16 full 32-byte sectors
// per store instead of 16 bytes of 8 rows per 4-byte store. The scratch's 32-byte rows swap
// their halves on rows 4-7 of each 8 (no bank conflicts); stmatrix fills it on sm_90.
__device__ __forceinline__ unsigned char *block16_piece(unsigned char *scratch, int r, int half)
{
    return scratch + 32 * r + 16 * (half ^ ((r >> 2) & 1));
}

template <bool SWZ, class E>
__device__ __forceinline__ void store_block16(E *dst, int ld, int m0, int n0,
                                              const unsigned (&w)[2][2], unsigned char *scratch)
{
    const int l = threadIdx.x & 31;
#ifdef GDN_STMATRIX
    { // lanes 8i..8i+7 address the rows of matrix i = (j, h) = (i / 2, i % 2)
        const int i = l >> 3, r = 8 * (i & 1) + (l & 7);
        stsm_x4(static_cast<unsigned>(__cvta_generic_to_shared(block16_piece(scratch, r, i >> 1))),
                w[0][0], w[0][1], w[1][0], w[1][1]);
    }
#else
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            *reinterpret_cast<unsigned *>(block16_piece(scratch, 8 * h + (l >> 2), j) + 4 * (l & 3)) =
                w[j][h];
#endif
    __syncwarp();
    const int r = l >> 1, half = l & 1;
    *reinterpret_cast<uint4 *>(dst + tile_at<SWZ>(m0 + r, n0 + 8 * half, ld)) =
        *reinterpret_cast<const uint4 *>(block16_piece(scratch, r, half));
    __syncwarp(); // the scratch is free again
}

// A fragment (16 x 16 at (m0, k0)) of a row-major [m][k] tile.
template <bool SWZ = false, class E>
__device__ __forceinline__ void frag_a(unsigned (&a)[4], const E *t, int ld, int m0, int k0)
{
    const int l = threadIdx.x & 31;
    ldsm_x4(a, t + tile_at<SWZ>(m0 + (l & 15), k0 + 8 * (l >> 4), ld));
}

// A fragment (16 x 16 at (m0, k0)) of A = X^T, X row-major [k][m] in shared memory.
template <bool SWZ = false, class E>
__device__ __forceinline__ void frag_a_trans(unsigned (&a)[4], const E *x, int ld, int m0, int k0)
{
    const int l = threadIdx.x & 31;
    ldsm_x4_trans(a, x + tile_at<SWZ>(k0 + (l & 7) + 8 * (l >> 4), m0 + 8 * ((l >> 3) & 1), ld));
}

// B fragments of two n-tiles (16 x 16 at (k0, n0)) of a row-major [k][n] tile: {b[0], b[1]}
// for columns n0..n0+7, {b[2], b[3]} for n0+8..n0+15.
template <class E>
__device__ __forceinline__ void frag_b2(unsigned (&b)[4], const E *t, int ld, int k0, int n0)
{
    const int l = threadIdx.x & 31;
    ldsm_x4_trans(b, t + (k0 + (l & 7) + 8 * ((l >> 3) & 1)) * ld + n0 + 8 * (l >> 4));
}

template <class P>
__device__ __forceinline__ void mma2(float (&c0)[4], float (&c1)[4], const unsigned (&a)[4],
                                     const unsigned (&b)[4])
{
    const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    P::mma(c0, a, b0);
    P::mma(c1, a, b1);
}

template <int NT>
__device__ __forceinline__ void acc_zero(float (&acc)[NT][4])
{
#pragma unroll
    for (int j = 0; j < NT; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

#endif
