/* Device helpers for builds without CUDA: nothing is present; the rest must never be reached. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>

static void unreachable(const char *what)
{
    fprintf(stderr, "%s: this build has no CUDA\n", what);
    exit(2);
}

bool dev_present(void) { return false; }
void *dev_alloc(size_t bytes) { (void)bytes; unreachable("dev_alloc"); return NULL; }
void dev_free(void *p) { (void)p; }
void dev_upload(void *d, const void *s, size_t n) { (void)d, (void)s, (void)n; unreachable("dev_upload"); }
void dev_download(void *d, const void *s, size_t n) { (void)d, (void)s, (void)n; unreachable("dev_download"); }
void dev_memset(void *d, int b, size_t n) { (void)d, (void)b, (void)n; unreachable("dev_memset"); }
void dev_sync(void) {}
void *dev_stream_new(void) { return NULL; }
void dev_stream_free(void *stream) { (void)stream; }
double dev_time_ms(void *st, void (*fn)(void *), void *arg, int iters, bool graph)
{
    (void)st, (void)fn, (void)arg, (void)iters, (void)graph;
    unreachable("dev_time_ms");
    return 0.0;
}
bool dev_graph_run(void *st, void (*fn)(void *), void *arg) { (void)st, (void)fn, (void)arg; return false; }
double dev_copy_gbps(void *st, size_t bytes) { (void)st, (void)bytes; return 0.0; }
double dev_copy_like_gbps(void *st, size_t bytes, size_t span)
{
    (void)st, (void)bytes, (void)span;
    return 0.0;
}
void dev_name(char *buf, size_t n) { if (n) buf[0] = '\0'; }
