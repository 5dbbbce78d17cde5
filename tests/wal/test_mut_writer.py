"""The WAL writer (walctl.wal.writer, writer_blocks, writer_window, writer_room), issue 32: in-process
writers on small WAL files, checked through their public calls and contracts: which offsets records
get, which blocks they land in, what is acknowledged and when, what the headers say, the refusals'
exact words."""

from __future__ import annotations

import threading

import pytest

from walctl.device import FaultyDevice, open_device
from walctl.errors import FullError, IOFailure, UsageError
from walctl.format import framepack
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import MAX_STREAMS, Checkpoint
from walctl.format.header import HEADERS_SIZE, SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL
from walctl.wal.headers import read_headers
from walctl.wal.init import init_wal
from walctl.wal.pacing import Budget
from walctl.wal.writer import WalWriter, check_record_at
from walctl.wal.writer_blocks import MANY_OVERHEAD, FrameSpec
from walctl.wal.writer_room import FullWait

KiB, MiB = 1 << 10, 1 << 20
LONG_S = 3600.0  # blocks close only when full, at submit_open_block, drain or close
RING = 64 * KiB


def new_wal(tmp_path, ring: int = RING, name: str = "w.img") -> str:
    path = str(tmp_path / name)
    init_wal(path, ring + HEADERS_SIZE)
    return path


def make_writer(path, *, dev=None, checkpoint=True, batch_interval_s=LONG_S, **kwargs) -> WalWriter:
    dev = dev or open_device(path, writable=True)
    state = read_headers(dev)
    start = state.header.next_offset
    cp = Checkpoint(start, complete=True) if checkpoint is True else checkpoint
    return WalWriter(dev, state, start, batch_interval_s=batch_interval_s, checkpoint=cp, **kwargs)


def acking(writer) -> list:
    acks: list = []
    writer.on_ack = lambda offset, token: acks.append((offset, token))
    return acks


def read_state(path):
    dev = open_device(path, writable=False)
    try:
        return read_headers(dev)
    finally:
        dev.close()


def read_at(path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(HEADERS_SIZE + offset % (read_state(path).header.capacity - HEADERS_SIZE))
        return f.read(n)


def batch(stream: int, base: int, size: int) -> bytes:
    return StreamRecordBatch(stream, 0, base, 1, bytes([base % 251]) * size).encode()


# -- writer.py: construction and settings ----------------------------------------------
def test_an_iodepth_below_one_is_refused(tmp_path):
    path = new_wal(tmp_path)
    dev = open_device(path, writable=True)
    try:
        with pytest.raises(UsageError, match=r"^iodepth must be >= 1, got 0$"):
            WalWriter(dev, read_headers(dev), 0, iodepth=0)
    finally:
        dev.close()
    w = make_writer(path, iodepth=1)
    assert w.iodepth == 1 and w.run_ahead == 1
    w.close()


def test_the_batch_interval_is_kept_in_seconds_and_a_negative_or_nan_one_is_refused(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0.25)
    try:
        assert w.batch_interval_s == 0.25
        w.batch_interval_s = 0
        assert w.batch_interval_s == 0.0
        with pytest.raises(UsageError, match=r"^the batch interval must be 0 or more seconds, got -0.001$"):
            w.batch_interval_s = -0.001
        with pytest.raises(UsageError, match="got nan"):
            w.batch_interval_s = float("nan")
        assert w.batch_interval_s == 0.0
    finally:
        w.close()


def test_a_writer_s_defaults(tmp_path):
    path = new_wal(tmp_path, ring=1 * MiB)
    dev = open_device(path, writable=True)
    w = WalWriter(dev, read_headers(dev), 0)
    try:
        assert w.batch_interval_s == 0.002 and w.iodepth == 6 and w.block_soft_limit_bytes == 256 * KiB
        assert w.window_cap_bytes == 1 * MiB  # the ring: below the 512 MiB upper limit
        assert w.on_ack is None and w.budget is None
        assert w.checkpoint() == Checkpoint(0, {}, False, -1)  # opened without a checkpoint
    finally:
        w.close()


def test_a_new_writer_reports_its_ring_and_header(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    try:
        assert w.header is w.state.header
        assert w.ring.size == RING
        assert w.trim_start == 0  # trim offset -1: nothing trimmed yet
        assert w.window_cap_bytes == RING  # capped at the ring
        assert w.io_engine in ("io_uring", "aio", "threads")
        assert (w.blocks_written, w.bytes_written, w.records_acked, w.header_writes) == (0, 0, 0, 0)
        assert w.checkpoint() == Checkpoint(0, {}, True, -1)
    finally:
        w.close()


# -- appends, blocks and acknowledgements ----------------------------------------------
def test_records_share_the_open_block_and_are_acknowledged_once_drained(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    acks = acking(w)
    assert w.append(b"a" * 100, "t1", (5, 1)) == 0
    assert w.append(b"b" * 10, "t2", (5, 2)) == 124
    assert acks == []  # nothing durable yet: the block is still open
    w.drain()
    assert acks == [(0, "t1"), (124, "t2")]
    assert (w.next_block, w.acked_end) == (4096, 158)
    assert (w.blocks_written, w.bytes_written, w.records_acked) == (1, 4096, 2)
    assert w.stages.count == 1
    assert w.checkpoint() == Checkpoint(158, {5: 2}, True, -1)
    w.close()
    image = read_at(path, 0, 4096)
    head = rec.RecordHeader.decode(image[:rec.SIZE], expected_offset=0)
    assert head.body_length == 100 and not head.is_padding
    assert image[rec.SIZE:rec.SIZE + 100] == b"a" * 100
    assert image[124 + rec.SIZE:158] == b"b" * 10
    assert image[158:] == bytes(4096 - 158)  # zero-padded to 4 KiB


def test_a_record_without_a_stream_makes_the_stream_ends_unknown(tmp_path):
    w = make_writer(new_wal(tmp_path))
    w.append(b"x" * 10, None, (3, 7))
    w.append(b"y" * 10)
    w.drain()
    assert w.checkpoint() == Checkpoint(68, {}, False, -1)
    w.close()


def test_a_writer_opened_without_a_checkpoint_claims_no_streams(tmp_path):
    w = make_writer(new_wal(tmp_path), checkpoint=None)
    w.append(b"x" * 10, None, (3, 7))
    w.drain()
    assert w.checkpoint() == Checkpoint(34, {}, False, -1)
    w.close()


def test_a_checkpoint_keeps_the_most_recently_written_streams(tmp_path):
    w = make_writer(new_wal(tmp_path, ring=1 * MiB))
    n = MAX_STREAMS + 2
    for sid in range(n):  # stream 0 first, written again last: it is kept, streams 1 and 2 are not
        w.append(b"x", None, (sid, 1))
    w.append(b"x", None, (0, 2))
    w.drain()
    cp = w.checkpoint()
    assert not cp.complete
    assert len(cp.streams) == MAX_STREAMS
    assert cp.streams[0] == 2 and 1 not in cp.streams and 2 not in cp.streams and 3 in cp.streams
    w.close()


def test_the_open_block_closes_when_the_next_record_passes_the_soft_limit(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=8192)
    acks = acking(w)
    body = b"z" * (4000 - rec.SIZE)
    offsets = [w.append(body, i, (1, i + 1)) for i in range(5)]
    # 4000-byte records: two fit 8192; the third opens the next 4 KiB-aligned block
    assert offsets == [0, 4000, 8192, 12192, 16384]
    w.drain()
    assert [o for o, _ in acks] == offsets
    assert w.blocks_written == 3
    assert w.bytes_written == 8192 + 8192 + 4096
    assert w.next_block == 20480
    w.close()


def test_a_record_exactly_at_the_soft_limit_joins_the_block(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=8192)
    assert w.append(b"a" * (4096 - rec.SIZE)) == 0
    assert w.append(b"b" * (4096 - rec.SIZE)) == 4096  # ends exactly at 8192: same block
    assert w.append(b"c") == 8192
    w.drain()
    assert w.blocks_written == 2
    w.close()


def test_a_record_larger_than_the_soft_limit_has_a_block_of_its_own(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path, block_soft_limit_bytes=4096)
    acks = acking(w)
    assert w.append(b"s" * 10, "small") == 0
    assert w.append(b"L" * 9000, "large") == 4096
    assert w.append(b"t" * 10, "after") == 4096 + 12288
    w.drain()
    assert acks == [(0, "small"), (4096, "large"), (16384, "after")]
    assert w.bytes_written == 4096 + 12288 + 4096
    w.close()
    assert read_at(path, 4096 + rec.SIZE, 9000) == b"L" * 9000


def test_submit_open_block_closes_it_at_once(tmp_path):
    w = make_writer(new_wal(tmp_path))
    acks = acking(w)
    w.append(b"x" * 10, 1)
    w.submit_open_block()
    assert w.next_block == 4096  # closed: its place in the log is final
    assert w.append(b"y" * 10, 2) == 4096
    w.drain()
    assert acks == [(0, 1), (4096, 2)]
    assert w.blocks_written == 2
    w.close()


def test_a_block_waits_for_its_batch_interval_then_the_timer_writes_it(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0.3)
    acked = threading.Event()
    w.on_ack = lambda offset, token: acked.set()
    w.append(b"x" * 10)
    assert w.append(b"y" * 10) == 34  # the block is still open: the second record joins it
    assert acked.wait(10)  # no drain: the timer thread wrote it
    assert w.blocks_written == 1
    summary = w.stages.summary()
    assert summary["blocks"] == 1 and summary["queued"]["p50"] >= 300000  # >= 300 ms queued
    w.close()


def test_with_no_batch_interval_a_record_is_written_at_once(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0)
    acked = threading.Event()
    w.on_ack = lambda offset, token: acked.set()
    w.append(b"x" * 10)
    assert acked.wait(10)
    assert w._timer_thread is None  # nothing waited for a timer
    w.close()


def test_a_record_larger_than_the_ring_or_the_window_limit_is_refused(tmp_path):
    w = make_writer(new_wal(tmp_path))
    with pytest.raises(UsageError) as info:
        w.append(b"x" * (RING - rec.SIZE + 1))
    assert str(info.value.what) == (f"record of {RING - rec.SIZE + 1} bytes does not fit this WAL "
                                    f"(ring {RING} bytes, window limit {RING} bytes)")
    assert w.append(b"x" * (RING - rec.SIZE)) == 0  # exactly the ring: fits
    w.drain()
    w.close()
    w = make_writer(new_wal(tmp_path, name="b.img"), window_upper_limit_bytes=8192)
    assert w.window_cap_bytes == 8192
    with pytest.raises(UsageError, match=r"^record of 8190 bytes does not fit this WAL "
                                         r"\(ring 65536 bytes, window limit 8192 bytes\)$"):
        w.append(b"x" * 8190)  # 8214 bytes: three 4 KiB blocks
    assert w.append(b"x" * (8192 - rec.SIZE)) == 0
    w.close()


def test_a_record_that_would_cross_the_lap_end_follows_a_padding_record(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    acks = acking(w)
    body = b"r" * (16 * KiB - rec.SIZE)
    offs = [w.append(body, i) for i in range(3)]
    w.drain()
    w.trim_to(offs[2])  # room for the next lap
    assert w.append(b"q" * 100, 3) == 48 * KiB  # fits before the lap end
    last = w.append(body, 4)  # 48K+124+16K passes 64K: padding from 53248, then the next lap
    assert last == RING
    w.drain()
    assert [o for o, _ in acks] == [0, 16 * KiB, 32 * KiB, 48 * KiB, RING]
    assert w.blocks_written == 4  # [0, 48K), [48K, 52K), the padding [52K, 64K), [64K, 80K)
    assert w.acked_end == RING + 16 * KiB
    w.close()
    pad = rec.RecordHeader.decode(read_at(path, 52 * KiB, rec.SIZE), expected_offset=52 * KiB)
    assert pad.is_padding and rec.SIZE + pad.body_length == RING - 52 * KiB


def test_a_record_ending_exactly_at_the_lap_end_needs_no_padding(tmp_path):
    w = make_writer(new_wal(tmp_path))
    body = b"r" * (16 * KiB - rec.SIZE)
    offs = [w.append(body) for _ in range(4)]
    assert offs == [0, 16 * KiB, 32 * KiB, 48 * KiB]
    w.drain()
    assert w.acked_end == RING and w.next_block == RING
    w.close()


def test_append_after_close_is_refused(tmp_path):
    w = make_writer(new_wal(tmp_path))
    w.close()
    w.close()  # a second close does nothing
    for call in (lambda: w.append(b"x"), lambda: w.append_many([b"x"], 1, 0, 0), w.drain,
                 w.submit_open_block, lambda: w.update_header(node_id=3), lambda: w.trim_to(0)):
        with pytest.raises(RuntimeError, match="^writer is closed$"):
            call()


# -- header, trim, close, abort ----------------------------------------------------------
def test_update_header_writes_the_other_slot_durably(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    w.update_header(node_id=42)
    assert w.header.node_id == 42 and w.header_writes == 1
    assert read_state(path).header.node_id == 42
    w.close()


def test_close_marks_the_shutdown_graceful_with_the_next_offset_and_checkpoint(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    hooks = []
    w.before_close.append(lambda: hooks.append("hook"))
    w.append(b"a" * 100, None, (9, 4))
    w.close()
    assert hooks == ["hook"]
    state = read_state(path)
    assert state.header.shutdown_type == SHUTDOWN_GRACEFUL
    assert state.header.next_offset == 4096
    assert state.checkpoint == Checkpoint(124, {9: 4}, True, -1)
    w.close()
    assert hooks == ["hook"]


def test_abort_leaves_the_header_ungraceful_and_runs_the_hooks_once(tmp_path):
    path = new_wal(tmp_path)
    dev = open_device(path, writable=True)
    from walctl.wal.headers import write_header

    state = read_headers(dev)
    state = write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL))
    w = WalWriter(dev, state, 0, batch_interval_s=LONG_S)
    hooks = []
    w.before_close.append(lambda: hooks.append(1))
    w.append(b"a" * 100)
    w.drain()
    w.abort()
    w.abort()
    assert hooks == [1]
    assert read_state(path).header.shutdown_type == SHUTDOWN_UNGRACEFUL
    with pytest.raises(RuntimeError, match="closed"):
        w.append(b"x")


def test_trim_to_moves_the_trim_point_with_a_checkpoint(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path, block_soft_limit_bytes=4096)
    offs = [w.append(b"x" * 3000, None, (2, i + 1)) for i in range(4)]
    assert offs == [0, 4096, 8192, 12288]
    w.drain()
    assert w.trim_to(offs[1]) == -1
    assert w.trim_start == 4096
    assert w.trim_to(offs[1]) == 4096  # the same point: nothing to do
    assert w.header_writes == 1
    state = read_state(path)
    assert state.header.trim_offset == 4096
    assert state.header.next_offset == 16384  # the acknowledged end, aligned up
    assert state.checkpoint == Checkpoint(12288 + 3024, {2: 4}, True, -1)
    assert w.trim_to(offs[2], uploaded=True) == 4096
    assert w.uploaded_offset == 8192
    assert read_state(path).checkpoint.uploaded_offset == 8192
    assert w.trim_to(offs[3]) == 8192
    assert w.uploaded_offset == 8192  # not an upload: kept
    w.close()


def test_trim_to_refuses_offsets_behind_unacknowledged_or_not_records(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    offs = [w.append(b"x" * 3000) for _ in range(3)]
    w.drain()
    w.trim_to(offs[1])
    with pytest.raises(UsageError) as info:
        w.trim_to(0)
    assert info.value.what == "trim offset 0 is before the current trim point 4096"
    assert info.value.hint == "the trim point only moves forward"
    end = w.acked_end
    assert end == 8192 + 3024
    with pytest.raises(UsageError, match=rf"^offset {end} is not in the acknowledged log \(it ends at {end}\)$"):
        w.trim_to(end)
    with pytest.raises(UsageError, match=r"^no live record starts at offset 8200 "):
        w.trim_to(8200)
    assert w.trim_start == 4096
    with pytest.raises(UsageError, match=rf"^offset 12288 is not in the acknowledged log \(it ends at {end}\)$"):
        w.trim_to(12288)
    assert w.append(b"y" * 10) == 12288
    w.drain()
    assert w.trim_to(12288) == 4096  # the next record: now acknowledged
    w.close()


def test_check_record_at_reads_the_record_header_it_names(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    w.append(b"x" * 5000)
    w.append(b"y" * 100)
    w.drain()
    w.close()
    dev = open_device(path, writable=False)
    try:
        from walctl.wal.layout import Ring

        ring = Ring(RING + HEADERS_SIZE)
        head = check_record_at(dev, ring, 5024)  # crosses a 4 KiB boundary: read as two blocks
        assert head.body_length == 100
        assert check_record_at(dev, ring, 0).body_length == 5000
        with pytest.raises(UsageError) as info:
            check_record_at(dev, ring, 24)
        assert info.value.what.startswith("no live record starts at offset 24 (")
        assert info.value.hint == "give an offset that append, upload or recover printed"
        with pytest.raises(UsageError) as info:
            check_record_at(dev, ring, RING - rec.SIZE + 1)
        assert info.value.what == f"no live record starts at offset {RING - rec.SIZE + 1}"
        assert info.value.hint == "it is too close to the end of a lap"
        with pytest.raises(UsageError) as info:  # exactly a header before the lap end: read, and not a record
            check_record_at(dev, ring, RING - rec.SIZE)
        assert info.value.what.startswith(f"no live record starts at offset {RING - rec.SIZE} (")
    finally:
        dev.close()


def test_check_record_at_refuses_a_padding_record(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    body = b"r" * (16 * KiB - rec.SIZE)
    offs = [w.append(body) for _ in range(3)]
    w.append(b"q" * 100)
    w.drain()
    w.trim_to(offs[2])
    w.append(body)  # pads 52K..64K
    w.drain()
    w.close()
    from walctl.wal.layout import Ring

    dev = open_device(path, writable=False)
    try:
        with pytest.raises(UsageError) as info:
            check_record_at(dev, Ring(RING + HEADERS_SIZE), 52 * KiB)
        assert info.value.what == f"offset {52 * KiB} holds a padding record, not a data record"
        assert info.value.hint == "give an offset that append, upload or recover printed"
    finally:
        dev.close()


# -- failures -----------------------------------------------------------------------------
def test_a_failed_block_write_acknowledges_nothing_and_fails_the_writer(tmp_path):
    path = new_wal(tmp_path)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=0)
    w = make_writer(path, dev=dev)
    acks = acking(w)
    w.append(b"x" * 10)
    with pytest.raises(IOFailure, match="injected EIO"):
        w.drain()
    assert acks == [] and w.blocks_written == 0 and w.records_acked == 0
    with pytest.raises(IOFailure, match="injected EIO"):
        w.append(b"y")
    with pytest.raises(IOFailure, match="injected EIO"):
        w.close()  # the header is left as it was: the next writer scans
    assert read_state(path).header.shutdown_type == SHUTDOWN_GRACEFUL  # init's header, not rewritten
    assert read_state(path).header.next_offset == 0


def test_a_later_block_failing_keeps_the_earlier_acknowledged(tmp_path):
    path = new_wal(tmp_path)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=1)
    w = make_writer(path, dev=dev, iodepth=1)
    acks = acking(w)
    w.append(b"a", 1)
    w.submit_open_block()
    w.append(b"b", 2)
    with pytest.raises(IOFailure):
        w.drain()
    assert acks == [(0, 1)]
    assert w.acked_end == 25
    w.abort()


def test_a_header_write_failing_fails_the_writer(tmp_path):
    path = new_wal(tmp_path)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=0)
    w = make_writer(path, dev=dev)
    with pytest.raises(IOFailure):
        w.update_header(node_id=1)
    assert w.header_writes == 0
    with pytest.raises(IOFailure):
        w.drain()
    w.abort()


def test_an_acknowledgement_callback_failing_fails_the_writer_as_an_io_failure(tmp_path):
    w = make_writer(new_wal(tmp_path))
    seen = []

    def on_ack(offset, token):
        seen.append(offset)
        raise BrokenPipeError("reader went away")

    w.on_ack = on_ack
    w.append(b"a")
    w.append(b"b")
    with pytest.raises(IOFailure, match=r"^write failed: reader went away$"):
        w.drain()
    assert seen == [0]  # the block's later records are not acknowledged
    with pytest.raises(IOFailure):
        w.close()


# -- the sliding window -------------------------------------------------------------------
def test_the_window_grows_in_4_mib_steps_before_a_block_passes_it(tmp_path):
    path = new_wal(tmp_path, ring=16 * MiB)
    w = make_writer(path)
    assert w.header.sliding_window_max_length == 1 * MiB
    w.append(b"x" * (1 * MiB))  # a block of 1 MiB + 4 KiB: one step
    w.drain()
    assert w.header.sliding_window_max_length == 5 * MiB
    assert read_state(path).header.sliding_window_max_length == 5 * MiB
    assert w.header_writes == 1
    w.append(b"x" * (9 * MiB))  # 9 MiB + 4 KiB: two more steps
    w.drain()
    assert w.header.sliding_window_max_length == 13 * MiB
    w.append(b"x" * (1 * MiB - rec.SIZE))  # exactly 1 MiB: fits
    w.drain()
    assert w.header_writes == 2
    w.close()


def test_the_window_grows_to_its_cap_and_no_further(tmp_path):
    path = new_wal(tmp_path, ring=4 * MiB)
    w = make_writer(path)
    assert w.header.sliding_window_max_length == 1 * MiB
    w.append(b"x" * (2 * MiB))
    w.drain()
    assert w.header.sliding_window_max_length == 4 * MiB  # the ring, not 5 MiB
    w.close()
    path = new_wal(tmp_path, ring=16 * MiB, name="c.img")
    w = make_writer(path, window_upper_limit_bytes=3 * MiB)
    w.append(b"x" * (2 * MiB))
    w.drain()
    assert w.header.sliding_window_max_length == 3 * MiB
    w.close()


def test_blocks_in_flight_stay_inside_the_window_at_its_cap(tmp_path):
    path = new_wal(tmp_path, ring=4 * MiB)
    w = make_writer(path, window_upper_limit_bytes=1 * MiB, iodepth=4)
    acks = acking(w)
    body = b"w" * (400 * KiB)
    offs = []
    for i in range(6):  # 404 KiB blocks: at most two fit the 1 MiB window at once
        offs.append(w.append(body, i))
        w.submit_open_block()
    w.drain()
    assert offs == [i * 404 * KiB for i in range(6)]
    assert [o for o, _ in acks] == offs
    assert w.header.sliding_window_max_length == 1 * MiB and w.header_writes == 0
    w.close()


# -- backpressure (writer_room) -----------------------------------------------------------
def fill_ring(w, size: int = 16 * KiB - rec.SIZE) -> list[int]:
    offs = [w.append(b"f" * size, None, (1, i + 1)) for i in range(4)]
    w.drain()
    return offs


def test_a_full_ring_raises_full_error_at_once_without_a_wait(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = fill_ring(w)
    assert offs[-1] == 48 * KiB
    with pytest.raises(FullError) as info:
        w.append(b"x")
    err = info.value
    assert err.what == "WAL full: nothing freed room"
    assert err.hint == ("trim or upload first: 'walctl upload' beside the writer (it trims through the hand-off), "
                        "append --upload-at, or a longer --full-wait")
    assert err.offset == RING
    assert w.full.waits == 0
    w.trim_to(offs[1])
    assert w.append(b"x") == RING  # room again
    w.close()


def test_full_error_says_why_and_how_long_it_waited(tmp_path):
    w = make_writer(new_wal(tmp_path))
    fill_ring(w)
    events = []
    w.full = FullWait(wait_s=0.05, on_full=events.append, why=lambda: "no uploader")
    with pytest.raises(FullError) as info:
        w.append(b"x")
    assert info.value.what == "WAL full: nothing freed room for 0.05 s (no uploader)"
    assert events == [True, False]
    assert w.full.waits == 1 and 0.04 <= w.full.total_s < 5
    w.full = FullWait(wait_s=0, why=lambda: "")
    with pytest.raises(FullError) as info:
        w.append(b"x")
    assert info.value.what == "WAL full: nothing freed room"
    w.close()


def test_full_error_offset_is_one_ring_past_the_trim_point(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = fill_ring(w)
    w.trim_to(offs[1])
    w.append(b"f" * (16 * KiB - rec.SIZE))  # 64K..80K: the ring is full again
    w.drain()
    with pytest.raises(FullError) as info:
        w.append(b"x")
    assert info.value.offset == 16 * KiB + RING
    w.close()


def test_a_waiting_append_goes_on_once_a_trim_frees_room(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = fill_ring(w)
    started = threading.Event()

    def on_full(waiting):
        if waiting:
            started.set()

    w.full = FullWait(wait_s=30, on_full=on_full)
    got = []
    t = threading.Thread(target=lambda: got.append(w.append(b"x" * 10)))
    t.start()
    assert started.wait(10)
    w.trim_to(offs[1])
    t.join(10)
    assert got == [RING]
    assert w.full.waits == 1 and w.full.total_s < 10
    w.close()


def test_a_writer_failing_while_an_append_waits_for_room_stops_the_wait(tmp_path):
    w = make_writer(new_wal(tmp_path))
    fill_ring(w)
    started = threading.Event()
    w.full = FullWait(wait_s=30, on_full=lambda waiting: waiting and started.set())
    out = []

    def wait():
        try:
            w.append(b"x")
        except Exception as exc:  # noqa: BLE001 - the test checks which
            out.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    assert started.wait(10)
    with w._lock:
        w._failed = IOFailure("disk gone")
        w._lock.notify_all()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(out[0], IOFailure) and out[0].what == "disk gone"
    w.abort()


# -- append_many --------------------------------------------------------------------------
def test_append_many_packs_the_open_block_and_acknowledges_per_block(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path, block_soft_limit_bytes=4096)
    got = []
    w.on_acks = lambda offsets, token, first: got.append((offsets, token, first))
    payloads = [b"p" * 1000] * 5
    assert w.append_many(payloads, 7, 3, 100, "tok") == 3  # 3 x 1057 fit 4096, the 4th does not
    assert w.append_many(payloads, 7, 3, 103, "tok", index=3) == 2
    assert w.append_many(payloads, 7, 3, 105, "tok", index=5) == 0
    w.drain()
    assert got == [([0, 1057, 2114], "tok", 0), ([4096, 5153], "tok", 3)]
    assert w.records_acked == 5
    assert w.checkpoint().streams == {7: 105}
    w.close()
    body = read_at(path, 1057 + rec.SIZE, MANY_OVERHEAD - rec.SIZE + 1000)
    b = StreamRecordBatch.decode(body)
    assert (b.stream_id, b.epoch, b.base_offset, b.count, b.payload) == (7, 3, 101, 1, b"p" * 1000)


def test_append_many_without_on_acks_acknowledges_each_record_with_its_index(tmp_path):
    w = make_writer(new_wal(tmp_path))
    acks = acking(w)
    w.append(b"head", "h")
    assert w.append_many([b"a", b"bb", b"ccc"], 1, 0, 0, "T") == 3
    w.drain()
    assert acks == [(0, "h"), (28, ("T", 0)), (28 + 58, ("T", 1)), (28 + 58 + 59, ("T", 2))]
    w.close()


def test_append_many_with_no_callback_still_counts(tmp_path):
    w = make_writer(new_wal(tmp_path))
    assert w.append_many([b"a", b"b"], 1, 0, 0) == 2
    w.drain()
    assert w.records_acked == 2 and w.acked_end == 2 * 58
    w.close()


def test_append_many_places_a_large_payload_in_a_block_of_its_own(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    acks = acking(w)
    assert w.append_many([b"s" * 10], 1, 0, 0, "a") == 1
    assert w.append_many([b"L" * 6000, b"t"], 1, 0, 1, "b") == 1
    assert w.append_many([b"L" * 6000, b"t"], 1, 0, 2, "b", index=1) == 1
    w.drain()
    assert acks == [(0, ("a", 0)), (4096, ("b", 0)), (4096 + 8192, ("b", 1))]
    w.close()


def test_append_many_refuses_a_payload_larger_than_the_ring(tmp_path):
    w = make_writer(new_wal(tmp_path))
    big = b"x" * (RING - MANY_OVERHEAD + 1)
    with pytest.raises(UsageError) as info:
        w.append_many([big], 1, 0, 0)
    assert info.value.what == (f"record of {RING - rec.SIZE + 1} bytes does not fit this WAL "
                               f"(ring {RING} bytes, window limit {RING} bytes)")
    assert w.append_many([big[:-1]], 1, 0, 0) == 1
    w.close()


def test_append_many_pads_the_lap_end_and_stops_at_a_full_ring(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    acks = acking(w)
    payloads = [b"m" * (8 * KiB - MANY_OVERHEAD)] * 7
    done = 0
    while done < 7:
        done += w.append_many(payloads, 1, 0, done, "x", index=done)
    w.drain()
    assert done == 7 and acks[-1][0] == 48 * KiB
    w.trim_to(16 * KiB)
    assert w.append_many(payloads[:1], 1, 0, 7, "x") == 1  # 56K..64K
    extra = [b"n" * 100]
    w.append_many(extra, 1, 0, 8, "y")  # does not fit the lap: padding, then the next lap
    w.drain()
    assert acks[-1] == (RING, ("y", 0))
    with pytest.raises(FullError):
        w.append_many([b"z" * (16 * KiB)], 1, 0, 9, "z")
    w.close()


# -- append_frames ------------------------------------------------------------------------
frames_only = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


@frames_only
def test_append_frames_packs_lines_and_acknowledges_them_per_block(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.last_offset, f.count, f.payload_bytes, f.stream_id,
                                        f.base_offset))
    data = b"".join(b"%03d" % i + b"." * 996 + b"\n" for i in range(5))  # 999-byte payloads
    spec = FrameSpec(True, 4, 0, 1 << 20)
    total, pos, stop, next_len = w.append_frames(data, 0, len(data), spec, 10, 100)
    assert (total, pos, stop, next_len) == (5, len(data), framepack.STOP_INPUT, -1)
    w.drain()
    one = MANY_OVERHEAD + 999
    assert got == [(0, 2 * one, 3, 3 * 999, 4, 10), (4096, 4096 + one, 2, 2 * 999, 4, 13)]
    assert w.records_acked == 5
    assert w.checkpoint().streams == {4: 15}
    w.close()


@frames_only
def test_append_frames_stops_at_max_records_and_too_large_payloads(tmp_path):
    w = make_writer(new_wal(tmp_path))
    data = b"".join(len(p).to_bytes(4, "big") + p for p in (b"a", b"bb", b"c" * 50, b"d"))
    spec = FrameSpec(False, 4, 0, 10)
    assert w.append_frames(data, 0, len(data), spec, 0, 1) == (1, 5, framepack.STOP_MAX, -1)
    assert w.append_frames(data, 5, len(data), spec, 1, 5) == (1, 11, framepack.STOP_TOO_LARGE, 50)
    assert w.append_frames(data, 5, 9, spec, 1, 5) == (0, 5, framepack.STOP_INPUT, 2)
    w.close()


@frames_only
def test_append_frames_places_a_large_record_alone_and_refuses_one_over_the_ring(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    spec = FrameSpec(False, 4, 0, 1 << 20)
    data = b"".join(len(p).to_bytes(4, "big") + p for p in (b"a", b"L" * 6000, b"b"))
    assert w.append_frames(data, 0, len(data), spec, 0, 10)[0] == 3
    w.drain()
    assert got == [(0, 1), (4096, 1), (4096 + 8192, 1)]
    big = (RING - MANY_OVERHEAD + 1)
    data = big.to_bytes(4, "big") + b"x" * big
    with pytest.raises(UsageError, match=rf"^record of {RING - rec.SIZE + 1} bytes does not fit this WAL"):
        w.append_frames(data, 0, len(data), spec, 3, 10)
    w.close()


@frames_only
def test_append_frames_into_a_full_ring_raises_full_error(tmp_path):
    w = make_writer(new_wal(tmp_path))
    fill_ring(w)
    spec = FrameSpec(True, 4, 0, 1 << 20)
    with pytest.raises(FullError):
        w.append_frames(b"abc\n", 0, 4, spec, 0, 10)
    w.close()


# -- the budget ----------------------------------------------------------------------------
def test_an_iops_budget_holds_block_writes_and_records_the_stall(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0, budget=Budget(iops=20))
    acks = acking(w)
    for i in range(6):
        w.append(b"x" * 100, i)
        w.submit_open_block()
    w.drain()
    assert [t for _, t in acks] == list(range(6))
    s = w.stages.summary()
    assert s["blocks"] == 6
    assert w.stages.sums["budget"] > 0  # the burst ran out: later blocks were held
    w.close()


def test_an_unlimited_budget_is_no_budget(tmp_path):
    w = make_writer(new_wal(tmp_path), budget=Budget())
    assert w.budget is None and w._pacer is None
    w.close()
    w = make_writer(new_wal(tmp_path, name="d.img"), budget=Budget(bandwidth_bytes_per_s=1 << 30))
    assert w.budget == Budget(bandwidth_bytes_per_s=1 << 30)
    w.append(b"x")
    w.drain()
    assert w.stages.sums["budget"] == 0
    w.close()


def test_a_trim_freeing_exactly_the_room_needed_lets_the_append_go_on(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    offs = [w.append(b"f" * (4096 - rec.SIZE), None, (1, i + 1)) for i in range(16)]
    w.drain()
    started = threading.Event()
    w.full = FullWait(wait_s=2.0, on_full=lambda waiting: waiting and started.set())
    got = []
    t = threading.Thread(target=lambda: got.append(w.append(b"x" * 10)))
    t.start()
    assert started.wait(10)
    w.trim_to(offs[1])  # the room ends at 4096 + 64K: exactly the new block's end
    t.join(10)
    assert got == [RING]
    w.close()


def test_waits_and_their_time_add_up(tmp_path):
    w = make_writer(new_wal(tmp_path))
    fill_ring(w)
    w.full = FullWait(wait_s=0.05)
    for _ in range(2):
        with pytest.raises(FullError):
            w.append(b"x")
    assert w.full.waits == 2
    assert 0.1 <= w.full.total_s < 0.7  # each wait ends at its deadline, not a second later
    w.close()


def test_a_trim_that_frees_too_little_starts_the_wait_again(tmp_path):
    import time

    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    offs = [w.append(b"f" * (4096 - rec.SIZE), None, (1, i + 1)) for i in range(16)]
    w.drain()
    started = threading.Event()
    w.full = FullWait(wait_s=30.0, on_full=lambda waiting: waiting and started.set())
    out = []

    def big():
        try:
            out.append(w.append(b"x" * (8192 - rec.SIZE)))
        except FullError as exc:
            out.append(exc)

    t = threading.Thread(target=big)
    t.start()
    assert started.wait(10)
    w.trim_to(offs[1])  # frees 4 KiB of the 8 KiB it needs: it waits on
    time.sleep(0.2)  # (lets the appender see this trim alone; correct code passes without it)
    assert t.is_alive()
    w.trim_to(offs[2])
    t.join(10)
    assert out == [RING]
    assert w.full.waits == 1
    w.close()


def test_a_block_the_timer_closed_during_a_wait_for_room_is_not_reused(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0.2)
    offs = fill_ring(w, size=16 * KiB - rec.SIZE)[:3]
    acked = threading.Event()
    w.on_ack = lambda offset, token: token == "open" and acked.set()
    started = threading.Event()
    w.full = FullWait(wait_s=30.0, on_full=lambda waiting: waiting and started.set())
    w.trim_to(offs[1])  # room up to 80K
    # an open block in the next lap at 64K (to 76K), then a record that needs past 80K
    assert w.append(b"o" * (12 * KiB), "open") == RING
    out = []
    t = threading.Thread(target=lambda: out.append(w.append(b"n" * (8 * KiB), "next")))
    t.start()
    assert started.wait(10)
    assert acked.wait(10)  # the timer closed and wrote the open block meanwhile
    w.trim_to(offs[2])  # room up to 96K
    t.join(10)
    assert out == [RING + 16 * KiB]  # a new block after the written one
    w.drain()
    w.close()



def test_check_record_at_reads_a_header_that_crosses_a_4_kib_boundary(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    assert w.append(b"a" * (4080 - rec.SIZE)) == 0
    assert w.append(b"b" * 7) == 4080  # its header: bytes 4080..4104
    w.drain()
    w.close()
    from walctl.wal.layout import Ring

    dev = open_device(path, writable=False)
    try:
        assert check_record_at(dev, Ring(RING + HEADERS_SIZE), 4080).body_length == 7
    finally:
        dev.close()


def test_a_writer_without_a_checkpoint_starts_its_acknowledged_log_at_its_next_offset(tmp_path):
    path = new_wal(tmp_path)
    dev = open_device(path, writable=True)
    w = WalWriter(dev, read_headers(dev), 8192, batch_interval_s=LONG_S)
    try:
        assert w.checkpoint() == Checkpoint(8192, {}, False, -1)
        assert w.acked_end == 8192 and w.next_block == 8192
        with pytest.raises(UsageError, match=r"^offset 8192 is not in the acknowledged log \(it ends at 8192\)$"):
            w.trim_to(8192)
        assert w.append(b"x", None, (1, 1)) == 8192
        w.drain()
        assert w.checkpoint() == Checkpoint(8217, {}, False, -1)  # stream ends unknown: none claimed
    finally:
        w.close()


def test_the_opening_checkpoint_carries_on(tmp_path):
    w = make_writer(new_wal(tmp_path), checkpoint=Checkpoint(0, {3: 5}, False, 77))
    try:
        assert w.checkpoint() == Checkpoint(0, {3: 5}, False, 77)
        w.append(b"x", None, (4, 1))
        w.drain()
        assert w.checkpoint() == Checkpoint(25, {3: 5, 4: 1}, False, 77)
        assert w.uploaded_offset == 77
    finally:
        w.close()


def test_without_a_budget_no_block_is_held_and_no_wait_is_set_up(tmp_path):
    w = make_writer(new_wal(tmp_path))
    assert w.budget is None and w.full.wait_s == 0 and w.before_close == []
    for i in range(3):
        w.append(b"x" * 100, i)
        w.submit_open_block()
    w.drain()
    assert w.stages.count == 3
    assert w.stages.sums["budget"] == 0
    assert w.stages.sums["total"] == w.stages.sums["queued"] + w.stages.sums["write"] + w.stages.sums["flush"]
    w.close()


def test_close_and_abort_release_the_device(tmp_path):
    path = new_wal(tmp_path)
    make_writer(path).close()
    w = make_writer(path)  # the lock is free again
    w.abort()
    make_writer(path).close()


def lp(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@frames_only
def test_append_frames_on_a_closed_or_failed_writer_is_refused(tmp_path):
    path = new_wal(tmp_path)
    spec = FrameSpec(True, 4, 0, 1 << 20)
    w = make_writer(path)
    w.close()
    with pytest.raises(RuntimeError, match="^writer is closed$"):
        w.append_frames(b"a\n", 0, 2, spec, 0, 10)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=0)
    w = make_writer(path, dev=dev)
    w.append(b"x")
    with pytest.raises(IOFailure):
        w.drain()
    with pytest.raises(IOFailure, match="injected EIO"):
        w.append_frames(b"a\n", 0, 2, spec, 0, 10)
    w.abort()


@frames_only
def test_append_frames_counts_max_records_across_blocks(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    data = lp(*[bytes([i]) * 1000 for i in range(10)])
    spec = FrameSpec(False, 4, 0, 1 << 20)
    total, pos, stop, _ = w.append_frames(data, 0, len(data), spec, 0, 5)
    assert (total, pos, stop) == (5, 5 * 1004, framepack.STOP_MAX)  # 3 in the first block, 2 in the next
    w.drain()
    assert w.records_acked == 5
    w.close()


@frames_only
def test_append_frames_keeps_the_block_open_for_its_batch_interval(tmp_path):
    w = make_writer(new_wal(tmp_path))
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    spec = FrameSpec(True, 4, 0, 1 << 20)
    assert w.append_frames(b"a\n", 0, 2, spec, 0, 10)[0] == 1
    assert w.append_frames(b"bb\n", 0, 3, spec, 1, 10)[0] == 1
    w.drain()
    assert got == [(0, 1), (58, 1)]  # one block: the second call's record follows the first's
    w.close()


@frames_only
def test_append_frames_with_no_batch_interval_writes_at_once(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0)
    acked = threading.Event()
    w.on_frames = lambda f: acked.set()
    w.append_frames(b"a\n", 0, 2, FrameSpec(True, 4, 0, 1 << 20), 0, 10)
    assert acked.wait(10)  # no drain
    w.close()


@frames_only
def test_append_frames_size_limits_at_their_edges(tmp_path):
    spec = FrameSpec(False, 4, 0, 1 << 30)
    w = make_writer(new_wal(tmp_path))
    whole = b"r" * (RING - MANY_OVERHEAD)  # a record of exactly the ring: fits
    assert w.append_frames(lp(whole), 0, 4 + len(whole), spec, 0, 10)[0] == 1
    w.close()
    w = make_writer(new_wal(tmp_path, name="b.img"), window_upper_limit_bytes=8192)
    exact = b"e" * (8192 - MANY_OVERHEAD)  # exactly the window limit: fits
    assert w.append_frames(lp(exact), 0, 4 + len(exact), spec, 0, 10)[0] == 1
    w.close()
    w = make_writer(new_wal(tmp_path, name="c.img"), window_upper_limit_bytes=8192)
    over = exact + b"!"
    with pytest.raises(UsageError, match=r"^record of 8169 bytes does not fit this WAL \(ring 65536 bytes, "
                                         r"window limit 8192 bytes\)$"):
        w.append_frames(lp(over), 0, 4 + len(over), spec, 0, 10)
    w.close()


@frames_only
def test_append_frames_with_one_io_slot_runs_ahead_of_the_device(tmp_path):
    w = make_writer(new_wal(tmp_path, ring=1 * MiB), block_soft_limit_bytes=4096, iodepth=1)
    acks = []
    w.on_frames = lambda f: acks.append(f.count)
    data = lp(*[bytes([i % 251]) * 1000 for i in range(200)])
    total, _, stop, _ = w.append_frames(data, 0, len(data), FrameSpec(False, 4, 0, 1 << 20), 0, 1000)
    assert (total, stop) == (200, framepack.STOP_INPUT)
    w.drain()
    assert sum(acks) == 200 and w.blocks_written == 67
    w.close()


@frames_only
def test_append_frames_renders_the_acknowledgements_it_was_asked_for(tmp_path):
    w = make_writer(new_wal(tmp_path))
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count, f.acks))
    w.append_frames(b"a\nbb\n", 0, 5, FrameSpec(True, 4, 0, 1 << 20, 1), 7, 10)
    w.append_frames(b"c\n", 0, 2, FrameSpec(True, 4, 0, 1 << 20, 0), 9, 10)
    w.drain()
    assert got == [(0, 2, b"0\n58\n"), (117, 1, None)]
    w.close()


@frames_only
def test_append_frames_stops_a_block_at_the_lap_end(tmp_path):
    w = make_writer(new_wal(tmp_path))
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    spec = FrameSpec(True, 4, 0, 1 << 20)
    line = b"l" * 1000 + b"\n"  # 1057-byte records
    data = line * 30
    assert w.append_frames(data, 0, len(data), spec, 0, 100)[0] == 30
    w.drain()
    w.trim_to(29 * 1057)  # room up to 29 * 1057 + 64K
    got.clear()
    data = line * 40
    assert w.append_frames(data, 0, len(data), spec, 30, 100)[0] == 40
    w.drain()
    # from 32K: 31 records end at 65535, one byte before the lap end; the next lap takes the rest
    assert got == [(32 * KiB, 31), (RING, 9)]
    w.close()


@frames_only
def test_append_frames_stops_a_block_at_the_room_the_trim_point_leaves(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = fill_ring(w)
    w.trim_to(offs[1])  # room up to 80K; the next lap's block may take 16K of it
    spec = FrameSpec(True, 4, 0, 1 << 20)
    data = (b"m" * 1000 + b"\n") * 40
    with pytest.raises(FullError):
        w.append_frames(data, 0, len(data), spec, 0, 100)
    w.drain()
    assert w.acked_end == RING + 15 * 1057  # 15 records fit 16K; nothing was written past the room
    w.close()


def test_append_many_stream_recency_keeps_the_streams_written_last(tmp_path):
    w = make_writer(new_wal(tmp_path, ring=1 * MiB))
    w.append_many([b"X" * 5000], 1, 0, 0)  # the stream written first, with a large record
    w.append_many([b"y"], 2, 0, 0)
    for sid in range(3, MAX_STREAMS + 2):
        w.append_many([b"z"], sid, 0, 0)
    w.drain()
    cp = w.checkpoint()
    assert len(cp.streams) == MAX_STREAMS and not cp.complete
    assert 1 not in cp.streams  # the least recently written gives way
    assert 2 in cp.streams and MAX_STREAMS + 1 in cp.streams
    w.close()


def test_append_many_into_the_open_block_stops_at_the_room_left(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = [w.append(b"f" * (4096 - rec.SIZE)) for _ in range(16)]
    w.drain()
    w.trim_to(offs[5])  # room up to 20K + 64K
    assert w.append(b"o", "open") == RING  # an open block in the next lap, 20K of room after it
    payloads = [b"m" * (1057 - MANY_OVERHEAD)] * 40
    assert w.append_many(payloads, 1, 0, 0) == 19  # (20K - 25) // 1057
    with pytest.raises(FullError):
        w.append_many(payloads, 1, 0, 19, index=19)
    w.drain()
    assert w.acked_end == RING + 25 + 19 * 1057
    w.close()


def test_append_many_on_a_failed_writer_is_refused(tmp_path):
    path = new_wal(tmp_path)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=0)
    w = make_writer(path, dev=dev)
    w.append(b"x")
    with pytest.raises(IOFailure):
        w.drain()
    with pytest.raises(IOFailure, match="injected EIO"):
        w.append_many([b"a"], 1, 0, 0)
    with pytest.raises(IOFailure, match="injected EIO"):
        w.append(b"a")
    w.abort()


def test_append_many_into_an_open_block_writes_its_batches_where_it_says(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    got = []
    w.on_acks = lambda offsets, token, first: got.append((offsets, token, first))
    assert w.append(b"o" * 7, None, (9, 1)) == 0
    assert w.append_many([b"skip", b"p" * 40, b"q" * 3], 7, 3, 100, "T", index=1) == 2
    w.drain()
    assert got == [([31, 31 + 97], "T", 1)]
    assert w.checkpoint().streams == {9: 1, 7: 102}
    w.close()
    for offset, base, payload in ((31, 100, b"p" * 40), (128, 101, b"q" * 3)):
        raw = read_at(path, offset, MANY_OVERHEAD + len(payload))
        head = rec.RecordHeader.decode(raw[:rec.SIZE], expected_offset=offset)
        assert head.body_length == MANY_OVERHEAD - rec.SIZE + len(payload)
        b = StreamRecordBatch.decode(raw[rec.SIZE:])
        assert (b.stream_id, b.epoch, b.base_offset, b.count, b.payload) == (7, 3, base, 1, payload)


def test_append_many_refuses_a_payload_over_the_window_limit(tmp_path):
    w = make_writer(new_wal(tmp_path), window_upper_limit_bytes=8192)
    with pytest.raises(UsageError, match=r"^record of 8201 bytes does not fit this WAL \(ring 65536 bytes, "
                                         r"window limit 8192 bytes\)$"):
        w.append_many([b"w" * (8201 - (MANY_OVERHEAD - rec.SIZE))], 1, 0, 0)
    w.close()


def test_append_many_in_a_new_block_stops_at_the_lap_end_and_the_room(tmp_path):
    w = make_writer(new_wal(tmp_path))
    got = []
    w.on_acks = lambda offsets, token, first: got.append((offsets[0], len(offsets)))
    payloads = [b"l" * (1057 - MANY_OVERHEAD)] * 70
    done = 0
    while done < 30:
        done += w.append_many(payloads[:30], 1, 0, done, index=done)
    w.drain()
    w.trim_to(29 * 1057)
    got.clear()
    while done < 70:
        done += w.append_many(payloads, 1, 0, done, index=done)
    w.drain()
    assert got == [(32 * KiB, 31), (RING, 9)]  # 31 records end a byte before the lap end
    w.close()
    w = make_writer(new_wal(tmp_path, name="r.img"))
    offs = fill_ring(w)
    w.trim_to(offs[1])  # room up to 80K: a new block at 64K may take 16K
    assert w.append_many(payloads, 1, 0, 0) == 15
    w.close()


def test_append_many_calls_share_the_open_block_and_are_written_at_once_without_an_interval(tmp_path):
    w = make_writer(new_wal(tmp_path))
    got = []
    w.on_acks = lambda offsets, token, first: got.append((offsets, token))
    assert w.append_many([b"a"], 1, 0, 0, "x") == 1
    assert w.append_many([b"b"], 1, 0, 1, "y") == 1
    w.drain()
    assert got == [([0], "x"), ([58], "y")]  # one block
    w.close()
    w = make_writer(new_wal(tmp_path, name="n.img"), batch_interval_s=0)
    acked = threading.Event()
    w.on_acks = lambda offsets, token, first: acked.set()
    w.append_many([b"a"], 1, 0, 0)
    assert acked.wait(10)  # no drain
    w.close()


def test_append_many_in_a_new_block_takes_the_room_to_the_4_kib_below_it(tmp_path):
    w = make_writer(new_wal(tmp_path))
    offs = [w.append(b"f" * (4096 - rec.SIZE)) for _ in range(16)]
    w.drain()
    w.trim_to(offs[5])  # room up to 84K: a new block at 64K may take 20K
    assert w.append_many([b"m" * (1057 - MANY_OVERHEAD)] * 40, 1, 0, 0) == 19
    w.close()


def test_check_record_at_refuses_a_record_of_an_earlier_lap(tmp_path):
    path = new_wal(tmp_path)
    w = make_writer(path)
    w.append(b"x" * 100)
    w.drain()
    w.close()
    from walctl.wal.layout import Ring

    dev = open_device(path, writable=False)
    try:
        ring = Ring(RING + HEADERS_SIZE)
        assert check_record_at(dev, ring, 0).body_length == 100
        with pytest.raises(UsageError) as info:  # the same bytes, one lap later: they say offset 0
            check_record_at(dev, ring, RING)
        assert info.value.what.startswith(f"no live record starts at offset {RING} (")
    finally:
        dev.close()


def test_close_turns_a_running_header_graceful(tmp_path):
    path = new_wal(tmp_path)
    from walctl.wal.headers import write_header

    dev = open_device(path, writable=True)
    state = read_headers(dev)
    state = write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL))
    w = WalWriter(dev, state, 0, batch_interval_s=LONG_S, checkpoint=Checkpoint(0, complete=True))
    w.append(b"x")
    w.close()
    assert read_state(path).header.shutdown_type == SHUTDOWN_GRACEFUL


def test_an_untracked_checkpoint_keeps_the_upload_mark(tmp_path):
    w = make_writer(new_wal(tmp_path), checkpoint=Checkpoint(0, {}, False, 77))
    w.append(b"x")  # no stream: ends unknown
    w.drain()
    assert w.checkpoint() == Checkpoint(25, {}, False, 77)
    w.close()


def test_the_timer_runs_in_a_named_daemon_thread(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0.3)
    w.append(b"x")  # its batch interval arms the timer
    try:
        assert w._timer_thread.name == "walctl-timer"
        assert w._timer_thread.daemon is True  # never keeps a finished process alive
    finally:
        w.close()
