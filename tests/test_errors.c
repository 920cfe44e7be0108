/* Bad input (SPEC section 9), table driven: for every op, one valid small problem and a table of
 * mutations that each break exactly one thing. Every case poisons the outputs and state pools,
 * snapshots every buffer, makes the call and checks (a) the status, (b) that gdn_last_error()
 * names the argument, (c) that every buffer (outputs, pools and inputs) is byte-identical.
 * A few mutations are valid (every sequence skipped): they must return GDN_OK and still write
 * nothing. Then: the valid problems still run on the same context, and a caller workspace that is
 * too small fails with GDN_ERR_WORKSPACE before writing anything.
 *
 * One executable of three files: the valid problems (errors_fixture.c), the table of mutations
 * (errors_cases.c) and this runner. */
#include "harness.h"
#include "common.h"
#include "errors_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

/* aligned_alloc wants a multiple of the alignment. */
static size_t round_up(size_t n) { return (n + GDN_WORKSPACE_ALIGN) / GDN_WORKSPACE_ALIGN * GDN_WORKSPACE_ALIGN; }

static const char *status_name(gdn_status st)
{
    static const char *names[] = {"OK", "NULL", "DTYPE", "SHAPE", "STRIDE", "VALUE",
                                  "UNSUPPORTED", "BACKEND", "NO_MEMORY", "WORKSPACE", "CUDA",
                                  "INTERNAL"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

/* Runs one case; returns 1 if every check held. */
static int run_case(gdn_context *ctx, const bad_case *bc)
{
    fixture f;
    call c;
    build(bc->fx, &f, &c, ctx);
    if (bc->mut)
        bc->mut(&c);
    fx_poison(&f);
    fx_snapshot(&f);
    gdn_status st = invoke(&c);
    const char *msg = gdn_last_error(c.ctx);
    int failed_before = test_failed;

    CHECK(st == bc->expect, "[%s] %s: status %s, expected %s (%s)", fx_name[bc->fx], bc->name,
          status_name(st), status_name(bc->expect), msg);
    if (bc->expect == GDN_OK) {
        CHECK(msg[0] == '\0', "[%s] %s: gdn_last_error is \"%s\" after a successful call",
              fx_name[bc->fx], bc->name, msg);
    } else {
        CHECK(strstr(msg, bc->msg) != NULL, "[%s] %s: message \"%s\" lacks \"%s\"",
              fx_name[bc->fx], bc->name, msg, bc->msg);
        /* the workspace query validates as gdn_delta_rule and its messages say so */
        const char *fn = op_fn[c.op == OP_DRWS ? OP_DR : c.op];
        size_t n = strlen(fn);
        CHECK(strncmp(msg, fn, n) == 0 && (msg[n] == ':' || c.op == OP_DRWS),
              "[%s] %s: message \"%s\" does not start with \"%s:\"", fx_name[bc->fx], bc->name,
              msg, fn);
    }
    /* (c) nothing written: every buffer, and the workspace-size out-parameter */
    int changed = fx_changed(&f);
    CHECK(changed < 0, "[%s] %s: buffer '%s' was modified by a call that %s", fx_name[bc->fx],
          bc->name, changed >= 0 ? f.name[changed] : "", bc->expect == GDN_OK
          ? "skips every sequence" : "failed");
    if (c.op == OP_DRWS)
        CHECK(c.bytes == BYTES_SENTINEL, "[%s] %s: *bytes written (%zu) by a failed call",
              fx_name[bc->fx], bc->name, c.bytes);

    int ok = test_failed == failed_before;
    printf("  %-4s %-14s %-38s %-6s %s\n", ok ? "ok" : "FAIL", fx_name[bc->fx], bc->name,
           status_name(st), msg);
    fx_free(&f);
    return ok;
}

/* The unmutated problem: succeeds, clears the message, and writes its outputs. */
static void run_valid(gdn_context *ctx, int fx)
{
    fixture f;
    call c;
    build(fx, &f, &c, ctx);
    fx_poison(&f);
    fx_snapshot(&f);
    gdn_status st = invoke(&c);
    const char *msg = gdn_last_error(ctx);
    CHECK(st == GDN_OK, "[%s] valid call: %s (%s)", fx_name[fx], status_name(st), msg);
    CHECK(msg[0] == '\0', "[%s] valid call: gdn_last_error is \"%s\", expected \"\"", fx_name[fx],
          msg);
    if (c.op == OP_DRWS) {
        CHECK(c.bytes != BYTES_SENTINEL && c.bytes > 0, "[%s] valid call: bytes = %zu",
              fx_name[fx], c.bytes);
    } else {
        int out = fx_find(&f, c.op == OP_GATE ? "g_out" : "out");
        CHECK(out >= 0 && memcmp(f.snap[out], f.p[out], f.bytes[out]) != 0,
              "[%s] valid call did not write its output", fx_name[fx]);
    }
    printf("  %-4s %-14s %-38s %-6s\n", st == GDN_OK ? "ok" : "FAIL", fx_name[fx], "valid call",
           status_name(st));
    fx_free(&f);
}

/* A caller workspace smaller than gdn_delta_rule_workspace_size(): GDN_ERR_WORKSPACE, nothing
 * written; exactly that size: success. */
static void test_workspace(gdn_context *ctx)
{
    printf("caller workspace:\n");
    fixture f;
    call c;
    for (int algo = GDN_ALGO_RECURRENT; algo <= GDN_ALGO_CHUNKED; algo++) {
        build(FX_DR, &f, &c, ctx);
        c.dr.algorithm = (gdn_algorithm)algo;
        size_t need = 0;
        CHECK_OK(gdn_delta_rule_workspace_size(ctx, &c.dr, &need), ctx);
        CHECK(need > 0, "workspace size is 0 for algorithm %d", algo);
        printf("  algorithm %d needs %zu bytes\n", algo, need);

        size_t sizes[3] = {1, need / 2, need - 1};
        for (int i = 0; i < 3; i++) {
            unsigned char *ws = aligned_alloc(GDN_WORKSPACE_ALIGN, round_up(sizes[i]));
            memset(ws, 0x3c, sizes[i]);
            CHECK_OK(gdn_context_set_workspace(ctx, ws, sizes[i]), ctx);
            fx_poison(&f);
            fx_snapshot(&f);
            gdn_status st = gdn_delta_rule(ctx, &c.dr);
            const char *msg = gdn_last_error(ctx);
            CHECK(st == GDN_ERR_WORKSPACE, "workspace of %zu < %zu bytes: %s (%s)", sizes[i],
                  need, status_name(st), msg);
            CHECK(strstr(msg, "workspace") != NULL, "workspace message \"%s\"", msg);
            int changed = fx_changed(&f);
            CHECK(changed < 0, "workspace too small: buffer '%s' modified",
                  changed >= 0 ? f.name[changed] : "");
            size_t j = 0;
            while (j < sizes[i] && ws[j] == 0x3c)
                j++;
            CHECK(j == sizes[i], "workspace too small: the workspace itself was written");
            printf("  %-4s workspace %5zu bytes: %-9s %s\n",
                   st == GDN_ERR_WORKSPACE && changed < 0 ? "ok" : "FAIL", sizes[i],
                   status_name(st), msg);
            CHECK_OK(gdn_context_set_workspace(ctx, NULL, 0), ctx);
            free(ws);
        }

        unsigned char *ws = aligned_alloc(GDN_WORKSPACE_ALIGN, round_up(need));
        CHECK_OK(gdn_context_set_workspace(ctx, ws, need), ctx);
        fx_poison(&f);
        fx_snapshot(&f);
        gdn_status st = gdn_delta_rule(ctx, &c.dr);
        CHECK(st == GDN_OK, "workspace of exactly %zu bytes: %s (%s)", need, status_name(st),
              gdn_last_error(ctx));
        CHECK(gdn_last_error(ctx)[0] == '\0', "message after success: \"%s\"",
              gdn_last_error(ctx));
        int out = fx_find(&f, "out");
        CHECK(memcmp(f.snap[out], f.p[out], f.bytes[out]) != 0, "exact workspace: out unwritten");
        printf("  %-4s workspace %5zu bytes: %s\n", st == GDN_OK ? "ok" : "FAIL", need,
               status_name(st));
        CHECK_OK(gdn_context_set_workspace(ctx, NULL, 0), ctx);
        free(ws);
        fx_free(&f);
    }
    /* back to context-owned scratch: grows as needed again */
    build(FX_DR, &f, &c, ctx);
    CHECK_OK(gdn_delta_rule(ctx, &c.dr), ctx);
    fx_free(&f);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* interleave with the FAIL lines on stderr */
    gdn_context_options o = gdn_context_default_options();
    o.backend = GDN_BACKEND_REF;
    gdn_context *ctx = NULL;
    gdn_status st = gdn_context_create(&ctx, &o);
    CHECK(st == GDN_OK && ctx, "context: %s", gdn_last_error(NULL));
    if (!ctx)
        return test_summary("test_errors");

    printf("valid problems:\n");
    for (int fx = 0; fx < FX_COUNT; fx++)
        run_valid(ctx, fx);

    size_t n = n_bad_cases;
    int ok = 0;
    printf("bad inputs (%zu cases):\n", n);
    for (size_t i = 0; i < n; i++)
        ok += run_case(ctx, &bad_cases[i]);
    printf("%d of %zu cases held\n", ok, n);

    printf("valid problems after the bad ones:\n");
    for (int fx = 0; fx < FX_COUNT; fx++) {
        /* a failure right before, so the success has a message to clear */
        fixture f;
        call c;
        build(fx, &f, &c, ctx);
        c.null_args = 1; /* l2norm has no args struct: a NULL x instead */
        if (c.op == OP_L2)
            c.null_in = 1;
        CHECK(invoke(&c) != GDN_OK && gdn_last_error(ctx)[0] != '\0',
              "[%s] the failure before the valid call set no message", fx_name[fx]);
        fx_free(&f);
        run_valid(ctx, fx);
    }

    test_workspace(ctx);

    gdn_context_destroy(ctx);
    return test_summary("test_errors");
}
