"""SealDescriptor's refusals, each with its message, value and position, and the limits each field
accepts (issue 32, mutation survivors of format/seal.py); the descriptor's bytes are made here from
FORMATS.md 1.5's table, independent of walctl's encoder."""

from __future__ import annotations

import struct

import pytest

from walctl import errors
from walctl.format.crc import crc32c
from walctl.format.seal import MAX_STREAMS, SealDescriptor, size_for


def descriptor(start=0, end=4096, sealed=1, crashed=2, streams=((1, 0, 5),), flags=0, version=1, count=None,
               magic=0x5345414C) -> bytes:
    """magic@0, version@4, n@6, holeStart@8, holeEnd@16, sealedAt@24, crashedHeader@32, flags@40, n x 24, crc."""
    n = len(streams) if count is None else count
    body = struct.pack(">IHHqqqqI", magic, version, n, start, end, sealed, crashed, flags)
    body += b"".join(struct.pack(">qqq", *s) for s in streams)
    return body + struct.pack(">I", crc32c(body))


@pytest.mark.parametrize("raw, error, found, position, message", [
    (descriptor(version=2), errors.BoundsError, 2, 4, "seal descriptor version = 2 out of bounds (1)"),
    (descriptor(version=0), errors.BoundsError, 0, 4, "seal descriptor version = 0 out of bounds (1)"),
    (descriptor(count=161, streams=()), errors.BoundsError, 161, 6,
     "seal descriptor stream count = 161 out of bounds (<= 160)"),
    (descriptor(start=5, end=5), errors.BoundsError, (5, 5), 8,
     "seal descriptor hole = (5, 5) out of bounds (0 <= start < end)"),
    (descriptor(start=-1), errors.BoundsError, (-1, 4096), 8,
     "seal descriptor hole = (-1, 4096) out of bounds (0 <= start < end)"),
    (descriptor(streams=((1, 0, 5), (-1, 0, 1))), errors.BoundsError, (-1, 0, 1), 44 + 24,
     "seal descriptor stream entry = (-1, 0, 1) out of bounds (streamId >= 0, 0 <= from < to)"),
    (descriptor(streams=((1, 1, 1),)), errors.BoundsError, (1, 1, 1), 44,
     "seal descriptor stream entry = (1, 1, 1) out of bounds (streamId >= 0, 0 <= from < to)"),
    (descriptor(streams=((1, -1, 1),)), errors.BoundsError, (1, -1, 1), 44,
     "seal descriptor stream entry = (1, -1, 1) out of bounds (streamId >= 0, 0 <= from < to)"),
    (descriptor(magic=1), errors.BadMagicError, 1, 0, "seal descriptor: bad magic 0x00000001, expected 0x5345414C"),
    (bytes(44), errors.ZeroedError, None, 0, "seal descriptor is all zeros (never written or torn)"),
    (bytes(4) + descriptor()[4:], errors.ZeroedError, None, 0, "seal descriptor is all zeros (never written or torn)"),
    # only the magic's 4 bytes decide: a zero magic before a non-zero byte 4 is still zeros
    (bytes(4) + descriptor(version=0x0100)[4:], errors.ZeroedError, None, 0,
     "seal descriptor is all zeros (never written or torn)"),
    (descriptor()[:43], errors.TruncatedError, 43, 0, "seal descriptor truncated: need 44 bytes, found 43"),
    (descriptor()[:-1], errors.TruncatedError, 71, 0, "seal descriptor truncated: need 72 bytes, found 71"),
], ids=["version-2", "version-0", "count", "empty-hole", "negative-start", "negative-stream", "empty-range",
        "negative-from", "magic", "zeroed", "zeroed-magic", "zeroed-magic-byte-4", "truncated-fixed", "truncated-streams"])
def test_refusals(raw, error, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        SealDescriptor.decode(b"zz" + raw, 2)
    exc = info.value
    assert type(exc) is error
    assert (exc.what, exc.found, exc.offset) == (message, found, 2 + position)


def test_crc_mismatch_names_the_crc_position():
    raw = bytearray(descriptor(streams=((1, 0, 5), (2, 3, 4))))
    raw[-1] ^= 1
    with pytest.raises(errors.ChecksumError) as info:
        SealDescriptor.decode(b"zz" + bytes(raw), 2)
    stored = int.from_bytes(raw[-4:], "big")
    computed = crc32c(bytes(raw[:-4]))
    assert info.value.offset == 2 + 44 + 48
    assert info.value.what == f"seal descriptor: crc mismatch, stored 0x{stored:08X}, computed 0x{computed:08X}"
    # the crc covers the whole body: a flipped stream byte is a crc mismatch too
    raw = bytearray(descriptor(streams=((1, 0, 5), (2, 3, 4))))
    raw[44 + 24 + 7] ^= 1
    with pytest.raises(errors.ChecksumError):
        SealDescriptor.decode(bytes(raw))


def test_limits_accepted():
    d = SealDescriptor.decode(descriptor(start=0, end=1, streams=((0, 0, 1),)))
    assert (d.hole_start, d.hole_end, d.streams, d.streams_truncated) == (0, 1, ((0, 0, 1),), False)
    many = tuple((s, 0, 1) for s in range(MAX_STREAMS))
    d = SealDescriptor.decode(descriptor(streams=many, flags=1))
    assert d.streams == many and d.streams_truncated
    d = SealDescriptor.decode(descriptor(streams=(), sealed=-5, crashed=7, flags=2))  # unknown flag bits: ignored
    assert (d.streams, d.sealed_at_ns, d.crashed_header_ns, d.streams_truncated) == ((), -5, 7, False)


def test_encode_is_the_table_and_caps_the_streams():
    assert SealDescriptor(0, 4096, 1, 2, ((1, 0, 5),)).encode() == descriptor()
    assert SealDescriptor(0, 4096, 1, 2, ((1, 0, 5),), streams_truncated=True).encode() == descriptor(flags=1)
    assert SealDescriptor(0, 4096, 1, 2).encode() == descriptor(streams=())
    many = tuple((s, 0, 1) for s in range(MAX_STREAMS + 1))
    assert SealDescriptor(0, 4096, 1, 2, many).encode() == descriptor(streams=many[:MAX_STREAMS], flags=1)
    assert SealDescriptor(0, 4096, 1, 2, many[:MAX_STREAMS]).encode() == descriptor(streams=many[:MAX_STREAMS])
    assert (size_for(0), size_for(1), size_for(MAX_STREAMS)) == (48, 72, 48 + 24 * 160)
