/* Choices for the case generator, from an rng or from a libFuzzer input's bytes. */
#include "fuzz_case.h"

#include <string.h>

void fz_src_from_seed(fz_src *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->choices = rng_seed(seed);
    s->data = rng_seed(seed ^ 0xd1b54a32d192ed03ull);
}

void fz_src_from_bytes(fz_src *s, const uint8_t *bytes, size_t n)
{
    static const uint8_t none[1] = {0};
    memset(s, 0, sizeof *s);
    s->bytes = n ? bytes : none;
    s->n = n;
    /* FNV-1a of the input seeds the contents, so one input always gives the same numbers */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ bytes[i]) * 0x100000001b3ull;
    s->data = rng_seed(h);
}

/* The next nbytes of input as a number (big-endian, zero past the end), or 64 random bits. */
static uint64_t take(fz_src *s, int nbytes)
{
    if (!s->bytes)
        return rng_next(&s->choices);
    uint64_t v = 0;
    for (int i = 0; i < nbytes && s->pos < s->n; i++)
        v = v << 8 | s->bytes[s->pos++];
    return v;
}

int64_t fz_int(fz_src *s, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo; /* hi - lo without signed overflow */
    int nbytes = span < 0x100 ? 1 : span < 0x10000 ? 2 : span < 0x100000000ull ? 4 : 8;
    uint64_t v = take(s, nbytes);
    if (span != UINT64_MAX)
        v %= span + 1;
    return (int64_t)((uint64_t)lo + v);
}

bool fz_pct(fz_src *s, int percent) { return fz_int(s, 0, 99) >= 100 - percent; }

int64_t fz_pick(fz_src *s, const int64_t *v, int n) { return v[fz_int(s, 0, n - 1)]; }

int fz_weighted(fz_src *s, const int *weights, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        total += weights[i];
    int64_t r = fz_int(s, 0, total - 1);
    for (int i = 0; i < n; i++) {
        if (r < weights[i])
            return i;
        r -= weights[i];
    }
    return n - 1;
}
