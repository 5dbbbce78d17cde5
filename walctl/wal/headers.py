"""Reading and writing the two alternating header slots (FORMATS.md 1.1)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from walctl.device.buffers import aligned_buffer
from walctl.errors import FormatError, NotFoundError
from walctl.format.checkpoint import POSITION as CHECKPOINT_POSITION, Checkpoint
from walctl.format.header import HEADERS_SIZE, SLOT_COUNT, SLOT_SIZE, WalHeader

KEEP = object()  # write_header: carry the current slot's checkpoint over


@dataclass(frozen=True)
class Slot:
    index: int
    header: WalHeader | None
    error: FormatError | None
    checkpoint: Checkpoint | None = None  # FORMATS.md 1.5; None: none written (or damaged)
    checkpoint_error: FormatError | None = None

    def to_json(self) -> dict:
        out: dict = {"slot": self.index, "physical_offset": self.index * SLOT_SIZE, "valid": self.header is not None}
        if self.header is not None:
            out["last_write_timestamp_ns"] = self.header.last_write_timestamp_ns
        if self.error is not None:
            out["error"] = str(self.error)
        out["checkpoint"] = self.checkpoint is not None
        if self.checkpoint_error is not None:
            out["checkpoint_error"] = str(self.checkpoint_error)
        return out


@dataclass(frozen=True)
class HeaderState:
    """Both slots as read, and the current header: the valid slot with the larger timestamp."""

    slots: tuple[Slot, ...]
    current: int

    @property
    def header(self) -> WalHeader:
        header = self.slots[self.current].header
        if header is None:
            raise AssertionError("current slot must be valid")
        return header

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The current slot's checkpoint (None: none, or damaged: the caller scans)."""
        return self.slots[self.current].checkpoint

    @property
    def bad_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.header is None]


def decode_slots(raw: bytes | memoryview) -> HeaderState:
    """Pick the current header from the first 8 KiB of a device; NotFoundError when no slot is valid."""
    slots = []
    for index in range(SLOT_COUNT):
        try:
            header = WalHeader.decode(raw, index * SLOT_SIZE)
        except FormatError as exc:
            slots.append(Slot(index, None, exc))
            continue
        checkpoint, error = None, None
        if header.flavour == "walctl":
            try:
                slot = memoryview(raw)[index * SLOT_SIZE:(index + 1) * SLOT_SIZE]
                checkpoint = Checkpoint.decode(slot, CHECKPOINT_POSITION)
            except FormatError as exc:
                error = exc  # the header stands; without its checkpoint the next open scans
        slots.append(Slot(index, header, None, checkpoint, error))
    valid = [s for s in slots if s.header is not None]
    if not valid:
        reasons = "; ".join(f"slot {s.index}: {s.error}" for s in slots)
        raise NotFoundError("no valid WAL header (not a WAL, or both header slots destroyed)",
                            hint=reasons)
    # Ties (init writes ts and ts+1, so only on damage) go to the later slot.
    best = max(valid, key=lambda s: (s.header.last_write_timestamp_ns, s.index))
    return HeaderState(tuple(slots), best.index)


def read_headers(dev) -> HeaderState:
    buf = aligned_buffer(HEADERS_SIZE)
    dev.pread_into(0, buf)
    return decode_slots(buf)


def next_timestamp(previous_ns: int) -> int:
    """Wall-clock ns, but always above the previous header's, so writes stay ordered across reboots."""
    return max(time.time_ns(), previous_ns + 1)


def write_slot(dev, index: int, header: WalHeader, checkpoint: Checkpoint | None = None) -> None:
    buf = aligned_buffer(SLOT_SIZE)
    buf[:] = header.encode_slot()
    if checkpoint is not None:
        data = checkpoint.encode()
        buf[CHECKPOINT_POSITION:CHECKPOINT_POSITION + len(data)] = data
    # Durability: the device was opened for writing with O_DSYNC (or fdatasync after
    # each write), so the header is on stable media when pwrite returns.
    dev.pwrite(index * SLOT_SIZE, buf)


def write_header(dev, state: HeaderState, header: WalHeader, checkpoint=KEEP) -> HeaderState:
    """Write ``header`` durably into the slot that is not current; return the new state.

    ``checkpoint``: the slot's checkpoint (FORMATS.md 1.5); by default the current one is kept.
    """
    if checkpoint is KEEP:
        checkpoint = state.checkpoint
    header = header.with_(last_write_timestamp_ns=next_timestamp(state.header.last_write_timestamp_ns))
    target = 1 - state.current
    write_slot(dev, target, header, checkpoint)
    slots = list(state.slots)
    slots[target] = Slot(target, header, None, checkpoint)
    return HeaderState(tuple(slots), target)
