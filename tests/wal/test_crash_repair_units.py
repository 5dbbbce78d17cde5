"""Crash repair's patches computed from a scan's report (issue 32), byte for byte: zeros up to the
4 KiB boundary, one padding record per lap carrying the seal descriptor where it has room, torn
records past the log's end zeroed to their block's end; the evidence file and its warnings."""

from __future__ import annotations

import json
import os

import pytest

from walctl.errors import IOFailure
from walctl.format import record as rec
from walctl.format.header import WalHeader
from walctl.format.seal import SealDescriptor
from walctl.wal import crash_repair as cr
from walctl.wal.findings import Finding, Kind
from walctl.wal.gaps import StreamGap
from walctl.wal.layout import Ring
from walctl.wal.ringread import ScanResult

CAPACITY = 64 * 1024
RING = Ring(CAPACITY)
SIZE = RING.size  # 56 KiB
HEADER = WalHeader(CAPACITY, sliding_window_max_length=8192, last_write_timestamp_ns=77)
NOW = 1_000


def _report(holes=(), torn=(), unaligned=(), end=0, gaps=()) -> ScanResult:
    r = ScanResult(HEADER, RING)
    r.findings = [Finding(Kind.HOLE, s, RING, "r", end_offset=e, explained=True) for s, e in holes]
    r.torn_offsets, r.unaligned_damage, r.end_offset = list(torn), list(unaligned), end
    r.streams.gaps.extend(gaps)
    return r


def _seal(start, end, streams=()) -> bytes:
    return SealDescriptor(start, end, NOW, 77, tuple(streams)).encode()


def test_an_aligned_hole_becomes_one_padding_record_carrying_its_seal():
    patches = cr._patches(RING, HEADER, _report(holes=[(4096, 12288)]), NOW)
    assert patches == [(4096, rec.RecordHeader.padding(4096, 8192).encode() + _seal(4096, 12288))]


def test_an_unaligned_hole_is_zeroed_to_the_boundary_then_padded():
    patches = cr._patches(RING, HEADER, _report(holes=[(100, 9000)]), NOW)
    assert patches == [(100, bytes(3996)),
                       (4096, rec.RecordHeader.padding(4096, 9000 - 4096).encode() + _seal(100, 9000))]
    # a hole that ends before the boundary: zeros only
    assert cr._patches(RING, HEADER, _report(holes=[(100, 200)]), NOW) == [(100, bytes(100))]


def test_a_hole_across_the_lap_end_gets_a_padding_record_in_each_lap():
    start, end = SIZE - 8192, SIZE + 4096
    patches = cr._patches(RING, HEADER, _report(holes=[(start, end)]), NOW)
    seal = _seal(start, end)
    assert patches == [(start, rec.RecordHeader.padding(start, 8192).encode() + seal),
                       (SIZE, rec.RecordHeader.padding(SIZE, 4096).encode() + seal)]


def test_the_seal_goes_only_where_the_padding_has_room_for_it():
    seal = _seal(4096, 4096 + 100)
    room = rec.SIZE + len(seal)
    for length, carries in ((room, True), (room - 1, False)):
        patches = cr._patches(RING, HEADER, _report(holes=[(4096, 4096 + length)]), NOW)
        head = rec.RecordHeader.padding(4096, length).encode()
        assert patches == [(4096, head + (_seal(4096, 4096 + length) if carries else b""))]


def test_the_seal_lists_the_stream_gaps_this_hole_explains():
    gaps = [StreamGap(1, 5, 9, 0, 20480), StreamGap(2, 0, 3, None, 20480), StreamGap(3, 7, 8, 12288, 20480)]
    patches = cr._patches(RING, HEADER, _report(holes=[(4096, 8192), (12288, 16384)], gaps=gaps), NOW)
    assert patches[0] == (4096, rec.RecordHeader.padding(4096, 4096).encode() + _seal(4096, 8192, [(1, 5, 9),
                                                                                                   (2, 0, 3)]))
    assert patches[1][1].endswith(_seal(12288, 16384))  # gap 3 starts at this hole: not lost in it


def test_torn_records_past_the_end_are_zeroed_to_their_block_s_end():
    patches = cr._patches(RING, HEADER, _report(torn=[8192, 5000, 100], unaligned=[20000], end=4096), NOW)
    assert patches == [(5000, bytes(3192)), (8192, bytes(4096)), (20000, bytes(480))]
    assert cr._patches(RING, HEADER, _report(torn=[4095], end=4096), NOW) == []
    assert cr._patches(RING, HEADER, _report(torn=[4096], end=4096), NOW) == [(4096, bytes(4096))]
    # a hole's patch at the same offset wins over a torn record's zeros
    patches = cr._patches(RING, HEADER, _report(holes=[(8192, 12288)], torn=[8192], end=0), NOW)
    assert patches == [(8192, rec.RecordHeader.padding(8192, 4096).encode() + _seal(8192, 12288))]


def test_a_hole_without_an_end_is_not_patched():
    r = _report()
    r.findings = [Finding(Kind.HOLE, 4096, RING, "r", explained=True), Finding(Kind.TORN_TAIL, 8192, RING, "t",
                                                                              end_offset=9000)]
    assert cr._patches(RING, HEADER, r, NOW) == []


def test_the_result_s_json():
    o = cr.Overwritten(5, 8197, b"\x00\xff")
    assert o.to_json() == {"offset": 5, "physical_offset": 8197, "length_bytes": 2, "hex": "00ff"}
    r = cr.RepairResult(9, 8, [o, o], "f")
    assert r.ranges == 2 and cr.RepairResult(1, 2).ranges == 0
    assert r.to_json() == {"type": "crash_repair", "repaired_at_ns": 9, "crashed_header_timestamp_ns": 8,
                           "evidence_file": "f", "overwritten": [o.to_json(), o.to_json()]}


def test_evidence_paths_by_kind_and_device():
    assert cr.evidence_path(None, 5, False) is None
    assert cr.evidence_path("/x/w.img", 5, False, "salvage") == "/x/w.img.salvage-5.broken.json"
    assert cr.EVIDENCE_DIR_ENV == "WALCTL_REPAIR_EVIDENCE_DIR"


def test_the_evidence_file_and_the_warnings(tmp_path, monkeypatch):
    repair = cr.RepairResult(5, 4, [cr.Overwritten(4096, 12288, b"\x01\x02"), cr.Overwritten(9000, 17192, b"\x03")])
    path = str(tmp_path / "w.img")
    warnings: list[str] = []
    target = cr._keep_evidence(repair, path, False, warnings)
    assert target == path + ".repair-5.broken.json"
    assert warnings == [f"crash repair overwrote 3 bytes in 2 ranges; the bytes they held are kept in {target}"]
    with open(target, encoding="utf-8") as f:
        text = f.read()
    assert text == json.dumps({"wal": path, **repair.to_json(), "evidence_file": target}, indent=1) + "\n"
    assert repair.evidence_file is None  # the result's own field is set by the caller
    assert cr._keep_evidence(repair, path, False, None) == target  # no warnings list: none
    warnings.clear()
    assert cr._keep_evidence(repair, "/dev/loop9", True, warnings) is None
    assert warnings == ["crash repair overwrote 3 bytes in 2 ranges; they are kept only in this run's result: "
                        "set WALCTL_REPAIR_EVIDENCE_DIR to keep them in a file"]
    assert cr._keep_evidence(repair, None, False, None) is None
    monkeypatch.setenv(cr.EVIDENCE_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(IOFailure) as info:
        cr._keep_evidence(repair, "/dev/loop9", True, None)
    err = info.value
    assert str(err) == "cannot keep the bytes crash repair would overwrite: No such file or directory"
    assert err.where == str(tmp_path / "missing" / "loop9.repair-5.broken.json")
    assert err.hint == "nothing was repaired; free space there (or set WALCTL_REPAIR_EVIDENCE_DIR)"
    assert not os.path.exists(target + ".partial")


def test_the_original_bytes_are_exactly_the_patched_range_even_in_the_last_block():
    from walctl.device import MemoryDevice

    dev = MemoryDevice(CAPACITY)
    dev.data[:] = bytes(i % 249 for i in range(CAPACITY))
    last = SIZE - 100  # the ring's (and the device's) last block
    for offset, length in ((5000, 30), (last, 100), (SIZE + 4096, 4096)):
        o = cr._original(dev, RING, offset, length)
        phys = RING.physical(offset)
        assert (o.offset, o.physical_offset, o.data) == (offset, phys, bytes(dev.data[phys:phys + length]))
    cr._patch(dev, RING, last, b"\x01" * 100)
    assert dev.data[-100:] == b"\x01" * 100 and dev.data[-101] == (CAPACITY - 101) % 249
    cr._patch(dev, RING, 5000, b"\x02\x03")
    phys = RING.physical(5000)
    assert dev.data[phys - 1:phys + 3] == bytes([(phys - 1) % 249, 2, 3, (phys + 2) % 249])


def _log(tmp_path, *, bad_batch=False):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers
    from walctl.wal.reader import scan_report
    from walctl.wal.lifecycle import open_writer

    from walhelpers import append_records, new_wal

    path = new_wal(tmp_path / "w.img", 256 * 1024)
    acks = append_records(path, 4, size=200, iodepth=1, flush_each=True)
    if bad_batch:
        w = open_writer(path, scan=True).writer
        w.append(b"not a batch at all")
        w.close()
    dev = open_device(path, writable=False)
    header = read_headers(dev).header
    return path, acks, dev, header, scan_report(dev, header, probe=False)


def test_a_clean_repaired_log_passes_the_check_even_with_a_bad_batch(tmp_path):
    _, _, dev, header, result = _log(tmp_path, bad_batch=True)
    try:
        assert [f.kind for f in result.findings] == [Kind.BAD_BATCH]
        cr._check_repaired(dev, header, result)
    finally:
        dev.close()


def test_a_repaired_log_that_does_not_scan_the_same_is_refused(tmp_path):
    from walctl.errors import CorruptionError

    path, acks, dev, header, result = _log(tmp_path)
    try:
        for change in ({"end_offset": result.end_offset + 1}, {"records": result.records - 1}):
            other = ScanResult(header, RING)
            other.__dict__.update({**result.__dict__, **change})
            with pytest.raises(CorruptionError) as info:
                cr._check_repaired(dev, header, other)
            err = info.value
            assert str(err) == "crash repair did not leave a clean log" and err.offset == other.end_offset
            assert err.hint == "nothing new was written; inspect with 'walctl recover'"
    finally:
        dev.close()
    from walhelpers import physical, poke
    poke(path, physical(path, acks[1][0]), bytes(rec.SIZE))  # the second record's header: zeros
    dev, header = _reopen(path)
    try:
        with pytest.raises(CorruptionError) as info:
            cr._check_repaired(dev, header, result)
        assert str(info.value).startswith(f"crash repair did not leave a clean log (hole at offset {acks[1][0]}: ")
    finally:
        dev.close()


def _reopen(path):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    dev = open_device(path, writable=False)
    return dev, read_headers(dev).header


def test_zeros_start_at_any_unaligned_offset_and_end_at_the_next_boundary():
    assert cr._patches(RING, HEADER, _report(holes=[(4097, 4200)]), NOW) == [(4097, bytes(103))]
    assert cr._patches(RING, HEADER, _report(torn=[4095], end=0), NOW) == [(4095, bytes(1))]


class _Dev:
    """A device with no is_block_device attribute (a file, as far as repair can tell)."""

    def __init__(self, size):
        from walctl.device import MemoryDevice
        self.mem = MemoryDevice(size)

    def pread_into(self, position, buf):
        return self.mem.pread_into(position, buf)

    def pwrite(self, position, buf):
        return self.mem.pwrite(position, buf)


@pytest.mark.parametrize("block", [True, False, None])
def test_repair_keeps_evidence_by_the_device_s_kind(tmp_path, monkeypatch, block):
    from walctl.device import MemoryDevice

    monkeypatch.delenv(cr.EVIDENCE_DIR_ENV, raising=False)
    monkeypatch.setattr(cr, "_patches", lambda ring, header, result, now: [(4096, b"\x01\x02")])
    monkeypatch.setattr(cr, "_check_repaired", lambda dev, header, result: None)
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(cr.os, "replace", lambda a, b: (replaced.append((a, b)), real_replace(a, b))[1])
    if block is None:
        dev = _Dev(CAPACITY)
        data = dev.mem.data
    else:
        dev = MemoryDevice(CAPACITY)
        dev.is_block_device = block
        data = dev.data
    warnings: list[str] = []
    path = str(tmp_path / "w.img")
    repair = cr.repair_crash_damage(dev, HEADER, _report(), path=path, warnings=warnings)
    assert data[RING.physical(4096):RING.physical(4096) + 2] == b"\x01\x02"
    assert repair.evidence == [cr.Overwritten(4096, RING.physical(4096), bytes(2))]
    assert repair.crashed_header_timestamp_ns == 77
    if block:
        assert repair.evidence_file is None and "kept only in this run's result" in warnings[0]
        assert replaced == []
    else:
        target = f"{path}.repair-{repair.repaired_at_ns}.broken.json"
        assert repair.evidence_file == target and warnings[0].endswith(f"kept in {target}")
        assert replaced == [(target + ".partial", target)]
