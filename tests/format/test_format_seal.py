"""SealDescriptor (FORMATS.md 1.5): golden bytes, round trips, junk gives only our errors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.errors import FormatError
from walctl.format.crc import crc32c
from walctl.format.seal import FIXED_SIZE, MAX_STREAMS, SealDescriptor, size_for


def test_golden_bytes():
    d = SealDescriptor(4096, 8192, 1_000, 999, ((3, 1, 2),))
    body = (bytes.fromhex("5345414C" "0001" "0001") + struct.pack(">qqqqI", 4096, 8192, 1_000, 999, 0)
            + struct.pack(">qqq", 3, 1, 2))
    assert d.encode() == body + struct.pack(">I", crc32c(body))
    assert len(d.encode()) == size_for(1) == FIXED_SIZE + 24 + 4 == 72
    assert SealDescriptor.decode(b"\0" * 24 + d.encode(), 24) == d


def test_too_many_streams_are_truncated_and_flagged():
    streams = tuple((s, 0, 1) for s in range(MAX_STREAMS + 5))
    d = SealDescriptor.decode(SealDescriptor(0, 4096, 1, 1, streams).encode())
    assert len(d.streams) == MAX_STREAMS and d.streams_truncated
    assert 24 + size_for(MAX_STREAMS) <= 4096  # stays in the padding record's first sector


@pytest.mark.parametrize("damage", [lambda b: b[:10], lambda b: bytes(len(b)), lambda b: b"X" + b[1:],
                                    lambda b: b[:-1] + bytes([b[-1] ^ 1]), lambda b: b[:4] + b"\0\2" + b[6:]])
def test_damage_is_a_format_error(damage):
    raw = SealDescriptor(0, 4096, 1, 1, ((1, 0, 5),)).encode()
    with pytest.raises(FormatError):
        SealDescriptor.decode(damage(raw))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_junk_gives_only_format_errors(data):
    try:
        SealDescriptor.decode(b"SEAL" + data)
    except FormatError:
        pass
