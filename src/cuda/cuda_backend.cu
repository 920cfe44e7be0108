// The CUDA backend's op table and per-context setup. Every op is enqueued on the
// context's stream with no host synchronization and no allocation.
#include "cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>

// Checks the device exists and makes it current for this thread.
static gdn_status cuda_init(gdn_context *ctx)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        return gdn_fail(ctx, GDN_ERR_BACKEND, "gdn_context_create",
                        "opts.backend is cuda, but no CUDA device is available (%s)",
                        err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    }
    if (ctx->opts.cuda_device >= count)
        return gdn_fail(ctx, GDN_ERR_BACKEND, "gdn_context_create",
                        "opts.cuda_device is %d, expected < %d (devices present)",
                        (int)ctx->opts.cuda_device, count);
    if (cudaSetDevice(ctx->opts.cuda_device) != cudaSuccess)
        return cuda_check(ctx, "gdn_context_create");
    // what the delta rule keeps between the steps of a call (cuda_delta_rule_op.cu)
    ctx->backend_state = calloc(1, sizeof(cuda_ctx_state));
    if (!ctx->backend_state)
        return gdn_fail(ctx, GDN_ERR_NO_MEMORY, "gdn_context_create",
                        "out of memory allocating the cuda context's state");
    return GDN_OK;
}

static void cuda_fini(gdn_context *ctx)
{
    free(ctx->backend_state);
    ctx->backend_state = nullptr;
}

// Makes the context's device current before each op, so that a caller juggling devices on one
// thread still launches on the device the context was made for.
static gdn_status cuda_enter(gdn_context *ctx)
{
    int dev = -1;
    if (cudaGetDevice(&dev) == cudaSuccess && dev == ctx->opts.cuda_device)
        return GDN_OK;
    cudaSetDevice(ctx->opts.cuda_device);
    return cuda_check(ctx, "gdn (cudaSetDevice)");
}

static void *cuda_workspace_alloc(size_t bytes)
{
    void *p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return p;
}

static void cuda_workspace_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" const gdn_backend_ops gdn_cuda_backend = {
    /* id */ GDN_BACKEND_CUDA,
    /* name */ "cuda",
    /* device_pointers */ true,
    /* init */ cuda_init,
    /* fini */ cuda_fini,
    /* enter */ cuda_enter,
    /* workspace_alloc */ cuda_workspace_alloc,
    /* workspace_free */ cuda_workspace_free,
    /* conv1d */ cuda_conv1d,
    /* conv1d_update */ cuda_conv1d_update,
    /* gating */ cuda_gating,
    /* l2norm */ cuda_l2norm,
    /* rmsnorm_gated */ cuda_rmsnorm_gated,
    /* check_conv1d */ cuda_check_conv1d,
    /* check_delta_rule */ cuda_check_delta_rule,
    /* delta_rule_workspace */ cuda_delta_rule_workspace,
    /* delta_rule */ cuda_delta_rule,
    /* device_count */ gdn_cuda_device_count,
};
