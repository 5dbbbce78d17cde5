"""The exact error of each record check (issue 32: mutants that changed only a message survived).

An operator reads these: the message names the field, the value and the rule, and the error's
offset points at the field (the WAL offset a report prints)."""

from __future__ import annotations

import pytest

from walctl import errors
from walctl.format import record as rec

GOOD = rec.encode_record(100, b"hello")


def _flip(buf: bytes, at: int) -> bytes:
    return buf[:at] + bytes([buf[at] ^ 1]) + buf[at + 1:]


@pytest.mark.parametrize("buf, kwargs, error, message, offset", [
    (GOOD[:10], {}, errors.TruncatedError, "record header truncated: need 24 bytes, found 10", 0),
    (bytes(24), {}, errors.ZeroedError, "record header is all zeros (never written or torn)", 0),
    (b"\x11" + GOOD[1:], {}, errors.BadMagicError,
     "record header: bad magic 0x11654321, expected 0x87654321 or 0x76543210", 0),
    (_flip(GOOD, 10), {}, errors.ChecksumError,
     "record header: crc mismatch, stored 0x3DF009ED, computed 0xF6A67248", 20),
    (rec.RecordHeader(rec.DATA_MAGIC, 0, 124, 0).encode(), {}, errors.BoundsError,
     "record bodyLength = 0 out of bounds (> 0)", 4),
    (rec.RecordHeader(rec.DATA_MAGIC, 5, 3, 0).encode(), {}, errors.BoundsError,
     "record bodyOffset = 3 out of bounds (>= 24)", 8),
    (GOOD, {"expected_offset": 50}, errors.BoundsError,
     "record bodyOffset = 124 out of bounds (expected 74: the record's offset + 24)", 8),
])
def test_each_header_check_says_what_and_where(buf, kwargs, error, message, offset):
    with pytest.raises(error) as info:
        rec.RecordHeader.decode(b"\0" * 7 + buf, 7, **kwargs)
    assert str(info.value) == message and info.value.offset == 7 + offset


@pytest.mark.parametrize("body, error, message", [
    (b"hel", errors.TruncatedError, "record body truncated: need 5 bytes, found 3"),
    (b"hellO", errors.ChecksumError, "record body: crc mismatch, stored 0x9A71BB4C, computed 0xBACC3592"),
])
def test_each_body_check_says_what_and_where(body, error, message):
    head = rec.RecordHeader.decode(GOOD)
    with pytest.raises(error) as info:
        head.check_body(body)  # offset defaults to 0: the body's own start
    assert str(info.value) == message and info.value.offset == 0
    with pytest.raises(error) as info:
        head.check_body(body, 124)
    assert info.value.offset == 124


def test_padding_too_short_says_why():
    with pytest.raises(ValueError, match=r"^padding must cover more than its 24-byte header, got 24$"):
        rec.RecordHeader.padding(0, 24)
