/* The chunked kernels built for the baseline level (SSE2 on x86-64): 4 x 8 tiles of 8 xmm
 * accumulators (see cpu_chunked_impl.h). */
#define CPU_CHUNK_KERNELS cpu_chunk_scalar
#define LANES 4
#define MR 4
#define NV 2
#include "cpu_chunked_impl.h"
