/* A minimal test harness: CHECK records a pass or a failure with its location, and
 * test_summary() prints "N passed, N failed" and returns the process exit code. */
#ifndef GDN_TEST_HARNESS_H
#define GDN_TEST_HARNESS_H

#include <stdio.h>

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

#define TEST_DEFINE_COUNTERS int test_passed = 0, test_failed = 0;

static inline int test_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
