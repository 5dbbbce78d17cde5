"""The WAL operations the commands call: init, open a writer (recover + seal), trim, recover.

Each returns result dataclasses and never prints; the layer above renders them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from walctl.device.blockio import create_file, open_device
from walctl.device.buffers import aligned_buffer
from walctl.device import safety
from walctl.device.blockio import zero_fill
from walctl.errors import (CorruptionError, FormatError, NotFoundError, RefusedError, UsageError,
                           WalctlError)
from walctl.failpoints import failpoint
from walctl.format import record as rec
from walctl.format.checkpoint import Checkpoint, bounded
from walctl.format.seal import SealDescriptor
from walctl.format.header import (HEADERS_SIZE, SLOT_SIZE, MIN_CAPACITY, SHUTDOWN_GRACEFUL, SHUTDOWN_UNGRACEFUL,
                                  WalHeader)
from walctl.wal import gaps, reader
from walctl.wal.headers import HeaderState, decode_slots, read_headers, write_header, write_slot
from walctl.wal.layout import Ring, align_down, align_up
from walctl.wal.writer import WINDOW_INITIAL_BYTES, WalWriter, check_record_at


@dataclass
class InitResult:
    path: str
    header: WalHeader
    created: bool
    device_size_bytes: int
    wiped_bytes: int  # record-area bytes written with zeros (a wipe of old data, or the prewrite)
    warnings: list[str] = field(default_factory=list)
    is_block_device: bool = False


def init_wal(path: str, capacity: int | None, *, node_id: int = -1, force: bool = False,
             progress=None, prewrite: bool = False) -> InitResult:
    """Write both header slots of a new, empty WAL; create ``path`` as a file if it does not exist.

    ``prewrite`` (regular files): write the whole record area once, so the first lap's
    O_DIRECT writes find allocated, written blocks instead of converting extents as they go.

    Raises:
        UsageError: capacity missing for a new file, too small, or larger than the device.
        RefusedError: mounted, held, a filesystem/partition signature or a WAL already there (no --force).
    """
    warnings: list[str] = []
    created = False
    if capacity is not None:
        capacity = align_down(capacity)
        if capacity < MIN_CAPACITY:
            raise UsageError(f"capacity {capacity} bytes is too small", where=path,
                             hint=f"at least {MIN_CAPACITY} bytes: two 4 KiB header slots and two blocks")
    if not os.path.lexists(path):
        if capacity is None:
            raise UsageError("--capacity is required to create a new WAL file", where=path)
        warnings += safety.check_safe_to_create(path, force=force)
        create_file(path, capacity)
        created = True
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
        if capacity is None:
            capacity = align_down(size)
            if capacity < MIN_CAPACITY:
                raise UsageError(f"device of {size} bytes is too small for a WAL", where=path,
                                 hint=f"at least {MIN_CAPACITY} bytes")
        if size < capacity:
            raise UsageError(f"device is smaller than the capacity: device {size} bytes, capacity {capacity} bytes",
                             where=path, hint="choose a smaller --capacity")
        previous_ts = 0
        wiped = 0
        if not created:
            previous_ts = _existing_wal_check(dev, path, force)
            dirty = previous_ts > 0 or _first_nonzero(dev, capacity) is not None
            if dirty and not previous_ts and not force:
                where = _first_nonzero(dev, capacity)
                raise RefusedError(f"the device holds data (non-zero bytes at byte {where}) but no valid WAL "
                                   f"header", where=path,
                                   hint="it may be a WAL whose headers were destroyed; pass --force to overwrite")
            if dirty:
                # An earlier WAL's records would pass every check of a new one (same offsets,
                # valid CRCs): wipe the record area so none can come back as phantom records.
                zero_fill(dev, HEADERS_SIZE, capacity - HEADERS_SIZE, progress)
                wiped = capacity - HEADERS_SIZE
        if prewrite and not dev.is_block_device and not wiped:
            # A filesystem allocates lazily: the first direct write to each region of a fresh
            # (sparse or fallocated) file also updates metadata. Pay that once, here.
            zero_fill(dev, HEADERS_SIZE, capacity - HEADERS_SIZE, progress)
            wiped = capacity - HEADERS_SIZE
        ring = capacity - HEADERS_SIZE
        ts = max(time.time_ns(), previous_ts + 1)
        header = WalHeader(capacity=capacity, trim_offset=-1, last_write_timestamp_ns=ts,
                           sliding_window_max_length=min(WINDOW_INITIAL_BYTES, ring), shutdown_type=SHUTDOWN_GRACEFUL,
                           node_id=node_id, epoch=-1, next_offset=0)
        # An empty log whose every stream is known (none): the first append needs no scan.
        checkpoint = Checkpoint(log_end=0, complete=True)
        write_slot(dev, 0, header, checkpoint)
        header = header.with_(last_write_timestamp_ns=ts + 1)
        write_slot(dev, 1, header, checkpoint)
        return InitResult(path, header, created, size, wiped, warnings, dev.is_block_device)
    except BaseException:  # failed or interrupted (SIGTERM): no half-made WAL file is left behind
        _remove_if_created(path, created)
        raise
    finally:
        dev.close()


def _remove_if_created(path: str, created: bool) -> None:
    if created:
        try:
            os.unlink(path)
        except OSError:
            pass


def _first_nonzero(dev, capacity: int, chunk: int = 8 << 20) -> int | None:
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


def _existing_wal_check(dev, path: str, force: bool) -> int:
    """Refuse to re-initialise a WAL (walctl's or AutoMQ's) without --force; return its timestamp."""
    buf = aligned_buffer(HEADERS_SIZE)
    dev.pread_into(0, buf)
    try:
        state = decode_slots(buf)
    except NotFoundError:
        return 0
    if not force:
        kind = "an AutoMQ WAL" if state.header.flavour != "walctl" else "a walctl WAL"
        raise RefusedError(f"the device already holds {kind}", where=path,
                           hint="init would destroy it; pass --force to re-initialise")
    return state.header.last_write_timestamp_ns


@dataclass
class OpenedWAL:
    """A locked writer plus what opening it established."""

    writer: WalWriter
    scan: reader.ScanResult | None  # None when a clean header let the open skip the scan
    sealed_ranges: int
    warnings: list[str]
    previous_shutdown: int
    checkpoint: Checkpoint | None = None  # what the open established (None: stream ends unknown)

    @property
    def header(self) -> WalHeader:
        return self.writer.header


def read_wal_state(dev, path: str) -> HeaderState:
    if dev.size_bytes < HEADERS_SIZE:
        raise NotFoundError(f"not a WAL: {dev.size_bytes} bytes, smaller than the two {SLOT_SIZE}-byte header "
                            f"slots", where=path)
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


def open_writer(path: str, *, scan: bool = False, iodepth: int = 4, on_ack=None,
                keep_offsets: bool = False, budget=None, need_stream: int | None = None,
                scan_without_checkpoint: bool = False) -> OpenedWAL:
    """Lock the device, recover it if the last writer crashed, and return a writer.

    A cleanly closed WAL with a checkpoint (FORMATS.md 1.6) opens from its headers alone.

    Args:
        scan: scan the log even after a clean shutdown.
        need_stream: the caller needs this stream's next offset: scan a clean log only when the
            checkpoint cannot tell it (no checkpoint, or one that lists too few streams).
        budget: a walctl.wal.pacing.Budget: block writes per second and bytes per second.
    Raises:
        NotFoundError: no valid header. RefusedError: another writer, or an AutoMQ WAL.
        CorruptionError: damage a crash cannot explain (walctl will not write over evidence).
    """
    dev = open_device(path, writable=True)
    try:
        state = read_wal_state(dev, path)
        header = state.header
        if header.flavour != "walctl":
            raise RefusedError(f"{header.flavour} WAL: walctl reads it for forensics but never writes to it",
                               where=path)
        previous = header.shutdown_type
        result = None
        sealed = 0
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
                sealed = seal(dev, header, result)
                next_offset = result.next_block_offset
            checkpoint = checkpoint_after_scan(state, result, need_stream)
        # The recovery scan's result is checkpointed now, so a trim during this run keeps it.
        state = write_header(dev, state, header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL, next_offset=next_offset),
                             checkpoint if checkpoint is not None else state.checkpoint)
        writer = WalWriter(dev, state, next_offset, iodepth=iodepth, on_ack=on_ack, budget=budget,
                           checkpoint=checkpoint)
    except BaseException:
        dev.close()
        raise
    return OpenedWAL(writer, result, sealed, list(dev.warnings), previous, checkpoint)


def _scan_for_writer(dev, header: WalHeader, path: str, keep_offsets: bool):
    result = reader.ScanResult(header, Ring(header.capacity))
    for _ in reader.scan(dev, header, result=result, keep_offsets=keep_offsets):
        pass
    # A bad batch is a whole, valid record whose body is not a StreamRecordBatch: the log's
    # framing is intact, so writing after it overwrites no evidence (recover shows it).
    damage = [f for f in result.corrupt if f.kind != reader.BAD_BATCH]
    if damage:
        first = damage[0]
        raise CorruptionError(f"the log is damaged ({first.kind} at offset {first.offset}: {first.reason})",
                              where=path, offset=first.offset,
                              hint="walctl will not write over it; inspect with 'walctl recover'")
    return result


def seal(dev, header: WalHeader, result: reader.ScanResult) -> int:
    """Make crash damage of the last window unreadable as damage (FORMATS.md 1.4, sealing).

    Holes followed by valid records become padding records (the chain then jumps to
    the next valid record); torn records past the end of the log lose their header,
    so a later, shorter log never meets them as a bad body. Returns ranges patched.
    """
    ring = Ring(header.capacity)
    patches: dict[int, bytes] = {}

    def fill(start: int, end: int, evidence: bytes = b"") -> None:
        """Make [start, end) skippable: zeros up to the 4 KiB boundary, then padding records,
        one per lap (a record never crosses the end of a lap), each starting its body with
        ``evidence`` (the seal descriptor) where it has room."""
        boundary = min(align_up(start), end)
        if start % 4096:
            patches[start] = bytes(boundary - start)
        while boundary < end:
            stop = min(end, ring.lap_end(boundary))
            data = rec.RecordHeader.padding(boundary, stop - boundary).encode()
            if len(evidence) <= min(stop - boundary, 4096) - len(data):
                data += evidence
            patches[boundary] = data
            boundary = stop

    # The crash evidence outlives the damaged bytes (FORMATS.md 1.5): each sealed hole says
    # what it covered, when it was sealed, and which stream offsets it cost.
    holes = gaps.holes_of(result.findings, [])
    sealed_at = time.time_ns()

    def wipe(offset: int) -> None:
        """Past the end of the log: zero from ``offset`` to the next 4 KiB boundary, so neither
        a torn record's header nor the rest of its body can be read there again."""
        patches.setdefault(offset, bytes(align_up(offset + 1) - offset))

    for finding in result.findings:
        if finding.kind == reader.HOLE and finding.end_offset is not None:
            costs = [(g.stream_id, g.from_offset, g.to_offset) for g in result.stream_gaps
                     if (h := gaps.explain(g, holes)) is not None and h.start == finding.offset]
            evidence = SealDescriptor(finding.offset, finding.end_offset, sealed_at,
                                      header.last_write_timestamp_ns, tuple(costs)).encode()
            fill(finding.offset, finding.end_offset, evidence)
    for offset in result.torn_offsets + result.unaligned_damage:
        if offset >= result.end_offset:
            wipe(offset)
    for offset, data in sorted(patches.items()):
        _patch(dev, ring, offset, data)
    if patches:
        _, check = reader.run_scan(dev, header.with_(shutdown_type=SHUTDOWN_GRACEFUL,
                                                     next_offset=result.next_block_offset), probe=False)
        leftover = [f for f in check.findings if f.kind not in (reader.END_MISMATCH, reader.BAD_BATCH)]
        if leftover or check.end_offset != result.end_offset or check.records != result.records:
            first = leftover[0] if leftover else None
            raise CorruptionError("sealing did not leave a clean log" +
                                  (f" ({first.kind} at offset {first.offset}: {first.reason})" if first else ""),
                                  offset=result.end_offset, hint="nothing new was written; inspect with 'walctl recover'")
    return len(patches)


def _patch(dev, ring: Ring, offset: int, data: bytes) -> None:
    """Read, patch and durably rewrite the 4 KiB sectors holding logical [offset, offset+len(data))."""
    phys = ring.physical(offset)
    start = align_down(phys)
    buf = aligned_buffer(align_up(phys + len(data)) - start)
    dev.pread_into(start, buf)
    buf[phys - start:phys - start + len(data)] = data
    # Durability: O_DSYNC / fdatasync as every WAL write; sealing is done before the first new block.
    dev.pwrite(start, buf)


@dataclass
class TrimResult:
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
    # Without a trusted checkpoint (a WAL written before them) trim scans, as it always did.
    opened = open_writer(path, scan=scan, keep_offsets=True, scan_without_checkpoint=True)
    writer = opened.writer
    try:
        previous = writer.header.trim_offset
        end = writer.acked_end
        if offset <= previous:
            raise UsageError(f"trim offset {offset} is not after the current trim point {previous}",
                             where=path, hint="the trim point only moves forward")
        if offset >= end:
            near = _records_near(writer.dev, writer.ring, end, max(previous, 0), end)
            raise UsageError(f"no live record starts at offset {offset}: the log ends at {end}", where=path,
                             hint=("nearest record offsets: " + ", ".join(map(str, near))) if near else
                             "give an offset that append, upload or recover printed")
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


NEAR_SEARCH_BYTES = 1 << 20  # how far before a wrong trim offset to look for a block start (the hint)


def _records_near(dev, ring: Ring, offset: int, start: int, end: int) -> list[int]:
    """The record offsets just before and after ``offset``, for an error's hint: find a block
    start at most 1 MiB before it, then follow its records (reads about that much, not the log)."""
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


@dataclass
class RecoverSession:
    """An open read-only view for the recover command."""

    dev: object
    state: HeaderState
    warnings: list[str]
    writer_pid: int | None


def open_reader(path: str) -> RecoverSession:
    """Open read-only (no lock, never writes); the device warns when a writer holds it."""
    from walctl.device.blockio import lock_holder

    dev = open_device(path, writable=False)
    try:
        state = read_wal_state(dev, path)
    except BaseException:
        dev.close()
        raise
    warnings = list(dev.warnings)
    pid = None
    try:
        pid = lock_holder(path)
    except OSError:
        pid = None
    return RecoverSession(dev, state, warnings, pid)


def header_slot_findings(state: HeaderState) -> list[reader.Finding]:
    ring = Ring(state.header.capacity)
    out = []
    for slot in state.bad_slots:
        out.append(reader.Finding(reader.BAD_HEADER_SLOT, 0, ring, f"header slot {slot.index}: {slot.error}",
                                  explained=True, physical_offset=slot.position))
    return out
