"""walctl recover: read-only dump of every live record and every skipped range (forensics-safe)."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer

from walctl.commands._shared import (DeviceArg, JsonOpt, StreamOpt, command, emit_json, progress_bar, warn,
                                     write_lines)


class Payload(str, enum.Enum):
    text = "text"
    hex = "hex"
    base64 = "base64"
    none = "none"


def encode_payload(data, how: Payload) -> str | None:
    """A payload (bytes, or a view: no copy for hex and base64) as --payload shows it."""
    if how is Payload.text:
        return (data if isinstance(data, bytes) else bytes(data)).decode("utf-8", errors="backslashreplace")
    if how is Payload.hex:
        return data.hex()
    if how is Payload.base64:
        import binascii  # (only for --payload base64)

        return binascii.b2a_base64(data, newline=False).decode("ascii")
    return None


PARTIAL_JSON_WARNING = ('--limit/--from/--to show part of the log: "records" counts every live record, '
                        '"records_shown" those printed')


@command("recover", stream=True)
def recover_cmd(
    device: DeviceArg,
    from_offset: Annotated[int | None, typer.Option(
        "--from", min=0,
        help="Show only records whose WAL offset is >= this (bytes, logical). Reading starts at the first "
             "record at or after it (found through the block holding it, so none at or after it is "
             "skipped; if damage breaks that chain, the first block at or after it), not at the trim "
             "point; the summary's read_from_offset is that record's offset, and complete is false "
             "(what lies before was not checked).")] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to", min=0,
        help="Show only records whose WAL offset is < this (bytes, logical); reading stops at the first "
             "record at or past it (summary: complete false, stopped_by \"to\").")] = None,
    stream: StreamOpt = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1,
        help="Stop after this many records shown. A run that stops early says so: the summary has "
             "complete false and stopped_by \"limit\" (damage further on was not checked), and the "
             "output warns on stderr (with --json too: \"records\" counts every live record, "
             "\"records_shown\" those printed).")] = None,
    payload: Annotated[Payload, typer.Option(
        "--payload", help="Show each record's payload as text (UTF-8, invalid bytes escaped), hex, "
                          "base64, or not at all.")] = Payload.none,
    stats: Annotated[bool, typer.Option(
        "--stats", help="Print only per-stream record counts and payload bytes, then the summary.")] = False,
    hexdump: Annotated[bool, typer.Option(
        "--hexdump", help="Show the first bytes (at most 256) of each finding as xxd-like lines, "
                          "addressed by physical byte position; with --json a \"hexdump\" string field "
                          "on each finding line.")] = False,
    block_size: Annotated[str | None, typer.Option(
        "--block-size", metavar="SIZE",
        help="AutoMQ WALs only: the block size its JVM ran with (automq.ebswal.blocksize: 512, 4KiB, "
             "8KiB ...), which sizes its header slots and aligns its blocks. Default: detected from "
             "the header slots or the first record, else AutoMQ's default 4KiB.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Dump the records after the trim point, following the recovery rules; never writes.

    Exit 0 for a clean log or crash damage of the last window (torn tail, holes of
    concurrent blocks after an ungraceful shutdown); 3 for any other finding. Each
    finding names its kind, its cause (zero_fill, stale_lap, checksum_mismatch,
    garbage, truncated, torn_tail, bad_header_slot, beyond_window, end_mismatch,
    bad_batch) and the rule that decided its verdict. Damage below the durable end
    (the checkpoint's log end, the header's nextOffset, a sealed hole's end) is
    corruption of acknowledged records, never crash damage: recover reads past it, to
    the next valid record header, and shows and counts every intact record after it. AutoMQ's own WALs (header V0 or V1) are read with AutoMQ's checksums and
    recovery rules, for forensics. After the records: each sealed crash hole (when it was
    sealed, the stream offsets it cost) and each stream gap with its cause (crash, or none)
    and what to do ("sealed_hole" and "stream_gap" lines with --json). A writer that
    starts, stops or trims while recover reads is no damage: damage seen after the header
    slots changed is judged by a rescan of the log as it is then (at most 3); none there, or a
    log that keeps moving, is a warning and "log_moved": true (findings marked
    explained_by_log_move, printed after the records), exit 0.
    """
    from walctl.wal.lifecycle import open_reader
    from walctl.wal.verdict import RecoverFilter, recover

    if from_offset is not None and to_offset is not None:  # (walctl.options: only for a range to check)
        from walctl.options import check_order

        check_order(from_offset, to_offset, "--from", "--to")
    _refuse_short_file(device)
    session = open_reader(device, block_size=_block_size(block_size))
    try:
        _warn_about(session)
        header = session.state.header
        out = _Printer(json_out, payload, stats)
        start = max(header.trim_offset, 0, from_offset or 0)
        end = getattr(header, "next_offset", None)
        with progress_bar(end - start if end and end > start else None, "scanning the WAL", json_out=json_out,
                          streaming=True) as progress:
            # A live writer may add blocks while we read: then the probe beyond the window would
            # mistake them for mid-log damage, so it only runs when no writer holds the device.
            run = recover(session.dev, session.state, device, probe=session.writer_pid is None,
                          filters=RecoverFilter(from_offset, to_offset, stream, limit), stats=stats,
                          with_hexdump=hexdump, on_record=out.record, on_finding=out.finding, progress=progress,
                          on_run=out.run, watch=session)
    finally:
        session.dev.close()
    out.flush()  # the record lines, before any summary or error line (also one the boundary prints)
    for obj, text in run.explanations:
        out.explained(obj, text)
    if stats:
        out.stats(run.per_stream)
    summary = run.summary()
    if run.moved_warning():
        warn(run.moved_warning())
    if run.incomplete() and not json_out:
        warn(run.incomplete())
    if json_out and (limit is not None or from_offset is not None or to_offset is not None):
        warn(PARTIAL_JSON_WARNING)
    exc = run.error()
    if exc is not None and json_out:
        exc.summary = summary  # the closing summary line carries the error
        raise exc
    out.summary(summary)
    if exc is not None:
        raise exc


def _warn_about(session) -> None:
    """The device's warnings, and how an AutoMQ WAL is read."""
    for message in session.warnings:
        warn(message)
    header = session.state.header
    if header.flavour != "walctl":
        warn(f"{header.flavour} WAL (AutoMQ): read with AutoMQ's checksums and recovery rules; "
             f"walctl never writes to it; block size {header.block_size} bytes "
             f"({session.state.block_size_source})")
        if session.state.block_size_source == "default":
            warn("AutoMQ block size not detectable (one header slot, no record where recovery starts): "
                 "assuming AutoMQ's default 4096; pass --block-size if its JVM set automq.ebswal.blocksize")


def _block_size(text: str | None) -> int | None:
    if text is None:
        return None
    from walctl.errors import UsageError
    from walctl.format.header import AUTOMQ_BLOCK_SIZES
    from walctl.sizes import parse_size

    size = parse_size(text)
    if size not in AUTOMQ_BLOCK_SIZES:
        raise UsageError(f"--block-size {text} is not one of AutoMQ's block sizes", where="recover",
                         hint="a power of two from 512 to 64KiB, as automq.ebswal.blocksize")
    return size


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
                            f"{HEADERS_SIZE // 2}-byte header slots", where=device,
                            hint="name the WAL's device or file; 'walctl init' creates one")


_WRITE_BYTES = 64 << 10  # record lines are written this many characters at a time
_RECORD_LINE = ('{"type":"record","offset":%d,"stream_id":%d,"base_offset":%d,"count":%d,"payload_bytes":%d,'
                '"wal_offset":%d,"stream_offset":%d}\n')
_BAD_RECORD_LINE = ('{"type":"record","offset":%d,"stream_id":null,"base_offset":null,"count":null,"payload_bytes":%d,'
                    '"wal_offset":%d,"stream_offset":null}\n')


class _Printer:
    """Renders records/findings as they come: NDJSON lines, or a streamed human table."""

    def __init__(self, json_out: bool, payload: Payload, stats: bool):
        from walctl.commands._shared import stdout_console

        self.json_out = json_out
        self.payload = payload
        self.stats_only = stats
        self.console = None if json_out else stdout_console()
        if payload is not Payload.none and not stats:
            from walctl.native import keep_freed_memory

            # Each run's rendered payload lines (twice its bytes with hex) in reused heap memory, not in
            # fresh pages the kernel zeroes and faults in: half of --payload hex's time was that (issue 31).
            keep_freed_memory()
        self._header_done = False
        self._fast: dict[bool, bool] = {}  # template (batch or not) -> it renders what the dict does
        self._lines: list[str] = []  # record lines not yet written (whole lines: see write_lines)
        self._size = 0

    def _write(self, text: str) -> None:
        self._lines.append(text)
        self._size += len(text)
        if self._size >= _WRITE_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the record lines gathered so far, whole (an interruption never cuts one short)."""
        if self._lines:
            text, self._lines, self._size = "".join(self._lines), [], 0
            write_lines(text)

    def _render(self, entry, data) -> str:
        """A record's NDJSON line, from its dict."""
        batch = entry.batch
        obj = {"type": "record", "offset": entry.offset,
               "stream_id": batch.stream_id if batch else None,
               "base_offset": batch.base_offset if batch else None,
               "count": batch.count if batch else None,
               "payload_bytes": len(data),
               # the same two offsets, named apart: bytes in the WAL vs the stream's record number
               "wal_offset": entry.offset, "stream_offset": batch.base_offset if batch else None}
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
                line = (_RECORD_LINE % (entry.offset, batch.stream_id, batch.base_offset, batch.count, len(data),
                                        entry.offset, batch.base_offset)
                        if batch is not None else _BAD_RECORD_LINE % (entry.offset, len(data), entry.offset))
                kind = batch is not None
                fast = self._fast.get(kind)
                if fast is None:
                    fast = self._fast[kind] = line == self._render(entry, data)
                if fast:
                    self._write(line)
                    return
            self._write(self._render(entry, data))
            return
        if not self._header_done:
            self._line(f"{'WAL OFFSET':>14} {'STREAM':>8} {'STREAM OFFSET':>13} {'COUNT':>6} {'BYTES':>8}"
                       + ("  PAYLOAD" if self.payload is not Payload.none else ""))
            self._header_done = True
        line = (f"{entry.offset:>14} {batch.stream_id if batch else '-':>8} "
                f"{batch.base_offset if batch else '-':>13} {batch.count if batch else '-':>6} {len(data):>8}")
        text = encode_payload(data, self.payload)
        if text is not None:
            line += "  " + text
        self._line(line)

    def run(self, run) -> None:
        """A run of live records (all batches), valid only during this call: with --json
        --payload none its lines formatted from the decoded fields in one go (once the template
        matched the dict's rendering), else record by record."""
        if self.json_out and self.payload is Payload.none and self._fast.get(True) is not False:
            if self._fast.get(True) is None:
                self.record(run.entries(1)[0])  # checks the template against the dict's rendering
                if self._fast[True]:
                    self.run_lines(run, 1)
                else:
                    for entry in run.entries()[1:]:
                        self.record(entry)
                return
            self.run_lines(run, 0)
            return
        if self.json_out and self.payload is not Payload.none and self._payload_lines(run):
            return
        for entry in run.entries():
            self.record(entry)

    def _payload_lines(self, run) -> bool:
        """--json with --payload hex|base64|text: the run's lines in one C call (walctl.format.framepack
        record_lines), the first checked once to be byte for byte the dict's rendering. False: render
        record by record (no C extension, text JSON would escape, or the check failed)."""
        if self._fast.get("payload") is False:
            return False
        from walctl.format.framepack import record_lines

        data = record_lines(run.chunk, run.rows, run.first, run.stop, self.payload.value)
        if data is None:
            return False
        if "payload" not in self._fast:
            entry = run.entries(1)[0]
            first = data[:data.index(b"\n") + 1].decode("ascii")
            self._fast["payload"] = first == self._render(entry, entry.batch.payload)
            if not self._fast["payload"]:
                return False
        self.flush()
        write_lines(data)  # bytes: written as they are
        return True

    def run_lines(self, run, skip: int) -> None:
        from walctl.format.batch import HEADER_SIZE

        offsets, lengths, bases = run.column(0)[skip:], run.column(2)[skip:], run.column(6)[skip:]
        payloads = [n - HEADER_SIZE for n in lengths]
        fields = zip(offsets, run.column(4)[skip:], bases, run.column(7)[skip:], payloads, offsets, bases)
        self._write("".join(map(_RECORD_LINE.__mod__, fields)))

    def _line(self, text: str) -> None:
        # Plain writes (not rich) for the record stream: a closed pipe raises BrokenPipeError,
        # which the CLI turns into exit 141, instead of rich's own SystemExit(1).
        self._write(text + "\n")

    def finding(self, finding) -> None:
        self.flush()
        if self.json_out:
            emit_json(finding.to_json())
            return
        j = finding.to_json()
        where = (f"WAL offset {j['offset']} (physical {j['physical_offset']}, lap {j['lap']}, "
                 f"mod 4096 = {j['offset_mod_4096']})" if j["offset"] is not None
                 else f"physical {j['physical_offset']}")
        extra = ""
        if j["length_bytes"] is not None:
            extra += f", {j['length_bytes']} bytes"
        if j["expected_crc"] is not None:
            extra += f", crc expected 0x{j['expected_crc']:08X} found 0x{j['found_crc']:08X}"
        verdict = ("crash damage: " + j["rule"] if j["explained_by_crash"] else
                   "seen while the log moved: not judged" if j["explained_by_log_move"] else
                   "CORRUPTION: " + j["rule"])
        self._line(f"FINDING {j['kind']} ({j['cause']}) at {where}: {j['reason']}{extra} [{verdict}]")
        if finding.hexdump:
            for line in finding.hexdump.splitlines():
                self._line("    " + line)

    def explained(self, obj: dict, text: str) -> None:
        """A sealed hole or a stream gap: its JSON line, or one human line."""
        self.flush()
        if self.json_out:
            emit_json(obj)
        else:
            self._line(text)

    def stats(self, per_stream: dict[int, list[int]]) -> None:
        self.flush()
        if self.json_out:
            for sid, (count, size) in sorted(per_stream.items()):
                emit_json({"type": "stream", "stream_id": sid if sid >= 0 else None, "records": count,
                           "payload_bytes": size})
            return
        from rich.table import Table

        table = Table(title="streams", title_justify="left")
        from walctl.human import size as human_size

        for col in ("stream", "records", "payload"):
            table.add_column(col, justify="right")
        for sid, (count, size) in sorted(per_stream.items()):
            table.add_row(str(sid) if sid >= 0 else "-", f"{count:,}", human_size(size))
        self.console.print(table)

    def summary(self, summary: dict) -> None:
        self.flush()
        if self.json_out:
            emit_json(summary)
            return
        from walctl import human

        rows = []
        for key, value in summary.items():
            if key == "type":
                continue
            name = human.label(key)
            if key in ("trim_offset", "start_offset", "end_offset"):
                name = name.replace(" offset", "") + " (WAL offset)"
                value = human.NONE if value is None or value < 0 else str(value)
            else:
                value = human.value(key, value)
            rows.append((name, value))
        self.console.print(human.kv_table(rows, "summary"))
