"""Asynchronous durable writes, io_uring or Linux native AIO (io_submit / io_getevents): ``AioWriteQueue``.

The system calls go through walctl.device._aio, a small optional C extension (issue 31: iocbs
filled in C, completions handed back as one list per reap, no ctypes object per write), or,
when it is not built or WALCTL_NO_NATIVE is set, through ctypes (libc's syscall()). Both
backends offer the same calls (``_CtypesContext`` here is the twin of ``_aio.Context``);
``AioWriteQueue.backend`` says which one a queue uses. The extension's io_uring ring (``_aio.Ring``,
the same calls) is taken where the kernel sets one up (``engine`` "io_uring"), else an AIO context
("aio"): an AIO context's teardown waits out RCU grace periods (~30 ms at every process's exit, a
fifth of a one-record append), a ring's is asynchronous (issue 31).

See walctl.device.writequeue for the WriteQueue contract it keeps.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import sys
import threading
import time
from typing import Callable

from walctl.device.base import WriteDone, io_failure
from walctl.device.buffers import ALIGN, buffer_address, check_aligned, check_buffer
from walctl.device.fdio import DirectDevice
from walctl.device.signals import signals_deferred
from walctl.errors import IOFailure
from walctl.native import load_extension

# (io_setup, io_destroy, io_getevents, io_submit) syscall numbers per architecture.
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_PWRITE = 1
# Buffers whose checked view an AioWriteQueue keeps (the WAL writer reuses a few).
_VIEW_CACHE_SIZE = 64


def native_aio():
    """walctl.device._aio, or None: not built, or WALCTL_NO_NATIVE set (walctl.native's rule, the
    format extension's too)."""
    return load_extension("walctl.device._aio")


class _IoCb(ctypes.Structure):
    """struct iocb of <linux/aio_abi.h>, little-endian layout (64 bytes)."""

    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
                ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
                ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64), ("aio_flags", ctypes.c_uint32),
                ("aio_resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    """struct io_event of <linux/aio_abi.h>."""

    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = None


def _aio_syscall():
    """libc's syscall(2) for the AIO calls; OSError(ENOSYS) where walctl does not know them."""
    global _libc
    if platform.machine() not in _AIO_SYSCALLS or sys.byteorder != "little":
        raise OSError(errno.ENOSYS, f"no native AIO support for {platform.machine()}")
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _libc = libc
    return _libc.syscall


class _CtypesContext:
    """The ctypes twin of walctl.device._aio.Context: one AIO context, one pwrite iocb per slot.

    submit / submit_slots return the number submitted or -errno (EINTR retried); getevents
    returns [(slot, res), ...] and raises OSError.
    """

    def __init__(self, depth: int, fd: int, resfd: int):
        syscall = _aio_syscall()
        nr_setup, self._nr_destroy, nr_getevents, nr_submit = _AIO_SYSCALLS[platform.machine()]
        self._syscall = syscall
        self.depth = depth
        ctx = ctypes.c_ulong(0)
        if syscall(ctypes.c_long(nr_setup), ctypes.c_long(depth), ctypes.byref(ctx)) < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"io_setup: {os.strerror(code)}")
        self.ctx = ctx.value
        self._ctx = ctypes.c_ulong(ctx.value)
        self._cbs = (_IoCb * depth)()
        self._cb_ptrs = [(ctypes.POINTER(_IoCb) * 1)(ctypes.pointer(cb)) for cb in self._cbs]
        self._cb_addrs = [ctypes.addressof(cb) for cb in self._cbs]
        # The syscall numbers as ctypes values, built once: these calls are made per write.
        self._c_submit = ctypes.c_long(nr_submit)
        self._c_getevents = ctypes.c_long(nr_getevents)
        self._c_counts = [ctypes.c_long(n) for n in range(depth + 1)]
        for slot, cb in enumerate(self._cbs):
            cb.aio_data = slot
            cb.aio_lio_opcode = _IOCB_CMD_PWRITE
            cb.aio_fildes = fd
            if resfd >= 0:
                cb.aio_flags = _IOCB_FLAG_RESFD
                cb.aio_resfd = resfd
        self._no_wait = _Timespec(0, 0)
        self._timeout: tuple[float, _Timespec] | None = None  # the last timeout, converted
        self._local = threading.local()  # per thread: its io_event and io_submit arrays

    def prepare(self, slot: int, addr: int, nbytes: int, offset: int) -> None:
        cb = self._cbs[slot]
        cb.aio_buf = addr
        cb.aio_nbytes = nbytes
        cb.aio_offset = offset

    def submit(self, slot: int, addr: int, nbytes: int, offset: int) -> int:
        cb = self._cbs[slot]
        cb.aio_buf = addr
        cb.aio_nbytes = nbytes
        cb.aio_offset = offset
        return self._submit(self._c_counts[1], self._cb_ptrs[slot])

    def submit_slots(self, slots: list[int], start: int) -> int:
        local = self._local
        array = getattr(local, "batch", None)
        if array is None:
            array = local.batch = (ctypes.c_void_p * self.depth)()
        addrs = self._cb_addrs
        for i, slot in enumerate(slots[start:]):
            array[i] = addrs[slot]
        return self._submit(self._c_counts[len(slots) - start], array)

    def _submit(self, count, array) -> int:
        while True:
            got = self._syscall(self._c_submit, self._ctx, count, array)
            if got > 0:
                return got
            code = ctypes.get_errno() if got < 0 else errno.EAGAIN
            if code != errno.EINTR:
                return -code

    def iocb(self, slot: int) -> tuple[int, int, int]:
        cb = self._cbs[slot]
        return cb.aio_buf, cb.aio_nbytes, cb.aio_offset

    def getevents(self, min_nr: int, timeout_s: float | None) -> list[tuple[int, int]]:
        local = self._local
        events = getattr(local, "events", None)
        if events is None:
            events = local.events = (_IoEvent * self.depth)()
            # The same memory as int64s: 4 per io_event (data, obj, res, res2), read without
            # building a ctypes object per event.
            local.words = memoryview(events).cast("B").cast("q")
        if min_nr == 0:
            timeout = self._no_wait
        elif timeout_s is None:
            timeout = None
        else:
            cached = self._timeout
            if cached is None or cached[0] != timeout_s:
                cached = self._timeout = (timeout_s, _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9)))
            timeout = cached[1]
        while True:
            # ctypes releases the GIL for the call: other threads run while this one waits.
            got = self._syscall(self._c_getevents, self._ctx, self._c_counts[min_nr], self._c_counts[self.depth],
                                events, ctypes.byref(timeout) if timeout is not None else None)
            if got >= 0:
                break
            code = ctypes.get_errno()
            if code != errno.EINTR:
                raise OSError(code, os.strerror(code))
        words = local.words
        return [(words[i], words[i + 2]) for i in range(0, 4 * got, 4)]

    def destroy(self) -> None:
        if self.ctx:
            self._syscall(ctypes.c_long(self._nr_destroy), self._ctx)
            self.ctx = 0


# Daemon threads destroying idle AIO contexts (destroy_later), kept until they are seen to have ended.
_destroying: list[threading.Thread] = []
_destroying_lock = threading.Lock()


def destroy_later(io) -> None:
    """``io.destroy()`` on a daemon thread: io_destroy of an idle context returns only after an RCU grace
    period (~30 ms on this kernel; most of a one-record `walctl append`'s close, and of every in-process
    test's), but the caller need not wait for it: nothing is in flight, and the context's ring is no
    longer read. One thread per context, so a burst of closes is not queued behind each other's grace
    periods (no context piles up against aio-max-nr); the destroy releases the GIL while it waits. A
    process that exits first loses nothing: io_destroy has already taken the context out of the
    process's table, or exit does it."""
    thread = threading.Thread(target=io.destroy, name="walctl-aio-destroy", daemon=True)
    with _destroying_lock:
        _destroying[:] = [t for t in _destroying if t.is_alive()]
        _destroying.append(thread)
    thread.start()


def settle_destroys(timeout_s: float | None = None) -> bool:
    """Wait until the contexts handed to destroy_later are destroyed (tests, and a caller that counts
    /proc/sys/fs/aio-nr); True when none is left."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with _destroying_lock:
        threads = list(_destroying)
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _destroying_lock:
        _destroying[:] = [t for t in _destroying if t.is_alive()]
        return not _destroying


def _open_context(module, kind: str | None, depth: int, fd: int, resfd: int):
    """The queue's system calls: an io_uring Ring of ``module`` (walctl.device._aio) for kind "io_uring"
    or None where the kernel sets one up, else (kind "aio" or None) an AIO context, ``module``'s or
    the ctypes twin where ``module`` is None. Raises OSError (its message names the call refused)."""
    ring_type = getattr(module, "Ring", None) if module is not None else None
    if kind == "io_uring" or (kind is None and ring_type is not None):
        if ring_type is None:
            why = ("walctl.device._aio is not built or WALCTL_NO_NATIVE is set" if module is None
                   else "walctl.device._aio was built without <linux/io_uring.h> of Linux 5.11+")
            raise OSError(errno.ENOSYS, f"io_uring_setup: no io_uring here ({why})")
        try:
            return ring_type(depth, fd, resfd)
        except OSError as exc:
            if kind == "io_uring":
                raise OSError(exc.errno, f"io_uring_setup: {os.strerror(exc.errno)}") from exc
            # kind None: seccomp (containers), kernel.io_uring_disabled or an older kernel: AIO instead
            logging.getLogger(__name__).debug("io_uring_setup refused (%s): native AIO instead",
                                              os.strerror(exc.errno))
    try:
        return module.Context(depth, fd, resfd) if module is not None else _CtypesContext(depth, fd, resfd)
    except OSError as exc:
        raise OSError(exc.errno, f"io_setup: {os.strerror(exc.errno)}") from exc


class _AioRing(ctypes.Structure):
    """The head of the completion ring the kernel maps at the AIO context's address (fs/aio.c)."""

    _fields_ = [("id", ctypes.c_uint), ("nr", ctypes.c_uint), ("head", ctypes.c_uint), ("tail", ctypes.c_uint),
                ("magic", ctypes.c_uint), ("compat_features", ctypes.c_uint),
                ("incompat_features", ctypes.c_uint), ("header_length", ctypes.c_uint)]


_AIO_RING_MAGIC = 0xA10A10A1
_IOCB_FLAG_RESFD = 1  # signal aio_resfd (an eventfd) on completion


class AioWriteQueue:
    """io_uring or Linux native AIO on a DirectDevice's O_DIRECT | O_DSYNC fd, at most ``depth``
    writes in flight (``engine``: "io_uring" or "aio").

    Durability: the fd carries O_DSYNC, so the kernel completes each write (the
    io_event, or the ring's completion) only after the data is on stable media (FUA, or a cache flush where
    the device has no FUA), exactly the promise of a blocking ``pwrite`` on it.
    ``done`` therefore runs only once the write is durable.

    Completions are reaped by a thread that sleeps on an eventfd the kernel signals,
    or earlier by any thread that calls ``poll()``: a producer that keeps the GIL
    busy (the WAL writer's appender) reaps its own completions instead of waiting
    for a GIL switch (5 ms) to let the reaper run.
    """

    engine = "aio"

    def __init__(self, dev: "DirectDevice", depth: int, *, reaper: bool = True, native: bool | None = None,
                 kind: str | None = None):
        """Args:
            reaper: run a thread that calls ``done`` as writes complete. Without it, the caller
                runs them by calling ``wait`` (or ``poll``): one thread does everything, as fio does.
            native: make the system calls through walctl.device._aio (True; it must be built), through
                ctypes (False), or the first where it is built and WALCTL_NO_NATIVE is unset (None).
            kind: "io_uring" (the extension's Ring; OSError where the kernel refuses a ring), "aio"
                (an AIO context), or None: a ring where one can be set up, else an AIO context.
                ``engine`` says which one the queue uses.
        """
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if kind not in (None, "io_uring", "aio"):
            raise ValueError(f"kind must be 'io_uring', 'aio' or None, got {kind!r}")
        module = native_aio() if native is None else None
        if native:
            from walctl.device import _aio as module
        self.backend = "native" if module is not None else "ctypes"
        self.dev = dev
        self.depth = depth
        self._fd = dev.fileno()
        self._efd = os.eventfd(0, os.EFD_CLOEXEC)
        try:
            io = _open_context(module, kind, depth, self._fd, self._efd if reaper else -1)
        except BaseException:
            os.close(self._efd)
            raise
        self._io = io
        self._ring = None
        # io_uring: its completion ring is read in C (waiting(), no system call)
        self._waiting = getattr(io, "waiting", None)
        if self._waiting is not None:
            self.engine = "io_uring"
        else:
            # The context id is the address of the kernel's completion ring, mapped read-only
            # into this process: head != tail means completions wait there (libaio reads it too).
            ring = _AioRing.from_address(io.ctx)
            self._ring = ring if ring.magic == _AIO_RING_MAGIC else None
        self._nbytes = [0] * depth  # per slot: the length of its write in flight (to check completions)
        # Buffers seen before, by id: (buffer, checked view, address). The view stays exported,
        # so the buffer can neither move nor be closed while the queue may DMA from it; checking
        # and locating a buffer once, not per write, is a good part of the per-write cost.
        self._views: dict[int, tuple] = {}
        self._slots: list[tuple | None] = [None] * depth  # in flight: (done, view entry, offset, length)
        self._free = list(range(depth - 1, -1, -1))
        self._lock = threading.Lock()
        self._outstanding = 0
        self._closing = False
        self._release_by_reaper = False
        self._unreaped = False  # io_getevents failed: close() destroys the context itself (writes in flight)
        # Per reaping thread: its plug (see _reap), and ``more``: while its callbacks run, how many of the
        # batch's whole writes come after the current one (0 outside a batch; ``batch`` for the callbacks).
        self._local = threading.local()
        self.batch = self._local
        self._reaper = None
        if reaper:
            self._reaper = threading.Thread(target=self._reap_loop, name="walctl-aio", daemon=True)
            self._reaper.start()

    def submit(self, offset: int, buf, done: WriteDone, length: int | None = None) -> None:
        """Start a durable write of ``buf[:length]`` at ``offset``; ``done(error, 0)`` runs once it is durable
        (flush_ns is always 0: the fd is O_DSYNC, so the device flush is part of the write itself).

        Args:
            length: bytes of ``buf`` to write (default all), a multiple of 4096.
        Raises:
            ValueError: misaligned arguments, a write past the end, or ``depth`` writes in flight.
            RuntimeError: the queue is closed.
        """
        entry = self._views.get(id(buf))
        if entry is None or entry[0] is not buf:
            entry = self._remember(buf)
        view = entry[1]
        if length is None:
            length = view.nbytes
        elif length > view.nbytes:
            raise ValueError(f"length {length} is larger than the buffer ({view.nbytes} bytes)")
        if offset % ALIGN or length % ALIGN or offset < 0 or length <= 0:
            check_aligned(offset, length)  # raises the ValueError naming the bad value
        dev = self.dev
        if dev._fd < 0:  # DirectDevice._closed(), inline (once per write)
            raise ValueError(f"I/O on a closed device: {dev.path}")
        if offset + length > dev.size_bytes:
            raise ValueError(f"write [{offset}, {offset + length}) passes the end of "
                             f"{dev.path} ({dev.size_bytes} bytes)")
        with self._lock:
            if self._closing:
                raise RuntimeError("write queue is closed")
            if not self._free:
                raise ValueError(f"more than {self.depth} writes in flight")
            slot = self._free.pop()
            self._outstanding += 1
        self._slots[slot] = (done, entry, offset, length)
        self._nbytes[slot] = length
        plug = getattr(self._local, "plug", None)
        if plug is not None:
            # A completion callback submitting its successor: the thread reaping submits all
            # the writes its batch of completions started with one io_submit, as a plug would.
            self._io.prepare(slot, entry[2], length, offset)
            plug.append(slot)
            return
        got = self._io.submit(slot, entry[2], length, offset)
        if got < 0:
            self._refused(slot, -got)

    def flush_submits(self) -> None:
        """From a completion callback: submit now the writes that this thread's callbacks started so far
        (held to be submitted together after the batch of completions), e.g. before slower work."""
        plug = getattr(self._local, "plug", None)
        if plug:
            slots = plug[:]
            plug.clear()
            self._io_submit(slots)

    def poll(self) -> int:
        """Run the callbacks of writes that have completed, in this thread; never blocks on the device.

        Returns the number of completions handled (0 at once when none is waiting).
        """
        ring = self._ring
        if ring is None:
            waiting = self._waiting
            if waiting is None or not waiting():
                return 0
        elif ring.head == ring.tail:
            return 0
        return self._reap()

    def wait(self, timeout_s: float | None = None, *, held: bool = False) -> int:
        """Block until at least one write completes (or ``timeout_s`` passes) and run the callbacks.

        ``held``: the caller holds SIGINT/SIGTERM (walctl.device.signals.signals_deferred) around
        this call, typically around a loop of them: the reaping then changes no signal mask
        (two sigprocmask calls per reap, a fifth of a 4 KiB write's CPU time in walctl bench).
        Returns the number of completions handled; 0 at once when nothing is in flight.
        """
        if self._outstanding == 0:
            return 0
        if held:
            return self._reap_and_finish(1, timeout_s)
        return self._reap(min_nr=1, timeout_s=timeout_s)

    def _remember(self, buf) -> tuple:
        view = check_buffer(buf)
        entry = (buf, view, buffer_address(view))
        if len(self._views) >= _VIEW_CACHE_SIZE:
            busy = {id(s[1][0]) for s in list(self._slots) if s is not None}
            for key in [k for k in self._views if k not in busy]:
                self._views.pop(key)[1].release()
        self._views[id(buf)] = entry
        return entry

    def _io_submit(self, slots: list[int]) -> None:
        """io_submit the slots' (prepared) iocbs; a slot the kernel refuses is finished with an IOFailure."""
        done = 0
        submit_slots = self._io.submit_slots
        while done < len(slots):
            got = submit_slots(slots, done)
            if got > 0:
                done += got
                continue
            self._refused(slots[done], -got)
            done += 1

    def _refused(self, slot: int, code: int) -> None:
        """Finish ``slot``, whose io_submit failed with errno ``code``."""
        self._finish(slot, io_failure(f"write failed: io_submit: {os.strerror(code)}", where=self.dev.path,
                                      offset=self._io.iocb(slot)[2], exc=OSError(code, os.strerror(code))))

    def _reap(self, min_nr: int = 0, timeout_s: float | None = None) -> int:
        """Collect completions (by default those waiting, without blocking) and finish them.

        SIGINT/SIGTERM are held meanwhile (signals_deferred): the exception they raise must not
        land between io_getevents taking completions off the ring and their callbacks, or those
        completions are lost and a drain after the interrupt waits for them forever.
        """
        with signals_deferred():
            return self._reap_and_finish(min_nr, timeout_s)

    def _reap_and_finish(self, min_nr: int, timeout_s: float | None) -> int:
        try:
            # The GIL is released while the kernel waits: other threads run meanwhile.
            events = self._io.getevents(min_nr, timeout_s)
        except OSError as exc:
            self._fail_all(io_failure(f"io_getevents failed: {os.strerror(exc.errno)}", where=self.dev.path,
                                      exc=exc))
            return 0
        if not events:
            return 0
        local = self._local
        local.plug = []
        try:
            # The usual case, every write of the batch done in full: its slots freed under one
            # lock, then the callbacks in order (per write, the least Python there can be).
            nbytes, slots, dones, freed = self._nbytes, self._slots, [], []
            for slot, res in events:
                if res != nbytes[slot]:
                    break
                dones.append(slots[slot][0])
                slots[slot] = None
                freed.append(slot)
            if dones:
                self._free_slots(freed)
                # Each callback learns how many come after it in this batch (``batch.more``): the WAL
                # writer books the first ones' writes and, at the last, makes them durable together
                # (one io_submit of the next writes, one wake-up of its waiters; issue 31).
                more = len(dones)
                for done in dones:
                    more -= 1
                    local.more = more
                    try:
                        done(None, 0)
                    except Exception:  # as in _finish
                        logging.getLogger(__name__).exception("write completion callback failed")
            if len(dones) < len(events):
                self._finish_rest(events[len(dones):])
        finally:
            local.more = 0
            try:
                if local.plug:  # the writes the callbacks started (and did not submit), in one io_submit
                    self.flush_submits()
            finally:
                local.plug = None
        return len(events)

    def _finish_rest(self, events: list) -> None:
        """Finish completions one by one from the first one that is not a whole write (short or failed)."""
        nbytes = self._nbytes
        for slot, res in events:
            if res == nbytes[slot]:
                self._finish(slot, None)
            else:
                self._completed(slot, res)

    def _reap_loop(self) -> None:
        # Per wake-up, the least Python there can be (issue 31: this loop runs once per durable block).
        # No signals_deferred here: Python raises SIGINT/SIGTERM in the main thread only, so nothing can
        # land between io_getevents and the callbacks of this thread.
        eventfd_read, efd, reap = os.eventfd_read, self._efd, self._reap_and_finish
        try:
            while True:
                try:
                    # Blocks (GIL released) until a completion or close() signals the eventfd.
                    eventfd_read(efd)
                except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                    continue
                reap(0, None)
                # No lock needed to look: _closing is set under the lock before close() signals the
                # eventfd, and once it is set submit() starts nothing, so _outstanding only falls.
                if self._closing and self._outstanding == 0:
                    return
        finally:
            if self._release_by_reaper:
                self._release()

    def _release(self) -> None:
        self._ring = None  # unmapped by io_destroy: poll() must not look at it any more
        self._waiting = None
        with self._lock:  # a _finish may be signalling the eventfd right now
            if self._unreaped or self.engine == "io_uring":
                # io_getevents failed: writes may still be in flight. io_destroy waits for them, and
                # here: the device is quiet before close() returns and the buffers are let go.
                # A ring's destroy is quick besides (the kernel tears it down after the close).
                self._io.destroy()
            else:
                # Every write submitted was reaped (outstanding 0): the context is idle, and its
                # io_destroy only waits out the kernel's grace period (~30 ms a close): not here.
                destroy_later(self._io)
            os.close(self._efd)
        for entry in self._views.values():
            entry[1].release()
        self._views.clear()

    def _completed(self, slot: int, res: int) -> None:
        addr, nbytes, offset = self._io.iocb(slot)
        if 0 < res < nbytes and not res % ALIGN:
            # A short transfer: write the rest, as pwrite loops.
            self._io.prepare(slot, addr + res, nbytes - res, offset + res)
            self._nbytes[slot] -= res
            self._io_submit([slot])
            return
        self._finish(slot, self._write_error(res, nbytes, offset))

    def _write_error(self, res: int, nbytes: int, offset: int) -> IOFailure | None:
        """A completion's result ``res`` for a write of ``nbytes`` at ``offset``: None when whole,
        else the IOFailure (the kernel's error, or a short write)."""
        if res < 0:
            return io_failure(f"write failed: {os.strerror(-res)}", where=self.dev.path, offset=offset,
                              exc=OSError(-res, os.strerror(-res)))
        if res != nbytes:
            return io_failure(f"short write: wrote {res} of {nbytes} bytes", where=self.dev.path,
                              offset=offset + res)
        return None

    def _free_slots(self, slots: list[int]) -> None:
        """Return finished slots to the free list (before their callbacks: those may submit at once)."""
        with self._lock:
            self._free.extend(slots)
            self._outstanding -= len(slots)
            if self._closing and self._outstanding == 0:
                os.eventfd_write(self._efd, 1)  # the reaper may be asleep: tell it to stop

    def _finish(self, slot: int, error: IOFailure | None) -> None:
        done = self._slots[slot][0]
        self._slots[slot] = None
        self._free_slots([slot])
        try:
            done(error, 0)
        except Exception:  # like a ThreadPoolExecutor callback: the caller's bug must not stop the reaper
            logging.getLogger(__name__).exception("write completion callback failed")

    def _fail_all(self, error: IOFailure) -> None:
        """Finish every write in flight with ``error`` (io_getevents failed: their completions are lost)."""
        self._unreaped = True  # the kernel may still be writing them: close() destroys the context itself
        for slot, entry in enumerate(self._slots):
            if entry is not None:
                self._finish(slot, error)

    def close(self) -> None:
        """Wait for every write (and its ``done``) to finish, then release the AIO context and buffers."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            os.eventfd_write(self._efd, 1)  # wake the reaper: it stops once nothing is in flight
            if threading.current_thread() is self._reaper:
                self._release_by_reaper = True  # called from a completion: the reaper stops by itself
                return
        if self._reaper is not None:
            self._reaper.join()
        else:
            while self._outstanding:
                self.wait()
        self._release()


class ClosedLoop:
    """fio's loop on the calling thread, for walctl bench's raw modes over an AioWriteQueue without a reaper.

    One write of each buffer is in flight; each completion books its latency and count and, while the
    clock is before ``stop_ns``, writes the same buffer again at ``offsets[i]()`` in the same queue slot:
    no slot freed and taken, no callback, one io_submit per batch of completions (issue 31: the Python
    per write is a few lines). The writes are as durable as any of the queue's (the same O_DSYNC fd).
    Offsets must be aligned and inside the device (the kernel refuses others, as a failed write).

    Args:
        bufs: one aligned buffer per write in flight (at most the queue's depth), written whole.
        offsets: per buffer, a function giving its next write's offset.
        samples: per buffer, where its writes' latencies (ns) are appended (empty at the start).
        counts: per buffer, its writes done (set in place as each ``run`` returns).
    """

    def __init__(self, queue: AioWriteQueue, bufs: list, offsets: list[Callable[[], int]], samples: list,
                 counts: list[int]):
        if queue._reaper is not None:
            raise ValueError("a closed loop needs a queue without a reaper thread")
        self.queue = queue
        self.entries = [queue._views.get(id(b)) or queue._remember(b) for b in bufs]
        self.length = self.entries[0][1].nbytes
        if any(e[1].nbytes != self.length for e in self.entries) or self.length % ALIGN:
            raise ValueError("a closed loop's buffers are all of one size, a multiple of 4096")
        self.offsets, self.samples, self.counts = offsets, samples, counts
        self.started = [0] * len(bufs)
        self.owner: dict[int, int] = {}  # queue slot -> buffer index, for the writes in flight
        self.error: BaseException | None = None
        self.last_done_ns = 0
        self._dones = [self._generic_done(i) for i in range(len(bufs))]

    @property
    def in_flight(self) -> int:
        return len(self.owner)

    def start(self) -> None:
        """Submit each buffer's first write (like AioWriteQueue.submit, which checks them)."""
        queue = self.queue
        for i, entry in enumerate(self.entries):
            self.started[i] = time.perf_counter_ns()
            done = self._dones[i]
            queue.submit(self.offsets[i](), entry[0], done)
            for slot, held in enumerate(queue._slots):  # (none: a refused io_submit finished it already)
                if held is not None and held[0] is done:
                    self.owner[slot] = i

    def _generic_done(self, i: int):
        """The write's callback when the queue itself finishes it (a refused io_submit, or a drain by
        AioWriteQueue.wait): book it, resubmit nothing."""
        def done(error, flush_ns: int = 0) -> None:
            now = time.perf_counter_ns()
            for slot, owner in list(self.owner.items()):
                if owner == i:
                    del self.owner[slot]
            if error is None:
                self.samples[i].append(now - self.started[i])
                self.counts[i] = len(self.samples[i])
                self.last_done_ns = max(self.last_done_ns, now)
            elif self.error is None:
                self.error = error
        return done

    def run(self, stop_ns: int, until_ns: int) -> int:
        """Reap and resubmit until ``until_ns`` (time.perf_counter_ns) passes or nothing is in flight;
        a write completing at or after ``stop_ns`` (or after a failure) is not followed by another.
        Returns the writes still in flight. Hold SIGINT/SIGTERM around it (signals_deferred), as
        AioWriteQueue.wait(held=True) needs."""
        queue = self.queue
        io, owner, started, samples, counts, offsets = queue._io, self.owner, self.started, self.samples, \
            self.counts, self.offsets
        getevents, prepare, clock, length = io.getevents, io.prepare, time.perf_counter_ns, self.length
        addrs = [e[2] for e in self.entries]
        while owner:
            now = clock()
            if now >= until_ns:
                break
            try:
                events = getevents(1, (until_ns - now) / 1e9)
            except OSError as exc:
                queue._fail_all(io_failure(f"io_getevents failed: {os.strerror(exc.errno)}", where=queue.dev.path,
                                           exc=exc))
                break
            if not events:
                continue
            now = clock()
            self.last_done_ns = now
            again = []
            go = now < stop_ns and self.error is None
            for slot, res in events:
                i = owner[slot]
                if res == length:
                    samples[i].append(now - started[i])
                    if go:
                        started[i] = now
                        prepare(slot, addrs[i], length, offsets[i]())
                        again.append(slot)
                        continue
                elif self.error is None:
                    self.error = queue._write_error(res, length, io.iocb(slot)[2])
                del owner[slot]
                queue._slots[slot] = None
                queue._free_slots([slot])
            if again:
                queue._io_submit(again)  # a slot refused there is finished through its _generic_done
        for i, booked in enumerate(samples):  # counted here, not per write
            counts[i] = len(booked)
        return len(owner)
