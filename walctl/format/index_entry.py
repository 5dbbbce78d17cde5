"""Index entry: one DataBlockIndex entry of an object's IndexBlock (docs/FORMATS.md 3).

36 bytes; the IndexBlock holds N of them sorted by (streamId, startOffset) (walctl.format.index):

    0          8             16               20            24              32          36
    +----------+-------------+----------------+-------------+---------------+-----------+
    | streamId | startOffset | endOffsetDelta | recordCount | blockPosition | blockSize |
    +----------+-------------+----------------+-------------+---------------+-----------+

recordCount counts StreamRecordBatches, as AutoMQ does (its "records"), not the stream
offsets they cover. An index entry's range may cover several consecutive DataBlocks of its
stream (as after compaction). Integers are signed where AutoMQ writes a Java long or int,
so a value with the sign bit set is refused as out of bounds instead of read as a huge size.
Errors carry ``offset`` = the byte position in the buffer decoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from walctl.format import checks
from walctl.format.datablock import DATA_BLOCK_HEADER_SIZE

INT32_MAX = (1 << 31) - 1  # AutoMQ's ints (sizes, counts, deltas) are Java ints
INT64_LIMIT = 1 << 63  # stream offsets are Java longs

INDEX_ENTRY_STRUCT = struct.Struct(">qqiiqi")
INDEX_ENTRY_SIZE = INDEX_ENTRY_STRUCT.size  # 36


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
