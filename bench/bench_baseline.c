/* Picks the baseline build the CPU can run: AVX-512 (as the baseline implementation would be
 * compiled for this machine) or the generic one. */
#include "bench_baseline.h"

#include "gdn.h"

#include <stdbool.h>

void baseline_avx512_run(const baseline_problem *p, int threads);
void baseline_generic_run(const baseline_problem *p, int threads);

void baseline_run(const baseline_problem *p, int threads)
{
    const bool avx512 = (gdn_cpu_features() & GDN_CPU_AVX512F) != 0;
    (avx512 ? baseline_avx512_run : baseline_generic_run)(p, threads);
}
