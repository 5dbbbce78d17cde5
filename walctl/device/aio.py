"""Linux native AIO (io_submit / io_getevents through ctypes): ``AioWriteQueue``.

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

from walctl.device.base import WriteDone, io_failure
from walctl.device.buffers import ALIGN, buffer_address, check_aligned, check_buffer
from walctl.device.fdio import DirectDevice
from walctl.device.signals import signals_deferred
from walctl.errors import IOFailure

# (io_setup, io_destroy, io_getevents, io_submit) syscall numbers per architecture.
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_PWRITE = 1
# Buffers whose checked view an AioWriteQueue keeps (the WAL writer reuses a few).
_VIEW_CACHE_SIZE = 64


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



class _AioRing(ctypes.Structure):
    """The head of the completion ring the kernel maps at the AIO context's address (fs/aio.c)."""

    _fields_ = [("id", ctypes.c_uint), ("nr", ctypes.c_uint), ("head", ctypes.c_uint), ("tail", ctypes.c_uint),
                ("magic", ctypes.c_uint), ("compat_features", ctypes.c_uint),
                ("incompat_features", ctypes.c_uint), ("header_length", ctypes.c_uint)]


_AIO_RING_MAGIC = 0xA10A10A1
_IOCB_FLAG_RESFD = 1  # signal aio_resfd (an eventfd) on completion


class AioWriteQueue:
    """Linux native AIO on a DirectDevice's O_DIRECT | O_DSYNC fd, at most ``depth`` writes in flight.

    Durability: the fd carries O_DSYNC, so the kernel completes each write (the
    io_event) only after the data is on stable media (FUA, or a cache flush where
    the device has no FUA), exactly the promise of a blocking ``pwrite`` on it.
    ``done`` therefore runs only once the write is durable.

    Completions are reaped by a thread that sleeps on an eventfd the kernel signals,
    or earlier by any thread that calls ``poll()``: a producer that keeps the GIL
    busy (the WAL writer's appender) reaps its own completions instead of waiting
    for a GIL switch (5 ms) to let the reaper run.
    """

    engine = "aio"

    def __init__(self, dev: "DirectDevice", depth: int, *, reaper: bool = True):
        """Args:
            reaper: run a thread that calls ``done`` as writes complete. Without it, the caller
                runs them by calling ``wait`` (or ``poll``): one thread does everything, as fio does.
        """
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        syscall = _aio_syscall()
        self._nr_setup, self._nr_destroy, self._nr_getevents, self._nr_submit = _AIO_SYSCALLS[platform.machine()]
        self._syscall = syscall
        self.dev = dev
        self.depth = depth
        self._fd = dev.fileno()
        self._efd = os.eventfd(0, os.EFD_CLOEXEC)
        ctx = ctypes.c_ulong(0)
        if syscall(ctypes.c_long(self._nr_setup), ctypes.c_long(depth), ctypes.byref(ctx)) < 0:
            code = ctypes.get_errno()
            os.close(self._efd)
            raise OSError(code, f"io_setup: {os.strerror(code)}")
        self._ctx = ctypes.c_ulong(ctx.value)
        # The context id is the address of the kernel's completion ring, mapped read-only
        # into this process: head != tail means completions wait there (libaio reads it too).
        ring = _AioRing.from_address(ctx.value)
        self._ring = ring if ring.magic == _AIO_RING_MAGIC else None
        self._cbs = (_IoCb * depth)()
        self._cb_ptrs = [(ctypes.POINTER(_IoCb) * 1)(ctypes.pointer(cb)) for cb in self._cbs]
        self._cb_addrs = [ctypes.addressof(cb) for cb in self._cbs]
        self._nbytes = [0] * depth  # per slot: the length of its write in flight (to check completions)
        # The syscall numbers as ctypes values, built once: these calls are made per write.
        self._c_submit = ctypes.c_long(self._nr_submit)
        self._c_getevents = ctypes.c_long(self._nr_getevents)
        self._c_counts = [ctypes.c_long(n) for n in range(depth + 1)]
        for slot, cb in enumerate(self._cbs):
            cb.aio_data = slot
            cb.aio_lio_opcode = _IOCB_CMD_PWRITE
            cb.aio_fildes = self._fd
            if reaper:
                cb.aio_flags = _IOCB_FLAG_RESFD
                cb.aio_resfd = self._efd
        self._no_wait = _Timespec(0, 0)
        self._wait_timeout: tuple[float, _Timespec] | None = None  # wait()'s last timeout, converted
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
        # Per reaping thread: its io_event array, io_submit array and plug (see _reap).
        self._local = threading.local()
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
        if dev._closed():
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
        cb = self._cbs[slot]
        cb.aio_buf = entry[2]
        cb.aio_nbytes = length
        cb.aio_offset = offset
        plug = getattr(self._local, "plug", None)
        if plug is not None:
            # A completion callback submitting its successor: the thread reaping submits all
            # the writes its batch of completions started with one io_submit, as a plug would.
            plug.append(slot)
            return
        self._io_submit([slot])

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
        if ring is None or ring.head == ring.tail:
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
        timeout = None
        if timeout_s is not None:
            cached = self._wait_timeout
            if cached is None or cached[0] != timeout_s:
                cached = self._wait_timeout = (timeout_s, _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9)))
            timeout = cached[1]
        if held:
            return self._reap_and_finish(1, timeout)
        return self._reap(min_nr=1, timeout=timeout)

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
        """io_submit the slots' iocbs; a slot the kernel refuses is finished with an IOFailure."""
        if len(slots) == 1:
            array = self._cb_ptrs[slots[0]]
        else:
            local = self._local
            array = getattr(local, "batch", None)
            if array is None:
                array = local.batch = (ctypes.c_void_p * self.depth)()
            addrs = self._cb_addrs
            for i, slot in enumerate(slots):
                array[i] = addrs[slot]
        done = 0
        while done < len(slots):
            ptr = ctypes.byref(array, done * ctypes.sizeof(ctypes.c_void_p)) if done else array
            got = self._syscall(self._c_submit, self._ctx, self._c_counts[len(slots) - done], ptr)
            if got > 0:
                done += got
                continue
            code = ctypes.get_errno() if got < 0 else errno.EAGAIN
            if code == errno.EINTR:
                continue
            slot = slots[done]
            self._finish(slot, io_failure(f"write failed: io_submit: {os.strerror(code)}", where=self.dev.path,
                                           offset=self._cbs[slot].aio_offset, exc=OSError(code, os.strerror(code))))
            done += 1

    def _reap(self, min_nr: int = 0, timeout: _Timespec | None = None) -> int:
        """Collect completions (by default those waiting, without blocking) and finish them.

        SIGINT/SIGTERM are held meanwhile (signals_deferred): the exception they raise must not
        land between io_getevents taking completions off the ring and their callbacks, or those
        completions are lost and a drain after the interrupt waits for them forever.
        """
        with signals_deferred():
            return self._reap_and_finish(min_nr, timeout)

    def _reap_and_finish(self, min_nr: int, timeout: _Timespec | None) -> int:
        local = self._local
        events = getattr(local, "events", None)
        if events is None:
            events = local.events = (_IoEvent * self.depth)()
            # The same memory as int64s: 4 per io_event (data, obj, res, res2), read without
            # building a ctypes object per event.
            local.event_words = memoryview(events).cast("B").cast("q")
        words = local.event_words
        if min_nr == 0:
            timeout = self._no_wait
        while True:
            # ctypes releases the GIL for the call: other threads run while this one waits.
            got = self._syscall(self._c_getevents, self._ctx, self._c_counts[min_nr], self._c_counts[self.depth],
                                events, ctypes.byref(timeout) if timeout is not None else None)
            if got >= 0:
                break
            code = ctypes.get_errno()
            if code != errno.EINTR:
                self._fail_all(io_failure(f"io_getevents failed: {os.strerror(code)}", where=self.dev.path,
                                           exc=OSError(code, os.strerror(code))))
                return 0
        if not got:
            return 0
        local.plug = []
        try:
            nbytes = self._nbytes
            for i in range(0, 4 * got, 4):
                slot, res = words[i], words[i + 2]
                if res == nbytes[slot]:  # the usual case: all of it written
                    self._finish(slot, None)
                else:
                    self._completed(slot, res)
        finally:
            try:
                self.flush_submits()
            finally:
                local.plug = None
        return got

    def _reap_loop(self) -> None:
        try:
            while True:
                try:
                    # Blocks (GIL released) until a completion or close() signals the eventfd.
                    os.eventfd_read(self._efd)
                except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                    continue
                self._reap()
                with self._lock:
                    if self._closing and self._outstanding == 0:
                        return
        finally:
            if self._release_by_reaper:
                self._release()

    def _release(self) -> None:
        self._ring = None  # unmapped by io_destroy: poll() must not look at it any more
        with self._lock:  # a _finish may be signalling the eventfd right now
            self._syscall(ctypes.c_long(self._nr_destroy), self._ctx)
            os.close(self._efd)
        for entry in self._views.values():
            entry[1].release()
        self._views.clear()

    def _completed(self, slot: int, res: int) -> None:
        cb = self._cbs[slot]
        if 0 < res < cb.aio_nbytes and not res % ALIGN:
            # A short transfer: write the rest, as pwrite loops.
            cb.aio_buf += res
            cb.aio_nbytes -= res
            cb.aio_offset += res
            self._nbytes[slot] -= res
            self._io_submit([slot])
            return
        error = None
        if res < 0:
            error = io_failure(f"write failed: {os.strerror(-res)}", where=self.dev.path, offset=cb.aio_offset,
                                exc=OSError(-res, os.strerror(-res)))
        elif res != cb.aio_nbytes:
            error = io_failure(f"short write: wrote {res} of {cb.aio_nbytes} bytes", where=self.dev.path,
                                offset=cb.aio_offset + res)
        self._finish(slot, error)

    def _finish(self, slot: int, error: IOFailure | None) -> None:
        done = self._slots[slot][0]
        self._slots[slot] = None
        with self._lock:
            # Free the slot before ``done``: it may submit the next write at once.
            self._free.append(slot)
            self._outstanding -= 1
            if self._closing and self._outstanding == 0:
                os.eventfd_write(self._efd, 1)  # the reaper may be asleep: tell it to stop
        try:
            done(error, 0)
        except Exception:  # like a ThreadPoolExecutor callback: the caller's bug must not stop the reaper
            logging.getLogger(__name__).exception("write completion callback failed")

    def _fail_all(self, error: IOFailure) -> None:
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
