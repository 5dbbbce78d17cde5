"""WALHeader: the 4 KiB header slots at physical offsets 0 and 4096 (docs/FORMATS.md 1.1).

Native layout, big-endian, 64 bytes, rest of the slot zero:

    0      4      12         20          28            36        40      44     52          60    64
    +------+------+----------+-----------+-------------+---------+-------+------+-----------+-----+
    |magic |capac.|trimOffset|lastWriteTs|slidingWinMax|shutdown |nodeId |epoch |nextOffset |crc  |
    +------+------+----------+-----------+-------------+---------+-------+------+-----------+-----+
    crc = crc32c(bytes [0, 60))

AutoMQ's header (read only, for forensics) is the same up to epoch, then its crc
at 52 (56 bytes), masked CRC-32, magic V0 or V1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from walctl.defaults import ALIGN  # every block write is 4 KiB aligned (Direct IO on 4Kn and 512e disks)
from walctl.format import checks
from walctl.format.crc import automq_crc, crc32c

HEADER_MAGIC = 0x57414C43  # "WALC": walctl's native header
AUTOMQ_MAGIC_V0 = 0x12345678  # AutoMQ BlockWALHeader V0
AUTOMQ_MAGIC_V1 = 0x01234567  # AutoMQ BlockWALHeader V1

SLOT_SIZE = 4096  # each slot is one 4 KiB block, so a slot write is one atomic-ish sector group
SLOT_COUNT = 2  # alternate slots: a torn header write never destroys the only valid copy
HEADERS_SIZE = SLOT_SIZE * SLOT_COUNT  # the record area (ring) starts here

# AutoMQ's block size (WALUtil.BLOCK_SIZE, JVM option automq.ebswal.blocksize, default 4096)
# sizes its header slots and aligns its blocks; sector-sized 512 is the smallest that O_DIRECT allows.
AUTOMQ_MIN_BLOCK_SIZE = 512
AUTOMQ_BLOCK_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)  # powers of two tried on detection

# The smallest useful WAL: the two header slots plus a ring of two 4 KiB blocks.
MIN_CAPACITY = HEADERS_SIZE + 2 * ALIGN

SHUTDOWN_GRACEFUL = 0
SHUTDOWN_UNGRACEFUL = 1

NATIVE = struct.Struct(">IQqqqIiqqI")
SIZE = NATIVE.size  # 64
_CRC_SPAN = SIZE - 4

AUTOMQ = struct.Struct(">IQqqqIiqI")
AUTOMQ_SIZE = AUTOMQ.size  # 56
_AUTOMQ_CRC_SPAN = AUTOMQ_SIZE - 4


@dataclass(frozen=True)
class WalHeader:
    """One header slot's content; ``flavour`` tells walctl's own from AutoMQ's (read only)."""

    capacity: int
    trim_offset: int = -1
    last_write_timestamp_ns: int = 0
    sliding_window_max_length: int = 1 << 20
    shutdown_type: int = SHUTDOWN_GRACEFUL
    node_id: int = -1
    epoch: int = -1
    next_offset: int = 0
    flavour: str = "walctl"  # "walctl", "automq-v0", "automq-v1"
    block_size: int = ALIGN  # header slot size and block alignment (AutoMQ's is configurable)

    @property
    def ring_size(self) -> int:
        """Bytes of the record area: capacity less the two header slots."""
        return self.capacity - (HEADERS_SIZE if self.block_size == ALIGN else 2 * self.block_size)

    @property
    def clean(self) -> bool:
        return self.shutdown_type == SHUTDOWN_GRACEFUL

    def encode(self) -> bytes:
        """The 64 native bytes (walctl never writes AutoMQ's flavour)."""
        if self.flavour != "walctl":
            raise ValueError("walctl writes only its native header")
        body = NATIVE.pack(HEADER_MAGIC, self.capacity, self.trim_offset, self.last_write_timestamp_ns,
                           self.sliding_window_max_length, self.shutdown_type, self.node_id, self.epoch,
                           self.next_offset, 0)[:_CRC_SPAN]
        return body + struct.pack(">I", crc32c(body))

    def encode_slot(self) -> bytes:
        """A whole 4 KiB slot: the header then zeros."""
        return self.encode().ljust(SLOT_SIZE, b"\0")

    def with_(self, **changes) -> "WalHeader":
        return replace(self, **changes)

    def to_json(self) -> dict:
        return {
            "flavour": self.flavour,
            "capacity_bytes": self.capacity,
            "ring_bytes": self.ring_size,
            "trim_offset": self.trim_offset,
            "last_write_timestamp_ns": self.last_write_timestamp_ns,
            "sliding_window_max_length_bytes": self.sliding_window_max_length,
            "shutdown_type": "graceful" if self.clean else "ungraceful",
            "node_id": self.node_id,
            "epoch": self.epoch,
            "next_offset": self.next_offset if self.flavour == "walctl" else None,
            "block_size_bytes": self.block_size,
        }

    @classmethod
    def decode(cls, buf, offset: int = 0) -> "WalHeader":
        """Decode a slot of either flavour; raises the project's FormatError subclasses."""
        # Truncated first (against the smaller flavour), then all-zero, then magic.
        view = checks.need(buf, offset, AUTOMQ_SIZE, "WAL header")
        checks.not_zero(checks.need(buf, offset, min(len(buf) - offset, SIZE), "WAL header"), offset, "WAL header")
        (magic,) = struct.unpack_from(">I", view)
        checks.magic(magic, (HEADER_MAGIC, AUTOMQ_MAGIC_V0, AUTOMQ_MAGIC_V1), offset, "WAL header")
        if magic != HEADER_MAGIC:
            return cls._decode_automq(buf, offset, magic)
        view = checks.need(buf, offset, SIZE, "WAL header")
        (_, capacity, trim, ts, window, shutdown, node, epoch, nxt, stored) = NATIVE.unpack_from(view)
        checks.crc(stored, crc32c(view[:_CRC_SPAN]), offset + _CRC_SPAN, "WAL header")
        header = cls(capacity, trim, ts, window, shutdown, node, epoch, nxt)
        header._check_bounds(offset)
        return header

    @classmethod
    def _decode_automq(cls, buf, offset: int, magic: int) -> "WalHeader":
        view = checks.need(buf, offset, AUTOMQ_SIZE, "AutoMQ WAL header")
        (_, capacity, trim, ts, window, shutdown, node, epoch, stored) = AUTOMQ.unpack_from(view)
        checks.crc(stored, automq_crc(view[:_AUTOMQ_CRC_SPAN]), offset + _AUTOMQ_CRC_SPAN, "AutoMQ WAL header")
        flavour = "automq-v0" if magic == AUTOMQ_MAGIC_V0 else "automq-v1"
        header = cls(capacity, trim, ts, window, shutdown, node, epoch, next_offset=0, flavour=flavour)
        header._check_bounds(offset)
        return header

    def _check_bounds(self, offset: int) -> None:
        what = "WAL header"
        if self.flavour == "walctl":
            min_capacity, multiple, window_max = MIN_CAPACITY, ALIGN, self.ring_size
            window_text = f"1 .. ring size {self.ring_size}"
        else:
            # AutoMQ aligns its capacity to its own block size, which may be as small as 512; the
            # exact ring (capacity - 2 x block size) is known only once the block size is.
            min_capacity, multiple = 4 * AUTOMQ_MIN_BLOCK_SIZE, AUTOMQ_MIN_BLOCK_SIZE
            window_max = self.capacity - 2 * AUTOMQ_MIN_BLOCK_SIZE
            window_text = f"1 .. capacity - {2 * AUTOMQ_MIN_BLOCK_SIZE}"
        checks.bound(self.capacity >= min_capacity and self.capacity % multiple == 0, offset + 4,
                     f"{what} capacity", self.capacity, f">= {min_capacity} and a multiple of {multiple}")
        checks.bound(self.trim_offset >= -1, offset + 12, f"{what} trimOffset", self.trim_offset, ">= -1")
        checks.bound(0 < self.sliding_window_max_length <= window_max, offset + 28,
                     f"{what} slidingWindowMaxLength", self.sliding_window_max_length, window_text)
        checks.bound(self.shutdown_type in (SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL), offset + 36,
                     f"{what} shutdownType", self.shutdown_type, "0 or 1")
        checks.bound(self.node_id >= -1, offset + 40, f"{what} nodeId", self.node_id, ">= -1")
        checks.bound(self.epoch >= -1, offset + 44, f"{what} epoch", self.epoch, ">= -1")
        if self.flavour != "walctl":
            return  # AutoMQ's header has no nextOffset; its timestamp is JVM nanoTime, a signed long
        # lastWriteTimestamp is a signed int64 of wall-clock ns: walctl never writes one with the
        # top bit set, and a reader taking the field as unsigned would order such a slot first.
        # So a set top bit is damage, and the slot is not a candidate at all (FORMATS.md 1.1).
        checks.bound(self.last_write_timestamp_ns >= 0, offset + 20, f"{what} lastWriteTimestamp",
                     self.last_write_timestamp_ns, ">= 0: a signed int64 with the top bit clear")
        checks.bound(self.next_offset >= 0 and self.next_offset % ALIGN == 0, offset + 52,
                     f"{what} nextOffset", self.next_offset, f">= 0 and a multiple of {ALIGN}")
        checks.bound(self.next_offset >= self.trim_offset, offset + 52, f"{what} nextOffset",
                     self.next_offset, f">= trimOffset {self.trim_offset}")
