// Causal depthwise conv1d + activation on CUDA.
//
// Prefill is two launches in stream order: one thread per (token, channel) computes the output
// from x and, before a sequence's start, its old conv state; then one thread per (sequence,
// channel) writes the new state. Splitting them keeps every thread independent: no output
// thread can see a state another thread already replaced. Decode is one thread per (sequence,
// channel) that reads, shifts and writes its own state.
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 256;

struct conv_args {
    gdn_conv1d_args a;
    int64_t B, T, C, W, S, N;
    bool has_state;
};

// Sequence of packed token tok by binary search over cu_seqlens (empty sequences never match).
__device__ int64_t sequence_of(const gdn_tensor &cu, int64_t N, int64_t tok)
{
    int64_t lo = 0, hi = N - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (ld_index(cu, mid) <= tok)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Input at position pos (relative to the sequence start) of channel c: x for pos >= 0, the old
// state (oldest first) for -(W-1) <= pos < 0, or zero for a new sequence.
__device__ float conv_input(const conv_args &p, int64_t row, int64_t t0, int64_t pos, int64_t c,
                            int64_t slot, bool init)
{
    const gdn_conv1d_args &a = p.a;
    if (pos >= 0)
        return ld(a.x, row * a.x.stride[0] + (t0 + pos) * a.x.stride[1] + c);
    if (!init)
        return 0.0f;
    const gdn_tensor &s = a.conv_state;
    return ld(s, slot * s.stride[0] + c * s.stride[1] + (p.W - 1 + pos) * s.stride[2]);
}

__device__ float conv_output(const conv_args &p, int64_t row, int64_t t0, int64_t pos,
                             int64_t c, int64_t slot, bool init)
{
    const gdn_conv1d_args &a = p.a;
    float acc = a.bias.data ? ld(a.bias, c * a.bias.stride[0]) : 0.0f;
    for (int64_t i = 0; i < p.W; i++)
        acc += ld(a.weight, c * a.weight.stride[0] + i) *
               conv_input(p, row, t0, pos - (p.W - 1) + i, c, slot, init);
    return a.activation == GDN_ACT_SILU ? siluf_(acc) : acc;
}

__global__ void conv_prefill(const conv_args p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.B * p.T * p.C)
        return;
    const gdn_conv1d_args &a = p.a;
    const int64_t c = idx % p.C, bt = idx / p.C, b = bt / p.T, t = bt % p.T;
    const int64_t n = a.cu_seqlens.data ? sequence_of(a.cu_seqlens, p.N, t) : b;
    const seq_info sq = seq_span(a.cu_seqlens, p.T, n);
    int64_t slot = -1;
    if (p.has_state) {
        slot = seq_slot(a.state_slots, n, p.S);
        if (slot < 0)
            return;
    }
    const bool init = p.has_state &&
                      (!a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0);
    const float y = conv_output(p, sq.row, sq.t0, t - sq.t0, c, slot, init);
    st(a.out, sq.row * a.out.stride[0] + t * a.out.stride[1] + c, y);
}

// New state = the last W-1 inputs of (old state ++ x). Reads everything before writing, so a
// sequence shorter than W-1 keeps the part of its old state it still needs.
__global__ void conv_state_update(const conv_args p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.N * p.C)
        return;
    const gdn_conv1d_args &a = p.a;
    const int64_t c = idx % p.C, n = idx / p.C;
    const int64_t slot = seq_slot(a.state_slots, n, p.S);
    if (slot < 0)
        return;
    const seq_info sq = seq_span(a.cu_seqlens, p.T, n);
    const bool init = !a.has_initial_state.data || ld_index(a.has_initial_state, n) != 0;
    float keep[GDN_CONV_MAX_WIDTH - 1];
#pragma unroll
    for (int j = 0; j < GDN_CONV_MAX_WIDTH - 1; j++)
        if (j < p.W - 1)
            keep[j] = conv_input(p, sq.row, sq.t0, sq.len - (p.W - 1) + j, c, slot, init);
    const gdn_tensor &s = a.conv_state;
#pragma unroll
    for (int j = 0; j < GDN_CONV_MAX_WIDTH - 1; j++)
        if (j < p.W - 1)
            st(s, slot * s.stride[0] + c * s.stride[1] + j * s.stride[2], keep[j]);
}

struct update_args {
    gdn_conv1d_update_args a;
    int64_t N, C, W, S;
};

__global__ void conv_decode(const update_args p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.N * p.C)
        return;
    const gdn_conv1d_update_args &a = p.a;
    const int64_t c = idx % p.C, n = idx / p.C;
    const int64_t slot = seq_slot(a.state_slots, n, p.S);
    if (slot < 0)
        return;
    const gdn_tensor &s = a.conv_state;
    const int64_t so = slot * s.stride[0] + c * s.stride[1];
    float win[GDN_CONV_MAX_WIDTH];
#pragma unroll
    for (int j = 0; j < GDN_CONV_MAX_WIDTH - 1; j++)
        if (j < p.W - 1)
            win[j] = ld(s, so + j * s.stride[2]);
    const float xt = ld(a.x, n * a.x.stride[0] + c);
    float acc = a.bias.data ? ld(a.bias, c * a.bias.stride[0]) : 0.0f;
    acc += ld(a.weight, c * a.weight.stride[0] + p.W - 1) * xt;
#pragma unroll
    for (int j = 0; j < GDN_CONV_MAX_WIDTH - 1; j++)
        if (j < p.W - 1)
            acc += ld(a.weight, c * a.weight.stride[0] + j) * win[j];
#pragma unroll
    for (int j = 0; j < GDN_CONV_MAX_WIDTH - 1; j++)
        if (j < p.W - 1)
            st(s, so + j * s.stride[2], j + 1 < p.W - 1 ? win[j + 1] : xt);
    st(a.out, n * a.out.stride[0] + c, a.activation == GDN_ACT_SILU ? siluf_(acc) : acc);
}

unsigned blocks_for(int64_t n) { return (unsigned)((n + kThreads - 1) / kThreads); }

} // namespace

extern "C" gdn_status cuda_check_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p)
{
    if (p->a.out.data == p->a.x.data)
        return gdn_fail(ctx, GDN_ERR_UNSUPPORTED, "gdn_conv1d",
                        "out is x (in place), which the cuda backend does not support for "
                        "prefill: every output thread reads W inputs (use a separate out)");
    return GDN_OK;
}

extern "C" gdn_status cuda_conv1d(gdn_context *ctx, const gdn_conv1d_problem *p)
{
    conv_args d;
    d.a = p->a;
    d.B = p->a.x.shape[0], d.T = p->a.x.shape[1], d.C = p->C, d.W = p->W;
    d.S = p->has_state ? p->a.conv_state.shape[0] : 0;
    d.N = p->seqs.count;
    d.has_state = p->has_state;
    cudaStream_t stream = cuda_stream(ctx);
    int64_t outputs = d.B * d.T * d.C;
    if (outputs > 0 && d.N > 0)
        conv_prefill<<<blocks_for(outputs), kThreads, 0, stream>>>(d);
    if (d.has_state && d.N * d.C > 0)
        conv_state_update<<<blocks_for(d.N * d.C), kThreads, 0, stream>>>(d);
    return cuda_check(ctx, "gdn_conv1d");
}

extern "C" gdn_status cuda_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_problem *p)
{
    update_args d;
    d.a = p->a;
    d.N = p->seqs.count, d.C = p->C, d.W = p->W, d.S = p->a.conv_state.shape[0];
    if (d.N * d.C > 0)
        conv_decode<<<blocks_for(d.N * d.C), kThreads, 0, cuda_stream(ctx)>>>(d);
    return cuda_check(ctx, "gdn_conv1d_update");
}
