/* Fused gating (SPEC section 3). */
#include "ref.h"

gdn_status ref_gating(gdn_context *ctx, const gdn_gating_problem *p)
{
    (void)ctx;
    for (int64_t r = 0; r < p->rows; r++) {
        int64_t a_off = gdn_row_offset(&p->a, r), g_off = gdn_row_offset(&p->g_out, r);
        int64_t b_off = 0, beta_off = 0;
        if (p->b.data) {
            b_off = gdn_row_offset(&p->b, r);
            beta_off = gdn_row_offset(&p->beta_out, r);
        }
        for (int64_t h = 0; h < p->HV; h++) {
            /* read both inputs before writing either output: outputs may alias inputs */
            double a = gdn_load(&p->a, a_off + h);
            double b = p->b.data ? gdn_load(&p->b, b_off + h) : 0.0;
            gdn_store(&p->g_out, g_off + h, ref_gate_g(&p->p, h, a));
            if (p->b.data)
                gdn_store(&p->beta_out, beta_off + h, ref_gate_beta(&p->p, b));
        }
    }
    return GDN_OK;
}
