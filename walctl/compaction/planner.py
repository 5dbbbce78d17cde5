"""Planning SSO compaction (docs/FORMATS.md 4): the plan (walctl.compaction.plan) from the manifest and indexes.

Pure: it takes the manifest and the index entries the caller read, and returns a
frozen plan. No I/O, no clock, no Spark; the Spark job carries the plan out and
``walctl.compaction.coverage.check_coverage`` is what its commit relies on.

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
from typing import TYPE_CHECKING, Mapping, Sequence

from walctl.compaction.coverage import check_against_manifest, check_overlaps
from walctl.compaction.plan import (
    DEFAULT_MAX_OBJECTS, DEFAULT_MEMORY_LIMIT, DEFAULT_READ_CUT, DEFAULT_SPLIT_SIZE, DROP_DELETED,
    DROP_RETENTION, DROP_STREAM_START, SO, SSO, CompactionPlan, Dropped, Iteration, OutputObject, Piece, Read,
    SourceRange, _key, _stream_spans, object_size,
)
from walctl.errors import CorruptionError, UsageError
from walctl.format.object import FOOTER_SIZE, INDEX_ENTRY_SIZE, IndexEntry
from walctl.sizes import plural

if TYPE_CHECKING:
    from walctl.store.manifest import LiveObject, Manifest, StreamSpan


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}")

def source_ranges(obj: LiveObject, entries: Sequence[IndexEntry]) -> list[SourceRange]:
    ranges = [SourceRange(obj.id, obj.key, e.stream_id, e.start_offset, e.end_offset, e.record_count,
                          e.block_position, e.block_size) for e in entries]
    size = obj.size
    if size is not None:
        data_end = size - FOOTER_SIZE - INDEX_ENTRY_SIZE * len(entries)
        for r in ranges:
            if r.position < 0 or r.size < 1 or r.end_position > data_end:
                raise CorruptionError(f"object {obj.id}: index entry of stream {r.stream_id} at offset "
                                      f"{r.start_offset} points at bytes [{r.position}, {r.end_position}), "
                                      f"outside the data region [0, {data_end})", where=obj.key)
    check_against_manifest(obj, ranges)
    return ranges

def _drop_reason(r: SourceRange, streams: Mapping[int, StreamSpan], retention: Mapping[int, int]) -> str | None:
    known = streams.get(r.stream_id)
    if known is None:
        return DROP_DELETED
    if r.stream_id in retention and r.end_offset <= retention[r.stream_id]:
        return DROP_RETENTION
    if r.end_offset <= known.start:
        return DROP_STREAM_START
    return None


def _chains(ranges: Sequence[SourceRange]) -> list[list[SourceRange]]:
    """Split one stream's sorted ranges where the next does not start at the previous end."""
    chains: list[list[SourceRange]] = []
    for r in ranges:
        if chains and r.start_offset == chains[-1][-1].end_offset:
            chains[-1].append(r)
        else:
            chains.append([r])
    return chains

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
            cut = _fill(rest, memory_limit - fill, bool(fill), min_part)
            if cut is not None and cut[0] < len(rest) and min_part > 1:
                cut = _leave_a_part(rest, *cut, bool(fill), memory_limit, min_part)
            if cut is None:  # not enough room for a valid part here: start the next iteration
                iterations.append([])
                fill = 0
                continue
            take, size = cut
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

def _fill(rest: Sequence[SourceRange], room: int, started: bool, min_part: int) -> tuple[int, int] | None:
    """How many of ``rest`` fit the ``room`` left (and their bytes); None when that is less than a
    part and the iteration has ``started``. A fresh iteration still too small takes what a part
    needs, over the limit."""
    take, size = 0, 0
    while take < len(rest) and size + rest[take].size <= room:
        size += rest[take].size
        take += 1
    if take < len(rest) and size < min_part:
        if started:
            return None
        while take < len(rest) and (size < min_part or take == 0):
            size += rest[take].size
            take += 1
    return take, size


def _leave_a_part(rest: Sequence[SourceRange], take: int, size: int, started: bool, memory_limit: int,
                  min_part: int) -> tuple[int, int] | None:
    """What a cut leaves is a part too (never the object's last): at least min_part. The cut moves
    back until it is; if no cut can, the whole rest goes in the next iteration (None) when it fits
    there, else along with this one, over the limit by less than min_part."""
    left = sum(r.size for r in rest[take:])
    while left < min_part and take > 1 and size - rest[take - 1].size >= min_part:
        take -= 1
        size -= rest[take].size
        left += rest[take].size
    if left < min_part:  # no cut here leaves two parts of min_part
        if started and left + size <= memory_limit:  # the whole rest fits the next iteration
            return None
        return len(rest), size + left
    return take, size


def plan_compaction(manifest: Manifest, indexes: Mapping[int, Sequence[IndexEntry]], *,
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
    for name, value in (("memory limit", memory_limit), ("split size", split_size), ("max objects", max_objects),
                        ("read cut", read_cut), ("min part", min_part), ("tasks", tasks)):
        _positive(name, value)
    tasks = max(1, min(tasks, memory_limit // min_part))
    candidates = sorted(manifest.live(SSO), key=lambda o: (o.order_id, o.id))
    inputs = tuple(copy.deepcopy(o) for o in candidates[:max_objects])
    object_order = {o.id: i for i, o in enumerate(inputs)}

    def make(idle: bool, reason: str, dropped=(), iterations=(), oversized=(), outputs=()) -> CompactionPlan:
        return CompactionPlan(inputs, tuple(dropped), tuple(iterations), idle, reason, memory_limit, split_size,
                              tuple(oversized), read_cut, tuple(outputs), min_part, tasks)

    if not inputs:
        return make(True, "no stream set object to compact")
    missing = [o.id for o in inputs if o.id not in indexes]
    if missing:
        raise ValueError(f"no index given for input {'object' if len(missing) == 1 else 'objects'} {missing}")
    kept, dropped = _kept_and_dropped(inputs, indexes, manifest.streams, dict(retention or {}),
                                      object_order)
    if len(inputs) < 2 and not dropped:
        return make(True, f"only one stream set object (id {inputs[0].id}) and nothing to drop")
    groups = _groups(kept, split_size)
    cut, oversized = _cut_pieces(groups, max(1, memory_limit // tasks), min_part)
    iterations, pieces_of = _iterations(cut, object_order, read_cut)
    outputs = [OutputObject(kind, tuple(ranges), sum(r.size for r in ranges),
                            object_size(sum(r.size for r in ranges), len(ranges)), _stream_spans(ranges),
                            tuple(pieces_of[index]))
               for index, (kind, ranges) in enumerate(groups)]
    if not kept:
        reason = (f"all data of the {plural(len(inputs), 'input')} is dropped: "
                  f"{'it is' if len(inputs) == 1 else 'they are'} removed, nothing is written")
    else:
        reason = (f"compact {plural(len(inputs), 'stream set object')} into {plural(len(outputs), 'object')} "
                  f"in {plural(len(iterations), 'iteration')}, {plural(len(dropped), 'range')} dropped")
    return make(False, reason, dropped, iterations, oversized, outputs)


def _kept_and_dropped(inputs: Sequence[LiveObject], indexes: Mapping[int, Sequence[IndexEntry]],
                      streams: Mapping[int, StreamSpan], retention: Mapping[int, int],
                      object_order: Mapping[int, int]) -> tuple[list[SourceRange], list[Dropped]]:
    """The inputs' source ranges kept (by stream and offset) and dropped (and why)."""
    live: list[SourceRange] = []
    dropped: list[Dropped] = []
    for obj in inputs:
        for r in source_ranges(obj, indexes[obj.id]):
            reason = _drop_reason(r, streams, retention)
            if reason == DROP_DELETED:
                dropped.append(Dropped(r, reason))
            else:
                live.append(r)
    # Overlaps are looked for among every range of a live stream, dropped or not: two
    # objects claiming the same offsets is damage to report, even below retention.
    live.sort(key=lambda r: (_key(r), object_order[r.object_id]))
    check_overlaps(live)
    kept: list[SourceRange] = []
    for r in live:
        reason = _drop_reason(r, streams, retention)
        if reason is None:
            kept.append(r)
        else:
            dropped.append(Dropped(r, reason))
    dropped.sort(key=lambda d: (_key(d.range), object_order[d.range.object_id]))
    return kept, dropped


def _groups(kept: Sequence[SourceRange], split_size: int) -> list[tuple[str, list[SourceRange]]]:
    """A contiguous run of a stream of at least split_size bytes becomes a Stream Object (one,
    however many iterations it takes); everything else goes into the one Stream Set Object."""
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
    return groups


def _iterations(cut, object_order: Mapping[int, int], read_cut: int) -> tuple[list[Iteration], dict[int, list[Piece]]]:
    """The iterations of the cut pieces, with their GETs; and each output's pieces in order."""
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
    return iterations, pieces_of
