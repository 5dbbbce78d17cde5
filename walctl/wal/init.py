"""``walctl init``: write both header slots of a new, empty WAL (creating the file), refusing to
wipe a filesystem, a partition table or a WAL that holds records not yet uploaded.

Returns result dataclasses and never prints; the layer above renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os
import time
from dataclasses import dataclass, field

from walctl.device.buffers import align_down, aligned_buffer  # (walctl.wal.layout's twins)
from walctl.device.opening import open_device
from walctl.errors import IOFailure, NotFoundError, RefusedError, UsageError
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import HEADERS_SIZE, MIN_CAPACITY, SHUTDOWN_GRACEFUL, WalHeader
from walctl.wal.headers import HeaderState, decode_slots, write_slot
from walctl.wal.lifecycle import trusted_checkpoint

if TYPE_CHECKING:
    from walctl.device.base import Device


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
