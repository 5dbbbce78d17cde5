"""The step decoder (walctl.wal.decoder): a Record or a Skip with its kind, cause and CRCs, from the
error's fields, never its message; the bulk decoder decodes exactly the run of intact records."""

from __future__ import annotations

import pytest

from walctl.device import MemoryDevice
from walctl.format import record as rec
from walctl.format.crc import crc32c
from walctl.format.header import HEADERS_SIZE
from walctl.wal.decoder import Decoder, Record, Skip, SkipKind
from walctl.wal.findings import Cause
from walctl.wal.layout import Ring
from walctl.wal.ringread import LogReader

CAPACITY = 64 * 1024
RING = CAPACITY - HEADERS_SIZE
BODY = b"body bytes " * 10


def _device(*records: tuple[int, bytes]) -> MemoryDevice:
    dev = MemoryDevice(CAPACITY)
    for offset, raw in records:
        dev.data[HEADERS_SIZE + offset:HEADERS_SIZE + offset + len(raw)] = raw
    return dev


def _step(raw: bytes, at: int = 0):
    dev = _device((at, raw))
    return Decoder(LogReader(dev, Ring(CAPACITY))).step(at)


def _flip(data: bytes, position: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 0x01
    return bytes(out)


GOOD = rec.encode_record(0, BODY)
# (name, bytes at offset 0, expected kind, cause, has CRCs)
SKIPS = [
    ("never written", bytes(64), SkipKind.HEADER, Cause.ZERO_FILL, False),
    ("header crc", _flip(GOOD, 21), SkipKind.HEADER, Cause.CHECKSUM_MISMATCH, True),
    ("magic one bit off", _flip(GOOD, 0), SkipKind.HEADER, Cause.CHECKSUM_MISMATCH, False),
    ("foreign bytes", b"\x12\x34\x56\x78" * 16, SkipKind.HEADER, Cause.GARBAGE, False),
    ("stale lap", rec.encode_record(RING, BODY), SkipKind.HEADER, Cause.STALE_LAP, False),
    ("body crc", _flip(GOOD, rec.SIZE + 3), SkipKind.BODY, Cause.CHECKSUM_MISMATCH, True),
]


@pytest.mark.parametrize("name,raw,kind,cause,crcs", SKIPS, ids=[s[0] for s in SKIPS])
def test_skips_carry_kind_cause_and_crcs(name, raw, kind, cause, crcs):
    found = _step(raw)
    assert isinstance(found, Skip)
    assert (found.kind, found.cause, found.offset) == (kind, cause, 0)
    assert (found.expected_crc is not None and found.found_crc is not None) == crcs
    if crcs:
        assert found.expected_crc != found.found_crc
    if kind is SkipKind.BODY:
        assert found.end == len(GOOD)


def test_intact_record_and_padding():
    assert _step(GOOD) == Record(0, len(GOOD), BODY)
    pad = rec.RecordHeader.padding(4096, 8192).encode()
    assert _step(pad, 4096) == Record(4096, 4096 + 8192, b"", padding=True)


def test_a_record_crossing_the_lap_end_is_a_skip():
    at = RING - 4096
    raw = rec.encode_record(at, bytes(5000))
    found = _step(raw[:4096], at)
    assert isinstance(found, Skip) and found.cause is Cause.GARBAGE and "crosses the end of the lap" in found.reason


def test_the_bulk_decoder_stops_at_the_first_record_that_is_not_intact():
    """The step decoder's bulk twin (walctl.format.bulk.decode_records, the scan's fast path):
    exactly the run of records the step decoder calls intact."""
    from walctl.format import bulk

    buf = bytearray()
    offsets = []
    for i in range(5):
        offsets.append(len(buf))
        buf += rec.encode_record(len(buf), bytes([i]) * (100 + i))
    buf += bytes(4096 - len(buf) % 4096)

    def run(data, base=0, limit=-1):
        found = bulk.decode_records(data, base, lap_end=RING, max_records=limit)
        return [(row[0], bytes(data[row[1]:row[1] + row[2]])) for row in found.tuples()]

    def steps(data):
        decoder = Decoder(LogReader(_device((0, bytes(data))), Ring(CAPACITY)))
        return [decoder.step(o) for o in offsets]

    whole = run(buf)
    assert [(o, len(b)) for o, b in whole] == [(o, 100 + i) for i, o in enumerate(offsets)]
    assert whole == [(r.offset, r.body) for r in steps(buf)]
    assert run(buf, limit=2) == whole[:2]
    damaged = bytearray(buf)
    damaged[offsets[3] + rec.SIZE] ^= 0xFF  # the fourth body
    assert run(damaged) == whole[:3] and isinstance(steps(damaged)[3], Skip)
    # a base offset that is not the records' own: nothing is theirs
    assert run(buf, base=4096) == []
    assert crc32c(whole[0][1]) == rec.RecordHeader.decode(buf).body_crc