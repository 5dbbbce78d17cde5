"""The recovery scan (docs/FORMATS.md 1.4): records after the trim point, and every skipped range.

The pieces, bottom up:
- walctl.wal.decoder: the step decoder (Record or Skip at an offset); the bulk decode of a
  run of intact records from one buffer is walctl.format.bulk.decode_records;
- walctl.wal.native_scan / walctl.wal.automq_scan: the recovery policy of walctl's own logs
  and of AutoMQ's V0/V1 logs, over that decoder;
- this module: ``Scan`` (one scan: iterate its events, its ``report`` fills as it goes),
  ``scan_report`` (a whole scan, just the report), and forensics helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from walctl.device.buffers import aligned_buffer
from walctl.format.header import WalHeader
from walctl.lazynames import module_getattr
from walctl.wal.findings import (BAD_BATCH, BAD_HEADER_SLOT, BAD_PADDING, BEYOND_WINDOW, CAUSES, DISCARDED,
                                 END_MISMATCH, HOLE, TORN_TAIL, TRIM_RECORD, Cause, Finding, Kind)
from walctl.wal.native_scan import NativeScan
from walctl.wal.ringread import CHUNK_BYTES, Entry, LogReader, Run, ScanResult
from walctl.wal.layout import Ring, align_down, align_up

if TYPE_CHECKING:
    from walctl.device.base import Device

HEXDUMP_BYTES = 256  # recover --hexdump shows at most this many bytes of each finding


# AUTOMQ_EXTRA_SCAN_BYTES is re-exported, imported on first use (as AutomqScan is).
__getattr__ = module_getattr(__name__, {"AUTOMQ_EXTRA_SCAN_BYTES": "automq_scan"}, globals(), package="walctl.wal")

__all__ = ["AUTOMQ_EXTRA_SCAN_BYTES", "BAD_BATCH", "BAD_HEADER_SLOT", "BAD_PADDING", "BEYOND_WINDOW", "CAUSES",
           "CHUNK_BYTES", "DISCARDED", "END_MISMATCH", "HOLE", "TORN_TAIL", "TRIM_RECORD", "Cause", "Entry",
           "Finding", "Kind", "LogReader", "Ring", "Run", "Scan", "ScanResult", "finding_bytes", "hexdump",
           "read_physical", "run_scan", "scan", "scan_report"]


class Scan:
    """One recovery scan of a WAL: iterate it for its records (Entry) and findings in log order;
    ``report`` (a ScanResult) is filled as it goes, and is whole once the iteration ends.

    AutoMQ's logs (header flavour "automq-v0"/"automq-v1") follow AutoMQ's own rules
    (walctl.wal.automq_scan); walctl only ever reads them.

    Args:
        probe: in a log whose writer did not close cleanly, after a stop forced by the
            sliding-window rule, look at every 4 KiB boundary up to one ring past the
            trim point for valid records; finding one proves mid-log damage (a crash
            never writes past the window). Costs a read of the rest of the ring.
        keep_offsets: remember every record offset in ``report.record_offsets``.
        seek: start reading at the first record at or after this offset instead of the trim
            point (NativeScan._seek says how it is found); ``report.read_from_offset`` says
            where (walctl's native WALs; ignored for AutoMQ's).
        report: a ScanResult to fill (a caller's own), else a new one.
        bulk: runs of intact records may come as one ``Run`` event each (already counted in
            the report; valid only until the next event) instead of an Entry per record.
        readahead: read the device ahead of the decoding on a thread (LogReader; walctl's own
            logs): same events and report; a scan stopped early (or a crashed log's end) may
            have read, and counts in ``bytes_read``, up to READ_AHEAD_DEPTH reads more. End the
            scan (iterate it to its end, or ``close()``) before closing the device.
    """

    def __init__(self, dev: Device, header: WalHeader, *, probe: bool = True, keep_offsets: bool = False,
                 seek: int | None = None, report: ScanResult | None = None, bulk: bool = False,
                 readahead: bool = False):
        ring = Ring(header.capacity, header.block_size)
        self.report = report if report is not None else ScanResult(header, ring)
        self.report.header, self.report.ring = header, ring
        if header.flavour == "walctl":
            policy = NativeScan(dev, header, self.report, probe=probe, keep_offsets=keep_offsets, readahead=readahead)
        else:
            from walctl.wal.automq_scan import AutomqScan  # (AutoMQ's logs only: a walctl scan never loads it)

            policy = AutomqScan(dev, header, self.report, probe=probe, keep_offsets=keep_offsets)
        self._events = policy.events(seek, bulk)

    def __iter__(self) -> Iterator[Entry | Run | Finding]:
        return self._events

    def close(self) -> None:
        self._events.close()

    def drain(self) -> ScanResult:
        """Run the scan to its end; return the report."""
        for _ in self._events:
            pass
        return self.report


def scan_report(dev: Device, header: WalHeader, **kwargs) -> ScanResult:
    """A whole scan's report (Scan's arguments), its events dropped."""
    return Scan(dev, header, **kwargs).drain()


def scan(dev: Device, header: WalHeader, *, probe: bool = True, keep_offsets: bool = False,
         result: ScanResult | None = None, seek: int | None = None) -> Iterator[Entry | Finding]:
    """Scan's events as a generator filling ``result`` (the form the callers of before Scan use)."""
    yield from Scan(dev, header, probe=probe, keep_offsets=keep_offsets, seek=seek, report=result)


def run_scan(dev: Device, header: WalHeader, **kwargs) -> tuple[list[Entry], ScanResult]:
    """Scan to the end, keeping every record (for small logs and tests)."""
    one = Scan(dev, header, **kwargs)
    entries = [e for e in one if isinstance(e, Entry)]
    return entries, one.report


# -- forensics helpers ------------------------------------------------------------------

def read_physical(dev: Device, position: int, length: int) -> bytes:
    """``length`` bytes at a physical position through aligned reads (O_DIRECT-safe); shorter at the
    end of the device."""
    size = getattr(dev, "size_bytes", None)
    if size is not None:
        length = max(0, min(length, size - position))
    if length <= 0:
        return b""
    start = align_down(position)
    end = align_up(position + length)
    if size is not None and end > size:
        end = align_down(size)
        length = max(0, min(length, end - position))
        if length <= 0:
            return b""
    buf = aligned_buffer(end - start)
    dev.pread_into(start, memoryview(buf)[:end - start])
    return bytes(memoryview(buf)[position - start:position - start + length])


def finding_bytes(dev: Device, finding: Finding, limit: int = HEXDUMP_BYTES) -> tuple[int, bytes]:
    """(physical position, first bytes) of a finding: a header slot, or the ring from its offset up
    to its end, the end of the lap, or ``limit`` bytes."""
    if finding.physical_offset is not None:
        return finding.physical_offset, read_physical(dev, finding.physical_offset, limit)
    ring = finding.ring
    length = limit
    if finding.end_offset is not None and finding.end_offset > finding.offset:
        length = min(length, finding.end_offset - finding.offset)
    length = min(length, ring.lap_end(finding.offset) - finding.offset)
    position = ring.physical(finding.offset)
    return position, read_physical(dev, position, length)


def hexdump(data: bytes, address: int = 0) -> str:
    """xxd-like lines: ``address: 16 bytes as 8 groups of 4 hex digits  ascii``, joined by newlines."""
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        groups = " ".join(chunk[j:j + 2].hex() for j in range(0, len(chunk), 2))
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{address + i:08x}: {groups:<39}  {text}")
    return "\n".join(lines)


