"""One local[2] SparkSession (starting Spark costs ~10 s) and one standalone master for the whole test session;
the driver JVMs the tests start share a class-data archive (spark_class_archive)."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# A job that loads what a compaction's driver loads (a session, a job with a Python worker).
_ARCHIVE_WORKLOAD = """
from pyspark.sql import SparkSession
s = SparkSession.builder.master("local[1]").getOrCreate()
assert s.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
s.stop()
"""
_STALE_LOCK_S = 900  # a lock older than this is a dump that died with its run: take it over


def _archive_path() -> Path | None:
    """Where the archive of this Java and this Spark lives (a new Java or Spark: a new name), or None
    without Java or pyspark."""
    import shutil

    try:
        import pyspark
    except ImportError:
        return None
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get(
        "JAVA_HOME") else shutil.which("java")
    if java is None:
        return None
    from walctl.spark.session import JVM_CONF

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha1(repr((os.path.realpath(java), os.stat(os.path.realpath(java)).st_mtime_ns,
                             sorted(p.name for p in jars.glob("*.jar")), JVM_CONF)).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "walctl-spark-cds" / f"driver-{key}.jsa"


@pytest.fixture(scope="session", autouse=True)
def spark_class_archive():
    """Driver JVMs started from here (a walctl compact's, spark-submit's, the session fixture's) map
    the classes Spark loads from one class-data-sharing archive instead of loading them from its jars:
    ~8.6 s of CPU instead of ~15.3 s for a local job's spark-submit on this 2-core VM. The first
    session on a machine dumps it in the background (a short local job, ~29 s of CPU, once per Java
    and Spark version); the JVMs that start before it is in place (renamed there whole) start as
    before. SPARK_SUBMIT_OPTS reaches only the driver JVM that spark-submit starts; -Xlog:cds=off:
    a missing or unusable archive is passed over without a word (the JVM would print a warning on
    its stdout, a --json run's)."""
    path = _archive_path()
    if path is None:
        yield None
        return
    path.parent.mkdir(exist_ok=True)
    lock = path.with_suffix(".lock")
    dump = None
    if not path.exists():
        try:
            if lock.exists() and time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
                lock.unlink()
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass  # another worker dumps it
        else:
            from walctl.spark.session import JVM_CONF

            script = path.with_suffix(f".{os.getpid()}.py")
            script.write_text(_ARCHIVE_WORKLOAD)
            partial = path.with_suffix(f".{os.getpid()}.partial")
            submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
            options = f"{JVM_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={partial}"
            line = (f"{shlex.quote(submit)} --driver-java-options {shlex.quote(options)} {shlex.quote(str(script))}"
                    f" && mv {shlex.quote(str(partial))} {shlex.quote(str(path))}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_") and k != "SPARK_SUBMIT_OPTS"}
            env["PYSPARK_PYTHON"] = sys.executable
            dump = subprocess.Popen(["sh", "-c", line], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [
        before, f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]))
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before
        if dump is not None:
            if dump.poll() is None:  # the run ended first: stop it, a later run dumps again
                import signal

                os.killpg(dump.pid, signal.SIGKILL)
                dump.wait()
            for leftover in (path.with_suffix(f".{os.getpid()}.py"), path.with_suffix(f".{os.getpid()}.partial")):
                leftover.unlink(missing_ok=True)
            if not path.exists():
                lock.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def spark(s3_server):
    # Executors take S3 credentials from the environment they start with (as on a cluster,
    # where an instance role or spark.executorEnv.* provides them): so the moto server's
    # fake credentials must be in os.environ before Spark starts.
    from walctl.spark.session import spark_session

    session = spark_session("local[2]", worker_daemon=True)  # many jobs on one session: forked workers
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_master(tmp_path_factory, s3_server):
    """A standalone master (clusterhelpers.Standalone) for the session, with no worker of its own:
    a test starts its workers (``start_worker``) through ``standalone_cluster``, which stops them.
    s3_server: its fake credentials are in os.environ before the master (and its workers'
    environment) is set up."""
    from clusterhelpers import Standalone

    cluster = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        cluster.start_master()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def standalone_cluster(spark_master):
    """The session's master with no alive worker at the start of the test (one another test stopped
    may take a moment to be dropped); every worker the test starts is stopped at its end."""
    spark_master.wait_no_worker()
    try:
        yield spark_master
    finally:
        spark_master.stop_workers()
