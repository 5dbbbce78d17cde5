"""wal/native_scan.py's own code (issue 32): the recovery policy of walctl's logs on small
in-memory logs: every event and finding (kind, offset, end, verdict, rule, words) of intact,
trimmed, padded, sealed, torn, holed and corrupted logs, crashed or closed cleanly, with and
without durable points; seeks; resync; the helpers at their boundaries."""

from __future__ import annotations

import pytest

from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import ALIGN
from walctl.format.seal import SealDescriptor
from walctl.wal import native_scan as ns
from walctl.wal.decoder import Decoder
from walctl.wal.findings import (BAD_BATCH, BEYOND_WINDOW, CLEAN_RULE, END_MISMATCH, HOLE, TORN_TAIL, TRIM_RECORD,
                                 WINDOW_RULE, Cause, Durable, Finding)
from walctl.wal.ringread import Entry, LogReader, Run

from muthelpers import Image, KiB, body

WINDOW = 16 * KiB


def _img(blocks=3, per=3, cap=64 * KiB):
    """``blocks`` blocks of ``per`` 107-byte records (stream 1, offsets 0, 1, ...) from 0 on."""
    img = Image(cap, window=WINDOW)
    n = 0
    for _ in range(blocks):
        img.block([body(1, n + i) for i in range(per)])
        n += per
    return img


def _events(img, header, *, bulk=False, seek=None, probe=True, keep=True, durable=None, readahead=False):
    res = img.result(header)
    res.durable = durable
    scan = ns.NativeScan(img.dev, header, res, probe=probe, keep_offsets=keep, readahead=readahead)
    out = []
    for e in scan.events(seek, bulk=bulk):
        if isinstance(e, Run):
            out.append(("run", e.offset, e.count))
        elif isinstance(e, Entry):
            out.append(("entry", e.offset))
        else:
            out.append(("finding", e.kind, e.offset, e.end_offset, e.explained, e.reason, e.rule))
    return out, res


def _entries(offsets):
    return [("entry", o) for o in offsets]


OFFS = [0, 107, 214, 4096, 4203, 4310, 8192, 8299, 8406]


# -- intact logs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("clean", [True, False])
def test_an_intact_log_scans_whole(clean):
    img = _img()
    out, res = _events(img, img.header(clean=clean))
    assert out == _entries(OFFS)
    assert (res.records, res.end_offset, res.start_offset, res.read_from_offset) == (9, 8513, 0, 0)
    assert res.stopped_by == ("end of log" if clean else "one sliding window past the first invalid block")
    assert res.complete and res.findings == []  # (a crashed log's end: an invalid header, looked past)
    assert res.record_offsets == OFFS and res.payload_bytes == 9 * 50 and res.stream_ends == {1: 9}


def test_an_intact_log_in_bulk_comes_as_runs():
    img = _img()
    out, res = _events(img, img.header(), bulk=True, keep=False)
    assert out == [("run", 0, 9)]  # (one decode: it skips the zero padding after each block)
    assert res.records == 9 and res.end_offset == 8513 and res.record_offsets == []


def test_a_clean_log_ending_before_its_header_s_next_offset():
    img = _img()
    out, res = _events(img, img.header(next_offset=16384))
    assert out[-1] == ("finding", END_MISMATCH, 8513, 16384, False,
                       "the log ends at 8513 but the clean header says the next block starts at 16384", None)
    assert out[:-1] == _entries(OFFS)
    out, res = _events(img, img.header(next_offset=4096))  # one that ends past it: the same
    assert out[-1][:4] == ("finding", END_MISMATCH, 8513, 4096)


def test_a_crashed_log_s_next_offset_is_not_checked():
    img = _img()
    out, _ = _events(img, img.header(clean=False, next_offset=16384))
    assert out == _entries(OFFS)


# -- damage --------------------------------------------------------------------------------------------

def _garbage(img, offset, n=24):
    img.raw(offset, bytes([0xA5]) * n)


def test_a_hole_in_a_crashed_log_is_explained_by_the_window_rule():
    img = _img()
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=False))
    assert out == _entries(OFFS[:3]) + [("finding", HOLE, 4096, 8192, True, "bad magic 0xA5A5A5A5", WINDOW_RULE)] \
        + _entries(OFFS[6:])
    assert res.findings[0].bytes_cause == Cause.GARBAGE and res.unaligned_damage == [] and res.torn_offsets == []
    assert res.corrupt == [] and res.end_offset == 8513


def test_a_hole_in_a_clean_log_is_corruption():
    img = _img()
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=True))
    assert out == _entries(OFFS[:3]) + [("finding", HOLE, 4096, 8192, False, "bad magic 0xA5A5A5A5", CLEAN_RULE)] \
        + _entries(OFFS[6:])


def test_a_torn_body_then_nothing_is_a_torn_tail():
    img = _img()
    img.raw(8406 + 40, b"\xff\xff")
    out, res = _events(img, img.header(clean=False))
    f = res.findings[-1]
    assert out[:-1] == _entries(OFFS[:-1])
    assert out[-1] == ("finding", TORN_TAIL, 8406, 12288, True, "body crc mismatch", WINDOW_RULE)
    assert f.expected_crc is not None and f.found_crc is not None and f.expected_crc != f.found_crc
    assert res.torn_offsets == [8406] and res.end_offset == 8406 and f.bytes_cause == Cause.CHECKSUM_MISMATCH


def test_a_torn_body_in_a_clean_log_is_corruption():
    img = _img()
    img.raw(8406 + 40, b"\xff\xff")
    out, res = _events(img, img.header(clean=True, next_offset=12288))
    assert out[-1] == ("finding", TORN_TAIL, 8406, 12288, False, "body crc mismatch", CLEAN_RULE)
    assert out[:-1] == _entries(OFFS[:-1])  # (its block ends where the header says: no END_MISMATCH)
    out, res = _events(img, img.header(clean=True, next_offset=16384))
    assert out[-2][:4] == ("finding", TORN_TAIL, 8406, 12288) and out[-1][:4] == ("finding", END_MISMATCH, 8406, 16384)


def test_damage_inside_a_block_after_its_last_record():
    img = _img()
    img.raw(321, b"\x01\x02\x03")  # where the block's zero padding should be
    out, res = _events(img, img.header(clean=False))
    assert out[3] == ("finding", HOLE, 321, 4096, True,
                      "damaged record header inside a block (bad magic 0x01020300)", WINDOW_RULE)
    assert out[:3] == _entries(OFFS[:3]) and out[4:] == _entries(OFFS[3:])
    assert res.unaligned_damage == [321]


def test_zero_padding_after_a_block_s_last_record_is_no_finding():
    img = _img()
    out, res = _events(img, img.header(clean=False), bulk=False)
    assert res.findings == [] and res.unaligned_damage == []


def test_a_body_that_is_no_batch():
    img = Image(64 * KiB, window=WINDOW)
    img.block([body(1, 0), b"not a batch", body(1, 1)])
    out, res = _events(img, img.header())
    assert out[1][:5] == ("finding", BAD_BATCH, 107, 107 + 24 + 11, False)
    assert out[1][5].startswith("body is not a StreamRecordBatch: ")
    assert out[0] == ("entry", 0) and out[2:] == [("entry", 107), ("entry", 142)]
    assert res.records == 3 and res.payload_bytes == 50 + 11 + 50
    out2, _ = _events(img, img.header(), bulk=True)
    assert out2 == [("run", 0, 1), out[1], ("entry", 107), ("run", 142, 1)]


# -- the trim record --------------------------------------------------------------------------------------

def test_the_trim_record_is_deleted_but_its_stream_end_counts():
    img = _img()
    out, res = _events(img, img.header(trim=107))
    assert out == _entries(OFFS[2:]) and res.start_offset == 107 and res.records == 7
    assert res.trim_entry.offset == 107 and res.record_offsets == OFFS[2:]
    out, res = _events(img, img.header(trim=107), bulk=True)
    assert out == [("run", 214, 7)] and res.trim_entry.offset == 107


def test_a_damaged_trim_record_is_a_trim_finding():
    img = _img()
    _garbage(img, 107)
    out, res = _events(img, img.header(trim=107, clean=False))
    assert out[0] == ("finding", TRIM_RECORD, 107, 4096, False, "bad magic 0xA5A5A5A5", None)
    assert out[1:] == _entries(OFFS[3:])


def test_a_damaged_trim_record_at_the_log_s_end():
    img = _img(blocks=1)
    _garbage(img, 214)
    out, res = _events(img, img.header(trim=214, clean=False))
    assert out == [("finding", TRIM_RECORD, 214, None, False, "bad magic 0xA5A5A5A5", None)]


def test_the_trim_record_with_a_torn_body():
    img = _img()
    img.raw(214 + 60, b"\xff\xff")
    out, res = _events(img, img.header(trim=214, clean=False))
    assert out[0][:5] == ("finding", TRIM_RECORD, 214, 4096, False)
    assert out[1:] == _entries(OFFS[3:])


def test_a_trim_record_that_is_no_batch():
    img = Image(64 * KiB, window=WINDOW)
    img.block([body(1, 0), b"junk body", body(1, 1)])
    out, res = _events(img, img.header(trim=107))
    assert out == [("entry", 140)] and res.trim_entry.batch is None and res.findings == []


# -- the window rule and the probe -------------------------------------------------------------------------

def _far(img, offset, base=100):
    img.block([body(1, base)], start=offset)


def test_a_valid_record_beyond_the_window_is_mid_log_damage():
    img = _img(blocks=1)
    _garbage(img, 4096)  # (nothing after it for one window...)
    _far(img, 4096 + WINDOW + 8192)
    out, res = _events(img, img.header(clean=False))
    assert out[:3] == _entries(OFFS[:3])
    assert out[3:] == [("finding", BEYOND_WINDOW, 28672, None, False,
                        "a valid record lies beyond the sliding window after the first damage: the damage is "
                        "mid-log, not a crash tail; records after it are not shown", None)]
    assert res.complete is False and res.stopped_by == "one sliding window past the first invalid block"
    out, res = _events(img, img.header(clean=False), probe=False)
    assert out == _entries(OFFS[:3]) and res.complete


def test_the_probe_looks_only_in_crashed_logs_with_damage():
    img = _img(blocks=1)
    _far(img, 4096 + WINDOW + 8192)
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=True, next_offset=4096))
    assert out == _entries(OFFS[:3])  # a clean log ends where its header says: no probe, no finding
    assert res.complete and res.stopped_by == "end of log"


def test_records_inside_the_window_after_a_hole_are_read():
    img = _img(blocks=1)
    _garbage(img, 4096)
    _far(img, 4096 + WINDOW - 4096)
    out, res = _events(img, img.header(clean=False))
    assert out[3] == ("finding", HOLE, 4096, 16384, True, "bad magic 0xA5A5A5A5", WINDOW_RULE)
    assert out[4] == ("entry", 16384) and res.stopped_by == "one sliding window past the first invalid block"


def test_a_clean_log_stops_at_its_next_offset_after_a_hole_past_it():
    img = _img(blocks=1)
    _garbage(img, 4096)
    _far(img, 8192)
    out, res = _events(img, img.header(clean=True, next_offset=4096))
    assert out == _entries(OFFS[:3]) and res.stopped_by == "end of log"


# -- durable points ---------------------------------------------------------------------------------------

def test_damage_below_the_durable_end_is_read_past():
    img = _img()
    img.raw(4203 + 10, b"\xee" * 4)  # a torn body in the middle of a block
    d = Durable([(8513, "the checkpoint's end")])
    out, res = _events(img, img.header(clean=False), durable=d)
    assert out[:4] == _entries(OFFS[:4])
    assert out[4] == ("finding", HOLE, 4203, 4310, False, "damaged record header inside a block (header crc "
                      "mismatch)", "below the checkpoint's end 8,513")
    assert out[5:] == _entries(OFFS[5:]) and res.torn_offsets == []


def test_a_torn_body_below_the_durable_end():
    img = _img()
    img.raw(4203 + 40, b"\xee" * 4)
    d = Durable([(8513, "the checkpoint's end")])
    out, res = _events(img, img.header(clean=False), durable=d)
    assert out[4] == ("finding", HOLE, 4203, 4310, False, "body crc mismatch", "below the checkpoint's end 8,513")
    assert res.torn_offsets == [4203] and out[5:] == _entries(OFFS[5:])


def test_garbage_inside_a_block_below_the_durable_end():
    img = _img()
    img.raw(321, b"\x01\x02")
    d = Durable([(8513, "the end")])
    out, res = _events(img, img.header(clean=False), durable=d)
    assert out[3] == ("finding", HOLE, 321, 4096, False, "damaged record header inside a block (bad magic "
                      "0x01020000)", "below the end 8,513")
    assert res.unaligned_damage == [321]


def test_a_crashed_log_ending_before_its_durable_end_lost_its_tail():
    img = _img()
    d = Durable([(9000, "the checkpoint's end", " (a checkpoint)")])
    out, res = _events(img, img.header(clean=False), durable=d)
    assert out[-1] == ("finding", END_MISMATCH, 8513, 9000, False,
                       "the log ends at 8513 but the checkpoint's end 9,000 (a checkpoint) is durable: "
                       "acknowledged records are lost", "below the checkpoint's end 9,000 (a checkpoint)")
    out, res = _events(img, img.header(clean=False), durable=Durable([(8513, "x")]))
    assert out == _entries(OFFS)
    out, res = _events(img, img.header(clean=True), durable=Durable([(9000, "x")]))
    assert out == _entries(OFFS)


def test_a_hole_past_the_durable_end_names_it():
    img = _img()
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=False), durable=Durable([(300, "the end")]), probe=False)
    assert out[3] == ("finding", HOLE, 4096, 8192, True, "bad magic 0xA5A5A5A5",
                      "past the durable end 300, " + WINDOW_RULE)


def test_the_probe_past_the_window_raises_the_durable_end():
    img = _img(blocks=1)
    _garbage(img, 4096)
    _far(img, 4096 + WINDOW + 8192)
    d = Durable()
    out, res = _events(img, img.header(clean=False), durable=d)
    hit = 4096 + WINDOW + 8192
    assert d.points == [(hit + 24 - WINDOW, "the durable end",
                         f" (a valid record at {hit:,} lies one sliding window of {WINDOW:,} bytes past it: "
                         f"a block is only written inside the window)")]
    assert out[3][:5] == ("finding", HOLE, 4096, hit, False) and out[4:] == [("entry", hit)]
    assert res.complete


# -- padding and seals ------------------------------------------------------------------------------------

def test_a_lap_end_padding_record_is_followed():
    img = Image(64 * KiB, window=WINDOW)
    size = img.ring.size
    img.block([body(1, 0), body(1, 1)], start=size - 2 * ALIGN)
    img.padding(size - ALIGN, ALIGN)
    img.block([body(1, 2)], start=size)
    out, res = _events(img, img.header(clean=False, trim=size - 2 * ALIGN))
    assert out == [("entry", size - 2 * ALIGN + 107), ("entry", size)] and res.sealed_holes == []
    assert res.end_offset == size + 107


def test_a_sealed_hole_is_kept_and_raises_the_durable_end():
    img = _img(blocks=1)
    desc = SealDescriptor(4096, 8192, 123, 45, ((1, 3, 5),))
    img.padding(4096, 4096, desc.encode())
    img.block([body(1, 5)], start=8192)
    d = Durable()
    out, res = _events(img, img.header(clean=False), durable=d)
    assert out == _entries([0, 107, 214, 8192])
    assert [(h.start, h.end, h.record_offset, h.sealed) for h in res.sealed_holes] == [(4096, 8192, 4096, desc)]
    assert d.points == [(8192, "the end of the sealed crash hole", " (sealed at 4,096)")]
    out, res = _events(img, img.header(clean=False))
    assert len(res.sealed_holes) == 1


def test_a_seal_with_damaged_evidence_is_plain_padding():
    img = _img(blocks=1)
    raw = bytearray(SealDescriptor(4096, 8192, 123, 45).encode())
    raw[-1] ^= 1
    img.padding(4096, 4096, bytes(raw))
    img.block([body(1, 5)], start=8192)
    out, res = _events(img, img.header(clean=False))
    assert out == _entries([0, 107, 214, 8192]) and res.sealed_holes == []
    short = SealDescriptor(4096, 8192, 1, 2).encode()[:ns.rec.SIZE]
    img.padding(4096, 4096, short + bytes(100))
    assert _events(img, img.header(clean=False))[1].sealed_holes == []


def test_note_seal_keeps_one_hole_per_start():
    img = _img(blocks=1)
    desc = SealDescriptor(4096, 8192, 1, 2)
    img.padding(4096, 4096, desc.encode())
    res = img.result(img.header())
    r = LogReader(img.dev, img.ring)
    from walctl.wal.decoder import Record
    hole = ns._note_seal(res, r, Record(4096, 8192, b"", padding=True))
    assert (hole.start, hole.end) == (4096, 8192)
    ns._note_seal(res, r, Record(4096, 8192, b"", padding=True))
    assert len(res.sealed_holes) == 1
    assert ns._note_seal(res, r, Record(4096, 4096 + 24 + 43, b"", True)) is None  # too short for a descriptor
    assert ns._note_seal(res, r, Record(4096, 4096 + 24 + len(desc.encode()), b"", True)) is not None


# -- seek ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seek, first", [(0, 0), (107, 107), (108, 214), (4096, 4096), (4000, 4096),
                                          (4203, 4203), (8406, 8406), (8407, 8513), (321, 321), (300, 321),
                                          (4097, 4203)])
def test_a_seek_starts_at_the_first_record_at_or_after_it(seek, first):
    img = _img()
    out, res = _events(img, img.header(clean=False), seek=seek)
    got = [e[1] for e in out if e[0] == "entry"]
    assert got == [o for o in OFFS if o >= first]
    assert res.read_from_offset == first


def test_a_seek_past_the_clean_end_reads_nothing():
    img = _img()
    out, res = _events(img, img.header(), seek=20000)
    assert out == [] and res.read_from_offset == 12288


def test_a_seek_into_damage_probes_for_the_next_block():
    img = _img()
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=False), seek=4203)
    assert out == _entries(OFFS[6:]) and res.read_from_offset == 8192


def test_first_record_at_or_after_follows_headers_and_padding():
    img = _img()
    d = Decoder(LogReader(img.dev, img.ring))
    assert ns._first_record_at_or_after(d, 0, 300, 9000) == 321  # (the block's end)
    assert ns._first_record_at_or_after(d, 0, 322, 9000) == 4096
    assert ns._first_record_at_or_after(d, 0, 214, 9000) == 214
    assert ns._first_record_at_or_after(d, 0, 0, 9000) == 0
    assert ns._first_record_at_or_after(d, 0, 4096, 4096) is None
    assert ns._first_record_at_or_after(d, 0, 4096, 4097) == 4096
    _garbage(img, 4096)
    assert ns._first_record_at_or_after(Decoder(LogReader(img.dev, img.ring)), 0, 4100, 9000) is None


def test_block_at_or_before_walks_back_to_a_record_header():
    img = _img()
    r = LogReader(img.dev, img.ring)
    assert ns._block_at_or_before(r, 8406, 0) == 8192
    assert ns._block_at_or_before(r, 8192, 0) == 8192
    assert ns._block_at_or_before(r, 8191, 0) == 4096
    assert ns._block_at_or_before(r, 8191, 8192) is None
    assert ns._block_at_or_before(r, 100, 0) == 0
    img2 = Image(4 * 1024 * KiB)
    img2.block([body(1, 0)])
    r2 = LogReader(img2.dev, img2.ring)
    assert ns._block_at_or_before(r2, 64 * KiB + 5, 0) == 0  # 64 KiB back, then further
    assert ns._block_at_or_before(r2, 320 * KiB, 0) == 0
    assert ns._block_at_or_before(r2, 320 * KiB + 4096, 0) == 0
    # 64 KiB back, then 320 KiB more, then 1 MiB more (each step from below the last)
    reach = 64 * KiB + 4096 + 320 * KiB + 4096 + 1024 * KiB
    assert ns._block_at_or_before(r2, reach + 4095, 0) == 0
    assert ns._block_at_or_before(r2, reach + 4096, 0) is None
    assert ns._block_at_or_before(r2, reach + 4096, 4096) is None


# -- resync ----------------------------------------------------------------------------------------------

def test_resync_finds_the_next_record_header_at_any_offset():
    img = _img()
    r = LogReader(img.dev, img.ring)
    assert ns.resync(r, 1, 9000) == 107
    assert ns.resync(r, 107, 9000) == 107
    assert ns.resync(r, 108, 9000) == 214
    assert ns.resync(r, 215, 9000) == 4096
    assert ns.resync(r, 215, 4096) is None and ns.resync(r, 215, 4097) == 4096
    assert ns.resync(r, 8407, 60000) is None


def test_resync_passes_over_stale_and_lap_crossing_headers():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(size + 200, body(1, 0))  # a record of the next lap: it names another offset here
    img.raw(500, b"\x87\x65\x43\x21garbage")  # a magic with a bad header
    last = size - 200
    img.raw(last, rec.RecordHeader.for_body(last, b"x" * 500).encode())  # crosses the lap end
    r = LogReader(img.dev, img.ring)
    assert ns.resync(r, 0, size) is None
    assert ns.resync(r, size, 2 * size) == size + 200
    img.padding(1000, 100)
    assert ns.resync(LogReader(img.dev, img.ring), 0, size) == 1000


def test_resync_reads_in_steps_and_finds_a_header_across_a_step(monkeypatch):
    monkeypatch.setattr(ns, "RESYNC_READ_BYTES", 4096)
    img = Image(64 * KiB)
    img.put(4096 - 10, body(1, 0))
    img.put(3 * 4096 - 3, body(1, 1))
    r = LogReader(img.dev, img.ring)
    assert ns.resync(r, 0, 60000) == 4086
    assert ns.resync(r, 4087, 60000) == 3 * 4096 - 3
    assert ns.resync(r, 4087, 3 * 4096 - 3) is None


# -- helpers ---------------------------------------------------------------------------------------------

def test_unusual_rows_are_padding_data_and_the_trim_record():
    img = Image(64 * KiB)
    img.block([body(1, 0), b"junk", body(1, 1)])
    img.padding(4096, 200)
    r = LogReader(img.dev, img.ring)
    found = r.intact_run(0)
    assert found.count == 4
    rows = found.rows
    assert ns._unusual_rows(rows, 4, -1, False) == [1, 3]
    assert ns._unusual_rows(rows, 4, 135, False) == [1, 2, 3]
    assert ns._unusual_rows(rows, 4, 0, False) == [0, 1, 3]
    assert ns._unusual_rows(rows, 4, 4096, False) == [1, 3]
    assert ns._unusual_rows(rows, 4, 100, False) == [1, 3]
    assert ns._unusual_rows(rows, 2, 135, False) == [1]
    assert ns._unusual_rows(rows, 1, 0, True) == [0]
    assert ns._unusual_rows(rows, 1, -1, True) == []


def test_a_gap_s_repr_says_all():
    g = ns._Gap(5, "why", Cause.GARBAGE, 1, 2, torn=True)
    assert repr(g) == ("_Gap(start=5, reason='why', cause=<Cause.GARBAGE: 'garbage'>, expected_crc=1, "
                       "found_crc=2, torn=True)")
    assert ns._Gap(5, "r", Cause.GARBAGE).torn is False and ns._Gap(5, "r", Cause.GARBAGE).expected_crc is None


def test_a_scan_s_fields_from_its_header():
    img = _img()
    h = img.header(clean=True, trim=300, next_offset=12288)
    res = img.result(h)
    s = ns.NativeScan(img.dev, h, res, probe=True, keep_offsets=False)
    assert (s.start, s.limit, s.window, s.must_reach, s.reader.stop, s.reader.bound, s.o) == \
        (300, 300 + img.ring.size, WINDOW, 12288, 12288, 300 + img.ring.size, 300)
    assert (res.start_offset, res.end_offset, s.known_record, s.first_bad, s.gap) == (300, 300, -1, None, None)
    h2 = img.header(clean=False, next_offset=12288)
    s2 = ns.NativeScan(img.dev, h2, img.result(h2), probe=False, keep_offsets=True)
    assert (s2.start, s2.must_reach, s2.reader.stop) == (0, 0, None)


def test_a_wrapped_log_stops_one_ring_past_the_trim_point():
    img = Image(64 * KiB, window=WINDOW)
    size = img.ring.size
    n = 0
    o = 0
    while o < size:  # every block full of records, the whole ring
        img.block([body(1, n + i, 4096 - 24 - 33 - 0) for i in range(1)], start=o)
        n += 1
        o += ALIGN
    out, res = _events(img, img.header(clean=False))
    assert len(out) == size // ALIGN and res.stopped_by == "one ring past the trim point"


def test_read_ahead_scans_the_same():
    img = _img()
    _garbage(img, 4096)
    a = _events(img, img.header(clean=False), readahead=True, bulk=True)[0]
    b = _events(img, img.header(clean=False), bulk=True)[0]
    assert a == b


def test_bytes_read_are_counted_into_the_report():
    img = _img()
    _, res = _events(img, img.header())
    assert res.bytes_read == 16384  # one block past nextOffset
    img2 = _img(blocks=1)
    _garbage(img2, 4096)
    _far(img2, 4096 + WINDOW + 8192)
    _, res = _events(img2, img2.header(clean=False), durable=Durable())
    assert res.bytes_read > 0 and res.bytes_read >= img2.ring.size



# -- more boundaries --------------------------------------------------------------------------------------

def _big_log():
    """Records of 3000-byte bodies, three a block (across 4 KiB boundaries), four blocks."""
    img = Image(128 * KiB, window=WINDOW)
    n = 0
    for _ in range(4):
        img.block([body(2, n + i, 3000) for i in range(3)])
        n += 3
    return img


def test_small_chunks_scan_the_same_and_read_each_byte_once(monkeypatch):
    img = _big_log()
    h = img.header(clean=True)
    want, res = _events(img, h, bulk=True)
    assert [e[:3] for e in want] == [("run", 0, 12)] and res.bytes_read == img.next + ALIGN
    monkeypatch.setattr(ns_ringread(), "CHUNK_BYTES", ALIGN)
    got, small = _events(img, h, bulk=False)
    assert [e[1] for e in got] == img.offsets and small.findings == []
    assert small.bytes_read == img.next + ALIGN  # a record across a chunk's end is not read twice
    got, small = _events(img, h, bulk=True)
    assert sum(e[2] for e in got) == 12 and small.bytes_read == img.next + ALIGN


def ns_ringread():
    from walctl.wal import ringread
    return ringread


def test_a_clean_log_is_read_to_its_next_offset_past_the_window():
    img = _img(blocks=1)
    _garbage(img, 4096)
    far = 4096 + WINDOW + 4096
    _far(img, far)
    out, res = _events(img, img.header(clean=True, next_offset=far + 4096))
    assert out[3] == ("finding", HOLE, 4096, far, False, "bad magic 0xA5A5A5A5", CLEAN_RULE)
    assert out[4:] == [("entry", far)] and res.end_offset == far + 107


def test_the_window_rule_without_a_durable_end_says_only_itself():
    img = _img()
    _garbage(img, 4096)
    out, _ = _events(img, img.header(clean=False), durable=Durable(), probe=False)
    assert out[3][6] == WINDOW_RULE
    out, _ = _events(img, img.header(clean=False, trim=107), durable=Durable([(107, "x")]), probe=False)
    assert out[1][6] == WINDOW_RULE  # a durable end at the start says nothing more
    out, _ = _events(img, img.header(clean=False, trim=107), durable=Durable([(108, "x")]), probe=False)
    assert out[1][6] == "past the durable end 108, " + WINDOW_RULE


def test_no_lost_tail_when_the_durable_end_is_at_or_before_the_start():
    img = _img()
    out, _ = _events(img, img.header(clean=False, trim=9000), durable=Durable([(9000, "x")]))
    assert [e[1] for e in out] == [TRIM_RECORD]  # (no record there), and no lost tail
    out, _ = _events(img, img.header(clean=False, trim=8999), durable=Durable([(9000, "x")]))
    assert out[-1][:4] == ("finding", END_MISMATCH, 8999, 9000)


def test_a_seek_in_a_damaged_clean_log_with_nothing_after_ends_at_next_offset():
    img = _img(blocks=2)
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=True, next_offset=12288), seek=4100)
    assert res.read_from_offset == 12288 and out == []


def test_the_probe_aside_counts_its_reads():
    img = _img(blocks=1)
    _garbage(img, 4096)
    hit = 4096 + WINDOW + 8192
    _far(img, hit)
    _, res = _events(img, img.header(clean=False), durable=Durable())
    _, plain = _events(img, img.header(clean=False), durable=Durable([(hit + 200, "x")]), probe=False)
    assert res.bytes_read > plain.bytes_read


def test_read_past_stops_at_the_known_record_or_the_durable_end():
    img = _img(blocks=1)
    _garbage(img, 4096)
    for o in range(4096 + 24, 12288, 24):
        img.raw(o, b"\xa5" * 24)
    _far(img, 12288)
    out, res = _events(img, img.header(clean=False), durable=Durable([(8192, "d")]), probe=False)
    assert out[3][:5] == ("finding", HOLE, 4096, 12288, False) and out[4] == ("entry", 12288)
    out, res = _events(img, img.header(clean=False), durable=Durable([(4097, "d")]), probe=False)
    assert out[3][:5] == ("finding", HOLE, 4096, 12288, False)


# -- what the scan keeps of each record and finding ----------------------------------------------------------

def test_the_trim_record_s_stream_and_body_are_kept():
    img = Image(64 * KiB, window=WINDOW)
    trim_body = body(7, 40, count=2)
    img.block([body(1, 0), trim_body, body(1, 1)])
    for bulk in (False, True):
        out, res = _events(img, img.header(trim=107), bulk=bulk)
        assert res.trim_entry.body == trim_body and res.trim_entry.batch == StreamRecordBatch.decode(trim_body)
        assert res.stream_ends == {7: 42, 1: 2} and res.streams.last[7] == (107, 42)


def test_a_body_that_is_no_batch_is_a_finding_and_a_record():
    img = Image(64 * KiB, window=WINDOW)
    img.block([body(1, 0), b"not a batch", body(1, 1)])
    for bulk in (False, True):
        out, res = _events(img, img.header(), bulk=bulk)
        [f] = res.findings
        assert f.ring == img.ring and f.kind == BAD_BATCH and f.to_json()["offset"] == 107
        assert res.record_offsets == [0, 107, 142] and res.records == 3


def test_a_hole_closed_by_a_padding_record_ends_there():
    img = _img(blocks=1)
    _garbage(img, 4096)
    img.padding(8192, 4096)
    img.block([body(1, 9)], start=12288)
    out, res = _events(img, img.header(clean=False), probe=False)
    assert out[3] == ("finding", HOLE, 4096, 8192, True, "bad magic 0xA5A5A5A5", WINDOW_RULE)
    assert out[4:] == [("entry", 12288)]


def test_a_log_ending_with_a_padding_record_ends_after_it():
    img = _img(blocks=1)
    img.padding(4096, 4096)
    out, res = _events(img, img.header(clean=False))
    assert out == _entries(OFFS[:3]) and res.end_offset == 8192 and res.next_block_offset == 8192


def test_damage_exactly_at_the_durable_end_is_past_it():
    img = _img()
    _garbage(img, 4096)
    out, res = _events(img, img.header(clean=False), durable=Durable([(4096, "the end")]), probe=False)
    assert out[3] == ("finding", HOLE, 4096, 8192, True, "bad magic 0xA5A5A5A5",
                      "past the durable end 4,096, " + WINDOW_RULE)


def test_without_the_probe_a_reader_s_scan_keeps_the_window_rule():
    img = _img(blocks=1)
    _garbage(img, 4096)
    far = 4096 + WINDOW + 8192
    _far(img, far)
    for header, probe in [(img.header(clean=False), False), (img.header(clean=True, next_offset=4096), True)]:
        d = Durable()
        out, res = _events(img, header, durable=d, probe=probe)
        assert out == _entries(OFFS[:3]) and d.points == [], (header, probe)


def test_the_report_s_bytes_read_are_up_to_date_after_the_probe():
    img = _img(blocks=1)
    _garbage(img, 4096)
    hit = 4096 + WINDOW + 8192
    _far(img, hit)
    res = img.result(img.header(clean=False))
    res.durable = Durable()
    scan = ns.NativeScan(img.dev, img.header(clean=False), res, probe=True, keep_offsets=False)
    for e in scan.events():
        if isinstance(e, Finding):
            assert res.bytes_read == scan.reader.bytes_read > 0
            break


def test_resync_finds_a_record_ending_on_the_lap_end():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(size - 107, body(1, 0))
    assert ns.resync(LogReader(img.dev, img.ring), size - 1000, size) == size - 107


def test_reading_past_a_torn_body_to_the_end_is_a_torn_tail_below_the_durable_end():
    img = _img()
    img.raw(8406 + 40, b"\xff\xff")
    out, res = _events(img, img.header(clean=False), durable=Durable([(9000, "the end")]), probe=False)
    torn = res.findings[0]
    assert out[-2] == ("finding", TORN_TAIL, 8406, 12288, False, "body crc mismatch", "below the end 9,000")
    assert torn.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (torn.expected_crc, torn.found_crc)
    assert torn.expected_crc != torn.found_crc and res.torn_offsets == [8406]
    assert out[-1][:4] == ("finding", END_MISMATCH, 8406, 9000)


def test_reading_past_damage_inside_a_block_to_the_end():
    img = _img(blocks=1)
    img.raw(321, b"\x01\x02")
    out, res = _events(img, img.header(clean=False), durable=Durable([(5000, "the end")]), probe=False)
    f = res.findings[0]
    assert out[3] == ("finding", TORN_TAIL, 321, 4096, False,
                      "damaged record header inside a block (bad magic 0x01020000)", "below the end 5,000")
    assert f.bytes_cause == Cause.GARBAGE and res.unaligned_damage == [321]


def test_reading_past_a_damaged_block_header_to_the_next_record():
    img = _img()
    img.raw(4096 + 5, b"\x7f")  # bodyLength changed: the header's crc fails
    head = rec.RecordHeader.decode(rec.encode_record(4096, body(1, 3)))
    out, res = _events(img, img.header(clean=False), durable=Durable([(8513, "the end")]), probe=False)
    f = res.findings[0]
    assert out[3] == ("finding", HOLE, 4096, 4203, False, "header crc mismatch", "below the end 8,513")
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and f.expected_crc is not None and f.found_crc is not None
    assert f.expected_crc != f.found_crc and head.body_length == 83
    assert out[4:] == _entries(OFFS[4:]) and res.unaligned_damage == [] and res.torn_offsets == []


def test_reading_past_finds_a_record_one_byte_on():
    img = _img(blocks=1)
    img.raw(321, b"\x99")
    img.put(322, body(1, 3))
    out, res = _events(img, img.header(clean=False), durable=Durable([(1000, "the end")]), probe=False)
    assert out[3][:4] == ("finding", HOLE, 321, 322) and out[4] == ("entry", 322)


def test_reading_past_to_the_record_the_probe_found_through_garbage():
    img = _img(blocks=1)
    hit = 4096 + WINDOW + 8192
    img.raw(4096, b"\xa5" * (hit - 4096))
    _far(img, hit)
    out, res = _events(img, img.header(clean=False), durable=Durable())
    assert out[3][:4] == ("finding", HOLE, 4096, hit) and out[4:] == [("entry", hit)]
    assert res.unaligned_damage == [] and res.stopped_by == "one sliding window past the first invalid block"


def test_a_record_exactly_one_window_past_the_damage_is_beyond_it():
    img = _img(blocks=1)
    _garbage(img, 4096)
    _far(img, 4096 + WINDOW)
    out, res = _events(img, img.header(clean=False))
    assert out[:3] == _entries(OFFS[:3])
    assert out[3:] == [("finding", BEYOND_WINDOW, 4096 + WINDOW, None, False, out[3][5], None)]


def test_the_window_counts_from_a_torn_body():
    img = _img()
    img.raw(8406 + 40, b"\xff\xff")
    far = 28672  # 20000 past the torn record at 8406 is 28406: past it; 20000 past 12288 is not
    _far(img, far)
    out, res = _events(img, img.header(clean=False, window=20000))
    assert out[-2][:4] == ("finding", TORN_TAIL, 8406, 12288) and out[-1][:3] == ("finding", BEYOND_WINDOW, far)


def test_a_hole_s_finding_carries_the_ring_and_the_crcs():
    img = _img()
    img.raw(4096 + 5, b"\x7f")  # the header's crc fails
    out, res = _events(img, img.header(clean=False))
    f = res.findings[0]
    assert (f.kind, f.offset, f.end_offset, f.reason) == (HOLE, 4096, 8192, "header crc mismatch")
    assert f.ring == img.ring and f.expected_crc is not None and f.found_crc is not None
    assert f.expected_crc != f.found_crc and f.to_json()["physical_offset"] == img.ring.physical(4096)


def test_block_at_or_before_needs_a_header_naming_its_offset():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(size, body(1, 0))  # the next lap's record, physically at the ring's start
    r = LogReader(img.dev, img.ring)
    assert ns._block_at_or_before(r, 100, 0) is None
    assert ns._block_at_or_before(r, size + 100, 0) == size


def test_block_at_or_before_takes_a_record_ending_on_the_lap_end():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(size - ALIGN, body(1, 0, ALIGN - 24 - 33))
    r = LogReader(img.dev, img.ring)
    assert ns._block_at_or_before(r, size - 1, 0) == size - ALIGN


def test_block_at_or_before_looks_at_its_floor_in_the_next_step():
    img = Image(128 * KiB)
    img.put(ALIGN, body(1, 0))
    r = LogReader(img.dev, img.ring)
    top = ALIGN + ALIGN + 64 * KiB  # after 64 KiB, the next step starts exactly at the floor
    assert ns._block_at_or_before(r, top, ALIGN) == ALIGN
    assert ns._block_at_or_before(r, top + 5, ALIGN) == ALIGN


# -- the fast path's unusual rows ------------------------------------------------------------------------------

def test_unusual_rows_include_the_trim_record_as_the_last_row():
    img = Image(64 * KiB)
    img.block([body(1, 0), b"junk", body(1, 1)])
    rows = LogReader(img.dev, img.ring).intact_run(0).rows
    assert ns._unusual_rows(rows, 3, 135, False) == [1, 2]
    assert ns._unusual_rows(rows, 3, 135, True) == [2]


def test_bulk_runs_hold_the_records_bodies():
    img = _img()
    out, res = _events(img, img.header(), bulk=True, keep=True)
    assert res.record_offsets == OFFS
    res2 = img.result(img.header())
    runs = [e for e in ns.NativeScan(img.dev, img.header(), res2, probe=False, keep_offsets=False).events(bulk=True)]
    entries = runs[0].entries()
    assert [e.offset for e in entries] == OFFS and entries[4].body == body(1, 4)
    assert entries[4].batch == StreamRecordBatch.decode(body(1, 4))


def test_entries_hold_the_records_bodies_and_batches():
    img = Image(64 * KiB, window=WINDOW)
    bodies = [body(1, 0, epoch=3), b"not a batch", body(2, 5, epoch=9)]
    img.block(bodies)
    res = img.result(img.header())
    got = [e for e in ns.NativeScan(img.dev, img.header(), res, probe=False, keep_offsets=True).events()
           if isinstance(e, Entry)]
    assert [e.body for e in got] == bodies
    assert got[0].batch == StreamRecordBatch.decode(bodies[0]) and got[0].batch.epoch == 3
    assert got[1].batch is None and got[2].batch.epoch == 9


@pytest.mark.parametrize("bulk", [False, True])
def test_unusual_rows_first_and_last_in_bulk(bulk):
    img = Image(64 * KiB, window=WINDOW)
    img.block([b"junk first", body(1, 0), b"junk last"])
    out, res = _events(img, img.header(), bulk=bulk)
    kinds = [e[0] if e[0] != "finding" else e[1] for e in out]
    if bulk:
        assert out[1] == ("entry", 0) and out[2] == ("run", 34, 1) and out[4] == ("entry", 141)
        assert kinds == [BAD_BATCH, "entry", "run", BAD_BATCH, "entry"]
    else:
        assert kinds == [BAD_BATCH, "entry", "entry", BAD_BATCH, "entry"]


def test_a_hole_closed_by_a_record_that_is_no_batch():
    img = _img(blocks=1)
    _garbage(img, 4096)
    img.block([b"junk after the hole", body(1, 5)], start=8192)
    out, res = _events(img, img.header(clean=False), probe=False)
    assert out[3][:4] == ("finding", HOLE, 4096, 8192) and out[4][:3] == ("finding", BAD_BATCH, 8192)


def test_a_lap_end_padding_record_alone_in_a_decode():
    img = Image(64 * KiB, window=WINDOW)
    size = img.ring.size
    img.block([body(1, 0), body(1, 1)], start=size - 2 * ALIGN)
    img.padding(size - ALIGN, ALIGN)
    img.block([body(1, 2)], start=size)
    for bulk in (False, True):
        out, res = _events(img, img.header(clean=False, trim=size - 2 * ALIGN + 107), bulk=bulk)
        assert out == ([("entry", size)] if not bulk else [("run", size, 1)]) and res.findings == []


def test_after_damage_records_are_looked_at_one_at_a_time():
    img = _img(blocks=1)
    _garbage(img, 4096)
    n = 10
    for start in range(8192, 28672, 4096):  # blocks from 8192 on, past the window (4096 + 16 KiB = 20480)
        img.block([body(1, n + i) for i in range(20)], start=start)
        n += 20
    out, res = _events(img, img.header(clean=False), probe=False)
    entries = [e[1] for e in out if e[0] == "entry"]
    assert entries[-1] == 16384 + 19 * 107 and len(entries) == 3 + 60 and res.stopped_by.startswith("one sliding")
    out, res = _events(img, img.header(clean=False), probe=False, bulk=True)
    assert sum(e[2] for e in out if e[0] == "run") == 3 + 60


def test_damage_inside_a_block_starts_the_window():
    img = _img(blocks=1)
    img.raw(321, b"\x01")
    n = 10
    for start in range(4096, 24576, 4096):
        img.block([body(1, n + i) for i in range(3)], start=start)
        n += 3
    out, res = _events(img, img.header(clean=False))
    assert out[-1] == ("finding", BEYOND_WINDOW, 20480, None, False, out[-1][5], None)
    assert [e[1] for e in out if e[0] == "entry"][-1] == 16384 + 214


def test_damage_inside_a_block_at_the_log_s_end_is_a_torn_tail():
    img = _img(blocks=1)
    img.raw(321, b"\x01\x02")
    out, res = _events(img, img.header(clean=False))
    f = res.findings[-1]
    assert out[-1] == ("finding", TORN_TAIL, 321, 4096, True,
                       "damaged record header inside a block (bad magic 0x01020000)", WINDOW_RULE)
    assert f.bytes_cause == Cause.GARBAGE


# -- the findings at the end, and the report while the scan runs ---------------------------------------------

def test_a_damaged_trim_record_at_the_end_carries_its_crcs_and_cause():
    img = _img(blocks=1)
    img.raw(214 + 5, b"\x7f")  # the header's crc fails
    out, res = _events(img, img.header(trim=214, clean=False))
    [f] = res.findings
    assert (f.kind, f.offset, f.end_offset, f.reason, f.ring) == (TRIM_RECORD, 214, None, "header crc mismatch",
                                                                  img.ring)
    assert f.bytes_cause == Cause.CHECKSUM_MISMATCH and None not in (f.expected_crc, f.found_crc)
    assert f.expected_crc != f.found_crc


def test_every_finding_at_the_end_is_in_the_log_s_ring():
    img = _img()
    img.raw(8406 + 40, b"\xff\xff")
    _, res = _events(img, img.header(clean=True, next_offset=16384))
    assert [f.kind for f in res.findings] == [TORN_TAIL, END_MISMATCH]
    assert all(f.ring == img.ring for f in res.findings)
    img2 = _img(blocks=1)
    _garbage(img2, 4096)
    _far(img2, 4096 + WINDOW + 8192)
    _, res = _events(img2, img2.header(clean=False))
    assert [f.kind for f in res.findings] == [BEYOND_WINDOW] and res.findings[0].ring == img2.ring
    _, res = _events(_img(), _img().header(clean=False), durable=Durable([(9000, "x")]))
    assert [f.kind for f in res.findings] == [END_MISMATCH] and res.findings[0].ring == img.ring


def test_a_torn_tail_at_a_block_start_ends_at_the_next_block():
    img = _img()
    img.raw(8192 + 40, b"\xff\xff")
    out, res = _events(img, img.header(clean=False))
    assert out[-1][:4] == ("finding", TORN_TAIL, 8192, 12288)


def test_a_torn_tail_just_before_a_block_boundary_ends_at_it():
    img = Image(64 * KiB, window=WINDOW)
    offs = img.block([body(1, 0, 4095 - 24 - 33), body(1, 1)])
    assert offs[1] == 4095
    img.raw(4095 + 40, b"\xff\xff")
    out, res = _events(img, img.header(clean=False))
    assert out[-1][:4] == ("finding", TORN_TAIL, 4095, 4096)


def test_the_report_counts_bytes_read_as_the_scan_goes():
    img = _img()
    res = img.result(img.header())
    scan = ns.NativeScan(img.dev, img.header(), res, probe=False, keep_offsets=False)
    events = scan.events()
    next(events)
    assert res.bytes_read == scan.reader.bytes_read > 0
    events.close()


class _Named:
    """A MemoryDevice's reads, with the name of the thread making each."""

    def __init__(self, dev):
        import threading
        self.inner, self.names, self.threading = dev, [], threading

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def pread_into(self, offset, buf):
        self.names.append(self.threading.current_thread().name)
        return self.inner.pread_into(offset, buf)


def test_a_scan_reads_ahead_only_when_asked(monkeypatch):
    monkeypatch.setattr(ns_ringread(), "CHUNK_BYTES", ALIGN)
    img = _big_log()
    for readahead in (False, True):
        dev = _Named(img.dev)
        h = img.header()
        res = img.result(h)
        kw = {"readahead": True} if readahead else {}
        got = [e for e in ns.NativeScan(dev, h, res, probe=False, keep_offsets=False, **kw).events(bulk=True)]
        assert sum(e.count for e in got) == 12
        assert ("walctl-scan-read" in dev.names) is readahead, dev.names


def test_the_trim_record_last_in_its_block_then_the_next_blocks():
    img = _img()
    for bulk in (False, True):
        out, res = _events(img, img.header(trim=214), bulk=bulk)
        assert sum(1 if e[0] == "entry" else e[2] for e in out) == 6 and res.records == 6


def test_block_at_or_before_passes_over_an_earlier_lap_s_record():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(0, body(1, 0))
    r = LogReader(img.dev, img.ring)
    assert ns._block_at_or_before(r, size + 100, 0) == 0


def test_after_the_trim_record_and_the_block_s_padding_the_scan_goes_on():
    img = _img(blocks=1)
    _far(img, 4096 + WINDOW + 8192)
    out, res = _events(img, img.header(trim=214, clean=False))
    assert res.stopped_by == "one sliding window past the first invalid block"
    assert [e[1] for e in out] == [BEYOND_WINDOW] and not res.complete
