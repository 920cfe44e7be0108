/* The CPU issue's baseline, kept inside the benchmark so every run measures both: the gated delta
 * rule token by token with four separate passes over each head's K x V f32 state per token
 * (decay, read k^T S, write S += k u^T, output S^T q), written with vector dot/axpy helpers and
 * parallel over (sequence, head). The peaks that gdn bench holds rows against: bench_peak.h. */
#ifndef GDN_BENCH_BASELINE_H
#define GDN_BENCH_BASELINE_H

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

#endif
