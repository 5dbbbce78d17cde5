"""wal/verdict.py exactly (issue 32): which findings a crash does not explain and the error naming
the first with its rule, the durable points a walctl header slot records (FORMATS.md 1.4, "which
rule decides") and the rule naming the point a finding lies below, the header-slot findings,
recover's filters, counts, warnings and summary, and recover itself on small WAL files."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.errors import CorruptionError
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import SHUTDOWN_UNGRACEFUL, WalHeader
from walctl.format.seal import SealDescriptor
from walctl.wal import verdict as vd
from walctl.wal.findings import Durable, Finding, Kind
from walctl.wal.gaps import CrashHole, StreamGap
from walctl.wal.layout import Ring
from walctl.wal.ringread import ScanResult

CAPACITY = 64 * 1024
RING = Ring(CAPACITY)
HEADER = WalHeader(CAPACITY, sliding_window_max_length=8192)


def _f(kind=Kind.HOLE, offset=4096, *, explained=False, moved=False, physical=None, rule=None, end=None,
       reason="r"):
    f = Finding(kind, offset, RING, reason, end_offset=end, explained=explained, physical_offset=physical, rule=rule)
    f.moved = moved
    return f


# -- which findings a crash does not explain ---------------------------------------------------

def test_unexplained_keeps_the_findings_judged_corrupt_in_order():
    a, b, c, d = _f(offset=1), _f(offset=2, explained=True), _f(offset=3, moved=True), _f(Kind.BAD_BATCH, 4)
    e = _f(Kind.END_MISMATCH, 5)
    assert vd.unexplained([]) == [] and vd.unexplained(None) == []
    assert vd.unexplained([a, b, c, d, e]) == [a, d, e]
    assert vd.unexplained([a, b, c, d, e], framing_only=True) == [a, e]  # bad batches: framing intact
    assert vd.unexplained([d], framing_only=False) == [d]


def test_unexplained_error_names_the_first_with_its_rule():
    assert vd.unexplained_error([], "dev") is None
    assert vd.unexplained_error([_f(explained=True)], "dev") is None
    assert vd.unexplained_error([_f(Kind.BAD_BATCH)], "dev", framing_only=True) is None
    first = _f(Kind.HOLE, 8192, reason="all zeros", rule="below the checkpoint's log end 12,288")
    err = vd.unexplained_error([_f(explained=True), first, _f(Kind.BAD_BATCH, 9000)], "/dev/x")
    assert isinstance(err, CorruptionError)
    assert str(err) == ("2 findings a crash does not explain; first: hole at offset 8192 (all zeros; below the "
                        "checkpoint's log end 12,288)")
    assert (err.where, err.offset, err.hint, err.summary) == ("/dev/x", 8192, "inspect with 'walctl recover'", None)
    one = vd.unexplained_error([_f(Kind.BAD_BATCH, 100, reason="no batch")], "d", hint=None, summary={"a": 1})
    assert str(one) == ("1 finding a crash does not explain; first: bad_batch at offset 100 (no batch; a whole "
                        "record whose body is no batch: written so, not a crash)")
    assert one.hint is None and one.summary == {"a": 1} and one.offset == 100
    framed = vd.unexplained_error([_f(Kind.BAD_BATCH, 1), _f(Kind.HOLE, 2)], "d", framing_only=True)
    assert str(framed).startswith("1 finding a crash does not explain; first: hole at offset 2 ")


# -- the durable points of a header slot --------------------------------------------------------

def _state(header, checkpoint=None, bad=()):
    return SimpleNamespace(header=header, checkpoint=checkpoint, bad_slots=list(bad))


def test_an_automq_wal_has_no_durable_points():
    assert vd.durable_points(_state(HEADER.with_(flavour="automq-v1"), Checkpoint(log_end=5000))) is None


def test_a_checkpoint_the_header_agrees_with_is_the_only_point():
    for next_offset in (8192, 4096, 0):  # at or below the checkpoint's end aligned up
        d = vd.durable_points(_state(HEADER.with_(next_offset=next_offset, shutdown_type=SHUTDOWN_UNGRACEFUL),
                                     Checkpoint(log_end=5000)))
        assert d.points == [(5000, "the checkpoint's log end", "")]
    d = vd.durable_points(_state(HEADER.with_(next_offset=8192), Checkpoint(log_end=8192)))
    assert d.points == [(8192, "the checkpoint's log end", "")]


def test_a_clean_header_past_its_checkpoint_adds_its_next_offset():
    d = vd.durable_points(_state(HEADER.with_(next_offset=12288), Checkpoint(log_end=5000)))
    assert d.points == [(5000, "the checkpoint's log end", ""), (12288, "the clean header's nextOffset", "")]
    d = vd.durable_points(_state(HEADER.with_(next_offset=12288)))
    assert d.points == [(12288, "the clean header's nextOffset", "")]
    assert vd.durable_points(_state(HEADER.with_(next_offset=0))).points == []


def test_a_crashed_header_is_durable_up_to_its_next_offset_less_a_block():
    crashed = HEADER.with_(shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=16384)
    d = vd.durable_points(_state(crashed))
    assert d.points == [(12288, "the header's recorded end", " (its nextOffset 16,384 less one 4 KiB block)")]
    d = vd.durable_points(_state(crashed, Checkpoint(log_end=4000)))
    assert d.points == [(4000, "the checkpoint's log end", ""),
                        (12288, "the header's recorded end", " (its nextOffset 16,384 less one 4 KiB block)")]
    assert vd.durable_points(_state(crashed.with_(next_offset=4096))).points == []
    big = crashed.with_(next_offset=4096 * 1000)
    assert vd.durable_points(_state(big)).points[0][2] == " (its nextOffset 4,096,000 less one 4 KiB block)"


def test_judge_by_durable_turns_crash_damage_below_a_point_into_corruption():
    durable = Durable([(8192, "the checkpoint's log end"), (16384, "the clean header's nextOffset")])
    hole, torn, past = _f(Kind.HOLE, 4096, explained=True), _f(Kind.TORN_TAIL, 8192, explained=True), \
        _f(Kind.HOLE, 16384, explained=True)
    slot = _f(Kind.HOLE, 0, explained=True, physical=4096)
    other = _f(Kind.TRIM_RECORD, 100, explained=True)
    corrupt = _f(Kind.HOLE, 100, rule="mine")
    vd.judge_by_durable([hole, torn, past, slot, other, corrupt], durable)
    assert (hole.explained, hole.rule) == (False, "below the checkpoint's log end 8,192")
    assert (torn.explained, torn.rule) == (False, "below the clean header's nextOffset 16,384")
    assert (past.explained, past.rule) == (True, None)  # at the last point: not below it
    assert (slot.explained, slot.rule) == (True, None) and (other.explained, other.rule) == (True, None)
    assert (corrupt.explained, corrupt.rule) == (False, "mine")


def test_judge_by_durable_without_points_or_findings_changes_nothing():
    hole = _f(Kind.HOLE, 4096, explained=True)
    vd.judge_by_durable([hole], None)
    assert hole.explained and hole.rule is None
    vd.judge_by_durable([], Durable([(8192, "x")]))
    vd.judge_by_durable([hole], Durable())
    assert hole.explained and hole.rule is None


def test_a_finding_for_each_damaged_header_slot():
    slot = SimpleNamespace(index=1, error="bad magic", position=4096)
    found = vd.header_slot_findings(_state(HEADER, bad=[slot]))
    assert found == [Finding(Kind.BAD_HEADER_SLOT, 0, RING, "header slot 1: bad magic", explained=True,
                             physical_offset=4096)]
    assert vd.header_slot_findings(_state(HEADER)) == []
    two = vd.header_slot_findings(_state(HEADER.with_(capacity=1 << 20), bad=[
        SimpleNamespace(index=0, error="e0", position=0), slot]))
    assert [(f.reason, f.physical_offset, f.ring) for f in two] == [("header slot 0: e0", 0, Ring(1 << 20)),
                                                                    ("header slot 1: bad magic", 4096, Ring(1 << 20))]


# -- a run's summary, warnings and error --------------------------------------------------------

def _report(**kw):
    r = ScanResult(HEADER, RING)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_durable_json_of_a_report():
    assert vd.durable_json(_report()) == {"durable_end_offset": None, "durable_end": None}
    assert vd.durable_json(_report(durable=Durable())) == {"durable_end_offset": None, "durable_end": None}
    d = Durable([(5000, "the checkpoint's log end"), (12288, "the clean header's nextOffset", " (x)")])
    assert vd.durable_json(_report(durable=d)) == {"durable_end_offset": 12288,
                                                  "durable_end": "the clean header's nextOffset 12,288 (x)"}


def test_the_summary_adds_the_run_s_counts_to_the_report_s():
    report = _report(records=3, durable=Durable([(5000, "the checkpoint's log end")]))
    report.sealed_holes.append(CrashHole(100, 200))
    report.streams.gaps.extend([StreamGap(1, 0, 5, None, 10), StreamGap(2, 0, 5, None, 10)])
    run = vd.RecoverRun("/dev/x", report, shown=2, unexplained_gaps=1, rescans=2)
    out = run.summary()
    want = report.to_json()
    want.update({"sealed_holes": 1, "stream_gaps": 2, "unexplained_stream_gaps": 1, "records_shown": 2,
                 "device": "/dev/x", "flavour": "walctl", "durable_end_offset": 5000,
                 "durable_end": "the checkpoint's log end 5,000", "log_moved": False, "rescans": 2})
    assert out == want
    run.log_moved = "a writer started while it was read"
    assert run.summary()["log_moved"] is False  # nothing held back: the move changed nothing shown
    run.held.append(_f())
    assert run.summary()["log_moved"] is True
    run.log_moved = None
    assert run.summary()["log_moved"] is False


def test_moved_warning_for_each_outcome():
    run = vd.RecoverRun("d", _report())
    assert run.moved_warning() is None
    run.log_moved = "a writer started while it was read"
    assert run.moved_warning() is None  # nothing held
    run.held = [_f(moved=True)]
    run.log_moved = None
    assert run.moved_warning() is None
    run.log_moved = "a writer started while it was read"
    assert run.moved_warning() == ("the log moved during the read (a writer started while it was read): 1 finding "
                                   "seen after it moved are the writer's work in progress, not damage: a rescan "
                                   "of the log as it is now found none a crash does not explain")
    run.held = [_f(), _f()]
    assert run.moved_warning() is None  # judged by the rescan: shown as corruption
    run.held = [_f(moved=False), _f(moved=True)]
    assert run.moved_warning().startswith("the log moved during the read (a writer started while it was read): "
                                          "2 findings seen after it moved are")
    run.settled, run.rescans = False, 1
    assert run.moved_warning() == ("the log moved during the read (a writer started while it was read) and kept "
                                   "moving under 1 rescan: 2 findings seen after it moved were not judged "
                                   "(explained_by_log_move); run recover again when the writer is idle for a "
                                   "verdict")
    run.rescans = 3
    assert "kept moving under 3 rescans: 2 findings" in run.moved_warning()


def test_a_run_s_error_is_its_report_s_unexplained_findings():
    run = vd.RecoverRun("/dev/x", _report())
    assert run.error() is None
    run.report.findings = [_f(explained=True), _f(Kind.HOLE, 4096, reason="zeros")]
    err = run.error()
    assert str(err) == ("1 finding a crash does not explain; first: hole at offset 4096 (zeros; damage where a "
                        "crash cannot leave any)")
    assert err.where == "/dev/x" and err.hint is None


def test_incomplete_says_what_was_read_and_why_it_stopped():
    run = vd.RecoverRun("d", _report(start_offset=100, end_offset=9000))
    assert run.incomplete() is None
    run.report.complete, run.report.stopped_by = False, "limit"
    assert run.incomplete() == ("incomplete: read from offset 100; stopped by limit at offset 9000; damage outside "
                                "what was read was not checked (run without --from/--to/--limit for a full check)")
    run.report.read_from_offset, run.seeked = 4096, True
    assert run.incomplete().startswith("incomplete: read from offset 4096 (seek to --from); stopped by limit at ")
    run.report.read_from_offset = 0
    assert run.incomplete().startswith("incomplete: read from offset 0 (seek to --from);")


# -- the filters and the counts ------------------------------------------------------------------

def _entry(offset, stream=1, payload=b"xyz"):
    from walctl.format.batch import StreamRecordBatch
    from walctl.wal.ringread import Entry

    batch = None if stream is None else StreamRecordBatch(stream, 0, 0, 1, payload)
    return Entry(offset, batch.encode() if batch else b"body!", batch)


def test_no_filters_show_every_record():
    assert vd._filter(vd.RecoverFilter(), _report()) is None


def test_the_from_filter():
    report = _report()
    want = vd._filter(vd.RecoverFilter(from_offset=4096), report)
    assert [want(_entry(o), 0) for o in (4095, 4096, 5000)] == [False, True, True]
    assert report.complete is True


def test_the_to_filter_stops_the_run():
    report = _report()
    want = vd._filter(vd.RecoverFilter(to_offset=4096), report)
    assert want(_entry(4095), 0) is True and report.complete is True
    assert want(_entry(4096), 0) is False
    assert (report.complete, report.stopped_by) == (False, "to")


def test_the_stream_filter():
    report = _report()
    want = vd._filter(vd.RecoverFilter(stream=2), report)
    assert [want(_entry(0, s), 0) for s in (2, 1, None, 0)] == [True, False, False, False]
    assert report.complete is True
    zero = vd._filter(vd.RecoverFilter(stream=0), report)
    assert zero(_entry(0, 0), 0) is True and zero(_entry(0, None), 0) is False


def test_the_limit_filter_stops_the_run():
    report = _report()
    want = vd._filter(vd.RecoverFilter(limit=2), report)
    assert want(_entry(0), 1) is True and report.complete is True
    assert want(_entry(0), 2) is False
    assert (report.complete, report.stopped_by) == (False, "limit")
    none = vd._filter(vd.RecoverFilter(limit=0), _report())
    assert none(_entry(0), 0) is False


def test_filters_combine_in_order():
    report = _report()
    want = vd._filter(vd.RecoverFilter(from_offset=100, to_offset=200, stream=3, limit=1), report)
    assert want(_entry(50, 3), 5) is False and report.complete  # before --from: not a stop
    assert want(_entry(150, 4), 5) is False and report.complete  # other stream: not a stop
    assert want(_entry(150, 3), 5) is False and report.stopped_by == "limit"
    report.complete, report.stopped_by = True, "end of log"
    assert want(_entry(250, 4), 0) is False and report.stopped_by == "to"


class _Run:
    def __init__(self, sid, rows):
        self.sid, self.rows, self.count = sid, rows, len(rows)

    def one_stream(self):
        return self.sid

    def payload_bytes(self):
        return sum(length - 33 for _, length in self.rows)

    def column(self, i):
        return [r[0] if i == 4 else r[1] for r in self.rows]

    def entries(self):
        return [_entry(10 * i, s) for i, (s, _) in enumerate(self.rows)]


def test_count_run_of_one_stream_or_several():
    per = {}
    vd._count_run(per, _Run(7, [(7, 40), (7, 50)]))
    assert per == {7: [2, 24]}
    vd._count_run(per, _Run(7, [(7, 34)]))
    assert per == {7: [3, 25]}
    vd._count_run(per, _Run(None, [(1, 40), (2, 33), (1, 100)]))
    assert per == {7: [3, 25], 1: [2, 74], 2: [1, 0]}


def test_show_run_counts_renders_or_shows_one_by_one():
    run = _Run(None, [(1, 40), (2, 50)])
    per, records, runs = {}, [], []
    vd._show_run(run, per, records.append, runs.append)
    assert per == {1: [1, 7], 2: [1, 17]} and records == [] and runs == []
    vd._show_run(run, None, records.append, runs.append)
    assert runs == [run] and records == []
    vd._show_run(run, None, records.append, None)
    assert [(e.offset, e.batch.stream_id) for e in records] == [(0, 1), (10, 2)]


# -- the stream gaps and sealed holes explained -------------------------------------------------

def test_explain_gaps_of_a_sealed_hole_and_the_gaps_it_explains_or_not():
    seal = SealDescriptor(4096, 8192, 1_700_000_000_000_000_000, 1_600_000_000_000_000_000, ((1, 5, 9),))
    hole = CrashHole(4096, 8192, seal, 4096)
    report = _report(sealed_holes=[hole])
    report.streams.gaps.extend([StreamGap(1, 5, 9, 0, 12288), StreamGap(2, 0, 3, 12288, 16384)])
    run = vd.RecoverRun("d", report)
    vd._explain_gaps(run)
    from walctl.wal import gaps

    assert run.explanations[0] == (hole.to_json(), f"SEALED HOLE at offset 4096..8192 (4096 bytes): "
                                                   f"{hole.describe()}; it cost stream 1 offsets 5..9")
    assert run.explanations[1] == (gaps.gap_to_json(StreamGap(1, 5, 9, 0, 12288), hole),
                                   "GAP " + gaps.explanation(StreamGap(1, 5, 9, 0, 12288), hole))
    assert run.explanations[2] == (gaps.gap_to_json(StreamGap(2, 0, 3, 12288, 16384), None),
                                   "GAP " + gaps.explanation(StreamGap(2, 0, 3, 12288, 16384), None))
    assert run.unexplained_gaps == 1 and len(run.explanations) == 3


def test_a_sealed_hole_that_cost_nothing_says_so():
    seal = SealDescriptor(0, 100, 1, 2, ())
    run = vd.RecoverRun("d", _report(sealed_holes=[CrashHole(0, 100, seal, 0)]))
    vd._explain_gaps(run)
    assert run.explanations[0][1].endswith("; it cost no stream offsets (no stream continued after it)")
    assert run.explanations[0][1].startswith("SEALED HOLE at offset 0..100 (100 bytes): ")
    seal = SealDescriptor(0, 100, 1, 2, ((3, 1, 2), (4, 7, 9)))
    run = vd.RecoverRun("d", _report(sealed_holes=[CrashHole(0, 100, seal, 0)]))
    vd._explain_gaps(run)
    assert run.explanations[0][1].endswith("; it cost stream 3 offsets 1..2, stream 4 offsets 7..9")


def test_a_gap_across_damage_and_one_across_a_crash_hole():
    damage = _f(Kind.HOLE, 8192, end=12288, reason="zeros")
    crash = _f(Kind.HOLE, 20480, end=24576, explained=True)
    report = _report(findings=[damage, crash])
    g1, g2, g3 = StreamGap(1, 0, 4, 4096, 12288), StreamGap(1, 9, 10, 16384, 24576), StreamGap(2, 0, 1, 30000, 34000)
    report.streams.gaps.extend([g1, g2, g3])
    run = vd.RecoverRun("d", report)
    vd._explain_gaps(run)
    from walctl.wal import gaps

    j1, j2, j3 = (e[0] for e in run.explanations)
    assert (j1["cause"], j1["damage_offset"]) == ("corruption", 8192)
    assert (j2["cause"], j2["hole_start"]) == ("crash", 20480)
    assert j3["cause"] == "unexplained"
    assert run.explanations[0][1] == "GAP " + gaps.explanation(g1, None, damage=damage)
    assert run.unexplained_gaps == 2  # corruption and unexplained: no crash hole


# -- recover on a small WAL file ------------------------------------------------------------------

END = 8192 + 24 + 11  # the last record (no batch: 11 bytes) ends here
SHOWN = [0, 157, 314, 4096, 8192]


def _build(path, *, clean=True, checkpoint=True, next_offset=12288) -> str:
    """Records of streams 1 and 2 in blocks 0 and 1, a record that holds no batch in block 2; a
    checkpoint ending at the last record; written directly (no writer: no timing)."""
    from walctl.device import open_device
    from walctl.format import record as rec
    from walctl.format.batch import StreamRecordBatch
    from walctl.wal.headers import read_headers, write_header

    from walhelpers import new_wal, poke

    new_wal(path, CAPACITY)
    for offset, sid, base, payload in ((0, 1, 0, b"a" * 100), (157, 1, 1, b"b" * 100), (314, 2, 0, b"c" * 50),
                                       (4096, 1, 2, b"d" * 100), (8192, None, 0, b"not a batch")):
        body = StreamRecordBatch(sid, 0, base, 1, payload).encode() if sid is not None else payload
        poke(str(path), RING.physical(offset), rec.encode_record(offset, body))
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=next_offset, shutdown_type=0 if clean else 1),
                     Checkpoint(log_end=END) if checkpoint else None)
    finally:
        dev.close()
    return str(path)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return open(_build(tmp_path_factory.mktemp("v") / "w.img"), "rb").read()


@pytest.fixture
def wal(image, tmp_path):
    path = tmp_path / "w.img"
    path.write_bytes(image)
    return str(path)


class _Calls:
    def __init__(self):
        self.records, self.findings, self.progress, self.runs = [], [], [], []


def _recover(path, calls=None, **kw):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    calls = calls or _Calls()
    dev = open_device(path, writable=False)
    try:
        run = vd.recover(dev, read_headers(dev), path, on_record=lambda e: calls.records.append(e),
                         on_finding=calls.findings.append, progress=calls.progress.append, **kw)
    finally:
        dev.close()
    return run, calls


def _zero(path, offset, n=24):
    from walhelpers import poke

    poke(path, RING.physical(offset), bytes(n))


def test_recover_shows_every_record_and_the_bad_batch(wal):
    run, c = _recover(wal)
    assert [e.offset for e in c.records] == SHOWN
    assert [e.batch.stream_id if e.batch else None for e in c.records] == [1, 1, 2, 1, None]
    assert [(f.kind, f.offset) for f in c.findings] == [(Kind.BAD_BATCH, 8192)]
    assert c.progress == [0, 8192, 8192]
    assert (run.device, run.shown, run.seeked, run.per_stream, run.explanations) == (wal, 5, False, {}, [])
    assert run.report.complete and run.report.records == 5 and run.report.end_offset == END
    assert run.report.durable.points == [(END, "the checkpoint's log end", "")]
    assert run.log_moved is None and run.held == [] and run.rescans == 0 and run.settled
    assert str(run.error()).startswith("1 finding a crash does not explain; first: bad_batch at offset 8192")


def test_recover_hands_whole_runs_to_a_renderer(wal):
    runs = []
    run, c = _recover(wal, on_run=runs.append)
    assert [e.offset for e in c.records] == [8192] and run.shown == 5  # (no batch: not in a run)
    assert sum(r.count for r in runs) == 4


def test_recover_stats_count_records_and_payload_per_stream(wal):
    run, c = _recover(wal, stats=True)
    assert run.per_stream == {1: [3, 300], 2: [1, 50], -1: [1, 11]} and c.records == [] and run.shown == 5
    run, c = _recover(wal, stats=True, filters=vd.RecoverFilter(stream=1))
    assert run.per_stream == {1: [3, 300]} and c.records == [] and run.shown == 3
    run, c = _recover(wal, stats=True, filters=vd.RecoverFilter(from_offset=4096))
    assert run.per_stream == {1: [1, 100], -1: [1, 11]} and run.shown == 2


def test_recover_from_an_offset_seeks_and_says_the_run_is_incomplete(wal):
    run, c = _recover(wal, filters=vd.RecoverFilter(from_offset=157))
    assert [e.offset for e in c.records] == SHOWN[1:] and run.shown == 4
    assert run.seeked and not run.report.complete and run.report.read_from_offset == 157
    assert c.progress == [0, 157, 3939, 8035, 8035]  # from the --from offset
    run, c = _recover(wal, filters=vd.RecoverFilter(from_offset=4096))
    assert [e.offset for e in c.records] == [4096, 8192] and run.seeked and not run.report.complete
    assert c.progress == [0, 4096, 4096]
    run, c = _recover(wal, filters=vd.RecoverFilter(from_offset=0))
    assert [e.offset for e in c.records] == SHOWN and not run.seeked and run.report.complete


def test_recover_to_and_limit_stop_the_scan(wal):
    for f in (vd.RecoverFilter(to_offset=314), vd.RecoverFilter(limit=2)):
        run, c = _recover(wal, filters=f)
        assert [e.offset for e in c.records] == [0, 157] and run.shown == 2
        assert not run.report.complete and run.report.records == 3  # the scan stopped at the third
        assert run.report.stopped_by == ("to" if f.to_offset else "limit")
        assert c.progress == [0, 157, 314]


def test_recover_of_one_stream_reads_on_to_the_end(wal):
    run, c = _recover(wal, filters=vd.RecoverFilter(stream=2))
    assert [e.offset for e in c.records] == [314] and run.shown == 1
    assert run.report.complete and run.report.records == 5
    assert c.progress == [0, 157, 314, 4096, 8192, 8192]


def test_recover_names_a_hole_below_the_checkpoint_corruption_with_its_bytes(wal):
    _zero(wal, 157)
    run, c = _recover(wal, with_hexdump=True)
    assert [e.offset for e in c.records] == [0, 314, 4096, 8192]
    hole = c.findings[0]
    assert (hole.kind, hole.offset, hole.end_offset, hole.explained) == (Kind.HOLE, 157, 314, False)
    assert hole.verdict_rule == "below the checkpoint's log end 8,227"
    assert hole.hexdump.startswith("0000209d: 0000 0000 0000 0000 0000 0000 0000 0000  ................\n")
    assert all(f.hexdump for f in c.findings)
    run, c = _recover(wal)
    assert all(f.hexdump is None for f in c.findings)


def test_recover_reports_a_damaged_header_slot_first(wal):
    from walhelpers import poke

    poke(wal, 10, b"\xff\xff")  # slot 0: the older one
    run, c = _recover(wal)
    slot = c.findings[0]
    assert (slot.kind, slot.physical_offset, slot.explained) == (Kind.BAD_HEADER_SLOT, 0, True)
    assert slot.reason.startswith("header slot 0: ")
    assert run.report.findings[0] is slot and [f.kind for f in run.report.findings] == [Kind.BAD_HEADER_SLOT,
                                                                                        Kind.BAD_BATCH]


class _Watch:
    """A RecoverSession stand-in: how the log moved (or None), and the rescans' outcome."""

    def __init__(self, moved, rescan=None):
        self.moves, self.asked, self.rescan, self.scans = list(moved), 0, rescan, []

    def moved(self):
        self.asked += 1
        return self.moves.pop(0) if self.moves else None

    def settled_scan(self, scan):
        self.scans.append(scan)
        return self.rescan


def test_damage_seen_before_the_log_moved_is_shown_as_it_is_found(wal):
    _zero(wal, 157)
    watch = _Watch([None, None])
    run, c = _recover(wal, watch=watch)
    assert [f.kind for f in c.findings] == [Kind.HOLE, Kind.BAD_BATCH] and watch.asked == 2
    assert run.held == [] and run.log_moved is None and watch.scans == []
    assert run.moved_warning() is None


def test_damage_seen_after_the_log_moved_is_held_and_rescanned(wal):
    _zero(wal, 157)
    watch = _Watch(["a writer started while it was read"], (ScanResult(HEADER, RING), True, 2))
    run, c = _recover(wal, watch=watch)
    assert watch.asked == 1 and run.log_moved == "a writer started while it was read"
    assert [f.kind for f in run.held] == [Kind.HOLE, Kind.BAD_BATCH]
    assert [f.kind for f in c.findings] == [Kind.HOLE, Kind.BAD_BATCH]  # shown after the scan
    assert all(f.moved for f in run.held) and run.settled and run.rescans == 2 and run.report.complete
    assert run.error() is None and run.moved_warning().startswith("the log moved during the read")


def test_held_damage_a_settled_rescan_finds_again_stays_corruption(wal):
    _zero(wal, 157)
    still = ScanResult(HEADER, RING)
    still.findings.append(_f())
    watch = _Watch(["x"], (still, True, 1))
    run, c = _recover(wal, watch=watch)
    assert not any(f.moved for f in run.held) and run.report.complete and run.settled
    assert run.error() is not None and run.moved_warning() is None


def test_held_damage_of_a_log_that_kept_moving_is_not_judged(wal):
    _zero(wal, 157)
    still = ScanResult(HEADER, RING)
    still.findings.append(_f())
    watch = _Watch(["x"], (still, False, 3))
    run, c = _recover(wal, watch=watch)
    assert all(f.moved for f in run.held) and not run.report.complete and not run.settled and run.rescans == 3
    assert run.error() is None and "kept moving under 3 rescans" in run.moved_warning()


def test_the_rescan_reads_the_log_again_from_the_seek_point(wal):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    _zero(wal, 4096 + 20, 4)  # a bad record after the seek point
    watch = _Watch(["x"], (ScanResult(HEADER, RING), True, 1))
    run, c = _recover(wal, watch=watch, filters=vd.RecoverFilter(from_offset=4096))
    [scan] = watch.scans
    dev = open_device(wal, writable=False)
    try:
        session = SimpleNamespace(dev=dev, state=read_headers(dev), writer_pid=None)
        again = scan(session)
        assert again.read_from_offset == 4096 and again.records == 1
        assert [f.offset for f in again.corrupt] == [4096, 8192]
        session.writer_pid = 123  # a running writer: no probing past the window
        assert scan(session).read_from_offset == 4096
    finally:
        dev.close()


def test_an_explained_finding_does_not_ask_whether_the_log_moved(tmp_path):
    from walhelpers import poke

    # (durable up to 4096: the crashed header's nextOffset less a block)
    path = _build(tmp_path / "w.img", clean=False, checkpoint=False, next_offset=8192)
    poke(path, RING.physical(8192) + 30, b"\xff")  # the last record's body torn: in the crashed window
    watch = _Watch(["x"])
    run, c = _recover(path, watch=watch)
    assert [(f.kind, f.explained) for f in c.findings] == [(Kind.TORN_TAIL, True)]
    assert watch.asked == 0 and run.held == [] and run.log_moved is None


def test_an_interrupted_recover_leaves_with_its_summary(wal):
    def stop(entry):
        if entry.offset == 157:
            raise KeyboardInterrupt

    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    dev = open_device(wal, writable=False)
    try:
        with pytest.raises(KeyboardInterrupt) as err:
            vd.recover(dev, read_headers(dev), wal, on_record=stop, on_finding=lambda f: None)
    finally:
        dev.close()
    summary = err.value.summary
    assert summary["complete"] is False and summary["device"] == wal and summary["type"] == "summary"
    assert summary["records_shown"] == 4  # (a run of records counts as shown before it is rendered)


def test_recover_pauses_at_its_failpoint_for_tests(wal, monkeypatch):
    import walctl.failpoints as fp

    calls = []
    monkeypatch.setattr(fp, "failpoint", calls.append)
    monkeypatch.setenv("WALCTL_FAILPOINT", "recover-scan-test")
    _recover(wal)
    assert calls == ["recover-scan"] * 3
    calls.clear()
    monkeypatch.setenv("WALCTL_FAILPOINT", "other")
    _recover(wal)
    assert calls == []


def test_recover_without_progress_or_a_renderer(wal):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    shown = []
    dev = open_device(wal, writable=False)
    try:
        run = vd.recover(dev, read_headers(dev), wal, on_record=shown.append, on_finding=lambda f: None,
                         readahead=False, probe=False)
    finally:
        dev.close()
    assert [e.offset for e in shown] == SHOWN and run.shown == 5


def test_an_automq_log_is_read_from_its_trim_point_whatever_the_from(tmp_path):
    from test_automq_forensics import AutoMQImage, KiB

    img = AutoMQImage(256 * KiB, 1, stale=False)
    offsets = img.block([100, 100]) + img.block([100])
    img.headers(trim=-1, clean=True)
    path = img.save(tmp_path / "amq.img")
    run, c = _recover(path, filters=vd.RecoverFilter(from_offset=offsets[2]))
    assert [e.offset for e in c.records] == [offsets[2]]
    assert not run.seeked and run.report.complete and run.report.read_from_offset is None
    assert run.report.durable is None and run.summary()["durable_end_offset"] is None
    run, c = _recover(path, stats=True)
    assert run.per_stream == {5: [3, 300]} and run.shown == 3


def _wal_of(path, records, *, next_offset, clean=True, window=None, checkpoint=None) -> str:
    """A WAL of ``records`` ((offset, stream or None, base)), its header written directly."""
    from walctl.device import open_device
    from walctl.format import record as rec
    from walctl.format.batch import StreamRecordBatch
    from walctl.wal.headers import read_headers, write_header

    from walhelpers import new_wal, poke

    new_wal(path, CAPACITY)
    for offset, sid, base in records:
        body = StreamRecordBatch(sid, 0, base, 1, bytes(100)).encode() if sid is not None else b"no batch"
        poke(str(path), RING.physical(offset), rec.encode_record(offset, body))
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        changes = {"next_offset": next_offset, "shutdown_type": 0 if clean else 1}
        if window is not None:
            changes["sliding_window_max_length"] = window
        write_header(dev, state, state.header.with_(**changes), checkpoint)
    finally:
        dev.close()
    return str(path)


@pytest.fixture
def probed(tmp_path):
    """A crashed log whose 4 KiB window stops the scan at 4096, with valid records far past it."""
    return _wal_of(tmp_path / "p.img", [(0, 1, 0), (12288, 1, 2), (16384, 1, 3)], next_offset=4096, clean=False,
                   window=4096)


def test_recover_probes_past_the_window_unless_told_not_to(probed):
    run, c = _recover(probed)  # the records found past the window prove the hole before them corrupt
    assert [(f.kind, f.offset, f.end_offset, f.explained) for f in c.findings] == [(Kind.HOLE, 4096, 12288, False)]
    assert c.findings[0].verdict_rule == ("below the durable end 8,216 (a valid record at 12,288 lies one sliding "
                                          "window of 4,096 bytes past it: a block is only written inside the window)")
    assert [e.offset for e in c.records] == [0, 12288, 16384]
    run, c = _recover(probed, probe=False)
    assert c.findings == [] and [e.offset for e in c.records] == [0]


def test_the_rescan_probes_only_without_a_running_writer(probed):
    from walctl.device import open_device
    from walctl.wal.headers import read_headers

    _zero(probed, 0)  # damage, so that something is held
    watch = _Watch(["x"], (ScanResult(HEADER, RING), True, 1))
    _recover(probed, watch=watch)
    [scan] = watch.scans
    dev = open_device(probed, writable=False)
    try:
        session = SimpleNamespace(dev=dev, state=read_headers(dev), writer_pid=None)
        assert [f.kind for f in scan(session).findings] == [Kind.BEYOND_WINDOW]
        session.writer_pid = 4242
        assert scan(session).findings == []
    finally:
        dev.close()


def test_complete_is_false_not_just_falsy(wal, probed):
    run, c = _recover(wal, filters=vd.RecoverFilter(from_offset=4096))
    assert run.report.complete is False and run.summary()["complete"] is False
    _zero(wal, 157)
    still = ScanResult(HEADER, RING)
    still.findings.append(_f())
    run, c = _recover(wal, watch=_Watch(["x"], (still, False, 3)))
    assert run.report.complete is False and run.summary()["complete"] is False


def test_shown_counts_every_run_of_records(wal):
    _zero(wal, 157)  # runs: [0], then [314, 4096], then 8192 (no batch) alone
    runs = []
    run, c = _recover(wal, on_run=runs.append)
    assert [r.count for r in runs] == [1, 2] and run.shown == 4
    run, c = _recover(wal, stats=True)
    assert run.shown == 4 and run.per_stream == {1: [2, 200], 2: [1, 50], -1: [1, 11]}


def test_stats_with_filters_count_each_record_without_a_batch(tmp_path):
    path = _wal_of(tmp_path / "w.img", [(0, 1, 0), (4096, None, 0), (8192, None, 0), (12288, 1, 1)],
                   next_offset=16384, checkpoint=Checkpoint(log_end=12288 + 157))
    run, c = _recover(path, stats=True, filters=vd.RecoverFilter(from_offset=1))
    assert run.per_stream == {-1: [2, 16], 1: [1, 100]} and run.shown == 3
