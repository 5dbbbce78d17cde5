"""Objects (Stream Set Object or Stream Object): what is about a whole object (docs/FORMATS.md 3).

    0                                              indexStartPosition            object_size
    | DataBlock | DataBlock | ... | DataBlock       | IndexBlock: N x 36 | Footer: 48 |

Each structure has its own module beside this one; import from them in new code:

    datablock    ``DataBlockHeader``: the 10 bytes before a DataBlock's batches
    index_entry  ``IndexEntry``: one 36-byte DataBlockIndex entry
    index        the IndexBlock: ``decode_index`` (the checks across entries), ``find_entries``
    footer       ``Footer``: the last 48 bytes, versions 0 (AutoMQ) and 1 (walctl), ``check_data_crc``
    composite    AutoMQ composite objects (read only): ``is_composite``, ``decode_composite``

This module reads an object's tail (``tail_length_hint``, ``parse_tail``), builds objects
(``build_object``, ``ObjectBuilder``, ``assemble_object``) and verifies them deeply
(``iter_blocks``, ``iter_placed``, ``verify_report``); it re-exports the structures' names so
that ``from walctl.format.object import X`` keeps working.
Errors carry ``offset`` = the byte position in the object.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Sequence

from walctl import defaults
from walctl.errors import FormatError
from walctl.format import checks
from walctl.format.batch import MAGIC as BATCH_MAGIC
from walctl.format.batch import STRUCT as BATCH_STRUCT
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c, crc32c_combine
from walctl.format.datablock import (
    DATA_BLOCK_FLAGS,
    DATA_BLOCK_HEADER_SIZE,
    DATA_BLOCK_HEADER_STRUCT,
    DATA_BLOCK_MAGIC,
    DataBlockHeader,
)
from walctl.format.footer import (
    FOOTER_MAGIC,
    FOOTER_SIZE,
    FOOTER_STRUCT,
    VERSIONS,
    VERSION_AUTOMQ,
    VERSION_WALCTL,
    Footer,
    check_data_crc,
)
from walctl.format.index import (
    _scan_index,
    decode_index,
    find_entries,
)
from walctl.format.index_entry import (
    INDEX_ENTRY_SIZE,
    INDEX_ENTRY_STRUCT,
    INT32_MAX,
    INT64_LIMIT,
    IndexEntry,
)
from walctl.lazynames import module_getattr

__all__ = [
    "BuiltObject",
    "COMPOSITE_FOOTER_MAGIC",
    "CompositeObject",
    "DATA_BLOCK_FLAGS",
    "DATA_BLOCK_HEADER_SIZE",
    "DATA_BLOCK_HEADER_STRUCT",
    "DATA_BLOCK_MAGIC",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_ENTRIES_GUESS",
    "DataBlockHeader",
    "FOOTER_MAGIC",
    "FOOTER_SIZE",
    "FOOTER_STRUCT",
    "Footer",
    "INDEX_ENTRY_SIZE",
    "INDEX_ENTRY_STRUCT",
    "INT32_MAX",
    "INT64_LIMIT",
    "IndexEntry",
    "LINKED_OBJECT_SIZE",
    "LINKED_OBJECT_STRUCT",
    "LinkedObject",
    "OBJECTS_BLOCK_HEADER_SIZE",
    "OBJECTS_BLOCK_HEADER_STRUCT",
    "OBJECTS_BLOCK_MAGIC",
    "ObjectBuilder",
    "PlacedBatch",
    "Problem",
    "StreamRange",
    "VERSIONS",
    "VERSION_AUTOMQ",
    "VERSION_WALCTL",
    "VerifyReport",
    "assemble_object",
    "build_object",
    "check_data_crc",
    "decode_composite",
    "decode_index",
    "find_entries",
    "is_composite",
    "iter_block_groups",
    "iter_blocks",
    "iter_placed",
    "parse_tail",
    "tail_length_hint",
    "verify_object",
    "verify_report",
]

# AutoMQ's composite objects (read only): their names are re-exported from walctl.format.composite
# on first use, so that building an object (upload) does not load them.
_COMPOSITE_NAMES = frozenset({
    "COMPOSITE_FOOTER_MAGIC", "LINKED_OBJECT_SIZE", "LINKED_OBJECT_STRUCT", "OBJECTS_BLOCK_HEADER_SIZE",
    "OBJECTS_BLOCK_HEADER_STRUCT", "OBJECTS_BLOCK_MAGIC", "CompositeObject", "LinkedObject", "decode_composite",
    "is_composite",
})


__getattr__ = module_getattr(__name__, dict.fromkeys(_COMPOSITE_NAMES, "composite"), globals(),
                             package="walctl.format")


DEFAULT_BLOCK_SIZE = defaults.DEFAULT_BLOCK_SIZE  # FORMATS.md 3: a block closes once its payload reaches 1 MiB
# Guess for the first ranged read of an object's tail: the footer plus this many index
# entries (about 9 KiB) catches the whole index of most objects in one GET.
DEFAULT_ENTRIES_GUESS = 256


# --- reading ----------------------------------------------------------------------------------

def tail_length_hint(entries_guess: int = DEFAULT_ENTRIES_GUESS, object_size: int | None = None) -> int:
    """How many bytes to read from an object's end to get the footer and, likely, the whole index."""
    length = FOOTER_SIZE + INDEX_ENTRY_SIZE * max(entries_guess, 0)
    return length if object_size is None else min(length, object_size)


def parse_tail(tail, object_size: int) -> tuple[Footer, list[IndexEntry] | None]:
    """Decode the footer from the last ``len(tail)`` bytes of an object of ``object_size`` bytes.

    Returns the footer and the index entries when the tail covers the whole IndexBlock,
    else None: read exactly [index_start_position, + index_block_length) and call decode_index.
    Raises the errors of Footer.decode (BadMagicError: not an object of this format) and of
    decode_index, with object positions; ValueError if ``tail`` is longer than the object.
    """
    if len(tail) > object_size:
        raise ValueError(f"tail of {len(tail)} bytes is longer than the object ({object_size} bytes)")
    tail_position = object_size - len(tail)
    with checks.relocated(tail_position):
        footer = Footer.decode(tail, len(tail) - FOOTER_SIZE if len(tail) >= FOOTER_SIZE else 0,
                               object_size=object_size)
    if footer.index_start_position < tail_position:
        return footer, None
    start = footer.index_start_position - tail_position
    index = memoryview(tail)[start:start + footer.index_block_length]
    return footer, decode_index(index, footer, base_position=footer.index_start_position)


# --- building ---------------------------------------------------------------------------------

class StreamRange(NamedTuple):
    """A stream's share of an object: offsets [start_offset, end_offset) in ``size_bytes`` of blocks."""

    start_offset: int
    end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class BuiltObject:
    """A whole object's bytes and what its index says."""

    data: bytes
    entries: list[IndexEntry]
    footer: Footer
    ranges: dict[int, StreamRange] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.data)


def _check_stream(stream_id: int, batches: Sequence[StreamRecordBatch], prev_stream: int | None) -> None:
    if not isinstance(stream_id, int) or not 0 <= stream_id < INT64_LIMIT:
        raise ValueError(f"stream id {stream_id!r} out of range [0, 2^63)")
    if prev_stream is not None and stream_id <= prev_stream:
        raise ValueError(f"streams must be strictly ascending: {stream_id} after {prev_stream}")
    if not batches:
        raise ValueError(f"stream {stream_id} has no batches")
    expected = batches[0].base_offset
    for b in batches:
        if b.stream_id != stream_id:
            raise ValueError(f"batch of stream {b.stream_id} listed under stream {stream_id}")
        if b.base_offset != expected:
            raise ValueError(f"stream {stream_id}: batch at offset {b.base_offset}, expected {expected} "
                             "(a gap or overlap)")
        expected = b.end_offset


def iter_block_groups(batches: Iterable, block_size: int) -> Iterator[list]:
    """Split one stream's batches into DataBlocks, lazily: a block closes once its payload reaches block_size.

    ``batches`` may be anything with ``count``, ``size``, ``base_offset`` and ``end_offset``
    (StreamRecordBatch, or upload's batches read back from the WAL); only one block's worth
    is held at a time, so a stream of any length is grouped in bounded memory.
    """
    current: list = []
    payload = 0
    for b in batches:
        if b.count > INT32_MAX or b.size > INT32_MAX - DATA_BLOCK_HEADER_SIZE:
            raise ValueError(f"batch at offset {b.base_offset} too large for one DataBlock index entry")
        # The index's Java ints must hold the block's size and offset span: cut early if not.
        if current and (payload + b.size > INT32_MAX - DATA_BLOCK_HEADER_SIZE
                        or b.end_offset - current[0].base_offset > INT32_MAX):
            yield current
            current, payload = [], 0
        current.append(b)
        payload += b.size
        if payload >= block_size:
            yield current
            current, payload = [], 0
    if current:
        yield current


def _group_blocks(batches: Sequence[StreamRecordBatch], block_size: int) -> list[list[StreamRecordBatch]]:
    """Split one stream's batches into DataBlocks: a block closes once its payload reaches block_size."""
    return list(iter_block_groups(batches, block_size))


def build_object(streams: Iterable[tuple[int, Sequence[StreamRecordBatch]]], *,
                 block_size: int = DEFAULT_BLOCK_SIZE, version: int = VERSION_WALCTL) -> BuiltObject:
    """Lay out an object: per stream, DataBlocks of about ``block_size`` payload; one index entry each.

    Args:
        streams: (stream_id, batches) in strictly ascending stream order; each stream's
            batches contiguous and all of that stream.
        block_size: a block closes once its payload (batches with their headers) reaches this.
            The count restarts for each stream (AutoMQ carries it over by accident).
        version: 1 writes checksums in the footer; 0 writes an AutoMQ footer (zeros).
    Raises:
        ValueError: streams not ascending, a stream empty, batches of another stream or not contiguous.
    """
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    if version not in VERSIONS:
        raise ValueError(f"footer version {version} unknown, expected one of {VERSIONS}")
    parts: list[bytes] = []
    entries: list[IndexEntry] = []
    ranges: dict[int, StreamRange] = {}
    position = 0
    prev_stream: int | None = None
    for stream_id, batches in streams:
        batches = list(batches)
        _check_stream(stream_id, batches, prev_stream)
        prev_stream = stream_id
        stream_start = position
        for block in _group_blocks(batches, block_size):
            data_length = sum(b.size for b in block)
            parts.append(DataBlockHeader(len(block), data_length).encode())
            parts.extend(b.encode() for b in block)
            entry = IndexEntry(stream_id, block[0].base_offset, block[-1].end_offset - block[0].base_offset,
                               len(block), position, DATA_BLOCK_HEADER_SIZE + data_length)
            entries.append(entry)
            position += entry.block_size
        ranges[stream_id] = StreamRange(batches[0].base_offset, batches[-1].end_offset, position - stream_start)
    if not entries:
        raise ValueError("an object needs at least one stream")
    return _finish(parts, entries, ranges, version)


def _finish(parts: list[bytes], entries: list[IndexEntry], ranges: dict[int, StreamRange],
            version: int) -> BuiltObject:
    """Data blocks + IndexBlock + Footer (with walctl's checksums for version 1)."""
    if len(entries) * INDEX_ENTRY_SIZE > INT32_MAX:
        raise ValueError(f"{len(entries)} index entries do not fit a Java int indexBlockLength")
    data = b"".join(parts)
    index = b"".join(e.encode() for e in entries)
    if version == VERSION_WALCTL:
        footer = Footer(len(data), len(index), version, crc32c(index), crc32c(data))
    else:
        footer = Footer(len(data), len(index), version)
    return BuiltObject(data + index + footer.encode(), entries, footer, ranges)


class ObjectBuilder:
    """Build an object a DataBlock at a time, in bounded memory (upload streams objects with it).

    ``add_block`` returns the block's bytes (header + batches) for the caller to send at once;
    ``finish`` returns the IndexBlock and the Footer, the object's last bytes. The builder keeps
    only the index entries and a running crc of the data region, never the data. The bytes
    are the same as ``build_object``'s for the same blocks.
    """

    def __init__(self, *, version: int = VERSION_WALCTL):
        if version not in VERSIONS:
            raise ValueError(f"footer version {version} unknown, expected one of {VERSIONS}")
        self.version = version
        self.entries: list[IndexEntry] = []
        self.ranges: dict[int, StreamRange] = {}
        self.range_crcs: dict[int, int] = {}  # per stream: crc32c of its range's bytes (walctl footers only)
        self.position = 0  # bytes of DataBlocks so far: where the next block starts
        self.footer: Footer | None = None
        self._data_crc = 0
        self._stream: int | None = None
        self._stream_start = 0

    def add_block(self, stream_id: int, start_offset: int, end_offset: int, batches: Sequence) -> bytes:
        """One DataBlock of ``stream_id`` covering stream offsets [start_offset, end_offset).

        Args:
            batches: the block's StreamRecordBatches, each already encoded (bytes-like), back to back
                in offset order; the caller has checked they are the stream's and contiguous.
        Raises:
            ValueError: streams not ascending, a block not continuing its stream's offsets, an empty
                block, values that do not fit the index's Java ints, or the object already finished.
        """
        self._check_block(stream_id, start_offset, end_offset, len(batches))
        # One copy of the batches (join with the header first), not two (join, then concatenate).
        data = b"".join([DataBlockHeader(len(batches), sum(len(b) for b in batches)).encode(), *batches])
        self._index_block(stream_id, start_offset, end_offset, len(batches), len(data))
        if self.version == VERSION_WALCTL:
            self._add_crc(stream_id, crc32c(data), len(data))
        return data

    def add_laid_out(self, stream_id: int, start_offset: int, end_offset: int, count: int, size: int,
                     crc: int) -> None:
        """A DataBlock the caller laid out and writes itself (upload's spools): ``size`` bytes, header and
        ``count`` batches, whose crc32c is ``crc``. Indexed exactly as add_block indexes the same bytes,
        after the same checks; the data crc is combined from ``crc`` (the bytes are not read again)."""
        self._check_block(stream_id, start_offset, end_offset, count)
        self._index_block(stream_id, start_offset, end_offset, count, size)
        if self.version == VERSION_WALCTL:
            self._add_crc(stream_id, crc, size)

    def _add_crc(self, stream_id: int, crc: int, size: int) -> None:
        """A block's crc into the data crc and into its stream's range crc (``range_crcs``: the
        manifest records it, so a later split copies the range without reading it)."""
        self._data_crc = crc32c_combine(self._data_crc, crc, size)
        self.range_crcs[stream_id] = crc32c_combine(self.range_crcs.get(stream_id, 0), crc, size)

    def _check_block(self, stream_id: int, start_offset: int, end_offset: int, count: int) -> None:
        """add_block's checks of a block of ``count`` batches, before its bytes are made."""
        if self.footer is not None:
            raise ValueError("the object is already finished")
        if count < 1:
            raise ValueError(f"stream {stream_id}: an empty DataBlock")
        if stream_id != self._stream:
            if not isinstance(stream_id, int) or not 0 <= stream_id < INT64_LIMIT:
                raise ValueError(f"stream id {stream_id!r} out of range [0, 2^63)")
            if self._stream is not None and stream_id <= self._stream:
                raise ValueError(f"streams must be strictly ascending: {stream_id} after {self._stream}")
            self._stream, self._stream_start = stream_id, self.position
        else:
            prev = self.ranges[stream_id]
            if start_offset != prev.end_offset:
                raise ValueError(f"stream {stream_id}: block at offset {start_offset}, expected "
                                 f"{prev.end_offset} (a gap or overlap)")
        if not 0 <= start_offset < end_offset <= start_offset + INT32_MAX or end_offset >= INT64_LIMIT:
            raise ValueError(f"stream {stream_id}: block offsets [{start_offset}, {end_offset}) do not fit an "
                             "index entry")

    def _index_block(self, stream_id: int, start_offset: int, end_offset: int, count: int, size: int) -> None:
        """The block's index entry and its stream's range; the next block starts after its ``size`` bytes."""
        if size > INT32_MAX:
            raise ValueError(f"stream {stream_id}: a DataBlock of {size} bytes does not fit a Java int")
        self.entries.append(IndexEntry(stream_id, start_offset, end_offset - start_offset, count, self.position, size))
        self.position += size
        first = self.ranges.get(stream_id)
        self.ranges[stream_id] = StreamRange(first.start_offset if first else start_offset, end_offset,
                                             self.position - self._stream_start)

    def finish(self) -> bytes:
        """The IndexBlock and the Footer; afterwards ``footer`` and ``size`` describe the object."""
        if self.footer is not None:
            raise ValueError("the object is already finished")
        if not self.entries:
            raise ValueError("an object needs at least one stream")
        if len(self.entries) * INDEX_ENTRY_SIZE > INT32_MAX:
            raise ValueError(f"{len(self.entries)} index entries do not fit a Java int indexBlockLength")
        index = b"".join(e.encode() for e in self.entries)
        if self.version == VERSION_WALCTL:
            self.footer = Footer(self.position, len(index), self.version, crc32c(index), self._data_crc)
        else:
            self.footer = Footer(self.position, len(index), self.version)
        return index + self.footer.encode()

    @property
    def size(self) -> int:
        """The object's size once finished (DataBlocks so far before)."""
        return self.footer.object_size if self.footer is not None else self.position


def assemble_object(parts: Iterable[tuple[IndexEntry, bytes]], *, version: int = VERSION_WALCTL) -> BuiltObject:
    """An object from DataBlock runs copied verbatim (compaction): each part is an index entry
    (its ``block_position`` is ignored) and that entry's block bytes; entries keep their order.

    Each part is decoded first (block magic, counts, offsets must match its entry), so a
    misplaced read can never be published as data.
    """
    data_parts: list[bytes] = []
    entries: list[IndexEntry] = []
    ranges: dict[int, StreamRange] = {}
    position = 0
    for entry, block in parts:
        if len(block) != entry.block_size:
            raise ValueError(f"block run of stream {entry.stream_id} at {entry.start_offset}: "
                             f"{len(block)} bytes, its entry says {entry.block_size}")
        placed = IndexEntry(entry.stream_id, entry.start_offset, entry.end_offset_delta, entry.record_count,
                            position, entry.block_size)
        for _ in iter_blocks(block, placed, base_position=position):
            pass
        if entries and (placed.stream_id, placed.start_offset) < (entries[-1].stream_id, entries[-1].end_offset):
            raise ValueError("parts must be sorted by (stream, offset) without overlap")
        prev = ranges.get(placed.stream_id)
        if prev is not None and prev.end_offset != placed.start_offset:
            raise ValueError(f"stream {placed.stream_id}: parts not contiguous ({prev.end_offset} then "
                             f"{placed.start_offset}); an object holds each stream contiguously")
        start = prev.start_offset if prev else placed.start_offset
        size = (prev.size_bytes if prev else 0) + placed.block_size
        ranges[placed.stream_id] = StreamRange(start, placed.end_offset, size)
        entries.append(placed)
        data_parts.append(bytes(block))
        position += placed.block_size
    if not entries:
        raise ValueError("an object needs at least one block")
    return _finish(data_parts, entries, ranges, version)


# --- deep verification ------------------------------------------------------------------------

def _decode_entry_blocks(buf, entry: IndexEntry, base_position: int,
                         copy: bool = True) -> Iterator[list[StreamRecordBatch]]:
    """Yield the batches of each DataBlock in the entry's range, block by block, checked
    (``copy=False``: payloads are views of ``buf``, see StreamRecordBatch.decode)."""
    start = entry.block_position - base_position
    if start < 0:
        raise ValueError(f"buffer starts at object position {base_position}, after the entry's block "
                         f"at {entry.block_position}")
    end = start + entry.block_size
    checks.need(buf, start, entry.block_size, f"blocks of stream {entry.stream_id} at {entry.block_position}")
    view = memoryview(buf)[:end]  # nothing below may read past the entry's range
    expected = entry.start_offset
    total = 0
    pos = start
    last_batch_pos = start
    while pos < end:
        header = DataBlockHeader.decode(view, pos)
        checks.bound(header.block_size <= end - pos, pos + 6, "DataBlock dataLength", header.data_length,
                     f"<= {end - pos - DATA_BLOCK_HEADER_SIZE}: the block must end inside its index entry's range")
        block_end = pos + header.block_size
        block_view = view[:block_end]
        batches: list[StreamRecordBatch] = []
        bpos = pos + DATA_BLOCK_HEADER_SIZE
        while bpos < block_end:
            b = StreamRecordBatch.decode(block_view, bpos, copy=copy)
            checks.bound(b.stream_id == entry.stream_id, bpos + 1, "StreamRecordBatch streamId", b.stream_id,
                         f"== {entry.stream_id}, the stream of its index entry")
            rule = ("the index entry's startOffset" if total == 0 and not batches
                    else "the previous batch's end: offsets contiguous")
            checks.bound(b.base_offset == expected, bpos + 17, "StreamRecordBatch baseOffset", b.base_offset,
                         f"== {expected}, {rule}")
            expected = b.end_offset
            batches.append(b)
            last_batch_pos = bpos
            bpos += b.size
        checks.bound(len(batches) == header.record_count, pos + 2, "DataBlock recordCount", header.record_count,
                     f"== {len(batches)}, the batches decoded in the block")
        total += len(batches)
        yield batches
        pos = block_end
    checks.bound(expected == entry.end_offset, last_batch_pos + 17, "end offset of the entry's last batch", expected,
                 f"== {entry.end_offset}, the index entry's end offset")
    checks.bound(total == entry.record_count, start, f"batches in the blocks of stream {entry.stream_id}", total,
                 f"== {entry.record_count}, the index entry's recordCount")


def iter_blocks(buf, entry: IndexEntry, *, base_position: int = 0) -> Iterator[StreamRecordBatch]:
    """Yield the batches of the DataBlock(s) in ``entry``'s byte range, checking them against the entry.

    Args:
        buf: object bytes holding the entry's range; ``buf[0]`` is at object position
            ``base_position`` (0: the whole object; ``entry.block_position``: just the range).
    Raises (while iterating; the last checks run after the last batch):
        TruncatedError, ZeroedError, BadMagicError, BoundsError: block header, dataLength past
        the range, recordCount, a batch of another stream, offsets not contiguous, first or
        last offset or batch count not the entry's.
        ValueError: ``buf`` starts after the entry's range.
    """
    with checks.relocated(base_position):
        for block in _decode_entry_blocks(buf, entry, base_position):
            yield from block


class PlacedBatch(NamedTuple):
    """A batch and where it sits: the object positions of its DataBlock and of the batch itself."""

    block_position: int
    batch_position: int
    batch: StreamRecordBatch


def iter_placed(buf, entry: IndexEntry, *, base_position: int = 0, copy: bool = True) -> Iterator[PlacedBatch]:
    """Like iter_blocks, with each batch's DataBlock position and own position (object positions);
    ``copy=False``: payloads are read-only views of ``buf`` (which must not change), not copies."""
    with checks.relocated(base_position):
        pos = entry.block_position
        for block in _decode_entry_blocks(buf, entry, base_position, copy):
            bpos = pos + DATA_BLOCK_HEADER_SIZE
            for b in block:
                yield PlacedBatch(pos, bpos, b)
                bpos += b.size
            pos = bpos


_BATCH_HEAD = BATCH_STRUCT  # >BqqqII
_BATCH_HEADER_SIZE = _BATCH_HEAD.size
_OFFSET_LIMIT = 1 << 63


def entry_rows(buf, entry: IndexEntry, *, base_position: int = 0) -> list[tuple] | None:
    """The batches of ``entry``'s DataBlock(s) without their payloads, as rows ``(stream_id, base_offset,
    end_offset, count, epoch, payload_bytes, block_position, batch_position)`` (object positions), when
    every check iter_placed makes passes; None when any fails (iter_placed on the same arguments then
    raises the very error, after yielding the batches before it).

    The same checks as iter_placed, as plain comparisons, with no object per batch: a reader that
    shows no payload pays a tuple per batch instead of three objects."""
    start = entry.block_position - base_position
    end = start + entry.block_size
    sid, expected = entry.stream_id, entry.start_offset
    if start < 0 or end > len(buf) or sid < 0 or expected < 0:
        return None
    unpack_block, unpack_batch = DATA_BLOCK_HEADER_STRUCT.unpack_from, _BATCH_HEAD.unpack_from
    head, block_magic, flags_ok = DATA_BLOCK_HEADER_SIZE, DATA_BLOCK_MAGIC, DATA_BLOCK_FLAGS
    batch_head, batch_magic, limit = _BATCH_HEADER_SIZE, BATCH_MAGIC, _OFFSET_LIMIT
    rows: list[tuple] = []
    append = rows.append
    pos = start
    while pos < end:
        if pos + head > end:
            return None
        magic, flags, count, length = unpack_block(buf, pos)
        block_end = pos + head + length
        if magic != block_magic or flags != flags_ok or count < 1 or length < 0 or block_end > end:
            return None
        block_at = pos + base_position
        first = len(rows)
        bpos = pos + head
        while bpos < block_end:
            if bpos + batch_head > block_end:
                return None
            magic, stream_id, epoch, base, n, plen = unpack_batch(buf, bpos)
            nxt = bpos + batch_head + plen
            if magic != batch_magic or stream_id != sid or base != expected or n < 1 or nxt > block_end:
                return None
            expected = base + n
            if expected >= limit:
                return None
            append((stream_id, base, expected, n, epoch, plen, block_at, bpos + base_position))
            bpos = nxt
        if len(rows) - first != count:
            return None
        pos = block_end
    if expected != entry.end_offset or len(rows) != entry.record_count:
        return None
    return rows


@dataclass(frozen=True)
class Problem:
    """One finding of verify_object: where in the object, what, and the error class name.

    Problems inside the data region are located: the DataBlock holding the position
    (``block_position``, ``block_end``) and the stream offsets of its index entry. These and
    ``explanation`` do not take part in equality (a problem is its position, message and kind).
    """

    position: int
    message: str
    kind: str = ""
    block_position: int | None = field(default=None, compare=False)
    block_end: int | None = field(default=None, compare=False)
    stream_id: int | None = field(default=None, compare=False)
    start_offset: int | None = field(default=None, compare=False)
    end_offset: int | None = field(default=None, compare=False)
    explanation: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, exc: FormatError) -> "Problem":
        return cls(exc.offset if exc.offset is not None else 0, exc.what, type(exc).__name__)


@dataclass(frozen=True)
class VerifyReport:
    """verify_report's answer: every problem, and how much was checked (for a verdict)."""

    problems: list[Problem]
    entries: int = 0
    blocks: int = 0
    batches: int = 0
    checksummed: bool = False

    @property
    def healthy(self) -> bool:
        return not self.problems


def _block_at(data, entry: IndexEntry, position: int) -> tuple[int, int]:
    """The DataBlock of ``entry`` holding ``position``: walk the block headers from the entry's start;
    where a header cannot be read, the rest of the entry's range is the block."""
    pos = entry.block_position
    while pos < entry.block_end:
        try:
            header = DataBlockHeader.decode(data, pos)
        except FormatError:
            return pos, entry.block_end
        end = min(pos + header.block_size, entry.block_end)
        if position < end:
            return pos, end
        pos = end
    return entry.block_position, entry.block_end


def _locate(data, entries: list[IndexEntry], problems: list[Problem], index_start: int) -> list[Problem]:
    """Name the DataBlock (and stream offsets) of every problem inside the data region, and say what
    a data crc mismatch comes from: the damaged blocks found, or a payload no check can place."""
    import dataclasses

    by_position = sorted(entries, key=lambda e: e.block_position)
    starts = [e.block_position for e in by_position]
    out: list[Problem] = []
    for p in problems:
        if p.kind not in ("ChecksumError", "uncovered") and p.position < index_start:
            i = bisect.bisect_right(starts, p.position) - 1
            if i >= 0 and p.position < by_position[i].block_end:
                e = by_position[i]
                start, end = _block_at(data, e, p.position)
                p = dataclasses.replace(p, block_position=start, block_end=end, stream_id=e.stream_id,
                                        start_offset=e.start_offset, end_offset=e.end_offset)
        out.append(p)
    damaged = sorted({(p.block_position, p.block_end) for p in out if p.block_position is not None})
    located: list[Problem] = []
    for p in out:
        if p.kind == "ChecksumError" and p.position == 0 and p.message.startswith("object data"):
            if damaged:
                blocks = ", ".join(f"[{a}, {b})" for a, b in damaged)
                why = f"explained by the damaged {'block' if len(damaged) == 1 else 'blocks'} at {blocks}"
            else:
                why = ("every block checks out against its index entry and its batches, so the changed "
                       "bytes lie inside a batch payload, which carries no checksum of its own: no check "
                       "can name the block")
            p = dataclasses.replace(p, explanation=why)
        located.append(p)
    return located


def verify_object(data) -> list[Problem]:
    """Check a whole object and report every problem found, sorted by position (empty: healthy)."""
    return verify_report(data).problems


def verify_report(data) -> VerifyReport:
    """Check a whole object: every problem (sorted by position) and what was checked.

    Footer, index (crc in version 1), data crc (version 1), every entry's blocks, offset gaps
    between a stream's entries, bytes before the index no entry covers, and a version 0 footer
    with bytes where AutoMQ writes zeros. A damaged footer stops the check there: without it
    nothing else can be located. Problems in the data region name their DataBlock.
    """
    problems: list[Problem] = []
    try:
        footer = Footer.decode(data, max(len(data) - FOOTER_SIZE, 0), object_size=len(data))
    except FormatError as exc:
        return VerifyReport([Problem.of(exc)])
    footer_position = len(data) - FOOTER_SIZE
    if not footer.checksummed and any(memoryview(data)[footer_position + 16:footer_position + 40]):
        # Legal for AutoMQ (it ignores these bytes) but it never writes anything there: most
        # likely a walctl footer whose version bit flipped, which would silence every checksum.
        problems.append(Problem(footer_position + 12, "object footer version 0 (AutoMQ, no checksums) with "
                                "non-zero bytes in [16, 40) where AutoMQ writes zeros: a damaged walctl "
                                "version 1 footer?", "version"))
    errors: list[FormatError] = []
    start = footer.index_start_position
    entries = _scan_index(memoryview(data)[start:start + footer.index_block_length], footer, start, errors)
    problems.extend(Problem.of(exc) for exc in errors)
    try:
        check_data_crc(data, footer)
    except FormatError as exc:
        problems.append(Problem.of(exc))
    blocks = batches = 0
    for entry in entries:
        try:
            for block in _decode_entry_blocks(data, entry, 0):
                blocks += 1
                batches += len(block)
        except FormatError as exc:
            problems.append(Problem.of(exc))
    for prev, entry in zip(entries, entries[1:]):
        if entry.stream_id == prev.stream_id and entry.start_offset > prev.end_offset:
            problems.append(Problem(entry.block_position,
                                    f"stream {entry.stream_id}: offsets [{prev.end_offset}, {entry.start_offset}) "
                                    "missing between two index entries", "gap"))
    covered = 0
    for entry in sorted(entries, key=lambda e: e.block_position):
        if entry.block_position > covered:
            problems.append(Problem(covered, f"bytes [{covered}, {entry.block_position}) are not covered by "
                                             "any index entry", "uncovered"))
        covered = max(covered, entry.block_end)
    if covered < start:
        problems.append(Problem(covered, f"bytes [{covered}, {start}) are not covered by any index entry",
                                "uncovered"))
    problems.sort(key=lambda p: p.position)
    return VerifyReport(_locate(data, entries, problems, start), len(entries), blocks, batches, footer.checksummed)
