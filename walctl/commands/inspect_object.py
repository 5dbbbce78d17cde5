"""walctl inspect-object: the footer and index of an object; --deep verifies every byte."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.cli import EndpointOpt, JsonOpt, StreamOpt, app, command, emit_json, stdout_console, warn


@app.command("inspect-object")
@command(stream=True)
def inspect_object_cmd(
    target: Annotated[str, typer.Argument(
        metavar="TARGET", help="An object id, its key (full, or relative to the store prefix), or a local file path.")],
    store: Annotated[str | None, typer.Option(
        "--store", envvar="WALCTL_STORE", metavar="URL",
        help="Object store holding TARGET (a local directory or s3://bucket[/prefix]); not needed for a "
             "local file. Env: WALCTL_STORE.")] = None,
    deep: Annotated[bool, typer.Option(
        "--deep", help="Also read every block: block magic, counts, lengths, batch headers, contiguous "
                       "offsets and the footer checksums; each problem with its byte position.")] = False,
    stream: StreamOpt = None,
    endpoint_url: EndpointOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show an object's footer and index (one or two ranged reads, whatever its size); read-only.

    Exit 3 when a check fails, 4 when TARGET is not an object of this format.
    """
    from walctl.errors import CorruptionError
    from walctl.store.inspect import index_rows, inspect, resolve

    st, key, known = resolve(target, store, endpoint_url)
    result = inspect(st, key, deep=deep, known=known)
    footer = result.footer
    rows = [r for r in index_rows(result.entries) if stream is None or r["stream_id"] == stream]
    footer_json = {"type": "footer", "key": key, "size_bytes": result.size_bytes,
                   "index_start_position": footer.index_start_position,
                   "index_block_length_bytes": footer.index_block_length, "version": footer.version,
                   "index_crc": footer.index_crc if footer.version else None,
                   "data_crc": footer.data_crc if footer.version else None, "entries": len(result.entries)}
    summary = {"type": "summary", "key": key, "entries": len(result.entries), "entries_shown": len(rows),
               "streams": len({e.stream_id for e in result.entries}), "deep": deep,
               "problems": len(result.problems), "reads": result.reads}
    if json_out:
        emit_json(footer_json)
        for row in rows:
            emit_json(row)
        for p in result.problems:
            emit_json({"type": "problem", "position": p.position, "message": p.message})
    else:
        for note in result.notes:
            warn(note)
        _render(footer_json, rows, result.problems)
    if result.problems:
        exc = CorruptionError(f"{len(result.problems)} problem(s); first at byte {result.problems[0].position}: "
                              f"{result.problems[0].message}", where=key, offset=result.problems[0].position)
        if json_out:
            exc.summary = summary
        raise exc
    if json_out:
        emit_json(summary)


def _render(footer: dict, rows: list[dict], problems) -> None:
    from rich.table import Table

    console = stdout_console()
    head = Table(title=f"object {footer['key']}", show_header=False, title_justify="left")
    for k, v in footer.items():
        if k not in ("type", "key"):
            head.add_row(k, str(v))
    console.print(head)
    table = Table(title="index", title_justify="left")
    for col in ("stream", "start", "end", "records", "position", "size"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["stream_id"]), str(r["start_offset"]), str(r["end_offset"]), str(r["record_count"]),
                      str(r["block_position"]), str(r["block_size_bytes"]))
    console.print(table)
    for p in problems:
        console.print(f"PROBLEM at byte {p.position}: {p.message}", markup=False)
