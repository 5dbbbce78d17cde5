"""walctl salvage: upload every intact record of a damaged WAL, record what was lost, reopen it."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, DeviceArg, EndpointOpt, JsonOpt,
                                     NamespaceOpt, RetryForOpt, S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StoreOpt,
                                     command, emit_json, s3_settings, stdout_console, warn)


@command("salvage")
def salvage_cmd(
    device: DeviceArg,
    store: StoreOpt,
    namespace: NamespaceOpt = "default",
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Say what would be uploaded and which ranges are lost; write nothing anywhere.")] = False,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    json_out: JsonOpt = False,
) -> None:
    """Save a damaged WAL's intact records: upload them, record each lost range, and reopen the WAL.

    For a WAL that 'walctl recover' shows CORRUPTION in (acknowledged records damaged on the
    device), where upload, and a writer opening it after a crash, refuse (exit 3). With no
    writer running, salvage reads the whole live log past the damage (as recover does),
    uploads every intact record not uploaded yet, records each stream range lost in the
    damage in the manifest as a gap (cause "corruption", with the damage's WAL offset), keeps
    the damaged bytes as evidence (DEVICE.salvage-<ns>.broken.json beside a WAL file; for a
    block device in WALCTL_REPAIR_EVIDENCE_DIR), then trims the WAL to the last record
    uploaded: the damage lies behind the trim point, 'walctl append' works again, and each
    stream continues at its next offset (with --store where the WAL no longer holds it).
    Exit 5 while a writer holds the WAL. On a WAL with no damage it is a plain upload.
    """
    import os
    import stat

    from walctl.pipeline.upload import check_wal, upload
    from walctl.pipeline.upload.salvage import check_can_salvage
    from walctl.store import open_store

    check_wal(device)
    check_can_salvage(device, stat.S_ISBLK(os.stat(device).st_mode))
    st = open_store(store, endpoint_url=endpoint_url, create=not dry_run, missing_ok=dry_run,
                    s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    result = upload(device, st, namespace=namespace, dry_run=dry_run, salvage=True, on_wait=warn)
    for message in result.warnings:
        warn(message)
    out = {"device": device, "store": store, **result.to_json(), "last_wal_offset": result.last_offset,
           "trimmed_to_wal_offset": result.trimmed_to}
    if json_out:
        emit_json(out)
        return
    _render(result, device, dry_run)


def _render(result, device: str, dry_run: bool) -> None:
    from walctl import human
    from walctl.sizes import format_size

    console = stdout_console()
    verb = "would salvage" if dry_run else "salvaged"
    console.print(f"{verb} {human.plural(result.records, 'record')} ({format_size(result.payload_bytes)} payload) "
                  f"from {device} into {human.plural(len(result.objects), 'object')}", markup=False)
    for gap in result.gaps:
        cause = {"crash": "lost in a crash (never acknowledged)", "corruption":
                 f"lost in the damage at WAL offset {gap.get('damage_offset')}"}.get(gap["cause"], gap["cause"])
        console.print(f"gap: stream {gap['stream_id']} offsets {gap['from']}..{gap['to']}: {cause}; "
                      f"{'would be recorded' if dry_run else 'recorded'} in the manifest", markup=False)
    for rng in result.damage:
        console.print(f"damage: WAL offset {rng['offset']}..{rng['end_offset']} ({rng['kind']}, "
                      f"{format_size(rng['length_bytes'])}): {rng['rule']}", markup=False)
    if result.evidence_file:
        console.print(f"evidence: the damaged bytes are kept in {result.evidence_file}", markup=False)
    if not dry_run:
        console.print(f"WAL trimmed to: {human.value('trimmed_to', result.trimmed_to)}; 'walctl append' works "
                      f"again", markup=False)
