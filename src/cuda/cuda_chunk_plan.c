/* The CUDA backend's plan for a gdn_delta_rule call (cuda_chunk_plan.h): which form runs and how
 * the chunked form runs it. Plain C, built with or without CUDA; nothing here touches a device. */
#include "cuda_chunk_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ---------------------------------------------------------------------------------- */

static int elem_size(gdn_dtype dt) { return dt == GDN_F32 ? 4 : 2; }

cuda_chunk_shape cuda_chunk_shape_of(const gdn_delta_rule_problem *p)
{
    cuda_chunk_shape s;
    memset(&s, 0, sizeof s);
    s.N = p->seqs.count;
    s.T = p->T;
    s.H = p->H, s.HV = p->HV, s.K = p->K, s.V = p->V;
    s.in_bytes = elem_size(p->a.q.dtype);
    s.in_f16 = p->a.q.dtype == GDN_F16;
    s.out_bytes = elem_size(p->a.out.dtype);
    s.varlen = p->seqs.cu_seqlens != NULL;
    s.slots = p->seqs.slots != NULL;
    s.algorithm = p->a.algorithm;
    s.split_operands = s.in_bytes == 2 && p->a.precision == GDN_PRECISION_HIGH;
    int64_t bytes[3];
    s.qk_mappable =
        cuda_tensor_map_strides(&p->a.q, bytes) && cuda_tensor_map_strides(&p->a.k, bytes);
    s.v_mappable = cuda_tensor_map_strides(&p->a.v, bytes);
    s.out_mappable = p->a.out.dtype == p->a.q.dtype && cuda_tensor_map_strides(&p->a.out, bytes);
    s.unit_keys = p->a.qk_l2norm != 0;
    return s;
}

bool cuda_tensor_map_strides(const gdn_tensor *t, int64_t bytes[3])
{
    if (!t->data || t->ndim != 4 || t->stride[3] != 1 || elem_size(t->dtype) != 2 ||
        (uintptr_t)t->data % 16 != 0)
        return false;
    for (int i = 0; i < 4; i++)
        if (t->shape[i] < 1 || t->shape[i] > INT32_MAX)
            return false;
    const int64_t s2 = t->shape[2] > 1 ? t->stride[2] : t->shape[3];
    const int64_t s1 = t->shape[1] > 1 ? t->stride[1] : s2 * t->shape[2];
    const int64_t s0 = t->shape[0] > 1 ? t->stride[0] : s1 * t->shape[1];
    const int64_t s[3] = {s2, s1, s0};
    for (int i = 0; i < 3; i++) {
        if (s[i] < 1 || s[i] >= ((int64_t)1 << 39) || (2 * s[i]) % 16 != 0)
            return false;
        bytes[i] = 2 * s[i];
    }
    return true;
}

void cuda_chunk_env_read(cuda_chunk_env *e)
{
    memset(e, 0, sizeof *e);
    const char *pass = getenv("GDN_CUDA_STATE_PASS");
    e->state_pass = !pass ? 0 : strcmp(pass, "mma") == 0 ? 1 : strcmp(pass, "wgmma") == 0 ? 2 : 0;
    const char *width = getenv("GDN_CUDA_WG_WIDTH");
    int m = 0, o = 0;
    const int got = width ? sscanf(width, "%d,%d", &m, &o) : 0;
    if (got >= 1) { /* "n": both passes */
        e->wg_maps = m;
        e->wg_out = got == 1 ? m : o;
    }
    const char *segc = getenv("GDN_CUDA_SEGMENT_CHUNKS");
    e->segment_chunks = segc ? atoll(segc) : 0;
    const char *keys = getenv("GDN_CUDA_KEY_TILES");
    e->key_copies = keys && strcmp(keys, "copy") == 0;
    const char *cols = getenv("GDN_CUDA_STITCH_COLS");
    const int c = cols ? atoi(cols) : 0;
    e->stitch_cols = c == 8 || c == 16 ? c : 0;
    const char *fused = getenv("GDN_CUDA_FUSED");
    e->no_fused = fused && strcmp(fused, "0") == 0;
    const char *store = getenv("GDN_CUDA_TMA_STORE");
    e->no_tma_store = store && strcmp(store, "0") == 0;
    const char *beside = getenv("GDN_CUDA_BESIDE");
    e->no_beside = beside && strcmp(beside, "0") == 0;
    const char *tail = getenv("GDN_CUDA_TAIL");
    e->no_tail = tail && strcmp(tail, "0") == 0;
}

/* ---- shapes ---------------------------------------------------------------------------------- */

static int take16(int *at, int bytes)
{
    const int o = *at;
    *at += (int)round_up(bytes, 16);
    return o;
}

/* The kernels' row strides and shared-memory sizes for K, V and inputs of es bytes. The f32
 * kernels' 16-byte row pads keep rows aligned and stagger the banks. */
static ck_dims dims_for(int64_t K, int64_t V, int es)
{
    ck_dims d;
    const int pad = 16 / es;
    d.KP = (int)round_up(K, 32), d.VP = (int)round_up(V, 32);
    d.ldk = d.KP + pad, d.ldv = d.VP + pad, d.ldu = CK_VT + pad, d.ldq = CK_CHUNK + pad;
    d.lda = CK_CHUNK + 1, d.lds = CK_VT + 4, d.ldx = CK_CHUNK + 1;
    int at = 0;
    d.p_k = take16(&at, CK_CHUNK * d.ldk * es);
    d.p_q = take16(&at, CK_CHUNK * d.ldk * es);
    d.p_v = take16(&at, CK_CHUNK * d.ldv * es);
    d.p_a = take16(&at, CK_CHUNK * d.lda * 4);
    d.p_t = take16(&at, CK_CHUNK * d.lda * 4);
    d.p_x = take16(&at, 16 * d.ldx * 4);
    d.p_g = take16(&at, CK_CHUNK * 4);
    d.p_b = take16(&at, CK_CHUNK * 4);
    d.prep_bytes = at;
    at = 0;
    d.s_w = take16(&at, CK_CHUNK * d.ldk * es);
    d.s_q = take16(&at, CK_CHUNK * d.ldk * es);
    d.s_k = take16(&at, CK_CHUNK * d.ldk * es);
    d.s_u = take16(&at, CK_CHUNK * d.ldu * es);
    d.s_aq = take16(&at, CK_CHUNK * d.ldq * es);
    d.s_vn = take16(&at, CK_CHUNK * d.ldu * es);
    d.s_s = take16(&at, d.KP * d.lds * 4);
    d.state_bytes = at;
    d.tc_bytes = tc_layout_for(d.KP, es).bytes + 1024; /* + the alignment of the dynamic area */
    d.prep_tc_bytes = prep_tc_layout_for(d.KP, es).v + (int)round_up(CK_CHUNK * d.ldv * es, 16);
    return d;
}

/* Chunk slots the workspace holds: every sequence's chunks, bounded without reading cu_seqlens
 * (each sequence adds at most one partial chunk). */
static int64_t chunk_bound(const cuda_chunk_shape *s)
{
    if (!s->varlen)
        return s->N * chunks_for(s->T);
    return chunks_for(s->T) + s->N;
}

bool cuda_chunk_wanted(const cuda_chunk_shape *s)
{
    if (s->algorithm != GDN_ALGO_AUTO)
        return s->algorithm == GDN_ALGO_CHUNKED;
    const int64_t tokens = s->varlen ? s->T : s->N * s->T;
    return s->N > 0 && tokens >= 32 * s->N;
}

bool cuda_chunk_fits(const cuda_chunk_shape *s, const cuda_chunk_caps *caps, char *why, size_t n)
{
    if (s->K > CK_MAX_DIM || s->V > CK_MAX_DIM) {
        if (why)
            snprintf(why, n, "K is %lld and V %lld, expected both <= %d for the chunked form on "
                     "cuda", (long long)s->K, (long long)s->V, CK_MAX_DIM);
        return false;
    }
    const int es = s->in_bytes;
    const ck_dims d = dims_for(s->K, s->V, es);
    const int prep = es == 2 ? d.prep_tc_bytes : d.prep_bytes;
    const int pass = es == 2 ? d.tc_bytes : d.state_bytes;
    /* + the state pass's static shared memory (its two stage barriers, 16 bytes) */
    const int need = (prep > pass ? prep : pass) + 16;
    if (need > caps->smem_optin) {
        if (why)
            snprintf(why, n, "the chunked form needs %d bytes of shared memory per block for "
                     "these shapes and dtype, the device allows %d", need, caps->smem_optin);
        return false;
    }
    return true;
}

/* ---- the state pass: which kernel, how many segments -----------------------------------------
 *
 * A call whose state pass has few (value tile, head, sequence) blocks leaves most SMs idle
 * unsplit; such calls cut each sequence into segments that run in parallel (a maps pass, the
 * stitch, the output pass; cuda_chunk_stitch.cu). The constants below are fitted step times of
 * the kernels (in 0.01 us), from which the planner models a candidate's time; they were fitted on
 * an H200 (docs/PERFORMANCE.md), and the split rows are checked against the device's memory
 * bandwidth, which bounds the passes on an H100. */

/* chunk_state_tc's blocks, unsplit: one per CK_VT value columns of every head and sequence. */
static int64_t tc_state_blocks(const cuda_chunk_shape *s)
{
    return round_up(s->V, CK_VT) / CK_VT * s->HV * s->N;
}

/* Whether the unsplit mma.sync state pass would leave most SMs idle: at most half as many
 * (32-column tile, head, sequence) blocks as SMs. */
static bool few_state_blocks(const cuda_chunk_shape *s, const cuda_chunk_caps *c)
{
    return 2 * tc_state_blocks(s) <= c->sms;
}

/* Whether a split call's maps run from their segments' tails (plan.tails): the wgmma maps pass
 * alone runs them, and the bound it relies on needs unit keys (segment_tail). */
static bool tails_fit(const cuda_chunk_shape *s, const cuda_chunk_env *e, bool wg)
{
    return wg && s->unit_keys && !e->no_tail;
}

/* Chunks a map from its segment's tail runs, as the model prices it (segment_tail,
 * cuda_chunk_pass.cuh: the tail reaches back until the decay since the segment's end is below
 * 2^-64). The tail follows the gates, which the host does not read; 16 chunks is the tail of a
 * head that decays about e^-2.8 a 64-token chunk. Heads that decay slower run longer maps, up to
 * the whole segment, the cost the model gives every map without tails. */
static const int64_t kTailChunks = 16;

/* The chunks the model prices a map of a segment of segc chunks at: its tail where tails run. */
static int64_t map_chunks(bool tails, int64_t segc)
{
    return tails && segc > kTailChunks ? kTailChunks : segc;
}

/* A pass's time in the two-segment model: per chunk step and per call (0.01 us). */
typedef struct pass_cost {
    int64_t step, fixed;
} pass_cost;

/* Fitted on an H200 from each pass's time at T = 8192 and 32768, HV = 32 (docs/PERFORMANCE.md):
 * chunk_state_tc unsplit 2.18 us a chunk step + 8 us; split on warpgroup products, the maps pass
 * 1.42 us a step + 5.6 us, the output pass 2.24 us a step + 35 us, and the stitch 17 us. */
static const pass_cost kTcUnsplit = {218, 800}, kWgMaps1 = {142, 560}, kWgOut1 = {224, 3500};
static const int64_t kStitchOnce = 1700;

/* Whether a call with too many state blocks for few_state_blocks, but no more than one wave of
 * them, runs faster in two segments on warpgroup products than unsplit on chunk_state_tc (by the
 * model above, the first segment's map from its tail where tails_fit: sequences of 69 chunks and
 * more with tails, 141 without). Uniform-length calls only (the host does not read
 * cu_seqlens), and only where the stitch fits. The model leaves out the preparation, which runs
 * before a split call's passes and may run beside an unsplit one's (beside_fits): measured, the
 * split still wins there (docs/PERFORMANCE.md: 8192 / 16 / 32 fast on an H100, 0.285 ms in two
 * segments against 0.324 unsplit beside its preparation; 32768 / 16 / 32, 0.832 in four against
 * 1.143). */
static bool two_segments_pay(const cuda_chunk_shape *s, const cuda_chunk_caps *c, bool tails)
{
    if (s->varlen || tc_state_blocks(s) > c->sms || c->smem_optin < stitch_smem())
        return false;
    const int64_t chunks = chunks_for(s->T), half = (chunks + 1) / 2;
    const int64_t split = kWgMaps1.step * map_chunks(tails, half) + kWgOut1.step * half +
                          kWgMaps1.fixed + kWgOut1.fixed + kStitchOnce;
    return split < kTcUnsplit.step * chunks + kTcUnsplit.fixed;
}

/* Whether a call's shapes and tensors let the fused wgmma pass run: K = V = 128 (at K = V = 64
 * the fast mode's final states measured 1.29 times FLA's error on one draw, past the 1.25 the
 * fast mode allows, where W and U's pass stays below it; docs/PERFORMANCE.md), q, k and v that
 * tensor maps can read, and not f16's high mode (its scaled lo parts would sum apart from the
 * hi products: no registers for that beside the fused pass's). */
static bool fused_fits(const cuda_chunk_shape *s)
{
    return !(s->split_operands && s->in_f16) && s->in_bytes == 2 && round_up(s->K, 32) == 128 &&
           round_up(s->V, 32) == 128 && s->qk_mappable && s->v_mappable;
}

/* Whether the state pass runs chunk_state_wg (else chunk_state_tc). chunk_state_wg needs 16-bit
 * inputs, K and V in {64, 128} after rounding up to 32 (V: a multiple of 64), its shared memory
 * and the sm_90a code loaded; it runs every fast-mode call the fused pass fits (fused_fits), and
 * in the high mode the calls that are split into segments and those with more than a wave of
 * chunk_state_tc's blocks, where it is the faster pass (its blocks are twice as wide, so they run
 * in fewer waves: 8 x 4096 tokens, HV = 32, high on an H100, 1.624 ms against 2.212), and not the
 * others, where chunk_state_tc's twice as many blocks fill one wave better (8192 / 16 / 32 high
 * unsplit, 0.538 ms against 0.580; docs/PERFORMANCE.md). GDN_CUDA_STATE_PASS forces one (wgmma
 * only where it can run). */
static bool use_wg(const cuda_chunk_shape *s, const cuda_chunk_caps *c, const cuda_chunk_env *e)
{
    if (s->in_bytes != 2)
        return false;
    const int64_t KP = round_up(s->K, 32), VP = round_up(s->V, 32);
    if ((KP != 64 && KP != 128) || VP % CK_WG_COLS != 0)
        return false;
    if (e->state_pass == 1)
        return false;
    if (c->smem_optin < wg_layout_for((int)KP, 1).bytes || !c->wg_loaded)
        return false;
    /* the fast mode's fused pass (no W and U in the workspace) beats chunk_state_tc everywhere;
     * the high mode's runs where the rules below take the wgmma pass */
    const bool fused = !s->split_operands && fused_fits(s) && !e->no_fused && !e->key_copies &&
                       c->tensor_maps;
    return e->state_pass == 2 || fused || few_state_blocks(s, c) || tc_state_blocks(s) > c->sms ||
           two_segments_pay(s, c, tails_fit(s, e, true));
}

/* The widths chunk_state_wg's blocks may have, in warpgroups: 2 when K and V round up to 128, so
 * that each head's M and N have two 64-column tiles each (a block's pair shares its head, its
 * segment and whether U comes in) and the two warpgroups' stages fit the device's shared memory;
 * else only 1. Two a block run about 1.25 times one's work per step (kWgSteps), so they pay where
 * blocks would otherwise queue in waves, not where each SM would hold one block anyway. */
static int wg_width_max(const cuda_chunk_shape *s, const cuda_chunk_caps *c)
{
    if (round_up(s->K, 32) != 128 || round_up(s->V, 32) != 128)
        return 1;
    return c->smem_optin >= wg_layout_for(128, 2).bytes ? 2 : 1;
}

static int64_t longer(int64_t a, int64_t b) { return a > b ? a : b; }

/* Waves of `blocks` blocks at one block per SM. */
static int64_t waves(int64_t blocks, int64_t sms) { return (blocks + sms - 1) / sms; }

/* Step times (0.01 us) of the split kernels: per chunk step of a block and wave of the maps and
 * the output pass, per segment boundary of the stitch. chunk_state_wg's were fitted on an H200
 * from the passes' times at T = 32768 and 131072, HV = 4, by warpgroups a block
 * (docs/PERFORMANCE.md); chunk_state_tc's keep the ratios 2 : 4 : 3 measured for it. These
 * chains bind on the H200; on the H100 the passes are bound by the bytes they stage, which
 * pass_bytes models. */
typedef struct step_costs {
    int64_t maps, out;
} step_costs;
static const step_costs kWgSteps[3] = {{0, 0}, {147, 225}, {224, 360}};
static const int64_t kWgStitchStep = 230;
/* The stitch's step where the maps run from their segments' tails and M is zero: nothing, as a
 * stitch block whose Ms are all zero returns at once (the kernel took 3.1-3.3 us a call with one
 * and with three boundaries, 8192 and 32768 / 16 / 32 on an H200); 0.1 us, so that more segments
 * still cost something. */
static const int64_t kTailStitchStep = 10;
static const step_costs kTcSteps = {200, 400};
static const int64_t kTcStitchStep = 300;

/* Bytes a split pass moves per (chunk, value head), and the maps pass per map: the blocks it
 * stages and the output rows it writes. The key head's k rows (and q's, in the output pass),
 * from the workspace or on sm_90 the inputs, are shared by its HV / H value heads through L2.
 * W and U's passes stage W hi + lo, U and the decay factors, the output pass also Aqk hi + lo;
 * the fused pass (fused) stages v's rows, T diag(beta) and the decay factors, the output pass
 * also Aqk (each one part in the fast mode, hi + lo in the high mode). */
typedef struct pass_bytes {
    int64_t maps, map, out;
} pass_bytes;

static pass_bytes split_pass_bytes(const cuda_chunk_shape *s, bool fused)
{
    const int64_t KP = round_up(s->K, 32), VP = round_up(s->V, 32), share = s->HV / s->H;
    const int64_t kb = tc_key_block((int)KP, 2), factors = CK_CHUNK * 4;
    const int64_t rows = CK_CHUNK * s->V * s->out_bytes;
    pass_bytes b = {0, KP * (KP + VP) * 4, 0};
    if (fused) {
        const int64_t vb = CK_CHUNK * VP * 2, tb = (s->split_operands ? 2 : 1) * tc_aq_part(2);
        b.maps = kb / share + vb + tb + 2 * factors;
        b.out = 2 * kb / share + vb + 2 * tb + 3 * factors + rows;
        return b;
    }
    const int64_t ub = VP / CK_VT * tc_u_tile();
    b.maps = 2 * kb + ub + kb / share + factors;
    b.out = b.maps + tc_aq_block(2) + kb / share + factors + rows;
    return b;
}

/* Bytes the split passes stream per 0.01 us, or 0 where the device does not say: the memory's
 * peak times 0.795, what the output pass reached on an H100 where its bytes bound it
 * (docs/PERFORMANCE.md). */
static int64_t stream_bytes_per_step_unit(const cuda_chunk_caps *c)
{
    const int64_t rate = c->mem_bytes_per_s > 0 ? (int64_t)(c->mem_bytes_per_s * 0.795 * 1e-8) : 0;
    return rate > 0 ? rate : 0;
}

/* How a call's state pass runs: chunks per segment (at least every sequence's chunk count when
 * not split) and chunk_state_wg's warpgroups per block in the maps and the output pass. */
typedef struct state_plan {
    int64_t segc;
    int nw_maps, nw_out;
} state_plan;

/* The candidates' common terms (plan_state). */
typedef struct split_model {
    bool wg, tails; /* tails: the maps run from their segments' last chunks (plan.tails) */
    int lo_m, hi_m, lo_o, hi_o;
    int64_t sms, heads, rate, out_floor;
    int64_t maps_tiles[3], out_tiles[3]; /* blocks per head and segment, by warpgroups a block */
    pass_bytes pb;
} split_model;

/* Segments of segc chunks, G of them per sequence, at every allowed pair of widths: the
 * cheapest so far goes to *best (ties keep the earlier, fewer segments and warpgroups). */
static void consider(const split_model *m, int64_t segc, int64_t G, state_plan *best,
                     int64_t *best_cost)
{
    const int64_t mapc = map_chunks(m->tails, segc);
    const int64_t maps_floor =
        m->rate > 0 ? (G - 1) * m->heads * (mapc * m->pb.maps + m->pb.map) / m->rate : 0;
    /* widths are 1 or 2 warpgroups (wg_width_max): the bound tells the compiler so too */
    for (int w = m->lo_m; w <= m->hi_m && w <= 2; w++)
        for (int o = m->lo_o; o <= m->hi_o && o <= 2; o++) {
            const step_costs sm = m->wg ? kWgSteps[w] : kTcSteps;
            const step_costs so = m->wg ? kWgSteps[o] : kTcSteps;
            const int64_t maps = (G - 1) * m->maps_tiles[w] * m->heads;
            const int64_t cost =
                longer(sm.maps * mapc * waves(maps, m->sms), maps_floor) +
                longer(so.out * segc * waves(G * m->out_tiles[o] * m->heads, m->sms),
                       m->out_floor) +
                (m->tails ? kTailStitchStep : m->wg ? kWgStitchStep : kTcStitchStep) * (G - 1);
            if (*best_cost < 0 || cost < *best_cost) {
                best->segc = segc, best->nw_maps = w, best->nw_out = o;
                *best_cost = cost;
            }
        }
}

/* The unsplit wgmma pass's 64-column tiles: one warpgroup each, over every head and sequence. */
static int64_t wg_state_tiles(const cuda_chunk_shape *s)
{
    return round_up(s->V, CK_WG_COLS) / CK_WG_COLS * s->HV * s->N;
}

/* The warpgroups a block of the unsplit wgmma pass: two where one a block would queue its blocks
 * in more waves than two a block, at two's longer step (kWgSteps), take; else one, which runs the
 * shorter chain (8 sequences x 4096 tokens, H = 16, HV = 32, fast: 1.145 ms at one, 1.023 at
 * two on an H100). */
static int unsplit_width(const cuda_chunk_shape *s, const cuda_chunk_caps *c, int top)
{
    if (top < 2 || c->sms <= 0)
        return 1;
    const int64_t tiles = wg_state_tiles(s);
    const int64_t one = kWgSteps[1].out * waves(tiles, c->sms);
    const int64_t two = kWgSteps[2].out * waves((tiles + 1) / 2, c->sms);
    return two < one ? 2 : 1;
}

/* The plan of the state pass. Split only 16-bit inputs, only where the stitch's shared memory
 * fits the device, and only when few_state_blocks (the state pass runs one block per SM) or, on
 * warpgroup products, two_segments_pay; then into the G segments per sequence, and with the
 * warpgroups per block, that minimise the modelled time: per pass, its step time x chunks per
 * segment (the maps pass from segment tails: kTailChunks at most) x waves of its blocks (the
 * maps pass KT + VT tiles of cols value columns per head and segment but the last, VT alone
 * with tails, whose M blocks return at once; cols the block's width; the output pass VT
 * tiles), or the time its bytes take at the device's rate where that is longer, plus the
 * stitch's step per segment boundary (kTailStitchStep where the tails leave M zero).
 * Unsplit calls run unsplit_width's warpgroups a block (unless GDN_CUDA_WG_WIDTH forces them). */
static state_plan plan_state(const cuda_chunk_shape *s, const cuda_chunk_caps *c,
                             const cuda_chunk_env *e, bool wg, bool fused)
{
    const int64_t chunks = chunks_for(s->T), most = chunks > 1 ? chunks : 1;
    const int top = wg ? wg_width_max(s, c) : 1;
    split_model m = {0};
    m.wg = wg;
    m.tails = tails_fit(s, e, wg);
    m.lo_m = 1, m.hi_m = top, m.lo_o = 1, m.hi_o = top;
    if (e->wg_maps >= 1 && e->wg_maps <= top)
        m.lo_m = m.hi_m = e->wg_maps;
    if (e->wg_out >= 1 && e->wg_out <= top)
        m.lo_o = m.hi_o = e->wg_out;
    const int64_t asked = e->segment_chunks;
    const int64_t forced = asked > 0 ? (asked < most ? asked : most) : 0;
    const bool split = s->in_bytes == 2 && c->smem_optin >= stitch_smem() &&
                       (forced || few_state_blocks(s, c) ||
                        (wg && two_segments_pay(s, c, m.tails)));
    state_plan best = {most, m.lo_m, m.lo_o};
    if (!split || s->N == 0) {
        if (wg && m.lo_o < m.hi_o)
            best.nw_out = unsplit_width(s, c, top);
        return best;
    }
    const int64_t N = s->N;
    m.sms = c->sms > 0 ? c->sms : 1;
    m.heads = s->HV * N;
    const int64_t per_seq = s->varlen ? (most + N - 1) / N : most;
    for (int nw = 1; nw <= top; nw++) {
        const int64_t cols = wg ? CK_WG_COLS * nw : CK_VT;
        m.out_tiles[nw] = round_up(s->V, cols) / cols;
        /* M's tiles too, but not where the maps run from their tails: as the model prices a
         * tail (kTailChunks), M is then zero, and M's blocks return as soon as they know it */
        m.maps_tiles[nw] = (m.tails ? 0 : round_up(s->K, cols) / cols) + m.out_tiles[nw];
    }
    m.pb = split_pass_bytes(s, fused);
    if (m.tails) /* (nor do they write M) */
        m.pb.map = round_up(s->K, 32) * round_up(s->V, 32) * 4;
    m.rate = stream_bytes_per_step_unit(c);
    m.out_floor = m.rate > 0 ? per_seq * m.heads * m.pb.out / m.rate : 0;
    int64_t best_cost = -1;
    if (forced)
        consider(&m, forced, (per_seq + forced - 1) / forced, &best, &best_cost);
    else /* below 4 chunks a segment the stitch costs more; past one segment per SM the output
          * pass only gains waves (no G at all: too short to split, best stays unsplit) */
        for (int64_t G = 2; G <= m.sms && (per_seq + G - 1) / G >= 4; G++)
            consider(&m, (per_seq + G - 1) / G, G, &best, &best_cost);
    return best;
}

/* Segment slots: one per sequence unsplit; without cu_seqlens exactly N x a T-token sequence's
 * segments (the kernels' seq_slots; a sequence its slot skips has one); else a bound without
 * reading cu_seqlens. */
static int64_t segment_slots(const cuda_chunk_shape *s, int64_t segc)
{
    const int64_t most = chunks_for(s->T), N = s->N;
    if (!s->varlen)
        return N * segments_for(most, segc);
    return segc >= most ? N : N + (chunk_bound(s) + segc - 1) / segc;
}

/* Whether the preparation can run beside the state pass (chunk_prep_tc_beside) rather than
 * before it: the fused pass (fused) on equal-length sequences, unsplit with one warpgroup a block
 * (the plan's part, prep_beside_blocks), whose blocks (one an SM: their shared memory) leave SMs
 * free, two preparation teams' shared memory in one block, and enough free SMs that the
 * preparation keeps up: its N x HV value heads a chunk step (in tasks of one key head's), at most
 * about 8 us each on two teams a free SM, against the state pass's step of about 2 us, which
 * holds while N x HV <= free SMs / 2 (8192 / 16 / 32 on 132 SMs: 32 <= 34). The preparation
 * starts first and never waits, so no launch order or residency can hang the call
 * (docs/DESIGN.md). Calls that two_segments_pay splits run split instead, their preparation
 * first, which measured faster (two_segments_pay); beside runs the unsplit calls, shorter ones. */
static bool beside_fits(const cuda_chunk_shape *s, const cuda_chunk_caps *c,
                        const cuda_chunk_env *e, const ck_dims *d, bool fused)
{
    if (!fused || s->split_operands || s->varlen || s->slots || e->no_beside || c->sms <= 0)
        return false;
    const int64_t state_blocks = wg_state_tiles(s);
    if (state_blocks >= c->sms || 2 * prep_fused_team_bytes(d->KP) > c->smem_optin)
        return false;
    return 2 * s->HV * s->N <= c->sms - state_blocks;
}

/* Blocks of the preparation beside the state pass, 0 where it runs before it (beside_fits and
 * the plan unsplit at one warpgroup a block): one per free SM (a block spreads one an SM; each
 * runs two tasks at once), no more than half the tasks, and no more than keep 6.5 chunk steps'
 * tasks (N x H a step) in flight on their two teams: 6.5 N H / 2 blocks. The preparation never
 * waits, so with more blocks it runs ahead of the state pass, and the further ahead, the slower
 * the pass's chain (likely: the chunks it reads leave L2, and the preparation's traffic meets
 * its reads); with fewer it falls behind. 32768 / 16 / 32 fast on an H100: 1.35 ms at 44 blocks,
 * 1.15 at 52 (6.5 steps), 1.30 at 60, 1.34 at 68 (every free SM); 8192 / 16 / 32: 0.372, 0.324,
 * 0.337 and 0.364 ms. */
enum { kBesideHalfSteps = 13 }; /* (twice the 6.5 steps) */

static int prep_beside_blocks(const cuda_chunk_shape *s, const cuda_chunk_caps *c,
                              const cuda_chunk_plan *p, bool fits)
{
    const int64_t tasks = p->nc * s->H;
    if (!fits || p->split || p->nw_out != 1 || tasks == 0)
        return 0;
    const int64_t free_sms = c->sms - wg_state_tiles(s), half = (tasks + 1) / 2;
    const int64_t paced = (kBesideHalfSteps * s->N * s->H + 3) / 4;
    const int64_t blocks = free_sms < half ? free_sms : half;
    return (int)(blocks < paced ? blocks : paced);
}

/* ---- the workspace --------------------------------------------------------------------------- */

/* The next region of `bytes`, its end rounded up to 256 bytes (saturating). */
static cuda_ws_region take256(size_t *at, size_t bytes)
{
    cuda_ws_region r = {*at, bytes};
    const size_t padded = bytes > SIZE_MAX - 255 ? SIZE_MAX : (bytes + 255) / 256 * 256;
    *at = gdn_size_add(*at, padded);
    return r;
}

static size_t mul3(size_t a, size_t b, size_t c) { return gdn_size_mul(gdn_size_mul(a, b), c); }

static void workspace_layout(const cuda_chunk_shape *s, cuda_chunk_plan *p)
{
    const int es = s->in_bytes;
    const ck_dims *d = &p->d;
    const size_t nch = gdn_size_mul((size_t)p->nc, (size_t)s->HV);
    const size_t seqs = gdn_size_add((size_t)s->N, 1);
    cuda_chunk_workspace *w = &p->ws;
    size_t at = 0;
    w->chunk_off = take256(&at, gdn_size_mul(seqs, sizeof(int64_t)));
    w->gl = take256(&at, gdn_size_mul(nch, sizeof(float)));
    w->eg = take256(&at, mul3(nch, CK_CHUNK, sizeof(float)));
    w->ek = take256(&at, es == 2 ? mul3(nch, CK_CHUNK, sizeof(float)) : 0);
    w->ew = take256(&at, p->fused ? mul3(nch, CK_CHUNK, sizeof(float)) : 0);
    const bool tc = es == 2; /* the 16-bit path's padded blocks (tc_key_block, ...) */
    const size_t kblk = tc ? (size_t)tc_key_block(d->KP, es) : (size_t)CK_CHUNK * d->KP * es;
    const size_t ublk = tc ? (size_t)(d->VP / CK_VT) * tc_u_tile() : (size_t)CK_CHUNK * d->VP * 4;
    const size_t ablk = p->fused ? (size_t)fused_aq_block(s->split_operands)
                        : tc      ? (size_t)tc_aq_block(es)
                                  : (size_t)CK_CHUNK * CK_CHUNK * es;
    /* the fused pass reads no W and U, the direct keys no Qd and Kd */
    w->W = take256(&at, p->fused ? 0 : gdn_size_mul(nch, kblk));
    w->Wl = take256(&at, tc && s->split_operands && !p->fused ? gdn_size_mul(nch, kblk) : 0);
    /* the 16-bit path keeps one Qd / Kd block per (chunk, key head) (key_slot) */
    const size_t nqk = tc ? gdn_size_mul((size_t)p->nc, (size_t)s->H) : nch;
    w->Qd = take256(&at, p->direct_keys ? 0 : gdn_size_mul(nqk, kblk));
    w->Kd = take256(&at, p->direct_keys ? 0 : gdn_size_mul(nqk, kblk));
    w->U = take256(&at, p->fused ? 0 : gdn_size_mul(nch, ublk));
    w->Aq = take256(&at, gdn_size_mul(nch, ablk));
    w->seg_off = take256(&at, gdn_size_mul(seqs, sizeof(int64_t)));
    const size_t map = (size_t)d->KP * (d->KP + d->VP) * sizeof(float);
    w->maps = take256(&at, p->split ? mul3((size_t)p->nslots, (size_t)s->HV, map) : 0);
    w->m_zero = take256(&at, p->tails ? mul3((size_t)p->nslots, (size_t)s->HV, sizeof(int)) : 0);
    w->ready = take256(&at, p->prep_beside ? mul3((size_t)p->nc, (size_t)s->HV, sizeof(int)) : 0);
    w->total = at;
}

/* ---- the plan -------------------------------------------------------------------------------- */

void cuda_chunk_plan_make(const cuda_chunk_shape *s, const cuda_chunk_caps *caps,
                          const cuda_chunk_env *env, cuda_chunk_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    const int es = s->in_bytes;
    plan->d = dims_for(s->K, s->V, es);
    plan->nc = chunk_bound(s);
    plan->wg = use_wg(s, caps, env);
    /* 16-bit inputs, K padded to whole 64-element panels (swizzled blocks), and the sm_90a code
     * running (bulk staging; the same image as chunk_state_wg's). */
    plan->direct_keys = !env->key_copies && es == 2 && round_up(s->K, 32) % CK_PANEL == 0 &&
                        caps->wg_loaded && caps->tensor_maps && s->qk_mappable;
    /* The fused values pass: on the wgmma pass, q, k and v by tensor maps (fused_fits). */
    plan->fused = plan->wg && plan->direct_keys && fused_fits(s) && !env->no_fused;
    const state_plan sp = plan_state(s, caps, env, plan->wg, plan->fused);
    plan->segc = sp.segc, plan->nw_maps = sp.nw_maps, plan->nw_out = sp.nw_out;
    plan->nslots = segment_slots(s, plan->segc);
    plan->split = plan->nslots > s->N;
    plan->uniform = !s->varlen && !s->slots;
    plan->seq_chunks = chunks_for(s->T);
    plan->seq_slots = segments_for(plan->seq_chunks, plan->segc);
    /* The stitch in blocks of 8 columns where that leaves at most one block per SM, else of 16:
     * its chain is latency bound, and narrower blocks cut each step. */
    if (plan->split)
        plan->stitch_cols = env->stitch_cols ? env->stitch_cols
                            : s->N * s->HV * (plan->d.VP / 8) <= caps->sms ? 8 : 16;
    /* Whole-chunk output tiles by bulk tensor stores: the wgmma pass, the encoder (its image is
     * sm_90a's) and an output of the inputs' type that a tensor map can write (no map is made
     * for one the pass would store element by element anyway). */
    plan->tma_store = plan->wg && caps->tensor_maps && s->out_mappable && !env->no_tma_store;
    plan->tails = plan->split && tails_fit(s, env, plan->wg);
    plan->prep_beside =
        prep_beside_blocks(s, caps, plan, beside_fits(s, caps, env, &plan->d, plan->fused));
    workspace_layout(s, plan);
}

void cuda_delta_rule_plan_make(const cuda_chunk_shape *s, const cuda_chunk_caps *caps,
                               const cuda_chunk_env *env, cuda_delta_rule_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!cuda_chunk_wanted(s))
        return;
    if (!cuda_chunk_fits(s, caps, NULL, 0)) {
        plan->refused = s->algorithm == GDN_ALGO_CHUNKED; /* AUTO runs the recurrent form */
        return;
    }
    plan->chunked = true;
    cuda_chunk_plan_make(s, caps, env, &plan->chunk);
}

size_t cuda_delta_rule_plan_workspace(const cuda_delta_rule_plan *plan)
{
    return plan->chunked ? plan->chunk.ws.total : 0;
}
