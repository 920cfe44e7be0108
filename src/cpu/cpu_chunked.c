/* The chunked WY form on the cpu backend: this file loads chunks, owns the buffers and splits the
 * work over the pool; cpu_chunked_<isa>.c (cpu_chunked_impl.h) do the arithmetic.
 *
 * The value heads of one key head (GVA) share their chunks' queries and keys, so a "group" of
 * them is the unit of work: prep_keys runs once per chunk and key head (K K^T, Q K^T, K^T),
 * prep and the state pass once per value head. A fused group may hold several key heads, run
 * chunk by chunk, so that a chunk's rows of neighbouring heads are loaded and stored together.
 *
 * Two schedules. With enough groups for the threads, each group runs its chunks one after
 * another, preparing each and passing its heads' states through it while the buffers are still
 * in cache ("fused"). With fewer (few heads, long sequences) that would leave threads idle, so
 * windows of chunks run in two phases ("split"): the preparation, which does not depend on the
 * state, in parallel over (group, chunk); then the state pass, sequential over chunks but in
 * parallel over (value head, column block of the state): every column of S, V' and O depends
 * on the same columns only. */
#include "cpu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Floats of one buffer, rounded so that every carved buffer starts 64 bytes apart. */
static size_t floats(int64_t n) { return (size_t)round_up(n, 16); }

/* The chunk length the cpu runs: the caller's chunk_size, else the kernels' own (32 for the
 * f32 kernels, 64 for the bf16 ones, whose products are cheap next to the per-chunk f32 work on
 * the state). */
static int64_t chunk_len(const cpu_chunk_kernels *k, const gdn_delta_rule_problem *p)
{
    return p->a.chunk_size ? p->chunk : k->chunk;
}

/* The bf16 kernels for bf16 q, k, v where the level has them; the level's f32 kernels otherwise
 * (f32 inputs need f32 products for their 1e-5 bar; f16 ones would lose bits to bf16). */
static const cpu_chunk_kernels *kernels_for(const cpu_backend_state *st,
                                            const gdn_delta_rule_problem *p)
{
    const gdn_delta_rule_args *a = &p->a;
    if (st->chunk_bf16 && a->q.dtype == GDN_BF16 && a->k.dtype == GDN_BF16 &&
        a->v.dtype == GDN_BF16)
        return st->chunk_bf16;
    return st->chunk;
}

static cpu_chunk_geom geom_of(const cpu_chunk_kernels *k, const gdn_delta_rule_problem *p)
{
    cpu_chunk_geom g;
    g.C = chunk_len(k, p), g.K = p->K, g.V = p->V;
    g.Cp = round_up(g.C, k->pad), g.Kp = round_up(g.K, k->pad), g.Vp = round_up(g.V, k->pad);
    g.ldv = g.Vp + 16;
    g.scale = (float)p->scale;
    g.l2norm = p->a.qk_l2norm;
    g.fast = p->a.precision != GDN_PRECISION_HIGH;
    return g;
}

static size_t keys_floats(const cpu_chunk_geom *g)
{
    return 2 * floats(g->Cp * g->Kp) + 2 * floats(g->Cp) + 2 * floats(g->Cp * g->Cp) +
           floats(g->Kp * g->Cp);
}

static size_t inputs_floats(const cpu_chunk_geom *g)
{
    return 2 * floats(g->Cp * g->Cp) + 2 * floats(g->Cp);
}

static size_t record_floats(const cpu_chunk_geom *g)
{
    return floats(g->Cp * g->Kp) + floats(g->Cp * g->ldv) + floats(g->Kp * g->Cp) +
           2 * floats(g->Cp * g->Cp) + floats(4 * g->Cp) + floats(1);
}

/* A head's state: S [Kp, Vp] (rows ldv apart) and what the kernels keep beside it */
static size_t state_floats(const cpu_chunk_kernels *k, const cpu_chunk_geom *g)
{
    const size_t extra = k->state_extra_floats ? floats((int64_t)k->state_extra_floats(g)) : 0;
    return floats(g->Kp * g->ldv) + extra;
}
static size_t scratch_floats(const cpu_chunk_kernels *k, const cpu_chunk_geom *g)
{
    return k->scratch_floats ? floats((int64_t)k->scratch_floats(g)) : 0;
}
static size_t out_floats(const cpu_chunk_geom *g) { return floats(g->Cp * g->ldv); }

static float *carve(float **cursor, int64_t n)
{
    float *p = *cursor;
    *cursor += floats(n);
    return p;
}

static cpu_chunk_keys carve_keys(float **cur, const cpu_chunk_geom *g)
{
    cpu_chunk_keys k;
    k.Q = carve(cur, g->Cp * g->Kp);
    k.K = carve(cur, g->Cp * g->Kp);
    k.iq = carve(cur, g->Cp);
    k.ik = carve(cur, g->Cp);
    k.QK = carve(cur, g->Cp * g->Cp);
    k.KK = carve(cur, g->Cp * g->Cp);
    k.KT = carve(cur, g->Kp * g->Cp);
    k.pump = NULL;
    return k;
}

static cpu_chunk_inputs carve_inputs(float **cur, const cpu_chunk_geom *g)
{
    cpu_chunk_inputs in;
    in.A = carve(cur, g->Cp * g->Cp);
    in.Tinv = carve(cur, g->Cp * g->Cp);
    in.G = carve(cur, g->Cp);
    in.beta = carve(cur, g->Cp);
    return in;
}

static cpu_chunk_record carve_record(float **cur, const cpu_chunk_geom *g)
{
    cpu_chunk_record r;
    r.W = carve(cur, g->Cp * g->Kp);
    r.U = carve(cur, g->Cp * g->ldv);
    r.KT = carve(cur, g->Kp * g->Cp);
    r.P = carve(cur, g->Cp * g->Cp);
    r.T = carve(cur, g->Cp * g->Cp);
    r.rows = carve(cur, 4 * g->Cp);
    r.decay = carve(cur, 1);
    r.pump = NULL;
    return r;
}

/* ---- schedules --------------------------------------------------------------------------- */

typedef struct chunk_job {
    const gdn_delta_rule_problem *p;
    const cpu_chunk_kernels *k;
    cpu_chunk_geom g;
    int64_t kper, vper;     /* a group: kper key heads, vper of the value heads of each (the
                             * ratio, or 1) */
    int64_t per;            /* kper * vper value heads */
    int64_t groups;         /* N * HV / per */
    int64_t tasks;          /* N * HV: (sequence, value head) */
    bool split;
    int64_t window;         /* split: chunks per window; the window's first chunk */
    int64_t first;
    float *workers;         /* per worker: inputs, O, kernel scratch (split); inputs, kernel
                             * scratch, keys, record, the outputs O (two chunks' when the kernels
                             * are pumped) and the states of per heads (fused) */
    size_t per_worker;
    size_t state_size;      /* floats of one head's state (state_floats) */
    float *states;          /* split: one state per task */
    float *keys;            /* split: window keys per group */
    float *records;         /* split: window records per task */
} chunk_job;

/* One (sequence, value head) of the call, resolved. */
typedef struct seq_head {
    int64_t hv, kh, slot, row, t0, len, chunks;
    bool init, skip;
} seq_head;

static seq_head seq_head_of(const chunk_job *j, int64_t n, int64_t hv)
{
    const gdn_delta_rule_problem *p = j->p;
    seq_head s;
    s.hv = hv;
    s.kh = p->a.gva == GDN_GVA_BLOCK ? hv / p->ratio : hv % p->H;
    s.slot = p->has_state ? gdn_seq_slot(&p->seqs, n) : -1;
    s.skip = p->has_state && s.slot < 0; /* padding: nothing is read or written */
    s.init = p->has_state && !s.skip && gdn_seq_has_init(&p->seqs, n);
    gdn_seq_span(&p->seqs, n, &s.row, &s.t0, &s.len);
    s.chunks = (s.len + j->g.C - 1) / j->g.C;
    return s;
}

/* Groups: per sequence, blocks of kper key heads, each block cut into ratio / vper groups; a
 * group's heads r = 0 .. per - 1 are value head m = sub vper + r % vper of key head
 * kh0 + r / vper. Value head r of group `grp`, and the group of value head hv: */
static int64_t group_head(const chunk_job *j, int64_t grp, int64_t r)
{
    const gdn_delta_rule_problem *p = j->p;
    const int64_t in_seq = grp % (p->HV / j->per), subs = p->ratio / j->vper;
    const int64_t kh = in_seq / subs * j->kper + r / j->vper;
    const int64_t m = in_seq % subs * j->vper + r % j->vper; /* m-th value head of kh */
    return p->a.gva == GDN_GVA_BLOCK ? kh * p->ratio + m : kh + m * p->H;
}

static int64_t task_group(const chunk_job *j, int64_t task)
{
    const gdn_delta_rule_problem *p = j->p;
    const int64_t n = task / p->HV, hv = task % p->HV;
    const int64_t kh = p->a.gva == GDN_GVA_BLOCK ? hv / p->ratio : hv % p->H;
    const int64_t m = p->a.gva == GDN_GVA_BLOCK ? hv % p->ratio : hv / p->H;
    return n * (p->HV / j->per) + kh / j->kper * (p->ratio / j->vper) + m / j->vper;
}

static int64_t state_offset(const gdn_delta_rule_problem *p, const seq_head *s, int64_t i,
                            int64_t x)
{
    const int64_t *st = p->a.state.stride;
    const int64_t base = s->slot * st[0] + s->hv * st[1];
    return p->a.state_layout == GDN_STATE_KV ? base + i * st[2] + x * st[3]
                                             : base + x * st[2] + i * st[3];
}

/* S [Kp, Vp] (key i, value x; rows ldv apart) from the pool */
static void state_read(const chunk_job *j, const seq_head *s, float *S)
{
    const gdn_delta_rule_problem *p = j->p;
    const int64_t ld = j->g.ldv;
    const bool rows = p->a.state_layout == GDN_STATE_KV && p->a.state.stride[3] == 1;
    for (int64_t i = 0; i < p->K; i++) {
        if (rows) {
            cpu_load_f32(&p->a.state, state_offset(p, s, i, 0), p->V, S + i * ld);
            continue;
        }
        for (int64_t x = 0; x < p->V; x++)
            S[i * ld + x] = (float)gdn_load(&p->a.state, state_offset(p, s, i, x));
    }
}

/* A head's state: S from the pool, or zeros, and the kernels' own part set up. */
static void state_load(const chunk_job *j, const seq_head *s, float *S)
{
    memset(S, 0, (size_t)(j->g.Kp * j->g.ldv) * sizeof *S);
    if (s->init)
        state_read(j, s, S);
    if (j->k->state_begin)
        j->k->state_begin(&j->g, S);
}

/* Folds what the kernels keep beside S back into it, then S to the pool (when the call has one). */
static void state_store(const chunk_job *j, const seq_head *s, float *S)
{
    const gdn_delta_rule_problem *p = j->p;
    if (!p->has_state)
        return;
    if (j->k->state_end)
        j->k->state_end(&j->g, S);
    const bool rows = p->a.state_layout == GDN_STATE_KV && p->a.state.stride[3] == 1;
    for (int64_t i = 0; i < p->K; i++) {
        if (rows) {
            cpu_store_f32(&p->a.state, state_offset(p, s, i, 0), p->V, S + i * j->g.ldv);
            continue;
        }
        for (int64_t x = 0; x < p->V; x++)
            gdn_store(&p->a.state, state_offset(p, s, i, x), S[i * j->g.ldv + x]);
    }
}

static int64_t token_offset(const gdn_tensor *t, int64_t row, int64_t tok, int64_t head)
{
    return row * t->stride[0] + tok * t->stride[1] + head * t->stride[2];
}

/* 1 / sqrt(||x||^2 + eps), accumulated in double */
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

static int64_t chunk_length(const chunk_job *j, const seq_head *s, int64_t c)
{
    const int64_t left = s->len - c * j->g.C;
    return left < j->g.C ? left : j->g.C;
}

/* Rows 0..L-1 of one row-major buffer [Cp, ld] of `esize`-byte elements from `width`-element
 * rows; zero what no token fills (the padding columns of each row and the rows past L). */
static void load_rows(const chunk_job *j, const gdn_tensor *t, const seq_head *s, int64_t c,
                      int64_t L, int64_t head, int64_t width, int64_t ld, void *dst, bool raw)
{
    const size_t esize = raw ? gdn_dtype_size(t->dtype) : sizeof(float);
    const int64_t c0 = s->t0 + c * j->g.C;
    char *d = dst;
    for (int64_t i = 0; i < L; i++) {
        char *row = d + (size_t)(i * ld) * esize;
        const int64_t off = token_offset(t, s->row, c0 + i, head);
        if (raw)
            memcpy(row, (const char *)t->data + (size_t)off * esize, (size_t)width * esize);
        else
            j->k->load_row(t, off, width, (float *)row);
        memset(row + (size_t)width * esize, 0, (size_t)(ld - width) * esize);
    }
    memset(d + (size_t)(L * ld) * esize, 0, (size_t)((j->g.Cp - L) * ld) * esize);
}

/* Chunk c's queries and keys into `keys` (bf16_qk kernels: the input rows; else f32, normalised
 * when the call asks); returns its length. */
static int64_t load_keys(const chunk_job *j, const seq_head *s, int64_t c, cpu_chunk_keys *keys)
{
    const gdn_delta_rule_args *a = &j->p->a;
    const int64_t L = chunk_length(j, s, c), K = j->g.K, Kp = j->g.Kp;
    const bool raw = j->k->bf16_qk;
    load_rows(j, &a->q, s, c, L, s->kh, K, Kp, keys->Q, raw);
    load_rows(j, &a->k, s, c, L, s->kh, K, Kp, keys->K, raw);
    for (int64_t i = 0; !raw && a->qk_l2norm && i < L; i++) {
        float *q = keys->Q + i * Kp, *k = keys->K + i * Kp;
        const float rq = inverse_norm(q, K), rk = inverse_norm(k, K);
        for (int64_t x = 0; x < K; x++) {
            q[x] *= rq;
            k[x] *= rk;
        }
    }
    return L;
}

/* Chunk c's values of value head s->hv into V ([Cp, Vp], rows ldv apart: the record's U, where the
 * state pass reads them) and its gates into `in` (rows past L zero, beta 0, G held at the last
 * token's). */
static void load_values(const chunk_job *j, const seq_head *s, int64_t c, cpu_chunk_inputs *in,
                        float *V)
{
    const gdn_delta_rule_problem *p = j->p;
    const int64_t L = chunk_length(j, s, c), c0 = s->t0 + c * j->g.C;
    load_rows(j, &p->a.v, s, c, L, s->hv, p->V, j->g.ldv, V, false);
    double G = 0.0;
    for (int64_t i = 0; i < L; i++) {
        double gt, bt;
        cpu_token_gates(p, s->row, c0 + i, s->hv, &gt, &bt);
        G += gt;
        in->G[i] = (float)G;
        in->beta[i] = (float)bt;
    }
    for (int64_t i = L; i < j->g.Cp; i++) {
        in->G[i] = (float)G;
        in->beta[i] = 0.0f;
    }
}

/* Makes the kernels' streaming output stores visible before the pool task ends (each task
 * fences once, after its last store). */
static void store_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

/* Rows 0..L-1, columns [c0, c0 + nc) of O to the output (columns past V are padding). */
static void store_out(const chunk_job *j, const seq_head *s, int64_t c, int64_t L, const float *O,
                      int64_t c0, int64_t nc)
{
    const gdn_tensor *out = &j->p->a.out;
    const int64_t n = c0 + nc <= j->g.V ? nc : j->g.V - c0;
    for (int64_t i = 0; n > 0 && i < L; i++)
        j->k->store_row(out, token_offset(out, s->row, s->t0 + c * j->g.C + i, s->hv) + c0, n,
                        O + i * j->g.ldv + c0);
}

/* Value heads per group: at most MAX_PER of one key head (more run as several groups); several
 * key heads share a group while their states fit GROUP_STATE_BYTES (at K = V = 128: 8 heads with
 * the f32 kernels, 3 with the bf16 kernels, whose states carry their hi/lo words and scales; 576
 * KiB is 512 KiB plus the rows' pads, see ldv: groups of 1 or 2 MiB measured 1.02-1.09 times
 * the time on an AMX host, docs/DESIGN.md). */
enum { MAX_PER = 16, GROUP_STATE_BYTES = 576 << 10 };

/* The fused schedule's memory traffic, spread over the kernels' products (cpu_pump): while a
 * group computes chunk c it stores chunk c - 1's output rows (streaming stores, in pieces (row i,
 * head r), i-major, so that the parts of a line shared by neighbouring heads go out together) and
 * prefetches chunk c + 1's q, k and v rows, a line at a time (into L2: each (token, head) row is
 * its own short run of memory, too short for the hardware prefetcher, and rows a few KiB apart
 * share L1 sets). Each step moves about `budget` lines (output rows go whole), sized from the
 * steps the last chunk took so that the traffic spreads over the whole chunk. Kernels that are
 * not `pumped` take none of it: the driver moves it in one burst as each chunk starts (the AMX
 * kernels measured no faster pumped, after each tile block or each depth step). */
typedef struct group_pump {
    cpu_pump base;            /* first: what the kernels see */
    const chunk_job *j;
    const seq_head *s;
    const float *O;           /* chunk oc's outputs, per heads; pieces onext of ototal stored */
    int64_t oc, onext, ototal, out_lines;
    const char *row0[3 * MAX_PER + 2]; /* the rows to prefetch: row i of stream x at */
    int64_t pitch[3 * MAX_PER + 2];    /* row0[x] + i pitch[x], */
    int64_t lines[3 * MAX_PER + 2];    /* lines[x] lines a row */
    int64_t streams, prow, pstream, pline, pleft; /* the cursor, and the lines left */
    int64_t budget, steps;
} group_pump;

static void pump_store(group_pump *gp)
{
    const chunk_job *j = gp->j;
    const gdn_tensor *out = &j->p->a.out;
    const int64_t i = gp->onext / j->per, r = gp->onext % j->per;
    const seq_head *s = &gp->s[r];
    j->k->store_row(out, token_offset(out, s->row, s->t0 + gp->oc * j->g.C + i, s->hv), j->g.V,
                    gp->O + r * out_floats(&j->g) + i * j->g.ldv);
    gp->onext++;
}

static void pump_prefetch(group_pump *gp)
{
    __builtin_prefetch(gp->row0[gp->pstream] + gp->prow * gp->pitch[gp->pstream] + 64 * gp->pline,
                       0, 2);
    gp->pleft--;
    if (++gp->pline < gp->lines[gp->pstream])
        return;
    gp->pline = 0;
    if (++gp->pstream < gp->streams)
        return;
    gp->pstream = 0;
    gp->prow++;
}

/* Up to `lines` lines: output rows first (their buffer is reused next chunk), prefetches after. */
static void pump_lines(group_pump *gp, int64_t lines)
{
    for (; lines > 0 && gp->onext < gp->ototal; lines -= gp->out_lines)
        pump_store(gp);
    for (; lines > 0 && gp->pleft > 0; lines--)
        pump_prefetch(gp);
}

static void pump_step(cpu_pump *p)
{
    group_pump *gp = (group_pump *)p;
    gp->steps++;
    pump_lines(gp, gp->budget);
}

/* 64-byte lines of a row of `width` elements of `esize` bytes */
static int64_t row_lines(size_t esize, int64_t width) { return ((int64_t)esize * width + 63) / 64; }

static void pump_add_stream(group_pump *gp, const gdn_tensor *t, const seq_head *s, int64_t c0,
                            int64_t head, int64_t width)
{
    const size_t esize = gdn_dtype_size(t->dtype);
    const int64_t x = gp->streams++;
    gp->row0[x] = (const char *)t->data + (size_t)token_offset(t, s->row, c0, head) * esize;
    gp->pitch[x] = t->stride[1] * (int64_t)esize;
    gp->lines[x] = row_lines(esize, width);
}

/* Moves what is left, then makes chunk oc's outputs O (NULL: none) the pending stores and chunk
 * pc's rows the pending prefetches; the budget spreads both over as many steps as the last
 * chunk took. */
static void pump_refill(group_pump *gp, int64_t oc, const float *O, int64_t pc)
{
    const chunk_job *j = gp->j;
    const gdn_delta_rule_args *a = &j->p->a;
    const seq_head *s0 = &gp->s[0];
    pump_lines(gp, INT64_MAX);
    gp->O = O, gp->oc = oc, gp->onext = 0;
    gp->ototal = O ? chunk_length(j, s0, oc) * j->per : 0;
    gp->streams = gp->prow = gp->pstream = gp->pline = gp->pleft = 0;
    if (pc < s0->chunks) {
        const int64_t c0 = s0->t0 + pc * j->g.C, rows = chunk_length(j, s0, pc);
        for (int64_t r = 0; r < j->per; r++) {
            const seq_head *s = &gp->s[r];
            if (r % j->vper == 0) {
                pump_add_stream(gp, &a->q, s, c0, s->kh, j->g.K);
                pump_add_stream(gp, &a->k, s, c0, s->kh, j->g.K);
            }
            pump_add_stream(gp, &a->v, s, c0, s->hv, j->g.V);
        }
        if (a->g.data) /* the gates: one line a token, at the group's first head (with few
                        * heads, the whole row) */
            pump_add_stream(gp, &a->g, s0, c0, s0->hv, 1);
        pump_add_stream(gp, &a->beta, s0, c0, s0->hv, 1);
        for (int64_t x = 0; x < gp->streams; x++)
            gp->pleft += rows * gp->lines[x];
    }
    const int64_t total = gp->ototal * gp->out_lines + gp->pleft;
    const int64_t steps = gp->steps > 0 ? gp->steps : 1;
    gp->budget = (total + steps - 1) / steps;
    gp->steps = 0;
}

static void fused_task(void *arg, int64_t grp, int worker)
{
    const chunk_job *j = arg;
    const int64_t n = grp / (j->p->HV / j->per);
    seq_head s[MAX_PER];
    for (int64_t r = 0; r < j->per; r++)
        s[r] = seq_head_of(j, n, group_head(j, grp, r));
    if (s[0].skip)
        return;
    float *cur = j->workers + (size_t)worker * j->per_worker;
    cpu_chunk_inputs in = carve_inputs(&cur, &j->g);
    float *scratch = carve(&cur, (int64_t)scratch_floats(j->k, &j->g));
    cpu_chunk_keys keys = carve_keys(&cur, &j->g);
    cpu_chunk_record rec = carve_record(&cur, &j->g);
    const size_t outs = (size_t)j->per * out_floats(&j->g);
    const bool pumped = j->k->pumped; /* two chunks' outputs, else one */
    float *Obuf[2] = {cur, pumped ? cur + outs : cur}, *S = cur + (pumped ? 2 : 1) * outs;
    group_pump gp;
    memset(&gp, 0, sizeof gp);
    gp.base.step = pump_step, gp.j = j, gp.s = s;
    gp.out_lines = row_lines(gdn_dtype_size(j->p->a.out.dtype), j->g.V);
    keys.pump = rec.pump = pumped ? &gp.base : NULL;
    for (int64_t r = 0; r < j->per; r++)
        state_load(j, &s[r], S + r * j->state_size);
    pump_refill(&gp, 0, NULL, 0); /* chunk 0's rows at once, chunk 1's over chunk 0 */
    gp.steps = 64 * j->per;          /* a guess at chunk 0's steps */
    pump_refill(&gp, 0, NULL, 1);
    for (int64_t c = 0; c < s[0].chunks; c++) {
        float *O = Obuf[c % 2]; /* unpumped: one buffer, stored before it is reused */
        for (int64_t r = 0; r < j->per; r++) {
            if (r % j->vper == 0) { /* the next key head */
                load_keys(j, &s[r], c, &keys);
                j->k->prep_keys(&j->g, &keys, scratch);
            }
            load_values(j, &s[r], c, &in, rec.U);
            if (r == 0 && !pumped)
                pump_lines(&gp, INT64_MAX); /* in a burst, as the chunk starts */
            j->k->prep(&j->g, &keys, &in, &rec, scratch);
            j->k->state(&j->g, &keys, &rec, S + r * j->state_size, 0, j->g.Vp,
                        O + r * out_floats(&j->g), scratch);
        }
        pump_refill(&gp, c, O, c + 2);
    }
    pump_lines(&gp, INT64_MAX); /* the last chunk's stores */
    store_fence();
    for (int64_t r = 0; r < j->per; r++)
        state_store(j, &s[r], S + r * j->state_size);
}

static float *task_state(const chunk_job *j, int64_t task)
{
    return j->states + (size_t)task * j->state_size;
}

static cpu_chunk_keys window_keys(const chunk_job *j, int64_t grp, int64_t c)
{
    float *cur = j->keys + ((size_t)grp * j->window + (size_t)c) * keys_floats(&j->g);
    return carve_keys(&cur, &j->g);
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
    const seq_head s = seq_head_of(j, task / j->p->HV, task % j->p->HV);
    if (!s.skip)
        state_load(j, &s, task_state(j, task));
}

static void split_store_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const chunk_job *j = arg;
    const seq_head s = seq_head_of(j, task / j->p->HV, task % j->p->HV);
    if (!s.skip)
        state_store(j, &s, task_state(j, task));
}

/* Phase 1 unit: chunk first + u % window of group u / window: its keys, then each value head's
 * record, kept for phase 2 (the decay of a chunk past the sequence's end stays unused). */
static void split_prep_task(void *arg, int64_t unit, int worker)
{
    const chunk_job *j = arg;
    const int64_t grp = unit / j->window, c = j->first + unit % j->window;
    const int64_t n = grp / (j->p->HV / j->per);
    const seq_head s0 = seq_head_of(j, n, group_head(j, grp, 0));
    if (s0.skip || c >= s0.chunks)
        return;
    float *cur = j->workers + (size_t)worker * j->per_worker;
    cpu_chunk_inputs in = carve_inputs(&cur, &j->g);
    float *scratch = cur + out_floats(&j->g);
    cpu_chunk_keys keys = window_keys(j, grp, c - j->first);
    load_keys(j, &s0, c, &keys);
    j->k->prep_keys(&j->g, &keys, scratch);
    for (int64_t r = 0; r < j->per; r++) {
        const int64_t hv = group_head(j, grp, r);
        const seq_head s = seq_head_of(j, n, hv);
        cpu_chunk_record rec = window_record(j, n * j->p->HV + hv, c - j->first);
        load_values(j, &s, c, &in, rec.U);
        j->k->prep(&j->g, &keys, &in, &rec, scratch);
    }
}

/* Phase 2 unit: one column block of one task's state through the window's chunks. */
static void split_state_task(void *arg, int64_t unit, int worker)
{
    const chunk_job *j = arg;
    const int64_t blocks = j->g.Vp / j->k->pad;
    const int64_t task = unit / blocks, c0 = unit % blocks * j->k->pad;
    const seq_head s = seq_head_of(j, task / j->p->HV, task % j->p->HV);
    if (s.skip)
        return;
    float *O = j->workers + (size_t)worker * j->per_worker + inputs_floats(&j->g);
    float *scratch = O + out_floats(&j->g);
    for (int64_t c = j->first; c < j->first + j->window && c < s.chunks; c++) {
        cpu_chunk_keys keys = window_keys(j, task_group(j, task), c - j->first);
        cpu_chunk_record rec = window_record(j, task, c - j->first);
        j->k->state(&j->g, &keys, &rec, task_state(j, task), c0, j->k->pad, O, scratch);
        store_out(j, &s, c, chunk_length(j, &s, c), O, c0, j->k->pad);
    }
    store_fence();
}

/* ---- entry points ------------------------------------------------------------------------ */

/* Whether `units` fused tasks keep the threads busy: whole rounds, or enough of them that a
 * partial last round matters little. */
static bool fused_fits(int64_t units, int64_t threads)
{
    return threads == 1 || (units >= threads && (units >= 4 * threads || units % threads == 0));
}

static chunk_job job_of(const cpu_backend_state *st, const gdn_delta_rule_problem *p)
{
    chunk_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.k = kernels_for(st, p);
    j.g = geom_of(j.k, p);
    j.state_size = state_floats(j.k, &j.g);
    j.tasks = p->seqs.count * p->HV;
    const int64_t threads = cpu_pool_threads(st->pool);
    /* Fused: whole key heads per group where that leaves no thread idle, and then as many key
     * heads as keep the group's states in GROUP_STATE_BYTES (they stay in L2, and a chunk's
     * rows of neighbouring heads share pages and runs of memory); else one value head per
     * group. Split: one key head's value heads per group (one value head when the ratio is over
     * MAX_PER). */
    const int64_t N = p->seqs.count;
    j.kper = 1;
    j.vper = p->ratio <= MAX_PER ? p->ratio : 1;
    j.split = !fused_fits(N * p->H * (p->ratio / j.vper), threads);
    if (j.split && fused_fits(j.tasks, threads))
        j.vper = 1, j.split = false;
    const size_t state_bytes = j.state_size * sizeof(float);
    for (int64_t kp = 2; !j.split && kp * j.vper <= MAX_PER &&
                         (size_t)(kp * j.vper) * state_bytes <= GROUP_STATE_BYTES; kp++)
        if (p->H % kp == 0 && fused_fits(N * p->H / kp * (p->ratio / j.vper), threads))
            j.kper = kp;
    j.per = j.kper * j.vper;
    j.groups = j.tasks / j.per;
    const size_t work = inputs_floats(&j.g) + out_floats(&j.g) + scratch_floats(j.k, &j.g);
    if (j.split) {
        const int64_t most = (p->max_len + j.g.C - 1) / j.g.C;
        j.window = j.groups > 0 ? (4 * threads + j.groups - 1) / j.groups : 1;
        j.window = j.window < most ? j.window : (most > 0 ? most : 1);
        j.per_worker = work;
    } else {
        j.per_worker = inputs_floats(&j.g) + scratch_floats(j.k, &j.g) + keys_floats(&j.g) +
                       record_floats(&j.g) +
                       (size_t)j.per * ((j.k->pumped ? 2 : 1) * out_floats(&j.g) + j.state_size);
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
    size_t n = gdn_size_mul((size_t)cpu_pool_threads(s->pool), j.per_worker);
    if (j.split) {
        const size_t per_task = gdn_size_add(
            j.state_size, gdn_size_mul((size_t)j.window, record_floats(&j.g)));
        n = gdn_size_add(n, gdn_size_mul((size_t)j.tasks, per_task));
        n = gdn_size_add(n, gdn_size_mul(gdn_size_mul((size_t)j.groups, (size_t)j.window),
                                         keys_floats(&j.g)));
    }
    return gdn_size_add(gdn_size_mul(n, sizeof(float)), 64); /* + alignment of the base */
}

void cpu_chunked_run(const cpu_backend_state *s, const gdn_delta_rule_problem *p, void *workspace)
{
    chunk_job j = job_of(s, p);
    float *base = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    j.workers = base;
    if (!j.split) {
        cpu_pool_run(s->pool, j.groups, fused_task, &j);
        return;
    }
    j.states = base + (size_t)cpu_pool_threads(s->pool) * j.per_worker;
    j.records = j.states + (size_t)j.tasks * j.state_size;
    j.keys = j.records + (size_t)j.tasks * (size_t)j.window * record_floats(&j.g);
    const int64_t most = (p->max_len + j.g.C - 1) / j.g.C;
    cpu_pool_run(s->pool, j.tasks, split_load_task, &j);
    for (j.first = 0; j.first < most; j.first += j.window) {
        cpu_pool_run(s->pool, j.groups * j.window, split_prep_task, &j);
        cpu_pool_run(s->pool, j.tasks * (j.g.Vp / j.k->pad), split_state_task, &j);
    }
    cpu_pool_run(s->pool, j.tasks, split_store_task, &j);
}
