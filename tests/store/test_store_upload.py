"""upload / inspect-object / ls / gc end to end, on the local directory and on S3 over HTTP."""

from __future__ import annotations

import json
import os
import time

import pytest

from walctl.errors import CorruptionError, IOFailure, NotFoundError, RefusedError
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.store import manifest as mf
from walctl.store.gc import gc
from walctl.store.inspect import inspect
from walctl.pipeline.upload import upload
from walctl.wal.lifecycle import init_wal, open_writer

from storehelpers import append, expect, make_wal, merge, read_back
from walhelpers import run_walctl as walctl

KiB, MiB = 1 << 10, 1 << 20
LATER = time.time() + 2 * mf.PREPARE_TTL_S  # when every prepared id has expired


def test_upload_round_trip_byte_for_byte(tmp_path, store):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (30, 500), 2: (10, 200), 3: (5, 4000)})
    result = upload(wal, store, block_size=4 * KiB, split_size=1 * MiB)
    assert [o["kind"] for o in result.objects] == ["SSO"]
    assert result.records == 45 and result.trimmed_to is not None
    assert read_back(store) == expect(appended)
    # inspect: footer + index in one read; --deep finds nothing wrong
    key = result.objects[0]["key"]
    plain = inspect(store, key)
    assert plain.reads == 1 and len(plain.entries) >= 3
    deep = inspect(store, key, deep=True)
    assert deep.problems == []
    doc = mf.load_latest(store)
    assert doc.streams == {1: mf.StreamSpan(0, 30), 2: mf.StreamSpan(0, 10), 3: mf.StreamSpan(0, 5)}
    assert doc.prepared == [] and doc.wal_uploads["-1"].offset == result.last_offset


def test_split_size_and_single_stream(tmp_path, store):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (40, 1000), 2: (3, 100), 5: (2, 100)})
    result = upload(wal, store, split_size=20 * KiB)
    kinds = sorted((o["kind"], tuple(r["stream_id"] for r in o["streams"])) for o in result.objects)
    assert kinds == [("SO", (1,)), ("SSO", (2, 5))]
    more = append(wal, {7: (4, 50)}, store)
    result = upload(wal, store)
    assert [(o["kind"], [r["stream_id"] for r in o["streams"]]) for o in result.objects] == [("SO", [7])]
    assert read_back(store) == expect(merge(appended, more))


def test_rerun_is_idempotent_and_continues(tmp_path, store):
    wal = make_wal(tmp_path)
    first = append(wal, {1: (10, 100), 2: (10, 100)})
    upload(wal, store)
    again = upload(wal, store)
    assert again.records == 0 and again.objects == []
    second = append(wal, {1: (5, 100), 2: (1, 100)}, store)
    r = upload(wal, store, trim=False)
    assert r.records == 6
    r2 = upload(wal, store)  # not trimmed last time: those records are skipped, then trimmed
    assert r2.records == 0 and r2.skipped_records == 6 and r2.trimmed_to == r.last_offset
    assert read_back(store) == expect(merge(first, {1: second[1], 2: second[2]}))
    got = read_back(store)
    assert [o for o, _ in got[1]] == list(range(15))


def test_gap_against_the_store_is_refused(tmp_path, store):
    wal = make_wal(tmp_path)
    append(wal, {1: (3, 100)})
    upload(wal, store)
    writer = open_writer(wal).writer
    writer.append(StreamRecordBatch(1, 0, 10, 1, b"jump").encode())  # the store ends at 3
    writer.close()
    with pytest.raises(CorruptionError) as info:
        upload(wal, store)
    assert "gap" in str(info.value) and "stream 1" in str(info.value)
    assert len(mf.load_latest(store).objects) == 1


def test_reinitialised_wal_is_not_silently_skipped(tmp_path, store):
    wal = make_wal(tmp_path)
    append(wal, {1: (5, 100)})
    upload(wal, store)
    init_wal(wal, 16 * MiB, force=True)  # same node id, offsets start again at 0
    writer = open_writer(wal).writer
    writer.append(StreamRecordBatch(9, 0, 0, 1, b"new").encode())
    writer.close()
    with pytest.raises(CorruptionError) as info:
        upload(wal, store)
    assert "node-id" in (info.value.hint or "")


def test_dry_run_writes_nothing(tmp_path, store):
    wal = make_wal(tmp_path)
    append(wal, {1: (5, 100), 2: (5, 100)})
    result = upload(wal, store, dry_run=True)
    assert result.dry_run and [o["kind"] for o in result.objects] == ["SSO"]
    assert store.list() == []


# -- inspect-object's read budget ----------------------------------------------------

def _put_object(store, key, streams, block_size):
    built = obj.build_object(streams, block_size=block_size)
    store.put_large(key, built.data)
    return built


def test_inspect_reads_at_most_twice_on_a_100_mib_object(s3_store):
    batches = [StreamRecordBatch(4, 0, i, 1, bytes([i % 256]) * (4 * MiB)) for i in range(25)]
    built = _put_object(s3_store, "big/object", [(4, batches)], block_size=1 * MiB)
    assert len(built.data) >= 100 * MiB
    before = s3_store.stats.snapshot()
    result = inspect(s3_store, "big/object")
    assert result.reads <= 2 and len(result.entries) == 25
    after = s3_store.stats.snapshot()
    assert after["get"] - before["get"] <= 2
    assert after["bytes_read"] - before["bytes_read"] < 1 * MiB


def test_inspect_with_a_large_index_takes_exactly_two_reads(store):
    # 3000 blocks: an index of 108,000 bytes, more than the first tail read catches
    batches = [StreamRecordBatch(1, 0, i, 1, b"x") for i in range(3000)]
    built = _put_object(store, "many/blocks", [(1, batches)], block_size=1)
    assert len(built.entries) == 3000
    result = inspect(store, "many/blocks")
    assert result.reads == 2 and len(result.entries) == 3000


def test_not_an_object_and_a_damaged_object(tmp_path, local_store):
    local_store.put("junk", b"hello world, not an object at all" * 10)
    with pytest.raises(NotFoundError):
        inspect(local_store, "junk")
    batches = [StreamRecordBatch(1, 0, i, 1, b"payload") for i in range(10)]
    built = obj.build_object([(1, batches)], block_size=64)
    damaged = bytearray(built.data)
    damaged[40] ^= 0xFF
    local_store.put("damaged", bytes(damaged))
    assert inspect(local_store, "damaged").problems == []  # the index is intact: the plain view is fine
    problems = inspect(local_store, "damaged", deep=True).problems
    assert problems and all(0 <= p.position < len(damaged) for p in problems)


# -- crashes and store failures ---------------------------------------------------------

@pytest.mark.parametrize("point", ["upload-after-prepare", "upload-before-commit", "upload-after-commit"])
def test_killed_at_each_step_then_rerun(tmp_path, point):
    wal = make_wal(tmp_path)
    store_dir = tmp_path / "store"
    appended = append(wal, {1: (20, 300), 2: (20, 300)})
    killed = walctl("upload", wal, "--store", store_dir, env={"WALCTL_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    from walctl.store import open_store

    store = open_store(str(store_dir))
    rerun = walctl("upload", wal, "--store", store_dir, "--json")
    assert rerun.returncode == 0, rerun.stderr
    out = json.loads(rerun.stdout)
    if point == "upload-after-commit":
        assert out["records"] == 0 and out["trimmed_to"] is not None  # committed: only the trim was left
    else:
        assert out["records"] == 40
    assert read_back(store) == expect(appended)  # nothing lost, nothing twice
    doc = mf.load_latest(store)
    orphans = len(doc.prepared)
    assert orphans == (0 if point == "upload-after-commit" else 1)
    result = gc(store, grace_s=0, now=LATER)
    assert result.forgotten_prepared == [p.id for p in doc.prepared]
    if point == "upload-before-commit":
        assert len(result.deleted_objects) == 1  # the object written before the kill
    assert mf.load_latest(store).prepared == []
    assert read_back(store) == expect(appended)
    live_keys = {o.key for o in mf.load_latest(store).objects}
    assert {i.key for i in store.list() if not i.key.startswith("manifest/")} == live_keys


def test_transient_s3_errors_are_retried(tmp_path, faulty_s3):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (10, 100), 2: (10, 100)})
    faulty_s3.proxy.fail(times=2, status=500, method="PUT")
    faulty_s3.proxy.add("drop", method="GET", times=1)
    faulty_s3.proxy.fail(times=1, status=503, method="GET")
    result = upload(wal, faulty_s3.store)
    assert result.records == 20
    assert read_back(faulty_s3.store) == expect(appended)
    assert faulty_s3.store.stats.snapshot()["retries"] >= 3


def test_persistent_s3_failure_loses_nothing(tmp_path, faulty_s3):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (10, 100), 2: (10, 100)})
    store = faulty_s3.make_store(max_attempts=2)
    faulty_s3.proxy.fail(times=None, status=500, method="PUT", path="/default/")  # object PUTs only
    with pytest.raises(IOFailure) as info:
        upload(wal, store)
    assert info.value.exit_code == 6 and "testing" not in str(info.value)
    faulty_s3.proxy.clear()
    result = upload(wal, faulty_s3.store)  # the WAL was not trimmed: everything is still there
    assert result.records == 20
    assert read_back(faulty_s3.store) == expect(appended)
    gc(faulty_s3.store, grace_s=0, now=LATER)
    assert mf.load_latest(faulty_s3.store).prepared == []


class _RacingStore:
    """Delegates to a store; the first manifest put of the commit runs a whole second upload first."""

    def __init__(self, inner, on_first_commit):
        self._inner, self._hook, self._armed = inner, on_first_commit, True

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put(self, key, data, *, if_absent=False):
        if self._armed and key.startswith("manifest/") and b'"upload"' in data:
            self._armed = False
            self._hook()
        return self._inner.put(key, data, if_absent=if_absent)


def test_two_uploaders_race_one_commits(tmp_path, store, monkeypatch):
    """The manifest's commit fencing, under the upload lease: where the lease is not there (a device
    that cannot be opened for writing uploads unguarded), two uploads race and one commits."""
    from walctl.pipeline.upload import run

    monkeypatch.setattr(run, "_take_lease", lambda *args: None)
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (10, 100), 2: (10, 100)})
    winner = {}

    def second_uploader():
        winner["result"] = upload(wal, store, trim=False)

    racing = _RacingStore(store, second_uploader)
    with pytest.raises(RefusedError) as info:
        upload(wal, racing)
    assert "committed first" in str(info.value)
    assert winner["result"].records == 20
    assert read_back(store) == expect(appended)  # exactly once
    rerun = upload(wal, store)
    assert rerun.records == 0 and rerun.trimmed_to is not None
    result = gc(store, grace_s=0, now=LATER)
    assert len(result.deleted_objects) == 1  # the loser's object
    assert read_back(store) == expect(appended)


def test_an_upload_started_during_another_finds_the_lease_held(tmp_path, store):
    """With the lease, the second upload of the race above never starts: UploadBusy (exit 5) when
    it may not wait, before it prepared or uploaded anything."""
    from walctl.pipeline.upload import UploadBusy

    wal = make_wal(tmp_path)
    appended = append(wal, {1: (10, 100), 2: (10, 100)})
    busy = {}

    def second_uploader():
        with pytest.raises(UploadBusy) as info:
            upload(wal, store, trim=False, lease_wait_s=0.0)
        busy["error"] = info.value

    first = upload(wal, _RacingStore(store, second_uploader))
    assert busy["error"].exit_code == 5 and "another upload of this WAL is running" in str(busy["error"])
    assert first.records == 20 and not mf.load_latest(store).prepared
    assert read_back(store) == expect(appended)


# -- the CLI ---------------------------------------------------------------------------

def test_cli_pipeline_and_exit_codes(tmp_path):
    wal = make_wal(tmp_path)
    store_dir = tmp_path / "store"
    append(wal, {1: (3, 10), 2: (2, 10)})
    r = walctl("upload", wal, "--store", store_dir, "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)["objects"]
    assert made[0]["kind"] == "SSO" and made[0]["size_bytes"] > 0
    r = walctl("inspect-object", made[0]["id"], "--store", store_dir, "--json", "--deep")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and lines[0]["type"] == "footer" and lines[-1]["type"] == "summary"
    assert [x["stream_id"] for x in lines if x["type"] == "index_entry"] == [1, 2]
    r = walctl("inspect-object", made[0]["key"], "--store", store_dir, "--stream", "2", "--json")
    assert [x["stream_id"] for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "index_entry"] == [2]
    # the WAL was trimmed to stream 1's last record: stream 2 has nothing left in the WAL and
    # continues from the store (stream 1 from the trimmed record itself)
    assert walctl("append", wal, "--stream", "2", "more").returncode == 2
    r = walctl("append", wal, "--stream", "2", "more", "--json", env={"WALCTL_STORE": str(store_dir)})
    assert r.returncode == 0, r.stderr
    assert [x["base_offset"] for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "record"] == [2]
    r = walctl("append", wal, "--stream", "1", "more", "--json")
    assert [x["base_offset"] for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "record"] == [3]
    obj_path = store_dir / made[0]["key"]
    assert walctl("inspect-object", obj_path).returncode == 0  # a local file needs no --store
    r = walctl("ls", "--store", store_dir, "--json")
    listing = json.loads(r.stdout)
    assert r.returncode == 0 and [s["stream_id"] for s in listing["streams"]] == [1, 2]
    assert walctl("objects", "--store", store_dir).returncode == 0
    # damage the data region: plain inspect is fine, --deep exits 3 naming the byte position
    raw = bytearray(obj_path.read_bytes())
    raw[20] ^= 0x01
    obj_path.write_bytes(bytes(raw))
    r = walctl("inspect-object", obj_path, "--deep")
    assert r.returncode == 3 and r.stderr.decode().startswith("walctl: error: ")
    assert r.stderr.decode().count("\n") == 1
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(1000))
    assert walctl("inspect-object", junk).returncode == 4
    assert walctl("inspect-object", tmp_path / "missing").returncode == 4
    assert walctl("gc", "--store", store_dir, "--grace", "0", "--json").returncode == 0
    assert walctl("gc", "--store", store_dir, "--grace", "soon").returncode == 2
    assert walctl("upload", wal, "--store", store_dir, "--block-size", "12XB").returncode == 2


# -- regressions from review ---------------------------------------------------------------

def test_upload_beside_an_active_writer_takes_only_the_prefix(tmp_path, local_store, hold_writer):
    from walhelpers import append_records, physical, poke

    wal = make_wal(tmp_path)
    acks = append_records(wal, 10, size=300, iodepth=1, flush_each=True, clean=False)
    poke(wal, physical(wal, acks[5][0]), bytes(4096))  # looks like a hole: a live writer's block in flight
    hold_writer(wal)  # holds the lock but serves no trim hand-off
    from walctl.errors import TrimPendingError
    with pytest.raises(TrimPendingError) as info:
        upload(wal, local_store, trim_timeout_s=0.3)
    result = info.value.result  # committed, but not trimmed: not a success
    assert info.value.exit_code == 8
    assert result.records == 5  # nothing after the first hole while a writer may still be writing it
    assert result.trimmed_to is None and any("writer" in w for w in result.warnings)
    assert [o for o, _ in read_back(local_store)[0]] == [0, 1, 2, 3, 4]
    assert upload(wal, local_store, trim=False).records == 0  # --no-trim: today's behaviour, explicitly


def test_inspect_reports_a_damaged_live_object_as_corruption(tmp_path, local_store):
    from walctl.errors import CorruptionError

    wal = make_wal(tmp_path)
    append(wal, {1: (5, 100)})
    key = upload(wal, local_store).objects[0]["key"]
    path = tmp_path / "store" / key
    path.write_bytes(path.read_bytes()[:-10])  # truncated: the footer is gone
    from walctl.store.inspect import resolve

    store, resolved, known = resolve(key, str(tmp_path / "store"), None)
    assert known and resolved == key
    with pytest.raises(CorruptionError):
        inspect(store, key, known=known)
    with pytest.raises(NotFoundError):  # the same bytes as a stray file are simply not an object
        inspect(store, key)


def test_manifest_argv_never_holds_secrets():
    argv = ["upload", "--endpoint-url", "http://AKIAEXAMPLE:wJalrXUtnFEMI@minio:9000", "--secret-key", "XYZ",
            "--token=abc", "/dev/vdb"]
    safe = " ".join(mf._safe_argv(argv))
    for secret in ("AKIAEXAMPLE", "wJalrXUtnFEMI", "XYZ", "abc"):
        assert secret not in safe
    assert "minio:9000" in safe and "/dev/vdb" in safe


def test_gc_grace_does_not_expire_an_upload_in_progress(local_store):
    def prepare(m):
        m.prepare(2, "default")

    mf.commit(local_store, prepare, command="test prepare")
    result = gc(local_store, grace_s=0)
    assert result.forgotten_prepared == [] and len(mf.load_latest(local_store).prepared) == 2
    result = gc(local_store, grace_s=0, now=LATER)
    assert sorted(result.forgotten_prepared) == [1, 2]
