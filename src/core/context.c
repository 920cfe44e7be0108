/* The context: backend choice, threads, stream and scratch memory. */
#include "gdn_internal.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

unsigned gdn_version_number(void) { return GDN_VERSION_NUMBER; }
const char *gdn_version_string(void) { return GDN_VERSION_STRING; }

/* Owned scratch goes back to whoever allocated it (malloc, or the backend's allocator). */
static void workspace_free(gdn_context *ctx, void *p)
{
    if (ctx->ops->workspace_free)
        ctx->ops->workspace_free(p);
    else
        free(p);
}

gdn_context_options gdn_context_default_options(void)
{
    gdn_context_options o;
    memset(&o, 0, sizeof o);
    o.backend = GDN_BACKEND_AUTO;
    o.num_threads = 0;
    o.cuda_device = 0;
    o.cuda_stream = NULL;
    o.cpu_isa = GDN_ISA_AUTO;
    return o;
}

const char *gdn_backend_name(gdn_backend backend)
{
    switch (backend) {
    case GDN_BACKEND_AUTO: return "auto";
    case GDN_BACKEND_REF: return "ref";
    case GDN_BACKEND_CPU: return "cpu";
    case GDN_BACKEND_CUDA: return "cuda";
    }
    return "?";
}

/* The compiled-in backend for an id, or NULL. Later backends register here. */
static const gdn_backend_ops *backend_ops(gdn_backend backend)
{
    switch (backend) {
    case GDN_BACKEND_REF: return &gdn_ref_backend;
    case GDN_BACKEND_CPU: return &gdn_cpu_backend;
#ifdef GDN_HAVE_CUDA
    case GDN_BACKEND_CUDA: return &gdn_cuda_backend;
#endif
    default: return NULL;
    }
}

int gdn_backend_available(gdn_backend backend)
{
    if (backend == GDN_BACKEND_AUTO)
        return 1;
    const gdn_backend_ops *ops = backend_ops(backend);
    return ops && (!ops->device_count || ops->device_count() > 0);
}

/* AUTO picks the fastest host backend. CUDA is never chosen implicitly: its tensors are device
 * pointers, so a caller must ask for it. */
static gdn_backend resolve_auto(void)
{
    return gdn_backend_available(GDN_BACKEND_CPU) ? GDN_BACKEND_CPU : GDN_BACKEND_REF;
}

gdn_status gdn_context_create(gdn_context **out, const gdn_context_options *opts)
{
    static const char *fn = "gdn_context_create";
    if (!out)
        return gdn_fail(NULL, GDN_ERR_NULL, fn, "ctx is NULL, expected a gdn_context ** to fill");
    *out = NULL;
    gdn_context_options o = opts ? *opts : gdn_context_default_options();
    if ((unsigned)o.backend > GDN_BACKEND_CUDA)
        return gdn_fail(NULL, GDN_ERR_VALUE, fn, "opts.backend is %d, expected a gdn_backend",
                        (int)o.backend);
    if (o.num_threads < 0 || o.num_threads > GDN_MAX_THREADS)
        return gdn_fail(NULL, GDN_ERR_VALUE, fn,
                        "opts.num_threads is %d, expected 0 (one per CPU) to %d", (int)o.num_threads,
                        GDN_MAX_THREADS);
    if (o.cuda_device < 0)
        return gdn_fail(NULL, GDN_ERR_VALUE, fn, "opts.cuda_device is %d, expected >= 0",
                        (int)o.cuda_device);
    if ((unsigned)o.cpu_isa > GDN_ISA_AMX)
        return gdn_fail(NULL, GDN_ERR_VALUE, fn, "opts.cpu_isa is %d, expected a gdn_cpu_isa",
                        (int)o.cpu_isa);
    if (o.backend == GDN_BACKEND_AUTO)
        o.backend = resolve_auto();
    const gdn_backend_ops *ops = backend_ops(o.backend);
    if (!ops)
        return gdn_fail(NULL, GDN_ERR_BACKEND, fn,
                        "opts.backend is %s, which this build does not provide (try ref)",
                        gdn_backend_name(o.backend));
    gdn_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return gdn_fail(NULL, GDN_ERR_NO_MEMORY, fn, "out of memory allocating the context");
    ctx->opts = o;
    ctx->ops = ops;
    ctx->workspace_owned = true;
    if (ops->init) {
        gdn_status st = ops->init(ctx);
        if (st != GDN_OK) {
            size_t skip = strlen(fn) + 2; /* the backend's message already names fn */
            const char *msg = strncmp(ctx->errmsg, fn, skip - 2) == 0 ? ctx->errmsg + skip
                                                                      : ctx->errmsg;
            gdn_fail(NULL, st, fn, "%s", msg);
            free(ctx);
            return st;
        }
    }
    *out = ctx;
    return GDN_OK;
}

void gdn_context_destroy(gdn_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->ops->fini)
        ctx->ops->fini(ctx);
    if (ctx->workspace_owned)
        workspace_free(ctx, ctx->workspace);
    free(ctx);
}

gdn_backend gdn_context_backend(const gdn_context *ctx)
{
    return ctx ? ctx->ops->id : GDN_BACKEND_AUTO;
}

/* The backend's own answers where its op table has them (the cpu backend's threads, ISA level
 * and bf16 products); the defaults otherwise. */
int gdn_context_num_threads(const gdn_context *ctx)
{
    return ctx && ctx->ops->num_threads ? ctx->ops->num_threads(ctx) : 0;
}

gdn_cpu_isa gdn_context_cpu_isa(const gdn_context *ctx)
{
    return ctx && ctx->ops->cpu_isa ? ctx->ops->cpu_isa(ctx) : GDN_ISA_AUTO;
}

gdn_bf16_products gdn_context_cpu_bf16_products(const gdn_context *ctx)
{
    return ctx && ctx->ops->bf16_products ? ctx->ops->bf16_products(ctx) : GDN_BF16_PRODUCTS_F32;
}

gdn_status gdn_context_enter(gdn_context *ctx, const char *fn)
{
    if (!ctx)
        return gdn_fail(NULL, GDN_ERR_NULL, fn, "ctx is NULL, expected a gdn_context");
    if (__atomic_exchange_n(&ctx->busy, 1, __ATOMIC_ACQUIRE))
        return gdn_fail(NULL, GDN_ERR_BUSY, fn,
                        "ctx is in use by another thread's call, expected one call at a time "
                        "per context (give each thread its own context)");
    gdn_clear_error(ctx);
    return GDN_OK;
}

void gdn_context_leave(gdn_context *ctx) { __atomic_store_n(&ctx->busy, 0, __ATOMIC_RELEASE); }

gdn_status gdn_context_set_stream(gdn_context *ctx, void *stream)
{
    GDN_GUARDED(ctx, "gdn_context_set_stream", (ctx->opts.cuda_stream = stream, GDN_OK));
}

static gdn_status reserve_workspace(gdn_context *ctx, size_t bytes)
{
    void *unused;
    return gdn_workspace_acquire(ctx, "gdn_context_reserve_workspace", bytes, &unused);
}

gdn_status gdn_context_reserve_workspace(gdn_context *ctx, size_t bytes)
{
    GDN_GUARDED(ctx, "gdn_context_reserve_workspace", reserve_workspace(ctx, bytes));
}

static gdn_status set_workspace(gdn_context *ctx, void *workspace, size_t bytes)
{
    if ((uintptr_t)workspace % GDN_WORKSPACE_ALIGN)
        return gdn_fail(ctx, GDN_ERR_VALUE, "gdn_context_set_workspace",
                        "workspace is at %p, expected an address aligned to %d bytes", workspace,
                        GDN_WORKSPACE_ALIGN);
    if (!workspace && bytes)
        return gdn_fail(ctx, GDN_ERR_NULL, "gdn_context_set_workspace",
                        "workspace is NULL with bytes = %zu, expected memory or bytes = 0", bytes);
    if (ctx->workspace_owned)
        workspace_free(ctx, ctx->workspace);
    ctx->workspace = workspace;
    ctx->workspace_bytes = workspace ? bytes : 0;
    ctx->workspace_owned = workspace == NULL;
    return GDN_OK;
}

gdn_status gdn_context_set_workspace(gdn_context *ctx, void *workspace, size_t bytes)
{
    GDN_GUARDED(ctx, "gdn_context_set_workspace", set_workspace(ctx, workspace, bytes));
}

gdn_status gdn_workspace_acquire(gdn_context *ctx, const char *fn, size_t bytes, void **ptr)
{
    if (bytes <= ctx->workspace_bytes) {
        *ptr = ctx->workspace;
        return GDN_OK;
    }
    if (!ctx->workspace_owned)
        return gdn_fail(ctx, GDN_ERR_WORKSPACE, fn,
                        "workspace is %zu bytes, expected >= %zu (see *_workspace_size)",
                        ctx->workspace_bytes, bytes);
    void *mem = ctx->ops->workspace_alloc ? ctx->ops->workspace_alloc(bytes) : malloc(bytes);
    if (!mem)
        return gdn_fail(ctx, GDN_ERR_NO_MEMORY, fn, "cannot allocate %zu bytes of scratch", bytes);
    workspace_free(ctx, ctx->workspace);
    ctx->workspace = mem;
    ctx->workspace_bytes = bytes;
    *ptr = mem;
    return GDN_OK;
}
