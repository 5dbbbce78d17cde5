"""walctl check: a store against its newest manifest, as ``restic check`` or ``git fsck`` check theirs.

Without ``read_data`` the cost is one LIST of the store (every object's size) and one ranged GET
of each live object's tail (its footer and index, as compaction reads them), never an object's
data: a live object must exist with the manifest's size, its footer and index must parse (the
index crc of a walctl footer is checked) and hold exactly the stream offsets the manifest gives
it, and the live objects must cover each stream's offsets without overlap. With ``read_data``
every block of every object (or of one ``subset`` share of them) is read and checked as
``inspect-object --deep`` checks it (data crc, block and batch headers, contiguous offsets), in
ranged GETs of about 16 MiB of which one is held at a time.

Objects nothing references (orphans) and prepared ids past their expiry are reported but are not
damage: they are what a killed upload or compaction leaves, and ``walctl gc`` removes them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from walctl.errors import CorruptionError, NotFoundError
from walctl.store import manifest as mf
from walctl.store.inspect import truncation

if TYPE_CHECKING:
    from walctl.store.base import Store

TAIL_READ_THREADS = 8  # tails read at once (small ranged GETs: latency-bound), as compaction reads them
# Kinds of problem that are not damage: what a killed writer leaves and gc removes.
NOT_DAMAGE = ("orphan", "stale_prepared")
# Every kind, in the order a report lists them (the docs and the JSON name them so).
KINDS = ("missing", "truncated", "size", "footer", "index", "data", "overlap", "coverage", *NOT_DAMAGE)


@dataclass(frozen=True)
class Problem:
    """One finding: its kind (KINDS), the object it is about (if one), and what is wrong."""

    kind: str
    detail: str
    object_id: int | None = None
    key: str | None = None

    @property
    def damage(self) -> bool:
        return self.kind not in NOT_DAMAGE

    def to_json(self) -> dict:
        return {"kind": self.kind, "object_id": self.object_id, "key": self.key, "detail": self.detail,
                "damage": self.damage}


@dataclass
class CheckResult:
    """What check_store found, and how much it looked at."""

    store: str
    manifest_number: int
    objects: int  # live objects in the manifest
    size_bytes: int  # their size, as the manifest gives it
    read_data: bool
    subset: tuple[int, int] | None  # (share, shares): the data of the share-th of that many was read
    data_objects: int = 0  # objects whose every block was read
    data_bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    requests: dict = field(default_factory=dict)

    @property
    def damage(self) -> list[Problem]:
        return [p for p in self.problems if p.damage]

    def to_json(self) -> dict:
        return {"store": self.store, "manifest_number": self.manifest_number, "live_objects": self.objects,
                "size_bytes": self.size_bytes, "read_data": self.read_data,
                "subset": f"{self.subset[0]}/{self.subset[1]}" if self.subset else None,
                "data_objects_read": self.data_objects, "data_bytes_read": self.data_bytes,
                "problems": [p.to_json() for p in self.problems], "damage_count": len(self.damage),
                "verdict": "damaged" if self.damage else "ok", "requests": self.requests}


def in_subset(object_id: int, subset: tuple[int, int] | None) -> bool:
    """The object is in share ``k`` of ``n`` (``subset`` = (k, n), 1 <= k <= n): id mod n == k - 1.
    Deterministic, so ``1/n`` .. ``n/n`` on n runs read every object once."""
    return subset is None or object_id % subset[1] == subset[0] - 1


def check_store(store: Store, *, read_data: bool = False, subset: tuple[int, int] | None = None,
                now: float | None = None, progress: Callable[[int, int], None] | None = None) -> CheckResult:
    """Check the store against its newest manifest (read-only); see the module doc.

    ``subset`` (k, n) implies ``read_data`` for share k of n of the objects. ``progress(done,
    total)``: bytes of object data read so far, with ``read_data``. ``now``: for tests of expiry.

    Raises:
        NotFoundError: no manifest (not a walctl store, or nothing uploaded yet).
        CorruptionError: the newest manifest itself does not parse.
    """
    now = time.time() if now is None else now
    read_data = read_data or subset is not None
    doc = mf.load_latest(store, required=True)
    listed = {i.key: i.size for i in store.list() if not i.key.startswith(mf.MANIFEST_DIR + "/")}
    result = CheckResult(store.url, doc.number, len(doc.objects), sum(o.size for o in doc.objects),
                         read_data, subset)
    present = []
    for o in doc.objects:
        found = _size_problem(o, listed.get(o.key))
        if found is not None:
            result.problems.append(found)
        else:
            present.append(o)
    full = [o for o in present if read_data and in_subset(o.id, subset)]
    tails = [o for o in present if not (read_data and in_subset(o.id, subset))]
    with ThreadPoolExecutor(max_workers=max(1, min(TAIL_READ_THREADS, len(tails)))) as pool:
        for found in pool.map(lambda o: _check_tail(store, o), tails):
            result.problems.extend(found)
    total = sum(sum(r.bytes for r in o.ranges) for o in full)  # their data regions
    for o in full:
        result.problems.extend(_check_data(store, o, result, total, progress))
    result.problems.extend(_coverage(doc))
    result.problems.extend(_leftovers(doc, listed, now))
    result.problems.sort(key=lambda p: (KINDS.index(p.kind), p.object_id if p.object_id is not None else -1))
    result.requests = store.stats.snapshot()
    return result


def _size_problem(o: mf.LiveObject, size: int | None) -> Problem | None:
    if size is None:
        return Problem("missing", "live in the manifest, not in the store", o.id, o.key)
    if size != o.size:
        kind = "truncated" if size < o.size else "size"
        return Problem(kind, truncation(size, o.size), o.id, o.key)
    return None


def _index_problems(o: mf.LiveObject, entries) -> list[Problem]:
    """The index must hold exactly the offsets the manifest gives the object, inside its data region
    (the compaction plan's own check of an input)."""
    from walctl.compaction.planner import source_ranges as _source_ranges

    try:
        _source_ranges(o, entries)
    except CorruptionError as exc:
        return [Problem("index", exc.what, o.id, o.key)]
    return []


def _check_tail(store: Store, o: mf.LiveObject) -> list[Problem]:
    """One ranged GET of the object's footer and index (two when the manifest's figures are off)."""
    from walctl.compaction.common import read_index

    try:
        index = read_index(store, o)
    except NotFoundError:  # deleted between the LIST and this read
        return [Problem("missing", "live in the manifest, not in the store", o.id, o.key)]
    except CorruptionError as exc:
        return [Problem("footer", exc.what, o.id, o.key)]
    return _index_problems(o, index.entries) + _recorded_crcs(o, index)


def _recorded_crcs(o: mf.LiveObject, index) -> list[Problem]:
    """The ranges' recorded crcs against the footer's data crc (compaction.common.recorded_crc_problem)."""
    from walctl.compaction.common import recorded_crc_problem

    what = recorded_crc_problem(o, index)
    return [] if what is None else [Problem("footer", what, o.id, o.key)]


def _check_data(store: Store, o: mf.LiveObject, result: CheckResult, total: int, progress) -> list[Problem]:
    """The tail as _check_tail reads it, then every block, in ranged GETs of about 16 MiB held one at
    a time (inspect.verify_streamed): the checks inspect-object --deep makes of the data."""
    from walctl.compaction.common import read_index
    from walctl.store.inspect import primary_problem, verify_streamed

    try:
        index = read_index(store, o)
    except NotFoundError:
        return [Problem("missing", "live in the manifest, not in the store", o.id, o.key)]
    except CorruptionError as exc:
        return [Problem("footer", exc.what, o.id, o.key)]
    found = _index_problems(o, index.entries) + _recorded_crcs(o, index)
    before = result.data_bytes
    report = verify_streamed(store, o.key, index.footer, index.entries,
                             progress=None if progress is None else lambda done, _: progress(before + done, total))
    result.data_objects += 1
    result.data_bytes += index.data_size
    if report.problems:
        first = primary_problem(report.problems)
        where = (f" in block [{first.block_position}, {first.block_end}) of stream {first.stream_id} offsets "
                 f"[{first.start_offset}, {first.end_offset})" if first.block_position is not None else "")
        more = f" (and {len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        if first.kind == "ChecksumError" and len(report.problems) == 1:  # as verify_report's explanation says
            more = "; every block checks out, so the changed bytes lie inside a record payload"
        found.append(Problem("data", f"byte {first.position}{where}: {first.message}{more}", o.id, o.key))
    return found


def _coverage(doc: mf.Manifest) -> list[Problem]:
    """Each stream's offsets [start, end) are held by exactly one live object each, but for the gaps an
    upload recorded (``stream_gaps``); no object holds offsets past its stream's end. (Offsets below a
    stream's start, and of a stream the manifest no longer lists, are what compaction drops.)"""
    from walctl.compaction.coverage import check_overlaps as _check_overlaps
    from walctl.compaction.coverage import manifest_intervals as _manifest_intervals
    from walctl.compaction.plan import SourceRange

    problems: list[Problem] = []
    ranges: dict[int, list[SourceRange]] = {}
    for o in doc.objects:
        try:
            intervals = _manifest_intervals(o)
        except CorruptionError as exc:
            problems.append(Problem("overlap", exc.what, o.id, o.key))
            continue
        for sid, spans in intervals.items():
            ranges.setdefault(sid, []).extend(SourceRange(o.id, o.key, sid, a, b, b - a, 0, 0) for a, b in spans)
    for sid in sorted(set(ranges) | set(doc.streams)):
        held = sorted(ranges.get(sid, []), key=lambda r: (r.start_offset, r.end_offset))
        for prev, cur in zip(held, held[1:]):
            try:
                _check_overlaps([prev, cur])
            except CorruptionError as exc:
                problems.append(Problem("overlap", exc.what, cur.object_id, cur.key))
        span = doc.streams.get(sid)
        if span is None:  # a deleted stream: its ranges are garbage the next compaction drops
            continue
        gaps = [(g.from_offset, g.to_offset) for g in doc.stream_gaps or () if g.stream_id == sid]
        covered = _union([(r.start_offset, r.end_offset) for r in held] + gaps)
        for a, b in _missing(covered, span.start, span.end):
            problems.append(Problem("coverage", f"stream {sid}: offsets [{a}, {b}) are in no live object "
                                    f"(the stream holds [{span.start}, {span.end}))"))
        for r in held:
            if r.end_offset > span.end:
                problems.append(Problem("coverage", f"stream {sid}: object {r.object_id} holds offsets up to "
                                        f"{r.end_offset}, past the stream's end {span.end}", r.object_id, r.key))
    return problems


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with touching and overlapping intervals joined (overlaps are reported apart)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _missing(covered: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of [start, end) that the sorted, disjoint ``covered`` intervals leave out."""
    holes, pos = [], start
    for a, b in covered:
        if b <= pos:
            continue
        if a >= end:
            break
        if a > pos:
            holes.append((pos, a))
        pos = max(pos, b)
    if pos < end:
        holes.append((pos, end))
    return holes


def _leftovers(doc: mf.Manifest, listed: dict[str, int], now: float) -> list[Problem]:
    """Objects no manifest entry references, and prepared ids past their expiry (gc's rules)."""
    from walctl.store.gc import _object_id_of

    problems: list[Problem] = []
    referenced = doc.referenced_ids()
    live_keys = {o.key for o in doc.objects}
    for key, size in sorted(listed.items()):
        object_id = _object_id_of(key)
        if key in live_keys or (object_id is not None and object_id in referenced):
            continue
        if object_id is None:
            why = "not a walctl object key; gc leaves it"
        elif object_id >= doc.next_object_id:
            why = f"id {object_id} not yet allocated (next id {doc.next_object_id}); gc leaves it"
        else:
            why = "in no manifest entry; walctl gc deletes it"
        problems.append(Problem("orphan", f"{size:,} bytes, {why}", object_id, key))
    for p in doc.prepared:
        if p.expires_at <= now:
            problems.append(Problem("stale_prepared", f"prepared id {p.id} expired "
                                    f"{_ago(now - p.expires_at)} ago; walctl gc forgets it",
                                    p.id, p.key))
    return problems


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"
