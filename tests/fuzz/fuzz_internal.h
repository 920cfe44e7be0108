/* The fuzzer's case structure, shared by the generator (fuzz_gen.c and its parts in
 * fuzz_gen_parts.c), the memory arena (fuzz_arena.c) and the runner (fuzz_case.c). Not part of
 * the library. */
#ifndef GDN_FUZZ_INTERNAL_H
#define GDN_FUZZ_INTERNAL_H

#include "fuzz_case.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum fz_op {
    FZ_CONV1D,
    FZ_CONV1D_UPDATE,
    FZ_GATING,
    FZ_L2NORM,
    FZ_RMSNORM,
    FZ_WORKSPACE_SIZE,
    FZ_DELTA_RULE,
    FZ_CONTEXT,
    FZ_OPS
} fz_op;

/* What a call may do to a view's memory. Outputs are written; state pools are read and written;
 * inputs and index tensors must come back unchanged. */
typedef enum fz_role { FZ_IN, FZ_OUT, FZ_STATE, FZ_INDEX } fz_role;

/* How an input's numbers are drawn. NICE: uniform in [lo, hi], a range in which the op is well
 * conditioned, so cpu and ref must agree. WIDE: finite but extreme (scaled by 1e+-30, or
 * sprinkled with 1e+-30, denormals and zeros). NONFINITE: sprinkled with NaN and +-Inf. */
typedef enum fz_fill { FILL_NICE, FILL_WIDE, FILL_NONFINITE } fz_fill;

typedef struct fz_view {
    const char *name;   /* the argument as a C expression: "q", "gating.A" */
    gdn_tensor *t;      /* the descriptor inside the case's arguments */
    int buf;            /* the arena buffer it points into */
    int64_t off;        /* byte offset of element 0 from the buffer's origin */
    fz_role role;
    fz_fill fill;
    double lo, hi;      /* NICE range */
    bool wide_ok;       /* WIDE values keep the op's result comparable (scale-invariant ops) */
    int ival, nival;    /* FZ_INDEX: values in fz_case.ival[ival .. ival + nival) */
    bool alias;         /* shares its buffer with a view made before it */
    int partner;        /* an output made as the exact in-place view of input `partner` where
                           the op allows that; -1 otherwise */
    int misalign;       /* bytes the data pointer sits past its dtype's alignment */
} fz_view;

typedef struct fz_buf {
    int64_t lo, hi;                /* bytes reachable from the origin, union over its views */
    unsigned char *mem;            /* exactly hi - lo bytes (lo rounded down when views mix) */
    size_t bytes;
    unsigned char *snap;           /* before the call */
    unsigned char *cpu_after;      /* after the cpu call */
    unsigned char *written;        /* per byte: how many output and pool elements cover it */
    unsigned char *read;           /* per byte: how many elements of other views cover it */
} fz_buf;

/* How a delta-rule case treats the context's scratch. */
typedef enum fz_ws {
    WS_OWNED,      /* context-owned, grown by the op */
    WS_RESERVE,    /* gdn_context_reserve_workspace(odd size) first */
    WS_EXACT,      /* caller memory of exactly gdn_delta_rule_workspace_size() bytes */
    WS_SHORT,      /* caller memory a little smaller than that */
    WS_ODD,        /* caller memory of a random small size */
    WS_MISALIGNED, /* caller memory that is not 64-byte aligned: must be refused */
    WS_NULL,       /* set_workspace(NULL, n > 0): must be refused */
    WS_MODES
} fz_ws;

enum { FZ_MAX_VIEWS = 24, FZ_MAX_IVALS = 512, FZ_DESC_SIZE = 12288 };

typedef struct fz_case {
    fz_op op;
    int ctx_pick;            /* index into fz_env.cpu, or -1 for a NULL context */
    gdn_context *ctx;        /* the context under test (cpu, or one the case created) */
    /* pointer arguments a caller may pass as NULL */
    bool null_args, null_a, null_b, null_gout, null_beta_out, null_bytes;
    gdn_conv1d_args conv;
    gdn_conv1d_update_args upd;
    gdn_tensor a, b, g_out, beta_out; /* gating */
    gdn_gating_params gp;
    gdn_tensor x, out;                /* l2norm */
    float eps;
    gdn_rmsnorm_args rms;
    gdn_delta_rule_args dr;
    /* delta rule scratch */
    fz_ws ws;
    uint64_t ws_arg;         /* a size for RESERVE / ODD, the shortfall for SHORT */
    /* FZ_CONTEXT: the options of gdn_context_create and the op then run on that context */
    gdn_context_options copts;
    bool copts_null, cout_null;
    fz_op inner_op;
    /* memory */
    fz_view v[FZ_MAX_VIEWS];
    int nv;
    fz_buf buf[FZ_MAX_VIEWS];
    int nb;
    int64_t ival[FZ_MAX_IVALS];
    int nival;
    bool huge;               /* extents far beyond memory on tensors with a zero extent */
    bool wild_data;          /* inputs may be drawn WIDE or NONFINITE */
    bool scalar_wild;        /* a scalar option (scale, eps, threshold) out of its nice range */
    double tol_f32;          /* relative L2 tolerance of f32 outputs against ref */
    char desc[FZ_DESC_SIZE];
} fz_case;

/* fuzz_gen.c: fills c's arguments and views for op (memory not yet allocated). shrink > 0 asks
 * for smaller extents after a case came out over budget. */
void fz_gen_op(fz_case *c, fz_src *s, fz_op op, int shrink);
fz_op fz_gen_pick_op(fz_src *s);
fz_op fz_gen_pick_inner_op(fz_src *s);
void fz_gen_context_options(fz_case *c, fz_src *s);
/* Rough cost of running the case on the reference backend (multiply-adds; saturates). */
double fz_gen_work(const fz_case *c);

/* fuzz_arena.c */
fz_view *fz_view_add(fz_case *c, const char *name, gdn_tensor *t, fz_role role);
fz_view *fz_view_alias(fz_case *c, const char *name, gdn_tensor *t, fz_role role,
                       const fz_view *target, int64_t byte_off);
size_t fz_view_elem_size(const gdn_tensor *t);
/* The bytes [lo, hi) a non-empty view reaches relative to element 0; false when it reaches
 * none (a zero extent) or its reach overflows. */
bool fz_view_span(const gdn_tensor *t, int64_t *lo, int64_t *hi);
int64_t fz_numel(const gdn_tensor *t); /* saturates; 0 with any zero extent */
/* More elements than the fuzzer will visit one by one (2^22). Such a view fits in its small
 * buffer only through strides of 0, so it overlaps itself: the harness fills and checks it by
 * bytes, and a call must not succeed with it as an output. */
bool fz_view_oversized(const gdn_tensor *t);
/* Elements the view can hold apart: its numel, or what its bytes allow if fewer. */
double fz_view_distinct(const gdn_tensor *t);
/* Total bytes the case would allocate (saturates). */
uint64_t fz_arena_bytes(const fz_case *c);
bool fz_arena_alloc(fz_case *c);
void fz_arena_fill(fz_case *c, rng *r);
void fz_arena_snapshot(fz_case *c);
void fz_arena_restore(fz_case *c);
void fz_arena_save_cpu(fz_case *c);
void fz_arena_free(fz_case *c);
/* Index of the first buffer that differs from its snapshot, or -1; *at gets the byte. */
int fz_arena_changed(const fz_case *c, int64_t *at);
/* After a successful call: the first buffer with a byte outside outputs and pools changed. */
int fz_arena_stray_write(const fz_case *c, const unsigned char *const *after, int64_t *at);
void fz_arena_mark_written(fz_case *c);
/* Whether the call gets the view's tensor: false for one behind a pointer the case passes as
 * NULL (gating's b, g_out, beta_out, a; l2norm's x, out), which the op never reads or writes. */
bool fz_view_passed(const fz_case *c, int vi);
/* Whether the view's elements are reachable from one index each and touch no other writable
 * view: only then is its content after a call well defined. */
bool fz_view_comparable(const fz_case *c, int vi);
/* For a call that succeeded: the first byte of a written view that another view's element, or
 * another of its own elements, also covers (other than its exact in-place partner), or -1.
 * The header requires such calls to be refused. */
int64_t fz_view_overlap(const fz_case *c, int vi);
/* Whether two of the view's elements share a byte (stride 0 over an extent above 1, ...). */
bool fz_view_self_overlaps(const fz_case *c, int vi);
/* Relative L2 distance of view vi between the cpu result and the current (ref) contents,
 * relative to the larger of the reference's norm and an RMS of 1 per element; NaN and Inf must
 * match in place and kind. */
double fz_view_distance(const fz_case *c, int vi);
/* Whether an input's contents hold a NaN or Inf (after rounding to its dtype). */
bool fz_view_nonfinite(const fz_case *c, int vi);
/* Element i (flat, row-major over the shape) of a view, as double. */
double fz_view_get(const fz_case *c, int vi, const unsigned char *mem, int64_t i);

#endif
