/* The baseline and FMA peak built for AVX-512 (see bench_baseline_impl.h). */
#define BASELINE_NAME baseline_avx512
#define PEAK_LANES 16
#include "bench_baseline_impl.h"
