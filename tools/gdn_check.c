/* gdn check: every op of the chosen backend on random problems against the reference backend,
 * printed as a table; exit status 1 on any failure. The delta rule is run with both algorithms
 * of the backend and compared with the reference's recurrent form. */
#include "delta_case.h"
#include "device.h"
#include "gdn_tool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct checker {
    gdn_context *dut;   /* the backend under test */
    gdn_context *ref;   /* the reference */
    rng r;
    bool json;
    bool device;        /* dut tensors must be staged in device memory */
    int rows, failed, skipped;
} checker;

/* Precision bars (SPEC section 8): f32 end to end 1e-5, half-precision data 5e-3. */
static double tol_for(gdn_dtype dt) { return dt == GDN_F32 ? 1e-5 : 5e-3; }

static void report(checker *ck, const char *op, const char *desc, gdn_status st, double err,
                   double tol)
{
    bool skip = st == GDN_ERR_UNSUPPORTED; /* a path the backend says it does not have */
    bool ok = st == GDN_OK && err <= tol;
    ck->failed += !ok && !skip;
    ck->skipped += skip;
    if (ck->json) {
        printf("%s{\"op\": \"%s\", \"case\": \"%s\", \"rel_err\": %.3e, \"tol\": %.0e, "
               "\"pass\": %s}",
               ck->rows ? ",\n " : "[", op, desc, isfinite(err) ? err : 1e300, tol,
               skip ? "null" : ok ? "true" : "false");
    } else if (skip) {
        printf("%-14s %-66s %10s %8.0e  skip: %s\n", op, desc, "-", tol, gdn_last_error(ck->dut));
    } else {
        printf("%-14s %-66s %10.2e %8.0e  %s\n", op, desc, err, tol, ok ? "pass" : "FAIL");
        if (st != GDN_OK)
            printf("    error: %s\n", gdn_last_error(ck->dut));
    }
    ck->rows++;
}

static double worst(double a, double b) { return a > b || isnan(a) ? a : b; }

static gdn_tensor alloc_rand(checker *ck, gdn_dtype dt, int ndim, const int64_t *shape,
                             double scale)
{
    gdn_tensor t = tensor_alloc(dt, ndim, shape);
    tensor_fill_normal(&t, &ck->r, scale);
    return t;
}

static gdn_tensor clone(const gdn_tensor *t)
{
    gdn_tensor c = tensor_zeros_like(t);
    memcpy(c.data, t->data, tensor_bytes(t));
    return c;
}

static gdn_dtype random_dtype(checker *ck)
{
    static const gdn_dtype dts[] = {GDN_F32, GDN_BF16, GDN_F16};
    return dts[rng_int(&ck->r, 0, 2)];
}

/* ---- running the backend under test (its tensors staged on the device if it needs them) ---- */

static gdn_status dut_conv1d(checker *ck, gdn_conv1d_args a)
{
    staging s = {0};
    if (ck->device)
        stage_conv1d_args(&s, &a);
    gdn_status st = gdn_conv1d(ck->dut, &a);
    unstage(&s);
    return st;
}

static gdn_status dut_conv1d_update(checker *ck, gdn_conv1d_update_args a)
{
    staging s = {0};
    if (ck->device)
        stage_conv1d_update_args(&s, &a);
    gdn_status st = gdn_conv1d_update(ck->dut, &a);
    unstage(&s);
    return st;
}

static gdn_status dut_gating(checker *ck, gdn_tensor a, gdn_tensor b, gdn_gating_params p,
                             gdn_tensor g, gdn_tensor beta)
{
    staging s = {0};
    if (ck->device) {
        gdn_tensor *all[] = {&a, &b, &p.A, &p.dt_bias, &g, &beta};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            stage(&s, all[i]);
    }
    gdn_status st = gdn_gating(ck->dut, &a, &b, &p, &g, &beta);
    unstage(&s);
    return st;
}

static gdn_status dut_l2norm(checker *ck, gdn_tensor x, gdn_tensor out)
{
    staging s = {0};
    if (ck->device) {
        stage(&s, &x);
        stage(&s, &out);
    }
    gdn_status st = gdn_l2norm(ck->dut, &x, &out, GDN_L2NORM_EPS);
    unstage(&s);
    return st;
}

static gdn_status dut_rmsnorm(checker *ck, gdn_rmsnorm_args a)
{
    staging s = {0};
    if (ck->device)
        stage_rmsnorm_args(&s, &a);
    gdn_status st = gdn_rmsnorm_gated(ck->dut, &a);
    unstage(&s);
    return st;
}

static gdn_status dut_delta_rule(checker *ck, delta_case *c, gdn_algorithm algo)
{
    delta_case_reset(c);
    gdn_delta_rule_args a = c->args;
    a.algorithm = algo;
    staging s = {0};
    if (ck->device)
        stage_delta_rule_args(&s, &a);
    gdn_status st = gdn_delta_rule(ck->dut, &a);
    unstage(&s);
    return st;
}

/* ---- conv1d (prefill and decode) ----------------------------------------------------------- */

static void check_conv1d(checker *ck, bool update)
{
    for (int i = 0; i < 6; i++) {
        gdn_dtype dt = random_dtype(ck);
        int64_t C = rng_int(&ck->r, 1, 70), W = rng_int(&ck->r, 2, 5), N = rng_int(&ck->r, 1, 4);
        int64_t T = update ? 1 : rng_int(&ck->r, 1, 50), S = N + 2;
        bool varlen = !update && i % 2;
        int64_t lens[4], total = 0;
        for (int64_t n = 0; n < N; n++)
            total += lens[n] = varlen ? rng_int(&ck->r, 0, 9) : T;
        int64_t B = varlen ? 1 : N, TT = varlen ? total : T;
        int64_t xs[3] = {B, TT, C}, xs2[2] = {N, C}, ws[2] = {C, W}, ss[3] = {S, C, W - 1};
        gdn_tensor x = update ? alloc_rand(ck, dt, 2, xs2, 1.0) : alloc_rand(ck, dt, 3, xs, 1.0);
        gdn_tensor w = alloc_rand(ck, GDN_F32, 2, ws, 0.5), bias = alloc_rand(ck, dt, 1, &C, 0.5);
        gdn_tensor pool = alloc_rand(ck, GDN_F32, 3, ss, 1.0);
        gdn_tensor slots = tensor_alloc(GDN_I32, 1, &N), init = tensor_alloc(GDN_U8, 1, &N);
        int64_t n1 = N + 1;
        gdn_tensor cu = tensor_alloc(GDN_I64, 1, &n1);
        for (int64_t n = 0, at = 0; n <= N; n++) {
            tensor_set(&cu, n, (double)at);
            if (n < N) {
                at += lens[n];
                tensor_set(&slots, n, n == 1 ? -1.0 : (double)(S - 1 - n));
                tensor_set(&init, n, (double)(n % 3 != 2));
            }
        }
        gdn_tensor out_d = tensor_zeros_like(&x), out_r = tensor_zeros_like(&x);
        gdn_tensor pool_d = clone(&pool), pool_r = clone(&pool);
        gdn_status st;
        if (update) {
            gdn_conv1d_update_args a = gdn_conv1d_update_default_args();
            a.x = x, a.weight = w, a.bias = bias, a.conv_state = pool_d, a.state_slots = slots;
            a.out = out_d;
            st = dut_conv1d_update(ck, a);
            a.out = out_r, a.conv_state = pool_r;
            gdn_conv1d_update(ck->ref, &a);
        } else {
            gdn_conv1d_args a = gdn_conv1d_default_args();
            a.x = x, a.weight = w, a.bias = bias, a.conv_state = pool_d, a.state_slots = slots;
            a.has_initial_state = init, a.out = out_d;
            if (varlen)
                a.cu_seqlens = cu;
            st = dut_conv1d(ck, a);
            a.out = out_r, a.conv_state = pool_r;
            gdn_conv1d(ck->ref, &a);
        }
        char desc[96];
        snprintf(desc, sizeof desc, "N=%lld T=%s C=%lld W=%lld %s pool", (long long)N,
                 varlen ? "var" : (update ? "1" : "T"), (long long)C, (long long)W,
                 gdn_dtype_name(dt));
        double err = worst(rel_l2(&out_d, &out_r), rel_l2(&pool_d, &pool_r));
        report(ck, update ? "conv1d_update" : "conv1d", desc, st, err, tol_for(dt));
        gdn_tensor *all[] = {&x, &w, &bias, &pool, &slots, &init, &cu, &out_d, &out_r, &pool_d,
                             &pool_r};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            tensor_free(all[k]);
    }
}

/* ---- pointwise ops ------------------------------------------------------------------------- */

static void check_gating(checker *ck)
{
    for (int i = 0; i < 4; i++) {
        gdn_dtype dt = random_dtype(ck);
        int64_t HV = rng_int(&ck->r, 1, 40), shape[2] = {rng_int(&ck->r, 1, 60), HV};
        gdn_tensor a = alloc_rand(ck, dt, 2, shape, 3.0), b = alloc_rand(ck, dt, 2, shape, 3.0);
        gdn_tensor A = alloc_rand(ck, GDN_F32, 1, &HV, 1.0), dtb = alloc_rand(ck, GDN_F32, 1, &HV, 1.0);
        gdn_tensor g_d = tensor_zeros_like(&a), g_r = tensor_zeros_like(&a);
        gdn_tensor b_d = tensor_zeros_like(&a), b_r = tensor_zeros_like(&a);
        gdn_gating_params p = gdn_gating_default_params();
        p.A = A, p.dt_bias = dtb, p.a_form = i % 2 ? GDN_A_LOG : GDN_A_NEG_EXP;
        p.allow_neg_eigval = i >= 2;
        gdn_status st = dut_gating(ck, a, b, p, g_d, b_d);
        gdn_gating(ck->ref, &a, &b, &p, &g_r, &b_r);
        char desc[96];
        snprintf(desc, sizeof desc, "rows=%lld HV=%lld %s %s%s", (long long)shape[0],
                 (long long)HV, gdn_dtype_name(dt), i % 2 ? "A_log" : "-exp(A_log)",
                 p.allow_neg_eigval ? " neg_eigval" : "");
        report(ck, "gating", desc, st, worst(rel_l2(&g_d, &g_r), rel_l2(&b_d, &b_r)),
               tol_for(dt));
        gdn_tensor *all[] = {&a, &b, &A, &dtb, &g_d, &g_r, &b_d, &b_r};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            tensor_free(all[k]);
    }
}

static void check_norms(checker *ck)
{
    for (int i = 0; i < 8; i++) {
        bool rms = i >= 4;
        gdn_dtype dt = random_dtype(ck);
        int64_t D = (int64_t[]){1, 7, 64, 128}[i % 4], shape[3] = {rng_int(&ck->r, 1, 20), 3, D};
        gdn_tensor x = alloc_rand(ck, dt, 3, shape, 2.0), z = alloc_rand(ck, dt, 3, shape, 2.0);
        gdn_tensor w = alloc_rand(ck, GDN_F32, 1, &D, 0.3);
        gdn_tensor o_d = tensor_zeros_like(&x), o_r = tensor_zeros_like(&x);
        gdn_status st;
        char desc[96];
        if (rms) {
            gdn_rmsnorm_args a = gdn_rmsnorm_default_args();
            a.x = x, a.z = z, a.weight = w, a.weight_offset = i % 2, a.norm_before_gate = i != 6;
            a.out = o_d;
            st = dut_rmsnorm(ck, a);
            a.out = o_r;
            gdn_rmsnorm_gated(ck->ref, &a);
            snprintf(desc, sizeof desc, "rows=%lld D=%lld %s%s%s", (long long)(shape[0] * 3),
                     (long long)D, gdn_dtype_name(dt), a.weight_offset ? " 1+w" : "",
                     a.norm_before_gate ? "" : " gate-first");
        } else {
            st = dut_l2norm(ck, x, o_d);
            gdn_l2norm(ck->ref, &x, &o_r, GDN_L2NORM_EPS);
            snprintf(desc, sizeof desc, "rows=%lld D=%lld %s", (long long)(shape[0] * 3),
                     (long long)D, gdn_dtype_name(dt));
        }
        report(ck, rms ? "rmsnorm_gated" : "l2norm", desc, st, rel_l2(&o_d, &o_r), tol_for(dt));
        gdn_tensor *all[] = {&x, &z, &w, &o_d, &o_r};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            tensor_free(all[k]);
    }
}

/* ---- delta rule ---------------------------------------------------------------------------- */

static void check_delta_rule(checker *ck)
{
    static const int64_t lens[] = {0, 1, 37, 130, 5};
    static const int64_t dims[] = {16, 64, 128};
    for (int i = 0; i < 10; i++) {
        delta_config f = delta_config_default();
        rng *r = &ck->r;
        f.H = rng_int(r, 1, 2);
        f.HV = f.H * (int64_t[]){1, 2, 4}[rng_int(r, 0, 2)];
        f.K = dims[rng_int(r, 0, 2)];
        f.V = dims[rng_int(r, 0, 2)];
        f.nseq = i % 3 == 2 ? 5 : rng_int(r, 1, 3);
        f.lens = i % 3 == 2 ? lens : NULL;
        f.T = rng_int(r, 1, 200);
        f.chunk = 16 << rng_int(r, 0, 3);
        f.dtype = i < 6 ? GDN_F32 : random_dtype(ck);
        f.layout = (gdn_state_layout)rng_int(r, 0, 1);
        f.gva = (gdn_gva)rng_int(r, 0, 1);
        f.qk_l2norm = rng_int(r, 0, 1);
        f.gate_in_kernel = rng_int(r, 0, 1);
        f.fused_qkv = rng_int(r, 0, 1);
        f.pool = true;
        f.padding = f.fresh_starts = rng_int(r, 0, 1);
        if (f.dtype != GDN_F32 && i % 2) { /* the fast mode, on SPEC's gates (beta in (0, 1)) */
            f.precision = GDN_PRECISION_FAST;
            f.gate_in_kernel = false;
        }
        delta_case c;
        delta_case_init(&c, &f, r);
        char desc[160];
        delta_case_describe(&c, desc, sizeof desc);
        delta_case_run(ck->ref, &c, GDN_ALGO_RECURRENT);
        gdn_tensor out_r = clone(&c.out), state_r = clone(&c.state);
        static const gdn_algorithm algos[] = {GDN_ALGO_RECURRENT, GDN_ALGO_CHUNKED};
        for (int a = 0; a < 2; a++) {
            gdn_status st = dut_delta_rule(ck, &c, algos[a]);
            double err = worst(rel_l2(&c.out, &out_r), rel_l2(&c.state, &state_r));
            if (!delta_case_untouched(&c))
                err = INFINITY; /* wrote a skipped sequence or an unnamed slot */
            report(ck, a ? "delta_chunked" : "delta_recur", desc, st, err, tol_for(f.dtype));
        }
        tensor_free(&out_r);
        tensor_free(&state_r);
        delta_case_free(&c);
    }
}

int cmd_check(int argc, char **argv)
{
    tool_options o;
    if (parse_common_options(argc, argv, &o))
        return 2;
    checker ck;
    memset(&ck, 0, sizeof ck);
    ck.json = o.json;
    ck.r = rng_seed(o.seed);
    ck.dut = open_context(&o);
    tool_options ro = o;
    ro.backend = GDN_BACKEND_REF;
    ck.ref = open_context(&ro);
    if (!ck.dut || !ck.ref) {
        gdn_context_destroy(ck.dut);
        gdn_context_destroy(ck.ref);
        return 1;
    }
    const char *name = gdn_backend_name(gdn_context_backend(ck.dut));
    ck.device = gdn_context_backend(ck.dut) == GDN_BACKEND_CUDA;
    if (!o.json) {
        printf("gdn check: backend %s against ref, seed %llu (replay: --seed %llu)\n", name,
               (unsigned long long)o.seed, (unsigned long long)o.seed);
        printf("%-14s %-66s %10s %8s  %s\n", "op", "case", "rel_err", "tol", "result");
    }
    check_conv1d(&ck, false);
    check_conv1d(&ck, true);
    check_gating(&ck);
    check_norms(&ck);
    check_delta_rule(&ck);
    if (o.json)
        printf("]\n");
    else
        printf("%d passed, %d failed, %d skipped\n", ck.rows - ck.failed - ck.skipped, ck.failed,
               ck.skipped);
    gdn_context_destroy(ck.dut);
    gdn_context_destroy(ck.ref);
    return ck.failed ? 1 : 0;
}
