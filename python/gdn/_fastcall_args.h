/* gdn._fast's argument handling, included once by _fastcall.c after its shared state (the
 * entry points and interned names that setup() fills): how one NumPy array or torch tensor
 * becomes a gdn_tensor, the checks the Python path makes on it, the context and output
 * allocation. Static functions of that one translation unit, kept apart so that each file
 * has one job (the ops themselves are in _fastcall.c). */
#ifndef GDN_FASTCALL_ARGS_H
#define GDN_FASTCALL_ARGS_H

/* ---- describing one argument ------------------------------------------------------------- */

enum { KIND_NONE = 0, KIND_NUMPY = 1, KIND_TORCH = 2 };
#define DEVICE_HOST (-1)

typedef struct {
    int kind;         /* KIND_* */
    int device;       /* DEVICE_HOST, or the CUDA device index */
    int readonly;     /* a NumPy array that is not writeable */
    int has_view;     /* view holds a buffer to release */
    Py_buffer view;
    gdn_tensor t;
} arg;

static void release(arg *args, int n)
{
    for (int i = 0; i < n; ++i) {
        if (args[i].has_view) {
            PyBuffer_Release(&args[i].view);
            args[i].has_view = 0;
        }
    }
}

/* The gdn_dtype of a native NumPy buffer format (the Python path's _NP_DTYPES), or -1. */
static int numpy_code(const char *format, Py_ssize_t itemsize)
{
    if (format == NULL || format[0] == '\0' || format[1] != '\0')
        return -1; /* byte-order prefixes, structured dtypes: the Python path decides */
    switch (format[0]) {
    case 'f': return itemsize == 4 ? GDN_F32 : -1;
    case 'e': return itemsize == 2 ? GDN_F16 : -1;
    case 'i': case 'l': case 'q':
        return itemsize == 4 ? GDN_I32 : itemsize == 8 ? GDN_I64 : -1;
    case 'B': case '?': return itemsize == 1 ? GDN_U8 : -1;
    default: return -1;
    }
}

static int numpy_arg(PyObject *x, arg *a)
{
    if (PyObject_GetBuffer(x, &a->view, PyBUF_RECORDS_RO) < 0)
        return 0;
    a->has_view = 1;
    const int ndim = a->view.ndim;
    const Py_ssize_t size = a->view.itemsize;
    if (ndim < 1 || ndim > GDN_MAX_DIMS || size <= 0 || a->view.shape == NULL ||
        a->view.strides == NULL)
        return 0;
    const int code = numpy_code(a->view.format, size);
    if (code < 0 || (uintptr_t)a->view.buf % (uintptr_t)size)
        return 0; /* a dtype to refuse, or unaligned data to copy: the Python path's */
    int64_t numel = 1;
    for (int d = 0; d < ndim; ++d) {
        const Py_ssize_t n = a->view.shape[d], s = a->view.strides[d];
        if (s < 0 || s % size)
            return 0; /* negative or partial-element strides: the Python path copies */
        a->t.shape[d] = n;
        a->t.stride[d] = s / size;
        numel *= n;
    }
    if (numel == 0)
        return 0; /* empty arrays get a private address there */
    a->kind = KIND_NUMPY;
    a->device = DEVICE_HOST;
    a->readonly = a->view.readonly != 0;
    a->t.data = a->view.buf;
    a->t.dtype = (gdn_dtype)code;
    a->t.ndim = ndim;
    return 1;
}

/* Fills dst[0..n) from a tuple of Python ints (torch.Size, stride()); 0 on anything else. */
static int int64s(PyObject *tuple, int64_t *dst, int n)
{
    if (!PyTuple_Check(tuple) || PyTuple_Size(tuple) != n)
        return 0;
    for (int d = 0; d < n; ++d) {
        const long long v = PyLong_AsLongLong(PyTuple_GetItem(tuple, d));
        if (v == -1 && PyErr_Occurred())
            return 0;
        dst[d] = v;
    }
    return 1;
}

static int torch_arg(PyObject *x, arg *a)
{
    int ok = 0, code = -1;
    PyObject *dtype = NULL, *shape = NULL, *stride = NULL, *ptr = NULL, *cuda = NULL,
             *index = NULL;
    if (!(dtype = PyObject_GetAttr(x, s_dtype)))
        goto done;
    for (int i = 0; i < G.n_torch_dtypes; ++i) {
        if (dtype == G.torch_dtypes[i]) {
            code = G.torch_codes[i];
            break;
        }
    }
    if (code < 0 || !(shape = PyObject_GetAttr(x, s_shape)) || !PyTuple_Check(shape))
        goto done;
    const Py_ssize_t ndim = PyTuple_Size(shape);
    if (ndim < 1 || ndim > GDN_MAX_DIMS || !int64s(shape, a->t.shape, (int)ndim))
        goto done;
    if (!(stride = PyObject_CallMethodObjArgs(x, s_stride, NULL)) ||
        !int64s(stride, a->t.stride, (int)ndim))
        goto done;
    int64_t numel = 1;
    for (int d = 0; d < ndim; ++d) {
        if (a->t.stride[d] < 0)
            goto done;
        numel *= a->t.shape[d];
    }
    if (numel == 0 || !(ptr = PyObject_CallMethodObjArgs(x, s_data_ptr, NULL)))
        goto done;
    void *data = PyLong_AsVoidPtr(ptr);
    if (data == NULL && PyErr_Occurred())
        goto done;
    if (!(cuda = PyObject_GetAttr(x, s_is_cuda)))
        goto done;
    const int is_cuda = PyObject_IsTrue(cuda);
    if (is_cuda < 0)
        goto done;
    a->device = DEVICE_HOST;
    if (is_cuda) { /* x.device.index, without making a torch.device */
        if (!(index = PyObject_CallMethodObjArgs(x, s_get_device, NULL)))
            goto done;
        const long i = PyLong_AsLong(index);
        if (i < 0 || i > INT32_MAX)
            goto done;
        a->device = (int)i;
    }
    a->kind = KIND_TORCH;
    a->readonly = 0;
    a->t.data = data;
    a->t.dtype = (gdn_dtype)code;
    a->t.ndim = (int32_t)ndim;
    ok = 1;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(ptr);
    Py_XDECREF(cuda);
    Py_XDECREF(index);
    return ok;
}

/* Describes x (None: absent) as the Python path's describe() would, when that path would hand
 * it to libgdn unchanged. 1: done; 0: the Python path's business (no Python error left set). */
static int describe(PyObject *x, arg *a)
{
    memset(a, 0, sizeof *a);
    a->device = DEVICE_HOST;
    if (x == Py_None)
        return 1;
    int ok = 0;
    if (PyObject_TypeCheck(x, (PyTypeObject *)G.ndarray))
        ok = numpy_arg(x, a);
    else if (G.tensor != NULL && PyObject_TypeCheck(x, (PyTypeObject *)G.tensor))
        ok = torch_arg(x, a);
    if (!ok) {
        PyErr_Clear();
        if (a->has_view) {
            PyBuffer_Release(&a->view);
            a->has_view = 0;
        }
        a->kind = KIND_NONE;
    }
    return ok;
}

static int present(const arg *a) { return a->kind != KIND_NONE; }

/* Two present arrays of the same shape. */
static int same_shape(const arg *a, const arg *b)
{
    if (a->t.ndim != b->t.ndim)
        return 0;
    for (int d = 0; d < a->t.ndim; ++d)
        if (a->t.shape[d] != b->t.shape[d])
            return 0;
    return 1;
}

/* The last dimension is contiguous (or has one element): else the Python path copies. */
static int last_contiguous(const arg *a)
{
    const int d = a->t.ndim - 1;
    return !present(a) || a->t.shape[d] <= 1 || a->t.stride[d] == 1;
}

/* Some dimension of more than one element has stride 0 (a broadcast or expanded view). */
static int repeats(const arg *a)
{
    for (int d = 0; d < a->t.ndim; ++d)
        if (a->t.shape[d] > 1 && a->t.stride[d] == 0)
            return 1;
    return 0;
}

/* An array libgdn writes in place: check_writable() would pass it. */
static int writable(const arg *a) { return !present(a) || (!a->readonly && !repeats(a)); }

/* An index array the Python path's _index() would hand over as it is: in the data's framework
 * and on its device, no repeated elements. */
static int index_ok(const arg *a, const arg *like)
{
    return !present(a) || (a->kind == like->kind && a->device == like->device && !repeats(a));
}

/* All present arguments on one device (common_device()); *device gets it. */
static int one_device(const arg *const *args, int n, int *device)
{
    int found = 0;
    for (int i = 0; i < n; ++i) {
        if (!present(args[i]))
            continue;
        if (found && args[i]->device != *device)
            return 0;
        *device = args[i]->device;
        found = 1;
    }
    return 1;
}

/* The calling thread's context for (backend, device), through the binding's context() (which
 * also points a CUDA context at torch's current stream). NULL (no error set) on any failure:
 * the Python path then meets the same failure and raises it. */
static PyObject *context_for(PyObject *backend, int device, gdn_context **ctx)
{
    PyObject *key = NULL, *obj = NULL, *value = NULL;
    if (device == DEVICE_HOST) {
        key = G.cpu;
        Py_INCREF(key);
    } else {
        PyObject *index = PyLong_FromLong(device);
        if (index != NULL) {
            key = PyTuple_Pack(2, G.cuda, index);
            Py_DECREF(index);
        }
    }
    if (key != NULL)
        obj = PyObject_CallFunctionObjArgs(G.context, backend, key, NULL);
    Py_XDECREF(key);
    if (obj != NULL && (value = PyObject_GetAttr(obj, s_value)) != NULL) {
        *ctx = value == Py_None ? NULL : (gdn_context *)PyLong_AsVoidPtr(value);
        Py_DECREF(value);
        if (!PyErr_Occurred())
            return obj;
    }
    Py_XDECREF(obj);
    PyErr_Clear();
    return NULL;
}

/* A new output shaped `shape` in like's framework and device: zero-filled (rows libgdn may skip
 * must read as zeros) or not. dtype_of: the array whose dtype it takes (NumPy; torch takes
 * like's, which the callers make equal). NULL, no error set, on failure. */
static PyObject *new_output(const arg *like, PyObject *like_obj, PyObject *dtype_of,
                            PyObject *shape, int zero)
{
    PyObject *out = NULL;
    if (like->kind == KIND_NUMPY) {
        PyObject *dtype = PyObject_GetAttr(dtype_of, s_dtype);
        if (dtype != NULL) {
            out = PyObject_CallFunctionObjArgs(zero ? G.np_zeros : G.np_empty, shape, dtype,
                                               NULL);
            Py_DECREF(dtype);
        }
    } else {
        out = PyObject_CallMethodObjArgs(like_obj, zero ? s_new_zeros : s_new_empty, shape,
                                         NULL);
    }
    if (out == NULL)
        PyErr_Clear();
    return out;
}

/* Raises the binding's error for a failing status (check(status, ctx) raises it). */
static PyObject *raise_status(gdn_status status, PyObject *ctx_obj)
{
    PyObject *r = PyObject_CallFunction(G.check, "iO", (int)status, ctx_obj);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_Format(PyExc_RuntimeError, "gdn._fast: libgdn returned status %d", (int)status);
    }
    return NULL;
}

/* PyObject_IsTrue, 0/1; -1 (error cleared) when it fails. */
static int truth(PyObject *x)
{
    const int t = PyObject_IsTrue(x);
    if (t < 0)
        PyErr_Clear();
    return t;
}

/* An int that ctypes would store in an int32 field (masked, as ctypes does); 0 on failure. */
static int int32_of(PyObject *x, int32_t *out)
{
    PyObject *n = PyNumber_Long(x);
    if (n == NULL) {
        PyErr_Clear();
        return 0;
    }
    const unsigned long long v = PyLong_AsUnsignedLongLongMask(n);
    Py_DECREF(n);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = (int32_t)(uint32_t)v;
    return 1;
}

static int not_ready(void)
{
    if (!G.ready)
        PyErr_SetString(PyExc_RuntimeError, "gdn._fast: setup() has not run");
    return !G.ready;
}

#endif
