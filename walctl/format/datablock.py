"""DataBlock header: the 10 bytes before each DataBlock of an object (docs/FORMATS.md 3).

A DataBlock is this header then the block's StreamRecordBatches back to back, all of one stream:

    0      1      2             6            10
    +------+------+-------------+------------+---------------------------------
    | 0x5A | 0x02 | recordCount | dataLength | StreamRecordBatch ... (dataLength bytes)
    +------+------+-------------+------------+---------------------------------

recordCount counts StreamRecordBatches, as AutoMQ does (its "records"), not the stream
offsets they cover. Integers are signed where AutoMQ writes a Java int, so a value with the
sign bit set is refused as out of bounds instead of read as a huge size.
Errors carry ``offset`` = the byte position in the buffer decoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from walctl.format import checks

DATA_BLOCK_MAGIC = 0x5A  # AutoMQ ObjectWriter's DataBlock magic
DATA_BLOCK_FLAGS = 0x02  # AutoMQ's default flag: uncompressed; the only kind either side writes

DATA_BLOCK_HEADER_STRUCT = struct.Struct(">BBii")
DATA_BLOCK_HEADER_SIZE = DATA_BLOCK_HEADER_STRUCT.size  # 10


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
