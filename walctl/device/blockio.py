"""Positioned, aligned, durable I/O on a block device or a regular file.

One small protocol, ``Device``, with real implementations (``DirectDevice`` with
O_DIRECT, ``BufferedDevice`` for filesystems that refuse O_DIRECT) and two for
tests (``MemoryDevice``, ``FaultyDevice``). Every implementation enforces the
same rules (walctl.device.buffers): offsets, lengths and buffer addresses are
multiples of 4096, checked before the syscall, so code tested on memory behaves
the same on a disk.

The durability promise of ``pwrite`` on a writable device: when it returns, the
bytes are on stable storage, not just in the page cache or the disk's volatile
write cache. The WAL acknowledges a record on the strength of that return.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import platform
import stat
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

from walctl.device.buffers import ALIGN, aligned_buffer, buffer_address, check_aligned, check_buffer
from walctl.errors import IOFailure, NotFoundError, RefusedError, UsageError

# Block-device ioctls from <linux/fs.h>; the fcntl module does not export them.
BLKSSZGET = 0x1268          # _IO(0x12, 104): logical block size, int
BLKGETSIZE64 = 0x80081272   # _IOR(0x12, 114, size_t): size in bytes, u64
BLKZEROOUT = 0x127F         # _IO(0x12, 127): zero a range given as u64 {start, len}

# Zeroing moves this much per write: large enough to stream at device speed,
# small enough that one buffer costs little memory and progress stays lively.
ZERO_CHUNK_BYTES = 8 << 20

BUFFERED_WARNING = ("{path}: the filesystem does not support O_DIRECT (tmpfs?); "
                    "using buffered I/O + fdatasync, same durability, page cache used")


def _io_failure(what: str, *, where: str, offset: int | None = None,
                exc: OSError | None = None, hint: str | None = None) -> IOFailure:
    """Build an IOFailure that keeps the errno of the OSError behind it (None for short transfers)."""
    err = IOFailure(what, where=where, offset=offset, hint=hint)
    err.errno = exc.errno if exc is not None else None
    return err


@runtime_checkable
class Device(Protocol):
    """What the WAL engine needs from the thing it writes to."""

    path: str
    size_bytes: int          # block device: BLKGETSIZE64; file: st_size at open
    logical_block_size: int  # block device: BLKSSZGET; file: 4096
    is_block_device: bool
    direct: bool             # True when O_DIRECT is in use
    writable: bool
    warnings: list[str]      # for the CLI to print (e.g. the buffered fallback)

    def pread_into(self, offset: int, buf) -> None: ...
    def pwrite(self, offset: int, buf) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class _CheckedDevice:
    """Argument checks shared by every implementation, so their semantics cannot drift."""

    path: str
    size_bytes: int
    writable: bool

    def _check_open(self) -> None:
        if self._closed():
            raise ValueError(f"I/O on a closed device: {self.path}")

    def _check_read(self, offset: int, mv: memoryview) -> None:
        self._check_open()
        check_aligned(offset, mv.nbytes)

    def _check_write(self, offset: int, mv: memoryview) -> None:
        self._check_open()
        if not self.writable:
            raise ValueError(f"device opened read-only: {self.path}")
        check_aligned(offset, mv.nbytes)
        # A write past the end would grow a file or fail on a disk: both are bugs
        # in the caller, which knows the capacity.
        if offset + mv.nbytes > self.size_bytes:
            raise ValueError(f"write [{offset}, {offset + mv.nbytes}) passes the end of "
                             f"{self.path} ({self.size_bytes} bytes)")

    def _closed(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _ReadCounter(threading.local):
    """Bytes read from devices by the calling thread (every ``pread_into`` of an fd device): the
    budget tests and bench/continuous_bench.py count what an open, a trim or a status costs.
    Per thread, so a background thread (an upload beside the writer) does not blur the count."""

    bytes = 0


_read_counter = _ReadCounter()


def bytes_read_total() -> int:
    """Device bytes the calling thread has read so far (all fd devices)."""
    return _read_counter.bytes


class _FdDevice(_CheckedDevice):
    """A device behind an open file descriptor; subclasses choose the flush discipline."""

    direct = False

    def __init__(self, path: str, fd: int, *, writable: bool, warnings: list[str] | None = None):
        """Wrap an fd opened (and, for writers, locked) by ``open_device``; takes ownership of it."""
        self.path = path
        self._fd = fd
        self.writable = writable
        self.warnings = list(warnings or [])
        st = os.fstat(fd)
        self.is_block_device = stat.S_ISBLK(st.st_mode)
        if self.is_block_device:
            self.size_bytes = struct.unpack("=Q", fcntl.ioctl(fd, BLKGETSIZE64, bytes(8)))[0]
            self.logical_block_size = struct.unpack("=i", fcntl.ioctl(fd, BLKSSZGET, bytes(4)))[0]
        else:
            self.size_bytes = st.st_size
            self.logical_block_size = ALIGN

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.path!r}, size_bytes={self.size_bytes}, "
                f"writable={self.writable})")

    def fileno(self) -> int:
        """The underlying fd, for ioctls such as BLKZEROOUT."""
        self._check_open()
        return self._fd

    def _closed(self) -> bool:
        return self._fd < 0

    def pread_into(self, offset: int, buf) -> None:
        """Fill ``buf`` from ``offset``; raises IOFailure on an error or the end of the device."""
        with check_buffer(buf) as mv:
            self._check_read(offset, mv)
            want = mv.nbytes
            done = 0
            while done < want:
                pos = offset + done
                if self.direct and pos % ALIGN:
                    # O_DIRECT stops short of a block only at the end of a file whose
                    # size is not a multiple of 4096; the next read would be EINVAL.
                    break
                try:
                    got = os.preadv(self._fd, [mv[done:]], pos)
                except OSError as exc:
                    raise _io_failure(f"read failed: {exc.strerror}", where=self.path,
                                      offset=pos, exc=exc) from exc
                if got == 0:
                    break
                done += got
            _read_counter.bytes += done
            if done < want:
                raise _io_failure(f"short read: got {done} of {want} bytes (end of device)",
                                  where=self.path, offset=offset + done)

    def pwrite(self, offset: int, buf) -> None:
        """Write all of ``buf`` at ``offset``; durable when it returns."""
        with check_buffer(buf) as mv:
            self._check_write(offset, mv)
            want = mv.nbytes
            done = 0
            while done < want:
                pos = offset + done
                try:
                    put = os.pwrite(self._fd, mv[done:], pos)
                except OSError as exc:
                    raise _io_failure(f"write failed: {exc.strerror}", where=self.path,
                                      offset=pos, exc=exc) from exc
                if put == 0:
                    raise _io_failure(f"short write: wrote {done} of {want} bytes",
                                      where=self.path, offset=pos)
                done += put
            self._make_durable(offset)

    def _make_durable(self, offset: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def flush(self) -> None:
        """Flush the page cache and the device's volatile cache (fdatasync)."""
        self._check_open()
        if not self.writable:
            return  # nothing of ours can be dirty
        try:
            # fdatasync on a block device also sends a cache flush to the disk, so
            # everything written through this fd before the call is on stable storage.
            os.fdatasync(self._fd)
        except OSError as exc:
            raise _io_failure(f"fdatasync failed: {exc.strerror}", where=self.path, exc=exc) from exc

    def close(self) -> None:
        """Close the fd; idempotent. Closing the fd releases the writer's flock."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            os.close(fd)
        except OSError as exc:
            raise _io_failure(f"close failed: {exc.strerror}", where=self.path, exc=exc) from exc


class DirectDevice(_FdDevice):
    """O_DIRECT (+ O_DSYNC when writable): no page cache, each pwrite durable on return."""

    direct = True

    def _make_durable(self, offset: int) -> None:
        # Nothing to do, and that is the point: O_DIRECT bypasses the page cache but
        # does not empty a volatile disk cache; the fd was opened with O_DSYNC, so
        # the kernel returned from pwrite only after the device flushed (FUA or a
        # cache flush). That return is the promise the WAL's acknowledgement relies on.
        return


class BufferedDevice(_FdDevice):
    """Page-cache I/O + fdatasync after every write, for filesystems that refuse O_DIRECT."""

    direct = False

    def _make_durable(self, offset: int) -> None:
        # The write only reached the page cache; fdatasync pushes it to the device
        # and flushes the device's volatile cache, so on return the bytes are as
        # durable as an O_DIRECT|O_DSYNC write: the WAL's acknowledgement relies on it.
        started = time.perf_counter_ns()
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise _io_failure(f"fdatasync failed: {exc.strerror}", where=self.path,
                              offset=offset, exc=exc) from exc
        finally:
            _flush_time.ns = time.perf_counter_ns() - started


class MemoryDevice(_CheckedDevice):
    """A bytearray with the same checks as a real device, for tests."""

    def __init__(self, size_bytes: int, *, path: str = "<memory>", writable: bool = True):
        if size_bytes < 0:
            raise ValueError(f"size_bytes must not be negative, got {size_bytes}")
        self.path = path
        self.data = bytearray(size_bytes)
        self.size_bytes = size_bytes
        self.logical_block_size = ALIGN
        self.is_block_device = False
        self.direct = False
        self.writable = writable
        self.warnings: list[str] = []
        self._is_closed = False

    def __repr__(self) -> str:
        return f"MemoryDevice(size_bytes={self.size_bytes})"

    def _closed(self) -> bool:
        return self._is_closed

    def pread_into(self, offset: int, buf) -> None:
        """Fill ``buf`` from ``offset``; IOFailure when the data ends first, like a file."""
        with check_buffer(buf) as mv:
            self._check_read(offset, mv)
            chunk = self.data[offset:offset + mv.nbytes]
            mv[:len(chunk)] = chunk
            if len(chunk) < mv.nbytes:
                raise _io_failure(f"short read: got {len(chunk)} of {mv.nbytes} bytes (end of device)",
                                  where=self.path, offset=offset + len(chunk))

    def pwrite(self, offset: int, buf) -> None:
        """Copy ``buf`` in at ``offset`` (memory is as durable as it gets)."""
        with check_buffer(buf) as mv:
            self._check_write(offset, mv)
            self.data[offset:offset + mv.nbytes] = mv

    def flush(self) -> None:
        self._check_open()

    def close(self) -> None:
        self._is_closed = True


class FaultyDevice:
    """Wrap a Device and make it fail the way disks do, for crash and error tests.

    Rules (each optional):
      - ``fail_writes_after=N``: the first N pwrites succeed, every later one
        raises IOFailure (errno EIO). 0 fails every write.
      - ``torn_write_bytes=T`` (a multiple of 4096): the first failing write puts
        its first T bytes on the inner device before raising, like power loss in
        the middle of a multi-sector write. Later failing writes write nothing
        (the "disk" is gone).
      - ``fail_flush``: every flush raises IOFailure (EIO).
      - ``fail_reads_at``: a read whose range covers any of these 4096-aligned
        offsets raises IOFailure (EIO), like an unreadable sector.
    Counters: ``writes`` and ``reads`` count successful calls, ``failures``
    the injected errors.
    """

    def __init__(self, inner: Device, *, fail_writes_after: int | None = None,
                 fail_flush: bool = False, fail_reads_at: set[int] | None = None,
                 torn_write_bytes: int | None = None):
        if fail_writes_after is not None and fail_writes_after < 0:
            raise ValueError(f"fail_writes_after must not be negative, got {fail_writes_after}")
        if torn_write_bytes is not None and (torn_write_bytes < 0 or torn_write_bytes % ALIGN):
            raise ValueError(f"torn_write_bytes must be a multiple of {ALIGN}, got {torn_write_bytes}")
        for bad in fail_reads_at or ():
            if bad < 0 or bad % ALIGN:
                raise ValueError(f"fail_reads_at offsets must be multiples of {ALIGN}, got {bad}")
        self.inner = inner
        self.fail_writes_after = fail_writes_after
        self.fail_flush = fail_flush
        self.fail_reads_at = set(fail_reads_at or ())
        self.torn_write_bytes = torn_write_bytes
        self.writes = 0
        self.reads = 0
        self.failures = 0
        self._torn_done = False

    # The identity of the device is the inner one's.
    path = property(lambda self: self.inner.path)
    size_bytes = property(lambda self: self.inner.size_bytes)
    logical_block_size = property(lambda self: self.inner.logical_block_size)
    is_block_device = property(lambda self: self.inner.is_block_device)
    direct = property(lambda self: self.inner.direct)
    writable = property(lambda self: self.inner.writable)
    warnings = property(lambda self: self.inner.warnings)

    def _eio(self, what: str, offset: int | None) -> IOFailure:
        self.failures += 1
        return _io_failure(f"{what} failed: injected EIO", where=self.path, offset=offset,
                           exc=OSError(errno.EIO, os.strerror(errno.EIO)))

    def pread_into(self, offset: int, buf) -> None:
        with check_buffer(buf) as mv:  # bad arguments stay ValueError, not an injected EIO
            length = mv.nbytes
        check_aligned(offset, length)
        for bad in sorted(self.fail_reads_at):
            if offset <= bad < offset + length:
                raise self._eio("read", bad)
        self.inner.pread_into(offset, buf)
        self.reads += 1

    def pwrite(self, offset: int, buf) -> None:
        with check_buffer(buf) as mv:
            check_aligned(offset, mv.nbytes)
        if self.fail_writes_after is not None and self.writes >= self.fail_writes_after:
            if self.torn_write_bytes and not self._torn_done:
                self._torn_done = True
                with memoryview(buf) as mv:
                    torn = min(self.torn_write_bytes, mv.nbytes)
                    if torn:
                        self.inner.pwrite(offset, mv[:torn])
            raise self._eio("write", offset)
        self.inner.pwrite(offset, buf)
        self.writes += 1

    def flush(self) -> None:
        if self.fail_flush:
            raise self._eio("flush", None)
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# --- concurrent writes -------------------------------------------------------
#
# The WAL keeps several blocks in flight (its iodepth) and bench measures the
# device at a queue depth. Both go through a WriteQueue: ``submit`` starts one
# durable write and calls ``done(error)`` when it has finished, from another
# thread. Two implementations keep the same durability promise as ``pwrite``:
#   - AioWriteQueue: Linux native AIO (io_submit/io_getevents) on the O_DIRECT |
#     O_DSYNC fd of a DirectDevice. One thread reaps completions; no thread per
#     write, so Python's per-write cost is ~10 us and the device, not the GIL,
#     mostly sets the pace (4 KiB random writes at queue depth 4 on a loop
#     device: a thread pool reached 0.5-0.6 of fio's IOPS, AIO 0.9-1.05).
#   - ThreadWriteQueue: ``depth`` threads each blocking in ``dev.pwrite`` (the
#     GIL is released in the syscall). Any device works: buffered files, memory
#     and fault-injecting devices in tests, and kernels without AIO.

WriteDone = Callable[[BaseException | None], None]

# Per thread: ns the last buffered write spent in fdatasync (the latency breakdown's "flush").
_flush_time = threading.local()

IO_ENGINES = ("auto", "aio", "threads")
IO_ENGINE_ENV = "WALCTL_IO_ENGINE"  # force an engine (auto picks aio where it can)

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


class ThreadWriteQueue:
    """Writes run as blocking ``dev.pwrite`` calls on ``depth`` threads; works on any Device."""

    engine = "threads"

    def __init__(self, dev: Device, depth: int):
        self.dev = dev
        self.depth = depth
        self._pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="walctl-io")

    def submit(self, offset: int, buf, done: WriteDone, length: int | None = None) -> None:
        """Start a durable write of ``buf[:length]`` at ``offset``; ``done(error)`` runs on an I/O thread."""
        self._pool.submit(self._run, offset, buf, length, done)

    def _run(self, offset: int, buf, length: int | None, done: WriteDone) -> None:
        _flush_time.ns = 0
        try:
            self._write(offset, buf, length)
        except BaseException as exc:  # handed to done, as a future's exception would be
            error = exc
        else:
            error = None
        try:
            done(error)  # in this thread, right after the write: flush_ns() is this write's
        except Exception:  # like a ThreadPoolExecutor callback: the caller's bug must not stop the pool
            logging.getLogger(__name__).exception("write completion callback failed")

    @staticmethod
    def flush_ns() -> int:
        """Inside ``done``: ns the write spent in fdatasync (buffered devices; 0 when O_DSYNC made it durable)."""
        return getattr(_flush_time, "ns", 0)

    def _write(self, offset: int, buf, length: int | None) -> None:
        if length is None:
            self.dev.pwrite(offset, buf)
            return
        with memoryview(buf) as whole:
            if length > whole.nbytes:
                raise ValueError(f"length {length} is larger than the buffer ({whole.nbytes} bytes)")
            with whole[:length] as part:
                self.dev.pwrite(offset, part)

    def poll(self) -> int:
        """Completions run on the I/O threads: nothing to collect here."""
        return 0

    def wait(self, timeout_s: float | None = None) -> int:
        """Completions run on the I/O threads: sleep ``timeout_s`` (callers also watch their own state)."""
        time.sleep(timeout_s if timeout_s is not None else 0.001)
        return 0

    def close(self) -> None:
        """Wait for every write (and its ``done``) to finish."""
        self._pool.shutdown(wait=True)


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

    @staticmethod
    def flush_ns() -> int:
        """Always 0: the fd is O_DSYNC, so each write's device flush is part of the write itself."""
        return 0

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
        """Start a durable write of ``buf[:length]`` at ``offset``; ``done(error)`` runs once it is durable.

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

    def poll(self) -> int:
        """Run the callbacks of writes that have completed, in this thread; never blocks on the device.

        Returns the number of completions handled (0 at once when none is waiting).
        """
        ring = self._ring
        if ring is None or ring.head == ring.tail:
            return 0
        return self._reap()

    def wait(self, timeout_s: float | None = None) -> int:
        """Block until at least one write completes (or ``timeout_s`` passes) and run the callbacks.

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
            self._finish(slot, _io_failure(f"write failed: io_submit: {os.strerror(code)}", where=self.dev.path,
                                           offset=self._cbs[slot].aio_offset, exc=OSError(code, os.strerror(code))))
            done += 1

    def _reap(self, min_nr: int = 0, timeout: _Timespec | None = None) -> int:
        """Collect completions (by default those waiting, without blocking) and finish them."""
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
                self._fail_all(_io_failure(f"io_getevents failed: {os.strerror(code)}", where=self.dev.path,
                                           exc=OSError(code, os.strerror(code))))
                return 0
        if not got:
            return 0
        local.plug = plug = []
        try:
            nbytes = self._nbytes
            for i in range(0, 4 * got, 4):
                slot, res = words[i], words[i + 2]
                if res == nbytes[slot]:  # the usual case: all of it written
                    self._finish(slot, None)
                else:
                    self._completed(slot, res)
        finally:
            local.plug = None
            if plug:
                self._io_submit(plug)
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
            error = _io_failure(f"write failed: {os.strerror(-res)}", where=self.dev.path, offset=cb.aio_offset,
                                exc=OSError(-res, os.strerror(-res)))
        elif res != cb.aio_nbytes:
            error = _io_failure(f"short write: wrote {res} of {cb.aio_nbytes} bytes", where=self.dev.path,
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
            done(error)
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


def open_write_queue(dev: Device, depth: int, engine: str | None = None, *, reaper: bool = True):
    """Return a WriteQueue for ``dev``: native AIO where it can be used, else threads.

    Args:
        depth: writes in flight at most (the caller keeps to it).
        engine: "auto" (default; env WALCTL_IO_ENGINE), "aio" or "threads".
        reaper: see AioWriteQueue; without one the caller must call ``wait`` to get completions.
    Raises:
        UsageError: an unknown engine, or "aio" where it cannot be used.
    """
    engine = engine or os.environ.get(IO_ENGINE_ENV) or "auto"
    if engine not in IO_ENGINES:
        raise UsageError(f"unknown I/O engine {engine!r}", hint=f"one of {', '.join(IO_ENGINES)}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if engine != "threads":
        # Only an O_DIRECT | O_DSYNC fd: buffered AIO would block in io_submit and skip the fdatasync.
        if isinstance(dev, DirectDevice) and dev.writable:
            try:
                return AioWriteQueue(dev, depth, reaper=reaper)
            except OSError as exc:
                if engine == "aio":
                    raise UsageError(f"native AIO is unavailable: {exc.strerror}", where=dev.path,
                                     hint="use the threads engine") from exc
        elif engine == "aio":
            raise UsageError("native AIO needs a device opened with O_DIRECT for writing", where=dev.path,
                             hint="use the threads engine")
    return ThreadWriteQueue(dev, depth)


# --- opening -----------------------------------------------------------------

def _open_error(exc: OSError, path: str) -> Exception:
    """Translate an OSError from stat/open into walctl's hierarchy."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENXIO, errno.ENODEV):
        return NotFoundError("no such device or file", where=path,
                             hint="check the path; DEVICE is the first argument")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _io_failure("cannot open", where=path, exc=exc, hint="permission denied")
    if exc.errno == errno.EROFS:
        return _io_failure("cannot open for writing", where=path, exc=exc,
                           hint="the device or filesystem is read-only")
    return _io_failure(f"cannot open: {exc.strerror}", where=path, exc=exc)


def _holder_hint(path: str) -> str | None:
    pid = lock_holder(path)
    return f"pid {pid}" if pid is not None else None


def open_device(path: str, *, writable: bool, allow_buffered: bool = True) -> Device:
    """Open a block device or regular file for walctl's aligned I/O.

    Writers get O_DIRECT|O_DSYNC, O_EXCL on block devices, and an exclusive
    flock held until ``close()``. Readers get O_DIRECT read-only and take no lock.

    Args:
        path: block device or regular file (use ``create_file`` to make one).
        writable: open for writing (and lock) or read-only.
        allow_buffered: when the filesystem refuses O_DIRECT, fall back to
            BufferedDevice (with a warning) instead of failing.
    Returns:
        A DirectDevice, or a BufferedDevice after the fallback.
    Raises:
        NotFoundError: no such path.
        UsageError: a directory or other non-file; logical block size > 4096;
            O_DIRECT refused and allow_buffered is False.
        RefusedError: (writable) the block device is busy (mounted, held,
            opened O_EXCL elsewhere) or another writer holds the flock.
        IOFailure: permission denied (hint), read-only medium, other errors.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _open_error(exc, path) from exc
    is_block = stat.S_ISBLK(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("is a directory, not a device or file", where=path,
                         hint="name a block device or a WAL file")
    if not is_block and not stat.S_ISREG(st.st_mode):
        raise UsageError("not a block device or regular file", where=path)

    if writable:
        # O_DSYNC: see DirectDevice._make_durable. O_EXCL on a block device asks the
        # kernel for an exclusive claim: EBUSY when mounted, used by dm/md, or held.
        base = os.O_RDWR | os.O_DSYNC | (os.O_EXCL if is_block else 0)
    else:
        base = os.O_RDONLY
    base |= os.O_CLOEXEC

    warnings: list[str] = []
    cls: type[_FdDevice] = DirectDevice
    try:
        fd = os.open(path, base | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise RefusedError("device is busy (mounted, or opened exclusively by another process)",
                               where=path, hint=_holder_hint(path)) from exc
        if exc.errno != errno.EINVAL:
            raise _open_error(exc, path) from exc
        # EINVAL at open with O_DIRECT: the filesystem has no direct I/O.
        if not allow_buffered:
            raise UsageError("the filesystem does not support O_DIRECT", where=path,
                             hint="put the WAL on a block device or a filesystem such as ext4 or xfs") from exc
        try:
            # No O_DSYNC here: BufferedDevice calls fdatasync after each write instead.
            fd = os.open(path, (base & ~os.O_DSYNC))
        except OSError as exc2:
            raise _open_error(exc2, path) from exc2
        cls = BufferedDevice
        warnings.append(BUFFERED_WARNING.format(path=path))

    try:
        if writable:
            try:
                # flock belongs to this open file description and lives until close():
                # one writer per device, even within one process.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise RefusedError("another writer holds the device", where=path,
                                   hint=_holder_hint(path)) from exc
            except OSError as exc:
                raise _io_failure(f"cannot lock: {exc.strerror}", where=path, exc=exc) from exc
        else:
            holder = lock_holder(path)
            if holder is not None:
                warnings.append(f"{path}: a writer (pid {holder}) holds the device; "
                                f"blocks in flight may read as damaged")
        try:
            device = cls(path, fd, writable=writable, warnings=warnings)
        except OSError as exc:  # fstat or a size ioctl failed
            raise _io_failure(f"cannot read the device size: {exc.strerror}", where=path, exc=exc) from exc
    except BaseException:
        os.close(fd)
        raise
    if device.logical_block_size > ALIGN:
        device.close()
        raise UsageError(f"logical block size {device.logical_block_size} is larger than {ALIGN}",
                         where=path, hint=f"walctl aligns all I/O to {ALIGN} bytes")
    return device


# --- locks -------------------------------------------------------------------

@dataclass(frozen=True)
class LockEntry:
    """One line of /proc/locks."""

    ordinal: int
    kind: str        # FLOCK, POSIX, OFDLCK, LEASE, DELEG
    mode: str        # ADVISORY, MANDATORY, ACTIVE, BREAKING, ...
    access: str      # READ, WRITE, UNLCK, ...
    pid: int         # -1 for OFD locks; 0 when the holder is outside our pid namespace
    major: int
    minor: int
    inode: int
    blocked: bool    # a waiter ("->"), not a holder


def parse_proc_locks(text: str) -> list[LockEntry]:
    """Parse /proc/locks text; lines it cannot read are skipped.

    Lines look like ``1: FLOCK  ADVISORY  WRITE 1224 00:19:1122 0 EOF``; a waiter
    has ``->`` before the kind. The device numbers are hexadecimal, the inode
    decimal (fs/locks.c prints ``%02x:%02x:%lu``).
    """
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or not fields[0].endswith(":"):
            continue
        blocked = "->" in fields
        fields = [f for f in fields if f != "->"]
        try:
            ordinal = int(fields[0][:-1])
            kind, mode, access, pid_text, ident = fields[1:6]
            major_text, minor_text, inode_text = ident.split(":")
            entries.append(LockEntry(ordinal=ordinal, kind=kind, mode=mode, access=access,
                                     pid=int(pid_text), major=int(major_text, 16),
                                     minor=int(minor_text, 16), inode=int(inode_text),
                                     blocked=blocked))
        except ValueError:
            continue  # "<none>:0" for a lock without an inode, or a format we do not know
    return entries


def lock_holder(path: str, *, proc_locks: str = "/proc/locks") -> int | None:
    """Return the pid holding a flock on ``path``'s inode, or None when none or unknown."""
    try:
        st = os.stat(path)
        with open(proc_locks, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for entry in parse_proc_locks(text):
        if (entry.kind == "FLOCK" and not entry.blocked and entry.pid > 0
                and entry.inode == st.st_ino
                and entry.major == os.major(st.st_dev) and entry.minor == os.minor(st.st_dev)):
            return entry.pid
    return None


# --- creating and wiping -----------------------------------------------------

def create_file(path: str, size_bytes: int) -> None:
    """Create a new regular file of exactly ``size_bytes`` and make its existence durable.

    Raises:
        ValueError: negative size.
        RefusedError: the path already exists.
        NotFoundError: the parent directory does not exist.
        IOFailure: any other failure (the partial file is removed).
    """
    if size_bytes < 0:
        raise ValueError(f"size_bytes must not be negative, got {size_bytes}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError as exc:
        raise RefusedError("file already exists", where=path,
                           hint="choose another path, or use the existing file") from exc
    except OSError as exc:
        raise _open_error(exc, path) from exc
    try:
        try:
            os.ftruncate(fd, size_bytes)  # sparse: blocks are allocated as the WAL writes
            # fsync (not fdatasync): the size is metadata that must survive a crash.
            os.fsync(fd)
        finally:
            os.close(fd)
        # The new directory entry is durable only once the parent directory is synced.
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise _io_failure(f"cannot create: {exc.strerror}", where=path, exc=exc) from exc


def zero_fill(dev: Device, offset: int, length: int,
              progress: Callable[[int], None] | None = None) -> None:
    """Durably write zeros over [offset, offset + length).

    On a block device the BLKZEROOUT ioctl is tried first (the kernel or the
    device zeroes without moving data from us); otherwise, or when it is not
    supported, zeros are written in ZERO_CHUNK_BYTES pieces.

    Args:
        progress: called with the number of bytes zeroed so far after each piece.
    Raises:
        ValueError: misaligned range, a range past the end, or a read-only device.
        IOFailure: the device failed.
    """
    check_aligned(offset, length)
    if not dev.writable:
        raise ValueError(f"device opened read-only: {dev.path}")
    if offset + length > dev.size_bytes:
        raise ValueError(f"zero range [{offset}, {offset + length}) passes the end of "
                         f"{dev.path} ({dev.size_bytes} bytes)")
    if dev.is_block_device and hasattr(dev, "fileno") and _zeroout(dev, offset, length, progress):
        return
    chunk = min(ZERO_CHUNK_BYTES, length)
    # No explicit close of the mmap: after a failed write the traceback still holds
    # a slice of it, and close() would then raise BufferError over the real error.
    zeros = aligned_buffer(chunk)
    with memoryview(zeros) as mv:
        done = 0
        while done < length:
            n = min(chunk, length - done)
            # pwrite is durable on return (O_DSYNC or fdatasync), so each piece is.
            dev.pwrite(offset + done, mv[:n])
            done += n
            if progress is not None:
                progress(done)


def _zeroout(dev, offset: int, length: int, progress) -> bool:
    """Zero with BLKZEROOUT in chunks; False when the ioctl is unsupported (nothing written yet)."""
    fd = dev.fileno()
    # Chunks only so progress moves; each ioctl is one call into the block layer.
    chunk = 64 * ZERO_CHUNK_BYTES
    done = 0
    while done < length:
        n = min(chunk, length - done)
        try:
            fcntl.ioctl(fd, BLKZEROOUT, struct.pack("=QQ", offset + done, n))
        except OSError as exc:
            if done == 0 and exc.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL):
                return False
            raise _io_failure(f"BLKZEROOUT failed: {exc.strerror}", where=dev.path,
                              offset=offset + done, exc=exc) from exc
        done += n
        if progress is not None:
            progress(done)
    # BLKZEROOUT waits for the writes to complete but does not flush the disk's
    # volatile cache; the flush makes the wipe durable before init writes a header.
    dev.flush()
    return True
