"""The WAL engine on real files: blocks, ring wrap, window growth, full, trim, sealing."""

from __future__ import annotations

import pytest

from walctl.errors import CorruptionError, FullError, NotFoundError, RefusedError, UsageError
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE, SHUTDOWN_UNGRACEFUL
from walctl.wal import reader
from walctl.wal.init import init_wal
from walctl.wal.lifecycle import open_writer
from walctl.wal.trim import trim_wal

from walhelpers import append_records, header_of, new_wal, payload_for, peek, physical, poke, scan_file

KiB, MiB = 1 << 10, 1 << 20


def check_records(entries, expected: list[tuple[int, int]], stream_id: int = 0, size: int = 100):
    """Every expected (offset, base) is there, byte for byte, and nothing else."""
    assert [(e.offset, e.batch.base_offset) for e in entries] == expected
    for e in entries:
        assert e.batch.stream_id == stream_id
        assert e.batch.payload == payload_for(stream_id, e.batch.base_offset, size)


def test_append_close_recover_round_trip(tmp_path):
    path = new_wal(tmp_path / "w", 4 * MiB)
    acks = append_records(path, 500, size=300)
    entries, result = scan_file(path)
    check_records(entries, acks, size=300)
    assert result.findings == []
    assert result.records == 500 and result.payload_bytes == 500 * 300
    state = header_of(path)
    assert state.header.clean and state.header.next_offset == result.next_block_offset
    assert [o for o, _ in acks] == sorted(o for o, _ in acks)


def test_blocks_are_4k_aligned_and_zero_padded(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    acks = append_records(path, 3, size=10, iodepth=1, flush_each=True)
    # flushed after each record: each record starts its own block
    assert [o for o, _ in acks] == [0, 4096, 8192]
    end_of_first = rec.SIZE + 33 + 10
    assert peek(path, physical(path, end_of_first), 4096 - end_of_first) == bytes(4096 - end_of_first)


def test_records_batch_into_blocks_up_to_soft_limit(tmp_path):
    path = new_wal(tmp_path / "w", 8 * MiB)
    opened = open_writer(path, iodepth=1)
    writer = opened.writer
    # hold the only I/O slot busy by not yielding: appends arrive faster than 1 slot drains
    offsets = [writer.append(StreamRecordBatch(0, 0, i, 1, bytes(1000)).encode()) for i in range(1000)]
    writer.close()
    blocks = sorted({o // 4096 * 4096 for o in offsets if o % 4096 == 0})
    # far fewer blocks than records, and no block beyond the 256 KiB soft limit
    starts = [o for o in offsets if o % 4096 == 0]
    assert len(starts) < 1000
    for a, b in zip(starts, starts[1:]):
        assert b - a <= 256 * KiB + 4096
    entries, result = scan_file(path)
    assert len(entries) == 1000 and not result.findings
    assert blocks


def test_ring_wraps_many_laps_recovering_exactly_the_live_records(tmp_path):
    capacity = 64 * KiB  # ring of 56 KiB: 14 blocks
    path = new_wal(tmp_path / "w", capacity)
    live: list[tuple[int, int]] = []
    ring = capacity - HEADERS_SIZE
    for round_ in range(30):
        # worst case (no batching): 4 live + 7 new one-record blocks + 1 lap padding <= 14 blocks
        acks = append_records(path, 7, size=1500, iodepth=2)
        live += acks
        entries, result = scan_file(path)
        check_records(entries, live, size=1500)
        assert not result.findings
        # trim all but the last 4 records, so the next rounds must wrap
        trim_wal(path, live[-5][0])
        live = live[-4:]
    assert live[-1][0] > 3 * ring, "the test must have wrapped the ring several times"
    entries, result = scan_file(path)
    check_records(entries, live, size=1500)


def test_padding_record_fills_the_end_of_a_lap(tmp_path):
    capacity = 64 * KiB
    ring = capacity - HEADERS_SIZE
    path = new_wal(tmp_path / "w", capacity)
    acks = append_records(path, 10, size=3000, iodepth=1, flush_each=True)  # one 4 KiB block each
    trim_wal(path, acks[-1][0])
    more = append_records(path, 3, size=10000, iodepth=1, flush_each=True)  # 12 KiB blocks
    assert more[0][0] == 10 * 4096
    # 4 KiB left in lap 0 (52 KiB..56 KiB): too small for a 12 KiB record, padded
    assert more[1][0] == ring
    raw = peek(path, physical(path, 10 * 4096 + 12 * KiB), rec.SIZE)
    head = rec.RecordHeader.decode(raw, expected_offset=10 * 4096 + 12 * KiB)
    assert head.is_padding and head.end == ring
    entries, result = scan_file(path)
    assert [e.offset for e in entries] == [o for o, _ in more] and not result.findings


def test_full_wal_refuses_and_keeps_acknowledged_records(tmp_path):
    path = new_wal(tmp_path / "w", 64 * KiB)
    acks = []
    opened = open_writer(path, on_ack=lambda o, t: acks.append((o, t)))
    writer = opened.writer
    with pytest.raises(FullError) as info:
        for i in range(1000):
            writer.append(StreamRecordBatch(0, 0, i, 1, payload_for(0, i, 2000)).encode(), i)
    assert info.value.exit_code == 7
    writer.close()
    assert 0 < len(acks) < 1000
    entries, result = scan_file(path)
    check_records(entries, acks, size=2000)


def test_record_larger_than_the_ring_is_refused(tmp_path):
    path = new_wal(tmp_path / "w", 64 * KiB)
    writer = open_writer(path).writer
    with pytest.raises(UsageError):
        writer.append(bytes(64 * KiB))
    writer.close()


def test_sliding_window_grows_durably_before_a_block_passes_it(tmp_path, monkeypatch):
    """Six 204 KiB blocks in flight pass the 1 MiB window (five fit in it). The device's completions
    are held back until the sixth block's write completed (or 5 s passed), so when the sixth block
    was submitted the five before it were still in flight: the window must have grown first,
    whatever the disk's speed.

    Holding only until the fifth completion (as this test did) left a race: once the fifth block's
    write completed before the appender submitted the sixth block, the five were released, the sixth
    fitted the 1 MiB window and it never grew (2 of 30 runs; 16 of 100 in a tighter loop)."""
    import threading

    from walctl.wal.layout import align_up
    from walctl.wal.writer import WalWriter

    block_bytes = align_up(rec.SIZE + len(StreamRecordBatch(0, 0, 0, 1, bytes(200 * KiB)).encode()))
    assert block_bytes == 204 * KiB
    passing = 1 * MiB // block_bytes + 1  # blocks in flight that span more than the window: 6
    real, held, lock = WalWriter._completed, [], threading.Lock()

    def release() -> None:
        with lock:
            if held[:1] == [None]:  # released already (the timer fired after the last completion)
                return
            pending, held[:] = list(held), [None]
        for args in pending:
            real(*args)

    def completed(self, *args, **kwargs):
        with lock:
            if not held or held[0] is not None:
                held.append((self, *args))
                if len(held) < passing:
                    return
            else:
                return real(self, *args, **kwargs)
        release()

    timer = threading.Timer(5.0, release)
    timer.start()
    monkeypatch.setattr(WalWriter, "_completed", completed)
    path = new_wal(tmp_path / "w", 64 * MiB)
    assert header_of(path).header.sliding_window_max_length == 1 * MiB
    try:
        acks = append_records(path, 40, size=200 * KiB, iodepth=8)
    finally:
        timer.cancel()
    header = header_of(path).header
    assert header.sliding_window_max_length > 1 * MiB
    assert (header.sliding_window_max_length - 1 * MiB) % (4 * MiB) == 0
    entries, _ = scan_file(path)
    check_records(entries, acks, size=200 * KiB)


def test_second_writer_is_refused(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    first = open_writer(path)
    try:
        with pytest.raises(RefusedError):
            open_writer(path)
    finally:
        first.writer.close()


def test_init_refuses_existing_wal_without_force_and_wipes_with_it(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    append_records(path, 50)
    with pytest.raises(RefusedError):
        init_wal(path, 1 * MiB)
    with pytest.raises(RefusedError):  # 50 records not yet uploaded
        init_wal(path, 1 * MiB, force=True)
    init_wal(path, 1 * MiB, force=True, discard_unuploaded=True)
    entries, result = scan_file(path)
    # the old records had valid CRCs and matching offsets: only the wipe keeps them out
    assert entries == [] and result.findings == []


def test_init_refuses_capacity_larger_than_device(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(bytes(64 * KiB))
    with pytest.raises(UsageError) as info:
        init_wal(str(path), 1 * MiB)
    assert "65536" in str(info.value) and "1048576" in str(info.value)


def test_trim_rules(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    acks = append_records(path, 10)
    with pytest.raises(UsageError) as info:
        trim_wal(path, acks[3][0] + 1)  # read at the offset: no record header says it starts there
    assert "no live record starts at offset" in info.value.what
    with pytest.raises(UsageError) as info:
        trim_wal(path, acks[3][0] + 1, scan=True)
    assert "nearest" in (info.value.hint or "")
    result = trim_wal(path, acks[2][0])  # clean log with a checkpoint: no scan, no counts
    assert (result.scanned, result.records_deleted, result.records_left) == (False, None, None)
    result = trim_wal(path, acks[3][0], scan=True)
    assert result.records_deleted == 1 and result.records_left == 6  # 0..2 were trimmed before
    with pytest.raises(UsageError):
        trim_wal(path, acks[1][0])  # backwards
    entries, _ = scan_file(path)
    check_records(entries, acks[4:])
    assert header_of(path).header.clean


def test_stream_offsets_continue_across_opens_and_trims(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    first = append_records(path, 5)
    trim_wal(path, first[-1][0])  # everything trimmed: the trimmed record still tells the stream end
    second = append_records(path, 5)
    assert [b for _, b in second] == [5, 6, 7, 8, 9]


def test_not_a_wal(tmp_path):
    path = tmp_path / "zeros"
    path.write_bytes(bytes(64 * KiB))
    with pytest.raises(NotFoundError):
        open_writer(str(path))


# -- crash damage, classification and sealing ------------------------------------------

def crashed_log(tmp_path, count=40, size=3000, capacity=4 * MiB):
    """A log whose writer 'crashed' after its blocks were durable: header ungraceful."""
    path = new_wal(tmp_path / "w", capacity)
    acks = append_records(path, count, size=size, iodepth=1, flush_each=True, clean=False)
    assert header_of(path).header.shutdown_type == SHUTDOWN_UNGRACEFUL
    return path, acks


def zero_block(path, offset):
    poke(path, physical(path, offset), bytes(4096))


def flip(path, offset, delta=0):
    pos = physical(path, offset) + delta
    poke(path, pos, bytes([peek(path, pos, 1)[0] ^ 0x01]))


# (name, damage(path, acks) -> None, expected surviving indexes(acks), expected kinds, crash explains it)
DAMAGE_TABLE = [
    ("hole in the window", lambda p, a: zero_block(p, a[30][0]),
     lambda a: a[:30] + a[31:], ["hole"], True),
    ("torn tail: last body damaged", lambda p, a: flip(p, a[-1][0], rec.SIZE + 40),
     lambda a: a[:-1], ["torn_tail"], True),
    ("torn tail: last block never written", lambda p, a: zero_block(p, a[-1][0]),
     lambda a: a[:-1], [], True),
    ("two holes", lambda p, a: (zero_block(p, a[25][0]), flip(p, a[33][0], 3)),
     lambda a: a[:25] + a[26:33] + a[34:], ["hole", "hole"], True),
    ("stale record of an earlier lap", lambda p, a: _make_stale(p, a[35][0]),
     lambda a: a[:35] + a[36:], ["hole"], True),
]


def _make_stale(path, offset):
    """Rewrite the record at ``offset`` as if written one lap earlier: valid CRCs, wrong bodyOffset."""
    capacity = header_of(path).header.capacity
    ring = capacity - HEADERS_SIZE
    head = rec.RecordHeader.decode(peek(path, physical(path, offset), rec.SIZE))
    stale = rec.RecordHeader(head.magic, head.body_length, head.body_offset - ring, head.body_crc)
    poke(path, physical(path, offset), stale.encode())


@pytest.mark.parametrize("name,damage,survivors,kinds,explained", DAMAGE_TABLE, ids=[d[0] for d in DAMAGE_TABLE])
def test_crash_damage_table(tmp_path, name, damage, survivors, kinds, explained):
    path, acks = crashed_log(tmp_path)
    damage(path, acks)
    entries, result = scan_file(path)
    check_records(entries, survivors(acks), size=3000)
    assert [f.kind for f in result.findings] == kinds
    assert all(f.explained == explained for f in result.findings)
    for f in result.findings:
        assert f.ring.physical(f.offset) == physical(path, f.offset)

    # the next writer seals the damage, keeps every valid record and continues after them
    more = append_records(path, 3, size=3000)
    entries, result = scan_file(path)
    assert result.findings == []
    check_records(entries, survivors(acks) + more, size=3000)


@pytest.mark.parametrize("name,damage,survivors,kinds,explained", DAMAGE_TABLE[:2] + DAMAGE_TABLE[3:],
                         ids=[d[0] for d in DAMAGE_TABLE[:2] + DAMAGE_TABLE[3:]])
def test_same_damage_in_a_clean_log_is_corruption(tmp_path, name, damage, survivors, kinds, explained):
    path = new_wal(tmp_path / "w", 4 * MiB)
    acks = append_records(path, 40, size=3000, iodepth=1, flush_each=True)
    damage(path, acks)
    entries, result = scan_file(path)
    assert result.corrupt, "damage in a cleanly closed log must be reported as corruption"
    # a writer will not write over evidence
    with pytest.raises(CorruptionError):
        append_records(path, 1)


def test_damage_before_the_last_window_is_corruption_even_after_a_crash(tmp_path):
    # 8 MiB of log, window 1 MiB: a hole near the start cannot be a crash tail
    path, acks = crashed_log(tmp_path, count=600, size=12000, capacity=16 * MiB)
    assert header_of(path).header.sliding_window_max_length == 1 * MiB
    zero_block(path, acks[10][0])
    entries, result = scan_file(path)
    kinds = [f.kind for f in result.findings]
    assert reader.BEYOND_WINDOW in kinds
    assert result.corrupt
    # the scan shows what lies within one window past the first damage, and no further
    hole = acks[10][0]
    check_records(entries, acks[:10] + [a for a in acks[11:] if a[0] < hole + 1 * MiB], size=12000)
    assert len(entries) < len(acks) - 100
    with pytest.raises(CorruptionError):
        append_records(path, 1)


def test_bad_header_slot_uses_the_other(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    acks = append_records(path, 5)
    state = header_of(path)
    current = state.current
    poke(path, current * 4096 + 20, b"\xff")  # damage the newest slot
    state2 = header_of(path)
    assert state2.current == 1 - current
    assert [s.index for s in state2.bad_slots] == [current]
    # the older slot is the open header (ungraceful): the scan still finds everything
    entries, result = scan_file(path)
    check_records(entries, acks)
    # the next writer overwrites the damaged slot first (it is "the other one")
    append_records(path, 1)
    assert header_of(path).bad_slots == []


def test_both_header_slots_bad_is_not_found(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    poke(path, 0, bytes(8192))
    with pytest.raises(NotFoundError):
        header_of(path)


def test_end_before_clean_next_offset_is_corruption(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    acks = append_records(path, 10, iodepth=1, flush_each=True)
    zero_block(path, acks[-1][0])  # the clean header says the log goes further
    _, result = scan_file(path)
    assert [f.kind for f in result.corrupt] == [reader.END_MISMATCH]


@pytest.mark.parametrize("clean", [True, False], ids=["clean log", "crashed log"])
def test_damaged_header_inside_a_block(tmp_path, clean):
    """A record header that is not first in its block: non-zero bytes where padding could be."""
    path = new_wal(tmp_path / "w", 4 * MiB)
    acks = []
    opened = open_writer(path, iodepth=1, on_ack=lambda o, t: acks.append((o, t)))
    writer = opened.writer
    for i in range(400):  # blocks of 20 records
        writer.append(StreamRecordBatch(0, 0, i, 1, payload_for(0, i, 100)).encode(), i)
        if i % 20 == 19:
            writer.submit_open_block()
    writer.drain()
    writer.close() if clean else writer.abort()
    starts = [o for o, _ in acks if o % 4096 == 0]
    target = [o for o, _ in acks if o % 4096 and o > starts[3]][0]  # second record of a middle block
    flip(path, target, 2)
    resume = min(s for s in starts if s > target)  # the scanner resyncs at the next block start
    entries, result = scan_file(path)
    survivors = [a for a in acks if not target <= a[0] < resume]
    assert len(survivors) < len(acks) and survivors[-1] == acks[-1]
    check_records(entries, survivors)
    assert result.findings and result.findings[0].offset == target
    if clean:
        assert result.corrupt, "damage in a cleanly closed log is corruption"
    else:
        assert not result.corrupt
        more = append_records(path, 2)  # seals the damaged block
        entries, result = scan_file(path)
        assert result.findings == []
        check_records(entries, survivors + more)


# Ranges crash repair overwrites in each damage case, and how many of them held non-zero bytes
# (where evidence of zeros would be wrong; a zeroed block's evidence is rightly zeros).
EVIDENCE_RANGES = {"hole in the window": (1, 0), "torn tail: last body damaged": (1, 1),
                   "torn tail: last block never written": (0, 0), "two holes": (2, 1),
                   "stale record of an earlier lap": (1, 1)}


@pytest.mark.parametrize("name,damage,survivors,kinds,explained", DAMAGE_TABLE, ids=[d[0] for d in DAMAGE_TABLE])
def test_crash_repair_keeps_the_bytes_it_overwrites(tmp_path, name, damage, survivors, kinds, explained):
    """Every byte crash repair overwrites is in the side file next to the WAL, as it was before,
    and the file is, byte for byte, the JSON of those bytes (issue 32: every damage case checks it)."""
    import glob
    import json
    import os
    import time

    path, acks = crashed_log(tmp_path)
    damage(path, acks)
    crashed = header_of(path).header
    before = peek(path, 0, crashed.capacity)
    started = time.time_ns()
    opened = open_writer(path)
    opened.writer.close()
    after = peek(path, 0, len(before))
    changed = [i for i in range(HEADERS_SIZE, len(before)) if before[i] != after[i]]
    files = glob.glob(path + ".repair-*")
    ranges, nonzero = EVIDENCE_RANGES[name]
    if not ranges:
        assert (opened.repair is None or not opened.repair.evidence) and files == [] and changed == []
        return
    repair = opened.repair
    assert files == [repair.evidence_file] == [f"{path}.repair-{repair.repaired_at_ns}.broken.json"]
    assert started <= repair.repaired_at_ns <= time.time_ns()
    assert any(path in w and "kept in" in w for w in opened.warnings)
    assert len(repair.evidence) == ranges
    covered = set()
    for o in repair.evidence:
        assert o.physical_offset == physical(path, o.offset)
        assert o.data == before[o.physical_offset:o.physical_offset + len(o.data)]
        covered.update(range(o.physical_offset, o.physical_offset + len(o.data)))
    assert changed and set(changed) <= covered, "a byte was overwritten that the evidence does not keep"
    assert sum(1 for o in repair.evidence if any(o.data)) == nonzero
    expected = {"wal": path, "type": "crash_repair", "repaired_at_ns": repair.repaired_at_ns,
                "crashed_header_timestamp_ns": crashed.last_write_timestamp_ns, "evidence_file": files[0],
                "overwritten": [{"offset": o.offset, "physical_offset": physical(path, o.offset),
                                 "length_bytes": len(o.data),
                                 "hex": before[physical(path, o.offset):physical(path, o.offset) + len(o.data)].hex()}
                                for o in repair.evidence]}
    with open(files[0], "rb") as f:
        assert f.read() == (json.dumps(expected, indent=1) + "\n").encode()
    assert not os.path.exists(files[0] + ".partial")
    kept = bytearray(after)
    for item in expected["overwritten"]:
        data = bytes.fromhex(item["hex"])
        kept[item["physical_offset"]:item["physical_offset"] + len(data)] = data
    assert bytes(kept[HEADERS_SIZE:]) == before[HEADERS_SIZE:]  # every overwritten byte is retrievable


def test_crash_repair_of_a_block_device_keeps_its_bytes_in_the_evidence_dir(tmp_path, monkeypatch):
    """No side file can sit next to /dev/...: the evidence goes to WALCTL_REPAIR_EVIDENCE_DIR, or
    stays in the result (hex) with a warning saying so."""
    from walctl.wal import crash_repair

    assert crash_repair.evidence_path("/dev/loop7", 5, True) is None
    monkeypatch.setenv(crash_repair.EVIDENCE_DIR_ENV, str(tmp_path))
    assert crash_repair.evidence_path("/dev/loop7", 5, True) == str(tmp_path / "loop7.repair-5.broken.json")
    assert crash_repair.evidence_path(str(tmp_path / "w.img"), 5, False) == str(tmp_path / "w.img.repair-5.broken.json")
    monkeypatch.delenv(crash_repair.EVIDENCE_DIR_ENV)
    warnings: list[str] = []
    repair = crash_repair.RepairResult(5, 4, [crash_repair.Overwritten(4096, 12288, b"\x01\x02")])
    assert crash_repair._keep_evidence(repair, "/dev/loop7", True, warnings) is None
    assert crash_repair.EVIDENCE_DIR_ENV in warnings[0]
    assert repair.to_json()["overwritten"] == [{"offset": 4096, "physical_offset": 12288, "length_bytes": 2,
                                                "hex": "0102"}]
