"""The Spark side of compaction (FORMATS.md 4): one task per iteration, run one after another.

A task reads its iteration's source ranges with the plan's GETs (per source object,
adjacent blocks joined: each byte is fetched once), assembles the iteration's pieces (blocks
copied verbatim, each checked against its index entry) and uploads each: a whole object
with one PUT, or the next part of a multipart object that spans iterations (the driver
creates and completes those, walctl.spark.multipart). The final piece of an object carries
its IndexBlock and Footer; the data CRC runs across pieces (the driver carries it).

Everything a task needs travels in its spec (plain, picklable data); the store client
(boto3 for S3) is created inside the task, never shipped. On a cluster the executors need
walctl's dependencies (crc32c, boto3) in the interpreter PYSPARK_PYTHON names; walctl
itself is shipped as a zip with ``addPyFile``. Failures on executors come back as
walctl's errors with hints (``classify``), never as a raw traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from walctl.errors import IOFailure, NotFoundError, WalctlError

READ_THREADS = 8  # ranged GETs in flight per task (S3: latency-bound)
LOCAL_READ_THREADS = 2  # a local store's O_DIRECT reads: each holds an 8 MiB aligned buffer in flight
DEFAULT_MASTER = "local[*]"  # when neither --master nor spark-submit (or PYSPARK_SUBMIT_ARGS) names one
SPARK_EXTRA = "pip install 'walctl[spark]'"

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


def spark_session(master: str | None = None, log_level: str = "OFF"):
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
    if master is None:
        # Start (or, under spark-submit, join) the JVM first: its system properties hold
        # spark-submit's --master and --conf, which a default must never override.
        SparkContext._ensure_initialized()
        master = SparkConf().get("spark.master", None) or DEFAULT_MASTER
    builder = SparkSession.builder.master(master).appName("walctl-compact")
    if master.startswith("local"):
        # local[*] workers are children of this machine: give them our interpreter (and so
        # our installed walctl and dependencies) rather than whatever `python3` PATH finds.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")  # no progress bars in cron logs / --json
               .config("spark.task.maxFailures", "2"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


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
    """addPyFile walctl once per SparkContext.

    The zip is written inside the context's own SparkFiles directory, which Spark serves
    from and deletes when its JVM exits, so no run leaves a temporary directory behind.
    """
    if getattr(sc, "_walctl_shipped", False):
        return
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
    crc: int  # crc32c of the object's data before this piece
    data_bytes: int  # the object's whole data region (where its index starts)
    index: bytes | None  # the object's IndexBlock, for its final piece


@dataclass(frozen=True)
class IterationSpec:
    store_url: str
    endpoint_url: str | None
    index: int
    reads: tuple  # walctl.spark.plan.Read, the iteration's GETs
    pieces: tuple[PieceSpec, ...]
    read_rate_bps: float | None = None  # bytes/s, None = unlimited


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
    """Runs on an executor. Errors come back in the result (``error``), classified, not raised."""
    try:
        return _run_iteration(spec)
    except WalctlError as exc:
        return {"error": {"type": type(exc).__name__, "exit_code": exc.exit_code, "what": exc.what,
                          "where": exc.where, "hint": exc.hint}}
    except ImportError as exc:
        return {"error": {"type": "ModuleNotFoundError", "exit_code": 4, "what": str(exc), "where": None,
                          "hint": None, "module": getattr(exc, "name", None)}}


def _run_iteration(spec: IterationSpec) -> dict:
    from walctl.format.crc import crc32c
    from walctl.format.object import VERSION_WALCTL, Footer, IndexEntry, iter_blocks
    from walctl.spark import multipart

    started = time.monotonic()
    store = open_task_store(spec.store_url, spec.endpoint_url)
    read_started = time.time()  # wall clock: comparable across processes (bench figures)
    from walctl.compaction.common import Pacer  # one byte-rate pacer for every compaction level

    limiter = Pacer(spec.read_rate_bps)

    def fetch(read):
        data = store.read_range(read.key, read.start, read.end)
        limiter.paid(len(data))
        if len(data) != read.end - read.start:
            from walctl.errors import CorruptionError

            raise CorruptionError(f"source object shorter than its index says ({len(data)} of "
                                  f"{read.end - read.start} bytes at {read.start})", where=read.key)
        return read, data

    # Where each source range's bytes are, and how many pieces still need each read's buffer.
    located: dict = {}
    uses: dict[int, int] = {}
    buffers: dict[int, bytes] = {}
    reader_of = {}
    for n, read in enumerate(spec.reads):
        for r in read.ranges:
            reader_of[r] = n
    for p in spec.pieces:
        for n in {reader_of[r] for r in p.piece.ranges}:
            uses[n] = uses.get(n, 0) + 1
    # GETs are latency-bound (S3: tens of ms each): a few in flight, GIL released in I/O.
    threads = READ_THREADS if hasattr(store, "bucket") else LOCAL_READ_THREADS
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for n, (read, data) in enumerate(pool.map(fetch, spec.reads)):
            buffers[n] = data
            for r in read.ranges:
                located[r] = (n, r.position - read.start)
    read_seconds = time.monotonic() - limiter.start

    parts = []
    for p in spec.pieces:
        piece = p.piece
        chunks: list = []
        crc = p.crc
        for r in piece.ranges:
            n, at = located[r]
            view = memoryview(buffers[n])[at:at + r.size]
            # A misplaced read must never be published as data: decode the blocks against their entry.
            for _ in iter_blocks(view, IndexEntry(r.stream_id, r.start_offset, r.end_offset - r.start_offset,
                                                  r.record_count, 0, r.size)):
                pass
            crc = crc32c(view, crc)
            chunks.append(view)
        if piece.final:
            footer = Footer(p.data_bytes, len(p.index), VERSION_WALCTL, crc32c(p.index), crc)
            chunks += [p.index, footer.encode()]
        if p.upload_id is None:
            store.put_large(p.key, chunks)
            part = None
        else:
            part = multipart.put_part(store, p.key, p.upload_id, piece.part, chunks, piece.position)
        chunks.clear()
        for n in {reader_of[r] for r in piece.ranges}:
            uses[n] -= 1
            if uses[n] == 0:
                del buffers[n]  # memory follows the pieces still to write
        parts.append({"output": piece.output, "part": piece.part, "crc": crc, "record": part})
    stats = store.stats.snapshot()
    return {"iteration": spec.index, "gets": stats["get"], "puts": stats["put"] + stats.get("multipart_parts", 0),
            "bytes_read": stats["bytes_read"], "bytes_written": stats["bytes_written"],
            "seconds": time.monotonic() - started, "read_seconds": read_seconds, "read_started": read_started,
            "pieces": parts}


# --- the driver -------------------------------------------------------------------------------

def index_block(output) -> bytes:
    """An output's IndexBlock: one entry per source range, at its position in the output."""
    from walctl.format.object import IndexEntry

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


def run_iterations(spark, plan, keys: list[str], store, store_url: str, endpoint_url: str | None,
                   progress=None, read_rate_bps: float | None = None) -> JobResult:
    """Run the plan's iterations one after another (each holds at most the memory limit).

    ``store`` is the driver's store: it creates and completes the multipart objects. On any
    failure or interrupt, open uploads are aborted and finished outputs deleted (their
    prepared ids are left for gc), and the error is re-raised, classified.
    """
    from walctl.spark import multipart

    sc = spark.sparkContext
    ship_walctl(sc)
    crc = {n: 0 for n in range(len(plan.outputs))}
    uploads: dict[int, str] = {}
    records: dict[int, list[dict]] = {n: [] for n in range(len(plan.outputs))}
    finished: dict[int, int] = {}
    done: list[dict] = []
    driver_puts = 0
    try:
        for iteration in plan.iterations:
            specs = []
            for piece in iteration.pieces:
                out = plan.outputs[piece.output]
                if out.multipart and piece.output not in uploads:
                    uploads[piece.output] = multipart.create(store, keys[piece.output])
                    driver_puts += 1
                specs.append(PieceSpec(keys[piece.output], piece, uploads.get(piece.output), crc[piece.output],
                                       out.data_bytes, index_block(out) if piece.final else None))
            spec = IterationSpec(store_url, endpoint_url, iteration.index, iteration.reads, tuple(specs),
                                 read_rate_bps)
            result = _collect(sc, spec)
            if "error" in result:
                raise task_error(result["error"])
            for piece in result["pieces"]:
                crc[piece["output"]] = piece["crc"]
                if piece["record"] is not None:
                    records[piece["output"]].append(piece["record"])
            for piece in iteration.pieces:
                if piece.final:
                    if piece.output in uploads:
                        multipart.complete(store, keys[piece.output], uploads[piece.output], records[piece.output])
                        del uploads[piece.output]
                        driver_puts += 1
                    finished[piece.output] = iteration.index
            done.append(result)
            if progress is not None:
                progress(iteration.index + 1, len(plan.iterations))
    except BaseException:
        try:
            sc.cancelAllJobs()
        except Exception:  # noqa: BLE001
            pass
        for n, upload_id in uploads.items():
            multipart.abort(store, keys[n], upload_id)
        for n in finished:
            try:
                store.delete(keys[n])
            except Exception:  # noqa: BLE001 - gc removes it with its prepared id
                pass
        raise
    made = []
    for n, out in enumerate(plan.outputs):
        made.append({"key": keys[n], "kind": out.kind, "size": out.size_bytes, "iteration": finished[n],
                     "parts": len(out.pieces), "puts": out.puts,
                     "ranges": [{"stream_id": s, "start": a, "end": b, "bytes": size} for s, a, b, size in out.streams]})
    return JobResult(made, done, driver_puts)


def _collect(sc, spec: IterationSpec) -> dict:
    """Run one iteration's task; the Spark call waits in a thread of its own, so an interrupt
    reaches this (main) thread, which cancels the job, instead of py4j (which would swallow it)."""
    import threading

    box: dict = {}

    def work() -> None:
        try:
            box["result"] = sc.parallelize([spec], 1).map(run_iteration).collect()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"walctl-iteration-{spec.index}", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except BaseException:
        try:
            sc.cancelAllJobs()
        except Exception:  # noqa: BLE001 - the JVM may be gone
            pass
        thread.join(30)
        raise
    if "error" in box:
        raise classify(box["error"]) from None
    (result,) = box["result"]
    return result


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
