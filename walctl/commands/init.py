"""walctl init: write both header slots of a new WAL."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import DeviceArg, JsonOpt, command, emit_json, progress_bar, stdout_console, warn
from walctl.options import Size

# walctl.format.header.MIN_CAPACITY (two 4 KiB header slots and two blocks; tests/cli/test_hostile_input.py
# checks they agree), and the largest capacity: 1 PiB keeps every WAL offset of years of appends in 63 bits.
MIN_CAPACITY, MAX_CAPACITY = 16 << 10, 1 << 50


@command("init")
def init_cmd(
    device: DeviceArg,
    capacity: Annotated[int | None, typer.Option(
        "--capacity", metavar="SIZE", parser=Size(min=MIN_CAPACITY, max=MAX_CAPACITY),
        help="Bytes of the device the WAL uses, headers included (4096, 64MiB, 2GiB, 1GB; aligned down "
             "to 4 KiB; 16KiB to 1024TiB). Required when DEVICE does not exist (it is created as a file of this size); "
             "default: the whole device.")] = None,
    node_id: Annotated[int, typer.Option("--node-id", min=-1, max=(1 << 31) - 1,
                                         help="Node id recorded in the header (-1: none).")] = -1,
    no_prewrite: Annotated[bool, typer.Option(
        "--no-prewrite", help="For a regular file: do not write the whole capacity once at init (the "
                              "first lap of appends is then slower while the filesystem allocates).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite a device holding a WAL or a filesystem/partition signature "
                        "(never a mounted or held device). A WAL holding records not yet uploaded "
                        "(after its trim point) also needs --discard-unuploaded.")] = False,
    discard_unuploaded: Annotated[bool, typer.Option(
        "--discard-unuploaded",
        help="With --force: re-initialise even a WAL holding records not yet uploaded (after its "
             "trim point; for an AutoMQ WAL every live record, as walctl cannot tell), destroying "
             "them. Without it such a WAL is refused (exit 5) with the count of records and bytes; "
             "upload them first (walctl upload DEVICE --store URL).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create a WAL: write both header slots (the record area of a reused device is wiped)."""
    from walctl import bounds
    from walctl.errors import UsageError
    from walctl.sizes import parse_size
    from walctl.wal.lifecycle import init_wal

    try:
        bounds.node_id(node_id)  # the header's nodeId is an int32: refused before anything is written
    except UsageError as exc:
        raise exc.at(device)
    size = parse_size(capacity) if capacity is not None else None
    with progress_bar(size, "writing the record area", json_out=json_out) as progress:
        result = init_wal(device, size, node_id=node_id, force=force, progress=progress, prewrite=not no_prewrite,
                          discard_unuploaded=discard_unuploaded)
    for message in result.warnings:
        warn(message)
    if json_out:
        emit_json({"device": result.path, "created": result.created,
                   "device_size_bytes": result.device_size_bytes, "wiped_bytes": result.wiped_bytes,
                   "prewritten_bytes": result.wiped_bytes if not result.is_block_device else 0,
                   "header": result.header.to_json()})
        return
    render_header(result.header, title=f"initialised {result.path}" + (" (created)" if result.created else ""))


def render_header(header, title: str) -> None:
    from walctl import human

    fields = header.to_json()
    rows = human.json_rows(fields, skip=("trim_offset", "next_offset", "node_id", "epoch"))
    rows.insert(3, ("trim point", "- (never trimmed)" if fields["trim_offset"] < 0
                    else f"WAL offset {fields['trim_offset']}"))
    rows.append(("next WAL offset", human.value("next_offset", fields.get("next_offset"))))
    rows.append(("node id", human.NONE if fields["node_id"] == -1 else str(fields["node_id"])))
    rows.append(("epoch", human.NONE if fields["epoch"] == -1 else str(fields["epoch"])))
    stdout_console().print(human.kv_table(rows, title))
