/* libFuzzer entry: the same generator and checks as fuzz_loop, with libFuzzer's input bytes as
 * the choices (extents, strides, dtypes, options) and coverage guiding which inputs it keeps.
 * A finding aborts, so libFuzzer saves the input as a crash; a saved input replays with
 *   ./fuzz_libfuzzer crash-<hash>
 * Built only by clang with -DGDN_FUZZ=ON (tests/fuzz/CMakeLists.txt). */
#include "fuzz_case.h"

#include <stdio.h>
#include <stdlib.h>

static fz_env g_env;

static void release(void) { fz_env_free(&g_env); }

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_install_reports(false); /* libFuzzer handles signals and timeouts itself */
    if (!fz_env_init(&g_env))
        exit(2);
    g_env.verbose = getenv("GDN_FUZZ_VERBOSE") != NULL;
    atexit(release);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_src src;
    fz_src_from_bytes(&src, data, size);
    fz_set_label("this libFuzzer input");
    if (fz_run_one(&g_env, &src, "this libFuzzer input") > 0) {
        fflush(stderr);
        abort();
    }
    return 0;
}
