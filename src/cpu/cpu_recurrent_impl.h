/* The fused recurrent delta rule for one (sequence, value head), written once and compiled once
 * per ISA level: cpu_recurrent_<isa>.c defines CPU_RECURRENT_NAME and includes this file, and the
 * build gives each of them its -m flags. The loops are shaped so that the compiler vectorizes
 * them without reassociating anything it should not: independent accumulators per column in the
 * KV layout, explicit 16-lane partial sums for the dot products of the VK layout.
 *
 * Per token, with a = exp(g): pass 1 reads the state once for k^T S' and q^T S' (S' = a S), then
 * u = beta (v - k^T S') and o = scale (q^T S' + (q . k) u); pass 2 reads and writes it once,
 * S = a S + k u^T. The state is used in place in the pool when its last dimension is contiguous
 * f32; otherwise it is staged in scratch. */
#include "cpu.h"
#include "cpu_vec.h"

#include <math.h>
#include <string.h>

static float dot(const float *x, const float *y, int64_t n)
{
    vf acc = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        acc += vload(x + i) * vload(y + i);
    float s = vsum(acc);
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

/* q, k (normalised when asked), v, the decay and beta of token `tok`; returns q . k. */
/* 1 / sqrt(||x||^2 + eps): the f32 sum, or the double one where squares past about 1e19 made
 * the f32 sum overflow (the normalised row must not come out 0). */
static float inverse_norm(const float *x, int64_t n)
{
    const float ss = dot(x, x, n);
    if (isfinite(ss))
        return 1.0f / sqrtf(ss + GDN_L2NORM_EPS);
    double wide = 0.0;
    for (int64_t i = 0; i < n; i++)
        wide += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(wide + (double)GDN_L2NORM_EPS));
}

static float load_token(const gdn_delta_rule_problem *p, int64_t row, int64_t tok, int64_t hv,
                        int64_t kh, float *q, float *k, float *v, float *decay, float *beta)
{
    const gdn_delta_rule_args *a = &p->a;
    const int64_t K = p->K;
    cpu_load_f32(&a->q, row * a->q.stride[0] + tok * a->q.stride[1] + kh * a->q.stride[2], K, q);
    cpu_load_f32(&a->k, row * a->k.stride[0] + tok * a->k.stride[1] + kh * a->k.stride[2], K, k);
    cpu_load_f32(&a->v, row * a->v.stride[0] + tok * a->v.stride[1] + hv * a->v.stride[2], p->V, v);
    if (a->qk_l2norm) {
        float iq = inverse_norm(q, K), ik = inverse_norm(k, K);
        for (int64_t i = 0; i < K; i++) {
            q[i] *= iq;
            k[i] *= ik;
        }
    }
    double g, b;
    cpu_token_gates(p, row, tok, hv, &g, &b);
    *decay = expf((float)g);
    *beta = (float)b;
    return dot(q, k, K);
}

/* KV layout: rows are keys (V contiguous values each). Pass 1 sweeps the rows once per block of
 * KV_VECS vectors of columns, with 2 KV_VECS accumulators in registers: the including file sets
 * KV_VECS to what its register file holds (32 zmm at AVX-512, 16 ymm at AVX2, 16 xmm at SSE2). */
#ifndef KV_VECS
#define KV_VECS 1
#endif

static void step_kv(float *base, int64_t rs, int64_t K, int64_t V, const float *q, const float *k,
                    float decay, float *ks, float *qs)
{
    enum { W = KV_VECS * LANES };
    int64_t v0 = 0;
    for (; v0 + W <= V; v0 += W) {
        vf a[KV_VECS], b[KV_VECS];
#pragma GCC unroll 4
        for (int j = 0; j < KV_VECS; j++)
            a[j] = b[j] = (vf){0};
        for (int64_t i = 0; i < K; i++) {
            const float *r = base + i * rs + v0;
            const vf kk = vsplat(k[i]), qq = vsplat(q[i]);
#pragma GCC unroll 4
            for (int j = 0; j < KV_VECS; j++) {
                const vf x = vload(r + j * LANES);
                a[j] += kk * x;
                b[j] += qq * x;
            }
        }
        const vf d = vsplat(decay);
#pragma GCC unroll 4
        for (int j = 0; j < KV_VECS; j++) {
            vstore(ks + v0 + j * LANES, d * a[j]);
            vstore(qs + v0 + j * LANES, d * b[j]);
        }
    }
    for (; v0 < V; v0++) { /* columns past the last whole block */
        float x = 0.0f, y = 0.0f;
        for (int64_t i = 0; i < K; i++) {
            x += k[i] * base[i * rs + v0];
            y += q[i] * base[i * rs + v0];
        }
        ks[v0] = decay * x;
        qs[v0] = decay * y;
    }
}

/* Token t's write fused with token t+1's read, in one sweep (KV layout): each row becomes
 * decay S + k u^T and, while it is in registers, feeds next token's k'^T S and q'^T S. In prefill
 * this halves the passes over the state. FUSED_VECS vectors of columns per block: the including
 * file sets what the register file holds (u, r and 2 accumulators per vector, plus broadcasts). */
#ifndef FUSED_VECS
#define FUSED_VECS 2
#endif

static void write_step_kv(float *base, int64_t rs, int64_t K, int64_t V, const float *k,
                          float decay, const float *u, const float *q1, const float *k1,
                          float decay1, float *ks, float *qs)
{
    enum { W = FUSED_VECS * LANES };
    const vf d = vsplat(decay);
    int64_t v0 = 0;
    for (; v0 + W <= V; v0 += W) {
        vf uu[FUSED_VECS], a[FUSED_VECS], b[FUSED_VECS];
#pragma GCC unroll 4
        for (int j = 0; j < FUSED_VECS; j++) {
            uu[j] = vload(u + v0 + j * LANES);
            a[j] = b[j] = (vf){0};
        }
        for (int64_t i = 0; i < K; i++) {
            float *r = base + i * rs + v0;
            const vf kk = vsplat(k[i]), nk = vsplat(k1[i]), nq = vsplat(q1[i]);
#pragma GCC unroll 4
            for (int j = 0; j < FUSED_VECS; j++) {
                const vf x = d * vload(r + j * LANES) + kk * uu[j];
                vstore(r + j * LANES, x);
                a[j] += nk * x;
                b[j] += nq * x;
            }
        }
        const vf d1 = vsplat(decay1);
#pragma GCC unroll 4
        for (int j = 0; j < FUSED_VECS; j++) {
            vstore(ks + v0 + j * LANES, d1 * a[j]);
            vstore(qs + v0 + j * LANES, d1 * b[j]);
        }
    }
    for (; v0 < V; v0++) { /* columns past the last whole block */
        float x = 0.0f, y = 0.0f;
        for (int64_t i = 0; i < K; i++) {
            float *r = base + i * rs + v0;
            *r = decay * *r + k[i] * u[v0];
            x += k1[i] * *r;
            y += q1[i] * *r;
        }
        ks[v0] = decay1 * x;
        qs[v0] = decay1 * y;
    }
}

static void write_kv(float *base, int64_t rs, int64_t K, int64_t V, const float *k, float decay,
                     const float *u)
{
    for (int64_t i = 0; i < K; i++) {
        float *r = base + i * rs;
        for (int64_t j = 0; j < V; j++)
            r[j] = decay * r[j] + k[i] * u[j];
    }
}

/* VK layout: rows are values (K contiguous keys each). */
static void step_vk(float *base, int64_t rs, int64_t K, int64_t V, const float *q, const float *k,
                    float decay, float *ks, float *qs)
{
    for (int64_t j = 0; j < V; j++) {
        const float *r = base + j * rs;
        ks[j] = decay * dot(k, r, K);
        qs[j] = decay * dot(q, r, K);
    }
}

static void write_vk(float *base, int64_t rs, int64_t K, int64_t V, const float *k, float decay,
                     const float *u)
{
    for (int64_t j = 0; j < V; j++) {
        float *r = base + j * rs;
        for (int64_t i = 0; i < K; i++)
            r[i] = decay * r[i] + u[j] * k[i];
    }
}

void CPU_RECURRENT_NAME(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch)
{
    const gdn_delta_rule_args *a = &p->a;
    const int64_t K = p->K, V = p->V;
    const bool kv = a->state_layout == GDN_STATE_KV;
    int64_t slot = -1;
    if (p->has_state) {
        slot = gdn_seq_slot(&p->seqs, n);
        if (slot < 0)
            return; /* padding */
    }
    const bool init = p->has_state && gdn_seq_has_init(&p->seqs, n);
    int64_t row, t0, len;
    gdn_seq_span(&p->seqs, n, &row, &t0, &len);
    const int64_t kh = a->gva == GDN_GVA_BLOCK ? hv / p->ratio : hv % p->H;
    float *q = scratch, *k = q + K, *v = k + K, *ks = v + V, *qs = ks + V, *u = qs + V;
    float *staged = u + V;

    /* the state: rows of the pool itself, or a staged copy (non-f32 or strided pools) */
    const int64_t *st = a->state.stride;
    const bool in_place = p->has_state && a->state.dtype == GDN_F32 && st[3] == 1;
    const int64_t rows = kv ? K : V, cols = kv ? V : K;
    float *base = staged;
    int64_t rs = cols;
    const int64_t pool_off = slot * st[0] + hv * st[1];
    if (in_place) {
        base = (float *)a->state.data + pool_off;
        rs = st[2];
    }
    if (!in_place || !init) /* stage the pool's state, or start from zeros */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                base[r * rs + c] =
                    init ? (float)gdn_load(&a->state, pool_off + r * st[2] + c * st[3]) : 0.0f;

    /* In the KV layout each sweep also does the next token's read: q1/k1/v1 hold token t+1. */
    float *q1 = staged + K * V, *k1 = q1 + K, *v1 = k1 + K;
    float decay = 0.0f, beta = 0.0f, qk = 0.0f;
    if (len > 0) {
        qk = load_token(p, row, t0, hv, kh, q, k, v, &decay, &beta);
        (kv ? step_kv : step_vk)(base, rs, K, V, q, k, decay, ks, qs);
    }
    for (int64_t t = t0; t < t0 + len; t++) {
        const int64_t oo = row * a->out.stride[0] + t * a->out.stride[1] + hv * a->out.stride[2];
        for (int64_t j = 0; j < V; j++) {
            u[j] = beta * (v[j] - ks[j]);
            gdn_store(&a->out, oo + j, (double)((float)p->scale * (qs[j] + qk * u[j])));
        }
        if (t + 1 == t0 + len) {
            (kv ? write_kv : write_vk)(base, rs, K, V, k, decay, u);
            break;
        }
        float decay1, beta1;
        const float qk1 = load_token(p, row, t + 1, hv, kh, q1, k1, v1, &decay1, &beta1);
        if (kv) {
            write_step_kv(base, rs, K, V, k, decay, u, q1, k1, decay1, ks, qs);
        } else {
            write_vk(base, rs, K, V, k, decay, u);
            step_vk(base, rs, K, V, q1, k1, decay1, ks, qs);
        }
        float *swap; /* token t+1 becomes the current one; its old buffers take the next */
        swap = q, q = q1, q1 = swap;
        swap = k, k = k1, k1 = swap;
        swap = v, v = v1, v1 = swap;
        decay = decay1, beta = beta1, qk = qk1;
    }
    if (p->has_state && !in_place)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                gdn_store(&a->state, pool_off + r * st[2] + c * st[3], base[r * rs + c]);
}
