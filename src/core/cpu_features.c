/* What the CPU and the OS let us use, from cpuid and xgetbv. */
#include "gdn_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

unsigned gdn_cpu_features(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), f16c = c & (1u << 29);
    if (!osxsave)
        return 0;
    uint64_t xcr0 = xgetbv0();
    bool os_avx = (xcr0 & 0x6) == 0x6;             /* XMM and YMM state */
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;        /* plus opmask, ZMM_Hi256, Hi16_ZMM */
    bool os_amx = (xcr0 & 0x60000) == 0x60000;     /* XTILECFG, XTILEDATA */
    if (f16c && os_avx)
        f |= GDN_CPU_F16C;
    if (__get_cpuid_max(0, NULL) < 7)
        return f;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5);
    bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
    bool amx = (d & (1u << 22)) && (d & (1u << 24));
    unsigned eax1, ebx1, ecx1, edx1;
    __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
    (void)ebx1; (void)ecx1; (void)edx1;
    if (avx2 && fma && os_avx)
        f |= GDN_CPU_AVX2;
    if (avx512 && os_avx512)
        f |= GDN_CPU_AVX512F;
    if ((f & GDN_CPU_AVX512F) && (eax1 & (1u << 5)))
        f |= GDN_CPU_AVX512BF16;
    if (amx && os_amx)
        f |= GDN_CPU_AMX_BF16;
    return f;
}
#else
unsigned gdn_cpu_features(void) { return 0; }
#endif
