/* The chunked WY form on the cpu backend: this file loads chunks, owns the buffers and splits the
 * work over the pool; cpu_chunked_<isa>.c (cpu_chunked_impl.h) do the arithmetic.
 *
 * Two schedules. With at least as many (sequence, value head) tasks as threads, each task runs
 * its chunks one after another, preparing each and passing the state through it while its
 * buffers are still in cache ("fused"). With fewer tasks (few heads, long sequences) that would
 * leave threads idle, so windows of chunks run in two phases ("split"): the preparation, which
 * does not depend on the state, in parallel over (task, chunk); then the state pass, sequential
 * over chunks but in parallel over (task, column block of the state): every column of S, V' and
 * O depends on the same columns only. */
#include "cpu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Floats of one buffer, rounded so that every carved buffer starts 64 bytes apart. */
static size_t floats(int64_t n) { return (size_t)round_up(n, 16); }

/* The chunk length the cpu runs: the caller's chunk_size, else 32 for the f32 kernels (no tile
 * shape to fill, and 32 costs fewer multiply-adds per token than 64: the C^2 terms halve while
 * the state's 3 K V stay; docs/PERFORMANCE.md has the measurement) and 64 on AMX, whose products
 * are cheap next to the per-chunk f32 work on the state. */
static int64_t chunk_len(const cpu_chunk_kernels *k, const gdn_delta_rule_problem *p)
{
    if (p->a.chunk_size)
        return p->chunk;
    return k == cpu_chunk_amx ? 64 : 32;
}

/* AMX for bf16 q, k, v at the amx level; the level's f32 kernels otherwise (f32 inputs need
 * f32 products for their 1e-5 bar; f16 ones would lose bits to bf16). */
static const cpu_chunk_kernels *kernels_for(const cpu_backend_state *st,
                                            const gdn_delta_rule_problem *p)
{
    const gdn_delta_rule_args *a = &p->a;
    if (st->isa == GDN_ISA_AMX && cpu_chunk_amx && a->q.dtype == GDN_BF16 &&
        a->k.dtype == GDN_BF16 && a->v.dtype == GDN_BF16)
        return cpu_chunk_amx;
    return st->chunk;
}

static cpu_chunk_geom geom_of(const cpu_chunk_kernels *k, const gdn_delta_rule_problem *p)
{
    cpu_chunk_geom g;
    g.C = chunk_len(k, p), g.K = p->K, g.V = p->V;
    g.Cp = round_up(g.C, k->pad), g.Kp = round_up(g.K, k->pad), g.Vp = round_up(g.V, k->pad);
    g.scale = (float)p->scale;
    return g;
}

static size_t inputs_floats(const cpu_chunk_geom *g)
{
    return floats(g->Cp * g->Kp) + floats(g->Cp * g->Vp) + 2 * floats(g->Cp * g->Cp) +
           4 * floats(g->Cp);
}

static size_t record_floats(const cpu_chunk_geom *g)
{
    return 2 * floats(g->Cp * g->Kp) + floats(g->Cp * g->Vp) + floats(g->Kp * g->Cp) +
           2 * floats(g->Cp * g->Cp) + floats(3 * g->Cp) + floats(1);
}

static size_t state_floats(const cpu_chunk_geom *g) { return floats(g->Kp * g->Vp); }
static size_t scratch_floats(const cpu_chunk_kernels *k, const cpu_chunk_geom *g)
{
    return k->scratch_floats ? floats((int64_t)k->scratch_floats(g)) : 0;
}
static size_t out_floats(const cpu_chunk_geom *g) { return floats(g->Cp * g->Vp); }

static float *carve(float **cursor, int64_t n)
{
    float *p = *cursor;
    *cursor += floats(n);
    return p;
}

static cpu_chunk_inputs carve_inputs(float **cur, const cpu_chunk_geom *g)
{
    cpu_chunk_inputs in;
    in.Kc = carve(cur, g->Cp * g->Kp);
    in.Vc = carve(cur, g->Cp * g->Vp);
    in.A = carve(cur, g->Cp * g->Cp);
    in.Tinv = carve(cur, g->Cp * g->Cp);
    in.G = carve(cur, g->Cp);
    in.beta = carve(cur, g->Cp);
    in.iq = carve(cur, g->Cp);
    in.ik = carve(cur, g->Cp);
    return in;
}

static cpu_chunk_record carve_record(float **cur, const cpu_chunk_geom *g)
{
    cpu_chunk_record r;
    r.W = carve(cur, g->Cp * g->Kp);
    r.Q = carve(cur, g->Cp * g->Kp);
    r.U = carve(cur, g->Cp * g->Vp);
    r.KT = carve(cur, g->Kp * g->Cp);
    r.P = carve(cur, g->Cp * g->Cp);
    r.T = carve(cur, g->Cp * g->Cp);
    r.rows = carve(cur, 3 * g->Cp);
    r.decay = carve(cur, 1);
    return r;
}

/* ---- schedules --------------------------------------------------------------------------- */

typedef struct chunk_job {
    const gdn_delta_rule_problem *p;
    const cpu_chunk_kernels *k;
    cpu_chunk_geom g;
    int64_t tasks;          /* N * HV */
    bool split;
    int64_t window;         /* split: chunks per task and window; the window's first chunk */
    int64_t first;
    float *workers;         /* per worker: inputs, O, kernel scratch (+ record, state: fused) */
    size_t per_worker;
    float *states;          /* split: one state per task */
    float *records;         /* split: window records per task */
} chunk_job;

/* One (sequence, value head) of the call, resolved. */
typedef struct seq_head {
    int64_t hv, kh, slot, row, t0, len, chunks;
    bool init, skip;
} seq_head;

static seq_head seq_head_of(const chunk_job *j, int64_t task)
{
    const gdn_delta_rule_problem *p = j->p;
    seq_head s;
    const int64_t n = task / p->HV;
    s.hv = task % p->HV;
    s.kh = p->a.gva == GDN_GVA_BLOCK ? s.hv / p->ratio : s.hv % p->H;
    s.slot = p->has_state ? gdn_seq_slot(&p->seqs, n) : -1;
    s.skip = p->has_state && s.slot < 0; /* padding: nothing is read or written */
    s.init = p->has_state && !s.skip && gdn_seq_has_init(&p->seqs, n);
    gdn_seq_span(&p->seqs, n, &s.row, &s.t0, &s.len);
    s.chunks = (s.len + j->g.C - 1) / j->g.C;
    return s;
}

static int64_t state_offset(const gdn_delta_rule_problem *p, const seq_head *s, int64_t i,
                            int64_t x)
{
    const int64_t *st = p->a.state.stride;
    const int64_t base = s->slot * st[0] + s->hv * st[1];
    return p->a.state_layout == GDN_STATE_KV ? base + i * st[2] + x * st[3]
                                             : base + x * st[2] + i * st[3];
}

/* S [Kp, Vp] (key i, value x) from the pool, or zeros. */
static void state_load(const chunk_job *j, const seq_head *s, float *S)
{
    const gdn_delta_rule_problem *p = j->p;
    const int64_t Vp = j->g.Vp;
    memset(S, 0, (size_t)(j->g.Kp * Vp) * sizeof *S);
    if (!s->init)
        return;
    const bool rows = p->a.state_layout == GDN_STATE_KV && p->a.state.stride[3] == 1;
    for (int64_t i = 0; i < p->K; i++) {
        if (rows) {
            cpu_load_f32(&p->a.state, state_offset(p, s, i, 0), p->V, S + i * Vp);
            continue;
        }
        for (int64_t x = 0; x < p->V; x++)
            S[i * Vp + x] = (float)gdn_load(&p->a.state, state_offset(p, s, i, x));
    }
}

static void state_store(const chunk_job *j, const seq_head *s, const float *S)
{
    const gdn_delta_rule_problem *p = j->p;
    if (!p->has_state)
        return;
    const bool rows = p->a.state_layout == GDN_STATE_KV && p->a.state.stride[3] == 1;
    for (int64_t i = 0; i < p->K; i++) {
        if (rows) {
            cpu_store_f32(&p->a.state, state_offset(p, s, i, 0), p->V, S + i * j->g.Vp);
            continue;
        }
        for (int64_t x = 0; x < p->V; x++)
            gdn_store(&p->a.state, state_offset(p, s, i, x), S[i * j->g.Vp + x]);
    }
}

static int64_t token_offset(const gdn_tensor *t, int64_t row, int64_t tok, int64_t head)
{
    return row * t->stride[0] + tok * t->stride[1] + head * t->stride[2];
}

static float inverse_norm(const float *x, int64_t n)
{
    double s4[4] = {0.0, 0.0, 0.0, 0.0}; /* four chains: one would wait on each add's latency */
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++)
            s4[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++)
        s4[0] += (double)x[i] * x[i];
    const double ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    return (float)(1.0 / sqrt(ss + (double)GDN_L2NORM_EPS));
}

/* The L2 norm the call asks for: into *inv for kernels that take raw q, k (a bf16 row scaled
 * by it would be rounded again, and q.k, k.k and k.S cancel), else applied to x in place. */
static void l2_norm_row(const cpu_chunk_kernels *k, float *x, int64_t n, float *inv)
{
    const float r = inverse_norm(x, n);
    if (k->raw_qk) {
        *inv = r;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] *= r;
}

/* Chunk c of a task into `in` and rec->Q (rows past its length zero, beta 0, G held at the last
 * token's); returns its length. */
static int64_t load_chunk(const chunk_job *j, const seq_head *s, int64_t c, cpu_chunk_inputs *in,
                          cpu_chunk_record *rec)
{
    const gdn_delta_rule_problem *p = j->p;
    const gdn_delta_rule_args *a = &p->a;
    const cpu_chunk_geom *g = &j->g;
    const int64_t c0 = s->t0 + c * g->C;
    const int64_t L = s->t0 + s->len - c0 < g->C ? s->t0 + s->len - c0 : g->C;
    /* zero what no token fills: the padding columns of each row, and the rows past L */
    float *bufs[3] = {rec->Q, in->Kc, in->Vc};
    const int64_t width[3] = {p->K, p->K, p->V}, ld[3] = {g->Kp, g->Kp, g->Vp};
    for (int b = 0; b < 3; b++) {
        for (int64_t i = 0; i < L && width[b] < ld[b]; i++)
            memset(bufs[b] + i * ld[b] + width[b], 0, (size_t)(ld[b] - width[b]) * sizeof(float));
        memset(bufs[b] + L * ld[b], 0, (size_t)((g->Cp - L) * ld[b]) * sizeof(float));
    }
    double G = 0.0;
    for (int64_t i = 0; i < L; i++) {
        const int64_t t = c0 + i;
        float *q = rec->Q + i * g->Kp, *k = in->Kc + i * g->Kp;
        cpu_load_f32(&a->q, token_offset(&a->q, s->row, t, s->kh), p->K, q);
        cpu_load_f32(&a->k, token_offset(&a->k, s->row, t, s->kh), p->K, k);
        cpu_load_f32(&a->v, token_offset(&a->v, s->row, t, s->hv), p->V, in->Vc + i * g->Vp);
        in->iq[i] = in->ik[i] = 1.0f;
        if (a->qk_l2norm) {
            l2_norm_row(j->k, q, p->K, &in->iq[i]);
            l2_norm_row(j->k, k, p->K, &in->ik[i]);
        }
        double gt, bt;
        cpu_token_gates(p, s->row, t, s->hv, &gt, &bt);
        G += gt;
        in->G[i] = (float)G;
        in->beta[i] = (float)bt;
    }
    for (int64_t i = L; i < g->Cp; i++) {
        in->G[i] = (float)G;
        in->beta[i] = 0.0f;
        in->iq[i] = in->ik[i] = 1.0f;
    }
    return L;
}

static int64_t chunk_length(const chunk_job *j, const seq_head *s, int64_t c)
{
    const int64_t left = s->len - c * j->g.C;
    return left < j->g.C ? left : j->g.C;
}

/* Asks for chunk c's q, k and v rows to be brought into cache while the previous chunk computes:
 * each (token, head) row is its own short run of memory, too short for the hardware prefetcher
 * to follow from one token to the next. Into L2: rows a few KiB apart share L1 sets, and L1
 * holds the working set. (Prefetching the output rows for writing as well measured slower.) */
static void prefetch_chunk(const chunk_job *j, const seq_head *s, int64_t c)
{
    const gdn_delta_rule_args *a = &j->p->a;
    if (c >= s->chunks)
        return;
    const int64_t c0 = s->t0 + c * j->g.C, L = chunk_length(j, s, c);
    const gdn_tensor *rows[3] = {&a->q, &a->k, &a->v};
    const int64_t heads[3] = {s->kh, s->kh, s->hv}, dims[3] = {j->p->K, j->p->K, j->p->V};
    for (int x = 0; x < 3; x++) {
        const size_t esize = gdn_dtype_size(rows[x]->dtype), bytes = (size_t)dims[x] * esize;
        for (int64_t i = 0; i < L; i++) {
            const char *row = (const char *)rows[x]->data +
                              (size_t)token_offset(rows[x], s->row, c0 + i, heads[x]) * esize;
            for (size_t b = 0; b < bytes; b += 64)
                __builtin_prefetch(row + b, 0, 2);
        }
    }
}

/* Rows 0..L-1, columns [c0, c0 + nc) of O to the output (columns past V are padding). */
static void store_out(const chunk_job *j, const seq_head *s, int64_t c, int64_t L, const float *O,
                      int64_t c0, int64_t nc)
{
    const gdn_tensor *out = &j->p->a.out;
    const int64_t n = c0 + nc <= j->g.V ? nc : j->g.V - c0;
    for (int64_t i = 0; n > 0 && i < L; i++)
        cpu_store_f32(out, token_offset(out, s->row, s->t0 + c * j->g.C + i, s->hv) + c0, n,
                      O + i * j->g.Vp + c0);
}

static void fused_task(void *arg, int64_t task, int worker)
{
    const chunk_job *j = arg;
    const seq_head s = seq_head_of(j, task);
    if (s.skip)
        return;
    float *cur = j->workers + (size_t)worker * j->per_worker;
    cpu_chunk_inputs in = carve_inputs(&cur, &j->g);
    float *O = carve(&cur, j->g.Cp * j->g.Vp), *scratch = cur;
    cur += scratch_floats(j->k, &j->g);
    cpu_chunk_record rec = carve_record(&cur, &j->g);
    float *S = carve(&cur, j->g.Kp * j->g.Vp);
    state_load(j, &s, S);
    for (int64_t c = 0; c < s.chunks; c++) {
        const int64_t L = load_chunk(j, &s, c, &in, &rec);
        prefetch_chunk(j, &s, c + 1);
        j->k->prep(&j->g, &in, &rec, scratch);
        j->k->state(&j->g, &rec, S, 0, j->g.Vp, O, scratch);
        store_out(j, &s, c, L, O, 0, j->g.Vp);
    }
    state_store(j, &s, S);
}

static float *task_state(const chunk_job *j, int64_t task)
{
    return j->states + (size_t)task * state_floats(&j->g);
}

static cpu_chunk_record window_record(const chunk_job *j, int64_t task, int64_t c)
{
    float *cur = j->records + ((size_t)task * j->window + (size_t)c) * record_floats(&j->g);
    return carve_record(&cur, &j->g);
}

static void split_load_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const chunk_job *j = arg;
    const seq_head s = seq_head_of(j, task);
    if (!s.skip)
        state_load(j, &s, task_state(j, task));
}

static void split_store_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const chunk_job *j = arg;
    const seq_head s = seq_head_of(j, task);
    if (!s.skip)
        state_store(j, &s, task_state(j, task));
}

/* Phase 1 unit: chunk first + u % window of task u / window. Its record keeps what phase 2
 * needs; the decay of a chunk past the task's end stays unused. */
static void split_prep_task(void *arg, int64_t unit, int worker)
{
    const chunk_job *j = arg;
    const int64_t task = unit / j->window, c = j->first + unit % j->window;
    const seq_head s = seq_head_of(j, task);
    if (s.skip || c >= s.chunks)
        return;
    float *cur = j->workers + (size_t)worker * j->per_worker;
    cpu_chunk_inputs in = carve_inputs(&cur, &j->g);
    float *scratch = cur + out_floats(&j->g);
    cpu_chunk_record rec = window_record(j, task, c - j->first);
    load_chunk(j, &s, c, &in, &rec);
    j->k->prep(&j->g, &in, &rec, scratch);
}

/* Phase 2 unit: one column block of one task's state through the window's chunks. */
static void split_state_task(void *arg, int64_t unit, int worker)
{
    const chunk_job *j = arg;
    const int64_t blocks = j->g.Vp / j->k->pad;
    const int64_t task = unit / blocks, c0 = unit % blocks * j->k->pad;
    const seq_head s = seq_head_of(j, task);
    if (s.skip)
        return;
    float *O = j->workers + (size_t)worker * j->per_worker + inputs_floats(&j->g);
    float *scratch = O + out_floats(&j->g);
    for (int64_t c = j->first; c < j->first + j->window && c < s.chunks; c++) {
        cpu_chunk_record rec = window_record(j, task, c - j->first);
        j->k->state(&j->g, &rec, task_state(j, task), c0, j->k->pad, O, scratch);
        store_out(j, &s, c, chunk_length(j, &s, c), O, c0, j->k->pad);
    }
}

/* ---- entry points ------------------------------------------------------------------------ */

static chunk_job job_of(const cpu_backend_state *st, const gdn_delta_rule_problem *p)
{
    chunk_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.k = kernels_for(st, p);
    j.g = geom_of(j.k, p);
    j.tasks = p->seqs.count * p->HV;
    const int64_t threads = cpu_pool_threads(st->pool);
    /* split only when whole rounds of fused tasks would leave threads idle */
    j.split = threads > 1 && (j.tasks < threads || (j.tasks < 4 * threads && j.tasks % threads));
    if (j.split) {
        const int64_t most = (p->max_len + j.g.C - 1) / j.g.C;
        j.window = (4 * threads + j.tasks - 1) / j.tasks;
        j.window = j.window < most ? j.window : (most > 0 ? most : 1);
        j.per_worker = inputs_floats(&j.g) + out_floats(&j.g) + scratch_floats(j.k, &j.g);
    } else {
        j.per_worker = inputs_floats(&j.g) + out_floats(&j.g) + scratch_floats(j.k, &j.g) +
                       record_floats(&j.g) + state_floats(&j.g);
    }
    return j;
}

bool cpu_chunked_wanted(const cpu_backend_state *s, const gdn_delta_rule_problem *p)
{
    (void)s;
    /* measured crossover (avx512, 2 threads, HV = 32, K = V = 128): the recurrent kernel wins
     * at 16 tokens (0.50 vs 0.81 ms), the chunked one from 32 (0.84 vs 0.92 ms) */
    const int64_t tokens = p->seqs.cu_seqlens ? p->T : p->B * p->T;
    if (p->a.algorithm == GDN_ALGO_AUTO)
        return p->max_len >= 32 && tokens >= 32 * p->seqs.count;
    return p->a.algorithm == GDN_ALGO_CHUNKED;
}

size_t cpu_chunked_workspace(const cpu_backend_state *s, const gdn_delta_rule_problem *p)
{
    const chunk_job j = job_of(s, p);
    size_t n = (size_t)cpu_pool_threads(s->pool) * j.per_worker;
    if (j.split)
        n += (size_t)j.tasks * (state_floats(&j.g) + (size_t)j.window * record_floats(&j.g));
    return n * sizeof(float) + 64; /* + alignment of the base */
}

void cpu_chunked_run(const cpu_backend_state *s, const gdn_delta_rule_problem *p, void *workspace)
{
    chunk_job j = job_of(s, p);
    float *base = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    j.workers = base;
    if (!j.split) {
        cpu_pool_run(s->pool, j.tasks, fused_task, &j);
        return;
    }
    j.states = base + (size_t)cpu_pool_threads(s->pool) * j.per_worker;
    j.records = j.states + (size_t)j.tasks * state_floats(&j.g);
    const int64_t most = (p->max_len + j.g.C - 1) / j.g.C;
    cpu_pool_run(s->pool, j.tasks, split_load_task, &j);
    for (j.first = 0; j.first < most; j.first += j.window) {
        cpu_pool_run(s->pool, j.tasks * j.window, split_prep_task, &j);
        cpu_pool_run(s->pool, j.tasks * (j.g.Vp / j.k->pad), split_state_task, &j);
    }
    cpu_pool_run(s->pool, j.tasks, split_store_task, &j);
}
