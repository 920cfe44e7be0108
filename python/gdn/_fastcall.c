/* gdn._fast: the optional native fast path of the Python binding's per-call marshalling.
 *
 * The binding (gdn/_lib.py, ops.py, conv.py) turns NumPy arrays and torch tensors into
 * gdn_tensor descriptors, checks what it promises to check, allocates the outputs and calls
 * libgdn through ctypes. For the common calls, the decode ones above all, that Python work costs
 * more than the kernel; this module does the same work in C for
 *     fused_recurrent_gated_delta_rule / chunk_gated_delta_rule   (delta_rule)
 *     causal_conv1d_update                                         (conv1d_update)
 * and hands everything it does not cover back to the Python path.
 *
 * The contract with the Python path (python/tests/test_fastcall.py holds it to it): for any
 * arguments, a fast call either
 *   - does exactly what the Python path does (same outputs, same writes, same return value), or
 *   - returns NotImplemented before anything is written or raised, and the caller runs the
 *     Python path, which then raises its own errors or makes its copies; or
 *   - raises libgdn's error for the call, through the binding's own check(), as the Python
 *     path would with the identical descriptors.
 * So it takes only arguments libgdn can read in place that the Python path would pass through
 * unchanged: every copy, conversion, rank or dtype refusal, wrong type, empty tensor, device
 * mismatch, read-only or repeating output, FLA-style initial_state, ... goes back to Python.
 *
 * It links neither libgdn nor NumPy nor torch: libgdn's entry points arrive as addresses taken
 * from the library the binding loaded (setup()), NumPy arrays are read through the buffer
 * protocol, torch tensors through their Python attributes (dtype by identity with the torch
 * dtype objects given to setup()). Only include/gdn.h's struct layouts are compiled in;
 * struct_sizes() lets the binding compare them with the loaded library's before using them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "gdn.h"

typedef gdn_delta_rule_args (*delta_rule_defaults_fn)(void);
typedef gdn_gating_params (*gating_defaults_fn)(void);
typedef gdn_conv1d_update_args (*conv_update_defaults_fn)(void);
/* gdn_delta_rule, gdn_conv1d_update: an op taking (ctx, its argument struct), by address */
typedef gdn_status (*any_call_fn)(gdn_context *, const void *);

/* The calling convention of delta_rule() / conv1d_update() / setup() with the binding
 * (_lib.FAST_BINDING_VERSION): bumped with every change of their arguments, so that a stale
 * build is passed over instead of called wrongly. */
#define BINDING_VERSION 3

#define MAX_TORCH_DTYPES 16

/* Set once by setup(); read-only afterwards. Single-phase init, one interpreter. */
static struct {
    int ready;
    any_call_fn delta_rule;
    delta_rule_defaults_fn delta_rule_defaults;
    gating_defaults_fn gating_defaults;
    any_call_fn conv_update;
    conv_update_defaults_fn conv_update_defaults;
    PyObject *ndarray;  /* numpy.ndarray */
    PyObject *tensor;   /* torch.Tensor, or NULL without torch */
    PyObject *torch_dtypes[MAX_TORCH_DTYPES];
    int torch_codes[MAX_TORCH_DTYPES];
    int n_torch_dtypes;
    PyObject *np_zeros, *np_empty;  /* numpy.zeros, numpy.empty */
    PyObject *context;  /* _lib.context(backend, device) -> ctypes.c_void_p */
    PyObject *check;    /* _lib.check(status, ctx): raises the binding's error */
    PyObject *cpu;      /* "cpu": the device key of host memory */
    PyObject *cuda;     /* "cuda": ("cuda", index) is a CUDA device's key */
    PyObject *new_axis; /* (Ellipsis, None) */
} G;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* kernel_clock(): the time the fast path's calls spend inside libgdn, for benchmarks. Written
 * and read with the GIL held. */
static struct {
    int on;
    long long calls;
    double seconds;
} kclock;

/* One libgdn call (an entry point taking (ctx, args), as time_calls takes them) with the GIL
 * released; its time inside libgdn goes to kclock when that is on (updated with the GIL held). */
static gdn_status call_released(any_call_fn fn, gdn_context *ctx, const void *args)
{
    gdn_status status;
    const int timed = kclock.on;
    double t0 = 0.0, t1 = 0.0;
    Py_BEGIN_ALLOW_THREADS
    if (timed)
        t0 = now_seconds();
    status = fn(ctx, args);
    if (timed)
        t1 = now_seconds();
    Py_END_ALLOW_THREADS
    if (timed) {
        kclock.seconds += t1 - t0;
        kclock.calls += 1;
    }
    return status;
}

/* interned attribute and method names */
static PyObject *s_dtype, *s_shape, *s_stride, *s_data_ptr, *s_is_cuda, *s_get_device, *s_value,
    *s_new_zeros, *s_new_empty;

#include "_fastcall_args.h" /* describing arguments: NumPy arrays, torch tensors */

/* ---- delta rule ----------------------------------------------------------------------------
 * delta_rule(backend, q, k, v, g, beta, initial_state, state_pool, state_indices,
 *            has_initial_state, cu_seqlens, A_log, dt_bias, scale, state_v_first, gva,
 *            algorithm, chunk_size, use_qk_l2norm_in_kernel, use_gate_in_kernel,
 *            use_beta_sigmoid_in_kernel, allow_neg_eigval, precision, output_final_state,
 *            out_dtype_of_q, out)
 * gva, algorithm and precision are the enum values (ops._delta_rule maps the strings). Returns
 * (o, state_pool or None) as ops._delta_rule does, or NotImplemented. */

enum { Q, K, V, G_, BETA, POOL, SLOTS, FLAGS, CU, A_LOG, DT_BIAS, OUT, N_DELTA };

static PyObject *delta_rule(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 26) {
        PyErr_Format(PyExc_TypeError, "delta_rule() takes 26 arguments (%zd given)", nargs);
        return NULL;
    }
    if (not_ready())
        return NULL;
    PyObject *backend = args[0];
    PyObject *q = args[1], *v = args[3], *initial_state = args[6], *pool_obj = args[7];
    PyObject *result = NULL, *o = NULL, *ctx_obj = NULL, *shape = NULL;
    arg a[N_DELTA];
    int described = 0;

    /* what the Python path does around the call, not here: FLA's initial_state (a private
     * copy), a final state without a pool (a new one), beta None (ones), one of the two
     * gatings in Python */
    const int want_final = truth(args[23]);
    const int gate = truth(args[19]), beta_sigmoid = truth(args[20]);
    const int v_first = truth(args[14]), l2 = truth(args[18]), neg = truth(args[21]);
    const int out_from_q = truth(args[24]);
    if (initial_state != Py_None || args[5] == Py_None || want_final < 0 ||
        (want_final && pool_obj == Py_None) || gate < 0 || beta_sigmoid < 0 ||
        gate != beta_sigmoid || v_first < 0 || l2 < 0 || neg < 0 || out_from_q < 0)
        goto fallback;

    /* out: the caller's array, or None (a new one below) */
    PyObject *const objs[N_DELTA] = {q,        args[2],  v,        args[4],  args[5], pool_obj,
                                     args[8],  args[9],  args[10], args[11], args[12], args[25]};
    for (; described < N_DELTA; ++described)
        if (!describe(objs[described], &a[described]))
            goto fallback;
    /* q, k, v: one framework, one dtype, rank 4 (the Python path unpacks q.shape and reads
     * v.shape[2:]); anything else is converted or refused there */
    if (!present(&a[Q]) || !present(&a[K]) || !present(&a[V]) || a[Q].kind != a[K].kind ||
        a[Q].kind != a[V].kind || a[Q].t.dtype != a[K].t.dtype || a[Q].t.dtype != a[V].t.dtype ||
        a[Q].t.ndim != 4 || a[V].t.ndim != 4 || !present(&a[BETA]))
        goto fallback;
    if (a[Q].t.dtype != GDN_F32 && a[Q].t.dtype != GDN_BF16 && a[Q].t.dtype != GDN_F16)
        goto fallback; /* the output would take an index dtype: libgdn refuses; leave it */
    for (int i = Q; i <= BETA; ++i)
        if (!last_contiguous(&a[i]))
            goto fallback;
    if (!writable(&a[POOL]) || !index_ok(&a[SLOTS], &a[Q]) || !index_ok(&a[FLAGS], &a[Q]) ||
        !index_ok(&a[CU], &a[Q]))
        goto fallback;
    if (present(&a[OUT]) && (!writable(&a[OUT]) || a[OUT].kind != a[V].kind ||
                             a[OUT].t.ndim != 4 || !same_shape(&a[OUT], &a[V])))
        goto fallback; /* the Python path names what is wrong */
    const arg *const placed[] = {&a[Q], &a[K], &a[V], &a[G_], &a[BETA], &a[POOL], &a[A_LOG],
                                 &a[DT_BIAS], &a[OUT]};
    int device = DEVICE_HOST;
    if (!one_device(placed, (int)(sizeof placed / sizeof *placed), &device))
        goto fallback;

    /* the options, converted as the Python path converts them */
    double scale = 0.0;
    if (args[13] != Py_None) {
        scale = PyFloat_AsDouble(args[13]);
        if (scale == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            goto fallback;
        }
    }
    int32_t gva, algorithm, precision, chunk_size = 0;
    if (!int32_of(args[15], &gva) || !int32_of(args[16], &algorithm) ||
        !int32_of(args[22], &precision))
        goto fallback;
    const int chunk_given = truth(args[17]);
    if (chunk_given < 0 || (chunk_given && !int32_of(args[17], &chunk_size)))
        goto fallback;

    gdn_context *ctx = NULL;
    if (!(ctx_obj = context_for(backend, device, &ctx)))
        goto fallback;
    if (present(&a[OUT])) { /* the rows of skipped sequences keep what they held */
        o = args[25];
        Py_INCREF(o);
    } else { /* rows of padding sequences (slot -1) are skipped by libgdn: they must read as
              * zeros */
        if (!(shape = PyObject_GetAttr(v, s_shape)) ||
            !(o = new_output(&a[V], v, out_from_q ? q : v, shape, present(&a[SLOTS]))))
            goto fallback;
        if (!describe(o, &a[OUT]))
            goto fallback;
    }

    gdn_delta_rule_args d = G.delta_rule_defaults();
    d.q = a[Q].t;
    d.k = a[K].t;
    d.v = a[V].t;
    d.g = a[G_].t;
    d.beta = a[BETA].t;
    d.out = a[OUT].t;
    d.state = a[POOL].t;
    d.state_slots = a[SLOTS].t;
    d.has_initial_state = a[FLAGS].t;
    d.cu_seqlens = a[CU].t;
    d.scale = (float)scale;
    d.state_layout = v_first ? GDN_STATE_VK : GDN_STATE_KV;
    d.gva = (gdn_gva)gva;
    d.algorithm = (gdn_algorithm)algorithm;
    d.precision = (gdn_precision)precision;
    d.chunk_size = chunk_size;
    d.qk_l2norm = l2;
    d.gate_in_kernel = gate;
    if (gate) {
        gdn_gating_params p = G.gating_defaults();
        p.A = a[A_LOG].t;
        p.dt_bias = a[DT_BIAS].t;
        p.a_form = GDN_A_LOG;
        p.softplus_threshold = GDN_SOFTPLUS_THRESHOLD;
        p.allow_neg_eigval = neg;
        d.gating = p;
    }
    const gdn_status status = call_released(G.delta_rule, ctx, &d);
    release(a, described);
    described = 0;
    if (status != GDN_OK) {
        raise_status(status, ctx_obj);
    } else {
        result = PyTuple_Pack(2, o, want_final ? pool_obj : Py_None);
    }
    Py_XDECREF(o);
    Py_XDECREF(shape);
    Py_XDECREF(ctx_obj);
    return result;

fallback:
    release(a, described);
    Py_XDECREF(o);
    Py_XDECREF(shape);
    Py_XDECREF(ctx_obj);
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
}

/* ---- conv1d update -------------------------------------------------------------------------
 * conv1d_update(backend, x, conv_state, weight, bias, activation, cache_seqlens,
 *               conv_state_indices, out)
 * activation is the gdn_activation value (None: not one the binding knows). Returns out as
 * causal_conv1d_update does, or NotImplemented. */

enum { CX, CSTATE, CWEIGHT, CBIAS, CSLOTS, COUT, N_CONV };

static PyObject *conv1d_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "conv1d_update() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    if (not_ready())
        return NULL;
    PyObject *backend = args[0], *x = args[1];
    PyObject *result = NULL, *out = NULL, *ctx_obj = NULL, *shape = NULL;
    arg a[N_CONV];
    int described = 0;
    int32_t activation = 0;
    if (args[5] == Py_None || args[6] != Py_None || !int32_of(args[5], &activation))
        goto fallback;
    /* out: the caller's array, or None (a new one below) */
    PyObject *const objs[N_CONV] = {x, args[2], args[3], args[4], args[7], args[8]};
    for (; described < N_CONV; ++described)
        if (!describe(objs[described], &a[described]))
            goto fallback;

    /* weight [C, W] or [C, 1, W] (taken as its [C, W] view), W contiguous, 2 <= W <= 16 */
    arg *w = &a[CWEIGHT];
    if (!present(w))
        goto fallback;
    if (w->t.ndim == 3) {
        if (w->t.shape[1] != 1)
            goto fallback;
        w->t.shape[1] = w->t.shape[2];
        w->t.stride[1] = w->t.stride[2];
        w->t.shape[2] = w->t.stride[2] = 0;
        w->t.ndim = 2;
    }
    if (w->t.ndim != 2 || !last_contiguous(w) || w->t.shape[1] < 2 ||
        w->t.shape[1] > GDN_CONV_MAX_WIDTH)
        goto fallback;
    /* the state keeps exactly W - 1 columns (a wider one has older columns to shift, which
     * the Python path does) and can be written in place */
    const arg *st = &a[CSTATE];
    if (!present(st) || st->t.ndim != 3 || st->t.shape[2] != w->t.shape[1] - 1 || !writable(st))
        goto fallback;
    /* x [B, C], or [B, C, 1] (its [B, C] view); [B, C, L > 1] is a prefill: Python's */
    arg *xa = &a[CX];
    if (!present(xa))
        goto fallback;
    const int x3 = xa->t.ndim == 3;
    if (x3) {
        if (xa->t.shape[2] != 1)
            goto fallback;
        xa->t.shape[2] = xa->t.stride[2] = 0;
        xa->t.ndim = 2;
    }
    if (xa->t.ndim != 2 || !last_contiguous(xa) || !index_ok(&a[CSLOTS], xa))
        goto fallback;
    /* out shaped like x ([B, C, 1]: its [B, C] view), writable, of x's framework */
    arg *oa = &a[COUT];
    if (present(oa)) {
        if ((oa->t.ndim == 3) != x3)
            goto fallback; /* the Python path names what is wrong (here and below) */
        if (x3) {
            if (oa->t.shape[2] != 1)
                goto fallback;
            oa->t.shape[2] = oa->t.stride[2] = 0;
            oa->t.ndim = 2;
        }
        if (!same_shape(oa, xa) || !writable(oa) || oa->kind != xa->kind)
            goto fallback;
    }
    const arg *const placed[] = {&a[CX], &a[CSTATE], &a[CWEIGHT], &a[CBIAS], &a[COUT]};
    int device = DEVICE_HOST;
    if (!one_device(placed, 5, &device))
        goto fallback;

    gdn_context *ctx = NULL;
    if (!(ctx_obj = context_for(backend, device, &ctx)))
        goto fallback;
    const int own_out = present(oa); /* the rows of skipped sequences keep what they held */
    if (own_out) {
        out = args[8];
        Py_INCREF(out);
    } else { /* rows of padding sequences (slot -1) are skipped by libgdn: they must read as
              * zeros */
        shape = Py_BuildValue("(LL)", (long long)xa->t.shape[0], (long long)xa->t.shape[1]);
        if (shape == NULL || !(out = new_output(xa, x, x, shape, present(&a[CSLOTS]))))
            goto fallback;
        if (!describe(out, &a[COUT]))
            goto fallback;
    }

    gdn_conv1d_update_args c = G.conv_update_defaults();
    c.x = a[CX].t;
    c.weight = a[CWEIGHT].t;
    c.bias = a[CBIAS].t;
    c.out = a[COUT].t;
    c.conv_state = a[CSTATE].t;
    c.state_slots = a[CSLOTS].t;
    c.activation = (gdn_activation)activation;
    const gdn_status status = call_released(G.conv_update, ctx, &c);
    release(a, described);
    described = 0;
    if (status != GDN_OK)
        raise_status(status, ctx_obj);
    else if (x3 && !own_out)
        result = PyObject_GetItem(out, G.new_axis); /* out[..., None] */
    else {
        result = out;
        Py_INCREF(result);
    }
    Py_XDECREF(out);
    Py_XDECREF(shape);
    Py_XDECREF(ctx_obj);
    return result;

fallback:
    release(a, described);
    Py_XDECREF(out);
    Py_XDECREF(shape);
    Py_XDECREF(ctx_obj);
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
}

/* ---- timing, struct sizes, setup ----------------------------------------------------------- */

PyDoc_STRVAR(time_calls_doc,
"time_calls(function, ctx, args, n) -> (seconds, status)\n\n"
"Calls the libgdn entry point at address `function` (gdn_delta_rule, gdn_conv1d_update, ...:\n"
"gdn_status f(gdn_context *, const <args> *)) n times on the context and the prepared\n"
"argument struct at addresses ctx and args, with the GIL released, and returns the wall time\n"
"of the n calls (CLOCK_MONOTONIC) and the last status: the kernel's own time, with no Python\n"
"in it (on CUDA the calls only enqueue work; time them with CUDA events).");

static PyObject *time_calls(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *fn_obj, *ctx_obj, *args_obj;
    long long n;
    if (!PyArg_ParseTuple(args, "OOOL:time_calls", &fn_obj, &ctx_obj, &args_obj, &n))
        return NULL;
    any_call_fn fn = (any_call_fn)(uintptr_t)PyLong_AsVoidPtr(fn_obj);
    gdn_context *ctx = ctx_obj == Py_None ? NULL : (gdn_context *)PyLong_AsVoidPtr(ctx_obj);
    const void *call_args = PyLong_AsVoidPtr(args_obj);
    if (PyErr_Occurred())
        return NULL;
    if (fn == NULL || call_args == NULL || n < 1) {
        PyErr_SetString(PyExc_ValueError, "time_calls: function and args must be addresses, "
                                          "n >= 1");
        return NULL;
    }
    gdn_status status = GDN_OK;
    double t0, t1;
    Py_BEGIN_ALLOW_THREADS
    t0 = now_seconds();
    for (long long i = 0; i < n; ++i)
        status = fn(ctx, call_args);
    t1 = now_seconds();
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(di)", t1 - t0, (int)status);
}

PyDoc_STRVAR(kernel_clock_doc,
"kernel_clock(on) -> (calls, seconds)\n\n"
"Switches the kernel clock on or off and returns what it counted since the last call: how many\n"
"libgdn calls the fast path made while it was on and their wall time inside libgdn\n"
"(CLOCK_MONOTONIC, GIL released). For benchmarks: host time = a call's wall time less this.");

static PyObject *kernel_clock(PyObject *self, PyObject *on)
{
    (void)self;
    const int t = PyObject_IsTrue(on);
    if (t < 0)
        return NULL;
    PyObject *r = Py_BuildValue("(Ld)", kclock.calls, kclock.seconds);
    if (r != NULL) {
        kclock.on = t;
        kclock.calls = 0;
        kclock.seconds = 0.0;
    }
    return r;
}

PyDoc_STRVAR(struct_sizes_doc,
"struct_sizes() -> {C struct name: sizeof} for the gdn.h structs this module was compiled\n"
"with; the binding compares them with the loaded libgdn's gdn_struct_size().");

static PyObject *struct_sizes(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:n,s:n,s:n,s:n}", "gdn_tensor", (Py_ssize_t)sizeof(gdn_tensor),
                         "gdn_gating_params", (Py_ssize_t)sizeof(gdn_gating_params),
                         "gdn_delta_rule_args", (Py_ssize_t)sizeof(gdn_delta_rule_args),
                         "gdn_conv1d_update_args", (Py_ssize_t)sizeof(gdn_conv1d_update_args));
}

static void *address_of(PyObject *x, const char *name)
{
    void *p = PyLong_AsVoidPtr(x);
    if (p == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "setup: %s is NULL", name);
    return p;
}

PyDoc_STRVAR(setup_doc,
"setup(*, delta_rule, delta_rule_default_args, gating_default_params, conv1d_update,\n"
"      conv1d_update_default_args, ndarray, zeros, empty, context, check, tensor=None,\n"
"      torch_dtypes=()) -> None\n\n"
"Binds the module to the binding: the addresses of libgdn's entry points (from the library\n"
"the binding loaded), numpy.ndarray / numpy.zeros / numpy.empty, the binding's context() and\n"
"check(), and with torch, torch.Tensor and ((torch dtype, gdn_dtype value), ...). A later\n"
"call replaces what an earlier one set.");

static PyObject *setup(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *names[] = {"delta_rule", "delta_rule_default_args", "gating_default_params",
                            "conv1d_update", "conv1d_update_default_args", "ndarray", "zeros",
                            "empty", "context", "check", "tensor", "torch_dtypes", NULL};
    PyObject *fdr = NULL, *fdrd = NULL, *fgd = NULL, *fcu = NULL, *fcud = NULL, *ndarray = NULL,
             *zeros = NULL, *empty = NULL, *context = NULL, *check = NULL;
    PyObject *tensor = Py_None, *torch_dtypes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOOOOOO:setup", names, &fdr, &fdrd,
                                     &fgd, &fcu, &fcud, &ndarray, &zeros, &empty, &context,
                                     &check, &tensor, &torch_dtypes))
        return NULL;
    void *p[5];
    PyObject *const fns[5] = {fdr, fdrd, fgd, fcu, fcud};
    for (int i = 0; i < 5; ++i) {
        if (fns[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "setup: %s is required", names[i]);
            return NULL;
        }
        if (!(p[i] = address_of(fns[i], names[i])))
            return NULL;
    }
    PyObject *const objs[5] = {ndarray, zeros, empty, context, check};
    for (int i = 0; i < 5; ++i) {
        if (objs[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "setup: %s is required", names[5 + i]);
            return NULL;
        }
    }
    if (!PyType_Check(ndarray) || (tensor != Py_None && !PyType_Check(tensor))) {
        PyErr_SetString(PyExc_TypeError, "setup: ndarray and tensor must be types");
        return NULL;
    }
    /* a second setup() (a reloaded binding) replaces the first */
    G.ready = 0;
    for (int i = 0; i < G.n_torch_dtypes; ++i)
        Py_CLEAR(G.torch_dtypes[i]);
    G.n_torch_dtypes = 0;
    Py_CLEAR(G.ndarray);
    Py_CLEAR(G.np_zeros);
    Py_CLEAR(G.np_empty);
    Py_CLEAR(G.context);
    Py_CLEAR(G.check);
    Py_CLEAR(G.tensor);
    int n = 0;
    if (torch_dtypes != NULL && torch_dtypes != Py_None) {
        PyObject *seq = PySequence_Tuple(torch_dtypes);
        if (seq == NULL)
            return NULL;
        const Py_ssize_t count = PyTuple_Size(seq);
        if (count > MAX_TORCH_DTYPES) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "setup: too many torch dtypes");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < count; ++i) {
            PyObject *dtype;
            int code;
            if (!PyArg_ParseTuple(PyTuple_GetItem(seq, i), "Oi", &dtype, &code)) {
                Py_DECREF(seq);
                return NULL;
            }
            Py_INCREF(dtype);
            G.torch_dtypes[n] = dtype;
            G.torch_codes[n++] = code;
            G.n_torch_dtypes = n;
        }
        Py_DECREF(seq);
    }
    G.n_torch_dtypes = n;
    G.delta_rule = (any_call_fn)(uintptr_t)p[0];
    G.delta_rule_defaults = (delta_rule_defaults_fn)(uintptr_t)p[1];
    G.gating_defaults = (gating_defaults_fn)(uintptr_t)p[2];
    G.conv_update = (any_call_fn)(uintptr_t)p[3];
    G.conv_update_defaults = (conv_update_defaults_fn)(uintptr_t)p[4];
    PyObject **const slots[5] = {&G.ndarray, &G.np_zeros, &G.np_empty, &G.context, &G.check};
    for (int i = 0; i < 5; ++i) {
        Py_INCREF(objs[i]);
        *slots[i] = objs[i];
    }
    if (tensor != Py_None) {
        Py_INCREF(tensor);
        G.tensor = tensor;
    }
    G.ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"delta_rule", (PyCFunction)(void (*)(void))delta_rule, METH_FASTCALL,
     "The fast path of ops._delta_rule (see the module source)."},
    {"conv1d_update", (PyCFunction)(void (*)(void))conv1d_update, METH_FASTCALL,
     "The fast path of conv._conv1d_update (see the module source)."},
    {"time_calls", time_calls, METH_VARARGS, time_calls_doc},
    {"kernel_clock", kernel_clock, METH_O, kernel_clock_doc},
    {"struct_sizes", struct_sizes, METH_NOARGS, struct_sizes_doc},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_VARARGS | METH_KEYWORDS, setup_doc},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gdn._fast",
    "Native fast path of the gdn binding's per-call marshalling (optional; see _fastcall.c).",
    -1, methods, NULL, NULL, NULL, NULL};

static int intern(PyObject **dst, const char *s)
{
    *dst = PyUnicode_InternFromString(s);
    return *dst != NULL;
}

PyMODINIT_FUNC PyInit__fast(void)
{
    if (!intern(&s_dtype, "dtype") || !intern(&s_shape, "shape") ||
        !intern(&s_stride, "stride") || !intern(&s_data_ptr, "data_ptr") ||
        !intern(&s_is_cuda, "is_cuda") || !intern(&s_get_device, "get_device") ||
        !intern(&s_value, "value") ||
        !intern(&s_new_zeros, "new_zeros") || !intern(&s_new_empty, "new_empty") ||
        !intern(&G.cpu, "cpu") || !intern(&G.cuda, "cuda"))
        return NULL;
    if (!(G.new_axis = PyTuple_Pack(2, Py_Ellipsis, Py_None)))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "BINDING_VERSION", BINDING_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
