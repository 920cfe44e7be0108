/* Inputs that once crashed the library or corrupted memory, each pinned by a check:
 *   - empty batches (B = 0, T = 0, no sequence) on every op, host backend and thread count;
 *   - extents whose sizes overflow (B = 2^62 with T = 0; K, V past GDN_MAX_HEAD_DIM);
 *   - a zero-token call still leaves each sequence's state (zeros for a fresh one);
 *   - one context shared by two threads: GDN_ERR_BUSY or a right answer, never a wrong one;
 *   - a cpu context made before fork() works in the child;
 *   - l2norm and rmsnorm of rows whose squares overflow or underflow f32;
 *   - thread counts past GDN_MAX_THREADS; duplicate slots among thousands of sequences.
 * The bad-argument table (test_errors.c) has the malformed tensors; this file has the calls. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"
#include "delta_case.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

TEST_DEFINE_COUNTERS

static rng g_rng;

/* A host context of backend b with n threads (n ignored by ref). */
static gdn_context *open_ctx(gdn_backend b, int threads)
{
    gdn_context_options o = gdn_context_default_options();
    o.backend = b;
    o.num_threads = threads;
    gdn_context *ctx = NULL;
    gdn_status st = gdn_context_create(&ctx, &o);
    CHECK(st == GDN_OK, "context %s/%d: %s", gdn_backend_name(b), threads, gdn_last_error(NULL));
    return ctx;
}

/* A buffer of bytes, all 0xA5, and whether it still is. */
#define POISON 0xA5
static unsigned char *poisoned(size_t bytes)
{
    unsigned char *p = xmalloc(bytes);
    memset(p, POISON, bytes);
    return p;
}

static bool still_poisoned(const unsigned char *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != POISON)
            return false;
    return true;
}

/* ---- empty batches -------------------------------------------------------------------------- */

/* Every op with B = 0 (and a varlen call with no sequence): GDN_OK and no byte written. Tokens
 * per row are 64, past the chunked form's threshold, so AUTO would pick it. */
static void test_empty_batches(gdn_context *ctx, const char *name)
{
    /* every tensor below lies inside its buffer (the state's 3 slots take 12 KiB): one that
     * reached past it could overlap another buffer, which validation rightly refuses */
    enum { BYTES = 16384 };
    unsigned char *in = poisoned(BYTES), *out = poisoned(BYTES), *pool = poisoned(BYTES);
    const int64_t T = 64, H = 2, HV = 4, K = 16, V = 16, C = 8;

    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    d.q = gdn_tensor_4d(in, GDN_F32, 0, T, H, K);
    d.k = d.q;
    d.v = gdn_tensor_4d(in, GDN_F32, 0, T, HV, V);
    d.beta = gdn_tensor_3d(in, GDN_F32, 0, T, HV);
    d.out = gdn_tensor_4d(out, GDN_F32, 0, T, HV, V);
    d.state = gdn_tensor_4d(pool, GDN_F32, 3, HV, K, V); /* 3 slots, no sequence uses one */
    d.state.data = pool; /* its bytes are never read: it is only described */
    for (int algo = GDN_ALGO_AUTO; algo <= GDN_ALGO_CHUNKED; algo++) {
        d.algorithm = (gdn_algorithm)algo;
        CHECK_OK(gdn_delta_rule(ctx, &d), ctx);
        size_t ws = 1;
        CHECK_OK(gdn_delta_rule_workspace_size(ctx, &d, &ws), ctx);
        CHECK(ws == 0, "%s: B = 0 asks %zu bytes of scratch", name, ws);
    }
    int32_t cu0[1] = {0};
    gdn_delta_rule_args dv = d;
    dv.q = gdn_tensor_4d(in, GDN_F32, 1, 0, H, K);
    dv.k = dv.q;
    dv.v = gdn_tensor_4d(in, GDN_F32, 1, 0, HV, V);
    dv.beta = gdn_tensor_3d(in, GDN_F32, 1, 0, HV);
    dv.out = gdn_tensor_4d(out, GDN_F32, 1, 0, HV, V);
    dv.cu_seqlens = gdn_tensor_1d(cu0, GDN_I32, 1);
    CHECK_OK(gdn_delta_rule(ctx, &dv), ctx);

    gdn_conv1d_args c = gdn_conv1d_default_args();
    c.x = gdn_tensor_3d(in, GDN_F32, 0, T, C);
    c.out = gdn_tensor_3d(out, GDN_F32, 0, T, C);
    c.weight = gdn_tensor_2d(in, GDN_F32, C, 4);
    CHECK_OK(gdn_conv1d(ctx, &c), ctx);
    c.conv_state = gdn_tensor_3d(pool, GDN_F32, 2, C, 3);
    CHECK_OK(gdn_conv1d(ctx, &c), ctx);

    gdn_conv1d_update_args u = gdn_conv1d_update_default_args();
    u.x = gdn_tensor_2d(in, GDN_F32, 0, C);
    u.out = gdn_tensor_2d(out, GDN_F32, 0, C);
    u.weight = gdn_tensor_2d(in, GDN_F32, C, 4);
    u.conv_state = gdn_tensor_3d(pool, GDN_F32, 2, C, 3);
    CHECK_OK(gdn_conv1d_update(ctx, &u), ctx);

    gdn_gating_params gp = gdn_gating_default_params();
    gp.A = gdn_tensor_1d(in, GDN_F32, HV);
    gdn_tensor a = gdn_tensor_2d(in, GDN_F32, 0, HV), g = gdn_tensor_2d(out, GDN_F32, 0, HV);
    CHECK_OK(gdn_gating(ctx, &a, NULL, &gp, &g, NULL), ctx);
    CHECK_OK(gdn_l2norm(ctx, &a, &g, GDN_L2NORM_EPS), ctx);
    gdn_rmsnorm_args r = gdn_rmsnorm_default_args();
    r.x = a;
    r.out = g;
    CHECK_OK(gdn_rmsnorm_gated(ctx, &r), ctx);

    CHECK(still_poisoned(out, BYTES) && still_poisoned(pool, BYTES),
          "%s: an empty call wrote into an output or a pool", name);
    free(in);
    free(out);
    free(pool);
}

/* B = 2^62 rows of no token: the extents multiply past int64, the bytes do not. */
static void test_huge_empty_batch(gdn_context *ctx, const char *name)
{
    float buf[64];
    const int64_t B = (int64_t)1 << 62;
    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    d.q = gdn_tensor_4d(buf, GDN_F32, B, 0, 1, 2);
    d.k = d.q;
    d.v = gdn_tensor_4d(buf, GDN_F32, B, 0, 1, 2);
    d.beta = gdn_tensor_3d(buf, GDN_F32, B, 0, 1);
    float out[64];
    d.out = gdn_tensor_4d(out, GDN_F32, B, 0, 1, 2);
    CHECK_OK(gdn_delta_rule(ctx, &d), ctx);
    gdn_conv1d_args c = gdn_conv1d_default_args();
    c.x = gdn_tensor_3d(buf, GDN_F32, B, 0, 4);
    c.out = gdn_tensor_3d(out, GDN_F32, B, 0, 4);
    c.weight = gdn_tensor_2d(buf, GDN_F32, 4, 4);
    CHECK_OK(gdn_conv1d(ctx, &c), ctx);
    /* extents whose product overflows int64, on an empty tensor: the constructor's strides
     * saturate instead of overflowing, and the call is a no-op */
    gdn_tensor x = gdn_tensor_4d(buf, GDN_F32, 0, (int64_t)1 << 62, ((int64_t)1 << 32) + 1, 5);
    gdn_tensor y = gdn_tensor_4d(out, GDN_F32, 0, (int64_t)1 << 62, ((int64_t)1 << 32) + 1, 5);
    CHECK_OK(gdn_l2norm(ctx, &x, &y, GDN_L2NORM_EPS), ctx);
    /* 2^31 value heads over an empty pool, every sequence padding: nothing runs (it used to
     * loop over sequences x heads) */
    const int64_t HV = (int64_t)1 << 31;
    int32_t slots[3] = {-1, -1, -1};
    d.q = gdn_tensor_4d(buf, GDN_F32, 3, 0, 1, 2);
    d.k = d.q;
    d.v = gdn_tensor_4d(buf, GDN_F32, 3, 0, HV, 2);
    d.beta = gdn_tensor_3d(buf, GDN_F32, 3, 0, HV);
    d.out = gdn_tensor_4d(out, GDN_F32, 3, 0, HV, 2);
    d.state = gdn_tensor_4d(out + 32, GDN_F32, 0, HV, 2, 2);
    d.state_slots = gdn_tensor_1d(slots, GDN_I32, 3);
    CHECK_OK(gdn_delta_rule(ctx, &d), ctx);
    (void)name;
}

/* A call of zero tokens on a pool: a fresh sequence's slot becomes zeros, a continuing one's is
 * unchanged (to its dtype), a skipped one's is not touched. */
static void test_zero_tokens_with_state(gdn_context *ctx, const char *name)
{
    const int64_t N = 3, HV = 2, K = 8, V = 4, S = 4;
    float dummy[16], out[16];
    gdn_tensor pool = tensor_alloc(GDN_F32, 4, (const int64_t[]){S, HV, K, V});
    tensor_fill_uniform(&pool, &g_rng, -1.0, 1.0);
    gdn_tensor before = tensor_zeros_like(&pool);
    tensor_copy(&before, &pool);
    int32_t slots[3] = {2, -1, 0};
    uint8_t init[3] = {0, 1, 1};
    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    d.q = gdn_tensor_4d(dummy, GDN_F32, N, 0, 1, K);
    d.k = d.q;
    d.v = gdn_tensor_4d(dummy, GDN_F32, N, 0, HV, V);
    d.beta = gdn_tensor_3d(dummy, GDN_F32, N, 0, HV);
    d.out = gdn_tensor_4d(out, GDN_F32, N, 0, HV, V);
    d.state = pool;
    d.state_slots = gdn_tensor_1d(slots, GDN_I32, N);
    d.has_initial_state = gdn_tensor_1d(init, GDN_U8, N);
    for (int algo = GDN_ALGO_RECURRENT; algo <= GDN_ALGO_CHUNKED; algo++) {
        tensor_copy(&pool, &before);
        d.algorithm = (gdn_algorithm)algo;
        CHECK_OK(gdn_delta_rule(ctx, &d), ctx);
        const int64_t per_slot = HV * K * V;
        int64_t wrong = 0;
        for (int64_t s = 0; s < S; s++)
            for (int64_t e = 0; e < per_slot; e++) {
                const double got = tensor_get(&pool, s * per_slot + e);
                const double want = s == 2 ? 0.0 : tensor_get(&before, s * per_slot + e);
                wrong += got != want;
            }
        CHECK(wrong == 0, "%s algo %d: %lld pool elements wrong after a zero-token call", name,
              algo, (long long)wrong);
    }
    tensor_free(&pool);
    tensor_free(&before);
}

/* The same with random options (dtypes, layouts, GVA, slots, padding, fresh starts), against
 * the reference: B = 0, and sequences of zero tokens on a pool. */
static void test_zero_tokens_random(gdn_context *ctx, gdn_context *ref, const char *name)
{
    for (int i = 0; i < 8; i++) {
        delta_config f = delta_config_default();
        f.nseq = i % 4 == 0 ? 0 : 3;
        f.T = 0;
        f.HV = 2;
        f.pool = f.nseq > 0;
        delta_config_random_options(&f, &g_rng);
        delta_case c;
        delta_case_init(&c, &f, &g_rng);
        CHECK_OK(delta_case_run(ref, &c, GDN_ALGO_RECURRENT), ref);
        gdn_tensor want = c.state.data ? tensor_zeros_like(&c.state) : gdn_tensor_none();
        if (c.state.data)
            tensor_copy(&want, &c.state);
        for (int algo = GDN_ALGO_RECURRENT; algo <= GDN_ALGO_CHUNKED; algo++) {
            CHECK_OK(delta_case_run(ctx, &c, (gdn_algorithm)algo), ctx);
            CHECK(delta_case_untouched(&c), "%s: a zero-token call wrote a skipped row or slot",
                  name);
            CHECK(!c.state.data || rel_l2(&c.state, &want) == 0.0,
                  "%s algo %d: zero-token states differ from the reference", name, algo);
        }
        if (c.state.data)
            tensor_free(&want);
        delta_case_free(&c);
    }
}

/* ---- one context, two threads ---------------------------------------------------------------- */

typedef struct shared_call {
    gdn_context *ctx;
    delta_case *c;          /* each thread its own buffers */
    const gdn_tensor *want; /* the single-threaded answer */
    atomic_int *start;
    int rounds, busy, wrong, other;
} shared_call;

static void *call_repeatedly(void *arg)
{
    shared_call *s = arg;
    atomic_fetch_add(s->start, 1);
    while (atomic_load(s->start) < 2) /* both threads begin together */
        ;
    for (int i = 0; i < s->rounds; i++) {
        const gdn_status st = delta_case_run(s->ctx, s->c, GDN_ALGO_AUTO);
        if (st == GDN_ERR_BUSY)
            s->busy++;
        else if (st != GDN_OK)
            s->other++;
        else if (rel_l2(&s->c->out, s->want) > 0.0)
            s->wrong++;
    }
    return NULL;
}

static void test_shared_context(gdn_backend b)
{
    gdn_context *ctx = open_ctx(b, 2);
    if (!ctx)
        return;
    delta_config f = delta_config_default();
    f.nseq = 2;
    f.T = 96;
    f.H = 2;
    f.HV = 4;
    f.K = f.V = 32;
    f.pool = true;
    delta_case c[2];
    rng again = g_rng;
    delta_case_init(&c[0], &f, &g_rng);
    delta_case_init(&c[1], &f, &again); /* the same problem in other buffers */
    CHECK_OK(delta_case_run(ctx, &c[0], GDN_ALGO_AUTO), ctx);
    gdn_tensor want = tensor_zeros_like(&c[0].out);
    tensor_copy(&want, &c[0].out);
    atomic_int start = 0;
    shared_call s[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        s[i] = (shared_call){ctx, &c[i], &want, &start, b == GDN_BACKEND_REF ? 20 : 200, 0, 0, 0};
        pthread_create(&t[i], NULL, call_repeatedly, &s[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    const int busy = s[0].busy + s[1].busy, wrong = s[0].wrong + s[1].wrong;
    printf("shared %s context: %d + %d calls, %d answered GDN_ERR_BUSY, %d wrong\n",
           gdn_backend_name(b), s[0].rounds, s[1].rounds, busy, wrong);
    CHECK(wrong == 0 && s[0].other + s[1].other == 0,
          "%s: a shared context gave %d wrong answers and %d other errors", gdn_backend_name(b),
          wrong, s[0].other + s[1].other);
    CHECK(busy > 0, "%s: two threads on one context never saw GDN_ERR_BUSY", gdn_backend_name(b));
    /* the context is free again, and GDN_ERR_BUSY left its message alone */
    CHECK_OK(delta_case_run(ctx, &c[0], GDN_ALGO_AUTO), ctx);
    CHECK(rel_l2(&c[0].out, &want) == 0.0, "%s: the context is wrong after the shared use",
          gdn_backend_name(b));
    tensor_free(&want);
    delta_case_free(&c[0]);
    delta_case_free(&c[1]);
    gdn_context_destroy(ctx);
}

/* ---- fork ----------------------------------------------------------------------------------- */

/* A cpu context with two workers runs, the process forks, and the child runs the same problem
 * on the same context: its pool is rebuilt, not waited on. The child has 30 s before SIGALRM
 * ends it (a hang fails the test instead of the run). */
static void test_fork(void)
{
    gdn_context *ctx = open_ctx(GDN_BACKEND_CPU, 2);
    if (!ctx)
        return;
    delta_config f = delta_config_default();
    f.nseq = 4;
    f.T = 80;
    f.HV = 2;
    f.K = f.V = 32;
    delta_case c;
    delta_case_init(&c, &f, &g_rng);
    CHECK_OK(delta_case_run(ctx, &c, GDN_ALGO_AUTO), ctx);
    gdn_tensor want = tensor_zeros_like(&c.out);
    tensor_copy(&want, &c.out);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        int ok = 1;
        for (int i = 0; i < 3; i++)
            ok &= delta_case_run(ctx, &c, GDN_ALGO_AUTO) == GDN_OK && rel_l2(&c.out, &want) == 0.0;
        gdn_context *fresh = open_ctx(GDN_BACKEND_CPU, 2); /* and a context made in the child */
        ok &= fresh && delta_case_run(fresh, &c, GDN_ALGO_AUTO) == GDN_OK &&
              rel_l2(&c.out, &want) == 0.0;
        gdn_context_destroy(fresh);
        gdn_context_destroy(ctx);
        _exit(ok ? 0 : 1);
    }
    CHECK(pid > 0, "fork failed");
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the forked child %s (status %d, signal %d)",
          WIFSIGNALED(status) ? "died or hung" : "got a wrong answer", WEXITSTATUS(status),
          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    CHECK_OK(delta_case_run(ctx, &c, GDN_ALGO_AUTO), ctx); /* the parent's pool still works */
    CHECK(rel_l2(&c.out, &want) == 0.0, "the parent's answer changed after fork");
    tensor_free(&want);
    delta_case_free(&c);
    gdn_context_destroy(ctx);
}

/* ---- norms of extreme rows ---------------------------------------------------------------- */

/* Rows of D equal values x (sign alternating): l2norm gives +-1/sqrt(D), rmsnorm +-1, whatever
 * x is, as long as x^2 + eps is not dominated by eps (eps = 0 here). */
static void test_extreme_norms(gdn_context *ctx, const char *name)
{
    const double xs[] = {1e30, -3e38, 1e20, 1e-20, 1e-30, 1e-38};
    const int64_t D = 32;
    float x[32], out[32];
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        for (int64_t d = 0; d < D; d++)
            x[d] = (float)(d % 2 ? -xs[i] : xs[i]);
        gdn_tensor tx = gdn_tensor_2d(x, GDN_F32, 1, D), to = gdn_tensor_2d(out, GDN_F32, 1, D);
        CHECK_OK(gdn_l2norm(ctx, &tx, &to, 0.0f), ctx);
        errsum e = {0, 0, 0};
        for (int64_t d = 0; d < D; d++)
            err_add(&e, out[d], (x[d] > 0 ? 1.0 : -1.0) / sqrt((double)D));
        CHECK_ERR(err_value(&e), 1e-6, "%s l2norm of a row of %g", name, xs[i]);
        gdn_rmsnorm_args r = gdn_rmsnorm_default_args();
        r.x = tx;
        r.out = to;
        r.eps = 0.0f;
        CHECK_OK(gdn_rmsnorm_gated(ctx, &r), ctx);
        e = (errsum){0, 0, 0};
        for (int64_t d = 0; d < D; d++)
            err_add(&e, out[d], x[d] > 0 ? 1.0 : -1.0);
        CHECK_ERR(err_value(&e), 1e-6, "%s rmsnorm of a row of %g", name, xs[i]);
    }
}

/* ---- limits -------------------------------------------------------------------------------- */

static void test_thread_limits(void)
{
    const int32_t bad[] = {GDN_MAX_THREADS + 1, INT32_MAX, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gdn_context_options o = gdn_context_default_options();
        o.backend = GDN_BACKEND_CPU;
        o.num_threads = bad[i];
        gdn_context *ctx = (gdn_context *)&o; /* must come back NULL */
        const gdn_status st = gdn_context_create(&ctx, &o);
        CHECK(st == GDN_ERR_VALUE && !ctx && strstr(gdn_last_error(NULL), "num_threads"),
              "num_threads %d gave %s: %s", (int)bad[i], gdn_strerror(st), gdn_last_error(NULL));
    }
}

/* N sequences of no token on a pool of S slots, with one repeated slot far apart: found and
 * named by both sequences, whichever way the check runs (a bitmap of the pool for pools of up to
 * 65536 slots, sorted pairs beyond: on the stack up to 256 sequences, allocated above); it used
 * to compare every pair. */
static void check_repeated_slot(gdn_context *ctx, const char *name, int64_t N, int64_t S)
{
    const int64_t K = 1, V = 1;
    float dummy[8], out[8];
    gdn_tensor pool = tensor_alloc(GDN_F32, 4, (const int64_t[]){S, 1, K, V});
    int64_t *slots = xmalloc((size_t)N * sizeof *slots);
    for (int64_t n = 0; n < N; n++)
        slots[n] = (n * 7919) % S; /* distinct: 7919 is prime to every S used here */
    gdn_delta_rule_args d = gdn_delta_rule_default_args();
    d.q = gdn_tensor_4d(dummy, GDN_F32, N, 0, 1, K);
    d.k = d.q;
    d.v = gdn_tensor_4d(dummy, GDN_F32, N, 0, 1, V);
    d.beta = gdn_tensor_3d(dummy, GDN_F32, N, 0, 1);
    d.out = gdn_tensor_4d(out, GDN_F32, N, 0, 1, V);
    d.state = pool;
    d.state_slots = gdn_tensor_1d(slots, GDN_I64, N);
    CHECK_OK(gdn_delta_rule(ctx, &d), ctx);
    slots[N - 1] = slots[17];
    const gdn_status st = gdn_delta_rule(ctx, &d);
    char want[96];
    snprintf(want, sizeof want, "state_slots[17] and state_slots[%lld]", (long long)(N - 1));
    CHECK(st == GDN_ERR_VALUE && strstr(gdn_last_error(ctx), want),
          "%s: N = %lld, S = %lld: a repeated slot gave %s: %s", name, (long long)N, (long long)S,
          gdn_strerror(st), gdn_last_error(ctx));
    free(slots);
    tensor_free(&pool);
}

static void test_many_slots(gdn_context *ctx, const char *name)
{
    check_repeated_slot(ctx, name, 5000, 5000);   /* bitmap */
    check_repeated_slot(ctx, name, 65536, 65536); /* bitmap, every slot used */
    check_repeated_slot(ctx, name, 100, 70000);   /* sorted on the stack */
    check_repeated_slot(ctx, name, 3000, 70000);  /* sorted, allocated */
}

int main(void)
{
    uint64_t seed = fresh_seed();
    printf("seed %llu (replay with GDN_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    g_rng = rng_seed(seed);
    const struct {
        gdn_backend b;
        int threads;
    } hosts[] = {{GDN_BACKEND_REF, 1}, {GDN_BACKEND_CPU, 1}, {GDN_BACKEND_CPU, 2},
                 {GDN_BACKEND_CPU, 3}};
    gdn_context *ref = open_ctx(GDN_BACKEND_REF, 1);
    for (size_t i = 0; ref && i < sizeof hosts / sizeof hosts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s/%d", gdn_backend_name(hosts[i].b), hosts[i].threads);
        gdn_context *ctx = open_ctx(hosts[i].b, hosts[i].threads);
        if (!ctx)
            continue;
        test_empty_batches(ctx, name);
        test_huge_empty_batch(ctx, name);
        test_zero_tokens_with_state(ctx, name);
        test_zero_tokens_random(ctx, ref, name);
        test_extreme_norms(ctx, name);
        test_many_slots(ctx, name);
        gdn_context_destroy(ctx);
    }
    gdn_context_destroy(ref);
    test_shared_context(GDN_BACKEND_REF);
    test_shared_context(GDN_BACKEND_CPU);
    test_fork();
    test_thread_limits();
    return test_summary("test_hardening");
}
