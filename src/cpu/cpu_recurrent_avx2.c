/* The recurrent kernel built for the avx2 level (see cpu_recurrent_impl.h). */
#define CPU_RECURRENT_NAME cpu_recurrent_avx2
#define LANES 8   /* one ymm */
#define KV_VECS 4 /* 8 accumulators + 4 loads + 2 broadcasts of 16 registers */
#define FUSED_VECS 2 /* u, row and 2 accumulators a vector + 3 broadcasts */
#include "cpu_recurrent_impl.h"
