"""wal/automq_scan.py's own code (issue 32): AutoMQ V0 and V1 recovery rules on small AutoMQ
logs built in memory (records with AutoMQ's masked CRC-32, blocks padded with stale bytes, V1's
lap-end padding record): every event and finding, where each scan stops and why, the trim
point's rules, the window and the probes after the end."""

from __future__ import annotations

import random

import pytest

from walctl.device import MemoryDevice
from walctl.format import record as rec
from walctl.format.crc import automq_crc
from walctl.format.header import WalHeader
from walctl.wal import automq_scan as am
from walctl.wal.findings import (BAD_BATCH, BAD_PADDING, BEYOND_WINDOW, DISCARDED, HOLE, TORN_TAIL, TRIM_RECORD,
                                 Cause)
from walctl.wal.layout import Ring
from walctl.wal.ringread import Entry, ScanResult

from muthelpers import KiB, body

BS = 4096
WINDOW = 16 * KiB


def amq_record(offset: int, data: bytes, magic: int = rec.DATA_MAGIC, length: int | None = None) -> bytes:
    n = len(data) if length is None else length
    head = rec.STRUCT.pack(magic, n, offset + rec.SIZE, automq_crc(data) if magic == rec.DATA_MAGIC else 0, 0)[:20]
    return head + automq_crc(head).to_bytes(4, "big") + data


class Amq:
    """An AutoMQ log in memory: stale random bytes everywhere, then blocks of records."""

    def __init__(self, version: int, capacity: int = 64 * KiB, bs: int = BS, seed: int = 3):
        self.version, self.bs = version, bs
        self.ring = Ring(capacity, bs)
        self.rng = random.Random(seed)
        self.dev = MemoryDevice(capacity)
        self.dev.data[:] = self.rng.randbytes(capacity)
        self.next = 0

    def raw(self, offset: int, data: bytes) -> None:
        p = self.ring.physical(offset)
        self.dev.data[p:p + len(data)] = data

    def block(self, bodies, start=None) -> list[int]:
        o = self.next if start is None else start
        out = []
        for b in bodies:
            out.append(o)
            r = amq_record(o, b)
            self.raw(o, r)
            o += len(r)
        self.next = -(-o // self.bs) * self.bs
        return out

    def header(self, *, trim=-1, clean=True, window=WINDOW) -> WalHeader:
        return WalHeader(self.ring.capacity, trim_offset=trim, sliding_window_max_length=window,
                         shutdown_type=0 if clean else 1, flavour=f"automq-v{self.version}", block_size=self.bs)


def _scan(img, header, *, probe=True, keep=True):
    res = ScanResult(header, img.ring)
    scan = am.AutomqScan(img.dev, header, res, probe=probe, keep_offsets=keep)
    out = []
    for e in scan.events(seek=12345, bulk=True):
        if isinstance(e, Entry):
            out.append(("entry", e.offset))
        else:
            out.append(("finding", e.kind, e.offset, e.end_offset, e.explained, e.reason))
    return out, res


def _log(version, blocks=3):
    img = Amq(version)
    offs = []
    for b in range(blocks):
        offs += img.block([body(5, 3 * b + i) for i in range(3)])
    return img, offs


# -- padding_length ---------------------------------------------------------------------------------------

def test_padding_length_follows_a_padding_record_inside_its_lap():
    ring = Ring(64 * KiB)
    pad = rec.STRUCT.pack(rec.PADDING_MAGIC, 1000, 0, 0, 0)
    assert am.padding_length(pad, 0, ring) == 1000
    assert am.padding_length(pad[:23], 0, ring) is None
    assert am.padding_length(rec.STRUCT.pack(rec.DATA_MAGIC, 1000, 0, 0, 0), 0, ring) is None
    assert am.padding_length(rec.STRUCT.pack(rec.PADDING_MAGIC, 0x7FFFFFFF, 0, 0, 0), 0, Ring(1 << 32)) == 0x7FFFFFFF
    assert am.padding_length(rec.STRUCT.pack(rec.PADDING_MAGIC, 0x80000000, 0, 0, 0), 0, Ring(1 << 33)) is None
    last = ring.size - 1024
    assert am.padding_length(rec.STRUCT.pack(rec.PADDING_MAGIC, 1000, 0, 0, 0), last, ring) == 1000
    assert am.padding_length(rec.STRUCT.pack(rec.PADDING_MAGIC, 1001, 0, 0, 0), last, ring) is None


# -- intact logs -------------------------------------------------------------------------------------------

def test_a_v1_log_stops_at_its_first_invalid_block():
    img, offs = _log(1)
    out, res = _scan(img, img.header())
    assert out == [("entry", o) for o in offs]
    assert res.stopped_by == am.V1_STOP and res.records == 9 and res.end_offset == offs[-1] + 107
    assert res.start_offset == 0 and res.findings == [] and res.record_offsets == offs
    assert res.bytes_read > 0


def test_a_v0_log_reads_one_window_past_its_first_invalid_block():
    img, offs = _log(0)
    out, res = _scan(img, img.header())
    assert out == [("entry", o) for o in offs]
    assert res.stopped_by == "one sliding window past the first invalid block (AutoMQ V0 recovery)"
    assert res.findings == [] and res.end_offset == offs[-1] + 107


def test_a_v0_log_with_a_long_window_reads_one_ring():
    img, offs = _log(0)
    out, res = _scan(img, img.header(window=1 << 20))
    assert out == [("entry", o) for o in offs] and res.stopped_by == "one ring past the trim point"


def test_v0_reads_on_past_the_window_until_a_little_past_its_last_record(monkeypatch):
    img, offs = _log(0, blocks=1)
    img.block([body(5, 10)], start=8192)  # after an invalid block at 4096
    monkeypatch.setattr(am, "AUTOMQ_EXTRA_SCAN_BYTES", 20 * KiB)
    out, res = _scan(img, img.header(window=8192, clean=False), probe=False)
    assert out[-1] == ("entry", 8192) and out[3][:3] == ("finding", HOLE, 4096)
    out, res = _scan(img, img.header(window=4096, clean=False), probe=False)
    assert out == [("entry", o) for o in offs]  # one window past 4096, and past the last record: stop
    scan = am.AutomqScan(img.dev, img.header(window=4096), ScanResult(img.header(), img.ring), probe=False,
                         keep_offsets=False)
    scan.first_bad, scan.last_valid = 4096, 8192
    for o, passed in [(8191, False), (8192, False), (12287, False), (12288, True)]:
        scan.o = o  # one window past the invalid block, and min(window, 4 MiB) past the last valid record
        assert scan._v0_window_passed() is passed, o
    scan.last_valid = None
    for o, passed in [(8191, False), (8192, True)]:
        scan.o = o
        assert scan._v0_window_passed() is passed, o
    scan.window, scan.last_valid = 100 * KiB, 200 * KiB
    for o, passed in [(220 * KiB - 1, False), (220 * KiB, True)]:  # (the extra bytes, 20 KiB here, are less)
        scan.o = o
        assert scan._v0_window_passed() is passed, o
    scan.first_bad = None
    assert scan._v0_window_passed() is False
    scan.first_bad, scan.v1 = 4096, True
    assert scan._v0_window_passed() is False


# -- stale bytes, holes, torn records ----------------------------------------------------------------------

def test_stale_bytes_after_a_block_s_last_record_are_skipped():
    img, offs = _log(1)
    out, res = _scan(img, img.header())
    assert [e for e in out if e[0] == "finding"] == []


def test_a_v0_hole_is_explained_in_a_crashed_log():
    img, offs = _log(0)
    img.raw(4096, bytes(24))
    out, res = _scan(img, img.header(clean=False), probe=False)
    f = res.findings[0]
    assert out == [("entry", o) for o in offs[:3]] + [("finding", HOLE, 4096, 8192, True, f.reason)] \
        + [("entry", o) for o in offs[6:]]
    assert f.bytes_cause == Cause.ZERO_FILL
    out, res = _scan(img, img.header(clean=True), probe=False)
    assert out[3][:5] == ("finding", HOLE, 4096, 8192, False)


def test_a_v1_invalid_block_ends_the_log_and_the_blocks_after_it_are_discarded():
    img, offs = _log(1)
    img.raw(4096, bytes(24))
    out, res = _scan(img, img.header(clean=False))
    reason = res.findings[0].reason
    assert out == [("entry", o) for o in offs[:3]] + [
        ("finding", DISCARDED, 4096, 8192, True, reason)]
    assert reason.endswith("; valid blocks follow at offset 8192: AutoMQ V1 recovers only the continuous log "
                           "and discards them (not shown)")
    assert res.findings[0].bytes_cause == Cause.ZERO_FILL and res.stopped_by == am.V1_STOP
    out, res = _scan(img, img.header(clean=True))
    assert out[-1][:5] == ("finding", DISCARDED, 4096, 8192, False)
    out, res = _scan(img, img.header(clean=True), probe=False)
    assert out == [("entry", o) for o in offs[:3]]


def test_a_v1_log_with_a_record_beyond_the_window_after_its_end():
    img, offs = _log(1, blocks=1)
    img.raw(4096, bytes(24))
    far = 4096 + WINDOW + 4096
    img.block([body(5, 50)], start=far)
    out, res = _scan(img, img.header(clean=False))
    assert out[3:] == [("finding", BEYOND_WINDOW, far, None, False,
                        "a valid record lies beyond the sliding window after the first invalid block: the damage "
                        "is mid-log, not a crash tail")]
    out, res = _scan(img, img.header(clean=True))
    assert out[3:] == []
    near = Amq(1)
    near.block([body(5, 0)])
    near.raw(4096, bytes(24))
    near.block([body(5, 50)], start=4096 + WINDOW)  # exactly one window on: not looked at by the first probe
    out, res = _scan(near, near.header(clean=False))
    assert out[1][:3] == ("finding", BEYOND_WINDOW, 4096 + WINDOW)


def test_a_v0_log_with_a_record_beyond_the_window():
    img, offs = _log(0, blocks=1)
    img.raw(4096, bytes(24))
    far = 4096 + WINDOW + 4096
    img.block([body(5, 50)], start=far)
    img.raw(far - 4096, bytes(24))
    out, res = _scan(img, img.header(clean=False))
    assert out[3:] == [("finding", BEYOND_WINDOW, far, None, False,
                        "a valid record lies beyond the sliding window after the first invalid block: the damage "
                        "is mid-log, not a crash tail; AutoMQ V0 does not read that far (not shown)")]
    out, res = _scan(img, img.header(clean=True))
    assert out[3:] == []
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out[3:] == []


def test_a_v0_valid_record_past_the_window_is_returned_and_named():
    img, offs = _log(0, blocks=1)
    img.raw(4096, bytes(24))
    far = 4096 + WINDOW
    img.block([body(5, 50)], start=far)
    out, res = _scan(img, img.header(clean=False, window=WINDOW + 4096), probe=False)
    # AutoMQ returns it (window + 4 KiB: the loop reaches it), and says the record is out of window
    assert ("entry", far) in out
    out, res = _scan(img, img.header(clean=False, window=WINDOW), probe=False)
    assert ("entry", far) not in out


def test_a_v0_record_past_the_window_read_on_after_a_later_record_is_named():
    img, offs = _log(0, blocks=1)
    img.raw(4096, bytes(24))
    img.block([body(5, 20)], start=8192)  # inside the window: the last valid record moves on
    far = 4096 + WINDOW
    img.block([body(5, 50)], start=far)
    img.block([body(5, 51)], start=far + 4096)
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out[-3:] == [("finding", BEYOND_WINDOW, far, None, False,
                         "a valid record beyond the sliding window after the first invalid block: mid-log damage; "
                         "AutoMQ V0 still returns it (it logs '[BUG] record offset out of window')"),
                        ("entry", far), ("entry", far + 4096)]  # (said once)
    assert out[3][:4] == ("finding", HOLE, 4096, 8192) and out[4] == ("entry", 8192)


def test_a_v0_torn_record_at_the_end_is_a_torn_tail():
    img, offs = _log(0)
    img.raw(offs[-1] + 50, b"\x00\x01\x02")
    out, res = _scan(img, img.header(clean=False), probe=False)
    f = res.findings[-1]
    assert out[-1] == ("finding", TORN_TAIL, offs[-1], 12288, True, "body crc mismatch")
    assert f.expected_crc is not None and f.found_crc is not None and f.bytes_cause == Cause.CHECKSUM_MISMATCH
    assert out[:-1] == [("entry", o) for o in offs[:-1]]


def test_a_v0_torn_block_start_then_valid_records():
    img, offs = _log(0)
    img.raw(4096 + 50, b"\x00\x01\x02")
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out[3][:5] == ("finding", HOLE, 4096, 8192, True) and out[3][5] == "body crc mismatch"
    assert out[4:] == [("entry", o) for o in offs[6:]]


def test_a_v1_torn_block_start_stops_the_log():
    img, offs = _log(1)
    img.raw(4096 + 50, b"\x00\x01\x02")
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out == [("entry", o) for o in offs[:3]] + [("finding", TORN_TAIL, 4096, 8192, True, "body crc mismatch")]
    assert res.stopped_by == am.V1_STOP


def test_a_torn_record_inside_a_block_skips_to_the_next_block():
    for version in (0, 1):
        img, offs = _log(version)
        img.raw(4203 + 50, b"\x00\x01\x02")
        out, res = _scan(img, img.header(clean=False), probe=False)
        assert out[:4] == [("entry", o) for o in offs[:4]]
        assert out[4] == ("finding", HOLE, 4203, 8192, True, "body crc mismatch"), version
        assert out[5:] == [("entry", o) for o in offs[6:]]


def test_a_body_that_is_no_batch():
    img = Amq(1)
    img.block([body(5, 0), b"no batch here", body(5, 1)])
    out, res = _scan(img, img.header())
    assert out[1][:5] == ("finding", BAD_BATCH, 107, 107 + 24 + 13, False)
    assert out[1][5].startswith("body is not a StreamRecordBatch: ")
    assert out[0] == ("entry", 0) and out[2:] == [("entry", 107), ("entry", 144)]


# -- V1 padding records --------------------------------------------------------------------------------------

def _lap_end(img, offs_before):
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0)], start=start)
    pad = amq_record(size - BS, b"", magic=rec.PADDING_MAGIC, length=BS - rec.SIZE)
    img.raw(size - BS, pad)
    img.block([body(5, 1)], start=size)
    return start, size


def test_v1_follows_the_lap_end_padding_record():
    img = Amq(1)
    start, size = _lap_end(img, [])
    out, res = _scan(img, img.header(trim=start - 1))
    assert out == [("entry", start), ("entry", size)]
    assert res.end_offset == size + 107


def test_v1_follows_a_padding_record_whose_header_fails_saying_so():
    img = Amq(1)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0)], start=start)
    bad = bytearray(amq_record(size - BS, b"", magic=rec.PADDING_MAGIC, length=BS - rec.SIZE))
    bad[23] ^= 1  # its header crc
    img.raw(size - BS, bytes(bad))
    img.block([body(5, 1)], start=size)
    img.raw(4096, bytes(24))
    out, res = _scan(img, img.header(trim=start - 1))
    assert out[1][:4] == ("finding", BAD_PADDING, size - BS, size)
    assert out[1][5].startswith("padding record followed as AutoMQ V1 does, though its header fails a check: ")
    assert out[0] == ("entry", start) and out[2] == ("entry", size)


def test_v0_has_no_padding_records():
    img = Amq(0)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0)], start=start)
    img.raw(size - BS, amq_record(size - BS, b"", magic=rec.PADDING_MAGIC, length=BS - rec.SIZE))
    img.block([body(5, 1)], start=size)
    out, res = _scan(img, img.header(trim=start - 1, clean=False), probe=False)
    assert out == [("entry", start), ("entry", size)]  # an invalid block, then the next lap: its tail


def test_v0_leaves_a_lap_s_tail_unwritten_without_a_finding():
    img = Amq(0)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0)], start=start)
    img.raw(size - BS, bytes(24))
    img.block([body(5, 1)], start=size)
    out, res = _scan(img, img.header(trim=start - 1, clean=False), probe=False)
    assert out == [("entry", start), ("entry", size)]


# -- the trim point ------------------------------------------------------------------------------------------

def test_a_trim_point_just_below_a_block_names_no_record():
    img, offs = _log(1)
    out, res = _scan(img, img.header(trim=4095))
    assert out == [("entry", o) for o in offs[3:]] and res.findings == [] and res.start_offset == 4095


def test_a_trim_record_is_skipped_and_its_stream_end_counts():
    img, offs = _log(0)
    out, res = _scan(img, img.header(trim=107))
    assert out == [("entry", o) for o in offs[2:]] and res.trim_entry.offset == 107
    assert res.records == 7


def test_a_damaged_trim_record_inside_a_block():
    for version in (0, 1):
        img, offs = _log(version)
        img.raw(107, bytes(24))
        out, res = _scan(img, img.header(trim=107), probe=False)
        assert out[0][:5] == ("finding", TRIM_RECORD, 107, None, True), version
        assert out[1:] == [("entry", o) for o in offs[3:]]


def test_a_damaged_trim_record_at_a_block_start():
    img, offs = _log(0)
    img.raw(4096, bytes(24))
    out, res = _scan(img, img.header(trim=4096), probe=False)
    assert out[0][:5] == ("finding", TRIM_RECORD, 4096, None, True)
    assert out[1:] == [("entry", o) for o in offs[6:]]
    img1, offs1 = _log(1)
    img1.raw(4096, bytes(24))
    out, res = _scan(img1, img1.header(trim=4096), probe=False)
    assert out[0][:5] == ("finding", TRIM_RECORD, 4096, None, False)
    assert out[0][5].endswith("; AutoMQ V1 recovery stops here")


def test_a_torn_trim_record():
    img, offs = _log(0)
    img.raw(107 + 50, b"\x00\x01")
    out, res = _scan(img, img.header(trim=107), probe=False)
    assert out[0] == ("finding", TRIM_RECORD, 107, None, True, "body crc mismatch")
    assert out[1:] == [("entry", o) for o in offs[3:]]
    img1, offs1 = _log(1)
    img1.raw(4096 + 50, b"\x00\x01")
    out, res = _scan(img1, img1.header(trim=4096), probe=False)
    assert out == [("finding", TRIM_RECORD, 4096, None, False, "body crc mismatch; AutoMQ V1 recovery stops here")]
    assert res.stopped_by == am.V1_STOP


def test_a_scan_s_fields_from_its_header():
    img, _ = _log(1)
    h = img.header(trim=300, window=WINDOW, clean=False)
    s = am.AutomqScan(img.dev, h, ScanResult(h, img.ring), probe=True, keep_offsets=False)
    assert (s.bs, s.v1, s.trim, s.start, s.limit, s.window, s.explained, s.trim_is_a_record) == \
        (BS, True, 300, 300, 300 + img.ring.size, WINDOW, True, True)
    assert (s.first_bad, s.first_bad_lap, s.last_valid, s.stop_at, s.gap, s.stopped, s.beyond_seen) == \
        (None, -1, None, None, None, False, False)
    h0 = Amq(0).header(trim=-1)
    s0 = am.AutomqScan(img.dev, h0, ScanResult(h0, img.ring), probe=False, keep_offsets=True)
    assert (s0.v1, s0.start, s0.trim_is_a_record, s0.explained) == (False, 0, False, False)
    h2 = Amq(0).header(trim=8191)
    assert am.AutomqScan(img.dev, h2, ScanResult(h2, img.ring), probe=False, keep_offsets=True).trim_is_a_record is False
    h3 = Amq(0).header(trim=8192)
    assert am.AutomqScan(img.dev, h3, ScanResult(h3, img.ring), probe=False, keep_offsets=True).trim_is_a_record


def test_small_automq_blocks():
    img = Amq(1, capacity=32 * KiB, bs=512)
    offs = img.block([body(5, 0), body(5, 1)])
    offs += img.block([body(5, 2)])
    assert offs == [0, 107, 512]
    out, res = _scan(img, img.header())
    assert out == [("entry", o) for o in offs]


@pytest.mark.parametrize("version", [0, 1])
def test_a_later_lap_s_record_clears_v0_s_first_invalid_block(version, monkeypatch):
    monkeypatch.setattr(am, "AUTOMQ_EXTRA_SCAN_BYTES", 0)
    img = Amq(version)
    size = img.ring.size
    img.block([body(5, 0)], start=size - 3 * BS)
    img.raw(size - 2 * BS, bytes(24))
    img.block([body(5, 1)], start=size)  # the next lap (V0: the lap's tail was left unwritten)
    img.block([body(5, 2)], start=size + BS)  # one window past the invalid block
    img.raw(size + 2 * BS, bytes(24))
    out, res = _scan(img, img.header(trim=size - 3 * BS - 1, clean=False, window=3 * BS), probe=False)
    if version == 0:
        assert out == [("entry", size - 3 * BS), ("entry", size), ("entry", size + BS)]
    else:
        assert out == [("entry", size - 3 * BS)]


# -- what each finding carries ---------------------------------------------------------------------------------

def _crc_damage(img, offset):
    """Flip a bit of bodyLength: the header's crc fails (expected and found crcs known)."""
    p = img.ring.physical(offset) + 6
    img.dev.data[p] ^= 0x01


def test_a_hole_carries_the_ring_the_crcs_and_the_cause():
    img, offs = _log(0)
    _crc_damage(img, 4096)
    out, res = _scan(img, img.header(clean=False), probe=False)
    f = res.findings[0]
    assert (f.kind, f.offset, f.end_offset, f.reason, f.ring) == (HOLE, 4096, 8192, "header crc mismatch", img.ring)
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (f.expected_crc, f.found_crc)
    assert f.expected_crc != f.found_crc and f.to_json()["physical_offset"] == img.ring.physical(4096)


def test_a_trim_record_finding_carries_its_cause_and_crcs():
    img, offs = _log(0)
    img.raw(107, bytes(24))
    out, res = _scan(img, img.header(trim=107), probe=False)
    assert res.findings[0].bytes_cause == Cause.ZERO_FILL and res.findings[0].ring == img.ring
    img2, _ = _log(0)
    img2.raw(107 + 50, b"\x00\x01")
    out, res = _scan(img2, img2.header(trim=107), probe=False)
    f = res.findings[0]
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (f.expected_crc, f.found_crc)
    img3, _ = _log(1)
    img3.raw(4096 + 50, b"\x00\x01")
    out, res = _scan(img3, img3.header(trim=4096), probe=False)
    f = res.findings[0]
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (f.expected_crc, f.found_crc)


def test_a_torn_trim_record_in_a_later_block_goes_on_at_the_next_block():
    img, offs = _log(0)
    img.raw(4203 + 50, b"\x00\x01")
    out, res = _scan(img, img.header(trim=4203), probe=False)
    assert out == [("finding", TRIM_RECORD, 4203, None, True, "body crc mismatch")] + \
        [("entry", o) for o in offs[6:]]


def test_v1_discarded_blocks_name_the_first_invalid_block_s_reason():
    img, offs = _log(1)
    img.raw(4096 + 50, b"\x00\x01")  # a torn first record: V1 stops there
    out, res = _scan(img, img.header(clean=False))
    f = res.findings[-1]
    assert (f.kind, f.offset, f.end_offset) == (DISCARDED, 4096, 8192)
    assert f.reason == ("body crc mismatch; valid blocks follow at offset 8192: AutoMQ V1 recovers only the "
                        "continuous log and discards them (not shown)")
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and f.ring == img.ring


def test_a_padding_record_closes_a_v1_torn_gap_and_ends_the_lap():
    img = Amq(1)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0), body(5, 1)], start=start)
    img.raw(start + 107 + 60, b"\x00\x01")  # the block's second record is torn
    pad = bytearray(amq_record(size - BS, b"", magic=rec.PADDING_MAGIC, length=BS - rec.SIZE))
    pad[23] ^= 1
    img.raw(size - BS, bytes(pad))
    img.raw(size, bytes(24))  # nothing in the next lap
    out, res = _scan(img, img.header(trim=start - 1, clean=False), probe=False)
    assert out[0] == ("entry", start)
    assert out[1][:4] == ("finding", HOLE, start + 107, size - BS)
    bad = res.findings[1]
    assert (bad.kind, bad.offset, bad.end_offset) == (BAD_PADDING, size - BS, size)
    assert bad.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (bad.expected_crc, bad.found_crc)
    assert res.end_offset == size and res.stopped_by == am.V1_STOP


@pytest.mark.parametrize("version", [0, 1])
def test_small_blocks_torn_records_go_on_at_the_next_small_block(version):
    img = Amq(version, capacity=32 * KiB, bs=512)
    offs = img.block([body(5, 0), body(5, 1)])
    offs += img.block([body(5, 2)])
    img.raw(107 + 60, b"\x00\x01")
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out[0] == ("entry", 0) and out[1][:4] == ("finding", HOLE, 107, 512) and out[2] == ("entry", 512)
    img.raw(107 + 60, amq_record(107, body(5, 1))[60:62])
    img.raw(107, bytes(24))  # now the trim record, zeroed
    out, res = _scan(img, img.header(trim=107, clean=False), probe=False)
    assert out[1:] == [("entry", 512)]
    img.raw(107, amq_record(107, body(5, 1))[:24])
    img.raw(107 + 60, b"\x00\x01")  # torn trim record
    out, res = _scan(img, img.header(trim=107, clean=False), probe=False)
    assert out[1:] == [("entry", 512)] and out[0][:3] == ("finding", TRIM_RECORD, 107)


@pytest.mark.parametrize("version", [0, 1])
def test_a_full_ring_stops_one_ring_past_the_trim_point(version):
    img = Amq(version, capacity=32 * KiB)
    n = 0
    while img.next < img.ring.size:
        img.block([body(5, n, BS - 24 - 33)])
        n += 1
    out, res = _scan(img, img.header(clean=False))
    assert len(out) == img.ring.size // BS and res.stopped_by == "one ring past the trim point"


def test_a_v1_log_s_discarded_blocks_after_a_zeroed_block_say_why():
    img, offs = _log(1)
    img.raw(4096, bytes(24))
    out, res = _scan(img, img.header(clean=False))
    assert res.findings[-1].reason.startswith("zero fill; valid blocks follow at offset 8192")
    assert res.stream_ends == {5: 3} and res.streams.last == {5: (214, 3)}


def test_a_damaged_trim_record_s_finding_says_why():
    img, offs = _log(0)
    img.raw(107, bytes(24))
    out, res = _scan(img, img.header(trim=107), probe=False)
    assert out[0] == ("finding", TRIM_RECORD, 107, None, True, "zero fill")
    assert res.findings[0].bytes_cause == Cause.ZERO_FILL


def test_the_trim_record_s_body_and_stream_are_kept():
    img = Amq(0)
    trim_body = body(9, 30, count=4)
    offs = img.block([body(5, 0), trim_body, body(5, 1)])
    out, res = _scan(img, img.header(trim=offs[1]))
    assert res.trim_entry.body == trim_body and res.trim_entry.batch.stream_id == 9
    assert res.stream_ends == {9: 34, 5: 2}


def test_a_v0_torn_tail_in_small_blocks_ends_at_its_block():
    img = Amq(0, capacity=32 * KiB, bs=512)
    offs = img.block([body(5, 0), body(5, 1)])
    img.raw(107 + 60, b"\x00\x01")
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert offs == [0, 107] and out[-1][:4] == ("finding", TORN_TAIL, 107, 512)


def test_a_torn_record_starting_just_before_a_block_boundary():
    img = Amq(0)
    offs = img.block([body(5, 0, 4095 - 24 - 33), body(5, 1)])
    assert offs[1] == 4095
    img.raw(4095 + 60, b"\x00\x01")
    out, res = _scan(img, img.header(clean=False), probe=False)
    assert out[-1][:4] == ("finding", TORN_TAIL, 4095, 4096)


def test_a_v1_torn_gap_closed_by_a_valid_padding_record():
    img = Amq(1)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0), body(5, 1)], start=start)
    img.raw(start + 107 + 60, b"\x00\x01")
    img.raw(size - BS, amq_record(size - BS, b"", magic=rec.PADDING_MAGIC, length=BS - rec.SIZE))
    img.block([body(5, 2)], start=size)
    out, res = _scan(img, img.header(trim=start - 1, clean=False), probe=False)
    assert out[1][:4] == ("finding", HOLE, start + 107, size - BS) and out[2:] == [("entry", size)]


def test_a_v0_torn_gap_across_the_lap_end_is_a_hole():
    img = Amq(0)
    size = img.ring.size
    start = size - 2 * BS
    img.block([body(5, 0), body(5, 1)], start=start)
    img.raw(start + 107 + 60, b"\x00\x01")
    img.raw(size - BS, bytes(24))
    img.block([body(5, 2)], start=size)
    out, res = _scan(img, img.header(trim=start - 1, clean=False), probe=False)
    assert out[1][:4] == ("finding", HOLE, start + 107, size) and out[2:] == [("entry", size)]


def test_a_damaged_record_at_trim_point_zero_is_a_trim_record():
    img, offs = _log(0)
    img.raw(0, bytes(24))
    out, res = _scan(img, img.header(trim=0), probe=False)
    assert out[0] == ("finding", TRIM_RECORD, 0, None, True, "zero fill")
    assert out[1:] == [("entry", o) for o in offs[3:]]


def test_a_v1_trim_record_with_a_bad_header_at_a_block_carries_its_crcs():
    img, offs = _log(1)
    _crc_damage(img, 4096)
    out, res = _scan(img, img.header(trim=4096), probe=False)
    f = res.findings[0]
    assert (f.kind, f.offset, f.reason) == (TRIM_RECORD, 4096, "header crc mismatch; AutoMQ V1 recovery stops here")
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (f.expected_crc, f.found_crc)


def test_a_v1_torn_trim_record_s_discarded_blocks_say_why():
    img, offs = _log(1)
    img.raw(4096 + 50, b"\x00\x01")
    out, res = _scan(img, img.header(trim=4096))
    assert out[-1][:4] == ("finding", DISCARDED, 4096, 8192)
    assert out[-1][5].startswith("body crc mismatch; valid blocks follow at offset 8192")
