"""FaultyDevice's injected failures, and zero_fill on files and in memory."""

import errno

import pytest

from walctl.device import ALIGN, Device, FaultyDevice, MemoryDevice, aligned_buffer, create_file, open_device, zero_fill
from walctl.device import create as device_create
from walctl.errors import IOFailure


def filled(size: int, byte: int):
    buf = aligned_buffer(size)
    buf[:] = bytes([byte]) * size
    return buf


# --- FaultyDevice --------------------------------------------------------------

def test_faulty_device_is_a_device_and_passes_through():
    inner = MemoryDevice(4 * ALIGN, path="mem")
    dev = FaultyDevice(inner)
    assert isinstance(dev, Device)
    assert (dev.path, dev.size_bytes, dev.writable, dev.direct) == ("mem", 4 * ALIGN, True, False)
    dev.pwrite(ALIGN, filled(ALIGN, 3))
    back = aligned_buffer(ALIGN)
    dev.pread_into(ALIGN, back)
    dev.flush()
    assert back[:] == b"\x03" * ALIGN
    assert (dev.writes, dev.reads, dev.failures) == (1, 1, 0)


def test_writes_fail_after_n():
    inner = MemoryDevice(8 * ALIGN)
    dev = FaultyDevice(inner, fail_writes_after=2)
    dev.pwrite(0, filled(ALIGN, 1))
    dev.pwrite(ALIGN, filled(ALIGN, 2))
    for _ in range(2):  # and every write after that
        with pytest.raises(IOFailure) as info:
            dev.pwrite(2 * ALIGN, filled(ALIGN, 3))
        assert info.value.errno == errno.EIO
        assert info.value.offset == 2 * ALIGN
    assert (dev.writes, dev.failures) == (2, 2)
    assert inner.data[2 * ALIGN:3 * ALIGN] == bytes(ALIGN)  # nothing of the failed writes landed


def test_fail_writes_after_zero_fails_the_first():
    dev = FaultyDevice(MemoryDevice(ALIGN), fail_writes_after=0)
    with pytest.raises(IOFailure):
        dev.pwrite(0, filled(ALIGN, 1))


def test_torn_write_lands_a_prefix_once():
    inner = MemoryDevice(8 * ALIGN)
    dev = FaultyDevice(inner, fail_writes_after=1, torn_write_bytes=ALIGN)
    dev.pwrite(0, filled(ALIGN, 1))
    with pytest.raises(IOFailure):
        dev.pwrite(ALIGN, filled(3 * ALIGN, 0xFF))
    assert inner.data[ALIGN:2 * ALIGN] == b"\xff" * ALIGN      # the first page landed
    assert inner.data[2 * ALIGN:4 * ALIGN] == bytes(2 * ALIGN)  # the rest did not
    with pytest.raises(IOFailure):
        dev.pwrite(4 * ALIGN, filled(ALIGN, 0xEE))
    assert inner.data[4 * ALIGN:5 * ALIGN] == bytes(ALIGN)      # later failures write nothing


def test_fail_flush():
    dev = FaultyDevice(MemoryDevice(ALIGN), fail_flush=True)
    with pytest.raises(IOFailure, match="flush") as info:
        dev.flush()
    assert info.value.errno == errno.EIO


def test_reads_of_listed_offsets_fail():
    dev = FaultyDevice(MemoryDevice(8 * ALIGN), fail_reads_at={2 * ALIGN})
    buf = aligned_buffer(2 * ALIGN)
    dev.pread_into(0, buf)                # [0, 8192): clear of the bad sector
    with pytest.raises(IOFailure) as info:
        dev.pread_into(ALIGN, buf)        # [4096, 12288) covers it
    assert info.value.offset == 2 * ALIGN and info.value.errno == errno.EIO
    dev.pread_into(3 * ALIGN, buf)
    assert (dev.reads, dev.failures) == (2, 1)


@pytest.mark.parametrize("kwargs", [
    {"fail_writes_after": -1},
    {"torn_write_bytes": 100},
    {"fail_reads_at": {512}},
])
def test_faulty_device_rejects_bad_rules(kwargs):
    with pytest.raises(ValueError):
        FaultyDevice(MemoryDevice(ALIGN), **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"fail_writes_after": 0, "fail_reads_at": {0}}])
def test_faulty_device_keeps_alignment_rules(kwargs):
    dev = FaultyDevice(MemoryDevice(2 * ALIGN), **kwargs)
    with pytest.raises(ValueError):
        dev.pwrite(512, aligned_buffer(ALIGN))
    with pytest.raises(ValueError):
        dev.pread_into(512, aligned_buffer(ALIGN))
    assert dev.failures == 0


# --- zero_fill -----------------------------------------------------------------

def test_zero_fill_zeroes_exactly_the_range_in_memory():
    dev = MemoryDevice(8 * ALIGN)
    dev.data[:] = b"\xab" * (8 * ALIGN)
    zero_fill(dev, 2 * ALIGN, 3 * ALIGN)
    assert dev.data == b"\xab" * (2 * ALIGN) + bytes(3 * ALIGN) + b"\xab" * (3 * ALIGN)


def test_zero_fill_on_a_file_in_chunks_with_progress(monkeypatch, tmp_path):
    monkeypatch.setattr(device_create, "ZERO_CHUNK_BYTES", 2 * ALIGN)
    path = str(tmp_path / "wal.img")
    create_file(path, 16 * ALIGN)
    with open(path, "r+b") as f:
        f.write(b"\xab" * (16 * ALIGN))
    seen = []
    with open_device(path, writable=True) as dev:
        zero_fill(dev, ALIGN, 5 * ALIGN, progress=seen.append)
    assert seen == [2 * ALIGN, 4 * ALIGN, 5 * ALIGN]
    with open(path, "rb") as f:
        data = f.read()
    assert data == b"\xab" * ALIGN + bytes(5 * ALIGN) + b"\xab" * (10 * ALIGN)


def test_zero_fill_whole_device_is_durable_through_faults():
    # zero_fill writes through the Device, so a failing device fails the wipe.
    dev = FaultyDevice(MemoryDevice(4 * ALIGN), fail_writes_after=0)
    with pytest.raises(IOFailure):
        zero_fill(dev, 0, 4 * ALIGN)


@pytest.mark.parametrize(("offset", "length", "match"), [
    (512, ALIGN, "offset"),
    (0, 100, "length"),
    (0, 0, "length"),
    (3 * ALIGN, 2 * ALIGN, "passes the end"),
])
def test_zero_fill_rejects_bad_ranges(offset, length, match):
    dev = MemoryDevice(4 * ALIGN)
    dev.data[:] = b"\x01" * (4 * ALIGN)
    with pytest.raises(ValueError, match=match):
        zero_fill(dev, offset, length)
    assert dev.data == b"\x01" * (4 * ALIGN)


def test_zero_fill_refuses_a_read_only_device():
    with pytest.raises(ValueError, match="read-only"):
        zero_fill(MemoryDevice(ALIGN, writable=False), 0, ALIGN)
