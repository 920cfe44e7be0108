/*
 * gdn.h - libgdn, Gated DeltaNet kernels behind one small C API.
 *
 * One header, one context, five forward ops:
 *   gdn_conv1d / gdn_conv1d_update   causal depthwise conv1d (+ SiLU), prefill and decode
 *   gdn_gating                       g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)
 *   gdn_l2norm                       x / sqrt(sum(x^2) + eps) over the last dimension
 *   gdn_delta_rule                   the gated delta rule, recurrent or chunked (WY) form
 *   gdn_rmsnorm_gated                per-head RMSNorm of the output, gated by silu(z)
 *
 * Conventions (docs/MATH.md has the math, docs/API.md the long form):
 *   - Tensors are described by gdn_tensor: data pointer, dtype, shape and strides counted in
 *     ELEMENTS. Activations are token-major ([B, T, heads, dim] or [B, T, channels]); their last
 *     dimension must be contiguous (stride 1), every other stride is free, so q, k and v can be
 *     views into one fused projection buffer.
 *   - A tensor whose data is NULL is "absent". Optional tensors may be absent; required ones
 *     return GDN_ERR_NULL.
 *   - Varlen batches: B = 1 and cu_seqlens [N+1] (int32 or int64) gives the N sequences'
 *     offsets. Without cu_seqlens the batch has N = B sequences of T tokens each.
 *   - State pools: per-sequence state lives in a pool indexed by slot. state_slots[n] names the
 *     slot of sequence n (absent: slot n); a negative slot marks padding: that sequence is
 *     skipped and nothing of it (state or output) is written. has_initial_state[n] == 0 starts
 *     sequence n from zeros; its final state is still written.
 *   - Host-visible index tensors (cu_seqlens, state_slots, has_initial_state) are validated
 *     (ranges, order, duplicate slots) on the reference and CPU backends. On the CUDA backend they
 *     live on the device and only their shape and dtype are checked.
 *   - Every op validates every argument before it writes anything. On error it returns a
 *     gdn_status, leaves every output and state byte-identical, and records a message naming the
 *     offending argument and the expected value (gdn_last_error()). On success it writes its
 *     outputs' elements and the named pool slots, nothing else. An empty call (B = 0, T = 0
 *     without a pool, no sequence, zero rows) is a no-op that returns GDN_OK.
 *   - Outputs and state pools must be disjoint from every other tensor of the call (except an
 *     exact in-place view where an op allows one) and must not overlap themselves; every data
 *     pointer must be aligned to its dtype's size. Limits: GDN_MAX_HEAD_DIM, GDN_MAX_THREADS,
 *     tensors reaching at most PTRDIFF_MAX bytes (docs/API.md, "Guarantees").
 *   - Threads: a context serves one call at a time; a call on a context that another thread's
 *     call holds returns GDN_ERR_BUSY and touches nothing. Separate contexts run concurrently.
 *     fork(): a ref or cpu context made before fork() works in the child (the cpu backend starts
 *     its worker threads anew there); CUDA contexts do not survive fork().
 *   - Backends: reference (float64, readable, the oracle), cpu, cuda. For the reference and CPU
 *     backends every pointer is a host pointer; for CUDA every tensor pointer is a device pointer
 *     and the op is enqueued on the context's stream.
 */
#ifndef GDN_H
#define GDN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(GDN_SHARED_BUILD)
#define GDN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define GDN_API __attribute__((visibility("default")))
#else
#define GDN_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

#define GDN_VERSION_MAJOR 0
#define GDN_VERSION_MINOR 1
#define GDN_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, comparable with gdn_version_number(). */
#define GDN_VERSION_NUMBER (GDN_VERSION_MAJOR * 10000 + GDN_VERSION_MINOR * 100 + GDN_VERSION_PATCH)
#define GDN_VERSION_STRING "0.1.0"

/* The version of the library actually linked, as GDN_VERSION_NUMBER / GDN_VERSION_STRING. */
GDN_API unsigned gdn_version_number(void);
GDN_API const char *gdn_version_string(void);

/* sizeof of a public struct of this header, named as in C ("gdn_tensor", "gdn_context_options",
 * "gdn_conv1d_args", "gdn_conv1d_update_args", "gdn_gating_params", "gdn_rmsnorm_args",
 * "gdn_delta_rule_args"); 0 for any other name. Bindings that mirror the structs (ctypes, FFI)
 * check their mirrors against it, so a header change can never silently misread memory. */
GDN_API size_t gdn_struct_size(const char *name);

/* ---------------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_status {
    GDN_OK = 0,
    GDN_ERR_NULL = 1,          /* a required pointer, or a required tensor's data, is NULL */
    GDN_ERR_DTYPE = 2,         /* a tensor's dtype is not one the argument accepts */
    GDN_ERR_SHAPE = 3,         /* a rank or extent disagrees with the others */
    GDN_ERR_STRIDE = 4,        /* a stride is not allowed (last dim not contiguous, negative) */
    GDN_ERR_VALUE = 5,         /* an option or index value is out of range */
    GDN_ERR_UNSUPPORTED = 6,   /* valid request the selected backend does not implement */
    GDN_ERR_BACKEND = 7,       /* backend not compiled in, or no device for it */
    GDN_ERR_NO_MEMORY = 8,     /* host or device allocation failed */
    GDN_ERR_WORKSPACE = 9,     /* caller-provided workspace is smaller than the op needs */
    GDN_ERR_CUDA = 10,         /* the CUDA runtime reported an error (message has its text) */
    GDN_ERR_INTERNAL = 11,     /* a bug in libgdn */
    GDN_ERR_BUSY = 12          /* the context is in use by another thread's call (the message
                                  is in gdn_last_error(NULL); the context's is left alone) */
} gdn_status;

/* A static, human-readable name for a status ("GDN_ERR_SHAPE: ..."). Never NULL. */
GDN_API const char *gdn_strerror(gdn_status status);

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_dtype {
    GDN_F32 = 0,   /* IEEE binary32 */
    GDN_BF16 = 1,  /* bfloat16, stored as uint16 */
    GDN_F16 = 2,   /* IEEE binary16, stored as uint16 */
    GDN_I32 = 3,   /* int32 (index tensors) */
    GDN_I64 = 4,   /* int64 (index tensors) */
    GDN_U8 = 5     /* uint8 / bool (flag tensors) */
} gdn_dtype;

/* Size of one element of dtype in bytes; 0 for an unknown dtype. */
GDN_API size_t gdn_dtype_size(gdn_dtype dtype);
/* "f32", "bf16", "f16", "i32", "i64", "u8"; "?" for an unknown dtype. */
GDN_API const char *gdn_dtype_name(gdn_dtype dtype);

#define GDN_MAX_DIMS 4

/* Limits every op enforces (GDN_ERR_VALUE, naming the argument):
 *   - K and V (the key and value head dims of the delta rule) are at most GDN_MAX_HEAD_DIM;
 *   - every tensor's elements must span at most PTRDIFF_MAX bytes from its data pointer;
 *   - a tensor that an op writes (outputs, state pools) and every index tensor must not overlap
 *     itself: a stride of 0 over an extent above 1, or strides that make two elements share an
 *     address, are refused (GDN_ERR_STRIDE). Inputs may broadcast with stride 0. */
#define GDN_MAX_HEAD_DIM 1024

typedef struct gdn_tensor {
    void *data;                     /* first element; NULL means "absent"; aligned to the
                                       dtype's size (GDN_ERR_VALUE otherwise) */
    gdn_dtype dtype;                /* element type */
    int32_t ndim;                   /* 1 .. GDN_MAX_DIMS */
    int64_t shape[GDN_MAX_DIMS];    /* extents, outermost first; entries >= ndim ignored */
    int64_t stride[GDN_MAX_DIMS];   /* element (not byte) strides; must be >= 0 */
} gdn_tensor;

/* Row-major contiguous descriptors. They only fill the struct: no allocation, no copy. */
GDN_API gdn_tensor gdn_tensor_1d(void *data, gdn_dtype dtype, int64_t n0);
GDN_API gdn_tensor gdn_tensor_2d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1);
GDN_API gdn_tensor gdn_tensor_3d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1, int64_t n2);
GDN_API gdn_tensor gdn_tensor_4d(void *data, gdn_dtype dtype, int64_t n0, int64_t n1, int64_t n2,
                                 int64_t n3);
/* The absent tensor (all zero, data NULL). */
GDN_API gdn_tensor gdn_tensor_none(void);

/* Conversions used by every backend (round to nearest even; NaN stays NaN). */
GDN_API float gdn_bf16_to_f32(uint16_t h);
GDN_API uint16_t gdn_f32_to_bf16(float f);
GDN_API float gdn_f16_to_f32(uint16_t h);
GDN_API uint16_t gdn_f32_to_f16(float f);

/* ---------------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_backend {
    GDN_BACKEND_AUTO = 0,  /* the fastest host backend: cpu when compiled in, else ref. Never
                              cuda, whose tensors are device pointers: ask for it explicitly */
    GDN_BACKEND_REF = 1,   /* scalar float64 reference: the oracle, single-threaded */
    GDN_BACKEND_CPU = 2,   /* multithreaded SIMD CPU backend */
    GDN_BACKEND_CUDA = 3   /* NVIDIA GPU backend */
} gdn_backend;

/* CPU instruction-set level for the cpu backend (GDN_ISA_AUTO: the best the CPU and OS allow;
 * the environment variable GDN_CPU_ISA=scalar|avx2|avx512|amx overrides AUTO). GDN_ISA_AMX is the
 * avx512 kernels plus AMX tile products in the chunked delta rule for bf16 q/k/v (bf16 operands,
 * every one but the exact q and k as hi + lo parts, f32 accumulation and state: f32 outputs and
 * states within 5e-5 of float64, bf16 outputs within the bf16 bar, 5e-3); it needs AMX-BF16, a
 * build with AMX support and the OS's permission (asked for at context creation; refused:
 * GDN_ERR_BACKEND). On CPUs with AVX512-BF16, GDN_ISA_AVX512 can run those bf16 products as dot
 * products instead (opt-in, see gdn_context_cpu_bf16_products). */
typedef enum gdn_cpu_isa {
    GDN_ISA_AUTO = 0,
    GDN_ISA_SCALAR = 1,
    GDN_ISA_AVX2 = 2,
    GDN_ISA_AVX512 = 3,
    GDN_ISA_AMX = 4
} gdn_cpu_isa;

typedef struct gdn_context_options {
    gdn_backend backend;      /* which backend runs the ops (default GDN_BACKEND_AUTO) */
    int32_t num_threads;      /* cpu backend threads, 0 to GDN_MAX_THREADS; 0 = one per online
                                 CPU (at most GDN_MAX_THREADS) */
    int32_t cuda_device;      /* CUDA device ordinal, >= 0 (default 0; used by the cuda backend) */
    void *cuda_stream;        /* cudaStream_t the ops are enqueued on; NULL = default stream */
    gdn_cpu_isa cpu_isa;      /* force a CPU ISA level (default GDN_ISA_AUTO; used by cpu) */
} gdn_context_options;

typedef struct gdn_context gdn_context;

#define GDN_MAX_THREADS 1024

/* The defaults above. Start from these and change fields, so new fields keep their defaults. */
GDN_API gdn_context_options gdn_context_default_options(void);

/* Creates a context. opts may be NULL (defaults). On success *ctx receives the context and
 * GDN_OK is returned. Errors: GDN_ERR_NULL (ctx NULL), GDN_ERR_VALUE (bad enum, thread count
 * outside 0 .. GDN_MAX_THREADS), GDN_ERR_BACKEND (backend not compiled in or no device), GDN_ERR_NO_MEMORY.
 * On error *ctx is set to NULL and gdn_last_error(NULL) holds the message. */
GDN_API gdn_status gdn_context_create(gdn_context **ctx, const gdn_context_options *opts);

/* Frees the context and the scratch memory it owns. NULL is a no-op. Must not race with a call
 * on the same context. */
GDN_API void gdn_context_destroy(gdn_context *ctx);

/* The backend the context resolved to (never GDN_BACKEND_AUTO; AUTO for a NULL ctx), and a
 * backend's name ("auto", "ref", "cpu", "cuda"). */
GDN_API gdn_backend gdn_context_backend(const gdn_context *ctx);
GDN_API const char *gdn_backend_name(gdn_backend backend);
/* 1 if the backend is compiled in and usable on this machine, else 0. */
GDN_API int gdn_backend_available(gdn_backend backend);

/* Worker threads the context uses (1 for ref; the pool size for cpu; 0 for cuda, which runs on
 * the GPU, and for a NULL ctx). */
GDN_API int gdn_context_num_threads(const gdn_context *ctx);

/* The CPU instruction-set level a cpu-backend context runs (chosen at creation from
 * opts.cpu_isa, $GDN_CPU_ISA, or the best the CPU and OS allow). GDN_ISA_AUTO for other backends
 * and for a NULL ctx. */
GDN_API gdn_cpu_isa gdn_context_cpu_isa(const gdn_context *ctx);

/* How a cpu-backend context multiplies bf16 q, k, v in the chunked delta rule (all three bf16):
 * with bf16 products (bf16 operands as for GDN_ISA_AMX, f32 accumulation and state) on AMX tiles
 * at the amx level, or by AVX512-BF16 dot products at the avx512 level when the CPU has them and
 * the environment variable GDN_CPU_BF16_DOT=1 asks for them at context creation (they measure
 * slower than the f32 kernels, so they are not the default); else in f32 on converted rows by
 * the level's f32 kernels (the f32 bar). GDN_BF16_PRODUCTS_F32 for other backends and for a NULL
 * ctx. */
typedef enum gdn_bf16_products {
    GDN_BF16_PRODUCTS_F32 = 0,
    GDN_BF16_PRODUCTS_AVX512BF16 = 1,
    GDN_BF16_PRODUCTS_AMX = 2
} gdn_bf16_products;
GDN_API gdn_bf16_products gdn_context_cpu_bf16_products(const gdn_context *ctx);

/* Sets the cudaStream_t later ops are enqueued on (ignored by host backends). */
GDN_API gdn_status gdn_context_set_stream(gdn_context *ctx, void *stream);

/* Scratch memory. Of the ops, only gdn_delta_rule needs scratch; gdn_delta_rule_workspace_size
 * says how much.
 * By default the context owns its scratch and grows it when an op needs more (the only
 * allocation an op may make; call gdn_context_reserve_workspace() once up front and no op call
 * ever allocates). gdn_context_set_workspace() hands the context caller-owned memory instead
 * (device memory for CUDA); ops then fail with GDN_ERR_WORKSPACE, before writing anything, if it
 * is too small. Caller memory must be aligned to GDN_WORKSPACE_ALIGN bytes (GDN_ERR_VALUE
 * otherwise). set_workspace(ctx, NULL, 0) returns to context-owned scratch. */
#define GDN_WORKSPACE_ALIGN 64
GDN_API gdn_status gdn_context_reserve_workspace(gdn_context *ctx, size_t bytes);
GDN_API gdn_status gdn_context_set_workspace(gdn_context *ctx, void *workspace, size_t bytes);

/* The message of the last failed call on ctx; an op that succeeds clears it to "". With
 * ctx == NULL: the message of the last call on this thread that failed without a context
 * (gdn_context_create, or any function given a NULL ctx). Valid until the next call. */
GDN_API const char *gdn_last_error(const gdn_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Machine information (for tools and logs)
 * ------------------------------------------------------------------------------------------- */

#define GDN_CPU_AVX2 (1u << 0)       /* AVX2 + FMA, enabled by the OS */
#define GDN_CPU_AVX512F (1u << 1)    /* AVX-512 F/BW/VL/DQ, enabled by the OS */
#define GDN_CPU_AVX512BF16 (1u << 2) /* AVX512_BF16 dot products */
#define GDN_CPU_AMX_BF16 (1u << 3)   /* AMX tiles with bf16 (OS permission still needed) */
#define GDN_CPU_F16C (1u << 4)       /* f16 <-> f32 conversion instructions */

/* Bitmask of GDN_CPU_* features of this CPU, as cpuid and xgetbv report them. */
GDN_API unsigned gdn_cpu_features(void);

/* Number of CUDA devices (0 without the CUDA backend or without a driver). */
GDN_API int gdn_cuda_device_count(void);
/* Writes device i's name, compute capability, memory and the memory's peak bandwidth
 * ("NVIDIA H100 (sm_90, 79 GiB, 3352 GB/s peak)") into buf. Errors: GDN_ERR_NULL, GDN_ERR_VALUE
 * (bad i), GDN_ERR_CUDA, GDN_ERR_BACKEND (built without the CUDA backend). */
GDN_API gdn_status gdn_cuda_device_name(int device, char *buf, size_t buf_size);

/* ---------------------------------------------------------------------------------------------
 * Op: causal depthwise conv1d + activation (prefill)
 *
 *   y[c][t] = act( bias[c] + sum_{i<W} weight[c][i] * x[c][t - (W-1) + i] )
 *
 * Positions before a sequence's start read its conv state (the last W-1 inputs of its previous
 * segment, oldest first) when has_initial_state says so, else zeros. The new conv state (the
 * last W-1 inputs including the old state) is written back to the sequence's slot. Varlen
 * sequences never read across their boundaries.
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_activation {
    GDN_ACT_SILU = 0,  /* x * sigmoid(x) (every GDN model) */
    GDN_ACT_NONE = 1   /* identity */
} gdn_activation;

#define GDN_CONV_MAX_WIDTH 16

typedef struct gdn_conv1d_args {
    gdn_tensor x;                 /* [B, T, C] f32/bf16/f16, C contiguous */
    gdn_tensor weight;            /* [C, W] f32/bf16/f16, W contiguous, 2 <= W <= 16 */
    gdn_tensor bias;              /* [C], optional */
    gdn_tensor out;               /* [B, T, C] f32/bf16/f16; may be x itself (same data/strides) */
    gdn_tensor conv_state;        /* [S, C, W-1] pool, optional; dtype of x or f32; any strides,
                                     so a [S, W-1, C] buffer is passed as a transposed view */
    gdn_tensor state_slots;       /* [N] i32/i64, optional (needs conv_state); <0 = skip */
    gdn_tensor has_initial_state; /* [N] u8/i32, optional (needs conv_state); absent = all 1 */
    gdn_tensor cu_seqlens;        /* [N+1] i32/i64, optional (varlen: B must be 1) */
    gdn_activation activation;    /* GDN_ACT_SILU by default */
} gdn_conv1d_args;

/* All tensors absent, activation SiLU. */
GDN_API gdn_conv1d_args gdn_conv1d_default_args(void);

/* Runs the conv. Writes out (and conv_state slots of non-skipped sequences).
 * Errors: GDN_ERR_NULL, GDN_ERR_DTYPE, GDN_ERR_SHAPE, GDN_ERR_STRIDE, GDN_ERR_VALUE (bad
 * activation, slot >= S, duplicate slot, cu_seqlens not 0..T non-decreasing, out overlapping x
 * other than as the same view), GDN_ERR_UNSUPPORTED (backend lacks the op). */
GDN_API gdn_status gdn_conv1d(gdn_context *ctx, const gdn_conv1d_args *args);

/* ---------------------------------------------------------------------------------------------
 * Op: conv1d decode update (one new token per sequence)
 *
 * For each sequence n (slot s = state_slots[n], or n): out[n] = act(bias + weight . [state_s, x[n]])
 * and state_s shifts left by one and appends x[n]. Negative slots are skipped (out[n] untouched).
 * ------------------------------------------------------------------------------------------- */

typedef struct gdn_conv1d_update_args {
    gdn_tensor x;              /* [N, C] f32/bf16/f16, C contiguous */
    gdn_tensor weight;         /* [C, W], W contiguous */
    gdn_tensor bias;           /* [C], optional */
    gdn_tensor out;            /* [N, C]; may be x itself */
    gdn_tensor conv_state;     /* [S, C, W-1] pool, required */
    gdn_tensor state_slots;    /* [N] i32/i64, optional; <0 = skip */
    gdn_activation activation; /* GDN_ACT_SILU by default */
} gdn_conv1d_update_args;

GDN_API gdn_conv1d_update_args gdn_conv1d_update_default_args(void);

/* Errors as gdn_conv1d. */
GDN_API gdn_status gdn_conv1d_update(gdn_context *ctx, const gdn_conv1d_update_args *args);

/* ---------------------------------------------------------------------------------------------
 * Op: fused gating
 *
 *   g    = -exp(A_log[h]) * softplus(a + dt_bias[h])  (A_NEG_EXP form: A[h] * softplus(...))
 *   beta = sigmoid(b), or 2 * sigmoid(b) with allow_neg_eigval
 *   softplus(x) = log1p(exp(x)), and = x when x > softplus_threshold
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_a_form {
    GDN_A_LOG = 0,     /* A holds A_log (HF checkpoints): decay rate is exp(A_log) */
    GDN_A_NEG_EXP = 1  /* A holds -exp(A_log) (GGUF "ssm_a") */
} gdn_a_form;

#define GDN_SOFTPLUS_THRESHOLD 20.0f

typedef struct gdn_gating_params {
    gdn_tensor A;              /* [HV] f32/bf16/f16, required */
    gdn_tensor dt_bias;        /* [HV] f32/bf16/f16, optional (absent = 0) */
    gdn_a_form a_form;         /* GDN_A_LOG by default */
    float softplus_threshold;  /* > 0; GDN_SOFTPLUS_THRESHOLD by default */
    int32_t allow_neg_eigval;  /* nonzero: beta = 2*sigmoid(b), in (0, 2) */
} gdn_gating_params;

GDN_API gdn_gating_params gdn_gating_default_params(void);

/* a: [..., HV] (rank 1-4, last dim contiguous), f32/bf16/f16; b, g_out, beta_out: the same
 * shape. b and beta_out are optional together (both or neither). An output may be its own input
 * exactly (g_out == a, beta_out == b: same data, dtype and strides); an output that otherwise
 * overlaps an input is GDN_ERR_VALUE (row-interleaved views of one fused buffer, such as a and b
 * in [T, 2*HV], do not overlap).
 * Errors: GDN_ERR_NULL, GDN_ERR_DTYPE, GDN_ERR_SHAPE, GDN_ERR_STRIDE, GDN_ERR_VALUE,
 * GDN_ERR_UNSUPPORTED. */
GDN_API gdn_status gdn_gating(gdn_context *ctx, const gdn_tensor *a, const gdn_tensor *b,
                              const gdn_gating_params *params, const gdn_tensor *g_out,
                              const gdn_tensor *beta_out);

/* ---------------------------------------------------------------------------------------------
 * Op: L2 norm over the last dimension: out = x / sqrt(sum(x^2) + eps)
 * ------------------------------------------------------------------------------------------- */

#define GDN_L2NORM_EPS 1e-6f

/* x, out: [..., D] (rank 1-4, last dim contiguous), f32/bf16/f16, same shape; out may alias x
 * exactly. eps >= 0 (GDN_L2NORM_EPS is the GDN convention).
 * Errors: GDN_ERR_NULL, GDN_ERR_DTYPE, GDN_ERR_SHAPE, GDN_ERR_STRIDE, GDN_ERR_VALUE,
 * GDN_ERR_UNSUPPORTED. */
GDN_API gdn_status gdn_l2norm(gdn_context *ctx, const gdn_tensor *x, const gdn_tensor *out,
                              float eps);

/* ---------------------------------------------------------------------------------------------
 * Op: gated RMSNorm over the last dimension (per head over V)
 *
 *   norm_before_gate:  y = x / sqrt(mean(x^2) + eps) * w * silu(z)      (Qwen3-Next, default)
 *   else:              y = rmsnorm(x * silu(z)) * w
 *   w = weight, or 1 + weight with weight_offset
 * ------------------------------------------------------------------------------------------- */

typedef struct gdn_rmsnorm_args {
    gdn_tensor x;              /* [..., D] f32/bf16/f16, last dim contiguous */
    gdn_tensor z;              /* same shape as x, optional (absent: no gate) */
    gdn_tensor weight;         /* [D], optional (absent: w = 1, or 1 + 0 with weight_offset) */
    gdn_tensor out;            /* same shape as x; may alias x or z exactly */
    float eps;                 /* >= 0; 1e-6 by default */
    int32_t weight_offset;     /* nonzero: w = 1 + weight */
    int32_t norm_before_gate;  /* nonzero (default): normalise x, then multiply by silu(z) */
} gdn_rmsnorm_args;

GDN_API gdn_rmsnorm_args gdn_rmsnorm_default_args(void);

/* Errors: GDN_ERR_NULL, GDN_ERR_DTYPE, GDN_ERR_SHAPE, GDN_ERR_STRIDE, GDN_ERR_VALUE,
 * GDN_ERR_UNSUPPORTED. */
GDN_API gdn_status gdn_rmsnorm_gated(gdn_context *ctx, const gdn_rmsnorm_args *args);

/* ---------------------------------------------------------------------------------------------
 * Op: the gated delta rule (one head; S is K x V, f32):
 *
 *   S = exp(g_t) * S;  u = beta_t * (v_t - S^T k_t);  S = S + k_t u^T;  o_t = scale * S^T q_t
 *
 * One entry point for prefill (chunked WY form) and decode (recurrent form, T = 1 or a few
 * tokens), equal-length [B, T, ...] or varlen (cu_seqlens) batches.
 * ------------------------------------------------------------------------------------------- */

typedef enum gdn_state_layout {
    GDN_STATE_KV = 0,  /* pool [S, HV, K, V] (FLA, vLLM) */
    GDN_STATE_VK = 1   /* pool [S, HV, V, K] ("state_v_first", ggml and several engines) */
} gdn_state_layout;

typedef enum gdn_gva {
    GDN_GVA_BLOCK = 0, /* value head h reads key head h / (HV/H)  (FLA, HF repeat_interleave) */
    GDN_GVA_TILED = 1  /* value head h reads key head h % H       (ggml_repeat, GGUF) */
} gdn_gva;

typedef enum gdn_algorithm {
    GDN_ALGO_AUTO = 0,       /* the backend picks (chunked for long sequences) */
    GDN_ALGO_RECURRENT = 1,  /* token by token */
    GDN_ALGO_CHUNKED = 2     /* chunked WY form with an exact triangular inverse */
} gdn_algorithm;

/* How the tensor-core (CUDA) and bf16 (cpu: AMX, AVX512-BF16) products of bf16 / f16 inputs
 * round their operands. Accumulation and states are f32 in every mode; f32 inputs and the ref
 * backend (float64) give the same result in every mode, as do the kernels that compute in f32
 * (the recurrent ones, the cpu kernels without bf16 products). Bars are relative L2 errors
 * against float64 on the same inputs (docs/MATH.md section 8). */
typedef enum gdn_precision {
    GDN_PRECISION_AUTO = 0,  /* fast */
    GDN_PRECISION_FAST = 1,  /* every operand rounded once to the inputs' type (as FLA's kernels):
                                within 5e-3 on unit-norm keys, the cost of one rounding */
    GDN_PRECISION_HIGH = 2   /* operands that are not exact inputs split into hi + lo parts:
                                f32 outputs and states within 5e-5, about 2x the product work */
} gdn_precision;

typedef struct gdn_delta_rule_args {
    gdn_tensor q;                 /* [B, T, H, K] f32/bf16/f16, K contiguous */
    gdn_tensor k;                 /* [B, T, H, K] same dtype as q */
    gdn_tensor v;                 /* [B, T, HV, V] same dtype as q, HV % H == 0 */
    gdn_tensor g;                 /* [B, T, HV] f32/bf16/f16 log-decay (<= 0); optional
                                     (absent: no decay). With gate_in_kernel: the raw `a`. */
    gdn_tensor beta;              /* [B, T, HV] f32/bf16/f16 write strength. With
                                     gate_in_kernel: the raw `b` logits. */
    gdn_tensor out;               /* [B, T, HV, V] f32/bf16/f16, V contiguous; must not overlap
                                     q, k or v (GDN_ERR_VALUE) */
    gdn_tensor state;             /* pool [S, HV, K, V] (KV) or [S, HV, V, K] (VK), f32 or bf16;
                                     optional: absent = start from zeros, keep no final state */
    gdn_tensor state_slots;       /* [N] i32/i64, optional (needs state); <0 = skip sequence */
    gdn_tensor has_initial_state; /* [N] u8/i32, optional (needs state); absent = all 1 */
    gdn_tensor cu_seqlens;        /* [N+1] i32/i64, optional: varlen batch, B must be 1 */
    float scale;                  /* output scale; 0 = 1/sqrt(K) */
    gdn_state_layout state_layout;/* GDN_STATE_KV by default */
    gdn_gva gva;                  /* GDN_GVA_BLOCK by default */
    gdn_algorithm algorithm;      /* GDN_ALGO_AUTO by default */
    int32_t chunk_size;           /* 16, 32, 64 or 128; 0 = the backend's choice: 64 on ref and
                                     cuda (whose chunked form always runs 64: same result, its
                                     tiles are sized for it), 32 on cpu (64 with AMX) */
    int32_t qk_l2norm;            /* nonzero: l2-normalise q and k rows in the kernel (eps 1e-6) */
    int32_t gate_in_kernel;       /* nonzero: g and beta hold raw a and b; gating is applied */
    gdn_gating_params gating;     /* used with gate_in_kernel */
    gdn_precision precision;      /* GDN_PRECISION_AUTO (fast) by default */
} gdn_delta_rule_args;

/* All tensors absent, scale 0 (1/sqrt(K)), KV, block, auto, chunk_size 0 (the backend's choice),
 * no l2norm, no gating, precision auto (fast). */
GDN_API gdn_delta_rule_args gdn_delta_rule_default_args(void);

/* Scratch bytes gdn_delta_rule() needs for these arguments on ctx's backend (validates them
 * first; errors as gdn_delta_rule). */
GDN_API gdn_status gdn_delta_rule_workspace_size(gdn_context *ctx,
                                                 const gdn_delta_rule_args *args,
                                                 size_t *bytes);

/* Runs the recurrence. Writes out (rows of non-skipped sequences) and the pool slots of
 * non-skipped sequences. Errors: GDN_ERR_NULL, GDN_ERR_DTYPE, GDN_ERR_SHAPE, GDN_ERR_STRIDE,
 * GDN_ERR_VALUE (chunk size, enums, scale not finite, K or V > GDN_MAX_HEAD_DIM, slot >= S,
 * duplicate slot, bad cu_seqlens, misaligned data, overlapping tensors), GDN_ERR_WORKSPACE,
 * GDN_ERR_NO_MEMORY, GDN_ERR_UNSUPPORTED, GDN_ERR_BACKEND, GDN_ERR_CUDA, GDN_ERR_BUSY. On cuda the chunked form needs device scratch (query it with
 * gdn_delta_rule_workspace_size; an owned workspace grows on first use, so reserve it before
 * capturing a CUDA graph), K and V <= 128, and trusts device-side cu_seqlens to be valid. */
GDN_API gdn_status gdn_delta_rule(gdn_context *ctx, const gdn_delta_rule_args *args);

#ifdef __cplusplus
}
#endif

#endif /* GDN_H */
