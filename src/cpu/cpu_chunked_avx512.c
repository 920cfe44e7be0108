/* The chunked kernels built for the avx512 level: 8 x 32 tiles, 16 zmm accumulators of 32
 * registers, 2 panel loads and 8 broadcasts per 16 FMAs (see cpu_chunked_impl.h). */
#define CPU_CHUNK_KERNELS cpu_chunk_avx512
#define LANES 16
#define MR 8
#define NV 2
#include "cpu_chunked_impl.h"
