/* The CUDA backend's plan (src/cuda/cuda_chunk_plan.c) on the CPU, in every build, no GPU needed:
 *   - the form: the recurrent kernels below 32 tokens a sequence (AUTO), the chunked form from
 *     there where the shapes fit; GDN_ALGO_CHUNKED refused where they do not (K or V past 128,
 *     or the device's shared memory), with the reason;
 *   - the workspace: every region 256-byte aligned, in order, disjoint, inside the reported
 *     size, and at least as large as the kernels index it;
 *   - segments: they cover each sequence's chunks exactly, one slot per segment; for varlen
 *     calls the slot and chunk bounds hold for any split of the tokens, empty sequences
 *     included;
 *   - widths within their limits (warpgroups a block, stitch columns, the chosen kernels'
 *     shared memory), the wgmma pass only where the device runs it;
 *   - the plan is a function of its inputs: planned twice, the same plan and the same size (the
 *     size query and the run read one plan);
 *   - monotone in T; T = 0, 1, 63, 64, 65, N = 0, K and V from 16 to 128;
 *   - the environment's overrides, and plans the cost model is known to make.
 * Randomized shapes draw a fresh seed each run (GDN_SEED replays one). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "harness.h"

#include "../src/cuda/cuda_chunk_plan.h"

#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

/* Devices the plan is made for: shared memory a block may opt in to, SMs, memory bandwidth,
 * whether the sm_90a pass is loaded. */
typedef struct device {
    const char *name;
    cuda_chunk_caps caps;
} device;

static const device kDevices[] = {
    {"H100", {132, 232448, 3.35e12, true, true}},
    {"H200", {132, 232448, 4.8e12, true, true}},
    {"H100 without sm_90a code", {132, 232448, 3.35e12, false, true}},
    {"A100", {108, 166912, 2.04e12, false, true}},
    {"small", {16, 101376, 0.0, false, true}},
    {"nothing known, 48 KiB", {0, 49152, 0.0, false, false}},
};
#define NDEV (int)(sizeof kDevices / sizeof kDevices[0])

static cuda_chunk_shape shape(int64_t N, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V,
                              int in_bytes, bool varlen)
{
    cuda_chunk_shape s;
    memset(&s, 0, sizeof s);
    s.N = N, s.T = T, s.H = H, s.HV = HV, s.K = K, s.V = V;
    s.in_bytes = in_bytes, s.out_bytes = in_bytes;
    s.varlen = varlen;
    s.algorithm = GDN_ALGO_AUTO;
    s.qk_mappable = s.v_mappable = in_bytes == 2;
    s.out_mappable = in_bytes == 2;
    return s;
}

static void describe(char *buf, size_t n, const cuda_chunk_shape *s, const device *dev)
{
    snprintf(buf, n, "%s: N %lld T %lld H %lld HV %lld K %lld V %lld in %d out %d%s%s algo %d",
             dev->name, (long long)s->N, (long long)s->T, (long long)s->H, (long long)s->HV,
             (long long)s->K, (long long)s->V, s->in_bytes, s->out_bytes,
             s->varlen ? " varlen" : "", s->slots ? " slots" : "", (int)s->algorithm);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The workspace: aligned, ordered, disjoint regions inside the total, each as large as the
 * kernels index it (the formulas of cuda_chunk_plan.h's region comments). */
static void check_workspace(const cuda_chunk_shape *s, const cuda_chunk_plan *p, const char *what)
{
    const cuda_chunk_workspace *w = &p->ws;
    const cuda_ws_region *r[] = {&w->chunk_off, &w->gl, &w->eg, &w->ek, &w->ew, &w->W, &w->Wl,
                                 &w->Qd, &w->Kd, &w->U, &w->Aq, &w->seg_off, &w->maps,
                                 &w->m_zero, &w->ready};
    const int nr = (int)(sizeof r / sizeof r[0]);
    size_t end = 0;
    for (int i = 0; i < nr; i++) {
        CHECK(r[i]->off % 256 == 0, "%s: region %d at %zu, not 256-byte aligned", what, i,
              r[i]->off);
        CHECK(r[i]->off >= end, "%s: region %d at %zu overlaps the one before (ends %zu)", what,
              i, r[i]->off, end);
        end = r[i]->off + r[i]->bytes;
    }
    CHECK(end <= w->total, "%s: regions end at %zu, past the size %zu", what, end, w->total);
    CHECK(w->total % 256 == 0, "%s: size %zu", what, w->total);
    const bool tc = s->in_bytes == 2;
    const size_t es = (size_t)s->in_bytes, KP = (size_t)p->d.KP, VP = (size_t)p->d.VP;
    const size_t nch = (size_t)p->nc * (size_t)s->HV, seqs = (size_t)s->N + 1;
    const size_t kblk = tc ? (size_t)tc_key_block((int)KP, 2) : CK_CHUNK * KP * es;
    /* the fused pass reads no W and U, the direct keys no Qd and Kd */
    const size_t nqk = p->direct_keys ? 0 : (tc ? (size_t)p->nc * (size_t)s->H : nch);
    const size_t need[] = {seqs * 8,
                           nch * 4,
                           nch * CK_CHUNK * 4,
                           tc ? nch * CK_CHUNK * 4 : 0,
                           p->fused ? nch * CK_CHUNK * 4 : 0,
                           p->fused ? 0 : nch * kblk,
                           tc && s->split_operands && !p->fused ? nch * kblk : 0,
                           nqk * kblk,
                           nqk * kblk,
                           p->fused ? 0 : nch * (tc ? VP / CK_VT * (size_t)tc_u_tile()
                                                    : CK_CHUNK * VP * 4),
                           nch * (p->fused ? (s->split_operands ? 4 : 2) * (size_t)tc_aq_part(2)
                                  : tc     ? (size_t)tc_aq_block(2)
                                           : CK_CHUNK * CK_CHUNK * es),
                           seqs * 8,
                           p->split ? (size_t)p->nslots * (size_t)s->HV * KP * (KP + VP) * 4 : 0,
                           p->tails ? (size_t)p->nslots * (size_t)s->HV * 4 : 0,
                           p->prep_beside ? nch * 4 : 0};
    for (int i = 0; i < nr; i++)
        CHECK(r[i]->bytes >= need[i], "%s: region %d has %zu bytes, the kernels index %zu", what,
              i, r[i]->bytes, need[i]);
}

/* Segment j of a sequence of `all` chunks runs chunks c0 = j segc .. c0 + nch - 1 (the state
 * passes' arithmetic): every chunk exactly once, no empty segment but an empty sequence's one. */
static void check_cover(int64_t all, int64_t segc, const char *what)
{
    const int64_t segs = segments_for(all, segc);
    int64_t covered = 0;
    bool ok = true;
    for (int64_t j = 0; j < segs; j++) {
        const int64_t c0 = j * segc, nch = min64(all - c0, segc);
        ok = ok && c0 == covered && (nch >= 1 || (all == 0 && segs == 1));
        covered += max64(nch, 0);
    }
    CHECK(ok && covered == all, "%s: %lld segments of %lld chunks cover %lld of %lld chunks",
          what, (long long)segs, (long long)segc, (long long)covered, (long long)all);
}

/* Varlen calls: a split of T tokens into N lengths (some empty), and the chunks and segment slots
 * chunk_offsets would give it, within the workspace's bounds. */
static void check_varlen_split(const cuda_chunk_shape *s, const cuda_chunk_plan *p, rng *r,
                               int kind, const char *what)
{
    int64_t left = s->T, chunks = 0, slots = 0;
    for (int64_t n = 0; n < s->N; n++) {
        int64_t len;
        if (n + 1 == s->N)
            len = left;
        else if (kind == 0) /* all in the first */
            len = n == 0 ? left : 0;
        else if (kind == 1) /* one token each where there are enough */
            len = left > 0 ? 1 : 0;
        else /* random, empty ones likely */
            len = rng_int(r, 0, 3) == 0 ? 0 : rng_int(r, 0, left);
        left -= len;
        const int64_t c = chunks_for(len);
        chunks += c;
        slots += segments_for(c, p->segc);
        if (n < 4)
            check_cover(c, p->segc, what);
    }
    CHECK(chunks <= p->nc, "%s: %lld chunks, workspace bound %lld", what, (long long)chunks,
          (long long)p->nc);
    CHECK(slots <= p->nslots, "%s: %lld segments, slot bound %lld", what, (long long)slots,
          (long long)p->nslots);
}

static void check_chunk_plan(const cuda_chunk_shape *s, const cuda_chunk_caps *c,
                             const cuda_chunk_env *e, const cuda_chunk_plan *p, rng *r,
                             const char *what)
{
    const int64_t KP = round_up(s->K, 32), VP = round_up(s->V, 32);
    CHECK(p->d.KP == KP && p->d.VP == VP, "%s: KP %d VP %d", what, p->d.KP, p->d.VP);
    CHECK(p->segc >= 1, "%s: segc %lld", what, (long long)p->segc);
    CHECK(p->uniform == (!s->varlen && !s->slots), "%s: uniform %d", what, (int)p->uniform);
    CHECK(p->split == (p->nslots > s->N), "%s: split %d with %lld slots", what, (int)p->split,
          (long long)p->nslots);
    /* widths */
    CHECK(p->nw_maps >= 1 && p->nw_maps <= 2 && p->nw_out >= 1 && p->nw_out <= 2,
          "%s: warpgroups %d, %d", what, p->nw_maps, p->nw_out);
    if (!p->wg)
        CHECK(p->nw_maps == 1 && p->nw_out == 1, "%s: mma pass with widths %d, %d", what,
              p->nw_maps, p->nw_out);
    if (p->nw_maps > 1 || p->nw_out > 1)
        CHECK(KP == 128 && VP == 128 && c->smem_optin >= wg_layout_for(128, 2).bytes,
              "%s: two warpgroups a block", what);
    if (p->wg)
        CHECK(s->in_bytes == 2 && (KP == 64 || KP == 128) && VP % CK_WG_COLS == 0 &&
                  c->wg_loaded && c->smem_optin >= wg_layout_for((int)KP, 1).bytes,
              "%s: the wgmma pass where it cannot run", what);
    if (p->split)
        CHECK(s->in_bytes == 2 && c->smem_optin >= stitch_smem() &&
                  (p->stitch_cols == 8 || p->stitch_cols == 16) && VP % p->stitch_cols == 0,
              "%s: split with stitch columns %d", what, p->stitch_cols);
    else
        CHECK(p->stitch_cols == 0 && p->segc >= chunks_for(s->T),
              "%s: unsplit, stitch columns %d, segc %lld", what, p->stitch_cols,
              (long long)p->segc);
    if (p->direct_keys)
        CHECK(s->in_bytes == 2 && KP % CK_PANEL == 0 && c->wg_loaded && c->tensor_maps &&
                  s->qk_mappable,
              "%s: direct keys", what);
    if (p->fused)
        CHECK(p->wg && p->direct_keys && s->v_mappable && !(s->split_operands && s->in_f16) &&
                  KP == 128 && VP == 128,
              "%s: fused", what);
    CHECK(p->tma_store == (p->wg && c->tensor_maps && s->out_mappable),
          "%s: bulk tensor stores %d", what, (int)p->tma_store);
    CHECK(p->tails == (p->split && p->wg && s->unit_keys && !e->no_tail),
          "%s: maps from segment tails %d", what, (int)p->tails);
    if (p->prep_beside) { /* every state block an SM, the preparation's on the others */
        const int64_t blocks = VP / CK_WG_COLS * s->HV * s->N;
        CHECK(p->fused && !s->split_operands && !p->split && p->nw_out == 1 &&
                  p->prep_beside >= 1 && p->uniform &&
                  blocks + p->prep_beside <= c->sms && 2 * s->HV * s->N <= c->sms - blocks &&
                  2 * prep_fused_team_bytes(128) <= c->smem_optin,
              "%s: %d preparation blocks beside %lld state blocks on %d SMs", what,
              p->prep_beside, (long long)blocks, c->sms);
    }
    const int prep = s->in_bytes == 2 ? p->d.prep_tc_bytes : p->d.prep_bytes;
    const int pass = s->in_bytes == 2 ? p->d.tc_bytes : p->d.state_bytes;
    CHECK(prep + 16 <= c->smem_optin && pass + 16 <= c->smem_optin,
          "%s: kernels of %d and %d bytes of shared memory on a device of %d", what, prep, pass,
          c->smem_optin);
    /* segments */
    if (!s->varlen) {
        const int64_t most = chunks_for(s->T);
        CHECK(p->nc == s->N * most && p->seq_chunks == most &&
                  p->seq_slots == segments_for(most, p->segc) &&
                  p->nslots == s->N * p->seq_slots,
              "%s: nc %lld, seq_chunks %lld, seq_slots %lld, nslots %lld", what,
              (long long)p->nc, (long long)p->seq_chunks, (long long)p->seq_slots,
              (long long)p->nslots);
        check_cover(most, p->segc, what);
        if (s->slots) /* a sequence its slot skips has no chunk and one segment */
            check_cover(0, p->segc, what);
    } else {
        for (int kind = 0; kind < 3; kind++)
            check_varlen_split(s, p, r, kind, what);
    }
    check_workspace(s, p, what);
}

/* One call's plan: its form, and the chunked plan's invariants; planned twice, the same. */
static void check_plan(const cuda_chunk_shape *s, const device *dev, const cuda_chunk_env *env,
                       rng *r)
{
    char what[256];
    describe(what, sizeof what, s, dev);
    cuda_delta_rule_plan p, again;
    cuda_delta_rule_plan_make(s, &dev->caps, env, &p);
    cuda_delta_rule_plan_make(s, &dev->caps, env, &again);
    CHECK(memcmp(&p, &again, sizeof p) == 0, "%s: two plans differ", what);
    const int64_t tokens = s->varlen ? s->T : s->N * s->T;
    const bool wanted = s->algorithm == GDN_ALGO_CHUNKED ||
                        (s->algorithm == GDN_ALGO_AUTO && s->N > 0 && tokens >= 32 * s->N);
    const bool fits = cuda_chunk_fits(s, &dev->caps, NULL, 0);
    CHECK(p.chunked == (wanted && fits), "%s: chunked %d (wanted %d, fits %d)", what,
          (int)p.chunked, (int)wanted, (int)fits);
    CHECK(p.refused == (s->algorithm == GDN_ALGO_CHUNKED && !fits), "%s: refused %d", what,
          (int)p.refused);
    CHECK(cuda_delta_rule_plan_workspace(&p) == (p.chunked ? p.chunk.ws.total : 0),
          "%s: workspace %zu", what, cuda_delta_rule_plan_workspace(&p));
    if (p.chunked)
        check_chunk_plan(s, &dev->caps, env, &p.chunk, r, what);
}

static const cuda_chunk_env kNoEnv;

/* Every shape of a grid on every device: T at and around the chunk, K and V from 16 to 128. */
static void test_grid(rng *r)
{
    static const int64_t Ts[] = {0, 1, 2, 31, 32, 63, 64, 65, 127, 128, 129, 1000, 4096, 8192};
    static const int64_t dims[] = {16, 32, 48, 64, 96, 100, 128};
    static const int64_t Ns[] = {0, 1, 3};
    static const gdn_algorithm algos[] = {GDN_ALGO_AUTO, GDN_ALGO_CHUNKED, GDN_ALGO_RECURRENT};
    for (int d = 0; d < NDEV; d++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
            for (size_t ki = 0; ki < sizeof dims / sizeof dims[0]; ki++)
                for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
                    for (int es = 2; es <= 4; es += 2)
                        for (int vl = 0; vl < 2; vl++)
                            for (size_t a = 0; a < 3; a++) {
                                const int64_t K = dims[ki], V = dims[(ki + 3) % 7];
                                cuda_chunk_shape s = shape(Ns[ni], Ts[ti], 2, 4, K, V, es, vl);
                                s.algorithm = algos[a];
                                s.slots = (ti + ki) % 3 == 0;
                                s.split_operands = es == 2 && (ti + ni) % 2 == 0;
                                check_plan(&s, &kDevices[d], &kNoEnv, r);
                            }
}

/* Random shapes, devices and overrides. */
static void test_random(rng *r)
{
    static const int64_t ratios[] = {1, 2, 4};
    for (int i = 0; i < 3000; i++) {
        const int64_t H = rng_int(r, 1, 16), HV = H * ratios[rng_int(r, 0, 2)];
        const int64_t N = rng_int(r, 0, 3) == 0 ? rng_int(r, 0, 2) : rng_int(r, 1, 64);
        const bool varlen = rng_int(r, 0, 1);
        const int64_t per = rng_int(r, 0, 3) == 0 ? rng_int(r, 0, 70) : rng_int(r, 0, 40000);
        cuda_chunk_shape s = shape(N, varlen ? per * (N > 0 ? N : 1) : per, H, HV,
                                   rng_int(r, 1, 128), rng_int(r, 1, 128),
                                   rng_int(r, 0, 1) ? 2 : 4, varlen);
        s.out_bytes = rng_int(r, 0, 1) ? 2 : 4;
        s.slots = rng_int(r, 0, 1);
        s.split_operands = s.in_bytes == 2 && rng_int(r, 0, 1);
        s.in_f16 = s.in_bytes == 2 && rng_int(r, 0, 1);
        s.qk_mappable = s.in_bytes == 2 && rng_int(r, 0, 3) > 0;
        s.v_mappable = s.in_bytes == 2 && rng_int(r, 0, 3) > 0;
        s.out_mappable = s.out_bytes == 2 && rng_int(r, 0, 3) > 0;
        s.unit_keys = rng_int(r, 0, 1);
        s.algorithm = rng_int(r, 0, 2) == 0 ? GDN_ALGO_CHUNKED : GDN_ALGO_AUTO;
        cuda_chunk_env env;
        memset(&env, 0, sizeof env);
        if (rng_int(r, 0, 3) == 0) {
            env.state_pass = (int)rng_int(r, 0, 2);
            env.wg_maps = (int)rng_int(r, 0, 3);
            env.wg_out = (int)rng_int(r, 0, 3);
            env.segment_chunks = rng_int(r, -1, 9);
            env.key_copies = rng_int(r, 0, 1);
            env.stitch_cols = rng_int(r, 0, 1) ? 8 * (int)rng_int(r, 0, 2) : 0;
            if (env.stitch_cols == 24)
                env.stitch_cols = 0;
            env.no_tail = rng_int(r, 0, 1);
        }
        check_plan(&s, &kDevices[rng_int(r, 0, NDEV - 1)], &env, r);
    }
}

/* Longer calls never get less scratch per chunk, nor fewer chunk slots; an unsplit plan's whole
 * size grows with T too (a split plan's maps follow its segment count). */
static void test_monotone(void)
{
    for (int d = 0; d < NDEV; d++)
        for (int es = 2; es <= 4; es += 2)
            for (int vl = 0; vl < 2; vl++)
                for (int64_t HV = 1; HV <= 32; HV *= 4) {
                    const cuda_chunk_shape big = shape(2, 4096, 1, HV, 128, 128, es, vl);
                    if (!cuda_chunk_fits(&big, &kDevices[d].caps, NULL, 0))
                        continue;
                    cuda_delta_rule_plan prev;
                    memset(&prev, 0, sizeof prev);
                    bool have = false;
                    for (int64_t T = 0; T <= 70000; T = T < 200 ? T + 1 : T * 5 / 4) {
                        cuda_chunk_shape s = shape(2, T, 1, HV, 128, 128, es, vl);
                        s.algorithm = GDN_ALGO_CHUNKED;
                        cuda_delta_rule_plan p;
                        cuda_delta_rule_plan_make(&s, &kDevices[d].caps, &kNoEnv, &p);
                        if (!p.chunked)
                            continue;
                        if (have) {
                            const cuda_chunk_workspace *a = &prev.chunk.ws, *b = &p.chunk.ws;
                            const size_t unsplit_a = a->seg_off.off, unsplit_b = b->seg_off.off;
                            CHECK(p.chunk.nc >= prev.chunk.nc && unsplit_b >= unsplit_a,
                                  "%s HV %lld T %lld: nc %lld -> %lld, scratch %zu -> %zu",
                                  kDevices[d].name, (long long)HV, (long long)T,
                                  (long long)prev.chunk.nc, (long long)p.chunk.nc, unsplit_a,
                                  unsplit_b);
                            if (!prev.chunk.split && !p.chunk.split)
                                CHECK(b->total >= a->total, "%s HV %lld T %lld: size %zu -> %zu",
                                      kDevices[d].name, (long long)HV, (long long)T, a->total,
                                      b->total);
                        }
                        prev = p, have = true;
                    }
                    CHECK(have, "%s: no chunked plan", kDevices[d].name);
                }
}

/* The form at the edges, and the reasons for refusing. */
static void test_edges(void)
{
    const cuda_chunk_caps *h100 = &kDevices[0].caps;
    cuda_delta_rule_plan p;
    cuda_chunk_shape s = shape(4, 31, 2, 4, 128, 128, 2, false);
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.chunked && !p.refused, "31 tokens a sequence: recurrent");
    s.T = 32;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.chunked, "32 tokens a sequence: chunked");
    s.varlen = true, s.T = 4 * 32 - 1;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.chunked, "varlen, 127 tokens in 4 sequences: recurrent");
    s.T = 4 * 32;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.chunked, "varlen, 128 tokens in 4 sequences: chunked");
    s.algorithm = GDN_ALGO_RECURRENT;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.chunked && !p.refused, "GDN_ALGO_RECURRENT: recurrent");

    /* T = 0, 1, 63, 64, 65: chunk slots and the uniform tables */
    static const int64_t Ts[] = {0, 1, 63, 64, 65}, chunks[] = {0, 1, 1, 1, 2};
    for (int i = 0; i < 5; i++) {
        s = shape(3, Ts[i], 2, 4, 64, 64, 2, false);
        s.algorithm = GDN_ALGO_CHUNKED;
        cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
        CHECK(p.chunked && p.chunk.nc == 3 * chunks[i] && p.chunk.seq_chunks == chunks[i] &&
                  p.chunk.uniform,
              "T = %lld: nc %lld", (long long)Ts[i], (long long)p.chunk.nc);
        s.varlen = true;
        cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
        CHECK(p.chunked && p.chunk.nc == chunks[i] + 3 && !p.chunk.uniform,
              "varlen T = %lld: nc %lld", (long long)Ts[i], (long long)p.chunk.nc);
    }
    /* no sequence */
    s = shape(0, 100, 2, 4, 64, 64, 2, true);
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.chunked, "N = 0, AUTO: not chunked");
    s.algorithm = GDN_ALGO_CHUNKED;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.chunked && !p.chunk.split && p.chunk.nslots == 0, "N = 0, varlen: no split");

    /* refusals and their reasons */
    char why[256];
    s = shape(1, 4096, 1, 1, 256, 64, 2, false);
    s.algorithm = GDN_ALGO_CHUNKED;
    CHECK(!cuda_chunk_fits(&s, h100, why, sizeof why) && strstr(why, "K is 256 and V 64"),
          "K = 256: %s", why);
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.refused && !p.chunked, "K = 256, chunked: refused");
    s.algorithm = GDN_ALGO_AUTO;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.refused && !p.chunked, "K = 256, auto: recurrent");
    s = shape(1, 4096, 1, 1, 128, 129, 4, false);
    CHECK(!cuda_chunk_fits(&s, h100, why, sizeof why) && strstr(why, "V 129"), "V = 129: %s",
          why);
    s = shape(1, 4096, 1, 1, 128, 128, 2, false);
    CHECK(!cuda_chunk_fits(&s, &kDevices[NDEV - 1].caps, why, sizeof why) &&
              strstr(why, "shared memory") && strstr(why, "allows 49152"),
          "48 KiB of shared memory: %s", why);
    CHECK(!cuda_chunk_fits(&s, &kDevices[NDEV - 1].caps, NULL, 0), "no reason asked for");
    for (int64_t k = 16; k <= 128; k += 16)
        for (int es = 2; es <= 4; es += 2) {
            s = shape(1, 4096, 1, 1, k, 144 - k, es, false);
            CHECK(cuda_chunk_fits(&s, h100, why, sizeof why), "K %lld on an H100: %s",
                  (long long)k, why);
        }
}

/* The cost model's decisions where they are known (docs/PERFORMANCE.md): a 16-bit call with
 * HV = 32 and K = V = 128 (unit keys, so maps from segment tails) runs unsplit at 4096 tokens, on
 * the fused wgmma pass beside its preparation in the fast mode and on mma.sync in the high mode,
 * and split in two or more segments on the fused pass from 8192 tokens in both modes; eight
 * packed sequences of 4096 run unsplit on the fused pass in both modes (f16's high mode on W and
 * U's); few heads split on warpgroup products; f32 inputs and builds without sm_90a code never
 * use the wgmma pass. */
static void test_known_plans(void)
{
    const cuda_chunk_caps *h200 = &kDevices[1].caps, *no90a = &kDevices[2].caps;
    cuda_delta_rule_plan p;
    cuda_chunk_shape s = shape(1, 4096, 16, 32, 128, 128, 2, false);
    s.unit_keys = true;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && p.chunk.wg && p.chunk.fused && !p.chunk.split && p.chunk.direct_keys,
          "4096 x 32 heads, fast: unsplit fused pass (wg %d fused %d split %d)", (int)p.chunk.wg,
          (int)p.chunk.fused, (int)p.chunk.split);
    CHECK(p.chunk.prep_beside == 52 && p.chunk.ws.ready.bytes > 0,
          "4096 x 32 heads, fast: the preparation beside the state pass, on 52 of the 68 SMs "
          "its 64 blocks leave, 6.5 chunk steps of 16 tasks in flight (%d)", p.chunk.prep_beside);
    CHECK(p.chunk.nw_out == 1, "4096 x 32 heads, fast: one warpgroup a block (%d)",
          p.chunk.nw_out);
    const cuda_chunk_shape one = s;
    s.T = 8192; /* segments pay, their preparation first */
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.fused && p.chunk.split && p.chunk.tails && p.chunk.seq_slots == 4 &&
              p.chunk.nw_maps == 2 && p.chunk.nw_out == 2 && !p.chunk.prep_beside,
          "8192 x 32 heads, fast: four segments from tails, two warpgroups a block (split %d, "
          "%lld segments, widths %d, %d, beside %d)",
          (int)p.chunk.split, (long long)p.chunk.seq_slots, p.chunk.nw_maps, p.chunk.nw_out,
          p.chunk.prep_beside);
    s.unit_keys = false; /* whole maps: two segments no longer pay */
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.fused && !p.chunk.split && p.chunk.prep_beside == 52,
          "8192 x 32 heads, keys of any norm: unsplit beside its preparation (split %d)",
          (int)p.chunk.split);
    s.unit_keys = true;
    s.T = 32768;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.fused && p.chunk.split && p.chunk.seq_slots >= 2 && !p.chunk.prep_beside,
          "32768 x 32 heads, fast: split (%lld segments)", (long long)p.chunk.seq_slots);
    s = shape(8, 32768, 16, 32, 128, 128, 2, true); /* 512 blocks of one, 256 of two */
    s.unit_keys = true;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.fused && !p.chunk.split && p.chunk.nw_out == 2 && !p.chunk.prep_beside,
          "8 x 4096 tokens x 32 heads, fast: unsplit, two warpgroups a block (%d)",
          p.chunk.nw_out);
    s.split_operands = true; /* 1024 blocks of chunk_state_tc: the wgmma pass's waves are fewer */
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.wg && p.chunk.fused && !p.chunk.split && p.chunk.nw_out == 2 &&
              !p.chunk.prep_beside && p.chunk.ws.W.bytes == 0 && p.chunk.ws.Wl.bytes == 0 &&
              p.chunk.ws.U.bytes == 0,
          "8 x 4096 tokens x 32 heads, high: unsplit fused pass (wg %d, fused %d, width %d)",
          (int)p.chunk.wg, (int)p.chunk.fused, p.chunk.nw_out);
    s.in_f16 = true; /* scaled lo parts: W and U's pass */
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.wg && !p.chunk.fused && p.chunk.ws.Wl.bytes > 0,
          "8 x 4096 tokens x 32 heads, f16 high: W and U's wgmma pass (fused %d)",
          (int)p.chunk.fused);
    s = one;
    s.split_operands = true;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && !p.chunk.wg && !p.chunk.fused && !p.chunk.split && p.chunk.direct_keys &&
              !p.chunk.prep_beside,
          "4096 x 32 heads, high: unsplit mma.sync pass (wg %d split %d)", (int)p.chunk.wg,
          (int)p.chunk.split);
    s.T = 8192;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && p.chunk.wg && p.chunk.fused && p.chunk.split && p.chunk.seq_slots == 4,
          "8192 x 32 heads, high: four segments on the fused pass (wg %d, %lld segments)",
          (int)p.chunk.wg, (long long)p.chunk.seq_slots);
    s.T = 32768;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && p.chunk.wg && p.chunk.split && p.chunk.seq_slots >= 2,
          "32768 x 32 heads: split on warpgroup products (wg %d, %lld segments)",
          (int)p.chunk.wg, (long long)p.chunk.seq_slots);
    s = shape(1, 131072, 2, 4, 128, 128, 2, false);
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && p.chunk.wg && p.chunk.split && p.chunk.seq_slots > 8 && !p.chunk.tails,
          "131072 x 4 heads: many segments (%lld), whole maps for keys of any norm",
          (long long)p.chunk.seq_slots);
    s.unit_keys = true;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunk.split && p.chunk.tails, "131072 x 4 heads, unit keys: maps from segment tails");
    /* With tails the fast mode's split rows take the plans that ran fastest among the forced
     * ones (docs/PERFORMANCE.md): one wave of two-warpgroup blocks in short segments. */
    const cuda_chunk_caps *h100 = &kDevices[0].caps;
    cuda_delta_rule_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.chunk.fused && p.chunk.tails && p.chunk.seq_slots == 33 && p.chunk.nw_maps == 2 &&
              p.chunk.nw_out == 2,
          "131072 x 4 heads, fast, H100: %lld segments, widths %d, %d", (long long)p.chunk.seq_slots,
          p.chunk.nw_maps, p.chunk.nw_out);
    /* 32768 tokens, H / HV: the device's constants, then the plan's segment chunks (all two
     * warpgroups a block) */
    static const struct {
        int64_t H, HV;
        int dev;
        int64_t segc;
    } few_heads[] = {{8, 16, 0, 64}, {4, 8, 1, 32}, {2, 4, 1, 16}};
    for (int i = 0; i < 3; i++) {
        cuda_chunk_shape few =
            shape(1, 32768, few_heads[i].H, few_heads[i].HV, 128, 128, 2, false);
        few.unit_keys = true;
        cuda_delta_rule_plan_make(&few, &kDevices[few_heads[i].dev].caps, &kNoEnv, &p);
        CHECK(p.chunk.tails && p.chunk.segc == few_heads[i].segc && p.chunk.nw_maps == 2 &&
                  p.chunk.nw_out == 2,
              "32768 x %lld heads, fast, %s: segments of %lld chunks, widths %d, %d",
              (long long)few.HV, kDevices[few_heads[i].dev].name, (long long)p.chunk.segc,
              p.chunk.nw_maps, p.chunk.nw_out);
    }
    cuda_delta_rule_plan_make(&s, no90a, &kNoEnv, &p);
    CHECK(p.chunked && !p.chunk.wg && p.chunk.split && !p.chunk.direct_keys && !p.chunk.tails,
          "without sm_90a: split on the mma.sync pass, whole maps");
    s.unit_keys = false;
    s.in_bytes = 4;
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && !p.chunk.wg && !p.chunk.split && !p.chunk.direct_keys,
          "f32 inputs: never split, never wgmma");
    s = shape(1, 131072, 2, 4, 96, 128, 2, false);
    cuda_delta_rule_plan_make(&s, h200, &kNoEnv, &p);
    CHECK(p.chunked && !p.chunk.wg && !p.chunk.direct_keys, "K = 96: no wgmma, no direct keys");
}

/* The overrides: parsing, and what each forces. */
static void test_env(void)
{
    cuda_chunk_env e;
    setenv("GDN_CUDA_STATE_PASS", "mma", 1);
    setenv("GDN_CUDA_WG_WIDTH", "2,1", 1);
    setenv("GDN_CUDA_SEGMENT_CHUNKS", "3", 1);
    setenv("GDN_CUDA_KEY_TILES", "copy", 1);
    setenv("GDN_CUDA_STITCH_COLS", "16", 1);
    setenv("GDN_CUDA_FUSED", "0", 1);
    setenv("GDN_CUDA_TMA_STORE", "0", 1);
    setenv("GDN_CUDA_BESIDE", "0", 1);
    setenv("GDN_CUDA_TAIL", "0", 1);
    cuda_chunk_env_read(&e);
    CHECK(e.state_pass == 1 && e.wg_maps == 2 && e.wg_out == 1 && e.segment_chunks == 3 &&
              e.key_copies && e.stitch_cols == 16 && e.no_fused && e.no_tma_store && e.no_beside &&
              e.no_tail,
          "env: pass %d widths %d,%d segc %lld copies %d stitch %d", e.state_pass, e.wg_maps,
          e.wg_out, (long long)e.segment_chunks, (int)e.key_copies, e.stitch_cols);
    setenv("GDN_CUDA_STATE_PASS", "wgmma", 1);
    setenv("GDN_CUDA_WG_WIDTH", "2", 1);
    setenv("GDN_CUDA_STITCH_COLS", "12", 1);
    setenv("GDN_CUDA_KEY_TILES", "direct", 1);
    cuda_chunk_env_read(&e);
    CHECK(e.state_pass == 2 && e.wg_maps == 2 && e.wg_out == 2 && e.stitch_cols == 0 &&
              !e.key_copies,
          "env: pass %d widths %d,%d stitch %d", e.state_pass, e.wg_maps, e.wg_out,
          e.stitch_cols);
    setenv("GDN_CUDA_WG_WIDTH", "x", 1);
    setenv("GDN_CUDA_STATE_PASS", "other", 1);
    cuda_chunk_env_read(&e);
    CHECK(e.wg_maps == 0 && e.wg_out == 0 && e.state_pass == 0, "env: unparsed values ignored");
    unsetenv("GDN_CUDA_STATE_PASS");
    unsetenv("GDN_CUDA_WG_WIDTH");
    unsetenv("GDN_CUDA_SEGMENT_CHUNKS");
    unsetenv("GDN_CUDA_KEY_TILES");
    unsetenv("GDN_CUDA_STITCH_COLS");
    unsetenv("GDN_CUDA_FUSED");
    unsetenv("GDN_CUDA_TMA_STORE");
    unsetenv("GDN_CUDA_BESIDE");
    unsetenv("GDN_CUDA_TAIL");
    cuda_chunk_env_read(&e);
    CHECK(memcmp(&e, &kNoEnv, sizeof e) == 0, "env: nothing set, nothing forced");

    const cuda_chunk_caps *h100 = &kDevices[0].caps;
    cuda_delta_rule_plan p;
    cuda_chunk_shape s = shape(8, 4096, 16, 32, 128, 128, 2, false); /* many blocks */
    memset(&e, 0, sizeof e);
    e.no_fused = true; /* (the fast mode's fused pass runs on wgmma) */
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunked && p.chunk.wg && !p.chunk.split && !p.chunk.fused,
          "many blocks, not fused: unsplit wgmma pass (1024 blocks of mma.sync's: more waves)");
    e.no_fused = false;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunked && p.chunk.wg && !p.chunk.split && p.chunk.fused && !p.chunk.prep_beside,
          "many blocks, fast: unsplit fused pass, the preparation first (512 state blocks)");
    s.N = 1, s.T = 8192; /* 64 state blocks */
    e.no_beside = true;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.fused && !p.chunk.prep_beside && p.chunk.ws.ready.bytes == 0,
          "GDN_CUDA_BESIDE=0: the preparation first");
    e.no_beside = false;
    s.HV = 48, s.H = 16; /* 96 state blocks leave 36 SMs: too few to keep up */
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.fused && !p.chunk.split && !p.chunk.prep_beside,
          "48 heads: the preparation first (%d)", p.chunk.prep_beside);
    s.HV = 32;
    s.N = 8, s.T = 4096;
    e.state_pass = 2;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.wg && !p.chunk.split && p.chunk.nw_maps == 1, "wgmma forced");
    e.wg_maps = e.wg_out = 2;
    e.segment_chunks = 5;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.wg && p.chunk.split && p.chunk.segc == 5 && p.chunk.seq_slots == 13 &&
              p.chunk.nw_maps == 2 && p.chunk.nw_out == 2,
          "forced: segc %lld widths %d, %d", (long long)p.chunk.segc, p.chunk.nw_maps,
          p.chunk.nw_out);
    s.unit_keys = true;
    e.no_tail = true;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.split && !p.chunk.tails, "GDN_CUDA_TAIL=0: whole maps");
    e.no_tail = false;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.split && p.chunk.tails, "split, unit keys: maps from segment tails");
    s.unit_keys = false;
    e.wg_out = 1, e.stitch_cols = 8, e.key_copies = true;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.nw_maps == 2 && p.chunk.nw_out == 1 && p.chunk.stitch_cols == 8 &&
              !p.chunk.direct_keys,
          "forced widths 2,1, stitch 8, key copies");
    e.state_pass = 1;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(!p.chunk.wg && p.chunk.nw_maps == 1 && p.chunk.split,
          "mma forced: widths ignored, still split");
    s.K = 96;
    e.state_pass = 2;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(!p.chunk.wg && p.chunk.nw_maps == 1, "wgmma forced where it cannot run: ignored");
    e.segment_chunks = 1000;
    cuda_delta_rule_plan_make(&s, h100, &e, &p);
    CHECK(p.chunk.segc == 64 && !p.chunk.split, "segment longer than the sequence: unsplit");
}

/* The shape read off a validated problem. */
static void test_shape_of(void)
{
    gdn_delta_rule_problem p;
    memset(&p, 0, sizeof p);
    gdn_tensor cu = gdn_tensor_1d((void *)&p, GDN_I32, 4);
    p.a.q.dtype = GDN_BF16, p.a.out.dtype = GDN_F32, p.a.algorithm = GDN_ALGO_CHUNKED;
    p.seqs.count = 3, p.seqs.T = 100, p.seqs.cu_seqlens = &cu;
    p.T = 100, p.H = 2, p.HV = 8, p.K = 64, p.V = 96;
    cuda_chunk_shape s = cuda_chunk_shape_of(&p);
    CHECK(s.N == 3 && s.T == 100 && s.H == 2 && s.HV == 8 && s.K == 64 && s.V == 96 &&
              s.in_bytes == 2 && s.out_bytes == 4 && s.varlen && !s.slots &&
              s.algorithm == GDN_ALGO_CHUNKED,
          "shape of a problem");
    CHECK(!s.split_operands, "the default precision (auto) is the fast mode: one part");
    CHECK(!s.unit_keys, "keys as they come");
    p.a.qk_l2norm = 1;
    CHECK(cuda_chunk_shape_of(&p).unit_keys, "keys L2-normalised in the kernel: unit keys");
    /* whole-chunk bulk stores only for an output of q's type (the same rows, three dtypes) */
    static _Alignas(16) float out_rows[4 * 8 * 96];
    p.a.out = gdn_tensor_4d(out_rows, GDN_F32, 1, 4, 8, 96);
    CHECK(!cuda_chunk_shape_of(&p).out_mappable, "an f32 output of bf16 inputs: not mappable");
    p.a.out = gdn_tensor_4d(out_rows, GDN_BF16, 1, 4, 8, 96);
    CHECK(cuda_chunk_shape_of(&p).out_mappable, "a bf16 output of bf16 inputs: mappable");
    p.a.out = gdn_tensor_4d(out_rows, GDN_F16, 1, 4, 8, 96);
    CHECK(!cuda_chunk_shape_of(&p).out_mappable, "an f16 output of bf16 inputs: not mappable");
    p.a.out.dtype = GDN_F32;
    p.a.precision = GDN_PRECISION_HIGH;
    CHECK(cuda_chunk_shape_of(&p).split_operands, "the high mode splits 16-bit operands");
    p.seqs.cu_seqlens = NULL, p.seqs.slots = &cu, p.a.q.dtype = GDN_F32;
    s = cuda_chunk_shape_of(&p);
    CHECK(!s.varlen && s.slots && s.in_bytes == 4 && !s.split_operands,
          "shape of a problem with slots; f32 inputs have no lo parts");
}

/* The two modes' workspaces. Where the fused pass runs (bf16 in both modes), the high mode's is
 * the fast mode's with T diag(beta) and Aqk as hi + lo parts (two more parts a chunk and value
 * head) and without the flags of a preparation beside the state pass; where it does not, and in
 * f16's high mode, the high mode's is the fast mode's with W's lo part. */
static void test_mode_workspaces(void)
{
    int fused_seen = 0;
    /* segments of 32 chunks in both modes, so that their maps' regions agree (each mode's model
     * may pick its own count) */
    cuda_chunk_env env = kNoEnv;
    env.segment_chunks = 32;
    for (int i = 0; i < 2 * NDEV; i++) { /* many heads, few */
        const int d = i % NDEV;
        cuda_chunk_shape s = i < NDEV ? shape(1, 8192, 16, 32, 128, 128, 2, false)
                                      : shape(1, 32768, 2, 4, 128, 128, 2, false);
        s.unit_keys = true;
        if (!cuda_chunk_fits(&s, &kDevices[d].caps, NULL, 0))
            continue;
        cuda_chunk_plan fast, high, high16;
        cuda_chunk_plan_make(&s, &kDevices[d].caps, &env, &fast);
        s.split_operands = true;
        cuda_chunk_plan_make(&s, &kDevices[d].caps, &env, &high);
        s.in_f16 = true;
        cuda_chunk_plan_make(&s, &kDevices[d].caps, &env, &high16);
        const size_t nch = (size_t)high.nc * s.HV;
        const size_t wl = nch * (size_t)tc_key_block(high.d.KP, 2);
        const size_t ew = nch * CK_CHUNK * sizeof(float);
        fused_seen += fast.fused;
        CHECK(fast.fused == (fast.wg && fast.direct_keys) && high.fused == fast.fused &&
                  !high16.fused && fast.ws.ew.bytes == (fast.fused ? ew : 0) &&
                  high.ws.ew.bytes == fast.ws.ew.bytes && high16.ws.ew.bytes == 0,
              "%s: fused %d / %d / %d, ew %zu bytes", kDevices[d].name, fast.fused, high.fused,
              high16.fused, fast.ws.ew.bytes);
        CHECK(fast.ws.Wl.bytes == 0 && high.ws.Wl.bytes == (high.fused ? 0 : wl) &&
                  high16.ws.Wl.bytes == wl,
              "%s: W lo %zu / %zu / %zu bytes", kDevices[d].name, fast.ws.Wl.bytes,
              high.ws.Wl.bytes, high16.ws.Wl.bytes);
        const size_t ready = (fast.ws.ready.bytes + 255) / 256 * 256;
        const size_t more = fast.fused ? 2 * nch * (size_t)tc_aq_part(2) : wl;
        CHECK(high.ws.total + ready - fast.ws.total == more && fast.segc == high.segc &&
                  fast.split == high.split && high.ws.ready.bytes == 0,
              "%s: fast %zu, high %zu bytes", kDevices[d].name, fast.ws.total, high.ws.total);
    }
    CHECK(fused_seen > 0, "no device's plan of these rows runs the fused pass");
}

/* Tensors a tensor map cannot read: v (the fused pass falls back to W and U, planned with their
 * regions), q or k (no direct keys: their copies are planned), or a driver without the encoder. */
static void test_unmappable(void)
{
    const cuda_chunk_caps *h100 = &kDevices[0].caps;
    cuda_chunk_shape s = shape(1, 32768, 2, 4, 128, 128, 2, false);
    cuda_chunk_plan p;
    cuda_chunk_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(p.fused && p.direct_keys && p.ws.W.bytes == 0 && p.ws.U.bytes == 0 &&
              p.ws.Qd.bytes == 0 && p.ws.ew.bytes > 0,
          "mappable: fused, no W, U, Qd");
    s.v_mappable = false;
    cuda_chunk_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.fused && p.direct_keys && p.ws.W.bytes > 0 && p.ws.U.bytes > 0 && p.ws.ew.bytes == 0,
          "v unmappable: W and U");
    s.v_mappable = true, s.qk_mappable = false;
    cuda_chunk_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.fused && !p.direct_keys && p.ws.Qd.bytes > 0 && p.ws.Kd.bytes > 0 &&
              p.ws.W.bytes > 0,
          "q, k unmappable: copies, W and U");
    s.qk_mappable = true;
    cuda_chunk_caps no_encoder = *h100;
    no_encoder.tensor_maps = false;
    cuda_chunk_plan_make(&s, &no_encoder, &kNoEnv, &p);
    CHECK(!p.fused && !p.direct_keys && p.ws.Qd.bytes > 0, "no encoder: copies");
    s = shape(1, 32768, 2, 4, 64, 64, 2, false); /* the fused pass runs K = V = 128 alone */
    cuda_chunk_plan_make(&s, h100, &kNoEnv, &p);
    CHECK(!p.fused && p.direct_keys && p.ws.W.bytes > 0, "K = V = 64: not fused");
}

int main(void)
{
    rng r;
    const uint64_t seed = fresh_seed();
    printf("seed %llu (replay with GDN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    r = rng_seed(seed);
    test_edges();
    test_known_plans();
    test_env();
    test_shape_of();
    test_mode_workspaces();
    test_unmappable();
    test_monotone();
    test_grid(&r);
    test_random(&r);
    return test_summary("test_cuda_plan");
}
