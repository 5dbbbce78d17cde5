"""The WAL writer's submission window (walctl.wal.writer): closed blocks written in log order,
several in flight, acknowledged in log order once durable.

Invariants kept here, and recovery relies on:
- no block is submitted that ends past ``window_start + slidingWindowMaxLength``, where
  window_start is the first offset not yet durable: the header carrying a larger
  window is durable first. So a crash leaves holes only inside one window;
- a record is acknowledged only when its block and every earlier block are durable, in log order;
- with a budget (walctl.wal.pacing) block writes start no faster than it allows, and a timer
  thread starts the writes the budget or the batch interval held.

``SubmissionWindow`` is the part of WalWriter that does it (its state is WalWriter's: see its __init__).
"""

from __future__ import annotations

import threading
from collections import deque
from functools import partial
from itertools import accumulate

from walctl.device.signals import MAIN_IDENT as _MAIN_IDENT
from walctl.device.signals import signals_deferred as _signals_deferred
from walctl.wal.layout import align_up
from walctl.wal.writer_blocks import MANY_OVERHEAD, Block, Frames, Many

_get_ident = threading.get_ident
# signals_deferred holds SIGINT/SIGTERM in the main thread only (_MAIN_IDENT): elsewhere (the AIO reaper,
# the timer) a write starts without entering it (three Python calls per block for nothing; issue 31)
WINDOW_SCALE_UNIT_BYTES = 4 << 20  # the sliding window grows by 4 MiB steps (walctl.wal.writer)
_ZEROS = memoryview(bytes(4096))  # a block's padding to 4 KiB, sliced without a copy


class SubmissionWindow:
    """WalWriter's block submission, completion and acknowledgement (and the timer that paces them)."""

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
        if self._ready:  # (most completions find none: the appender's close started its block's write)
            self._pump(wait=wait)

    def _batch_done(self, block: Block) -> bool:
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
        """Queue the open block for writing; the next block starts where it ends (see _close_open_block)."""
        with _signals_deferred():
            self._close_open_block()

    def _close_open_block(self) -> None:
        """_close_block's work, inside a signals_deferred section (the caller's: append_frames closes a full
        block in the section that packed it). Closing is all or nothing: an interrupt in between would lose
        or duplicate the block.

        In the usual case the block's write starts here too, in the same section: it is the only closed
        block, a slot is free, no budget paces the writes, the writer is usable and the block ends inside
        the persisted window. Otherwise the ``_pump`` that follows every close starts it (or waits, grows
        the window, raises the failure)."""
        cur = self._cur
        # Blocks are written zero-padded to 4 KiB (a reused buffer holds an older block's bytes).
        length = cur.length
        pad = -length % 4096
        if pad:
            cur.buf[length:length + pad] = _ZEROS[:pad]
        if not cur.log_end:  # data blocks; a padding block's record ends at the lap end (set by _place)
            cur.log_end = cur.start + length
            cur.end = cur.start + length + pad
        ready = self._ready
        self._cur = None
        ready.append(cur)
        self.next_block = cur.end
        if len(ready) == 1 and self._starts_at_once(cur):
            self._start_write(cur, self._clock())

    def _starts_at_once(self, block: Block) -> bool:
        """True if the write of ``block``, the first closed one, may start with no more ado: the writer is
        usable, a slot is free, no budget paces the writes and the block ends inside the persisted window.
        ``_pump`` makes the same checks one by one, as each that fails leads it elsewhere (a raise, a wait,
        a header write that grows the window, the budget)."""
        return self._failed is None and not self._closed and self._busy < self.iodepth and self._pacer is None \
            and self._past_window(block) <= 0

    def _pump(self, *, wait: bool, keep: int = 0) -> None:
        """Start the writes of closed blocks while slots are free; with ``wait``, until at most ``keep`` wait."""
        ready = self._ready
        while ready:
            if self._failed is not None or self._closed:
                self._check_usable()
            block = ready[0]
            if self._busy < self.iodepth and self._fits_window(block):
                if self._pacer is None or self._budget_allows(block):
                    self._submit(block)
                elif wait and len(ready) > keep:
                    self._lock.wait((self._timer_due_ns - self._clock()) / 1e9)
                else:
                    return
            elif wait and len(ready) > keep:
                # An interrupt (SIGTERM) here leaves the closed blocks queued: close() writes them.
                if not keep:  # a drain or close
                    self._lock.wait()
                    continue
                waited = self._clock()
                try:
                    self._lock.wait()
                finally:  # how long appends waited for the device (every slot busy): not packing time
                    self.slot_wait_ns += self._clock() - waited
            else:
                return

    def _submit(self, block: Block) -> None:
        """Start the durable write of ``block``, the first closed one (a slot is free, the window fits)."""
        now = self._clock()
        if self._pacer is not None:
            self._pacer.take((block.length + 4095) & -4096, now)  # align_up
            if self._stall_since_ns:
                self._stall_total_ns += now - self._stall_since_ns
                self._stall_since_ns = 0
        if _get_ident() != _MAIN_IDENT:
            self._start_write(block, now)
            return
        with _signals_deferred():
            self._start_write(block, now)

    def _start_write(self, block: Block, now: int) -> None:
        """``block``, the first closed one, goes in flight (``now``: its submission time). Called inside
        signals_deferred: the bookkeeping and the submission happen together or not at all (an interrupt
        in between would leave a block in flight that never completes)."""
        block.submitted_ns = now
        block.budget_ns = self._stall_total_ns - block.stall_at_open_ns
        self._ready.popleft()
        self._inflight.append(block)
        self._busy += 1
        # Durability: the device is open with O_DIRECT + O_DSYNC (or buffered + fdatasync),
        # and the queue calls back only when the write returned from the device, with the
        # block on stable media. This is what lets _completed acknowledge the block's records.
        try:
            # (a partial, not a lambda: the completion calls _completed with no Python frame between)
            self._queue.submit(self._ring_head + block.start % self._ring_bytes, block.buf,  # Ring.physical
                               partial(self._completed, block), length=(block.length + 4095) & -4096)
        except BaseException:  # refused before it started: no completion will come
            self._inflight.pop()
            self._busy -= 1
            self._ready.appendleft(block)
            raise

    def _past_window(self, block: Block) -> int:
        """How many bytes ``block`` would end past the persisted window (0 or less: it ends inside). The
        window starts at the first offset not yet durable: the first block in flight's start, else
        ``block``'s own (blocks go in flight in log order)."""
        return block.end - (self._inflight[0].start if self._inflight else block.start) \
            - self.state.header.sliding_window_max_length

    def _fits_window(self, block: Block) -> bool:
        """True if ``block`` ends inside the persisted window, grown first (by whole steps, up to its cap)
        if it would end past it; False if it must wait for earlier blocks to become durable."""
        past = self._past_window(block)
        if past <= 0:
            return True
        length = self.state.header.sliding_window_max_length
        if length < self.window_cap_bytes:
            steps = -(-past // WINDOW_SCALE_UNIT_BYTES)
            self._write_header(sliding_window_max_length=min(self.window_cap_bytes,
                                                             length + steps * WINDOW_SCALE_UNIT_BYTES))
            return self._past_window(block) <= 0
        return False  # at the cap: wait for earlier blocks to become durable

    def _completed(self, block: Block, error: BaseException | None, flush_ns: int = 0) -> None:
        """A write queue's completion (walctl.device.base.WriteDone) of ``block``: ``flush_ns`` of the write
        went to fdatasync."""
        knocks = self._knocks
        knocks.append(None)  # an appender holding the lock lets it in at its next block (append_frames)
        # More whole writes of this batch of completions follow, in this thread (the AIO queue's
        # ``batch.more``; devices often complete several writes at once): this one's write is booked and
        # its slot freed, and the batch's last completion does the rest for all of them, as if their
        # completions had come together with it: one io_submit of the next writes, one wake-up of the
        # waiters, the acknowledgements in log order (issue 31).
        more = error is None and getattr(getattr(self._queue, "batch", None), "more", 0)
        with self._mutex:  # the condition's lock, taken directly (Condition.__enter__ is a Python call)
            knocks.pop()
            try:
                self._finish_block(block, error, flush_ns, more)
            except BaseException as exc:  # never leave waiters hanging on a bug here
                if self._failed is None:
                    self._failed = exc
            finally:
                cond = self._lock
                if not more and cond._waiters:  # notify_all is two Python calls even when nobody waits
                    cond.notify_all()

    def _finish_block(self, block: Block, error: BaseException | None, flush_ns: int, more: int) -> None:
        """Book the write of ``block`` (``error``: it failed); unless ``more`` completions of its batch follow,
        then make the blocks durable in log order, start the next writes and acknowledge."""
        self._busy -= 1
        buf = block.buf
        if len(buf) == self._buffer_bytes:  # its buffer is reused by a later block
            self._spare_buffers.append(buf)
        block.done = True
        if error is not None:
            block.error = error
            if self._failed is None:
                self._failed = error
        else:
            # Durable, but acknowledged only if booked before any failure (as each block was at its own
            # completion before batches): one booked after it keeps the failure, like a failed write.
            block.error = self._failed
            self.blocks_written += 1
            self.bytes_written += (block.length + 4095) & -4096  # align_up
            # The write returned now; on the buffered fallback its fdatasync is part of it.
            written_ns = self._clock() - block.submitted_ns
            flush_ns = min(flush_ns, written_ns)
            queued_ns = block.submitted_ns - block.opened_ns
            self.stages.add(queued_ns, min(block.budget_ns, queued_ns), written_ns - flush_ns, flush_ns)
        if more:
            return
        # The log's durable head: blocks booked before any failure, the first ones of a batch too, even if
        # another thread recorded a failure since (an append's poll reaping a failed write, a header write).
        durable = []
        while self._inflight and self._inflight[0].done and self._inflight[0].error is None:
            durable.append(self._inflight.popleft())
        try:
            if self._failed is None and not self._closed:
                # The freed slot's next write starts before the acknowledgements are printed (their
                # write to stdout may take a while): the device is not left idle meanwhile. A write
                # queue that batches the submissions of its completions (AIO's plug) submits now.
                self._submit_cur(wait=False)  # may fail (a header write for the window): see _completed
                flush = getattr(self._queue, "flush_submits", None)
                if flush is not None:
                    flush()
        finally:
            # Durable, in log order: acknowledged whatever happens to later blocks, until a callback fails.
            for head in durable:
                self.acked_end = head.log_end
                for sid, end, offset in head.stream_marks:
                    self.stream_ends[sid] = end
                    self._stream_recency[sid] = offset
                if not self._ack_block(head):
                    break
        if self._failed is not None:
            # Nothing at or after the failed block is acknowledged; let waiters see it.
            self._inflight = deque(b for b in self._inflight if not b.done)

    def _ack_block(self, head: Block) -> bool:
        """Acknowledge the records of a durable block, in order; False if a callback failed. Its failure
        fails the writer, unless a failure was recorded first (a device's EIO, booked blocks still
        acknowledged after it): the first one is what the writer reports, the root cause."""
        for item in head.records:
            try:
                if item.__class__ is Frames:
                    self.records_acked += item.count
                    if self.on_frames is not None:
                        self.on_frames(item)
                    continue
                if item.__class__ is Many:
                    self.records_acked += item.count
                    self._ack_many(item)
                    continue
                self.records_acked += 1
                if self.on_ack is not None:
                    self.on_ack(*item)
            except BaseException as exc:  # e.g. the reader of our stdout went away
                if self._failed is None:
                    self._failed = exc
                return False
        return True

    def _ack_many(self, item: Many) -> None:
        """Acknowledge the records of one append_many call in one block (their offsets from their sizes)."""
        if self.on_acks is None and self.on_ack is None:
            return
        # each record's offset: the previous one's plus its size
        payloads = item.payloads[item.index:item.index + item.count]
        offsets = list(accumulate(map(MANY_OVERHEAD.__add__, map(len, payloads)), initial=item.offset))
        offsets.pop()
        if self.on_acks is not None:
            self.on_acks(offsets, item.token, item.index)
        else:
            for i, offset in enumerate(offsets, item.index):
                self.on_ack(offset, (item.token, i))

    # -- budget and timer ----------------------------------------------------------
    def _budget_allows(self, block: Block) -> bool:
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
