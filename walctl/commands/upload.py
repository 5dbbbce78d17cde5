"""walctl upload: build objects from the WAL's records, upload, commit, then trim."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, DeviceArg, EndpointOpt, JsonOpt,
                                     MetricsFileOpt, NamespaceOpt, RetryForOpt, S3ConnectTimeoutOpt, S3ReadTimeoutOpt,
                                     StoreOpt, command, emit_json, progress_bar, s3_settings, stdout_console, warn)
from walctl.options import Duration, Size


@command("upload")
def upload_cmd(
    device: DeviceArg,
    store: StoreOpt,
    namespace: NamespaceOpt = "default",
    block_size: Annotated[int, typer.Option(
        "--block-size", metavar="SIZE", parser=Size(min=1, max=1 << 30),
        help="Payload per DataBlock before a new block starts (bytes or 1MiB ...; 1 B to 1 GiB).")] = "1MiB",
    split_size: Annotated[int, typer.Option(
        "--split-size", metavar="SIZE", parser=Size(min=1, max=5 << 40),
        help="A stream with at least this much data gets its own Stream Object; smaller streams share one "
             "Stream Set Object (bytes or 16MiB ...; 1 B to 5 TiB).")] = "16MiB",
    no_trim: Annotated[bool, typer.Option(
        "--no-trim", help="Do not trim the WAL after the commit (the records stay until a later upload "
                          "or trim); upload then succeeds without waiting for a running writer.")] = False,
    trim_timeout: Annotated[float, typer.Option(
        "--trim-timeout", metavar="DURATION", parser=Duration(min=0),
        help="When a writer holds the WAL (walctl append running), wait up to this long (30s, 2m ...) for it to "
             "take the trim through its hand-off socket. If it does not, upload fails with exit 8 (the "
             "commit stands; a rerun skips it) and writes success 0 to --metrics-file.")] = "30s",
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the objects that would be made; write nothing anywhere.")] = False,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    metrics_file: MetricsFileOpt = None,
    accept_gap: Annotated[list[str] | None, typer.Option(
        "--accept-gap", metavar="STREAM:FROM-TO",
        help="Accept that stream STREAM's offsets FROM up to TO (exclusive) are gone, where no crash "
             "explains the gap (the error names it this way): the records after it are uploaded as after a "
             "crash gap and the acceptance is recorded in the manifest. Repeatable. Only that exact gap "
             "is accepted; one that matches no gap is an error. Its variable takes several, "
             "space-separated.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Upload the WAL's records after the trim point as objects; commit; trim the WAL to the last one.

    While a writer (walctl append) holds the WAL, the trim is handed to that writer through its
    hand-off socket; upload reports success only once the trim is done (exit 8 after
    --trim-timeout otherwise; --no-trim skips the trim).

    Records this WAL already uploaded (per the store's manifest) are skipped, so a rerun
    after any crash finishes the job without duplicates. A stream gap a crash made (a hole,
    sealed or not) is kept as a gap and explained; any other gap stops the upload (exit 3)
    until --accept-gap names it. A record that holds no StreamRecordBatch is not uploaded
    and not trimmed (exit 3 after uploading the rest; see its warning).
    """
    options = dict(namespace=namespace, block_size=block_size, split_size=split_size, no_trim=no_trim,
                   trim_timeout=trim_timeout, dry_run=dry_run, endpoint_url=endpoint_url, accept_gap=accept_gap,
                   s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    result, out = _upload(device, store, metrics_file, json_out, options)
    for message in result.warnings:
        warn(message)
    failure = _bad_records_error(result, device, out)
    if json_out:
        if failure is not None:
            raise failure  # the JSON result object carries the error
        emit_json(out)
        return
    _render(result, device, dry_run)
    if failure is not None:
        raise failure


def _upload(device: str, store: str, metrics_file, json_out: bool, o: dict):
    """(result, summary): the upload run under its metrics file (success 0 on any failure)."""
    from walctl.errors import TrimPendingError, UsageError
    from walctl.pipeline.upload import upload
    from walctl.sizes import parse_size
    from walctl.store import open_store, store_exists

    dry_run = o["dry_run"]
    if metrics_file is not None:
        from walctl.metrics import MetricsRun  # (with tempfile): only for a metrics file

        labels = {"device": device, "store": store, "node_id": _node_id(device)}
        run = MetricsRun(metrics_file, "upload", enabled=not dry_run, on_warning=warn, labels=labels)
    else:
        run = _NoMetrics()
    with run as metrics:
        accepted = []
        if o["accept_gap"]:
            from walctl import bounds

            try:
                accepted = [bounds.stream_gap(spec) for spec in o["accept_gap"]]
            except UsageError as exc:
                raise exc.at(device)
        if not dry_run:
            from walctl.pipeline.upload import check_wal

            check_wal(device)  # before the store is created: a wrong DEVICE must leave no empty store
        # A dry run creates nothing: a store not made yet is planned against as empty.
        st = open_store(store, endpoint_url=o["endpoint_url"], create=not dry_run, missing_ok=dry_run, s3=o["s3"])
        if not store_exists(st):
            warn(f"{store}: the store does not exist yet; a real upload creates it")
        try:
            with progress_bar(None, "uploading", json_out=json_out or dry_run) as progress:
                result = upload(device, st, namespace=o["namespace"], block_size=parse_size(o["block_size"]),
                                split_size=parse_size(o["split_size"]), trim=not o["no_trim"], dry_run=dry_run,
                                accept_gaps=accepted, progress=progress, trim_timeout_s=o["trim_timeout"],
                                on_wait=warn)
        except TrimPendingError as exc:
            done = exc.result
            exc.summary = metrics.summary = {"device": device, "store": store, **done.to_json(),
                                             "last_wal_offset": done.last_offset,
                                             "trimmed_to_wal_offset": done.trimmed_to}
            for message in done.warnings:
                warn(message)
            raise
        metrics.summary = out = {"device": device, "store": store, **result.to_json(),
                                 # the same offsets, named apart from the objects' stream offsets
                                 "last_wal_offset": result.last_offset, "trimmed_to_wal_offset": result.trimmed_to}
        metrics.record(bytes=sum(o["size_bytes"] or 0 for o in result.objects), payload_bytes=result.payload_bytes,
                       objects=len(result.objects), records=result.records, requests=st.stats.requests)
    return result, out


class _NoMetrics:
    """MetricsRun's place without --metrics-file (it would write nothing): walctl.metrics not imported."""

    summary: dict | None = None

    def record(self, **amounts: float) -> None:
        pass

    def __enter__(self) -> "_NoMetrics":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        return False


def _bad_records_error(result, device: str, out: dict):
    """The CorruptionError (exit 3) for records that hold no StreamRecordBatch, or None."""
    from walctl import human
    from walctl.errors import CorruptionError

    if not result.bad_records:
        return None
    first = result.bad_records[0]
    return CorruptionError(
        f"{human.plural(len(result.bad_records), 'record')} {'holds' if len(result.bad_records) == 1 else 'hold'} "
        f"no StreamRecordBatch (first at WAL offset {first['offset']}: "
        f"{first['reason']}); the other records were uploaded", where=device, offset=first["offset"],
        hint="the WAL is not trimmed past it; see the warning above for how to save and drop it", summary=out)


def _render(result, device: str, dry_run: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    from walctl import human
    from walctl.sizes import format_size

    table = Table(title=Text(("would upload" if dry_run else "uploaded") + f" {human.plural(result.records, 'record')} "
                  f"({format_size(result.payload_bytes)} payload) from {device}"), title_justify="left")
    for col in ("id", "key", "kind", "size", "stream offsets [start, end)"):
        table.add_column(col)
    for obj in result.objects:
        streams = ", ".join(f"stream {r['stream_id']} [{r['start']}, {r['end']})" for r in obj["streams"])  # not a manifest entry
        table.add_row(str(obj["id"]) if obj["id"] is not None else human.NONE, obj["key"] or human.NONE, obj["kind"],  # not a manifest entry
                      format_size(obj["size_bytes"]) if obj["size_bytes"] else format_size(obj["data_bytes"]),
                      Text(streams))
    console = stdout_console()
    console.print(table)
    console.print(f"skipped (already uploaded): {human.plural(result.skipped_records, 'record')}; commit: "
                  f"{human.value('commit', result.commit_number)}; WAL trimmed to: "
                  f"{human.value('trimmed_to', result.trimmed_to)}", markup=False)
    for gap in result.gaps:
        why = ("lost in a crash" + (" (sealed hole)" if gap["sealed"] else "") if gap["cause"] == "crash"
               else "accepted with --accept-gap")
        console.print(f"gap kept: stream {gap['stream_id']} offsets {gap['from']}..{gap['to']}: {why}; "
                      f"{'would be recorded' if dry_run else 'recorded'} in the manifest", markup=False)


def _node_id(device: str) -> str:
    """The WAL's node id for the metrics labels ('' when the header cannot be read: the run then
    fails with its own error, and its failure is still recorded under this device)."""
    from walctl.device.blockio import open_device
    from walctl.errors import WalctlError
    from walctl.wal.headers import read_headers

    try:
        dev = open_device(device, writable=False)
    except WalctlError:
        return ""
    try:
        node = read_headers(dev).header.node_id
        return "" if node is None or node < 0 else str(node)
    except WalctlError:
        return ""
    finally:
        dev.close()
