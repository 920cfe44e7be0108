/* fuzz_loop: random calls of every public entry point for a bounded time (the ctest test
 * `fuzz_loop`), each judged by fuzz_case.c. A fresh seed each run, printed; iteration i of a seed
 * is a case of its own, so one failing iteration replays alone:
 *
 *   GDN_FUZZ_SECONDS=90 ./fuzz_loop             run for 90 s (default 10)
 *   GDN_FUZZ_ITERATIONS=5000 ./fuzz_loop        run 5000 cases (no time limit unless SECONDS)
 *   GDN_SEED=<seed> GDN_FUZZ_ONLY=<i> ./fuzz_loop   replay iteration i of a run
 *   GDN_FUZZ_VERBOSE=1                          print every case before it runs
 *   GDN_FUZZ_OP=gdn_l2norm                      only this entry point (gdn_context_create: the
 *                                               context cases)
 *   GDN_FUZZ_TIMEOUT=<s>                        a case running longer is a hang (default 20)
 *   GDN_FUZZ_MAX_FAILURES=<n>                   stop after n failing cases (default 25)
 *
 * Prints "N passed, N failed" and exits 1 on any finding. A crash, a sanitizer report or a hang
 * ends the process at once, after printing the case and its replay command. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif

static double env_number(const char *name, double fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtod(v, NULL) : fallback;
}

/* Without ASan (which answers absurd allocations with NULL by itself, see fuzz_report.c), cap
 * the address space so that a library bug that tries to allocate terabytes for an empty
 * problem fails its malloc instead of paging the machine to death. */
static void limit_address_space(void)
{
#ifndef FZ_ASAN
    const rlim_t cap = (rlim_t)16 << 30;
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) == 0 && (r.rlim_cur == RLIM_INFINITY || r.rlim_cur > cap)) {
        r.rlim_cur = cap;
        setrlimit(RLIMIT_AS, &r);
    }
#endif
}

/* Iteration i's own seed, so that it replays without the iterations before it. */
static uint64_t case_seed(uint64_t seed, long long i)
{
    rng r = rng_seed(seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull));
    return rng_next(&r);
}

typedef struct tally {
    const char *name[16];
    int count[16];
    int n;
} tally;

static void count(tally *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name)) {
            t->count[i]++;
            return;
        }
    if (t->n < 16) {
        t->name[t->n] = name;
        t->count[t->n++] = 1;
    }
}

int main(void)
{
    fz_install_reports(true);
    limit_address_space();
    uint64_t seed = fresh_seed();
    printf("seed %llu (replay with GDN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    bool iterations_set = getenv("GDN_FUZZ_ITERATIONS") && *getenv("GDN_FUZZ_ITERATIONS");
    bool seconds_set = getenv("GDN_FUZZ_SECONDS") && *getenv("GDN_FUZZ_SECONDS");
    double seconds = seconds_set || !iterations_set ? env_number("GDN_FUZZ_SECONDS", 10) : 1e300;
    long long iterations = iterations_set ? (long long)env_number("GDN_FUZZ_ITERATIONS", 0)
                                          : -1;
    long long first = (long long)env_number("GDN_FUZZ_ONLY", -1);
    if (first >= 0)
        iterations = 1, seconds = 1e300;
    else
        first = 0;
    unsigned timeout = (unsigned)env_number("GDN_FUZZ_TIMEOUT", 20);
    int max_failures = (int)env_number("GDN_FUZZ_MAX_FAILURES", 25);
    fflush(stdout);

    fz_env env;
    if (!fz_env_init(&env))
        return 2;
    env.verbose = getenv("GDN_FUZZ_VERBOSE") != NULL;
    env.only = getenv("GDN_FUZZ_OP");
    printf("contexts: ref");
    for (int i = 0; i < env.ncpu; i++)
        printf(", %s", env.cpu_name[i]);
    printf("\n");
    fflush(stdout);

    int passed = 0, failed = 0;
    long long i = first;
    tally failing = {0};
    double start = now_seconds();
    for (; iterations < 0 || i < first + iterations; i++) {
        if (now_seconds() - start >= seconds || failed >= max_failures)
            break;
        char label[256];
        snprintf(label, sizeof label, "seed %llu iteration %lld (replay: GDN_SEED=%llu "
                 "GDN_FUZZ_ONLY=%lld fuzz_loop)", (unsigned long long)seed, i,
                 (unsigned long long)seed, i);
        fz_set_label(label);
        fz_src src;
        fz_src_from_seed(&src, case_seed(seed, i));
        alarm(timeout);
        int findings = fz_run_one(&env, &src, label);
        alarm(0);
        if (findings) {
            failed++;
            count(&failing, fz_last_entry_point());
            fprintf(stderr, "  replay: GDN_SEED=%llu GDN_FUZZ_ONLY=%lld fuzz_loop\n",
                    (unsigned long long)seed, i);
        } else {
            passed++;
        }
    }
    double elapsed = now_seconds() - start;
    long long ran = i - first;
    printf("%lld iterations in %.1f s (%.0f per second)\n", ran, elapsed,
           elapsed > 0 ? (double)ran / elapsed : 0.0);
    if (failed) {
        printf("failing cases by entry point:");
        for (int k = 0; k < failing.n; k++)
            printf(" %s %d", failing.name[k], failing.count[k]);
        printf("\n");
    }
    printf("fuzz_loop: %d passed, %d failed\n", passed, failed);
    fz_env_free(&env);
    return failed ? 1 : 0;
}
