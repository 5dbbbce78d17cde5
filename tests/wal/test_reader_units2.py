"""wal/reader.py's options passed on (issue 32): ``probe`` (on by default) in Scan and scan() for
walctl's own logs and AutoMQ's, ``readahead`` (off by default) reading on the read-ahead thread,
and a zero-length physical read that reads nothing."""

from __future__ import annotations

import threading

import pytest

from walctl.device import MemoryDevice
from walctl.format.header import SHUTDOWN_UNGRACEFUL
from walctl.wal import reader
from walctl.wal.findings import Kind
from walctl.wal.headers import read_headers
from walctl.wal.ringread import ScanResult

from walhelpers import append_records, new_wal, physical

KiB = 1 << 10
THREAD = "walctl-scan-read"  # LogReader's read-ahead thread (tests/wal/test_scan_readahead.py)


class _Recording(MemoryDevice):
    """A MemoryDevice noting each read's thread name and size."""

    def __init__(self, image: bytes):
        super().__init__(len(image))
        self.data[:] = image
        self.reads: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def pread_into(self, position, view):
        with self.lock:
            self.reads.append((threading.current_thread().name, memoryview(view).nbytes))
        return super().pread_into(position, view)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A crashed walctl log (one 4 KiB block a record) with random bytes over its fourth record's
    header; its header with a sliding window of 16 KiB: valid records lie past the window."""
    path = new_wal(tmp_path_factory.mktemp("w") / "w.img", 256 * KiB)
    acks = append_records(path, 24, size=3000, iodepth=1, flush_each=True, clean=False)
    at = physical(path, acks[3][0])
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(range(7, 7 + 40)))
        f.seek(0)
        image = f.read()
    dev = MemoryDevice(len(image))
    dev.data[:] = image
    header = read_headers(dev).header.with_(sliding_window_max_length=16 * KiB)
    assert header.shutdown_type == SHUTDOWN_UNGRACEFUL
    return dev, header, acks


def _kinds(report: ScanResult) -> list[Kind]:
    return [f.kind for f in report.findings]


def test_a_scan_probes_past_the_window_by_default(crashed):
    dev, header, acks = crashed
    report = reader.Scan(dev, header).drain()
    assert Kind.BEYOND_WINDOW in _kinds(report) and report.complete is False
    off = reader.Scan(dev, header, probe=False).drain()
    assert Kind.BEYOND_WINDOW not in _kinds(off) and off.records == report.records


def test_scan_s_generator_probes_by_default_and_passes_probe_on(crashed):
    dev, header, acks = crashed
    mine = ScanResult(header, None)
    events = list(reader.scan(dev, header, result=mine))
    assert Kind.BEYOND_WINDOW in [e.kind for e in events if isinstance(e, reader.Finding)]
    assert Kind.BEYOND_WINDOW in _kinds(mine)
    off = ScanResult(header, None)
    events = list(reader.scan(dev, header, probe=False, result=off))
    assert Kind.BEYOND_WINDOW not in [e.kind for e in events if isinstance(e, reader.Finding)]
    assert off.records == mine.records > 0


def _automq_hole():
    from test_automq_forensics import AutoMQImage

    img = AutoMQImage(256 * KiB, 1, stale=False)
    for _ in range(8):
        img.block([300, 900])
    hole = img.blocks[4]
    img.damage(hole, bytes(img.blocks[5] - hole))  # a block in flight at the crash never reached the disk
    img.headers(clean=False)
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    return dev, read_headers(dev).header, hole


def test_an_automq_scan_probes_by_default_too():
    """AutoMQ V1 drops what follows the first invalid block: the probe says what it was."""
    dev, header, hole = _automq_hole()
    assert header.flavour == "automq-v1"
    report = reader.Scan(dev, header).drain()
    assert [(f.kind, f.offset) for f in report.findings] == [(Kind.DISCARDED, hole)]
    assert reader.Scan(dev, header, probe=False).drain().findings == []
    got = [e for e in reader.scan(dev, header) if isinstance(e, reader.Finding)]
    assert [(f.kind, f.offset) for f in got] == [(Kind.DISCARDED, hole)]
    assert [e for e in reader.scan(dev, header, probe=False) if isinstance(e, reader.Finding)] == []


def test_readahead_reads_on_its_thread_only_when_asked(tmp_path):
    path = new_wal(tmp_path / "w.img", 4 << 20)
    append_records(path, 40, size=60 * KiB, iodepth=2)  # ~2.4 MiB: more than one 1 MiB chunk
    with open(path, "rb") as f:
        image = f.read()
    plain = _Recording(image)
    header = read_headers(plain).header
    plain.reads.clear()
    off = reader.Scan(plain, header, bulk=True).drain()
    assert off.records == 40 and {t for t, _ in plain.reads} == {threading.current_thread().name}
    ahead = _Recording(image)
    on = reader.Scan(ahead, header, bulk=True, readahead=True).drain()
    assert on.records == 40 and THREAD in {t for t, _ in ahead.reads}


def test_a_zero_length_physical_read_reads_nothing():
    dev = _Recording(bytes(range(256)) * 48)  # 12 KiB
    assert reader.read_physical(dev, 5000, 0) == b"" and reader.read_physical(dev, 4096, 0) == b""
    assert dev.reads == []
    assert reader.read_physical(dev, 5000, 1) == bytes([5000 % 256]) and len(dev.reads) == 1
