"""The recovery policy for walctl's own logs (FORMATS.md 1.4), over the step decoder.

The policy tells apart three things the bytes after a record can be:
- the end of the log (an invalid header at a 4 KiB boundary with nothing valid after it);
- crash damage inside the last sliding window (holes from concurrent blocks, a torn
  tail), which a writer that did not close cleanly explains;
- corruption: damage in a log closed cleanly, or valid records found beyond the
  window after a hole (a crash cannot put them there: blocks are only written
  inside the window), or a log that ends before the clean header's nextOffset.

A reader that knows the log's durable points (``ScanResult.durable``: recover, status) also
judges by them: damage below the durable end is corruption of acknowledged data whatever the
header says, and the scan reads past it (resynchronising at the next valid record header,
which names its own offset) to the log's end; past the durable end AutoMQ's window rule
decides, as it does where a writer resumes (a writer's scan knows no durable points).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from walctl.errors import FormatError
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as _BATCH_HEADER
from walctl.format.batch import StreamRecordBatch
from walctl.format.bulk import KIND_BATCH, KIND_PADDING, ROW as _ROW, TRUNCATED_BODY, TRUNCATED_HEADER, rows_summary
from walctl.format.header import ALIGN, WalHeader
from walctl.wal.decoder import Decoder, Record, Skip, SkipKind
from walctl.wal.findings import (BAD_BATCH, BEYOND_WINDOW, CLEAN_RULE, END_MISMATCH, HOLE, TORN_TAIL, TRIM_RECORD,
                                 WINDOW_RULE, Cause, Finding)
from walctl.wal.gaps import CrashHole
from walctl.wal.ringread import (BULK_RECORDS, Entry, Intact, LogReader, Run, ScanResult, account_run, accepted, align_down,
                                 align_up, all_zero, batch_of, note_trimmed, probe)

if TYPE_CHECKING:
    from walctl.device.base import Device


class _Gap:
    """A skipped range still open: where it began and what the first bytes were. (A plain
    class: a dataclass costs a command's start-up ~0.5 ms, and a clean log never opens one.)"""

    __slots__ = ("start", "reason", "cause", "expected_crc", "found_crc", "torn")

    def __init__(self, start: int, reason: str, cause: Cause, expected_crc: int | None = None,
                 found_crc: int | None = None, torn: bool = False):
        self.start, self.reason, self.cause = start, reason, cause
        self.expected_crc, self.found_crc = expected_crc, found_crc
        self.torn = torn  # began with a valid header and a bad body (or damage inside a block)

    def __repr__(self) -> str:
        return (f"_Gap(start={self.start!r}, reason={self.reason!r}, cause={self.cause!r}, expected_crc="
                f"{self.expected_crc!r}, found_crc={self.found_crc!r}, torn={self.torn!r})")


class NativeScan:
    """One scan of a walctl log: ``events()`` yields its records and findings in log order and
    fills ``res`` as it goes."""

    def __init__(self, dev: Device, header: WalHeader, res: ScanResult, *, probe: bool, keep_offsets: bool,
                 readahead: bool = False):
        ring = res.ring
        self.header, self.res, self.ring = header, res, ring
        self.reader = LogReader(dev, ring, res)
        self.readahead = readahead
        self.decoder = Decoder(self.reader)
        self.trim = header.trim_offset
        self.start = max(self.trim, 0)
        self.limit = self.start + ring.size  # no block ends further than this from the trim point
        self.window = header.sliding_window_max_length
        # A clean header promises the log reaches nextOffset: look at least that far.
        self.must_reach = header.next_offset if header.clean else 0
        if self.must_reach:
            self.reader.stop = self.must_reach
        self.probe_after = probe
        self.keep_offsets = keep_offsets
        self.o = self.start
        self.first_bad: int | None = None
        self.gap: _Gap | None = None
        self.reader.bound = self.limit
        self.durable = res.durable  # None: a writer's scan (AutoMQ's window rule alone)
        self.known_record = -1  # a valid record the probe found past the window (reading past damage goes to it)
        res.start_offset = res.end_offset = self.start

    def events(self, seek: int | None = None, bulk: bool = False) -> Iterator[Entry | Run | Finding]:
        """The scan's records and findings in log order. ``bulk``: runs of intact records come
        as Run events (counted in the report already) instead of one Entry each."""
        try:
            yield from self._events(seek, bulk)
        finally:
            self.reader.close()  # read-ahead's reads in flight end (and count) before the scan does
        self.res.bytes_read = self.reader.bytes_read

    def _events(self, seek: int | None, bulk: bool) -> Iterator[Entry | Run | Finding]:
        res = self.res
        if seek is not None and seek > self.start:
            self.o = res.end_offset = self._seek(seek)
        res.read_from_offset = self.o
        if self.readahead:
            # From here on the scan goes forward (a seek's walk does not); one that reads the whole
            # log (bulk: no filter stops it early) reads ahead from its first read on.
            self.reader.read_ahead(forward=bulk)
        step = self.decoder.step
        while self.o < self.limit:
            if self.first_bad is not None and self._must_stop():
                break
            # Fast path: the records of the cached chunk decoded in one call; one at a time once
            # damage was seen (the window rule looks at every record then). The trim record
            # (deleted, and no block's padding before it) goes through the step decoder.
            if self.first_bad is not None or self.o != self.trim:
                found = self.reader.intact_run(self.o, 1 if self.first_bad is not None else BULK_RECORDS)
                if found:
                    yield from self._chunk_records(found, bulk)
                    continue
                if isinstance(found, Intact) and found.stop.pos > found.rel:
                    self._after(found)  # no record, but zero padding skipped
                    continue
            yield from self._step(step(self.o))
        else:
            res.stopped_by = "one ring past the trim point"
        yield from self._finish()

    def _step(self, found: Record | Skip) -> Iterator[Entry | Finding]:
        if isinstance(found, Skip):
            self._skip(found)
        else:
            yield from self._record(found)

    def _chunk_records(self, found: Intact, bulk: bool) -> Iterator[Entry | Run | Finding]:
        """The records LogReader.intact_run decoded from ``self.o`` on, in order: runs of live
        batches in bulk, padding records, bodies that are no batch and the trim record as the
        step path handles them; then what its stop says (``_after``)."""
        reader, chunk, rows, n = self.reader, found.chunk, found.rows, found.count
        trim, keep_offsets = self.trim, self.keep_offsets
        summary = rows_summary(rows, 0, n)
        unusual = _unusual_rows(rows, n, trim, summary[0])
        if not unusual:  # (the common case: every row a live batch, and its summary is the Run's)
            yield from self._batches(chunk, rows, 0, n, bulk, keep_offsets, summary)
            self._after(found)
            return
        first = 0
        for i in unusual:
            at = i * _ROW
            offset, kind = rows[at], rows[at + 3]
            if i > first:
                yield from self._batches(chunk, rows, first, i, bulk, keep_offsets)
            length = rows[at + 2]
            if kind == KIND_PADDING:
                yield from self._record(Record(offset, offset + _REC_SIZE + length, b"", padding=True))
            else:
                if self.gap is not None:
                    yield self._close_gap(offset)
                pos = rows[at + 1]
                yield from self._data(offset, offset + _REC_SIZE + length, bytes(memoryview(chunk)[pos:pos + length]))
            first = i + 1
            if reader.position() != found.where:
                return  # that record's handling read elsewhere: the chunk holds other bytes now
        if n > first:
            yield from self._batches(chunk, rows, first, n, bulk, keep_offsets)
        self._after(found)

    def _after(self, found: Intact) -> None:
        """Where the scan goes on after intact_run's rows: where its decode stopped (past any
        zero padding it skipped; end_offset stays put). A record across the chunk's end is read
        again from its start; damage or the end of the log is the step decoder's to name."""
        stop = found.stop
        if stop.reason in (TRUNCATED_HEADER, TRUNCATED_BODY) and stop.pos > found.rel:
            self.reader.want = _REC_SIZE + (stop.expected if stop.reason == TRUNCATED_BODY else 0)
        self.o = stop.offset

    def _batches(self, chunk, rows, first: int, stop: int, bulk: bool, keep_offsets: bool,
                 summary: tuple | None = None) -> Iterator[Entry | Run]:
        """Live records whose bodies are batches: one Run (``bulk``), else an Entry each."""
        res = self.res
        if self.gap is not None:
            yield self._close_gap(rows[first * _ROW])
        if bulk:
            run = Run(chunk, rows, first, stop, summary)
            account_run(res, run, keep_offsets)
            self.o = res.end_offset = run.end
            yield run
            return
        view = memoryview(chunk)
        for at in range(first * _ROW, stop * _ROW, _ROW):
            offset, pos, length, _, sid, epoch, base, count = rows[at:at + _ROW]
            body = bytes(view[pos:pos + length])
            self.o = res.end_offset = offset + _REC_SIZE + length
            yield accepted(res, offset, body, StreamRecordBatch(sid, epoch, base, count, body[_BATCH_HEADER:]),
                           keep_offsets)

    def _must_stop(self) -> bool:
        """After damage: stop one sliding window past it, or where a clean header says the log ends."""
        if self.o >= self.first_bad + self.window and self.o >= self.must_reach:
            self.res.stopped_by = "one sliding window past the first invalid block"
            return True
        # A clean log ends where its header says: the writer drained every block before it
        # wrote nextOffset, so no block of its lies beyond (no window to look through).
        gap = self.gap
        return bool(self.must_reach and self.first_bad >= self.must_reach and gap is not None and not gap.torn)

    def _close_gap(self, at: int) -> Finding:
        gap, self.gap = self.gap, None
        kind = TRIM_RECORD if gap.start == self.trim else HOLE
        explained, rule = self._verdict(gap.start)
        finding = Finding(kind, gap.start, self.ring, gap.reason, at, gap.expected_crc, gap.found_crc,
                          explained=explained and kind == HOLE, bytes_cause=gap.cause,
                          rule=rule if kind == HOLE else None)
        self.res.findings.append(finding)
        return finding

    def _data(self, offset: int, end: int, body: bytes) -> Iterator[Entry | Finding]:
        self.o = self.res.end_offset = end
        batch, error = batch_of(body)
        yield from self._unusual(offset, body, batch, error)

    def _unusual(self, offset: int, body: bytes, batch, error: FormatError | None) -> Iterator[Entry | Finding]:
        """A data record that is the (deleted) trim record, or whose body is no batch (or both)."""
        res = self.res
        if offset == self.trim:
            note_trimmed(res, offset, body, batch)  # deleted: only its ends still count
            return
        if error is not None:
            finding = Finding(BAD_BATCH, offset, self.ring, f"body is not a StreamRecordBatch: {error}", self.o)
            res.findings.append(finding)
            yield finding
        yield accepted(res, offset, body, batch, self.keep_offsets)

    def _record(self, record: Record) -> Iterator[Entry | Finding]:
        if self.gap is not None:
            yield self._close_gap(record.offset)
        if record.padding:
            hole = _note_seal(self.res, self.reader, record)
            if hole is not None and self.durable is not None:
                self.durable.add(hole.end, "the end of the sealed crash hole", f" (sealed at {hole.start:,})")
            self.o = self.res.end_offset = record.end
            return
        yield from self._data(record.offset, record.end, record.body)

    def _skip(self, skip: Skip) -> None:
        o = skip.offset
        if skip.kind is not SkipKind.BODY and o % ALIGN and o != self.trim:
            boundary = align_up(o)
            if all_zero(self.reader.read(o, boundary - o)):
                self.o = boundary  # the zero padding after a block's last record: normal, not a finding
                return
        if self.durable is not None and self._below_durable_end(o):
            self._read_past(skip)
            return
        if skip.kind is SkipKind.BODY:
            self._damage(o)
            self.res.torn_offsets.append(o)
            self._open_gap(_Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc, torn=True))
            self.o = align_up(skip.end)
            return
        if o % ALIGN and o != self.trim:
            boundary = align_up(o)
            # Bytes where a block's zero padding or its next record should be: the block
            # is torn (a crash) or damaged (corruption); records after this point are lost.
            self._damage(o)
            self._open_gap(_Gap(o, f"damaged record header inside a block ({skip.reason})", skip.cause, torn=True))
            self.res.unaligned_damage.append(o)
            self.o = boundary
            return
        self._damage(o)
        self._open_gap(_Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc))
        self.o = align_up(o + 1)

    def _verdict(self, offset: int) -> tuple[bool, str]:
        """(a crash explains damage starting at ``offset``, the rule that says so): below the
        durable end never; past it, in a log whose writer did not close cleanly, the window
        rule (AutoMQ's) does."""
        below = self.durable.rule_below(offset) if self.durable is not None else None
        if below is not None:
            return False, below
        if self.header.clean:
            return False, CLEAN_RULE
        end = self.durable.end if self.durable is not None else 0
        return True, (f"past the durable end {end:,}, " if end > self.start else "") + WINDOW_RULE

    def _below_durable_end(self, o: int) -> bool:
        """Damage at ``o`` lies below the durable end (a reader's scan). At the first damage past
        it in a crashed log, the probe looks one sliding window on first: a valid record there
        proves the bytes a window before it were durable (a block is only written inside the
        window), which raises the durable end past ``o``."""
        durable = self.durable
        if o < durable.end:
            return True
        if self.first_bad is None and self.probe_after and not self.header.clean and o + self.window < self.limit:
            hit = self._probe_aside(o + self.window)
            if hit is not None:
                self.known_record = hit
                durable.add(hit + _REC_SIZE - self.window, "the durable end",
                            f" (a valid record at {hit:,} lies one sliding window of {self.window:,} bytes past "
                            f"it: a block is only written inside the window)")
                return o < durable.end
        return False

    def _probe_aside(self, start: int) -> int | None:
        """``probe`` from ``start`` through a reader of its own: the scan's chunk and the reads it
        has ahead stay as they are (it goes on from the damage, before ``start``); its bytes count."""
        side = LogReader(self.reader.dev, self.ring, readahead=True)
        side.bound = self.limit
        try:
            return probe(side, start, self.limit)
        finally:
            side.close()
            self.reader.bytes_read += side.bytes_read
            self.res.bytes_read = self.reader.bytes_read

    def _read_past(self, skip: Skip) -> None:
        """Damage below the durable end: one gap from ``skip`` to the next valid record header (any
        offset: it names its own, so a stale lap never passes), found up to the durable end (or the
        record the probe found); reading goes on there. With none, the gap stays open past it and
        the window rule (or the clean header's end) says where the log ends."""
        o = skip.offset
        if skip.kind is SkipKind.BODY:
            self.res.torn_offsets.append(o)
            gap = _Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc, torn=True)
        elif o % ALIGN and o != self.trim:
            self.res.unaligned_damage.append(o)
            gap = _Gap(o, f"damaged record header inside a block ({skip.reason})", skip.cause, torn=True)
        else:
            gap = _Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc)
        self._open_gap(gap)
        bound = min(self.limit, max(align_up(self.durable.end), self.known_record + 1))
        found = resync(self.reader, o + 1, bound)
        self.o = found if found is not None else max(bound, align_up(o + 1))

    def _damage(self, offset: int) -> None:
        if self.first_bad is None:
            self.first_bad = offset

    def _open_gap(self, gap: _Gap) -> None:
        if self.gap is None:
            self.gap = gap

    def _finish(self) -> Iterator[Finding]:
        res, gap, ring, header = self.res, self.gap, self.ring, self.header
        found: list[Finding] = []
        if gap is not None and gap.start == self.trim:
            found.append(Finding(TRIM_RECORD, gap.start, ring, gap.reason, None, gap.expected_crc, gap.found_crc,
                                 bytes_cause=gap.cause))
        elif gap is not None and gap.torn:
            explained, rule = self._verdict(gap.start)
            found.append(Finding(TORN_TAIL, gap.start, ring, gap.reason, align_up(gap.start + 1),
                                 gap.expected_crc, gap.found_crc, explained=explained, bytes_cause=gap.cause,
                                 rule=rule))
        # else: an invalid header at a block boundary with nothing valid after it: the end of the log.
        if self.must_reach and res.next_block_offset != header.next_offset:
            found.append(Finding(END_MISMATCH, res.end_offset, ring,
                                 f"the log ends at {res.end_offset} but the clean header says the next block "
                                 f"starts at {header.next_offset}", header.next_offset))
        lost = self._lost_tail()
        if lost is not None:
            found.append(lost)
        # A clean log has nextOffset to check its end against; only a crashed one needs the probe
        # (a reader's scan probed at its first damage past the durable end, and read on).
        if self.probe_after and self.durable is None and not header.clean and self.first_bad is not None \
                and self.o < self.limit:
            hit = probe(self.reader, self.o, self.limit)
            if hit is not None:
                res.complete = False  # the live log goes on past where the scan stopped
                found.append(Finding(BEYOND_WINDOW, hit, ring,
                                     "a valid record lies beyond the sliding window after the first damage: "
                                     "the damage is mid-log, not a crash tail; records after it are not shown"))
        for finding in found:
            res.findings.append(finding)
            yield finding

    def _lost_tail(self) -> Finding | None:
        """A crashed log that ends before its durable end: its acknowledged tail is lost (a clean
        log's is END_MISMATCH against its nextOffset, above). A reader's scan only."""
        if self.durable is None or self.header.clean:
            return None
        end, durable_end = self.res.end_offset, self.durable.end
        if end >= durable_end or durable_end <= self.start:
            return None
        return Finding(END_MISMATCH, end, self.ring, f"the log ends at {end} but {self.durable.describe()} is "
                                                     f"durable: acknowledged records are lost",
                       durable_end, rule=self.durable.rule_below(end))

    def _seek(self, seek: int) -> int:
        """Where reading starts for ``seek`` (recover --from): the first record at or after ``seek``.

        Found by following the record headers from the block holding ``seek`` (the last 4 KiB
        boundary at or before it with a valid record header naming its offset, at most 1.375 MiB
        back): ``seek`` itself when a record starts there, else the next record boundary after
        it (a record that starts before ``seek`` is not asked for; one after it in that block
        is not skipped). When that chain breaks first (damage): the first block at or after
        ``seek``, probed up to the end a clean header promises (else one ring past the trim
        point).
        """
        end = self.must_reach or self.limit
        if seek >= end:
            return end
        block = _block_at_or_before(self.reader, seek, self.start)
        if block is not None:
            at = _first_record_at_or_after(self.decoder, block, seek, end)
            if at is not None:
                return at
        found = probe(self.reader, seek, end)
        return end if found is None else found


def _unusual_rows(rows: memoryview, n: int, trim: int, all_batch: bool) -> list[int]:
    """Indexes of the rows that are not a live batch (padding, a body that is no batch, the
    trim record), in order: found in bulk, not by a Python step per row (``all_batch``: every
    row's kind is KIND_BATCH, walctl.format.bulk.rows_summary says)."""
    found = [] if all_batch else [i for i, kind in enumerate(rows[3:n * _ROW:_ROW].tolist()) if kind != KIND_BATCH]
    if rows[0] <= trim <= rows[(n - 1) * _ROW]:
        offsets = rows[0:n * _ROW:_ROW].tolist()
        if trim in offsets:
            found = sorted(set(found) | {offsets.index(trim)})
    return found


def _first_record_at_or_after(decoder: Decoder, block: int, seek: int, end: int) -> int | None:
    """Follow the records from ``block`` (a record start) to the first that starts at or after
    ``seek``; None when the chain breaks first (damage, the block's zero padding)."""
    o = block
    while o < seek:
        try:
            o = decoder.header(o).end
        except FormatError:
            if o % ALIGN == 0:
                return None
            o = align_up(o)  # the block's zero padding: the next block starts at the boundary
    return o if o < end else None


def _note_seal(res: ScanResult, reader: LogReader, record: Record) -> CrashHole | None:
    """A padding record whose body starts with a valid seal descriptor is a sealed crash hole:
    keep its evidence (one per hole: a hole across a lap end has one padding record per lap)."""
    from walctl.format import seal as seal_format  # a log without padding records does not load it

    o = record.offset
    raw = reader.read(o + rec.SIZE, min(record.end - o - rec.SIZE, ALIGN - rec.SIZE))
    if len(raw) < seal_format.FIXED_SIZE or bytes(raw[:4]) != seal_format.MAGIC.to_bytes(4, "big"):
        return None  # a lap-end padding record (zero body), or one sealed by an older walctl
    try:
        descriptor = seal_format.SealDescriptor.decode(raw)
    except FormatError:
        return None  # damaged evidence is no evidence: the gap it explained becomes unexplained
    hole = CrashHole(descriptor.hole_start, descriptor.hole_end, descriptor, o)
    if not any(h.start == descriptor.hole_start for h in res.sealed_holes):
        res.sealed_holes.append(hole)
    return hole


_REC_SIZE = rec.SIZE
RESYNC_READ_BYTES = 1 << 20  # reading past damage looks for the next record header this many bytes at a time
# Where a record header can start: either magic, big-endian (found at C speed, then checked).
_MAGICS = re.compile(re.escape(rec.DATA_MAGIC.to_bytes(4, "big")) + b"|" + re.escape(rec.PADDING_MAGIC.to_bytes(4, "big")))


def resync(reader: LogReader, start: int, bound: int) -> int | None:
    """The first offset in [start, bound) where a valid record header (data or padding) starts that
    names that offset and ends inside its lap, or None. Any byte offset, not only 4 KiB boundaries:
    records follow each other inside a block, so the first intact one after damage inside a block
    is found too; one that names another offset (an earlier lap's) never passes."""
    ring = reader.ring
    o = start
    while o < bound:
        lap_end = ring.lap_end(o)
        n = min(RESYNC_READ_BYTES, min(bound, lap_end) - o)
        data = bytes(reader.read(o, n + _REC_SIZE - 1))  # (a header across the read's end is read whole)
        for match in _MAGICS.finditer(data, 0, min(len(data), n + 3)):
            pos = match.start()
            try:
                head = rec.RecordHeader.decode(data, pos, expected_offset=o + pos)
            except FormatError:
                continue
            if head.end <= lap_end:
                return o + pos
        o += n
    return None


SEEK_BACK_BYTES = 1 << 20  # a seek's last step looks this much further back for its block,
SEEK_BACK_FIRST_BYTES = 64 << 10  # its first this far, its second five times this (1.375 MiB in all)


def _block_at_or_before(reader: LogReader, offset: int, floor: int) -> int | None:
    """The last 4 KiB boundary at or before ``offset`` (not below ``floor``, at most 1.375 MiB
    back: 64 KiB, then 320 KiB, then 1 MiB more) holding a valid record header that names it."""
    top = align_down(offset)
    # Most blocks are small: look near first, then one block's span (the writer's soft limit), then 1 MiB more.
    for back in (SEEK_BACK_FIRST_BYTES, 5 * SEEK_BACK_FIRST_BYTES, SEEK_BACK_BYTES):
        lowest = max(floor, top - back)
        reader.read(lowest, top + rec.SIZE - lowest)  # one read of the range, then walk it back in memory
        o = top
        while o >= lowest:
            try:
                head = rec.RecordHeader.decode(reader.read(o, rec.SIZE), expected_offset=o)
                if head.end <= reader.ring.lap_end(o):
                    return o
            except FormatError:
                pass
            o -= ALIGN
        top = lowest - ALIGN
        if top < floor:
            break
    return None
