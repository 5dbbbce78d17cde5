"""The Spark side of compaction: one task per output object, reading its source blocks with
ranged GETs, assembling the object (blocks copied verbatim) and uploading it.

Everything a task needs travels in its spec (plain, picklable data); the store client
(boto3 for S3) is created inside the task, never shipped. On a cluster the executors
need the walctl package: ``run_iterations`` ships it as a zip with ``addPyFile``, so
plain ``spark-submit --master yarn|k8s://...|spark://...`` works as long as the
executors have walctl's dependencies (crc32c, boto3) installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

READ_THREADS = 8  # ranged GETs in flight per task


@dataclass(frozen=True)
class TaskSpec:
    store_url: str
    endpoint_url: str | None
    key: str  # where the output object goes (its prepared id's key)
    output: object  # walctl.spark.plan.OutputObject
    read_rate_bps: float | None = None  # this task's share of --read-rate (bytes/s), None = unlimited


class ByteRate:
    """Paces reads to ``rate`` bytes/s on average: after each read, wait until the bytes read so far
    could have been read at that rate (throttle by bytes, not by requests)."""

    def __init__(self, rate_bps: float | None):
        import threading

        self.rate = rate_bps
        self.start = time.monotonic()
        self.done = 0
        self.lock = threading.Lock()

    def paid(self, nbytes: int) -> None:
        if not self.rate:
            return
        with self.lock:
            self.done += nbytes
            due = self.start + self.done / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def build_and_upload(spec: TaskSpec) -> dict:
    """Runs on an executor: read the source ranges, assemble, upload. Returns what it did."""
    from walctl.format.object import IndexEntry, assemble_object
    from walctl.store import open_store

    started = time.monotonic()
    store = open_store(spec.store_url, endpoint_url=spec.endpoint_url)
    blocks: dict[tuple[int, int], bytes] = {}

    read_started = time.time()  # wall clock: comparable across the tasks' processes (bench figures)
    limiter = ByteRate(spec.read_rate_bps)

    def fetch(read):
        data = store.read_range(read.key, read.start, read.end)
        limiter.paid(len(data))
        if len(data) != read.end - read.start:
            from walctl.errors import CorruptionError

            raise CorruptionError(f"source object shorter than its index says ({len(data)} of "
                                  f"{read.end - read.start} bytes at {read.start})", where=read.key)
        return read, data

    # GETs are latency-bound (S3: tens of ms each): a few in flight per task, GIL released in I/O.
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        for read, data in pool.map(fetch, spec.output.reads):
            for r in read.ranges:
                blocks[(r.object_id, r.position)] = data[r.position - read.start:r.position - read.start + r.size]
    parts = [(IndexEntry(r.stream_id, r.start_offset, r.end_offset - r.start_offset, r.record_count,
                         r.position, r.size), blocks[(r.object_id, r.position)]) for r in spec.output.ranges]
    read_seconds = time.monotonic() - limiter.start
    built = assemble_object(parts)
    store.put_large(spec.key, built.data)
    stats = store.stats.snapshot()
    return {"key": spec.key, "kind": spec.output.kind, "size": len(built.data), "gets": stats["get"], "puts": stats["put"],
            "bytes_read": stats["bytes_read"], "bytes_written": stats["bytes_written"],
            "seconds": time.monotonic() - started, "read_seconds": read_seconds, "read_started": read_started,
            "ranges": [{"stream_id": sid, "start": rg.start_offset, "end": rg.end_offset, "bytes": rg.size_bytes}
                       for sid, rg in sorted(built.ranges.items())]}


def package_zip(directory: str) -> str:
    """Zip the walctl package (its .py files) for addPyFile, so executors can import it."""
    import walctl

    root = os.path.dirname(os.path.abspath(walctl.__file__))
    path = os.path.join(directory, "walctl.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    zf.write(full, os.path.join("walctl", os.path.relpath(full, root)))
    return path


def spark_session(master: str):
    """A SparkSession for ``master``; executors in local mode use this very interpreter."""
    if master.startswith("local"):
        # local[*] workers are children of this machine: give them our interpreter (and so
        # our installed walctl and dependencies) rather than whatever `python3` PATH finds.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("walctl-compact")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")  # no progress bars in cron logs / --json
               .config("spark.task.maxFailures", "2"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def owns_new_session() -> bool:
    """True when no SparkSession is active yet, so the one we create is ours to stop."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return True
    return SparkSession.getActiveSession() is None


def run_iterations(spark, plan, keys: list[str], store_url: str, endpoint_url: str | None,
                   progress=None, read_rate_bps: float | None = None) -> list[dict]:
    """Run the plan's iterations one after another (each holds at most the memory limit).

    ``read_rate_bps`` limits the bytes read per second across all tasks running at once:
    each task of an iteration gets an equal share of it.
    """
    sc = spark.sparkContext
    if not getattr(sc, "_walctl_shipped", False):
        # Once per SparkContext (Spark refuses the same file name twice); the zip must live
        # as long as the context, so it goes in a directory of its own.
        sc.addPyFile(package_zip(tempfile.mkdtemp(prefix="walctl-spark-")))
        sc._walctl_shipped = True
    results: list[dict] = []
    outputs = iter(keys)
    for iteration in plan.iterations:
        running = max(1, min(len(iteration.outputs), sc.defaultParallelism))
        share = read_rate_bps / running if read_rate_bps else None
        specs = [TaskSpec(store_url, endpoint_url, next(outputs), out, share) for out in iteration.outputs]
        done = sc.parallelize(specs, len(specs)).map(build_and_upload).collect()
        for result in done:
            result["iteration"] = iteration.index
        results.extend(done)
        if progress is not None:
            progress(iteration.index + 1, len(plan.iterations))
    return results
