"""Where a logical offset lives on the device (docs/FORMATS.md 1): pure arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

from walctl.format.header import ALIGN, HEADERS_SIZE


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def align_down(n: int, a: int = ALIGN) -> int:
    return n // a * a


@dataclass(frozen=True)
class Ring:
    """The record area of a WAL of ``capacity`` bytes: ``ring`` bytes after the two header slots.

    ``block_size``: the size of each header slot and the alignment of blocks: 4096 for walctl's
    own WALs; AutoMQ's is configurable (``WALUtil.BLOCK_SIZE``), so its slots sit at 0 and
    block_size and its record area starts at 2 x block_size (FORMATS.md 6).
    """

    capacity: int
    block_size: int = ALIGN

    @property
    def headers_size(self) -> int:
        return 2 * self.block_size if self.block_size != ALIGN else HEADERS_SIZE

    @property
    def size(self) -> int:
        return self.capacity - self.headers_size

    def physical(self, offset: int) -> int:
        """Physical byte position of logical ``offset``."""
        return self.headers_size + offset % self.size

    def lap(self, offset: int) -> int:
        return offset // self.size

    def lap_end(self, offset: int) -> int:
        """The logical offset where the lap holding ``offset`` ends (records never cross it)."""
        return (offset // self.size + 1) * self.size

    def describe(self, offset: int) -> dict:
        """Where an offset is, the way a finding reports it."""
        return {
            "offset": offset,
            "physical_offset": self.physical(offset),
            "lap": self.lap(offset),
            "offset_mod_4096": offset % ALIGN,
        }
