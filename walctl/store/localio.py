"""File writes a local store's modules share: whole writes at a position, directory fsyncs."""

from __future__ import annotations

import errno
import os

# A large put starts the writeback of what it wrote every this many bytes (posix_fadvise DONTNEED:
# asynchronous writeback of the range, then its clean pages dropped), so the disk writes while the
# object is still being built and the fsync before the rename waits only for the last stretch.
WRITEBACK_BYTES = 16 << 20


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        if done == 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[done:]


def pwrite_all(fd: int, views: list, pos: int) -> int:
    """Write ``views`` back to back at ``pos`` (pwritev, again after a short write); returns the bytes written."""
    total = 0
    views = [v for v in views if v.nbytes]
    while views:
        done = os.pwritev(fd, views, pos)
        if done == 0:
            raise OSError(errno.EIO, "write returned 0")
        pos += done
        total += done
        while views and done >= views[0].nbytes:
            done -= views[0].nbytes
            views = views[1:]
        if done:
            views = [views[0][done:]] + views[1:]
    return total
