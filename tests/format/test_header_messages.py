"""WalHeader's refusals, each with its message and field (issue 32, mutation survivors of
format/header.py): open, recover and inspect print them as the reason a slot is not used. Plus
the AutoMQ flavour's own limits and the JSON a header is shown as."""

from __future__ import annotations

import struct
import zlib

import pytest

from walctl import errors
from walctl.format.header import WalHeader
from tests.format.test_format_header import AUTOMQ_V0, AUTOMQ_V1, BOUNDS_CASES, SAMPLE, SAMPLE_BYTES, automq_bytes, with_field

RING = "1 .. ring size 1073733632"
NATIVE_MESSAGES = {
    (4, 0): "WAL header capacity = 0 out of bounds (>= 16384 and a multiple of 4096)",
    (4, 12288): "WAL header capacity = 12288 out of bounds (>= 16384 and a multiple of 4096)",
    (4, 1073742336): "WAL header capacity = 1073742336 out of bounds (>= 16384 and a multiple of 4096)",
    (12, -2): "WAL header trimOffset = -2 out of bounds (>= -1)",
    (12, -(1 << 63)): f"WAL header trimOffset = {-(1 << 63)} out of bounds (>= -1)",
    (28, 0): f"WAL header slidingWindowMaxLength = 0 out of bounds ({RING})",
    (28, -1): f"WAL header slidingWindowMaxLength = -1 out of bounds ({RING})",
    (28, 1073733633): f"WAL header slidingWindowMaxLength = 1073733633 out of bounds ({RING})",
    (36, 2): "WAL header shutdownType = 2 out of bounds (0 or 1)",
    (36, 0xFFFFFFFF): "WAL header shutdownType = 4294967295 out of bounds (0 or 1)",
    (40, -2): "WAL header nodeId = -2 out of bounds (>= -1)",
    (44, -2): "WAL header epoch = -2 out of bounds (>= -1)",
    (52, -4096): "WAL header nextOffset = -4096 out of bounds (>= 0 and a multiple of 4096)",
    (52, 12289): "WAL header nextOffset = 12289 out of bounds (>= 0 and a multiple of 4096)",
    (52, 4096): "WAL header nextOffset = 4096 out of bounds (>= trimOffset 4660)",
}
FIELDS = {4: "capacity", 12: "trimOffset", 28: "slidingWindowMaxLength", 36: "shutdownType", 40: "nodeId",
          44: "epoch", 52: "nextOffset"}


@pytest.mark.parametrize("field_offset, code, value, reported", BOUNDS_CASES)
def test_native_refusals_say_which_field_and_why(field_offset, code, value, reported):
    with pytest.raises(errors.BoundsError) as info:
        WalHeader.decode(with_field(SAMPLE_BYTES, field_offset, code, value))
    assert info.value.what == NATIVE_MESSAGES[(field_offset, value)]
    assert info.value.field == f"WAL header {FIELDS[field_offset]}"


def test_timestamp_refusal():
    with pytest.raises(errors.BoundsError) as info:
        WalHeader.decode(with_field(SAMPLE_BYTES, 20, ">q", -1))
    assert info.value.what == ("WAL header lastWriteTimestamp = -1 out of bounds (>= 0: a signed int64 with the "
                               "top bit clear)")
    assert (info.value.offset, info.value.field) == (20, "WAL header lastWriteTimestamp")
    assert WalHeader.decode(with_field(SAMPLE_BYTES, 20, ">q", 0)).last_write_timestamp_ns == 0


def automq(field_offset=None, code=None, value=None, magic=AUTOMQ_V0, capacity=1 << 30, window=1 << 20) -> bytes:
    raw = bytearray(automq_bytes(magic, capacity, -1, 5, window, 0, 0, 0))
    if field_offset is not None:
        struct.pack_into(code, raw, field_offset, value)
        struct.pack_into(">I", raw, 52, zlib.crc32(bytes(raw[:52])) & 0x7FFFFFFF)
    return bytes(raw)


@pytest.mark.parametrize("field_offset, code, value, message", [
    (4, ">Q", 4096 * 3 + 100, "WAL header capacity = 12388 out of bounds (>= 2048 and a multiple of 512)"),
    (4, ">Q", 1536, "WAL header capacity = 1536 out of bounds (>= 2048 and a multiple of 512)"),
    (28, ">q", 0, "WAL header slidingWindowMaxLength = 0 out of bounds (1 .. capacity - 1024)"),
    (28, ">q", (1 << 30) - 1023, "WAL header slidingWindowMaxLength = 1073740801 out of bounds (1 .. capacity - 1024)"),
    (12, ">q", -2, "WAL header trimOffset = -2 out of bounds (>= -1)"),
    (36, ">I", 7, "WAL header shutdownType = 7 out of bounds (0 or 1)"),
    (40, ">i", -5, "WAL header nodeId = -5 out of bounds (>= -1)"),
    (44, ">q", -9, "WAL header epoch = -9 out of bounds (>= -1)"),
])
def test_automq_refusals(field_offset, code, value, message):
    with pytest.raises(errors.BoundsError) as info:
        WalHeader.decode(automq(field_offset, code, value))
    assert (info.value.what, info.value.offset) == (message, field_offset)


def test_automq_limits():
    # AutoMQ's smallest: four 512-byte blocks; its window up to capacity - 2 x 512; no nextOffset, any timestamp
    h = WalHeader.decode(automq(capacity=2048, window=1024))
    assert (h.capacity, h.sliding_window_max_length, h.flavour, h.next_offset) == (2048, 1024, "automq-v0", 0)
    h = WalHeader.decode(automq(20, ">q", -7, magic=AUTOMQ_V1))
    assert (h.last_write_timestamp_ns, h.flavour) == (-7, "automq-v1")
    assert WalHeader.decode(automq(28, ">q", (1 << 30) - 1024)).sliding_window_max_length == (1 << 30) - 1024


def test_crc_and_magic_messages():
    raw = bytearray(SAMPLE_BYTES)
    raw[63] ^= 1
    with pytest.raises(errors.ChecksumError) as info:
        WalHeader.decode(bytes(raw))
    stored = int.from_bytes(raw[60:64], "big")
    assert info.value.what == f"WAL header: crc mismatch, stored 0x{stored:08X}, computed 0x{stored ^ 1:08X}"
    assert info.value.offset == 60
    raw = bytearray(automq())
    raw[55] ^= 1
    with pytest.raises(errors.ChecksumError) as info:
        WalHeader.decode(bytes(raw))
    assert info.value.what.startswith("AutoMQ WAL header: crc mismatch, stored 0x") and info.value.offset == 52
    with pytest.raises(errors.BadMagicError) as info:
        WalHeader.decode(b"\x01\x02\x03\x04" + bytes(60))
    assert info.value.what == "WAL header: bad magic 0x01020304, expected 0x57414C43 or 0x12345678 or 0x01234567"
    with pytest.raises(ValueError) as info:
        WalHeader(1 << 20, flavour="automq-v0").encode()
    assert str(info.value) == "walctl writes only its native header"


def test_ring_size_and_json():
    assert WalHeader(1 << 20).ring_size == (1 << 20) - 8192
    assert WalHeader(1 << 20, block_size=512, flavour="automq-v0").ring_size == (1 << 20) - 1024
    assert WalHeader(1 << 20, block_size=65536, flavour="automq-v1").ring_size == (1 << 20) - (1 << 17)
    assert SAMPLE.to_json() == {
        "flavour": "walctl", "capacity_bytes": 1 << 30, "ring_bytes": (1 << 30) - 8192, "trim_offset": 0x1234,
        "last_write_timestamp_ns": 0x1122334455667788, "sliding_window_max_length_bytes": 1 << 20,
        "shutdown_type": "ungraceful", "node_id": 7, "epoch": 42, "next_offset": 0x3000, "block_size_bytes": 4096}
    js = WalHeader(1 << 20, shutdown_type=0, flavour="automq-v1", block_size=512).to_json()
    assert (js["shutdown_type"], js["next_offset"], js["block_size_bytes"], js["flavour"]) == \
        ("graceful", None, 512, "automq-v1")
    d = WalHeader(1 << 20)
    assert (d.trim_offset, d.last_write_timestamp_ns, d.sliding_window_max_length, d.shutdown_type, d.node_id,
            d.epoch, d.next_offset, d.flavour, d.block_size) == (-1, 0, 1 << 20, 0, -1, -1, 0, "walctl", 4096)
    assert d.encode_slot() == d.encode() + bytes(4096 - 64)


def test_zeroed_and_truncated_messages():
    with pytest.raises(errors.ZeroedError) as info:
        WalHeader.decode(bytes(4096), 0)
    assert (info.value.what, info.value.offset) == ("WAL header is all zeros (never written or torn)", 0)
    # native magic, but the buffer ends before the native header's 64 bytes (AutoMQ's 56 are there)
    with pytest.raises(errors.TruncatedError) as info:
        WalHeader.decode(b"\0" * 8 + SAMPLE_BYTES[:60], 8)
    assert (info.value.what, info.value.offset) == ("WAL header truncated: need 64 bytes, found 60", 8)
    with pytest.raises(errors.TruncatedError) as info:
        WalHeader.decode(SAMPLE_BYTES[:55])
    assert info.value.what == "WAL header truncated: need 56 bytes, found 55"
