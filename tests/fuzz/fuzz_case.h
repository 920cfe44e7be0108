/* One hostile but memory-honest call of one libgdn entry point, and the checks that judge it.
 *
 * A case is built from a source of choices (an rng, or the bytes of a libFuzzer input), run on a
 * cpu-backend context and again, from the same starting bytes, on a ref-backend context, and
 * judged:
 *   - an error leaves every buffer byte-identical and a message in gdn_last_error();
 *   - a success writes nothing outside the outputs and state pools, leaves the inputs alone,
 *     and (when the inputs are ordinary numbers) matches the reference within a tolerance;
 *   - the cpu and ref backends agree on success versus failure.
 * Crashes, out-of-bounds accesses and undefined behaviour are left to ASan and UBSan: every
 * tensor lives in an allocation of exactly the bytes its descriptor can reach.
 *
 * Shared by fuzz_loop.c (random cases for a bounded time) and fuzz_libfuzzer.c. Uses the testkit
 * (testkit/common.h: rng, fresh_seed, now_seconds). */
#ifndef GDN_FUZZ_CASE_H
#define GDN_FUZZ_CASE_H

#include "common.h"
#include "gdn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- where choices come from ------------------------------------------------------------- */

/* Structural choices (ops, extents, strides, options) come from `bytes` when it is set, else
 * from the rng `choices`. Once the bytes run out every choice takes its first, plainest option,
 * so a short input is a small valid call. Tensor contents always come from the rng `data`
 * (seeded from the bytes in byte mode), so that input bytes steer structure, not bulk numbers. */
typedef struct fz_src {
    const uint8_t *bytes;
    size_t n, pos;
    rng choices;
    rng data;
} fz_src;

void fz_src_from_seed(fz_src *s, uint64_t seed);
void fz_src_from_bytes(fz_src *s, const uint8_t *bytes, size_t n);
int64_t fz_int(fz_src *s, int64_t lo, int64_t hi);  /* inclusive; lo once bytes run out */
bool fz_pct(fz_src *s, int percent);                /* true that often; false once out */
int64_t fz_pick(fz_src *s, const int64_t *v, int n); /* one of v; v[0] once out */
int fz_weighted(fz_src *s, const int *weights, int n); /* an index; 0 once out */

/* ---- the contexts every case can use ----------------------------------------------------- */

enum { FZ_MAX_CPU = 4 };

typedef struct fz_env {
    gdn_context *ref;              /* the oracle */
    gdn_context *cpu[FZ_MAX_CPU];  /* 1 and 2 threads at the best ISA level, then lower levels */
    char cpu_name[FZ_MAX_CPU][48];
    int ncpu;
    bool verbose;                  /* print every case's description */
    const char *only;              /* run only this entry point ("gdn_l2norm"); NULL: all */
} fz_env;

bool fz_env_init(fz_env *e);
void fz_env_free(fz_env *e);

/* ---- running one case -------------------------------------------------------------------- */

/* Builds one case from src, runs and checks it. Returns the number of findings (0: passed);
 * each finding is printed to stderr after `label` and the case's description. */
int fz_run_one(const fz_env *env, fz_src *src, const char *label);

/* The description of the case being run ("" between cases), for crash and hang reports. It
 * lives in static storage, so a signal handler may write it out. */
const char *fz_current_description(void);

/* Prints the current case (label and description) to stderr with write(2): async-signal-safe,
 * for crash, sanitizer and hang handlers. */
void fz_report_current(const char *why);

/* Sets the label that fz_report_current prints (e.g. the replay command of the iteration). */
void fz_set_label(const char *label);

/* Makes sanitizer reports print the current case before the process ends; with signals, also
 * fatal signals and SIGALRM (a hang watchdog: alarm()). libFuzzer handles signals itself. */
void fz_install_reports(bool signals);

/* The entry point the last fz_run_one called ("gdn_l2norm"), for summaries. */
const char *fz_last_entry_point(void);

#endif
