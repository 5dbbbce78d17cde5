"""Footer: the last 48 bytes of an object, where its index is (docs/FORMATS.md 3).

    0                    8                  12        16         20        24           40      48
    +--------------------+------------------+---------+----------+---------+------------+-------+
    | indexStartPosition | indexBlockLength | version | indexCrc | dataCrc | 16 x zero  | magic |
    +--------------------+------------------+---------+----------+---------+------------+-------+
    version 1 (walctl): indexCrc = crc32c(IndexBlock), dataCrc = crc32c([0, indexStartPosition)).
    version 0 (AutoMQ): zeros in [12, 40), which AutoMQ ignores; nothing to check.

Integers are signed where AutoMQ writes a Java long or int, so a value with the sign bit
set is refused as out of bounds instead of read as a huge size.
Errors carry ``offset`` = the byte position in the buffer decoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from walctl.format import checks
from walctl.format.crc import crc32c
from walctl.format.index_entry import INDEX_ENTRY_SIZE

FOOTER_MAGIC = 0x88E241B785F4CFF7  # AutoMQ ObjectWriter.Footer.MAGIC

VERSION_AUTOMQ = 0  # AutoMQ writes zeros where walctl keeps its version and checksums
VERSION_WALCTL = 1  # footer carries crc32c of the index and of the data region
VERSIONS = (VERSION_AUTOMQ, VERSION_WALCTL)

FOOTER_STRUCT = struct.Struct(">qiIII16sQ")
FOOTER_SIZE = FOOTER_STRUCT.size  # 48
_FOOTER_RESERVED = bytes(16)


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


def check_data_crc(data, footer: Footer) -> None:
    """Check the version 1 data crc; ``data`` holds the object from position 0 at least to the index.

    Version 0 (AutoMQ) has no data crc: nothing to check.
    Raises TruncatedError, ChecksumError (at position 0: the crc covers the whole data region).
    """
    if not footer.checksummed:
        return
    region = checks.need(data, 0, footer.index_start_position, "object data region")
    checks.crc(footer.data_crc, crc32c(region), 0, f"object data [0, {footer.index_start_position})")
