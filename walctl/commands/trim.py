"""walctl trim: delete (logically) every record up to and including an offset."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import DeviceArg, JsonOpt, command, emit_json, stdout_console


@command("trim")
def trim_cmd(
    device: DeviceArg,
    offset: Annotated[int | None, typer.Argument(
        min=0, show_default=False,
        help="WAL offset of a live record (as append or recover printed it): it and every "
             "record before it are deleted. The trim point only moves forward.")] = None,
    scan: Annotated[bool, typer.Option(
        "--scan", help="Scan the live records (reads the used part of the ring) to check OFFSET against them and "
             "count the records deleted and left.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Move the trim point: records at or before OFFSET are deleted; durable before it returns.

    On a cleanly closed WAL OFFSET is checked by reading the record header there (it carries its
    own logical offset), and the checkpoint in the header slot is kept: nothing else is read.
    A WAL whose last writer crashed is scanned (and sealed) first, as append does.
    """
    import os

    from walctl.errors import UsageError
    from walctl.wal.lifecycle import trim_wal

    if offset is None:
        # With WALCTL_DEVICE set, "walctl trim OFFSET" puts OFFSET where DEVICE is expected.
        env_device = os.environ.get("WALCTL_DEVICE")
        if env_device and device != env_device and device.isdigit():
            device, offset = env_device, int(device)
        else:
            raise UsageError("missing argument OFFSET", hint="walctl trim DEVICE OFFSET")
    from walctl.device.blockio import bytes_read_total

    read_before = bytes_read_total()
    result = trim_wal(device, offset, scan=scan)
    # records_deleted/left: null when the checkpoint of a cleanly closed log let trim skip the scan
    out = {"device": device, "previous_trim_offset": result.previous_trim_offset,
           "trim_offset": result.trim_offset, "records_deleted": result.records_deleted,
           "records_left": result.records_left, "end_offset": result.end_offset,
           "live_bytes_left": result.end_offset - result.trim_offset, "scanned": result.scanned,
           "device_bytes_read": bytes_read_total() - read_before}
    if json_out:
        emit_json(out)
    elif result.records_deleted is None:
        stdout_console().print(f"trimmed {device} to offset {result.trim_offset}: "
                               f"{out['live_bytes_left']} bytes from the trim point to the end of the log "
                               f"at {result.end_offset}")
    else:
        from walctl.human import plural

        stdout_console().print(f"trimmed {device} to WAL offset {result.trim_offset}: "
                               f"{plural(result.records_deleted, 'record')} deleted, {result.records_left} left",
                               markup=False)
