"""Local masters' Python workers import the installed, compiled pyspark rather than Spark's
pyspark.zip, py4j zip and spark-core jar (walctl.spark.worker / walctl.spark.daemon), and keep
those archives when no pyspark is installed beside the interpreter."""

from __future__ import annotations

import sys

from walctl.spark import worker


def test_spark_archives_are_told_from_other_path_entries():
    assert worker.spark_zip("/opt/spark/python/lib/pyspark.zip")
    assert worker.spark_zip("/opt/spark/python/lib/py4j-0.10.9.9-src.zip")
    assert worker.spark_zip("/venv/site-packages/pyspark/jars/spark-core_2.13-4.3.0.jar")
    assert not worker.spark_zip("/usr/lib/python311.zip")
    assert not worker.spark_zip("/work/userFiles-1/deps.zip")
    assert not worker.spark_zip("/work/lib/other.jar")
    assert not worker.spark_zip("/venv/site-packages")


def test_archives_go_only_when_pyspark_is_importable_without_them(monkeypatch, tmp_path):
    archives = [str(tmp_path / "lib" / "pyspark.zip"), str(tmp_path / "lib" / "py4j-0.10.9.9-src.zip")]
    monkeypatch.setattr(sys, "path", [*archives, *sys.path])
    worker.without_spark_zips()
    assert not any(p in sys.path for p in archives)  # the installed pyspark and py4j are found
    monkeypatch.setattr(sys, "path", [*archives, str(tmp_path)])  # nothing else holds pyspark
    saved = list(sys.path)
    worker.without_spark_zips()
    assert sys.path == saved


def test_a_local_jobs_worker_runs_the_installed_pyspark(spark):
    from walctl.spark.session import ship_walctl

    sc = spark.sparkContext
    ship_walctl(sc)

    def where(_):
        import sys as worker_sys

        import pyspark

        return pyspark.__file__, [p for p in worker_sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p]

    ((module, archives),) = sc.parallelize([0], 1).map(where).collect()
    assert ".zip" not in module and archives == []


class FakeJVM:
    """The JVM's side of a worker's connection (PythonWorkerFactory): accepts one connection,
    checks the length-prefixed secret, answers "ok", and keeps every byte the worker sent."""

    def __init__(self, secret: str | None, unix_path: str | None = None):
        import socket
        import threading

        self.secret, self.received = secret, b""
        if unix_path:
            self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.server.bind(unix_path)
        else:
            self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        import struct

        conn, _ = self.server.accept()
        with conn, conn.makefile("rwb") as f:
            if self.secret is not None:
                (n,) = struct.unpack("!i", f.read(4))
                got = f.read(n)
                self.received += struct.pack("!i", n) + got
                reply = b"ok" if got == self.secret.encode() else b"no"
                f.write(struct.pack("!i", len(reply)) + reply)
                f.flush()
            self.received += f.read(4)  # the worker's pid

    def done(self) -> bytes:
        self.thread.join(10)
        self.server.close()
        return self.received


def test_the_worker_connects_back_as_pyspark_does_before_importing_it(monkeypatch, tmp_path):
    """walctl.spark.worker.connect (made before pyspark is imported, so Spark may start the next
    worker meanwhile) sends the JVM exactly what pyspark's own get_sock_file_to_executor sends,
    over TCP with the secret and over a Unix socket without one."""
    import os
    import struct

    import pytest

    worker_util = pytest.importorskip("pyspark.worker_util")
    if not hasattr(worker_util, "get_sock_file_to_executor"):
        pytest.skip("this pyspark connects its workers another way; walctl.spark.worker runs it as it is")
    assert worker.knows_protocol()
    for unix in (False, True):
        sent = []
        for ours in (True, False):
            monkeypatch.delenv("PYTHON_WORKER_FACTORY_SOCK_PATH", raising=False)
            monkeypatch.delenv("PYTHON_WORKER_FACTORY_PORT", raising=False)
            monkeypatch.delenv("PYTHON_WORKER_FACTORY_SECRET", raising=False)
            if unix:
                path = str(tmp_path / f"w-{ours}.sock")
                jvm = FakeJVM(None, path)
                monkeypatch.setenv("PYTHON_WORKER_FACTORY_SOCK_PATH", path)
            else:
                jvm = FakeJVM("s3cret")
                monkeypatch.setenv("PYTHON_WORKER_FACTORY_PORT", str(jvm.server.getsockname()[1]))
                monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "s3cret")
            if ours:
                worker.connect().close()
            else:
                with worker_util.get_sock_file_to_executor():
                    pass
            sent.append(jvm.done())
        assert sent[0] == sent[1]
        assert sent[0].endswith(struct.pack("!i", os.getpid()))
        if not unix:
            assert sent[0].startswith(struct.pack("!i", 6) + b"s3cret")


def test_a_wrong_secret_is_refused(monkeypatch):
    import pytest

    jvm = FakeJVM("right")
    monkeypatch.delenv("PYTHON_WORKER_FACTORY_SOCK_PATH", raising=False)
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_PORT", str(jvm.server.getsockname()[1]))
    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", "wrong")
    with pytest.raises(ConnectionError):
        worker.connect()
    jvm.done()


def test_a_quiet_run_starts_its_jvm_with_the_quiet_log_config_a_debug_run_does_not():
    """Without --debug (Spark's log OFF) the JVM walctl starts gets walctl's log4j2 config, so
    Spark's start-up warnings (loopback hostname, native-hadoop) and its announcement of a
    default level stay off stderr; with --debug (WARN) Spark's own defaults apply."""
    import os

    from walctl.spark import session as job

    quiet = job.jvm_settings("OFF")["spark.driver.extraJavaOptions"]
    assert f"-Dlog4j2.configurationFile=file:{job.QUIET_LOG_CONFIG}" in quiet
    assert quiet.startswith(job.JVM_CONF["spark.driver.extraJavaOptions"])  # the JVM's sizing kept
    assert job.jvm_settings("WARN") == job.JVM_CONF
    with open(job.QUIET_LOG_CONFIG) as f:
        text = f.read()
    assert "rootLogger.level = warn" in text and "threshold.level = error" in text
    assert os.path.basename(job.QUIET_LOG_CONFIG) in open(
        os.path.join(os.path.dirname(job.__file__), "..", "..", "pyproject.toml")).read()  # shipped in the wheel
