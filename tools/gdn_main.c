/* gdn: the libgdn command-line tool. */
#include "gdn_tool.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each subcommand's usage: `gdn <command> --help` (or -h, or `gdn help <command>`) prints it on
 * stdout and exits 0. */
static const char usage_demo[] =
    "usage: gdn demo [--backend B] [--threads N] [--dtype f32|bf16|f16] [--json]\n"
    "\n"
    "The main job: a Qwen3.5-shaped GDN block (H=16, HV=32, K=V=128, conv width 4) on\n"
    "deterministic inputs: conv + gating + L2 norm + chunked prefill of a 4096-token prompt into\n"
    "a state pool, 64 recurrent decode steps, the gated RMSNorm; verified against one reference\n"
    "pass over all 4160 tokens. Prints tokens/s per phase; exit status 1 if verification fails.\n"
    "\n"
    "  --backend auto|ref|cpu|cuda   backend to run (default auto: cpu)\n"
    "  --threads N                   cpu threads (default 0: one per CPU)\n"
    "  --dtype f32|bf16|f16          activation dtype (default f32)\n"
    "  --json                        machine-readable output\n";

static const char usage_check[] =
    "usage: gdn check [--backend B] [--threads N] [--seed S] [--json]\n"
    "\n"
    "Every op of a backend on random problems against the reference, as a table; exit status 1\n"
    "on any failure.\n"
    "\n"
    "  --backend auto|ref|cpu|cuda   backend to check (default auto: cpu)\n"
    "  --threads N                   cpu threads (default 0: one per CPU)\n"
    "  --seed S                      replay a run (default: fresh, or $GDN_SEED)\n"
    "  --json                        one JSON object per case\n";

static const char usage_bench[] =
    "usage: gdn bench [--backend B] [--threads N] [--op decode|prefill|peak|all]\n"
    "                 [--layout kv|vk] [--batches B1,B2,...] [--tokens T]\n"
    "                 [--dtype bf16|f16|f32] [--precision fast|high|both] [--json FILE]\n"
    "\n"
    "cuda: decode rows (B = 1, 16, 64, 256; HV=32, H=16, K=V=128) against a copy measured in\n"
    "the same run, and prefill rows (T = 8192 to 131072, a TP2 row 32768/8/16 and a varlen row\n"
    "of 8 x 4096 tokens, seqs = 8) in ms, tokens/s and TFLOP/s, each in the fast and the high\n"
    "precision mode (\"mode\" in the JSON; f32 rows: one row, high).\n"
    "cpu: prefill (T = 1024, 4096, 16384 x HV = 32, 8 x f32, bf16) and decode (B = 1, 16, 64)\n"
    "rows against a four-pass f32 baseline (vs_baseline) and the f32 FMA peak (or the bf16\n"
    "products' peak) measured first on the same threads (peak_fraction); a peak_fraction above\n"
    "1 means the peak was measured wrong, and the bench fails instead of reporting it.\n"
    "\n"
    "  --backend auto|ref|cpu|cuda   backend to run (default auto: cpu)\n"
    "  --threads N                   cpu threads (default 0: one per CPU)\n"
    "  --op decode|prefill|all       only those rows (default all); cpu: --op peak measures\n"
    "                                the peaks alone, per ISA level, with the core clock\n"
    "  --layout kv|vk                decode rows' state layout (default kv)\n"
    "  --batches B1,B2,...           decode rows' batch sizes (up to 8, each 1..4096)\n"
    "  --tokens T                    decode rows' tokens per sequence (1..16, default 1)\n"
    "  --dtype bf16|f16|f32          cuda prefill rows' q/k/v/out dtype (default bf16)\n"
    "  --precision fast|high|both    cuda prefill rows' precision modes (default both)\n"
    "  --json FILE                   also write one JSON object per row to FILE\n";

static const char usage_info[] =
    "usage: gdn info [--backend B] [--threads N] [--json]\n"
    "\n"
    "Version, compiled backends, CPU features, the cpu backend's ISA level, threads and bf16\n"
    "products, CUDA devices.\n"
    "\n"
    "  --backend auto|ref|cpu|cuda   the backend to report as selected (default auto)\n"
    "  --threads N                   cpu threads (default 0: one per CPU)\n"
    "  --json                        machine-readable output\n";

static const char usage_main[] =
    "usage: gdn <command> [options]     (gdn <command> --help: that command's options)\n"
    "\n"
    "commands:\n"
    "  demo    the main job: a Qwen3.5-shaped GDN block (H=16, HV=32, K=V=128, conv\n"
    "          width 4): 4096-token chunked prefill into a state pool, 64 recurrent\n"
    "          decode steps, gated RMSNorm; verified against one reference pass\n"
    "  check   conformance sweep of every op on random problems against the reference\n"
    "  bench   decode and prefill rows: cuda against a measured copy, cpu against a\n"
    "          four-pass baseline and the measured FMA peak\n"
    "  info    version, compiled backends, CPU features, CUDA devices\n"
    "  help    this text, or `gdn help <command>`\n"
    "  version the version\n"
    "\n"
    "common options:\n"
    "  --backend auto|ref|cpu|cuda   backend to run (default auto)\n"
    "  --threads N                   CPU threads (default: all)\n"
    "  --json                        machine-readable output\n";

static const struct command {
    const char *name;
    int (*run)(int, char **);
    const char *usage;
} commands[] = {{"demo", cmd_demo, usage_demo},
                {"check", cmd_check, usage_check},
                {"bench", cmd_bench, usage_bench},
                {"info", cmd_info, usage_info}};

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

static bool is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

static int parse_backend(const char *s, gdn_backend *b)
{
    static const gdn_backend all[] = {GDN_BACKEND_AUTO, GDN_BACKEND_REF, GDN_BACKEND_CPU,
                                      GDN_BACKEND_CUDA};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, gdn_backend_name(all[i]))) {
            *b = all[i];
            return 0;
        }
    return -1;
}

static int parse_dtype(const char *s, gdn_dtype *d)
{
    static const gdn_dtype all[] = {GDN_F32, GDN_BF16, GDN_F16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, gdn_dtype_name(all[i]))) {
            *d = all[i];
            return 0;
        }
    return -1;
}

int parse_common_options(int argc, char **argv, tool_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = GDN_BACKEND_AUTO;
    o->dtype = GDN_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = !strcmp(a, "--backend") || !strcmp(a, "--threads") ||
                           !strcmp(a, "--dtype") || !strcmp(a, "--seed");
        if (takes_value && !val) {
            fprintf(stderr, "gdn: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--backend")) {
            if (parse_backend(val, &o->backend)) {
                fprintf(stderr, "gdn: --backend is '%s', expected auto, ref, cpu or cuda\n", val);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--threads")) {
            char *end;
            long n = strtol(val, &end, 10);
            if (end == val || *end || n < 0 || n > GDN_MAX_THREADS) {
                fprintf(stderr, "gdn: --threads is '%s', expected a count from 0 to %d\n", val,
                        GDN_MAX_THREADS);
                return 2;
            }
            o->threads = (int)n;
            i++;
        } else if (!strcmp(a, "--dtype")) {
            if (parse_dtype(val, &o->dtype)) {
                fprintf(stderr, "gdn: --dtype is '%s', expected f32, bf16 or f16\n", val);
                return 2;
            }
            o->dtype_given = true;
            i++;
        } else if (!strcmp(a, "--seed")) {
            if (!parse_seed(val, &o->seed)) {
                fprintf(stderr, "gdn: --seed is '%s', expected an unsigned integer (decimal or "
                        "0x hex)\n", val);
                return 2;
            }
            o->seed_given = true;
            i++;
        } else {
            fprintf(stderr, "gdn %s: unknown option '%s'\n", argv[0], a);
            return 2;
        }
    }
    if (!o->seed_given)
        o->seed = fresh_seed();
    return 0;
}

gdn_context *open_context(const tool_options *o)
{
    gdn_context_options co = gdn_context_default_options();
    co.backend = o->backend;
    co.num_threads = o->threads;
    gdn_context *ctx = NULL;
    gdn_status st = gdn_context_create(&ctx, &co);
    if (st != GDN_OK) {
        fprintf(stderr, "gdn: %s\n", gdn_last_error(NULL));
        return NULL;
    }
    return ctx;
}

int cmd_info(int argc, char **argv)
{
    tool_options o;
    if (parse_common_options(argc, argv, &o))
        return 2;
    unsigned f = gdn_cpu_features();
    static const struct {
        unsigned bit;
        const char *name;
    } feats[] = {{GDN_CPU_AVX2, "avx2+fma"},
                 {GDN_CPU_F16C, "f16c"},
                 {GDN_CPU_AVX512F, "avx512"},
                 {GDN_CPU_AVX512BF16, "avx512_bf16"},
                 {GDN_CPU_AMX_BF16, "amx_bf16"}};
    static const gdn_backend backends[] = {GDN_BACKEND_REF, GDN_BACKEND_CPU, GDN_BACKEND_CUDA};
    int ndev = gdn_cuda_device_count();
    gdn_context *ctx = open_context(&o);
    const char *active = ctx ? gdn_backend_name(gdn_context_backend(ctx)) : "none";
    if (o.json) {
        printf("{\"version\": \"%s\", \"backends\": [", gdn_version_string());
        int n = 0;
        for (size_t i = 0; i < 3; i++)
            if (gdn_backend_available(backends[i]))
                printf("%s\"%s\"", n++ ? ", " : "", gdn_backend_name(backends[i]));
        printf("], \"auto\": \"%s\", \"cpu_features\": [", active);
        n = 0;
        for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
            if (f & feats[i].bit)
                printf("%s\"%s\"", n++ ? ", " : "", feats[i].name);
        printf("], \"cuda_devices\": [");
        for (int d = 0; d < ndev; d++) {
            char name[256];
            gdn_cuda_device_name(d, name, sizeof name);
            printf("%s\"%s\"", d ? ", " : "", name);
        }
        printf("]}\n");
    } else {
        printf("libgdn %s\n", gdn_version_string());
        printf("backends:     ");
        for (size_t i = 0; i < 3; i++)
            printf("%s %s   ", gdn_backend_name(backends[i]),
                   gdn_backend_available(backends[i]) ? "yes" : "no");
        printf("\nselected:     %s (--backend %s)\n", active, gdn_backend_name(o.backend));
        printf("cpu features: ");
        for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
            if (f & feats[i].bit)
                printf("%s ", feats[i].name);
        printf("%s\n", f ? "" : "(none beyond the baseline)");
        gdn_context_options co = gdn_context_default_options();
        co.backend = GDN_BACKEND_CPU;
        co.num_threads = o.threads;
        gdn_context *cpu = NULL;
        if (gdn_context_create(&cpu, &co) == GDN_OK) {
            static const char *isa[] = {"auto", "scalar", "avx2", "avx512", "amx"};
            static const char *prod[] = {"f32 kernels (converted rows)",
                                         "avx512_bf16 dot products (GDN_CPU_BF16_DOT=1)",
                                         "amx tiles"};
            printf("cpu backend:  %s kernels, %d threads (GDN_CPU_ISA overrides); bf16 inputs: "
                   "%s\n", isa[gdn_context_cpu_isa(cpu)], gdn_context_num_threads(cpu),
                   prod[gdn_context_cpu_bf16_products(cpu)]);
            gdn_context_destroy(cpu);
        }
        printf("cuda devices: %d\n", ndev);
        for (int d = 0; d < ndev; d++) {
            char name[256];
            gdn_cuda_device_name(d, name, sizeof name);
            printf("  [%d] %s\n", d, name);
        }
    }
    gdn_context_destroy(ctx);
    return ctx ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 2;
    }
    if (is_help(argv[1]) || !strcmp(argv[1], "help")) {
        const struct command *c = argc > 2 && !is_help(argv[1]) ? find_command(argv[2]) : NULL;
        if (argc > 2 && !is_help(argv[1]) && !c) {
            fprintf(stderr, "gdn help: unknown command '%s'\n\n%s", argv[2], usage_main);
            return 2;
        }
        fputs(c ? c->usage : usage_main, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("gdn %s\n", gdn_version_string());
        return 0;
    }
    const struct command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "gdn: unknown command '%s'\n\n%s", argv[1], usage_main);
        return 2;
    }
    for (int i = 2; i < argc; i++) /* --help anywhere among the options: the usage, nothing run */
        if (is_help(argv[i])) {
            fputs(c->usage, stdout);
            return 0;
        }
    return c->run(argc - 1, argv + 1);
}
