// Device helpers for the tool and the tests, on the CUDA runtime.
#include "device.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

static void die_on(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
        exit(2);
    }
}

bool dev_present(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

void *dev_alloc(size_t bytes)
{
    void *p = nullptr;
    die_on(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

void dev_free(void *p) { cudaFree(p); }

void dev_upload(void *dst, const void *src, size_t bytes)
{
    die_on(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload");
}

void dev_download(void *dst, const void *src, size_t bytes)
{
    die_on(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download");
}

void dev_memset(void *dst, int byte, size_t bytes) { die_on(cudaMemset(dst, byte, bytes), "memset"); }

void dev_sync(void) { die_on(cudaDeviceSynchronize(), "synchronize"); }

void *dev_stream_new(void)
{
    cudaStream_t s;
    die_on(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    return s;
}

void dev_stream_free(void *stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }

static cudaGraphExec_t capture(cudaStream_t s, void (*fn)(void *), void *arg, int iters)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    die_on(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (int i = 0; i < iters; i++)
        fn(arg);
    die_on(cudaStreamEndCapture(s, &graph), "end capture");
    die_on(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    cudaGraphDestroy(graph);
    return exec;
}

double dev_time_ms(void *stream, void (*fn)(void *), void *arg, int iters, bool graph)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaGraphExec_t exec = nullptr;
    if (graph)
        exec = capture(s, fn, arg, iters);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int rep = 0; rep < 7; rep++) { // rep 0 warms up
        cudaEventRecord(a, s);
        if (graph)
            cudaGraphLaunch(exec, s);
        else
            for (int i = 0; i < iters; i++)
                fn(arg);
        cudaEventRecord(b, s);
        die_on(cudaEventSynchronize(b), "timing");
        float t;
        cudaEventElapsedTime(&t, a, b);
        if (rep)
            ms.push_back(t / iters);
    }
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (exec)
        cudaGraphExecDestroy(exec);
    return ms[ms.size() / 2];
}

bool dev_graph_run(void *stream, void (*fn)(void *), void *arg)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return false;
    fn(arg);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess)
        return false;
    bool ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    cudaGraphDestroy(graph);
    if (!ok)
        return false;
    ok = cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    cudaGraphExecDestroy(exec);
    return ok;
}

struct copy_job {
    void *dst, *src;
    size_t bytes;
    cudaStream_t s;
};

static void copy_once(void *p)
{
    copy_job *j = static_cast<copy_job *>(p);
    cudaMemcpyAsync(j->dst, j->src, j->bytes, cudaMemcpyDeviceToDevice, j->s);
}

double dev_copy_gbps(void *stream, size_t bytes)
{
    copy_job j = {dev_alloc(bytes), dev_alloc(bytes), bytes, static_cast<cudaStream_t>(stream)};
    cudaMemset(j.src, 1, bytes);
    double ms = dev_time_ms(stream, copy_once, &j, 5, false);
    dev_free(j.dst);
    dev_free(j.src);
    return 2.0 * (double)bytes / (ms * 1e6);
}

// A plain streaming copy kernel: each thread moves four 16-byte words, all four loads before
// the stores, so a block keeps 16 KiB in flight.
__global__ void copy_words(const uint4 *src, uint4 *dst, size_t n)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    uint4 w[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
        if (i + u * blockDim.x < n)
            w[u] = src[i + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < 4; u++)
        if (i + u * blockDim.x < n)
            dst[i + u * blockDim.x] = w[u];
}

struct rotating_copy {
    unsigned char *dst, *src;
    size_t bytes, slots, next;
    cudaStream_t s;
};

static void rotating_copy_once(void *p)
{
    rotating_copy *j = static_cast<rotating_copy *>(p);
    const size_t at = (j->next++ % j->slots) * j->bytes, words = j->bytes / 16;
    const unsigned blocks = (unsigned)((words + 1023) / 1024);
    copy_words<<<blocks, 256, 0, j->s>>>(reinterpret_cast<const uint4 *>(j->src + at),
                                         reinterpret_cast<uint4 *>(j->dst + at), words);
}

double dev_copy_like_gbps(void *stream, size_t bytes, size_t span)
{
    rotating_copy j;
    j.bytes = bytes / 16 * 16;
    j.slots = (span + j.bytes - 1) / j.bytes;
    j.next = 0;
    j.s = static_cast<cudaStream_t>(stream);
    j.src = static_cast<unsigned char *>(dev_alloc(j.slots * j.bytes));
    j.dst = static_cast<unsigned char *>(dev_alloc(j.slots * j.bytes));
    cudaMemset(j.src, 1, j.slots * j.bytes);
    double ms = dev_time_ms(stream, rotating_copy_once, &j, 20, true);
    dev_free(j.dst);
    dev_free(j.src);
    return 2.0 * (double)j.bytes / (ms * 1e6);
}

void dev_name(char *buf, size_t n)
{
    cudaDeviceProp p;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
        snprintf(buf, n, "%s", p.name);
    else if (n)
        buf[0] = '\0';
}

