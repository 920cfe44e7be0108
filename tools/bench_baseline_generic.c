/* The baseline and FMA peak built for the baseline ISA (see bench_baseline_impl.h). */
#define BASELINE_NAME baseline_generic
#define PEAK_LANES 4
#include "bench_baseline_impl.h"
