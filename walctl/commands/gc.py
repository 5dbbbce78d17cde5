"""walctl gc: delete expired prepared objects, replaced objects past their grace, old manifests."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, EndpointOpt, JsonOpt, MetricsFileOpt,
                                     RetryForOpt, S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StoreOpt, command, emit_json,
                                     s3_settings, stdout_console, warn)
from walctl.options import Duration


@command("gc")
def gc_cmd(
    store: StoreOpt,
    grace: Annotated[float, typer.Option(
        "--grace", metavar="DURATION", parser=Duration(min=0),
        help="How long objects replaced by compaction are kept for readers that may still hold them: "
             "90s, 30m, 1h, 2d. Prepared ids (an upload or compaction may still be writing them) expire "
             "by their own TTL, 1 hour after they were reserved.")] = "1h",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would be deleted; delete nothing.")] = False,
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    metrics_file: MetricsFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Garbage-collect the store: orphaned and replaced objects, manifests beyond the kept history, and
    the temp files of a local store that a killed upload or compaction left (untouched for an hour)."""
    from walctl.metrics import MetricsRun
    from walctl.store import open_store
    from walctl.store.gc import gc

    with MetricsRun(metrics_file, "gc", enabled=not dry_run, on_warning=warn,
                    labels={"store": store} if metrics_file else None) as metrics:
        st = open_store(store, endpoint_url=endpoint_url, create=False,
                        s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
        result = gc(st, grace_s=grace, dry_run=dry_run)
        metrics.summary = out = {"store": store, **result.to_json()}
        metrics.record(objects=len(result.deleted_objects), manifests=len(result.deleted_manifests),
                       requests=st.stats.requests)
    if json_out:
        emit_json(out)
        return
    verb = "would delete" if dry_run else "deleted"
    console = stdout_console()
    from walctl.human import plural

    console.print(f"{verb} {plural(len(result.deleted_objects), 'object')}, "
                  f"{plural(len(result.deleted_manifests), 'old manifest')}; {'would forget' if dry_run else 'forgot'} "
                  f"{plural(len(result.forgotten_prepared), 'prepared object id')} and "
                  f"{plural(len(result.forgotten_deleting), 'replaced object id')}", markup=False)
    for key in result.deleted_objects:
        console.print(f"  {key}", markup=False)
    if result.deleted_temp_files:
        console.print(f"{verb} {plural(len(result.deleted_temp_files), 'temp file')} that a killed writer left",
                      markup=False)
