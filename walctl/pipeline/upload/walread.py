"""Upload's second read of the WAL: the DataBlocks of a Segment, from the bodies the scan kept or
read again from the log (uploads above KEEP_SCANNED_BYTES whose objects were not spooled).

One device handle: the read goes through the run's own read-only handle (run.py opens it once,
for the scan, the re-check and this read); ``_ChunkReader``'s thread reads ahead with positional
reads on it (pread: no shared file position), so no second descriptor is opened.
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from typing import TYPE_CHECKING, Iterator, NamedTuple

from walctl.device.buffers import ALIGN, align_down, align_up
from walctl.device.prefetch import BufferPool, ReadAhead
from walctl.errors import RefusedError
from walctl.format import batch as batch_format
from walctl.format import bulk
from walctl.format import record as rec
from walctl.pipeline import rowcopy
from walctl.pipeline.upload.blocks import _SAFE_SPAN, _block_cuts

if TYPE_CHECKING:
    from walctl.device.base import Device

    from walctl.pipeline.upload.plan import Segment

_ROW = bulk.ROW
# The second read: log order, CHUNK_READ_BYTES per O_DIRECT read, from a thread that stays up to
# READ_AHEAD_CHUNKS chunks ahead of the block building.
CHUNK_READ_BYTES = 4 << 20
READ_AHEAD_CHUNKS = 2
_POOL_BUFFERS = READ_AHEAD_CHUNKS + 4  # chunk buffers kept for reuse: queued, being read, held by a block


class _Batch(NamedTuple):
    """A batch the scan kept: its encoded bytes (the record body) and offsets."""

    base_offset: int
    count: int
    end_offset: int
    size: int
    data: bytes


class _ChunkReader:
    """Logical [lo, hi) of the ring in log order, a chunk of at most CHUNK_READ_BYTES per O_DIRECT read
    (never across a lap's end), read by walctl.device.prefetch's ReadAhead thread up to
    READ_AHEAD_CHUNKS chunks ahead of the consumer: the device reads overlap the block building and
    the store writes, memory stays bounded.

    Each chunk is (logical start, read-only view of a pooled aligned buffer, lent: a buffer is read
    into again only once no view of it is left, so a block still holding slices of it keeps it).
    The thread's device reads count as the caller's (bytes_read_total is per thread): each chunk's
    as it is taken, the ones read ahead and never taken at ``close``.
    """

    def __init__(self, dev: Device, ring, lo: int, hi: int):
        self._dev, self._ring, self._next, self._hi = dev, ring, lo, hi
        self._buffers = BufferPool(keep=_POOL_BUFFERS)
        self._reads = ReadAhead(1, name="walctl-upload-read")
        self._queued: deque = deque()
        self._top_up()

    def _top_up(self) -> None:
        while len(self._queued) <= READ_AHEAD_CHUNKS and self._next < self._hi:
            o = self._next
            n = min(CHUNK_READ_BYTES, self._ring.lap_end(o) - o, self._hi - o)
            self._queued.append(self._reads.submit(self._read, o, n))
            self._next = o + n

    def _read(self, o: int, n: int) -> tuple[int, memoryview]:
        with self._buffers.lend(CHUNK_READ_BYTES) as whole, whole[:n] as view:
            self._dev.pread_into(self._ring.physical(o), view)
            return o, view.toreadonly()

    def __iter__(self) -> Iterator[tuple[int, memoryview]]:
        while self._queued:
            item = self._queued.popleft().result()
            self._top_up()
            yield item
            del item

    def close(self) -> None:
        self._next = self._hi
        self._reads.close()
        while self._queued:
            self._queued.popleft().credit()  # read ahead, never taken: still the caller's device reads


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

    def __init__(self, dev: Device, wal_path: str, header, end: int, kept: dict[int, bytes] | None = None):
        self.dev = dev  # the run's read-only handle (the caller closes it, after close())
        self.where = wal_path
        self.header = header
        self.end = end  # the end of the scanned log: no read goes past the 4 KiB block holding it
        self.kept = kept  # the bodies the scan kept (WAL offset -> body): not read again
        self._open: list = []  # the readers of a second read under way: close() ends them

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
            _, sid, _, base, count, _ = batch_format.STRUCT.unpack_from(data)
            end = base + count
            if sid != seg.stream_id or base != expected:
                raise self._changed(seg, offset, "holds another batch now")
            expected = end
            yield _Batch(base, count, end, len(data), data)

    def close(self) -> None:
        """End the second reads still open (an upload that stops before its objects are built)."""
        while self._open:
            self._open.pop().close()

    def _stream(self, seg: Segment, block_size: int) -> Iterator[tuple[int, int, list]]:
        from walctl.wal.reader import Ring

        ring = Ring(self.header.capacity)
        reader = _ChunkReader(self.dev, ring, align_down(seg.wal[0]), min(align_up(seg.wal_end), align_up(self.end)))
        self._open.append(reader)
        try:
            yield from _Cutter(self, seg, ring, block_size).run(iter(reader))
        finally:
            if reader in self._open:
                self._open.remove(reader)
                reader.close()


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
