"""compact on a real Spark standalone cluster: a master (the session's) and one worker from the installed
pyspark, on 127.0.0.1 only, always stopped at teardown; the store is S3 (moto over HTTP)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from walctl.spark.session import JVM_CONF
from walctl.store import S3Store, open_store
from walctl.store import manifest as mf

from storehelpers import put_objects, read_back


@pytest.fixture
def standalone(standalone_cluster, tmp_path):
    """spark://127.0.0.1:PORT with one worker (1 core, 1 GiB) of this test's, its work directory
    ``work_dir``; its processes inherit the moto server's fake credentials from os.environ, as
    executors would get an instance role's."""
    standalone_cluster.start_worker(tmp_path)
    return SimpleNamespace(url=standalone_cluster.url, env=standalone_cluster.env, work_dir=tmp_path / "work")


@pytest.mark.slow
def test_compact_s3_store_on_a_standalone_cluster(standalone, s3_server, s3_bucket):
    store = S3Store(s3_bucket, "walctl-test", endpoint_url=s3_server)
    put_objects(store, [[(1, 3, 2000), (2, 2, 700), (3, 1, 300)] for _ in range(4)])
    before = read_back(store)
    count = len(mf.load_latest(store).objects)
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--store", f"s3://{s3_bucket}/walctl-test",
                           "--endpoint-url", s3_server, "--master", standalone.url, "--level", "sso", "--json"],
                          capture_output=True, env=standalone.env, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    out = json.loads(proc.stdout)
    assert not out["idle"] and out["commit_number"] is not None and out["objects_in"] == count
    assert read_back(store) == before
    assert len(mf.load_latest(store).objects) < count
    # the tasks ran in the worker's executor, which fetched the walctl zip the job shipped
    shipped = glob.glob(str(standalone.work_dir / "app-*" / "*" / "walctl.zip"))
    assert shipped, sorted(glob.glob(str(standalone.work_dir / "**"), recursive=True))[:50]

    # The same through spark-submit, as README's YARN and Kubernetes lines do it.
    put_objects(store, [[(1, 2, 500), (4, 1, 100)] for _ in range(2)])
    before = read_back(store)
    import walctl

    main_py = os.path.join(os.path.dirname(walctl.__file__), "__main__.py")
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    proc = subprocess.run([submit, "--master", standalone.url, "--conf", f"spark.pyspark.python={sys.executable}",
                           # (its driver JVM: the options walctl gives the JVM it starts itself, ~half the CPU)
                           "--driver-java-options", JVM_CONF["spark.driver.extraJavaOptions"],
                           main_py, "compact", "--store", f"s3://{s3_bucket}/walctl-test", "--endpoint-url",
                           s3_server, "--master", standalone.url, "--level", "sso", "--json"],
                          capture_output=True, env=standalone.env, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    out = json.loads(proc.stdout)
    assert out["commit_number"] is not None and out["objects_in"] == 3
    assert read_back(store) == before
    assert len(glob.glob(str(standalone.work_dir / "app-*"))) == 2  # both ran on the cluster


def test_local_directory_store_with_a_cluster_master_is_refused(tmp_path):
    store_dir = tmp_path / "store"
    put_objects(open_store(str(store_dir)), [[(1, 1, 100), (2, 1, 100)]])
    args = [sys.executable, "-m", "walctl", "compact", "--store", str(store_dir), "--master",
            "spark://127.0.0.1:1", "--level", "sso", "--json"]
    proc = subprocess.run(args, capture_output=True, timeout=120)
    assert proc.returncode == 5
    assert b"--shared-path" in proc.stderr and proc.stderr.count(b"\n") == 1
    # with --shared-path it is allowed (idle here: one SSO, so Spark is not even started)
    proc = subprocess.run(args + ["--shared-path"], capture_output=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["idle"] is True, proc.stderr.decode()
