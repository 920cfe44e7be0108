/* The baseline built for the baseline ISA (see bench_baseline_impl.h). */
#define BASELINE_NAME baseline_generic
#include "bench_baseline_impl.h"
