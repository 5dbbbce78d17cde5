"""Crash repair: make a crashed writer's damage in the last window unreadable as damage
(FORMATS.md 1.4 "crash repair", 1.5 the seal descriptor it leaves), keeping what it overwrites.

("Sealing" in the format document; in code, "repair" — a block being *sealed* is the
writer closing it for its write, walctl.wal.writer.)

Before the first byte is patched, the bytes each patch overwrites are kept (like etcd's
repair keeps the damaged file as ``.broken``): in a side file next to a file WAL,
``<wal>.repair-<repaired_at_ns>.broken.json``; for a block device, in the directory
``WALCTL_REPAIR_EVIDENCE_DIR`` names (a device node's directory takes no files), else
only in the RepairResult (``evidence``, hex in its JSON) and a warning says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import os
import time
from dataclasses import dataclass, field

from walctl.device.buffers import aligned_buffer
from walctl.errors import CorruptionError, IOFailure
from walctl.format import record as rec
from walctl.format.header import SHUTDOWN_GRACEFUL, WalHeader
from walctl.format.seal import SealDescriptor
from walctl.wal import gaps
from walctl.wal.findings import BAD_BATCH, END_MISMATCH, HOLE
from walctl.wal.layout import Ring, align_down, align_up
from walctl.wal.reader import ScanResult, scan_report

if TYPE_CHECKING:
    from walctl.device.base import Device

EVIDENCE_DIR_ENV = "WALCTL_REPAIR_EVIDENCE_DIR"  # where a block device's repair evidence goes


@dataclass(frozen=True)
class Overwritten:
    """Bytes crash repair overwrote: at WAL ``offset`` (device byte ``physical_offset``), as they were."""

    offset: int
    physical_offset: int
    data: bytes

    def to_json(self) -> dict:
        return {"offset": self.offset, "physical_offset": self.physical_offset, "length_bytes": len(self.data),
                "hex": self.data.hex()}


@dataclass
class RepairResult:
    """What one crash repair did: the ranges patched and the bytes they held."""

    repaired_at_ns: int
    crashed_header_timestamp_ns: int
    evidence: list[Overwritten] = field(default_factory=list)
    evidence_file: str | None = None  # where the evidence was kept (None: only here)

    @property
    def ranges(self) -> int:
        return len(self.evidence)

    def to_json(self) -> dict:
        return {"type": "crash_repair", "repaired_at_ns": self.repaired_at_ns,
                "crashed_header_timestamp_ns": self.crashed_header_timestamp_ns,
                "evidence_file": self.evidence_file, "overwritten": [o.to_json() for o in self.evidence]}


def repair_crash_damage(dev: Device, header: WalHeader, result: ScanResult, *, path: str | None = None,
                        warnings: list[str] | None = None) -> RepairResult:
    """Make crash damage of the last window unreadable as damage (FORMATS.md 1.4, crash repair).

    Holes followed by valid records become padding records carrying a seal descriptor (the
    chain then jumps to the next valid record); torn records past the end of the log lose
    their header, so a later, shorter log never meets them as a bad body. The bytes each
    patch overwrites are kept first (module docstring); ``path`` is the WAL's path.

    Raises:
        CorruptionError: the repaired log does not scan clean (nothing new was written).
    """
    ring = Ring(header.capacity)
    repair = RepairResult(time.time_ns(), header.last_write_timestamp_ns)
    patches = _patches(ring, header, result, repair.repaired_at_ns)
    if not patches:
        return repair
    repair.evidence = [_original(dev, ring, offset, len(data)) for offset, data in patches]
    repair.evidence_file = _keep_evidence(repair, path, getattr(dev, "is_block_device", False), warnings)
    for offset, data in patches:
        _patch(dev, ring, offset, data)
    _check_repaired(dev, header, result)
    return repair


def _patches(ring: Ring, header: WalHeader, result: ScanResult, repaired_at_ns: int) -> list[tuple[int, bytes]]:
    """(WAL offset, bytes to write there), in log order."""
    patches: dict[int, bytes] = {}

    def fill(start: int, end: int, evidence: bytes = b"") -> None:
        """Make [start, end) skippable: zeros up to the 4 KiB boundary, then padding records,
        one per lap (a record never crosses the end of a lap), each starting its body with
        ``evidence`` (the seal descriptor) where it has room."""
        boundary = min(align_up(start), end)
        if start % 4096:
            patches[start] = bytes(boundary - start)
        while boundary < end:
            stop = min(end, ring.lap_end(boundary))
            data = rec.RecordHeader.padding(boundary, stop - boundary).encode()
            if len(evidence) <= min(stop - boundary, 4096) - len(data):
                data += evidence
            patches[boundary] = data
            boundary = stop

    # The crash evidence outlives the damaged bytes (FORMATS.md 1.5): each sealed hole says
    # what it covered, when it was sealed, and which stream offsets it cost.
    holes = gaps.holes_of(result.findings, [])
    for finding in result.findings:
        if finding.kind == HOLE and finding.end_offset is not None:
            costs = [(g.stream_id, g.from_offset, g.to_offset) for g in result.stream_gaps
                     if (h := gaps.explain(g, holes)) is not None and h.start == finding.offset]
            evidence = SealDescriptor(finding.offset, finding.end_offset, repaired_at_ns,
                                      header.last_write_timestamp_ns, tuple(costs)).encode()
            fill(finding.offset, finding.end_offset, evidence)
    # Past the end of the log: zero from each torn record's header to the next 4 KiB boundary,
    # so neither its header nor the rest of its body can be read there again.
    for offset in result.torn_offsets + result.unaligned_damage:
        if offset >= result.end_offset:
            patches.setdefault(offset, bytes(align_up(offset + 1) - offset))
    return sorted(patches.items())


def _original(dev: Device, ring: Ring, offset: int, length: int) -> Overwritten:
    phys = ring.physical(offset)
    start = align_down(phys)
    buf = aligned_buffer(align_up(phys + length) - start)
    dev.pread_into(start, buf)
    return Overwritten(offset, phys, bytes(buf[phys - start:phys - start + length]))


def evidence_path(path: str | None, repaired_at_ns: int, is_block_device: bool, kind: str = "repair") -> str | None:
    """Where a repair (``kind``; salvage passes "salvage") of the WAL at ``path`` keeps the bytes it
    overwrites or trims away, or None (nowhere to put it)."""
    if path is None:
        return None
    suffix = f".{kind}-{repaired_at_ns}.broken.json"
    if not is_block_device:
        return path + suffix
    folder = os.environ.get(EVIDENCE_DIR_ENV)
    return os.path.join(folder, os.path.basename(path) + suffix) if folder else None


def _keep_evidence(repair: RepairResult, path: str | None, is_block_device: bool,
                   warnings: list[str] | None) -> str | None:
    """Write the evidence durably (before any patch) where evidence_path says; return that path."""
    from walctl import sizes

    target = evidence_path(path, repair.repaired_at_ns, is_block_device)
    total = sum(len(o.data) for o in repair.evidence)
    if target is None:
        if warnings is not None:
            warnings.append(f"crash repair overwrote {sizes.plural(total, 'byte')} in {sizes.plural(repair.ranges, 'range')}; "
                            f"they are kept "
                            f"only in this run's result: set {EVIDENCE_DIR_ENV} to keep them in a file")
        return None
    doc = {"wal": path, **repair.to_json()}
    doc["evidence_file"] = target
    try:
        write_evidence(target, doc)
    except OSError as exc:
        raise IOFailure(f"cannot keep the bytes crash repair would overwrite: {exc.strerror}", where=target,
                        hint=f"nothing was repaired; free space there (or set {EVIDENCE_DIR_ENV})") from exc
    if warnings is not None:
        warnings.append(f"crash repair overwrote {sizes.plural(total, 'byte')} in {sizes.plural(repair.ranges, 'range')}; "
                        f"the bytes they "
                        f"held are kept in {target}")
    return target


def write_evidence(target: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``target`` durably and whole (a temp file, fsync, rename, fsync of the
    folder): evidence is kept before the bytes it describes are overwritten or trimmed away."""
    tmp = target + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    folder = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _patch(dev: Device, ring: Ring, offset: int, data: bytes) -> None:
    """Read, patch and durably rewrite the 4 KiB sectors holding logical [offset, offset+len(data))."""
    phys = ring.physical(offset)
    start = align_down(phys)
    buf = aligned_buffer(align_up(phys + len(data)) - start)
    dev.pread_into(start, buf)
    buf[phys - start:phys - start + len(data)] = data
    # Durability: O_DSYNC / fdatasync as every WAL write; repair is done before the first new block.
    dev.pwrite(start, buf)


def _check_repaired(dev: Device, header: WalHeader, result: ScanResult) -> None:
    """The repaired log must scan clean, to the same end, with the same records."""
    check = scan_report(dev, header.with_(shutdown_type=SHUTDOWN_GRACEFUL, next_offset=result.next_block_offset),
                        probe=False)
    leftover = [f for f in check.findings if f.kind not in (END_MISMATCH, BAD_BATCH)]
    if leftover or check.end_offset != result.end_offset or check.records != result.records:
        first = leftover[0] if leftover else None
        raise CorruptionError("crash repair did not leave a clean log" +
                              (f" ({first.kind} at offset {first.offset}: {first.reason})" if first else ""),
                              offset=result.end_offset, hint="nothing new was written; inspect with 'walctl recover'")
