/* The f32 FMA peak kernel, compiled once per ISA level with that level's flags
 * (bench_fma_peak_<level>.c define FMA_NAME, FMA_LANES and FMA_CHAINS).
 *
 * FMA_CHAINS independent accumulators, each updated acc = acc * x + y back to back: a chain
 * issues one FMA per FMA latency, so a core's FMA ports stay full only with at least latency x
 * ports chains (4-5 cycles x 2 ports: 8-10). Built with -ffp-contract=fast, the update is one
 * FMA instruction where the level has FMA (avx2, avx512); at the scalar level (SSE on x86-64) it
 * is a multiply and an add, 2 flops all the same. x and y keep the values finite and normal for
 * the whole run: acc grows to about 1e8. */
#include "bench_peak.h"

#include <stddef.h>

#define FMA_CAT2(a, b) a##b
#define FMA_CAT(a, b) FMA_CAT2(a, b)

enum { FMA_ITERS = 20000000 };

typedef float fma_vec __attribute__((vector_size(FMA_LANES * sizeof(float))));

static void *fma_worker(void *sink)
{
    fma_vec acc[FMA_CHAINS];
    const fma_vec x = (fma_vec){0} + 1.0000001f, y = (fma_vec){0} + 0.9999999f;
    for (int j = 0; j < FMA_CHAINS; j++)
        acc[j] = (fma_vec){0} + (float)j;
    for (long it = 0; it < FMA_ITERS; it++) {
#pragma GCC unroll 32
        for (int j = 0; j < FMA_CHAINS; j++)
            acc[j] = acc[j] * x + y;
    }
    float s = 0.0f;
    for (int j = 0; j < FMA_CHAINS; j++)
        for (int l = 0; l < FMA_LANES; l++)
            s += acc[j][l];
    *(volatile float *)sink = s;
    return NULL;
}

/* This level's kernel for bench_peak.c: its shape, and its GFLOP/s on `threads` threads. */
const int FMA_CAT(FMA_NAME, _lanes) = FMA_LANES, FMA_CAT(FMA_NAME, _chains) = FMA_CHAINS;
double FMA_CAT(FMA_NAME, _gflops)(int threads)
{
    return peak_gflops(fma_worker, threads, 2.0 * FMA_LANES * FMA_CHAINS * (double)FMA_ITERS);
}
