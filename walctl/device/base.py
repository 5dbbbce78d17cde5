"""The device protocol and the argument checks every implementation shares.

``Device`` is what the WAL engine needs from the thing it writes to (like vdsm
xlease's DirectFile / MemoryBackend). Every implementation enforces the same
rules (walctl.device.buffers): offsets, lengths and buffer addresses are
multiples of 4096, checked before the syscall, so code tested on memory behaves
the same on a disk.

The durability promise of ``pwrite`` on a writable device: when it returns, the
bytes are on stable storage, not just in the page cache or the disk's volatile
write cache. The WAL acknowledges a record on the strength of that return.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

from walctl.device.buffers import check_aligned
from walctl.errors import IOFailure

# A WriteQueue's completion callback, ``done(error, flush_ns)``: error is None once the write is
# durable, else what went wrong; flush_ns is how long of the write went to making it durable after
# it reached the page cache (fdatasync on a buffered device; 0 when O_DSYNC made the write itself
# durable, and 0 with an error). Passed with each completion, so nothing per thread remembers it.
WriteDone = Callable[[BaseException | None, int], None]


def io_failure(what: str, *, where: str, offset: int | None = None,
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
    # Returns the ns spent making the write durable after it was written (fdatasync), or None/0.
    def pwrite(self, offset: int, buf) -> int | None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class CheckedDevice:
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
