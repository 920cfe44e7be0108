/* The recurrent kernel built for the avx512 level (see cpu_recurrent_impl.h). */
#define CPU_RECURRENT_NAME cpu_recurrent_avx512
#define LANES 16  /* one zmm */
#define KV_VECS 4 /* 8 accumulators + 4 loads + 2 broadcasts of 32 registers */
#define FUSED_VECS 4 /* u, row and 2 accumulators a vector + 3 broadcasts */
#include "cpu_recurrent_impl.h"
