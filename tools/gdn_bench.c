/* gdn bench: decode throughput of the fused recurrent delta rule and, on CUDA, prefill with the
 * chunked form; one JSON object per row (the cpu backend's rows, prefill and decode against the
 * four-pass baseline, are in gdn_bench_cpu.c).
 *
 * Decode rows: B sequences of one token, HV = 32 value heads, H = 16 key heads, K = V = 128,
 * bf16 q/k/v/out, f32 state in a pool, q/k L2 norm in the kernel. The state dominates the
 * bytes: B * HV * K * V * 4 read and as much written per step. On CUDA every step runs against
 * a different group of pool slots, so the timed state never sits in L2 (the pool spans at least
 * 256 MiB, several times the L2), the steps are captured into one CUDA graph, and the device
 * time per step comes from events; a device-to-device copy measured in the same run gives
 * bw_fraction (1 GiB cudaMemcpyAsync copies, eager), and a plain copy kernel moving each row's
 * own state bytes, timed the same way as the row (20 in a graph, cycling through 256 MiB), gives
 * vs_copy_like: how close the step comes to a copy of its bytes, launch and ramp included. Host
 * backends are timed with the wall clock.
 *
 * Prefill rows (CUDA): bf16 q/k/v/out (--dtype), f32 gates, an f32 initial state read from and
 * the final state written to a pool of one slot per sequence, q/k L2 norm in the kernel, the
 * chunked algorithm. Shapes: the tensor-core prefill issue's table (one sequence of T tokens,
 * B = 1), a tensor-parallel-2 row (32768/8/16) and a packed varlen row (B = 1, T = 32768 in 8
 * sequences of 4096 tokens, int32 cu_seqlens on the device; "seqs" in the JSON tells it apart).
 * Each 16-bit row runs in both precision modes on the same inputs (--precision fast|high|both:
 * "fast" rounds each tensor-core operand once, "high" splits it into hi + lo parts); f32 inputs
 * give the same result in every mode and report one row, "high". TFLOP/s counts the chunked
 * form's products per 64-token chunk (of each sequence) and value head, 2 flops per
 * multiply-add: C^2 (3K + 2V) (K K^T, Q K^T, W, U, Aqk V') + 3 C K V (W S, Q S, K^T V'); both
 * modes are counted alike, so "high" reports the useful rate, not the products it runs. */
#include "device.h"
#include "gdn_tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 16, HV = 32, DK = 128, DV = 128 };

typedef struct decode_bench {
    gdn_context *ctx;
    gdn_delta_rule_args args;
    gdn_tensor slots_all;   /* [S] i32: 0 .. S-1 */
    int64_t B, groups;      /* the pool holds `groups` disjoint groups of B slots */
    int64_t step;
    gdn_status status;
} decode_bench;

/* One decode step on the next group of slots. */
static void decode_step(void *p)
{
    decode_bench *d = p;
    int64_t g = d->step++ % d->groups;
    d->args.state_slots = tensor_slice(&d->slots_all, 0, g * d->B, d->B);
    gdn_status st = gdn_delta_rule(d->ctx, &d->args);
    if (st != GDN_OK && d->status == GDN_OK)
        d->status = st;
}

typedef struct bench_row {
    int64_t B;
    double ms;          /* device time per step (graph replay on CUDA) */
    double eager_ms;    /* per step when launched one by one from the host (CUDA only) */
    double state_gb_s;
    double copy_like_gb_s; /* copies of the step's state bytes, timed the same way (CUDA) */
} bench_row;

static gdn_tensor host_rand(rng *r, gdn_dtype dt, int ndim, const int64_t *shape, double lo,
                            double hi)
{
    gdn_tensor t = tensor_alloc(dt, ndim, shape);
    tensor_fill_uniform(&t, r, lo, hi);
    return t;
}

/* Times decode with B sequences of T tokens each (T > 1: a short multi-token call, as speculative
 * verification makes; the state traffic per call is the same); returns 0 or prints the error and
 * returns 1. */
/* Device time per step comes from a CUDA graph of 20 steps (launch gaps removed); eager time
 * from 200 steps launched one by one through the C API, which is what a caller without graphs
 * sees when the host cannot run ahead of the GPU. */
static int bench_decode(gdn_context *ctx, bool device, void *stream, int64_t B, int64_t T,
                        gdn_state_layout layout, rng *r, bench_row *row)
{
    const int64_t per_seq = (int64_t)HV * DK * DV * 4;
    int64_t S = (256ll << 20) / per_seq;
    if (S < 2 * B)
        S = 2 * B;
    if (!device)
        S = B; /* host backends: the working set already exceeds the caches at large B */
    int64_t qs[4] = {B, T, H, DK}, vs[4] = {B, T, HV, DV}, gs[3] = {B, T, HV};
    int64_t ps[4] = {S, HV, DK, DV};
    gdn_tensor q = host_rand(r, GDN_BF16, 4, qs, -1, 1), k = host_rand(r, GDN_BF16, 4, qs, -1, 1);
    gdn_tensor v = host_rand(r, GDN_BF16, 4, vs, -1, 1), out = tensor_alloc(GDN_BF16, 4, vs);
    gdn_tensor g = host_rand(r, GDN_F32, 3, gs, -0.5, 0), beta = host_rand(r, GDN_F32, 3, gs, 0, 1);
    gdn_tensor slots = tensor_alloc(GDN_I32, 1, &S);
    for (int64_t i = 0; i < S; i++)
        ((int32_t *)slots.data)[i] = (int32_t)i;
    gdn_tensor pool = gdn_tensor_none();
    staging st = {0};
    if (device) {
        pool = gdn_tensor_4d(dev_alloc((size_t)S * (size_t)per_seq), GDN_F32, S, HV, DK, DV);
        dev_memset(pool.data, 0, (size_t)S * (size_t)per_seq);
        gdn_tensor *all[] = {&q, &k, &v, &out, &g, &beta, &slots};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            stage(&st, all[i]);
    } else {
        pool = tensor_alloc(GDN_F32, 4, ps);
    }
    decode_bench d;
    memset(&d, 0, sizeof d);
    d.ctx = ctx;
    d.args = gdn_delta_rule_default_args();
    d.args.q = q, d.args.k = k, d.args.v = v, d.args.g = g, d.args.beta = beta;
    d.args.out = out, d.args.state = pool;
    d.args.qk_l2norm = 1;
    d.args.state_layout = layout; /* K == V here, so the pool's shape is the same */
    d.args.algorithm = GDN_ALGO_RECURRENT;
    d.slots_all = slots;
    d.B = B;
    d.groups = S / B;
    decode_step(&d); /* surface argument errors before timing */
    if (d.status == GDN_OK) {
        if (device) {
            row->ms = dev_time_ms(stream, decode_step, &d, 20, true);
            row->eager_ms = dev_time_ms(stream, decode_step, &d, 200, false);
        } else {
            int iters = B >= 64 ? 3 : 10;
            double t0 = now_seconds();
            for (int i = 0; i < iters; i++)
                decode_step(&d);
            row->ms = row->eager_ms = 1e3 * (now_seconds() - t0) / iters; /* host: one clock */
        }
    }
    int rc = 0;
    if (d.status != GDN_OK) {
        fprintf(stderr, "gdn bench: %s\n", gdn_last_error(ctx));
        rc = 1;
    }
    row->B = B;
    row->state_gb_s = 2.0 * (double)(B * per_seq) / (row->ms * 1e6);
    if (device && !rc)
        row->copy_like_gb_s = dev_copy_like_gbps(stream, (size_t)(B * per_seq), (size_t)256 << 20);
    unstage(&st);
    if (device)
        dev_free(pool.data);
    else
        tensor_free(&pool);
    gdn_tensor *all[] = {&q, &k, &v, &out, &g, &beta, &slots};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
    return rc;
}

/* ---- prefill (CUDA) ------------------------------------------------------------------------ */

typedef struct prefill_shape {
    int64_t T, H, HV; /* T: all tokens of the call */
    int64_t seqs;     /* sequences packed into T (1: no cu_seqlens); T % seqs == 0 */
} prefill_shape;

static const prefill_shape prefill_shapes[] = {
    {8192, 16, 32, 1},  {32768, 16, 32, 1}, {32768, 16, 32, 8}, {32768, 8, 16, 1},
    {32768, 4, 8, 1},   {32768, 2, 4, 1},   {131072, 2, 4, 1}};
enum { NPREFILL = sizeof prefill_shapes / sizeof prefill_shapes[0], MAX_MODES = 2 };

typedef struct prefill_row {
    prefill_shape s;
    gdn_dtype dtype;    /* q, k, v, out */
    gdn_precision mode; /* GDN_PRECISION_FAST or GDN_PRECISION_HIGH */
    double ms, tflops;
} prefill_row;

static const char *mode_name(gdn_precision p)
{
    return p == GDN_PRECISION_HIGH ? "high" : "fast";
}

typedef struct prefill_bench {
    gdn_context *ctx;
    gdn_delta_rule_args args;
    gdn_status status;
} prefill_bench;

static void prefill_step(void *p)
{
    prefill_bench *b = p;
    gdn_status st = gdn_delta_rule(b->ctx, &b->args);
    if (st != GDN_OK && b->status == GDN_OK)
        b->status = st;
}

static double chunked_flops(const prefill_shape *s)
{
    const int64_t len = s->T / s->seqs;
    const double C = 64, chunks = (double)(s->seqs * ((len + 63) / 64)) * (double)s->HV;
    return 2.0 * chunks * (C * C * (3.0 * DK + 2.0 * DV) + 3.0 * C * DK * DV);
}

/* Times one shape in each of the nmodes precision modes, on the same inputs; fills rows[0 ..
 * nmodes - 1]. Returns 0, or prints the error and returns 1. */
static int bench_prefill(gdn_context *ctx, void *stream, const prefill_shape *shape,
                         gdn_dtype dt, const gdn_precision *modes, int nmodes, rng *r,
                         prefill_row *rows)
{
    const int64_t T = shape->T, Hq = shape->H, Hv = shape->HV, N = shape->seqs;
    int64_t qs[4] = {1, T, Hq, DK}, vs[4] = {1, T, Hv, DV}, gs[3] = {1, T, Hv};
    gdn_tensor q = host_rand(r, dt, 4, qs, -1, 1), k = host_rand(r, dt, 4, qs, -1, 1);
    gdn_tensor v = host_rand(r, dt, 4, vs, -1, 1), out = tensor_alloc(dt, 4, vs);
    gdn_tensor g = host_rand(r, GDN_F32, 3, gs, -0.2, 0), beta = host_rand(r, GDN_F32, 3, gs, 0, 1);
    int64_t ps[4] = {N, Hv, DK, DV}, ncu = N + 1;
    gdn_tensor pool = host_rand(r, GDN_F32, 4, ps, -0.1, 0.1);
    gdn_tensor cu = gdn_tensor_none(); /* [N + 1] i32: 0, T / N, ..., T (varlen rows only) */
    if (N > 1) {
        cu = tensor_alloc(GDN_I32, 1, &ncu);
        for (int64_t i = 0; i <= N; i++)
            ((int32_t *)cu.data)[i] = (int32_t)(i * (T / N));
    }
    staging st = {0};
    gdn_tensor *all[] = {&q, &k, &v, &out, &g, &beta, &pool, &cu}; /* an absent cu: skipped */
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        stage(&st, all[i]);
    prefill_bench b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.args = gdn_delta_rule_default_args();
    b.args.q = q, b.args.k = k, b.args.v = v, b.args.g = g, b.args.beta = beta;
    b.args.out = out, b.args.state = pool, b.args.cu_seqlens = cu;
    b.args.qk_l2norm = 1;
    b.args.algorithm = GDN_ALGO_CHUNKED;
    int rc = 0;
    for (int m = 0; m < nmodes && !rc; m++) {
        prefill_row *row = &rows[m];
        b.args.precision = modes[m];
        /* argument errors surface here; the workspace is acquired outside timing */
        prefill_step(&b);
        if (b.status == GDN_OK)
            row->ms = dev_time_ms(stream, prefill_step, &b, 10, false);
        if (b.status != GDN_OK) {
            fprintf(stderr, "gdn bench: %s\n", gdn_last_error(ctx));
            rc = 1;
        }
        row->s = *shape;
        row->dtype = dt;
        row->mode = modes[m];
        row->tflops = chunked_flops(shape) / (row->ms * 1e9);
    }
    unstage(&st);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
    return rc;
}

/* The prefill rows, after `after_rows` earlier rows of the same JSON array. */
static void print_prefill_json(FILE *jf, const prefill_row *rows, int n, gdn_context *ctx,
                               const char *devname, bool after_rows)
{
    for (int i = 0; i < n; i++) {
        const prefill_row *w = &rows[i];
        fprintf(jf, "%s{\"op\": \"prefill\", \"backend\": \"cuda\", \"dtype\": \"%s\", "
                    "\"state_dtype\": \"f32\", \"algorithm\": \"chunked\", \"mode\": \"%s\", "
                    "\"B\": 1, \"seqs\": %lld, \"T\": %lld, \"H\": %lld, \"HV\": %lld, "
                    "\"K\": %d, \"V\": %d, \"threads\": %d, \"ms\": %.6f, \"tokens_per_s\": "
                    "%.1f, \"tflops\": %.2f, \"peak_fraction\": null, \"vs_baseline\": null, "
                    "\"device\": \"%s\"}",
                i || after_rows ? ",\n " : "", gdn_dtype_name(w->dtype), mode_name(w->mode),
                (long long)w->s.seqs, (long long)w->s.T, (long long)w->s.H, (long long)w->s.HV,
                DK, DV, gdn_context_num_threads(ctx), w->ms, (double)w->s.T / (w->ms * 1e-3),
                w->tflops, devname);
    }
}

/* "1,16,64" into at most 8 batch sizes >= 1; prints the error and returns 1 on bad input. */
static int parse_batches(const char *s, int64_t *b, int *n)
{
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 1 || x > 4096 || k == 8 || (*end && *end != ',')) {
            fprintf(stderr, "gdn bench: --batches is '%s', expected up to 8 comma-separated "
                            "batch sizes in 1..4096\n", s);
            return 1;
        }
        b[k++] = x;
        p = *end ? end + 1 : end;
    }
    if (!k) {
        fprintf(stderr, "gdn bench: --batches is empty\n");
        return 1;
    }
    *n = k;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    /* --json FILE is bench's own option; the rest are the common ones */
    const char *json_path = NULL;
    gdn_state_layout layout = GDN_STATE_KV;
    const char *op = "all"; /* --op decode|prefill: only those rows; peak: the cpu peaks */
    int64_t batches[8] = {1, 16, 64, 256}; /* --batches B1,B2,...: the decode rows */
    int nb = 4;
    int64_t tokens = 1; /* --tokens T: tokens per sequence in the decode rows (1..16) */
    const char *precision = "both"; /* --precision fast|high|both: the 16-bit prefill rows' modes */
    char *rest[64];
    int n = 0;
    for (int i = 0; i < argc && n < 63; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc && argv[i + 1][0] != '-')
            json_path = argv[++i];
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc)
            layout = !strcmp(argv[++i], "vk") ? GDN_STATE_VK : GDN_STATE_KV;
        else if (!strcmp(argv[i], "--op") && i + 1 < argc)
            op = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) {
            if (parse_batches(argv[++i], batches, &nb))
                return 2;
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            char *end;
            tokens = strtoll(argv[++i], &end, 10);
            if (*end || tokens < 1 || tokens > 16) {
                fprintf(stderr, "gdn bench: --tokens is '%s', expected 1..16\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            precision = argv[++i];
            if (strcmp(precision, "fast") && strcmp(precision, "high") &&
                strcmp(precision, "both")) {
                fprintf(stderr, "gdn bench: --precision is '%s', expected fast, high or both\n",
                        precision);
                return 2;
            }
        } else
            rest[n++] = argv[i];
    }
    rest[n] = NULL;
    if (strcmp(op, "all") && strcmp(op, "decode") && strcmp(op, "prefill") &&
        strcmp(op, "peak")) {
        fprintf(stderr, "gdn bench: --op is '%s', expected decode, prefill, peak (cpu) or all\n",
                op);
        return 2;
    }
    const bool do_decode = strcmp(op, "prefill") != 0, do_prefill = strcmp(op, "decode") != 0;
    tool_options o;
    if (parse_common_options(n, rest, &o))
        return 2;
    gdn_context *ctx = open_context(&o);
    if (!ctx)
        return 1;
    gdn_backend be = gdn_context_backend(ctx);
    if (be == GDN_BACKEND_CPU) {
        int rc = bench_cpu(ctx, op, o.json, json_path, o.seed);
        gdn_context_destroy(ctx);
        return rc;
    }
    if (!strcmp(op, "peak")) {
        fprintf(stderr, "gdn bench: --op peak measures the cpu's peaks, expected --backend cpu\n");
        gdn_context_destroy(ctx);
        return 2;
    }
    bool device = be == GDN_BACKEND_CUDA;
    const gdn_dtype prefill_dtype = o.dtype_given ? o.dtype : GDN_BF16; /* (--dtype) */
    /* the prefill rows' modes: f32 inputs give the same result in every mode, one row "high" */
    gdn_precision modes[MAX_MODES];
    int nmodes = 0;
    if (prefill_dtype != GDN_F32 && strcmp(precision, "high"))
        modes[nmodes++] = GDN_PRECISION_FAST;
    if (prefill_dtype == GDN_F32 || strcmp(precision, "fast"))
        modes[nmodes++] = GDN_PRECISION_HIGH;
    void *stream = device ? dev_stream_new() : NULL;
    gdn_context_set_stream(ctx, stream);
    char devname[128] = "";
    double copy = 0.0;
    if (device) {
        dev_name(devname, sizeof devname);
        copy = dev_copy_gbps(stream, (size_t)1 << 30);
    }
    rng r = rng_seed(o.seed);
    bench_row rows[8];
    memset(rows, 0, sizeof rows);
    int rc = 0;
    for (int i = 0; i < nb && do_decode && !rc; i++) {
        if (!o.json)
            fprintf(stderr, "[gdn bench] decode B=%lld on %s\n", (long long)batches[i],
                    gdn_backend_name(be));
        rc = bench_decode(ctx, device, stream, batches[i], tokens, layout, &r, &rows[i]);
    }
    prefill_row prows[NPREFILL * MAX_MODES];
    memset(prows, 0, sizeof prows);
    int nprows = 0;
    for (int i = 0; i < NPREFILL && device && do_prefill && !rc; i++) {
        const prefill_shape *s = &prefill_shapes[i];
        if (!o.json)
            fprintf(stderr, "[gdn bench] prefill T=%lld H=%lld HV=%lld seqs=%lld (%s%s) on cuda\n",
                    (long long)s->T, (long long)s->H, (long long)s->HV, (long long)s->seqs,
                    mode_name(modes[0]), nmodes > 1 ? " and high" : "");
        rc = bench_prefill(ctx, stream, s, prefill_dtype, modes, nmodes, &r, &prows[nprows]);
        nprows += nmodes;
    }
    if (rc) {
        gdn_context_destroy(ctx);
        return rc;
    }
    FILE *jf = json_path ? fopen(json_path, "w") : (o.json ? stdout : NULL);
    if (json_path && !jf) {
        fprintf(stderr, "gdn bench: cannot write %s\n", json_path);
        return 1;
    }
    if (jf) {
        fprintf(jf, "[");
        for (int i = 0; i < nb && do_decode; i++) {
            const bench_row *w = &rows[i];
            /* bandwidth fractions: only where copies were measured */
            char frac[32] = "null", like[32] = "null", like_frac[32] = "null";
            if (device) {
                snprintf(frac, sizeof frac, "%.4f", w->state_gb_s / copy);
                snprintf(like, sizeof like, "%.1f", w->copy_like_gb_s);
                snprintf(like_frac, sizeof like_frac, "%.4f", w->state_gb_s / w->copy_like_gb_s);
            }
            fprintf(jf, "%s{\"op\": \"decode\", \"backend\": \"%s\", \"dtype\": \"bf16\", "
                        "\"state_dtype\": \"f32\", \"state_layout\": \"%s\", \"B\": %lld, \"T\": %lld, \"H\": %d, \"HV\": %d, "
                        "\"K\": %d, \"V\": %d, \"threads\": %d, \"ms\": %.6f, \"device_us\": "
                        "%.3f, \"eager_us\": %.3f, \"tokens_per_s\": %.1f, \"state_gb_s\": %.1f, \"copy_gb_s\": %.1f, "
                        "\"bw_fraction\": %s, \"copy_like_gb_s\": %s, \"vs_copy_like\": %s, "
                        "\"peak_fraction\": %s, \"vs_baseline\": null, \"device\": \"%s\"}",
                    i ? ",\n " : "", gdn_backend_name(be), layout == GDN_STATE_KV ? "kv" : "vk",
                    (long long)w->B, (long long)tokens, H, HV, DK, DV,
                    gdn_context_num_threads(ctx), w->ms, 1e3 * w->ms, 1e3 * w->eager_ms,
                    w->B * tokens / (w->ms * 1e-3),
                    w->state_gb_s, copy, frac, like, like_frac, frac, devname);
        }
        if (device && do_prefill)
            print_prefill_json(jf, prows, nprows, ctx, devname, do_decode);
        fprintf(jf, "]\n");
        if (json_path)
            fclose(jf);
    }
    if (!o.json && do_decode) {
        printf("gdn bench: decode, T=%lld H=%d HV=%d K=V=%d, bf16 q/k/v, f32 %s state, backend "
               "%s%s%s\n", (long long)tokens, H, HV, DK, layout == GDN_STATE_KV ? "KV" : "VK",
               gdn_backend_name(be), device ? ", " : "", devname);
        if (device)
            printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);
        printf("%6s %12s %12s %14s %12s %12s %15s %13s\n", "B", "us/step", "eager us",
               "tokens/s", "state GB/s", "bw_fraction", "copy-like GB/s", "vs copy-like");
        for (int i = 0; i < nb; i++)
            printf("%6lld %12.2f %12.2f %14.0f %12.1f %12.3f %15.1f %13.3f\n", (long long)rows[i].B,
                   1e3 * rows[i].ms, 1e3 * rows[i].eager_ms,
                   rows[i].B * tokens / (rows[i].ms * 1e-3),
                   rows[i].state_gb_s, device ? rows[i].state_gb_s / copy : 0.0,
                   rows[i].copy_like_gb_s,
                   device ? rows[i].state_gb_s / rows[i].copy_like_gb_s : 0.0);
    }
    if (!o.json && do_prefill) {
        if (device) {
            printf("prefill, B=1, K=V=%d, %s q/k/v, f32 initial and final state, chunked; "
                   "seqs > 1: varlen (cu_seqlens), T tokens in all\n", DK,
                   gdn_dtype_name(prefill_dtype));
            printf("%8s %4s %4s %5s %5s %10s %14s %10s\n", "T", "H", "HV", "seqs", "mode", "ms",
                   "tokens/s", "TFLOP/s");
            for (int i = 0; i < nprows; i++) {
                const prefill_row *w = &prows[i];
                printf("%8lld %4lld %4lld %5lld %5s %10.3f %14.0f %10.2f\n", (long long)w->s.T,
                       (long long)w->s.H, (long long)w->s.HV, (long long)w->s.seqs,
                       mode_name(w->mode), w->ms, (double)w->s.T / (w->ms * 1e-3), w->tflops);
            }
        }
    }
    gdn_context_destroy(ctx);
    if (stream)
        dev_stream_free(stream);
    return 0;
}
