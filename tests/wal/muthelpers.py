"""Small WAL images built in memory for the read side's unit tests (issue 32): a header object
and records laid out as walctl's writer lays them (blocks 4 KiB aligned, records back to back
inside a block, zero padding after a block's last record), on a MemoryDevice. No writer, no
threads, no files: a scan of one costs milliseconds."""

from __future__ import annotations

from walctl.device import MemoryDevice
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import ALIGN, SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL, WalHeader
from walctl.wal.layout import Ring, align_up
from walctl.wal.ringread import ScanResult

KiB = 1 << 10


def body(sid: int, base: int, size: int = 50, count: int = 1, epoch: int = 0) -> bytes:
    """A StreamRecordBatch body whose payload is a function of (stream, base)."""
    payload = bytes((sid * 31 + base * 7 + i) % 251 for i in range(size))
    return StreamRecordBatch(sid, epoch, base, count, payload).encode()


class Image:
    """A walctl WAL in a MemoryDevice: ``put`` records at logical offsets, ``block`` a block of them."""

    def __init__(self, capacity: int = 64 * KiB, *, window: int = 16 * KiB):
        self.capacity = capacity
        self.ring = Ring(capacity)
        self.dev = MemoryDevice(capacity)
        self.window = window
        self.next = 0  # where the next block starts
        self.offsets: list[int] = []

    def pos(self, offset: int) -> int:
        return self.ring.physical(offset)

    def raw(self, offset: int, data: bytes) -> None:
        p = self.pos(offset)
        assert p + len(data) <= self.capacity
        self.dev.data[p:p + len(data)] = data

    def put(self, offset: int, body_bytes: bytes) -> int:
        """A data record at ``offset``; returns its end."""
        self.raw(offset, rec.encode_record(offset, body_bytes))
        return offset + rec.SIZE + len(body_bytes)

    def padding(self, offset: int, total: int, body_bytes: bytes = b"") -> int:
        head = rec.RecordHeader.padding(offset, total).encode()
        self.raw(offset, head + body_bytes)
        return offset + total

    def block(self, bodies: list[bytes], start: int | None = None) -> list[int]:
        """One block of records at ``start`` (default: the next block); returns their offsets."""
        o = self.next if start is None else start
        out = []
        for b in bodies:
            out.append(o)
            o = self.put(o, b)
        self.end = o
        self.next = align_up(o)
        self.offsets += out
        return out

    def header(self, *, trim: int = -1, clean: bool = True, next_offset: int | None = None,
               window: int | None = None) -> WalHeader:
        return WalHeader(self.capacity, trim_offset=trim, sliding_window_max_length=window or self.window,
                         shutdown_type=SHUTDOWN_GRACEFUL if clean else SHUTDOWN_UNGRACEFUL,
                         next_offset=self.next if next_offset is None else next_offset)

    def result(self, header: WalHeader) -> ScanResult:
        return ScanResult(header, Ring(header.capacity, header.block_size))


def damage(img: Image, offset: int, data: bytes) -> None:
    img.raw(offset, data)


__all__ = ["ALIGN", "Image", "KiB", "body", "damage"]
