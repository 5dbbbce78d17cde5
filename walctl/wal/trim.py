"""``walctl trim``: move the trim point to a live record's offset (the records at or before it are
deleted, logically), checked from the header slots and the checkpoint alone on a clean log.

Returns result dataclasses and never prints; the layer above renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from walctl.device.buffers import align_down, align_up  # (walctl.wal.layout's twins)
from walctl.device.opening import open_device
from walctl.errors import FormatError, UsageError
from walctl.failpoints import failpoint
from walctl.format.header import WalHeader
from walctl.wal.headers import write_header
from walctl.wal.lifecycle import _open_own_wal, open_writer, read_wal_state, trusted_checkpoint

if TYPE_CHECKING:
    from walctl.device.base import Device
    from walctl.wal.layout import Ring


@dataclass
class TrimResult:
    """What a trim did."""

    previous_trim_offset: int
    trim_offset: int
    records_deleted: int | None  # None when no scan ran (a clean log with a checkpoint)
    records_left: int | None
    header: WalHeader
    end_offset: int = 0  # end of the log
    scanned: bool = False


def trim_wal(path: str, offset: int, *, scan: bool = False) -> TrimResult:
    """Delete (logically) the records at or before ``offset``, which must be a live record's offset.

    On a cleanly closed log with a checkpoint, ``offset`` is checked by reading the record
    header there (it carries its own logical offset); nothing else of the log is read.
    ``scan``: scan the log anyway (to count the records deleted and left).
    """
    from walctl.wal.writer import check_record_at

    _refuse_trim_from_headers(path, offset)
    # Without a trusted checkpoint (a WAL written before them) trim scans, as it always did.
    # Marked as a trim: an append it refuses waits for it (it waits for another trim itself).
    opened = open_writer(path, scan=scan, keep_offsets=True, scan_without_checkpoint=True, trim_mark=True)
    writer = opened.writer
    try:
        failpoint("trim-locked")  # (tests: the lock held, as long as they like)
        previous = writer.header.trim_offset
        end = writer.acked_end
        _refuse_behind(offset, previous, path)
        _refuse_past_end(writer.dev, writer.ring, offset, previous, end, path)
        offsets = opened.scan.record_offsets if opened.scan is not None else None
        if offsets is not None and offset not in offsets:
            raise UsageError(f"no live record starts at offset {offset}", where=path,
                             hint=_nearest(offsets, offset))
        try:
            check_record_at(writer.dev, writer.ring, offset)
        except UsageError as exc:
            near = _records_near(writer.dev, writer.ring, offset, max(previous, 0), end)
            if near:
                exc.hint = "nearest record offsets: " + ", ".join(map(str, near))
            raise exc.at(path)
        writer.update_header(trim_offset=offset)
    except UsageError:
        writer.close()  # nothing written but the open's header: leave the log clean
        raise
    except BaseException:
        writer.abort()
        raise
    writer.close()
    if offsets is None:
        return TrimResult(previous, offset, None, None, writer.header, end, False)
    deleted = sum(1 for o in offsets if o <= offset)
    return TrimResult(previous, offset, deleted, len(offsets) - deleted, writer.header, end, True)


def _refuse_behind(offset: int, previous: int, path: str) -> None:
    """A trim offset at or behind the current trim point: the trim point only moves forward."""
    if offset <= previous:
        raise UsageError(f"trim offset {offset} is not after the current trim point {previous}",
                         where=path, hint="the trim point only moves forward")


def _refuse_past_end(dev, ring, offset: int, previous: int, end: int, path: str) -> None:
    """A trim offset at or past the log's end ``end``, with the nearest record offsets as the hint."""
    if offset >= end:
        near = _records_near(dev, ring, end, max(previous, 0), end)
        raise UsageError(f"no live record starts at offset {offset}: the log ends at {end}", where=path,
                         hint=("nearest record offsets: " + ", ".join(map(str, near))) if near else
                         "give an offset that append, upload or recover printed")


def _refuse_trim_from_headers(path: str, offset: int) -> None:
    """Refuse, read-only, the trim offsets the header slots and (on a cleanly closed log) the record
    header at ``offset`` refute (not after the trim point; past the end; no record starting there),
    before the writer's open rewrites both slots.
    trim_wal checks them again under the lock (a header read here may be a writer's stale one:
    its trim point only lags, and a running writer's log is not clean)."""
    from walctl.wal.layout import Ring
    from walctl.wal.writer import check_record_at

    dev = open_device(path, writable=False)
    try:
        state = read_wal_state(dev, path)
        header = state.header
        if header.flavour != "walctl":
            return  # the writer's open refuses it, with its own message
        previous = header.trim_offset
        _refuse_behind(offset, previous, path)
        checkpoint = trusted_checkpoint(state)
        if not header.clean or checkpoint is None:
            return  # the writer's open scans (and seals) first: only then is the log known
        end, ring = checkpoint.log_end, Ring(header.capacity)
        _refuse_past_end(dev, ring, offset, previous, end, path)
        try:  # a cleanly closed log: the record header there says whether a record starts at offset
            check_record_at(dev, ring, offset)
        except UsageError as exc:
            near = _records_near(dev, ring, offset, max(previous, 0), end)
            if near:
                exc.hint = "nearest record offsets: " + ", ".join(map(str, near))
            raise exc.at(path)
    finally:
        dev.close()


def trim_scanned(path: str, offset: int) -> TrimResult:
    """Trim to ``offset``, a record the caller has just read in a scan of its own (upload).

    Nothing of the log is scanned again: with the writer lock, the record header at ``offset``
    is checked (it carries its own logical offset, so bytes of an earlier lap never pass) and
    one header slot is written with the new trim point; the shutdown type and checkpoint stay
    as they are (nextOffset too, unless it lay behind the record). A crashed writer's log
    stays marked ungraceful: the next writer recovers (scans and seals) it, from the new trim
    point on.

    Raises:
        RefusedError: a writer (or another trim) holds the lock. UsageError: ``offset`` is not after the trim
        point, past the log's end (a clean log), or no data record.
    """
    from walctl.wal.layout import Ring
    from walctl.wal.writer import check_record_at

    # Marked as a trim, and no wait of its own: upload's trim_or_hand_off tries again until its timeout.
    dev, state = _open_own_wal(path, trim_mark=True)
    try:
        failpoint("trim-locked")
        header = state.header
        previous = header.trim_offset
        _refuse_behind(offset, previous, path)
        checkpoint = trusted_checkpoint(state)
        end = checkpoint.log_end if checkpoint is not None else header.next_offset
        if header.clean and offset >= end:
            raise UsageError(f"no live record starts at offset {offset}: the log ends at {end}", where=path,
                             hint="give an offset that append, upload or recover printed")
        try:
            head = check_record_at(dev, Ring(header.capacity), offset)
        except UsageError as exc:
            raise exc.at(path)
        # A crashed writer's nextOffset is not trusted, but it must not fall behind the trim
        # point (as a running writer's trim keeps it): the record's end is a true lower bound.
        state = write_header(dev, state, header.with_(trim_offset=offset,
                                                      next_offset=max(header.next_offset, align_up(head.end))))
    finally:
        dev.close()
    return TrimResult(previous, offset, None, None, state.header, end, False)


NEAR_SEARCH_BYTES = 1 << 20  # how far before a wrong trim offset to look for a block start (the hint)


def _records_near(dev: Device, ring: Ring, offset: int, start: int, end: int) -> list[int]:
    """The record offsets just before and after ``offset``, for an error's hint: find a block
    start at most 1 MiB before it, then follow its records (reads about that much, not the log)."""
    from walctl.format import record as rec
    from walctl.wal import reader

    log = reader.LogReader(dev, ring)
    o = align_down(offset)
    floor = max(start, o - NEAR_SEARCH_BYTES)
    log.read(floor, o + rec.SIZE - floor)  # one read of the range, walked back in memory
    while o >= floor:
        try:
            head = rec.RecordHeader.decode(log.read(o, rec.SIZE), expected_offset=o)
            break
        except FormatError:
            o -= 4096
    else:
        return []
    before = after = None
    while o < end and after is None:
        try:
            head = rec.RecordHeader.decode(log.read(o, rec.SIZE), expected_offset=o)
        except FormatError:
            o = align_up(o + 1)
            continue
        if not head.is_padding:
            if o < offset:
                before = o
            elif o > offset:
                after = o
        o = head.end
    return [x for x in (before, after) if x is not None]


def _nearest(offsets: list[int], offset: int) -> str:
    if not offsets:
        return "the log has no live records"
    import bisect

    i = bisect.bisect_left(offsets, offset)
    near = [str(o) for o in offsets[max(0, i - 1):i + 1]]
    return "nearest record offsets: " + ", ".join(near)
