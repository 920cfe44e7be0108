/* Helpers shared by the gdn tool, the tests and the fuzzers (the testkit): deterministic random
 * numbers, host tensors, comparisons and a clock. Not part of the library. */
#ifndef GDN_TESTKIT_COMMON_H
#define GDN_TESTKIT_COMMON_H

#include "gdn.h"
#include "../src/core/status.h" /* GDN_TRY, GDN_TRY_ELSE: the library's own macros */

#include <stdbool.h>
#include <stdint.h>

/* splitmix64: tiny, fast, and the same stream on every machine for a given seed. */
typedef struct rng {
    uint64_t s;
} rng;

rng rng_seed(uint64_t seed);
uint64_t rng_next(rng *r);
double rng_uniform(rng *r, double lo, double hi);
double rng_normal(rng *r);
int64_t rng_int(rng *r, int64_t lo, int64_t hi); /* inclusive */
/* An unsigned decimal or 0x-hex seed, all of text; false for anything else ("abc", "-1", "1x",
 * out of range). */
bool parse_seed(const char *text, uint64_t *seed);
/* A seed that differs from run to run (time and pid), or GDN_SEED from the environment (a
 * GDN_SEED that parse_seed refuses exits with status 2 and a message). */
uint64_t fresh_seed(void);

/* A contiguous host tensor of zeros; free with tensor_free. Exits on allocation failure. */
gdn_tensor tensor_alloc(gdn_dtype dtype, int ndim, const int64_t *shape);
gdn_tensor tensor_zeros_like(const gdn_tensor *t);
void tensor_free(gdn_tensor *t);
/* Number of elements; bytes spanned by a contiguous tensor. */
int64_t tensor_numel(const gdn_tensor *t);
size_t tensor_bytes(const gdn_tensor *t);
/* Element (flat row-major index i over the shape) as double, honouring strides. */
double tensor_get(const gdn_tensor *t, int64_t i);
void tensor_set(const gdn_tensor *t, int64_t i, double v);
void tensor_fill_uniform(const gdn_tensor *t, rng *r, double lo, double hi);
void tensor_fill_normal(const gdn_tensor *t, rng *r, double scale);
void tensor_fill(const gdn_tensor *t, double v);
void tensor_copy(const gdn_tensor *dst, const gdn_tensor *src); /* same shape */
/* A view of t with its dim d restricted to [start, start + len). */
gdn_tensor tensor_slice(const gdn_tensor *t, int d, int64_t start, int64_t len);

/* ||a - b|| / ||b|| over all elements (b is the reference); 0 when both are zero; +inf when a
 * has a NaN or Inf that b does not. */
double rel_l2(const gdn_tensor *a, const gdn_tensor *b);
double max_abs_diff(const gdn_tensor *a, const gdn_tensor *b);
bool tensor_all_finite(const gdn_tensor *t);

double now_seconds(void);

#endif
