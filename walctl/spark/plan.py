"""The SSO compaction plan (docs/FORMATS.md 4): which ranges go where, read how, in which iteration.

Pure: it takes the manifest and the index entries the caller read, and returns a
frozen plan. No I/O, no clock, no Spark; the Spark job carries the plan out and
``check_coverage`` is what its commit relies on.

The unit is an index entry of an input object (a ``SourceRange``): a DataBlock or
a run of consecutive DataBlocks of one stream, copied verbatim, never cut. Every
source range of an output gets an index entry of its own there, so an output
object is ``sum(range sizes) + 36 * ranges + 48`` bytes.

Planning, in order:
1. inputs: the live SSOs, oldest ``order_id`` first, at most ``max_objects``;
2. drop the ranges of deleted streams and those wholly below a stream's retention
   or start offset (a range straddling the point is kept: a block cannot be cut);
3. outputs: one Stream Object per contiguous run of a stream holding >= ``split_size``
   bytes, and at most one Stream Set Object for everything else (so a rerun is idle);
4. walk the outputs, filling iterations of at most ``memory_limit / tasks`` data bytes
   (``tasks`` iterations run at once, so together they hold at most ``memory_limit``); an
   output cut by an iteration boundary continues in the next one as its next piece
   (a multipart part of >= ``min_part`` bytes unless it is the last);
5. per iteration, per source object, physically adjacent ranges are one ranged GET
   of at most ``read_cut`` bytes: the fewest GETs the iterations allow.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from walctl import defaults
from walctl.errors import CorruptionError, UsageError
from walctl.format.object import FOOTER_SIZE, INDEX_ENTRY_SIZE, IndexEntry

SSO = "SSO"
SO = "SO"

DEFAULT_MEMORY_LIMIT = defaults.DEFAULT_MEMORY_LIMIT  # AutoMQ's default compaction cache
DEFAULT_SPLIT_SIZE = defaults.DEFAULT_SPLIT_SIZE  # FORMATS.md 3: a stream this large gets its own Stream Object
DEFAULT_MAX_OBJECTS = 1000  # bounds the index reads and the size of one commit
DEFAULT_READ_CUT = 16 << 20  # FORMATS.md 4: one ranged GET reads at most this much

MULTIPART_THRESHOLD = defaults.MULTIPART_THRESHOLD_BYTES  # FORMATS.md 4: objects above this are uploaded in parts
MULTIPART_PART_SIZE = defaults.DEFAULT_PART_BYTES  # the store's part size (walctl.store.base)

DROP_DELETED = "stream deleted"
DROP_RETENTION = "below retention start"
DROP_STREAM_START = "below stream start"


# --- the plan ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceRange:
    """One index entry of an input object: stream offsets [start_offset, end_offset) in
    object bytes [position, position + size)."""

    object_id: int
    key: str
    stream_id: int
    start_offset: int
    end_offset: int
    record_count: int
    position: int
    size: int

    @property
    def end_position(self) -> int:
        return self.position + self.size

    def to_json(self) -> dict:
        return {"object_id": self.object_id, "key": self.key, "stream_id": self.stream_id,
                "start_offset": self.start_offset, "end_offset": self.end_offset,
                "record_count": self.record_count, "block_position": self.position, "size_bytes": self.size}


@dataclass(frozen=True)
class Read:
    """One ranged GET: bytes [start, end) of a source object, holding ``ranges`` back to back."""

    object_id: int
    key: str
    start: int
    end: int
    ranges: tuple[SourceRange, ...]

    @property
    def size(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict:
        return {"object_id": self.object_id, "key": self.key, "start_position": self.start,
                "end_position": self.end, "size_bytes": self.size, "range_count": len(self.ranges)}


@dataclass(frozen=True)
class Piece:
    """The bytes of one output written in one iteration: output data [position, position + data_bytes).

    An output written in one piece is one PUT, its IndexBlock and Footer included; an output
    of several pieces is one multipart upload, piece ``part`` is its part ``part`` and the
    driver adds one more part, the IndexBlock and Footer (FORMATS.md 4).
    """

    output: int  # index into CompactionPlan.outputs
    part: int  # 1-based
    ranges: tuple[SourceRange, ...]
    position: int
    data_bytes: int
    final: bool

    def to_json(self) -> dict:
        return {"output": self.output, "part": self.part, "position": self.position,
                "data_bytes": self.data_bytes, "final": self.final, "range_count": len(self.ranges)}


@dataclass(frozen=True)
class OutputObject:
    """One object to write: its source ranges in output order, written in ``pieces``.

    ``streams`` holds (stream_id, start_offset, end_offset, bytes) per contiguous run of a
    stream, bytes being the ranges' sizes (DataBlock headers included, as copied). A Stream
    Object holds one run; the Stream Set Object may hold several runs of a stream with an
    offset gap between them.
    """

    kind: str
    ranges: tuple[SourceRange, ...]
    data_bytes: int
    size_bytes: int
    streams: tuple[tuple[int, int, int, int], ...]
    pieces: tuple[Piece, ...] = ()

    @property
    def multipart(self) -> bool:
        return len(self.pieces) > 1

    @property
    def puts(self) -> int:
        """One PUT (or put_large's own multipart above 32 MiB); several pieces: create, one part per
        piece, the tail part (IndexBlock + Footer, the driver's) and complete."""
        if len(self.pieces) > 1:
            return 3 + len(self.pieces)
        return put_count(self.size_bytes)

    def to_json(self) -> dict:
        return {"kind": self.kind, "data_bytes": self.data_bytes, "size_bytes": self.size_bytes,
                "puts": self.puts, "parts": len(self.pieces),
                # the manifest's range shape, so the commit can record it as the object's "ranges"
                "streams": [{"stream_id": s, "start": a, "end": b, "bytes": n} for s, a, b, n in self.streams],
                "ranges": [r.to_json() for r in self.ranges]}


@dataclass(frozen=True)
class Iteration:
    """One memory-limited batch: the pieces it writes and the GETs (per source object) that feed them."""

    index: int
    pieces: tuple[Piece, ...]
    reads: tuple[Read, ...]
    data_bytes: int

    def to_json(self, outputs: Sequence[OutputObject] = ()) -> dict:
        out = {"index": self.index, "data_bytes": self.data_bytes, "gets": len(self.reads),
               "pieces": [p.to_json() for p in self.pieces],
               "reads": [r.to_json() for r in self.reads]}
        if outputs:
            out["outputs"] = [{**outputs[p.output].to_json(), "output": p.output, "part": p.part}
                              for p in self.pieces]
        return out


@dataclass(frozen=True)
class Dropped:
    """A source range left out of every output, and why (one of the DROP_* texts)."""

    range: SourceRange
    reason: str

    def to_json(self) -> dict:
        return {**self.range.to_json(), "reason": self.reason}


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction run reads, drops and writes; ``idle`` when there is nothing worth doing.

    ``outputs`` are at most one Stream Set Object plus one Stream Object per contiguous run
    of a stream of at least ``split_size`` bytes; ``iterations`` write them piece by piece.
    ``oversized`` lists the ranges larger than ``task_memory`` (each alone in its
    iteration, which therefore exceeds the limit).
    """

    inputs: tuple[dict, ...]
    dropped: tuple[Dropped, ...]
    iterations: tuple[Iteration, ...]
    idle: bool
    reason: str
    memory_limit: int
    split_size: int
    oversized: tuple[SourceRange, ...] = ()
    read_cut: int = DEFAULT_READ_CUT
    outputs: tuple[OutputObject, ...] = ()
    min_part: int = 1
    tasks: int = 1  # iterations that run at once, each with at most task_memory data bytes

    @property
    def task_memory(self) -> int:
        """Data bytes one iteration holds at most (oversized ranges aside)."""
        return max(1, self.memory_limit // self.tasks)

    @property
    def kept(self) -> tuple[SourceRange, ...]:
        """Every source range written, in output order."""
        return tuple(r for o in self.outputs for r in o.ranges)

    @property
    def gets(self) -> int:
        """Ranged GETs of object data: per iteration and source object, adjacent blocks joined."""
        return sum(len(it.reads) for it in self.iterations)

    @property
    def puts(self) -> int:
        return sum(o.puts for o in self.outputs)

    @property
    def bytes_read(self) -> int:
        return sum(r.size for it in self.iterations for r in it.reads)

    @property
    def bytes_written(self) -> int:
        return sum(o.size_bytes for o in self.outputs)

    @property
    def dropped_bytes(self) -> int:
        return sum(d.range.size for d in self.dropped)

    def to_json(self) -> dict:
        return {
            "idle": self.idle, "reason": self.reason,
            "memory_limit_bytes": self.memory_limit, "split_size_bytes": self.split_size,
            "read_cut_bytes": self.read_cut, "min_part_bytes": self.min_part,
            "tasks": self.tasks, "task_memory_bytes": self.task_memory,
            "input_count": len(self.inputs), "input_ids": [o["id"] for o in self.inputs],
            "input_bytes": sum(o.get("size", 0) for o in self.inputs),
            "inputs": [_json_copy(o) for o in self.inputs],
            "dropped_count": len(self.dropped), "dropped_bytes": self.dropped_bytes,
            "dropped": [d.to_json() for d in self.dropped],
            "oversized": [r.to_json() for r in self.oversized],
            "iteration_count": len(self.iterations), "output_count": len(self.outputs),
            "so_count": sum(o.kind == SO for o in self.outputs),
            "sso_count": sum(o.kind == SSO for o in self.outputs),
            "gets": self.gets, "puts": self.puts,
            "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
            "outputs": [o.to_json() for o in self.outputs],
            "iterations": [it.to_json(self.outputs) for it in self.iterations],
        }


# --- planning ---------------------------------------------------------------------------------

def _json_copy(value):
    """A deep copy of manifest-shaped data (dicts, lists, tuples, scalars): what copy.deepcopy
    gives, several times faster (no memo: the manifest holds no shared or cyclic parts). Other
    objects go to copy.deepcopy."""
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, tuple):
        return tuple(_json_copy(v) for v in value)
    return copy.deepcopy(value)


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _key(r: SourceRange) -> tuple[int, int]:
    return (r.stream_id, r.start_offset)


def _merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]] | None:
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


def _manifest_intervals(obj: dict) -> dict[int, list[tuple[int, int]]]:
    """The offsets the manifest says ``obj`` holds, per stream, merged."""
    per_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in obj.get("ranges", ()):
        per_stream[int(r["stream_id"])].append((int(r["start"]), int(r["end"])))
    out = {}
    for sid, intervals in per_stream.items():
        merged = _merged(intervals)
        if merged is None:
            raise CorruptionError(f"the manifest gives object {obj['id']} overlapping ranges of stream {sid}",
                                  where=obj.get("key"))
        out[sid] = merged
    return out


def _check_against_manifest(obj: dict, ranges: Sequence[SourceRange]) -> None:
    """The index entries must hold exactly the offsets the manifest says the object holds."""
    per_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in ranges:
        per_stream[r.stream_id].append((r.start_offset, r.end_offset))
    expected = _manifest_intervals(obj)
    for sid in sorted(set(per_stream) | set(expected)):
        found = _merged(per_stream.get(sid, ()))
        if found is None:
            raise CorruptionError(f"object {obj['id']}: index entries of stream {sid} overlap", where=obj.get("key"))
        if found != expected.get(sid, []):
            raise CorruptionError(f"object {obj['id']}: its index holds stream {sid} offsets {found or 'none'}, "
                                  f"the manifest says {expected.get(sid) or 'none'}", where=obj.get("key"),
                                  expected=expected.get(sid, []), found=found)


def _source_ranges(obj: dict, entries: Sequence[IndexEntry]) -> list[SourceRange]:
    ranges = [SourceRange(obj["id"], obj["key"], e.stream_id, e.start_offset, e.end_offset, e.record_count,
                          e.block_position, e.block_size) for e in entries]
    size = obj.get("size")
    if size is not None:
        data_end = size - FOOTER_SIZE - INDEX_ENTRY_SIZE * len(entries)
        for r in ranges:
            if r.position < 0 or r.size < 1 or r.end_position > data_end:
                raise CorruptionError(f"object {obj['id']}: index entry of stream {r.stream_id} at offset "
                                      f"{r.start_offset} points at bytes [{r.position}, {r.end_position}), "
                                      f"outside the data region [0, {data_end})", where=obj["key"])
    _check_against_manifest(obj, ranges)
    return ranges


def _drop_reason(r: SourceRange, streams: Mapping[str, dict], retention: Mapping[int, int]) -> str | None:
    known = streams.get(str(r.stream_id))
    if known is None:
        return DROP_DELETED
    if r.stream_id in retention and r.end_offset <= retention[r.stream_id]:
        return DROP_RETENTION
    if r.end_offset <= known["start"]:
        return DROP_STREAM_START
    return None


def _check_overlaps(ranges: Sequence[SourceRange]) -> None:
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


def _chains(ranges: Sequence[SourceRange]) -> list[list[SourceRange]]:
    """Split one stream's sorted ranges where the next does not start at the previous end."""
    chains: list[list[SourceRange]] = []
    for r in ranges:
        if chains and r.start_offset == chains[-1][-1].end_offset:
            chains[-1].append(r)
        else:
            chains.append([r])
    return chains


def _stream_spans(ranges: Sequence[SourceRange]) -> tuple[tuple[int, int, int, int], ...]:
    """(stream, start, end, bytes) per contiguous run of a stream in ``ranges`` (sorted by (stream, start))."""
    spans: list[list[int]] = []
    for r in ranges:
        if spans and spans[-1][0] == r.stream_id and r.start_offset == spans[-1][2]:
            spans[-1][2] = r.end_offset
            spans[-1][3] += r.size
        else:
            spans.append([r.stream_id, r.start_offset, r.end_offset, r.size])
    return tuple(tuple(s) for s in spans)  # type: ignore[misc]


def _reads(ranges: Sequence[SourceRange], object_order: Mapping[int, int], read_cut: int) -> tuple[Read, ...]:
    """Per source object, by position: join physically adjacent ranges into GETs of <= read_cut bytes.

    A single range larger than ``read_cut`` is one GET of its own.
    """
    by_object: dict[int, list[SourceRange]] = defaultdict(list)
    for r in ranges:
        by_object[r.object_id].append(r)
    reads: list[Read] = []
    for object_id in sorted(by_object, key=lambda oid: (object_order.get(oid, len(object_order)), oid)):
        group: list[SourceRange] = []
        for r in sorted(by_object[object_id], key=lambda r: r.position):
            if group and (group[-1].end_position != r.position
                          or r.end_position - group[0].position > read_cut):
                reads.append(Read(object_id, group[0].key, group[0].position, group[-1].end_position, tuple(group)))
                group = []
            group.append(r)
        reads.append(Read(object_id, group[0].key, group[0].position, group[-1].end_position, tuple(group)))
    return tuple(reads)


def object_size(data_bytes: int, range_count: int) -> int:
    """An output's size: its blocks, one index entry per source range, the footer."""
    return data_bytes + INDEX_ENTRY_SIZE * range_count + FOOTER_SIZE


def put_count(size_bytes: int) -> int:
    """PUT requests to upload an object: one, or multipart create + parts + complete."""
    if size_bytes <= MULTIPART_THRESHOLD:
        return 1
    return 2 + -(-size_bytes // MULTIPART_PART_SIZE)


def _cut_pieces(outputs: Sequence[tuple[str, list[SourceRange]]], memory_limit: int,
                min_part: int) -> tuple[list[list[tuple[int, list[SourceRange], bool]]], list[SourceRange]]:
    """Cut the outputs (in order) into pieces filling iterations of at most ``memory_limit`` bytes.

    An output continues in the next iteration where the limit cuts it (its next part). Every
    piece of an output cut in several holds at least ``min_part`` bytes (S3's part minimum:
    the object's last part is the IndexBlock and Footer, which the driver adds), so a small
    remainder waits for the next iteration, or a cut moves back to leave ``min_part`` for
    the next piece. A range larger than the limit goes with what it must (its iteration
    exceeds the limit: ``oversized``); an iteration exceeds the limit by less than
    ``min_part`` where an output cannot be cut into pieces of at least ``min_part``.
    Returns per iteration [(output index, ranges, final)], and the oversized ranges.
    """
    iterations: list[list[tuple[int, list[SourceRange], bool]]] = [[]]
    oversized: list[SourceRange] = []
    fill = 0
    for index, (_, ranges) in enumerate(outputs):
        rest = list(ranges)
        while rest:
            room = memory_limit - fill
            take, size = 0, 0
            while take < len(rest) and size + rest[take].size <= room:
                size += rest[take].size
                take += 1
            if take < len(rest) and size < min_part:
                if fill:  # not enough room for a valid part here: start the next iteration
                    iterations.append([])
                    fill = 0
                    continue
                # a fresh iteration and still too little: take what a part needs, over the limit
                while take < len(rest) and (size < min_part or take == 0):
                    size += rest[take].size
                    take += 1
            if take < len(rest) and min_part > 1:
                # what this cut leaves is a part too (never the object's last): at least min_part
                left = sum(r.size for r in rest[take:])
                while left < min_part and take > 1 and size - rest[take - 1].size >= min_part:
                    take -= 1
                    size -= rest[take].size
                    left += rest[take].size
                if left < min_part:  # no cut here leaves two parts of min_part
                    if fill and left + size <= memory_limit:  # the whole rest fits the next iteration
                        iterations.append([])
                        fill = 0
                        continue
                    size += left  # the rest goes along, over the limit by less than min_part
                    take = len(rest)
            oversized.extend(r for r in rest[:take] if r.size > memory_limit)
            iterations[-1].append((index, rest[:take], take == len(rest)))
            fill += size
            rest = rest[take:]
            if rest:
                iterations.append([])
                fill = 0
    if not iterations[-1]:
        iterations.pop()
    return iterations, oversized


def plan_compaction(manifest: dict, indexes: Mapping[int, Sequence[IndexEntry]], *,
                    memory_limit: int = DEFAULT_MEMORY_LIMIT, split_size: int = DEFAULT_SPLIT_SIZE,
                    max_objects: int = DEFAULT_MAX_OBJECTS, retention: Mapping[int, int] | None = None,
                    read_cut: int = DEFAULT_READ_CUT, min_part: int = 1, tasks: int = 1) -> CompactionPlan:
    """Plan the compaction of the oldest live SSOs of ``manifest``.

    Args:
        manifest: a manifest snapshot (walctl.store.manifest).
        indexes: object id -> its decoded index entries, for every input (extra ids are ignored).
        memory_limit: data bytes the running iterations hold together (a range larger than
            an iteration's share goes alone).
        split_size: a stream with at least this many kept bytes gets Stream Objects.
        max_objects: at most this many SSOs, oldest order_id first.
        retention: stream id -> first offset to keep; ranges wholly below it are dropped.
        read_cut: at most this many bytes per ranged GET (unless one range is larger).
        min_part: smallest piece of an output cut by an iteration boundary (a multipart
            upload's part minimum: S3's 5 MiB, 1 for a local store).
        tasks: iterations that run at once; each gets ``memory_limit // tasks`` bytes, but
            never less than ``min_part`` (fewer tasks then: ``plan.tasks`` says how many).
            An iteration reads each run of adjacent blocks it needs from a source object with
            one GET (compact_bench: exactly one per iteration and source touched), but one
            holding pieces of several outputs touches nearly every source however small it is: more tasks,
            more and smaller iterations, more GETs (compact_bench's layout: 1459 GETs in 12
            iterations for 1 task, 2436 in 25 for 2; its SSO alone 4 x 160 and 8 x 160).
    Raises:
        UsageError: a limit below 1.
        ValueError: an input SSO without its index in ``indexes``.
        CorruptionError: an index disagrees with the manifest or its object's size, or two
            ranges of a stream overlap.
    """
    _positive("memory limit", memory_limit)
    _positive("split size", split_size)
    _positive("max objects", max_objects)
    _positive("read cut", read_cut)
    _positive("min part", min_part)
    _positive("tasks", tasks)
    tasks = max(1, min(tasks, memory_limit // min_part))
    retention = dict(retention or {})
    streams = manifest.get("streams", {})

    candidates = sorted((o for o in manifest.get("objects", ()) if o.get("kind") == SSO),
                        key=lambda o: (o["order_id"], o["id"]))
    inputs = tuple(_json_copy(o) for o in candidates[:max_objects])
    object_order = {o["id"]: i for i, o in enumerate(inputs)}

    def make(idle: bool, reason: str, dropped=(), iterations=(), oversized=(), outputs=()) -> CompactionPlan:
        return CompactionPlan(inputs, tuple(dropped), tuple(iterations), idle, reason, memory_limit, split_size,
                              tuple(oversized), read_cut, tuple(outputs), min_part, tasks)

    if not inputs:
        return make(True, "no stream set object to compact")
    missing = [o["id"] for o in inputs if o["id"] not in indexes]
    if missing:
        raise ValueError(f"no index given for input object(s) {missing}")

    live: list[SourceRange] = []
    dropped: list[Dropped] = []
    for obj in inputs:
        for r in _source_ranges(obj, indexes[obj["id"]]):
            reason = _drop_reason(r, streams, retention)
            if reason == DROP_DELETED:
                dropped.append(Dropped(r, reason))
            else:
                live.append(r)
    # Overlaps are looked for among every range of a live stream, dropped or not: two
    # objects claiming the same offsets is damage to report, even below retention.
    live.sort(key=lambda r: (_key(r), object_order[r.object_id]))
    _check_overlaps(live)
    kept: list[SourceRange] = []
    for r in live:
        reason = _drop_reason(r, streams, retention)
        if reason is None:
            kept.append(r)
        else:
            dropped.append(Dropped(r, reason))
    dropped.sort(key=lambda d: (_key(d.range), object_order[d.range.object_id]))

    if len(inputs) < 2 and not dropped:
        return make(True, f"only one stream set object (id {inputs[0]['id']}) and nothing to drop")

    # A contiguous run of a stream of at least split_size bytes becomes a Stream Object (one,
    # however many iterations it takes); everything else goes into the one Stream Set Object.
    by_stream: dict[int, list[SourceRange]] = defaultdict(list)
    for r in kept:
        by_stream[r.stream_id].append(r)
    groups: list[tuple[str, list[SourceRange]]] = []
    shared: list[SourceRange] = []
    for sid in sorted(by_stream):
        for chain in _chains(by_stream[sid]):
            if sum(r.size for r in chain) >= split_size:
                groups.append((SO, chain))
            else:
                shared.extend(chain)
    if shared:
        groups.append((SSO, sorted(shared, key=_key)))

    cut, oversized = _cut_pieces(groups, max(1, memory_limit // tasks), min_part)
    pieces_of: dict[int, list[Piece]] = defaultdict(list)
    iterations: list[Iteration] = []
    for index, batch in enumerate(cut):
        pieces = []
        for out, ranges, final in batch:
            done = pieces_of[out]
            position = done[-1].position + done[-1].data_bytes if done else 0
            piece = Piece(out, len(done) + 1, tuple(ranges), position, sum(r.size for r in ranges), final)
            done.append(piece)
            pieces.append(piece)
        reads = _reads([r for p in pieces for r in p.ranges], object_order, read_cut)
        iterations.append(Iteration(index, tuple(pieces), reads, sum(p.data_bytes for p in pieces)))
    outputs = []
    for index, (kind, ranges) in enumerate(groups):
        data = sum(r.size for r in ranges)
        outputs.append(OutputObject(kind, tuple(ranges), data, object_size(data, len(ranges)),
                                    _stream_spans(ranges), tuple(pieces_of[index])))

    if not kept:
        reason = f"all data of the {len(inputs)} input(s) is dropped: they are removed, nothing is written"
    else:
        reason = (f"compact {len(inputs)} stream set object(s) into {len(outputs)} object(s) "
                  f"in {len(iterations)} iteration(s), {len(dropped)} range(s) dropped")
    return make(False, reason, dropped, iterations, oversized, outputs)


# --- the commit's safety check ----------------------------------------------------------------

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
    inputs = {o["id"]: o for o in plan.inputs}
    seen: dict[SourceRange, str] = {}

    def claim(r: SourceRange, where: str) -> None:
        if r.object_id not in inputs:
            _fail(f"{where} holds a range of object {r.object_id}, which is not an input", where=r.key)
        if r in seen:
            _fail(f"stream {r.stream_id} offsets [{r.start_offset}, {r.end_offset}) of object {r.object_id} "
                  f"appear in {seen[r]} and in {where}", where=r.key)
        seen[r] = where

    for d in plan.dropped:
        claim(d.range, "the dropped ranges")
    kept_by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    out_by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    if sum(o.kind == SSO for o in plan.outputs) > 1:
        _fail("more than one Stream Set Object planned")
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
    for n, out in enumerate(plan.outputs):
        where = f"output {n}"
        for r in out.ranges:
            claim(r, where)
            kept_by_stream[r.stream_id].append((r.start_offset, r.end_offset))
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
        for sid, start, end, _ in out.streams:
            out_by_stream[sid].append((start, end))
    if len(placed) != sum(len(o.pieces) for o in plan.outputs):
        _fail("a planned piece belongs to no output")

    # Kept + dropped must be exactly each input's data, as the manifest records it.
    per_object: dict[int, list[SourceRange]] = defaultdict(list)
    for r in seen:
        per_object[r.object_id].append(r)
    for oid, obj in inputs.items():
        try:
            _check_against_manifest(obj, per_object.get(oid, []))
        except CorruptionError as exc:
            _fail(f"the plan's ranges of input {oid} are not its data: {exc.what}", where=obj.get("key"))

    for sid in sorted(set(kept_by_stream) | set(out_by_stream)):
        kept = _merged(kept_by_stream.get(sid, ()))
        written = _merged(out_by_stream.get(sid, ()))
        if kept is None:
            _fail(f"stream {sid}: kept ranges overlap")
        if written is None:
            _fail(f"stream {sid}: two outputs hold the same offsets")
        if kept != written:
            _fail(f"stream {sid}: outputs hold offsets {written}, the kept ranges are {kept}",
                  expected=kept, found=written)
