"""The recovery scan (FORMATS.md 1.4): records after the trim point, and every skipped range.

The scan tells apart three things the bytes after a record can be:
- the end of the log (an invalid header at a 4 KiB boundary with nothing valid after it);
- crash damage inside the last sliding window (holes from concurrent blocks, a torn
  tail), which a writer that did not close cleanly explains;
- corruption: damage in a log closed cleanly, or valid records found beyond the
  window after a hole (a crash cannot put them there: blocks are only written
  inside the window), or a log that ends before the clean header's nextOffset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from walctl.device.buffers import aligned_buffer
from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError, ZeroedError
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import ALIGN, WalHeader
from walctl.wal.layout import Ring, align_down, align_up

CHUNK_BYTES = 1 << 20  # read the device in 1 MiB aligned chunks: few syscalls, bounded memory

# Finding kinds. "explained" ones are what a crash leaves in the last window.
HOLE = "hole"  # skipped range followed by a valid record
TORN_TAIL = "torn_tail"  # a record with a valid header but a bad body, with nothing valid after it
TRIM_RECORD = "trim_record"  # the record at trimOffset is unreadable
BEYOND_WINDOW = "beyond_window"  # valid records past where the scan had to stop: mid-log damage
END_MISMATCH = "end_mismatch"  # a clean log whose end is not the header's nextOffset
BAD_BATCH = "bad_batch"  # a valid record whose body is not a StreamRecordBatch
BAD_HEADER_SLOT = "bad_header_slot"  # one header slot damaged, the other valid


@dataclass(frozen=True)
class Entry:
    """A valid data record: its WAL offset, body, and the batch the body holds (None if it does not)."""

    offset: int
    body: bytes
    batch: StreamRecordBatch | None

    @property
    def end(self) -> int:
        return self.offset + rec.SIZE + len(self.body)


@dataclass
class Finding:
    kind: str
    offset: int
    ring: Ring
    reason: str
    end_offset: int | None = None  # where the skipped range ends (the next valid record), if known
    expected_crc: int | None = None
    found_crc: int | None = None
    explained: bool = False  # a crash explains it (not corruption)
    physical_offset: int | None = None  # set for findings outside the ring (header slots)

    def to_json(self) -> dict:
        out = {"type": "finding", "kind": self.kind}
        if self.physical_offset is not None:
            out.update({"offset": None, "physical_offset": self.physical_offset, "lap": None,
                        "offset_mod_4096": None})
        else:
            out.update(self.ring.describe(self.offset))
        out.update({
            "end_offset": self.end_offset,
            "length_bytes": None if self.end_offset is None else self.end_offset - self.offset,
            "reason": self.reason,
            "expected_crc": self.expected_crc,
            "found_crc": self.found_crc,
            "explained_by_crash": self.explained,
        })
        return out


def _reason(exc: FormatError) -> str:
    if isinstance(exc, ZeroedError):
        return "zero fill"
    if isinstance(exc, BadMagicError):
        return "bad magic"
    if isinstance(exc, ChecksumError):
        return "header crc mismatch"
    if isinstance(exc, TruncatedError):
        return "truncated"
    if isinstance(exc, BoundsError) and "bodyOffset" in str(exc):
        return "stale record of an earlier lap or another offset"
    return str(exc)


class LogReader:
    """Reads logical ranges of the ring through an aligned chunk cache (O_DIRECT-friendly)."""

    def __init__(self, dev, ring: Ring):
        self.dev = dev
        self.ring = ring
        self._chunk_start = -1
        self._chunk = None
        self._chunk_len = 0
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> memoryview:
        """Bytes at logical [offset, offset+length); shorter when the range would cross the lap end."""
        length = max(0, min(length, self.ring.lap_end(offset) - offset))
        phys = self.ring.physical(offset)
        if not (self._chunk_start <= phys and phys + length <= self._chunk_start + self._chunk_len):
            start = align_down(phys)
            size = min(max(CHUNK_BYTES, align_up(phys + length) - start), self.ring.capacity - start)
            if self._chunk is None or len(self._chunk) < size:
                self._chunk = aligned_buffer(align_up(size))
            view = memoryview(self._chunk)[:size]
            self.dev.pread_into(start, view)
            self.bytes_read += size
            self._chunk_start, self._chunk_len = start, size
        rel = phys - self._chunk_start
        return memoryview(self._chunk)[rel:rel + length]


@dataclass
class ScanResult:
    """What a scan established; filled as the scan runs."""

    header: WalHeader
    ring: Ring
    start_offset: int = 0  # where the scan began (trim point, or 0)
    end_offset: int = 0  # end of the last valid record (or of the trimmed record)
    records: int = 0
    payload_bytes: int = 0
    findings: list[Finding] = field(default_factory=list)
    torn_offsets: list[int] = field(default_factory=list)  # valid headers with bad bodies (sealing wipes them)
    unaligned_damage: list[int] = field(default_factory=list)  # non-zero bytes where block padding should be
    stream_ends: dict[int, int] = field(default_factory=dict)  # stream id -> end offset of its last batch
    record_offsets: list[int] = field(default_factory=list)  # kept only when asked (trim needs them)
    trim_entry: Entry | None = None  # the (deleted) record at trimOffset, as read
    stopped_by: str = "end of log"
    complete: bool = True
    bytes_read: int = 0

    @property
    def corrupt(self) -> list[Finding]:
        return [f for f in self.findings if not f.explained]

    @property
    def next_block_offset(self) -> int:
        """Where a writer continuing this log puts its next block."""
        return align_up(self.end_offset)

    def to_json(self) -> dict:
        return {
            "type": "summary",
            "records": self.records,
            "payload_bytes": self.payload_bytes,
            "trim_offset": self.header.trim_offset,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "findings": len(self.findings),
            "corrupt_findings": len(self.corrupt),
            "shutdown_type": "graceful" if self.header.clean else "ungraceful",
            "stopped_by": self.stopped_by,
            "complete": self.complete,
            "bytes_read": self.bytes_read,
        }


@dataclass
class _Gap:
    start: int
    reason: str
    expected_crc: int | None = None
    found_crc: int | None = None
    torn: bool = False  # began with a valid header and a bad body


def scan(dev, header: WalHeader, *, probe: bool = True, keep_offsets: bool = False,
         result: ScanResult | None = None) -> Iterator[Entry | Finding]:
    """Yield every live record and finding in log order; ``result`` is filled as it goes.

    Args:
        probe: in a log whose writer did not close cleanly, after a stop forced by the
            sliding-window rule, look at every 4 KiB boundary up to one ring past the
            trim point for valid records; finding one proves mid-log damage (a crash
            never writes past the window). Costs a read of the rest of the ring.
        keep_offsets: remember every record offset in ``result.record_offsets``.
    """
    ring = Ring(header.capacity)
    res = result if result is not None else ScanResult(header, ring)
    res.header, res.ring = header, ring
    reader = LogReader(dev, ring)
    trim = header.trim_offset
    start = max(trim, 0)
    limit = start + ring.size  # the writer never lets a block end further than this from the trim point
    window = header.sliding_window_max_length
    # A clean header promises the log reaches nextOffset: look at least that far.
    must_reach = header.next_offset if header.clean and header.flavour == "walctl" else 0
    res.start_offset = res.end_offset = start
    explained = not header.clean
    # walctl pads blocks with zeros, so anything else after a block's last record is damage;
    # AutoMQ pads with stale buffer bytes, so there the check cannot apply.
    zero_padding = header.flavour == "walctl"

    o = start
    first_bad: int | None = None
    gap: _Gap | None = None

    def close_gap(at: int) -> Finding:
        kind = TRIM_RECORD if gap.start == trim else HOLE
        return Finding(kind, gap.start, ring, gap.reason, at, gap.expected_crc, gap.found_crc,
                       explained=explained and kind == HOLE)

    while o < limit:
        if first_bad is not None and o >= first_bad + window and o >= must_reach:
            res.stopped_by = "one sliding window past the first invalid block"
            break
        raw = reader.read(o, rec.SIZE)
        try:
            head = rec.RecordHeader.decode(raw, expected_offset=o)
            if head.end > ring.lap_end(o):
                raise BoundsError(f"record end {head.end} crosses the end of the lap at {ring.lap_end(o)}",
                                  offset=o + 4, found=head.end)
        except FormatError as exc:
            if o % ALIGN and o != trim:
                boundary = align_up(o)
                if not zero_padding or not any(reader.read(o, boundary - o)):
                    # The zero padding after a block's last record: normal, not a finding.
                    o = boundary
                    continue
                # Bytes where a block's zero padding or its next record should be: the block
                # is torn (a crash) or damaged (corruption); records after this point are lost.
                if first_bad is None:
                    first_bad = o
                if gap is None:
                    gap = _Gap(o, f"damaged record header inside a block ({_reason(exc)})", torn=True)
                res.unaligned_damage.append(o)
                o = boundary
                continue
            if first_bad is None:
                first_bad = o
            if gap is None:
                gap = _Gap(o, _reason(exc), getattr(exc, "expected", None) if isinstance(exc, ChecksumError) else None,
                           getattr(exc, "found", None) if isinstance(exc, ChecksumError) else None)
            o = align_up(o + 1)
            continue
        if head.is_padding:
            if gap is not None:
                finding = close_gap(o)
                res.findings.append(finding)
                yield finding
                gap = None
            o = res.end_offset = head.end
            continue
        body = reader.read(o + rec.SIZE, head.body_length)
        try:
            head.check_body(body, o + rec.SIZE)
        except FormatError as exc:
            if first_bad is None:
                first_bad = o
            res.torn_offsets.append(o)
            if gap is None:
                gap = _Gap(o, "body crc mismatch" if isinstance(exc, ChecksumError) else _reason(exc),
                           getattr(exc, "expected", None), getattr(exc, "found", None), torn=True)
            o = align_up(head.end)
            continue
        if gap is not None:
            finding = close_gap(o)
            res.findings.append(finding)
            yield finding
            gap = None
        body_bytes = bytes(body)
        o = res.end_offset = head.end
        if head.offset == trim:
            # The trimmed record itself is deleted; its end and its stream's end still count.
            try:
                done = StreamRecordBatch.decode(body_bytes, exact=True)
                res.stream_ends[done.stream_id] = done.end_offset
            except FormatError:
                done = None
            res.trim_entry = Entry(head.offset, body_bytes, done)
            continue
        try:
            batch = StreamRecordBatch.decode(body_bytes, exact=True)
        except FormatError as exc:
            batch = None
            finding = Finding(BAD_BATCH, head.offset, ring, f"body is not a StreamRecordBatch: {exc}", head.end)
            res.findings.append(finding)
            yield finding
        res.records += 1
        res.payload_bytes += len(batch.payload) if batch else len(body_bytes)
        if batch is not None:
            res.stream_ends[batch.stream_id] = batch.end_offset
        if keep_offsets:
            res.record_offsets.append(head.offset)
        yield Entry(head.offset, body_bytes, batch)
    else:
        res.stopped_by = "one ring past the trim point"

    if gap is not None:
        if gap.start == trim:
            finding = Finding(TRIM_RECORD, gap.start, ring, gap.reason, None, gap.expected_crc, gap.found_crc)
            res.findings.append(finding)
            yield finding
        elif gap.torn:
            finding = Finding(TORN_TAIL, gap.start, ring, gap.reason, align_up(gap.start + 1),
                              gap.expected_crc, gap.found_crc, explained=explained)
            res.findings.append(finding)
            yield finding
        # else: an invalid header at a block boundary with nothing valid after it: the end of the log.
    if must_reach and res.next_block_offset != header.next_offset:
        finding = Finding(END_MISMATCH, res.end_offset, ring,
                          f"the log ends at {res.end_offset} but the clean header says the next block "
                          f"starts at {header.next_offset}", header.next_offset)
        res.findings.append(finding)
        yield finding
    # A clean log has nextOffset to check its end against; only a crashed one needs the probe.
    if probe and not header.clean and first_bad is not None and o < limit:
        hit = _probe(reader, o, limit)
        if hit is not None:
            finding = Finding(BEYOND_WINDOW, hit, ring,
                              "a valid record lies beyond the sliding window after the first damage: "
                              "the damage is mid-log, not a crash tail; records after it are not shown",
                              None)
            res.findings.append(finding)
            yield finding
    res.bytes_read = reader.bytes_read


def _probe(reader: LogReader, start: int, limit: int) -> int | None:
    """The first 4 KiB boundary in [start, limit) holding a valid current-lap record header."""
    o = align_up(start)
    while o < limit:
        try:
            head = rec.RecordHeader.decode(reader.read(o, rec.SIZE), expected_offset=o)
        except FormatError:
            o += ALIGN
            continue
        if head.end <= reader.ring.lap_end(o):
            return o
        o += ALIGN
    return None


def run_scan(dev, header: WalHeader, **kwargs) -> tuple[list[Entry], ScanResult]:
    """Scan to the end, keeping every record (for small logs and tests)."""
    result = ScanResult(header, Ring(header.capacity))
    entries = [e for e in scan(dev, header, result=result, **kwargs) if isinstance(e, Entry)]
    return entries, result
