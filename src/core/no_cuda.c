/* CUDA device queries for builds without the CUDA backend. */
#include "gdn_internal.h"

int gdn_cuda_device_count(void) { return 0; }

gdn_status gdn_cuda_device_name(int device, char *buf, size_t buf_size)
{
    (void)device;
    if (buf && buf_size)
        buf[0] = '\0';
    return GDN_ERR_BACKEND;
}
