/* The f32 FMA peak at the scalar level: the baseline ISA's 16-byte vectors (SSE2 on x86-64, a
 * multiply and an add), 12 chains (16 registers, two for x and y). */
#define FMA_NAME fma_peak_scalar
#define FMA_LANES 4
#define FMA_CHAINS 12
#include "bench_fma_peak_impl.h"
