/* gdn bench on the cpu backend: the CPU issue's rows, each against the four-pass f32 baseline
 * on the same shape and threads in the same run, and against an f32 FMA peak measured first
 * (bench/bench_peak.h: the best ISA level the CPU has, on the same threads).
 *
 * Rows: prefill T in {1024, 4096, 16384} x HV in {32, 8} x dtype in {f32, bf16} (one sequence),
 * decode B in {1, 16, 64} (f32); H = HV / 2, K = V = 128, f32 state, unit-norm keys.
 * Counting: the recurrence's own multiply-adds, 4 K V per token and head (decay, read, write,
 * output), 2 flops each, for ours and the baseline alike (the chunked form at C = 32 does about
 * as many: 3 K V per token on the state plus C (2K + ...) within the chunk). peak_fraction is
 * against the f32 FMA peak, or for bf16 rows run with bf16 products against those products' bf16
 * peak (AMX tiles at the amx level, AVX512-BF16 dot products at avx512); both measured first in
 * the same run. Times are the best of a few runs (this
 * machine is shared). A row above its peak (peak_fraction > 1) means the peak was measured wrong:
 * the bench then fails and reports nothing. --op peak prints the peaks alone, per level. */
#include "bench_baseline.h"
#include "bench_peak.h"
#include "gdn_tool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { DK = 128, DV = 128 };

typedef struct cpu_row {
    const char *op;
    gdn_dtype dtype;
    int64_t B, T, H, HV;
    double ms, base_ms, gflops;
} cpu_row;

/* Unit-norm rows of a [.., K] f32 buffer, drawn normal. */
static void unit_rows(float *x, int64_t rows, int64_t K, rng *r)
{
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < K; j++) {
            x[i * K + j] = (float)rng_normal(r);
            ss += (double)x[i * K + j] * x[i * K + j];
        }
        for (int64_t j = 0; j < K; j++)
            x[i * K + j] = (float)(x[i * K + j] / sqrt(ss));
    }
}

static double seconds_of(void (*fn)(void *), void *arg)
{
    const double t0 = now_seconds();
    fn(arg);
    return now_seconds() - t0;
}

/* The best of `reps` runs of a and of b, in ms, their runs alternating: on a shared machine the
 * two then meet the same conditions, and the ratio of the two bests is what a row reports. */
static void best_of_pair(int reps, void (*a)(void *), void (*b)(void *), void *arg, double *a_ms,
                         double *b_ms)
{
    double best_a = 1e30, best_b = 1e30;
    for (int i = 0; i < reps; i++) {
        const double ta = seconds_of(a, arg), tb = seconds_of(b, arg);
        best_a = ta < best_a ? ta : best_a;
        best_b = tb < best_b ? tb : best_b;
    }
    *a_ms = best_a * 1e3;
    *b_ms = best_b * 1e3;
}

typedef struct run_ctx {
    gdn_context *ctx;
    gdn_delta_rule_args args;
    baseline_problem base;
    int threads;
    gdn_status status;
} run_ctx;

static void run_ours(void *p)
{
    run_ctx *r = p;
    gdn_status st = gdn_delta_rule(r->ctx, &r->args);
    if (st != GDN_OK)
        r->status = st;
}

static void run_base(void *p)
{
    run_ctx *r = p;
    baseline_run(&r->base, r->threads);
}

/* One row: N sequences of T tokens through libgdn (inputs in dtype) and the baseline (f32). */
static int bench_row(gdn_context *ctx, int threads, cpu_row *row, rng *r)
{
    const int64_t N = row->B, T = row->T, H = row->H, HV = row->HV;
    int64_t qs[4] = {N, T, H, DK}, vs[4] = {N, T, HV, DV}, gs[3] = {N, T, HV};
    int64_t ps[4] = {N, HV, DK, DV};
    gdn_tensor qf = tensor_alloc(GDN_F32, 4, qs), kf = tensor_alloc(GDN_F32, 4, qs);
    gdn_tensor vf = tensor_alloc(GDN_F32, 4, vs), of = tensor_alloc(GDN_F32, 4, vs);
    gdn_tensor g = tensor_alloc(GDN_F32, 3, gs), beta = tensor_alloc(GDN_F32, 3, gs);
    gdn_tensor pool = tensor_alloc(GDN_F32, 4, ps), pool_b = tensor_alloc(GDN_F32, 4, ps);
    unit_rows(qf.data, N * T * H, DK, r);
    unit_rows(kf.data, N * T * H, DK, r);
    tensor_fill_normal(&vf, r, 1.0);
    tensor_fill_uniform(&g, r, -0.3, 0.0);
    tensor_fill_uniform(&beta, r, 0.1, 0.9);
    gdn_tensor q = qf, k = kf, v = vf, o = of; /* bf16 rows: converted copies, same values */
    if (row->dtype != GDN_F32) {
        q = tensor_alloc(row->dtype, 4, qs), k = tensor_alloc(row->dtype, 4, qs);
        v = tensor_alloc(row->dtype, 4, vs), o = tensor_alloc(row->dtype, 4, vs);
        tensor_copy(&q, &qf), tensor_copy(&k, &kf), tensor_copy(&v, &vf);
    }
    run_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.ctx = ctx;
    rc.threads = threads;
    rc.args = gdn_delta_rule_default_args();
    rc.args.q = q, rc.args.k = k, rc.args.v = v, rc.args.g = g, rc.args.beta = beta;
    rc.args.out = o, rc.args.state = pool;
    rc.base = (baseline_problem){N, T, H, HV, DK, DV, qf.data, kf.data, vf.data, g.data,
                                 beta.data, of.data, pool_b.data, (float)(1.0 / sqrt(DK))};
    const int reps = T * N >= 4096 ? 3 : 5;
    run_ours(&rc); /* warm up: workspace, pages */
    run_base(&rc);
    best_of_pair(reps, run_ours, run_base, &rc, &row->ms, &row->base_ms);
    row->gflops = 8.0 * (double)(N * T * HV) * DK * DV / (row->ms * 1e6);
    if (row->dtype != GDN_F32) {
        gdn_tensor *own[] = {&q, &k, &v, &o};
        for (size_t i = 0; i < 4; i++)
            tensor_free(own[i]);
    }
    gdn_tensor *all[] = {&qf, &kf, &vf, &of, &g, &beta, &pool, &pool_b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tensor_free(all[i]);
    if (rc.status != GDN_OK) {
        fprintf(stderr, "gdn bench: %s\n", gdn_last_error(ctx));
        return 1;
    }
    return 0;
}

static const char *isa_name(gdn_cpu_isa isa)
{
    static const char *names[] = {"auto", "scalar", "avx2", "avx512", "amx"};
    return (unsigned)isa < sizeof names / sizeof names[0] ? names[isa] : "?";
}

/* --op peak: each f32 FMA level the CPU has and the bf16 products' peaks, on the context's
 * threads, with the core clock seen by scalar code: flop/cycle per thread against lanes x 2 x
 * ports is the check that a peak is physical. */
static int bench_cpu_peaks(gdn_context *ctx, int threads, bool json, const char *json_path)
{
    const double ghz = bench_clock_ghz(threads);
    typedef struct {
        const char *name;
        int lanes, chains;
        double gflops, most; /* most: flop/cycle/thread of one lanes-wide FMA on 2 ports */
    } peak_row;
    peak_row rows[5];
    int n = 0;
    static const gdn_cpu_isa levels[] = {GDN_ISA_SCALAR, GDN_ISA_AVX2, GDN_ISA_AVX512};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        const fma_peak p = bench_fma_peak(levels[i], threads);
        if (p.gflops > 0.0)
            rows[n++] = (peak_row){isa_name(p.isa), p.lanes, p.chains, p.gflops,
                                   2.0 * p.lanes * 2};
    }
    if (gdn_context_cpu_isa(ctx) == GDN_ISA_AMX) /* the context got the OS's tile permission */
        rows[n++] = (peak_row){"amx_bf16", 0, 4, bench_amx_peak_gflops(threads), 0.0};
    if (gdn_cpu_features() & GDN_CPU_AVX512BF16)
        rows[n++] = (peak_row){"avx512_bf16", 16, 16, bench_dpbf16_peak_gflops(threads), 0.0};
    FILE *jf = json_path ? fopen(json_path, "w") : (json ? stdout : NULL);
    if (json_path && !jf) {
        fprintf(stderr, "gdn bench: cannot write %s\n", json_path);
        return 1;
    }
    for (int i = 0; jf && i < n; i++)
        fprintf(jf, "%s{\"op\": \"peak\", \"backend\": \"cpu\", \"peak\": \"%s\", \"lanes\": %d, "
                    "\"chains\": %d, \"threads\": %d, \"gflops\": %.1f, \"clock_ghz\": %.3f, "
                    "\"flop_per_cycle_thread\": %.2f}%s",
                i ? " " : "[", rows[i].name, rows[i].lanes, rows[i].chains, threads,
                rows[i].gflops, ghz, ghz > 0 ? rows[i].gflops / threads / ghz : 0.0,
                i + 1 < n ? ",\n" : "]\n");
    if (json_path && jf)
        fclose(jf);
    if (!json) {
        printf("gdn bench: cpu peaks on %d threads; core clock %.2f GHz (dependent adds, scalar "
               "code)\n", threads, ghz);
        printf("%-12s %5s %6s %10s %11s %12s %14s\n", "peak", "lanes", "chains", "GFLOP/s",
               "per thread", "flop/cycle", "2-port bound");
        for (int i = 0; i < n; i++) {
            char bound[32] = "-";
            if (rows[i].most > 0.0)
                snprintf(bound, sizeof bound, "%.0f", rows[i].most);
            printf("%-12s %5d %6d %10.1f %11.1f %12.2f %14s\n", rows[i].name, rows[i].lanes,
                   rows[i].chains, rows[i].gflops, rows[i].gflops / threads,
                   ghz > 0 ? rows[i].gflops / threads / ghz : 0.0, bound);
        }
    }
    return 0;
}

/* A counted rate above a measured peak is no result: the peak is wrong (a correct peak bounds
 * every correct kernel). Prints each such row and the verdict; returns how many there were. */
static int rows_above_peak(const cpu_row *rows, const double *row_peak, const char **peak_name,
                           int n, int threads)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double frac = row_peak[i] > 0.0 ? rows[i].gflops / row_peak[i] : INFINITY;
        if (frac <= 1.0)
            continue;
        fprintf(stderr, "gdn bench: %s %s B=%lld T=%lld HV=%lld ran %.1f GFLOP/s, above the %s "
                        "peak measured on %d threads, %.1f GFLOP/s (peak_fraction %.3f > 1)\n",
                rows[i].op, gdn_dtype_name(rows[i].dtype), (long long)rows[i].B,
                (long long)rows[i].T, (long long)rows[i].HV, rows[i].gflops, peak_name[i],
                threads, row_peak[i], frac);
        bad++;
    }
    if (bad)
        fprintf(stderr, "gdn bench: error: the peak was measured wrong: no kernel runs faster "
                        "than the machine's peak, so the peak micro-benchmark (bench/bench_peak.c)"
                        " under-measured this CPU, or other processes held its cores while it "
                        "ran (before and after the rows); refusing to report peak_fraction > 1 "
                        "(`gdn bench --backend cpu --op peak` shows each level's peak)\n");
    return bad;
}

static double bf16_peak_gflops(gdn_bf16_products prod, int threads)
{
    return prod == GDN_BF16_PRODUCTS_AMX          ? bench_amx_peak_gflops(threads)
           : prod == GDN_BF16_PRODUCTS_AVX512BF16 ? bench_dpbf16_peak_gflops(threads)
                                                  : 0.0;
}

int bench_cpu(gdn_context *ctx, const char *op, bool json, const char *json_path, uint64_t seed)
{
    const int threads = gdn_context_num_threads(ctx);
    if (!strcmp(op, "peak"))
        return bench_cpu_peaks(ctx, threads, json, json_path);
    const char *isa = isa_name(gdn_context_cpu_isa(ctx));
    if (!json)
        fprintf(stderr, "[gdn bench] measuring the f32 FMA peak on %d threads\n", threads);
    fma_peak fma = bench_fma_peak_best(threads);
    /* bf16 rows with bf16 products are held against those products' own measured peak */
    const gdn_bf16_products prod = gdn_context_cpu_bf16_products(ctx);
    const char *bf16_name = prod == GDN_BF16_PRODUCTS_AMX ? "amx_bf16" : "avx512_bf16";
    if (prod != GDN_BF16_PRODUCTS_F32 && !json)
        fprintf(stderr, "[gdn bench] measuring the %s peak on %d threads\n", bf16_name, threads);
    double bf16_peak = bf16_peak_gflops(prod, threads);
    const bool prefill = strcmp(op, "decode") != 0, decode = strcmp(op, "prefill") != 0;
    cpu_row rows[16];
    int n = 0;
    static const int64_t Ts[] = {1024, 4096, 16384}, HVs[] = {32, 8};
    static const gdn_dtype dts[] = {GDN_F32, GDN_BF16};
    for (int t = 0; t < 3 && prefill; t++)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 2; d++)
                rows[n++] = (cpu_row){"prefill", dts[d], 1, Ts[t], HVs[h] / 2, HVs[h], 0, 0, 0};
    static const int64_t Bs[] = {1, 16, 64};
    for (int b = 0; b < 3 && decode; b++)
        rows[n++] = (cpu_row){"decode", GDN_F32, Bs[b], 1, 16, 32, 0, 0, 0};
    rng r = rng_seed(seed);
    for (int i = 0; i < n; i++) {
        if (!json)
            fprintf(stderr, "[gdn bench] %s %s B=%lld T=%lld HV=%lld\n", rows[i].op,
                    gdn_dtype_name(rows[i].dtype), (long long)rows[i].B, (long long)rows[i].T,
                    (long long)rows[i].HV);
        if (bench_row(ctx, threads, &rows[i], &r))
            return 1;
    }
    /* the peaks again: a shared machine may have taken some of them away the first time */
    if (!json)
        fprintf(stderr, "[gdn bench] measuring the peaks again\n");
    const fma_peak again = bench_fma_peak_best(threads);
    fma = again.gflops > fma.gflops ? again : fma;
    const double peak = fma.gflops, bf16_again = bf16_peak_gflops(prod, threads);
    bf16_peak = bf16_again > bf16_peak ? bf16_again : bf16_peak;
    double row_peak[16];
    const char *peak_name[16], *peak_isa[16];
    for (int i = 0; i < n; i++) { /* which peak a row is held against */
        const bool bf16 = bf16_peak > 0.0 && rows[i].dtype == GDN_BF16;
        row_peak[i] = bf16 ? bf16_peak : peak;
        peak_name[i] = bf16 ? bf16_name : "f32_fma";
        peak_isa[i] = bf16 ? bf16_name : isa_name(fma.isa);
    }
    if (rows_above_peak(rows, row_peak, peak_name, n, threads))
        return 1;
    FILE *jf = json_path ? fopen(json_path, "w") : (json ? stdout : NULL);
    if (json_path && !jf) {
        fprintf(stderr, "gdn bench: cannot write %s\n", json_path);
        return 1;
    }
    if (jf) {
        fprintf(jf, "[");
        for (int i = 0; i < n; i++) {
            const cpu_row *w = &rows[i];
            fprintf(jf, "%s{\"op\": \"%s\", \"backend\": \"cpu\", \"isa\": \"%s\", \"dtype\": "
                        "\"%s\", \"state_dtype\": \"f32\", \"B\": %lld, \"T\": %lld, \"H\": %lld, "
                        "\"HV\": %lld, \"K\": %d, \"V\": %d, \"threads\": %d, \"ms\": %.4f, "
                        "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"peak\": \"%s\", "
                        "\"peak_isa\": \"%s\", \"peak_gflops\": %.1f, \"peak_fraction\": %.4f, "
                        "\"baseline_ms\": %.4f, \"vs_baseline\": %.3f}",
                    i ? ",\n " : "", w->op, isa, gdn_dtype_name(w->dtype), (long long)w->B,
                    (long long)w->T, (long long)w->H, (long long)w->HV, DK, DV, threads, w->ms,
                    (double)(w->B * w->T) / (w->ms * 1e-3), w->gflops, peak_name[i],
                    peak_isa[i], row_peak[i],
                    w->gflops / row_peak[i], w->base_ms, w->base_ms / w->ms);
        }
        fprintf(jf, "]\n");
        if (json_path)
            fclose(jf);
    }
    if (!json) {
        printf("gdn bench: cpu backend (%s kernels, %d threads), K=V=128, H=HV/2, f32 state; "
               "f32 FMA peak measured: %.1f GFLOP/s (%s, %d lanes x %d chains)", isa, threads,
               peak, isa_name(fma.isa), fma.lanes, fma.chains);
        if (bf16_peak > 0.0)
            printf("; %s peak measured: %.1f GFLOP/s (bf16 rows' peak_frac)", bf16_name,
                   bf16_peak);
        printf("\n");
        printf("%-8s %-5s %4s %6s %4s %10s %12s %9s %9s %12s\n", "op", "dtype", "B", "T", "HV",
               "ms", "tokens/s", "GFLOP/s", "peak_frac", "vs_baseline");
        for (int i = 0; i < n; i++) {
            const cpu_row *w = &rows[i];
            printf("%-8s %-5s %4lld %6lld %4lld %10.3f %12.0f %9.1f %9.3f %12.2f\n", w->op,
                   gdn_dtype_name(w->dtype), (long long)w->B, (long long)w->T, (long long)w->HV,
                   w->ms, (double)(w->B * w->T) / (w->ms * 1e-3), w->gflops,
                   w->gflops / row_peak[i], w->base_ms / w->ms);
        }
    }
    return 0;
}
