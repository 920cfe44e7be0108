// Barriers beyond __syncthreads for the chunked prefill's state passes:
//   mbarrier (sm_90): a shared-memory barrier whose phase completes when its one expected
//     arrival has come and the bytes of the bulk copies it was told to expect have landed
//     (cuda_async_copy.cuh); threads wait on a phase's parity;
//   the async-proxy fence that orders generic shared-memory accesses before bulk copies and
//     tensor-core reads through descriptors;
//   named barriers, which synchronize a subset of a block's warps.
// The sm_90 ones compile to nothing for older architectures, where no kernel relies on them.
// Barrier addresses are 32-bit shared-window addresses, 8-byte aligned.
#ifndef GDN_CUDA_MBARRIER_CUH
#define GDN_CUDA_MBARRIER_CUH

// Initializes the mbarrier at bar for one arrival a phase, and makes the initialization visible
// to the bulk copies.
__device__ __forceinline__ void mbar_init(unsigned bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;\n" ::"r"(bar)
                 : "memory");
#else
    (void)bar;
#endif
}

// Orders this thread's accesses to shared memory before later bulk copies into it and
// tensor-core reads of it (the generic and the async proxy).
__device__ __forceinline__ void fence_proxy_async()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Arrives on bar, expecting `bytes` of bulk copies before its phase completes. The proxy fence
// orders the block's earlier reads of the stage (ordered by a barrier) before the copies' writes.
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes)
{
    fence_proxy_async();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
#else
    (void)bar, (void)bytes;
#endif
}

// Waits until the phase of bar with the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
#else
    (void)bar, (void)parity;
#endif
}

// The n threads (whole warps) that use named barrier id (1..15; 0 is __syncthreads').
__device__ __forceinline__ void sync_named(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// ---- between grids (sm_90) ----------------------------------------------------------------
//
// A grid launched after this one with programmatic dependent launch may start once every block
// of this one has called grid_launch_dependents (or exited); grid_dependency_wait, in that later
// grid, waits for this one to complete and its writes to be visible. Flags in global memory
// pass data between the two while both run: the writer's earlier writes (generic stores) are
// seen by the reader's later reads, bulk copies included, once it has seen the flag.

__device__ __forceinline__ void grid_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Sets *flag to 1 after this thread's earlier writes (and, by a barrier before, its block's).
__device__ __forceinline__ void flag_release(int *flag)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __threadfence();
    asm volatile("fence.proxy.async.global;\n"
                 "st.release.gpu.global.u32 [%0], 1;\n" ::"l"(flag)
                 : "memory");
#else
    (void)flag;
#endif
}

// Waits until *flag is set (flag_release); this thread's later reads, its bulk copies included,
// see what the writer wrote before it.
__device__ __forceinline__ void flag_acquire_wait(const int *flag)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned v = 0;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
        if (v)
            break;
        __nanosleep(128);
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
#else
    (void)flag;
#endif
}

// Warpgroup wg's threads only (warps 4 wg .. 4 wg + 3; named barrier 1 + wg, 0 being
// __syncthreads'): the other warps do other work meanwhile.
__device__ __forceinline__ void sync_warpgroup(int wg)
{
    asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}

#endif
