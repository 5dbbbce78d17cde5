"""StreamRecordBatch: the body of a WAL record and the unit inside objects (docs/FORMATS.md 2).

    0     1          9        17           25      29              33
    +-----+----------+--------+------------+-------+---------------+---------
    |0x22 | streamId | epoch  | baseOffset | count | payloadLength | payload
    +-----+----------+--------+------------+-------+---------------+---------
    The batch covers stream offsets [baseOffset, baseOffset + count).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from walctl.format import checks

MAGIC = 0x22  # AutoMQ's StreamRecordBatch magic
STRUCT = struct.Struct(">BqqqII")
HEADER_SIZE = STRUCT.size  # 33


@dataclass(frozen=True)
class StreamRecordBatch:
    """A StreamRecordBatch (docs/FORMATS.md): a run of one stream's records, and its payload."""

    stream_id: int
    epoch: int
    base_offset: int
    count: int
    payload: bytes

    @property
    def end_offset(self) -> int:
        """The stream offset right after this batch (the next batch's baseOffset)."""
        return self.base_offset + self.count

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.payload)

    def encode(self) -> bytes:
        return STRUCT.pack(MAGIC, self.stream_id, self.epoch, self.base_offset, self.count,
                           len(self.payload)) + self.payload

    @classmethod
    def decode(cls, buf, offset: int = 0, *, exact: bool = False, copy: bool = True) -> "StreamRecordBatch":
        """Decode one batch at ``offset``; ``exact`` demands it end exactly at the buffer's end.

        ``copy=False``: the payload is a read-only view of ``buf`` (no copy), for a ``buf`` that
        never changes, such as ``bytes``."""
        view = checks.need(buf, offset, HEADER_SIZE, "StreamRecordBatch header")
        checks.not_zero(view, offset, "StreamRecordBatch header")
        magic, stream_id, epoch, base, count, length = STRUCT.unpack_from(view)
        checks.magic(magic, MAGIC, offset, "StreamRecordBatch", width=2)
        checks.bound(stream_id >= 0, offset + 1, "StreamRecordBatch streamId", stream_id, ">= 0")
        checks.bound(base >= 0, offset + 17, "StreamRecordBatch baseOffset", base, ">= 0")
        checks.bound(count >= 1, offset + 25, "StreamRecordBatch count", count, ">= 1")
        checks.bound(base + count < 1 << 63, offset + 25, "StreamRecordBatch end offset", base + count, "< 2^63")
        payload = checks.need(buf, offset + HEADER_SIZE, length, "StreamRecordBatch payload")
        if exact:
            trailing = len(buf) - (offset + HEADER_SIZE + length)
            checks.bound(trailing == 0, offset + HEADER_SIZE + length, "bytes after StreamRecordBatch",
                         trailing, "0: the batch must fill the record body")
        return cls(stream_id, epoch, base, count, bytes(payload) if copy else payload.toreadonly())
