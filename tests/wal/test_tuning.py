"""Field tuning (issue 8): pre-written WAL files, and reads that leave the page cache alone."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from walhelpers import run_walctl as walctl

MiB = 1 << 20


def allocated_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_init_prewrites_every_byte_of_a_new_file(tmp_path):
    path = tmp_path / "w.img"
    assert walctl("init", path, "--capacity", "16MiB").returncode == 0
    assert allocated_bytes(path) >= 16 * MiB  # every block of the capacity was written
    sparse = tmp_path / "sparse.img"
    assert walctl("init", sparse, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    assert allocated_bytes(sparse) < 1 * MiB  # only the header slots
    with open(path, "rb") as f:
        f.seek(8192)
        assert f.read(16 * MiB - 8192) == bytes(16 * MiB - 8192)


def _resident_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is not installed")
def test_recover_and_upload_read_the_device_around_the_page_cache(tmp_path):
    wal = tmp_path / "w.img"
    assert walctl("init", wal, "--capacity", "32MiB").returncode == 0
    assert walctl("append", wal, "--input", "-", stdin=b"".join(b"%d\n" % i for i in range(5000))).returncode == 0
    fd = os.open(wal, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # start from an empty cache for this file
    os.close(fd)
    assert _resident_bytes(wal) == 0
    assert walctl("recover", wal, "--stats").returncode == 0
    assert walctl("upload", wal, "--store", tmp_path / "store", "--no-trim").returncode == 0
    assert _resident_bytes(wal) == 0  # O_DIRECT reads: nothing of the WAL entered the page cache
    written = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert written and sum(_resident_bytes(p) for p in written) == 0  # objects dropped once fsynced
    with open(wal, "rb") as f:  # the check itself can fail: a buffered read does fill it
        f.read()
    assert _resident_bytes(wal) > 0


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is not installed")
def test_inspect_object_deep_reads_a_local_object_around_the_page_cache(tmp_path):
    wal = tmp_path / "w.img"
    store = tmp_path / "store"
    assert walctl("init", wal, "--capacity", "32MiB", "--no-prewrite").returncode == 0
    records = b"".join(b"%d %s\n" % (i, os.urandom(200).hex().encode()) for i in range(20000))
    assert walctl("append", wal, "--input", "-", stdin=records).returncode == 0
    assert walctl("upload", wal, "--store", store).returncode == 0
    objects = [p for p in store.rglob("*") if p.is_file() and p.stat().st_size > 1 * MiB]
    assert objects, "upload made no object of more than 1 MiB"
    obj = objects[0]
    fd = os.open(obj, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    assert _resident_bytes(obj) == 0
    res = walctl("inspect-object", obj, "--deep", "--json")
    assert res.returncode == 0, res.stderr
    assert _resident_bytes(obj) == 0  # every block checked, nothing of the object cached
    with open(obj, "rb") as f:  # the check itself can fail
        f.read()
    assert _resident_bytes(obj) > 0
