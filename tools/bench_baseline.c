/* Picks the baseline build the CPU can run: AVX-512 (as the baseline implementation would be
 * compiled for this machine) or the generic one. */
#include "bench_baseline.h"

#include "common.h"
#include "gdn.h"

#include <pthread.h>

void baseline_avx512_run(const baseline_problem *p, int threads);
void baseline_generic_run(const baseline_problem *p, int threads);
void *baseline_avx512_fma_worker(void *sink);
void *baseline_generic_fma_worker(void *sink);
extern const double baseline_avx512_fma_flops, baseline_generic_fma_flops;

static int avx512(void) { return (gdn_cpu_features() & GDN_CPU_AVX512F) != 0; }

void baseline_run(const baseline_problem *p, int threads)
{
    (avx512() ? baseline_avx512_run : baseline_generic_run)(p, threads);
}

/* The best of 5 runs: a peak is what the machine can do, and a shared machine only ever takes
 * some of it away. */
double peak_gflops(void *(*worker)(void *), int threads, double flops)
{
    pthread_t tid[64];
    volatile float sink[64];
    threads = threads > 64 ? 64 : threads < 1 ? 1 : threads;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_seconds();
        for (int i = 1; i < threads; i++)
            pthread_create(&tid[i], NULL, worker, (void *)&sink[i]);
        worker((void *)&sink[0]);
        for (int i = 1; i < threads; i++)
            pthread_join(tid[i], NULL);
        const double g = flops * threads / (now_seconds() - t0) * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}

double baseline_fma_peak_gflops(int threads)
{
    return avx512() ? peak_gflops(baseline_avx512_fma_worker, threads, baseline_avx512_fma_flops)
                    : peak_gflops(baseline_generic_fma_worker, threads, baseline_generic_fma_flops);
}
