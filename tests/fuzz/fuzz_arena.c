/* The fuzzer's memory: every tensor is a view into a buffer allocated to exactly the bytes its
 * views can reach, so that ASan reports any access past them; views that share a buffer (in-place
 * outputs, overlapping outputs, q/k/v split out of one fused projection) make the buffer the
 * union of their reaches. Buffers are snapshotted before a call, compared after it, and the
 * outputs of two backends compared element by element. */
#include "fuzz_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- views ---------------------------------------------------------------------------------- */

static fz_view *new_view(fz_case *c, const char *name, gdn_tensor *t, fz_role role)
{
    if (c->nv >= FZ_MAX_VIEWS) {
        fprintf(stderr, "fuzz: too many views in one case\n");
        abort();
    }
    fz_view *v = &c->v[c->nv++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->t = t;
    v->role = role;
    v->fill = FILL_NICE;
    v->lo = -1.0;
    v->hi = 1.0;
    v->partner = -1;
    return v;
}

fz_view *fz_view_add(fz_case *c, const char *name, gdn_tensor *t, fz_role role)
{
    fz_view *v = new_view(c, name, t, role);
    v->buf = c->nb++;
    return v;
}

fz_view *fz_view_alias(fz_case *c, const char *name, gdn_tensor *t, fz_role role,
                       const fz_view *target, int64_t byte_off)
{
    int buf = target->buf;
    int64_t off = target->off + byte_off;
    fz_view *v = new_view(c, name, t, role);
    v->buf = buf;
    v->off = off;
    v->alias = true;
    return v;
}

/* An unknown dtype reaches one byte per element: no reading of it is right, so any access a
 * validator lets through past that is worth a report. */
size_t fz_view_elem_size(const gdn_tensor *t)
{
    size_t e = gdn_dtype_size(t->dtype);
    return e ? e : 1;
}

/* Ranks outside 1..4 are refused by every op; memory is laid out for the dims that exist. */
static int dims_of(const gdn_tensor *t) { return t->ndim < 0 ? 0 : t->ndim > 4 ? 4 : t->ndim; }

int64_t fz_numel(const gdn_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < dims_of(t); d++) {
        if (t->shape[d] <= 0)
            return 0;
        if (__builtin_mul_overflow(n, t->shape[d], &n))
            return INT64_MAX;
    }
    return n;
}

bool fz_view_span(const gdn_tensor *t, int64_t *lo, int64_t *hi)
{
    if (fz_numel(t) == 0)
        return false;
    int64_t l = 0, h = 0, step;
    for (int d = 0; d < dims_of(t); d++) {
        if (__builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &step))
            return false;
        if (__builtin_add_overflow(step < 0 ? l : h, step, step < 0 ? &l : &h))
            return false;
    }
    int64_t esz = (int64_t)fz_view_elem_size(t);
    if (__builtin_mul_overflow(l, esz, lo) || __builtin_add_overflow(h, 1, &h) ||
        __builtin_mul_overflow(h, esz, hi))
        return false;
    return true;
}

enum { MAX_VISITED = 1 << 22 };

bool fz_view_oversized(const gdn_tensor *t) { return fz_numel(t) > MAX_VISITED; }

double fz_view_distinct(const gdn_tensor *t)
{
    int64_t lo, hi;
    if (!fz_view_span(t, &lo, &hi))
        return 0.0;
    double bytes = (double)(hi - lo) / (double)fz_view_elem_size(t);
    double n = (double)fz_numel(t);
    return n < bytes ? n : bytes;
}

/* A non-empty view whose reach overflows can never be allocated: the generator must not make
 * one, and the budget check turns it away. */
static bool span_overflows(const gdn_tensor *t)
{
    int64_t lo, hi;
    return fz_numel(t) > 0 && !fz_view_span(t, &lo, &hi);
}

/* Byte offset of flat element i relative to element 0. */
static int64_t elem_offset(const gdn_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = dims_of(t) - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return off * (int64_t)fz_view_elem_size(t);
}

/* ---- buffers -------------------------------------------------------------------------------- */

/* The union of the reaches of a buffer's views; false if one overflows. */
static bool buf_extent(const fz_case *c, int b, int64_t *lo, int64_t *hi, bool *mixed)
{
    bool any = false;
    int views = 0;
    *lo = *hi = 0;
    for (int i = 0; i < c->nv; i++) {
        const fz_view *v = &c->v[i];
        if (v->buf != b)
            continue;
        views++;
        if (span_overflows(v->t))
            return false;
        int64_t l, h;
        if (!fz_view_span(v->t, &l, &h))
            continue;
        if (__builtin_add_overflow(l, v->off, &l) || __builtin_add_overflow(h, v->off, &h))
            return false;
        *lo = any && *lo < l ? *lo : l;
        *hi = any && *hi > h ? *hi : h;
        any = true;
        views += v->misalign != 0; /* a misaligned view needs an aligned start below it */
    }
    *mixed = views > 1;
    return true;
}

uint64_t fz_arena_bytes(const fz_case *c)
{
    uint64_t total = 0;
    for (int b = 0; b < c->nb; b++) {
        int64_t lo, hi;
        bool mixed;
        if (!buf_extent(c, b, &lo, &hi, &mixed))
            return UINT64_MAX;
        if (__builtin_add_overflow(total, (uint64_t)(hi - lo), &total))
            return UINT64_MAX;
    }
    return total;
}

bool fz_arena_alloc(fz_case *c)
{
    for (int b = 0; b < c->nb; b++) {
        fz_buf *f = &c->buf[b];
        memset(f, 0, sizeof *f);
        bool mixed;
        if (!buf_extent(c, b, &f->lo, &f->hi, &mixed))
            return false;
        /* Several views (of different dtypes, or one meant to be misaligned) on one buffer:
         * start it on a 16-byte boundary so that each keeps the alignment its offset gives it
         * (a few bytes of slack below, never above). */
        if (mixed)
            f->lo -= ((f->lo % 16) + 16) % 16;
        f->bytes = (size_t)(f->hi - f->lo);
        f->mem = malloc(f->bytes);
        if (!f->mem && f->bytes == 0)
            f->mem = malloc(1);
        if (!f->mem)
            return false;
    }
    for (int i = 0; i < c->nv; i++) {
        fz_view *v = &c->v[i];
        fz_buf *f = &c->buf[v->buf];
        int64_t pos = v->off - f->lo;
        if (fz_numel(v->t) == 0) /* reaches nothing: any address inside the buffer will do */
            pos = pos < 0 ? 0 : pos > (int64_t)f->bytes ? (int64_t)f->bytes : pos;
        v->t->data = f->mem + pos;
    }
    return true;
}

void fz_arena_free(fz_case *c)
{
    for (int b = 0; b < c->nb; b++) {
        fz_buf *f = &c->buf[b];
        free(f->mem);
        free(f->snap);
        free(f->cpu_after);
        free(f->written);
        free(f->read);
        memset(f, 0, sizeof *f);
    }
    for (int i = 0; i < c->nv; i++)
        c->v[i].t->data = NULL;
}

/* ---- contents ------------------------------------------------------------------------------- */

static bool is_float(gdn_dtype dt) { return dt == GDN_F32 || dt == GDN_BF16 || dt == GDN_F16; }

static unsigned char *elem_ptr(const fz_case *c, int vi, const unsigned char *mem, int64_t i)
{
    const fz_view *v = &c->v[vi];
    const fz_buf *f = &c->buf[v->buf];
    return (unsigned char *)mem + (v->off - f->lo) + elem_offset(v->t, i);
}

double fz_view_get(const fz_case *c, int vi, const unsigned char *mem, int64_t i)
{
    const unsigned char *p = elem_ptr(c, vi, mem, i);
    float f;
    uint16_t h;
    int32_t i32;
    int64_t i64;
    switch (c->v[vi].t->dtype) {
    case GDN_F32: memcpy(&f, p, 4); return f;
    case GDN_BF16: memcpy(&h, p, 2); return gdn_bf16_to_f32(h);
    case GDN_F16: memcpy(&h, p, 2); return gdn_f16_to_f32(h);
    case GDN_I32: memcpy(&i32, p, 4); return i32;
    case GDN_I64: memcpy(&i64, p, 8); return (double)i64;
    default: return *p;
    }
}

/* Stores x into element i in the view's dtype; integers wrap as the bytes of a caller's
 * conversion would, without undefined behaviour here. */
static void put_int(const fz_case *c, int vi, int64_t i, int64_t x)
{
    unsigned char *p = elem_ptr(c, vi, c->buf[c->v[vi].buf].mem, i);
    int32_t i32 = (int32_t)(uint32_t)(uint64_t)x;
    switch (c->v[vi].t->dtype) {
    case GDN_I32: memcpy(p, &i32, 4); break;
    case GDN_I64: memcpy(p, &x, 8); break;
    case GDN_F32: {
        float f = (float)x;
        memcpy(p, &f, 4);
        break;
    }
    case GDN_BF16:
    case GDN_F16: {
        uint16_t h = c->v[vi].t->dtype == GDN_BF16 ? gdn_f32_to_bf16((float)x)
                                                   : gdn_f32_to_f16((float)x);
        memcpy(p, &h, 2);
        break;
    }
    default: *p = (unsigned char)(uint64_t)x; break;
    }
}

static void put_float(const fz_case *c, int vi, int64_t i, double x)
{
    gdn_dtype dt = c->v[vi].t->dtype;
    if (!is_float(dt)) {
        put_int(c, vi, i, isfinite(x) && fabs(x) < 1e18 ? (int64_t)x : 0);
        return;
    }
    unsigned char *p = elem_ptr(c, vi, c->buf[c->v[vi].buf].mem, i);
    float f = (float)x;
    uint16_t h = dt == GDN_BF16 ? gdn_f32_to_bf16(f) : gdn_f32_to_f16(f);
    if (dt == GDN_F32)
        memcpy(p, &f, 4);
    else
        memcpy(p, &h, 2);
}

/* A WIDE value: an extreme finite number, or an ordinary one. */
static double wide_value(rng *r, double nice)
{
    static const double extreme[] = {1e30, -1e30, 1e-30, -1e-30, 1e-40, 0.0, 1e25, -3e20};
    return rng_next(r) % 3 == 0 ? extreme[rng_next(r) % 8] : nice;
}

static double nonfinite_value(rng *r, double nice)
{
    switch (rng_next(r) % 6) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    default: return nice;
    }
}

/* Random bytes over the view's whole reach (for views too large to fill element by element). */
static void fill_bytes(fz_case *c, int vi, rng *r)
{
    const fz_view *v = &c->v[vi];
    const fz_buf *f = &c->buf[v->buf];
    int64_t lo, hi;
    if (!fz_view_span(v->t, &lo, &hi))
        return;
    unsigned char *p = f->mem + (v->off - f->lo) + lo;
    for (int64_t j = 0; j < hi - lo; j++)
        p[j] = (unsigned char)rng_next(r);
}

static void fill_float_view(fz_case *c, int vi, rng *r)
{
    const fz_view *v = &c->v[vi];
    if (fz_view_oversized(v->t)) {
        fill_bytes(c, vi, r);
        return;
    }
    int64_t n = fz_numel(v->t);
    /* WIDE views are either scaled as a whole (scale-invariant ops must not notice) or
     * sprinkled with extremes */
    static const double scales[] = {1e30, 1e-30, 1e20, 1e-20};
    bool scaled = rng_next(r) % 2 == 0;
    double scale = scales[rng_next(r) % 4];
    for (int64_t i = 0; i < n; i++) {
        double x = rng_uniform(r, v->lo, v->hi);
        if (v->fill == FILL_WIDE)
            x = scaled ? x * scale : wide_value(r, x);
        else if (v->fill == FILL_NONFINITE)
            x = nonfinite_value(r, x);
        put_float(c, vi, i, x);
    }
    if (v->fill == FILL_NONFINITE && n > 0) /* at least one */
        put_float(c, vi, (int64_t)(rng_next(r) % (uint64_t)n), NAN);
}

static void fill_index_view(fz_case *c, int vi, rng *r)
{
    const fz_view *v = &c->v[vi];
    if (fz_view_oversized(v->t)) {
        fill_bytes(c, vi, r);
        return;
    }
    int64_t n = fz_numel(v->t);
    for (int64_t i = 0; i < n; i++)
        put_int(c, vi, i, i < v->nival ? c->ival[v->ival + i] : (int64_t)(rng_next(r) % 7) - 2);
}

void fz_arena_fill(fz_case *c, rng *r)
{
    /* outputs keep a recognisable poison wherever a call does not write */
    for (int b = 0; b < c->nb; b++)
        memset(c->buf[b].mem, 0xA5, c->buf[b].bytes);
    for (int i = 0; i < c->nv; i++) {
        if (c->v[i].role == FZ_OUT)
            continue;
        if (c->v[i].role == FZ_INDEX)
            fill_index_view(c, i, r);
        else
            fill_float_view(c, i, r);
    }
}

bool fz_view_nonfinite(const fz_case *c, int vi)
{
    const fz_view *v = &c->v[vi];
    if (!is_float(v->t->dtype))
        return false;
    if (fz_view_oversized(v->t))
        return true; /* filled with random bytes */
    const unsigned char *mem = c->buf[v->buf].mem;
    for (int64_t i = 0, n = fz_numel(v->t); i < n; i++)
        if (!isfinite(fz_view_get(c, vi, mem, i)))
            return true;
    return false;
}

/* ---- snapshots and comparisons -------------------------------------------------------------- */

static unsigned char *copy_of(const unsigned char *p, size_t n)
{
    unsigned char *q = malloc(n ? n : 1);
    if (!q) {
        fprintf(stderr, "fuzz: out of memory\n");
        abort();
    }
    memcpy(q, p, n);
    return q;
}

void fz_arena_snapshot(fz_case *c)
{
    for (int b = 0; b < c->nb; b++)
        c->buf[b].snap = copy_of(c->buf[b].mem, c->buf[b].bytes);
}

void fz_arena_restore(fz_case *c)
{
    for (int b = 0; b < c->nb; b++)
        memcpy(c->buf[b].mem, c->buf[b].snap, c->buf[b].bytes);
}

void fz_arena_save_cpu(fz_case *c)
{
    for (int b = 0; b < c->nb; b++)
        c->buf[b].cpu_after = copy_of(c->buf[b].mem, c->buf[b].bytes);
}

int fz_arena_changed(const fz_case *c, int64_t *at)
{
    for (int b = 0; b < c->nb; b++) {
        const fz_buf *f = &c->buf[b];
        if (memcmp(f->mem, f->snap, f->bytes) == 0)
            continue;
        for (size_t j = 0; j < f->bytes; j++)
            if (f->mem[j] != f->snap[j]) {
                *at = (int64_t)j;
                break;
            }
        return b;
    }
    return -1;
}

static bool writable(const fz_view *v) { return v->role == FZ_OUT || v->role == FZ_STATE; }

static unsigned char *zeroed(size_t n)
{
    unsigned char *p = calloc(n ? n : 1, 1);
    if (!p)
        abort();
    return p;
}

/* Adds one to count[j] for every byte j of every element of view vi (saturating at 255); an
 * oversized view adds two over its whole reach (it covers its bytes more than once). */
static void cover(const fz_case *c, int vi, unsigned char *count)
{
    const fz_view *v = &c->v[vi];
    const fz_buf *f = &c->buf[v->buf];
    size_t esz = fz_view_elem_size(v->t);
    int64_t lo, hi;
    if (fz_view_oversized(v->t) && fz_view_span(v->t, &lo, &hi)) {
        unsigned char *p = count + (v->off - f->lo) + lo;
        for (int64_t j = 0; j < hi - lo; j++)
            p[j] = p[j] < 254 ? p[j] + 2 : 255;
        return;
    }
    for (int64_t i = 0, n = fz_numel(v->t); i < n; i++) {
        unsigned char *p = count + (elem_ptr(c, vi, f->mem, i) - f->mem);
        for (size_t k = 0; k < esz; k++)
            p[k] += p[k] < 255;
    }
}

bool fz_view_passed(const fz_case *c, int vi)
{
    const gdn_tensor *t = c->v[vi].t;
    return !((c->null_a && (t == &c->a || t == &c->x)) || (c->null_b && t == &c->b) ||
             (c->null_gout && (t == &c->g_out || t == &c->out)) ||
             (c->null_beta_out && t == &c->beta_out));
}

/* written[j]: the output and pool elements covering byte j; read[j]: the other views' (of the
 * tensors the call gets). */
void fz_arena_mark_written(fz_case *c)
{
    for (int b = 0; b < c->nb; b++) {
        fz_buf *f = &c->buf[b];
        free(f->written);
        free(f->read);
        f->written = zeroed(f->bytes);
        f->read = zeroed(f->bytes);
    }
    for (int vi = 0; vi < c->nv; vi++)
        if (fz_view_passed(c, vi))
            cover(c, vi, writable(&c->v[vi]) ? c->buf[c->v[vi].buf].written
                                             : c->buf[c->v[vi].buf].read);
}

int64_t fz_view_overlap(const fz_case *c, int vi)
{
    const fz_view *v = &c->v[vi];
    const fz_buf *f = &c->buf[v->buf];
    int64_t lo, hi;
    if (fz_view_oversized(v->t) && fz_view_span(v->t, &lo, &hi))
        return (v->off - f->lo) + lo;
    /* an exact in-place partner covers each of the view's bytes exactly once */
    unsigned char readers = v->partner >= 0 ? 1 : 0;
    size_t esz = fz_view_elem_size(v->t);
    for (int64_t i = 0, n = fz_numel(v->t); i < n; i++) {
        int64_t at = elem_ptr(c, vi, f->mem, i) - f->mem;
        for (size_t k = 0; k < esz; k++)
            if (f->written[at + (int64_t)k] != 1 || f->read[at + (int64_t)k] != readers)
                return at + (int64_t)k;
    }
    return -1;
}

bool fz_view_self_overlaps(const fz_case *c, int vi)
{
    const fz_view *v = &c->v[vi];
    if (fz_view_oversized(v->t))
        return true;
    const fz_buf *f = &c->buf[v->buf];
    unsigned char *count = zeroed(f->bytes);
    cover(c, vi, count);
    bool twice = false;
    for (size_t j = 0; j < f->bytes && !twice; j++)
        twice = count[j] > 1;
    free(count);
    return twice;
}

int fz_arena_stray_write(const fz_case *c, const unsigned char *const *after, int64_t *at)
{
    for (int b = 0; b < c->nb; b++) {
        const fz_buf *f = &c->buf[b];
        for (size_t j = 0; j < f->bytes; j++)
            if (!f->written[j] && after[b][j] != f->snap[j]) {
                *at = (int64_t)j;
                return b;
            }
    }
    return -1;
}

/* Distinct indices reach distinct elements when, taken from the smallest stride up, every
 * stride clears the reach of the dims inside it (enough for the views the generator makes). */
static bool injective(const gdn_tensor *t)
{
    if (fz_numel(t) == 0) /* no elements (its extents may be anything) */
        return true;
    int64_t st[4], ext[4];
    int n = 0;
    for (int d = 0; d < dims_of(t); d++)
        if (t->shape[d] > 1) {
            if (t->stride[d] <= 0)
                return false;
            st[n] = t->stride[d];
            ext[n++] = t->shape[d];
        }
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            int64_t s = st[j], e = ext[j];
            st[j] = st[j - 1], ext[j] = ext[j - 1];
            st[j - 1] = s, ext[j - 1] = e;
        }
    int64_t reach = 0;
    for (int i = 0; i < n; i++) {
        if (st[i] <= reach)
            return false;
        reach += (ext[i] - 1) * st[i];
    }
    return true;
}

bool fz_view_comparable(const fz_case *c, int vi)
{
    const fz_view *v = &c->v[vi];
    if (fz_view_oversized(v->t) || !injective(v->t))
        return false;
    const fz_buf *f = &c->buf[v->buf];
    size_t esz = fz_view_elem_size(v->t);
    for (int64_t i = 0, n = fz_numel(v->t); i < n; i++) {
        const unsigned char *p = f->written + (elem_ptr(c, vi, f->mem, i) - f->mem);
        for (size_t k = 0; k < esz; k++)
            if (p[k] != 1)
                return false;
    }
    return true;
}

double fz_view_distance(const fz_case *c, int vi)
{
    const fz_buf *f = &c->buf[c->v[vi].buf];
    long double num = 0, den = 0;
    const int64_t n = fz_numel(c->v[vi].t);
    for (int64_t i = 0; i < n; i++) {
        double got = fz_view_get(c, vi, f->cpu_after, i), want = fz_view_get(c, vi, f->mem, i);
        if (!isfinite(got) || !isfinite(want)) {
            if (!(isnan(got) && isnan(want)) && got != want)
                return INFINITY;
            continue;
        }
        num += ((long double)got - want) * ((long double)got - want);
        den += (long double)want * want;
    }
    /* Relative to the reference's norm, but never to less than an RMS of 1 per element: a
     * result that cancels to near zero is judged at f32's absolute accuracy, not its relative
     * one (three products of O(1) that cancel to 1e-2 leave 1e-5 of rounding). */
    if (den < n)
        den = n;
    if (den == 0)
        return num == 0 ? 0.0 : INFINITY;
    return (double)sqrtl(num / den);
}
