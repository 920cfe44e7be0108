/* Tensor descriptors, row iteration and the sequence/slot bookkeeping of batched calls. */
#include "gdn_internal.h"

#include <string.h>

static gdn_tensor contiguous(void *data, gdn_dtype dtype, int ndim, const int64_t *shape)
{
    gdn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = stride;
        /* extents whose product does not fit saturate the outer strides at INT64_MAX: an empty
         * tensor's strides do not matter, and validation refuses a non-empty one that far */
        if (!gdn_i64_mul(stride, shape[d] > 0 ? shape[d] : 1, &stride))
            stride = INT64_MAX;
    }
    return t;
}

gdn_tensor gdn_tensor_1d(void *data, gdn_dtype dtype, int64_t n0)
{
    int64_t s[1] = {n0};
    return contiguous(data, dtype, 1, s);
}

gdn_tensor gdn_tensor_2d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1)
{
    int64_t s[2] = {n0, n1};
    return contiguous(data, dtype, 2, s);
}

gdn_tensor gdn_tensor_3d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1, int64_t n2)
{
    int64_t s[3] = {n0, n1, n2};
    return contiguous(data, dtype, 3, s);
}

gdn_tensor gdn_tensor_4d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1, int64_t n2,
                         int64_t n3)
{
    int64_t s[4] = {n0, n1, n2, n3};
    return contiguous(data, dtype, 4, s);
}

gdn_tensor gdn_tensor_none(void)
{
    gdn_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

int64_t gdn_row_count(const gdn_tensor *t)
{
    int64_t rows = 1;
    for (int d = 0; d < t->ndim - 1; d++)
        rows *= t->shape[d];
    return rows;
}

int64_t gdn_row_offset(const gdn_tensor *t, int64_t row)
{
    int64_t off = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        off += (row % t->shape[d]) * t->stride[d];
        row /= t->shape[d];
    }
    return off;
}

int64_t gdn_index_at(const gdn_tensor *t, int64_t i)
{
    int64_t off = i * t->stride[0];
    switch (t->dtype) {
    case GDN_I32: return ((const int32_t *)t->data)[off];
    case GDN_I64: return ((const int64_t *)t->data)[off];
    case GDN_U8: return ((const uint8_t *)t->data)[off];
    default: return 0;
    }
}

void gdn_seq_span(const gdn_seqs *s, int64_t n, int64_t *row, int64_t *t0, int64_t *len)
{
    if (s->cu_seqlens) {
        *row = 0;
        *t0 = gdn_index_at(s->cu_seqlens, n);
        *len = gdn_index_at(s->cu_seqlens, n + 1) - *t0;
    } else {
        *row = n;
        *t0 = 0;
        *len = s->T;
    }
}

int64_t gdn_seq_slot(const gdn_seqs *s, int64_t n)
{
    return s->slots ? gdn_index_at(s->slots, n) : n;
}

bool gdn_seq_has_init(const gdn_seqs *s, int64_t n)
{
    return s->has_init ? gdn_index_at(s->has_init, n) != 0 : true;
}
