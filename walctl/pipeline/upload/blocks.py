"""Upload's block builder: DataBlocks cut by iter_block_groups' rule and laid out in reusable
buffers as the scan hands over the batches (record and batch packing live in walctl/format/).

``_block_cuts`` is the cutting rule over a run of records (shared with walread.py's second read);
``_SegmentSpool`` lays one segment's blocks out as its records arrive and hands each closed block
to the spool's writer thread (spool.py); ``_Bodies``/``_RunBodies`` are the batches handed over.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Iterator

from walctl.device.buffers import ALIGN, align_up, aligned_buffer
from walctl.device.prefetch import BufferPool
from walctl.format.crc import crc32c as _crc32c  # the C library, called directly
from walctl.format.crc import crc32c_combine
from walctl.format.datablock import (DATA_BLOCK_FLAGS, DATA_BLOCK_HEADER_SIZE, DATA_BLOCK_HEADER_STRUCT,
                                      DATA_BLOCK_MAGIC)
from walctl.format.object import ObjectBuilder
from walctl.pipeline import rowcopy

_BLOCK_HEAD = DATA_BLOCK_HEADER_SIZE
_BLOCK_HEAD_PACK = DATA_BLOCK_HEADER_STRUCT.pack_into
_BLOCK_MAGIC, _BLOCK_FLAGS = DATA_BLOCK_MAGIC, DATA_BLOCK_FLAGS
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


class _NoSpool(Exception):
    """A batch that no DataBlock index entry holds: the segment is built the usual way (which refuses it)."""


# At most (SPOOL_QUEUE_WRITES + 2) batches of block buffers (queued, being written, being filled)
# and one per live spool exist at a time (4 MiB batches: about 16 at the default block size); all kept.
_KEEP_BLOCK_BUFFERS = 64


def block_buffers(size: int) -> BufferPool:
    """The block buffers of one upload's spools, reused (walctl.device.prefetch.BufferPool, take/give):
    a DataBlock is laid out in one (its header, then its batches copied in straight from the scan's
    chunk), written from it, and the buffer given back by the writer thread. Reused buffers cost no
    page faults. Page-aligned (O_DIRECT writes): a block starts at its object position's offset in a
    page, after room for the object's bytes before it in that page (``size``: a block's usual room,
    block_size + its header + some of the record that ends it)."""
    return BufferPool(align_up(ALIGN + size), keep=_KEEP_BLOCK_BUFFERS)


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

    def __init__(self, spool, writer, buffers: BufferPool, sid: int, first: int, block_size: int):
        # (writer: the upload's spool._SpoolWriter)
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
