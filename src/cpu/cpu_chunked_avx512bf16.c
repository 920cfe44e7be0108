/* The bf16 chunked kernels (cpu_chunked_bf16_impl.h) with their products as AVX512-BF16 dot
 * products: the avx512 level's kernels for bf16 q, k, v on CPUs that have them (no AMX, or the
 * level forced). Each VDPBF16PS multiplies 16 lanes of bf16 pairs and adds both products to f32
 * lanes: twice the multiply-adds of an f32 FMA, with the same operands and f32 accumulation as
 * the AMX tiles (both flush bf16 denormals). */
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include "cpu_chunked_bf16_impl.h"

static void products_begin(void) {}
static void products_end(void) {}

enum { BM = 8 }; /* rows of C per register block: 8 x 32 f32 in 16 accumulators */

/* Rows i0 .. i0 + BM - 1, columns j0 .. j0 + 31 of C: per VNNI row pair of B, two B vectors
 * against each row's A pair broadcast. */
static void dot_block(int64_t i0, int64_t j0, const bf16_term *terms, int nterms,
                      const float *Cin, int64_t ldi, float *C, int64_t ldc, int skip)
{
    __m512 acc[BM][2];
    for (int r = 0; r < BM; r++) {
        acc[r][0] = Cin ? _mm512_loadu_ps(Cin + (i0 + r) * ldi + j0) : _mm512_setzero_ps();
        acc[r][1] = Cin ? _mm512_loadu_ps(Cin + (i0 + r) * ldi + j0 + 16) : _mm512_setzero_ps();
    }
    const int64_t block_end = i0 - i0 % 32 + 32; /* A_LOWER: the AMX engine's 32-row blocks */
    for (int t = 0; t < nterms; t++) {
        const bf16_term *x = &terms[t];
        const int64_t depth = skip & A_LOWER && block_end < x->depth ? block_end : x->depth;
        for (int b = 0; b < x->nb; b++)
            for (int64_t p = 0; p < depth / 2; p++) {
                const uint32_t *B = x->B[b] + p * x->ldb + j0;
                const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B);
                const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + 16);
                for (int r = 0; r < BM; r++) {
                    uint32_t pair;
                    memcpy(&pair, x->A + (i0 + r) * x->lda + 2 * p, sizeof pair);
                    const __m512bh a = (__m512bh)_mm512_set1_epi32((int)pair);
                    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
                    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
                }
            }
    }
    for (int r = 0; r < BM; r++) {
        _mm512_storeu_ps(C + (i0 + r) * ldc + j0, acc[r][0]);
        _mm512_storeu_ps(C + (i0 + r) * ldc + j0 + 16, acc[r][1]);
    }
}

static void bf16_gemm(int64_t M, int64_t N, const bf16_term *terms, int nterms, const float *Cin,
                      int64_t ldi, float *C, int64_t ldc, int skip)
{
    for (int64_t i0 = 0; i0 < M; i0 += BM)
        for (int64_t j0 = 0; j0 < N && (!(skip & C_LOWER) || j0 <= i0 - i0 % 32); j0 += 32)
            dot_block(i0, j0, terms, nterms, Cin, ldi, C, ldc, skip);
}

const cpu_chunk_kernels *const cpu_chunk_avx512bf16 = &bf16_kernels;
#else
#include "cpu.h"
const cpu_chunk_kernels *const cpu_chunk_avx512bf16 = NULL;
#endif
