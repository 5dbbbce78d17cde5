"""walctl image: copy a WAL device into a file with its sha256, read-only on the source."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import DeviceArg, JsonOpt, command, emit_json, progress_bar, stdout_console, warn


@command("image")
def image_cmd(
    device: DeviceArg,
    file: Annotated[str, typer.Argument(
        metavar="FILE", help="The image file to create; its sha256 goes to FILE.sha256 (sha256sum -c format).")],
    whole_device: Annotated[bool, typer.Option(
        "--whole-device", help="Copy every byte of DEVICE, not only the WAL's capacity from its header.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite FILE and FILE.sha256 when they exist (never the source itself).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Copy a device into a file for forensics, with a sha256 checksum; never writes the device.

    Copies the WAL's capacity (from a valid header, walctl's or AutoMQ's), or the whole
    device when there is no valid header or with --whole-device. The source is read with
    O_DIRECT and no lock, so a live writer is not disturbed (the copy is then as of no single
    moment: image a stopped device for exact forensics). Exit 5 when FILE exists (without
    --force) or is the device itself.
    """
    from walctl.wal.image import image_device

    with progress_bar(None, f"imaging {device}", json_out=json_out) as progress:
        result = image_device(device, file, whole_device=whole_device, force=force, progress=progress)
    for message in result.warnings:
        warn(message)
    if json_out:
        emit_json(result.to_json())
        return
    from walctl import human

    # sha256 is printed whole below, in sha256sum's format
    table = human.kv_table(human.json_rows(result.to_json(), skip=("sha256",)), f"image of {device}")
    console = stdout_console()
    console.print(table)
    console.print(f"{result.sha256}  {file}", markup=False)
