"""Upload's plan (walctl/pipeline/upload/plan.py), unit by unit: a Segment's bookkeeping, the objects
plan_objects groups segments into, and the result upload returns (issue 32: each mutant of the
module is killed here, in milliseconds, not by a whole upload)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.format import record as rec
from walctl.pipeline.upload.plan import PlannedObject, Segment, UploadResult, plan_objects


def _seg(sid: int, nbytes: int, start: int = 0) -> Segment:
    seg = Segment(sid, start)
    if nbytes:
        seg.add(1000, start + 1, nbytes, 7)
    return seg


def test_a_new_segment_is_empty_at_its_start():
    seg = Segment(5, 40)
    assert (seg.stream_id, seg.start, seg.end, seg.bytes, seg.wal_end, seg.spool) == (5, 40, 40, 0, 0, None)
    assert len(seg) == 0 and list(seg.wal) == [] and list(seg.crcs) == []
    assert seg.wal.typecode == "q" and seg.crcs.typecode == "I"


def test_a_segment_remembers_each_batch_where_it_ends_and_its_bytes():
    seg = Segment(3, 10)
    seg.add(4096, 12, 100, 0xDEADBEEF)
    seg.add(4096 + rec.SIZE + 100, 15, 50, 1)
    assert list(seg.wal) == [4096, 4096 + rec.SIZE + 100]
    assert list(seg.crcs) == [0xDEADBEEF, 1]
    assert (seg.start, seg.end, seg.bytes, len(seg)) == (10, 15, 150, 2)
    # the WAL offset where the last batch's record ends: its header, then its body
    assert seg.wal_end == 4096 + rec.SIZE + 100 + rec.SIZE + 50


def test_a_planned_object_s_bytes_and_ranges():
    a, b = _seg(1, 300, start=5), _seg(2, 20, start=9)
    planned = PlannedObject("SSO", [(1, a), (2, b)])
    assert planned.data_bytes == 320
    assert planned.ranges() == [{"stream_id": 1, "start": 5, "end": 6, "bytes": 300},
                                {"stream_id": 2, "start": 9, "end": 10, "bytes": 20}]


@pytest.mark.parametrize("kind, streams, spool, spooled", [
    ("SO", 1, "live", True),
    ("SO", 1, None, False),  # not written as the scan read it
    ("SO", 1, "dropped", False),  # its spool was dropped: built the usual way
    ("SSO", 1, "live", False),  # a Stream Set Object is never spooled
    ("SO", 2, "live", False),
])
def test_only_a_live_spool_s_own_stream_object_is_spooled(kind, streams, spool, spooled):
    segs = [_seg(i + 1, 10) for i in range(streams)]
    if spool is not None:
        segs[0].spool = SimpleNamespace(dropped=spool == "dropped")
    assert PlannedObject(kind, [(s.stream_id, s) for s in segs]).spooled is spooled


def test_one_stream_is_one_stream_object_whatever_its_size():
    seg = _seg(7, 10)
    plan = plan_objects({7: seg}, split_size=1 << 30)
    assert [(p.kind, p.streams) for p in plan] == [("SO", [(7, seg)])]


def test_no_stream_plans_only_the_parts_after_gaps():
    assert plan_objects({}, 1) == []
    after = _seg(4, 10, start=50)
    assert [(p.kind, p.streams) for p in plan_objects({}, 1, [(4, after)])] == [("SO", [(4, after)])]


def test_streams_at_the_split_size_get_their_own_object_the_rest_share_one():
    small, exact, big, tiny = _seg(1, 99), _seg(2, 100), _seg(3, 101), _seg(4, 0)
    after = _seg(2, 5, start=200)
    plan = plan_objects({3: big, 1: small, 4: tiny, 2: exact}, split_size=100, after_gaps=[(2, after)])
    # sorted by stream id; at split_size exactly: an SO; the SSO after the SOs; the parts after gaps last
    assert [(p.kind, [sid for sid, _ in p.streams]) for p in plan] == [
        ("SO", [2]), ("SO", [3]), ("SSO", [1, 4]), ("SO", [2])]
    assert plan[0].streams[0][1] is exact and plan[2].streams == [(1, small), (4, tiny)]
    assert plan[3].streams == [(2, after)]


def test_every_stream_split_leaves_no_stream_set_object():
    a, b = _seg(1, 10), _seg(2, 10)
    assert [(p.kind, p.streams) for p in plan_objects({1: a, 2: b}, split_size=10)] == [
        ("SO", [(1, a)]), ("SO", [(2, b)])]


def test_one_stream_and_parts_after_gaps():
    seg, after = _seg(1, 10), _seg(1, 10, start=100)
    plan = plan_objects({1: seg}, split_size=1, after_gaps=[(1, after)])
    assert [(p.kind, p.streams) for p in plan] == [("SO", [(1, seg)]), ("SO", [(1, after)])]


def test_the_result_s_json_without_damage():
    result = UploadResult(objects=[{"key": "k"}], records=3, payload_bytes=30, skipped_records=1, last_offset=99,
                          trimmed_to=100, commit_number=4, dry_run=True, warnings=["w"], seconds=1.23456789,
                          gaps=[{"g": 1}], bad_records=[{"offset": 5}])
    assert result.to_json() == {
        "objects": [{"key": "k"}], "objects_made": 1, "records": 3, "payload_bytes": 30, "skipped_records": 1,
        "last_offset": 99, "trimmed_to": 100, "commit_number": 4, "dry_run": True, "seconds": 1.234568,
        "gaps": [{"g": 1}], "bad_records": [{"offset": 5}]}


def test_the_result_s_json_with_damage_names_the_evidence():
    result = UploadResult(damage=[{"offset": 1, "bytes": 2}], evidence_file="/tmp/e")
    data = result.to_json()
    assert data["damage"] == [{"offset": 1, "bytes": 2}] and data["evidence_file"] == "/tmp/e"
    assert data["objects_made"] == 0 and data["seconds"] == 0.0


def test_an_empty_result():
    assert UploadResult().to_json() == {
        "objects": [], "objects_made": 0, "records": 0, "payload_bytes": 0, "skipped_records": 0,
        "last_offset": None, "trimmed_to": None, "commit_number": None, "dry_run": False, "seconds": 0.0,
        "gaps": [], "bad_records": []}
