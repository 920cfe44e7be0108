/* The CUDA prefill's fast precision mode (GDN_PRECISION_FAST, the default for 16-bit inputs) on
 * a GPU (skipped, exit 77, without one):
 *   - the chunked form on random problems of SPEC's distributions (unit-norm keys or the
 *     in-kernel L2 norm, gates passed in, beta in (0, 1)), bf16 and f16 inputs, f32 and 16-bit
 *     outputs, T below, at and past the chunk, varlen with empty and one-token sequences: outputs
 *     and states within 5e-3 of the float64 reference, unsplit and in forced segments, with each
 *     state pass this GPU has (wgmma on sm_90a, fused or with W and U, mma.sync everywhere),
 *     the fused pass beside its preparation or after it, and the wgmma pass's two ways of
 *     storing output tiles; K and V that round up to 128 (the fused pass's) on their own;
 *   - long memory (values the state predicts) to the same bar, split or not;
 *   - split calls whose maps run only their segments' last chunks (strong, usual and slow
 *     decay side by side), in both modes, and that such a map reads nothing before its tail;
 *   - the two modes differ for 16-bit inputs (the switch reaches the kernels) and give the same
 *     bytes for f32 inputs (both run split tf32).
 * The high mode's 5e-5 bars are test_cuda's. python/tests/test_gpu_fla.py compares the fast
 * mode's error with FLA's on the same inputs. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "delta_case.h"
#include "device.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST_DEFINE_COUNTERS

#define FAST_TOL 5e-3

static gdn_context *cuda, *ref;

static gdn_status run_cuda(delta_case *c)
{
    delta_case_reset(c);
    gdn_delta_rule_args a = c->args;
    a.algorithm = GDN_ALGO_CHUNKED;
    staging s = {0};
    stage_delta_rule_args(&s, &a);
    gdn_status st = gdn_delta_rule(cuda, &a);
    unstage(&s);
    return st;
}

/* The reference's out and state for c (recurrent, float64). */
typedef struct expected {
    gdn_tensor out, state;
} expected;

static expected expect(delta_case *c)
{
    CHECK_OK(delta_case_run(ref, c, GDN_ALGO_RECURRENT), ref);
    expected e = {tensor_zeros_like(&c->out), gdn_tensor_none()};
    tensor_copy(&e.out, &c->out);
    if (c->state.data) {
        e.state = tensor_zeros_like(&c->state);
        tensor_copy(&e.state, &c->state);
    }
    return e;
}

static void expected_free(expected *e)
{
    tensor_free(&e->out);
    if (e->state.data)
        tensor_free(&e->state);
}

/* Where every sequence is one token, each output row's new-value part is one product of two
 * scalars rounded once to 16 bits (Aqk and beta, the 1 x 1 T diag(beta)) and a v row: their
 * roundings, up to 2^-9 each, are common to the row and do not average over its values, so with
 * the output's own rounding such rows reach 3 x 2^-9 = 5.9e-3 (a draw of 6 rows of 16 values
 * measured 5.7e-3, on every state pass). */
#define ONE_TOKEN_FAST_TOL 6e-3

/* Runs c on the device and checks it against e to FAST_TOL (outputs of one-token sequences:
 * ONE_TOKEN_FAST_TOL); returns the larger error. */
static double check_fast(delta_case *c, const expected *e, const char *what)
{
    char desc[200];
    delta_case_describe(c, desc, sizeof desc);
    CHECK_OK(run_cuda(c), cuda);
    CHECK(delta_case_untouched(c), "cuda %s wrote a skipped row or an unnamed slot: %s", what,
          desc);
    double err = rel_l2(&c->out, &e->out);
    const bool one_token = !c->cfg.lens && c->cfg.T == 1;
    CHECK_ERR(err, one_token ? ONE_TOKEN_FAST_TOL : FAST_TOL, "cuda %s output: %s", what, desc);
    if (c->state.data) {
        const double se = rel_l2(&c->state, &e->state);
        CHECK_ERR(se, FAST_TOL, "cuda %s state: %s", what, desc);
        err = fmax(err, se);
    }
    return err;
}

/* Every state pass of this GPU (wgmma fused or with W and U, mma.sync), unsplit and in 2-chunk
 * segments; the fused pass unsplit both beside its preparation (where the plan puts it there:
 * the tests' problems leave SMs free) and after it; the wgmma pass with W and U stores its output
 * tiles thread by thread (the others whole chunks of 16-bit outputs by bulk tensor stores, where
 * the device has them). */
static double check_all_passes(delta_case *c, const expected *e, const char *what)
{
    static const char *passes[] = {"wgmma", "wgmma", "wgmma", "mma"};
    static const char *fused[] = {"1", "1", "0", "1"}, *beside[] = {"1", "0", "1", "1"};
    double worst = 0.0;
    for (int p = 0; p < 4; p++)
        for (int split = 0; split < 2 - (p == 1); split++) {
            setenv("GDN_CUDA_STATE_PASS", passes[p], 1);
            setenv("GDN_CUDA_FUSED", fused[p], 1);
            setenv("GDN_CUDA_TMA_STORE", fused[p], 1);
            setenv("GDN_CUDA_BESIDE", beside[p], 1);
            if (split)
                setenv("GDN_CUDA_SEGMENT_CHUNKS", "2", 1);
            char w[120];
            snprintf(w, sizeof w, "%s, %s pass%s%s%s", what, passes[p],
                     fused[p][0] == '0' ? " with W and U, stores by thread" : "",
                     beside[p][0] == '0' ? ", the preparation first" : "",
                     split ? ", 2-chunk segments" : "");
            worst = fmax(worst, check_fast(c, e, w));
            unsetenv("GDN_CUDA_SEGMENT_CHUNKS");
            unsetenv("GDN_CUDA_STATE_PASS");
            unsetenv("GDN_CUDA_FUSED");
            unsetenv("GDN_CUDA_TMA_STORE");
            unsetenv("GDN_CUDA_BESIDE");
        }
    return worst;
}

static void test_random(rng *r)
{
    static const int64_t ks[] = {32, 64, 96, 128}, vs[] = {16, 36, 64, 128};
    static const int64_t lens[] = {0, 1, 130, 64, 5, 0, 270};
    double worst = 0.0;
    for (int i = 0; i < 16; i++) {
        delta_config f = delta_config_default();
        f.H = rng_int(r, 1, 3);
        f.HV = f.H * (int64_t[]){1, 2, 4}[rng_int(r, 0, 2)];
        f.K = ks[i % 4];
        f.V = vs[rng_int(r, 0, 3)];
        f.nseq = 2 * rng_int(r, 0, 1) + 1;
        f.T = (int64_t[]){1, 37, 64, 200, 700}[rng_int(r, 0, 4)];
        if (i % 4 == 3) {
            f.nseq = 7;
            f.lens = lens;
        }
        f.pool = i % 6 != 5;
        delta_config_random_options(&f, r);
        f.gate_in_kernel = false; /* SPEC's distribution: beta in (0, 1) */
        f.dtype = i % 2 ? GDN_F16 : GDN_BF16;
        f.out_dtype = i % 3 ? f.dtype : GDN_F32;
        f.precision = i % 5 ? GDN_PRECISION_FAST : GDN_PRECISION_AUTO; /* auto is fast */
        delta_case c;
        delta_case_init(&c, &f, r);
        expected e = expect(&c);
        worst = fmax(worst, check_all_passes(&c, &e, "fast"));
        expected_free(&e);
        delta_case_free(&c);
    }
    printf("fast mode, random problems: worst error %.2e\n", worst);
}

/* K and V that round up to 128, which the fused pass runs on sm_90a (unsplit beside its
 * preparation where SMs are free): odd sizes, GVA, varlen with empty and short sequences, T
 * below, at and past the chunk, pools with and without initial states, in-kernel gating on
 * some. */
static void test_fused_shapes(rng *r)
{
    static const int64_t lens[] = {0, 1, 130, 64, 5, 0, 270};
    double worst = 0.0;
    for (int i = 0; i < 12; i++) {
        delta_config f = delta_config_default();
        f.H = rng_int(r, 1, 2);
        f.HV = f.H * (int64_t[]){1, 2, 3}[rng_int(r, 0, 2)];
        f.K = (int64_t[]){128, 100, 127}[i % 3];
        f.V = (int64_t[]){128, 128, 120, 97}[rng_int(r, 0, 3)];
        f.nseq = rng_int(r, 1, 3);
        f.T = (int64_t[]){1, 37, 64, 65, 200, 700}[rng_int(r, 0, 5)];
        if (i % 4 == 3) {
            f.nseq = 7;
            f.lens = lens;
        }
        /* (the pool is read 16 bytes at a time: K and V multiples of 4) */
        f.pool = i % 5 != 4 && f.K % 4 == 0 && f.V % 4 == 0;
        delta_config_random_options(&f, r);
        f.gate_in_kernel = i % 6 == 1;
        f.dtype = i % 2 ? GDN_F16 : GDN_BF16;
        f.out_dtype = i % 3 ? f.dtype : GDN_F32;
        f.precision = GDN_PRECISION_FAST;
        delta_case c;
        delta_case_init(&c, &f, r);
        c.allow_neg_eigval = false; /* SPEC's distribution: beta in (0, 1) */
        c.args.gating.allow_neg_eigval = 0;
        expected e = expect(&c);
        worst = fmax(worst, check_all_passes(&c, &e, "fast, K and V round to 128"));
        expected_free(&e);
        delta_case_free(&c);
    }
    printf("fast mode, K and V rounding to 128: worst error %.2e\n", worst);
}

static void test_long_memory(rng *r)
{
    for (int i = 0; i < 6; i++) {
        delta_config f = delta_config_long_memory(i, r);
        f.gate_in_kernel = false;
        f.dtype = i % 2 ? GDN_F16 : GDN_BF16;
        f.precision = GDN_PRECISION_FAST;
        delta_case c;
        delta_case_init(&c, &f, r);
        expected e = expect(&c);
        const double err = check_all_passes(&c, &e, "fast, long memory");
        printf("fast mode, long memory, %s: worst error %.2e\n", gdn_dtype_name(f.dtype), err);
        expected_free(&e);
        delta_case_free(&c);
    }
}

/* Split calls whose maps start at their segments' last chunks (segment_tail): with unit keys,
 * the wgmma maps pass runs only the chunks whose decay still reaches a segment's end. Per value
 * head, strong decay (g in (-4, -1): one chunk reaches), moderate (g in (-0.3, -0.1), about -13
 * a chunk: four, a whole 4-chunk segment whose M is still zero) or both by turns, every third
 * segment slow (g in (-0.01, 0): none reaches, the whole segment, M whole), so that a stitch's
 * chain takes zero and whole Ms one after the other; 4- and 6-chunk segments; both modes, f32
 * outputs, against the float64 recurrence to each mode's bar (fast 5e-3, high 5e-5). A map that
 * started at the wrong chunk would leave the next segment a wrong start state, which its first
 * tokens' outputs show. */
static void test_segment_tails(rng *r)
{
    static const int64_t lens[] = {700, 0, 1300, 65, 900};
    static const char *segc[] = {"4", "6"};
    double worst[2] = {0.0, 0.0};
    for (int i = 0; i < 8; i++) {
        delta_config f = delta_config_default();
        f.H = rng_int(r, 1, 2);
        f.HV = 3 * f.H;
        f.K = f.V = 128;
        f.T = (int64_t[]){900, 1500}[rng_int(r, 0, 1)];
        if (i % 4 == 3) {
            f.nseq = 5;
            f.lens = lens;
        }
        f.pool = i % 3 != 2;
        delta_config_random_options(&f, r);
        f.qk_l2norm = true;
        f.gate_in_kernel = false;
        f.dtype = i % 2 ? GDN_F16 : GDN_BF16;
        f.out_dtype = GDN_F32;
        delta_case c;
        delta_case_init(&c, &f, r);
        const int64_t ng = tensor_numel(&c.g), seg_tokens = 64 * atoi(segc[i / 2 % 2]);
        for (int64_t t = 0; t < ng; t++) {
            const int64_t h = t % f.HV, tok = t / f.HV % c.T; /* g is [B, T, HV] */
            const bool slow = h % 3 == 2 && tok / seg_tokens % 3 == 1; /* (varlen: roughly) */
            const int kind = h % 3 == 2 ? (slow ? 2 : 0) : (int)(h % 3);
            const double lo[] = {1.0, 0.1, 0.0}, hi[] = {4.0, 0.3, 0.01};
            tensor_set(&c.g, t, -rng_uniform(r, lo[kind], hi[kind]));
        }
        expected e = expect(&c);
        for (int m = 0; m < 2; m++) {
            c.args.precision = m ? GDN_PRECISION_HIGH : GDN_PRECISION_FAST;
            setenv("GDN_CUDA_STATE_PASS", "wgmma", 1);
            setenv("GDN_CUDA_SEGMENT_CHUNKS", segc[i / 2 % 2], 1);
            char desc[200];
            delta_case_describe(&c, desc, sizeof desc);
            CHECK_OK(run_cuda(&c), cuda);
            unsetenv("GDN_CUDA_STATE_PASS");
            unsetenv("GDN_CUDA_SEGMENT_CHUNKS");
            CHECK(delta_case_untouched(&c), "cuda segment tails wrote a skipped row: %s", desc);
            const double tol = m ? 5e-5 : FAST_TOL;
            const double eo = rel_l2(&c.out, &e.out);
            CHECK_ERR(eo, tol, "cuda %s, %s-chunk segment tails, output: %s", m ? "high" : "fast",
                      segc[i / 2 % 2], desc);
            worst[m] = fmax(worst[m], eo);
            if (c.state.data) {
                const double es = rel_l2(&c.state, &e.state);
                CHECK_ERR(es, tol, "cuda %s, %s-chunk segment tails, state: %s",
                          m ? "high" : "fast", segc[i / 2 % 2], desc);
                worst[m] = fmax(worst[m], es);
            }
        }
        expected_free(&e);
        delta_case_free(&c);
    }
    printf("segment tails: worst error fast %.2e, high %.2e\n", worst[0], worst[1]);
}

/* A map that runs only its segment's tail never reads the chunks before it: under strong decay
 * a NaN in the first chunk's values reaches that segment's outputs but not the final state (the
 * last segment starts from the first's tail alone), while whole maps (GDN_CUDA_TAIL=0) carry it
 * to the final state too (NaN times any decay is NaN). Both modes, two 4-chunk segments. */
static void test_tail_skips_early_chunks(rng *r)
{
    for (int m = 0; m < 2; m++) {
        delta_config f = delta_config_default();
        f.T = 8 * 64, f.H = 1, f.HV = 2, f.K = f.V = 128;
        f.pool = true;
        delta_config_random_options(&f, r);
        f.qk_l2norm = true;
        f.gate_in_kernel = false;
        f.fused_qkv = false;
        f.padding = false; /* the one sequence runs */
        f.dtype = m ? GDN_F16 : GDN_BF16;
        f.out_dtype = GDN_F32;
        f.precision = m ? GDN_PRECISION_HIGH : GDN_PRECISION_FAST;
        delta_case c;
        delta_case_init(&c, &f, r);
        for (int64_t t = 0; t < tensor_numel(&c.g); t++)
            tensor_set(&c.g, t, -rng_uniform(r, 1.0, 4.0)); /* a chunk decays by e^-64 or more */
        const gdn_tensor row = tensor_slice(&c.v, 1, rng_int(r, 0, 63), 1);
        tensor_set(&row, rng_int(r, 0, tensor_numel(&row) - 1), NAN);
        char desc[200];
        delta_case_describe(&c, desc, sizeof desc);
        for (int tail = 1; tail >= 0; tail--) {
            setenv("GDN_CUDA_STATE_PASS", "wgmma", 1);
            setenv("GDN_CUDA_SEGMENT_CHUNKS", "4", 1);
            if (!tail)
                setenv("GDN_CUDA_TAIL", "0", 1);
            CHECK_OK(run_cuda(&c), cuda);
            unsetenv("GDN_CUDA_STATE_PASS");
            unsetenv("GDN_CUDA_SEGMENT_CHUNKS");
            unsetenv("GDN_CUDA_TAIL");
            const gdn_tensor first = tensor_slice(&c.out, 1, 0, 4 * 64);
            const gdn_tensor st = tensor_slice(&c.state, 0, delta_case_slot(&c, 0), 1);
            CHECK(!tensor_all_finite(&first), "a NaN value left its segment's outputs finite: %s",
                  desc);
            CHECK(tensor_all_finite(&st) == (tail != 0),
                  "%s: a NaN value in the first segment's first chunk %s the final state: %s",
                  tail ? "maps from segment tails" : "whole maps",
                  tail ? "reached" : "did not reach", desc);
        }
        delta_case_free(&c);
    }
}

/* 16-bit inputs: fast and high differ; f32 inputs: the same bytes. */
static void test_modes_apart(rng *r)
{
    static const gdn_dtype dts[] = {GDN_BF16, GDN_F16, GDN_F32};
    for (int d = 0; d < 3; d++) {
        delta_config f = delta_config_default();
        f.T = 200, f.K = f.V = 64, f.H = 1, f.HV = 2, f.pool = true;
        f.dtype = dts[d];
        f.precision = GDN_PRECISION_FAST;
        delta_case c;
        delta_case_init(&c, &f, r);
        CHECK_OK(run_cuda(&c), cuda);
        gdn_tensor fast = tensor_zeros_like(&c.out);
        tensor_copy(&fast, &c.out);
        c.args.precision = GDN_PRECISION_HIGH;
        CHECK_OK(run_cuda(&c), cuda);
        const double apart = rel_l2(&fast, &c.out);
        CHECK(dts[d] == GDN_F32 ? apart == 0.0 : apart > 0.0,
              "%s inputs: fast and high outputs %.3g apart", gdn_dtype_name(dts[d]), apart);
        tensor_free(&fast);
        delta_case_free(&c);
    }
}

int main(void)
{
    if (!gdn_backend_available(GDN_BACKEND_CUDA)) {
        printf("test_cuda_fast: no CUDA device, skipped\n");
        return 77;
    }
    rng r;
    if (!test_begin(&ref, &r))
        return test_summary("test_cuda_fast");
    gdn_context_options o = gdn_context_default_options();
    o.backend = GDN_BACKEND_CUDA;
    CHECK_OK(gdn_context_create(&cuda, &o), NULL);
    if (!cuda)
        return test_summary("test_cuda_fast");
    test_random(&r);
    test_fused_shapes(&r);
    test_long_memory(&r);
    test_segment_tails(&r);
    test_tail_skips_early_chunks(&r);
    test_modes_apart(&r);
    gdn_context_destroy(cuda);
    gdn_context_destroy(ref);
    return test_summary("test_cuda_fast");
}
