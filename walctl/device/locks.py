"""Who holds a device: /proc/locks parsed, the flock holder of a path found."""

from __future__ import annotations

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
    # Only the lines naming this inode are parsed ("MAJ:MIN:INODE " in fs/locks.c's format): a
    # host whose processes hold thousands of locks has a /proc/locks of thousands of lines.
    needle = f":{st.st_ino} "
    text = "\n".join(line for line in text.splitlines() if needle in line)
    for entry in parse_proc_locks(text):
        if (entry.kind == "FLOCK" and not entry.blocked and entry.pid > 0
                and entry.inode == st.st_ino
                and entry.major == os.major(st.st_dev) and entry.minor == os.minor(st.st_dev)):
            return entry.pid
    return None

