"""Issue 20: compaction converges (<= 1 SSO per run, an idle rerun), SOs span iterations as one
multipart object, GETs are the plan's minimum, retention is bounded, executor errors classified."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from walctl.errors import NotFoundError, UsageError
from walctl.format.object import verify_object
from walctl.spark.compact import compact
from walctl.spark.classify import CREDENTIALS_HINT, PYTHON_HINT, SHARED_PATH_HINT, classify, task_error
from walctl.spark.task import IterationSpec, run_iteration
from walctl.store import manifest as mf

from storehelpers import append, expect, make_wal, merge, read_back
from walctl.pipeline.upload import upload
from test_spark_compact import fill

pytestmark = pytest.mark.slow
KiB, MiB = 1 << 10, 1 << 20


def kinds(store) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((o.kind, tuple(r.stream_id for r in o.ranges))
                  for o in mf.load_latest(store).objects)


def walctl(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walctl", *args], capture_output=True, timeout=timeout,
                          env=env if env is not None else dict(os.environ))


def test_second_compaction_of_a_compacted_store_writes_nothing(tmp_path, spark, local_store):
    # stream 1 is big (an SO), streams 2-4 small: at a 40 KiB limit the run takes several iterations
    wal, appended = make_wal(tmp_path), {}
    for _ in range(5):
        appended = merge(appended, append(wal, {1: (12, 3000), 2: (4, 700), 3: (4, 700), 4: (4, 700)},
                                          local_store))
        upload(wal, local_store, block_size=2 * KiB)
    assert kinds(local_store) == [("SSO", (1, 2, 3, 4))] * 5
    first = compact(local_store, local_store.url, spark=spark, memory_limit=40 * KiB, split_size=100 * KiB)
    assert len(first.plan.iterations) >= 3
    assert kinds(local_store) == [("SO", (1,)), ("SSO", (2, 3, 4))]  # at most one SSO, one SO per stream
    assert read_back(local_store) == expect(appended)
    before = (mf.load_latest(local_store).number, sorted(i.key for i in local_store.list()))
    # the rerun, as cron would do it: idle, exit 0, nothing written, Spark never started
    proc = walctl("compact", "--store", local_store.url, "--memory-limit", "40KiB", "--split-size", "100KiB",
                  "--master", "spark://127.0.0.1:1", "--shared-path", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["idle"] is True and out["bytes_written"] == 0 and out["puts"] == 0
    assert (mf.load_latest(local_store).number, sorted(i.key for i in local_store.list())) == before


def test_a_stream_object_spans_iterations_as_one_multipart_object(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, rounds=4, streams=(1, 2), count=10, size=3000)
    limit = 32 * KiB
    result = compact(local_store, local_store.url, spark=spark, memory_limit=limit, split_size=50 * KiB)
    assert kinds(local_store) == [("SO", (1,)), ("SO", (2,))]
    by_kind = {m["key"]: m for m in result.made}
    assert all(m["parts"] >= 3 for m in by_kind.values())  # each SO written in pieces, across iterations
    assert result.to_json()["puts"] == result.plan.puts
    assert all(t["bytes_read"] <= limit for t in result.tasks)
    for key in by_kind:  # whole, valid objects: index, footer, data CRC across the parts
        assert verify_object(local_store.read_all(key)) == []
    assert read_back(local_store) == expect(appended)


def test_small_streams_never_become_stream_objects(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, rounds=4, streams=(1, 2, 3), count=6, size=900)
    compact(local_store, local_store.url, spark=spark, memory_limit=8 * KiB, split_size=1 * MiB)
    assert kinds(local_store) == [("SSO", (1, 2, 3))]
    assert read_back(local_store) == expect(appended)


def test_gets_equal_the_plans_minimum(tmp_path, spark, faulty_s3, fault_proxy):
    store = faulty_s3.store
    # three streams, each an SO of ~60 KB: at a 100 KiB limit one iteration per SO (S3 parts
    # must be >= 5 MiB, so none is cut), each reading from every source object
    _, appended = fill(tmp_path, store, rounds=4, streams=(1, 2, 3, 4), count=8, size=2000)
    url = f"s3://{faulty_s3.bucket}/{faulty_s3.prefix}"
    dry = compact(store, url, endpoint_url=fault_proxy.url, dry_run=True, memory_limit=100 * KiB,
                  split_size=40 * KiB)
    fault_proxy.clear()
    result = compact(store, url, endpoint_url=fault_proxy.url, spark=spark, memory_limit=100 * KiB,
                     split_size=40 * KiB)
    assert len(result.plan.iterations) >= 3 and result.plan.gets == dry.plan.gets
    ranged = [e for e in fault_proxy.seen("GET") if any(k.lower() == "range" for k in e.headers)]
    assert len(ranged) == dry.plan.gets + result.index_gets  # data GETs: exactly the plan's minimum
    assert result.to_json()["data_gets"] == dry.plan.gets
    # the minimum: per iteration, one GET per source object holding its blocks (all adjacent here)
    per_iteration = [len({r.object_id for r in it.reads}) for it in result.plan.iterations]
    assert dry.plan.gets == sum(per_iteration)
    assert read_back(store) == expect(appended)


def test_retention_past_a_streams_end_is_refused(tmp_path, local_store):
    fill(tmp_path, local_store, rounds=2, streams=(1, 2), count=4, size=500)
    doc = mf.load_latest(local_store)
    end = doc.stream(1).end
    with pytest.raises(UsageError, match="past the end of stream 1"):
        compact(local_store, local_store.url, retention={1: end + 1000}, master="bogus://never")
    with pytest.raises(NotFoundError, match="no stream 9"):
        compact(local_store, local_store.url, retention={9: 1}, master="bogus://never")
    proc = walctl("compact", "--store", local_store.url, "--retention-start", f"1:{end + 1000}", "--json")
    assert proc.returncode == 2 and proc.stderr.decode().count("\n") == 1
    assert json.loads(proc.stdout)["error"]["code"] == 2
    assert mf.load_latest(local_store).number == doc.number  # nothing written
    plan = compact(local_store, local_store.url, retention={1: end}, dry_run=True).plan  # at the end: all dropped
    assert all(d.range.stream_id == 1 for d in plan.dropped) and plan.dropped


# --- executor errors --------------------------------------------------------------------------

def test_store_path_missing_on_the_executor_is_classified(tmp_path):
    result = run_iteration(IterationSpec(str(tmp_path / "not-here"), None, 0, (), ()))
    err = task_error(result["error"])
    assert err.exit_code == 4 and err.hint == SHARED_PATH_HINT and "no such store directory" in err.what
    assert not (tmp_path / "not-here").exists()  # an executor never creates the store


def test_executor_failures_become_walctl_errors():
    worker = ("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
              '  File "/x/worker.py", line 1, in main\n')
    missing = classify(Exception(worker + "ModuleNotFoundError: No module named 'crc32c'\n\tat org.apache..."))
    assert (missing.exit_code, missing.hint) == (4, PYTHON_HINT) and "'crc32c'" in missing.what
    creds = classify(Exception(worker + "botocore.exceptions.NoCredentialsError: Unable to locate credentials"))
    assert (creds.exit_code, creds.hint) == (6, CREDENTIALS_HINT)
    other = classify(Exception("org.apache.spark.SparkException: Job aborted\n\tat org.apache.x\n"
                               + worker + "ZeroDivisionError: division by zero"))
    assert other.exit_code == 6 and "ZeroDivisionError: division by zero" in other.what
    assert "\n" not in other.line()
    creds = task_error({"type": "IOFailure", "exit_code": 6, "what": "no usable S3 credentials", "where": "s3://b/k",
                        "hint": "configure boto3"})
    assert creds.exit_code == 6 and creds.hint == CREDENTIALS_HINT


def test_executor_without_walctls_dependencies_exits_4_with_the_pyspark_python_hint(tmp_path, local_store):
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import sys, crc32c"], capture_output=True)
    if not os.path.exists(bare) or probe.returncode == 0:
        pytest.skip("needs a Python 3.11 without crc32c at /usr/bin/python3")
    fill(tmp_path, local_store, rounds=2, streams=(1, 2), count=4, size=500)
    before = mf.load_latest(local_store).objects
    env = dict(os.environ, PYSPARK_PYTHON=bare)
    proc = walctl("compact", "--store", local_store.url, "--master", "local[1]", "--json", env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 4, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("walctl: ")]
    assert len(lines) == 1 and "cannot import 'crc32c'" in lines[0] and "PYSPARK_PYTHON" in lines[0]
    assert "Traceback" not in err
    assert json.loads(proc.stdout)["error"]["code"] == 4
    assert mf.load_latest(local_store).objects == before


def test_on_s3_a_stream_object_spans_iterations_in_parts_of_at_least_5_mib(tmp_path, spark, s3_store, s3_server):
    wal, appended = make_wal(tmp_path, capacity=32 * MiB), {}
    for _ in range(2):  # stream 1: 2 x ~6 MB (an SO), stream 2 small (so each upload is an SSO)
        appended = merge(appended, append(wal, {1: (100, 60_000), 2: (4, 500)}, s3_store))
        upload(wal, s3_store)
    assert [k for k, _ in kinds(s3_store)] == ["SSO", "SSO"]
    url = f"s3://{s3_store.bucket}/{s3_store.prefix}"
    result = compact(s3_store, url, endpoint_url=s3_server, spark=spark, memory_limit=6 * MiB,
                     split_size=1 * MiB)
    (so,) = [o for o in result.plan.outputs if o.kind == "SO"]
    assert len(so.pieces) >= 2 and all(p.data_bytes >= 5 * MiB for p in so.pieces[:-1])
    assert kinds(s3_store) == [("SO", (1,)), ("SSO", (2,))]
    key = next(m["key"] for m in result.made if m["kind"] == "SO")
    assert verify_object(s3_store.read_all(key)) == []
    assert result.to_json()["puts"] == result.plan.puts  # create + one part per piece + complete, as planned
    assert read_back(s3_store) == expect(appended)
