"""Reading the ring and what a scan establishes: the chunk cache, live records, the scan's report.

Shared by the scan policies (walctl.wal.native_scan, walctl.wal.automq_scan) and the
callers that read records by offset (upload, trim's hint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections import deque
from dataclasses import dataclass, field
from operator import add as _add

from walctl.device.buffers import aligned_buffer
from walctl.device.prefetch import BufferPool, ReadAhead
from walctl.errors import FormatError, IOFailure
from walctl.format import batch as batch_format
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import automq_crc, crc32c
from walctl.format.header import ALIGN, WalHeader
from walctl.wal.findings import Durable, Finding
from walctl.wal.gaps import CrashHole, GapTracker, StreamGap
from walctl.wal.layout import Ring, align_down, align_up

if TYPE_CHECKING:
    from walctl.device.base import Device

CHUNK_BYTES = 1 << 20  # read the device in 1 MiB aligned chunks: few syscalls, bounded memory
# Read-ahead (LogReader(readahead=True)): device reads of this many bytes, this many in flight
# while the scan decodes the chunk before them, this many at the device at once (one per thread);
# each buffer has room for as many bytes of the chunk before in front (a record across a read's
# end): (DEPTH + 1) x 2 MiB read into, plus what is carried. On a virtio disk (bench/
# throughput_bench.py's, fio: 1 MiB x 1 ~1.5 GB/s, 4-16 MiB x 1-4 no faster) two 2 MiB reads
# at once kept the scan at the device's pace (2 x 2 MiB: 0.215 s for a 256 MiB log against
# 0.265 s with one thread reading 4 MiB at a time; dd bs=1M 0.193 s in the same rounds), and
# when other work shares the disk, two reads at once get it a larger share.
READ_AHEAD_BYTES = 2 << 20
READ_AHEAD_DEPTH = 4
READ_AHEAD_THREADS = 2
READ_AHEAD_CARRY = READ_AHEAD_BYTES
BULK_RECORDS = 1 << 30  # intact_run's bound when nothing asks the scan to look at each record


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
    """Reads logical ranges of the ring through an aligned chunk cache (O_DIRECT-friendly).

    ``readahead``: once three chunks in a row are read back to back (a scan going forward), the
    device reads go on ahead of the consumer on a thread (``_ReadAhead``: READ_AHEAD_BYTES per
    read, READ_AHEAD_DEPTH of them in flight), so the device reads while the caller decodes
    what it has. Same bytes, same results: only when they are read changes. ``close()`` ends it.
    """

    def __init__(self, dev: Device, ring: Ring, account: "ScanResult | None" = None, *, readahead: bool = False):
        self.dev = dev
        self.ring = ring
        self._chunk_start = -1
        self._chunk = None
        self._chunk_len = 0
        self._chunk_lo = -1  # the cached chunk's logical start
        self._own = None  # the buffer of the reads made here (read-ahead has its own)
        self._ring_size = ring.size
        self._ring_start = ring.physical(0)  # where the record area starts on the device
        self.bytes_read = 0
        self.account = account  # kept up to date as reads happen (a consumer may stop a scan early)
        # A known end of the log (a clean header's nextOffset): chunks stop one 4 KiB block past it,
        # so reading the last records costs what they take, not a whole chunk more.
        self.stop: int | None = None
        self.bound: int | None = None  # intact_run decodes no record starting at or past this offset
        self.want = _REC_SIZE  # bytes the next intact_run's chunk must hold from its offset
        self._ahead: _ReadAhead | None = None
        if readahead:
            self.read_ahead()

    def read_ahead(self, forward: bool = False) -> None:
        """Read ahead from now on (as ``readahead=True``): a caller that first reads here and
        there (a seek) turns it on when it goes forward; ``forward``: it does from its next read
        on (read-ahead starts there, not after reads in a row). Only on walctl's own rings:
        4 KiB aligned, so every read-ahead read is a whole number of blocks."""
        ring = self.ring
        if self._ahead is None and ring.size % ALIGN == 0 and self._ring_start % ALIGN == 0 \
                and ring.capacity <= self.dev.size_bytes:
            self._ahead = _ReadAhead(self.dev, ring)
        self._kick = forward and self._ahead is not None

    def read(self, offset: int, length: int) -> memoryview:
        """Bytes at logical [offset, offset+length); shorter when the range would cross the lap end."""
        length = max(0, min(length, self.ring.lap_end(offset) - offset))
        phys = self.ring.physical(offset)
        if not (self._chunk_start <= phys and phys + length <= self._chunk_start + self._chunk_len):
            if self._ahead is None or not self._fill_ahead(offset, phys, length):
                self._fill(offset, phys, length)
        rel = phys - self._chunk_start
        return memoryview(self._chunk)[rel:rel + length]

    def _fill(self, offset: int, phys: int, length: int) -> None:
        """Read the chunk holding logical [offset, offset+length) from the device, here and now."""
        start = align_down(phys)
        size = min(max(CHUNK_BYTES, align_up(phys + length) - start), self.ring.capacity - start)
        if self.stop is not None and offset < self.stop + ALIGN:
            size = min(size, align_up(phys - start + max(length, self.stop + ALIGN - offset)))
        lo = offset - (phys - start)
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
        self._count(size - carry)
        # Three reads in a row, each going on where the one before ended, are a scan going
        # forward: read ahead of it (one or two alone may be a walk through a block, as a seek's).
        self._following = self._following + 1 if lo + carry == self._chunk_lo + self._chunk_len else 0
        self._chunk_start, self._chunk_len, self._chunk_lo = start, size, lo
        if self._following >= 2 and self._ahead is not None:
            self._ahead.start(lo + size, self._ahead_limit(lo + size))

    def _count(self, n: int) -> None:
        self.bytes_read += n
        if self.account is not None:
            self.account.bytes_read = self.bytes_read

    def _carry(self, start: int, size: int) -> int:
        """Make the chunk buffer ready for a read of ``size`` bytes at physical ``start``; when
        the cached chunk already holds the first bytes of it (a scan reading on past a record
        across the chunk's end), move them to the front instead of reading them again: how
        many (the chunk's end is then where the device read starts)."""
        need = align_up(size)
        own = self._own
        if own is None or len(own) < need:
            own = aligned_buffer(need)
        carry = self._carried(start)
        if carry >= size:
            carry = 0  # (a read within the cached chunk's span: read whole)
        if carry:
            # a memmove when the chunk is in that buffer already
            memoryview(own)[:carry] = self._tail(start, carry)
        self._chunk = self._own = own
        self._drop_segment()
        return carry

    def _carried(self, start: int) -> int:
        """How many bytes from physical ``start`` on the cached chunk holds up to its end (0 when
        it does not hold ``start``, or its end is no 4 KiB boundary a device read could go on from)."""
        old_start, old_end = self._chunk_start, self._chunk_start + self._chunk_len
        if self._chunk is None or not old_start <= start < old_end or old_end % ALIGN:
            return 0
        return old_end - start

    def _tail(self, start: int, carry: int) -> memoryview:
        """The cached chunk's last ``carry`` bytes, from physical ``start`` on (as _carried counted them)."""
        rel = start - self._chunk_start
        return memoryview(self._chunk)[rel:rel + carry]

    def _fill_ahead(self, offset: int, phys: int, length: int) -> bool:
        """Make the chunk the next read-ahead segment (with the cached chunk's last bytes before
        it, as _carry does) when it is the one this read wants; False when it is not, or a read
        failed (the read is then made here, as without read-ahead, and fails as it would)."""
        ahead = self._ahead
        start = align_down(phys)
        lo = offset - (phys - start)
        carry = self._carried(start)
        if self._kick:  # the caller goes forward from here: read ahead from this read on
            self._kick = False
            if not ahead.reading():
                ahead.start(lo + carry, self._ahead_limit(lo + carry))
        seg = ahead.take(lo + carry)
        if seg is None:
            self._stop_ahead()
            return False
        self._count_helper(seg)
        if seg.error is not None:
            ahead.release(seg.buf)  # not counted: the read made here reads (and counts) those bytes again
            self._stop_ahead()
            return False
        need = align_up(phys + length) - start
        if carry > READ_AHEAD_CARRY or carry + seg.n < need:
            return self._assemble(seg, start, lo, carry, need)
        view = memoryview(seg.buf)
        if carry:
            view[READ_AHEAD_CARRY - carry:READ_AHEAD_CARRY] = self._tail(start, carry)
        self._drop_segment()
        self._segment = seg.buf
        self._chunk = view[READ_AHEAD_CARRY - carry:READ_AHEAD_CARRY + seg.n]
        self._chunk_start, self._chunk_len, self._chunk_lo = start, carry + seg.n, lo
        self._count(seg.n)
        ahead.top_up()
        return True

    def _assemble(self, seg: "_Segment", start: int, lo: int, carry: int, need: int) -> bool:
        """A record longer than what a segment holds after the carried bytes: the chunk is built
        in the reader's own buffer from the carried bytes and as many segments as it takes
        (copied). False when one is not read ahead, or failed: the chunk then holds what was
        assembled, and the read made here goes on from its end."""
        ahead = self._ahead
        size = carry + seg.n
        while size < need:
            size += min(READ_AHEAD_BYTES, self._ring_size)
        own = self._own
        if own is None or len(own) < size:
            own = aligned_buffer(align_up(size))
        if carry:
            memoryview(own)[:carry] = self._tail(start, carry)
        self._chunk = self._own = own
        self._drop_segment()
        pos = carry
        while True:
            memoryview(own)[pos:pos + seg.n] = memoryview(seg.buf)[READ_AHEAD_CARRY:READ_AHEAD_CARRY + seg.n]
            pos += seg.n
            self._count(seg.n)
            ahead.release(seg.buf)
            self._chunk_start, self._chunk_len, self._chunk_lo = start, pos, lo
            if pos >= need:
                return True
            seg = ahead.take(lo + pos) if pos + READ_AHEAD_BYTES <= len(own) else None
            if seg is not None:
                self._count_helper(seg)
            if seg is None or seg.error is not None:
                if seg is not None:
                    ahead.release(seg.buf)
                self._stop_ahead()
                return False

    _segment = None  # the read-ahead buffer the cached chunk lives in
    _kick = False  # start reading ahead at the next read (read_ahead(forward=True))
    _following = 0  # reads in a row that went on where the one before ended

    def _drop_segment(self) -> None:
        if self._segment is not None:
            self._ahead.release(self._segment)
            self._segment = None

    def _count_helper(self, seg: "_Segment") -> None:
        """The thread's device reads are the caller's (walctl.device.fdio.bytes_read_total is per thread)."""
        seg.credit()

    def _ahead_limit(self, lo: int) -> int:
        """Where read-ahead from logical ``lo`` stops: one ring on, the scan's bound, and a block
        past a known end of the log (what reading on would cost anyway)."""
        limit = lo + self._ring_size
        if self.bound is not None:
            limit = min(limit, align_up(self.bound))
        if self.stop is not None:
            limit = min(limit, align_up(self.stop + ALIGN)) if lo < self.stop + ALIGN else lo
        return limit

    def _stop_ahead(self) -> None:
        """Stop reading ahead: wait for the reads in flight (counted: the device made them)."""
        for seg in self._ahead.stop():
            self._count_helper(seg)
            if seg.error is None:
                self._count(seg.n)

    def close(self) -> None:
        """End read-ahead (its reads in flight finish first) and its thread; the reader still
        reads, without it. A no-op without read-ahead."""
        if self._ahead is not None:
            self._stop_ahead()
            self._ahead.close()
            self._ahead = None

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


class _Segment:
    """One read-ahead read: logical [lo, lo + n) into ``buf`` after its READ_AHEAD_CARRY bytes of room."""

    __slots__ = ("lo", "n", "buf", "read")

    def __init__(self, lo: int, n: int, buf):
        self.lo, self.n, self.buf = lo, n, buf
        self.read = None  # its walctl.device.prefetch.Read

    @property
    def error(self) -> BaseException | None:
        return self.read.error

    def credit(self) -> None:
        """The thread's device reads are the caller's (walctl.device.fdio.bytes_read_total is per thread)."""
        self.read.credit()


def _read_segment(dev: Device, ring: Ring, seg: _Segment) -> None:
    """A read-ahead read: the segment read whole (a failure is its ``error``: the reader reads again
    itself and fails as it would without read-ahead)."""
    with memoryview(seg.buf) as whole, whole[READ_AHEAD_CARRY:READ_AHEAD_CARRY + seg.n] as view:
        dev.pread_into(ring.physical(seg.lo), view)


class _ReadAhead:
    """A LogReader's reads ahead: logical [lo, limit) in segments of at most READ_AHEAD_BYTES
    (never across a lap's end), submitted in order, at most READ_AHEAD_DEPTH in flight, into
    READ_AHEAD_DEPTH + 1 pooled buffers (the one the reader's chunk lives in is given back when
    it moves on). walctl.device.prefetch.ReadAhead's READ_AHEAD_THREADS threads read them
    (os.preadv gives up the GIL while the device works): that many reads at once at the device,
    which a virtio or NVMe disk serves faster than one after the other; the LogReader takes them
    in order (``take``) and falls back to its own reads for anything else (``stop``)."""

    def __init__(self, dev: Device, ring: Ring):
        self.dev, self.ring = dev, ring
        self._buffers = BufferPool(READ_AHEAD_CARRY + READ_AHEAD_BYTES, keep=READ_AHEAD_DEPTH + 1,
                                   limit=READ_AHEAD_DEPTH + 1)
        self._queued: deque[_Segment] = deque()
        self._next = self._limit = 0
        self._reads = ReadAhead(READ_AHEAD_THREADS, name="walctl-scan-read")

    def start(self, lo: int, limit: int) -> None:
        """Read [lo, limit) ahead (nothing may be in flight)."""
        if lo % ALIGN or limit % ALIGN or lo >= limit:
            return
        self._next, self._limit = lo, limit
        self.top_up()

    def top_up(self) -> None:
        """Submit reads until READ_AHEAD_DEPTH are in flight (or the range is all asked for)."""
        while len(self._queued) < READ_AHEAD_DEPTH and self._next < self._limit:
            buf = self._buffers.take()
            if buf is None:
                return  # every buffer is in use: the next release tops up
            lo = self._next
            seg = _Segment(lo, min(READ_AHEAD_BYTES, self.ring.lap_end(lo) - lo, self._limit - lo), buf)
            self._next = lo + seg.n
            self._queued.append(seg)
            seg.read = self._reads.submit(_read_segment, self.dev, self.ring, seg)

    def reading(self) -> bool:
        """Reads are in flight."""
        return bool(self._queued)

    def take(self, lo: int) -> _Segment | None:
        """The next segment once read (its ``error`` set if the read failed) when it starts at
        logical ``lo``; None (nothing waited for) when it does not."""
        if not self._queued or self._queued[0].lo != lo:
            return None
        seg = self._queued[0]
        seg.read.wait()  # (interrupted here, by a signal: seg is still queued, stop() drains it)
        self._queued.popleft()
        return seg

    def release(self, buf) -> None:
        """A buffer taken is free again (its bytes are read into again)."""
        self._buffers.give(buf)
        self.top_up()

    def stop(self) -> list[_Segment]:
        """Stop reading ahead: the segments that were in flight, once read (buffers freed)."""
        drained = []
        self._limit = self._next
        while self._queued:
            seg = self._queued[0]
            seg.read.wait()
            self._queued.popleft()
            self._buffers.give(seg.buf)
            drained.append(seg)
        return drained

    def close(self) -> None:
        """End the threads (after stop)."""
        self._reads.close()


class Intact:
    """LogReader.intact_run's answer: ``count`` rows (walctl.format.bulk.ROW int64 each) decoded
    from ``chunk`` (held at LogReader.position() ``where``) starting at ``rel``, and the Stop.
    (A plain class: one is made per chunk, and a dataclass costs a command's start-up ~0.5 ms.)"""

    __slots__ = ("chunk", "rel", "rows", "count", "stop", "where")

    def __init__(self, chunk, rel: int, rows: memoryview, count: int, stop: bulk.Stop, where: tuple[int, int]):
        self.chunk, self.rel, self.rows, self.count, self.stop, self.where = chunk, rel, rows, count, stop, where

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Intact(rel={self.rel}, count={self.count}, stop={self.stop!r}, where={self.where})"


_REC_SIZE = rec.SIZE


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
    # The points known durable (recover, status): damage below them is corruption, read past (native_scan)
    durable: Durable | None = None

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
        return [f for f in self.findings if not f.explained and not f.moved]

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

    __slots__ = ("chunk", "rows", "first", "stop", "count", "offset", "end", "_summary")

    def __init__(self, chunk, rows: memoryview, first: int, stop: int, summary: tuple | None = None):
        self.chunk, self.rows, self.first, self.stop = chunk, rows, first, stop
        self.count = stop - first
        self.offset = rows[first * _ROW]  # the first record's WAL offset
        last = (stop - 1) * _ROW
        self.end = rows[last] + _REC_SIZE + rows[last + 2]  # where the last record ends
        self._summary = summary

    @property
    def summary(self) -> tuple[bool, bool, int, bool, int]:
        """walctl.format.bulk.rows_summary of its rows (computed once): (all batches, one stream,
        its id, each batch following the one before, body bytes)."""
        if self._summary is None:
            self._summary = bulk.rows_summary(self.rows, self.first, self.stop)
        return self._summary

    def one_stream(self) -> int | None:
        """The stream id when every record of the run is of one stream, else None."""
        _, one, sid, _, _ = self.summary
        return sid if one else None

    def column(self, field_index: int) -> list[int]:
        """One field of every row (bulk.ROW's order: 0 offset, 1 body_pos, 2 body_length,
        4 stream_id, 5 epoch, 6 base_offset, 7 count)."""
        return self.rows[self.first * _ROW + field_index:self.stop * _ROW:_ROW].tolist()

    def payload_bytes(self) -> int:
        return self.summary[4] - self.count * _BATCH_HEADER

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
    res.records += n
    res.payload_bytes += run.payload_bytes()
    tracker = res.streams
    last = tracker.last
    _, one, sid, follows, _ = run.summary
    if one and follows:
        # One stream, each batch following the one before: only the first can open a gap (and
        # no Python step per record: the first and the last row say it all).
        rows, first, final = run.rows, run.first * _ROW, (run.stop - 1) * _ROW
        base, end = rows[first + 6], rows[final + 6] + rows[final + 7]
        previous = last.get(sid)
        if previous is not None and base > previous[1]:
            tracker.gaps.append(StreamGap(sid, previous[1], base, previous[0], rows[first]))
        last[sid] = (rows[final], end)
        res.stream_ends[sid] = end
        if keep_offsets:
            res.record_offsets.extend(run.column(0))
        return
    offsets, sids, bases, counts = run.column(0), run.column(4), run.column(6), run.column(7)
    ends = list(map(_add, bases, counts))
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
