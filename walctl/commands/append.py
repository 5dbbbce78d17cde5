"""walctl append: write records durably; print each offset as soon as it is acknowledged."""

from __future__ import annotations

import enum
import sys
import time
from typing import Annotated

import typer

from walctl.commands._shared import (DeviceArg, EndpointOpt, JsonOpt, StreamOpt, command, emit_json, silence_stdout,
                                     warn, write_lines)
from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, RetryForOpt, S3ConnectTimeoutOpt,
                                     S3ReadTimeoutOpt, s3_settings)
from walctl.defaults import DEFAULT_IODEPTH, FILE_IODEPTH
from walctl.errors import EXIT_BROKEN_PIPE
# Input framing lives in the engine (walctl.wal.feed: large reads, records framed and packed in C).
from walctl.wal.framing import Framing
from walctl.options import Duration

_clock = time.perf_counter_ns


class AckMode(str, enum.Enum):
    """append --ack: a line per durable record, or per durable range of records."""

    records = "records"
    ranges = "ranges"


@command("append", stream=True)
def append_cmd(
    device: DeviceArg,
    data: Annotated[list[str] | None, typer.Argument(
        metavar="[DATA]...", help="Each argument is appended as one record (UTF-8 payload). A lone '-' reads standard "
                                       "input instead, framed per --framing (as --input -).")] = None,
    stream: StreamOpt = None,
    input_path: Annotated[str | None, typer.Option(
        "--input", "-i", metavar="FILE|-",
        help="Read records from FILE, or from stdin with '-', framed per --framing; streamed: each "
             "offset is printed as soon as that record is durable.")] = None,
    framing: Annotated[Framing, typer.Option(
        "--framing", help="How --input is cut into records: 'lines' (one record per line, newline "
                          "dropped), 'length-prefixed' (4-byte big-endian length + bytes), 'raw' (the "
                          "whole input is one record).")] = Framing.lines,
    base_offset: Annotated[int | None, typer.Option(
        "--base-offset", min=0,
        help="Stream offset of the first record (default: continue the stream's offsets found in the "
             "WAL; required when the stream has no record left after a trim). The --json summary's "
             "next_base_offset is where the next run resumes, also after an error or a signal.")] = None,
    store: Annotated[str | None, typer.Option(
        "--store", metavar="URL",
        help="Object store the WAL uploads to: when the stream has no record left in the WAL (uploaded "
             "and trimmed) and the checkpoint does not know it, its offsets continue from the store's "
             "manifest; with --upload-at, where the writer uploads.")] = None,
    upload_at: Annotated[str | None, typer.Option(
        "--upload-at", metavar="SIZE",
        help="Writer-side upload (needs --store): each time SIZE bytes of acknowledged records lie past "
             "the trim point, upload them from this process in the background, commit, and trim the WAL "
             "(AutoMQ's default is 512MiB; capped at half the ring). Acknowledgements never wait for it; "
             "after a crash, 'walctl upload' completes what was started.")] = None,
    full_wait: Annotated[float | None, typer.Option(
        "--full-wait", metavar="DURATION", parser=Duration(min=0, max=7 * 24 * 3600),
        help="Backpressure: when the ring is full, appends (and the reading of --input) wait up to this "
             "long for a trim to free room ('walctl upload' through the trim hand-off, or --upload-at), the "
             "wait starting again each time some room is freed; then exit 7 saying why. Nothing is dropped: "
             "input is only read more slowly. Default: 2m with --upload-at, else 0 (exit 7 at once).")] = None,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    iodepth: Annotated[int | None, typer.Option(
        "--iodepth", min=1, max=256,
        help=f"Blocks written concurrently (I/O queue depth). Default: {DEFAULT_IODEPTH}, which keeps the device "
             f"busy while a batch of completions is handled (a loop device or a cloud disk completes several "
             f"at once); {FILE_IODEPTH} when the input is a regular file (--input FILE, or stdin redirected "
             f"from one: a bulk load, whose producer never waits). More raises throughput a little and every "
             f"acknowledgement's latency with it. The summary's iodepth says which.")] = None,
    iops: Annotated[float | None, typer.Option(
        "--iops", metavar="N", min=0.001,
        help="IOPS budget: start at most N block writes per second (a token bucket holding 50 ms of it). "
             "While the budget holds a write, records keep batching into a larger block (up to 256 KiB). "
             "No effect while the rate stays under it. Default: unlimited.")] = None,
    batch_interval: Annotated[float, typer.Option(
        "--batch-interval", metavar="DURATION", parser=Duration(min=0, max=60),
        help="Group commit: a block that is not full waits up to this long (0.5ms, 2ms ...; 0 writes each "
             "record as soon as an I/O slot is free) for more records before its write starts, so small "
             "records share 4 KiB blocks under light load. It adds at most this much to a record's "
             "acknowledgement; a full block (256 KiB) is written at once, and a record is acknowledged "
             "only once its block is durable, as always.")] = "2ms",
    bandwidth: Annotated[float | None, typer.Option(
        "--bandwidth", metavar="MIB/S", min=0.001,
        help="Bandwidth budget: write at most this many MiB (2^20 bytes) per second to the device, "
             "counting whole 4 KiB-padded blocks. Default: unlimited.")] = None,
    ack: Annotated[AckMode, typer.Option(
        "--ack", help="How durable records are acknowledged on stdout: 'records' (a line per record: its WAL "
                      "offset, or with --json its record object), 'ranges' (a line per durable run of records "
                      "of a block: 'FIRST LAST BASE COUNT', the WAL offsets of its first and last record, the "
                      "stream offset of the first and how many; with --json a {\"type\":\"range\"} object "
                      "with first_offset, last_offset, base_offset, count, payload_bytes). Either way a line "
                      "is printed only once its records and every record before are durable.")] = "records",
    json_out: JsonOpt = False,
) -> None:
    """Append records to the WAL; each offset is printed (and flushed) once it and all before it are durable."""
    from walctl import bounds

    # Values that end up in format fields are checked against their bounds before anything
    # is written (exit 2): an out-of-range batch would be acknowledged, then refused by readers.
    from walctl.errors import UsageError

    try:
        stream_id = bounds.stream_id(stream) if stream is not None else 0
        if base_offset is not None:
            bounds.base_offset(base_offset, count=len(data) if data else 1)
    except UsageError as exc:
        raise exc.at(device)
    # SIGTERM and SIGINT (walctl.cli boundary) drain and close: queued records still become durable.
    _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops, bandwidth, upload_at, batch_interval, full_wait,
            s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout) if store is not None else None,
            ack_mode=ack)


def _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops=None, bandwidth=None, upload_at=None, batch_interval_s=None, full_wait_s=None, s3=None,
            ack_mode=None):
    from walctl.native import keep_freed_memory
    from walctl.pipeline.append import AppendRequest, append

    data, input_path, upload_at_bytes = _check_arguments(device, data, input_path, store, upload_at)
    keep_freed_memory()  # a block's acknowledgement text in reused memory, not fresh pages (issue 31)
    request = AppendRequest(device, stream_id, [d.encode() for d in data] if data else None, input_path,
                            Framing(framing).value, base_offset, store, endpoint_url, iodepth, iops, bandwidth,
                            upload_at_bytes, batch_interval_s, full_wait_s, s3)
    stats, hooks = _acknowledger(stream_id, json_out, AckMode(ack_mode or AckMode.records))
    hooks.summarize = lambda run: _summary(device, stream_id, stats, run)
    run = append(request, hooks)
    hooks.flush()
    try:
        _raise_interrupt(stats)  # a SIGTERM/SIGINT that came while the last acknowledgements were printed
    except BaseException as exc:
        exc.summary = _summary(device, stream_id, stats, run)
        raise
    _report(stats, _summary(device, stream_id, stats, run), stream_id, json_out)


def _check_arguments(device: str, data, input_path, store, upload_at) -> tuple:
    """(data, input_path, upload_at bytes) once DATA, --input and --upload-at agree (UsageError if not)."""
    from walctl.errors import UsageError

    if data == ["-"] and input_path is None:
        data, input_path = None, "-"  # `-` is standard input, as everywhere in Unix
    elif data and "-" in data:
        raise UsageError("'-' (standard input) must be the only DATA argument",
                         hint="walctl append DEVICE - < records.txt; a literal dash: --input with a file")
    _device_comes_first(device, data)
    if data and input_path is not None:
        raise UsageError("give DATA arguments or --input, not both")
    if not data and input_path is None:
        raise UsageError("nothing to append", hint="give DATA arguments or --input FILE|-")
    if store is not None:
        from walctl.store import check_url

        check_url(store)  # a typo is refused even when this run would not need the store
    upload_at_bytes = None
    if upload_at is not None:
        from walctl.sizes import parse_size

        if store is None:
            raise UsageError("--upload-at needs --store URL (where to upload)")
        upload_at_bytes = parse_size(upload_at)
        if upload_at_bytes <= 0:
            raise UsageError(f"--upload-at must be positive, got {upload_at}")
    return data, input_path, upload_at_bytes


def _raise_interrupt(stats: dict) -> None:
    """Raise the SIGTERM/SIGINT that arrived while an acknowledgement was printed (see on_acks)."""
    if stats["interrupt"] is not None:
        raise stats["interrupt"]


def _acknowledger(stream_id: int, json_out: bool, mode: AckMode = AckMode.records):
    """(stats, hooks): the writer's acknowledgement callbacks printing the durable records of a block
    (one write per block: a line per record, or with ``--ack ranges`` one line per durable range),
    the counts they keep, ``hooks.check`` for the append loop and ``hooks.flush`` for the end."""
    from walctl.format import framepack
    from walctl.pipeline.append import AppendHooks

    acks = _Acks(int(stream_id), json_out, mode is AckMode.ranges)
    render = (framepack.RENDER_NONE if acks.ranges else framepack.RENDER_JSON if json_out
              else framepack.RENDER_OFFSETS)
    hooks = AppendHooks(on_acks=acks.on_acks, on_frames=acks.on_frames, render=render, check=acks.check,
                        on_warning=warn, on_note=lambda message: typer.echo(message, err=True))
    hooks.flush = acks.flush
    return acks.stats, hooks


class _Acks:
    """Prints acknowledgements as the writer reports durable records (from the appender or the
    reaper thread) and keeps the counts of the summary in ``stats``."""

    def __init__(self, sid: int, json_out: bool, ranges: bool):
        self.sid, self.json_out, self.ranges = sid, json_out, ranges
        self.stats = {"records": 0, "payload_bytes": 0, "first_offset": None, "last_offset": None,
                      "stdout_closed": False, "interrupt": None, "ack_ns": 0}

    def emit(self, text: str | bytes) -> None:
        try:
            # One write for the block's records, once it is durable (from the appender or the reaper
            # thread), whole: a signal never cuts an acknowledgement line short (write_lines; from
            # the reaper thread straight to the descriptor, nothing to defer there).
            write_lines(text)
        except KeyboardInterrupt as exc:
            # SIGTERM/SIGINT while the main thread printed these: kept for the append loop to raise, not
            # raised into the writer (it would take it for a failed write: exit 6, 'write failed: SIGTERM').
            self.stats["interrupt"] = exc
        except BrokenPipeError:
            # The reader of our acknowledgements went away (e.g. `| head`): stop taking input,
            # close cleanly (queued records still become durable), exit as SIGPIPE would.
            self.stats["stdout_closed"] = True
            silence_stdout()

    def count(self, n: int, payload_bytes: int, first: int, last: int) -> bool:
        """Count durable records; True while their acknowledgements are to be printed."""
        stats = self.stats
        stats["records"] += n
        stats["payload_bytes"] += payload_bytes
        if stats["first_offset"] is None:
            stats["first_offset"] = first
        stats["last_offset"] = last
        return not (stats["stdout_closed"] or stats["interrupt"] is not None)

    def range_line(self, first: int, last: int, base: int, n: int, payload_bytes: int) -> str:
        if self.json_out:
            return (f'{{"type":"range","stream_id":{self.sid},"first_offset":{first},"last_offset":{last},'
                    f'"first_wal_offset":{first},"last_wal_offset":{last},'
                    f'"base_offset":{base},"count":{n},"payload_bytes":{payload_bytes}}}\n')
        return f"{first} {last} {base} {n}\n"

    def on_frames(self, item) -> None:
        """append_frames' records of one block (walctl.wal.writer_blocks.Frames): their lines were rendered in C,
        and are written as those bytes (no str of them: a decode and an encode per byte of the lines).
        Runs once per durable block, mostly on the reaper thread: count and emit inline (issue 31)."""
        started = _clock()
        stats = self.stats
        n, payload_bytes, first, last = item.count, item.payload_bytes, item.offset, item.last_offset
        stats["records"] += n
        stats["payload_bytes"] += payload_bytes
        if stats["first_offset"] is None:
            stats["first_offset"] = first
        stats["last_offset"] = last
        if not stats["stdout_closed"] and stats["interrupt"] is None:
            self.emit(self.range_line(first, last, item.base_offset, n, payload_bytes) if self.ranges else item.acks)
        stats["ack_ns"] += _clock() - started

    def on_acks(self, offsets: list[int], token, first: int) -> None:
        """append_many's records of one block (DATA arguments, raw input, no C extension)."""
        started = _clock()
        payloads, base = token
        base += first
        lengths = list(map(len, payloads[first:first + len(offsets)]))
        if self.count(len(offsets), sum(lengths), offsets[0], offsets[-1]):
            self.emit(_record_lines(offsets, base, lengths, self.sid, self.json_out,
                                    self.range_line if self.ranges else None))
        self.stats["ack_ns"] += _clock() - started

    def check(self) -> bool:
        """Between packings: raise a SIGTERM/SIGINT that came while acknowledgements were printed
        (what was taken is made durable first); True once stdout's reader left (stop taking input)."""
        _raise_interrupt(self.stats)
        return self.stats["stdout_closed"]

    def flush(self) -> None:
        if self.stats["stdout_closed"]:
            return
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            self.stats["stdout_closed"] = True
            silence_stdout()


def _record_lines(offsets: list[int], base: int, lengths: list[int], sid: int, json_out: bool, range_line) -> str:
    """The acknowledgement text of records given one by one (DATA arguments, raw input, no C extension)."""
    if range_line is not None:
        return range_line(offsets[0], offsets[-1], base, len(offsets), sum(lengths))
    if json_out:
        # json.dumps({"type": "record", "offset": ..., "stream_id": ..., "base_offset": ..., "count": 1,
        # "payload_bytes": ..., "wal_offset": ..., "stream_offset": ...}, separators=(",", ":")), the two
        # offsets named apart; every field an int.
        return "".join([f'{{"type":"record","offset":{o},"stream_id":{sid},"base_offset":{b},"count":1,'
                        f'"payload_bytes":{n},"wal_offset":{o},"stream_offset":{b}}}\n'
                        for o, b, n in zip(offsets, range(base, base + len(offsets)), lengths)])
    return "\n".join(map(str, offsets)) + "\n"


def _summary(device: str, stream_id: int, stats: dict, run) -> dict:
    """The closing summary line (also carried by an error's JSON)."""
    shown = {k: v for k, v in stats.items() if k not in ("stdout_closed", "interrupt", "ack_ns")}
    writer, seconds = run.writer, run.seconds
    feed = run.feed
    return {"type": "summary", "device": device, "stream_id": stream_id, **shown,
            "first_wal_offset": stats["first_offset"], "last_wal_offset": stats["last_offset"],
            "next_base_offset": run.next_base, "blocks_written": writer.blocks_written,
            "bytes_written": writer.bytes_written, "sealed_ranges": run.opened.sealed_ranges,
            "seconds": round(seconds, 6),
            "mib_per_s": round(stats["payload_bytes"] / (1 << 20) / seconds, 3) if seconds > 0 else 0.0,
            "budget": run.budget.to_json(), "io_engine": writer.io_engine, "iodepth": writer.iodepth,
            "scanned": run.opened.scan is not None, "device_bytes_read": run.device_bytes_read,
            "trims_taken": run.listener.trims if run.listener is not None else 0,
            "background_upload": run.uploader.stats.to_json() if run.uploader is not None else None,
            "full_waits": writer.full.waits, "full_wait_s": round(writer.full.total_s, 6),
            "stages_us": writer.stages.summary(),
            "feed_us": {"read": feed.read_ns // 1000, "pack": feed.pack_ns // 1000,
                        "pack_cpu": feed.pack_cpu_ns // 1000, "pack_c": feed.pack_c_ns // 1000,
                        "slot_wait": writer.slot_wait_ns // 1000,
                        "ack": stats["ack_ns"] // 1000, "reads": feed.reads, "pipe_bytes": feed.pipe_bytes}}


def _report(stats: dict, summary: dict, stream_id: int, json_out: bool) -> None:
    """After a clean close: exit 141 if stdout's reader left, else the summary (JSON, or one stderr line)."""
    if stats["stdout_closed"]:
        raise typer.Exit(EXIT_BROKEN_PIPE)
    if json_out:
        emit_json(summary)
        return
    from walctl import human

    print(f"appended {human.plural(summary['records'], 'record')} ({human.size(summary['payload_bytes'])} payload) "
          f"to stream {stream_id} in {human.duration(summary['seconds'])}", file=sys.stderr)


def _device_comes_first(device: str, data) -> None:
    """``walctl append hello wal.img``: DEVICE is missing and a DATA argument names a WAL: say so."""
    import os

    from walctl.errors import UsageError

    if os.path.lexists(device) or not data:
        return
    for item in data:
        if os.path.exists(item) and not os.path.isdir(item):
            raise UsageError(f"DEVICE {device!r} does not exist but DATA {item!r} does",
                             hint=f"DEVICE comes first: walctl append {item} {device}")
