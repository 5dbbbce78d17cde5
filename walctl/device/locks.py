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
