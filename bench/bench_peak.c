/* The peak runner, the f32 FMA peak's dispatch over ISA levels and the clock estimate. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_THREAD_CPUTIME_ID, sysconf */
#include "bench_peak.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The kernels of bench_fma_peak_<level>.c, each built for its level. */
#define FMA_LEVEL(name)                                                                            \
    extern const int name##_lanes, name##_chains;                                                  \
    double name##_gflops(int threads);
FMA_LEVEL(fma_peak_scalar)
FMA_LEVEL(fma_peak_avx2)
FMA_LEVEL(fma_peak_avx512)

/* One thread of a peak run: the worker, and the CPU time it took on its thread. */
typedef struct peak_thread {
    void *(*worker)(void *);
    float sink;
    double cpu_seconds;
} peak_thread;

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *peak_thread_main(void *arg)
{
    peak_thread *t = arg;
    const double t0 = thread_cpu_seconds();
    t->worker(&t->sink);
    t->cpu_seconds = thread_cpu_seconds() - t0;
    return NULL;
}

/* Each thread's rate is its flops over its own CPU time: what a core does while the thread runs
 * on it, which a process of someone else's sharing the cores cannot lower (the wall clock would
 * count the time slices it took). Threads that share a core's units (SMT siblings) slow each
 * other and count so; more threads than CPUs time-share, so their mean rate counts once per
 * CPU. */
double peak_gflops(void *(*worker)(void *), int threads, double flops)
{
    threads = threads < 1 ? 1 : threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpus = cpus < 1 ? 1 : cpus;
    const int running = threads < cpus ? threads : (int)cpus;
    pthread_t *tid = malloc((size_t)threads * sizeof *tid);
    peak_thread *t = malloc((size_t)threads * sizeof *t);
    if (!tid || !t) { /* no peak measured: 0, which no caller divides by */
        free(tid);
        free(t);
        return 0.0;
    }
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        for (int i = 0; i < threads; i++)
            t[i] = (peak_thread){worker, 0.0f, 0.0};
        for (int i = 1; i < threads; i++)
            pthread_create(&tid[i], NULL, peak_thread_main, &t[i]);
        peak_thread_main(&t[0]);
        for (int i = 1; i < threads; i++)
            pthread_join(tid[i], NULL);
        double rate = 0.0; /* mean flops per CPU second of one thread */
        for (int i = 0; i < threads; i++)
            rate += flops / t[i].cpu_seconds / threads;
        const double g = rate * running * 1e-9;
        best = g > best ? g : best;
    }
    free(tid);
    free(t);
    return best;
}

static bool has_level(gdn_cpu_isa isa)
{
    const unsigned f = gdn_cpu_features();
    switch (isa) {
    case GDN_ISA_SCALAR: return true;
    case GDN_ISA_AVX2: return (f & GDN_CPU_AVX2) != 0; /* AVX2 with FMA, and the OS's YMM state */
    case GDN_ISA_AVX512: return (f & GDN_CPU_AVX512F) && (f & GDN_CPU_AVX2);
    default: return false;
    }
}

fma_peak bench_fma_peak(gdn_cpu_isa isa, int threads)
{
    fma_peak p = {isa, 0, 0, 0.0};
    switch (isa) {
    case GDN_ISA_SCALAR: p.lanes = fma_peak_scalar_lanes, p.chains = fma_peak_scalar_chains; break;
    case GDN_ISA_AVX2: p.lanes = fma_peak_avx2_lanes, p.chains = fma_peak_avx2_chains; break;
    case GDN_ISA_AVX512: p.lanes = fma_peak_avx512_lanes, p.chains = fma_peak_avx512_chains; break;
    default: return p;
    }
    if (!has_level(isa))
        return p;
    p.gflops = isa == GDN_ISA_AVX512 ? fma_peak_avx512_gflops(threads)
               : isa == GDN_ISA_AVX2 ? fma_peak_avx2_gflops(threads)
                                     : fma_peak_scalar_gflops(threads);
    return p;
}

fma_peak bench_fma_peak_best(int threads)
{
    /* the widest level first: on most CPUs it is the best, and the others only confirm it */
    static const gdn_cpu_isa levels[] = {GDN_ISA_AVX512, GDN_ISA_AVX2, GDN_ISA_SCALAR};
    fma_peak best = {GDN_ISA_SCALAR, 0, 0, 0.0};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (!has_level(levels[i]))
            continue;
        const fma_peak p = bench_fma_peak(levels[i], threads);
        if (p.gflops > best.gflops)
            best = p;
    }
    return best;
}

#if defined(__x86_64__)
enum { CLOCK_ITERS = 20000000, CLOCK_ADDS = 16 };

/* CLOCK_ADDS dependent register adds an iteration: one cycle each, while the loop's own counter
 * and branch run beside them on other ports. Register operands, not immediates: Golden Cove and
 * later rename dependent adds of small immediates away (measured here: 6.5 "GHz"). */
static void *clock_worker(void *sink)
{
    uint64_t x = 0, one = 1;
    __asm__ volatile("" : "+r"(one)); /* a value the compiler cannot fold into immediates */
    for (long i = 0; i < CLOCK_ITERS; i++)
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                         : "+r"(x)
                         : "r"(one));
    *(volatile float *)sink = (float)x;
    return NULL;
}

double bench_clock_ghz(int threads)
{
    threads = threads < 1 ? 1 : threads;
    /* "flops" = adds: peak_gflops gives G adds/s over all threads, one add a cycle each */
    return peak_gflops(clock_worker, threads, (double)CLOCK_ADDS * CLOCK_ITERS) / threads;
}
#else
double bench_clock_ghz(int threads)
{
    (void)threads;
    return 0.0;
}
#endif
