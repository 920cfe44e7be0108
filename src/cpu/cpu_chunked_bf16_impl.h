/* The chunked WY form for bf16 inputs with bf16 products: bf16 operands, f32 accumulation, f32
 * state (cpu_chunked.c runs it for bf16 q, k, v where the level has bf16 products). Written
 * once; the product engine comes from the including file: cpu_chunked_amx.c (AMX tiles, the amx
 * level) or cpu_chunked_avx512bf16.c (AVX512-BF16 dot products, the avx512 level on CPUs that
 * have them). Each defines, after including this file, products_begin() and products_end()
 * around a kernel's products and bf16_gemm() (the contract below), and exports a pointer to the
 * bf16_kernels table defined here.
 * The f32 steps between the products (gates and masks, the triangular inverse, the decay
 * factors) are the avx512 kernels' own code, included from cpu_chunked_impl.h; row scalings
 * ride on the bf16 packing.
 *
 * Precision. GDN_PRECISION_FAST (g->fast) takes the hi part of every operand below and drops
 * the lo parts and terms: each operand rounded once to bf16, as the CUDA fast mode. High, for
 * f32 outputs and states within 5e-5, with long memory in mind (the new value v and the state's
 * prediction e^G k S nearly cancel): the state pass forms the residual R = beta (v - e^G k S)
 * in f32 from the exact bf16 k, v and S as hi + lo bf16 parts, and only then rounds it; the
 * inverse (I + A)^-1 and R itself enter V' = (I + A)^-1 R as hi + lo parts, and so does the
 * scaled V' of the state update: the state then stays close to f32 accuracy. q and k enter
 * every product as the exact bf16 inputs, their inverse L2 norms applied to the f32 results (a
 * normalised row rounded again would cost q.k and k.k up to 2^-9 |q||k|). Q S also takes S as
 * hi + lo, and the output's P V' takes both P and V' as hi + lo: in a chunk's first rows that
 * product has one or two terms, whose roundings no sum averages out (rounded once, a one-token
 * chunk's output missed the bar about once in 200 random cases). Every product accumulates in
 * f32 and the state stays f32.
 *
 * B operands are "VNNI" packed: word (p, j) holds rows 2p and 2p + 1 of column j as two bf16,
 * the layout of both AMX's and AVX512-BF16's dot products. */
#define LANES 16
#define MR 8
#define NV 2
#include "cpu_chunked_impl.h"

#include <immintrin.h>
#include <string.h>

/* One product term: A [M, depth] bf16 row-major (lda elements) times B[0] (+ B[1] when nb is 2:
 * an operand's hi and lo parts), each VNNI [depth / 2, N] words (ldb words); depth a multiple of
 * 32. The AMX engine loads each A tile once for both B's. */
typedef struct bf16_term {
    const uint16_t *A;
    int64_t lda;
    const uint32_t *B[2];
    int nb;
    int64_t ldb, depth;
} bf16_term;

/* What bf16_gemm may skip: A_LOWER, the terms' A are lower triangular (rows i0 .. i0 + 31 of a
 * 32-row block stop at depth i0 + 32); C_LOWER, only C's 32 x 32 blocks on or below its
 * diagonal are wanted. */
enum { A_LOWER = 1, C_LOWER = 2 };

/* The engine (the including file). bf16_gemm: C [M, N] f32 (ldc) = Cin (or 0 when NULL; may be
 * C) + sum of the terms' A B; M, N multiples of 32. */
static void products_begin(void);
static void products_end(void);
static void bf16_gemm(int64_t M, int64_t N, const bf16_term *terms, int nterms, const float *Cin,
                      int64_t ldi, float *C, int64_t ldc, int skip);

/* 16 bf16 (round to nearest even) of 16 f32, widened to 32-bit lanes in the low half. */
static inline __m512i bf16_lanes(__m512 x)
{
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
}

static inline __m512 bf16_value(__m512i lanes) /* back to f32 */
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(lanes, 16));
}

/* x as hi and lo bf16 lanes, x = hi + lo to ~2^-16. */
static inline void bf16_split(__m512 x, __m512i *hi, __m512i *lo)
{
    *hi = bf16_lanes(x);
    *lo = bf16_lanes(_mm512_sub_ps(x, bf16_value(*hi)));
}

/* hi and lo bf16 parts (X = hi + lo to ~2^-16) of X [rows, cols] f32, row-major. */
static void to_bf16_split(const float *X, int64_t ldx, int64_t rows, int64_t cols, uint16_t *hi,
                          uint16_t *lo, int64_t ldy)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j += 16) {
            __m512i h, l;
            bf16_split(_mm512_loadu_ps(X + i * ldx + j), &h, &l);
            _mm256_storeu_si256((__m256i *)(hi + i * ldy + j), _mm512_cvtepi32_epi16(h));
            _mm256_storeu_si256((__m256i *)(lo + i * ldy + j), _mm512_cvtepi32_epi16(l));
        }
}

/* 16 VNNI words of two rows: word j = bf16 x0[j] | bf16 x1[j] << 16 (rounded to nearest even).
 * VCVTNE2PS2BF16 rounds all 32 at once, x0's in the low half; one word shuffle interleaves them. */
static inline __m512i vnni_words(__m512 x0, __m512 x1)
{
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                           24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                           16, 0);
    return _mm512_permutexvar_epi16(pairs, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
}

/* Rows x0 and x1 of a VNNI pair as hi and lo bf16 parts (x = hi + lo to ~2^-16), 16 words each:
 * lo rounds x - hi, which f32 holds exactly (hi back in f32 is the word's half moved up). */
static inline void vnni_split_pair(__m512 x0, __m512 x1, uint32_t *hi, uint32_t *lo)
{
    const __m512i h = vnni_words(x0, x1);
    const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    const __m512 h1 = _mm512_castsi512_ps(_mm512_and_si512(h, _mm512_set1_epi32(-65536)));
    _mm512_storeu_si512(hi, h);
    _mm512_storeu_si512(lo, vnni_words(_mm512_sub_ps(x0, h0), _mm512_sub_ps(x1, h1)));
}

/* S [depth, cols] (ld) as hi + lo VNNI words (ldv): the state's operand for K S and Q S. */
static void state_words(const float *S, int64_t ld, int64_t depth, int64_t cols, uint32_t *hi,
                        uint32_t *lo, int64_t ldv)
{
    for (int64_t p = 0; p < depth / 2; p++)
        for (int64_t j = 0; j < cols; j += 16) {
            const float *s0 = S + 2 * p * ld + j;
            vnni_split_pair(_mm512_loadu_ps(s0), _mm512_loadu_ps(s0 + ld), hi + p * ldv + j,
                            lo + p * ldv + j);
        }
}

/* S [rows, cols] (ld) *= x */
static void scale_block(float *S, int64_t ld, int64_t rows, int64_t cols, float x)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j += 16)
            _mm512_storeu_ps(S + i * ld + j, _mm512_mul_ps(_mm512_set1_ps(x),
                                                           _mm512_loadu_ps(S + i * ld + j)));
}

/* Each row of X [rows, cols] f32 (cols <= 128, a multiple of 16) becomes, in the same bytes, its
 * hi bf16 parts followed by its lo parts (a bf16 matrix of 2 cols elements a row: hi at X16, lo
 * at X16 + cols). */
static void rows_to_bf16_split(float *X, int64_t rows, int64_t cols)
{
    _Alignas(64) float row[128];
    for (int64_t i = 0; i < rows; i++) {
        memcpy(row, X + i * cols, sizeof(float) * (size_t)cols);
        uint16_t *hi = (uint16_t *)(X + i * cols);
        to_bf16_split(row, cols, 1, cols, hi, hi + cols, cols);
    }
}

/* VNNI words of X [rows, cols] bf16 row-major: word (p, j) = X[2p][j] | X[2p+1][j] << 16; rows
 * even, cols a multiple of 16. */
static void rows_to_vnni(const uint16_t *X, int64_t rows, int64_t cols, uint32_t *vw)
{
    for (int64_t p = 0; p < rows / 2; p++)
        for (int64_t j = 0; j < cols; j += 16) {
            const uint16_t *x0 = X + 2 * p * cols + j, *x1 = x0 + cols;
            const __m512i r0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x0));
            const __m512i r1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x1));
            _mm512_storeu_si512(vw + p * cols + j, _mm512_or_si512(r0, _mm512_slli_epi32(r1, 16)));
        }
}

/* Words per row of the state pass's VNNI operands, for nc columns: one 64-byte line more than
 * they hold. At nc words (a power of two times 64 bytes) a 32-column panel of the state's hi and
 * lo words (K S, Q S: 64 rows of 128 bytes each) falls into 16 of L1's 64 sets, more lines than
 * their ways, and every 32 x 32 block of the product read it again from L2. */
static int64_t vnni_stride(int64_t nc) { return nc + 16; }

/* What a head's state keeps beside S [Kp, Vp] (rows ldv apart; at S + Kp ldv, 64-byte aligned:
 * Kp, ldv are multiples of 16): sig [Vp], column j of the state being sig_j S[:, j] (the chunks'
 * decays applied lazily, so that no pass rewrites S for them), and S's hi and lo VNNI words
 * [Kp / 2, vnni_stride(Vp)] each, written as the state update leaves each panel of S in L1 (so
 * that no pass reads S again for them). */
typedef struct head_extra {
    float *sig;
    uint32_t *hi, *lo;
    int64_t ldv;
} head_extra;

static size_t bf16_state_extra_floats(const cpu_chunk_geom *g)
{
    return (size_t)(g->Vp + g->Kp * vnni_stride(g->Vp));
}

static head_extra extra_of(const cpu_chunk_geom *g, float *S)
{
    head_extra e;
    e.sig = S + g->Kp * g->ldv;
    e.ldv = vnni_stride(g->Vp);
    e.hi = (uint32_t *)(e.sig + g->Vp);
    e.lo = e.hi + g->Kp / 2 * e.ldv;
    return e;
}

/* Before the first chunk: no scale yet, and the words of the state as loaded. */
static void bf16_state_begin(const cpu_chunk_geom *g, float *S)
{
    const head_extra e = extra_of(g, S);
    for (int64_t j = 0; j < g->Vp; j++)
        e.sig[j] = 1.0f;
    state_words(S, g->ldv, g->Kp, g->Vp, e.hi, e.lo, e.ldv);
}

/* After the last: S becomes the state itself, sig_j S[:, j]. */
static void bf16_state_end(const cpu_chunk_geom *g, float *S)
{
    const head_extra e = extra_of(g, S);
    for (int64_t i = 0; i < g->Kp; i++)
        for (int64_t j = 0; j < g->Vp; j += 16)
            _mm512_storeu_ps(S + i * g->ldv + j,
                             _mm512_mul_ps(_mm512_loadu_ps(e.sig + j),
                                           _mm512_loadu_ps(S + i * g->ldv + j)));
}

static size_t bf16_scratch_floats(const cpu_chunk_geom *g)
{
    const size_t Cp = (size_t)g->Cp, Kp = (size_t)g->Kp, ldv = (size_t)vnni_stride(g->Vp);
    /* keys: K^T words for K K^T, K words for K^T; state: four V'-sized areas of words */
    const size_t keys = Kp * Cp / 2 + Cp * Kp / 2;
    const size_t state = 4 * Cp / 2 * ldv;
    return keys > state ? keys : state;
}

/* X [n, n] *= x_i y_j on and below the diagonal's 32 x 32 blocks (the blocks bf16_gemm wrote
 * with C_LOWER), for the inverse norms of raw q, k */
static void scale_outer_lower(float *X, int64_t n, const float *x, const float *y)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t end = (i / 32 + 1) * 32;
        for (int64_t j = 0; j < end; j += 16) {
            const __m512 v = _mm512_loadu_ps(X + i * n + j);
            const __m512 f = _mm512_mul_ps(_mm512_set1_ps(x[i]), _mm512_loadu_ps(y + j));
            _mm512_storeu_ps(X + i * n + j, _mm512_mul_ps(v, f));
        }
    }
}

/* inv[i] = 1 / sqrt(||x_i||^2 + eps) for the bf16 rows of X [rows, cols] (cols a multiple of
 * 16), or 1 when the call does not normalise. */
static void inverse_norms(const uint16_t *X, int64_t rows, int64_t cols, bool l2, float *inv)
{
    for (int64_t i = 0; i < rows; i++) {
        __m512 ss = _mm512_setzero_ps();
        for (int64_t j = 0; l2 && j < cols; j += 16) {
            const __m512 x = bf16_value(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(X + i * cols + j))));
            ss = _mm512_fmadd_ps(x, x, ss);
        }
        inv[i] = l2 ? (float)(1.0 / sqrt((double)_mm512_reduce_add_ps(ss) + GDN_L2NORM_EPS)) : 1.0f;
    }
}

/* keys->Q and keys->K arrive as the bf16 inputs (bf16_qk): K K^T and Q K^T from them, scaled by
 * the inverse norms in f32, and K^T as bf16 rows [Kp, Cp] (the VNNI words of K, transposed). */
static void bf16_prep_keys(const cpu_chunk_geom *g, cpu_chunk_keys *keys, float *scratch)
{
    const int64_t Cp = g->Cp, Kp = g->Kp;
    const uint16_t *K16 = (const uint16_t *)keys->K, *Q16 = (const uint16_t *)keys->Q;
    uint32_t *KTw = (uint32_t *)scratch, *Kw = KTw + Kp / 2 * Cp;
    inverse_norms(Q16, Cp, Kp, g->l2norm, keys->iq);
    inverse_norms(K16, Cp, Kp, g->l2norm, keys->ik);
    products_begin();
    transpose_words((const uint32_t *)K16, Cp, Kp / 2, KTw);
    const bf16_term kk = {K16, Kp, {KTw, NULL}, 1, Cp, Kp}, qk = {Q16, Kp, {KTw, NULL}, 1, Cp, Kp};
    bf16_gemm(Cp, Cp, &kk, 1, NULL, 0, keys->KK, Cp, C_LOWER);
    bf16_gemm(Cp, Cp, &qk, 1, NULL, 0, keys->QK, Cp, C_LOWER);
    products_end();
    if (g->l2norm) { /* else every factor is 1 */
        scale_outer_lower(keys->KK, Cp, keys->ik, keys->ik);
        scale_outer_lower(keys->QK, Cp, keys->iq, keys->ik);
    }
    rows_to_vnni(K16, Cp, Kp, Kw);
    transpose_words(Kw, Cp / 2, Kp, (uint32_t *)keys->KT);
}

/* Record areas (cpu.h): U holds the values as loaded, P the gated masked q.k as bf16 rows of hi
 * then lo parts (rows_to_bf16_split), T = (I + A)^-1 as hi then lo bf16, and rows four per-row
 * factors: -beta_i e^G_i / ||k_i|| (the residual's), scale e^G_i / ||q_i|| (the output's),
 * e^(G_last - G_m) / ||k_m|| (the state update's) and beta_i (the values'). Every operand that
 * is rounded to bf16 is either an exact input or a quantity that no later step subtracts from a
 * larger one. */
static void bf16_prep(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_inputs *in,
                      cpu_chunk_record *rec, float *scratch)
{
    (void)scratch;
    const int64_t Cp = g->Cp;
    uint16_t *Th = (uint16_t *)rec->T, *Tl = Th + Cp * Cp;
    _Alignas(64) float eg[128];
    row_decays(in->G, Cp, eg);
    gate_and_mask(g, keys, in, eg, rec->P);
    unit_lower_inverse(in->A, in->Tinv, Cp);
    to_bf16_split(in->Tinv, Cp, Cp, Cp, Th, Tl, Cp);
    rows_to_bf16_split(rec->P, Cp, Cp);
    float *res = rec->rows, *out = res + Cp, *upd = out + Cp, *beta = upd + Cp;
    decay_to_end(in->G, Cp, upd);
    for (int64_t i = 0; i < Cp; i += LANES) {
        const vf e = vload(eg + i), ik = vload(keys->ik + i), b = vload(in->beta + i);
        vstore(res + i, -b * e * ik);
        vstore(out + i, vsplat(g->scale) * e * vload(keys->iq + i));
        vstore(upd + i, vload(upd + i) * ik);
        vstore(beta + i, b);
    }
    *rec->decay = expf(in->G[Cp - 1]);
}

/* R = diag(b) V + diag(f) (x X) (both [rows, cols] f32, ld) as hi + lo VNNI words: the residual
 * beta (v - e^G k S / ||k||) is formed in f32 before anything is rounded (x: the state's lazy
 * scale, applied first so that the row factors meet a product of the state's own size). */
static void residual_to_vnni(const float *V, const float *X, int64_t ld, int64_t rows,
                             int64_t cols, const float *b, const float *f, float x, uint32_t *hi,
                             uint32_t *lo, int64_t ldv)
{
    const __m512 xs = _mm512_set1_ps(x);
    for (int64_t p = 0; p < rows / 2; p++) {
        const __m512 f0 = _mm512_set1_ps(f[2 * p]), f1 = _mm512_set1_ps(f[2 * p + 1]);
        const __m512 b0 = _mm512_set1_ps(b[2 * p]), b1 = _mm512_set1_ps(b[2 * p + 1]);
        const int64_t r0 = 2 * p * ld, r1 = r0 + ld;
        for (int64_t j = 0; j < cols; j += 16) {
            const __m512 x0 = _mm512_mul_ps(xs, _mm512_loadu_ps(X + r0 + j));
            const __m512 x1 = _mm512_mul_ps(xs, _mm512_loadu_ps(X + r1 + j));
            vnni_split_pair(_mm512_fmadd_ps(f0, x0, _mm512_mul_ps(b0, _mm512_loadu_ps(V + r0 + j))),
                            _mm512_fmadd_ps(f1, x1, _mm512_mul_ps(b1, _mm512_loadu_ps(V + r1 + j))),
                            hi + p * ldv + j, lo + p * ldv + j);
        }
    }
}

/* One sweep over V' (Vd [rows, cols], ld): its VNNI words as hi + lo parts (vh, vl: for P V'),
 * those of u diag(upd) V' too (hi, lo: for the update; u undoes the state's lazy scale), and
 * O's rows O = diag(out) (x O) (x: the state's lazy scale, as in residual_to_vnni) before P V'
 * adds to it. */
static void finish_values(const float *Vd, float *O, int64_t ld, int64_t rows, int64_t cols,
                          const float *out, float x, const float *upd, float u, uint32_t *vh,
                          uint32_t *vl, uint32_t *hi, uint32_t *lo, int64_t ldv)
{
    const __m512 xs = _mm512_set1_ps(x), us = _mm512_set1_ps(u);
    for (int64_t p = 0; p < rows / 2; p++) {
        const __m512 u0 = _mm512_set1_ps(upd[2 * p]), u1 = _mm512_set1_ps(upd[2 * p + 1]);
        const __m512 o0 = _mm512_set1_ps(out[2 * p]), o1 = _mm512_set1_ps(out[2 * p + 1]);
        const float *x0 = Vd + 2 * p * ld, *x1 = x0 + ld;
        float *y0 = O + 2 * p * ld, *y1 = y0 + ld;
        for (int64_t j = 0; j < cols; j += 16) {
            const __m512 v0 = _mm512_loadu_ps(x0 + j), v1 = _mm512_loadu_ps(x1 + j);
            vnni_split_pair(v0, v1, vh + p * ldv + j, vl + p * ldv + j);
            vnni_split_pair(_mm512_mul_ps(us, _mm512_mul_ps(u0, v0)),
                            _mm512_mul_ps(us, _mm512_mul_ps(u1, v1)), hi + p * ldv + j,
                            lo + p * ldv + j);
            _mm512_storeu_ps(y0 + j, _mm512_mul_ps(o0, _mm512_mul_ps(xs, _mm512_loadu_ps(y0 + j))));
            _mm512_storeu_ps(y1 + j, _mm512_mul_ps(o1, _mm512_mul_ps(xs, _mm512_loadu_ps(y1 + j))));
        }
    }
}

/* The lazy scale stays within [2^-60, 2^60]: the update's operand is then at most 2^60 times its
 * own size, far inside f32's range. A chunk that would take it past that rescales S in place
 * instead (S times sig times the chunk's decay, and sig back to 1): every few chunks at steady
 * decays, and at once for a chunk whose own decay is 0 or below 2^-60. */
static bool lazy_scale_ok(float x) { return x >= 0x1p-60f && x <= 0x1p60f; }

/* V' = T R with R = diag(beta) V + diag(res) K S, O = diag(out) Q S + P V',
 * S = decay S + K^T diag(upd) V' (the factors of bf16_prep). Every operand but the exact q and
 * k enters as hi + lo parts: R and diag(upd) V' carry the state from chunk to chunk, which with
 * them keeps close to f32 accuracy, and P and V' give the outputs the same. The state stands
 * for sig S (head_extra): the decay makes the new scale next = sig decay, and the update adds
 * K^T diag(upd) V' / next to S (or, when next would leave [2^-60, 2^60], S becomes
 * next S + K^T diag(upd) V' and the scale 1); its hi + lo words are made panel by panel as the
 * update leaves S. */
static void bf16_state(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_record *rec,
                       float *S, int64_t c0, int64_t nc, float *O, float *scratch)
{
    const int64_t Cp = g->Cp, Kp = g->Kp, ldf = g->ldv; /* rows of the f32 S, U and O */
    const int64_t ldv = vnni_stride(nc);                 /* rows of the VNNI words */
    const head_extra e = extra_of(g, S);
    const float sig = e.sig[c0], next = sig * *rec->decay;
    const bool lazy = lazy_scale_ok(next);
    const uint32_t *Sh = e.hi + c0, *Sl = e.lo + c0;
    uint32_t *Xh = (uint32_t *)scratch, *Xl = Xh + Cp / 2 * ldv; /* R, then diag(upd) V' */
    uint32_t *Vh = Xl + Cp / 2 * ldv, *Vl = Vh + Cp / 2 * ldv;   /* V' */
    const uint16_t *K16 = (const uint16_t *)keys->K, *Q16 = (const uint16_t *)keys->Q;
    const uint16_t *Ph = (const uint16_t *)rec->P, *KT16 = (const uint16_t *)keys->KT;
    const uint16_t *Th = (const uint16_t *)rec->T, *Tl = Th + Cp * Cp;
    const float *res = rec->rows, *out = res + Cp, *upd = out + Cp, *beta = upd + Cp;
    float *U = rec->U + c0; /* the values, then V' */
    S += c0;
    O += c0;
    products_begin();
    /* fast: each operand's hi part alone (nb, nt: the second B part and the second term) */
    const int nb = g->fast ? 1 : 2, nt = g->fast ? 1 : 2;
    const bf16_term ks = {K16, Kp, {Sh, Sl}, nb, e.ldv, Kp};
    bf16_gemm(Cp, nc, &ks, 1, NULL, 0, O, ldf, 0); /* K S, in O until O is made */
    residual_to_vnni(U, O, ldf, Cp, nc, beta, res, sig, Xh, Xl, ldv);
    const bf16_term tr[2] = {{Th, Cp, {Xh, Xl}, nb, ldv, Cp}, {Tl, Cp, {Xh, NULL}, 1, ldv, Cp}};
    bf16_gemm(Cp, nc, tr, nt, NULL, 0, U, ldf, A_LOWER); /* V' = T R */
    const bf16_term qs = {Q16, Kp, {Sh, Sl}, nb, e.ldv, Kp};
    bf16_gemm(Cp, nc, &qs, 1, NULL, 0, O, ldf, 0);
    finish_values(U, O, ldf, Cp, nc, out, sig, upd, lazy ? 1.0f / next : 1.0f, Vh, Vl, Xh, Xl,
                  ldv);
    const bf16_term pv[2] = {{Ph, 2 * Cp, {Vh, Vl}, nb, ldv, Cp},
                             {Ph + Cp, 2 * Cp, {Vh, NULL}, 1, ldv, Cp}};
    bf16_gemm(Cp, nc, pv, nt, O, ldf, O, ldf, A_LOWER); /* O = diag(out) Q S + P V' */
    for (int64_t j = 0; j < nc; j += 32) { /* the update (above), then the panel's words */
        const bf16_term kv = {KT16, Cp, {Xh + j, Xl + j}, nb, ldv, Cp};
        if (!lazy) /* the panel then waits in L1 for the update */
            scale_block(S + j, ldf, Kp, 32, next);
        bf16_gemm(Kp, 32, &kv, 1, S + j, ldf, S + j, ldf, 0);
        state_words(S + j, ldf, Kp, 32, e.hi + c0 + j, e.lo + c0 + j, e.ldv);
    }
    products_end();
    for (int64_t j = c0; j < c0 + nc; j++)
        e.sig[j] = lazy ? next : 1.0f;
}

/* chunk 64: the products are cheap next to the per-chunk f32 work on the state (on AMX) */
static const cpu_chunk_kernels bf16_kernels = {
    32, 64, true, false, load_row, store_row, bf16_scratch_floats, bf16_prep_keys,
    bf16_prep, bf16_state, bf16_state_extra_floats, bf16_state_begin, bf16_state_end};
