// The exact inverse of a chunk's unit lower-triangular 64 x 64 matrix, T = (I + A)^-1, in f32 on
// a group of warps of the 16-bit preparation (cuda_chunk_prep_tc.cu), in three steps: the four
// 16 x 16 diagonal blocks by forward substitution (inverse_diag_block, one warp each); then
// blocks merge pairwise, 16 -> 32 (inverse_merge16, four warps) -> 64 (inverse_merge32, the
// group): the inverse of [[L11, 0], [A21, L22]] has T21 = -T22 (A21 T11). The merges' products
// run in the policy PI (inverse_policy) and skip the k-steps that would meet T's zero blocks
// above the diagonal, which zero_upper_blocks fills meanwhile.
#ifndef GDN_CUDA_CHUNK_INVERSE_CUH
#define GDN_CUDA_CHUNK_INVERSE_CUH

#include "cuda_mbarrier.cuh"
#include "cuda_mma.cuh"

#include <type_traits>

// The merges' products for a preparation of policy P, as accurate as the T it stores needs: the
// fast mode's T leaves rounded once to 16 bits, its merges one tf32 product a k-step (about 10
// bits, as FLA's); the high mode's leaves as hi + lo parts, bf16's (about 16 bits) from
// truncating splits (about 20), f16's (about 22: its lo part scaled) from rounding ones (21).
template <class P>
using inverse_policy = typename std::conditional<
    !P::split, prec_tf32_once,
    typename std::conditional<P::is_f16, prec_tf32x3, prec_tf32x3_trunc>::type>::type;

// A group of warps that share a named barrier: warp and tid count from the group's first.
struct warp_group {
    int warp, nwarps, tid, bar;
    __device__ void sync() const { sync_named(bar, 32 * nwarps); }
};

// Diagonal block b (rows and columns 16 b..) of Tm from Am's, one warp (lane j carries column
// j). Reads only Am's rows of block b.
__device__ __forceinline__ void inverse_diag_block(const float *Am, float *Tm, int ld, int b)
{
    const int lane = threadIdx.x & 31, b0 = 16 * b, j = lane & 15;
    const float *blk = Am + b0 * ld + b0;
    // Right-looking: once t[i] is final it is folded into every later row's sum, so the
    // dependent chain is 15 steps of one multiply-add (row by row it was 120).
    float t[16], sum[16];
#pragma unroll
    for (int i = 0; i < 16; i++)
        sum[i] = 0.0f;
    t[0] = j == 0 ? 1.0f : 0.0f;
#pragma unroll
    for (int i = 0; i < 15; i++) {
#pragma unroll
        for (int r = i + 1; r < 16; r++)
            sum[r] += blk[r * ld + i] * t[i];
        t[i + 1] = i + 1 == j ? 1.0f : i + 1 > j ? -sum[i + 1] : 0.0f;
    }
    if (lane < 16)
#pragma unroll
        for (int i = 0; i < 16; i++)
            Tm[(b0 + i) * ld + b0 + j] = t[i];
}

// sign * acc (a warp's 16 x 8 accumulator tile) to the f32 tile at x, row stride ld.
__device__ __forceinline__ void store_acc_16x8(float *x, int ld, const float (&acc)[1][4],
                                               float sign)
{
#pragma unroll
    for (int e = 0; e < 4; e++)
        x[acc_row(e) * ld + acc_col(0, e)] = sign * acc[0][e];
}

// The 32 x 32 diagonal blocks' off-diagonal parts, warp w < 4 on block pair w / 2, columns
// 8 (w % 2)..: X = A21 T11 for its own 8 columns, through its 512 bytes of scratch, then
// T21 = -T22 X. Needs the four diagonal blocks and Am's rows written and visible.
template <class PI>
__device__ __forceinline__ void inverse_merge16(const float *Am, float *Tm, int ld, float *scratch,
                                                int warp)
{
    const int o = 32 * (warp >> 1), n1 = 8 * (warp & 1);
    float acc[1][4];
    acc_zero(acc);
    warp_mma<PI>(acc, view(Am + (o + 16) * ld + o, ld, 1), view(Tm + o * ld + o + n1, ld, 1), 0,
                 0, 16);
    store_acc_16x8(scratch, 8, acc, 1.0f); // row stride 8: the B fragments read it conflict-free
    __syncwarp();
    acc_zero(acc);
    warp_mma<PI>(acc, view(Tm + (o + 16) * ld + o + 16, ld, 1), view(scratch, 8, 1), 0, 0, 16);
    store_acc_16x8(Tm + (o + 16) * ld + o + n1, ld, acc, -1.0f);
}

// The 64 x 64 inverse's lower-left 32 x 32 block in eight 16 x 8 tiles (rows 16 (t / 4).. and
// columns 8 (t % 4)..), the group's warps taking them in turn: X = A21 T11 into Xs (32 rows of
// ld), a barrier, then T21 = -T22 X. k-steps that would meet T's zero blocks are skipped: X's
// columns 16.. start at k = 16, T22's rows ..15 stop at k = 16. X's second row of tiles takes its
// columns in reverse, so that four warps each get one tile of k = 32 and one of k = 16 (in
// order, warps 0 and 1 took two of k = 32). Ends with a barrier (Tm whole, Xs free). Xs may be Am's
// block above the diagonal (rows 0-31, columns 32-63), which nothing here reads.
template <class PI>
__device__ __forceinline__ void inverse_merge32(const float *Am, float *Tm, float *Xs, int ld,
                                                const warp_group &g)
{
    for (int t = g.warp; t < 8; t += g.nwarps) {
        const int m2 = 16 * (t >> 2), n2 = 8 * (t < 4 ? t : 7 - t), k0 = n2 < 16 ? 0 : 16;
        float acc[1][4];
        acc_zero(acc);
        warp_mma<PI>(acc, view(Am + (32 + m2) * ld + k0, ld, 1), view(Tm + k0 * ld + n2, ld, 1),
                     0, 0, 32 - k0);
        store_acc_16x8(Xs + m2 * ld + n2, ld, acc, 1.0f);
    }
    g.sync();
    for (int t = g.warp; t < 8; t += g.nwarps) {
        const int m2 = 16 * (t >> 2), n2 = 8 * (t & 3);
        float acc[1][4];
        acc_zero(acc);
        warp_mma<PI>(acc, view(Tm + (32 + m2) * ld + 32, ld, 1), view(Xs + n2, ld, 1), 0, 0,
                     m2 + 16);
        store_acc_16x8(Tm + (32 + m2) * ld + n2, ld, acc, -1.0f);
    }
    g.sync();
}

// Tm's six 16 x 16 blocks above the diagonal to zero, by threads t of n (the merges never read
// them; W and U's products and T diag(beta)'s stores read T whole).
__device__ __forceinline__ void zero_upper_blocks(float *Tm, int ld, int t, int n)
{
    for (int i = t; i < 48 * 16; i += n) { // rows 0..47, 16-byte pieces
        const int r = i / 16, c = 4 * (i % 16);
        if (c >= 16 * (r / 16 + 1))
            *reinterpret_cast<float4 *>(Tm + r * ld + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

#endif
