"""Opening a device or file for walctl's aligned I/O, and mapping errno to walctl's errors."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

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


# How long a writer refused by a trim (walctl.device.locks: the trim mark) waits for it by default
# (open_device's trim_wait_s; walctl.wal.lifecycle.open_writer's), and the variable that sets it (a
# duration: 30s, 500ms, 0 for no wait; docs/CLI.md "Safety"). A trim holds the lock for a crash
# scan at most; one still holding it after this is stuck, or no trim (a pid reused).
TRIM_WAIT_S = 30.0
TRIM_WAIT_ENV = "WALCTL_TRIM_WAIT"
TRIM_WAIT_MAX_S = 7 * 24 * 3600  # as append's --full-wait
TRIM_POLL_S = 0.05  # how often a waiting writer tries the lock again
# A refusal by an unmarked holder is looked at once more after this: a trim between its open and its
# mark, or one whose death the kernel is undoing (it drops the mark a moment before the flock).
RECHECK_S = 0.01


def trim_wait_seconds() -> float:
    """The writer's wait for a trim: WALCTL_TRIM_WAIT (a duration), else TRIM_WAIT_S.

    Raises:
        UsageError: the variable is not a duration (exit 2).
    """
    text = os.environ.get(TRIM_WAIT_ENV, "").strip()
    if not text:
        return TRIM_WAIT_S
    from walctl.sizes import parse_duration

    try:
        seconds = parse_duration(text)
    except UsageError:
        seconds = None
    if seconds is None or seconds > TRIM_WAIT_MAX_S:  # (a 400-digit number parses to inf)
        raise UsageError(f"invalid value for {TRIM_WAIT_ENV}: {text!r}",
                         hint="a duration such as 30s, 500ms, or 0 for no wait; at most 7d") from None
    return seconds


def _holder_hint(entry) -> str | None:
    """``pid N`` of the flock's holder (``entry``: its /proc/locks line, walctl.device.locks.flock_entry),
    with its walctl command when it runs walctl (``pid N, walctl append``); None when /proc cannot tell."""
    from walctl.device.locks import process_command

    if entry is None:
        return None
    command = process_command(entry.pid)
    return f"pid {entry.pid}, {command}" if command else f"pid {entry.pid}"


def open_device(path: str, *, writable: bool, allow_buffered: bool = True, ask_holder: bool = True,
                trim_mark: bool = False, trim_wait_s: float = 0.0, on_wait=None) -> Device:
    """Open a block device or regular file for walctl's aligned I/O.

    Writers get O_DIRECT|O_DSYNC, O_EXCL on block devices, and an exclusive
    flock held until ``close()``. Readers get O_DIRECT read-only and take no lock.
    A writer refused because a trim holds the device (its mark, walctl.device.locks) waits up to
    ``trim_wait_s`` for it, trying again every TRIM_POLL_S; one refused by any other holder is
    refused at once.

    Args:
        path: block device or regular file (use ``create_file`` to make one).
        writable: open for writing (and lock) or read-only.
        allow_buffered: when the filesystem refuses O_DIRECT, fall back to
            BufferedDevice (with a warning) instead of failing.
        ask_holder: (readers) look up who holds the device (/proc/locks) and warn; upload,
            which judges a writer's presence itself from the header, skips it.
        trim_mark: (writers) this open is a trim's, closed as soon as it is done: mark it
            (walctl.device.locks.mark_trim), so a writer it refuses waits for it.
        trim_wait_s: (writers) how long to wait while a trim holds the device (0: refuse at once).
        on_wait: told once, ``on_wait(message)``, when a wait begins; None: a warning is logged
            (logger walctl.device.opening; Python prints it on stderr when nothing is configured).
    Returns:
        A DirectDevice, or a BufferedDevice after the fallback.
    Raises:
        NotFoundError: no such path.
        UsageError: a directory or other non-file; logical block size > 4096;
            O_DIRECT refused and allow_buffered is False.
        RefusedError: (writable) the block device is busy (mounted, held,
            opened O_EXCL elsewhere) or another writer holds the flock; a trim still held it
            after ``trim_wait_s`` ("a trim by walctl upload (pid N) holds the device").
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
    if writable:
        fd, cls = _open_writer(path, base | os.O_CLOEXEC, allow_buffered, warnings, trim_mark, trim_wait_s, on_wait)
    else:
        fd, cls = _open_fd(path, base | os.O_CLOEXEC, allow_buffered, warnings)
    try:
        if not writable and ask_holder:  # a reader asks who holds it (a writer that got the lock does not load walctl.device.locks)
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


def _open_writer(path: str, flags: int, allow_buffered: bool, warnings: list[str], trim_mark: bool,
                 trim_wait_s: float, on_wait) -> tuple[int, type[FdDevice]]:
    """The writer's fd, opened and locked (marked first when ``trim_mark``): at once, or after a
    trim's wait (open_device)."""
    deadline = None
    unmarked = 0  # refusals in a row by a holder without the trim mark
    while True:
        del warnings[:]  # (each try's own: the buffered fallback)
        try:
            return _open_locked(path, flags, allow_buffered, warnings, trim_mark)
        except RefusedError as exc:
            refusal = exc
        from walctl.device.locks import flock_entry, trim_holding

        entry = flock_entry(path)
        trim = trim_holding(path, entry.pid if entry is not None else None)
        # A shared flock is never a writer's: a probe's, such as udev's after a writer closed a block
        # device (systemd's block device locking), held for moments: waited for like a trim.
        shared = entry if trim is None and entry is not None and entry.access == "READ" else None
        if trim is None and (shared is None or trim_wait_s <= 0):
            unmarked += 1
            if unmarked > 1 or trim_wait_s <= 0:  # (without a wait, a refusal is the answer anyway)
                refusal.hint = _holder_hint(entry)
                raise refusal
            _sleep(RECHECK_S)
            continue
        unmarked = 0
        now = time.monotonic()
        if deadline is None:
            deadline = now + trim_wait_s
            if trim_wait_s > 0:
                what = (f"{trim.command} (pid {trim.pid}) to finish trimming" if trim is not None else
                        f"the shared lock of pid {shared.pid} (a probe of the device, such as udev's)")
                _say(on_wait, f"{path}: waiting up to {_seconds(trim_wait_s)} for {what}")
        if now >= deadline:
            if trim is None:
                refusal.hint = (f"pid {shared.pid} still held a shared lock on it after "
                                f"{_seconds(trim_wait_s)}, the wait {TRIM_WAIT_ENV} sets")
                raise refusal
            raise _trim_refusal(trim, path, trim_wait_s) from None
        _sleep(min(TRIM_POLL_S, deadline - now))


def _sleep(seconds: float) -> None:
    time.sleep(seconds)  # (a SIGTERM/SIGINT during it raises the CLI's interrupt: the fd is closed by then)


def _open_locked(path: str, flags: int, allow_buffered: bool, warnings: list[str],
                 trim_mark: bool) -> tuple[int, type[FdDevice]]:
    fd, cls = _open_fd(path, flags, allow_buffered, warnings)
    try:
        if trim_mark:  # before the flock: whoever finds the flock taken finds the mark too
            from walctl.device.locks import mark_trim

            mark_trim(fd)
        _lock(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, cls


def _trim_refusal(trim, path: str, waited_s: float) -> RefusedError:
    if waited_s > 0:
        hint = (f"it still held it after {_seconds(waited_s)}, the wait {TRIM_WAIT_ENV} sets; see what "
                f"pid {trim.pid} is doing, then run this again")
    else:
        hint = "a trim holds it for moments: run this again when it has finished"
    return RefusedError(f"{trim} holds the device", where=path, hint=hint)


def _say(on_wait, message: str) -> None:
    if on_wait is not None:
        on_wait(message)
    else:
        import logging

        logging.getLogger(__name__).warning("walctl: warning: %s", message)


def _seconds(seconds: float) -> str:
    return f"{seconds:g} s"


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
                               where=path) from exc  # (a writer's open: _open_writer adds the holder)
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
        raise RefusedError("another writer holds the device", where=path) from exc  # (the hint: _open_writer)
    except OSError as exc:
        raise io_failure(f"cannot lock: {exc.strerror}", where=path, exc=exc) from exc
