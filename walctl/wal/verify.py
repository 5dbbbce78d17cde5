"""Incremental verification of a WAL's live log (``walctl status --verify-budget``).

Each run verifies at most a budget of log bytes, going on from where the last run stopped, so a
cron job reads the whole live log over a few runs instead of all of it every minute. What it
remembers between runs (``VerifyState``, one entry per device in a small JSON file) is:

- the WAL offset of the record where the next run starts (a record boundary: a run stops before
  the first record that ends past its budget, so a range never ends inside a record);
- the findings a crash does not explain that the runs found in the live log, each kept until
  the range it lies in is verified again and found sound, or is trimmed away.

A run that reaches the end of the log completes a pass: the next one starts again at the trim
point. A remembered offset that was trimmed away since restarts at the trim point; a trim point
behind the remembered one, or another capacity, is another WAL (re-initialised): it starts over.

The scan is the recovery scan (walctl.wal.native_scan, untouched), started at the remembered
record (``seek``) and stopped after the budget; the LogReader is told where the budget ends, so
its reads stop there (one 4 KiB block and the record across the end more) instead of reading a
whole 1 MiB chunk past it. Readers never write the device: the state file is the only write.

Judging a finding: the scan's own rules (a finding in a cleanly closed log is corruption), and
one more for a log whose writer is running or crashed: damage before the header's nextOffset
lies in the acknowledged log (the writer wrote it there only after every block before it was
durable, or after its open sealed a crash's holes), which a crash cannot explain either.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from walctl.errors import IOFailure, UsageError
from walctl.format.header import ALIGN
from walctl.wal.findings import END_MISMATCH, HOLE, TORN_TAIL, Finding

if TYPE_CHECKING:
    from walctl.device.base import Device
    from walctl.format.header import WalHeader
    from walctl.wal.ringread import ScanResult

STATE_VERSION = 1
STATE_SUFFIX = ".verify-state"  # beside the metrics file; node_exporter reads only *.prom
MAX_REMEMBERED = 100  # findings kept per WAL: the first ones say enough, the count stays right


@dataclass
class VerifyRange:
    """What one run verified: WAL offsets [from_offset, through_offset)."""

    from_offset: int
    through_offset: int
    records: int
    findings: list[Finding]
    reached_end: bool  # the scan reached the end of the log: the pass is complete
    next_offset: int  # the record where the next run starts (-1: the trim point, a new pass)
    bytes_read: int

    @property
    def verified_bytes(self) -> int:
        return max(self.through_offset - self.from_offset, 0)


@dataclass
class Verification:
    """One run's verification and what is known of the live log after it (the state's view)."""

    range: VerifyRange
    corrupt: list[dict]  # every remembered finding a crash does not explain, still in the live log
    found_corrupt: int  # of them, found by this run
    state_file: str
    passes: int
    last_pass_ns: int  # when the last whole pass ended (0: none yet)
    restarted: str | None = None  # why the remembered position was dropped, if it was

    def to_json(self) -> dict:
        r = self.range
        return {
            "state_file": self.state_file,
            "from_offset": r.from_offset,
            "verified_through_offset": r.through_offset,
            "verified_bytes": r.verified_bytes,
            "records": r.records,
            "findings": len(r.findings),
            "pass_complete": r.reached_end,
            "next_offset": r.next_offset,
            "device_bytes_read": r.bytes_read,
            "corrupt_findings": len(self.corrupt),
            "corrupt_found_now": self.found_corrupt,
            "corrupt": self.corrupt,
            "passes": self.passes,
            "last_pass_timestamp_ns": self.last_pass_ns,
            "restarted": self.restarted,
        }


@dataclass
class DeviceEntry:
    """One WAL's remembered verification (a JSON object in the state file)."""

    capacity: int
    trim_offset: int
    next_offset: int = -1  # -1: start at the trim point
    corrupt: list[dict] = field(default_factory=list)
    passes: int = 0
    last_pass_ns: int = 0

    @classmethod
    def from_json(cls, obj: object) -> "DeviceEntry | None":
        if not isinstance(obj, dict):
            return None
        try:
            corrupt = [f for f in obj.get("corrupt", []) if isinstance(f, dict) and isinstance(f.get("offset"), int)]
            return cls(int(obj["capacity"]), int(obj["trim_offset"]), int(obj.get("next_offset", -1)), corrupt,
                       int(obj.get("passes", 0)), int(obj.get("last_pass_ns", 0)))
        except (KeyError, TypeError, ValueError):
            return None  # a damaged entry: start over rather than fail the cron job

    def to_json(self) -> dict:
        return {"capacity": self.capacity, "trim_offset": self.trim_offset, "next_offset": self.next_offset,
                "corrupt": self.corrupt[:MAX_REMEMBERED], "passes": self.passes, "last_pass_ns": self.last_pass_ns}


def default_state_path(metrics_file: str) -> str:
    return metrics_file + STATE_SUFFIX


def check_state_path(path: str) -> None:
    """Refuse (exit 2), before the run, a state path that is a directory or whose directory is missing."""
    if os.path.isdir(path):
        raise UsageError("--state-file names a directory", where=path, hint="give a file path")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError("the directory of the verification state file does not exist", where=path,
                         hint="create it, or name another with --state-file")


def load_state(path: str) -> dict:
    """The state file's devices (``{}`` when it does not exist yet, or holds no state of ours:
    unreadable or damaged, the verification starts over rather than fail the cron job)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # unreadable or half-written by hand: the verification starts over
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("devices"), dict):
        return {}
    return data["devices"]


def save_state(path: str, devices: dict) -> None:
    """Replace the state file atomically (a temporary file beside it, fsync, rename).

    Raises:
        IOFailure: it cannot be written.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": STATE_VERSION, "devices": devices}, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())  # the renamed file holds these bytes after a crash, not an empty one
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise IOFailure(f"cannot write the verification state file: {exc.strerror or exc}", where=path,
                        hint="check the directory's permissions and free space") from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def entry_for(devices: dict, device: str, header: WalHeader,
              log_end: int | None = None) -> tuple[DeviceEntry, str | None]:
    """This WAL's remembered entry, or a new one, and why an old one was dropped (None if it was not).
    ``log_end``: the end of the log when a checkpoint says it (a log only grows, unless re-initialised)."""
    entry = DeviceEntry.from_json(devices.get(device))
    why = None
    if entry is None:
        pass
    elif entry.capacity != header.capacity:
        why = "the capacity changed: another WAL"
    elif header.trim_offset < entry.trim_offset:
        why = "the trim point went back: the WAL was re-initialised"
    elif log_end is not None and entry.next_offset > log_end:
        why = "the log ends before where the last run stopped: the WAL was re-initialised"
    else:
        return entry, None
    return DeviceEntry(header.capacity, header.trim_offset), why


def verify_range(dev: Device, header: WalHeader, from_offset: int, budget_bytes: int, *,
                 progress=None) -> VerifyRange:
    """Scan the live log from the record at or after ``from_offset`` until the first record that
    ends more than ``budget_bytes`` after where it started (the end of the log at the latest).

    A damaged range is read to its end (its finding comes with the next valid record); the scan
    stops at a record boundary, which is where the next run starts.
    """
    from walctl.wal.native_scan import NativeScan
    from walctl.wal.ringread import Entry, ScanResult
    from walctl.wal.layout import Ring

    start = max(header.trim_offset, 0)
    report = ScanResult(header, Ring(header.capacity, header.block_size))
    policy = NativeScan(dev, header, report, probe=False, keep_offsets=False)
    seek = from_offset if from_offset > start else None
    budget_end = max(from_offset, start) + budget_bytes
    reader = policy.reader
    # Reads stop one 4 KiB block past the budget's end (then only what the record across it needs).
    reader.stop = budget_end if reader.stop is None else min(reader.stop, budget_end)
    findings: list[Finding] = []
    walk = _Walk(from_offset)
    events = policy.events(seek, bulk=False)
    try:
        for event in events:
            if isinstance(event, Finding):
                findings.append(event)
            elif isinstance(event, Entry) and walk.take(event, budget_end):
                if progress is not None:
                    progress(min(walk.through - from_offset, budget_bytes))
            elif isinstance(event, Entry):
                break
    finally:
        events.close()
    began = report.read_from_offset if report.read_from_offset is not None else max(from_offset, start)
    if walk.next_offset < 0:  # the end of the log
        return VerifyRange(began, max(report.end_offset, walk.through or began), walk.records, findings, True, -1,
                           reader.bytes_read)
    return VerifyRange(began, walk.through, walk.records, findings, False, walk.next_offset, reader.bytes_read)


class _Walk:
    """Where a budgeted scan stops, at a record boundary the next run's seek finds cheaply.

    The next run starts at the last record seen that starts on a 4 KiB boundary (a block's first
    record, usually): its seek then finds the record header right there, instead of walking back
    up to 1 MiB for one. The records from there on are verified again by the next run. Only when
    the run saw no such record does it stop at the record across the budget's end."""

    def __init__(self, from_offset: int):
        self.from_offset = from_offset
        self.records = 0
        self.through: int | None = None  # the end of the last record verified
        self.next_offset = -1
        self._aligned: tuple[int, int, int] | None = None  # (offset, records before it, end before it)

    def take(self, entry, budget_end: int) -> bool:
        """Count ``entry`` verified and go on (True), or stop before it (False, next_offset set)."""
        if self.records and entry.end > budget_end:
            if self._aligned is not None:
                self.next_offset, self.records, self.through = self._aligned
            else:
                self.next_offset = entry.offset
            return False
        if entry.offset % ALIGN == 0 and entry.offset > self.from_offset and self.records:
            self._aligned = (entry.offset, self.records, self.through)
        self.records += 1
        self.through = entry.end
        return True


def judge(findings: list[Finding], header: WalHeader, report_end: int | None) -> list[Finding]:
    """The findings a crash does not explain: the scan's verdict, and (walctl's own logs) damage
    before the header's nextOffset, which lies in the acknowledged log. ``report_end``: where the
    scan found the log's end when it reached it (None when it stopped on its budget)."""
    corrupt = [f for f in findings if not f.explained]
    if header.flavour != "walctl" or header.clean:
        return corrupt  # a clean log's rules already say all of this (END_MISMATCH included)
    acknowledged = header.next_offset
    corrupt += [f for f in findings if f.explained and f.kind in (HOLE, TORN_TAIL) and f.offset < acknowledged]
    if report_end is not None and report_end < acknowledged:
        from walctl.wal.layout import Ring

        corrupt.append(Finding(END_MISMATCH, report_end, Ring(header.capacity, header.block_size),
                               f"the log ends at {report_end}, before the header's nextOffset {acknowledged} "
                               f"(the acknowledged log)", acknowledged))
    return corrupt


def finding_json(finding: Finding) -> dict:
    return {"offset": finding.offset, "end_offset": finding.end_offset, "kind": str(finding.kind),
            "reason": finding.reason}


def remember(entry: DeviceEntry, header: WalHeader, verified: VerifyRange, corrupt: list[Finding],
             *, clock=time.time_ns) -> int:
    """Update ``entry`` with one run's range; returns how many corrupt findings the run added.

    Remembered findings in the range verified now are replaced by what it found; those at or
    before the trim point (trimmed away) are dropped.
    """
    trim = header.trim_offset
    low = verified.from_offset
    high = None if verified.reached_end else verified.next_offset  # (the next run goes on from there)
    kept = [f for f in entry.corrupt
            if f["offset"] > trim and not (f["offset"] >= low and (high is None or f["offset"] < high))]
    fresh = [finding_json(f) for f in corrupt if f.offset > trim]
    entry.corrupt = sorted(kept + fresh, key=lambda f: f["offset"])
    entry.trim_offset = trim
    entry.capacity = header.capacity
    entry.next_offset = verified.next_offset
    if verified.reached_end:
        entry.passes += 1
        entry.last_pass_ns = clock()
    return len(fresh)


def resume_offset(entry: DeviceEntry, header: WalHeader) -> int:
    """Where this run starts: the remembered record, or the trim point (a new pass, or the
    remembered record was trimmed away)."""
    start = max(header.trim_offset, 0)
    return entry.next_offset if entry.next_offset > start else start


def from_full_scan(report: ScanResult) -> VerifyRange:
    """A whole scan (status --scan, or a log no checkpoint answers) as a complete pass."""
    return VerifyRange(report.read_from_offset if report.read_from_offset is not None else report.start_offset,
                       report.end_offset, report.records, list(report.findings), True, -1, report.bytes_read)
