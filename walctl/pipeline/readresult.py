"""What ``walctl read`` hands back: the records (ReadRecord, ReadRows), the findings and the summary.

The read's result types and its finding kinds, apart from the read itself (walctl.pipeline.read)
so that a command renders them and a test compares them without the reading machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from walctl.format.batch import StreamRecordBatch

# Finding kinds. Every one but the INFORMATIONAL ones means the store does not hold what it says: exit 3.
GAP = "gap"  # offsets the manifest or an object should hold, held by none
OVERLAP = "overlap"  # two objects (or an object and the WAL) both claim offsets
DAMAGE = "damage"  # a check of an object's bytes failed
MISSING = "missing_object"  # the manifest names an object the store does not have
WAL_DAMAGE = "wal_damage"  # the WAL tail has damage a crash does not explain
TRIMMED = "trimmed"  # asked for offsets below the stream's start (deleted by retention): informational
WAL_MOVED = "wal_moved"  # (no --follow) the WAL kept moving under every retry: its tail was not served
# offsets no object holds because an upload recorded them lost (the manifest's stream_gaps: a crash,
# an --accept-gap, a salvage past damage): a known loss, said with its cause, not damage
RECORDED_GAP = "recorded_gap"
INFORMATIONAL = (TRIMMED, WAL_MOVED, RECORDED_GAP)


@dataclass(frozen=True)
class ReadRecord:
    """One batch read back, and where it came from."""

    batch: StreamRecordBatch
    source: str  # "store" or "wal"
    object_id: int | None = None
    key: str | None = None
    block_position: int | None = None  # object position of the DataBlock holding the batch
    batch_position: int | None = None  # object position of the batch itself
    wal_offset: int | None = None  # logical WAL offset of the record (source "wal")


@dataclass(frozen=True)
class ReadRows:
    """Batches of one object served without their payloads (``StreamReader(rows=True)``), in offset
    order: each row is ``(stream_id, base_offset, end_offset, count, epoch, payload_bytes,
    block_position, batch_position)``, what a ReadRecord of source "store" says but its payload."""

    object_id: int
    key: str
    rows: list


def gap_finding(doc, sid: int, lo: int, hi: int) -> "ReadFinding":
    """Offsets [lo, hi) of stream ``sid`` held by no live object: a recorded gap when the manifest's
    stream_gaps cover them (informational, with the recorded cause), else a GAP (damage)."""
    for gap in doc.stream_gaps or ():
        if gap.stream_id == sid and gap.from_offset <= lo and hi <= gap.to_offset:
            return ReadFinding(RECORDED_GAP, f"stream {sid}: offsets [{lo}, {hi}) were recorded lost by an upload "
                                             f"(cause {gap.cause}; the manifest's stream_gaps)", lo, hi)
    return ReadFinding(GAP, f"stream {sid}: offsets [{lo}, {hi}) are in no live object", lo, hi)


@dataclass
class ReadFinding:
    """Something the read could not serve as the manifest promised, or found damaged."""

    kind: str
    message: str
    start_offset: int | None = None  # stream offsets [start, end) affected, when known
    end_offset: int | None = None
    object_id: int | None = None
    key: str | None = None
    position: int | None = None  # byte position in the object (or WAL offset for wal_damage)

    @property
    def corrupt(self) -> bool:
        return self.kind not in INFORMATIONAL

    def to_json(self) -> dict:
        return {"type": "finding", "kind": self.kind, "message": self.message, "start_offset": self.start_offset,
                "end_offset": self.end_offset, "object_id": self.object_id, "key": self.key,
                "position": self.position, "corrupt": self.corrupt}


@dataclass
class ReadSummary:
    """What a read did: records served, requests made, findings."""

    stream_id: int
    from_offset: int | None
    to_offset: int | None
    limit: int | None
    records: int = 0
    payload_bytes: int = 0
    wal_records: int = 0
    objects: int = 0  # objects whose tail (footer + index) was read
    gets: int = 0  # every GET of the store (manifest, tails, indexes, block runs), retries included
    block_gets: int = 0  # of which GETs of DataBlock runs
    lists: int = 0
    bytes_read: int = 0
    findings: int = 0
    corrupt_findings: int = 0
    next_offset: int | None = None  # the stream offset right after the last batch served
    manifest_number: int | None = None
    polls: int = 0
    limited: bool = False
    retries: int = 0  # passes cut short and read again because the WAL or the manifest moved under them
    log_moved: bool = False  # (no --follow) the WAL kept moving: its tail from next_offset on was not served
    findings_list: list = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        return {"type": "summary", "stream_id": self.stream_id, "from_offset": self.from_offset,
                "to_offset": self.to_offset, "limit": self.limit, "records": self.records,
                "payload_bytes": self.payload_bytes, "wal_records": self.wal_records, "objects": self.objects,
                "gets": self.gets, "block_gets": self.block_gets, "lists": self.lists,
                "bytes_read": self.bytes_read, "findings": self.findings,
                "corrupt_findings": self.corrupt_findings, "next_offset": self.next_offset,
                "manifest_number": self.manifest_number, "polls": self.polls, "retries": self.retries,
                "log_moved": self.log_moved,
                "complete": not self.limited and self.corrupt_findings == 0 and not self.log_moved}


__all__ = ["DAMAGE", "GAP", "INFORMATIONAL", "MISSING", "OVERLAP", "RECORDED_GAP", "TRIMMED", "WAL_DAMAGE",
           "WAL_MOVED", "ReadFinding", "ReadRecord", "ReadRows", "ReadSummary", "gap_finding"]
