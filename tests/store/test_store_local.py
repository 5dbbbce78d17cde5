"""LocalStore: crash safety of put, durability order, listing, error mapping, open_store paths."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import walctl.store.local as local_mod
from walctl.errors import IOFailure, NotFoundError, UsageError
from walctl.store import LocalStore, ObjectInfo, PreconditionFailed, open_store

REPO_ROOT = Path(__file__).resolve().parents[2]


def _files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# -- crash safety ------------------------------------------------------------------

# Run in a child: put KEY with a write that dies (SIGKILL) halfway through its data.
_CRASH_SCRIPT = """
import os, signal, sys
from walctl.store.local import LocalStore
store = LocalStore(sys.argv[1])
real_write = os.write
def dying_write(fd, data):
    data = bytes(data)
    real_write(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
os.write = dying_write
store.put(sys.argv[2], b"N" * 100_000, if_absent=sys.argv[3] == "create")
"""


@pytest.mark.parametrize("mode", ["plain", "create"])
@pytest.mark.parametrize("existing", [None, b"old contents"])
def test_put_killed_mid_write_leaves_no_partial_object(tmp_path, mode, existing):
    root = tmp_path / "store"
    store = LocalStore(root)
    key = "manifest/00000000000000000001.json"
    if existing is not None:
        store.put(key, existing)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, str(root), key, mode],
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    # The crash really left a half-written temp file behind...
    leftovers = [name for name in _files_under(root) if "/.tmp-" in name]
    assert len(leftovers) == 1
    assert (root / leftovers[0]).stat().st_size == 50_000
    # ...yet the key shows either nothing or the old object, and list() hides the temp.
    if existing is None:
        with pytest.raises(NotFoundError):
            store.read_all(key)
        assert store.list() == []
    else:
        assert store.read_all(key) == existing
        assert store.list() == [ObjectInfo(key, len(existing))]
    # A later put works, temp file or not.
    store.put(key, b"after", if_absent=existing is None)
    assert store.read_all(key) == b"after"


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   KeyboardInterrupt()])
@pytest.mark.parametrize("if_absent", [False, True])
def test_put_failing_in_write_cleans_up(local_store, monkeypatch, error, if_absent):
    def failing_write(fd, data):
        raise error

    monkeypatch.setattr(local_mod.os, "write", failing_write)
    expected = IOFailure if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as info:
        local_store.put("obj/k", b"data", if_absent=if_absent)
    monkeypatch.undo()
    if expected is IOFailure:
        assert info.value.exit_code == 6 and "No space left" in info.value.line()
        assert info.value.errno == errno.ENOSPC
    with pytest.raises(NotFoundError):
        local_store.size("obj/k")
    assert local_store.list() == []
    assert _files_under(Path(local_store.root)) == []    # the temp file is gone too


def test_put_fsyncs_data_before_publishing_and_the_directory_after(local_store, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_rename, real_link = os.fsync, os.rename, os.link

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", "dir" if os.path.isdir(target) else os.path.basename(target)[:5]))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", os.path.basename(dst)))
        return real_rename(src, dst)

    def link(src, dst):
        events.append(("link", os.path.basename(dst)))
        return real_link(src, dst)

    local_store.put("a/first", b"x")   # creates the directory first: not recorded
    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    monkeypatch.setattr(local_mod.os, "rename", rename)
    monkeypatch.setattr(local_mod.os, "link", link)
    local_store.put("a/plain", b"x")
    local_store.put("a/create", b"x", if_absent=True)
    assert events == [("fsync", ".tmp-"), ("rename", "plain"), ("fsync", "dir"),
                      ("fsync", ".tmp-"), ("link", "create"), ("fsync", "dir")]


def test_new_directories_are_fsynced(local_store, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    local_store.put("x/y/z", b"v")
    root = local_store.root
    # Each new directory's entry is made durable in its parent.
    for parent in (root, f"{root}/x", f"{root}/x/y"):
        assert parent in synced


def test_create_only_leaves_no_temp_file(local_store):
    local_store.put("k", b"1", if_absent=True)
    with pytest.raises(PreconditionFailed):
        local_store.put("k", b"2", if_absent=True)
    assert _files_under(Path(local_store.root)) == ["k"]


# -- listing -------------------------------------------------------------------------

def test_list_over_a_thousand_keys(local_store):
    """More keys than one S3 LIST page. The first of each directory goes through put; the rest are
    written as plain files of the same layout (1,234 durable puts, each with its fsyncs, took 12 s
    of the suite's profile and proved nothing more about list; put has tests of its own)."""
    expected = []
    for i in reversed(range(1234)):
        key = f"obj/{i % 7}/{i:05d}"
        if i >= 1234 - 7:
            local_store.put(key, b"x" * (i % 13))
        else:
            with open(Path(local_store.root, *key.split("/")), "wb") as f:
                f.write(b"x" * (i % 13))
        expected.append(ObjectInfo(key, i % 13))
    expected.sort(key=lambda o: o.key)
    assert local_store.list() == expected
    assert local_store.list("obj/3/") == [o for o in expected if o.key.startswith("obj/3/")]
    assert local_store.list("obj/3/0012") == [o for o in expected if o.key.startswith("obj/3/0012")]
    assert local_store.stats.list == 3


def test_list_ignores_temp_files_and_empty_directories(local_store):
    root = Path(local_store.root)
    (root / "d" / "empty").mkdir(parents=True)
    (root / "d" / ".tmp-abandoned").write_bytes(b"half")
    (root / ".tmp-top").write_bytes(b"half")
    local_store.put("d/real", b"ok")
    assert local_store.list() == [ObjectInfo("d/real", 2)]


def test_key_and_key_prefix_conflict_is_usage_error(local_store):
    local_store.put("a", b"file")
    with pytest.raises(UsageError):
        local_store.put("a/b", b"under a file")
    local_store.put("c/d", b"v")
    with pytest.raises(UsageError):
        local_store.put("c", b"over a directory")
    with pytest.raises(NotFoundError):
        local_store.read_all("c")          # a directory is not an object
    local_store.delete("c")                # nor something to delete
    assert local_store.read_all("c/d") == b"v"


# -- errors ----------------------------------------------------------------------------

def test_read_error_is_iofailure(local_store, monkeypatch):
    local_store.put("k", b"value")

    def eio(*args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(local_mod.os, "pread", eio)  # buffered reads (tmpfs)
    monkeypatch.setattr(local_mod.os, "preadv", eio)  # O_DIRECT reads
    with pytest.raises(IOFailure) as info:
        local_store.read_all("k")
    assert info.value.exit_code == 6 and info.value.errno == errno.EIO
    assert "k" in info.value.line()


@pytest.mark.parametrize("start,end", [(0, 1), (4095, 4097), (5000, 9000), (0, 3 * 4096 + 5), (10_000, 20_000),
                                       (12_288, 12_300)])
def test_direct_reads_cut_out_exactly_the_range(local_store, monkeypatch, start, end):
    data = os.urandom(3 * 4096 + 5)  # not a multiple of 4 KiB: the last O_DIRECT read is short
    local_store.put("obj", data)
    monkeypatch.setattr(local_mod, "DIRECT_READ_CHUNK", 4096)  # many chunks
    fd, direct = local_store._open_read("obj")
    os.close(fd)
    if not direct:
        pytest.skip("the filesystem under tmp_path refuses O_DIRECT (tmpfs?): reads there are buffered")
    assert local_store.read_range("obj", start, end) == data[start:end]
    assert local_store.read_tail("obj", 7) == (data[-7:], len(data))
    assert local_store.read_all("obj") == data


def test_store_root_that_is_a_file_is_usage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError):
        LocalStore(tmp_path / "file")
    with pytest.raises(NotFoundError):
        LocalStore(tmp_path / "absent", create=False)


# -- open_store ------------------------------------------------------------------------

def test_open_store_local_forms(tmp_path, monkeypatch):
    plain = open_store(str(tmp_path / "plain" / "store"))
    assert isinstance(plain, LocalStore) and plain.url == str(tmp_path / "plain" / "store")
    assert (tmp_path / "plain" / "store").is_dir()
    url = open_store(f"file://{tmp_path}/via%20url")
    assert isinstance(url, LocalStore) and url.root == str(tmp_path / "via url")
    assert open_store(f"file://localhost{tmp_path}/lh").root == str(tmp_path / "lh")
    monkeypatch.chdir(tmp_path)
    relative = open_store("rel/dir")
    assert relative.root == str(tmp_path / "rel" / "dir")
    plain.put("k", b"v")
    assert open_store(str(tmp_path / "plain" / "store")).read_all("k") == b"v"


@pytest.mark.parametrize("url", ["", "   ", "gs://bucket/x", "http://host/x", "file://otherhost/x",
                                 "file://relative"])
def test_open_store_rejects(url):
    with pytest.raises(UsageError) as info:
        open_store(url)
    assert info.value.exit_code == 2


def test_lent_views_never_change_while_they_live(local_store, monkeypatch):
    """read_range_view / read_tail_view hand out views of reused O_DIRECT buffers: a buffer is read into
    again only once no view of it is left, so a view's bytes never change; small reads are copies."""
    monkeypatch.setattr(local_mod, "_VIEW_BUFFERS", local_mod._ViewBuffers())
    a, b = os.urandom(2 * 1024 * 1024 + 5), os.urandom(2 * 1024 * 1024 + 5)
    local_store.put("a", a)
    local_store.put("b", b)
    fd, direct = local_store._open_read("a")
    os.close(fd)
    if not direct:
        pytest.skip("the filesystem under tmp_path refuses O_DIRECT (tmpfs?): reads there are buffered")
    va = local_store.read_range_view("a", 3, len(a))
    assert isinstance(va, memoryview) and va.readonly and va == a[3:]
    vb, total = local_store.read_tail_view("b", len(b))
    assert total == len(b) and vb == b and vb.obj is not va.obj  # va lives: another buffer
    part = va[10:20]
    del va
    vc = local_store.read_range_view("b", 0, len(b))
    assert vc.obj is not part.obj and part == a[13:23]  # a view of a view still holds the buffer
    del part
    vd = local_store.read_range_view("b", 1, len(b))
    assert vd == b[1:] and vb == b and vc == b
    used = {id(v.obj) for v in (vb, vc, vd)}
    assert len(used) == 3 and len(local_mod._VIEW_BUFFERS._lent) == 3  # the freed buffer was reused
    assert type(local_store.read_range_view("a", 0, 4096)) is bytes  # under VIEW_MIN: copied out
    assert local_store.stats.snapshot()["get"] == 5
