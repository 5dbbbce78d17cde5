"""The checkpoint in a header slot's unused bytes (FORMATS.md 1.6): golden bytes, round trips, junk."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError
from walctl.format.checkpoint import MAX_STREAMS, POSITION, Checkpoint, bounded
from walctl.format.crc import crc32c
from walctl.format.header import WalHeader


def test_golden_bytes():
    cp = Checkpoint(log_end=12345, streams={7: 3, 2: 10}, complete=True, uploaded_offset=4096)
    body = (struct.pack(">IHHqqI", 0x5743504B, 1, 1, 12345, 4096, 2)
            + struct.pack(">qq", 2, 10) + struct.pack(">qq", 7, 3))
    assert cp.encode() == body + struct.pack(">I", crc32c(body))
    assert len(cp.encode()) == 28 + 2 * 16 + 4


def _slot(cp: Checkpoint | None) -> bytearray:
    slot = bytearray(WalHeader(capacity=1 << 20).encode_slot())
    if cp is not None:
        data = cp.encode()
        slot[POSITION:POSITION + len(data)] = data
    return slot


@given(st.integers(0, 2**62), st.dictionaries(st.integers(0, 2**62), st.integers(0, 2**62), max_size=MAX_STREAMS),
       st.booleans(), st.integers(-1, 2**62))
def test_round_trip(log_end, streams, complete, uploaded):
    cp = Checkpoint(log_end, streams, complete, uploaded)
    assert Checkpoint.decode(_slot(cp)) == cp


def test_absent_in_a_slot_written_before_checkpoints():
    assert Checkpoint.decode(_slot(None)) is None


def test_the_largest_fits_the_slot_and_one_more_does_not():
    cp = Checkpoint(1, {i: i for i in range(MAX_STREAMS)})
    assert POSITION + len(cp.encode()) <= 4096
    assert Checkpoint.decode(_slot(cp)) == cp
    with pytest.raises(ValueError):
        Checkpoint(1, {i: i for i in range(MAX_STREAMS + 1)}).encode()


@pytest.mark.parametrize("position,value,error", [
    (POSITION, b"\x12", BadMagicError),  # magic
    (POSITION + 40, b"\xff", ChecksumError),  # an entry's byte
    (POSITION + 24, struct.pack(">I", MAX_STREAMS + 1), BoundsError),  # stream count
])
def test_damage_is_a_format_error(position, value, error):
    slot = _slot(Checkpoint(5, {1: 2, 3: 4}))
    slot[position:position + len(value)] = value
    with pytest.raises(error):
        Checkpoint.decode(slot)


def test_truncated():
    with pytest.raises(TruncatedError):
        Checkpoint.decode(_slot(Checkpoint(5, {1: 2}))[:POSITION + 30])


@given(st.binary(min_size=0, max_size=4096))
def test_junk_raises_only_our_errors(junk):
    slot = bytearray(4096)
    slot[POSITION:POSITION + len(junk)] = junk[:4096 - POSITION]
    try:
        Checkpoint.decode(slot)
    except FormatError:
        pass


def test_bounded_keeps_the_most_recently_written():
    streams = {i: i * 10 for i in range(MAX_STREAMS + 5)}
    recency = {i: 1000 - i for i in streams}  # stream 0 written last
    kept, all_kept = bounded(streams, recency)
    assert not all_kept and len(kept) == MAX_STREAMS
    assert 0 in kept and MAX_STREAMS + 4 not in kept and kept[3] == 30
    assert bounded({1: 2}, None) == ({1: 2}, True)
