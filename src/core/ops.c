/* Public op entry points: validate, find scratch, dispatch to the context's backend. */
#include "gdn_internal.h"

#include <string.h>

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        gdn_status st_ = (expr);                                                                   \
        if (st_ != GDN_OK)                                                                         \
            return st_;                                                                            \
    } while (0)

/* Common prologue: a context is required, and a backend must implement the op. */
static gdn_status enter(gdn_context *ctx, const char *fn, bool implemented)
{
    if (!ctx)
        return gdn_fail(NULL, GDN_ERR_NULL, fn, "ctx is NULL, expected a gdn_context");
    gdn_clear_error(ctx);
    if (!implemented)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "the %s backend does not implement it",
                        ctx->ops->name);
    return ctx->ops->enter ? ctx->ops->enter(ctx) : GDN_OK;
}

gdn_conv1d_args gdn_conv1d_default_args(void)
{
    gdn_conv1d_args a;
    memset(&a, 0, sizeof a);
    a.activation = GDN_ACT_SILU;
    return a;
}

gdn_conv1d_update_args gdn_conv1d_update_default_args(void)
{
    gdn_conv1d_update_args a;
    memset(&a, 0, sizeof a);
    a.activation = GDN_ACT_SILU;
    return a;
}

gdn_gating_params gdn_gating_default_params(void)
{
    gdn_gating_params g;
    memset(&g, 0, sizeof g);
    g.a_form = GDN_A_LOG;
    g.softplus_threshold = GDN_SOFTPLUS_THRESHOLD;
    return g;
}

gdn_rmsnorm_args gdn_rmsnorm_default_args(void)
{
    gdn_rmsnorm_args a;
    memset(&a, 0, sizeof a);
    a.eps = 1e-6f;
    a.norm_before_gate = 1;
    return a;
}

gdn_delta_rule_args gdn_delta_rule_default_args(void)
{
    gdn_delta_rule_args a;
    memset(&a, 0, sizeof a);
    a.state_layout = GDN_STATE_KV;
    a.gva = GDN_GVA_BLOCK;
    a.algorithm = GDN_ALGO_AUTO;
    a.gating = gdn_gating_default_params();
    return a;
}

gdn_status gdn_conv1d(gdn_context *ctx, const gdn_conv1d_args *args)
{
    TRY(enter(ctx, "gdn_conv1d", ctx && ctx->ops->conv1d));
    gdn_conv1d_problem p;
    TRY(gdn_validate_conv1d(ctx, args, &p));
    if (ctx->ops->check_conv1d)
        TRY(ctx->ops->check_conv1d(ctx, &p));
    return ctx->ops->conv1d(ctx, &p);
}

gdn_status gdn_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *args)
{
    TRY(enter(ctx, "gdn_conv1d_update", ctx && ctx->ops->conv1d_update));
    gdn_conv1d_update_problem p;
    TRY(gdn_validate_conv1d_update(ctx, args, &p));
    return ctx->ops->conv1d_update(ctx, &p);
}

gdn_status gdn_gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                      const gdn_gating_params *params, const gdn_tensor *g_out,
                      const gdn_tensor *beta_out)
{
    TRY(enter(ctx, "gdn_gating", ctx && ctx->ops->gating));
    gdn_gating_problem p;
    TRY(gdn_validate_gating(ctx, a, b, params, g_out, beta_out, &p));
    return ctx->ops->gating(ctx, &p);
}

gdn_status gdn_l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out, float eps)
{
    TRY(enter(ctx, "gdn_l2norm", ctx && ctx->ops->l2norm));
    gdn_l2norm_problem p;
    TRY(gdn_validate_l2norm(ctx, x, out, eps, &p));
    return ctx->ops->l2norm(ctx, &p);
}

gdn_status gdn_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_args *args)
{
    TRY(enter(ctx, "gdn_rmsnorm_gated", ctx && ctx->ops->rmsnorm_gated));
    gdn_rmsnorm_problem p;
    TRY(gdn_validate_rmsnorm(ctx, args, &p));
    return ctx->ops->rmsnorm_gated(ctx, &p);
}

gdn_status gdn_delta_rule_workspace_size(gdn_context *ctx, const gdn_delta_rule_args *args,
                                         size_t *bytes)
{
    static const char *fn = "gdn_delta_rule_workspace_size";
    TRY(enter(ctx, fn, ctx && ctx->ops->delta_rule));
    if (!bytes)
        return gdn_fail(ctx, GDN_ERR_NULL, fn, "bytes is NULL, expected a size_t *");
    gdn_delta_rule_problem p;
    TRY(gdn_validate_delta_rule(ctx, fn, args, &p));
    if (ctx->ops->check_delta_rule)
        TRY(ctx->ops->check_delta_rule(ctx, &p));
    *bytes = ctx->ops->delta_rule_workspace ? ctx->ops->delta_rule_workspace(ctx, &p) : 0;
    return GDN_OK;
}

gdn_status gdn_delta_rule(gdn_context *ctx, const gdn_delta_rule_args *args)
{
    static const char *fn = "gdn_delta_rule";
    TRY(enter(ctx, fn, ctx && ctx->ops->delta_rule));
    gdn_delta_rule_problem p;
    TRY(gdn_validate_delta_rule(ctx, fn, args, &p));
    if (ctx->ops->check_delta_rule)
        TRY(ctx->ops->check_delta_rule(ctx, &p));
    size_t need = ctx->ops->delta_rule_workspace ? ctx->ops->delta_rule_workspace(ctx, &p) : 0;
    void *ws = NULL;
    if (need)
        TRY(gdn_workspace_acquire(ctx, fn, need, &ws));
    return ctx->ops->delta_rule(ctx, &p, ws);
}
