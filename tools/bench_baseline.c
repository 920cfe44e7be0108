/* Picks the baseline build the CPU can run: AVX-512 (as the baseline implementation would be
 * compiled for this machine) or the generic one. */
#include "bench_baseline.h"

#include "common.h"
#include "gdn.h"

void baseline_avx512_run(const baseline_problem *p, int threads);
void baseline_generic_run(const baseline_problem *p, int threads);
double baseline_avx512_fma_peak(int threads, double (*clock)(void));
double baseline_generic_fma_peak(int threads, double (*clock)(void));

static int avx512(void) { return (gdn_cpu_features() & GDN_CPU_AVX512F) != 0; }

void baseline_run(const baseline_problem *p, int threads)
{
    (avx512() ? baseline_avx512_run : baseline_generic_run)(p, threads);
}

/* The best of 5 runs: a peak is what the machine can do, and a shared machine only ever takes
 * some of it away. */
double baseline_fma_peak_gflops(int threads)
{
    double best = 0.0;
    for (int i = 0; i < 5; i++) {
        double g = (avx512() ? baseline_avx512_fma_peak : baseline_generic_fma_peak)(threads,
                                                                                   now_seconds);
        best = g > best ? g : best;
    }
    return best;
}
