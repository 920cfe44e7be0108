// The chunked prefill's stages (cuda_chunk_*.cu) as the dispatcher (cuda_delta_rule_chunked.cu)
// sees them: each kernel's arguments, which hold what that kernel reads, and the host function
// that launches it. Templates stay in their stage's file; this header has none.
//
//   cuda_chunk_offsets.cu    chunk_offsets: each sequence's first chunk and segment slot
//   cuda_chunk_prep.cu       chunk_prep: the preparation for f32 inputs
//   cuda_chunk_prep_tc.cu    chunk_prep_tc: the preparation for bf16 / f16 inputs
//   cuda_chunk_state.cu      chunk_state: the state pass for f32 inputs
//   cuda_chunk_state_tc.cu   chunk_state_tc: the 16-bit state pass on mma.sync (maps and output)
//   cuda_chunk_state_wg.cu   chunk_state_wg: the same on warpgroup products (sm_90a builds only)
//   cuda_chunk_stitch.cu     stitch_starts: split sequences' segment starts from their maps
#ifndef GDN_CUDA_CHUNK_CUH
#define GDN_CUDA_CHUNK_CUH

#include "cuda_common.cuh"

#include <cuda.h> // CUtensorMap

inline constexpr int kC = CK_CHUNK;        // chunk length
inline constexpr int kVT = CK_VT;          // value columns per mma.sync state block
inline constexpr int kMaxDim = CK_MAX_DIM; // K and V (shared memory budget)
inline constexpr int kThreads = 128;       // f32 kernels: 4 warps, one 16-row tile of a chunk each
inline constexpr int kPrepThreads = 256;   // chunk_prep_tc: 8 warps
inline constexpr int kTcThreads = 256;     // chunk_state_tc: 8 warps
inline constexpr int kWgThreads = 128;     // chunk_state_wg: one warpgroup
inline constexpr int kWgCols = CK_WG_COLS; // value columns per warpgroup
inline constexpr int kStitchThreads = CK_STITCH_THREADS;

// ---- the parts of the call that several kernels read ----------------------------------------
//
// The parts are 16-byte aligned and keep their members in one order, so that a kernel loads
// neighbouring members it reads together (sizes, pointers, strides) as one 16-byte parameter
// load.

// The call's sizes: T tokens per batch row (or in all, varlen), H key heads, HV value heads, K
// and V, S pool slots, ratio = HV / H, N sequences; and which key head a value head reads:
// hv / ratio (block) or hv % H (tiled).
struct alignas(16) ck_shape {
    int64_t T, H, HV, K, V, S, ratio, N;
    gdn_gva gva;
};

// Where each sequence's tokens are (cu_seqlens, or N rows of T tokens), and where its chunks and
// segment slots start among all sequences'. Uniform calls (every sequence T tokens long and run)
// compute those starts (n times seq_chunks, seq_slots); the others read chunk_offsets' tables.
struct alignas(16) ck_seqs {
    gdn_tensor cu_seqlens;      // absent: equal-length sequences
    bool uniform;
    int64_t seq_chunks, seq_slots;
    const int64_t *chunk_off;   // [N + 1] first chunk of each sequence
    const int64_t *seg_off;     // [N + 1] first segment slot of each sequence
};

// The state pool: sequence n's state is slot state_slots[n] (absent: n; negative or >= S:
// skipped), and starts from zeros where has_initial_state[n] is 0.
struct alignas(16) ck_pool {
    gdn_tensor state, state_slots, has_initial_state;
    bool has_state;
    gdn_state_layout state_layout;
};

// What the preparations read of the tokens.
struct alignas(16) ck_tokens {
    gdn_tensor q, k, v, g, beta;
    gdn_gating_params gating;
    int32_t qk_l2norm, gate_in_kernel;
};

// The workspace arrays (cuda_chunk_plan.h has their layouts): gl [nc, HV] exp(G_last); the
// 16-bit path's row factors, eg [nc, HV, 64] scale exp(G_i) / ||q_i|| (Qd holds q as it came)
// and ek [nc, HV, 64] exp(G_last - G_i) / ||k_i|| (Kd holds k as it came; the factor scales V' in
// the state update). Per (chunk, value head): the f32 path [64, KP] for W, Qd, Kd, [64, VP] for U
// and [64, 64] for Aq; the 16-bit path tc_key_block / tc_u_tile / tc_aq_block bytes laid out as
// the state pass's stage (swizzled or padded rows, U in 32-column tiles, f32), and W's lo part
// in Wl. The 16-bit path's Qd and Kd are per (chunk, key head) instead (key_slot): the value
// heads of a key head share them, and only the first of them writes them. The f32 path uses
// neither eg, ek nor Wl. The fused pass (chunk_state_wg's FUSED) reads no W, Wl and U: its
// preparation writes T diag(beta) beside Aqk in Aq's blocks of fused_aq_block bytes (the fast
// mode's one part each, the high mode's hi + lo) and the factors ew [nc, HV, 64] exp(G_i) /
// ||k_i||. The preparations write them, the state passes read them.
struct alignas(16) ck_work {
    float *gl, *eg, *ek, *ew;
    void *W, *Qd, *Kd, *Wl, *U, *Aq;
};

// ---- each kernel's arguments --------------------------------------------------------------

// chunk_offsets: chunk_off[n] = chunks of the sequences before n, clamped to nc; seg_off[n] the
// same for segments of segc chunks, clamped to nslots.
struct alignas(16) chunk_offsets_args {
    gdn_tensor state_slots, cu_seqlens;
    int64_t T, S, N;
    bool has_state;
    int64_t nc;
    int64_t *chunk_off;
    int64_t segc, nslots;
    int64_t *seg_off;
};

// chunk_prep (f32 inputs), one block per (chunk, value head). d: its shared-memory layout and
// row strides (the p_* offsets; the planner's ck_dims, which chunk_state reads too).
struct alignas(16) chunk_prep_args {
    ck_tokens in;
    ck_seqs seqs;
    ck_shape shape;
    float scale;
    alignas(16) ck_dims d;
    ck_work work;
};

// chunk_prep_tc (bf16 / f16 inputs), one block per (chunk, value head), or for the fused pass per
// (chunk, key head). With direct_keys the state passes take q and k from the inputs, and no
// Qd / Kd is written.
struct alignas(16) chunk_prep_tc_args {
    ck_tokens in;
    ck_seqs seqs;
    ck_shape shape;
    float scale;
    int VP, ldv;                // V rounded up to 32; the v tile's row stride
    bool direct_keys;
    bool fused;                 // T diag(beta) and ew for the fused pass, no W and U
    ck_work work;
    int *ready;                 // chunk_prep_tc_beside: flags [chunk x HV + hv]
    int64_t ntasks;             // and its tasks (chunk, key head): chunks x H
};

// chunk_state (f32 inputs), one block per (32 value columns, value head, sequence). d: its
// shared-memory layout and row strides (the s_* offsets).
struct alignas(16) chunk_state_args {
    gdn_tensor out;
    ck_pool pool;
    ck_seqs seqs;
    ck_shape shape;
    alignas(16) ck_dims d;
    ck_work work;
};

// What the wgmma maps pass reads to start a segment's map at its last chunks (segment_tail): the
// tokens' beta as the call passes it (gate_in_kernel: the gate's logits, beta = gate_beta of
// them), and whether it may (on: keys L2-normalised in the kernel, GDN_CUDA_TAIL not 0); where
// it records, per (segment slot, value head), whether the segment's M is zero (m_zero, which
// the stitch then skips).
struct ck_tail {
    gdn_tensor beta;
    gdn_gating_params gating;
    int32_t gate_in_kernel;
    bool on;
    int *m_zero;
};

// The 16-bit state passes, chunk_state_tc and chunk_state_wg (a __grid_constant__ parameter:
// the tensor maps are read in place), one block per (value tile, value head, segment slot).
// Each sequence's chunks run in segments of segc (one segment per sequence when unsplit). With
// direct_keys the stages take q's and k's swizzled panels straight from the inputs through the
// tensor maps (token_panel_map), else from Qd / Kd; with out_map chunk_state_wg writes a whole
// chunk's 16-bit output tile through one (the other chunks thread by thread).
struct chunk_pass_args { // 128-byte aligned (CUtensorMap)
    gdn_tensor out;
    ck_pool pool;
    ck_seqs seqs;
    ck_shape shape;
    int KP, VP;                 // K, V rounded up to 32
    int64_t segc;
    float *maps;                // [nslots, HV, KP, KP + VP] f32: a segment's [M | N] (split)
    ck_work work;
    bool direct_keys;
    bool fused;                 // chunk_state_wg makes V' from v (vmap) and T diag(beta)
    bool out_map;               // chunk_state_wg stores whole chunks' outputs by omap
    const int *ready;           // the preparation runs beside the pass: wait for chunk x HV + hv
    ck_tail tail;               // split calls: the maps may skip their segments' first chunks
    CUtensorMap qmap, kmap, vmap, omap;
};

// stitch_starts, one block per (sequence, value head, cols value columns).
struct alignas(16) stitch_args {
    ck_pool pool;
    ck_seqs seqs;
    ck_shape shape;
    int VP;
    float *maps;
    const int *m_zero; // [nslots, HV]: 1 where M is zero (S_(j+1) = N_j), or null (none is)
};

// ---- the launches (each in its stage's file) --------------------------------------------------

// One block, when the call is not uniform.
void launch_chunk_offsets(const chunk_offsets_args &a, cudaStream_t stream);
// The f32 path: its preparation over nc chunk slots, and its state pass over N sequences.
void launch_chunk_prep(const chunk_prep_args &a, int64_t nc, int smem, cudaStream_t stream);
void launch_chunk_state(const chunk_state_args &a, int smem, cudaStream_t stream);
// The 16-bit path for inputs of dtype dt (GDN_BF16 or GDN_F16), in the fast precision mode or
// the high one (fast), and K rounded up to KP (32, 64, 96 or 128): the preparation (smem bytes
// a block; the fused pass's, a.fused, prep_fused_bytes), and chunk_state_tc's maps (!out) or
// output pass over nslots.
void launch_chunk_prep_tc(gdn_dtype dt, bool fast, int KP, const chunk_prep_tc_args &a,
                          int64_t nc, int smem, cudaStream_t stream);
// The fast mode's preparation for K = 128 beside the state pass: `blocks` persistent blocks of
// two teams (prep_fused_team_bytes each), raising a.ready's flags; the state pass goes after it
// (launch_chunk_state_wg with after_prep).
void launch_chunk_prep_tc_beside(gdn_dtype dt, const chunk_prep_tc_args &a, int blocks,
                                 cudaStream_t stream);
void launch_chunk_state_tc(gdn_dtype dt, bool fast, int KP, bool out, const chunk_pass_args &a,
                           int64_t nslots, int smem, cudaStream_t stream);
// The stitch of KP (32 .. 128) rows in blocks of cols (8 or 16) value columns.
void launch_stitch(int KP, int cols, const stitch_args &a, cudaStream_t stream);
#ifdef GDN_CUDA_WG
// Whether the current device runs chunk_state_wg's sm_90a code; its maps or output pass with nw
// warpgroups a block (KP 64 or 128; nw 2 only for KP = VP = 128).
bool chunk_state_wg_loaded();
void launch_chunk_state_wg(gdn_dtype dt, bool fast, int KP, bool out, int nw,
                           const chunk_pass_args &a, int64_t nslots, cudaStream_t stream,
                           bool after_prep = false);
#endif

#endif
