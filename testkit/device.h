/* Device memory, timing and graph helpers for the tool and the tests. Without the CUDA backend
 * every function reports "no device" (see device_none.c). */
#ifndef GDN_TESTKIT_DEVICE_H
#define GDN_TESTKIT_DEVICE_H

#include "gdn.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

bool dev_present(void);
void *dev_alloc(size_t bytes);              /* exits on failure */
void dev_free(void *p);
void dev_upload(void *dst, const void *src, size_t bytes);
void dev_download(void *dst, const void *src, size_t bytes);
void dev_memset(void *dst, int byte, size_t bytes);
void dev_sync(void);                        /* the whole device */
void *dev_stream_new(void);                 /* a non-blocking cudaStream_t */
void dev_stream_free(void *stream);

/* Runs fn(arg) `iters` times on `stream`, captured once into a CUDA graph when `graph`, and
 * returns the device milliseconds per iteration (events around the launches). */
double dev_time_ms(void *stream, void (*fn)(void *), void *arg, int iters, bool graph);
/* Captures fn(arg) on stream into a graph, launches it once and waits; false on any error. */
bool dev_graph_run(void *stream, void (*fn)(void *), void *arg);
/* Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written. */
double dev_copy_gbps(void *stream, size_t bytes);
/* The same for a plain copy kernel moving `bytes` a launch, timed as the decode rows are (20
 * launches captured in a CUDA graph), cycling through buffers that span at least `span` bytes so
 * that L2 never holds them: what a copy of one decode step's state bytes achieves, the launch
 * and its ramp included. (cudaMemcpyAsync captured in a graph measured 2.8 TB/s for 512 MiB
 * copies on an H200, 4.2 TB/s eager: not a bound for a kernel.) */
double dev_copy_like_gbps(void *stream, size_t bytes, size_t span);
/* Device name, or "" */
void dev_name(char *buf, size_t n);

/* Host tensors mirrored on the device: stage() replaces t->data by a device copy of the bytes
 * the view spans; unstage() copies every staged buffer back to its host memory, restores the
 * host pointers and frees the device copies. */
typedef struct staging {
    int n;
    struct {
        gdn_tensor *t;
        void *host, *dev;
        size_t bytes;
    } e[40];
} staging;

void stage(staging *s, gdn_tensor *t);
void unstage(staging *s);
/* Stage every tensor of an op's arguments. */
void stage_conv1d_args(staging *s, gdn_conv1d_args *a);
void stage_conv1d_update_args(staging *s, gdn_conv1d_update_args *a);
void stage_rmsnorm_args(staging *s, gdn_rmsnorm_args *a);
void stage_delta_rule_args(staging *s, gdn_delta_rule_args *a);
/* Bytes from a view's first element to one past its last. */
size_t tensor_span_bytes(const gdn_tensor *t);

#ifdef __cplusplus
}
#endif

#endif
