"""walctl recover: read-only dump of every live record and every skipped range (forensics-safe)."""

from __future__ import annotations

import base64
import enum
import sys
from typing import Annotated

import typer

from walctl.cli import DeviceArg, JsonOpt, StreamOpt, app, command, emit_json, warn


class Payload(str, enum.Enum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


def encode_payload(data: bytes, how: Payload) -> str | None:
    if how is Payload.text:
        return data.decode("utf-8", errors="backslashreplace")
    if how is Payload.hex:
        return data.hex()
    if how is Payload.base64:
        return base64.b64encode(data).decode("ascii")
    return None


@app.command("recover")
@command(stream=True)
def recover_cmd(
    device: DeviceArg,
    from_offset: Annotated[int | None, typer.Option(
        "--from", min=0,
        help="Show only records whose WAL offset is >= this (bytes, logical). Reading starts at the first "
             "block at or after it (a 4 KiB aligned offset holding a valid record header that names "
             "that offset), not at the trim point; the summary's read_from_offset says where, and "
             "complete is false (what lies before was not checked).")] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to", min=0,
        help="Show only records whose WAL offset is < this (bytes, logical); reading stops at the first "
             "record at or past it (summary: complete false, stopped_by \"to\").")] = None,
    stream: StreamOpt = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=0,
        help="Stop after this many records shown. A run that stops early says so: the summary has "
             "complete false and stopped_by \"limit\" (damage further on was not checked), and the "
             "human output warns on stderr.")] = None,
    payload: Annotated[Payload, typer.Option(
        "--payload", help="Show each record's payload as text (UTF-8, invalid bytes escaped), hex, "
                          "base64, or not at all.")] = Payload.none,
    stats: Annotated[bool, typer.Option(
        "--stats", help="Print only per-stream record counts and payload bytes, then the summary.")] = False,
    hexdump: Annotated[bool, typer.Option(
        "--hexdump", help="Show the first bytes (at most 256) of each finding as xxd-like lines, "
                          "addressed by physical byte position; with --json a \"hexdump\" string field "
                          "on each finding line.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Dump the records after the trim point, following the recovery rules; never writes.

    Exit 0 for a clean log or crash damage of the last window (torn tail, holes of
    concurrent blocks after an ungraceful shutdown); 3 for any other finding. Each
    finding names its kind and its cause (zero_fill, stale_lap, checksum_mismatch,
    garbage, truncated, torn_tail, bad_header_slot, beyond_window, end_mismatch,
    bad_batch). AutoMQ's own WALs (header V0 or V1) are read with AutoMQ's checksums and
    recovery rules, for forensics.
    """
    from walctl.errors import CorruptionError
    from walctl.wal import reader
    from walctl.wal.ops import header_slot_findings, open_reader

    _refuse_short_file(device)
    session = open_reader(device)
    try:
        header = session.state.header
        for message in session.warnings:
            warn(message)
        if header.flavour != "walctl":
            warn(f"{header.flavour} WAL (AutoMQ): read with AutoMQ's checksums and recovery rules; "
                 f"walctl never writes to it")
        out = _Printer(json_out, payload, stats)
        result = reader.ScanResult(header, reader.Ring(header.capacity))

        def show(finding) -> None:
            if hexdump:
                position, data = reader.finding_bytes(session.dev, finding)
                finding.hexdump = reader.hexdump(data, position)
            out.finding(finding)

        for finding in header_slot_findings(session.state):
            result.findings.append(finding)
            show(finding)
        shown = 0
        per_stream: dict[int, list[int]] = {}
        # A live writer may add blocks while we read: then the probe beyond the window would
        # mistake them for mid-log damage, so it only runs when no writer holds the device.
        events = reader.scan(session.dev, header, result=result, probe=session.writer_pid is None,
                             seek=from_offset)
        for event in events:
            if isinstance(event, reader.Finding):
                show(event)
                continue
            if from_offset is not None and event.offset < from_offset:
                continue
            if to_offset is not None and event.offset >= to_offset:
                result.complete = False  # records come in log order: none further on is shown
                result.stopped_by = "to"
                break
            if stream is not None and (event.batch is None or event.batch.stream_id != stream):
                continue
            if limit is not None and shown >= limit:
                result.complete = False
                result.stopped_by = "limit"
                break
            shown += 1
            if stats:
                key = event.batch.stream_id if event.batch else -1
                counts = per_stream.setdefault(key, [0, 0])
                counts[0] += 1
                counts[1] += len(event.batch.payload) if event.batch else len(event.body)
            else:
                out.record(event)
        events.close()
        seeked = result.read_from_offset is not None and result.read_from_offset > result.start_offset
        if seeked and from_offset is not None and header.flavour == "walctl":
            result.complete = False  # the records before the seek point were not read
        summary = result.to_json()
        summary["records_shown"] = shown
        summary["device"] = device
        summary["flavour"] = header.flavour
        if stats:
            out.stats(per_stream)
        if not result.complete and not json_out:
            read = (f"read from offset {summary['read_from_offset']}" + (" (seek to --from)" if seeked else ""))
            warn(f"incomplete: {read}; stopped by {result.stopped_by} at offset {result.end_offset}; "
                 f"damage outside what was read was not checked (run without --from/--to/--limit for a full check)")
        corrupt = result.corrupt
        if corrupt:
            first = corrupt[0]
            exc = CorruptionError(f"{len(corrupt)} finding(s) a crash does not explain; first: {first.kind} "
                                  f"at offset {first.offset} ({first.reason})", where=device, offset=first.offset)
            if json_out:
                exc.summary = summary  # the closing summary line carries the error
            else:
                out.summary(summary)
            raise exc
        out.summary(summary)
    finally:
        session.dev.close()


def _refuse_short_file(device: str) -> None:
    """A file shorter than the two header slots is no WAL (exit 4), not a failed read (exit 6)."""
    import os
    import stat

    from walctl.errors import NotFoundError
    from walctl.format.header import HEADERS_SIZE

    try:
        st = os.stat(device)
    except OSError:
        return  # open_reader names the problem
    if stat.S_ISREG(st.st_mode) and st.st_size < HEADERS_SIZE:
        raise NotFoundError(f"no valid WAL header: the file holds {st.st_size} bytes, fewer than the two "
                            f"{HEADERS_SIZE // 2}-byte header slots", where=device)


class _Printer:
    """Renders records/findings as they come: NDJSON lines, or a streamed human table."""

    def __init__(self, json_out: bool, payload: Payload, stats: bool):
        from walctl.cli import stdout_console

        self.json_out = json_out
        self.payload = payload
        self.stats_only = stats
        self.console = None if json_out else stdout_console()
        self._header_done = False

    def record(self, entry) -> None:
        batch = entry.batch
        data = batch.payload if batch else entry.body
        if self.json_out:
            obj = {"type": "record", "offset": entry.offset,
                   "stream_id": batch.stream_id if batch else None,
                   "base_offset": batch.base_offset if batch else None,
                   "count": batch.count if batch else None,
                   "payload_bytes": len(data)}
            text = encode_payload(data, self.payload)
            if text is not None:
                obj["payload"] = text
            emit_json(obj)
            return
        if not self._header_done:
            self._line(f"{'OFFSET':>14} {'STREAM':>8} {'BASE':>12} {'COUNT':>6} {'BYTES':>8}"
                       + ("  PAYLOAD" if self.payload is not Payload.none else ""))
            self._header_done = True
        line = (f"{entry.offset:>14} {batch.stream_id if batch else '-':>8} "
                f"{batch.base_offset if batch else '-':>12} {batch.count if batch else '-':>6} {len(data):>8}")
        text = encode_payload(data, self.payload)
        if text is not None:
            line += "  " + text
        self._line(line)

    @staticmethod
    def _line(text: str) -> None:
        # Plain writes (not rich) for the record stream: a closed pipe raises BrokenPipeError,
        # which the CLI turns into exit 141, instead of rich's own SystemExit(1).
        sys.stdout.write(text + "\n")

    def finding(self, finding) -> None:
        if self.json_out:
            emit_json(finding.to_json())
            return
        j = finding.to_json()
        where = (f"offset {j['offset']} (physical {j['physical_offset']}, lap {j['lap']}, "
                 f"mod 4096 = {j['offset_mod_4096']})" if j["offset"] is not None
                 else f"physical {j['physical_offset']}")
        extra = ""
        if j["length_bytes"] is not None:
            extra += f", {j['length_bytes']} bytes"
        if j["expected_crc"] is not None:
            extra += f", crc expected 0x{j['expected_crc']:08X} found 0x{j['found_crc']:08X}"
        verdict = "crash damage" if j["explained_by_crash"] else "CORRUPTION"
        self._line(f"FINDING {j['kind']} ({j['cause']}) at {where}: {j['reason']}{extra} [{verdict}]")
        if finding.hexdump:
            for line in finding.hexdump.splitlines():
                self._line("    " + line)

    def stats(self, per_stream: dict[int, list[int]]) -> None:
        if self.json_out:
            for sid, (count, size) in sorted(per_stream.items()):
                emit_json({"type": "stream", "stream_id": sid if sid >= 0 else None, "records": count,
                           "payload_bytes": size})
            return
        from rich.table import Table

        table = Table(title="streams", title_justify="left")
        for col in ("stream", "records", "payload bytes"):
            table.add_column(col, justify="right")
        for sid, (count, size) in sorted(per_stream.items()):
            table.add_row(str(sid) if sid >= 0 else "-", str(count), str(size))
        self.console.print(table)

    def summary(self, summary: dict) -> None:
        if self.json_out:
            emit_json(summary)
            return
        from rich.table import Table

        table = Table(title="summary", show_header=False, title_justify="left")
        for key, value in summary.items():
            if key != "type":
                table.add_row(key, str(value))
        self.console.print(table)
