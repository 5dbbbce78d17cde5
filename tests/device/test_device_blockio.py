"""Device implementations on regular files and in memory: I/O, alignment, errors, fallback."""

import errno
import fcntl
import os
import shutil
import tempfile

import pytest

from walctl.device import (
    ALIGN,
    BUFFERED_WARNING,
    BufferedDevice,
    Device,
    DirectDevice,
    MemoryDevice,
    aligned_buffer,
    create_file,
    open_device,
)
from walctl.errors import IOFailure, NotFoundError, RefusedError, UsageError

DEVICE_BYTES = 16 * ALIGN


def filled(size: int, byte: int):
    """An aligned buffer of ``size`` bytes, all ``byte``."""
    buf = aligned_buffer(size)
    buf[:] = bytes([byte]) * size
    return buf


def pattern(size: int, seed: int = 0):
    """An aligned buffer whose every 4 KiB page differs, so misplaced pages show."""
    buf = aligned_buffer(size)
    buf[:] = bytes((seed + i // ALIGN + i) % 251 for i in range(size))
    return buf


@pytest.fixture
def wal_path(tmp_path) -> str:
    path = str(tmp_path / "wal.img")
    create_file(path, DEVICE_BYTES)
    return path


@pytest.fixture(params=["direct", "buffered", "memory"])
def device(request, wal_path):
    """Each implementation, writable, DEVICE_BYTES long."""
    if request.param == "direct":
        dev = open_device(wal_path, writable=True)
        assert isinstance(dev, DirectDevice)
    elif request.param == "buffered":
        dev = BufferedDevice(wal_path, os.open(wal_path, os.O_RDWR | os.O_CLOEXEC), writable=True)
    else:
        dev = MemoryDevice(DEVICE_BYTES)
    yield dev
    dev.close()


@pytest.fixture
def no_syscalls(monkeypatch):
    """Make any data syscall fail the test: proves a check ran before it."""
    def forbidden(*args, **kwargs):
        raise AssertionError("syscall reached despite a bad argument")
    for name in ("pwrite", "preadv", "pread", "fdatasync"):
        monkeypatch.setattr(os, name, forbidden)


# --- round trips ---------------------------------------------------------------

def test_every_implementation_is_a_device(device):
    assert isinstance(device, Device)
    assert device.size_bytes == DEVICE_BYTES
    assert device.logical_block_size == ALIGN
    assert device.is_block_device is False
    assert device.writable is True


def test_round_trip(device):
    data = pattern(3 * ALIGN, seed=7)
    device.pwrite(2 * ALIGN, data)
    device.flush()
    back = aligned_buffer(5 * ALIGN)
    device.pread_into(ALIGN, back)
    assert back[:ALIGN] == bytes(ALIGN)
    assert back[ALIGN:4 * ALIGN] == data[:]
    assert back[4 * ALIGN:] == bytes(ALIGN)


def test_odirect_round_trip_survives_reopen(wal_path):
    data = pattern(4 * ALIGN, seed=3)
    with open_device(wal_path, writable=True) as dev:
        assert dev.direct is True
        flags = fcntl.fcntl(dev.fileno(), fcntl.F_GETFL)
        # O_DIRECT for no page cache, O_DSYNC for a device flush per write.
        assert flags & os.O_DIRECT and flags & os.O_DSYNC and flags & os.O_ACCMODE == os.O_RDWR
        dev.pwrite(4 * ALIGN, data)
    with open_device(wal_path, writable=False) as reader:
        assert isinstance(reader, DirectDevice) and reader.writable is False
        flags = fcntl.fcntl(reader.fileno(), fcntl.F_GETFL)
        assert flags & os.O_DIRECT and flags & os.O_ACCMODE == os.O_RDONLY
        back = aligned_buffer(4 * ALIGN)
        reader.pread_into(4 * ALIGN, back)
    assert back[:] == data[:]
    with open(wal_path, "rb") as f:
        assert f.read()[4 * ALIGN:8 * ALIGN] == data[:]


def test_read_into_an_aligned_slice(device):
    device.pwrite(0, filled(ALIGN, 0x5A))
    buf = aligned_buffer(3 * ALIGN)
    with memoryview(buf) as mv:
        device.pread_into(0, mv[ALIGN:2 * ALIGN])
    assert buf[:ALIGN] == bytes(ALIGN) and buf[ALIGN:2 * ALIGN] == b"\x5a" * ALIGN


def test_short_transfers_are_looped(monkeypatch, wal_path):
    """The kernel may move fewer bytes than asked; the device loops until done."""
    real_pwrite, real_preadv = os.pwrite, os.preadv

    def one_page_pwrite(fd, data, offset):
        return real_pwrite(fd, memoryview(data)[:ALIGN], offset)

    def one_page_preadv(fd, buffers, offset):
        return real_preadv(fd, [memoryview(buffers[0])[:ALIGN]], offset)

    monkeypatch.setattr(os, "pwrite", one_page_pwrite)
    monkeypatch.setattr(os, "preadv", one_page_preadv)
    data = pattern(4 * ALIGN, seed=11)
    with open_device(wal_path, writable=True) as dev:
        dev.pwrite(0, data)
        back = aligned_buffer(4 * ALIGN)
        dev.pread_into(0, back)
    assert back[:] == data[:]


def test_memory_device_exposes_data():
    dev = MemoryDevice(2 * ALIGN)
    dev.pwrite(ALIGN, filled(ALIGN, 1))
    assert dev.data == bytes(ALIGN) + b"\x01" * ALIGN


# --- argument checks before any syscall ----------------------------------------

@pytest.mark.parametrize("offset", [1, 512, 4095, -4096])
def test_misaligned_offset_is_value_error(device, no_syscalls, offset):
    buf = aligned_buffer(ALIGN)
    with pytest.raises(ValueError, match="offset"):
        device.pwrite(offset, buf)
    with pytest.raises(ValueError, match="offset"):
        device.pread_into(offset, buf)


def test_misaligned_length_is_value_error(device, no_syscalls):
    buf = aligned_buffer(2 * ALIGN)
    with memoryview(buf) as mv:
        with pytest.raises(ValueError, match="length"):
            device.pwrite(0, mv[:512])
        with pytest.raises(ValueError, match="length"):
            device.pread_into(0, mv[:ALIGN + 1])


def test_misaligned_buffer_is_value_error(device, no_syscalls):
    buf = aligned_buffer(2 * ALIGN)
    with memoryview(buf) as mv:
        with pytest.raises(ValueError, match="address"):
            device.pwrite(0, mv[512:512 + ALIGN])
        with pytest.raises(ValueError, match="address"):
            device.pread_into(0, mv[512:512 + ALIGN])
    # bytes cannot be used for direct I/O, so no implementation accepts them.
    with pytest.raises(ValueError):
        device.pwrite(0, bytes(ALIGN) + b"\0")


def test_write_past_end_is_value_error(device, no_syscalls):
    with pytest.raises(ValueError, match="passes the end"):
        device.pwrite(DEVICE_BYTES - ALIGN, aligned_buffer(2 * ALIGN))


def test_write_on_reader_and_io_on_closed_device(wal_path):
    with open_device(wal_path, writable=False) as reader:
        with pytest.raises(ValueError, match="read-only"):
            reader.pwrite(0, aligned_buffer(ALIGN))
        reader.flush()  # a no-op for a reader, not an error
    reader.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        reader.pread_into(0, aligned_buffer(ALIGN))


def test_closed_memory_device():
    dev = MemoryDevice(ALIGN)
    dev.close()
    dev.close()
    with pytest.raises(ValueError, match="closed"):
        dev.pwrite(0, aligned_buffer(ALIGN))


# --- end of device and I/O errors ------------------------------------------------

@pytest.mark.parametrize("kind", ["direct", "buffered", "memory"])
def test_short_read_at_eof_is_io_failure(tmp_path, kind):
    size = 2 * ALIGN + 1808  # a file whose end is not on a 4 KiB boundary
    path = str(tmp_path / "short.img")
    create_file(path, size)
    if kind == "direct":
        dev = open_device(path, writable=False)
    elif kind == "buffered":
        dev = BufferedDevice(path, os.open(path, os.O_RDONLY), writable=False)
    else:
        dev = MemoryDevice(size)
    with dev:
        buf = aligned_buffer(ALIGN)
        dev.pread_into(ALIGN, buf)  # wholly inside: fine
        with pytest.raises(IOFailure, match="short read") as info:
            dev.pread_into(2 * ALIGN, buf)
        assert info.value.offset == 2 * ALIGN + 1808
        assert info.value.errno is None
        assert info.value.where == dev.path
        with pytest.raises(IOFailure, match="short read") as info:
            dev.pread_into(8 * ALIGN, buf)  # wholly past the end
        assert info.value.offset == 8 * ALIGN


def test_os_error_becomes_io_failure_with_errno(monkeypatch, wal_path):
    def eio(*args):
        raise OSError(errno.EIO, "Input/output error")

    with open_device(wal_path, writable=True) as dev:
        monkeypatch.setattr(os, "pwrite", eio)
        monkeypatch.setattr(os, "preadv", eio)
        with pytest.raises(IOFailure) as info:
            dev.pwrite(ALIGN, aligned_buffer(ALIGN))
        assert info.value.errno == errno.EIO
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.offset == ALIGN and info.value.where == wal_path
        with pytest.raises(IOFailure) as info:
            dev.pread_into(0, aligned_buffer(ALIGN))
        assert info.value.errno == errno.EIO


def test_buffered_device_syncs_after_every_write(monkeypatch, wal_path):
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd)))
    with BufferedDevice(wal_path, os.open(wal_path, os.O_RDWR), writable=True) as dev:
        dev.pwrite(0, aligned_buffer(ALIGN))
        dev.pwrite(ALIGN, aligned_buffer(2 * ALIGN))
        assert len(synced) == 2


def test_fdatasync_failure_is_io_failure(monkeypatch, wal_path):
    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    with open_device(wal_path, writable=True) as dev:
        monkeypatch.setattr(os, "fdatasync", eio)
        with pytest.raises(IOFailure, match="fdatasync") as info:
            dev.flush()
        assert info.value.errno == errno.EIO


# --- open_device errors --------------------------------------------------------

def test_open_missing_is_not_found(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(NotFoundError) as info:
        open_device(missing, writable=False)
    assert info.value.where == missing
    assert info.value.line() == (f"walctl: error: no such device or file, {missing} "
                                 f"(check the path; DEVICE is the first argument)")


def test_open_directory_or_fifo_is_usage_error(tmp_path):
    with pytest.raises(UsageError, match="directory"):
        open_device(str(tmp_path), writable=True)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a block device or regular file"):
        open_device(fifo, writable=False)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM])
def test_open_permission_denied_is_io_failure(monkeypatch, wal_path, code):
    # Root ignores file modes, so simulate the refusal.
    def refuse(path, flags, *args):
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(IOFailure) as info:
        open_device(wal_path, writable=True)
    assert info.value.hint == "permission denied"
    assert info.value.errno == code
    assert info.value.where == wal_path


# --- buffered fallback ---------------------------------------------------------

def _refuse_odirect(monkeypatch):
    real_open = os.open

    def open_without_odirect(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_without_odirect)


def test_odirect_refused_falls_back_to_buffered(monkeypatch, wal_path):
    _refuse_odirect(monkeypatch)
    with open_device(wal_path, writable=True) as dev:
        assert isinstance(dev, BufferedDevice) and dev.direct is False
        assert dev.warnings == [BUFFERED_WARNING.format(path=wal_path)]
        assert dev.warnings[0] == (
            f"{wal_path}: the filesystem does not support O_DIRECT (tmpfs?); "
            "using buffered I/O + fdatasync, same durability, page cache used")
        flags = fcntl.fcntl(dev.fileno(), fcntl.F_GETFL)
        assert not flags & os.O_DIRECT
        dev.pwrite(0, filled(ALIGN, 9))
    with pytest.raises(UsageError, match="O_DIRECT"):
        open_device(wal_path, writable=True, allow_buffered=False)


def _supports_odirect(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    return True


def test_tmpfs_file(tmp_path):
    """On /dev/shm: BufferedDevice + warning where tmpfs refuses O_DIRECT, DirectDevice
    where it accepts it (Linux >= 6.6 tmpfs does); the data round-trips either way."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    shm_dir = tempfile.mkdtemp(prefix="walctl-test-", dir="/dev/shm")
    try:
        path = os.path.join(shm_dir, "wal.img")
        create_file(path, DEVICE_BYTES)
        data = pattern(2 * ALIGN, seed=5)
        with open_device(path, writable=True) as dev:
            if _supports_odirect(path):
                assert isinstance(dev, DirectDevice) and dev.warnings == []
            else:
                assert isinstance(dev, BufferedDevice)
                assert dev.warnings == [BUFFERED_WARNING.format(path=path)]
            dev.pwrite(ALIGN, data)
        with open_device(path, writable=False) as reader:
            back = aligned_buffer(2 * ALIGN)
            reader.pread_into(ALIGN, back)
        assert back[:] == data[:]
    finally:
        shutil.rmtree(shm_dir)


# --- create_file ---------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, ALIGN, 3 * ALIGN + 17, 1 << 30])
def test_create_file_exact_size(tmp_path, size):
    path = str(tmp_path / "new.img")
    create_file(path, size)
    assert os.stat(path).st_size == size
    with open(path, "rb") as f:
        assert f.read(8192) == bytes(min(size, 8192))


def test_create_file_refuses_existing(tmp_path):
    path = tmp_path / "taken.img"
    path.write_bytes(b"keep me")
    with pytest.raises(RefusedError, match="already exists") as info:
        create_file(str(path), ALIGN)
    assert isinstance(info.value.__cause__, FileExistsError)
    assert path.read_bytes() == b"keep me"


def test_create_file_missing_parent_and_bad_size(tmp_path):
    with pytest.raises(NotFoundError):
        create_file(str(tmp_path / "no" / "such" / "dir.img"), ALIGN)
    with pytest.raises(ValueError):
        create_file(str(tmp_path / "neg.img"), -1)


def test_create_file_syncs_file_and_directory(monkeypatch, tmp_path):
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    path = str(tmp_path / "durable.img")
    create_file(path, ALIGN)
    assert synced == [path, str(tmp_path)]
