"""RecordHeader and encode_record: golden bytes, round trips, junk and check order (FORMATS.md 1.2).

Expected bytes come from the FORMATS.md table via ``struct`` and the ``crc32c``
package, independent of walctl's encoder.
"""

from __future__ import annotations

import struct
import zlib

import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from walctl import errors
from walctl.format import record as rec
from walctl.format.record import RecordHeader, encode_record

DATA_MAGIC = 0x87654321
PADDING_MAGIC = 0x76543210
INT64_MAX = (1 << 63) - 1
U32_MAX = 0xFFFFFFFF

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def header_bytes(magic: int, body_length: int, body_offset: int, body_crc: int) -> bytes:
    """The 24 bytes at the FORMATS.md 1.2 offsets: magic@0, bodyLength@4, bodyOffset@8, bodyCrc@16, crc@20."""
    buf = bytearray(24)
    struct.pack_into(">I", buf, 0, magic)
    struct.pack_into(">I", buf, 4, body_length)
    struct.pack_into(">q", buf, 8, body_offset)
    struct.pack_into(">I", buf, 16, body_crc)
    struct.pack_into(">I", buf, 20, crc32c_pkg.crc32c(bytes(buf[:20])))
    return bytes(buf)


def recrc(buf: bytes | bytearray) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">I", out, 20, crc32c_pkg.crc32c(bytes(out[:20])))
    return bytes(out)


BODY = b"hello, wal"
BODY_OFFSET = 4096  # the record's logical offset
# Literal: data magic, bodyLength 10, bodyOffset 4096 + 24 = 0x1018, bodyCrc, headerCrc.
DATA_HEX = "87654321" "0000000a" "0000000000001018" "5674d4eb" "7e984867"
# Literal padding record at 8000 covering 192 bytes: bodyLength 168, bodyOffset 8024 = 0x1F58, bodyCrc 0.
PADDING_HEX = "76543210" "000000a8" "0000000000001f58" "00000000" "db312546"


# --- strategies ---------------------------------------------------------------------------------

@st.composite
def record_headers(draw) -> RecordHeader:
    """Headers inside every bound RecordHeader.decode enforces."""
    return RecordHeader(
        magic=draw(st.sampled_from([DATA_MAGIC, PADDING_MAGIC])),
        body_length=draw(st.integers(1, U32_MAX)),
        body_offset=draw(st.integers(24, INT64_MAX)),
        body_crc=draw(st.integers(0, U32_MAX)),
    )


# --- golden bytes -----------------------------------------------------------------------------

def test_layout_constants():
    assert rec.SIZE == 24
    assert rec.DATA_MAGIC == DATA_MAGIC
    assert rec.PADDING_MAGIC == PADDING_MAGIC


def test_crc32c_known_answer():
    assert crc32c_pkg.crc32c(b"123456789") == 0xE3069283


def test_golden_data_record_literal_hex():
    literal = bytes.fromhex(DATA_HEX)
    assert crc32c_pkg.crc32c(BODY) == 0x5674D4EB
    assert crc32c_pkg.crc32c(literal[:20]) == 0x7E984867
    assert literal == header_bytes(DATA_MAGIC, len(BODY), BODY_OFFSET + 24, crc32c_pkg.crc32c(BODY))
    assert encode_record(BODY_OFFSET, BODY) == literal + BODY
    assert encode_record(BODY_OFFSET, memoryview(BODY)) == literal + BODY
    got = RecordHeader.decode(literal, expected_offset=BODY_OFFSET)
    assert got == RecordHeader(DATA_MAGIC, 10, 4120, 0x5674D4EB)
    assert (got.offset, got.end, got.is_padding) == (4096, 4130, False)
    got.check_body(BODY)


def test_golden_padding_record_literal_hex():
    literal = bytes.fromhex(PADDING_HEX)
    assert crc32c_pkg.crc32c(literal[:20]) == 0xDB312546
    pad = RecordHeader.padding(8000, 192)
    assert pad == RecordHeader(PADDING_MAGIC, 168, 8024, 0)
    assert pad.encode() == literal == header_bytes(PADDING_MAGIC, 168, 8024, 0)
    got = RecordHeader.decode(literal, expected_offset=8000)
    assert got == pad
    assert (got.offset, got.end, got.is_padding) == (8000, 8192, True)
    got.check_body(b"")  # padding bodies are never read, whatever they hold
    got.check_body(b"\xff" * 168)


def test_for_body():
    h = RecordHeader.for_body(123, b"xyz")
    assert h == RecordHeader(DATA_MAGIC, 3, 147, crc32c_pkg.crc32c(b"xyz"))
    assert h.encode() == header_bytes(DATA_MAGIC, 3, 147, crc32c_pkg.crc32c(b"xyz"))


@pytest.mark.parametrize("total", [24, 23, 1, 0, -5])
def test_padding_refuses_to_cover_only_its_header(total):
    with pytest.raises(ValueError):
        RecordHeader.padding(0, total)


def test_padding_smallest():
    pad = RecordHeader.padding(4096 - 25, 25)
    assert pad.body_length == 1 and pad.end == 4096
    assert RecordHeader.decode(pad.encode(), expected_offset=4096 - 25) == pad


def test_automq_checksum_variant():
    h = RecordHeader.for_body(0, b"automq")
    raw = h.encode(checksum=rec.automq_record_checksum)
    expected = bytearray(header_bytes(DATA_MAGIC, 6, 24, crc32c_pkg.crc32c(b"automq")))
    struct.pack_into(">I", expected, 20, zlib.crc32(bytes(expected[:20])) & 0x7FFFFFFF)
    assert raw == bytes(expected)
    assert RecordHeader.decode(raw, checksum=rec.automq_record_checksum) == h
    with pytest.raises(errors.ChecksumError):
        RecordHeader.decode(raw)  # AutoMQ's crc is not crc32c
    with pytest.raises(errors.ChecksumError):
        RecordHeader.decode(h.encode(), checksum=rec.automq_record_checksum)


# --- round trips ------------------------------------------------------------------------------

@FAST
@given(record_headers())
@example(RecordHeader(DATA_MAGIC, 1, 24, 0))
@example(RecordHeader(PADDING_MAGIC, U32_MAX, INT64_MAX, U32_MAX))
def test_round_trip(h):
    raw = h.encode()
    assert raw == header_bytes(h.magic, h.body_length, h.body_offset, h.body_crc)
    assert RecordHeader.decode(raw) == h
    assert RecordHeader.decode(raw, expected_offset=h.offset) == h
    assert RecordHeader.decode(bytearray(raw)) == h
    assert RecordHeader.decode(memoryview(raw)) == h


@FAST
@given(record_headers(), st.integers(0, 5000), st.binary(max_size=40))
def test_round_trip_at_offset(h, pad, tail):
    buf = b"\x77" * pad + h.encode() + tail
    assert RecordHeader.decode(buf, pad, expected_offset=h.offset) == h
    assert RecordHeader.decode(memoryview(buf), pad) == h


@FAST
@given(st.integers(0, INT64_MAX - 24 - 5000), st.binary(min_size=1, max_size=3000), st.integers(0, 300))
def test_encode_record_round_trip(offset, body, pad):
    raw = encode_record(offset, body)
    assert len(raw) == 24 + len(body)
    assert raw[24:] == body
    buf = bytes(pad) + raw + b"\xee" * 7
    h = RecordHeader.decode(buf, pad, expected_offset=offset)
    assert (h.offset, h.end, h.body_length, h.is_padding) == (offset, offset + 24 + len(body), len(body), False)
    h.check_body(buf[pad + 24:pad + 24 + len(body)])
    h.check_body(memoryview(buf)[pad + 24:])  # a longer buffer: only body_length bytes count


@FAST
@given(st.integers(0, 1 << 50), st.integers(25, 1 << 30))
def test_padding_round_trip(offset, total):
    pad = RecordHeader.padding(offset, total)
    assert (pad.offset, pad.end, pad.body_crc) == (offset, offset + total, 0)
    assert RecordHeader.decode(pad.encode(), expected_offset=offset) == pad


# --- junk -----------------------------------------------------------------------------------

def assert_format_error_inside(exc, base: int, size: int = 24) -> None:
    assert isinstance(exc, errors.FormatError)
    assert isinstance(exc, errors.CorruptionError) and exc.exit_code == 3
    assert isinstance(exc.offset, int)
    assert base <= exc.offset < base + size, (exc, exc.offset, base)


def decode_or_format_error(buf, offset=0, **kw):
    try:
        return RecordHeader.decode(buf, offset, **kw)
    except errors.FormatError as exc:
        assert_format_error_inside(exc, offset)
        return exc


@FAST
@given(st.binary(max_size=64), st.integers(0, 40), st.none() | st.integers(-(1 << 64), 1 << 64))
def test_random_bytes_only_format_errors(buf, offset, expected_offset):
    decode_or_format_error(buf, offset, expected_offset=expected_offset)


@FAST
@given(st.sampled_from([DATA_MAGIC, PADDING_MAGIC]), st.binary(min_size=16, max_size=16),
       st.none() | st.integers(-100, 1 << 63))
def test_random_fields_with_valid_crc_only_format_errors(magic, fields, expected_offset):
    raw = recrc(struct.pack(">I", magic) + fields + bytes(4))
    got = decode_or_format_error(raw, expected_offset=expected_offset)
    if isinstance(got, RecordHeader):
        assert got.body_length > 0 and got.body_offset >= 24
        if expected_offset is not None:
            assert got.offset == expected_offset


SAMPLES = [
    RecordHeader.for_body(BODY_OFFSET, BODY),
    RecordHeader.padding(8000, 192),
    RecordHeader(DATA_MAGIC, U32_MAX, INT64_MAX, U32_MAX),
    RecordHeader(PADDING_MAGIC, 1, 24, 0),
]
SAMPLE_IDS = ["data", "padding", "extreme", "smallest"]


@pytest.mark.parametrize("h", SAMPLES, ids=SAMPLE_IDS)
def test_every_truncation_is_truncated_error(h):
    raw = h.encode()
    for n in range(24):
        with pytest.raises(errors.TruncatedError) as info:
            RecordHeader.decode(raw[:n])
        assert_format_error_inside(info.value, 0)
        assert (info.value.expected, info.value.found) == (24, n)
        with pytest.raises(errors.TruncatedError) as info:
            RecordHeader.decode(b"\x01" * 50 + raw[:n], 50, expected_offset=h.offset)
        assert_format_error_inside(info.value, 50)


def flip(buf: bytes, bit: int) -> bytes:
    out = bytearray(buf)
    out[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(out)


def assert_every_flip_detected(raw: bytes, base: int = 0, expected_offset=None) -> None:
    for bit in range(24 * 8):
        with pytest.raises(errors.FormatError) as info:
            RecordHeader.decode(flip(raw, base * 8 + bit), base, expected_offset=expected_offset)
        assert_format_error_inside(info.value, base)
        wanted = errors.BadMagicError if bit < 32 else errors.ChecksumError
        assert isinstance(info.value, wanted), (bit, info.value)


@pytest.mark.parametrize("h", SAMPLES, ids=SAMPLE_IDS)
def test_every_single_bit_flip_is_detected(h):
    raw = h.encode()
    assert_every_flip_detected(raw)
    assert_every_flip_detected(raw, expected_offset=h.offset)
    assert_every_flip_detected(b"\x00" * 4000 + raw + b"\x00" * 100, base=4000)


@SLOW
@given(record_headers())
def test_every_single_bit_flip_is_detected_hypothesis(h):
    assert_every_flip_detected(h.encode())


# --- order of checks ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [24, 100, 4096])
def test_all_zero_is_zeroed(n):
    # The zero padding after a block's last record reads as this.
    with pytest.raises(errors.ZeroedError) as info:
        RecordHeader.decode(bytes(n))
    assert info.value.offset == 0
    with pytest.raises(errors.ZeroedError) as info:
        RecordHeader.decode(b"\x09" * 4096 + bytes(n), 4096, expected_offset=0)
    assert info.value.offset == 4096


@pytest.mark.parametrize("n", [0, 1, 20, 23])
def test_short_all_zero_is_truncated_not_zeroed(n):
    with pytest.raises(errors.TruncatedError):
        RecordHeader.decode(bytes(n))


@pytest.mark.parametrize("magic", [0, 0x87654320, 0x12345678, 0x57414C43, 0xFFFFFFFF])
def test_wrong_magic_is_bad_magic(magic):
    raw = bytearray(bytes.fromhex(DATA_HEX))
    struct.pack_into(">I", raw, 0, magic)
    raw = recrc(raw)
    with pytest.raises(errors.BadMagicError) as info:
        RecordHeader.decode(raw, expected_offset=BODY_OFFSET)
    assert (info.value.offset, info.value.expected, info.value.found) == (0, DATA_MAGIC, magic)


def test_header_crc_mismatch_is_checksum_error():
    raw = bytearray(bytes.fromhex(DATA_HEX))
    raw[9] ^= 0x04
    with pytest.raises(errors.ChecksumError) as info:
        RecordHeader.decode(bytes(raw))
    assert info.value.offset == 20
    assert info.value.found == 0x7E984867
    assert info.value.expected == crc32c_pkg.crc32c(bytes(raw[:20]))


def test_crc_is_checked_before_bounds():
    raw = bytearray(bytes.fromhex(DATA_HEX))
    struct.pack_into(">I", raw, 4, 0)  # bodyLength 0 with a stale crc
    with pytest.raises(errors.ChecksumError):
        RecordHeader.decode(bytes(raw))


def test_zero_body_length_with_valid_crc_is_bounds_error():
    raw = header_bytes(DATA_MAGIC, 0, 4120, 0)
    with pytest.raises(errors.BoundsError) as info:
        RecordHeader.decode(raw)
    assert (info.value.offset, info.value.found) == (4, 0)
    with pytest.raises(errors.BoundsError) as info:
        RecordHeader.decode(bytes(10) + raw, 10)
    assert info.value.offset == 14


def test_empty_body_record_is_refused_on_read():
    with pytest.raises(errors.BoundsError):
        RecordHeader.decode(encode_record(0, b""))


@pytest.mark.parametrize("body_offset", [23, 0, -1, -(1 << 63)])
def test_body_offset_below_header_size_is_bounds_error(body_offset):
    raw = header_bytes(DATA_MAGIC, 5, body_offset, 0)
    with pytest.raises(errors.BoundsError) as info:
        RecordHeader.decode(raw)
    assert (info.value.offset, info.value.found) == (8, body_offset)


def test_stale_record_from_an_earlier_lap_is_bounds_error():
    ring = 1 << 20
    stale = encode_record(BODY_OFFSET, BODY)  # written on lap 0 at physical 8192 + 4096
    for lap in (1, 2, 1000):
        with pytest.raises(errors.BoundsError) as info:
            RecordHeader.decode(stale, expected_offset=BODY_OFFSET + lap * ring)
        assert info.value.offset == 8
        assert info.value.found == BODY_OFFSET + 24
    assert RecordHeader.decode(stale, expected_offset=BODY_OFFSET).offset == BODY_OFFSET


@FAST
@given(st.integers(0, 1 << 50), st.integers(-(1 << 50), 1 << 50).filter(lambda d: d != 0), st.integers(0, 100))
def test_expected_offset_mismatch_is_always_bounds_error(offset, delta, pad):
    raw = bytes(pad) + encode_record(offset, b"payload")
    with pytest.raises(errors.BoundsError) as info:
        RecordHeader.decode(raw, pad, expected_offset=offset + delta)
    assert info.value.offset == pad + 8


def test_check_body_flipped_byte_is_checksum_error():
    h = RecordHeader.decode(bytes.fromhex(DATA_HEX))
    for i in range(len(BODY)):
        for bit in range(8):
            damaged = bytearray(BODY)
            damaged[i] ^= 1 << bit
            with pytest.raises(errors.ChecksumError) as info:
                h.check_body(bytes(damaged), offset=BODY_OFFSET + 24)
            assert info.value.offset == BODY_OFFSET + 24
            assert info.value.found == 0x5674D4EB
            assert info.value.expected == crc32c_pkg.crc32c(bytes(damaged))


@FAST
@given(st.binary(min_size=1, max_size=2000), st.data())
def test_check_body_any_flip_is_checksum_error(body, data):
    h = RecordHeader.for_body(0, body)
    bit = data.draw(st.integers(0, len(body) * 8 - 1))
    damaged = bytearray(body)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(errors.ChecksumError):
        h.check_body(bytes(damaged))


def test_check_body_short_is_truncated():
    h = RecordHeader.for_body(0, BODY)
    for n in range(len(BODY)):
        with pytest.raises(errors.TruncatedError) as info:
            h.check_body(BODY[:n], offset=24)
        assert (info.value.offset, info.value.expected, info.value.found) == (24, len(BODY), n)


def test_negative_offset_is_bounds_error():
    # A negative slice start would silently wrap to the buffer's end.
    for offset in (-1, -24, -4096):
        with pytest.raises(errors.BoundsError) as info:
            RecordHeader.decode(bytes.fromhex(DATA_HEX), offset)
        assert info.value.offset == offset


@settings(max_examples=300, deadline=None)
@given(offset=st.integers(0, 2**62), body=st.binary(min_size=1, max_size=3000), pos=st.integers(0, 64))
def test_pack_data_header_into_writes_exactly_the_encoded_header(offset, body, pos):
    buf = bytearray(b"\xee" * (pos + rec.SIZE + 8))
    rec.pack_data_header_into(buf, pos, offset, body)
    assert bytes(buf[pos:pos + rec.SIZE]) == RecordHeader.for_body(offset, body).encode()
    assert buf[:pos] == b"\xee" * pos and buf[pos + rec.SIZE:] == b"\xee" * 8  # nothing else touched
    assert RecordHeader.decode(bytes(buf[pos:pos + rec.SIZE]), expected_offset=offset).body_crc == \
        crc32c_pkg.crc32c(body)


def test_bounds_errors_name_their_field():
    """A reader tells a stale record (bodyOffset) from other bounds failures by the error's field."""
    from walctl.errors import BoundsError

    raw = encode_record(4096, b"abc")
    with pytest.raises(BoundsError) as info:
        RecordHeader.decode(raw, expected_offset=0)
    assert info.value.field == "record bodyOffset"
    zero_length = RecordHeader(rec.DATA_MAGIC, 0, 4096 + rec.SIZE, 0).encode()
    with pytest.raises(BoundsError) as info:
        RecordHeader.decode(zero_length, expected_offset=4096)
    assert info.value.field == "record bodyLength"
