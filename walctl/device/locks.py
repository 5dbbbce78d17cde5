"""Who holds a device: /proc/locks parsed, the flock holder of a path found, and the trim mark
(a writer that holds the lock only to trim says so; a refused writer reads it)."""

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
    entry = flock_entry(path, proc_locks=proc_locks)
    return entry.pid if entry is not None else None


def flock_entry(path: str, *, proc_locks: str = "/proc/locks") -> LockEntry | None:
    """The /proc/locks line of a flock held on ``path``'s inode (its pid, its access: WRITE for an
    exclusive lock such as a writer's, READ for a shared one such as udev's while it probes a block
    device), or None when none or unknown."""
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
            return entry
    return None



# --- the trim mark: who holds the writer lock only for a moment -------------------------------
# A process that opens a writer only to trim and close (walctl trim; upload's and salvage's trim)
# marks itself, before it takes the writer's flock, with an open-file-description read lock
# (F_OFD_SETLK) on one byte of the device file far past any data: byte
#     TRIM_MARK_BASE + who * PID_SPAN + pid
# where pid is its own pid (below PID_SPAN, the kernel's PID_MAX_LIMIT) and who the index of its
# command in TRIM_COMMANDS (0 when it is none of them). The kernel drops the lock with the
# descriptor (a SIGKILLed trim frees it), OFD locks and flock never conflict on Linux (local file
# systems), and nothing lies beside the device. A writer refused the flock asks F_OFD_GETLK over the
# whole range from a descriptor of its own: the conflicting lock's l_start says who and which pid,
# without /proc (the pid as the trimming process sees it). Read locks: several trims may hold the
# mark at once (each then tries the flock; one gets it). The upload lease (walctl.device.lease) is
# the byte at 1 << 62, below this range.
TRIM_MARK_BASE = (1 << 62) + (1 << 40)
PID_SPAN = 1 << 22  # PID_MAX_LIMIT on 64-bit Linux: every pid fits below it
# Append only: the index is on the device while a trim runs, and other walctl versions read it.
TRIM_COMMANDS = ("walctl", "walctl trim", "walctl upload", "walctl salvage", "walctl selftest")
TRIM_MARK_SPAN = 64 * PID_SPAN  # room for 64 commands


@dataclass(frozen=True)
class TrimHolder:
    """A trim that holds (or is about to hold) a device's writer lock, from its mark."""

    pid: int
    command: str  # one of TRIM_COMMANDS

    def __str__(self) -> str:
        return f"a trim by {self.command} (pid {self.pid})"


def walctl_command(argv: list[str]) -> str | None:
    """``"walctl COMMAND"`` when ``argv`` (a process's sys.argv or /proc/PID/cmdline) runs walctl,
    else None. walctl runs as ``.../walctl [--json ...] COMMAND ...`` (its console script; in
    /proc/PID/cmdline the interpreter comes first) or ``python -m walctl COMMAND`` (whose sys.argv[0]
    is walctl/__main__.py). The command is the first word after the program that is no option
    (walctl's options before the command take no value)."""
    start = None
    if argv and _is_walctl(argv[0]):
        start = 1
    elif len(argv) >= 2 and os.path.basename(argv[0]).startswith("python"):
        if argv[1] == "-m" and argv[2:3] == ["walctl"]:
            start = 3
        elif _is_walctl(argv[1]):
            start = 2
    if start is None:
        return None
    command = next((w for w in argv[start:] if not w.startswith("-")), None)
    return "walctl" if command is None else f"walctl {command}"


def _is_walctl(word: str) -> bool:
    base = os.path.basename(word)
    return base == "walctl" or (base == "__main__.py" and os.path.basename(os.path.dirname(word)) == "walctl")


def process_command(pid: int) -> str | None:
    """``walctl COMMAND`` for a walctl process, from /proc/PID/cmdline; None for another program or
    when /proc cannot tell. (Only walctl's own command is named: another program's command line may
    hold what it should not show.)"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    if words and words[-1] == "":
        words.pop()
    return walctl_command(words)


def mark_trim(fd: int, argv: list[str] | None = None) -> bool:
    """Mark ``fd`` (open for reading) as a trim's (TRIM_MARK_BASE): before its flock, for as long as
    it is open. False where the kernel has no OFD locks (then a refused writer sees no mark and is
    refused at once, as before the mark)."""
    import fcntl
    import struct
    import sys

    from walctl.device.lease import FLOCK_FORMAT  # (here: a reader's start-up loads this module, not lease)

    command = walctl_command(sys.argv if argv is None else argv)
    who = TRIM_COMMANDS.index(command) if command in TRIM_COMMANDS else 0
    pid = os.getpid()
    if pid >= PID_SPAN:  # (not on Linux: PID_MAX_LIMIT)
        return False
    request = struct.pack(FLOCK_FORMAT, fcntl.F_RDLCK, os.SEEK_SET, TRIM_MARK_BASE + who * PID_SPAN + pid, 1, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
    except OSError:
        return False
    return True


def trim_holder(path: str) -> TrimHolder | None:
    """The trim whose mark (TRIM_MARK_BASE) is on ``path``, or None: no mark, no OFD locks, or
    ``path`` cannot be opened. Asked from a read-only descriptor of its own (a block device held
    with O_EXCL still opens so), which takes no lock: a query, as readers may make."""
    import fcntl
    import struct

    from walctl.device.lease import FLOCK_FORMAT

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK,
                             struct.pack(FLOCK_FORMAT, fcntl.F_WRLCK, os.SEEK_SET, TRIM_MARK_BASE, TRIM_MARK_SPAN, 0))
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _, start, length, _ = struct.unpack(FLOCK_FORMAT, answer)
    # A mark is a read lock on one byte of the range; anything else over it (another program's
    # whole-file lock, flock emulated as one on NFS) says nothing of a trim.
    if kind != fcntl.F_RDLCK or length != 1 or not 0 <= start - TRIM_MARK_BASE < TRIM_MARK_SPAN:
        return None
    who, pid = divmod(start - TRIM_MARK_BASE, PID_SPAN)
    return TrimHolder(pid, TRIM_COMMANDS[who] if who < len(TRIM_COMMANDS) else "walctl")


def trim_holding(path: str, holder_pid: int | None) -> TrimHolder | None:
    """The trim whose mark is on ``path`` if it is the one holding the flock, ``holder_pid`` (from
    /proc/locks; None when unknown, as on a block device held by O_EXCL before its flock): a mark
    whose pid is another's is a trim refused itself, marked for an instant before its flock failed."""
    trim = trim_holder(path)
    return trim if trim is not None and holder_pid in (None, trim.pid) else None
