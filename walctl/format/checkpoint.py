"""Checkpoint: what the next open of a WAL needs, in a header slot's unused bytes (FORMATS.md 1.6).

It follows the 64-byte native header inside the same 4 KiB slot, so it is written
(and alternates, and survives a torn write) together with the header that it belongs to:

    64     68   70    72        80             88     92                     92+16n  96+16n
    +------+----+-----+---------+--------------+------+----------------------+-------+
    |magic |ver |flags|logEnd   |uploadedOffset|count |count x (stream, next)|crc    |  then zeros
    +------+----+-----+---------+--------------+------+----------------------+-------+
    crc = crc32c(slot bytes [64, 92 + 16 * count))

A slot whose bytes from 64 are all zero has no checkpoint (a WAL written before it):
the reader scans as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from walctl.format import checks
from walctl.format.crc import crc32c

CHECKPOINT_MAGIC = 0x5743504B  # "WCPK": walctl checkpoint
CHECKPOINT_VERSION = 1
POSITION = 64  # right after the native WALHeader, inside the same slot
SLOT_SIZE = 4096

FLAG_COMPLETE = 0x0001  # every stream that ever had a record in this WAL is listed
KNOWN_FLAGS = FLAG_COMPLETE

FIXED = struct.Struct(">IHHqqI")  # magic, version, flags, logEnd, uploadedOffset, count
FIXED_SIZE = FIXED.size  # 28
ENTRY = struct.Struct(">qq")  # streamId, next stream offset (end of the stream's last batch)
ENTRY_SIZE = ENTRY.size  # 16
CRC = struct.Struct(">I")
# Bounded: the whole checkpoint fits the slot (64 + 28 + 16 n + 4 <= 4096), so n <= 250.
MAX_STREAMS = (SLOT_SIZE - POSITION - FIXED_SIZE - CRC.size) // ENTRY_SIZE


@dataclass(frozen=True)
class Checkpoint:
    """The log's end and each stream's next offset, as of ``log_end``.

    ``streams`` maps stream id -> next offset. With ``complete`` every stream that ever had a
    record in this WAL is listed (a stream not listed never existed); without it only the
    listed values are known (the others need a scan). ``uploaded_offset`` is the WAL offset
    of the last record an upload committed (-1: none known).
    """

    log_end: int
    streams: dict = field(default_factory=dict)
    complete: bool = False
    uploaded_offset: int = -1

    def encode(self) -> bytes:
        """The checkpoint's bytes (at most 4032), to be placed at slot position 64."""
        if len(self.streams) > MAX_STREAMS:
            raise ValueError(f"{len(self.streams)} streams: at most {MAX_STREAMS} fit a checkpoint")
        flags = FLAG_COMPLETE if self.complete else 0
        parts = [FIXED.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, flags, self.log_end, self.uploaded_offset,
                            len(self.streams))]
        parts += [ENTRY.pack(sid, nxt) for sid, nxt in sorted(self.streams.items())]
        body = b"".join(parts)
        return body + CRC.pack(crc32c(body))

    @classmethod
    def decode(cls, slot, offset: int = POSITION) -> "Checkpoint | None":
        """Decode the checkpoint of a slot (``slot`` holds the whole 4 KiB slot); None when absent.

        Raises the project's FormatError subclasses for a checkpoint that is present but damaged.
        """
        what = "WAL checkpoint"
        view = checks.need(slot, offset, FIXED_SIZE, what)
        if not any(view):
            return None  # written before checkpoints existed, or by a writer that keeps none
        magic, version, flags, log_end, uploaded, count = FIXED.unpack_from(view)
        checks.magic(magic, CHECKPOINT_MAGIC, offset, what)
        checks.bound(version == CHECKPOINT_VERSION, offset + 4, f"{what} version", version,
                     str(CHECKPOINT_VERSION))
        checks.bound(count <= MAX_STREAMS, offset + 24, f"{what} stream count", count, f"<= {MAX_STREAMS}")
        size = FIXED_SIZE + count * ENTRY_SIZE
        body = checks.need(slot, offset, size + CRC.size, what)
        (stored,) = CRC.unpack_from(body, size)
        checks.crc(stored, crc32c(body[:size]), offset + size, what)
        checks.bound(flags & ~KNOWN_FLAGS == 0, offset + 6, f"{what} flags", flags, f"only 0x{KNOWN_FLAGS:04X}")
        checks.bound(log_end >= 0, offset + 8, f"{what} logEnd", log_end, ">= 0")
        checks.bound(uploaded >= -1, offset + 16, f"{what} uploadedOffset", uploaded, ">= -1")
        streams = {}
        for i in range(count):
            sid, nxt = ENTRY.unpack_from(body, FIXED_SIZE + i * ENTRY_SIZE)
            checks.bound(nxt >= 0, offset + FIXED_SIZE + i * ENTRY_SIZE + 8, f"{what} stream {sid} next offset",
                         nxt, ">= 0")
            streams[sid] = nxt
        return cls(log_end, streams, bool(flags & FLAG_COMPLETE), uploaded)

    def to_json(self) -> dict:
        return {"log_end_offset": self.log_end, "complete": self.complete, "uploaded_offset": self.uploaded_offset,
                "streams": len(self.streams),
                "stream_next_offsets": {str(k): v for k, v in sorted(self.streams.items())}}


def bounded(streams: dict, recency: dict | None = None) -> tuple[dict, bool]:
    """At most MAX_STREAMS streams: keep the most recently written (by ``recency``: stream -> WAL
    offset of its last record; else the largest ids). Returns (streams, whether all were kept)."""
    if len(streams) <= MAX_STREAMS:
        return dict(streams), True
    rank = recency or {}
    keep = sorted(streams, key=lambda s: (rank.get(s, -1), s), reverse=True)[:MAX_STREAMS]
    return {s: streams[s] for s in keep}, False
