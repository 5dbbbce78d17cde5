"""Spark's side of the driver: prerequisites, the session (and its JVM), shipping walctl to executors."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile

from walctl.spark.cluster import DEFAULT_MASTER
from walctl.errors import NotFoundError

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


class MissingPrerequisite(NotFoundError):
    """pyspark or Java is not installed: compaction cannot start (exit 4, nothing written)."""



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


def spark_session(master: str | None = None, log_level: str = "OFF", *, worker_daemon: bool = False):
    """A SparkSession: on ``master`` if given, else on the master spark-submit (or
    PYSPARK_SUBMIT_ARGS) set, else local[*]. Local executors use this very interpreter.
    ``log_level``: Spark's log from then on (OFF: a failed task's error comes back classified,
    its traceback is not printed; WARN with --debug).

    Raises MissingPrerequisite without pyspark or Java.
    """
    check_pyspark()
    check_java()
    from pyspark import SparkContext

    if SparkContext._gateway is None and os.environ.get("TMPDIR") and "SPARK_LOCAL_DIRS" not in os.environ:
        # The JVM we start keeps its scratch files (deleted as it exits) where TMPDIR says, not in /tmp.
        os.environ["SPARK_LOCAL_DIRS"] = tempfile.gettempdir()
    jvm_conf = jvm_settings(log_level)
    with jvm_stderr_filtered(SparkContext._gateway is None and quiet(log_level)):
        return _session(master, log_level, jvm_conf, worker_daemon)


def _session(master: str | None, log_level: str, jvm_conf: dict, worker_daemon: bool):
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

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
               # The status tracker (job_timeout, IdleWatch: how many tasks run) reads Spark's status
               # store, which by default takes a stage's change only if its last write is 100 ms old:
               # a task start the listener handles within 100 ms of its stage's submission (a busy
               # machine delays the listener, then it takes both at once) leaves "0 running" there
               # until a heartbeat's flush, 10-20 s later, and a hung task was reported as "none of
               # its tasks is running (lost executors?)". A run's few tasks cost nothing to write each time.
               .config("spark.ui.liveUpdate.period", "0ms")
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


# The JVM's own warnings (the launcher's and the runtime's, "WARNING: Using incubator modules:
# jdk.incubator.vector" at every start): not for the operator's stderr but with --debug. Spark's
# log (log4j: errors only, log4j2-quiet.properties) and anything else the JVM prints pass.
JVM_WARNING_PREFIX = b"WARNING: "


def quiet(log_level: str) -> bool:
    return log_level.upper() in ("OFF", "ERROR", "FATAL")


class jvm_stderr_filtered:
    """While the JVM starts (``active``), our stderr (fd 2, which it and its Python workers
    inherit) is a pipe that a thread forwards to the real stderr, line by line, dropping the
    JVM's own ``WARNING:`` lines; it ends when the JVM and its children have closed the pipe.
    Our own fd 2 is the real one again as soon as the JVM is started."""

    def __init__(self, active: bool):
        self.active = active

    def __enter__(self):
        if not self.active:
            return self
        import threading

        sys.stderr.flush()
        read_end, write_end = os.pipe()
        self.saved = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)
        out = os.dup(self.saved)
        thread = threading.Thread(target=_forward, args=(read_end, out), name="walctl-jvm-stderr", daemon=True)
        thread.start()
        if not _FORWARDERS:
            import atexit

            atexit.register(_drain_forwarders)
        _FORWARDERS.append(thread)
        return self

    def __exit__(self, *exc):
        if self.active:
            sys.stderr.flush()
            os.dup2(self.saved, 2)
            os.close(self.saved)
        return False


_FORWARDERS: list = []  # the forwarding threads started in this process
FORWARD_DRAIN_S = 2.0  # at exit, how long to wait for the JVM's last lines (an error) to be forwarded


def _drain_forwarders() -> None:
    """At exit: let each forwarder copy what the JVM (now gone, or going) wrote last, so an error it
    printed as it died is not lost with the daemon thread; bounded, in case a child holds the pipe."""
    for thread in _FORWARDERS:
        thread.join(FORWARD_DRAIN_S)


def _forward(read_end: int, out: int) -> None:
    """Copy lines from ``read_end`` to ``out`` but the JVM's warnings, until end of file."""
    pending = b""
    try:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not line.startswith(JVM_WARNING_PREFIX))
                if kept:
                    os.write(out, kept)
        if pending and not pending.startswith(JVM_WARNING_PREFIX):
            os.write(out, pending)
    except OSError:
        pass
    finally:
        os.close(out)


QUIET_LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")


def jvm_settings(log_level: str) -> dict[str, str]:
    """JVM_CONF, and for a quiet run (Spark's log OFF or ERROR) a log configuration that keeps
    Spark's start-up warnings off stderr: they come before setLogLevel can act."""
    conf = dict(JVM_CONF)
    if quiet(log_level) and os.path.exists(QUIET_LOG_CONFIG):
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
