/* Status names and the per-context error message. */
#include "gdn_internal.h"

#include <stdio.h>
#include <string.h>

/* Where context-less failures (gdn_context_create) leave their message. */
static _Thread_local char tls_errmsg[GDN_ERRMSG_SIZE];

const char *gdn_strerror(gdn_status status)
{
    switch (status) {
    case GDN_OK: return "GDN_OK: success";
    case GDN_ERR_NULL: return "GDN_ERR_NULL: a required pointer is NULL";
    case GDN_ERR_DTYPE: return "GDN_ERR_DTYPE: unsupported or mismatched dtype";
    case GDN_ERR_SHAPE: return "GDN_ERR_SHAPE: rank or extent mismatch";
    case GDN_ERR_STRIDE: return "GDN_ERR_STRIDE: unsupported stride";
    case GDN_ERR_VALUE: return "GDN_ERR_VALUE: option or index value out of range";
    case GDN_ERR_UNSUPPORTED: return "GDN_ERR_UNSUPPORTED: not implemented by this backend";
    case GDN_ERR_BACKEND: return "GDN_ERR_BACKEND: backend unavailable";
    case GDN_ERR_NO_MEMORY: return "GDN_ERR_NO_MEMORY: allocation failed";
    case GDN_ERR_WORKSPACE: return "GDN_ERR_WORKSPACE: workspace too small";
    case GDN_ERR_CUDA: return "GDN_ERR_CUDA: CUDA runtime error";
    case GDN_ERR_INTERNAL: return "GDN_ERR_INTERNAL: internal error";
    case GDN_ERR_BUSY: return "GDN_ERR_BUSY: context in use by another thread";
    }
    return "GDN_ERR_?: unknown status";
}

gdn_status gdn_fail(gdn_context *ctx, gdn_status st, const char *fn, const char *fmt, ...)
{
    char *buf = ctx ? ctx->errmsg : tls_errmsg;
    int n = snprintf(buf, GDN_ERRMSG_SIZE, "%s: ", fn);
    if (n < 0 || n >= GDN_ERRMSG_SIZE)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, (size_t)(GDN_ERRMSG_SIZE - n), fmt, ap);
    va_end(ap);
    return st;
}

void gdn_clear_error(gdn_context *ctx)
{
    if (ctx)
        ctx->errmsg[0] = '\0';
}

const char *gdn_last_error(const gdn_context *ctx)
{
    return ctx ? ctx->errmsg : tls_errmsg;
}
