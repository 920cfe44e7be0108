/* The chunked kernels built for the avx2 level: 4 x 16 tiles, 8 ymm accumulators of 16
 * registers (see cpu_chunked_impl.h). */
#define CPU_CHUNK_KERNELS cpu_chunk_avx2
#define LANES 8
#define MR 4
#define NV 2
#include "cpu_chunked_impl.h"
