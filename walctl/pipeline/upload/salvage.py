"""Salvage (walctl salvage): the way forward from damage that loses nothing intact.

An upload in salvage mode (run.upload(salvage=True)): no writer may run; the scan reads past
damage below the durable end (as recover does); every intact record is uploaded; each stream range
lost in the damage is recorded in the manifest as a gap with cause "corruption" and the WAL offset
of the damage; the damaged bytes are kept as evidence before the trim (here, like crash repair's
``.broken.json``: beside a WAL file, or for a block device in WALCTL_REPAIR_EVIDENCE_DIR); then the
trim to the last record uploaded leaves the damage behind the trim point, and appends go on.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from walctl.errors import IOFailure, RefusedError

if TYPE_CHECKING:
    from walctl.pipeline.upload.state import UploadRun

# At most this many bytes of each damaged range are kept (a whole lap of garbage is not evidence
# worth its size; the range's start, end and length are always recorded).
EVIDENCE_RANGE_BYTES = 1 << 20


def check_can_salvage(wal_path: str, is_block_device: bool) -> None:
    """Refuse before anything is read or uploaded: a writer holds the WAL, or a block device has no
    place for the evidence (WALCTL_REPAIR_EVIDENCE_DIR)."""
    from walctl.device.locks import lock_holder
    from walctl.wal.crash_repair import EVIDENCE_DIR_ENV

    holder = lock_holder(wal_path)
    if holder is not None:
        raise RefusedError(f"a writer (pid {holder}) holds the WAL", where=wal_path,
                           hint="stop it first: salvage reads the log as it lies, and trims it at the end")
    if is_block_device and not os.environ.get(EVIDENCE_DIR_ENV):
        raise RefusedError("salvage keeps the damaged bytes as evidence, and a block device has no folder for them",
                           where=wal_path, hint=f"set {EVIDENCE_DIR_ENV} to a directory on another disk")


def keep_evidence(u: UploadRun) -> None:
    """Write the damaged ranges' bytes durably (before the trim), and list them in the result."""
    from walctl.wal.crash_repair import EVIDENCE_DIR_ENV, evidence_path, write_evidence
    from walctl.wal.layout import Ring

    ring = Ring(u.header.capacity)
    ranges = [_damaged(u.dev, ring, f) for f in u.damage]
    u.result.damage = [{k: v for k, v in r.items() if k != "hex"} for r in ranges]
    now = time.time_ns()
    # (check_can_salvage refused a block device without WALCTL_REPAIR_EVIDENCE_DIR: never None here)
    target = evidence_path(u.wal_path, now, getattr(u.dev, "is_block_device", False), kind="salvage")
    doc = {"type": "salvage", "wal": u.wal_path, "salvaged_at_ns": now, "evidence_file": target, "damage": ranges}
    try:
        write_evidence(target, doc)  # (crash repair's: durable and whole before the trim)
    except OSError as exc:
        raise IOFailure(f"cannot keep the damaged bytes: {exc.strerror}", where=target,
                        hint=f"the records are uploaded, the WAL is not trimmed; free space there (or set "
                             f"{EVIDENCE_DIR_ENV}) and rerun salvage") from exc
    u.result.evidence_file = target


def _damaged(dev, ring, finding) -> dict:
    """One damaged range: where, why, and its bytes (at most EVIDENCE_RANGE_BYTES, within its lap)."""
    from walctl.device.buffers import aligned_buffer
    from walctl.wal.layout import align_down, align_up

    start = finding.offset
    end = finding.end_offset if finding.end_offset is not None and finding.end_offset > start else align_up(start + 1)
    kept = min(end, start + EVIDENCE_RANGE_BYTES, ring.lap_end(start)) - start
    phys = ring.physical(start)
    first = align_down(phys)
    buf = aligned_buffer(align_up(phys + kept) - first)
    dev.pread_into(first, buf)
    return {"offset": start, "end_offset": end, "length_bytes": end - start, "kept_bytes": kept,
            "kind": getattr(finding.kind, "value", finding.kind), "reason": finding.reason, "rule": finding.verdict_rule,
            "physical_offset": phys, "hex": bytes(buf[phys - first:phys - first + kept]).hex()}
