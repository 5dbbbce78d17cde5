"""One writer per device: flock for the life of the Device, /proc/locks to name the holder."""

import os
import subprocess
import sys

import pytest

from walctl.device import ALIGN, LockEntry, aligned_buffer, create_file, lock_holder, open_device, parse_proc_locks
from walctl.errors import RefusedError, UsageError


@pytest.fixture
def wal_path(tmp_path) -> str:
    path = str(tmp_path / "wal.img")
    create_file(path, 4 * ALIGN)
    return path


# --- parsing /proc/locks -------------------------------------------------------

PROC_LOCKS = """\
1: FLOCK  ADVISORY  WRITE 1224 00:19:1122 0 EOF
1: -> FLOCK  ADVISORY  WRITE 1300 00:19:1122 0 EOF
2: POSIX  ADVISORY  WRITE 1440 fd:00:1578855 0 EOF
3: OFDLCK ADVISORY  READ  -1 103:02:77 128 255
4: LEASE  ACTIVE    READ  2001 08:01:42 0 EOF
5: FLOCK  ADVISORY  WRITE 0 00:05:9 0 EOF
6: FLOCK  ADVISORY  WRITE 77 <none>:0 0 EOF
not a lock line at all

"""


def test_parse_proc_locks_table():
    assert parse_proc_locks(PROC_LOCKS) == [
        LockEntry(1, "FLOCK", "ADVISORY", "WRITE", 1224, 0x00, 0x19, 1122, blocked=False),
        LockEntry(1, "FLOCK", "ADVISORY", "WRITE", 1300, 0x00, 0x19, 1122, blocked=True),
        LockEntry(2, "POSIX", "ADVISORY", "WRITE", 1440, 0xFD, 0x00, 1578855, blocked=False),
        # major 259 (NVMe) is printed in hex: 103.
        LockEntry(3, "OFDLCK", "ADVISORY", "READ", -1, 259, 2, 77, blocked=False),
        LockEntry(4, "LEASE", "ACTIVE", "READ", 2001, 8, 1, 42, blocked=False),
        LockEntry(5, "FLOCK", "ADVISORY", "WRITE", 0, 0, 5, 9, blocked=False),
    ]


def test_parse_proc_locks_nested_waiters():
    # Newer kernels indent chains of waiters: "1:  -> -> FLOCK ..."
    text = "1: FLOCK ADVISORY WRITE 10 00:19:5 0 EOF\n1:  -> -> FLOCK ADVISORY WRITE 11 00:19:5 0 EOF\n"
    entries = parse_proc_locks(text)
    assert [(e.pid, e.blocked) for e in entries] == [(10, False), (11, True)]


def test_parse_proc_locks_empty():
    assert parse_proc_locks("") == []


def _locks_line(path: str, pid: int, kind: str = "FLOCK", waiter: bool = False) -> str:
    st = os.stat(path)
    arrow = "-> " if waiter else ""
    return (f"1: {arrow}{kind}  ADVISORY  WRITE {pid} "
            f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} 0 EOF\n")


def test_lock_holder_matches_device_and_inode(tmp_path, wal_path):
    other = str(tmp_path / "other.img")
    create_file(other, ALIGN)
    locks = tmp_path / "locks"
    locks.write_text(_locks_line(other, 111) + _locks_line(wal_path, 222, waiter=True)
                     + _locks_line(wal_path, 333, kind="POSIX") + _locks_line(wal_path, 444))
    assert lock_holder(wal_path, proc_locks=str(locks)) == 444
    assert lock_holder(other, proc_locks=str(locks)) == 111


def test_lock_holder_finds_its_line_among_near_misses(tmp_path, wal_path):
    """Only lines naming the inode are parsed: inodes that hold its digits, its number elsewhere on
    the line, and its inode on another device are not its holder."""
    st = os.stat(wal_path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    ino = st.st_ino
    misses = [f"{n}: FLOCK  ADVISORY  WRITE {ino} {dev}:{n} {ino} EOF\n" for n in range(1, 400)]
    misses += [f"7: FLOCK  ADVISORY  WRITE 701 {dev}:{ino}1 0 EOF\n", f"8: FLOCK  ADVISORY  WRITE 801 {dev}:1{ino} 0 EOF\n",
               f"9: FLOCK  ADVISORY  WRITE 901 {os.major(st.st_dev) + 1:02x}:{os.minor(st.st_dev):02x}:{ino} 0 EOF\n",
               f"{ino}: FLOCK  ADVISORY  WRITE 902 {dev}:{ino + 1} 0 EOF\n"]
    locks = tmp_path / "locks"
    locks.write_text("".join(misses))
    assert lock_holder(wal_path, proc_locks=str(locks)) is None
    locks.write_text("".join(misses[:200]) + _locks_line(wal_path, 4242) + "".join(misses[200:]))
    assert lock_holder(wal_path, proc_locks=str(locks)) == 4242


def test_lock_holder_unknown(tmp_path, wal_path):
    locks = tmp_path / "locks"
    locks.write_text(_locks_line(wal_path, 0))  # holder in another pid namespace
    assert lock_holder(wal_path, proc_locks=str(locks)) is None
    assert lock_holder(wal_path, proc_locks=str(tmp_path / "missing")) is None
    assert lock_holder(str(tmp_path / "missing.img")) is None


def test_a_prefetched_read_answers_for_prefetch_seconds(tmp_path, wal_path, monkeypatch):
    """locks.prefetch (the CLI's, at a reader's start): lock_holder answers from that read while
    it is fresh (PREFETCH_SECONDS), from a read of its own after; a missing file is no holder."""
    from walctl.device import locks as locks_mod

    monkeypatch.setattr(locks_mod, "_prefetched", {})
    locks = tmp_path / "locks"
    locks.write_text(_locks_line(wal_path, 444))
    locks_mod.prefetch(str(locks))
    locks_mod._prefetched[str(locks)][1].join()  # (the read done: what it read is what it answers)
    locks.write_text(_locks_line(wal_path, 555))
    assert lock_holder(wal_path, proc_locks=str(locks)) == 444
    assert lock_holder(wal_path, proc_locks=str(locks)) == 444
    monkeypatch.setattr(locks_mod, "PREFETCH_SECONDS", 0.0)
    assert lock_holder(wal_path, proc_locks=str(locks)) == 555
    assert not locks_mod._prefetched
    missing = str(tmp_path / "missing")
    monkeypatch.setattr(locks_mod, "PREFETCH_SECONDS", 60.0)
    locks_mod.prefetch(missing)
    assert lock_holder(wal_path, proc_locks=missing) is None
    assert not any(t.name == "walctl-proc-locks" for t in __import__("threading").enumerate())


# --- the writer lock, for real -------------------------------------------------

def test_unlocked_file_has_no_holder(wal_path):
    assert lock_holder(wal_path) is None


def test_second_writer_in_same_process_is_refused(wal_path):
    # flock belongs to the open file description: a second open conflicts even here.
    with open_device(wal_path, writable=True):
        assert lock_holder(wal_path) == os.getpid()
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True)
        assert info.value.what == "another writer holds the device"
        assert info.value.where == wal_path
        assert info.value.hint == f"pid {os.getpid()}"
        assert info.value.exit_code == 5
    # close() released the lock.
    assert lock_holder(wal_path) is None
    with open_device(wal_path, writable=True):
        pass


def test_second_writer_in_other_process_is_refused(wal_path, hold_writer):
    pid = hold_writer(wal_path)
    assert lock_holder(wal_path) == pid
    with pytest.raises(RefusedError) as info:
        open_device(wal_path, writable=True)
    assert info.value.hint == f"pid {pid}"
    assert info.value.line() == f"walctl: error: another writer holds the device, {wal_path} (pid {pid})"


def test_reader_takes_no_lock_and_works_beside_a_writer(wal_path, hold_writer):
    with open_device(wal_path, writable=False) as reader:
        assert lock_holder(wal_path) is None  # the reader took nothing
        with open_device(wal_path, writable=True) as writer:  # so a writer still can
            writer.pwrite(0, aligned_buffer(ALIGN))
    pid = hold_writer(wal_path)
    with open_device(wal_path, writable=False) as reader:
        assert reader.warnings == [
            f"{wal_path}: a writer (pid {pid}) holds the device; blocks in flight may read as damaged"]
        reader.pread_into(0, aligned_buffer(4 * ALIGN))


# --- the trim mark: a holder that only trims, and the writers that wait for it --------------------

from walctl.device import locks as locks_mod  # noqa: E402
from walctl.device import opening  # noqa: E402
from walctl.device.locks import TrimHolder, mark_trim, process_command, trim_holder, walctl_command  # noqa: E402
from threadhelpers import wait_until  # noqa: E402


@pytest.mark.parametrize("argv, command", [
    (["/venv/bin/walctl", "upload", "wal.img"], "walctl upload"),
    (["/venv/bin/python3", "/venv/bin/walctl", "--json", "-q", "append", "wal.img"], "walctl append"),
    (["python3", "-m", "walctl", "trim", "wal.img", "0"], "walctl trim"),
    (["/src/walctl/__main__.py", "--debug", "salvage"], "walctl salvage"),
    (["/venv/bin/walctl", "--json"], "walctl"),
    (["walctl"], "walctl"),
    (["python3", "-c", "import walctl", "walctl"], None),
    (["python3", "-m", "pytest", "walctl"], None),
    (["vim", "walctl"], None),
    (["/src/other/__main__.py", "trim"], None),
    ([], None),
])
def test_walctl_command_of_an_argv(argv, command):
    assert walctl_command(argv) == command


def _started(child) -> int:
    """The child's pid once its command line is its own (a vfork'ed child's Popen returns before the
    kernel has set it up: /proc/PID/cmdline is empty a moment; a forked one shows its parent's until
    its exec)."""
    own = b"".join(os.fsencode(a) + b"\0" for a in child.args)
    wait_until(lambda: open(f"/proc/{child.pid}/cmdline", "rb").read() == own)
    return child.pid


def test_process_command_reads_proc_cmdline(tmp_path, wal_path):
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "walctl", "append"],
                             stdin=subprocess.PIPE)
    try:
        assert process_command(_started(child)) is None  # python -c ...: not walctl, nothing named
    finally:
        child.communicate()
    script = tmp_path / "walctl"
    script.write_text("import sys; sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, str(script), "--json", "append", wal_path], stdin=subprocess.PIPE)
    try:
        assert process_command(_started(child)) == "walctl append"  # (the interpreter first: a console script)
    finally:
        child.communicate()
    assert process_command(child.pid) is None  # gone


def test_a_mark_names_its_pid_and_command_and_goes_with_its_descriptor(wal_path):
    assert trim_holder(wal_path) is None
    fd = os.open(wal_path, os.O_RDWR)
    try:
        assert mark_trim(fd, argv=["/venv/bin/walctl", "upload", wal_path])
        assert trim_holder(wal_path) == TrimHolder(os.getpid(), "walctl upload")
        assert str(trim_holder(wal_path)) == f"a trim by walctl upload (pid {os.getpid()})"
        assert lock_holder(wal_path) is None  # a mark is no flock
    finally:
        os.close(fd)
    assert trim_holder(wal_path) is None
    for argv, command in ((["walctl", "trim"], "walctl trim"), (["walctl", "salvage"], "walctl salvage"),
                          (["walctl", "append"], "walctl"), (["pytest"], "walctl")):
        fd = os.open(wal_path, os.O_RDWR)
        try:
            assert mark_trim(fd, argv=argv)
            assert trim_holder(wal_path) == TrimHolder(os.getpid(), command)
        finally:
            os.close(fd)


def test_the_mark_lies_in_its_range_far_past_the_lease(wal_path):
    from walctl.device.lease import LEASE_OFFSET

    fd = os.open(wal_path, os.O_RDWR)
    try:
        mark_trim(fd, argv=["walctl", "salvage"])
        with open("/proc/locks") as f:
            ino = f":{os.stat(wal_path).st_ino} "
            lines = [line.split() for line in f if ino in line]
        assert [(w[1], w[3], int(w[-2]), w[-1]) for w in lines] == [
            ("OFDLCK", "READ", locks_mod.TRIM_MARK_BASE + 3 * locks_mod.PID_SPAN + os.getpid(),
             str(locks_mod.TRIM_MARK_BASE + 3 * locks_mod.PID_SPAN + os.getpid()))]
        assert locks_mod.TRIM_MARK_BASE > LEASE_OFFSET
        assert locks_mod.TRIM_MARK_BASE + locks_mod.TRIM_MARK_SPAN < 1 << 63
    finally:
        os.close(fd)


def test_two_marks_at_once_are_allowed(wal_path):
    """Read locks: two trims may be marked at once (each then tries the flock; one gets it)."""
    first, second = os.open(wal_path, os.O_RDWR), os.open(wal_path, os.O_RDWR)
    try:
        assert mark_trim(first, argv=["walctl", "trim"]) and mark_trim(second, argv=["walctl", "upload"])
        assert trim_holder(wal_path) in (TrimHolder(os.getpid(), "walctl trim"), TrimHolder(os.getpid(), "walctl upload"))
        os.close(first)
        first = None
        assert trim_holder(wal_path) == TrimHolder(os.getpid(), "walctl upload")
    finally:
        for fd in (first, second):  # (a closed one is not closed again: its number may be reused by now)
            if fd is not None:
                os.close(fd)


def test_a_trims_open_marks_itself_and_refuses_without_a_wait(wal_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/walctl", "upload", wal_path])
    with open_device(wal_path, writable=True, trim_mark=True):
        assert trim_holder(wal_path) == TrimHolder(os.getpid(), "walctl upload")
        assert lock_holder(wal_path) == os.getpid()
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True)
        assert info.value.line() == (f"walctl: error: a trim by walctl upload (pid {os.getpid()}) holds the device, "
                                     f"{wal_path} (a trim holds it for moments: run this again when it has finished)")
        assert info.value.exit_code == 5
        # a refused trim's own mark goes with its descriptor
        with pytest.raises(RefusedError):
            open_device(wal_path, writable=True, trim_mark=True)
        assert trim_holder(wal_path) == TrimHolder(os.getpid(), "walctl upload")
    assert trim_holder(wal_path) is None and lock_holder(wal_path) is None
    with open_device(wal_path, writable=True):  # no mark on a plain writer
        assert trim_holder(wal_path) is None


def test_a_writer_waits_for_a_trim_and_takes_the_lock_when_it_ends(wal_path):
    trim = open_device(wal_path, writable=True, trim_mark=True)
    said = []

    def on_wait(message):  # the trim ends as soon as the writer said it waits
        said.append(message)
        trim.close()

    with open_device(wal_path, writable=True, trim_wait_s=30, on_wait=on_wait):
        assert lock_holder(wal_path) == os.getpid() and trim_holder(wal_path) is None
    assert said == [f"{wal_path}: waiting up to 30 s for walctl (pid {os.getpid()}) to finish trimming"]


def test_a_writer_waits_through_trims_that_follow_each_other(wal_path, monkeypatch):
    """The wait goes on while trims (marked) hold the device, one after another; said once."""
    import fcntl

    def trim() -> int:  # what a trim's open does: the mark, then the flock
        fd = os.open(wal_path, os.O_RDWR)
        mark_trim(fd, argv=["walctl", "trim"])
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    held = [trim()]
    said, pauses = [], []

    def pause(seconds):  # each pause of the waiting writer: the next trim takes over, three times
        pauses.append(seconds)
        os.close(held[-1])
        if len(held) < 4:
            held.append(trim())

    monkeypatch.setattr(opening, "_sleep", pause)
    with open_device(wal_path, writable=True, trim_wait_s=30, on_wait=said.append):
        pass
    assert said == [f"{wal_path}: waiting up to 30 s for walctl trim (pid {os.getpid()}) to finish trimming"]
    assert pauses == [opening.TRIM_POLL_S] * 4


def test_a_trim_that_outlasts_the_wait_is_named(wal_path):
    said = []
    with open_device(wal_path, writable=True, trim_mark=True):
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True, trim_wait_s=0.15, on_wait=said.append)
    assert said == [f"{wal_path}: waiting up to 0.15 s for walctl (pid {os.getpid()}) to finish trimming"]
    assert info.value.what == f"a trim by walctl (pid {os.getpid()}) holds the device"
    assert info.value.hint == (f"it still held it after 0.15 s, the wait WALCTL_TRIM_WAIT sets; see what pid "
                               f"{os.getpid()} is doing, then run this again")


def test_an_unmarked_holder_is_refused_after_one_recheck_without_a_wait(wal_path, monkeypatch):
    slept = []
    monkeypatch.setattr(opening, "_sleep", slept.append)
    said = []
    with open_device(wal_path, writable=True):
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True, trim_wait_s=30, on_wait=said.append)
        assert info.value.what == "another writer holds the device" and info.value.hint == f"pid {os.getpid()}"
        with pytest.raises(RefusedError):
            open_device(wal_path, writable=True)  # no wait: no recheck either
    assert said == [] and slept == [opening.RECHECK_S]


def test_a_holder_gone_by_the_recheck_lets_the_writer_in(wal_path, monkeypatch):
    """A trim the kernel is taking down (its mark dropped a moment before its flock) or between its
    open and its mark: the recheck finds the lock free, and the writer goes on, unrefused."""
    holder = open_device(wal_path, writable=True)
    monkeypatch.setattr(opening, "_sleep", lambda s: holder.close())
    with open_device(wal_path, writable=True, trim_wait_s=30):
        assert lock_holder(wal_path) == os.getpid()


def test_the_wait_from_the_environment(monkeypatch):
    monkeypatch.delenv("WALCTL_TRIM_WAIT", raising=False)
    assert opening.trim_wait_seconds() == opening.TRIM_WAIT_S == 30.0
    for text, seconds in (("250ms", 0.25), ("2m", 120.0), ("0", 0.0), (" 5 ", 5.0), ("", 30.0), ("7d", 604800.0)):
        monkeypatch.setenv("WALCTL_TRIM_WAIT", text)
        assert opening.trim_wait_seconds() == seconds
    for text in ("-1s", "169h", "9" * 400):  # (the last parses to inf)
        monkeypatch.setenv("WALCTL_TRIM_WAIT", text)
        with pytest.raises(UsageError) as info:
            opening.trim_wait_seconds()
        assert info.value.what == f"invalid value for WALCTL_TRIM_WAIT: {text!r}"
        assert info.value.hint == "a duration such as 30s, 500ms, or 0 for no wait; at most 7d"


def test_the_wait_is_logged_when_nobody_listens(wal_path, caplog):
    trim = open_device(wal_path, writable=True, trim_mark=True)
    real = opening._say

    def say_then_end(on_wait, message):
        real(on_wait, message)
        trim.close()

    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(opening, "_say", say_then_end)
        with caplog.at_level("WARNING", logger="walctl.device.opening"):
            with open_device(wal_path, writable=True, trim_wait_s=5):
                pass
    assert [r.getMessage() for r in caplog.records] == [
        f"walctl: warning: {wal_path}: waiting up to 5 s for walctl (pid {os.getpid()}) to finish trimming"]


def _hold(wal_path: str, code: str) -> subprocess.Popen:
    """A child holding locks on ``wal_path`` (``code`` takes them on fd ``fd``) until its stdin closes."""
    child = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                              f"fd = os.open({wal_path!r}, os.O_RDWR)\n{code}\n"
                              "print('held', flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"held\n"
    return child


def _release(child: subprocess.Popen) -> None:
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def test_a_foreign_lock_over_the_mark_s_range_is_no_trim(wal_path):
    """Another program's whole-file lock (or flock emulated as one, on NFS) covers the marks' range: it
    is no trim, and a writer it refuses gets exit 5 naming it, not an internal error."""
    child = _hold(wal_path, "fcntl.lockf(fd, fcntl.LOCK_SH)\nfcntl.flock(fd, fcntl.LOCK_EX)")
    try:
        assert trim_holder(wal_path) is None
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True, trim_wait_s=30)
        assert info.value.what == "another writer holds the device" and info.value.hint == f"pid {child.pid}"
    finally:
        _release(child)


def test_the_mark_of_a_trim_refused_itself_is_not_the_holder(wal_path, monkeypatch):
    """A trim being refused is marked for an instant: a writer that sees its mark while another
    process holds the flock is refused at once, naming the holder, without waiting."""
    child = _hold(wal_path, "fcntl.flock(fd, fcntl.LOCK_EX)")  # a long-lived writer
    slept = []
    monkeypatch.setattr(opening, "_sleep", slept.append)
    marked = os.open(wal_path, os.O_RDONLY)
    try:
        assert mark_trim(marked, argv=["walctl", "upload"])  # (this process: not the flock's holder)
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True, trim_wait_s=30, on_wait=slept.append)
        assert info.value.what == "another writer holds the device" and info.value.hint == f"pid {child.pid}"
        assert slept == [opening.RECHECK_S]  # the recheck of an unmarked holder, no wait
    finally:
        os.close(marked)
        _release(child)


def test_a_shared_lock_is_waited_for_like_a_trim(wal_path, monkeypatch):
    """udev holds a shared flock on a block device while it probes it after a writer closed it; a
    writer never does: the wait covers it, said once; without a wait it is refused at once."""
    child = _hold(wal_path, "fcntl.flock(fd, fcntl.LOCK_SH)")
    said = []
    monkeypatch.setattr(opening, "_sleep", lambda seconds: _release(child))  # the probe ends
    with pytest.raises(RefusedError) as info:
        open_device(wal_path, writable=True)
    assert info.value.hint == f"pid {child.pid}"
    with open_device(wal_path, writable=True, trim_wait_s=30, on_wait=said.append):
        assert lock_holder(wal_path) == os.getpid()
    assert said == [f"{wal_path}: waiting up to 30 s for the shared lock of pid {child.pid} (a probe of the "
                    f"device, such as udev's)"]


def test_a_shared_lock_held_past_the_wait_is_refused_naming_it(wal_path):
    child = _hold(wal_path, "fcntl.flock(fd, fcntl.LOCK_SH)")
    try:
        with pytest.raises(RefusedError) as info:
            open_device(wal_path, writable=True, trim_wait_s=0.1, on_wait=lambda m: None)
        assert info.value.exit_code == 5 and info.value.what == "another writer holds the device"
        assert info.value.hint == (f"pid {child.pid} still held a shared lock on it after 0.1 s, the wait "
                                   f"WALCTL_TRIM_WAIT sets")
    finally:
        _release(child)
