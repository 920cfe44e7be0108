/* The AMX bf16 peak for `gdn bench --backend cpu`: each thread runs back-to-back TDPBF16PS into
 * four independent 16 x 16 f32 accumulators (2 x 16 x 16 x 32 flops each). Built with AMX flags
 * where the compiler has them; elsewhere the peak reads 0 (not measured). The cpu context asks the
 * OS for the tile state before this runs (its amx level). */
#include "bench_baseline.h"

#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>

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
    _Alignas(64) static const uint16_t a[16 * 32];
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
    pthread_t tid[64];
    volatile float sink[64];
    threads = threads > 64 ? 64 : threads;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) { /* best of 5, as for the FMA peak */
        double t0 = now_seconds();
        for (int i = 1; i < threads; i++)
            pthread_create(&tid[i], NULL, amx_worker, (void *)&sink[i]);
        amx_worker((void *)&sink[0]);
        for (int i = 1; i < threads; i++)
            pthread_join(tid[i], NULL);
        double g = 4.0 * 2 * 16 * 16 * 32 * (double)AMX_ITERS * threads / (now_seconds() - t0);
        best = g * 1e-9 > best ? g * 1e-9 : best;
    }
    return best;
}
#else
double bench_amx_peak_gflops(int threads)
{
    (void)threads;
    return 0.0;
}
#endif
