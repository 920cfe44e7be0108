/* gdn_conv1d on the reference backend (or GDN_TEST_BACKEND=cpu), one call at a time, against
 * the direct evaluation of SPEC section 4 in conv1d_expect.h: random problems over channels,
 * widths, dtypes, bias and activation, short sequences and their new state, varlen batches, slot
 * indirection, and in-place and strided views. Every call's outputs, the state of every sequence
 * and every byte it must not write are checked. State carried across calls and gdn_conv1d_update
 * are test_conv1d_state.c's. */
#include "harness.h"
#include "common.h"
#include "conv1d_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

static gdn_context *ctx;

/* ---- bytes a call must not write ------------------------------------------------------------ */

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

int main(void)
{
    rng r;
    if (!test_begin(&ctx, &r))
        return test_summary("conv1d");

    test_random(&r);
    test_state_short(&r);
    test_varlen(&r);
    test_slots(&r);
    test_inplace_strided(&r);

    gdn_context_destroy(ctx);
    return test_summary("conv1d");
}
