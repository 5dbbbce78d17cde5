"""SealDescriptor: the crash evidence a sealing padding record carries in its body (FORMATS.md 1.5).

When a writer seals a hole a crash left (FORMATS.md 1.4, sealing), the padding record
that covers it starts its body with this descriptor, so the gap stays explained
after the damaged bytes are gone:

    0       4     6     8           16          24         32              40      44
    +-------+-----+-----+-----------+-----------+----------+---------------+-------+-- n x 24 --+-------+
    | magic | ver | n   | holeStart | holeEnd   | sealedAt | crashedHeader | flags | streams    | crc   |
    +-------+-----+-----+-----------+-----------+----------+---------------+-------+------------+-------+
    stream entry (24): streamId, fromOffset, toOffset (stream offsets [from, to) the hole cost)
    crc = crc32c(bytes [0, 44 + 24 n))

The padding record's own header is unchanged (bodyCrc 0, body never read by the
record rules), so a reader that does not know descriptors skips it as any padding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from walctl.format import checks
from walctl.format.crc import crc32c

MAGIC = 0x5345414C  # "SEAL": a lap-end padding record's body is zeros, so it never starts with this
VERSION = 1
FLAG_STREAMS_TRUNCATED = 1  # more streams lost offsets in the hole than the descriptor lists

STRUCT = struct.Struct(">IHHqqqqI")
FIXED_SIZE = STRUCT.size  # 44
ENTRY = struct.Struct(">qqq")
ENTRY_SIZE = ENTRY.size  # 24
CRC_SIZE = 4
# The descriptor stays inside the first 4 KiB of the padding record (24-byte header included),
# so sealing patches one sector per padding record: 24 + 44 + 24 n + 4 <= 4096 -> n <= 167.
MAX_STREAMS = 160


def size_for(stream_count: int) -> int:
    """Bytes of a descriptor listing ``stream_count`` streams."""
    return FIXED_SIZE + ENTRY_SIZE * stream_count + CRC_SIZE


@dataclass(frozen=True)
class SealDescriptor:
    """What a crash cost, written when the hole was sealed."""

    hole_start: int  # logical WAL offset where the damaged range began
    hole_end: int  # logical WAL offset of the valid record after it
    sealed_at_ns: int  # wall-clock ns when the sealing writer wrote this
    crashed_header_ns: int  # lastWriteTimestamp of the (ungraceful) header the crashed writer left
    streams: tuple[tuple[int, int, int], ...] = ()  # (stream id, from, to): offsets [from, to) lost
    streams_truncated: bool = False

    def encode(self) -> bytes:
        streams = self.streams[:MAX_STREAMS]
        truncated = self.streams_truncated or len(self.streams) > MAX_STREAMS
        head = STRUCT.pack(MAGIC, VERSION, len(streams), self.hole_start, self.hole_end, self.sealed_at_ns,
                           self.crashed_header_ns, FLAG_STREAMS_TRUNCATED if truncated else 0)
        body = head + b"".join(ENTRY.pack(*s) for s in streams)
        return body + struct.pack(">I", crc32c(body))

    @classmethod
    def decode(cls, buf, offset: int = 0) -> "SealDescriptor":
        """Decode and check a descriptor; raises TruncatedError, ZeroedError, BadMagicError,
        ChecksumError, BoundsError (a plain lap-end padding body is all zeros: ZeroedError)."""
        view = checks.need(buf, offset, FIXED_SIZE, "seal descriptor")
        checks.not_zero(view[:4], offset, "seal descriptor")
        magic, version, count, start, end, sealed, crashed, flags = STRUCT.unpack_from(view)
        checks.magic(magic, MAGIC, offset, "seal descriptor")
        checks.bound(version == VERSION, offset + 4, "seal descriptor version", version, f"{VERSION}")
        checks.bound(count <= MAX_STREAMS, offset + 6, "seal descriptor stream count", count, f"<= {MAX_STREAMS}")
        total = size_for(count)
        full = checks.need(buf, offset, total, "seal descriptor")
        (stored,) = struct.unpack_from(">I", full, total - CRC_SIZE)
        checks.crc(stored, crc32c(full[:total - CRC_SIZE]), offset + total - CRC_SIZE, "seal descriptor")
        checks.bound(0 <= start < end, offset + 8, "seal descriptor hole", (start, end), "0 <= start < end")
        streams = tuple(ENTRY.unpack_from(full, FIXED_SIZE + i * ENTRY_SIZE) for i in range(count))
        for i, (sid, lo, hi) in enumerate(streams):
            checks.bound(sid >= 0 and 0 <= lo < hi, offset + FIXED_SIZE + i * ENTRY_SIZE,
                         "seal descriptor stream entry", (sid, lo, hi), "streamId >= 0, 0 <= from < to")
        return cls(start, end, sealed, crashed, streams, bool(flags & FLAG_STREAMS_TRUNCATED))
