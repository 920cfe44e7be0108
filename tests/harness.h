/* A minimal test harness: CHECK records a pass or a failure with its location, and
 * test_summary() prints "N passed, N failed" and returns the process exit code. */
#ifndef GDN_TEST_HARNESS_H
#define GDN_TEST_HARNESS_H

#include "common.h"
#include "gdn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int test_passed, test_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Relative L2 error err must be <= tol (and not NaN). */
#define CHECK_CLOSE(err, tol, ...)                                                                 \
    CHECK((err) <= (tol), "rel err %.3e > %.1e: %s", (double)(err), (double)(tol), __VA_ARGS__)

#define CHECK_OK(expr, ctx)                                                                        \
    do {                                                                                           \
        gdn_status st_ = (expr);                                                                   \
        CHECK(st_ == GDN_OK, "%s returned %s: %s", #expr, gdn_strerror(st_), gdn_last_error(ctx)); \
    } while (0)

/* CHECK with a formatted message: relative error err must be <= tol (NaN fails). */
#define CHECK_ERR(err, tol, fmt, ...)                                                              \
    CHECK((err) <= (tol), "rel err %.3e > %.1e: " fmt, (double)(err), (double)(tol), __VA_ARGS__)

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* Tolerance of a test whose expectation is float64 and whose output has dtype dt: f32 rounding,
 * or half-precision rounding. */
static inline double tol_for(gdn_dtype dt) { return dt == GDN_F32 ? 1e-6 : 5e-3; }

/* Running relative L2 error ||got - want|| / ||want|| in long double; a non-finite value that
 * the expectation does not share makes it infinite. */
typedef struct errsum {
    long double num, den;
    int bad;
} errsum;

static inline void err_add(errsum *e, double got, double want)
{
    if (!isfinite(got) || !isfinite(want)) {
        if (!(got == want))
            e->bad = 1;
        return;
    }
    long double d = (long double)got - want;
    e->num += d * d;
    e->den += (long double)want * want;
}

static inline double err_value(const errsum *e)
{
    if (e->bad)
        return INFINITY;
    if (e->den == 0)
        return e->num == 0 ? 0.0 : INFINITY;
    return (double)sqrtl(e->num / e->den);
}

/* Common start of a randomized test: a fresh seed (or GDN_SEED), printed so that a failure can
 * be replayed, and a context on the reference backend, or on the host backend that
 * GDN_TEST_BACKEND names ("cpu"): the same independent expectations then test that backend.
 * Returns false (after recording a failure) if the context cannot be created. */
static inline bool test_begin(gdn_context **ctx, rng *r)
{
    uint64_t seed = fresh_seed();
    printf("seed %llu (replay with GDN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    fflush(stdout);
    *r = rng_seed(seed);
    gdn_context_options o = gdn_context_default_options();
    const char *which = getenv("GDN_TEST_BACKEND");
    o.backend = which && !strcmp(which, "cpu") ? GDN_BACKEND_CPU : GDN_BACKEND_REF;
    printf("backend %s\n", gdn_backend_name(o.backend));
    gdn_status st = gdn_context_create(ctx, &o);
    CHECK(st == GDN_OK, "gdn_context_create: %s", gdn_last_error(NULL));
    return st == GDN_OK;
}

#define TEST_DEFINE_COUNTERS int test_passed = 0, test_failed = 0;

static inline int test_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
