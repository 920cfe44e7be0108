/* The CUDA backend's plan for one gdn_delta_rule call, in plain C (no CUDA headers), so that it
 * is built in every configuration and unit-tested on machines without a GPU
 * (tests/test_cuda_plan.c).
 *
 * The plan is a pure function of the problem's shape (cuda_chunk_shape), a few device
 * capabilities (cuda_chunk_caps) and the environment's overrides (cuda_chunk_env). It says which
 * form runs (recurrent or chunked) and, for the chunked form: its shared-memory sizes, whether the
 * state pass runs on warpgroup products (chunk_state_wg, sm_90a) or mma.sync (chunk_state_tc),
 * whether each sequence is split into segments (and their length and the blocks' widths), whether
 * the state passes may read q and k straight from the inputs, and where every array lies in the
 * workspace. The backend plans once per call (cuda_delta_rule.cu) and hands the plan to the size
 * query and to the launches (cuda_delta_rule_chunked.cu). */
#ifndef GDN_CUDA_CHUNK_PLAN_H
#define GDN_CUDA_CHUNK_PLAN_H

#include "../core/gdn_internal.h"
#include "cuda_chunk_layout.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the plan reads of a problem (cuda_chunk_shape_of). */
typedef struct cuda_chunk_shape {
    int64_t N;                /* sequences */
    int64_t T;                /* tokens per batch row, or in all (varlen) */
    int64_t H, HV, K, V;
    int in_bytes;             /* bytes of a q / k / v element: 2 (bf16, f16) or 4 (f32) */
    bool in_f16;              /* q / k / v are f16 (whose high mode's lo parts are scaled) */
    int out_bytes;            /* bytes of an output element */
    bool varlen;              /* cu_seqlens present (lengths live on the device) */
    bool slots;               /* state_slots present (a slot may skip its sequence) */
    bool split_operands;      /* 16-bit products on hi + lo parts (GDN_PRECISION_HIGH): the
                                 workspace keeps W's lo part; the fast mode has none */
    bool qk_mappable;         /* q and k fit a TMA tensor map (cuda_tensor_map_strides) */
    bool v_mappable;          /* v too */
    bool out_mappable;        /* and the output, of q's 16-bit type (the wgmma pass's
                                 whole-chunk stores; other outputs are stored element-wise) */
    bool unit_keys;           /* keys L2-normalised in the kernel (qk_l2norm) */
    gdn_algorithm algorithm;
} cuda_chunk_shape;

/* What the plan reads of the device. */
typedef struct cuda_chunk_caps {
    int sms;                  /* multiprocessors (0: unknown) */
    int smem_optin;           /* shared memory a block may opt in to, bytes */
    double mem_bytes_per_s;   /* peak memory bandwidth (0: unknown) */
    bool wg_loaded;           /* chunk_state_wg's sm_90a code runs on this device */
    bool tensor_maps;         /* the driver's tensor-map encoder is reachable */
} cuda_chunk_caps;

/* Overrides from the environment, for tests and benchmarks (cuda_chunk_env_read):
 *   GDN_CUDA_STATE_PASS=mma|wgmma   the state pass (wgmma only where it can run)
 *   GDN_CUDA_WG_WIDTH=n or m,o      warpgroups a block, of both wgmma passes or of the maps (m)
 *                                   and the output pass (o); a width that cannot run is ignored
 *   GDN_CUDA_SEGMENT_CHUNKS=n       chunks a segment (n > 0 splits every 16-bit call)
 *   GDN_CUDA_KEY_TILES=copy         the preparation copies q and k to the workspace
 *   GDN_CUDA_STITCH_COLS=8|16       the stitch's block width
 *   GDN_CUDA_FUSED=0                the wgmma pass keeps W and U in the workspace (no fused pass)
 *   GDN_CUDA_TMA_STORE=0            the wgmma pass stores its output tiles thread by thread
 *   GDN_CUDA_BESIDE=0               the preparation runs before the state pass, never beside it
 *   GDN_CUDA_TAIL=0                 every map of a split call runs its whole segment */
typedef struct cuda_chunk_env {
    int state_pass;           /* 0: the planner's choice; 1: mma.sync; 2: wgmma */
    int wg_maps, wg_out;      /* forced warpgroups a block (0: none) */
    int64_t segment_chunks;   /* forced chunks a segment (<= 0: none) */
    bool key_copies;          /* no direct keys */
    int stitch_cols;          /* 8 or 16 (0: the planner's choice) */
    bool no_fused;            /* no fused values pass (GDN_CUDA_FUSED=0) */
    bool no_tma_store;        /* no bulk tensor stores of output tiles (GDN_CUDA_TMA_STORE=0) */
    bool no_beside;           /* no preparation beside the state pass (GDN_CUDA_BESIDE=0) */
    bool no_tail;             /* no map from its segment's last chunks (GDN_CUDA_TAIL=0) */
} cuda_chunk_env;

/* Shapes, row strides and shared-memory offsets of the kernels: the f32 path's chunk_prep (p_*)
 * and chunk_state (s_*), whose layouts are runtime values, and the 16-bit kernels' sizes (their
 * layouts are compile-time constants, cuda_chunk_layout.h). */
typedef struct ck_dims {
    int KP, VP;                 /* K, V rounded up to 32 */
    int ldk, ldv, ldu, ldq;     /* shared row strides (elements of the stored type) */
    int lda, lds, ldx;          /* f32 shared row strides: A/T, state tile, block-row scratch */
    /* shared-memory byte offsets */
    int p_k, p_q, p_v, p_a, p_t, p_x, p_g, p_b, prep_bytes;
    int s_w, s_q, s_k, s_u, s_aq, s_vn, s_s, state_bytes;
    int tc_bytes;               /* chunk_state_tc's shared memory (tc_layout, aligned to 1024) */
    int prep_tc_bytes;          /* chunk_prep_tc's (prep_tc_layout, then the v tile) */
} ck_dims;

/* A region of the workspace: byte offset from its start, and length. */
typedef struct cuda_ws_region {
    size_t off, bytes;
} cuda_ws_region;

/* The chunked form's workspace. Regions start on 256 bytes, in this order, and do not overlap;
 * an empty one has bytes 0. Sizes saturate at SIZE_MAX (refused by the op). */
typedef struct cuda_chunk_workspace {
    cuda_ws_region chunk_off;   /* [N + 1] int64: each sequence's first chunk (chunk_offsets) */
    cuda_ws_region gl;          /* [nc, HV] f32: exp(G_last) */
    cuda_ws_region eg;          /* [nc, HV, 64] f32, 16-bit path: scale exp(G_i) / ||q_i|| */
    cuda_ws_region ek;          /* [nc, HV, 64] f32, 16-bit path: exp(G_last - G_i) / ||k_i|| */
    cuda_ws_region ew;          /* [nc, HV, 64] f32, 16-bit fast mode: exp(G_i) / ||k_i|| (the
                                   fused pass's factor of K S) */
    cuda_ws_region W, Wl;       /* W per (chunk, value head); its lo part (16-bit path) */
    cuda_ws_region Qd, Kd;      /* q, k blocks: per (chunk, value head) on the f32 path, per
                                   (chunk, key head) on the 16-bit path */
    cuda_ws_region U, Aq;       /* U and Aqk per (chunk, value head) */
    cuda_ws_region seg_off;     /* [N + 1] int64: each sequence's first segment slot */
    cuda_ws_region maps;        /* [nslots, HV, KP, KP + VP] f32: segments' [M | N] (split) */
    cuda_ws_region m_zero;      /* [nslots, HV] int32: 1 where a segment's M is zero (tails) */
    cuda_ws_region ready;       /* [nc, HV] int32: chunk prepared flags (prep_beside) */
    size_t total;
} cuda_chunk_workspace;

/* How the chunked form runs one call. */
typedef struct cuda_chunk_plan {
    ck_dims d;
    int64_t nc;                 /* chunk slots in the workspace: every sequence's chunks, bounded
                                   without reading cu_seqlens */
    /* Without cu_seqlens and state_slots every sequence has T tokens and runs: its first chunk
     * and segment slot are n times seq_chunks and seq_slots, and chunk_offsets is skipped. */
    bool uniform;
    int64_t seq_chunks, seq_slots;
    bool wg;                    /* the state pass is chunk_state_wg (else chunk_state_tc) */
    int64_t segc;               /* chunks a segment (>= every sequence's chunks when unsplit) */
    int nw_maps, nw_out;        /* chunk_state_wg's warpgroups a block in each pass */
    int64_t nslots;             /* segment slots (an upper bound for varlen calls) */
    bool split;                 /* nslots > N: maps pass, stitch, output pass */
    int stitch_cols;            /* the stitch's value columns a block (split calls: 8 or 16) */
    bool direct_keys;           /* the state passes take q and k from the inputs by tensor maps
                                   (the workspace has no copy of them) */
    bool fused;                 /* the wgmma pass makes V' itself from v (by a tensor map) and
                                   the preparation's T diag(beta) (the workspace has no W and U;
                                   fused_fits) */
    bool tma_store;             /* the wgmma output pass stores whole chunks of a 16-bit output
                                   of the inputs' type by a tensor map over it */
    bool tails;                 /* split on the wgmma pass with unit keys: each map runs only
                                   the last chunks of its segment that still reach the
                                   segment's end (segment_tail, cuda_chunk_pass.cuh) */
    int prep_beside;            /* > 0: the preparation runs beside the state pass in this many
                                   two-team blocks on the SMs the pass leaves free, and the pass
                                   waits per chunk on its flags (ws.ready) */
    cuda_chunk_workspace ws;
} cuda_chunk_plan;

/* The plan of one gdn_delta_rule call on the CUDA backend. */
typedef struct cuda_delta_rule_plan {
    bool chunked;               /* the chunked form runs (else the recurrent kernels) */
    bool refused;               /* GDN_ALGO_CHUNKED asked for shapes the chunked form does not
                                   fit (cuda_chunk_fits says why): the call is refused */
    cuda_chunk_plan chunk;      /* set when chunked */
} cuda_delta_rule_plan;

/* The shape of a validated problem. */
cuda_chunk_shape cuda_chunk_shape_of(const gdn_delta_rule_problem *p);

/* Whether a 16-bit token tensor t ([B, T, heads, n]) fits the state passes' TMA tensor maps, and
 * if so its byte strides of dims 2, 1, 0 in bytes[0..2] (a dim of one element gets the stride a
 * packed tensor would have): last dim contiguous, every extent in 1 .. INT32_MAX, the address
 * and the strides multiples of 16 bytes, strides below 2^40 bytes (the encoder's limits). */
bool cuda_tensor_map_strides(const gdn_tensor *t, int64_t bytes[3]);

/* The overrides the environment sets now (read on every call: tests change them between calls). */
void cuda_chunk_env_read(cuda_chunk_env *e);

/* Whether the call would run the chunked form if its shapes fit: GDN_ALGO_CHUNKED, or AUTO with
 * 32 tokens or more per sequence on average. Only then does the plan read the device. */
bool cuda_chunk_wanted(const cuda_chunk_shape *s);

/* Whether the chunked form fits these shapes on the device: K, V <= 128 and its kernels' shared
 * memory. If not, and why is not NULL, the reason goes to why (n bytes). */
bool cuda_chunk_fits(const cuda_chunk_shape *s, const cuda_chunk_caps *caps, char *why, size_t n);

/* The chunked form's plan for a call it fits. */
void cuda_chunk_plan_make(const cuda_chunk_shape *s, const cuda_chunk_caps *caps,
                          const cuda_chunk_env *env, cuda_chunk_plan *plan);

/* The call's plan. caps is read only when cuda_chunk_wanted(s) (it may be NULL otherwise). */
void cuda_delta_rule_plan_make(const cuda_chunk_shape *s, const cuda_chunk_caps *caps,
                               const cuda_chunk_env *env, cuda_delta_rule_plan *plan);

/* Scratch bytes the call needs (0 for the recurrent form). */
size_t cuda_delta_rule_plan_workspace(const cuda_delta_rule_plan *plan);

#ifdef __cplusplus
}
#endif

#endif
