/* The CPU backend: a thread pool, a runtime-selected ISA level and kernels compiled once per
 * level (cpu_recurrent_<isa>.c share cpu_recurrent_impl.h). Its files call one another one way
 * only: cpu_backend.c (op table, ISA level, recurrent dispatch) -> cpu_chunked.c (the chunked
 * driver), cpu_pointwise.c and the kernels (cpu_recurrent_<isa>.c, cpu_chunked_<isa>.c) ->
 * cpu_gates.c, cpu_pool.c -> src/core (and src/ref's gating and norm formulas). */
#ifndef GDN_CPU_H
#define GDN_CPU_H

#include "../core/gdn_internal.h"
#include "cpu_pool.h"

#include <string.h>

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
    } else if (t->dtype == GDN_BF16) { /* bf16 is the top half of an f32: a shift, no rounding */
        const uint16_t *src = (const uint16_t *)t->data + off;
        for (int64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)src[i] << 16;
            memcpy(dst + i, &bits, sizeof bits);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)gdn_load(t, off + i);
    }
}

/* Writes src[0 .. n-1] to elements off .. off+n-1 of a float tensor's contiguous last
 * dimension, rounding to its dtype as gdn_store does. */
static inline void cpu_store_f32(const gdn_tensor *t, int64_t off, int64_t n, const float *src)
{
    if (t->dtype == GDN_F32) {
        memcpy((float *)t->data + off, src, (size_t)n * sizeof *src);
    } else if (t->dtype == GDN_BF16) {
        uint16_t *dst = (uint16_t *)t->data + off;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, src + i, sizeof u);
            dst[i] = gdn_bf16_bits(u);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            gdn_store(t, off + i, src[i]);
    }
}

/* ---- The chunked WY form (cpu_chunked.c drives it; cpu_chunked_<isa>.c compute it) ----------
 * Sizes are padded to a multiple of the kernels' `pad` (their micro-tile width) and padding is
 * zero, so the micro-kernels never see a partial tile. One chunk of L <= C tokens: */
typedef struct cpu_chunk_geom {
    int64_t C, K, V;        /* chunk length, key and value dims */
    int64_t Cp, Kp, Vp;     /* the same, padded */
    int64_t ldv;            /* row stride (floats) of the f32 [., Vp] buffers: S, U and O. Vp
                             * plus one 64-byte line: at Vp = 128 a row is 512 bytes, and a
                             * 32-column panel of S (128 rows: K S and Q S read it once per row
                             * block, the bf16 update writes it and then reads it for its words)
                             * fell into 16 of L1's 64 sets, more lines than their ways, so each
                             * reader took it from L2 again */
    float scale;
    bool l2norm;            /* the call asks for q, k L2 norm (bf16_qk kernels apply it) */
    bool fast;              /* GDN_PRECISION_FAST: the bf16 kernels' products take the hi parts
                             * of their operands only (the f32 kernels ignore it) */
} cpu_chunk_geom;

/* Memory traffic the driver spreads over the kernels' arithmetic (the fused schedule: the last
 * chunk's output rows and the next chunk's input rows). Issued in a burst, each head's lines of
 * it wait on the core's few outstanding misses; a few lines between product tiles go out while
 * the tiles compute. Kernels call cpu_pump_step between tiles; NULL pumps nothing. */
typedef struct cpu_pump {
    void (*step)(struct cpu_pump *);
} cpu_pump;

static inline void cpu_pump_step(cpu_pump *p)
{
    if (p)
        p->step(p);
}

/* What a chunk's queries and keys give, shared by the value heads of one key head (GVA): the
 * driver fills Q, K, iq, ik (rows >= L zero), prep_keys the rest. */
typedef struct cpu_chunk_keys {
    float *Q, *K;           /* [Cp, Kp] queries and keys as f32, normalised when the call asks.
                             * bf16_qk kernels: the bf16 inputs as they came, [Cp, Kp] uint16
                             * rows in these areas */
    float *iq, *ik;         /* [Cp] bf16_qk kernels: 1/||q_i||, 1/||k_i|| when the call
                             * normalises (1 otherwise), set by prep_keys */
    float *QK, *KK;         /* [Cp, Cp] q_i.k_j and k_i.k_j of the normalised rows (bf16: only
                             * the 32 x 32 blocks on and below the diagonal, which gating keeps) */
    float *KT;              /* [Kp, Cp] K^T (bf16: as bf16 rows) */
    cpu_pump *pump;         /* stepped by prep_keys' products (pumped kernels) */
} cpu_chunk_keys;

/* One value head's share of a chunk, filled by the driver (rows >= L zero, beta 0, G held at
 * G[L-1]) and then worked in place by the prep kernel. */
typedef struct cpu_chunk_inputs {
    float *A;               /* [Cp, Cp] scratch: strictly lower beta_i k_i.k_j e^(G_i - G_j) */
    float *Tinv;            /* [Cp, Cp] scratch: (I + A)^-1 */
    float *G, *beta;        /* [Cp] cumulative log-decay within the chunk, write strength */
} cpu_chunk_inputs;

/* What the state pass needs from a chunk and value head, beside its keys. The f32 kernels' use
 * of each area is given first; the bf16 kernels' (cpu_chunked_bf16_impl.h, both product
 * engines) after "bf16:". */
typedef struct cpu_chunk_record {
    float *W;               /* [Cp, Kp] K' = -diag(e^G) K.  bf16: unused */
    float *U;               /* [Cp, Vp] (rows ldv apart) the values V (the driver loads them
                             * here); the state pass turns them into
                             * V' = (I + A)^-1 diag(beta) (V + K' S).  bf16: the same, from the
                             * residual formed in f32 */
    float *KT;              /* [Kp, Cp] K^T with column m scaled by e^(G_last - G_m).  bf16:
                             * unused */
    float *P;               /* [Cp, Cp] lower scale q_i.k_j e^(G_i - G_j), j <= i.  bf16: each
                             * row as its hi then its lo bf16 parts, in the same bytes */
    float *T;               /* [Cp, Cp] (I + A)^-1 diag(beta).  bf16: (I + A)^-1 as hi and lo
                             * bf16 parts */
    float *rows;            /* [4 Cp] per-row factors: f32 kernels scale e^G_i of O's row i
                             * (the queries'), bf16 kernels see bf16_prep */
    float *decay;           /* [1] e^G_last */
    cpu_pump *pump;         /* stepped by prep's and the state pass's products (pumped
                             * kernels) */
} cpu_chunk_record;

typedef struct cpu_chunk_kernels {
    int64_t pad;            /* every padded size is a multiple of this */
    int64_t chunk;          /* the chunk length run when the call leaves it to the backend */
    bool bf16_qk;           /* takes q, k as their bf16 input rows (it is only given bf16
                             * inputs) and applies their L2 norm itself, as factors on f32
                             * results (a normalised row rounded again would cost q.k and k.k
                             * up to 2^-9 |q||k|) */
    bool pumped;            /* steps keys->pump and rec->pump between product tiles; else the
                             * driver moves its traffic in bursts (the AMX kernels measured no
                             * faster with the pump's lines among their tiles, after each tile
                             * block or each depth step: docs/DESIGN.md) */
    /* cpu_load_f32 and cpu_store_f32 compiled for the level (the driver's own build is the
     * baseline ISA, and bf16 rows convert 4 lanes at a time there); store_row writes f32 rows
     * (and bf16 ones at avx512) with streaming stores, which the driver orders with an sfence
     * before its task ends */
    void (*load_row)(const gdn_tensor *t, int64_t off, int64_t n, float *dst);
    void (*store_row)(const gdn_tensor *t, int64_t off, int64_t n, const float *src);
    /* floats of per-call scratch the kernels need (each worker has its own) */
    size_t (*scratch_floats)(const cpu_chunk_geom *g);
    /* keys: the products of the chunk's q and k, once per key head */
    void (*prep_keys)(const cpu_chunk_geom *g, cpu_chunk_keys *keys, float *scratch);
    /* keys, in -> rec: everything of one value head that does not depend on the state */
    void (*prep)(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_inputs *in,
                 cpu_chunk_record *rec, float *scratch);
    /* Columns [c0, c0 + nc) of the state S [Kp, Vp] (c0, nc multiples of pad): V' (from the
     * residual V - e^G K S: (I + A)^-1 diag(beta) R), the output O [Cp, Vp] =
     * diag(scale e^G) Q S + P V' and S = decay S + KT V'. */
    void (*state)(const cpu_chunk_geom *g, const cpu_chunk_keys *keys, cpu_chunk_record *rec,
                  float *S, int64_t c0, int64_t nc, float *O, float *scratch);
    /* What a head's state carries beside S (NULL: nothing): state_extra_floats floats right
     * after S [Kp, Vp], which state_begin sets up once the driver has loaded S (before the first
     * chunk) and state_end folds back into S before the driver stores it (after the last). */
    size_t (*state_extra_floats)(const cpu_chunk_geom *g);
    void (*state_begin)(const cpu_chunk_geom *g, float *S);
    void (*state_end)(const cpu_chunk_geom *g, float *S);
} cpu_chunk_kernels;

extern const cpu_chunk_kernels cpu_chunk_scalar, cpu_chunk_avx2, cpu_chunk_avx512;
/* The bf16-input kernels (cpu_chunked_bf16_impl.h): bf16 operands with f32 accumulation and
 * state, the products on AMX tiles (cpu_chunked_amx.c) or by AVX512-BF16 dot products
 * (cpu_chunked_avx512bf16.c); NULL when the build has no support for them. */
extern const cpu_chunk_kernels *const cpu_chunk_amx;
extern const cpu_chunk_kernels *const cpu_chunk_avx512bf16;

typedef struct cpu_backend_state {
    cpu_pool *pool;
    gdn_cpu_isa isa;  /* active level: SCALAR, AVX2, AVX512 or AMX (avx512 + AMX products) */
    const cpu_chunk_kernels *chunk; /* that level's chunked kernels */
    const cpu_chunk_kernels *chunk_bf16; /* the level's kernels for bf16 q, k, v: AMX products
                                          * at amx, AVX512-BF16 dot products at avx512 where
                                          * the CPU has them; else NULL (the f32 kernels run
                                          * on converted rows) */
} cpu_backend_state;

/* The log-decay g and write strength beta of token `tok` of value head hv in batch row `row`,
 * gated by the reference's formulas when the call asks for in-kernel gating (cpu_gates.c). */
void cpu_token_gates(const gdn_delta_rule_problem *p, int64_t row, int64_t tok, int64_t hv,
                     double *g, double *beta);

/* cpu_pointwise.c */
gdn_status cpu_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p);
gdn_status cpu_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p);
gdn_status cpu_gating(gdn_context *ctx, const gdn_gating_problem *p);
gdn_status cpu_l2norm(gdn_context *ctx, const gdn_l2norm_problem *p);
gdn_status cpu_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_problem *p);
void cpu_recurrent_scalar(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);
void cpu_recurrent_avx2(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);
void cpu_recurrent_avx512(const gdn_delta_rule_problem *p, int64_t n, int64_t hv, float *scratch);

/* cpu_chunked.c: the chunked WY form over (sequence, value head) tasks, or for fewer tasks than
 * threads in two phases (chunk preparation parallel over chunks, then the state pass parallel over
 * column blocks of the state). */
bool cpu_chunked_wanted(const cpu_backend_state *s, const gdn_delta_rule_problem *p);
size_t cpu_chunked_workspace(const cpu_backend_state *s, const gdn_delta_rule_problem *p);
void cpu_chunked_run(const cpu_backend_state *s, const gdn_delta_rule_problem *p, void *workspace);

#endif
