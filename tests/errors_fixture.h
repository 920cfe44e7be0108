/* test_errors' pieces (one executable of three files): the fixtures and the call they make
 * (errors_fixture.c), the table of bad cases (errors_cases.c), and the runner (test_errors.c). */
#ifndef GDN_TEST_ERRORS_FIXTURE_H
#define GDN_TEST_ERRORS_FIXTURE_H

#include "gdn.h"

#include <stddef.h>

#define POISON 0xA5
#define MAXBUF 16

/* ---- buffers: every tensor of a fixture, with slack, poisoned and snapshotted as a whole ---- */

typedef struct fixture {
    int n;
    const char *name[MAXBUF];
    unsigned char *p[MAXBUF];
    size_t bytes[MAXBUF];
    int poison[MAXBUF];    /* an output or a state pool */
    unsigned char *snap[MAXBUF];
} fixture;

void fx_poison(fixture *f);
void fx_snapshot(fixture *f);
/* Index of the first buffer that differs from its snapshot, or -1. */
int fx_changed(const fixture *f);
int fx_find(const fixture *f, const char *name);
void fx_free(fixture *f);

/* ---- one call of one op ------------------------------------------------------------------- */

enum { OP_CONV, OP_UPD, OP_GATE, OP_L2, OP_RMS, OP_DR, OP_DRWS };
extern const char *const op_fn[]; /* the function each OP_ calls: "gdn_conv1d", ... */

#define BYTES_SENTINEL ((size_t)0x5eadbeefu)

typedef struct call {
    int op;
    gdn_context *ctx;
    int null_args;  /* args struct (or gating params) pointer NULL */
    int null_in;    /* gating a / l2norm x pointer NULL */
    int null_out;   /* gating g_out / l2norm out pointer NULL */
    int null_bytes; /* workspace_size bytes pointer NULL */
    gdn_conv1d_args conv;
    gdn_conv1d_update_args upd;
    gdn_tensor a, b, g_out, beta_out; /* gating */
    gdn_gating_params gp;
    gdn_tensor x, out; /* l2norm */
    float eps;
    gdn_rmsnorm_args rms;
    gdn_delta_rule_args dr;
    size_t bytes;
} call;

gdn_status invoke(call *c);

/* ---- the valid problems ------------------------------------------------------------------- */

enum {
    FX_CONV,      /* conv1d B=2 T=5 C=6 W=4, pool of 4, slots, has_initial_state */
    FX_CONV_VAR,  /* conv1d varlen: B=1 T=7, cu_seqlens {0,3,7} */
    FX_UPD,       /* conv1d_update N=3 (bf16), slots {1,-1,3} */
    FX_GATE,      /* gating [2,5,4] */
    FX_L2,        /* l2norm [2,3,8] */
    FX_RMS,       /* rmsnorm_gated [2,4,6] with z and weight */
    FX_DR,        /* delta rule B=2 T=5 H=2 HV=4 K=8 V=6, KV pool of 4 (f32) */
    FX_DR_VK,     /* the same in bf16 with a VK pool */
    FX_DR_VAR,    /* varlen B=1 T=9 cu_seqlens {0,4,9} (i64), bf16 KV pool */
    FX_DR_GATE,   /* gate_in_kernel + qk_l2norm */
    FX_DRWS,      /* gdn_delta_rule_workspace_size on FX_DR's problem */
    FX_COUNT
};
extern const char *const fx_name[FX_COUNT];

/* Fills f with fixture fx's buffers (the same numbers every time) and c with its call on ctx. */
void build(int fx, fixture *f, call *c, gdn_context *ctx);

/* ---- the table (errors_cases.c) ----------------------------------------------------------- */

typedef struct bad_case {
    int fx;
    const char *name;
    void (*mut)(call *);
    gdn_status expect;
    const char *msg; /* substring of gdn_last_error(); for GDN_OK the error must be "" */
} bad_case;

extern const bad_case bad_cases[];
extern const size_t n_bad_cases;

#endif
