"""wal/init.py (issue 32): the WAL ``walctl init`` writes (both slots, their timestamps, window and
checkpoint), the capacity rules, what it refuses (data, a WAL, records not yet uploaded) and
wipes, the free-space check of a prewrite, and that a failed init leaves no file it created;
on small regular files."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from walctl.device import open_device
from walctl.errors import IOFailure, RefusedError, UsageError
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import HEADERS_SIZE, MIN_CAPACITY, WalHeader
from walctl.wal import init
from walctl.wal.headers import read_headers, write_header
from walctl.wal.layout import Ring

from walhelpers import header_of, poke
from test_automq_forensics import AutoMQImage, KiB

CAPACITY = 64 * 1024
RING = CAPACITY - HEADERS_SIZE


def _records(path, offsets, *, log_end=None, trim=-1, clean=True, checkpoint=True):
    """Records of 100-byte payloads at ``offsets`` (157 bytes each), and a header saying so."""
    ring = Ring(CAPACITY)
    for base, offset in enumerate(offsets):
        body = StreamRecordBatch(0, 0, base, 1, bytes([base]) * 100).encode()
        poke(str(path), ring.physical(offset), rec.encode_record(offset, body))
    end = log_end if log_end is not None else (max(offsets) + 157 if offsets else 0)
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        header = state.header.with_(next_offset=-(-end // 4096) * 4096, trim_offset=trim,
                                    shutdown_type=0 if clean else 1)
        write_header(dev, state, header, Checkpoint(log_end=end) if checkpoint else None)
    finally:
        dev.close()


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(init.time, "time_ns", lambda: 1_000_000)


def test_a_new_wal_gets_both_slots_with_an_empty_complete_checkpoint(tmp_path, clock):
    path = str(tmp_path / "w")
    r = init.init_wal(path, CAPACITY + 100, node_id=7)
    want = WalHeader(capacity=CAPACITY, trim_offset=-1, last_write_timestamp_ns=1_000_001,
                     sliding_window_max_length=RING, shutdown_type=0, node_id=7, epoch=-1, next_offset=0)
    assert r == init.InitResult(path, want, True, CAPACITY, 0, [], False)
    assert os.path.getsize(path) == CAPACITY
    state = header_of(path)
    assert state.current == 1 and state.header == want
    assert state.slots[0].header == want.with_(last_write_timestamp_ns=1_000_000)
    assert [s.checkpoint for s in state.slots] == [Checkpoint(log_end=0, complete=True)] * 2


def test_the_window_is_capped_at_1_mib(tmp_path):
    r = init.init_wal(str(tmp_path / "w"), (2 << 20) + HEADERS_SIZE)
    assert r.header.sliding_window_max_length == 1 << 20
    r = init.init_wal(str(tmp_path / "v"), (1 << 20) + HEADERS_SIZE)
    assert r.header.sliding_window_max_length == 1 << 20


def test_the_capacity_is_aligned_down_and_at_least_the_minimum(tmp_path):
    assert MIN_CAPACITY == 16384
    assert init.init_wal(str(tmp_path / "a"), MIN_CAPACITY + 4095).header.capacity == MIN_CAPACITY
    for capacity in (MIN_CAPACITY - 1, MIN_CAPACITY - 4096):
        path = str(tmp_path / f"b{capacity}")
        with pytest.raises(UsageError) as err:
            init.init_wal(path, capacity)
        aligned = capacity // 4096 * 4096
        assert str(err.value) == f"capacity {aligned} bytes is too small"
        assert err.value.where == path
        assert err.value.hint == "at least 16384 bytes: two 4 KiB header slots and two blocks"
        assert not os.path.exists(path)
    assert init._checked_capacity(None, "p") is None
    assert init._checked_capacity(20000, "p") == 16384


def test_a_new_file_needs_a_capacity(tmp_path):
    path = str(tmp_path / "w")
    with pytest.raises(UsageError) as err:
        init.init_wal(path, None)
    assert str(err.value) == "--capacity is required to create a new WAL file"
    assert err.value.where == path and err.value.hint == "walctl init DEVICE --capacity 64MiB (a size with its unit)"
    assert not os.path.exists(path)


def test_an_existing_zeroed_file_takes_its_whole_aligned_size(tmp_path):
    path = tmp_path / "w"
    path.write_bytes(bytes(CAPACITY + 1000))
    r = init.init_wal(str(path), None)
    assert (r.header.capacity, r.created, r.device_size_bytes, r.wiped_bytes) == (CAPACITY, False, CAPACITY + 1000, 0)
    assert os.path.getsize(path) == CAPACITY + 1000  # an existing file keeps its size


def test_an_existing_file_too_small_or_smaller_than_the_capacity(tmp_path):
    path = tmp_path / "w"
    path.write_bytes(bytes(MIN_CAPACITY - 1))
    with pytest.raises(UsageError) as err:
        init.init_wal(str(path), None)
    assert str(err.value) == f"device of {MIN_CAPACITY - 1} bytes is too small for a WAL"
    assert err.value.where == str(path) and err.value.hint == "at least 16384 bytes"
    path.write_bytes(bytes(MIN_CAPACITY))
    assert init.init_wal(str(path), None).header.capacity == MIN_CAPACITY
    path.write_bytes(bytes(CAPACITY - 1))
    with pytest.raises(UsageError) as err:
        init.init_wal(str(path), CAPACITY)
    assert str(err.value) == f"device is smaller than the capacity: device {CAPACITY - 1} bytes, capacity {CAPACITY} bytes"
    assert err.value.where == str(path) and err.value.hint == "choose a smaller --capacity"
    assert path.read_bytes() == bytes(CAPACITY - 1)  # an existing file is never removed
    path.write_bytes(bytes(CAPACITY))
    assert init.init_wal(str(path), CAPACITY).header.capacity == CAPACITY


def test_capacity_on_a_device():
    assert init._capacity_on(70000, None, "p") == 69632
    assert init._capacity_on(70000, 65536, "p") == 65536
    assert init._capacity_on(65536, 65536, "p") == 65536


def test_data_without_a_wal_header_is_refused_then_wiped_with_force(tmp_path):
    path = tmp_path / "w"
    path.write_bytes(bytes(10000) + b"\x01" + bytes(CAPACITY - 10001))
    with pytest.raises(RefusedError) as err:
        init.init_wal(str(path), CAPACITY)
    assert str(err.value) == "the device holds data (non-zero bytes at byte 10000) but no valid WAL header"
    assert err.value.where == str(path)
    assert err.value.hint == "it may be a WAL whose headers were destroyed; pass --force to overwrite"
    seen = []
    r = init.init_wal(str(path), CAPACITY, force=True, progress=seen.append)
    assert (r.created, r.wiped_bytes) == (False, RING) and seen and seen[-1] == RING
    assert path.read_bytes()[HEADERS_SIZE:] == bytes(RING)


def test_data_past_the_capacity_is_not_looked_at(tmp_path):
    path = tmp_path / "w"
    path.write_bytes(bytes(CAPACITY) + b"\x01" * 4096)
    r = init.init_wal(str(path), CAPACITY)
    assert r.wiped_bytes == 0


def test_first_nonzero_reads_in_chunks_and_names_the_byte(tmp_path):
    path = tmp_path / "w"
    data = bytearray(CAPACITY)
    path.write_bytes(bytes(data))
    dev = open_device(str(path), writable=False)
    try:
        assert init._first_nonzero(dev, CAPACITY) is None
        assert init._first_nonzero(dev, CAPACITY, chunk=4096) is None
    finally:
        dev.close()
    for where in (0, 4095, 4096, 12345, CAPACITY - 1):
        data = bytearray(CAPACITY)
        data[where] = 0x80
        path.write_bytes(bytes(data))
        dev = open_device(str(path), writable=False)
        try:
            assert init._first_nonzero(dev, CAPACITY, chunk=4096) == where
            assert init._first_nonzero(dev, CAPACITY) == where
            assert init._first_nonzero(dev, 40960, chunk=8192) == (where if where < 40960 else None)
        finally:
            dev.close()


def test_an_existing_wal_is_refused_without_force(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    with pytest.raises(RefusedError) as err:
        init.init_wal(path, CAPACITY)
    assert str(err.value) == "the device already holds a walctl WAL"
    assert err.value.where == path and err.value.hint == "init would destroy it; pass --force to re-initialise"
    img = AutoMQImage(256 * KiB, 1, stale=False)
    img.headers()
    amq = img.save(tmp_path / "amq")
    with pytest.raises(RefusedError) as err:
        init.init_wal(amq, None)
    assert str(err.value) == "the device already holds an AutoMQ WAL"


def test_a_forced_init_of_an_empty_wal_wipes_the_ring_and_moves_time_forward(tmp_path, monkeypatch):
    path = str(tmp_path / "w")
    first = init.init_wal(path, CAPACITY)
    poke(path, HEADERS_SIZE + 5000, b"\x09")  # stray bytes in the ring (no record)
    monkeypatch.setattr(init.time, "time_ns", lambda: 5)  # a clock behind the old header's
    r = init.init_wal(path, CAPACITY, force=True, node_id=3)
    assert (r.created, r.wiped_bytes, r.header.node_id) == (False, RING, 3)
    ts = first.header.last_write_timestamp_ns
    state = header_of(path)
    assert [s.header.last_write_timestamp_ns for s in state.slots] == [ts + 1, ts + 2]
    with open(path, "rb") as f:
        assert f.read()[HEADERS_SIZE:] == bytes(RING)


def test_records_not_yet_uploaded_are_refused_unless_discarded(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157])
    with pytest.raises(RefusedError) as err:
        init.init_wal(path, CAPACITY, force=True)
    assert str(err.value) == "the WAL holds 2 records (314 B) not yet uploaded; init --force would destroy them"
    assert err.value.where == path
    assert err.value.hint == ("upload them first (walctl upload DEVICE --store URL), or pass --force "
                              "--discard-unuploaded to destroy them")
    r = init.init_wal(path, CAPACITY, force=True, discard_unuploaded=True)
    assert r.wiped_bytes == RING and header_of(path).header.next_offset == 0


def test_one_record_not_yet_uploaded_is_named_in_the_singular(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157], trim=0)
    with pytest.raises(RefusedError) as err:
        init.init_wal(path, CAPACITY, force=True)
    assert str(err.value) == "the WAL holds 1 record (157 B) not yet uploaded; init --force would destroy them"


def test_an_automq_wal_with_records_is_refused_unless_discarded(tmp_path):
    img = AutoMQImage(256 * KiB, 1, stale=False)
    img.block([100, 100])
    img.headers(trim=-1, clean=True)
    path = img.save(tmp_path / "amq")
    with pytest.raises(RefusedError) as err:
        init.init_wal(path, None, force=True)
    assert str(err.value) == ("the automq-v1 WAL holds 2 records (314 B) after its trim point, which walctl "
                              "cannot tell uploaded; init --force would destroy them")
    assert err.value.hint == ("keep a copy first (walctl image DEVICE FILE), or pass --force "
                              "--discard-unuploaded to destroy them")
    r = init.init_wal(path, None, force=True, discard_unuploaded=True)
    assert r.header.flavour == "walctl" and r.wiped_bytes == 256 * KiB - HEADERS_SIZE


def _unuploaded(path):
    dev = open_device(str(path), writable=False)
    try:
        return init.unuploaded(dev, read_headers(dev))
    finally:
        dev.close()


def test_unuploaded_of_an_empty_clean_wal_answers_from_its_headers(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    assert _unuploaded(path) == init.Unuploaded(0, 0, False)


def test_unuploaded_of_a_wal_trimmed_to_its_last_record_answers_from_its_headers(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157], trim=157)
    assert _unuploaded(path) == init.Unuploaded(0, 0, False)


def test_unuploaded_scans_otherwise(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157, 314], trim=0)
    assert _unuploaded(path) == init.Unuploaded(2, 314, True)
    _records(path, [0, 157, 314], trim=-1)  # (header only: the trim point goes back, for the test)
    assert _unuploaded(path) == init.Unuploaded(3, 471, True)


def test_unuploaded_of_a_crashed_or_checkpointless_wal_scans(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157], trim=157, clean=False)
    assert _unuploaded(path) == init.Unuploaded(0, 0, True)
    _records(path, [0, 157], trim=157, checkpoint=False)
    assert _unuploaded(path) == init.Unuploaded(0, 0, True)
    _records(path, [], log_end=0, trim=-1, checkpoint=False)
    assert _unuploaded(path).scanned is True


def test_unuploaded_with_a_trim_point_on_no_record_scans(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157], log_end=314, trim=4096)  # no record header at the trim point
    dev = open_device(path, writable=False)
    try:
        assert init._trim_record_end(dev, read_headers(dev).header) is None
    finally:
        dev.close()
    found = _unuploaded(path)
    assert found.scanned is True and found.records == 0


def test_trim_record_end_is_where_the_record_there_ends(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0, 157], trim=157)
    dev = open_device(path, writable=False)
    try:
        assert init._trim_record_end(dev, read_headers(dev).header) == 314
    finally:
        dev.close()


def test_unuploaded_counts_the_log_from_the_trim_point_when_no_trim_record_is_found(tmp_path, monkeypatch):
    from walctl.wal import reader

    report = SimpleNamespace(trim_entry=None, end_offset=9000, records=4)
    monkeypatch.setattr(reader.Scan, "drain", lambda self: report)
    state = SimpleNamespace(header=WalHeader(CAPACITY, trim_offset=5000, shutdown_type=1), checkpoint=None)
    assert init.unuploaded(None, state) == init.Unuploaded(4, 4000, True)
    state.header = WalHeader(CAPACITY, trim_offset=-1, shutdown_type=1)
    assert init.unuploaded(None, state) == init.Unuploaded(4, 9000, True)
    report.end_offset, state.header = 100, WalHeader(CAPACITY, trim_offset=5000, shutdown_type=1)
    assert init.unuploaded(None, state) == init.Unuploaded(4, 0, True)


def test_prewrite_fills_a_new_file_s_ring_once(tmp_path):
    seen = []
    r = init.init_wal(str(tmp_path / "w"), CAPACITY, prewrite=True, progress=seen.append)
    assert r.wiped_bytes == RING and seen[-1] == RING
    with open(tmp_path / "w", "rb") as f:
        assert f.read()[HEADERS_SIZE:] == bytes(RING)
    path = tmp_path / "v"
    path.write_bytes(b"\x01" * CAPACITY)
    seen = []
    r = init.init_wal(str(path), CAPACITY, prewrite=True, force=True, progress=seen.append)
    assert r.wiped_bytes == RING and seen[-1] == RING and len(seen) == len(set(seen))  # wiped once, not twice


def test_prewrite_refuses_a_capacity_larger_than_the_free_space(tmp_path, monkeypatch):
    statvfs = []

    def fake(path):
        statvfs.append(path)
        return SimpleNamespace(f_bavail=15, f_frsize=4096)

    monkeypatch.setattr(init.os, "statvfs", fake)
    path = str(tmp_path / "w")
    with pytest.raises(IOFailure) as err:
        init.init_wal(path, CAPACITY, prewrite=True)
    assert str(err.value) == f"not enough free space for the WAL file: 61440 bytes free, the capacity needs {CAPACITY}"
    assert err.value.where == path
    assert err.value.hint == ("choose a smaller --capacity, free space, or pass --no-prewrite for a sparse file "
                              "that fills as records arrive")
    assert statvfs == [str(tmp_path)] and not os.path.exists(path)
    monkeypatch.setattr(init.os, "statvfs", lambda p: SimpleNamespace(f_bavail=16, f_frsize=4096))
    assert init.init_wal(path, CAPACITY, prewrite=True).wiped_bytes == RING
    init.init_wal(str(tmp_path / "sparse"), 1 << 30)  # no prewrite: no free-space check


def test_free_space_unknown_is_left_to_the_file_s_creation(tmp_path, monkeypatch):
    def broken(path):
        raise OSError(2, "gone")

    monkeypatch.setattr(init.os, "statvfs", broken)
    init._check_free_space(str(tmp_path / "w"), 1 << 60)


def test_a_failed_init_removes_the_file_it_created_only(tmp_path, monkeypatch):
    import walctl.failpoints as fp

    def boom(name):
        if name == "init-after-create":
            raise KeyboardInterrupt

    monkeypatch.setattr(fp, "failpoint", boom)
    path = tmp_path / "w"
    with pytest.raises(KeyboardInterrupt):
        init.init_wal(str(path), CAPACITY)
    assert not path.exists()
    path.write_bytes(bytes(CAPACITY))
    with pytest.raises(KeyboardInterrupt):
        init.init_wal(str(path), CAPACITY)
    assert path.read_bytes() == bytes(CAPACITY)


def test_a_created_file_that_does_not_open_is_removed(tmp_path, monkeypatch):
    def refuse(path, writable):
        assert writable is True
        raise IOFailure("cannot open", where=path)

    monkeypatch.setattr(init, "open_device", refuse)
    path = tmp_path / "w"
    with pytest.raises(IOFailure):
        init.init_wal(str(path), CAPACITY)
    assert not path.exists()
    path.write_bytes(b"keep")
    with pytest.raises(IOFailure):
        init.init_wal(str(path), CAPACITY)
    assert path.read_bytes() == b"keep"


def test_remove_if_created_of_a_file_already_gone(tmp_path):
    init._remove_if_created(str(tmp_path / "gone"), True)
    (tmp_path / "f").write_bytes(b"x")
    init._remove_if_created(str(tmp_path / "f"), False)
    assert (tmp_path / "f").exists()
    init._remove_if_created(str(tmp_path / "f"), True)
    assert not (tmp_path / "f").exists()


def test_the_safety_warnings_come_back(tmp_path):
    shm = "/dev/shm"
    if not os.path.isdir(shm):
        pytest.skip("no /dev/shm")
    path = os.path.join(shm, f"walctl-mut-init-{os.getpid()}")
    try:
        with pytest.raises(RefusedError):
            init.init_wal(path, CAPACITY)
        r = init.init_wal(path, CAPACITY, force=True)
        assert r.warnings == [f"{path}: creating a WAL on tmpfs (--force): its records do not survive a reboot"]
    finally:
        if os.path.exists(path):
            os.unlink(path)
    fs = tmp_path / "fs"
    fs.write_bytes(b"XFSB" + bytes(CAPACITY - 4))
    with pytest.raises(RefusedError):
        init.init_wal(str(fs), CAPACITY)
    r = init.init_wal(str(fs), CAPACITY, force=True)
    assert len(r.warnings) == 1 and "XFS filesystem" in r.warnings[0] and r.wiped_bytes == RING


def test_timestamps_start_above_zero_on_a_clock_at_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(init.time, "time_ns", lambda: 0)
    init.init_wal(str(tmp_path / "new"), CAPACITY)  # created: no previous header
    assert [s.header.last_write_timestamp_ns for s in header_of(str(tmp_path / "new")).slots] == [1, 2]
    path = tmp_path / "zeros"
    path.write_bytes(bytes(CAPACITY))  # existing, all zeros: no previous header either
    init.init_wal(str(path), None)
    assert [s.header.last_write_timestamp_ns for s in header_of(str(path)).slots] == [1, 2]


def test_the_result_says_whether_the_device_is_a_block_device(tmp_path, monkeypatch):
    real = init.open_device

    def as_block(path, writable):
        dev = real(path, writable=writable)
        dev.is_block_device = True
        return dev

    monkeypatch.setattr(init, "open_device", as_block)
    r = init.init_wal(str(tmp_path / "w"), CAPACITY, prewrite=True)
    assert r.is_block_device is True and r.wiped_bytes == 0  # a device allocates nothing: no prewrite


def test_first_nonzero_reads_no_further_than_the_capacity_in_its_last_chunk(tmp_path):
    path = tmp_path / "w"
    data = bytearray(CAPACITY)
    data[45000] = 1
    path.write_bytes(bytes(data))
    dev = open_device(str(path), writable=False)
    try:
        assert init._first_nonzero(dev, 40960, chunk=16384) is None  # chunks 0, 16384, then 8192 bytes
        assert init._first_nonzero(dev, 49152, chunk=16384) == 45000
    finally:
        dev.close()


def test_unuploaded_of_a_wal_trimmed_to_its_first_record_at_0(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [0], trim=0)
    assert _unuploaded(path) == init.Unuploaded(0, 0, False)  # the trim record ends at the checkpoint's end


def test_unuploaded_of_a_header_trimmed_at_0_with_an_empty_checkpoint_scans(tmp_path):
    path = str(tmp_path / "w")
    init.init_wal(path, CAPACITY)
    _records(path, [], log_end=0, trim=0)  # an odd header: trimmed at 0, the log ending at 0
    assert _unuploaded(path) == init.Unuploaded(0, 0, True)


def test_an_automq_refusal_names_the_device(tmp_path):
    img = AutoMQImage(256 * KiB, 1, stale=False)
    img.block([100])
    img.headers(trim=-1, clean=True)
    path = img.save(tmp_path / "amq")
    with pytest.raises(RefusedError) as err:
        init.init_wal(path, None, force=True)
    assert err.value.where == path
    assert err.value.hint.startswith("keep a copy first")
    assert str(err.value).startswith("the automq-v1 WAL holds 1 record (157 B) after its trim point")
