"""Checkpoint refusals, each with its message, field and position, the limits each field accepts,
bounded()'s choice and the checkpoint's JSON (issue 32, mutation survivors of format/checkpoint.py).
The bytes are made here from FORMATS.md 1.6's table."""

from __future__ import annotations

import struct

import pytest

from walctl import errors
from walctl.format.checkpoint import MAX_STREAMS, Checkpoint, bounded
from walctl.format.crc import crc32c


def slot(magic=0x5743504B, version=1, flags=1, log_end=100, uploaded=-1, entries=((2, 10), (7, 3)), count=None,
         at=64) -> bytes:
    """magic@0, version@4, flags@6, logEnd@8, uploadedOffset@16, count@24, count x (stream, next), crc; at ``at``."""
    body = struct.pack(">IHHqqI", magic, version, flags, log_end, uploaded, len(entries) if count is None else count)
    body += b"".join(struct.pack(">qq", *e) for e in entries)
    return bytes(at) + body + struct.pack(">I", crc32c(body))


@pytest.mark.parametrize("raw, error, field, found, position, message", [
    (slot(magic=1), errors.BadMagicError, None, 1, 0, "WAL checkpoint: bad magic 0x00000001, expected 0x5743504B"),
    (slot(version=2), errors.BoundsError, "WAL checkpoint version", 2, 4,
     "WAL checkpoint version = 2 out of bounds (1)"),
    (slot(count=251, entries=()), errors.BoundsError, "WAL checkpoint stream count", 251, 24,
     "WAL checkpoint stream count = 251 out of bounds (<= 250)"),
    (slot(flags=2), errors.BoundsError, "WAL checkpoint flags", 2, 6, "WAL checkpoint flags = 2 out of bounds (only 0x0001)"),
    (slot(flags=0x8001), errors.BoundsError, "WAL checkpoint flags", 0x8001, 6,
     "WAL checkpoint flags = 32769 out of bounds (only 0x0001)"),
    (slot(log_end=-1), errors.BoundsError, "WAL checkpoint logEnd", -1, 8, "WAL checkpoint logEnd = -1 out of bounds (>= 0)"),
    (slot(uploaded=-2), errors.BoundsError, "WAL checkpoint uploadedOffset", -2, 16,
     "WAL checkpoint uploadedOffset = -2 out of bounds (>= -1)"),
    (slot(entries=((2, 10), (7, -1))), errors.BoundsError, "WAL checkpoint stream 7 next offset", -1, 28 + 16 + 8,
     "WAL checkpoint stream 7 next offset = -1 out of bounds (>= 0)"),
    (slot()[:64 + 27], errors.TruncatedError, None, 27, 0, "WAL checkpoint truncated: need 28 bytes, found 27"),
    (slot()[:-1], errors.TruncatedError, None, 63, 0, "WAL checkpoint truncated: need 64 bytes, found 63"),
], ids=["magic", "version", "count", "flags", "flags-high", "log-end", "uploaded", "next-offset", "fixed-cut",
        "entries-cut"])
def test_refusals(raw, error, field, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        Checkpoint.decode(raw)
    exc = info.value
    assert type(exc) is error
    assert (exc.what, getattr(exc, "field", None), exc.found, exc.offset) == (message, field, found, 64 + position)


def test_crc_is_checked_before_the_fields_and_covers_the_entries():
    raw = bytearray(slot(log_end=-1))
    raw[-1] ^= 1
    with pytest.raises(errors.ChecksumError) as info:
        Checkpoint.decode(bytes(raw))
    assert info.value.offset == 64 + 28 + 32
    assert info.value.what.startswith("WAL checkpoint: crc mismatch, stored 0x")
    raw = bytearray(slot())
    raw[64 + 28 + 16 + 15] ^= 1  # stream 7's next offset
    with pytest.raises(errors.ChecksumError):
        Checkpoint.decode(bytes(raw))


def test_limits_and_a_position_of_its_own():
    cp = Checkpoint.decode(slot(flags=0, log_end=0, uploaded=-1, entries=((0, 0),)))
    assert cp == Checkpoint(0, {0: 0}, False, -1)
    assert Checkpoint.decode(slot(entries=())) == Checkpoint(100, {}, True, -1)
    assert Checkpoint.decode(slot(at=10), 10) == Checkpoint(100, {2: 10, 7: 3}, True, -1)
    assert Checkpoint.decode(bytes(64 + 28)) is None  # all zero: no checkpoint
    with pytest.raises(errors.FormatError):
        Checkpoint.decode(bytes(64 + 27) + b"\1")  # one byte set: a damaged checkpoint, not an absent one
    top = tuple((i, i) for i in range(MAX_STREAMS))
    assert len(Checkpoint.decode(slot(entries=top)).streams) == MAX_STREAMS == 250


def test_encode_is_the_table():
    assert Checkpoint(100, {7: 3, 2: 10}, True).encode() == slot()[64:]
    assert Checkpoint(100, {7: 3, 2: 10}).encode() == slot(flags=0)[64:]
    assert Checkpoint(5).encode() == slot(flags=0, log_end=5, entries=())[64:]
    with pytest.raises(ValueError) as info:
        Checkpoint(1, {i: i for i in range(251)}).encode()
    assert str(info.value) == "251 streams: at most 250 fit a checkpoint"


def test_json():
    assert Checkpoint(100, {7: 3, 2: 10}, True, 4096).to_json() == {
        "log_end_offset": 100, "complete": True, "uploaded_offset": 4096, "streams": 2,
        "stream_next_offsets": {"2": 10, "7": 3}}


def test_bounded_keeps_the_most_recent_then_the_largest_ids():
    streams = {i: i * 10 for i in range(MAX_STREAMS + 2)}
    assert bounded(dict(list(streams.items())[:MAX_STREAMS])) == (dict(list(streams.items())[:MAX_STREAMS]), True)
    kept, complete = bounded(streams)  # no recency: the largest ids
    assert not complete and sorted(kept) == list(range(2, MAX_STREAMS + 2)) and kept[5] == 50
    # recency first; streams without one count as -1, below any written; ties by id
    recency = {0: 7, 1: 7}
    kept, _ = bounded(streams, recency)
    assert 0 in kept and 1 in kept and 2 not in kept and 3 not in kept and MAX_STREAMS + 1 in kept
    recency = {0: 9, 1: -1}
    kept, _ = bounded(streams, recency)
    assert 0 in kept and 1 not in kept and 2 not in kept and 3 in kept


def test_bounded_ranks_a_stream_written_at_offset_0_above_the_unknown():
    streams = {i: i for i in range(MAX_STREAMS + 1)}
    kept, complete = bounded(streams, {0: 0})  # stream 0's last record at WAL offset 0; the others unknown
    assert not complete and 0 in kept and 1 not in kept and len(kept) == MAX_STREAMS
