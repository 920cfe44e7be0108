/* Helpers the cpu kernels share, below the backend and the chunked driver: the per-token gates
 * (cpu_recurrent_<isa>.c and cpu_chunked.c read them). Calls only src/core and src/ref's
 * inline formulas. */
#include "cpu.h"

#include "../ref/ref.h"

void cpu_token_gates(const gdn_delta_rule_problem *p, int64_t row, int64_t tok, int64_t hv,
                     double *g, double *beta)
{
    const gdn_delta_rule_args *a = &p->a;
    const int64_t go = row * a->g.stride[0] + tok * a->g.stride[1] + hv * a->g.stride[2];
    const int64_t bo = row * a->beta.stride[0] + tok * a->beta.stride[1] + hv * a->beta.stride[2];
    *g = a->g.data ? gdn_load(&a->g, go) : 0.0;
    *beta = gdn_load(&a->beta, bo);
    if (a->gate_in_kernel) { /* a few double ops a token and head */
        *g = ref_gate_g(&a->gating, hv, *g);
        *beta = ref_gate_beta(&a->gating, *beta);
    }
}
