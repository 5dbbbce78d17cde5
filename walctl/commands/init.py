"""walctl init: write both header slots of a new WAL."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.cli import DeviceArg, JsonOpt, app, command, emit_json, stdout_console, warn


@app.command("init")
@command()
def init_cmd(
    device: DeviceArg,
    capacity: Annotated[str | None, typer.Option(
        "--capacity", envvar="WALCTL_CAPACITY", metavar="SIZE",
        help="Bytes of the device the WAL uses, headers included (4096, 64MiB, 2GiB, 1GB; aligned down "
             "to 4 KiB). Required when DEVICE does not exist (it is created as a file of this size); "
             "default: the whole device.")] = None,
    node_id: Annotated[int, typer.Option("--node-id", envvar="WALCTL_NODE_ID", min=-1,
                                         help="Node id recorded in the header (-1: none).")] = -1,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite a device holding a WAL or a filesystem/partition signature "
                        "(never a mounted or held device).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create a WAL: write both header slots (the record area of a reused device is wiped)."""
    from walctl.sizes import parse_size
    from walctl.wal.ops import init_wal

    size = parse_size(capacity) if capacity is not None else None
    result = init_wal(device, size, node_id=node_id, force=force, progress=_progress())
    for message in result.warnings:
        warn(message)
    if json_out:
        emit_json({"device": result.path, "created": result.created,
                   "device_size_bytes": result.device_size_bytes, "wiped_bytes": result.wiped_bytes,
                   "header": result.header.to_json()})
        return
    render_header(result.header, title=f"initialised {result.path}" + (" (created)" if result.created else ""))


def render_header(header, title: str) -> None:
    from rich.table import Table

    from walctl.sizes import format_size

    table = Table(title=title, show_header=False, title_justify="left")
    for key, value in header.to_json().items():
        if key.endswith("_bytes") and isinstance(value, int):
            value = f"{value} ({format_size(value)})"
        table.add_row(key, str(value))
    stdout_console().print(table)


def _progress():
    """A progress callback for the wipe, only when stderr is a terminal."""
    import sys

    if not sys.stderr.isatty():
        return None
    console_state = {"last": -1}

    def report(done: int) -> None:
        mib = done >> 20
        if mib // 64 != console_state["last"]:
            console_state["last"] = mib // 64
            sys.stderr.write(f"\rwiping record area: {mib} MiB")
            sys.stderr.flush()

    return report
