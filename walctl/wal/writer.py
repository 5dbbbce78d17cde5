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
"""

from __future__ import annotations

import threading
import time
from collections import deque
from itertools import accumulate
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from walctl.device.buffers import aligned_buffer
from walctl.errors import FullError, IOFailure, UsageError, WalctlError
from walctl.format import batch as batch_format
from walctl.format import record as rec
from walctl.format.bulk import pack_records as _pack_records
from walctl.format import framepack as _framepack
from walctl.format.checkpoint import Checkpoint, bounded
from walctl.format.header import SHUTDOWN_GRACEFUL
from walctl.wal.headers import KEEP, HeaderState, write_header
from walctl.wal.layout import Ring, align_up
from walctl.wal.pacing import Budget, Pacer, StageRecorder
from walctl.device.signals import signals_deferred as _signals_deferred

if TYPE_CHECKING:
    from walctl.device.base import Device


def open_write_queue(dev, iodepth: int):
    """walctl.device.writequeue's open_write_queue, imported on the first writer: a command that only
    reads (recover, status, read --wal) never loads the write queues and their AIO bindings."""
    from walctl.device.writequeue import open_write_queue as open_queue

    return open_queue(dev, iodepth)


BLOCK_SOFT_LIMIT_BYTES = 256 << 10  # AutoMQ's block size soft limit: big enough to batch, small enough for latency
WINDOW_INITIAL_BYTES = 1 << 20  # sliding window: initial 1 MiB,
WINDOW_SCALE_UNIT_BYTES = 4 << 20  # grown by 4 MiB steps,
WINDOW_UPPER_LIMIT_BYTES = 512 << 20  # up to 512 MiB (all capped at the ring size)
DEFAULT_IODEPTH = 4
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
_MANY_OVERHEAD = rec.SIZE + batch_format.HEADER_SIZE  # bytes of an append_many record besides its payload
_NO_BLOCK = bytearray(0)  # append_frames with no open block: frame_pack only reports the next record's size


class Frames:
    """Records one append_frames call packed into one block, as its acknowledgement reports them:
    ``count`` records of ``stream_id`` from stream offset ``base_offset``, the first at WAL
    ``offset``, the last at ``last_offset``, ``payload_bytes`` of payload; ``acks``: their
    acknowledgement text rendered at packing (walctl.format.bulk frame_pack's ``render``), or None."""

    __slots__ = ("offset", "last_offset", "count", "payload_bytes", "stream_id", "base_offset", "acks")

    def __init__(self, offset: int, last_offset: int, count: int, payload_bytes: int, stream_id: int,
                 base_offset: int, acks: bytes | None):
        self.offset, self.last_offset, self.count, self.payload_bytes = offset, last_offset, count, payload_bytes
        self.stream_id, self.base_offset, self.acks = stream_id, base_offset, acks


@dataclass(frozen=True)
class FrameSpec:
    """What append_frames packs: records framed as lines (else 4-byte length-prefixed), each the
    payload of a StreamRecordBatch of ``stream_id`` and ``epoch``; payloads over ``max_payload``
    stop it; ``render``: the acknowledgement text to render (0 none, 1 offsets, 2 NDJSON)."""

    lines: bool
    stream_id: int
    epoch: int
    max_payload: int
    render: int = 0


class _Many:
    """Records one append_many call packed into one block: ``count`` payloads from ``index``, the first at ``offset``."""

    __slots__ = ("offset", "payloads", "index", "count", "token")

    def __init__(self, offset: int, payloads, index: int, count: int, token: Any):
        self.offset, self.payloads, self.index, self.count, self.token = offset, payloads, index, count, token


@dataclass
class _Block:
    start: int
    end: int  # logical end of the block's extent (padding blocks extend to the lap end)
    records: list = field(default_factory=list)  # (offset, token) per append, a _Many per append_many
    # (stream id, next stream offset, record offset) of the records that carry a stream batch
    stream_marks: list[tuple[int, int, int]] = field(default_factory=list)
    log_end: int = 0  # end of its last record (padding blocks: the lap end), set when closed
    lap_end: int = 0  # where the lap holding the block ends: its records stop there
    # Records are encoded straight into the aligned buffer that is written (zero-padded to
    # 4 KiB when closed): no intermediate copy of the block.
    buf: Any = None
    length: int = 0  # bytes of records (or of the padding record's header) in buf
    done: bool = False
    error: BaseException | None = None
    # For the latency breakdown (perf_counter_ns): the first record came, the writer's
    # budget-stall clock at that moment (see WalWriter._stalled_ns), the write started.
    opened_ns: int = 0
    stall_at_open_ns: int = 0
    submitted_ns: int = 0
    budget_ns: int = 0  # of its queued time, how long the budget stalled the writer
    min_limit: int = 0  # append_frames: a record this large was placed in it and must fit


@dataclass
class FullWait:
    """Backpressure: how long an append waits for a trim to free room in a full ring before
    FullError (``wait_s``, 0: at once), who is told when a wait starts (``on_full(True)``) and ends
    (``on_full(False)``), what says why nothing freed room (``why()``, for FullError), and counts."""

    wait_s: float = 0.0
    on_full: Callable[[bool], None] | None = None
    why: Callable[[], str] | None = None
    waits: int = 0  # how many times appends were held back
    total_s: float = 0.0  # for how long in all


class WalWriter:
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
        self._cur: _Block | None = None
        self._ready: deque[_Block] = deque()  # closed blocks waiting for an I/O slot, in log order
        self._inflight: deque[_Block] = deque()
        self._busy = 0  # blocks whose write has not completed (I/O slots in use)
        self._failed: BaseException | None = None
        self._closed = False
        # Blocks go through the device layer's write queue: native AIO on an O_DIRECT device
        # (one reaper thread, no thread per write), threads elsewhere. Either calls back only
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
        # stats
        self.blocks_written = self.bytes_written = self.records_acked = self.header_writes = 0

    # -- public API -----------------------------------------------------------------
    @property
    def header(self):
        return self.state.header

    @property
    def io_engine(self) -> str:
        """How blocks are written: "aio" (native AIO) or "threads" (walctl.device.blockio)."""
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

    def append(self, body: bytes, token: Any = None, stream: tuple[int, int] | None = None) -> int:
        """Queue one record; returns its WAL offset. It is durable only once ``on_ack`` saw it.

        ``stream``: (stream id, next stream offset after this record) when the body is a
        StreamRecordBatch; the checkpoint written at close and at trim tracks it. A record
        appended without it makes the stream ends unknown (the checkpoint lists none).
        """
        record_bytes = rec.SIZE + len(body)
        if record_bytes > self._ring_bytes or align_up(record_bytes) > self.window_cap_bytes:
            raise UsageError(f"record of {len(body)} bytes does not fit this WAL "
                             f"(ring {self.ring.size} bytes, window limit {self.window_cap_bytes} bytes)")
        # Completions waiting in the queue run here rather than after a GIL switch to its
        # reaper thread: a busy appender would otherwise delay them by the switch interval.
        if not self._closed:
            self._queue.poll()
        with self._mutex:
            if self._failed is not None or self._closed:
                self._check_usable()
            offset = self._place(record_bytes)
            cur = self._cur
            pos = cur.length
            buf = cur.buf
            rec.pack_data_header_into(buf, pos, offset, body)
            buf[pos + rec.SIZE:pos + record_bytes] = body
            cur.length = pos + record_bytes
            cur.records.append((offset, token))
            if stream is not None:
                cur.stream_marks.append((stream[0], stream[1], offset))
            else:
                self._untracked = True
            # With closed blocks waiting, or every slot busy, a completion starts the next write
            # (and closes this block when its turn comes): nothing to do here.
            if not self._ready and self._busy < self.iodepth:
                self._submit_cur(wait=False)
            return offset

    def append_many(self, payloads, stream_id: int, epoch: int, base_offset: int, token: Any = None, *,
                    index: int = 0) -> int:
        """Queue records carrying ``payloads[index:]`` as far as the open block takes them; returns how many
        (at least 1 when any is left; the caller calls again with ``index`` moved on).

        Each record's body is a StreamRecordBatch (``stream_id``, ``epoch``, baseOffset ``base_offset``
        for ``payloads[index]`` and one more for each next, count 1, the payload): the bytes
        ``append(StreamRecordBatch(...).encode(), stream=(stream_id, base + 1))`` writes for each, in
        the same blocks (one walctl.format.bulk.pack_records call packs them into the open block).
        A record the open block cannot take goes the way of ``append`` (closing the block, padding
        the lap's end, the size and room checks), then the block is filled from it.

        Acknowledgements, once the block is durable: ``on_acks(offsets, token, first_index)`` per
        block and call, else ``on_ack(offset, (token, i))`` per record (``i``: its index in payloads).
        The payloads are kept (not copied) until then.
        """
        if index >= len(payloads):
            return 0
        if not self._closed:
            self._queue.poll()  # as in append
        with self._mutex:
            if self._failed is not None or self._closed:
                self._check_usable()
            batch = (stream_id, epoch, base_offset)
            cur = self._cur
            count = 0
            if cur is not None:
                start = cur.start
                limit = min(self.block_soft_limit_bytes, cur.lap_end - start, (self._room_end - start) & ~4095)
                with _signals_deferred():  # packed and booked together (see _book_many)
                    count, end = _pack_records(cur.buf, cur.length, limit, start + cur.length, payloads,
                                               index=index, batch=batch)
                    if count:
                        self._book_many(cur, payloads, index, count, end, stream_id, base_offset, token)
            if not count:
                # The open block cannot take the next record (or there is none): the single-record
                # path's placement closes it, pads the lap's end, checks the room and the size.
                record_bytes = _MANY_OVERHEAD + len(payloads[index])
                if record_bytes > self._ring_bytes or align_up(record_bytes) > self.window_cap_bytes:
                    raise UsageError(f"record of {record_bytes - rec.SIZE} bytes does not fit this WAL "
                                     f"(ring {self.ring.size} bytes, window limit {self.window_cap_bytes} bytes)")
                self._place(record_bytes)
                cur = self._cur
                start = cur.start
                # Its first record always fits (a larger one has a buffer of its own, alone in its block).
                limit = max(record_bytes, min(self.block_soft_limit_bytes, cur.lap_end - start,
                                              (self._room_end - start) & ~4095))
                with _signals_deferred():
                    count, end = _pack_records(cur.buf, cur.length, limit, start + cur.length, payloads,
                                               index=index, batch=batch)
                    self._book_many(cur, payloads, index, count, end, stream_id, base_offset, token)
            if not self._ready and self._busy < self.iodepth:
                self._submit_cur(wait=False)
            return count

    def append_frames(self, src, start: int, end: int, spec: FrameSpec, base_offset: int,
                      max_records: int) -> tuple[int, int, int, int]:
        """Find the complete records in ``src[start:end]`` (``spec``'s framing) and pack them straight
        into the open block, then into new ones, with no Python object per record (C: frame_pack).
        Returns (records packed, where in ``src`` the rest starts, why it stopped, the payload length
        of the record it stopped at or -1): it stops at the input's end or an incomplete record
        (STOP_INPUT), a payload over ``spec.max_payload`` (STOP_TOO_LARGE) or after ``max_records``
        (STOP_MAX). ``src`` may be reused once it returns (the bytes are in the blocks). Each call's
        records in a block are acknowledged once it is durable by ``on_frames(Frames)``."""
        if not self._closed:
            self._queue.poll()  # as in append
        with self._mutex:
            if self._failed is not None or self._closed:
                self._check_usable()
            total = 0
            while True:
                count, start, stop, next_len = self._frame_into(src, start, end, spec, base_offset + total,
                                                                max_records - total)
                total += count
                if stop != _framepack.STOP_FULL:
                    break
                # A block is full: run the completions waiting in the queue first, so freed slots
                # get the closed blocks at once (the reaper thread would wait for this lock).
                self._queue.poll()
                self._place_frame(_MANY_OVERHEAD + next_len)
            if not self._ready and self._busy < self.iodepth:
                self._submit_cur(wait=False)
            return total, start, stop, next_len

    def _place_frame(self, record_bytes: int) -> None:
        """Open a block for a record of ``record_bytes`` the open one cannot take (append's placement)."""
        if record_bytes > self._ring_bytes or align_up(record_bytes) > self.window_cap_bytes:
            raise UsageError(f"record of {record_bytes - rec.SIZE} bytes does not fit this WAL "
                             f"(ring {self.ring.size} bytes, window limit {self.window_cap_bytes} bytes)")
        if self._cur is not None and self._cur.length:
            self._close_block()
            self._pump(wait=True, keep=self.run_ahead)
        self._place(record_bytes)
        self._cur.min_limit = record_bytes  # its first record always fits (a large one: a buffer of its own)

    def _frame_into(self, src, start: int, end: int, spec: FrameSpec, base: int, max_records: int):
        """One frame_pack into the open block (None open: only learn the next record's size)."""
        cur = self._cur
        if cur is None:
            out, pos, limit, offset = _NO_BLOCK, 0, 0, 0
        else:
            out, pos, offset = cur.buf, cur.length, cur.start + cur.length
            limit = max(cur.min_limit, min(self.block_soft_limit_bytes, cur.lap_end - cur.start,
                                           (self._room_end - cur.start) & ~4095))
        with _signals_deferred():  # packed and booked together (see _book_many)
            count, out_pos, src_pos, payload, last, acks, stop, next_len = _framepack.frame_pack(
                out, pos, limit, offset, src, start, end, spec.lines, spec.stream_id, spec.epoch, base,
                max_records, spec.max_payload, spec.render)
            if count:
                cur.length = out_pos
                cur.min_limit = 0
                cur.records.append(Frames(offset, last, count, payload, spec.stream_id, base, acks))
                cur.stream_marks.append((spec.stream_id, base + count, last))
        return count, src_pos, stop, next_len

    def _book_many(self, cur: _Block, payloads, index: int, count: int, end: int, stream_id: int,
                   base_offset: int, token) -> None:
        """The records append_many just packed into ``cur`` (buffer bytes up to ``end``) join it."""
        first = cur.start + cur.length
        cur.length = end
        cur.records.append(_Many(first, payloads, index, count, token))
        last = cur.start + end - _MANY_OVERHEAD - len(payloads[index + count - 1])
        cur.stream_marks.append((stream_id, base_offset + count, last))

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

    # -- placement -----------------------------------------------------------------
    def _place(self, record_bytes: int) -> int:
        """Make room for a record of ``record_bytes`` bytes in the current block; return its offset.

        Waits (``full_wait_s``) while the ring is full; the blocks may have moved on meanwhile
        (the timer closes the open block), so a placement that waited starts again."""
        while True:
            offset = self._try_place(record_bytes)
            if offset is not None:
                return offset

    def _try_place(self, record_bytes: int) -> int | None:
        """_place's one attempt: the record's offset, or None after waiting for room."""
        cur = self._cur
        if cur is not None:
            pos = cur.start + cur.length
            end = pos + record_bytes
            if cur.length + record_bytes <= self.block_soft_limit_bytes and end <= cur.lap_end:
                if align_up(end) > self._room_end and self._make_room(align_up(end)):
                    return None
                return pos  # the usual case: the record joins the open block
            self._close_block()
            # Run ahead by at most iodepth closed blocks while every slot is busy.
            self._pump(wait=True, keep=self.run_ahead)
        start = self.next_block
        lap_end = self.ring.lap_end(start)
        if start + record_bytes > lap_end:
            # The record would cross the ring's end: pad the rest of the lap.
            if self._make_room(lap_end):
                return None
            padding = rec.RecordHeader.padding(start, lap_end - start).encode()
            self._cur = self._open_block(start, lap_end, len(padding))
            self._cur.buf[:len(padding)] = padding
            self._cur.length = len(padding)
            self._cur.log_end = lap_end
            self._close_block()
            self._pump(wait=True, keep=self.run_ahead)
            start = self.next_block
        if self._make_room(align_up(start + record_bytes)):
            return None
        self._cur = self._open_block(start, start, record_bytes)
        return start

    def _open_block(self, start: int, end: int, record_bytes: int) -> _Block:
        """A new, empty block at ``start`` whose first record takes ``record_bytes`` bytes; its clock starts now."""
        now = self._clock()
        return _Block(start, end, buf=self._take_buffer(record_bytes), opened_ns=now,
                      stall_at_open_ns=self._stalled_ns(now), lap_end=self.ring.lap_end(start))

    def _take_buffer(self, record_bytes: int):
        """An aligned buffer for a new block whose first record takes ``record_bytes`` bytes."""
        if record_bytes <= self._buffer_bytes:
            return self._spare_buffers.pop() if self._spare_buffers else aligned_buffer(self._buffer_bytes)
        return aligned_buffer(align_up(record_bytes))  # one record larger than the block limit: a block of its own

    def _set_room_end(self) -> None:
        self._room_end = max(self.state.header.trim_offset, 0) + self._ring_bytes

    def _make_room(self, end: int) -> bool:
        """Nothing when the log may reach ``end``; else wait for a trim (``full.wait_s``, restarted
        by each trim that frees some room) and return True once it may, or raise FullError."""
        if end <= self._room_end:
            return False
        full = self.full
        if full.wait_s > 0:
            self._wait_for_room(end, full)
        if end > self._room_end:
            why = full.why() if full.why is not None else None
            waited = f" for {full.wait_s:g} s" if full.wait_s > 0 else ""
            raise FullError(f"WAL full: nothing freed room{waited}" + (f" ({why})" if why else ""),
                            hint="trim or upload first: 'walctl upload' beside the writer (it trims through "
                                 "the hand-off), append --upload-at, or a longer --full-wait",
                            offset=self.trim_start + self.ring.size)
        return True

    def _wait_for_room(self, end: int, full: FullWait) -> None:
        """Hold the appender until the ring has room up to ``end``, the wait runs out, or the writer
        fails. Closed blocks keep being written meanwhile (their completions wake it), so the
        acknowledged log an uploader can upload keeps growing up to the full ring."""
        full.waits += 1
        started = time.monotonic()
        deadline = started + full.wait_s
        room = self._room_end
        if full.on_full is not None:
            full.on_full(True)
        try:
            self._pump(wait=False)
            while end > self._room_end:
                self._check_usable()
                now = time.monotonic()
                if self._room_end > room:  # a trim freed some room, not enough yet: wait again
                    room, deadline = self._room_end, now + full.wait_s
                if now >= deadline:
                    return
                self._lock.wait(min(deadline - now, 1.0))
        finally:
            full.total_s += time.monotonic() - started
            if full.on_full is not None:
                full.on_full(False)

    # -- submission ----------------------------------------------------------------
    # A block goes: open (records are added) -> closed, in _ready (its place in the log
    # is final) -> in flight -> durable. Blocks leave _ready strictly in log order, so
    # _inflight, and the acknowledgements, stay in log order. While every slot is busy the
    # appender closes up to iodepth blocks ahead: devices often complete a batch of writes
    # together (at one cache flush), and then a full block is ready for every slot, rather
    # than whatever partial block was being built at that moment.
    def _submit_cur(self, *, wait: bool) -> None:
        """Close the open block and start writes; without ``wait``, close it only if a slot is idle,
        its batch interval has passed and the budget allows its write."""
        cur = self._cur
        if cur is not None and cur.length and (wait or (not self._ready and self._busy < self.iodepth)):
            if wait or (self._batch_done(cur) and (self._pacer is None or self._budget_allows(cur))):
                self._close_block()
            # else: it keeps batching records; the timer thread closes it once it may be written.
        self._pump(wait=wait)

    def _batch_done(self, block: _Block) -> bool:
        """True once ``block``'s batch interval has passed; else wake the timer thread when it does."""
        interval = self._batch_interval_ns
        if not interval:
            return True
        due = block.opened_ns + interval
        if self._clock() >= due:
            return True
        self._arm_timer(due)
        return False

    def _close_block(self) -> None:
        """Queue the open block for writing; the next block starts where it ends."""
        cur = self._cur
        # Blocks are written zero-padded to 4 KiB (a reused buffer holds an older block's bytes).
        cur.buf[cur.length:align_up(cur.length)] = bytes(align_up(cur.length) - cur.length)
        if not cur.log_end:  # data blocks; a padding block's record ends at the lap end (set by _place)
            cur.log_end = cur.start + cur.length
            cur.end = cur.start + align_up(cur.length)
        with _signals_deferred():
            # Both or neither: an interrupt in between would lose or duplicate the block.
            block, self._cur = self._cur, None
            self._ready.append(block)
            self.next_block = block.end

    def _pump(self, *, wait: bool, keep: int = 0) -> None:
        """Start the writes of closed blocks while slots are free; with ``wait``, until at most ``keep`` wait."""
        ready = self._ready
        while ready:
            self._check_usable()
            if self._busy < self.iodepth and self._fits_window(ready[0]):
                if self._pacer is None or self._budget_allows(ready[0]):
                    self._submit(ready[0])
                elif wait and len(ready) > keep:
                    self._lock.wait((self._timer_due_ns - self._clock()) / 1e9)
                else:
                    return
            elif wait and len(ready) > keep:
                # An interrupt (SIGTERM) here leaves the closed blocks queued: close() writes them.
                self._lock.wait()
            else:
                return

    def _submit(self, block: _Block) -> None:
        """Start the durable write of ``block``, the first closed one (a slot is free, the window fits)."""
        buf = block.buf
        padded = align_up(block.length)
        now = self._clock()
        if self._pacer is not None:
            self._pacer.take(padded, now)
            if self._stall_since_ns:
                self._stall_total_ns += now - self._stall_since_ns
                self._stall_since_ns = 0
        block.submitted_ns = now
        block.budget_ns = self._stall_total_ns - block.stall_at_open_ns
        with _signals_deferred():
            # The bookkeeping and the submission happen together or not at all: an interrupt
            # in between would leave a block in flight that never completes.
            self._ready.popleft()
            self._inflight.append(block)
            self._busy += 1
            # Durability: the device is open with O_DIRECT + O_DSYNC (or buffered + fdatasync),
            # and the queue calls back only when the write returned from the device, with the
            # block on stable media. This is what lets _completed acknowledge the block's records.
            try:
                self._queue.submit(self.ring.physical(block.start), buf,
                                   lambda error, flush_ns=0, b=block, buf=buf: self._completed(b, error, buf, flush_ns),
                                   length=padded)
            except BaseException:  # refused before it started: no completion will come
                self._inflight.pop()
                self._busy -= 1
                self._ready.appendleft(block)
                raise

    def _fits_window(self, block: _Block) -> bool:
        """Grow the persisted window before a block would end past it; False if it must wait."""
        window_start = self._inflight[0].start if self._inflight else block.start
        need = block.end - window_start
        length = self.state.header.sliding_window_max_length
        if need <= length:
            return True
        if length < self.window_cap_bytes:
            steps = -(-(need - length) // WINDOW_SCALE_UNIT_BYTES)
            self._write_header(sliding_window_max_length=min(self.window_cap_bytes,
                                                             length + steps * WINDOW_SCALE_UNIT_BYTES))
            return need <= self.state.header.sliding_window_max_length
        return False  # at the cap: wait for earlier blocks to become durable

    def _completed(self, block: _Block, error: BaseException | None, buf=None, flush_ns: int = 0) -> None:
        """A write queue's completion (walctl.device.base.WriteDone): ``flush_ns`` of the write went to fdatasync."""
        with self._lock:
            try:
                self._finish_block(block, error, buf, flush_ns)
            except BaseException as exc:  # never leave waiters hanging on a bug here
                if self._failed is None:
                    self._failed = exc
            finally:
                self._lock.notify_all()

    def _finish_block(self, block: _Block, error: BaseException | None, buf, flush_ns: int) -> None:
        self._busy -= 1
        if buf is not None and len(buf) == self._buffer_bytes:
            self._spare_buffers.append(buf)
        block.done = True
        block.error = error
        if error is not None:
            if self._failed is None:
                self._failed = error
        else:
            self.blocks_written += 1
            self.bytes_written += align_up(block.length)
            # The write returned now; on the buffered fallback its fdatasync is part of it.
            written_ns = self._clock() - block.submitted_ns
            flush_ns = min(flush_ns, written_ns)
            queued_ns = block.submitted_ns - block.opened_ns
            self.stages.add(queued_ns, min(block.budget_ns, queued_ns), written_ns - flush_ns, flush_ns)
        while self._inflight and self._inflight[0].done and self._inflight[0].error is None \
                and self._failed is None:
            head = self._inflight.popleft()
            self.acked_end = head.log_end
            for sid, end, offset in head.stream_marks:
                self.stream_ends[sid] = end
                self._stream_recency[sid] = offset
            self._ack_block(head)
        if self._failed is not None:
            # Nothing at or after the failed block is acknowledged; let waiters see it.
            self._inflight = deque(b for b in self._inflight if not b.done)
        elif not self._closed:
            self._submit_cur(wait=False)  # may fail (a header write for the window): see _completed

    def _ack_block(self, head: _Block) -> None:
        """Acknowledge the records of a durable block, in order; a callback's failure fails the writer."""
        for item in head.records:
            try:
                if item.__class__ is Frames:
                    self.records_acked += item.count
                    if self.on_frames is not None:
                        self.on_frames(item)
                    continue
                if item.__class__ is _Many:
                    self.records_acked += item.count
                    self._ack_many(item)
                    continue
                self.records_acked += 1
                if self.on_ack is not None:
                    self.on_ack(*item)
            except BaseException as exc:  # e.g. the reader of our stdout went away
                self._failed = exc
                break

    def _ack_many(self, item: "_Many") -> None:
        """Acknowledge the records of one append_many call in one block (their offsets from their sizes)."""
        if self.on_acks is None and self.on_ack is None:
            return
        # each record's offset: the previous one's plus its size
        payloads = item.payloads[item.index:item.index + item.count]
        offsets = list(accumulate(map(_MANY_OVERHEAD.__add__, map(len, payloads)), initial=item.offset))
        offsets.pop()
        if self.on_acks is not None:
            self.on_acks(offsets, item.token, item.index)
        else:
            for i, offset in enumerate(offsets, item.index):
                self.on_ack(offset, (item.token, i))

    # -- budget and timer ----------------------------------------------------------
    def _budget_allows(self, block: _Block) -> bool:
        """True if the budget lets ``block`` be written now; else mark it held and wake the timer in time."""
        now = self._clock()
        delay = self._pacer.delay_ns(align_up(block.length), now)
        if not delay:
            return True
        if not self._stall_since_ns:
            self._stall_since_ns = now
        self._arm_timer(now + delay)
        return False

    def _arm_timer(self, due_ns: int) -> None:
        """Have the timer thread look at the open block and the closed ones again at ``due_ns``."""
        if self._timer_due_ns is None or due_ns < self._timer_due_ns:
            self._timer_due_ns = due_ns
            if self._timer_thread is None:
                self._timer_thread = threading.Thread(target=self._timer_loop, name="walctl-timer", daemon=True)
                self._timer_thread.start()
            self._timer_cond.notify()

    def _timer_loop(self) -> None:
        """Start the writes the budget or the batch interval held, once they may start (the appender
        may be idle meanwhile, e.g. waiting for input)."""
        with self._lock:
            while not self._closed and self._failed is None:
                due = self._timer_due_ns
                if due is None:
                    self._timer_cond.wait()
                    continue
                wait_ns = due - self._clock()
                if wait_ns > 0:
                    self._timer_cond.wait(wait_ns / 1e9)
                    continue
                self._timer_due_ns = None
                try:
                    self._submit_cur(wait=False)
                except BaseException as exc:  # a header write for the window failed
                    if self._failed is None:
                        self._failed = exc
                self._lock.notify_all()

    def _stalled_ns(self, now: int) -> int:
        """Total ns the budget has stalled the writer, up to ``now``."""
        return self._stall_total_ns + (now - self._stall_since_ns if self._stall_since_ns else 0)

    def _stop_timer(self) -> None:
        thread = self._timer_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

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
