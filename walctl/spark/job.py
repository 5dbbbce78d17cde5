"""The Spark job of a compaction plan, on the driver (FORMATS.md 4): one task per iteration, ``plan.tasks`` at a time.

The driver creates the multipart objects (the store's create_multipart), runs the tasks
(walctl.spark.task: each reads its iterations' GETs ahead of its writes and uploads its pieces),
combines each multipart object's piece CRCs (crc32c_combine) into the footer of its last part, and
completes it; on any failure or interrupt it cancels the job and rolls back. Everything a task needs
travels in its spec; the store client is created inside the task, never shipped (walctl is shipped
with walctl.spark.session.ship_walctl). Failures on executors come back as walctl's errors with
hints (walctl.spark.classify).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os
import time
from dataclasses import dataclass

from walctl.errors import IOFailure
from walctl.sizes import plural
from walctl.spark.classify import classify, task_error
# The session's prerequisites, for the callers that ask the driver module (selftest, compact).
from walctl.spark.session import (  # noqa: F401 - re-exported
    MissingPrerequisite, check_java, check_pyspark, owns_new_session, ship_walctl, spark_session, stop_session,
)
from walctl.spark.task import IterationSpec, PieceSpec, run_iterations_in_task

if TYPE_CHECKING:
    from walctl.store.base import Store


# --- the driver -------------------------------------------------------------------------------

def index_block(output) -> bytes:
    """An output's IndexBlock: one entry per source range, at its position in the output."""
    from walctl.format.index_entry import IndexEntry

    out, position = [], 0
    for r in output.ranges:
        out.append(IndexEntry(r.stream_id, r.start_offset, r.end_offset - r.start_offset, r.record_count,
                              position, r.size).encode())
        position += r.size
    return b"".join(out)


@dataclass
class JobResult:
    made: list[dict]  # per output: key, kind, size, ranges (manifest shape), iteration (its last), puts
    iterations: list[dict]  # per task: iteration, gets, puts, bytes_read, bytes_written, seconds, ...
    driver_puts: int = 0  # multipart creates and completes, made by the driver
    tasks_at_once: int = 1  # Spark tasks of the job (each ran its share of the iterations and of the budgets)


def default_tasks(master: str) -> int:
    """Tasks at once when --tasks is not given: 1 on a local master (one machine's disk and cores:
    measured no faster with 2 on a shared 2-core host, with 1.7x the GETs: bench/compact_bench.py),
    2 on a cluster, whose executors add disks and network of their own."""
    return 1 if master.strip().startswith("local") else 2


def run_iterations(spark, plan, keys: list[str], store: Store, store_url: str, endpoint_url: str | None,
                   progress=None, read_rate_bps: float | None = None,
                   write_rate_bps: float | None = None, timeout_s: float | None = None,
                   on_warning=None) -> JobResult:
    """Run the plan's iterations as one Spark job of ``plan.tasks`` tasks (fewer if there are
    fewer iterations), each running its share of the iterations (round robin) one after
    another: together they hold at most the memory limit, and each gets 1/tasks of the read
    and write budgets.

    No iteration waits for another: every piece's checksum comes back alone, and the driver
    combines them (crc32c_combine) into the data CRC of each multipart object, whose last
    part (IndexBlock + Footer) it uploads before completing it.

    ``store`` is the driver's store: it creates and completes the multipart objects. On any
    failure or interrupt, the job is cancelled, open uploads are aborted and outputs already
    written deleted (their prepared ids are left for gc), and the error is re-raised, classified.
    ``timeout_s``: the most the Spark job may take from its first executor's registration (or
    from its start, if none registers: TimeoutClock; None: no limit); past it the job is
    cancelled and rolled back the same way (JobTimeout).
    ``on_warning(message)``: told once if the job goes without any executor for a while.
    """
    sc = spark.sparkContext
    ship_walctl(sc)
    slots = max(1, min(plan.tasks, len(plan.iterations)))
    read_share = read_rate_bps / slots if read_rate_bps else None
    write_share = write_rate_bps / slots if write_rate_bps else None
    uploads: dict[int, str] = {}
    driver_puts = 0
    try:
        for n, out in enumerate(plan.outputs):
            if out.multipart:
                uploads[n] = store.create_multipart(keys[n])
                driver_puts += 1
        watch = ProgressFile(progress, len(plan.iterations), sc.master)
        specs = [IterationSpec(store_url, endpoint_url, it.index, it.reads, tuple(
                     PieceSpec(keys[p.output], p, uploads.get(p.output), plan.outputs[p.output].data_bytes,
                               None if p.output in uploads else index_block(plan.outputs[p.output]))
                     for p in it.pieces), read_share, write_share, memory_bytes=plan.task_memory,
                     progress_path=watch.path)
                 for it in plan.iterations]
        try:
            done = _collect(sc, [specs[k::slots] for k in range(slots)], timeout_s, on_warning, on_tick=watch.tick)
        finally:
            watch.close()
        failed = [r for r in done if "error" in r]
        if failed:
            raise task_error(failed[0]["error"])
        watch.finished(done)
        driver_puts += _complete_uploads(store, plan, keys, uploads, done)
    except BaseException:
        _roll_back(store, plan, keys, uploads)
        raise
    return JobResult(_made(plan, keys, done), done, driver_puts, slots)


class ProgressFile:
    """Per-iteration progress of a job on a local master (its executors share this machine): each
    task appends "<iteration> <bytes written>" to a temporary file as an iteration ends
    (task.tell_progress), the driver reads the new lines while it waits (``tick``) and tells
    ``progress(done, total, bytes_written)``. Elsewhere (or without ``progress``) no file: the
    iterations are told as the job ends (``finished``)."""

    def __init__(self, progress, total: int, master: str):
        import tempfile

        self.progress, self.total, self.done, self.bytes = progress, total, 0, 0
        self.path: str | None = None
        self._offset = 0
        if progress is not None and master.startswith("local"):
            fd, self.path = tempfile.mkstemp(prefix="walctl-compact-progress-")
            os.close(fd)

    def tick(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                text = f.read()
        except OSError:
            return
        lines = text[:text.rfind(b"\n") + 1]
        self._offset += len(lines)
        for line in lines.splitlines():
            self.done += 1
            self.bytes += int(line.split()[1])
            self.progress(self.done, self.total, self.bytes)

    def finished(self, done: list[dict]) -> None:
        """The job's end: whatever the file did not tell (all of it on a cluster)."""
        if self.progress is None:
            return
        for r in done[self.done:]:
            self.done += 1
            self.bytes += r.get("bytes_written", 0)
            self.progress(self.done, self.total, self.bytes)

    def close(self) -> None:
        if self.path is not None:
            self.tick()
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = None


def _complete_uploads(store: Store, plan, keys: list[str], uploads: dict[int, str], done: list[dict]) -> int:
    """Each multipart object's last part (IndexBlock + Footer, its data CRC combined from its
    pieces') and its complete; an upload leaves ``uploads`` once complete. Returns the PUTs made."""
    from walctl.format.crc import crc32c, crc32c_combine
    from walctl.format.footer import VERSION_WALCTL, Footer

    pieces = {(p["output"], p["part"]): p for r in done for p in r["pieces"]}
    puts = 0
    for n, upload_id in sorted(uploads.items()):
        out = plan.outputs[n]
        crc = 0
        for k in range(1, len(out.pieces) + 1):
            crc = crc32c_combine(crc, pieces[(n, k)]["crc"], pieces[(n, k)]["bytes"])
        index = index_block(out)
        footer = Footer(out.data_bytes, len(index), VERSION_WALCTL, crc32c(index), crc)
        records = [pieces[(n, k)]["record"] for k in range(1, len(out.pieces) + 1)]
        records.append(store.put_part(keys[n], upload_id, len(out.pieces) + 1,
                                      [index, footer.encode()], out.data_bytes))
        store.complete_multipart(keys[n], upload_id, records)
        del uploads[n]
        puts += 2
    return puts


def _roll_back(store: Store, plan, keys: list[str], uploads: dict[int, str]) -> None:
    """Abort the open uploads and delete every output (their prepared ids are left for gc)."""
    for n, upload_id in uploads.items():
        store.abort_multipart(keys[n], upload_id)
    for n in range(len(plan.outputs)):
        try:
            store.delete(keys[n])  # written (a whole object, or a completed multipart one) or not
        except Exception:  # noqa: BLE001 - gc removes it with its prepared id
            pass


def _made(plan, keys: list[str], done: list[dict] = ()) -> list[dict]:
    """Per output: key, kind, size, its last iteration, parts, puts and ranges (manifest shape, each
    with its crc combined from its source ranges' as the tasks summed them)."""
    last = {}
    for it in plan.iterations:
        for p in it.pieces:
            last[p.output] = it.index
    pieces = {(p["output"], p["part"]): p for r in done for p in r["pieces"]}
    made = []
    for n, out in enumerate(plan.outputs):
        crcs = stream_crcs(out, [pieces.get((n, k), {}).get("range_crcs") for k in range(1, len(out.pieces) + 1)])
        made.append({"key": keys[n], "kind": out.kind, "size": out.size_bytes, "iteration": last[n],
                     "parts": len(out.pieces), "puts": out.puts,
                     "ranges": [{"stream_id": s, "start": a, "end": b, "bytes": size, "crc": crc}
                                for (s, a, b, size), crc in zip(out.streams, crcs)]})
    return made


def stream_crcs(out, piece_crcs: list) -> list[int | None]:
    """Each of ``out.streams``' crc32c, combined from its pieces' per-source-range crcs (in part
    order); None for all when a piece did not say (its ranges then are read by whoever needs them)."""
    from walctl.format.crc import crc32c_combine

    ranges = [r for p in out.pieces for r in p.ranges]
    crcs = [c for got in piece_crcs for c in (got or ())]
    if any(got is None for got in piece_crcs) or len(crcs) != len(ranges) or tuple(ranges) != tuple(out.ranges):
        return [None] * len(out.streams)
    result, i = [], 0
    for _, _, _, size in out.streams:
        crc = got = 0
        while got < size and i < len(ranges):
            crc = crc32c_combine(crc, crcs[i], ranges[i].size)
            got += ranges[i].size
            i += 1
        result.append(crc if got == size else None)
    return result


class JobTimeout(IOFailure):
    """The Spark job did not finish within its timeout (lost executors, no worker with the
    resources it asks for, a hung task): cancelled and rolled back, nothing committed (exit 6)."""


def _collect(sc, batches: list[list[IterationSpec]], timeout_s: float | None = None, on_warning=None,
             on_tick=None) -> list[dict]:
    """Run one task per batch as one Spark job; the iterations' results, in plan order. The
    Spark call waits in a thread of its own, so an interrupt reaches this (main) thread,
    which cancels the job, instead of py4j (which would swallow it); so does ``timeout_s``
    running out (TimeoutClock; None: no limit), which raises JobTimeout saying why the job stood still.
    ``on_warning`` hears once of a job without executors (IdleWatch), long before the timeout.

    The job runs in a job group of its own, with interruptOnCancel: cancelling it stops only
    this job (a caller's session may run others) and interrupts its running tasks, whose
    Python workers Spark then kills (spark.python.task.killTimeout), so they stop writing.
    """
    import threading
    import uuid

    box: dict = {}
    group = f"walctl-compact-{uuid.uuid4().hex[:12]}"

    def work() -> None:
        try:
            # (pyspark's pinned threads: the group holds for the jobs this thread starts)
            sc.setJobGroup(group, "walctl compact", interruptOnCancel=True)
            rdd = sc.parallelize(batches, len(batches))
            box["result"] = rdd.map(run_iterations_in_task).collect()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc

    clock = TimeoutClock(sc, timeout_s)
    watch = IdleWatch(sc, group, timeout_s, on_warning) if on_warning is not None else None
    thread = threading.Thread(target=work, name="walctl-iterations", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(clock.wait_s())
            if watch is not None and thread.is_alive():
                watch.check()
            if on_tick is not None:
                on_tick()
            if thread.is_alive() and clock.expired():
                raise job_timeout(sc, group, timeout_s)  # (said before the cancel changes the picture)
    except BaseException:
        try:
            sc.cancelJobGroup(group)
        except Exception:  # noqa: BLE001 - the JVM may be gone
            pass
        thread.join(30)  # the tasks stop writing before their uploads are aborted
        raise
    if "error" in box:
        raise classify(box["error"]) from None
    return sorted((r for batch in box["result"] for r in batch), key=lambda r: r["iteration"])


class TimeoutClock:
    """The job's timeout clock: it starts with the job and starts again, once, when the job's first
    executor registers, so a cluster's slow start (a worker launching its executor's JVM) does not
    eat the tasks' time. A job no executor ever takes fails at ``timeout_s`` from its start; one
    that has executors from the start (a local master's driver, a session's earlier executors) is
    timed from its start. None or 0: no timeout."""

    def __init__(self, sc, timeout_s: float | None):
        self.sc, self.timeout_s = sc, timeout_s or None
        self.deadline = time.monotonic() + timeout_s if timeout_s else None
        self.started_again = self.deadline is None or executor_count(self.sc) > 0

    def _update(self) -> None:
        if not self.started_again and executor_count(self.sc) > 0:
            self.started_again = True
            self.deadline = time.monotonic() + self.timeout_s

    def wait_s(self) -> float:
        """How long to wait for the job before looking again (at most 0.2 s)."""
        if self.deadline is None:
            return 0.2
        return max(0.0, min(0.2, self.deadline - time.monotonic()))

    def expired(self) -> bool:
        if self.deadline is None:
            return False
        self._update()
        return time.monotonic() >= self.deadline


IDLE_WARNING_S = 30.0  # a job this long without any executor is worth a warning (or half its timeout)
IDLE_CHECK_S = 1.0  # how often IdleWatch asks the status tracker


class IdleWatch:
    """Warns once, on a cluster master, when the job has had no executor and no running task for
    IDLE_WARNING_S (or half its timeout, if shorter): what a standalone master whose workers are
    lost, or too small, does for ever, with nothing on stderr ("no output" for minutes)."""

    def __init__(self, sc, group: str, timeout_s: float | None, on_warning):
        self.sc, self.group, self.timeout_s, self.on_warning = sc, group, timeout_s, on_warning
        self.after_s = min(IDLE_WARNING_S, timeout_s / 2) if timeout_s else IDLE_WARNING_S
        self.idle_since: float | None = None
        self.next_check = 0.0
        self.done = sc.master.startswith("local")  # (the driver is the executor there)

    def check(self) -> None:
        now = time.monotonic()
        if self.done or now < self.next_check:
            return
        self.next_check = now + IDLE_CHECK_S
        state = job_state(self.sc, self.group)
        if state["executors"] or state["running"]:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        elif now - self.idle_since >= self.after_s:
            self.done = True
            limit = (f"it is cancelled at --task-timeout ({duration_text(self.timeout_s)})" if self.timeout_s
                     else "--task-timeout 0: it waits for one")
            self.on_warning(f"the Spark job has had no executor for {duration_text(round(now - self.idle_since))} "
                            f"({self.sc.master}): lost workers, or none with free cores and memory? {limit}")


def job_timeout(sc, group: str, timeout_s: float) -> JobTimeout:
    """The error for a job of ``group`` still running after ``timeout_s``, saying why as far as
    Spark's status tracker tells: no executor at all (lost workers, or none with the cores and
    memory asked for: a standalone master then waits for one for ever), executors but no task
    running, or tasks still running (a hung task, or a compaction longer than the timeout)."""
    state = job_state(sc, group)
    executors, running, total = state["executors"], state["running"], state["tasks"]
    if running:
        # (an executor that stops answering, not killed, counts as running until spark.network.timeout)
        why = (f"{running} of its {plural(total, 'task')} still running on {plural(executors, 'executor')} (a hung task, an "
               "executor that stopped answering, or a compaction longer than the timeout?)")
        hint = ("look at the executors' logs for the task that hangs; if the compaction is only long, raise "
                "--task-timeout (or its budgets); nothing was committed")
    elif executors == 0:
        why = "no executor ran it (lost workers, or none with the cores and memory it asks for?)"
        hint = ("check that the master has live workers with free cores and memory: its web UI, or "
                "'requires more resource than any of Workers could have' in its log; nothing was committed, "
                "rerun then")
    else:
        why = f"none of its {plural(total, 'task')} is running on the {plural(executors, 'executor')} (lost executors?)"
        hint = "check the executors' logs and the master's; nothing was committed, rerun then"
    return JobTimeout(f"the Spark job did not finish within {duration_text(timeout_s)} and was cancelled: {why}",
                      where=sc.master, hint=hint)


def duration_text(seconds: float) -> str:
    """90 -> 90s, 120 -> 2m, 3600 -> 1h, 1.5 -> 1.5s: as --task-timeout takes it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def job_state(sc, group: str) -> dict:
    """Executors (the driver's own not counted, but on a local master, where it is the executor),
    and the running and all tasks of the group's stages; zeros where Spark does not say."""
    state = {"executors": executor_count(sc), "running": 0, "tasks": 0}
    try:
        tracker = sc.statusTracker()
        for job_id in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job_id)
            for stage_id in info.stageIds if info is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    state["running"] += stage.numActiveTasks
                    state["tasks"] += stage.numTasks
    except Exception:  # noqa: BLE001 - only the error's wording depends on it
        pass
    return state


def executor_count(sc) -> int:
    """The executors registered with the driver (its own not counted, but on a local master, where
    it is the executor); 0 where Spark does not say."""
    try:
        infos = sc._jsc.sc().statusTracker().getExecutorInfos()  # (pyspark's tracker has no executors)
    except Exception:  # noqa: BLE001 - the JVM may be gone
        return 0
    return len(infos) if sc.master.startswith("local") else max(0, len(infos) - 1)
