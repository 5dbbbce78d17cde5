"""Upload's scan index (walctl/pipeline/upload/scanindex.py) on its own: records handed to
``_Records`` one by one (``add``, as Entries) and in bulk (``add_run``, as the scan's Runs decoded
from a buffer of real records), and what it keeps of them exactly: segments, skipped records, the
upload mark's record, bad records, kept bodies, spooled bodies, overlap and gap events; then
``streams``' judgement of those events, word for word (issue 32: the module's mutants killed here,
in milliseconds, with no WAL, device or store)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.errors import CorruptionError
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.pipeline.upload import scanindex
from walctl.pipeline.upload.blocks import _NoSpool
from walctl.pipeline.upload.scanindex import _Bad, _Records, upload_mark
from walctl.store import manifest as mf
from walctl.wal.gaps import CrashHole
from walctl.wal.ringread import Run


def _b(sid, base, count=1, size=30):
    return StreamRecordBatch(sid, 0, base, count, bytes([sid % 256, base % 256]) * (size // 2))


class _Log:
    """Records back to back from WAL offset ``start``: bodies (batches or raw bytes), their offsets."""

    def __init__(self, items, start=0):
        self.buf = bytearray()
        self.offsets, self.bodies, self.batches = [], [], []
        o = start
        for item in items:
            body = item.encode() if isinstance(item, StreamRecordBatch) else bytes(item)
            self.buf += rec.encode_record(o, body)
            self.offsets.append(o)
            self.bodies.append(body)
            self.batches.append(item if isinstance(item, StreamRecordBatch) else None)
            o += rec.SIZE + len(body)
        self.start, self.end = start, o

    def run(self, first=0, stop=None):
        found = bulk.decode_records(self.buf, self.start)
        assert found.count == len(self.offsets)
        return Run(self.buf, found.rows, first, len(self.offsets) if stop is None else stop)

    def entries(self):
        return [SimpleNamespace(offset=o, batch=b, body=body)
                for o, b, body in zip(self.offsets, self.batches, self.bodies)]


def _doc(streams=None, objects=()):
    doc = mf.Manifest()
    for sid, (start, end) in (streams or {}).items():
        doc.streams[sid] = mf.StreamSpan(start, end)
    for oid, (sid, start, end) in enumerate(objects, 1):
        doc.objects.append(mf.LiveObject(oid, f"k{oid}", "SO", 100, [mf.ObjectRange(sid, start, end, 10)],
                                         order_id=oid, data_time=1.0))
    return doc


def _records(doc=None, mark=None, trim_entry=None, keep=0, spools=None):
    return _Records(doc or _doc(), mark, SimpleNamespace(trim_entry=trim_entry), keep, spools)


def _segs(r):
    return {sid: [(s.start, s.end, list(s.wal), list(s.crcs), s.bytes, s.wal_end) for s in segs]
            for sid, segs in r.segments.items()}


def _feed(r, log, how):
    if how == "add":
        for e in log.entries():
            r.add(e)
    else:
        r.add_run(log.run())


class _SegSpool:
    def __init__(self, sid, first, refuse=False):
        self.sid, self.first, self.refuse, self.got, self.ends = sid, first, refuse, [], []

    def add(self, bodies, at, lengths, ends):
        if self.refuse:
            raise _NoSpool()
        buf = bytearray(sum(lengths))
        end, crc = bodies.copy_into(buf, 0, at, at + len(lengths), 0)
        assert end == len(buf) and crc == crc32c(bytes(buf))
        self.got.append(bytes(buf))
        self.ends.append(list(ends))


class _Spools:
    def __init__(self, is_open=True, refuse=()):
        self.open, self.refuse = is_open, set(refuse)
        self.made, self.dropped = [], []

    def new(self, sid, first):
        s = _SegSpool(sid, first, sid in self.refuse)
        self.made.append(s)
        return s

    def drop(self, s):
        self.dropped.append(s)


# -- one stream, in order -------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_a_stream_s_batches_make_one_segment(how):
    batches = [_b(1, 0, 2), _b(1, 2, 3, 50), _b(1, 5, 1, 8)]
    log = _Log(batches, start=4096)
    r = _records()
    _feed(r, log, how)
    assert _segs(r) == {1: [(0, 6, log.offsets, [crc32c(b) for b in log.bodies], sum(map(len, log.bodies)),
                             log.end)]}
    assert r.events == [] and r.bad == [] and list(r.skipped) == [] and r.kept is None
    assert r.last_good == log.offsets[-1] and r.good_before_bad is None and r.mark_found is None
    assert r.last_mark == mf.UploadMark(log.offsets[-1], 1, 5, crc32c(log.bodies[-1]))
    assert r.todo_count == 3 and r.todo_bytes == sum(map(len, log.bodies))
    assert r.uploaded == -1 and r.stopped is False and r.not_in_store is None


def test_nothing_to_upload_has_no_mark_and_no_counts():
    r = _records()
    assert r.last_mark is None and r.todo_count == 0 and r.todo_bytes == 0
    assert r.streams([], set(), "/w", [], []) == ({}, [])


@pytest.mark.parametrize("how", ["add", "run"])
def test_a_stopped_index_takes_no_more_records(how):
    log = _Log([_b(1, 0), _b(1, 1)])
    r = _records()
    r.stop()
    assert r.stopped is True
    _feed(r, log, how)
    assert r.segments == {} and r.last_good is None and r._last_todo is None and r.mark_found is None


# -- several streams ------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_interleaved_streams_each_get_their_segment(how):
    items = [_b(1, 0), _b(2, 10, 2), _b(1, 1, 4), _b(3, 7), _b(2, 12)]
    log = _Log(items, start=100)
    r = _records()
    _feed(r, log, how)
    o, body = log.offsets, log.bodies
    crcs = [crc32c(b) for b in body]
    assert _segs(r) == {
        1: [(0, 5, [o[0], o[2]], [crcs[0], crcs[2]], len(body[0]) + len(body[2]), o[2] + rec.SIZE + len(body[2]))],
        2: [(10, 13, [o[1], o[4]], [crcs[1], crcs[4]], len(body[1]) + len(body[4]), log.end)],
        3: [(7, 8, [o[3]], [crcs[3]], len(body[3]), o[3] + rec.SIZE + len(body[3]))]}
    assert r.last_mark == mf.UploadMark(o[4], 2, 12, crcs[4])
    assert r.events_sorted is (how == "add")
    first, later = r.streams([], set(), "/w", [], [])
    assert sorted(first) == [1, 2, 3] and later == [] and first[2] is r.segments[2][0]


# -- skipped: at or below the upload mark ---------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_records_up_to_the_mark_are_skipped_and_checked_in_the_store(how):
    items = [_b(1, 0), _b(2, 0), _b(1, 1), _b(2, 1), _b(1, 2)]
    log = _Log(items)
    o = log.offsets
    mark = mf.UploadMark(o[2], 1, 1, crc32c(log.bodies[2]))
    doc = _doc({1: (0, 2), 2: (0, 1)}, [(1, 0, 2), (2, 0, 1)])
    r = _records(doc, mark)
    _feed(r, log, how)
    assert list(r.skipped) == o[:3] and r.not_in_store is None and r.uploaded == o[2]
    assert r.mark_found == (o[2], mark)
    assert _segs(r) == {2: [(1, 2, [o[3]], [crc32c(log.bodies[3])], len(log.bodies[3]),
                             o[3] + rec.SIZE + len(log.bodies[3]))],
                        1: [(2, 3, [o[4]], [crc32c(log.bodies[4])], len(log.bodies[4]), log.end)]}
    assert r.events == [] and r._before == {1: o[2], 2: o[1]}


@pytest.mark.parametrize("how", ["add", "run"])
def test_the_first_skipped_record_the_store_does_not_hold_is_noted(how):
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 2), _b(1, 3)])
    o = log.offsets
    mark = mf.UploadMark(o[2], 1, 2, 0)
    r = _records(_doc({1: (0, 1)}, [(1, 0, 1)]), mark)  # holds only offset 0
    _feed(r, log, how)
    assert r.not_in_store == o[1] and list(r.skipped) == o[:3]


@pytest.mark.parametrize("how", ["add", "run"])
def test_every_record_skipped_leaves_nothing_to_upload(how):
    log = _Log([_b(1, 0), _b(1, 1)])
    mark = mf.UploadMark(log.offsets[1], 1, 1, crc32c(log.bodies[1]))
    r = _records(_doc({1: (0, 2)}, [(1, 0, 2)]), mark, keep=1 << 20)
    _feed(r, log, how)
    assert list(r.skipped) == log.offsets and r.segments == {} and r.last_mark is None
    assert r.mark_found == (log.offsets[1], mark) and r.kept == {} and r.last_good == log.offsets[1]


def test_a_run_entirely_before_or_after_the_mark_finds_no_mark_record():
    log = _Log([_b(1, 0), _b(1, 1)], start=1000)
    for uploaded in (999, log.end, log.offsets[0] + 1):
        r = _records(_doc({1: (0, 0)}), mf.UploadMark(uploaded, 1, 0, 0))
        r.add_run(log.run())
        assert r.mark_found is None
    r = _records(_doc({1: (0, 0)}), mf.UploadMark(log.offsets[0], 1, 0, 0))
    r.add_run(log.run())
    assert r.mark_found == (log.offsets[0], mf.UploadMark(log.offsets[0], 1, 0, crc32c(log.bodies[0])))


def test_with_no_mark_a_record_at_offset_minus_one_is_not_the_mark():
    r = _records()
    r.add(SimpleNamespace(offset=-1, batch=_b(1, 0), body=_b(1, 0).encode()))
    assert r.mark_found is None and list(r.skipped) == [-1]


def test_skipped_records_say_where_each_stream_s_last_stored_batch_lies():
    log = _Log([_b(1, 0), _b(2, 0), _b(1, 5)])
    o = log.offsets
    r = _records(_doc({1: (0, 1), 2: (0, 1)}, [(1, 0, 1), (2, 0, 1)]), mf.UploadMark(o[1], 2, 0, 0))
    r.add_run(log.run())
    assert r.events == [(o[2], "gap", (1, 1, 5, o[0]))]


# -- the record at the trim point -----------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_the_trim_record_says_where_its_stream_was_before_a_gap(how):
    log = _Log([_b(1, 3), _b(2, 9)], start=5000)
    trim_entry = SimpleNamespace(offset=4096, batch=_b(1, 0))
    r = _records(_doc({1: (0, 1), 2: (0, 8)}), trim_entry=trim_entry)
    _feed(r, log, how)
    o = log.offsets
    assert r.events == [(o[0], "gap", (1, 1, 3, 4096)), (o[1], "gap", (2, 8, 9, None))]
    bad_trim = SimpleNamespace(offset=4096, batch=None)
    r = _records(_doc({1: (0, 1)}), trim_entry=bad_trim)
    _feed(r, _Log([_b(1, 3)], start=5000), how)
    assert r.events == [(5000, "gap", (1, 1, 3, None))] and r._before == {}


def test_the_trim_record_is_looked_at_once():
    r = _records(trim_entry=SimpleNamespace(offset=4096, batch=_b(1, 0)))
    r.add(_Log([_b(2, 0)]).entries()[0])
    r._before[1] = 777
    r.add(_Log([_b(2, 1)], start=100).entries()[0])
    assert r._before == {1: 777}


# -- overlaps and gaps ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_overlap_against_the_store_is_an_event_and_a_stream_continuing_it_is_none(how):
    log = _Log([_b(1, 4), _b(2, 8), _b(3, 0)])
    r = _records(_doc({1: (0, 5), 2: (0, 8)}))
    _feed(r, log, how)
    assert r.events == [(log.offsets[0], "store_overlap", (1, 5, 4))]
    with pytest.raises(CorruptionError) as err:
        r.streams([], set(), "/w", [], [])
    assert (err.value.what, err.value.where, err.value.offset, err.value.hint) == (
        "stream 1: offset overlap against the store: the store ends at 5, the WAL continues at 4", "/w",
        log.offsets[0], "the WAL and the store disagree; nothing was uploaded")


@pytest.mark.parametrize("how", ["add", "run"])
def test_overlap_inside_the_wal_is_an_event_and_drops_the_segment_s_spool(how):
    spools = _Spools()
    log = _Log([_b(1, 0, 3), _b(1, 2), _b(1, 3)])
    r = _records(spools=spools)
    _feed(r, log, how)
    o = log.offsets
    assert r.events == [(o[1], "wal_overlap", (1, 0, 3, 2))]
    assert len(r.segments[1]) == 1 and r.segments[1][0].spool is None
    assert spools.dropped == [spools.made[0]] and len(spools.made) == 1
    with pytest.raises(CorruptionError) as err:
        r.streams([], set(), "/w", [], [])
    assert (err.value.what, err.value.offset, err.value.hint) == (
        "stream 1: offsets overlap in the WAL (0..3 then 2)", o[1], None)


@pytest.mark.parametrize("how", ["add", "run"])
def test_a_gap_inside_the_wal_starts_a_new_segment(how):
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 5), _b(1, 6)])
    r = _records()
    _feed(r, log, how)
    o, body = log.offsets, log.bodies
    assert r.events == [(o[2], "gap", (1, 2, 5, o[1]))]
    assert [(s.start, s.end, list(s.wal)) for s in r.segments[1]] == [(0, 2, o[:2]), (5, 7, o[2:])]
    assert r.segments[1][0].wal_end == o[1] + rec.SIZE + len(body[1])
    holes = [CrashHole(o[1] + 1, o[2])]
    warnings, gaps_out = [], []
    first, later = r.streams(holes, set(), "/w", warnings, gaps_out)
    assert first == {1: r.segments[1][0]} and later == [(1, r.segments[1][1])]
    assert warnings == [f"stream 1: offsets 2..5 are missing: lost in a crash hole at WAL offset {o[1] + 1} (not "
                        f"sealed yet); they were never acknowledged. upload keeps the gap (the records after it go "
                        f"into their own object); nothing to do"]
    assert gaps_out == [{"stream_id": 1, "from": 2, "to": 5, "cause": "crash", "hole_start": o[1] + 1,
                         "sealed": False, "sealed_at_ns": None, "before_wal_offset": o[1], "after_wal_offset": o[2]}]


def test_a_gap_no_crash_explains_is_refused_with_its_accept_gap_spec():
    log = _Log([_b(1, 0), _b(1, 5)])
    r = _records()
    r.add_run(log.run())
    with pytest.raises(CorruptionError) as err:
        r.streams([CrashHole(log.offsets[1] + 10, None)], set(), "/w", [], [])
    assert (err.value.what, err.value.where, err.value.offset, err.value.hint) == (
        f"stream 1: offset gap (1 to 5) that no crash explains, before the record at WAL offset {log.offsets[1]}; "
        f"nothing was uploaded", "/w", log.offsets[1],
        "a wrong --base-offset, or damage; if these offsets are really gone: rerun with --accept-gap 1:1-5 "
        "(recorded in the manifest; nothing else is skipped)")


def test_an_accepted_gap_is_kept_with_the_operator_s_words():
    log = _Log([_b(1, 0), _b(1, 5)])
    r = _records()
    r.add_run(log.run())
    warnings, gaps_out = [], []
    first, later = r.streams([], {(1, 1, 5)}, "/w", warnings, gaps_out)
    assert warnings == ["stream 1: offsets 1..5 are missing: accepted by the operator (upload --accept-gap 1:1-5)"]
    assert gaps_out == [{"stream_id": 1, "from": 1, "to": 5, "cause": "accepted", "hole_start": None,
                         "sealed": False, "sealed_at_ns": None, "before_wal_offset": log.offsets[0],
                         "after_wal_offset": log.offsets[1]}]
    assert len(later) == 1 and later[0][1].start == 5


def test_a_gap_across_damage_is_kept_as_lost_in_it():
    log = _Log([_b(1, 0), _b(1, 5), _b(2, 3)])
    o = log.offsets
    r = _records(_doc({2: (0, 1)}))
    r.add_run(log.run())
    damage = [SimpleNamespace(offset=o[1] + 1, kind="hole", verdict_rule="x"),
              SimpleNamespace(offset=o[0] + 1, kind="hole", verdict_rule="a rule")]
    warnings, gaps_out = [], []
    r.streams([], set(), "/w", warnings, gaps_out, damage)
    assert warnings == [f"stream 1: offsets 1..5 were lost in the damage at WAL offset {o[0] + 1}: recorded in the "
                        f"manifest as a gap (cause corruption)",
                        f"stream 2: offsets 1..3 were lost in the damage at WAL offset {o[1] + 1}: recorded in the "
                        f"manifest as a gap (cause corruption)"]
    assert gaps_out == [
        {"stream_id": 1, "from": 1, "to": 5, "cause": "corruption", "hole_start": None, "sealed": False,
         "sealed_at_ns": None, "before_wal_offset": o[0], "after_wal_offset": o[1], "damage_offset": o[0] + 1},
        {"stream_id": 2, "from": 1, "to": 3, "cause": "corruption", "hole_start": None, "sealed": False,
         "sealed_at_ns": None, "before_wal_offset": None, "after_wal_offset": o[2], "damage_offset": o[1] + 1}]


def test_a_gap_a_crash_explains_or_the_operator_accepted_is_not_called_damage():
    log = _Log([_b(1, 0), _b(1, 5)])
    o = log.offsets
    damage = [SimpleNamespace(offset=o[0] + 1, kind="hole", verdict_rule="x")]
    r = _records()
    r.add_run(log.run())
    gaps_out = []
    r.streams([CrashHole(o[0] + 2, None)], set(), "/w", [], gaps_out, damage)
    assert gaps_out[0]["cause"] == "crash"
    gaps_out = []
    r.streams([], {(1, 1, 5)}, "/w", [], gaps_out, damage)
    assert gaps_out[0]["cause"] == "accepted"


def test_damage_between_is_strictly_between_the_gap_s_records():
    from walctl.wal.gaps import StreamGap

    d = [SimpleNamespace(offset=x) for x in (100, 200, 300)]
    assert scanindex._damage_between(d, StreamGap(1, 0, 5, 100, 300)).offset == 200
    assert scanindex._damage_between(d, StreamGap(1, 0, 5, 100, 200)) is None
    assert scanindex._damage_between(d, StreamGap(1, 0, 5, None, 200)).offset == 100
    assert scanindex._damage_between(d, StreamGap(1, 0, 5, 99, 101)).offset == 100
    assert scanindex._damage_between([SimpleNamespace(offset=0)], StreamGap(1, 0, 5, None, 1)).offset == 0
    assert scanindex._damage_between([SimpleNamespace(offset=-1)], StreamGap(1, 0, 5, None, 1)) is None
    assert scanindex._damage_between([], StreamGap(1, 0, 5, None, 1)) is None


def test_the_first_event_in_log_order_is_judged_first_though_a_run_noted_it_later():
    # stream 1's gap comes after stream 2's overlap in the log, but the run takes stream 1 first
    log = _Log([_b(1, 0), _b(2, 0, 3), _b(2, 1), _b(1, 5)])
    r = _records()
    r.add_run(log.run())
    assert [e[1] for e in r.events] == ["gap", "wal_overlap"] and r.events_sorted is False
    with pytest.raises(CorruptionError, match="overlap in the WAL"):
        r.streams([], {(1, 1, 5)}, "/w", [], [])
    r = _records()
    for e in log.entries():
        r.add(e)
    with pytest.raises(CorruptionError, match="overlap in the WAL"):
        r.streams([], {(1, 1, 5)}, "/w", [], [])


def test_later_segments_are_listed_by_stream_then_log_order():
    log = _Log([_b(2, 0), _b(1, 0), _b(2, 5), _b(1, 5), _b(2, 9), _b(1, 7)])
    r = _records()
    r.add_run(log.run())
    first, later = r.streams([], {(2, 1, 5), (1, 1, 5), (2, 6, 9), (1, 6, 7)}, "/w", [], [])
    assert [(sid, s.start) for sid, s in later] == [(1, 5), (1, 7), (2, 5), (2, 9)]
    assert {sid: s.start for sid, s in first.items()} == {1: 0, 2: 0}


# -- bad records ----------------------------------------------------------------------------------

def test_bad_records_are_listed_and_the_good_one_before_the_first_is_kept():
    log = _Log([_b(1, 0), b"not a batch", _b(1, 1), b"nor this one!"], start=64)
    r = _records()
    for e in log.entries():
        r.add(e)
    o = log.offsets
    assert r.bad == [_Bad(o[1], 11), _Bad(o[3], 13)]
    assert r.good_before_bad == o[0] and r.last_good == o[2]
    r = _records()
    for e in log.entries()[1:]:
        r.add(e)
    assert r.good_before_bad is None and r.bad[0] == _Bad(o[1], 11)


def test_a_bad_record_at_the_mark_finds_the_mark_without_an_upload_mark():
    log = _Log([b"junk"], start=64)
    r = _records(_doc(), mf.UploadMark(64, 1, 0, 0))
    r.add(log.entries()[0])
    assert r.mark_found == (64, None)


# -- kept bodies ----------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_bodies_are_kept_while_they_fit(how):
    log = _Log([_b(1, 0), _b(1, 1, size=40), _b(2, 0)])
    total = sum(map(len, log.bodies))
    r = _records(keep=total)  # exactly: all kept
    _feed(r, log, how)
    assert r.kept == dict(zip(log.offsets, log.bodies)) and r._keep_left == 0
    assert all(type(v) is bytes for v in r.kept.values())
    r = _records(keep=total - 1)  # one byte short: none
    _feed(r, log, how)
    assert r.kept is None


def test_kept_bodies_of_a_run_after_the_mark_are_only_those_uploaded():
    log = _Log([_b(1, 0, size=100), _b(1, 1), _b(1, 2)])
    mark = mf.UploadMark(log.offsets[0], 1, 0, 0)
    need = len(log.bodies[1]) + len(log.bodies[2])
    r = _records(_doc({1: (0, 1)}, [(1, 0, 1)]), mark, keep=need)
    r.add_run(log.run())
    assert r.kept == {log.offsets[1]: log.bodies[1], log.offsets[2]: log.bodies[2]} and r._keep_left == 0


def test_kept_bodies_count_across_records_and_runs():
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 2), _b(1, 3)])
    sizes = list(map(len, log.bodies))
    r = _records(keep=sum(sizes) - 1)
    r.add(log.entries()[0])
    r.add_run(log.run(1, 3))
    assert r.kept is not None and len(r.kept) == 3 and r._keep_left == sizes[3] - 1
    r.add(log.entries()[3])
    assert r.kept is None
    r = _records(keep=sizes[0] + sizes[1] - 1)
    r.add(log.entries()[0])
    r.add_run(log.run(1, 2))
    assert r.kept is None


def test_no_keep_budget_keeps_nothing():
    r = _records(keep=0)
    assert r.kept is None
    _feed(r, _Log([_b(1, 0)]), "run")
    assert r.kept is None and r._keep_left == 0


# -- spooled bodies -------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["add", "run"])
def test_each_new_segment_gets_a_spool_fed_its_bodies(how):
    spools = _Spools()
    log = _Log([_b(1, 0), _b(2, 4, 2), _b(1, 1, 3), _b(1, 9)])
    r = _records(spools=spools)
    _feed(r, log, how)
    made = {(s.sid, s.first): s for s in spools.made}
    assert sorted(made) == [(1, 0), (1, 9), (2, 4)]
    b = log.bodies
    assert b"".join(made[(1, 0)].got) == b[0] + b[2] and b"".join(made[(2, 4)].got) == b[1]
    assert b"".join(made[(1, 9)].got) == b[3]
    assert sum(made[(1, 0)].ends, []) == [1, 4] and made[(2, 4)].ends == [[6]]
    assert [s.spool for s in r.segments[1]] == [made[(1, 0)], made[(1, 9)]] and spools.dropped == []


@pytest.mark.parametrize("how", ["add", "run"])
def test_a_batch_no_spool_holds_drops_the_segment_s_spool(how):
    spools = _Spools(refuse={1})
    r = _records(spools=spools)
    _feed(r, _Log([_b(1, 0), _b(2, 0)]), how)
    assert r.segments[1][0].spool is None and r.segments[2][0].spool is spools.made[1]
    assert spools.dropped == [spools.made[0]]


def test_a_run_while_the_spools_are_closed_drops_its_segments_spools():
    spools = _Spools(is_open=False)
    r = _records(spools=spools)
    r.add_run(_Log([_b(1, 0), _b(1, 1)]).run())
    assert r.segments[1][0].spool is None and spools.dropped == spools.made and len(spools.made) == 1
    assert spools.made[0].got == []


def test_a_segment_without_a_spool_is_not_dropped_again():
    spools = _Spools(is_open=False)
    r = _records(spools=spools)
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 2)])
    r.add_run(log.run(0, 2))
    r.add_run(log.run(2, 3))
    assert len(spools.dropped) == 1


# -- runs in bulk: contiguity ---------------------------------------------------------------------

def test_a_run_joins_each_stream_s_contiguous_stretches_in_bulk():
    items = [_b(1, 0), _b(1, 1), _b(1, 5), _b(1, 6), _b(1, 7), _b(1, 10)]
    log = _Log(items)
    accepted = {(1, 2, 5), (1, 8, 10)}
    for how in ("add", "run"):
        r = _records()
        _feed(r, log, how)
        assert [(s.start, s.end, list(s.wal), s.bytes) for s in r.segments[1]] == [
            (0, 2, log.offsets[0:2], sum(map(len, log.bodies[0:2]))),
            (5, 8, log.offsets[2:5], sum(map(len, log.bodies[2:5]))),
            (10, 11, log.offsets[5:], len(log.bodies[5]))]
        first, later = r.streams([], accepted, "/w", [], [])
        assert len(later) == 2


def test_a_run_continues_the_stream_s_segment_from_an_earlier_run():
    log = _Log([_b(1, 0), _b(2, 0), _b(1, 1), _b(1, 2)])
    r = _records()
    r.add_run(log.run(0, 2))
    r.add_run(log.run(2, 4))
    assert len(r.segments[1]) == 1 and list(r.segments[1][0].wal) == [log.offsets[0]] + log.offsets[2:]
    assert r.segments[1][0].end == 3 and r.events == []


def test_a_run_s_overlap_is_found_inside_one_stream_s_stretch():
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 1)])
    r = _records()
    r.add_run(log.run())
    assert r.events == [(log.offsets[2], "wal_overlap", (1, 1, 2, 1))]


def test_add_and_add_run_agree_on_every_split_of_a_log():
    items = [_b(1, 0), _b(2, 0), _b(1, 1, 2), _b(3, 4), _b(2, 1), _b(1, 3), _b(2, 9), _b(3, 5)]
    log = _Log(items, start=4096)
    ref = _records(_doc({3: (0, 4)}))
    for e in log.entries():
        ref.add(e)
    accepted = {(2, 2, 9)}
    for cut in range(1, len(items)):
        r = _records(_doc({3: (0, 4)}))
        r.add_run(log.run(0, cut))
        r.add_run(log.run(cut, len(items)))
        assert _segs(r) == _segs(ref) and r.last_mark == ref.last_mark
        assert sorted(r.events) == ref.events
        assert r.streams([], accepted, "/w", [], [])[0].keys() == ref.streams([], accepted, "/w", [], [])[0].keys()


# -- upload_mark ----------------------------------------------------------------------------------

def test_upload_mark_is_the_record_s_offset_batch_and_body_crc():
    body = _b(7, 42).encode()
    assert upload_mark(SimpleNamespace(offset=8192, batch=_b(7, 42), body=body)) == mf.UploadMark(
        8192, 7, 42, crc32c(body))
    assert upload_mark(SimpleNamespace(offset=8192, batch=None, body=b"x")) is None


# -- what the first run's survivors asked for -----------------------------------------------------

def test_by_default_nothing_is_kept_and_a_one_byte_budget_is_a_budget():
    r = _Records(_doc(), None, SimpleNamespace(trim_entry=None))
    assert r.kept is None and r.spools is None
    r = _records(keep=1)
    assert r.kept == {}
    r.add(_Log([_b(1, 0)]).entries()[0])
    assert r.kept is None


def test_a_one_stream_run_is_taken_in_one_go_with_its_bodies():
    spools = _Spools()
    log = _Log([_b(1, 0), _b(1, 1), _b(1, 2)])
    r = _records(spools=spools)
    r.add_run(log.run())
    assert r.events_sorted is True and r.segments[1][0].stream_id == 1
    assert spools.made[0].got == [b"".join(log.bodies)] and spools.dropped == []


def test_a_one_stream_run_after_the_mark_is_taken_in_one_go():
    spools = _Spools()
    log = _Log([_b(2, 0), _b(1, 0), _b(1, 1), _b(1, 2)])
    mark = mf.UploadMark(log.offsets[1], 1, 0, 0)
    r = _records(_doc({1: (0, 1), 2: (0, 1)}, [(1, 0, 1), (2, 0, 1)]), mark, spools=spools)
    r.add_run(log.run())
    assert r.events_sorted is True and list(r.skipped) == log.offsets[:2]
    assert [(s.stream_id, s.start, s.end) for s in r.segments[1]] == [(1, 1, 3)] and 2 not in r.segments
    assert spools.made[0].got == [b"".join(log.bodies[2:])]


def test_each_segment_is_its_stream_s():
    log = _Log([_b(4, 0), _b(9, 3), _b(4, 5)])
    for how in ("add", "run"):
        r = _records()
        _feed(r, log, how)
        assert [(sid, s.stream_id) for sid, segs in sorted(r.segments.items()) for s in segs] == [
            (4, 4), (4, 4), (9, 9)]


def test_an_earlier_overlap_is_refused_before_a_later_unexplained_gap():
    # in log order: stream 2's overlap (record 2), then stream 1's gap (record 3); the run takes
    # stream 1 first, so its events are noted gap first
    log = _Log([_b(1, 0), _b(2, 0, 3), _b(2, 1), _b(1, 5)])
    for how in ("add", "run"):
        r = _records()
        _feed(r, log, how)
        with pytest.raises(CorruptionError) as err:
            r.streams([], set(), "/w", [], [])
        assert err.value.what == "stream 2: offsets overlap in the WAL (0..3 then 1)" and err.value.where == "/w"
    # an overlap against the store (record 1) before stream 2's gap (record 2), noted the other way round
    log = _Log([_b(2, 0), _b(1, 5, 3), _b(2, 9)])
    r = _records(_doc({1: (0, 6)}))
    r.add_run(log.run())
    with pytest.raises(CorruptionError) as err:
        r.streams([], set(), "/w", [], [])
    assert err.value.what.startswith("stream 1: offset overlap against the store")
