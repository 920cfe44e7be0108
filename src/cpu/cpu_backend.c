/* The CPU backend's op table: a thread pool per context, the ISA level chosen at creation, the
 * delta rule as the fused recurrent kernel over (sequence, value head) tasks or the chunked WY
 * form (cpu_chunked.c; GDN_ALGO_AUTO picks it when sequences average 32 tokens or more), and conv,
 * gating and norms split over rows (cpu_pointwise.c). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall() for the AMX permission request */
#include "cpu.h"
#include "../core/status.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
#include <sys/syscall.h>
#endif

static const char *isa_name(gdn_cpu_isa isa)
{
    switch (isa) {
    case GDN_ISA_SCALAR: return "scalar";
    case GDN_ISA_AVX2: return "avx2";
    case GDN_ISA_AVX512: return "avx512";
    case GDN_ISA_AMX: return "amx";
    default: return "auto";
    }
}

static bool isa_supported(gdn_cpu_isa isa)
{
    unsigned f = gdn_cpu_features();
    switch (isa) {
    case GDN_ISA_SCALAR: return true;
    case GDN_ISA_AVX2: return (f & GDN_CPU_AVX2) != 0;
    case GDN_ISA_AVX512: return (f & GDN_CPU_AVX512F) && (f & GDN_CPU_AVX2);
    case GDN_ISA_AMX: return (f & GDN_CPU_AMX_BF16) != 0;
    default: return false;
    }
}

/* Linux hands out the AMX tile state only to processes that ask for it (once per process;
 * asking again is harmless). */
static bool amx_permitted(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

/* The level to run: the context's request, else $GDN_CPU_ISA, else the best the CPU has. The amx
 * level is the avx512 kernels plus AMX products in the chunked form for bf16 inputs; it needs
 * the kernels built (a compiler with AMX support) and the OS's permission. */
static gdn_status choose_isa(gdn_context *ctx, gdn_cpu_isa *out)
{
    gdn_cpu_isa want = ctx->opts.cpu_isa;
    const char *env = getenv("GDN_CPU_ISA");
    if (want == GDN_ISA_AUTO && env && *env) {
        static const gdn_cpu_isa all[] = {GDN_ISA_SCALAR, GDN_ISA_AVX2, GDN_ISA_AVX512,
                                          GDN_ISA_AMX};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (!strcmp(env, isa_name(all[i])))
                want = all[i];
        if (want == GDN_ISA_AUTO)
            return gdn_fail(ctx, GDN_ERR_VALUE, "gdn_context_create",
                            "GDN_CPU_ISA is '%s', expected scalar, avx2, avx512 or amx", env);
    }
    const bool amx = cpu_chunk_amx && isa_supported(GDN_ISA_AMX) &&
                     isa_supported(GDN_ISA_AVX512) && amx_permitted();
    if (want == GDN_ISA_AUTO)
        want = amx                            ? GDN_ISA_AMX
               : isa_supported(GDN_ISA_AVX512) ? GDN_ISA_AVX512
               : isa_supported(GDN_ISA_AVX2)   ? GDN_ISA_AVX2
                                               : GDN_ISA_SCALAR;
    if (!isa_supported(want) || (want == GDN_ISA_AMX && !amx))
        return gdn_fail(ctx, GDN_ERR_BACKEND, "gdn_context_create",
                        "cpu ISA level %s is not available on this CPU%s (gdn info lists its "
                        "features)", isa_name(want),
                        want == GDN_ISA_AMX && isa_supported(want)
                            ? (cpu_chunk_amx ? ", the OS refused the AMX tile state"
                                             : ", this build has no AMX kernels")
                            : "");
    *out = want;
    return GDN_OK;
}

static const cpu_chunk_kernels *chunk_kernels(gdn_cpu_isa isa)
{
    return isa >= GDN_ISA_AVX512 ? &cpu_chunk_avx512
           : isa == GDN_ISA_AVX2 ? &cpu_chunk_avx2
                                 : &cpu_chunk_scalar;
}

/* bf16 products for bf16 inputs: AMX tiles at the amx level. AVX512-BF16 dot products at the
 * avx512 level only when GDN_CPU_BF16_DOT=1 asks for them: with the hi + lo operands their
 * precision needs, they do about twice the f32 kernels' multiply-adds at twice the rate per
 * instruction, and measured slower than the f32 kernels (docs/DESIGN.md). */
static const cpu_chunk_kernels *chunk_bf16_kernels(gdn_cpu_isa isa)
{
    if (isa == GDN_ISA_AMX)
        return cpu_chunk_amx;
    const char *dot = getenv("GDN_CPU_BF16_DOT");
    if (isa == GDN_ISA_AVX512 && (gdn_cpu_features() & GDN_CPU_AVX512BF16) && dot &&
        !strcmp(dot, "1"))
        return cpu_chunk_avx512bf16;
    return NULL;
}

static gdn_status cpu_init(gdn_context *ctx)
{
    cpu_backend_state *s = calloc(1, sizeof *s);
    if (!s)
        return gdn_fail(ctx, GDN_ERR_NO_MEMORY, "gdn_context_create", "out of memory");
    GDN_TRY_ELSE(choose_isa(ctx, &s->isa), free(s));
    s->chunk = chunk_kernels(s->isa);
    s->chunk_bf16 = chunk_bf16_kernels(s->isa);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    online = online < 1 ? 1 : online > GDN_MAX_THREADS ? GDN_MAX_THREADS : online;
    int threads = ctx->opts.num_threads ? ctx->opts.num_threads : (int)online;
    s->pool = cpu_pool_create(threads);
    if (!s->pool) {
        free(s);
        return gdn_fail(ctx, GDN_ERR_NO_MEMORY, "gdn_context_create", "cannot start %d threads",
                        threads);
    }
    ctx->backend_state = s;
    return GDN_OK;
}

static void cpu_fini(gdn_context *ctx)
{
    cpu_backend_state *s = ctx->backend_state;
    if (s)
        cpu_pool_destroy(s->pool);
    free(s);
}

size_t cpu_recurrent_scratch_floats(const gdn_delta_rule_problem *p)
{
    /* q, k, v, k^T S, q^T S, u, a staged K x V state, the next token's q, k, v; padded to keep
     * workers 64 B apart */
    return (size_t)(4 * p->K + 5 * p->V + p->K * p->V + 16);
}

static size_t cpu_delta_rule_workspace(const gdn_context *ctx, const gdn_delta_rule_problem *p)
{
    const cpu_backend_state *s = ctx->backend_state;
    if (cpu_chunked_wanted(s, p))
        return cpu_chunked_workspace(s, p);
    return gdn_size_mul(gdn_size_mul((size_t)cpu_pool_threads(s->pool),
                                     cpu_recurrent_scratch_floats(p)),
                        sizeof(float));
}

typedef struct recurrent_job {
    const gdn_delta_rule_problem *p;
    cpu_recurrent_fn kernel;
    float *scratch;
    size_t per_worker;
} recurrent_job;

static void recurrent_task(void *arg, int64_t task, int worker)
{
    const recurrent_job *j = arg;
    j->kernel(j->p, task / j->p->HV, task % j->p->HV, j->scratch + (size_t)worker * j->per_worker);
}

static gdn_status cpu_delta_rule(gdn_context *ctx, const gdn_delta_rule_problem *p,
                                 void *workspace)
{
    const cpu_backend_state *s = ctx->backend_state;
    if (cpu_chunked_wanted(s, p)) {
        cpu_chunked_run(s, p, workspace);
        return GDN_OK;
    }
    recurrent_job j = {p, cpu_recurrent_scalar, workspace, cpu_recurrent_scratch_floats(p)};
    if (s->isa >= GDN_ISA_AVX512)
        j.kernel = cpu_recurrent_avx512;
    else if (s->isa == GDN_ISA_AVX2)
        j.kernel = cpu_recurrent_avx2;
    cpu_pool_run(s->pool, p->seqs.count * p->HV, recurrent_task, &j);
    return GDN_OK;
}

static int cpu_num_threads(const gdn_context *ctx)
{
    const cpu_backend_state *s = ctx->backend_state;
    return s ? cpu_pool_threads(s->pool) : 0;
}

static gdn_cpu_isa cpu_isa(const gdn_context *ctx)
{
    const cpu_backend_state *s = ctx->backend_state;
    return s ? s->isa : GDN_ISA_AUTO;
}

static gdn_bf16_products cpu_bf16_products(const gdn_context *ctx)
{
    const cpu_backend_state *s = ctx->backend_state;
    if (!s || !s->chunk_bf16)
        return GDN_BF16_PRODUCTS_F32;
    return s->chunk_bf16 == cpu_chunk_amx ? GDN_BF16_PRODUCTS_AMX : GDN_BF16_PRODUCTS_AVX512BF16;
}

const gdn_backend_ops gdn_cpu_backend = {
    .id = GDN_BACKEND_CPU,
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .conv1d = cpu_conv1d,
    .conv1d_update = cpu_conv1d_update,
    .gating = cpu_gating,
    .l2norm = cpu_l2norm,
    .rmsnorm_gated = cpu_rmsnorm_gated,
    .delta_rule_workspace = cpu_delta_rule_workspace,
    .delta_rule = cpu_delta_rule,
    .num_threads = cpu_num_threads,
    .cpu_isa = cpu_isa,
    .bf16_products = cpu_bf16_products,
};
