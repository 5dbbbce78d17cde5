"""Upload's plan: what the scan found to upload (Segments), the objects they become, and the result.

A Segment is a contiguous run of one stream's batches in the WAL; plan_objects groups segments
into Stream Objects and Stream Set Objects (docs/FORMATS.md 3); UploadResult is what an upload
returns (and ``--json`` prints).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from walctl.format import record as rec


class Segment:
    """A contiguous run of one stream's batches in the WAL, kept compact: 12 bytes a record.

    Upload remembers where each batch is (its WAL offset) and its record body's crc; its bytes
    only while the upload's bodies fit KEEP_SCANNED_BYTES (run.py). Beyond that the objects are
    built by reading the batches again (walread.py's ``_WalBatches``), which checks each is still
    the record scanned, so memory does not grow with the WAL's bytes.
    """

    __slots__ = ("stream_id", "start", "end", "wal", "crcs", "bytes", "wal_end", "spool")

    def __init__(self, stream_id: int, start: int):
        self.stream_id = stream_id
        self.start = start  # the first batch's base offset
        self.end = start  # the stream offset after the last batch
        self.wal = array("q")
        self.crcs = array("I")
        self.bytes = 0  # the batches' sizes (= their record bodies)
        self.wal_end = 0  # the WAL offset where the last batch's record ends
        self.spool = None  # its object as the scan writes it (one-pass uploads): a blocks._SegmentSpool

    def add(self, wal_offset: int, end: int, size: int, crc: int) -> None:
        self.wal.append(wal_offset)
        self.crcs.append(crc)
        self.end = end
        self.bytes += size
        self.wal_end = wal_offset + rec.SIZE + size

    def __len__(self) -> int:
        return len(self.wal)


@dataclass
class PlannedObject:
    kind: str  # "SO" or "SSO"
    streams: list[tuple[int, Segment]]

    @property
    def data_bytes(self) -> int:
        return sum(seg.bytes for _, seg in self.streams)

    @property
    def spooled(self) -> bool:
        """True when this is a segment's own Stream Object written as the scan read it (spool.py)."""
        seg_spool = self.streams[0][1].spool
        return self.kind == "SO" and len(self.streams) == 1 and seg_spool is not None and not seg_spool.dropped

    def ranges(self) -> list[dict]:
        return [{"stream_id": sid, "start": seg.start, "end": seg.end, "bytes": seg.bytes}
                for sid, seg in self.streams]


@dataclass
class UploadResult:
    objects: list[dict] = field(default_factory=list)
    records: int = 0
    payload_bytes: int = 0
    skipped_records: int = 0
    last_offset: int | None = None
    trimmed_to: int | None = None
    commit_number: int | None = None
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    gaps: list[dict] = field(default_factory=list)  # stream gaps uploaded as gaps, and why
    bad_records: list[dict] = field(default_factory=list)  # records left in the WAL: no StreamRecordBatch
    damage: list[dict] = field(default_factory=list)  # (salvage) the damaged ranges read past
    evidence_file: str | None = None  # (salvage) where their bytes were kept

    def to_json(self) -> dict:
        return {
            "objects": self.objects, "objects_made": len(self.objects), "records": self.records,
            "payload_bytes": self.payload_bytes, "skipped_records": self.skipped_records,
            "last_offset": self.last_offset, "trimmed_to": self.trimmed_to,
            "commit_number": self.commit_number, "dry_run": self.dry_run, "seconds": round(self.seconds, 6),
            "gaps": self.gaps, "bad_records": self.bad_records,
            **({"damage": self.damage, "evidence_file": self.evidence_file} if self.damage else {}),
        }


def plan_objects(streams: dict[int, Segment], split_size: int,
                 after_gaps: list[tuple[int, Segment]] = ()) -> list[PlannedObject]:
    """One stream: one SO. Several: an SO per stream of >= split_size data bytes, the rest in one SSO.

    ``after_gaps`` are the parts of streams after a crash gap: an object holds each stream
    contiguously, so each such part becomes a Stream Object of its own.
    """
    ordered = sorted(streams.items())
    extra = [PlannedObject("SO", [(sid, batches)]) for sid, batches in after_gaps]
    if not ordered:
        return extra
    if len(ordered) == 1:
        return [PlannedObject("SO", ordered)] + extra
    plan, rest = [], []
    for sid, batches in ordered:
        if batches.bytes >= split_size:
            plan.append(PlannedObject("SO", [(sid, batches)]))
        else:
            rest.append((sid, batches))
    if rest:
        plan.append(PlannedObject("SSO", rest))
    return plan + extra
