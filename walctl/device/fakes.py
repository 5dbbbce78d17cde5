"""Devices for tests: ``MemoryDevice`` (a bytearray) and ``FaultyDevice`` (fails like disks do).

Both keep the real devices' argument checks, so a test on them fails where a disk would.
"""

from __future__ import annotations

import errno
import os

from walctl.device.base import CheckedDevice, Device, io_failure
from walctl.device.buffers import ALIGN, check_aligned, check_buffer
from walctl.errors import IOFailure


class MemoryDevice(CheckedDevice):
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
                raise io_failure(f"short read: got {len(chunk)} of {mv.nbytes} bytes (end of device)",
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
        return io_failure(f"{what} failed: injected EIO", where=self.path, offset=offset,
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
