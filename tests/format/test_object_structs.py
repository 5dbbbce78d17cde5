"""An object's fixed structures (footer, index entry, IndexBlock, DataBlock header): what each refusal
says, where, and the limits each field accepts (issue 32, mutation survivors of format/footer.py,
index.py, index_entry.py and datablock.py).

The messages reach operators: ``check`` prints a footer's or an index's refusal as is, and
``inspect-object --deep`` every problem verify_report finds.
"""

from __future__ import annotations

import crc32c as crc32c_pkg
import pytest

from walctl import errors
from walctl.format import object as obj
from walctl.format.datablock import DataBlockHeader
from walctl.format.footer import Footer, check_data_crc
from walctl.format.index import _scan_index, decode_index, find_entries
from walctl.format.index_entry import IndexEntry
from tests.format.test_format_object import (  # the golden object and the independent encoders
    GOLDEN_ENTRIES,
    GOLDEN_V0,
    GOLDEN_V1,
    INT64_MAX,
    block_header_bytes,
    entry_bytes,
    footer_bytes,
)

# --- Footer -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("foot, object_size, error, field, found, position, message", [
    (footer_bytes(201, 108, version=2), None, errors.BoundsError, "object footer version", 2, 12,
     "object footer version = 2 out of bounds (0 (AutoMQ) or 1 (walctl))"),
    (footer_bytes(-1, 108), None, errors.BoundsError, "object footer indexStartPosition", -1, 0,
     "object footer indexStartPosition = -1 out of bounds (>= 0)"),
    (footer_bytes(201, 107), None, errors.BoundsError, "object footer indexBlockLength", 107, 8,
     "object footer indexBlockLength = 107 out of bounds (>= 0 and a multiple of 36)"),
    (footer_bytes(201, -36), None, errors.BoundsError, "object footer indexBlockLength", -36, 8,
     "object footer indexBlockLength = -36 out of bounds (>= 0 and a multiple of 36)"),
    (footer_bytes(201, 108, reserved=b"\0" * 15 + b"\1"), None, errors.BoundsError, "object footer reserved bytes",
     "00" * 15 + "01", 24, "object footer reserved bytes = " + "00" * 15 + "01" + " out of bounds (all zero)"),
    (footer_bytes(201, 108), 358, errors.BoundsError, "object footer indexStartPosition + indexBlockLength + 48",
     357, 0, "object footer indexStartPosition + indexBlockLength + 48 = 357 out of bounds (== the object size 358)"),
    (footer_bytes(201, 108, magic=1), None, errors.BadMagicError, None, 1, 40,
     "object footer: bad magic 0x0000000000000001, expected 0x88E241B785F4CFF7"),
    (bytes(48), None, errors.ZeroedError, None, None, 0, "object footer is all zeros (never written or torn)"),
    (bytes(47), None, errors.TruncatedError, None, 47, 0, "object footer truncated: need 48 bytes, found 47"),
], ids=["version", "negative-start", "length-not-36n", "negative-length", "reserved", "object-size", "magic",
        "zeroed", "truncated"])
def test_footer_refusals(foot, object_size, error, field, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        Footer.decode(b"\x88" * 5 + foot, 5, object_size=object_size)
    exc = info.value
    assert type(exc) is error
    assert (exc.what, getattr(exc, "field", None), exc.found, exc.offset) == (message, field, found, 5 + position)


def test_footer_limits():
    # the smallest values each field takes: an empty object (a footer and nothing else)
    assert Footer.decode(footer_bytes(0, 0), object_size=48) == Footer(0, 0, 1, 0, 0)
    assert Footer.decode(footer_bytes(0, 36, 0)) == Footer(0, 36, 0)
    # version 0: AutoMQ's [12, 40) is ignored, so non-zero reserved bytes are not refused there
    assert Footer.decode(footer_bytes(201, 108, 0, 7, 9, reserved=b"\1" * 16)) == Footer(201, 108, 0, 7, 9)
    # version 1 keeps its checksums
    assert Footer.decode(footer_bytes(201, 108, 1, 7, 9), object_size=357) == Footer(201, 108, 1, 7, 9)
    assert Footer.decode(footer_bytes(INT64_MAX - 200, 0)).index_start_position == INT64_MAX - 200
    assert Footer.decode(footer_bytes(0, 36 * 59652323)).entry_count == 59652323  # the longest IndexBlock


def test_footer_properties_and_encode():
    f = Footer(201, 108)
    assert (f.version, f.index_crc, f.data_crc) == (1, 0, 0)
    assert (f.checksummed, f.entry_count, f.object_size) == (True, 3, 357)
    assert (Footer(201, 108, 0).checksummed, Footer(0, 0).entry_count, Footer(5, 0).object_size) == (False, 0, 53)
    assert Footer.SIZE == 48
    assert Footer(201, 108, 1, 7, 9).encode() == footer_bytes(201, 108, 1, 7, 9)
    assert Footer(201, 108, 0).encode() == footer_bytes(201, 108, 0)
    for version in (2, -1):
        with pytest.raises(ValueError) as info:
            Footer(201, 108, version).encode()
        assert str(info.value) == f"footer version {version} unknown, expected one of (0, 1)"


def test_check_data_crc():
    footer = Footer(201, 108, 1, 0, crc32c_pkg.crc32c(GOLDEN_V1[:201]))
    check_data_crc(GOLDEN_V1, footer)
    check_data_crc(GOLDEN_V1[:201], footer)  # the data region is enough
    with pytest.raises(errors.ChecksumError) as info:
        check_data_crc(GOLDEN_V1, Footer(201, 108, 1, 0, 5))
    assert info.value.what == (f"object data [0, 201): crc mismatch, stored 0x00000005, computed "
                               f"0x{crc32c_pkg.crc32c(GOLDEN_V1[:201]):08X}")
    assert (info.value.offset, info.value.expected, info.value.found) == (0, crc32c_pkg.crc32c(GOLDEN_V1[:201]), 5)
    with pytest.raises(errors.TruncatedError) as info:
        check_data_crc(GOLDEN_V1[:200], footer)
    assert (info.value.what, info.value.offset) == ("object data region truncated: need 201 bytes, found 200", 0)
    check_data_crc(b"", Footer(201, 108, 0, 0, 5))  # version 0: nothing to check, nothing read


# --- Index entry and IndexBlock -----------------------------------------------------------------------

def index_error(entries, data_size=201, version=1, base_position=None):
    index = b"".join(entry_bytes(*e) for e in entries)
    footer = Footer(data_size, len(index), version, crc32c_pkg.crc32c(index) if version else 0)
    with pytest.raises(errors.FormatError) as info:
        decode_index(index, footer, base_position=base_position)
    return info.value


@pytest.mark.parametrize("entries, field, found, position, message", [
    ([(3, 10, 3, 2, 0, 78), (3, 13, 4, 1, 78, 124)], "index entry block end", 202, 36 + 24,
     "index entry block end = 202 out of bounds (<= indexStartPosition 201)"),
    ([(7, 0, 5, 1, 0, 78), (3, 13, 4, 1, 78, 50)], "index entry streamId", 3, 36,
     "index entry streamId = 3 out of bounds (>= the previous entry's 7: entries sorted by stream)"),
    ([(3, 13, 4, 1, 78, 50), (3, 10, 3, 2, 0, 78)], "index entry startOffset", 10, 36 + 8,
     "index entry startOffset = 10 out of bounds (>= the previous entry's end offset 17: sorted, no overlapping "
     "offset ranges)"),
    ([(3, 10, 3, 2, 0, 78), (7, 0, 5, 1, 77, 73)], "index entry blockPosition", 77, 36 + 24,
     "index entry blockPosition = 77 out of bounds (>= 78, the end of the blocks before it: blocks overlap)"),
    # blocks out of position order: the overlap is reported at the entry that comes later in the object
    ([(3, 10, 3, 2, 100, 78), (7, 0, 5, 1, 0, 101)], "index entry blockPosition", 100, 24,
     "index entry blockPosition = 100 out of bounds (>= 101, the end of the blocks before it: blocks overlap)"),
    ([(-1, 10, 3, 2, 0, 78)], "index entry streamId", -1, 0, "index entry streamId = -1 out of bounds (>= 0)"),
    ([(3, -1, 3, 2, 0, 78)], "index entry startOffset", -1, 8, "index entry startOffset = -1 out of bounds (>= 0)"),
    ([(3, 10, 0, 2, 0, 78)], "index entry endOffsetDelta", 0, 16,
     "index entry endOffsetDelta = 0 out of bounds (>= 1)"),
    ([(3, INT64_MAX - 2, 3, 2, 0, 78)], "index entry end offset", 1 << 63, 16,
     f"index entry end offset = {1 << 63} out of bounds (< 2^63)"),
    ([(3, 10, 3, 0, 0, 78)], "index entry recordCount", 0, 20, "index entry recordCount = 0 out of bounds (>= 1)"),
    ([(3, 10, 3, 2, -1, 78)], "index entry blockPosition", -1, 24,
     "index entry blockPosition = -1 out of bounds (>= 0)"),
    ([(3, 10, 3, 2, 0, 9)], "index entry blockSize", 9, 32,
     "index entry blockSize = 9 out of bounds (>= 10: one DataBlock header at least)"),
], ids=["past-index", "streams-unsorted", "offsets-unsorted", "blocks-overlap", "blocks-overlap-reordered",
        "negative-stream", "negative-start", "empty-range", "end-overflow", "no-records", "negative-position",
        "block-too-small"])
def test_index_refusals(entries, field, found, position, message):
    exc = index_error(entries)
    assert type(exc) is errors.BoundsError
    assert (exc.what, exc.field, exc.found, exc.offset) == (message, field, found, 201 + position)
    exc = index_error(entries, base_position=1000)  # the position of the buffer's first byte, given
    assert exc.offset == 1000 + position


def test_index_zeroed_truncated_and_crc():
    exc = index_error([(3, 10, 3, 2, 0, 78), (0, 0, 0, 0, 0, 0)])
    assert (type(exc), exc.what, exc.offset) == (errors.ZeroedError, "index entry is all zeros (never written or "
                                                 "torn)", 201 + 36)
    index = b"".join(entry_bytes(*e) for e in GOLDEN_ENTRIES)
    with pytest.raises(errors.TruncatedError) as info:
        decode_index(index[:100], Footer(201, 108, 1, 0))
    assert (info.value.what, info.value.offset) == ("object index block truncated: need 108 bytes, found 100", 201)
    with pytest.raises(errors.ChecksumError) as info:
        decode_index(index, Footer(201, 108, 1, 5))
    assert info.value.what == f"object index block: crc mismatch, stored 0x00000005, computed " \
                              f"0x{crc32c_pkg.crc32c(index):08X}"
    assert info.value.offset == 201
    # a longer buffer: only the footer's indexBlockLength bytes are the index (and the crc covers them)
    assert decode_index(index + b"junk", Footer(201, 108, 1, crc32c_pkg.crc32c(index))) == \
        [IndexEntry(*e) for e in GOLDEN_ENTRIES]


def test_index_limits_accepted():
    # the smallest and largest values each field takes, and entries that just touch
    entries = [(0, 0, 1, 1, 0, 10), (0, 1, 1, 1, 10, 10), (5, INT64_MAX - 1, 1, 1, 20, 181)]
    assert decode_index(b"".join(entry_bytes(*e) for e in entries), Footer(201, 108, 0)) == \
        [IndexEntry(*e) for e in entries]
    assert IndexEntry(*entries[2]).end_offset == INT64_MAX and IndexEntry(*entries[2]).block_end == 201


def test_a_collecting_scan_reports_every_problem_and_keeps_the_good_entries():
    entries = [(3, 10, 3, 2, 0, 78), (3, 10, 0, 1, 78, 50), (3, 12, 4, 1, 78, 50), (7, 0, 5, 1, 100, 101)]
    index = b"".join(entry_bytes(*e) for e in entries)
    footer = Footer(201, len(index), 1, crc32c_pkg.crc32c(index) ^ 1)
    problems: list = []
    kept = _scan_index(index, footer, 201, problems)
    # the second entry fails its own check, the third overlaps the first's offsets: both are left out,
    # and the scan goes on to keep the fourth
    assert kept == [IndexEntry(*entries[0]), IndexEntry(*entries[3])]
    assert [(type(p).__name__, p.offset) for p in problems] == [
        ("ChecksumError", 201), ("BoundsError", 201 + 36 + 16), ("BoundsError", 201 + 72 + 8)]
    # version 0: the crc is not checked
    problems = []
    _scan_index(index, Footer(201, len(index), 0), 201, problems)
    assert [p.offset for p in problems] == [201 + 36 + 16, 201 + 72 + 8]
    # without a list, the first problem is raised
    with pytest.raises(errors.ChecksumError):
        _scan_index(index, footer, 201, None)
    # overlapping blocks are collected too, each at the later entry
    overlapping = [(3, 10, 3, 2, 0, 78), (4, 0, 1, 1, 70, 20), (5, 0, 1, 1, 80, 20)]
    index = b"".join(entry_bytes(*e) for e in overlapping)
    problems = []
    kept = _scan_index(index, Footer(201, len(index), 0), 201, problems)
    assert len(kept) == 3 and [(p.field, p.offset) for p in problems] == [
        ("index entry blockPosition", 201 + 36 + 24), ("index entry blockPosition", 201 + 72 + 24)]


def test_verify_lists_every_index_problem():
    data = bytearray(GOLDEN_V0)
    data[201 + 20:201 + 24] = bytes(4)            # first entry: recordCount 0
    data[201 + 72 + 32:201 + 72 + 36] = bytes(4)  # third entry: blockSize 0
    problems = obj.verify_report(bytes(data)).problems
    assert [(p.position, p.kind) for p in problems if p.position >= 201] == [
        (201 + 20, "BoundsError"), (201 + 72 + 32, "BoundsError")]


def test_index_entry_properties_and_encode():
    e = IndexEntry(3, 10, 7, 3, 100, 128)
    assert (e.end_offset, e.block_end, IndexEntry.SIZE) == (17, 228, 36)
    assert e.encode() == entry_bytes(3, 10, 7, 3, 100, 128)
    assert IndexEntry.decode(b"xy" + e.encode(), 2) == e
    with pytest.raises(errors.TruncatedError) as info:
        IndexEntry.decode(e.encode()[:35])
    assert (info.value.what, info.value.offset) == ("index entry truncated: need 36 bytes, found 35", 0)


def test_find_entries_edges():
    e1, e2, e3 = (IndexEntry(*e) for e in GOLDEN_ENTRIES)
    assert find_entries([e1, e2, e3], 3, 17) == [] and find_entries([e1, e2, e3], 3, 16) == [e2]
    assert find_entries([e1, e2, e3], 7, 0) == [e3] and find_entries([e1, e2, e3], 8, 0) == []
    assert find_entries((e1, e2, e3), 3, 10) == [e1, e2]


# --- DataBlock header ---------------------------------------------------------------------------------

@pytest.mark.parametrize("header, error, field, found, position, message", [
    (block_header_bytes(1, 1, magic=0x5B), errors.BadMagicError, None, 0x5B, 0,
     "DataBlock header: bad magic 0x5B, expected 0x5A"),
    (block_header_bytes(1, 1, flags=3), errors.BoundsError, "DataBlock flags", "0x03", 1,
     "DataBlock flags = 0x03 out of bounds (0x02: uncompressed, the only kind known)"),
    (block_header_bytes(0, 1), errors.BoundsError, "DataBlock recordCount", 0, 2,
     "DataBlock recordCount = 0 out of bounds (>= 1)"),
    (block_header_bytes(1, -1), errors.BoundsError, "DataBlock dataLength", -1, 6,
     "DataBlock dataLength = -1 out of bounds (>= 0)"),
    (bytes(10), errors.ZeroedError, None, None, 0, "DataBlock header is all zeros (never written or torn)"),
    (bytes(9), errors.TruncatedError, None, 9, 0, "DataBlock header truncated: need 10 bytes, found 9"),
], ids=["magic", "flags", "count-0", "length-negative", "zeroed", "truncated"])
def test_data_block_header_refusals(header, error, field, found, position, message):
    with pytest.raises(errors.FormatError) as info:
        DataBlockHeader.decode(b"xx" + header, 2)
    exc = info.value
    assert type(exc) is error
    assert (exc.what, getattr(exc, "field", None), exc.found, exc.offset) == (message, field, found, 2 + position)


def test_data_block_header_limits_and_encode():
    assert DataBlockHeader.decode(block_header_bytes(1, 0)) == DataBlockHeader(1, 0)
    top = (1 << 31) - 1
    assert DataBlockHeader.decode(b"x" + block_header_bytes(top, top), 1) == DataBlockHeader(top, top)
    assert DataBlockHeader(3, 68).encode() == block_header_bytes(3, 68)
    assert (DataBlockHeader(3, 68).block_size, DataBlockHeader.SIZE) == (78, 10)
