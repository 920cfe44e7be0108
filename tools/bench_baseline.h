/* The CPU issue's baseline, kept inside the benchmark so every run measures both: the gated delta
 * rule token by token with four separate passes over each head's K x V f32 state per token
 * (decay, read k^T S, write S += k u^T, output S^T q), written with vector dot/axpy helpers and
 * parallel over (sequence, head). Also an f32 FMA peak micro-benchmark for peak_fraction. */
#ifndef GDN_TOOLS_BENCH_BASELINE_H
#define GDN_TOOLS_BENCH_BASELINE_H

#include <stdint.h>

typedef struct baseline_problem {
    int64_t N, T, H, HV, K, V;       /* N sequences of T tokens, contiguous f32 */
    const float *q, *k;              /* [N, T, H, K], unit-norm rows */
    const float *v;                  /* [N, T, HV, V] */
    const float *g, *beta;           /* [N, T, HV] */
    float *out;                      /* [N, T, HV, V] */
    float *state;                    /* [N, HV, K, V] */
    float scale;
} baseline_problem;

/* Runs the four-pass baseline on `threads` threads. */
void baseline_run(const baseline_problem *p, int threads);
/* GFLOP/s of `worker` (given a float to sink its result into) run on `threads` threads at once,
 * `flops` per thread and run; the best of 5 runs. */
double peak_gflops(void *(*worker)(void *), int threads, double flops);
/* Measured f32 FMA throughput of `threads` threads, in GFLOP/s (2 flops per FMA), best of 5. */
double baseline_fma_peak_gflops(int threads);
/* Measured AMX bf16 throughput (TDPBF16PS) of `threads` threads in GFLOP/s, best of 5; 0 when
 * this build has no AMX code. Call only where the CPU has AMX and the OS granted it (a cpu
 * context at the amx level). */
double bench_amx_peak_gflops(int threads);
/* Measured AVX512-BF16 throughput (VDPBF16PS) of `threads` threads in GFLOP/s, best of 5; 0 when
 * this build has no AVX512-BF16 code. Call only where the CPU has AVX512-BF16. */
double bench_dpbf16_peak_gflops(int threads);

#endif
