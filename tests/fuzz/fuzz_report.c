/* Reproducers for the findings the fuzzer cannot return from: a crash, a sanitizer report or a
 * hang. The description of the case being run sits in static storage, and whichever of these
 * ends the process writes it out first (with write(2), which a signal handler may call). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_case.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static char g_label[512];

void fz_set_label(const char *label)
{
    strncpy(g_label, label, sizeof g_label - 1);
    g_label[sizeof g_label - 1] = '\0';
}

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

void fz_report_current(const char *why)
{
    put("\n==fuzz== ");
    put(why);
    put("\n==fuzz== case: ");
    put(g_label);
    put("\n");
    put(fz_current_description());
    put("\n");
}

/* The sanitizers' runtimes call this after printing their report, before they exit. */
extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void on_sanitizer_death(void) { fz_report_current("the sanitizer report above"); }

static void on_signal(int sig)
{
    fz_report_current(sig == SIGALRM ? "hang: the call did not return in time (GDN_FUZZ_TIMEOUT)"
                                     : "crash: fatal signal");
    if (sig == SIGALRM)
        _exit(3);
    signal(sig, SIG_DFL); /* and die of it, so the exit status names the signal */
    raise(sig);
}

void fz_install_reports(bool signals)
{
    bool sanitized = __sanitizer_set_death_callback != NULL;
    if (sanitized)
        __sanitizer_set_death_callback(on_sanitizer_death);
    if (!signals)
        return;
    /* Under ASan the runtime's own SEGV/FPE/BUS handlers give the better report (and then call
     * the death callback); without it, ours name the case. abort() is nobody's. */
    int sigs[] = {SIGABRT, SIGALRM, SIGSEGV, SIGFPE, SIGBUS, SIGILL};
    int n = sanitized ? 2 : (int)(sizeof sigs / sizeof sigs[0]);
    for (int i = 0; i < n; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* The sanitizer runtimes look these up by name in the executable: they must stay visible
 * although the project builds with hidden visibility. */
#define FZ_VISIBLE __attribute__((visibility("default")))

/* The fuzzer asks for absurd allocations on purpose (2^62-byte workspaces, 2^31 threads). ASan is
 * to answer them with NULL, as malloc would, so that the library's GDN_ERR_NO_MEMORY path runs,
 * and to refuse anything past 1 GiB rather than reserve it (no case needs that much; libFuzzer's
 * own limit is 2 GiB). */
FZ_VISIBLE const char *__asan_default_options(void);
FZ_VISIBLE const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=1024";
}

/* GCC links UBSan as a runtime of its own, which does not call ASan's death callback: make it
 * abort, so that the SIGABRT handler names the case. */
FZ_VISIBLE const char *__ubsan_default_options(void);
FZ_VISIBLE const char *__ubsan_default_options(void)
{
    return "print_stacktrace=1:halt_on_error=1:abort_on_error=1";
}
