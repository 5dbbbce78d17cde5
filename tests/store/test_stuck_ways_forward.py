"""Issue 14 item 4: every state a kill leaves in the upload/trim/gc pipeline has a way forward
that loses nothing, and the pipeline driven through it ends with a drained WAL.

(Compaction killed before and after its commit is covered with the compaction tests.)
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from walctl.store import manifest as mf
from walctl.store import open_store
from walctl.store.gc import gc

from storehelpers import append, expect, make_wal, read_back
from walhelpers import run_walctl as walctl
from walhelpers import scan_file

LATER = time.time() + 2 * mf.PREPARE_TTL_S  # every prepared id has expired by then


def _drained(wal: str) -> bool:
    entries, scan = scan_file(wal)
    return entries == [] and scan.corrupt == []


def _only_live_objects(store) -> bool:
    live = {o.key for o in mf.load_latest(store).objects}
    return {i.key for i in store.list() if not i.key.startswith("manifest/")} == live


@pytest.mark.parametrize("point", ["upload-after-prepare", "upload-before-commit", "upload-after-commit"])
def test_upload_killed_at_each_step_rerun_drains_the_wal(tmp_path, point):
    """Prepared ids (with or without their object) and an untrimmed WAL after a commit: a rerun of
    upload finishes, gc later removes the orphans."""
    wal, store_dir = make_wal(tmp_path, capacity=1 << 20), tmp_path / "store"
    appended = append(wal, {1: (8, 300), 2: (8, 300)})
    killed = walctl("upload", wal, "--store", store_dir, env={"WALCTL_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    assert not _drained(wal)  # the kill left the WAL as it was
    rerun = walctl("upload", wal, "--store", store_dir)
    assert rerun.returncode == 0, rerun.stderr
    store = open_store(str(store_dir))
    assert read_back(store) == expect(appended) and _drained(wal)
    gc(store, grace_s=0, now=LATER)
    assert mf.load_latest(store).prepared == [] and _only_live_objects(store)
    assert read_back(store) == expect(appended)


_GC_SCRIPT = """
import sys
from walctl.store import open_store
from walctl.store.gc import gc
gc(open_store(sys.argv[1]), grace_s=0, now=float(sys.argv[2]))
"""


@pytest.mark.parametrize("point", ["gc-after-commit", "gc-after-delete"])
def test_gc_killed_then_rerun(tmp_path, point):
    """gc forgets the expired ids in a commit, then deletes the objects: killed between the two, or
    after the first delete, a rerun deletes the rest; no live object is touched."""
    wal, store_dir = make_wal(tmp_path, capacity=1 << 20), tmp_path / "store"
    appended = append(wal, {1: (4, 200), 2: (4, 200)})
    # Two orphans: an upload killed after writing its object, twice (ids prepared, objects written).
    for _ in range(2):
        killed = walctl("upload", wal, "--store", store_dir, env={"WALCTL_FAILPOINT": "upload-before-commit"})
        assert killed.returncode == -9, killed.stderr
    assert walctl("upload", wal, "--store", store_dir).returncode == 0
    store = open_store(str(store_dir))
    assert len(mf.load_latest(store).prepared) == 2 and not _only_live_objects(store)
    proc = subprocess.run([sys.executable, "-c", _GC_SCRIPT, str(store_dir), str(LATER)],
                          env={**_env(), "WALCTL_FAILPOINT": point}, capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert mf.load_latest(store).prepared == []  # the forget committed first
    assert not _only_live_objects(store)  # an orphan is left for the rerun
    assert read_back(store) == expect(appended)
    result = gc(store, grace_s=0, now=LATER)
    assert result.deleted_objects and _only_live_objects(store)
    assert read_back(store) == expect(appended) and _drained(wal)


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}


def test_trim_header_write_torn_then_upload_again(tmp_path):
    """A trim is one header write into the other slot; torn, that slot is invalid and the old
    trim point stands. status/recover say so (exit 0), and the next upload trims again."""
    wal, store_dir = make_wal(tmp_path, capacity=1 << 20), tmp_path / "store"
    appended = append(wal, {1: (6, 100)})
    assert walctl("upload", wal, "--store", store_dir, "--no-trim").returncode == 0
    assert not _drained(wal)
    with open(wal, "rb") as f:
        state = read_headers_from(f)
    target = 1 - state.current
    with open(wal, "r+b") as f:  # the trim's header write, torn: half the new slot written
        f.seek(target * 4096 + 30)
        f.write(b"\xff" * 34)
    status = walctl("status", wal, "--json")
    assert status.returncode == 0, status.stderr
    rec = walctl("recover", wal, "--json")
    assert rec.returncode == 0 and b"bad_header_slot" in rec.stdout
    rerun = walctl("upload", wal, "--store", store_dir, "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert _drained(wal)
    assert read_back(open_store(str(store_dir))) == expect(appended)
    with open(wal, "rb") as f:
        assert read_headers_from(f).bad_slots == []  # the trim rewrote the torn slot


def read_headers_from(f):
    from walctl.wal.headers import decode_slots

    f.seek(0)
    return decode_slots(f.read(8192))

