/* The gated delta rule in float64 (SPEC sections 1, 2, 6, 7): the recurrent form token by token,
 * and the chunked WY form with an exact triangular inverse. Both read the same rounded inputs
 * and accumulate in double, so they agree far below f32 rounding. */
#include "ref.h"

#include <string.h>

/* Value head hv reads key head hv / r (block) or hv % H (tiled). */
static int64_t key_head(const gdn_delta_rule_problem *p, int64_t hv)
{
    return p->a.gva == GDN_GVA_BLOCK ? hv / p->ratio : hv % p->H;
}

static int64_t token_offset(const gdn_tensor *t, int64_t row, int64_t tok, int64_t head)
{
    return row * t->stride[0] + tok * t->stride[1] + head * t->stride[2];
}

/* A q or k row as doubles, L2-normalised when the caller asked for it in the kernel. */
static void load_key_row(const gdn_delta_rule_problem *p, const gdn_tensor *t, int64_t off,
                         double *dst)
{
    double ss = 0.0;
    for (int64_t i = 0; i < p->K; i++) {
        dst[i] = gdn_load(t, off + i);
        ss += dst[i] * dst[i];
    }
    if (p->a.qk_l2norm) {
        double inv = 1.0 / sqrt(ss + (double)GDN_L2NORM_EPS);
        for (int64_t i = 0; i < p->K; i++)
            dst[i] *= inv;
    }
}

/* Everything token `tok` of value head hv contributes: q, k (K), v (V), g and beta. */
static void load_token(const gdn_delta_rule_problem *p, int64_t row, int64_t tok, int64_t hv,
                       double *q, double *k, double *v, double *g, double *beta)
{
    const gdn_delta_rule_args *a = &p->a;
    int64_t kh = key_head(p, hv);
    load_key_row(p, &a->q, token_offset(&a->q, row, tok, kh), q);
    load_key_row(p, &a->k, token_offset(&a->k, row, tok, kh), k);
    int64_t voff = token_offset(&a->v, row, tok, hv);
    for (int64_t j = 0; j < p->V; j++)
        v[j] = gdn_load(&a->v, voff + j);
    double graw = a->g.data ? gdn_load(&a->g, token_offset(&a->g, row, tok, hv)) : 0.0;
    double braw = gdn_load(&a->beta, token_offset(&a->beta, row, tok, hv));
    *g = a->gate_in_kernel ? ref_gate_g(&a->gating, hv, graw) : graw;
    *beta = a->gate_in_kernel ? ref_gate_beta(&a->gating, braw) : braw;
}

static void store_output(const gdn_delta_rule_problem *p, int64_t row, int64_t tok, int64_t hv,
                         const double *o)
{
    int64_t off = token_offset(&p->a.out, row, tok, hv);
    for (int64_t j = 0; j < p->V; j++)
        gdn_store(&p->a.out, off + j, o[j]);
}

/* Pool element (i, j) = (key index, value index) of value head hv in slot, either layout. */
static int64_t state_offset(const gdn_delta_rule_problem *p, int64_t slot, int64_t hv, int64_t i,
                            int64_t j)
{
    const int64_t *s = p->a.state.stride;
    int64_t base = slot * s[0] + hv * s[1];
    return p->a.state_layout == GDN_STATE_KV ? base + i * s[2] + j * s[3]
                                             : base + j * s[2] + i * s[3];
}

/* ---- recurrent form (SPEC section 1) ------------------------------------------------------- */

static void run_recurrent(const gdn_delta_rule_problem *p, int64_t row, int64_t t0, int64_t len,
                          int64_t hv, double *S, double *scratch)
{
    const int64_t K = p->K, V = p->V;
    double *q = scratch, *k = q + K, *v = k + K, *u = v + V;
    for (int64_t t = t0; t < t0 + len; t++) {
        double g, beta;
        load_token(p, row, t, hv, q, k, v, &g, &beta);
        double decay = exp(g);
        for (int64_t x = 0; x < K * V; x++) /* decay first, before the read */
            S[x] *= decay;
        for (int64_t j = 0; j < V; j++) { /* u = beta * (v - S^T k) */
            double kS = 0.0;
            for (int64_t i = 0; i < K; i++)
                kS += k[i] * S[i * V + j];
            u[j] = beta * (v[j] - kS);
        }
        for (int64_t i = 0; i < K; i++) /* S += k u^T */
            for (int64_t j = 0; j < V; j++)
                S[i * V + j] += k[i] * u[j];
        for (int64_t j = 0; j < V; j++) { /* o = scale * S^T q, read after the write */
            double o = 0.0;
            for (int64_t i = 0; i < K; i++)
                o += q[i] * S[i * V + j];
            u[j] = p->scale * o;
        }
        store_output(p, row, t, hv, u);
    }
}

/* ---- chunked WY form (SPEC section 2) ------------------------------------------------------ */

typedef struct chunk_buffers {
    double *Q, *Kc, *Vc;  /* [C, K], [C, K], [C, V] the chunk's inputs */
    double *W, *U;        /* [C, K], [C, V]; U becomes Vn = U - W S0 */
    double *A, *Tinv;     /* [C, C] strictly lower A and (I + A)^-1 */
    double *G, *beta;     /* [C] cumulative log-decay, write strength */
    double *o;            /* [V] one output row */
} chunk_buffers;

static double *carve(double **cursor, int64_t n)
{
    double *p = *cursor;
    *cursor += n;
    return p;
}

static size_t chunk_doubles(int64_t C, int64_t K, int64_t V)
{
    return (size_t)(3 * C * K + 2 * C * V + 2 * C * C + 2 * C + V);
}

static chunk_buffers chunk_buffers_carve(double *mem, int64_t C, int64_t K, int64_t V)
{
    chunk_buffers b;
    b.Q = carve(&mem, C * K);
    b.Kc = carve(&mem, C * K);
    b.W = carve(&mem, C * K);
    b.Vc = carve(&mem, C * V);
    b.U = carve(&mem, C * V);
    b.A = carve(&mem, C * C);
    b.Tinv = carve(&mem, C * C);
    b.G = carve(&mem, C);
    b.beta = carve(&mem, C);
    b.o = carve(&mem, V);
    return b;
}

static double dot(const double *x, const double *y, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

/* Tinv = (I + A)^-1 for strictly lower A, by forward substitution, exactly:
 * Tinv[i][j] = -(A[i][j] + sum_{j<m<i} A[i][m] Tinv[m][j]) for j < i, Tinv[i][i] = 1. */
static void unit_lower_inverse(const double *A, double *Tinv, int64_t L, int64_t C)
{
    for (int64_t i = 0; i < L; i++) {
        for (int64_t j = 0; j < i; j++) {
            double s = A[i * C + j];
            for (int64_t m = j + 1; m < i; m++)
                s += A[i * C + m] * Tinv[m * C + j];
            Tinv[i * C + j] = -s;
        }
        Tinv[i * C + i] = 1.0;
        for (int64_t j = i + 1; j < L; j++)
            Tinv[i * C + j] = 0.0;
    }
}

/* One chunk of L <= C tokens starting at token c0, advancing S from S0 to S_out. */
static void run_chunk(const gdn_delta_rule_problem *p, int64_t row, int64_t c0, int64_t L,
                      int64_t hv, double *S, const chunk_buffers *b)
{
    const int64_t C = p->chunk, K = p->K, V = p->V;
    double g;
    for (int64_t i = 0; i < L; i++) {
        load_token(p, row, c0 + i, hv, b->Q + i * K, b->Kc + i * K, b->Vc + i * V, &g,
                   &b->beta[i]);
        b->G[i] = (i ? b->G[i - 1] : 0.0) + g; /* within-chunk cumulative log-decay */
    }
    /* A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j), i > j: exp of a non-positive number only */
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++)
            b->A[i * C + j] = j < i ? b->beta[i] * dot(b->Kc + i * K, b->Kc + j * K, K) *
                                          exp(b->G[i] - b->G[j])
                                    : 0.0;
    unit_lower_inverse(b->A, b->Tinv, L, C);
    /* W = Tinv diag(beta exp(G)) K,  U = Tinv diag(beta) V */
    for (int64_t i = 0; i < L; i++) {
        double *w = b->W + i * K, *u = b->U + i * V;
        memset(w, 0, (size_t)K * sizeof *w);
        memset(u, 0, (size_t)V * sizeof *u);
        for (int64_t j = 0; j <= i; j++) {
            double t = b->Tinv[i * C + j] * b->beta[j];
            double te = t * exp(b->G[j]);
            for (int64_t x = 0; x < K; x++)
                w[x] += te * b->Kc[j * K + x];
            for (int64_t x = 0; x < V; x++)
                u[x] += t * b->Vc[j * V + x];
        }
    }
    /* Vn = U - W S0 (in place in U) */
    for (int64_t i = 0; i < L; i++)
        for (int64_t x = 0; x < K; x++) {
            double w = b->W[i * K + x];
            for (int64_t j = 0; j < V; j++)
                b->U[i * V + j] -= w * S[x * V + j];
        }
    /* O_i = scale (exp(G_i) q_i S0 + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) Vn_j) */
    for (int64_t i = 0; i < L; i++) {
        const double *q = b->Q + i * K;
        double eg = exp(b->G[i]);
        for (int64_t j = 0; j < V; j++)
            b->o[j] = 0.0;
        for (int64_t x = 0; x < K; x++)
            for (int64_t j = 0; j < V; j++)
                b->o[j] += eg * q[x] * S[x * V + j];
        for (int64_t m = 0; m <= i; m++) {
            double s = dot(q, b->Kc + m * K, K) * exp(b->G[i] - b->G[m]);
            for (int64_t j = 0; j < V; j++)
                b->o[j] += s * b->U[m * V + j];
        }
        for (int64_t j = 0; j < V; j++)
            b->o[j] *= p->scale;
        store_output(p, row, c0 + i, hv, b->o);
    }
    /* S_out = exp(G_last) S0 + sum_j exp(G_last - G_j) k_j Vn_j^T */
    double glast = b->G[L - 1];
    double elast = exp(glast);
    for (int64_t x = 0; x < K * V; x++)
        S[x] *= elast;
    for (int64_t m = 0; m < L; m++) {
        double e = exp(glast - b->G[m]);
        for (int64_t x = 0; x < K; x++) {
            double kx = e * b->Kc[m * K + x];
            for (int64_t j = 0; j < V; j++)
                S[x * V + j] += kx * b->U[m * V + j];
        }
    }
}

static void run_chunked(const gdn_delta_rule_problem *p, int64_t row, int64_t t0, int64_t len,
                        int64_t hv, double *S, double *scratch)
{
    chunk_buffers b = chunk_buffers_carve(scratch, p->chunk, p->K, p->V);
    for (int64_t c0 = t0; c0 < t0 + len; c0 += p->chunk) {
        int64_t L = t0 + len - c0 < p->chunk ? t0 + len - c0 : p->chunk;
        run_chunk(p, row, c0, L, hv, S, &b);
    }
}

/* ---- driver -------------------------------------------------------------------------------- */

static bool use_chunked(const gdn_delta_rule_problem *p)
{
    if (p->a.algorithm == GDN_ALGO_AUTO)
        return p->max_len > p->chunk;
    return p->a.algorithm == GDN_ALGO_CHUNKED;
}

size_t ref_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    (void)ctx;
    /* K, V <= GDN_MAX_HEAD_DIM and chunk <= 128: these sizes are small; checked all the same */
    size_t state = gdn_size_mul((size_t)p->K, (size_t)p->V);
    size_t work = use_chunked(p) ? chunk_doubles(p->chunk, p->K, p->V)
                                 : (size_t)(2 * p->K + 2 * p->V);
    return gdn_size_mul(gdn_size_add(state, work), sizeof(double));
}

gdn_status ref_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p, void *workspace)
{
    (void)ctx;
    const int64_t K = p->K, V = p->V;
    double *S = workspace, *scratch = S + K * V;
    bool chunked = use_chunked(p);
    for (int64_t n = 0; n < p->seqs.count; n++) {
        int64_t slot = p->has_state ? gdn_seq_slot(&p->seqs, n) : -1;
        if (p->has_state && slot < 0)
            continue; /* padding: nothing is read or written */
        bool from_state = p->has_state && gdn_seq_has_init(&p->seqs, n);
        int64_t row, t0, len;
        gdn_seq_span(&p->seqs, n, &row, &t0, &len);
        for (int64_t hv = 0; hv < p->HV; hv++) {
            for (int64_t i = 0; i < K; i++)
                for (int64_t j = 0; j < V; j++)
                    S[i * V + j] =
                        from_state ? gdn_load(&p->a.state, state_offset(p, slot, hv, i, j)) : 0.0;
            if (chunked)
                run_chunked(p, row, t0, len, hv, S, scratch);
            else
                run_recurrent(p, row, t0, len, hv, S, scratch);
            if (p->has_state)
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++)
                        gdn_store(&p->a.state, state_offset(p, slot, hv, i, j), S[i * V + j]);
        }
    }
    return GDN_OK;
}
