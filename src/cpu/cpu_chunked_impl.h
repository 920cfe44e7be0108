/* The chunked WY form's arithmetic (SPEC section 2) for one chunk, written once and compiled once
 * per ISA level: cpu_chunked_<isa>.c sets LANES, the micro-tile (MR rows by NV vectors) and
 * CPU_CHUNK_KERNELS, and the build gives it that level's -m flags. cpu_chunked.c loads the
 * chunks, owns the buffers and the threads; this file is matrix products on zero-padded
 * row-major f32 buffers, every one of them cut into MR x NR register tiles (the BLIS split of
 * framework and micro-kernel, without packing: a chunk's operands already sit in L1/L2).
 *
 * Per chunk (rows i, j, m are tokens; e^(G_i - G_j) <= 1 for j <= i, so no exponent overflows):
 *   prep_keys (once per key head): K^T, K K^T, Q K^T;
 *   prep (per value head): A = strictly lower beta_i k_i.k_j e^(G_i - G_j),  Tinv = (I + A)^-1
 *          (forward substitution; at n = 2 NR by halves, T21 by register tiles),
 *          Tb = Tinv diag(beta), K' = -diag(e^G) K,
 *          P = lower scale q_i.k_j e^(G_i - G_j), KT = (e^(G_last - G) k)^T;
 *   state: R = V + K' S (the residual v - e^G k S), V' = Tb R, O = diag(scale e^G) Q S + P V',
 *          S = e^G_last S + KT V'. */
#include "cpu.h"
#include "cpu_vec.h"

#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#ifndef MR
#define MR 4
#endif
#ifndef NV
#define NV 2
#endif
#define NR (NV * LANES)

/* Rows i and i + 1 of Tinv = (I + A)^-1 for strictly lower A [n, n] from the rows above them:
 * Tinv_i = e_i - sum_{m<i} A_im Tinv_m. Row m of Tinv is zero right of m, so column vector c
 * only needs rows m >= c LANES. The two rows share each Tinv_m they load (m < i); row i + 1 then
 * takes its last term, A_(i+1)i Tinv_i, from row i as it is made. Four chains a row: each sum is
 * a latency-bound dependency. n is even (a multiple of the kernels' pad), i too. */
static void inverse_rows(const float *A, float *Tinv, int64_t n, int64_t i)
{
    const float *a = A + i * n, *b = a + n;
    float *t = Tinv + i * n;
    for (int64_t c = 0; c < n; c += LANES) {
        vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, r0 = {0}, r1 = {0}, r2 = {0}, r3 = {0};
        int64_t m = c;
        for (; m + 3 < i; m += 4) {
            const vf t0 = vload(Tinv + m * n + c), t1 = vload(Tinv + (m + 1) * n + c);
            const vf t2 = vload(Tinv + (m + 2) * n + c), t3 = vload(Tinv + (m + 3) * n + c);
            s0 -= vsplat(a[m]) * t0;
            s1 -= vsplat(a[m + 1]) * t1;
            s2 -= vsplat(a[m + 2]) * t2;
            s3 -= vsplat(a[m + 3]) * t3;
            r0 -= vsplat(b[m]) * t0;
            r1 -= vsplat(b[m + 1]) * t1;
            r2 -= vsplat(b[m + 2]) * t2;
            r3 -= vsplat(b[m + 3]) * t3;
        }
        for (; m < i; m++) {
            const vf tm = vload(Tinv + m * n + c);
            s0 -= vsplat(a[m]) * tm;
            r0 -= vsplat(b[m]) * tm;
        }
        /* row i, with its diagonal 1 (the sums are zero at and right of column i) */
        const vi diag = viota((int32_t)c) == ((vi){0} + (int32_t)i);
        const vf ti = vselect(diag, vsplat(1.0f), (s0 + s1) + (s2 + s3));
        vstore(t + c, ti);
        vstore(t + n + c, ((r0 + r1) + (r2 + r3)) - vsplat(b[i]) * ti);
    }
    t[n + i + 1] = 1.0f;
}

/* Cout[MR, NR] = diag(cs) Cin + A[MR, depth] B[depth, NR], row r's factor cs[r * cs_step]
 * (cs_step 0: one factor for all rows; no Cin term, and cs unread, when Cin is NULL). Cout may
 * be Cin: the tile reads all of Cin before it writes. */
static inline void tile(int64_t depth, const float *A, int64_t lda, const float *B, int64_t ldb,
                        const float *Cin, int64_t ldi, const float *cs, int64_t cs_step,
                        float *Cout, int64_t ldo)
{
    vf acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = Cin ? vsplat(cs[r * cs_step]) * vload(Cin + r * ldi + v * LANES) : (vf){0};
    for (int64_t p = 0; p < depth; p++) {
        vf b[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            b[v] = vload(B + p * ldb + v * LANES);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            const vf a = vsplat(A[r * lda + p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] += a * b[v];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            vstore(Cout + r * ldo + v * LANES, acc[r][v]);
}

/* Rows i, i + 1 (< h) of the inverse of I + A's upper-left diagonal block [h, h] and rows i + h,
 * i + h + 1 of its lower-right one, in one sweep: inverse_rows' sums for both blocks, whose
 * trip counts are the same, side by side (each block's sums are a chain of dependent rows;
 * two blocks' are independent, and the core overlaps them). */
static void inverse_rows_halves(const float *A, float *Tinv, int64_t n, int64_t h, int64_t i)
{
    const float *a = A + i * n, *b = a + n, *e = A + (i + h) * n + h, *f = e + n;
    const float *T1 = Tinv, *T2 = Tinv + h * n + h; /* the blocks' rows 0 */
    float *t = Tinv + i * n, *u = Tinv + (i + h) * n + h;
    for (int64_t c = 0; c < h; c += LANES) {
        vf s0 = {0}, s1 = {0}, r0 = {0}, r1 = {0}, p0 = {0}, p1 = {0}, q0 = {0}, q1 = {0};
        int64_t m = c;
        for (; m + 1 < i; m += 2) {
            const vf t0 = vload(T1 + m * n + c), t1 = vload(T1 + (m + 1) * n + c);
            const vf v0 = vload(T2 + m * n + c), v1 = vload(T2 + (m + 1) * n + c);
            s0 -= vsplat(a[m]) * t0;
            s1 -= vsplat(a[m + 1]) * t1;
            r0 -= vsplat(b[m]) * t0;
            r1 -= vsplat(b[m + 1]) * t1;
            p0 -= vsplat(e[m]) * v0;
            p1 -= vsplat(e[m + 1]) * v1;
            q0 -= vsplat(f[m]) * v0;
            q1 -= vsplat(f[m + 1]) * v1;
        }
        for (; m < i; m++) {
            const vf tm = vload(T1 + m * n + c), vm = vload(T2 + m * n + c);
            s0 -= vsplat(a[m]) * tm;
            r0 -= vsplat(b[m]) * tm;
            p0 -= vsplat(e[m]) * vm;
            q0 -= vsplat(f[m]) * vm;
        }
        const vi diag = viota((int32_t)c) == ((vi){0} + (int32_t)i);
        const vf ti = vselect(diag, vsplat(1.0f), s0 + s1);
        const vf ui = vselect(diag, vsplat(1.0f), p0 + p1);
        vstore(t + c, ti);
        vstore(t + n + c, (r0 + r1) - vsplat(b[i]) * ti);
        vstore(u + c, ui);
        vstore(u + n + c, (q0 + q1) - vsplat(f[i]) * ui);
    }
    t[n + i + 1] = 1.0f;
    u[n + i + 1] = 1.0f;
}

/* Tinv = (I + A)^-1 for strictly lower A [n, n], two rows at a time. At n = 2 NR (64 at the
 * avx512 level, the bf16 kernels' chunk) by halves: both diagonal blocks' inverses by forward
 * substitution side by side, then the lower-left block T21 = -T22 (A21 T11) by register-tiled
 * products (a few more multiply-adds than forward substitution, without its chains). */
static void unit_lower_inverse(const float *A, float *Tinv, int64_t n)
{
    const int64_t h = NR;
    if (LANES != 16 || n != 2 * h || h % MR != 0) { /* measured at avx512 only */
        for (int64_t i = 0; i < n; i += 2)
            inverse_rows(A, Tinv, n, i);
        return;
    }
    _Alignas(64) float X[NR * NR];
    for (int64_t i = 0; i < h; i += 2) {
        inverse_rows_halves(A, Tinv, n, h, i);
        for (int64_t c = h; c < n; c += LANES) { /* the upper-right block */
            vstore(Tinv + i * n + c, (vf){0});
            vstore(Tinv + (i + 1) * n + c, (vf){0});
        }
    }
    for (int64_t r = 0; r < h; r += MR) /* X = -(A21 T11) */
        tile(h, A + (h + r) * n, n, Tinv, n, NULL, 0, NULL, 0, X + r * h, h);
    for (int64_t x = 0; x < h * h; x += LANES)
        vstore(X + x, -vload(X + x));
    for (int64_t r = 0; r < h; r += MR) /* T21 = T22 X, T22 lower: depth r + MR */
        tile(r + MR, Tinv + (h + r) * n + h, n, X, h, NULL, 0, NULL, 0, Tinv + (h + r) * n, n);
}

/* Whether e^(G_i - G_j) may be taken as e^G_i e^-G_j with neither factor out of f32's range:
 * the chunk's log-decays never rise (every g <= 0) and fall by less than 80 (e^80 < FLT_MAX and
 * e^-80 is a normal float; stronger decays take an exponential per element). */
static bool gates_factor(const float *G, int64_t Cp)
{
    if (G[0] > 0.0f || !(G[Cp - 1] >= -80.0f))
        return false;
    for (int64_t i = 1; i < Cp; i++)
        if (G[i] > G[i - 1])
            return false;
    return true;
}

/* The gated, masked matrices of one value head from its chunk's K K^T and Q K^T: A strictly
 * lower beta_i k_i.k_j e^(G_i - G_j) into in->A, P lower scale q_i.k_j e^(G_i - G_j). The gate
 * is eg[i] / eg[j] (eg = row_decays) where gates_factor allows (an exponential per row, not per
 * element), else e^(G_i - G_j) (Cp <= 128). */
static void gate_and_mask(const cpu_chunk_geom *g, const cpu_chunk_keys *keys,
                          const cpu_chunk_inputs *in, const float *eg, float *P)
{
    const int64_t Cp = g->Cp;
    _Alignas(64) float einv[128];
    const bool factor = gates_factor(in->G, Cp);
    for (int64_t j = 0; factor && j < Cp; j += LANES)
        vstore(einv + j, vsplat(1.0f) / vload(eg + j));
    for (int64_t i = 0; i < Cp; i++) {
        const vf Gi = vsplat(in->G[i]), bi = vsplat(in->beta[i]), sc = vsplat(g->scale);
        const float *kk = keys->KK + i * Cp, *qk = keys->QK + i * Cp;
        float *a = in->A + i * Cp, *pr = P + i * Cp;
        for (int64_t j = 0; j < Cp; j += LANES) {
            if (j > i) { /* right of the diagonal: no exponentials to take */
                vstore(a + j, (vf){0});
                vstore(pr + j, (vf){0});
                continue;
            }
            const vi col = viota((int32_t)j), row = (vi){0} + (int32_t)i;
            vf e;
            if (factor) {
                e = vsplat(eg[i]) * vload(einv + j);
            } else {
                vf d = Gi - vload(in->G + j);
                d = vselect(d > 0.0f, (vf){0}, d);
                e = vexp_nonpositive(d);
            }
            vstore(a + j, vselect(col < row, bi * vload(kk + j) * e, (vf){0}));
            vstore(pr + j, vselect(col <= row, sc * vload(qk + j) * e, (vf){0}));
        }
    }
}

/* The chunk's input and output rows, converted at this level's vector width. */
static void load_row(const gdn_tensor *t, int64_t off, int64_t n, float *dst)
{
    cpu_load_f32(t, off, n, dst);
}

#if defined(__x86_64__)
static void stream_word(float *dst, float x)
{
    int bits;
    memcpy(&bits, &x, sizeof bits);
    _mm_stream_si32((int *)dst, bits);
}

/* dst[0 .. n-1] = src[0 .. n-1] by streaming stores of 4 and 16 bytes, for the pieces of a row
 * that do not fill a 64-byte line. A plain store there would read the line and hold it against
 * the streaming stores of its other part (a neighbouring head's row, written just before or
 * after); streamed, both parts meet in one write-combining buffer and leave as a full line. */
static void stream_piece(float *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i < n && (uintptr_t)(dst + i) % 16; i++)
        stream_word(dst + i, src[i]);
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++)
        stream_word(dst + i, src[i]);
}
#endif

#if defined(__x86_64__)
/* Elements of `esize` bytes from p to the next 64-byte line (p a multiple of esize), at most n. */
static int64_t to_line(const void *p, size_t esize, int64_t n)
{
    const int64_t k = (int64_t)(((uintptr_t)-(uintptr_t)p % 64) / esize);
    return k < n ? k : n;
}
#endif

#if LANES == 16 && defined(__AVX512BW__)
/* 32 f32 as bf16, the bits gdn_bf16_bits gives (a loop the compiler keeps in registers). Where the
 * build has AVX512-BF16, VCVTNE2PS2BF16 gives the same bits in one instruction (round to nearest
 * even, NaNs quieted alike) except for denormals, which it reads as zero: only lines holding
 * one take the integer path. (The bf16-product kernels, the only ones built with AVX512-BF16,
 * end every output with a bf16 dot product, which flushes denormals, so the tests cannot reach
 * that path through the API; it stays so that store_row's bits never depend on the caller.) */
static __m512i bf16_line(const float *src)
{
#if defined(__AVX512BF16__)
    const __m512i x0 = _mm512_loadu_si512(src), x1 = _mm512_loadu_si512(src + 16);
    const __m512i exp = _mm512_set1_epi32(0x7f800000), man = _mm512_set1_epi32(0x007fffff);
    const __mmask16 d0 = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(x0, exp), x0, man);
    const __mmask16 d1 = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(x1, exp), x1, man);
    if (!(d0 | d1))
        return (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(x1), _mm512_castsi512_ps(x0));
#endif
    _Alignas(64) uint16_t line[32];
    for (int l = 0; l < 32; l++) {
        uint32_t u;
        memcpy(&u, src + l, sizeof u);
        line[l] = gdn_bf16_bits(u);
    }
    return _mm512_load_si512(line);
}

/* A bf16 row: its whole 64-byte lines streamed, the pieces before and after them (shared with
 * the neighbouring rows' lines) stored plainly. */
static void store_bf16_row(const gdn_tensor *t, int64_t off, int64_t n, const float *src)
{
    uint16_t *dst = (uint16_t *)t->data + off;
    int64_t i = to_line(dst, sizeof *dst, n);
    cpu_store_f32(t, off, i, src);
    for (; i + 32 <= n; i += 32)
        _mm512_stream_si512((void *)(dst + i), bf16_line(src + i));
    cpu_store_f32(t, off + i, n - i, src + i);
}
#endif

/* Output rows go out with streaming stores (the driver fences before its task ends): a
 * prefill's output is written once, far larger than the caches, and a plain store first reads
 * each line it writes. f32 rows at every x86 level, bf16 rows at avx512; a tensor not aligned to
 * its element (which the API allows) takes plain stores. */
static void store_row(const gdn_tensor *t, int64_t off, int64_t n, const float *src)
{
#if LANES == 16 && defined(__AVX512BW__)
    if (t->dtype == GDN_BF16 && (uintptr_t)t->data % sizeof(uint16_t) == 0) {
        store_bf16_row(t, off, n, src);
        return;
    }
#endif
#if defined(__x86_64__) && (LANES == 16 || LANES == 8 || LANES == 4)
    if (t->dtype == GDN_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        float *dst = (float *)t->data + off;
        const int64_t line = 64 / sizeof(float);
        int64_t i = to_line(dst, sizeof *dst, n);
        stream_piece(dst, src, i);
        for (; i + line <= n; i += line) {
#if LANES == 16
            _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif LANES == 8
            _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
            _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
#else
            for (int64_t l = 0; l < line; l += 4)
                _mm_stream_ps(dst + i + l, _mm_loadu_ps(src + i + l));
#endif
        }
        stream_piece(dst + i, src + i, n - i);
        return;
    }
#endif
    cpu_store_f32(t, off, n, src);
}

/* tail[m] = e^(G_last - G_m) for m < Cp <= 128 (chunk <= 128, and pad divides 128) */
static void decay_to_end(const float *G, int64_t Cp, float *tail)
{
    for (int64_t m = 0; m < Cp; m += LANES)
        vstore(tail + m, vexp_nonpositive(vsplat(G[Cp - 1]) - vload(G + m)));
}

/* e^G_i of the chunk's rows: one vector exponential where every G_i <= 0 (log-decays are), else
 * expf row by row. */
static void row_decays(const float *G, int64_t Cp, float *eg)
{
    float most = G[0];
    for (int64_t i = 1; i < Cp; i++)
        most = G[i] > most ? G[i] : most;
    if (most > 0.0f) {
        for (int64_t i = 0; i < Cp; i++)
            eg[i] = expf(G[i]);
        return;
    }
    for (int64_t i = 0; i < Cp; i += LANES)
        vstore(eg + i, vexp_nonpositive(vload(G + i)));
}

#if defined(__AVX512F__)
/* Y = X^T for one 16 x 16 block of 32-bit words (rows ldx and ldy words apart): pairs of words
 * interleaved, then pairs of pairs, leave each 128-bit lane holding a 4 x 4 block transposed;
 * two rounds of lane shuffles put the lanes in place. */
static void transpose_16x16(const uint32_t *X, int64_t ldx, uint32_t *Y, int64_t ldy)
{
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512(X + i * ldx);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* r[4 g + m], lane L: column 4 L + m of rows 4 g .. 4 g + 3 */
    for (int g = 0; g < 16; g += 4) {
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int m = 0; m < 4; m++) {
        const __m512i a_lo = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x44);
        const __m512i a_hi = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xee);
        const __m512i b_lo = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x44);
        const __m512i b_hi = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xee);
        _mm512_storeu_si512(Y + m * ldy, _mm512_shuffle_i32x4(a_lo, b_lo, 0x88));
        _mm512_storeu_si512(Y + (4 + m) * ldy, _mm512_shuffle_i32x4(a_lo, b_lo, 0xdd));
        _mm512_storeu_si512(Y + (8 + m) * ldy, _mm512_shuffle_i32x4(a_hi, b_hi, 0x88));
        _mm512_storeu_si512(Y + (12 + m) * ldy, _mm512_shuffle_i32x4(a_hi, b_hi, 0xdd));
    }
}

/* XT [cols, rows] = X^T for X [rows, cols] of 32-bit words, both multiples of 16. A pair of bf16
 * is one word, so this turns bf16 rows into VNNI words of their transpose and back. */
static void transpose_words(const uint32_t *X, int64_t rows, int64_t cols, uint32_t *XT)
{
    for (int64_t r = 0; r < rows; r += 16)
        for (int64_t c = 0; c < cols; c += 16)
            transpose_16x16(X + r * cols + c, cols, XT + c * rows + r, rows);
}
#endif

#ifdef CPU_CHUNK_KERNELS /* the f32 kernels (cpu_chunked_bf16_impl.h uses only the helpers above) */
/* The Cin factors of a gemm: one for every row, or one per row. */
typedef struct row_scale {
    const float *f;
    int64_t step; /* 0: f[0] for every row */
} row_scale;

static const float one = 1.0f;
static const row_scale unscaled = {&one, 0};

/* Cout[M, N] = diag(cs) Cin + A[M, depth] B[depth, N], M a multiple of MR, N of NR. `lower`: A
 * is lower triangular (zero right of its diagonal), so row block i0 stops at depth i0 + MR.
 * Column blocks outermost: one NR-wide panel of B stays in L1 while every row block uses it. */
static void gemm(int64_t M, int64_t N, int64_t depth, const float *A, int64_t lda, const float *B,
                 int64_t ldb, const float *Cin, int64_t ldi, row_scale cs, float *Cout,
                 int64_t ldo, bool lower, cpu_pump *pump)
{
    for (int64_t j0 = 0; j0 < N; j0 += NR)
        for (int64_t i0 = 0; i0 < M; i0 += MR) {
            const int64_t d = lower && i0 + MR < depth ? i0 + MR : depth;
            tile(d, A + i0 * lda, lda, B + j0, ldb, Cin ? Cin + i0 * ldi + j0 : NULL, ldi,
                 cs.f + i0 * cs.step, cs.step, Cout + i0 * ldo + j0, ldo);
            cpu_pump_step(pump);
        }
}

/* Strided loads, contiguous stores: a store that misses its line costs more than a load. At the
 * avx512 level 16 x 16 blocks go through registers (the scalar loop took ~3% of a prefill). */
static void transpose(const float *X, int64_t rows, int64_t cols, float *XT)
{
#if LANES == 16 && defined(__AVX512F__)
    if (rows % 16 == 0 && cols % 16 == 0) {
        transpose_words((const uint32_t *)X, rows, cols, (uint32_t *)XT);
        return;
    }
#endif
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++)
            XT[j * rows + i] = X[i * cols + j];
}

static void prep_keys(const cpu_chunk_geom *g, cpu_chunk_keys *keys, float *scratch)
{
    (void)scratch;
    const int64_t Cp = g->Cp, Kp = g->Kp;
    transpose(keys->K, Cp, Kp, keys->KT);
    cpu_pump *pump = keys->pump;
    gemm(Cp, Cp, Kp, keys->K, Kp, keys->KT, Cp, NULL, 0, unscaled, keys->KK, Cp, false, pump);
    gemm(Cp, Cp, Kp, keys->Q, Kp, keys->KT, Cp, NULL, 0, unscaled, keys->QK, Cp, false, pump);
}

/* The row factors of the chunk ride on its 32 x 32 matrices and on results, not on its 32 x 128
 * rows where they can: beta on Tb = Tinv diag(beta), the queries' scale e^G_i on O's rows in
 * the state pass (O = diag(scale e^G) (Q S) + P V'); only the keys' e^G_i make a row-scaled
 * copy, K' = -diag(e^G) K (the keys are shared with the key head's other value heads). The
 * values wait in rec->U. */
static void prep(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_inputs *in,
                 cpu_chunk_record *rec, float *scratch)
{
    (void)scratch;
    const int64_t Cp = g->Cp, Kp = g->Kp;
    _Alignas(64) float eg[128], tail[128];
    row_decays(in->G, Cp, eg);
    gate_and_mask(g, keys, in, eg, rec->P);
    unit_lower_inverse(in->A, in->Tinv, Cp);
    for (int64_t i = 0; i < Cp; i += LANES)
        vstore(rec->rows + i, vsplat(g->scale) * vload(eg + i));
    for (int64_t i = 0; i < Cp; i++) {
        for (int64_t m = 0; m < Cp; m += LANES)
            vstore(rec->T + i * Cp + m, vload(in->beta + m) * vload(in->Tinv + i * Cp + m));
        const vf f = vsplat(-eg[i]);
        for (int64_t x = 0; x < Kp; x += LANES)
            vstore(rec->W + i * Kp + x, f * vload(keys->K + i * Kp + x));
    }
    decay_to_end(in->G, Cp, tail);
    for (int64_t x = 0; x < Kp; x++)
        for (int64_t m = 0; m < Cp; m += LANES)
            vstore(rec->KT + x * Cp + m, vload(tail + m) * vload(keys->KT + x * Cp + m));
    *rec->decay = expf(in->G[Cp - 1]); /* padding rows hold the last token's G */
}

static void state(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_record *rec,
                  float *S, int64_t c0, int64_t nc, float *O, float *scratch)
{
    (void)scratch;
    const int64_t Cp = g->Cp, Kp = g->Kp, ld = g->ldv;
    const row_scale qs = {rec->rows, 1}, decay = {rec->decay, 0};
    float *U = rec->U + c0;
    S += c0;
    O += c0;
    cpu_pump *pump = rec->pump;
    /* R = V + K' S in O until O is made, then V' = Tb R in U (over the values) */
    gemm(Cp, nc, Kp, rec->W, Kp, S, ld, U, ld, unscaled, O, ld, false, pump);
    gemm(Cp, nc, Cp, rec->T, Cp, O, ld, NULL, 0, unscaled, U, ld, true, pump);
    gemm(Cp, nc, Kp, keys->Q, Kp, S, ld, NULL, 0, unscaled, O, ld, false, pump); /* O = Q S, */
    /* then O = diag(scale e^G) O + P V' */
    gemm(Cp, nc, Cp, rec->P, Cp, U, ld, O, ld, qs, O, ld, true, pump);
    gemm(Kp, nc, Cp, rec->KT, Cp, U, ld, S, ld, decay, S, ld, false, pump); /* S update */
}

/* chunk 32: no tile shape to fill, and 32 costs fewer multiply-adds per token than 64 (the C^2
 * terms halve while the state's 3 K V stay; docs/DESIGN.md has the measurement) */
const cpu_chunk_kernels CPU_CHUNK_KERNELS = {
    NR,   32,   false, true, load_row, store_row, NULL, prep_keys, prep, state,
    NULL, NULL, NULL};
#endif
