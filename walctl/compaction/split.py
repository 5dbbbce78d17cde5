"""Force Split (AutoMQ's way out for Stream Set Objects too old, or spanning too many streams, to
compact within memory): every stream of an SSO becomes a Stream Object; no SSO is written.

An SSO keeps each stream's blocks back to back (sorted by stream, then offset), so each new SO
is one contiguous byte range of its SSO plus a new index and footer: written with
``store.compose``, the data copied server-side like SO compaction's. A stream's blocks that
are not contiguous in the SSO are refused (use SSO compaction for such an object).

What is read, and why: each new SO's footer needs the crc32c of its own range. The manifest
records it per range (ObjectRange ``crc``, written by upload and every compaction): such a
range of at least S3's 5 MiB part minimum is copied server-side and never read, its new
footer's data crc being the recorded one (``"crc": "manifest"``). When every range of an SSO
has its crc recorded, their combination (``crc32c_combine``) must equal the SSO's footer data
crc, or nothing is split (CorruptionError): a recorded crc that disagrees with the bytes is
never copied into an object that claims it. (A range damaged at rest after the upload keeps
its recorded crc: the new SO's footer then disagrees with its data, which ``check
--read-data`` reports as corruption, as it reports the SSO's own.)
A range without a recorded crc (older manifests) is read once to checksum it (ranged GETs of
<= 16 MiB, never held whole), except the SSO's largest such range: its crc follows from the
footer's and the others' (``crc32c_combine`` and its inverse shift), and it is written last of
its SSO's. A range smaller than the part minimum is read once and its bytes re-put (S3 could
not copy it anyway; a recorded crc is checked against them). An AutoMQ SSO (footer version 0,
no crc) has every range read. The data is not re-uploaded.
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
from walctl.errors import CorruptionError, RefusedError
from walctl.failpoints import failpoint
from walctl.format.crc import crc32c, crc32c_combine, crc32c_unshift
from walctl.format.index_entry import IndexEntry
from walctl.sizes import plural
from walctl.store import manifest as mf
from walctl.store.base import MIN_PART_BYTES, CopySource

if TYPE_CHECKING:
    from walctl.store.base import Store

DROP_DELETED = "stream deleted"
DROP_STREAM_START = "below stream start"


@dataclass(frozen=True)
class Run:
    """One stream's kept entries of one SSO: bytes [start, end) become one SO."""

    sso: mf.LiveObject
    entries: tuple[IndexEntry, ...]

    @property
    def start(self) -> int:
        return self.entries[0].block_position

    @property
    def end(self) -> int:
        return self.entries[-1].block_end

    @property
    def size(self) -> int:
        return self.end - self.start


def _runs(sso: mf.LiveObject, index: ObjectIndex,
          doc: mf.Manifest) -> tuple[list[Run], list[tuple[IndexEntry, str]]]:
    per_stream: dict[int, list[IndexEntry]] = {}
    dropped: list[tuple[IndexEntry, str]] = []
    for e in index.entries:
        known = doc.stream(e.stream_id)
        if known is None:
            dropped.append((e, DROP_DELETED))
        elif e.end_offset <= known.start:
            dropped.append((e, DROP_STREAM_START))
        else:
            per_stream.setdefault(e.stream_id, []).append(e)
    runs = []
    for sid in sorted(per_stream):
        entries = sorted(per_stream[sid], key=lambda e: e.start_offset)
        for a, b in zip(entries, entries[1:]):
            if b.block_position != a.block_end:
                raise RefusedError(f"SSO {sso.id}: the blocks of stream {sid} are not contiguous in the object "
                                   f"({a.block_end} then {b.block_position}); force split copies one byte range "
                                   "per stream", where=sso.key, hint="compact it with --level sso instead")
        runs.append(Run(sso, tuple(entries)))
    return runs, dropped


def coverage_plan(inputs: list[mf.LiveObject], runs: list[Run],
                  dropped: list[tuple[mf.LiveObject, IndexEntry, str]]):
    """The split in SSO compaction's plan shapes, for ``check_coverage``."""

    def rng(o: mf.LiveObject, e: IndexEntry) -> SourceRange:
        return SourceRange(o.id, o.key, e.stream_id, e.start_offset, e.end_offset, e.record_count,
                           e.block_position, e.block_size)

    iterations, outputs = [], []
    for n, run in enumerate(runs):
        ranges = tuple(rng(run.sso, e) for e in run.entries)
        piece = Piece(n, 1, ranges, 0, run.size, True)  # one copy: a single piece, final
        outputs.append(OutputObject(SO, ranges, run.size, object_size(run.size, len(ranges)),
                                    ((ranges[0].stream_id, ranges[0].start_offset, ranges[-1].end_offset, run.size),),
                                    (piece,)))
        reads = (Read(run.sso.id, run.sso.key, run.start, run.end, ranges),)
        iterations.append(Iteration(n, (piece,), reads, run.size))
    gone = tuple(Dropped(rng(o, e), why) for o, e, why in dropped)
    return CompactionPlan(tuple(inputs), gone, tuple(iterations), False, f"force split {plural(len(inputs), 'SSO')}", 0, 0,
                          outputs=tuple(outputs))


@dataclass
class SplitResult:
    inputs: list[mf.LiveObject]
    dry_run: bool
    outputs: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    made: list[dict] = field(default_factory=list)
    commit_number: int | None = None
    epoch: int | None = None
    planned_read_bytes: int = 0
    crc_read_bytes: int = 0
    through_read_bytes: int = 0
    through_written_bytes: int = 0
    bytes_copied: int = 0
    read_rate_bps: float | None = None
    write_rate_bps: float | None = None
    older_than_s: float | None = None
    seconds: float = 0.0

    @property
    def idle(self) -> bool:
        return not self.inputs

    def to_json(self) -> dict:
        out_bytes = sum(o["size_bytes"] for o in self.outputs)
        return {
            "level": "split", "idle": self.idle, "dry_run": self.dry_run,
            "reason": "nothing to split: no stream set object" + (" older than the limit" if self.older_than_s
                                                                    else "") if self.idle else
                      f"force split {plural(len(self.inputs), 'SSO')} into {plural(len(self.outputs), 'SO')}",
            "older_than_s": self.older_than_s,
            "objects_in": len(self.inputs), "objects_out": len(self.outputs),
            "input_ids": [o.id for o in self.inputs], "outputs": self.outputs, "dropped": self.dropped,
            "data_bytes": sum(o["data_bytes"] for o in self.outputs), "output_bytes": out_bytes,
            "planned_read_bytes": self.planned_read_bytes,
            "read_rate_bytes_per_s": self.read_rate_bps, "write_rate_bytes_per_s": self.write_rate_bps,
            "expected_seconds": expected_seconds(self.planned_read_bytes, out_bytes, self.read_rate_bps,
                                                 self.write_rate_bps),
            "commit_number": self.commit_number, "compactor_epoch": self.epoch,
            "bytes_copied": self.bytes_copied, "crc_read_bytes": self.crc_read_bytes,
            "through_read_bytes": self.through_read_bytes, "through_written_bytes": self.through_written_bytes,
            "seconds": round(self.seconds, 3),
            "objects": [{"key": m["key"], "size_bytes": m["size"], "streams": m["ranges"]} for m in self.made],  # not a manifest entry
        }


def force_split(store: Store, *, older_than_s: float | None = None, max_objects: int = 1000, dry_run: bool = False,
                namespace: str = mf.DEFAULT_NAMESPACE, read_rate_bps: float | None = None,
                write_rate_bps: float | None = None, now: float | None = None, on_result=None) -> SplitResult:
    """Split every SSO (only those whose data is older than ``older_than_s``, oldest first, at most
    ``max_objects``) into one SO per stream, and commit the replacement atomically.

    ``on_result`` gets the result as soon as it exists, so an interrupted run can tell whether
    its commit landed (SIGTERM/SIGINT never split the commit: they wait for it)."""
    from walctl.device.signals import signals_deferred

    started = time.monotonic()
    now = time.time() if now is None else now
    doc = mf.load_latest(store)
    ssos = sorted((o for o in doc.live("SSO")
                   if (older_than_s is None or (o.data_time or 0) <= now - older_than_s)),
                  key=lambda o: (o.order_id, o.id))[:max_objects]
    result = SplitResult(ssos, dry_run, read_rate_bps=read_rate_bps, write_rate_bps=write_rate_bps,
                         older_than_s=older_than_s)
    if on_result is not None:
        on_result(result)
    if not ssos:
        result.seconds = time.monotonic() - started
        return result
    indexes = {o.id: read_index(store, o) for o in ssos}
    runs: list[Run] = []
    dropped: list[tuple[mf.LiveObject, IndexEntry, str]] = []
    for o in ssos:
        rs, ds = _runs(o, indexes[o.id], doc)
        runs.extend(rs)
        dropped.extend((o, e, why) for e, why in ds)
    plan = coverage_plan(ssos, runs, dropped)
    check_coverage(plan)

    recorded = {id(r): crc for r in runs if (crc := recorded_crc(r)) is not None}
    check_recorded(ssos, runs, indexes, recorded)
    derived = _derived_crcs(ssos, runs, indexes, recorded)
    for r in runs:
        how = "from footer" if id(r) in derived else "manifest" if id(r) in recorded else "read"
        if how == "read" or r.size < MIN_PART_BYTES:
            result.planned_read_bytes += r.size
        result.outputs.append({"sso_id": r.sso.id, "stream_id": r.entries[0].stream_id,
                               "start": r.entries[0].start_offset, "end": r.entries[-1].end_offset,
                               "data_bytes": r.size, "size_bytes": object_size(r.size, len(r.entries)),
                               "crc": how})
    result.dropped = [{"sso_id": o.id, "stream_id": e.stream_id, "start": e.start_offset, "end": e.end_offset,
                       "reason": why} for o, e, why in dropped]
    if dry_run:
        result.seconds = time.monotonic() - started
        return result

    epoch, prepared = fence_and_prepare(store, len(runs), namespace, "compact --force-split")
    result.epoch = epoch
    failpoint("split-after-prepare")
    reads, writes = Pacer.bytes_per_s(read_rate_bps), Pacer.bytes_per_s(write_rate_bps)
    made = _split_all(store, runs, prepared, indexes, derived, recorded, reads, writes, result)
    result.made = made
    failpoint("split-before-commit")
    check_made(plan, result.made)
    with signals_deferred():  # done or not started, never split
        result.commit_number = commit_replacement(store, epoch=epoch, inputs=ssos, prepared=prepared,
                                                  made=result.made, command="compact --force-split")
        result.seconds = time.monotonic() - started
        failpoint("split-after-commit")  # (tests: a SIGTERM held here is raised as the block ends)
    return result


def recorded_crc(r: Run) -> int | None:
    """The crc the manifest records for exactly the run's range (its stream's whole range in the
    SSO: none of its blocks dropped), else None."""
    first, last = r.entries[0], r.entries[-1]
    for rg in r.sso.ranges:
        if (rg.stream_id == first.stream_id and rg.start == first.start_offset and rg.end == last.end_offset
                and rg.bytes == r.size):
            return rg.crc
    return None


def _tiled(mine: list[Run], idx: ObjectIndex) -> bool:
    """The runs cover the SSO's data region exactly, back to back."""
    return (bool(mine) and mine[0].start == 0 and mine[-1].end == idx.data_size
            and all(a.end == b.start for a, b in zip(mine, mine[1:])))


def check_recorded(ssos: list[mf.LiveObject], runs: list[Run], indexes: dict, recorded: dict[int, int]) -> None:
    """Where every range of an SSO has its crc recorded and the footer has a data crc, the recorded
    crcs combined must be the footer's (no byte read). Raises CorruptionError (nothing written)."""
    for o in ssos:
        idx = indexes[o.id]
        mine = [r for r in runs if r.sso is o]
        if not (idx.footer.checksummed and _tiled(mine, idx) and all(id(r) in recorded for r in mine)):
            continue
        crc = 0
        for r in mine:
            crc = crc32c_combine(crc, recorded[id(r)], r.size)
        if crc != idx.footer.data_crc:
            raise CorruptionError(f"SSO {o.id}: the crcs its manifest entry records per range do not combine to "
                                  f"its footer's data crc ({crc:#010x} != {idx.footer.data_crc:#010x}); nothing "
                                  "split", where=o.key, hint="run walctl check --store --read-data to see which bytes "
                                                             "are damaged")


def _derived_crcs(ssos: list[mf.LiveObject], runs: list[Run], indexes: dict,
                  recorded: dict[int, int] | None = None) -> set[int]:
    """The runs (by id()) whose crc comes from their SSO's footer: of an SSO whose runs tile its
    data region, the largest run (the last of the largest) whose crc is not ``recorded`` (the
    crcs of all the others are recorded or read); every other run's is recorded or read."""
    recorded = recorded or {}
    derived = set()
    for o in ssos:
        idx = indexes[o.id]
        mine = [r for r in runs if r.sso is o]
        unknown = [r for r in mine if id(r) not in recorded]
        if idx.footer.checksummed and _tiled(mine, idx) and unknown:
            pick = max(reversed(unknown), key=lambda r: r.size)
            derived.add(id(pick))
    return derived


def derived_crc(whole: int, before_crc: int, size: int, after: int, after_crc: int) -> int:
    """crc32c of a run of ``size`` bytes from its object's data crc ``whole``, the crc of the bytes
    in front of it and the crc of the ``after`` bytes behind it:
    whole = shift(before_crc, size + after) ^ shift(run, after) ^ after_crc."""
    return crc32c_unshift(whole ^ crc32c_combine(before_crc, 0, size + after) ^ after_crc, after)


def _split_all(store: Store, runs: list[Run], prepared, indexes: dict, derived: set[int], recorded: dict[int, int],
               reads: Pacer, writes: Pacer, result: SplitResult) -> list[dict]:
    """Every run's SO written, in run order except each SSO's derived run: written after the
    SSO's other runs, once their crcs are known. The manifest entries, in run order."""
    made: list = [None] * len(runs)
    crcs: dict[int, int] = {}
    waiting: dict[int, int] = {}  # sso id -> the derived run's number
    for n, (r, reserved) in enumerate(zip(runs, prepared)):
        if id(r) in derived:
            waiting[r.sso.id] = n
        else:
            crcs[n], piece = _run_source(store, r, reads, result, recorded.get(id(r)))
            made[n] = _write(store, r, reserved.key, piece, crcs[n], reads, writes, result)
            failpoint("split-after-object")
        if r.sso.id in waiting and (n + 1 == len(runs) or runs[n + 1].sso is not r.sso):
            m = waiting.pop(r.sso.id)
            d = runs[m]
            crc = _crc_between(runs, crcs, m, indexes[d.sso.id].footer.data_crc)
            made[m] = _write(store, d, prepared[m].key, CopySource(d.sso.key, d.start, d.end), crc, reads, writes,
                             result)
            failpoint("split-after-object")
    return made


def _crc_between(runs: list[Run], crcs: dict[int, int], m: int, whole: int) -> int:
    """Run ``m``'s crc from its SSO's data crc ``whole`` and the crcs of the SSO's other runs."""
    before_crc = after_crc = after = 0
    for k, r in enumerate(runs):
        if r.sso is not runs[m].sso or k == m:
            continue
        if k < m:
            before_crc = crc32c_combine(before_crc, crcs[k], r.size)
        else:
            after_crc = crc32c_combine(after_crc, crcs[k], r.size)
            after += r.size
    return derived_crc(whole, before_crc, runs[m].size, after, after_crc)


def _run_source(store: Store, r: Run, reads: Pacer, result: SplitResult,
                recorded: int | None = None) -> tuple[int, bytes | CopySource]:
    """A run's data crc and what its object copies: a range of its SSO (its crc the ``recorded``
    one, nothing read; else read), or (below S3's part minimum) its bytes, read once for both
    (a recorded crc checked against them)."""
    piece: bytes | CopySource
    if r.size < MIN_PART_BYTES:
        data = store.read_range(r.sso.key, r.start, r.end)
        if len(data) != r.size:
            raise CorruptionError(f"object shorter than its index says ({r.start + len(data)} < {r.end})",
                                  where=r.sso.key)
        reads.paid(len(data))
        crc, piece = crc32c(data), data
        if recorded is not None and crc != recorded:
            raise CorruptionError(f"SSO {r.sso.id}: stream {r.entries[0].stream_id}'s bytes have crc {crc:#010x}, "
                                  f"the manifest recorded {recorded:#010x} at upload; nothing split",
                                  where=r.sso.key, hint="run walctl check --store --read-data")
    elif recorded is not None:
        return recorded, CopySource(r.sso.key, r.start, r.end)  # copied server-side, not read
    else:
        crc = range_crc(store, r.sso.key, r.start, r.end, reads)
        piece = CopySource(r.sso.key, r.start, r.end)
    result.crc_read_bytes += r.size
    return crc, piece


def _write(store: Store, r: Run, key: str, piece: bytes | CopySource, crc: int, reads: Pacer, writes: Pacer,
           result: SplitResult) -> dict:
    """The run's Stream Object composed under ``key``, its size checked; its manifest entry."""
    entries = [IndexEntry(e.stream_id, e.start_offset, e.end_offset_delta, e.record_count,
                          e.block_position - r.start, e.block_size) for e in r.entries]
    read_before, written_before = store.stats.bytes_read, store.stats.bytes_written
    copied_before = store.stats.bytes_copied
    store.compose(key, [piece, tail_bytes(entries, r.size, crc)])
    result.through_read_bytes += store.stats.bytes_read - read_before
    result.through_written_bytes += store.stats.bytes_written - written_before
    result.bytes_copied += store.stats.bytes_copied - copied_before
    reads.paid(store.stats.bytes_read - read_before)
    size = object_size(r.size, len(entries))
    got = store.size(key)
    if got != size:
        raise CorruptionError(f"composed object is {got} bytes, expected {size}; nothing committed", where=key)
    writes.paid(size)
    return {"key": key, "kind": "SO", "size": size,
            "ranges": [{"stream_id": r.entries[0].stream_id, "start": r.entries[0].start_offset,
                        "end": r.entries[-1].end_offset, "bytes": r.size, "crc": crc}]}
