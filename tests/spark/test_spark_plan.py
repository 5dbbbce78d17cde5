"""The pure compaction plan: selection, drops, SO/SSO split, iterations, reads, coverage."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl.errors import CorruptionError, UsageError
from walctl.store import manifest as mf
from walctl.format.object import FOOTER_SIZE, INDEX_ENTRY_SIZE, IndexEntry
from walctl.compaction import plan as planmod
from walctl.compaction import planner
from walctl.compaction.coverage import check_coverage
from walctl.compaction.plan import (DROP_DELETED, DROP_RETENTION, DROP_STREAM_START, CompactionPlan, Iteration,
                                   put_count)
from walctl.compaction.planner import plan_compaction

MIB = 1 << 20


# --- helpers ----------------------------------------------------------------------------------

def fake_sso(object_id: int, streams: dict[int, list[tuple[int, int, int]]], *, order_id: int | None = None,
             kind: str = "SSO") -> tuple[dict, list[IndexEntry]]:
    """A manifest entry and index for an object holding, per stream (ascending), blocks
    given as (start_offset, end_offset, size_bytes), laid out back to back."""
    entries, ranges, position = [], [], 0
    for sid in sorted(streams):
        blocks = streams[sid]
        for start, end, size in blocks:
            entries.append(IndexEntry(sid, start, end - start, 1, position, size))
            position += size
        ranges.append({"stream_id": sid, "start": blocks[0][0], "end": blocks[-1][1],
                       "bytes": sum(b[2] for b in blocks)})
    obj = {"id": object_id, "key": f"k/{object_id}", "kind": kind,
           "size": position + INDEX_ENTRY_SIZE * len(entries) + FOOTER_SIZE,
           "order_id": object_id if order_id is None else order_id, "data_time": 0.0, "ranges": ranges}
    return obj, entries


def blocks(start: int, count: int, size: int, span: int = 10) -> list[tuple[int, int, int]]:
    """``count`` blocks of ``size`` bytes, ``span`` offsets each, from ``start``."""
    return [(start + i * span, start + (i + 1) * span, size) for i in range(count)]


def store(*objects: tuple[dict, list[IndexEntry]], streams: dict[int, tuple[int, int]] | None = None):
    """(manifest, indexes); streams default to the span of the objects' data."""
    if streams is None:
        spans: dict[int, tuple[int, int]] = {}
        for obj, _ in objects:
            for r in obj["ranges"]:
                lo, hi = spans.get(r["stream_id"], (r["start"], r["end"]))
                spans[r["stream_id"]] = (min(lo, r["start"]), max(hi, r["end"]))
        streams = spans
    manifest = mf.Manifest(objects=[mf.LiveObject.from_json(o) for o, _ in objects], compactor_epoch=1,
                           next_object_id=1000, streams={s: mf.StreamSpan(a, b) for s, (a, b) in streams.items()})
    return manifest, {o["id"]: e for o, e in objects}


def stream_offsets(plan: CompactionPlan) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for o in plan.outputs:
        for sid, start, end, _ in o.streams:
            out.setdefault(sid, []).append((start, end))
    return {sid: sorted(v) for sid, v in out.items()}


# --- selection, idle, drops -------------------------------------------------------------------

def test_inputs_are_live_ssos_oldest_first_up_to_max_objects():
    objs = [fake_sso(1, {1: blocks(20, 1, 100)}, order_id=30),
            fake_sso(2, {1: blocks(0, 1, 100)}, order_id=10),
            fake_sso(3, {1: blocks(10, 1, 100)}, order_id=20),
            fake_sso(4, {2: blocks(0, 1, 100)}, kind="SO")]
    manifest, indexes = store(*objs)
    plan = plan_compaction(manifest, indexes)
    assert [o.id for o in plan.inputs] == [2, 3, 1]
    assert not plan.idle
    plan2 = plan_compaction(manifest, indexes, max_objects=2)
    assert [o.id for o in plan2.inputs] == [2, 3]
    assert stream_offsets(plan2) == {1: [(0, 20)]}
    check_coverage(plan2)


def test_missing_index_is_value_error():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)}))
    del indexes[2]
    with pytest.raises(ValueError, match=r"\[2\]"):
        plan_compaction(manifest, indexes)


@pytest.mark.parametrize("option", ["memory_limit", "split_size", "max_objects", "read_cut"])
def test_bad_limits_are_usage_errors(option):
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}))
    with pytest.raises(UsageError):
        plan_compaction(manifest, indexes, **{option: 0})


def test_idle_with_no_input():
    manifest, indexes = store(fake_sso(4, {2: blocks(0, 1, 100)}, kind="SO"))
    plan = plan_compaction(manifest, indexes)
    assert plan.idle and plan.iterations == () and plan.inputs == ()
    assert "no stream set object" in plan.reason
    check_coverage(plan)


def test_idle_with_one_input_and_nothing_to_drop():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 1, 10)}))
    plan = plan_compaction(manifest, indexes)
    assert plan.idle and plan.iterations == () and "only one" in plan.reason
    assert plan.gets == plan.puts == plan.bytes_read == plan.bytes_written == 0


def test_one_input_with_something_to_drop_is_rewritten():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 1, 10)}))
    del manifest.streams[2]
    plan = plan_compaction(manifest, indexes)
    assert not plan.idle
    assert [(d.range.stream_id, d.reason) for d in plan.dropped] == [(2, DROP_DELETED)]
    assert stream_offsets(plan) == {1: [(0, 30)]}
    check_coverage(plan)


def test_drop_rules_and_straddling_range_kept():
    a = fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 3, 100), 3: blocks(0, 2, 100)})
    b = fake_sso(2, {1: blocks(30, 2, 100), 2: blocks(30, 2, 100), 3: blocks(20, 1, 100)})
    manifest, indexes = store(a, b, streams={1: (20, 50), 2: (0, 50)})  # stream 3 deleted
    plan = plan_compaction(manifest, indexes, retention={2: 25})
    reasons = [(d.range.stream_id, d.range.start_offset, d.reason) for d in plan.dropped]
    assert reasons == [(1, 0, DROP_STREAM_START), (1, 10, DROP_STREAM_START),
                       (2, 0, DROP_RETENTION), (2, 10, DROP_RETENTION),
                       (3, 0, DROP_DELETED), (3, 10, DROP_DELETED), (3, 20, DROP_DELETED)]
    # stream 1 starts at 20: its block [20, 30) ends above, kept; stream 2 retention 25
    # falls inside [20, 30): straddling, kept (a block cannot be cut).
    assert stream_offsets(plan) == {1: [(20, 50)], 2: [(20, 50)]}
    assert plan.dropped_bytes == 700
    check_coverage(plan)
    doc = plan.to_json()
    assert doc["dropped_count"] == 7 and doc["dropped"][0]["reason"] == DROP_STREAM_START


def test_everything_dropped_writes_nothing_but_is_not_idle():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 1, 10)}), fake_sso(2, {1: blocks(10, 1, 10)}),
                              streams={})
    plan = plan_compaction(manifest, indexes)
    assert not plan.idle and plan.iterations == () and len(plan.dropped) == 2
    assert "dropped" in plan.reason
    check_coverage(plan)


# --- corruption -------------------------------------------------------------------------------

def test_overlap_between_objects_is_corruption():
    manifest, indexes = store(fake_sso(1, {7: blocks(0, 3, 10)}), fake_sso(2, {7: blocks(25, 2, 10)}))
    with pytest.raises(CorruptionError, match=r"stream 7: objects 1 and 2 both hold offsets \[25, 30\)"):
        plan_compaction(manifest, indexes)


def test_overlap_below_retention_is_still_corruption():
    manifest, indexes = store(fake_sso(1, {7: blocks(0, 3, 10)}), fake_sso(2, {7: blocks(25, 2, 10)}))
    with pytest.raises(CorruptionError, match="stream 7"):
        plan_compaction(manifest, indexes, retention={7: 1000})


def test_index_disagreeing_with_manifest_is_corruption():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 3, 10)}), fake_sso(2, {1: blocks(30, 1, 10)}))
    manifest.objects[0].ranges[0].end = 40
    with pytest.raises(CorruptionError, match="object 1.*manifest"):
        plan_compaction(manifest, indexes)


def test_index_entry_past_the_data_region_is_corruption():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 3, 10)}), fake_sso(2, {1: blocks(30, 1, 10)}))
    manifest.objects[1].size -= 1
    with pytest.raises(CorruptionError, match="outside the data region"):
        plan_compaction(manifest, indexes)


# --- SO / SSO split ---------------------------------------------------------------------------

def test_split_size_makes_stream_objects():
    a = fake_sso(1, {1: blocks(0, 4, 1 * MIB), 2: blocks(0, 1, 100), 3: blocks(0, 1, 100)})
    b = fake_sso(2, {1: blocks(40, 4, 1 * MIB), 2: blocks(10, 1, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, split_size=8 * MIB)
    kinds = [(o.kind, [s[0] for s in o.streams]) for o in plan.outputs]
    assert kinds == [("SO", [1]), ("SSO", [2, 3])]
    so, sso = plan.outputs
    assert so.streams == ((1, 0, 80, 8 * MIB),)
    assert sso.streams == ((2, 0, 20, 200), (3, 0, 10, 100))
    # below the split size, every stream shares the SSO
    plan = plan_compaction(manifest, indexes, split_size=8 * MIB + 1)
    assert [(o.kind, [s[0] for s in o.streams]) for o in plan.outputs] == [("SSO", [1, 2, 3])]
    check_coverage(plan)


def test_gap_makes_one_stream_object_per_big_chain_small_chains_stay_in_the_sso():
    # stream 1 [10, 20) lives in an SO outside the inputs: the inputs hold two chains of it
    a = fake_sso(1, {1: blocks(0, 1, 100), 2: blocks(0, 1, 100), 3: blocks(0, 3, 100)})
    b = fake_sso(2, {1: blocks(20, 2, 100), 2: blocks(10, 1, 100), 3: blocks(40, 1, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, split_size=300)
    # stream 3 [0, 30) is a 300-byte chain (an SO); its chain [40, 50) and all of streams 1
    # and 2 are below the split size: they share the one SSO, gaps and all
    assert [(o.kind, o.streams) for o in plan.outputs] == [
        ("SO", ((3, 0, 30, 300),)),
        ("SSO", ((1, 0, 10, 100), (1, 20, 40, 200), (2, 0, 20, 200), (3, 40, 50, 100)))]
    check_coverage(plan)


def test_a_stream_below_the_split_size_never_yields_a_stream_object():
    a = fake_sso(1, {1: blocks(0, 4, 100), 2: blocks(0, 9, 100)})
    b = fake_sso(2, {1: blocks(50, 1, 100), 2: blocks(90, 1, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, split_size=1000, memory_limit=300)
    assert [(o.kind, [s[0] for s in o.streams]) for o in plan.outputs] == [("SO", [2]), ("SSO", [1, 1])]
    check_coverage(plan)


# --- iterations and pieces --------------------------------------------------------------------

def test_iterations_for_a_known_layout():
    # 3 streams x 10 blocks of 1 MiB over two SSOs; split 8 MiB: every stream is one SO.
    a = fake_sso(1, {s: blocks(0, 5, MIB) for s in (1, 2, 3)})
    b = fake_sso(2, {s: blocks(50, 5, MIB) for s in (1, 2, 3)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=4 * MIB, split_size=8 * MIB)
    assert len(plan.iterations) == 8  # 30 MiB in 4 MiB iterations, ranges never split
    assert [it.data_bytes for it in plan.iterations] == [4 * MIB] * 7 + [2 * MIB]
    # one SO per stream, however many iterations it spans: its pieces are its parts
    assert [(o.kind, o.streams) for o in plan.outputs] == [("SO", ((s, 0, 100, 10 * MIB),)) for s in (1, 2, 3)]
    assert [[(p.part, p.position, p.data_bytes) for p in o.pieces] for o in plan.outputs] == [
        [(1, 0, 4 * MIB), (2, 4 * MIB, 4 * MIB), (3, 8 * MIB, 2 * MIB)],
        [(1, 0, 2 * MIB), (2, 2 * MIB, 4 * MIB), (3, 6 * MIB, 4 * MIB)],
        [(1, 0, 4 * MIB), (2, 4 * MIB, 4 * MIB), (3, 8 * MIB, 2 * MIB)]]
    # iteration 2 ends stream 1's SO and starts stream 2's
    assert [(p.output, p.part, p.final) for p in plan.iterations[2].pieces] == [(0, 3, True), (1, 1, False)]
    # create + 3 parts + the driver's tail part (IndexBlock + Footer) + complete
    assert all(o.multipart and o.puts == 3 + 3 for o in plan.outputs)
    check_coverage(plan)


def test_sso_cut_by_the_limit_is_one_sso_in_parts():
    a = fake_sso(1, {s: blocks(0, 2, 100) for s in range(1, 6)})
    b = fake_sso(2, {s: blocks(20, 1, 100) for s in range(1, 6)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=700)
    (sso,) = plan.outputs
    assert sso.kind == "SSO" and sso.streams == tuple((s, 0, 30, 300) for s in range(1, 6))
    assert [(p.part, p.position, p.data_bytes, p.final) for p in sso.pieces] == [
        (1, 0, 700, False), (2, 700, 700, False), (3, 1400, 100, True)]
    assert [len(it.pieces) for it in plan.iterations] == [1, 1, 1]
    assert plan.to_json()["sso_count"] == 1
    check_coverage(plan)


def test_a_piece_that_does_not_end_its_object_holds_at_least_min_part():
    # SO of stream 1 (1000 bytes), then the SSO (1000 bytes); 1500 per iteration, parts >= 600
    a = fake_sso(1, {1: blocks(0, 5, 100), 2: blocks(0, 5, 100)})
    b = fake_sso(2, {1: blocks(50, 5, 100), 2: blocks(50, 5, 100)})
    manifest, indexes = store(a, b, streams={1: (0, 100), 2: (0, 100)})
    plan = plan_compaction(manifest, indexes, memory_limit=1500, split_size=1000, min_part=600)
    # the 500 bytes left in iteration 0 would make a part below 600: the SSO waits, whole
    assert [[(p.output, p.part, p.data_bytes) for p in it.pieces] for it in plan.iterations] == [
        [(0, 1, 1000)], [(1, 1, 1000)]]
    small = plan_compaction(manifest, indexes, memory_limit=1500, split_size=1000, min_part=400)
    assert [[(p.output, p.part, p.data_bytes) for p in it.pieces] for it in small.iterations] == [
        [(0, 1, 1000), (1, 1, 500)], [(1, 2, 500)]]
    # min_part above the limit: each part still reaches it (the iteration exceeds the limit); an
    # object's last data piece is a part too (the driver's IndexBlock + Footer part follows), so
    # 1000 bytes cannot be cut into two parts of 600: each object goes whole
    big = plan_compaction(manifest, indexes, memory_limit=300, split_size=1000, min_part=600)
    assert [p.data_bytes for o in big.outputs for p in o.pieces] == [1000, 1000]
    # the limit would leave 300 bytes for a last piece: the cut moves back to leave 400
    back = plan_compaction(manifest, indexes, memory_limit=700, split_size=1000, min_part=400)
    assert [p.data_bytes for o in back.outputs for p in o.pieces] == [600, 400, 600, 400]
    for p in (plan, small, big, back):
        check_coverage(p)


def test_oversized_range_goes_alone_and_is_reported():
    a = fake_sso(1, {1: [(0, 10, 100), (10, 20, 5000), (20, 30, 100)]})
    b = fake_sso(2, {1: blocks(30, 2, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=1000, split_size=1)
    assert [it.data_bytes for it in plan.iterations] == [100, 5000, 300]
    assert [r.start_offset for r in plan.oversized] == [10]
    assert plan.to_json()["oversized"][0]["size_bytes"] == 5000
    assert len(plan.outputs) == 1 and len(plan.outputs[0].pieces) == 3
    check_coverage(plan)


# --- reads, gets, puts, bytes -----------------------------------------------------------------

def test_reads_merge_adjacent_blocks_and_cut_at_read_cut():
    a = fake_sso(1, {1: blocks(0, 10, MIB)})
    b = fake_sso(2, {1: blocks(100, 2, MIB)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, read_cut=4 * MIB, split_size=64 * MIB)
    (it,) = plan.iterations
    assert [(r.object_id, r.start, r.end, len(r.ranges)) for r in it.reads] == [
        (1, 0, 4 * MIB, 4), (1, 4 * MIB, 8 * MIB, 4), (1, 8 * MIB, 10 * MIB, 2), (2, 0, 2 * MIB, 2)]
    assert plan.gets == 4 and plan.bytes_read == 12 * MIB


def test_reads_are_per_iteration_and_source_across_outputs():
    # object 1 holds stream 1 (an SO) and stream 2 (the SSO) back to back: one GET feeds both
    a = fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 1, 50)})
    b = fake_sso(2, {1: blocks(30, 3, 100), 2: blocks(10, 1, 50)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, split_size=500)
    assert [o.kind for o in plan.outputs] == ["SO", "SSO"]
    (it,) = plan.iterations
    assert [(r.object_id, r.start, r.end) for r in it.reads] == [(1, 0, 350), (2, 0, 350)]
    assert plan.gets == 2


def test_reads_do_not_join_blocks_that_are_not_adjacent():
    # object 1's stream 2 is dropped: stream 1 and 3 blocks are no longer adjacent
    a = fake_sso(1, {1: blocks(0, 2, 100), 2: blocks(0, 1, 100), 3: blocks(0, 2, 100)})
    b = fake_sso(2, {1: blocks(20, 1, 100), 3: blocks(20, 1, 100)})
    manifest, indexes = store(a, b)
    del manifest.streams[2]
    plan = plan_compaction(manifest, indexes)
    (it,) = plan.iterations
    assert [(r.object_id, r.start, r.end) for r in it.reads] == [(1, 0, 200), (1, 300, 500), (2, 0, 200)]


def test_gets_puts_and_bytes():
    a = fake_sso(1, {1: blocks(0, 20, 2 * MIB), 2: blocks(0, 1, 1000)})
    b = fake_sso(2, {1: blocks(200, 20, 2 * MIB), 2: blocks(10, 1, 1000)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes, memory_limit=1 << 30)
    so, sso = plan.outputs
    assert so.kind == "SO" and so.data_bytes == 80 * MIB
    assert so.size_bytes == 80 * MIB + 40 * INDEX_ENTRY_SIZE + FOOTER_SIZE
    assert so.puts == 2 + 11  # one piece, put_large's multipart: create + ceil(size / 8 MiB) parts + complete
    assert sso.size_bytes == 2000 + 2 * INDEX_ENTRY_SIZE + FOOTER_SIZE and sso.puts == 1
    assert plan.puts == 14
    # per source object: stream 1's 40 MiB and stream 2's adjacent block, in 16 MiB GETs -> 3 each
    assert plan.gets == 6
    assert plan.bytes_read == 80 * MIB + 2000
    assert plan.bytes_written == so.size_bytes + sso.size_bytes
    doc = plan.to_json()
    assert (doc["gets"], doc["puts"], doc["bytes_written"], doc["output_count"]) == (6, 14, plan.bytes_written, 2)
    assert doc["memory_limit_bytes"] == 1 << 30 and doc["split_size_bytes"] == 16 * MIB
    assert doc["outputs"][1]["streams"][0] == {"stream_id": 2, "start": 0, "end": 20, "bytes": 2000}
    assert doc["iterations"][0]["outputs"][1]["streams"][0] == doc["outputs"][1]["streams"][0]
    json.dumps(doc)


def test_put_threshold_is_32_mib():
    assert put_count(32 * MIB) == 1
    assert put_count(32 * MIB + 1) == 2 + 5


# --- check_coverage ---------------------------------------------------------------------------

def _plan_for_doctoring():
    a = fake_sso(1, {1: blocks(0, 3, 100), 2: blocks(0, 2, 100)})
    b = fake_sso(2, {1: blocks(30, 2, 100), 2: blocks(20, 1, 100)})
    manifest, indexes = store(a, b)
    plan = plan_compaction(manifest, indexes)
    check_coverage(plan)
    return plan


def _with_ranges(plan, ranges):
    """``plan`` (one output, one piece) rebuilt around ``ranges``, consistent but for coverage."""
    (out,) = plan.outputs
    data = sum(r.size for r in ranges)
    piece = dataclasses.replace(out.pieces[0], ranges=tuple(ranges), data_bytes=data)
    out = dataclasses.replace(out, ranges=tuple(ranges), data_bytes=data,
                              size_bytes=planmod.object_size(data, len(ranges)),
                              streams=planmod._stream_spans(ranges), pieces=(piece,))
    it = Iteration(0, (piece,), planner._reads(ranges, {}, 16 * MIB), data)
    return dataclasses.replace(plan, outputs=(out,), iterations=(it,))


def test_check_coverage_fails_on_a_removed_range():
    plan = _plan_for_doctoring()
    with pytest.raises(CorruptionError, match="not its data"):
        check_coverage(_with_ranges(plan, plan.outputs[0].ranges[1:]))


def test_check_coverage_fails_on_a_duplicated_range():
    plan = _plan_for_doctoring()
    ranges = plan.outputs[0].ranges
    with pytest.raises(CorruptionError, match="overlap|twice|appear in|not fetch"):
        check_coverage(_with_ranges(plan, tuple(sorted(ranges + ranges[:1], key=planmod._key))))


def test_check_coverage_fails_on_a_dropped_range_also_written():
    manifest, indexes = store(fake_sso(1, {1: blocks(0, 2, 100)}), fake_sso(2, {1: blocks(20, 1, 100)}))
    plan = plan_compaction(manifest, indexes, retention={1: 10})
    bad = dataclasses.replace(plan, dropped=plan.dropped + (dataclasses.replace(plan.dropped[0]),))
    with pytest.raises(CorruptionError, match="appear in"):
        check_coverage(bad)


def test_check_coverage_fails_on_inconsistent_streams_reads_or_parts():
    plan = _plan_for_doctoring()
    (out,) = plan.outputs
    sid, start, end, size = out.streams[0]
    bad = dataclasses.replace(out, streams=((sid, start, end + 10, size),) + out.streams[1:])
    with pytest.raises(CorruptionError, match="streams"):
        check_coverage(dataclasses.replace(plan, outputs=(bad,)))
    it = plan.iterations[0]
    with pytest.raises(CorruptionError, match="reads"):
        check_coverage(dataclasses.replace(plan, iterations=(dataclasses.replace(it, reads=it.reads[1:]),)))
    moved = dataclasses.replace(out.pieces[0], position=10)
    with pytest.raises(CorruptionError, match="part|pieces"):
        check_coverage(dataclasses.replace(plan, outputs=(dataclasses.replace(out, pieces=(moved,)),)))
    two = dataclasses.replace(out, kind="SSO")
    with pytest.raises(CorruptionError, match="more than one Stream Set Object"):
        check_coverage(dataclasses.replace(plan, outputs=(two, two)))


# --- property: random layouts -----------------------------------------------------------------

@st.composite
def layouts(draw):
    """Streams cut into runs of blocks; each stream's runs go to SSOs in ascending order,
    one run per SSO, and a run may be held elsewhere (an SO): a gap in the inputs."""
    n_objects = draw(st.integers(2, 6))
    per_object: list[dict[int, list[tuple[int, int, int]]]] = [{} for _ in range(n_objects)]
    streams: dict[int, tuple[int, int]] = {}
    retention: dict[int, int] = {}
    for sid in range(draw(st.integers(1, 6))):
        offset, next_object = 0, 0
        for _ in range(draw(st.integers(1, 5))):
            run = []
            for span, size in draw(st.lists(st.tuples(st.integers(1, 20), st.integers(10, 400)),
                                            min_size=1, max_size=4)):
                run.append((offset, offset + span, size))
                offset += span
            if next_object >= n_objects or draw(st.integers(0, 5)) == 0:
                continue
            obj = draw(st.integers(next_object, n_objects - 1))
            per_object[obj][sid] = run
            next_object = obj + 1
        streams[sid] = (draw(st.integers(0, offset)) if draw(st.booleans()) else 0, offset)
        if draw(st.booleans()):
            retention[sid] = draw(st.integers(0, offset))
    for sid in draw(st.sets(st.sampled_from(sorted(streams)), max_size=2)):
        del streams[sid]
    objects = [fake_sso(i + 1, layout) for i, layout in enumerate(per_object) if layout]
    limits = (draw(st.integers(300, 3000)), draw(st.integers(100, 4000)), draw(st.integers(200, 2000)))
    return objects, streams, retention, limits


def _join(per_stream: dict[int, list[tuple[int, int]]]) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for sid, intervals in per_stream.items():
        merged: list[tuple[int, int]] = []
        for a, b in sorted(intervals):
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        out[sid] = merged
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_random_layouts_are_covered_exactly(case):
    objects, streams, retention, (memory_limit, split_size, read_cut) = case
    manifest, indexes = store(*objects, streams=streams)
    plan = plan_compaction(manifest, indexes, memory_limit=memory_limit, split_size=split_size,
                           retention=retention, read_cut=read_cut)
    check_coverage(plan)
    if plan.idle:
        assert len(plan.inputs) < 2 and not plan.dropped and not plan.iterations
        return
    # what the inputs keep, worked out here independently of the plan
    kept: dict[int, list[tuple[int, int]]] = {}
    dropped = 0
    for _, entries in objects:
        for e in entries:
            live = (e.stream_id in streams and e.end_offset > streams[e.stream_id][0]
                    and e.end_offset > retention.get(e.stream_id, -1))
            if live:
                kept.setdefault(e.stream_id, []).append((e.start_offset, e.end_offset))
            else:
                dropped += 1
    assert len(plan.dropped) == dropped
    assert _join(stream_offsets(plan)) == _join(kept)
    oversized = set(plan.oversized)
    for it in plan.iterations:
        lone = len(it.pieces) == 1 and len(it.pieces[0].ranges) == 1 and it.pieces[0].ranges[0] in oversized
        assert it.data_bytes <= memory_limit or lone
        assert all(r.size <= read_cut or len(r.ranges) == 1 for r in it.reads)
        # the minimum GETs: per source object, ranges adjacent in it are one GET unless read_cut splits them
        for a, b in zip(it.reads, it.reads[1:]):
            if a.object_id == b.object_id and a.end == b.start:
                assert b.end - a.start > read_cut
    assert sum(o.kind == "SSO" for o in plan.outputs) <= 1
    for o in plan.outputs:
        for prev, cur in zip(o.ranges, o.ranges[1:]):
            assert (prev.stream_id, prev.end_offset) <= (cur.stream_id, cur.start_offset)
            if prev.stream_id == cur.stream_id and o.kind == "SO":
                assert cur.start_offset == prev.end_offset  # an SO is one contiguous run
        assert o.kind == "SSO" or len(o.streams) == 1
    # a contiguous run is an SO exactly when it holds at least the split size
    for o in plan.outputs:
        for sid, start, end, size in o.streams:
            assert (o.kind == "SO") == (size >= split_size)
    assert plan.bytes_read == sum(o.data_bytes for o in plan.outputs)
