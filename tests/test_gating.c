/* gdn_gating on the reference backend, against SPEC section 3 evaluated in long double:
 *
 *   g    = -exp(A_log[h]) * softplus(a + dt_bias[h])   softplus(x) = log1p(exp(x)), = x above the
 *                                                       threshold
 *   beta = sigmoid(b), or 2 * sigmoid(b) with allow_neg_eigval */
#include "harness.h"
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

static gdn_context *ctx;

/* ---- the independent expectation ------------------------------------------------------------ */

static long double softplus_ld(long double x, double threshold)
{
    if (x > threshold)
        return x;
    return log1pl(expl(x));
}

/* g for raw input a, head parameter A (A_log, or -exp(A_log) in the NEG_EXP form) and bias dt. */
static double expect_g(double a, double A, double dt, gdn_a_form form, double threshold)
{
    long double rate = form == GDN_A_LOG ? -expl((long double)A) : (long double)A;
    long double x = (long double)a + dt;
    return (double)(rate * softplus_ld(x, threshold));
}

static double expect_beta(double b, int neg)
{
    long double s = 1.0L / (1.0L + expl(-(long double)b));
    return (double)((neg ? 2.0L : 1.0L) * s);
}

/* ---- a general case -------------------------------------------------------------------------- */

typedef struct gating_case {
    const char *name;
    int ndim;
    int64_t shape[4];    /* last = HV */
    gdn_dtype idt, odt;  /* a/b and g/beta dtypes */
    gdn_dtype Adt;
    int dt_bias;         /* 0: absent, 1: present */
    gdn_a_form form;
    float threshold;
    int neg;
    int with_b;
    int in_place;
    int strided;         /* a and b are views into one fused [..., 3*HV] buffer */
    double alo, ahi;     /* range of a */
} gating_case;

/* Runs one case; returns the g tensor's values in *g_vals (caller frees) when non-NULL. */
static void run_gating(rng *r, const gating_case *gc, double **g_vals, const double *A_log_in)
{
    const int nd = gc->ndim;
    const int64_t HV = gc->shape[nd - 1];
    int64_t rows = 1;
    for (int d = 0; d < nd - 1; d++)
        rows *= gc->shape[d];
    const int64_t n = rows * HV;

    /* inputs: a fused [rows, 3*HV] buffer (a at 0, b at 2*HV) when strided, else separate */
    int64_t fshape[4];
    memcpy(fshape, gc->shape, sizeof fshape);
    if (gc->strided)
        fshape[nd - 1] = 3 * HV;
    gdn_tensor fa = tensor_alloc(gc->idt, nd, fshape);
    gdn_tensor fb = gc->strided ? fa : tensor_alloc(gc->idt, nd, fshape);
    gdn_tensor a = fa, b = fb;
    a.shape[nd - 1] = HV;
    b.shape[nd - 1] = HV;
    if (gc->strided)
        b = tensor_slice(&fa, nd - 1, 2 * HV, HV);
    tensor_fill_uniform(&fa, r, -30.0, 30.0); /* also fills the gap between a and b */
    tensor_fill_uniform(&a, r, gc->alo, gc->ahi);
    tensor_fill_uniform(&b, r, -10.0, 10.0);

    int64_t hs[1] = {HV};
    gdn_tensor A = tensor_alloc(gc->Adt, 1, hs), dtb = gdn_tensor_none();
    double *A_log = xmalloc((size_t)HV * sizeof *A_log);
    for (int64_t h = 0; h < HV; h++) {
        A_log[h] = A_log_in ? A_log_in[h] : rng_uniform(r, -3.0, 2.0);
        tensor_set(&A, h, gc->form == GDN_A_LOG ? A_log[h] : -exp(A_log[h]));
    }
    if (gc->dt_bias) {
        dtb = tensor_alloc(gc->idt, 1, hs);
        tensor_fill_uniform(&dtb, r, -2.0, 2.0);
    }

    /* expectations from the rounded inputs */
    double *ge = xmalloc((size_t)n * sizeof *ge), *be = xmalloc((size_t)n * sizeof *be);
    for (int64_t i = 0; i < n; i++) {
        int64_t h = i % HV;
        double dt = gc->dt_bias ? tensor_get(&dtb, h) : 0.0;
        ge[i] = expect_g(tensor_get(&a, i), tensor_get(&A, h), dt, gc->form, gc->threshold);
        be[i] = expect_beta(tensor_get(&b, i), gc->neg);
    }

    size_t fbytes = tensor_bytes(&fa);
    void *fa_snap = xmalloc(fbytes), *fb_snap = xmalloc(fbytes);
    memcpy(fa_snap, fa.data, fbytes);
    memcpy(fb_snap, fb.data, fbytes);

    gdn_tensor g_out, beta_out;
    gdn_tensor g_own = gdn_tensor_none(), beta_own = gdn_tensor_none();
    if (gc->in_place) {
        g_out = a;
        beta_out = b;
    } else {
        g_own = tensor_alloc(gc->odt, nd, gc->shape);
        beta_own = tensor_alloc(gc->odt, nd, gc->shape);
        memset(g_own.data, 0x7f, tensor_bytes(&g_own));
        memset(beta_own.data, 0x7f, tensor_bytes(&beta_own));
        g_out = g_own;
        beta_out = beta_own;
    }

    gdn_gating_params p = gdn_gating_default_params();
    p.A = A;
    p.dt_bias = dtb;
    p.a_form = gc->form;
    p.softplus_threshold = gc->threshold;
    p.allow_neg_eigval = gc->neg;
    gdn_tensor none = gdn_tensor_none();
    CHECK_OK(gdn_gating(ctx, &a, gc->with_b ? &b : &none, &p, &g_out, gc->with_b ? &beta_out : &none),
             ctx);

    const gdn_dtype odt = gc->in_place ? gc->idt : gc->odt;
    errsum eg = {0, 0, 0}, eb = {0, 0, 0};
    int64_t nan_g = 0, nan_b = 0, out_of_range = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = tensor_get(&g_out, i);
        err_add(&eg, g, ge[i]);
        if (isnan(g))
            nan_g++;
        if (gc->with_b) {
            double bt = tensor_get(&beta_out, i);
            err_add(&eb, bt, be[i]);
            if (isnan(bt))
                nan_b++;
            if (!(bt >= 0.0 && bt <= (gc->neg ? 2.0 : 1.0)))
                out_of_range++;
        }
    }
    CHECK_ERR(err_value(&eg), tol_for(odt), "%s: g", gc->name);
    CHECK(nan_g == 0, "%s: %lld NaN in g", gc->name, (long long)nan_g);
    if (gc->with_b) {
        CHECK_ERR(err_value(&eb), tol_for(odt), "%s: beta", gc->name);
        CHECK(nan_b == 0, "%s: %lld NaN in beta", gc->name, (long long)nan_b);
        CHECK(out_of_range == 0, "%s: %lld beta values outside [0, %d]", gc->name,
              (long long)out_of_range, gc->neg ? 2 : 1);
    } else if (!gc->in_place) {
        unsigned char *poisoned = xmalloc(tensor_bytes(&beta_own));
        memset(poisoned, 0x7f, tensor_bytes(&beta_own));
        CHECK(memcmp(beta_own.data, poisoned, tensor_bytes(&beta_own)) == 0,
              "%s: beta buffer touched without b", gc->name);
        free(poisoned);
    }
    if (!gc->in_place) {
        CHECK(memcmp(fa.data, fa_snap, fbytes) == 0, "%s: a modified", gc->name);
        CHECK(memcmp(fb.data, fb_snap, fbytes) == 0, "%s: b modified", gc->name);
    } else if (gc->strided) {
        /* the gap [HV, 2*HV) of the fused buffer is nobody's */
        int64_t bad = 0;
        gdn_tensor gap = tensor_slice(&fa, nd - 1, HV, HV);
        gdn_tensor gap0 = gap;
        gap0.data = (char *)fa_snap + ((char *)gap.data - (char *)fa.data);
        for (int64_t i = 0; i < n; i++)
            if (!(tensor_get(&gap, i) == tensor_get(&gap0, i)))
                bad++;
        CHECK(bad == 0, "%s: %lld elements between a and b changed", gc->name, (long long)bad);
    }

    if (g_vals) {
        *g_vals = xmalloc((size_t)n * sizeof **g_vals);
        for (int64_t i = 0; i < n; i++)
            (*g_vals)[i] = tensor_get(&g_out, i);
    }
    free(fa_snap);
    free(fb_snap);
    free(ge);
    free(be);
    free(A_log);
    tensor_free(&fa);
    if (!gc->strided)
        tensor_free(&fb);
    tensor_free(&A);
    tensor_free(&dtb);
    tensor_free(&g_own);
    tensor_free(&beta_own);
}

/* ---- test groups ----------------------------------------------------------------------------- */

static void test_random(rng *r)
{
    static const gdn_dtype dts[2] = {GDN_F32, GDN_BF16};
    char name[160];
    int cfg = 0;
    for (int rank = 1; rank <= 4; rank++)
        for (int ii = 0; ii < 2; ii++)
            for (int oi = 0; oi < 2; oi++)
                for (int variant = 0; variant < 6; variant++, cfg++) {
                    gating_case gc;
                    memset(&gc, 0, sizeof gc);
                    gc.ndim = rank;
                    for (int d = 0; d < rank - 1; d++)
                        gc.shape[d] = rng_int(r, 1, 5);
                    gc.shape[rank - 1] = (cfg % 3 == 0) ? 1 : rng_int(r, 2, 48);
                    gc.idt = dts[ii];
                    gc.odt = dts[oi];
                    gc.Adt = (cfg & 1) ? GDN_F32 : dts[ii];
                    gc.dt_bias = variant != 1;
                    gc.form = GDN_A_LOG;
                    gc.threshold = GDN_SOFTPLUS_THRESHOLD;
                    gc.neg = variant == 2;
                    gc.with_b = variant != 3;
                    gc.in_place = variant == 4 && ii == oi;
                    gc.strided = variant == 5 || (variant == 4 && cfg % 2);
                    gc.alo = -12.0;
                    gc.ahi = 30.0;
                    snprintf(name, sizeof name, "random rank %d HV %lld in %s out %s variant %d",
                             rank, (long long)gc.shape[rank - 1], gdn_dtype_name(gc.idt),
                             gdn_dtype_name(gc.odt), variant);
                    gc.name = name;
                    run_gating(r, &gc, NULL, NULL);
                }
    /* the two model shapes: [T, HV] and [B, T, HV] */
    for (int ii = 0; ii < 2; ii++) {
        gating_case gc;
        memset(&gc, 0, sizeof gc);
        gc.ndim = 2;
        gc.shape[0] = 37;
        gc.shape[1] = 32;
        gc.idt = gc.odt = dts[ii];
        gc.Adt = GDN_F32;
        gc.dt_bias = 1;
        gc.threshold = GDN_SOFTPLUS_THRESHOLD;
        gc.with_b = 1;
        gc.alo = -10.0;
        gc.ahi = 25.0;
        gc.name = ii ? "[T, HV] bf16" : "[T, HV] f32";
        run_gating(r, &gc, NULL, NULL);
        gc.ndim = 3;
        gc.shape[0] = 3;
        gc.shape[1] = 19;
        gc.shape[2] = 48;
        gc.name = ii ? "[B, T, HV] bf16" : "[B, T, HV] f32";
        run_gating(r, &gc, NULL, NULL);
    }
}

/* Runs gating on a single-row problem with given a / b values; g, beta returned as doubles. */
static void gate_values(gdn_dtype idt, gdn_dtype odt, int64_t n, const double *av,
                        const double *bv, const double *A, const double *dtv, gdn_a_form form,
                        float threshold, int neg, double *g, double *beta)
{
    int64_t s[1] = {n};
    gdn_tensor a = tensor_alloc(idt, 1, s), b = tensor_alloc(idt, 1, s);
    gdn_tensor At = tensor_alloc(GDN_F32, 1, s), dt = gdn_tensor_none();
    gdn_tensor go = tensor_alloc(odt, 1, s), bo = tensor_alloc(odt, 1, s);
    for (int64_t i = 0; i < n; i++) {
        tensor_set(&a, i, av[i]);
        tensor_set(&b, i, bv ? bv[i] : 0.0);
        tensor_set(&At, i, A[i]);
    }
    if (dtv) {
        dt = tensor_alloc(GDN_F32, 1, s);
        for (int64_t i = 0; i < n; i++)
            tensor_set(&dt, i, dtv[i]);
    }
    gdn_gating_params p = gdn_gating_default_params();
    p.A = At;
    p.dt_bias = dt;
    p.a_form = form;
    p.softplus_threshold = threshold;
    p.allow_neg_eigval = neg;
    CHECK_OK(gdn_gating(ctx, &a, &b, &p, &go, &bo), ctx);
    for (int64_t i = 0; i < n; i++) {
        g[i] = tensor_get(&go, i);
        if (beta)
            beta[i] = tensor_get(&bo, i);
    }
    tensor_free(&a);
    tensor_free(&b);
    tensor_free(&At);
    tensor_free(&dt);
    tensor_free(&go);
    tensor_free(&bo);
}

/* The threshold: softplus(x) = x strictly above it, log1p(exp(x)) at and below it. */
static void test_threshold(rng *r)
{
    double A0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, g[8];
    /* default threshold 20: softplus(20.5) is exactly 20.5 */
    double a1[1] = {20.5};
    gate_values(GDN_F32, GDN_F32, 1, a1, NULL, A0, NULL, GDN_A_LOG, 20.0f, 0, g, NULL);
    CHECK(g[0] == -20.5, "threshold 20: g(20.5) = %.9g, expected exactly -20.5", g[0]);
    /* A_log = 0.75: g = (float)(-exp(0.75) * 20.5) */
    double A1[1] = {0.75};
    gate_values(GDN_F32, GDN_F32, 1, a1, NULL, A1, NULL, GDN_A_LOG, 20.0f, 0, g, NULL);
    float want = (float)(-expl(0.75L) * 20.5L);
    CHECK(g[0] == (double)want, "threshold 20, A_log 0.75: g(20.5) = %.9g, expected %.9g", g[0],
          (double)want);

    /* a small threshold makes the two branches distinguishable in f32 */
    double a2[6] = {2.0, 2.0001, 1.5, 2.5, -3.0, 0.0};
    gate_values(GDN_F32, GDN_F32, 6, a2, NULL, A0, NULL, GDN_A_LOG, 2.0f, 0, g, NULL);
    for (int i = 0; i < 6; i++) {
        double x = (double)(float)a2[i];
        double w = x > 2.0 ? -x : (double)(float)-log1pl(expl(x));
        CHECK(fabs(g[i] - w) <= 1e-6 * fabs(w), "threshold 2: g(%g) = %.9g, expected %.9g",
              a2[i], g[i], w);
    }
    CHECK(g[1] == -(double)2.0001f, "threshold 2: g(2.0001) must be exactly -a");
    CHECK(g[0] < -2.12 && g[0] > -2.13, "threshold 2: g(2) = %.9g, expected -log1p(e^2) (not -2)",
          g[0]);

    /* a huge threshold follows log1p(exp(x)) everywhere, dt_bias included */
    double a3[8], dt3[8], A3[8], g3[8];
    for (int i = 0; i < 8; i++) {
        a3[i] = (double)(float)rng_uniform(r, -30.0, 80.0);
        dt3[i] = (double)(float)rng_uniform(r, -2.0, 2.0);
        A3[i] = (double)(float)rng_uniform(r, -2.0, 2.0);
    }
    a3[0] = 0.5; /* low values, where softplus differs most from x */
    a3[1] = -1.0;
    gate_values(GDN_F32, GDN_F32, 8, a3, NULL, A3, dt3, GDN_A_LOG, 1e30f, 0, g3, NULL);
    errsum e = {0, 0, 0};
    for (int i = 0; i < 8; i++)
        err_add(&e, g3[i], (double)(-expl(A3[i]) * log1pl(expl((long double)a3[i] + dt3[i]))));
    CHECK_ERR(err_value(&e), 1e-6, "%s", "huge threshold: g follows log1p(exp(x))");

    /* a random sweep across several thresholds */
    static const float ths[4] = {0.5f, 2.0f, 20.0f, 1e30f};
    char name[96];
    for (int k = 0; k < 4; k++) {
        gating_case gc;
        memset(&gc, 0, sizeof gc);
        gc.ndim = 2;
        gc.shape[0] = 16;
        gc.shape[1] = 8;
        gc.idt = gc.odt = gc.Adt = GDN_F32;
        gc.dt_bias = 1;
        gc.threshold = ths[k];
        gc.with_b = 1;
        gc.alo = -5.0;
        gc.ahi = 60.0;
        snprintf(name, sizeof name, "threshold %g sweep", (double)ths[k]);
        gc.name = name;
        run_gating(r, &gc, NULL, NULL);
    }
}

/* GGUF's A = -exp(A_log) with GDN_A_NEG_EXP gives the g of the A_LOG form. */
static void test_gguf_form(rng *r)
{
    for (int ii = 0; ii < 2; ii++) {
        const int64_t T = 13, HV = 16;
        double A_log[16];
        for (int64_t h = 0; h < HV; h++)
            A_log[h] = (double)(float)rng_uniform(r, -3.0, 2.0);
        gating_case gc;
        memset(&gc, 0, sizeof gc);
        gc.ndim = 2;
        gc.shape[0] = T;
        gc.shape[1] = HV;
        gc.idt = ii ? GDN_BF16 : GDN_F32;
        gc.odt = GDN_F32;
        gc.Adt = GDN_F32;
        gc.dt_bias = 1;
        gc.threshold = GDN_SOFTPLUS_THRESHOLD;
        gc.with_b = 1;
        gc.alo = -10.0;
        gc.ahi = 25.0;
        /* same rng state for both runs, so a, b and dt_bias are the same */
        rng r1 = *r, r2 = *r;
        double *g_log = NULL, *g_neg = NULL;
        gc.form = GDN_A_LOG;
        gc.name = ii ? "A_LOG form (bf16 in)" : "A_LOG form";
        run_gating(&r1, &gc, &g_log, A_log);
        gc.form = GDN_A_NEG_EXP;
        gc.name = ii ? "A_NEG_EXP form (bf16 in)" : "A_NEG_EXP form";
        run_gating(&r2, &gc, &g_neg, A_log);
        *r = r1;
        errsum e = {0, 0, 0};
        for (int64_t i = 0; i < T * HV; i++)
            err_add(&e, g_neg[i], g_log[i]);
        CHECK_ERR(err_value(&e), 1e-6, "GGUF form vs A_log form (%s in)", ii ? "bf16" : "f32");
        free(g_log);
        free(g_neg);
    }
}

/* allow_neg_eigval: beta = 2 * sigmoid(b), in [0, 2]. */
static void test_neg_eigval(rng *r)
{
    double b[6] = {0.0, 1.0, -1.0, 40.0, -40.0, 3.25}, a[6] = {0}, A[6] = {0}, g[6], beta[6];
    gate_values(GDN_F32, GDN_F32, 6, a, b, A, NULL, GDN_A_LOG, 20.0f, 1, g, beta);
    for (int i = 0; i < 6; i++) {
        double w = (double)(float)(2.0L / (1.0L + expl(-(long double)b[i])));
        CHECK(fabs(beta[i] - w) <= 1e-7 * w + 1e-30, "neg eigval: beta(%g) = %.9g, expected %.9g",
              b[i], beta[i], w);
    }
    CHECK(beta[0] == 1.0, "neg eigval: beta(0) = %.9g, expected exactly 1", beta[0]);
    CHECK(beta[3] == 2.0, "neg eigval: beta(40) = %.9g, expected 2 (f32)", beta[3]);
    for (int ii = 0; ii < 2; ii++) {
        gating_case gc;
        memset(&gc, 0, sizeof gc);
        gc.ndim = 3;
        gc.shape[0] = 2;
        gc.shape[1] = 9;
        gc.shape[2] = 12;
        gc.idt = gc.odt = ii ? GDN_BF16 : GDN_F32;
        gc.Adt = GDN_F32;
        gc.dt_bias = 1;
        gc.threshold = GDN_SOFTPLUS_THRESHOLD;
        gc.neg = 1;
        gc.with_b = 1;
        gc.alo = -10.0;
        gc.ahi = 25.0;
        gc.name = ii ? "neg eigval bf16" : "neg eigval f32";
        run_gating(r, &gc, NULL, NULL);
    }
}

/* Extreme inputs: finite where the formula is finite, never NaN for finite inputs. */
static void test_extremes(rng *r)
{
    enum { NX = 16 };
    const double inf = INFINITY;
    double av[NX] = {1e4, -1e4, 88, -88, -inf, inf, 0, 20, 20.5, -745, 709, 1e-30, -1e-30, 1e38,
                     -1e38, 19.99};
    double bv[NX] = {1e4, -1e4, 88, -88, -inf, inf, 0, 1e38, -1e38, 1e-30, -745, 745, 30, -30,
                     17, -17};
    double A[NX], dt[NX];
    for (int i = 0; i < NX; i++) {
        A[i] = (double)(float)rng_uniform(r, -2.0, 2.0);
        dt[i] = (double)(float)rng_uniform(r, -2.0, 2.0);
    }
    A[13] = A[14] = -4.0; /* keep -exp(A) * 1e38 inside f32 */
    static const gdn_dtype dts[2] = {GDN_F32, GDN_BF16};
    for (int ii = 0; ii < 2; ii++)
        for (int oi = 0; oi < 2; oi++)
            for (int withdt = 0; withdt < 2; withdt++)
                for (int neg = 0; neg < 2; neg++) {
                    const gdn_dtype idt = dts[ii], odt = dts[oi];
                    double g[NX], beta[NX];
                    gate_values(idt, odt, NX, av, bv, A, withdt ? dt : NULL, GDN_A_LOG, 20.0f, neg,
                                g, beta);
                    errsum eg = {0, 0, 0}, eb = {0, 0, 0};
                    int64_t bad_g = 0, bad_b = 0;
                    for (int i = 0; i < NX; i++) {
                        /* the inputs as the op sees them (rounded to idt) */
                        double ai = ii ? gdn_bf16_to_f32(gdn_f32_to_bf16((float)av[i]))
                                       : (double)(float)av[i];
                        double bi = ii ? gdn_bf16_to_f32(gdn_f32_to_bf16((float)bv[i]))
                                       : (double)(float)bv[i];
                        double we = expect_g(ai, A[i], withdt ? dt[i] : 0.0, GDN_A_LOG, 20.0);
                        double wb = expect_beta(bi, neg);
                        err_add(&eg, g[i], we);
                        err_add(&eb, beta[i], wb);
                        if (isfinite(ai) ? !isfinite(g[i]) : isnan(g[i]))
                            bad_g++;
                        if (ai == inf && g[i] != -inf)
                            bad_g++;
                        if (!(beta[i] >= 0.0 && beta[i] <= (neg ? 2.0 : 1.0)))
                            bad_b++;
                        if (isinf(bi) && beta[i] != (bi > 0 ? (neg ? 2.0 : 1.0) : 0.0))
                            bad_b++;
                    }
                    CHECK(bad_g == 0, "extremes in %s out %s dt %d: %lld g values not finite / "
                          "wrong infinity", gdn_dtype_name(idt), gdn_dtype_name(odt), withdt,
                          (long long)bad_g);
                    CHECK(bad_b == 0, "extremes in %s out %s dt %d neg %d: %lld beta values "
                          "NaN or out of range", gdn_dtype_name(idt), gdn_dtype_name(odt), withdt,
                          neg, (long long)bad_b);
                    CHECK_ERR(err_value(&eg), tol_for(odt), "extremes in %s out %s dt %d: g",
                              gdn_dtype_name(idt), gdn_dtype_name(odt), withdt);
                    CHECK_ERR(err_value(&eb), tol_for(odt), "extremes in %s out %s neg %d: beta",
                              gdn_dtype_name(idt), gdn_dtype_name(odt), neg);
                }
}

/* Absent dt_bias is zeros; without b only g is computed; g_out == a in place. */
static void test_optional(rng *r)
{
    const int64_t T = 11, HV = 24;
    int64_t s[2] = {T, HV}, hs[1] = {HV};
    for (int ii = 0; ii < 2; ii++) {
        const gdn_dtype dt = ii ? GDN_BF16 : GDN_F32;
        gdn_tensor a = tensor_alloc(dt, 2, s), b = tensor_alloc(dt, 2, s);
        gdn_tensor A = tensor_alloc(GDN_F32, 1, hs), zeros = tensor_alloc(GDN_F32, 1, hs);
        gdn_tensor g1 = tensor_alloc(dt, 2, s), g2 = tensor_alloc(dt, 2, s);
        gdn_tensor b1 = tensor_alloc(dt, 2, s), b2 = tensor_alloc(dt, 2, s);
        tensor_fill_uniform(&a, r, -10.0, 25.0);
        tensor_fill_uniform(&b, r, -8.0, 8.0);
        tensor_fill_uniform(&A, r, -3.0, 2.0);
        gdn_gating_params p = gdn_gating_default_params();
        p.A = A;
        CHECK_OK(gdn_gating(ctx, &a, &b, &p, &g1, &b1), ctx);
        p.dt_bias = zeros;
        CHECK_OK(gdn_gating(ctx, &a, &b, &p, &g2, &b2), ctx);
        CHECK(memcmp(g1.data, g2.data, tensor_bytes(&g1)) == 0,
              "absent dt_bias differs from zeros (%s)", gdn_dtype_name(dt));
        CHECK(memcmp(b1.data, b2.data, tensor_bytes(&b1)) == 0,
              "absent dt_bias changes beta (%s)", gdn_dtype_name(dt));
        errsum e = {0, 0, 0};
        for (int64_t i = 0; i < T * HV; i++)
            err_add(&e, tensor_get(&g1, i),
                    expect_g(tensor_get(&a, i), tensor_get(&A, i % HV), 0.0, GDN_A_LOG, 20.0));
        CHECK_ERR(err_value(&e), tol_for(dt), "absent dt_bias (%s)", gdn_dtype_name(dt));

        /* without b: g only, beta_out absent too */
        gdn_tensor none = gdn_tensor_none();
        memset(g2.data, 0x7f, tensor_bytes(&g2));
        p.dt_bias = none;
        CHECK_OK(gdn_gating(ctx, &a, &none, &p, &g2, &none), ctx);
        CHECK(memcmp(g1.data, g2.data, tensor_bytes(&g1)) == 0, "g without b differs (%s)",
              gdn_dtype_name(dt));
        /* b given without beta_out (or the reverse) is an error that writes nothing */
        memset(g2.data, 0x7f, tensor_bytes(&g2));
        gdn_status st = gdn_gating(ctx, &a, &b, &p, &g2, &none);
        CHECK(st == GDN_ERR_NULL, "b without beta_out: %s, expected GDN_ERR_NULL",
              gdn_strerror(st));
        unsigned char *pz = malloc(tensor_bytes(&g2));
        memset(pz, 0x7f, tensor_bytes(&g2));
        CHECK(memcmp(g2.data, pz, tensor_bytes(&g2)) == 0, "failed call wrote g (%s)",
              gdn_dtype_name(dt));
        free(pz);

        /* in place: g_out == a, beta_out == b */
        CHECK_OK(gdn_gating(ctx, &a, &b, &p, &a, &b), ctx);
        CHECK(memcmp(a.data, g1.data, tensor_bytes(&a)) == 0, "in-place g differs (%s)",
              gdn_dtype_name(dt));
        CHECK(memcmp(b.data, b1.data, tensor_bytes(&b)) == 0, "in-place beta differs (%s)",
              gdn_dtype_name(dt));

        tensor_free(&a);
        tensor_free(&b);
        tensor_free(&A);
        tensor_free(&zeros);
        tensor_free(&g1);
        tensor_free(&g2);
        tensor_free(&b1);
        tensor_free(&b2);
    }
}

/* a and b as the two halves of each row of one fused [T, 2*HV] buffer, gated in place
 * (g over a, beta over b): the views interleave but do not overlap, so this is allowed, and the
 * results follow the formula. */
static void test_fused_in_place(rng *r)
{
    enum { T = 5, HV = 6 };
    float buf[T][2 * HV], A_log[HV], a0[T][HV], b0[T][HV];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < HV; h++) {
            buf[t][h] = a0[t][h] = (float)rng_normal(r);
            buf[t][HV + h] = b0[t][h] = (float)rng_normal(r);
        }
    for (int h = 0; h < HV; h++)
        A_log[h] = (float)rng_uniform(r, -1.0, 2.0);
    gdn_tensor a = gdn_tensor_2d(buf, GDN_F32, T, HV), b = a;
    a.stride[0] = b.stride[0] = 2 * HV;
    b.data = &buf[0][HV];
    gdn_gating_params p = gdn_gating_default_params();
    p.A = gdn_tensor_1d(A_log, GDN_F32, HV);
    CHECK_OK(gdn_gating(ctx, &a, &b, &p, &a, &b), ctx);
    errsum e = {0};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < HV; h++) {
            double x = a0[t][h], sp = x > 20 ? x : log1p(exp(x));
            err_add(&e, buf[t][h], -exp((double)A_log[h]) * sp);
            err_add(&e, buf[t][HV + h], 1.0 / (1.0 + exp(-(double)b0[t][h])));
        }
    CHECK_ERR(err_value(&e), 1e-6, "%s", "fused [T, 2*HV] buffer gated in place");
}

int main(void)
{
    rng r;
    if (!test_begin(&ctx, &r))
        return test_summary("gating");

    test_random(&r);
    test_threshold(&r);
    test_gguf_form(&r);
    test_neg_eigval(&r);
    test_extremes(&r);
    test_optional(&r);
    test_fused_in_place(&r);

    gdn_context_destroy(ctx);
    return test_summary("gating");
}
