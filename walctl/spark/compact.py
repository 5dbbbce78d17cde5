"""compact: SSO compaction (FORMATS.md 4) on the driver: plan, fence, run the Spark job, commit.

1. Read the manifest and the index of every input SSO (footers and indexes only).
2. Plan (walctl.compaction.planner): drop deleted and expired ranges, SOs for big or gapped
   streams, the rest into SSOs, iterations under the memory limit.
3. One commit bumps ``compactor_epoch`` (fencing any older compactor) and prepares the
   output ids.
4. The Spark job writes the outputs: one task per iteration, ``tasks`` of them at once
   (each with its share of the memory limit and of the read and write budgets), an output
   that spans iterations written as one multipart object (walctl.spark.job).
5. One commit replaces the inputs with the outputs, refused unless the epoch is still
   ours, every input is still live, and the outputs cover every kept input range
   exactly once. Replaced inputs go to ``deleting``; gc removes them after the grace.
A kill anywhere before 5 commits nothing: only prepared ids remain, for gc. SIGTERM or
SIGINT during 4 cancels the job, aborts open multipart uploads, deletes finished outputs
and stops the JVM; during 5 it is held until the commit is done or refused. A job still
running after its timeout (lost executors, no worker with free resources, a hung task) is
rolled back the same way and fails (JobTimeout, exit 6).

Prerequisites (pyspark, Java) are checked before anything is written: without them
compact exits 4 (MissingPrerequisite) and ``dry_run`` still plans (the planner is pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import time
from dataclasses import dataclass, field

from walctl.spark.cluster import requested_master
from walctl.compaction.common import check_made, commit_replacement, fence_and_prepare
from walctl.compaction.coverage import check_coverage
from walctl.compaction.planner import plan_compaction
from walctl.defaults import DEFAULT_MEMORY_LIMIT, DEFAULT_SPLIT_SIZE
from walctl.device.signals import signals_deferred
from walctl.errors import NotFoundError, UsageError
from walctl.failpoints import failpoint
from walctl.spark import session as session_mod
from walctl.store import manifest as mf

if TYPE_CHECKING:
    from walctl.store.base import Store

# The derived read rate spreads a big compaction over its interval; it never goes below this,
# so a small compaction does not crawl for the whole interval.
MIN_DERIVED_READ_RATE_BPS = 32 << 20
# The Spark job's timeout when none is given: long enough for any healthy run (twice the planned
# bytes at the budgets, or at ASSUMED_RATE_BPS when unlimited), so it only cuts a job that stands
# still: lost executors (a standalone master then waits for a worker for ever), a hung task.
DEFAULT_TASK_TIMEOUT_S = 600.0
ASSUMED_RATE_BPS = MIN_DERIVED_READ_RATE_BPS


@dataclass
class CompactResult:
    plan: object
    idle: bool
    dry_run: bool
    objects_in: int = 0
    objects_out: int = 0
    made: list[dict] = field(default_factory=list)
    commit_number: int | None = None
    epoch: int | None = None
    index_gets: int = 0
    seconds: float = 0.0
    read_rate_bps: float | None = None
    tasks: list[dict] = field(default_factory=list)  # per iteration: what its task did
    driver_puts: int = 0  # multipart creates and completes (the driver's)
    spark_master: str | None = None
    write_rate_bps: float | None = None
    tasks_at_once: int = 0
    task_timeout_s: float | None = None  # the Spark job's timeout (None: no limit)

    @property
    def expected_seconds(self) -> float | None:
        """The planned bytes under the read and write budgets (the slower), None if unlimited."""
        from walctl.compaction.common import expected_seconds

        if self.plan is None or self.plan.idle:
            return None
        return expected_seconds(self.plan.bytes_read, self.plan.bytes_written, self.read_rate_bps,
                                self.write_rate_bps)

    def to_json(self) -> dict:
        plan = plan_json(self.plan) if self.plan is not None else None
        gets = sum(t["gets"] for t in self.tasks) + self.index_gets
        return {
            "idle": self.idle, "dry_run": self.dry_run, "objects_in": self.objects_in,
            "objects_out": self.objects_out,
            "bytes_read": sum(t["bytes_read"] for t in self.tasks),
            "bytes_written": sum(t["bytes_written"] for t in self.tasks),
            "gets": gets, "data_gets": sum(t["gets"] for t in self.tasks), "index_gets": self.index_gets,
            "puts": sum(t["puts"] for t in self.tasks) + self.driver_puts,
            "spark_master": self.spark_master,
            "iterations": len(self.plan.iterations) if self.plan is not None else 0,
            "commit_number": self.commit_number, "compactor_epoch": self.epoch,
            "read_rate_limit_mib_per_s": round(self.read_rate_bps / (1 << 20), 3) if self.read_rate_bps else None,
            "read_rate_bytes_per_s": self.read_rate_bps, "write_rate_bytes_per_s": self.write_rate_bps,
            "expected_seconds": self.expected_seconds,
            "tasks": self.plan.tasks if self.plan is not None else 0, "tasks_at_once": self.tasks_at_once,
            "task_timeout_seconds": self.task_timeout_s,
            "seconds": round(self.seconds, 3),
            "objects": [{"key": m["key"], "kind": m["kind"], "size_bytes": m["size"], "iteration": m["iteration"],
                         "parts": m["parts"], "streams": m["ranges"]} for m in self.made],  # not a manifest entry
            "plan": plan,
        }


def plan_json(plan) -> dict:
    """The plan in ``--json`` (docs/CLI.md, compact): bounded by the inputs and outputs, not by the
    iterations times the ranges. Outputs carry their stream spans (manifest shape) and a count of
    source ranges; each iteration carries counts and its outputs' indexes, never the outputs' or
    reads' lists again; dropped ranges are summed per source object, stream and reason.
    (compaction.plan's own to_json, with every list, is the planner's, for its tests.)"""
    dropped: dict[tuple, dict] = {}
    for d in plan.dropped:
        r = d.range
        got = dropped.get((r.object_id, r.stream_id, d.reason))
        if got is None:
            dropped[(r.object_id, r.stream_id, d.reason)] = {
                "object_id": r.object_id, "key": r.key, "stream_id": r.stream_id, "start_offset": r.start_offset,
                "end_offset": r.end_offset, "size_bytes": r.size, "range_count": 1, "reason": d.reason}
        else:
            got["start_offset"] = min(got["start_offset"], r.start_offset)
            got["end_offset"] = max(got["end_offset"], r.end_offset)
            got["size_bytes"] += r.size
            got["range_count"] += 1
    return {
        **plan.summary_json(),
        "dropped": list(dropped.values()),
        # (each oversized range is an iteration of its own: as many as those iterations)
        "oversized": [r.to_json() for r in plan.oversized],
        "oversized_count": len(plan.oversized), "oversized_bytes": sum(r.size for r in plan.oversized),
        "outputs": [{"kind": o.kind, "data_bytes": o.data_bytes, "size_bytes": o.size_bytes, "puts": o.puts,
                     "parts": len(o.pieces), "range_count": len(o.ranges),
                     "streams": [{"stream_id": s, "start": a, "end": b, "bytes": n} for s, a, b, n in o.streams]}
                    for o in plan.outputs],
        "iterations": [{"index": it.index, "data_bytes": it.data_bytes, "gets": len(it.reads),
                        "read_bytes": sum(r.size for r in it.reads), "piece_count": len(it.pieces),
                        "range_count": sum(len(p.ranges) for p in it.pieces),
                        "outputs": sorted({p.output for p in it.pieces})}
                       for it in plan.iterations],
    }


def derived_read_rate(plan, read_rate_bps: float | None, interval_s: float | None) -> float | None:
    """The read budget: the one given; else the planned bytes in 80% of ``interval_s`` (at least
    MIN_DERIVED_READ_RATE_BPS); else None (unlimited)."""
    if read_rate_bps:
        return read_rate_bps
    if interval_s and not plan.idle:
        return max(plan.bytes_read / (0.8 * interval_s), MIN_DERIVED_READ_RATE_BPS)
    return None


def task_timeout(plan, given_s: float | None, read_rate_bps: float | None,
                 write_rate_bps: float | None) -> float | None:
    """The Spark job's timeout: ``given_s`` (0: none); else DEFAULT_TASK_TIMEOUT_S, or twice the
    plan's expected duration at its budgets (reads at ASSUMED_RATE_BPS when unlimited) if longer."""
    from walctl.compaction.common import expected_seconds

    if given_s is not None:
        return given_s or None
    if plan.idle:
        return DEFAULT_TASK_TIMEOUT_S
    expected = expected_seconds(plan.bytes_read, plan.bytes_written, read_rate_bps or ASSUMED_RATE_BPS,
                                write_rate_bps)
    return max(DEFAULT_TASK_TIMEOUT_S, 2 * expected)


INDEX_READ_THREADS = 8  # footers and indexes read at once (small ranged reads: latency-bound)


def read_indexes(store: Store, objects: list[mf.LiveObject]) -> tuple[dict, int]:
    """Footer + index of each object (one or two ranged reads each, a few objects at once);
    returns (indexes, gets). The first failure is raised, as reading them one by one would."""
    from concurrent.futures import ThreadPoolExecutor

    from walctl.store.inspect import inspect

    indexes = {}
    before = store.stats.snapshot().get("get", 0)  # (each inspect's own count would include the others')
    with ThreadPoolExecutor(max_workers=max(1, min(INDEX_READ_THREADS, len(objects)))) as pool:
        # The manifest names them: a bad footer or another size is damage naming the object (exit 3)
        for o, result in zip(objects, pool.map(
                lambda o: inspect(store, o.key, known=True, expected_size=o.size), objects)):
            indexes[o.id] = result.entries
    return indexes, store.stats.snapshot().get("get", 0) - before


def check_retention(doc: mf.Manifest, retention: dict[int, int]) -> None:
    """--retention-start must name a known stream and an offset within it (never past its end).

    Raises:
        NotFoundError: no such stream in the store.
        UsageError: the offset is past the stream's end offset.
    """
    for sid, offset in sorted(retention.items()):
        known = doc.stream(sid)
        if known is None:
            raise NotFoundError(f"--retention-start {sid}={offset}: no stream {sid} in the store",
                                hint="see the streams with walctl ls")
        if offset > known.end:
            raise UsageError(f"--retention-start {sid}={offset} is past the end of stream {sid} ({known.end})",
                             hint=f"give an offset <= {known.end}; {known.end} drops all its data")


def min_part_for(store: Store) -> int:
    """Smallest part of a multipart object the store takes (S3: 5 MiB but the last part)."""
    return store.capabilities.min_part_bytes


def task_store_url(store: Store, store_url: str) -> str:
    """What executors open: a local store by its absolute path (they do not share our cwd)."""
    return store.capabilities.executor_url or store_url


def compact(store: Store, store_url: str, *, endpoint_url: str | None = None, master: str | None = None,
            memory_limit: int = DEFAULT_MEMORY_LIMIT, split_size: int = DEFAULT_SPLIT_SIZE, max_objects: int = 1000,
            retention: dict[int, int] | None = None, dry_run: bool = False, namespace: str = mf.DEFAULT_NAMESPACE,
            spark=None, progress=None, read_rate_bps: float | None = None, write_rate_bps: float | None = None,
            interval_s: float | None = None, on_result=None, spark_log_level: str = "OFF",
            tasks: int | None = None, task_timeout_s: float | None = None, on_warning=None,
            notify=None) -> CompactResult:
    """Plan, fence, run and commit one compaction (see the module doc).

    ``master``: the Spark master; None takes spark-submit's (or PYSPARK_SUBMIT_ARGS') and
    else local[*]. ``spark``: a session to use (never stopped here). ``spark_log_level``: Spark's
    own log level (OFF but for --debug).
    Read throttling: ``read_rate_bps`` if given; else, with ``interval_s`` (how often compaction
    runs), the rate that reads the planned bytes in 80% of the interval, as AutoMQ derives its
    own, but at least 32 MiB/s; else unlimited. Write throttling: ``write_rate_bps`` (bytes
    written into the store per second), else unlimited. Both budgets are shared by the tasks
    that run at once. ``tasks``: iterations run at once, each holding ``memory_limit / tasks``
    (None: ``job.default_tasks``, 1 on a local master, 2 on a cluster). ``on_result`` gets the result object as soon as
    it exists, so an interrupted run can still report what it had done. ``task_timeout_s``: the
    most the Spark job may take from its first executor's registration, or from its start if
    none registers (0: no limit; None: derived, ``task_timeout``). ``on_warning(message)``: told of a job that waits for executors.
    ``notify(message)``: told of the stages (Spark starting, started); ``progress(done, total,
    bytes_written)``: told as iterations end (as they end on a local master, at the job's end elsewhere).

    Raises:
        MissingPrerequisite: no pyspark or no Java (before anything is written).
        NotFoundError, UsageError: a bad --retention-start.
        RefusedError: fenced by a newer compactor, or an input went away meanwhile.
        CorruptionError, IOFailure, NotFoundError: from the store or the executors (classified).
        JobTimeout: an IOFailure, the job did not finish within its timeout (rolled back).
    """
    started = time.monotonic()
    result = _planned(store, master=master, memory_limit=memory_limit, split_size=split_size,
                      max_objects=max_objects, retention=dict(retention or {}), dry_run=dry_run, spark=spark,
                      tasks=tasks, write_rate_bps=write_rate_bps)
    plan = result.plan
    result.read_rate_bps = derived_read_rate(plan, read_rate_bps, interval_s)
    result.task_timeout_s = task_timeout(plan, task_timeout_s, result.read_rate_bps, write_rate_bps)
    if on_result is not None:
        on_result(result)
    if plan.idle or dry_run:
        result.seconds = time.monotonic() - started
        return result
    check_coverage(plan)
    if spark is None:
        session_mod.check_pyspark()  # before the first write: a missing prerequisite changes nothing
        session_mod.check_java()
    with signals_deferred(mask=False):
        result.epoch, prepared = fence_and_prepare(store, len(plan.outputs), namespace, "compact")
    failpoint("compact-after-prepare")
    made = _run_job(store, store_url, result, [p.key for p in prepared], spark=spark, master=master,
                    spark_log_level=spark_log_level, endpoint_url=endpoint_url, progress=progress,
                    write_rate_bps=write_rate_bps, on_warning=on_warning, notify=notify)
    failpoint("compact-before-commit")
    check_made(plan, made)

    def set_retention(m: mf.Manifest) -> None:
        for sid, start_offset in (retention or {}).items():
            m.retain(sid, start_offset)

    with signals_deferred(mask=False):  # an interrupt waits for the commit, then finds the result complete
        result.commit_number = commit_replacement(
            store, epoch=result.epoch, inputs=list(plan.inputs), prepared=prepared, made=made,
            command="compact", sso_order_id=min(o.order_id for o in plan.inputs), also=set_retention)
        result.made = made
        result.seconds = time.monotonic() - started
        failpoint("compact-after-commit")  # (tests: a SIGTERM held here is raised as the block ends)
    return result


def _planned(store: Store, *, master, memory_limit: int, split_size: int, max_objects: int,
             retention: dict[int, int], dry_run: bool, spark, tasks: int | None,
             write_rate_bps: float | None) -> CompactResult:
    """The manifest read, the inputs' indexes read, the plan made: the result so far."""
    doc = mf.load_latest(store)
    check_retention(doc, retention)
    candidates = sorted(doc.live("SSO"), key=lambda o: (o.order_id, o.id))
    candidates = candidates[:max_objects]
    indexes, index_gets = read_indexes(store, candidates)
    if tasks is None:
        from walctl.spark.job import default_tasks

        tasks = default_tasks(spark.sparkContext.master if spark is not None else requested_master(master))
    plan = plan_compaction(doc, indexes, memory_limit=memory_limit, split_size=split_size,
                           max_objects=max_objects, retention=retention, min_part=min_part_for(store),
                           tasks=tasks)
    return CompactResult(plan, plan.idle, dry_run, objects_in=len(plan.inputs),
                         objects_out=len(plan.outputs), index_gets=index_gets, write_rate_bps=write_rate_bps)


def _run_job(store: Store, store_url: str, result: CompactResult, keys: list[str], *, spark, master,
             spark_log_level: str, endpoint_url: str | None, progress, write_rate_bps: float | None,
             on_warning, notify=None) -> list[dict]:
    """The Spark job on ``spark`` or a session of our own (stopped after); the outputs it made."""
    from walctl.spark import job

    ours = spark is None and session_mod.owns_new_session()  # never stop a session the caller already had
    session = None
    try:
        if spark is None:
            if notify is not None:
                notify(f"starting Spark ({requested_master(master)}) ...")
            begun = time.monotonic()
            with signals_deferred(mask=False):  # a JVM interrupted while starting would be orphaned (and
                # a JVM started with SIGINT/SIGTERM masked would ignore them): handlers, not the mask
                session = session_mod.spark_session(master, spark_log_level)
            if notify is not None:
                notify(f"Spark started in {time.monotonic() - begun:.1f} s ({session.sparkContext.master}); "
                       f"running {len(result.plan.iterations)} iteration{'s' if len(result.plan.iterations) != 1 else ''}")
        else:
            session = spark
        result.spark_master = session.sparkContext.master
        ran = job.run_iterations(session, result.plan, keys, store, task_store_url(store, store_url), endpoint_url,
                                 progress, result.read_rate_bps, write_rate_bps, timeout_s=result.task_timeout_s,
                                 on_warning=on_warning)
    finally:
        if ours:
            session_mod.stop_session(session)
    result.tasks = ran.iterations
    result.tasks_at_once = ran.tasks_at_once
    result.driver_puts = ran.driver_puts
    return ran.made
