"""Reading and writing the two alternating header slots (docs/FORMATS.md 1.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import time
from dataclasses import dataclass

from dataclasses import replace

from walctl.device.buffers import aligned_buffer
from walctl.errors import FormatError, NotFoundError
from walctl.format.checkpoint import POSITION as CHECKPOINT_POSITION, Checkpoint
from walctl.format.header import ALIGN, AUTOMQ_BLOCK_SIZES, HEADERS_SIZE, SLOT_COUNT, SLOT_SIZE, WalHeader

if TYPE_CHECKING:
    from walctl.device.base import Device

# Bytes read from the device's start to find the header slots: both slots of the largest
# AutoMQ block size tried (2 x 64 KiB).
DETECT_BYTES = 2 * max(AUTOMQ_BLOCK_SIZES)

KEEP = object()  # write_header: carry the current slot's checkpoint over


@dataclass(frozen=True)
class Slot:
    """One header slot as read: its header (None: damaged, ``error`` says why) and checkpoint."""

    index: int
    header: WalHeader | None
    error: FormatError | None
    block_size: int = SLOT_SIZE  # the slot's size: it sits at index x block_size
    checkpoint: Checkpoint | None = None  # FORMATS.md 1.6; None: none written (or damaged)
    checkpoint_error: FormatError | None = None

    @property
    def position(self) -> int:
        return self.index * self.block_size

    def to_json(self) -> dict:
        out: dict = {"slot": self.index, "physical_offset": self.position, "valid": self.header is not None}
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
    # How the block size was established: "native" (walctl: always 4096), "header slots" or
    # "first record" (AutoMQ, detected), "option" (--block-size), "default" (AutoMQ, not detectable).
    block_size_source: str = "native"

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


def decode_slots(raw: bytes | memoryview, block_size: int = SLOT_SIZE, *, source: str = "native") -> HeaderState:
    """Pick the current header from the slots at 0 and ``block_size``; NotFoundError when no slot is valid."""
    slots = []
    for index in range(SLOT_COUNT):
        try:
            header = WalHeader.decode(raw, index * block_size)
            if block_size != SLOT_SIZE:
                header = replace(header, block_size=block_size)
        except FormatError as exc:
            slots.append(Slot(index, None, exc, block_size))
            continue
        checkpoint, error = None, None
        if header.flavour == "walctl":
            try:
                slot = memoryview(raw)[index * SLOT_SIZE:(index + 1) * SLOT_SIZE]
                checkpoint = Checkpoint.decode(slot, CHECKPOINT_POSITION)
            except FormatError as exc:
                error = exc  # the header stands; without its checkpoint the next open scans
        slots.append(Slot(index, header, None, block_size, checkpoint, error))
    valid = [s for s in slots if s.header is not None]
    if not valid:
        reasons = "; ".join(f"slot {s.index}: {s.error}" for s in slots)
        raise NotFoundError("no valid WAL header (not a WAL, or both header slots destroyed)",
                            hint=reasons)
    # Ties (init writes ts and ts+1, so only on damage) go to the later slot.
    best = max(valid, key=lambda s: (s.header.last_write_timestamp_ns, s.index))
    return HeaderState(tuple(slots), best.index, source)


def read_headers(dev: Device, block_size: int | None = None) -> HeaderState:
    """The header slots of a device; AutoMQ's block size is detected unless ``block_size`` is given.

    walctl's own WALs always have 4 KiB slots. AutoMQ's slots are ``WALUtil.BLOCK_SIZE`` bytes
    (JVM option ``automq.ebswal.blocksize``): detected from where its second header slot is, else
    from where its first record is, else AutoMQ's default 4096 (``block_size_source`` says which).
    """
    buf = aligned_buffer(HEADERS_SIZE)
    dev.pread_into(0, buf)
    if block_size is None:
        try:
            state = decode_slots(buf)
        except NotFoundError as exc:
            state, missing = None, exc
        if state is not None and state.header.flavour == "walctl":
            return state  # walctl's own: 4 KiB slots, nothing more to read
    length = max(HEADERS_SIZE, min(DETECT_BYTES, dev.size_bytes // ALIGN * ALIGN))
    if length > HEADERS_SIZE:
        buf = aligned_buffer(length)
        dev.pread_into(0, buf)
    if block_size is not None:
        return decode_slots(buf, block_size, source="option")
    detected = detect_automq_block_size(dev, buf)
    if detected is None:
        if state is None:
            raise missing
        return HeaderState(state.slots, state.current, "default")
    size, source = detected
    return decode_slots(buf, size, source=source)


def detect_automq_block_size(dev: Device, raw) -> tuple[int, str] | None:
    """AutoMQ's block size from the device's first bytes ``raw``: (size, how), or None.

    1. the one candidate size B whose slot at B holds a valid AutoMQ header (the slot at 0 sits at
       0 whatever B is, so only the second slot tells);
    2. else the one B (dividing the capacity, as AutoMQ aligns it) whose ring holds a valid record
       header, with its own offset, where recovery starts (trimOffset, or the block after it).
    """
    def automq(position: int) -> WalHeader | None:
        try:
            header = WalHeader.decode(raw, position)
        except FormatError:
            return None
        return header if header.flavour != "walctl" else None

    first = automq(0)
    candidates = [b for b in AUTOMQ_BLOCK_SIZES if 2 * b <= len(raw)]
    at_b = {b: h for b in candidates if (h := automq(b)) is not None
            and (first is None or first.capacity % b == 0)}
    if len(at_b) == 1:
        return next(iter(at_b)), "header slots"
    reference = first or (max(at_b.values(), key=lambda h: h.last_write_timestamp_ns) if at_b else None)
    if reference is None:
        return None
    pool = list(at_b) or [b for b in candidates if reference.capacity % b == 0]
    hits = [b for b in pool if _record_at_start(dev, reference, b)]
    if len(hits) == 1:
        return hits[0], "first record"
    return None


def _record_at_start(dev: Device, header: WalHeader, block_size: int) -> bool:
    """Whether a valid AutoMQ record header (its own offset, AutoMQ's crc) sits where recovery starts,
    in a ring of ``block_size`` slots."""
    from walctl.format import record as rec
    from walctl.format.crc import automq_crc
    from walctl.wal.layout import Ring

    ring = Ring(header.capacity, block_size)
    if ring.size <= 0 or header.capacity > dev.size_bytes:
        return False
    start = max(header.trim_offset, 0)
    offsets = [start]
    if header.trim_offset >= 0 and (start + 1) % block_size == 0:
        offsets.append(start + 1)  # AutoMQ trims to "first free block - 1" at every start
    for o in offsets:
        phys = ring.physical(o)
        base = phys // ALIGN * ALIGN
        length = min(2 * ALIGN, dev.size_bytes // ALIGN * ALIGN - base)
        if length < phys - base + rec.SIZE:
            continue
        buf = aligned_buffer(length)
        dev.pread_into(base, buf)
        try:
            rec.RecordHeader.decode(memoryview(buf)[phys - base:phys - base + rec.SIZE], expected_offset=o,
                                    checksum=automq_crc)
        except FormatError:
            continue
        return True
    return False


def next_timestamp(previous_ns: int) -> int:
    """Wall-clock ns, but always above the previous header's, so writes stay ordered across reboots."""
    return max(time.time_ns(), previous_ns + 1)


def write_slot(dev: Device, index: int, header: WalHeader, checkpoint: Checkpoint | None = None) -> None:
    buf = aligned_buffer(SLOT_SIZE)
    buf[:] = header.encode_slot()
    if checkpoint is not None:
        data = checkpoint.encode()
        buf[CHECKPOINT_POSITION:CHECKPOINT_POSITION + len(data)] = data
    # Durability: the device was opened for writing with O_DSYNC (or fdatasync after
    # each write), so the header is on stable media when pwrite returns.
    dev.pwrite(index * SLOT_SIZE, buf)


def write_header(dev: Device, state: HeaderState, header: WalHeader, checkpoint=KEEP) -> HeaderState:
    """Write ``header`` durably into the slot that is not current; return the new state.

    ``checkpoint``: the slot's checkpoint (FORMATS.md 1.6); by default the current one is kept.
    """
    if checkpoint is KEEP:
        checkpoint = state.checkpoint
    header = header.with_(last_write_timestamp_ns=next_timestamp(state.header.last_write_timestamp_ns))
    target = 1 - state.current
    write_slot(dev, target, header, checkpoint)
    slots = list(state.slots)
    slots[target] = Slot(target, header, None, SLOT_SIZE, checkpoint)
    return HeaderState(tuple(slots), target)
