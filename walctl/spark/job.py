"""The Spark side of compaction (FORMATS.md 4): one task per iteration, ``plan.tasks`` at a time.

A task reads its iteration's source ranges with the plan's GETs (per source object,
adjacent blocks joined: each byte is fetched once), assembles the iteration's pieces (blocks
copied verbatim, each checked against its index entry) and uploads each: a whole object
with one PUT, or the next part of a multipart object that spans iterations (the driver
creates and completes those, walctl.spark.multipart). The final piece of an object carries
its IndexBlock and Footer. Each piece's data CRC comes back alone and the driver combines
them (crc32c_combine), so the pieces of an object run in any order, in parallel, but for the
final one, which starts once the others are done (its footer holds the whole CRC).

Everything a task needs travels in its spec (plain, picklable data); the store client
(boto3 for S3) is created inside the task, never shipped. On a cluster the executors need
walctl's dependencies (crc32c, boto3) in the interpreter PYSPARK_PYTHON names; walctl
itself is shipped as a zip with ``addPyFile``. Failures on executors come back as
walctl's errors with hints (``classify``), never as a raw traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os
import re
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from walctl.errors import IOFailure, NotFoundError, WalctlError
from walctl.failpoints import failpoint

if TYPE_CHECKING:
    from walctl.store.base import Store

READ_THREADS = 8  # ranged GETs in flight per task (S3 and a local store's O_DIRECT reads: latency-bound)
# Bytes of GETs in flight per task: a local O_DIRECT read holds an aligned buffer of its size until
# it is copied out, so many small reads run at once but big ones (up to the 16 MiB read cut) one by one.
INFLIGHT_READ_BYTES = 16 << 20
DEFAULT_MASTER = "local[*]"  # when neither --master nor spark-submit (or PYSPARK_SUBMIT_ARGS) names one
SPARK_EXTRA = "pip install 'walctl[spark]'"
# The JVM walctl starts only schedules tasks and carries their small results (the data moves in
# the Python workers): Spark's minimum heap, the serial collector and the C1 compiler keep it
# at ~250 MiB instead of ~330 and start it faster. A --conf or --driver-memory in
# PYSPARK_SUBMIT_ARGS comes later on spark-submit's command line and wins.
JVM_CONF = {"spark.driver.memory": "512m",
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
                                             "-XX:ReservedCodeCacheSize=48m -Xmn24m -Xss512k"}
# Python workers: big buffers always from mmap, so a freed one goes back to the system at once
# (glibc's moving threshold would otherwise keep them in the heap: RSS stays at the peak).
WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 10), "MALLOC_ARENA_MAX": "2"}

PYTHON_HINT = ("install walctl's dependencies (crc32c, boto3) on every executor and point Spark at that "
               "interpreter: export PYSPARK_PYTHON=/path/to/python before starting the driver "
               "(spark.executorEnv.PYSPARK_PYTHON on YARN or Kubernetes)")
CREDENTIALS_HINT = ("executors take S3 credentials from their own environment: an instance role, or "
                    "--conf spark.executorEnv.AWS_ACCESS_KEY_ID=... and spark.executorEnv.AWS_SECRET_ACCESS_KEY=...")
SHARED_PATH_HINT = ("executors open the store themselves: give an absolute path on storage every executor "
                    "mounts at the same place, or an s3:// store")


class MissingPrerequisite(NotFoundError):
    """pyspark or Java is not installed: compaction cannot start (exit 4, nothing written)."""


# --- prerequisites and the session ------------------------------------------------------------

def check_pyspark() -> None:
    """Raise MissingPrerequisite unless pyspark imports."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise MissingPrerequisite("pyspark is not installed; compact runs on Spark",
                                  hint=f"install the extra: {SPARK_EXTRA}") from exc


def java_executable() -> str | None:
    """The java Spark will start: $JAVA_HOME/bin/java, else the one on PATH; None if neither."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java")


def check_java() -> None:
    """Raise MissingPrerequisite unless a java executable is found (Spark's driver is a JVM)."""
    if java_executable() is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']}" if os.environ.get("JAVA_HOME") else "PATH"
        raise MissingPrerequisite("Java not found; Spark needs a Java runtime (17 or 11)", where=where,
                                  hint="install one, e.g. apt-get install openjdk-17-jre-headless, "
                                       "or set JAVA_HOME")


def requested_master(master: str | None) -> str:
    """The master the job will run on, known before Spark starts: ``--master`` if given; else,
    under spark-submit (its JVM is already up, so joining it is cheap), its ``spark.master``;
    else a ``--master`` in PYSPARK_SUBMIT_ARGS; else DEFAULT_MASTER."""
    if master is not None:
        return master
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        found = SparkConf().get("spark.master", None)
        if found:
            return found
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--master="):
            return arg.partition("=")[2]
    return DEFAULT_MASTER


def spark_session(master: str | None = None, log_level: str = "OFF", *, worker_daemon: bool = False):
    """A SparkSession: on ``master`` if given, else on the master spark-submit (or
    PYSPARK_SUBMIT_ARGS) set, else local[*]. Local executors use this very interpreter.
    ``log_level``: Spark's log from then on (OFF: a failed task's error comes back classified,
    its traceback is not printed; WARN with --debug).

    Raises MissingPrerequisite without pyspark or Java.
    """
    check_pyspark()
    check_java()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._gateway is None and os.environ.get("TMPDIR") and "SPARK_LOCAL_DIRS" not in os.environ:
        # The JVM we start keeps its scratch files (deleted as it exits) where TMPDIR says, not in /tmp.
        os.environ["SPARK_LOCAL_DIRS"] = tempfile.gettempdir()
    jvm_conf = jvm_settings(log_level)
    if master is None:
        # Start (or, under spark-submit, join) the JVM first: its system properties hold
        # spark-submit's --master and --conf, which a default must never override.
        conf = None if os.environ.get("PYSPARK_GATEWAY_PORT") else SparkConf(loadDefaults=False).setAll(
            jvm_conf.items())
        SparkContext._ensure_initialized(conf=conf)
        master = SparkConf().get("spark.master", None) or DEFAULT_MASTER
    builder = SparkSession.builder.master(master).appName("walctl-compact")
    if SparkContext._gateway is None:  # we start the JVM: ours to size
        for key, value in jvm_conf.items():
            builder = builder.config(key, value)
    if master.startswith("local"):
        # local[*] workers are children of this machine: give them our interpreter (and so
        # our installed walctl and dependencies) rather than whatever `python3` PATH finds.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if installed_pyspark():
            # Their pyspark from its compiled install rather than Spark's zip (walctl.spark.worker).
            builder = (builder.config("spark.python.worker.module", "walctl.spark.worker")
                       .config("spark.python.daemon.module", "walctl.spark.daemon"))
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")  # no progress bars in cron logs / --json
               .config("spark.task.maxFailures", "2")
               # A run is one job of a few long tasks: a worker process of its own each, rather than
               # a daemon that forks them and stays (one process less, ~50 MiB, for the same start).
               # A caller that runs many jobs on one session (the tests) takes the daemon: its
               # forked workers start in milliseconds where a new process takes seconds.
               .config("spark.python.use.daemon", "true" if worker_daemon else "false"))
    session = builder.getOrCreate()
    for key, value in WORKER_ENV.items():  # (spark.executorEnv.* of the user's stand)
        session.sparkContext.environment.setdefault(key, value)
    if master.startswith("local"):
        # Local workers start as `python -m ...`, which puts the current directory first on their
        # path: a walctl there (an old checkout) would stand in for the driver's. Not with -P.
        session.sparkContext.environment["PYTHONSAFEPATH"] = "1"
    session.sparkContext.setLogLevel(log_level)
    return session


QUIET_LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")


def jvm_settings(log_level: str) -> dict[str, str]:
    """JVM_CONF, and for a quiet run (Spark's log OFF or ERROR) a log configuration that keeps
    Spark's start-up warnings off stderr: they come before setLogLevel can act."""
    conf = dict(JVM_CONF)
    if log_level.upper() in ("OFF", "ERROR", "FATAL") and os.path.exists(QUIET_LOG_CONFIG):
        conf["spark.driver.extraJavaOptions"] += f" -Dlog4j2.configurationFile=file:{QUIET_LOG_CONFIG}"
    return conf


def installed_pyspark() -> bool:
    """True when this driver's pyspark is an installed package (not Spark's zip) and the local
    workers run this very interpreter, so they can import the same pyspark, compiled."""
    import pyspark

    python = os.environ.get("PYSPARK_PYTHON")
    return (".zip" not in pyspark.__file__ and python is not None
            and os.path.realpath(python) == os.path.realpath(sys.executable))


def owns_new_session() -> bool:
    """True when no SparkSession is active yet, so the one we create is ours to stop."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return True
    return SparkSession.getActiveSession() is None


def stop_session(session) -> None:
    """Stop a session we created (None: its start failed), and the JVM we launched with it (a JVM
    left behind holds ~1 GiB for ~10 s); never raises."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return
    try:
        if session is not None:
            session.stop()
    except Exception:  # noqa: BLE001 - the JVM may be gone (Ctrl-C reached it): stop what is left
        pass
    finally:
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)  # None under spark-submit: not ours to stop
        if gateway is not None and proc is not None:
            try:
                gateway.shutdown()
            except Exception:  # noqa: BLE001 - the JVM may be gone already
                pass
            try:
                proc.stdin.close()  # the gateway exits when its stdin closes (its shutdown hooks run)
                proc.wait(timeout=15)
            except Exception:  # noqa: BLE001
                proc.kill()
                proc.wait()
            SparkContext._gateway = None
            SparkContext._jvm = None


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


def ship_walctl(sc) -> None:
    """Make walctl importable by the executors, once per SparkContext.

    A local master's workers are children of this machine running this interpreter: they
    import walctl from where this process did (PYTHONPATH in their environment), with its
    compiled modules. Anything else gets the package as a zip (addPyFile), written inside the
    context's own SparkFiles directory, which Spark serves from and deletes when its JVM
    exits, so no run leaves a temporary directory behind. (Each worker compiles a zip's
    modules from source: ~0.5 s of its start, which a local run does without.)
    """
    if getattr(sc, "_walctl_shipped", False):
        return
    import walctl

    python = os.environ.get("PYSPARK_PYTHON")
    if sc.master.startswith("local") and (python is None or os.path.realpath(python) == os.path.realpath(sys.executable)):
        parent = os.path.dirname(os.path.dirname(os.path.abspath(walctl.__file__)))
        known = sc.environment.get("PYTHONPATH")
        sc.environment["PYTHONPATH"] = parent if not known else f"{parent}{os.pathsep}{known}"
    else:
        from pyspark import SparkFiles

        directory = os.path.join(SparkFiles.getRootDirectory(), "walctl-ship")
        os.makedirs(directory, exist_ok=True)
        sc.addPyFile(package_zip(directory))
    sc._walctl_shipped = True


# --- the task ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PieceSpec:
    key: str  # the output object's key (its prepared id's)
    piece: object  # walctl.spark.plan.Piece
    upload_id: str | None  # the multipart upload this piece is a part of; None: the whole object, one PUT
    data_bytes: int  # the object's whole data region (where its index starts)
    index: bytes | None  # an object of one piece: its IndexBlock (the driver adds a multipart object's)


@dataclass(frozen=True)
class IterationSpec:
    store_url: str
    endpoint_url: str | None
    index: int
    reads: tuple  # walctl.spark.plan.Read, the iteration's GETs
    pieces: tuple[PieceSpec, ...]
    read_rate_bps: float | None = None  # this task's share of the read budget, bytes/s; None = unlimited
    write_rate_bps: float | None = None  # this task's share of the write budget, bytes/s; None = unlimited
    read_threads: int = READ_THREADS  # GETs in flight at most (INFLIGHT_READ_BYTES bounds their bytes)
    memory_bytes: int | None = None  # the task's memory share (the plan's task_memory); None: its largest iteration


def open_task_store(url: str, endpoint_url: str | None):
    """The store as an executor opens it: a local store directory must exist there (never created)."""
    from urllib.parse import unquote, urlsplit

    from walctl.store import open_store

    if url.startswith("file://") or "://" not in url:
        path = unquote(urlsplit(url).path) if url.startswith("file://") else url
        if not os.path.isdir(path):
            raise NotFoundError("no such store directory", where=path)
    return open_store(url, endpoint_url=endpoint_url, create=False)


def run_iteration(spec: IterationSpec) -> dict:
    """One iteration as an executor runs it (errors in the result, classified)."""
    return run_iterations_in_task([spec])[0]


def _error_result(index: int, exc: BaseException) -> dict:
    if isinstance(exc, WalctlError):
        return {"iteration": index, "error": {"type": type(exc).__name__, "exit_code": exc.exit_code,
                                              "what": exc.what, "where": exc.where, "hint": exc.hint}}
    return {"iteration": index, "error": {"type": "ModuleNotFoundError", "exit_code": 4, "what": str(exc),
                                          "where": None, "hint": None, "module": getattr(exc, "name", None)}}


def run_iterations_in_task(specs) -> list[dict]:
    """Runs on an executor: one task's iterations with one store client, their GETs read ahead
    of the writes (ReadAhead) within the task's memory share. Each result has that iteration's
    own request counts. Errors come back in the result (``error``), classified, not raised;
    the task stops at its first."""
    entered = time.time()
    entry_cpu = sum(os.times()[:2])  # the worker's start and the task's unpickling, CPU seconds
    specs = list(specs)
    out: list[dict] = []
    if not specs:
        return out
    ahead = None
    try:
        store = open_task_store(specs[0].store_url, specs[0].endpoint_url)
        ahead = ReadAhead(store, specs)
        for k, spec in enumerate(specs):
            try:
                out.append(_run_iteration(spec, store, ahead, k))
            except (WalctlError, ImportError) as exc:
                out.append(_error_result(spec.index, exc))
                break
    except (WalctlError, ImportError) as exc:
        out.append(_error_result(specs[len(out)].index, exc))
    finally:
        if ahead is not None:
            ahead.close()
    cpu, started = os.times(), process_started()
    for result in out:  # where the task's time went before its first GET (bench/compact_bench.py)
        result.update(worker_started=started, task_entered=entered,
                      worker_cpu=cpu.user + cpu.system, entry_cpu=entry_cpu)
    return out


def process_started() -> float | None:
    """This process's start, wall clock (Linux /proc: its start in clock ticks after boot, against
    the uptime now; /proc/stat's boot time is whole seconds), None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class _Closed(Exception):
    """A read not started because the task stopped (never reaches a result: nobody waits for it)."""


class BufferPool:
    """A task's read buffers: extents of one page-aligned arena of ``cap`` bytes (for O_DIRECT),
    mapped once and reused from one read to the next. A read lands where its bytes are checked
    and written from (no copy), in pages already mapped (a fresh mapping costs a page fault per
    4 KiB, more than the copy would). First fit, freed extents merged with their neighbours; a
    read finding no room (the arena fragmented, or the read larger than it) gets a buffer of its
    own, freed with its last view. ``take`` returns (buffer, token), ``give`` takes the token."""

    def __init__(self, cap: int):
        from walctl.device.buffers import align_up

        self.cap = align_up(max(cap, 1))
        self.arena = None  # mapped at the first read
        self.free: list[tuple[int, int]] = [(0, self.cap)]  # (offset, length), by offset, never adjacent
        self.lock = threading.Lock()

    def take(self, size: int):
        from walctl.device.buffers import align_up, aligned_buffer

        size = align_up(max(size, 1))
        with self.lock:
            for i, (at, length) in enumerate(self.free):
                if length >= size:
                    if length == size:
                        del self.free[i]
                    else:
                        self.free[i] = (at + size, length - size)
                    if self.arena is None:
                        self.arena = aligned_buffer(self.cap)
                    return memoryview(self.arena)[at:at + size], (at, size)
        return aligned_buffer(size), None

    def give(self, token) -> None:
        if token is None:
            return
        import bisect

        at, size = token
        with self.lock:
            i = bisect.bisect(self.free, (at, size))
            if i < len(self.free) and at + size == self.free[i][0]:  # merge with the next extent
                size += self.free.pop(i)[1]
            if i and self.free[i - 1][0] + self.free[i - 1][1] == at:  # and with the previous
                self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + size)
            else:
                self.free.insert(i, (at, size))


class ReadAhead:
    """A task's GETs, every iteration's in plan order, read by a few threads ahead of the writes.

    A GET starts when the bytes it will hold fit the task's memory share beside the buffers
    not yet written out (or when none is held: a range larger than the share goes alone), and
    in order: the next iteration's reads take the memory the current one's writes give back,
    so reading iteration k+1 overlaps writing iteration k and the task never holds more than
    its share. Bytes of GETs in flight are bounded too (INFLIGHT_READ_BYTES: a local read holds
    an aligned buffer of its size until it is copied out). The GETs are exactly the plan's.
    """

    def __init__(self, store: Store, specs):
        from walctl.compaction.common import Pacer  # one byte-rate pacer for every compaction level

        self.store = store
        largest = max(sum(r.size for r in s.reads) for s in specs)
        self.memory = specs[0].memory_bytes or largest or 1
        self.pacer = Pacer(specs[0].read_rate_bps)  # the task's share of the read budget
        self.cond = threading.Condition()
        self.held = self.inflight = self.turn = 0
        self.closed = False
        self.spans = [[None, None, None] for _ in specs]  # per iteration: first start, last end (monotonic), wall start
        self.bytes = [0] * len(specs)
        self.pool = ThreadPoolExecutor(max_workers=max(1, specs[0].read_threads), thread_name_prefix="walctl-read")
        # A local store reads into the task's arena (read_range_into); others return bytes. The arena
        # is the memory share and 1/16 more: the reads' page alignment and some fragmentation (measured
        # on compact_bench's layout: no read needed a buffer of its own).
        self.buffers = BufferPool(self.memory + self.memory // 16) if store.capabilities.reads_into else None
        self.lent: dict[tuple[int, int], object] = {}  # (iteration, ticket) -> the arena extent its read holds
        self.futures = []
        self.first_ticket = []
        ticket = 0
        for k, spec in enumerate(specs):
            self.first_ticket.append(ticket)
            self.futures.append([self.pool.submit(self._fetch, k, ticket + n, read) for n, read in enumerate(spec.reads)])
            ticket += len(spec.reads)

    def _admissible(self, ticket: int, size: int) -> bool:
        return self.closed or (self.turn == ticket and (self.held == 0 or self.held + size <= self.memory)
                               and (self.inflight == 0 or self.inflight + size <= INFLIGHT_READ_BYTES))

    def _fetch(self, k: int, ticket: int, read):
        size = read.size
        with self.cond:
            self.cond.wait_for(lambda: self._admissible(ticket, size))
            if self.closed:
                raise _Closed()
            self.turn += 1
            self.held += size
            self.inflight += size
            self.cond.notify_all()
        started, wall = time.monotonic(), time.time()
        try:
            if self.buffers is None:
                data = self.store.read_range(read.key, read.start, read.end)
            else:  # into a buffer of the task's own: no copy, and no fresh pages once the pool is warm
                buf, token = self.buffers.take(self.store.into_size(read.start, read.end))
                with self.cond:
                    self.lent[(k, ticket)] = token
                data = self.store.read_range_into(read.key, read.start, read.end, buf)
                del buf
        finally:
            with self.cond:
                self.inflight -= size
                self.cond.notify_all()
        self.pacer.paid(len(data))
        if len(data) != size:
            from walctl.errors import CorruptionError

            raise CorruptionError(f"source object shorter than its index says ({len(data)} of "
                                  f"{size} bytes at {read.start})", where=read.key)
        ended = time.monotonic()
        with self.cond:
            span = self.spans[k]
            if span[0] is None or started < span[0]:
                span[0], span[2] = started, wall
            span[1] = ended if span[1] is None else max(span[1], ended)
            self.bytes[k] += size
        return data

    def release(self, size: int, read: tuple[int, int] | None = None) -> None:
        """A buffer written out: its bytes go to the reads waiting; ``read`` (iteration k, its read
        n): the pool's buffer it held goes back to the pool."""
        with self.cond:
            self.held -= size
            token = self.lent.pop((read[0], self.first_ticket[read[0]] + read[1]), None) if read else None
            self.cond.notify_all()
        if token is not None:
            self.buffers.give(token)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.pool.shutdown(wait=True, cancel_futures=True)


_HOLD_GIL = None


def _hold_gil(crc32c) -> dict:
    """crc32c's keyword to keep the GIL (the crc32c package's gil_release_mode=0), {} if it has none."""
    global _HOLD_GIL
    try:
        crc32c(b"", 0, gil_release_mode=0)
        _HOLD_GIL = {"gil_release_mode": 0}
    except TypeError:
        _HOLD_GIL = {}
    return _HOLD_GIL


def _run_iteration(spec: IterationSpec, store: Store, ahead: ReadAhead, k: int) -> dict:
    from walctl.compaction.common import Pacer
    from walctl.format.crc import crc32c
    from walctl.format.object import VERSION_WALCTL, Footer, IndexEntry, iter_placed
    from walctl.spark import multipart

    started = time.monotonic()
    before = store.stats.snapshot()  # the reads ahead touch only the get counters, never the put ones
    writes = Pacer(spec.write_rate_bps)
    futures = ahead.futures[k]

    # Where each source range's bytes are (per piece: read, offset in it), which reads each piece
    # takes bytes from, and how many pieces still need each read's buffer.
    uses = [0] * len(spec.reads)
    buffers: dict[int, bytes] = {}
    located = {}
    for n, read in enumerate(spec.reads):
        for r in read.ranges:
            located[r] = (n, r.position - read.start)
    places = [[(*located[r], r) for r in p.piece.ranges] for p in spec.pieces]
    sources = [sorted({n for n, _, _ in where}) for where in places]
    del located
    last_piece = {}
    for i, needed in enumerate(sources):
        for n in needed:
            uses[n] += 1
            last_piece[n] = i
    unused = [n for n, count in enumerate(uses) if count == 0]
    # A local store's reads land in the task's arena, and its writes take each chunk before asking
    # for the next (put_large, put_part): a read's extent goes back to the reads waiting as soon as
    # its last chunk is written, not when the whole piece is (which held the next iteration's reads
    # back until then: reading and writing took turns). Elsewhere the reads are bytes objects that
    # the write holds until it is done: they are given back with the piece.
    progressive = ahead.buffers is not None
    released: set[int] = set()

    def release(n: int) -> None:
        released.add(n)
        ahead.release(spec.reads[n].size, (k, n))

    def feed(chunks: list, releases: dict):
        """The piece's chunks, one at a time; once chunk j is written (the next one asked for), the
        reads whose last chunk it was are given back."""
        for j, chunk in enumerate(chunks):
            yield chunk
            for n in releases.get(j, ()):
                release(n)

    def buffer(n: int) -> bytes:
        if n not in buffers:
            buffers[n] = futures[n].result()  # a failed GET raises its error here
            futures[n] = None  # a done future keeps its result: the buffer must go with its last piece
        return buffers[n]

    def write(p: PieceSpec, chunks, size: int):
        if p.upload_id is None:
            store.put_large(p.key, chunks)
            return None
        return multipart.put_part(store, p.key, p.upload_id, p.piece.part, chunks, p.piece.position, size=size)

    def finish(pending) -> None:
        """A piece's write done: its record, the pace, and the buffers no later piece needs."""
        future, p, crc, size, needed = pending
        part = future.result()  # a failed write raises its error here
        writes.paid(size)
        for n in needed:
            uses[n] -= 1
            if uses[n] == 0:
                del buffers[n]  # memory follows the pieces still to write
                if n not in released:
                    release(n)
        parts.append({"output": p.piece.output, "part": p.piece.part, "crc": crc, "bytes": p.piece.data_bytes,
                      "record": part})
        failpoint("compact-task-after-piece")  # (on the executor: tests lose it, or hang it, mid-job)

    parts: list[dict] = []
    pending = None
    # Ranges are ~100 KB: summed in microseconds with the GIL held, where releasing it and waiting
    # to get it back from the read threads costs several times more (crc32c's gil_release_mode).
    hold_gil = _HOLD_GIL if _HOLD_GIL is not None else _hold_gil(crc32c)
    # One piece is written (its syscalls release the GIL) while the next one is checked and summed.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="walctl-write") as writer:
        for i, (p, where, needed) in enumerate(zip(spec.pieces, places, sources)):
            chunks: list = []
            last_chunk: dict[int, int] = {}  # a read no later piece needs -> its last chunk here
            crc = 0  # this piece's data alone: pieces of one object run in any order, the driver combines
            for j, (n, at, r) in enumerate(where):
                if progressive and last_piece[n] == i:
                    last_chunk[n] = j
                view = memoryview(buffer(n))[at:at + r.size]
                # A misplaced read must never be published as data: decode the blocks against their
                # entry (the batches' payloads as views: the buffer never changes, nothing is copied).
                for _ in iter_placed(view, IndexEntry(r.stream_id, r.start_offset, r.end_offset - r.start_offset,
                                                      r.record_count, 0, r.size), copy=False):
                    pass
                crc = crc32c(view, crc, **hold_gil)
                chunks.append(view)
            view = None  # the chunks hold the views: a buffer goes when the last piece using it is written
            if p.index is not None:  # an object of one piece: its IndexBlock and Footer follow
                footer = Footer(p.data_bytes, len(p.index), VERSION_WALCTL, crc32c(p.index), crc)
                chunks += [p.index, footer.encode()]
            size = sum(len(c) for c in chunks)
            if pending is not None:
                finish(pending)
            body = chunks
            if last_chunk:
                releases: dict[int, list[int]] = {}
                for n, j in last_chunk.items():
                    releases.setdefault(j, []).append(n)
                body = feed(chunks, releases)
            pending = (writer.submit(write, p, body, size), p, crc, size, needed)
            del chunks, body
        if pending is not None:
            finish(pending)
    for n in unused:  # a GET no piece uses (none in a plan): wait for it, give its memory back
        futures[n].result()
        futures[n] = None
        ahead.release(spec.reads[n].size, (k, n))
    after = store.stats.snapshot()
    stats = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    first, last, wall = ahead.spans[k]
    return {"iteration": spec.index, "gets": len(spec.reads),
            "puts": stats["put"] + stats.get("multipart_parts", 0),
            "bytes_read": ahead.bytes[k], "bytes_written": stats["bytes_written"],
            "seconds": time.monotonic() - started, "read_seconds": (last - first) if first is not None else 0.0,
            "read_started": wall if wall is not None else time.time(), "finished": time.time(), "pieces": parts}


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
    ``timeout_s``: the most the Spark job may take, waiting for executors included (None: no
    limit); past it the job is cancelled and rolled back the same way (JobTimeout).
    ``on_warning(message)``: told once if the job goes without any executor for a while.
    """
    from walctl.format.crc import crc32c, crc32c_combine
    from walctl.format.footer import VERSION_WALCTL, Footer
    from walctl.spark import multipart

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
                uploads[n] = multipart.create(store, keys[n])
                driver_puts += 1
        specs = [IterationSpec(store_url, endpoint_url, it.index, it.reads, tuple(
                     PieceSpec(keys[p.output], p, uploads.get(p.output), plan.outputs[p.output].data_bytes,
                               None if p.output in uploads else index_block(plan.outputs[p.output]))
                     for p in it.pieces), read_share, write_share, memory_bytes=plan.task_memory)
                 for it in plan.iterations]
        done = _collect(sc, [specs[k::slots] for k in range(slots)], timeout_s, on_warning)
        failed = [r for r in done if "error" in r]
        if failed:
            raise task_error(failed[0]["error"])
        pieces = {(p["output"], p["part"]): p for r in done for p in r["pieces"]}
        if progress is not None:
            for n in range(len(done)):
                progress(n + 1, len(plan.iterations))
        for n, upload_id in sorted(uploads.items()):
            out = plan.outputs[n]
            crc = 0
            for k in range(1, len(out.pieces) + 1):
                crc = crc32c_combine(crc, pieces[(n, k)]["crc"], pieces[(n, k)]["bytes"])
            index = index_block(out)
            footer = Footer(out.data_bytes, len(index), VERSION_WALCTL, crc32c(index), crc)
            records = [pieces[(n, k)]["record"] for k in range(1, len(out.pieces) + 1)]
            records.append(multipart.put_part(store, keys[n], upload_id, len(out.pieces) + 1,
                                              [index, footer.encode()], out.data_bytes))
            multipart.complete(store, keys[n], upload_id, records)
            del uploads[n]
            driver_puts += 2
    except BaseException:
        for n, upload_id in uploads.items():
            multipart.abort(store, keys[n], upload_id)
        for n, out in enumerate(plan.outputs):
            try:
                store.delete(keys[n])  # written (a whole object, or a completed multipart one) or not
            except Exception:  # noqa: BLE001 - gc removes it with its prepared id
                pass
        raise
    last = {}
    for it in plan.iterations:
        for p in it.pieces:
            last[p.output] = it.index
    made = []
    for n, out in enumerate(plan.outputs):
        made.append({"key": keys[n], "kind": out.kind, "size": out.size_bytes, "iteration": last[n],
                     "parts": len(out.pieces), "puts": out.puts,
                     "ranges": [{"stream_id": s, "start": a, "end": b, "bytes": size} for s, a, b, size in out.streams]})
    return JobResult(made, done, driver_puts, slots)


class JobTimeout(IOFailure):
    """The Spark job did not finish within its timeout (lost executors, no worker with the
    resources it asks for, a hung task): cancelled and rolled back, nothing committed (exit 6)."""


def _collect(sc, batches: list[list[IterationSpec]], timeout_s: float | None = None, on_warning=None) -> list[dict]:
    """Run one task per batch as one Spark job; the iterations' results, in plan order. The
    Spark call waits in a thread of its own, so an interrupt reaches this (main) thread,
    which cancels the job, instead of py4j (which would swallow it); so does ``timeout_s``
    running out (None: no limit), which raises JobTimeout saying why the job stood still.
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

    deadline = time.monotonic() + timeout_s if timeout_s else None
    watch = IdleWatch(sc, group, timeout_s, on_warning) if on_warning is not None else None
    thread = threading.Thread(target=work, name="walctl-iterations", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
            if watch is not None and thread.is_alive():
                watch.check()
            if deadline is not None and thread.is_alive() and time.monotonic() >= deadline:
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
        why = (f"{running} of its {total} task(s) still running on {executors} executor(s) (a hung task, an "
               "executor that stopped answering, or a compaction longer than the timeout?)")
        hint = ("look at the executors' logs for the task that hangs; if the compaction is only long, raise "
                "--task-timeout (or its budgets); nothing was committed")
    elif executors == 0:
        why = "no executor ran it (lost workers, or none with the cores and memory it asks for?)"
        hint = ("check that the master has live workers with free cores and memory: its web UI, or "
                "'requires more resource than any of Workers could have' in its log; nothing was committed, "
                "rerun then")
    else:
        why = f"none of its {total} task(s) is running on the {executors} executor(s) (lost executors?)"
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
    state = {"executors": 0, "running": 0, "tasks": 0}
    try:
        infos = sc._jsc.sc().statusTracker().getExecutorInfos()  # (pyspark's tracker has no executors)
        state["executors"] = len(infos) if sc.master.startswith("local") else max(0, len(infos) - 1)
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


# --- errors from executors --------------------------------------------------------------------

_ERROR_CLASSES = {2: "UsageError", 3: "CorruptionError", 4: "NotFoundError", 5: "RefusedError", 6: "IOFailure",
                  7: "FullError"}


def task_error(info: dict) -> WalctlError:
    """The walctl error a task reported, with the hint a cluster operator needs."""
    from walctl import errors

    if info["type"] == "ModuleNotFoundError":
        module = info.get("module") or info["what"]
        return NotFoundError(f"executors cannot import {module!r}", where="Spark executor", hint=PYTHON_HINT)
    cls = getattr(errors, info["type"], None)
    if not (isinstance(cls, type) and issubclass(cls, WalctlError)):
        cls = getattr(errors, _ERROR_CLASSES.get(info["exit_code"], "IOFailure"))
    hint = info.get("hint")
    if info["what"] == "no such store directory":
        hint = SHARED_PATH_HINT
    elif "credentials" in info["what"]:
        hint = CREDENTIALS_HINT
    return cls(f"on a Spark executor: {info['what']}", where=info.get("where"), hint=hint)


_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def classify(exc: BaseException) -> WalctlError:
    """A failed Spark job as one walctl error: no raw traceback, never 'a bug'."""
    if isinstance(exc, WalctlError):
        return exc
    text = str(exc)
    found = _MODULE.search(text)
    if found:
        return NotFoundError(f"executors cannot import {found.group(1)!r}", where="Spark executor",
                             hint=PYTHON_HINT)
    if "NoCredentialsError" in text or "Unable to locate credentials" in text:
        return IOFailure("executors found no S3 credentials", where="Spark executor", hint=CREDENTIALS_HINT)
    # The last line of the worker's traceback, or of the JVM's message, says the most.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("at ", "File "))]
    errorline = next((ln for ln in reversed(lines) if re.match(r"^[A-Za-z_.]+(Error|Exception):", ln)),
                     lines[0] if lines else type(exc).__name__)
    return IOFailure(f"the Spark job failed: {errorline[:300]}", where="Spark",
                     hint="rerun with --debug for Spark's log; on a cluster check the executors' logs")
