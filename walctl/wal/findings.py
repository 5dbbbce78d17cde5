"""What a recovery scan reports beside the records: findings, their kinds and causes (FORMATS.md 1.4).

A finding's ``kind`` says what the scan concluded about a range (a hole, a torn tail ...);
its ``cause`` says what the damaged bytes look like. Both are enums (``StrEnum``: they
compare equal to, and render as, the words in the JSON output).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from walctl.wal.layout import Ring


class Kind(enum.StrEnum):
    """What a finding is. "explained" ones are what a crash leaves in the last window."""

    HOLE = "hole"  # skipped range followed by a valid record
    TORN_TAIL = "torn_tail"  # a record with a valid header but a bad body, with nothing valid after it
    TRIM_RECORD = "trim_record"  # the record at trimOffset is unreadable
    BEYOND_WINDOW = "beyond_window"  # valid records past where the scan had to stop: mid-log damage
    END_MISMATCH = "end_mismatch"  # a clean log whose end is not the header's nextOffset
    BAD_BATCH = "bad_batch"  # a valid record whose body is not a StreamRecordBatch
    BAD_HEADER_SLOT = "bad_header_slot"  # one header slot damaged, the other valid
    # AutoMQ logs only (read for forensics, FORMATS.md 1):
    DISCARDED = "discarded"  # V1: valid blocks after the end of the continuous log, which AutoMQ drops
    BAD_PADDING = "bad_padding"  # V1: a padding record AutoMQ follows though its header fails a check


class Cause(enum.StrEnum):
    """What the bytes of a finding look like."""

    ZERO_FILL = "zero_fill"  # all zeros where a record should start: never written, wiped, or a torn write
    STALE_LAP = "stale_lap"  # a valid record header of another offset: data of an earlier lap of the ring
    CHECKSUM_MISMATCH = "checksum_mismatch"  # a header or body whose crc fails: damage to bytes once written whole
    GARBAGE = "garbage"  # bytes that are no record at all (bad magic, impossible lengths)
    TRUNCATED = "truncated"  # a record cut off by the end of the device
    TORN_TAIL = "torn_tail"  # the last record's body is incomplete: a write the crash interrupted
    BAD_HEADER_SLOT = "bad_header_slot"  # one of the two header slots is damaged; the other one is used
    BEYOND_WINDOW = "beyond_window"  # a valid record past the sliding window after a hole: mid-log damage
    END_MISMATCH = "end_mismatch"  # a cleanly closed log ends before its header's nextOffset: a lost tail
    BAD_BATCH = "bad_batch"  # a valid record whose body is not a StreamRecordBatch


HOLE, TORN_TAIL, TRIM_RECORD, BEYOND_WINDOW = Kind.HOLE, Kind.TORN_TAIL, Kind.TRIM_RECORD, Kind.BEYOND_WINDOW
END_MISMATCH, BAD_BATCH, BAD_HEADER_SLOT = Kind.END_MISMATCH, Kind.BAD_BATCH, Kind.BAD_HEADER_SLOT
DISCARDED, BAD_PADDING = Kind.DISCARDED, Kind.BAD_PADDING
CAUSES = tuple(c.value for c in Cause)

# Kinds whose cause is the kind itself, whatever the bytes held.
_CAUSE_OF_KIND = {Kind.BAD_HEADER_SLOT: Cause.BAD_HEADER_SLOT, Kind.TORN_TAIL: Cause.TORN_TAIL,
                  Kind.BEYOND_WINDOW: Cause.BEYOND_WINDOW, Kind.END_MISMATCH: Cause.END_MISMATCH,
                  Kind.BAD_BATCH: Cause.BAD_BATCH}

# The words of the rules that decide a finding's verdict (``Finding.rule``, FORMATS.md 1.4).
WINDOW_RULE = "inside the last sliding window of a writer that did not close cleanly (AutoMQ's rule)"
CLEAN_RULE = "the log was closed cleanly: a crash leaves no damage in it"
_RULE_OF_KIND = {
    Kind.BAD_BATCH: "a whole record whose body is no batch: written so, not a crash",
    Kind.BEYOND_WINDOW: "a valid record lies more than the sliding window past the damage: a crash writes "
                        "only inside the window",
    Kind.END_MISMATCH: "the log ends before a point known durable",
    Kind.TRIM_RECORD: "the trim record was checked when the trim was made",
}


class Durable:
    """The points known durable in a log (FORMATS.md 1.4, "which rule decides"): every byte below
    ``end`` was written whole and acknowledged (or found whole by a scan a writer sealed), so a
    hole below it is corruption, never crash damage. Each point keeps the words naming it; a scan
    adds the points it learns (a seal descriptor, a record past the sliding window)."""

    __slots__ = ("points",)

    def __init__(self, points: list[tuple] | None = None):
        self.points: list[tuple[int, str, str]] = []  # (WAL offset, what says so, detail), in the order added
        for point in points or []:
            self.add(*point)

    def add(self, offset: int, what: str, detail: str = "") -> None:
        """A point: every byte below ``offset`` is durable, as ``what`` (and ``detail``, words
        that follow the offset) says."""
        if offset > 0:
            self.points.append((offset, what, detail))

    @property
    def end(self) -> int:
        """The durable end: the largest point (0: none known)."""
        return max((offset for offset, _, _ in self.points), default=0)

    def rule_below(self, offset: int) -> str | None:
        """The words of the first point (in the order added: the plainest fact first) above
        ``offset``, or None when ``offset`` is at or past every point."""
        for point, what, detail in self.points:
            if offset < point:
                return f"below {what} {point:,}{detail}"
        return None

    def describe(self) -> str | None:
        """The durable end and what says so, or None."""
        end = self.end
        for point, what, detail in self.points:
            if point == end:
                return f"{what} {point:,}{detail}"
        return None

    def __repr__(self) -> str:
        return f"Durable({self.points!r})"


@dataclass
class Finding:
    """A range the scan skipped or doubts, where (WAL offsets) and why."""

    kind: Kind
    offset: int
    ring: Ring
    reason: str
    end_offset: int | None = None  # where the skipped range ends (the next valid record), if known
    expected_crc: int | None = None
    found_crc: int | None = None
    explained: bool = False  # a crash explains it (not corruption)
    physical_offset: int | None = None  # set for findings outside the ring (header slots)
    hexdump: str | None = None  # the finding's first bytes, xxd-like (recover --hexdump)
    bytes_cause: Cause | None = None  # what the skipped bytes looked like (the decoder's Skip.cause)
    rule: str | None = None  # which rule decided ``explained`` (None: the kind's usual one, ``verdict_rule``)

    @property
    def verdict_rule(self) -> str:
        """The rule that decided whether a crash explains this finding, in words."""
        if self.rule is not None:
            return self.rule
        if self.kind is Kind.BAD_HEADER_SLOT:
            return "a header write a crash tore: the other slot is used"
        if self.explained:
            if self.kind is Kind.TRIM_RECORD:  # (AutoMQ's logs)
                return "AutoMQ's reset() trims to just before the log's new start, where no record need be"
            return WINDOW_RULE
        return _RULE_OF_KIND.get(self.kind, "damage where a crash cannot leave any")

    # Found while the log moved under the reader (a writer started, stopped or trimmed; the header
    # slots changed) and not seen again by a rescan, or not judged: the log kept moving. Not corruption.
    moved: bool = False

    @property
    def judged_corrupt(self) -> bool:
        """Damage neither a crash nor the log's moving under the reader explains."""
        return not self.explained and not self.moved

    @property
    def cause(self) -> Cause:
        """What the damaged bytes look like (one of CAUSES)."""
        return _CAUSE_OF_KIND.get(self.kind) or self.bytes_cause or Cause.GARBAGE

    def to_json(self) -> dict:
        out = {"type": "finding", "kind": str(self.kind)}
        if self.physical_offset is not None:
            out.update({"offset": None, "physical_offset": self.physical_offset, "lap": None,
                        "offset_mod_4096": None})
        else:
            out.update(self.ring.describe(self.offset))
        out.update({
            "end_offset": self.end_offset,
            "length_bytes": None if self.end_offset is None else self.end_offset - self.offset,
            "reason": self.reason,
            "expected_crc": self.expected_crc,
            "found_crc": self.found_crc,
            "explained_by_crash": self.explained,
            "cause": str(self.cause),
            "rule": self.verdict_rule,
            "explained_by_log_move": self.moved,
        })
        if self.hexdump is not None:
            out["hexdump"] = self.hexdump
        return out
