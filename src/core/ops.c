/* Public op entry points: validate, find scratch, dispatch to the context's backend. Every op runs
 * between gdn_context_enter and gdn_context_leave (GDN_GUARDED), so that one context never serves
 * two threads at once (its scratch and error message are per context). */
#include "gdn_internal.h"
#include "status.h"

/* An op the context's backend does not implement fails before validation. */
static gdn_status check_implemented(gdn_context *ctx, const char *fn, bool implemented)
{
    if (!implemented)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "the %s backend does not implement it",
                        ctx->ops->name);
    return ctx->ops->enter ? ctx->ops->enter(ctx) : GDN_OK;
}

/* The ops' bodies. Each validates everything, lets the backend refuse what it cannot run, and
 * returns at once where the validated problem writes nothing (an empty batch is a normal call
 * in an engine, and a backend never sees one). */

static gdn_status conv1d(gdn_context *ctx, const gdn_conv1d_args *args)
{
    GDN_TRY(check_implemented(ctx, "gdn_conv1d", ctx->ops->conv1d));
    gdn_conv1d_problem p;
    GDN_TRY(gdn_validate_conv1d(ctx, args, &p));
    if (ctx->ops->check_conv1d)
        GDN_TRY(ctx->ops->check_conv1d(ctx, &p));
    if (p.seqs.active == 0 || (p.seqs.T == 0 && !p.has_state))
        return GDN_OK;
    return ctx->ops->conv1d(ctx, &p);
}

static gdn_status conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *args)
{
    GDN_TRY(check_implemented(ctx, "gdn_conv1d_update", ctx->ops->conv1d_update));
    gdn_conv1d_update_problem p;
    GDN_TRY(gdn_validate_conv1d_update(ctx, args, &p));
    if (p.seqs.active == 0)
        return GDN_OK;
    return ctx->ops->conv1d_update(ctx, &p);
}

static gdn_status gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                         const gdn_gating_params *params, const gdn_tensor *g_out,
                         const gdn_tensor *beta_out)
{
    GDN_TRY(check_implemented(ctx, "gdn_gating", ctx->ops->gating));
    gdn_gating_problem p;
    GDN_TRY(gdn_validate_gating(ctx, a, b, params, g_out, beta_out, &p));
    if (p.rows == 0)
        return GDN_OK;
    return ctx->ops->gating(ctx, &p);
}

static gdn_status l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out, float eps)
{
    GDN_TRY(check_implemented(ctx, "gdn_l2norm", ctx->ops->l2norm));
    gdn_l2norm_problem p;
    GDN_TRY(gdn_validate_l2norm(ctx, x, out, eps, &p));
    if (p.rows == 0)
        return GDN_OK;
    return ctx->ops->l2norm(ctx, &p);
}

static gdn_status rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_args *args)
{
    GDN_TRY(check_implemented(ctx, "gdn_rmsnorm_gated", ctx->ops->rmsnorm_gated));
    gdn_rmsnorm_problem p;
    GDN_TRY(gdn_validate_rmsnorm(ctx, args, &p));
    if (p.rows == 0)
        return GDN_OK;
    return ctx->ops->rmsnorm_gated(ctx, &p);
}

/* Validation and the backend's refusals, shared by the size query and the op. */
static gdn_status delta_rule_problem(gdn_context *ctx, const char *fn,
                                     const gdn_delta_rule_args *args, gdn_delta_rule_problem *p)
{
    GDN_TRY(check_implemented(ctx, fn, ctx->ops->delta_rule));
    GDN_TRY(gdn_validate_delta_rule(ctx, fn, args, p));
    if (ctx->ops->check_delta_rule)
        GDN_TRY(ctx->ops->check_delta_rule(ctx, p));
    return GDN_OK;
}

/* Nothing to write: no sequence that runs (none, or every one padding), or no token and no state
 * to leave behind. */
static bool delta_rule_empty(const gdn_delta_rule_problem *p)
{
    return p->seqs.active == 0 || (p->T == 0 && !p->has_state);
}

static gdn_status delta_rule_scratch(gdn_context *ctx, const char *fn,
                                     const gdn_delta_rule_problem *p, size_t *bytes)
{
    *bytes = 0;
    if (!delta_rule_empty(p) && ctx->ops->delta_rule_workspace)
        *bytes = ctx->ops->delta_rule_workspace(ctx, p);
    if (*bytes == SIZE_MAX)
        return gdn_fail(ctx, GDN_ERR_VALUE, fn,
                        "the problem's scratch exceeds the address space, expected smaller "
                        "extents");
    return GDN_OK;
}

static gdn_status delta_rule_workspace_size(gdn_context *ctx, const gdn_delta_rule_args *args,
                                            size_t *bytes)
{
    static const char *fn = "gdn_delta_rule_workspace_size";
    if (!bytes)
        return gdn_fail(ctx, GDN_ERR_NULL, fn, "bytes is NULL, expected a size_t *");
    gdn_delta_rule_problem p;
    GDN_TRY(delta_rule_problem(ctx, fn, args, &p));
    size_t need;
    GDN_TRY(delta_rule_scratch(ctx, fn, &p, &need));
    *bytes = need;
    return GDN_OK;
}

static gdn_status delta_rule(gdn_context *ctx, const gdn_delta_rule_args *args)
{
    static const char *fn = "gdn_delta_rule";
    gdn_delta_rule_problem p;
    GDN_TRY(delta_rule_problem(ctx, fn, args, &p));
    if (delta_rule_empty(&p))
        return GDN_OK;
    size_t need;
    GDN_TRY(delta_rule_scratch(ctx, fn, &p, &need));
    void *ws = NULL;
    if (need)
        GDN_TRY(gdn_workspace_acquire(ctx, fn, need, &ws));
    return ctx->ops->delta_rule(ctx, &p, ws);
}

/* ---- public entry points ------------------------------------------------------------------- */

gdn_status gdn_conv1d(gdn_context *ctx, const gdn_conv1d_args *args)
{
    GDN_GUARDED(ctx, "gdn_conv1d", conv1d(ctx, args));
}

gdn_status gdn_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *args)
{
    GDN_GUARDED(ctx, "gdn_conv1d_update", conv1d_update(ctx, args));
}

gdn_status gdn_gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                      const gdn_gating_params *params, const gdn_tensor *g_out,
                      const gdn_tensor *beta_out)
{
    GDN_GUARDED(ctx, "gdn_gating", gating(ctx, a, b, params, g_out, beta_out));
}

gdn_status gdn_l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out, float eps)
{
    GDN_GUARDED(ctx, "gdn_l2norm", l2norm(ctx, x, out, eps));
}

gdn_status gdn_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_args *args)
{
    GDN_GUARDED(ctx, "gdn_rmsnorm_gated", rmsnorm_gated(ctx, args));
}

gdn_status gdn_delta_rule_workspace_size(gdn_context *ctx, const gdn_delta_rule_args *args,
                                         size_t *bytes)
{
    GDN_GUARDED(ctx, "gdn_delta_rule_workspace_size", delta_rule_workspace_size(ctx, args, bytes));
}

gdn_status gdn_delta_rule(gdn_context *ctx, const gdn_delta_rule_args *args)
{
    GDN_GUARDED(ctx, "gdn_delta_rule", delta_rule(ctx, args));
}
