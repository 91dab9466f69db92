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
   and the size of the buffer specifications a program writes in a loop (`host_nbytes`).

   Arguments are Python ints: 'n' a Py_ssize_t, 'i' a C int (OverflowError outside its range), 'p' an
   address (void *). The result is a Python int (None for 'v').
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <limits.h>
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
   adaptcoll.forms.spec_size.host_nbytes computes it: `[buf, count, datatype]` and `[buf, count, displ,
   datatype]` (list or tuple, `count` an int >= 0, `datatype` one of mpi4py's predefined datatype objects,
   `buf` of one of the exact host types) and a bare bytearray or bytes; -1 for every other form (Python
   sizes it). What those are, and the fallback, come from Python once (`spec_facts`). mpi4py checks the
   specification itself when the call goes native, as the Python path lets it. In Python the sizing of
   `[mmap, n, MPI.BYTE]` costs about 2,000 instructions; here about 100. */
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

static Py_ssize_t spec_nbytes(PyObject *spec) {
    if (spec_sizes == NULL) return -1;
    PyTypeObject *kind = Py_TYPE(spec);
    if (kind == &PyByteArray_Type) return PyByteArray_GET_SIZE(spec);
    if (kind == &PyBytes_Type) return PyBytes_GET_SIZE(spec);
    PyObject *buf, *count, *datatype;
    Py_ssize_t items;
    if (kind == &PyList_Type) {
        items = PyList_GET_SIZE(spec);
        if (items != 3 && items != 4) return -1;
        buf = PyList_GET_ITEM(spec, 0);
        count = PyList_GET_ITEM(spec, 1);
        datatype = PyList_GET_ITEM(spec, items - 1);
    } else if (kind == &PyTuple_Type) {
        items = PyTuple_GET_SIZE(spec);
        if (items != 3 && items != 4) return -1;
        buf = PyTuple_GET_ITEM(spec, 0);
        count = PyTuple_GET_ITEM(spec, 1);
        datatype = PyTuple_GET_ITEM(spec, items - 1);
    } else {
        return -1;
    }
    if (!PyLong_CheckExact(count)) return -1; /* ((count, displ) pairs, bools, ...: Python's) */
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(count, &overflow);
    if (overflow || n < 0) return -1;
    Py_ssize_t size = spec_datatype_size(datatype);
    if (size < 0) return -1;
    PyTypeObject *buf_kind = Py_TYPE(buf);
    int host = 0;
    for (Py_ssize_t k = 0, m = PyTuple_GET_SIZE(spec_host_types); k < m && !host; k++)
        host = (PyObject *)buf_kind == PyTuple_GET_ITEM(spec_host_types, k);
    if (!host) return -1;
    if (size > 0 && n > PY_SSIZE_T_MAX / size) return -1;
    return (Py_ssize_t)n * size;
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

static PyObject *gate_call(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    NativeGate *self = (NativeGate *)obj;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "a native gate takes (comm, array)");
        return NULL;
    }
    Py_ssize_t nbytes;
    if (Py_TYPE(args[1]) == ndarray_type) {
        nbytes = gate_nbytes(self, (PyArrayObject *)args[1]);
        if (nbytes < 0) return NULL;
    } else {
        nbytes = spec_nbytes(args[1]); /* a specification spec_nbytes sizes, else not ours: False */
        if (nbytes < 0) Py_RETURN_FALSE;
    }
    /* The thresholds from the communicator's own __dict__ (where adaptcoll.tune.choose puts them: no
       type attribute has that name), not through the generic attribute lookup, which walks mpi4py's
       class dicts first (about 300 instructions); no dict, or no entry yet: not below. */
    PyObject *dict = PyObject_GenericGetDict(args[0], NULL);
    if (dict == NULL) {
        PyErr_Clear();
        Py_RETURN_FALSE;
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
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
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
    {"host_nbytes", host_nbytes, METH_O, "host_nbytes(spec): adaptcoll.forms.spec_size.host_nbytes, common forms in C"},
    {"busy_marker", busy_marker, METH_VARARGS, "busy_marker(busy, conflict): forms.threads' check in C"},
    {"unchanged", (PyCFunction)(void (*)(void))unchanged, METH_FASTCALL,
     "unchanged(arrays, signatures): adaptcoll.decision.cache._unchanged in C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "adaptcoll_fastcalls", "Calls into adaptcoll's compiled progress path without ctypes.",
    -1, methods,
};

PyMODINIT_FUNC PyInit_adaptcoll_fastcalls(void) {
    if (PyType_Ready(&CFunctionType) < 0 || PyType_Ready(&BusyMarkerType) < 0 || PyType_Ready(&NativeGateType) < 0)
        return NULL;
    str_handle = PyUnicode_InternFromString("handle");
    str_itemsize = PyUnicode_InternFromString("itemsize");
    if (str_handle == NULL || str_itemsize == NULL) return NULL;
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
