/* The argument generator: for each entry point, a call that is mostly valid (so that the kernels
 * run and are compared with the reference) with hostile edges mixed in: extents of 0 and 1, odd
 * and chunk-unaligned sizes, empty batches and varlen batches without sequences, extents far
 * beyond memory on tensors that have a zero extent (they reach no byte, so this is honest),
 * padded, broadcast (stride 0), permuted, negative and non-contiguous strides, outputs that alias
 * inputs exactly or partly, wrong dtypes and ranks, absent tensors and NULL pointers, random
 * index tensors (negative, out of range and duplicate slots; valid and broken cu_seqlens), out of
 * range enums and non-finite scalars.
 *
 * Choices are made through fz_src: each helper lists its plainest option first, so an exhausted
 * libFuzzer input degrades to a small valid call. */
#include "fuzz_internal.h"

#include <math.h>
#include <string.h>

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { MAX_SEQS = 48 };

/* Half the cases are calm: every argument is meant to be valid, so the kernels run and are
 * compared. In a hostile case each argument may also be broken, with the chance given at each
 * call of bad(). */
static bool g_hostile;

static bool bad(fz_src *s, int pct) { return g_hostile && fz_pct(s, pct); }

/* A weight that only counts in hostile cases. */
static int hostile_weight(int w) { return g_hostile ? w : 0; }

/* ---- extents -------------------------------------------------------------------------------- */

static const int64_t huge_extents[] = {
    ((int64_t)1 << 59) + 1, (int64_t)1 << 62, INT64_MAX, ((int64_t)1 << 32) + 1, (int64_t)1 << 31,
};

static int64_t huge_extent(fz_src *s) { return fz_pick(s, huge_extents, N_OF(huge_extents)); }

/* Maximum sizes shrink by half per retry of an over-budget case. */
static int64_t cap(int64_t max, int shrink)
{
    int64_t m = max >> (shrink < 8 ? shrink : 8);
    return m < 2 ? 2 : m;
}

/* An extent up to max: mostly small, with 0 and the sizes around vector and chunk widths. */
static int64_t extent(fz_src *s, int64_t max, int zero_weight)
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
static int64_t head_dim(fz_src *s, int shrink)
{
    static const int64_t edges[] = {16, 15, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129};
    const int w[] = {40, 25, 28, hostile_weight(3)}; /* K, V >= 1 */
    int64_t d;
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: d = fz_int(s, 1, 8); break;
    case 1: d = fz_int(s, 9, 32); break;
    case 2: d = fz_pick(s, edges, N_OF(edges)); break;
    default: d = 0; break;
    }
    return d <= cap(160, shrink) || d == 0 ? d : fz_int(s, 1, cap(160, shrink));
}

/* ---- dtypes, descriptors, strides, shapes --------------------------------------------------- */

static gdn_dtype float_dtype(fz_src *s)
{
    static const int64_t dts[] = {GDN_F32, GDN_BF16, GDN_F16, GDN_F32};
    return (gdn_dtype)fz_pick(s, dts, N_OF(dts));
}

/* With pct% chance, a dtype the argument does not take (or no dtype at all). */
static void maybe_bad_dtype(fz_src *s, gdn_tensor *t, int pct)
{
    static const int64_t wrong[] = {GDN_I32, GDN_I64, GDN_U8, GDN_F32, GDN_BF16, GDN_F16, 6, 99,
                                    -1};
    if (bad(s, pct))
        t->dtype = (gdn_dtype)fz_pick(s, wrong, N_OF(wrong));
}

/* Row-major strides, made by the public helpers (gdn_tensor_1d .. 4d), which are thus fuzzed
 * with every shape, huge extents on empty tensors included. */
static gdn_tensor make_desc(gdn_dtype dt, int ndim, const int64_t *shape)
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
static void vary_strides(fz_src *s, gdn_tensor *t, bool last_contiguous, int hostile)
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
    if (!bad(s, hostile))
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
static void vary_shape(fz_src *s, gdn_tensor *t, int pct)
{
    if (t->ndim < 1 || t->ndim > 4 || !bad(s, pct))
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
    if (esz > 1 && bad(s, 2)) {
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
static fz_view *input(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, fz_role role,
                      double lo, double hi, int absent_pct)
{
    if (bad(s, absent_pct)) {
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
static fz_view *output(fz_case *c, fz_src *s, const char *name, gdn_tensor *out,
                       const gdn_tensor *like, fz_view *in, bool in_place_valid, gdn_dtype dt)
{
    const int w[] = {72, !in ? 0 : in_place_valid ? 15 : hostile_weight(5),
                     in ? hostile_weight(9) : 0, hostile_weight(3)};
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
            *out = make_desc(dt, like->ndim, like->shape);
        else
            *out = make_desc(dt, 1, (const int64_t[]){1});
        vary_strides(s, out, true, 3);
        vary_shape(s, out, 2);
        maybe_bad_dtype(s, out, 2);
        fz_view *v = fz_view_add(c, name, out, FZ_OUT);
        maybe_misalign(s, v);
        return v;
    }
}

/* An index tensor holding n values (stored from c->ival), any strides. */
static fz_view *index_view(fz_case *c, fz_src *s, const char *name, gdn_tensor *t, gdn_dtype dt,
                           const int64_t *vals, int64_t n)
{
    *t = make_desc(dt, 1, (const int64_t[]){n});
    if (fz_pct(s, 15))
        t->stride[0] = fz_int(s, 0, 3);
    vary_strides(s, t, false, 3);
    vary_shape(s, t, 3);
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

typedef struct seqs {
    int64_t B, T, N, S;
    bool varlen, pool;
    int64_t len[MAX_SEQS];
} seqs;

/* An equal-length [B, T] batch or a varlen one (B = 1 and N lengths that sum to T), and a pool
 * of S slots with pool_pct% chance. */
static void draw_seqs(fz_src *s, seqs *q, int64_t max_t, int pool_pct)
{
    memset(q, 0, sizeof *q);
    q->varlen = fz_pct(s, 25);
    if (q->varlen) {
        q->N = fz_pct(s, 10) ? fz_int(s, 9, MAX_SEQS) : fz_int(s, 0, 6);
        for (int64_t n = 0; n < q->N; n++) {
            q->len[n] = q->N > 8 && fz_pct(s, 70) ? 0 : tokens(s, max_t / (q->N > 4 ? 4 : 1));
            q->T += q->len[n];
        }
        static const int64_t batches[] = {1, 0, 2};
        q->B = bad(s, 4) ? fz_pick(s, batches, 3) : 1;
    } else {
        q->B = extent(s, 4, 10);
        q->T = tokens(s, max_t);
        q->N = q->B;
    }
    q->pool = fz_pct(s, pool_pct);
    if (q->pool) {
        q->S = q->N + fz_int(s, 0, 2);
        if (bad(s, 5))
            q->S = q->N > 0 ? q->N - 1 : 0;
    }
}

/* Empty but enormous: a zero B or T and the other far beyond memory. Index tensors of N = B
 * entries cannot exist then, so a pool keeps none or holds no slots. */
static void make_huge_batch(fz_src *s, seqs *q)
{
    q->varlen = false;
    if (fz_pct(s, 50)) {
        q->T = 0;
        q->B = fz_pct(s, 70) ? huge_extent(s) : fz_int(s, 0, 3);
    } else {
        q->B = 0;
        q->T = huge_extent(s);
    }
    q->N = q->B;
    q->S = q->pool ? fz_int(s, 0, 2) : 0;
}

static void slot_values(fz_src *s, const seqs *q, int64_t *v)
{
    int64_t perm[MAX_SEQS + 4];
    int64_t S = q->S < MAX_SEQS + 4 ? q->S : MAX_SEQS + 4;
    for (int64_t i = 0; i < S; i++)
        perm[i] = i;
    for (int64_t i = S - 1; i > 0; i--) { /* shuffle */
        int64_t j = fz_int(s, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    static const int64_t skips[] = {-1, -1, -2, INT32_MIN, INT64_MIN};
    for (int64_t n = 0; n < q->N && n < MAX_SEQS; n++)
        v[n] = n < S && !fz_pct(s, 20) ? perm[n] : fz_pick(s, skips, N_OF(skips));
    int64_t N = q->N < MAX_SEQS ? q->N : MAX_SEQS;
    if (N > 0 && bad(s, 8)) { /* one bad slot */
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

static void cu_values(fz_src *s, const seqs *q, int64_t *v)
{
    int64_t N = q->varlen ? q->N : 3; /* without a varlen batch: a few stray offsets */
    v[0] = 0;
    for (int64_t n = 0; n < N; n++)
        v[n + 1] = v[n] + q->len[n];
    if (bad(s, 10)) { /* broken offsets */
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
static void index_tensors(fz_case *c, fz_src *s, const seqs *q, gdn_tensor *cu, gdn_tensor *slots,
                          gdn_tensor *init)
{
    static const int64_t idx_dtypes[] = {GDN_I32, GDN_I64, GDN_U8, GDN_F32};
    static const int64_t flag_dtypes[] = {GDN_U8, GDN_I32, GDN_I64, GDN_F32};
    int64_t vals[MAX_SEQS + 1];
    /* index tensors have one entry per sequence: a batch of 2^62 can have none */
    int64_t n = q->N <= MAX_SEQS ? q->N : fz_int(s, 0, 3);
    if (q->varlen || bad(s, 3)) {
        cu_values(s, q, vals);
        gdn_dtype dt = (gdn_dtype)fz_pick(s, idx_dtypes, bad(s, 3) ? 4 : 2);
        index_view(c, s, "cu_seqlens", cu, dt, vals, q->varlen ? n + 1 : fz_int(s, 1, 3));
    }
    if ((q->pool && fz_pct(s, 60)) || bad(s, 3)) {
        slot_values(s, q, vals);
        gdn_dtype dt = (gdn_dtype)fz_pick(s, idx_dtypes, bad(s, 3) ? 4 : 2);
        index_view(c, s, "state_slots", slots, dt, vals, n);
    }
    if ((q->pool && fz_pct(s, 40)) || bad(s, 3)) {
        static const int64_t flags[] = {1, 0, 1, 0, 255, -7, 2};
        for (int64_t i = 0; i < n; i++)
            vals[i] = fz_pick(s, flags, N_OF(flags));
        gdn_dtype dt = (gdn_dtype)fz_pick(s, flag_dtypes, bad(s, 3) ? 4 : 2);
        index_view(c, s, "has_initial_state", init, dt, vals, n);
    }
}

/* ---- options ------------------------------------------------------------------------------- */

/* An enum value: mostly one of n valid ones, sometimes outside the enum. */
static int enum_value(fz_src *s, int n)
{
    const int64_t wrong[] = {n, -1, n + 1, 99, INT32_MIN, INT32_MAX};
    if (bad(s, 5))
        return (int)fz_pick(s, wrong, N_OF(wrong));
    return (int)fz_int(s, 0, n - 1);
}

/* A non-negative epsilon: the convention, zero, tiny or huge, or one that must be refused. */
static float eps_value(fz_case *c, fz_src *s)
{
    static const float odd[] = {0.0f, 1e-12f, 1.0f, 1e30f, 1e-45f, -0.0f};
    static const float wrong[] = {-1e-6f, NAN, INFINITY, -INFINITY};
    const int w[] = {60, 25, hostile_weight(15)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: return 1e-6f;
    case 1: return odd[fz_int(s, 0, N_OF(odd) - 1)];
    default: c->scalar_wild = true; return wrong[fz_int(s, 0, N_OF(wrong) - 1)];
    }
}

static void gating_params(fz_case *c, fz_src *s, gdn_gating_params *gp, int64_t HV,
                          const char *A_name, const char *dtb_name)
{
    *gp = gdn_gating_default_params();
    gp->a_form = (gdn_a_form)enum_value(s, 2);
    gp->A = make_desc(float_dtype(s), 1, (const int64_t[]){HV});
    vary_strides(s, &gp->A, false, 3);
    if (fz_pct(s, 20))
        gp->A.stride[0] = fz_int(s, 0, 3);
    vary_shape(s, &gp->A, 3);
    maybe_bad_dtype(s, &gp->A, 2);
    /* A_LOG: decay rate exp(A); A_NEG_EXP: A itself, negative for a decay */
    bool neg_exp = gp->a_form == GDN_A_NEG_EXP;
    input(c, s, A_name, &gp->A, FZ_IN, neg_exp ? -3.0 : -2.0, neg_exp ? -0.01 : 1.0, 2);
    if (fz_pct(s, 70)) {
        gp->dt_bias = make_desc(float_dtype(s), 1, (const int64_t[]){HV});
        vary_strides(s, &gp->dt_bias, false, 3);
        vary_shape(s, &gp->dt_bias, 3);
        input(c, s, dtb_name, &gp->dt_bias, FZ_IN, -1.0, 1.0, 0);
    }
    static const float thr_odd[] = {1.0f, 1e-3f, 30.0f, 1e30f};
    static const float thr_bad[] = {0.0f, -1.0f, NAN, INFINITY};
    const int w[] = {80, 12, hostile_weight(8)};
    switch (fz_weighted(s, w, N_OF(w))) {
    case 0: break;
    case 1: gp->softplus_threshold = thr_odd[fz_int(s, 0, 3)]; break;
    default: gp->softplus_threshold = thr_bad[fz_int(s, 0, 3)]; break;
    }
    static const int64_t neg[] = {0, 1, -5};
    gp->allow_neg_eigval = (int32_t)fz_pick(s, neg, fz_pct(s, 40) ? 3 : 1);
}

/* ---- conv1d --------------------------------------------------------------------------------- */

static int64_t conv_width(fz_src *s)
{
    static const int64_t wrong[] = {0, 1, 17, -1, 100};
    if (bad(s, 4))
        return fz_pick(s, wrong, N_OF(wrong));
    return fz_pct(s, 70) ? fz_int(s, 2, 5) : fz_int(s, 2, GDN_CONV_MAX_WIDTH);
}

static void conv_weights(fz_case *c, fz_src *s, gdn_tensor *weight, gdn_tensor *bias, int64_t C,
                         int64_t W)
{
    *weight = make_desc(float_dtype(s), 2, (const int64_t[]){C, W});
    vary_strides(s, weight, true, 3);
    vary_shape(s, weight, 2);
    maybe_bad_dtype(s, weight, 2);
    input(c, s, "weight", weight, FZ_IN, -1.0, 1.0, 2);
    if (fz_pct(s, 60)) {
        *bias = make_desc(float_dtype(s), 1, (const int64_t[]){C});
        vary_strides(s, bias, false, 3);
        vary_shape(s, bias, 2);
        maybe_bad_dtype(s, bias, 2);
        input(c, s, "bias", bias, FZ_IN, -1.0, 1.0, 0);
    }
}

/* A [S, C, W-1] pool of x's dtype or f32: as laid out, or a [S, W-1, C] buffer seen through
 * transposed strides (as vLLM keeps it), or padded. */
static void conv_state(fz_case *c, fz_src *s, gdn_tensor *st, gdn_dtype x_dt, int64_t S,
                       int64_t C, int64_t W)
{
    *st = make_desc(fz_pct(s, 50) ? GDN_F32 : x_dt, 3, (const int64_t[]){S, C, W - 1});
    if (fz_pct(s, 30)) {
        st->stride[2] = C > 0 ? C : 1;
        st->stride[1] = 1;
    } else {
        vary_strides(s, st, false, 3);
    }
    vary_shape(s, st, 2);
    maybe_bad_dtype(s, st, 2);
    input(c, s, "conv_state", st, FZ_STATE, -2.0, 2.0, 0);
}

static void gen_conv1d(fz_case *c, fz_src *s, int shrink)
{
    gdn_conv1d_args *a = &c->conv;
    *a = gdn_conv1d_default_args();
    seqs q;
    draw_seqs(s, &q, cap(260, shrink), 55);
    int64_t C = extent(s, cap(160, shrink), hostile_weight(2)), W = conv_width(s); /* C >= 1 */
    if (c->huge)
        make_huge_batch(s, &q);
    gdn_dtype dx = float_dtype(s);
    a->x = make_desc(dx, 3, (const int64_t[]){q.B, q.T, C});
    vary_strides(s, &a->x, true, 3);
    vary_shape(s, &a->x, 2);
    maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2);
    conv_weights(c, s, &a->weight, &a->bias, C, W);
    output(c, s, "out", &a->out, &a->x, vx, true, float_dtype(s));
    if (q.pool)
        conv_state(c, s, &a->conv_state, dx, q.S, C, W);
    index_tensors(c, s, &q, &a->cu_seqlens, &a->state_slots, &a->has_initial_state);
    a->activation = (gdn_activation)enum_value(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_conv1d_update(fz_case *c, fz_src *s, int shrink)
{
    gdn_conv1d_update_args *a = &c->upd;
    *a = gdn_conv1d_update_default_args();
    seqs q;
    memset(&q, 0, sizeof q);
    q.B = q.N = extent(s, cap(12, shrink), 10);
    q.T = 1;
    q.pool = true;
    q.S = q.N + fz_int(s, 0, 2);
    if (bad(s, 5))
        q.S = q.N > 0 ? q.N - 1 : 0;
    int64_t C = extent(s, cap(200, shrink), hostile_weight(2)), W = conv_width(s);
    if (c->huge) { /* [N, C] is empty only through C = 0, which is refused */
        q.B = q.N = huge_extent(s);
        C = 0;
        q.S = 0;
    }
    gdn_dtype dx = float_dtype(s);
    a->x = make_desc(dx, 2, (const int64_t[]){q.N, C});
    vary_strides(s, &a->x, true, 3);
    vary_shape(s, &a->x, 2);
    maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2);
    conv_weights(c, s, &a->weight, &a->bias, C, W);
    output(c, s, "out", &a->out, &a->x, vx, true, float_dtype(s));
    if (!bad(s, 4))
        conv_state(c, s, &a->conv_state, dx, q.S, C, W);
    if (fz_pct(s, 50)) {
        int64_t vals[MAX_SEQS + 1];
        int64_t n = q.N <= MAX_SEQS ? q.N : fz_int(s, 0, 3);
        slot_values(s, &q, vals);
        index_view(c, s, "state_slots", &a->state_slots, fz_pct(s, 50) ? GDN_I32 : GDN_I64, vals,
                   n);
    }
    a->activation = (gdn_activation)enum_value(s, 2);
    c->tol_f32 = 1e-5;
}

/* ---- row-wise ops: gating and the norms ----------------------------------------------------- */

/* [..., D] of rank 1-4: the leading extents small (or, huge, one zero and others enormous). */
static int rows_shape(fz_case *c, fz_src *s, int64_t *shape, int64_t max_d, int shrink)
{
    int rank = (int)fz_int(s, 1, 4);
    for (int d = 0; d < rank - 1; d++)
        shape[d] = extent(s, cap(d == rank - 2 ? 40 : 6, shrink), 8);
    shape[rank - 1] = fz_pct(s, 2) ? 4097 : extent(s, cap(max_d, shrink), hostile_weight(2));
    if (c->huge && rank >= 2) {
        int zero = (int)fz_int(s, 0, rank - 2);
        for (int d = 0; d < rank - 1; d++)
            shape[d] = d == zero ? 0 : fz_pct(s, 60) ? huge_extent(s) : shape[d];
    }
    return rank;
}

static void gen_gating(fz_case *c, fz_src *s, int shrink)
{
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 72, shrink);
    int64_t HV = shape[rank - 1];
    gdn_dtype da = float_dtype(s);
    fz_view *va, *vb = NULL;
    c->a = make_desc(da, rank, shape);
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
        vary_strides(s, &c->a, true, 3);
        vary_shape(s, &c->a, 2);
        maybe_bad_dtype(s, &c->a, 2);
        va = input(c, s, "a", &c->a, FZ_IN, -5.0, 5.0, 2);
        if (fz_pct(s, 80)) {
            c->b = make_desc(float_dtype(s), rank, shape);
            vary_strides(s, &c->b, true, 3);
            vary_shape(s, &c->b, 2);
            maybe_bad_dtype(s, &c->b, 2);
            vb = input(c, s, "b", &c->b, FZ_IN, -5.0, 5.0, 0);
        }
    }
    output(c, s, "g_out", &c->g_out, &c->a, va, true, float_dtype(s));
    if (vb || bad(s, 3)) /* without b, beta_out must be refused */
        output(c, s, "beta_out", &c->beta_out, &c->a, vb, true, float_dtype(s));
    gating_params(c, s, &c->gp, HV, "params.A", "params.dt_bias");
    c->null_args = bad(s, 2);
    c->null_a = bad(s, 2);
    c->null_b = bad(s, 2);
    c->null_gout = bad(s, 2);
    c->null_beta_out = bad(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_l2norm(fz_case *c, fz_src *s, int shrink)
{
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 300, shrink);
    c->x = make_desc(float_dtype(s), rank, shape);
    vary_strides(s, &c->x, true, 3);
    vary_shape(s, &c->x, 2);
    maybe_bad_dtype(s, &c->x, 2);
    fz_view *vx = input(c, s, "x", &c->x, FZ_IN, -2.0, 2.0, 2);
    if (vx)
        vx->wide_ok = true; /* out = x / |x| is the same for x scaled by any factor */
    output(c, s, "out", &c->out, &c->x, vx, true, float_dtype(s));
    c->eps = eps_value(c, s);
    c->null_a = bad(s, 2);
    c->null_gout = bad(s, 2);
    c->tol_f32 = 1e-5;
}

static void gen_rmsnorm(fz_case *c, fz_src *s, int shrink)
{
    gdn_rmsnorm_args *a = &c->rms;
    *a = gdn_rmsnorm_default_args();
    int64_t shape[4];
    int rank = rows_shape(c, s, shape, 300, shrink);
    a->x = make_desc(float_dtype(s), rank, shape);
    vary_strides(s, &a->x, true, 3);
    vary_shape(s, &a->x, 2);
    maybe_bad_dtype(s, &a->x, 2);
    fz_view *vx = input(c, s, "x", &a->x, FZ_IN, -2.0, 2.0, 2), *vz = NULL;
    if (vx)
        vx->wide_ok = true; /* normalised: the scale of x cancels */
    if (fz_pct(s, 70)) {
        a->z = make_desc(float_dtype(s), rank, shape);
        vary_strides(s, &a->z, true, 3);
        vary_shape(s, &a->z, 2);
        maybe_bad_dtype(s, &a->z, 2);
        vz = input(c, s, "z", &a->z, FZ_IN, -3.0, 3.0, 0);
    }
    if (fz_pct(s, 70)) {
        a->weight = make_desc(float_dtype(s), 1, &shape[rank - 1]);
        if (fz_pct(s, 20))
            a->weight.stride[0] = fz_int(s, 0, 3);
        vary_strides(s, &a->weight, false, 3);
        vary_shape(s, &a->weight, 2);
        maybe_bad_dtype(s, &a->weight, 2);
        input(c, s, "weight", &a->weight, FZ_IN, -1.5, 1.5, 0);
    }
    fz_view *in = vz && fz_pct(s, 30) ? vz : vx;
    output(c, s, "out", &a->out, &a->x, in, true, float_dtype(s));
    a->eps = eps_value(c, s);
    static const int64_t flags[] = {0, 1, -3};
    a->weight_offset = (int32_t)fz_pick(s, flags, 3);
    a->norm_before_gate = (int32_t)fz_pick(s, (const int64_t[]){1, 0, 7}, 3);
    c->null_args = bad(s, 2);
    c->tol_f32 = 1e-5;
}

/* ---- the delta rule ------------------------------------------------------------------------- */

typedef struct delta_dims {
    seqs q;
    int64_t H, HV, K, V;
} delta_dims;

/* Empty but enormous: T = 0 (or B = 0) with K, V, H, HV or the batch far beyond memory. A
 * pool then has no slots (S = 0): every sequence must be padding or there must be none. */
static void make_huge_delta(fz_src *s, delta_dims *d)
{
    make_huge_batch(s, &d->q);
    if (d->q.pool)
        d->q.S = 0;
    switch (fz_int(s, 0, 3)) {
    case 0: d->K = huge_extent(s); break;
    case 1: d->V = huge_extent(s); break;
    case 2: d->H = d->HV = huge_extent(s); break;
    default: d->HV = huge_extent(s); break; /* a multiple of H or not */
    }
    if (fz_pct(s, 30))
        d->K = huge_extent(s);
}

/* q, k and v: separate tensors, or strided views of one fused [B, T, 2*H*K + HV*V] buffer. */
static void delta_qkv(fz_case *c, fz_src *s, const delta_dims *d, gdn_dtype dt)
{
    gdn_delta_rule_args *a = &c->dr;
    const seqs *q = &d->q;
    double kr = a->qk_l2norm ? 1.0 : 1.0 / sqrt((double)(d->K > 0 ? d->K : 1));
    a->q = make_desc(dt, 4, (const int64_t[]){q->B, q->T, d->H, d->K});
    a->k = a->q;
    a->v = make_desc(dt, 4, (const int64_t[]){q->B, q->T, d->HV, d->V});
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
        vary_strides(s, ts[i], true, 3);
        vary_shape(s, ts[i], 2);
        maybe_bad_dtype(s, ts[i], 2);
        input(c, s, names[i], ts[i], FZ_IN, i == 1 ? -kr : -1.0, i == 1 ? kr : 1.0, 2);
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
        a->g = make_desc(float_dtype(s), 3, shape);
        vary_strides(s, &a->g, true, 3);
        vary_shape(s, &a->g, 2);
        maybe_bad_dtype(s, &a->g, 2);
        double lo = gate ? -3.0 : fz_pct(s, 15) ? -12.0 : -2.0;
        input(c, s, "g", &a->g, FZ_IN, lo, gate ? 3.0 : 0.0, gate ? 2 : 0);
    }
    a->beta = make_desc(float_dtype(s), 3, shape);
    vary_strides(s, &a->beta, true, 3);
    vary_shape(s, &a->beta, 2);
    maybe_bad_dtype(s, &a->beta, 2);
    input(c, s, "beta", &a->beta, FZ_IN, gate ? -4.0 : 0.0, gate ? 4.0 : 1.0, 2);
    if (gate)
        gating_params(c, s, &a->gating, d->HV, "gating.A", "gating.dt_bias");
}

/* The pool: [S, HV, K, V] (KV) or [S, HV, V, K] (VK), f32 or bf16, any strides (a KV buffer
 * seen as VK through swapped strides, padded, permuted). */
static void delta_state(fz_case *c, fz_src *s, const delta_dims *d)
{
    gdn_delta_rule_args *a = &c->dr;
    bool kv = a->state_layout != GDN_STATE_VK;
    if (bad(s, 3))
        kv = !kv;
    int64_t inner0 = kv ? d->K : d->V, inner1 = kv ? d->V : d->K;
    a->state = make_desc(fz_pct(s, 75) ? GDN_F32 : GDN_BF16, 4,
                         (const int64_t[]){d->q.S, d->HV, inner0, inner1});
    if (fz_pct(s, 15)) { /* the other layout's buffer through transposed strides */
        a->state.stride[3] = inner0 > 0 ? inner0 : 1;
        a->state.stride[2] = 1;
    } else {
        vary_strides(s, &a->state, false, 3);
    }
    vary_shape(s, &a->state, 2);
    maybe_bad_dtype(s, &a->state, 2);
    input(c, s, "state", &a->state, FZ_STATE, -1.0, 1.0, 0);
}

static float scale_value(fz_case *c, fz_src *s)
{
    static const float odd[] = {NAN, INFINITY, -INFINITY, 1e30f, -0.0f, 1e-38f, 1e-45f};
    const int w[] = {50, 35, hostile_weight(15)};
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
    a->gva = (gdn_gva)enum_value(s, 2);
    const int aw[] = {50, 20, 25, hostile_weight(5)};
    static const int64_t bad_algo[] = {3, -1, 100};
    int algo = fz_weighted(s, aw, N_OF(aw));
    a->algorithm = algo < 3 ? (gdn_algorithm)algo : (gdn_algorithm)fz_pick(s, bad_algo, 3);
    static const int64_t chunks[] = {16, 32, 64, 128};
    static const int64_t bad_chunks[] = {1, 8, 48, 256, -16, INT32_MAX};
    const int cw[] = {50, 42, hostile_weight(8)};
    switch (fz_weighted(s, cw, N_OF(cw))) {
    case 0: a->chunk_size = 0; break;
    case 1: a->chunk_size = (int32_t)fz_pick(s, chunks, 4); break;
    default: a->chunk_size = (int32_t)fz_pick(s, bad_chunks, N_OF(bad_chunks)); break;
    }
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
    draw_seqs(s, &d.q, cap(260, shrink), 60);
    d.H = extent(s, 4, hostile_weight(2)); /* H >= 1 */
    d.HV = d.H * extent(s, 4, 0);
    if (d.H > 1 && bad(s, 3))
        d.HV += 1; /* not a multiple of H */
    d.K = head_dim(s, shrink);
    d.V = head_dim(s, shrink);
    if (c->huge)
        make_huge_delta(s, &d);
    static const int64_t l2[] = {1, 1, -1, 7};
    a->qk_l2norm = fz_pct(s, 50) ? (int32_t)fz_pick(s, l2, 4) : 0;
    static const int64_t gate[] = {1, 1, -3};
    a->gate_in_kernel = fz_pct(s, 20) ? (int32_t)fz_pick(s, gate, 3) : 0;
    a->state_layout = (gdn_state_layout)enum_value(s, 2);
    delta_qkv(c, s, &d, float_dtype(s));
    delta_gates(c, s, &d);
    /* out must not overlap q, k or v: an alias of any of them must be refused */
    fz_view *alias = NULL;
    for (int i = 0; i < c->nv; i++)
        if (c->v[i].t == &a->v || c->v[i].t == &a->q)
            alias = bad(s, 5) ? &c->v[i] : alias;
    output(c, s, "out", &a->out, &a->v, alias, false, float_dtype(s));
    if (d.q.pool)
        delta_state(c, s, &d);
    index_tensors(c, s, &d.q, &a->cu_seqlens, &a->state_slots, &a->has_initial_state);
    delta_options(c, s);
    delta_workspace(c, s);
    c->null_args = bad(s, 2);
    c->null_bytes = bad(s, 4);
    c->tol_f32 = 1e-4;
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
    g_hostile = fz_pct(s, 50);
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
