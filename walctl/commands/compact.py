"""walctl compact: merge small Stream Set Objects with a Spark job (local by default), then
merge consecutive Stream Objects by server-side copy (--level), or split SSOs (--force-split)."""

from __future__ import annotations

import enum
import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from walctl.commands._shared import (RETRY_FOR, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, EndpointOpt, JsonOpt, MetricsFileOpt,
                                     NamespaceOpt, RetryForOpt, S3ConnectTimeoutOpt, S3ReadTimeoutOpt, StoreOpt, command,
                                     emit_json, s3_settings, stdout_console, warn)
from walctl.errors import WalctlError
from walctl.options import Duration, Rate, Size, spark_master, stream_offset
from walctl.sizes import plural

if TYPE_CHECKING:
    from walctl.store.base import Store


def _debug() -> bool:
    from walctl.commands._shared import debug_requested

    return debug_requested()


def _rolled_back_summary(store: str, result) -> dict:
    """The JSON summary of a run whose Spark job was cancelled and rolled back (the walctl.cli
    boundary adds the error)."""
    summary = {"store": store, **result.to_json()} if result is not None else {"store": store}
    summary["rolled_back"] = "the Spark job was cancelled, its uploads aborted, nothing committed"
    return summary


def _interrupted_summary(store: str, result) -> dict:
    """The JSON summary of a run that SIGTERM/SIGINT stopped (the walctl.cli boundary adds the error)."""
    return {**_rolled_back_summary(store, result), "interrupted": True}


class InterruptedAfterCommit(WalctlError):
    """SIGTERM/SIGINT arrived at or after the compaction's commit: the commit stands (it is never
    rolled back), what was left (the SO level) is not done. Exit 143/130, as for any interruption;
    the line says what is committed, the result (one JSON document) carries the error."""

    def __init__(self, interrupt: BaseException, what: str, summary: dict):
        import signal

        signum = getattr(interrupt, "signum", int(signal.SIGINT))
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name} {what}", summary=summary,
                         hint="nothing to undo; rerun the command to continue")
        self.exit_code = 128 + signum

    def to_json(self) -> dict:
        return {**super().to_json(), "signal": self.signal_name}


def _print_result(out: dict, json_out: bool, render) -> None:
    """The run's one result, whole: a signal that arrives while it is printed waits for it, and then
    finds nothing left to stop (the run has finished: exit 0, no second document); the signals are
    ignored from then on, while walctl exits."""
    import signal

    from walctl.device.signals import signals_deferred

    try:
        with signals_deferred():
            if json_out:
                emit_json(out)
            else:
                render(out)
            sys.stdout.flush()
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt:
        pass  # (taken by another thread, held by the CLI's handler: the result is out all the same)


class Level(str, enum.Enum):
    all = "all"
    sso = "sso"
    so = "so"


RATE_HELP = ("bytes per second, with a unit (50MiB/s; a bare number other than 0 is refused); default and 0: "
             "unlimited. The dry-run plan shows it "
             "and the expected duration.")


@command("compact")
def compact_cmd(
    store: StoreOpt,
    master: Annotated[str | None, typer.Option(
        "--master", envvar="WALCTL_SPARK_MASTER", parser=spark_master,
        help="Spark master: local[N], spark://host:7077, yarn, k8s://https://host:443. Default: the one "
             "spark-submit (or PYSPARK_SUBMIT_ARGS) sets, else local[*] (this machine).")] = None,
    memory_limit: Annotated[int, typer.Option(
        "--memory-limit", metavar="SIZE", parser=Size(min=4 << 10, max=1 << 40),
        help="Most object data one iteration holds in memory (bytes or 200MiB ...); larger plans run "
             "in several iterations (4KiB to 1TiB).")] = "200MiB",
    split_size: Annotated[int, typer.Option(
        "--split-size", metavar="SIZE", parser=Size(min=1, max=5 << 40),
        help="A stream with at least this much data (or with an offset gap) becomes Stream Objects; "
             "smaller streams are packed into a new Stream Set Object (bytes or 16MiB ...).")] = "16MiB",
    max_objects: Annotated[int, typer.Option(
        "--max-objects", min=1, help="Compact at most this many Stream Set Objects (oldest first).")] = 1000,
    retention_start: Annotated[list[str] | None, typer.Option(
        "--retention-start", metavar="STREAM:OFFSET", parser=stream_offset,
        help="Drop the blocks of STREAM that end at or below OFFSET (stream offsets; STREAM=OFFSET is the "
             "deprecated spelling); repeatable; SSO compaction only (not --level so or --force-split). An "
             "OFFSET past the stream's end is refused (exit 2), an unknown STREAM too (exit 4).")] = None,
    read_rate: Annotated[float | None, typer.Option(
        "--read-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_READ_RATE", parser=Rate(bare=1 << 20),
        help="Most bytes read per second across all Spark tasks (50MiB/s; a bare number is MiB/s), so "
             "compaction beside live traffic does not starve it (default: derived from --interval).")] = None,
    write_rate: Annotated[float | None, typer.Option(
        "--write-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_WRITE_RATE", parser=Rate(bare=1 << 20),
        help="Most bytes (50MiB/s; a bare number is MiB/s) written into the store per second across all Spark tasks (SSO compaction's write "
             "budget; default unlimited). The dry-run plan shows both budgets and the expected duration.")] = None,
    tasks: Annotated[int | None, typer.Option(
        "--tasks", min=1, envvar="WALCTL_COMPACT_TASKS",
        help="Spark tasks (iterations) that run at once, each holding --memory-limit / N of data and 1/N "
             "of the budgets; smaller iterations cost more GETs (--dry-run shows them). Default: 1 on a "
             "local master, 2 on a cluster.")] = None,
    interval: Annotated[float, typer.Option(
        "--interval", metavar="DURATION", parser=Duration(min=0),
        help="How often compaction runs (cron period: 90s, 20m, 1h). Without --read-rate, reads are paced "
             "to finish the planned bytes in 80% of it (at least 32 MiB/s), as AutoMQ does; 0 = unlimited.")] = "20m",
    task_timeout: Annotated[float | None, typer.Option(
        "--task-timeout", metavar="DURATION", parser=Duration(min=0),
        help="Most time the Spark job (every iteration of the run) may take, counted from its first executor's "
             "registration, or from its start if none registers (90s, 10m, 1h). Past it (lost workers, none with free cores and memory, a hung task) the job is "
             "cancelled, its uploads rolled back, nothing committed: exit 6. Default: 10m, or twice the "
             "plan's expected duration at its budgets (32 MiB/s when unlimited) if longer; 0 = no limit.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the whole plan (inputs, outputs, iterations, GET/PUT counts); write nothing.")] = False,
    level: Annotated[Level, typer.Option(
        "--level", envvar="WALCTL_COMPACT_LEVEL",
        help="What to compact: sso (Stream Set Objects, with Spark), so (merge consecutive Stream Objects of "
             "a stream by server-side copy, no Spark), all (sso then so).")] = Level.all,
    so_target_size: Annotated[int, typer.Option(
        "--so-target-size", metavar="SIZE", envvar="WALCTL_COMPACT_SO_TARGET_SIZE", parser=Size(min=1, max=5 << 40),
        help="Largest Stream Object that SO compaction makes (bytes or 1GiB ...; AutoMQ's default is "
             "10GiB).")] = "1GiB",
    force_split: Annotated[bool, typer.Option(
        "--force-split", envvar="WALCTL_COMPACT_FORCE_SPLIT",
        help="Split Stream Set Objects entirely into Stream Objects (one per stream), writing no SSO; "
             "the data is copied server-side. Replaces --level.")] = False,
    older_than: Annotated[float | None, typer.Option(
        "--older-than", metavar="DURATION", envvar="WALCTL_COMPACT_OLDER_THAN", parser=Duration(min=0),
        help="With --force-split: only SSOs whose data was uploaded at least this long ago "
             "(90s, 30m, 6h, 2d).")] = None,
    so_read_rate: Annotated[float | None, typer.Option(
        "--so-read-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_SO_READ_RATE", parser=Rate(zero_unlimited=True),
        help="SO compaction's read budget (object bytes read through walctl), " + RATE_HELP)] = None,
    so_write_rate: Annotated[float | None, typer.Option(
        "--so-write-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_SO_WRITE_RATE", parser=Rate(zero_unlimited=True),
        help="SO compaction's write budget (bytes written into the store, server-side copies included), "
             + RATE_HELP)] = None,
    split_read_rate: Annotated[float | None, typer.Option(
        "--split-read-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_SPLIT_READ_RATE", parser=Rate(zero_unlimited=True),
        help="Force split's read budget, " + RATE_HELP)] = None,
    split_write_rate: Annotated[float | None, typer.Option(
        "--split-write-rate", metavar="SIZE/S", envvar="WALCTL_COMPACT_SPLIT_WRITE_RATE", parser=Rate(zero_unlimited=True),
        help="Force split's write budget (server-side copies included), " + RATE_HELP)] = None,
    shared_path: Annotated[bool, typer.Option(
        "--shared-path", envvar="WALCTL_COMPACT_SHARED_PATH",
        help="The local-directory store is mounted at the same path on every Spark executor (NFS, a "
             "shared volume): allow it with a cluster --master, which is refused otherwise.")] = False,
    namespace: NamespaceOpt = "default",
    endpoint_url: EndpointOpt = None,
    retry_for: RetryForOpt = RETRY_FOR,
    s3_connect_timeout: S3ConnectTimeoutOpt = S3_CONNECT_TIMEOUT,
    s3_read_timeout: S3ReadTimeoutOpt = S3_READ_TIMEOUT,
    metrics_file: MetricsFileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compact Stream Set Objects (AutoMQ's design) and commit the result atomically.

    Writes at most one Stream Set Object per run (plus one Stream Object per stream run of
    at least --split-size), so a second run over a compacted store has nothing to do: a
    store with nothing to compact exits 0 at once, without starting Spark. A second
    compact that starts while one runs fences the first (its commit is refused).
    Needs pyspark (pip install 'walctl[spark]') and Java: without them it exits 4 and
    writes nothing (--dry-run works without either). SIGTERM or SIGINT before the commit
    cancels the Spark job, aborts its uploads, stops the JVM, commits nothing and exits 143
    (SIGTERM) or 130 (SIGINT). At or after the commit, the commit is finished and stands: the
    SO level (--level all) does not start, or stops before its own commit, and the run exits
    143/130 with one line saying what is committed. With --json every run prints one
    document, an interrupted one with "error" in it; a signal that comes while the finished
    result is printed changes nothing (exit 0). A Spark job still running after
    --task-timeout (lost workers, none with free cores and memory, a hung task) is
    cancelled and rolled back the same way, and compact exits 6 with one line saying why.
    """
    from walctl.errors import UsageError

    if older_than is not None and not force_split:
        raise UsageError("--older-than needs --force-split", hint="add --force-split")
    if retention_start and (force_split or level is Level.so):
        raise UsageError("--retention-start applies to SSO compaction only, not to --level so or --force-split",
                         hint="run it with --level sso (or all), or drop --retention-start")
    metrics_options = dict(enabled=not dry_run, on_warning=warn, labels={"store": store} if metrics_file else None)
    so_options = dict(target_size=so_target_size, read_rate=so_read_rate, write_rate=so_write_rate)
    if force_split or level is Level.so:
        split_options = dict(older_than=older_than, max_objects=max_objects, read_rate=split_read_rate,
                             write_rate=split_write_rate) if force_split else None
        out = _copy_level(store, endpoint_url, namespace, dry_run, metrics_file, metrics_options, split_options,
                          so_options, s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
        _print_result(out, json_out, _render_copy)
        return
    sso_options = dict(master=master, memory_limit=memory_limit, read_rate_bps=read_rate, write_rate_bps=write_rate,
                       tasks=tasks, interval=interval, split_size=split_size, max_objects=max_objects,
                       retention_start=retention_start, shared_path=shared_path, task_timeout=task_timeout,
                       progress=not json_out)
    out = _sso_level(store, endpoint_url, namespace, dry_run, metrics_file, metrics_options, sso_options,
                     so_options if level is Level.all else None,
                     s3=s3_settings(retry_for, s3_connect_timeout, s3_read_timeout))
    _print_result(out, json_out, _render_all)


def _render_all(out: dict) -> None:
    _render(out)
    if "so" in out:
        _render_copy(out["so"])


def _retention(items: list[str] | None) -> dict[int, int]:
    """--retention-start STREAM:OFFSET (checked by walctl.options.stream_offset), as {stream: offset}."""
    return {int(stream): int(offset) for stream, _, offset in (item.partition(":") for item in items or [])}


def _so_compaction(st: Store, namespace: str, dry_run: bool, so_options: dict, on_result=None):
    from walctl.compaction.so import compact_stream_objects

    return compact_stream_objects(st, target_size=so_options["target_size"], dry_run=dry_run,
                                  namespace=namespace, read_rate_bps=so_options["read_rate"],
                                  write_rate_bps=so_options["write_rate"], on_result=on_result)


def _open_walctl_store(store: str, endpoint_url, s3=None):
    """The store, which must hold a manifest: a directory that is not a walctl store (a wrong
    --store) is not found (exit 4), as for ls and gc, not a store with nothing to compact."""
    from walctl.store import manifest as mf
    from walctl.store import open_store

    st = open_store(store, endpoint_url=endpoint_url, create=False, s3=s3)
    if not mf.manifest_numbers(st):
        mf.load_latest(st, required=True)  # raises NotFoundError "no manifest: not a walctl store, ..."
    return st


def _copy_level(store: str, endpoint_url, namespace: str, dry_run: bool, metrics_file, metrics_options: dict,
                split_options: dict | None, so_options: dict, *, s3=None) -> dict:
    """Force split (``split_options``) or SO compaction: server-side copies, no Spark."""
    from walctl.metrics import MetricsRun

    with MetricsRun(metrics_file, "compact", **metrics_options) as metrics:
        st = _open_walctl_store(store, endpoint_url, s3)
        box: list = []
        try:
            if split_options is not None:
                from walctl.compaction.split import force_split as run_split

                result = run_split(st, older_than_s=split_options["older_than"],
                                   max_objects=split_options["max_objects"], dry_run=dry_run, namespace=namespace,
                                   read_rate_bps=split_options["read_rate"],
                                   write_rate_bps=split_options["write_rate"], on_result=box.append)
            else:
                result = _so_compaction(st, namespace, dry_run, so_options, on_result=box.append)
        except KeyboardInterrupt as exc:
            summary = {"store": store, **box[0].to_json(), "interrupted": True} if box else {"store": store}
            if box and box[0].commit_number is not None:  # the commit was finished first: it stands
                name = "force split" if split_options is not None else "SO compaction"
                raise InterruptedAfterCommit(exc, f"after the commit: the {name} is committed (commit "
                                             f"{box[0].commit_number})", {**summary, "committed": True}) from None
            exc.summary = {**summary, "committed": False} if box else summary
            raise
        metrics.summary = out = {"store": store, **result.to_json()}
        metrics.record(bytes=out["through_written_bytes"], read_bytes=out["through_read_bytes"],
                       objects=0 if result.idle else out["objects_out"],
                       input_objects=0 if result.idle else out["objects_in"], requests=st.stats.requests)
    return out


def _sso_level(store: str, endpoint_url, namespace: str, dry_run: bool, metrics_file, metrics_options: dict,
               sso: dict, so_options: dict | None, *, s3=None) -> dict:
    """SSO compaction with Spark, then (``so_options``: --level all) SO compaction."""
    from walctl.spark.cluster import store_for_executors
    from walctl.metrics import MetricsRun
    from walctl.spark.compact import compact
    from walctl.spark.job import JobTimeout

    executor_store = store_for_executors(store, sso["master"], shared_path=sso["shared_path"])
    # SIGTERM and SIGINT raise walctl.cli's Interrupted (a KeyboardInterrupt) here, through
    # the walctl.cli boundary: the job is cancelled and rolled back on the way out, then one line, exit 143/130.
    started: list = []
    interrupted: BaseException | None = None
    say = Progress(started) if sso["progress"] and not dry_run else None
    with MetricsRun(metrics_file, "compact", **metrics_options) as metrics:
        retention = _retention(sso["retention_start"])
        st = _open_walctl_store(store, endpoint_url, s3)
        try:
            result = compact(st, executor_store, endpoint_url=endpoint_url, master=sso["master"],
                             memory_limit=sso["memory_limit"], read_rate_bps=sso["read_rate_bps"],
                             write_rate_bps=sso["write_rate_bps"], tasks=sso["tasks"],
                             interval_s=sso["interval"] or None, split_size=sso["split_size"],
                             max_objects=sso["max_objects"], retention=retention,
                             dry_run=dry_run, namespace=namespace, on_result=say.planned if say else started.append,
                             spark_log_level="WARN" if _debug() else "OFF", task_timeout_s=sso["task_timeout"],
                             on_warning=warn, notify=say.line if say else None,
                             progress=say.iteration if say else None)
        except JobTimeout as exc:
            exc.summary = _rolled_back_summary(store, started[0] if started else None)
            raise
        except KeyboardInterrupt as exc:
            if not (started and started[0].commit_number is not None):
                exc.summary = _interrupted_summary(store, started[0] if started else None)
                raise
            # The signal came during the commit, which was finished first: it stands. The SO level
            # is not started; the run ends as interrupted, saying what is committed.
            result, interrupted = started[0], exc
        metrics.summary = out = {"store": store, **result.to_json()}  # with the budgets and expected duration
        so_result: list = []
        if so_options is not None and interrupted is None:  # then merge the Stream Objects, the SSO run's included
            try:
                so = _so_compaction(st, namespace, dry_run, so_options, on_result=so_result.append).to_json()
            except KeyboardInterrupt as exc:
                interrupted = exc
            else:
                out["so"] = so
                out["idle"] = out["idle"] and so["idle"]
        _record_metrics(metrics, out, result, st)
        if interrupted is not None:
            raise _after_commit(interrupted, out, so_options, so_result)
    return out


class Progress:
    """What compact says on stderr as it goes (not with --json): the plan as Spark starts (its
    prerequisites checked: a missing one is the run's only line), Spark's start, then the
    iterations as they end (at most one line a second, and the last)."""

    PREFIX = "compact: "

    def __init__(self, started: list):
        import time

        self.started, self.began, self.last = started, time.monotonic(), 0.0
        self.told_plan = False

    def line(self, text: str) -> None:
        if not self.told_plan and self.started:
            self.told_plan = True
            self._plan(self.started[0])
        typer.echo(self.PREFIX + text, err=True)

    def planned(self, result) -> None:
        self.started.append(result)

    def _plan(self, result) -> None:
        from walctl.sizes import format_size

        plan = result.plan
        rate = f"; read budget {format_size(int(result.read_rate_bps))}/s" if result.read_rate_bps else ""
        expected = f", expected {result.expected_seconds} s" if result.expected_seconds is not None else ""
        size = format_size(sum(o.size for o in plan.inputs))
        typer.echo(f"{self.PREFIX}plan: {_count(len(plan.inputs), 'object')} in ({size}), {len(plan.outputs)} out, "
                   f"{_count(len(plan.iterations), 'iteration')}, {_count(plan.gets, 'GET')}, "
                   f"{_count(plan.puts, 'PUT')}{rate}{expected}", err=True)

    def iteration(self, done: int, total: int, written: int) -> None:
        import time

        from walctl.sizes import format_size

        now = time.monotonic()
        if done < total and now - self.last < 1.0:
            return
        self.last = now
        self.line(f"iteration {done} of {total} done ({format_size(written)} written, {now - self.began:.1f} s)")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _after_commit(interrupt: BaseException, out: dict, so_options: dict | None, so_result: list) -> WalctlError:
    """The error of a run interrupted at or after its SSO commit, saying what is committed and what not."""
    what = f"after the commit: the compaction is committed (commit {out['commit_number']})"
    so_done = so_result[0].commit_number if so_result else None
    if so_options is not None:
        if not so_result:
            what += "; the SO level did not start"
        elif so_done is not None:
            what += f", and the SO level too (commit {so_done})"
        else:
            what += "; the SO level was stopped before its commit (its objects are left for gc)"
    summary = {**out, "interrupted": True, "committed": True}
    if so_result and "so" not in summary:
        summary["so"] = so_result[0].to_json()
    return InterruptedAfterCommit(interrupt, what, summary)


def _record_metrics(metrics, out: dict, result, st: Store) -> None:
    # The tasks' requests happen in executors, with store clients of their own.
    so_out = out.get("so") or {}
    so_done = not so_out.get("idle", True)  # the SO level's share (its requests are in st.stats)
    metrics.record(bytes=out["bytes_written"] + so_out.get("through_written_bytes", 0),
                   read_bytes=out["bytes_read"] + so_out.get("through_read_bytes", 0),
                   objects=len(result.made) + (so_out["objects_out"] if so_done else 0),
                   input_objects=(0 if result.idle else out["objects_in"])
                   + (so_out["objects_in"] if so_done else 0),
                   requests=st.stats.requests + sum(t["gets"] + t["puts"] for t in result.tasks))
    # (st.stats already counts the driver's multipart creates and completes, and the SO level's requests)


def _render_copy(out: dict) -> None:
    """SO compaction and force split: the plan or what was done, with the budget."""
    from rich.table import Table

    from walctl.sizes import format_size

    console = stdout_console()
    name = "SO compaction" if out["level"] == "so" else "force split"
    if out["idle"]:
        console.print(f"{name}: {out['reason']}", markup=False)
        return
    budget = ", ".join(f"{what} {format_size(int(r))}/s" for what, r in
                       (("read", out["read_rate_bytes_per_s"]), ("write", out["write_rate_bytes_per_s"])) if r)
    expected = f", expected {out['expected_seconds']} s" if out["expected_seconds"] is not None else ""
    console.print(f"{name} {'plan' if out['dry_run'] else 'done'}: {out['objects_in']} objects in, "
                  f"{out['objects_out']} out, {format_size(out['data_bytes'])} of data; budget: "
                  f"{budget or 'unlimited'}{expected}", markup=False)
    rows = out["groups"] if out["level"] == "so" else out["outputs"]
    table = Table(title="outputs", title_justify="left")
    for col in ("stream", "offsets", "inputs", "size"):
        table.add_column(col)
    for g in rows:
        inputs = ", ".join(map(str, g["input_ids"])) if "input_ids" in g else f"SSO {g['sso_id']}"
        table.add_row(str(g["stream_id"]), f"[{g['start']}, {g['end']})", inputs, format_size(g["size_bytes"]))  # not a manifest entry
    console.print(table)
    if not out["dry_run"]:
        console.print(f"commit {out['commit_number']}: copied {format_size(out['bytes_copied'])} in the store, "
                      f"{format_size(out['through_read_bytes'] + out['crc_read_bytes'])} read and "
                      f"{format_size(out['through_written_bytes'])} written through walctl in {out['seconds']} s",
                      markup=False)


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
    budget = ", ".join(f"{what} {format_size(int(r))}/s" for what, r in
                       (("read", out["read_rate_bytes_per_s"]), ("write", out["write_rate_bytes_per_s"])) if r)
    if budget:
        console.print(f"budget: {budget}, expected {out['expected_seconds']} s ({plural(plan['tasks'], 'task')} at once, "
                      "each with its share)", markup=False)
    inputs = Table(title="inputs", title_justify="left")
    for col in ("id", "key", "size"):
        inputs.add_column(col)
    for o in plan["inputs"]:
        inputs.add_row(str(o["id"]), o["key"], format_size(o["size"]))  # not a manifest entry
    console.print(inputs)
    outs = Table(title="outputs", title_justify="left")
    for col in ("key" if not out["dry_run"] else "output", "kind", "size", "parts", "streams"):
        outs.add_column(col)
    keys = [o["key"] for o in out["objects"]]  # not a manifest entry
    for n, o in enumerate(plan["outputs"]):
        outs.add_row(keys[n] if n < len(keys) else str(n), o["kind"], format_size(o["size_bytes"]), str(o["parts"]),  # not a manifest entry
                     ", ".join(f"stream {s['stream_id']} [{s['start']}, {s['end']})" for s in o["streams"]))
    console.print(outs)
    if not out["dry_run"]:
        console.print(f"commit {out['commit_number']} (compactor epoch {out['compactor_epoch']}); read "  # not a manifest entry
                      f"{format_size(out['bytes_read'])}, wrote {format_size(out['bytes_written'])} in "
                      f"{out['seconds']} s", markup=False)
