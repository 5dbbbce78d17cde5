"""How a failed run ends on the terminal and in NDJSON: one stderr line, and with --json the
result (or closing summary) object carrying ``error``. The only output the cli package renders
itself; commands render their results through walctl.commands._shared and walctl.human."""

from __future__ import annotations

import json
import sys

import typer


def report_error(line: str, error: dict, json_out: bool, stream: bool, summary: dict | None) -> None:
    """``line`` on stderr; with ``json_out`` the ``summary`` (``type: summary`` for a streaming command)
    with ``error`` on stdout."""
    typer.echo(line, err=True)
    if json_out:
        obj = dict(summary or {})
        if stream:
            obj.setdefault("type", "summary")
        obj["error"] = error
        from walctl.commands._shared import json_nulls, utc_now

        obj = json_nulls(obj)
        if "time" not in obj:
            obj["time"] = utc_now()
        try:
            sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            pass
