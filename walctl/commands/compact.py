"""walctl compact: merge small Stream Set Objects with a Spark job (local by default)."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.cli import EndpointOpt, JsonOpt, NamespaceOpt, StoreOpt, app, command, emit_json, stdout_console, warn
from walctl.metrics import MetricsFileOpt
from walctl.options import spark_master

def _debug() -> bool:
    from walctl.cli import _state

    return bool(_state.get("debug"))


def _interrupted_summary(store: str, result) -> dict:
    """The JSON summary of a run that SIGTERM/SIGINT stopped (walctl.cli.command adds the error)."""
    summary = {"store": store, **result.to_json()} if result is not None else {"store": store}
    summary["interrupted"] = True
    summary["rolled_back"] = "the Spark job was cancelled, its uploads aborted, nothing committed"
    return summary


@app.command("compact")
@command()
def compact_cmd(
    store: StoreOpt,
    master: Annotated[str | None, typer.Option(
        "--master", envvar="WALCTL_SPARK_MASTER", parser=spark_master,
        help="Spark master: local[N], spark://host:7077, yarn, k8s://https://host:443. Default: the one "
             "spark-submit (or PYSPARK_SUBMIT_ARGS) sets, else local[*] (this machine).")] = None,
    memory_limit: Annotated[str, typer.Option(
        "--memory-limit", metavar="SIZE",
        help="Most object data one iteration holds in memory (bytes or 200MiB ...); larger plans run "
             "in several iterations.")] = "200MiB",
    split_size: Annotated[str, typer.Option(
        "--split-size", metavar="SIZE",
        help="A stream with at least this much data (or with an offset gap) becomes Stream Objects; "
             "smaller streams are packed into a new Stream Set Object (bytes or 16MiB ...).")] = "16MiB",
    max_objects: Annotated[int, typer.Option(
        "--max-objects", min=1, help="Compact at most this many Stream Set Objects (oldest first).")] = 1000,
    retention_start: Annotated[list[str] | None, typer.Option(
        "--retention-start", metavar="STREAM=OFFSET",
        help="Drop the blocks of STREAM that end at or below OFFSET (stream offsets); repeatable. An OFFSET "
             "past the stream's end is refused (exit 2), an unknown STREAM too (exit 4).")] = None,
    read_rate: Annotated[float | None, typer.Option(
        "--read-rate", metavar="MIB/S", min=0.001, envvar="WALCTL_COMPACT_READ_RATE",
        help="Most MiB read per second across all Spark tasks, so compaction beside live traffic does not "
             "starve it (default: derived from --interval).")] = None,
    interval: Annotated[str, typer.Option(
        "--interval", metavar="DURATION",
        help="How often compaction runs (cron period: 90s, 20m, 1h). Without --read-rate, reads are paced "
             "to finish the planned bytes in 80% of it (at least 32 MiB/s), as AutoMQ does; 0 = unlimited.")] = "20m",
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the whole plan (inputs, outputs, iterations, GET/PUT counts); write nothing.")] = False,
    namespace: NamespaceOpt = "default",
    endpoint_url: EndpointOpt = None,
    metrics_file: MetricsFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compact Stream Set Objects (AutoMQ's design) and commit the result atomically.

    Writes at most one Stream Set Object per run (plus one Stream Object per stream run of
    at least --split-size), so a second run over a compacted store has nothing to do: a
    store with nothing to compact exits 0 at once, without starting Spark. A second
    compact that starts while one runs fences the first (its commit is refused).
    Needs pyspark (pip install 'walctl[spark]') and Java: without them it exits 4 and
    writes nothing (--dry-run works without either). SIGTERM or SIGINT cancels the Spark
    job, aborts its uploads, stops the JVM and exits 130 (with --json, the result carries
    "error"); a commit in flight is finished first.
    """
    from walctl.errors import UsageError
    from walctl.metrics import MetricsRun
    from walctl.sizes import parse_duration, parse_size
    from walctl.spark.compact import compact
    from walctl.store import open_store

    # SIGTERM and SIGINT raise walctl.cli.Interrupted (a KeyboardInterrupt) here, through
    # walctl.cli.command: the job is cancelled and rolled back on the way out, then one line, exit 143/130.
    started: list = []
    with MetricsRun(metrics_file, "compact", enabled=not dry_run, on_warning=warn,
                    labels={"store": store} if metrics_file else None) as metrics:
        retention: dict[int, int] = {}
        for item in retention_start or []:
            stream, _, offset = item.partition("=")
            if not (stream.isdigit() and offset.isdigit()):
                raise UsageError(f"bad --retention-start {item!r}", hint="use STREAM=OFFSET, e.g. 7=1000")
            retention[int(stream)] = int(offset)
        st = open_store(store, endpoint_url=endpoint_url, create=False)
        interval_s = parse_duration(interval)
        try:
            result = compact(st, store, endpoint_url=endpoint_url, master=master,
                             memory_limit=parse_size(memory_limit),
                             read_rate_bps=read_rate * (1 << 20) if read_rate else None,
                             interval_s=interval_s or None,
                             split_size=parse_size(split_size), max_objects=max_objects, retention=retention,
                             dry_run=dry_run, namespace=namespace, on_result=started.append,
                             spark_log_level="WARN" if _debug() else "OFF")
        except KeyboardInterrupt as exc:
            if started and started[0].commit_number is not None:
                result = started[0]  # the commit was in flight and landed: the run is complete
                warn("interrupted after the commit: the compaction is committed")
            else:
                exc.summary = _interrupted_summary(store, started[0] if started else None)
                raise
        metrics.summary = out = {"store": store, **result.to_json()}
        # The tasks' requests happen in executors, with store clients of their own.
        metrics.record(bytes=out["bytes_written"], read_bytes=out["bytes_read"], objects=len(result.made),
                       input_objects=0 if result.idle else out["objects_in"],
                       requests=st.stats.requests + sum(t["gets"] + t["puts"] for t in result.tasks))
        # (st.stats already counts the driver's multipart creates and completes)
    if json_out:
        emit_json(out)
        return
    _render(out)


def _render(out: dict) -> None:
    from rich.table import Table

    from walctl.sizes import format_size

    console = stdout_console()
    plan = out["plan"]
    if out["idle"]:
        console.print(f"nothing to compact: {plan['reason'] if plan else ''}", markup=False)
        return
    console.print(("plan" if out["dry_run"] else "compacted") +
                  f": {out['objects_in']} objects in, {out['objects_out']} out, {out['iterations']} iterations, "
                  f"{plan['gets']} GETs, {plan['puts']} PUTs planned", markup=False)
    inputs = Table(title="inputs", title_justify="left")
    for col in ("id", "key", "size"):
        inputs.add_column(col)
    for o in plan["inputs"]:
        inputs.add_row(str(o["id"]), o["key"], format_size(o["size"]))
    console.print(inputs)
    outs = Table(title="outputs", title_justify="left")
    for col in ("key" if not out["dry_run"] else "output", "kind", "size", "parts", "streams"):
        outs.add_column(col)
    keys = [o["key"] for o in out["objects"]]
    for n, o in enumerate(plan["outputs"]):
        outs.add_row(keys[n] if n < len(keys) else str(n), o["kind"], format_size(o["size_bytes"]), str(o["parts"]),
                     ", ".join(f"{s['stream_id']}:[{s['start']},{s['end']})" for s in o["streams"]))
    console.print(outs)
    if not out["dry_run"]:
        console.print(f"commit {out['commit_number']} (compactor epoch {out['compactor_epoch']}); read "
                      f"{format_size(out['bytes_read'])}, wrote {format_size(out['bytes_written'])} in "
                      f"{out['seconds']} s", markup=False)
