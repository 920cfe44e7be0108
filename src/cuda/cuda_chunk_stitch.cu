// stitch_starts: the starting states of a split sequence's segments, from the maps of the
// segments before them.
#include "cuda_async_copy.cuh"
#include "cuda_chunk_device.cuh"

namespace {

// ---- sequence splitting --------------------------------------------------------------------
//
// A chunk maps the state linearly, S_next = (decay I - K'^T W) S + K'^T U, so a run of chunks
// (a segment) maps it as S_end = M S_start + N. With few (value tile, head, sequence) blocks
// (few heads, long sequences) each sequence's chunks are cut into segments of segc chunks:
//   pass 1 (chunk_state_tc<MAPS>): every segment but the last runs the state pass on the
//     K x (K + V) "state" [I | 0] with inputs [0 | U]: its columns come out as [M | N]. Column
//     tiles are independent, so this is the same kernel with K / 32 more tiles and no output.
//   the stitch (stitch_starts): S_j = M_{j-1} S_{j-1} + N_{j-1} for j = 1.., in split tf32
//     (about 21 bits), from the sequence's initial state, each written over N_{j-1};
//   pass 2 (chunk_state_tc<OUT>): segment j starts from S_j, then runs its chunks with outputs;
//     the last segment writes the state back.
// Each pass has (segments x heads x tiles) blocks in parallel, against (heads x tiles) unsplit.
// chunk_state_wg (sm_90a) runs both passes the same way with 64-column tiles.

// The stitch (16-bit path, split calls), between the maps pass and the output pass: for each
// sequence, head and C value columns, S_j = M_{j-1} S_{j-1} + N_{j-1} for its segments j = 1..,
// from the sequence's initial state, each S_j written over N_{j-1} (which it no longer needs).
// The chain is serial, so its blocks are made narrow (C = 8 or 16, launch_stitch) to spread it
// over the SMs: each step is then short, and every block reads whole Ms, which L2 serves. Each
// M and its N columns come into shared memory by coalesced cp.async, the next pair while the
// block works on the current one; warp w computes rows 16w.. of S_j on tensor cores
// (stitch_rows_tc). A zero M (a map run from its segment's tail, flagged in m_zero) is neither
// staged nor multiplied: S_j = N_{j-1}, in place already, so the chain starts at the first map
// with an M.
constexpr int kStitchLd = CK_STITCH_LD, kStitchMaxCols = CK_STITCH_MAX_COLS; // C <= 16
constexpr int kStitchBuf = stitch_buf_floats(); // floats: an M, N's columns
constexpr int kStitchLds = CK_STITCH_LDS; // S_j's row stride (floats): B fragments conflict-free
static_assert(kStitchThreads / 32 * 16 >= kMaxDim, "a warp per 16 rows of S");
static_assert(kStitchLd == kMaxDim + 4 && kStitchMaxCols == 16 && kStitchLds == 24 &&
                  kStitchBuf == kMaxDim * (kStitchLd + kStitchMaxCols),
              "the planner's stitch sizes (cuda_chunk_layout.h)");

// M (KP x KP; not where with_m is false) and its N's C columns from v0 (row stride ldm in global
// memory) into buf; every thread, one cp.async group.
template <int C, int KP>
__device__ __forceinline__ void stage_map(float *buf, const float *MN, int ldm, int v0,
                                          bool with_m)
{
    float *Ns = buf + kMaxDim * kStitchLd;
    for (int i = threadIdx.x; with_m && i < KP * KP / 4; i += kStitchThreads) {
        const int r = i / (KP / 4), c = 4 * (i % (KP / 4));
        cp_async16(buf + r * kStitchLd + c, MN + (int64_t)r * ldm + c);
    }
    for (int i = threadIdx.x; i < KP * C / 4; i += kStitchThreads) {
        const int r = i / (C / 4), c = 4 * (i % (C / 4));
        cp_async16(Ns + r * C + c, MN + (int64_t)r * ldm + KP + v0 + c);
    }
    cp_async_commit();
}

// Rows m0..m0+15 of S_{i+1} = M_i S_i + N_i for the block's C columns (acc: the warp's
// accumulator tiles) in split tf32: M's and S's elements as hi + lo parts (split_trunc),
// three products (hi hi, hi lo, lo hi) carrying about 21 bits. M's fragments by ldmatrix (an
// 8 x 4 block of f32 is an 8 x 8 block of 16-bit halves: one instruction per k-step, not four
// loads), S's from its rows of kStitchLds; the k-steps rotate over four accumulator sets, so the
// dependent chain is a quarter as long (faster per step than per-thread f32 FMA at any block
// width; docs/PERFORMANCE.md).
template <int C, int KP>
__device__ __forceinline__ void stitch_rows_tc(float (&acc)[C / 8][4], const float *Ms,
                                               const float *Ns, const float *Ss, int m0)
{
    constexpr int NT = C / 8;
    const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    float part[4][NT][4];
#pragma unroll
    for (int s = 0; s < 4; s++)
        acc_zero(part[s]);
    const float *arow = Ms + (m0 + (l & 7) + 8 * ((l >> 3) & 1)) * kStitchLd + 4 * (l >> 4);
#pragma unroll
    for (int k0 = 0; k0 < KP; k0 += 8) {
        unsigned a[4], ah[4], al[4];
        ldsm_x4(a, arow + k0);
#pragma unroll
        for (int q = 0; q < 4; q++)
            prec_tf32x3::split_trunc(__uint_as_float(a[q]), ah[q], al[q]);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            unsigned bh[2], bl[2];
            prec_tf32x3::split_trunc(Ss[(k0 + t) * kStitchLds + 8 * j + g], bh[0], bl[0]);
            prec_tf32x3::split_trunc(Ss[(k0 + t + 4) * kStitchLds + 8 * j + g], bh[1], bl[1]);
            float (&d)[4] = part[(k0 / 8) % 4][j];
            prec_tf32x3::mma(d, al, bh);
            prec_tf32x3::mma(d, ah, bl);
            prec_tf32x3::mma(d, ah, bh);
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = Ns[(m0 + acc_row(e)) * C + acc_col(j, e)] +
                        ((part[0][j][e] + part[1][j][e]) + (part[2][j][e] + part[3][j][e]));
}

// The first of maps 0 .. n-1 whose M is not zero (zero(i) false), or n where every M is zero;
// the block reads the flags at once, a thread each, not as a chain of loads. Every thread calls.
template <class Zero>
__device__ __forceinline__ int64_t first_live_map(int64_t n, const Zero &zero)
{
    __shared__ unsigned long long first;
    if (threadIdx.x == 0)
        first = (unsigned long long)n;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kStitchThreads)
        if (!zero(i)) {
            atomicMin(&first, (unsigned long long)i);
            break;
        }
    __syncthreads();
    return (int64_t)first;
}

template <int C, int KP> // KP a compile-time size: the staging's index arithmetic is shifts
__global__ void __launch_bounds__(kStitchThreads) stitch_starts(const stitch_args p)
{
    static_assert(C == 8 || C == 16, "whole 8-column tiles, at most kStitchMaxCols");
    extern __shared__ __align__(16) float Mbuf[]; // two (M, N's columns) pairs
    __shared__ __align__(16) float Ss[kMaxDim * kStitchLds]; // (stitch_smem)
    const int VP = p.VP, ldm = KP + VP, m0 = 16 * (threadIdx.x >> 5);
    const int64_t tiles = VP / C, n = blockIdx.x / (tiles * p.shape.HV);
    const int64_t hv = blockIdx.x / tiles % p.shape.HV;
    const int v0 = (int)(blockIdx.x % tiles) * C;
    const int64_t slot0 = slot_first(p.seqs, n), count = slot_first(p.seqs, n + 1) - slot0;
    float *state;
    bool init;
    if (count < 2 || !sequence_state(p.pool, p.shape, n, hv, state, init))
        return;
    const bool kv = p.pool.state_layout == GDN_STATE_KV;
    const int64_t s2 = p.pool.state.stride[2], s3 = p.pool.state.stride[3];
    auto maps_of = [&](int64_t i) {
        return p.maps + ((slot0 + i) * p.shape.HV + hv) * (int64_t)KP * ldm;
    };
    // where the maps pass ran a segment from its tail its M is zero (segment_tail): then
    // S_(i+1) = N_i, which is in place already, and M is neither staged nor multiplied. The
    // flags are read a step before the staging that needs them (off the chain).
    auto m_zero = [&](int64_t i) { return p.m_zero && p.m_zero[(slot0 + i) * p.shape.HV + hv]; };
    // The chain starts at the first map with an M, from N of the map before it (or the initial
    // state); where no map has one, every S_j = N_(j-1) is in place and the block has nothing to
    // do (the benchmark's gates: it then read its state and every N for nothing, about 10 us).
    const int64_t i0 = first_live_map(count - 1, m_zero);
    if (i0 + 1 >= count)
        return;
    bool zero = false, zero1 = i0 + 2 < count && m_zero(i0 + 1); // maps i and i + 1
    stage_map<C, KP>(Mbuf + (i0 & 1) * kStitchBuf, maps_of(i0), ldm, v0, true);
    const float *N0 = i0 > 0 ? maps_of(i0 - 1) + KP + v0 : nullptr; // S_i0 = N_(i0-1)
    for (int i = threadIdx.x; i < KP * C; i += kStitchThreads) {
        const int k = i / C, c = i % C, v = v0 + c;
        Ss[k * kStitchLds + c] =
            N0 ? N0[(int64_t)k * ldm + c]
            : init && k < p.shape.K && v < p.shape.V ? state[kv ? k * s2 + v * s3 : v * s2 + k * s3]
                                                     : 0.0f;
    }
    for (int64_t i = i0; i + 1 < count; i++) {
        const float *Ms = Mbuf + (i & 1) * kStitchBuf, *Ns = Ms + kMaxDim * kStitchLd;
        const bool zero2 = i + 3 < count && m_zero(i + 2);
        if (i + 2 < count) {
            stage_map<C, KP>(Mbuf + ((i + 1) & 1) * kStitchBuf, maps_of(i + 1), ldm, v0, !zero1);
            cp_async_wait_groups<1>();
        } else {
            cp_async_wait_groups<0>();
        }
        __syncthreads(); // M_i, N_i's columns and S_i complete in shared memory
        float acc[C / 8][4];
        if (m0 < KP && zero)
#pragma unroll
            for (int j = 0; j < C / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[j][e] = Ns[(m0 + acc_row(e)) * C + acc_col(j, e)];
        else if (m0 < KP)
            stitch_rows_tc<C, KP>(acc, Ms, Ns, Ss, m0);
        __syncthreads(); // every read of S_i, M_i and N_i done
        if (m0 < KP)
#pragma unroll
            for (int j = 0; j < C / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = m0 + acc_row(e), c = acc_col(j, e);
                    Ss[r * kStitchLds + c] = acc[j][e];
                    if (!zero) // (N_i is S_(i+1) already)
                        maps_of(i)[r * ldm + KP + v0 + c] = acc[j][e];
                }
        zero = zero1, zero1 = zero2;
    }
}

template <int C, int KP>
void launch_cols(const stitch_args &a, cudaStream_t stream)
{
    cudaFuncSetAttribute(stitch_starts<C, KP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         stitch_bytes());
    stitch_starts<C, KP><<<(unsigned)(a.shape.N * a.shape.HV * (a.VP / C)), kStitchThreads,
                           stitch_bytes(), stream>>>(a);
}

template <int KP>
void launch_for(int cols, const stitch_args &a, cudaStream_t stream)
{
    if (cols == 8)
        launch_cols<8, KP>(a, stream);
    else
        launch_cols<16, KP>(a, stream);
}

} // namespace

// The stitch in blocks of cols = 8 or 16 value columns (VP is a multiple of 32): the planner
// takes 8 where that leaves at most one block per SM, else 16, as the chain is latency bound and
// narrower blocks cut each step.
void launch_stitch(int KP, int cols, const stitch_args &a, cudaStream_t stream)
{
    switch (KP) {
    case 32: launch_for<32>(cols, a, stream); break;
    case 64: launch_for<64>(cols, a, stream); break;
    case 96: launch_for<96>(cols, a, stream); break;
    default: launch_for<128>(cols, a, stream); break;
    }
}
