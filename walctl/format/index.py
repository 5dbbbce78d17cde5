"""IndexBlock: an object's index entries, decoded with the checks that span entries, and searched.

    indexStartPosition                          + indexBlockLength
    | IndexEntry | IndexEntry | ... | IndexEntry |      (walctl.format.index_entry: 36 bytes each)

Entries are sorted by (streamId, startOffset), offset ranges do not overlap within a stream,
and blocks do not overlap; the Footer (walctl.format.footer) says where the IndexBlock is and,
in version 1, its crc. Errors carry ``offset`` = the byte position in the object.
"""

from __future__ import annotations

import bisect
from typing import Sequence

from walctl.errors import FormatError
from walctl.format import checks
from walctl.format.crc import crc32c
from walctl.format.footer import Footer
from walctl.format.index_entry import INDEX_ENTRY_SIZE, IndexEntry


def _scan_index(buf, footer: Footer, base_position: int,
                problems: list[FormatError] | None) -> list[IndexEntry]:
    """Decode and check the IndexBlock; raise the first failure, or collect all into ``problems``.

    An entry failing its own checks is left out of the result; the scan goes on.
    """
    def report(exc: FormatError) -> None:
        if problems is None:
            raise exc
        problems.append(exc)

    with checks.relocated(base_position):
        view = checks.need(buf, 0, footer.index_block_length, "object index block")
    if footer.checksummed:
        try:
            checks.crc(footer.index_crc, crc32c(view), base_position, "object index block")
        except FormatError as exc:
            report(exc)
    found: list[tuple[int, IndexEntry]] = []
    for i in range(footer.entry_count):
        pos = base_position + i * INDEX_ENTRY_SIZE
        try:
            with checks.relocated(base_position):
                entry = IndexEntry.decode(view, i * INDEX_ENTRY_SIZE)
            checks.bound(entry.block_end <= footer.index_start_position, pos + 24, "index entry block end",
                         entry.block_end, f"<= indexStartPosition {footer.index_start_position}")
            if found:
                prev = found[-1][1]
                checks.bound(entry.stream_id >= prev.stream_id, pos, "index entry streamId", entry.stream_id,
                             f">= the previous entry's {prev.stream_id}: entries sorted by stream")
                if entry.stream_id == prev.stream_id:
                    checks.bound(entry.start_offset >= prev.end_offset, pos + 8, "index entry startOffset",
                                 entry.start_offset, f">= the previous entry's end offset {prev.end_offset}: "
                                 "sorted, no overlapping offset ranges")
        except FormatError as exc:
            report(exc)
            continue
        found.append((i, entry))
    by_position = sorted(found, key=lambda item: item[1].block_position)
    for (_, prev), (i, entry) in zip(by_position, by_position[1:]):
        try:
            checks.bound(entry.block_position >= prev.block_end, base_position + i * INDEX_ENTRY_SIZE + 24,
                         "index entry blockPosition", entry.block_position,
                         f">= {prev.block_end}, the end of the blocks before it: blocks overlap")
        except FormatError as exc:
            report(exc)
    return [entry for _, entry in found]


def decode_index(buf, footer: Footer, *, base_position: int | None = None) -> list[IndexEntry]:
    """Decode the IndexBlock held at ``buf[0:footer.index_block_length]``.

    Args:
        base_position: the object position of ``buf[0]``, for error positions only;
            defaults to ``footer.index_start_position``.
    Raises:
        TruncatedError, ChecksumError (version 1), ZeroedError, BoundsError: entry fields,
        a block past the index start, entries out of order, overlapping offset ranges
        within a stream, overlapping blocks.
    """
    base = footer.index_start_position if base_position is None else base_position
    return _scan_index(buf, footer, base, None)


def find_entries(entries: Sequence[IndexEntry], stream_id: int, offset: int) -> list[IndexEntry]:
    """The entries of ``stream_id`` holding offsets >= ``offset``, in order (binary search).

    ``entries`` must be a decoded index: sorted by (stream, start), ranges not overlapping,
    so end offsets within a stream are sorted too.
    """
    first = bisect.bisect_right(entries, (stream_id, offset), key=lambda e: (e.stream_id, e.end_offset))
    last = bisect.bisect_right(entries, stream_id, lo=first, key=lambda e: e.stream_id)
    return list(entries[first:last])
