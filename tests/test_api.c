/* API basics: version, status strings, dtypes, the f16/bf16 conversions (exhaustively), context
 * creation and its errors, workspace calls, tensor helpers, CPU features and default arguments. */
#include "harness.h"
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

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

/* ---- version and status strings ----------------------------------------------------------- */

static void test_version_and_status(void)
{
    CHECK(gdn_version_number() == GDN_VERSION_NUMBER, "gdn_version_number %u != %d",
          gdn_version_number(), GDN_VERSION_NUMBER);
    CHECK(GDN_VERSION_NUMBER ==
              GDN_VERSION_MAJOR * 10000 + GDN_VERSION_MINOR * 100 + GDN_VERSION_PATCH,
          "GDN_VERSION_NUMBER inconsistent with its parts");
    /* the struct sizes a binding checks its mirrors against: this compiler's sizeof */
    CHECK(gdn_struct_size("gdn_tensor") == sizeof(gdn_tensor) &&
              gdn_struct_size("gdn_context_options") == sizeof(gdn_context_options) &&
              gdn_struct_size("gdn_conv1d_args") == sizeof(gdn_conv1d_args) &&
              gdn_struct_size("gdn_conv1d_update_args") == sizeof(gdn_conv1d_update_args) &&
              gdn_struct_size("gdn_gating_params") == sizeof(gdn_gating_params) &&
              gdn_struct_size("gdn_rmsnorm_args") == sizeof(gdn_rmsnorm_args) &&
              gdn_struct_size("gdn_delta_rule_args") == sizeof(gdn_delta_rule_args),
          "gdn_struct_size disagrees with sizeof");
    CHECK(gdn_struct_size("gdn_context") == 0 && gdn_struct_size(NULL) == 0 &&
              gdn_struct_size("") == 0,
          "gdn_struct_size of an unknown or opaque name is not 0");
    const char *vs = gdn_version_string();
    CHECK(vs && strcmp(vs, GDN_VERSION_STRING) == 0, "gdn_version_string \"%s\" != \"%s\"",
          vs ? vs : "(null)", GDN_VERSION_STRING);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", GDN_VERSION_MAJOR, GDN_VERSION_MINOR,
             GDN_VERSION_PATCH);
    CHECK(strcmp(GDN_VERSION_STRING, expect) == 0, "GDN_VERSION_STRING \"%s\" != \"%s\"",
          GDN_VERSION_STRING, expect);
    printf("version %s (%u)\n", vs, gdn_version_number());

    static const char *names[] = {"GDN_OK",           "GDN_ERR_NULL",        "GDN_ERR_DTYPE",
                                  "GDN_ERR_SHAPE",    "GDN_ERR_STRIDE",      "GDN_ERR_VALUE",
                                  "GDN_ERR_UNSUPPORTED", "GDN_ERR_BACKEND",  "GDN_ERR_NO_MEMORY",
                                  "GDN_ERR_WORKSPACE", "GDN_ERR_CUDA",       "GDN_ERR_INTERNAL",
                                  "GDN_ERR_BUSY"};
    const int n = (int)(sizeof names / sizeof names[0]);
    CHECK(n == GDN_ERR_BUSY + 1, "status table size");
    const char *s[13];
    for (int i = 0; i < n; i++) {
        s[i] = gdn_strerror((gdn_status)i);
        CHECK(s[i] != NULL, "gdn_strerror(%d) is NULL", i);
        if (!s[i])
            continue;
        size_t len = strlen(names[i]);
        CHECK(strncmp(s[i], names[i], len) == 0 && (s[i][len] == ':' || s[i][len] == '\0'),
              "gdn_strerror(%d) = \"%s\" does not start with %s", i, s[i], names[i]);
        for (int j = 0; j < i; j++)
            CHECK(s[j] && strcmp(s[i], s[j]) != 0, "gdn_strerror(%d) == gdn_strerror(%d)", i, j);
    }
    const int unknown[] = {13, 99, -1, 1000000};
    for (int i = 0; i < 4; i++) {
        const char *u = gdn_strerror((gdn_status)unknown[i]);
        CHECK(u != NULL && u[0] != '\0', "gdn_strerror(%d) is NULL or empty", unknown[i]);
        for (int j = 0; j < n && u; j++)
            CHECK(strcmp(u, s[j] ? s[j] : "") != 0, "gdn_strerror(%d) equals the string of %s",
                  unknown[i], names[j]);
    }
}

/* ---- dtypes ------------------------------------------------------------------------------- */

static void test_dtypes(void)
{
    static const struct {
        gdn_dtype dt;
        size_t size;
        const char *name;
    } t[] = {{GDN_F32, 4, "f32"}, {GDN_BF16, 2, "bf16"}, {GDN_F16, 2, "f16"},
             {GDN_I32, 4, "i32"}, {GDN_I64, 8, "i64"},   {GDN_U8, 1, "u8"}};
    for (int i = 0; i < 6; i++) {
        CHECK(gdn_dtype_size(t[i].dt) == t[i].size, "gdn_dtype_size(%s) = %zu, expected %zu",
              t[i].name, gdn_dtype_size(t[i].dt), t[i].size);
        const char *nm = gdn_dtype_name(t[i].dt);
        CHECK(nm && strcmp(nm, t[i].name) == 0, "gdn_dtype_name(%d) = \"%s\", expected \"%s\"",
              (int)t[i].dt, nm ? nm : "(null)", t[i].name);
    }
    const int bad[] = {6, 42, -1};
    for (int i = 0; i < 3; i++) {
        CHECK(gdn_dtype_size((gdn_dtype)bad[i]) == 0, "gdn_dtype_size(%d) != 0", bad[i]);
        const char *nm = gdn_dtype_name((gdn_dtype)bad[i]);
        CHECK(nm && strcmp(nm, "?") == 0, "gdn_dtype_name(%d) = \"%s\", expected \"?\"", bad[i],
              nm ? nm : "(null)");
    }
}

/* ---- f16 ---------------------------------------------------------------------------------- */

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

/* Independent decoding of a binary16 pattern from its fields, in double. */
static double f16_decode(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double mag;
    if (e == 0)
        mag = ldexp((double)m, -24);
    else if (e == 31)
        mag = m ? NAN : INFINITY;
    else
        mag = ldexp((double)(1024 + m), e - 25);
    return sign ? -mag : mag;
}

static void check_f16(float f, uint16_t expect, const char *what)
{
    uint16_t h = gdn_f32_to_f16(f);
    CHECK(h == expect, "gdn_f32_to_f16(%s = %a) = 0x%04x, expected 0x%04x", what, (double)f, h,
          expect);
}

static void test_f16(void)
{
    long bad_decode = 0, bad_round_trip = 0, bad_nan = 0, nan_count = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = gdn_f16_to_f32(h);
        double d = f16_decode(h);
        if (f16_is_nan(h)) {
            nan_count++;
            uint16_t back = gdn_f32_to_f16(f);
            if (!isnan(f) || !f16_is_nan(back) || (back & 0x8000u) != (h & 0x8000u))
                bad_nan++;
            continue;
        }
        /* bitwise: -0 must decode to -0 */
        if (!((double)f == d && !signbit(f) == !signbit(d)))
            if (bad_decode++ < 5)
                fprintf(stderr, "  f16 0x%04x decodes to %a, expected %a\n", h, (double)f, d);
        uint16_t back = gdn_f32_to_f16(f);
        if (back != h)
            if (bad_round_trip++ < 5)
                fprintf(stderr, "  f16 0x%04x -> %a -> 0x%04x\n", h, (double)f, back);
    }
    CHECK(nan_count == 2 * 1023, "f16 NaN count %ld", nan_count);
    CHECK(bad_decode == 0, "gdn_f16_to_f32 differs from the field decoding for %ld patterns",
          bad_decode);
    CHECK(bad_round_trip == 0, "f16 -> f32 -> f16 not exact for %ld patterns", bad_round_trip);
    CHECK(bad_nan == 0, "f16 NaN not kept NaN (with its sign) for %ld patterns", bad_nan);

    /* every midpoint between adjacent finite halves of one sign rounds to the even one; one ulp
     * of f32 either side rounds to the nearer one */
    long bad_tie = 0, bad_near = 0;
    for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u)
        for (uint32_t m = 0; m < 0x7bffu; m++) {
            uint16_t lo = (uint16_t)(sign | m), hi = (uint16_t)(sign | (m + 1));
            double mid = 0.5 * (f16_decode(lo) + f16_decode(hi));
            float fm = (float)mid;
            if ((double)fm != mid) { /* 12 significant bits: always exact in f32 */
                bad_tie++;
                continue;
            }
            uint16_t even = (lo & 1u) ? hi : lo;
            if (gdn_f32_to_f16(fm) != even)
                if (bad_tie++ < 5)
                    fprintf(stderr, "  tie %a -> 0x%04x, expected 0x%04x\n", mid,
                            gdn_f32_to_f16(fm), even);
            float below = nextafterf(fm, 0.0f), above = nextafterf(fm, sign ? -INFINITY : INFINITY);
            if (gdn_f32_to_f16(below) != lo || gdn_f32_to_f16(above) != hi)
                if (bad_near++ < 5)
                    fprintf(stderr, "  near tie %a: below -> 0x%04x, above -> 0x%04x, expected "
                            "0x%04x / 0x%04x\n", mid, gdn_f32_to_f16(below),
                            gdn_f32_to_f16(above), lo, hi);
        }
    CHECK(bad_tie == 0, "f16 ties not to even at %ld midpoints", bad_tie);
    CHECK(bad_near == 0, "f16 rounding next to a midpoint wrong at %ld midpoints", bad_near);

    /* chosen values */
    check_f16(1.0f + 0x1p-11f, 0x3c00, "1 + 2^-11 (tie, to even 1.0)");
    check_f16(1.0f + 3 * 0x1p-11f, 0x3c02, "1 + 3*2^-11 (tie, to even 1+2^-9)");
    check_f16(65504.0f, 0x7bff, "65504 (max)");
    check_f16(-65504.0f, 0xfbff, "-65504");
    check_f16(65519.996f, 0x7bff, "65519.996");
    check_f16(nextafterf(65520.0f, 0.0f), 0x7bff, "nextafter(65520, 0)");
    check_f16(65520.0f, 0x7c00, "65520 (tie past max -> inf)");
    check_f16(-65520.0f, 0xfc00, "-65520");
    check_f16(1e6f, 0x7c00, "1e6");
    check_f16(INFINITY, 0x7c00, "inf");
    check_f16(-INFINITY, 0xfc00, "-inf");
    check_f16(0.0f, 0x0000, "0");
    check_f16(-0.0f, 0x8000, "-0");
    check_f16(0x1p-24f, 0x0001, "2^-24 (smallest subnormal)");
    check_f16(0x1p-25f, 0x0000, "2^-25 (tie, to even 0)");
    check_f16(-0x1p-25f, 0x8000, "-2^-25 (tie, to -0)");
    check_f16(1.5f * 0x1p-25f, 0x0001, "1.5*2^-25");
    check_f16(nextafterf(0x1p-25f, 1.0f), 0x0001, "just above 2^-25");
    check_f16(0x1p-26f, 0x0000, "2^-26");
    check_f16(3 * 0x1p-25f, 0x0002, "3*2^-25 (tie, to even 2*2^-24)");
    check_f16(0x1p-14f, 0x0400, "2^-14 (smallest normal)");
    check_f16(0x1p-14f - 0x1p-25f, 0x0400, "2^-14 - 2^-25 (tie, to even 2^-14)");
    check_f16(0x1p-149f, 0x0000, "smallest f32 subnormal");
    check_f16(0.1f, 0x2e66, "0.1");
    check_f16(3.14159265f, 0x4248, "pi");
    uint16_t hn = gdn_f32_to_f16(NAN), hs = gdn_f32_to_f16(bits_f32(0x7f800001u));
    CHECK(f16_is_nan(hn), "gdn_f32_to_f16(NaN) = 0x%04x", hn);
    CHECK(f16_is_nan(hs), "gdn_f32_to_f16(signalling NaN 0x7f800001) = 0x%04x", hs);
    CHECK(f16_is_nan(gdn_f32_to_f16(bits_f32(0xffc00000u))), "negative NaN not NaN");
    printf("f16: 65536 patterns decoded and round-tripped, %ld NaN patterns, all midpoints\n",
           nan_count);
}

/* ---- bf16 --------------------------------------------------------------------------------- */

static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

static void check_bf16(uint32_t fbits, uint16_t expect)
{
    uint16_t h = gdn_f32_to_bf16(bits_f32(fbits));
    CHECK(h == expect, "gdn_f32_to_bf16(0x%08x) = 0x%04x, expected 0x%04x", fbits, h, expect);
}

static void test_bf16(void)
{
    long bad_decode = 0, bad_round_trip = 0, bad_nan = 0, bad_tie = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = gdn_bf16_to_f32(h);
        if (f32_bits(f) != (uint32_t)h << 16)
            bad_decode++;
        uint16_t back = gdn_f32_to_bf16(f);
        if (bf16_is_nan(h)) {
            if (!isnan(f) || !bf16_is_nan(back) || (back & 0x8000u) != (h & 0x8000u))
                bad_nan++;
            continue;
        }
        if (back != h)
            if (bad_round_trip++ < 5)
                fprintf(stderr, "  bf16 0x%04x -> 0x%04x\n", h, back);
        /* the midpoint to the next pattern of the same sign (finite h only) ties to even; the
         * midpoint between the largest finite and inf is the overflow threshold (to inf, even) */
        if ((h & 0x7fffu) < 0x7f80u) {
            uint16_t next = (uint16_t)(h + 1);
            uint16_t even = (h & 1u) ? next : h;
            uint32_t mid = ((uint32_t)h << 16) | 0x8000u;
            if (gdn_f32_to_bf16(bits_f32(mid)) != even || gdn_f32_to_bf16(bits_f32(mid - 1)) != h ||
                gdn_f32_to_bf16(bits_f32(mid + 1)) != next)
                if (bad_tie++ < 5)
                    fprintf(stderr, "  bf16 midpoint 0x%08x -> 0x%04x, expected 0x%04x\n", mid,
                            gdn_f32_to_bf16(bits_f32(mid)), even);
        }
    }
    CHECK(bad_decode == 0, "gdn_bf16_to_f32 is not a 16-bit shift for %ld patterns", bad_decode);
    CHECK(bad_round_trip == 0, "bf16 -> f32 -> bf16 not exact for %ld patterns", bad_round_trip);
    CHECK(bad_nan == 0, "bf16 NaN not kept NaN (with its sign) for %ld patterns", bad_nan);
    CHECK(bad_tie == 0, "bf16 rounding at/next to %ld midpoints wrong", bad_tie);

    check_bf16(0x3f808000u, 0x3f80); /* tie, to even */
    check_bf16(0x3f818000u, 0x3f82); /* tie, to even (up) */
    check_bf16(0x3f808001u, 0x3f81); /* above the tie */
    check_bf16(0x3f807fffu, 0x3f80); /* below the tie */
    check_bf16(0x7f7fffffu, 0x7f80); /* FLT_MAX rounds to inf */
    check_bf16(0x7f7f7fffu, 0x7f7f); /* just below the overflow threshold */
    check_bf16(0x7f7f8000u, 0x7f80); /* the threshold: tie, to even = inf */
    check_bf16(0xff7fffffu, 0xff80); /* -FLT_MAX to -inf */
    check_bf16(0x7f800000u, 0x7f80); /* inf */
    check_bf16(0xff800000u, 0xff80); /* -inf */
    check_bf16(0x00000000u, 0x0000);
    check_bf16(0x80000000u, 0x8000);
    check_bf16(0x00008000u, 0x0000); /* subnormal tie to even 0 */
    check_bf16(0x00018000u, 0x0002); /* subnormal tie to even */
    check_bf16(0x007fffffu, 0x0080); /* largest subnormal rounds up into the normals */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xffc00000u, 0xff800001u,
                             0x7fffffffu};
    for (int i = 0; i < 6; i++) {
        uint16_t h = gdn_f32_to_bf16(bits_f32(nans[i]));
        CHECK(bf16_is_nan(h) && (h & 0x8000u) == ((nans[i] >> 16) & 0x8000u),
              "gdn_f32_to_bf16(NaN 0x%08x) = 0x%04x", nans[i], h);
    }
    printf("bf16: 65536 patterns round-tripped, all midpoints\n");
}

/* ---- contexts ----------------------------------------------------------------------------- */

static void test_context(void)
{
    gdn_context *ctx = (gdn_context *)&ctx; /* garbage that must be overwritten */
    gdn_status st = gdn_context_create(&ctx, NULL);
    CHECK(st == GDN_OK && ctx, "create(NULL options): %s", gdn_last_error(NULL));
    if (ctx) {
        gdn_backend b = gdn_context_backend(ctx);
        const char *nm = gdn_backend_name(b);
        CHECK(b != GDN_BACKEND_AUTO, "default context resolved to AUTO");
        CHECK(nm && nm[0] && strcmp(nm, "?") != 0 && strcmp(nm, "auto") != 0,
              "default backend name \"%s\"", nm ? nm : "(null)");
        CHECK(gdn_backend_available(b), "default backend %s not available", nm);
        CHECK(b != GDN_BACKEND_CUDA, "AUTO chose CUDA (its tensors are device pointers)");
        CHECK(gdn_context_num_threads(ctx) >= 1, "default context threads %d",
              gdn_context_num_threads(ctx));
        CHECK(gdn_last_error(ctx) && gdn_last_error(ctx)[0] == '\0',
              "fresh context has error \"%s\"", gdn_last_error(ctx));
        printf("default context: backend %s, %d threads\n", nm, gdn_context_num_threads(ctx));
        gdn_context_destroy(ctx);
    }

    gdn_context_options o = gdn_context_default_options();
    CHECK(o.backend == GDN_BACKEND_AUTO && o.num_threads == 0 && o.cuda_device == 0 &&
              o.cuda_stream == NULL && o.cpu_isa == GDN_ISA_AUTO,
          "gdn_context_default_options not the documented defaults");
    ctx = NULL;
    CHECK_OK(gdn_context_create(&ctx, &o), NULL);
    gdn_context_destroy(ctx);

    o.backend = GDN_BACKEND_REF;
    ctx = NULL;
    st = gdn_context_create(&ctx, &o);
    CHECK(st == GDN_OK && ctx, "create(REF): %s", gdn_last_error(NULL));
    if (ctx) {
        CHECK(gdn_context_backend(ctx) == GDN_BACKEND_REF, "REF context backend %d",
              (int)gdn_context_backend(ctx));
        CHECK(strcmp(gdn_backend_name(GDN_BACKEND_REF), "ref") == 0, "ref name");
        CHECK(gdn_context_num_threads(ctx) == 1, "ref threads %d", gdn_context_num_threads(ctx));
        CHECK(gdn_backend_available(GDN_BACKEND_REF) == 1, "ref not available");

        /* workspace */
        CHECK_OK(gdn_context_reserve_workspace(ctx, 1 << 20), ctx);
        CHECK_OK(gdn_context_reserve_workspace(ctx, 0), ctx);
        CHECK_OK(gdn_context_reserve_workspace(ctx, 1 << 10), ctx); /* smaller: keeps */
        st = gdn_context_set_workspace(ctx, NULL, 5);
        CHECK(st == GDN_ERR_NULL, "set_workspace(NULL, 5) = %s", gdn_strerror(st));
        CHECK(strstr(gdn_last_error(ctx), "workspace") != NULL,
              "set_workspace(NULL, 5) message \"%s\"", gdn_last_error(ctx));
        static _Alignas(GDN_WORKSPACE_ALIGN) unsigned char buf[256];
        st = gdn_context_set_workspace(ctx, buf + 8, sizeof buf - 8);
        CHECK(st == GDN_ERR_VALUE && strstr(gdn_last_error(ctx), "aligned"),
              "misaligned workspace = %s (%s)", gdn_strerror(st), gdn_last_error(ctx));
        CHECK_OK(gdn_context_set_workspace(ctx, buf, sizeof buf), ctx);
        CHECK_OK(gdn_context_reserve_workspace(ctx, 100), ctx); /* fits the caller buffer */
        st = gdn_context_reserve_workspace(ctx, 1000);
        CHECK(st == GDN_ERR_WORKSPACE, "reserve beyond a caller workspace = %s",
              gdn_strerror(st));
        CHECK_OK(gdn_context_set_workspace(ctx, NULL, 0), ctx);
        CHECK_OK(gdn_context_reserve_workspace(ctx, 1000), ctx); /* owned again: grows */
        CHECK_OK(gdn_context_set_stream(ctx, NULL), ctx);
        gdn_context_destroy(ctx);
    }
    CHECK(gdn_context_reserve_workspace(NULL, 10) == GDN_ERR_NULL, "reserve_workspace(NULL ctx)");
    CHECK(gdn_context_set_workspace(NULL, NULL, 0) == GDN_ERR_NULL, "set_workspace(NULL ctx)");
    CHECK(gdn_context_set_stream(NULL, NULL) == GDN_ERR_NULL, "set_stream(NULL ctx)");
    CHECK(gdn_context_backend(NULL) == GDN_BACKEND_AUTO, "gdn_context_backend(NULL)");
    CHECK(gdn_context_num_threads(NULL) == 0, "gdn_context_num_threads(NULL)");
    CHECK(gdn_last_error(NULL) != NULL, "gdn_last_error(NULL) is NULL");

    /* invalid options */
    struct {
        const char *what;
        int backend, threads, isa, device;
        gdn_status expect;
        const char *msg;
    } bad[] = {
        {"backend 9", 9, 0, 0, 0, GDN_ERR_VALUE, "opts.backend"},
        {"backend -1", -1, 0, 0, 0, GDN_ERR_VALUE, "opts.backend"},
        {"num_threads -1", GDN_BACKEND_REF, -1, 0, 0, GDN_ERR_VALUE, "opts.num_threads"},
        {"cpu_isa 7", GDN_BACKEND_REF, 0, 7, 0, GDN_ERR_VALUE, "opts.cpu_isa"},
        {"cuda_device -1", GDN_BACKEND_REF, 0, 0, -1, GDN_ERR_VALUE, "opts.cuda_device"},
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        gdn_context_options b = gdn_context_default_options();
        b.backend = (gdn_backend)bad[i].backend;
        b.num_threads = bad[i].threads;
        b.cpu_isa = (gdn_cpu_isa)bad[i].isa;
        b.cuda_device = bad[i].device;
        ctx = (gdn_context *)&b;
        st = gdn_context_create(&ctx, &b);
        const char *msg = gdn_last_error(NULL);
        CHECK(st == bad[i].expect, "create(%s) = %s, expected %s", bad[i].what,
              gdn_strerror(st), gdn_strerror(bad[i].expect));
        CHECK(ctx == NULL, "create(%s) left *ctx non-NULL", bad[i].what);
        CHECK(strstr(msg, bad[i].msg) != NULL, "create(%s): message \"%s\" lacks \"%s\"",
              bad[i].what, msg, bad[i].msg);
        printf("create(%s): %s\n", bad[i].what, msg);
        if (st == GDN_OK)
            gdn_context_destroy(ctx);
    }
    st = gdn_context_create(NULL, NULL);
    CHECK(st == GDN_ERR_NULL, "create(NULL, NULL) = %s", gdn_strerror(st));
    CHECK(strstr(gdn_last_error(NULL), "ctx") != NULL, "create(NULL) message \"%s\"",
          gdn_last_error(NULL));

    /* CUDA */
    int cuda = gdn_backend_available(GDN_BACKEND_CUDA);
    printf("cuda backend available: %d, devices: %d\n", cuda, gdn_cuda_device_count());
    if (!cuda) {
        o = gdn_context_default_options();
        o.backend = GDN_BACKEND_CUDA;
        ctx = (gdn_context *)&o;
        st = gdn_context_create(&ctx, &o);
        CHECK(st == GDN_ERR_BACKEND, "create(CUDA) without CUDA = %s", gdn_strerror(st));
        CHECK(ctx == NULL, "create(CUDA) failure left *ctx non-NULL");
        CHECK(strstr(gdn_last_error(NULL), "opts.backend") != NULL,
              "create(CUDA) message \"%s\"", gdn_last_error(NULL));
        printf("create(CUDA): %s\n", gdn_last_error(NULL));
    }
    /* device queries work (or report no device) whether or not the backend is registered */
    char name[128];
    int ndev = gdn_cuda_device_count();
    CHECK(ndev >= 0, "gdn_cuda_device_count %d", ndev);
    st = gdn_cuda_device_name(0, name, sizeof name);
    if (ndev > 0) {
        CHECK(st == GDN_OK && name[0], "gdn_cuda_device_name(0) = %s", gdn_strerror(st));
        printf("cuda device 0: %s\n", name);
    } else {
        CHECK(st == GDN_ERR_BACKEND || st == GDN_ERR_VALUE, "gdn_cuda_device_name(0) with no "
              "device = %s", gdn_strerror(st));
    }
    st = gdn_cuda_device_name(-1, name, sizeof name);
    CHECK(st == GDN_ERR_BACKEND || st == GDN_ERR_VALUE, "gdn_cuda_device_name(-1) = %s",
          gdn_strerror(st));
    st = gdn_cuda_device_name(0, NULL, 16);
    CHECK(st == GDN_ERR_BACKEND || st == GDN_ERR_NULL, "gdn_cuda_device_name(buf NULL) = %s",
          gdn_strerror(st));
    CHECK(gdn_backend_available(GDN_BACKEND_AUTO) == 1, "AUTO not available");
    CHECK(gdn_backend_available((gdn_backend)9) == 0, "backend 9 available");
    CHECK(strcmp(gdn_backend_name((gdn_backend)9), "?") == 0, "gdn_backend_name(9)");

    gdn_context_destroy(NULL); /* no-op */
    CHECK(1, "destroy(NULL)");
}

/* ---- tensor helpers ----------------------------------------------------------------------- */

static void check_contig(const gdn_tensor *t, void *data, gdn_dtype dt, int ndim,
                         const int64_t *shape)
{
    CHECK(t->data == data && t->dtype == dt && t->ndim == ndim, "gdn_tensor_%dd header", ndim);
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        CHECK(t->shape[d] == shape[d], "gdn_tensor_%dd shape[%d] = %lld", ndim, d,
              (long long)t->shape[d]);
        CHECK(t->stride[d] == stride, "gdn_tensor_%dd stride[%d] = %lld, expected %lld", ndim, d,
              (long long)t->stride[d], (long long)stride);
        stride *= shape[d];
    }
}

static void test_tensors(void)
{
    float buf[1];
    void *p = buf;
    gdn_tensor t1 = gdn_tensor_1d(p, GDN_F32, 7);
    check_contig(&t1, p, GDN_F32, 1, (const int64_t[]){7});
    gdn_tensor t2 = gdn_tensor_2d(p, GDN_BF16, 3, 5);
    check_contig(&t2, p, GDN_BF16, 2, (const int64_t[]){3, 5});
    gdn_tensor t3 = gdn_tensor_3d(p, GDN_I32, 2, 3, 4);
    check_contig(&t3, p, GDN_I32, 3, (const int64_t[]){2, 3, 4});
    gdn_tensor t4 = gdn_tensor_4d(p, GDN_F16, 2, 3, 4, 5);
    check_contig(&t4, p, GDN_F16, 4, (const int64_t[]){2, 3, 4, 5});
    CHECK(t4.stride[0] == 60 && t4.stride[1] == 20 && t4.stride[2] == 5 && t4.stride[3] == 1,
          "4d strides");
    gdn_tensor n = gdn_tensor_none();
    CHECK(n.data == NULL && n.ndim == 0, "gdn_tensor_none not absent");
    static const gdn_tensor zero;
    CHECK(memcmp(&n, &zero, sizeof n) == 0, "gdn_tensor_none not all zero");
}

/* ---- CPU features ------------------------------------------------------------------------- */

static void test_cpu_features(void)
{
    unsigned f = gdn_cpu_features();
    const unsigned known = GDN_CPU_AVX2 | GDN_CPU_AVX512F | GDN_CPU_AVX512BF16 | GDN_CPU_AMX_BF16 |
                           GDN_CPU_F16C;
    printf("cpu features 0x%x:%s%s%s%s%s\n", f, f & GDN_CPU_AVX2 ? " avx2" : "",
           f & GDN_CPU_AVX512F ? " avx512f" : "", f & GDN_CPU_AVX512BF16 ? " avx512bf16" : "",
           f & GDN_CPU_AMX_BF16 ? " amx-bf16" : "", f & GDN_CPU_F16C ? " f16c" : "");
    CHECK((f & ~known) == 0, "unknown feature bits 0x%x", f & ~known);
    CHECK(!(f & GDN_CPU_AVX512BF16) || (f & GDN_CPU_AVX512F), "AVX512BF16 without AVX512F");
    CHECK(gdn_cpu_features() == f, "gdn_cpu_features not stable");
}

/* ---- default arguments -------------------------------------------------------------------- */

static int absent(const gdn_tensor *t) { return t->data == NULL; }

static void test_defaults(void)
{
    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    CHECK(d.chunk_size == 0, "delta chunk_size %d", d.chunk_size);
    CHECK(d.scale == 0.0f, "delta scale %g", (double)d.scale);
    CHECK(d.state_layout == GDN_STATE_KV, "delta state_layout %d", (int)d.state_layout);
    CHECK(d.gva == GDN_GVA_BLOCK, "delta gva %d", (int)d.gva);
    CHECK(d.algorithm == GDN_ALGO_AUTO, "delta algorithm %d", (int)d.algorithm);
    CHECK(d.qk_l2norm == 0 && d.gate_in_kernel == 0, "delta l2norm/gate flags");
    CHECK(d.gating.softplus_threshold == GDN_SOFTPLUS_THRESHOLD &&
              d.gating.softplus_threshold == 20.0f,
          "delta gating.softplus_threshold %g", (double)d.gating.softplus_threshold);
    CHECK(d.gating.a_form == GDN_A_LOG && d.gating.allow_neg_eigval == 0, "delta gating a_form");
    CHECK(absent(&d.q) && absent(&d.k) && absent(&d.v) && absent(&d.g) && absent(&d.beta) &&
              absent(&d.out) && absent(&d.state) && absent(&d.state_slots) &&
              absent(&d.has_initial_state) && absent(&d.cu_seqlens) && absent(&d.gating.A) &&
              absent(&d.gating.dt_bias),
          "delta default tensors not absent");

    gdn_gating_params g = gdn_gating_default_params();
    CHECK(g.a_form == GDN_A_LOG && g.softplus_threshold == 20.0f && g.allow_neg_eigval == 0 &&
              absent(&g.A) && absent(&g.dt_bias),
          "gating default params");

    gdn_rmsnorm_args r = gdn_rmsnorm_default_args();
    CHECK(r.eps == 1e-6f, "rmsnorm eps %g", (double)r.eps);
    CHECK(r.norm_before_gate == 1, "rmsnorm norm_before_gate %d", r.norm_before_gate);
    CHECK(r.weight_offset == 0, "rmsnorm weight_offset %d", r.weight_offset);
    CHECK(absent(&r.x) && absent(&r.z) && absent(&r.weight) && absent(&r.out),
          "rmsnorm default tensors not absent");

    gdn_conv1d_args c = gdn_conv1d_default_args();
    CHECK(c.activation == GDN_ACT_SILU, "conv1d activation %d", (int)c.activation);
    CHECK(absent(&c.x) && absent(&c.weight) && absent(&c.bias) && absent(&c.out) &&
              absent(&c.conv_state) && absent(&c.state_slots) && absent(&c.has_initial_state) &&
              absent(&c.cu_seqlens),
          "conv1d default tensors not absent");
    gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
    CHECK(u.activation == GDN_ACT_SILU, "conv1d_update activation %d", (int)u.activation);
    CHECK(absent(&u.x) && absent(&u.weight) && absent(&u.bias) && absent(&u.out) &&
              absent(&u.conv_state) && absent(&u.state_slots),
          "conv1d_update default tensors not absent");
    CHECK(GDN_L2NORM_EPS == 1e-6f, "GDN_L2NORM_EPS");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_version_and_status();
    test_dtypes();
    test_f16();
    test_bf16();
    test_context();
    test_tensors();
    test_cpu_features();
    test_defaults();
    return test_summary("test_api");
}
