"""The step decoder's words and boundaries (issue 32): what each refused header or body becomes
(cause, reason, CRCs, end), a magic one or two bits off, AutoMQ's rules, a record at the lap's end."""

from __future__ import annotations

import pytest

from walctl.device import MemoryDevice
from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError, ZeroedError
from walctl.format import record as rec
from walctl.format.crc import automq_crc
from walctl.format.header import HEADERS_SIZE
from walctl.wal import decoder as dm
from walctl.wal.decoder import Decoder, Record, Skip, SkipKind
from walctl.wal.findings import Cause
from walctl.wal.layout import Ring
from walctl.wal.ringread import LogReader

CAPACITY = 64 * 1024
RING = CAPACITY - HEADERS_SIZE


def _decoder(at: int, raw: bytes, **kw) -> Decoder:
    dev = MemoryDevice(CAPACITY)
    pos = HEADERS_SIZE + at % RING
    dev.data[pos:pos + len(raw)] = raw
    return Decoder(LogReader(dev, Ring(CAPACITY)), **kw)


def _step(at: int, raw: bytes, **kw):
    return _decoder(at, raw, **kw).step(at)


@pytest.mark.parametrize("exc, cause, reason", [
    (ZeroedError("z"), Cause.ZERO_FILL, "zero fill"),
    (ChecksumError("c", expected=1, found=2), Cause.CHECKSUM_MISMATCH, "header crc mismatch"),
    (TruncatedError("t"), Cause.TRUNCATED, "truncated"),
    (BoundsError("b", field="record bodyOffset"), Cause.STALE_LAP, "stale record of an earlier lap or another offset"),
    (BoundsError("record bodyLength 0", field="record bodyLength"), Cause.GARBAGE, "record bodyLength 0"),
    (BoundsError("no field"), Cause.GARBAGE, "no field"),
    (FormatError("plain", field="record bodyOffset"), Cause.GARBAGE, "plain"),
    (BadMagicError("m", found="x"), Cause.GARBAGE, "bad magic"),
    (BadMagicError("m", found=None), Cause.GARBAGE, "bad magic"),
    (BadMagicError("known here", found=rec.PADDING_MAGIC), Cause.GARBAGE, "known here"),
    (BadMagicError("m", found=rec.DATA_MAGIC ^ 0x10), Cause.CHECKSUM_MISMATCH,
     "header crc mismatch (bad magic 0x87654331, 1 bit from the data record magic: a damaged header)"),
    (BadMagicError("m", found=rec.PADDING_MAGIC ^ 0x80000001), Cause.CHECKSUM_MISMATCH,
     "header crc mismatch (bad magic 0xF6543211, 2 bits from the padding record magic: a damaged header)"),
    (BadMagicError("m", found=rec.DATA_MAGIC ^ 0x7), Cause.GARBAGE, "bad magic 0x87654326"),
    (BadMagicError("m", found=0x0000000F), Cause.GARBAGE, "bad magic 0x0000000F"),
])
def test_classify_from_the_error_s_type_and_fields(exc, cause, reason):
    assert dm.classify(exc) == (cause, reason)


def test_a_header_skip_carries_crcs_only_for_a_checksum():
    s = dm.header_skip(8, ChecksumError("c", expected=1, found=2))
    assert s == Skip(SkipKind.HEADER, 8, Cause.CHECKSUM_MISMATCH, "header crc mismatch", 1, 2)
    assert s.end is None
    s = dm.header_skip(8, BadMagicError("m", expected=1, found=rec.DATA_MAGIC ^ 1))
    assert (s.expected_crc, s.found_crc, s.cause) == (None, None, Cause.CHECKSUM_MISMATCH)


def test_a_body_skip_says_body_and_where_the_record_would_end():
    s = dm.body_skip(8, 300, ChecksumError("c", expected=3, found=4))
    assert s == Skip(SkipKind.BODY, 8, Cause.CHECKSUM_MISMATCH, "body crc mismatch", 3, 4, end=300)
    s = dm.body_skip(8, 300, TruncatedError("t", expected=5, found=1))
    assert s == Skip(SkipKind.BODY, 8, Cause.TRUNCATED, "truncated", None, None, end=300)


def test_a_step_s_body_skip_names_the_crcs():
    good = rec.encode_record(4096, b"abc" * 50)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    s = _step(4096, bytes(bad))
    head = rec.RecordHeader.decode(good)
    assert (s.kind, s.offset, s.end, s.reason) == (SkipKind.BODY, 4096, 4096 + len(good), "body crc mismatch")
    assert s.found_crc == head.body_crc and s.expected_crc == rec.crc32c(bytes(bad[rec.SIZE:]))


def test_a_header_skip_from_a_step_names_the_crcs():
    good = bytearray(rec.encode_record(0, b"x" * 10))
    good[4] ^= 1  # the body length: the header crc fails
    s = _step(0, bytes(good))
    assert (s.kind, s.cause, s.reason) == (SkipKind.HEADER, Cause.CHECKSUM_MISMATCH, "header crc mismatch")
    assert s.found_crc == int.from_bytes(good[20:24], "big") and s.expected_crc == rec.crc32c(bytes(good[:20]))


def test_a_record_may_end_at_the_lap_end_but_not_past_it():
    at = RING - 4096
    body = bytes(range(256)) * 15 + bytes(4096 - rec.SIZE - 3840)
    raw = rec.encode_record(at, body)
    assert len(raw) == 4096
    found = _step(at, raw)
    assert found == Record(at, RING, body) and type(found.body) is bytes
    raw = rec.encode_record(at, body + b"!")
    found = _step(at, raw[:4096])
    assert isinstance(found, Skip) and (found.kind, found.cause) == (SkipKind.HEADER, Cause.GARBAGE)
    assert found.reason == f"record end {RING + 1} crosses the end of the lap at {RING}"
    # the next lap's records are checked against that lap's end
    raw = rec.encode_record(RING + 100, b"y" * 50)
    assert _step(RING + 100, raw) == Record(RING + 100, RING + 100 + len(raw), b"y" * 50)


def _automq_record(offset: int, body: bytes, magic: int = rec.DATA_MAGIC, length: int | None = None) -> bytes:
    head = rec.RecordHeader(magic, len(body) if length is None else length, offset + rec.SIZE,
                            automq_crc(body) if magic == rec.DATA_MAGIC else 0)
    return head.encode(checksum=automq_crc) + body


def test_automq_records_use_its_crc_and_its_rules():
    raw = _automq_record(0, b"automq body")
    assert _step(0, raw, automq=True) == Record(0, len(raw), b"automq body")
    assert _step(0, raw, automq=True, v1=True) == Record(0, len(raw), b"automq body")
    walctl_raw = rec.encode_record(0, b"automq body")
    s = _step(0, walctl_raw, automq=True)
    assert isinstance(s, Skip) and s.cause is Cause.CHECKSUM_MISMATCH and s.kind is SkipKind.HEADER
    assert isinstance(_step(0, raw), Skip)  # walctl's rules: its crc32c
    d = _decoder(0, raw, automq=True)
    assert d.checksum is automq_crc and d.automq is True and d.v1 is False and d.ring == Ring(CAPACITY)


def test_automq_v0_has_no_padding_record_and_v1_does():
    pad = rec.RecordHeader(rec.PADDING_MAGIC, 4096 - rec.SIZE, 4096 + rec.SIZE, 0).encode(checksum=automq_crc)
    s = _step(4096, pad, automq=True)
    assert isinstance(s, Skip) and (s.kind, s.cause) == (SkipKind.HEADER, Cause.GARBAGE)
    assert s.reason == "padding record magic 0x76543210 in an AutoMQ V0 log (V0 has none)"
    with pytest.raises(BadMagicError) as info:
        _decoder(4096, pad, automq=True).header(4096)
    assert (info.value.offset, info.value.expected, info.value.found) == (4096, rec.DATA_MAGIC, rec.PADDING_MAGIC)
    assert _step(4096, pad, automq=True, v1=True) == Record(4096, 8192, b"", padding=True)
    assert _step(4096, rec.RecordHeader.padding(4096, 4096).encode()) == Record(4096, 8192, b"", padding=True)


def test_automq_reads_body_length_as_a_java_int():
    ring = Ring(1 << 40)  # a lap long enough that only the Java int bound refuses the lengths below
    dev = MemoryDevice(CAPACITY)
    for length, words in ((dm.AUTOMQ_INT_MAX + 1, "negative as AutoMQ reads it"), (dm.AUTOMQ_INT_MAX, None)):
        raw = _automq_record(0, b"", length=length)
        dev.data[HEADERS_SIZE:HEADERS_SIZE + rec.SIZE] = raw

        class Reader(LogReader):
            def read(self, offset, n):
                return bytes(dev.data[HEADERS_SIZE + offset:HEADERS_SIZE + offset + n]) if n <= rec.SIZE else b""

        decoder = Decoder(Reader(dev, ring), automq=True)
        if words:
            with pytest.raises(BoundsError) as info:
                decoder.header(0)
            assert str(info.value) == f"record bodyLength {length} is {words}"
            assert (info.value.offset, info.value.found, info.value.field) == (4, length, "record bodyLength")
        else:
            assert decoder.header(0).body_length == length
        assert decoder.step(0).reason == (f"record bodyLength {length} is {words}" if words else "truncated")
    assert dm.AUTOMQ_INT_MAX == 2 ** 31 - 1


def test_the_lap_end_refusal_s_fields():
    at = RING - 100
    raw = rec.encode_record(at, bytes(200))
    with pytest.raises(BoundsError) as info:
        _decoder(at, raw[:100]).header(at)
    assert (info.value.offset, info.value.found, info.value.field) == (at + 4, at + len(raw), "record end")
