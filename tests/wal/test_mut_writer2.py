"""Placement and packing edges of walctl/wal/writer_blocks.py asked for by its mutation survivors.

In-process writers on a 64 KiB ring in a file (tests/wal/test_mut_writer.py's helpers), no timer
(blocks close when full, at drain or close), no sleeps.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from walctl.errors import FullError
from walctl.format import framepack
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import MAX_STREAMS
from walctl.wal.pacing import Budget
from walctl.wal.writer_blocks import MANY_OVERHEAD, FrameSpec
from walctl.wal.writer_room import FullWait

from test_mut_writer import KiB, MiB, RING, acking, make_writer, new_wal, read_at

frames_only = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")

LINE = b"l" * 1000 + b"\n"  # a 1057-byte record in line framing
PAYLOAD = b"m" * (1057 - MANY_OVERHEAD)  # a 1057-byte record from append_many


def four_k_records_trimmed_to_20k(path):
    """A writer whose ring holds 16 records of 4 KiB, trimmed to the sixth: room up to 84K."""
    w = make_writer(path)
    offs = [w.append(b"f" * (4096 - rec.SIZE)) for _ in range(16)]
    w.drain()
    w.trim_to(offs[5])
    return w, offs


def test_a_record_ending_exactly_at_an_unaligned_soft_limit_joins_the_block(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=8192)
    acks = acking(w)
    assert w.append(b"a" * (4000 - rec.SIZE), 0) == 0
    assert w.append(b"b" * (4192 - rec.SIZE), 1) == 4000  # 4000 + 4192 = 8192: the same block
    assert w.append(b"c", 2) == 8192
    w.drain()
    assert acks == [(0, 0), (4000, 1), (8192, 2)]
    assert w.blocks_written == 2
    w.close()


def test_a_record_ending_exactly_at_the_lap_end_joins_an_unaligned_block(tmp_path):
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=RING)
    assert w.append(b"a" * (60000 - rec.SIZE)) == 0
    assert w.append(b"b" * (RING - 60000 - rec.SIZE)) == 60000  # ends at the lap end: no padding
    w.drain()
    assert w.blocks_written == 1
    assert w.acked_end == RING and w.next_block == RING
    w.close()


def test_append_many_into_an_open_block_takes_the_aligned_room_below_an_unaligned_trim(tmp_path):
    w = make_writer(new_wal(tmp_path))
    done = 0
    while done < 30:
        done += w.append_many([PAYLOAD] * 30, 1, 0, done, index=done)
    w.drain()
    w.trim_to(29 * 1057)  # room up to 29 * 1057 + 64K = 96189: not 4 KiB-aligned
    assert w.append(b"o") == 32 * KiB  # an open block; the lap ends 32K after it, the room 61440 after
    # the lap's end limits it: (32K - 25) // 1057 records, not the 1981 bytes the room passes a 4K boundary by
    assert w.append_many([PAYLOAD] * 40, 1, 0, 30) == 30
    w.drain()
    assert w.acked_end == 32 * KiB + 25 + 30 * 1057
    w.close()


def test_append_many_waiting_for_room_packs_into_the_open_block_after_its_records(tmp_path):
    path = new_wal(tmp_path)
    w, offs = four_k_records_trimmed_to_20k(path)
    assert w.append(b"o") == RING  # an open block at 64K with 25 bytes in it, room for 20K - 25 more
    started = threading.Event()
    w.full = FullWait(wait_s=30, on_full=lambda waiting: waiting and started.set())
    got = []
    w.on_acks = lambda offsets, token, first: got.append((offsets, token, first))
    payload = b"p" * (21000 - MANY_OVERHEAD)  # passes the room: waits, then joins the open block
    t = threading.Thread(target=lambda: got.append(w.append_many([payload], 5, 2, 70, "T")))
    t.start()
    assert started.wait(10)
    w.trim_to(offs[7])  # room up to 92K
    t.join(10)
    assert got == [1]
    w.drain()
    assert got == [1, ([RING + 25], "T", 0)]
    assert w.full.waits == 1
    w.close()
    raw = read_at(path, RING + 25, 21000)
    head = rec.RecordHeader.decode(raw[:rec.SIZE], expected_offset=RING + 25)
    assert head.body_length == 21000 - rec.SIZE
    b = StreamRecordBatch.decode(raw[rec.SIZE:])
    assert (b.stream_id, b.epoch, b.base_offset, b.count, b.payload) == (5, 2, 70, 1, payload)


@frames_only
def test_append_frames_in_a_new_block_takes_an_odd_number_of_4_kib_of_room(tmp_path):
    w, _ = four_k_records_trimmed_to_20k(new_wal(tmp_path))
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    spec = FrameSpec(True, 4, 0, 1 << 20)
    data = LINE * 40
    with pytest.raises(FullError):
        w.append_frames(data, 0, len(data), spec, 0, 100)
    w.drain()
    assert got == [(RING, 19)]  # 20K of room (5 x 4 KiB) at 64K: 20480 // 1057 records
    assert w.acked_end == RING + 19 * 1057
    w.close()


@frames_only
def test_append_frames_waiting_for_room_goes_on_in_the_block_it_then_opens(tmp_path):
    """A record that passes the room at a block boundary takes _place_frame's slow path (_place,
    which waits for a trim): once room is freed the call goes on packing in the block it opened,
    every record acknowledged once, in order, at the offsets after the first 19."""
    w, offs = four_k_records_trimmed_to_20k(new_wal(tmp_path))
    started = threading.Event()
    w.full = FullWait(wait_s=30, on_full=lambda waiting: waiting and started.set())
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    spec = FrameSpec(True, 4, 0, 1 << 20)
    data = LINE * 40
    result = []
    t = threading.Thread(target=lambda: result.append(w.append_frames(data, 0, len(data), spec, 0, 100)))
    t.start()
    assert started.wait(10)  # 19 records packed in the 20K of room, the 20th waits
    w.trim_to(offs[15])  # room up to the lap's end and past it: 148K
    t.join(10)
    assert not t.is_alive() and result and result[0][:3] == (40, len(data), framepack.STOP_INPUT)
    w.drain()
    assert sum(count for _, count in got) == 40 and got[0] == (RING, 19)
    assert [offset for offset, _ in got] == sorted(offset for offset, _ in got)
    assert w.acked_end == got[-1][0] + got[-1][1] * 1057
    w.close()


def test_a_block_opened_while_the_budget_holds_the_last_one_starts_its_own_stall_count(tmp_path):
    w = make_writer(new_wal(tmp_path), batch_interval_s=0, budget=Budget(iops=20), block_soft_limit_bytes=8192)
    acks = acking(w)
    assert w.append(b"a" * 100, 0) == 0  # the burst's one write: at once
    assert w.append(b"b" * (4000 - rec.SIZE), 1) == 4096  # held open: the budget stalls the writer 50 ms
    assert w.append(b"c" * (5000 - rec.SIZE), 2) == 8192  # closes the held block, opens the next mid-stall
    w.drain()
    assert acks == [(0, 0), (4096, 1), (8192, 2)]
    assert w.stages.count == 3 and w.stages.sums["budget"] > 0
    w.close()


def test_append_many_ranks_its_stream_by_its_record_s_offset_beside_append_s(tmp_path):
    w = make_writer(new_wal(tmp_path, ring=1 * MiB))
    assert w.append_many([b"a"], 1, 0, 0) == 1  # at 0: the least recently written stream
    assert w.append(b"b", None, (2, 1)) == MANY_OVERHEAD + 1  # right after it, by append
    for sid in range(3, MAX_STREAMS + 2):
        w.append(b"z", None, (sid, 1))
    w.drain()
    cp = w.checkpoint()
    assert len(cp.streams) == MAX_STREAMS and not cp.complete
    assert 1 not in cp.streams and cp.streams[2] == 1
    w.close()


def test_the_latency_breakdown_of_budgeted_blocks_stays_inside_the_time_they_took(tmp_path):
    started = time.perf_counter_ns()
    w = make_writer(new_wal(tmp_path), batch_interval_s=0, budget=Budget(iops=20), block_soft_limit_bytes=8192)
    w.append(b"a" * 100)
    w.append(b"b" * (4000 - rec.SIZE))  # held by the budget
    w.append(b"c" * (5000 - rec.SIZE))
    w.drain()
    elapsed = time.perf_counter_ns() - started
    st = w.stages
    assert st.count == 3
    for stage in ("queued", "budget", "write", "flush", "total"):
        assert len(st.samples[stage]) == 3
        assert all(0 <= ns <= elapsed for ns in st.samples[stage]), stage
    assert [b <= q for b, q in zip(st.samples["budget"], st.samples["queued"])] == [True] * 3
    assert st.sums["total"] == st.sums["queued"] + st.sums["write"] + st.sums["flush"]
    assert st.sums["budget"] >= 40_000_000  # the second block waited for the budget (50 ms at 20 IOPS)
    w.close()


def line_of(record_bytes: int) -> bytes:
    """The line whose append_frames record (24-byte header, 33-byte batch header) is ``record_bytes`` long."""
    return b"k" * (record_bytes - MANY_OVERHEAD) + b"\n"


@frames_only
def test_append_frames_pads_the_lap_when_a_record_passes_its_end_after_a_full_block(tmp_path):
    """_place_frame's inline opening is only for a record that ends inside its lap: the third 6000-byte
    record finds 4 KiB left in the lap (the block before it ends at 61152, aligned 61440) and must
    start the next lap behind a padding record, as append and append_many do."""
    path = new_wal(tmp_path)
    w = make_writer(path)
    offs = [w.append(b"f" * (4096 - rec.SIZE)) for _ in range(12)]
    w.drain()
    w.trim_to(offs[11])  # room up to 45056 + 64K: past the lap end
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    data = line_of(6000) * 3
    assert w.append_frames(data, 0, len(data), FrameSpec(True, 4, 0, 1 << 20), 0, 100)[:3] == \
        (3, len(data), framepack.STOP_INPUT)
    w.drain()
    assert got == [(48 * KiB, 2), (RING, 1)]
    assert w.acked_end == RING + 6000
    header = rec.RecordHeader.decode(read_at(path, 61440, rec.SIZE))
    assert header.is_padding and header.offset == 61440 and header.end == RING  # the padding record
    w.close()


@frames_only
def test_append_frames_waits_for_room_when_a_block_s_aligned_end_passes_an_unaligned_trim(tmp_path):
    """A new block's first record ends inside the room (33000 + 64K), but its block, written to the
    next 4 KiB, would pass it and overwrite the record trimmed to: no inline opening, the full ring
    stops the call (no full wait here) and the record at the trim point is still there."""
    path = new_wal(tmp_path)
    w = make_writer(path)
    offs = [w.append(bytes([i]) * (1000 - rec.SIZE)) for i in range(65)]
    w.drain()
    assert w.next_block == RING
    w.trim_to(offs[33])  # room up to 33000 + 64K = 98536
    before = read_at(path, offs[33], 4 * KiB)
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    data = line_of(33000)  # 65536 + 33000 = 98536: the room's end; its block ends at 102400
    with pytest.raises(FullError):
        w.append_frames(data, 0, len(data), FrameSpec(True, 4, 0, 1 << 20), 0, 100)
    w.drain()
    assert got == [] and w.acked_end == 65000
    assert read_at(path, offs[33], 4 * KiB) == before
    w.close()


@frames_only
def test_append_frames_packs_into_a_block_append_opened(tmp_path):
    """A block opened by append (no append_frames limit of its own) takes append_frames' records after
    its record, in the same block."""
    w = make_writer(new_wal(tmp_path))
    acks = acking(w)
    got = []
    w.on_frames = lambda f: got.append((f.offset, f.count))
    assert w.append(b"a" * 100, "first") == 0
    data = LINE * 3
    assert w.append_frames(data, 0, len(data), FrameSpec(True, 4, 0, 1 << 20), 7, 100)[:3] == \
        (3, len(data), framepack.STOP_INPUT)
    w.drain()
    assert acks == [(0, "first")] and got == [(124, 3)]
    assert w.blocks_written == 1 and w.acked_end == 124 + 3 * 1057
    w.close()


@pytest.mark.skipif(not framepack.DIRECT, reason="walctl.format._native has no frame_read here")
@pytest.mark.parametrize("at_zero", [False, True], ids=["any-descriptor", "descriptor-0"])
def test_append_frames_from_a_file_descriptor_packs_what_it_packs_from_bytes(tmp_path, at_zero):
    """FrameSpec.fd >= 0 (descriptor 0 too: stdin redirected from a file): _frame_into reads the
    length-prefixed records from the file (frame_read) into the same blocks, at the same offsets, as
    frame_pack packs them from the bytes; a payload under the direct path's minimum is left to the
    buffered path (STOP_INPUT at its offset in the file)."""
    sizes = [framepack.DIRECT_MIN_PAYLOAD + 1000 * i for i in range(5)] + [100]
    data = b"".join(len(p).to_bytes(4, "big") + p for p in (bytes([i + 1]) * s for i, s in enumerate(sizes)))
    (tmp_path / "in.bin").write_bytes(data)
    results = []
    for how in ("bytes", "fd"):
        path = new_wal(tmp_path, ring=1 * MiB, name=f"{how}.img")
        w = make_writer(path, block_soft_limit_bytes=64 * KiB)
        got = []
        w.on_frames = lambda f, got=got: got.append((f.offset, f.last_offset, f.count, f.base_offset))
        if how == "bytes":
            spec = FrameSpec(False, 4, 0, 1 << 20)
            out = w.append_frames(data, 0, len(data), spec, 9, 100)
        else:
            fd = os.open(tmp_path / "in.bin", os.O_RDONLY)
            saved = os.dup(0) if at_zero else -1
            try:
                if at_zero:
                    os.dup2(fd, 0)
                out = w.append_frames(None, 0, len(data), FrameSpec(False, 4, 0, 1 << 20, fd=0 if at_zero else fd),
                                      9, 100)
            finally:
                if at_zero:
                    os.dup2(saved, 0)
                    os.close(saved)
                os.close(fd)
        w.drain()
        results.append((out, got, w.acked_end, read_at(path, 0, w.acked_end)))
        w.close()
    (out_b, got_b, end_b, bytes_b), (out_f, got_f, end_f, bytes_f) = results
    assert out_b[:3] == (6, len(data), framepack.STOP_INPUT)
    assert out_f[:3] == (5, len(data) - 104, framepack.STOP_INPUT)  # the 100-byte payload is left
    # the same two blocks, the second without the small record (its last record the one before)
    assert len(got_b) == len(got_f) == 2 and got_f[0] == got_b[0] == (0, got_b[0][1], 3, 9)
    assert got_f[1][0] == got_b[1][0] and got_f[1][2:] == (2, 12) and got_b[1][2:] == (3, 12)
    assert bytes_f == bytes_b[:end_f] and end_f == end_b - MANY_OVERHEAD - 100
