"""walctl append: write records durably; print each offset as soon as it is acknowledged."""

from __future__ import annotations

import enum
import json
import sys
import threading
from typing import Annotated

import typer

from walctl.cli import (EXIT_BROKEN_PIPE, DeviceArg, EndpointOpt, JsonOpt, StreamOpt, app, command, emit_json,
                        silence_stdout, warn)
from walctl.options import Duration


class Framing(str, enum.Enum):
    lines = "lines"
    length_prefixed = "length-prefixed"
    raw = "raw"


@app.command("append")
@command(stream=True)
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
             "WAL; required when the stream has no record left after a trim).")] = None,
    store: Annotated[str | None, typer.Option(
        "--store", envvar="WALCTL_STORE", metavar="URL",
        help="Object store the WAL uploads to: when the stream has no record left in the WAL (uploaded "
             "and trimmed) and the checkpoint does not know it, its offsets continue from the store's "
             "manifest; with --upload-at, where the writer uploads. Env: WALCTL_STORE.")] = None,
    upload_at: Annotated[str | None, typer.Option(
        "--upload-at", envvar="WALCTL_UPLOAD_AT", metavar="SIZE",
        help="Writer-side upload (needs --store): each time SIZE bytes of acknowledged records lie past "
             "the trim point, upload them from this process in the background, commit, and trim the WAL "
             "(AutoMQ's default is 512MiB; capped at half the ring). Acknowledgements never wait for it; "
             "after a crash, 'walctl upload' completes what was started. Env: WALCTL_UPLOAD_AT.")] = None,
    endpoint_url: EndpointOpt = None,
    iodepth: Annotated[int, typer.Option(
        "--iodepth", envvar="WALCTL_IODEPTH", min=1, max=256,
        help="Blocks written concurrently (I/O queue depth).")] = 4,
    iops: Annotated[float | None, typer.Option(
        "--iops", envvar="WALCTL_IOPS", metavar="N", min=0.001,
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
        "--bandwidth", envvar="WALCTL_BANDWIDTH", metavar="MIB/S", min=0.001,
        help="Bandwidth budget: write at most this many MiB (2^20 bytes) per second to the device, "
             "counting whole 4 KiB-padded blocks. Default: unlimited.")] = None,
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
    # SIGTERM and SIGINT (walctl.cli.command) drain and close: queued records still become durable.
    _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops, bandwidth, upload_at, batch_interval)


def _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops=None, bandwidth=None, upload_at=None, batch_interval_s=None):
    import time

    from walctl import bounds
    from walctl.errors import UsageError, WalctlError
    from walctl.format import batch as batch_format
    from walctl.format import record as rec
    from walctl.wal.ops import open_writer
    from walctl.wal.pacing import Budget

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
    upload_at_bytes = None
    if upload_at is not None:
        from walctl.sizes import parse_size

        if store is None:
            raise UsageError("--upload-at needs --store URL (where to upload)")
        upload_at_bytes = parse_size(upload_at)
        if upload_at_bytes <= 0:
            raise UsageError(f"--upload-at must be positive, got {upload_at}")
    source = _open_input(input_path) if input_path is not None else None

    stats = {"records": 0, "payload_bytes": 0, "first_offset": None, "last_offset": None, "stdout_closed": False}

    main_thread = threading.get_ident()

    def flush_acks() -> None:
        if stats["stdout_closed"]:
            return
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            stats["stdout_closed"] = True
            silence_stdout()

    def on_ack(offset: int, token) -> None:
        base, count, length = token
        stats["records"] += 1
        stats["payload_bytes"] += length
        if stats["first_offset"] is None:
            stats["first_offset"] = offset
        stats["last_offset"] = offset
        if stats["stdout_closed"]:
            return
        try:
            # Written now, flushed in batches: by the append loop after each record (one write for
            # all the records a block completion acknowledged), at once from the reaper thread.
            if json_out:
                sys.stdout.write(json.dumps({"type": "record", "offset": offset, "stream_id": stream_id,
                                             "base_offset": base, "count": count, "payload_bytes": length,
                                             # the two offsets, named apart
                                             "wal_offset": offset, "stream_offset": base},
                                            separators=(",", ":")) + "\n")
            else:
                sys.stdout.write(f"{offset}\n")
            if threading.get_ident() != main_thread:
                sys.stdout.flush()
        except BrokenPipeError:
            # The reader of our acknowledgements went away (e.g. `| head`): stop taking input,
            # close cleanly (queued records still become durable), exit as SIGPIPE would.
            stats["stdout_closed"] = True
            silence_stdout()

    from walctl.device.blockio import bytes_read_total

    budget = Budget.from_options(iops, bandwidth)
    started = time.monotonic()
    read_before = bytes_read_total()
    opened = open_writer(device, need_stream=stream_id if base_offset is None else None, iodepth=iodepth,
                         on_ack=on_ack, budget=budget)
    writer = opened.writer
    if batch_interval_s is not None:
        writer.batch_interval_s = batch_interval_s
    from walctl.wal.handoff import start_listener

    # Trims from another process (walctl upload, walctl trim) reach this writer through its
    # hand-off socket while it holds the lock (FORMATS.md 1.7).
    listener = start_listener(device, writer)
    uploader = None
    if upload_at_bytes is not None:
        from walctl.store import open_store
        from walctl.store.upload import BackgroundUploader

        try:
            # Capped at half the ring: an upload must be able to run while the other half fills.
            threshold = min(upload_at_bytes, writer.ring.size // 2)
            uploader = BackgroundUploader(device, open_store(store, endpoint_url=endpoint_url), writer, threshold,
                                          on_warning=warn)
        except BaseException:
            if listener is not None:
                listener.close()
            writer.close()
            raise
        writer.before_close.append(uploader.stop)  # finish a running upload (commit + trim) first
    if listener is not None:
        writer.before_close.append(listener.close)
    for message in opened.warnings:
        warn(message)
    if opened.sealed_ranges:
        warn(f"{device}: the last writer did not close cleanly; sealed {opened.sealed_ranges} damaged "
             f"range(s) of its last window before appending")

    def summary() -> dict:
        seconds = time.monotonic() - started
        shown = {k: v for k, v in stats.items() if k != "stdout_closed"}
        return {"type": "summary", "device": device, "stream_id": stream_id, **shown,
                "next_base_offset": next_base, "blocks_written": writer.blocks_written,
                "bytes_written": writer.bytes_written, "sealed_ranges": opened.sealed_ranges,
                "seconds": round(seconds, 6),
                "mib_per_s": round(stats["payload_bytes"] / (1 << 20) / seconds, 3) if seconds > 0 else 0.0,
                "budget": budget.to_json(), "io_engine": writer.io_engine,
                "scanned": opened.scan is not None, "device_bytes_read": bytes_read_total() - read_before,
                "trims_taken": listener.trims if listener is not None else 0,
                "background_upload": uploader.stats.to_json() if uploader is not None else None,
                "stages_us": writer.stages.summary()}

    next_base = 0
    try:
        next_base = _first_base_offset(opened, stream_id, base_offset, device, store, endpoint_url)
        epoch = max(writer.header.epoch, 0)
        payloads = (d.encode() for d in data) if data else _records(source, framing)
        if data:
            bounds.base_offset(next_base, count=len(data), option="stream offset")
        # The checks of bounds.base_offset and bounds.record_payload, inlined: called (for
        # their error) only when a value is out of range.
        base_limit = bounds.OFFSET_END_LIMIT - 2
        payload_limit = min(bounds.UINT32_MAX, rec.MAX_BODY_LENGTH) - batch_format.HEADER_SIZE
        pack_head = batch_format.STRUCT.pack
        magic = batch_format.MAGIC
        append = writer.append
        for payload in payloads:
            if stats["stdout_closed"]:
                break
            # --input: the records counted so far are durable; the one that would overflow is not written.
            if not 0 <= next_base <= base_limit:
                bounds.base_offset(next_base, option="stream offset")
            length = len(payload)
            if length > payload_limit:
                bounds.record_payload(length)
            # StreamRecordBatch(stream_id, epoch, next_base, 1, payload).encode(), packed directly
            append(pack_head(magic, stream_id, epoch, next_base, 1, length) + payload, (next_base, 1, length),
                   (stream_id, next_base + 1))
            next_base += 1
            flush_acks()
        writer.close()
        flush_acks()
    except WalctlError as exc:
        _close_after(writer)
        exc.summary = summary()
        raise exc.at(device) if exc.where is None else exc
    except BaseException as exc:  # SIGTERM/SIGINT: every record taken is made durable first
        _close_after(writer)
        exc.summary = summary()
        raise
    finally:
        if source is not None and source is not sys.stdin.buffer:
            source.close()
    if stats["stdout_closed"]:
        raise typer.Exit(EXIT_BROKEN_PIPE)
    if json_out:
        emit_json(summary())
    else:
        s = summary()
        from walctl import human

        warn_line = (f"appended {human.plural(s['records'], 'record')} ({human.size(s['payload_bytes'])} payload) "
                     f"to stream {stream_id} in {human.duration(s['seconds'])}")
        print(warn_line, file=sys.stderr)


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


def _close_after(writer) -> None:
    """On an error, still make every queued record durable and acknowledged if the device allows."""
    try:
        writer.close()
    except Exception:
        writer.abort()


def _first_base_offset(opened, stream_id: int, base_offset: int | None, device: str,
                       store_url: str | None, endpoint_url: str | None) -> int:
    from walctl.errors import UsageError

    if base_offset is not None:
        return base_offset
    checkpoint = opened.checkpoint  # the log's stream ends, from its checkpoint or the open's scan
    ends = checkpoint.streams if checkpoint is not None else {}
    if stream_id in ends:
        return ends[stream_id]
    if store_url is not None:
        # Not in the WAL (uploaded and trimmed, or the WAL is new): the store knows the stream.
        from walctl.store import manifest, open_store, store_exists

        # append only reads the store: it never creates it
        st = open_store(store_url, endpoint_url=endpoint_url, create=False, missing_ok=True)
        if not store_exists(st):
            warn(f"{store_url}: the store does not exist yet, so stream {stream_id} starts at offset 0")
            return 0
        known = manifest.load_latest(st)["streams"].get(str(stream_id))
        return known["end"] if known else 0
    if opened.header.trim_offset < 0 or (checkpoint is not None and checkpoint.complete):
        return 0  # the log has never held this stream (and no store named): the stream is new
    raise UsageError(f"stream {stream_id} has no record left in the WAL after trimming", where=device,
                     hint="pass --store (where it was uploaded) or --base-offset with the stream's next offset")


def _open_input(path: str):
    from walctl.errors import UsageError

    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise UsageError(f"cannot read input file: {exc.strerror}", where=path) from exc


_INPUT_CHUNK = 1 << 20  # bytes per read of a length-prefixed input


def _records(source, framing: Framing):
    """Yield payloads from ``source`` as they arrive (length-prefixed: read in chunks of up to 1 MiB)."""
    from walctl.errors import UsageError

    if framing is Framing.raw:
        yield source.read()
        return
    if framing is Framing.lines:
        while True:
            line = source.readline()
            if not line:
                return
            yield line[:-1] if line.endswith(b"\n") else line
    # Length-prefixed: parse records out of large reads (a memoryview, no read per record); a
    # read returns what is there (read1), so records that arrived are appended without
    # waiting for a full buffer.
    read = source.read1 if hasattr(source, "read1") else source.read
    buf = bytearray()
    consumed = 0  # input bytes before buf
    while True:
        chunk = read(_INPUT_CHUNK)
        if not chunk:
            break
        buf += chunk
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:
            while pos + 4 <= end:
                stop = pos + 4 + int.from_bytes(view[pos:pos + 4], "big")
                if stop > end:
                    break
                yield bytes(view[pos + 4:stop])
                pos = stop
        del buf[:pos]  # keep only the incomplete record's bytes
        consumed += pos
    if not buf:
        return
    if len(buf) < 4:
        raise UsageError(f"truncated length prefix at input byte {consumed}")
    length = int.from_bytes(buf[:4], "big")
    raise UsageError(f"truncated record at input byte {consumed}: length {length}, got {len(buf) - 4}")
