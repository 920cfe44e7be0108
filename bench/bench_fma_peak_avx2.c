/* The f32 FMA peak at the avx2 level: 8-lane FMAs, 12 chains (16 ymm registers, two for x and
 * y): 2 FMA ports x 5 cycles (Haswell; 4 on later cores and Zen) need 10. */
#define FMA_NAME fma_peak_avx2
#define FMA_LANES 8
#define FMA_CHAINS 12
#include "bench_fma_peak_impl.h"
