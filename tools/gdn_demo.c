/* gdn demo: the main job on an embedded default problem. A Qwen3.5-shaped GDN block (H = 16
 * q/k heads, HV = 32 v heads, K = V = 128, conv width 4) on deterministic inputs:
 *   prefill  conv1d + gating + l2norm + chunked delta rule over a 4096-token prompt, into a
 *            conv-state pool and a recurrent-state pool (slot 2 of 4);
 *   decode   64 steps of conv1d_update + gating + l2norm + recurrent delta rule from the pools;
 *   norm     the gated RMSNorm of all 4160 outputs;
 * then verifies everything against ONE reference recurrent pass over all 4160 tokens. The
 * prefill uses GDN_ALGO_AUTO: the chunked form wherever the backend has it. On a device backend
 * every tensor is staged in device memory once; the phases are timed to a device sync. */
#include "device.h"
#include "gdn_tool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { H = 16, HV = 32, DK = 128, DV = 128, WIDTH = 4, CONV_DIM = 2 * H * DK + HV * DV };
enum { T_PREFILL = 4096, T_DECODE = 64, T_ALL = T_PREFILL + T_DECODE, SLOTS = 4, SLOT = 2 };

/* The block's parameters and per-token inputs (what the projections would produce). */
typedef struct demo_inputs {
    gdn_tensor mixed_qkv;  /* [T_ALL, CONV_DIM] */
    gdn_tensor a, b;       /* [T_ALL, HV] raw gate inputs */
    gdn_tensor z;          /* [T_ALL, HV, DV] output gate */
    gdn_tensor conv_w;     /* [CONV_DIM, WIDTH] */
    gdn_tensor A_log, dt_bias, norm_w;
} demo_inputs;

/* Everything a pass writes. */
typedef struct demo_state {
    gdn_tensor conv_out;   /* [T_ALL, CONV_DIM]: q | k | v after conv + SiLU (+ l2norm on q, k) */
    gdn_tensor g, beta;    /* [T_ALL, HV] */
    gdn_tensor o, y;       /* [T_ALL, HV, DV] delta-rule output, normed output */
    gdn_tensor conv_pool;  /* [slots, CONV_DIM, WIDTH - 1] */
    gdn_tensor state_pool; /* [slots, HV, DK, DV] */
    gdn_tensor slot, fresh, cont; /* [1] i32 slot index; has_initial_state 0 and 1 */
} demo_state;

static gdn_tensor alloc2(gdn_dtype dt, int64_t a, int64_t b)
{
    int64_t s[2] = {a, b};
    return tensor_alloc(dt, 2, s);
}

static gdn_tensor alloc3(gdn_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return tensor_alloc(dt, 3, s);
}

static void make_inputs(demo_inputs *in, gdn_dtype dt)
{
    rng r = rng_seed(20261121); /* fixed: the demo is the same problem everywhere */
    in->mixed_qkv = alloc2(dt, T_ALL, CONV_DIM);
    tensor_fill_uniform(&in->mixed_qkv, &r, -1.0, 1.0);
    in->a = alloc2(dt, T_ALL, HV);
    tensor_fill_uniform(&in->a, &r, -5.0, 1.0);
    in->b = alloc2(dt, T_ALL, HV);
    tensor_fill_uniform(&in->b, &r, -3.0, 3.0);
    in->z = alloc3(dt, T_ALL, HV, DV);
    tensor_fill_uniform(&in->z, &r, -2.0, 2.0);
    in->conv_w = alloc2(GDN_F32, CONV_DIM, WIDTH);
    tensor_fill_uniform(&in->conv_w, &r, -0.5, 0.5);
    int64_t hv = HV, dv = DV;
    in->A_log = tensor_alloc(GDN_F32, 1, &hv);
    in->dt_bias = tensor_alloc(GDN_F32, 1, &hv);
    for (int64_t h = 0; h < HV; h++) {
        tensor_set(&in->A_log, h, log(rng_uniform(&r, 1.0, 16.0)));
        tensor_set(&in->dt_bias, h, log(expm1(rng_uniform(&r, 0.001, 0.1))));
    }
    in->norm_w = tensor_alloc(GDN_F32, 1, &dv);
    tensor_fill_uniform(&in->norm_w, &r, 0.9, 1.1);
}

static void make_state(demo_state *s, gdn_dtype dt, int64_t slots)
{
    s->conv_out = alloc2(dt, T_ALL, CONV_DIM);
    s->g = alloc2(GDN_F32, T_ALL, HV);
    s->beta = alloc2(GDN_F32, T_ALL, HV);
    s->o = alloc3(dt, T_ALL, HV, DV);
    s->y = alloc3(dt, T_ALL, HV, DV);
    s->conv_pool = alloc3(GDN_F32, slots, CONV_DIM, WIDTH - 1);
    int64_t ps[4] = {slots, HV, DK, DV}, one = 1;
    s->state_pool = tensor_alloc(GDN_F32, 4, ps);
    s->slot = tensor_alloc(GDN_I32, 1, &one);
    tensor_set(&s->slot, 0, slots > SLOT ? SLOT : 0);
    s->fresh = tensor_alloc(GDN_U8, 1, &one);
    s->cont = tensor_alloc(GDN_U8, 1, &one);
    tensor_set(&s->cont, 0, 1.0);
}

static void free_all(gdn_tensor *ts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tensor_free(&ts[i]);
}

/* Rows [t0, t0 + len) of a [T_ALL, ...] tensor with a leading batch dim of 1 added. */
static gdn_tensor rows(const gdn_tensor *t, int64_t t0, int64_t len)
{
    gdn_tensor v = tensor_slice(t, 0, t0, len);
    for (int d = v.ndim; d > 0; d--) {
        v.shape[d] = v.shape[d - 1];
        v.stride[d] = v.stride[d - 1];
    }
    v.shape[0] = 1;
    v.stride[0] = len * t->stride[0];
    v.ndim++;
    return v;
}

/* [1, len, heads, dim] view of columns [at, at + heads*dim) of conv_out rows. */
static gdn_tensor heads_view(const gdn_tensor *conv_out, int64_t t0, int64_t len, int64_t at,
                             int64_t heads, int64_t dim)
{
    gdn_tensor v = rows(conv_out, t0, len);
    v.data = (char *)v.data + (size_t)at * gdn_dtype_size(v.dtype);
    v.ndim = 4;
    v.shape[2] = heads;
    v.shape[3] = dim;
    v.stride[2] = dim;
    v.stride[3] = 1;
    return v;
}

/* A failed op ends run_tokens with its status, after printing libgdn's message. */
#define RUN(call) GDN_TRY_ELSE(call, fprintf(stderr, "gdn demo: %s\n", gdn_last_error(ctx)))

/* Tokens [t0, t0 + len) through conv, gating, l2norm and the delta rule. `decode` uses the
 * single-token conv update and continues from the pools; otherwise the conv and the recurrence
 * start fresh (has_initial_state = 0) and write the pools. */
static gdn_status run_tokens(gdn_context *ctx, const demo_inputs *in, demo_state *s, int64_t t0,
                             int64_t len, bool decode, gdn_algorithm algo)
{
    if (decode) {
        gdn_conv1d_update_args c = gdn_conv1d_update_default_args();
        c.x = tensor_slice(&in->mixed_qkv, 0, t0, 1);
        c.out = tensor_slice(&s->conv_out, 0, t0, 1);
        c.weight = in->conv_w;
        c.conv_state = s->conv_pool;
        c.state_slots = s->slot;
        RUN(gdn_conv1d_update(ctx, &c));
    } else {
        gdn_conv1d_args c = gdn_conv1d_default_args();
        c.x = rows(&in->mixed_qkv, t0, len);
        c.out = rows(&s->conv_out, t0, len);
        c.weight = in->conv_w;
        c.conv_state = s->conv_pool;
        c.state_slots = s->slot;
        c.has_initial_state = s->fresh;
        RUN(gdn_conv1d(ctx, &c));
    }
    gdn_gating_params gp = gdn_gating_default_params();
    gp.A = in->A_log;
    gp.dt_bias = in->dt_bias;
    gdn_tensor a = tensor_slice(&in->a, 0, t0, len), b = tensor_slice(&in->b, 0, t0, len);
    gdn_tensor g = tensor_slice(&s->g, 0, t0, len), beta = tensor_slice(&s->beta, 0, t0, len);
    RUN(gdn_gating(ctx, &a, &b, &gp, &g, &beta));
    gdn_tensor q = heads_view(&s->conv_out, t0, len, 0, H, DK);
    gdn_tensor k = heads_view(&s->conv_out, t0, len, H * DK, H, DK);
    RUN(gdn_l2norm(ctx, &q, &q, GDN_L2NORM_EPS));
    RUN(gdn_l2norm(ctx, &k, &k, GDN_L2NORM_EPS));
    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    d.q = q;
    d.k = k;
    d.v = heads_view(&s->conv_out, t0, len, 2 * H * DK, HV, DV);
    d.g = rows(&s->g, t0, len);
    d.beta = rows(&s->beta, t0, len);
    d.out = rows(&s->o, t0, len);
    d.state = s->state_pool;
    d.state_slots = s->slot;
    d.has_initial_state = decode ? s->cont : s->fresh;
    d.algorithm = algo;
    RUN(gdn_delta_rule(ctx, &d));
    return GDN_OK;
}

static gdn_status run_norm(gdn_context *ctx, const demo_inputs *in, demo_state *s)
{
    gdn_rmsnorm_args n = gdn_rmsnorm_default_args();
    n.x = s->o;
    n.z = in->z;
    n.weight = in->norm_w;
    n.out = s->y;
    RUN(gdn_rmsnorm_gated(ctx, &n));
    return GDN_OK;
}

static void progress(bool quiet, const char *msg)
{
    if (!quiet) {
        fprintf(stderr, "[gdn demo] %s\n", msg);
        fflush(stderr);
    }
}

int cmd_demo(int argc, char **argv)
{
    tool_options o;
    if (parse_common_options(argc, argv, &o))
        return 2;
    gdn_context *ctx = open_context(&o);
    tool_options ro = o;
    ro.backend = GDN_BACKEND_REF;
    gdn_context *ref = open_context(&ro);
    if (!ctx || !ref)
        return 1;
    const char *backend = gdn_backend_name(gdn_context_backend(ctx));
    int threads = gdn_context_num_threads(ctx);
    char where[160];
    if (gdn_context_backend(ctx) == GDN_BACKEND_CUDA)
        gdn_cuda_device_name(0, where, sizeof where);
    else
        snprintf(where, sizeof where, "%d thread%s", threads, threads == 1 ? "" : "s");
    if (!o.json)
        printf("gdn demo: Qwen3.5-shaped GDN block, H=%d HV=%d K=V=%d, conv width %d "
               "(conv_dim %d), %s activations, backend %s (%s)\n",
               H, HV, DK, WIDTH, CONV_DIM, gdn_dtype_name(o.dtype), backend, where);
    progress(o.json, "making deterministic inputs");
    demo_inputs in;
    make_inputs(&in, o.dtype);
    demo_state s, r;
    make_state(&s, o.dtype, SLOTS);
    make_state(&r, o.dtype, 1);

    char msg[160];
    bool device = gdn_context_backend(ctx) == GDN_BACKEND_CUDA;
    staging staged = {0};
    if (device) {
        progress(o.json, "staging inputs and pools in device memory");
        gdn_tensor *all[] = {&in.mixed_qkv, &in.a, &in.b, &in.z, &in.conv_w, &in.A_log,
                             &in.dt_bias, &in.norm_w, &s.conv_out, &s.g, &s.beta, &s.o, &s.y,
                             &s.conv_pool, &s.state_pool, &s.slot, &s.fresh, &s.cont};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            stage(&staged, all[i]);
        dev_sync();
    }
    snprintf(msg, sizeof msg, "prefill: %d tokens on %s", T_PREFILL, backend);
    progress(o.json, msg);
    double t0 = now_seconds();
    gdn_status st = run_tokens(ctx, &in, &s, 0, T_PREFILL, false, GDN_ALGO_AUTO);
    if (device)
        dev_sync();
    double t_prefill = now_seconds() - t0;
    snprintf(msg, sizeof msg, "decode: %d steps, recurrent, from the pools", T_DECODE);
    progress(o.json || st, msg);
    t0 = now_seconds();
    for (int64_t t = T_PREFILL; t < T_ALL && st == GDN_OK; t++)
        st = run_tokens(ctx, &in, &s, t, 1, true, GDN_ALGO_RECURRENT);
    if (device)
        dev_sync();
    double t_decode = now_seconds() - t0;
    t0 = now_seconds();
    if (st == GDN_OK)
        st = run_norm(ctx, &in, &s);
    if (device)
        dev_sync();
    double t_norm = now_seconds() - t0;
    unstage(&staged); /* results (and the unchanged inputs) back in host memory */

    snprintf(msg, sizeof msg, "verify: one reference recurrent pass over %d tokens", T_ALL);
    progress(o.json || st, msg);
    t0 = now_seconds();
    if (st == GDN_OK)
        st = run_tokens(ref, &in, &r, 0, T_ALL, false, GDN_ALGO_RECURRENT);
    if (st == GDN_OK)
        st = run_norm(ref, &in, &r);
    double t_verify = now_seconds() - t0;
    if (st != GDN_OK)
        return 1;

    double tol = o.dtype == GDN_F32 ? 1e-5 : 5e-3;
    gdn_tensor slot_state = tensor_slice(&s.state_pool, 0, SLOT, 1);
    double e_out = rel_l2(&s.y, &r.y), e_state = rel_l2(&slot_state, &r.state_pool);
    bool finite = tensor_all_finite(&s.y) && tensor_all_finite(&slot_state);
    bool pass = finite && e_out <= tol && e_state <= tol;
    if (o.json) {
        printf("{\"backend\": \"%s\", \"threads\": %d, \"dtype\": \"%s\", \"H\": %d, \"HV\": %d, "
               "\"K\": %d, \"V\": %d, \"prefill_tokens\": %d, \"prefill_ms\": %.3f, "
               "\"prefill_tokens_per_s\": %.1f, \"decode_steps\": %d, \"decode_ms_per_step\": "
               "%.4f, \"decode_tokens_per_s\": %.1f, \"rmsnorm_ms\": %.3f, \"verify_ms\": %.3f, "
               "\"output_rel_err\": %.3e, \"state_rel_err\": %.3e, \"tol\": %.0e, \"pass\": %s}\n",
               backend, threads, gdn_dtype_name(o.dtype), H, HV, DK, DV, T_PREFILL,
               1e3 * t_prefill, T_PREFILL / t_prefill, T_DECODE, 1e3 * t_decode / T_DECODE,
               T_DECODE / t_decode, 1e3 * t_norm, 1e3 * t_verify, e_out, e_state, tol,
               pass ? "true" : "false");
    } else {
        printf("%-9s %7s %11s %13s\n", "phase", "tokens", "ms", "tokens/s");
        printf("%-9s %7d %11.1f %13.1f\n", "prefill", T_PREFILL, 1e3 * t_prefill,
               T_PREFILL / t_prefill);
        printf("%-9s %7d %11.1f %13.1f   (%.3f ms per step)\n", "decode", T_DECODE,
               1e3 * t_decode, T_DECODE / t_decode, 1e3 * t_decode / T_DECODE);
        printf("%-9s %7d %11.1f %13.1f\n", "rmsnorm", T_ALL, 1e3 * t_norm, T_ALL / t_norm);
        printf("verify: one reference recurrent pass over %d tokens took %.1f ms\n", T_ALL,
               1e3 * t_verify);
        printf("  normed output  rel_err %.2e  (tol %.0e)\n", e_out, tol);
        printf("  final state    rel_err %.2e  (tol %.0e)\n", e_state, tol);
        printf("%s\n", pass ? "PASS" : (finite ? "FAIL" : "FAIL (non-finite values)"));
    }
    free_all(&in.mixed_qkv, sizeof in / sizeof(gdn_tensor));
    free_all(&s.conv_out, sizeof s / sizeof(gdn_tensor));
    free_all(&r.conv_out, sizeof r / sizeof(gdn_tensor));
    gdn_context_destroy(ctx);
    gdn_context_destroy(ref);
    return pass ? 0 : 1;
}
