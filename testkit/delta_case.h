/* Random gated-delta-rule problems for tests and `gdn check`: inputs drawn so the recurrence is
 * stable (unit keys, beta in (0, 1] or (0, 2) with allow_neg_eigval), every layout option, a
 * state pool with slot indirection, and outputs poisoned before each run. */
#ifndef GDN_TESTKIT_DELTA_CASE_H
#define GDN_TESTKIT_DELTA_CASE_H

#include "common.h"

typedef struct delta_config {
    int64_t nseq;            /* sequences */
    const int64_t *lens;     /* varlen: nseq lengths (packed, B = 1); NULL: nseq rows of T */
    int64_t T;               /* tokens per sequence when lens is NULL */
    int64_t H, HV, K, V;
    gdn_dtype dtype;         /* q, k, v */
    gdn_dtype out_dtype;     /* out */
    gdn_dtype gate_dtype;    /* g, beta */
    gdn_dtype state_dtype;   /* pool */
    gdn_dtype index_dtype;   /* cu_seqlens, state_slots */
    gdn_state_layout layout;
    gdn_gva gva;
    int chunk;               /* 0 = default */
    bool qk_l2norm;          /* normalise in the kernel (else keys are drawn unit-norm) */
    bool gate_in_kernel;     /* pass raw a, b and A_log/dt_bias */
    bool fused_qkv;          /* q, k, v are strided views of one [.., 2HK + HV*V] buffer */
    bool pool;               /* a state pool (S = nseq + 2) with permuted slots */
    bool unslotted;          /* the pool without state_slots: sequence n owns slot n (needs
                                pool, no padding) */
    bool padding;            /* some sequences get slot -1 (needs pool with slots) */
    bool fresh_starts;       /* some sequences have has_initial_state = 0 (needs pool) */
    bool predictable;        /* long memory: each value is a fixed linear map (one per value
                              * head) of its unit key plus 1% noise, and decay is slow, so the
                              * state learns to predict v and v - S^T k nearly cancels */
    double value_scale;      /* v and the pool's initial states drawn this many times their
                              * usual size (0: 1); every output and state scales with them */
    gdn_precision precision; /* the call's precision mode */
} delta_config;

/* Defaults: one sequence of 16 tokens, H = HV = 1, K = V = 16, f32 everywhere, no pool,
 * precision high (the tests' 5e-5 bars; fast-mode tests ask for GDN_PRECISION_FAST). */
delta_config delta_config_default(void);
/* Long-memory case i (predictable values, options drawn at random, a pool): i % 3 picks one
 * sequence of 2000 tokens at K = V = 32 (H = 1, HV = 2), seven varlen sequences of 0 to 300
 * tokens (empty and one-token ones among them) at the same sizes, or 700 tokens at K = V = 128. */
delta_config delta_config_long_memory(int i, rng *r);
/* Draws every option of f at random (dtypes, index dtype, layout, GVA, L2 norm, gating, fused
 * q/k/v, padding and fresh starts when there is a pool); shapes and f->pool are left alone. */
void delta_config_random_options(delta_config *f, rng *r);

typedef struct delta_case {
    delta_config cfg;
    int64_t *lens;           /* nseq lengths (copied) */
    int64_t B, T;            /* token tensors are [B, T, ...] */
    gdn_tensor qkv;          /* the fused buffer when cfg.fused_qkv */
    gdn_tensor q, k, v, g, beta, out;
    gdn_tensor state, state0;     /* the pool, and its initial contents */
    gdn_tensor slots, has_init, cu;
    gdn_tensor A_log, dt_bias;
    int32_t allow_neg_eigval;
    gdn_delta_rule_args args;
} delta_case;

void delta_case_init(delta_case *c, const delta_config *cfg, rng *r);
void delta_case_free(delta_case *c);
/* Restores the pool to its initial contents and poisons out. */
void delta_case_reset(delta_case *c);
/* reset + gdn_delta_rule with the given algorithm. */
gdn_status delta_case_run(gdn_context *ctx, delta_case *c, gdn_algorithm algo);
/* Slot of sequence n (-1: skipped, or no pool; n for a pool without state_slots). */
int64_t delta_case_slot(const delta_case *c, int64_t n);
/* True when every output row of a skipped sequence still holds the poison pattern and every
 * pool slot no sequence names is unchanged. */
bool delta_case_untouched(const delta_case *c);
/* Short description for tables: "N=3 T=var H=2 HV=4 K=16 V=32 bf16 VK tiled C=32 ...". */
void delta_case_describe(const delta_case *c, char *buf, size_t n);

/* Dot products that cancel. With one token and no state the output is beta (q.k) v, so where
 * q.k is much smaller than sum_i |q_i k_i| any f32 evaluation's rounding shows magnified, past a
 * fixed relative bar; what can be held is that error against the sum. Runs n one-token
 * sequences (q, k, v of dtype dt, f32 beta and output, K = 96, V = 16, scale 1, beta in
 * [0.2, 1], q and k random unit vectors) on ctx with algo (through device copies when
 * `device`), and returns the largest output error against float64 (of the inputs as stored),
 * less what the arithmetic after the dot product may cost (f32: 16 u of the output's norm, a few
 * roundings and split tf32's 2^-21 on the tensor cores; 16-bit inputs: 2^-14, their products'
 * hi + lo operands), in units of u sum_i |q_i k_i| beta |v| (u = 2^-24); *st gets the call's
 * status. Both checks run the high precision mode. */
double delta_cancelling_dots(gdn_context *ctx, gdn_algorithm algo, bool device, gdn_dtype dt, int n,
                             rng *r, gdn_status *st);

/* Small attention scores without cancellation. n one-token sequences (q, k, v of dtype dt, f32
 * beta and output, K = 128, V = 16, the default scale) whose q.k is one product, +-c with c in
 * [2^-10, 2^-6) (q a signed unit basis vector, k = c times it plus another signed one), so the
 * score scale q.k is 9e-5 to 1.4e-3 yet nothing cancels: beta (q.k) v is as easy as any
 * product. Returns the worst relative L2 error of an output row against float64 (of the inputs
 * as stored); *st gets the call's status. */
double delta_small_scores(gdn_context *ctx, gdn_algorithm algo, bool device, gdn_dtype dt, int n,
                          rng *r, gdn_status *st);

/* Whether every output of c is scale beta (q.k) v: every sequence one token, and no pool (so no
 * initial state). Such an output's rounding is that of a dot product, relative to
 * sum_i |q_i k_i| rather than to |q.k| (delta_cancelling_dots): where q.k cancels, any f32
 * evaluation misses a fixed relative bar on the output, most of all when it has few elements. */
bool delta_case_one_token_outputs(const delta_case *c);
/* What scales rel_l2(out, want) into the error against those sums: for one_token_outputs
 * ||want|| / ||ref_ctx's outputs of c with |q| and |k| in place of q and k|| (their elements
 * scale beta (sum_i |q_i k_i|) v: the L2 norms and gates are the same), 1 for any other call.
 * Runs ref_ctx on c for that (c's out is overwritten; q and k are restored); *st gets the run's
 * status (GDN_OK when it does not run). */
double delta_case_one_token_measure(gdn_context *ref_ctx, delta_case *c, const gdn_tensor *want,
                                    gdn_status *st);

#endif
