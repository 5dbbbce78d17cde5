"""walctl trim: delete (logically) every record up to and including an offset."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.cli import DeviceArg, JsonOpt, app, command, emit_json, stdout_console


@app.command("trim")
@command()
def trim_cmd(
    device: DeviceArg,
    offset: Annotated[int | None, typer.Argument(
        min=0, show_default=False,
        help="WAL offset of a live record (as append or recover printed it): it and every "
             "record before it are deleted. The trim point only moves forward.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Move the trim point: records at or before OFFSET are deleted; durable before it returns."""
    import os

    from walctl.errors import UsageError
    from walctl.wal.ops import trim_wal

    if offset is None:
        # With WALCTL_DEVICE set, "walctl trim OFFSET" puts OFFSET where DEVICE is expected.
        env_device = os.environ.get("WALCTL_DEVICE")
        if env_device and device != env_device and device.isdigit():
            device, offset = env_device, int(device)
        else:
            raise UsageError("missing argument OFFSET", hint="walctl trim DEVICE OFFSET")
    result = trim_wal(device, offset)
    out = {"device": device, "previous_trim_offset": result.previous_trim_offset,
           "trim_offset": result.trim_offset, "records_deleted": result.records_deleted,
           "records_left": result.records_left}
    if json_out:
        emit_json(out)
    else:
        from walctl.human import plural

        stdout_console().print(f"trimmed {device} to WAL offset {result.trim_offset}: "
                               f"{plural(result.records_deleted, 'record')} deleted, {result.records_left} left",
                               markup=False)
