/* Runs one generated case on a cpu context and on the reference, and judges it (the rules are
 * listed in fuzz_case.h). Also the context cases: gdn_context_create with odd options, the
 * workspace calls, and an op run on the context so made. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum {
    BYTES_CAP = 8 << 20,        /* tensor bytes per case */
    WS_CAP = 64 << 20,          /* caller workspace the fuzzer will allocate */
    MAX_TRIES = 16,             /* regenerations of an over-budget case */
};
static const double WORK_CAP = 3e6; /* multiply-adds of the reference run */
static const size_t BYTES_SENTINEL = 0x5eadbeefu;

static const char *op_fn[FZ_OPS] = {
    "gdn_conv1d",        "gdn_conv1d_update",             "gdn_gating",     "gdn_l2norm",
    "gdn_rmsnorm_gated", "gdn_delta_rule_workspace_size", "gdn_delta_rule", "gdn_context_create",
};

/* ---- the description of the current case ---------------------------------------------------- */

static const char *g_current = "";
static const char *g_entry_point = "";

const char *fz_last_entry_point(void) { return g_entry_point; }

const char *fz_current_description(void) { return g_current; }

#define FZ_PRINTF(f, a) __attribute__((format(printf, f, a)))

static void add(fz_case *c, const char *fmt, ...) FZ_PRINTF(2, 3);
static void add(fz_case *c, const char *fmt, ...)
{
    size_t len = strlen(c->desc);
    if (len + 1 >= sizeof c->desc)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->desc + len, sizeof c->desc - len, fmt, ap);
    va_end(ap);
}

static const char *status_name(gdn_status st)
{
    static const char *names[] = {"GDN_OK", "GDN_ERR_NULL", "GDN_ERR_DTYPE", "GDN_ERR_SHAPE",
                                  "GDN_ERR_STRIDE", "GDN_ERR_VALUE", "GDN_ERR_UNSUPPORTED",
                                  "GDN_ERR_BACKEND", "GDN_ERR_NO_MEMORY", "GDN_ERR_WORKSPACE",
                                  "GDN_ERR_CUDA", "GDN_ERR_INTERNAL", "GDN_ERR_BUSY"};
    return (unsigned)st < (unsigned)N_OF(names) ? names[st] : "(not a gdn_status)";
}

typedef struct named {
    const char *name;
    const gdn_tensor *t;
} named;

/* The tensor arguments of the case's op, in the order of its struct. */
static int arg_tensors(const fz_case *c, named *out)
{
    int n = 0;
#define ARG(nm, tensor) (out[n].name = (nm), out[n++].t = &(tensor))
    switch (c->op) {
    case FZ_CONV1D:
        ARG("x", c->conv.x), ARG("weight", c->conv.weight), ARG("bias", c->conv.bias);
        ARG("out", c->conv.out), ARG("conv_state", c->conv.conv_state);
        ARG("state_slots", c->conv.state_slots);
        ARG("has_initial_state", c->conv.has_initial_state), ARG("cu_seqlens", c->conv.cu_seqlens);
        break;
    case FZ_CONV1D_UPDATE:
        ARG("x", c->upd.x), ARG("weight", c->upd.weight), ARG("bias", c->upd.bias);
        ARG("out", c->upd.out), ARG("conv_state", c->upd.conv_state);
        ARG("state_slots", c->upd.state_slots);
        break;
    case FZ_GATING:
        ARG("a", c->a), ARG("b", c->b), ARG("g_out", c->g_out), ARG("beta_out", c->beta_out);
        ARG("params.A", c->gp.A), ARG("params.dt_bias", c->gp.dt_bias);
        break;
    case FZ_L2NORM: ARG("x", c->x), ARG("out", c->out); break;
    case FZ_RMSNORM:
        ARG("x", c->rms.x), ARG("z", c->rms.z), ARG("weight", c->rms.weight);
        ARG("out", c->rms.out);
        break;
    case FZ_WORKSPACE_SIZE:
    case FZ_DELTA_RULE:
        ARG("q", c->dr.q), ARG("k", c->dr.k), ARG("v", c->dr.v), ARG("g", c->dr.g);
        ARG("beta", c->dr.beta), ARG("out", c->dr.out), ARG("state", c->dr.state);
        ARG("state_slots", c->dr.state_slots), ARG("has_initial_state", c->dr.has_initial_state);
        ARG("cu_seqlens", c->dr.cu_seqlens);
        if (c->dr.gate_in_kernel)
            ARG("gating.A", c->dr.gating.A), ARG("gating.dt_bias", c->dr.gating.dt_bias);
        break;
    default: break;
    }
#undef ARG
    return n;
}

static int view_of(const fz_case *c, const gdn_tensor *t)
{
    for (int i = 0; i < c->nv; i++)
        if (c->v[i].t == t)
            return i;
    return -1;
}

static void describe_ints(fz_case *c, const char *what, const int64_t *v, int n)
{
    add(c, "%s {", what);
    for (int i = 0; i < n; i++)
        add(c, "%s%lld", i ? ", " : "", (long long)v[i]);
    add(c, "}");
}

static void describe_tensor(fz_case *c, const char *name, const gdn_tensor *t)
{
    add(c, "  %s: ", name);
    int vi = view_of(c, t);
    if (!t->data || vi < 0) {
        add(c, "absent\n");
        return;
    }
    const fz_view *v = &c->v[vi];
    int nd = t->ndim < 0 ? 0 : t->ndim > 4 ? 4 : t->ndim;
    add(c, "%s (dtype %d) ndim %d ", gdn_dtype_name(t->dtype), (int)t->dtype, (int)t->ndim);
    describe_ints(c, "shape", t->shape, nd);
    add(c, " ");
    describe_ints(c, "stride", t->stride, nd);
    add(c, " in buffer %d (%zu bytes) at %+lld bytes", v->buf, c->buf[v->buf].bytes,
        (long long)(v->off - c->buf[v->buf].lo));
    if (v->alias)
        for (int j = 0; j < vi; j++)
            if (c->v[j].buf == v->buf) {
                add(c, ", shares it with %s", c->v[j].name);
                break;
            }
    if (v->role == FZ_INDEX) {
        int64_t n = fz_numel(t) < 16 ? fz_numel(t) : 16;
        add(c, " = {");
        for (int64_t i = 0; i < n; i++)
            add(c, "%s%.0f", i ? ", " : "", fz_view_get(c, vi, c->buf[v->buf].mem, i));
        add(c, "%s}", fz_numel(t) > 16 ? ", ..." : "");
    } else if (v->role == FZ_OUT) {
        add(c, ", output");
    } else {
        static const char *fills[] = {"nice", "WIDE", "NONFINITE"};
        add(c, ", %s in [%g, %g]", fills[v->fill], v->lo, v->hi);
    }
    add(c, "\n");
}

static void describe_gating(fz_case *c, const char *prefix, const gdn_gating_params *g)
{
    add(c, "  %sa_form %d, %ssoftplus_threshold %g, %sallow_neg_eigval %d\n", prefix,
        (int)g->a_form, prefix, (double)g->softplus_threshold, prefix, (int)g->allow_neg_eigval);
}

static void describe_workspace(fz_case *c)
{
    unsigned long long n = (unsigned long long)c->ws_arg;
    add(c, "  workspace: ");
    switch (c->ws) {
    case WS_OWNED: add(c, "context-owned\n"); break;
    case WS_RESERVE: add(c, "gdn_context_reserve_workspace(ctx, %llu) first\n", n); break;
    case WS_EXACT: add(c, "caller memory of exactly the queried size\n"); break;
    case WS_SHORT:
        if (c->ws_arg == (uint64_t)-2)
            add(c, "caller memory of half the queried size\n");
        else
            add(c, "caller memory %llu bytes short of the queried size\n", n);
        break;
    case WS_ODD: add(c, "caller memory of %llu bytes\n", n); break;
    case WS_MISALIGNED:
        add(c, "set_workspace with a misaligned pointer (refused), then owned\n");
        break;
    default: add(c, "set_workspace(ctx, NULL, %llu) (refused), then owned\n", n); break;
    }
}

static void describe_options(fz_case *c)
{
    const gdn_delta_rule_args *d = &c->dr;
    switch (c->op) {
    case FZ_CONV1D: add(c, "  activation %d\n", (int)c->conv.activation); break;
    case FZ_CONV1D_UPDATE: add(c, "  activation %d\n", (int)c->upd.activation); break;
    case FZ_GATING: describe_gating(c, "params.", &c->gp); break;
    case FZ_L2NORM: add(c, "  eps %g\n", (double)c->eps); break;
    case FZ_RMSNORM:
        add(c, "  eps %g, weight_offset %d, norm_before_gate %d\n", (double)c->rms.eps,
            (int)c->rms.weight_offset, (int)c->rms.norm_before_gate);
        break;
    case FZ_WORKSPACE_SIZE:
    case FZ_DELTA_RULE:
        add(c, "  scale %g, state_layout %d, gva %d, algorithm %d, chunk_size %d, qk_l2norm %d, "
            "gate_in_kernel %d\n", (double)d->scale, (int)d->state_layout, (int)d->gva,
            (int)d->algorithm, (int)d->chunk_size, (int)d->qk_l2norm, (int)d->gate_in_kernel);
        if (d->gate_in_kernel)
            describe_gating(c, "gating.", &d->gating);
        if (c->op == FZ_DELTA_RULE)
            describe_workspace(c);
        break;
    default: break;
    }
    const char *nulls[] = {c->null_args ? (c->op == FZ_GATING ? "params" : "args") : NULL,
                           c->null_a ? (c->op == FZ_GATING ? "a" : "x") : NULL,
                           c->null_b ? "b" : NULL,
                           c->null_gout ? (c->op == FZ_GATING ? "g_out" : "out") : NULL,
                           c->null_beta_out ? "beta_out" : NULL,
                           c->null_bytes && c->op == FZ_WORKSPACE_SIZE ? "bytes" : NULL};
    for (int i = 0; i < N_OF(nulls); i++)
        if (nulls[i])
            add(c, "  the %s pointer is NULL\n", nulls[i]);
}

static void describe(fz_case *c, const char *ctx_text)
{
    c->desc[0] = '\0';
    add(c, "%s on %s%s%s\n", op_fn[c->op], ctx_text, c->huge ? " (huge extents)" : "",
        c->wild_data ? " (wild data)" : "");
    named args[16];
    int n = arg_tensors(c, args);
    for (int i = 0; i < n; i++)
        describe_tensor(c, args[i].name, args[i].t);
    describe_options(c);
    g_current = c->desc;
}

/* ---- findings ------------------------------------------------------------------------------- */

typedef struct judge {
    fz_case *c;
    const char *label;
    int findings;
} judge;

static int finding(judge *j, const char *fmt, ...) FZ_PRINTF(2, 3);
static int finding(judge *j, const char *fmt, ...)
{
    if (j->findings++ == 0)
        fprintf(stderr, "\nFINDING in %s\n%s", j->label, j->c->desc);
    fprintf(stderr, "  -> ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    return 1;
}

/* An error needs a message that starts with the function's name. */
static void check_message(judge *j, const gdn_context *ctx, const char *fn, gdn_status st)
{
    const char *m = gdn_last_error(ctx);
    if (!m || !*m)
        finding(j, "%s returned %s with an empty gdn_last_error(%s)", fn, status_name(st),
                ctx ? "ctx" : "NULL");
    else if (strncmp(m, fn, strlen(fn)) != 0)
        finding(j, "%s returned %s with a message that does not name it: \"%s\"", fn,
                status_name(st), m);
}

/* Statuses an entry point may return at all on a host backend. */
static bool status_allowed(fz_op op, gdn_status st)
{
    unsigned mask = 1u << GDN_OK | 1u << GDN_ERR_NULL | 1u << GDN_ERR_DTYPE |
                    1u << GDN_ERR_SHAPE | 1u << GDN_ERR_STRIDE | 1u << GDN_ERR_VALUE |
                    1u << GDN_ERR_UNSUPPORTED;
    if (op == FZ_DELTA_RULE)
        mask |= 1u << GDN_ERR_WORKSPACE | 1u << GDN_ERR_NO_MEMORY;
    if (op == FZ_CONTEXT)
        mask = 1u << GDN_OK | 1u << GDN_ERR_NULL | 1u << GDN_ERR_VALUE | 1u << GDN_ERR_BACKEND |
               1u << GDN_ERR_NO_MEMORY;
    return (unsigned)st < 32 && (mask >> st & 1u);
}

/* Backends may differ only where a backend lacks an op or its scratch differs. */
static bool may_differ(gdn_status st)
{
    return st == GDN_ERR_UNSUPPORTED || st == GDN_ERR_WORKSPACE || st == GDN_ERR_NO_MEMORY;
}

/* ---- running the op ------------------------------------------------------------------------- */

static gdn_status invoke(const fz_case *c, gdn_context *ctx, size_t *bytes)
{
    switch (c->op) {
    case FZ_CONV1D: return gdn_conv1d(ctx, c->null_args ? NULL : &c->conv);
    case FZ_CONV1D_UPDATE: return gdn_conv1d_update(ctx, c->null_args ? NULL : &c->upd);
    case FZ_GATING:
        return gdn_gating(ctx, c->null_a ? NULL : &c->a, c->null_b ? NULL : &c->b,
                          c->null_args ? NULL : &c->gp, c->null_gout ? NULL : &c->g_out,
                          c->null_beta_out ? NULL : &c->beta_out);
    case FZ_L2NORM:
        return gdn_l2norm(ctx, c->null_a ? NULL : &c->x, c->null_gout ? NULL : &c->out, c->eps);
    case FZ_RMSNORM: return gdn_rmsnorm_gated(ctx, c->null_args ? NULL : &c->rms);
    case FZ_WORKSPACE_SIZE:
        return gdn_delta_rule_workspace_size(ctx, c->null_args ? NULL : &c->dr,
                                             c->null_bytes ? NULL : bytes);
    case FZ_DELTA_RULE: return gdn_delta_rule(ctx, c->null_args ? NULL : &c->dr);
    default: return GDN_ERR_INTERNAL;
    }
}

/* Context-owned scratch again (frees what the last case grew, so that every case's scratch is
 * allocated to exactly what it asks for and ASan sees any overrun). */
static void own_workspace(judge *j, gdn_context *ctx)
{
    gdn_status st = gdn_context_set_workspace(ctx, NULL, 0);
    if (st != GDN_OK)
        finding(j, "gdn_context_set_workspace(ctx, NULL, 0) returned %s", status_name(st));
}

static void *aligned_bytes(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, GDN_WORKSPACE_ALIGN, n) != 0)
        return NULL;
    return p;
}

/* An absurd scratch size may fail to allocate or be refused outright. */
static bool refused_as_too_big(gdn_status st)
{
    return st == GDN_ERR_NO_MEMORY || st == GDN_ERR_VALUE;
}

/* Arranges the tested context's scratch as the case asks; returns caller memory to free after
 * the call, and the size it was given in *given (SIZE_MAX: none). */
static void *arrange_workspace(judge *j, gdn_context *ctx, size_t *given)
{
    fz_case *c = j->c;
    *given = SIZE_MAX;
    void *mem = NULL;
    gdn_status st;
    size_t need = 0, size = (size_t)c->ws_arg;
    if (c->ws == WS_EXACT || c->ws == WS_SHORT) {
        if (gdn_delta_rule_workspace_size(ctx, &c->dr, &need) != GDN_OK)
            return NULL; /* the call itself will fail the same way */
        if (c->ws == WS_EXACT)
            size = need;
        else if (need == 0)
            return NULL;
        else
            size = c->ws_arg == (uint64_t)-2 ? need / 2
                                              : need - (need < c->ws_arg ? need : c->ws_arg);
        add(c, "  (workspace_size said %zu bytes; the caller gives %zu)\n", need, size);
    }
    switch (c->ws) {
    case WS_RESERVE:
        st = gdn_context_reserve_workspace(ctx, size);
        if (st != GDN_OK && !(refused_as_too_big(st) && size > WS_CAP))
            finding(j, "gdn_context_reserve_workspace(%zu) returned %s", size, status_name(st));
        if (st != GDN_OK)
            check_message(j, ctx, "gdn_context_reserve_workspace", st);
        return NULL;
    case WS_EXACT:
    case WS_SHORT:
    case WS_ODD:
        if (size > WS_CAP || !(mem = aligned_bytes(size)))
            return NULL;
        st = gdn_context_set_workspace(ctx, mem, size);
        if (st != GDN_OK)
            finding(j, "gdn_context_set_workspace(aligned memory, %zu) returned %s", size,
                    status_name(st));
        *given = size;
        return mem;
    case WS_MISALIGNED:
        mem = aligned_bytes(size + 64);
        st = gdn_context_set_workspace(ctx, (char *)mem + 1 + size % 63, size);
        if (st != GDN_ERR_VALUE)
            finding(j, "gdn_context_set_workspace(misaligned pointer, %zu) returned %s, expected "
                    "GDN_ERR_VALUE", size, status_name(st));
        else
            check_message(j, ctx, "gdn_context_set_workspace", st);
        own_workspace(j, ctx);
        return mem;
    case WS_NULL:
        st = gdn_context_set_workspace(ctx, NULL, size);
        if (st != GDN_ERR_NULL)
            finding(j, "gdn_context_set_workspace(NULL, %zu) returned %s, expected GDN_ERR_NULL",
                    size, status_name(st));
        else
            check_message(j, ctx, "gdn_context_set_workspace", st);
        return NULL;
    default: return NULL;
    }
}

/* Whether the case's inputs leave the result well defined and well conditioned. */
static bool comparable_inputs(const fz_case *c)
{
    if (c->scalar_wild)
        return false;
    for (int i = 0; i < c->nv; i++) {
        const fz_view *v = &c->v[i];
        if (v->role != FZ_IN && v->role != FZ_STATE)
            continue;
        if (v->fill == FILL_NONFINITE || (v->fill == FILL_WIDE && !v->wide_ok))
            return false;
        if (fz_view_nonfinite(c, i))
            return false;
    }
    return true;
}

/* After an error, or after gdn_delta_rule_workspace_size: nothing written at all. */
static void check_untouched(judge *j, const char *after)
{
    int64_t at = 0;
    int b = fz_arena_changed(j->c, &at);
    if (b >= 0)
        finding(j, "%s, yet buffer %d changed at byte %lld", after, b, (long long)at);
}

/* After a success: nothing written outside the outputs and pools (inputs included). */
static void check_no_stray_writes(judge *j, const char *who)
{
    const unsigned char *after[FZ_MAX_VIEWS];
    for (int b = 0; b < j->c->nb; b++)
        after[b] = j->c->buf[b].mem;
    int64_t at = 0;
    int b = fz_arena_stray_write(j->c, after, &at);
    if (b >= 0)
        finding(j, "%s returned GDN_OK but wrote buffer %d at byte %lld, outside every output "
                "and pool element (an input, or padding between rows)", who, b, (long long)at);
}

/* After a success: the header requires outputs and pools to be disjoint from every other
 * tensor of the call (but an exact in-place view where the op allows one) and from themselves,
 * and index tensors not to overlap themselves; a call that breaks this must be refused. */
static void check_no_overlap_accepted(judge *j)
{
    const fz_case *c = j->c;
    for (int i = 0; i < c->nv; i++) {
        const fz_view *v = &c->v[i];
        int64_t at = -1;
        if (!fz_view_passed(c, i))
            continue; /* behind a NULL pointer: not part of the call */
        if (v->role == FZ_OUT || v->role == FZ_STATE)
            at = fz_view_overlap(c, i);
        else if (v->role == FZ_INDEX && fz_view_self_overlaps(c, i))
            at = 0;
        if (at >= 0)
            finding(j, "the call succeeded although %s overlaps %s (buffer %d, byte %lld): "
                    "the header says such a call is refused", v->name,
                    v->role == FZ_INDEX ? "itself" : "itself or another tensor of the call",
                    v->buf, (long long)at);
    }
}

static void compare_outputs(judge *j)
{
    fz_case *c = j->c;
    for (int i = 0; i < c->nv; i++) {
        const fz_view *v = &c->v[i];
        if ((v->role != FZ_OUT && v->role != FZ_STATE) || !fz_view_comparable(c, i))
            continue;
        double tol = v->t->dtype == GDN_F32 ? c->tol_f32 : 1e-2;
        double d = fz_view_distance(c, i);
        if (!(d <= tol))
            finding(j, "cpu and ref disagree on %s: relative L2 distance %.3g > %.0e", v->name,
                    d, tol);
    }
}

/* The call on the tested context, then (from the same bytes) on the reference. */
static void run_and_check(judge *j, const fz_env *env, gdn_context *ctx)
{
    fz_case *c = j->c;
    const char *fn = op_fn[c->op];
    bool comparable = comparable_inputs(c);
    if (ctx)
        own_workspace(j, ctx);
    own_workspace(j, env->ref);
    fz_arena_snapshot(c);
    size_t given = SIZE_MAX;
    void *ws = c->op == FZ_DELTA_RULE && ctx ? arrange_workspace(j, ctx, &given) : NULL;
    g_current = c->desc; /* arrange_workspace may have added to it */
    size_t bytes = BYTES_SENTINEL;
    gdn_status st = invoke(c, ctx, &bytes);
    if (!status_allowed(c->op, st))
        finding(j, "%s returned %s (%d), which it never should", fn, status_name(st), (int)st);
    if (st != GDN_OK) {
        check_message(j, ctx, fn, st);
        check_untouched(j, "the call failed");
        if (c->op == FZ_WORKSPACE_SIZE && !c->null_bytes && bytes != BYTES_SENTINEL)
            finding(j, "%s failed but wrote *bytes = %zu", fn, bytes);
        if (st == GDN_ERR_WORKSPACE && c->ws == WS_EXACT && given != SIZE_MAX)
            finding(j, "gdn_delta_rule wants more than the %zu bytes gdn_delta_rule_workspace_size "
                    "asked for", given);
    } else {
        if (ctx && *gdn_last_error(ctx))
            finding(j, "%s succeeded but left gdn_last_error = \"%s\"", fn, gdn_last_error(ctx));
        if (c->op == FZ_WORKSPACE_SIZE)
            check_untouched(j, "gdn_delta_rule_workspace_size writes nothing but *bytes");
        fz_arena_mark_written(c);
        check_no_stray_writes(j, "cpu");
        check_no_overlap_accepted(j);
    }
    if (ctx) {
        own_workspace(j, ctx);
        free(ws);
    }
    if (!ctx)
        return;
    fz_arena_save_cpu(c);
    fz_arena_restore(c);
    gdn_status ref = invoke(c, env->ref, &bytes);
    if (st != ref && !may_differ(st) && !may_differ(ref))
        finding(j, "cpu returned %s but ref returned %s (%s)", status_name(st), status_name(ref),
                *gdn_last_error(ctx) ? gdn_last_error(ctx) : gdn_last_error(env->ref));
    if (st != GDN_OK || ref != GDN_OK || c->op == FZ_WORKSPACE_SIZE)
        return;
    check_no_stray_writes(j, "ref");
    if (comparable)
        compare_outputs(j);
}

/* ---- building a case ------------------------------------------------------------------------ */

/* Generates op within the budget (regenerating smaller when over), allocates and fills it.
 * False if no case fit (then nothing is allocated). */
static bool build(fz_case *c, fz_src *s, fz_op op, int shrink)
{
    int pick = c->ctx_pick;
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        memset(c, 0, sizeof *c);
        c->ctx_pick = pick;
        fz_gen_op(c, s, op, shrink + tries);
        if (fz_arena_bytes(c) <= BYTES_CAP && fz_gen_work(c) <= WORK_CAP) {
            if (!fz_arena_alloc(c)) {
                fz_arena_free(c);
                return false;
            }
            fz_arena_fill(c, &s->data);
            return true;
        }
    }
    return false;
}

static int pick_context(const fz_env *env, fz_src *s)
{
    /* the 1- and 2-thread contexts at the best ISA level alternate; lower levels less often */
    const int w[FZ_MAX_CPU + 1] = {35, 35, env->ncpu > 2 ? 12 : 0, env->ncpu > 3 ? 12 : 0, 2};
    int k = fz_weighted(s, w, FZ_MAX_CPU + 1);
    return k == FZ_MAX_CPU || k >= env->ncpu ? -1 : k;
}

/* ---- context cases -------------------------------------------------------------------------- */

static bool options_valid(const gdn_context_options *o)
{
#ifdef GDN_MAX_THREADS
    if (o->num_threads > GDN_MAX_THREADS)
        return false;
#endif
    return (unsigned)o->backend <= GDN_BACKEND_CUDA && o->num_threads >= 0 &&
           o->cuda_device >= 0 && (unsigned)o->cpu_isa <= GDN_ISA_AMX;
}

/* What a created context must report about itself. */
static void check_created(judge *j, gdn_context *ctx, const gdn_context_options *o)
{
    gdn_backend b = gdn_context_backend(ctx);
    if (b == GDN_BACKEND_AUTO || (o->backend != GDN_BACKEND_AUTO && b != o->backend))
        finding(j, "the context's backend is %s, asked for %s", gdn_backend_name(b),
                gdn_backend_name(o->backend));
    int threads = gdn_context_num_threads(ctx);
    if (b == GDN_BACKEND_REF && threads != 1)
        finding(j, "a ref context reports %d threads", threads);
    if (b == GDN_BACKEND_CPU && (threads < 1 || (o->num_threads > 0 && threads > o->num_threads)))
        finding(j, "a cpu context asked for %d threads reports %d", (int)o->num_threads, threads);
    gdn_cpu_isa isa = gdn_context_cpu_isa(ctx);
    if (b == GDN_BACKEND_CPU && o->cpu_isa != GDN_ISA_AUTO && isa != o->cpu_isa)
        finding(j, "a cpu context asked for ISA %d reports %d", (int)o->cpu_isa, (int)isa);
    if (b != GDN_BACKEND_CPU && isa != GDN_ISA_AUTO)
        finding(j, "a %s context reports cpu ISA %d", gdn_backend_name(b), (int)isa);
}

static void expect(judge *j, const char *call, gdn_status got, gdn_status want)
{
    if (got != want)
        finding(j, "%s returned %s, expected %s", call, status_name(got), status_name(want));
}

/* The workspace calls' documented answers, on a fresh context and on NULL. */
static void probe_workspace_api(judge *j, gdn_context *ctx)
{
    expect(j, "gdn_context_reserve_workspace(ctx, 4097)", gdn_context_reserve_workspace(ctx, 4097),
           GDN_OK);
    const size_t absurd[2] = {(size_t)1 << 62, SIZE_MAX};
    for (int i = 0; i < 2; i++) {
        gdn_status st = gdn_context_reserve_workspace(ctx, absurd[i]);
        if (!refused_as_too_big(st))
            finding(j, "gdn_context_reserve_workspace(ctx, %zu) returned %s, expected "
                    "GDN_ERR_NO_MEMORY or GDN_ERR_VALUE", absurd[i], status_name(st));
        else
            check_message(j, ctx, "gdn_context_reserve_workspace", st);
    }
    const size_t n = 1000;
    unsigned char *mem = aligned_bytes(n + 64);
    expect(j, "gdn_context_set_workspace(ctx, mem + 8, n)",
           gdn_context_set_workspace(ctx, mem + 8, n), GDN_ERR_VALUE);
    expect(j, "gdn_context_set_workspace(ctx, NULL, n)", gdn_context_set_workspace(ctx, NULL, n),
           GDN_ERR_NULL);
    expect(j, "gdn_context_set_workspace(ctx, mem, n)", gdn_context_set_workspace(ctx, mem, n),
           GDN_OK);
    expect(j, "gdn_context_reserve_workspace(ctx, n) with n caller bytes",
           gdn_context_reserve_workspace(ctx, n), GDN_OK);
    expect(j, "gdn_context_reserve_workspace(ctx, n + 1) with n caller bytes",
           gdn_context_reserve_workspace(ctx, n + 1), GDN_ERR_WORKSPACE);
    expect(j, "gdn_context_set_workspace(ctx, NULL, 0)", gdn_context_set_workspace(ctx, NULL, 0),
           GDN_OK);
    free(mem);
    expect(j, "gdn_context_set_stream(ctx, 0x1000)",
           gdn_context_set_stream(ctx, (void *)(uintptr_t)0x1000), GDN_OK);
    expect(j, "gdn_context_set_workspace(NULL, NULL, 0)", gdn_context_set_workspace(NULL, NULL, 0),
           GDN_ERR_NULL);
    expect(j, "gdn_context_reserve_workspace(NULL, 1)", gdn_context_reserve_workspace(NULL, 1),
           GDN_ERR_NULL);
    if (gdn_context_num_threads(NULL) != 0 || gdn_context_backend(NULL) != GDN_BACKEND_AUTO ||
        gdn_context_cpu_isa(NULL) != GDN_ISA_AUTO)
        finding(j, "a NULL context does not report 0 threads, backend auto and ISA auto");
    gdn_context_destroy(NULL);
}

static int run_context_case(const fz_env *env, fz_case *c, fz_src *s, const char *label)
{
    static fz_case inner;
    judge j = {c, label, 0};
    fz_gen_context_options(c, s);
    const gdn_context_options *o = &c->copts;
    char text[256];
    snprintf(text, sizeof text, "a context created with %s {backend %d, num_threads %d, "
             "cuda_device %d, cpu_isa %d, cuda_stream %p}%s", c->copts_null ? "opts NULL, not"
             : "opts", (int)o->backend, (int)o->num_threads, (int)o->cuda_device,
             (int)o->cpu_isa, o->cuda_stream, c->cout_null ? " into a NULL ctx pointer" : "");
    c->op = FZ_CONTEXT;
    snprintf(c->desc, sizeof c->desc, "gdn_context_create: %s\n", text);
    g_current = c->desc;
    gdn_context *ctx = (gdn_context *)(uintptr_t)0x10; /* must be overwritten */
    gdn_status st = gdn_context_create(c->cout_null ? NULL : &ctx, c->copts_null ? NULL : o);
    bool valid = c->copts_null || options_valid(o);
    if (!status_allowed(FZ_CONTEXT, st))
        finding(&j, "gdn_context_create returned %s", status_name(st));
    if (c->cout_null || st != GDN_OK) {
        if (st == GDN_OK)
            finding(&j, "gdn_context_create succeeded into a NULL ctx pointer");
        else
            check_message(&j, NULL, "gdn_context_create", st);
        if (!c->cout_null && ctx != NULL)
            finding(&j, "gdn_context_create failed but left *ctx = %p, expected NULL", (void *)ctx);
        if (valid && (st == GDN_ERR_VALUE || st == GDN_ERR_NULL) && !c->cout_null)
            finding(&j, "gdn_context_create refused valid options with %s", status_name(st));
        return j.findings;
    }
    if (!valid)
        finding(&j, "gdn_context_create accepted invalid options");
    check_created(&j, ctx, c->copts_null ? &(gdn_context_options){0} : o);
    probe_workspace_api(&j, ctx);
    /* then an op on it, against the reference */
    inner.ctx_pick = 0;
    if (build(&inner, s, c->inner_op, 1)) {
        judge ji = {&inner, label, 0};
        describe(&inner, text);
        run_and_check(&ji, env, ctx);
        j.findings += ji.findings;
        fz_arena_free(&inner);
    }
    gdn_context_destroy(ctx);
    return j.findings;
}

/* ---- the environment and the entry point ---------------------------------------------------- */

static gdn_context *make_context(gdn_backend b, int threads, gdn_cpu_isa isa)
{
    gdn_context_options o = gdn_context_default_options();
    o.backend = b;
    o.num_threads = threads;
    o.cpu_isa = isa;
    gdn_context *ctx = NULL;
    return gdn_context_create(&ctx, &o) == GDN_OK ? ctx : NULL;
}

static void add_cpu(fz_env *e, int threads, gdn_cpu_isa isa)
{
    gdn_context *ctx = e->ncpu < FZ_MAX_CPU ? make_context(GDN_BACKEND_CPU, threads, isa) : NULL;
    if (!ctx)
        return;
    static const char *isas[] = {"auto", "scalar", "avx2", "avx512", "amx"};
    gdn_cpu_isa got = gdn_context_cpu_isa(ctx);
    snprintf(e->cpu_name[e->ncpu], sizeof e->cpu_name[0], "cpu (%d thread%s, %s)",
             gdn_context_num_threads(ctx), gdn_context_num_threads(ctx) == 1 ? "" : "s",
             (unsigned)got <= GDN_ISA_AMX ? isas[got] : "?");
    e->cpu[e->ncpu++] = ctx;
}

bool fz_env_init(fz_env *e)
{
    memset(e, 0, sizeof *e);
    e->ref = make_context(GDN_BACKEND_REF, 1, GDN_ISA_AUTO);
    add_cpu(e, 1, GDN_ISA_AUTO);
    add_cpu(e, 2, GDN_ISA_AUTO);
    gdn_cpu_isa best = e->ncpu ? gdn_context_cpu_isa(e->cpu[0]) : GDN_ISA_AUTO;
    if (best > GDN_ISA_AVX2)
        add_cpu(e, 2, GDN_ISA_AVX2);
    if (best > GDN_ISA_SCALAR)
        add_cpu(e, 1, GDN_ISA_SCALAR);
    if (!e->ref || e->ncpu < 2) {
        fprintf(stderr, "fuzz: cannot create the ref and cpu contexts: %s\n",
                gdn_last_error(NULL));
        fz_env_free(e);
        return false;
    }
    return true;
}

void fz_env_free(fz_env *e)
{
    gdn_context_destroy(e->ref);
    for (int i = 0; i < e->ncpu; i++)
        gdn_context_destroy(e->cpu[i]);
    memset(e, 0, sizeof *e);
}

int fz_run_one(const fz_env *env, fz_src *s, const char *label)
{
    static fz_case c;
    memset(&c, 0, sizeof c);
    fz_op op = fz_gen_pick_op(s);
    for (int k = 0; env->only && k < FZ_OPS; k++)
        if (!strcmp(env->only, op_fn[k]))
            op = (fz_op)k;
    g_entry_point = op_fn[op];
    c.ctx_pick = pick_context(env, s);
    int findings = 0;
    g_current = "(still building the case's arguments, with gdn_tensor_1d .. gdn_tensor_4d among "
                "others: the stack above names the call)";
    if (op == FZ_CONTEXT) {
        findings = run_context_case(env, &c, s, label);
    } else if (build(&c, s, op, 0)) {
        gdn_context *ctx = c.ctx_pick >= 0 ? env->cpu[c.ctx_pick] : NULL;
        describe(&c, c.ctx_pick >= 0 ? env->cpu_name[c.ctx_pick] : "a NULL context");
        if (env->verbose)
            fprintf(stderr, "%s: %s", label, c.desc);
        judge j = {&c, label, 0};
        run_and_check(&j, env, ctx);
        findings = j.findings;
        fz_arena_free(&c);
    }
    g_current = "";
    return findings;
}
