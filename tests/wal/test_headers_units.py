"""wal/headers.py exactly (issue 32): which slot is current, what a damaged slot reports, the
alternating header write, and AutoMQ's block size (from its second slot, its first record, an
option, or the default), on in-memory images."""

from __future__ import annotations

import pytest

from walctl.device import MemoryDevice
from walctl.errors import FormatError, NotFoundError
from walctl.format.checkpoint import POSITION, Checkpoint
from walctl.format.header import SLOT_SIZE, WalHeader
from walctl.wal import headers as hd

from test_automq_forensics import AutoMQImage, KiB

CAPACITY = 64 * KiB
FUTURE = 1 << 62  # a header timestamp far ahead of the clock


def _walctl(ts0: int = 100, ts1: int = 101, checkpoint: Checkpoint | None = None) -> MemoryDevice:
    dev = MemoryDevice(CAPACITY)
    base = WalHeader(CAPACITY, sliding_window_max_length=8192)
    hd.write_slot(dev, 0, base.with_(last_write_timestamp_ns=ts0))
    hd.write_slot(dev, 1, base.with_(last_write_timestamp_ns=ts1), checkpoint)
    return dev


def test_the_current_slot_is_the_newest_valid_one_and_a_tie_goes_to_slot_1():
    state = hd.read_headers(_walctl(100, 101))
    assert state.current == 1 and state.header.last_write_timestamp_ns == 101 and state.block_size_source == "native"
    assert hd.read_headers(_walctl(102, 101)).current == 0
    assert hd.read_headers(_walctl(7, 7)).current == 1
    assert state.bad_slots == [] and [s.position for s in state.slots] == [0, SLOT_SIZE]


def test_a_damaged_slot_says_why_and_the_other_is_used():
    dev = _walctl(100, 101)
    dev.data[SLOT_SIZE + 3] ^= 0xFF
    state = hd.read_headers(dev)
    assert state.current == 0 and [s.index for s in state.bad_slots] == [1]
    bad = state.slots[1]
    assert bad.header is None and bad.error is not None
    assert bad.to_json() == {"slot": 1, "physical_offset": SLOT_SIZE, "valid": False, "error": str(bad.error),
                             "checkpoint": False}
    assert state.slots[0].to_json() == {"slot": 0, "physical_offset": 0, "valid": True,
                                        "last_write_timestamp_ns": 100, "checkpoint": False}
    dev.data[3] ^= 0xFF
    with pytest.raises(NotFoundError) as info:
        hd.read_headers(dev)
    assert str(info.value) == "no valid WAL header (not a WAL, or both header slots destroyed)"
    assert info.value.hint.startswith("slot 0: ") and "; slot 1: " in info.value.hint


def test_a_slot_s_checkpoint_and_its_damage():
    cp = Checkpoint(log_end=8192)
    dev = _walctl(100, 101, cp)
    state = hd.read_headers(dev)
    assert state.checkpoint == cp and state.slots[1].checkpoint == cp and state.slots[0].checkpoint is None
    assert state.slots[1].to_json()["checkpoint"] is True
    dev.data[SLOT_SIZE + POSITION + 5] ^= 0xFF
    state = hd.read_headers(dev)
    assert state.current == 1 and state.checkpoint is None and state.slots[1].checkpoint_error is not None
    out = state.slots[1].to_json()
    assert out["checkpoint"] is False and out["checkpoint_error"] == str(state.slots[1].checkpoint_error)
    assert "error" not in out and out["valid"] is True


def test_write_header_alternates_slots_keeps_the_checkpoint_and_orders_timestamps():
    cp = Checkpoint(log_end=4096)
    dev = _walctl(100, FUTURE, cp)  # a timestamp far in the future: the next one is above it
    state = hd.read_headers(dev)
    new = hd.write_header(dev, state, state.header.with_(trim_offset=0))
    assert new.current == 0 and new.header.last_write_timestamp_ns == FUTURE + 1 and new.checkpoint == cp
    assert new.slots[1] is state.slots[1] and new.slots[0].block_size == SLOT_SIZE and new.slots[0].index == 0
    again = hd.read_headers(dev)
    assert again.current == 0 and again.checkpoint == cp and again.header == new.header
    third = hd.write_header(dev, again, again.header, checkpoint=None)
    assert third.current == 1 and third.checkpoint is None and hd.read_headers(dev).checkpoint is None
    assert hd.next_timestamp(5) > 5 and hd.next_timestamp(FUTURE) == FUTURE + 1


def test_the_current_header_of_a_state_without_one_is_an_error():
    state = hd.HeaderState((hd.Slot(0, None, None), hd.Slot(1, None, None)), 0)
    with pytest.raises(AssertionError, match="current slot must be valid"):
        state.header


@pytest.mark.parametrize("block_size", [512, 4096, 8192, 65536])
def test_automq_block_size_from_its_second_slot(block_size):
    img = AutoMQImage(512 * KiB, 1, block_size=block_size)
    img.block([100, 200])
    img.headers(clean=True)
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    state = hd.read_headers(dev)
    assert state.header.block_size == block_size and state.block_size_source == "header slots"
    assert [s.position for s in state.slots] == [0, block_size]


@pytest.mark.parametrize("block_size", [512, 8192])
def test_automq_block_size_from_its_first_record_when_slot_1_is_empty(block_size):
    img = AutoMQImage(256 * KiB, 1, block_size=block_size, stale=False)
    img.block([100, 200])
    img.headers(clean=False)
    img.data[block_size:2 * block_size] = bytes(block_size)
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    state = hd.read_headers(dev)
    assert (state.header.block_size, state.block_size_source, state.current) == (block_size, "first record", 0)
    assert hd.detect_automq_block_size(dev, bytes(img.data[:2 * 65536])) == (block_size, "first record")


def test_automq_block_size_by_option_or_the_default():
    img = AutoMQImage(256 * KiB, 0, block_size=4096, stale=False)
    img.headers(clean=True)
    img.data[4096:8192] = bytes(4096)  # one slot, and no record: nothing tells the block size
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    state = hd.read_headers(dev)
    assert (state.header.block_size, state.block_size_source) == (4096, "default")
    state = hd.read_headers(dev, block_size=512)
    assert (state.header.block_size, state.block_size_source) == (512, "option")
    dev.data[:4096] = bytes(4096)
    with pytest.raises(NotFoundError):
        hd.read_headers(dev)


def test_a_record_at_the_trim_point_or_the_block_after_it():
    img = AutoMQImage(256 * KiB, 1, block_size=1024, stale=False)
    img.block([50])
    second = img.block([60])[0]
    img.headers(trim=second - 1, clean=True)  # AutoMQ trims to "first free block - 1"
    img.data[1024:2048] = bytes(1024)
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    header = WalHeader.decode(bytes(img.data), 0)
    assert hd._record_at_start(dev, header, 1024) is True
    assert hd._record_at_start(dev, header, 2048) is False
    assert hd._record_at_start(dev, header.with_(trim_offset=second), 1024) is True
    assert hd._record_at_start(dev, header.with_(trim_offset=second + 2), 1024) is False
    assert hd._record_at_start(dev, header.with_(capacity=len(img.data) * 2), 1024) is False
    assert hd.DETECT_BYTES == 2 * 65536


def _dev(img) -> MemoryDevice:
    dev = MemoryDevice(len(img.data))
    dev.data[:] = img.data
    return dev


def test_automq_block_size_from_slot_b_when_slot_0_is_damaged():
    img = AutoMQImage(256 * KiB, 0, block_size=2048, stale=False)
    img.block([100])
    img.headers(clean=False, slot=1)  # the newest header in slot 1, at 2048
    img.data[0:2048] = bytes(2048)
    state = hd.read_headers(_dev(img))
    assert (state.header.block_size, state.block_size_source, state.current) == (2048, "header slots", 1)
    assert [s.index for s in state.bad_slots] == [0]
    bad = state.slots[0]
    assert bad.block_size == 2048 and isinstance(bad.error, FormatError) and state.slots[1].position == 2048


def test_a_small_automq_device_is_read_whole_for_detection():
    img = AutoMQImage(64 * KiB, 1, block_size=16384, stale=False)
    img.block([10])
    img.headers(clean=True)
    state = hd.read_headers(_dev(img))
    assert (state.header.block_size, state.block_size_source) == (16384, "header slots")


def test_no_record_can_start_in_a_ring_of_no_bytes_or_past_the_device():
    img = AutoMQImage(256 * KiB, 1, block_size=1024, stale=False)
    img.block([50])
    img.headers(clean=True)
    dev = _dev(img)
    header = WalHeader.decode(bytes(img.data), 0)
    assert hd._record_at_start(dev, header, 1024) is True
    assert hd._record_at_start(dev, header.with_(capacity=2048), 1024) is False  # two slots, no ring
    assert hd._record_at_start(dev, header.with_(trim_offset=img.ring), 1024) is False  # a lap earlier's record
    assert hd._record_at_start(dev, header.with_(capacity=len(img.data) + 1024), 1024) is False


def test_walctl_s_own_slots_give_no_automq_block_size():
    dev = _walctl(100, 101)
    assert hd.detect_automq_block_size(dev, bytes(dev.data)) is None
