"""Reading objects: the tail (footer + index), the index checks, a stream's entries, blocks, deep verification.

Errors carry ``offset`` = the byte position in the object.
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

from walctl.errors import FormatError
from walctl.format import checks
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.format.datablock import DATA_BLOCK_HEADER_SIZE, DataBlockHeader
from walctl.format.footer import FOOTER_SIZE, Footer
from walctl.format.index_entry import INDEX_ENTRY_SIZE, IndexEntry

# Guess for the first ranged read of an object's tail: the footer plus this many index
# entries (about 9 KiB) catches the whole index of most objects in one GET.
DEFAULT_ENTRIES_GUESS = 256


@contextmanager
def _relocated(delta: int):
    """Turn positions of errors raised inside from buffer positions into object positions."""
    try:
        yield
    except FormatError as exc:
        if exc.offset is not None:
            exc.offset += delta
        raise


# --- index ------------------------------------------------------------------------------------

def _scan_index(buf, footer: Footer, base_position: int,
                problems: list[FormatError] | None) -> list[IndexEntry]:
    """Decode and check the IndexBlock; raise the first failure, or collect all into ``problems``.

    An entry failing its own checks is left out of the result; the scan goes on.
    """
    def report(exc: FormatError) -> None:
        if problems is None:
            raise exc
        problems.append(exc)

    with _relocated(base_position):
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
            with _relocated(base_position):
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


def check_data_crc(data, footer: Footer) -> None:
    """Check the version 1 data crc; ``data`` holds the object from position 0 at least to the index.

    Version 0 (AutoMQ) has no data crc: nothing to check.
    Raises TruncatedError, ChecksumError (at position 0: the crc covers the whole data region).
    """
    if not footer.checksummed:
        return
    region = checks.need(data, 0, footer.index_start_position, "object data region")
    checks.crc(footer.data_crc, crc32c(region), 0, f"object data [0, {footer.index_start_position})")


# --- reading ----------------------------------------------------------------------------------

def tail_length_hint(entries_guess: int = DEFAULT_ENTRIES_GUESS, object_size: int | None = None) -> int:
    """How many bytes to read from an object's end to get the footer and, likely, the whole index."""
    length = FOOTER_SIZE + INDEX_ENTRY_SIZE * max(entries_guess, 0)
    return length if object_size is None else min(length, object_size)


def parse_tail(tail, object_size: int) -> tuple[Footer, list[IndexEntry] | None]:
    """Decode the footer from the last ``len(tail)`` bytes of an object of ``object_size`` bytes.

    Returns the footer and the index entries when the tail covers the whole IndexBlock,
    else None: read exactly [index_start_position, + index_block_length) and call decode_index.
    Raises the errors of Footer.decode (BadMagicError: not an object of this format) and of
    decode_index, with object positions; ValueError if ``tail`` is longer than the object.
    """
    if len(tail) > object_size:
        raise ValueError(f"tail of {len(tail)} bytes is longer than the object ({object_size} bytes)")
    tail_position = object_size - len(tail)
    with _relocated(tail_position):
        footer = Footer.decode(tail, len(tail) - FOOTER_SIZE if len(tail) >= FOOTER_SIZE else 0,
                               object_size=object_size)
    if footer.index_start_position < tail_position:
        return footer, None
    start = footer.index_start_position - tail_position
    index = memoryview(tail)[start:start + footer.index_block_length]
    return footer, decode_index(index, footer, base_position=footer.index_start_position)


def find_entries(entries: Sequence[IndexEntry], stream_id: int, offset: int) -> list[IndexEntry]:
    """The entries of ``stream_id`` holding offsets >= ``offset``, in order (binary search).

    ``entries`` must be a decoded index: sorted by (stream, start), ranges not overlapping,
    so end offsets within a stream are sorted too.
    """
    first = bisect.bisect_right(entries, (stream_id, offset), key=lambda e: (e.stream_id, e.end_offset))
    last = bisect.bisect_right(entries, stream_id, lo=first, key=lambda e: e.stream_id)
    return list(entries[first:last])


# --- deep verification ------------------------------------------------------------------------

def _decode_entry_blocks(buf, entry: IndexEntry, base_position: int) -> Iterator[list[StreamRecordBatch]]:
    """Yield the batches of each DataBlock in the entry's range, block by block, checked."""
    start = entry.block_position - base_position
    if start < 0:
        raise ValueError(f"buffer starts at object position {base_position}, after the entry's block "
                         f"at {entry.block_position}")
    end = start + entry.block_size
    checks.need(buf, start, entry.block_size, f"blocks of stream {entry.stream_id} at {entry.block_position}")
    view = memoryview(buf)[:end]  # nothing below may read past the entry's range
    expected = entry.start_offset
    total = 0
    pos = start
    last_batch_pos = start
    while pos < end:
        header = DataBlockHeader.decode(view, pos)
        checks.bound(header.block_size <= end - pos, pos + 6, "DataBlock dataLength", header.data_length,
                     f"<= {end - pos - DATA_BLOCK_HEADER_SIZE}: the block must end inside its index entry's range")
        block_end = pos + header.block_size
        block_view = view[:block_end]
        batches: list[StreamRecordBatch] = []
        bpos = pos + DATA_BLOCK_HEADER_SIZE
        while bpos < block_end:
            b = StreamRecordBatch.decode(block_view, bpos)
            checks.bound(b.stream_id == entry.stream_id, bpos + 1, "StreamRecordBatch streamId", b.stream_id,
                         f"== {entry.stream_id}, the stream of its index entry")
            rule = ("the index entry's startOffset" if total == 0 and not batches
                    else "the previous batch's end: offsets contiguous")
            checks.bound(b.base_offset == expected, bpos + 17, "StreamRecordBatch baseOffset", b.base_offset,
                         f"== {expected}, {rule}")
            expected = b.end_offset
            batches.append(b)
            last_batch_pos = bpos
            bpos += b.size
        checks.bound(len(batches) == header.record_count, pos + 2, "DataBlock recordCount", header.record_count,
                     f"== {len(batches)}, the batches decoded in the block")
        total += len(batches)
        yield batches
        pos = block_end
    checks.bound(expected == entry.end_offset, last_batch_pos + 17, "end offset of the entry's last batch", expected,
                 f"== {entry.end_offset}, the index entry's end offset")
    checks.bound(total == entry.record_count, start, f"batches in the blocks of stream {entry.stream_id}", total,
                 f"== {entry.record_count}, the index entry's recordCount")


def iter_blocks(buf, entry: IndexEntry, *, base_position: int = 0) -> Iterator[StreamRecordBatch]:
    """Yield the batches of the DataBlock(s) in ``entry``'s byte range, checking them against the entry.

    Args:
        buf: object bytes holding the entry's range; ``buf[0]`` is at object position
            ``base_position`` (0: the whole object; ``entry.block_position``: just the range).
    Raises (while iterating; the last checks run after the last batch):
        TruncatedError, ZeroedError, BadMagicError, BoundsError: block header, dataLength past
        the range, recordCount, a batch of another stream, offsets not contiguous, first or
        last offset or batch count not the entry's.
        ValueError: ``buf`` starts after the entry's range.
    """
    with _relocated(base_position):
        for block in _decode_entry_blocks(buf, entry, base_position):
            yield from block


@dataclass(frozen=True)
class Problem:
    """One finding of verify_object: where in the object, what, and the error class name."""

    position: int
    message: str
    kind: str = ""

    @classmethod
    def of(cls, exc: FormatError) -> "Problem":
        return cls(exc.offset if exc.offset is not None else 0, exc.what, type(exc).__name__)


def verify_object(data) -> list[Problem]:
    """Check a whole object and report every problem found, sorted by position (empty: healthy).

    Footer, index (crc in version 1), data crc (version 1), every entry's blocks, offset gaps
    between a stream's entries, bytes before the index no entry covers, and a version 0 footer
    with bytes where AutoMQ writes zeros. A damaged footer stops the check there: without it
    nothing else can be located.
    """
    problems: list[Problem] = []
    try:
        footer = Footer.decode(data, max(len(data) - FOOTER_SIZE, 0), object_size=len(data))
    except FormatError as exc:
        return [Problem.of(exc)]
    footer_position = len(data) - FOOTER_SIZE
    if not footer.checksummed and any(memoryview(data)[footer_position + 16:footer_position + 40]):
        # Legal for AutoMQ (it ignores these bytes) but it never writes anything there: most
        # likely a walctl footer whose version bit flipped, which would silence every checksum.
        problems.append(Problem(footer_position + 12, "object footer version 0 (AutoMQ, no checksums) with "
                                "non-zero bytes in [16, 40) where AutoMQ writes zeros: a damaged walctl "
                                "version 1 footer?", "version"))
    errors: list[FormatError] = []
    start = footer.index_start_position
    entries = _scan_index(memoryview(data)[start:start + footer.index_block_length], footer, start, errors)
    problems.extend(Problem.of(exc) for exc in errors)
    try:
        check_data_crc(data, footer)
    except FormatError as exc:
        problems.append(Problem.of(exc))
    for entry in entries:
        try:
            for _ in _decode_entry_blocks(data, entry, 0):
                pass
        except FormatError as exc:
            problems.append(Problem.of(exc))
    for prev, entry in zip(entries, entries[1:]):
        if entry.stream_id == prev.stream_id and entry.start_offset > prev.end_offset:
            problems.append(Problem(entry.block_position,
                                    f"stream {entry.stream_id}: offsets [{prev.end_offset}, {entry.start_offset}) "
                                    "missing between two index entries", "gap"))
    covered = 0
    for entry in sorted(entries, key=lambda e: e.block_position):
        if entry.block_position > covered:
            problems.append(Problem(covered, f"bytes [{covered}, {entry.block_position}) are not covered by "
                                             "any index entry", "uncovered"))
        covered = max(covered, entry.block_end)
    if covered < start:
        problems.append(Problem(covered, f"bytes [{covered}, {start}) are not covered by any index entry",
                                "uncovered"))
    problems.sort(key=lambda p: p.position)
    return problems
