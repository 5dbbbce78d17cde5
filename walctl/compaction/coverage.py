"""The commit's safety check: a compaction plan's outputs hold exactly the live data of its inputs.

Every compaction level (SSO compaction's plan, SO compaction's and force split's copies in
the same shapes) commits only after ``check_coverage`` passed. The manifest-against-index
checks here are the ones the planner and ``walctl check`` use too.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Sequence

from walctl.compaction.plan import SO, SSO, CompactionPlan, Piece, SourceRange, _key, _stream_spans, object_size
from walctl.errors import CorruptionError

if TYPE_CHECKING:
    from walctl.store.manifest import LiveObject


def merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Sort and join touching [start, end) intervals; None if two of them overlap."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start < out[-1][1]:
            return None
        if out and start == out[-1][1]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def manifest_intervals(obj: LiveObject) -> dict[int, list[tuple[int, int]]]:
    """The offsets the manifest says ``obj`` holds, per stream, merged."""
    per_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in obj.ranges:
        per_stream[r.stream_id].append((r.start, r.end))
    out = {}
    for sid, intervals in per_stream.items():
        joined = merged(intervals)
        if joined is None:
            raise CorruptionError(f"the manifest gives object {obj.id} overlapping ranges of stream {sid}",
                                  where=obj.key)
        out[sid] = joined
    return out


def check_against_manifest(obj: LiveObject, ranges: Sequence[SourceRange]) -> None:
    """The index entries must hold exactly the offsets the manifest says the object holds."""
    per_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in ranges:
        per_stream[r.stream_id].append((r.start_offset, r.end_offset))
    expected = manifest_intervals(obj)
    for sid in sorted(set(per_stream) | set(expected)):
        found = merged(per_stream.get(sid, ()))
        if found is None:
            raise CorruptionError(f"object {obj.id}: index entries of stream {sid} overlap", where=obj.key)
        if found != expected.get(sid, []):
            raise CorruptionError(f"object {obj.id}: its index holds stream {sid} offsets {found or 'none'}, "
                                  f"the manifest says {expected.get(sid) or 'none'}", where=obj.key,
                                  expected=expected.get(sid, []), found=found)

def check_overlaps(ranges: Sequence[SourceRange]) -> None:
    """``ranges`` sorted by (stream, start): two claiming the same offsets is corruption."""
    for prev, cur in zip(ranges, ranges[1:]):
        if cur.stream_id == prev.stream_id and cur.start_offset < prev.end_offset:
            objects = (f"object {prev.object_id}" if prev.object_id == cur.object_id
                       else f"objects {prev.object_id} and {cur.object_id}")
            raise CorruptionError(
                f"stream {cur.stream_id}: {objects} both hold offsets "
                f"[{cur.start_offset}, {min(prev.end_offset, cur.end_offset)})",
                where=cur.key, hint="the store holds overlapping data; nothing was compacted",
                expected=f">= {prev.end_offset}", found=cur.start_offset)

def _fail(what: str, **kw) -> None:
    raise CorruptionError(f"compaction plan: {what}", hint="refusing to commit", **kw)


def check_coverage(plan: CompactionPlan) -> None:
    """Prove the outputs hold exactly the live data of the inputs.

    Checks that the kept and dropped source ranges tile, per input and stream, exactly
    the offsets the manifest gives the input; that each kept range is in exactly one
    output and no range is both kept and dropped; that there is at most one SSO; that
    each output's ranges, streams, sizes and pieces (parts 1..n, back to back, each in one
    iteration) agree; that each iteration's reads fetch its pieces' ranges exactly once;
    and that the outputs' (stream, start, end) cover exactly the
    kept ranges, nothing twice, nothing missing. An idle plan replaces nothing: it passes.
    Raises:
        CorruptionError: the first failed check.
    """
    if plan.idle:
        if plan.iterations or plan.dropped:
            _fail("an idle plan writes or drops nothing, this one does")
        return  # nothing replaced, nothing to cover
    claims = _Claims({o.id: o for o in plan.inputs})
    for d in plan.dropped:
        claims.claim(d.range, "the dropped ranges")
    if sum(o.kind == SSO for o in plan.outputs) > 1:
        _fail("more than one Stream Set Object planned")
    placed = _check_iterations(plan)
    kept_by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    out_by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for n, out in enumerate(plan.outputs):
        for r in out.ranges:
            claims.claim(r, f"output {n}")
            kept_by_stream[r.stream_id].append((r.start_offset, r.end_offset))
        _check_output(n, out, placed)
        for sid, start, end, _ in out.streams:
            out_by_stream[sid].append((start, end))
    if len(placed) != sum(len(o.pieces) for o in plan.outputs):
        _fail("a planned piece belongs to no output")
    claims.check_inputs()
    _check_streams(kept_by_stream, out_by_stream)


class _Claims:
    """Which part of the plan holds each source range: each in one place, each of an input."""

    def __init__(self, inputs: dict[int, LiveObject]):
        self.inputs = inputs
        self.seen: dict[SourceRange, str] = {}

    def claim(self, r: SourceRange, where: str) -> None:
        if r.object_id not in self.inputs:
            _fail(f"{where} holds a range of object {r.object_id}, which is not an input", where=r.key)
        if r in self.seen:
            _fail(f"stream {r.stream_id} offsets [{r.start_offset}, {r.end_offset}) of object {r.object_id} "
                  f"appear in {self.seen[r]} and in {where}", where=r.key)
        self.seen[r] = where

    def check_inputs(self) -> None:
        """Kept + dropped must be exactly each input's data, as the manifest records it."""
        per_object: dict[int, list[SourceRange]] = defaultdict(list)
        for r in self.seen:
            per_object[r.object_id].append(r)
        for oid, obj in self.inputs.items():
            try:
                check_against_manifest(obj, per_object.get(oid, []))
            except CorruptionError as exc:
                _fail(f"the plan's ranges of input {oid} are not its data: {exc.what}", where=obj.key)


def _check_iterations(plan: CompactionPlan) -> dict[tuple[int, int], Piece]:
    """Each iteration's reads fetch its pieces' ranges exactly once, back to back; its pieces are
    planned once each. Returns (output, part) -> piece."""
    placed: dict[tuple[int, int], Piece] = {}
    for it in plan.iterations:
        fetched = [r for rd in it.reads for r in rd.ranges]
        wanted = [r for p in it.pieces for r in p.ranges]
        if sorted(fetched, key=_key) != sorted(wanted, key=_key) or len(set(fetched)) != len(fetched):
            _fail(f"iteration {it.index}: its reads do not fetch each range of its pieces exactly once")
        for rd in it.reads:
            if (any(r.object_id != rd.object_id for r in rd.ranges) or rd.start != rd.ranges[0].position
                    or rd.end != rd.ranges[-1].end_position
                    or any(a.end_position != b.position for a, b in zip(rd.ranges, rd.ranges[1:]))):
                _fail(f"iteration {it.index}: read [{rd.start}, {rd.end}) of object {rd.object_id} does not hold "
                      "its ranges back to back", where=rd.key)
        if it.data_bytes != sum(p.data_bytes for p in it.pieces):
            _fail(f"iteration {it.index}: data bytes do not match its pieces")
        for p in it.pieces:
            if (p.output, p.part) in placed:
                _fail(f"part {p.part} of output {p.output} planned twice")
            placed[(p.output, p.part)] = p
    return placed


def _check_output(n: int, out, placed: dict[tuple[int, int], Piece]) -> None:
    """An output's ranges, streams and sizes agree; its pieces are parts 1..n, back to back."""
    where = f"output {n}"
    if list(out.ranges) != sorted(out.ranges, key=_key):
        _fail(f"{where}: ranges not in (stream, start offset) order")
    if out.kind == SO and len(out.streams) != 1:
        _fail(f"{where}: a Stream Object holds more than one contiguous run of one stream")
    if out.streams != _stream_spans(out.ranges):
        _fail(f"{where}: its streams {out.streams} do not match its ranges")
    data = sum(r.size for r in out.ranges)
    if out.data_bytes != data or out.size_bytes != object_size(data, len(out.ranges)):
        _fail(f"{where}: sizes {out.data_bytes}/{out.size_bytes} do not match its ranges")
    pieces = [placed.get((n, k)) for k in range(1, len(out.pieces) + 1)]
    if not out.pieces or any(p is None for p in pieces) or list(out.pieces) != pieces:
        _fail(f"{where}: its pieces are not parts 1..{len(out.pieces)}, each in one iteration")
    position = 0
    for p in pieces:
        if p.position != position or p.data_bytes != sum(r.size for r in p.ranges) or p.final != (p is pieces[-1]):
            _fail(f"{where}: part {p.part} is not placed right after part {p.part - 1}")
        position += p.data_bytes
    if [r for p in pieces for r in p.ranges] != list(out.ranges):
        _fail(f"{where}: its pieces do not hold its ranges in order")


def _check_streams(kept_by_stream: dict, out_by_stream: dict) -> None:
    """The outputs' (stream, start, end) cover exactly the kept ranges: nothing twice, nothing missing."""
    for sid in sorted(set(kept_by_stream) | set(out_by_stream)):
        kept = merged(kept_by_stream.get(sid, ()))
        written = merged(out_by_stream.get(sid, ()))
        if kept is None:
            _fail(f"stream {sid}: kept ranges overlap")
        if written is None:
            _fail(f"stream {sid}: two outputs hold the same offsets")
        if kept != written:
            _fail(f"stream {sid}: outputs hold offsets {written}, the kept ranges are {kept}",
                  expected=kept, found=written)
