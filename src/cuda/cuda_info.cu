// CUDA device queries for `gdn info`; the first piece of the CUDA backend (src/cuda).
#include "cuda_common.cuh"

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
    snprintf(buf, buf_size, "%s (sm_%d%d, %.0f GiB, %.0f GB/s peak)", prop.name, prop.major,
             prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             memory_peak_bytes_per_s(device) / 1e9);
    return GDN_OK;
}
