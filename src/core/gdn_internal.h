/* Internal interfaces shared by src/core and the backends. Not installed. */
#ifndef GDN_INTERNAL_H
#define GDN_INTERNAL_H

#include "gdn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GDN_ERRMSG_SIZE 512

/* ---- Checked sizes ------------------------------------------------------------------------- */

/* a * b and a + b, saturating at SIZE_MAX: a scratch size that does not fit is SIZE_MAX, which
 * the ops refuse (GDN_ERR_VALUE), so no size computation can wrap into a small buffer. */
static inline size_t gdn_size_mul(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static inline size_t gdn_size_add(size_t a, size_t b)
{
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* The same for counts of elements: false when a * b does not fit in int64. */
static inline bool gdn_i64_mul(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}

/* ---- Sequences of a batch, resolved by validation ------------------------------------------ */

/* How a call's tokens split into sequences, and where each sequence's state lives. */
typedef struct gdn_seqs {
    int64_t count;                 /* N: number of sequences */
    int64_t active;                /* sequences not skipped by a negative slot (host-visible
                                      slots; else every sequence counts) */
    int64_t T;                     /* tokens per batch row (equal length) or in total (varlen) */
    const gdn_tensor *cu_seqlens;  /* NULL: equal-length batch, sequence n is batch row n */
    const gdn_tensor *slots;       /* NULL: sequence n uses slot n */
    const gdn_tensor *has_init;    /* NULL: every sequence continues its slot's state */
} gdn_seqs;

/* Integer element i of a rank-1 index tensor (i32, i64 or u8). */
int64_t gdn_index_at(const gdn_tensor *t, int64_t i);
/* Batch row, first token and length of sequence n. */
void gdn_seq_span(const gdn_seqs *s, int64_t n, int64_t *row, int64_t *t0, int64_t *len);
/* Slot of sequence n (negative: padding, skip it). */
int64_t gdn_seq_slot(const gdn_seqs *s, int64_t n);
/* Whether sequence n starts from its slot's state (true) or from zeros (false). */
bool gdn_seq_has_init(const gdn_seqs *s, int64_t n);

/* ---- Validated problems: the arguments plus the sizes validation derived from them -------- */

typedef struct gdn_conv1d_problem {
    gdn_conv1d_args a;
    gdn_seqs seqs;
    int64_t C, W;        /* channels, kernel width */
    bool has_state;      /* a.conv_state present */
} gdn_conv1d_problem;

typedef struct gdn_conv1d_update_problem {
    gdn_conv1d_update_args a;
    gdn_seqs seqs;       /* count = N, T = 1 */
    int64_t C, W;
} gdn_conv1d_update_problem;

/* Decode is prefill of one token per sequence that always continues its state: q becomes the
 * conv1d problem that views x and out [N, C] as [N, 1, C] (backends may run it as such;
 * src/core/args.c). */
void gdn_conv1d_update_as_prefill(const gdn_conv1d_update_problem *p, gdn_conv1d_problem *q);

typedef struct gdn_gating_problem {
    gdn_tensor a, b, g_out, beta_out;  /* b / beta_out absent together */
    gdn_gating_params p;
    int64_t rows, HV;                  /* rows = product of a's leading dims */
} gdn_gating_problem;

typedef struct gdn_l2norm_problem {
    gdn_tensor x, out;
    int64_t rows, D;
    double eps;
} gdn_l2norm_problem;

typedef struct gdn_rmsnorm_problem {
    gdn_rmsnorm_args a;
    int64_t rows, D;
} gdn_rmsnorm_problem;

typedef struct gdn_delta_rule_problem {
    gdn_delta_rule_args a;
    gdn_seqs seqs;
    int64_t B, T, H, HV, K, V;
    int64_t S;           /* pool slots (0 without a pool) */
    int64_t ratio;       /* HV / H */
    int64_t max_len;     /* longest sequence (host-visible cu_seqlens; else T) */
    double scale;        /* resolved: a.scale or 1/sqrt(K) */
    int chunk;           /* resolved chunk size */
    bool has_state;
} gdn_delta_rule_problem;

/* ---- Backends ------------------------------------------------------------------------------ */

/* What a backend implements. Every function receives a validated problem: it may assume every
 * shape, stride, dtype and index is consistent, and must not fail for input reasons. */
typedef struct gdn_backend_ops {
    gdn_backend id;
    const char *name;
    bool device_pointers;                     /* tensors live in device memory (cuda) */
    gdn_status (*init)(gdn_context *ctx);     /* optional: per-context setup */
    void (*fini)(gdn_context *ctx);           /* optional */
    gdn_status (*enter)(gdn_context *ctx);    /* optional: before every op (device select) */
    void *(*workspace_alloc)(size_t bytes);   /* optional: scratch allocator (default malloc) */
    void (*workspace_free)(void *p);          /* optional: its free */
    gdn_status (*conv1d)(gdn_context *ctx, const gdn_conv1d_problem *p);
    gdn_status (*conv1d_update)(gdn_context *ctx, const gdn_conv1d_update_problem *p);
    gdn_status (*gating)(gdn_context *ctx, const gdn_gating_problem *p);
    gdn_status (*l2norm)(gdn_context *ctx, const gdn_l2norm_problem *p);
    gdn_status (*rmsnorm_gated)(gdn_context *ctx, const gdn_rmsnorm_problem *p);
    /* optional: refuse (GDN_ERR_UNSUPPORTED) valid problems the backend cannot run, before
     * anything is written */
    gdn_status (*check_conv1d)(gdn_context *ctx, const gdn_conv1d_problem *p);
    gdn_status (*check_delta_rule)(gdn_context *ctx, const gdn_delta_rule_problem *p);
    size_t (*delta_rule_workspace)(const gdn_context *ctx, const gdn_delta_rule_problem *p);
    gdn_status (*delta_rule)(gdn_context *ctx, const gdn_delta_rule_problem *p, void *workspace);
    /* The optional entries below come last, so that a table initialised by position (C++,
     * src/cuda) may leave out the ones after its last. */
    int (*device_count)(void);                /* optional: devices present; none: unavailable
                                               * (absent: a host backend, always available) */
    /* optional queries behind gdn_context_num_threads, _cpu_isa and _cpu_bf16_products (absent:
     * 0 threads, GDN_ISA_AUTO, GDN_BF16_PRODUCTS_F32) */
    int (*num_threads)(const gdn_context *ctx);
    gdn_cpu_isa (*cpu_isa)(const gdn_context *ctx);
    gdn_bf16_products (*bf16_products)(const gdn_context *ctx);
} gdn_backend_ops;

/* The backends' op tables: all that src/core knows of a backend (context.c picks one). */
extern const gdn_backend_ops gdn_ref_backend;
extern const gdn_backend_ops gdn_cpu_backend;
#ifdef GDN_HAVE_CUDA
extern const gdn_backend_ops gdn_cuda_backend;
#endif

/* ---- Context ------------------------------------------------------------------------------- */

struct gdn_context {
    gdn_context_options opts;
    const gdn_backend_ops *ops;
    void *backend_state;          /* owned by ops->init / ops->fini */
    void *workspace;              /* scratch in use (owned or caller's) */
    size_t workspace_bytes;
    bool workspace_owned;
    unsigned char busy;           /* a call is running on it (gdn_context_enter / _leave) */
    char errmsg[GDN_ERRMSG_SIZE];
};

/* Marks ctx as in use by the calling thread: GDN_ERR_BUSY (message on the thread's context-less
 * slot, ctx's message untouched) when another thread's call holds it. Every public function that
 * reads or writes a context's mutable parts runs between enter and leave. */
gdn_status gdn_context_enter(gdn_context *ctx, const char *fn);
void gdn_context_leave(gdn_context *ctx);

/* Records "fn: message" on ctx (or the thread's context-less slot if ctx is NULL); returns st. */
gdn_status gdn_fail(gdn_context *ctx, gdn_status st, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void gdn_clear_error(gdn_context *ctx);

/* Makes sure ctx's workspace has at least bytes; owned scratch grows, caller scratch fails. */
gdn_status gdn_workspace_acquire(gdn_context *ctx, const char *fn, size_t bytes, void **ptr);

/* ---- Validation (src/core/validate.c) ------------------------------------------------------ */

gdn_status gdn_validate_conv1d(gdn_context *ctx, const gdn_conv1d_args *a, gdn_conv1d_problem *p);
gdn_status gdn_validate_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *a,
                                      gdn_conv1d_update_problem *p);
gdn_status gdn_validate_gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                               const gdn_gating_params *params, const gdn_tensor *g_out,
                               const gdn_tensor *beta_out, gdn_gating_problem *p);
gdn_status gdn_validate_l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out,
                               float eps, gdn_l2norm_problem *p);
gdn_status gdn_validate_rmsnorm(gdn_context *ctx, const gdn_rmsnorm_args *a,
                                gdn_rmsnorm_problem *p);
gdn_status gdn_validate_delta_rule(gdn_context *ctx, const char *fn,
                                   const gdn_delta_rule_args *a, gdn_delta_rule_problem *p);

/* ---- Element access for host backends ------------------------------------------------------ */

/* The bf16 bits of the f32 with bits u: round to nearest even, NaN kept quiet with its sign.
 * Branch-free and inline, so a loop of them vectorizes (gdn_f32_to_bf16 and cpu_store_f32). */
static inline uint16_t gdn_bf16_bits(uint32_t u)
{
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* Offset (in elements) of row `row` of a tensor whose leading ndim-1 dims are flattened. */
int64_t gdn_row_offset(const gdn_tensor *t, int64_t row);
/* Product of the leading ndim-1 extents. */
int64_t gdn_row_count(const gdn_tensor *t);

static inline double gdn_load(const gdn_tensor *t, int64_t off)
{
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

static inline void gdn_store(const gdn_tensor *t, int64_t off, double v)
{
    switch (t->dtype) {
    case GDN_F32: ((float *)t->data)[off] = (float)v; break;
    case GDN_BF16: ((uint16_t *)t->data)[off] = gdn_f32_to_bf16((float)v); break;
    case GDN_F16: ((uint16_t *)t->data)[off] = gdn_f32_to_f16((float)v); break;
    default: break; /* validation never lets an index dtype reach an output */
    }
}

#ifdef __cplusplus
}
#endif

#endif /* GDN_INTERNAL_H */
