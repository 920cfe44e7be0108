/* The parts of the argument generator (fuzz_gen_parts.h): extents, dtypes, descriptors, views,
 * sequences and index tensors, and options, each mostly valid with hostile edges mixed in. */
#include "fuzz_gen_parts.h"

#include <math.h>
#include <string.h>

bool fz_hostile; /* set by fz_gen_op for each case */

/* ---- extents -------------------------------------------------------------------------------- */

static const int64_t huge_extents[] = {
    ((int64_t)1 << 59) + 1, (int64_t)1 << 62, INT64_MAX, ((int64_t)1 << 32) + 1, (int64_t)1 << 31,
};

int64_t fz_huge_extent(fz_src *s) { return fz_pick(s, huge_extents, N_OF(huge_extents)); }

/* Maximum sizes shrink by half per retry of an over-budget case. */
int64_t fz_cap(int64_t max, int shrink)
{
    int64_t m = max >> (shrink < 8 ? shrink : 8);
    return m < 2 ? 2 : m;
}

/* An extent up to max: mostly small, with 0 and the sizes around vector and chunk widths. */
int64_t fz_extent(fz_src *s, int64_t max, int zero_weight)
{
    static const int64_t edges[] = {15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257};
    const int w[] = {30, 35, 15, 12, zero_weight};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: return 1;
    case 1: return fz_int(s, 2, max < 8 ? max : 8);
    case 2: return fz_int(s, 2, max);
    case 3: {
        int64_t e = fz_pick(s, edges, N_OF(edges));
        return e <= max ? e : fz_int(s, 1, max);
    }
    default: return 0;
    }
}

/* Tokens per sequence: decode-like 1, short prefills, the chunk edges, and longer runs. */
static int64_t tokens(fz_src *s, int64_t max)
{
    static const int64_t edges[] = {31, 32, 33, 16, 17, 47, 63, 64, 65, 96, 127, 128, 129};
    const int w[] = {25, 20, 12, 25, 10, 8};
    int64_t t;
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: t = 1; break;
    case 1: t = fz_int(s, 2, 8); break;
    case 2: t = fz_int(s, 9, 30); break;
    case 3: t = fz_pick(s, edges, N_OF(edges)); break;
    case 4: t = 0; break;
    default: t = fz_int(s, 100, 260); break;
    }
    return t <= max ? t : fz_int(s, 0, max);
}

/* A head dimension (K or V): the common sizes and their neighbours. */
int64_t fz_head_dim(fz_src *s, int shrink)
{
    static const int64_t edges[] = {16, 15, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129};
    const int w[] = {40, 25, 28, fz_hostile_weight(3)}; /* K, V >= 1 */
    int64_t d;
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: d = fz_int(s, 1, 8); break;
    case 1: d = fz_int(s, 9, 32); break;
    case 2: d = fz_pick(s, edges, N_OF(edges)); break;
    default: d = 0; break;
    }
    return d <= fz_cap(160, shrink) || d == 0 ? d : fz_int(s, 1, fz_cap(160, shrink));
}

/* ---- dtypes, descriptors, strides, shapes --------------------------------------------------- */

gdn_dtype fz_float_dtype(fz_src *s)
{
    static const int64_t dts[] = {GDN_F32, GDN_BF16, GDN_F16, GDN_F32};
    return (gdn_dtype)fz_pick(s, dts, N_OF(dts));
}

/* With pct% chance, a dtype the argument does not take (or no dtype at all). */
void fz_maybe_bad_dtype(fz_src *s, gdn_tensor *t, int pct)
{
    static const int64_t wrong[] = {GDN_I32, GDN_I64, GDN_U8, GDN_F32, GDN_BF16, GDN_F16, 6, 99,
                                    -1};
    if (fz_bad(s, pct))
        t->dtype = (gdn_dtype)fz_pick(s, wrong, N_OF(wrong));
}

/* Row-major strides, made by the public helpers (gdn_tensor_1d .. 4d), which are thus fuzzed
 * with every shape, huge extents on empty tensors included. */
gdn_tensor fz_make_desc(gdn_dtype dt, int ndim, const int64_t *shape)
{
    switch (ndim) {
    case 1: return gdn_tensor_1d(NULL, dt, shape[0]);
    case 2: return gdn_tensor_2d(NULL, dt, shape[0], shape[1]);
    case 3: return gdn_tensor_3d(NULL, dt, shape[0], shape[1], shape[2]);
    default: return gdn_tensor_4d(NULL, dt, shape[0], shape[1], shape[2], shape[3]);
    }
}

/* Legal variations first: outer strides padded (a view into a wider buffer), two outer dims'
 * strides swapped (a transposed view), an outer stride of 0 (broadcast). Then, with hostile%
 * chance, one that must be refused or that only an empty tensor can carry: a negative stride, a
 * non-contiguous last dim, a stride near INT64_MAX. */
void fz_vary_strides(fz_src *s, gdn_tensor *t, bool last_contiguous, int hostile)
{
    int n = t->ndim, last = n - 1;
    if (n < 1 || n > 4)
        return;
    if (fz_pct(s, 25)) {
        int64_t stride = t->stride[last];
        for (int d = last - 1; d >= 0; d--) {
            int64_t inner = t->shape[d + 1] > 0 ? t->shape[d + 1] : 1;
            if (__builtin_mul_overflow(stride, inner, &stride) ||
                __builtin_add_overflow(stride, fz_int(s, 0, 3), &stride))
                stride = INT64_MAX;
            t->stride[d] = stride;
        }
    }
    if (n >= 3 && fz_pct(s, 10)) {
        int d0 = (int)fz_int(s, 0, last - 1), d1 = (int)fz_int(s, 0, last - 1);
        int64_t tmp = t->stride[d0];
        t->stride[d0] = t->stride[d1];
        t->stride[d1] = tmp;
    }
    if (n >= 2 && fz_pct(s, 6))
        t->stride[fz_int(s, 0, last - 1)] = 0;
    if (!fz_bad(s, hostile))
        return;
    int d = (int)fz_int(s, 0, last);
    switch (fz_int(s, 0, 2)) {
    case 0: t->stride[d] = t->stride[d] ? -t->stride[d] : -1; break;
    case 1:
        if (last_contiguous) {
            static const int64_t bad_last[] = {2, 0, -1, 3};
            t->stride[last] = fz_pick(s, bad_last, N_OF(bad_last));
        }
        break;
    default:
        if (fz_numel(t) == 0) { /* reaches no byte whatever the stride */
            static const int64_t big[] = {(int64_t)1 << 62, INT64_MAX, (int64_t)1 << 31};
            t->stride[d] = fz_pick(s, big, N_OF(big));
        }
        break;
    }
}

static int64_t add_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

/* With pct% chance, one extent or the rank disagrees with what the op expects. */
void fz_vary_shape(fz_src *s, gdn_tensor *t, int pct)
{
    if (t->ndim < 1 || t->ndim > 4 || !fz_bad(s, pct))
        return;
    static const int64_t ranks[] = {0, 5, -1, 1, 2, 3, 4};
    int d = (int)fz_int(s, 0, t->ndim - 1);
    switch (fz_int(s, 0, 3)) {
    case 0: t->shape[d] = add_sat(t->shape[d], 1); break;
    case 1: t->shape[d] = t->shape[d] > 0 ? t->shape[d] - 1 : 0; break;
    case 2: t->shape[d] = -t->shape[d] - 1; break;
    default: t->ndim = (int32_t)fz_pick(s, ranks, N_OF(ranks)); break;
    }
}

/* ---- views -------------------------------------------------------------------------------- */

/* With a small chance in a hostile case, the view's data pointer is not aligned to its dtype's
 * size (which the header says is refused). */
static void maybe_misalign(fz_src *s, fz_view *v)
{
    size_t esz = fz_view_elem_size(v->t);
    if (esz > 1 && fz_bad(s, 2)) {
        v->misalign = (int)fz_int(s, 1, (int64_t)esz - 1);
        v->off += v->misalign;
    }
}

/* How an input's numbers are drawn: in a calm case always NICE; in a wild one, some inputs
 * WIDE or NONFINITE. */
static void choose_fill(fz_case *c, fz_src *s, fz_view *v)
{
    if (!c->wild_data)
        return;
    const int w[] = {60, 20, 20};
    v->fill = (fz_fill)fz_weighted(s, w, N_OF(w));
}

/* Registers an input (or a pool) that is present unless absent_pct strikes. */
fz_view *fz_input(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, fz_role role,
                  double lo, double hi, int absent_pct)
{
    if (fz_bad(s, absent_pct)) {
        t->data = NULL; /* absent: the descriptor's other fields stay, as garbage would */
        return NULL;
    }
    fz_view *v = fz_view_add(c, name, t, role);
    v->lo = lo;
    v->hi = hi;
    choose_fill(c, s, v);
    maybe_misalign(s, v);
    return v;
}

/* An output shaped like `like` (absent: [1]): a fresh buffer; the input `in` itself (in place,
 * valid where the op allows it); in's memory with one thing changed (dtype, a stride, a shifted
 * start), which must be refused; or absent. */
fz_view *fz_output(fz_case *c, fz_src *s, const char *name, gdn_tensor *out,
                   const gdn_tensor *like, fz_view *in, bool in_place_valid, gdn_dtype dt)
{
    const int w[] = {72, !in ? 0 : in_place_valid ? 15 : fz_hostile_weight(5),
                     in ? fz_hostile_weight(9) : 0, fz_hostile_weight(3)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 1: {
        *out = *in->t;
        fz_view *v = fz_view_alias(c, name, out, FZ_OUT, in, 0);
        v->partner = in_place_valid ? (int)(in - c->v) : -1;
        return v;
    }
    case 2: {
        *out = *in->t;
        int64_t shift = 0;
        int change = (int)fz_int(s, 0, 2);
        if (change == 1 && !(out->ndim >= 2 && out->ndim <= 4))
            change = 2; /* no outer stride to change */
        switch (change) {
        case 0: out->dtype = out->dtype == GDN_F32 ? GDN_BF16 : GDN_F32; break;
        case 1: {
            int64_t *st = &out->stride[fz_int(s, 0, out->ndim - 2)];
            *st = add_sat(*st, fz_int(s, 1, 3));
            break;
        }
        default: shift = fz_int(s, 1, 3) * (int64_t)fz_view_elem_size(out); break;
        }
        return fz_view_alias(c, name, out, FZ_OUT, in, shift);
    }
    case 3:
        *out = gdn_tensor_none();
        return NULL;
    default:
        if (like && like->ndim >= 1 && like->ndim <= 4)
            *out = fz_make_desc(dt, like->ndim, like->shape);
        else
            *out = fz_make_desc(dt, 1, (const int64_t[]){1});
        fz_vary_strides(s, out, true, 3);
        fz_vary_shape(s, out, 2);
        fz_maybe_bad_dtype(s, out, 2);
        fz_view *v = fz_view_add(c, name, out, FZ_OUT);
        maybe_misalign(s, v);
        return v;
    }
}

/* An index tensor holding n values (stored from c->ival), any strides. */
fz_view *fz_index_view(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, gdn_dtype dt,
                       const int64_t *vals, int64_t n)
{
    *t = fz_make_desc(dt, 1, (const int64_t[]){n});
    if (fz_pct(s, 15))
        t->stride[0] = fz_int(s, 0, 3);
    fz_vary_strides(s, t, false, 3);
    fz_vary_shape(s, t, 3);
    fz_view *v = fz_view_add(c, name, t, FZ_INDEX);
    maybe_misalign(s, v);
    int64_t keep = n < FZ_MAX_IVALS - c->nival ? n : FZ_MAX_IVALS - c->nival;
    v->ival = c->nival;
    v->nival = (int)keep;
    memcpy(&c->ival[c->nival], vals, (size_t)keep * sizeof *vals);
    c->nival += (int)keep;
    return v;
}

/* ---- sequences, pools and their index tensors ---------------------------------------------- */

/* An equal-length [B, T] batch or a varlen one (B = 1 and N lengths that sum to T), and a pool
 * of S slots with pool_pct% chance. */
void fz_draw_seqs(fz_src *s, fz_seqs *q, int64_t max_t, int pool_pct)
{
    memset(q, 0, sizeof *q);
    q->varlen = fz_pct(s, 25);
    if (q->varlen) {
        q->N = fz_pct(s, 10) ? fz_int(s, 9, FZ_MAX_SEQS) : fz_int(s, 0, 6);
        for (int64_t n = 0; n < q->N; n++) {
            q->len[n] = q->N > 8 && fz_pct(s, 70) ? 0 : tokens(s, max_t / (q->N > 4 ? 4 : 1));
            q->T += q->len[n];
        }
        static const int64_t batches[] = {1, 0, 2};
        q->B = fz_bad(s, 4) ? fz_pick(s, batches, 3) : 1;
    } else {
        q->B = fz_extent(s, 4, 10);
        q->T = tokens(s, max_t);
        q->N = q->B;
    }
    q->pool = fz_pct(s, pool_pct);
    if (q->pool) {
        q->S = q->N + fz_int(s, 0, 2);
        if (fz_bad(s, 5))
            q->S = q->N > 0 ? q->N - 1 : 0;
    }
}

/* Empty but enormous: a zero B or T and the other far beyond memory. Index tensors of N = B
 * entries cannot exist then, so a pool keeps none or holds no slots. */
void fz_make_huge_batch(fz_src *s, fz_seqs *q)
{
    q->varlen = false;
    if (fz_pct(s, 50)) {
        q->T = 0;
        q->B = fz_pct(s, 70) ? fz_huge_extent(s) : fz_int(s, 0, 3);
    } else {
        q->B = 0;
        q->T = fz_huge_extent(s);
    }
    q->N = q->B;
    q->S = q->pool ? fz_int(s, 0, 2) : 0;
}

void fz_slot_values(fz_src *s, const fz_seqs *q, int64_t *v)
{
    int64_t perm[FZ_MAX_SEQS + 4];
    int64_t S = q->S < FZ_MAX_SEQS + 4 ? q->S : FZ_MAX_SEQS + 4;
    for (int64_t i = 0; i < S; i++)
        perm[i] = i;
    for (int64_t i = S - 1; i > 0; i--) { /* shuffle */
        int64_t j = fz_int(s, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    static const int64_t skips[] = {-1, -1, -2, INT32_MIN, INT64_MIN};
    for (int64_t n = 0; n < q->N && n < FZ_MAX_SEQS; n++)
        v[n] = n < S && !fz_pct(s, 20) ? perm[n] : fz_pick(s, skips, N_OF(skips));
    int64_t N = q->N < FZ_MAX_SEQS ? q->N : FZ_MAX_SEQS;
    if (N > 0 && fz_bad(s, 8)) { /* one bad slot */
        int64_t n = fz_int(s, 0, N - 1);
        static const int64_t over[] = {0, INT64_MAX, (int64_t)1 << 32};
        switch (fz_int(s, 0, 3)) {
        case 0: v[n] = q->S; break;
        case 1: v[n] = q->S + fz_int(s, 1, 100); break;
        case 2: v[n] = v[fz_int(s, 0, N - 1)]; break; /* a duplicate, or itself */
        default: v[n] = fz_pick(s, over, N_OF(over)); break;
        }
    }
}

static void cu_values(fz_src *s, const fz_seqs *q, int64_t *v)
{
    int64_t N = q->varlen ? q->N : 3; /* without a varlen batch: a few stray offsets */
    v[0] = 0;
    for (int64_t n = 0; n < N; n++)
        v[n + 1] = v[n] + q->len[n];
    if (fz_bad(s, 10)) { /* broken offsets */
        int64_t i = fz_int(s, 0, N);
        static const int64_t wild[] = {-1, 1, INT32_MAX, INT64_MAX, INT64_MIN, (int64_t)1 << 40};
        switch (fz_int(s, 0, 2)) {
        case 0: v[i] += fz_pct(s, 50) ? 1 : -1; break;
        case 1: v[i] = fz_pick(s, wild, N_OF(wild)); break;
        default: v[N] = (int64_t)((uint64_t)q->T + 1); break; /* wraps at INT64_MAX */
        }
    }
}

/* cu_seqlens, state_slots and has_initial_state for q, mostly consistent with it. */
void fz_index_tensors(fz_case *c, fz_src *s, const fz_seqs *q, gdn_tensor *cu,
                      gdn_tensor *slots, gdn_tensor *init)
{
    static const int64_t idx_dtypes[] = {GDN_I32, GDN_I64, GDN_U8, GDN_F32};
    static const int64_t flag_dtypes[] = {GDN_U8, GDN_I32, GDN_I64, GDN_F32};
    int64_t vals[FZ_MAX_SEQS + 1];
    /* index tensors have one entry per sequence: a batch of 2^62 can have none */
    int64_t n = q->N <= FZ_MAX_SEQS ? q->N : fz_int(s, 0, 3);
    if (q->varlen || fz_bad(s, 3)) {
        cu_values(s, q, vals);
        gdn_dtype dt = (gdn_dtype)fz_pick(s, idx_dtypes, fz_bad(s, 3) ? 4 : 2);
        fz_index_view(c, s, "cu_seqlens", cu, dt, vals, q->varlen ? n + 1 : fz_int(s, 1, 3));
    }
    if ((q->pool && fz_pct(s, 60)) || fz_bad(s, 3)) {
        fz_slot_values(s, q, vals);
        gdn_dtype dt = (gdn_dtype)fz_pick(s, idx_dtypes, fz_bad(s, 3) ? 4 : 2);
        fz_index_view(c, s, "state_slots", slots, dt, vals, n);
    }
    if ((q->pool && fz_pct(s, 40)) || fz_bad(s, 3)) {
        static const int64_t flags[] = {1, 0, 1, 0, 255, -7, 2};
        for (int64_t i = 0; i < n; i++)
            vals[i] = fz_pick(s, flags, N_OF(flags));
        gdn_dtype dt = (gdn_dtype)fz_pick(s, flag_dtypes, fz_bad(s, 3) ? 4 : 2);
        fz_index_view(c, s, "has_initial_state", init, dt, vals, n);
    }
}

/* ---- options ------------------------------------------------------------------------------- */

/* An enum value: mostly one of n valid ones, sometimes outside the enum. */
int fz_enum_value(fz_src *s, int n)
{
    const int64_t wrong[] = {n, -1, n + 1, 99, INT32_MIN, INT32_MAX};
    if (fz_bad(s, 5))
        return (int)fz_pick(s, wrong, N_OF(wrong));
    return (int)fz_int(s, 0, n - 1);
}

/* A non-negative epsilon: the convention, zero, tiny or huge, or one that must be refused. */
float fz_eps_value(fz_case *c, fz_src *s)
{
    static const float odd[] = {0.0f, 1e-12f, 1.0f, 1e30f, 1e-45f, -0.0f};
    static const float wrong[] = {-1e-6f, NAN, INFINITY, -INFINITY};
    const int w[] = {60, 25, fz_hostile_weight(15)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: return 1e-6f;
    case 1: return odd[fz_int(s, 0, N_OF(odd) - 1)];
    default: c->scalar_wild = true; return wrong[fz_int(s, 0, N_OF(wrong) - 1)];
    }
}

void fz_gating_params(fz_case *c, fz_src *s, gdn_gating_params *gp, int64_t HV,
                      const char *A_name, const char *dtb_name)
{
    *gp = gdn_gating_default_params();
    gp->a_form = (gdn_a_form)fz_enum_value(s, 2);
    gp->A = fz_make_desc(fz_float_dtype(s), 1, (const int64_t[]){HV});
    fz_vary_strides(s, &gp->A, false, 3);
    if (fz_pct(s, 20))
        gp->A.stride[0] = fz_int(s, 0, 3);
    fz_vary_shape(s, &gp->A, 3);
    fz_maybe_bad_dtype(s, &gp->A, 2);
    /* A_LOG: decay rate exp(A); A_NEG_EXP: A itself, negative for a decay */
    bool neg_exp = gp->a_form == GDN_A_NEG_EXP;
    fz_input(c, s, A_name, &gp->A, FZ_IN, neg_exp ? -3.0 : -2.0, neg_exp ? -0.01 : 1.0, 2);
    if (fz_pct(s, 70)) {
        gp->dt_bias = fz_make_desc(fz_float_dtype(s), 1, (const int64_t[]){HV});
        fz_vary_strides(s, &gp->dt_bias, false, 3);
        fz_vary_shape(s, &gp->dt_bias, 3);
        fz_input(c, s, dtb_name, &gp->dt_bias, FZ_IN, -1.0, 1.0, 0);
    }
    static const float thr_odd[] = {1.0f, 1e-3f, 30.0f, 1e30f};
    static const float thr_bad[] = {0.0f, -1.0f, NAN, INFINITY};
    const int w[] = {80, 12, fz_hostile_weight(8)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: break;
    case 1: gp->softplus_threshold = thr_odd[fz_int(s, 0, 3)]; break;
    default: gp->softplus_threshold = thr_bad[fz_int(s, 0, 3)]; break;
    }
    static const int64_t neg[] = {0, 1, -5};
    gp->allow_neg_eigval = (int32_t)fz_pick(s, neg, fz_pct(s, 40) ? 3 : 1);
}
