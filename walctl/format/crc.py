"""The two checksums walctl meets: CRC-32C for its own formats, AutoMQ's masked CRC-32 for forensics."""

from __future__ import annotations

import zlib

import crc32c as _crc32c


# CRC-32C (Castagnoli), full 32 bits: crc32c(data, value=0), ``value`` continuing an earlier
# checksum. The C library's function itself, not a wrapper: no Python frame per call on the
# hot paths (every record header and body, every object block).
crc32c = _crc32c.crc32c


def automq_crc(data: bytes | bytearray | memoryview) -> int:
    """AutoMQ's header checksum: java.util.zip.CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF
