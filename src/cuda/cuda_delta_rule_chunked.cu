// The chunked WY form of the gated delta rule on CUDA (prefill), on tensor cores: the host
// dispatch. It takes the call's plan (cuda_chunk_plan.h, made once per call by
// cuda_delta_rule_op.cu), gives each stage its arguments and launches the stages in order, all
// stream-ordered, with no host synchronization:
//   1. chunk_offsets (cuda_chunk_offsets.cu), unless every sequence is T tokens long and runs:
//      one block turns the sequence lengths (cu_seqlens on the device, or state slots that skip
//      sequences) into each sequence's first chunk and segment slot, so that the other kernels
//      find their chunk without the host ever reading cu_seqlens.
//   2. the preparation, one block per (chunk, value head), all chunks in parallel: gates and
//      their cumulative sum G, L2-normalised q and k, A = diag(beta) (K K^T * exp(G_i - G_j))
//      strictly lower, its exact inverse T = (I + A)^-1, W = T diag(beta e^G) K,
//      U = T diag(beta) V, the masked Aqk = scale (Q K^T * exp(G_i - G_j)) (j <= i), and Q' and
//      K' (or their row factors), all to the workspace; chunk_prep for f32 inputs
//      (cuda_chunk_prep.cu), chunk_prep_tc for bf16 / f16 (cuda_chunk_prep_tc.cu). On sm_90 the
//      16-bit state passes take q and k straight from the inputs through TMA tensor maps
//      (direct_keys), and the preparation writes no copy of them. For the fused pass (warpgroup
//      products, K = V = 128) it writes T diag(beta) and the factors ew instead of W and U, and
//      in the fast mode, where the unsplit state pass leaves SMs free, it runs beside it on them
//      (chunk_prep_tc_beside, launched first; the state pass follows by programmatic dependent
//      launch and waits per chunk on the flag the preparation raises).
//   3. the state pass, one block per (value tile, value head, sequence), chunks in order: the
//      state tile S gives V' = U - W S, the output O = Q' S + Aqk V', and
//      S <- e^G_last S + K'^T V'; the last S goes back to the pool. chunk_state for f32 inputs
//      (cuda_chunk_state.cu); for 16-bit inputs chunk_state_tc on mma.sync
//      (cuda_chunk_state_tc.cu) or, where the plan says, chunk_state_wg on warpgroup products
//      (cuda_chunk_state_wg.cu, sm_90a; fused where the plan says: V' = T diag(beta) (V -
//      diag(ew) K S) from v's panels). Calls with few heads and sequences split each sequence
//      into segments that run in parallel: a maps pass first, then the stitch
//      (cuda_chunk_stitch.cu), then the output pass.
//
// The precision policy follows the input dtype (cuda_mma.cuh): bf16 and f16 operands with f32
// accumulation, f32 inputs as split tf32. The state and U are always f32; W, Q', K', Aqk and V'
// are stored in the policy's type, W and Aqk on the 16-bit path as hi + lo parts.
// The 16-bit path keeps in mind long memory (slow decay, T >> K), where the state predicts the
// new values and V' = U - W S = T (beta v - beta e^G k S) is a small difference of large terms:
// an operand rounded to 16 bits before that difference costs 2^-9 of the large terms, and the
// state carries the error on. So nothing that feeds the difference or the state is rounded once:
// q and k stay the exact 16-bit inputs, their inverse L2 norms and the decay factors (scale e^G
// for Q, e^(G_last - G) for K) applied to f32 results; W and U are T's columns scaled in f32 by
// their row factors (beta e^G / ||k||, beta), as hi + lo 16-bit parts, times the exact k and v
// rows (two products each), W stored as hi + lo, U kept f32; the state enters W S and Q S as
// hi + lo, and the update's scaled V' too (T is split because an ill-conditioned chunk makes T's
// entries large and V' = T (...) a cancellation too). The output's Aqk V' takes both as hi + lo
// (all but lo x lo): rounded once, a one-token output, one product with no sum to average its
// roundings, could miss the 16-bit outputs' bar. Aqk and V' are made by the kernels, so that
// product runs in bf16 for f16 inputs too (prec_out): as f16 parts, an Aqk below 2^-3 would have
// its lo part among f16's subnormals. The parts that meet an f16 input stay f16 (the state in
// W S and Q S, W's lo, T's lo, the update's V'): their lo parts are scaled by 2^11 (split_pair)
// and their products summed apart, then scaled back, which keeps small values (states and values
// far below their usual size) at f32-level accuracy. docs/MATH.md (Precision) has the analysis
// and what each single rounding cost when measured.
#include "cuda_async_copy.cuh"
#include "cuda_chunk.cuh"

namespace {

// An attribute of the current device, or 0 where it cannot be read.
int device_attr(cudaDeviceAttr what)
{
    int dev = 0, x = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&x, what, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return x;
}

// The current device's peak memory bandwidth (memory_peak_bytes_per_s), 0 where it does not
// say. Asked once per device: the query is slow.
double memory_peak_of_current()
{
    static double known[64]; // 0: not asked yet; -1: the device does not say
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        cudaGetLastError();
        return 0.0;
    }
    if (known[dev] == 0.0) {
        const double peak = memory_peak_bytes_per_s(dev);
        known[dev] = peak > 0.0 ? peak : -1.0;
    }
    return known[dev] > 0.0 ? known[dev] : 0.0;
}

// A tensor map over a 16-bit token tensor t ([B, T, heads, n], the last dim contiguous) whose box
// is one swizzled panel (stage_key_panels): 64 elements x 64 tokens of one head and batch row,
// zeros past n and past T. False where the driver's encoder cannot be reached or refuses t; the
// planner asked cuda_tensor_map_strides and the encoder's presence (caps) first, and planned no
// workspace copy of what the maps read.
bool token_panel_map(CUtensorMap *m, const gdn_tensor &t)
{
    const tensor_map_encode_fn encode = tensor_map_encoder();
    int64_t bytes[3];
    if (!encode || !cuda_tensor_map_strides(&t, bytes))
        return false;
    const cuuint64_t dim[4] = {(cuuint64_t)t.shape[3], (cuuint64_t)t.shape[2],
                               (cuuint64_t)t.shape[1], (cuuint64_t)t.shape[0]};
    const cuuint64_t stride[3] = {(cuuint64_t)bytes[0], (cuuint64_t)bytes[1],
                                  (cuuint64_t)bytes[2]};
    const cuuint32_t box[4] = {CK_PANEL, 1, kC, 1}, unit[4] = {1, 1, 1, 1};
    return encode(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, t.data, dim, stride, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Where the plan's workspace regions lie in `workspace`.
ck_work work_of(const cuda_chunk_workspace &w, void *workspace)
{
    unsigned char *base = static_cast<unsigned char *>(workspace);
    ck_work a;
    a.gl = reinterpret_cast<float *>(base + w.gl.off);
    a.eg = reinterpret_cast<float *>(base + w.eg.off);
    a.ek = reinterpret_cast<float *>(base + w.ek.off);
    a.ew = reinterpret_cast<float *>(base + w.ew.off);
    a.W = base + w.W.off, a.Qd = base + w.Qd.off, a.Kd = base + w.Kd.off;
    a.Wl = base + w.Wl.off, a.U = base + w.U.off, a.Aq = base + w.Aq.off;
    return a;
}

ck_tokens tokens_of(const gdn_delta_rule_args &a)
{
    ck_tokens t{};
    t.q = a.q, t.k = a.k, t.v = a.v, t.g = a.g, t.beta = a.beta;
    t.gating = a.gating;
    t.qk_l2norm = a.qk_l2norm, t.gate_in_kernel = a.gate_in_kernel;
    return t;
}

// What every stage reads of the call: its sizes, sequences, pool and workspace arrays.
struct call_parts {
    ck_shape shape;
    ck_seqs seqs;
    ck_pool pool;
    ck_work work;
    float *maps;
    int *m_zero; // (null where no map runs from its segment's tail)
    void *workspace;
};

// The f32 path: chunk_prep, then chunk_state (never split).
void run_f32(const gdn_delta_rule_problem *p, const cuda_chunk_plan &plan, const call_parts &c,
             cudaStream_t stream)
{
    chunk_prep_args prep{};
    prep.in = tokens_of(p->a);
    prep.seqs = c.seqs, prep.shape = c.shape, prep.scale = (float)p->scale;
    prep.d = plan.d, prep.work = c.work;
    launch_chunk_prep(prep, plan.nc, plan.d.prep_bytes, stream);

    chunk_state_args st{};
    st.out = p->a.out;
    st.pool = c.pool, st.seqs = c.seqs, st.shape = c.shape;
    st.d = plan.d, st.work = c.work;
    launch_chunk_state(st, plan.d.state_bytes, stream);
}

// The 16-bit path: chunk_prep_tc, then the state pass (split calls first make every segment's
// maps and stitch the segments' starting states). False, with nothing launched, where the driver
// refuses a tensor map the plan counted on.
bool run_16bit(const gdn_delta_rule_problem *p, const cuda_chunk_plan &plan, const call_parts &c,
               cudaStream_t stream)
{
    const gdn_dtype dt = p->a.q.dtype;
    const bool fast = p->a.precision != GDN_PRECISION_HIGH; // (auto is fast)
    const int KP = plan.d.KP;
    chunk_pass_args pass{};
    pass.out = p->a.out;
    pass.pool = c.pool, pass.seqs = c.seqs, pass.shape = c.shape;
    pass.KP = KP, pass.VP = plan.d.VP;
    pass.segc = plan.segc;
    pass.maps = c.maps;
    pass.work = c.work;
    pass.direct_keys = plan.direct_keys;
    pass.fused = plan.fused; // (not planned for f16's high mode)
    pass.out_map = plan.tma_store;
    pass.tail.on = plan.tails;
    pass.tail.beta = p->a.beta;
    pass.tail.gating = p->a.gating, pass.tail.gate_in_kernel = p->a.gate_in_kernel;
    pass.tail.m_zero = c.m_zero;
    if ((plan.direct_keys && (!token_panel_map(&pass.qmap, p->a.q) ||
                              !token_panel_map(&pass.kmap, p->a.k))) ||
        (plan.fused && !token_panel_map(&pass.vmap, p->a.v)) ||
        (plan.tma_store && !token_panel_map(&pass.omap, p->a.out)))
        return false;

    chunk_prep_tc_args prep{};
    prep.in = tokens_of(p->a);
    prep.seqs = c.seqs, prep.shape = c.shape, prep.scale = (float)p->scale;
    prep.VP = plan.d.VP, prep.ldv = plan.d.ldv;
    prep.direct_keys = pass.direct_keys; // no key copies where the passes read the inputs
    prep.fused = pass.fused;
    prep.work = c.work;
#ifdef GDN_CUDA_WG
    if (plan.prep_beside > 0) { // the preparation first, the state pass beside it on its flags
        int *ready = reinterpret_cast<int *>(static_cast<unsigned char *>(c.workspace) +
                                             plan.ws.ready.off);
        cudaMemsetAsync(ready, 0, plan.ws.ready.bytes, stream);
        prep.ready = ready;
        prep.ntasks = plan.nc * c.shape.H;
        launch_chunk_prep_tc_beside(dt, prep, plan.prep_beside, stream);
        if (cudaPeekAtLastError() != cudaSuccess) // (no state pass waiting on flags that never
            return true;                          // come; cuda_check reports the error)
        pass.ready = ready;
        launch_chunk_state_wg(dt, fast, KP, true, plan.nw_out, pass, plan.nslots, stream, true);
        return true;
    }
#endif
    launch_chunk_prep_tc(dt, fast, KP, prep, plan.nc, plan.d.prep_tc_bytes, stream);

    stitch_args stitch{};
    stitch.pool = c.pool, stitch.seqs = c.seqs, stitch.shape = c.shape;
    stitch.VP = plan.d.VP;
    stitch.maps = c.maps;
    stitch.m_zero = c.m_zero;
#ifdef GDN_CUDA_WG
    if (plan.wg && (KP == 64 || KP == 128)) {
        if (plan.split) {
            launch_chunk_state_wg(dt, fast, KP, false, plan.nw_maps, pass, plan.nslots, stream);
            launch_stitch(KP, plan.stitch_cols, stitch, stream);
        }
        launch_chunk_state_wg(dt, fast, KP, true, plan.nw_out, pass, plan.nslots, stream);
        return true;
    }
#endif
    if (plan.split) {
        launch_chunk_state_tc(dt, fast, KP, false, pass, plan.nslots, plan.d.tc_bytes, stream);
        launch_stitch(KP, plan.stitch_cols, stitch, stream);
    }
    launch_chunk_state_tc(dt, fast, KP, true, pass, plan.nslots, plan.d.tc_bytes, stream);
    return true;
}

} // namespace

extern "C" void cuda_chunk_device_caps(cuda_chunk_caps *caps)
{
    caps->sms = device_attr(cudaDevAttrMultiProcessorCount);
    caps->smem_optin = device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    caps->mem_bytes_per_s = memory_peak_of_current();
    caps->tensor_maps = tensor_map_encoder() != nullptr;
#ifdef GDN_CUDA_WG
    caps->wg_loaded = chunk_state_wg_loaded();
#else
    caps->wg_loaded = false; // the sm_90a pass is not built
#endif
}

extern "C" gdn_status cuda_delta_rule_chunked(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                              const cuda_chunk_plan *plan, void *workspace)
{
    if (p->seqs.count == 0)
        return GDN_OK;
    const gdn_delta_rule_args &a = p->a;
    const cuda_chunk_workspace &w = plan->ws;
    unsigned char *base = static_cast<unsigned char *>(workspace);
    int64_t *chunk_off = reinterpret_cast<int64_t *>(base + w.chunk_off.off);
    int64_t *seg_off = reinterpret_cast<int64_t *>(base + w.seg_off.off);
    call_parts c{};
    c.shape.T = p->T, c.shape.H = p->H, c.shape.HV = p->HV, c.shape.K = p->K, c.shape.V = p->V;
    c.shape.S = p->S, c.shape.ratio = p->ratio, c.shape.N = p->seqs.count, c.shape.gva = a.gva;
    c.seqs.cu_seqlens = a.cu_seqlens;
    c.seqs.uniform = plan->uniform;
    c.seqs.seq_chunks = plan->seq_chunks, c.seqs.seq_slots = plan->seq_slots;
    c.seqs.chunk_off = chunk_off, c.seqs.seg_off = seg_off;
    c.pool.state = a.state, c.pool.state_slots = a.state_slots;
    c.pool.has_initial_state = a.has_initial_state;
    c.pool.has_state = p->has_state, c.pool.state_layout = a.state_layout;
    c.work = work_of(w, workspace);
    c.maps = reinterpret_cast<float *>(base + w.maps.off);
    c.m_zero = plan->tails ? reinterpret_cast<int *>(base + w.m_zero.off) : nullptr;
    c.workspace = workspace;
    cudaStream_t stream = cuda_stream(ctx);
    if (!plan->uniform) {
        chunk_offsets_args off{};
        off.state_slots = a.state_slots, off.cu_seqlens = a.cu_seqlens;
        off.T = p->T, off.S = p->S, off.N = p->seqs.count, off.has_state = p->has_state;
        off.nc = plan->nc, off.chunk_off = chunk_off;
        off.segc = plan->segc, off.nslots = plan->nslots, off.seg_off = seg_off;
        launch_chunk_offsets(off, stream);
    }
    if ((a.q.dtype == GDN_BF16 || a.q.dtype == GDN_F16) && !run_16bit(p, *plan, c, stream))
        return gdn_fail(ctx, GDN_ERR_CUDA, "gdn_delta_rule",
                        "the CUDA driver refused a tensor map over q, k, v or out");
    if (a.q.dtype == GDN_F32)
        run_f32(p, *plan, c, stream);
    return cuda_check(ctx, "gdn_delta_rule");
}
