"""Objects: data blocks, index, footer (FORMATS.md 3): golden bytes, round trips, damage, junk.

Expected bytes come from the FORMATS.md tables via ``struct`` and the ``crc32c``
package, independent of walctl's encoder.
"""

from __future__ import annotations

import struct

import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl import errors
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch as B
from walctl.format.object import (
    FOOTER_SIZE,
    DataBlockHeader,
    Footer,
    IndexEntry,
    Problem,
    build_object,
    check_data_crc,
    decode_index,
    find_entries,
    iter_blocks,
    parse_tail,
    tail_length_hint,
    verify_object,
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
FOOTER_MAGIC = 0x88E241B785F4CFF7

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- independent encoders (FORMATS.md 2 and 3 offsets) ------------------------------------------

def batch_bytes(stream_id, epoch, base_offset, count, payload) -> bytes:
    buf = bytearray(33)
    struct.pack_into(">B", buf, 0, 0x22)
    struct.pack_into(">q", buf, 1, stream_id)
    struct.pack_into(">q", buf, 9, epoch)
    struct.pack_into(">q", buf, 17, base_offset)
    struct.pack_into(">I", buf, 25, count)
    struct.pack_into(">I", buf, 29, len(payload))
    return bytes(buf) + payload


def raw(b: B) -> bytes:
    return batch_bytes(b.stream_id, b.epoch, b.base_offset, b.count, b.payload)


def block_header_bytes(record_count, data_length, magic=0x5A, flags=0x02) -> bytes:
    """magic@0, flags@1, recordCount@2, dataLength@6."""
    buf = bytearray(10)
    struct.pack_into(">B", buf, 0, magic)
    struct.pack_into(">B", buf, 1, flags)
    struct.pack_into(">i", buf, 2, record_count)
    struct.pack_into(">i", buf, 6, data_length)
    return bytes(buf)


def block_bytes(batches) -> bytes:
    body = b"".join(raw(b) for b in batches)
    return block_header_bytes(len(batches), len(body)) + body


def entry_bytes(stream_id, start_offset, end_offset_delta, record_count, block_position, block_size) -> bytes:
    """streamId@0, startOffset@8, endOffsetDelta@16, recordCount@20, blockPosition@24, blockSize@32."""
    buf = bytearray(36)
    struct.pack_into(">q", buf, 0, stream_id)
    struct.pack_into(">q", buf, 8, start_offset)
    struct.pack_into(">i", buf, 16, end_offset_delta)
    struct.pack_into(">i", buf, 20, record_count)
    struct.pack_into(">q", buf, 24, block_position)
    struct.pack_into(">i", buf, 32, block_size)
    return bytes(buf)


def footer_bytes(index_start, index_length, version=1, index_crc=0, data_crc=0, *,
                 reserved=bytes(16), magic=FOOTER_MAGIC) -> bytes:
    """indexStartPosition@0, indexBlockLength@8, version@12, indexCrc@16, dataCrc@20, zeros@24, magic@40."""
    buf = bytearray(48)
    struct.pack_into(">q", buf, 0, index_start)
    struct.pack_into(">i", buf, 8, index_length)
    struct.pack_into(">I", buf, 12, version)
    struct.pack_into(">I", buf, 16, index_crc)
    struct.pack_into(">I", buf, 20, data_crc)
    buf[24:40] = reserved
    struct.pack_into(">Q", buf, 40, magic)
    return bytes(buf)


def assemble(data: bytes, entries: list[tuple], version: int = 1) -> bytes:
    """A whole object from a data region and index entry tuples; v1 crcs computed here."""
    index = b"".join(entry_bytes(*e) for e in entries)
    if version == 1:
        foot = footer_bytes(len(data), len(index), 1, crc32c_pkg.crc32c(index), crc32c_pkg.crc32c(data))
    else:
        foot = footer_bytes(len(data), len(index), 0)
    return data + index + foot


def read_all(data: bytes) -> dict[int, list[B]]:
    """The whole read path: tail, index (second read if needed), data crc, every entry's blocks."""
    hint = tail_length_hint(2, object_size=len(data))
    footer, entries = parse_tail(data[len(data) - hint:], len(data))
    if entries is None:
        start = footer.index_start_position
        entries = decode_index(data[start:start + footer.index_block_length], footer)
    check_data_crc(data, footer)
    out: dict[int, list[B]] = {}
    for e in entries:
        out.setdefault(e.stream_id, []).extend(iter_blocks(data, e))
    return out


# --- the golden object: 2 streams, 3 blocks -----------------------------------------------------

A = B(3, 1, 10, 2, b"ab")        # 35 bytes
B2 = B(3, 1, 12, 1, b"")         # 33 bytes
C = B(3, 2, 13, 4, b"hello!!")   # 40 bytes
D = B(7, 0, 0, 5, b"x" * 30)     # 63 bytes
GOLDEN_STREAMS = [(3, [A, B2, C]), (7, [D])]
GOLDEN_BLOCK_SIZE = 60  # [A, B2] reaches 68 >= 60 and closes; [C] ends stream 3; [D] alone reaches 63
GOLDEN_ENTRIES = [(3, 10, 3, 2, 0, 78), (3, 13, 4, 1, 78, 50), (7, 0, 5, 1, 128, 73)]
GOLDEN_DATA = block_bytes([A, B2]) + block_bytes([C]) + block_bytes([D])
GOLDEN_V1 = assemble(GOLDEN_DATA, GOLDEN_ENTRIES, 1)
GOLDEN_V0 = assemble(GOLDEN_DATA, GOLDEN_ENTRIES, 0)
INDEX_START = 201
FOOTER_START = 201 + 3 * 36


def test_layout_constants():
    assert (obj.DATA_BLOCK_HEADER_SIZE, obj.INDEX_ENTRY_SIZE, FOOTER_SIZE) == (10, 36, 48)
    assert (DataBlockHeader.SIZE, IndexEntry.SIZE, Footer.SIZE) == (10, 36, 48)
    assert (obj.DATA_BLOCK_MAGIC, obj.DATA_BLOCK_FLAGS, obj.FOOTER_MAGIC) == (0x5A, 0x02, FOOTER_MAGIC)
    assert obj.DEFAULT_BLOCK_SIZE == 1 << 20


def test_golden_data_block_header():
    literal = bytes.fromhex("5a02" "00000002" "00000046")
    assert literal == block_header_bytes(2, 70)
    h = DataBlockHeader(2, 70)
    assert h.encode() == literal and h.block_size == 80
    assert DataBlockHeader.decode(literal) == h
    assert DataBlockHeader.decode(b"\x5a" * 7 + literal, 7) == h


def test_golden_index_entry():
    literal = bytes.fromhex("0000000000000003" "000000000000000a" "00000003" "00000002"
                            "0000000000000000" "0000004e")
    assert literal == entry_bytes(3, 10, 3, 2, 0, 78)
    e = IndexEntry(3, 10, 3, 2, 0, 78)
    assert e.encode() == literal
    assert IndexEntry.decode(literal) == e
    assert (e.end_offset, e.block_end) == (13, 78)
    big = IndexEntry(INT64_MAX, INT64_MAX - (1 << 31) + 1, (1 << 31) - 1, (1 << 31) - 1, INT64_MAX - 100, 100)
    assert IndexEntry.decode(big.encode()) == big


def test_golden_footer_v1():
    literal = bytes.fromhex("00000000000000c9" "0000006c" "00000001" "11223344" "55667788"
                            + "00" * 16 + "88e241b785f4cff7")
    assert literal == footer_bytes(201, 108, 1, 0x11223344, 0x55667788)
    f = Footer(201, 108, 1, 0x11223344, 0x55667788)
    assert f.encode() == literal
    assert Footer.decode(literal) == f
    assert Footer.decode(literal, object_size=201 + 108 + 48) == f
    assert (f.entry_count, f.object_size, f.checksummed) == (3, 357, True)


def test_golden_footer_automq_v0():
    # AutoMQ: indexStartPosition, indexBlockLength, 28 zero bytes, magic.
    literal = bytes.fromhex("00000000000000c9" "0000006c" + "00" * 28 + "88e241b785f4cff7")
    f = Footer.decode(literal, object_size=357)
    assert f == Footer(201, 108, version=0, index_crc=0, data_crc=0)
    assert not f.checksummed
    assert Footer(201, 108, version=0).encode() == literal


def test_automq_v0_footer_ignores_bytes_16_to_40():
    # AutoMQ ignores [12, 40); walctl reads version 0 and checks nothing behind it.
    literal = footer_bytes(201, 108, 0, 0xDEADBEEF, 0xFEEDFACE, reserved=b"\xff" * 16)
    f = Footer.decode(literal)
    assert (f.version, f.index_crc, f.data_crc) == (0, 0xDEADBEEF, 0xFEEDFACE)
    # The object reads; only the deep check remarks that AutoMQ never writes anything there.
    data = GOLDEN_V0[:FOOTER_START] + footer_bytes(201, 108, 0, 0, 0, reserved=b"\0" * 15 + b"\1")
    assert read_all(data) == dict(GOLDEN_STREAMS)
    assert [(p.position, p.kind) for p in verify_object(data)] == [(FOOTER_START + 12, "version")]


def test_golden_object_byte_by_byte():
    built = build_object(GOLDEN_STREAMS, block_size=GOLDEN_BLOCK_SIZE)
    assert len(GOLDEN_V1) == 357
    assert built.data == GOLDEN_V1
    assert built.size == 357
    assert built.entries == [IndexEntry(*e) for e in GOLDEN_ENTRIES]
    assert built.footer == Footer(201, 108, 1, crc32c_pkg.crc32c(GOLDEN_V1[201:309]),
                                  crc32c_pkg.crc32c(GOLDEN_DATA))
    assert built.ranges == {3: (10, 17, 128), 7: (0, 5, 73)}
    assert built.ranges[3].size_bytes == 128
    # Spot checks against the tables, from the bytes alone.
    assert GOLDEN_V1[0:2] == b"\x5a\x02" and GOLDEN_V1[78:80] == b"\x5a\x02" and GOLDEN_V1[128:130] == b"\x5a\x02"
    assert struct.unpack_from(">ii", GOLDEN_V1, 2) == (2, 68)
    assert GOLDEN_V1[10] == 0x22
    assert struct.unpack_from(">Q", GOLDEN_V1, 349)[0] == FOOTER_MAGIC


def test_golden_object_automq_v0():
    built = build_object(GOLDEN_STREAMS, block_size=GOLDEN_BLOCK_SIZE, version=0)
    assert built.data == GOLDEN_V0
    assert built.data[:FOOTER_START] == GOLDEN_V1[:FOOTER_START]
    assert built.data[FOOTER_START + 12:FOOTER_START + 40] == bytes(28)
    assert verify_object(GOLDEN_V0) == []


@pytest.mark.parametrize("data", [GOLDEN_V1, GOLDEN_V0], ids=["v1", "v0"])
def test_golden_object_reads_back(data):
    assert read_all(data) == dict(GOLDEN_STREAMS)
    assert verify_object(data) == []
    assert verify_object(bytearray(data)) == [] and verify_object(memoryview(data)) == []


def test_parse_tail_with_and_without_the_index():
    size = len(GOLDEN_V1)
    want = [IndexEntry(*e) for e in GOLDEN_ENTRIES]
    for n in (48, 49, 100, 48 + 108 - 1):
        footer, entries = parse_tail(GOLDEN_V1[size - n:], size)
        assert footer.index_start_position == INDEX_START and entries is None
    for n in (48 + 108, 48 + 108 + 1, size):
        footer, entries = parse_tail(GOLDEN_V1[size - n:], size)
        assert entries == want
    assert decode_index(GOLDEN_V1[INDEX_START:FOOTER_START], footer) == want
    assert tail_length_hint(3) == 48 + 108
    assert tail_length_hint(object_size=100) == 100
    assert tail_length_hint() == 48 + 36 * obj.DEFAULT_ENTRIES_GUESS
    with pytest.raises(ValueError):
        parse_tail(GOLDEN_V1, size - 1)


def test_find_entries():
    e1, e2, e3 = (IndexEntry(*e) for e in GOLDEN_ENTRIES)
    entries = [e1, e2, e3]
    assert find_entries(entries, 3, 0) == [e1, e2]
    assert find_entries(entries, 3, 12) == [e1, e2]
    assert find_entries(entries, 3, 13) == [e2]
    assert find_entries(entries, 3, 16) == [e2]
    assert find_entries(entries, 3, 17) == []
    assert find_entries(entries, 7, 4) == [e3]
    assert find_entries(entries, 7, 5) == []
    assert find_entries(entries, 5, 0) == [] and find_entries(entries, 1, 0) == []
    assert find_entries([], 3, 0) == []


def test_one_entry_over_several_blocks():
    # As after compaction: one index entry covers two consecutive DataBlocks of stream 3.
    data = assemble(GOLDEN_DATA, [(3, 10, 7, 3, 0, 128), (7, 0, 5, 1, 128, 73)])
    assert verify_object(data) == []
    assert read_all(data) == dict(GOLDEN_STREAMS)
    entry = IndexEntry(3, 10, 7, 3, 0, 128)
    assert list(iter_blocks(data[:128], entry, base_position=0)) == [A, B2, C]
    # A buffer holding just the entry's range, positioned at 0.
    assert list(iter_blocks(data[0:128], entry, base_position=0)) == [A, B2, C]
    shifted = IndexEntry(7, 0, 5, 1, 128, 73)
    assert list(iter_blocks(data[128:201], shifted, base_position=128)) == [D]


# --- block sizing -------------------------------------------------------------------------------

def payloads(sizes, stream_id=1, base=0):
    """Batches of the given total sizes (33-byte header included), contiguous from ``base``."""
    out = []
    for size in sizes:
        out.append(B(stream_id, 0, base, 1, b"p" * (size - 33)))
        base += 1
    return out


def test_block_closes_when_payload_reaches_threshold():
    built = build_object([(1, payloads([40, 60, 33, 33, 34, 50]))], block_size=100)
    # 40+60 = 100 reaches 100: closes. 33+33+34 = 100: closes. 50: the stream's last block.
    assert [(e.record_count, e.block_size) for e in built.entries] == [(2, 110), (3, 110), (1, 60)]
    built = build_object([(1, payloads([40, 59, 200, 33]))], block_size=100)
    assert [(e.record_count, e.block_size) for e in built.entries] == [(3, 309), (1, 43)]


def test_block_size_one_gives_a_block_per_batch():
    built = build_object([(1, payloads([33, 40, 50]))], block_size=1)
    assert [e.record_count for e in built.entries] == [1, 1, 1]


def test_block_count_restarts_for_each_stream():
    # Stream 1 leaves a 60-byte partial block. AutoMQ would carry 60 over and close stream 2's
    # first block after one batch (60 + 60 >= 100); walctl starts stream 2 from 0.
    built = build_object([(1, payloads([60], 1)), (2, payloads([60, 60, 60], 2))], block_size=100)
    assert [(e.stream_id, e.record_count) for e in built.entries] == [(1, 1), (2, 2), (2, 1)]
    assert verify_object(built.data) == []


def test_default_block_size_is_one_mib():
    built = build_object([(1, payloads([(1 << 19) + 33, (1 << 19), 100]))])
    assert [e.record_count for e in built.entries] == [2, 1]


@pytest.mark.parametrize("streams, kwargs", [
    ([(2, payloads([40], 2)), (1, payloads([40], 1))], {}),              # descending
    ([(1, payloads([40], 1)), (1, payloads([40], 1, 1))], {}),           # same stream twice
    ([(1, [])], {}),                                                     # empty stream
    ([], {}),                                                            # nothing at all
    ([(1, payloads([40], 2))], {}),                                      # batch of another stream
    ([(1, [B(1, 0, 0, 2, b""), B(1, 0, 3, 1, b"")])], {}),               # gap
    ([(1, [B(1, 0, 0, 2, b""), B(1, 0, 1, 1, b"")])], {}),               # overlap
    ([(-1, [B(-1, 0, 0, 1, b"")])], {}),                                 # negative stream
    ([(1, payloads([40], 1))], {"block_size": 0}),
    ([(1, payloads([40], 1))], {"version": 2}),
], ids=["descending", "repeated", "empty-stream", "no-streams", "other-stream", "gap", "overlap",
        "negative-stream", "block-size-0", "version-2"])
def test_build_refuses_bad_input(streams, kwargs):
    with pytest.raises(ValueError):
        build_object(streams, **kwargs)


def test_build_accepts_generators_and_tuples():
    built = build_object(((sid, tuple(bs)) for sid, bs in GOLDEN_STREAMS), block_size=GOLDEN_BLOCK_SIZE)
    assert built.data == GOLDEN_V1


# --- round trips --------------------------------------------------------------------------------

@st.composite
def stream_sets(draw, max_streams=4, max_batches=10):
    ids = sorted(draw(st.sets(st.integers(0, INT64_MAX), min_size=1, max_size=max_streams)))
    streams = []
    for sid in ids:
        base = draw(st.integers(0, 1 << 50))
        batches = []
        for _ in range(draw(st.integers(1, max_batches))):
            count = draw(st.integers(1, 5000))
            batches.append(B(sid, draw(st.integers(INT64_MIN, INT64_MAX)), base, count,
                             draw(st.binary(max_size=150))))
            base += count
        streams.append((sid, batches))
    return streams


@FAST
@given(stream_sets(), st.one_of(st.integers(1, 1500), st.just(1 << 20)), st.sampled_from([0, 1]),
       st.integers(0, 10))
def test_round_trip(streams, block_size, version, extra_entries):
    built = build_object(streams, block_size=block_size, version=version)
    data = built.data
    footer = built.footer
    assert footer.version == version and footer.object_size == len(data)
    # First read: footer plus a guess of entries; the index comes along only if the guess covers it.
    hint = tail_length_hint(extra_entries, object_size=len(data))
    got_footer, entries = parse_tail(data[len(data) - hint:], len(data))
    assert got_footer == footer
    if entries is None:
        assert hint < FOOTER_SIZE + footer.index_block_length
        start = footer.index_start_position
        entries = decode_index(data[start:start + footer.index_block_length], footer)
    assert entries == built.entries
    got: dict[int, list[B]] = {}
    for e in entries:
        blocks = list(iter_blocks(data, e))
        assert blocks == list(iter_blocks(data[e.block_position:e.block_end], e, base_position=e.block_position))
        got.setdefault(e.stream_id, []).extend(blocks)
        # Block sizing: the block closed no earlier than the threshold allows.
        payload = e.block_size - 10
        assert payload == sum(b.size for b in blocks)
        assert payload - blocks[-1].size < block_size
    assert got == dict(streams)
    for prev, e in zip(entries, entries[1:]):
        if prev.stream_id == e.stream_id:
            assert prev.block_size - 10 >= block_size  # only a stream's last block may be short
            assert prev.end_offset == e.start_offset
    for sid, batches in streams:
        mine = [e for e in entries if e.stream_id == sid]
        assert built.ranges[sid] == (batches[0].base_offset, batches[-1].end_offset,
                                     sum(e.block_size for e in mine))
    assert verify_object(data) == []
    if version == 1:
        check_data_crc(data, footer)


@FAST
@given(stream_sets(max_streams=3, max_batches=6), st.integers(1, 300), st.data())
def test_find_entries_matches_a_scan(streams, block_size, data):
    entries = build_object(streams, block_size=block_size).entries
    sid = data.draw(st.sampled_from([s for s, _ in streams] + [0, INT64_MAX]))
    mine = [e for e in entries if e.stream_id == sid]
    lo = mine[0].start_offset if mine else 0
    hi = mine[-1].end_offset if mine else 10
    offset = data.draw(st.integers(max(lo - 3, 0), hi + 3))
    assert find_entries(entries, sid, offset) == [e for e in mine if e.end_offset > offset]


# --- check order and positions: footer ----------------------------------------------------------

def footer_at(n_before: int, foot: bytes) -> bytes:
    return b"\x88" * n_before + foot


def test_footer_bad_magic_is_bad_magic():
    foot = footer_bytes(201, 108, magic=0x1122334455667788)
    with pytest.raises(errors.BadMagicError) as info:
        Footer.decode(footer_at(9, foot), 9)
    assert (info.value.offset, info.value.expected, info.value.found) == (49, FOOTER_MAGIC, 0x1122334455667788)
    assert info.value.exit_code == 3  # the caller maps a bad footer magic to "not an object" (4)


def test_footer_zeroed_and_truncated():
    with pytest.raises(errors.ZeroedError):
        Footer.decode(bytes(48))
    for n in range(48):
        with pytest.raises(errors.TruncatedError) as info:
            Footer.decode(GOLDEN_V1[FOOTER_START:FOOTER_START + n])
        assert info.value.offset == 0


@pytest.mark.parametrize("foot, object_size, position", [
    (footer_bytes(201, 108, version=2), None, 12),
    (footer_bytes(201, 108, version=0xFFFFFFFF), None, 12),
    (footer_bytes(-1, 108), None, 0),
    (footer_bytes(201, 107), None, 8),
    (footer_bytes(201, -36), None, 8),
    (footer_bytes(201, 108, reserved=b"\0" * 15 + b"\1"), None, 24),
    (footer_bytes(201, 108), 358, 0),
    (footer_bytes(201, 108), 356, 0),
], ids=["version-2", "version-max", "negative-start", "length-not-36n", "negative-length",
        "v1-reserved-not-zero", "size-too-big", "size-too-small"])
def test_footer_bounds(foot, object_size, position):
    with pytest.raises(errors.BoundsError) as info:
        Footer.decode(footer_at(5, foot), 5, object_size=object_size)
    assert info.value.offset == 5 + position


def test_parse_tail_errors_carry_object_positions():
    size = len(GOLDEN_V1)
    damaged = bytearray(GOLDEN_V1)
    damaged[-1] ^= 0x01
    with pytest.raises(errors.BadMagicError) as info:
        parse_tail(bytes(damaged[-100:]), size)
    assert info.value.offset == size - 8
    with pytest.raises(errors.BoundsError) as info:
        parse_tail(GOLDEN_V1[-60:], size + 1)
    assert info.value.offset == size + 1 - 48
    for n in range(48):
        with pytest.raises(errors.TruncatedError) as info:
            parse_tail(GOLDEN_V1[size - n:], size)
        assert info.value.offset == size - n
    with pytest.raises(errors.TruncatedError):
        parse_tail(b"", 0)
    damaged = bytearray(GOLDEN_V1)
    damaged[INDEX_START + 40] ^= 0x01
    with pytest.raises(errors.ChecksumError) as info:
        parse_tail(bytes(damaged), size)
    assert info.value.offset == INDEX_START


# --- check order and positions: index -----------------------------------------------------------

def index_error(entries: list[tuple], data_size: int = 201, version: int = 1, *, index: bytes | None = None):
    """decode_index over hand-made entries (crc made to match), returning the error."""
    index = b"".join(entry_bytes(*e) for e in entries) if index is None else index
    footer = Footer(data_size, len(index), version, crc32c_pkg.crc32c(index) if version else 0)
    try:
        decode_index(index, footer)
    except errors.FormatError as exc:
        return exc
    raise AssertionError("decode_index accepted the index")


@pytest.mark.parametrize("entries, error, position", [
    ([(3, 10, 3, 2, 0, 78), (3, 13, 4, 1, 78, 124)], errors.BoundsError, 36 + 24),      # past index start
    ([(7, 0, 5, 1, 0, 78), (3, 13, 4, 1, 78, 50)], errors.BoundsError, 36),            # streams unsorted
    ([(3, 13, 4, 1, 78, 50), (3, 10, 3, 2, 0, 78)], errors.BoundsError, 36 + 8),       # offsets unsorted
    ([(3, 10, 4, 2, 0, 78), (3, 13, 4, 1, 78, 50)], errors.BoundsError, 36 + 8),       # offsets overlap
    ([(3, 10, 3, 2, 0, 78), (7, 0, 5, 1, 77, 73)], errors.BoundsError, 36 + 24),       # blocks overlap
    ([(7, 0, 5, 1, 0, 78), (8, 0, 4, 1, 0, 78)], errors.BoundsError, 36 + 24),         # same block twice
    ([(-1, 10, 3, 2, 0, 78)], errors.BoundsError, 0),
    ([(3, -1, 3, 2, 0, 78)], errors.BoundsError, 8),
    ([(3, 10, 0, 2, 0, 78)], errors.BoundsError, 16),
    ([(3, 10, -1, 2, 0, 78)], errors.BoundsError, 16),
    ([(3, INT64_MAX - 2, 3, 2, 0, 78)], errors.BoundsError, 16),
    ([(3, 10, 3, 0, 0, 78)], errors.BoundsError, 20),
    ([(3, 10, 3, 2, -1, 78)], errors.BoundsError, 24),
    ([(3, 10, 3, 2, 0, 9)], errors.BoundsError, 32),
    ([(3, 10, 3, 2, 0, 78), (0, 0, 0, 0, 0, 0)], errors.ZeroedError, 36),
], ids=["past-index", "streams-unsorted", "offsets-unsorted", "offsets-overlap", "blocks-overlap",
        "same-block", "negative-stream", "negative-start", "empty-range", "negative-delta",
        "end-overflow", "no-records", "negative-position", "block-too-small", "zeroed-entry"])
def test_index_damage(entries, error, position):
    exc = index_error(entries)
    assert type(exc) is error
    assert exc.offset == 201 + position


def test_index_crc_checked_first_and_only_in_v1():
    index = b"".join(entry_bytes(*e) for e in GOLDEN_ENTRIES)
    footer = Footer(201, 108, 1, crc32c_pkg.crc32c(index) ^ 1)
    with pytest.raises(errors.ChecksumError) as info:
        decode_index(index, footer)
    assert info.value.offset == 201
    with pytest.raises(errors.ChecksumError) as info:
        decode_index(index, footer, base_position=1000)
    assert info.value.offset == 1000
    assert decode_index(index, Footer(201, 108, 0, 0x1234)) == [IndexEntry(*e) for e in GOLDEN_ENTRIES]
    # Damage that also breaks a bound is reported as the crc failure (checksum before bounds).
    bad = bytearray(index)
    bad[36 + 20:36 + 24] = bytes(4)
    with pytest.raises(errors.ChecksumError):
        decode_index(bytes(bad), Footer(201, 108, 1, crc32c_pkg.crc32c(index)))


def test_index_truncated():
    index = b"".join(entry_bytes(*e) for e in GOLDEN_ENTRIES)
    with pytest.raises(errors.TruncatedError) as info:
        decode_index(index[:100], Footer(201, 108, 1, crc32c_pkg.crc32c(index)))
    assert info.value.offset == 201


def test_empty_index_is_an_empty_object():
    data = assemble(b"", [])
    assert len(data) == 48
    assert parse_tail(data, 48) == (Footer(0, 0, 1, 0, 0), [])
    assert verify_object(data) == []


# --- check order and positions: blocks ----------------------------------------------------------

A_B2 = raw(A) + raw(B2)  # 68 bytes of stream 3's first block


def blocks_error(data: bytes, entry: tuple, base_position: int = 0):
    try:
        list(iter_blocks(data, IndexEntry(*entry), base_position=base_position))
    except errors.FormatError as exc:
        return exc
    raise AssertionError("iter_blocks accepted the blocks")


@pytest.mark.parametrize("data, entry, error, position", [
    (block_header_bytes(2, 68, magic=0x5B) + A_B2, (3, 10, 3, 2, 0, 78), errors.BadMagicError, 0),
    (block_header_bytes(2, 68, flags=0x03) + A_B2, (3, 10, 3, 2, 0, 78), errors.BoundsError, 1),
    (bytes(10) + A_B2, (3, 10, 3, 2, 0, 78), errors.ZeroedError, 0),
    (block_header_bytes(0, 68) + A_B2, (3, 10, 3, 2, 0, 78), errors.BoundsError, 2),
    (block_header_bytes(3, 68) + A_B2, (3, 10, 3, 2, 0, 78), errors.BoundsError, 2),
    (block_header_bytes(2, 69) + A_B2 + b"\0", (3, 10, 3, 2, 0, 78), errors.BoundsError, 6),
    (block_header_bytes(2, -1) + A_B2, (3, 10, 3, 2, 0, 78), errors.BoundsError, 6),
    (block_header_bytes(1, 35) + raw(A) + block_header_bytes(1, 3) + b"abc", (3, 10, 3, 2, 0, 58),
     errors.TruncatedError, 55),                                               # batch cut by its block
    (block_bytes([A, B2]) + block_header_bytes(1, 30), (3, 10, 3, 2, 0, 88), errors.BoundsError, 78 + 6),
    (block_bytes([A, B2]) + b"\x5a\x02\0", (3, 10, 3, 2, 0, 81), errors.TruncatedError, 78),
    (block_bytes([A, B(4, 1, 12, 1, b"")]), (3, 10, 3, 2, 0, 78), errors.BoundsError, 45 + 1),
    (block_bytes([A, B(3, 1, 13, 1, b"")]), (3, 10, 4, 2, 0, 78), errors.BoundsError, 45 + 17),  # gap
    (block_bytes([A, B(3, 1, 11, 1, b"")]), (3, 10, 2, 2, 0, 78), errors.BoundsError, 45 + 17),  # overlap
    (block_bytes([A, B2]), (3, 9, 4, 2, 0, 78), errors.BoundsError, 10 + 17),             # first base
    (block_bytes([A, B2]), (3, 10, 4, 2, 0, 78), errors.BoundsError, 45 + 17),            # last end
    (block_bytes([A, B2]), (3, 10, 3, 3, 0, 78), errors.BoundsError, 0),                  # entry count
    (block_bytes([A]) + block_bytes([B2]), (3, 10, 3, 1, 0, 88), errors.BoundsError, 0),  # entry count
    (block_bytes([A, B2])[:-1], (3, 10, 3, 2, 0, 78), errors.TruncatedError, 0),          # buffer short
], ids=["magic", "flags", "zeroed", "count-0", "count-wrong", "length-past-range", "length-negative",
        "batch-cut", "block-cut", "header-cut", "other-stream", "gap", "overlap", "first-base", "last-end",
        "entry-count", "entry-count-2-blocks", "buffer-short"])
def test_block_damage(data, entry, error, position):
    exc = blocks_error(data, entry)
    assert type(exc) is error, exc
    assert exc.offset == position
    # Same damage seen through a buffer that starts at the entry, placed at object position 500.
    moved = blocks_error(data, (*entry[:4], 500, entry[5]), base_position=500)
    assert type(moved) is error and moved.offset == 500 + position


def test_iter_blocks_refuses_a_buffer_after_the_entry():
    with pytest.raises(ValueError):
        list(iter_blocks(GOLDEN_V1[78:], IndexEntry(*GOLDEN_ENTRIES[0]), base_position=78))


# --- verify_object: every problem, with its position --------------------------------------------

def test_verify_collects_every_problem():
    data = bytearray(GOLDEN_V0)
    data[78] = 0x5B         # stream 3's second block: bad magic
    data[128 + 10 + 1 + 7] ^= 0x01   # stream 7's batch: another stream id
    problems = verify_object(bytes(data))
    assert [(p.position, p.kind) for p in problems] == [(78, "BadMagicError"), (139, "BoundsError")]
    assert all(isinstance(p, Problem) and p.message for p in problems)


def test_verify_reports_uncovered_bytes_and_gaps():
    junk = b"\xee" * 7
    data_region = junk + block_bytes([A, B2]) + junk + block_bytes([D]) + b"\x01"
    entries = [(3, 10, 3, 2, 7, 78), (7, 0, 5, 1, 92, 73)]
    problems = verify_object(assemble(data_region, entries))
    assert [(p.position, p.kind) for p in problems] == [(0, "uncovered"), (85, "uncovered"), (165, "uncovered")]
    assert "[0, 7)" in problems[0].message and "[165, 166)" in problems[2].message
    # Stream 3 with offsets [13, 20) missing between its two entries.
    gap = block_bytes([A, B2]) + block_bytes([B(3, 0, 20, 1, b"")])
    problems = verify_object(assemble(gap, [(3, 10, 3, 2, 0, 78), (3, 20, 1, 1, 78, 43)]))
    assert [(p.position, p.kind) for p in problems] == [(78, "gap")]
    assert "[13, 20)" in problems[0].message


def test_verify_index_and_data_crc_together():
    data = bytearray(GOLDEN_V1)
    data[50] ^= 0x04
    data[INDEX_START + 70] ^= 0x04
    kinds = {(p.position, p.kind) for p in verify_object(bytes(data))}
    assert {(0, "ChecksumError"), (INDEX_START, "ChecksumError")} <= kinds


def test_verify_stops_at_a_damaged_footer():
    data = bytearray(GOLDEN_V1)
    data[-8] ^= 0xFF
    data[50] ^= 0xFF  # not reported: without a footer nothing else can be located
    problems = verify_object(bytes(data))
    assert [(p.position, p.kind) for p in problems] == [(len(data) - 8, "BadMagicError")]
    assert "bad magic" in problems[0].message


# --- junk: only our errors, positions inside the object -----------------------------------------

def only_format_errors(data: bytes) -> None:
    """The read path either succeeds or raises a FormatError placed inside the object."""
    try:
        read_all(data)
    except errors.FormatError as exc:
        assert isinstance(exc, errors.CorruptionError) and exc.exit_code == 3
        assert 0 <= exc.offset < max(len(data), 1), (exc, exc.offset, len(data))
    problems = verify_object(data)
    for p in problems:
        assert 0 <= p.position < max(len(data), 1), (p, len(data))
    return problems


@FAST
@given(st.binary(max_size=400))
def test_random_bytes(data):
    assert only_format_errors(data)


@FAST
@given(st.binary(max_size=300), st.integers(0, 400), st.integers(0, 400), st.integers(0, 3))
def test_random_bytes_behind_a_valid_footer(data, start, length, version):
    foot = footer_bytes(min(start, len(data)), (length // 36) * 36, version)
    only_format_errors(data + foot)


@SLOW
@given(stream_sets(max_streams=3, max_batches=4), st.integers(1, 200), st.sampled_from([0, 1]), st.data())
def test_overwritten_ranges(streams, block_size, version, data):
    raw_obj = bytearray(build_object(streams, block_size=block_size, version=version).data)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw_obj) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=12))
        raw_obj[at:at + len(junk)] = junk
    problems = only_format_errors(bytes(raw_obj))
    still_v1 = raw_obj[-48 + 12:-48 + 16] == b"\0\0\0\1"  # junk may turn it into a clean AutoMQ footer
    if version == 1 and still_v1 and bytes(raw_obj) != build_object(streams, block_size=block_size).data:
        assert problems


def test_every_truncation():
    for data in (GOLDEN_V1, GOLDEN_V0):
        for n in range(len(data)):
            cut = data[:n]
            with pytest.raises(errors.FormatError):
                parse_tail(cut, n)
            problems = only_format_errors(cut)
            assert problems


def test_every_single_bit_flip_v1_is_found():
    # Every bit of a v1 object is covered: data and index by their crcs, the footer by its checks.
    for bit in range(len(GOLDEN_V1) * 8):
        damaged = bytearray(GOLDEN_V1)
        damaged[bit // 8] ^= 0x80 >> (bit % 8)
        damaged = bytes(damaged)
        at = bit // 8
        if (at, bit % 8) == (FOOTER_START + 15, 7):
            # version 1 -> 0: a legal AutoMQ footer, so the read path cannot tell; verify can.
            assert read_all(damaged) == dict(GOLDEN_STREAMS)
            assert [(p.position, p.kind) for p in verify_object(damaged)] == [(FOOTER_START + 12, "version")]
            continue
        with pytest.raises(errors.FormatError):
            read_all(damaged)
        problems = only_format_errors(damaged)
        assert problems, bit
        if at < INDEX_START:
            assert Problem(0, f"object data [0, {INDEX_START}): crc mismatch, stored 0x"
                           f"{crc32c_pkg.crc32c(GOLDEN_DATA):08X}, computed 0x"
                           f"{crc32c_pkg.crc32c(damaged[:INDEX_START]):08X}", "ChecksumError") in problems, bit
        elif at < FOOTER_START:
            assert any(p.position == INDEX_START and p.kind == "ChecksumError" and "index" in p.message
                       for p in problems), bit


def test_v0_payload_flips_verify_clean_without_checksums():
    # AutoMQ objects carry no checksums: a flipped payload byte is not detectable, only structure is.
    payload_positions = [10 + 33, 10 + 33 + 1, 78 + 10 + 33 + 3, 128 + 10 + 33 + 29]
    for at in payload_positions:
        damaged = bytearray(GOLDEN_V0)
        damaged[at] ^= 0xFF
        assert verify_object(bytes(damaged)) == []
        assert read_all(bytes(damaged)) != dict(GOLDEN_STREAMS)
    # Structure damage is still found in v0.
    damaged = bytearray(GOLDEN_V0)
    damaged[INDEX_START + 36 + 20] = 0x7F  # stream 3's second entry: recordCount
    assert [p.kind for p in verify_object(bytes(damaged))] == ["BoundsError"]
