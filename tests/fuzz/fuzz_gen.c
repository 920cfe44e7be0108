/* The argument generator: for each entry point, a call that is mostly valid (so that the kernels
 * run and are compared with the reference) with hostile edges mixed in: extents of 0 and 1, odd
 * and chunk-unaligned sizes, empty batches and varlen batches without sequences, extents far
 * beyond memory on tensors that have a zero extent (they reach no byte, so this is honest),
 * padded, broadcast (stride 0), permuted, negative and non-contiguous strides, outputs that alias
 * inputs exactly or partly, wrong dtypes and ranks, absent tensors and NULL pointers, random
 * index tensors (negative, out of range and duplicate slots; valid and broken cu_seqlens), out of
 * range enums and non-finite scalars.
 *
 * One function per entry point here; the parts they are built from (extents, dtypes, strides and
 * shapes, views, sequences and index tensors, options) are in fuzz_gen_parts.c. Choices are made
 * through fz_src: each helper lists its plainest option first, so an exhausted libFuzzer input
 * degrades to a small valid call. */
#include "fuzz_gen_parts.h"

#include <math.h>
#include <string.h>

/* ---- conv1d --------------------------------------------------------------------------------- */

static int64_t conv_width(fz_src *s)
{
    static const int64_t wrong[] = {0, 1, 17, -1, 100};
    if (fz_bad(s, 4))
        return fz_pick(s, wrong, N_OF(wrong));
    return fz_pct(s, 70) ? fz_int(s, 2, 5) : fz_int(s, 2, GDN_CONV_MAX_WIDTH);
}

static void conv_weights(fz_case *c, fz_src *s, gdn_tensor *weight, gdn_tensor *bias, int64_t C,
                         int64_t W)
{
    *weight = fz_make_desc(fz_float_dtype(s), 2, (const int64_t[]){C, W});
    fz_vary_strides(s, weight, true, 3);
    fz_vary_shape(s, weight, 2);
    fz_maybe_bad_dtype(s, weight, 2);
    fz_input(c, s, "weight", weight, FZ_IN, -1.0, 1.0, 2);
    if (fz_pct(s, 60)) {
        *bias = fz_make_desc(fz_float_dtype(s), 1, (const int64_t[]){C});
        fz_vary_strides(s, bias, false, 3);
        fz_vary_shape(s, bias, 2);
        fz_maybe_bad_dtype(s, bias, 2);
        fz_input(c, s, "bias", bias, FZ_IN, -1.0, 1.0, 0);
    }
}

/* A [S, C, W-1] pool of x's dtype or f32: as laid out, or a [S, W-1, C] buffer seen through
 * transposed strides (as vLLM keeps it), or padded. */
static void conv_state(fz_case *c, fz_src *s, gdn_tensor *st, gdn_dtype x_dt, int64_t S,
                       int64_t C, int64_t W)
{
    *st = fz_make_desc(fz_pct(s, 50) ? GDN_F32 : x_dt, 3, (const int64_t[]){S, C, W - 1});
    if (fz_pct(s, 30)) {
        st->stride[2] = C > 0 ? C : 1;
        st->stride[1] = 1;
    } else {
        fz_vary_strides(s, st, false, 3);
    }
    fz_vary_shape(s, st, 2);
    fz_maybe_bad_dtype(s, st, 2);
    fz_input(c, s, "conv_state", st, FZ_STATE, -2.0, 2.0, 0);
}

static void gen_conv1d(fz_case *c, fz_src *s, int shrink)
{
    gdn_conv1d_args *a = &c->conv;
    *a = gdn_conv1d_default_args();
    fz_seqs q;
    fz_draw_seqs(s, &q, fz_cap(260, shrink), 55);
    int64_t C = fz_extent(s, fz_cap(160, shrink), fz_hostile_weight(2)); /* C >= 1 */
    int64_t W = conv_width(s);
    if (c->huge)
        fz_make_huge_batch(s, &q);
    gdn_dtype dx = fz_float_dtype(s);
    a->x = fz_make_desc(dx, 3, (const int64_t[]){q.B, q.T, C});
    fz_vary_strides(s, &a->x, true, 3);
    fz_vary_shape(s, &a->x, 2);
    fz_maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = fz_input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2);
    conv_weights(c, s, &a->weight, &a->bias, C, W);
    fz_output(c, s, "out", &a->out, &a->x, vx, true, fz_float_dtype(s));
    if (q.pool)
        conv_state(c, s, &a->conv_state, dx, q.S, C, W);
    fz_index_tensors(c, s, &q, &a->cu_seqlens, &a->state_slots, &a->has_initial_state);
    a->activation = (gdn_activation)fz_enum_value(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_conv1d_update(fz_case *c, fz_src *s, int shrink)
{
    gdn_conv1d_update_args *a = &c->upd;
    *a = gdn_conv1d_update_default_args();
    fz_seqs q;
    memset(&q, 0, sizeof q);
    q.B = q.N = fz_extent(s, fz_cap(12, shrink), 10);
    q.T = 1;
    q.pool = true;
    q.S = q.N + fz_int(s, 0, 2);
    if (fz_bad(s, 5))
        q.S = q.N > 0 ? q.N - 1 : 0;
    int64_t C = fz_extent(s, fz_cap(200, shrink), fz_hostile_weight(2)), W = conv_width(s);
    if (c->huge) { /* [N, C] is empty only through C = 0, which is refused */
        q.B = q.N = fz_huge_extent(s);
        C = 0;
        q.S = 0;
    }
    gdn_dtype dx = fz_float_dtype(s);
    a->x = fz_make_desc(dx, 2, (const int64_t[]){q.N, C});
    fz_vary_strides(s, &a->x, true, 3);
    fz_vary_shape(s, &a->x, 2);
    fz_maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = fz_input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2);
    conv_weights(c, s, &a->weight, &a->bias, C, W);
    fz_output(c, s, "out", &a->out, &a->x, vx, true, fz_float_dtype(s));
    if (!fz_bad(s, 4))
        conv_state(c, s, &a->conv_state, dx, q.S, C, W);
    if (fz_pct(s, 50)) {
        int64_t vals[FZ_MAX_SEQS + 1];
        int64_t n = q.N <= FZ_MAX_SEQS ? q.N : fz_int(s, 0, 3);
        fz_slot_values(s, &q, vals);
        fz_index_view(c, s, "state_slots", &a->state_slots, fz_pct(s, 50) ? GDN_I32 : GDN_I64,
                      vals, n);
    }
    a->activation = (gdn_activation)fz_enum_value(s, 2);
    c->tol_f32 = 1e-5;
}

/* ---- row-wise ops: gating and the norms ----------------------------------------------------- */

/* [..., D] of rank 1-4: the leading extents small (or, huge, one zero and others enormous). */
static int rows_shape(fz_case *c, fz_src *s, int64_t *shape, int64_t max_d, int shrink)
{
    int rank = (int)fz_int(s, 1, 4);
    for (int d = 0; d < rank - 1; d++)
        shape[d] = fz_extent(s, fz_cap(d == rank - 2 ? 40 : 6, shrink), 8);
    shape[rank - 1] =
        fz_pct(s, 2) ? 4097 : fz_extent(s, fz_cap(max_d, shrink), fz_hostile_weight(2));
    if (c->huge && rank >= 2) {
        int zero = (int)fz_int(s, 0, rank - 2);
        for (int d = 0; d < rank - 1; d++)
            shape[d] = d == zero ? 0 : fz_pct(s, 60) ? fz_huge_extent(s) : shape[d];
    }
    return rank;
}

static void gen_gating(fz_case *c, fz_src *s, int shrink)
{
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 72, shrink);
    int64_t HV = shape[rank - 1];
    gdn_dtype da = fz_float_dtype(s);
    fz_view *va, *vb = NULL;
    c->a = fz_make_desc(da, rank, shape);
    if (rank >= 2 && !c->huge && fz_pct(s, 15)) {
        /* a and b as the two halves of each row of one fused [..., 2*HV] buffer */
        for (int d = rank - 2; d >= 0; d--) {
            int64_t inner = shape[d + 1] > 0 ? shape[d + 1] : 1;
            c->a.stride[d] = d == rank - 2 ? 2 * HV : c->a.stride[d + 1] * inner;
        }
        c->b = c->a;
        va = fz_view_add(c, "a", &c->a, FZ_IN);
        va->lo = -5.0, va->hi = 5.0;
        vb = fz_view_alias(c, "b", &c->b, FZ_IN, va, HV * (int64_t)gdn_dtype_size(da));
        vb->lo = -5.0, vb->hi = 5.0;
    } else {
        fz_vary_strides(s, &c->a, true, 3);
        fz_vary_shape(s, &c->a, 2);
        fz_maybe_bad_dtype(s, &c->a, 2);
        va = fz_input(c, s, "a", &c->a, FZ_IN, -5.0, 5.0, 2);
        if (fz_pct(s, 80)) {
            c->b = fz_make_desc(fz_float_dtype(s), rank, shape);
            fz_vary_strides(s, &c->b, true, 3);
            fz_vary_shape(s, &c->b, 2);
            fz_maybe_bad_dtype(s, &c->b, 2);
            vb = fz_input(c, s, "b", &c->b, FZ_IN, -5.0, 5.0, 0);
        }
    }
    fz_output(c, s, "g_out", &c->g_out, &c->a, va, true, fz_float_dtype(s));
    if (vb || fz_bad(s, 3)) /* without b, beta_out must be refused */
        fz_output(c, s, "beta_out", &c->beta_out, &c->a, vb, true, fz_float_dtype(s));
    fz_gating_params(c, s, &c->gp, HV, "params.A", "params.dt_bias");
    c->null_args = fz_bad(s, 2);
    c->null_a = fz_bad(s, 2);
    c->null_b = fz_bad(s, 2);
    c->null_gout = fz_bad(s, 2);
    c->null_beta_out = fz_bad(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_l2norm(fz_case *c, fz_src *s, int shrink)
{
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 300, shrink);
    c->x = fz_make_desc(fz_float_dtype(s), rank, shape);
    fz_vary_strides(s, &c->x, true, 3);
    fz_vary_shape(s, &c->x, 2);
    fz_maybe_bad_dtype(s, &c->x, 2);
    fz_view *vx = fz_input(c, s, "x", &c->x, FZ_IN, -2.0, 2.0, 2);
    if (vx)
        vx->wide_ok = true; /* out = x / |x| is the same for x scaled by any factor */
    fz_output(c, s, "out", &c->out, &c->x, vx, true, fz_float_dtype(s));
    c->eps = fz_eps_value(c, s);
    c->null_a = fz_bad(s, 2);
    c->null_gout = fz_bad(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_rmsnorm(fz_case *c, fz_src *s, int shrink)
{
    gdn_rmsnorm_args *a = &c->rms;
    *a = gdn_rmsnorm_default_args();
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 300, shrink);
    a->x = fz_make_desc(fz_float_dtype(s), rank, shape);
    fz_vary_strides(s, &a->x, true, 3);
    fz_vary_shape(s, &a->x, 2);
    fz_maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = fz_input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2), *vz = NULL;
    if (vx)
        vx->wide_ok = true; /* normalised: the scale of x cancels */
    if (fz_pct(s, 70)) {
        a->z = fz_make_desc(fz_float_dtype(s), rank, shape);
        fz_vary_strides(s, &a->z, true, 3);
        fz_vary_shape(s, &a->z, 2);
        fz_maybe_bad_dtype(s, &a->z, 2);
        vz = fz_input(c, s, "z", &a->z, FZ_IN, -3.0, 3.0, 0);
    }
    if (fz_pct(s, 70)) {
        a->weight = fz_make_desc(fz_float_dtype(s), 1, &shape[rank - 1]);
        if (fz_pct(s, 20))
            a->weight.stride[0] = fz_int(s, 0, 3);
        fz_vary_strides(s, &a->weight, false, 3);
        fz_vary_shape(s, &a->weight, 2);
        fz_maybe_bad_dtype(s, &a->weight, 2);
        fz_input(c, s, "weight", &a->weight, FZ_IN, -1.5, 1.5, 0);
    }
    fz_view *in = vz && fz_pct(s, 30) ? vz : vx;
    fz_output(c, s, "out", &a->out, &a->x, in, true, fz_float_dtype(s));
    a->eps = fz_eps_value(c, s);
    static const int64_t flags[] = {0, 1, -3};
    a->weight_offset = (int32_t)fz_pick(s, flags, 3);
    a->norm_before_gate = (int32_t)fz_pick(s, (const int64_t[]){1, 0, 7}, 3);
    c->null_args = fz_bad(s, 2);
    c->tol_f32 = 1e-5;
}

/* ---- the delta rule ------------------------------------------------------------------------- */

typedef struct delta_dims {
    fz_seqs q;
    int64_t H, HV, K, V;
} delta_dims;

/* Empty but enormous: T = 0 (or B = 0) with K, V, H, HV or the batch far beyond memory. A
 * pool then has no slots (S = 0): every sequence must be padding or there must be none. */
static void make_huge_delta(fz_src *s, delta_dims *d)
{
    fz_make_huge_batch(s, &d->q);
    if (d->q.pool)
        d->q.S = 0;
    switch (fz_int(s, 0, 3)) {
    case 0: d->K = fz_huge_extent(s); break;
    case 1: d->V = fz_huge_extent(s); break;
    case 2: d->H = d->HV = fz_huge_extent(s); break;
    default: d->HV = fz_huge_extent(s); break; /* a multiple of H or not */
    }
    if (fz_pct(s, 30))
        d->K = fz_huge_extent(s);
}

/* q, k and v: separate tensors, or strided views of one fused [B, T, 2*H*K + HV*V] buffer. */
static void delta_qkv(fz_case *c, fz_src *s, const delta_dims *d, gdn_dtype dt)
{
    gdn_delta_rule_args *a = &c->dr;
    const fz_seqs *q = &d->q;
    double kr = a->qk_l2norm ? 1.0 : 1.0 / sqrt((double)(d->K > 0 ? d->K : 1));
    a->q = fz_make_desc(dt, 4, (const int64_t[]){q->B, q->T, d->H, d->K});
    a->k = a->q;
    a->v = fz_make_desc(dt, 4, (const int64_t[]){q->B, q->T, d->HV, d->V});
    if (!c->huge && fz_pct(s, 20)) {
        int64_t row = 2 * d->H * d->K + d->HV * d->V + fz_int(s, 0, 2);
        int64_t esz = (int64_t)gdn_dtype_size(dt);
        for (gdn_tensor *t = &a->q; t; t = t == &a->q ? &a->k : t == &a->k ? &a->v : NULL) {
            t->stride[1] = row;
            t->stride[0] = row * (q->T > 0 ? q->T : 1);
        }
        fz_view *vq = fz_view_add(c, "q", &a->q, FZ_IN);
        fz_view *vk = fz_view_alias(c, "k", &a->k, FZ_IN, vq, d->H * d->K * esz);
        fz_view_alias(c, "v", &a->v, FZ_IN, vq, 2 * d->H * d->K * esz);
        vk->lo = -kr, vk->hi = kr;
        return;
    }
    const char *names[3] = {"q", "k", "v"};
    gdn_tensor *ts[3] = {&a->q, &a->k, &a->v};
    for (int i = 0; i < 3; i++) {
        fz_vary_strides(s, ts[i], true, 3);
        fz_vary_shape(s, ts[i], 2);
        fz_maybe_bad_dtype(s, ts[i], 2);
        fz_input(c, s, names[i], ts[i], FZ_IN, i == 1 ? -kr : -1.0, i == 1 ? kr : 1.0, 2);
    }
}

/* g and beta, [B, T, HV]: log-decays <= 0 and write strengths in [0, 1], or with gating in
 * the kernel the raw a and b. */
static void delta_gates(fz_case *c, fz_src *s, const delta_dims *d)
{
    gdn_delta_rule_args *a = &c->dr;
    const int64_t shape[3] = {d->q.B, d->q.T, d->HV};
    bool gate = a->gate_in_kernel != 0;
    if (gate || fz_pct(s, 85)) {
        a->g = fz_make_desc(fz_float_dtype(s), 3, shape);
        fz_vary_strides(s, &a->g, true, 3);
        fz_vary_shape(s, &a->g, 2);
        fz_maybe_bad_dtype(s, &a->g, 2);
        double lo = gate ? -3.0 : fz_pct(s, 15) ? -12.0 : -2.0;
        fz_input(c, s, "g", &a->g, FZ_IN, lo, gate ? 3.0 : 0.0, gate ? 2 : 0);
    }
    a->beta = fz_make_desc(fz_float_dtype(s), 3, shape);
    fz_vary_strides(s, &a->beta, true, 3);
    fz_vary_shape(s, &a->beta, 2);
    fz_maybe_bad_dtype(s, &a->beta, 2);
    fz_input(c, s, "beta", &a->beta, FZ_IN, gate ? -4.0 : 0.0, gate ? 4.0 : 1.0, 2);
    if (gate)
        fz_gating_params(c, s, &a->gating, d->HV, "gating.A", "gating.dt_bias");
}

/* The pool: [S, HV, K, V] (KV) or [S, HV, V, K] (VK), f32 or bf16, any strides (a KV buffer
 * seen as VK through swapped strides, padded, permuted). */
static void delta_state(fz_case *c, fz_src *s, const delta_dims *d)
{
    gdn_delta_rule_args *a = &c->dr;
    bool kv = a->state_layout != GDN_STATE_VK;
    if (fz_bad(s, 3))
        kv = !kv;
    int64_t inner0 = kv ? d->K : d->V, inner1 = kv ? d->V : d->K;
    a->state = fz_make_desc(fz_pct(s, 75) ? GDN_F32 : GDN_BF16, 4,
                            (const int64_t[]){d->q.S, d->HV, inner0, inner1});
    if (fz_pct(s, 15)) { /* the other layout's buffer through transposed strides */
        a->state.stride[3] = inner0 > 0 ? inner0 : 1;
        a->state.stride[2] = 1;
    } else {
        fz_vary_strides(s, &a->state, false, 3);
    }
    fz_vary_shape(s, &a->state, 2);
    fz_maybe_bad_dtype(s, &a->state, 2);
    fz_input(c, s, "state", &a->state, FZ_STATE, -1.0, 1.0, 0);
}

static float scale_value(fz_case *c, fz_src *s)
{
    static const float odd[] = {NAN, INFINITY, -INFINITY, 1e30f, -0.0f, 1e-38f, 1e-45f};
    const int w[] = {50, 35, fz_hostile_weight(15)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: return 0.0f;
    case 1: return (float)rng_uniform(&s->data, -2.0, 2.0);
    default: {
        float v = odd[fz_int(s, 0, N_OF(odd) - 1)];
        c->scalar_wild = v != 0.0f; /* -0.0 is the default scale */
        return v;
    }
    }
}

static void delta_options(fz_case *c, fz_src *s)
{
    gdn_delta_rule_args *a = &c->dr;
    a->scale = scale_value(c, s);
    a->gva = (gdn_gva)fz_enum_value(s, 2);
    const int aw[] = {50, 20, 25, fz_hostile_weight(5)};
    static const int64_t bad_algo[] = {3, -1, 100};
    int algo = fz_weighted(s, aw, N_OF(aw));
    a->algorithm = algo < 3 ? (gdn_algorithm)algo : (gdn_algorithm)fz_pick(s, bad_algo, 3);
    static const int64_t chunks[] = {16, 32, 64, 128};
    static const int64_t bad_chunks[] = {1, 8, 48, 256, -16, INT32_MAX};
    const int cw[] = {50, 42, fz_hostile_weight(8)};
    switch (fz_weighted(s, cw, N_OF(cw))) {
    case 0: a->chunk_size = 0; break;
    case 1: a->chunk_size = (int32_t)fz_pick(s, chunks, 4); break;
    default: a->chunk_size = (int32_t)fz_pick(s, bad_chunks, N_OF(bad_chunks)); break;
    }
    const int pw[] = {40, 30, 30, fz_hostile_weight(5)};
    static const int64_t bad_precision[] = {3, -1, 1000};
    const int prec = fz_weighted(s, pw, N_OF(pw));
    a->precision = prec < 3 ? (gdn_precision)prec
                            : (gdn_precision)fz_pick(s, bad_precision, N_OF(bad_precision));
}

static void delta_workspace(fz_case *c, fz_src *s)
{
    const int w[WS_MODES] = {45, 10, 20, 8, 7, 5, 5};
    c->ws = (fz_ws)fz_weighted(s, w, WS_MODES);
    static const int64_t reserve[] = {0, 1, 63, 64, 4097, 1 << 20, (int64_t)1 << 62, -1};
    static const int64_t odd[] = {0, 1, 64, 1000, 4096, 65536};
    static const int64_t short_by[] = {1, 8, 64, -2};
    switch (c->ws) {
    case WS_RESERVE: c->ws_arg = (uint64_t)fz_pick(s, reserve, N_OF(reserve)); break;
    case WS_ODD: c->ws_arg = (uint64_t)fz_pick(s, odd, N_OF(odd)); break;
    case WS_SHORT: c->ws_arg = (uint64_t)fz_pick(s, short_by, N_OF(short_by)); break;
    default: c->ws_arg = (uint64_t)fz_int(s, 1, 4096); break;
    }
}

static void gen_delta(fz_case *c, fz_src *s, int shrink)
{
    gdn_delta_rule_args *a = &c->dr;
    *a = gdn_delta_rule_default_args();
    delta_dims d;
    fz_draw_seqs(s, &d.q, fz_cap(260, shrink), 60);
    d.H = fz_extent(s, 4, fz_hostile_weight(2)); /* H >= 1 */
    d.HV = d.H * fz_extent(s, 4, 0);
    if (d.H > 1 && fz_bad(s, 3))
        d.HV += 1; /* not a multiple of H */
    d.K = fz_head_dim(s, shrink);
    d.V = fz_head_dim(s, shrink);
    if (c->huge)
        make_huge_delta(s, &d);
    static const int64_t l2[] = {1, 1, -1, 7};
    a->qk_l2norm = fz_pct(s, 50) ? (int32_t)fz_pick(s, l2, 4) : 0;
    static const int64_t gate[] = {1, 1, -3};
    a->gate_in_kernel = fz_pct(s, 20) ? (int32_t)fz_pick(s, gate, 3) : 0;
    a->state_layout = (gdn_state_layout)fz_enum_value(s, 2);
    delta_qkv(c, s, &d, fz_float_dtype(s));
    delta_gates(c, s, &d);
    /* out must not overlap q, k or v: an alias of any of them must be refused */
    fz_view *alias = NULL;
    for (int i = 0; i < c->nv; i++)
        if (c->v[i].t == &a->v || c->v[i].t == &a->q)
            alias = fz_bad(s, 5) ? &c->v[i] : alias;
    fz_output(c, s, "out", &a->out, &a->v, alias, false, fz_float_dtype(s));
    if (d.q.pool)
        delta_state(c, s, &d);
    fz_index_tensors(c, s, &d.q, &a->cu_seqlens, &a->state_slots, &a->has_initial_state);
    delta_options(c, s);
    delta_workspace(c, s);
    c->null_args = fz_bad(s, 2);
    c->null_bytes = fz_bad(s, 4);
    /* the fast mode rounds the bf16 products' operands once: cpu and ref then differ by about
     * 3e-3 (docs/DESIGN.md) */
    c->tol_f32 = a->q.dtype != GDN_F32 && a->precision != GDN_PRECISION_HIGH ? 1e-2 : 1e-4;
}

/* ---- entry points --------------------------------------------------------------------------- */

fz_op fz_gen_pick_op(fz_src *s)
{
    const int w[FZ_OPS] = {14, 10, 12, 12, 12, 8, 28, 4};
    return (fz_op)fz_weighted(s, w, FZ_OPS);
}

fz_op fz_gen_pick_inner_op(fz_src *s)
{
    const int w[FZ_OPS] = {1, 1, 1, 2, 1, 1, 2, 0};
    return (fz_op)fz_weighted(s, w, FZ_OPS);
}

void fz_gen_op(fz_case *c, fz_src *s, fz_op op, int shrink)
{
    c->op = op;
    fz_hostile = fz_pct(s, 50);
    c->huge = op != FZ_CONTEXT && fz_pct(s, 6);
    c->wild_data = fz_pct(s, 25);
    switch (op) {
    case FZ_CONV1D: gen_conv1d(c, s, shrink); break;
    case FZ_CONV1D_UPDATE: gen_conv1d_update(c, s, shrink); break;
    case FZ_GATING: gen_gating(c, s, shrink); break;
    case FZ_L2NORM: gen_l2norm(c, s, shrink); break;
    case FZ_RMSNORM: gen_rmsnorm(c, s, shrink); break;
    case FZ_WORKSPACE_SIZE:
    case FZ_DELTA_RULE: gen_delta(c, s, shrink); break;
    default: break;
    }
}

void fz_gen_context_options(fz_case *c, fz_src *s)
{
    gdn_context_options *o = &c->copts;
    *o = gdn_context_default_options();
    c->copts_null = fz_pct(s, 5);
    c->cout_null = fz_pct(s, 3);
    static const int64_t backends[] = {GDN_BACKEND_CPU, GDN_BACKEND_AUTO, GDN_BACKEND_REF,
                                       GDN_BACKEND_CPU, GDN_BACKEND_CUDA, 4, -1, 1000};
    o->backend = (gdn_backend)fz_pick(s, backends, N_OF(backends));
    static const int64_t threads[] = {1, 2, 0, 3, 1, 2, 5, 8, 33, -1, INT32_MIN, INT32_MAX};
    o->num_threads = (int32_t)fz_pick(s, threads, N_OF(threads));
    static const int64_t devices[] = {0, 0, 1, -1, INT32_MAX};
    o->cuda_device = (int32_t)fz_pick(s, devices, N_OF(devices));
    static const int64_t isas[] = {GDN_ISA_AUTO,   GDN_ISA_AUTO, GDN_ISA_AUTO, GDN_ISA_SCALAR,
                                   GDN_ISA_AVX2,   GDN_ISA_AVX512, GDN_ISA_AMX, 5, -1};
    o->cpu_isa = (gdn_cpu_isa)fz_pick(s, isas, N_OF(isas));
    o->cuda_stream = fz_pct(s, 10) ? (void *)(uintptr_t)0x1000 : NULL; /* host backends ignore it */
    c->inner_op = fz_gen_pick_inner_op(s);
}

static double sat_mul(double a, double b) { return a * b > 1e300 ? 1e300 : a * b; }

/* Elements an op could have to visit in a call that is not refused: a view with more elements
 * than its bytes hold apart overlaps itself, which only an input may do, and then every output
 * of the op has as many elements, held apart. */
static double numel_of(const gdn_tensor *t) { return t->data ? fz_view_distinct(t) : 0.0; }

double fz_gen_work(const fz_case *c)
{
    switch (c->op) {
    case FZ_CONV1D: return sat_mul(numel_of(&c->conv.x), 16.0);
    case FZ_CONV1D_UPDATE: return sat_mul(numel_of(&c->upd.x), 16.0);
    case FZ_DELTA_RULE:
    case FZ_WORKSPACE_SIZE: {
        const gdn_delta_rule_args *a = &c->dr;
        double K = a->q.ndim == 4 && a->q.shape[3] > 0 ? (double)a->q.shape[3] : 1.0;
        return sat_mul(sat_mul(numel_of(&a->v), K), 4.0) + numel_of(&a->state);
    }
    default: {
        double w = 0;
        for (int i = 0; i < c->nv; i++)
            w += numel_of(c->v[i].t);
        return w;
    }
    }
}
