"""walctl.wal.lifecycle (issue 32): opening a writer on small WAL files (clean, crashed, foreign,
damaged, too small) and the checkpoint rules it applies, with the refusals' exact words."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from walctl.device import open_device
from walctl.errors import CorruptionError, NotFoundError, RefusedError
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import MAX_STREAMS, Checkpoint
from walctl.format.header import HEADERS_SIZE, SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL, WalHeader
from walctl.wal import lifecycle
from walctl.wal.headers import HeaderState, Slot, read_headers, write_header
from walctl.wal.init import init_wal
from walctl.wal.lifecycle import (OpenedWAL, checkpoint_after_scan, open_writer, read_wal_state, refuse_foreign,
                                  trusted_checkpoint)

KiB = 1 << 10
RING = 64 * KiB


def new_wal(tmp_path, name="w.img") -> str:
    path = str(tmp_path / name)
    init_wal(path, RING + HEADERS_SIZE)
    return path


def state_of(header: WalHeader, cp: Checkpoint | None) -> HeaderState:
    return HeaderState((Slot(0, header, None, checkpoint=cp),), 0)


def headers(path):
    dev = open_device(path, writable=False)
    try:
        return read_headers(dev)
    finally:
        dev.close()


def write_records(path, n: int, stream: int = 1, *, clean: bool = True, size: int = 100) -> list[int]:
    opened = open_writer(path, need_stream=stream, batch_interval_s=3600.0)
    w = opened.writer
    base = (opened.checkpoint.streams.get(stream, 0) if opened.checkpoint else 0)
    offs = [w.append(StreamRecordBatch(stream, 0, base + i, 1, b"p" * size).encode(), None, (stream, base + i + 1))
            for i in range(n)]
    if clean:
        w.close()
    else:
        w.drain()
        w.abort()
    return offs


# -- refuse_foreign, read_wal_state --------------------------------------------------------
def test_an_automq_wal_is_refused_for_writing():
    with pytest.raises(RefusedError) as info:
        refuse_foreign(WalHeader(capacity=1 << 20, flavour="automq-v1"), "/dev/x")
    err = info.value
    assert err.what == "automq-v1 WAL: walctl reads it for forensics but never writes to it"
    assert err.where == "/dev/x"
    assert err.hint == "read it with 'walctl recover', 'walctl status' or 'walctl image'"
    refuse_foreign(WalHeader(capacity=1 << 20), "/dev/x")  # walctl's own: nothing raised


def test_a_device_smaller_than_the_header_slots_is_not_a_wal(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(bytes(HEADERS_SIZE - 4096))
    dev = open_device(str(path), writable=False)
    try:
        with pytest.raises(NotFoundError) as info:
            read_wal_state(dev, "small-dev")
    finally:
        dev.close()
    err = info.value
    assert err.what == "not a WAL: 4096 bytes, smaller than the two 4096-byte header slots"
    assert err.where == "small-dev"
    assert err.hint == "name the WAL's device or file; 'walctl init' creates one"


def test_a_device_of_exactly_the_header_slots_is_read(tmp_path):
    path = tmp_path / "zero"
    path.write_bytes(bytes(HEADERS_SIZE))
    dev = open_device(str(path), writable=False)
    try:
        with pytest.raises(NotFoundError) as info:  # zeros: no valid header, reported at the path
            read_wal_state(dev, "zero-dev")
    finally:
        dev.close()
    assert info.value.where == "zero-dev"
    assert not info.value.what.startswith("not a WAL: ")


def test_a_header_larger_than_the_device_is_corruption(tmp_path):
    path = new_wal(tmp_path)
    os.truncate(path, RING + HEADERS_SIZE - 4096)
    dev = open_device(path, writable=False)
    try:
        with pytest.raises(CorruptionError) as info:
            read_wal_state(dev, path)
    finally:
        dev.close()
    err = info.value
    assert err.what == (f"header capacity {RING + HEADERS_SIZE} bytes exceeds the device size "
                        f"{RING + HEADERS_SIZE - 4096} bytes")
    assert err.where == path and err.hint == "wrong device, or a damaged header"


def test_a_header_exactly_the_device_size_is_read(tmp_path):
    path = new_wal(tmp_path)
    dev = open_device(path, writable=False)
    try:
        assert read_wal_state(dev, path).header.capacity == RING + HEADERS_SIZE
    finally:
        dev.close()


# -- trusted_checkpoint -------------------------------------------------------------------
def test_a_clean_walctl_header_with_a_matching_checkpoint_is_trusted():
    cp = Checkpoint(5000, {1: 3}, True)
    h = WalHeader(capacity=1 << 20, next_offset=8192, trim_offset=4096)
    assert trusted_checkpoint(state_of(h, cp)) is cp
    assert trusted_checkpoint(state_of(h, Checkpoint(4096))) is None  # ends at the aligned next offset? no: 4096
    assert trusted_checkpoint(state_of(WalHeader(capacity=1 << 20, next_offset=4096, trim_offset=4096),
                                       Checkpoint(4096))) is not None  # its end is the trim point: kept


@pytest.mark.parametrize("header,cp", [
    (WalHeader(capacity=1 << 20, next_offset=8192), None),
    (WalHeader(capacity=1 << 20, next_offset=8192, shutdown_type=SHUTDOWN_UNGRACEFUL), Checkpoint(5000)),
    (WalHeader(capacity=1 << 20, next_offset=8192, flavour="automq-v0"), Checkpoint(5000)),
    (WalHeader(capacity=1 << 20, next_offset=12288), Checkpoint(5000)),  # the log went on past it
    (WalHeader(capacity=1 << 20, next_offset=4096), Checkpoint(5000)),
    (WalHeader(capacity=1 << 20, next_offset=8192, trim_offset=5001), Checkpoint(5000)),  # behind the trim
])
def test_a_checkpoint_is_not_trusted(header, cp):
    assert trusted_checkpoint(state_of(header, cp)) is None


def test_a_checkpoint_at_the_trim_point_with_no_trim_is_trusted():
    h = WalHeader(capacity=1 << 20, next_offset=0, trim_offset=-1)
    cp = Checkpoint(0, {}, True)
    assert trusted_checkpoint(state_of(h, cp)) is cp


# -- checkpoint_after_scan ----------------------------------------------------------------
def scan(end, **streams):
    return SimpleNamespace(end_offset=end, stream_ends={int(k[1:]): v for k, v in streams.items()})


def test_a_scan_updates_the_slots_streams_and_keeps_its_completeness():
    h = WalHeader(capacity=1 << 20, trim_offset=100)
    cp = Checkpoint(500, {1: 10, 2: 20}, True, 77)
    got = checkpoint_after_scan(state_of(h, cp), scan(900, s2=25, s3=1))
    assert got == Checkpoint(900, {1: 10, 2: 25, 3: 1}, True, 77)
    assert cp.streams == {1: 10, 2: 20}  # the slot's own is not changed
    got = checkpoint_after_scan(state_of(h, Checkpoint(500, {1: 10}, False)), scan(900, s2=1))
    assert got == Checkpoint(900, {1: 10, 2: 1}, False, -1)


def test_without_a_slot_checkpoint_a_scan_is_complete_only_if_nothing_was_trimmed():
    got = checkpoint_after_scan(state_of(WalHeader(capacity=1 << 20, trim_offset=-1), None), scan(300, s4=2))
    assert got == Checkpoint(300, {4: 2}, True, -1)
    got = checkpoint_after_scan(state_of(WalHeader(capacity=1 << 20, trim_offset=0), None), scan(300, s4=2))
    assert got == Checkpoint(300, {4: 2}, False, -1)


def test_too_many_streams_keep_the_scanned_ones_and_the_one_the_caller_writes():
    old = {sid: 1 for sid in range(1000, 1000 + MAX_STREAMS)}
    h = WalHeader(capacity=1 << 20, trim_offset=-1)
    result = SimpleNamespace(end_offset=10, stream_ends={5: 9, 6: 9})
    got = checkpoint_after_scan(state_of(h, Checkpoint(0, old, True)), result, keep=999)
    assert not got.complete and len(got.streams) == MAX_STREAMS
    assert got.streams[5] == 9 and got.streams[6] == 9
    assert 999 not in got.streams  # not in any: nothing to keep
    got = checkpoint_after_scan(state_of(h, Checkpoint(0, old, True)), result, keep=1000)
    assert 1000 in got.streams and 5 in got.streams and 6 in got.streams
    got = checkpoint_after_scan(state_of(h, Checkpoint(0, old, True)), result)
    assert 1000 not in got.streams  # the largest ids of the old ones are kept
    assert 1000 + MAX_STREAMS - 1 in got.streams


def test_streams_that_fit_are_all_kept():
    h = WalHeader(capacity=1 << 20, trim_offset=-1)
    old = {sid: 1 for sid in range(MAX_STREAMS - 1)}
    got = checkpoint_after_scan(state_of(h, Checkpoint(0, old, True)), scan(10, s9999=3), keep=7)
    assert got.complete and len(got.streams) == MAX_STREAMS


# -- open_writer --------------------------------------------------------------------------
def test_a_cleanly_closed_wal_opens_from_its_headers(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 3)
    opened = open_writer(path, iodepth=2, batch_interval_s=0.5)
    try:
        assert isinstance(opened, OpenedWAL)
        assert opened.scan is None and opened.repair is None and opened.sealed_ranges == 0
        assert opened.previous_shutdown == SHUTDOWN_GRACEFUL
        assert opened.checkpoint == Checkpoint(offs[-1] + 24 + 133, {1: 3}, True, -1)
        assert opened.header is opened.writer.header
        w = opened.writer
        assert w.iodepth == 2 and w.batch_interval_s == 0.5 and w.next_block == 4096
        assert w.checkpoint() == opened.checkpoint
        assert headers(path).header.shutdown_type == SHUTDOWN_UNGRACEFUL  # running: a crash must scan
        assert headers(path).header.next_offset == 4096
        assert opened.warnings == []
    finally:
        opened.writer.close()
    assert headers(path).header.shutdown_type == SHUTDOWN_GRACEFUL


def test_the_default_batch_interval_is_the_writers(tmp_path):
    path = new_wal(tmp_path)
    opened = open_writer(path)
    assert opened.writer.batch_interval_s == 0.002 and opened.writer.iodepth == 6
    assert opened.writer.on_ack is None
    acks = []
    opened.writer.close()
    opened = open_writer(path, on_ack=lambda o, t: acks.append(o))
    opened.writer.append(b"x")
    opened.writer.close()
    assert acks == [0]


def test_scan_asks_for_a_scan_of_a_clean_wal(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 2)
    opened = open_writer(path, scan=True, keep_offsets=True)
    try:
        assert opened.scan is not None and opened.repair is None
        assert opened.scan.end_offset == offs[-1] + 157
        assert opened.checkpoint.streams == {1: 2} and opened.checkpoint.complete
    finally:
        opened.writer.close()


def test_a_stream_the_checkpoint_does_not_list_needs_a_scan_unless_it_is_complete(tmp_path):
    path = new_wal(tmp_path)
    write_records(path, 2)
    opened = open_writer(path, need_stream=9)
    assert opened.scan is None  # complete: stream 9 never existed
    opened.writer.close()
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    write_header(dev, st, st.header, Checkpoint(st.checkpoint.log_end, {}, False))
    dev.close()
    opened = open_writer(path, need_stream=9)
    assert opened.scan is not None
    assert opened.checkpoint.streams == {1: 2}
    opened.writer.close()
    opened = open_writer(path, need_stream=1)
    assert opened.scan is None  # listed now (the scan's checkpoint)
    opened.writer.close()


def test_a_wal_without_a_checkpoint_scans_when_asked(tmp_path):
    path = new_wal(tmp_path)
    write_records(path, 2)
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    write_header(dev, st, st.header, None)  # no checkpoint
    dev.close()
    opened = open_writer(path)
    assert opened.scan is None and opened.checkpoint is None
    assert opened.writer.next_block == 4096
    assert opened.writer.checkpoint() == Checkpoint(4096, {}, False, -1)
    opened.writer.abort()
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    write_header(dev, st, st.header.with_(shutdown_type=SHUTDOWN_GRACEFUL), None)
    dev.close()
    opened = open_writer(path, scan_without_checkpoint=True)
    assert opened.scan is not None and opened.checkpoint is not None
    opened.writer.close()
    opened = open_writer(path, need_stream=1)
    assert opened.scan is None  # the scan's checkpoint, written at close, is trusted
    opened.writer.close()


def test_a_crashed_wal_is_scanned_and_its_next_offset_comes_from_the_scan(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 3, clean=False)
    assert headers(path).header.shutdown_type == SHUTDOWN_UNGRACEFUL
    opened = open_writer(path)
    try:
        assert opened.previous_shutdown == SHUTDOWN_UNGRACEFUL
        assert opened.scan is not None and opened.repair is not None
        assert opened.sealed_ranges == opened.repair.ranges == 0
        assert opened.writer.next_block == 4096
        assert opened.checkpoint == Checkpoint(offs[-1] + 157, {1: 3}, True, -1)
        assert headers(path).checkpoint == opened.checkpoint  # written at the open
    finally:
        opened.writer.close()


def test_a_crashed_wal_with_a_torn_tail_is_sealed(tmp_path):
    path = new_wal(tmp_path)
    write_records(path, 2, clean=False)
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    write_header(dev, st, st.header.with_(sliding_window_max_length=RING))
    dev.close()
    with open(path, "r+b") as f:  # a block after the log's end, torn: garbage where records would go
        f.seek(HEADERS_SIZE + 8192)
        f.write(b"\xff" * 4096)
    opened = open_writer(path)
    try:
        assert opened.repair is not None
        assert opened.sealed_ranges == opened.repair.ranges
    finally:
        opened.writer.close()


def test_an_automq_or_damaged_wal_is_refused_and_the_device_left_free(tmp_path, monkeypatch):
    path = new_wal(tmp_path)
    write_records(path, 2)
    real = lifecycle.read_wal_state

    def foreign(dev, p):
        st = real(dev, p)
        return state_of(st.header.__class__(**{**st.header.__dict__, "flavour": "automq-v1"}), None)

    monkeypatch.setattr(lifecycle, "read_wal_state", foreign)
    with pytest.raises(RefusedError, match="^automq-v1 WAL: walctl reads it"):
        open_writer(path)
    monkeypatch.setattr(lifecycle, "read_wal_state", real)
    open_writer(path).writer.close()  # the lock was released


def test_damage_below_the_durable_end_of_a_crashed_wal_is_refused(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 3)  # closed cleanly: durable up to its checkpoint
    write_records(path, 1, clean=False)
    with open(path, "r+b") as f:  # the second record's header, acknowledged: corrupt
        f.seek(HEADERS_SIZE + offs[1] + 4)
        f.write(b"\xde\xad")
    with pytest.raises(CorruptionError) as info:
        open_writer(path)
    assert info.value.hint == "walctl will not write over it; inspect with 'walctl recover'"
    assert info.value.where == path
    assert headers(path).header.shutdown_type == SHUTDOWN_UNGRACEFUL  # nothing written
    with pytest.raises(CorruptionError):
        open_writer(path)  # the device was released: the same refusal, not "locked"


def test_damage_in_a_clean_wal_is_refused_when_scanned(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 3)
    with open(path, "r+b") as f:
        f.seek(HEADERS_SIZE + offs[1] + 4)
        f.write(b"\xde\xad")
    with pytest.raises(CorruptionError) as info:
        open_writer(path, scan=True)
    assert info.value.hint == "walctl will not write over it; inspect with 'walctl recover'"
    open_writer(path).writer.close()  # no scan: opens


def test_a_bad_batch_does_not_stop_a_writer(tmp_path):
    path = new_wal(tmp_path)
    opened = open_writer(path)
    opened.writer.append(b"not a batch")
    opened.writer.drain()
    opened.writer.abort()
    opened = open_writer(path)
    assert opened.writer.next_block == 4096
    opened.writer.close()


def test_the_moved_names_load_from_their_rooms():
    from walctl.wal import init, readsession, trim

    assert lifecycle.init_wal is init.init_wal
    assert lifecycle.trim_wal is trim.trim_wal
    assert lifecycle.open_reader is readsession.open_reader
    assert lifecycle.RESCANS is readsession.RESCANS
    with pytest.raises(AttributeError):
        lifecycle.no_such_name


def crashed_with_a_hole(path) -> list[int]:
    """Three blocks written by a writer that then crashed, the middle one never reached the disk."""
    opened = open_writer(path, batch_interval_s=3600.0)
    w = opened.writer
    offs = []
    for i in range(3):
        offs.append(w.append(StreamRecordBatch(1, 0, i, 1, b"h" * 100).encode(), None, (1, i + 1)))
        w.submit_open_block()
    w.drain()
    w.abort()
    with open(path, "r+b") as f:
        f.seek(HEADERS_SIZE + offs[1])
        f.write(bytes(4096))
    return offs


def test_a_crash_hole_is_sealed_and_its_bytes_kept_beside_the_wal(tmp_path):
    path = new_wal(tmp_path)
    offs = crashed_with_a_hole(path)
    assert offs == [0, 4096, 8192]
    opened = open_writer(path)
    try:
        assert opened.repair is not None and opened.repair.ranges == 1 and opened.sealed_ranges == 1
        evidence = opened.repair.evidence_file
        assert evidence is not None and evidence.startswith(path + ".repair-") and os.path.exists(evidence)
        assert any(w.startswith("crash repair overwrote") and evidence in w for w in opened.warnings)
        assert opened.writer.next_block == 12288
        assert headers(path).header.next_offset == 12288  # the scan's next block, in the running header
    finally:
        opened.writer.close()


def test_too_many_scanned_streams_still_keep_the_one_the_caller_writes():
    h = WalHeader(capacity=1 << 20, trim_offset=-1)
    scanned = {sid: 1 for sid in range(1000, 1001 + MAX_STREAMS)}  # one more than fit
    got = checkpoint_after_scan(state_of(h, Checkpoint(0, {5: 4}, True)),
                                SimpleNamespace(end_offset=10, stream_ends=scanned), keep=5)
    assert got.streams[5] == 4 and len(got.streams) == MAX_STREAMS
    assert 1000 not in got.streams and 1001 not in got.streams  # the smallest scanned ids give way


def test_refusals_at_open_name_the_path(tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.write_bytes(bytes(4096))
    with pytest.raises(NotFoundError) as info:
        open_writer(str(small))
    assert info.value.where == str(small)
    path = new_wal(tmp_path)
    real = lifecycle.read_wal_state
    monkeypatch.setattr(lifecycle, "read_wal_state", lambda dev, p: state_of(
        WalHeader(capacity=real(dev, p).header.capacity, flavour="automq-v0"), None))
    with pytest.raises(RefusedError) as info:
        open_writer(path)
    assert info.value.where == path


def test_a_scan_keeps_record_offsets_only_when_asked(tmp_path):
    path = new_wal(tmp_path)
    offs = write_records(path, 2)
    opened = open_writer(path, scan=True)
    assert not opened.scan.record_offsets
    opened.writer.close()
    opened = open_writer(path, scan=True, keep_offsets=True)
    assert list(opened.scan.record_offsets) == offs
    opened.writer.close()


def test_an_untrusted_checkpoint_is_kept_in_the_header_the_open_writes(tmp_path):
    path = new_wal(tmp_path)
    write_records(path, 1)
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    stale = Checkpoint(5000, {1: 7}, True)  # ends past the header's next offset: not trusted
    write_header(dev, st, st.header, stale)
    dev.close()
    opened = open_writer(path)
    try:
        assert opened.checkpoint is None and opened.scan is None
        assert headers(path).checkpoint == stale
    finally:
        opened.writer.abort()


def test_the_budget_reaches_the_writer(tmp_path):
    from walctl.wal.pacing import Budget

    opened = open_writer(new_wal(tmp_path), budget=Budget(iops=100))
    try:
        assert opened.writer.budget == Budget(iops=100)
    finally:
        opened.writer.close()


def test_a_scan_at_open_keeps_the_stream_the_caller_needs_among_too_many(tmp_path):
    path = new_wal(tmp_path)
    write_records(path, 1, stream=5)
    dev = open_device(path, writable=True)
    st = read_headers(dev)
    old = {1: 9, **{1000 + i: 1 for i in range(MAX_STREAMS - 1)}}  # full: with stream 5, one too many
    write_header(dev, st, st.header, Checkpoint(st.checkpoint.log_end, old, False))
    dev.close()
    opened = open_writer(path, scan=True, need_stream=1)
    try:
        streams = opened.checkpoint.streams
        assert len(streams) == MAX_STREAMS and streams[1] == 9 and streams[5] == 1
        assert 1000 not in streams
    finally:
        opened.writer.close()
