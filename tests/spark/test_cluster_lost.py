"""compact on a standalone cluster that cannot finish its job: no worker at all (the master waits
for one for ever: "requires more resource than any of Workers could have"), or its only worker
SIGKILLed, with its executor, in the middle of the job. --task-timeout bounds the run: the job
is cancelled, what it wrote is rolled back, nothing is committed, exit 6 with one line.
On main these runs never ended (the subprocess timeout here fails them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from typer.testing import CliRunner

from walctl.cli import app
from walctl.errors import EXIT_IO
from walctl.store import S3Store
from walctl.store import manifest as mf

from storehelpers import put_objects, read_back

pytestmark = pytest.mark.slow
PREFIX = "walctl-test"
# Past the timeout, the run still cancels the job, deletes what it wrote and stops its JVM.
ROLLBACK_S = 60
RUN_LIMIT_S = 240  # the subprocess's own timeout: a run that hangs (main) fails here


@pytest.fixture
def cluster(standalone_cluster):
    """The session's master with no worker yet (tests start theirs)."""
    return standalone_cluster


def _store(s3_server, s3_bucket):
    store = S3Store(s3_bucket, PREFIX, endpoint_url=s3_server)
    # 4 SSOs of 3 streams: stream 1 (24 KB) becomes an SO at --split-size 8KiB, streams 2 and 3 an
    # SSO: two outputs, so the job has written one when it pauses after its first piece.
    put_objects(store, [[(1, 3, 2000), (2, 2, 700), (3, 1, 300)] for _ in range(4)])
    return store


def _compact(cluster, s3_server, s3_bucket, timeout: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "walctl", "compact", "--store", f"s3://{s3_bucket}/{PREFIX}",
                             "--endpoint-url", s3_server, "--master", cluster.url, "--level", "sso",
                             "--split-size", "8KiB", "--task-timeout", timeout, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.env)


def _finish(proc: subprocess.Popen) -> tuple[int, dict, str]:
    try:
        out, err = proc.communicate(timeout=RUN_LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, json.loads(out) if out.strip() else {}, err.decode()


def _assert_unchanged(store, s3_client, s3_bucket, before: mf.Manifest, data: dict) -> None:
    """Nothing committed, nothing left half-written: the same live objects, each whole, and no other
    object or open upload in the bucket (the prepared ids stay in the manifest, for gc)."""
    after = mf.load_latest(store)
    assert after.objects == before.objects and after.deleting == before.deleting
    assert after.prepared  # the run had fenced and prepared: its ids stay for gc
    assert read_back(store) == data
    for sid, batches in data.items():  # `walctl read` serves every record, checksums checked
        result = CliRunner().invoke(app, ["read", "--store", f"s3://{s3_bucket}/{PREFIX}", "--endpoint-url",
                                          store.endpoint_url, "--stream", str(sid), "--json"])
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1])["records"] == len(batches)
    keys = {o["Key"].removeprefix(f"{PREFIX}/") for o in s3_client.list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert {k for k in keys if not k.startswith("manifest/")} == {o.key for o in after.objects}
    assert not s3_client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads")


def _assert_one_line_exit_6(code: int, out: dict, err: str, cluster) -> list[str]:
    """One error line (and the JVM's own "Using incubator modules" warning), no traceback, no Spark
    log; returns the warnings before it."""
    assert code == EXIT_IO, err[-3000:]
    *warnings, line = [ln for ln in err.splitlines() if not ln.startswith("WARNING: Using incubator modules")]
    assert line.startswith("walctl: error: the Spark job did not finish within"), err[-3000:]
    assert "no executor ran it" in line and cluster.url in line and "nothing was committed" in line
    assert out["error"]["code"] == EXIT_IO and out["commit_number"] is None and out["rolled_back"]
    assert len(warnings) <= 1, err[-3000:]
    for warning in warnings:  # the wait for executors, said long before the timeout
        assert warning.startswith("walctl: warning: the Spark job has had no executor for"), err[-3000:]
        assert cluster.url in warning and "--task-timeout" in warning
    return warnings


def test_no_worker_fails_within_the_task_timeout(cluster, s3_server, s3_bucket, s3_client):
    store = _store(s3_server, s3_bucket)
    before, data = mf.load_latest(store), read_back(store)
    started = time.monotonic()
    code, out, err = _finish(_compact(cluster, s3_server, s3_bucket, "3s"))
    elapsed = time.monotonic() - started
    (warning,) = _assert_one_line_exit_6(code, out, err, cluster)  # after half the timeout
    assert "within 3s" in err and out["task_timeout_seconds"] == 3
    assert elapsed < 3 + ROLLBACK_S + 60, elapsed  # (60: the JVM's start on a busy 2-core machine)
    _assert_unchanged(store, s3_client, s3_bucket, before, data)


def test_worker_killed_mid_job_fails_within_the_task_timeout(cluster, tmp_path, s3_server, s3_bucket, s3_client):
    store = _store(s3_server, s3_bucket)
    before, data = mf.load_latest(store), read_back(store)
    paused = tmp_path / "task-paused"
    worker = cluster.start_worker(tmp_path, {"WALCTL_FAILPOINT": "compact-task-after-piece:pause",
                                             "WALCTL_FAILPOINT_READY": str(paused)})
    # Counted from the job's start, or its executor's registration if that comes later (the executor
    # JVM's start, slow on a busy machine, is not in it): the task's Python worker starts, and the
    # task writes its first output, well within it (6.4 s at load 9.6 on 2 cores). The run then waits
    # out what is left of it after the kill (A/B, the master up in both: 20 s, 35.7 s twice; 12 s, 27.4-29.1 s).
    timeout_s = 12
    proc = _compact(cluster, s3_server, s3_bucket, f"{timeout_s}s")
    started = time.monotonic()
    try:
        while not paused.exists():  # the task wrote its first output and waits there
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - started < RUN_LIMIT_S, "the task never reached its pause"
            time.sleep(0.1)
        written = {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket)["Contents"]}
        assert len([k for k in written if "/manifest/" not in k]) > len(before.objects)  # one output is there
        os.killpg(worker.pid, signal.SIGKILL)  # the worker, its executor and its Python worker
        worker.wait()
        killed = time.monotonic()
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    code, out, err = _finish(proc)
    _assert_one_line_exit_6(code, out, err, cluster)
    assert time.monotonic() - killed < timeout_s + ROLLBACK_S  # (less of the timeout was left)
    _assert_unchanged(store, s3_client, s3_bucket, before, data)
