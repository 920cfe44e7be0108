/* Conv1d (prefill and decode), gating, L2 norm and gated RMSNorm on the cpu backend: f32
 * arithmetic, split over the thread pool, and laid out so the inner loops run along the
 * contiguous dimension (channels, heads, features) where the compiler vectorizes them. */
#include "cpu.h"

#include "../ref/ref.h"

#include <math.h>
#include <string.h>

enum { CH = 64 }; /* channels per conv task: one cache line of f32 per token, four of them */

static float silu_f(float x) { return x / (1.0f + expf(-x)); }

static void store_f32(const gdn_tensor *t, int64_t off, int64_t n, const float *src)
{
    if (t->dtype == GDN_F32) {
        memcpy((float *)t->data + off, src, (size_t)n * sizeof *src);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        gdn_store(t, off + i, src[i]);
}

static cpu_pool *pool_of(const gdn_context *ctx)
{
    return ((const cpu_backend_state *)ctx->backend_state)->pool;
}

/* ---- conv1d ---------------------------------------------------------------------------------
 * A task is (sequence, block of CH channels): it keeps the last W-1 inputs of its channels in a
 * small window and walks the sequence's tokens in order, reading each token's inputs before
 * writing its outputs (so out may be x), then writes the new conv state. */

typedef struct conv_job {
    const gdn_conv1d_args *a;
    const gdn_seqs *seqs;
    int64_t C, W, blocks;
    bool has_state;
} conv_job;

static void conv_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const conv_job *j = arg;
    const gdn_conv1d_args *a = j->a;
    const int64_t n = task / j->blocks, c0 = (task % j->blocks) * CH;
    const int64_t nc = j->C - c0 < CH ? j->C - c0 : CH, W = j->W;
    int64_t slot = -1;
    if (j->has_state) {
        slot = gdn_seq_slot(j->seqs, n);
        if (slot < 0)
            return; /* padding */
    }
    const bool init = j->has_state && gdn_seq_has_init(j->seqs, n);
    int64_t row, t0, len;
    gdn_seq_span(j->seqs, n, &row, &t0, &len);
    float w[GDN_CONV_MAX_WIDTH][CH], win[GDN_CONV_MAX_WIDTH][CH], bias[CH], x[CH], y[CH];
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t i = 0; i < W; i++)
            w[i][c] = (float)gdn_load(&a->weight, (c0 + c) * a->weight.stride[0] + i);
        bias[c] = a->bias.data ? (float)gdn_load(&a->bias, (c0 + c) * a->bias.stride[0]) : 0.0f;
    }
    const gdn_tensor *st = &a->conv_state;
    for (int64_t i = 0; i < W - 1; i++)
        for (int64_t c = 0; c < nc; c++)
            win[i][c] = init ? (float)gdn_load(st, slot * st->stride[0] + (c0 + c) * st->stride[1] +
                                                     i * st->stride[2])
                             : 0.0f;
    for (int64_t t = t0; t < t0 + len; t++) {
        cpu_load_f32(&a->x, row * a->x.stride[0] + t * a->x.stride[1] + c0, nc, x);
        for (int64_t c = 0; c < nc; c++)
            y[c] = bias[c] + w[W - 1][c] * x[c];
        for (int64_t i = 0; i < W - 1; i++)
            for (int64_t c = 0; c < nc; c++)
                y[c] += w[i][c] * win[i][c];
        for (int64_t i = 0; i + 1 < W - 1; i++) /* shift the window, append x */
            memcpy(win[i], win[i + 1], (size_t)nc * sizeof(float));
        if (W > 1)
            memcpy(win[W - 2], x, (size_t)nc * sizeof(float));
        if (a->activation == GDN_ACT_SILU)
            for (int64_t c = 0; c < nc; c++)
                y[c] = silu_f(y[c]);
        store_f32(&a->out, row * a->out.stride[0] + t * a->out.stride[1] + c0, nc, y);
    }
    if (j->has_state)
        for (int64_t i = 0; i < W - 1; i++)
            for (int64_t c = 0; c < nc; c++)
                gdn_store(st, slot * st->stride[0] + (c0 + c) * st->stride[1] + i * st->stride[2],
                          win[i][c]);
}

gdn_status cpu_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p)
{
    conv_job j = {&p->a, &p->seqs, p->C, p->W, (p->C + CH - 1) / CH, p->has_state};
    cpu_pool_run(pool_of(ctx), p->seqs.count * j.blocks, conv_task, &j);
    return GDN_OK;
}

/* Decode is prefill of one token per sequence that continues its state. */
gdn_status cpu_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p)
{
    gdn_conv1d_problem q;
    gdn_conv1d_update_as_prefill(p, &q);
    return cpu_conv1d(ctx, &q);
}

/* ---- row ops: gating, L2 norm, gated RMSNorm ---------------------------------------------- */

enum { ROWS_PER_TASK = 16, MAX_ROW = 4096 };

typedef struct row_job {
    const void *p;
    int64_t rows;
    void (*row)(const void *p, int64_t r, float *buf);
} row_job;

static void row_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const row_job *j = arg;
    float buf[3 * MAX_ROW];
    for (int64_t r = task * ROWS_PER_TASK; r < j->rows && r < (task + 1) * ROWS_PER_TASK; r++)
        j->row(j->p, r, buf);
}

static void run_rows(gdn_context *ctx, const void *p, int64_t rows,
                     void (*row)(const void *, int64_t, float *))
{
    row_job j = {p, rows, row};
    cpu_pool_run(pool_of(ctx), (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, row_task, &j);
}

/* The gates are computed in double, like the reference (a few transcendental calls a head are
 * nothing next to the recurrence), so the two agree to the last bit of the rounded result. */
static void gating_row(const void *pp, int64_t r, float *buf)
{
    const gdn_gating_problem *p = pp;
    float *a = buf, *b = buf + p->HV;
    cpu_load_f32(&p->a, gdn_row_offset(&p->a, r), p->HV, a);
    if (p->b.data)
        cpu_load_f32(&p->b, gdn_row_offset(&p->b, r), p->HV, b);
    for (int64_t h = 0; h < p->HV; h++) { /* both inputs are read before either output is written */
        a[h] = (float)ref_gate_g(&p->p, h, a[h]);
        if (p->b.data)
            b[h] = (float)ref_gate_beta(&p->p, b[h]);
    }
    store_f32(&p->g_out, gdn_row_offset(&p->g_out, r), p->HV, a);
    if (p->b.data)
        store_f32(&p->beta_out, gdn_row_offset(&p->beta_out, r), p->HV, b);
}

gdn_status cpu_gating(gdn_context *ctx, const gdn_gating_problem *p)
{
    if (p->HV > MAX_ROW)
        return ref_gating(ctx, p); /* rows longer than the stack buffer: rare, exact */
    run_rows(ctx, p, p->rows, gating_row);
    return GDN_OK;
}

/* x[d] *= 1 / sqrt(sum(x^2) / n + eps) over a row. The sum runs in f32 where that is exact
 * enough: squares of rows past about 1e19 overflow f32 (a row of 1e30 would come out 0) and
 * squares below about 1e-19 underflow (with eps = 0 the row would come out Inf), so a row whose
 * f32 sum is not finite or not well above the smallest normal is redone in double, as the
 * reference computes it. */
static void scale_by_inverse_rms(float *x, int64_t D, double n, double eps)
{
    float ss = 0.0f;
    for (int64_t d = 0; d < D; d++)
        ss += x[d] * x[d];
    if (isfinite(ss) && ss >= 0x1p-100f) {
        const float inv = 1.0f / sqrtf(ss / (float)n + (float)eps);
        for (int64_t d = 0; d < D; d++)
            x[d] *= inv;
        return;
    }
    double wide = 0.0;
    for (int64_t d = 0; d < D; d++)
        wide += (double)x[d] * x[d];
    const double inv = 1.0 / sqrt(wide / n + eps);
    for (int64_t d = 0; d < D; d++)
        x[d] = (float)(x[d] * inv);
}

static void l2norm_row(const void *pp, int64_t r, float *x)
{
    const gdn_l2norm_problem *p = pp;
    cpu_load_f32(&p->x, gdn_row_offset(&p->x, r), p->D, x);
    scale_by_inverse_rms(x, p->D, 1.0, p->eps);
    store_f32(&p->out, gdn_row_offset(&p->out, r), p->D, x);
}

gdn_status cpu_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p)
{
    if (p->D > MAX_ROW)
        return ref_l2norm(ctx, p);
    run_rows(ctx, p, p->rows, l2norm_row);
    return GDN_OK;
}

static void rmsnorm_row(const void *pp, int64_t r, float *buf)
{
    const gdn_rmsnorm_problem *p = pp;
    const gdn_rmsnorm_args *a = &p->a;
    const int64_t D = p->D;
    float *x = buf, *gate = buf + D, *w = buf + 2 * D;
    cpu_load_f32(&a->x, gdn_row_offset(&a->x, r), D, x);
    if (a->z.data) {
        cpu_load_f32(&a->z, gdn_row_offset(&a->z, r), D, gate);
        for (int64_t d = 0; d < D; d++)
            gate[d] = silu_f(gate[d]);
    } else {
        for (int64_t d = 0; d < D; d++)
            gate[d] = 1.0f;
    }
    for (int64_t d = 0; d < D; d++) {
        float wd = a->weight.data ? (float)gdn_load(&a->weight, d * a->weight.stride[0]) : 0.0f;
        w[d] = a->weight_offset ? 1.0f + wd : (a->weight.data ? wd : 1.0f);
    }
    if (!a->norm_before_gate) /* the gated value is what gets normalised */
        for (int64_t d = 0; d < D; d++)
            x[d] *= gate[d];
    scale_by_inverse_rms(x, D, (double)D, a->eps);
    for (int64_t d = 0; d < D; d++)
        x[d] = x[d] * w[d] * (a->norm_before_gate ? gate[d] : 1.0f);
    store_f32(&a->out, gdn_row_offset(&a->out, r), D, x);
}

gdn_status cpu_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p)
{
    if (p->D > MAX_ROW)
        return ref_rmsnorm_gated(ctx, p);
    run_rows(ctx, p, p->rows, rmsnorm_row);
    return GDN_OK;
}
