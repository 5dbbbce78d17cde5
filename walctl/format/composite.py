"""AutoMQ composite objects, read only (docs/FORMATS.md 3).

AutoMQ's CompositeObject / CompositeObjectWriter (s3stream, branch 1.4): an object that holds no
data, only links to member objects, for one stream's contiguous range:

    0      1        5                                    indexStart             size
    | 0x52 | count  | count x (objectId 8, blockStartIndex 4, bucketId 2) | index N x 36 | footer 48 |

The index entries are the members' own (their blockPosition is a position in the member);
entry i belongs to the member with the largest blockStartIndex <= i. The footer is the usual
48 bytes with zeros in [12, 40) and magic 0x88E241B785F4CFF8. Members live under
ObjectUtils.genKey(0, objectId): the same key scheme, in the writer's namespace.

Errors carry ``offset`` = the byte position in the object.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from walctl.format import checks
from walctl.format.footer import FOOTER_SIZE, FOOTER_STRUCT
from walctl.format.index_entry import INDEX_ENTRY_SIZE, IndexEntry

COMPOSITE_FOOTER_MAGIC = 0x88E241B785F4CFF8  # AutoMQ CompositeObject.FOOTER_MAGIC
OBJECTS_BLOCK_MAGIC = 0x52  # AutoMQ CompositeObject.OBJECTS_BLOCK_MAGIC
OBJECTS_BLOCK_HEADER_STRUCT = struct.Struct(">Bi")  # magic, objects count
OBJECTS_BLOCK_HEADER_SIZE = OBJECTS_BLOCK_HEADER_STRUCT.size  # 5
LINKED_OBJECT_STRUCT = struct.Struct(">qih")  # objectId, blockStartIndex, bucketId
LINKED_OBJECT_SIZE = LINKED_OBJECT_STRUCT.size  # 14


def is_composite(tail) -> bool:
    """Whether ``tail`` (an object's last bytes) ends with AutoMQ's composite footer magic."""
    return len(tail) >= FOOTER_SIZE and struct.unpack_from(">Q", tail, len(tail) - 8)[0] == COMPOSITE_FOOTER_MAGIC


@dataclass(frozen=True)
class LinkedObject:
    """One member of a composite object: its index entries are [block_start_index, block_end_index)."""

    object_id: int
    block_start_index: int
    block_end_index: int
    bucket_id: int


@dataclass(frozen=True)
class CompositeObject:
    """A decoded AutoMQ composite object: its members and the index entries that point into them."""

    size: int
    index_start_position: int
    index_block_length: int
    members: list[LinkedObject]
    entries: list[IndexEntry]

    def member_of(self, entry_index: int) -> LinkedObject:
        starts = [m.block_start_index for m in self.members]
        return self.members[bisect.bisect_right(starts, entry_index) - 1]

    def placed_entries(self) -> list[tuple[LinkedObject, IndexEntry]]:
        return [(self.member_of(i), e) for i, e in enumerate(self.entries)]


def decode_composite(buf, object_size: int) -> CompositeObject:
    """Decode a whole composite object (``buf`` holds all ``object_size`` bytes: they are small).

    Raises TruncatedError, BadMagicError (footer or objects block), BoundsError (layout, member
    order, entries not of one stream or not contiguous, as CompositeObjectWriter requires).
    """
    what = "composite object footer"
    checks.need(buf, 0, object_size, "composite object")
    fpos = object_size - FOOTER_SIZE
    # within the object: a longer buffer must not lend an object under 48 bytes a footer
    checks.need(memoryview(buf)[:object_size], max(fpos, 0), FOOTER_SIZE, what)
    start, length, _, _, _, _, magic = FOOTER_STRUCT.unpack_from(buf, fpos)
    checks.magic(magic, COMPOSITE_FOOTER_MAGIC, fpos + 40, what, width=16)
    checks.bound(start >= OBJECTS_BLOCK_HEADER_SIZE, fpos, f"{what} indexStartPosition", start,
                 f">= {OBJECTS_BLOCK_HEADER_SIZE}: an objects block comes first")
    checks.bound(length >= 0 and length % INDEX_ENTRY_SIZE == 0, fpos + 8, f"{what} indexBlockLength", length,
                 f">= 0 and a multiple of {INDEX_ENTRY_SIZE}")
    checks.bound(start + length + FOOTER_SIZE == object_size, fpos, f"{what} indexStartPosition + "
                 f"indexBlockLength + {FOOTER_SIZE}", start + length + FOOTER_SIZE, f"== the object size {object_size}")
    block_magic, count = OBJECTS_BLOCK_HEADER_STRUCT.unpack_from(buf, 0)
    checks.magic(block_magic, OBJECTS_BLOCK_MAGIC, 0, "composite objects block", width=2)
    checks.bound(count >= 1 and OBJECTS_BLOCK_HEADER_SIZE + count * LINKED_OBJECT_SIZE == start, 1,
                 "composite objects block count", count,
                 f"({start} - {OBJECTS_BLOCK_HEADER_SIZE}) / {LINKED_OBJECT_SIZE}: the block ends where the index starts")
    n = length // INDEX_ENTRY_SIZE
    raw = [LINKED_OBJECT_STRUCT.unpack_from(buf, OBJECTS_BLOCK_HEADER_SIZE + i * LINKED_OBJECT_SIZE)
           for i in range(count)]
    members = []
    for i, (oid, first, bucket) in enumerate(raw):
        pos = OBJECTS_BLOCK_HEADER_SIZE + i * LINKED_OBJECT_SIZE
        end = raw[i + 1][1] if i + 1 < count else n
        checks.bound(oid >= 0, pos, "composite member objectId", oid, ">= 0")
        checks.bound((first == 0) if i == 0 else first > raw[i - 1][1], pos + 8, "composite member blockStartIndex",
                     first, "0 for the first member, then strictly ascending")
        checks.bound(first < end <= n, pos + 8, "composite member blockStartIndex", first,
                     f"< the next member's and < {n} index entries")
        members.append(LinkedObject(oid, first, end, bucket))
    entries = []
    for i in range(n):
        pos = start + i * INDEX_ENTRY_SIZE
        with checks.relocated(start):
            entry = IndexEntry.decode(memoryview(buf)[start:start + length], i * INDEX_ENTRY_SIZE)
        if entries:
            prev = entries[-1]
            checks.bound(entry.stream_id == prev.stream_id and entry.start_offset == prev.end_offset, pos,
                         "composite index entry", f"stream {entry.stream_id} offset {entry.start_offset}",
                         f"stream {prev.stream_id} offset {prev.end_offset}: one stream, contiguous")
        entries.append(entry)
    return CompositeObject(object_size, start, length, members, entries)
