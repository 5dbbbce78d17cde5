"""Opening a device or file for walctl's aligned I/O, and mapping errno to walctl's errors."""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from walctl.device.base import Device, io_failure
from walctl.device.buffers import ALIGN
from walctl.device.fdio import BufferedDevice, DirectDevice, FdDevice
from walctl.errors import NotFoundError, RefusedError, UsageError

BUFFERED_WARNING = ("{path}: the filesystem does not support O_DIRECT (tmpfs?); "
                    "using buffered I/O + fdatasync, same durability, page cache used")



def open_error(exc: OSError, path: str) -> Exception:
    """Translate an OSError from stat/open into walctl's hierarchy."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENXIO, errno.ENODEV):
        return NotFoundError("no such device or file", where=path,
                             hint="check the path; DEVICE is the first argument")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return io_failure("cannot open", where=path, exc=exc, hint="permission denied")
    if exc.errno == errno.EROFS:
        return io_failure("cannot open for writing", where=path, exc=exc,
                           hint="the device or filesystem is read-only")
    return io_failure(f"cannot open: {exc.strerror}", where=path, exc=exc)


def _holder_hint(path: str) -> str | None:
    from walctl.device.locks import lock_holder

    pid = lock_holder(path)
    return f"pid {pid}" if pid is not None else None


def open_device(path: str, *, writable: bool, allow_buffered: bool = True, ask_holder: bool = True) -> Device:
    """Open a block device or regular file for walctl's aligned I/O.

    Writers get O_DIRECT|O_DSYNC, O_EXCL on block devices, and an exclusive
    flock held until ``close()``. Readers get O_DIRECT read-only and take no lock.

    Args:
        path: block device or regular file (use ``create_file`` to make one).
        writable: open for writing (and lock) or read-only.
        allow_buffered: when the filesystem refuses O_DIRECT, fall back to
            BufferedDevice (with a warning) instead of failing.
        ask_holder: (readers) look up who holds the device (/proc/locks) and warn; upload,
            which judges a writer's presence itself from the header, skips it.
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
    is_block = _kind(path)
    if writable:
        # O_DSYNC: see DirectDevice._make_durable. O_EXCL on a block device asks the
        # kernel for an exclusive claim: EBUSY when mounted, used by dm/md, or held.
        base = os.O_RDWR | os.O_DSYNC | (os.O_EXCL if is_block else 0)
    else:
        base = os.O_RDONLY
    warnings: list[str] = []
    fd, cls = _open_fd(path, base | os.O_CLOEXEC, allow_buffered, warnings)
    try:
        if writable:
            _lock(fd, path)
        elif ask_holder:  # a reader asks who holds it (a writer that got the lock does not load walctl.device.locks)
            from walctl.device.locks import lock_holder

            holder = lock_holder(path)
            if holder is not None:
                warnings.append(f"{path}: a writer (pid {holder}) holds the device; "
                                f"blocks in flight may read as damaged")
        try:
            device = cls(path, fd, writable=writable, warnings=warnings)
        except OSError as exc:  # fstat or a size ioctl failed
            raise io_failure(f"cannot read the device size: {exc.strerror}", where=path, exc=exc) from exc
    except BaseException:
        os.close(fd)
        raise
    if device.logical_block_size > ALIGN:
        device.close()
        raise UsageError(f"logical block size {device.logical_block_size} is larger than {ALIGN}",
                         where=path, hint=f"walctl aligns all I/O to {ALIGN} bytes")
    return device


def _kind(path: str) -> bool:
    """True for a block device, False for a regular file; anything else (or nothing) raises."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise open_error(exc, path) from exc
    if stat.S_ISDIR(st.st_mode):
        raise UsageError("is a directory, not a device or file", where=path,
                         hint="name a block device or a WAL file")
    if not stat.S_ISBLK(st.st_mode) and not stat.S_ISREG(st.st_mode):
        raise UsageError("not a block device or regular file", where=path,
                         hint="name a block device or a WAL file; a FIFO, socket or character device holds no WAL")
    return stat.S_ISBLK(st.st_mode)


def _open_fd(path: str, flags: int, allow_buffered: bool, warnings: list[str]) -> tuple[int, type[FdDevice]]:
    """The fd opened O_DIRECT (DirectDevice), or, where the filesystem has no direct I/O and
    ``allow_buffered``, without it (BufferedDevice, a warning added)."""
    try:
        return os.open(path, flags | os.O_DIRECT), DirectDevice
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise RefusedError("device is busy (mounted, or opened exclusively by another process)",
                               where=path, hint=_holder_hint(path)) from exc
        if exc.errno != errno.EINVAL:
            raise open_error(exc, path) from exc
        # EINVAL at open with O_DIRECT: the filesystem has no direct I/O.
        if not allow_buffered:
            raise UsageError("the filesystem does not support O_DIRECT", where=path,
                             hint="put the WAL on a block device or a filesystem such as ext4 or xfs") from exc
    try:
        # No O_DSYNC here: BufferedDevice calls fdatasync after each write instead.
        fd = os.open(path, flags & ~os.O_DSYNC)
    except OSError as exc2:
        raise open_error(exc2, path) from exc2
    warnings.append(BUFFERED_WARNING.format(path=path))
    return fd, BufferedDevice


def _lock(fd: int, path: str) -> None:
    """The writer's exclusive flock on ``fd``: it belongs to this open file description and lives
    until close(): one writer per device, even within one process."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise RefusedError("another writer holds the device", where=path, hint=_holder_hint(path)) from exc
    except OSError as exc:
        raise io_failure(f"cannot lock: {exc.strerror}", where=path, exc=exc) from exc
