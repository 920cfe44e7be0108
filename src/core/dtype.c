/* Element types: sizes, names and the f32 <-> bf16 / f16 conversions every backend shares. */
#include "gdn_internal.h"

#include <string.h>

size_t gdn_dtype_size(gdn_dtype dtype)
{
    switch (dtype) {
    case GDN_F32: case GDN_I32: return 4;
    case GDN_BF16: case GDN_F16: return 2;
    case GDN_I64: return 8;
    case GDN_U8: return 1;
    }
    return 0;
}

const char *gdn_dtype_name(gdn_dtype dtype)
{
    switch (dtype) {
    case GDN_F32: return "f32";
    case GDN_BF16: return "bf16";
    case GDN_F16: return "f16";
    case GDN_I32: return "i32";
    case GDN_I64: return "i64";
    case GDN_U8: return "u8";
    }
    return "?";
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float gdn_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t gdn_f32_to_bf16(float f)
{
    return gdn_bf16_bits(f32_bits(f));
}

float gdn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24 is exact in f32 */
        float mag = (float)man * 5.9604644775390625e-8f;
        return sign ? -mag : mag;
    }
    if (exp == 31) /* inf / NaN */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t gdn_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t mag = u & 0x7fffffffu;
    if (mag >= 0x7f800000u) /* inf, or NaN kept quiet */
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x0200u : 0u));
    if (mag >= 0x477ff000u) /* >= 65520 rounds past the largest half (65504) */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) { /* below 2^-14: an f16 subnormal, count of 2^-24 units */
        uint32_t exp = mag >> 23;
        if (exp < 102) /* below half the smallest subnormal */
            return sign;
        uint32_t man = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp;
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t h = ((mag >> 23) - 112u) << 10 | ((mag & 0x7fffffu) >> 13);
    uint32_t rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the correct rounding */
    return (uint16_t)(sign | h);
}
