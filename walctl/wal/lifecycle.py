"""The WAL's lifecycle: init, open a writer (recovering and repairing a crashed log first), trim,
and the read-only open the readers use.

Each returns result dataclasses and never prints; the layer above renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os
import time
from dataclasses import dataclass, field

from walctl.device.buffers import align_down, align_up, aligned_buffer  # (walctl.wal.layout's twins)
from walctl.device.opening import open_device
from walctl.errors import (CorruptionError, FormatError, IOFailure, NotFoundError, RefusedError, UsageError,
                           WalctlError)
from walctl.format.checkpoint import Checkpoint, bounded
from walctl.format.header import (HEADERS_SIZE, SLOT_SIZE, MIN_CAPACITY, SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL,
                                  WalHeader)
from walctl.wal.headers import HeaderState, decode_slots, read_headers, write_header, write_slot

if TYPE_CHECKING:
    from walctl.device.base import Device
    from walctl.wal import reader
    from walctl.wal.layout import Ring
    from walctl.wal.crash_repair import RepairResult
    from walctl.wal.writer import WalWriter

# The writer and the crash repair are imported by the functions that write (open_writer, trim,
# init): a reader (recover, status) does not load them (start-up of a short command). Nor does
# it load what only init uses (device creation, safety checks) or the scan (walctl.wal.reader,
# the verdict): status of a cleanly closed WAL answers from its header slots alone.


@dataclass
class InitResult:
    """What init did."""

    path: str
    header: WalHeader
    created: bool
    device_size_bytes: int
    wiped_bytes: int  # record-area bytes written with zeros (a wipe of old data, or the prewrite)
    warnings: list[str] = field(default_factory=list)
    is_block_device: bool = False


def init_wal(path: str, capacity: int | None, *, node_id: int = -1, force: bool = False,
             progress=None, prewrite: bool = False, discard_unuploaded: bool = False) -> InitResult:
    """Write both header slots of a new, empty WAL; create ``path`` as a file if it does not exist.

    ``prewrite`` (regular files): write the whole record area once, so the first lap's
    O_DIRECT writes find allocated, written blocks instead of converting extents as they go.
    ``discard_unuploaded``: with ``force``, re-initialise a WAL even when it holds records after
    its trim point (not yet uploaded; AutoMQ's: walctl cannot tell); without it such a WAL is refused.

    Raises:
        UsageError: capacity missing for a new file, too small, or larger than the device.
        RefusedError: mounted, held, a filesystem/partition signature or a WAL already there (no --force),
            or a WAL holding records not yet uploaded (no ``discard_unuploaded``).
    """
    from walctl.device import safety
    from walctl.device.create import create_file, zero_fill
    from walctl.failpoints import failpoint

    warnings: list[str] = []
    capacity = _checked_capacity(capacity, path)
    created = not os.path.lexists(path)
    if created:
        warnings += safety.check_safe_to_create(path, force=force)  # (a /dev typo: no such device, first)
        if capacity is None:
            raise UsageError("--capacity is required to create a new WAL file", where=path,
                             hint="walctl init DEVICE --capacity 64MiB (a size with its unit)")
        if prewrite:
            _check_free_space(path, capacity)
        create_file(path, capacity)
    else:
        warnings += safety.check_safe_to_overwrite(path, force=force)
    try:
        dev = open_device(path, writable=True)
    except BaseException:
        _remove_if_created(path, created)
        raise
    try:
        failpoint("init-after-create")
        warnings += dev.warnings
        size = dev.size_bytes
        capacity = _capacity_on(size, capacity, path)
        previous_ts, wiped = (0, 0) if created else _clear_old(dev, path, capacity, force, progress,
                                                               discard_unuploaded)
        if prewrite and not dev.is_block_device and not wiped:
            # A filesystem allocates lazily: the first direct write to each region of a fresh
            # (sparse or fallocated) file also updates metadata. Pay that once, here.
            zero_fill(dev, HEADERS_SIZE, capacity - HEADERS_SIZE, progress)
            wiped = capacity - HEADERS_SIZE
        header = _write_new_headers(dev, capacity, node_id, max(time.time_ns(), previous_ts + 1))
        return InitResult(path, header, created, size, wiped, warnings, dev.is_block_device)
    except BaseException:  # failed or interrupted (SIGTERM): no half-made WAL file is left behind
        _remove_if_created(path, created)
        raise
    finally:
        dev.close()


def _check_free_space(path: str, capacity: int) -> None:
    """A prewritten file takes ``capacity`` bytes at once: refuse it (IOFailure, as the ENOSPC it
    would end in) before zero-filling the file system to the brim for minutes."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return  # create_file names the problem
    free = st.f_bavail * st.f_frsize
    if free < capacity:
        raise IOFailure(f"not enough free space for the WAL file: {free} bytes free, the capacity needs {capacity}",
                        where=path, hint="choose a smaller --capacity, free space, or pass --no-prewrite "
                                         "for a sparse file that fills as records arrive")


def _checked_capacity(capacity: int | None, path: str) -> int | None:
    if capacity is None:
        return None
    capacity = align_down(capacity)
    if capacity < MIN_CAPACITY:
        raise UsageError(f"capacity {capacity} bytes is too small", where=path,
                         hint=f"at least {MIN_CAPACITY} bytes: two 4 KiB header slots and two blocks")
    return capacity


def _capacity_on(size: int, capacity: int | None, path: str) -> int:
    """The capacity on a device of ``size`` bytes: the one asked for, else the whole device."""
    if capacity is None:
        capacity = align_down(size)
        if capacity < MIN_CAPACITY:
            raise UsageError(f"device of {size} bytes is too small for a WAL", where=path,
                             hint=f"at least {MIN_CAPACITY} bytes")
    if size < capacity:
        raise UsageError(f"device is smaller than the capacity: device {size} bytes, capacity {capacity} bytes",
                         where=path, hint="choose a smaller --capacity")
    return capacity


def _clear_old(dev: Device, path: str, capacity: int, force: bool, progress,
               discard_unuploaded: bool = False) -> tuple[int, int]:
    """Refuse or wipe what an existing device holds; (the old WAL's timestamp or 0, bytes wiped)."""
    from walctl.device.create import zero_fill

    previous_ts = _existing_wal_check(dev, path, force, discard_unuploaded)
    where = None if previous_ts else _first_nonzero(dev, capacity)
    if not previous_ts and where is None:
        return 0, 0
    if not previous_ts and not force:
        raise RefusedError(f"the device holds data (non-zero bytes at byte {where}) but no valid WAL "
                           f"header", where=path,
                           hint="it may be a WAL whose headers were destroyed; pass --force to overwrite")
    # An earlier WAL's records would pass every check of a new one (same offsets,
    # valid CRCs): wipe the record area so none can come back as phantom records.
    zero_fill(dev, HEADERS_SIZE, capacity - HEADERS_SIZE, progress)
    return previous_ts, capacity - HEADERS_SIZE


def _write_new_headers(dev: Device, capacity: int, node_id: int, ts: int) -> WalHeader:
    from walctl.wal.writer import WINDOW_INITIAL_BYTES

    ring = capacity - HEADERS_SIZE
    header = WalHeader(capacity=capacity, trim_offset=-1, last_write_timestamp_ns=ts,
                       sliding_window_max_length=min(WINDOW_INITIAL_BYTES, ring), shutdown_type=SHUTDOWN_GRACEFUL,
                       node_id=node_id, epoch=-1, next_offset=0)
    # An empty log whose every stream is known (none): the first append needs no scan.
    checkpoint = Checkpoint(log_end=0, complete=True)
    write_slot(dev, 0, header, checkpoint)
    header = header.with_(last_write_timestamp_ns=ts + 1)
    write_slot(dev, 1, header, checkpoint)
    return header


def _remove_if_created(path: str, created: bool) -> None:
    if created:
        try:
            os.unlink(path)
        except OSError:
            pass


def _first_nonzero(dev: Device, capacity: int, chunk: int = 8 << 20) -> int | None:
    """Byte position of the first non-zero byte in [0, capacity), or None (a read of the area)."""
    buf = aligned_buffer(chunk)
    zeros = bytes(chunk)
    for start in range(0, capacity, chunk):
        size = min(chunk, capacity - start)
        view = memoryview(buf)[:size]
        dev.pread_into(start, view)
        if view != zeros[:size]:  # compared in C, not byte by byte in Python
            data = bytes(view)
            return start + (len(data) - len(data.lstrip(b"\0")))
    return None


def _existing_wal_check(dev: Device, path: str, force: bool, discard_unuploaded: bool = False) -> int:
    """Refuse to re-initialise a WAL (walctl's or AutoMQ's) without --force, or one holding records
    not yet uploaded without --discard-unuploaded too; return its timestamp."""
    buf = aligned_buffer(HEADERS_SIZE)
    dev.pread_into(0, buf)
    try:
        state = decode_slots(buf)
    except NotFoundError:
        return 0
    walctl_own = state.header.flavour == "walctl"
    if not force:
        kind = "a walctl WAL" if walctl_own else "an AutoMQ WAL"
        raise RefusedError(f"the device already holds {kind}", where=path,
                           hint="init would destroy it; pass --force to re-initialise")
    if not discard_unuploaded:
        _refuse_unuploaded(dev, state, path)
    return state.header.last_write_timestamp_ns


@dataclass(frozen=True)
class Unuploaded:
    """The records of a WAL after its trim point: what an upload has not taken yet."""

    records: int
    log_bytes: int  # WAL bytes from the trim record's end to the end of the log
    scanned: bool  # False: the header's checkpoint answered (no record read)


def unuploaded(dev: Device, state: HeaderState) -> Unuploaded:
    """Count the records after the trim point, read-only.

    An upload trims what it committed (FORMATS.md 1.6: the checkpoint's uploadedOffset is such a
    trim), so the records after the trim point are the ones not yet uploaded. A cleanly closed
    walctl WAL whose checkpoint ends where the trim record ends (or an empty log) answers from
    its header slots and one record header; otherwise the live log is scanned (AutoMQ's with its
    own rules: walctl cannot know what AutoMQ uploaded, so every live record counts).
    """
    header = state.header
    checkpoint = trusted_checkpoint(state)
    if checkpoint is not None:
        if checkpoint.log_end == 0 and header.trim_offset < 0:
            return Unuploaded(0, 0, False)
        if header.trim_offset >= 0 and _trim_record_end(dev, header) == checkpoint.log_end:
            return Unuploaded(0, 0, False)
    from walctl.wal import reader

    report = reader.Scan(dev, header, probe=False, bulk=True).drain()
    live_start = report.trim_entry.end if report.trim_entry is not None else max(header.trim_offset, 0)
    return Unuploaded(report.records, max(report.end_offset - live_start, 0), True)


def _trim_record_end(dev: Device, header: WalHeader) -> int | None:
    """Where the record at the trim point ends (None when no record header is there)."""
    from walctl.wal.layout import Ring
    from walctl.wal.writer import check_record_at

    try:
        return check_record_at(dev, Ring(header.capacity), header.trim_offset).end
    except UsageError:
        return None


def _refuse_unuploaded(dev: Device, state: HeaderState, path: str) -> None:
    """Refuse (exit 5) a --force init over records not yet uploaded, saying how many."""
    from walctl.sizes import format_size

    found = unuploaded(dev, state)
    if found.records == 0:
        return
    what = f"{found.records} record{'' if found.records == 1 else 's'} ({format_size(found.log_bytes)})"
    if state.header.flavour == "walctl":
        raise RefusedError(f"the WAL holds {what} not yet uploaded; init --force would destroy them", where=path,
                           hint="upload them first (walctl upload DEVICE --store URL), or pass --force "
                                "--discard-unuploaded to destroy them")
    raise RefusedError(f"the {state.header.flavour} WAL holds {what} after its trim point, which walctl cannot "
                       f"tell uploaded; init --force would destroy them", where=path,
                       hint="keep a copy first (walctl image DEVICE FILE), or pass --force --discard-unuploaded "
                            "to destroy them")


@dataclass
class OpenedWAL:
    """A locked writer plus what opening it established."""

    writer: WalWriter
    scan: reader.ScanResult | None  # None when a clean header let the open skip the scan
    sealed_ranges: int
    warnings: list[str]
    previous_shutdown: int
    checkpoint: Checkpoint | None = None  # what the open established (None: stream ends unknown)
    repair: RepairResult | None = None  # the crash repair the open did (None: the log was clean)

    @property
    def header(self) -> WalHeader:
        return self.writer.header


def refuse_foreign(header: WalHeader, path: str) -> None:
    """walctl writes only its own WALs: an AutoMQ one is read for forensics, never written."""
    if header.flavour != "walctl":
        raise RefusedError(f"{header.flavour} WAL: walctl reads it for forensics but never writes to it",
                           where=path, hint="read it with 'walctl recover', 'walctl status' or 'walctl image'")


def read_wal_state(dev: Device, path: str) -> HeaderState:
    if dev.size_bytes < HEADERS_SIZE:
        raise NotFoundError(f"not a WAL: {dev.size_bytes} bytes, smaller than the two {SLOT_SIZE}-byte header "
                            f"slots", where=path, hint="name the WAL's device or file; 'walctl init' creates one")
    try:
        state = read_headers(dev)
    except WalctlError as exc:
        raise exc.at(path)
    header = state.header
    if header.capacity > dev.size_bytes:
        raise CorruptionError(f"header capacity {header.capacity} bytes exceeds the device size "
                              f"{dev.size_bytes} bytes", where=path, hint="wrong device, or a damaged header")
    return state


def trusted_checkpoint(state: HeaderState) -> Checkpoint | None:
    """The current slot's checkpoint when it describes the log as it is (FORMATS.md 1.6): the last
    writer closed cleanly and the checkpoint's end is the header's nextOffset. Else None (scan)."""
    header, cp = state.header, state.checkpoint
    if cp is None or header.flavour != "walctl" or not header.clean:
        return None
    if align_up(cp.log_end) != header.next_offset or cp.log_end < max(header.trim_offset, 0):
        return None
    return cp


def checkpoint_after_scan(state: HeaderState, result: reader.ScanResult, keep: int | None = None) -> Checkpoint:
    """The checkpoint a full scan establishes: the slot's (for streams trimmed away since) updated
    with what the scan saw (which is newer). Complete when the earlier one was, or nothing was
    ever trimmed (the scan saw every record)."""
    cp = state.checkpoint
    streams = dict(cp.streams) if cp is not None else {}
    streams.update(result.stream_ends)
    complete = cp.complete if cp is not None else state.header.trim_offset < 0
    # Bounded to what a slot holds: the streams the scan saw first (they still have records).
    rank = {sid: 1 for sid in result.stream_ends}
    if keep is not None:
        rank[keep] = 2  # the stream the caller is about to write
    streams, kept_all = bounded(streams, rank)
    return Checkpoint(result.end_offset, streams, complete and kept_all, cp.uploaded_offset if cp is not None else -1)


def _open_own_wal(path: str) -> tuple[Device, HeaderState]:
    """The device opened for writing (the writer lock taken) and its header state, for a walctl
    WAL only (RefusedError for an AutoMQ one). On any error the device is closed again."""
    dev = open_device(path, writable=True)
    try:
        state = read_wal_state(dev, path)
        refuse_foreign(state.header, path)
    except BaseException:
        dev.close()
        raise
    return dev, state


def open_writer(path: str, *, scan: bool = False, iodepth: int = 4, on_ack=None,
                keep_offsets: bool = False, budget=None, need_stream: int | None = None,
                scan_without_checkpoint: bool = False, batch_interval_s: float | None = None) -> OpenedWAL:
    """Lock the device, recover it if the last writer crashed, and return a writer.

    A cleanly closed WAL with a checkpoint (FORMATS.md 1.6) opens from its headers alone.

    Args:
        scan: scan the log even after a clean shutdown.
        need_stream: the caller needs this stream's next offset: scan a clean log only when the
            checkpoint cannot tell it (no checkpoint, or one that lists too few streams).
        budget: a walctl.wal.pacing.Budget: block writes per second and bytes per second.
        batch_interval_s: the writer's group-commit wait (None: the writer's default).
    Raises:
        NotFoundError: no valid header. RefusedError: another writer, or an AutoMQ WAL.
        CorruptionError: damage a crash cannot explain (walctl will not write over evidence).
    """
    from walctl.wal.crash_repair import repair_crash_damage
    from walctl.wal.writer import WalWriter

    dev, state = _open_own_wal(path)
    try:
        header = state.header
        previous = header.shutdown_type
        result = None
        repair = None
        warnings: list[str] = []
        next_offset = header.next_offset
        checkpoint = trusted_checkpoint(state)
        if need_stream is not None and (checkpoint is None or not (checkpoint.complete
                                                                   or need_stream in checkpoint.streams)):
            scan = True
        if scan_without_checkpoint and checkpoint is None:
            scan = True
        if scan or not header.clean:
            result = _scan_for_writer(dev, header, path, keep_offsets)
            if not header.clean:
                repair = repair_crash_damage(dev, header, result, path=path, warnings=warnings)
                next_offset = result.next_block_offset
            checkpoint = checkpoint_after_scan(state, result, need_stream)
        # The recovery scan's result is checkpointed now, so a trim during this run keeps it.
        state = write_header(dev, state, header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=next_offset),
                             checkpoint if checkpoint is not None else state.checkpoint)
        extra = {} if batch_interval_s is None else {"batch_interval_s": batch_interval_s}
        writer = WalWriter(dev, state, next_offset, iodepth=iodepth, on_ack=on_ack, budget=budget,
                           checkpoint=checkpoint, **extra)
    except BaseException:
        dev.close()
        raise
    return OpenedWAL(writer, result, repair.ranges if repair else 0, list(dev.warnings) + warnings, previous,
                     checkpoint, repair)


def _scan_for_writer(dev: Device, header: WalHeader, path: str, keep_offsets: bool) -> reader.ScanResult:
    from walctl.wal import reader
    from walctl.wal.verdict import unexplained_error

    result = reader.scan_report(dev, header, keep_offsets=keep_offsets)
    # A bad batch is a whole, valid record whose body is not a StreamRecordBatch: the log's
    # framing is intact, so writing after it overwrites no evidence (recover shows it).
    exc = unexplained_error(result.findings, path, framing_only=True,
                            hint="walctl will not write over it; inspect with 'walctl recover'")
    if exc is not None:
        raise exc
    return result


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
    opened = open_writer(path, scan=scan, keep_offsets=True, scan_without_checkpoint=True)
    writer = opened.writer
    try:
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
        RefusedError: a writer holds the lock. UsageError: ``offset`` is not after the trim
        point, past the log's end (a clean log), or no data record.
    """
    from walctl.wal.layout import Ring
    from walctl.wal.writer import check_record_at

    dev, state = _open_own_wal(path)
    try:
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


# A reader that found damage re-reads the header slots; while they keep changing under it (a
# writer starting, stopping or trimming), it scans again, at most this many times (each rescan
# reads the log once more), then reports that the log moved instead of judging it.
RESCANS = 3


@dataclass
class RecoverSession:
    """An open read-only view of a WAL for the readers (recover, status, read --wal).

    The race it answers (docs/CLI.md "Readers racing a writer"): a reader takes no lock, so a
    writer may start, append, trim (and wrap over what it trimmed) or stop while the reader
    scans. Every such change is preceded by a write of a header slot (a start marks the log
    ungraceful before its first block; a trim is durable before the ring space is reused; a
    stop drains its blocks, then marks the log clean). So damage that the scan found while
    the slots stayed as they were at open (``moved()`` says None) is on the device; damage
    found after they changed may be the writer's work in progress, judged by a rescan
    (``settled_scan``) of the log as it is then.
    """

    dev: object
    state: HeaderState
    warnings: list[str]
    writer_pid: int | None
    path: str = ""
    block_size: int | None = None  # the --block-size the slots were read at (AutoMQ WALs)

    def moved(self) -> str | None:
        """What changed since the header slots were read (open, or the last ``refresh``): the
        slots (a writer started, stopped or trimmed) or the lock's holder; None when neither."""
        try:
            now = self._read_state()
        except WalctlError as exc:  # (a slot being rewritten reads torn: the other one stands)
            return f"the header slots could not be read again ({exc.what})"
        if _slot_identity(now) != _slot_identity(self.state):
            return _describe_move(self.state.header, now.header)
        holder = self.writer_now()
        if holder != self.writer_pid:
            return ("a writer (pid %d) took the lock" % holder if holder is not None
                    else f"the writer (pid {self.writer_pid}) released the lock")
        return None

    def writer_now(self) -> int | None:
        """The pid holding the writer lock now (None: no writer, or unknown)."""
        from walctl.device.locks import lock_holder

        try:
            return lock_holder(self.path) if self.path else None
        except OSError:
            return None

    def refresh(self) -> None:
        """Read the header slots and the lock holder again: what a rescan starts from."""
        self.state = self._read_state()
        self.writer_pid = self.writer_now()

    def settled_scan(self, scan, attempts: int = RESCANS):
        """Scan again while the log moves: ``scan(session)`` (a whole scan from ``self.state``,
        returning a ScanResult) runs after a ``refresh``; a result with no damage a crash does
        not explain, or one the slots did not move under, is settled.

        Returns (result, settled, rescans): the last scan's result; settled False when the log
        moved under every one of ``attempts`` rescans (its damage then is not judged).
        """
        result = None
        for n in range(1, attempts + 1):
            self.refresh()
            result = scan(self)
            if not result.corrupt or self.moved() is None:
                return result, True, n
        return result, False, attempts

    def _read_state(self) -> HeaderState:
        if self.block_size is not None and self.state.header.flavour != "walctl":
            return _with_block_size(self.dev, read_wal_state(self.dev, self.path), self.block_size, self.path)
        return read_wal_state(self.dev, self.path)


def _slot_identity(state: HeaderState) -> tuple:
    """What tells two reads of the slots apart: each slot's header (every write of a slot
    carries a later timestamp) and checkpoint; a damaged slot by its error's text."""
    return tuple((s.index, s.header, s.checkpoint, None if s.error is None else str(s.error)) for s in state.slots)


def _describe_move(before: WalHeader, after: WalHeader) -> str:
    """How the current header changed, in words (for the 'log moved' warning)."""
    if before.clean and not after.clean:
        what = "a writer started"
    elif not before.clean and after.clean:
        what = "the writer stopped"
    elif after.trim_offset != before.trim_offset:
        what = f"the log was trimmed ({before.trim_offset} -> {after.trim_offset})"
    elif after.next_offset != before.next_offset:
        what = f"a writer appended (nextOffset {before.next_offset} -> {after.next_offset})"
    else:
        what = "a header slot was rewritten"
    return f"{what} while it was read"


def open_reader(path: str, *, block_size: int | None = None) -> RecoverSession:
    """Open read-only (no lock, never writes); the device warns when a writer holds it.

    ``block_size``: an AutoMQ WAL's block size as its JVM ran (recover --block-size): its
    header slots are read again at 0 and that size. Raises UsageError for a walctl WAL
    whose block size (4096) it is not.
    """
    from walctl.device.locks import lock_holder

    dev = open_device(path, writable=False)
    try:
        state = read_wal_state(dev, path)
        if block_size is not None:
            state = _with_block_size(dev, state, block_size, path)
    except BaseException:
        dev.close()
        raise
    warnings = list(dev.warnings)
    pid = None
    try:
        pid = lock_holder(path)
    except OSError:
        pid = None
    return RecoverSession(dev, state, warnings, pid, path, block_size)


def _with_block_size(dev: Device, state: HeaderState, size: int, path: str) -> HeaderState:
    """The header slots read again at 0 and ``size`` (AutoMQ WALs only)."""
    if state.header.flavour == "walctl":
        if size == state.header.block_size:
            return state
        raise UsageError("--block-size applies to AutoMQ WALs only; walctl's own use 4096", where=path,
                         hint="drop --block-size")
    try:
        return read_headers(dev, block_size=size)
    except WalctlError as exc:
        raise exc.at(path)
