/* Native-width float vectors for the CPU kernels, written once with GCC/Clang vector extensions
 * and compiled once per ISA level: the including file sets LANES (16 at AVX-512, 8 at AVX2, 4 at
 * the baseline SSE2 level) and the build gives it that level's -m flags. Values of these types
 * live in registers, which plain arrays of accumulators did not (the compiler kept them on the
 * stack). */
#ifndef GDN_CPU_VEC_H
#define GDN_CPU_VEC_H

#include <stdint.h>
#include <string.h>

#ifndef LANES
#define LANES 4
#endif

typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(int32_t))));

static inline vf vload(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* x - 0 is x for every x (x + 0 is not, for x = -0), so this compiles to a bare broadcast. */
static inline vf vsplat(float x) { return x - (vf){0}; }

static inline float vsum(vf v) /* a fixed order, so every level rounds the same way */
{
    float s = 0.0f;
    for (int j = 0; j < LANES; j++)
        s += v[j];
    return s;
}

/* Lanes of a where mask is set (all ones), else lanes of b. */
static inline vf vselect(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }

/* {j0, j0 + 1, ..., j0 + LANES - 1} */
static inline vi viota(int32_t j0)
{
    vi v;
    for (int j = 0; j < LANES; j++)
        v[j] = j0 + j;
    return v;
}

/* e^x for x <= 0, lane by lane, within ~2 ulp of expf; inputs below -87 give e^-87 (~1.6e-38),
 * which the gated decays never tell apart from 0. x = n ln2 + r with |r| <= ln2 / 2, e^r by its
 * degree-6 Taylor polynomial, 2^n put together in the exponent bits. */
static inline vf vexp_nonpositive(vf x)
{
    const vf lo = vsplat(-87.0f);
    x = vselect(x < lo, lo, x);
    const vf round = vsplat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    const vf n = (x * vsplat(1.44269504f) + round) - round;
    const vf r = (x - n * vsplat(0.693145752f)) - n * vsplat(1.42860677e-6f);
    vf e = vsplat(1.0f / 720.0f);
    e = e * r + vsplat(1.0f / 120.0f);
    e = e * r + vsplat(1.0f / 24.0f);
    e = e * r + vsplat(1.0f / 6.0f);
    e = e * r + vsplat(0.5f);
    e = e * r + vsplat(1.0f);
    e = e * r + vsplat(1.0f);
    const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return e * (vf)bits;
}

#endif
