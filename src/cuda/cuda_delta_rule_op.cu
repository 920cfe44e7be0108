// The gated delta rule's entry points on CUDA: the backend table's check_delta_rule,
// delta_rule_workspace and delta_rule. A call is planned once, by the check, which the core runs
// first for gdn_delta_rule_workspace_size and for gdn_delta_rule alike: the plan
// (cuda_chunk_plan.h) says which form runs and, for the chunked form, everything its launches
// and its workspace need. It stays in the context (cuda_ctx_state) for the size query and the
// run that follow in the same call, so that the size the query reports is the layout the run
// uses.
#include "cuda_common.cuh"

#include <string.h>

static cuda_ctx_state *ctx_state(const gdn_context *ctx)
{
    return static_cast<cuda_ctx_state *>(ctx->backend_state);
}

// The plan of p. Only a call that could run chunked (32 tokens or more a sequence, or
// GDN_ALGO_CHUNKED) reads the environment's overrides and the device, whose capabilities are
// read once per context.
static void plan_call(cuda_ctx_state *st, const gdn_delta_rule_problem *p,
                      cuda_delta_rule_plan *plan)
{
    const cuda_chunk_shape s = cuda_chunk_shape_of(p);
    cuda_chunk_env env;
    memset(&env, 0, sizeof env);
    const bool wanted = cuda_chunk_wanted(&s);
    if (wanted) {
        if (!st->caps_known) {
            cuda_chunk_device_caps(&st->caps);
            st->caps_known = true;
        }
        cuda_chunk_env_read(&env);
    }
    cuda_delta_rule_plan_make(&s, wanted ? &st->caps : nullptr, &env, plan);
}

// The plan the check made for p, or, for a call that did not go through the check, one made now
// in *own.
static const cuda_delta_rule_plan *call_plan(const gdn_context *ctx,
                                             const gdn_delta_rule_problem *p,
                                             cuda_delta_rule_plan *own)
{
    cuda_ctx_state *st = ctx_state(ctx);
    if (st->plan_of == p)
        return &st->plan;
    plan_call(st, p, own);
    return own;
}

extern "C" gdn_status cuda_check_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    static const char *fn = "gdn_delta_rule";
    cuda_ctx_state *st = ctx_state(ctx);
    plan_call(st, p, &st->plan);
    st->plan_of = p;
    if (st->plan.refused) {
        char why[256];
        const cuda_chunk_shape s = cuda_chunk_shape_of(p);
        cuda_chunk_fits(&s, &st->caps, why, sizeof why);
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "%s", why);
    }
    if (p->K > GDN_CUDA_MAX_K)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn, "K is %lld, expected <= %d on cuda",
                        (long long)p->K, GDN_CUDA_MAX_K);
    if (!p->has_state)
        return GDN_OK;
    const gdn_tensor *s = &p->a.state;
    if (s->dtype != GDN_F32)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "state.dtype is %s, expected f32 on cuda", gdn_dtype_name(s->dtype));
    bool kv = p->a.state_layout == GDN_STATE_KV;
    int64_t inner = kv ? p->V : p->K;
    bool vec_ok = s->stride[3] == 1 && inner % 4 == 0 && s->stride[0] % 4 == 0 &&
                  s->stride[1] % 4 == 0 && s->stride[2] % 4 == 0 &&
                  (uintptr_t)s->data % 16 == 0;
    if (!vec_ok)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, fn,
                        "the cuda backend reads the state pool 16 bytes at a time: expected "
                        "state.stride[3] == 1, %s %% 4 == 0, the other strides multiples of 4 "
                        "and a 16-byte aligned pointer", kv ? "V" : "K");
    return GDN_OK;
}

extern "C" size_t cuda_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    cuda_delta_rule_plan own;
    return cuda_delta_rule_plan_workspace(call_plan(ctx, p, &own));
}

extern "C" gdn_status cuda_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                      void *workspace)
{
    cuda_delta_rule_plan own;
    const cuda_delta_rule_plan *plan = call_plan(ctx, p, &own);
    ctx_state(ctx)->plan_of = nullptr; // the call's plan is used up: the next call plans anew
    if (plan->chunked)
        return cuda_delta_rule_chunked(ctx, p, &plan->chunk, workspace);
    return cuda_delta_rule_recurrent(ctx, p);
}
