"""wal/image.py (issue 32): what ``walctl image`` copies (the WAL's capacity, or the whole device),
its sha256 and .sha256 file, the warnings, the refusals, the unaligned tail, and that a failed
copy leaves no file under the requested name; on small regular files."""

from __future__ import annotations

import hashlib
import os

import pytest

from walctl.errors import IOFailure, RefusedError, UsageError
from walctl.wal import image
from walctl.wal.init import init_wal

CAPACITY = 64 * 1024


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def wal(tmp_path):
    """A 64 KiB WAL at the start of a 96 KiB file (the rest: non-zero bytes past the capacity)."""
    path = tmp_path / "dev.img"
    init_wal(str(path), CAPACITY)
    with open(path, "ab") as f:
        f.write(b"\x5a" * (32 * 1024))
    return str(path)


def test_a_wal_is_copied_up_to_its_capacity(wal, tmp_path):
    target = str(tmp_path / "copy.img")
    seen = []
    got = image.image_device(wal, target, progress=lambda done, total: seen.append((done, total)))
    data = open(wal, "rb").read()[:CAPACITY]
    assert open(target, "rb").read() == data
    assert got.sha256 == _sha(data) and got.sha256_path == target + ".sha256"
    assert open(target + ".sha256").read() == f"{_sha(data)}  copy.img\n"
    assert (got.source, got.target, got.size_bytes, got.scope, got.flavour, got.capacity_bytes,
            got.device_size_bytes, got.warnings) == (wal, target, CAPACITY, "capacity", "walctl", CAPACITY,
                                                      96 * 1024, [])
    assert seen == [(CAPACITY, CAPACITY)]  # one read: the buffer is as large as the copy
    assert not os.path.exists(target + ".partial")
    assert got.elapsed_s >= 0


def test_the_copy_goes_in_chunks_with_progress(wal, tmp_path, monkeypatch):
    monkeypatch.setattr(image, "COPY_CHUNK_BYTES", 16384)
    seen = []
    got = image.image_device(wal, str(tmp_path / "c"), progress=lambda done, total: seen.append((done, total)))
    assert seen == [(16384, CAPACITY), (32768, CAPACITY), (49152, CAPACITY), (65536, CAPACITY)]
    assert got.sha256 == _sha(open(wal, "rb").read()[:CAPACITY])
    image.image_device(wal, str(tmp_path / "d"))  # no progress callback: fine


def test_whole_device_copies_everything_and_still_names_the_wal(wal, tmp_path):
    target = str(tmp_path / "all.img")
    got = image.image_device(wal, target, whole_device=True)
    data = open(wal, "rb").read()
    assert open(target, "rb").read() == data and got.sha256 == _sha(data)
    assert (got.size_bytes, got.scope, got.flavour, got.capacity_bytes, got.warnings) == \
        (96 * 1024, "device", "walctl", CAPACITY, [])


def test_no_wal_header_copies_the_whole_device_with_a_warning(tmp_path):
    src = tmp_path / "zeros.img"
    src.write_bytes(b"\x01" * 20480)
    got = image.image_device(str(src), str(tmp_path / "c"))
    assert (got.size_bytes, got.scope, got.flavour, got.capacity_bytes) == (20480, "device", None, None)
    assert got.warnings == [f"{src}: no valid WAL header: copying the whole device"]
    assert open(tmp_path / "c", "rb").read() == b"\x01" * 20480
    quiet = image.image_device(str(src), str(tmp_path / "d"), whole_device=True)
    assert quiet.warnings == [] and quiet.scope == "device"


def test_a_capacity_larger_than_the_device_copies_the_device_with_a_warning(wal, tmp_path):
    os.truncate(wal, 48 * 1024)
    got = image.image_device(wal, str(tmp_path / "c"))
    assert got.warnings == [f"{wal}: header capacity {CAPACITY} bytes exceeds the device (49152 bytes): "
                            f"copying the whole device"]
    assert (got.size_bytes, got.scope, got.flavour, got.capacity_bytes) == (49152, "device", "walctl", CAPACITY)


def test_a_capacity_equal_to_the_device_is_the_capacity(wal, tmp_path):
    os.truncate(wal, CAPACITY)
    got = image.image_device(wal, str(tmp_path / "c"))
    assert (got.size_bytes, got.scope, got.warnings) == (CAPACITY, "capacity", [])


def test_an_unaligned_tail_is_read_through_the_page_cache(tmp_path):
    src = tmp_path / "odd.img"
    data = bytes(range(256)) * 39 + b"tail"  # 9988 bytes: 8192 aligned, 1796 more
    src.write_bytes(data)
    seen = []
    got = image.image_device(str(src), str(tmp_path / "c"), progress=lambda d, t: seen.append((d, t)))
    assert open(tmp_path / "c", "rb").read() == data and got.sha256 == _sha(data)
    assert got.size_bytes == len(data) and seen == [(8192, len(data))]


def test_a_tiny_unaligned_source_is_all_tail(tmp_path):
    src = tmp_path / "tiny.img"
    src.write_bytes(b"0123456789")
    got = image.image_device(str(src), str(tmp_path / "c"))
    assert open(tmp_path / "c", "rb").read() == b"0123456789" and got.sha256 == _sha(b"0123456789")


def test_a_short_tail_read_is_an_io_failure_and_leaves_no_file(tmp_path, monkeypatch):
    src = tmp_path / "odd.img"
    src.write_bytes(b"\x07" * 5000)
    real = open

    class Short:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def seek(self, n):
            self.f.seek(n)

        def read(self, n):
            return self.f.read(n)[:-1]

    def opening(path, mode="r", *args, **kwargs):
        f = real(path, mode, *args, **kwargs)
        return Short(f) if str(path) == str(src) else f

    monkeypatch.setattr(image, "open", opening, raising=False)
    target = tmp_path / "c"
    with pytest.raises(IOFailure) as err:
        image.image_device(str(src), str(target))
    assert str(err.value) == "short read of the last 904 bytes"
    assert err.value.where == str(src) and err.value.offset == 4096
    assert not target.exists() and not (tmp_path / "c.partial").exists()


@pytest.mark.parametrize("existing", ["c", "c.sha256"])
def test_an_existing_file_is_refused_without_force(wal, tmp_path, existing):
    (tmp_path / existing).write_bytes(b"keep")
    with pytest.raises(RefusedError) as err:
        image.image_device(wal, str(tmp_path / "c"))
    assert str(err.value) == "the file already exists"
    assert err.value.where == str(tmp_path / existing) and err.value.hint == "pass --force to overwrite it"
    assert (tmp_path / existing).read_bytes() == b"keep"
    got = image.image_device(wal, str(tmp_path / "c"), force=True)
    assert (tmp_path / "c").read_bytes() == open(wal, "rb").read()[:CAPACITY]
    assert (tmp_path / "c.sha256").read_text() == f"{got.sha256}  c\n"


def test_a_directory_target_is_a_usage_error(wal, tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(UsageError) as err:
        image.image_device(wal, str(tmp_path / "d"), force=True)
    assert str(err.value) == "is a directory"
    assert err.value.where == str(tmp_path / "d") and err.value.hint == "name the image file to create"


def test_the_source_itself_is_refused_as_target(wal, tmp_path):
    link = tmp_path / "link"
    os.symlink(wal, link)
    before = open(wal, "rb").read()
    for target in (wal, str(link)):
        with pytest.raises(RefusedError) as err:
            image.image_device(wal, target, force=True)
        assert str(err.value) == "the image file is the source device itself"
        assert err.value.where == target
        assert err.value.hint == "choose another FILE; image never writes to its source"
    assert open(wal, "rb").read() == before


def test_same_file_falls_back_to_the_real_paths():
    assert image._same_file("/no/such/dir/a", "/no/such/dir/../dir/a")
    assert not image._same_file("/no/such/dir/a", "/no/such/dir/b")


def test_same_file_compares_inodes(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")
    os.link(tmp_path / "a", tmp_path / "h")
    assert image._same_file(str(tmp_path / "a"), str(tmp_path / "h"))
    assert not image._same_file(str(tmp_path / "a"), str(tmp_path / "b"))


def test_an_image_in_a_missing_directory_cannot_be_created(wal, tmp_path):
    target = str(tmp_path / "nodir" / "c")
    with pytest.raises(IOFailure) as err:
        image.image_device(wal, target)
    assert str(err.value) == "cannot create the image file: No such file or directory"
    assert err.value.where == target + ".partial"
    assert err.value.hint == "FILE must be in an existing, writable directory"


def test_a_failed_write_is_an_io_failure_and_leaves_no_partial(wal, tmp_path, monkeypatch):
    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(image.os, "fsync", full)
    target = tmp_path / "c"
    with pytest.raises(IOFailure) as err:
        image.image_device(wal, str(target))
    assert str(err.value) == "writing the image failed: No space left on device"
    assert err.value.where == str(target) + ".partial"
    assert not target.exists() and not (tmp_path / "c.partial").exists()


def test_an_interrupted_copy_leaves_no_partial_and_keeps_its_exception(wal, tmp_path, monkeypatch):
    def stop(name):
        assert name == "image-copy"
        raise KeyboardInterrupt

    monkeypatch.setattr(image, "failpoint", stop)
    with pytest.raises(KeyboardInterrupt):
        image.image_device(wal, str(tmp_path / "c"))
    assert sorted(os.listdir(tmp_path)) == ["dev.img"]


def test_the_image_and_its_directory_are_made_durable(wal, tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(image.os, "fsync", fsync)
    image.image_device(wal, str(tmp_path / "c"))
    assert synced == [str(tmp_path / "c.partial"), str(tmp_path), str(tmp_path / "c.sha256"), str(tmp_path)]


def test_fsync_dir_of_a_missing_directory_or_a_refused_fsync_is_quiet(tmp_path, monkeypatch):
    image._fsync_dir(str(tmp_path / "no" / "such"))
    closed = []
    real_close = os.close

    def refuse(fd):
        raise OSError(22, "Invalid argument")

    def close(fd):
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(image.os, "fsync", refuse)
    monkeypatch.setattr(image.os, "close", close)
    image._fsync_dir(str(tmp_path / "f"))
    assert len(closed) == 1


def test_a_checksum_file_that_cannot_be_written_is_an_io_failure(tmp_path):
    path = str(tmp_path / "nodir" / "c.sha256")
    with pytest.raises(IOFailure) as err:
        image._write_checksum(path, "ab" * 32, "c")
    assert str(err.value) == "writing the checksum file failed: No such file or directory"
    assert err.value.where == path


def test_write_checksum_writes_sha256sum_s_format(tmp_path):
    path = tmp_path / "x.sha256"
    image._write_checksum(str(path), "0f" * 32, "x.img")
    assert path.read_bytes() == ("0f" * 32 + "  x.img\n").encode("ascii")


def test_the_result_s_rate_and_json():
    r = image.ImageResult("/dev/x", "/t/c", "ab", "/t/c.sha256", 3 << 20, "capacity", "walctl", 3 << 20,
                          4 << 20, 0.25, ["w"])
    assert r.mib_per_s == 12.0
    assert r.to_json() == {"source": "/dev/x", "file": "/t/c", "sha256": "ab", "sha256_file": "/t/c.sha256",
                           "size_bytes": 3 << 20, "scope": "capacity", "flavour": "walctl",
                           "capacity_bytes": 3 << 20, "device_size_bytes": 4 << 20, "elapsed_s": 0.25,
                           "mib_per_s": 12.0}
    slow = image.ImageResult("s", "t", "h", "p", 1000, "device", None, None, 1000, 1.23456)
    assert slow.to_json()["elapsed_s"] == 1.235 and slow.to_json()["mib_per_s"] == 0.0
    assert image.ImageResult("s", "t", "h", "p", 1 << 20, "device", None, None, 1, 3.0).to_json()["mib_per_s"] == 0.3
    assert image.ImageResult("s", "t", "h", "p", 5, "device", None, None, 5, 0.0).mib_per_s == 0.0
    assert image.ImageResult("s", "t", "h", "p", 5, "device", None, None, 5, -1.0).mib_per_s == 0.0
    assert slow.warnings == []


def test_an_image_named_outside_ascii_gets_its_checksum_file(wal, tmp_path):
    # was: UnicodeEncodeError (exit 1, "internal error") after the copy, and an empty .sha256
    for name in ("bild-ä.img", os.fsdecode(b"img-\xff.bin")):
        target = str(tmp_path / name)
        got = image.image_device(wal, target)
        with open(target + ".sha256", "rb") as f:
            assert f.read() == got.sha256.encode() + b"  " + os.fsencode(name) + b"\n"
        assert got.sha256 == _sha(open(target, "rb").read())


def test_image_reads_a_device_a_writer_holds(wal, tmp_path):
    import fcntl

    fd = os.open(wal, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a running writer's lock: image takes none
        got = image.image_device(wal, str(tmp_path / "c"))
    finally:
        os.close(fd)
    assert got.size_bytes == CAPACITY


def test_the_last_chunk_is_cut_at_the_copy_s_end(wal, tmp_path, monkeypatch):
    monkeypatch.setattr(image, "COPY_CHUNK_BYTES", 24576)  # 64 KiB: two whole chunks and 16 KiB
    seen = []
    got = image.image_device(wal, str(tmp_path / "c"), progress=lambda d, t: seen.append(d))
    assert seen == [24576, 49152, 65536]
    assert open(tmp_path / "c", "rb").read() == open(wal, "rb").read()[:CAPACITY]
    assert 0 <= got.elapsed_s < 60


def test_an_automq_capacity_off_the_4k_grid_copies_exactly_the_capacity(tmp_path):
    from test_automq_forensics import V1_MAGIC, amq_header

    data = bytearray(b"\x33" * (80 * 1024))
    data[:8192] = bytes(8192)
    capacity = 70144  # 512-aligned, not 4096: its last 512 bytes come through the page cache
    data[:4096] = amq_header(V1_MAGIC, capacity, -1, 1_000_000, 4096, 0, block=4096)
    src = tmp_path / "amq.img"
    src.write_bytes(bytes(data))
    got = image.image_device(str(src), str(tmp_path / "c"))
    assert (got.flavour, got.capacity_bytes, got.scope, got.size_bytes) == ("automq-v1", capacity, "capacity", capacity)
    assert open(tmp_path / "c", "rb").read() == bytes(data[:capacity])
