"""Who holds a device: /proc/locks parsed, the flock holder of a path found."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass


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


# prefetch(): /proc/locks read on a thread at a process's start, for its lock_holder calls within
# PREFETCH_SECONDS: {proc_locks: (monotonic time the read began, thread, [text or OSError])}.
PREFETCH_SECONDS = 1.0
_prefetched: dict = {}


def prefetch(proc_locks: str = "/proc/locks") -> None:
    """Start reading ``proc_locks`` on a thread: lock_holder in the next PREFETCH_SECONDS answers
    from that read (as of when it began) instead of reading again. A process's first read of
    /proc/locks waits for a kernel RCU grace period (fs/locks.c takes a per-CPU rw-semaphore for
    writing: 5-20 ms on a 2-core VM, more than a short command's own work): the CLI starts it
    before its imports, which then hide the wait. Who holds a device is a moment's answer anyway:
    a writer may take or drop it while a reader reads."""
    import threading
    import time

    box: list = []

    def read() -> None:
        try:
            with open(proc_locks, encoding="ascii", errors="replace") as f:
                box.append(f.read())
        except OSError as exc:
            box.append(exc)

    thread = threading.Thread(target=read, name="walctl-proc-locks", daemon=True)
    _prefetched[proc_locks] = (time.monotonic(), thread, box)
    thread.start()


def _proc_locks_text(proc_locks: str) -> str:
    early = _prefetched.get(proc_locks)
    if early is not None:
        import time

        began, thread, box = early
        if time.monotonic() - began <= PREFETCH_SECONDS:
            thread.join()
            if box and isinstance(box[0], str):
                return box[0]
            if box:
                raise box[0]
        else:
            del _prefetched[proc_locks]
    with open(proc_locks, encoding="ascii", errors="replace") as f:
        return f.read()


def lock_holder(path: str, *, proc_locks: str = "/proc/locks") -> int | None:
    """Return the pid holding a flock on ``path``'s inode, or None when none or unknown."""
    try:
        st = os.stat(path)
        text = _proc_locks_text(proc_locks)
    except OSError:
        return None
    for entry in parse_proc_locks(text):
        if (entry.kind == "FLOCK" and not entry.blocked and entry.pid > 0
                and entry.inode == st.st_ino
                and entry.major == os.major(st.st_dev) and entry.minor == os.minor(st.st_dev)):
            return entry.pid
    return None


# The upload lease: an exclusive open-file-description lock (F_OFD_SETLK) on one byte of the WAL
# device far past any data. OFD locks and flock are independent on Linux, so it never touches the
# writer's flock, and it is released when its descriptor closes (a SIGKILLed upload frees it).
# Two opens in one process (the writer's own uploader beside nothing else) exclude each other too.
LEASE_OFFSET = 1 << 62
LEASE_POLL_S = 0.05
_FLOCK = "hhqqi4x"  # struct flock (x86-64, arm64): l_type, l_whence, l_start, l_len, l_pid


class Lease:
    """A held lease; ``release()`` (or closing the process) gives it back."""

    def __init__(self, fd: int):
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def take_lease(path: str, *, wait_s: float, on_wait=None, offset: int = LEASE_OFFSET) -> Lease | None:
    """Take the exclusive lease on ``path`` (see LEASE_OFFSET), waiting up to ``wait_s`` while another
    open file holds it; None if it is still held then. ``on_wait()`` is called once if it must wait.

    Raises:
        OSError: ``path`` cannot be opened for writing (an OFD write lock needs it), or the kernel
            has no OFD locks.
    """
    import fcntl
    import struct
    import time

    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    deadline = time.monotonic() + wait_s
    waited = False
    try:
        while True:
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
                return Lease(fd)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            time.sleep(LEASE_POLL_S)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
