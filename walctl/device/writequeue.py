"""Concurrent durable writes: the WriteQueue contract, the thread queue, and choosing an engine."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from walctl.defaults import IO_ENGINE_ENV, IO_ENGINES
from walctl.device.aio import AioWriteQueue
from walctl.device.base import Device, WriteDone
from walctl.device.fdio import DirectDevice
from walctl.errors import UsageError

# The WAL keeps several blocks in flight (its iodepth) and bench measures the
# device at a queue depth. Both go through a WriteQueue: ``submit`` starts one
# durable write and calls ``done(error, flush_ns)`` when it has finished, from another
# thread. Two implementations keep the same durability promise as ``pwrite``:
#   - AioWriteQueue: io_uring, or Linux native AIO (io_submit/io_getevents), on the
#     O_DIRECT | O_DSYNC fd of a DirectDevice. One thread reaps completions; no thread per
#     write, so Python's per-write cost is ~10 us and the device, not the GIL,
#     mostly sets the pace (4 KiB random writes at queue depth 4 on a loop
#     device: a thread pool reached 0.5-0.6 of fio's IOPS, AIO 0.9-1.05).
#   - ThreadWriteQueue: ``depth`` threads each blocking in ``dev.pwrite`` (the
#     GIL is released in the syscall). Any device works: buffered files, memory
#     and fault-injecting devices in tests, and kernels without AIO.

# IO_ENGINES and IO_ENGINE_ENV (forces an engine; auto picks io_uring, else aio, where it can) live in
# walctl.defaults.


class ThreadWriteQueue:
    """Writes run as blocking ``dev.pwrite`` calls on ``depth`` threads; works on any Device."""

    engine = "threads"

    def __init__(self, dev: Device, depth: int):
        self.dev = dev
        self.depth = depth
        self._pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="walctl-io")

    def submit(self, offset: int, buf, done: WriteDone, length: int | None = None) -> None:
        """Start a durable write of ``buf[:length]`` at ``offset``; ``done(error, flush_ns)`` runs on an I/O thread."""
        self._pool.submit(self._run, offset, buf, length, done)

    def _run(self, offset: int, buf, length: int | None, done: WriteDone) -> None:
        flush_ns = 0
        try:
            flush_ns = self._write(offset, buf, length)
        except BaseException as exc:  # handed to done, as a future's exception would be
            error = exc
        else:
            error = None
        try:
            done(error, flush_ns)
        except Exception:  # like a ThreadPoolExecutor callback: the caller's bug must not stop the pool
            logging.getLogger(__name__).exception("write completion callback failed")

    def _write(self, offset: int, buf, length: int | None) -> int:
        """Write durably; return the ns the device spent in fdatasync after it (0 where it reports none)."""
        if length is None:
            return self.dev.pwrite(offset, buf) or 0
        with memoryview(buf) as whole:
            if length > whole.nbytes:
                raise ValueError(f"length {length} is larger than the buffer ({whole.nbytes} bytes)")
            with whole[:length] as part:
                return self.dev.pwrite(offset, part) or 0

    def poll(self) -> int:
        """Completions run on the I/O threads: nothing to collect here."""
        return 0

    def wait(self, timeout_s: float | None = None, *, held: bool = False) -> int:
        """Completions run on the I/O threads: sleep ``timeout_s`` (callers also watch their own state).
        ``held``: as AioWriteQueue.wait's (nothing to change here)."""
        time.sleep(timeout_s if timeout_s is not None else 0.001)
        return 0

    def close(self) -> None:
        """Wait for every write (and its ``done``) to finish."""
        self._pool.shutdown(wait=True)



def open_write_queue(dev: Device, depth: int, engine: str | None = None, *, reaper: bool = True):
    """Return a WriteQueue for ``dev``: io_uring where the kernel sets a ring up, else native AIO,
    else threads.

    Args:
        depth: writes in flight at most (the caller keeps to it).
        engine: "auto" (default; env WALCTL_IO_ENGINE), "io_uring", "aio" or "threads".
        reaper: see AioWriteQueue; without one the caller must call ``wait`` to get completions.
    Raises:
        UsageError: an unknown engine, or "io_uring" or "aio" where it cannot be used.
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
                return AioWriteQueue(dev, depth, reaper=reaper, kind=None if engine == "auto" else engine)
            except OSError as exc:
                if engine != "auto":
                    name = "io_uring" if engine == "io_uring" else "native AIO"
                    raise UsageError(f"{name} is unavailable: {exc.strerror}", where=dev.path,
                                     hint="use the engine 'auto' (the best one that works here) or 'threads' "
                                          "(bench --engine, or WALCTL_IO_ENGINE)") from exc
        elif engine != "auto":
            raise UsageError(f"the {engine} engine needs a device opened with O_DIRECT for writing", where=dev.path,
                             hint="use the threads engine")
    return ThreadWriteQueue(dev, depth)
