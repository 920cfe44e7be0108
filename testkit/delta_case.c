/* Random gated-delta-rule problems for tests and `gdn check`. */
#include "delta_case.h"
#include "device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON_BYTE 0xa5

delta_config delta_config_default(void)
{
    delta_config c;
    memset(&c, 0, sizeof c);
    c.nseq = 1;
    c.T = 16;
    c.H = c.HV = 1;
    c.K = c.V = 16;
    c.dtype = c.out_dtype = c.gate_dtype = c.state_dtype = GDN_F32;
    c.index_dtype = GDN_I32;
    c.precision = GDN_PRECISION_HIGH;
    return c;
}

void delta_config_random_options(delta_config *f, rng *r)
{
    static const gdn_dtype dts[] = {GDN_F32, GDN_BF16, GDN_F16};
    f->dtype = dts[rng_int(r, 0, 2)];
    f->gate_dtype = rng_int(r, 0, 1) ? GDN_F32 : f->dtype;
    f->index_dtype = rng_int(r, 0, 1) ? GDN_I32 : GDN_I64;
    f->layout = (gdn_state_layout)rng_int(r, 0, 1);
    f->gva = (gdn_gva)rng_int(r, 0, 1);
    f->qk_l2norm = rng_int(r, 0, 1);
    f->gate_in_kernel = rng_int(r, 0, 1);
    f->fused_qkv = rng_int(r, 0, 1);
    f->unslotted = f->pool && rng_int(r, 0, 2) == 0;
    f->padding = f->pool && !f->unslotted && rng_int(r, 0, 1);
    f->fresh_starts = f->pool && rng_int(r, 0, 1);
}

delta_config delta_config_long_memory(int i, rng *r)
{
    static const int64_t lens[] = {0, 1, 37, 300, 5, 0, 290};
    delta_config f = delta_config_default();
    f.pool = true;
    delta_config_random_options(&f, r);
    f.predictable = true;
    f.H = 1, f.HV = 2, f.K = f.V = 32;
    if (i % 3 == 0)
        f.T = 2000;
    else if (i % 3 == 1)
        f.nseq = 7, f.lens = lens;
    else
        f.T = 700, f.K = f.V = 128, f.HV = 1;
    return f;
}

static gdn_tensor alloc4(gdn_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t s[4] = {a, b, c, d};
    return tensor_alloc(dt, 4, s);
}

static gdn_tensor alloc3(gdn_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t s[3] = {a, b, c};
    return tensor_alloc(dt, 3, s);
}

static gdn_tensor alloc1(gdn_dtype dt, int64_t a)
{
    return tensor_alloc(dt, 1, &a);
}

/* [B, T, heads, dim] view at channel offset `at` of a fused [B, T, width] buffer. */
static gdn_tensor fused_view(const gdn_tensor *buf, int64_t at, int64_t heads, int64_t dim)
{
    gdn_tensor t = *buf;
    t.data = (char *)buf->data + (size_t)at * gdn_dtype_size(buf->dtype);
    t.ndim = 4;
    t.shape[2] = heads;
    t.shape[3] = dim;
    t.stride[3] = 1;
    t.stride[2] = dim;
    return t;
}

/* Rows of a [B, T, heads, dim] tensor drawn normal, optionally scaled to unit length. */
static void fill_rows(const gdn_tensor *t, rng *r, bool unit)
{
    int64_t dim = t->shape[3], rows = tensor_numel(t) / dim;
    double *row = malloc((size_t)dim * sizeof *row);
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < dim; j++) {
            row[j] = rng_normal(r);
            ss += row[j] * row[j];
        }
        double s = unit ? 1.0 / sqrt(ss) : 1.0;
        for (int64_t j = 0; j < dim; j++)
            tensor_set(t, i * dim + j, row[j] * s);
    }
    free(row);
}

static void fill_gates(delta_case *c, rng *r)
{
    const bool slow = c->cfg.predictable;
    int64_t n = tensor_numel(&c->g);
    for (int64_t i = 0; i < n; i++) {
        if (c->cfg.gate_in_kernel) {
            tensor_set(&c->g, i, 0.5 * rng_normal(r));       /* raw a */
            tensor_set(&c->beta, i, 1.5 * rng_normal(r));    /* raw b logits */
        } else {
            bool sharp = !slow && rng_uniform(r, 0, 1) < 0.1; /* a few strong forgets */
            const double most = slow ? 0.01 : 0.4;
            tensor_set(&c->g, i, sharp ? -rng_uniform(r, 2, 10) : -rng_uniform(r, 0, most));
            tensor_set(&c->beta, i, rng_uniform(r, 0.05, 1.0));
        }
    }
    for (int64_t h = 0; h < c->cfg.HV; h++) {
        tensor_set(&c->A_log, h, log(rng_uniform(r, 1.0, 16.0)));
        double dt = slow ? rng_uniform(r, 0.0002, 0.001) : rng_uniform(r, 0.001, 0.1);
        /* dt_bias = softplus^-1(dt) */
        tensor_set(&c->dt_bias, h, log(expm1(dt)));
    }
    c->allow_neg_eigval = c->cfg.gate_in_kernel && rng_uniform(r, 0, 1) < 0.5;
}

/* Distinct slots from a shuffled 0..S-1, some sequences padded with -1 (without state_slots
 * only the initial-state flags). */
static void fill_slots(delta_case *c, rng *r, int64_t S)
{
    int64_t *perm = malloc((size_t)S * sizeof *perm);
    for (int64_t i = 0; i < S; i++)
        perm[i] = i;
    for (int64_t i = S - 1; i > 0; i--) {
        int64_t j = rng_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t n = 0; n < c->cfg.nseq; n++) {
        bool pad = c->cfg.padding && n > 0 && rng_uniform(r, 0, 1) < 0.3;
        if (c->slots.data)
            tensor_set(&c->slots, n, pad ? -1.0 : (double)perm[n]);
        bool fresh = c->cfg.fresh_starts && rng_uniform(r, 0, 1) < 0.4;
        tensor_set(&c->has_init, n, fresh ? 0.0 : 1.0);
    }
    free(perm);
}

/* v[b, t, hv] = M_hv^T k[b, t, kh] / |k| + 0.01 noise (M_hv standard normal [K, V]), rounded to
 * v's dtype. Token rows are [B, T, heads, dim] in logical (flat) order. */
static void fill_predictable_values(const delta_case *c, rng *r)
{
    const delta_config *f = &c->cfg;
    double *M = malloc((size_t)(f->K * f->V) * sizeof *M), *kr = malloc((size_t)f->K * sizeof *kr);
    for (int64_t hv = 0; hv < f->HV; hv++) {
        const int64_t kh = f->gva == GDN_GVA_BLOCK ? hv / (f->HV / f->H) : hv % f->H;
        for (int64_t i = 0; i < f->K * f->V; i++)
            M[i] = rng_normal(r);
        for (int64_t row = 0; row < c->B * c->T; row++) {
            double ss = 0.0;
            for (int64_t i = 0; i < f->K; i++) {
                kr[i] = tensor_get(&c->k, (row * f->H + kh) * f->K + i);
                ss += kr[i] * kr[i];
            }
            const double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
            for (int64_t x = 0; x < f->V; x++) {
                double y = 0.01 * rng_normal(r);
                for (int64_t i = 0; i < f->K; i++)
                    y += M[i * f->V + x] * kr[i] * inv;
                tensor_set(&c->v, (row * f->HV + hv) * f->V + x, y);
            }
        }
    }
    free(M);
    free(kr);
}

void delta_case_init(delta_case *c, const delta_config *cfg, rng *r)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    const delta_config *f = &c->cfg;
    c->lens = malloc((size_t)(f->nseq ? f->nseq : 1) * sizeof *c->lens);
    int64_t total = 0;
    for (int64_t n = 0; n < f->nseq; n++) {
        c->lens[n] = f->lens ? f->lens[n] : f->T;
        total += c->lens[n];
    }
    c->B = f->lens ? 1 : f->nseq;
    c->T = f->lens ? total : f->T;
    int64_t width = 2 * f->H * f->K + f->HV * f->V;
    if (f->fused_qkv) {
        c->qkv = alloc3(f->dtype, c->B, c->T, width);
        c->q = fused_view(&c->qkv, 0, f->H, f->K);
        c->k = fused_view(&c->qkv, f->H * f->K, f->H, f->K);
        c->v = fused_view(&c->qkv, 2 * f->H * f->K, f->HV, f->V);
    } else {
        c->q = alloc4(f->dtype, c->B, c->T, f->H, f->K);
        c->k = alloc4(f->dtype, c->B, c->T, f->H, f->K);
        c->v = alloc4(f->dtype, c->B, c->T, f->HV, f->V);
    }
    fill_rows(&c->q, r, !f->qk_l2norm);
    fill_rows(&c->k, r, !f->qk_l2norm);
    fill_rows(&c->v, r, false);
    if (f->predictable)
        fill_predictable_values(c, r);
    const double vscale = f->value_scale ? f->value_scale : 1.0;
    if (vscale != 1.0)
        for (int64_t i = 0; i < tensor_numel(&c->v); i++)
            tensor_set(&c->v, i, vscale * tensor_get(&c->v, i));
    c->g = alloc3(f->gate_dtype, c->B, c->T, f->HV);
    c->beta = alloc3(f->gate_dtype, c->B, c->T, f->HV);
    c->A_log = alloc1(GDN_F32, f->HV);
    c->dt_bias = alloc1(GDN_F32, f->HV);
    fill_gates(c, r);
    c->out = alloc4(f->out_dtype, c->B, c->T, f->HV, f->V);
    if (f->pool) {
        int64_t S = f->nseq + 2;
        c->state = f->layout == GDN_STATE_KV ? alloc4(f->state_dtype, S, f->HV, f->K, f->V)
                                             : alloc4(f->state_dtype, S, f->HV, f->V, f->K);
        tensor_fill_normal(&c->state, r, 0.3 * vscale);
        c->state0 = tensor_zeros_like(&c->state);
        memcpy(c->state0.data, c->state.data, tensor_bytes(&c->state));
        if (!f->unslotted)
            c->slots = alloc1(f->index_dtype, f->nseq);
        c->has_init = alloc1(GDN_U8, f->nseq);
        fill_slots(c, r, S);
    }
    if (f->lens) {
        c->cu = alloc1(f->index_dtype, f->nseq + 1);
        int64_t at = 0;
        for (int64_t n = 0; n <= f->nseq; n++) {
            tensor_set(&c->cu, n, (double)at);
            if (n < f->nseq)
                at += c->lens[n];
        }
    }
    gdn_delta_rule_args *a = &c->args;
    *a = gdn_delta_rule_default_args();
    a->q = c->q;
    a->k = c->k;
    a->v = c->v;
    a->g = c->g;
    a->beta = c->beta;
    a->out = c->out;
    a->state = c->state;
    a->state_slots = c->slots;
    a->has_initial_state = c->has_init;
    a->cu_seqlens = c->cu;
    a->state_layout = f->layout;
    a->gva = f->gva;
    a->chunk_size = f->chunk;
    a->qk_l2norm = f->qk_l2norm;
    a->gate_in_kernel = f->gate_in_kernel;
    a->precision = f->precision;
    a->gating.A = c->A_log;
    a->gating.dt_bias = c->dt_bias;
    a->gating.allow_neg_eigval = c->allow_neg_eigval;
}

void delta_case_free(delta_case *c)
{
    if (c->cfg.fused_qkv) {
        tensor_free(&c->qkv);
    } else {
        tensor_free(&c->q);
        tensor_free(&c->k);
        tensor_free(&c->v);
    }
    gdn_tensor *owned[] = {&c->g, &c->beta, &c->out, &c->state, &c->state0, &c->slots,
                           &c->has_init, &c->cu, &c->A_log, &c->dt_bias};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        tensor_free(owned[i]);
    free(c->lens);
}

void delta_case_reset(delta_case *c)
{
    if (c->state.data)
        memcpy(c->state.data, c->state0.data, tensor_bytes(&c->state));
    memset(c->out.data, POISON_BYTE, tensor_bytes(&c->out));
}

gdn_status delta_case_run(gdn_context *ctx, delta_case *c, gdn_algorithm algo)
{
    delta_case_reset(c);
    c->args.algorithm = algo;
    return gdn_delta_rule(ctx, &c->args);
}

bool delta_case_one_token_outputs(const delta_case *c)
{
    return !c->cfg.lens && c->cfg.T == 1 && !c->state.data;
}

static double l2_norm(const gdn_tensor *t)
{
    double s = 0.0;
    for (int64_t i = 0, n = tensor_numel(t); i < n; i++)
        s += tensor_get(t, i) * tensor_get(t, i);
    return sqrt(s);
}

double delta_case_one_token_measure(gdn_context *ref_ctx, delta_case *c, const gdn_tensor *want,
                                    gdn_status *st)
{
    *st = GDN_OK;
    if (!delta_case_one_token_outputs(c))
        return 1.0;
    gdn_tensor q = tensor_zeros_like(&c->q), k = tensor_zeros_like(&c->k);
    tensor_copy(&q, &c->q);
    tensor_copy(&k, &c->k);
    for (int64_t i = 0, n = tensor_numel(&q); i < n; i++) {
        tensor_set(&c->q, i, fabs(tensor_get(&q, i)));
        tensor_set(&c->k, i, fabs(tensor_get(&k, i)));
    }
    *st = delta_case_run(ref_ctx, c, GDN_ALGO_RECURRENT);
    const double mag = l2_norm(&c->out);
    tensor_copy(&c->q, &q);
    tensor_copy(&c->k, &k);
    tensor_free(&q);
    tensor_free(&k);
    return *st == GDN_OK && mag > 0.0 ? l2_norm(want) / mag : 1.0;
}

int64_t delta_case_slot(const delta_case *c, int64_t n)
{
    if (!c->state.data)
        return -1;
    return c->slots.data ? (int64_t)tensor_get(&c->slots, n) : n;
}

bool delta_case_untouched(const delta_case *c)
{
    size_t esz = gdn_dtype_size(c->out.dtype);
    int64_t row_elems = c->cfg.HV * c->cfg.V;
    int64_t t0 = 0;
    for (int64_t n = 0; n < c->cfg.nseq; n++) {
        bool skipped = c->slots.data && delta_case_slot(c, n) < 0;
        int64_t row = c->cfg.lens ? 0 : n, first = c->cfg.lens ? t0 : 0;
        if (skipped) {
            const unsigned char *p = (const unsigned char *)c->out.data +
                                     (size_t)(row * c->T + first) * (size_t)row_elems * esz;
            for (size_t i = 0; i < (size_t)(c->lens[n] * row_elems) * esz; i++)
                if (p[i] != POISON_BYTE)
                    return false;
        }
        t0 += c->lens[n];
    }
    if (!c->state.data)
        return true;
    size_t slot_bytes = tensor_bytes(&c->state) / (size_t)c->state.shape[0];
    for (int64_t s = 0; s < c->state.shape[0]; s++) {
        bool named = false;
        for (int64_t n = 0; n < c->cfg.nseq; n++)
            named = named || delta_case_slot(c, n) == s;
        if (!named && memcmp((const char *)c->state.data + (size_t)s * slot_bytes,
                             (const char *)c->state0.data + (size_t)s * slot_bytes, slot_bytes))
            return false;
    }
    return true;
}

void delta_case_describe(const delta_case *c, char *buf, size_t n)
{
    const delta_config *f = &c->cfg;
    char tdesc[32];
    if (f->lens)
        snprintf(tdesc, sizeof tdesc, "var%lld", (long long)c->T);
    else
        snprintf(tdesc, sizeof tdesc, "%lld", (long long)f->T);
    snprintf(buf, n, "N=%lld T=%s H=%lld HV=%lld K=%lld V=%lld %s %s %s C=%d%s%s%s%s%s%s",
             (long long)f->nseq, tdesc, (long long)f->H, (long long)f->HV, (long long)f->K,
             (long long)f->V, gdn_dtype_name(f->dtype), f->layout == GDN_STATE_KV ? "KV" : "VK",
             f->gva == GDN_GVA_BLOCK ? "block" : "tiled", f->chunk ? f->chunk : 64,
             f->qk_l2norm ? " l2" : "", f->gate_in_kernel ? " gate" : "",
             f->fused_qkv ? " fused" : "", f->pool ? (f->padding ? " pool+pad" : f->unslotted ? " pool-noslots" : " pool") : "",
             f->predictable ? " predictable" : "",
             f->precision == GDN_PRECISION_HIGH ? "" : " fast");
}

/* n one-token sequences for the single-product checks below: q, k [n, 1, 1, K] and v [n, 1, 1, V]
 * of dtype dt, beta [n, 1, 1] and out [n, 1, 1, V] f32, unfilled. The high precision mode: the
 * checks' bars are its (the fast mode rounds the products' operands once, 2^-9 of them). */
static gdn_delta_rule_args one_token_args(gdn_dtype dt, int n, int64_t K, int64_t V)
{
    gdn_delta_rule_args a = gdn_delta_rule_default_args();
    a.precision = GDN_PRECISION_HIGH;
    a.q = alloc4(dt, n, 1, 1, K);
    a.k = alloc4(dt, n, 1, 1, K);
    a.v = alloc4(dt, n, 1, 1, V);
    a.beta = alloc3(GDN_F32, n, 1, 1);
    a.out = alloc4(GDN_F32, n, 1, 1, V);
    return a;
}

/* Runs them on ctx with algo (through device copies when `device`); *st gets the status. */
static void one_token_run(gdn_context *ctx, gdn_delta_rule_args *a, gdn_algorithm algo, bool device,
                          gdn_status *st)
{
    a->algorithm = algo;
    staging s = {0};
    if (device)
        stage_delta_rule_args(&s, a);
    *st = gdn_delta_rule(ctx, a);
    unstage(&s);
}

/* q_i.k_i in float64 of the inputs as stored, and sum_j |q_ij k_ij| in *mag. */
static double stored_dot(const gdn_delta_rule_args *a, int i, int64_t K, double *mag)
{
    double dot = 0, m = 0;
    for (int64_t j = 0; j < K; j++) {
        const double p = tensor_get(&a->q, i * K + j) * tensor_get(&a->k, i * K + j);
        dot += p;
        m += fabs(p);
    }
    *mag = m;
    return dot;
}

static void one_token_free(gdn_delta_rule_args *a)
{
    gdn_tensor *all[] = {&a->q, &a->k, &a->v, &a->beta, &a->out};
    for (int i = 0; i < 5; i++)
        tensor_free(all[i]);
}

double delta_cancelling_dots(gdn_context *ctx, gdn_algorithm algo, bool device, gdn_dtype dt, int n,
                             rng *r, gdn_status *st)
{
    enum { K = 96, V = 16 };
    gdn_delta_rule_args a = one_token_args(dt, n, K, V);
    fill_rows(&a.q, r, true);
    fill_rows(&a.k, r, true);
    tensor_fill_uniform(&a.v, r, -1, 1);
    tensor_fill_uniform(&a.beta, r, 0.2, 1);
    a.scale = 1.0f;
    one_token_run(ctx, &a, algo, device, st);
    const float *beta = a.beta.data, *out = a.out.data;
    /* the arithmetic after the dot product: f32 roundings, or 16-bit hi + lo operands */
    const double u = ldexp(1.0, -24), after = dt == GDN_F32 ? 16 * u : ldexp(1.0, -14);
    double worst = 0;
    for (int i = 0; i < n && *st == GDN_OK; i++) {
        double mag, err = 0, vv = 0;
        const double dot = stored_dot(&a, i, K, &mag);
        for (int j = 0; j < V; j++) {
            const double vj = tensor_get(&a.v, i * V + j);
            const double d = out[i * V + j] - beta[i] * dot * vj;
            err += d * d;
            vv += vj * vj;
        }
        const double o = fabs(beta[i] * dot) * sqrt(vv);
        const double units = (sqrt(err) - after * o) / (u * mag * beta[i] * sqrt(vv));
        if (!(units <= worst)) /* NaN included */
            worst = units;
    }
    one_token_free(&a);
    return worst;
}

double delta_small_scores(gdn_context *ctx, gdn_algorithm algo, bool device, gdn_dtype dt, int n,
                          rng *r, gdn_status *st)
{
    enum { K = 128, V = 16 };
    gdn_delta_rule_args a = one_token_args(dt, n, K, V);
    for (int i = 0; i < n; i++) {
        /* q = +-e_x, k = c e_x +- e_y: q.k = +-c, one product; c = m 2^-e with a 7-bit m,
         * exact in every input type */
        const int64_t x = rng_int(r, 0, K - 1), y = (x + rng_int(r, 1, K - 1)) % K;
        const double c = (double)rng_int(r, 64, 127) * ldexp(1.0, -(int)rng_int(r, 13, 16));
        const double sq = rng_int(r, 0, 1) ? 1.0 : -1.0;
        const double sk = rng_int(r, 0, 1) ? 1.0 : -1.0;
        for (int64_t j = 0; j < K; j++) {
            tensor_set(&a.q, i * K + j, j == x ? sq : 0.0);
            tensor_set(&a.k, i * K + j, j == x ? c : j == y ? sk : 0.0);
        }
    }
    tensor_fill_uniform(&a.v, r, -1, 1);
    tensor_fill_uniform(&a.beta, r, 0.2, 1);
    one_token_run(ctx, &a, algo, device, st);
    const float *beta = a.beta.data, *out = a.out.data;
    const double scale = 1.0 / sqrt((double)K); /* (the default) */
    double worst = 0;
    for (int i = 0; i < n && *st == GDN_OK; i++) {
        double err = 0, norm = 0, mag;
        const double dot = stored_dot(&a, i, K, &mag); /* +-c, exact */
        for (int j = 0; j < V; j++) {
            const double want = scale * dot * beta[i] * tensor_get(&a.v, i * V + j);
            err += (out[i * V + j] - want) * (out[i * V + j] - want);
            norm += want * want;
        }
        const double e = sqrt(err / norm);
        if (!(e <= worst)) /* NaN included */
            worst = e;
    }
    one_token_free(&a);
    return worst;
}
