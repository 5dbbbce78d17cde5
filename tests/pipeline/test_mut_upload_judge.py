"""Upload's judgement of a scan (walctl/pipeline/upload/judge.py) on a scan's state made by hand:
what it refuses (and its words), what it lets through, what it hands the planner (issue 32: each of
the module's mutants killed here, in milliseconds, not by whole uploads of damaged WALs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.errors import CorruptionError, UsageError
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.pipeline.upload import judge as judge_mod
from walctl.pipeline.upload.plan import UploadResult
from walctl.store import manifest as mf
from walctl.wal import verdict
from walctl.wal.findings import BAD_BATCH, HOLE, TORN_TAIL
from walctl.wal.gaps import CrashHole


def _finding(kind, offset, end=None, explained=True, reason="why"):
    return SimpleNamespace(kind=kind, offset=offset, end_offset=end, explained=explained, reason=reason)


class _Records:
    """scanindex._Records' side the judge sees: ``streams`` records its arguments."""

    def __init__(self, *, skipped=(), bad=(), mark_found=None, not_in_store=None, gaps=()):
        self.skipped, self.bad, self.mark_found, self.not_in_store = list(skipped), list(bad), mark_found, not_in_store
        self.gaps = list(gaps)
        self.called = None

    def streams(self, holes, accepted, wal_path, warnings, gaps, damage):
        self.called = (holes, accepted, wal_path, damage)
        gaps.extend(self.gaps)
        warnings.append("from the records")  # (the result's own list: what they warn reaches the result)
        return {1: "seg"}, [(2, "after")]


def _run(*, findings=(), scan_findings=None, sealed=(), accept=(), salvage=False, live=False, mark=None,
         records=None, stream_gaps=None, start_offset=0, trim_entry=None):
    return SimpleNamespace(
        scan=SimpleNamespace(findings=list(findings) if scan_findings is None else scan_findings,
                             sealed_holes=list(sealed), start_offset=start_offset, trim_entry=trim_entry,
                             durable="judged"),  # (as salvage's scan: judged by the durable points)
        findings=list(findings), opts=SimpleNamespace(accept_gaps=list(accept), salvage=salvage),
        result=UploadResult(), records=records or _Records(), wal_path="/dev/wal", live=live, damage=[],
        doc=SimpleNamespace(stream_gaps=stream_gaps), mark=mark, node_key="5", streams=None, after_gaps=None)


def test_a_clean_scan_hands_the_planner_its_streams():
    records = _Records(skipped=[1, 2, 3])
    u = _run(records=records, accept=[[3, 1, 4]],
             sealed=[CrashHole(900, 1000)], findings=[_finding(HOLE, 100, 200), _finding(HOLE, 300, 400, False)],
             scan_findings=[])
    records.gaps = [{"stream_id": 3, "from": 1, "to": 4, "cause": "accepted"}]
    judge_mod.judge(u)
    assert (u.streams, u.after_gaps) == ({1: "seg"}, [(2, "after")])
    assert u.result.skipped_records == 3 and u.result.warnings == ["from the records"]
    holes, accepted, wal_path, damage = records.called
    # the explained hole and the sealed one, in log order; the accepted gaps as tuples
    assert [(h.start, h.end) for h in holes] == [(100, 200), (900, 1000)]
    assert accepted == {(3, 1, 4)} and wal_path == "/dev/wal" and damage == []


def test_a_live_writer_s_findings_are_no_crash_holes():
    records = _Records()
    u = _run(records=records, live=True, findings=[_finding(HOLE, 100, 200)], scan_findings=[])
    judge_mod.judge(u)
    assert records.called[0] == []


def test_an_accept_gap_matching_nothing_is_refused():
    u = _run(accept=[(9, 10, 15), (8, 1, 2)], stream_gaps=[mf.StreamGap(8, 1, 2, "accepted", None, False, None,
                                                                           None, None, 5, 0.0)])
    with pytest.raises(UsageError) as err:
        judge_mod.judge(u)
    assert err.value.args[0] == "--accept-gap 9:10-15 matches no gap in what this upload would upload"
    assert err.value.where == "/dev/wal"
    assert err.value.hint == ("'walctl recover' and 'walctl status' list the gaps; give exactly stream:from-to "
                              "of one")
    # the one already in the manifest was only a warning (it sorts first)
    assert u.result.warnings == ["from the records", "--accept-gap 8:1-2: already recorded in the manifest"]


def test_an_accept_gap_already_recorded_is_a_warning():
    u = _run(accept=[(8, 1, 2), (9, 3, 4)],
             stream_gaps=[mf.StreamGap(8, 1, 2, "accepted", None, False, None, None, None, 5, 0.0),
                          mf.StreamGap(9, 3, 4, "crash", None, False, None, None, None, 5, 0.0)])
    judge_mod.judge(u)
    assert u.result.warnings == ["from the records", "--accept-gap 8:1-2: already recorded in the manifest",
                                 "--accept-gap 9:3-4: already recorded in the manifest"]


def test_an_accept_gap_the_upload_uses_is_neither_refused_nor_warned():
    records = _Records(gaps=[{"stream_id": 7, "from": 10, "to": 15, "cause": "accepted"},
                             {"stream_id": 8, "from": 1, "to": 2, "cause": "crash"}])
    u = _run(records=records, accept=[(7, 10, 15)])
    judge_mod.judge(u)
    assert u.result.warnings == ["from the records"]
    u = _run(records=_Records(gaps=records.gaps), accept=[(8, 1, 2)])  # a crash gap: not the accepted one
    with pytest.raises(UsageError):
        judge_mod.judge(u)


def test_damage_no_crash_explains_is_raised_with_upload_s_hint(monkeypatch):
    seen = []
    error = CorruptionError("damage")

    def unexplained_error(findings, where, *, framing_only=False, hint=None, summary=None):
        seen.append((findings, where, framing_only, hint))
        return error

    monkeypatch.setattr(verdict, "unexplained_error", unexplained_error)
    findings = [_finding(TORN_TAIL, 10, explained=False)]
    u = _run(findings=findings)
    with pytest.raises(CorruptionError) as err:
        judge_mod.judge(u)
    assert err.value is error
    assert seen == [(findings, "/dev/wal", True, "nothing uploaded; inspect with 'walctl recover', save the "
                                                 "intact records with 'walctl salvage'")]


def test_salvage_keeps_the_unexplained_damage_as_its_evidence(monkeypatch):
    monkeypatch.setattr(verdict, "unexplained_error", lambda *a, **k: CorruptionError("damage"))
    lost = _finding(TORN_TAIL, 10, explained=False)
    findings = [lost, _finding(TORN_TAIL, 20, explained=True), _finding(BAD_BATCH, 30, explained=False)]
    records = _Records()
    u = _run(findings=findings, salvage=True, records=records)
    judge_mod.judge(u)
    assert u.damage == [lost] and records.called[3] == [lost]


def test_explained_findings_raise_nothing(monkeypatch):
    monkeypatch.setattr(verdict, "unexplained_error", lambda *a, **k: None)
    u = _run(findings=[_finding(TORN_TAIL, 10)], salvage=True)
    judge_mod.judge(u)
    assert u.damage == []


def test_the_bad_records_are_listed_with_the_scan_s_reason():
    records = _Records(bad=[SimpleNamespace(offset=30, body_bytes=12), SimpleNamespace(offset=60, body_bytes=3)])
    findings = [_finding(BAD_BATCH, 30, reason="stream id out of range"), _finding(HOLE, 40, 50)]
    u = _run(findings=findings, scan_findings=[], records=records)
    judge_mod.judge(u)
    assert u.result.bad_records == [
        {"offset": 30, "body_bytes": 12, "reason": "stream id out of range"},
        {"offset": 60, "body_bytes": 3, "reason": "body is not a StreamRecordBatch"}]
    assert [(h.start, h.end) for h in records.called[0]] == [(40, 50)]  # the bad batch is no hole


def test_records_skipped_that_the_store_lacks_are_refused():
    u = _run(records=_Records(not_in_store=4096))
    with pytest.raises(CorruptionError) as err:
        judge_mod.judge(u)
    assert err.value.args[0] == ("the store says this WAL (node 5) is uploaded up to offset -1, but the record at "
                                 "4096 is not in the store")
    assert err.value.where == "/dev/wal" and err.value.offset == 4096
    assert err.value.hint == ("the WAL was re-initialised, or two WALs share a node id: give each WAL its own "
                              "--node-id")


def _entry(offset, batch):
    return SimpleNamespace(offset=offset, batch=batch, body=batch.encode() if batch is not None else b"")


def test_the_mark_s_record_found_at_the_trim_entry_lets_the_upload_skip():
    batch = StreamRecordBatch(3, 0, 7, 1, b"body")
    mark = mf.UploadMark(512, 3, 7, crc32c(batch.encode()))
    judge_mod.judge(_run(mark=mark, start_offset=512, trim_entry=_entry(512, batch)))
    # also when found by the scan (not at the trim entry)
    judge_mod.judge(_run(mark=mark, start_offset=0, records=_Records(mark_found=(512, mark)),
                         trim_entry=_entry(100, batch)))
    # trimmed past the mark: nothing to check
    judge_mod.judge(_run(mark=mark, start_offset=513))


@pytest.mark.parametrize("case", ["other body", "no batch at the trim entry", "not found", "found elsewhere"])
def test_a_wal_without_the_mark_s_record_is_refused(case):
    batch = StreamRecordBatch(3, 0, 7, 1, b"body")
    mark = mf.UploadMark(512, 3, 7, crc32c(batch.encode()))
    trim_entry, found = None, None
    if case == "other body":
        trim_entry = _entry(512, StreamRecordBatch(3, 0, 7, 1, b"BODY"))
    elif case == "no batch at the trim entry":
        trim_entry = _entry(512, None)
        found = (512, mark)  # not looked at: the trim entry is the record at the mark's offset
    elif case == "found elsewhere":
        found = (600, mf.UploadMark(600, 3, 8, 1))
    u = _run(mark=mark, start_offset=512, trim_entry=trim_entry, records=_Records(mark_found=found))
    with pytest.raises(CorruptionError) as err:
        judge_mod.judge(u)
    assert err.value.args[0] == ("this WAL does not hold the record that node 5 last uploaded (offset 512, stream 3, "
                                 "stream offset 7): refusing to skip or trim anything")
    assert err.value.where == "/dev/wal" and err.value.offset == 512
    assert err.value.hint == ("the WAL was re-initialised, or two WALs share a node id: give each WAL its own "
                              "--node-id")


def test_records_the_store_lacks_past_the_mark_name_the_mark():
    batch = StreamRecordBatch(3, 0, 7, 1, b"body")
    mark = mf.UploadMark(512, 3, 7, crc32c(batch.encode()))
    u = _run(mark=mark, start_offset=600, records=_Records(not_in_store=700))
    with pytest.raises(CorruptionError) as err:
        judge_mod.judge(u)
    assert "uploaded up to offset 512, but the record at 700 is not in the store" in err.value.args[0]
