/* The reference backend: scalar float64 code that reads like SPEC.md. It is the oracle every
 * other backend is tested against, so it favours clarity over speed. */
#ifndef GDN_REF_H
#define GDN_REF_H

#include "../core/gdn_internal.h"

#include <math.h>

/* ---- scalar math shared by the ops (SPEC sections 3-5) ------------------------------------- */

static inline double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double ref_silu(double x) { return x * ref_sigmoid(x); }

/* log1p(exp(x)), and x itself above the threshold. For x > 0 the identical x + log1p(exp(-x))
 * is used so that a large threshold cannot overflow exp. */
static inline double ref_softplus(double x, double threshold)
{
    if (x > threshold)
        return x;
    return x > 0.0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* Log-decay g from the raw gate input a of value head h. */
static inline double ref_gate_g(const gdn_gating_params *gp, int64_t h, double a)
{
    double A = gdn_load(&gp->A, h * gp->A.stride[0]);
    double dt = gp->dt_bias.data ? gdn_load(&gp->dt_bias, h * gp->dt_bias.stride[0]) : 0.0;
    double rate = gp->a_form == GDN_A_LOG ? -exp(A) : A; /* -exp(A_log), stored or not */
    return rate * ref_softplus(a + dt, gp->softplus_threshold);
}

/* Write strength beta from the raw logit b. */
static inline double ref_gate_beta(const gdn_gating_params *gp, double b)
{
    return (gp->allow_neg_eigval ? 2.0 : 1.0) * ref_sigmoid(b);
}

/* ---- ops ----------------------------------------------------------------------------------- */

gdn_status ref_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p);
gdn_status ref_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p);
gdn_status ref_gating(gdn_context *ctx, const gdn_gating_problem *p);
gdn_status ref_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p);
gdn_status ref_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p);
size_t ref_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p);
gdn_status ref_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p, void *workspace);

#endif
