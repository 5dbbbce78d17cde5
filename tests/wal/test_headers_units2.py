"""wal/headers.py's AutoMQ block size detection at its edges (issue 32): the newest slot-B
header is the reference when slot 0 is damaged and several sizes decode; the trim-point rule
(the block after the trim point only when the trim point is a block's last byte); a record
header read at the device's end, and after the lap's last byte, at the ring's start."""

from __future__ import annotations

from walctl.device import MemoryDevice
from walctl.format.header import WalHeader
from walctl.wal import headers as hd

from test_automq_forensics import V1_MAGIC, AutoMQImage, KiB, amq_header, amq_record, batch

CAPACITY = 256 * KiB


def _dev(img) -> MemoryDevice:
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    return dev


def test_with_slot_0_damaged_the_newest_slot_b_header_decides():
    """A stale header of an earlier format (1 KiB blocks: its second slot at 1024) is left inside
    slot 0's bytes, the rest of slot 0 is damaged; the current one (4 KiB blocks) is newer."""
    img = AutoMQImage(CAPACITY, 1, block_size=4096, stale=False)
    img.block([100, 200])
    img.headers(clean=False, slot=1, ts=2_000_000)  # the current header: slot 1, at 4096
    img.data[0:4096] = bytes(4096)
    # older, and its trim point names no record in either ring: it decides nothing
    img.data[1024:2048] = amq_header(V1_MAGIC, CAPACITY, 100, 1_000_000, 64 * KiB, 1, block=1024)
    raw = bytes(img.data[:2 * 65536])
    dev = _dev(img)
    assert hd.detect_automq_block_size(dev, raw) == (4096, "first record")
    state = hd.read_headers(dev)
    assert (state.header.block_size, state.block_size_source, state.current) == (4096, "first record", 1)
    assert state.header.last_write_timestamp_ns == 2_000_000
    # the same two headers, the stale one the newer: its trim point decides, and finds no record
    img.data[1024:2048] = amq_header(V1_MAGIC, CAPACITY, 100, 3_000_000, 64 * KiB, 1, block=1024)
    assert hd.detect_automq_block_size(_dev(img), bytes(img.data[:2 * 65536])) is None


def test_the_block_after_the_trim_point_counts_only_after_a_block_s_last_byte():
    img = AutoMQImage(CAPACITY, 1, block_size=1024, stale=False)
    first, second = img.block([50, 60])  # the second record starts inside the block
    img.headers(clean=True)
    dev = _dev(img)
    header = WalHeader.decode(bytes(img.data), 0)
    assert hd._record_at_start(dev, header.with_(trim_offset=second), 1024) is True
    assert hd._record_at_start(dev, header.with_(trim_offset=second - 1), 1024) is False
    assert hd._record_at_start(dev, header.with_(trim_offset=-1), 1024) is True  # no trim: the ring's start


def test_a_record_header_ending_at_the_device_s_end_is_read():
    img = AutoMQImage(CAPACITY, 1, block_size=1024, stale=False)
    img.headers(clean=True)
    last = img.ring - 24  # a record header in the device's last 24 bytes
    img.data[img.pos(last):] = amq_record(last, batch(5, 0, b"x"))[:24]
    dev = _dev(img)
    header = WalHeader.decode(bytes(img.data), 0)
    assert len(dev.data) == CAPACITY and img.pos(last) + 24 == CAPACITY
    assert hd._record_at_start(dev, header.with_(trim_offset=last), 1024) is True
    assert hd._record_at_start(dev, header.with_(trim_offset=last - 1), 1024) is False


def test_a_trim_point_at_the_lap_s_last_byte_finds_the_record_at_the_ring_s_start():
    """AutoMQ trims to "first free block - 1": when that block is the next lap's first, the trim
    point is the lap's last byte, whose record header could not fit before the device's end."""
    img = AutoMQImage(CAPACITY, 1, block_size=1024, stale=False)
    img.next = img.ring  # the next lap's first block
    assert img.block([70]) == [img.ring]
    img.headers(trim=img.ring - 1, clean=True)
    dev = _dev(img)
    header = WalHeader.decode(bytes(img.data), 0)
    assert header.trim_offset == img.ring - 1
    assert hd._record_at_start(dev, header, 1024) is True
    assert hd.read_headers(dev).header.block_size == 1024
