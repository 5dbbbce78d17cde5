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
    """The record area of a WAL of ``capacity`` bytes: ``ring`` bytes after the two header slots."""

    capacity: int

    @property
    def size(self) -> int:
        return self.capacity - HEADERS_SIZE

    def physical(self, offset: int) -> int:
        """Physical byte position of logical ``offset``."""
        return HEADERS_SIZE + offset % self.size

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
