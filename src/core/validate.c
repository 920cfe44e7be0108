/* Argument validation for every op (SPEC section 9): runs before any backend writes anything,
 * and names the offending argument and the expected value in the context's error message. */
#include "gdn_internal.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define M_F32 (1u << GDN_F32)
#define M_BF16 (1u << GDN_BF16)
#define M_F16 (1u << GDN_F16)
#define M_FLOAT (M_F32 | M_BF16 | M_F16)
#define M_INDEX ((1u << GDN_I32) | (1u << GDN_I64))
#define M_FLAG ((1u << GDN_U8) | (1u << GDN_I32))

/* The entry point being validated, for messages. */
typedef struct vctx {
    gdn_context *ctx;
    const char *fn;
} vctx;

#define FAIL(v, st, ...) gdn_fail((v)->ctx, (st), (v)->fn, __VA_ARGS__)

static const char *mask_names(unsigned mask)
{
    if (mask == M_FLOAT) return "f32, bf16 or f16";
    if (mask == (M_F32 | M_BF16)) return "f32 or bf16";
    if (mask == M_INDEX) return "i32 or i64";
    if (mask == M_FLAG) return "u8 or i32";
    return "another dtype";
}

static bool present(const gdn_tensor *t) { return t && t->data; }

/* The bytes from a tensor's first element past its farthest one (0 for an empty tensor); false
 * when that does not fit in a ptrdiff_t. Extents and strides are non-negative here. */
static bool span_bytes(const gdn_tensor *t, int64_t *bytes)
{
    *bytes = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0)
            return true;
    int64_t last = 0, step;
    for (int d = 0; d < t->ndim; d++)
        if (!gdn_i64_mul(t->shape[d] - 1, t->stride[d], &step) ||
            __builtin_add_overflow(last, step, &last))
            return false;
    return gdn_i64_mul(last + 1, (int64_t)gdn_dtype_size(t->dtype), bytes) &&
           *bytes <= PTRDIFF_MAX;
}

/* Rank, dtype, non-negative extents and strides, and (for activations) a contiguous last dim. */
static gdn_status check_tensor(const vctx *v, const char *name, const gdn_tensor *t, int min_rank,
                               int max_rank, unsigned dtypes, bool last_contiguous)
{
    if (!present(t))
        return FAIL(v, GDN_ERR_NULL, "%s is absent (data NULL), expected a tensor", name);
    if (t->ndim < min_rank || t->ndim > max_rank) {
        if (min_rank == max_rank)
            return FAIL(v, GDN_ERR_SHAPE, "%s.ndim is %d, expected %d", name, (int)t->ndim,
                        min_rank);
        return FAIL(v, GDN_ERR_SHAPE, "%s.ndim is %d, expected %d to %d", name, (int)t->ndim,
                    min_rank, max_rank);
    }
    if ((unsigned)t->dtype > GDN_U8 || !(dtypes & (1u << t->dtype)))
        return FAIL(v, GDN_ERR_DTYPE, "%s.dtype is %s, expected %s", name,
                    gdn_dtype_name(t->dtype), mask_names(dtypes));
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return FAIL(v, GDN_ERR_SHAPE, "%s.shape[%d] is %lld, expected >= 0", name, d,
                        (long long)t->shape[d]);
        if (t->stride[d] < 0)
            return FAIL(v, GDN_ERR_STRIDE, "%s.stride[%d] is %lld, expected >= 0", name, d,
                        (long long)t->stride[d]);
    }
    int last = t->ndim - 1;
    if (last_contiguous && t->shape[last] > 1 && t->stride[last] != 1)
        return FAIL(v, GDN_ERR_STRIDE,
                    "%s.stride[%d] is %lld, expected 1 (the last dimension must be contiguous)",
                    name, last, (long long)t->stride[last]);
    size_t esz = gdn_dtype_size(t->dtype);
    if ((uintptr_t)t->data % esz)
        return FAIL(v, GDN_ERR_VALUE, "%s.data is at %p, expected an address aligned to %zu "
                    "bytes (the size of %s)", name, t->data, esz, gdn_dtype_name(t->dtype));
    int64_t bytes;
    if (!span_bytes(t, &bytes) || (uintptr_t)bytes > UINTPTR_MAX - (uintptr_t)t->data)
        return FAIL(v, GDN_ERR_VALUE, "%s's shape and strides reach beyond the address space, "
                    "expected a tensor that fits in memory", name);
    return GDN_OK;
}

/* A tensor that an op writes, or an index tensor: no two elements may share an address (a
 * broadcast output would be written by several threads at once, and a broadcast index tensor
 * could declare far more sequences than memory holds). Sufficient test: ordered by stride, each
 * dimension's stride steps past everything the smaller ones reach. */
static gdn_status check_no_self_overlap(const vctx *v, const char *name, const gdn_tensor *t)
{
    int order[GDN_MAX_DIMS], n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            return GDN_OK; /* no elements */
        if (t->shape[d] > 1)
            order[n++] = d;
    }
    for (int i = 1; i < n; i++) /* insertion sort by stride, at most four dims */
        for (int j = i; j > 0 && t->stride[order[j]] < t->stride[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t reach = 0; /* the farthest element offset of the dims so far; fits: span checked */
    for (int i = 0; i < n; i++) {
        int d = order[i];
        if (t->stride[d] <= reach)
            return FAIL(v, GDN_ERR_STRIDE, "%s.stride[%d] is %lld, which makes elements of %s "
                        "share memory, expected non-overlapping strides (it is written)%s", name,
                        d, (long long)t->stride[d], name,
                        t->stride[d] == 0 ? ": a broadcast (stride 0) is for inputs only" : "");
        reach += (t->shape[d] - 1) * t->stride[d];
    }
    return GDN_OK;
}

static gdn_status check_dim(const vctx *v, const char *name, const gdn_tensor *t, int d,
                            int64_t expected, const char *what)
{
    if (t->shape[d] != expected)
        return FAIL(v, GDN_ERR_SHAPE, "%s.shape[%d] is %lld, expected %lld (%s)", name, d,
                    (long long)t->shape[d], (long long)expected, what);
    return GDN_OK;
}

static gdn_status check_positive(const vctx *v, const char *name, const gdn_tensor *t, int d,
                                 const char *what)
{
    if (t->shape[d] < 1)
        return FAIL(v, GDN_ERR_SHAPE, "%s.shape[%d] (%s) is %lld, expected >= 1", name, d, what,
                    (long long)t->shape[d]);
    return GDN_OK;
}

static gdn_status check_head_dim(const vctx *v, const char *name, const gdn_tensor *t, int d,
                                 const char *what)
{
    if (t->shape[d] > GDN_MAX_HEAD_DIM)
        return FAIL(v, GDN_ERR_VALUE, "%s.shape[%d] (%s) is %lld, expected at most %d "
                    "(GDN_MAX_HEAD_DIM)", name, d, what, (long long)t->shape[d], GDN_MAX_HEAD_DIM);
    return GDN_OK;
}

static gdn_status check_same_shape(const vctx *v, const char *name, const gdn_tensor *t,
                                   const char *ref_name, const gdn_tensor *ref)
{
    if (t->ndim != ref->ndim)
        return FAIL(v, GDN_ERR_SHAPE, "%s.ndim is %d, expected %d (%s.ndim)", name, (int)t->ndim,
                    (int)ref->ndim, ref_name);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != ref->shape[d])
            return FAIL(v, GDN_ERR_SHAPE, "%s.shape[%d] is %lld, expected %lld (%s.shape[%d])",
                        name, d, (long long)t->shape[d], (long long)ref->shape[d], ref_name, d);
    return GDN_OK;
}

static gdn_status check_same_dtype(const vctx *v, const char *name, const gdn_tensor *t,
                                   const char *ref_name, const gdn_tensor *ref)
{
    if (t->dtype != ref->dtype)
        return FAIL(v, GDN_ERR_DTYPE, "%s.dtype is %s, expected %s (%s.dtype)", name,
                    gdn_dtype_name(t->dtype), gdn_dtype_name(ref->dtype), ref_name);
    return GDN_OK;
}

/* The bytes [lo, hi) a tensor's elements can touch (empty for an empty tensor). */
static void byte_range(const gdn_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t bytes;
    if (!span_bytes(t, &bytes)) /* check_tensor refused it; treat it as reaching everything */
        bytes = PTRDIFF_MAX;
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)bytes;
}

/* Two views with the same shape and strides whose rows (last dim contiguous) sit at different
 * offsets of a common row pitch R, like a and b split out of a fused [T, 2*HV] buffer: every row
 * of either starts at its base modulo R, so they are disjoint when the two D-wide residue
 * intervals modulo R do not meet. */
static bool interleaved_disjoint(const gdn_tensor *a, const gdn_tensor *b)
{
    int n = a->ndim;
    if (n < 2 || b->ndim != n || a->dtype != b->dtype)
        return false;
    for (int d = 0; d < n; d++)
        if (a->shape[d] != b->shape[d] || a->stride[d] != b->stride[d])
            return false;
    int64_t R = a->stride[n - 2], D = a->shape[n - 1];
    if (R <= 0 || (D > 1 && a->stride[n - 1] != 1))
        return false;
    for (int d = 0; d < n - 1; d++)
        if (a->shape[d] > 1 && a->stride[d] % R)
            return false;
    ptrdiff_t bytes = (const char *)b->data - (const char *)a->data;
    ptrdiff_t esz = (ptrdiff_t)gdn_dtype_size(a->dtype);
    if (bytes % esz)
        return false;
    int64_t m = ((int64_t)(bytes / esz) % R + R) % R;
    return m >= D && R - m >= D;
}

static bool overlap(const gdn_tensor *a, const gdn_tensor *b)
{
    if (interleaved_disjoint(a, b))
        return false;
    uintptr_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* An output and an input must not overlap (ops whose outputs are computed from many inputs). */
static gdn_status check_disjoint(const vctx *v, const char *out_name, const gdn_tensor *out,
                                 const char *in_name, const gdn_tensor *in)
{
    if (present(in) && overlap(out, in))
        return FAIL(v, GDN_ERR_VALUE, "%s overlaps %s in memory, expected separate buffers",
                    out_name, in_name);
    return GDN_OK;
}

/* An output may share memory with an input only as the very same view (in-place op). */
static gdn_status check_alias(const vctx *v, const char *out_name, const gdn_tensor *out,
                              const char *in_name, const gdn_tensor *in)
{
    if (!present(in))
        return GDN_OK;
    if (out->data != in->data)
        return check_disjoint(v, out_name, out, in_name, in);
    if (out->dtype != in->dtype)
        return FAIL(v, GDN_ERR_DTYPE, "%s aliases %s with dtype %s, expected %s (in place)",
                    out_name, in_name, gdn_dtype_name(out->dtype), gdn_dtype_name(in->dtype));
    for (int d = 0; d < out->ndim; d++)
        if (out->stride[d] != in->stride[d])
            return FAIL(v, GDN_ERR_STRIDE,
                        "%s aliases %s with stride[%d] %lld, expected %lld (in place)", out_name,
                        in_name, d, (long long)out->stride[d], (long long)in->stride[d]);
    return GDN_OK;
}

typedef struct named_tensor {
    const char *name;
    const gdn_tensor *t;
} named_tensor;

#define NAMED(args, field) {#field, &(args)->field}

/* A written tensor must not overlap itself nor any of the n others (absent ones are skipped):
 * what an op reads or writes elsewhere must not change under it. */
static gdn_status check_written(const vctx *v, const char *name, const gdn_tensor *out,
                                const named_tensor *others, int n)
{
    GDN_TRY(check_no_self_overlap(v, name, out));
    for (int i = 0; i < n; i++)
        if (others[i].t != out)
            GDN_TRY(check_disjoint(v, name, out, others[i].name, others[i].t));
    return GDN_OK;
}

static gdn_status check_finite(const vctx *v, const char *name, float x, bool allow_negative)
{
    if (!isfinite(x) || (!allow_negative && x < 0.0f))
        return FAIL(v, GDN_ERR_VALUE, "%s is %g, expected a finite number%s", name, (double)x,
                    allow_negative ? "" : " >= 0");
    return GDN_OK;
}

static gdn_status check_activation(const vctx *v, gdn_activation act)
{
    if ((unsigned)act > GDN_ACT_NONE)
        return FAIL(v, GDN_ERR_VALUE,
                    "activation is %d, expected GDN_ACT_SILU (0) or GDN_ACT_NONE (1)", (int)act);
    return GDN_OK;
}

/* Are index tensors host memory we may read during validation? */
static bool host_indices(const gdn_context *ctx) { return !ctx->ops->device_pointers; }

/* cu_seqlens: N+1 offsets from 0 to T, non-decreasing. */
static gdn_status check_cu_seqlens(const vctx *v, const gdn_tensor *cu, int64_t T, bool host,
                                   int64_t *max_len)
{
    GDN_TRY(check_tensor(v, "cu_seqlens", cu, 1, 1, M_INDEX, false));
    GDN_TRY(check_no_self_overlap(v, "cu_seqlens", cu));
    int64_t n1 = cu->shape[0];
    if (n1 < 1)
        return FAIL(v, GDN_ERR_SHAPE, "cu_seqlens.shape[0] is %lld, expected >= 1 (N+1 offsets)",
                    (long long)n1);
    *max_len = T;
    if (!host)
        return GDN_OK;
    if (gdn_index_at(cu, 0) != 0)
        return FAIL(v, GDN_ERR_VALUE, "cu_seqlens[0] is %lld, expected 0",
                    (long long)gdn_index_at(cu, 0));
    int64_t longest = 0;
    for (int64_t i = 1; i < n1; i++) {
        int64_t prev = gdn_index_at(cu, i - 1), cur = gdn_index_at(cu, i);
        if (cur < prev)
            return FAIL(v, GDN_ERR_VALUE,
                        "cu_seqlens[%lld] is %lld, expected >= cu_seqlens[%lld] = %lld "
                        "(non-decreasing)", (long long)i, (long long)cur, (long long)(i - 1),
                        (long long)prev);
        if (cur - prev > longest)
            longest = cur - prev;
    }
    if (gdn_index_at(cu, n1 - 1) != T)
        return FAIL(v, GDN_ERR_VALUE, "cu_seqlens[%lld] is %lld, expected %lld (total tokens)",
                    (long long)(n1 - 1), (long long)gdn_index_at(cu, n1 - 1), (long long)T);
    *max_len = longest;
    return GDN_OK;
}

typedef struct slot_use {
    int64_t slot, seq;
} slot_use;

static int by_slot_then_seq(const void *x, const void *y)
{
    const slot_use *a = x, *b = y;
    if (a->slot != b->slot)
        return a->slot < b->slot ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* The first repeated slot as the pair (i, j), i < j, of the sequences that name it. */
static gdn_status duplicate_slot(const vctx *v, const gdn_tensor *slots, int64_t i, int64_t j)
{
    return FAIL(v, GDN_ERR_VALUE, "state_slots[%lld] and state_slots[%lld] are both %lld, "
                "expected distinct slots", (long long)i, (long long)j,
                (long long)gdn_index_at(slots, j));
}

/* No two sequences name one slot, in one pass: a bitmap of the pool's slots on the stack for
 * pools of up to SLOTS_IN_BITMAP slots (every engine's pool we know of), so the check allocates
 * nothing; for larger pools, sorted (slot, sequence) pairs (O(N log N)), on the stack up to
 * SLOTS_ON_STACK sequences, else in N pairs allocated for the check. */
#define SLOTS_IN_BITMAP 65536
#define SLOTS_ON_STACK 256
static gdn_status check_distinct_slots(const vctx *v, const gdn_tensor *slots, int64_t N,
                                       int64_t S)
{
    if (S <= SLOTS_IN_BITMAP) {
        uint64_t seen[SLOTS_IN_BITMAP / 64];
        memset(seen, 0, (size_t)(S + 63) / 64 * sizeof seen[0]);
        for (int64_t j = 0; j < N; j++) {
            const int64_t s = gdn_index_at(slots, j);
            if (s < 0)
                continue;
            if (seen[s / 64] >> (s % 64) & 1) { /* the earlier sequence: found only on error */
                int64_t i = 0;
                while (gdn_index_at(slots, i) != s)
                    i++;
                return duplicate_slot(v, slots, i, j);
            }
            seen[s / 64] |= (uint64_t)1 << (s % 64);
        }
        return GDN_OK;
    }
    slot_use stack[SLOTS_ON_STACK], *use = stack;
    if (N > SLOTS_ON_STACK && !(use = malloc((size_t)N * sizeof *use)))
        return FAIL(v, GDN_ERR_NO_MEMORY, "cannot allocate %lld bytes to check state_slots for "
                    "duplicates", (long long)N * (long long)sizeof *use);
    int64_t n = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t s = gdn_index_at(slots, i);
        if (s >= 0)
            use[n++] = (slot_use){s, i};
    }
    qsort(use, (size_t)n, sizeof *use, by_slot_then_seq);
    gdn_status st = GDN_OK;
    for (int64_t i = 1; i < n && st == GDN_OK; i++)
        if (use[i].slot == use[i - 1].slot)
            st = duplicate_slot(v, slots, use[i - 1].seq, use[i].seq);
    if (use != stack)
        free(use);
    return st;
}

/* Slots in [.., S): negative ones are padding; non-negative ones must be distinct, since two
 * sequences writing one slot would race. */
static gdn_status check_slots(const vctx *v, const gdn_tensor *slots, int64_t N, int64_t S,
                              bool host, int64_t *active)
{
    GDN_TRY(check_tensor(v, "state_slots", slots, 1, 1, M_INDEX, false));
    GDN_TRY(check_no_self_overlap(v, "state_slots", slots));
    GDN_TRY(check_dim(v, "state_slots", slots, 0, N, "one slot per sequence"));
    *active = N;
    if (!host)
        return GDN_OK; /* device indices: every sequence may run */
    *active = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t s = gdn_index_at(slots, i);
        if (s >= S)
            return FAIL(v, GDN_ERR_VALUE,
                        "state_slots[%lld] is %lld, expected < %lld (slots in the pool) or < 0 "
                        "(skip)", (long long)i, (long long)s, (long long)S);
        *active += s >= 0;
    }
    return check_distinct_slots(v, slots, N, S);
}

/* Splits a batch into sequences and checks the pool indirection. `pool` names the pool
 * argument for messages; S is its slot count (0 when absent). */
static gdn_status resolve_seqs(const vctx *v, int64_t B, int64_t T, const gdn_tensor *cu,
                               const gdn_tensor *slots, const gdn_tensor *has_init,
                               const char *pool, bool has_pool, int64_t S, gdn_seqs *seqs,
                               int64_t *max_len)
{
    bool host = host_indices(v->ctx);
    memset(seqs, 0, sizeof *seqs);
    seqs->T = T;
    if (present(cu)) {
        if (B != 1)
            return FAIL(v, GDN_ERR_SHAPE, "batch is %lld with cu_seqlens, expected 1 (varlen "
                        "tokens are packed into one row)", (long long)B);
        GDN_TRY(check_cu_seqlens(v, cu, T, host, max_len));
        seqs->cu_seqlens = cu;
        seqs->count = cu->shape[0] - 1;
    } else {
        seqs->count = B;
        *max_len = T;
    }
    int64_t N = seqs->count;
    seqs->active = N;
    if (present(slots)) {
        if (!has_pool)
            return FAIL(v, GDN_ERR_VALUE, "state_slots is given but %s is absent, expected both",
                        pool);
        GDN_TRY(check_slots(v, slots, N, S, host, &seqs->active));
        seqs->slots = slots;
    } else if (has_pool && N > S) {
        return FAIL(v, GDN_ERR_SHAPE,
                    "%s.shape[0] is %lld, expected >= %lld (one slot per sequence when "
                    "state_slots is absent)", pool, (long long)S, (long long)N);
    }
    if (present(has_init)) {
        if (!has_pool)
            return FAIL(v, GDN_ERR_VALUE,
                        "has_initial_state is given but %s is absent, expected both", pool);
        GDN_TRY(check_tensor(v, "has_initial_state", has_init, 1, 1, M_FLAG, false));
        GDN_TRY(check_no_self_overlap(v, "has_initial_state", has_init));
        GDN_TRY(check_dim(v, "has_initial_state", has_init, 0, N, "one flag per sequence"));
        seqs->has_init = has_init;
    }
    return GDN_OK;
}

/* ---- conv1d -------------------------------------------------------------------------------- */

static gdn_status check_conv_weights(const vctx *v, const gdn_tensor *weight,
                                     const gdn_tensor *bias, int64_t C, int64_t *W)
{
    GDN_TRY(check_tensor(v, "weight", weight, 2, 2, M_FLOAT, true));
    GDN_TRY(check_dim(v, "weight", weight, 0, C, "channels C = x.shape[-1]"));
    *W = weight->shape[1];
    if (*W < 2 || *W > GDN_CONV_MAX_WIDTH)
        return FAIL(v, GDN_ERR_SHAPE, "weight.shape[1] (width W) is %lld, expected 2 to %d",
                    (long long)*W, GDN_CONV_MAX_WIDTH);
    if (present(bias)) {
        GDN_TRY(check_tensor(v, "bias", bias, 1, 1, M_FLOAT, false));
        GDN_TRY(check_dim(v, "bias", bias, 0, C, "channels C"));
    }
    return GDN_OK;
}

static gdn_status check_conv_state(const vctx *v, const gdn_tensor *st, const gdn_tensor *x,
                                   int64_t C, int64_t W)
{
    GDN_TRY(check_tensor(v, "conv_state", st, 3, 3, M_FLOAT, false));
    if (st->dtype != GDN_F32 && st->dtype != x->dtype)
        return FAIL(v, GDN_ERR_DTYPE, "conv_state.dtype is %s, expected f32%s%s%s",
                    gdn_dtype_name(st->dtype), x->dtype == GDN_F32 ? "" : " or ",
                    x->dtype == GDN_F32 ? "" : gdn_dtype_name(x->dtype),
                    x->dtype == GDN_F32 ? "" : " (x.dtype)");
    GDN_TRY(check_dim(v, "conv_state", st, 1, C, "channels C"));
    GDN_TRY(check_dim(v, "conv_state", st, 2, W - 1, "kernel width W - 1"));
    return GDN_OK;
}

gdn_status gdn_validate_conv1d(gdn_context *ctx, const gdn_conv1d_args *a, gdn_conv1d_problem *p)
{
    vctx v = {ctx, "gdn_conv1d"};
    if (!a)
        return FAIL(&v, GDN_ERR_NULL, "args is NULL, expected a gdn_conv1d_args");
    memset(p, 0, sizeof *p);
    p->a = *a;
    a = &p->a;
    GDN_TRY(check_tensor(&v, "x", &a->x, 3, 3, M_FLOAT, true));
    p->C = a->x.shape[2];
    GDN_TRY(check_positive(&v, "x", &a->x, 2, "channels C"));
    GDN_TRY(check_conv_weights(&v, &a->weight, &a->bias, p->C, &p->W));
    GDN_TRY(check_tensor(&v, "out", &a->out, 3, 3, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_alias(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_activation(&v, a->activation));
    p->has_state = present(&a->conv_state);
    int64_t S = 0, max_len;
    if (p->has_state) {
        GDN_TRY(check_conv_state(&v, &a->conv_state, &a->x, p->C, p->W));
        S = a->conv_state.shape[0];
    }
    GDN_TRY(resolve_seqs(&v, a->x.shape[0], a->x.shape[1], &a->cu_seqlens, &a->state_slots,
                     &a->has_initial_state, "conv_state", p->has_state, S, &p->seqs, &max_len));
    const named_tensor others[] = {NAMED(a, weight), NAMED(a, bias), NAMED(a, state_slots),
                                   NAMED(a, has_initial_state), NAMED(a, cu_seqlens),
                                   NAMED(a, x), NAMED(a, out)};
    GDN_TRY(check_written(&v, "out", &a->out, others, 5)); /* out may be x itself: checked above */
    if (p->has_state)
        GDN_TRY(check_written(&v, "conv_state", &a->conv_state, others, 7));
    return GDN_OK;
}

gdn_status gdn_validate_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *a,
                                      gdn_conv1d_update_problem *p)
{
    vctx v = {ctx, "gdn_conv1d_update"};
    if (!a)
        return FAIL(&v, GDN_ERR_NULL, "args is NULL, expected a gdn_conv1d_update_args");
    memset(p, 0, sizeof *p);
    p->a = *a;
    a = &p->a;
    GDN_TRY(check_tensor(&v, "x", &a->x, 2, 2, M_FLOAT, true));
    p->C = a->x.shape[1];
    GDN_TRY(check_positive(&v, "x", &a->x, 1, "channels C"));
    GDN_TRY(check_conv_weights(&v, &a->weight, &a->bias, p->C, &p->W));
    GDN_TRY(check_tensor(&v, "out", &a->out, 2, 2, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_alias(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_activation(&v, a->activation));
    GDN_TRY(check_conv_state(&v, &a->conv_state, &a->x, p->C, p->W));
    int64_t max_len;
    GDN_TRY(resolve_seqs(&v, a->x.shape[0], 1, NULL, &a->state_slots, NULL, "conv_state", true,
                     a->conv_state.shape[0], &p->seqs, &max_len));
    const named_tensor others[] = {NAMED(a, weight), NAMED(a, bias), NAMED(a, state_slots),
                                   NAMED(a, x), NAMED(a, out)};
    GDN_TRY(check_written(&v, "out", &a->out, others, 3)); /* out may be x itself: checked above */
    return check_written(&v, "conv_state", &a->conv_state, others, 5);
}

/* ---- gating -------------------------------------------------------------------------------- */

static gdn_status check_gating_params(const vctx *v, const gdn_gating_params *gp, int64_t HV,
                                      const char *prefix)
{
    char name[64];
    snprintf(name, sizeof name, "%sA", prefix);
    GDN_TRY(check_tensor(v, name, &gp->A, 1, 1, M_FLOAT, false));
    GDN_TRY(check_dim(v, name, &gp->A, 0, HV, "value heads HV"));
    if (present(&gp->dt_bias)) {
        snprintf(name, sizeof name, "%sdt_bias", prefix);
        GDN_TRY(check_tensor(v, name, &gp->dt_bias, 1, 1, M_FLOAT, false));
        GDN_TRY(check_dim(v, name, &gp->dt_bias, 0, HV, "value heads HV"));
    }
    if ((unsigned)gp->a_form > GDN_A_NEG_EXP)
        return FAIL(v, GDN_ERR_VALUE, "%sa_form is %d, expected GDN_A_LOG (0) or GDN_A_NEG_EXP "
                    "(1)", prefix, (int)gp->a_form);
    if (!isfinite(gp->softplus_threshold) || gp->softplus_threshold <= 0.0f)
        return FAIL(v, GDN_ERR_VALUE, "%ssoftplus_threshold is %g, expected a finite number > 0 "
                    "(default 20)", prefix, (double)gp->softplus_threshold);
    return GDN_OK;
}

gdn_status gdn_validate_gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                               const gdn_gating_params *params, const gdn_tensor *g_out,
                               const gdn_tensor *beta_out, gdn_gating_problem *p)
{
    vctx v = {ctx, "gdn_gating"};
    memset(p, 0, sizeof *p);
    if (!params)
        return FAIL(&v, GDN_ERR_NULL, "params is NULL, expected a gdn_gating_params");
    GDN_TRY(check_tensor(&v, "a", a, 1, GDN_MAX_DIMS, M_FLOAT, true));
    int last = a->ndim - 1;
    p->HV = a->shape[last];
    GDN_TRY(check_positive(&v, "a", a, last, "value heads HV"));
    GDN_TRY(check_tensor(&v, "g_out", g_out, 1, GDN_MAX_DIMS, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "g_out", g_out, "a", a));
    GDN_TRY(check_alias(&v, "g_out", g_out, "a", a));
    if (present(b) != present(beta_out))
        return FAIL(&v, GDN_ERR_NULL, "%s is absent but %s is given, expected both or neither",
                    present(b) ? "beta_out" : "b", present(b) ? "b" : "beta_out");
    if (present(b)) {
        GDN_TRY(check_tensor(&v, "b", b, 1, GDN_MAX_DIMS, M_FLOAT, true));
        GDN_TRY(check_same_shape(&v, "b", b, "a", a));
        GDN_TRY(check_tensor(&v, "beta_out", beta_out, 1, GDN_MAX_DIMS, M_FLOAT, true));
        GDN_TRY(check_same_shape(&v, "beta_out", beta_out, "a", a));
        GDN_TRY(check_alias(&v, "beta_out", beta_out, "b", b));
        /* in place only as g_out = a and beta_out = b: a row's other output must not land on
         * an input that is still to be read */
        GDN_TRY(check_disjoint(&v, "beta_out", beta_out, "a", a));
        GDN_TRY(check_disjoint(&v, "g_out", g_out, "b", b));
        p->b = *b;
        p->beta_out = *beta_out;
    }
    GDN_TRY(check_gating_params(&v, params, p->HV, "params."));
    const named_tensor others[] = {{"params.A", &params->A}, {"params.dt_bias", &params->dt_bias},
                                   {"beta_out", beta_out}};
    GDN_TRY(check_written(&v, "g_out", g_out, others, present(b) ? 3 : 2));
    if (present(b))
        GDN_TRY(check_written(&v, "beta_out", beta_out, others, 2));
    p->a = *a;
    p->g_out = *g_out;
    p->p = *params;
    p->rows = gdn_row_count(a);
    return GDN_OK;
}

/* ---- norms --------------------------------------------------------------------------------- */

gdn_status gdn_validate_l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out,
                               float eps, gdn_l2norm_problem *p)
{
    vctx v = {ctx, "gdn_l2norm"};
    memset(p, 0, sizeof *p);
    GDN_TRY(check_tensor(&v, "x", x, 1, GDN_MAX_DIMS, M_FLOAT, true));
    GDN_TRY(check_positive(&v, "x", x, x->ndim - 1, "normalised dimension"));
    GDN_TRY(check_tensor(&v, "out", out, 1, GDN_MAX_DIMS, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "out", out, "x", x));
    GDN_TRY(check_alias(&v, "out", out, "x", x));
    GDN_TRY(check_no_self_overlap(&v, "out", out));
    GDN_TRY(check_finite(&v, "eps", eps, false));
    p->x = *x;
    p->out = *out;
    p->rows = gdn_row_count(x);
    p->D = x->shape[x->ndim - 1];
    p->eps = eps;
    return GDN_OK;
}

gdn_status gdn_validate_rmsnorm(gdn_context *ctx, const gdn_rmsnorm_args *a,
                                gdn_rmsnorm_problem *p)
{
    vctx v = {ctx, "gdn_rmsnorm_gated"};
    if (!a)
        return FAIL(&v, GDN_ERR_NULL, "args is NULL, expected a gdn_rmsnorm_args");
    memset(p, 0, sizeof *p);
    p->a = *a;
    a = &p->a;
    GDN_TRY(check_tensor(&v, "x", &a->x, 1, GDN_MAX_DIMS, M_FLOAT, true));
    int last = a->x.ndim - 1;
    p->D = a->x.shape[last];
    GDN_TRY(check_positive(&v, "x", &a->x, last, "normalised dimension"));
    if (present(&a->z)) {
        GDN_TRY(check_tensor(&v, "z", &a->z, 1, GDN_MAX_DIMS, M_FLOAT, true));
        GDN_TRY(check_same_shape(&v, "z", &a->z, "x", &a->x));
    }
    if (present(&a->weight)) {
        GDN_TRY(check_tensor(&v, "weight", &a->weight, 1, 1, M_FLOAT, false));
        GDN_TRY(check_dim(&v, "weight", &a->weight, 0, p->D, "x.shape[-1]"));
    }
    GDN_TRY(check_tensor(&v, "out", &a->out, 1, GDN_MAX_DIMS, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_alias(&v, "out", &a->out, "x", &a->x));
    GDN_TRY(check_alias(&v, "out", &a->out, "z", &a->z));
    const named_tensor others[] = {NAMED(a, weight)};
    GDN_TRY(check_written(&v, "out", &a->out, others, 1));
    GDN_TRY(check_finite(&v, "eps", a->eps, false));
    p->rows = gdn_row_count(&a->x);
    return GDN_OK;
}

/* ---- delta rule ---------------------------------------------------------------------------- */

static gdn_status check_delta_options(const vctx *v, const gdn_delta_rule_args *a)
{
    if ((unsigned)a->state_layout > GDN_STATE_VK)
        return FAIL(v, GDN_ERR_VALUE,
                    "state_layout is %d, expected GDN_STATE_KV (0) or GDN_STATE_VK (1)",
                    (int)a->state_layout);
    if ((unsigned)a->gva > GDN_GVA_TILED)
        return FAIL(v, GDN_ERR_VALUE, "gva is %d, expected GDN_GVA_BLOCK (0) or GDN_GVA_TILED (1)",
                    (int)a->gva);
    if ((unsigned)a->algorithm > GDN_ALGO_CHUNKED)
        return FAIL(v, GDN_ERR_VALUE, "algorithm is %d, expected GDN_ALGO_AUTO (0), "
                    "GDN_ALGO_RECURRENT (1) or GDN_ALGO_CHUNKED (2)", (int)a->algorithm);
    if ((unsigned)a->precision > GDN_PRECISION_HIGH)
        return FAIL(v, GDN_ERR_VALUE, "precision is %d, expected GDN_PRECISION_AUTO (0), "
                    "GDN_PRECISION_FAST (1) or GDN_PRECISION_HIGH (2)", (int)a->precision);
    int c = a->chunk_size;
    if (c != 0 && c != 16 && c != 32 && c != 64 && c != 128)
        return FAIL(v, GDN_ERR_VALUE,
                    "chunk_size is %d, expected 16, 32, 64 or 128 (0 = the backend's choice)", c);
    return check_finite(v, "scale", a->scale, true);
}

static gdn_status check_delta_state(const vctx *v, const gdn_delta_rule_args *a, int64_t HV,
                                    int64_t K, int64_t V)
{
    const gdn_tensor *s = &a->state;
    GDN_TRY(check_tensor(v, "state", s, 4, 4, M_F32 | M_BF16, false));
    GDN_TRY(check_dim(v, "state", s, 1, HV, "value heads HV"));
    bool kv = a->state_layout == GDN_STATE_KV;
    GDN_TRY(check_dim(v, "state", s, 2, kv ? K : V, kv ? "K, layout KV" : "V, layout VK"));
    GDN_TRY(check_dim(v, "state", s, 3, kv ? V : K, kv ? "V, layout KV" : "K, layout VK"));
    return GDN_OK;
}

/* g and beta: one scalar per (batch, token, value head). */
static gdn_status check_per_token(const vctx *v, const char *name, const gdn_tensor *t,
                                  const gdn_delta_rule_problem *p)
{
    GDN_TRY(check_tensor(v, name, t, 3, 3, M_FLOAT, true));
    GDN_TRY(check_dim(v, name, t, 0, p->B, "batch B = q.shape[0]"));
    GDN_TRY(check_dim(v, name, t, 1, p->T, "tokens T = q.shape[1]"));
    GDN_TRY(check_dim(v, name, t, 2, p->HV, "value heads HV = v.shape[2]"));
    return GDN_OK;
}

gdn_status gdn_validate_delta_rule(gdn_context *ctx, const char *fn,
                                   const gdn_delta_rule_args *a, gdn_delta_rule_problem *p)
{
    vctx v = {ctx, fn};
    if (!a)
        return FAIL(&v, GDN_ERR_NULL, "args is NULL, expected a gdn_delta_rule_args");
    memset(p, 0, sizeof *p);
    p->a = *a;
    a = &p->a;
    GDN_TRY(check_tensor(&v, "q", &a->q, 4, 4, M_FLOAT, true));
    p->B = a->q.shape[0];
    p->T = a->q.shape[1];
    p->H = a->q.shape[2];
    p->K = a->q.shape[3];
    GDN_TRY(check_positive(&v, "q", &a->q, 2, "key heads H"));
    GDN_TRY(check_positive(&v, "q", &a->q, 3, "key dim K"));
    GDN_TRY(check_head_dim(&v, "q", &a->q, 3, "key dim K"));
    GDN_TRY(check_tensor(&v, "k", &a->k, 4, 4, M_FLOAT, true));
    GDN_TRY(check_same_dtype(&v, "k", &a->k, "q", &a->q));
    GDN_TRY(check_same_shape(&v, "k", &a->k, "q", &a->q));
    GDN_TRY(check_tensor(&v, "v", &a->v, 4, 4, M_FLOAT, true));
    GDN_TRY(check_same_dtype(&v, "v", &a->v, "q", &a->q));
    GDN_TRY(check_dim(&v, "v", &a->v, 0, p->B, "batch B = q.shape[0]"));
    GDN_TRY(check_dim(&v, "v", &a->v, 1, p->T, "tokens T = q.shape[1]"));
    p->HV = a->v.shape[2];
    p->V = a->v.shape[3];
    GDN_TRY(check_positive(&v, "v", &a->v, 2, "value heads HV"));
    GDN_TRY(check_positive(&v, "v", &a->v, 3, "value dim V"));
    GDN_TRY(check_head_dim(&v, "v", &a->v, 3, "value dim V"));
    if (p->HV % p->H != 0)
        return FAIL(&v, GDN_ERR_SHAPE, "v.shape[2] (HV) is %lld, expected a multiple of "
                    "q.shape[2] (H = %lld)", (long long)p->HV, (long long)p->H);
    p->ratio = p->HV / p->H;
    if (present(&a->g) || a->gate_in_kernel)
        GDN_TRY(check_per_token(&v, "g", &a->g, p));
    GDN_TRY(check_per_token(&v, "beta", &a->beta, p));
    GDN_TRY(check_tensor(&v, "out", &a->out, 4, 4, M_FLOAT, true));
    GDN_TRY(check_same_shape(&v, "out", &a->out, "v", &a->v));
    GDN_TRY(check_disjoint(&v, "out", &a->out, "q", &a->q));
    GDN_TRY(check_disjoint(&v, "out", &a->out, "k", &a->k));
    GDN_TRY(check_disjoint(&v, "out", &a->out, "v", &a->v));
    GDN_TRY(check_delta_options(&v, a));
    if (a->gate_in_kernel)
        GDN_TRY(check_gating_params(&v, &a->gating, p->HV, "gating."));
    p->has_state = present(&a->state);
    if (p->has_state) {
        GDN_TRY(check_delta_state(&v, a, p->HV, p->K, p->V));
        p->S = a->state.shape[0];
    }
    GDN_TRY(resolve_seqs(&v, p->B, p->T, &a->cu_seqlens, &a->state_slots, &a->has_initial_state,
                     "state", p->has_state, p->S, &p->seqs, &p->max_len));
    const gdn_tensor none = gdn_tensor_none(); /* the gating tensors, when it is not used */
    const bool gated = a->gate_in_kernel;
    const named_tensor others[] = {
        NAMED(a, g), NAMED(a, beta), NAMED(a, state_slots), NAMED(a, has_initial_state),
        NAMED(a, cu_seqlens), {"gating.A", gated ? &a->gating.A : &none},
        {"gating.dt_bias", gated ? &a->gating.dt_bias : &none}, NAMED(a, q), NAMED(a, k),
        NAMED(a, v), NAMED(a, out)};
    GDN_TRY(check_written(&v, "out", &a->out, others, 7)); /* q, k, v: checked above */
    if (p->has_state)
        GDN_TRY(check_written(&v, "state", &a->state, others, 11));
    p->scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)p->K);
    p->chunk = a->chunk_size ? a->chunk_size : 64;
    return GDN_OK;
}
