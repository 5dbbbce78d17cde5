"""walctl recover: read-only dump of every live record and every skipped range (forensics-safe)."""

from __future__ import annotations

import base64
import enum
import json
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
        "--from", min=0, help="Show only records whose WAL offset is >= this (bytes, logical).")] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to", min=0, help="Show only records whose WAL offset is < this (bytes, logical).")] = None,
    stream: StreamOpt = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=0, help="Stop after this many records shown.")] = None,
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
    recovery rules, for forensics. After the records: each sealed crash hole (when it was
    sealed, the stream offsets it cost) and each stream gap with its cause (crash, or none)
    and what to do ("sealed_hole" and "stream_gap" lines with --json).
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
        events = reader.scan(session.dev, header, result=result, probe=session.writer_pid is None)
        for event in events:
            if isinstance(event, reader.Finding):
                show(event)
                continue
            if from_offset is not None and event.offset < from_offset:
                continue
            if to_offset is not None and event.offset >= to_offset:
                continue
            if stream is not None and (event.batch is None or event.batch.stream_id != stream):
                continue
            if limit is not None and shown >= limit:
                result.complete = False
                break
            shown += 1
            if stats:
                key = event.batch.stream_id if event.batch else -1
                counts = per_stream.setdefault(key, [0, 0])
                counts[0] += 1
                counts[1] += len(event.batch.payload) if event.batch else len(event.body)
            else:
                out.record(event)
        unexplained = _explain_gaps(out, result)
        summary = result.to_json()
        summary["sealed_holes"] = len(result.sealed_holes)
        summary["stream_gaps"] = len(result.stream_gaps)
        summary["unexplained_stream_gaps"] = unexplained
        summary["records_shown"] = shown
        summary["device"] = device
        summary["flavour"] = header.flavour
        if stats:
            out.stats(per_stream)
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


def _explain_gaps(out: "_Printer", result) -> int:
    """Print the sealed crash holes and every stream gap with why it exists and what to do;
    return how many gaps no crash explains."""
    from walctl.wal import gaps

    holes = gaps.holes_of(result.findings, result.sealed_holes)
    for hole in result.sealed_holes:
        out.explained(hole.to_json(), f"SEALED HOLE at offset {hole.start}..{hole.end} "
                                      f"({hole.end - hole.start} bytes): {hole.describe()}; it cost " +
                      (", ".join(f"stream {s} offsets {lo}..{hi}" for s, lo, hi in hole.sealed.streams)
                       or "no stream offsets (no stream continued after it)"))
    unexplained = 0
    for gap in result.stream_gaps:
        hole = gaps.explain(gap, holes)
        unexplained += hole is None
        out.explained(gaps.gap_to_json(gap, hole), "GAP " + gaps.explanation(gap, hole))
    return unexplained


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


_RECORD_LINE = '{"type":"record","offset":%d,"stream_id":%d,"base_offset":%d,"count":%d,"payload_bytes":%d}\n'
_BAD_RECORD_LINE = '{"type":"record","offset":%d,"stream_id":null,"base_offset":null,"count":null,"payload_bytes":%d}\n'


class _Printer:
    """Renders records/findings as they come: NDJSON lines, or a streamed human table."""

    def __init__(self, json_out: bool, payload: Payload, stats: bool):
        from walctl.cli import stdout_console

        self.json_out = json_out
        self.payload = payload
        self.stats_only = stats
        self.console = None if json_out else stdout_console()
        self._header_done = False
        self._fast: dict[bool, bool] = {}  # template (batch or not) -> it renders what the dict does

    def _render(self, entry, data) -> str:
        """A record's NDJSON line, from its dict."""
        batch = entry.batch
        obj = {"type": "record", "offset": entry.offset,
               "stream_id": batch.stream_id if batch else None,
               "base_offset": batch.base_offset if batch else None,
               "count": batch.count if batch else None,
               "payload_bytes": len(data)}
        text = encode_payload(data, self.payload)
        if text is not None:
            obj["payload"] = text
        return json.dumps(obj, separators=(",", ":")) + "\n"

    def record(self, entry) -> None:
        batch = entry.batch
        data = batch.payload if batch else entry.body
        if self.json_out:
            # Record lines are written, not flushed one by one (the summary or a finding flushes):
            # a syscall per record would cap the stream. With --payload none the line is formatted
            # without building a dict; it is checked once (per template) to be byte for byte the
            # dict's rendering, else the dict is used from then on.
            if self.payload is Payload.none:
                line = (_RECORD_LINE % (entry.offset, batch.stream_id, batch.base_offset, batch.count, len(data))
                        if batch is not None else _BAD_RECORD_LINE % (entry.offset, len(data)))
                kind = batch is not None
                fast = self._fast.get(kind)
                if fast is None:
                    fast = self._fast[kind] = line == self._render(entry, data)
                if fast:
                    sys.stdout.write(line)
                    return
            sys.stdout.write(self._render(entry, data))
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

    def explained(self, obj: dict, text: str) -> None:
        """A sealed hole or a stream gap: its JSON line, or one human line."""
        if self.json_out:
            emit_json(obj)
        else:
            self._line(text)

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
