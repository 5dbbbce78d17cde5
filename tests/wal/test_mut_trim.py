"""wal/trim.py (issue 32): trim's refusals (behind the trim point, past the end, not a record's
start) with their exact messages and nearest-record hints, on a clean log (from the header slots)
and a crashed one (after the writer's scan), the counts a scan gives, and upload's trim_scanned."""

from __future__ import annotations

import fcntl
import os

import pytest

from walctl.errors import RefusedError, UsageError
from walctl.format import record as rec
from walctl.format.header import SHUTDOWN_UNGRACEFUL
from walctl.wal import trim
from walctl.wal.layout import Ring

from walhelpers import header_of, mark_ungraceful, new_wal, poke
from test_automq_forensics import AutoMQImage, KiB

CAPACITY = 256 * 1024
PACKED = [0, 157, 314, 471, 628, 785]  # six 100-byte records in the first block
BLOCKS = [4096, 8192, 12288]  # then three more, one a block
END = 12288 + 157


def _build(path) -> None:
    """Six 100-byte records packed in the first block, three more one a block, closed cleanly
    with a checkpoint: written directly (a writer's blocks depend on its timing)."""
    from walctl.device import open_device
    from walctl.format.batch import StreamRecordBatch
    from walctl.format.checkpoint import Checkpoint
    from walctl.wal.headers import read_headers, write_header

    new_wal(path, CAPACITY)
    for base, offset in enumerate(PACKED + BLOCKS):
        body = StreamRecordBatch(0, 0, base, 1, bytes([base]) * 100).encode()
        poke(str(path), Ring(CAPACITY).physical(offset), rec.encode_record(offset, body))
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=16384), Checkpoint(log_end=END))
    finally:
        dev.close()


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "w.img"
    _build(path)
    return open(path, "rb").read()


@pytest.fixture
def wal(image, tmp_path):
    path = tmp_path / "w.img"
    path.write_bytes(image)
    return str(path)


@pytest.fixture
def crashed(wal):
    mark_ungraceful(wal)
    return wal


def _usage(fn, *args, **kwargs) -> UsageError:
    with pytest.raises(UsageError) as err:
        fn(*args, **kwargs)
    return err.value


def test_a_clean_log_trims_from_its_headers_without_counts(wal):
    r = trim.trim_wal(wal, 314)
    assert (r.previous_trim_offset, r.trim_offset, r.records_deleted, r.records_left, r.end_offset, r.scanned) == \
        (-1, 314, None, None, END, False)
    state = header_of(wal)
    assert state.header.trim_offset == 314 and state.header.clean and r.header == state.header


def test_a_scan_counts_the_records_deleted_and_left(wal):
    trim.trim_wal(wal, 157)
    r = trim.trim_wal(wal, 628, scan=True)
    assert (r.previous_trim_offset, r.trim_offset, r.records_deleted, r.records_left, r.end_offset, r.scanned) == \
        (157, 628, 3, 4, END, True)  # live: 314, 471, 628 deleted; 785 and the three blocks left
    r = trim.trim_wal(wal, 12288, scan=True)
    assert (r.records_deleted, r.records_left) == (4, 0)


def test_the_first_record_at_offset_0_can_be_trimmed(wal):
    assert trim.trim_wal(wal, 0).trim_offset == 0


@pytest.mark.parametrize("log", ["clean", "crashed"])
def test_a_trim_offset_not_after_the_trim_point_is_refused(wal, log):
    trim.trim_wal(wal, 471)
    if log == "crashed":
        mark_ungraceful(wal)
    for offset in (471, 314, 0):
        err = _usage(trim.trim_wal, wal, offset)
        assert str(err) == f"trim offset {offset} is not after the current trim point 471"
        assert err.where == wal and err.hint == "the trim point only moves forward"
    assert header_of(wal).header.trim_offset == 471


@pytest.mark.parametrize("log", ["clean", "crashed"])
def test_an_offset_past_the_end_is_refused_with_the_last_record(wal, log):
    if log == "crashed":
        mark_ungraceful(wal)
    for offset in (END, END + 8000):
        err = _usage(trim.trim_wal, wal, offset)
        assert str(err) == f"no live record starts at offset {offset}: the log ends at {END}"
        assert err.where == wal and err.hint == "nearest record offsets: 12288"
    assert header_of(wal).header.clean  # a refused trim leaves the log clean (the crashed one recovered)


def test_an_offset_inside_a_record_of_a_clean_log_is_refused_with_its_neighbours(wal):
    err = _usage(trim.trim_wal, wal, 315)
    assert str(err) == ("no live record starts at offset 315 (record header: bad magic 0x65432100, expected "
                        "0x87654321 or 0x76543210)")
    assert err.where == wal and err.hint == "nearest record offsets: 314, 471"
    err = _usage(trim.trim_wal, wal, 5000, scan=True)  # (refused from the header slots: no scan)
    assert str(err) == "no live record starts at offset 5000 (record header is all zeros (never written or torn))"
    assert err.hint == "nearest record offsets: 4096, 8192"
    assert header_of(wal).header.clean and header_of(wal).header.trim_offset == -1


def test_an_offset_inside_a_record_of_a_crashed_log_is_refused_from_its_scan(crashed):
    err = _usage(trim.trim_wal, crashed, 315)
    assert str(err) == "no live record starts at offset 315"
    assert err.where == crashed and err.hint == "nearest record offsets: 314, 471"
    err = _usage(trim.trim_wal, crashed, 4000)
    assert err.hint == "nearest record offsets: 785, 4096"
    assert header_of(crashed).header.clean and header_of(crashed).header.trim_offset == -1


def test_under_the_lock_a_clean_log_is_checked_again_at_the_record_header(wal, monkeypatch):
    # the header slots' check passed (a writer's stale slot): the writer's open checks the same again
    monkeypatch.setattr(trim, "_refuse_trim_from_headers", lambda path, offset: None)
    err = _usage(trim.trim_wal, wal, 315)
    assert str(err).startswith("no live record starts at offset 315 (record header: bad magic")
    assert err.where == wal and err.hint == "nearest record offsets: 314, 471"
    err = _usage(trim.trim_wal, wal, END)
    assert str(err) == f"no live record starts at offset {END}: the log ends at {END}"
    assert err.where == wal and err.hint == "nearest record offsets: 12288"
    err = _usage(trim.trim_wal, wal, -1)
    assert str(err) == "trim offset -1 is not after the current trim point -1" and err.where == wal
    assert header_of(wal).header.clean and header_of(wal).header.trim_offset == -1
    assert trim.trim_wal(wal, 471).trim_offset == 471


def test_under_the_lock_a_record_header_with_no_neighbours_keeps_its_hint(wal, monkeypatch):
    monkeypatch.setattr(trim, "_refuse_trim_from_headers", lambda path, offset: None)
    monkeypatch.setattr(trim, "_records_near", lambda *a: [])
    err = _usage(trim.trim_wal, wal, 315)
    assert err.hint == "give an offset that append, upload or recover printed" and err.where == wal


def test_from_the_headers_a_record_header_with_no_neighbours_keeps_its_hint(wal, monkeypatch):
    monkeypatch.setattr(trim, "_records_near", lambda *a: [])
    err = _usage(trim.trim_wal, wal, 315)
    assert err.hint == "give an offset that append, upload or recover printed" and err.where == wal


def test_a_crashed_log_is_recovered_then_trimmed(crashed):
    r = trim.trim_wal(crashed, 785)
    assert (r.previous_trim_offset, r.trim_offset, r.end_offset) == (-1, 785, END)
    state = header_of(crashed)
    assert state.header.trim_offset == 785 and state.header.clean


def test_a_failure_after_the_open_aborts_the_writer(wal, monkeypatch):
    from walctl.wal import writer as wr

    def boom(self, **changes):
        raise KeyboardInterrupt

    monkeypatch.setattr(wr.WalWriter, "update_header", boom)
    with pytest.raises(KeyboardInterrupt):
        trim.trim_wal(wal, 314)
    assert not header_of(wal).header.clean  # aborted: the open's ungraceful header stays


def test_an_automq_wal_is_left_to_the_writer_s_refusal(tmp_path):
    img = AutoMQImage(256 * KiB, 1, stale=False)
    img.block([100, 100])
    img.headers(trim=-1, clean=True)
    path = img.save(tmp_path / "amq.img")
    with pytest.raises(RefusedError) as err:
        trim.trim_wal(path, 0)
    assert str(err.value) == "automq-v1 WAL: walctl reads it for forensics but never writes to it"


def test_no_record_near_an_offset_far_past_a_block_start(wal):
    dev_path = wal
    from walctl.device import open_device

    dev = open_device(dev_path, writable=False)
    try:
        ring = Ring(CAPACITY)
        assert trim._records_near(dev, ring, 315, 0, END) == [314, 471]
        assert trim._records_near(dev, ring, 314, 0, END) == [157, 471]  # the offset itself is neither
        assert trim._records_near(dev, ring, 0, 0, END) == [157]
        assert trim._records_near(dev, ring, 785, 0, END) == [628, 4096]
        assert trim._records_near(dev, ring, END, 0, END) == [12288]
        assert trim._records_near(dev, ring, 9000, 0, END) == [8192, 12288]
        assert trim._records_near(dev, ring, 9000, 0, 12288) == [8192]  # the log's end stops the walk
        assert trim._records_near(dev, ring, 600, 400, END) == []  # no block start at or after 400
        assert trim._records_near(dev, ring, 100000, 0, END) == [12288]  # back 86 KiB to a block start
        assert trim._records_near(dev, ring, 100000, 20000, END) == []  # none at or after 20000
    finally:
        dev.close()


def test_records_near_searches_back_block_by_block_at_most_a_mib(wal, monkeypatch):
    from walctl.device import open_device

    dev = open_device(wal, writable=False)
    try:
        ring = Ring(CAPACITY)
        assert trim._records_near(dev, ring, 21000, 0, END) == [12288]  # back from 20480 to 12288
        monkeypatch.setattr(trim, "NEAR_SEARCH_BYTES", 4096)
        assert trim._records_near(dev, ring, 21000, 0, END) == []  # 20480, 16384: no record; 12288 too far
        assert trim._records_near(dev, ring, 17000, 0, END) == [12288]  # 16384, then 12288: within 4096
        assert trim.NEAR_SEARCH_BYTES == 4096
    finally:
        dev.close()
    assert (1 << 20) == 1048576


def test_records_near_skips_padding_and_damage(tmp_path):
    from walctl.device import open_device
    from walctl.format.batch import StreamRecordBatch

    path = new_wal(tmp_path / "w.img", CAPACITY)
    ring = Ring(CAPACITY)
    for base, offset in enumerate((0, 157, 8192)):
        body = StreamRecordBatch(0, 0, base, 1, bytes(100)).encode()
        poke(path, ring.physical(offset), rec.encode_record(offset, body))
    poke(path, ring.physical(157) + 3, b"\xff")  # the second record's header is damaged
    poke(path, ring.physical(4096), rec.RecordHeader.padding(4096, 4096).encode())
    dev = open_device(path, writable=False)
    try:  # 157 unreadable: on to the next block; 4096 is padding, not a record
        assert trim._records_near(dev, ring, 200, 0, 12288) == [0, 8192]
        assert trim._records_near(dev, ring, 5000, 0, 12288) == [8192]  # the walk starts at the padding
    finally:
        dev.close()


def test_nearest_of_a_scan_s_offsets():
    assert trim._nearest([], 5) == "the log has no live records"
    assert trim._nearest([10, 20, 30], 25) == "nearest record offsets: 20, 30"
    assert trim._nearest([10, 20, 30], 20) == "nearest record offsets: 10, 20"
    assert trim._nearest([10, 20, 30], 5) == "nearest record offsets: 10"
    assert trim._nearest([10, 20, 30], 99) == "nearest record offsets: 30"
    assert trim._nearest([10, 20, 30], 10) == "nearest record offsets: 10"


def test_trim_scanned_writes_one_slot_and_keeps_the_rest(wal):
    before = header_of(wal)
    r = trim.trim_scanned(wal, 471)
    after = header_of(wal)
    assert (r.previous_trim_offset, r.trim_offset, r.records_deleted, r.records_left, r.end_offset, r.scanned) == \
        (-1, 471, None, None, END, False)
    assert after.header == r.header and after.header.trim_offset == 471
    assert after.header.with_(trim_offset=-1, last_write_timestamp_ns=0) == \
        before.header.with_(last_write_timestamp_ns=0)
    assert after.checkpoint == before.checkpoint and after.current != before.current


def test_trim_scanned_of_a_crashed_log_keeps_it_ungraceful_and_raises_a_stale_next_offset(wal):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers, write_header

    dev = open_device(wal, writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=4096))
    finally:
        dev.close()
    r = trim.trim_scanned(wal, 8192)
    assert r.end_offset == 4096  # no trusted checkpoint: the header's nextOffset
    h = header_of(wal).header
    assert (h.trim_offset, h.next_offset, h.clean) == (8192, 12288, False)  # the record's end, aligned up
    r = trim.trim_scanned(wal, 12288)  # past the crashed header's end: the record header decides
    h = header_of(wal).header
    assert (h.trim_offset, h.next_offset) == (12288, 16384)


def test_trim_scanned_keeps_a_next_offset_past_the_record(crashed):
    before = header_of(crashed).header.next_offset
    assert before == 16384
    trim.trim_scanned(crashed, 314)
    assert header_of(crashed).header.next_offset == 16384


def test_trim_scanned_refusals(wal):
    err = _usage(trim.trim_scanned, wal, -1)
    assert str(err) == "trim offset -1 is not after the current trim point -1" and err.where == wal
    for offset in (END, END + 1):
        err = _usage(trim.trim_scanned, wal, offset)
        assert str(err) == f"no live record starts at offset {offset}: the log ends at {END}"
        assert err.where == wal and err.hint == "give an offset that append, upload or recover printed"
    err = _usage(trim.trim_scanned, wal, 315)
    assert str(err).startswith("no live record starts at offset 315 (record header: bad magic")
    assert err.where == wal and err.hint == "give an offset that append, upload or recover printed"
    assert header_of(wal).header.trim_offset == -1


def test_trim_scanned_past_a_crashed_log_s_end_reads_the_record_header(crashed):
    err = _usage(trim.trim_scanned, crashed, END)
    assert str(err) == f"no live record starts at offset {END} (record header is all zeros (never written or torn))"
    assert err.where == crashed


def test_trim_scanned_is_refused_while_a_writer_holds_the_lock(wal):
    fd = os.open(wal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(RefusedError):
            trim.trim_scanned(wal, 314)
    finally:
        os.close(fd)
    assert header_of(wal).header.trim_offset == -1


def test_refuse_past_end_without_records_near_asks_for_a_printed_offset(tmp_path):
    path = new_wal(tmp_path / "w.img", CAPACITY)
    err = _usage(trim.trim_wal, path, 0)
    assert str(err) == "no live record starts at offset 0: the log ends at 0"
    assert err.hint == "give an offset that append, upload or recover printed"
    assert rec.SIZE == 24


def _no_checkpoint(path):
    """The header slots of a WAL written before checkpoints: clean, no checkpoint (trim scans)."""
    from walctl.device import open_device
    from walctl.wal.headers import read_headers, write_header

    dev = open_device(path, writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header, None)
    finally:
        dev.close()


def test_a_clean_log_without_a_checkpoint_is_scanned_and_counted(wal):
    _no_checkpoint(wal)
    r = trim.trim_wal(wal, 314)
    assert (r.previous_trim_offset, r.trim_offset, r.records_deleted, r.records_left, r.end_offset, r.scanned) == \
        (-1, 314, 3, 6, END, True)
    assert r.header == header_of(wal).header and r.header.trim_offset == 314


def test_a_scan_s_result_carries_the_header_written(wal):
    r = trim.trim_wal(wal, 157, scan=True)
    assert r.header == header_of(wal).header and r.header.trim_offset == 157


def test_a_wal_whose_slots_do_not_read_is_named(tmp_path):
    from walctl.errors import NotFoundError

    path = tmp_path / "zeros.img"
    path.write_bytes(bytes(CAPACITY))
    with pytest.raises(NotFoundError) as err:
        trim.trim_wal(str(path), 0)
    assert err.value.where == str(path)


def test_past_the_end_of_a_log_of_one_record_at_offset_0(tmp_path):
    from walctl.device import open_device
    from walctl.format.batch import StreamRecordBatch
    from walctl.format.checkpoint import Checkpoint
    from walctl.wal.headers import read_headers, write_header

    path = new_wal(tmp_path / "w.img", CAPACITY)
    poke(path, Ring(CAPACITY).physical(0), rec.encode_record(0, StreamRecordBatch(0, 0, 0, 1, bytes(100)).encode()))
    dev = open_device(path, writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=4096), Checkpoint(log_end=157))
    finally:
        dev.close()
    err = _usage(trim.trim_wal, path, 157)
    assert str(err) == "no live record starts at offset 157: the log ends at 157"
    assert err.hint == "nearest record offsets: 0"


def test_records_near_passes_over_a_stale_lap_s_record(tmp_path):
    from walctl.device import open_device
    from walctl.format.batch import StreamRecordBatch

    path = new_wal(tmp_path / "w.img", CAPACITY)
    ring = Ring(CAPACITY)
    body = StreamRecordBatch(0, 0, 0, 1, bytes(100)).encode()
    for offset in (0, 157, 8192):
        poke(path, ring.physical(offset), rec.encode_record(offset, body))
    poke(path, ring.physical(4096), rec.encode_record(4096 + ring.size, body))  # another lap's record: not 4096's
    dev = open_device(path, writable=False)
    try:
        assert trim._records_near(dev, ring, 5000, 0, 12288) == [157, 8192]
    finally:
        dev.close()


def test_records_near_goes_on_at_the_next_block_after_a_record_ending_at_its_last_byte(tmp_path):
    from walctl.device import open_device

    path = new_wal(tmp_path / "w.img", CAPACITY)
    ring = Ring(CAPACITY)
    poke(path, ring.physical(0), rec.encode_record(0, bytes(4096 - 1 - rec.SIZE)))  # ends at 4095
    poke(path, ring.physical(4096), rec.encode_record(4096, bytes(10)))
    dev = open_device(path, writable=False)
    try:
        assert trim._records_near(dev, ring, 3000, 0, 8192) == [0, 4096]
    finally:
        dev.close()
