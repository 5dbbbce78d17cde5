"""StreamRecordBatch: golden bytes, round trips, junk and check order (FORMATS.md 2).

Expected bytes come from the FORMATS.md table via ``struct``, independent of
walctl's encoder.
"""

from __future__ import annotations

import struct

import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from walctl import errors
from walctl.format import batch as bat
from walctl.format.batch import StreamRecordBatch
from walctl.format.record import RecordHeader, encode_record

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
U32_MAX = 0xFFFFFFFF

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def batch_bytes(stream_id, epoch, base_offset, count, payload, magic=0x22, payload_length=None) -> bytes:
    """Header at the FORMATS.md 2 offsets (magic@0, streamId@1, epoch@9, baseOffset@17, count@25,
    payloadLength@29), then the payload."""
    buf = bytearray(33)
    struct.pack_into(">B", buf, 0, magic)
    struct.pack_into(">q", buf, 1, stream_id)
    struct.pack_into(">q", buf, 9, epoch)
    struct.pack_into(">q", buf, 17, base_offset)
    struct.pack_into(">I", buf, 25, count)
    struct.pack_into(">I", buf, 29, len(payload) if payload_length is None else payload_length)
    return bytes(buf) + payload


SAMPLE = StreamRecordBatch(stream_id=5, epoch=3, base_offset=100, count=4, payload=b"abcd")
# Literal: magic 0x22, streamId 5, epoch 3, baseOffset 100, count 4, payloadLength 4, "abcd".
SAMPLE_HEX = ("22" "0000000000000005" "0000000000000003" "0000000000000064" "00000004" "00000004"
              "61626364")


@st.composite
def batches(draw, max_payload=2000) -> StreamRecordBatch:
    """Batches inside every bound StreamRecordBatch.decode enforces."""
    base = draw(st.integers(0, INT64_MAX - 1))
    count = draw(st.integers(1, min(U32_MAX, INT64_MAX - base)))
    return StreamRecordBatch(
        stream_id=draw(st.integers(0, INT64_MAX)),
        epoch=draw(st.integers(INT64_MIN, INT64_MAX)),
        base_offset=base,
        count=count,
        payload=draw(st.binary(max_size=max_payload)),
    )


# --- golden bytes -----------------------------------------------------------------------------

def test_layout_constants():
    assert bat.HEADER_SIZE == 33
    assert bat.MAGIC == 0x22


def test_golden_literal_hex():
    literal = bytes.fromhex(SAMPLE_HEX)
    assert len(literal) == 37
    assert literal == batch_bytes(5, 3, 100, 4, b"abcd")
    assert SAMPLE.encode() == literal
    assert StreamRecordBatch.decode(literal, exact=True) == SAMPLE
    assert (SAMPLE.size, SAMPLE.end_offset) == (37, 104)


def test_golden_batch_inside_a_wal_record():
    assert crc32c_pkg.crc32c(b"123456789") == 0xE3069283
    body = bytes.fromhex(SAMPLE_HEX)
    body_crc = crc32c_pkg.crc32c(body)
    head = bytes.fromhex("87654321" "00000025" "0000000000000018") + struct.pack(">I", body_crc)
    expected = head + struct.pack(">I", crc32c_pkg.crc32c(head)) + body
    raw = encode_record(0, SAMPLE.encode())
    assert raw == expected
    h = RecordHeader.decode(raw, expected_offset=0)
    h.check_body(raw[24:h.end])
    assert StreamRecordBatch.decode(raw[24:h.end], exact=True) == SAMPLE
    assert StreamRecordBatch.decode(raw, 24, exact=True) == SAMPLE


def test_golden_extremes():
    b = StreamRecordBatch(INT64_MAX, INT64_MIN, INT64_MAX - U32_MAX, U32_MAX, b"")
    raw = b.encode()
    assert raw == bytes.fromhex("22" "7fffffffffffffff" "8000000000000000" "7fffffff00000000"
                                "ffffffff" "00000000")
    assert StreamRecordBatch.decode(raw, exact=True) == b


def test_epoch_minus_one_round_trips():
    b = StreamRecordBatch(1, -1, 0, 1, b"x")
    assert b.encode()[9:17] == b"\xff" * 8
    assert StreamRecordBatch.decode(b.encode()) == b


# --- round trips ------------------------------------------------------------------------------

@FAST
@given(batches())
@example(StreamRecordBatch(0, 0, 0, 1, b""))
@example(StreamRecordBatch(INT64_MAX, INT64_MAX, INT64_MAX - 1, 1, b"\0" * 33))
def test_round_trip(b):
    raw = b.encode()
    assert raw == batch_bytes(b.stream_id, b.epoch, b.base_offset, b.count, b.payload)
    assert len(raw) == b.size == 33 + len(b.payload)
    assert StreamRecordBatch.decode(raw) == b
    assert StreamRecordBatch.decode(raw, exact=True) == b
    assert StreamRecordBatch.decode(bytearray(raw), exact=True) == b
    assert StreamRecordBatch.decode(memoryview(raw), exact=True) == b


@FAST
@given(batches(max_payload=300), st.integers(0, 5000), st.binary(max_size=50))
def test_round_trip_at_offset(b, pad, tail):
    buf = b"\x22" * pad + b.encode() + tail
    assert StreamRecordBatch.decode(buf, pad) == b
    assert StreamRecordBatch.decode(memoryview(buf), pad) == b
    if not tail:
        assert StreamRecordBatch.decode(buf, pad, exact=True) == b


@FAST
@given(st.lists(batches(max_payload=100), min_size=1, max_size=8))
def test_back_to_back(bs):
    # Batches are packed back to back in data blocks: each decode must stop at its own end.
    buf = b"".join(b.encode() for b in bs)
    pos, out = 0, []
    while pos < len(buf):
        b = StreamRecordBatch.decode(buf, pos)
        out.append(b)
        pos += b.size
    assert out == bs and pos == len(buf)


@FAST
@given(batches(max_payload=50))
def test_decoded_payload_is_bytes_not_a_view(b):
    buf = bytearray(b.encode())
    got = StreamRecordBatch.decode(buf)
    buf[:] = bytes(len(buf))  # mutating the source buffer must not change the decoded batch
    assert type(got.payload) is bytes and got == b


# --- junk -----------------------------------------------------------------------------------

def declared_extent(buf, base: int) -> int:
    """How far the batch at ``base`` claims to reach (its header, plus payloadLength when readable)."""
    if len(buf) - base >= 33 and base >= 0:
        return 33 + struct.unpack_from(">I", buf, base + 29)[0]
    return 33


def decode_or_format_error(buf, offset=0, exact=False):
    try:
        return StreamRecordBatch.decode(buf, offset, exact=exact)
    except errors.FormatError as exc:
        assert isinstance(exc, errors.CorruptionError) and exc.exit_code == 3
        assert isinstance(exc.offset, int)
        extent = declared_extent(buf, offset)
        if isinstance(exc, errors.BoundsError) and exact and exc.offset == offset + extent:
            return exc  # the trailing-bytes error points at the first byte after the batch
        assert offset <= exc.offset < offset + extent, (exc, exc.offset, offset, extent)
        return exc


@FAST
@given(st.binary(max_size=120), st.integers(0, 60), st.booleans())
def test_random_bytes_only_format_errors(buf, offset, exact):
    decode_or_format_error(buf, offset, exact)


@FAST
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=40), st.booleans())
def test_random_fields_behind_the_magic_only_format_errors(fields, rest, exact):
    buf = b"\x22" + fields + rest
    got = decode_or_format_error(buf, 0, exact)
    if isinstance(got, StreamRecordBatch):
        assert got.stream_id >= 0 and got.base_offset >= 0 and got.count >= 1
        assert got.end_offset <= INT64_MAX


@FAST
@given(st.integers(0, 0xFFFF), st.integers(0, 100), st.booleans())
def test_random_payload_length_only_format_errors(length, have, exact):
    decode_or_format_error(batch_bytes(1, 1, 1, 1, bytes(have), payload_length=length), 0, exact)


SAMPLES = [SAMPLE, StreamRecordBatch(0, 0, 0, 1, b""), StreamRecordBatch(9, -1, 10, 2, bytes(range(200)))]


@pytest.mark.parametrize("b", SAMPLES, ids=["sample", "empty", "long"])
def test_every_truncation_is_truncated_error(b):
    raw = b.encode()
    for n in range(len(raw)):
        with pytest.raises(errors.TruncatedError) as info:
            StreamRecordBatch.decode(raw[:n])
        # Short header: the error points at the batch; short payload: at the payload.
        assert info.value.offset == (0 if n < 33 else 33)
        with pytest.raises(errors.TruncatedError) as info:
            StreamRecordBatch.decode(b"\x22" * 10 + raw[:n], 10, exact=True)
        assert info.value.offset == (10 if n < 33 else 43)


@pytest.mark.parametrize("b", SAMPLES, ids=["sample", "empty", "long"])
def test_every_single_bit_flip_only_format_errors(b):
    # No checksum of its own (the WAL record's body crc covers it): a flip either decodes to
    # some other batch or is refused with one of our errors, never a Python error.
    raw = b.encode()
    for bit in range(len(raw) * 8):
        damaged = bytearray(raw)
        damaged[bit // 8] ^= 0x80 >> (bit % 8)
        got = decode_or_format_error(bytes(damaged), 0, exact=True)
        if bit < 8:
            assert isinstance(got, errors.BadMagicError)


# --- order of checks ------------------------------------------------------------------------

@pytest.mark.parametrize("magic", [0x00, 0x21, 0x23, 0x5A, 0xFF])
def test_wrong_magic_is_bad_magic(magic):
    raw = batch_bytes(5, 3, 100, 4, b"abcd", magic=magic)
    with pytest.raises(errors.BadMagicError) as info:
        StreamRecordBatch.decode(raw)
    assert (info.value.offset, info.value.expected, info.value.found) == (0, 0x22, magic)
    with pytest.raises(errors.BadMagicError) as info:
        StreamRecordBatch.decode(b"\x22" * 7 + raw, 7)
    assert info.value.offset == 7


def test_short_all_zero_is_truncated():
    for n in range(33):
        with pytest.raises(errors.TruncatedError):
            StreamRecordBatch.decode(bytes(n))


@pytest.mark.parametrize("n", [33, 100])
def test_all_zero_is_zeroed(n):
    with pytest.raises(errors.ZeroedError):
        StreamRecordBatch.decode(bytes(n))


@pytest.mark.parametrize("field_offset, code, value", [
    (1, ">q", -1),              # streamId negative
    (1, ">q", INT64_MIN),
    (17, ">q", -1),             # baseOffset negative
    (25, ">I", 0),              # empty batch
])
def test_field_out_of_bounds_is_bounds_error(field_offset, code, value):
    raw = bytearray(bytes.fromhex(SAMPLE_HEX))
    struct.pack_into(code, raw, field_offset, value)
    with pytest.raises(errors.BoundsError) as info:
        StreamRecordBatch.decode(bytes(raw))
    assert info.value.offset == field_offset
    assert info.value.found == value
    with pytest.raises(errors.BoundsError) as info:
        StreamRecordBatch.decode(bytes(50) + bytes(raw), 50)
    assert info.value.offset == 50 + field_offset


def test_end_offset_overflow_is_bounds_error():
    raw = batch_bytes(1, 1, INT64_MAX - 3, 4, b"")
    with pytest.raises(errors.BoundsError) as info:
        StreamRecordBatch.decode(raw)
    assert info.value.offset == 25 and info.value.found == 1 << 63
    assert StreamRecordBatch.decode(batch_bytes(1, 1, INT64_MAX - 4, 4, b"")).end_offset == INT64_MAX


def test_bounds_come_before_payload_truncation():
    # A zero count is reported even when the payload is also missing: the header is checked first.
    with pytest.raises(errors.BoundsError):
        StreamRecordBatch.decode(batch_bytes(1, 1, 1, 0, b"", payload_length=1000))


@pytest.mark.parametrize("extra", [1, 2, 33, 4096])
def test_exact_with_trailing_bytes_is_bounds_error(extra):
    raw = bytes.fromhex(SAMPLE_HEX) + b"\0" * extra
    assert StreamRecordBatch.decode(raw) == SAMPLE  # without exact, trailing bytes are the next batch's
    with pytest.raises(errors.BoundsError) as info:
        StreamRecordBatch.decode(raw, exact=True)
    assert info.value.offset == 37 and info.value.found == extra
    with pytest.raises(errors.BoundsError) as info:
        StreamRecordBatch.decode(b"\x01" * 9 + raw, 9, exact=True)
    assert info.value.offset == 46 and info.value.found == extra


def test_payload_truncated_reports_expected_and_found():
    raw = batch_bytes(5, 3, 100, 4, b"ab", payload_length=4)
    with pytest.raises(errors.TruncatedError) as info:
        StreamRecordBatch.decode(raw)
    assert (info.value.offset, info.value.expected, info.value.found) == (33, 4, 2)


def test_negative_offset_is_bounds_error():
    # A negative slice start would silently wrap to the buffer's end.
    for offset in (-1, -24, -4096):
        with pytest.raises(errors.BoundsError) as info:
            StreamRecordBatch.decode(bytes.fromhex(SAMPLE_HEX), offset)
        assert info.value.offset == offset
