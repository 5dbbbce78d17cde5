"""walctl inspect-object: the footer and index of an object; --deep verifies every byte."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, EndpointOpt, JsonOpt, RetryForOpt,
                                     S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StreamOpt, command, emit_json, progress_bar,
                                     s3_settings, stdout_console, warn)
from walctl.commands.recover import Payload, encode_payload

if TYPE_CHECKING:
    from walctl.store.base import Store


@command("inspect-object", stream=True)
def inspect_object_cmd(
    target: Annotated[str, typer.Argument(
        metavar="TARGET", help="An object id, its key (full, or relative to the store prefix), a local file path, "
                                "or '-': the object read from standard input.")],
    store: Annotated[str | None, typer.Option(
        "--store", metavar="URL",
        help="Object store holding TARGET (a local directory or s3://bucket[/prefix]); not needed for a "
             "local file.")] = None,
    deep: Annotated[bool, typer.Option(
        "--deep", help="Also read every block: block magic, counts, lengths, batch headers, contiguous "
                       "offsets and the footer checksums; each problem with its byte position.")] = False,
    records: Annotated[bool, typer.Option(
        "--records", help="Also dump every batch of the object (of --stream only, if given), block by block, with the "
             "byte positions of its block and of the batch; one ranged read per run of adjacent blocks.")] = False,
    payload: Annotated[Payload, typer.Option(
        "--payload", help="With --records: show each batch's payload as text (UTF-8, invalid bytes escaped), hex, base64, "
             "or not at all.")] = Payload.none,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", help="Namespace part of object keys (<rev-hex>/<namespace>/<id>) when TARGET is an object id the "
             "manifest does not name (an AutoMQ bucket). Default: walctl's 'default', then AutoMQ's "
             "'DEFAULT'.")] = None,
    stream: StreamOpt = None,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    json_out: JsonOpt = False,
) -> None:
    """Show an object's footer and index (one or two ranged reads, whatever its size); read-only.

    With --deep a verdict line says whether the object is healthy and, when not, names the
    damaged block. Exit 3 when a check fails, 4 when TARGET is not an object of this format.
    """
    if target == "-":
        with _stdin_object(store) as path:
            return _inspect(path, None, deep, records, payload, namespace, stream, endpoint_url, retry_for,
                            s3_connect_timeout, s3_read_timeout, json_out)
    return _inspect(target, store, deep, records, payload, namespace, stream, endpoint_url, retry_for,
                    s3_connect_timeout, s3_read_timeout, json_out)


def _stdin_object(store: str | None):
    """A context giving the path of a private temporary file holding standard input (the object:
    its footer is at its end, so it is read whole before inspecting), removed after."""
    import contextlib
    import shutil
    import sys
    import tempfile

    from walctl.errors import UsageError

    if store is not None:
        raise UsageError("TARGET '-' reads the object from standard input; --store does not apply",
                         hint="walctl inspect-object - < object.bin, without --store")

    @contextlib.contextmanager
    def spooled():
        folder = tempfile.mkdtemp(prefix="walctl-inspect-")
        try:
            path = f"{folder}/stdin"
            with open(path, "wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
            yield path
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return spooled()


def _inspect(target, store, deep, records, payload, namespace, stream, endpoint_url, retry_for, s3_connect_timeout,
             s3_read_timeout, json_out) -> None:
    from walctl.errors import CorruptionError
    from walctl.store.inspect import index_rows, inspect, primary_problem, problem_json, resolve

    st, key, known = resolve(target, store, endpoint_url, namespace,
                             s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    with progress_bar(None, "verifying the object", json_out=json_out or not deep, lazy=True) as progress:
        result = inspect(st, key, deep=deep, known=known is not None, progress=progress,
                         expected_size=getattr(known, "size", None))
    rows = [r for r in index_rows(result.entries) if stream is None or r["stream_id"] == stream]  # not a manifest entry
    key = result.key
    footer_json = _footer_json(result)
    summary = {"type": "summary", "key": key, "entries": len(result.entries), "entries_shown": len(rows),
               "streams": len({e.stream_id for e in result.entries}), "deep": deep,
               "problems": len(result.problems), "reads": result.reads}
    if deep:
        summary["verdict"] = "damaged" if result.problems else "ok"
        summary["verdict_line"] = result.verdict()
    problems = list(result.problems)
    if json_out:
        emit_json(footer_json)
        for row in rows:
            emit_json(row)
        for p in result.problems:
            emit_json(problem_json(p))
    else:
        for note in result.notes:
            warn(note)
        _render(footer_json, rows, result.problems)
    if records:
        summary.update(_dump_records(st, result, stream, json_out, payload, problems))
    if deep and not json_out:
        stdout_console().print(result.verdict(), markup=False)
    if problems:
        from walctl import human

        first = primary_problem(problems)
        raise CorruptionError(f"{human.plural(len(problems), 'problem')}; first at byte {first.position}: {first.message}",
                              where=key, offset=first.position, summary=summary if json_out else None)
    if json_out:
        emit_json(summary)


def _footer_json(result) -> dict:
    """The object's footer as its JSON line (a composite's members too)."""
    footer = result.footer
    out = {"type": "footer", "key": result.key, "size_bytes": result.size_bytes,
           "kind": "composite" if result.composite is not None else "object"}
    if footer is None:  # --deep of an object whose footer is damaged: the problems say how
        return {**out, "damaged": True, "entries": 0}
    out |= {"index_start_position": footer.index_start_position,
            "index_block_length_bytes": footer.index_block_length, "version": footer.version,
            "index_crc": footer.index_crc if footer.version else None,
            "data_crc": footer.data_crc if footer.version else None, "entries": len(result.entries)}
    if result.composite is not None:
        from walctl.store.inspect import member_key

        out["members"] = [{"object_id": m.object_id, "key": member_key(result.key, m.object_id),
                           "block_start_index": m.block_start_index, "block_end_index": m.block_end_index,
                           "bucket_id": m.bucket_id} for m in result.composite.members]
    return out


def _dump_records(st: Store, result, stream: int | None, json_out: bool, payload: Payload, problems: list) -> dict:
    """--records: every batch of the object (of ``stream``); a decoding problem ends the dump and
    joins ``problems``. Returns the summary's record fields."""
    from walctl.errors import FormatError
    from walctl.store.inspect import iter_records, problem_json

    shown = 0
    before = st.stats.get
    try:
        for entry, placed in iter_records(st, result.key, result.entries, stream=stream, composite=result.composite):
            shown += 1
            _record(json_out, payload, entry, placed)
    except FormatError as exc:
        from walctl.format.object import Problem

        p = Problem.of(exc)
        problems.append(p)
        if json_out:
            emit_json(problem_json(p))
        else:
            stdout_console().print(f"PROBLEM at byte {p.position}: {p.message} (records stop here)", markup=False)
    return {"records": shown, "record_reads": st.stats.get - before}


def _record(json_out: bool, payload: Payload, entry, placed) -> None:
    import sys

    from walctl.human import plural

    b = placed.batch
    text = encode_payload(b.payload, payload)
    if json_out:
        row = {"type": "record", "stream_id": b.stream_id, "base_offset": b.base_offset, "end_offset": b.end_offset,
               "count": b.count, "epoch": b.epoch, "payload_bytes": len(b.payload),
               "block_position": placed.block_position, "batch_position": placed.batch_position}
        if text is not None:
            row["payload"] = text
        emit_json(row)
        return
    line = (f"block {placed.block_position:>10} batch {placed.batch_position:>10}  stream {b.stream_id} "
            f"offsets [{b.base_offset}, {b.end_offset}) {plural(len(b.payload), 'byte')}")
    if text is not None:
        line += "  " + text
    sys.stdout.write(line + "\n")


def _render(footer: dict, rows: list[dict], problems) -> None:
    from rich.table import Table

    from walctl import human

    console = stdout_console()
    # Labels and sizes as people read them (docs/CLI.md); --json keeps the raw fields.
    console.print(human.kv_table(human.json_rows(footer, skip=("type", "key", "members")),
                                 title=f"object {footer['key']}"))
    if footer.get("members"):
        members = Table(title="members (AutoMQ composite object: the index points into these)", title_justify="left")
        for col in ("object id", "key", "entries", "bucket"):
            members.add_column(col)
        for m in footer["members"]:
            members.add_row(str(m["object_id"]), m["key"], f"[{m['block_start_index']}, {m['block_end_index']})",
                            str(m["bucket_id"]))
        console.print(members)
    if not footer.get("damaged"):  # else no footer, so no index to show: the problems below say why
        table = Table(title="index", title_justify="left")
        for col in ("stream", "start", "end", "records", "position", "size"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["stream_id"]), str(r["start_offset"]), str(r["end_offset"]), str(r["record_count"]),  # not a manifest entry
                          str(r["block_position"]), str(r["block_size_bytes"]))
        console.print(table)
    for p in problems:
        where = (f" (block [{p.block_position}, {p.block_end}) of stream {p.stream_id} offsets "
                 f"[{p.start_offset}, {p.end_offset}))" if p.block_position is not None else "")
        console.print(f"PROBLEM at byte {p.position}{where}: {p.message}", markup=False)
        if p.explanation:
            console.print(f"  {p.explanation}", markup=False)
