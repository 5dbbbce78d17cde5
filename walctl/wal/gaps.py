"""Why a stream's offsets jump inside the WAL: crash holes (sealed or not) and the gaps they explain.

A stream's batches are contiguous (FORMATS.md 2). Inside a WAL the only honest reason
for a jump is a crash that lost a block in flight (never acknowledged): the scan shows
it as a hole finding before sealing, and as a sealed padding record carrying a seal
descriptor after (FORMATS.md 1.5). ``upload``, ``recover`` and ``status`` all explain a
gap through ``explain``, so they agree on which gaps a crash made. A gap across damage a
crash does not explain (a corrupt finding: below the durable end) is corruption of
acknowledged records: ``judge`` says so before any crash hole (recover, status).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from walctl.wal.findings import END_MISMATCH, HOLE, TORN_TAIL, TRIM_RECORD

if TYPE_CHECKING:
    from walctl.format.seal import SealDescriptor  # (decoded by the scan, from sealed padding records only)


@dataclass(frozen=True)
class CrashHole:
    """A range of the log a crash damaged: a hole finding (not yet sealed) or a sealed hole."""

    start: int
    end: int | None
    sealed: SealDescriptor | None = None  # the descriptor, once a writer sealed the hole
    record_offset: int | None = None  # where the sealing padding record starts

    def describe(self) -> str:
        if self.sealed is None:
            return f"a crash hole at WAL offset {self.start} (not sealed yet)"
        return (f"a crash hole at WAL offset {self.start}, sealed at {format_ns(self.sealed.sealed_at_ns)} "
                f"(the crashed writer's last header: {format_ns(self.sealed.crashed_header_ns)})")

    def to_json(self) -> dict:
        out = {"type": "sealed_hole" if self.sealed else "crash_hole", "cause": "crash",
               "hole_start": self.start, "hole_end": self.end,
               "length_bytes": None if self.end is None else self.end - self.start,
               "sealed": self.sealed is not None, "record_offset": self.record_offset,
               "sealed_at_ns": None, "sealed_at": None, "crashed_header_timestamp_ns": None,
               "streams": [], "streams_truncated": False}
        if self.sealed is not None:
            d = self.sealed
            out.update({"sealed_at_ns": d.sealed_at_ns, "sealed_at": format_ns(d.sealed_at_ns),
                        "crashed_header_timestamp_ns": d.crashed_header_ns,
                        "streams": [{"stream_id": s, "from": lo, "to": hi} for s, lo, hi in d.streams],
                        "streams_truncated": d.streams_truncated})
        return out


@dataclass(frozen=True)
class StreamGap:
    """Stream offsets [from_offset, to_offset) missing between two WAL records of the stream."""

    stream_id: int
    from_offset: int
    to_offset: int
    before_wal_offset: int | None  # WAL offset of the stream's record before the gap (None: not in the WAL)
    after_wal_offset: int  # WAL offset of the record after the gap

    @property
    def spec(self) -> str:
        """The gap as ``upload --accept-gap`` spells it."""
        return f"{self.stream_id}:{self.from_offset}-{self.to_offset}"


def explain(gap: StreamGap, holes: list[CrashHole]) -> CrashHole | None:
    """The first crash hole lying between the two records of ``gap`` (one could have held the
    lost batches), or None: then no crash explains the gap.

    A sealed hole is more precise: both records were in the log when it was sealed (the log
    only loses records from its start), so its descriptor lists exactly this gap, unless
    the list was truncated. A gap it does not list came later (a wrong --base-offset).
    """
    key = (gap.stream_id, gap.from_offset, gap.to_offset)
    for hole in holes:
        if (gap.before_wal_offset is None or gap.before_wal_offset < hole.start) and hole.start < gap.after_wal_offset:
            d = hole.sealed
            if d is not None and gap.before_wal_offset is not None and not d.streams_truncated \
                    and key not in d.streams:
                continue
            return hole
    return None


def damage_of(findings) -> list:
    """The findings of a scan that are damaged ranges a crash does not explain, in log order."""
    kinds = (HOLE, TORN_TAIL, TRIM_RECORD, END_MISMATCH)
    return sorted((f for f in findings if f.kind in kinds and not f.explained and f.physical_offset is None),
                  key=lambda f: f.offset)


def judge(gap: StreamGap, holes: list[CrashHole], damage: list) -> tuple[CrashHole | None, object | None]:
    """(the crash hole that explains ``gap``, the corrupt finding it lies across): damage a crash
    does not explain between the gap's two records comes first (the offsets lost there were
    acknowledged); else ``explain``."""
    for finding in damage:
        if (gap.before_wal_offset is None or gap.before_wal_offset < finding.offset) \
                and finding.offset < gap.after_wal_offset:
            return None, finding
    return explain(gap, holes), None


@dataclass
class GapTracker:
    """Feed it the WAL's batches in log order; it collects every jump of a stream's offsets."""

    last: dict[int, tuple[int, int]] = field(default_factory=dict)  # stream -> (WAL offset, end offset)
    gaps: list[StreamGap] = field(default_factory=list)

    def add(self, wal_offset: int, batch) -> StreamGap | None:
        if batch is None:
            return None
        sid, base = batch.stream_id, batch.base_offset
        last = self.last
        previous = last.get(sid)
        last[sid] = (wal_offset, base + batch.count)  # once per record in every scan: kept lean
        if previous is not None and base > previous[1]:
            gap = StreamGap(sid, previous[1], base, previous[0], wal_offset)
            self.gaps.append(gap)
            return gap
        return None


def holes_of(findings, sealed: list[CrashHole]) -> list[CrashHole]:
    """Every crash hole of a scan: its explained hole findings and its sealed holes, in log order."""
    found = [CrashHole(f.offset, f.end_offset) for f in findings if f.kind == HOLE and f.explained]
    return sorted(found + list(sealed), key=lambda h: h.start)


def gap_to_json(gap: StreamGap, hole: CrashHole | None, accepted: bool = False, damage=None) -> dict:
    """A stream gap with its explanation and the operator's way forward (recover/status/upload).
    ``damage``: the corrupt finding the gap lies across (``judge``)."""
    cause = "crash" if hole is not None else ("accepted" if accepted else "corruption" if damage else "unexplained")
    out = {"type": "stream_gap", "stream_id": gap.stream_id, "from": gap.from_offset, "to": gap.to_offset,
           "before_wal_offset": gap.before_wal_offset, "after_wal_offset": gap.after_wal_offset,
           "cause": cause, "hole_start": hole.start if hole else None, "sealed": bool(hole and hole.sealed),
           "sealed_at_ns": hole.sealed.sealed_at_ns if hole and hole.sealed else None,
           "damage_offset": damage.offset if damage is not None else None,
           "accept_gap": gap.spec}
    out["explanation"] = explanation(gap, hole, accepted, damage)
    return out


def explanation(gap: StreamGap, hole: CrashHole | None, accepted: bool = False, damage=None) -> str:
    """One sentence: why the gap exists and what the operator can do."""
    head = f"stream {gap.stream_id}: offsets {gap.from_offset}..{gap.to_offset} are missing"
    if damage is not None and hole is None and not accepted:
        return (f"{head}: lost in the damage at WAL offset {damage.offset} ({damage.kind}, corruption: "
                f"{damage.verdict_rule}); they were acknowledged, no crash lost them. upload refuses: restore "
                f"them from a copy, or save every intact record with 'walctl salvage DEVICE --store URL' (these "
                f"offsets recorded in the manifest as a gap)")
    if hole is not None:
        return (f"{head}: lost in {hole.describe()}; they were never acknowledged. upload keeps the gap "
                f"(the records after it go into their own object); nothing to do")
    if accepted:
        return f"{head}: accepted by the operator (upload --accept-gap {gap.spec})"
    return (f"{head} and no crash explains it (a wrong --base-offset, or damage): upload refuses. If these "
            f"offsets are really gone, run 'walctl upload ... --accept-gap {gap.spec}' (recorded in the "
            f"manifest; nothing else is skipped)")


def format_ns(ns: int) -> str:
    """Wall-clock ns as ISO 8601 UTC, to the microsecond."""
    seconds, rest = divmod(ns, 1_000_000_000)
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1000:06d}Z"
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"
