"""The WAL writer's block builder (walctl.wal.writer): records packed straight into the open block's
aligned buffer, and where each block goes in the log.

A block starts at a 4 KiB aligned logical offset; a record never crosses the end of a lap (a
padding record fills the rest of the lap); a block holds records up to the soft limit (one larger
record has a block of its own). ``BlockBuilder`` is the part of WalWriter that places records
(``append``, ``append_many``, ``append_frames``) and opens blocks; closing and writing them is
walctl.wal.writer_window's, waiting for room walctl.wal.writer_room's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from walctl.device.buffers import aligned_buffer
from walctl.device.signals import signals_deferred as _signals_deferred
from walctl.errors import UsageError
from walctl.format import batch as batch_format
from walctl.format import framepack as _framepack
from walctl.format import record as rec
from walctl.format.bulk import pack_records as _pack_records
from walctl.wal.layout import align_up

MANY_OVERHEAD = rec.SIZE + batch_format.HEADER_SIZE  # bytes of an append_many record besides its payload
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
    stop it; ``render``: the acknowledgement text to render (0 none, 1 offsets, 2 NDJSON); ``fd``
    (>= 0): length-prefixed records read from that file at offsets ``start:end`` (framepack.frame_read)."""

    lines: bool
    stream_id: int
    epoch: int
    max_payload: int
    render: int = 0
    fd: int = -1


class Many:
    """Records one append_many call packed into one block: ``count`` payloads from ``index``, the first at ``offset``."""

    __slots__ = ("offset", "payloads", "index", "count", "token")

    def __init__(self, offset: int, payloads, index: int, count: int, token: Any):
        self.offset, self.payloads, self.index, self.count, self.token = offset, payloads, index, count, token


class Block:
    """One block of the log: its extent, the records in it and its write's progress.

    A class with __slots__ and a plain __init__ rather than a dataclass: one is made per block
    (thousands a second), and the dataclass's default factories and instance dict cost a few
    microseconds each and feed the garbage collector."""

    __slots__ = ("start", "end", "records", "stream_marks", "log_end", "lap_end", "buf", "length", "done",
                 "error", "opened_ns", "stall_at_open_ns", "submitted_ns", "budget_ns", "min_limit")

    def __init__(self, start: int, end: int, lap_end: int, buf: Any, opened_ns: int, stall_at_open_ns: int):
        self.start = start
        self.end = end  # logical end of the block's extent (padding blocks extend to the lap end)
        self.records = []  # (offset, token) per append, a Many per append_many
        # (stream id, next stream offset, record offset) of the records that carry a stream batch
        self.stream_marks = []
        self.log_end = 0  # end of its last record (padding blocks: the lap end), set when closed
        self.lap_end = lap_end  # where the lap holding the block ends: its records stop there
        # Records are encoded straight into the aligned buffer that is written (zero-padded to
        # 4 KiB when closed): no intermediate copy of the block.
        self.buf = buf
        self.length = 0  # bytes of records (or of the padding record's header) in buf
        self.done = False
        self.error: BaseException | None = None
        # For the latency breakdown (perf_counter_ns): the first record came, the writer's
        # budget-stall clock at that moment (see WalWriter._stalled_ns), the write started.
        self.opened_ns = opened_ns
        self.stall_at_open_ns = stall_at_open_ns
        self.submitted_ns = 0
        self.budget_ns = 0  # of its queued time, how long the budget stalled the writer
        self.min_limit = 0  # append_frames: a record this large was placed in it and must fit

    def __repr__(self) -> str:
        return (f"Block(start={self.start}, end={self.end}, length={self.length}, log_end={self.log_end}, "
                f"records={len(self.records)}, done={self.done}, error={self.error!r})")


class BlockBuilder:
    """WalWriter's record placement and block packing (its state is WalWriter's: see its __init__)."""

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
                record_bytes = MANY_OVERHEAD + len(payloads[index])
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
        records in a block are acknowledged once it is durable by ``on_frames(Frames)``. Between blocks
        it lets in the completions waiting for the writer's lock (the AIO reaper's): a failure they
        book is raised there, with the records of the blocks before it placed."""
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
                if self._knocks:
                    # The reaper took completions off the ring and waits for this lock: let it in
                    # (their slots stay busy to the writer until they are booked), rather than
                    # after the whole call (a 4 MiB read is some 16 blocks).
                    self._let_completions_in()
                self._place_frame(MANY_OVERHEAD + next_len)
            if not self._ready and self._busy < self.iodepth:
                self._submit_cur(wait=False)
            return total, start, stop, next_len

    def _let_completions_in(self) -> None:
        """Wait (the lock released) until the completions knocking in ``_completed`` are booked; a
        completion notifies as it leaves, but for the first ones of a batch (the AIO queue's
        ``batch.more``), which leave quietly for the last, right behind them in the same thread. The
        open block and the closed ones may have moved on meanwhile (a completion starts writes and
        may close the open block), or the writer failed."""
        knocks = self._knocks
        while knocks:
            if self._failed is not None or self._closed:
                break
            if not self._lock.wait(0.1):  # a batch's last completion notifies: never in practice
                break
        if self._failed is not None or self._closed:
            self._check_usable()

    def _place_frame(self, record_bytes: int) -> None:
        """Open a block for a record of ``record_bytes`` the open one cannot take (append's placement)."""
        if record_bytes > self._ring_bytes or (record_bytes + 4095) & -4096 > self.window_cap_bytes:
            raise UsageError(f"record of {record_bytes - rec.SIZE} bytes does not fit this WAL "
                             f"(ring {self.ring.size} bytes, window limit {self.window_cap_bytes} bytes)")
        # (_frame_into closed the full block; run ahead by at most run_ahead closed blocks)
        self._pump(wait=True, keep=self.run_ahead)
        start = self.next_block
        ring_bytes = self._ring_bytes
        lap_end = (start // ring_bytes + 1) * ring_bytes
        if self._cur is None and start + record_bytes <= lap_end \
                and (start + record_bytes + 4095) & -4096 <= self._room_end:
            # _try_place's usual case (the record starts a block inside its lap and the room), inline
            cur = self._cur = self._open_block(start, start, record_bytes)
        else:
            self._place(record_bytes)
            cur = self._cur
        cur.min_limit = record_bytes  # its first record always fits (a large one: a buffer of its own)

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
            if spec.fd < 0:
                count, out_pos, src_pos, payload, last, acks, stop, next_len = _framepack.frame_pack(
                    out, pos, limit, offset, src, start, end, spec.lines, spec.stream_id, spec.epoch, base,
                    max_records, spec.max_payload, spec.render)
            else:  # read from the file straight into the block (walctl.wal.feed's direct path)
                count, out_pos, src_pos, payload, last, acks, stop, next_len = _framepack.frame_read(
                    out, pos, limit, offset, spec.fd, start, end, _framepack.DIRECT_MIN_PAYLOAD, spec.stream_id,
                    spec.epoch, base, max_records, spec.max_payload, spec.render)
            if count:
                cur.length = out_pos
                cur.min_limit = 0
                cur.records.append(Frames(offset, last, count, payload, spec.stream_id, base, acks))
                cur.stream_marks.append((spec.stream_id, base + count, last))
            if stop == _framepack.STOP_FULL and cur is not None:
                # The block is full (the next record does not fit): closed, and its write started, in
                # this section (one signals_deferred per block, not two; issue 31)
                self._close_open_block()
        return count, src_pos, stop, next_len

    def _book_many(self, cur: Block, payloads, index: int, count: int, end: int, stream_id: int,
                   base_offset: int, token) -> None:
        """The records append_many just packed into ``cur`` (buffer bytes up to ``end``) join it."""
        first = cur.start + cur.length
        cur.length = end
        cur.records.append(Many(first, payloads, index, count, token))
        last = cur.start + end - MANY_OVERHEAD - len(payloads[index + count - 1])
        cur.stream_marks.append((stream_id, base_offset + count, last))

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
                end = (end + 4095) & -4096  # align_up
                if end > self._room_end and self._make_room(end):
                    return None
                return pos  # the usual case: the record joins the open block
            self._close_block()
            # Run ahead by at most iodepth closed blocks while every slot is busy.
            self._pump(wait=True, keep=self.run_ahead)
        start = self.next_block
        lap_end = (start // self._ring_bytes + 1) * self._ring_bytes  # Ring.lap_end
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

    def _open_block(self, start: int, end: int, record_bytes: int) -> Block:
        """A new, empty block at ``start`` whose first record takes ``record_bytes`` bytes; its clock starts now."""
        now = self._clock()
        ring_bytes = self._ring_bytes
        since = self._stall_since_ns
        if record_bytes <= self._buffer_bytes and self._spare_buffers:  # _take_buffer's usual case
            buf = self._spare_buffers.pop()
        else:
            buf = self._take_buffer(record_bytes)
        # (start, end, lap_end, buf, opened_ns, stall_at_open_ns: _stalled_ns(now))
        return Block(start, end, (start // ring_bytes + 1) * ring_bytes, buf, now,
                     self._stall_total_ns + (now - since if since else 0))

    def _take_buffer(self, record_bytes: int):
        """An aligned buffer for a new block whose first record takes ``record_bytes`` bytes."""
        if record_bytes <= self._buffer_bytes:
            return self._spare_buffers.pop() if self._spare_buffers else aligned_buffer(self._buffer_bytes)
        return aligned_buffer(align_up(record_bytes))  # one record larger than the block limit: a block of its own

