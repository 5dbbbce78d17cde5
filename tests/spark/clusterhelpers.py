"""A real Spark standalone cluster for the tests: a master and workers from the installed pyspark, on
127.0.0.1 only, each in a process group of its own (a worker's executors and their Python workers
included), so a test can SIGKILL a worker with everything it runs, and teardown stops them all.

One master serves a whole test session (tests/spark/conftest.py: ``spark_master``); each test starts
the workers it needs and stops them at its end (``Standalone.stop_workers``: until the master has
dropped them, so the next test finds a master with no worker)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 90
# The cluster's own JVMs -- the master, the workers and, through a worker's environment, the
# executors it launches -- run with the C1 compiler and the serial collector: each starts in about
# half the CPU time (a master 7.6-8.1 s -> 4.2 s of CPU, a worker 7.9-9.4 s -> 5.1 s, at load 5 on
# 2 cores) and the tests' jobs are tiny. The driver is walctl's own JVM, started with walctl's own
# settings (walctl.spark.session.JVM_CONF): ``env`` (a driver's environment) does not carry these.
DAEMON_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def archive_options(submit_opts: str) -> str:
    """The class-data-sharing options the session gives driver JVMs (tests/conftest.py's
    spark_class_archive, in SPARK_SUBMIT_OPTS), for the cluster's JVMs too: a master, a worker and an
    executor have the driver's class path (SPARK_HOME's jars) and load many of its classes, so they
    map them from the same archive (master and worker up: 10.3-12.6 s -> 5.9-6.3 s of CPU). A JVM
    whose class path differs (spark-class's launcher) or that starts before the archive is in place
    passes it over without a word (-Xlog:cds=off), as a driver does."""
    return " ".join(o for o in submit_opts.split() if o.startswith(("-XX:SharedArchiveFile=", "-Xlog:cds")))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(log: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{log.name}: no {text!r} (exit {proc.poll()}): {log.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """Signal the process group we started (the JVM and, for a worker, its executors), then SIGKILL it."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # executors left in the group
    except ProcessLookupError:
        pass


class Standalone:
    """spark://127.0.0.1:PORT; its processes inherit os.environ (the moto server's fake credentials,
    as executors would get an instance role's). ``url``, ``env`` (for a driver)."""

    def __init__(self, tmp_path: Path):
        import pyspark

        self.tmp_path = tmp_path
        self.spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
        self.env = dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                        SPARK_LOG_DIR=str(tmp_path))
        self.daemon_env = dict(self.env, JAVA_TOOL_OPTIONS=" ".join(filter(None, [
            DAEMON_JAVA_OPTIONS, archive_options(os.environ.get("SPARK_SUBMIT_OPTS", ""))])))
        self.url = f"spark://127.0.0.1:{free_port()}"
        self.webui_port = free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def _start(self, log_path: Path, args: list[str], ready: str, env: dict) -> subprocess.Popen:
        with open(log_path, "w") as log:
            proc = subprocess.Popen([self.spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        try:
            wait_for(log_path, ready, proc)
        except BaseException:
            stop(proc)
            raise
        return proc

    def start_master(self) -> subprocess.Popen:
        port = self.url.rpartition(":")[2]
        self.master = self._start(self.tmp_path / "master.log",
                                  ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", port,
                                   "--webui-port", str(self.webui_port)], "I have been elected leader",
                                  self.daemon_env)
        return self.master

    def start_worker(self, where: Path, extra_env: dict | None = None) -> subprocess.Popen:
        """One worker (1 core, 1 GiB), its log and work directory (``where``/work) in ``where``;
        ``extra_env`` reaches its executors and their Python workers."""
        n = sum(1 for p in where.glob("worker*.log"))
        proc = self._start(where / f"worker{n}.log",
                           ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores", "1",
                            "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(where / "work")],
                           "Successfully registered with master", dict(self.daemon_env, **(extra_env or {})))
        self.workers.append(proc)
        return proc

    def alive_workers(self) -> int:
        """How many workers the master counts as alive (its web UI's JSON)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=10) as answer:
            return json.load(answer)["aliveworkers"]

    def wait_no_worker(self) -> None:
        """Until the master has dropped every worker (it does as their connection closes)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while (alive := self.alive_workers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive == 0, f"the master still counts {alive} workers alive"

    def stop_workers(self) -> None:
        """Stop every worker started here (with its executors) and wait until the master has dropped them."""
        workers, self.workers = self.workers, []
        for proc in workers:
            stop(proc)
        self.wait_no_worker()

    def stop(self) -> None:
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            stop(proc)
        self.workers = []
