"""Building objects: batches grouped into DataBlocks, the index and footer after them (docs/FORMATS.md 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

from walctl import defaults
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.format.datablock import DATA_BLOCK_HEADER_SIZE, INT32_MAX, DataBlockHeader
from walctl.format.footer import VERSION_WALCTL, VERSIONS, Footer
from walctl.format.index_entry import INDEX_ENTRY_SIZE, INT64_LIMIT, IndexEntry
from walctl.format.object_reader import iter_blocks

DEFAULT_BLOCK_SIZE = defaults.DEFAULT_BLOCK_SIZE  # FORMATS.md 3: a block closes once its payload reaches 1 MiB


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


def _group_blocks(batches: Sequence[StreamRecordBatch], block_size: int) -> list[list[StreamRecordBatch]]:
    """Split one stream's batches into DataBlocks: a block closes once its payload reaches block_size."""
    blocks: list[list[StreamRecordBatch]] = []
    current: list[StreamRecordBatch] = []
    payload = 0
    for b in batches:
        if b.count > INT32_MAX or b.size > INT32_MAX - DATA_BLOCK_HEADER_SIZE:
            raise ValueError(f"batch at offset {b.base_offset} too large for one DataBlock index entry")
        # The index's Java ints must hold the block's size and offset span: cut early if not.
        if current and (payload + b.size > INT32_MAX - DATA_BLOCK_HEADER_SIZE
                        or b.end_offset - current[0].base_offset > INT32_MAX):
            blocks.append(current)
            current, payload = [], 0
        current.append(b)
        payload += b.size
        if payload >= block_size:
            blocks.append(current)
            current, payload = [], 0
    if current:
        blocks.append(current)
    return blocks


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
