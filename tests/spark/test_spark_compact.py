"""compact end to end: a real local[2] Spark job against the local store and S3 over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from walctl.errors import RefusedError
from walctl.store import manifest as mf
from walctl.store import open_store
from walctl.store.gc import gc
from walctl.pipeline.upload import upload
from walctl.spark.compact import compact

from storehelpers import append, expect, make_wal, merge, read_back

pytestmark = pytest.mark.slow
KiB, MiB = 1 << 10, 1 << 20
LATER = time.time() + 2 * mf.PREPARE_TTL_S  # when every prepared id has expired


def fill(tmp_path, store, rounds=6, streams=(1, 2, 3, 4), count=8, size=700):
    """Several uploads of a multi-stream WAL: one small SSO each."""
    wal = make_wal(tmp_path)
    appended: dict = {}
    for _ in range(rounds):
        more = append(wal, {s: (count, size) for s in streams}, store)
        upload(wal, store, block_size=2 * KiB)
        appended = merge(appended, more)
    return wal, appended


def objects_per_stream(store) -> dict[int, int]:
    doc = mf.load_latest(store)
    out: dict[int, int] = {}
    for o in doc.objects:
        for r in o.ranges:
            out[r.stream_id] = out.get(r.stream_id, 0) + 1
    return out


def test_compaction_keeps_every_byte_with_fewer_objects(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store)
    before_objects = len(mf.load_latest(local_store).objects)
    before_reads = objects_per_stream(local_store)
    result = compact(local_store, local_store.url, spark=spark, split_size=1 * MiB)
    assert not result.idle and result.commit_number is not None
    doc = mf.load_latest(local_store)
    assert len(doc.objects) < before_objects and len(doc.deleting) == before_objects
    assert read_back(local_store) == expect(appended)
    after_reads = objects_per_stream(local_store)
    assert all(after_reads[s] < before_reads[s] for s in before_reads)  # fewer GETs per stream
    summary = result.to_json()
    assert summary["objects_in"] == before_objects and summary["objects_out"] == len(doc.objects)
    assert summary["gets"] > 0 and summary["puts"] == summary["objects_out"]
    # the replaced objects stay for readers until gc's grace has passed
    assert gc(local_store, grace_s=3600).deleted_objects == []
    assert len(gc(local_store, grace_s=0, now=LATER).deleted_objects) == before_objects
    assert read_back(local_store) == expect(appended)


def test_big_streams_become_stream_objects(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, streams=(1, 2), count=10, size=3000)
    result = compact(local_store, local_store.url, spark=spark, split_size=100 * KiB)
    kinds = sorted((o.kind, tuple(r.stream_id for r in o.ranges)) for o in mf.load_latest(local_store).objects)
    assert kinds == [("SO", (1,)), ("SO", (2,))]
    assert read_back(local_store) == expect(appended)
    assert result.objects_out == 2


def test_memory_limit_makes_iterations_each_under_the_limit(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, rounds=5, count=10, size=1500)
    limit = 48 * KiB
    result = compact(local_store, local_store.url, spark=spark, memory_limit=limit, split_size=1 * MiB)
    iterations = result.plan.iterations
    assert len(iterations) >= 3
    for it in iterations:
        assert it.data_bytes <= limit
    held = [task["bytes_read"] for task in result.tasks]  # what each iteration's task really read
    assert len(held) == len(iterations) and max(held) <= limit
    # one SSO however many iterations: its pieces were the parts of one object
    assert [m["kind"] for m in result.made] == ["SSO"] and result.made[0]["parts"] == len(iterations)
    assert read_back(local_store) == expect(appended)


def test_retention_drops_exactly_the_expired_blocks(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, streams=(1, 2), count=8, size=900)
    # blocks of stream 1: 2 KiB each = 2 records; offsets [0,2) [2,4) ... per upload
    result = compact(local_store, local_store.url, spark=spark, split_size=1 * MiB, retention={1: 10})
    dropped = [(d.range.stream_id, d.range.start_offset, d.range.end_offset) for d in result.plan.dropped]
    assert dropped and all(s == 1 and end <= 10 for s, _, end in dropped)
    got = read_back(local_store)
    assert got[2] == expect(appended)[2]
    first_kept = got[1][0][0]
    assert first_kept <= 10 and got[1] == expect(appended)[1][first_kept:]
    assert all(end > 10 for s, _, end in [(1, 0, r.end) for o in mf.load_latest(local_store).objects
                                          for r in o.ranges if r.stream_id == 1])
    assert mf.load_latest(local_store).stream(1).start == 10


def test_idle_store_exits_without_spark(tmp_path, local_store):
    fill(tmp_path, local_store, rounds=1)
    result = compact(local_store, local_store.url, master="bogus://no-spark-here")
    assert result.idle and result.commit_number is None


def test_dry_run_writes_nothing(tmp_path, local_store):
    fill(tmp_path, local_store, rounds=3)
    before = [i.key for i in local_store.list()]
    result = compact(local_store, local_store.url, dry_run=True, master="bogus://no-spark-here")
    assert result.dry_run and len(result.plan.outputs) >= 1 and result.plan.gets >= 1
    assert [i.key for i in local_store.list()] == before


class _FenceStore:
    """Delegates to a store; before the final compact commit, a second compactor runs to the end."""

    def __init__(self, inner, second):
        self._inner, self._second, self._armed = inner, second, True

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put(self, key, data, *, if_absent=False):
        if self._armed and key.startswith("manifest/") and b'"compact"' in data:
            self._armed = False
            self._second()
        return self._inner.put(key, data, if_absent=if_absent)


def test_two_compactors_one_commits_the_other_is_fenced(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store)
    second = {}

    def run_second():
        second["result"] = compact(local_store, local_store.url, spark=spark, split_size=1 * MiB)

    with pytest.raises(RefusedError) as info:
        compact(_FenceStore(local_store, run_second), local_store.url, spark=spark, split_size=1 * MiB)
    assert "fenced" in str(info.value)
    assert second["result"].commit_number is not None
    assert read_back(local_store) == expect(appended)
    orphans = len(mf.load_latest(local_store).prepared)
    assert orphans >= 1  # the fenced run's outputs
    gc(local_store, grace_s=0, now=LATER)
    assert mf.load_latest(local_store).prepared == []
    assert read_back(local_store) == expect(appended)
    live = {o.key for o in mf.load_latest(local_store).objects}
    assert {i.key for i in local_store.list() if not i.key.startswith("manifest/")} == live


def test_compaction_on_s3(tmp_path, spark, s3_store, s3_server):
    _, appended = fill(tmp_path, s3_store, rounds=4)
    url = f"s3://{s3_store.bucket}/{s3_store.prefix}"
    result = compact(s3_store, url, endpoint_url=s3_server, spark=spark, split_size=1 * MiB)
    assert result.commit_number is not None
    assert read_back(s3_store) == expect(appended)
    assert len(mf.load_latest(s3_store).objects) < 4


def test_cli_killed_mid_way_commits_nothing_then_rerun(tmp_path, spark):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    _, appended = fill(tmp_path, store, rounds=3)
    before = mf.load_latest(store)
    env = dict(os.environ, WALCTL_FAILPOINT="compact-before-commit")
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--store", str(store_dir), "--master",
                           "local[1]", "--json"], capture_output=True, env=env, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    after = mf.load_latest(store)
    assert after.objects == before.objects  # nothing replaced
    assert after.compactor_epoch == before.compactor_epoch + 1 and after.prepared
    result = compact(store, str(store_dir), spark=spark, split_size=1 * MiB)
    assert result.commit_number is not None
    assert read_back(store) == expect(appended)
    gc(store, grace_s=0, now=LATER)
    assert read_back(store) == expect(appended)
    assert mf.load_latest(store).prepared == []
    # idle now (one SSO), and the CLI says so at once, as JSON
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--store", str(store_dir), "--json"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["idle"] is True


def test_read_rate_is_respected_within_ten_percent(tmp_path, spark, local_store):
    _, appended = fill(tmp_path, local_store, rounds=4, count=8, size=3000)  # ~400 KB to read
    rate = 0.1 * MiB  # bytes per second, across all tasks
    result = compact(local_store, local_store.url, spark=spark, split_size=1 * MiB, read_rate_bps=rate)
    assert len(result.tasks) == 1  # one task: its rate is the whole budget
    made = result.tasks[0]
    achieved = made["bytes_read"] / made["read_seconds"]
    assert made["read_seconds"] > 2.0, "the run must be long enough to measure the pace"
    assert 0.9 * rate <= achieved <= 1.1 * rate, f"achieved {achieved / MiB:.3f} MiB/s for a limit of 0.1"
    assert result.to_json()["read_rate_limit_mib_per_s"] == 0.1
    assert read_back(local_store) == expect(appended)
