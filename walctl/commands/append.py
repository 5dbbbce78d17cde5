"""walctl append: write records durably; print each offset as soon as it is acknowledged."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from walctl.commands._shared import (DeviceArg, EndpointOpt, JsonOpt, StreamOpt, command, emit_json, silence_stdout,
                                     warn, write_lines)
from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, RetryForOpt, S3ConnectTimeoutOpt,
                                     S3ReadTimeoutOpt, s3_settings)
from walctl.errors import EXIT_BROKEN_PIPE
# Input framing lives in the engine (walctl.wal.framing: large reads, records found in bulk).
from walctl.wal.framing import Framing
from walctl.wal.framing import open_input as _open_input
from walctl.wal.framing import batches as _batches
from walctl.options import Duration


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
    # SIGTERM and SIGINT (walctl.cli boundary) drain and close: queued records still become durable.
    _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops, bandwidth, upload_at, batch_interval, full_wait,
            s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))


def _append(device, data, stream_id, input_path, framing, base_offset, store, endpoint_url, iodepth, json_out,
            iops=None, bandwidth=None, upload_at=None, batch_interval_s=None, full_wait_s=None, s3=None):
    import time

    from walctl import bounds
    from walctl.device.blockio import bytes_read_total
    from walctl.errors import WalctlError
    from walctl.pipeline.append import first_base_offset

    data, input_path, upload_at_bytes = _check_arguments(device, data, input_path, store, upload_at)
    source = _open_input(input_path) if input_path is not None else None
    stats, on_acks, flush_acks = _acknowledger(stream_id, json_out)
    started, read_before = time.monotonic(), bytes_read_total()
    opened, budget = _open_writer(device, stream_id, base_offset, iodepth, None, iops, bandwidth, batch_interval_s)
    writer = opened.writer
    writer.on_acks = on_acks
    listener, uploader = _start_background(device, writer, store, endpoint_url, upload_at_bytes, full_wait_s, s3)

    def summary() -> dict:
        return _summary(device, stream_id, stats, next_base, writer, opened, budget, time.monotonic() - started,
                        bytes_read_total() - read_before, listener, uploader)

    next_base = 0
    try:
        next_base = first_base_offset(opened, stream_id, base_offset, device=device, store_url=store,
                                      endpoint_url=endpoint_url, on_warning=warn, s3=s3)
        epoch = max(writer.header.epoch, 0)
        if data:
            bounds.base_offset(next_base, count=len(data), option="stream offset")
        base_limit, payload_limit = _limits()
        for payloads, lengths in _payload_batches(data, source, framing):
            taken = _within_bounds(payloads, lengths, next_base, base_limit, payload_limit)
            token, i = (taken, next_base), 0
            while i < len(taken) and not stats["stdout_closed"]:
                queued = writer.append_many(taken, stream_id, epoch, next_base, token, index=i)
                i, next_base = i + queued, next_base + queued
                _raise_interrupt(stats)  # (below: what was taken is made durable first)
            if stats["stdout_closed"]:
                break
            if i < len(payloads):
                # --input: the records counted so far are durable; the one that would overflow is not written.
                if not 0 <= next_base <= base_limit:
                    bounds.base_offset(next_base, option="stream offset")
                bounds.record_payload(lengths[i])
        writer.close()
        flush_acks()
        _raise_interrupt(stats)
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
    _report(stats, summary(), stream_id, json_out)


def _open_writer(device: str, stream_id: int, base_offset, iodepth: int, on_ack, iops, bandwidth,
                 batch_interval_s: float | None = None):
    """(opened, budget): the WAL opened for appending (sealing a crashed writer's window), its warnings said."""
    from walctl.wal.lifecycle import open_writer
    from walctl.wal.pacing import Budget

    budget = Budget.from_options(iops, bandwidth)
    opened = open_writer(device, need_stream=stream_id if base_offset is None else None, iodepth=iodepth,
                         on_ack=on_ack, budget=budget, batch_interval_s=batch_interval_s)
    for message in opened.warnings:
        warn(message)
    if opened.sealed_ranges:
        warn(f"{device}: the last writer did not close cleanly; sealed {opened.sealed_ranges} damaged "
             f"range(s) of its last window before appending")
    return opened, budget


def _limits() -> tuple[int, int]:
    """(largest base offset, largest payload) the append loop takes (bounds.base_offset, bounds.record_payload)."""
    from walctl import bounds
    from walctl.format import batch as batch_format
    from walctl.format import record as rec

    return bounds.OFFSET_END_LIMIT - 2, min(bounds.UINT32_MAX, rec.MAX_BODY_LENGTH) - batch_format.HEADER_SIZE


def _within_bounds(payloads: list, lengths: list, next_base: int, base_limit: int, payload_limit: int) -> list:
    """The leading payloads of a batch that bounds.base_offset and bounds.record_payload let through:
    the records before the first out of range are written, then its error is raised."""
    n = len(payloads)
    stop = n if 0 <= next_base and next_base + n - 1 <= base_limit else max(0, base_limit + 1 - next_base)
    if max(lengths) > payload_limit:
        stop = min(stop, next(i for i, length in enumerate(lengths) if length > payload_limit))
    return payloads if stop == n else payloads[:stop]


def _payload_batches(data, source, framing):
    """(payloads, their lengths) in batches: the DATA arguments, or per read of the input (one for raw)."""
    if data:
        payloads = [d.encode() for d in data]
        yield payloads, [len(p) for p in payloads]
        return
    if framing is Framing.raw:
        payload = source.read()
        yield [payload], [len(payload)]
        return
    for view, spans in _batches(source, framing):
        flat = spans.spans[:2 * spans.count].tolist()
        starts, lengths = flat[0::2], flat[1::2]
        # Slices of the read's bytes (copies: a bytes slice costs a third of a memoryview slice,
        # and the record's bytes are copied once more into the block anyway).
        data = view.obj if type(view.obj) is bytes else view
        yield list(map(data.__getitem__, map(slice, starts, map(int.__add__, starts, lengths)))), lengths


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


def _acknowledger(stream_id: int, json_out: bool):
    """(stats, on_acks, flush_acks): the writer's acknowledgement callback printing the offsets of
    the durable records of a block (one write per block), the counts it keeps, and a last flush."""
    stats = {"records": 0, "payload_bytes": 0, "first_offset": None, "last_offset": None, "stdout_closed": False,
             "interrupt": None}
    # json.dumps({"type": "record", "offset": ..., "stream_id": ..., "base_offset": ..., "count": 1,
    # "payload_bytes": ..., "wal_offset": ..., "stream_offset": ...}, separators=(",", ":")), the two
    # offsets named apart; every field an int.
    sid = int(stream_id)

    def flush_acks() -> None:
        if stats["stdout_closed"]:
            return
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            stats["stdout_closed"] = True
            silence_stdout()

    def on_acks(offsets: list[int], token, first: int) -> None:
        payloads, base = token
        base += first
        lengths = list(map(len, payloads[first:first + len(offsets)]))
        stats["records"] += len(offsets)
        stats["payload_bytes"] += sum(lengths)
        if stats["first_offset"] is None:
            stats["first_offset"] = offsets[0]
        stats["last_offset"] = offsets[-1]
        if stats["stdout_closed"] or stats["interrupt"] is not None:
            return
        if json_out:
            text = "".join([f'{{"type":"record","offset":{o},"stream_id":{sid},"base_offset":{b},"count":1,'
                            f'"payload_bytes":{n},"wal_offset":{o},"stream_offset":{b}}}\n'
                            for o, b, n in zip(offsets, range(base, base + len(offsets)), lengths)])
        else:
            text = "\n".join(map(str, offsets)) + "\n"
        try:
            # One write for the block's records, once it is durable (from the appender or the reaper
            # thread), whole: a signal never cuts an acknowledgement line short (write_lines).
            write_lines(text)
        except KeyboardInterrupt as exc:
            # SIGTERM/SIGINT while the main thread printed these: kept for the append loop to raise, not
            # raised into the writer (it would take it for a failed write: exit 6, 'write failed: SIGTERM').
            stats["interrupt"] = exc
        except BrokenPipeError:
            # The reader of our acknowledgements went away (e.g. `| head`): stop taking input,
            # close cleanly (queued records still become durable), exit as SIGPIPE would.
            stats["stdout_closed"] = True
            silence_stdout()

    return stats, on_acks, flush_acks


def _start_background(device: str, writer, store, endpoint_url, upload_at_bytes, full_wait_s=None, s3=None):
    """(listener, uploader): the trim hand-off socket, and with --upload-at the writer-side uploader;
    each stopped by the writer's close (the uploader first: a running upload commits and trims).
    A full ring then holds appends back for them (``full_wait_s``, --full-wait)."""
    from walctl.wal.handoff import start_listener

    # Trims from another process (walctl upload, walctl trim) reach this writer through its
    # hand-off socket while it holds the lock (FORMATS.md 1.7).
    listener = start_listener(device, writer)
    uploader = None
    if upload_at_bytes is not None:
        from walctl.store import open_store
        from walctl.pipeline.upload import BackgroundUploader

        try:
            # Capped at half the ring: an upload must be able to run while the other half fills.
            threshold = min(upload_at_bytes, writer.ring.size // 2)
            uploader = BackgroundUploader(device, open_store(store, endpoint_url=endpoint_url, s3=s3), writer,
                                          threshold, on_warning=warn)
        except BaseException:
            if listener is not None:
                listener.close()
            writer.close()
            raise
        writer.before_close.append(uploader.stop)  # finish a running upload (commit + trim) first
    if listener is not None:
        writer.before_close.append(listener.close)
    _hold_back_when_full(device, writer, uploader, full_wait_s)
    return listener, uploader


DEFAULT_FULL_WAIT_UPLOADING_S = 120.0  # --full-wait with --upload-at: longer than a store's --retry-for
FULL_NOTE_EVERY_S = 10.0  # at most one "held back" line on stderr per this many seconds


def _hold_back_when_full(device: str, writer, uploader, full_wait_s: float | None) -> None:
    """Backpressure: a full ring holds appends back (``--full-wait``) until a trim frees room,
    saying on stderr what it waits for, instead of failing with exit 7 at once."""
    import time

    if full_wait_s is None:
        full_wait_s = DEFAULT_FULL_WAIT_UPLOADING_S if uploader is not None else 0.0
    noted = [-FULL_NOTE_EVERY_S]
    who = ("this writer's background upload (--upload-at) trims it" if uploader is not None
           else "'walctl upload' or 'walctl trim' (the trim hand-off) trims it")

    def on_full(waiting: bool) -> None:
        now = time.monotonic()
        if waiting and now - noted[0] >= FULL_NOTE_EVERY_S:
            noted[0] = now
            typer.echo(f"walctl: {device}: WAL full: appends held back until {who} (exit 7 if nothing frees "
                       f"room for {full_wait_s:g} s)", err=True)

    def why() -> str:
        if uploader is None:
            return "no uploader is running"
        stats = uploader.stats
        if stats.failures and stats.last_error:
            return f"the background upload is failing: {stats.last_error}"
        return "the background upload freed no room in that time"

    writer.full.wait_s, writer.full.on_full, writer.full.why = full_wait_s, on_full, why


def _summary(device: str, stream_id: int, stats: dict, next_base: int, writer, opened, budget, seconds: float,
             device_bytes_read: int, listener, uploader) -> dict:
    """The closing summary line (also carried by an error's JSON)."""
    shown = {k: v for k, v in stats.items() if k not in ("stdout_closed", "interrupt")}
    return {"type": "summary", "device": device, "stream_id": stream_id, **shown,
            "next_base_offset": next_base, "blocks_written": writer.blocks_written,
            "bytes_written": writer.bytes_written, "sealed_ranges": opened.sealed_ranges,
            "seconds": round(seconds, 6),
            "mib_per_s": round(stats["payload_bytes"] / (1 << 20) / seconds, 3) if seconds > 0 else 0.0,
            "budget": budget.to_json(), "io_engine": writer.io_engine,
            "scanned": opened.scan is not None, "device_bytes_read": device_bytes_read,
            "trims_taken": listener.trims if listener is not None else 0,
            "background_upload": uploader.stats.to_json() if uploader is not None else None,
            "full_waits": writer.full.waits, "full_wait_s": round(writer.full.total_s, 6),
            "stages_us": writer.stages.summary()}


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


def _close_after(writer) -> None:
    """On an error, still make every queued record durable and acknowledged if the device allows."""
    try:
        writer.close()
    except Exception:
        writer.abort()


