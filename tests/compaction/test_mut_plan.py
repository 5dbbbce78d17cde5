"""The compaction plan's model, planner and coverage check (walctl/compaction/plan.py, planner.py,
coverage.py), pinned where tests/spark/test_spark_plan.py looks only at shapes: each refusal's
exact words and fields, each limit at its boundary, the plan's JSON, and every check of
check_coverage failing on a plan doctored in exactly one way (issue 32: mutation testing)."""

from __future__ import annotations

import dataclasses

import pytest

from walctl.compaction import coverage, planner
from walctl.compaction import plan as planmod
from walctl.compaction.coverage import check_coverage
from walctl.compaction.plan import (DROP_DELETED, DROP_RETENTION, DROP_STREAM_START, Dropped, Iteration,
                                    OutputObject, Piece, Read, SourceRange)
from walctl.compaction.planner import plan_compaction
from walctl.errors import CorruptionError, UsageError
from walctl.format.object import FOOTER_SIZE, INDEX_ENTRY_SIZE, IndexEntry
from walctl.store import manifest as mf

MIB = 1 << 20


def fake_sso(object_id, streams, *, order_id=None, kind="SSO"):
    """A manifest entry and index for an object holding, per stream, blocks (start, end, size) back to back."""
    entries, ranges, position = [], [], 0
    for sid in sorted(streams):
        for start, end, size in streams[sid]:
            entries.append(IndexEntry(sid, start, end - start, 1, position, size))
            position += size
        ranges.append(mf.ObjectRange(sid, streams[sid][0][0], streams[sid][-1][1], sum(b[2] for b in streams[sid])))
    obj = mf.LiveObject(object_id, f"k/{object_id}", kind, position + INDEX_ENTRY_SIZE * len(entries) + FOOTER_SIZE,
                        ranges, order_id=object_id if order_id is None else order_id, data_time=0.0)
    return obj, entries


def blocks(start, count, size, span=10):
    return [(start + i * span, start + (i + 1) * span, size) for i in range(count)]


def store(*objects, streams=None):
    if streams is None:
        streams = {}
        for obj, _ in objects:
            for r in obj.ranges:
                lo, hi = streams.get(r.stream_id, (r.start, r.end))
                streams[r.stream_id] = (min(lo, r.start), max(hi, r.end))
    manifest = mf.Manifest(objects=[o for o, _ in objects], compactor_epoch=1, next_object_id=1000,
                           streams={s: mf.StreamSpan(a, b) for s, (a, b) in streams.items()})
    return manifest, {o.id: e for o, e in objects}


def _sr(oid=1, sid=1, start=0, end=10, position=0, size=100, count=1):
    return SourceRange(oid, f"k/{oid}", sid, start, end, count, position, size)


# --- the model ----------------------------------------------------------------------------------

def test_source_range_and_read_json():
    r = _sr(oid=3, sid=7, start=5, end=9, position=40, size=60, count=2)
    assert r.end_position == 100
    assert r.to_json() == {"object_id": 3, "key": "k/3", "stream_id": 7, "start_offset": 5, "end_offset": 9,
                           "record_count": 2, "block_position": 40, "size_bytes": 60}
    read = Read(3, "k/3", 40, 160, (r, r))
    assert read.size == 120
    assert read.to_json() == {"object_id": 3, "key": "k/3", "start_position": 40, "end_position": 160,
                              "size_bytes": 120, "range_count": 2}
    assert Dropped(r, DROP_RETENTION).to_json() == {**r.to_json(), "reason": "below retention start"}
    assert (DROP_DELETED, DROP_STREAM_START) == ("stream deleted", "below stream start")


def test_piece_and_output_json_and_puts():
    r = _sr()
    piece = Piece(0, 2, (r,), 300, 100, True)
    assert piece.to_json() == {"output": 0, "part": 2, "position": 300, "data_bytes": 100, "final": True,
                               "range_count": 1}
    one = OutputObject("SO", (r,), 100, 184, ((1, 0, 10, 100),), (piece,))
    assert not one.multipart and one.puts == 1
    assert one.to_json() == {"kind": "SO", "data_bytes": 100, "size_bytes": 184, "puts": 1, "parts": 1,
                             "streams": [{"stream_id": 1, "start": 0, "end": 10, "bytes": 100}],
                             "ranges": [r.to_json()]}
    two = dataclasses.replace(one, pieces=(piece, piece))
    assert two.multipart and two.puts == 5  # create, two parts, the tail part, complete
    big = dataclasses.replace(one, size_bytes=32 * MIB + 1)
    assert big.puts == 2 + 5


def test_object_size_and_put_count_at_their_boundaries():
    assert planmod.object_size(1000, 3) == 1000 + 3 * INDEX_ENTRY_SIZE + FOOTER_SIZE
    assert planmod.put_count(32 * MIB) == 1
    assert planmod.put_count(32 * MIB + 1) == 2 + 5
    assert planmod.put_count(40 * MIB) == 2 + 5 and planmod.put_count(40 * MIB + 1) == 2 + 6


def test_stream_spans_join_only_touching_ranges_of_a_stream():
    rs = [_sr(sid=1, start=0, end=10, size=5), _sr(sid=1, start=10, end=20, size=7),
          _sr(sid=1, start=25, end=30, size=1), _sr(sid=2, start=30, end=40, size=2)]
    assert planmod._stream_spans(rs) == ((1, 0, 20, 12), (1, 25, 30, 1), (2, 30, 40, 2))
    assert planmod._stream_spans([]) == ()


def test_the_plan_s_json():
    a = fake_sso(1, {1: blocks(0, 2, 100), 2: blocks(0, 1, 50)})
    b = fake_sso(2, {1: blocks(20, 1, 100), 3: blocks(0, 1, 30)})
    manifest, indexes = store(a, b, streams={1: (0, 30), 2: (0, 10)})  # stream 3 deleted
    plan = plan_compaction(manifest, indexes, memory_limit=1000, split_size=250, read_cut=150, min_part=3, tasks=2)
    doc = plan.to_json()
    so, sso = plan.outputs
    assert doc == {
        "idle": False, "reason": "compact 2 stream set objects into 2 objects in 1 iteration, 1 range dropped",
        "memory_limit_bytes": 1000, "split_size_bytes": 250, "read_cut_bytes": 150, "min_part_bytes": 3,
        "tasks": 2, "task_memory_bytes": 500, "input_count": 2, "input_ids": [1, 2],
        "input_bytes": a[0].size + b[0].size, "inputs": [a[0].to_json(), b[0].to_json()],
        "dropped_count": 1, "dropped_bytes": 30, "dropped": [plan.dropped[0].to_json()], "oversized": [],
        "iteration_count": 1, "output_count": 2, "so_count": 1, "sso_count": 1,
        "gets": 3, "puts": 2, "bytes_read": 350, "bytes_written": so.size_bytes + sso.size_bytes,
        "outputs": [so.to_json(), sso.to_json()],
        "iterations": [plan.iterations[0].to_json(plan.outputs)]}
    assert plan.dropped[0].reason == DROP_DELETED and plan.dropped[0].range.stream_id == 3
    it = doc["iterations"][0]
    assert (it["index"], it["data_bytes"], it["gets"]) == (0, 350, 3)
    assert [o["output"] for o in it["outputs"]] == [0, 1] and [o["part"] for o in it["outputs"]] == [1, 1]
    assert it["outputs"][0]["kind"] == "SO" and "outputs" not in plan.iterations[0].to_json()
    assert it["pieces"] == [p.to_json() for p in plan.iterations[0].pieces] and len(it["pieces"]) == 2
    assert it["reads"] == [r.to_json() for r in plan.iterations[0].reads] and len(it["reads"]) == 3
    assert [r.to_json()["size_bytes"] for r in plan.iterations[0].reads] == [100, 150, 100]
    assert (plan.gets, plan.bytes_read, plan.kept) == (3, 350, so.ranges + sso.ranges)


def test_the_plan_s_json_counts_its_stream_objects():
    a = fake_sso(1, {1: blocks(0, 1, 100), 2: blocks(0, 1, 100), 3: blocks(0, 1, 10)})
    b = fake_sso(2, {1: blocks(10, 1, 100), 2: blocks(10, 1, 100)})
    manifest, indexes = store(a, b)
    doc = plan_compaction(manifest, indexes, split_size=200).to_json()
    assert (doc["so_count"], doc["sso_count"], doc["output_count"]) == (2, 1, 3)


def test_task_memory_is_the_limit_shared_by_the_tasks():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)}))
    assert plan_compaction(manifest, indexes, memory_limit=1000, tasks=3).task_memory == 333
    # never less than min_part a task: fewer tasks
    plan = plan_compaction(manifest, indexes, memory_limit=1000, min_part=300, tasks=5)
    assert (plan.tasks, plan.task_memory) == (3, 333)
    plan = plan_compaction(manifest, indexes, memory_limit=1000, min_part=2000, tasks=5)
    assert (plan.tasks, plan.task_memory) == (1, 1000)
    assert dataclasses.replace(plan, memory_limit=1, tasks=4).task_memory == 1


# --- the planner's refusals and reasons -------------------------------------------------------

@pytest.mark.parametrize("option, name", [("memory_limit", "memory limit"), ("split_size", "split size"),
                                          ("max_objects", "max objects"), ("read_cut", "read cut"),
                                          ("min_part", "min part"), ("tasks", "tasks")])
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_a_limit_that_is_not_a_positive_integer_is_refused(option, name, value):
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}))
    with pytest.raises(UsageError) as err:
        plan_compaction(manifest, indexes, **{option: value})
    assert err.value.what == f"{name} must be an integer >= 1, got {value!r}"
    plan_compaction(manifest, indexes, **{option: 1})  # 1 is a limit


def test_an_input_without_its_index_is_named():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)}),
                              fake_sso(3, {1: blocks(20, 1, 10)}))
    del indexes[3], indexes[1]
    with pytest.raises(ValueError) as err:
        plan_compaction(manifest, indexes)
    assert str(err.value) == "no index given for input objects [1, 3]"


def test_the_idle_reasons_and_the_dropped_reason():
    manifest, indexes = store(fake_sso(4, {2: blocks(0, 1, 100)}, kind="SO"))
    assert plan_compaction(manifest, indexes).reason == "no stream set object to compact"
    manifest, indexes = store(fake_sso(7, {1: blocks(0, 2, 100)}))
    plan = plan_compaction(manifest, indexes)
    assert plan.idle and plan.reason == "only one stream set object (id 7) and nothing to drop"
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)}), streams={})
    plan = plan_compaction(manifest, indexes)
    assert not plan.idle
    assert plan.reason == "all data of the 2 inputs is dropped: they are removed, nothing is written"


def test_inputs_are_sorted_by_order_then_id_and_copied():
    objs = [fake_sso(5, {1: blocks(0, 1, 10)}, order_id=1), fake_sso(3, {1: blocks(10, 1, 10)}, order_id=1),
            fake_sso(9, {1: blocks(20, 1, 10)}, order_id=0)]
    manifest, indexes = store(*objs)
    plan = plan_compaction(manifest, indexes, max_objects=2)
    assert [o.id for o in plan.inputs] == [9, 3]
    assert plan.inputs[0] is not manifest.objects[2] and plan.inputs[0] == manifest.objects[2]


def test_drop_rules_at_their_boundaries():
    a = fake_sso(1, {1: blocks(0, 2, 100), 2: blocks(0, 2, 100)})
    b = fake_sso(2, {1: blocks(20, 1, 100), 2: blocks(20, 1, 100)})
    # stream 1 starts at 10: [0, 10) ends at it (dropped), [10, 20) kept; stream 2's retention 10 likewise
    manifest, indexes = store(a, b, streams={1: (10, 30), 2: (0, 30)})
    plan = plan_compaction(manifest, indexes, retention={2: 10, 5: 100})
    assert [(d.range.stream_id, d.range.start_offset, d.reason) for d in plan.dropped] == [
        (1, 0, DROP_STREAM_START), (2, 0, DROP_RETENTION)]
    assert [(r.stream_id, r.start_offset) for r in plan.kept] == [(1, 10), (1, 20), (2, 10), (2, 20)]


def test_dropped_ranges_are_listed_by_stream_offset_then_input_order():
    a = fake_sso(1, {4: blocks(10, 1, 10), 6: blocks(0, 1, 10)}, order_id=2)
    b = fake_sso(2, {4: blocks(0, 1, 10), 5: blocks(0, 1, 10)}, order_id=1)
    manifest, indexes = store(a, b, streams={})
    plan = plan_compaction(manifest, indexes)
    assert [(d.range.object_id, d.range.stream_id, d.range.start_offset) for d in plan.dropped] == [
        (2, 4, 0), (1, 4, 10), (2, 5, 0), (1, 6, 0)]


def test_an_index_entry_outside_the_data_region_is_named():
    a = fake_sso(1, {1: blocks(0, 3, 10)})
    obj, entries = a
    data_end = obj.size - FOOTER_SIZE - INDEX_ENTRY_SIZE * 3
    assert data_end == 30
    cases = [(IndexEntry(1, 20, 10, 1, 20, 11), "[20, 31)"),  # one byte past the data
             (IndexEntry(1, 20, 10, 1, -1, 10), "[-1, 9)"),
             (IndexEntry(1, 20, 10, 1, 20, 0), "[20, 20)")]
    for bad, span in cases:
        with pytest.raises(CorruptionError) as err:
            planner.source_ranges(obj, entries[:2] + [bad])
        assert err.value.what == (f"object 1: index entry of stream 1 at offset 20 points at bytes {span}, "
                                  "outside the data region [0, 30)")
        assert err.value.where == "k/1"
    ranges = planner.source_ranges(obj, entries[:2] + [IndexEntry(1, 20, 10, 7, 20, 10)])  # ends at the data's end
    assert ranges[2] == SourceRange(1, "k/1", 1, 20, 30, 7, 20, 10)
    unsized = dataclasses.replace(obj, size=None)
    assert len(planner.source_ranges(unsized, entries[:2] + [cases[0][0]])) == 3  # no size: not checked


def test_check_against_manifest_names_what_differs():
    obj, entries = fake_sso(4, {1: blocks(0, 2, 10), 2: blocks(0, 1, 10)})
    ranges = planner.source_ranges(obj, entries)
    with pytest.raises(CorruptionError) as err:
        coverage.check_against_manifest(obj, ranges[:1] + ranges[2:])
    assert err.value.what == "object 4: its index holds stream 1 offsets [(0, 10)], the manifest says [(0, 20)]"
    assert (err.value.where, err.value.expected, err.value.found) == ("k/4", [(0, 20)], [(0, 10)])
    with pytest.raises(CorruptionError) as err:
        coverage.check_against_manifest(obj, ranges[:2])
    assert err.value.what == "object 4: its index holds stream 2 offsets none, the manifest says [(0, 10)]"
    assert (err.value.expected, err.value.found) == ([(0, 10)], [])
    with pytest.raises(CorruptionError) as err:
        coverage.check_against_manifest(obj, ranges + [_sr(oid=4, sid=9)])
    assert err.value.what == "object 4: its index holds stream 9 offsets [(0, 10)], the manifest says none"
    assert err.value.expected == []
    with pytest.raises(CorruptionError) as err:
        coverage.check_against_manifest(obj, ranges + [_sr(oid=4, sid=1, start=5, end=15)])
    assert err.value.what == "object 4: index entries of stream 1 overlap" and err.value.where == "k/4"


def test_a_manifest_entry_with_overlapping_ranges_is_corrupt():
    obj, _ = fake_sso(4, {1: blocks(0, 2, 10)})
    obj.ranges.append(mf.ObjectRange(1, 15, 25, 10))
    with pytest.raises(CorruptionError) as err:
        coverage.manifest_intervals(obj)
    assert err.value.what == "the manifest gives object 4 overlapping ranges of stream 1"
    assert err.value.where == "k/4"
    obj.ranges[-1] = mf.ObjectRange(1, 20, 25, 10)
    assert coverage.manifest_intervals(obj) == {1: [(0, 25)]}


def test_merged_joins_touching_intervals_and_refuses_overlaps():
    assert coverage.merged([(5, 9), (0, 5), (12, 14)]) == [(0, 9), (12, 14)]
    assert coverage.merged([(0, 5), (4, 6)]) is None
    assert coverage.merged([]) == []


def test_overlaps_within_one_object_are_named():
    rs = [_sr(oid=3, sid=2, start=0, end=10), _sr(oid=3, sid=2, start=8, end=9)]
    with pytest.raises(CorruptionError) as err:
        coverage.check_overlaps(rs)
    assert err.value.what == "stream 2: object 3 both hold offsets [8, 9)"
    assert err.value.where == "k/3" and err.value.hint == "the store holds overlapping data; nothing was compacted"
    assert (err.value.expected, err.value.found) == (">= 10", 8)
    coverage.check_overlaps([_sr(sid=1, start=0, end=10), _sr(sid=2, start=5, end=9), _sr(sid=2, start=9)])


# --- check_coverage: each check, failing alone --------------------------------------------------

def _plan():
    a = fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 2, 100)})
    b = fake_sso(2, {1: blocks(30, 2, 100), 2: blocks(20, 1, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=350, read_cut=1000)
    check_coverage(plan)
    assert len(plan.outputs) == 1 and len(plan.outputs[0].pieces) == 3
    return plan


def _fails(plan, what, **fields):
    with pytest.raises(CorruptionError) as err:
        check_coverage(plan)
    assert err.value.what == f"compaction plan: {what}"
    assert err.value.hint == "refusing to commit"
    for name, value in fields.items():
        assert getattr(err.value, name) == value


def _out(plan, **changes):
    return dataclasses.replace(plan, outputs=(dataclasses.replace(plan.outputs[0], **changes),))


def test_an_idle_plan_that_writes_or_drops_fails():
    plan = _plan()
    idle = dataclasses.replace(plan, idle=True)
    _fails(idle, "an idle plan writes or drops nothing, this one does")
    d = Dropped(_sr(), DROP_DELETED)
    _fails(dataclasses.replace(idle, iterations=(), dropped=(d,)), "an idle plan writes or drops nothing, this one does")
    check_coverage(dataclasses.replace(idle, iterations=(), outputs=()))


def test_a_range_of_no_input_fails():
    plan = _plan()
    stranger = _sr(oid=99)
    _fails(dataclasses.replace(plan, dropped=(Dropped(stranger, DROP_DELETED),)),
           "the dropped ranges holds a range of object 99, which is not an input", where="k/99")


def test_a_range_dropped_and_written_fails():
    plan = _plan()
    r = plan.outputs[0].ranges[0]
    _fails(dataclasses.replace(plan, dropped=(Dropped(r, DROP_RETENTION),)),
           f"stream 1 offsets [0, 10) of object {r.object_id} appear in the dropped ranges and in output 0", where=r.key)


def test_more_than_one_stream_set_object_fails():
    plan = _plan()
    _fails(dataclasses.replace(plan, outputs=plan.outputs * 2), "more than one Stream Set Object planned")


def test_reads_that_miss_or_repeat_a_range_fail():
    plan = _plan()
    it = plan.iterations[0]
    _fails(dataclasses.replace(plan, iterations=(dataclasses.replace(it, reads=it.reads[1:]),) + plan.iterations[1:]),
           "iteration 0: its reads do not fetch each range of its pieces exactly once")
    twice = it.reads + it.reads[:1]
    _fails(dataclasses.replace(plan, iterations=(dataclasses.replace(it, reads=twice),) + plan.iterations[1:]),
           "iteration 0: its reads do not fetch each range of its pieces exactly once")


@pytest.mark.parametrize("how", ["object", "start", "end", "gap"])
def test_a_read_that_does_not_hold_its_ranges_back_to_back_fails(how):
    plan = _plan()
    it = plan.iterations[0]
    rd = next(r for r in it.reads if len(r.ranges) >= 2)
    if how == "object":
        bad = dataclasses.replace(rd, object_id=rd.object_id + 1)
    elif how == "start":
        bad = dataclasses.replace(rd, start=rd.start + 1)
    elif how == "end":
        bad = dataclasses.replace(rd, end=rd.end - 1)
    else:
        moved = dataclasses.replace(rd.ranges[1], position=rd.ranges[1].position + 1)
        bad = dataclasses.replace(rd, ranges=(rd.ranges[0], moved) + rd.ranges[2:], end=moved.end_position
                                  if len(rd.ranges) == 2 else rd.end)
        # the piece holds the moved range too: the reads still fetch each of its ranges once
        pieces = tuple(dataclasses.replace(p, ranges=tuple(moved if r == rd.ranges[1] else r for r in p.ranges))
                       for p in it.pieces)
        it = dataclasses.replace(it, pieces=pieces)
    reads = tuple(bad if r is rd else r for r in it.reads)
    _fails(dataclasses.replace(plan, iterations=(dataclasses.replace(it, reads=reads),) + plan.iterations[1:]),
           f"iteration 0: read [{bad.start}, {bad.end}) of object {bad.object_id} does not hold its ranges back to "
           "back", where=bad.key)


def test_an_iteration_s_bytes_that_are_not_its_pieces_fail():
    plan = _plan()
    it = plan.iterations[1]
    wrong = dataclasses.replace(it, data_bytes=it.data_bytes + 1)
    _fails(dataclasses.replace(plan, iterations=(plan.iterations[0], wrong) + plan.iterations[2:]),
           "iteration 1: data bytes do not match its pieces")


def test_a_part_planned_twice_fails():
    plan = _plan()
    first = plan.iterations[0]
    again = Iteration(3, first.pieces, first.reads, first.data_bytes)
    _fails(dataclasses.replace(plan, iterations=plan.iterations + (again,)), "part 1 of output 0 planned twice")


def test_an_output_s_ranges_out_of_order_fail():
    plan = _plan()
    out = plan.outputs[0]
    _fails(_out(plan, ranges=out.ranges[::-1]), "output 0: ranges not in (stream, start offset) order")


def test_a_stream_object_of_two_runs_fails():
    plan = _plan()
    _fails(_out(plan, kind="SO"), "output 0: a Stream Object holds more than one contiguous run of one stream")


def test_an_output_s_streams_that_are_not_its_ranges_fail():
    plan = _plan()
    out = plan.outputs[0]
    streams = ((1, 0, 40, 500),) + out.streams[1:]
    _fails(_out(plan, streams=streams), f"output 0: its streams {streams} do not match its ranges")


@pytest.mark.parametrize("field, delta", [("data_bytes", 1), ("size_bytes", 1), ("size_bytes", -1)])
def test_an_output_s_sizes_that_are_not_its_ranges_fail(field, delta):
    plan = _plan()
    out = plan.outputs[0]
    bad = {field: getattr(out, field) + delta}
    data, size = bad.get("data_bytes", out.data_bytes), bad.get("size_bytes", out.size_bytes)
    _fails(_out(plan, **bad), f"output 0: sizes {data}/{size} do not match its ranges")


def test_an_output_without_its_parts_fails():
    plan = _plan()
    out = plan.outputs[0]
    _fails(_out(plan, pieces=()), "output 0: its pieces are not parts 1..0, each in one iteration")
    stray = Iteration(3, (Piece(5, 1, (), 0, 0, True),), (), 0)
    _fails(dataclasses.replace(plan, iterations=plan.iterations + (stray,)), "a planned piece belongs to no output")
    _fails(_out(plan, pieces=out.pieces + (out.pieces[0],)),
           "output 0: its pieces are not parts 1..4, each in one iteration")
    swapped = (out.pieces[1], out.pieces[0]) + out.pieces[2:]
    _fails(_out(plan, pieces=swapped), "output 0: its pieces are not parts 1..3, each in one iteration")


def _replace_piece(plan, k, **changes):
    """Piece ``k`` changed in its output and in its iteration alike."""
    out = plan.outputs[0]
    old = out.pieces[k]
    new = dataclasses.replace(old, **changes)
    pieces = tuple(new if p is old else p for p in out.pieces)
    its = tuple(dataclasses.replace(it, pieces=tuple(new if p is old else p for p in it.pieces))
                for it in plan.iterations)
    return dataclasses.replace(plan, outputs=(dataclasses.replace(out, pieces=pieces),), iterations=its)


@pytest.mark.parametrize("k, changes", [(1, {"position": 1}), (0, {"position": 1}), (0, {"final": True}),
                                        (2, {"final": False})])
def test_a_part_not_placed_right_after_the_one_before_fails(k, changes):
    plan = _plan()
    _fails(_replace_piece(plan, k, **changes), f"output 0: part {k + 1} is not placed right after part {k}")


def test_a_part_whose_bytes_are_not_its_ranges_fails():
    plan = _plan()
    piece = plan.outputs[0].pieces[2]
    changed = _replace_piece(plan, 2, data_bytes=piece.data_bytes + 1)
    its = tuple(dataclasses.replace(it, data_bytes=sum(p.data_bytes for p in it.pieces)) for it in changed.iterations)
    _fails(dataclasses.replace(changed, iterations=its), "output 0: part 3 is not placed right after part 2")


def test_parts_that_do_not_hold_the_output_s_ranges_in_order_fail():
    plan = _plan()
    out = plan.outputs[0]
    r0, r1 = out.pieces[0].ranges[:2]
    assert r0.size == r1.size
    changed = _replace_piece(plan, 0, ranges=(r1, r0) + out.pieces[0].ranges[2:])
    _fails(changed, "output 0: its pieces do not hold its ranges in order")


def test_ranges_missing_from_the_plan_fail_as_not_the_input_s_data():
    plan = _plan()
    out = plan.outputs[0]
    last = out.pieces[-1]
    assert len(last.ranges) >= 2
    kept = last.ranges[:-1]
    data = sum(r.size for r in out.ranges) - last.ranges[-1].size
    ranges = out.ranges[:-1]
    gone = dataclasses.replace(last, ranges=kept, data_bytes=last.data_bytes - last.ranges[-1].size)
    its = []
    for it in plan.iterations:
        pieces = tuple(gone if p is last else p for p in it.pieces)
        rs = [r for p in pieces for r in p.ranges]
        its.append(Iteration(it.index, pieces, planner._reads(rs, {1: 0, 2: 1}, 1000), sum(p.data_bytes for p in pieces)))
    bad = dataclasses.replace(plan, iterations=tuple(its), outputs=(dataclasses.replace(
        out, ranges=ranges, data_bytes=data, size_bytes=planmod.object_size(data, len(ranges)),
        streams=planmod._stream_spans(ranges), pieces=out.pieces[:-1] + (gone,)),))
    r = last.ranges[-1]
    with pytest.raises(CorruptionError) as err:
        check_coverage(bad)
    assert err.value.what.startswith(f"compaction plan: the plan's ranges of input {r.object_id} are not its data: "
                                     f"object {r.object_id}: its index holds stream {r.stream_id}")
    assert err.value.where == r.key and err.value.hint == "refusing to commit"


def test_outputs_that_do_not_hold_the_kept_offsets_fail():
    kept = {1: [(0, 10), (20, 30)]}
    coverage._check_streams(kept, {1: [(20, 30), (0, 10)]})
    with pytest.raises(CorruptionError) as err:
        coverage._check_streams(kept, {1: [(0, 10)]})
    assert err.value.what == "compaction plan: stream 1: outputs hold offsets [(0, 10)], the kept ranges are " \
                             "[(0, 10), (20, 30)]"
    assert (err.value.expected, err.value.found) == ([(0, 10), (20, 30)], [(0, 10)])
    with pytest.raises(CorruptionError) as err:
        coverage._check_streams({2: [(0, 10), (5, 15)]}, {2: [(0, 15)]})
    assert err.value.what == "compaction plan: stream 2: kept ranges overlap"
    with pytest.raises(CorruptionError) as err:
        coverage._check_streams({2: [(0, 15)]}, {2: [(0, 10), (5, 15)]})
    assert err.value.what == "compaction plan: stream 2: two outputs hold the same offsets"
    with pytest.raises(CorruptionError):
        coverage._check_streams({}, {3: [(0, 1)]})


# --- cutting outputs into pieces: _fill and _leave_a_part at their boundaries --------------------

def _sizes(*sizes):
    return [_sr(start=10 * i, end=10 * i + 10, position=sum(sizes[:i]), size=s) for i, s in enumerate(sizes)]


def test_fill_takes_what_fits_the_room():
    assert planner._fill(_sizes(10), 100, True, 50) == (1, 10)  # the whole rest fits: a last piece may be small
    assert planner._fill(_sizes(10, 10, 100), 25, True, 20) == (2, 20)  # exactly a part
    assert planner._fill(_sizes(10, 10, 100), 25, True, 21) is None  # less than a part, started: next iteration
    assert planner._fill(_sizes(10, 10, 100), 20, False, 1) == (2, 20)  # exactly the room


def test_fill_in_a_fresh_iteration_takes_a_part_over_the_limit():
    assert planner._fill(_sizes(10, 10, 10), 5, False, 20) == (2, 20)
    assert planner._fill(_sizes(5, 5), 0, False, 100) == (2, 10)  # the whole rest, still less than a part
    assert planner._fill(_sizes(50, 5), 0, False, 1) == (1, 50)  # at least one range


def test_leave_a_part_moves_the_cut_back_until_the_rest_is_a_part():
    assert planner._leave_a_part(_sizes(40, 30, 5), 2, 70, False, 1000, 25) == (1, 40)
    assert planner._leave_a_part(_sizes(25, 25, 5), 2, 50, False, 1000, 25) == (1, 25)  # exactly a part each
    assert planner._leave_a_part(_sizes(30, 30, 30), 2, 60, False, 1000, 25) == (2, 60)  # the rest is a part


def test_leave_a_part_that_no_cut_can_leave_takes_the_whole_rest():
    # moving back would leave a part of 10 here: no cut can; not started: the whole rest goes along
    assert planner._leave_a_part(_sizes(10, 30, 5), 2, 40, False, 1000, 25) == (3, 45)
    # started: the next iteration takes the whole rest when it fits there
    assert planner._leave_a_part(_sizes(10, 30, 5), 2, 40, True, 45, 25) is None
    assert planner._leave_a_part(_sizes(10, 30, 5), 2, 40, True, 44, 25) == (3, 45)
    assert planner._leave_a_part(_sizes(60, 5), 1, 60, False, 1000, 25) == (2, 65)  # one range: no cut to move


def test_reads_follow_the_inputs_order_then_the_object_id():
    rs = [_sr(oid=oid, sid=oid, position=0, size=10) for oid in (1, 3, 5, 7)]
    reads = planner._reads(rs, {5: 0, 3: 1}, 100)
    assert [(r.object_id, r.key) for r in reads] == [(5, "k/5"), (3, "k/3"), (1, "k/1"), (7, "k/7")]
    reads = planner._reads([_sr(oid=2, position=0), _sr(oid=2, position=100), _sr(oid=2, position=300)], {}, 1000)
    assert [(r.key, r.start, r.end, len(r.ranges)) for r in reads] == [("k/2", 0, 200, 2), ("k/2", 300, 400, 1)]


def test_kept_offsets_no_output_holds_fail():
    with pytest.raises(CorruptionError) as err:
        coverage._check_streams({4: [(0, 10)]}, {})
    assert err.value.what == "compaction plan: stream 4: outputs hold offsets [], the kept ranges are [(0, 10)]"


def test_an_input_none_of_whose_ranges_the_plan_holds_fails():
    plan = _plan()
    extra, _ = fake_sso(9, {1: blocks(100, 1, 10)})
    _fails(dataclasses.replace(plan, inputs=plan.inputs + (extra,)),
           "the plan's ranges of input 9 are not its data: object 9: its index holds stream 1 offsets none, the "
           "manifest says [(100, 110)]", where="k/9")


def _cuts(outputs, memory_limit, min_part):
    """_cut_pieces' iterations as [(output, [sizes], final)] each."""
    iterations, oversized = planner._cut_pieces([(kind, _sizes(*sizes)) for kind, sizes in outputs],
                                                memory_limit, min_part)
    return [[(o, [r.size for r in rs], final) for o, rs, final in it] for it in iterations], \
        [r.size for r in oversized]


def test_cut_pieces_fills_an_iteration_with_several_outputs():
    assert _cuts([("SO", [4]), ("SO", [4]), ("SSO", [4])], 10, 1) == (
        [[(0, [4], True), (1, [4], True)], [(2, [4], True)]], [])


def test_cut_pieces_leaves_no_last_part_below_min_part():
    # a cut after the 3 would leave a part of 1 < min_part 2: the output goes whole, over the limit
    assert _cuts([("SSO", [3, 1])], 3, 2) == ([[(0, [3, 1], True)]], [])
    assert _cuts([("SSO", [3, 1])], 3, 1) == ([[(0, [3], False)], [(0, [1], True)]], [])


def test_cut_pieces_moves_an_output_that_cannot_be_cut_to_the_next_iteration():
    # after the 3: room 7 takes the 6, which would leave a 2 < min_part 4: the 6 and 2 go next, together
    assert _cuts([("SSO", [3]), ("SO", [6, 2])], 10, 4) == ([[(0, [3], True)], [(1, [6, 2], True)]], [])


def test_a_range_of_exactly_the_memory_limit_is_not_oversized():
    assert _cuts([("SSO", [10, 11])], 10, 1) == ([[(0, [10], False)], [(0, [11], True)]], [11])


def test_defaults_and_inputs_copied_deeply():
    objs = [fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)})]
    manifest, indexes = store(*objs)
    plan = plan_compaction(manifest, indexes)
    assert (plan.min_part, plan.tasks, plan.read_cut, plan.memory_limit) == (1, 1, 16 * MIB, 200 * MIB)
    assert plan.split_size == 16 * MIB
    manifest.objects[0].ranges[0].end = 999  # the manifest changes after planning: the plan's inputs do not
    assert plan.inputs[0].ranges[0].end == 10


def test_overlapping_ranges_of_a_deleted_stream_are_dropped_not_refused():
    a = fake_sso(1, {1: blocks(0, 1, 10), 9: blocks(0, 3, 10)})
    b = fake_sso(2, {1: blocks(10, 1, 10), 9: blocks(5, 1, 10)})
    manifest, indexes = store(a, b, streams={1: (0, 20)})  # stream 9 deleted
    plan = plan_compaction(manifest, indexes)
    assert [(d.range.stream_id, d.range.start_offset, d.reason) for d in plan.dropped] == [
        (9, 0, DROP_DELETED), (9, 5, DROP_DELETED), (9, 10, DROP_DELETED), (9, 20, DROP_DELETED)]
    check_coverage(plan)


def test_an_index_entry_of_one_byte_is_valid():
    obj, entries = fake_sso(1, {1: [(0, 10, 1), (10, 20, 1)]})
    assert [r.size for r in planner.source_ranges(obj, entries)] == [1, 1]


def test_a_memory_limit_of_one_byte_holds_one_range_an_iteration():
    a = fake_sso(1, {1: blocks(0, 2, 1)})
    b = fake_sso(2, {1: blocks(20, 1, 1)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=1)
    assert [it.data_bytes for it in plan.iterations] == [1, 1, 1]
    assert plan.oversized == ()
    check_coverage(plan)
