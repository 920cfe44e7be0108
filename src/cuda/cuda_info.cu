// CUDA device queries for `gdn info`; the first piece of the CUDA backend (src/cuda).
#include "../core/gdn_internal.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int gdn_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // no driver or no device: clear the sticky error, report none
        return 0;
    }
    return n;
}

extern "C" gdn_status gdn_cuda_device_name(int device, char *buf, size_t buf_size)
{
    if (!buf || !buf_size)
        return GDN_ERR_NULL;
    buf[0] = '\0';
    if (device < 0 || device >= gdn_cuda_device_count())
        return GDN_ERR_VALUE;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        return GDN_ERR_CUDA;
    int khz = 0, bits = 0; // the memory's peak: 2 transfers a clock over the bus
    cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device);
    cudaGetLastError();
    snprintf(buf, buf_size, "%s (sm_%d%d, %.0f GiB, %.0f GB/s peak)", prop.name, prop.major,
             prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             2e3 * khz * (bits / 8) / 1e9);
    return GDN_OK;
}
