"""wal/findings.py and wal/gaps.py as plain functions (issue 32): a finding's JSON, cause and rule;
which crash hole explains a stream gap, which damage comes first, the gap's words and JSON."""

from __future__ import annotations

import pytest

from walctl.format.seal import SealDescriptor
from walctl.wal import findings as fi
from walctl.wal import gaps as g
from walctl.wal.findings import Cause, Durable, Finding, Kind
from walctl.wal.layout import Ring

RING = Ring(1 << 20)  # 1 MiB: 8 KiB of header slots, then the ring
SIZE = RING.size


# -- findings.py ----------------------------------------------------------------------------------

def test_a_finding_s_json_in_the_ring():
    f = Finding(Kind.HOLE, SIZE + 4100, RING, "zero fill", end_offset=SIZE + 8192, expected_crc=1, found_crc=2,
                explained=True, bytes_cause=Cause.ZERO_FILL)
    assert f.to_json() == {
        "type": "finding", "kind": "hole", "offset": SIZE + 4100, "physical_offset": RING.headers_size + 4100,
        "lap": 1, "offset_mod_4096": 4, "end_offset": SIZE + 8192, "length_bytes": 8192 - 4100,
        "reason": "zero fill", "expected_crc": 1, "found_crc": 2, "explained_by_crash": True, "cause": "zero_fill",
        "rule": fi.WINDOW_RULE, "explained_by_log_move": False}
    assert f.judged_corrupt is False


def test_a_header_slot_finding_has_no_ring_offset_and_its_hexdump_is_kept():
    f = Finding(Kind.BAD_HEADER_SLOT, 0, RING, "slot 1", physical_offset=4096, hexdump="00000000: 00",
                moved=True)
    out = f.to_json()
    assert (out["offset"], out["physical_offset"], out["lap"], out["offset_mod_4096"]) == (None, 4096, None, None)
    assert out["length_bytes"] is None and out["end_offset"] is None and out["hexdump"] == "00000000: 00"
    assert out["cause"] == "bad_header_slot" and out["rule"] == "a header write a crash tore: the other slot is used"
    assert out["explained_by_log_move"] is True and f.judged_corrupt is False
    assert "hexdump" not in Finding(Kind.HOLE, 0, RING, "r").to_json()


@pytest.mark.parametrize("kind, explained, bytes_cause, cause, rule", [
    (Kind.HOLE, False, None, Cause.GARBAGE, "damage where a crash cannot leave any"),
    (Kind.HOLE, False, Cause.STALE_LAP, Cause.STALE_LAP, "damage where a crash cannot leave any"),
    (Kind.HOLE, True, Cause.ZERO_FILL, Cause.ZERO_FILL, fi.WINDOW_RULE),
    (Kind.TORN_TAIL, True, Cause.CHECKSUM_MISMATCH, Cause.TORN_TAIL, fi.WINDOW_RULE),
    (Kind.TORN_TAIL, False, None, Cause.TORN_TAIL, "damage where a crash cannot leave any"),
    (Kind.BEYOND_WINDOW, False, Cause.ZERO_FILL, Cause.BEYOND_WINDOW, fi._RULE_OF_KIND[Kind.BEYOND_WINDOW]),
    (Kind.END_MISMATCH, False, None, Cause.END_MISMATCH, "the log ends before a point known durable"),
    (Kind.BAD_BATCH, False, None, Cause.BAD_BATCH, "a whole record whose body is no batch: written so, not a crash"),
    (Kind.TRIM_RECORD, False, Cause.TRUNCATED, Cause.TRUNCATED, "the trim record was checked when the trim was made"),
    (Kind.TRIM_RECORD, True, None, Cause.GARBAGE,
     "AutoMQ's reset() trims to just before the log's new start, where no record need be"),
    (Kind.BAD_HEADER_SLOT, False, Cause.ZERO_FILL, Cause.BAD_HEADER_SLOT,
     "a header write a crash tore: the other slot is used"),
    (Kind.DISCARDED, False, Cause.CHECKSUM_MISMATCH, Cause.CHECKSUM_MISMATCH, "damage where a crash cannot leave any"),
])
def test_a_finding_s_cause_and_rule_by_kind(kind, explained, bytes_cause, cause, rule):
    f = Finding(kind, 0, RING, "r", explained=explained, bytes_cause=bytes_cause)
    assert f.cause is cause and f.verdict_rule == rule
    assert f.judged_corrupt is (not explained)
    f.rule = "told"
    assert f.verdict_rule == "told" and f.to_json()["rule"] == "told"


def test_the_kinds_and_causes_are_the_json_words():
    assert fi.CAUSES == ("zero_fill", "stale_lap", "checksum_mismatch", "garbage", "truncated", "torn_tail",
                         "bad_header_slot", "beyond_window", "end_mismatch", "bad_batch")
    assert [str(k) for k in Kind] == ["hole", "torn_tail", "trim_record", "beyond_window", "end_mismatch",
                                      "bad_batch", "bad_header_slot", "discarded", "bad_padding"]
    assert (fi.HOLE, fi.TORN_TAIL, fi.TRIM_RECORD, fi.BEYOND_WINDOW, fi.END_MISMATCH, fi.BAD_BATCH,
            fi.BAD_HEADER_SLOT, fi.DISCARDED, fi.BAD_PADDING) == tuple(Kind)
    assert fi.CLEAN_RULE == "the log was closed cleanly: a crash leaves no damage in it"
    assert fi.WINDOW_RULE == "inside the last sliding window of a writer that did not close cleanly (AutoMQ's rule)"
    assert fi._RULE_OF_KIND[Kind.BEYOND_WINDOW] == ("a valid record lies more than the sliding window past the "
                                                    "damage: a crash writes only inside the window")


def test_durable_points_their_end_rule_and_words():
    d = Durable()
    assert d.end == 0 and d.rule_below(0) is None and d.describe() is None and repr(d) == "Durable([])"
    d.add(0, "nothing")  # offset 0 says nothing: not a point
    assert d.points == []
    d.add(8192, "the header's nextOffset")
    d.add(20480, "a record past the window at", ", read whole")
    d.add(4096, "the trim")
    assert d.end == 20480
    assert d.rule_below(0) == "below the header's nextOffset 8,192"  # the first added, not the nearest
    assert d.rule_below(8191) == "below the header's nextOffset 8,192"
    assert d.rule_below(8192) == "below a record past the window at 20,480, read whole"
    assert d.rule_below(20479) == "below a record past the window at 20,480, read whole"
    assert d.rule_below(20480) is None
    assert d.describe() == "a record past the window at 20,480, read whole"
    assert Durable([(4096, "a", "!"), (1, "b")]).points == [(4096, "a", "!"), (1, "b", "")]
    assert repr(Durable([(1, "b")])) == "Durable([(1, 'b', '')])"
    assert Durable([(1, "b")]).add(-1, "c") is None


# -- gaps.py --------------------------------------------------------------------------------------

def _seal(streams=(), truncated=False, sealed_ns=1_700_000_000_123_456_789, crashed_ns=1_700_000_000_000_000_000):
    return SealDescriptor(100, 200, sealed_ns, crashed_ns, tuple(streams), truncated)


def test_a_crash_hole_s_words_and_json():
    open_hole = g.CrashHole(4096, 8192)
    assert open_hole.describe() == "a crash hole at WAL offset 4096 (not sealed yet)"
    assert open_hole.to_json() == {
        "type": "crash_hole", "cause": "crash", "hole_start": 4096, "hole_end": 8192, "length_bytes": 4096,
        "sealed": False, "record_offset": None, "sealed_at_ns": None, "sealed_at": None,
        "crashed_header_timestamp_ns": None, "streams": [], "streams_truncated": False}
    assert g.CrashHole(4096, None).to_json()["length_bytes"] is None
    sealed = g.CrashHole(4096, 8192, _seal([(3, 5, 9)], truncated=True), record_offset=12288)
    assert sealed.describe() == ("a crash hole at WAL offset 4096, sealed at 2023-11-14T22:13:20.123456Z "
                                 "(the crashed writer's last header: 2023-11-14T22:13:20.000000Z)")
    assert sealed.to_json() == {
        "type": "sealed_hole", "cause": "crash", "hole_start": 4096, "hole_end": 8192, "length_bytes": 4096,
        "sealed": True, "record_offset": 12288, "sealed_at_ns": 1_700_000_000_123_456_789,
        "sealed_at": "2023-11-14T22:13:20.123456Z", "crashed_header_timestamp_ns": 1_700_000_000_000_000_000,
        "streams": [{"stream_id": 3, "from": 5, "to": 9}], "streams_truncated": True}


def test_format_ns_is_utc_to_the_microsecond_or_the_raw_number():
    assert g.format_ns(0) == "1970-01-01T00:00:00.000000Z"
    assert g.format_ns(1_999_999_999) == "1970-01-01T00:00:01.999999Z"
    assert g.format_ns(10 ** 30) == f"{10 ** 30} ns"


def _gap(before, after, sid=1, lo=5, hi=9):
    return g.StreamGap(sid, lo, hi, before, after)


def test_explain_takes_the_first_hole_strictly_between_the_two_records():
    a, b = g.CrashHole(1000, 2000), g.CrashHole(3000, 4000)
    assert g.explain(_gap(500, 5000), [a, b]) is a
    assert g.explain(_gap(1000, 5000), [a, b]) is b  # the record before the gap is at the hole: not between
    assert g.explain(_gap(999, 1000), [a, b]) is None  # the record after the gap is at the hole start
    assert g.explain(_gap(999, 1001), [a, b]) is a
    assert g.explain(_gap(None, 3001), [b, a]) is b  # no record before in the WAL: any hole before the after
    assert g.explain(_gap(None, 1000), [a]) is None
    assert g.explain(_gap(4000, 9000), [a, b]) is None and g.explain(_gap(0, 9000), []) is None


def test_a_sealed_hole_explains_only_the_gaps_its_descriptor_lists():
    listed = g.CrashHole(1000, 2000, _seal([(1, 5, 9)]))
    other = g.CrashHole(1500, 2000, _seal([(2, 5, 9)]))
    truncated = g.CrashHole(1600, 2000, _seal([(2, 5, 9)], truncated=True))
    assert g.explain(_gap(500, 3000), [listed]) is listed
    assert g.explain(_gap(500, 3000, lo=5, hi=10), [listed]) is None  # not this gap: a later one
    assert g.explain(_gap(500, 3000), [other, listed]) is listed
    assert g.explain(_gap(500, 3000), [other]) is None
    assert g.explain(_gap(500, 3000), [other, truncated]) is truncated  # its list was cut: it may be there
    assert g.explain(_gap(None, 3000), [other]) is other  # the record before left the log: any hole


def test_damage_is_the_unexplained_ring_findings_of_the_damage_kinds_in_log_order():
    f = [Finding(Kind.HOLE, 900, RING, "a"), Finding(Kind.HOLE, 100, RING, "b", explained=True),
         Finding(Kind.TORN_TAIL, 300, RING, "c"), Finding(Kind.TRIM_RECORD, 200, RING, "d"),
         Finding(Kind.END_MISMATCH, 50, RING, "e"), Finding(Kind.BAD_BATCH, 10, RING, "f"),
         Finding(Kind.BEYOND_WINDOW, 20, RING, "g"), Finding(Kind.HOLE, 30, RING, "h", physical_offset=0),
         Finding(Kind.BAD_HEADER_SLOT, 0, RING, "i")]
    assert [x.reason for x in g.damage_of(f)] == ["e", "d", "c", "a"]


def test_judge_puts_damage_between_the_records_before_any_crash_hole():
    hole = g.CrashHole(1000, 2000)
    damage = [Finding(Kind.HOLE, 1500, RING, "x"), Finding(Kind.HOLE, 2500, RING, "y")]
    assert g.judge(_gap(500, 3000), [hole], damage) == (None, damage[0])
    assert g.judge(_gap(1500, 3000), [hole], damage) == (None, damage[1])
    assert g.judge(_gap(None, 1600), [hole], damage) == (None, damage[0])
    assert g.judge(_gap(500, 1500), [hole], damage) == (hole, None)  # the damage is at the record after
    assert g.judge(_gap(2500, 3000), [hole], damage) == (None, None)
    assert g.judge(_gap(500, 3000), [hole], []) == (hole, None)


class _B:
    def __init__(self, sid, base, count=1):
        self.stream_id, self.base_offset, self.count = sid, base, count


def test_the_gap_tracker_collects_each_jump_of_a_stream():
    t = g.GapTracker()
    assert t.add(0, None) is None and t.last == {}
    assert t.add(0, _B(1, 10, 3)) is None  # a stream's first batch: no gap before it
    assert t.add(100, _B(2, 0)) is None
    assert t.add(200, _B(1, 13, 2)) is None  # contiguous
    gap = t.add(300, _B(1, 20))
    assert gap == g.StreamGap(1, 15, 20, 200, 300) and gap.spec == "1:15-20"
    assert t.add(400, _B(1, 21)) is None
    assert t.add(500, _B(1, 5)) is None  # back (a re-append): no gap, and the stream restarts there
    assert t.last[1] == (500, 6)
    assert t.add(600, _B(1, 7)) == g.StreamGap(1, 6, 7, 500, 600)
    assert t.gaps == [gap, g.StreamGap(1, 6, 7, 500, 600)]


def test_holes_of_a_scan_are_its_explained_holes_and_sealed_holes_in_log_order():
    sealed = [g.CrashHole(500, 600, _seal())]
    f = [Finding(Kind.HOLE, 900, RING, "a", end_offset=1000, explained=True), Finding(Kind.HOLE, 100, RING, "b"),
         Finding(Kind.TORN_TAIL, 200, RING, "c", explained=True),
         Finding(Kind.HOLE, 300, RING, "d", end_offset=400, explained=True)]
    assert g.holes_of(f, sealed) == [g.CrashHole(300, 400), sealed[0], g.CrashHole(900, 1000)]


def test_a_gap_explained_by_a_sealed_crash_hole():
    hole = g.CrashHole(1000, 2000, _seal([(1, 5, 9)]))
    gap = _gap(500, 3000)
    out = g.gap_to_json(gap, hole)
    assert out == {"type": "stream_gap", "stream_id": 1, "from": 5, "to": 9, "before_wal_offset": 500,
                   "after_wal_offset": 3000, "cause": "crash", "hole_start": 1000, "sealed": True,
                   "sealed_at_ns": 1_700_000_000_123_456_789, "damage_offset": None, "accept_gap": "1:5-9",
                   "explanation": "stream 1: offsets 5..9 are missing: lost in " + hole.describe() + "; they were "
                                  "never acknowledged. upload keeps the gap (the records after it go into their own "
                                  "object); nothing to do"}
    out = g.gap_to_json(gap, g.CrashHole(1000, 2000), accepted=True)
    assert (out["cause"], out["sealed"], out["sealed_at_ns"], out["hole_start"]) == ("crash", False, None, 1000)


def test_a_gap_across_damage_accepted_or_unexplained():
    gap = _gap(None, 3000, sid=4, lo=0, hi=2)
    damage = Finding(Kind.TORN_TAIL, 1500, RING, "x")
    out = g.gap_to_json(gap, None, damage=damage)
    assert (out["cause"], out["damage_offset"], out["hole_start"], out["sealed"], out["sealed_at_ns"]) == (
        "corruption", 1500, None, False, None)
    assert out["explanation"] == (
        "stream 4: offsets 0..2 are missing: lost in the damage at WAL offset 1500 (torn_tail, corruption: "
        "damage where a crash cannot leave any); they were acknowledged, no crash lost them. upload refuses: "
        "restore them from a copy, or save every intact record with 'walctl salvage DEVICE --store URL' (these "
        "offsets recorded in the manifest as a gap)")
    out = g.gap_to_json(gap, None, accepted=True, damage=damage)
    assert out["cause"] == "accepted" and out["damage_offset"] == 1500
    assert out["explanation"] == "stream 4: offsets 0..2 are missing: accepted by the operator (upload --accept-gap 4:0-2)"
    out = g.gap_to_json(gap, None)
    assert out["cause"] == "unexplained" and out["damage_offset"] is None
    assert g.explanation(gap, None) == out["explanation"]  # not accepted unless told
    assert g.explanation(gap, None, damage=damage).startswith("stream 4: offsets 0..2 are missing: lost in the damage")
    assert out["explanation"] == (
        "stream 4: offsets 0..2 are missing and no crash explains it (a wrong --base-offset, or damage): upload "
        "refuses. If these offsets are really gone, run 'walctl upload ... --accept-gap 4:0-2' (recorded in the "
        "manifest; nothing else is skipped)")
    assert g.explanation(gap, g.CrashHole(1, 2), damage=damage).startswith("stream 4: offsets 0..2 are missing: "
                                                                           "lost in a crash hole at WAL offset 1 ")
