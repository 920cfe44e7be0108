/* The f32 FMA peak at the avx512 level: 16-lane FMAs, 16 chains (32 zmm registers): 2 FMA ports
 * x 4 cycles (Skylake-SP to Granite Rapids) need 8; Zen 4 and 5 need fewer. */
#define FMA_NAME fma_peak_avx512
#define FMA_LANES 16
#define FMA_CHAINS 16
#include "bench_fma_peak_impl.h"
