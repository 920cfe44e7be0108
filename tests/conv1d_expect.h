/* The independent expectation of gdn_conv1d and gdn_conv1d_update (SPEC section 4), evaluated on
 * plain double arrays, and the small helpers that test_conv1d.c and test_conv1d_state.c share:
 *
 *   y[c][t] = act( bias[c] + sum_{i<W} w[c][i] * x[c][t - (W-1) + i] )
 *
 * where positions before a sequence's start read its conv state (or zeros), and the new state is
 * the last W-1 inputs of the sequence extended by its old state. */
#ifndef GDN_TEST_CONV1D_EXPECT_H
#define GDN_TEST_CONV1D_EXPECT_H

#include "harness.h"
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers --------------------------------------------------------------------------- */

static inline void *dup_bytes(const void *p, size_t bytes)
{
    void *q = xmalloc(bytes);
    if (bytes)
        memcpy(q, p, bytes);
    return q;
}

/* A byte pattern that reads as a huge finite number in f32 and bf16 (3.39e38). */
static inline void poison(void *p, size_t bytes) { memset(p, 0x7f, bytes); }

/* All elements of t (flat row-major over its shape, honouring strides) as doubles. */
static inline double *read_all(const gdn_tensor *t)
{
    int64_t n = tensor_numel(t);
    double *d = xmalloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = tensor_get(t, i);
    return d;
}

/* Index tensor [n] of dtype dt holding v. */
static inline gdn_tensor index_tensor(gdn_dtype dt, int64_t n, const int64_t *v)
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
static inline double ext_at(const double *x, const double *init, int64_t C, int64_t W,
                            int64_t c, int64_t pos)
{
    if (pos >= 0)
        return x[pos * C + c];
    return init ? init[c * (W - 1) + (W - 1) + pos] : 0.0;
}

/* One sequence of L tokens. x: [L][C]; init: [C][W-1] or NULL (zeros); w: [C][W]; bias: [C] or
 * NULL. Writes y: [L][C] and st: [C][W-1] (may be NULL). */
static inline void conv_expect(int64_t L, int64_t C, int64_t W, const double *x,
                               const double *init, const double *w, const double *bias,
                               gdn_activation act, double *y, double *st)
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
static inline void read_slot(const gdn_tensor *pool, int64_t s, double *dst)
{
    int64_t C = pool->shape[1], Wm1 = pool->shape[2];
    for (int64_t i = 0; i < C * Wm1; i++)
        dst[i] = tensor_get(pool, s * C * Wm1 + i);
}

/* Number of elements of slot s that differ from st (exact comparison). */
static inline int64_t slot_mismatches(const gdn_tensor *pool, int64_t s, const double *st)
{
    int64_t C = pool->shape[1], Wm1 = pool->shape[2], bad = 0;
    for (int64_t i = 0; i < C * Wm1; i++)
        if (!(tensor_get(pool, s * C * Wm1 + i) == st[i]))
            bad++;
    return bad;
}

#endif
