/* Helpers shared by the gdn tool and the tests. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

rng rng_seed(uint64_t seed)
{
    rng r = {seed};
    return r;
}

uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double rng_uniform(rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next(r) >> 11) * 0x1.0p-53);
}

double rng_normal(rng *r)
{
    double u1 = rng_uniform(r, 0x1.0p-53, 1.0), u2 = rng_uniform(r, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t rng_int(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

bool parse_seed(const char *text, uint64_t *seed)
{
    if (!text || !*text || *text == '-' || *text == '+' || *text == ' ')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno || *end)
        return false;
    *seed = (uint64_t)v;
    return true;
}

uint64_t fresh_seed(void)
{
    const char *env = getenv("GDN_SEED");
    uint64_t seed;
    if (env && *env) {
        if (!parse_seed(env, &seed)) {
            fprintf(stderr, "GDN_SEED is '%s', expected an unsigned integer (decimal or 0x hex)\n",
                    env);
            exit(2);
        }
        return seed;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rng r = rng_seed((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                     ((uint64_t)getpid() << 40));
    return rng_next(&r);
}

int64_t tensor_numel(const gdn_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

size_t tensor_bytes(const gdn_tensor *t)
{
    return (size_t)tensor_numel(t) * gdn_dtype_size(t->dtype);
}

gdn_tensor tensor_alloc(gdn_dtype dtype, int ndim, const int64_t *shape)
{
    gdn_tensor t = gdn_tensor_none();
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = stride;
        stride *= shape[d] > 0 ? shape[d] : 1;
    }
    /* 64-byte aligned, as frameworks allocate (PyTorch's CPU allocator aligns to 64): calloc's
     * 16-byte alignment started every row of a [T, H, 128] f32 tensor 16 bytes into a cache line,
     * which the CPU kernels' row loads and streaming stores paid for on every row. */
    const size_t bytes = tensor_bytes(&t), alloc = (bytes + 63) / 64 * 64;
    t.data = aligned_alloc(64, alloc ? alloc : 64);
    if (t.data)
        memset(t.data, 0, alloc);
    if (!t.data) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
        exit(2);
    }
    return t;
}

gdn_tensor tensor_zeros_like(const gdn_tensor *t)
{
    return tensor_alloc(t->dtype, t->ndim, t->shape);
}

void tensor_free(gdn_tensor *t)
{
    free(t->data);
    t->data = NULL;
}

static int64_t flat_offset(const gdn_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return off;
}

double tensor_get(const gdn_tensor *t, int64_t i)
{
    int64_t off = flat_offset(t, i);
    switch (t->dtype) {
    case GDN_F32: return ((const float *)t->data)[off];
    case GDN_BF16: return gdn_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case GDN_F16: return gdn_f16_to_f32(((const uint16_t *)t->data)[off]);
    case GDN_I32: return ((const int32_t *)t->data)[off];
    case GDN_I64: return (double)((const int64_t *)t->data)[off];
    case GDN_U8: return ((const uint8_t *)t->data)[off];
    }
    return 0.0;
}

void tensor_set(const gdn_tensor *t, int64_t i, double v)
{
    int64_t off = flat_offset(t, i);
    switch (t->dtype) {
    case GDN_F32: ((float *)t->data)[off] = (float)v; break;
    case GDN_BF16: ((uint16_t *)t->data)[off] = gdn_f32_to_bf16((float)v); break;
    case GDN_F16: ((uint16_t *)t->data)[off] = gdn_f32_to_f16((float)v); break;
    case GDN_I32: ((int32_t *)t->data)[off] = (int32_t)v; break;
    case GDN_I64: ((int64_t *)t->data)[off] = (int64_t)v; break;
    case GDN_U8: ((uint8_t *)t->data)[off] = (uint8_t)v; break;
    }
}

void tensor_fill_uniform(const gdn_tensor *t, rng *r, double lo, double hi)
{
    for (int64_t i = 0, n = tensor_numel(t); i < n; i++)
        tensor_set(t, i, rng_uniform(r, lo, hi));
}

void tensor_fill_normal(const gdn_tensor *t, rng *r, double scale)
{
    for (int64_t i = 0, n = tensor_numel(t); i < n; i++)
        tensor_set(t, i, scale * rng_normal(r));
}

void tensor_fill(const gdn_tensor *t, double v)
{
    for (int64_t i = 0, n = tensor_numel(t); i < n; i++)
        tensor_set(t, i, v);
}

void tensor_copy(const gdn_tensor *dst, const gdn_tensor *src)
{
    for (int64_t i = 0, n = tensor_numel(src); i < n; i++)
        tensor_set(dst, i, tensor_get(src, i));
}

gdn_tensor tensor_slice(const gdn_tensor *t, int d, int64_t start, int64_t len)
{
    gdn_tensor v = *t;
    v.data = (char *)t->data + (size_t)(start * t->stride[d]) * gdn_dtype_size(t->dtype);
    v.shape[d] = len;
    return v;
}

double rel_l2(const gdn_tensor *a, const gdn_tensor *b)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0, n = tensor_numel(b); i < n; i++) {
        double x = tensor_get(a, i), y = tensor_get(b, i);
        if (!isfinite(x) && isfinite(y))
            return INFINITY;
        if (isnan(x) != isnan(y))
            return INFINITY;
        if (!isfinite(y))
            continue; /* both non-finite the same way: the reference itself overflowed */
        num += (x - y) * (x - y);
        den += y * y;
    }
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

double max_abs_diff(const gdn_tensor *a, const gdn_tensor *b)
{
    double m = 0.0;
    for (int64_t i = 0, n = tensor_numel(b); i < n; i++) {
        double d = fabs(tensor_get(a, i) - tensor_get(b, i));
        if (!(d <= m))
            m = d; /* NaN propagates */
    }
    return m;
}

bool tensor_all_finite(const gdn_tensor *t)
{
    for (int64_t i = 0, n = tensor_numel(t); i < n; i++)
        if (!isfinite(tensor_get(t, i)))
            return false;
    return true;
}

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
