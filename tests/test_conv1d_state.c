/* The conv state across calls and layouts, on the reference backend (or GDN_TEST_BACKEND=cpu),
 * against the direct evaluation of SPEC section 4 in conv1d_expect.h: a [S, W-1, C] pool passed
 * as a transposed view, prefill then gdn_conv1d_update token by token, a prefill in two calls,
 * batched decode through permuted slots with a padding sequence, a varlen prefill then decode,
 * and bad slots refused before anything is written. Single calls over a table of
 * configurations are test_conv1d.c's. */
#include "harness.h"
#include "common.h"
#include "conv1d_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

static gdn_context *ctx;

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
        return test_summary("conv1d_state");

    test_transposed_state(&r);
    test_prefill_then_decode(&r);
    test_two_calls(&r);
    test_decode_batch(&r);
    test_varlen_prefill_then_decode(&r);
    test_bad_slots(&r);

    gdn_context_destroy(ctx);
    return test_summary("conv1d_state");
}
