/* gdn_conv1d and gdn_conv1d_update on the reference backend, against a direct evaluation of
 * SPEC section 4 on plain double arrays:
 *
 *   y[c][t] = act( bias[c] + sum_{i<W} w[c][i] * x[c][t - (W-1) + i] )
 *
 * where positions before a sequence's start read its conv state (or zeros), and the new state is
 * the last W-1 inputs of the sequence extended by its old state. */
#include "harness.h"
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

static gdn_context *ctx;

/* ---- small helpers --------------------------------------------------------------------------- */

static void *dup_bytes(const void *p, size_t bytes)
{
    void *q = xmalloc(bytes);
    if (bytes)
        memcpy(q, p, bytes);
    return q;
}

/* A byte pattern that reads as a huge finite number in f32 and bf16 (3.39e38). */
static void poison(void *p, size_t bytes) { memset(p, 0x7f, bytes); }

/* All elements of t (flat row-major over its shape, honouring strides) as doubles. */
static double *read_all(const gdn_tensor *t)
{
    int64_t n = tensor_numel(t);
    double *d = xmalloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = tensor_get(t, i);
    return d;
}

/* Index tensor [n] of dtype dt holding v. */
static gdn_tensor index_tensor(gdn_dtype dt, int64_t n, const int64_t *v)
{
    int64_t shape[1] = {n};
    gdn_tensor t = tensor_alloc(dt, 1, shape);
    for (int64_t i = 0; i < n; i++) {
        if (dt == GDN_I64)
            ((int64_t *)t.data)[i] = v[i];
        else if (dt == GDN_I32)
            ((int32_t *)t.data)[i] = (int32_t)v[i];
        else
            ((uint8_t *)t.data)[i] = (uint8_t)v[i];
    }
    return t;
}

/* ---- the independent expectation ------------------------------------------------------------ */

/* Input at position pos of one channel of the extended sequence: pos >= 0 is x row pos (rows of
 * C values), pos in [-(W-1), 0) is the old state (init[c][W-1+pos], oldest first), or 0. */
static double ext_at(const double *x, const double *init, int64_t C, int64_t W, int64_t c,
                     int64_t pos)
{
    if (pos >= 0)
        return x[pos * C + c];
    return init ? init[c * (W - 1) + (W - 1) + pos] : 0.0;
}

/* One sequence of L tokens. x: [L][C]; init: [C][W-1] or NULL (zeros); w: [C][W]; bias: [C] or
 * NULL. Writes y: [L][C] and st: [C][W-1] (may be NULL). */
static void conv_expect(int64_t L, int64_t C, int64_t W, const double *x, const double *init,
                        const double *w, const double *bias, gdn_activation act, double *y,
                        double *st)
{
    for (int64_t c = 0; c < C; c++) {
        for (int64_t t = 0; t < L; t++) {
            long double acc = bias ? bias[c] : 0.0;
            for (int64_t i = 0; i < W; i++)
                acc += (long double)w[c * W + i] * ext_at(x, init, C, W, c, t - (W - 1) + i);
            long double v = act == GDN_ACT_SILU ? acc / (1.0L + expl(-acc)) : acc;
            y[t * C + c] = (double)v;
        }
        if (st)
            for (int64_t j = 0; j < W - 1; j++)
                st[c * (W - 1) + j] = ext_at(x, init, C, W, c, L - (W - 1) + j);
    }
}

/* Slot s of a [S, C, W-1] pool view as [C][W-1] doubles. */
static void read_slot(const gdn_tensor *pool, int64_t s, double *dst)
{
    int64_t C = pool->shape[1], Wm1 = pool->shape[2];
    for (int64_t i = 0; i < C * Wm1; i++)
        dst[i] = tensor_get(pool, s * C * Wm1 + i);
}

/* Number of elements of slot s that differ from st (exact comparison). */
static int64_t slot_mismatches(const gdn_tensor *pool, int64_t s, const double *st)
{
    int64_t C = pool->shape[1], Wm1 = pool->shape[2], bad = 0;
    for (int64_t i = 0; i < C * Wm1; i++)
        if (!(tensor_get(pool, s * C * Wm1 + i) == st[i]))
            bad++;
    return bad;
}

/* Element offset (from the backing buffer's start) of pool element [s][c][j]. */
static int64_t pool_elem(const gdn_tensor *pool, int64_t base, int64_t s, int64_t c, int64_t j)
{
    return base + s * pool->stride[0] + c * pool->stride[1] + j * pool->stride[2];
}

/* Elements of a backing buffer not marked in `written` must equal the snapshot, byte for byte. */
static int64_t untouched_mismatches(const void *buf, const void *snap, const unsigned char *written,
                                    int64_t n, size_t es)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!written[i] && memcmp((const char *)buf + i * es, (const char *)snap + i * es, es))
            bad++;
    return bad;
}

/* ---- one prefill call, fully checked ---------------------------------------------------------- */

typedef struct conv_case {
    const char *name;
    int64_t B, T, C, W;           /* T ignored with lens (varlen: T = sum of lens, B = 1) */
    gdn_dtype xdt, wdt, odt;
    int bias;
    gdn_dtype bdt;
    gdn_activation act;
    int64_t nseq;                 /* varlen: number of sequences (lens[nseq]) */
    const int64_t *lens;          /* NULL: equal-length batch */
    gdn_dtype cudt;
    int64_t S;                    /* pool slots; 0: no conv_state */
    gdn_dtype sdt;
    const int64_t *slots;         /* NULL: slot n */
    gdn_dtype slotdt;
    const int64_t *has_init;      /* NULL: absent (all 1) */
    gdn_dtype hidt;
    int transposed;               /* pool buffer laid out [S, W-1, C], passed as a view */
    int in_place;                 /* out == x */
    int strided;                  /* x (and out) are views of wider buffers */
} conv_case;

static void run_conv_case(rng *r, const conv_case *cc)
{
    const int64_t C = cc->C, W = cc->W, B = cc->lens ? 1 : cc->B;
    const int64_t N = cc->lens ? cc->nseq : B;
    int64_t T = cc->T;
    if (cc->lens) {
        T = 0;
        for (int64_t n = 0; n < N; n++)
            T += cc->lens[n];
    }
    const gdn_dtype odt = cc->in_place ? cc->xdt : cc->odt;
    const size_t xes = gdn_dtype_size(cc->xdt), oes = gdn_dtype_size(odt);

    /* x: a [B, T + padT, Cx] buffer with the view at channel xoff */
    int64_t padT = cc->strided ? 3 : 0, Cx = cc->strided ? 3 * C : C, xoff = cc->strided ? C : 0;
    int64_t xn = B * (T + padT) * Cx;
    void *xb = xmalloc((size_t)xn * xes);
    gdn_tensor xall = gdn_tensor_1d(xb, cc->xdt, xn);
    tensor_fill_normal(&xall, r, 1.0);
    gdn_tensor x = gdn_tensor_3d((char *)xb + xoff * xes, cc->xdt, B, T, C);
    x.stride[0] = (T + padT) * Cx;
    x.stride[1] = Cx;

    /* out: x itself, or a poisoned [B, T, Co] buffer with the view at channel ooff */
    gdn_tensor out;
    void *ob;
    int64_t on, ooff;
    if (cc->in_place) {
        out = x;
        ob = xb;
        on = xn;
        ooff = xoff;
    } else {
        int64_t Co = cc->strided ? 2 * C : C;
        ooff = cc->strided ? C / 2 : 0;
        on = B * T * Co;
        ob = xmalloc((size_t)on * oes);
        poison(ob, (size_t)on * oes);
        out = gdn_tensor_3d((char *)ob + ooff * oes, odt, B, T, C);
        out.stride[0] = T * Co;
        out.stride[1] = Co;
    }

    int64_t wshape[2] = {C, W}, bshape[1] = {C};
    gdn_tensor weight = tensor_alloc(cc->wdt, 2, wshape);
    tensor_fill_normal(&weight, r, 0.5);
    gdn_tensor bias = gdn_tensor_none();
    if (cc->bias) {
        bias = tensor_alloc(cc->bdt, 1, bshape);
        tensor_fill_normal(&bias, r, 0.5);
    }

    gdn_tensor slots = gdn_tensor_none(), hinit = gdn_tensor_none(), cu = gdn_tensor_none();
    if (cc->slots)
        slots = index_tensor(cc->slotdt, N, cc->slots);
    if (cc->has_init)
        hinit = index_tensor(cc->hidt, N, cc->has_init);
    int64_t *cuv = xmalloc((size_t)(N + 1) * sizeof *cuv);
    cuv[0] = 0;
    for (int64_t n = 0; n < N; n++)
        cuv[n + 1] = cuv[n] + (cc->lens ? cc->lens[n] : T);
    if (cc->lens)
        cu = index_tensor(cc->cudt, N + 1, cuv);

    /* pool: poisoned everywhere, random in the slots that sequences continue from */
    const size_t ses = gdn_dtype_size(cc->sdt);
    int64_t pn = cc->S * (W - 1) * C;
    void *pb = NULL;
    gdn_tensor pool = gdn_tensor_none();
    if (cc->S) {
        pb = xmalloc((size_t)pn * ses);
        poison(pb, (size_t)pn * ses);
        pool = gdn_tensor_3d(pb, cc->sdt, cc->S, C, W - 1);
        if (cc->transposed) {
            pool.stride[0] = (W - 1) * C;
            pool.stride[1] = 1;
            pool.stride[2] = C;
        }
        for (int64_t n = 0; n < N; n++) {
            int64_t s = cc->slots ? cc->slots[n] : n;
            if (s >= 0 && (!cc->has_init || cc->has_init[n]))
                for (int64_t i = 0; i < C * (W - 1); i++)
                    tensor_set(&pool, s * C * (W - 1) + i, rng_normal(r));
        }
    }

    /* expectation, from the (already rounded) inputs */
    double *xd = read_all(&x), *wd = read_all(&weight), *bd = cc->bias ? read_all(&bias) : NULL;
    double *yexp = xmalloc((size_t)(B * T * C) * sizeof *yexp);
    double *stexp = xmalloc((size_t)(N * C * (W - 1)) * sizeof *stexp);
    double *init = xmalloc((size_t)(C * (W - 1)) * sizeof *init);
    for (int64_t n = 0; n < N; n++) {
        int64_t row = cc->lens ? 0 : n, t0 = cuv[n], L = cuv[n + 1] - cuv[n];
        int64_t s = cc->S ? (cc->slots ? cc->slots[n] : n) : -1;
        if (cc->S && s < 0)
            continue;
        bool from_state = cc->S && (!cc->has_init || cc->has_init[n]);
        if (from_state)
            read_slot(&pool, s, init);
        const int64_t base = (row * T + (cc->lens ? t0 : 0)) * C;
        conv_expect(L, C, W, xd + base, from_state ? init : NULL, wd, bd, cc->act, yexp + base,
                    stexp + n * C * (W - 1));
    }

    void *osnap = dup_bytes(ob, (size_t)on * oes);
    void *xsnap = cc->in_place ? NULL : dup_bytes(xb, (size_t)xn * xes);
    void *psnap = cc->S ? dup_bytes(pb, (size_t)pn * ses) : NULL;

    gdn_conv1d_args a = gdn_conv1d_default_args();
    a.x = x;
    a.weight = weight;
    a.bias = bias;
    a.out = out;
    a.conv_state = pool;
    a.state_slots = slots;
    a.has_initial_state = hinit;
    a.cu_seqlens = cu;
    a.activation = cc->act;
    CHECK_OK(gdn_conv1d(ctx, &a), ctx);

    /* outputs of the sequences that ran, per sequence; every other out byte untouched */
    unsigned char *owritten = calloc((size_t)on, 1);
    unsigned char *pwritten = calloc((size_t)(pn ? pn : 1), 1);
    for (int64_t n = 0; n < N; n++) {
        int64_t row = cc->lens ? 0 : n, t0 = cuv[n], L = cuv[n + 1] - cuv[n];
        int64_t s = cc->S ? (cc->slots ? cc->slots[n] : n) : -1;
        if (cc->S && s < 0)
            continue;
        errsum e = {0, 0, 0};
        const int64_t tb = cc->lens ? t0 : 0;
        for (int64_t t = 0; t < L; t++)
            for (int64_t c = 0; c < C; c++) {
                int64_t flat = (row * T + tb + t) * C + c;
                err_add(&e, tensor_get(&out, flat), yexp[flat]);
                owritten[ooff + row * out.stride[0] + (tb + t) * out.stride[1] + c] = 1;
            }
        CHECK_ERR(err_value(&e), tol_for(odt), "%s: out of sequence %lld (len %lld)", cc->name,
                    (long long)n, (long long)L);
        if (cc->S) {
            int64_t bad = slot_mismatches(&pool, s, stexp + n * C * (W - 1));
            CHECK(bad == 0, "%s: conv state of sequence %lld (slot %lld, len %lld): %lld of %lld "
                  "values differ from the last W-1 inputs", cc->name, (long long)n, (long long)s,
                  (long long)L, (long long)bad, (long long)(C * (W - 1)));
            for (int64_t c = 0; c < C; c++)
                for (int64_t j = 0; j < W - 1; j++)
                    pwritten[pool_elem(&pool, 0, s, c, j)] = 1;
        }
    }
    int64_t bad = untouched_mismatches(ob, osnap, owritten, on, oes);
    CHECK(bad == 0, "%s: %lld out-buffer elements outside the written rows changed", cc->name,
          (long long)bad);
    if (!cc->in_place)
        CHECK(memcmp(xb, xsnap, (size_t)xn * xes) == 0, "%s: x was modified", cc->name);
    if (cc->S) {
        bad = untouched_mismatches(pb, psnap, pwritten, pn, ses);
        CHECK(bad == 0, "%s: %lld pool elements outside the sequences' slots changed", cc->name,
              (long long)bad);
    }

    free(owritten);
    free(pwritten);
    free(osnap);
    free(xsnap);
    free(psnap);
    free(xd);
    free(wd);
    free(bd);
    free(yexp);
    free(stexp);
    free(init);
    free(cuv);
    free(xb);
    if (!cc->in_place)
        free(ob);
    free(pb);
    tensor_free(&weight);
    tensor_free(&bias);
    tensor_free(&slots);
    tensor_free(&hinit);
    tensor_free(&cu);
}

/* ---- the test groups ------------------------------------------------------------------------- */

/* Random problems over channels, widths, dtypes, bias, activation and state handling. */
static void test_random(rng *r)
{
    static const int64_t Cs[] = {7, 33}, Ws[] = {2, 3, 4, 5}, Ts[] = {1, 2, 3, 17};
    static const gdn_dtype dts[] = {GDN_F32, GDN_BF16};
    static const int64_t slots3[] = {2, 0}, hinit3[] = {1, 0};
    char name[160];
    int cfg = 0;
    for (int ci = 0; ci < 2; ci++)
        for (int wi = 0; wi < 4; wi++)
            for (int di = 0; di < 2; di++)
                for (int bias = 0; bias < 2; bias++)
                    for (int act = 0; act < 2; act++)
                        for (int mode = 0; mode < 3; mode++, cfg++) {
                            conv_case cc;
                            memset(&cc, 0, sizeof cc);
                            cc.B = 2;
                            cc.T = Ts[cfg % 4];
                            cc.C = Cs[ci];
                            cc.W = Ws[wi];
                            cc.xdt = dts[di];
                            cc.wdt = (cfg & 1) ? dts[di] : GDN_F32;
                            cc.odt = (cfg % 5 == 4) ? GDN_F32 : dts[di];
                            cc.bias = bias;
                            cc.bdt = (cfg & 2) ? dts[di] : GDN_F32;
                            cc.act = act ? GDN_ACT_NONE : GDN_ACT_SILU;
                            if (mode >= 1) { /* a pool: S = 3, one slot stays unused */
                                cc.S = 3;
                                cc.sdt = mode == 1 ? dts[di] : GDN_F32;
                            }
                            if (mode == 2) { /* indirection and a fresh sequence */
                                cc.slots = slots3;
                                cc.slotdt = GDN_I32;
                                cc.has_init = hinit3;
                                cc.hidt = GDN_U8;
                            }
                            snprintf(name, sizeof name,
                                     "random C=%lld W=%lld x=%s w=%s out=%s bias=%d act=%s T=%lld "
                                     "state=%d", (long long)cc.C, (long long)cc.W,
                                     gdn_dtype_name(cc.xdt), gdn_dtype_name(cc.wdt),
                                     gdn_dtype_name(cc.odt), bias, act ? "none" : "silu",
                                     (long long)cc.T, mode);
                            cc.name = name;
                            run_conv_case(r, &cc);
                        }
}

/* The new state is the last W-1 inputs, including old state when T < W-1 (exact values). */
static void test_state_short(rng *r)
{
    static const int64_t Ws[] = {2, 4, 5, 8};
    char name[128];
    for (int wi = 0; wi < 4; wi++)
        for (int64_t T = 0; T <= Ws[wi]; T++)
            for (int di = 0; di < 2; di++) {
                conv_case cc;
                memset(&cc, 0, sizeof cc);
                cc.B = 3;
                cc.T = T;
                cc.C = 5;
                cc.W = Ws[wi];
                cc.xdt = cc.wdt = cc.odt = cc.sdt = di ? GDN_BF16 : GDN_F32;
                cc.bias = 1;
                cc.bdt = GDN_F32;
                cc.act = GDN_ACT_SILU;
                cc.S = 3;
                snprintf(name, sizeof name, "short state W=%lld T=%lld %s", (long long)cc.W,
                         (long long)T, gdn_dtype_name(cc.xdt));
                cc.name = name;
                run_conv_case(r, &cc);
            }
}

/* Varlen batches with lengths 0, 1, 2 and longer, int32 and int64 offsets. */
static void test_varlen(rng *r)
{
    static const int64_t lens[] = {0, 1, 2, 5, 0, 3, 9, 1};
    static const int64_t slots[] = {7, 2, 9, 0, 5, 1, 3, 8};
    static const int64_t slots_neg[] = {7, -1, 9, 0, -3, 1, 3, -1};
    static const int64_t hinit[] = {1, 0, 1, 1, 0, 0, 1, 1};
    static const int64_t Ws[] = {2, 4, 5};
    char name[160];
    for (int wi = 0; wi < 3; wi++)
        for (int di = 0; di < 2; di++)
            for (int cui = 0; cui < 2; cui++)
                for (int mode = 0; mode < 4; mode++) {
                    conv_case cc;
                    memset(&cc, 0, sizeof cc);
                    cc.C = wi == 1 ? 33 : 7;
                    cc.W = Ws[wi];
                    cc.xdt = cc.wdt = cc.odt = di ? GDN_BF16 : GDN_F32;
                    cc.bias = mode != 1;
                    cc.bdt = GDN_F32;
                    cc.act = mode == 2 ? GDN_ACT_NONE : GDN_ACT_SILU;
                    cc.nseq = 8;
                    cc.lens = lens;
                    cc.cudt = cui ? GDN_I64 : GDN_I32;
                    if (mode >= 1) { /* pool with a permutation of slots, some fresh */
                        cc.S = 10;
                        cc.sdt = mode == 3 ? GDN_F32 : cc.xdt;
                        cc.slots = mode == 3 ? slots_neg : slots;
                        cc.slotdt = cui ? GDN_I32 : GDN_I64;
                        cc.has_init = mode == 1 ? NULL : hinit;
                        cc.hidt = cui ? GDN_U8 : GDN_I32;
                        cc.transposed = mode == 2;
                    }
                    snprintf(name, sizeof name, "varlen W=%lld C=%lld %s cu=%s mode=%d",
                             (long long)cc.W, (long long)cc.C, gdn_dtype_name(cc.xdt),
                             gdn_dtype_name(cc.cudt), mode);
                    cc.name = name;
                    run_conv_case(r, &cc);
                }
}

/* Slot indirection with a permutation and negative slots, has_initial_state = 0 on a poisoned
 * slot; untouched rows and slots stay byte-identical. */
static void test_slots(rng *r)
{
    static const int64_t slots[] = {3, -1, 0, 5};
    static const int64_t hinit[] = {1, 1, 0, 1};
    static const int64_t slots_all_neg[] = {-1, -2, -7, -1};
    char name[128];
    for (int di = 0; di < 2; di++)
        for (int sdi = 0; sdi < 2; sdi++)
            for (int64_t T = 1; T <= 9; T += 4) {
                conv_case cc;
                memset(&cc, 0, sizeof cc);
                cc.B = 4;
                cc.T = T;
                cc.C = 33;
                cc.W = 4;
                cc.xdt = cc.wdt = cc.odt = di ? GDN_BF16 : GDN_F32;
                cc.bias = 1;
                cc.bdt = cc.xdt;
                cc.act = GDN_ACT_SILU;
                cc.S = 6;
                cc.sdt = cc.xdt;
                cc.slots = slots;
                cc.slotdt = sdi ? GDN_I64 : GDN_I32;
                cc.has_init = hinit;
                cc.hidt = sdi ? GDN_I32 : GDN_U8;
                snprintf(name, sizeof name, "slots %s slot=%s T=%lld", gdn_dtype_name(cc.xdt),
                         gdn_dtype_name(cc.slotdt), (long long)T);
                cc.name = name;
                run_conv_case(r, &cc);
                cc.slots = slots_all_neg;
                snprintf(name, sizeof name, "all slots negative %s T=%lld",
                         gdn_dtype_name(cc.xdt), (long long)T);
                run_conv_case(r, &cc);
            }
}

/* The same problem through a [S, C, W-1] pool and through a [S, W-1, C] buffer passed as a
 * transposed view must give identical outputs and states; the transposed buffer holds the state
 * as [s][j][c]. */
static void test_transposed_state(rng *r)
{
    static const int64_t Ts[] = {2, 7};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 2; ti++) {
            const gdn_dtype dt = di ? GDN_BF16 : GDN_F32;
            const int64_t B = 2, T = Ts[ti], C = 33, W = 4, S = 3;
            int64_t xs[3] = {B, T, C}, ws[2] = {C, W}, ps[3] = {S, C, W - 1}, pts[3] = {S, W - 1, C};
            gdn_tensor x = tensor_alloc(dt, 3, xs), w = tensor_alloc(dt, 2, ws);
            gdn_tensor out1 = tensor_alloc(dt, 3, xs), out2 = tensor_alloc(dt, 3, xs);
            gdn_tensor pc = tensor_alloc(dt, 3, ps), ptbuf = tensor_alloc(dt, 3, pts);
            tensor_fill_normal(&x, r, 1.0);
            tensor_fill_normal(&w, r, 0.5);
            tensor_fill_normal(&pc, r, 1.0);
            gdn_tensor pt = ptbuf;
            pt.shape[1] = C;
            pt.shape[2] = W - 1;
            pt.stride[0] = (W - 1) * C;
            pt.stride[1] = 1;
            pt.stride[2] = C;
            tensor_copy(&pt, &pc);
            int64_t slotv[2] = {2, 0};
            gdn_tensor slots = index_tensor(GDN_I32, 2, slotv);

            /* expectation */
            double *xd = read_all(&x), *wd = read_all(&w);
            double init[2][33 * 3], yexp[2 * 7 * 33], st[2][33 * 3];
            for (int64_t n = 0; n < B; n++) {
                read_slot(&pc, slotv[n], init[n]);
                conv_expect(T, C, W, xd + n * T * C, init[n], wd, NULL, GDN_ACT_SILU,
                            yexp + n * T * C, st[n]);
            }

            gdn_conv1d_args a = gdn_conv1d_default_args();
            a.x = x;
            a.weight = w;
            a.out = out1;
            a.conv_state = pc;
            a.state_slots = slots;
            CHECK_OK(gdn_conv1d(ctx, &a), ctx);
            a.out = out2;
            a.conv_state = pt;
            CHECK_OK(gdn_conv1d(ctx, &a), ctx);

            errsum e = {0, 0, 0};
            for (int64_t i = 0; i < B * T * C; i++)
                err_add(&e, tensor_get(&out2, i), yexp[i]);
            CHECK_ERR(err_value(&e), tol_for(dt), "transposed state %s T=%ld: out",
                        gdn_dtype_name(dt), (long)T);
            CHECK(memcmp(out1.data, out2.data, tensor_bytes(&out1)) == 0,
                  "transposed state %s T=%ld: out differs from the [S, C, W-1] layout",
                  gdn_dtype_name(dt), (long)T);
            int64_t bad = 0, bad_raw = 0;
            for (int64_t n = 0; n < B; n++) {
                bad += slot_mismatches(&pt, slotv[n], st[n]);
                bad += slot_mismatches(&pc, slotv[n], st[n]);
                /* the raw transposed buffer: element [s][j][c] */
                for (int64_t c = 0; c < C; c++)
                    for (int64_t j = 0; j < W - 1; j++) {
                        int64_t off = (slotv[n] * (W - 1) + j) * C + c;
                        double v = tensor_get(&ptbuf, off);
                        if (!(v == st[n][c * (W - 1) + j]))
                            bad_raw++;
                    }
            }
            CHECK(bad == 0, "transposed state %s T=%ld: %lld final state values differ",
                  gdn_dtype_name(dt), (long)T, (long long)bad);
            CHECK(bad_raw == 0, "transposed state %s T=%ld: %lld values misplaced in the [S, W-1, C] "
                  "buffer", gdn_dtype_name(dt), (long)T, (long long)bad_raw);
            /* the untouched slot 1 is still the copy of pc's slot 1 */
            bad = 0;
            for (int64_t i = C * (W - 1); i < 2 * C * (W - 1); i++)
                if (!(tensor_get(&pt, i) == tensor_get(&pc, i)))
                    bad++;
            CHECK(bad == 0, "transposed state: unused slot changed (%lld values)", (long long)bad);

            /* decode through the transposed view equals decode through the plain layout */
            int64_t us[2] = {B, C};
            gdn_tensor xu = tensor_alloc(dt, 2, us), o1 = tensor_alloc(dt, 2, us),
                       o2 = tensor_alloc(dt, 2, us);
            tensor_fill_normal(&xu, r, 1.0);
            double *xud = read_all(&xu);
            gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
            u.x = xu;
            u.weight = w;
            u.out = o1;
            u.conv_state = pc;
            u.state_slots = slots;
            CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);
            u.out = o2;
            u.conv_state = pt;
            CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);
            e = (errsum){0, 0, 0};
            bad = 0;
            for (int64_t n = 0; n < B; n++) {
                double y1[33], st2[33 * 3];
                conv_expect(1, C, W, xud + n * C, st[n], wd, NULL, GDN_ACT_SILU, y1, st2);
                for (int64_t c = 0; c < C; c++)
                    err_add(&e, tensor_get(&o2, n * C + c), y1[c]);
                bad += slot_mismatches(&pt, slotv[n], st2);
                bad += slot_mismatches(&pc, slotv[n], st2);
            }
            CHECK_ERR(err_value(&e), tol_for(dt), "transposed state update %s", gdn_dtype_name(dt));
            CHECK(memcmp(o1.data, o2.data, tensor_bytes(&o1)) == 0,
                  "transposed state update %s: out differs from the plain layout", gdn_dtype_name(dt));
            CHECK(bad == 0, "transposed state update %s: %lld state values differ",
                  gdn_dtype_name(dt), (long long)bad);

            free(xd);
            free(wd);
            free(xud);
            tensor_free(&x);
            tensor_free(&w);
            tensor_free(&out1);
            tensor_free(&out2);
            tensor_free(&pc);
            tensor_free(&ptbuf);
            tensor_free(&slots);
            tensor_free(&xu);
            tensor_free(&o1);
            tensor_free(&o2);
        }
}

/* out == x, and x / out as strided views of wider buffers. */
static void test_inplace_strided(rng *r)
{
    static const int64_t lens[] = {3, 0, 1, 6, 2};
    static const int64_t hinit[] = {1, 0, 1, 1, 0};
    char name[128];
    for (int di = 0; di < 2; di++)
        for (int mode = 0; mode < 6; mode++) {
            conv_case cc;
            memset(&cc, 0, sizeof cc);
            cc.B = 3;
            cc.T = 6;
            cc.C = 33;
            cc.W = 4;
            cc.xdt = cc.wdt = cc.odt = di ? GDN_BF16 : GDN_F32;
            cc.bias = 1;
            cc.bdt = GDN_F32;
            cc.act = GDN_ACT_SILU;
            cc.in_place = mode == 0 || mode == 2 || mode == 4;
            cc.strided = mode >= 2;
            if (mode % 2 == 1 || mode == 4) {
                cc.S = 4;
                cc.sdt = cc.xdt;
            }
            if (mode >= 4) {
                cc.nseq = 5;
                cc.lens = lens;
                cc.cudt = GDN_I32;
                cc.S = 5;
                cc.has_init = hinit;
                cc.hidt = GDN_U8;
            }
            snprintf(name, sizeof name, "%s%s%s %s", cc.in_place ? "in place " : "",
                     cc.strided ? "strided " : "", cc.lens ? "varlen" : "", gdn_dtype_name(cc.xdt));
            cc.name = name;
            run_conv_case(r, &cc);
        }
}

/* Prefill of the first P tokens then decode of the rest, one token at a time, equals the conv of
 * the whole sequence and one gdn_conv1d call over it (outputs and final state). */
static void test_prefill_then_decode(rng *r)
{
    static const int64_t Ws[] = {2, 4, 5}, Ps[] = {1, 3, 6};
    for (int wi = 0; wi < 3; wi++)
        for (int pi = 0; pi < 3; pi++)
            for (int di = 0; di < 2; di++) {
                const gdn_dtype dt = di ? GDN_BF16 : GDN_F32;
                const int64_t T = 11, C = 33, W = Ws[wi], P = Ps[pi], S = 2;
                const size_t es = gdn_dtype_size(dt);
                int64_t xs[3] = {1, T, C}, ws[2] = {C, W}, bs[1] = {C}, ps[3] = {S, C, W - 1};
                gdn_tensor x = tensor_alloc(dt, 3, xs), out = tensor_alloc(dt, 3, xs),
                           out1 = tensor_alloc(dt, 3, xs);
                gdn_tensor w = tensor_alloc(dt, 2, ws), bias = tensor_alloc(GDN_F32, 1, bs);
                gdn_tensor pool = tensor_alloc(dt, 3, ps), pool1 = tensor_alloc(dt, 3, ps);
                tensor_fill_normal(&x, r, 1.0);
                tensor_fill_normal(&w, r, 0.5);
                tensor_fill_normal(&bias, r, 0.5);
                tensor_fill_normal(&pool, r, 1.0);
                memcpy(pool1.data, pool.data, tensor_bytes(&pool));
                int64_t one = 1;
                gdn_tensor slots = index_tensor(GDN_I64, 1, &one);
                gdn_activation act = (wi + pi) % 2 ? GDN_ACT_NONE : GDN_ACT_SILU;

                double *xd = read_all(&x), *wd = read_all(&w), *bd = read_all(&bias);
                double init[33 * 4], st[33 * 4], *yexp = xmalloc((size_t)(T * C) * sizeof *yexp);
                read_slot(&pool, 1, init);
                conv_expect(T, C, W, xd, init, wd, bd, act, yexp, st);

                gdn_conv1d_args a = gdn_conv1d_default_args();
                a.x = tensor_slice(&x, 1, 0, P);
                a.out = tensor_slice(&out, 1, 0, P);
                a.weight = w;
                a.bias = bias;
                a.conv_state = pool;
                a.state_slots = slots;
                a.activation = act;
                CHECK_OK(gdn_conv1d(ctx, &a), ctx);
                for (int64_t t = P; t < T; t++) {
                    gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
                    u.x = gdn_tensor_2d((char *)x.data + (size_t)(t * C) * es, dt, 1, C);
                    u.out = gdn_tensor_2d((char *)out.data + (size_t)(t * C) * es, dt, 1, C);
                    u.weight = w;
                    u.bias = bias;
                    u.conv_state = pool;
                    u.state_slots = slots;
                    u.activation = act;
                    CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);
                }
                /* one call over the whole sequence */
                a.x = x;
                a.out = out1;
                a.conv_state = pool1;
                CHECK_OK(gdn_conv1d(ctx, &a), ctx);

                errsum e = {0, 0, 0}, e1 = {0, 0, 0};
                for (int64_t i = 0; i < T * C; i++) {
                    err_add(&e, tensor_get(&out, i), yexp[i]);
                    err_add(&e1, tensor_get(&out, i), tensor_get(&out1, i));
                }
                CHECK_ERR(err_value(&e), tol_for(dt), "prefill %lld + decode W=%lld %s: out",
                            (long long)P, (long long)W, gdn_dtype_name(dt));
                CHECK_ERR(err_value(&e1), tol_for(dt),
                            "prefill %lld + decode W=%lld %s: out vs one call", (long long)P,
                            (long long)W, gdn_dtype_name(dt));
                int64_t bad = slot_mismatches(&pool, 1, st);
                CHECK(bad == 0, "prefill %lld + decode W=%lld %s: %lld final state values differ",
                      (long long)P, (long long)W, gdn_dtype_name(dt), (long long)bad);
                CHECK(memcmp(pool.data, pool1.data, tensor_bytes(&pool)) == 0,
                      "prefill %lld + decode W=%lld %s: pool differs from one call", (long long)P,
                      (long long)W, gdn_dtype_name(dt));

                free(xd);
                free(wd);
                free(bd);
                free(yexp);
                tensor_free(&x);
                tensor_free(&out);
                tensor_free(&out1);
                tensor_free(&w);
                tensor_free(&bias);
                tensor_free(&pool);
                tensor_free(&pool1);
                tensor_free(&slots);
            }
}

/* Prefill in two calls through the pool (the first from zeros, has_initial_state = 0 on a
 * poisoned slot) equals one call, for split points before, at and after W-1. */
static void test_two_calls(rng *r)
{
    static const int64_t Ps[] = {0, 1, 2, 3, 7, 13};
    for (int pi = 0; pi < 6; pi++)
        for (int di = 0; di < 2; di++) {
            const gdn_dtype dt = di ? GDN_BF16 : GDN_F32;
            const int64_t T = 13, C = 7, W = 4, S = 3, P = Ps[pi];
            int64_t xs[3] = {1, T, C}, ws[2] = {C, W}, ps[3] = {S, C, W - 1};
            gdn_tensor x = tensor_alloc(dt, 3, xs), out = tensor_alloc(dt, 3, xs),
                       out1 = tensor_alloc(dt, 3, xs);
            gdn_tensor w = tensor_alloc(GDN_F32, 2, ws);
            gdn_tensor pool = tensor_alloc(GDN_F32, 3, ps), pool1 = tensor_alloc(GDN_F32, 3, ps);
            tensor_fill_normal(&x, r, 1.0);
            tensor_fill_normal(&w, r, 0.5);
            poison(pool.data, tensor_bytes(&pool));
            poison(pool1.data, tensor_bytes(&pool1));
            void *psnap = dup_bytes(pool.data, tensor_bytes(&pool));
            int64_t two = 2, zero = 0;
            gdn_tensor slots = index_tensor(GDN_I32, 1, &two);
            gdn_tensor fresh = index_tensor(GDN_I32, 1, &zero);

            double *xd = read_all(&x), *wd = read_all(&w);
            double st[7 * 3], *yexp = xmalloc((size_t)(T * C) * sizeof *yexp);
            conv_expect(T, C, W, xd, NULL, wd, NULL, GDN_ACT_SILU, yexp, st);

            gdn_conv1d_args a = gdn_conv1d_default_args();
            a.weight = w;
            a.conv_state = pool;
            a.state_slots = slots;
            a.has_initial_state = fresh;
            a.x = tensor_slice(&x, 1, 0, P);
            a.out = tensor_slice(&out, 1, 0, P);
            CHECK_OK(gdn_conv1d(ctx, &a), ctx);
            a.has_initial_state = gdn_tensor_none();
            a.x = tensor_slice(&x, 1, P, T - P);
            a.out = tensor_slice(&out, 1, P, T - P);
            CHECK_OK(gdn_conv1d(ctx, &a), ctx);
            /* one call */
            a.has_initial_state = fresh;
            a.x = x;
            a.out = out1;
            a.conv_state = pool1;
            CHECK_OK(gdn_conv1d(ctx, &a), ctx);

            errsum e = {0, 0, 0}, e1 = {0, 0, 0};
            for (int64_t i = 0; i < T * C; i++) {
                err_add(&e, tensor_get(&out, i), yexp[i]);
                err_add(&e1, tensor_get(&out, i), tensor_get(&out1, i));
            }
            CHECK_ERR(err_value(&e), tol_for(dt), "two calls split %lld %s: out", (long long)P,
                        gdn_dtype_name(dt));
            CHECK_ERR(err_value(&e1), tol_for(dt), "two calls split %lld %s: out vs one call",
                        (long long)P, gdn_dtype_name(dt));
            int64_t bad = slot_mismatches(&pool, 2, st);
            CHECK(bad == 0, "two calls split %lld %s: %lld final state values differ", (long long)P,
                  gdn_dtype_name(dt), (long long)bad);
            CHECK(memcmp(pool.data, pool1.data, tensor_bytes(&pool)) == 0,
                  "two calls split %lld %s: pool differs from one call", (long long)P,
                  gdn_dtype_name(dt));
            CHECK(memcmp(pool.data, psnap, (size_t)(2 * C * (W - 1)) * sizeof(float)) == 0,
                  "two calls split %lld %s: slots 0 and 1 changed", (long long)P,
                  gdn_dtype_name(dt));

            free(psnap);
            free(xd);
            free(wd);
            free(yexp);
            tensor_free(&x);
            tensor_free(&out);
            tensor_free(&out1);
            tensor_free(&w);
            tensor_free(&pool);
            tensor_free(&pool1);
            tensor_free(&slots);
            tensor_free(&fresh);
        }
}

/* Batched decode through a slot permutation with a padding sequence: several steps, the padding
 * row and the unused slots stay byte-identical; in place and strided x variants. */
static void test_decode_batch(rng *r)
{
    static const int64_t slotv[4] = {3, -1, 0, 5};
    for (int di = 0; di < 2; di++)
        for (int mode = 0; mode < 4; mode++) {
            const gdn_dtype dt = di ? GDN_BF16 : GDN_F32;
            const int64_t N = 4, S = 6, C = 7, W = mode == 3 ? 3 : 4, steps = 6;
            const int in_place = mode == 1, strided = mode == 2;
            const gdn_activation act = mode == 3 ? GDN_ACT_NONE : GDN_ACT_SILU;
            const size_t es = gdn_dtype_size(dt);
            const int64_t Cx = strided ? 2 * C : C;
            int64_t ws[2] = {C, W}, bs[1] = {C}, ps[3] = {S, C, W - 1}, xs[2] = {N, Cx};
            gdn_tensor w = tensor_alloc(dt, 2, ws), bias = tensor_alloc(dt, 1, bs);
            gdn_tensor pool = tensor_alloc(GDN_F32, 3, ps);
            tensor_fill_normal(&w, r, 0.5);
            tensor_fill_normal(&bias, r, 0.5);
            poison(pool.data, tensor_bytes(&pool));
            for (int64_t n = 0; n < N; n++)
                if (slotv[n] >= 0)
                    for (int64_t i = 0; i < C * (W - 1); i++)
                        tensor_set(&pool, slotv[n] * C * (W - 1) + i, rng_normal(r));
            void *psnap = dup_bytes(pool.data, tensor_bytes(&pool));
            gdn_tensor slots = index_tensor(mode % 2 ? GDN_I32 : GDN_I64, N, slotv);
            double init[4][7 * 3], hist[4][6 * 7], yh[4][6 * 7];
            for (int64_t n = 0; n < N; n++)
                if (slotv[n] >= 0)
                    read_slot(&pool, slotv[n], init[n]);
            double *wd = read_all(&w), *bd = read_all(&bias);

            gdn_tensor xb = tensor_alloc(dt, 2, xs), ob = tensor_alloc(dt, 2, xs);
            int64_t bad_pad = 0;
            for (int64_t step = 0; step < steps; step++) {
                tensor_fill_normal(&xb, r, 1.0);
                poison(ob.data, tensor_bytes(&ob));
                gdn_tensor x = gdn_tensor_2d(xb.data, dt, N, C);
                x.stride[0] = Cx;
                gdn_tensor out = in_place ? x : gdn_tensor_2d(ob.data, dt, N, C);
                if (!in_place)
                    out.stride[0] = Cx;
                for (int64_t n = 0; n < N; n++)
                    for (int64_t c = 0; c < C; c++)
                        hist[n][step * C + c] = tensor_get(&x, n * C + c);
                void *xsnap = dup_bytes(xb.data, tensor_bytes(&xb));
                void *osnap = dup_bytes(ob.data, tensor_bytes(&ob));
                gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
                u.x = x;
                u.out = out;
                u.weight = w;
                u.bias = bias;
                u.conv_state = pool;
                u.state_slots = slots;
                u.activation = act;
                CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);
                for (int64_t n = 0; n < N; n++)
                    for (int64_t c = 0; c < C; c++)
                        yh[n][step * C + c] = tensor_get(&out, n * C + c);
                /* the padding row (1) and, when strided, the gaps between rows are untouched */
                const void *base = in_place ? xsnap : osnap;
                const char *now = in_place ? xb.data : ob.data;
                for (int64_t i = 0; i < N * Cx; i++) {
                    int64_t n = i / Cx, c = i % Cx;
                    bool written = n != 1 && c < C;
                    if (!written && memcmp(now + i * es, (const char *)base + i * es, es))
                        bad_pad++;
                }
                if (!in_place)
                    CHECK(memcmp(xb.data, xsnap, tensor_bytes(&xb)) == 0, "decode: x modified");
                free(xsnap);
                free(osnap);
            }
            CHECK(bad_pad == 0, "decode batch %s mode %d: %lld padding/gap elements changed",
                  gdn_dtype_name(dt), mode, (long long)bad_pad);
            for (int64_t n = 0; n < N; n++) {
                if (slotv[n] < 0)
                    continue;
                double y[6 * 7], st[7 * 3];
                conv_expect(steps, C, W, hist[n], init[n], wd, bd, act, y, st);
                errsum e = {0, 0, 0};
                for (int64_t i = 0; i < steps * C; i++)
                    err_add(&e, yh[n][i], y[i]);
                CHECK_ERR(err_value(&e), tol_for(dt), "decode batch %s mode %d: seq %lld",
                            gdn_dtype_name(dt), mode, (long long)n);
                int64_t bad = slot_mismatches(&pool, slotv[n], st);
                CHECK(bad == 0, "decode batch %s mode %d: seq %lld: %lld state values differ",
                      gdn_dtype_name(dt), mode, (long long)n, (long long)bad);
            }
            /* slots 1, 2, 4 are nobody's */
            int64_t bad = 0;
            const size_t slot_bytes = (size_t)(C * (W - 1)) * sizeof(float);
            static const int unused[3] = {1, 2, 4};
            for (int k = 0; k < 3; k++)
                if (memcmp((char *)pool.data + unused[k] * slot_bytes,
                           (char *)psnap + unused[k] * slot_bytes, slot_bytes))
                    bad++;
            CHECK(bad == 0, "decode batch %s mode %d: %lld unused slots changed", gdn_dtype_name(dt),
                  mode, (long long)bad);

            free(psnap);
            free(wd);
            free(bd);
            tensor_free(&w);
            tensor_free(&bias);
            tensor_free(&pool);
            tensor_free(&slots);
            tensor_free(&xb);
            tensor_free(&ob);
        }
}

/* Bad slots fail before anything is written (SPEC section 9). */
static void test_bad_slots(rng *r)
{
    const int64_t B = 2, T = 3, C = 7, W = 4, S = 2;
    int64_t xs[3] = {B, T, C}, ws[2] = {C, W}, ps[3] = {S, C, W - 1};
    gdn_tensor x = tensor_alloc(GDN_F32, 3, xs), out = tensor_alloc(GDN_F32, 3, xs);
    gdn_tensor w = tensor_alloc(GDN_F32, 2, ws), pool = tensor_alloc(GDN_F32, 3, ps);
    tensor_fill_normal(&x, r, 1.0);
    tensor_fill_normal(&w, r, 1.0);
    tensor_fill_normal(&pool, r, 1.0);
    poison(out.data, tensor_bytes(&out));
    void *osnap = dup_bytes(out.data, tensor_bytes(&out));
    void *psnap = dup_bytes(pool.data, tensor_bytes(&pool));
    static const int64_t dup[2] = {1, 1}, big[2] = {0, 2};
    const int64_t *cases[2] = {dup, big};
    for (int k = 0; k < 2; k++) {
        gdn_tensor slots = index_tensor(GDN_I32, 2, cases[k]);
        gdn_conv1d_args a = gdn_conv1d_default_args();
        a.x = x;
        a.weight = w;
        a.out = out;
        a.conv_state = pool;
        a.state_slots = slots;
        gdn_status st = gdn_conv1d(ctx, &a);
        CHECK(st == GDN_ERR_VALUE, "bad slots case %d: got %s, expected GDN_ERR_VALUE", k,
              gdn_strerror(st));
        CHECK(memcmp(out.data, osnap, tensor_bytes(&out)) == 0, "bad slots %d: out written", k);
        CHECK(memcmp(pool.data, psnap, tensor_bytes(&pool)) == 0, "bad slots %d: pool written", k);
        tensor_free(&slots);
    }
    free(osnap);
    free(psnap);
    tensor_free(&x);
    tensor_free(&out);
    tensor_free(&w);
    tensor_free(&pool);
}

/* A varlen prefill of several sequences (lengths 0, 1, 2 and longer, through permuted slots),
 * then batched decode steps for all of them: each sequence's outputs and final state equal one
 * conv over its whole token stream, so no step read across a varlen boundary. */
static void test_varlen_prefill_then_decode(rng *r)
{
    enum { N = 5, STEPS = 4 };
    static const int64_t lens[N] = {6, 0, 1, 2, 9};
    static const int64_t slotv[N] = {4, 0, 6, 2, 5};
    const int64_t C = 9, W = 4, S = 7;
    int64_t total = 0, off[N + 1];
    for (int n = 0; n < N; n++) {
        off[n] = total;
        total += lens[n];
    }
    off[N] = total;
    int64_t xs[3] = {1, total, C}, ds[3] = {STEPS, N, C}, ws[2] = {C, W}, ps[3] = {S, C, W - 1};
    gdn_tensor x = tensor_alloc(GDN_F32, 3, xs), y = tensor_alloc(GDN_F32, 3, xs);
    gdn_tensor xd = tensor_alloc(GDN_F32, 3, ds), yd = tensor_alloc(GDN_F32, 3, ds);
    gdn_tensor w = tensor_alloc(GDN_F32, 2, ws), pool = tensor_alloc(GDN_F32, 3, ps);
    tensor_fill_normal(&x, r, 1.0);
    tensor_fill_normal(&xd, r, 1.0);
    tensor_fill_normal(&w, r, 0.5);
    gdn_tensor cu = index_tensor(GDN_I32, N + 1, off), slots = index_tensor(GDN_I64, N, slotv);
    int64_t zeros[N] = {0};
    gdn_tensor fresh = index_tensor(GDN_I32, N, zeros);

    gdn_conv1d_args a = gdn_conv1d_default_args();
    a.x = x, a.weight = w, a.out = y, a.conv_state = pool, a.state_slots = slots;
    a.has_initial_state = fresh, a.cu_seqlens = cu;
    CHECK_OK(gdn_conv1d(ctx, &a), ctx);
    for (int64_t step = 0; step < STEPS; step++) {
        gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
        u.x = tensor_slice(&xd, 0, step, 1);
        u.x.ndim = 2, u.x.shape[0] = N, u.x.shape[1] = C, u.x.stride[0] = C, u.x.stride[1] = 1;
        u.out = u.x;
        u.out.data = (float *)yd.data + step * N * C;
        u.weight = w, u.conv_state = pool, u.state_slots = slots;
        CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);
    }
    double *wd = read_all(&w), *xa = read_all(&x), *xda = read_all(&xd);
    for (int n = 0; n < N; n++) {
        int64_t L = lens[n] + STEPS;
        double *seq = xmalloc((size_t)(L * C) * sizeof *seq), *want = xmalloc((size_t)(L * C) * sizeof *want);
        double *want_st = xmalloc((size_t)(C * (W - 1)) * sizeof *want_st);
        double *got_st = xmalloc((size_t)(C * (W - 1)) * sizeof *got_st);
        for (int64_t t = 0; t < L; t++)
            for (int64_t c = 0; c < C; c++)
                seq[t * C + c] = t < lens[n] ? xa[(off[n] + t) * C + c]
                                             : xda[((t - lens[n]) * N + n) * C + c];
        conv_expect(L, C, W, seq, NULL, wd, NULL, GDN_ACT_SILU, want, want_st);
        errsum e = {0};
        for (int64_t t = 0; t < L; t++)
            for (int64_t c = 0; c < C; c++) {
                double got = t < lens[n] ? tensor_get(&y, (off[n] + t) * C + c)
                                         : tensor_get(&yd, ((t - lens[n]) * N + n) * C + c);
                err_add(&e, got, want[t * C + c]);
            }
        CHECK_ERR(err_value(&e), 1e-6, "varlen prefill + decode, sequence %d (len %lld)", n,
                  (long long)lens[n]);
        read_slot(&pool, slotv[n], got_st);
        errsum es = {0};
        for (int64_t i = 0; i < C * (W - 1); i++)
            err_add(&es, got_st[i], want_st[i]);
        CHECK_ERR(err_value(&es), 1e-6, "varlen prefill + decode final state, sequence %d", n);
        free(seq), free(want), free(want_st), free(got_st);
    }
    free(wd), free(xa), free(xda);
    gdn_tensor *all[] = {&x, &y, &xd, &yd, &w, &pool, &cu, &slots, &fresh};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
}

int main(void)
{
    rng r;
    if (!test_begin(&ctx, &r))
        return test_summary("conv1d");

    test_random(&r);
    test_state_short(&r);
    test_varlen(&r);
    test_slots(&r);
    test_transposed_state(&r);
    test_inplace_strided(&r);
    test_prefill_then_decode(&r);
    test_two_calls(&r);
    test_decode_batch(&r);
    test_varlen_prefill_then_decode(&r);
    test_bad_slots(&r);

    gdn_context_destroy(ctx);
    return test_summary("conv1d");
}
