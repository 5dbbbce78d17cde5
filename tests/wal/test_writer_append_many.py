"""WalWriter.append_many (issue 19): many records packed into the open block at once must write the
same bytes, in the same blocks, with the same acknowledgements, checkpoint and checks as one
``append`` per record; with the C packer and with its pure-Python twin."""

from __future__ import annotations

import threading

import pytest
from walhelpers import new_wal, scan_file

from walctl.device import FaultyDevice, open_device
from walctl.errors import FullError, UsageError
from walctl.format import bulk
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import HEADERS_SIZE
from walctl.wal.headers import read_headers
from walctl.wal.writer import WalWriter

KiB, MiB = 1 << 10, 1 << 20
LONG_S = 3600.0  # blocks close only when full, or at a drain or close: the same blocks every run
STREAM, EPOCH = 7, 0


@pytest.fixture(params=["native", "python"])
def packer(request, monkeypatch):
    """append_many with the C pack_records, then with its pure-Python twin (WALCTL_NO_NATIVE)."""
    if request.param == "native":
        if bulk._native is None:
            pytest.skip("walctl.format._native is not built here (test_native checks it is where cc exists)")
    else:
        monkeypatch.setattr(bulk, "_native", None)
    return request.param


def payload(i: int, size: int) -> bytes:
    return bytes((i + k) % 251 for k in range(size))


def mixed_sizes(n: int) -> list[int]:
    """Empty, small, ~1 KiB, a few KiB, and one larger than a block (256 KiB) on its own."""
    sizes = [(i * 7919) % 3000 for i in range(n)]
    sizes[0] = 0
    sizes[n // 2] = 300 * KiB
    return sizes


def open_writer(path, **kwargs):
    dev = open_device(path, writable=True)
    state = read_headers(dev)
    start = state.header.next_offset
    # A known checkpoint: the writer tracks stream ends (the append command's writer does too).
    return WalWriter(dev, state, start, batch_interval_s=LONG_S, checkpoint=Checkpoint(start), **kwargs)


def near_lap_end(path, room: int) -> None:
    """Fill the ring with 1 KiB records (one append each) until less than ``room`` bytes are left before
    the lap end, trim to the last one and close: the next writer's records cross the lap end."""
    writer = open_writer(path)
    body = StreamRecordBatch(1, EPOCH, 0, 1, b"x" * 1000).encode()
    offset, base = 0, 0
    while writer.ring.size - writer.next_block - (writer._cur.length if writer._cur else 0) > room:
        offset = writer.append(body, None, (1, base + 1))
        base += 1
    writer.drain()
    writer.trim_to(offset)
    writer.close()


def one_by_one(writer, payloads, base: int, acks: list) -> int:
    """What the append command did before append_many: one append per record; returns records queued."""
    writer.on_ack = lambda offset, token: acks.append((offset, token))
    done = 0
    try:
        for i, p in enumerate(payloads):
            writer.append(StreamRecordBatch(STREAM, EPOCH, base + i, 1, p).encode(), i, (STREAM, base + i + 1))
            done += 1
    finally:
        writer.close()
    return done


def many(writer, payloads, base: int, acks: list, calls: list | None = None) -> int:
    """The same records through append_many, the way the append command calls it; returns records queued."""
    def on_acks(offsets, token, first):
        assert token == "tok"
        if calls is not None:
            calls.append(len(offsets))
        acks.extend(zip(offsets, range(first, first + len(offsets))))

    writer.on_acks = on_acks
    i = 0
    try:
        while i < len(payloads):
            got = writer.append_many(payloads, STREAM, EPOCH, base + i, "tok", index=i)
            assert got >= 1
            i += got
    finally:
        writer.close()
    return i


def record_area(path) -> bytes:
    with open(path, "rb") as f:
        f.seek(HEADERS_SIZE)
        return f.read()


def run_both(tmp_path, payloads, capacity: int, *, lap_room: int | None = None, **kwargs):
    """(per-record path, acks, stats, checkpoint) and the same for append_many, on two fresh WALs."""
    out = []
    for name, fn in (("one", one_by_one), ("many", many)):
        path = new_wal(tmp_path / f"{name}.img", capacity)
        if lap_room is not None:
            near_lap_end(path, lap_room)
        writer = open_writer(path, **kwargs)
        acks: list = []
        error = None
        try:
            fn(writer, payloads, 5, acks)
        except FullError as exc:
            error = exc
        out.append((path, acks, (writer.blocks_written, writer.bytes_written, writer.records_acked),
                    writer.checkpoint(), error))
    return out


def test_append_many_writes_the_same_bytes_blocks_and_acknowledgements_as_one_append_per_record(tmp_path, packer):
    sizes = mixed_sizes(900)  # ~1.6 MiB: several full blocks, one record larger than a block
    payloads = [payload(i, s) for i, s in enumerate(sizes)]
    (p1, acks1, stats1, cp1, _), (p2, acks2, stats2, cp2, _) = run_both(tmp_path, payloads, 8 * MiB)
    assert stats1[0] > 6 and stats2 == stats1  # same blocks, same bytes, every record acknowledged
    assert acks2 == acks1 and [i for _, i in acks2] == list(range(len(payloads)))
    assert cp2 == cp1 and cp2.streams[STREAM] == 5 + len(payloads)
    assert record_area(p2) == record_area(p1)
    entries, result = scan_file(p2)
    assert [e.offset for e in entries] == [o for o, _ in acks2] and not result.findings


def test_records_packed_across_the_lap_end_are_the_same_as_one_by_one(tmp_path, packer):
    payloads = [payload(i, s) for i, s in enumerate(mixed_sizes(400))]
    (p1, acks1, stats1, cp1, _), (p2, acks2, stats2, cp2, _) = run_both(tmp_path, payloads, 2 * MiB,
                                                                       lap_room=20 * KiB)
    offsets = [o for o, _ in acks2]
    assert acks2 == acks1 and stats2 == stats1 and cp2 == cp1
    assert offsets == sorted(offsets) and len(offsets) == len(payloads)
    assert record_area(p2) == record_area(p1)
    entries, result = scan_file(p2)
    assert not result.findings and [e.offset for e in entries][-len(offsets):] == offsets
    lap = 2 * MiB - HEADERS_SIZE
    assert offsets[0] < lap < offsets[-1]  # the records really crossed the lap end (after a padding record)


def test_a_full_wal_stops_append_many_at_the_same_record_as_one_by_one(tmp_path, packer):
    payloads = [payload(i, 1000) for i in range(3000)]  # ~3 MiB into a 1 MiB WAL
    one, mny = run_both(tmp_path, payloads, 1 * MiB)
    assert isinstance(one[4], FullError) and isinstance(mny[4], FullError)
    assert mny[1] == one[1] and 0 < len(mny[1]) < len(payloads)  # the records before it, all acknowledged
    assert mny[2] == one[2] and mny[3] == one[3]
    assert record_area(mny[0]) == record_area(one[0])


def test_acknowledgements_come_once_per_block_in_log_order_after_its_write(tmp_path, packer):
    gate = threading.Event()

    class Gated(FaultyDevice):
        def pwrite(self, offset, buf):
            if offset >= HEADERS_SIZE:
                gate.wait()
            return super().pwrite(offset, buf)

    path = new_wal(tmp_path / "w.img", 8 * MiB)
    dev = Gated(open_device(path, writable=True))
    writer = WalWriter(dev, read_headers(dev), 0, batch_interval_s=LONG_S, iodepth=2)
    acks, calls = [], []
    writer.on_acks = lambda offsets, token, first: (calls.append((token, first, list(offsets))),
                                                   acks.extend(offsets))
    payloads = [payload(i, 1000) for i in range(600)]  # ~620 KiB: three blocks
    got = writer.append_many(payloads, STREAM, EPOCH, 0, "a")
    assert 200 < got < 600 and acks == []  # one block's worth, none durable yet
    i = got
    while i < len(payloads):
        i += writer.append_many(payloads, STREAM, EPOCH, i, "a", index=i)
    assert acks == []  # the writes are held: nothing is acknowledged
    gate.set()
    writer.close()
    # one call per block, in log order: each block's records back to back from its 4 KiB aligned start
    assert writer.blocks_written == 3 and len(calls) == 3
    assert [c[1] for c in calls] == [0, got, got + len(calls[1][2])] and sum(len(c[2]) for c in calls) == 600
    step = 24 + 33 + 1000
    for token, first, offsets in calls:
        assert token == "a" and offsets[0] % 4096 == 0
        assert offsets == [offsets[0] + k * step for k in range(len(offsets))]
    assert acks == sorted(acks) and calls[1][2][0] == (got * step + 4095) // 4096 * 4096


def test_without_on_acks_each_record_gets_on_ack_with_its_index(tmp_path, packer):
    path = new_wal(tmp_path / "w.img", 4 * MiB)
    acks = []
    writer = open_writer(path, on_ack=lambda offset, token: acks.append((offset, token)))
    payloads = [b"a", b"", b"ccc"]
    assert writer.append_many(payloads, STREAM, EPOCH, 10, "t", index=1) == 2
    writer.close()
    assert acks == [(0, ("t", 1)), (24 + 33, ("t", 2))]
    entries, result = scan_file(path)
    assert [(e.offset) for e in entries] == [0, 57] and not result.findings


def test_a_record_too_large_for_the_wal_is_refused_after_the_ones_before_it(tmp_path, packer):
    path = new_wal(tmp_path / "w.img", 1 * MiB)
    acks = []
    writer = open_writer(path)
    writer.on_acks = lambda offsets, token, first: acks.extend(offsets)
    payloads = [b"x" * 100, b"y" * 100, b"z" * (2 * MiB)]
    assert writer.append_many(payloads, STREAM, EPOCH, 0) == 2
    with pytest.raises(UsageError, match="does not fit this WAL"):
        writer.append_many(payloads, STREAM, EPOCH, 2, index=2)
    writer.close()
    assert acks == [0, 157]


@pytest.mark.parametrize("interval_s", [None, 0.0, 0.25])
def test_open_writer_passes_the_group_commit_wait_to_the_writer(tmp_path, interval_s):
    """`append --batch-interval` reaches the writer through open_writer (None: the writer's default)."""
    from walctl.wal.lifecycle import open_writer
    from walctl.wal.writer import DEFAULT_BATCH_INTERVAL_S

    path = new_wal(tmp_path / "wal", 4 * MiB)
    opened = open_writer(path, batch_interval_s=interval_s)
    try:
        assert opened.writer.batch_interval_s == (DEFAULT_BATCH_INTERVAL_S if interval_s is None else interval_s)
    finally:
        opened.writer.close()
