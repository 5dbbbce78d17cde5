"""One writer per device: flock for the life of the Device, /proc/locks to name the holder."""

import os

import pytest

from walctl.device import ALIGN, LockEntry, aligned_buffer, create_file, lock_holder, open_device, parse_proc_locks
from walctl.errors import RefusedError


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
