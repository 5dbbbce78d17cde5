"""walctl upload: build objects from the WAL's records, upload, commit, then trim."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.cli import (DeviceArg, EndpointOpt, JsonOpt, NamespaceOpt, StoreOpt, app, command, emit_json,
                        stdout_console, warn)
from walctl.metrics import MetricsFileOpt


@app.command("upload")
@command()
def upload_cmd(
    device: DeviceArg,
    store: StoreOpt,
    namespace: NamespaceOpt = "default",
    block_size: Annotated[str, typer.Option(
        "--block-size", metavar="SIZE", help="Payload per DataBlock before a new block starts (bytes or 1MiB ...).")] = "1MiB",
    split_size: Annotated[str, typer.Option(
        "--split-size", metavar="SIZE",
        help="A stream with at least this much data gets its own Stream Object; smaller streams share one "
             "Stream Set Object (bytes or 16MiB ...).")] = "16MiB",
    no_trim: Annotated[bool, typer.Option(
        "--no-trim", help="Do not trim the WAL after the commit (the records stay until a later upload "
                          "or trim); upload then succeeds without waiting for a running writer.")] = False,
    trim_timeout: Annotated[float, typer.Option(
        "--trim-timeout", envvar="WALCTL_TRIM_TIMEOUT", metavar="SECONDS", min=0,
        help="When a writer holds the WAL (walctl append running), wait up to this many seconds for it to "
             "take the trim through its hand-off socket. If it does not, upload fails with exit 8 (the "
             "commit stands; a rerun skips it) and writes success 0 to --metrics-file. "
             "Env: WALCTL_TRIM_TIMEOUT.")] = 30.0,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the objects that would be made; write nothing anywhere.")] = False,
    endpoint_url: EndpointOpt = None,
    metrics_file: MetricsFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Upload the WAL's records after the trim point as objects; commit; trim the WAL to the last one.

    While a writer (walctl append) holds the WAL, the trim is handed to that writer through its
    hand-off socket; upload reports success only once the trim is done (exit 8 after
    --trim-timeout otherwise; --no-trim skips the trim).

    Records this WAL already uploaded (per the store's manifest) are skipped, so a rerun
    after any crash finishes the job without duplicates.
    """
    from walctl.metrics import MetricsRun
    from walctl.sizes import format_size, parse_size
    from walctl.store import open_store
    from walctl.store.upload import upload

    with MetricsRun(metrics_file, "upload", enabled=not dry_run, on_warning=warn) as metrics:
        st = open_store(store, endpoint_url=endpoint_url)
        from walctl.errors import TrimPendingError

        try:
            result = upload(device, st, namespace=namespace, block_size=parse_size(block_size),
                            split_size=parse_size(split_size), trim=not no_trim, dry_run=dry_run,
                            trim_timeout_s=trim_timeout)
        except TrimPendingError as exc:
            done = exc.result
            exc.summary = metrics.summary = {"device": device, "store": store, **done.to_json()}
            for message in done.warnings:
                warn(message)
            raise
        metrics.summary = out = {"device": device, "store": store, **result.to_json()}
        metrics.record(bytes=sum(o["size_bytes"] or 0 for o in result.objects), payload_bytes=result.payload_bytes,
                       objects=len(result.objects), records=result.records, requests=st.stats.requests)
    for message in result.warnings:
        warn(message)
    if json_out:
        emit_json(out)
        return
    from rich.table import Table

    table = Table(title=("would upload" if dry_run else "uploaded") + f" {result.records} records "
                  f"({format_size(result.payload_bytes)} payload) from {device}", title_justify="left")
    for col in ("id", "key", "kind", "size", "streams"):
        table.add_column(col)
    for obj in result.objects:
        streams = ", ".join(f"{r['stream_id']}:[{r['start']},{r['end']})" for r in obj["streams"])
        table.add_row(str(obj["id"] or "-"), obj["key"] or "-", obj["kind"],
                      format_size(obj["size_bytes"]) if obj["size_bytes"] else format_size(obj["data_bytes"]), streams)
    console = stdout_console()
    console.print(table)
    console.print(f"skipped (already uploaded): {result.skipped_records}; commit: {result.commit_number}; "
                  f"trimmed to: {result.trimmed_to}")
