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

/* The arguments both types' submit and prepare take: (slot, addr, nbytes, offset), the slot in [0, depth). */
typedef struct {
    long slot;
    unsigned long long addr;
    long long nbytes, offset;
} WriteArgs;

/* A slot argument: an int in [0, depth) (IndexError otherwise); 0, or -1 with the error set. */
static int parse_slot(PyObject *arg, int depth, long *slot)
{
    *slot = PyLong_AsLong(arg);
    if (*slot == -1 && PyErr_Occurred())
        return -1;
    if (*slot < 0 || *slot >= depth) {
        PyErr_Format(PyExc_IndexError, "slot %ld out of range", *slot);
        return -1;
    }
    return 0;
}

static int parse_write(PyObject *const *args, Py_ssize_t nargs, int depth, WriteArgs *w)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "expected (slot, addr, nbytes, offset)");
        return -1;
    }
    if (parse_slot(args[0], depth, &w->slot) < 0)
        return -1;
    w->addr = PyLong_AsUnsignedLongLong(args[1]);
    w->nbytes = PyLong_AsLongLong(args[2]);
    w->offset = PyLong_AsLongLong(args[3]);
    return PyErr_Occurred() ? -1 : 0;
}

/* submit_slots' (slots, start): the slots of slots[start:] (each in [0, depth)) into *out, a stack array
 * when they fit (STACK_SLOTS) else PyMem_Malloc'ed (free it when *out != stack); their count, or -1. */
static Py_ssize_t parse_slots(PyObject *args, int depth, long *stack, long **out)
{
    PyObject *slots;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &slots, &start))
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(slots) - start;
    if (start < 0 || n <= 0 || n > depth) {
        PyErr_SetString(PyExc_ValueError, "submit_slots: bad range of slots");
        return -1;
    }
    long *list = n <= STACK_SLOTS ? stack : PyMem_Malloc((size_t)n * sizeof(long));
    if (!list) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (parse_slot(PyList_GET_ITEM(slots, start + i), depth, &list[i]) < 0)
            goto bad;
    *out = list;
    return n;
bad:
    if (list != stack)
        PyMem_Free(list);
    return -1;
}

/* getevents' result: [(slot, res), ...] of n completions, the i-th at slots[i * stride] and res[i * stride]
 * (stride in units of each array's element: an io_event array is read in place). */
static PyObject *events_list(long n, const uint64_t *slots, const int64_t *res, size_t stride)
{
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (long i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(kL)", (unsigned long)slots[i * stride], (long long)res[i * stride]);
        if (!pair) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, pair);
    }
    return list;
}

/* getevents' (min_nr, timeout_s): min_nr in [0, depth], the timeout in seconds (>= 0), or -1 for None. */
static int parse_getevents(PyObject *const *args, Py_ssize_t nargs, int depth, long *min_nr, double *timeout)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "getevents(min_nr, timeout_s)");
        return -1;
    }
    *min_nr = PyLong_AsLong(args[0]);
    if (*min_nr == -1 && PyErr_Occurred())
        return -1;
    if (*min_nr < 0 || *min_nr > depth) {
        PyErr_Format(PyExc_ValueError, "min_nr %ld out of range", *min_nr);
        return -1;
    }
    *timeout = -1;
    if (args[1] != Py_None) {
        double t = PyFloat_AsDouble(args[1]);
        if (t == -1.0 && PyErr_Occurred())
            return -1;
        *timeout = t < 0 ? 0 : t;
    }
    return 0;
}

static int check_alive(Context *self)
{
    if (!self->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "the AIO context is destroyed");
        return -1;
    }
    return 0;
}

static int fill(Context *self, PyObject *const *args, Py_ssize_t nargs, struct iocb **out)
{
    WriteArgs w;
    if (parse_write(args, nargs, self->depth, &w) < 0 || check_alive(self) < 0)
        return -1;
    struct iocb *cb = &self->cbs[w.slot];
    cb->aio_buf = (uint64_t)w.addr;
    cb->aio_nbytes = (uint64_t)w.nbytes;
    cb->aio_offset = (int64_t)w.offset;
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
    long stack[STACK_SLOTS], *list;
    Py_ssize_t n = parse_slots(args, self->depth, stack, &list);
    if (n < 0)
        return NULL;
    struct iocb *ptr_stack[STACK_SLOTS];
    struct iocb **ptrs = n <= STACK_SLOTS ? ptr_stack : PyMem_Malloc((size_t)n * sizeof(struct iocb *));
    PyObject *result = NULL;
    if (!ptrs)
        PyErr_NoMemory();
    else if (check_alive(self) == 0) {
        for (Py_ssize_t i = 0; i < n; i++)
            ptrs[i] = &self->cbs[list[i]];
        result = PyLong_FromLong(submit_n(self, (long)n, ptrs));
    }
    if (ptrs && ptrs != ptr_stack)
        PyMem_Free(ptrs);
    if (list != stack)
        PyMem_Free(list);
    return result;
}

static PyObject *Context_iocb(Context *self, PyObject *arg)
{
    long slot;
    if (parse_slot(arg, self->depth, &slot) < 0 || check_alive(self) < 0)
        return NULL;
    struct iocb *cb = &self->cbs[slot];
    return Py_BuildValue("(KKL)", (unsigned long long)cb->aio_buf, (unsigned long long)cb->aio_nbytes,
                         (long long)cb->aio_offset);
}

static PyObject *Context_getevents(Context *self, PyObject *const *args, Py_ssize_t nargs)
{
    long min_nr;
    double t;
    if (parse_getevents(args, nargs, self->depth, &min_nr, &t) < 0)
        return NULL;
    if (!self->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "the AIO context is destroyed");
        return NULL;
    }
    struct timespec ts, *tsp = NULL;
    if (t >= 0) {
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
    _Static_assert(sizeof(struct io_event) % sizeof(uint64_t) == 0, "io_event: whole 64-bit words");
    list = events_list(got, (const uint64_t *)&events[0].data, (const int64_t *)&events[0].res,
                       sizeof(struct io_event) / sizeof(uint64_t));
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


/* ---- io_uring: Ring, the same calls over one ring (walctl's default engine where the kernel has it) ----
 *
 * Why: an AIO context's teardown waits for two RCU grace periods (io_destroy, or exit_aio at the
 * process's exit: ~30 ms on this kernel, a fifth of a one-record `walctl append`); a ring's is
 * asynchronous (closing its fd returns at once). fio's io_uring engine also wrote more per second
 * than its libaio one on the loop devices of issue 31.
 *
 *   Ring(depth, fd, resfd)              io_uring_setup(depth); SQE i: a write on fd, user_data i;
 *                                       resfd >= 0: registered, signalled as completions are posted
 *   .waiting()                -> bool   completions are posted and not reaped (no system call)
 *   submit / prepare / submit_slots / iocb / getevents / destroy: as Context's
 *
 * The rings are shared by the threads that submit (the appender, a completion callback) and reap (the
 * reaper, a poll): one mutex per ring, taken with the GIL released. A submission the kernel refuses
 * (io_uring_enter < 0) is taken back off the submission ring (its tail reset), so a write reported
 * refused never starts later. destroy() may run while other threads are inside a call: every call
 * that touches the rings is counted in (``users``) and refused once ``closing`` is set; a waiter
 * waits in slices of WAIT_SLICE_S and leaves when it sees ``closing``; destroy() unmaps only once no
 * call is inside and every write submitted has completed (as io_destroy waits for them). Completions
 * reach the submitting thread as the kernel's task work, by an interrupt if it is running (no
 * COOP_TASKRUN: an acknowledgement must not wait for the appender's next system call). Requires the
 * features of Linux 5.11 (EXT_ARG: a timed wait); where the ring cannot be set up, Ring() raises
 * OSError and walctl.device.aio uses a Context.
 */
#if defined(__has_include)
#if __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#endif
#endif

#if defined(IORING_FEAT_EXT_ARG) && defined(IORING_ENTER_EXT_ARG)
#define WALCTL_HAVE_URING 1
#include <pthread.h>
#include <sys/mman.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#define __NR_io_uring_enter 426
#define __NR_io_uring_register 427
#endif

typedef struct {
    PyObject_HEAD
    int ring_fd;       /* -1: not set up, or destroyed */
    int fd;            /* the device written */
    int depth;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_map_len, cq_map_len, sqes_len;
    uint64_t *addr;
    uint64_t *nbytes;
    int64_t *offset;
    unsigned long long submitted, reaped; /* under sq_lock, cq_lock: the writes in flight are the difference */
    pthread_mutex_t sq_lock, cq_lock;
    int locks_ready;
    int closing;  /* destroy() began: calls are refused (atomic) */
    int users;    /* calls inside that touch the rings (atomic) */
} Ring;

#define WAIT_SLICE_S 0.05  /* a waiter looks at ``closing`` this often */

static long sys_uring_setup(unsigned entries, struct io_uring_params *p)
{
    return syscall(__NR_io_uring_setup, entries, p);
}
static long sys_uring_enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags, void *arg, size_t argsz)
{
    return syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, arg, argsz);
}
static long sys_uring_register(int fd, unsigned op, void *arg, unsigned nr)
{
    return syscall(__NR_io_uring_register, fd, op, arg, nr);
}

static void ring_unmap(Ring *self)
{
    if (self->sqes && self->sqes != MAP_FAILED)
        munmap(self->sqes, self->sqes_len);
    if (self->cq_map && self->cq_map != MAP_FAILED && self->cq_map != self->sq_map)
        munmap(self->cq_map, self->cq_map_len);
    if (self->sq_map && self->sq_map != MAP_FAILED)
        munmap(self->sq_map, self->sq_map_len);
    self->sqes = NULL;
    self->sq_map = self->cq_map = NULL;
    if (self->ring_fd >= 0)
        close(self->ring_fd);
    self->ring_fd = -1;
}

static void ring_free_arrays(Ring *self)
{
    PyMem_Free(self->addr);
    PyMem_Free(self->nbytes);
    PyMem_Free(self->offset);
    self->addr = NULL;
    self->nbytes = NULL;
    self->offset = NULL;
}

static PyObject *Ring_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Ring *self = (Ring *)type->tp_alloc(type, 0);
    if (self)
        self->ring_fd = -1;
    return (PyObject *)self;
}

/* Set up the ring; 0, or -errno (nothing left mapped or open). */
static int ring_setup(Ring *self, int depth)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int rfd = (int)sys_uring_setup((unsigned)depth, &p);
    if (rfd < 0)
        return -errno;
    self->ring_fd = rfd;
    if (!(p.features & IORING_FEAT_EXT_ARG) || !(p.features & IORING_FEAT_NODROP) || p.sq_entries < (unsigned)depth) {
        ring_unmap(self);
        return -ENOSYS;
    }
    self->sq_map_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    self->cq_map_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single) {
        if (self->cq_map_len > self->sq_map_len)
            self->sq_map_len = self->cq_map_len;
        self->cq_map_len = self->sq_map_len;
    }
    self->sq_map = mmap(NULL, self->sq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rfd,
                        IORING_OFF_SQ_RING);
    if (self->sq_map == MAP_FAILED) {
        int code = errno;
        self->sq_map = NULL;
        ring_unmap(self);
        return -code;
    }
    self->cq_map = single ? self->sq_map
                          : mmap(NULL, self->cq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rfd,
                                 IORING_OFF_CQ_RING);
    if (self->cq_map == MAP_FAILED) {
        int code = errno;
        self->cq_map = NULL;
        ring_unmap(self);
        return -code;
    }
    self->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    self->sqes = mmap(NULL, self->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rfd, IORING_OFF_SQES);
    if (self->sqes == MAP_FAILED) {
        int code = errno;
        self->sqes = NULL;
        ring_unmap(self);
        return -code;
    }
    char *sq = self->sq_map, *cq = self->cq_map;
    self->sq_head = (unsigned *)(sq + p.sq_off.head);
    self->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    self->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    self->sq_array = (unsigned *)(sq + p.sq_off.array);
    self->cq_head = (unsigned *)(cq + p.cq_off.head);
    self->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    self->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    self->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}

static int Ring_init(Ring *self, PyObject *args, PyObject *kwds)
{
    int depth, fd, resfd;
    static char *kwlist[] = {"depth", "fd", "resfd", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iii", kwlist, &depth, &fd, &resfd))
        return -1;
    if (self->ring_fd >= 0 || self->addr) {
        PyErr_SetString(PyExc_RuntimeError, "Ring is already set up");
        return -1;
    }
    if (depth < 1) {
        PyErr_Format(PyExc_ValueError, "depth must be >= 1, got %d", depth);
        return -1;
    }
    if (depth > 4096) {  /* io_uring's entries; an AIO context may still take it (OSError: the caller falls back) */
        errno = EINVAL;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->addr = PyMem_Calloc((size_t)depth, sizeof(uint64_t));
    self->nbytes = PyMem_Calloc((size_t)depth, sizeof(uint64_t));
    self->offset = PyMem_Calloc((size_t)depth, sizeof(int64_t));
    if (!self->addr || !self->nbytes || !self->offset) {
        ring_free_arrays(self);
        PyErr_NoMemory();
        return -1;
    }
    int got = ring_setup(self, depth);
    if (got == 0 && resfd >= 0 && sys_uring_register(self->ring_fd, IORING_REGISTER_EVENTFD, &resfd, 1) < 0) {
        got = -errno;
        ring_unmap(self);
    }
    if (got < 0) {
        ring_free_arrays(self);
        errno = -got;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (!self->locks_ready) {
        pthread_mutex_init(&self->sq_lock, NULL);
        pthread_mutex_init(&self->cq_lock, NULL);
        self->locks_ready = 1;
    }
    self->fd = fd;
    self->depth = depth;
    self->submitted = self->reaped = 0;
    self->closing = 0;
    self->users = 0;
    return 0;
}

/* A call that touches the rings: counted in, or refused (-1, RuntimeError set) once destroy() began.
 * Sequentially consistent on both sides: destroy() sets closing then reads users, a call adds itself
 * to users then reads closing; one of the two sees the other. */
static int ring_enter_call(Ring *self)
{
    __atomic_add_fetch(&self->users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&self->closing, __ATOMIC_SEQ_CST) || self->ring_fd < 0) {
        __atomic_sub_fetch(&self->users, 1, __ATOMIC_SEQ_CST);
        PyErr_SetString(PyExc_RuntimeError, "the io_uring ring is destroyed");
        return -1;
    }
    return 0;
}

static void ring_leave_call(Ring *self)
{
    __atomic_sub_fetch(&self->users, 1, __ATOMIC_SEQ_CST);
}

static int ring_wait(Ring *self, unsigned want, double deadline);

/* Unmap and close the ring once no call is inside and the writes in flight have completed; the caller
 * set ``closing`` (the GIL may be held or not: nothing here touches Python). */
static void ring_shut(Ring *self)
{
    while (__atomic_load_n(&self->users, __ATOMIC_SEQ_CST) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (;;) {
        unsigned posted = __atomic_load_n(self->cq_tail, __ATOMIC_ACQUIRE) - *self->cq_head;
        unsigned long long left = self->submitted - self->reaped;
        if (posted >= left)
            break;
        int waited = ring_wait(self, (unsigned)left, -1);
        if (waited < 0 && waited != -ETIME)
            break;  /* the kernel refuses to wait (never seen): closing the ring cancels the rest */
    }
    ring_unmap(self);
}

static void Ring_dealloc(Ring *self)
{
    /* Never destroyed: the writes in flight are waited for, as destroy() does (no call is inside:
     * each holds a reference). */
    if (self->ring_fd >= 0 && !__atomic_exchange_n(&self->closing, 1, __ATOMIC_SEQ_CST))
        ring_shut(self);
    ring_unmap(self);
    ring_free_arrays(self);
    if (self->locks_ready) {
        pthread_mutex_destroy(&self->sq_lock);
        pthread_mutex_destroy(&self->cq_lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ring_check_alive(Ring *self)
{
    if (self->ring_fd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the io_uring ring is destroyed");
        return -1;
    }
    return 0;
}

static int ring_fill(Ring *self, PyObject *const *args, Py_ssize_t nargs, long *slot_out)
{
    WriteArgs w;
    if (parse_write(args, nargs, self->depth, &w) < 0 || ring_check_alive(self) < 0)
        return -1;
    if (w.nbytes < 0 || w.nbytes > 0x7ffff000LL || w.offset < 0) {
        PyErr_SetString(PyExc_ValueError, "bad length or offset");
        return -1;
    }
    self->addr[w.slot] = (uint64_t)w.addr;
    self->nbytes[w.slot] = (uint64_t)w.nbytes;
    self->offset[w.slot] = (int64_t)w.offset;
    *slot_out = w.slot;
    return 0;
}

/* Queue the writes of slots[0:n] and io_uring_enter them, the GIL released; the count the kernel took
 * (> 0) or -errno. Those it did not take are taken back off the ring: they never start. */
static long ring_submit_n(Ring *self, long n, const long *slots)
{
    long got;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->sq_lock);
    unsigned head0 = __atomic_load_n(self->sq_head, __ATOMIC_ACQUIRE);
    unsigned tail0 = *self->sq_tail, tail = tail0, mask = *self->sq_mask;
    for (long i = 0; i < n; i++) {
        long slot = slots[i];
        struct io_uring_sqe *sqe = &self->sqes[slot];
        memset(sqe, 0, sizeof *sqe);
        sqe->opcode = IORING_OP_WRITE;
        sqe->fd = self->fd;
        sqe->addr = self->addr[slot];
        sqe->len = (unsigned)self->nbytes[slot];
        sqe->off = (unsigned long long)self->offset[slot];
        sqe->user_data = (unsigned long long)slot;
        self->sq_array[tail & mask] = (unsigned)slot;
        tail++;
    }
    __atomic_store_n(self->sq_tail, tail, __ATOMIC_RELEASE);
    do {
        got = sys_uring_enter(self->ring_fd, (unsigned)n, 0, 0, NULL, 0);
    } while (got < 0 && errno == EINTR && __atomic_load_n(self->sq_head, __ATOMIC_ACQUIRE) == head0);
    unsigned taken = __atomic_load_n(self->sq_head, __ATOMIC_ACQUIRE) - head0;
    if (got < 0)
        got = taken ? (long)taken : -errno;
    else if (got == 0)
        got = -EAGAIN;
    if ((long)taken < n)  /* not taken by the kernel: off the ring, so that they never start */
        __atomic_store_n(self->sq_tail, tail0 + taken, __ATOMIC_RELEASE);
    self->submitted += taken;
    pthread_mutex_unlock(&self->sq_lock);
    Py_END_ALLOW_THREADS
    return got;
}

static PyObject *Ring_submit(Ring *self, PyObject *const *args, Py_ssize_t nargs)
{
    long slot;
    if (ring_fill(self, args, nargs, &slot) < 0 || ring_enter_call(self) < 0)
        return NULL;
    long got = ring_submit_n(self, 1, &slot);
    ring_leave_call(self);
    return PyLong_FromLong(got);
}

static PyObject *Ring_prepare(Ring *self, PyObject *const *args, Py_ssize_t nargs)
{
    long slot;
    if (ring_fill(self, args, nargs, &slot) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Ring_submit_slots(Ring *self, PyObject *args)
{
    long stack[STACK_SLOTS], *list;
    Py_ssize_t n = parse_slots(args, self->depth, stack, &list);
    if (n < 0)
        return NULL;
    PyObject *result = NULL;
    if (ring_enter_call(self) == 0) {
        result = PyLong_FromLong(ring_submit_n(self, (long)n, list));
        ring_leave_call(self);
    }
    if (list != stack)
        PyMem_Free(list);
    return result;
}

static PyObject *Ring_iocb(Ring *self, PyObject *arg)
{
    long slot;
    if (parse_slot(arg, self->depth, &slot) < 0 || ring_check_alive(self) < 0)
        return NULL;
    return Py_BuildValue("(KKL)", (unsigned long long)self->addr[slot], (unsigned long long)self->nbytes[slot],
                         (long long)self->offset[slot]);
}

/* Take the posted completions (at most max) into slots/res; the count. Call with cq_lock held. */
static long ring_take(Ring *self, long max, uint64_t *slots, int64_t *res)
{
    unsigned head = *self->cq_head;
    unsigned tail = __atomic_load_n(self->cq_tail, __ATOMIC_ACQUIRE);
    unsigned mask = *self->cq_mask;
    long got = 0;
    while (head != tail && got < max) {
        struct io_uring_cqe *cqe = &self->cqes[head & mask];
        slots[got] = (uint64_t)cqe->user_data;
        res[got] = (int64_t)cqe->res;
        got++;
        head++;
    }
    __atomic_store_n(self->cq_head, head, __ATOMIC_RELEASE);
    self->reaped += (unsigned long long)got;
    return got;
}

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Wait (the GIL released by the caller) until at least want completions are posted, or the deadline
 * (< 0: none) passes: 0, -ETIME at the deadline, -ECANCELED once destroy() began (seen between slices
 * of WAIT_SLICE_S), or -errno. */
static int ring_wait(Ring *self, unsigned want, double deadline)
{
    for (;;) {
        double slice = WAIT_SLICE_S;
        if (deadline >= 0) {
            double left = deadline - mono_now();
            if (left <= 0)
                return -ETIME;
            if (left < slice)
                slice = left;
        }
        struct io_uring_getevents_arg arg;
        struct __kernel_timespec ts;
        memset(&arg, 0, sizeof arg);
        ts.tv_sec = 0;
        ts.tv_nsec = (long long)(slice * 1e9);
        arg.ts = (unsigned long long)(uintptr_t)&ts;
        long got = sys_uring_enter(self->ring_fd, 0, want, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg,
                                   sizeof arg);
        if (got >= 0)
            return 0;
        if (errno != EINTR && errno != ETIME)
            return -errno;
        /* a slice passed (or a signal): a destroy() waiting for this call to leave? (ring_shut's own
         * waits pass: users is 0 then, and it set closing itself) */
        if (__atomic_load_n(&self->users, __ATOMIC_SEQ_CST) > 0 && __atomic_load_n(&self->closing, __ATOMIC_SEQ_CST))
            return -ECANCELED;
    }
}

static PyObject *Ring_getevents(Ring *self, PyObject *const *args, Py_ssize_t nargs)
{
    long min_nr;
    double t;
    if (parse_getevents(args, nargs, self->depth, &min_nr, &t) < 0)
        return NULL;
    double deadline = t < 0 ? -1 : mono_now() + t;
    if (ring_enter_call(self) < 0)
        return NULL;
    uint64_t stack_slots[STACK_SLOTS];
    int64_t stack_res[STACK_SLOTS];
    uint64_t *slots = self->depth <= STACK_SLOTS ? stack_slots : PyMem_Malloc((size_t)self->depth * sizeof(uint64_t));
    int64_t *res = self->depth <= STACK_SLOTS ? stack_res : PyMem_Malloc((size_t)self->depth * sizeof(int64_t));
    PyObject *list = NULL;
    if (!slots || !res) {
        PyErr_NoMemory();
        goto out;
    }
    long got = 0;
    int code = 0;
    if (min_nr == 0) {
        /* A plain look at the ring, the GIL kept (as Context's: no wait). */
        pthread_mutex_lock(&self->cq_lock);
        got = ring_take(self, self->depth, slots, res);
        pthread_mutex_unlock(&self->cq_lock);
    } else {
        Py_BEGIN_ALLOW_THREADS
        int timed_out = 0;  /* at the deadline: what is posted then, and no more waiting */
        for (;;) {
            pthread_mutex_lock(&self->cq_lock);
            got += ring_take(self, self->depth - got, slots + got, res + got);
            pthread_mutex_unlock(&self->cq_lock);
            if (got >= min_nr || timed_out)
                break;
            int waited = ring_wait(self, (unsigned)(min_nr - got), deadline);
            if (waited == -ETIME) {
                timed_out = 1;
            } else if (waited < 0) {
                code = -waited;
                break;
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (code && !got) {
        errno = code == ECANCELED ? EINVAL : code;  /* destroyed meanwhile: io_getevents's EINVAL */
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    list = events_list(got, slots, res, 1);
out:
    ring_leave_call(self);
    if (slots && slots != stack_slots)
        PyMem_Free(slots);
    if (res && res != stack_res)
        PyMem_Free(res);
    return list;
}

static PyObject *Ring_waiting(Ring *self, PyObject *Py_UNUSED(ignored))
{
    if (ring_enter_call(self) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int posted = __atomic_load_n(self->cq_tail, __ATOMIC_ACQUIRE) != __atomic_load_n(self->cq_head, __ATOMIC_RELAXED);
    ring_leave_call(self);
    return PyBool_FromLong(posted);
}

static PyObject *Ring_destroy(Ring *self, PyObject *Py_UNUSED(ignored))
{
    /* The first call destroys (another at the same time returns at once, as Context's does); calls
     * inside are waited for (a waiter leaves within WAIT_SLICE_S), then the writes in flight. */
    if (self->ring_fd >= 0 && !__atomic_exchange_n(&self->closing, 1, __ATOMIC_SEQ_CST)) {
        Py_BEGIN_ALLOW_THREADS
        ring_shut(self);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Ring_get_depth(Ring *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->depth);
}

static PyObject *Ring_get_ctx(Ring *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(0);
}

static PyMethodDef Ring_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Ring_submit, METH_FASTCALL,
     "submit(slot, addr, nbytes, offset) -> 1 or -errno: queue the slot's write and io_uring_enter it"},
    {"prepare", (PyCFunction)(void (*)(void))Ring_prepare, METH_FASTCALL,
     "prepare(slot, addr, nbytes, offset): set the slot's write (submit_slots submits it)"},
    {"submit_slots", (PyCFunction)Ring_submit_slots, METH_VARARGS,
     "submit_slots(slots, start) -> submitted or -errno: queue and enter the writes of slots[start:]"},
    {"iocb", (PyCFunction)Ring_iocb, METH_O, "iocb(slot) -> (addr, nbytes, offset)"},
    {"getevents", (PyCFunction)(void (*)(void))Ring_getevents, METH_FASTCALL,
     "getevents(min_nr, timeout_s) -> [(slot, res), ...]: the GIL released while it waits"},
    {"waiting", (PyCFunction)Ring_waiting, METH_NOARGS, "waiting() -> True if completions wait to be reaped"},
    {"destroy", (PyCFunction)Ring_destroy, METH_NOARGS,
     "destroy(): wait for writes in flight, unmap and close the ring (idempotent)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"depth", (getter)Ring_get_depth, NULL, "slots", NULL},
    {"ctx", (getter)Ring_get_ctx, NULL, "0: a ring has no AIO context", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "walctl.device._aio.Ring",
    .tp_basicsize = sizeof(Ring),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(depth, fd, resfd): one io_uring with depth write slots on fd",
    .tp_new = Ring_new,
    .tp_init = (initproc)Ring_init,
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
};
#endif /* io_uring */

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
#ifdef WALCTL_HAVE_URING
    if (PyType_Ready(&RingType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RingType);
    if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0) {
        Py_DECREF(&RingType);
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
