"""What ``walctl read`` hands back (walctl/pipeline/readresult.py): a gap's finding (recorded or
damage, and its words), which findings are corruption, and the summary's JSON with its
``complete`` verdict (issue 32: each of the module's mutants killed here)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.pipeline import readresult as rr
from walctl.store import manifest as mf


def _gap(sid, lo, hi, cause="crash"):
    return mf.StreamGap(sid, lo, hi, cause, None, False, None, None, None, 1, 0.0)


def test_a_gap_no_recorded_gap_covers_is_damage():
    doc = SimpleNamespace(stream_gaps=None)
    f = rr.gap_finding(doc, 3, 10, 20)
    assert (f.kind, f.message, f.start_offset, f.end_offset) == (
        "gap", "stream 3: offsets [10, 20) are in no live object", 10, 20)
    assert f.corrupt


@pytest.mark.parametrize("gap", [_gap(4, 10, 20), _gap(3, 11, 20), _gap(3, 10, 19)])
def test_a_recorded_gap_must_be_the_stream_s_and_cover_the_offsets(gap):
    f = rr.gap_finding(SimpleNamespace(stream_gaps=[gap]), 3, 10, 20)
    assert f.kind == rr.GAP


@pytest.mark.parametrize("lo, hi", [(10, 20), (12, 15), (10, 12), (18, 20)])
def test_a_recorded_gap_covering_the_offsets_is_a_known_loss(lo, hi):
    doc = SimpleNamespace(stream_gaps=[_gap(9, 0, 5), _gap(3, 10, 20, "accepted")])
    f = rr.gap_finding(doc, 3, lo, hi)
    assert (f.kind, f.start_offset, f.end_offset) == ("recorded_gap", lo, hi)
    assert f.message == (f"stream 3: offsets [{lo}, {hi}) were recorded lost by an upload (cause accepted; the "
                         "manifest's stream_gaps)")
    assert not f.corrupt


def test_finding_kinds_and_which_are_corruption():
    assert (rr.GAP, rr.OVERLAP, rr.DAMAGE, rr.MISSING, rr.WAL_DAMAGE) == (
        "gap", "overlap", "damage", "missing_object", "wal_damage")
    assert (rr.TRIMMED, rr.WAL_MOVED, rr.RECORDED_GAP) == rr.INFORMATIONAL == ("trimmed", "wal_moved", "recorded_gap")
    for kind in (rr.GAP, rr.OVERLAP, rr.DAMAGE, rr.MISSING, rr.WAL_DAMAGE):
        assert rr.ReadFinding(kind, "m").corrupt
    for kind in rr.INFORMATIONAL:
        assert not rr.ReadFinding(kind, "m").corrupt


def test_a_finding_s_json():
    f = rr.ReadFinding(rr.DAMAGE, "bad crc", 1, 2, 7, "k/7", 4096)
    assert f.to_json() == {"type": "finding", "kind": "damage", "message": "bad crc", "start_offset": 1,
                           "end_offset": 2, "object_id": 7, "key": "k/7", "position": 4096, "corrupt": True}
    assert rr.ReadFinding(rr.TRIMMED, "m").to_json()["corrupt"] is False


def test_the_summary_s_json():
    s = rr.ReadSummary(5, 10, 99, 50, records=3, payload_bytes=30, wal_records=1, objects=2, gets=9, block_gets=4,
                       lists=1, bytes_read=1234, findings=2, corrupt_findings=0, next_offset=13, manifest_number=8,
                       polls=6, retries=2)
    assert s.to_json() == {
        "type": "summary", "stream_id": 5, "from_offset": 10, "to_offset": 99, "limit": 50, "records": 3,
        "payload_bytes": 30, "wal_records": 1, "objects": 2, "gets": 9, "block_gets": 4, "lists": 1,
        "bytes_read": 1234, "findings": 2, "corrupt_findings": 0, "next_offset": 13, "manifest_number": 8,
        "polls": 6, "retries": 2, "log_moved": False, "complete": True}


@pytest.mark.parametrize("limited, corrupt, moved", [(True, 0, False), (False, 1, False), (False, 0, True)])
def test_a_summary_is_complete_only_unlimited_without_corruption_and_with_the_wal_served(limited, corrupt, moved):
    s = rr.ReadSummary(1, None, None, None, limited=limited, corrupt_findings=corrupt, log_moved=moved)
    data = s.to_json()
    assert data["complete"] is False and data["log_moved"] is moved and data["corrupt_findings"] == corrupt
