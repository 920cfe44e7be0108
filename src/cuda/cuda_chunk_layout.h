/* Sizes and byte layouts of the chunked prefill (src/cuda/cuda_chunk_*), shared by the host
 * planner (cuda_chunk_plan.c, plain C, also built without CUDA) and the kernels (CUDA C++, where
 * the same functions are constexpr, so that every shared-memory offset is a compile-time
 * immediate).
 *
 * The chunk is 64 tokens; the mma.sync state passes run tiles of 32 value columns, the wgmma
 * pass 64 a warpgroup. K and V are rounded up to 32 (KP, VP) and are at most 128. */
#ifndef GDN_CUDA_CHUNK_LAYOUT_H
#define GDN_CUDA_CHUNK_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
#ifdef __CUDACC__
#define CK_FN __host__ __device__ constexpr inline
#else
#define CK_FN constexpr inline
#endif
#else
#define CK_FN static inline
#endif

enum {
    CK_CHUNK = 64,      /* tokens per chunk */
    CK_VT = 32,         /* value columns per mma.sync state-pass block */
    CK_MAX_DIM = 128,   /* K and V (the shared-memory budget) */
    CK_PANEL = 64,      /* rows and columns of a 128-byte-swizzled 16-bit panel (tile_at) */
    CK_WG_COLS = 64,    /* value columns per warpgroup of the wgmma state pass */
    /* The stitch (cuda_chunk_stitch.cu): 256 threads, blocks of at most 16 value columns; its
     * buffers' row strides in floats (M's rows padded by 4; S_j's rows 24, which makes its B
     * fragments conflict-free). */
    CK_STITCH_THREADS = 256,
    CK_STITCH_LD = CK_MAX_DIM + 4,
    CK_STITCH_MAX_COLS = 16,
    CK_STITCH_LDS = 24
};

CK_FN int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Chunks of a run of `tokens` tokens, the last one partial. */
CK_FN int64_t chunks_for(int64_t tokens) { return (tokens + CK_CHUNK - 1) / CK_CHUNK; }

/* Segments of a sequence of `chunks` chunks in runs of segc (at least one: an empty sequence
 * still carries its state through). */
CK_FN int64_t segments_for(int64_t chunks, int64_t segc)
{
    return chunks > 0 ? (chunks + segc - 1) / segc : 1;
}

/* ---- the 16-bit path's stages (chunk_state_tc) and workspace blocks --------------------------
 *
 * chunk_state_tc's shared memory for K <= KP and a 16-bit type of es bytes: two stages of W (hi,
 * lo), Q, K, U (f32), Aqk (hi, lo); V' (hi, lo); the update's scaled V' (hi, lo); two 16-bit
 * copies of S (hi, lo). On the 16-bit path the workspace holds each chunk's W, W lo, Q, K and
 * Aqk (hi, lo) with the same padded rows, and U as 32-column tiles (u_index in
 * cuda_chunk_device.cuh), so a stage's parts arrive by one linear copy each. Rows of W, Q, K (KP
 * wide) and Aqk (64 wide) that are a multiple of 128 bytes go unpadded with their 16-byte pieces
 * swizzled (tile_at in cuda_mma.cuh): ldmatrix reads them without bank conflicts, and every row is
 * whole 32-byte sectors. Other widths (KP = 32, 96) get 32-byte pads: with 16-byte pads half the
 * sectors the preparation wrote were shared by two rows (its time went up by half), while 32-byte
 * pads cost 2-way conflicts in ldmatrix instead (docs/PERFORMANCE.md). */
typedef struct tc_layout {
    int ldk, ldu, ldq;                                 /* row strides (elements) */
    int w, wl, q, k, u, a, stage, vn, vk, sb, bytes;   /* byte offsets; stage: one stage's size */
} tc_layout;

/* A row of n 16-bit elements of es bytes: unpadded and swizzled when whole 128-byte lines, else
 * padded by 32 bytes (above). */
CK_FN bool tc_swizzled(int n, int es) { return n * es % 128 == 0; }
CK_FN int tc_ld(int n, int es) { return tc_swizzled(n, es) ? n : n + 32 / es; }

/* Bytes per (chunk, value head) of the 16-bit path's workspace arrays: W, W lo, Q, K (rows of
 * ldk); Aqk's hi and its lo part (rows of ldq, the lo block right after the hi one); U (VP / 32
 * tiles of 64 rows of 32 floats, u_index). */
CK_FN int tc_key_block(int KP, int es) { return CK_CHUNK * tc_ld(KP, es) * es; }
CK_FN int tc_aq_part(int es) { return CK_CHUNK * tc_ld(CK_CHUNK, es) * es; } /* hi or lo */
CK_FN int tc_aq_block(int es) { return 2 * tc_aq_part(es); }
CK_FN int tc_u_tile(void) { return CK_CHUNK * CK_VT * 4; }

/* The fused pass's Aq block per (chunk, value head): Aqk and T diag(beta) in 16-bit parts of
 * tc_aq_part(2) each. The fast mode's (split false) is [Aqk, T diag(beta)], as tc_aq_block; the
 * high mode's [T diag(beta) hi, lo, Aqk hi, lo], so that the maps pass stages its first half and
 * the output pass the whole block, each by one copy. */
CK_FN int fused_aq_block(bool split) { return (split ? 4 : 2) * tc_aq_part(2); }
CK_FN int fused_tb_at(bool split) { return split ? 0 : tc_aq_part(2); }
CK_FN int fused_aqk_at(bool split) { return split ? 2 * tc_aq_part(2) : 0; }

CK_FN tc_layout tc_layout_for(int KP, int es)
{
    tc_layout L = {0};
    L.ldk = tc_ld(KP, es), L.ldu = CK_VT + 16 / es, L.ldq = tc_ld(CK_CHUNK, es);
    L.w = 0;
    L.wl = L.w + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.q = L.wl + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.k = L.q + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.u = L.k + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.a = L.u + (int)round_up(tc_u_tile(), 16);
    L.stage = L.a + (int)round_up(tc_aq_block(es), 16);
    L.vn = 2 * L.stage;
    L.vk = L.vn + (int)round_up(2 * CK_CHUNK * L.ldu * es, 16);
    L.sb = L.vk + (int)round_up(2 * CK_CHUNK * L.ldu * es, 16);
    L.bytes = L.sb + (int)round_up(2 * KP * L.ldu * es, 16);
    return L;
}

/* ---- the 16-bit preparation (chunk_prep_tc) ---------------------------------------------------
 *
 * chunk_prep_tc's shared memory for K <= KP and a 16-bit type of es bytes: q and k tiles (rows of
 * ldk); f32 A, T and scratch Xs (row stride ldf, even so that pairs load 8 bytes at a time; the
 * second merge's X tile, before that each warp's 1 KiB of staging); per-token G, beta, the norms
 * and W's row factors; then the v tile, whose size alone depends on V. A compile-time constant
 * in the kernel: as kernel parameters, the offsets were read from the constant bank at each use,
 * and those reads stalled the kernel. */
typedef struct prep_tc_layout {
    int ldk, ldf;                                          /* row strides (elements) */
    int k, q, a, t, x, g, b, iq, ik, sw, v;                /* byte offsets */
} prep_tc_layout;

CK_FN prep_tc_layout prep_tc_layout_for(int KP, int es)
{
    prep_tc_layout L = {0};
    L.ldk = KP + 16 / es, L.ldf = CK_CHUNK + 4;
    L.k = 0;
    L.q = L.k + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.a = L.q + (int)round_up(CK_CHUNK * L.ldk * es, 16);
    L.t = L.a + CK_CHUNK * L.ldf * 4;
    L.x = L.t + CK_CHUNK * L.ldf * 4;
    L.g = L.x + 32 * L.ldf * 4;
    L.b = L.g + CK_CHUNK * 4;
    L.iq = L.b + CK_CHUNK * 4;
    L.ik = L.iq + CK_CHUNK * 4;
    L.sw = L.ik + CK_CHUNK * 4;
    L.v = L.sw + (int)round_up((CK_CHUNK + 2) * 4, 16);
    return L;
}

/* The fused pass's preparation (16-bit, two value heads at once on a team's halves): its layout
 * with a second head's A and T (f32, rows of ldf) and gates (G, beta) in the v tile's place and
 * after it; a team's bytes in a block of two, 128-byte aligned. */
CK_FN int prep_fused_bytes(int KP)
{
    const prep_tc_layout L = prep_tc_layout_for(KP, 2);
    return L.v + 2 * CK_CHUNK * L.ldf * 4 + 2 * CK_CHUNK * 4;
}

CK_FN int prep_fused_team_bytes(int KP) { return (int)round_up(prep_fused_bytes(KP), 128); }

/* ---- the wgmma state pass (chunk_state_wg) ----------------------------------------------------
 *
 * One stage of chunk_state_wg with NW warpgroups: byte offsets, every panel 1024-byte aligned.
 * W's and Q's panels alternate (wq: W's panel p at 2p, Q's at 2p + 1), so that [W; Q] is one
 * 128-row right operand of S^T (V' and the output's Q S in one product). Warpgroup w's U tiles
 * are at u + w * wg_u_bytes(); once it has read them they hold its output tile (no region of its
 * own: two warpgroups' stages fill the 227 KB an SM gives a block). The second stage starts
 * `stage` bytes after the first and needs only `used` of them; the two stages' mbarriers follow
 * (bar; in the dynamic area, as static shared memory would be padded to its 1024-byte alignment).
 * bytes includes 1024 for aligning the dynamic area. The fused pass takes [K; Q] in wq, its
 * factors ew in wl, v's panels in u and its Aq block at wg_fused_aq_at. */
typedef struct wg_layout {
    int wq, wl, k, a, u, ek, eg, gl, used, stage, bar, bytes;
} wg_layout;

/* A warpgroup's U tiles in a stage (64 value columns: two 32-column tiles). */
CK_FN int wg_u_bytes(void) { return (CK_WG_COLS / CK_VT) * tc_u_tile(); }

CK_FN wg_layout wg_layout_for(int KP, int NW)
{
    wg_layout L = {0};
    const int kb = CK_CHUNK * KP * 2; /* a 16-bit key block (KP / 64 panels) */
    L.wq = 0, L.wl = 2 * kb, L.k = 3 * kb, L.a = 4 * kb;
    L.u = L.a + tc_aq_block(2); /* Aqk hi, then lo */
    L.ek = L.u + NW * wg_u_bytes();
    L.eg = L.ek + CK_CHUNK * 4;
    L.gl = L.eg + CK_CHUNK * 4; /* the chunk's decay beside a preparation that runs with it */
    L.used = L.gl + 16;
    L.stage = (int)round_up(L.used, 1024);
    L.bar = (int)round_up(L.stage + L.used, 8);
    L.bytes = L.bar + 16 + 1024; /* + the alignment of the dynamic area to 1024 */
    return L;
}

/* Where the fused pass's Aq block (fused_aq_block) starts in a stage: so that its Aqk parts land
 * at a, as the other passes' do. The high mode's T diag(beta) parts then fill k's place (K = 128),
 * which the fused pass leaves free. */
CK_FN int wg_fused_aq_at(wg_layout L, bool split) { return L.a - fused_aqk_at(split); }

/* ---- the stitch (stitch_starts) ---------------------------------------------------------------
 *
 * Floats of one (M, N's columns) buffer: M's KP rows of CK_STITCH_LD and N's columns. The block
 * double-buffers them in dynamic shared memory (stitch_bytes), and holds S_j in a static tile
 * (stitch_smem adds it: what a block needs; the planner splits only where the device has it). */
CK_FN int stitch_buf_floats(void) { return CK_MAX_DIM * (CK_STITCH_LD + CK_STITCH_MAX_COLS); }
CK_FN int stitch_bytes(void) { return 2 * stitch_buf_floats() * 4; }
CK_FN int stitch_smem(void) { return stitch_bytes() + CK_MAX_DIM * CK_STITCH_LDS * 4; }

#endif
