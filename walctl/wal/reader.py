"""The recovery scan (docs/FORMATS.md 1.4): records after the trim point, and every skipped range.

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

import crc32c as _crc32c_module

from walctl.device.buffers import aligned_buffer
from walctl.errors import (BadMagicError, BoundsError, ChecksumError, FormatError, IOFailure, TruncatedError,
                           ZeroedError)
from walctl.format import batch as batch_format
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import automq_crc, crc32c
from walctl.format.header import ALIGN, WalHeader
from walctl.format import seal as seal_format
from walctl.wal.gaps import CrashHole, GapTracker, StreamGap
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
# AutoMQ logs only (read for forensics, FORMATS.md 1):
DISCARDED = "discarded"  # V1: valid blocks after the end of the continuous log, which AutoMQ drops
BAD_PADDING = "bad_padding"  # V1: a padding record AutoMQ follows though its header fails a check

# What the bytes of a finding look like (Finding.cause), derived from its kind and reason.
CAUSES = (
    "zero_fill",  # all zeros where a record should start: never written, wiped, or a torn write
    "stale_lap",  # a valid record header of another offset: data of an earlier lap of the ring
    "checksum_mismatch",  # a header or body whose crc fails: damage to bytes once written whole
    "garbage",  # bytes that are no record at all (bad magic, impossible lengths)
    "truncated",  # a record cut off by the end of the device
    "torn_tail",  # the last record's body is incomplete: a write the crash interrupted
    "bad_header_slot",  # one of the two header slots is damaged; the other one is used
    "beyond_window",  # a valid record past the sliding window after a hole: the hole is mid-log damage
    "end_mismatch",  # a cleanly closed log ends before its header's nextOffset: a lost tail
    "bad_batch",  # a valid record whose body is not a StreamRecordBatch
)
HEXDUMP_BYTES = 256  # recover --hexdump shows at most this many bytes of each finding
AUTOMQ_EXTRA_SCAN_BYTES = 4 << 20  # AutoMQ V0 reads up to min(window, 4 MiB) past its last valid record


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
    hexdump: str | None = None  # the finding's first bytes, xxd-like (recover --hexdump)

    @property
    def cause(self) -> str:
        """One word of CAUSES saying what the damaged bytes look like."""
        by_kind = {BAD_HEADER_SLOT: "bad_header_slot", TORN_TAIL: "torn_tail", BEYOND_WINDOW: "beyond_window",
                   END_MISMATCH: "end_mismatch", BAD_BATCH: "bad_batch"}
        if self.kind in by_kind:
            return by_kind[self.kind]
        return cause_of(self.reason)

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
            "cause": self.cause,
        })
        if self.hexdump is not None:
            out["hexdump"] = self.hexdump
        return out


def cause_of(reason: str) -> str:
    """The CAUSES word for a skipped range's reason (see _reason)."""
    text = reason.lower()
    if "zero fill" in text or "all zeros" in text:
        return "zero_fill"
    if "stale" in text:
        return "stale_lap"
    if "crc mismatch" in text:
        return "checksum_mismatch"
    if "truncated" in text or "short" in text:
        return "truncated"
    return "garbage"


_MAGIC_NAMES = {rec.DATA_MAGIC: "the data record magic", rec.PADDING_MAGIC: "the padding record magic"}


def _reason(exc: FormatError) -> str:
    if isinstance(exc, ZeroedError):
        return "zero fill"
    if isinstance(exc, BadMagicError):
        found = exc.found if isinstance(exc.found, int) else None
        if found is not None:
            # A magic a bit or two away from a real one is a damaged header, not foreign bytes:
            # its crc (which covers the magic) cannot match either.
            near = min(_MAGIC_NAMES, key=lambda m: bin(m ^ found).count("1"))
            bits = bin(near ^ found).count("1")
            if bits == 0:
                return exc.what  # a known magic where this log cannot have it
            if bits <= 2:
                return (f"header crc mismatch (bad magic 0x{found:08X}, {bits} bit{'s' if bits > 1 else ''} "
                        f"from {_MAGIC_NAMES[near]}: a damaged header)")
            return f"bad magic 0x{found:08X}"
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

    def __init__(self, dev, ring: Ring, account: "ScanResult | None" = None):
        self.dev = dev
        self.ring = ring
        self._chunk_start = -1
        self._chunk = None
        self._chunk_len = 0
        self._ring_size = ring.size
        self._ring_start = ring.physical(0)  # where the record area starts on the device
        self.bytes_read = 0
        self.account = account  # kept up to date as reads happen (a consumer may stop a scan early)
        # A known end of the log (a clean header's nextOffset): chunks stop one 4 KiB block past it,
        # so reading the last records costs what they take, not a whole chunk more.
        self.stop: int | None = None

    def read(self, offset: int, length: int) -> memoryview:
        """Bytes at logical [offset, offset+length); shorter when the range would cross the lap end."""
        length = max(0, min(length, self.ring.lap_end(offset) - offset))
        phys = self.ring.physical(offset)
        if not (self._chunk_start <= phys and phys + length <= self._chunk_start + self._chunk_len):
            start = align_down(phys)
            size = min(max(CHUNK_BYTES, align_up(phys + length) - start), self.ring.capacity - start)
            if self.stop is not None and offset < self.stop + ALIGN:
                size = min(size, align_up(phys - start + max(length, self.stop + ALIGN - offset)))
            if self._chunk is None or len(self._chunk) < align_up(size):
                self._chunk = aligned_buffer(align_up(size))
            # Direct reads take whole 4 KiB blocks, but an AutoMQ ring (a multiple of its 512-byte
            # blocks) may end inside one, and the device with it: the last read then stops at the
            # device's end (a short read, no I/O error), and what it got is kept.
            device_end = self.dev.size_bytes
            readable = align_up(min(size, device_end - start))
            try:
                self.dev.pread_into(start, memoryview(self._chunk)[:readable])
            except IOFailure as exc:
                if start + readable <= device_end or exc.__cause__ is not None:
                    raise  # a real I/O error, not the device's unaligned end
            self.bytes_read += size
            if self.account is not None:
                self.account.bytes_read = self.bytes_read
            self._chunk_start, self._chunk_len = start, size
        rel = phys - self._chunk_start
        return memoryview(self._chunk)[rel:rel + length]

    def data_record(self, offset: int) -> tuple[bytes, int] | None:
        """(body, end) of the intact data record at logical ``offset``, else None.

        "Intact" is what RecordHeader.decode(expected_offset=offset) and check_body accept for a
        data record, plus the record ending inside its lap: the scan's fast path. None says
        only "not that": padding, damage and the end of the log are for the full decode.
        """
        size = self._ring_size
        phys = self._ring_start + offset % size
        rel = phys - self._chunk_start
        if rel < 0 or rel + _REC_SIZE > self._chunk_len:
            if len(self.read(offset, _REC_SIZE)) < _REC_SIZE:
                return None
            rel = phys - self._chunk_start
        chunk = self._chunk
        magic, length, body_offset, body_crc, stored = _REC_UNPACK(chunk, rel)
        if magic != _DATA_MAGIC or body_offset != offset + _REC_SIZE or length <= 0:
            return None
        view = memoryview(chunk)
        if _crc32c(view[rel:rel + _REC_CRC_SPAN]) != stored:
            return None
        end = body_offset + length
        if end > (offset // size + 1) * size:
            return None
        start = rel + _REC_SIZE
        if start + length <= self._chunk_len:
            body = view[start:start + length]
        else:
            body = self.read(body_offset, length)
            if len(body) < length:
                return None
        if _crc32c(body) != body_crc:
            return None
        return bytes(body), end


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
    sealed_holes: list[CrashHole] = field(default_factory=list)  # crash holes a writer sealed (FORMATS.md 1.5)
    streams: GapTracker = field(default_factory=GapTracker)  # each stream's last batch, and its offset jumps

    @property
    def stream_gaps(self) -> list[StreamGap]:
        """Every jump of a stream's offsets between two live (or trim-point) records, in log order."""
        return self.streams.gaps
    stopped_by: str = "end of log"
    complete: bool = True
    bytes_read: int = 0
    read_from_offset: int | None = None  # where reading started (the trim point, or a seek's block)

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
            "read_from_offset": self.read_from_offset if self.read_from_offset is not None else self.start_offset,
        }


@dataclass
class _Gap:
    start: int
    reason: str
    expected_crc: int | None = None
    found_crc: int | None = None
    torn: bool = False  # began with a valid header and a bad body


def scan(dev, header: WalHeader, *, probe: bool = True, keep_offsets: bool = False,
         result: ScanResult | None = None, seek: int | None = None) -> Iterator[Entry | Finding]:
    """Yield every live record and finding in log order; ``result`` is filled as it goes.

    AutoMQ's logs (header flavour "automq-v0"/"automq-v1") follow AutoMQ's own rules
    (see _scan_automq); walctl only ever reads them.

    Args:
        probe: in a log whose writer did not close cleanly, after a stop forced by the
            sliding-window rule, look at every 4 KiB boundary up to one ring past the
            trim point for valid records; finding one proves mid-log damage (a crash
            never writes past the window). Costs a read of the rest of the ring.
        keep_offsets: remember every record offset in ``result.record_offsets``.
        seek: start reading at the first block at or after this offset (a 4 KiB aligned offset
            holding a valid record header whose bodyOffset matches) instead of the trim point;
            ``result.read_from_offset`` says where (walctl's native WALs; ignored for AutoMQ's).
    """
    ring = Ring(header.capacity, header.block_size)
    res = result if result is not None else ScanResult(header, ring)
    res.header, res.ring = header, ring
    if header.flavour != "walctl":
        yield from _scan_automq(dev, header, res, probe=probe, keep_offsets=keep_offsets)
        return
    reader = LogReader(dev, ring, res)
    trim = header.trim_offset
    start = max(trim, 0)
    limit = start + ring.size  # the writer never lets a block end further than this from the trim point
    window = header.sliding_window_max_length
    # A clean header promises the log reaches nextOffset: look at least that far.
    must_reach = header.next_offset if header.clean and header.flavour == "walctl" else 0
    res.start_offset = res.end_offset = start
    if must_reach:
        reader.stop = must_reach
    explained = not header.clean
    # walctl pads blocks with zeros, so anything else after a block's last record is damage;
    # AutoMQ pads with stale buffer bytes, so there the check cannot apply.
    zero_padding = header.flavour == "walctl"

    o = start
    if seek is not None and seek > start:
        # Seek (recover --from): the first block start at or after ``seek``, found by a probe of
        # 4 KiB boundaries up to the end a clean header promises (else one ring past the trim).
        o = _block_at_or_before(reader, seek, start) if seek < (must_reach or limit) else None
        if o is None:
            o = _probe(reader, seek, must_reach or limit)
        if o is None:
            o = must_reach or limit
        res.end_offset = o
    res.read_from_offset = o
    first_bad: int | None = None
    gap: _Gap | None = None
    data_record = reader.data_record

    def close_gap(at: int) -> Finding:
        kind = TRIM_RECORD if gap.start == trim else HOLE
        return Finding(kind, gap.start, ring, gap.reason, at, gap.expected_crc, gap.found_crc,
                       explained=explained and kind == HOLE)

    while o < limit:
        if first_bad is not None and o >= first_bad + window and o >= must_reach:
            res.stopped_by = "one sliding window past the first invalid block"
            break
        if must_reach and first_bad is not None and first_bad >= must_reach and gap is not None and not gap.torn:
            # A clean log ends where its header says: the writer drained every block before it
            # wrote nextOffset, so no block of its lies beyond (no window to look through).
            break
        # Fast path, one tight step per intact data record (LogReader.data_record: the header
        # unpacked in the cached chunk, the checks of RecordHeader.decode and check_body, the
        # body sliced from the same chunk). Anything else (padding, damage, the end of the
        # log) takes the full path below, which decodes again and says what is wrong.
        found = data_record(o)
        if found is not None:
            body_bytes, end = found
            if gap is not None:
                finding = close_gap(o)
                res.findings.append(finding)
                yield finding
                gap = None
            record_offset = o
            o = res.end_offset = end
            batch, error = _batch_of(body_bytes)
            if record_offset == trim:
                _note_trimmed(res, record_offset, body_bytes, batch)  # deleted: only its ends still count
                continue
            if error is not None:
                finding = Finding(BAD_BATCH, record_offset, ring, f"body is not a StreamRecordBatch: {error}", end)
                res.findings.append(finding)
                yield finding
            yield _accepted(res, record_offset, body_bytes, batch, keep_offsets)
            continue
        raw = reader.read(o, rec.SIZE)
        try:
            head = rec.RecordHeader.decode(raw, expected_offset=o)
            if head.end > ring.lap_end(o):
                raise BoundsError(f"record end {head.end} crosses the end of the lap at {ring.lap_end(o)}",
                                  offset=o + 4, found=head.end)
        except FormatError as exc:
            if o % ALIGN and o != trim:
                boundary = align_up(o)
                if not zero_padding or _all_zero(reader.read(o, boundary - o)):
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
            _note_seal(res, reader, o, head)
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
        batch, error = _batch_of(body_bytes)
        if head.offset == trim:
            _note_trimmed(res, head.offset, body_bytes, batch)  # deleted: only its ends still count
            continue
        if error is not None:
            finding = Finding(BAD_BATCH, head.offset, ring, f"body is not a StreamRecordBatch: {error}", head.end)
            res.findings.append(finding)
            yield finding
        yield _accepted(res, head.offset, body_bytes, batch, keep_offsets)
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


def _note_seal(res: ScanResult, reader: LogReader, o: int, head: rec.RecordHeader) -> None:
    """A padding record whose body starts with a valid seal descriptor is a sealed crash hole:
    keep its evidence (one per hole: a hole across a lap end has one padding record per lap)."""
    raw = reader.read(o + rec.SIZE, min(head.body_length, ALIGN - rec.SIZE))
    if len(raw) < seal_format.FIXED_SIZE or bytes(raw[:4]) != seal_format.MAGIC.to_bytes(4, "big"):
        return  # a lap-end padding record (zero body), or one sealed by an older walctl
    try:
        descriptor = seal_format.SealDescriptor.decode(raw)
    except FormatError:
        return  # damaged evidence is no evidence: the gap it explained becomes unexplained
    if not any(h.start == descriptor.hole_start for h in res.sealed_holes):
        res.sealed_holes.append(CrashHole(descriptor.hole_start, descriptor.hole_end, descriptor, o))


SEEK_BACK_BYTES = 1 << 20  # a seek looks this far back for the block holding its offset,
SEEK_BACK_FIRST = 64 << 10  # in two steps: this far first


def _block_at_or_before(reader: LogReader, offset: int, floor: int) -> int | None:
    """The last 4 KiB boundary at or before ``offset`` (not below ``floor``, at most 1 MiB back)
    holding a valid record header that names it: reading from there shows every record at or
    after ``offset``, also those of the block that holds it."""
    top = align_down(offset)
    # Most blocks are small: look near first, then one block's span (the writer's soft limit), then 1 MiB.
    for back in (SEEK_BACK_FIRST, 5 * SEEK_BACK_FIRST, SEEK_BACK_BYTES):
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


def _probe(reader: LogReader, start: int, limit: int, *, automq: bool = False) -> int | None:
    """The first block boundary (4 KiB; AutoMQ: its block size) in [start, limit) holding a valid
    current-lap record header (``automq``: checked with AutoMQ's checksum)."""
    step = reader.ring.block_size if automq else ALIGN
    o = align_up(start, step)
    checksum = automq_crc if automq else crc32c
    while o < limit:
        try:
            head = rec.RecordHeader.decode(reader.read(o, rec.SIZE), expected_offset=o, checksum=checksum)
        except FormatError:
            o += step
            continue
        if head.end <= reader.ring.lap_end(o):
            return o
        o += step
    return None


# -- AutoMQ's block WAL, read for forensics (never written) -------------------------------
#
# What AutoMQ's s3stream (BlockWALService, SlidingWindowService, RecordHeader, WALUtil)
# does, and walctl follows here:
# - record headers are walctl's 24-byte layout; headerCrc and bodyCrc are java.util.zip.CRC32
#   masked to 31 bits (WALUtil.crc32); a header is checked in the order magic, headerCrc,
#   bodyLength > 0 (a Java int), bodyOffset == offset + 24;
# - blocks start 4 KiB aligned and are padded with whatever the write buffer held, so an
#   invalid header inside a block is the padding, never a finding;
# - every start trims to "first free block - 1", so a trimOffset just below a 4 KiB boundary
#   names no record; the record at trimOffset is skipped, damaged or not;
# - V0 (0x12345678): no padding records; a block that does not fit before the end of the lap
#   starts at the next lap, leaving the lap's tail unwritten. Recovery keeps reading until one
#   slidingWindowMaxLength past the first invalid 4 KiB block, and a little longer (up to
#   min(window, 4 MiB) past the last valid record); a valid record in a later lap than the first
#   invalid block clears it;
# - V1 (0x01234567): the lap's tail is a padding record (magic 0x76543210), which recovery
#   follows by its length alone; recovery keeps only the continuous log: it stops at the first
#   invalid 4 KiB block (a bad record inside a block only skips to the next block).


def _automq_header(raw, o: int, ring: Ring, v1: bool) -> rec.RecordHeader:
    head = rec.RecordHeader.decode(raw, expected_offset=o, checksum=automq_crc)
    if head.is_padding and not v1:
        raise BadMagicError(f"padding record magic 0x{rec.PADDING_MAGIC:08X} in an AutoMQ V0 log (V0 has none)",
                            offset=o, expected=rec.DATA_MAGIC, found=rec.PADDING_MAGIC)
    if head.body_length > 0x7FFFFFFF:  # a Java int: AutoMQ reads it as negative
        raise BoundsError(f"record bodyLength {head.body_length} is negative as AutoMQ reads it",
                          offset=o + 4, found=head.body_length)
    if head.end > ring.lap_end(o):
        raise BoundsError(f"record end {head.end} crosses the end of the lap at {ring.lap_end(o)}",
                          offset=o + 4, found=head.end)
    return head


def _automq_padding_length(raw, o: int, ring: Ring) -> int | None:
    """AutoMQ V1 follows a padding record by its magic and length alone: the length it would
    follow (when that stays inside the lap), or None."""
    if len(raw) < rec.SIZE:
        return None
    magic, length, _, _, _ = rec.STRUCT.unpack_from(raw)
    if magic != rec.PADDING_MAGIC or length > 0x7FFFFFFF:
        return None
    end = o + rec.SIZE + length
    return length if end <= ring.lap_end(o) else None


def _scan_automq(dev, header: WalHeader, res: ScanResult, *, probe: bool,
                 keep_offsets: bool) -> Iterator[Entry | Finding]:
    """scan() for AutoMQ's V0 and V1 logs: the records AutoMQ's recovery returns, and findings."""
    ring = res.ring
    bs = ring.block_size  # AutoMQ's WALUtil.BLOCK_SIZE: its alignment (FORMATS.md 6)
    reader = LogReader(dev, ring)
    v1 = header.flavour == "automq-v1"
    trim = header.trim_offset
    start = max(trim, 0)
    limit = start + ring.size
    window = header.sliding_window_max_length
    explained = not header.clean
    # AutoMQ trims to "first free block - 1" at every start: that offset names no record.
    trim_is_a_record = trim >= 0 and (trim + 1) % bs != 0
    res.start_offset = res.end_offset = start

    o = start
    first_bad: int | None = None  # V0's maybeFirstInvalidOffset
    first_bad_lap = -1
    last_valid: int | None = None
    stop_at: int | None = None  # V1: the first invalid block, where its recovery stops
    stop_reason = ""
    beyond_seen = False
    gap: _Gap | None = None

    def found(kind: str, at: int, reason: str, end: int | None = None, expected=None, got=None,
              expl: bool = False) -> Finding:
        finding = Finding(kind, at, ring, reason, end, expected, got, explained=expl)
        res.findings.append(finding)
        return finding

    def crcs(exc: FormatError) -> tuple:
        return (exc.expected, exc.found) if isinstance(exc, ChecksumError) else (None, None)

    while o < limit:
        if not v1 and first_bad is not None and o >= first_bad + window and (
                last_valid is None or o >= last_valid + min(window, AUTOMQ_EXTRA_SCAN_BYTES)):
            res.stopped_by = "one sliding window past the first invalid block (AutoMQ V0 recovery)"
            break
        at_trim = o == trim
        aligned = o % bs == 0
        raw = reader.read(o, rec.SIZE)
        try:
            head = _automq_header(raw, o, ring, v1)
        except FormatError as exc:
            length = _automq_padding_length(raw, o, ring) if v1 else None
            if length is not None:
                # AutoMQ follows a padding record without checking it; so does walctl, saying so.
                if gap is not None:
                    yield found(HOLE, gap.start, gap.reason, o, gap.expected_crc, gap.found_crc, explained)
                    gap = None
                yield found(BAD_PADDING, o, f"padding record followed as AutoMQ V1 does, though its header "
                                            f"fails a check: {_reason(exc)}", o + rec.SIZE + length, *crcs(exc))
                o = res.end_offset = o + rec.SIZE + length
                continue
            if at_trim and v1 and aligned:
                # V1 stops at an invalid 4 KiB boundary even where it would skip the record.
                yield found(TRIM_RECORD, o, f"{_reason(exc)}; AutoMQ V1 recovery stops here", None, *crcs(exc))
            elif at_trim:
                if trim_is_a_record:
                    yield found(TRIM_RECORD, o, _reason(exc), None, *crcs(exc), expl=True)
                o = align_up(o + 1, bs)
                continue
            if not aligned:
                o = align_up(o, bs)  # the stale bytes after a block's last record
                continue
            if v1:
                stop_at, stop_reason = o, _reason(exc)
                res.stopped_by = "the first invalid block (AutoMQ V1 recovers only the continuous log)"
                break
            if first_bad is None:
                first_bad, first_bad_lap = o, ring.lap(o)
            if gap is None:
                gap = _Gap(o, _reason(exc), *crcs(exc))
            o += bs
            continue
        if head.is_padding:
            if gap is not None:
                yield found(HOLE, gap.start, gap.reason, o, gap.expected_crc, gap.found_crc, explained)
                gap = None
            o = res.end_offset = head.end
            continue
        body = reader.read(o + rec.SIZE, head.body_length)
        try:
            head.check_body(body, o + rec.SIZE, checksum=automq_crc)
        except FormatError as exc:
            reason = "body crc mismatch" if isinstance(exc, ChecksumError) else _reason(exc)
            if at_trim and v1 and aligned:
                yield found(TRIM_RECORD, o, f"{reason}; AutoMQ V1 recovery stops here", None, *crcs(exc))
                stop_at, stop_reason = o, reason
                res.stopped_by = "the first invalid block (AutoMQ V1 recovers only the continuous log)"
                break
            if at_trim:
                if trim_is_a_record:
                    yield found(TRIM_RECORD, o, reason, None, *crcs(exc), expl=True)
                o = align_up(head.end, bs)
                continue
            if gap is None:
                gap = _Gap(o, reason, *crcs(exc), torn=True)
            if aligned and v1:
                stop_at, stop_reason = o, reason
                res.stopped_by = "the first invalid block (AutoMQ V1 recovers only the continuous log)"
                break
            if aligned and first_bad is None:
                first_bad, first_bad_lap = o, ring.lap(o)
            o = align_up(head.end, bs)
            continue
        if gap is not None:
            lap_tail = (not v1 and not gap.torn and o % ring.size == 0 and ring.lap(gap.start) == ring.lap(o) - 1)
            if not lap_tail:  # V0 leaves a lap's tail unwritten when the next block does not fit
                yield found(HOLE, gap.start, gap.reason, o, gap.expected_crc, gap.found_crc, explained)
            gap = None
        if first_bad is not None and ring.lap(o) != first_bad_lap:
            first_bad = None  # AutoMQ V0: a valid record in a later lap clears the first invalid block
        if first_bad is not None and o >= first_bad + window and not beyond_seen:
            beyond_seen = True
            yield found(BEYOND_WINDOW, o, "a valid record beyond the sliding window after the first invalid "
                                          "block: mid-log damage; AutoMQ V0 still returns it (it logs "
                                          "'[BUG] record offset out of window')")
        last_valid = o
        body_bytes = bytes(body)
        o = res.end_offset = head.end
        batch, error = _batch_of(body_bytes)
        if at_trim:
            _note_trimmed(res, head.offset, body_bytes, batch)
            continue
        if error is not None:
            yield found(BAD_BATCH, head.offset, f"body is not a StreamRecordBatch: {error}", head.end)
        yield _accepted(res, head.offset, body_bytes, batch, keep_offsets)
    else:
        res.stopped_by = "one ring past the trim point"

    if gap is not None and gap.torn:
        yield found(TORN_TAIL, gap.start, gap.reason, align_up(gap.start + 1, bs), gap.expected_crc, gap.found_crc,
                    explained)
    if probe and stop_at is not None:
        # V1 drops whatever follows the first invalid block; say what that was.
        scan_from = stop_at + bs
        hit = _probe(reader, scan_from, min(limit, stop_at + window), automq=True)
        if hit is not None:
            yield found(DISCARDED, stop_at, f"{stop_reason}; valid blocks follow at "
                                            f"offset {hit}: AutoMQ V1 recovers only the continuous log and "
                                            f"discards them (not shown)", hit, expl=explained)
        elif not header.clean:
            hit = _probe(reader, stop_at + window, limit, automq=True)
            if hit is not None:
                yield found(BEYOND_WINDOW, hit, "a valid record lies beyond the sliding window after the first "
                                                "invalid block: the damage is mid-log, not a crash tail")
    elif probe and not header.clean and first_bad is not None and o < limit:
        hit = _probe(reader, o, limit, automq=True)
        if hit is not None:
            yield found(BEYOND_WINDOW, hit, "a valid record lies beyond the sliding window after the first "
                                            "invalid block: the damage is mid-log, not a crash tail; AutoMQ V0 "
                                            "does not read that far (not shown)")
    res.bytes_read = reader.bytes_read


# -- forensics helpers ------------------------------------------------------------------

def read_physical(dev, position: int, length: int) -> bytes:
    """``length`` bytes at a physical position through aligned reads (O_DIRECT-safe); shorter at the
    end of the device."""
    size = getattr(dev, "size_bytes", None)
    if size is not None:
        length = max(0, min(length, size - position))
    if length <= 0:
        return b""
    start = align_down(position)
    end = align_up(position + length)
    if size is not None and end > size:
        end = align_down(size)
        length = max(0, min(length, end - position))
        if length <= 0:
            return b""
    buf = aligned_buffer(end - start)
    dev.pread_into(start, memoryview(buf)[:end - start])
    return bytes(memoryview(buf)[position - start:position - start + length])


def finding_bytes(dev, finding: Finding, limit: int = HEXDUMP_BYTES) -> tuple[int, bytes]:
    """(physical position, first bytes) of a finding: a header slot, or the ring from its offset up
    to its end, the end of the lap, or ``limit`` bytes."""
    if finding.physical_offset is not None:
        return finding.physical_offset, read_physical(dev, finding.physical_offset, limit)
    ring = finding.ring
    length = limit
    if finding.end_offset is not None and finding.end_offset > finding.offset:
        length = min(length, finding.end_offset - finding.offset)
    length = min(length, ring.lap_end(finding.offset) - finding.offset)
    position = ring.physical(finding.offset)
    return position, read_physical(dev, position, length)


def hexdump(data: bytes, address: int = 0) -> str:
    """xxd-like lines: ``address: 16 bytes as 8 groups of 4 hex digits  ascii``, joined by newlines."""
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        groups = " ".join(chunk[j:j + 2].hex() for j in range(0, len(chunk), 2))
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{address + i:08x}: {groups:<39}  {text}")
    return "\n".join(lines)


_REC_SIZE = rec.SIZE
_crc32c = _crc32c_module.crc32c  # the C function itself: no wrapper call per record
_REC_CRC_SPAN = 20
_REC_UNPACK = rec.STRUCT.unpack_from
_DATA_MAGIC = rec.DATA_MAGIC
_BATCH_UNPACK = batch_format.STRUCT.unpack_from
_BATCH_HEADER = batch_format.HEADER_SIZE
_BATCH_MAGIC = batch_format.MAGIC
_OFFSET_LIMIT = 1 << 63


def _all_zero(view) -> bool:
    """True when every byte is zero (at C speed: bytes.count, not a Python loop)."""
    data = bytes(view)
    return data.count(0) == len(data)


def _batch_of(body: bytes) -> tuple[StreamRecordBatch | None, FormatError | None]:
    """The StreamRecordBatch a record body holds, or the reason it holds none."""
    if len(body) >= _BATCH_HEADER:
        # Fast path: the checks of StreamRecordBatch.decode(exact=True) on an intact batch.
        magic, stream_id, epoch, base, count, length = _BATCH_UNPACK(body)
        if (magic == _BATCH_MAGIC and stream_id >= 0 and base >= 0 and count >= 1
                and base + count < _OFFSET_LIMIT and length == len(body) - _BATCH_HEADER):
            return StreamRecordBatch(stream_id, epoch, base, count, body[_BATCH_HEADER:]), None
    try:
        return StreamRecordBatch.decode(body, exact=True), None
    except FormatError as exc:
        return None, exc


def _accepted(res: ScanResult, offset: int, body: bytes, batch: StreamRecordBatch | None,
              keep_offsets: bool) -> Entry:
    """Count a live record in the scan's result and return it as an Entry."""
    res.records += 1
    res.payload_bytes += len(batch.payload) if batch else len(body)
    if batch is not None:
        res.stream_ends[batch.stream_id] = batch.end_offset
        res.streams.add(offset, batch)
    if keep_offsets:
        res.record_offsets.append(offset)
    return Entry(offset, body, batch)


def _note_trimmed(res: ScanResult, offset: int, body: bytes, batch: StreamRecordBatch | None) -> None:
    """The record at trimOffset is deleted, but its stream's end (and its identity) still count."""
    if batch is not None:
        res.stream_ends[batch.stream_id] = batch.end_offset
        res.streams.add(offset, batch)
    res.trim_entry = Entry(offset, body, batch)


def run_scan(dev, header: WalHeader, **kwargs) -> tuple[list[Entry], ScanResult]:
    """Scan to the end, keeping every record (for small logs and tests)."""
    result = ScanResult(header, Ring(header.capacity, header.block_size))
    entries = [e for e in scan(dev, header, result=result, **kwargs) if isinstance(e, Entry)]
    return entries, result
