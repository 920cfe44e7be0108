/* test_errors' fixtures: the valid small problem of every op, in buffers with slack that are
 * poisoned and snapshotted as a whole, and the one call each makes (errors_fixture.h). */
#include "errors_fixture.h"
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------------ */

static rng g_rng;

/* A contiguous tensor in a buffer with slack (so a mutated view that is wrongly accepted still
 * lands in memory we own, and writes into the slack are caught by the snapshot too). */
static gdn_tensor fx_add(fixture *f, const char *name, int poison, gdn_dtype dt, int ndim,
                         const int64_t *shape)
{
    if (f->n >= MAXBUF) {
        fprintf(stderr, "fixture: too many buffers\n");
        exit(2);
    }
    gdn_tensor t = gdn_tensor_none();
    t.dtype = dt;
    t.ndim = ndim;
    int64_t numel = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = numel;
        numel *= shape[d];
    }
    size_t nominal = (size_t)numel * gdn_dtype_size(dt);
    size_t bytes = 4 * nominal + 1024;
    unsigned char *p = calloc(bytes, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    t.data = p;
    if (dt == GDN_F32 || dt == GDN_BF16 || dt == GDN_F16)
        tensor_fill_uniform(&t, &g_rng, -1.0, 1.0);
    f->name[f->n] = name;
    f->p[f->n] = p;
    f->bytes[f->n] = bytes;
    f->poison[f->n] = poison;
    f->snap[f->n] = NULL;
    f->n++;
    return t;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(f, name, poison, dt, ...)                                                             \
    fx_add(f, name, poison, dt, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

static gdn_tensor fx_index(fixture *f, const char *name, gdn_dtype dt, int n, const int64_t *vals)
{
    gdn_tensor t = fx_add(f, name, 0, dt, 1, SHAPE(n));
    for (int i = 0; i < n; i++)
        tensor_set(&t, i, (double)vals[i]);
    return t;
}

void fx_poison(fixture *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->poison[i])
            memset(f->p[i], POISON, f->bytes[i]);
}

void fx_snapshot(fixture *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->snap[i]);
        f->snap[i] = malloc(f->bytes[i]);
        if (!f->snap[i])
            exit(2);
        memcpy(f->snap[i], f->p[i], f->bytes[i]);
    }
}

/* Index of the first buffer that differs from its snapshot, or -1. */
int fx_changed(const fixture *f)
{
    for (int i = 0; i < f->n; i++)
        if (memcmp(f->snap[i], f->p[i], f->bytes[i]) != 0)
            return i;
    return -1;
}

int fx_find(const fixture *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->name[i], name) == 0)
            return i;
    return -1;
}

void fx_free(fixture *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->p[i]);
        free(f->snap[i]);
    }
    f->n = 0;
}

/* ---- one call of one op ------------------------------------------------------------------- */

const char *const op_fn[] = {"gdn_conv1d", "gdn_conv1d_update", "gdn_gating", "gdn_l2norm",
                             "gdn_rmsnorm_gated", "gdn_delta_rule",
                             "gdn_delta_rule_workspace_size"};

gdn_status invoke(call *c)
{
    switch (c->op) {
    case OP_CONV: return gdn_conv1d(c->ctx, c->null_args ? NULL : &c->conv);
    case OP_UPD: return gdn_conv1d_update(c->ctx, c->null_args ? NULL : &c->upd);
    case OP_GATE:
        return gdn_gating(c->ctx, c->null_in ? NULL : &c->a, &c->b, c->null_args ? NULL : &c->gp,
                          c->null_out ? NULL : &c->g_out, &c->beta_out);
    case OP_L2:
        return gdn_l2norm(c->ctx, c->null_in ? NULL : &c->x, c->null_out ? NULL : &c->out, c->eps);
    case OP_RMS: return gdn_rmsnorm_gated(c->ctx, c->null_args ? NULL : &c->rms);
    case OP_DR: return gdn_delta_rule(c->ctx, c->null_args ? NULL : &c->dr);
    case OP_DRWS:
        return gdn_delta_rule_workspace_size(c->ctx, c->null_args ? NULL : &c->dr,
                                             c->null_bytes ? NULL : &c->bytes);
    }
    return GDN_ERR_INTERNAL;
}

/* ---- the valid problems ------------------------------------------------------------------- */

const char *const fx_name[FX_COUNT] = {"conv1d", "conv1d/varlen", "conv1d_update", "gating",
                                       "l2norm", "rmsnorm", "delta", "delta/vk",
                                       "delta/varlen", "delta/gate", "delta_ws"};

static void build_delta(fixture *f, call *c, int fx)
{
    const int64_t H = 2, HV = 4, K = 8, V = 6, S = 4;
    int varlen = fx == FX_DR_VAR;
    int64_t B = varlen ? 1 : 2, T = varlen ? 9 : 5;
    gdn_dtype dt = fx == FX_DR_VK ? GDN_BF16 : GDN_F32;
    gdn_delta_rule_args *a = &c->dr;
    *a = gdn_delta_rule_default_args();
    a->q = ADD(f, "q", 0, dt, B, T, H, K);
    a->k = ADD(f, "k", 0, dt, B, T, H, K);
    a->v = ADD(f, "v", 0, dt, B, T, HV, V);
    a->g = ADD(f, "g", 0, GDN_F32, B, T, HV);
    a->beta = ADD(f, "beta", 0, fx == FX_DR_VAR ? GDN_BF16 : GDN_F32, B, T, HV);
    if (fx != FX_DR_GATE) {
        tensor_fill_uniform(&a->g, &g_rng, -1.0, 0.0);
        tensor_fill_uniform(&a->beta, &g_rng, 0.0, 1.0);
    }
    a->out = ADD(f, "out", 1, dt, B, T, HV, V);
    if (fx == FX_DR_VK) {
        a->state_layout = GDN_STATE_VK;
        a->state = ADD(f, "state", 1, GDN_F32, S, HV, V, K);
    } else {
        a->state = ADD(f, "state", 1, fx == FX_DR_VAR ? GDN_BF16 : GDN_F32, S, HV, K, V);
    }
    if (varlen) {
        a->cu_seqlens = fx_index(f, "cu_seqlens", GDN_I64, 3, SHAPE(0, 4, 9));
        a->state_slots = fx_index(f, "state_slots", GDN_I64, 2, SHAPE(0, 2));
        a->has_initial_state = fx_index(f, "has_initial_state", GDN_I32, 2, SHAPE(0, 1));
    } else {
        a->state_slots = fx_index(f, "state_slots", GDN_I32, 2, SHAPE(3, 1));
        a->has_initial_state = fx_index(f, "has_initial_state", GDN_U8, 2, SHAPE(1, 0));
    }
    if (fx == FX_DR_GATE) {
        a->gate_in_kernel = 1;
        a->qk_l2norm = 1;
        a->gating.A = ADD(f, "A", 0, GDN_F32, HV);
        a->gating.dt_bias = ADD(f, "dt_bias", 0, GDN_F32, HV);
    }
    c->op = fx == FX_DRWS ? OP_DRWS : OP_DR;
}

void build(int fx, fixture *f, call *c, gdn_context *ctx)
{
    memset(c, 0, sizeof *c);
    memset(f, 0, sizeof *f);
    g_rng = rng_seed(1234 + (uint64_t)fx);
    c->ctx = ctx;
    c->bytes = BYTES_SENTINEL;
    switch (fx) {
    case FX_CONV: {
        gdn_conv1d_args *a = &c->conv;
        *a = gdn_conv1d_default_args();
        a->x = ADD(f, "x", 0, GDN_F32, 2, 5, 6);
        a->weight = ADD(f, "weight", 0, GDN_F32, 6, 4);
        a->bias = ADD(f, "bias", 0, GDN_BF16, 6);
        a->out = ADD(f, "out", 1, GDN_F32, 2, 5, 6);
        a->conv_state = ADD(f, "conv_state", 1, GDN_F32, 4, 6, 3);
        a->state_slots = fx_index(f, "state_slots", GDN_I32, 2, SHAPE(2, 0));
        a->has_initial_state = fx_index(f, "has_initial_state", GDN_U8, 2, SHAPE(1, 0));
        c->op = OP_CONV;
        break;
    }
    case FX_CONV_VAR: {
        gdn_conv1d_args *a = &c->conv;
        *a = gdn_conv1d_default_args();
        a->x = ADD(f, "x", 0, GDN_F32, 1, 7, 6);
        a->weight = ADD(f, "weight", 0, GDN_F32, 6, 4);
        a->out = ADD(f, "out", 1, GDN_F16, 1, 7, 6);
        a->conv_state = ADD(f, "conv_state", 1, GDN_F32, 4, 6, 3);
        a->cu_seqlens = fx_index(f, "cu_seqlens", GDN_I32, 3, SHAPE(0, 3, 7));
        a->state_slots = fx_index(f, "state_slots", GDN_I64, 2, SHAPE(1, 3));
        a->has_initial_state = fx_index(f, "has_initial_state", GDN_I32, 2, SHAPE(0, 1));
        c->op = OP_CONV;
        break;
    }
    case FX_UPD: {
        gdn_conv1d_update_args *a = &c->upd;
        *a = gdn_conv1d_update_default_args();
        a->x = ADD(f, "x", 0, GDN_BF16, 3, 6);
        a->weight = ADD(f, "weight", 0, GDN_F32, 6, 4);
        a->bias = ADD(f, "bias", 0, GDN_F32, 6);
        a->out = ADD(f, "out", 1, GDN_BF16, 3, 6);
        a->conv_state = ADD(f, "conv_state", 1, GDN_BF16, 4, 6, 3);
        a->state_slots = fx_index(f, "state_slots", GDN_I64, 3, SHAPE(1, -1, 3));
        c->op = OP_UPD;
        break;
    }
    case FX_GATE:
        c->a = ADD(f, "a", 0, GDN_F32, 2, 5, 4);
        c->b = ADD(f, "b", 0, GDN_BF16, 2, 5, 4);
        c->gp = gdn_gating_default_params();
        c->gp.A = ADD(f, "A", 0, GDN_F32, 4);
        c->gp.dt_bias = ADD(f, "dt_bias", 0, GDN_F32, 4);
        c->g_out = ADD(f, "g_out", 1, GDN_F32, 2, 5, 4);
        c->beta_out = ADD(f, "beta_out", 1, GDN_BF16, 2, 5, 4);
        c->op = OP_GATE;
        break;
    case FX_L2:
        c->x = ADD(f, "x", 0, GDN_F32, 2, 3, 8);
        c->out = ADD(f, "out", 1, GDN_BF16, 2, 3, 8);
        c->eps = GDN_L2NORM_EPS;
        c->op = OP_L2;
        break;
    case FX_RMS: {
        gdn_rmsnorm_args *a = &c->rms;
        *a = gdn_rmsnorm_default_args();
        a->x = ADD(f, "x", 0, GDN_F32, 2, 4, 6);
        a->z = ADD(f, "z", 0, GDN_BF16, 2, 4, 6);
        a->weight = ADD(f, "weight", 0, GDN_F32, 6);
        a->out = ADD(f, "out", 1, GDN_F32, 2, 4, 6);
        c->op = OP_RMS;
        break;
    }
    default:
        build_delta(f, c, fx);
        break;
    }
}
