/* Calls into the compiled progress path without ctypes (adaptcoll.runtime.fastcalls).

   A ctypes call costs about 4,200 instructions (argument conversion, a call frame built at run time,
   the GIL released and taken back); a small served call makes one or two of them (ac_call_run, or
   ac_call_start and ac_op_wait). This CPython extension wraps a C function pointer of one of a few fixed
   signatures in a vectorcall object: the same call costs about 550 instructions, 950 where the GIL is
   released. It knows nothing of MPI or of the library it calls: Python hands it the functions'
   addresses (from ctypes) and the signature of each, and it is built with the plain C compiler and
   Python's headers. Where it cannot be built, ctypes calls the same functions (the fallback).

   It also does one check of the decision cache in C (`unchanged`: are a remembered call's arrays still of
   the dtype, shape, strides and writeable flag it was decided for), reading the array struct through
   NumPy's inline accessors (its headers, no API table), which saves some 1,500 instructions an array,
   the concurrent-collective check of every served call (`busy_marker`: adaptcoll.forms.threads), and
   the native wrapper's small-array test with its call counter (`native_gate`: adaptcoll.forms.collectives),
   the size of the buffer specifications a program writes in a loop (`host_nbytes`), and the whole native
   path of Ibcast / Ireduce / Iallreduce with the request it returns and that request's common Wait
   (`native_iform`, `request_facts`, `request_wait_method`: adaptcoll.forms.collectives and .requests).

   Arguments are Python ints: 'n' a Py_ssize_t, 'i' a C int (OverflowError outside its range), 'p' an
   address (void *). The result is a Python int (None for 'v').
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <structmember.h> /* PyMemberDef's T_OBJECT(_EX) and READONLY (request_facts' slots, NativeIForm's __wrapped__) */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h> /* the array struct's accessors only (inline; no import_array, no API table) */

static PyTypeObject *ndarray_type; /* numpy.ndarray, taken at import */

/* The signatures, as "result(arguments)". */
enum {
    SIG_I_NI,   /* int f(Py_ssize_t, int): ac_call_run */
    SIG_N_NI,   /* Py_ssize_t f(Py_ssize_t, int): ac_call_start */
    SIG_I_N,    /* int f(Py_ssize_t): ac_op_wait */
    SIG_V_N,    /* void f(Py_ssize_t): ac_op_release */
    SIG_I_PIIP, /* int f(void *, int, int, void *): ac_progress */
    SIG_I_PPPI, /* int f(void *, void *, void *, int): ac_take_finished */
    SIG_COUNT
};

static const char *const sig_names[SIG_COUNT] = {
    "i(n,i)", "n(n,i)", "i(n)", "v(n)", "i(p,i,i,p)", "i(p,p,p,i)",
};
static const int sig_nargs[SIG_COUNT] = {2, 2, 1, 1, 4, 4};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    void *fn;
    int sig;
    int nogil;
    PyObject *name;
} CFunction;

static int arg_int(PyObject *o, int *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "adaptcoll.fastcalls: argument out of range for a C int");
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int arg_ssize(PyObject *o, Py_ssize_t *out) {
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static int arg_ptr(PyObject *o, void **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    void *v = PyLong_AsVoidPtr(o);
    if (v == NULL && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* Run `stmt` with the GIL released when the function may sweep for a while (nogil), else holding it. */
#define CALL(self, stmt)              \
    do {                              \
        if ((self)->nogil) {          \
            Py_BEGIN_ALLOW_THREADS    \
            stmt;                     \
            Py_END_ALLOW_THREADS      \
        } else {                      \
            stmt;                     \
        }                             \
    } while (0)

static PyObject *cfunction_call(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    CFunction *self = (CFunction *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_Format(PyExc_TypeError, "%U takes no keyword arguments", self->name);
        return NULL;
    }
    if (nargs != sig_nargs[self->sig]) {
        PyErr_Format(PyExc_TypeError, "%U takes %d arguments (%zd given)", self->name, sig_nargs[self->sig], nargs);
        return NULL;
    }
    Py_ssize_t n0;
    int i1, i2, i3;
    void *p0, *p1, *p2, *p3;
    switch (self->sig) {
    case SIG_I_NI: {
        if (arg_ssize(args[0], &n0) || arg_int(args[1], &i1)) return NULL;
        int r;
        CALL(self, r = ((int (*)(Py_ssize_t, int))self->fn)(n0, i1));
        return PyLong_FromLong(r);
    }
    case SIG_N_NI: {
        if (arg_ssize(args[0], &n0) || arg_int(args[1], &i1)) return NULL;
        Py_ssize_t r;
        CALL(self, r = ((Py_ssize_t (*)(Py_ssize_t, int))self->fn)(n0, i1));
        return PyLong_FromSsize_t(r);
    }
    case SIG_I_N: {
        if (arg_ssize(args[0], &n0)) return NULL;
        int r;
        CALL(self, r = ((int (*)(Py_ssize_t))self->fn)(n0));
        return PyLong_FromLong(r);
    }
    case SIG_V_N: {
        if (arg_ssize(args[0], &n0)) return NULL;
        CALL(self, ((void (*)(Py_ssize_t))self->fn)(n0));
        Py_RETURN_NONE;
    }
    case SIG_I_PIIP: {
        if (arg_ptr(args[0], &p0) || arg_int(args[1], &i1) || arg_int(args[2], &i2) || arg_ptr(args[3], &p3))
            return NULL;
        int r;
        CALL(self, r = ((int (*)(void *, int, int, void *))self->fn)(p0, i1, i2, p3));
        return PyLong_FromLong(r);
    }
    case SIG_I_PPPI: {
        if (arg_ptr(args[0], &p0) || arg_ptr(args[1], &p1) || arg_ptr(args[2], &p2) || arg_int(args[3], &i3))
            return NULL;
        int r;
        CALL(self, r = ((int (*)(void *, void *, void *, int))self->fn)(p0, p1, p2, i3));
        return PyLong_FromLong(r);
    }
    }
    PyErr_SetString(PyExc_SystemError, "adaptcoll.fastcalls: unknown signature");
    return NULL;
}

static void cfunction_dealloc(PyObject *obj) {
    Py_XDECREF(((CFunction *)obj)->name);
    PyObject_Free(obj);
}

static PyObject *cfunction_repr(PyObject *obj) {
    CFunction *self = (CFunction *)obj;
    return PyUnicode_FromFormat("<adaptcoll fast call %U %s at %p%s>", self->name, sig_names[self->sig], self->fn,
                                self->nogil ? ", GIL released" : "");
}

static PyTypeObject CFunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "adaptcoll_fastcalls.CFunction",
    .tp_doc = "A C function of a fixed signature, called without ctypes (adaptcoll.runtime.fastcalls).",
    .tp_basicsize = sizeof(CFunction),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(CFunction, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = cfunction_dealloc,
    .tp_repr = cfunction_repr,
};

/* wrap(address, signature, name, release_gil) -> CFunction */
static PyObject *wrap(PyObject *module, PyObject *args) {
    PyObject *address, *name;
    const char *signature;
    int nogil;
    if (!PyArg_ParseTuple(args, "OsUp", &address, &signature, &name, &nogil)) return NULL;
    void *fn = PyLong_AsVoidPtr(address);
    if (fn == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "adaptcoll.fastcalls: a NULL function address");
        return NULL;
    }
    int sig = -1;
    for (int k = 0; k < SIG_COUNT; k++)
        if (strcmp(signature, sig_names[k]) == 0) sig = k;
    if (sig < 0) {
        PyErr_Format(PyExc_ValueError, "adaptcoll.fastcalls: unknown signature %s", signature);
        return NULL;
    }
    CFunction *self = PyObject_New(CFunction, &CFunctionType);
    if (self == NULL) return NULL;
    self->vectorcall = cfunction_call;
    self->fn = fn;
    self->sig = sig;
    self->nogil = nogil;
    Py_INCREF(name);
    self->name = name;
    return (PyObject *)self;
}

/* Whether `array` (exactly a numpy.ndarray) still has the signature (dtype, shape, strides, writeable)
   that adaptcoll.decision.cache._signature took: its _unchanged, without making the shape, strides and
   flags objects it compares. */
static int same_signature(PyObject *array, PyObject *sig) {
    if (Py_TYPE(array) != ndarray_type || !PyTuple_Check(sig) || PyTuple_GET_SIZE(sig) != 4) return 0;
    PyArrayObject *a = (PyArrayObject *)array;
    if ((PyObject *)PyArray_DESCR(a) != PyTuple_GET_ITEM(sig, 0)) return 0;
    if (((PyArray_FLAGS(a) & NPY_ARRAY_WRITEABLE) != 0) != (PyTuple_GET_ITEM(sig, 3) == Py_True)) return 0;
    PyObject *shape = PyTuple_GET_ITEM(sig, 1), *strides = PyTuple_GET_ITEM(sig, 2);
    int nd = PyArray_NDIM(a);
    if (!PyTuple_Check(shape) || !PyTuple_Check(strides) || PyTuple_GET_SIZE(shape) != nd
        || PyTuple_GET_SIZE(strides) != nd)
        return 0;
    npy_intp *dims = PyArray_DIMS(a), *steps = PyArray_STRIDES(a);
    for (int k = 0; k < nd; k++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        Py_ssize_t t = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, k));
        if ((d == -1 || t == -1) && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (d != dims[k] || t != steps[k]) return 0;
    }
    return 1;
}

/* unchanged(arrays, signatures) -> bool: every array whose signature is not None still has it. */
static PyObject *unchanged(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "unchanged(arrays, signatures) takes two tuples");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
    if (PyTuple_GET_SIZE(args[1]) < n) n = PyTuple_GET_SIZE(args[1]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *sig = PyTuple_GET_ITEM(args[1], i);
        if (sig != Py_None && !same_signature(PyTuple_GET_ITEM(args[0], i), sig)) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* The concurrent-collective check (adaptcoll.forms.threads) in C: a BusyMarker holds the dict of busy
   communicators (handle -> (thread ident, collective)) and what raises on a conflict; `enter` and
   `leave` are its bound methods, called as the Python functions are. */
typedef struct {
    PyObject_HEAD
    PyObject *busy;     /* dict */
    PyObject *conflict; /* conflict(comm, collective, held): raises ConcurrentCollectiveError */
} BusyMarker;

static PyObject *str_handle;

/* enter(comm, collective) -> the key for leave, None for a call nested in this thread's own, or raises */
static PyObject *busy_enter(PyObject *obj, PyObject *const *args, Py_ssize_t nargs) {
    BusyMarker *self = (BusyMarker *)obj;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "enter(comm, collective) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *key = PyObject_GetAttr(args[0], str_handle);
    if (key == NULL) return NULL;
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (ident == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *mine = PyTuple_Pack(2, ident, args[1]);
    if (mine == NULL) {
        Py_DECREF(key);
        Py_DECREF(ident);
        return NULL;
    }
    PyObject *held = PyDict_SetDefault(self->busy, key, mine); /* borrowed */
    PyObject *out = NULL;
    if (held == mine) {
        out = key;
        key = NULL;
    } else if (held != NULL) {
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(held, 0), ident, Py_EQ);
        if (same > 0) {
            out = Py_None;
            Py_INCREF(out);
        } else if (same == 0) {
            Py_INCREF(held);
            PyObject *r = PyObject_CallFunctionObjArgs(self->conflict, args[0], args[1], held, NULL);
            Py_DECREF(held);
            if (r != NULL) { /* (conflict raises; if it did not, report that) */
                Py_DECREF(r);
                PyErr_SetString(PyExc_RuntimeError, "adaptcoll: concurrent collectives on one communicator");
            }
        }
    }
    Py_XDECREF(key);
    Py_DECREF(ident);
    Py_DECREF(mine);
    return out;
}

/* leave(key): end the call `enter` gave `key` for (None: nothing to do) */
static PyObject *busy_leave(PyObject *obj, PyObject *key) {
    BusyMarker *self = (BusyMarker *)obj;
    if (key != Py_None && PyDict_DelItem(self->busy, key) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static void busy_dealloc(PyObject *obj) {
    BusyMarker *self = (BusyMarker *)obj;
    Py_XDECREF(self->busy);
    Py_XDECREF(self->conflict);
    PyObject_Free(obj);
}

static PyMethodDef busy_methods[] = {
    {"enter", (PyCFunction)(void (*)(void))busy_enter, METH_FASTCALL, "enter(comm, collective): as forms.threads.enter"},
    {"leave", busy_leave, METH_O, "leave(key): as forms.threads.leave"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BusyMarkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "adaptcoll_fastcalls.BusyMarker",
    .tp_doc = "The concurrent-collective check of adaptcoll.forms.threads, in C.",
    .tp_basicsize = sizeof(BusyMarker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = busy_dealloc,
    .tp_methods = busy_methods,
};

/* busy_marker(busy, conflict) -> BusyMarker */
static PyObject *busy_marker(PyObject *module, PyObject *args) {
    PyObject *busy, *conflict;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &busy, &conflict)) return NULL;
    if (!PyCallable_Check(conflict)) {
        PyErr_SetString(PyExc_TypeError, "busy_marker: conflict must be callable");
        return NULL;
    }
    BusyMarker *self = PyObject_New(BusyMarker, &BusyMarkerType);
    if (self == NULL) return NULL;
    Py_INCREF(busy);
    Py_INCREF(conflict);
    self->busy = busy;
    self->conflict = conflict;
    return (PyObject *)self;
}

/* The native wrapper's test in C (adaptcoll.forms.collectives: a bare ndarray below the communicator's
   threshold goes to MPI): a NativeGate for one collective is called as gate(comm, array) -> bool, True
   when `array` is exactly a numpy.ndarray, or a specification spec_nbytes (below) sizes, of fewer bytes
   than comm.<attr>[<key>], and then counts the call. It is also that counter, read and reset as the one-element lists of adaptcoll.runtime.counters
   are (gate[0], gate[0] = 0), so stats() needs nothing new. In Python the test and the count cost about
   1,700 instructions (the count alone 600: an int made and freed per call; `nbytes` 390; the threshold's
   attribute 330-500); here a few hundred. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *attr; /* the communicator's attribute holding the thresholds dict */
    PyObject *key;  /* the collective's key in it */
    long long count;
    PyObject *last_descr; /* the dtype whose itemsize was read last (held), and that itemsize */
    Py_ssize_t last_itemsize;
} NativeGate;

static PyObject *str_itemsize;

/* `array.nbytes` from the array struct (the dimensions' product times the dtype's itemsize, the one
   Python attribute read only for a dtype not seen last time); -1 with an error set if that read fails. */
static Py_ssize_t gate_nbytes(NativeGate *self, PyArrayObject *a) {
    PyObject *descr = (PyObject *)PyArray_DESCR(a);
    if (descr != self->last_descr) {
        PyObject *size = PyObject_GetAttr(descr, str_itemsize);
        if (size == NULL) return -1;
        Py_ssize_t itemsize = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        if (itemsize < 0) return -1;
        Py_INCREF(descr);
        Py_XSETREF(self->last_descr, descr);
        self->last_itemsize = itemsize;
    }
    Py_ssize_t n = self->last_itemsize;
    npy_intp *dims = PyArray_DIMS(a);
    for (int k = 0, nd = PyArray_NDIM(a); k < nd; k++) n *= (Py_ssize_t)dims[k];
    return n;
}

/* The message size of a buffer specification in the forms a program writes in a loop, as
   adaptcoll.forms.spec_size.host_nbytes computes it: `[buf, count, datatype]`, `[buf, (count, displ),
   datatype]` and `[buf, count, displ, datatype]` (list or tuple, `count` an int >= 0, `datatype` one of
   mpi4py's predefined datatype objects, `buf` of one of the exact host types), `[buf, datatype]` and
   `[buf, count]` (the buffer's own size, or `count` of its items), a bare buffer of an exact host type,
   and host DLPack producers, bare or with a count (spec_dlpack_host, spec_dlpack_nbytes: below); -1 for
   every other form (Python sizes it). What those are, and the fallback, come from Python once
   (`spec_facts`). mpi4py checks the specification itself when the call goes native, as the Python path
   lets it. In Python the sizing of `[mmap, n, MPI.BYTE]` costs about 2,000 instructions; here about 100. */
static PyObject *spec_host_types; /* tuple of the exact host buffer types (spec_size.HOST_TYPES) */
static PyObject *spec_sizes;      /* {id(predefined datatype): its size} (spec_size.PREDEFINED_SIZES) */
static PyObject *spec_fallback;   /* spec_size.host_nbytes: every form this file does not size */
static PyObject *spec_last_type;  /* the datatype object found last (held) and its size */
static Py_ssize_t spec_last_size;

static Py_ssize_t spec_datatype_size(PyObject *datatype) {
    if (datatype == spec_last_type) return spec_last_size;
    PyObject *key = PyLong_FromVoidPtr(datatype); /* id(datatype) */
    if (key == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *found = PyDict_GetItemWithError(spec_sizes, key); /* borrowed */
    Py_DECREF(key);
    Py_ssize_t size = found != NULL && PyLong_CheckExact(found) ? PyLong_AsSsize_t(found) : -1;
    if (PyErr_Occurred()) PyErr_Clear();
    if (size < 0) return -1;
    Py_INCREF(datatype); /* (held: its address cannot name another object while it is the one found last) */
    Py_XSETREF(spec_last_type, datatype);
    spec_last_size = size;
    return size;
}

static PyObject *spec_last_descr; /* the dtype of an array in a specification whose itemsize was read last (held) */
static Py_ssize_t spec_last_itemsize;

/* Bytes of an exact host buffer (`buf.nbytes`, or its length for bytearray, bytes and mmap) and, in
   *itemsize, the bytes of one of its items (1 where Python's sizing counts bytes); -1 with no error set
   where it cannot say (a closed mmap, a released memoryview, an odd dtype: Python sizes it, and raises
   what it raises). */
static Py_ssize_t spec_buffer_nbytes(PyObject *buf, PyTypeObject *kind, Py_ssize_t *itemsize) {
    *itemsize = 1;
    if (kind == &PyByteArray_Type) return PyByteArray_GET_SIZE(buf);
    if (kind == &PyBytes_Type) return PyBytes_GET_SIZE(buf);
    if (kind == ndarray_type) {
        PyArrayObject *a = (PyArrayObject *)buf;
        PyObject *descr = (PyObject *)PyArray_DESCR(a);
        if (descr != spec_last_descr) {
            PyObject *size = PyObject_GetAttr(descr, str_itemsize);
            Py_ssize_t n = size != NULL ? PyLong_AsSsize_t(size) : -1;
            Py_XDECREF(size);
            if (n < 0) {
                PyErr_Clear();
                return -1;
            }
            Py_INCREF(descr);
            Py_XSETREF(spec_last_descr, descr);
            spec_last_itemsize = n;
        }
        Py_ssize_t n = *itemsize = spec_last_itemsize;
        npy_intp *dims = PyArray_DIMS(a);
        for (int k = 0, nd = PyArray_NDIM(a); k < nd; k++) n *= (Py_ssize_t)dims[k];
        return n;
    }
    /* memoryview, mmap, array.array: their buffer (any layout), released at once */
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_STRIDES) < 0) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t n = view.len;
    *itemsize = view.itemsize; /* (an mmap's is 1) */
    PyBuffer_Release(&view);
    return n;
}

static int spec_is_host(PyTypeObject *buf_kind) {
    for (Py_ssize_t k = 0, m = PyTuple_GET_SIZE(spec_host_types); k < m; k++)
        if ((PyObject *)buf_kind == PyTuple_GET_ITEM(spec_host_types, k)) return 1;
    return 0;
}

/* An exact int >= 0 as a Py_ssize_t; -1 for anything else (bools, negatives, beyond range). */
static Py_ssize_t spec_count(PyObject *count) {
    if (!PyLong_CheckExact(count)) return -1;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(count, &overflow);
    if (overflow || n < 0 || n > PY_SSIZE_T_MAX) return -1;
    return (Py_ssize_t)n;
}

/* The DLPack structs as the standard fixes them (dlpack.h, ABI-stable since 0.x; the versioned form since 1.0). */
typedef struct {
    void *data;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensorView;
typedef struct {
    DLTensorView dl_tensor;
    void *manager_ctx;
    void (*deleter)(void *);
} DLManagedView;
typedef struct {
    uint32_t major, minor;
    void *manager_ctx;
    void (*deleter)(void *);
    uint64_t flags;
    DLTensorView dl_tensor;
} DLManagedVersionedView;

static PyObject *str_dlpack, *str_dlpack_device, *str_cai, *dlpack_kwnames, *dlpack_max_version;

/* Is attribute `name` of `obj` there: 1 with *value a new reference, 0 without (no error), -1 on an error. */
static int spec_lookup(PyObject *obj, PyObject *name, PyObject **value) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, value);
#else
    return _PyObject_LookupAttr(obj, name, value);
#endif
}

/* Is `obj` a host DLPack producer: no `__cuda_array_interface__`, and `__dlpack_device__()` a tuple whose
   first item is 1 (kDLCPU), where adaptcoll.device.memory_kind says host memory too; 0 for anything
   else, and for any error (cleared: Python asks again). */
static int spec_dlpack_host(PyObject *obj) {
    PyObject *cai = NULL, *method = NULL;
    int found = spec_lookup(obj, str_cai, &cai);
    Py_XDECREF(cai);
    if (found != 0) goto fail; /* (a CAI object, or an error: Python's) */
    found = spec_lookup(obj, str_dlpack_device, &method);
    if (found <= 0) goto fail;
    PyObject *device = PyObject_CallNoArgs(method);
    Py_DECREF(method);
    if (device == NULL) goto fail;
    long kind = -1;
    if (PyTuple_CheckExact(device) && PyTuple_GET_SIZE(device) >= 1 && PyLong_Check(PyTuple_GET_ITEM(device, 0)))
        kind = PyLong_AsLong(PyTuple_GET_ITEM(device, 0));
    Py_DECREF(device);
    if (kind == 1) return 1; /* kDLCPU only */
fail:
    PyErr_Clear();
    return 0;
}

/* Bytes of a bare host DLPack producer (spec_dlpack_host), its tensor read in place and the capsule
   released unconsumed, asked as spec_size's `_dlpack_nbytes` asks (`__dlpack__(max_version=(1, 0),
   copy=False)`, a 0.x producer without arguments); -1 with no error set for anything else or anything
   that fails (Python sizes it, and raises what it raises). In Python the capsule is read through ctypes:
   about 3.2 us a call; here 0.8, most of it the producer's own `__dlpack__`. */
static Py_ssize_t spec_dlpack_nbytes(PyObject *obj) {
    if (!spec_dlpack_host(obj)) return -1;
    PyObject *args[3] = {obj, dlpack_max_version, Py_False};
    PyObject *capsule = PyObject_VectorcallMethod(str_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, dlpack_kwnames);
    if (capsule == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) goto fail;
        PyErr_Clear(); /* a DLPack 0.x producer */
        capsule = PyObject_CallMethodNoArgs(obj, str_dlpack);
        if (capsule == NULL) goto fail;
    }
    DLTensorView *tensor = NULL;
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        DLManagedVersionedView *managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        if (managed != NULL && managed->major >= 1) tensor = &managed->dl_tensor;
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedView *managed = PyCapsule_GetPointer(capsule, "dltensor");
        if (managed != NULL) tensor = &managed->dl_tensor;
    }
    Py_ssize_t n = -1;
    if (tensor != NULL && tensor->ndim >= 0 && (tensor->ndim == 0 || tensor->shape != NULL)) {
        n = ((Py_ssize_t)tensor->bits * tensor->lanes + 7) / 8;
        for (int32_t k = 0; k < tensor->ndim && n >= 0; k++) {
            int64_t extent = tensor->shape[k];
            if (extent < 0 || (extent > 0 && n > PY_SSIZE_T_MAX / extent)) n = -1;
            else n *= (Py_ssize_t)extent;
        }
    }
    Py_DECREF(capsule); /* (unconsumed: its destructor calls the producer's deleter) */
    if (PyErr_Occurred()) PyErr_Clear();
    return n;
fail:
    PyErr_Clear();
    return -1;
}

static int cai_host; /* host_cai(True): adaptcoll.device found no CUDA driver, so every pointer is host memory */
static PyObject *str_typestr, *str_shape, *str_data, *str_cupy;

/* `obj`'s `__cuda_array_interface__` where this file may read it as host memory: 1 with *cai (a new
   reference) an exact dict whose "data" pointer reads as adaptcoll.device.memory_kind reads it (None or
   an int), only after host_cai(True) and with CuPy not loaded; 0 when `obj` has no interface (or None);
   -1 for anything else, errors included (cleared: Python asks again). Without a CUDA driver
   memory_kind says host memory for every such pointer: here that answer costs no Python frame. */
static int spec_cai(PyObject *obj, PyObject **cai) {
    *cai = NULL;
    if (!cai_host) return -1;
    PyObject *value = NULL;
    int found = spec_lookup(obj, str_cai, &value);
    if (found < 0) goto other;
    if (found == 0) return 0;
    if (value == Py_None) {
        Py_DECREF(value);
        return 0;
    }
    if (!PyDict_CheckExact(value)) goto other;
    PyObject *cupy = PyImport_GetModule(str_cupy); /* (memory_kind takes a cupy.ndarray for device memory unasked) */
    if (cupy != NULL || PyErr_Occurred()) {
        Py_XDECREF(cupy);
        goto other;
    }
    PyObject *data = PyDict_GetItemWithError(value, str_data); /* borrowed */
    PyObject *pointer = NULL;
    if (data != NULL && PyTuple_CheckExact(data) && PyTuple_GET_SIZE(data) >= 1) pointer = PyTuple_GET_ITEM(data, 0);
    else if (data != NULL && PyList_CheckExact(data) && PyList_GET_SIZE(data) >= 1) pointer = PyList_GET_ITEM(data, 0);
    if (pointer == NULL || (pointer != Py_None && !PyLong_Check(pointer))) goto other;
    *cai = value;
    return 1;
other:
    Py_XDECREF(value);
    PyErr_Clear();
    return -1;
}

/* The item size NumPy gives a CAI typestr, for the unambiguous ones (a byte order mark, then bool, an
   integer, a float of 2-8 bytes or a complex of 8 or 16); -1 for every other (Python's np.dtype). */
static Py_ssize_t spec_typestr_size(PyObject *typestr) {
    static const char *const known[] = {"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                        "f2", "f4", "f8", "c8", "c16"};
    if (!PyUnicode_CheckExact(typestr)) return -1;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(typestr, &len);
    if (s == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (len >= 1 && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
        s++;
        len--;
    }
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if ((Py_ssize_t)strlen(known[k]) == len && memcmp(known[k], s, (size_t)len) == 0) return atoi(s + 1);
    return -1;
}

/* Bytes of the host memory behind a CAI dict (spec_cai), as spec_size._interface_nbytes sizes it: the
   typestr's item size times the shape's extents (strides ignored there too); -1 for anything else
   (a shape not an exact tuple or list of non-negative ints, an unusual typestr, overflow). */
static Py_ssize_t spec_cai_nbytes(PyObject *cai) {
    PyObject *typestr = PyDict_GetItemWithError(cai, str_typestr); /* borrowed */
    PyObject *shape = typestr != NULL ? PyDict_GetItemWithError(cai, str_shape) : NULL;
    Py_ssize_t n = typestr != NULL ? spec_typestr_size(typestr) : -1;
    if (shape == NULL || n < 0) {
        PyErr_Clear();
        return -1;
    }
    PyObject **items;
    Py_ssize_t dims;
    if (PyTuple_CheckExact(shape)) {
        dims = PyTuple_GET_SIZE(shape);
        items = ((PyTupleObject *)shape)->ob_item;
    } else if (PyList_CheckExact(shape)) {
        dims = PyList_GET_SIZE(shape);
        items = ((PyListObject *)shape)->ob_item;
    } else {
        return -1;
    }
    for (Py_ssize_t k = 0; k < dims; k++) {
        if (!PyLong_CheckExact(items[k])) return -1;
        Py_ssize_t extent = PyLong_AsSsize_t(items[k]);
        if (extent < 0 || (extent > 0 && n > PY_SSIZE_T_MAX / extent)) {
            PyErr_Clear();
            return -1;
        }
        n *= extent;
    }
    return n;
}

static int spec_cai_is_host(PyObject *obj) {
    PyObject *cai;
    if (spec_cai(obj, &cai) <= 0) return 0;
    Py_DECREF(cai);
    return 1;
}

static Py_ssize_t spec_nbytes(PyObject *spec) {
    if (spec_sizes == NULL) return -1;
    PyTypeObject *kind = Py_TYPE(spec);
    if (kind == &PyByteArray_Type) return PyByteArray_GET_SIZE(spec);
    if (kind == &PyBytes_Type) return PyBytes_GET_SIZE(spec);
    PyObject **items;
    Py_ssize_t nitems;
    if (kind == &PyList_Type) {
        nitems = PyList_GET_SIZE(spec);
        items = ((PyListObject *)spec)->ob_item;
    } else if (kind == &PyTuple_Type) {
        nitems = PyTuple_GET_SIZE(spec);
        items = ((PyTupleObject *)spec)->ob_item;
    } else {
        Py_ssize_t itemsize;
        if (spec_is_host(kind)) return spec_buffer_nbytes(spec, kind, &itemsize); /* memoryview, mmap, array */
        PyObject *cai;
        int is_cai = spec_cai(spec, &cai);
        if (is_cai > 0) {
            Py_ssize_t n = spec_cai_nbytes(cai);
            Py_DECREF(cai);
            return n;
        }
        if (is_cai < 0 && cai_host) return -1; /* (an interface this file does not read: Python's) */
        return spec_dlpack_nbytes(spec);
    }
    if (nitems < 2 || nitems > 4) return -1;
    PyObject *buf = items[0], *count = items[1];
    PyTypeObject *buf_kind = Py_TYPE(buf);
    if (nitems == 2) { /* [buf, datatype]: the buffer's bytes; [buf, count]: count of its items */
        if (!spec_is_host(buf_kind)) return -1;
        Py_ssize_t itemsize, n;
        if (PyLong_CheckExact(count)) {
            n = spec_count(count);
            if (n < 0 || spec_buffer_nbytes(buf, buf_kind, &itemsize) < 0) return -1;
            if (itemsize > 0 && n > PY_SSIZE_T_MAX / itemsize) return -1;
            return n * itemsize;
        }
        if (spec_datatype_size(count) <= 0) return -1; /* (0 or not predefined: Python's) */
        return spec_buffer_nbytes(buf, buf_kind, &itemsize);
    }
    if (nitems == 3 && (PyTuple_CheckExact(count) || PyList_CheckExact(count))) { /* (count, displ) */
        if (PySequence_Fast_GET_SIZE(count) != 2) return -1;
        count = PySequence_Fast_GET_ITEM(count, 0);
    }
    Py_ssize_t n = spec_count(count);
    if (n < 0) return -1;
    Py_ssize_t size = spec_datatype_size(items[nitems - 1]);
    if (size < 0 || (!spec_is_host(buf_kind) && !spec_dlpack_host(buf) && !spec_cai_is_host(buf))) return -1;
    if (size > 0 && n > PY_SSIZE_T_MAX / size) return -1;
    return n * size;
}

/* spec_facts(host_types, sizes, fallback): what spec_nbytes needs from adaptcoll.forms.spec_size. */
static PyObject *spec_facts(PyObject *module, PyObject *args) {
    PyObject *types, *sizes, *fallback;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyTuple_Type, &types, &PyDict_Type, &sizes, &fallback)) return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "spec_facts: fallback must be callable");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(types); k++) {
        if (!PyType_Check(PyTuple_GET_ITEM(types, k))) {
            PyErr_SetString(PyExc_TypeError, "spec_facts: host_types must be a tuple of types");
            return NULL;
        }
    }
    Py_INCREF(types);
    Py_INCREF(sizes);
    Py_INCREF(fallback);
    Py_XSETREF(spec_host_types, types);
    Py_XSETREF(spec_sizes, sizes);
    Py_XSETREF(spec_fallback, fallback);
    Py_CLEAR(spec_last_type);
    Py_CLEAR(spec_last_descr);
    Py_RETURN_NONE;
}

/* host_cai(flag): whether every `__cuda_array_interface__` pointer is host memory (no CUDA driver in this
   process: adaptcoll.device.driver says so whenever its driver changes). */
static PyObject *host_cai(PyObject *module, PyObject *flag) {
    int on = PyObject_IsTrue(flag);
    if (on < 0) return NULL;
    cai_host = on;
    Py_RETURN_NONE;
}

/* host_nbytes(spec): spec_size.host_nbytes with the common forms sized here (the rest by the fallback). */
static PyObject *host_nbytes(PyObject *module, PyObject *spec) {
    Py_ssize_t n = spec_nbytes(spec);
    if (n >= 0) return PyLong_FromSsize_t(n);
    if (spec_fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "host_nbytes before spec_facts");
        return NULL;
    }
    return PyObject_CallOneArg(spec_fallback, spec);
}

/* The gate's test: 1 (and counted) when `data` is below comm.<attr>[<key>], 0 when not, -1 with an error set. */
static int gate_test(NativeGate *self, PyObject *comm, PyObject *data) {
    Py_ssize_t nbytes;
    if (Py_TYPE(data) == ndarray_type) {
        nbytes = gate_nbytes(self, (PyArrayObject *)data);
        if (nbytes < 0) return -1;
    } else {
        nbytes = spec_nbytes(data); /* a specification spec_nbytes sizes, else not ours: not below */
        if (nbytes < 0) return 0;
    }
    /* The thresholds from the communicator's own __dict__ (where adaptcoll.tune.choose puts them: no
       type attribute has that name), not through the generic attribute lookup, which walks mpi4py's
       class dicts first (about 300 instructions); no dict, or no entry yet: not below. */
    PyObject *dict = PyObject_GenericGetDict(comm, NULL);
    if (dict == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t limit = -1;
    PyObject *below = PyDict_GetItemWithError(dict, self->attr); /* borrowed */
    if (below != NULL && PyDict_Check(below)) {
        PyObject *found = PyDict_GetItemWithError(below, self->key); /* borrowed */
        if (found != NULL && PyLong_Check(found)) limit = PyLong_AsSsize_t(found);
    }
    Py_DECREF(dict);
    if (PyErr_Occurred()) PyErr_Clear(); /* (anything odd: not below, the Python path decides) */
    if (nbytes < limit) {
        self->count++;
        return 1;
    }
    return 0;
}

static PyObject *gate_call(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "a native gate takes (comm, array)");
        return NULL;
    }
    int below = gate_test((NativeGate *)obj, args[0], args[1]);
    if (below < 0) return NULL;
    return PyBool_FromLong(below);
}

static PyObject *gate_item(PyObject *obj, PyObject *index) {
    if (!PyLong_Check(index) || PyLong_AsLong(index) != 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "a native gate's count is [0]");
        return NULL;
    }
    return PyLong_FromLongLong(((NativeGate *)obj)->count);
}

static int gate_set_item(PyObject *obj, PyObject *index, PyObject *value) {
    if (value == NULL || !PyLong_Check(index) || PyLong_AsLong(index) != 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "a native gate's count is [0]");
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    ((NativeGate *)obj)->count = v;
    return 0;
}

static Py_ssize_t gate_len(PyObject *obj) { return 1; }

static PyMappingMethods gate_mapping = {gate_len, gate_item, gate_set_item};

static void gate_dealloc(PyObject *obj) {
    NativeGate *self = (NativeGate *)obj;
    Py_XDECREF(self->attr);
    Py_XDECREF(self->key);
    Py_XDECREF(self->last_descr);
    PyObject_Free(obj);
}

static PyTypeObject NativeGateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "adaptcoll_fastcalls.NativeGate",
    .tp_doc = "The native wrapper's small-array test and its call counter, in C (adaptcoll.forms.collectives).",
    .tp_basicsize = sizeof(NativeGate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(NativeGate, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = gate_dealloc,
    .tp_as_mapping = &gate_mapping,
};

/* native_gate(attr, key, count) -> NativeGate */
static PyObject *native_gate(PyObject *module, PyObject *args) {
    PyObject *attr, *key;
    long long count;
    if (!PyArg_ParseTuple(args, "UUL", &attr, &key, &count)) return NULL;
    NativeGate *self = PyObject_New(NativeGate, &NativeGateType);
    if (self == NULL) return NULL;
    self->vectorcall = gate_call;
    Py_INCREF(attr);
    PyUnicode_InternInPlace(&attr);
    Py_INCREF(key);
    self->attr = attr;
    self->key = key;
    self->count = count;
    self->last_descr = NULL;
    self->last_itemsize = 0;
    return (PyObject *)self;
}

/* The request of a native I-form (adaptcoll.forms.requests.NativeRequest) made and waited for in C.
   NativeRequest stays the Python class (isinstance, Test, Waitall, ... are Python's); `request_facts`
   hands this file the class, its slots' offsets (read from the slots' member descriptors, so the layout
   is the one Python made), the NATIVE_LIVE set and the engine's module. A request made here is what
   NativeRequest(req, keep) makes: `_req`, `_keep`, `_done` False, `_reported` False, its id in NATIVE_LIVE.
   In Python, making one cost 0.18 us of a small Ibcast + Wait's 1.2-1.4 (bench/RESULTS.md). */
static PyTypeObject *req_type; /* NativeRequest (held), NULL until request_facts */
static Py_ssize_t off_req, off_keep, off_done, off_reported;
static PyObject *req_live;        /* NATIVE_LIVE: the set of id()s */
static PyObject *engine_globals;  /* adaptcoll.runtime.engine's __dict__ (for `_engine`) */
static PyObject *req_wait_python; /* the Python Wait (NativeRequest.Wait before this one replaced it) */
static PyObject *str_engine, *str_entries, *str_watches, *str_compiled, *str_ops, *str_Wait;

static Py_ssize_t slot_offset(PyTypeObject *type, const char *name) {
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name);
    if (d == NULL) return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) off = m->offset;
    }
    Py_DECREF(d);
    if (off < 0) PyErr_Format(PyExc_TypeError, "request_facts: %s.%s is not a __slots__ slot", type->tp_name, name);
    return off;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value) {
    PyObject *old = SLOT(obj, off);
    Py_XINCREF(value);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

/* request_facts(cls, live, engine_module, python_wait): NativeRequest, NATIVE_LIVE, adaptcoll.runtime.engine
   and NativeRequest's Python Wait (what request_wait hands every case it does not take). */
static PyObject *request_facts(PyObject *module, PyObject *args) {
    PyObject *cls, *live, *engine_module, *wait;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyType_Type, &cls, &PySet_Type, &live, &PyModule_Type, &engine_module, &wait))
        return NULL;
    if (!PyFunction_Check(wait)) {
        PyErr_SetString(PyExc_TypeError, "request_facts: python_wait must be a Python function");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_SetString(PyExc_TypeError, "request_facts: the request class must be a Python class");
        return NULL;
    }
    Py_ssize_t o_req = slot_offset(type, "_req"), o_keep, o_done, o_reported;
    if (o_req < 0 || (o_keep = slot_offset(type, "_keep")) < 0 || (o_done = slot_offset(type, "_done")) < 0 ||
        (o_reported = slot_offset(type, "_reported")) < 0)
        return NULL;
    Py_INCREF(wait);
    PyObject *globals = PyModule_GetDict(engine_module); /* borrowed */
    Py_INCREF(globals);
    Py_XSETREF(engine_globals, globals);
    Py_XSETREF(req_wait_python, wait);
    Py_INCREF(live);
    Py_XSETREF(req_live, live);
    Py_INCREF(cls);
    Py_XSETREF(req_type, type);
    off_req = o_req, off_keep = o_keep, off_done = o_done, off_reported = o_reported;
    Py_RETURN_NONE;
}

static PyObject *make_native_request(PyObject *req, PyObject *keep) {
    PyObject *obj = req_type->tp_alloc(req_type, 0);
    if (obj == NULL) return NULL;
    slot_set(obj, off_req, req);
    slot_set(obj, off_keep, keep);
    slot_set(obj, off_done, Py_False);
    slot_set(obj, off_reported, Py_False);
    PyObject *id = PyLong_FromVoidPtr(obj); /* id(obj) */
    if (id == NULL || PySet_Add(req_live, id) < 0) {
        Py_XDECREF(id);
        Py_DECREF(obj);
        return NULL;
    }
    Py_DECREF(id);
    return obj;
}

/* 1 when the engine surely has nothing of adaptcoll's to progress (no requests, no polls, no compiled
   operation: what Engine.quiet() answers then), 0 when Python should look (quiet() also lets requests
   of finished operations through), -1 with an error set. The engine's request and poll lists are kept
   in place for its life (adaptcoll.runtime.engine.Engine), and so is a CompiledEngine's `ops`: they are
   read once per engine (and per compiled half), its identity checked each time. */
static PyObject *idle_engine, *idle_entries, *idle_watches; /* held */
static PyObject *idle_compiled, *idle_ops;                  /* held */

static int engine_idle(void) {
    PyObject *eng = PyDict_GetItemWithError(engine_globals, str_engine); /* borrowed */
    if (eng == NULL || eng == Py_None) return PyErr_Occurred() ? -1 : 0;
    PyObject *dict = PyObject_GenericGetDict(eng, NULL);
    if (dict == NULL) return -1;
    int idle = 0;
    if (eng != idle_engine) {
        PyObject *entries = PyDict_GetItemWithError(dict, str_entries);
        PyObject *watches = entries != NULL ? PyDict_GetItemWithError(dict, str_watches) : NULL;
        if (watches == NULL || !PyList_CheckExact(entries) || !PyList_CheckExact(watches)) goto done;
        Py_INCREF(eng);
        Py_INCREF(entries);
        Py_INCREF(watches);
        Py_XSETREF(idle_engine, eng);
        Py_XSETREF(idle_entries, entries);
        Py_XSETREF(idle_watches, watches);
    }
    if (PyList_GET_SIZE(idle_entries) != 0 || PyList_GET_SIZE(idle_watches) != 0) goto done;
    PyObject *compiled = PyDict_GetItemWithError(dict, str_compiled); /* borrowed */
    if (compiled == NULL) goto done;
    if (compiled == Py_None) {
        idle = 1;
        goto done;
    }
    if (compiled != idle_compiled) {
        Py_INCREF(compiled);
        PyObject *ops = PyObject_GetAttr(compiled, str_ops);
        if (ops == NULL || !PyDict_CheckExact(ops)) {
            Py_XDECREF(ops);
            Py_DECREF(compiled);
            goto done;
        }
        Py_XSETREF(idle_compiled, compiled);
        Py_XSETREF(idle_ops, ops);
    }
    idle = PyDict_GET_SIZE(idle_ops) == 0;
done:
    Py_DECREF(dict);
    return PyErr_Occurred() ? -1 : idle;
}

/* NativeRequest.Wait(status=None): with no status and nothing of adaptcoll's to progress, MPI's own Wait
   and the completion (what the Python Wait does then, in C); every other case is the Python Wait's. */
static PyObject *request_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (Py_TYPE(self) == req_type && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) &&
        (nargs == 0 || (nargs == 1 && args[0] == Py_None))) {
        PyObject *done = SLOT(self, off_done);
        if (done == Py_True) {
            slot_set(self, off_reported, Py_True);
            Py_RETURN_TRUE;
        }
        int idle = done == Py_False ? engine_idle() : 0;
        if (idle < 0) return NULL;
        PyObject *req = SLOT(self, off_req);
        if (idle && req != NULL) {
            Py_INCREF(req);
            PyObject *r = PyObject_CallMethodNoArgs(req, str_Wait);
            Py_DECREF(req);
            if (r == NULL) return NULL;
            Py_DECREF(r);
            slot_set(self, off_done, Py_True); /* _completed() */
            slot_set(self, off_keep, Py_None);
            PyObject *id = PyLong_FromVoidPtr(self);
            if (id == NULL) return NULL;
            int rc = PySet_Discard(req_live, id);
            Py_DECREF(id);
            if (rc < 0) return NULL;
            slot_set(self, off_reported, Py_True);
            Py_RETURN_TRUE;
        }
    }
    /* the Python Wait, as an unbound function: (self, *args) */
    Py_ssize_t n = nargs + 1 + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8], **all = n <= 8 ? small : PyMem_Malloc(n * sizeof(PyObject *));
    if (all == NULL) return PyErr_NoMemory();
    all[0] = self;
    for (Py_ssize_t k = 1; k < n; k++) all[k] = args[k - 1];
    PyObject *out = PyObject_Vectorcall(req_wait_python, all, nargs + 1, kwnames);
    if (all != small) PyMem_Free(all);
    return out;
}

static PyMethodDef request_wait_def = {
    "Wait", (PyCFunction)(void (*)(void))request_wait, METH_FASTCALL | METH_KEYWORDS,
    "Wait(status=None): MPI's own Wait when nothing of adaptcoll's needs progress (else the Python Wait); True."};

/* request_wait_method(): a method descriptor of NativeRequest for request_wait (NativeRequest.Wait = it). */
static PyObject *request_wait_method(PyObject *module, PyObject *unused) {
    if (req_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "request_wait_method before request_facts");
        return NULL;
    }
    return PyDescr_NewMethod(req_type, &request_wait_def);
}

/* A routed collective's native path in C (adaptcoll.forms.collectives: ibcast / ireduce / iallreduce and
   bcast / reduce / allreduce): called as a method of adaptcoll.Intracomm (a method descriptor: comm comes
   first), it does what the Python form's fast path does (its gate's test and count; for an I-form the
   set-up settled where Open MPI needs it and the NativeRequest keeping the buffers around mpi4py's
   request) and hands every other call, unchanged, to the Python form: keywords, another argument count,
   `sendbuf is recvbuf`, anything the gate does not let through. */
enum { IFORM_BCAST, IFORM_REDUCE, IFORM_ALLREDUCE, IFORM_KINDS };
static const int iform_min_args[IFORM_KINDS] = {2, 3, 3}; /* with comm */
static const int iform_max_args[IFORM_KINDS] = {3, 5, 4};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    int blocking;       /* Bcast / Reduce / Allreduce: mpi4py's result itself, no request */
    NativeGate *gate;
    PyObject *native;   /* mpi4py's method (MPI.Intracomm.Ibcast, ...) */
    PyObject *fallback; /* the Python form */
    PyObject *settle;   /* adaptcoll.state.comm_state.settle_setup, or None where MPI needs no settling */
    PyObject *in_place; /* MPI.IN_PLACE */
} NativeIForm;

static PyObject *iform_call(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    NativeIForm *self = (NativeIForm *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (req_type == NULL || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || nargs < iform_min_args[self->kind] ||
        nargs > iform_max_args[self->kind])
        goto python;
    PyObject *data = args[1];
    if (self->kind != IFORM_BCAST) {
        if (args[1] == args[2]) goto python; /* (the Python form's IN_PLACE reading) */
        if (args[1] == self->in_place) data = args[2];
    }
    int below = gate_test(self->gate, args[0], data);
    if (below < 0) return NULL;
    if (!below) goto python;
    if (self->settle != Py_None) {
        PyObject *r = PyObject_CallOneArg(self->settle, args[0]);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    PyObject *req = PyObject_Vectorcall(self->native, args, nargs, NULL);
    if (req == NULL || self->blocking) return req;
    PyObject *keep = self->kind == IFORM_BCAST ? Py_NewRef(args[1]) : PyTuple_Pack(2, args[1], args[2]);
    PyObject *out = keep != NULL ? make_native_request(req, keep) : NULL;
    Py_DECREF(req);
    Py_XDECREF(keep);
    return out;
python:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *iform_get(PyObject *obj, PyObject *instance, PyObject *owner) {
    if (instance == NULL || instance == Py_None) return Py_NewRef(obj);
    return PyMethod_New(obj, instance);
}

static PyObject *iform_doc(PyObject *obj, void *unused) { return PyObject_GetAttrString(((NativeIForm *)obj)->fallback, "__doc__"); }
static PyObject *iform_name(PyObject *obj, void *unused) { return PyObject_GetAttrString(((NativeIForm *)obj)->fallback, "__name__"); }

/* __doc__, __name__ and __wrapped__ are the Python form's (help() and inspect.signature read them) */
static PyGetSetDef iform_getset[] = {
    {"__doc__", iform_doc, NULL, "the Python form's docstring", NULL},
    {"__name__", iform_name, NULL, "the Python form's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef iform_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(NativeIForm, fallback), READONLY, "the Python form"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *iform_repr(PyObject *obj) {
    return PyUnicode_FromFormat("<adaptcoll native path in C for %R>", ((NativeIForm *)obj)->fallback);
}

static void iform_dealloc(PyObject *obj) {
    NativeIForm *self = (NativeIForm *)obj;
    Py_XDECREF(self->gate);
    Py_XDECREF(self->native);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->settle);
    Py_XDECREF(self->in_place);
    PyObject_Free(obj);
}

static PyTypeObject NativeIFormType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "adaptcoll_fastcalls.NativeIForm",
    .tp_doc = "A routed collective's native path in C, as a method of adaptcoll.Intracomm (adaptcoll.forms.collectives).",
    .tp_basicsize = sizeof(NativeIForm),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(NativeIForm, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = iform_get,
    .tp_getset = iform_getset,
    .tp_members = iform_members,
    .tp_repr = iform_repr,
    .tp_dealloc = iform_dealloc,
};

/* native_iform(kind, gate, native, fallback, settle, in_place, blocking) -> NativeIForm; kind 0 (I)bcast,
   1 (I)reduce, 2 (I)allreduce; `blocking`: the blocking form (mpi4py's result returned, no request made). */
static PyObject *native_iform(PyObject *module, PyObject *args) {
    int kind, blocking;
    PyObject *gate, *native, *fallback, *settle, *in_place;
    if (!PyArg_ParseTuple(args, "iO!OOOOp", &kind, &NativeGateType, &gate, &native, &fallback, &settle, &in_place,
                          &blocking))
        return NULL;
    if (kind < 0 || kind >= IFORM_KINDS) {
        PyErr_SetString(PyExc_ValueError, "native_iform: kind must be 0 (Ibcast), 1 (Ireduce) or 2 (Iallreduce)");
        return NULL;
    }
    if (!PyCallable_Check(native) || !PyCallable_Check(fallback) || (settle != Py_None && !PyCallable_Check(settle))) {
        PyErr_SetString(PyExc_TypeError, "native_iform: native, fallback and settle must be callable");
        return NULL;
    }
    if (req_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "native_iform before request_facts");
        return NULL;
    }
    NativeIForm *self = PyObject_New(NativeIForm, &NativeIFormType);
    if (self == NULL) return NULL;
    self->vectorcall = iform_call;
    self->kind = kind;
    self->blocking = blocking;
    self->gate = (NativeGate *)Py_NewRef(gate);
    self->native = Py_NewRef(native);
    self->fallback = Py_NewRef(fallback);
    self->settle = Py_NewRef(settle);
    self->in_place = Py_NewRef(in_place);
    return (PyObject *)self;
}

static PyObject *signatures(PyObject *module, PyObject *unused) {
    PyObject *out = PyTuple_New(SIG_COUNT);
    if (out == NULL) return NULL;
    for (int k = 0; k < SIG_COUNT; k++) {
        PyObject *s = PyUnicode_FromString(sig_names[k]);
        if (s == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, s);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"wrap", wrap, METH_VARARGS, "wrap(address, signature, name, release_gil): a CFunction"},
    {"signatures", signatures, METH_NOARGS, "The signatures wrap() knows"},
    {"native_gate", native_gate, METH_VARARGS, "native_gate(attr, key, count): the native wrapper's test in C"},
    {"spec_facts", spec_facts, METH_VARARGS, "spec_facts(host_types, sizes, fallback): what host_nbytes sizes"},
    {"host_cai", host_cai, METH_O, "host_cai(flag): every __cuda_array_interface__ pointer is host memory (no CUDA driver)"},
    {"host_nbytes", host_nbytes, METH_O, "host_nbytes(spec): adaptcoll.forms.spec_size.host_nbytes, common forms in C"},
    {"busy_marker", busy_marker, METH_VARARGS, "busy_marker(busy, conflict): forms.threads' check in C"},
    {"unchanged", (PyCFunction)(void (*)(void))unchanged, METH_FASTCALL,
     "unchanged(arrays, signatures): adaptcoll.decision.cache._unchanged in C"},
    {"request_facts", request_facts, METH_VARARGS, "request_facts(cls, live, engine_module, python_wait): NativeRequest's facts"},
    {"request_wait_method", request_wait_method, METH_NOARGS, "NativeRequest's Wait in C (a method descriptor)"},
    {"native_iform", native_iform, METH_VARARGS,
     "native_iform(kind, gate, native, fallback, settle, in_place, blocking): a routed call's native path in C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "adaptcoll_fastcalls", "Calls into adaptcoll's compiled progress path without ctypes.",
    -1, methods,
};

PyMODINIT_FUNC PyInit_adaptcoll_fastcalls(void) {
    if (PyType_Ready(&CFunctionType) < 0 || PyType_Ready(&BusyMarkerType) < 0 || PyType_Ready(&NativeGateType) < 0 ||
        PyType_Ready(&NativeIFormType) < 0)
        return NULL;
    str_handle = PyUnicode_InternFromString("handle");
    str_itemsize = PyUnicode_InternFromString("itemsize");
    str_dlpack = PyUnicode_InternFromString("__dlpack__");
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    str_cai = PyUnicode_InternFromString("__cuda_array_interface__");
    str_typestr = PyUnicode_InternFromString("typestr");
    str_shape = PyUnicode_InternFromString("shape");
    str_data = PyUnicode_InternFromString("data");
    str_cupy = PyUnicode_InternFromString("cupy");
    dlpack_kwnames = Py_BuildValue("(ss)", "max_version", "copy");
    dlpack_max_version = Py_BuildValue("(ii)", 1, 0);
    str_engine = PyUnicode_InternFromString("_engine");
    str_entries = PyUnicode_InternFromString("_entries");
    str_watches = PyUnicode_InternFromString("_watches");
    str_compiled = PyUnicode_InternFromString("compiled");
    str_ops = PyUnicode_InternFromString("ops");
    str_Wait = PyUnicode_InternFromString("Wait");
    if (str_handle == NULL || str_itemsize == NULL || str_engine == NULL || str_entries == NULL || str_watches == NULL ||
        str_compiled == NULL || str_ops == NULL || str_Wait == NULL || str_dlpack == NULL || str_dlpack_device == NULL ||
        str_cai == NULL || dlpack_kwnames == NULL || dlpack_max_version == NULL || str_typestr == NULL ||
        str_shape == NULL || str_data == NULL || str_cupy == NULL)
        return NULL;
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) return NULL;
    PyObject *nd = PyObject_GetAttrString(numpy, "ndarray");
    Py_DECREF(numpy);
    if (nd == NULL) return NULL;
    if (!PyType_Check(nd)) {
        Py_DECREF(nd);
        PyErr_SetString(PyExc_ImportError, "numpy.ndarray is not a type");
        return NULL;
    }
    ndarray_type = (PyTypeObject *)nd; /* (kept for the process's life) */
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&CFunctionType);
    if (PyModule_AddObject(m, "CFunction", (PyObject *)&CFunctionType) < 0) {
        Py_DECREF(&CFunctionType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
