"""wal/readsession.py (issue 32): the readers' read-only open and what tells them the log moved
under a scan: each kind of header change in words, the lock taken or released, slots that no
longer read, the bounded rescans, and --block-size for AutoMQ WALs only; on small WAL files."""

from __future__ import annotations

import fcntl
import os
import sys

import pytest

from walctl.device import open_device
from walctl.errors import NotFoundError, UsageError
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import SHUTDOWN_UNGRACEFUL, SLOT_SIZE, WalHeader
from walctl.wal import readsession as rs
from walctl.wal.headers import read_headers, write_header
from walctl.wal.init import init_wal

from test_automq_forensics import AutoMQImage, KiB

CAPACITY = 64 * 1024


@pytest.fixture
def wal(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, CAPACITY)
    return path


def _rewrite(path, checkpoint=..., **changes):
    dev = open_device(path, writable=True)
    try:
        state = read_headers(dev)
        if checkpoint is ...:
            write_header(dev, state, state.header.with_(**changes))
        else:
            write_header(dev, state, state.header.with_(**changes), checkpoint)
    finally:
        dev.close()


@pytest.fixture
def session(wal):
    s = rs.open_reader(wal)
    yield s
    s.dev.close()


def test_open_reader_reads_the_slots_read_only_with_no_writer(wal, session):
    assert session.path == wal and session.block_size is None and session.writer_pid is None
    assert session.warnings == [] and isinstance(session.warnings, list)
    assert session.state.header.capacity == CAPACITY and session.state.header.trim_offset == -1
    assert not session.dev.writable
    assert session.moved() is None and session.writer_now() is None


def test_open_reader_names_the_lock_holder(wal):
    fd = os.open(wal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        s = rs.open_reader(wal)
        try:
            assert s.writer_pid == os.getpid() and s.writer_now() == os.getpid() and s.moved() is None
        finally:
            s.dev.close()
    finally:
        os.close(fd)


def test_open_reader_takes_no_lock_holder_it_cannot_read(wal, monkeypatch):
    from walctl.device import locks

    real = locks.lock_holder

    def broken(path):  # fails for the reader's own look-up (the device's open asks too)
        if sys._getframe(1).f_globals["__name__"] == rs.__name__:
            raise OSError("no /proc/locks")
        return real(path)

    monkeypatch.setattr(locks, "lock_holder", broken)
    s = rs.open_reader(wal)
    try:
        assert s.writer_pid is None and s.writer_now() is None
    finally:
        s.dev.close()


def test_open_reader_closes_the_device_when_the_slots_do_not_read(tmp_path, monkeypatch):
    path = tmp_path / "zeros.img"
    path.write_bytes(bytes(CAPACITY))
    closed = []
    real = rs.open_device

    def opening(p, writable):
        assert writable is False
        dev = real(p, writable=writable)
        close = dev.close
        dev.close = lambda: (closed.append(p), close())
        return dev

    monkeypatch.setattr(rs, "open_device", opening)
    with pytest.raises(NotFoundError) as err:
        rs.open_reader(str(path))
    assert err.value.where == str(path)
    assert closed == [str(path)]


def test_moved_says_the_log_was_trimmed(wal, session):
    _rewrite(wal, trim_offset=4096, next_offset=8192)
    assert session.moved() == "the log was trimmed (-1 -> 4096) while it was read"


def test_moved_says_a_writer_started_then_that_it_stopped(wal, session):
    _rewrite(wal, shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=8192)
    assert session.moved() == "a writer started while it was read"
    session.refresh()
    assert session.moved() is None
    _rewrite(wal, shutdown_type=0, next_offset=12288)
    assert session.moved() == "the writer stopped while it was read"


def test_moved_says_a_writer_appended(wal, session):
    _rewrite(wal, next_offset=8192)
    assert session.moved() == "a writer appended (nextOffset 0 -> 8192) while it was read"


def test_moved_says_a_slot_was_rewritten_when_only_its_timestamp_or_checkpoint_changed(wal, session):
    _rewrite(wal)  # the same header, a later timestamp
    assert session.moved() == "a header slot was rewritten while it was read"
    session.refresh()
    assert session.moved() is None
    state = session.state
    dev = open_device(wal, writable=True)
    try:  # the same slot, its header unchanged, only its checkpoint: still a move
        from walctl.wal.headers import write_slot

        write_slot(dev, state.current, state.header, Checkpoint(log_end=0, complete=False))
    finally:
        dev.close()
    assert session.moved() == "a header slot was rewritten while it was read"


def test_a_slot_damaged_under_the_reader_is_a_move(wal, session):
    with open(wal, "r+b") as f:  # the older slot (not current) torn: the current header is unchanged
        other = 1 - session.state.current
        f.seek(other * SLOT_SIZE + 10)
        f.write(b"\xff\xff")
    assert session.moved() == "a header slot was rewritten while it was read"


def test_slots_that_no_longer_read_are_a_move_in_their_error_s_words(wal, session):
    with open(wal, "r+b") as f:
        for slot in (0, 1):
            f.seek(slot * SLOT_SIZE + 10)
            f.write(b"\xff\xff")
    assert session.moved() == ("the header slots could not be read again (no valid WAL header (not a WAL, "
                               "or both header slots destroyed))")


def test_the_lock_taken_or_released_under_the_reader_is_a_move(wal, session):
    fd = os.open(wal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert session.moved() == f"a writer (pid {os.getpid()}) took the lock"
        session.refresh()
        assert session.writer_pid == os.getpid() and session.moved() is None
    finally:
        os.close(fd)
    assert session.moved() == f"the writer (pid {os.getpid()}) released the lock"
    session.refresh()
    assert session.writer_pid is None and session.moved() is None


def test_writer_now_without_a_path_or_with_an_unreadable_lock_table(wal, session, monkeypatch):
    from walctl.device import locks

    session.path = ""
    monkeypatch.setattr(locks, "lock_holder", lambda p: pytest.fail("no path: not asked"))
    assert session.writer_now() is None
    session.path = wal

    def broken(path):
        raise OSError("gone")

    monkeypatch.setattr(locks, "lock_holder", broken)
    assert session.writer_now() is None
    monkeypatch.setattr(locks, "lock_holder", lambda p: 4242 if p == wal else None)
    assert session.writer_now() == 4242


def test_refresh_reads_the_slots_and_the_holder_again(wal, session, monkeypatch):
    from walctl.device import locks

    _rewrite(wal, trim_offset=4096, next_offset=8192)
    monkeypatch.setattr(locks, "lock_holder", lambda p: 777)
    session.refresh()
    assert session.state.header.trim_offset == 4096 and session.writer_pid == 777
    assert session.moved() is None


class _Result:
    def __init__(self, corrupt):
        self.corrupt = corrupt


def test_settled_scan_returns_the_first_clean_result(session):
    calls = []

    def scan(s):
        calls.append(s)
        return _Result([])

    result, settled, n = session.settled_scan(scan)
    assert result.corrupt == [] and settled is True and n == 1 and calls == [session]


def test_settled_scan_returns_damage_the_slots_did_not_move_under(session):
    result, settled, n = session.settled_scan(lambda s: _Result(["damage"]))
    assert (result.corrupt, settled, n) == (["damage"], True, 1)


def test_settled_scan_rescans_while_the_log_moves_then_gives_up(wal, session):
    scans = []

    def scan(s):
        scans.append(s.state.header.trim_offset)
        _rewrite(wal, trim_offset=4096 * len(scans), next_offset=4096 * len(scans))  # the writer trims under every scan
        return _Result([len(scans)])

    result, settled, n = session.settled_scan(scan)
    assert (result.corrupt, settled, n) == ([3], False, 3) and rs.RESCANS == 3
    assert scans == [-1, 4096, 8192]  # each scan starts from the slots read again


def test_settled_scan_settles_once_the_log_stops_moving(wal, session):
    scans = []

    def scan(s):
        scans.append(1)
        if len(scans) < 2:
            _rewrite(wal, next_offset=4096)
        return _Result(["damage"])

    result, settled, n = session.settled_scan(scan, attempts=5)
    assert (settled, n) == (True, 2)


def test_settled_scan_takes_its_number_of_attempts(wal, session):
    def scan(s):
        _rewrite(wal, next_offset=s.state.header.next_offset + 4096)
        return _Result(["damage"])

    assert session.settled_scan(scan, attempts=1)[1:] == (False, 1)
    assert session.settled_scan(scan, attempts=2)[1:] == (False, 2)


def test_describe_move_prefers_start_and_stop_over_trim_and_append():
    before = WalHeader(CAPACITY, trim_offset=0, next_offset=4096)
    crashed = before.with_(shutdown_type=SHUTDOWN_UNGRACEFUL)
    assert rs._describe_move(before, crashed.with_(trim_offset=5, next_offset=8192)) == \
        "a writer started while it was read"
    assert rs._describe_move(crashed, before.with_(trim_offset=5, next_offset=8192)) == \
        "the writer stopped while it was read"
    assert rs._describe_move(crashed, crashed.with_(trim_offset=5, next_offset=8192)) == \
        "the log was trimmed (0 -> 5) while it was read"
    assert rs._describe_move(crashed, crashed.with_(next_offset=8192)) == \
        "a writer appended (nextOffset 4096 -> 8192) while it was read"
    assert rs._describe_move(crashed, crashed) == "a header slot was rewritten while it was read"


def test_slot_identity_is_each_slot_s_header_checkpoint_and_error(wal, session):
    state = session.state
    ident = rs._slot_identity(state)
    assert ident == tuple((s.index, s.header, s.checkpoint, None) for s in state.slots)
    assert [i[0] for i in ident] == [0, 1]


def test_block_size_of_a_walctl_wal_is_its_own_or_refused(wal):
    s = rs.open_reader(wal, block_size=4096)
    try:
        assert s.block_size == 4096 and s.state.header.block_size == 4096 and s.moved() is None
    finally:
        s.dev.close()
    with pytest.raises(UsageError) as err:
        rs.open_reader(wal, block_size=8192)
    assert str(err.value) == "--block-size applies to AutoMQ WALs only; walctl's own use 4096"
    assert err.value.where == wal and err.value.hint == "drop --block-size"


def test_with_block_size_keeps_a_walctl_state_as_it_is(wal, session):
    assert rs._with_block_size(session.dev, session.state, 4096, wal) is session.state


def test_an_automq_wal_is_read_again_at_the_block_size_given(tmp_path):
    img = AutoMQImage(256 * KiB, 1, block_size=8192, stale=False)
    img.block([100, 200])
    img.headers(trim=-1, clean=True)
    path = img.save(tmp_path / "amq.img")
    s = rs.open_reader(path, block_size=8192)
    try:
        assert s.state.header.flavour == "automq-v1" and s.state.header.block_size == 8192
        assert s.block_size == 8192 and s.moved() is None
        s.refresh()
        assert s.state.header.block_size == 8192
    finally:
        s.dev.close()
    s = rs.open_reader(path, block_size=4096)  # as given: slot B looked for at 4096, not found there
    try:
        assert s.state.header.block_size == 4096 and s._read_state().header.block_size == 4096
    finally:
        s.dev.close()


def test_an_automq_wal_whose_slots_do_not_read_at_the_block_size_names_the_device(tmp_path):
    img = AutoMQImage(256 * KiB, 1, block_size=8192, stale=False)
    img.block([100])
    img.headers(trim=-1, clean=True, slot=1)  # only slot B (at 8192) is current...
    img.data[:8192] = bytes(8192)  # ... and slot A is gone
    path = img.save(tmp_path / "amq.img")
    with pytest.raises(NotFoundError) as err:
        rs.open_reader(path, block_size=4096)  # slot B looked for at 4096: nothing there
    assert err.value.where == path


def test_settled_scan_of_no_attempts_has_no_result(session):
    assert session.settled_scan(lambda s: pytest.fail("no scan"), attempts=0) == (None, False, 0)


def test_a_slot_damaged_again_differently_is_a_move(wal):
    with open(wal, "r+b") as f:  # slot 0 (the older) torn: bad magic
        f.write(b"\xff\xff\xff\xff")
    s = rs.open_reader(wal)
    try:
        assert s.state.current == 1 and s.moved() is None
        with open(wal, "r+b") as f:  # now its body too: still damaged, another error
            f.seek(0)
            f.write(bytes(SLOT_SIZE))
        assert str(s._read_state().slots[0].error) != str(s.state.slots[0].error)
        assert s.moved() == "a header slot was rewritten while it was read"
    finally:
        s.dev.close()


def _amq(tmp_path, block_size=8192):
    img = AutoMQImage(256 * KiB, 1, block_size=block_size, stale=False)
    img.block([100, 200])
    img.headers(trim=-1, clean=True)
    return img, img.save(tmp_path / "amq.img")


def test_an_automq_header_past_the_device_s_end_does_not_read_again(tmp_path):
    from test_automq_forensics import V1_MAGIC, amq_header

    img, path = _amq(tmp_path)
    for block_size in (None, 8192):
        s = rs.open_reader(path, block_size=block_size)
        try:
            with open(path, "r+b") as f:  # a newer slot A claiming twice the device
                f.write(amq_header(V1_MAGIC, 512 * KiB, -1, 2_000_000, 128 * KiB, 0, block=8192))
            assert s.moved() == ("the header slots could not be read again (header capacity 524288 bytes "
                                 "exceeds the device size 262144 bytes)")
        finally:
            s.dev.close()
            img.save(tmp_path / "amq.img")


def test_refresh_names_the_device_when_the_slots_are_gone(wal, tmp_path):
    s = rs.open_reader(wal)
    try:
        with open(wal, "r+b") as f:
            f.write(bytes(2 * SLOT_SIZE))
        with pytest.raises(NotFoundError) as err:
            s.refresh()
        assert err.value.where == wal
    finally:
        s.dev.close()
    img, path = _amq(tmp_path)
    s = rs.open_reader(path, block_size=8192)
    try:
        with open(path, "r+b") as f:
            f.write(bytes(2 * 8192))
        with pytest.raises(NotFoundError) as err:
            s.refresh()
        assert err.value.where == path
    finally:
        s.dev.close()


def test_an_automq_wal_replaced_by_a_walctl_one_refuses_the_block_size_on_refresh(tmp_path):
    img, path = _amq(tmp_path)
    s = rs.open_reader(path, block_size=8192)
    try:
        init_wal(path, None, force=True, discard_unuploaded=True)
        with pytest.raises(UsageError) as err:
            s.refresh()
        assert str(err.value) == "--block-size applies to AutoMQ WALs only; walctl's own use 4096"
        assert err.value.where == path
        assert s.moved() == ("the header slots could not be read again (--block-size applies to AutoMQ WALs "
                             "only; walctl's own use 4096)")
    finally:
        s.dev.close()
