"""One-pass uploads to a local store (issue 19): a segment's Stream Object is written to a temp
object of the store as the scan reads its records (LocalStore.open_spool), then published under
its reserved key after the prepare commit.

The objects must be byte for byte those the other paths build (kept bodies, or a second read of
the WAL), for every mix of streams, record and block sizes; an upload that fails or is a dry run
leaves no temp object behind, and the object is durable (fsynced) before its name appears and
before the commit that makes it live.
"""

from __future__ import annotations

import os

import pytest

from walctl.device.buffers import ALIGN
from walctl.errors import CorruptionError, IOFailure
from walctl.format.batch import StreamRecordBatch
from walctl.pipeline import upload as upload_mod
from walctl.pipeline.upload import run as upload_run
from walctl.pipeline.upload import spool as upload_spool
from walctl.store import local as local_mod
from walctl.store import manifest as mf
from walctl.store.base import TEMP_PREFIX
from walctl.store.local import LocalStore
from walctl.wal.lifecycle import open_writer

from storehelpers import append, expect, make_wal, read_back

KiB = 1 << 10


def _objects(store) -> list[bytes]:
    return [store.read_all(o.key) for o in mf.load_latest(store).objects]


def _temp_files(root) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(TEMP_PREFIX)]


def _spools_made(monkeypatch) -> list:
    made = []
    real = LocalStore.open_spool

    def open_spool(self):
        made.append(real(self))
        return made[-1]

    monkeypatch.setattr(LocalStore, "open_spool", open_spool)
    return made


@pytest.mark.parametrize("split_size", [1 << 30, 8 * KiB, 1])  # an SSO; SOs and an SSO; an SO each
@pytest.mark.parametrize("block_size", [1, 4 * KiB, 1 << 20])
def test_spooled_objects_are_the_other_paths_ones_byte_for_byte(tmp_path, monkeypatch, split_size, block_size):
    wal = make_wal(tmp_path)
    # interleaved streams (runs of several streams), records of many sizes
    appended = append(wal, {1: (40, 300), 2: (12, 20 * KiB), 3: (25, 1000), 4: (3, 5000)})
    appended[1] += append(wal, {1: (30, 100)})[1]  # then a run of one stream
    made = _spools_made(monkeypatch)
    spooled = LocalStore(str(tmp_path / "spooled"))
    result = upload_mod.upload(wal, spooled, trim=False, block_size=block_size, split_size=split_size)
    assert result.records == 40 + 12 + 25 + 3 + 30 and len(made) == 4  # a spool per stream
    published = [o for o in result.objects if o["kind"] == "SO"]
    assert sorted(s.key for s in made if s.key) == sorted(o["key"] for o in published)
    assert not any(os.path.exists(s.path) for s in made)  # published (renamed) or removed
    for kept in (True, False):
        monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
        monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 64 << 20 if kept else 0)
        other = LocalStore(str(tmp_path / f"other-{kept}"))
        upload_mod.upload(wal, other, trim=False, block_size=block_size, split_size=split_size)
        assert _objects(spooled) == _objects(other)
    assert read_back(spooled) == expect(appended)
    assert _temp_files(tmp_path / "spooled") == []


def test_a_crash_gap_makes_a_spooled_segment_of_its_own(tmp_path, monkeypatch):
    wal = make_wal(tmp_path)
    writer = open_writer(wal).writer
    for base in list(range(10)) + list(range(15, 25)):  # offsets 10..15 never written: a gap
        writer.append(StreamRecordBatch(7, 0, base, 1, b"x" * 2000).encode())
    writer.close()
    made = _spools_made(monkeypatch)
    store = LocalStore(str(tmp_path / "store"))
    result = upload_mod.upload(wal, store, accept_gaps=[(7, 10, 15)], block_size=4 * KiB, trim=False)
    assert [o["kind"] for o in result.objects] == ["SO", "SO"] and len(made) == 2
    assert [(s["start"], s["end"]) for o in result.objects for s in o["streams"]] == [(0, 10), (15, 25)]
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    other = LocalStore(str(tmp_path / "other"))
    upload_mod.upload(wal, other, accept_gaps=[(7, 10, 15)], block_size=4 * KiB)
    assert _objects(store) == _objects(other)


def test_more_segments_than_spools_are_built_the_usual_way(tmp_path, monkeypatch):
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 2)
    wal = make_wal(tmp_path)
    appended = append(wal, {s: (6, 3000) for s in range(1, 6)})
    made = _spools_made(monkeypatch)
    store = LocalStore(str(tmp_path / "store"))
    result = upload_mod.upload(wal, store, split_size=1)
    assert [o["kind"] for o in result.objects] == ["SO"] * 5 and len(made) == 2
    assert read_back(store) == expect(appended) and _temp_files(tmp_path / "store") == []


def test_a_refused_upload_and_a_dry_run_leave_no_temp_object(tmp_path, monkeypatch):
    wal = make_wal(tmp_path)
    writer = open_writer(wal).writer
    for base in (0, 1, 2, 9, 10):  # a gap no crash explains: refused after the scan
        writer.append(StreamRecordBatch(1, 0, base, 1, b"y" * 5000).encode())
    writer.close()
    made = _spools_made(monkeypatch)
    store = LocalStore(str(tmp_path / "store"))
    with pytest.raises(CorruptionError, match="offset gap"):
        upload_mod.upload(wal, store)
    assert len(made) == 2 and _temp_files(tmp_path / "store") == []
    assert mf.load_latest(store).objects == []
    made.clear()
    result = upload_mod.upload(wal, store, dry_run=True, accept_gaps=[(1, 3, 9)])
    assert len(result.objects) == 2 and made == [] and _temp_files(tmp_path / "store") == []


def test_a_failed_spool_write_fails_the_upload_and_commits_nothing(tmp_path, monkeypatch):
    wal = make_wal(tmp_path)
    append(wal, {1: (200, 10 * KiB)})
    calls = []

    def write(self, data):
        calls.append(len(data))
        if len(calls) == 3:
            raise IOFailure("write failed: No space left on device", where=self.path)
        return real_write(self, data)

    real_write = local_mod.LocalSpool.write
    monkeypatch.setattr(local_mod.LocalSpool, "write", write)
    store = LocalStore(str(tmp_path / "store"))
    with pytest.raises(IOFailure, match="No space left"):
        upload_mod.upload(wal, store, block_size=64 * KiB)
    assert _temp_files(tmp_path / "store") == [] and mf.load_latest(store).objects == []
    monkeypatch.setattr(local_mod.LocalSpool, "write", real_write)
    result = upload_mod.upload(wal, store, block_size=64 * KiB)  # nothing was trimmed: all of it now
    assert result.records == 200 and result.skipped_records == 0


def test_the_object_is_durable_before_its_name_and_the_commit(tmp_path, monkeypatch):
    wal = make_wal(tmp_path)
    append(wal, {1: (50, 10 * KiB)})
    root = str(tmp_path / "store")
    store = LocalStore(root)
    events = []
    real_fsync, real_rename, real_commit = os.fsync, os.rename, mf.commit

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(target):
            events.append(("fsync dir", target))
        elif os.path.dirname(target) == root:  # a spool (temp objects of puts sit beside their key)
            events.append(("fsync spool", os.path.basename(target)))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", os.path.basename(src)))
        return real_rename(src, dst)

    def commit(store_, change, **kwargs):
        events.append(("commit", kwargs.get("command")))
        return real_commit(store_, change, **kwargs)

    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    monkeypatch.setattr(local_mod.os, "rename", rename)
    monkeypatch.setattr(mf, "commit", commit)
    result = upload_mod.upload(wal, store, trim=False)
    assert [o["kind"] for o in result.objects] == ["SO"]
    key_dir = os.path.dirname(os.path.join(root, result.objects[0]["key"]))
    spool = next(name for kind, name in events if kind == "fsync spool")
    assert events.index(("commit", "upload (prepare)")) < events.index(("fsync spool", spool))
    at = events.index(("rename", spool))
    # the data durable, then the name; both directories' entries durable before the commit
    assert events[at - 1] == ("fsync spool", spool)
    assert events[at + 1:at + 4] == [("fsync dir", key_dir), ("fsync dir", root), ("commit", "upload")]


@pytest.mark.parametrize("block_size", [4 * KiB, 300 * KiB])
def test_records_larger_than_a_block_buffer_and_large_block_sizes(tmp_path, monkeypatch, block_size):
    monkeypatch.setattr(upload_spool, "SPOOL_MAX_BLOCK", 256 * KiB)  # 300 KiB blocks: built the usual way
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (6, 200 * KiB), 2: (40, 3000)})  # 200 KiB records overflow a 4 KiB block's buffer
    made = _spools_made(monkeypatch)
    spooled = LocalStore(str(tmp_path / "spooled"))
    upload_mod.upload(wal, spooled, trim=False, block_size=block_size, split_size=1)
    assert len(made) == (2 if block_size <= upload_spool.SPOOL_MAX_BLOCK else 0)
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    other = LocalStore(str(tmp_path / "other"))
    upload_mod.upload(wal, other, trim=False, block_size=block_size, split_size=1)
    assert _objects(spooled) == _objects(other) and read_back(spooled) == expect(appended)


def test_a_log_larger_than_the_kept_bodies_keeps_none_when_spooled(tmp_path, monkeypatch):
    """The spools take the bodies: a clean log longer than KEEP_SCANNED_BYTES copies none of them to
    keep (it used to copy that much, then drop it: 64 MiB of copies and RSS in every large upload)."""
    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 64 * KiB)
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (30, 10 * KiB)})  # about 300 KiB of log
    seen = []
    real = upload_run._Records

    def records(doc, mark, scan, keep_bytes=0, spools=None):
        seen.append(real(doc, mark, scan, keep_bytes, spools))
        return seen[-1]

    monkeypatch.setattr(upload_run, "_Records", records)
    store = LocalStore(str(tmp_path / "store"))
    upload_mod.upload(wal, store, trim=False)
    assert seen[-1].kept is None and seen[-1].spools is not None
    assert read_back(store) == expect(appended)
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)  # no spools: the bodies are kept up to the bound
    upload_mod.upload(wal, LocalStore(str(tmp_path / "other")), trim=False)
    assert seen[-1].spools is None and seen[-1]._keep_left < 0  # it tried, and gave up past the bound


def _takes_o_direct(directory) -> bool:
    """True when files in ``directory`` can be opened with O_DIRECT (tmpfs and the like refuse it)."""
    path = os.path.join(str(directory), "probe")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(path):
            os.unlink(path)


@pytest.mark.parametrize("direct", [True, False])
def test_direct_and_buffered_spools_write_the_same_objects_in_large_writes(tmp_path, monkeypatch, direct):
    """Where the filesystem takes O_DIRECT, a spool writes whole pages straight to the disk (the last
    partial page goes with the index and footer); where not, it writes buffered. The objects are the
    same either way, and the blocks go out SPOOL_WRITE_BYTES at a time, not one write each."""
    if direct and not _takes_o_direct(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT: only the buffered spools can be checked here")
    if not direct:
        monkeypatch.setattr(local_mod.LocalSpool, "_set_direct", lambda self, on: False)
    wal = make_wal(tmp_path, capacity=64 << 20)
    appended = append(wal, {1: (170, 60 * KiB + 7), 2: (50, 3001)})  # ~10 MiB, blocks at odd offsets in pages
    made = _spools_made(monkeypatch)
    writes = []
    real_write = local_mod.LocalSpool.write

    def write(self, data):
        real_write(self, data)
        writes.append((self, self.direct, sum(memoryview(d).nbytes for d in data)))  # still direct after it

    monkeypatch.setattr(local_mod.LocalSpool, "write", write)
    spooled = LocalStore(str(tmp_path / "spooled"))
    upload_mod.upload(wal, spooled, trim=False, split_size=1)
    big = made[0]
    assert len(made) == 2 and all(d == direct for s, d, _ in writes if s is big)  # (publish's tail: buffered)
    big_writes = [n for s, _, n in writes if s is big]
    assert sum(big_writes) >= 170 * 60 * KiB - ALIGN
    assert len(big_writes) <= sum(big_writes) // upload_spool.SPOOL_WRITE_BYTES + 2  # ~4 MiB each, not 1 MiB
    if direct:
        assert all(n % ALIGN == 0 for n in big_writes)
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    other = LocalStore(str(tmp_path / "other"))
    upload_mod.upload(wal, other, trim=False, split_size=1)
    assert _objects(spooled) == _objects(other) and read_back(spooled) == expect(appended)


def test_a_spool_given_unaligned_bytes_goes_on_buffered(tmp_path):
    """A direct spool written anything but whole pages from aligned memory turns O_DIRECT off and
    writes on buffered: the object holds every byte, in order."""
    if not _takes_o_direct(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT: no direct spool to turn off here")
    from walctl.device.buffers import aligned_buffer

    store = LocalStore(str(tmp_path / "store"))
    spool = store.open_spool()
    assert spool.direct
    page = aligned_buffer(2 * ALIGN)
    page[:] = os.urandom(len(page))
    spool.write([memoryview(page)])
    assert spool.direct and spool.size == len(page)
    spool.write(b"odd")
    assert not spool.direct
    spool.write([memoryview(page)[:100], b"more"])
    spool.publish("k/obj", b"tail")
    assert store.read_all("k/obj") == bytes(page) + b"odd" + bytes(page[:100]) + b"more" + b"tail"
    assert _temp_files(tmp_path / "store") == []
