"""Reading the ring and what a scan establishes: the chunk cache, live records, the scan's report.

Shared by the scan policies (walctl.wal.native_scan, walctl.wal.automq_scan) and the
callers that read records by offset (upload, trim's hint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, field
from operator import add as _add

from walctl.device.buffers import aligned_buffer
from walctl.errors import FormatError, IOFailure
from walctl.format import batch as batch_format
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import automq_crc, crc32c
from walctl.format.header import ALIGN, WalHeader
from walctl.wal import decoder
from walctl.wal.findings import Finding
from walctl.wal.gaps import CrashHole, GapTracker, StreamGap
from walctl.wal.layout import Ring, align_down, align_up

if TYPE_CHECKING:
    from walctl.device.base import Device

CHUNK_BYTES = 1 << 20  # read the device in 1 MiB aligned chunks: few syscalls, bounded memory
BULK_RECORDS = 1 << 30  # decode_block's bound when nothing asks the scan to look at each record


@dataclass(frozen=True)
class Entry:
    """A valid data record: its WAL offset, body, and the batch the body holds (None if it does not)."""

    offset: int
    body: bytes
    batch: StreamRecordBatch | None

    @property
    def end(self) -> int:
        return self.offset + rec.SIZE + len(self.body)


class LogReader:
    """Reads logical ranges of the ring through an aligned chunk cache (O_DIRECT-friendly)."""

    def __init__(self, dev: Device, ring: Ring, account: "ScanResult | None" = None):
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
        self.bound: int | None = None  # intact_run decodes no record starting at or past this offset
        self.want = _REC_SIZE  # bytes the next intact_run's chunk must hold from its offset

    def read(self, offset: int, length: int) -> memoryview:
        """Bytes at logical [offset, offset+length); shorter when the range would cross the lap end."""
        length = max(0, min(length, self.ring.lap_end(offset) - offset))
        phys = self.ring.physical(offset)
        if not (self._chunk_start <= phys and phys + length <= self._chunk_start + self._chunk_len):
            start = align_down(phys)
            size = min(max(CHUNK_BYTES, align_up(phys + length) - start), self.ring.capacity - start)
            if self.stop is not None and offset < self.stop + ALIGN:
                size = min(size, align_up(phys - start + max(length, self.stop + ALIGN - offset)))
            carry = self._carry(start, size)
            # Direct reads take whole 4 KiB blocks, but an AutoMQ ring (a multiple of its 512-byte
            # blocks) may end inside one, and the device with it: the last read then stops at the
            # device's end (a short read, no I/O error), and what it got is kept.
            device_end = self.dev.size_bytes
            readable = align_up(min(size, device_end - start))
            if readable > carry:
                try:
                    self.dev.pread_into(start + carry, memoryview(self._chunk)[carry:readable])
                except IOFailure as exc:
                    if start + readable <= device_end or exc.__cause__ is not None:
                        raise  # a real I/O error, not the device's unaligned end
            self.bytes_read += size - carry
            if self.account is not None:
                self.account.bytes_read = self.bytes_read
            self._chunk_start, self._chunk_len = start, size
        rel = phys - self._chunk_start
        return memoryview(self._chunk)[rel:rel + length]

    def _carry(self, start: int, size: int) -> int:
        """Make the chunk buffer ready for a read of ``size`` bytes at physical ``start``; when
        the cached chunk already holds the first bytes of it (a scan reading on past a record
        across the chunk's end), move them to the front instead of reading them again: how
        many (the chunk's end is then where the device read starts)."""
        old, old_start, old_end = self._chunk, self._chunk_start, self._chunk_start + self._chunk_len
        need = align_up(size)
        if old is None or not old_start <= start < old_end < start + size or old_end % ALIGN:
            if old is None or len(old) < need:
                self._chunk = aligned_buffer(need)
            return 0
        carry = old_end - start
        if len(old) < need:
            self._chunk = aligned_buffer(need)
            memoryview(self._chunk)[:carry] = memoryview(old)[start - old_start:old_end - old_start]
        else:
            memoryview(old)[:carry] = memoryview(old)[start - old_start:old_end - old_start]  # memmove
        return carry

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

    def intact_run(self, offset: int, max_records: int = BULK_RECORDS) -> "Intact | list":
        """The records from logical ``offset`` on that the cached chunk holds whole, decoded in
        one call (walctl.format.bulk.decode_records over the chunk, at most ``max_records``,
        none starting at or past ``bound``): the scan's fast path. A bulk decode (max_records
        > 1) skips the zero padding after a block's last record. Its ``stop`` says why it
        ended: padding rows, damage, the end of the log or the chunk's end are for the scan
        (and its step decoder) to handle. Empty ([]) when not even a record header fits
        before the lap end. ``want``: bytes from ``offset`` the chunk must hold (else read).
        """
        want, self.want = self.want, _REC_SIZE
        phys = self._ring_start + offset % self._ring_size
        rel = phys - self._chunk_start
        if rel < 0 or rel + want > self._chunk_len:
            if len(self.read(offset, want)) < _REC_SIZE:
                return []
            rel = phys - self._chunk_start
        if rel + _REC_SIZE > self._chunk_len:
            return []
        lap_end = (offset // self._ring_size + 1) * self._ring_size
        end = self._chunk_len if self.bound is None else min(self._chunk_len, rel + max(self.bound - offset, 0))
        decoded = bulk.decode_records(self._chunk, offset - rel, start=rel, end=end, lap_end=lap_end,
                                      align=ALIGN if max_records > 1 else 0, max_records=max_records)
        return Intact(self._chunk, rel, decoded.rows, decoded.count, decoded.stop, (self._chunk_start, self._chunk_len))

    def position(self) -> tuple[int, int]:
        """Which chunk is cached (changes when a read replaces it)."""
        return self._chunk_start, self._chunk_len


@dataclass(frozen=True, slots=True)
class Intact:
    """LogReader.intact_run's answer: ``count`` rows (walctl.format.bulk.ROW int64 each) decoded
    from ``chunk`` (held at LogReader.position() ``where``) starting at ``rel``, and the Stop."""

    chunk: object
    rel: int
    rows: memoryview
    count: int
    stop: bulk.Stop
    where: tuple[int, int]

    def __len__(self) -> int:
        return self.count


_REC_SIZE = rec.SIZE
_REC_CRC_SPAN = 20
_REC_UNPACK = rec.STRUCT.unpack_from
_DATA_MAGIC = rec.DATA_MAGIC
_crc32c = decoder._crc32c


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


def batch_of(body: bytes) -> tuple[StreamRecordBatch | None, FormatError | None]:
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


_BATCH_UNPACK = batch_format.STRUCT.unpack_from
_BATCH_HEADER = batch_format.HEADER_SIZE
_BATCH_MAGIC = batch_format.MAGIC
_OFFSET_LIMIT = 1 << 63


def accepted(res: ScanResult, offset: int, body: bytes, batch: StreamRecordBatch | None,
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


_ROW = bulk.ROW


class Run:
    """A run of live records decoded in one call (walctl.format.bulk.decode_records) from a
    LogReader's chunk: every one an intact data record whose body is a StreamRecordBatch.
    The scan has counted them in its report already. Valid only while the scan is paused at
    it: the scan reuses the chunk once it goes on (``entries()`` copies them out)."""

    __slots__ = ("chunk", "rows", "first", "stop", "count", "offset", "end")

    def __init__(self, chunk, rows: memoryview, first: int, stop: int):
        self.chunk, self.rows, self.first, self.stop = chunk, rows, first, stop
        self.count = stop - first
        self.offset = rows[first * _ROW]  # the first record's WAL offset
        last = (stop - 1) * _ROW
        self.end = rows[last] + _REC_SIZE + rows[last + 2]  # where the last record ends

    def column(self, field_index: int) -> list[int]:
        """One field of every row (bulk.ROW's order: 0 offset, 1 body_pos, 2 body_length,
        4 stream_id, 5 epoch, 6 base_offset, 7 count)."""
        return self.rows[self.first * _ROW + field_index:self.stop * _ROW:_ROW].tolist()

    def payload_bytes(self) -> int:
        return sum(self.column(2)) - self.count * _BATCH_HEADER

    def entries(self, limit: int | None = None) -> list[Entry]:
        """The records (the first ``limit``) as Entries (bodies copied out of the chunk)."""
        view = memoryview(self.chunk)
        rows = self.rows
        out = []
        stop = self.stop if limit is None else min(self.stop, self.first + limit)
        for i in range(self.first * _ROW, stop * _ROW, _ROW):
            offset, pos, length, _, sid, epoch, base, count = rows[i:i + _ROW]
            body = bytes(view[pos:pos + length])
            out.append(Entry(offset, body, StreamRecordBatch(sid, epoch, base, count, body[_BATCH_HEADER:])))
        return out


def account_run(res: ScanResult, run: Run, keep_offsets: bool) -> None:
    """What ``accepted`` does for each record of ``run``, in bulk: the counts, each stream's
    end, its offset jumps (ScanResult.streams), the offsets when kept."""
    n = run.count
    offsets, sids, bases, counts = run.column(0), run.column(4), run.column(6), run.column(7)
    res.records += n
    res.payload_bytes += run.payload_bytes()
    ends = list(map(_add, bases, counts))
    tracker = res.streams
    last = tracker.last
    if sids.count(sids[0]) == n and bases[1:] == ends[:-1]:
        # One stream, each batch following the one before: only the first can open a gap.
        sid = sids[0]
        previous = last.get(sid)
        if previous is not None and bases[0] > previous[1]:
            tracker.gaps.append(StreamGap(sid, previous[1], bases[0], previous[0], offsets[0]))
        last[sid] = (offsets[-1], ends[-1])
        res.stream_ends[sid] = ends[-1]
    else:
        stream_ends = res.stream_ends
        for offset, sid, base, end in zip(offsets, sids, bases, ends):  # GapTracker.add, inlined
            previous = last.get(sid)
            last[sid] = (offset, end)
            stream_ends[sid] = end
            if previous is not None and base > previous[1]:
                tracker.gaps.append(StreamGap(sid, previous[1], base, previous[0], offset))
    if keep_offsets:
        res.record_offsets.extend(offsets)


def note_trimmed(res: ScanResult, offset: int, body: bytes, batch: StreamRecordBatch | None) -> None:
    """The record at trimOffset is deleted, but its stream's end (and its identity) still count."""
    if batch is not None:
        res.stream_ends[batch.stream_id] = batch.end_offset
        res.streams.add(offset, batch)
    res.trim_entry = Entry(offset, body, batch)


def probe(reader: LogReader, start: int, limit: int, *, automq: bool = False) -> int | None:
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


def all_zero(view) -> bool:
    """True when every byte is zero (at C speed: bytes.count, not a Python loop)."""
    data = bytes(view)
    return data.count(0) == len(data)


__all__ = ["ALIGN", "CHUNK_BYTES", "Entry", "Finding", "LogReader", "Intact", "Ring", "Run", "ScanResult", "WalHeader",
           "account_run", "accepted", "align_down", "align_up", "all_zero", "batch_of", "note_trimmed", "probe"]
