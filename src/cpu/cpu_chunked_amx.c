/* The bf16 chunked kernels (cpu_chunked_bf16_impl.h) with their products on AMX tiles: the amx
 * level's kernels for bf16 q, k, v.
 *
 * One tile configuration for every product, 8 tiles of 16 rows x 64 bytes: a 32 x 32 block of
 * f32 results in tiles 0-3, two A tiles (16 rows x 32 bf16) in 4-5, two B tiles in 6-7. */
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include "cpu_chunked_bf16_impl.h"

typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

static void products_begin(void)
{
    _Alignas(64) amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

static void products_end(void) { _tile_release(); }

static void bf16_gemm(int64_t M, int64_t N, const bf16_term *terms, int nterms, const float *Cin,
                      int64_t ldi, float *C, int64_t ldc, int skip)
{
    /* column blocks outermost: a 32-column panel of each B stays in L1 for every row block */
    for (int64_t j0 = 0; j0 < N; j0 += 32)
        for (int64_t i0 = skip & C_LOWER ? j0 : 0; i0 < M; i0 += 32) {
            if (Cin) {
                _tile_loadd(0, Cin + i0 * ldi + j0, ldi * 4);
                _tile_loadd(1, Cin + i0 * ldi + j0 + 16, ldi * 4);
                _tile_loadd(2, Cin + (i0 + 16) * ldi + j0, ldi * 4);
                _tile_loadd(3, Cin + (i0 + 16) * ldi + j0 + 16, ldi * 4);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int t = 0; t < nterms; t++) {
                const bf16_term *x = &terms[t];
                const int64_t depth =
                    skip & A_LOWER && i0 + 32 < x->depth ? i0 + 32 : x->depth;
                for (int64_t d = 0; d < depth; d += 32) {
                    _tile_loadd(4, x->A + i0 * x->lda + d, x->lda * 2);
                    _tile_loadd(5, x->A + (i0 + 16) * x->lda + d, x->lda * 2);
                    for (int b = 0; b < x->nb; b++) {
                        _tile_loadd(6, x->B[b] + d / 2 * x->ldb + j0, x->ldb * 4);
                        _tile_loadd(7, x->B[b] + d / 2 * x->ldb + j0 + 16, x->ldb * 4);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
            }
            _tile_stored(0, C + i0 * ldc + j0, ldc * 4);
            _tile_stored(1, C + i0 * ldc + j0 + 16, ldc * 4);
            _tile_stored(2, C + (i0 + 16) * ldc + j0, ldc * 4);
            _tile_stored(3, C + (i0 + 16) * ldc + j0 + 16, ldc * 4);
        }
}

const cpu_chunk_kernels *const cpu_chunk_amx = &bf16_kernels;
#else
#include "cpu.h"
const cpu_chunk_kernels *const cpu_chunk_amx = NULL;
#endif
