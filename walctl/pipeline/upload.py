"""Upload: turn the WAL's records into objects, commit them, then trim the WAL (docs/FORMATS.md 3, 5).

Crash safety, step by step:
1. read the WAL (read-only, no lock) and the newest manifest;
2. skip records at or below this WAL's uploaded offset, after checking the manifest
   really holds them (a re-initialised WAL must not have its new records skipped);
3. commit a manifest that *prepares* the object ids;
4. write the objects;
5. commit a manifest that makes them live and advances the WAL's uploaded offset;
6. trim the WAL to the last uploaded record (with the writer lock; its header is checked,
   the log is not scanned again).
A kill anywhere leaves either prepared ids (gc removes their objects) or records
that the rerun skips; the WAL is never trimmed past what a commit holds.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import struct
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, NamedTuple

from walctl.device.buffers import ALIGN, align_down, align_up, aligned_buffer
from walctl.errors import CorruptionError, NotFoundError, RefusedError, UsageError, WalctlError
from walctl.failpoints import failpoint
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE
from walctl.format.crc import crc32c as _crc32c  # the C library, called directly
from walctl.format.crc import crc32c_combine
from walctl.format.datablock import (DATA_BLOCK_FLAGS, DATA_BLOCK_HEADER_SIZE, DATA_BLOCK_HEADER_STRUCT,
                                      DATA_BLOCK_MAGIC)
from walctl.format.object import ObjectBuilder
from walctl.pipeline import rowcopy
from walctl.store import manifest as mf

from walctl.defaults import DEFAULT_BLOCK_SIZE, DEFAULT_SPLIT_SIZE  # payload per DataBlock; own Stream Object above

if TYPE_CHECKING:
    from walctl.device.base import Device

    from walctl.store.base import Store

DEFAULT_TRIM_TIMEOUT_S = 30.0  # how long upload waits for a running writer to take its trim
# An upload of at most this many record bytes keeps the bodies the scan read and builds its
# objects from them: each WAL byte is read once. A larger one keeps none (memory must not grow
# with the WAL) and reads the records again, object by object. Well under issue 19's 256 MiB.
KEEP_SCANNED_BYTES = 64 << 20


class Segment:
    """A contiguous run of one stream's batches in the WAL, kept compact: 12 bytes a record.

    Upload remembers where each batch is (its WAL offset) and its record body's crc; its bytes
    only while the upload's bodies fit KEEP_SCANNED_BYTES. Beyond that the objects are built by
    reading the batches again (``_WalBatches``), which checks each is still the record scanned,
    so memory does not grow with the WAL's bytes.
    """

    __slots__ = ("stream_id", "start", "end", "wal", "crcs", "bytes", "wal_end", "spool")

    def __init__(self, stream_id: int, start: int):
        self.stream_id = stream_id
        self.start = start  # the first batch's base offset
        self.end = start  # the stream offset after the last batch
        self.wal = array("q")
        self.crcs = array("I")
        self.bytes = 0  # the batches' sizes (= their record bodies)
        self.wal_end = 0  # the WAL offset where the last batch's record ends
        self.spool: _SegmentSpool | None = None  # its object as the scan writes it (one-pass uploads)

    def add(self, wal_offset: int, end: int, size: int, crc: int) -> None:
        self.wal.append(wal_offset)
        self.crcs.append(crc)
        self.end = end
        self.bytes += size
        self.wal_end = wal_offset + rec.SIZE + size

    def __len__(self) -> int:
        return len(self.wal)


@dataclass
class PlannedObject:
    kind: str  # "SO" or "SSO"
    streams: list[tuple[int, Segment]]

    @property
    def data_bytes(self) -> int:
        return sum(seg.bytes for _, seg in self.streams)

    def ranges(self) -> list[dict]:
        return [{"stream_id": sid, "start": seg.start, "end": seg.end, "bytes": seg.bytes}
                for sid, seg in self.streams]


@dataclass
class UploadResult:
    objects: list[dict] = field(default_factory=list)
    records: int = 0
    payload_bytes: int = 0
    skipped_records: int = 0
    last_offset: int | None = None
    trimmed_to: int | None = None
    commit_number: int | None = None
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    gaps: list[dict] = field(default_factory=list)  # stream gaps uploaded as gaps, and why
    bad_records: list[dict] = field(default_factory=list)  # records left in the WAL: no StreamRecordBatch

    def to_json(self) -> dict:
        return {
            "objects": self.objects, "objects_made": len(self.objects), "records": self.records,
            "payload_bytes": self.payload_bytes, "skipped_records": self.skipped_records,
            "last_offset": self.last_offset, "trimmed_to": self.trimmed_to,
            "commit_number": self.commit_number, "dry_run": self.dry_run, "seconds": round(self.seconds, 6),
            "gaps": self.gaps, "bad_records": self.bad_records,
        }


def plan_objects(streams: dict[int, Segment], split_size: int,
                 after_gaps: list[tuple[int, Segment]] = ()) -> list[PlannedObject]:
    """One stream: one SO. Several: an SO per stream of >= split_size data bytes, the rest in one SSO.

    ``after_gaps`` are the parts of streams after a crash gap: an object holds each stream
    contiguously, so each such part becomes a Stream Object of its own.
    """
    ordered = sorted(streams.items())
    extra = [PlannedObject("SO", [(sid, batches)]) for sid, batches in after_gaps]
    if not ordered:
        return extra
    if len(ordered) == 1:
        return [PlannedObject("SO", ordered)] + extra
    plan, rest = [], []
    for sid, batches in ordered:
        if batches.bytes >= split_size:
            plan.append(PlannedObject("SO", [(sid, batches)]))
        else:
            rest.append((sid, batches))
    if rest:
        plan.append(PlannedObject("SSO", rest))
    return plan + extra


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

    def __init__(self, doc: mf.Manifest, mark: dict | None, scan, keep_bytes: int = 0, spools=None):
        self.doc = doc
        self.spools: _Spools | None = spools  # each new segment's object written as the scan reads it
        self.kept: dict[int, bytes] | None = {} if keep_bytes > 0 else None  # WAL offset -> body
        self._keep_left = keep_bytes
        self.mark = mark
        self.uploaded = mark["offset"] if mark else -1
        self.scan = scan
        self.skipped = array("q")  # WAL offsets of records already uploaded
        self.not_in_store: int | None = None  # the first skipped record the store does not hold
        self.mark_found: tuple[int, dict] | None = None  # (offset, upload_mark) of the mark's record
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
        if self._before is None:
            # The record at trimOffset (deleted, read before any live one) and the skipped ones
            # say where each stream's last batch already in the store lies in the WAL.
            trim_entry = self.scan.trim_entry
            self._before = {}
            if trim_entry is not None and trim_entry.batch is not None:
                self._before[trim_entry.batch.stream_id] = trim_entry.offset
        if offset <= self.uploaded:
            self.skipped.append(offset)
            self._before[batch.stream_id] = offset
            if self.not_in_store is None and not self.doc.holds(batch.stream_id, batch.base_offset,
                                                                batch.end_offset):
                self.not_in_store = offset
            return
        sid, base = batch.stream_id, batch.base_offset
        end = base + batch.count
        last = self._last.get(sid)
        if last is None:
            known = self.doc.stream(sid)
            if known is not None and base != known.end:
                if base < known.end:
                    self.events.append((offset, "store_overlap", (sid, known.end, base)))
                else:
                    self.events.append((offset, "gap", (sid, known.end, base, self._before.get(sid))))
            seg = self._segment(sid, base)
            self.segments[sid] = [seg]
        else:
            prev_offset, prev_base, prev_end, seg = last
            if base < prev_end:
                self.events.append((offset, "wal_overlap", (sid, prev_base, prev_end, base)))
                self._drop_spool(seg)  # refused after the scan; the object is never made
            elif base > prev_end:
                self.events.append((offset, "gap", (sid, prev_end, base, prev_offset)))
                seg = self._segment(sid, base)
                self.segments[sid].append(seg)
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
            self.mark_found = (uploaded, {"offset": uploaded, "stream_id": sids[i], "base_offset": bases[i],
                                          "body_crc": crcs[i]})
        self.last_good = offsets[-1]
        if self._before is None:
            trim_entry = self.scan.trim_entry
            self._before = {}
            if trim_entry is not None and trim_entry.batch is not None:
                self._before[trim_entry.batch.stream_id] = trim_entry.offset
        first = 0
        if offsets[0] <= uploaded:
            first = bisect.bisect_right(offsets, uploaded)
            doc, before = self.doc, self._before
            for i in range(first):
                self.skipped.append(offsets[i])
                before[sids[i]] = offsets[i]
                if self.not_in_store is None and not doc.holds(sids[i], bases[i], ends[i]):
                    self.not_in_store = offsets[i]
            if first == n:
                return
        if self.kept is not None:
            size = sum(lengths) if first == 0 else sum(lengths[first:])
            self._keep_left -= size
            if self._keep_left >= 0:
                view = memoryview(chunk)
                kept = self.kept
                for i in range(first, n):
                    p = positions[i]
                    kept[offsets[i]] = bytes(view[p:p + lengths[i]])
            else:
                self.kept = None  # too many bytes to hold: the objects read the WAL again
        bodies = None
        if self.spools is not None and self.spools.open:
            # The run's bodies in the chunk: the spools copy them out before the scan goes on.
            bodies = _RunBodies(chunk, rows, run.first, positions, lengths)
        try:
            if sids.count(sids[first]) == n - first:
                self._take(sids[first], offsets, lengths, bases, ends, crcs, first, n, bodies)
            else:
                by_stream: dict[int, list[int]] = {}  # in order of first appearance; each in log order
                for i in range(first, n):
                    by_stream.setdefault(sids[i], []).append(i)
                for sid, idx in by_stream.items():  # one stream after the other (events are sorted later)
                    self._take(sid, [offsets[i] for i in idx], [lengths[i] for i in idx], [bases[i] for i in idx],
                               [ends[i] for i in idx], [crcs[i] for i in idx], 0, len(idx),
                               None if bodies is None else bodies.select(idx))
                self.events_sorted = False
        finally:
            del bodies  # (the spools copied what they took: nothing of the chunk is held past the run)
        last = n - 1
        self._last_todo = (offsets[last], sids[last], bases[last], crcs[last])

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
        events = self.events
        i = first
        while i < n:
            base = bases[i]
            if last is None:
                known = self.doc.stream(sid)
                if known is not None and base != known.end:
                    if base < known.end:
                        events.append((offsets[i], "store_overlap", (sid, known.end, base)))
                    else:
                        events.append((offsets[i], "gap", (sid, known.end, base, self._before.get(sid))))
                seg = self._segment(sid, base)
                self.segments[sid] = [seg]
            else:
                prev_offset, prev_base, prev_end, seg = last
                if base < prev_end:
                    events.append((offsets[i], "wal_overlap", (sid, prev_base, prev_end, base)))
                    self._drop_spool(seg)  # refused after the scan; the object is never made
                elif base > prev_end:
                    events.append((offsets[i], "gap", (sid, prev_end, base, prev_offset)))
                    seg = self._segment(sid, base)
                    self.segments[sid].append(seg)
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
    def last_mark(self) -> dict | None:
        """upload_mark of the last record to upload (None: nothing to upload)."""
        if self._last_todo is None:
            return None
        offset, sid, base, crc = self._last_todo
        return {"offset": offset, "stream_id": sid, "base_offset": base, "body_crc": crc}

    @property
    def todo_count(self) -> int:
        return sum(len(seg) for segs in self.segments.values() for seg in segs)

    @property
    def todo_bytes(self) -> int:
        return sum(seg.bytes for segs in self.segments.values() for seg in segs)

    def streams(self, holes, accepted: set[tuple[int, int, int]], where: str, warnings: list[str],
                gaps_out: list[dict]) -> tuple[dict[int, Segment], list[tuple[int, Segment]]]:
        """Judge the overlaps and gaps seen (in log order); refuse overlaps and unexplained gaps.

        A gap is accepted where a crash explains it (walctl.wal.gaps.explain: a crash hole, sealed
        or not, lies between the stream's two records: the lost batches were never acknowledged)
        or where the operator accepted exactly that gap (``accepted``: (stream, from, to), from
        ``upload --accept-gap``). Each accepted gap is kept as a gap, with a warning and an entry
        in ``gaps_out`` (the manifest records it); what follows a gap inside the WAL is returned as
        a separate segment (an object holds each stream contiguously).

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
            if hole is None and key not in accepted:
                raise CorruptionError(
                    f"stream {gap.stream_id}: offset gap ({gap.from_offset} to {gap.to_offset}) that no crash "
                    f"explains, before the record at WAL offset {gap.after_wal_offset}; nothing was uploaded",
                    where=where, offset=gap.after_wal_offset,
                    hint=f"a wrong --base-offset, or damage; if these offsets are really gone: rerun with "
                         f"--accept-gap {gap.spec} (recorded in the manifest; nothing else is skipped)")
            warnings.append(gaps.explanation(gap, hole, accepted=hole is None))
            item = gaps.gap_to_json(gap, hole, accepted=hole is None)
            gaps_out.append({k: item[k] for k in ("stream_id", "from", "to", "cause", "hole_start", "sealed",
                                                   "sealed_at_ns", "before_wal_offset", "after_wal_offset")})
        later = [(sid, seg) for sid, segs in sorted(self.segments.items()) for seg in segs[1:]]
        return {sid: segs[0] for sid, segs in self.segments.items()}, later


_REC_SIZE = rec.SIZE
_BATCH_HEAD = struct.Struct(">BqqqI")  # magic, streamId, epoch, baseOffset, count (FORMATS.md 2)
_BLOCK_HEAD = DATA_BLOCK_HEADER_SIZE
_BLOCK_HEAD_PACK = DATA_BLOCK_HEADER_STRUCT.pack_into
_BLOCK_MAGIC, _BLOCK_FLAGS = DATA_BLOCK_MAGIC, DATA_BLOCK_FLAGS
_ROW = bulk.ROW
# The second read of the WAL (uploads above KEEP_SCANNED_BYTES): log order, CHUNK_READ_BYTES per
# O_DIRECT read, from a thread that stays up to READ_AHEAD_CHUNKS chunks ahead of the block building.
CHUNK_READ_BYTES = 4 << 20
READ_AHEAD_CHUNKS = 2
_POOL_BUFFERS = READ_AHEAD_CHUNKS + 4  # chunk buffers kept for reuse: queued, being read, held by a block
_SAFE_SPAN = 1 << 30  # a run of records whose block payload and offset span stay below this needs no INT32 checks


def _block_cuts(cum: list[int], payload: int, block_size: int) -> Iterator[tuple[int, int, int, bool]]:
    """iter_block_groups' rule (a block closes once its payload reaches block_size) over a run of
    records joining an open block that holds ``payload`` bytes; ``cum``: the records' lengths,
    accumulated. In order, per stretch of records: (first, last, their bytes, closes): records
    [first, last] go to the open block, which ``closes`` after them (the next stretch starts a new
    one). The runs _SAFE_SPAN admits only: no index entry's Java int is reached."""
    k, j = len(cum), 0
    while j < k:
        before = cum[j - 1] if j else 0
        t = bisect.bisect_left(cum, before + block_size - payload, j)  # the block's last record
        last = min(t, k - 1)
        yield j, last, cum[last] - before, t < k
        payload, j = 0, last + 1  # (a stretch that does not close the block is the run's last)


class _Batch(NamedTuple):
    """A batch the scan kept: its encoded bytes (the record body) and offsets."""

    base_offset: int
    count: int
    end_offset: int
    size: int
    data: bytes


def _unviewed(buf) -> bool:
    """True when no view of the mmap ``buf`` is left (resize to its own size is refused while one is)."""
    try:
        buf.resize(len(buf))
    except BufferError:
        return False
    return True


class _ChunkReader:
    """Logical [lo, hi) of the ring in log order, a chunk of at most CHUNK_READ_BYTES per O_DIRECT read
    (never across a lap's end), read by a thread up to READ_AHEAD_CHUNKS chunks ahead of the consumer:
    the device reads overlap the block building and the store writes, memory stays bounded.

    Each chunk is (logical start, read-only view of a pooled aligned buffer); a buffer is read into
    again only once no view of it is left (a block still holding slices of it keeps it). ``close``
    stops the thread and counts its device reads as the caller's (bytes_read_total is per thread).
    """

    def __init__(self, dev: Device, ring, lo: int, hi: int):
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue(maxsize=READ_AHEAD_CHUNKS)
        self._full = queue.Full
        self._stop = threading.Event()
        self._pool: list = []
        self._read = 0
        self._thread = threading.Thread(target=self._run, args=(dev, ring, lo, hi), name="walctl-upload-read",
                                        daemon=True)
        self._thread.start()

    def _buffer(self):
        for buf in self._pool:
            if _unviewed(buf):
                return buf
        buf = aligned_buffer(CHUNK_READ_BYTES)
        if len(self._pool) < _POOL_BUFFERS:
            self._pool.append(buf)
        return buf

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except self._full:
                continue

    def _run(self, dev: Device, ring, lo: int, hi: int) -> None:
        from walctl.device.fdio import bytes_read_total

        before = bytes_read_total()
        try:
            o = lo
            while o < hi and not self._stop.is_set():
                n = min(CHUNK_READ_BYTES, ring.lap_end(o) - o, hi - o)
                with memoryview(self._buffer()) as whole, whole[:n] as view:
                    dev.pread_into(ring.physical(o), view)
                    item = (o, view.toreadonly())
                self._put(item)
                del item
                o += n
            self._put(None)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)
        finally:
            self._read = bytes_read_total() - before

    def __iter__(self) -> Iterator[tuple[int, memoryview]]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        from walctl.device.fdio import add_bytes_read

        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)  # unblock a put
            except Exception:
                pass
        self._thread.join()
        add_bytes_read(self._read)
        self._read = 0


class _WalBatches:
    """The DataBlocks of a Segment: from the bodies the scan kept, else from a second read of the WAL,
    checking each record is still the one scanned.

    The second read (``_stream``) reads the segment's span of the log in large chunks, in log order,
    from a thread (_ChunkReader), decodes each chunk's records in one call of the C decoder
    (bulk.decode_records: header and body checks, batch fields), checks a run of them against the
    scan in bulk (WAL offset, batch, stream offsets, body crc) and cuts DataBlocks out of it as
    views of the chunk: no Python object and no copy per record before the block's own bytes.
    A stream's span is read once; streams interleaved in the WAL (a Stream Set Object) each read
    the span they share.
    """

    def __init__(self, wal_path: str, header, end: int, kept: dict[int, bytes] | None = None):
        self.where = wal_path
        self.header = header
        self.end = end  # the end of the scanned log: no read goes past the 4 KiB block holding it
        self.kept = kept  # the bodies the scan kept (WAL offset -> body): not read again
        self._open: list = []  # (reader, device) of a second read under way: close() ends them

    def _changed(self, seg: Segment, offset: int, what: str) -> RefusedError:
        return RefusedError(f"the WAL changed during the upload: the record of stream {seg.stream_id} at WAL "
                            f"offset {offset} {what}; nothing was committed", where=self.where, offset=offset,
                            hint="another upload or trim ran meanwhile? rerun upload: it skips what is "
                                 "already uploaded")

    def blocks(self, seg: Segment, block_size: int) -> Iterator[tuple[int, int, list]]:
        """(first offset, end offset, [batch bytes, ...]) of each DataBlock of the segment, in order."""
        from walctl.format.object import iter_block_groups

        kept = self.kept
        if kept is not None and all(offset in kept for offset in seg.wal):
            # The scan's own bytes: no need to check they are still the records it read.
            for block in iter_block_groups(self._kept(seg, kept), block_size):
                yield block[0].base_offset, block[-1].end_offset, [b.data for b in block]
            return
        yield from self._stream(seg, block_size)

    def _kept(self, seg: Segment, kept: dict[int, bytes]) -> Iterator[_Batch]:
        expected = seg.start
        for offset in seg.wal:
            data = kept[offset]
            _, sid, _, base, count = _BATCH_HEAD.unpack_from(data)
            end = base + count
            if sid != seg.stream_id or base != expected:
                raise self._changed(seg, offset, "holds another batch now")
            expected = end
            yield _Batch(base, count, end, len(data), data)

    def close(self) -> None:
        """End the second reads still open (an upload that stops before its objects are built)."""
        while self._open:
            reader, dev = self._open.pop()
            try:
                reader.close()
            finally:
                dev.close()

    def _stream(self, seg: Segment, block_size: int) -> Iterator[tuple[int, int, list]]:
        from walctl.device import open_device
        from walctl.wal.reader import Ring

        ring = Ring(self.header.capacity)
        dev = open_device(self.where, writable=False)
        try:
            reader = _ChunkReader(dev, ring, align_down(seg.wal[0]), min(align_up(seg.wal_end),
                                                                          align_up(self.end)))
        except BaseException:
            dev.close()
            raise
        opened = (reader, dev)
        self._open.append(opened)
        try:
            yield from _Cutter(self, seg, ring, block_size).run(iter(reader))
        finally:
            if opened in self._open:
                self._open.remove(opened)
                try:
                    reader.close()
                finally:
                    dev.close()


class _Cutter:
    """One segment's second read: checks its records against the scan and cuts its DataBlocks."""

    def __init__(self, fetch: _WalBatches, seg: Segment, ring, block_size: int):
        self.fetch, self.seg, self.ring, self.block_size = fetch, seg, ring, block_size
        self.i = 0  # index in seg.wal of the next record to find
        self.expected = seg.start  # its stream offset
        self.parts: list = []  # the open block's batches (views)
        self.first = seg.start  # the open block's first stream offset
        self.payload = 0  # ... and its bytes

    def changed(self, i: int, what: str) -> RefusedError:
        return self.fetch._changed(self.seg, self.seg.wal[min(i, len(self.seg.wal) - 1)], what)

    def run(self, chunks) -> Iterator[tuple[int, int, list]]:
        seg = self.seg
        offsets, n = seg.wal, len(seg.wal)
        guess = 256  # rows asked of the decoder: doubled while all are ours, cut when others interleave
        chunk_lo, view = self._next(chunks)
        while self.i < n:
            o = offsets[self.i]
            if o >= chunk_lo + len(view):
                chunk_lo, view = self._next(chunks)
                continue
            lap_end = self.ring.lap_end(chunk_lo)
            pos = o - chunk_lo
            found = bulk.decode_records(view, chunk_lo, start=pos, lap_end=lap_end, align=ALIGN, max_records=guess)
            src = view
            if found.count == 0:
                if found.stop.reason not in (bulk.TRUNCATED_HEADER, bulk.TRUNCATED_BODY):
                    raise self.changed(self.i, "is no intact record now")
                # The record runs past this chunk: gather it whole from the next ones.
                src, chunk_lo, view = self._gather(view, pos, o, chunks, lap_end)
                found = bulk.decode_records(src, o, lap_end=lap_end, max_records=1)
            k = self._ours(found)
            yield from self._take(found.rows[:k * _ROW], k, src)
            guess = min(guess * 2, 1 << 20) if k == found.count == guess else max(2, 2 * k)
        if self.parts:
            yield self._close_block()
        if self.expected != seg.end:
            raise self.changed(n - 1, "holds another batch now")

    def _next(self, chunks) -> tuple[int, memoryview]:
        try:
            return next(chunks)
        except StopIteration:
            raise self.changed(self.i, "is no intact record now") from None

    def _gather(self, view, pos: int, o: int, chunks, lap_end: int) -> tuple[bytearray, int, memoryview]:
        """The record at logical ``o`` (buffer position ``pos``) whole, from this chunk and the next."""
        buf = bytearray(view[pos:])
        chunk_lo = o - pos
        taken = len(view)  # bytes of the current chunk already in buf
        while True:
            found = bulk.decode_records(buf, o, lap_end=lap_end, max_records=1)
            if found.count == 1:
                return buf, chunk_lo, view
            if found.stop.reason == bulk.TRUNCATED_HEADER:
                need = rec.SIZE
            elif found.stop.reason == bulk.TRUNCATED_BODY:
                need = rec.SIZE + found.stop.expected  # the header checked out: its bodyLength
            else:
                raise self.changed(self.i, "is no intact record now")
            while len(buf) < need:
                if taken == len(view):
                    chunk_lo, view = self._next(chunks)
                    taken = 0
                more = min(len(view) - taken, need - len(buf))
                buf += view[taken:taken + more]
                taken += more

    def _ours(self, found) -> int:
        """How many of the decoded records, from the first, are the segment's next ones (by WAL offset)."""
        got = found.rows[0::_ROW].tolist()
        want = self.seg.wal[self.i:self.i + len(got)].tolist()
        if got[:len(want)] == want:
            return len(want)
        k = 0
        while got[k] == want[k]:
            k += 1
        if k == 0:
            raise self.changed(self.i, "is no intact record now")
        return k

    def _take(self, rows: memoryview, k: int, src) -> Iterator[tuple[int, int, list]]:
        """Check k decoded records against the scan, in bulk, and add them to the blocks."""
        seg, i = self.seg, self.i
        kinds, sids = rows[3::_ROW].tolist(), rows[4::_ROW].tolist()
        bases, counts = rows[6::_ROW].tolist(), rows[7::_ROW].tolist()
        positions, lengths = rows[1::_ROW].tolist(), rows[2::_ROW].tolist()
        ends = list(map(operator.add, bases, counts))
        crcs = rowcopy.body_crcs(src, rows, 0, k)
        if (kinds.count(bulk.KIND_BATCH) != k or sids.count(seg.stream_id) != k or bases[0] != self.expected
                or bases[1:] != ends[:-1] or crcs != seg.crcs[i:i + k].tolist()):
            self._refuse(kinds, sids, bases, ends, crcs)
        self.expected = ends[-1]
        view = memoryview(src)
        cum = list(itertools.accumulate(lengths))
        if self.payload + cum[-1] >= _SAFE_SPAN or ends[-1] - self.first >= _SAFE_SPAN:
            yield from self._take_one_by_one(view, positions, lengths, bases, counts, ends)
        else:
            for j, last, size, closes in _block_cuts(cum, self.payload, self.block_size):
                self.parts += [view[p:p + n] for p, n in zip(positions[j:last + 1], lengths[j:last + 1])]
                self.payload += size
                self.last_end = ends[last]
                if closes:
                    yield self._close_block()
        self.i = i + k

    def _take_one_by_one(self, view, positions, lengths, bases, counts, ends):
        """iter_block_groups' rules record by record, where a block could reach the index's Java ints."""
        from walctl.format.object import DATA_BLOCK_HEADER_SIZE, INT32_MAX

        for p, n, base, count, end in zip(positions, lengths, bases, counts, ends):
            if count > INT32_MAX or n > INT32_MAX - DATA_BLOCK_HEADER_SIZE:
                raise ValueError(f"batch at offset {base} too large for one DataBlock index entry")
            if self.parts and (self.payload + n > INT32_MAX - DATA_BLOCK_HEADER_SIZE or end - self.first > INT32_MAX):
                yield self._close_block()
            self.parts.append(view[p:p + n])
            self.payload += n
            self.last_end = end
            if self.payload >= self.block_size:
                yield self._close_block()

    def _close_block(self) -> tuple[int, int, list]:
        block = (self.first, self.last_end, self.parts)
        self.parts, self.payload, self.first = [], 0, self.last_end
        return block

    def _refuse(self, kinds, sids, bases, ends, crcs) -> None:
        """The first of the records that is not the one scanned, in log order, refused as the scan's check would."""
        seg, expected = self.seg, self.expected
        for j, kind in enumerate(kinds):
            if crcs[j] != seg.crcs[self.i + j]:
                raise self.changed(self.i + j, "is another record now")
            if kind != bulk.KIND_BATCH or sids[j] != seg.stream_id or bases[j] != expected:
                raise self.changed(self.i + j, "holds another batch now")
            expected = ends[j]
        raise AssertionError("a run of records failed a check and none of them fails it")


# One-pass uploads (stores with ``open_spool``: the local store): each segment's DataBlocks are cut
# and written to a temp object of the store as the scan reads its records, by a writer thread, so
# the WAL is read once and its reads overlap the writes. A segment that the plan makes a Stream
# Object of its own gets its index and footer and is published under its reserved key after the
# prepare commit; the others (streams sharing a Stream Set Object, or beyond SPOOL_SEGMENTS) are
# built as before (kept bodies, or a second read) and their temp objects removed.
SPOOL_SEGMENTS = 16  # segments written as they are read; more (many interleaved streams) read again
SPOOL_WRITE_BYTES = 4 << 20  # DataBlocks go to the writer thread this many bytes at a time (one system call)
SPOOL_WRITE_BLOCKS = 8  # ... or this many blocks (smaller ones), whichever comes first
SPOOL_QUEUE_WRITES = 2  # such batches waiting for the writer thread (about 8 MiB)
SPOOL_MAX_BLOCK = 2 << 20  # larger --block-size: built the usual way (memory: a block buffer per spool and queued block)
_BLOCK_SLACK = 64 << 10  # a block buffer's room past block_size for the record that ends the block


class _NoSpool(Exception):
    """A batch that no DataBlock index entry holds: the segment is built the usual way (which refuses it)."""


class _BlockBuffers:
    """The block buffers of one upload's spools, reused: a DataBlock is laid out in one (its header, then
    its batches copied in straight from the scan's chunk), written from it, and the buffer handed back
    by the writer thread. Reused buffers cost no page faults; at most (SPOOL_QUEUE_WRITES + 2) batches of
    them (queued, being written, being filled) and one per live spool exist at a time (4 MiB batches:
    about 16 at the default block size). Page-aligned (O_DIRECT writes): a block starts at its object
    position's offset in a page, after room for the object's bytes before it in that page."""

    def __init__(self, size: int):
        import threading

        # a block's usual room: the page's bytes before it, block_size + its header + some of the record that ends it
        self.size = align_up(ALIGN + size)
        self._free: list = []
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            if self._free:
                return self._free.pop()
        return aligned_buffer(self.size)

    def give(self, buf) -> None:
        if len(buf) == self.size:
            with self._lock:
                self._free.append(buf)


class _SpoolWriter:
    """The thread that writes the spooled DataBlocks (the writes release the GIL: they overlap the
    scan). The uploading thread hands the blocks over SPOOL_WRITE_BYTES (or SPOOL_WRITE_BLOCKS) at a
    time, one queue item each (one wake-up of the thread), which the thread writes with one system
    call per spool among them: O_DIRECT writes of 1 MiB took ~1.5x as long as 4 MiB ones beside the
    scan's reads. ``put`` waits while SPOOL_QUEUE_WRITES such batches are queued; ``kick`` and
    ``flush`` hand over what there is. An error of the thread is raised by the next ``put``, ``kick``
    or ``flush`` (the blocks after it are dropped).

    An aligned spool (O_DIRECT) is written in whole pages: a block buffer holds its block after the
    bytes of the object's page before it (``lead`` of them); the thread puts there the page's bytes
    carried over from the block before (``_SegmentSpool.carry``), writes the buffer's whole pages and
    carries the rest to the next block; ``publish`` writes the last carry with the index and footer.
    """

    def __init__(self, buffers: _BlockBuffers):
        import queue
        import threading

        self._buffers = buffers
        self._queue: queue.Queue = queue.Queue(maxsize=SPOOL_QUEUE_WRITES)
        self._batch: list = []  # (uploading thread) blocks not handed over yet
        self._batch_bytes = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="walctl-upload-write", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        q = self._queue
        while True:
            batch = q.get()
            try:
                if batch is not None and self._error is None:
                    self._write(batch)
            except BaseException as exc:  # raised in the uploading thread
                self._error = exc
            finally:
                for item in batch or ():
                    self._buffers.give(item[1])
                q.task_done()
            if batch is None:
                return
            del batch

    @staticmethod
    def _write(items: list) -> None:
        """Write the blocks ``items``, each spool's consecutive ones together."""
        views, spool = [], None
        for item in items + [None]:
            if item is None or item[0] is not spool:
                if views:
                    spool.spool.write(views)
                views, spool = [], None if item is None else item[0]
            if spool is None or spool.dropped:
                continue
            seg_spool, buf, lead, end = item
            if seg_spool.aligned:
                buf[:lead] = seg_spool.carry  # the page's bytes before the block (carried from the one before)
                cut = align_down(end)
                seg_spool.carry = buf[cut:end]
            else:
                cut = end
            if cut:
                views.append(memoryview(buf)[:cut])

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, seg_spool: "_SegmentSpool", buf, lead: int, end: int) -> None:
        """Write buf[lead:end] to the spool (an aligned one: from its page start), then give buf back
        to the buffers."""
        self._raise()
        self._batch.append((seg_spool, buf, lead, end))
        self._batch_bytes += end - lead
        if self._batch_bytes >= SPOOL_WRITE_BYTES or len(self._batch) >= SPOOL_WRITE_BLOCKS:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._batch:
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            self._queue.put(batch)

    def kick(self) -> None:
        """Have the blocks put so far written, without waiting for it."""
        self._raise()
        self._hand_over()

    def flush(self) -> None:
        """Wait until every block put is written."""
        self._raise()
        self._hand_over()
        self._queue.join()
        self._raise()

    def close(self) -> None:
        self._error = self._error or _NoSpool("closed")  # drop what is still queued
        self._batch = []
        self._queue.put(None)
        self._thread.join()


class _Bodies:
    """Batches handed to a spool, by index: ``copy_into`` copies a stretch of them into a block buffer."""

    __slots__ = ("items",)

    def __init__(self, items: list):
        self.items = items  # one body each (bytes, or views of a chunk)

    def copy_into(self, buf, pos: int, a: int, b: int, crc: int) -> tuple[int, int]:
        """Copy items [a, b) into ``buf`` at ``pos``, back to back; returns where they end and ``crc``
        (the crc32c of some bytes X) extended over them: crc32c(X + the items)."""
        with memoryview(buf) as out:
            for item in self.items[a:b]:
                end = pos + len(item)
                out[pos:end] = item
                crc = _crc32c(item, crc)
                pos = end
        return pos, crc


class _RunBodies(_Bodies):
    """A run's bodies in the scan's chunk, by row: a stretch of them is copied in one call (C)."""

    __slots__ = ("chunk", "rows", "base", "positions", "lengths")

    def __init__(self, chunk, rows, base: int, positions: list[int], lengths: list[int]):
        self.chunk, self.rows, self.base, self.positions, self.lengths = chunk, rows, base, positions, lengths

    def copy_into(self, buf, pos: int, a: int, b: int, crc: int) -> tuple[int, int]:
        # (crc extended from the records' bodyCRCs, which the decoder checked: the bodies are read once)
        return rowcopy.gather_crc_into(buf, pos, self.chunk, self.rows, self.base + a, self.base + b, crc)

    def select(self, idx: list[int]) -> _Bodies:
        """Items ``idx`` (one stream's records of a run shared with others), as views of the chunk."""
        view = memoryview(self.chunk)
        return _Bodies([view[self.positions[i]:self.positions[i] + self.lengths[i]] for i in idx])


class _SegmentSpool:
    """A segment's object written as the scan reads its records: DataBlocks cut by iter_block_groups'
    rules (a block closes once its payload reaches block_size; cut early where the index's Java ints
    could not hold it), each laid out in a block buffer as its batches arrive (copied from the scan's
    chunk at once: nothing of the chunk is held) and queued for the writer when it closes.

    ``add`` takes the next records: their bodies (``_Bodies``), lengths and end offsets.
    """

    __slots__ = ("spool", "writer", "buffers", "builder", "sid", "block_size", "buf", "lead", "fill", "count",
                 "payload", "crc", "first", "last_end", "next", "dropped", "aligned", "carry")

    def __init__(self, spool, writer: _SpoolWriter, buffers: _BlockBuffers, sid: int, first: int, block_size: int):
        self.spool, self.writer, self.buffers, self.sid, self.block_size = spool, writer, buffers, sid, block_size
        self.builder = ObjectBuilder()
        # O_DIRECT: blocks laid out at their page offset, written in whole pages (_SpoolWriter)
        self.aligned = bool(getattr(spool, "direct", False))
        self.carry = b""  # (writer thread) the object's bytes after its last whole page written
        self.buf = None  # the open block's buffer: (lead bytes of room,) its header, then its batches
        self.lead = 0  # where the open block starts in buf
        self.fill = _BLOCK_HEAD  # ... and where its bytes end
        self.count = 0  # its batches
        self.payload = 0  # ... and their bytes
        self.crc = 0  # ... and those bytes' crc32c
        self.first = first  # its first stream offset
        self.last_end = first
        self.next = first  # the stream offset the next batch starts at
        self.dropped = False

    def add(self, bodies: _Bodies, at: int, lengths, ends) -> None:
        """The next batches: ``bodies``' items [at, at + len(lengths)), their lengths and end offsets."""
        cum = list(itertools.accumulate(lengths))
        if self.payload + cum[-1] >= _SAFE_SPAN or ends[-1] - self.first >= _SAFE_SPAN:
            self._add_one_by_one(bodies, at, lengths, ends)
            return
        for j, last, size, closes in _block_cuts(cum, self.payload, self.block_size):
            self._copy(bodies, at + j, at + last + 1, size)
            self.count += last + 1 - j
            self.last_end = ends[last]
            if closes:
                self._close()
        self.next = ends[-1]

    def _add_one_by_one(self, bodies: _Bodies, at: int, lengths, ends) -> None:
        from walctl.format.index_entry import INT32_MAX

        base = self.next
        for i, (n, end) in enumerate(zip(lengths, ends)):
            if end - base > INT32_MAX or n > INT32_MAX - _BLOCK_HEAD:
                raise _NoSpool(f"batch at offset {base} too large for one DataBlock index entry")
            if self.count and (self.payload + n > INT32_MAX - _BLOCK_HEAD or end - self.first > INT32_MAX):
                self._close()
            self._copy(bodies, at + i, at + i + 1, n)
            self.count += 1
            self.last_end = end
            if self.payload >= self.block_size:
                self._close()
            base = end
        self.next = base

    def _copy(self, bodies: _Bodies, a: int, b: int, size: int) -> None:
        """Items [a, b) of ``bodies`` (``size`` bytes) after the open block's batches."""
        buf = self.buf
        if buf is None:
            buf = self.buf = self.buffers.take()
            self.lead = self.builder.position % ALIGN if self.aligned else 0
            self.fill = self.lead + _BLOCK_HEAD
        need = self.fill + size
        if len(buf) < need:  # a block ended by a large record: a larger buffer of its own
            grown = aligned_buffer(align_up(max(need, 2 * len(buf))))
            grown[:self.fill] = buf[:self.fill]
            self.buffers.give(buf)
            buf = self.buf = grown
        self.fill, self.crc = bodies.copy_into(buf, self.fill, a, b, self.crc)
        self.payload += size

    def _close(self) -> None:
        buf, lead, end = self.buf, self.lead, self.fill
        payload = end - lead - _BLOCK_HEAD
        _BLOCK_HEAD_PACK(buf, lead, _BLOCK_MAGIC, _BLOCK_FLAGS, self.count, payload)
        with memoryview(buf) as whole, whole[lead:lead + _BLOCK_HEAD] as head:
            crc = crc32c_combine(_crc32c(head), self.crc, payload)  # the block's: header, then the batches
        try:
            self.builder.add_laid_out(self.sid, self.first, self.last_end, self.count, end - lead, crc)
        except ValueError as exc:  # offsets no index entry holds: the usual way refuses them
            raise _NoSpool(str(exc)) from exc
        self.buf, self.count, self.payload, self.crc, self.first = None, 0, 0, 0, self.last_end
        self.writer.put(self, buf, lead, end)

    def finish(self) -> None:
        """Close the last block (queued for the writer)."""
        if self.count:
            self._close()


class _Spools:
    """The segments' spools of one upload (at most ``limit``) and their writer thread."""

    def __init__(self, store: Store, block_size: int, limit: int):
        self.store, self.block_size, self.limit = store, block_size, limit
        self.made = 0
        self.live: list[_SegmentSpool] = []  # written as the scan goes
        self.writer: _SpoolWriter | None = None
        self.buffers = _BlockBuffers(block_size + _BLOCK_HEAD + _BLOCK_SLACK)
        self._dropped: list[_SegmentSpool] = []  # removed by close()

    @property
    def open(self) -> bool:
        """True while a segment may be written as it is read (the scan then hands over bodies)."""
        return bool(self.live) or self.made < self.limit

    def new(self, sid: int, first: int) -> _SegmentSpool | None:
        if self.made >= self.limit:
            return None
        self.made += 1
        if self.writer is None:
            self.writer = _SpoolWriter(self.buffers)
        seg_spool = _SegmentSpool(self.store.open_spool(), self.writer, self.buffers, sid, first, self.block_size)
        self.live.append(seg_spool)
        return seg_spool

    def drop(self, seg_spool: _SegmentSpool) -> None:
        """Write no more of it (its temp object is removed by ``close``, once the writer is done with it)."""
        seg_spool.dropped = True
        self.live.remove(seg_spool)
        self._dropped.append(seg_spool)

    def finish(self, plan: list[PlannedObject]) -> None:
        """The scan is over: close the last blocks of the plan's own Stream Objects; drop the other spools
        (and a segment's whose last block no index entry holds: it is built the usual way)."""
        keep = []
        for planned in plan:
            if _spooled(planned):
                seg = planned.streams[0][1]
                try:
                    seg.spool.finish()
                    keep.append(seg.spool)
                except _NoSpool:
                    seg.spool = None
        for seg_spool in list(self.live):
            if not any(seg_spool is k for k in keep):
                self.drop(seg_spool)
        if self.writer is not None:
            self.writer.kick()  # the last blocks written while the prepare commit runs

    def publish(self, seg_spool: _SegmentSpool, key: str) -> ObjectBuilder:
        """The segment's object, whole and durable under ``key`` (its blocks written, then its index
        and footer; fsync and rename as a put)."""
        self.writer.flush()
        tail = seg_spool.builder.finish()
        seg_spool.spool.publish(key, seg_spool.carry + tail)
        self.live.remove(seg_spool)
        return seg_spool.builder

    def close(self) -> None:
        """Stop the writer; remove every temp object not published."""
        if self.writer is not None:
            self.writer.close()
        for seg_spool in self.live + self._dropped:
            seg_spool.spool.discard()
        self.live, self._dropped = [], []


def _object_chunks(builder, planned: PlannedObject, fetch: _WalBatches, block_size: int) -> Iterator[bytes]:
    """The object's bytes, a DataBlock at a time, then its index and footer."""
    for sid, seg in planned.streams:
        for start, end, batches in fetch.blocks(seg, block_size):
            data = builder.add_block(sid, start, end, batches)
            del batches  # views of the WAL's chunks: their buffers can be read into again
            yield data
    yield builder.finish()


LEASE_WAIT_S = 600.0  # walctl upload waits this long for another upload of the WAL to end


def upload(wal_path: str, store: Store, *, namespace: str = mf.DEFAULT_NAMESPACE, block_size: int = DEFAULT_BLOCK_SIZE,
           split_size: int = DEFAULT_SPLIT_SIZE, trim: bool = True, dry_run: bool = False,
           accept_gaps: list[tuple[int, int, int]] = (), progress=None,
           trim_timeout_s: float = DEFAULT_TRIM_TIMEOUT_S, max_bytes: int | None = None,
           lease_wait_s: float = LEASE_WAIT_S, on_wait=None) -> UploadResult:
    """Upload the WAL's records after the trim point; commit; trim to the last one uploaded.

    The WAL is read without the writer lock, so a writer may start, append and stop meanwhile
    (only the trim takes the lock, or goes through the writer's hand-off). A log a live writer
    appends to is uploaded up to its first block in flight; a log that was quiet for the whole
    scan (no lock holder, the header slots unchanged) has every finding judged as damage.

    Args:
        accept_gaps: (stream, from, to): stream offsets [from, to) the operator accepts as gone
            (``--accept-gap``); such a gap is uploaded as a gap and recorded in the manifest.
        trim_timeout_s: how long a live writer may take to do the trim (the hand-off).
        progress: if given, ``progress(done, total)`` is called with the payload bytes uploaded so far.
        max_bytes: upload at most about this many bytes of log (whole records, from the first one
            not uploaded yet): the writer-side uploader's ``--upload-at`` cap on each upload.
        lease_wait_s: how long to wait while another upload of this WAL runs (the upload lease,
            walctl.device.locks.take_lease; ``on_wait(message)`` is told once), then UploadBusy.
            Two uploads of one WAL never run at once: the second would upload the same records
            again and lose the commit race.
    Returns an UploadResult; ``bad_records`` lists records whose body is no StreamRecordBatch:
    they are not uploaded and the WAL is not trimmed past the first of them (see 'recover').
    """
    lease = None if dry_run else _take_lease(wal_path, lease_wait_s, on_wait)
    try:
        return _upload_leased(wal_path, store, namespace=namespace, block_size=block_size, split_size=split_size,
                              trim=trim, dry_run=dry_run, accept_gaps=accept_gaps, progress=progress,
                              trim_timeout_s=trim_timeout_s, max_bytes=max_bytes)
    finally:
        if lease is not None:
            lease.release()


class UploadBusy(RefusedError):
    """Another upload of this WAL held the upload lease for the whole wait."""


def _take_lease(wal_path: str, wait_s: float, on_wait):
    """The WAL's upload lease (None where the device cannot be opened for writing: a read-only
    medium still uploads, unguarded), or UploadBusy."""
    from walctl.device.locks import take_lease
    from walctl.device.opening import open_error

    said = (lambda: on_wait(f"{wal_path}: another upload of this WAL is running; waiting up to {wait_s:g} s "
                            f"for it to end")) if on_wait is not None else None
    try:
        lease = take_lease(wal_path, wait_s=wait_s, on_wait=said)
    except OSError as exc:
        err = open_error(exc, wal_path)
        if isinstance(err, NotFoundError):
            raise err from exc
        return None
    if lease is None:
        raise UploadBusy("another upload of this WAL is running", where=wal_path,
                         hint="nothing was uploaded; rerun when it has ended (it uploads the same records)")
    return lease


def _upload_leased(wal_path: str, store: Store, **options) -> UploadResult:
    """upload() once its lease is held: read the log as quiet, then again as a live writer's if a
    writer started or stopped meanwhile (_WriterStarted)."""
    dry_run, block_size = options["dry_run"], options["block_size"]
    live = None  # not known yet: _upload looks for a writer
    while True:
        spools = None
        if (not dry_run and callable(getattr(store, "open_spool", None)) and SPOOL_SEGMENTS > 0
                and block_size <= SPOOL_MAX_BLOCK):
            spools = _Spools(store, block_size, SPOOL_SEGMENTS)
        try:
            return _upload(wal_path, store, spools=spools, live=live, **options)
        except _WriterStarted:
            live = True  # read again as a live writer's log: up to its first block in flight
        finally:
            if spools is not None:
                spools.close()  # the temp objects of an upload that did not publish them


class _WriterStarted(Exception):
    """A writer started (or stopped) during a scan that took the log for quiet, and the scan found
    what may be its blocks in flight: the upload reads the log again as a live writer's."""


def check_wal(wal_path: str) -> None:
    """Raise what the upload itself would for a DEVICE that holds no WAL walctl uploads (missing,
    a directory or FIFO, no valid header, capacity past its end, another flavour), having read only
    the header slots: the command calls it before a real upload creates its store."""
    from walctl.wal.lifecycle import read_wal_state

    dev = _open_for_upload(wal_path)
    try:
        _check_flavour(read_wal_state(dev, wal_path).header, wal_path)
    finally:
        dev.close()


def _check_flavour(header, wal_path: str) -> None:
    if header.flavour != "walctl":
        raise RefusedError(f"{header.flavour} WAL: upload reads only walctl's WALs", where=wal_path,
                           hint="read its records with 'walctl recover'; AutoMQ uploads its own WAL")


def _upload(wal_path: str, store: Store, *, namespace: str, block_size: int, split_size: int, trim: bool,
            dry_run: bool, accept_gaps, progress, trim_timeout_s: float, spools: _Spools | None,
            max_bytes: int | None = None, live: bool | None = None) -> UploadResult:
    from walctl.device.locks import lock_holder
    from walctl.wal import gaps, reader
    from walctl.wal.lifecycle import read_wal_state

    started = time.monotonic()
    result = UploadResult(dry_run=dry_run)
    dev = _open_for_upload(wal_path)
    scan_events = None
    try:
        header = read_wal_state(dev, wal_path).header
        _check_flavour(header, wal_path)
        if live is not None:  # a second read
            result.warnings.append(f"{wal_path}: a writer started or stopped while upload read the log; read "
                                   f"it again, up to its first block in flight")
        elif lock_holder(wal_path) is not None:
            live = True
            result.warnings.append(f"{wal_path}: a writer is active; uploading the records before its blocks "
                                   f"in flight")
        # The manifest first: the scan sorts each record as it reads it and keeps no record's bytes.
        doc = mf.load_latest(store)
        node_key = str(header.node_id)
        mark = doc.upload_mark(node_key)
        scan = reader.ScanResult(header, reader.Ring(header.capacity))
        keep = KEEP_SCANNED_BYTES
        if spools is not None and header.clean and header.next_offset - max(header.trim_offset, 0) > keep:
            keep = 0  # the log is larger: its bodies would be copied, then dropped (the spools take them)
        records = _Records(doc, mark, scan, keep, spools)
        findings = []
        run_type = reader.Run
        # --upload-at: records from this offset on wait for the next upload
        cap_end = None if max_bytes is None else max(header.trim_offset, mark["offset"] if mark else -1, 0) + max_bytes
        scan_events = reader.Scan(dev, header, report=scan, probe=not live, bulk=True, readahead=True)
        failpoint("upload-scan")  # (tests: a writer starts while upload reads the log)
        for event in scan_events:
            if isinstance(event, reader.Finding):
                findings.append(event)
                if live and event.kind != reader.BAD_BATCH:
                    # A live writer's blocks in flight read as holes: upload only the prefix before them.
                    records.stop()
                continue
            if cap_end is not None and event.end > cap_end:
                if event.offset >= cap_end and records.todo_count:
                    break
                if type(event) is run_type:  # the run's records that start before the cap, then stop
                    records.add_run(_run_before(event, cap_end))
                    break
            if type(event) is run_type:  # intact batches, in bulk: most of the log
                records.add_run(event)
            else:
                records.add(event)
        if not live and [f for f in findings if f.kind != reader.BAD_BATCH] and _log_moved(dev, wal_path, header):
            raise _WriterStarted()
    finally:
        if scan_events is not None:
            scan_events.close()  # its read-ahead ends before the device closes
        dev.close()  # no lock was taken: appends may go on during the upload
    # A bad batch (a valid record whose body is no StreamRecordBatch) stops only itself: the
    # other records are uploaded, the WAL is not trimmed past it, 'recover' shows it.
    if scan.findings:  # (the verdict: only for findings to judge)
        from walctl.wal.verdict import unexplained_error

        damage = unexplained_error(scan.findings, wal_path, framing_only=True,
                                   hint="nothing uploaded; inspect with 'walctl recover'")
        if damage is not None:
            raise damage
    bad_findings = {f.offset: f for f in findings if f.kind == reader.BAD_BATCH}
    findings = [f for f in findings if f.kind != reader.BAD_BATCH]
    if live and findings:
        findings = []  # a live writer's blocks in flight: the upload stopped before them (below)
    bad = records.bad
    result.bad_records = [{"offset": e.offset, "body_bytes": e.body_bytes,
                           "reason": bad_findings[e.offset].reason if e.offset in bad_findings
                           else "body is not a StreamRecordBatch"} for e in bad]
    holes = gaps.holes_of(findings, scan.sealed_holes)
    accepted = {tuple(a) for a in accept_gaps}

    uploaded = mark["offset"] if mark else -1
    if mark:
        _check_same_wal(mark, records.mark_found, scan, wal_path, node_key)
    if records.not_in_store is not None:
        raise CorruptionError(
            f"the store says this WAL (node {node_key}) is uploaded up to offset {uploaded}, but the record "
            f"at {records.not_in_store} is not in the store", where=wal_path, offset=records.not_in_store,
            hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")
    result.skipped_records = len(records.skipped)
    streams, after_gaps = records.streams(holes, accepted, wal_path, result.warnings, result.gaps)
    used = {(g["stream_id"], g["from"], g["to"]) for g in result.gaps if g["cause"] == "accepted"}
    recorded = {(g["stream_id"], g["from"], g["to"]) for g in doc.stream_gaps or ()}
    for sid, lo, hi in sorted(accepted - used):
        if (sid, lo, hi) in recorded:
            result.warnings.append(f"--accept-gap {sid}:{lo}-{hi}: already recorded in the manifest")
            continue
        raise UsageError(f"--accept-gap {sid}:{lo}-{hi} matches no gap in what this upload would upload",
                         where=wal_path, hint="'walctl recover' and 'walctl status' list the gaps; "
                                              "give exactly stream:from-to of one")
    plan = plan_objects(streams, split_size, after_gaps)
    if spools is not None:  # the plan's own Stream Objects written as the scan read them: their last blocks
        spools.finish(plan)
    result.records = records.todo_count
    result.payload_bytes = records.todo_bytes - result.records * BATCH_HEADER_SIZE
    last_todo_mark = records.last_mark
    result.last_offset = (last_todo_mark["offset"] if last_todo_mark
                          else (records.skipped[-1] if records.skipped else None))

    if dry_run:
        result.objects = [{"id": None, "key": None, "kind": p.kind, "size_bytes": None,
                           "data_bytes": p.data_bytes, "streams": p.ranges()} for p in plan]
        result.seconds = time.monotonic() - started
        return result

    if plan:
        expected_ends = {sid: _end(doc, sid) for sid in streams}
        prepared: list[dict] = []

        def prepare(m: mf.Manifest) -> None:
            prepared[:] = m.prepare(len(plan), namespace)

        mf.commit(store, prepare, command="upload (prepare)")
        made = []
        # Objects are built and sent a DataBlock at a time from the bodies the scan kept, or (more
        # than KEEP_SCANNED_BYTES) from a second read of the WAL (no lock: the records are checked
        # to be the ones scanned), so memory stays bounded.
        fetch = _WalBatches(wal_path, header, scan.end_offset, records.kept)
        try:
            failpoint("upload-after-prepare")
            for planned, reservation in zip(plan, prepared):
                if _spooled(planned):  # written during the scan: its index and footer, then published
                    built = spools.publish(planned.streams[0][1].spool, reservation["key"])
                else:
                    built = ObjectBuilder()
                    store.put_large(reservation["key"], _object_chunks(built, planned, fetch, block_size))
                # bytes: the stream's span in the object (its DataBlocks, headers included)
                ranges = [{"stream_id": sid, "start": rg.start_offset, "end": rg.end_offset,
                           "bytes": rg.size_bytes} for sid, rg in sorted(built.ranges.items())]
                made.append({"id": reservation["id"], "key": reservation["key"], "kind": planned.kind,
                             "size": built.size, "order_id": reservation["id"],
                             "data_time": time.time(), "ranges": ranges})
                if progress is not None:
                    progress(sum(p.data_bytes for p in plan[:len(made)]), sum(p.data_bytes for p in plan))
            failpoint("upload-before-commit")
        except BaseException:  # SIGTERM/SIGINT or a failure before the commit: roll the step back
            fetch.close()
            _release(store, prepared, result.warnings)
            raise

        def make_live(m: mf.Manifest) -> None:
            if not {o["id"] for o in made} <= m.prepared_ids():
                raise RefusedError("the prepared object ids were collected by gc during the upload",
                                   where=store.url, hint="rerun upload; nothing was lost")
            if m.upload_mark(node_key) != mark:
                raise RefusedError(f"another upload of this WAL (node {node_key}) committed first",
                                   where=store.url, hint="rerun upload: it skips what is already uploaded")
            for sid, end in expected_ends.items():
                now_end = _end(m, sid)
                if now_end != end:
                    raise RefusedError(f"stream {sid} changed in the store during the upload "
                                       f"(end {end} -> {now_end})", where=store.url, hint="rerun upload")
            m.make_live(made)
            m.advance(node_key, last_todo_mark)
            if result.gaps:  # why these streams have gaps: a crash, or the operator's --accept-gap
                now = time.time()
                m.add_gaps([{**g, "node_id": header.node_id, "time": now} for g in result.gaps])

        committed = mf.commit(store, make_live, command="upload")
        result.commit_number = committed.number
        result.objects = [{"id": o["id"], "key": o["key"], "kind": o["kind"], "size_bytes": o["size"],
                           "streams": o["ranges"]} for o in made]
        failpoint("upload-after-commit")

    trim_to = result.last_offset
    if bad:
        # Leave the first bad record live for 'recover': trim only to the last record before it.
        trim_to = records.good_before_bad
        first = bad[0]
        result.warnings.append(
            f"{len(bad)} record(s) are not StreamRecordBatches and were not uploaded (first at WAL offset "
            f"{first.offset}); the WAL is not trimmed past it: save it with 'walctl recover {wal_path} "
            f"--from {first.offset} --to {first.offset + 1} --payload hex', then drop it with "
            f"'walctl trim {wal_path} {max(records.last_good or -1, bad[-1].offset)}'")
    if trim and trim_to is not None and trim_to > header.trim_offset:
        try:
            result.trimmed_to = _trim_after(wal_path, trim_to, result.warnings, trim_timeout_s)
        except WalctlError as exc:
            exc.result = result  # committed: the caller still reports what was uploaded
            result.seconds = time.monotonic() - started
            raise
    result.seconds = time.monotonic() - started
    return result


def _spooled(planned: PlannedObject) -> bool:
    """True when the planned object is a segment's own Stream Object written as the scan read it."""
    seg_spool = planned.streams[0][1].spool
    return planned.kind == "SO" and len(planned.streams) == 1 and seg_spool is not None and not seg_spool.dropped


def _release(store: Store, prepared: list[dict], warnings: list[str]) -> None:
    """Undo an upload that will not commit: delete the objects written for its prepared ids and
    release the ids. Best effort: what is left expires with the ids' TTL and gc deletes it."""
    ids = {p["id"] for p in prepared}
    try:
        for p in prepared:
            store.delete(p["key"])
        mf.commit(store, lambda m: m.release(ids), command="upload (roll back)")
    except Exception as exc:  # the original error is the one to report
        warnings.append(f"could not roll back the prepared objects {sorted(ids)} ({exc}); "
                        f"they expire within an hour and gc deletes them")


def upload_mark(entry) -> dict | None:
    """What the manifest remembers of a WAL's last uploaded record: enough to know it again."""
    from walctl.format.crc import crc32c

    if entry.batch is None:
        return None

    return {"offset": entry.offset, "stream_id": entry.batch.stream_id, "base_offset": entry.batch.base_offset,
            "body_crc": crc32c(entry.body)}


def _check_same_wal(mark: dict, found_mark: tuple[int, dict] | None, scan, wal_path: str, node_key: str) -> None:
    """Refuse unless this WAL still holds the record it last uploaded (or was trimmed past it).

    A re-initialised WAL (or another WAL with the same node id) reuses small offsets: without
    this check its new records would be skipped as "already uploaded", then trimmed.
    """
    offset = mark["offset"]
    if offset < scan.start_offset:
        return  # trimmed past the mark: everything left is newer than it
    found = scan.trim_entry if scan.trim_entry is not None and scan.trim_entry.offset == offset else None
    if found is not None:
        seen = upload_mark(found) if found.batch is not None else None
    else:
        seen = found_mark[1] if found_mark is not None else None
    if seen != mark:
        raise CorruptionError(
            f"this WAL does not hold the record that node {node_key} last uploaded (offset {offset}, stream "
            f"{mark['stream_id']}, stream offset {mark['base_offset']}): refusing to skip or trim anything",
            where=wal_path, offset=offset,
            hint="the WAL was re-initialised, or two WALs share a node id: give each WAL its own --node-id")


def _end(doc: mf.Manifest, stream_id: int) -> int | None:
    """The stream's end offset in the store, or None: the store has no such stream."""
    span = doc.stream(stream_id)
    return span.end if span is not None else None


def _run_before(run, end: int):
    """The leading records of ``run`` (a walctl.wal.ringread.Run) that start before ``end`` (at least one)."""
    from bisect import bisect_left

    from walctl.wal.reader import Run

    stop = max(1, bisect_left(run.column(0), end))
    return Run(run.chunk, run.rows, run.first, run.first + stop)


def _open_for_upload(wal_path: str):
    """The device, read-only and without the writer lock: a writer may start while upload reads
    (docs/CLI.md: only upload's trim takes the lock)."""
    from walctl.device import open_device

    return open_device(wal_path, writable=False)


def _log_moved(dev, wal_path: str, header) -> bool:
    """True when a writer holds the log now, or its header slots changed since ``header`` was read."""
    from walctl.device.locks import lock_holder
    from walctl.wal.lifecycle import read_wal_state

    return lock_holder(wal_path) is not None or read_wal_state(dev, wal_path).header != header


def _trim_after(wal_path: str, offset: int, warnings: list[str], timeout_s: float) -> int | None:
    """Trim to the last uploaded record: directly, or by the running writer through its hand-off
    socket (FORMATS.md 1.7), retrying up to ``timeout_s``; TrimPendingError when neither happened.
    A moved trim point (someone trimmed past it) only costs a warning (upload is idempotent)."""
    from walctl.wal.handoff import trim_or_hand_off
    from walctl.wal.lifecycle import trim_scanned

    try:
        # The upload's scan has just read the record at ``offset``: the trim checks its header only.
        how = trim_or_hand_off(wal_path, offset, timeout_s, trim_scanned)
        if how == "writer":
            warnings.append(f"{wal_path}: a writer is active; it took the trim to {offset}")
        return offset
    except UsageError as exc:
        warnings.append(f"{wal_path}: not trimmed ({exc.what}); the next upload skips what is already uploaded")
        return None
    except WalctlError:
        raise


DEFAULT_UPLOAD_AT = 512 << 20  # AutoMQ's default: upload once this much of the WAL is not yet uploaded
UPLOAD_POLL_S = 0.05  # how often the background uploader looks at the writer's acknowledged end


@dataclass
class BackgroundStats:
    uploads: int = 0
    records: int = 0
    objects: int = 0
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> dict:
        return {"uploads": self.uploads, "records": self.records, "objects": self.objects,
                "failures": self.failures, "last_error": self.last_error}


class BackgroundUploader:
    """Writer-side upload (AutoMQ's broker does the same): from inside the writer's process, each
    time ``upload_at`` bytes of acknowledged log lie past the trim point, upload them, commit, and
    trim through the writer itself. Appends and acknowledgements never wait for it.

    Crash safety is upload()'s: a kill at any moment leaves prepared ids (gc) or a commit whose
    records a rerun of ``walctl upload`` skips; the trim follows the commit.
    """

    def __init__(self, wal_path: str, store: Store, writer, upload_at: int, *, on_warning=None, **upload_options):
        import threading

        self.wal_path = wal_path
        self.store = store
        self.writer = writer
        self.upload_at = upload_at
        self.options = upload_options
        self.on_warning = on_warning
        self.stats = BackgroundStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="walctl-uploader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Let a running upload finish (its commit and trim), then stop."""
        self._stop.set()
        self._thread.join()

    def pending_bytes(self) -> int:
        return self.writer.acked_end - max(self.writer.header.trim_offset, 0)

    def _loop(self) -> None:
        while not self._stop.wait(UPLOAD_POLL_S):
            if self.pending_bytes() < self.upload_at:
                continue
            try:
                self.upload_once()
            except UploadBusy:  # a 'walctl upload' of this WAL is running: it uploads (and trims) for us
                continue
            except Exception as exc:  # the writer goes on; the next round (or walctl upload) retries
                self.stats.failures += 1
                self.stats.last_error = str(exc)
                if self.on_warning is not None:
                    self.on_warning(f"{self.wal_path}: background upload failed ({exc}); retrying later")
                self._stop.wait(1.0)

    def upload_once(self) -> UploadResult:
        # Each upload takes at most upload_at bytes: one object per upload_at, as documented, and a
        # writer held back by a full ring gets room back after one upload, not after the whole log.
        result = upload(self.wal_path, self.store, trim=False, max_bytes=self.upload_at, lease_wait_s=0.0,
                        **self.options)
        self.stats.uploads += 1
        self.stats.records += result.records
        self.stats.objects += len(result.objects)
        if result.last_offset is not None and result.last_offset > self.writer.header.trim_offset:
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    self.writer.trim_to(result.last_offset, uploaded=True)
                    break
                except UsageError:
                    # durable (upload read it) but its acknowledgement is a moment behind
                    if time.monotonic() > deadline or result.last_offset < self.writer.header.trim_offset:
                        raise
                    time.sleep(0.01)
            result.trimmed_to = result.last_offset
        return result
