// chunk_offsets: where each sequence's chunks and segment slots start, for the calls whose
// sequences are not all T tokens long and run (cu_seqlens on the device, or state slots that skip
// sequences). One block turns the lengths into the two tables the other stages read
// (chunk_first, slot_first), so the host never reads cu_seqlens.
#include "cuda_chunk.cuh"

namespace {

// Chunks of sequence n (0 for a padded sequence: it is skipped).
__device__ int64_t chunks_of(const chunk_offsets_args &p, int64_t n)
{
    if (p.has_state && seq_slot(p.state_slots, n, p.S) < 0)
        return 0;
    int64_t len = seq_span(p.cu_seqlens, p.T, n).len;
    return len > 0 ? chunks_for(len) : 0;
}

// Segments of sequence n once chunk_off is known.
__device__ int64_t segments_of(const chunk_offsets_args &p, int64_t n)
{
    return segments_for(p.chunk_off[n + 1] - p.chunk_off[n], p.segc);
}

// chunk_off[n] = chunks of the sequences before n, clamped to the workspace's nc; seg_off[n] the
// same for segments, clamped to nslots.
__global__ void __launch_bounds__(1024) chunk_offsets(const chunk_offsets_args p)
{
    __shared__ int64_t part[1024];
    const int tid = threadIdx.x;
    const int64_t per = (p.N + 1023) / 1024, lo = tid * per;
    const int64_t hi = lo + per < p.N ? lo + per : p.N;
    int64_t sum = 0;
    for (int64_t n = lo; n < hi; n++)
        sum += chunks_of(p, n);
    part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) { // inclusive scan
        int64_t x = tid >= o ? part[tid - o] : 0;
        __syncthreads();
        part[tid] += x;
        __syncthreads();
    }
    int64_t base = tid ? part[tid - 1] : 0;
    for (int64_t n = lo; n < hi; n++) {
        p.chunk_off[n] = base < p.nc ? base : p.nc;
        base += chunks_of(p, n);
    }
    if (tid == 1023)
        p.chunk_off[p.N] = part[1023] < p.nc ? part[1023] : p.nc;
    __syncthreads(); // chunk_off is complete (global writes of this block are visible after it)
    // seg_off: the same scan over segments per sequence (at least one: an empty sequence still
    // carries its state through)
    sum = 0;
    for (int64_t n = lo; n < hi; n++)
        sum += segments_of(p, n);
    part[tid] = sum;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {
        int64_t x = tid >= o ? part[tid - o] : 0;
        __syncthreads();
        part[tid] += x;
        __syncthreads();
    }
    base = tid ? part[tid - 1] : 0;
    for (int64_t n = lo; n < hi; n++) {
        p.seg_off[n] = base < p.nslots ? base : p.nslots;
        base += segments_of(p, n);
    }
    if (tid == 1023)
        p.seg_off[p.N] = part[1023] < p.nslots ? part[1023] : p.nslots;
}

} // namespace

void launch_chunk_offsets(const chunk_offsets_args &a, cudaStream_t stream)
{
    chunk_offsets<<<1, 1024, 0, stream>>>(a);
}
