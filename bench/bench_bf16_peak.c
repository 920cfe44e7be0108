/* The bf16 peaks for `gdn bench --backend cpu`, each thread running back-to-back products into
 * independent f32 accumulators: AMX, TDPBF16PS into four 16 x 16 tiles (2 x 16 x 16 x 32 flops
 * each); AVX512-BF16, VDPBF16PS into sixteen zmm registers (2 x 16 x 2 flops each: 2 ports x 5-6
 * cycles of latency need 10-12 chains). Built with the
 * instruction flags where the compiler has them; elsewhere a peak reads 0 (not measured). The
 * cpu context asks the OS for the tile state before the AMX peak runs (its amx level). */
#include "bench_peak.h"

#include <stdint.h>
#include <string.h>

#if (defined(__AMX_TILE__) && defined(__AMX_BF16__)) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)

enum { AMX_ITERS = 2000000 };

static void *amx_worker(void *arg)
{
    _Alignas(64) uint8_t cfg[64];
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1; /* palette 1: colsb[t] at 16 + 2t, rows[t] at 48 + t */
    for (int t = 0; t < 8; t++) {
        cfg[16 + 2 * t] = 64;
        cfg[48 + t] = 16;
    }
    /* Operands of mixed signs and mantissas: on zero tiles TDPBF16PS ran about 20% faster (11.7
     * against 14.7 TSC cycles per product on the H200 host's Xeon), which is no peak that real
     * data can reach. */
    _Alignas(64) uint16_t a[16 * 32];
    uint32_t x = 12345;
    for (int i = 0; i < 16 * 32; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (uint16_t)(0x3f00 | (x >> 16 & 0x807f)); /* +-[0.5, 1) */
    }
    _Alignas(64) float out[16 * 16];
    _tile_loadconfig(cfg);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, a, 64);
    _tile_loadd(7, a, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int i = 0; i < AMX_ITERS; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    *(volatile float *)arg = out[0];
    return NULL;
}

double bench_amx_peak_gflops(int threads)
{
    return peak_gflops(amx_worker, threads, 4.0 * 2 * 16 * 16 * 32 * (double)AMX_ITERS);
}
#else
double bench_amx_peak_gflops(int threads)
{
    (void)threads;
    return 0.0;
}
#endif

#if defined(__AVX512BF16__) && defined(__AVX512F__)
enum { DP_ITERS = 10000000, DP_ACCS = 16 };

static void *dpbf16_worker(void *arg)
{
    __m512 acc[DP_ACCS];
    for (int r = 0; r < DP_ACCS; r++)
        acc[r] = _mm512_setzero_ps();
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = a; /* pairs of 1.0 */
    for (int i = 0; i < DP_ITERS; i++)
#pragma GCC unroll 16
        for (int r = 0; r < DP_ACCS; r++)
            acc[r] = _mm512_dpbf16_ps(acc[r], a, b);
    float sum = 0.0f;
    for (int r = 0; r < DP_ACCS; r++)
        sum += _mm512_reduce_add_ps(acc[r]);
    *(volatile float *)arg = sum;
    return NULL;
}

double bench_dpbf16_peak_gflops(int threads)
{
    return peak_gflops(dpbf16_worker, threads, 2.0 * 16 * 2 * DP_ACCS * (double)DP_ITERS);
}
#else
double bench_dpbf16_peak_gflops(int threads)
{
    (void)threads;
    return 0.0;
}
#endif
