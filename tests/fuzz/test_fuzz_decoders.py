"""Fuzz every decoder with hypothesis: random bytes and mutated valid encodings.

The only outcomes allowed are a decoded value or one of walctl's FormatError subclasses
(which carry a byte position): never an IndexError, struct.error, OverflowError or a hang.
The recovery scan itself is fuzzed on mutated images in memory: it never raises, and never
returns a record that was not written there, byte for byte.

Examples per test: WALCTL_FUZZ_EXAMPLES (default 500); WALCTL_SOAK=1 makes it 20000.
"""

from __future__ import annotations

import os
import struct
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl.device import MemoryDevice
from walctl.errors import FormatError, NotFoundError
from walctl.format import object as obj
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import automq_crc, crc32c
from walctl.format.header import WalHeader
from walctl.wal import reader
from walctl.wal.headers import decode_slots

SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")
EXAMPLES = int(os.environ.get("WALCTL_FUZZ_EXAMPLES", "20000" if SOAK else "500"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])


OPS = st.sampled_from(["flip", "byte", "zero", "random", "cut", "grow", "copy"])
_POSITIONS: dict = {}


def _positions(length: int, hot: tuple[int, ...]):
    """Where an edit of ``length`` bytes lands: anywhere, or within 24 bytes of a ``hot`` spot.

    Built once per (length, hot) and reused: a strategy built anew for each edit (a flatmap and a
    one_of per edit, ~10 edits an example) was validated and labelled anew each time, about half of
    an example's drawing. The draws, and so the edits, are the same."""
    key = (length, hot)
    positions = _POSITIONS.get(key)
    if positions is None:
        spots = [st.integers(0, length - 1)]
        if hot:
            spots.append(st.sampled_from(hot).flatmap(
                lambda h: st.integers(max(0, min(h, length - 1)), max(0, min(h + 23, length - 1)))))
        if len(_POSITIONS) >= 4096:
            _POSITIONS.clear()
        positions = _POSITIONS[key] = st.one_of(*spots)
    return positions


@st.composite
def mutated(draw, base: bytes, max_ops: int = 6, hot: tuple[int, ...] = ()) -> bytes:
    """``base`` with 1..max_ops edits: bit flips, bytes set, zero or random runs, cuts, growth,
    copies; positions biased to ``hot`` spots (headers, magic numbers)."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, max_ops))):
        if not data:
            data += draw(st.binary(min_size=1, max_size=64))
            continue
        pos = draw(_positions(len(data), tuple(hot)))
        op = draw(OPS)
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif op == "zero":
            n = draw(st.integers(1, 4096))
            data[pos:pos + n] = bytes(len(data[pos:pos + n]))
        elif op == "random":
            chunk = draw(st.binary(min_size=1, max_size=64))
            data[pos:pos + len(chunk)] = chunk
        elif op == "cut":
            del data[pos:]
        elif op == "grow":
            data += draw(st.binary(max_size=64))
        else:
            src = draw(st.integers(0, len(data) - 1))
            n = draw(st.integers(1, 512))
            chunk = bytes(data[src:src + n])
            data[pos:pos + len(chunk)] = chunk
    return bytes(data)


def only_format_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except FormatError as exc:
        assert exc.offset is None or isinstance(exc.offset, int)
        return None


# -- WAL header slots ------------------------------------------------------------------------

NATIVE_HEADER = WalHeader(capacity=1 << 20, trim_offset=4096, last_write_timestamp_ns=123,
                          sliding_window_max_length=1 << 19, node_id=3, epoch=2, next_offset=8192).encode()


def automq_header(magic=0x01234567, capacity=1 << 20, trim=-1, ts=5, window=1 << 19, shutdown=1) -> bytes:
    body = struct.pack(">IQqqqIiq", magic, capacity, trim, ts, window, shutdown, 1, 1)
    return body + struct.pack(">I", zlib.crc32(body) & 0x7FFFFFFF)


HEADER_INPUTS = st.one_of(st.binary(max_size=128), mutated(NATIVE_HEADER), mutated(automq_header()),
                          mutated(automq_header(0x12345678)))


@FUZZ
@given(HEADER_INPUTS, st.integers(0, 70))
def test_wal_header_decode(data, offset):
    header = only_format_errors(WalHeader.decode, data, offset)
    if header is not None:
        assert header.capacity >= 16384 and header.sliding_window_max_length <= header.ring_size


@FUZZ
@given(HEADER_INPUTS, HEADER_INPUTS)
def test_header_slots(a, b):
    raw = (a + bytes(4096))[:4096] + (b + bytes(4096))[:4096]
    try:
        state = decode_slots(raw)
    except NotFoundError:
        return
    assert state.header is not None and len(state.slots) == 2


# -- records and batches ---------------------------------------------------------------------

def _record(offset: int, body: bytes, checksum) -> bytes:
    head = struct.pack(">IIqI", rec.DATA_MAGIC, len(body), offset + 24, checksum(body))
    return head + struct.pack(">I", checksum(head)) + body


BODY = StreamRecordBatch(7, 1, 100, 3, b"payload bytes").encode()


@FUZZ
@given(st.one_of(st.binary(max_size=80), mutated(_record(4096, BODY, crc32c), hot=(0,)),
                 mutated(_record(4096, BODY, automq_crc), hot=(0,))),
       st.sampled_from([crc32c, automq_crc]), st.none() | st.just(4096) | st.integers(0, 1 << 62))
def test_record_header_decode_and_body_check(data, checksum, expected_offset):
    head = only_format_errors(rec.RecordHeader.decode, data, expected_offset=expected_offset, checksum=checksum)
    if head is not None:
        assert head.body_length > 0 and head.body_offset >= 24
        only_format_errors(head.check_body, data[24:], 24, checksum=checksum)


@FUZZ
@given(st.one_of(st.binary(max_size=80), mutated(BODY, hot=(0, 25))), st.booleans(), st.integers(0, 40))
def test_stream_record_batch_decode(data, exact, offset):
    batch = only_format_errors(StreamRecordBatch.decode, data, offset, exact=exact)
    if batch is not None:
        assert batch.count >= 1 and batch.base_offset >= 0


# -- objects ---------------------------------------------------------------------------------

def _batches(stream: int, n: int, size: int) -> list[StreamRecordBatch]:
    return [StreamRecordBatch(stream, 0, i * 2, 2, bytes([stream + i]) * size) for i in range(n)]


WALCTL_OBJECT = obj.build_object([(1, _batches(1, 4, 30)), (5, _batches(5, 3, 50))], block_size=80).data
AUTOMQ_OBJECT = obj.build_object([(2, _batches(2, 5, 20))], block_size=60, version=0).data
OBJECT_INPUTS = st.one_of(st.binary(max_size=200),
                          mutated(WALCTL_OBJECT, hot=(len(WALCTL_OBJECT) - 48, len(WALCTL_OBJECT) - 24, 0)),
                          mutated(AUTOMQ_OBJECT, hot=(len(AUTOMQ_OBJECT) - 48, len(AUTOMQ_OBJECT) - 24, 0)))


@FUZZ
@given(OBJECT_INPUTS)
def test_object_footer_index_and_blocks(data):
    try:
        footer, entries = obj.parse_tail(data, len(data))
        if entries is None:
            start = footer.index_start_position
            entries = obj.decode_index(data[start:start + footer.index_block_length], footer, base_position=start)
        for entry in entries:
            for batch in obj.iter_blocks(data, entry):
                assert batch.stream_id == entry.stream_id
    except FormatError:
        pass


@FUZZ
@given(OBJECT_INPUTS)
def test_verify_object_reports_and_never_raises(data):
    problems = obj.verify_object(data)
    assert all(isinstance(p.position, int) and p.message for p in problems)
    if data in (WALCTL_OBJECT, AUTOMQ_OBJECT):
        assert problems == []


@FUZZ
@given(st.binary(max_size=60), st.integers(0, 40))
def test_small_structures(data, offset):
    only_format_errors(obj.DataBlockHeader.decode, data, offset)
    only_format_errors(obj.IndexEntry.decode, data, offset)
    only_format_errors(obj.Footer.decode, data, offset, object_size=len(data) + offset)


# -- the recovery scan, on mutated images in memory -------------------------------------------

def _native_image() -> tuple[bytes, dict[int, bytes]]:
    """A 64 KiB walctl WAL, built by hand: 12 blocks of one record, header clean."""
    capacity = 64 << 10
    image = bytearray(capacity)
    written = {}
    for i in range(12):
        offset = i * 4096
        body = StreamRecordBatch(0, 0, i, 1, bytes([i]) * (1000 + i)).encode()
        raw = _record(offset, body, crc32c)
        image[8192 + offset:8192 + offset + len(raw)] = raw
        written[offset] = body
    header = WalHeader(capacity=capacity, last_write_timestamp_ns=9, sliding_window_max_length=32768,
                       next_offset=12 * 4096)
    image[0:64] = header.encode()
    image[4096:4160] = header.with_(last_write_timestamp_ns=8, shutdown_type=1).encode()
    return bytes(image), written


def _automq_image(magic: int) -> tuple[bytes, dict[int, bytes]]:
    capacity = 64 << 10
    image = bytearray(capacity)
    written = {}
    for i in range(10):
        offset = i * 4096
        body = StreamRecordBatch(4, 0, i, 1, bytes([i]) * (900 + i)).encode()
        raw = _record(offset, body, automq_crc)
        image[8192 + offset:8192 + offset + len(raw)] = raw
        written[offset] = body
    image[0:56] = automq_header(magic, capacity, -1, 10, 32768, 0)
    return bytes(image), written


IMAGES = {"walctl": _native_image(), "automq-v0": _automq_image(0x12345678), "automq-v1": _automq_image(0x01234567)}
HOT = tuple(range(0, 120, 8)) + tuple(range(4096, 4160, 8)) + tuple(8192 + 4096 * i for i in range(14))


# One strategy per image, built once (a flatmap building it for each example validated it each time).
MUTATED_IMAGES = {name: st.tuples(st.just(name), mutated(IMAGES[name][0], max_ops=8, hot=HOT)) for name in IMAGES}


@FUZZ
@given(st.sampled_from(sorted(IMAGES)).flatmap(MUTATED_IMAGES.__getitem__))
def test_recovery_scan_on_mutated_images(case):
    name, image = case
    written = IMAGES[name][1]
    if len(image) < 8192:
        return
    mem = MemoryDevice(len(image))
    mem.data[:] = image
    try:
        state = decode_slots(image[:8192])
    except NotFoundError:
        return
    header = state.header
    if header.capacity > len(image):
        return  # recover refuses such a header (exit 3) before scanning
    entries, result = reader.run_scan(mem, header)
    for e in entries:
        assert written.get(e.offset) == e.body, f"{name}: phantom or corrupt record at {e.offset}"
    for f in result.findings:
        assert f.cause in reader.CAUSES
        position, data = reader.finding_bytes(mem, f)
        assert len(data) <= reader.HEXDUMP_BYTES
        reader.hexdump(data, position)
