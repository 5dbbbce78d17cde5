"""The recover verdict, its filters and its stats: what every reader of the log concludes from a scan.

- ``unexplained_error``: the one CorruptionError for findings a crash does not explain
  (recover, status, a writer's open, upload);
- ``recover``: the engine of ``walctl recover`` (seek, --from/--to/--stream/--limit, --stats,
  the sealed holes and stream gaps explained, the summary), which streams what it shows
  through callbacks and returns a RecoverRun; the command parses, calls it, renders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from walctl.errors import CorruptionError

if TYPE_CHECKING:
    from walctl.device.base import Device
    from walctl.wal.findings import Durable, Finding
    from walctl.wal.headers import HeaderState
    from walctl.wal.reader import Entry, Run, Scan, ScanResult

# The scan (walctl.wal.reader), the findings and the gap explanations are imported by ``recover``
# and the functions it calls: ``unexplained_error`` of no findings (status of a cleanly closed
# WAL, which answers from its header slots) loads none of them.


def unexplained(findings: list[Finding], *, framing_only: bool = False) -> list[Finding]:
    """The findings a crash does not explain. ``framing_only``: leave out bad batches (whole,
    valid records whose body is no StreamRecordBatch: the log's framing is intact, so writing
    after them overwrites no evidence, and upload skips just them)."""
    if not findings:
        return []
    from walctl.wal.findings import BAD_BATCH

    return [f for f in findings if f.judged_corrupt and not (framing_only and f.kind == BAD_BATCH)]


def unexplained_error(findings: list[Finding], where: str, *, framing_only: bool = False,
                      hint: str | None = "inspect with 'walctl recover'",
                      summary: dict | None = None) -> CorruptionError | None:
    """The CorruptionError (exit 3) for the findings a crash does not explain, or None (``summary``:
    the command's JSON summary, printed with the error)."""
    corrupt = unexplained(findings, framing_only=framing_only)
    if not corrupt:
        return None
    from walctl import sizes

    first = corrupt[0]
    return CorruptionError(f"{sizes.plural(len(corrupt), 'finding')} a crash does not explain; first: {first.kind} at offset "
                           f"{first.offset} ({first.reason}; {first.verdict_rule})", where=where,
                           offset=first.offset, hint=hint, summary=summary)


def durable_points(state: HeaderState) -> Durable | None:
    """The points a walctl WAL's header slot records as durable (FORMATS.md 1.4, "which rule
    decides"), for a reader's scan (recover, status): the checkpoint's log end (a clean close and
    every trim write it, a running writer's trims too) and the header's nextOffset (a clean
    header's exactly; a crashed writer's is where it began, after its open's scan proved the log
    up to there, less its last block, which a direct trim may leave holding a torn record).
    None for AutoMQ's WALs (their rules alone)."""
    from walctl.format.header import ALIGN
    from walctl.wal.findings import Durable
    from walctl.wal.layout import align_up

    header = state.header
    if header.flavour != "walctl":
        return None
    durable = Durable()
    cp = state.checkpoint
    if cp is not None:
        durable.add(cp.log_end, "the checkpoint's log end")
    if cp is not None and header.next_offset <= align_up(cp.log_end):
        return durable  # (the header's end is the checkpoint's, aligned up: a block's zero padding more)
    if header.clean:
        durable.add(header.next_offset, "the clean header's nextOffset")
    else:
        durable.add(header.next_offset - ALIGN, "the header's recorded end",
                    f" (its nextOffset {header.next_offset:,} less one 4 KiB block)")
    return durable


def judge_by_durable(findings: list[Finding], durable: Durable | None) -> None:
    """Findings of a scan that judged by AutoMQ's window rule alone (upload's: it reads a crashed
    log once and does not read past damage): a hole or torn record it called crash damage that
    starts below a durable point is corruption of acknowledged data, with the rule naming that
    point, as recover's scan calls it (FORMATS.md 1.4), however far the crashed writer's window
    reached. Other findings stand."""
    if durable is None or not findings:
        return
    from walctl.wal.findings import HOLE, TORN_TAIL

    for f in findings:
        if f.explained and f.kind in (HOLE, TORN_TAIL) and f.physical_offset is None:
            below = durable.rule_below(f.offset)
            if below is not None:
                f.explained, f.rule = False, below


def header_slot_findings(state: HeaderState) -> list[Finding]:
    """A finding for each damaged header slot (the other one was used: a crash explains it)."""
    from walctl.wal.findings import BAD_HEADER_SLOT, Finding
    from walctl.wal.layout import Ring

    ring = Ring(state.header.capacity)
    return [Finding(BAD_HEADER_SLOT, 0, ring, f"header slot {slot.index}: {slot.error}", explained=True,
                    physical_offset=slot.position) for slot in state.bad_slots]


@dataclass(frozen=True)
class RecoverFilter:
    """Which records recover shows: WAL offsets [from_offset, to_offset), one stream, at most limit."""

    from_offset: int | None = None
    to_offset: int | None = None
    stream: int | None = None
    limit: int | None = None


@dataclass
class RecoverRun:
    """What one recover established: the scan's report, what was shown, and the verdict."""

    device: str
    report: ScanResult
    shown: int = 0
    per_stream: dict[int, list[int]] = field(default_factory=dict)  # stream (-1: no batch) -> [records, bytes]
    seeked: bool = False  # reading started after the trim point (--from)
    explanations: list[tuple[dict, str]] = field(default_factory=list)  # sealed holes, stream gaps: (json, text)
    unexplained_gaps: int = 0
    log_moved: str | None = None  # how the log moved under the scan (header slots changed), when it did
    held: list[Finding] = field(default_factory=list)  # damage found after it moved: judged by a rescan
    rescans: int = 0
    settled: bool = True  # False: the log moved under every rescan; the held damage was not judged

    def summary(self) -> dict:
        out = self.report.to_json()
        out.update({"sealed_holes": len(self.report.sealed_holes), "stream_gaps": len(self.report.stream_gaps),
                    "unexplained_stream_gaps": self.unexplained_gaps, "records_shown": self.shown,
                    "device": self.device, "flavour": self.report.header.flavour,
                    **durable_json(self.report),
                    "log_moved": self.log_moved is not None and bool(self.held), "rescans": self.rescans})
        return out

    def moved_warning(self) -> str | None:
        """The warning a run whose log moved under it owes its reader (docs/CLI.md), or None."""
        if self.log_moved is None or not self.held:
            return None
        from walctl import sizes

        n = len(self.held)
        what = f"{sizes.plural(n, 'finding')} seen after it moved"
        if not self.settled:
            return (f"the log moved during the read ({self.log_moved}) and kept moving under {self.rescans} "
                    f"{'rescan' if self.rescans == 1 else 'rescans'}: {what} were not judged (explained_by_log_move); run recover again when the "
                    f"writer is idle for a verdict")
        if any(f.moved for f in self.held):
            return (f"the log moved during the read ({self.log_moved}): {what} are the writer's work in "
                    f"progress, not damage: a rescan of the log as it is now found none a crash does not "
                    f"explain")
        return None

    def error(self) -> CorruptionError | None:
        return unexplained_error(self.report.findings, self.device, hint=None)

    def incomplete(self) -> str | None:
        """The warning a run that did not read the whole log owes a human reader, or None."""
        report = self.report
        if report.complete:
            return None
        start = report.read_from_offset if report.read_from_offset is not None else report.start_offset
        read = f"read from offset {start}" + (" (seek to --from)" if self.seeked else "")
        return (f"incomplete: {read}; stopped by {report.stopped_by} at offset {report.end_offset}; damage outside "
                f"what was read was not checked (run without --from/--to/--limit for a full check)")


def durable_json(report: ScanResult) -> dict:
    """The durable end a reader's scan judged by (the summary of recover and status)."""
    durable = report.durable
    end = durable.end if durable is not None else None
    return {"durable_end_offset": end or None,
            "durable_end": durable.describe() if durable is not None else None}


def recover(dev: Device, state: HeaderState, device: str, *, filters: RecoverFilter = RecoverFilter(),
            stats: bool = False, with_hexdump: bool = False, probe: bool = True,
            on_record: Callable[[Entry], None], on_finding: Callable[[Finding], None],
            progress: Callable[[int], None] | None = None, on_run: Callable[[Run], None] | None = None,
            readahead: bool = True, watch=None) -> RecoverRun:
    """Scan the log after the trim point (from the first record at or after --from), call
    ``on_finding`` for each finding and ``on_record`` for each record the filters show (with
    ``stats``: count them per stream instead), then explain sealed holes and stream gaps.

    ``on_run``: a caller that renders a Run (a run of live records, valid only during the
    call) in one go; without it each of its records goes to ``on_record``. ``readahead``: the
    scan's device reads go on ahead of its decoding (Scan's readahead; same results).

    On an interrupt (KeyboardInterrupt) the exception leaves with ``summary``: the run so far,
    complete false. Never writes.

    ``watch``: the reader's session (walctl.wal.lifecycle.RecoverSession): before damage a crash
    does not explain is shown, the header slots are read again; once they changed (the log
    moved: a writer started, stopped or trimmed), such damage is held back and judged after
    the scan by a rescan (``settled_scan``): shown as corruption if the settled log still has
    damage, else marked ``moved`` (not corruption), and shown after the records.
    """
    from walctl.wal.reader import Ring, Scan, ScanResult, finding_bytes, hexdump

    header = state.header
    # Without filters every record is shown (or counted): runs of them come in bulk.
    bulk = filters == RecoverFilter()
    # The durable points the header slot records: damage below them is corruption, read past.
    report = ScanResult(header, Ring(header.capacity, header.block_size), durable=durable_points(state))
    scan = Scan(dev, header, probe=probe, seek=filters.from_offset, bulk=bulk, readahead=readahead, report=report)
    run = RecoverRun(device, scan.report)

    def show(f: Finding) -> None:
        if with_hexdump:
            position, data = finding_bytes(dev, f)
            f.hexdump = hexdump(data, position)
        on_finding(f)

    def finding(f: Finding) -> None:
        if watch is not None and f.judged_corrupt:
            if run.log_moved is None:
                run.log_moved = watch.moved()
            if run.log_moved is not None:
                run.held.append(f)  # judged after the scan, on the log as it is then
                return
        show(f)

    for f in header_slot_findings(state):
        run.report.findings.append(f)
        finding(f)
    try:
        _show(scan, run, filters, stats, on_record, finding, progress, on_run)
    except KeyboardInterrupt as exc:  # SIGTERM/SIGINT: the NDJSON still ends with its summary
        run.report.complete = False
        exc.summary = run.summary()
        raise
    finally:
        scan.close()
    report = run.report
    run.seeked = report.read_from_offset is not None and report.read_from_offset > report.start_offset
    if run.seeked and header.flavour == "walctl":
        report.complete = False  # the records before the seek point were not read
    if run.held:
        _judge_move(run, watch, filters.from_offset)
        for f in run.held:
            show(f)
    _explain_gaps(run)
    return run


def _judge_move(run: RecoverRun, watch, seek: int | None) -> None:
    """Damage held back because the log moved under the scan: a rescan of the log as it is now
    (bounded, RESCANS) decides. Damage still there on a settled log stays corruption (exit 3);
    none, or a log that kept moving, marks the held findings ``moved`` (not judged, exit 0)."""
    from walctl.wal.reader import scan_report

    def rescan(session) -> ScanResult:
        return scan_report(session.dev, session.state.header, probe=session.writer_pid is None, seek=seek)

    result, run.settled, run.rescans = watch.settled_scan(rescan)
    if not run.settled or not result.corrupt:
        for f in run.held:
            f.moved = True
    if not run.settled:
        run.report.complete = False


def _show(scan: Scan, run: RecoverRun, filters: RecoverFilter, stats: bool, on_record, on_finding,
          progress, on_run=None) -> None:
    """The scan's loop: findings out, records through the filters, out or counted."""
    from walctl.wal.findings import Finding
    from walctl.wal.reader import Run

    report, per_stream = run.report, run.per_stream
    start = max(report.start_offset, filters.from_offset or 0)
    pause = os.environ.get("WALCTL_FAILPOINT", "").startswith("recover-scan")  # tests: stop mid-scan
    want = _filter(filters, report)
    shown = 0
    try:
        for event in scan:
            if pause:
                from walctl.failpoints import failpoint

                failpoint("recover-scan")
            if progress is not None:
                progress(max(event.offset - start, 0))
            if event.__class__ is Finding:
                on_finding(event)
                continue
            if event.__class__ is Run:  # only without filters: every record of it is shown
                shown += event.count
                _show_run(event, per_stream if stats else None, on_record, on_run)
                continue
            if want is not None and not want(event, shown):
                if not report.complete:
                    break
                continue
            shown += 1
            if not stats:
                on_record(event)
                continue
            batch = event.batch
            counts = per_stream.get(batch.stream_id if batch else -1)
            if counts is None:
                counts = per_stream[batch.stream_id if batch else -1] = [0, 0]
            counts[0] += 1
            counts[1] += len(batch.payload) if batch else len(event.body)
    finally:
        run.shown = shown


def _show_run(run: Run, per_stream: dict[int, list[int]] | None, on_record, on_run) -> None:
    """A Run's records: counted (--stats: ``per_stream``), rendered in one go, or one by one."""
    if per_stream is not None:
        _count_run(per_stream, run)
    elif on_run is not None:
        on_run(run)
    else:
        for entry in run.entries():
            on_record(entry)


def _count_run(per_stream: dict[int, list[int]], run: Run) -> None:
    """--stats of a run of batches: records and payload bytes per stream."""
    from walctl.format.batch import HEADER_SIZE as BATCH_HEADER

    sid = run.one_stream()
    if sid is not None:
        counts = per_stream.setdefault(sid, [0, 0])
        counts[0] += run.count
        counts[1] += run.payload_bytes()
        return
    for sid, length in zip(run.column(4), run.column(2)):
        counts = per_stream.setdefault(sid, [0, 0])
        counts[0] += 1
        counts[1] += length - BATCH_HEADER


def _filter(filters: RecoverFilter, report: ScanResult) -> Callable[[Entry, int], bool] | None:
    """A predicate saying whether a record is shown (it marks the report incomplete when the
    run must stop there), or None when every record is."""
    lo, hi, stream, limit = filters.from_offset, filters.to_offset, filters.stream, filters.limit
    if lo is None and hi is None and stream is None and limit is None:
        return None

    def want(entry: Entry, shown: int) -> bool:
        if lo is not None and entry.offset < lo:
            return False
        if hi is not None and entry.offset >= hi:
            report.complete, report.stopped_by = False, "to"  # records come in log order: none further on
            return False
        if stream is not None and (entry.batch is None or entry.batch.stream_id != stream):
            return False
        if limit is not None and shown >= limit:
            report.complete, report.stopped_by = False, "limit"
            return False
        return True

    return want


def _explain_gaps(run: RecoverRun) -> None:
    """The sealed crash holes, and every stream gap with why it exists and what to do."""
    from walctl.wal import gaps

    report = run.report
    holes = gaps.holes_of(report.findings, report.sealed_holes)
    damage = gaps.damage_of(report.findings)
    for hole in report.sealed_holes:
        cost = ", ".join(f"stream {s} offsets {lo}..{hi}" for s, lo, hi in hole.sealed.streams)
        run.explanations.append((hole.to_json(), f"SEALED HOLE at offset {hole.start}..{hole.end} "
                                                 f"({hole.end - hole.start} bytes): {hole.describe()}; it cost "
                                                 f"{cost or 'no stream offsets (no stream continued after it)'}"))
    for gap in report.stream_gaps:
        hole, damaged = gaps.judge(gap, holes, damage)
        run.unexplained_gaps += hole is None
        run.explanations.append((gaps.gap_to_json(gap, hole, damage=damaged),
                                 "GAP " + gaps.explanation(gap, hole, damage=damaged)))
