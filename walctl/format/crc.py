"""The two checksums walctl meets: CRC-32C for its own formats, AutoMQ's masked CRC-32 for forensics."""

from __future__ import annotations

import zlib

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli), full 32 bits; ``value`` continues an earlier checksum."""
    return _crc32c.crc32c(data, value)


def automq_crc(data: bytes | bytearray | memoryview) -> int:
    """AutoMQ's header checksum: java.util.zip.CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF
