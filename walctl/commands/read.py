"""walctl read: a stream's batches back from the store (and the WAL's tail), in offset order."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from walctl.commands._shared import EndpointOpt, JsonOpt, StoreOpt, command, emit_json, progress_bar, write_lines
from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, RetryForOpt, S3ConnectTimeoutOpt,
                                     S3ReadTimeoutOpt, s3_settings)
from walctl.commands.recover import Payload, encode_payload


def _idle_timeout(value):
    """--idle-timeout's parser: walctl.options.Duration(min=0), loaded only when the option is given
    (a read without it does not load walctl.options)."""
    from walctl.options import Duration

    return Duration(min=0)(value)


_idle_timeout.__name__ = "duration"


@command("read", stream=True)
def read_cmd(
    store: StoreOpt,
    stream: Annotated[int, typer.Option(
        "--stream", min=0, help="Stream id to read (a non-negative integer). "
       )],
    from_offset: Annotated[int | None, typer.Option(
        "--from", min=0, metavar="OFFSET",
        help="First stream offset wanted (a stream offset, not a WAL byte offset); the batch holding it "
             "is shown whole. Default: the stream's start.")] = None,
    to_offset: Annotated[int | None, typer.Option(
        "--to", min=0, metavar="OFFSET",
        help="Show only batches starting below this stream offset. Default: the stream's end. "
            )] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", "-n", min=1, help="Stop after this many batches.")] = None,
    payload: Annotated[Payload, typer.Option(
        "--payload", help="Show each batch's payload as text (UTF-8, invalid bytes escaped), hex, base64, or not at all. "
            )] = Payload.none,
    wal: Annotated[str | None, typer.Option(
        "--wal", metavar="DEVICE",
        help="Also serve the stream's records still in this WAL (device or file) after its last uploaded "
             "record; read-only, no lock.")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep polling the manifest (and --wal) and show new batches as commits land, like tail -f; "
             "polls every 0.2 s, backing off to 5 s while nothing lands. Ctrl-C ends it (exit 0). "
            )] = False,
    idle_timeout: Annotated[float | None, typer.Option(
        "--idle-timeout", metavar="DURATION", parser=_idle_timeout,
        help="With --follow: stop after this long without a new batch (500ms, 30s, 5m; a bare number is "
             "seconds; default: follow forever). "
            )] = None,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    json_out: JsonOpt = False,
) -> None:
    """Print a stream's batches from the store in offset order, checking every checksum; never writes.

    Finds the live objects covering the range in the manifest, reads each object's footer and index
    with one ranged GET of its tail, and its needed blocks with one ranged GET per run of adjacent
    blocks. Gaps, overlaps and damage are findings (exit 3); the read goes on after them.
    Exit 4 when the store has no manifest or no such stream.

    With --wal, each pass reads the WAL's header before the manifest and re-checks both before it
    calls a range missing, so --follow prints every record once, in offset order, while a writer
    appends, starts or stops and uploads commit and trim; a pass the WAL moved under is read again
    (summary "retries"). Without --follow, a WAL that keeps moving ends the read with a "wal_moved"
    finding (informational: exit 0, "log_moved": true, complete false).
    """
    from walctl.errors import CorruptionError, UsageError
    from walctl.pipeline.read import StreamReader, open_for_read

    if from_offset is not None and to_offset is not None and to_offset <= from_offset:
        raise UsageError(f"--to {to_offset} is not above --from {from_offset}", where="read",
                         hint="--to is exclusive: give a larger --to")
    if idle_timeout is not None and not follow:
        raise UsageError("--idle-timeout only applies with --follow", where="read", hint="add --follow")
    st = open_for_read(store, endpoint_url, s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    # Payload views, not copies: each record is printed and dropped (a copy per batch was a third
    # of the read's CPU).
    # With no payload shown, the store's batches come as rows (no object per batch; same checks).
    reader = StreamReader(st, stream, from_offset=from_offset, to_offset=to_offset, limit=limit, wal=wal,
                          payload_views=True, rows=payload is Payload.none)
    out = _Printer(json_out, payload)
    interrupted = False
    try:
        # Bytes read from the store so far (the size to read is not known up front); not while following.
        with progress_bar(None, "reading the stream", json_out=json_out or follow, streaming=True) as progress:
            read_before = st.stats.bytes_read
            for event in reader.events(follow=follow, idle_timeout_s=idle_timeout, sleep=out.flush_and_sleep):
                if progress is not None:
                    progress(st.stats.bytes_read - read_before)
                out.event(event)
    except KeyboardInterrupt as exc:
        # A signal is how a follow ends (exit 0); otherwise exit 128 + the signal, after the summary.
        interrupted = exc
    finally:
        try:
            out.flush()  # the lines read so far go out before the summary, or an error
        except KeyboardInterrupt as exc:  # (the signal arrived during this last write)
            interrupted = exc
    summary = reader.summary.to_json()
    summary["store"] = st.url
    summary["interrupted"] = interrupted is not False
    if interrupted is not False and not follow:
        summary["complete"] = False
        if json_out:
            interrupted.summary = summary  # the boundary prints it with the error object: one summary line
        else:
            out.summary(summary)
        raise interrupted
    corrupt = [f for f in reader.summary.findings_list if f.corrupt]
    if corrupt:
        first = corrupt[0]
        from walctl.human import plural

        exc = CorruptionError(f"{plural(len(corrupt), 'finding')}; first: {first.kind}: {first.message}",
                              where=first.key or st.url, offset=first.position,
                              hint="'walctl inspect-object --deep' shows an object's damage",
                              summary=summary if json_out else None)
        if not json_out:
            out.summary(summary)
        raise exc
    out.summary(summary)


_STORE_LINE = ('{"type":"record","stream_id":%d,"base_offset":%d,"end_offset":%d,"count":%d,"epoch":%d,'
               '"payload_bytes":%d,"source":"store","object_id":%d,"key":%s,"block_position":%d,'
               '"batch_position":%d,"wal_offset":null}\n')


def _row_template(object_id: int, key_json: str) -> str:
    """_STORE_LINE with one object's id and key filled in: ``template % row`` is a row's line."""
    return (_STORE_LINE.replace('"object_id":%d', '"object_id":' + str(int(object_id)), 1)
            .replace('"key":%s', '"key":' + key_json.replace("%", "%%"), 1))


def _row_line(event, row, json) -> str:
    return _row_template(event.object_id, json.dumps(event.key)) % row


FLUSH_LINES = 512  # record lines are written this many at a time (a finding, a poll's wait, the end flush)


class _Printer:
    """NDJSON lines, or one plain line per batch (grep-friendly) and a summary on stderr.

    Record lines are gathered and written FLUSH_LINES at a time, not flushed one by one (a write
    per batch was a tenth of the read's time); a finding, the wait between --follow polls and the
    end flush them, so a follower sees each poll's batches at once."""

    def __init__(self, json_out: bool, payload: Payload):
        self.json_out = json_out
        self.payload = payload
        if payload is not Payload.none:
            from walctl.native import keep_freed_memory

            keep_freed_memory()  # each payload's text (128 KiB of hex for 64 KiB) in reused memory
        self._header_done = False
        self._lines: list[str] = []
        self._fast: bool | None = None  # _STORE_LINE renders what the dict does (checked on the first)
        self._key: tuple[str | None, str] = (None, "null")  # the last object key and its JSON string

    def flush(self) -> None:
        if self._lines:
            lines, self._lines = self._lines, []
            write_lines("".join(lines))  # (interrupted: no line cut short before the summary)
        sys.stdout.flush()

    def flush_and_sleep(self, seconds: float) -> None:
        import time

        self.flush()
        time.sleep(seconds)

    def _add(self, line: str) -> None:
        self._lines.append(line)
        if len(self._lines) >= FLUSH_LINES:
            self.flush()

    def event(self, event) -> None:
        from walctl.pipeline.read import ReadFinding, ReadRows

        if isinstance(event, ReadRows):
            self._rows(event)
            return
        if isinstance(event, ReadFinding):
            self.flush()
            if self.json_out:
                emit_json(event.to_json())
            else:
                where = f" (object {event.object_id} {event.key}, byte {event.position})" if event.key else ""
                sys.stdout.write(f"FINDING {event.kind}: {event.message}{where}\n")
            return
        b = event.batch
        if self.json_out:
            if self.payload is Payload.none and event.source == "store" and self._fast is not False:
                # Formatted without a dict; checked once to be byte for byte the dict's rendering,
                # else the dict is used from then on.
                if event.key != self._key[0]:
                    import json

                    self._key = (event.key, json.dumps(event.key))
                line = _STORE_LINE % (b.stream_id, b.base_offset, b.end_offset, b.count, b.epoch, len(b.payload),
                                      event.object_id, self._key[1], event.block_position, event.batch_position)
                if self._fast is None:
                    self._fast = line == self._render(event)
                if self._fast:
                    self._add(line)
                    return
            self._add(self._render(event))
            return
        text = self._text(b.payload)
        if not self._header_done:
            self._add(f"{'OFFSET':>12} {'COUNT':>6} {'BYTES':>8} {'FROM':<24}"
                      + ("  PAYLOAD" if text is not None else "") + "\n")
            self._header_done = True
        src = (f"object {event.object_id}@{event.batch_position}" if event.source == "store"
               else f"wal@{event.wal_offset}")
        line = f"{b.base_offset:>12} {b.count:>6} {len(b.payload):>8} {src:<24}"
        if text is not None:
            line += "  " + text
        self._add(line + "\n")

    def _rows(self, event) -> None:
        """Batches served as rows (no payload shown): the lines a ReadRecord of each would give."""
        if self.json_out:
            import json

            if self._fast is None:  # the template renders what the dict does: checked on the first row
                self._fast = _row_line(event, event.rows[0], json) == self._render_row(event, event.rows[0])
            if self._fast:
                line = _row_template(event.object_id, json.dumps(event.key))
                lines = [line % row for row in event.rows]
            else:
                lines = [self._render_row(event, row) for row in event.rows]
        else:
            if not self._header_done:
                self._add(f"{'OFFSET':>12} {'COUNT':>6} {'BYTES':>8} {'FROM':<24}\n")
                self._header_done = True
            lines = [f"{row[1]:>12} {row[3]:>6} {row[5]:>8} {f'object {event.object_id}@{row[7]}':<24}\n"
                     for row in event.rows]
        self._lines += lines
        if len(self._lines) >= FLUSH_LINES:
            self.flush()

    @staticmethod
    def _render_row(event, row) -> str:
        """A row's NDJSON line, from its dict (as _render renders a ReadRecord of it)."""
        import json

        obj = {"type": "record", "stream_id": row[0], "base_offset": row[1], "end_offset": row[2], "count": row[3],
               "epoch": row[4], "payload_bytes": row[5], "source": "store", "object_id": event.object_id,
               "key": event.key, "block_position": row[6], "batch_position": row[7], "wal_offset": None}
        return json.dumps(obj, separators=(",", ":")) + "\n"

    def _text(self, payload) -> str | None:
        """The payload as --payload asks (None for none); a view is copied only to be shown."""
        return None if self.payload is Payload.none else encode_payload(bytes(payload), self.payload)

    def _render(self, event) -> str:
        """A record's NDJSON line, from its dict."""
        import json

        b = event.batch
        row = {"type": "record", "stream_id": b.stream_id, "base_offset": b.base_offset,
               "end_offset": b.end_offset, "count": b.count, "epoch": b.epoch,
               "payload_bytes": len(b.payload), "source": event.source, "object_id": event.object_id,
               "key": event.key, "block_position": event.block_position,
               "batch_position": event.batch_position, "wal_offset": event.wal_offset}
        text = self._text(b.payload)
        if text is not None:
            row["payload"] = text
        return json.dumps(row, separators=(",", ":")) + "\n"

    def summary(self, summary: dict) -> None:
        self.flush()
        if self.json_out:
            emit_json(summary)
            return
        sys.stdout.flush()
        nxt = summary["next_offset"]
        from walctl.human import plural, size

        sys.stderr.write(
            f"read {plural(summary['records'], 'batch', 'batches')}, {size(summary['payload_bytes'])} of payload "
            f"of stream {summary['stream_id']} ({summary['wal_records']:,} from the WAL); next offset "
            f"{'-' if nxt is None else nxt}; {plural(summary['objects'], 'object')}, {plural(summary['gets'], 'GET')}, "
            f"{size(summary['bytes_read'])} read; {plural(summary['findings'], 'finding')}\n")
