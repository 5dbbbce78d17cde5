"""The WAL writer's submission window (walctl/wal/writer_window.py), issue 32: submission, completion,
acknowledgement and the budget timer, driven on one thread with tests/wal/windowfakes.py (a fake clock
shared by the writer and its pacer, writes that complete when the test says, waits that run the test's
next step). Every figure asserted is exact: what the test advanced the clock by.
"""

from __future__ import annotations

import errno
import types

import pytest

from walctl.device import FaultyDevice
from walctl.errors import IOFailure
from walctl.format import record as rec
from walctl.wal.pacing import Budget

from test_mut_writer import acking, new_wal
from windowfakes import FakeClock, HeldWrites, WouldBlock, complete_all, held_writer, timer_step

P = 1 << 26  # ns per token of IOPS: with this rate every bucket figure is an exact binary fraction
IOPS = 1e9 / P  # ~14.9 writes/s: the bucket holds one token (BURST_S of it is below one)
REC4K = b"r" * (4096 - rec.SIZE)  # a 4 KiB record: one per block at a 4 KiB soft limit
SMALL = b"s" * 100  # a 124-byte record


def eagain() -> OSError:
    return OSError(errno.EAGAIN, "Resource temporarily unavailable")


# -- the latency breakdown -----------------------------------------------------------
def test_each_stage_of_the_latency_breakdown_is_what_the_clock_advanced(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(iops=IOPS), iodepth=2, block_soft_limit_bytes=8192)
    w.append(REC4K)  # block 1, written at once: the bucket's one token
    w.append(REC4K)  # block 2 opens at t0; the budget holds it (stall from t0) until t0 + P + 1
    assert len(q.submitted) == 1
    assert w._timer_due_ns == t0 + P + 1
    t1 = clock.now = t0 + P + 1
    timer_step(w)  # block 2 written: a stall of P + 1
    assert len(q.submitted) == 2
    t3 = clock.advance(1000)
    q.complete(0)  # block 1, without a flush time (the queue's default: 0)
    w.append(REC4K)  # block 3 opens at t3, after one stall of P + 1; the budget holds it from t3
    clock.advance(500)
    w.append(REC4K)  # joins block 3 (8 KiB)
    t5 = clock.advance(200)
    w.append(REC4K)  # closes block 3; block 4 opens during the stall, 700 ns into it
    t6 = clock.now = t1 + P + 1
    timer_step(w)  # block 3 written: the stall lasted P - 999
    assert len(q.submitted) == 3
    t7 = clock.advance(2000)
    q.complete(0, flush_ns=300)  # block 2; block 4 may have the slot but the budget holds it from t7
    clock.advance(10)
    q.complete(0)  # block 3
    t9 = clock.now = t7 + P - 1999
    assert w._timer_due_ns == t9
    timer_step(w)  # block 4 written
    assert len(q.submitted) == 4
    clock.advance(5000)
    q.complete(0)
    s = w.stages.samples
    assert list(s["queued"]) == [0, P + 1, t6 - t3, t9 - t5]
    assert list(s["budget"]) == [0, P + 1, t6 - t3, (t6 - t5) + (t9 - t7)]  # block 4: its two stalls, not the slot wait
    assert list(s["write"]) == [t3 - t0, (t7 - t1) - 300, 2010, 5000]
    assert list(s["flush"]) == [0, 300, 0, 0]
    assert w._stalled_ns(clock.now) == (P + 1) + (t6 - t3) + (t9 - t7)
    assert (w.blocks_written, w.bytes_written) == (4, 5 * 4096)
    w.abort()


def test_a_stall_in_progress_counts_up_to_now(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(iops=IOPS), iodepth=2)
    w.append(REC4K)
    w.append(REC4K)  # held from t0
    assert w._stalled_ns(t0 + 123) == 123
    assert w._stalled_ns(t0) == 0
    w.abort()


# -- the budget and its timer --------------------------------------------------------
def test_a_bandwidth_budget_counts_each_block_s_padded_bytes(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    # 160 KiB/s: the bucket holds 8 KiB (BURST_S of it), two 4 KiB blocks at once
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(bandwidth_bytes_per_s=163840.0), iodepth=4,
                       block_soft_limit_bytes=4096)
    w.append(REC4K)
    w.append(REC4K)
    assert len(q.submitted) == 2
    w.append(REC4K)  # the bucket is empty: 4 KiB of refill is 25 ms
    assert len(q.submitted) == 2
    due = t0 + 25_000_001
    assert w._timer_due_ns == due
    clock.advance(1)
    assert timer_step(w) == [25_000_000 / 1e9]  # the timer sleeps until the due time, in seconds
    clock.now = due - 1
    assert timer_step(w) == [1 / 1e9]
    assert len(q.submitted) == 2
    clock.now = due
    assert timer_step(w) == [None]  # at the due time: written, then idle
    assert len(q.submitted) == 3
    w.abort()


def test_the_timer_woken_from_idle_looks_at_the_due_time_again(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, batch_interval_s=0.5)
    t1 = clock.now + 10

    def an_append_arms_it():
        clock.now = t1
        w.append(SMALL, "a")

    assert timer_step(w, an_append_arms_it) == [None, 0.5]  # idle, then until the batch interval ends
    assert q.submitted == []
    clock.now = t1 + 500_000_000  # the batch interval has passed, exactly
    assert w.append(SMALL, "b") == 124  # joins the block, which closes now
    assert q.submitted == [w.ring.physical(0)]
    w.abort()


def test_the_timer_leaves_the_open_block_alone_while_every_slot_is_busy(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, batch_interval_s=0.5)
    w.append(SMALL, "a")  # the timer is due at t0 + 0.5 s
    clock.advance(100)
    w.submit_open_block()  # block 1 written now: the only slot is busy
    clock.advance(100)
    assert w.append(SMALL, "b") == 4096  # block 2 opens
    clock.now = t0 + 200 + 500_000_000 + 1  # the timer is late, block 2's batch interval has passed
    assert timer_step(w) == [None]
    assert w._lock.waits == []  # the timer never waits for a slot
    assert w.append(SMALL, "c") == 4096 + 124  # block 2 still open: it batches until the slot is free
    assert len(q.submitted) == 1 and w._failed is None
    w.abort()


def test_a_completion_leaves_a_block_the_budget_holds_to_the_timer(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(iops=IOPS), iodepth=1, block_soft_limit_bytes=4096)
    w.append(REC4K)
    w.append(REC4K)  # block 2: the slot is busy
    w.append(REC4K)  # closes block 2 (queued), block 3 opens
    clock.advance(10)
    q.complete(0)  # the slot is free; the budget holds block 2 until t0 + P + 1
    assert w._lock.waits == [] and w._failed is None
    assert len(q.submitted) == 1
    assert w._timer_due_ns == t0 + P + 1
    clock.now = t0 + P + 1
    timer_step(w)
    assert len(q.submitted) == 2
    w.abort()


def test_appends_wait_for_the_budget_only_past_their_run_ahead(tmp_path):
    clock = FakeClock()
    t0 = clock.now
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(iops=IOPS), iodepth=2, block_soft_limit_bytes=4096)
    w.append(REC4K)  # block 1 written
    w.append(REC4K)  # block 2: held by the budget
    w.append(REC4K)  # block 2 closed: one queued
    w.append(REC4K)  # block 3 closed: two queued, the run-ahead (iodepth 2): no wait yet
    assert w._lock.waits == []
    clock.advance(1000)

    def the_budget_allows():
        clock.now = t0 + P + 1

    w._lock.steps.append(the_budget_allows)
    w.append(REC4K)  # block 4 closed: three queued, so the append waits until block 2 may be written
    assert w._lock.waits == [(P + 1 - 1000) / 1e9]
    assert len(q.submitted) == 2
    assert w.slot_wait_ns == 0  # the budget's wait is not a wait for a slot
    w.abort()


# -- I/O slots -------------------------------------------------------------------------
def test_slot_waits_of_appends_add_up_and_drain_s_do_not_count(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, block_soft_limit_bytes=4096)
    acks = acking(w)

    def after(ns):
        def step():
            clock.advance(ns)
            q.complete(0)
        return step

    w.append(REC4K, 1)  # block 1 written
    w.append(REC4K, 2)  # block 2 opens: the slot is busy
    w.append(REC4K, 3)  # block 2 closed (one queued: the run-ahead), block 3 opens
    assert w._lock.waits == []
    w._lock.steps.extend([after(7000), after(3000)])
    w.append(REC4K, 4)  # two queued: waits for block 1 (7000 ns)
    w.append(REC4K, 5)  # waits for block 2 (3000 ns)
    assert w._lock.waits == [None, None]
    assert w.slot_wait_ns == 10000
    w._lock.on_idle = after(500)
    w.drain()
    assert w.slot_wait_ns == 10000
    assert [t for _, t in acks] == [1, 2, 3, 4, 5]
    w.close()


def test_submit_open_block_returns_once_the_block_s_write_has_started(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1)
    w.append(SMALL, "a")  # block 1 written
    w.append(SMALL, "b")  # block 2 opens: the slot is busy
    # the first wake-up changes nothing (a header write's notify_all), the second is block 1's completion
    w._lock.steps.extend([lambda: None, lambda: q.complete(0)])
    w.submit_open_block()
    assert w._lock.waits == [None, None]
    assert len(q.submitted) == 2 and w._cur is None and not w._ready
    w.abort()


def test_a_completion_writes_the_queued_block_and_leaves_the_open_one_batching(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, block_soft_limit_bytes=8192)
    w.append(REC4K)  # block 1 written
    w.append(REC4K)  # block 2
    w.append(REC4K)  # block 2 is 8 KiB
    assert w.append(SMALL) == 12288  # closes block 2 (queued); block 3 opens
    q.complete(0)
    assert len(q.submitted) == 2  # block 2
    assert w.append(SMALL) == 12288 + 124  # block 3 was left open
    w.abort()


def test_the_next_write_starts_and_is_flushed_before_the_acknowledgements(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1)
    seen = []
    w.on_ack = lambda offset, token: seen.append((offset, len(q.submitted), q.flushes))
    w.append(SMALL, "a")
    w.append(SMALL, "b")  # block 2 opens: the slot is busy
    q.complete(0)
    assert seen == [(0, 2, 1)]  # when "a" was acknowledged block 2 had been submitted and flushed
    w.abort()


def test_spare_block_buffers_are_reused_and_only_the_block_sized_ones(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, block_soft_limit_bytes=4096)
    w.append(SMALL)
    first = q.pending[0].buf
    assert len(first) == 4096
    q.complete(0)
    w.append(b"b" * 8000)  # larger than the block limit: a buffer of its own
    big = q.pending[0].buf
    assert len(big) == 8192
    q.complete(0)
    w.append(SMALL)
    assert q.pending[0].buf is first
    q.complete(0)
    w.close()
    assert w._timer_thread.joined == 1  # close waits for the timer thread


# -- the sliding window ----------------------------------------------------------------
def window_writer(tmp_path, cap: int):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=4, block_soft_limit_bytes=4096,
                       window_upper_limit_bytes=cap)
    w.update_header(sliding_window_max_length=8192)
    return w, q


def test_at_the_window_cap_a_block_waits_for_the_first_in_flight_to_be_durable(tmp_path):
    w, q = window_writer(tmp_path, 8192)
    writes = w.header_writes
    w.append(REC4K)
    w.append(REC4K)  # ends 8 KiB after the first block's start: fits, exactly
    w.append(REC4K)  # would end 12 KiB after it
    assert q.submitted == [w.ring.physical(0), w.ring.physical(4096)]
    q.complete(0)
    assert q.submitted[2:] == [w.ring.physical(8192)]  # 8 KiB after block 2's start
    assert w.header_writes == writes and w.header.sliding_window_max_length == 8192
    w.abort()


def test_the_window_grows_to_exactly_the_cap_a_block_needs(tmp_path):
    w, q = window_writer(tmp_path, 12288)
    writes = w.header_writes
    for _ in range(3):
        w.append(REC4K)
    assert len(q.submitted) == 3
    assert w.header.sliding_window_max_length == 12288
    assert w.header_writes == writes + 1
    w.abort()


def test_the_window_grows_from_the_first_block_in_flight_not_from_the_log_s_start(tmp_path):
    """The window a block needs is measured from the first block in flight (here at 8 KiB, after two
    durable blocks), not from 0: the fifth block, ending 12 KiB after it, grows the window to 12 KiB
    (the cap) and is written at once."""
    w, q = window_writer(tmp_path, 12288)
    w.append(REC4K)
    w.append(REC4K)
    q.complete(0)
    q.complete(0)  # both durable: none in flight
    writes = w.header_writes
    for _ in range(3):
        w.append(REC4K)
    assert q.submitted[2:] == [w.ring.physical(8192), w.ring.physical(12288), w.ring.physical(16384)]
    assert w.header.sliding_window_max_length == 12288 and w.header_writes == writes + 1
    w.abort()


# -- refused submissions and failures --------------------------------------------------
def test_a_window_one_byte_short_of_a_block_s_end_holds_it(tmp_path):
    """A window need not be a 4 KiB multiple (a header may say 8191): a block that would end one byte past
    it waits, whether its close would start it or a pump would."""
    w, q = window_writer(tmp_path, 8191)
    w.update_header(sliding_window_max_length=8191)
    writes = w.header_writes
    w.append(REC4K)  # block 1 [0, 4K): written
    w.append(REC4K)
    w.append(REC4K)  # block 2 [4K, 8K) closed: one byte past the window, at its cap
    assert q.submitted == [w.ring.physical(0)]
    assert w.header_writes == writes
    w.abort()


def test_a_window_grown_to_a_cap_one_byte_short_still_holds_the_block(tmp_path):
    w, q = window_writer(tmp_path, 8191)
    w.update_header(sliding_window_max_length=4096)
    writes = w.header_writes
    for _ in range(3):
        w.append(REC4K)  # block 2 [4K, 8K) grows the window to its cap, 8191: one byte short
    assert q.submitted == [w.ring.physical(0)]
    assert w.header.sliding_window_max_length == 8191 and w.header_writes == writes + 1
    w.abort()


def test_a_refused_submission_leaves_the_block_queued_and_drain_writes_it(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1)
    acks = acking(w)
    q.refuse = eagain()
    with pytest.raises(OSError):
        w.append(SMALL, "a")
    assert len(w._ready) == 1 and w._ready[0].start == 0
    assert (w._busy, list(w._inflight)) == (0, [])
    w._lock.on_idle = lambda: complete_all(q)
    w.drain()
    assert acks == [(0, "a")]
    assert w._busy == 0
    w.close()


def test_a_refused_submission_in_a_completion_fails_the_writer(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, block_soft_limit_bytes=4096)
    acks = acking(w)
    w.append(REC4K, "a")
    w.append(REC4K, "b")  # block 2
    w.append(SMALL, "c")  # closes block 2 (queued)
    block2 = w._ready[0]
    refused = q.refuse = eagain()
    q.complete(0)
    assert acks == [(0, "a")]  # block 1 is durable: acknowledged all the same
    assert w._failed is refused
    assert list(w._ready) == [block2] and w._busy == 0 and list(w._inflight) == []
    with pytest.raises(IOFailure, match="write failed: .*Resource temporarily unavailable"):
        w.append(SMALL)
    w.abort()


def test_a_refused_submission_in_the_timer_fails_the_writer(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, batch_interval_s=0.5)
    w.append(SMALL, "a")
    refused = q.refuse = eagain()
    clock.advance(500_000_000)
    assert timer_step(w) == []  # the loop ends: the writer has failed
    assert w._failed is refused
    assert len(w._ready) == 1 and w._busy == 0
    with pytest.raises(IOFailure, match="write failed: "):
        w.append(SMALL)
    w.abort()


def test_a_failed_write_stops_the_acknowledgements_and_the_submissions(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=3, block_soft_limit_bytes=4096)
    acks = acking(w)
    for t in "abcd":
        w.append(REC4K, t)  # blocks 1 to 3 written, block 4 opens: every slot is busy
    b1, b2, b3 = w._inflight
    q.complete(2)  # block 3: done, not durable; block 4 takes its slot
    b4 = w._inflight[-1]
    w.append(SMALL, "e")  # block 5 opens
    open_block = w._cur
    eio = OSError(errno.EIO, "Input/output error")
    q.complete(0, eio)  # block 1 failed
    assert w._failed is eio
    assert list(w._inflight) == [b2, b4]  # only the blocks still in flight are waited for
    assert w._cur is open_block and len(q.submitted) == 4  # nothing more is written
    q.complete(0, OSError(errno.ENOSPC, "No space left on device"))  # block 2
    q.complete(0)  # block 4
    assert w._failed is eio  # the first error is kept
    assert acks == [] and w.blocks_written == 2
    assert list(w._inflight) == []
    w.abort()


def test_a_write_failing_while_an_append_waits_for_a_slot_stops_it_before_the_next_write(tmp_path):
    """An append waiting for a free slot (two blocks queued past the run-ahead) is woken by the failed
    completion of the block in flight: it raises the failure and starts no write of the queued blocks."""
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1, block_soft_limit_bytes=4096)
    w.append(REC4K, 1)  # block 1 written: the only slot busy
    w.append(REC4K, 2)
    w.append(REC4K, 3)  # block 2 queued (the run-ahead), block 3 open
    w._lock.steps.append(lambda: q.complete(0, OSError(errno.EIO, "Input/output error")))
    with pytest.raises(IOFailure, match="Input/output error"):
        w.append(REC4K, 4)  # block 3 queued too: waits for the slot, which block 1's failure frees
    assert w._lock.waits == [None]
    assert len(q.submitted) == 1 and len(w._ready) == 2
    w.abort()


def test_a_failing_acknowledgement_forgets_the_blocks_already_done(tmp_path):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=3, block_soft_limit_bytes=4096)
    broken = BrokenPipeError(errno.EPIPE, "Broken pipe")

    def on_ack(offset, token):
        raise broken

    w.on_ack = on_ack
    for t in "abc":
        w.append(REC4K, t)
    b1, b2, b3 = w._inflight
    q.complete(2)  # block 3 done
    q.complete(0)  # block 1 durable: its acknowledgement fails
    assert w._failed is broken
    assert list(w._inflight) == [b2]
    w.abort()


def test_a_failed_window_header_write_still_acknowledges_every_durable_block(tmp_path):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=2, block_soft_limit_bytes=8192,
                       window_upper_limit_bytes=32768)
    w.update_header(sliding_window_max_length=12288)
    acks = acking(w)
    w.append(REC4K, "a")  # block 1 [0, 4K)
    w.append(REC4K, "b")  # block 2 [4K, 8K)
    w.append(REC4K, "c")  # block 3 opens: both slots are busy
    q.complete(1)  # block 2 done: block 3 [8K, 12K) is written, the window's 12 KiB exactly
    assert len(q.submitted) == 3
    w.append(b"d" * (12288 - rec.SIZE), "d")  # block 4 [12K, 24K)
    w.append(SMALL, "e")  # closes block 4 (queued)
    w.dev = FaultyDevice(w.dev, fail_writes_after=0)  # header writes fail from now on
    q.complete(0)  # block 1: blocks 1 and 2 durable; block 4 needs a wider window, whose header fails
    assert len(q.submitted) == 3
    assert isinstance(w._failed, IOFailure)
    assert acks == [(0, "a"), (4096, "b")]
    w.abort()


def test_waits_never_block_in_these_tests(tmp_path):
    """The tools themselves: a wait with no step left is a failure, not a hang."""
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, iodepth=1)
    w.append(SMALL)
    with pytest.raises(WouldBlock):
        w.drain()
    w.abort()


def test_the_threads_engine_without_submit_batching_writes_and_acknowledges_every_block(tmp_path, monkeypatch):
    """A write queue without flush_submits (the threads engine) is not asked for it: completions
    start the next write and acknowledge the durable blocks as with AIO."""
    from test_mut_writer import make_writer

    monkeypatch.setenv("WALCTL_IO_ENGINE", "threads")
    w = make_writer(new_wal(tmp_path), iodepth=1, block_soft_limit_bytes=4096)
    assert w.io_engine == "threads" and not hasattr(w._queue, "flush_submits")
    acks = acking(w)
    for t in range(6):
        w.append(REC4K, t)
    w.drain()
    assert [t for _, t in acks] == list(range(6)) and w._failed is None and w.blocks_written == 6
    w.close()


# -- a batch of completions (the AIO queue's ``batch.more``) ---------------------------------
class BatchedWrites(HeldWrites):
    """HeldWrites whose ``complete_batch`` completes several writes as one batch of completions, as
    the AIO queue's reaping does: each callback sees in ``batch.more`` how many follow it; ``after``
    runs after each callback (a snapshot of the writer between them)."""

    def __init__(self, dev):
        super().__init__(dev)
        self.batch = types.SimpleNamespace(more=0)

    def complete_batch(self, indexes, errors=None, after=None) -> None:
        writes = [self.pending[i] for i in indexes]
        self.pending = [w for i, w in enumerate(self.pending) if i not in indexes]
        for n, w in enumerate(writes):
            error = (errors or {}).get(n)
            if error is None:
                with memoryview(w.buf) as mv:
                    self.dev.pwrite(w.offset, mv[:w.length])
            self.batch.more = len(writes) - 1 - n
            w.done(error)
            if after is not None:
                after()
        self.batch.more = 0


def batched_writer(tmp_path, iodepth: int):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=iodepth, block_soft_limit_bytes=4096)
    w._queue = batched = BatchedWrites(w.dev)
    return w, batched


def test_a_batch_of_completions_is_made_durable_submitted_and_acknowledged_at_its_last(tmp_path):
    """The first completions of a batch only book their writes (slots freed, figures counted): their
    blocks stay in flight, unacknowledged, nobody is woken and nothing is submitted; the last one
    makes all of them durable in log order, starts the next write, flushes the submissions once,
    acknowledges (after the flush) and wakes the waiters once."""
    w, q = batched_writer(tmp_path, 3)
    seen = []
    w.on_ack = lambda offset, token: seen.append((token, len(q.submitted), q.flushes))
    for t in "abcde":
        w.append(REC4K, t)  # blocks 1-3 written; block 4 queued (closed by "e"), block 5 open
    blocks = list(w._inflight)
    assert len(blocks) == 3 and len(w._ready) == 1 and len(q.submitted) == 3
    snaps = []
    w._lock.notified = 0

    def snap():
        snaps.append((len(seen), w._busy, len(w._inflight), len(q.submitted), q.flushes, w._lock.notified,
                      w.blocks_written, w.stages.count, w.acked_end))

    q.complete_batch([0, 1, 2], after=snap)
    assert snaps[:2] == [(0, 2, 3, 3, 0, 0, 1, 1, 0), (0, 1, 3, 3, 0, 0, 2, 2, 0)]
    assert snaps[2] == (3, 1, 1, 4, 1, 1, 3, 3, 3 * 4096)
    assert seen == [("a", 4, 1), ("b", 4, 1), ("c", 4, 1)]  # block 4 written and flushed first
    assert [b.done for b in blocks] == [True] * 3
    w.abort()


def test_a_failed_write_in_a_batch_is_booked_at_once(tmp_path):
    """A completion with an error is never held for the rest of its batch: the writer fails at once,
    forgets the blocks already done and wakes its waiters (an append waiting for a slot raises)."""
    w, q = batched_writer(tmp_path, 3)
    acks = acking(w)
    for t in "abc":
        w.append(REC4K, t)
    b1, b2, b3 = w._inflight
    eio = OSError(errno.EIO, "Input/output error")
    snaps = []
    w._lock.notified = 0
    q.complete_batch([1, 0, 2], errors={1: eio},
                     after=lambda: snaps.append((w._failed, list(w._inflight), w._lock.notified)))
    # block 2 booked (more 2); block 1 fails (more 1): at once, block 2 (done) forgotten, waiters woken
    assert snaps[:2] == [(None, [b1, b2, b3], 0), (eio, [b3], 1)]
    assert acks == [] and w.blocks_written == 2
    w.abort()
