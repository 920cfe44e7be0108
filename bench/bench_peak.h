/* The peaks that `gdn bench --backend cpu` holds its rows against (peak_fraction), measured at
 * the start of every run on every thread the bench uses: back-to-back independent products into
 * register accumulators, FLOPs counted 2 per multiply-add lane. A row's counted rate can never
 * exceed a correctly measured peak; gdn bench refuses to report one that does.
 *
 * The f32 FMA peak is measured with one kernel per ISA level, each built with the cpu kernels'
 * own flags for that level (bench/CMakeLists.txt) and run where gdn_cpu_features() says the CPU
 * has the level; the machine's peak is the best of them. */
#ifndef GDN_BENCH_PEAK_H
#define GDN_BENCH_PEAK_H

#include "gdn.h"

/* GFLOP/s of `worker` (given a float to sink its result into) run on `threads` threads at once,
 * `flops` per thread and run: each thread's flops over its own CPU time, summed over the threads
 * that can run at once (at most one per online CPU); the best of 5 runs. Time slices that other
 * processes take on a shared machine do not lower it; the rows, timed by the wall clock, only
 * ever lose to them. */
double peak_gflops(void *(*worker)(void *), int threads, double flops);

/* One level's f32 FMA kernel: its vector width, independent accumulator chains, and GFLOP/s on
 * `threads` threads (0 when the CPU lacks the level: GDN_ISA_SCALAR, _AVX2 and _AVX512). */
typedef struct fma_peak {
    gdn_cpu_isa isa;
    int lanes, chains;
    double gflops;
} fma_peak;
fma_peak bench_fma_peak(gdn_cpu_isa isa, int threads);
/* The machine's f32 FMA peak: every level the CPU has, measured; the best. */
fma_peak bench_fma_peak_best(int threads);

/* Core clock in GHz seen by each of `threads` threads running at once, from a chain of dependent
 * integer adds (one a cycle); 0 off x86-64. Scalar code: clocks under wide vectors may be lower,
 * so threads x clock x lanes x 2 x FMA ports bounds a level's peak from above. */
double bench_clock_ghz(int threads);

/* Measured AMX bf16 throughput (TDPBF16PS) of `threads` threads in GFLOP/s, best of 5; 0 when
 * this build has no AMX code. Call only where the CPU has AMX and the OS granted it (a cpu
 * context at the amx level). */
double bench_amx_peak_gflops(int threads);
/* Measured AVX512-BF16 throughput (VDPBF16PS) of `threads` threads in GFLOP/s, best of 5; 0 when
 * this build has no AVX512-BF16 code. Call only where the CPU has AVX512-BF16. */
double bench_dpbf16_peak_gflops(int threads);

#endif
