"""Real block devices: loop devices attached by the ``loop_device`` fixture (root only)."""

import fcntl
import os
import struct

import pytest

from walctl.device import (
    ALIGN,
    DirectDevice,
    aligned_buffer,
    check_safe_to_overwrite,
    holders,
    lock_holder,
    mount_points,
    open_device,
    zero_fill,
)
from walctl.device.create import BLKZEROOUT
from walctl.errors import RefusedError

pytestmark = pytest.mark.loop

LOOP_BYTES = 16 << 20


def pattern(size: int, seed: int):
    buf = aligned_buffer(size)
    buf[:] = bytes((seed + i // ALIGN + i) % 251 for i in range(size))
    return buf


@pytest.mark.parametrize("direct_io", [True, False])
def test_size_and_block_size_from_ioctls(loop_device, direct_io):
    path = loop_device(LOOP_BYTES, direct_io=direct_io)
    with open_device(path, writable=False) as dev:
        assert isinstance(dev, DirectDevice)
        assert dev.is_block_device is True
        assert dev.size_bytes == LOOP_BYTES
        assert dev.logical_block_size in (512, 4096)
        assert dev.warnings == []


def test_odirect_round_trip(loop_device, tmp_path):
    path = loop_device(LOOP_BYTES)
    data = pattern(64 * 1024, seed=1)
    offset = LOOP_BYTES - 64 * 1024  # the very end of the device
    with open_device(path, writable=True) as dev:
        flags = fcntl.fcntl(dev.fileno(), fcntl.F_GETFL)
        assert flags & os.O_DIRECT and flags & os.O_DSYNC
        dev.pwrite(offset, data)
        dev.pwrite(0, data)
    with open_device(path, writable=False) as reader:
        back = aligned_buffer(64 * 1024)
        reader.pread_into(offset, back)
        assert back[:] == data[:]
    # What the device says is what reached the backing file.
    with open(tmp_path / "loop-backing-0.img", "rb") as f:
        f.seek(offset)
        assert f.read(64 * 1024) == data[:]


def test_second_writer_same_process_hits_o_excl(loop_device):
    path = loop_device(LOOP_BYTES)
    with open_device(path, writable=True):
        with pytest.raises(RefusedError) as info:
            open_device(path, writable=True)
        assert info.value.what == "device is busy (mounted, or opened exclusively by another process)"
        assert info.value.hint == f"pid {os.getpid()}"
        # A reader needs neither O_EXCL nor the lock.
        with open_device(path, writable=False) as reader:
            reader.pread_into(0, aligned_buffer(ALIGN))
    with open_device(path, writable=True):
        pass


def test_second_writer_other_process_is_refused(loop_device, hold_writer):
    path = loop_device(LOOP_BYTES)
    pid = hold_writer(path)
    assert lock_holder(path) == pid
    with pytest.raises(RefusedError, match="busy") as info:
        open_device(path, writable=True)
    assert info.value.hint == f"pid {pid}"
    with open_device(path, writable=False) as reader:
        assert any(f"pid {pid}" in w for w in reader.warnings)
        reader.pread_into(0, aligned_buffer(ALIGN))


def test_flock_alone_refuses_a_writer(loop_device, hold_writer):
    """A holder without O_EXCL (plain open + flock) still keeps writers out."""
    path = loop_device(LOOP_BYTES)
    pid = hold_writer(path, mode="flock")
    with pytest.raises(RefusedError) as info:
        open_device(path, writable=True)
    assert info.value.what == "another writer holds the device"
    assert info.value.hint == f"pid {pid}"


def test_zero_fill_uses_blkzeroout(monkeypatch, loop_device):
    path = loop_device(LOOP_BYTES)
    real_ioctl = fcntl.ioctl
    zeroouts = []

    def spy(fd, request, arg=0, *rest):
        if request == BLKZEROOUT:
            zeroouts.append(struct.unpack("=QQ", arg))
        return real_ioctl(fd, request, arg, *rest)

    with open_device(path, writable=True) as dev:
        dev.pwrite(0, pattern(LOOP_BYTES // 4, seed=9))
        monkeypatch.setattr(fcntl, "ioctl", spy)
        monkeypatch.setattr(os, "pwrite", lambda *a: pytest.fail("fell back to writing"))
        seen = []
        zero_fill(dev, ALIGN, 2 * ALIGN, progress=seen.append)
        assert zeroouts == [(ALIGN, 2 * ALIGN)]
        assert seen == [2 * ALIGN]
        monkeypatch.undo()
        back = aligned_buffer(4 * ALIGN)
        dev.pread_into(0, back)
    expected = pattern(LOOP_BYTES // 4, seed=9)
    assert back[:ALIGN] == expected[:ALIGN]
    assert back[ALIGN:3 * ALIGN] == bytes(2 * ALIGN)
    assert back[3 * ALIGN:] == expected[3 * ALIGN:4 * ALIGN]


def test_zero_fill_falls_back_when_blkzeroout_is_unsupported(monkeypatch, loop_device):
    path = loop_device(LOOP_BYTES)
    real_ioctl = fcntl.ioctl

    def no_zeroout(fd, request, arg=0, *rest):
        if request == BLKZEROOUT:
            raise OSError(95, "Operation not supported")
        return real_ioctl(fd, request, arg, *rest)

    with open_device(path, writable=True) as dev:
        dev.pwrite(0, pattern(8 * ALIGN, seed=4))
        monkeypatch.setattr(fcntl, "ioctl", no_zeroout)
        zero_fill(dev, 0, 8 * ALIGN)
        back = aligned_buffer(8 * ALIGN)
        dev.pread_into(0, back)
    assert back[:] == bytes(8 * ALIGN)


def test_unmounted_loop_is_safe_until_it_holds_a_signature(loop_device):
    path = loop_device(LOOP_BYTES)
    rdev = os.stat(path).st_rdev
    with open("/proc/self/mounts") as f:
        assert mount_points(path, rdev, f.read()) == []
    assert holders(os.major(rdev), os.minor(rdev)) == []
    assert check_safe_to_overwrite(path, force=False) == []
    head = aligned_buffer(ALIGN)
    head[0:4] = b"XFSB"
    with open_device(path, writable=True) as dev:
        dev.pwrite(0, head)
    with pytest.raises(RefusedError, match="XFS"):
        check_safe_to_overwrite(path, force=False)
    assert check_safe_to_overwrite(path, force=True) == [
        f"{path}: overwriting a XFS filesystem signature (--force)"]


def test_fixture_refuses_a_third_device(loop_device):
    loop_device(1 << 20)
    loop_device(1 << 20)
    with pytest.raises(RuntimeError, match="at most 2"):
        loop_device(1 << 20)
