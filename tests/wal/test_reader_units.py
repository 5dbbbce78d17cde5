"""wal/reader.py's own code (issue 32): the Scan wrapper (its report, close, drain, the generator
forms) and the forensics helpers (aligned physical reads at the device's end, a finding's bytes,
the hexdump's layout), on small files and in-memory devices."""

from __future__ import annotations

import pytest

from walctl.device import MemoryDevice
from walctl.device import open_device
from walctl.format.header import HEADERS_SIZE
from walctl.wal import reader
from walctl.wal.findings import Finding, Kind
from walctl.wal.headers import read_headers
from walctl.wal.layout import Ring
from walctl.wal.ringread import Entry, ScanResult

from walhelpers import append_records, new_wal

CAPACITY = 256 * 1024


@pytest.fixture(scope="module")
def wal(tmp_path_factory):
    path = new_wal(tmp_path_factory.mktemp("w") / "w.img", CAPACITY)
    acks = append_records(path, 5, size=300, iodepth=1, flush_each=True)
    return path, acks


def _open(path):
    dev = open_device(path, writable=False)
    return dev, read_headers(dev).header


def test_a_scan_fills_its_report_or_the_one_given(wal):
    path, acks = wal
    dev, header = _open(path)
    try:
        one = reader.Scan(dev, header, keep_offsets=True)
        events = list(one)
        assert [e.offset for e in events if isinstance(e, Entry)] == [o for o, _ in acks]
        assert one.report.records == 5 and one.report.record_offsets == [o for o, _ in acks]
        assert one.report.header is header and one.report.ring == Ring(CAPACITY)
        mine = ScanResult(header, Ring(1 << 30))  # a caller's own: filled, its header and ring set
        got = reader.scan_report(dev, header, report=mine)
        assert got is mine and mine.records == 5 and mine.ring == Ring(CAPACITY) and mine.record_offsets == []
        entries, report = reader.run_scan(dev, header, keep_offsets=True)
        assert [e.offset for e in entries] == [o for o, _ in acks] and report.record_offsets == [o for o, _ in acks]
        given = ScanResult(header, Ring(CAPACITY))
        listed = list(reader.scan(dev, header, keep_offsets=True, result=given))
        assert [e.offset for e in listed if isinstance(e, Entry)] == [o for o, _ in acks]
        assert given.records == 5 and given.record_offsets == [o for o, _ in acks]
        sought = ScanResult(header, Ring(CAPACITY))
        assert [e.offset for e in reader.scan(dev, header, seek=acks[1][0], result=sought)] == [o for o, _ in acks[1:]]
        assert sought.read_from_offset is not None and sought.read_from_offset <= acks[1][0]
        assert sought.record_offsets == []  # scan() keeps no offsets unless asked
        bulk = reader.Scan(dev, header, bulk=True)
        assert not any(isinstance(e, Entry) for e in bulk) and bulk.report.records == 5
    finally:
        dev.close()


def test_a_scan_closed_early_stops_its_events(wal):
    path, acks = wal
    dev, header = _open(path)
    try:
        one = reader.Scan(dev, header, readahead=True)
        first = next(iter(one))
        assert isinstance(first, Entry) and first.offset == acks[0][0]
        one.close()
        assert list(one) == [] and one.report.records == 1
        assert reader.Scan(dev, header).drain().records == 5
    finally:
        dev.close()


def test_read_physical_reads_aligned_and_stops_at_the_device_end():
    dev = MemoryDevice(3 * 4096 + 100)
    dev.data[:] = bytes(i % 251 for i in range(len(dev.data)))
    calls = []
    real = dev.pread_into

    def counted(position, view):
        calls.append((position, len(view)))
        return real(position, view)

    dev.pread_into = counted
    assert reader.read_physical(dev, 4100, 10) == bytes(dev.data[4100:4110]) and calls == [(4096, 4096)]
    calls.clear()
    assert reader.read_physical(dev, 4090, 12) == bytes(dev.data[4090:4102]) and calls == [(0, 8192)]
    assert reader.read_physical(dev, 0, 4096) == bytes(dev.data[:4096])
    # the last, partial block cannot be read aligned: what is before it is
    assert reader.read_physical(dev, 3 * 4096 - 10, 100) == bytes(dev.data[3 * 4096 - 10:3 * 4096])
    assert reader.read_physical(dev, 3 * 4096, 50) == b""
    assert reader.read_physical(dev, 3 * 4096 + 100, 5) == b"" and reader.read_physical(dev, 5000, 0) == b""
    assert reader.read_physical(dev, 10 ** 6, 5) == b""
    assert reader.read_physical(dev, 4097, 1) == bytes(dev.data[4097:4098])  # one byte is a read
    assert reader.read_physical(dev, 3 * 4096 - 1, 100) == bytes(dev.data[3 * 4096 - 1:3 * 4096])

    class NoSize:  # a device that does not say its size: read as asked
        def pread_into(self, position, view):
            view[:] = bytes((position + i) % 256 for i in range(len(view)))
    assert reader.read_physical(NoSize(), 10, 20) == bytes(range(10, 30))


def test_read_physical_of_an_aligned_device_reads_to_its_end():
    dev = MemoryDevice(2 * 4096)
    dev.data[:] = bytes(range(256)) * 32
    assert reader.read_physical(dev, 8000, 500) == bytes(dev.data[8000:8192])
    assert reader.read_physical(dev, 4096, 4096) == bytes(dev.data[4096:])


def test_a_finding_s_bytes_stop_at_its_end_the_lap_end_or_the_limit():
    ring = Ring(CAPACITY)
    dev = MemoryDevice(CAPACITY + 4096)  # a device larger than the WAL: the lap ends before the device
    dev.data[:] = bytes(i % 253 for i in range(CAPACITY + 4096))

    def at(offset):
        return HEADERS_SIZE + offset % ring.size

    f = Finding(Kind.HOLE, 4096, ring, "r", end_offset=4096 + 100)
    assert reader.finding_bytes(dev, f) == (at(4096), bytes(dev.data[at(4096):at(4096) + 100]))
    f = Finding(Kind.HOLE, 4096, ring, "r")
    assert reader.finding_bytes(dev, f) == (at(4096), bytes(dev.data[at(4096):at(4096) + reader.HEXDUMP_BYTES]))
    assert reader.finding_bytes(dev, f, limit=7)[1] == bytes(dev.data[at(4096):at(4096) + 7])
    f = Finding(Kind.HOLE, 4096, ring, "r", end_offset=4096)  # an empty range: the limit
    assert len(reader.finding_bytes(dev, f)[1]) == reader.HEXDUMP_BYTES
    f = Finding(Kind.HOLE, 4096, ring, "r", end_offset=4095)
    assert len(reader.finding_bytes(dev, f)[1]) == reader.HEXDUMP_BYTES
    last = ring.size + ring.size - 10  # second lap, 10 bytes before its end
    f = Finding(Kind.HOLE, last, ring, "r", end_offset=last + 500)
    assert reader.finding_bytes(dev, f) == (at(last), bytes(dev.data[at(last):at(last) + 10]))
    f = Finding(Kind.BAD_HEADER_SLOT, 0, ring, "r", physical_offset=4096)
    assert reader.finding_bytes(dev, f) == (4096, bytes(dev.data[4096:4096 + reader.HEXDUMP_BYTES]))
    assert reader.HEXDUMP_BYTES == 256


def test_hexdump_lines_are_xxd_like():
    data = bytes(range(0x1E, 0x1E + 20)) + b"\x7f\x80"
    assert reader.hexdump(data, 0x1000).split("\n") == [
        "00001000: 1e1f 2021 2223 2425 2627 2829 2a2b 2c2d  .. !\"#$%&'()*+,-",
        "00001010: 2e2f 3031 7f80                           ./01..",
    ]
    assert reader.hexdump(b"~") == "00000000: 7e" + " " * 39 + "~"  # hex padded to 39, then 2 spaces
    assert reader.hexdump(b"") == ""
    assert reader.hexdump(bytes(16)) == "00000000: 0000 0000 0000 0000 0000 0000 0000 0000  " + "." * 16


def test_the_automq_extra_bytes_are_named_here_lazily():
    from walctl.wal import automq_scan
    assert reader.AUTOMQ_EXTRA_SCAN_BYTES == automq_scan.AUTOMQ_EXTRA_SCAN_BYTES
    assert set(reader.__all__) >= {"Scan", "scan", "scan_report", "run_scan", "hexdump", "finding_bytes",
                                   "read_physical", "AUTOMQ_EXTRA_SCAN_BYTES"}


def test_an_automq_log_is_scanned_by_automq_s_rules_with_the_same_options():
    from test_automq_forensics import AutoMQImage

    img = AutoMQImage(256 * 1024, 1, stale=False, block_size=1024)  # the ring starts at 2 KiB
    offsets = img.block([100, 200]) + img.block([50])
    img.headers(clean=True)
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    header = read_headers(dev).header
    assert header.flavour == "automq-v1"
    one = reader.Scan(dev, header, keep_offsets=True)
    assert [e.offset for e in one if isinstance(e, Entry)] == offsets
    assert one.report.record_offsets == offsets and one.report.records == 3
    assert reader.Scan(dev, header).drain().record_offsets == []
