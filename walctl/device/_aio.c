/* walctl.device._aio: the Linux native AIO system calls of walctl.device.aio in C (issue 31).
 *
 * Optional, like walctl.format._native: setup.py builds it when it can, and walctl/device/aio.py
 * falls back to the same calls through ctypes without it (or with WALCTL_NO_NATIVE=1). It holds
 * no walctl logic: one AIO context with one iocb per slot, filled and submitted in C (no ctypes
 * object per write), and completions handed back as one list per reap, the GIL released while
 * the kernel works or waits.
 *
 *   Context(depth, fd, resfd)        io_setup(depth); iocb i: a pwrite on fd, aio_data i;
 *                                    resfd >= 0: each completion signals that eventfd
 *   .ctx                             the context id (the address of the kernel's completion ring)
 *   .submit(slot, addr, nbytes, offset) -> 1 or -errno    fill slot's iocb and io_submit it
 *   .prepare(slot, addr, nbytes, offset)                  fill only (submitted by submit_slots)
 *   .submit_slots(slots, start)  -> submitted or -errno   io_submit the iocbs of slots[start:]
 *   .iocb(slot)                  -> (addr, nbytes, offset)
 *   .getevents(min_nr, timeout_s) -> [(slot, res), ...]   timeout_s None: wait for min_nr
 *                                    raises OSError (EINTR is retried)
 *   .destroy()                                            io_destroy (GIL released); idempotent
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/aio_abi.h>

typedef struct {
    PyObject_HEAD
    aio_context_t ctx;
    int depth;
    struct iocb *cbs;
} Context;

/* Per call, not per context: two threads may submit or reap at once (the GIL released meanwhile). */
#define STACK_SLOTS 64

static long sys_io_setup(unsigned nr, aio_context_t *ctx) { return syscall(SYS_io_setup, nr, ctx); }
static long sys_io_destroy(aio_context_t ctx) { return syscall(SYS_io_destroy, ctx); }
static long sys_io_submit(aio_context_t ctx, long n, struct iocb **cbs) { return syscall(SYS_io_submit, ctx, n, cbs); }
static long sys_io_getevents(aio_context_t ctx, long min_nr, long nr, struct io_event *ev, struct timespec *ts)
{
    return syscall(SYS_io_getevents, ctx, min_nr, nr, ev, ts);
}

static void ctx_free_arrays(Context *self)
{
    PyMem_Free(self->cbs);
    self->cbs = NULL;
}

static int Context_init(Context *self, PyObject *args, PyObject *kwds)
{
    int depth, fd, resfd;
    static char *kwlist[] = {"depth", "fd", "resfd", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iii", kwlist, &depth, &fd, &resfd))
        return -1;
    if (self->ctx || self->cbs) {
        PyErr_SetString(PyExc_RuntimeError, "Context is already set up");
        return -1;
    }
    if (depth < 1) {
        PyErr_Format(PyExc_ValueError, "depth must be >= 1, got %d", depth);
        return -1;
    }
    self->cbs = PyMem_Calloc((size_t)depth, sizeof(struct iocb));
    if (!self->cbs) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < depth; i++) {
        struct iocb *cb = &self->cbs[i];
        cb->aio_data = (uint64_t)i;
        cb->aio_lio_opcode = IOCB_CMD_PWRITE;
        cb->aio_fildes = (uint32_t)fd;
        if (resfd >= 0) {
            cb->aio_flags = IOCB_FLAG_RESFD;
            cb->aio_resfd = (uint32_t)resfd;
        }
    }
    aio_context_t ctx = 0;
    if (sys_io_setup((unsigned)depth, &ctx) < 0) {
        int code = errno;
        ctx_free_arrays(self);
        errno = code;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->ctx = ctx;
    self->depth = depth;
    return 0;
}

static void Context_dealloc(Context *self)
{
    if (self->ctx)
        sys_io_destroy(self->ctx);
    ctx_free_arrays(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_slot(Context *self, long slot)
{
    if (!self->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "the AIO context is destroyed");
        return -1;
    }
    if (slot < 0 || slot >= self->depth) {
        PyErr_Format(PyExc_IndexError, "slot %ld out of range", slot);
        return -1;
    }
    return 0;
}

static int fill(Context *self, PyObject *const *args, Py_ssize_t nargs, struct iocb **out)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "expected (slot, addr, nbytes, offset)");
        return -1;
    }
    long slot = PyLong_AsLong(args[0]);
    unsigned long long addr = PyLong_AsUnsignedLongLong(args[1]);
    long long nbytes = PyLong_AsLongLong(args[2]);
    long long offset = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || check_slot(self, slot) < 0)
        return -1;
    struct iocb *cb = &self->cbs[slot];
    cb->aio_buf = (uint64_t)addr;
    cb->aio_nbytes = (uint64_t)nbytes;
    cb->aio_offset = (int64_t)offset;
    *out = cb;
    return 0;
}

/* io_submit n iocbs; retries EINTR; returns the count submitted (> 0) or -errno. */
static long submit_n(Context *self, long n, struct iocb **cbs)
{
    long got;
    Py_BEGIN_ALLOW_THREADS
    do {
        got = sys_io_submit(self->ctx, n, cbs);
    } while (got < 0 && errno == EINTR);
    if (got < 0)
        got = -errno;
    else if (got == 0)
        got = -EAGAIN;
    Py_END_ALLOW_THREADS
    return got;
}

static PyObject *Context_submit(Context *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct iocb *cb;
    if (fill(self, args, nargs, &cb) < 0)
        return NULL;
    struct iocb *one[1] = {cb};
    return PyLong_FromLong(submit_n(self, 1, one));
}

static PyObject *Context_prepare(Context *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct iocb *cb;
    if (fill(self, args, nargs, &cb) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Context_submit_slots(Context *self, PyObject *args)
{
    PyObject *slots;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &slots, &start))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(slots) - start;
    if (start < 0 || n <= 0 || n > self->depth) {
        PyErr_SetString(PyExc_ValueError, "submit_slots: bad range of slots");
        return NULL;
    }
    struct iocb *stack[STACK_SLOTS];
    struct iocb **ptrs = n <= STACK_SLOTS ? stack : PyMem_Malloc((size_t)n * sizeof(struct iocb *));
    if (!ptrs)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long slot = PyLong_AsLong(PyList_GET_ITEM(slots, start + i));
        if ((slot == -1 && PyErr_Occurred()) || check_slot(self, slot) < 0) {
            if (ptrs != stack)
                PyMem_Free(ptrs);
            return NULL;
        }
        ptrs[i] = &self->cbs[slot];
    }
    long got = submit_n(self, (long)n, ptrs);
    if (ptrs != stack)
        PyMem_Free(ptrs);
    return PyLong_FromLong(got);
}

static PyObject *Context_iocb(Context *self, PyObject *arg)
{
    long slot = PyLong_AsLong(arg);
    if ((slot == -1 && PyErr_Occurred()) || check_slot(self, slot) < 0)
        return NULL;
    struct iocb *cb = &self->cbs[slot];
    return Py_BuildValue("(KKL)", (unsigned long long)cb->aio_buf, (unsigned long long)cb->aio_nbytes,
                         (long long)cb->aio_offset);
}

static PyObject *Context_getevents(Context *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "getevents(min_nr, timeout_s)");
        return NULL;
    }
    long min_nr = PyLong_AsLong(args[0]);
    if (min_nr == -1 && PyErr_Occurred())
        return NULL;
    if (!self->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "the AIO context is destroyed");
        return NULL;
    }
    if (min_nr < 0 || min_nr > self->depth) {
        PyErr_Format(PyExc_ValueError, "min_nr %ld out of range", min_nr);
        return NULL;
    }
    struct timespec ts, *tsp = NULL;
    if (args[1] != Py_None) {
        double t = PyFloat_AsDouble(args[1]);
        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (t < 0)
            t = 0;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        tsp = &ts;
    } else if (min_nr == 0) {
        ts.tv_sec = 0;
        ts.tv_nsec = 0;
        tsp = &ts;
    }
    struct io_event stack[STACK_SLOTS];
    struct io_event *events = self->depth <= STACK_SLOTS ? stack
                              : PyMem_Malloc((size_t)self->depth * sizeof(struct io_event));
    if (!events)
        return PyErr_NoMemory();
    long got;
    int code = 0;
    if (min_nr == 0) {
        /* Nothing to wait for: a plain look at the ring, the GIL kept. */
        do {
            got = sys_io_getevents(self->ctx, 0, self->depth, events, tsp);
        } while (got < 0 && errno == EINTR);
        if (got < 0)
            code = errno;
    } else {
        Py_BEGIN_ALLOW_THREADS
        do {
            got = sys_io_getevents(self->ctx, min_nr, self->depth, events, tsp);
        } while (got < 0 && errno == EINTR);
        if (got < 0)
            code = errno;
        Py_END_ALLOW_THREADS
    }
    PyObject *list = NULL;
    if (got < 0) {
        errno = code;
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    list = PyList_New(got);
    if (!list)
        goto out;
    for (long i = 0; i < got; i++) {
        PyObject *pair = Py_BuildValue("(kL)", (unsigned long)events[i].data, (long long)events[i].res);
        if (!pair) {
            Py_CLEAR(list);
            goto out;
        }
        PyList_SET_ITEM(list, i, pair);
    }
out:
    if (events != stack)
        PyMem_Free(events);
    return list;
}

static PyObject *Context_destroy(Context *self, PyObject *Py_UNUSED(ignored))
{
    aio_context_t ctx = self->ctx;
    if (ctx) {
        /* Marked destroyed first: a call from another thread meanwhile is refused, not sent to the kernel. */
        self->ctx = 0;
        /* io_destroy waits for a kernel grace period (~30 ms) once the context is idle: without the GIL,
         * so that walctl.device.aio can leave it to a daemon thread while the others run. */
        Py_BEGIN_ALLOW_THREADS
        sys_io_destroy(ctx);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Context_get_ctx(Context *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong((unsigned long long)self->ctx);
}

static PyObject *Context_get_depth(Context *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->depth);
}

static PyMethodDef Context_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Context_submit, METH_FASTCALL,
     "submit(slot, addr, nbytes, offset) -> 1 or -errno: fill the slot's iocb and io_submit it"},
    {"prepare", (PyCFunction)(void (*)(void))Context_prepare, METH_FASTCALL,
     "prepare(slot, addr, nbytes, offset): fill the slot's iocb (submit_slots submits it)"},
    {"submit_slots", (PyCFunction)Context_submit_slots, METH_VARARGS,
     "submit_slots(slots, start) -> submitted or -errno: io_submit the iocbs of slots[start:]"},
    {"iocb", (PyCFunction)Context_iocb, METH_O, "iocb(slot) -> (addr, nbytes, offset)"},
    {"getevents", (PyCFunction)(void (*)(void))Context_getevents, METH_FASTCALL,
     "getevents(min_nr, timeout_s) -> [(slot, res), ...]: io_getevents, the GIL released while it waits"},
    {"destroy", (PyCFunction)Context_destroy, METH_NOARGS, "destroy(): io_destroy (idempotent)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Context_getset[] = {
    {"ctx", (getter)Context_get_ctx, NULL, "the AIO context id (0 once destroyed)", NULL},
    {"depth", (getter)Context_get_depth, NULL, "iocbs (slots)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "walctl.device._aio.Context",
    .tp_basicsize = sizeof(Context),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Context(depth, fd, resfd): one Linux AIO context with depth pwrite iocbs on fd",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Context_init,
    .tp_dealloc = (destructor)Context_dealloc,
    .tp_methods = Context_methods,
    .tp_getset = Context_getset,
};

static struct PyModuleDef aio_module = {
    PyModuleDef_HEAD_INIT, "walctl.device._aio", "Linux native AIO system calls for walctl.device.aio.", -1, NULL,
};

PyMODINIT_FUNC PyInit__aio(void)
{
    if (PyType_Ready(&ContextType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&aio_module);
    if (!m)
        return NULL;
    Py_INCREF(&ContextType);
    if (PyModule_AddObject(m, "Context", (PyObject *)&ContextType) < 0) {
        Py_DECREF(&ContextType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
