"""What object refusals and verify findings say (issue 32, mutation survivors of format/object.py).

verify_report's problems are printed by ``inspect-object --deep`` and ``check --deep`` (the message,
the block and stream offsets it names, the data crc's explanation); build_object's refusals reach
upload's and compaction's errors. Each is pinned here with its field, value and position, and the
limits a DataBlock and an index entry can hold are checked at their boundary (with stand-in batches:
a real one of 2 GiB is not needed to see where a block is cut).
"""

from __future__ import annotations

from typing import NamedTuple

import crc32c as crc32c_pkg
import pytest

from walctl import errors
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch as B
from walctl.format.object import IndexEntry, ObjectBuilder, build_object

from tests.format.test_format_object import (  # the golden object and the independent encoders
    GOLDEN_DATA,
    GOLDEN_V0,
    GOLDEN_V1,
    A,
    B2,
    C,
    D,
    assemble,
    block_bytes,
    block_header_bytes,
    payloads,
)

INT32_MAX = (1 << 31) - 1
INT64_LIMIT = 1 << 63
FOOTER_START = 201 + 3 * 36
# Stream 3's two golden blocks ([A, B2] at 0, [C] at 78) under one index entry, as after compaction.
TWO_BLOCKS_V0 = assemble(GOLDEN_DATA, [(3, 10, 7, 3, 0, 128), (7, 0, 5, 1, 128, 73)], 0)
A_B2 = block_bytes([A, B2])[10:]


# --- the blocks of an entry: each refusal's message, field, value and position ----------------------

@pytest.mark.parametrize("data, entry, field, found, position, message", [
    (block_header_bytes(2, 69) + A_B2 + b"\0", (3, 10, 3, 2, 0, 78), "DataBlock dataLength", 69, 6,
     "DataBlock dataLength = 69 out of bounds (<= 68: the block must end inside its index entry's range)"),
    (block_bytes([A]) + block_header_bytes(1, 33) + A_B2[35:], (3, 10, 3, 2, 0, 70), "DataBlock dataLength", 33, 51,
     "DataBlock dataLength = 33 out of bounds (<= 15: the block must end inside its index entry's range)"),
    (block_header_bytes(3, 68) + A_B2, (3, 10, 3, 2, 0, 78), "DataBlock recordCount", 3, 2,
     "DataBlock recordCount = 3 out of bounds (== 2, the batches decoded in the block)"),
    (block_bytes([A, B(4, 1, 12, 1, b"")]), (3, 10, 3, 2, 0, 78), "StreamRecordBatch streamId", 4, 46,
     "StreamRecordBatch streamId = 4 out of bounds (== 3, the stream of its index entry)"),
    (block_bytes([A, B2]), (3, 9, 4, 2, 0, 78), "StreamRecordBatch baseOffset", 10, 27,
     "StreamRecordBatch baseOffset = 10 out of bounds (== 9, the index entry's startOffset)"),
    (block_bytes([A, B(3, 1, 13, 1, b"")]), (3, 10, 4, 2, 0, 78), "StreamRecordBatch baseOffset", 13, 62,
     "StreamRecordBatch baseOffset = 13 out of bounds (== 12, the previous batch's end: offsets contiguous)"),
    # the first batch of a block after the first: contiguous with the previous block, not the entry's start
    (block_bytes([A]) + block_bytes([B(3, 1, 13, 1, b"")]), (3, 10, 4, 2, 0, 88), "StreamRecordBatch baseOffset",
     13, 45 + 10 + 17,
     "StreamRecordBatch baseOffset = 13 out of bounds (== 12, the previous batch's end: offsets contiguous)"),
    (block_bytes([A, B2]), (3, 10, 4, 2, 0, 78), "end offset of the entry's last batch", 13, 45 + 17,
     "end offset of the entry's last batch = 13 out of bounds (== 14, the index entry's end offset)"),
    (block_bytes([A, B2]), (3, 10, 3, 3, 0, 78), "batches in the blocks of stream 3", 2, 0,
     "batches in the blocks of stream 3 = 2 out of bounds (== 3, the index entry's recordCount)"),
    (block_bytes([A]) + block_bytes([B2]), (3, 10, 3, 1, 0, 88), "batches in the blocks of stream 3", 2, 0,
     "batches in the blocks of stream 3 = 2 out of bounds (== 1, the index entry's recordCount)"),
], ids=["length-past-range", "second-block-past-range", "block-count", "other-stream", "first-base",
        "next-base", "next-block-base", "last-end", "entry-count", "entry-count-2-blocks"])
def test_block_refusals_name_the_field_its_value_and_the_rule(data, entry, field, found, position, message):
    for base in (0, 500):  # the whole object, or a buffer holding just the entry placed at 500
        e = IndexEntry(*entry[:4], base, entry[5])
        with pytest.raises(errors.BoundsError) as info:
            list(obj.iter_blocks(data, e, base_position=base))
        exc = info.value
        assert (exc.what, exc.field, exc.found, exc.offset) == (message, field, found, base + position)
        with pytest.raises(errors.BoundsError) as info:
            list(obj.iter_placed(data, e, base_position=base))
        assert (info.value.what, info.value.offset) == (message, base + position)


def test_a_short_buffer_names_the_entry_s_blocks():
    with pytest.raises(errors.TruncatedError) as info:
        list(obj.iter_blocks(block_bytes([A, B2])[:-1], IndexEntry(3, 10, 3, 2, 0, 78)))
    assert info.value.what == "blocks of stream 3 at 0 truncated: need 78 bytes, found 77"
    with pytest.raises(errors.TruncatedError) as info:
        list(obj.iter_blocks(block_bytes([A, B2])[:-1], IndexEntry(3, 10, 3, 2, 40, 78), base_position=40))
    assert info.value.what == "blocks of stream 3 at 40 truncated: need 78 bytes, found 77"
    assert info.value.offset == 40


def test_iter_blocks_copies_payloads():
    batches = list(obj.iter_blocks(TWO_BLOCKS_V0, IndexEntry(3, 10, 7, 3, 0, 128)))
    assert batches == [A, B2, C] and all(type(b.payload) is bytes for b in batches)


def test_an_entry_of_no_bytes_is_refused_for_its_end_offset():
    with pytest.raises(errors.BoundsError) as info:
        list(obj.iter_blocks(GOLDEN_V1, IndexEntry(3, 10, 3, 2, 40, 0)))
    assert (info.value.field, info.value.found, info.value.offset) == ("end offset of the entry's last batch", 10, 57)


def test_a_buffer_that_starts_after_the_entry_is_a_caller_error():
    with pytest.raises(ValueError) as info:
        list(obj.iter_blocks(GOLDEN_V1[79:], IndexEntry(3, 10, 3, 2, 78, 50), base_position=79))
    assert str(info.value) == "buffer starts at object position 79, after the entry's block at 78"
    # exactly at the entry's start is fine
    assert list(obj.iter_blocks(GOLDEN_V1[78:128], IndexEntry(3, 13, 4, 1, 78, 50), base_position=78)) == [C]


def test_iter_placed_gives_object_positions_of_blocks_and_batches():
    entry = IndexEntry(3, 10, 7, 3, 0, 128)
    want = [(0, 10, A), (0, 45, B2), (78, 88, C)]
    assert [tuple(p) for p in obj.iter_placed(TWO_BLOCKS_V0, entry)] == want
    moved = IndexEntry(3, 10, 7, 3, 1000, 128)
    assert [tuple(p) for p in obj.iter_placed(TWO_BLOCKS_V0[:128], moved, base_position=1000)] == \
        [(1000 + a, 1000 + b, batch) for a, b, batch in want]
    # copy=False: payloads are views of the buffer, equal to the copies
    views = [p.batch for p in obj.iter_placed(TWO_BLOCKS_V0, entry, copy=False)]
    assert views == [A, B2, C] and isinstance(views[0].payload, memoryview)
    assert all(type(p.batch.payload) is bytes for p in obj.iter_placed(TWO_BLOCKS_V0, entry))  # copies by default


# --- verify_report: what a problem says and where it is placed --------------------------------------

def test_a_clean_report_counts_what_it_checked():
    assert obj.verify_report(GOLDEN_V1) == obj.VerifyReport([], 3, 3, 4, True)
    assert obj.verify_report(GOLDEN_V0) == obj.VerifyReport([], 3, 3, 4, False)
    assert obj.verify_report(TWO_BLOCKS_V0) == obj.VerifyReport([], 2, 3, 4, False)
    assert obj.verify_report(GOLDEN_V1).healthy and obj.verify_object(GOLDEN_V1) == []


def located(p: obj.Problem) -> tuple:
    return (p.position, p.kind, p.block_position, p.block_end, p.stream_id, p.start_offset, p.end_offset)


def test_a_problem_names_its_block_and_the_data_crc_is_explained_by_it():
    data = bytearray(GOLDEN_V1)
    data[78 + 10 + 17 + 7] ^= 1  # stream 3's second block: C's baseOffset 13 -> 12
    report = obj.verify_report(bytes(data))
    crc, bounds = report.problems
    assert located(crc) == (0, "ChecksumError", None, None, None, None, None)
    assert crc.explanation == "explained by the damaged block at [78, 128)"
    assert located(bounds) == (105, "BoundsError", 78, 128, 3, 13, 17)
    assert bounds.message == "StreamRecordBatch baseOffset = 12 out of bounds (== 13, the index entry's startOffset)"
    assert bounds.explanation is None
    assert (report.entries, report.blocks, report.batches, report.checksummed) == (3, 2, 3, True)


def test_the_data_crc_explanation_lists_every_damaged_block():
    data = bytearray(GOLDEN_V1)
    data[0] = 0x5B  # stream 3's first block: bad magic
    data[128 + 10 + 1 + 7] ^= 1  # stream 7's batch: stream id 6
    problems = obj.verify_report(bytes(data)).problems
    assert [located(p) for p in problems] == [
        (0, "ChecksumError", None, None, None, None, None),
        (0, "BadMagicError", 0, 78, 3, 10, 13),
        (139, "BoundsError", 128, 201, 7, 0, 5),
    ]
    assert problems[0].explanation == "explained by the damaged blocks at [0, 78), [128, 201)"
    assert problems[1].message == "DataBlock header: bad magic 0x5B, expected 0x5A"


def test_damage_inside_a_payload_is_explained_as_such():
    data = bytearray(GOLDEN_V1)
    data[128 + 10 + 33 + 3] ^= 1
    (p,) = obj.verify_report(bytes(data)).problems
    assert (p.position, p.kind) == (0, "ChecksumError")
    assert p.message.startswith("object data [0, 201): crc mismatch")
    assert p.explanation == (
        "every block checks out against its index entry and its batches, so the changed bytes lie inside a "
        "batch payload, which carries no checksum of its own: no check can name the block")


def test_the_index_crc_is_neither_located_nor_explained():
    data = bytearray(GOLDEN_V1)
    data[FOOTER_START + 16] ^= 1  # the footer's indexCrc: the index itself is intact
    problems = obj.verify_report(bytes(data)).problems
    assert [located(p) for p in problems] == [(201, "ChecksumError", None, None, None, None, None)]
    assert problems[0].explanation is None


@pytest.mark.parametrize("at, block", [
    (0 + 10 + 1 + 7, (0, 78)),     # first block of the entry
    (45 + 1 + 7, (0, 78)),         # its second batch
    (78 + 10 + 1 + 7, (78, 128)),  # second block of the entry
    (78, (78, 128)),               # second block's header unreadable: the rest of the range
    (0, (0, 128)),                 # first block's header unreadable: the whole range
])
def test_a_problem_in_an_entry_of_several_blocks_names_the_block_holding_it(at, block):
    data = bytearray(TWO_BLOCKS_V0)
    data[at] ^= 0x01 if at not in (0, 78) else 0x5A ^ 0x5B
    problems = obj.verify_report(bytes(data)).problems
    assert len(problems) == 1
    assert (problems[0].block_position, problems[0].block_end) == block
    assert (problems[0].stream_id, problems[0].start_offset, problems[0].end_offset) == (3, 10, 17)


def test_the_block_named_is_found_from_the_entry_s_own_start():
    # stream 7's entry holds two blocks and starts at 78, after stream 3's
    e7 = B(7, 0, 5, 1, b"")
    data = block_bytes([A, B2]) + block_bytes([D]) + block_bytes([e7])
    entries = [(3, 10, 3, 2, 0, 78), (7, 0, 6, 2, 78, 116)]
    damaged = bytearray(assemble(data, entries, 0))
    damaged[151 + 10 + 8] ^= 1  # the second block's batch: stream id 6
    (p,) = obj.verify_report(bytes(damaged)).problems
    assert (p.position, p.block_position, p.block_end, p.stream_id, p.start_offset, p.end_offset) == \
        (162, 151, 194, 7, 0, 6)
    assert obj._block_at(bytes(damaged), IndexEntry(*entries[1]), 100) == (78, 151)


def test_block_at_walks_the_headers_of_the_entry():
    entry = IndexEntry(3, 10, 7, 3, 0, 128)
    for position, block in ((0, (0, 78)), (77, (0, 78)), (78, (78, 128)), (127, (78, 128)), (128, (0, 128))):
        assert obj._block_at(TWO_BLOCKS_V0, entry, position) == block
    # a header whose dataLength runs past the entry: the block ends with the entry's range
    data = bytearray(TWO_BLOCKS_V0)
    data[78 + 6:78 + 10] = (1000).to_bytes(4, "big")
    assert obj._block_at(bytes(data), entry, 100) == (78, 128)


def test_version_0_footer_with_bytes_where_automq_writes_zeros():
    for at in (16, 20, 39):
        data = bytearray(GOLDEN_V0)
        data[FOOTER_START + at] = 1
        (p,) = obj.verify_report(bytes(data)).problems
        assert (p.position, p.kind, p.block_position) == (FOOTER_START + 12, "version", None)
        assert p.message == ("object footer version 0 (AutoMQ, no checksums) with non-zero bytes in [16, 40) where "
                             "AutoMQ writes zeros: a damaged walctl version 1 footer?")
    for at in (15, 40):  # the version's low byte and the magic are not the reserved bytes
        data = bytearray(GOLDEN_V0)
        data[FOOTER_START + at] ^= 1
        assert all(p.kind != "version" for p in obj.verify_report(bytes(data)).problems)


def test_gap_and_uncovered_messages():
    junk = b"\xee" * 7
    region = junk + block_bytes([A, B2]) + junk + block_bytes([D]) + b"\x01"
    problems = obj.verify_report(assemble(region, [(3, 10, 3, 2, 7, 78), (7, 0, 5, 1, 92, 73)])).problems
    assert [(p.position, p.kind, p.message, p.block_position) for p in problems] == [
        (0, "uncovered", "bytes [0, 7) are not covered by any index entry", None),
        (85, "uncovered", "bytes [85, 92) are not covered by any index entry", None),
        (165, "uncovered", "bytes [165, 166) are not covered by any index entry", None),
    ]
    gap = block_bytes([A, B2]) + block_bytes([B(3, 0, 20, 1, b"")])
    (p,) = obj.verify_report(assemble(gap, [(3, 10, 3, 2, 0, 78), (3, 20, 1, 1, 78, 43)])).problems
    assert (p.position, p.kind) == (78, "gap")
    assert p.message == "stream 3: offsets [13, 20) missing between two index entries"
    assert (p.block_position, p.block_end, p.stream_id, p.start_offset, p.end_offset) == (78, 121, 3, 20, 21)
    # contiguous entries of one stream, and entries of different streams, are no gap
    assert obj.verify_report(TWO_BLOCKS_V0).problems == []
    split = assemble(GOLDEN_DATA, [(3, 10, 3, 2, 0, 78), (3, 13, 4, 1, 78, 50), (7, 0, 5, 1, 128, 73)], 0)
    assert obj.verify_report(split).problems == []


def test_a_damaged_footer_is_the_only_problem():
    data = bytearray(GOLDEN_V1)
    data[-1] ^= 1
    report = obj.verify_report(bytes(data))
    assert report == obj.VerifyReport([obj.Problem(len(data) - 8, report.problems[0].message, "BadMagicError")])
    assert (report.entries, report.blocks, report.batches, report.checksummed) == (0, 0, 0, False)
    # shorter than a footer: truncated at 0
    (p,) = obj.verify_report(GOLDEN_V1[-47:]).problems
    assert (p.position, p.kind) == (0, "TruncatedError")


def test_problem_of_an_error_without_a_position_is_at_0():
    p = obj.Problem.of(errors.BoundsError("x = 1 out of bounds (y)"))
    assert (p.position, p.message, p.kind) == (0, "x = 1 out of bounds (y)", "BoundsError")
    p = obj.Problem.of(errors.ZeroedError("z is all zeros", offset=9))
    assert (p.position, p.message, p.kind) == (9, "z is all zeros", "ZeroedError")


# --- reading the tail ---------------------------------------------------------------------------------

def test_tail_length_hint():
    assert obj.tail_length_hint(0) == 48
    assert obj.tail_length_hint(-5) == 48
    assert obj.tail_length_hint(2) == 48 + 72
    assert obj.tail_length_hint(2, object_size=119) == 119
    assert obj.tail_length_hint(2, object_size=120) == 120
    assert obj.tail_length_hint(2, object_size=121) == 120


def test_parse_tail_longer_than_the_object():
    with pytest.raises(ValueError) as info:
        obj.parse_tail(GOLDEN_V1, 10)
    assert str(info.value) == f"tail of {len(GOLDEN_V1)} bytes is longer than the object (10 bytes)"
    # exactly the object is fine, and the index starting exactly at the tail's start is read
    size = len(GOLDEN_V1)
    assert obj.parse_tail(GOLDEN_V1, size)[1] is not None
    assert obj.parse_tail(GOLDEN_V1[201:], size)[1] is not None
    assert obj.parse_tail(GOLDEN_V1[202:], size)[1] is None


# --- building: refusals and the limits of a block -----------------------------------------------------

@pytest.mark.parametrize("streams, kwargs, message", [
    ([(2, payloads([40], 2)), (1, payloads([40], 1))], {}, "streams must be strictly ascending: 1 after 2"),
    ([(1, payloads([40], 1)), (1, payloads([40], 1, 1))], {}, "streams must be strictly ascending: 1 after 1"),
    ([(1, [])], {}, "stream 1 has no batches"),
    ([], {}, "an object needs at least one stream"),
    ([(1, payloads([40], 2))], {}, "batch of stream 2 listed under stream 1"),
    ([(1, [B(1, 0, 0, 2, b""), B(1, 0, 3, 1, b"")])], {}, "stream 1: batch at offset 3, expected 2 (a gap or overlap)"),
    ([(1, [B(1, 0, 0, 2, b""), B(1, 0, 2, 1, b""), B(1, 0, 2, 1, b"")])], {},
     "stream 1: batch at offset 2, expected 3 (a gap or overlap)"),
    ([(-1, [B(-1, 0, 0, 1, b"")])], {}, "stream id -1 out of range [0, 2^63)"),
    ([(INT64_LIMIT, [B(0, 0, 0, 1, b"")])], {}, f"stream id {INT64_LIMIT} out of range [0, 2^63)"),
    ([("1", [B(1, 0, 0, 1, b"")])], {}, "stream id '1' out of range [0, 2^63)"),
    ([(1, payloads([40], 1))], {"block_size": 0}, "block size must be >= 1, got 0"),
    ([(1, payloads([40], 1))], {"version": 2}, "footer version 2 unknown, expected one of (0, 1)"),
], ids=["descending", "repeated", "empty-stream", "no-streams", "other-stream", "gap", "overlap",
        "negative-stream", "stream-2^63", "stream-not-int", "block-size-0", "version-2"])
def test_build_refusals_say_why(streams, kwargs, message):
    with pytest.raises(ValueError) as info:
        build_object(streams, **kwargs)
    assert str(info.value) == message


def test_build_accepts_the_extreme_stream_ids_and_a_block_size_of_1():
    top = INT64_LIMIT - 1
    built = build_object([(0, [B(0, 0, 0, 1, b"")]), (top, [B(top, 0, 5, 1, b"a")])], block_size=1)
    assert [e.stream_id for e in built.entries] == [0, top]
    assert built.ranges == {0: (0, 1, 43), top: (5, 6, 44)}
    assert built.size == len(built.data) == 43 + 44 + 2 * 36 + 48


class Fake(NamedTuple):
    """What iter_block_groups needs of a batch, with sizes no test could allocate."""

    base_offset: int
    count: int
    size: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.count


def groups(batches, block_size=1 << 40):
    return [[(b.base_offset, b.count, b.size) for b in g] for g in obj.iter_block_groups(batches, block_size)]


def test_a_block_holds_at_most_what_an_index_entry_can_say():
    room = INT32_MAX - 10  # a DataBlock's payload: its size, with its 10-byte header, is a Java int
    # the largest batch one block can hold, alone; a byte more is refused
    assert groups([Fake(0, INT32_MAX, room)]) == [[(0, INT32_MAX, room)]]
    for bad in (Fake(7, INT32_MAX + 1, 33), Fake(7, 1, room + 1)):
        with pytest.raises(ValueError) as info:
            groups([bad])
        assert str(info.value) == "batch at offset 7 too large for one DataBlock index entry"
    # payload: two batches filling the block exactly stay together; a byte more and the second starts a block
    assert groups([Fake(0, 1, 100), Fake(1, 1, room - 100)]) == [[(0, 1, 100), (1, 1, room - 100)]]
    assert groups([Fake(0, 1, 100), Fake(1, 1, room - 99)]) == [[(0, 1, 100)], [(1, 1, room - 99)]]
    # offset span: endOffsetDelta is a Java int too
    assert groups([Fake(0, 1, 40), Fake(1, INT32_MAX - 1, 40)]) == [[(0, 1, 40), (1, INT32_MAX - 1, 40)]]
    assert groups([Fake(0, 1, 40), Fake(1, INT32_MAX, 40)]) == [[(0, 1, 40)], [(1, INT32_MAX, 40)]]
    assert groups([Fake(5, 2, 40), Fake(7, INT32_MAX - 1, 40)]) == [[(5, 2, 40)], [(7, INT32_MAX - 1, 40)]]
    # after a cut, the next block counts from its own first batch
    three = [Fake(0, 1, 40), Fake(1, INT32_MAX, 40), Fake(1 + INT32_MAX, 5, 40)]
    assert groups(three) == [[(0, 1, 40)], [(1, INT32_MAX, 40)], [(1 + INT32_MAX, 5, 40)]]
    three = [Fake(0, 1, 40), Fake(1, 1, room - 39), Fake(2, 1, 39)]
    assert groups(three) == [[(0, 1, 40)], [(1, 1, room - 39), (2, 1, 39)]]
    # the block_size threshold: closes once the payload reaches it
    assert groups([Fake(0, 1, 40), Fake(1, 1, 60), Fake(2, 1, 1)], 100) == [[(0, 1, 40), (1, 1, 60)], [(2, 1, 1)]]
    assert groups([Fake(0, 1, 40), Fake(1, 1, 59), Fake(2, 1, 1)], 100) == [[(0, 1, 40), (1, 1, 59), (2, 1, 1)]]
    assert groups([]) == []


class Many(list):
    """A list of index entries that says it has ``n`` (the count check reads only its length)."""

    def __init__(self, entries, n):
        super().__init__(entries)
        self.n = n

    def __len__(self):
        return self.n


def test_an_index_longer_than_a_java_int_is_refused():
    most = INT32_MAX // 36  # 59652323 entries: 2147483628 bytes
    built = build_object([(1, [B(1, 0, 0, 1, b"")])])
    entries = Many(built.entries, most + 1)
    with pytest.raises(ValueError) as info:
        obj._finish([built.data[:43]], entries, dict(built.ranges), obj.VERSION_WALCTL)
    assert str(info.value) == "59652324 index entries do not fit a Java int indexBlockLength"
    again = obj._finish([built.data[:43]], Many(built.entries, most), dict(built.ranges), obj.VERSION_WALCTL)
    assert again.data == built.data
    b = ObjectBuilder()
    b.add_block(1, 0, 1, [B(1, 0, 0, 1, b"").encode()])
    real = b.entries
    b.entries = Many(real, most + 1)
    with pytest.raises(ValueError) as info:
        b.finish()
    assert str(info.value) == "59652324 index entries do not fit a Java int indexBlockLength"
    b.entries = Many(real, most)
    assert built.data.endswith(b.finish())


def test_object_builder_data_crc_runs_over_every_block():
    for laid_out in (False, True):
        b = ObjectBuilder()
        parts = []
        for sid, start, end, batches in ((3, 10, 13, [A, B2]), (3, 13, 17, [C]), (7, 0, 5, [D])):
            data = block_bytes(batches)
            if laid_out:
                b.add_laid_out(sid, start, end, len(batches), len(data), crc32c_pkg.crc32c(data))
            else:
                assert b.add_block(sid, start, end, [x.encode() for x in batches]) == data
            parts.append(data)
        parts.append(b.finish())
        assert b"".join(parts) == GOLDEN_V1
        assert b.footer.data_crc == crc32c_pkg.crc32c(GOLDEN_DATA)


def test_a_block_closes_at_the_threshold_again_after_a_close():
    # 40 + 60 reaches 100 and closes; the next block counts from 0: 50 + 49 stays open, + 33 closes it
    built = build_object([(1, payloads([40, 60, 50, 49, 33]))], block_size=100)
    assert [e.record_count for e in built.entries] == [2, 3]
    assert groups([Fake(0, 1, 40), Fake(1, 1, 60), Fake(2, 1, 50), Fake(3, 1, 49), Fake(4, 1, 1)], 100) == \
        [[(0, 1, 40), (1, 1, 60)], [(2, 1, 50), (3, 1, 49), (4, 1, 1)]]
    # and after a cut at the offset-span limit
    cut = [Fake(0, 10, 40), Fake(10, INT32_MAX - 5, 50), Fake(INT32_MAX + 5, 1, 49), Fake(INT32_MAX + 6, 1, 1),
           Fake(INT32_MAX + 7, 1, 1)]
    assert [len(g) for g in groups(cut, 100)] == [1, 3, 1]


def test_object_builder_size_and_ranges_as_it_goes():
    b = ObjectBuilder(version=obj.VERSION_AUTOMQ)
    assert (b.size, b.position, b.footer, b.entries, b.ranges) == (0, 0, None, [], {})
    first = b.add_block(3, 10, 13, [A.encode(), B2.encode()])
    assert first == block_bytes([A, B2]) and b.size == 78
    b.add_laid_out(3, 13, 17, 1, 50, 0x1234)  # version 0: the crc is not kept
    assert b.ranges == {3: (10, 17, 128)} and b._data_crc == 0
    b.add_block(7, 0, 5, [D.encode()])
    assert b.ranges == {3: (10, 17, 128), 7: (0, 5, 73)}
    tail = b.finish()
    assert b.footer == obj.Footer(201, 108, 0) and b.size == len(GOLDEN_V0)
    assert block_bytes([A, B2]) + block_bytes([C]) + block_bytes([D]) + tail == GOLDEN_V0


def test_object_builder_refuses_a_block_that_starts_a_stream_below_0_or_at_2_63():
    one = [B(4, 0, 0, 1, b"x").encode()]
    with pytest.raises(ValueError) as info:
        ObjectBuilder().add_block(4, -1, 0, one)
    assert str(info.value) == "stream 4: block offsets [-1, 0) do not fit an index entry"
    ObjectBuilder().add_laid_out(4, INT64_LIMIT - 2, INT64_LIMIT - 1, 1, 43, 0)  # the last offset an entry holds
    ObjectBuilder().add_laid_out(4, 0, 1, 1, 43, 0)
