/* The CPU backend: a thread pool, a runtime-selected ISA level and kernels compiled once per
 * level (cpu_recurrent_<isa>.c share cpu_recurrent_impl.h). */
#ifndef GDN_CPU_H
#define GDN_CPU_H

#include "../core/gdn_internal.h"
#include "cpu_pool.h"

#include <string.h>

typedef struct cpu_backend_state {
    cpu_pool *pool;
    gdn_cpu_isa isa;  /* active level: SCALAR, AVX2 or AVX512 */
} cpu_backend_state;

/* One (sequence, value head) of the fused recurrent delta rule, at most two passes over the
 * state per token, in place in the pool when its last dimension is contiguous f32. `scratch`
 * holds cpu_recurrent_scratch_floats() floats. */
typedef void (*cpu_recurrent_fn)(const gdn_delta_rule_problem *p, int64_t n, int64_t hv,
                                 float *scratch);
size_t cpu_recurrent_scratch_floats(const gdn_delta_rule_problem *p);

/* Elements off .. off+n-1 of a float tensor's contiguous last dimension, as f32. */
static inline void cpu_load_f32(const gdn_tensor *t, int64_t off, int64_t n, float *dst)
{
    if (t->dtype == GDN_F32) {
        memcpy(dst, (const float *)t->data + off, (size_t)n * sizeof *dst);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)gdn_load(t, off + i);
}

/* cpu_pointwise.c */
gdn_status cpu_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p);
gdn_status cpu_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p);
gdn_status cpu_gating(gdn_context *ctx, const gdn_gating_problem *p);
gdn_status cpu_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p);
gdn_status cpu_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p);
void cpu_recurrent_scalar(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);
void cpu_recurrent_avx2(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);
void cpu_recurrent_avx512(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);

#endif
