"""AutoMQ's block WAL, read for forensics (never written): its recovery rules as a policy
over the same step decoder as walctl's logs (walctl.wal.decoder, with AutoMQ's record rules).

What AutoMQ's s3stream (BlockWALService, SlidingWindowService, RecordHeader, WALUtil)
does, and walctl follows here:
- record headers are walctl's 24-byte layout; headerCrc and bodyCrc are java.util.zip.CRC32
  masked to 31 bits (WALUtil.crc32); a header is checked in the order magic, headerCrc,
  bodyLength > 0 (a Java int), bodyOffset == offset + 24;
- blocks start 4 KiB aligned and are padded with whatever the write buffer held, so an
  invalid header inside a block is the padding, never a finding;
- every start trims to "first free block - 1", so a trimOffset just below a 4 KiB boundary
  names no record; the record at trimOffset is skipped, damaged or not;
- V0 (0x12345678): no padding records; a block that does not fit before the end of the lap
  starts at the next lap, leaving the lap's tail unwritten. Recovery keeps reading until one
  slidingWindowMaxLength past the first invalid 4 KiB block, and a little longer (up to
  min(window, 4 MiB) past the last valid record); a valid record in a later lap than the first
  invalid block clears it;
- V1 (0x01234567): the lap's tail is a padding record (magic 0x76543210), which recovery
  follows by its length alone; recovery keeps only the continuous log: it stops at the first
  invalid 4 KiB block (a bad record inside a block only skips to the next block).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from walctl.format import record as rec
from walctl.format.header import WalHeader
from walctl.wal.decoder import AUTOMQ_INT_MAX, Decoder, Record, Skip, SkipKind
from walctl.wal.findings import (BAD_BATCH, BAD_PADDING, BEYOND_WINDOW, DISCARDED, HOLE, TORN_TAIL, TRIM_RECORD,
                                 Finding)
from walctl.wal.native_scan import _Gap
from walctl.wal.ringread import Entry, LogReader, ScanResult, accepted, align_up, batch_of, note_trimmed, probe

if TYPE_CHECKING:
    from walctl.device.base import Device

AUTOMQ_EXTRA_SCAN_BYTES = 4 << 20  # AutoMQ V0 reads up to min(window, 4 MiB) past its last valid record
V1_STOP = "the first invalid block (AutoMQ V1 recovers only the continuous log)"


def padding_length(raw, o: int, ring) -> int | None:
    """AutoMQ V1 follows a padding record by its magic and length alone: the length it would
    follow (when that stays inside the lap), or None."""
    if len(raw) < rec.SIZE:
        return None
    magic, length, _, _, _ = rec.STRUCT.unpack_from(raw)
    if magic != rec.PADDING_MAGIC or length > AUTOMQ_INT_MAX:
        return None
    end = o + rec.SIZE + length
    return length if end <= ring.lap_end(o) else None


class AutomqScan:
    """scan() for AutoMQ's V0 and V1 logs: the records AutoMQ's recovery returns, and findings."""

    def __init__(self, dev: Device, header: WalHeader, res: ScanResult, *, probe: bool, keep_offsets: bool):
        ring = res.ring
        self.header, self.res, self.ring = header, res, ring
        self.bs = ring.block_size  # AutoMQ's WALUtil.BLOCK_SIZE: its alignment (FORMATS.md 6)
        self.reader = LogReader(dev, ring)
        self.v1 = header.flavour == "automq-v1"
        self.decoder = Decoder(self.reader, automq=True, v1=self.v1)
        self.trim = header.trim_offset
        self.start = max(self.trim, 0)
        self.limit = self.start + ring.size
        self.window = header.sliding_window_max_length
        self.explained = not header.clean
        # AutoMQ trims to "first free block - 1" at every start: that offset names no record.
        self.trim_is_a_record = self.trim >= 0 and (self.trim + 1) % self.bs != 0
        self.probe_after, self.keep_offsets = probe, keep_offsets
        self.o = self.start
        self.first_bad: int | None = None  # V0's maybeFirstInvalidOffset
        self.first_bad_lap = -1
        self.last_valid: int | None = None
        self.stop_at: int | None = None  # V1: the first invalid block, where its recovery stops
        self.stop_reason = ""
        self.stop_cause = None
        self.beyond_seen = False
        self.gap: _Gap | None = None
        self.stopped = False
        res.start_offset = res.end_offset = self.start

    def _found(self, kind, at: int, reason: str, end: int | None = None, skip: Skip | None = None,
               explained: bool = False, cause=None) -> Finding:
        finding = Finding(kind, at, self.ring, reason, end, skip.expected_crc if skip else None,
                          skip.found_crc if skip else None, explained=explained,
                          bytes_cause=cause if cause is not None else (skip.cause if skip else None))
        self.res.findings.append(finding)
        return finding

    def events(self, seek: int | None = None, bulk: bool = False) -> Iterator[Entry | Finding]:
        # ``bulk`` (Run events) is walctl's own logs' fast path: AutoMQ's come one Entry at a time.
        del seek  # AutoMQ's logs are read from their trim point
        while self.o < self.limit:
            if self._v0_window_passed():
                self.res.stopped_by = "one sliding window past the first invalid block (AutoMQ V0 recovery)"
                break
            found = self.decoder.step(self.o)
            if isinstance(found, Record):
                yield from self._record(found)
            elif found.kind is SkipKind.HEADER:
                yield from self._bad_header(found)
            else:
                yield from self._bad_body(found)
            if self.stopped:
                self.res.stopped_by = V1_STOP
                break
        else:
            self.res.stopped_by = "one ring past the trim point"
        yield from self._finish()
        self.res.bytes_read = self.reader.bytes_read

    def _v0_window_passed(self) -> bool:
        if self.v1 or self.first_bad is None or self.o < self.first_bad + self.window:
            return False
        return self.last_valid is None or self.o >= self.last_valid + min(self.window, AUTOMQ_EXTRA_SCAN_BYTES)

    def _close_gap(self, at: int) -> Iterator[Finding]:
        if self.gap is not None:
            gap, self.gap = self.gap, None
            yield self._found(HOLE, gap.start, gap.reason, at, explained=self.explained, cause=gap.cause,
                              skip=Skip(SkipKind.HEADER, gap.start, gap.cause, gap.reason, gap.expected_crc,
                                        gap.found_crc))

    def _v1_stop(self, skip: Skip, reason: str) -> None:
        self.stop_at, self.stop_reason, self.stop_cause = skip.offset, reason, skip.cause
        self.stopped = True

    def _bad_header(self, skip: Skip) -> Iterator[Finding]:
        o, bs = skip.offset, self.bs
        length = padding_length(self.reader.read(o, rec.SIZE), o, self.ring) if self.v1 else None
        if length is not None:
            # AutoMQ follows a padding record without checking it; so does walctl, saying so.
            yield from self._close_gap(o)
            yield self._found(BAD_PADDING, o, f"padding record followed as AutoMQ V1 does, though its header "
                                              f"fails a check: {skip.reason}", o + rec.SIZE + length, skip)
            self.o = self.res.end_offset = o + rec.SIZE + length
            return
        aligned = o % bs == 0
        if o == self.trim:
            if self.v1 and aligned:
                # V1 stops at an invalid 4 KiB boundary even where it would skip the record.
                yield self._found(TRIM_RECORD, o, f"{skip.reason}; AutoMQ V1 recovery stops here", None, skip)
            else:
                if self.trim_is_a_record:
                    yield self._found(TRIM_RECORD, o, skip.reason, None, skip, explained=True)
                self.o = align_up(o + 1, bs)
                return
        if not aligned:
            self.o = align_up(o, bs)  # the stale bytes after a block's last record
            return
        if self.v1:
            self._v1_stop(skip, skip.reason)
            return
        self._first_bad(o)
        if self.gap is None:
            self.gap = _Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc)
        self.o = o + bs

    def _bad_body(self, skip: Skip) -> Iterator[Finding]:
        o, bs = skip.offset, self.bs
        aligned = o % bs == 0
        if o == self.trim and self.v1 and aligned:
            yield self._found(TRIM_RECORD, o, f"{skip.reason}; AutoMQ V1 recovery stops here", None, skip)
            self._v1_stop(skip, skip.reason)
            return
        if o == self.trim:
            if self.trim_is_a_record:
                yield self._found(TRIM_RECORD, o, skip.reason, None, skip, explained=True)
            self.o = align_up(skip.end, bs)
            return
        if self.gap is None:
            self.gap = _Gap(o, skip.reason, skip.cause, skip.expected_crc, skip.found_crc, torn=True)
        if aligned and self.v1:
            self._v1_stop(skip, skip.reason)
            return
        if aligned:
            self._first_bad(o)
        self.o = align_up(skip.end, bs)

    def _first_bad(self, o: int) -> None:
        if self.first_bad is None:
            self.first_bad, self.first_bad_lap = o, self.ring.lap(o)

    def _record(self, record: Record) -> Iterator[Entry | Finding]:
        o, ring, gap = record.offset, self.ring, self.gap
        if record.padding:
            yield from self._close_gap(o)
            self.o = self.res.end_offset = record.end
            return
        if gap is not None:
            # V0 leaves a lap's tail unwritten when the next block does not fit: no hole.
            lap_tail = (not self.v1 and not gap.torn and o % ring.size == 0
                        and ring.lap(gap.start) == ring.lap(o) - 1)
            if lap_tail:
                self.gap = None
            yield from self._close_gap(o)
        if self.first_bad is not None and ring.lap(o) != self.first_bad_lap:
            self.first_bad = None  # AutoMQ V0: a valid record in a later lap clears the first invalid block
        if self.first_bad is not None and o >= self.first_bad + self.window and not self.beyond_seen:
            self.beyond_seen = True
            yield self._found(BEYOND_WINDOW, o, "a valid record beyond the sliding window after the first invalid "
                                                "block: mid-log damage; AutoMQ V0 still returns it (it logs "
                                                "'[BUG] record offset out of window')")
        self.last_valid = o
        self.o = self.res.end_offset = record.end
        batch, error = batch_of(record.body)
        if o == self.trim:
            note_trimmed(self.res, o, record.body, batch)
            return
        if error is not None:
            yield self._found(BAD_BATCH, o, f"body is not a StreamRecordBatch: {error}", record.end)
        yield accepted(self.res, o, record.body, batch, self.keep_offsets)

    def _finish(self) -> Iterator[Finding]:
        gap = self.gap
        if gap is not None and gap.torn:
            yield self._found(TORN_TAIL, gap.start, gap.reason, align_up(gap.start + 1, self.bs),
                              explained=self.explained, cause=gap.cause,
                              skip=Skip(SkipKind.BODY, gap.start, gap.cause, gap.reason, gap.expected_crc,
                                        gap.found_crc))
        if not self.probe_after:
            return
        if self.stop_at is not None:
            yield from self._discarded()
        elif not self.header.clean and self.first_bad is not None and self.o < self.limit:
            hit = probe(self.reader, self.o, self.limit, automq=True)
            if hit is not None:
                yield self._found(BEYOND_WINDOW, hit, "a valid record lies beyond the sliding window after the "
                                                      "first invalid block: the damage is mid-log, not a crash "
                                                      "tail; AutoMQ V0 does not read that far (not shown)")

    def _discarded(self) -> Iterator[Finding]:
        """V1 drops whatever follows the first invalid block; say what that was."""
        stop_at, bs = self.stop_at, self.bs
        hit = probe(self.reader, stop_at + bs, min(self.limit, stop_at + self.window), automq=True)
        if hit is not None:
            yield self._found(DISCARDED, stop_at, f"{self.stop_reason}; valid blocks follow at "
                                                  f"offset {hit}: AutoMQ V1 recovers only the continuous log and "
                                                  f"discards them (not shown)", hit, explained=self.explained,
                              cause=self.stop_cause)
        elif not self.header.clean:
            hit = probe(self.reader, stop_at + self.window, self.limit, automq=True)
            if hit is not None:
                yield self._found(BEYOND_WINDOW, hit, "a valid record lies beyond the sliding window after the "
                                                      "first invalid block: the damage is mid-log, not a crash "
                                                      "tail")
