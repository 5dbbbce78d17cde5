"""RecordHeader: the 24 bytes before every WAL record body (docs/FORMATS.md 1.2).

    0       4            8            16        20         24
    +-------+------------+------------+---------+----------+------ body (bodyLength bytes)
    | magic | bodyLength | bodyOffset | bodyCrc | headerCrc|
    +-------+------------+------------+---------+----------+
    bodyOffset = logical offset of the record + 24, so a record left over from an
    earlier lap of the ring (same physical place, other logical offset) never
    passes as current. headerCrc = crc32c(bytes [0, 20)).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from walctl.format import checks
from walctl.format.crc import automq_crc, crc32c

DATA_MAGIC = 0x87654321  # a record carrying a body
PADDING_MAGIC = 0x76543210  # fills the rest of a lap (or a sealed hole); its body is never read

STRUCT = struct.Struct(">IIqII")
SIZE = STRUCT.size  # 24
_CRC_SPAN = 20

# bodyLength is a u32 on disk; walctl keeps one record well under a ring anyway.
MAX_BODY_LENGTH = 0xFFFFFFFF


_HEAD = struct.Struct(">IIqI")  # the header's first 20 bytes, which headerCrc covers
_U32 = struct.Struct(">I")


def pack_data_header_into(buf, pos: int, offset: int, body) -> None:
    """Write the header of a data record at logical ``offset`` carrying ``body`` into ``buf[pos:pos + 24]``.

    The same bytes as ``RecordHeader.for_body(offset, body).encode()``, without building the
    dataclass and the intermediate bytes: the WAL writer calls it once per record.
    """
    _HEAD.pack_into(buf, pos, DATA_MAGIC, len(body), offset + SIZE, crc32c(body))
    _U32.pack_into(buf, pos + _CRC_SPAN, crc32c(buf[pos:pos + _CRC_SPAN]))


@dataclass(frozen=True)
class RecordHeader:
    """A decoded record header; ``end`` is the logical offset right after the body."""

    magic: int
    body_length: int
    body_offset: int
    body_crc: int

    @property
    def is_padding(self) -> bool:
        return self.magic == PADDING_MAGIC

    @property
    def offset(self) -> int:
        """The record's own logical offset (its header's)."""
        return self.body_offset - SIZE

    @property
    def end(self) -> int:
        return self.body_offset + self.body_length

    @classmethod
    def for_body(cls, offset: int, body: bytes | memoryview) -> "RecordHeader":
        return cls(DATA_MAGIC, len(body), offset + SIZE, crc32c(body))

    @classmethod
    def padding(cls, offset: int, total_length: int) -> "RecordHeader":
        """A padding record covering [offset, offset + total_length) (header included)."""
        if total_length <= SIZE:
            raise ValueError(f"padding must cover more than its {SIZE}-byte header, got {total_length}")
        return cls(PADDING_MAGIC, total_length - SIZE, offset + SIZE, 0)

    def encode(self, checksum=crc32c) -> bytes:
        head = STRUCT.pack(self.magic, self.body_length, self.body_offset, self.body_crc, 0)[:_CRC_SPAN]
        return head + struct.pack(">I", checksum(head))

    @classmethod
    def decode(cls, buf, offset: int = 0, *, expected_offset: int | None = None,
               checksum=crc32c) -> "RecordHeader":
        """Decode and check a header; ``expected_offset`` is the logical offset it must claim.

        Raises TruncatedError, ZeroedError, BadMagicError, ChecksumError, BoundsError.
        """
        view = checks.need(buf, offset, SIZE, "record header")
        checks.not_zero(view, offset, "record header")
        magic, length, body_offset, body_crc, stored = STRUCT.unpack_from(view)
        checks.magic(magic, (DATA_MAGIC, PADDING_MAGIC), offset, "record header")
        checks.crc(stored, checksum(view[:_CRC_SPAN]), offset + _CRC_SPAN, "record header")
        checks.bound(length > 0, offset + 4, "record bodyLength", length, "> 0")
        if expected_offset is not None:
            checks.bound(body_offset == expected_offset + SIZE, offset + 8, "record bodyOffset", body_offset,
                         f"expected {expected_offset + SIZE}: the record's offset + {SIZE}")
        checks.bound(body_offset >= SIZE, offset + 8, "record bodyOffset", body_offset, f">= {SIZE}")
        return cls(magic, length, body_offset, body_crc)

    def check_body(self, body, offset: int = 0, checksum=crc32c) -> None:
        """Raise ChecksumError unless ``body`` is this record's intact body (padding: nothing to check)."""
        if self.is_padding:
            return
        if len(body) < self.body_length:
            raise checks.TruncatedError(f"record body truncated: need {self.body_length} bytes, found {len(body)}",
                                        offset=offset, expected=self.body_length, found=len(body))
        checks.crc(self.body_crc, checksum(body[:self.body_length]), offset, "record body")


def encode_record(offset: int, body: bytes | memoryview) -> bytes:
    """Header + body of a data record placed at logical ``offset``."""
    return RecordHeader.for_body(offset, body).encode() + bytes(body)


def automq_record_checksum(data) -> int:
    """AutoMQ checksums record headers and bodies with its masked CRC-32."""
    return automq_crc(data)
