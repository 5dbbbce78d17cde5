"""Acknowledgements of a batch of completions when a failure comes between its callbacks
(walctl/wal/writer_window.py ``_finish_block``).

The first completions of an AIO batch (``batch.more`` > 0) only book their writes; the batch's last
one acknowledges. Before batches, each block was acknowledged at its own completion, so a block whose
write was booked while the writer had not failed, and that was (with every block before it) the
durable head of the log, was acknowledged. It still is when another path records a failure before
the batch's last callback runs (an append's poll reaping a failed write, a header write failing);
nothing at or after a failed block, nor booked after the failure, is; a failing acknowledgement
stops the acknowledgements at once. Driven on one thread with tests/wal/windowfakes.py: ``after``
runs the other path's failure between two callbacks of a batch.
"""

from __future__ import annotations

import errno

import pytest

from walctl.device import FaultyDevice
from walctl.errors import IOFailure
from walctl.format import record as rec

from test_mut_writer import acking
from test_mut_writer_window import batched_writer

# Each test on the default engine (io_uring) and on native AIO (tests/conftest.py both_engines).
pytestmark = pytest.mark.usefixtures("both_engines")

REC4K = b"r" * (4096 - rec.SIZE)  # a 4 KiB record: one per block at a 4 KiB soft limit


def eio() -> OSError:
    return OSError(errno.EIO, "Input/output error")


def three_blocks(tmp_path):
    """A writer (iodepth 3, 4 KiB blocks) with blocks 1 to 3 ("a", "b", "c") in flight."""
    w, q = batched_writer(tmp_path, 3)
    acks = acking(w)
    for t in "abc":
        w.append(REC4K, t)
    assert len(w._inflight) == 3 and len(q.pending) == 3
    return w, q, acks


def after_callback(n: int, action):
    """An ``after`` for complete_batch: runs ``action`` once, after the batch's callback ``n`` (from 0)."""
    calls = []

    def after():
        if len(calls) == n:
            action()
        calls.append(None)

    return after


def header_write_fails(w):
    """The other path: a header write (as a trim or the window's growth) that fails, recording the failure."""
    def action():
        w.dev = FaultyDevice(w.dev, fail_writes_after=0)
        with pytest.raises(IOFailure):
            w.update_header(sliding_window_max_length=w.header.sliding_window_max_length + 4096)
        assert w._failed is not None
    return action


def test_the_head_booked_before_a_failed_write_reaped_by_another_thread_is_acknowledged(tmp_path):
    """Block 1 is booked first in its batch; before block 2's callback (the batch's last) the appender's
    poll reaps block 3's failed write. Block 1 was the durable head before the failure: acknowledged;
    block 2 completed after it: not."""
    w, q, acks = three_blocks(tmp_path)
    b1, b2, b3 = w._inflight
    failure = eio()
    q.complete_batch([0, 1], after=after_callback(0, lambda: q.complete(0, failure)))  # block 3 fails
    assert acks == [(0, "a")]
    assert w._failed is failure and w.records_acked == 1 and w.acked_end == 4096
    assert list(w._inflight) == [] and len(q.submitted) == 3  # nothing more written
    assert (b2.done, b2.error, b3.error) == (True, failure, failure)
    w.abort()


def test_a_header_write_failing_between_callbacks_leaves_the_booked_head_acknowledged(tmp_path):
    """Blocks 1 and 2 are booked, then a header write fails, then block 3's callback, the batch's last:
    blocks 1 and 2 are acknowledged in log order, block 3 (completed after the failure) is not."""
    w, q, acks = three_blocks(tmp_path)
    w._lock.notified = 0
    q.complete_batch([0, 1, 2], after=after_callback(1, header_write_fails(w)))
    assert acks == [(0, "a"), (4096, "b")]
    assert isinstance(w._failed, IOFailure) and w.records_acked == 2 and w.acked_end == 2 * 4096
    assert list(w._inflight) == [] and len(q.submitted) == 3
    assert w.blocks_written == 3 and w._busy == 0
    assert w._lock.notified == 1  # the waiters are woken once, at the batch's last
    w.abort()


def test_a_block_booked_before_a_failure_behind_one_completed_after_it_is_not_acknowledged(tmp_path):
    """Block 2 is booked first in its batch (block 1 still in flight: not the head), then a header
    write fails, then block 1 completes: the head completed after the failure, nothing is acknowledged."""
    w, q, acks = three_blocks(tmp_path)
    b1, b2, b3 = w._inflight
    q.complete_batch([1, 0], after=after_callback(0, header_write_fails(w)))
    assert acks == [] and w.records_acked == 0
    assert list(w._inflight) == [b3]  # only the write still in flight is waited for
    q.complete(0)
    assert acks == [] and list(w._inflight) == []
    w.abort()


def test_a_block_completing_after_a_failure_is_not_acknowledged(tmp_path):
    """Out of any batch: a header write fails, then block 1's write completes: durable, not acknowledged."""
    w, q, acks = three_blocks(tmp_path)
    header_write_fails(w)()
    q.complete(0)
    assert acks == [] and w.blocks_written == 1
    assert len(w._inflight) == 2 and not any(b.done for b in w._inflight)
    w.abort()


def test_a_failed_write_mid_batch_leaves_only_the_blocks_before_it_acknowledged(tmp_path):
    """Batch: block 1 booked, block 2 failed (booked at once, never held), block 3 after the failure:
    block 1 was durable at the head before the failure, as if its completion had come alone."""
    w, q, acks = three_blocks(tmp_path)
    b1, b2, b3 = w._inflight
    failure = eio()
    snaps = []
    q.complete_batch([0, 1, 2], errors={1: failure}, after=lambda: snaps.append((list(acks), list(w._inflight))))
    assert snaps == [([], [b1, b2, b3]), ([(0, "a")], [b3]), ([(0, "a")], [])]
    assert w._failed is failure and w.records_acked == 1 and w.blocks_written == 2
    w.abort()


def test_a_failing_acknowledgement_mid_batch_stops_the_acknowledgements_at_once(tmp_path):
    """A batch of three durable blocks; block 2's acknowledgement fails (stdout's reader gone): block 3's
    is not attempted, and the writer fails with it."""
    w, q, _ = three_blocks(tmp_path)
    broken = BrokenPipeError(errno.EPIPE, "Broken pipe")
    seen = []

    def on_ack(offset, token):
        seen.append(token)
        if token == "b":
            raise broken

    w.on_ack = on_ack
    q.complete_batch([0, 1, 2])
    assert seen == ["a", "b"] and w._failed is broken
    assert list(w._inflight) == [] and w.records_acked == 2
    w.abort()


def test_a_failing_acknowledgement_after_another_failure_stops_the_acknowledgements_at_once(tmp_path):
    """Blocks 1 and 2 booked, a header write fails, block 3 completes: block 1's acknowledgement fails,
    block 2's is not attempted; the writer reports the header write's failure, the first (the root
    cause: an acknowledgement's failure, e.g. a full disk under the redirected stdout, never hides
    the device's)."""
    w, q, _ = three_blocks(tmp_path)
    broken = BrokenPipeError(errno.EPIPE, "Broken pipe")
    seen, first = [], []

    def on_ack(offset, token):
        seen.append(token)
        first.append(w._failed)
        raise broken

    w.on_ack = on_ack
    q.complete_batch([0, 1, 2], after=after_callback(1, header_write_fails(w)))
    assert seen == ["a"] and isinstance(first[0], IOFailure) and w._failed is first[0]
    assert list(w._inflight) == []
    w.abort()
