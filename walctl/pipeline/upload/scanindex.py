"""Upload's scan index: what upload keeps of the WAL's records while the scan streams past
(_Records: where each one is, which are skipped, bad or to upload, the overlaps and gaps seen),
and the judgement of those overlaps and gaps once the scan is over (``_Records.streams``).
"""

from __future__ import annotations

import bisect
import operator
from array import array
from typing import NamedTuple

from walctl.errors import CorruptionError
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.crc import crc32c as _crc32c  # the C library, called directly
from walctl.pipeline import rowcopy
from walctl.pipeline.upload.blocks import _Bodies, _NoSpool, _RunBodies
from walctl.pipeline.upload.plan import Segment
from walctl.store import manifest as mf

_REC_SIZE = rec.SIZE
_ROW = bulk.ROW


class _Bad(NamedTuple):
    offset: int
    body_bytes: int


class _Records:
    """What upload keeps of the WAL's records while the scan streams past: where each one is,
    and their bodies only while they add up to at most ``keep_bytes`` (then none).

    The scan hands over runs of intact batches in bulk (``add_run``: from the decoder's rows,
    no object per record; most of a log) and the other records one by one (``add``).
    Each live record is sorted as it is read: skipped (at or below the uploaded mark; checked
    to be in the store), bad (no StreamRecordBatch), or to upload (appended to its stream's
    current Segment). Overlaps and offset gaps are noted as events (a run's streams taken one
    after the other: sorted by WAL offset before use) and judged by ``streams`` after the scan
    (the first error in log order wins, as in a pass over a list).
    ``stop`` ends the upload before the next record (a live writer's blocks in flight: the
    scan yields a finding before the records after it).
    """

    def __init__(self, doc: mf.Manifest, mark: mf.UploadMark | None, scan, keep_bytes: int = 0, spools=None):
        self.doc = doc
        self.spools = spools  # spool._Spools: each new segment's object written as the scan reads it
        self.kept: dict[int, bytes] | None = {} if keep_bytes > 0 else None  # WAL offset -> body
        self._keep_left = keep_bytes
        self.mark = mark
        self.uploaded = mark.offset if mark else -1
        self.scan = scan
        self.skipped = array("q")  # WAL offsets of records already uploaded
        self.not_in_store: int | None = None  # the first skipped record the store does not hold
        self.mark_found: tuple[int, mf.UploadMark] | None = None  # (offset, upload_mark) of the mark's record
        self.bad: list[_Bad] = []
        self.segments: dict[int, list[Segment]] = {}
        self.events: list[tuple] = []  # (WAL offset, kind, details): overlaps and gaps, in log order
        self.events_sorted = True  # False once a run's streams were taken one after the other
        self._last: dict[int, tuple] = {}  # stream -> (WAL offset, base, end, Segment) of its last batch
        self._before: dict[int, int] | None = None
        self.stopped = False
        self._last_todo: tuple | None = None  # (offset, stream, base, crc) of the last record to upload
        self.last_good: int | None = None  # WAL offset of the last good record (skipped or to upload)
        self.good_before_bad: int | None = None  # ... of the last one before the first bad record

    def stop(self) -> None:
        """Take no more records: the upload ends before the next one."""
        self.stopped = True

    def add(self, entry) -> None:
        """One record of the scan (a walctl.wal.reader Entry)."""
        if self.stopped:
            return
        offset, batch = entry.offset, entry.batch
        if self.mark is not None and offset == self.uploaded:
            self.mark_found = (offset, upload_mark(entry))
        if batch is None:
            if not self.bad:
                self.good_before_bad = self.last_good
            self.bad.append(_Bad(offset, len(entry.body)))
            return
        self.last_good = offset
        self._note_before()
        sid, base, end = batch.stream_id, batch.base_offset, batch.end_offset
        if offset <= self.uploaded:
            self._skip(offset, sid, base, end)
            return
        seg = self._segment_for(self._last.get(sid), offset, sid, base)
        body = entry.body
        size = len(body)
        crc = _crc32c(body)
        if seg.spool is not None:
            self._spool_add(seg, _Bodies([body]), 0, [size], [end])
        seg.wal.append(offset)  # Segment.add, inline: this runs once a record
        seg.crcs.append(crc)
        seg.end = end
        seg.bytes += size
        seg.wal_end = offset + _REC_SIZE + size
        if self.kept is not None:
            self._keep_left -= size
            if self._keep_left >= 0:
                self.kept[offset] = body
            else:
                self.kept = None  # too many bytes to hold: the objects read the WAL again
        self._last[sid] = (offset, base, end, seg)
        self._last_todo = (offset, sid, base, crc)

    def _note_before(self) -> None:
        if self._before is None:
            # The record at trimOffset (deleted, read before any live one) and the skipped ones
            # say where each stream's last batch already in the store lies in the WAL.
            trim_entry = self.scan.trim_entry
            self._before = {}
            if trim_entry is not None and trim_entry.batch is not None:
                self._before[trim_entry.batch.stream_id] = trim_entry.offset

    def _skip(self, offset: int, sid: int, base: int, end: int) -> None:
        """A record at or below the uploaded mark: skipped, once checked to be in the store."""
        self.skipped.append(offset)
        self._before[sid] = offset
        if self.not_in_store is None and not self.doc.holds(sid, base, end):
            self.not_in_store = offset

    def add_run(self, run) -> None:
        """``add`` for a scan's Run (walctl.wal.ringread.Run: intact records whose bodies are
        batches), from its rows in bulk: no Entry, no body copy (unless kept) per record."""
        if self.stopped:
            return
        rows, chunk = run.rows, run.chunk
        lo, hi = run.first * _ROW, run.stop * _ROW
        offsets = rows[lo:hi:_ROW].tolist()
        positions = rows[lo + 1:hi:_ROW].tolist()
        lengths = rows[lo + 2:hi:_ROW].tolist()
        sids = rows[lo + 4:hi:_ROW].tolist()
        bases = rows[lo + 6:hi:_ROW].tolist()
        ends = list(map(operator.add, bases, rows[lo + 7:hi:_ROW].tolist()))
        # An intact record's header carries its body's crc32c (checked by the decoder).
        crcs = rowcopy.body_crcs(chunk, rows, run.first, run.stop)
        n = len(offsets)
        uploaded = self.uploaded
        if self.mark is not None and offsets[0] <= uploaded <= offsets[-1] and uploaded in offsets:
            i = offsets.index(uploaded)
            self.mark_found = (uploaded, mf.UploadMark(uploaded, sids[i], bases[i], crcs[i]))
        self.last_good = offsets[-1]
        self._note_before()
        first = 0
        if offsets[0] <= uploaded:
            first = bisect.bisect_right(offsets, uploaded)
            self._skip_run(offsets, sids, bases, ends, first)
            if first == n:
                return
        if self.kept is not None:
            self._keep_run(chunk, offsets, positions, lengths, first)
        bodies = None
        if self.spools is not None and self.spools.open:
            # The run's bodies in the chunk: the spools copy them out before the scan goes on.
            bodies = _RunBodies(chunk, rows, run.first, positions, lengths)
        try:
            self._take_run(offsets, lengths, sids, bases, ends, crcs, first, bodies)
        finally:
            del bodies  # (the spools copied what they took: nothing of the chunk is held past the run)
        last = n - 1
        self._last_todo = (offsets[last], sids[last], bases[last], crcs[last])

    def _skip_run(self, offsets, sids, bases, ends, first: int) -> None:
        """``_skip`` for a run's records [0, first), in bulk."""
        doc, before = self.doc, self._before
        for i in range(first):
            self.skipped.append(offsets[i])
            before[sids[i]] = offsets[i]
            if self.not_in_store is None and not doc.holds(sids[i], bases[i], ends[i]):
                self.not_in_store = offsets[i]

    def _keep_run(self, chunk, offsets, positions, lengths, first: int) -> None:
        """Copy the bodies of a run's records [first, ...) to keep, while they fit."""
        size = sum(lengths) if first == 0 else sum(lengths[first:])
        self._keep_left -= size
        if self._keep_left >= 0:
            view = memoryview(chunk)
            kept = self.kept
            for i in range(first, len(offsets)):
                p = positions[i]
                kept[offsets[i]] = bytes(view[p:p + lengths[i]])
        else:
            self.kept = None  # too many bytes to hold: the objects read the WAL again

    def _take_run(self, offsets, lengths, sids, bases, ends, crcs, first: int, bodies) -> None:
        """A run's records [first, ...) to upload: one stream's in one go, several one stream after the other."""
        n = len(offsets)
        # (counted from ``first``: the skipped records before it may be of any stream)
        if sids[first:].count(sids[first]) == n - first:
            self._take(sids[first], offsets, lengths, bases, ends, crcs, first, n, bodies)
            return
        by_stream: dict[int, list[int]] = {}  # in order of first appearance; each in log order
        for i in range(first, n):
            by_stream.setdefault(sids[i], []).append(i)
        for sid, idx in by_stream.items():  # one stream after the other (events are sorted later)
            self._take(sid, [offsets[i] for i in idx], [lengths[i] for i in idx], [bases[i] for i in idx],
                       [ends[i] for i in idx], [crcs[i] for i in idx], 0, len(idx),
                       None if bodies is None else bodies.select(idx))
        self.events_sorted = False

    def _segment_for(self, last: tuple | None, offset: int, sid: int, base: int) -> Segment:
        """The segment the batch of stream ``sid`` at ``base`` (WAL ``offset``) joins, given the
        stream's ``last`` batch so far (None: its first one): a new one as the stream's first or
        after a gap. Overlaps and gaps (against the store or in the WAL) are noted as events."""
        if last is None:
            known = self.doc.stream(sid)
            if known is not None and base != known.end:
                if base < known.end:
                    self.events.append((offset, "store_overlap", (sid, known.end, base)))
                else:
                    self.events.append((offset, "gap", (sid, known.end, base, self._before.get(sid))))
            seg = self._segment(sid, base)
            self.segments[sid] = [seg]
            return seg
        prev_offset, prev_base, prev_end, seg = last
        if base < prev_end:
            self.events.append((offset, "wal_overlap", (sid, prev_base, prev_end, base)))
            self._drop_spool(seg)  # refused after the scan; the object is never made
        elif base > prev_end:
            self.events.append((offset, "gap", (sid, prev_end, base, prev_offset)))
            seg = self._segment(sid, base)
            self.segments[sid].append(seg)
        return seg

    def _segment(self, sid: int, base: int) -> Segment:
        seg = Segment(sid, base)
        if self.spools is not None:
            seg.spool = self.spools.new(sid, base)
        return seg

    def _drop_spool(self, seg: Segment) -> None:
        if seg.spool is not None:
            self.spools.drop(seg.spool)
            seg.spool = None

    def _spool_add(self, seg: Segment, bodies, at: int, lengths, ends) -> None:
        try:
            seg.spool.add(bodies, at, lengths, ends)
        except _NoSpool:  # a batch no DataBlock index entry holds: the second read refuses it, as before
            self._drop_spool(seg)

    def _take(self, sid: int, offsets, lengths, bases, ends, crcs, first: int, n: int, bodies=None) -> None:
        """One stream's records [first, n) of a run, in log order: ``add``'s rules in bulk.
        ``bodies``: the records' bodies (views), for a segment whose object is written as it goes."""
        last = self._last.get(sid)
        i = first
        while i < n:
            seg = self._segment_for(last, offsets[i], sid, bases[i])
            # How far the batches follow each other from i: those join seg in bulk.
            j = i + 1
            if j < n:
                if bases[j:n] == ends[i:n - 1]:
                    j = n
                else:
                    while j < n and bases[j] == ends[j - 1]:
                        j += 1
            seg.wal.extend(offsets[i:j])
            seg.crcs.extend(crcs[i:j])
            seg.end = ends[j - 1]
            seg.bytes += sum(lengths[i:j])
            seg.wal_end = offsets[j - 1] + _REC_SIZE + lengths[j - 1]
            if seg.spool is not None and bodies is not None:
                self._spool_add(seg, bodies, i, lengths[i:j], ends[i:j])
            elif seg.spool is not None:
                self._drop_spool(seg)  # (no bodies given: not written as it goes)
            last = (offsets[j - 1], bases[j - 1], ends[j - 1], seg)
            i = j
        self._last[sid] = last

    @property
    def last_mark(self) -> mf.UploadMark | None:
        """upload_mark of the last record to upload (None: nothing to upload)."""
        if self._last_todo is None:
            return None
        offset, sid, base, crc = self._last_todo
        return mf.UploadMark(offset, sid, base, crc)

    @property
    def todo_count(self) -> int:
        return sum(len(seg) for segs in self.segments.values() for seg in segs)

    @property
    def todo_bytes(self) -> int:
        return sum(seg.bytes for segs in self.segments.values() for seg in segs)

    def streams(self, holes, accepted: set[tuple[int, int, int]], where: str, warnings: list[str],
                gaps_out: list[dict], damage: list = ()) -> tuple[dict[int, Segment], list[tuple[int, Segment]]]:
        """Judge the overlaps and gaps seen (in log order); refuse overlaps and unexplained gaps.

        A gap is accepted where a crash explains it (walctl.wal.gaps.explain: a crash hole, sealed
        or not, lies between the stream's two records: the lost batches were never acknowledged)
        or where the operator accepted exactly that gap (``accepted``: (stream, from, to), from
        ``upload --accept-gap``). Each accepted gap is kept as a gap, with a warning and an entry
        in ``gaps_out`` (the manifest records it); what follows a gap inside the WAL is returned as
        a separate segment (an object holds each stream contiguously).

        ``damage`` (salvage): corrupt findings the scan read past; a gap across one of them is kept
        as a gap with cause "corruption" (its records were acknowledged and are lost).

        Returns (first segment of each stream, [(stream, later segment), ...]).
        """
        from walctl.wal import gaps

        events = self.events if self.events_sorted else sorted(self.events, key=operator.itemgetter(0))
        for offset, kind, details in events:
            if kind == "store_overlap":
                sid, store_end, base = details
                raise CorruptionError(
                    f"stream {sid}: offset overlap against the store: the store ends at {store_end}, "
                    f"the WAL continues at {base}", where=where, offset=offset,
                    hint="the WAL and the store disagree; nothing was uploaded")
            if kind == "wal_overlap":
                sid, prev_base, prev_end, base = details
                raise CorruptionError(f"stream {sid}: offsets overlap in the WAL ({prev_base}..{prev_end} "
                                      f"then {base})", where=where, offset=offset)
            sid, lo, hi, before_offset = details
            gap = gaps.StreamGap(sid, lo, hi, before_offset, offset)
            hole = gaps.explain(gap, holes)
            key = (gap.stream_id, gap.from_offset, gap.to_offset)
            lost_in = _damage_between(damage, gap) if hole is None and key not in accepted else None
            if lost_in is not None:
                warnings.append(f"stream {gap.stream_id}: offsets {gap.from_offset}..{gap.to_offset} were lost in "
                                f"the damage at WAL offset {lost_in.offset}: recorded in the manifest as a gap "
                                f"(cause corruption)")
                item = gaps.gap_to_json(gap, None, damage=lost_in)
                gaps_out.append({k: item[k] for k in _GAP_KEYS + ("damage_offset",)})
                continue
            if hole is None and key not in accepted:
                raise CorruptionError(
                    f"stream {gap.stream_id}: offset gap ({gap.from_offset} to {gap.to_offset}) that no crash "
                    f"explains, before the record at WAL offset {gap.after_wal_offset}; nothing was uploaded",
                    where=where, offset=gap.after_wal_offset,
                    hint=f"a wrong --base-offset, or damage; if these offsets are really gone: rerun with "
                         f"--accept-gap {gap.spec} (recorded in the manifest; nothing else is skipped)")
            warnings.append(gaps.explanation(gap, hole, accepted=hole is None))
            item = gaps.gap_to_json(gap, hole, accepted=hole is None)
            gaps_out.append({k: item[k] for k in _GAP_KEYS})
        later = [(sid, seg) for sid, segs in sorted(self.segments.items()) for seg in segs[1:]]
        return {sid: segs[0] for sid, segs in self.segments.items()}, later

# What the manifest keeps of each stream gap an upload carries forward.
_GAP_KEYS = ("stream_id", "from", "to", "cause", "hole_start", "sealed", "sealed_at_ns", "before_wal_offset",
             "after_wal_offset")


def _damage_between(damage, gap):
    """The first damaged range that lies between the gap's two records in the log, or None."""
    lo = gap.before_wal_offset if gap.before_wal_offset is not None else -1
    return next((f for f in damage if lo < f.offset < gap.after_wal_offset), None)


def upload_mark(entry) -> mf.UploadMark | None:
    """What the manifest remembers of a WAL's last uploaded record: enough to know it again."""
    if entry.batch is None:
        return None
    return mf.UploadMark(entry.offset, entry.batch.stream_id, entry.batch.base_offset, _crc32c(entry.body))
