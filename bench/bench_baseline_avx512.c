/* The baseline built for AVX-512 (see bench_baseline_impl.h). */
#define BASELINE_NAME baseline_avx512
#include "bench_baseline_impl.h"
