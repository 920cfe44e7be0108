/* q/k L2 norm and the gated RMSNorm of the output (SPEC section 5). */
#include "ref.h"

gdn_status ref_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p)
{
    (void)ctx;
    for (int64_t r = 0; r < p->rows; r++) {
        int64_t xo = gdn_row_offset(&p->x, r), oo = gdn_row_offset(&p->out, r);
        double ss = 0.0;
        for (int64_t d = 0; d < p->D; d++) {
            double x = gdn_load(&p->x, xo + d);
            ss += x * x;
        }
        double inv = 1.0 / sqrt(ss + p->eps);
        for (int64_t d = 0; d < p->D; d++)
            gdn_store(&p->out, oo + d, gdn_load(&p->x, xo + d) * inv);
    }
    return GDN_OK;
}

gdn_status ref_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p)
{
    (void)ctx;
    const gdn_rmsnorm_args *a = &p->a;
    bool gated = a->z.data != NULL;
    for (int64_t r = 0; r < p->rows; r++) {
        int64_t xo = gdn_row_offset(&a->x, r), oo = gdn_row_offset(&a->out, r);
        int64_t zo = gated ? gdn_row_offset(&a->z, r) : 0;
        /* the value that is normalised: x, or x * silu(z) when the gate comes first */
        double ss = 0.0;
        for (int64_t d = 0; d < p->D; d++) {
            double x = gdn_load(&a->x, xo + d);
            if (gated && !a->norm_before_gate)
                x *= ref_silu(gdn_load(&a->z, zo + d));
            ss += x * x;
        }
        double inv = 1.0 / sqrt(ss / (double)p->D + a->eps);
        for (int64_t d = 0; d < p->D; d++) {
            double x = gdn_load(&a->x, xo + d);
            double gate = gated ? ref_silu(gdn_load(&a->z, zo + d)) : 1.0;
            double w = a->weight.data ? gdn_load(&a->weight, d * a->weight.stride[0]) : 0.0;
            w = a->weight_offset ? 1.0 + w : (a->weight.data ? w : 1.0);
            gdn_store(&a->out, oo + d, x * gate * inv * w);
        }
    }
    return GDN_OK;
}
