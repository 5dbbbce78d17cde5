"""The WAL's lifecycle: open a writer (recovering and repairing a crashed log first), and the header
state every opener reads. Its other rooms: init.py (init), trim.py (trim), readsession.py (the
read-only open the readers use).

Each returns result dataclasses and never prints; the layer above renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from walctl.defaults import DEFAULT_IODEPTH
from walctl.device.buffers import align_up  # (walctl.wal.layout's twins)
from walctl.device.opening import open_device, trim_wait_seconds
from walctl.errors import CorruptionError, NotFoundError, RefusedError, WalctlError
from walctl.format.checkpoint import Checkpoint, bounded
from walctl.format.header import HEADERS_SIZE, SLOT_SIZE, SHUTDOWN_UNGRACEFUL, WalHeader
from walctl.wal.headers import HeaderState, read_headers, write_header

if TYPE_CHECKING:
    from walctl.device.base import Device
    from walctl.wal import reader
    from walctl.wal.crash_repair import RepairResult
    from walctl.wal.writer import WalWriter

# The writer and the crash repair are imported by the functions that write (open_writer, trim,
# init): a reader (recover, status) does not load them (start-up of a short command). Nor does
# it load what only init uses (device creation, safety checks) or the scan (walctl.wal.reader,
# the verdict): status of a cleanly closed WAL answers from its header slots alone.


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


def _open_own_wal(path: str, *, trim_mark: bool, trim_wait_s: float = 0.0,
                  on_wait=None) -> tuple[Device, HeaderState]:
    """The device opened for writing (the writer lock taken) and its header state, for a walctl
    WAL only (RefusedError for an AutoMQ one). On any error the device is closed again.
    ``trim_mark``, ``trim_wait_s``, ``on_wait``: walctl.device.opening.open_device's."""
    dev = open_device(path, writable=True, trim_mark=trim_mark, trim_wait_s=trim_wait_s, on_wait=on_wait)
    try:
        state = read_wal_state(dev, path)
        refuse_foreign(state.header, path)
    except BaseException:
        dev.close()
        raise
    return dev, state


def open_writer(path: str, *, scan: bool = False, iodepth: int = DEFAULT_IODEPTH, on_ack=None,
                keep_offsets: bool = False, budget=None, need_stream: int | None = None,
                scan_without_checkpoint: bool = False, batch_interval_s: float | None = None,
                trim_mark: bool = False, trim_wait_s: float | None = None, on_trim_wait=None) -> OpenedWAL:
    """Lock the device, recover it if the last writer crashed, and return a writer.

    A cleanly closed WAL with a checkpoint (FORMATS.md 1.6) opens from its headers alone.

    Args:
        scan: scan the log even after a clean shutdown.
        need_stream: the caller needs this stream's next offset: scan a clean log only when the
            checkpoint cannot tell it (no checkpoint, or one that lists too few streams).
        budget: a walctl.wal.pacing.Budget: block writes per second and bytes per second.
        batch_interval_s: the writer's group-commit wait (None: the writer's default).
        trim_mark: the caller only trims and closes (walctl trim): say so to the writers it refuses
            (walctl.device.locks.mark_trim), which wait for it.
        trim_wait_s: while a trim holds the device, wait up to this long for it (None:
            WALCTL_TRIM_WAIT or 30 s, walctl.device.opening.trim_wait_seconds); ``on_trim_wait(message)``
            is told once when the wait begins (None: a logged warning, on stderr).
    Raises:
        NotFoundError: no valid header. RefusedError: another writer, a trim that did not finish
            within ``trim_wait_s``, or an AutoMQ WAL.
        CorruptionError: damage a crash cannot explain (walctl will not write over evidence).
    """
    from walctl.wal.writer import WalWriter

    dev, state = _open_own_wal(path, trim_mark=trim_mark, on_wait=on_trim_wait,
                               trim_wait_s=trim_wait_seconds() if trim_wait_s is None else trim_wait_s)
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
            result = _scan_for_writer(dev, state, path, keep_offsets)
            if not header.clean:
                from walctl.wal.crash_repair import repair_crash_damage  # a crashed writer's log only

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


def _scan_for_writer(dev: Device, state: HeaderState, path: str, keep_offsets: bool) -> reader.ScanResult:
    from walctl.wal import reader
    from walctl.wal.verdict import durable_points, judge_by_durable, unexplained_error

    header = state.header
    result = reader.scan_report(dev, header, keep_offsets=keep_offsets)
    if not header.clean:
        # A hole below a durable point (the checkpoint's log end, the header's recorded end) held
        # acknowledged records: corruption, as recover and upload call it, never a crash hole to
        # seal, however far the crashed writer's window reached (FORMATS.md 1.4).
        judge_by_durable(result.findings, durable_points(state))
    # A bad batch is a whole, valid record whose body is not a StreamRecordBatch: the log's
    # framing is intact, so writing after it overwrites no evidence (recover shows it).
    exc = unexplained_error(result.findings, path, framing_only=True,
                            hint="walctl will not write over it; inspect with 'walctl recover'")
    if exc is not None:
        raise exc
    return result


# The other rooms of the lifecycle, under their old names here for the callers outside wal/ that
# import them from this module (commands/, status, bench/): loaded on first use (PEP 562), so a
# reader importing open_reader does not load init's or trim's code.
from walctl.lazynames import module_getattr  # noqa: E402

_MOVED = {"InitResult": "init", "init_wal": "init", "Unuploaded": "init", "unuploaded": "init",
          "TrimResult": "trim", "trim_wal": "trim", "trim_scanned": "trim", "NEAR_SEARCH_BYTES": "trim",
          "RESCANS": "readsession", "RecoverSession": "readsession", "open_reader": "readsession"}
__getattr__ = module_getattr(__name__, _MOVED, globals(), package="walctl.wal")
