"""AutoMQ composite objects, decoded (format/composite.py; issue 32: it had no unit test, only the
store tests that read through one). The bytes are made here from CompositeObjectWriter's layout
(docs/FORMATS.md 3), with struct: objects block, the members' index entries, a footer with zeros
in [12, 40) and magic 0x88E241B785F4CFF8."""

from __future__ import annotations

import struct

import pytest

from walctl import errors
from walctl.format.composite import CompositeObject, LinkedObject, decode_composite, is_composite
from walctl.format.index_entry import IndexEntry
from tests.format.test_format_object import entry_bytes

MAGIC = 0x88E241B785F4CFF8
# stream 9: offsets [0, 5) in member 11 (two entries), [5, 6) in member 12
ENTRIES = [(9, 0, 2, 1, 0, 50), (9, 2, 3, 1, 50, 60), (9, 5, 1, 1, 0, 40)]
MEMBERS = [(11, 0), (12, 2)]


def composite(members=MEMBERS, entries=ENTRIES, *, start=None, length=None, magic=MAGIC, block_magic=0x52,
              count=None, bucket=7) -> bytes:
    """objects block: 0x52, count (i32), count x (objectId i64, blockStartIndex i32, bucketId i16)."""
    objects = struct.pack(">Bi", block_magic, len(members) if count is None else count)
    objects += b"".join(struct.pack(">qih", oid, first, bucket) for oid, first in members)
    index = b"".join(entry_bytes(*e) for e in entries)
    footer = struct.pack(">qi", len(objects) if start is None else start, len(index) if length is None else length)
    return objects + index + footer + bytes(28) + struct.pack(">Q", magic)


GOOD = composite()  # 5 + 28 + 108 + 48 = 189 bytes


def test_decode_a_composite_object():
    c = decode_composite(GOOD, len(GOOD))
    assert c == CompositeObject(189, 33, 108, [LinkedObject(11, 0, 2, 7), LinkedObject(12, 2, 3, 7)],
                                [IndexEntry(*e) for e in ENTRIES])
    assert [c.member_of(i).object_id for i in range(3)] == [11, 11, 12]
    assert [(m.object_id, e.start_offset) for m, e in c.placed_entries()] == [(11, 0), (11, 2), (12, 5)]
    # a longer buffer: the object is its first object_size bytes
    assert decode_composite(GOOD + b"more", len(GOOD)) == c
    # one member holding every entry, of one entry each
    one = composite([(11, 0)], ENTRIES[:1])
    assert decode_composite(one, len(one)).members == [LinkedObject(11, 0, 1, 7)]
    three = composite([(11, 0), (12, 1), (13, 2)])
    assert [(m.block_start_index, m.block_end_index) for m in decode_composite(three, len(three)).members] == \
        [(0, 1), (1, 2), (2, 3)]


def test_is_composite_reads_the_last_8_bytes():
    assert is_composite(GOOD) and is_composite(GOOD[-48:])
    assert not is_composite(GOOD[-47:])
    assert not is_composite(GOOD[:-8] + struct.pack(">Q", MAGIC - 1))  # a plain object's footer magic
    assert not is_composite(GOOD + b"\0")


@pytest.mark.parametrize("raw, error, field, found, position, message", [
    (composite(magic=MAGIC - 1), errors.BadMagicError, None, MAGIC - 1, 181,
     "composite object footer: bad magic 0x88E241B785F4CFF7, expected 0x88E241B785F4CFF8"),
    (composite(start=4), errors.BoundsError, "composite object footer indexStartPosition", 4, 141,
     "composite object footer indexStartPosition = 4 out of bounds (>= 5: an objects block comes first)"),
    (composite(length=35), errors.BoundsError, "composite object footer indexBlockLength", 35, 149,
     "composite object footer indexBlockLength = 35 out of bounds (>= 0 and a multiple of 36)"),
    (composite(length=-36), errors.BoundsError, "composite object footer indexBlockLength", -36, 149,
     "composite object footer indexBlockLength = -36 out of bounds (>= 0 and a multiple of 36)"),
    (composite(length=72), errors.BoundsError, "composite object footer indexStartPosition + indexBlockLength + 48",
     153, 141, "composite object footer indexStartPosition + indexBlockLength + 48 = 153 out of bounds (== the "
     "object size 189)"),
    (composite(block_magic=0x53), errors.BadMagicError, None, 0x53, 0,
     "composite objects block: bad magic 0x53, expected 0x52"),
    (composite(count=3), errors.BoundsError, "composite objects block count", 3, 1,
     "composite objects block count = 3 out of bounds ((33 - 5) / 14: the block ends where the index starts)"),
    (composite([], count=0, start=5), errors.BoundsError, "composite objects block count", 0, 1,
     "composite objects block count = 0 out of bounds ((5 - 5) / 14: the block ends where the index starts)"),
    (composite([(-1, 0), (12, 2)]), errors.BoundsError, "composite member objectId", -1, 5,
     "composite member objectId = -1 out of bounds (>= 0)"),
    (composite([(11, 1), (12, 2)]), errors.BoundsError, "composite member blockStartIndex", 1, 13,
     "composite member blockStartIndex = 1 out of bounds (0 for the first member, then strictly ascending)"),
    (composite([(11, 0), (12, 2), (13, 2)]), errors.BoundsError, "composite member blockStartIndex", 2, 5 + 14 + 8,
     "composite member blockStartIndex = 2 out of bounds (< the next member's and < 3 index entries)"),
    (composite([(11, 0), (12, 3)]), errors.BoundsError, "composite member blockStartIndex", 3, 27,
     "composite member blockStartIndex = 3 out of bounds (< the next member's and < 3 index entries)"),
    (composite([(11, 0)], []), errors.BoundsError, "composite member blockStartIndex", 0, 13,
     "composite member blockStartIndex = 0 out of bounds (< the next member's and < 0 index entries)"),
    (composite(entries=[ENTRIES[0], (8, 2, 3, 1, 50, 60), ENTRIES[2]]), errors.BoundsError, "composite index entry",
     "stream 8 offset 2", 33 + 36,
     "composite index entry = stream 8 offset 2 out of bounds (stream 9 offset 2: one stream, contiguous)"),
    (composite(entries=[ENTRIES[0], ENTRIES[1], (9, 6, 1, 1, 0, 40)]), errors.BoundsError, "composite index entry",
     "stream 9 offset 6", 33 + 72,
     "composite index entry = stream 9 offset 6 out of bounds (stream 9 offset 5: one stream, contiguous)"),
    (composite(entries=[ENTRIES[0], (9, 2, 3, 0, 50, 60), ENTRIES[2]]), errors.BoundsError, "index entry recordCount",
     0, 33 + 36 + 20, "index entry recordCount = 0 out of bounds (>= 1)"),
], ids=["footer-magic", "start-before-objects", "length-not-36n", "length-negative", "size", "objects-magic",
        "count-not-the-block", "count-0", "negative-object", "first-not-0", "not-ascending", "past-entries",
        "no-entries", "other-stream", "gap", "entry-field"])
def test_refusals(raw, error, field, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        decode_composite(raw, len(raw))
    exc = info.value
    assert type(exc) is error
    assert (exc.what, getattr(exc, "field", None), exc.found, exc.offset) == (message, field, found, position)


def test_a_buffer_shorter_than_the_object_or_a_footer_is_truncated():
    with pytest.raises(errors.TruncatedError) as info:
        decode_composite(GOOD[:-1], len(GOOD))
    assert (info.value.what, info.value.offset) == ("composite object truncated: need 189 bytes, found 188", 0)
    for size in (0, 5, 47):
        with pytest.raises(errors.TruncatedError) as info:  # not struct.error: no footer fits
            decode_composite(GOOD, size)
        assert (info.value.what, info.value.offset) == (
            f"composite object footer truncated: need 48 bytes, found {size}", 0)


def test_member_0_and_a_small_bad_magic():
    zero = composite([(0, 0), (12, 2)])
    assert [m.object_id for m in decode_composite(zero, len(zero)).members] == [0, 12]
    with pytest.raises(errors.BadMagicError) as info:
        decode_composite(composite(magic=1), len(GOOD))
    assert info.value.what == "composite object footer: bad magic 0x0000000000000001, expected 0x88E241B785F4CFF8"
