"""Stream Object compaction (level 2, AutoMQ's StreamObjectCompactor) by server-side copy.

SSO compaction leaves each stream in more Stream Objects over time, and reading a stream
costs one object per SO. This level merges consecutive SOs of one stream into larger SOs:

1. Plan (pure, ``plan_groups``): per stream, its live SOs by start offset; drop those wholly
   below the stream's start (or of a deleted stream): they are removed, nothing written.
   Group the rest as AutoMQ's ``group0`` does: a group continues while the offsets are
   contiguous and the summed object sizes stay <= the target; a group of one is left alone.
2. Read each input's footer and index (one or two small ranged reads; index crc checked),
   check its entries tile its data region, build the new index from the sources' entries
   with positions shifted by the data before them, and the data region's crc32c by
   combining the sources' footer checksums (``crc32c_combine``): no data is read. Only a
   source with an AutoMQ footer (version 0, no checksum) has its data region read, to
   compute the checksum the new walctl footer needs. Sources below S3's 5 MiB part minimum
   are laid out after the others (``layout``): the index stays in offset order, the blocks
   need not be (docs/FORMATS.md 3), and so only their own bytes pass through the compactor.
3. Fence + prepare (one commit), then per group one ``store.compose``: the sources' data
   regions copied server-side (S3 UploadPartCopy for every part >= 5 MiB, ranged GET +
   UploadPart only where S3's part minimum forces it; local copy_file_range), then the new
   index and footer.
4. One commit replaces the inputs, after ``check_coverage`` (the SSO compaction's check)
   proved the outputs hold exactly the inputs' live data.

Object data never passes through memory: the compactor holds indexes and at most one
S3 part (< 10 MiB) of bytes that had to be re-put.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import time
from dataclasses import dataclass, field

from walctl.compaction.common import (
    ObjectIndex,
    check_made,
    commit_replacement,
    expected_seconds,
    fence_and_prepare,
    range_crc,
    read_index,
    tail_bytes,
)
from walctl.compaction.coverage import check_coverage
from walctl.compaction.plan import (
    SO, CompactionPlan, Dropped, Iteration, OutputObject, Piece, Read, SourceRange, object_size,
)
from walctl.device.pacing import Pacer
from walctl.errors import CorruptionError, UsageError
from walctl.failpoints import failpoint
from walctl.format.crc import crc32c_combine
from walctl.format.index_entry import IndexEntry
from walctl.sizes import plural
from walctl.store import manifest as mf
from walctl.store.base import MIN_PART_BYTES, CopySource
from walctl.store.multipart import plan_compose_parts

if TYPE_CHECKING:
    from walctl.store.base import Store

# AutoMQ's default (s3.stream.object.compaction.max.size.bytes, streamObjectCompactionMaxSizeBytes
# in s3stream's Config, branch 1.4): 10 GiB.
AUTOMQ_SO_TARGET_SIZE = 10 << 30
# walctl's default: 1 GiB. Copying is cheap either way, but retention drops whole SOs only, so
# smaller SOs free space sooner; 1 GiB is ~128 parts of 8 MiB, far from S3's 10,000.
DEFAULT_SO_TARGET_SIZE = 1 << 30
# AutoMQ's MAX_OBJECT_GROUP_COUNT: bounds one commit and the parts of one multipart upload.
MAX_GROUP_OBJECTS = 5000

DROP_EXPIRED = "below stream start"
DROP_DELETED = "stream deleted"


@dataclass(frozen=True)
class SoPlan:
    groups: tuple[tuple[mf.LiveObject, ...], ...]  # each: >= 2 consecutive SOs of one stream -> one SO
    expired: tuple[tuple[mf.LiveObject, str], ...]  # SOs removed without output, and why
    target_size: int

    @property
    def idle(self) -> bool:
        return not self.groups and not self.expired

    @property
    def inputs(self) -> list[mf.LiveObject]:
        return [o for g in self.groups for o in g] + [o for o, _ in self.expired]


def _so_range(obj: mf.LiveObject) -> tuple[int, int, int]:
    ranges = obj.ranges
    if len(ranges) != 1:
        raise CorruptionError(f"stream object {obj.id} has {len(ranges)} stream ranges in the manifest, not one",
                              where=obj.key)
    r = ranges[0]
    return r.stream_id, r.start, r.end


def plan_groups(doc: mf.Manifest, target_size: int, *, max_group_objects: int = MAX_GROUP_OBJECTS) -> SoPlan:
    """Which SOs merge into which (AutoMQ's group0) and which are dropped as expired. Pure."""
    if not isinstance(target_size, int) or target_size < 1:
        raise UsageError(f"SO target size must be a positive number of bytes, got {target_size!r}")
    per_stream: dict[int, list[tuple[int, int, dict]]] = {}
    expired: list[tuple[mf.LiveObject, str]] = []
    for o in doc.live("SO"):
        sid, start, end = _so_range(o)
        known = doc.stream(sid)
        if known is None:
            expired.append((o, DROP_DELETED))
        elif end <= known.start:
            expired.append((o, DROP_EXPIRED))
        else:
            per_stream.setdefault(sid, []).append((start, end, o))
    groups: list[tuple[mf.LiveObject, ...]] = []
    for sid in sorted(per_stream):
        group: list[mf.LiveObject] = []
        size = 0
        next_offset = None
        for start, end, o in sorted(per_stream[sid], key=lambda t: (t[0], t[2].id)):
            if group and (start != next_offset or size + o.size > target_size
                          or len(group) >= max_group_objects):
                if len(group) > 1:
                    groups.append(tuple(group))
                group, size = [], 0
            group.append(o)
            size += o.size
            next_offset = end
        if len(group) > 1:
            groups.append(tuple(group))
    expired.sort(key=lambda t: t[0].id)
    return SoPlan(tuple(groups), tuple(expired), target_size)


def _tiles(obj: mf.LiveObject, index: ObjectIndex) -> None:
    """An SO's entries must be one stream with contiguous offsets, and its blocks must fill its
    data region exactly (in any physical order: an SO this level made keeps small sources last)."""
    sid = _so_range(obj)[0]
    offset = None
    for e in index.entries:
        if e.stream_id != sid or (offset is not None and e.start_offset != offset):
            raise CorruptionError(f"stream object {obj.id}: index entry of stream {e.stream_id} at offset "
                                  f"{e.start_offset} does not continue stream {sid} at offset {offset}",
                                  where=obj.key)
        offset = e.end_offset
    pos = 0
    for e in sorted(index.entries, key=lambda e: e.block_position):
        if e.block_position != pos:
            raise CorruptionError(f"stream object {obj.id}: bytes [{pos}, {e.block_position}) of its data "
                                  "region belong to no index entry", where=obj.key)
        pos = e.block_end
    if pos != index.data_size or not index.entries:
        raise CorruptionError(f"stream object {obj.id}: its blocks end at {pos}, its index starts at "
                              f"{index.data_size}", where=obj.key)


def layout(group: tuple[dict, ...], indexes: dict[int, ObjectIndex]) -> list[dict]:
    """The sources in the order their data regions are laid out in the new object: those S3 can
    copy as parts (>= 5 MiB) first, in offset order, then the smaller ones, which go through
    the compactor anyway, in offset order; so they join the index and footer in the last
    part and no copyable range is cut to top a small one up. The index stays in offset order."""
    return sorted(group, key=lambda o: indexes[o.id].data_size < MIN_PART_BYTES)


def coverage_plan(so_plan: SoPlan, indexes: dict[int, ObjectIndex]):
    """The SO plan in SSO compaction's plan shapes, for ``check_coverage``: each output's "reads"
    are the source data regions it copies."""

    def ranges_of(o: mf.LiveObject) -> tuple:
        return tuple(SourceRange(o.id, o.key, e.stream_id, e.start_offset, e.end_offset, e.record_count,
                                 e.block_position, e.block_size) for e in indexes[o.id].entries)

    iterations, outputs = [], []
    for n, group in enumerate(so_plan.groups):
        per_source = [ranges_of(o) for o in group]
        ranges = tuple(r for rs in per_source for r in rs)
        by_position = [tuple(sorted(rs, key=lambda r: r.position)) for rs in per_source]
        reads = tuple(Read(o.id, o.key, rs[0].position, rs[-1].end_position, rs)
                      for o, rs in zip(group, by_position))
        data = sum(r.size for r in ranges)
        piece = Piece(n, 1, ranges, 0, data, True)  # one copy: a single piece, final
        outputs.append(OutputObject(SO, ranges, data, object_size(data, len(ranges)),
                                    ((ranges[0].stream_id, ranges[0].start_offset, ranges[-1].end_offset, data),),
                                    (piece,)))
        iterations.append(Iteration(n, (piece,), reads, data))
    dropped = tuple(Dropped(r, reason) for o, reason in so_plan.expired for r in ranges_of(o))
    return CompactionPlan(tuple(so_plan.inputs), dropped, tuple(iterations), False,
                          f"merge {plural(len(so_plan.groups), 'group')} of stream objects", 0, 0, outputs=tuple(outputs))


@dataclass
class SoResult:
    plan: SoPlan
    dry_run: bool
    groups: list[dict] = field(default_factory=list)
    made: list[dict] = field(default_factory=list)
    commit_number: int | None = None
    epoch: int | None = None
    stats: dict = field(default_factory=dict)
    crc_read_bytes: int = 0
    planned_get_bytes: int = 0
    through_read_bytes: int = 0  # object bytes compose had to GET (S3 parts below 5 MiB)
    through_written_bytes: int = 0  # object bytes uploaded from here (those, and indexes + footers)
    read_rate_bps: float | None = None
    write_rate_bps: float | None = None
    seconds: float = 0.0

    @property
    def idle(self) -> bool:
        return self.plan.idle

    def to_json(self) -> dict:
        out_bytes = sum(g["size_bytes"] for g in self.groups)
        data_bytes = sum(g["data_bytes"] for g in self.groups)
        st = self.stats
        return {
            "level": "so", "idle": self.idle, "dry_run": self.dry_run,
            "reason": ("nothing to compact: no two consecutive stream objects of a stream fit the target, "
                       "none expired") if self.idle else
                      f"merge {plural(len(self.plan.groups), 'group')} of stream objects, drop {len(self.plan.expired)}",
            "target_size_bytes": self.plan.target_size,
            "objects_in": len(self.plan.inputs), "objects_out": len(self.plan.groups),
            "expired": [{"id": o.id, "key": o.key, "reason": why} for o, why in self.plan.expired],
            "groups": self.groups,
            "data_bytes": data_bytes, "output_bytes": out_bytes,
            "planned_get_bytes": self.planned_get_bytes,
            "read_rate_bytes_per_s": self.read_rate_bps, "write_rate_bytes_per_s": self.write_rate_bps,
            "expected_seconds": expected_seconds(self.planned_get_bytes + self.crc_read_bytes, out_bytes,
                                                 self.read_rate_bps, self.write_rate_bps),
            "commit_number": self.commit_number, "compactor_epoch": self.epoch,
            # what actually moved: copied inside the store vs through this process
            "bytes_copied": st.get("bytes_copied", 0), "bytes_read": st.get("bytes_read", 0),
            "bytes_written": st.get("bytes_written", 0), "crc_read_bytes": self.crc_read_bytes,
            "through_read_bytes": self.through_read_bytes, "through_written_bytes": self.through_written_bytes,
            "copy_parts": st.get("copy_parts", 0), "upload_parts": st.get("multipart_parts", 0),
            "gets": st.get("get", 0), "puts": st.get("put", 0),
            "seconds": round(self.seconds, 3),
            "objects": [{"key": m["key"], "size_bytes": m["size"], "streams": m["ranges"]} for m in self.made],  # not a manifest entry
        }


def _through_bytes(store: Store, pieces) -> int:
    """Bytes a compose of ``pieces`` reads through us (S3's small parts); 0 where all is copied."""
    if not store.capabilities.copies_small_parts_through:
        return 0
    parts = plan_compose_parts(pieces)
    if not any(isinstance(p, CopySource) for p in parts):
        return sum(p.size for part in parts for p in part if isinstance(p, CopySource))
    return sum(p.size for part in parts if isinstance(part, list) for p in part if isinstance(p, CopySource))


def compact_stream_objects(store: Store, *, target_size: int = DEFAULT_SO_TARGET_SIZE, dry_run: bool = False,
                           namespace: str = mf.DEFAULT_NAMESPACE, read_rate_bps: float | None = None,
                           write_rate_bps: float | None = None, progress=None, on_result=None) -> SoResult:
    """Plan, fence, copy and commit one SO compaction (see the module doc).

    ``read_rate_bps`` paces the bytes read through this process (index reads excluded, they
    are tiny); ``write_rate_bps`` paces the bytes written into the store, copied ones included
    (after each output object). None: unlimited. ``on_result`` gets the result as soon as it
    exists, so an interrupted run can tell whether its commit landed (the commit itself is not
    split by SIGTERM/SIGINT: they wait for it).
    """
    from walctl.device.signals import signals_deferred

    started = time.monotonic()
    before = store.stats.snapshot()
    doc = mf.load_latest(store)
    plan = plan_groups(doc, target_size)
    result = SoResult(plan, dry_run, read_rate_bps=read_rate_bps, write_rate_bps=write_rate_bps)
    if on_result is not None:
        on_result(result)
    if plan.idle:
        result.seconds = time.monotonic() - started
        return result
    indexes = {o.id: read_index(store, o) for o in plan.inputs}
    for group in plan.groups:
        for o in group:
            _tiles(o, indexes[o.id])
    check_coverage(coverage_plan(plan, indexes))

    builds = [_build(store, group, indexes, result, dry_run) for group in plan.groups]
    if dry_run:
        after = store.stats.snapshot()
        result.stats = {k: after[k] - before.get(k, 0) for k in after}  # the index reads
        result.seconds = time.monotonic() - started
        return result

    epoch, prepared = fence_and_prepare(store, len(plan.groups), namespace, "compact --level so")
    result.epoch = epoch
    failpoint("so-compact-after-prepare")
    reads, writes = Pacer.bytes_per_s(read_rate_bps), Pacer.bytes_per_s(write_rate_bps)
    for n, (build, reserved) in enumerate(zip(builds, prepared)):
        result.made.append(_write(store, plan.groups[n], build, reserved.key, indexes, result, reads, writes))
        failpoint("so-compact-after-object")
        if progress is not None:
            progress(n + 1, len(builds))
    failpoint("so-compact-before-commit")
    check_made(coverage_plan(plan, indexes), result.made)
    with signals_deferred():  # done or not started, never split: an interrupt finds the result complete
        result.commit_number = commit_replacement(store, epoch=epoch, inputs=plan.inputs, prepared=prepared,
                                                  made=result.made, command="compact --level so")
        after = store.stats.snapshot()
        result.stats = {k: after[k] - before.get(k, 0) for k in after}
        result.seconds = time.monotonic() - started
    return result


def _build(store: Store, group: tuple[dict, ...], indexes: dict[int, ObjectIndex], result: SoResult,
           dry_run: bool) -> tuple[list[mf.LiveObject], list[IndexEntry], int]:
    """A group's sources in layout order, its new index (positions shifted) and data size; what it
    will read is added to ``result`` (and its group's figures)."""
    order = layout(group, indexes)
    base: dict[int, int] = {}
    position = 0
    for o in order:
        base[o.id] = position
        position += indexes[o.id].data_size
    entries = [IndexEntry(e.stream_id, e.start_offset, e.end_offset_delta, e.record_count,
                          e.block_position + base[o.id], e.block_size)
               for o in group for e in indexes[o.id].entries]
    unchecked = [o for o in group if not indexes[o.id].footer.checksummed]  # AutoMQ: no footer crc
    pieces = [CopySource(o.key, 0, indexes[o.id].data_size) for o in order]
    through = _through_bytes(store, pieces + [b"\0" * object_size(0, len(entries))])
    crc_bytes = sum(indexes[o.id].data_size for o in unchecked)
    result.planned_get_bytes += through
    result.crc_read_bytes += crc_bytes if dry_run else 0
    sid, start, end = _so_range(group[0])[0], _so_range(group[0])[1], _so_range(group[-1])[2]
    result.groups.append({"stream_id": sid, "start": start, "end": end,
                          "input_ids": [o.id for o in group], "input_count": len(group),
                          "data_bytes": position, "size_bytes": object_size(position, len(entries)),
                          "planned_get_bytes": through, "crc_read_bytes": crc_bytes,
                          "input_bytes": sum(o.size for o in group)})
    return order, entries, position


def _write(store: Store, group: tuple[dict, ...], build, key: str, indexes: dict[int, ObjectIndex],
           result: SoResult, reads: Pacer, writes: Pacer) -> dict:
    """One group's object composed under ``key`` (its data crc from the footers, or read); its
    manifest entry."""
    order, entries, data_size = build
    data_crc = 0
    for o in order:  # in layout order: the crc runs over the bytes as they lie
        idx = indexes[o.id]
        if idx.footer.checksummed:
            crc = idx.footer.data_crc
        else:
            crc = range_crc(store, o.key, 0, idx.data_size, reads)
            result.crc_read_bytes += idx.data_size
        data_crc = crc32c_combine(data_crc, crc, idx.data_size)
    pieces = [CopySource(o.key, 0, indexes[o.id].data_size) for o in order]
    pieces.append(tail_bytes(entries, data_size, data_crc))
    read_before, written_before = store.stats.bytes_read, store.stats.bytes_written
    store.compose(key, pieces)
    result.through_read_bytes += store.stats.bytes_read - read_before
    result.through_written_bytes += store.stats.bytes_written - written_before
    reads.paid(store.stats.bytes_read - read_before)
    size = object_size(data_size, len(entries))
    got = store.size(key)
    if got != size:
        raise CorruptionError(f"composed object is {got} bytes, expected {size}; nothing committed", where=key)
    writes.paid(size)
    sid, start, end = _so_range(group[0])[0], _so_range(group[0])[1], _so_range(group[-1])[2]
    return {"key": key, "kind": "SO", "size": size,
            # one stream, its whole data region: the range's crc is the object's data crc
            "ranges": [{"stream_id": sid, "start": start, "end": end, "bytes": data_size, "crc": data_crc}]}
