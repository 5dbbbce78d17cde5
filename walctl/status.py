"""walctl status: a read-only overview of a WAL (header slots, space, end of log, lock holder).

Opens the device read-only and takes no lock, like ``recover``: safe on a live or a
broken device. On a cleanly closed WAL with a checkpoint (FORMATS.md 1.6) it answers from
the headers alone; otherwise (or when asked) the end of the log comes from the same
recovery scan ``recover`` runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from walctl.format.checkpoint import Checkpoint
from walctl.format.header import WalHeader
from walctl.wal.headers import HeaderState

if TYPE_CHECKING:
    from walctl.wal import reader  # imported where a scan runs: a checkpoint's answer loads no scan
    from walctl.wal.verify import Verification


@dataclass
class StatusResult:
    """What ``wal_status`` found; ``to_json`` is the command's JSON contract (add, never rename)."""

    path: str
    device_size_bytes: int
    state: HeaderState
    scan: reader.ScanResult | None  # None only when no scan ran
    lock_holder_pid: int | None
    lock_holder_command: str | None
    warnings: list[str] = field(default_factory=list)
    live_streams: list[int] = field(default_factory=list)  # stream ids with a live record
    checkpoint: Checkpoint | None = None  # the trusted checkpoint the answer came from (no scan)
    device_bytes_read: int = 0
    verification: Verification | None = None  # status --verify-budget (None: no verification asked)
    log_moved: bool = False  # the header slots changed under a scan that found damage: rescanned
    rescans: int = 0
    lock_holder_trim: str | None = None  # the holder is a trim ("walctl upload", ...: its mark, FORMATS.md 1.8)

    @property
    def end_offset(self) -> int | None:
        if self.scan is not None:
            return self.scan.end_offset
        return self.checkpoint.log_end if self.checkpoint is not None else None

    @property
    def header(self) -> WalHeader:
        return self.state.header

    @property
    def start_offset(self) -> int:
        """Where the live log starts: the trim point (its record is deleted), or 0 before any trim."""
        return max(self.header.trim_offset, 0)

    @property
    def log_end_offset(self) -> int | None:
        """Where the log ends for its space: the scan's end, or the durable end when damage
        lies past the last valid record (the acknowledged records there still take the ring)."""
        end = self.end_offset
        durable = self.scan.durable if self.scan is not None else None
        if end is None or durable is None:
            return end
        from walctl.wal.layout import align_up  # (a scan ran: a checkpoint's answer loads no layout)

        # (a clean header's nextOffset is the end aligned up: a block's zero padding, not records)
        return durable.end if align_up(end) < durable.end else end

    @property
    def used_bytes(self) -> int | None:
        """Ring bytes in use as the writer counts them: end of log minus the trim point (logical)."""
        end = self.log_end_offset
        return None if end is None else max(end - self.start_offset, 0)

    @property
    def free_bytes(self) -> int | None:
        used = self.used_bytes
        return None if used is None else self.header.ring_size - used

    @property
    def corrupt(self) -> list[reader.Finding]:
        return self.scan.corrupt if self.scan is not None else []

    def to_json(self) -> dict:
        header = self.header
        ring = header.ring_size
        used, free = self.used_bytes, self.free_bytes
        slots = []
        for slot in self.state.slots:
            item = slot.to_json()
            item["current"] = slot.index == self.state.current
            item["header"] = slot.header.to_json() if slot.header is not None else None
            slots.append(item)
        scan = self.scan
        cp = self.checkpoint
        return {
            "device": self.path,
            "device_size_bytes": self.device_size_bytes,
            "flavour": header.flavour,
            "current_slot": self.state.current,
            "slots": slots,
            "header": header.to_json(),
            "capacity_bytes": header.capacity,
            "ring_bytes": ring,
            "headers_bytes": header.capacity - header.ring_size,
            "trim_offset": header.trim_offset,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "next_block_offset": scan.next_block_offset if scan else (header.next_offset if cp else None),
            "next_offset_in_header": header.next_offset if header.flavour == "walctl" else None,
            "used_bytes": used,
            "free_bytes": free,
            "used_percent": None if used is None else round(100.0 * used / ring, 2),
            "free_percent": None if free is None else round(100.0 * free / ring, 2),
            "shutdown_type": "graceful" if header.clean else "ungraceful",
            "sliding_window_max_length_bytes": header.sliding_window_max_length,
            "node_id": header.node_id,
            "epoch": header.epoch,
            "last_write_timestamp_ns": header.last_write_timestamp_ns,
            "records": scan.records if scan else None,
            "payload_bytes": scan.payload_bytes if scan else None,
            "streams": len(self.live_streams) if scan else None,
            "stream_ids": self.live_streams if scan else None,
            "findings": len(scan.findings) if scan else None,
            "corrupt_findings": len(scan.corrupt) if scan else None,
            "stopped_by": scan.stopped_by if scan else None,
            "complete": scan.complete if scan else None,
            **self._durable_json(),
            "bytes_read": scan.bytes_read if scan else None,
            "lock_holder_pid": self.lock_holder_pid,
            "lock_holder_command": self.lock_holder_command,
            "writer_active": self.lock_holder_pid is not None,
            "lock_holder_trim": self.lock_holder_trim,
            **self._gaps_json(),
            "scanned": scan is not None,
            "checkpoint": cp.to_json() if cp is not None else (
                self.state.checkpoint.to_json() if self.state.checkpoint is not None else None),
            "device_bytes_read": self.device_bytes_read,
            "verification": self.verification.to_json() if self.verification is not None else None,
            "log_moved": self.log_moved,
            "rescans": self.rescans,
        }

    def _durable_json(self) -> dict:
        """The durable end a scan judged damage by (none without a scan)."""
        if self.scan is None:
            return {"durable_end_offset": None, "durable_end": None}
        from walctl.wal.verdict import durable_json

        return durable_json(self.scan)

    def _gaps_json(self) -> dict:
        """Sealed crash holes and stream gaps, each with why it exists and what to do (walctl.wal.gaps)."""
        if self.scan is None:
            return {"sealed_holes": None, "stream_gaps": None}
        from walctl.wal import gaps

        holes = gaps.holes_of(self.scan.findings, self.scan.sealed_holes)
        damage = gaps.damage_of(self.scan.findings)
        stream_gaps = []
        for gap in self.scan.stream_gaps:
            hole, damaged = gaps.judge(gap, holes, damage)
            stream_gaps.append(gaps.gap_to_json(gap, hole, damage=damaged))
        return {"sealed_holes": [h.to_json() for h in self.scan.sealed_holes], "stream_gaps": stream_gaps}


@dataclass(frozen=True)
class VerifyRequest:
    """status --verify-budget: verify at most ``budget_bytes`` of the live log, going on from where
    the run before stopped (remembered in ``state_file``)."""

    budget_bytes: int
    state_file: str


def wal_status(path: str, *, scan: bool = False, progress=None, verify: VerifyRequest | None = None) -> StatusResult:
    """Read both header slots, and scan the log to its end unless a trusted checkpoint answers
    (a cleanly closed walctl WAL, FORMATS.md 1.6) or ``scan`` is False; never writes, takes no lock.
    ``progress(done, total)``, if given, is called as the scan goes (log bytes past the trim point;
    ``total`` the header's end of log, None when unknown); not at all when no scan runs.

    Raises:
        NotFoundError: no such device, or no valid WAL header.
        CorruptionError: the header's capacity exceeds the device.
        IOFailure: the device cannot be read.
    """
    from walctl.device.fdio import bytes_read_total
    from walctl.wal.lifecycle import open_reader, trusted_checkpoint

    read_before = bytes_read_total()
    session = open_reader(path)
    try:
        warnings = list(session.warnings)
        checkpoint = trusted_checkpoint(session.state)
        if checkpoint is not None and not scan and session.writer_pid is None:
            verification = _verify(session, path, verify, None, progress) if verify is not None else None
            return StatusResult(path, session.dev.size_bytes, session.state, None, None, None, warnings,
                                checkpoint=checkpoint, device_bytes_read=bytes_read_total() - read_before,
                                verification=verification)
        scan, streams = _scan(session, progress)
        moved, settled, rescans = None, True, 0
        if scan.corrupt:
            # Damage: was it on the device, or did a writer start, stop or trim under the scan?
            moved = session.moved()
            if moved is not None:
                scanned: dict = {}

                def rescan(s) -> reader.ScanResult:
                    scanned["scan"], scanned["streams"] = _scan(s, progress)
                    return scanned["scan"]

                scan, settled, rescans = session.settled_scan(rescan)
                streams = scanned["streams"]
                if not settled:
                    for f in scan.corrupt:
                        f.moved = True  # not judged: the log kept moving (docs/CLI.md)
                    warnings.append(f"the log moved during the scan ({moved}) and kept moving under {rescans} "
                                    f"{'rescan' if rescans == 1 else 'rescans'}: its findings were not judged; run status --scan again when the "
                                    "writer is idle")
                elif not scan.corrupt:
                    warnings.append(f"the log moved during the scan ({moved}): rescanned the log as it is now "
                                    "(the figures are the rescan's)")
        # A live writer: the device layer's warning already says the figures may be moving.
        verification = _verify(session, path, verify, scan, None) if verify is not None else None
        return StatusResult(path, session.dev.size_bytes, session.state, scan, session.writer_pid,
                            _command_of(session.writer_pid), warnings, sorted(streams),
                            device_bytes_read=bytes_read_total() - read_before, verification=verification,
                            log_moved=moved is not None, rescans=rescans,
                            lock_holder_trim=_trim_of(path, session.writer_pid))
    finally:
        session.dev.close()


def _scan(session, progress) -> tuple[reader.ScanResult, set[int]]:
    """One scan of the log from the session's header: its report and the live streams' ids."""
    from walctl.wal import reader
    from walctl.wal.verdict import durable_points

    header = session.state.header
    streams: set[int] = set()
    # AutoMQ's WALs too: the scan reads them with AutoMQ's checksums and rules (forensics).
    # Damage below the durable points the header slot records is corruption, read past (as recover).
    scan = reader.ScanResult(header, reader.Ring(header.capacity), durable=durable_points(session.state))
    # With a live writer, blocks may land while we read: the probe beyond the window
    # would take them for mid-log damage, so (as recover) it runs only with no writer.
    start, end = max(header.trim_offset, 0), getattr(header, "next_offset", None)
    if progress is not None:
        progress(0, end - start if end and end > start else None)
    # In bulk (runs of intact records come as one Run each, decoded a chunk at a time) and,
    # with no writer, with recover's read-ahead (the device read on ahead of the decoding).
    idle = session.writer_pid is None
    pause = os.environ.get("WALCTL_FAILPOINT", "").startswith("status-scan")  # tests: a writer starts mid-scan
    for event in reader.Scan(session.dev, header, report=scan, probe=idle, bulk=True, readahead=idle):
        if pause:
            from walctl.failpoints import failpoint

            failpoint("status-scan")
        if progress is not None:
            progress(max(event.offset - start, 0))
        if isinstance(event, reader.Run):
            streams.update(event.column(4))  # bulk.ROW field 4: stream id
        elif isinstance(event, reader.Entry) and event.batch is not None:
            streams.add(event.batch.stream_id)
    return scan, streams


def _verify(session, path: str, request: VerifyRequest, full: reader.ScanResult | None,
            progress) -> Verification:
    """One run of the incremental verification (walctl.wal.verify), its state file updated: a
    budgeted range from where the last run stopped, or ``full``, a whole scan status made anyway
    (no checkpoint answers: a running or crashed writer; or --scan), taken as a complete pass."""
    from walctl.wal import verify
    from walctl.wal.lifecycle import read_wal_state, trusted_checkpoint

    header = session.state.header
    devices = verify.load_state(request.state_file)
    key = os.path.abspath(path)  # (not realpath: /dev/disk/by-id names stay, /dev/nvme1n1 may change)
    checkpoint = trusted_checkpoint(session.state)
    entry, restarted = verify.entry_for(devices, key, header, checkpoint.log_end if checkpoint is not None else None)
    if full is not None:
        done = verify.from_full_scan(full)
    else:
        if progress is not None:
            progress(0, request.budget_bytes)
        done = verify.verify_range(session.dev, header, verify.resume_offset(entry, header), request.budget_bytes,
                                   progress=progress)
    corrupt = verify.judge(done.findings, header, done.through_offset if done.reached_end else None)
    # A writer may have trimmed (and written over) records while they were read: what lies at or
    # before the trim point now is gone, not damaged.
    now = read_wal_state(session.dev, path).header
    later = header.with_(trim_offset=now.trim_offset) if now.trim_offset > header.trim_offset else header
    found = verify.remember(entry, later, done, corrupt)
    devices[key] = entry.to_json()
    verify.save_state(request.state_file, devices)
    return verify.Verification(done, list(entry.corrupt), found, request.state_file, entry.passes,
                               entry.last_pass_ns, restarted)


def _trim_of(path: str, pid: int | None) -> str | None:
    """The trim's command ("walctl upload") when the lock's holder ``pid`` is a marked trim, else None
    (a query of the mark: no lock taken, nothing written)."""
    if pid is None:
        return None
    from walctl.device.locks import trim_holding

    trim = trim_holding(path, pid)
    return trim.command if trim is not None else None


def _command_of(pid: int | None) -> str | None:
    """The holder's process name from /proc/PID/comm (None when gone or unreadable).

    Not its command line: that may carry record payloads or credentials.
    """
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            name = f.read().strip().decode("utf-8", "replace")
    except OSError:
        return None
    return name or None
