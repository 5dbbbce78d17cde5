"""Objects (Stream Set Object or Stream Object): data blocks, index, footer (docs/FORMATS.md 3).

    0                                              indexStartPosition            object_size
    | DataBlock | DataBlock | ... | DataBlock       | IndexBlock: N x 36 | Footer: 48 |

DataBlock, 10-byte header then the block's StreamRecordBatches back to back, all of one stream:

    0      1      2             6            10
    +------+------+-------------+------------+---------------------------------
    | 0x5A | 0x02 | recordCount | dataLength | StreamRecordBatch ... (dataLength bytes)
    +------+------+-------------+------------+---------------------------------

Index entry, 36 bytes, entries sorted by (streamId, startOffset):

    0          8             16               20            24              32          36
    +----------+-------------+----------------+-------------+---------------+-----------+
    | streamId | startOffset | endOffsetDelta | recordCount | blockPosition | blockSize |
    +----------+-------------+----------------+-------------+---------------+-----------+

Footer, 48 bytes, the last bytes of the object:

    0                    8                  12        16         20        24           40      48
    +--------------------+------------------+---------+----------+---------+------------+-------+
    | indexStartPosition | indexBlockLength | version | indexCrc | dataCrc | 16 x zero  | magic |
    +--------------------+------------------+---------+----------+---------+------------+-------+
    version 1 (walctl): indexCrc = crc32c(IndexBlock), dataCrc = crc32c([0, indexStartPosition)).
    version 0 (AutoMQ): zeros in [12, 40), which AutoMQ ignores; nothing to check.

recordCount (in a block header and in an index entry) counts StreamRecordBatches, as
AutoMQ does (its "records"), not the stream offsets they cover. An index entry's
range may cover several consecutive DataBlocks of its stream (as after compaction).
Integers are signed where AutoMQ writes a Java long or int, so a value with the sign
bit set is refused as out of bounds instead of read as a huge size.
Errors carry ``offset`` = the byte position in the object.
"""

from __future__ import annotations

import bisect
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator, NamedTuple, Sequence

from walctl import defaults
from walctl.errors import FormatError
from walctl.format import checks
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c

DATA_BLOCK_MAGIC = 0x5A  # AutoMQ ObjectWriter's DataBlock magic
DATA_BLOCK_FLAGS = 0x02  # AutoMQ's default flag: uncompressed; the only kind either side writes
FOOTER_MAGIC = 0x88E241B785F4CFF7  # AutoMQ ObjectWriter.Footer.MAGIC

VERSION_AUTOMQ = 0  # AutoMQ writes zeros where walctl keeps its version and checksums
VERSION_WALCTL = 1  # footer carries crc32c of the index and of the data region
VERSIONS = (VERSION_AUTOMQ, VERSION_WALCTL)

DEFAULT_BLOCK_SIZE = defaults.DEFAULT_BLOCK_SIZE  # FORMATS.md 3: a block closes once its payload reaches 1 MiB
# Guess for the first ranged read of an object's tail: the footer plus this many index
# entries (about 9 KiB) catches the whole index of most objects in one GET.
DEFAULT_ENTRIES_GUESS = 256

INT32_MAX = (1 << 31) - 1  # AutoMQ's ints (sizes, counts, deltas) are Java ints
INT64_LIMIT = 1 << 63  # stream offsets are Java longs

DATA_BLOCK_HEADER_STRUCT = struct.Struct(">BBii")
DATA_BLOCK_HEADER_SIZE = DATA_BLOCK_HEADER_STRUCT.size  # 10

INDEX_ENTRY_STRUCT = struct.Struct(">qqiiqi")
INDEX_ENTRY_SIZE = INDEX_ENTRY_STRUCT.size  # 36

FOOTER_STRUCT = struct.Struct(">qiIII16sQ")
FOOTER_SIZE = FOOTER_STRUCT.size  # 48
_FOOTER_RESERVED = bytes(16)


@contextmanager
def _relocated(delta: int):
    """Turn positions of errors raised inside from buffer positions into object positions."""
    try:
        yield
    except FormatError as exc:
        if exc.offset is not None:
            exc.offset += delta
        raise


# --- DataBlock header -------------------------------------------------------------------------

@dataclass(frozen=True)
class DataBlockHeader:
    """The 10 bytes before a DataBlock's batches; ``data_length`` = block size - 10."""

    SIZE: ClassVar[int] = DATA_BLOCK_HEADER_SIZE

    record_count: int
    data_length: int

    @property
    def block_size(self) -> int:
        return DATA_BLOCK_HEADER_SIZE + self.data_length

    def encode(self) -> bytes:
        return DATA_BLOCK_HEADER_STRUCT.pack(DATA_BLOCK_MAGIC, DATA_BLOCK_FLAGS, self.record_count,
                                             self.data_length)

    @classmethod
    def decode(cls, buf, offset: int = 0) -> "DataBlockHeader":
        """Raises TruncatedError, ZeroedError, BadMagicError, BoundsError."""
        view = checks.need(buf, offset, DATA_BLOCK_HEADER_SIZE, "DataBlock header")
        checks.not_zero(view, offset, "DataBlock header")
        magic, flags, count, length = DATA_BLOCK_HEADER_STRUCT.unpack_from(view)
        checks.magic(magic, DATA_BLOCK_MAGIC, offset, "DataBlock header", width=2)
        checks.bound(flags == DATA_BLOCK_FLAGS, offset + 1, "DataBlock flags", f"0x{flags:02X}",
                     f"0x{DATA_BLOCK_FLAGS:02X}: uncompressed, the only kind known")
        checks.bound(count >= 1, offset + 2, "DataBlock recordCount", count, ">= 1")
        checks.bound(length >= 0, offset + 6, "DataBlock dataLength", length, ">= 0")
        return cls(count, length)


# --- index entry ------------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexEntry:
    """One DataBlockIndex entry: stream offsets [start_offset, end_offset) live in
    object bytes [block_position, block_position + block_size)."""

    SIZE: ClassVar[int] = INDEX_ENTRY_SIZE

    stream_id: int
    start_offset: int
    end_offset_delta: int
    record_count: int
    block_position: int
    block_size: int

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.end_offset_delta

    @property
    def block_end(self) -> int:
        """The object position right after the entry's last block."""
        return self.block_position + self.block_size

    def encode(self) -> bytes:
        return INDEX_ENTRY_STRUCT.pack(self.stream_id, self.start_offset, self.end_offset_delta,
                                       self.record_count, self.block_position, self.block_size)

    @classmethod
    def decode(cls, buf, offset: int = 0) -> "IndexEntry":
        """Decode one entry and check its own fields (the object-wide checks are decode_index's).

        Raises TruncatedError, ZeroedError, BoundsError.
        """
        view = checks.need(buf, offset, INDEX_ENTRY_SIZE, "index entry")
        checks.not_zero(view, offset, "index entry")
        entry = cls(*INDEX_ENTRY_STRUCT.unpack_from(view))
        what = "index entry"
        checks.bound(entry.stream_id >= 0, offset, f"{what} streamId", entry.stream_id, ">= 0")
        checks.bound(entry.start_offset >= 0, offset + 8, f"{what} startOffset", entry.start_offset, ">= 0")
        # Every block holds >= 1 batch and every batch covers >= 1 offset: an empty range lies.
        checks.bound(entry.end_offset_delta >= 1, offset + 16, f"{what} endOffsetDelta",
                     entry.end_offset_delta, ">= 1")
        checks.bound(entry.end_offset < INT64_LIMIT, offset + 16, f"{what} end offset", entry.end_offset,
                     "< 2^63")
        checks.bound(entry.record_count >= 1, offset + 20, f"{what} recordCount", entry.record_count, ">= 1")
        checks.bound(entry.block_position >= 0, offset + 24, f"{what} blockPosition", entry.block_position,
                     ">= 0")
        checks.bound(entry.block_size >= DATA_BLOCK_HEADER_SIZE, offset + 32, f"{what} blockSize",
                     entry.block_size, f">= {DATA_BLOCK_HEADER_SIZE}: one DataBlock header at least")
        return entry


# --- footer -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Footer:
    """The last 48 bytes of an object: where the index is and, in version 1, the checksums."""

    SIZE: ClassVar[int] = FOOTER_SIZE

    index_start_position: int
    index_block_length: int
    version: int = VERSION_WALCTL
    index_crc: int = 0
    data_crc: int = 0

    @property
    def checksummed(self) -> bool:
        """Version 1 carries checksums; AutoMQ's version 0 has only zeros there."""
        return self.version == VERSION_WALCTL

    @property
    def entry_count(self) -> int:
        return self.index_block_length // INDEX_ENTRY_SIZE

    @property
    def object_size(self) -> int:
        """The size of the object this footer ends."""
        return self.index_start_position + self.index_block_length + FOOTER_SIZE

    def encode(self) -> bytes:
        if self.version not in VERSIONS:
            raise ValueError(f"footer version {self.version} unknown, expected one of {VERSIONS}")
        return FOOTER_STRUCT.pack(self.index_start_position, self.index_block_length, self.version,
                                  self.index_crc, self.data_crc, _FOOTER_RESERVED, FOOTER_MAGIC)

    @classmethod
    def decode(cls, buf, offset: int = 0, *, object_size: int | None = None) -> "Footer":
        """Decode the footer at ``offset``; ``object_size`` (when known) must be where it ends the object.

        A bad magic means "not an object of this format" (the caller's exit 4), unlike
        every other failure here, which is damage.
        Raises TruncatedError, ZeroedError, BadMagicError, BoundsError.
        """
        what = "object footer"
        view = checks.need(buf, offset, FOOTER_SIZE, what)
        checks.not_zero(view, offset, what)
        start, length, version, index_crc, data_crc, reserved, magic = FOOTER_STRUCT.unpack_from(view)
        checks.magic(magic, FOOTER_MAGIC, offset + 40, what, width=16)
        checks.bound(version in VERSIONS, offset + 12, f"{what} version", version,
                     "0 (AutoMQ) or 1 (walctl)")
        checks.bound(start >= 0, offset, f"{what} indexStartPosition", start, ">= 0")
        checks.bound(length >= 0 and length % INDEX_ENTRY_SIZE == 0, offset + 8,
                     f"{what} indexBlockLength", length, f">= 0 and a multiple of {INDEX_ENTRY_SIZE}")
        if version == VERSION_WALCTL:
            # AutoMQ ignores [12, 40) and so does a version 0 read; walctl's own footer keeps zeros.
            checks.bound(reserved == _FOOTER_RESERVED, offset + 24, f"{what} reserved bytes", reserved.hex(),
                         "all zero")
        if object_size is not None:
            end = start + length + FOOTER_SIZE
            checks.bound(end == object_size, offset, f"{what} indexStartPosition + indexBlockLength + "
                         f"{FOOTER_SIZE}", end, f"== the object size {object_size}")
        return cls(start, length, version, index_crc, data_crc)


# --- index ------------------------------------------------------------------------------------

def _scan_index(buf, footer: Footer, base_position: int,
                problems: list[FormatError] | None) -> list[IndexEntry]:
    """Decode and check the IndexBlock; raise the first failure, or collect all into ``problems``.

    An entry failing its own checks is left out of the result; the scan goes on.
    """
    def report(exc: FormatError) -> None:
        if problems is None:
            raise exc
        problems.append(exc)

    with _relocated(base_position):
        view = checks.need(buf, 0, footer.index_block_length, "object index block")
    if footer.checksummed:
        try:
            checks.crc(footer.index_crc, crc32c(view), base_position, "object index block")
        except FormatError as exc:
            report(exc)
    found: list[tuple[int, IndexEntry]] = []
    for i in range(footer.entry_count):
        pos = base_position + i * INDEX_ENTRY_SIZE
        try:
            with _relocated(base_position):
                entry = IndexEntry.decode(view, i * INDEX_ENTRY_SIZE)
            checks.bound(entry.block_end <= footer.index_start_position, pos + 24, "index entry block end",
                         entry.block_end, f"<= indexStartPosition {footer.index_start_position}")
            if found:
                prev = found[-1][1]
                checks.bound(entry.stream_id >= prev.stream_id, pos, "index entry streamId", entry.stream_id,
                             f">= the previous entry's {prev.stream_id}: entries sorted by stream")
                if entry.stream_id == prev.stream_id:
                    checks.bound(entry.start_offset >= prev.end_offset, pos + 8, "index entry startOffset",
                                 entry.start_offset, f">= the previous entry's end offset {prev.end_offset}: "
                                 "sorted, no overlapping offset ranges")
        except FormatError as exc:
            report(exc)
            continue
        found.append((i, entry))
    by_position = sorted(found, key=lambda item: item[1].block_position)
    for (_, prev), (i, entry) in zip(by_position, by_position[1:]):
        try:
            checks.bound(entry.block_position >= prev.block_end, base_position + i * INDEX_ENTRY_SIZE + 24,
                         "index entry blockPosition", entry.block_position,
                         f">= {prev.block_end}, the end of the blocks before it: blocks overlap")
        except FormatError as exc:
            report(exc)
    return [entry for _, entry in found]


def decode_index(buf, footer: Footer, *, base_position: int | None = None) -> list[IndexEntry]:
    """Decode the IndexBlock held at ``buf[0:footer.index_block_length]``.

    Args:
        base_position: the object position of ``buf[0]``, for error positions only;
            defaults to ``footer.index_start_position``.
    Raises:
        TruncatedError, ChecksumError (version 1), ZeroedError, BoundsError: entry fields,
        a block past the index start, entries out of order, overlapping offset ranges
        within a stream, overlapping blocks.
    """
    base = footer.index_start_position if base_position is None else base_position
    return _scan_index(buf, footer, base, None)


def check_data_crc(data, footer: Footer) -> None:
    """Check the version 1 data crc; ``data`` holds the object from position 0 at least to the index.

    Version 0 (AutoMQ) has no data crc: nothing to check.
    Raises TruncatedError, ChecksumError (at position 0: the crc covers the whole data region).
    """
    if not footer.checksummed:
        return
    region = checks.need(data, 0, footer.index_start_position, "object data region")
    checks.crc(footer.data_crc, crc32c(region), 0, f"object data [0, {footer.index_start_position})")


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
    with _relocated(tail_position):
        footer = Footer.decode(tail, len(tail) - FOOTER_SIZE if len(tail) >= FOOTER_SIZE else 0,
                               object_size=object_size)
    if footer.index_start_position < tail_position:
        return footer, None
    start = footer.index_start_position - tail_position
    index = memoryview(tail)[start:start + footer.index_block_length]
    return footer, decode_index(index, footer, base_position=footer.index_start_position)


def find_entries(entries: Sequence[IndexEntry], stream_id: int, offset: int) -> list[IndexEntry]:
    """The entries of ``stream_id`` holding offsets >= ``offset``, in order (binary search).

    ``entries`` must be a decoded index: sorted by (stream, start), ranges not overlapping,
    so end offsets within a stream are sorted too.
    """
    first = bisect.bisect_right(entries, (stream_id, offset), key=lambda e: (e.stream_id, e.end_offset))
    last = bisect.bisect_right(entries, stream_id, lo=first, key=lambda e: e.stream_id)
    return list(entries[first:last])


# --- AutoMQ composite objects (read only) -----------------------------------------------------
#
# AutoMQ's CompositeObject / CompositeObjectWriter (s3stream, branch 1.4): an object that holds no
# data, only links to member objects, for one stream's contiguous range:
#
#     0      1        5                                    indexStart             size
#     | 0x52 | count  | count x (objectId 8, blockStartIndex 4, bucketId 2) | index N x 36 | footer 48 |
#
# The index entries are the members' own (their blockPosition is a position in the member);
# entry i belongs to the member with the largest blockStartIndex <= i. The footer is the usual
# 48 bytes with zeros in [12, 40) and magic 0x88E241B785F4CFF8. Members live under
# ObjectUtils.genKey(0, objectId): the same key scheme, in the writer's namespace.

COMPOSITE_FOOTER_MAGIC = 0x88E241B785F4CFF8  # AutoMQ CompositeObject.FOOTER_MAGIC
OBJECTS_BLOCK_MAGIC = 0x52  # AutoMQ CompositeObject.OBJECTS_BLOCK_MAGIC
OBJECTS_BLOCK_HEADER_STRUCT = struct.Struct(">Bi")  # magic, objects count
OBJECTS_BLOCK_HEADER_SIZE = OBJECTS_BLOCK_HEADER_STRUCT.size  # 5
LINKED_OBJECT_STRUCT = struct.Struct(">qih")  # objectId, blockStartIndex, bucketId
LINKED_OBJECT_SIZE = LINKED_OBJECT_STRUCT.size  # 14


def is_composite(tail) -> bool:
    """Whether ``tail`` (an object's last bytes) ends with AutoMQ's composite footer magic."""
    return len(tail) >= FOOTER_SIZE and struct.unpack_from(">Q", tail, len(tail) - 8)[0] == COMPOSITE_FOOTER_MAGIC


@dataclass(frozen=True)
class LinkedObject:
    """One member of a composite object: its index entries are [block_start_index, block_end_index)."""

    object_id: int
    block_start_index: int
    block_end_index: int
    bucket_id: int


@dataclass(frozen=True)
class CompositeObject:
    """A decoded AutoMQ composite object: its members and the index entries that point into them."""

    size: int
    index_start_position: int
    index_block_length: int
    members: list[LinkedObject]
    entries: list[IndexEntry]

    def member_of(self, entry_index: int) -> LinkedObject:
        starts = [m.block_start_index for m in self.members]
        return self.members[bisect.bisect_right(starts, entry_index) - 1]

    def placed_entries(self) -> list[tuple[LinkedObject, IndexEntry]]:
        return [(self.member_of(i), e) for i, e in enumerate(self.entries)]


def decode_composite(buf, object_size: int) -> CompositeObject:
    """Decode a whole composite object (``buf`` holds all ``object_size`` bytes: they are small).

    Raises TruncatedError, BadMagicError (footer or objects block), BoundsError (layout, member
    order, entries not of one stream or not contiguous, as CompositeObjectWriter requires).
    """
    what = "composite object footer"
    checks.need(buf, 0, object_size, "composite object")
    fpos = object_size - FOOTER_SIZE
    checks.need(buf, max(fpos, 0), FOOTER_SIZE, what)
    start, length, _, _, _, _, magic = FOOTER_STRUCT.unpack_from(buf, fpos)
    checks.magic(magic, COMPOSITE_FOOTER_MAGIC, fpos + 40, what, width=16)
    checks.bound(start >= OBJECTS_BLOCK_HEADER_SIZE, fpos, f"{what} indexStartPosition", start,
                 f">= {OBJECTS_BLOCK_HEADER_SIZE}: an objects block comes first")
    checks.bound(length >= 0 and length % INDEX_ENTRY_SIZE == 0, fpos + 8, f"{what} indexBlockLength", length,
                 f">= 0 and a multiple of {INDEX_ENTRY_SIZE}")
    checks.bound(start + length + FOOTER_SIZE == object_size, fpos, f"{what} indexStartPosition + "
                 f"indexBlockLength + {FOOTER_SIZE}", start + length + FOOTER_SIZE, f"== the object size {object_size}")
    block_magic, count = OBJECTS_BLOCK_HEADER_STRUCT.unpack_from(buf, 0)
    checks.magic(block_magic, OBJECTS_BLOCK_MAGIC, 0, "composite objects block", width=2)
    checks.bound(count >= 1 and OBJECTS_BLOCK_HEADER_SIZE + count * LINKED_OBJECT_SIZE == start, 1,
                 "composite objects block count", count,
                 f"({start} - {OBJECTS_BLOCK_HEADER_SIZE}) / {LINKED_OBJECT_SIZE}: the block ends where the index starts")
    n = length // INDEX_ENTRY_SIZE
    raw = [LINKED_OBJECT_STRUCT.unpack_from(buf, OBJECTS_BLOCK_HEADER_SIZE + i * LINKED_OBJECT_SIZE)
           for i in range(count)]
    members = []
    for i, (oid, first, bucket) in enumerate(raw):
        pos = OBJECTS_BLOCK_HEADER_SIZE + i * LINKED_OBJECT_SIZE
        end = raw[i + 1][1] if i + 1 < count else n
        checks.bound(oid >= 0, pos, "composite member objectId", oid, ">= 0")
        checks.bound((first == 0) if i == 0 else first > raw[i - 1][1], pos + 8, "composite member blockStartIndex",
                     first, "0 for the first member, then strictly ascending")
        checks.bound(first < end <= n, pos + 8, "composite member blockStartIndex", first,
                     f"< the next member's and < {n} index entries")
        members.append(LinkedObject(oid, first, end, bucket))
    entries = []
    for i in range(n):
        pos = start + i * INDEX_ENTRY_SIZE
        with _relocated(start):
            entry = IndexEntry.decode(memoryview(buf)[start:start + length], i * INDEX_ENTRY_SIZE)
        if entries:
            prev = entries[-1]
            checks.bound(entry.stream_id == prev.stream_id and entry.start_offset == prev.end_offset, pos,
                         "composite index entry", f"stream {entry.stream_id} offset {entry.start_offset}",
                         f"stream {prev.stream_id} offset {prev.end_offset}: one stream, contiguous")
        entries.append(entry)
    return CompositeObject(object_size, start, length, members, entries)


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
        if self.footer is not None:
            raise ValueError("the object is already finished")
        if not batches:
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
        # One copy of the batches (join with the header first), not two (join, then concatenate).
        data = b"".join([DataBlockHeader(len(batches), sum(len(b) for b in batches)).encode(), *batches])
        if len(data) > INT32_MAX:
            raise ValueError(f"stream {stream_id}: a DataBlock of {len(data)} bytes does not fit a Java int")
        self.entries.append(IndexEntry(stream_id, start_offset, end_offset - start_offset, len(batches),
                                       self.position, len(data)))
        self.position += len(data)
        first = self.ranges.get(stream_id)
        self.ranges[stream_id] = StreamRange(first.start_offset if first else start_offset, end_offset,
                                             self.position - self._stream_start)
        if self.version == VERSION_WALCTL:
            self._data_crc = crc32c(data, self._data_crc)
        return data

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
    with _relocated(base_position):
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
    with _relocated(base_position):
        pos = entry.block_position
        for block in _decode_entry_blocks(buf, entry, base_position, copy):
            bpos = pos + DATA_BLOCK_HEADER_SIZE
            for b in block:
                yield PlacedBatch(pos, bpos, b)
                bpos += b.size
            pos = bpos


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
                why = f"explained by the damaged block(s) at {blocks}"
            else:
                why = ("every block checks out against its index entry and its batches, so the changed "
                       "byte(s) lie inside a batch payload, which carries no checksum of its own: no check "
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
