"""A real Spark standalone cluster for the tests: a master and workers from the installed pyspark, on
127.0.0.1 only, each in a process group of its own (a worker's executors and their Python workers
included), so a test can SIGKILL a worker with everything it runs, and teardown stops them all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 90


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
    as executors would get an instance role's). ``url``, ``env`` (for a driver), ``work_dir``."""

    def __init__(self, tmp_path: Path):
        import pyspark

        self.tmp_path = tmp_path
        self.spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
        self.env = dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                        SPARK_LOG_DIR=str(tmp_path))
        self.url = f"spark://127.0.0.1:{free_port()}"
        self.work_dir = tmp_path / "work"
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, args: list[str], ready: str, env: dict) -> subprocess.Popen:
        log_path = self.tmp_path / f"{name}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([self.spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        self.procs.append(proc)
        wait_for(log_path, ready, proc)
        return proc

    def start_master(self) -> subprocess.Popen:
        port = self.url.rpartition(":")[2]
        return self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                      port, "--webui-port", str(free_port())], "I have been elected leader", self.env)

    def start_worker(self, extra_env: dict | None = None) -> subprocess.Popen:
        """One worker (1 core, 1 GiB); ``extra_env`` reaches its executors and their Python workers."""
        n = sum(1 for p in self.tmp_path.glob("worker*.log"))
        return self._start(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                          "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                                          "--work-dir", str(self.work_dir)],
                           "Successfully registered with master", dict(self.env, **(extra_env or {})))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)
