"""The WAL writer (docs/FORMATS.md 1.3): records batched into 4 KiB-aligned blocks, several in flight.

Invariants this module keeps, and recovery relies on:
- a block starts at a 4 KiB aligned logical offset and is written zero-padded to 4 KiB;
- a record never crosses the end of a lap: a padding record fills the rest of the lap;
- no block ends more than one ring past the trim point: a record that would end past it waits
  up to ``full_wait_s`` for a trim to free room (backpressure: appends block, nothing is
  dropped; the wait starts again whenever a trim frees some room), then FullError;
- no block is submitted that ends past ``window_start + slidingWindowMaxLength``, where
  window_start is the first offset not yet durable: the header carrying a larger
  window is durable first. So a crash leaves holes only inside one window;
- a record is acknowledged (``on_ack``) only when its block and every earlier block
  are durable, in log order.

Group commit: a block closes (its place in the log becomes final and its write may start)
when the next record would pass the soft limit or the lap end, or once its first record has
waited ``batch_interval_s`` and an I/O slot is free; until then, and while every slot is busy,
arriving records join it. So blocks fill under light load as under heavy load, and a record
waits at most ``batch_interval_s`` longer than it would if every record were written at once
(plus the write of the block itself). ``submit_open_block``, ``drain`` and ``close`` close the
open block at once. Batching never changes durability: records are acknowledged only once
their block's write has completed.

With a budget (walctl.wal.pacing), block writes start no faster than its IOPS and
bandwidth allow; while the budget holds them, records keep batching into the current
block (up to the soft limit), so payload throughput grows with batching rather than
with the number of writes. Every block's stages (queued, budget, write, flush) are
recorded in ``stages``.

The writer is one object in four modules, one job each: this one (the facade: state, the public
calls that are not appends, close and the header), walctl.wal.writer_blocks (placing and packing
records into blocks), walctl.wal.writer_window (submission, completion, acknowledgement in log order,
the budget timer) and walctl.wal.writer_room (backpressure on a full ring, FullWait).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from walctl.defaults import DEFAULT_IODEPTH  # (re-bound: callers import it from here)
from walctl.device.buffers import aligned_buffer
from walctl.errors import IOFailure, UsageError, WalctlError
from walctl.format import record as rec
from walctl.format.checkpoint import Checkpoint, bounded
from walctl.format.header import SHUTDOWN_GRACEFUL
from walctl.wal.headers import KEEP, HeaderState, write_header
from walctl.wal.layout import Ring, align_up
from walctl.wal.pacing import Budget, Pacer, StageRecorder
from walctl.wal.writer_blocks import Block, BlockBuilder, Frames
from walctl.wal.writer_room import FullWait, RoomKeeper
from walctl.wal.writer_window import SubmissionWindow

if TYPE_CHECKING:
    from walctl.device.base import Device


def open_write_queue(dev, iodepth: int):
    """walctl.device.writequeue's open_write_queue, imported on the first writer: a command that only
    reads (recover, status, read --wal) never loads the write queues and their AIO bindings."""
    from walctl.device.writequeue import open_write_queue as open_queue

    return open_queue(dev, iodepth)


BLOCK_SOFT_LIMIT_BYTES = 256 << 10  # AutoMQ's block size soft limit: big enough to batch, small enough for latency
WINDOW_INITIAL_BYTES = 1 << 20  # sliding window: initial 1 MiB,
# grown by 4 MiB steps (writer_window.WINDOW_SCALE_UNIT_BYTES),
WINDOW_UPPER_LIMIT_BYTES = 512 << 20  # up to 512 MiB (all capped at the ring size)
# Group commit: a block that is not full waits this long after its first record before its
# write starts, so the records that arrive meanwhile share it. Without it, a record that
# finds an I/O slot idle is written at once, alone in a 4 KiB block: a trickle of 1 KiB
# records grows the log ~3.8x the record bytes, and bench/soak.py at 20 MiB/s measured
# 1.12x (30 MiB/s of log in an earlier run) against 1.01x with 2 ms. At 20 MiB/s, 2 ms
# gathers ~40 KiB (padding < 5 %); the added latency is at most this (AutoMQ writes at most
# one block per 1/iops s, 333 us at its default 3000 IOPS, and caps a block at the soft limit
# as here).
DEFAULT_BATCH_INTERVAL_S = 0.002

AckCallback = Callable[[int, Any], None]
# append_many's acknowledgements: (record offsets, the call's token, index of the first in its payloads)
AcksCallback = Callable[[list, Any, int], None]


class WalWriter(BlockBuilder, SubmissionWindow, RoomKeeper):
    """Appends records to an open, locked WAL device; see the module doc for the guarantees."""

    def __init__(self, dev: Device, state: HeaderState, next_offset: int, *, iodepth: int = DEFAULT_IODEPTH,
                 block_soft_limit_bytes: int = BLOCK_SOFT_LIMIT_BYTES, on_ack: AckCallback | None = None,
                 window_upper_limit_bytes: int = WINDOW_UPPER_LIMIT_BYTES, budget: Budget | None = None,
                 checkpoint: Checkpoint | None = None, batch_interval_s: float = DEFAULT_BATCH_INTERVAL_S):
        if iodepth < 1:
            raise UsageError(f"iodepth must be >= 1, got {iodepth}")
        self.dev = dev
        self.state = state
        self.ring = Ring(state.header.capacity)
        self._ring_bytes = self.ring.size
        self._ring_head = self.ring.headers_size  # physical offset of logical 0 (Ring.physical, per block)
        self._room_end = max(state.header.trim_offset, 0) + self._ring_bytes  # the log ends before it (_set_room_end)
        self.next_block = next_offset
        self.iodepth = iodepth
        self.run_ahead = iodepth  # closed blocks the appender may queue while every slot is busy
        self.block_soft_limit_bytes = block_soft_limit_bytes
        self.on_ack, self.on_acks = on_ack, None  # on_acks (AcksCallback): append_many's, a block's at once
        self.on_frames: Callable[[Frames], None] | None = None  # append_frames's, per call and block
        self.window_cap_bytes = min(window_upper_limit_bytes, self.ring.size)
        self.batch_interval_s = batch_interval_s
        lock = threading.RLock()
        self._mutex = lock  # taken directly on the per-record path (Condition.__enter__ is a Python call)
        self._lock = threading.Condition(lock)
        # The timer thread (budget and batch interval) sleeps on its own condition (same lock):
        # completions, which wake the appender, must not wake it too.
        self._timer_cond = threading.Condition(lock)
        self._cur: Block | None = None
        self._ready: deque[_Block] = deque()  # closed blocks waiting for an I/O slot, in log order
        self._inflight, self._knocks = deque(), deque()  # blocks in flight; completions waiting for the lock
        self._busy = 0  # blocks whose write has not completed (I/O slots in use)
        self._failed: BaseException | None = None
        self._closed = False
        # Blocks go through the device layer's write queue: io_uring or native AIO on an O_DIRECT
        # device (one reaper thread, no thread per write), threads elsewhere. Either calls back only
        # once the write is durable.
        self._queue = open_write_queue(dev, iodepth)
        self._buffer_bytes = align_up(block_soft_limit_bytes)
        self._spare_buffers: list = []  # block buffers of _buffer_bytes, reused: no mmap per block
        self._clock = time.perf_counter_ns
        self.budget = budget if budget is not None and budget.limited else None
        self._pacer = Pacer(self.budget, self._clock) if self.budget is not None else None
        # When the timer thread should look at the open block again: the budget may allow its
        # write, or its batch interval ends (perf_counter_ns; None: nothing to wake for).
        self._timer_due_ns: int | None = None
        # The budget stalls the writer from the moment it holds a block that could otherwise be
        # written (an I/O slot is free) until the next write starts; a block's "budget" stage is
        # how much of its queued time the writer spent stalled.
        self._stall_since_ns = 0
        self._stall_total_ns = 0
        self._timer_thread: threading.Thread | None = None  # started when first needed
        self.stages = StageRecorder()
        # Checkpoint (FORMATS.md 1.6): what the log holds as of its durable, acknowledged end.
        # ``checkpoint`` is what the open established (None: unknown, nothing is claimed).
        base = checkpoint or Checkpoint(log_end=next_offset)
        self.acked_end = base.log_end  # end of the last acknowledged record
        self.stream_ends: dict[int, int] = dict(base.streams)  # stream -> next offset (acked records)
        self._stream_recency: dict[int, int] = {}  # stream -> offset of its last acked record
        self._streams_complete = base.complete
        self.uploaded_offset = base.uploaded_offset
        self._untracked = checkpoint is None  # records without a stream mark: stream ends unknown
        self.before_close: list[Callable[[], None]] = []  # e.g. stop the trim hand-off listener
        self.full = FullWait()  # backpressure: how a full ring holds appends back
        # stats; slot_wait_ns: appends' time waiting for an I/O slot (run_ahead blocks queued; not drain's)
        self.blocks_written = self.bytes_written = self.records_acked = self.header_writes = self.slot_wait_ns = 0

    # -- public API -----------------------------------------------------------------
    @property
    def header(self):
        return self.state.header

    @property
    def io_engine(self) -> str:
        """How blocks are written: "io_uring", "aio" (native AIO) or "threads" (walctl.device.blockio)."""
        return self._queue.engine

    @property
    def batch_interval_s(self) -> float:
        """Longest a block that is not full waits for more records before its write starts (see the module doc)."""
        return self._batch_interval_ns / 1e9

    @batch_interval_s.setter
    def batch_interval_s(self, seconds: float) -> None:
        if not seconds >= 0:
            raise UsageError(f"the batch interval must be 0 or more seconds, got {seconds}")
        self._batch_interval_ns = int(seconds * 1e9)

    @property
    def trim_start(self) -> int:
        return max(self.state.header.trim_offset, 0)

    def submit_open_block(self) -> None:
        """Close the open block now, without waiting for its batch interval, and start its write
        (waiting for a free I/O slot if needed). It makes nothing durable by itself: a record is
        durable once ``on_ack`` saw it, or after ``drain``."""
        with self._lock:
            self._check_usable()
            self._submit_cur(wait=True)

    def drain(self) -> None:
        """Submit everything and wait until every block is durable and acknowledged."""
        with self._lock:
            self._check_usable()
            self._submit_cur(wait=True)
            while self._inflight and self._failed is None:
                self._lock.wait()
            self._check_usable()

    def update_header(self, **changes) -> None:
        """Durably write a new header (trim point and the like) into the other slot."""
        with self._lock:
            self._check_usable()
            self._write_header(**changes)

    def checkpoint(self) -> Checkpoint:
        """What the acknowledged part of the log holds (FORMATS.md 1.6), bounded to fit a slot."""
        with self._lock:
            if self._untracked:
                return Checkpoint(self.acked_end, uploaded_offset=self.uploaded_offset)
            streams, kept_all = bounded(self.stream_ends, self._stream_recency)
            return Checkpoint(self.acked_end, streams, self._streams_complete and kept_all, self.uploaded_offset)

    def trim_to(self, offset: int, *, uploaded: bool = False) -> int:
        """Move the trim point to ``offset`` from inside the running writer, durably, with a checkpoint.

        ``offset`` must be a data record at or after the trim point (checked by reading its header)
        whose block is acknowledged. ``uploaded``: an upload committed every record up to it.
        Returns the previous trim offset.

        Raises:
            UsageError: ``offset`` is not after the trim point, not acknowledged yet, or not a record.
        """
        with self._lock:
            self._check_usable()
            previous = self.state.header.trim_offset
            if offset <= previous:
                if offset == previous:
                    return previous
                raise UsageError(f"trim offset {offset} is before the current trim point {previous}",
                                 hint="the trim point only moves forward")
            if offset >= self.acked_end:
                raise UsageError(f"offset {offset} is not in the acknowledged log (it ends at {self.acked_end})")
            check_record_at(self.dev, self.ring, offset)
            if uploaded:
                self.uploaded_offset = max(self.uploaded_offset, offset)
            # nextOffset of a running writer's header is not trusted (shutdownType 1), but it must
            # not fall behind the trim point: the acknowledged end is a true lower bound.
            self._write_header(trim_offset=offset, next_offset=max(self.state.header.next_offset,
                                                                   align_up(self.acked_end)),
                               checkpoint=self.checkpoint())
            return previous

    def close(self) -> None:
        """Drain, then mark the shutdown graceful with nextOffset so the next open needs no scan.

        After a failure the header is left saying "ungraceful": the next writer scans.
        """
        if self._closed:
            return
        self._run_before_close()
        try:
            if self._failed is None:
                self.drain()
                with self._lock:
                    self._write_header(shutdown_type=SHUTDOWN_GRACEFUL, next_offset=self.next_block,
                                       checkpoint=self.checkpoint())
        finally:
            with self._lock:
                self._closed = True
                self._lock.notify_all()
                self._timer_cond.notify_all()
            self._stop_timer()
            self._queue.close()
            self.dev.close()
        if self._failed is not None:
            raise self._as_failure(self._failed)

    def abort(self) -> None:
        """Stop without the clean-shutdown header (the next writer scans), and release the device."""
        self._run_before_close()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
            self._timer_cond.notify_all()
        self._stop_timer()
        self._queue.close()
        self.dev.close()

    def _run_before_close(self) -> None:
        hooks, self.before_close = self.before_close, []
        for hook in hooks:
            hook()
    # -- helpers -------------------------------------------------------------------
    def _write_header(self, checkpoint=KEEP, **changes) -> None:
        try:
            self.state = write_header(self.dev, self.state, self.state.header.with_(**changes), checkpoint)
        except WalctlError as exc:
            self._failed = exc
            raise
        self._set_room_end()  # the trim point may have moved
        self._lock.notify_all()  # an append waiting for room (_wait_for_room)
        self.header_writes += 1

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._as_failure(self._failed)
        if self._closed:
            raise RuntimeError("writer is closed")

    @staticmethod
    def _as_failure(exc: BaseException) -> WalctlError:
        if isinstance(exc, WalctlError):
            return exc
        return IOFailure(f"write failed: {exc}")


def check_record_at(dev: Device, ring: Ring, offset: int) -> rec.RecordHeader:
    """Read the record header at logical ``offset``: a valid data record that says it sits there.

    One aligned read of the 4 KiB holding the header (two when it crosses a boundary); the header
    carries its own logical offset, so bytes of an earlier lap never pass.

    Raises:
        UsageError: no data record starts at ``offset``.
    """
    from walctl.errors import FormatError

    phys = ring.physical(offset)
    start = phys - phys % 4096
    buf = aligned_buffer(align_up(phys + rec.SIZE) - start)
    if offset + rec.SIZE > ring.lap_end(offset):
        raise UsageError(f"no live record starts at offset {offset}", hint="it is too close to the end of a lap")
    dev.pread_into(start, buf)
    try:
        head = rec.RecordHeader.decode(memoryview(buf)[phys - start:phys - start + rec.SIZE], expected_offset=offset)
    except FormatError as exc:
        raise UsageError(f"no live record starts at offset {offset} ({exc})",
                         hint="give an offset that append, upload or recover printed") from exc
    if head.is_padding:
        raise UsageError(f"offset {offset} holds a padding record, not a data record",
                         hint="give an offset that append, upload or recover printed")
    return head
