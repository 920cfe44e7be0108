/* gdn_l2norm and gdn_rmsnorm_gated on the reference backend, against SPEC section 5 evaluated in
 * long double on plain arrays:
 *
 *   l2norm:   out = x / sqrt(sum(x^2) + eps)                       per last-dim row
 *   rmsnorm:  y = x / sqrt(mean(x^2) + eps) * w * silu(z)          norm_before_gate
 *             y = rmsnorm(x * silu(z)) * w                         gate first
 *             w = weight, 1 + weight with weight_offset, 1 when absent */
#include "harness.h"
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

static gdn_context *ctx;

static long double silu_ld(long double x) { return x / (1.0L + expl(-x)); }

/* A tensor of `shape` that is a view into a wider buffer: the last dim padded by 5 (the view
 * starts at element 2 of each row) when strided; *backing gets the buffer to free and compare. */
static gdn_tensor make_view(gdn_dtype dt, int nd, const int64_t *shape, int strided,
                            gdn_tensor *backing)
{
    int64_t bshape[4];
    memcpy(bshape, shape, (size_t)nd * sizeof *shape);
    if (strided)
        bshape[nd - 1] += 5;
    *backing = tensor_alloc(dt, nd, bshape);
    return strided ? tensor_slice(backing, nd - 1, 2, shape[nd - 1]) : *backing;
}

/* Elements of backing outside the view `v` equal those of snap (same layout). */
static int64_t gaps_changed(const gdn_tensor *backing, const void *snap, const gdn_tensor *v)
{
    int nd = backing->ndim;
    int64_t D = v->shape[nd - 1], lo = ((const char *)v->data - (const char *)backing->data) /
                                         (int64_t)gdn_dtype_size(backing->dtype);
    int64_t Db = backing->shape[nd - 1], n = tensor_numel(backing), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = i % Db;
        if (c >= lo && c < lo + D)
            continue;
        if (memcmp((const char *)backing->data + i * gdn_dtype_size(backing->dtype),
                   (const char *)snap + i * gdn_dtype_size(backing->dtype),
                   gdn_dtype_size(backing->dtype)))
            bad++;
    }
    return bad;
}

/* ---- l2norm ---------------------------------------------------------------------------------- */

typedef struct l2_case {
    int nd;
    int64_t shape[4];
    gdn_dtype xdt, odt;
    float eps;
    double scale;
    int in_place, strided, zero_rows;
} l2_case;

static void run_l2(rng *r, const l2_case *lc)
{
    const int nd = lc->nd;
    const int64_t D = lc->shape[nd - 1];
    int64_t rows = 1;
    for (int d = 0; d < nd - 1; d++)
        rows *= lc->shape[d];
    const int64_t n = rows * D;
    gdn_tensor xb, ob = gdn_tensor_none();
    gdn_tensor x = make_view(lc->xdt, nd, lc->shape, lc->strided, &xb);
    tensor_fill_normal(&xb, r, lc->scale);
    if (lc->zero_rows) /* row 0 (and the last row) all zeros */
        for (int64_t d = 0; d < D; d++) {
            tensor_set(&x, d, 0.0);
            tensor_set(&x, n - D + d, 0.0);
        }
    gdn_tensor out;
    const gdn_dtype odt = lc->in_place ? lc->xdt : lc->odt;
    if (lc->in_place) {
        out = x;
    } else {
        out = make_view(odt, nd, lc->shape, lc->strided, &ob);
        memset(ob.data, 0x7f, tensor_bytes(&ob));
    }

    double *want = xmalloc((size_t)n * sizeof *want);
    for (int64_t row = 0; row < rows; row++) {
        long double ss = 0;
        for (int64_t d = 0; d < D; d++) {
            long double v = tensor_get(&x, row * D + d);
            ss += v * v;
        }
        long double den = sqrtl(ss + (long double)lc->eps);
        for (int64_t d = 0; d < D; d++) {
            long double v = tensor_get(&x, row * D + d);
            want[row * D + d] = (double)(ss == 0 ? 0.0L : v / den);
        }
    }
    size_t xbytes = tensor_bytes(&xb);
    void *xsnap = xmalloc(xbytes), *osnap = NULL;
    memcpy(xsnap, xb.data, xbytes);
    if (!lc->in_place) {
        osnap = xmalloc(tensor_bytes(&ob));
        memcpy(osnap, ob.data, tensor_bytes(&ob));
    }

    CHECK_OK(gdn_l2norm(ctx, &x, &out, lc->eps), ctx);

    errsum e = {0, 0, 0};
    int64_t nonfinite = 0, zero_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double y = tensor_get(&out, i);
        err_add(&e, y, want[i]);
        if (!isfinite(y))
            nonfinite++;
        if (want[i] == 0.0 && y != 0.0)
            zero_bad++;
    }
    char name[160];
    snprintf(name, sizeof name, "l2norm rank %d D %lld x %s out %s eps %g scale %g%s%s%s", nd,
             (long long)D, gdn_dtype_name(lc->xdt), gdn_dtype_name(odt), (double)lc->eps,
             lc->scale, lc->in_place ? " in place" : "", lc->strided ? " strided" : "",
             lc->zero_rows ? " zero rows" : "");
    CHECK_ERR(err_value(&e), tol_for(odt), "%s", name);
    CHECK(nonfinite == 0, "%s: %lld non-finite outputs", name, (long long)nonfinite);
    CHECK(zero_bad == 0, "%s: %lld nonzero outputs for zero inputs", name, (long long)zero_bad);
    if (lc->in_place) {
        if (lc->strided)
            CHECK(gaps_changed(&xb, xsnap, &x) == 0, "%s: row padding changed", name);
    } else {
        CHECK(memcmp(xb.data, xsnap, xbytes) == 0, "%s: x modified", name);
        if (lc->strided)
            CHECK(gaps_changed(&ob, osnap, &out) == 0, "%s: out padding changed", name);
    }
    free(want);
    free(xsnap);
    free(osnap);
    tensor_free(&xb);
    tensor_free(&ob);
}

static void test_l2norm(rng *r)
{
    static const int64_t Ds[4] = {1, 3, 64, 128};
    static const gdn_dtype dts[2] = {GDN_F32, GDN_BF16};
    static const float epss[3] = {1e-6f, 0.0f, 0.5f};
    static const double scales[3] = {1.0, 1e-3, 50.0};
    int cfg = 0;
    for (int nd = 1; nd <= 4; nd++)
        for (int di = 0; di < 4; di++)
            for (int xi = 0; xi < 2; xi++)
                for (int oi = 0; oi < 2; oi++)
                    for (int variant = 0; variant < 4; variant++, cfg++) {
                        l2_case lc;
                        memset(&lc, 0, sizeof lc);
                        lc.nd = nd;
                        for (int d = 0; d < nd - 1; d++)
                            lc.shape[d] = rng_int(r, 1, 3);
                        lc.shape[nd - 1] = Ds[di];
                        lc.xdt = dts[xi];
                        lc.odt = dts[oi];
                        lc.eps = epss[cfg % 3];
                        lc.scale = scales[(cfg / 3) % 3];
                        lc.in_place = variant == 1 || (variant == 3 && xi == oi);
                        lc.strided = variant >= 2;
                        lc.zero_rows = variant == 2 && lc.eps > 0.0f;
                        run_l2(r, &lc);
                    }
    /* a zero row with eps 1e-6 gives zeros, never NaN, in every dtype */
    for (int xi = 0; xi < 2; xi++) {
        l2_case lc;
        memset(&lc, 0, sizeof lc);
        lc.nd = 2;
        lc.shape[0] = 4;
        lc.shape[1] = 64;
        lc.xdt = lc.odt = dts[xi];
        lc.eps = 1e-6f;
        lc.scale = 1.0;
        lc.zero_rows = 1;
        run_l2(r, &lc);
        lc.in_place = 1;
        run_l2(r, &lc);
    }
    /* eps sits inside the square root: D = 1, x = 1, eps = 3 gives 1/2 */
    {
        float one = 1.0f, y = 0.0f;
        gdn_tensor x = gdn_tensor_1d(&one, GDN_F32, 1), o = gdn_tensor_1d(&y, GDN_F32, 1);
        CHECK_OK(gdn_l2norm(ctx, &x, &o, 3.0f), ctx);
        CHECK(y == 0.5f, "l2norm(1) with eps 3 = %.9g, expected 0.5", (double)y);
    }
}

/* ---- rmsnorm --------------------------------------------------------------------------------- */

typedef struct rms_case {
    int nd;
    int64_t shape[4];
    gdn_dtype xdt, zdt, wdt, odt;
    int has_z, has_w, offset, nbg;
    float eps;
    double scale;
    int in_place, strided, zero_rows;
} rms_case;

static void run_rms(rng *r, const rms_case *rc)
{
    const int nd = rc->nd;
    const int64_t D = rc->shape[nd - 1];
    int64_t rows = 1;
    for (int d = 0; d < nd - 1; d++)
        rows *= rc->shape[d];
    const int64_t n = rows * D;
    gdn_tensor xb, zb = gdn_tensor_none(), ob = gdn_tensor_none(), w = gdn_tensor_none();
    gdn_tensor x = make_view(rc->xdt, nd, rc->shape, rc->strided, &xb), z = gdn_tensor_none();
    tensor_fill_normal(&xb, r, rc->scale);
    if (rc->zero_rows)
        for (int64_t d = 0; d < D; d++)
            tensor_set(&x, d, 0.0);
    if (rc->has_z) {
        z = make_view(rc->zdt, nd, rc->shape, rc->strided, &zb);
        tensor_fill_normal(&zb, r, 2.0);
    }
    if (rc->has_w) {
        int64_t ws[1] = {D};
        w = tensor_alloc(rc->wdt, 1, ws);
        if (rc->offset)
            tensor_fill_uniform(&w, r, -0.9, 0.9);
        else
            tensor_fill_normal(&w, r, 1.0);
    }
    const gdn_dtype odt = rc->in_place ? rc->xdt : rc->odt;
    gdn_tensor out;
    if (rc->in_place) {
        out = x;
    } else {
        out = make_view(odt, nd, rc->shape, rc->strided, &ob);
        memset(ob.data, 0x7f, tensor_bytes(&ob));
    }

    double *want = xmalloc((size_t)n * sizeof *want);
    long double *v = xmalloc((size_t)D * sizeof *v);
    for (int64_t row = 0; row < rows; row++) {
        long double ss = 0;
        for (int64_t d = 0; d < D; d++) {
            long double xv = tensor_get(&x, row * D + d);
            if (rc->has_z && !rc->nbg)
                xv *= silu_ld(tensor_get(&z, row * D + d));
            v[d] = xv;
            ss += xv * xv;
        }
        long double inv = 1.0L / sqrtl(ss / D + (long double)rc->eps);
        for (int64_t d = 0; d < D; d++) {
            long double wv = rc->has_w ? (long double)tensor_get(&w, d) : 0.0L;
            wv = rc->offset ? 1.0L + wv : (rc->has_w ? wv : 1.0L);
            long double y = v[d] * inv * wv;
            if (rc->has_z && rc->nbg)
                y *= silu_ld(tensor_get(&z, row * D + d));
            want[row * D + d] = (double)y;
        }
    }
    size_t xbytes = tensor_bytes(&xb);
    void *xsnap = xmalloc(xbytes), *osnap = NULL, *zsnap = NULL;
    memcpy(xsnap, xb.data, xbytes);
    if (!rc->in_place) {
        osnap = xmalloc(tensor_bytes(&ob));
        memcpy(osnap, ob.data, tensor_bytes(&ob));
    }
    if (rc->has_z) {
        zsnap = xmalloc(tensor_bytes(&zb));
        memcpy(zsnap, zb.data, tensor_bytes(&zb));
    }

    gdn_rmsnorm_args a = gdn_rmsnorm_default_args();
    a.x = x;
    a.z = z;
    a.weight = w;
    a.out = out;
    a.eps = rc->eps;
    a.weight_offset = rc->offset;
    a.norm_before_gate = rc->nbg;
    CHECK_OK(gdn_rmsnorm_gated(ctx, &a), ctx);

    errsum e = {0, 0, 0};
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        double y = tensor_get(&out, i);
        err_add(&e, y, want[i]);
        if (!isfinite(y))
            nonfinite++;
    }
    char name[200];
    snprintf(name, sizeof name,
             "rmsnorm rank %d D %lld x %s z %s w %s out %s offset %d nbg %d eps %g%s%s%s", nd,
             (long long)D, gdn_dtype_name(rc->xdt), rc->has_z ? gdn_dtype_name(rc->zdt) : "-",
             rc->has_w ? gdn_dtype_name(rc->wdt) : "-", gdn_dtype_name(odt), rc->offset, rc->nbg,
             (double)rc->eps, rc->in_place ? " in place" : "", rc->strided ? " strided" : "",
             rc->zero_rows ? " zero row" : "");
    CHECK_ERR(err_value(&e), tol_for(odt), "%s", name);
    CHECK(nonfinite == 0, "%s: %lld non-finite outputs", name, (long long)nonfinite);
    if (rc->has_z)
        CHECK(memcmp(zb.data, zsnap, tensor_bytes(&zb)) == 0, "%s: z modified", name);
    if (rc->in_place) {
        if (rc->strided)
            CHECK(gaps_changed(&xb, xsnap, &x) == 0, "%s: row padding changed", name);
    } else {
        CHECK(memcmp(xb.data, xsnap, xbytes) == 0, "%s: x modified", name);
        if (rc->strided)
            CHECK(gaps_changed(&ob, osnap, &out) == 0, "%s: out padding changed", name);
    }
    free(want);
    free(v);
    free(xsnap);
    free(osnap);
    free(zsnap);
    tensor_free(&xb);
    tensor_free(&zb);
    tensor_free(&ob);
    tensor_free(&w);
}

static void test_rmsnorm(rng *r)
{
    static const int64_t Ds[4] = {1, 3, 64, 128};
    static const gdn_dtype dts[2] = {GDN_F32, GDN_BF16};
    static const float epss[3] = {1e-6f, 1e-5f, 0.25f};
    static const double scales[3] = {1.0, 1e-3, 20.0};
    int cfg = 0;
    for (int di = 0; di < 4; di++)
        for (int xi = 0; xi < 2; xi++)
            for (int gate = 0; gate < 3; gate++)      /* no z, norm first, gate first */
                for (int wmode = 0; wmode < 4; wmode++) /* none, plain, offset, offset absent */
                    for (int variant = 0; variant < 3; variant++, cfg++) {
                        rms_case rc;
                        memset(&rc, 0, sizeof rc);
                        rc.nd = 1 + cfg % 4;
                        for (int d = 0; d < rc.nd - 1; d++)
                            rc.shape[d] = rng_int(r, 1, 3);
                        rc.shape[rc.nd - 1] = Ds[di];
                        rc.xdt = dts[xi];
                        rc.zdt = (cfg & 1) ? dts[xi] : dts[1 - xi];
                        rc.wdt = (cfg & 2) ? GDN_F32 : dts[xi];
                        rc.odt = (cfg % 5 == 0) ? dts[1 - xi] : dts[xi];
                        rc.has_z = gate != 0;
                        rc.nbg = gate != 2;
                        if (gate == 0)
                            rc.nbg = cfg & 1; /* irrelevant without z */
                        rc.has_w = wmode == 1 || wmode == 2;
                        rc.offset = wmode >= 2;
                        rc.eps = epss[cfg % 3];
                        rc.scale = scales[(cfg / 3) % 3];
                        rc.in_place = variant == 1 || (variant == 2 && cfg % 2);
                        rc.strided = variant == 2;
                        rc.zero_rows = variant == 0 && cfg % 4 == 3;
                        run_rms(r, &rc);
                    }
    /* the two forms differ, and the default is norm-before-gate */
    {
        const int64_t D = 4;
        float xv[4] = {1, 2, 3, 4}, zv[4] = {1, -1, 2, 0.5f}, y1[4], y2[4], y3[4];
        gdn_rmsnorm_args a = gdn_rmsnorm_default_args();
        CHECK(a.norm_before_gate != 0, "default norm_before_gate is %d, expected nonzero",
              (int)a.norm_before_gate);
        a.x = gdn_tensor_1d(xv, GDN_F32, D);
        a.z = gdn_tensor_1d(zv, GDN_F32, D);
        a.eps = 0.0f;
        a.out = gdn_tensor_1d(y1, GDN_F32, D);
        CHECK_OK(gdn_rmsnorm_gated(ctx, &a), ctx);
        a.norm_before_gate = 0;
        a.out = gdn_tensor_1d(y2, GDN_F32, D);
        CHECK_OK(gdn_rmsnorm_gated(ctx, &a), ctx);
        /* y1 = x / rms(x) * silu(z); rms(1,2,3,4) = sqrt(7.5) */
        errsum e1 = {0, 0, 0}, e2 = {0, 0, 0};
        long double g[4], ss = 0;
        for (int d = 0; d < 4; d++) {
            g[d] = (long double)xv[d] * silu_ld(zv[d]);
            ss += g[d] * g[d];
        }
        for (int d = 0; d < 4; d++) {
            err_add(&e1, y1[d], (double)(xv[d] / sqrtl(7.5L) * silu_ld(zv[d])));
            err_add(&e2, y2[d], (double)(g[d] / sqrtl(ss / 4)));
        }
        CHECK_ERR(err_value(&e1), 1e-6, "%s", "rmsnorm hand case, norm before gate");
        CHECK_ERR(err_value(&e2), 1e-6, "%s", "rmsnorm hand case, gate first");
        /* weight_offset with weight 0 equals no weight */
        float zero_w[4] = {0, 0, 0, 0};
        a.norm_before_gate = 1;
        a.weight = gdn_tensor_1d(zero_w, GDN_F32, D);
        a.weight_offset = 1;
        a.out = gdn_tensor_1d(y3, GDN_F32, D);
        CHECK_OK(gdn_rmsnorm_gated(ctx, &a), ctx);
        CHECK(memcmp(y1, y3, sizeof y1) == 0, "weight_offset with zero weight differs from none");
    }
}

int main(void)
{
    rng r;
    if (!test_begin(&ctx, &r))
        return test_summary("norm");

    test_l2norm(&r);
    test_rmsnorm(&r);

    gdn_context_destroy(ctx);
    return test_summary("norm");
}
