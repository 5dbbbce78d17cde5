"""The writer's per-block Python, trimmed (issue 31, h-blk6), with its contracts kept: a block closed in the
usual case starts its write inside the deferred section that closes it (one signals_deferred per block,
not two), only in that case (first in line, a slot free, no budget, inside the persisted window, the
writer usable), and a write started off the main thread enters no deferred section (it holds nothing
there). Driven on one thread with tests/wal/windowfakes.py (writes complete when the test says).
"""

from __future__ import annotations

import errno
import threading

import pytest

import walctl.wal.writer_window as window
from walctl.device.signals import signals_deferred
from walctl.errors import IOFailure
from walctl.format import record as rec
from walctl.wal.pacing import Budget

from test_mut_writer import KiB, MiB, new_wal, read_state
from windowfakes import FakeClock, held_writer

BLOCK = 256 * KiB
REC256K = b"r" * (BLOCK - rec.SIZE)  # one record fills a 256 KiB block exactly (no padding)
REC4K = b"q" * (4096 - rec.SIZE)


class Deferrals:
    """Counts the signals_deferred sections writer_window enters, per thread, and how deep the calling
    thread is in them (the queue's submit reads it)."""

    def __init__(self, monkeypatch):
        self.entered: dict[int, int] = {}
        self.depth: dict[int, int] = {}
        outer = self

        class Counting:
            def __enter__(self):
                me = threading.get_ident()
                outer.entered[me] = outer.entered.get(me, 0) + 1
                outer.depth[me] = outer.depth.get(me, 0) + 1
                self.real = signals_deferred()
                return self.real.__enter__()

            def __exit__(self, *exc):
                outer.depth[threading.get_ident()] -= 1
                return self.real.__exit__(*exc)

        monkeypatch.setattr(window, "_signals_deferred", Counting)

    def on_main(self) -> int:
        return self.entered.get(threading.main_thread().ident, 0)

    def deep(self) -> int:
        return self.depth.get(threading.get_ident(), 0)


def spying(q, deferrals: Deferrals) -> list:
    """(offset, deferred depth at submit) of each write the queue is given."""
    seen: list = []
    submit = q.submit

    def spy(offset, buf, done, length=None):
        seen.append((offset, deferrals.deep()))
        submit(offset, buf, done, length)

    q.submit = spy
    return seen


def test_a_closed_block_starts_its_write_in_the_section_that_closes_it_up_to_the_window_end(tmp_path, monkeypatch):
    path = new_wal(tmp_path, ring=4 * MiB)
    assert read_state(path).header.sliding_window_max_length == 1 * MiB
    w, q = held_writer(path, FakeClock(), iodepth=8, block_soft_limit_bytes=BLOCK)
    w.append(REC256K, 0)  # block 0, written as its append ends (batch interval 0), then durable:
    q.complete(0)  # the window starts at block 1 (256 KiB)
    d = Deferrals(monkeypatch)
    seen = spying(q, d)
    per_append = []
    for i in range(1, 6):
        before = d.on_main()
        w.append(REC256K, i)
        per_append.append(d.on_main() - before)
    # blocks 1-4 end inside the window [256 KiB, 1.25 MiB) (block 4 exactly at its end): each closed and
    # written in one section; block 5 ends past it: _pump grows the window (a header write), then
    # _submit starts it in a second section
    assert per_append == [1, 1, 1, 1, 2]
    assert [o for o, _ in seen] == q.submitted[1:] and len(q.submitted) == 6
    assert all(depth == 1 for _, depth in seen)
    assert w.state.header.sliding_window_max_length == 4 * MiB
    assert w.header_writes == 1


def test_a_budget_is_charged_each_write_s_padded_bytes(tmp_path):
    w, q = held_writer(new_wal(tmp_path, ring=1 * MiB), FakeClock(), budget=Budget(bandwidth_bytes_per_s=1 << 30),
                       iodepth=4, block_soft_limit_bytes=64 * KiB)
    taken = []
    take = w._pacer.take
    w._pacer.take = lambda nbytes, *now: (taken.append(nbytes), take(nbytes, *now))[1]
    w.append(b"x" * (10_000 - rec.SIZE), 0)  # a 10,000-byte block, written as 12 KiB
    w.append(b"y" * (40_000 - rec.SIZE), 1)  # 40,000 bytes: 40 KiB
    assert taken == [12288, 40960]
    assert len(q.submitted) == 2


def test_no_block_starts_at_close_while_every_slot_is_busy_and_a_completion_starts_it(tmp_path, monkeypatch):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=2, block_soft_limit_bytes=4096)
    d = Deferrals(monkeypatch)
    seen = spying(q, d)
    for i in range(4):
        w.append(REC4K, i)
    # blocks 0 and 1 in flight; block 2 was closed by record 3's placement with both slots busy: queued
    assert len(q.submitted) == 2
    assert [b.start for b in w._ready] == [8192] and w._cur.start == 12288
    before = d.on_main()
    q.complete(0)  # on this (the main) thread: the completion starts block 2 inside a deferred section
    assert d.on_main() - before == 1
    assert seen[-1] == (q.submitted[2], 1) and len(q.submitted) == 3


def test_a_block_closed_behind_a_refused_one_is_written_after_it(tmp_path):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=2, block_soft_limit_bytes=4096)
    w.append(REC4K, 0)
    q.refuse = OSError(errno.EAGAIN, "Resource temporarily unavailable")
    with pytest.raises(OSError):
        w.append(REC4K, 1)  # block 1's write refused at its close: queued again, first in line
    w.append(REC4K, 2)  # block 2 stays open: a closed block waits
    assert [b.start for b in w._ready] == [4096] and len(q.submitted) == 1
    w._lock.steps.append(lambda: q.complete(0))  # the drain's wait for a slot
    w.submit_open_block()  # block 2 closes with a slot free, but behind block 1: block 1 goes first
    assert q.submitted[1:] == [q.submitted[0] + 4096, q.submitted[0] + 8192]


def test_no_block_starts_at_close_under_a_budget(tmp_path, monkeypatch):
    clock = FakeClock()
    w, q = held_writer(new_wal(tmp_path), clock, budget=Budget(bandwidth_bytes_per_s=1 << 30), iodepth=4,
                       block_soft_limit_bytes=4096)
    d = Deferrals(monkeypatch)
    before = d.on_main()
    w.append(REC4K, 0)
    # the budget allows it: _pump's _submit takes it from the bucket (its own section after the close's)
    assert len(q.submitted) == 1 and d.on_main() - before == 2


def test_no_block_starts_at_close_after_a_failure_polled_in_append_frames(tmp_path):
    from walctl.format import framepack
    from walctl.wal.writer_blocks import FrameSpec

    if not framepack.AVAILABLE:
        pytest.skip("walctl.format._native is not built here")
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=4, block_soft_limit_bytes=4096)
    failure = IOFailure("write failed: injected")
    polls = []

    def poll():  # block 0's write fails as append_frames polls before closing block 1
        polls.append(len(q.pending))
        if len(q.submitted) == 1 and q.pending:
            q.complete(0, failure)
        return 0

    q.poll = poll
    payload = b"p" * 3000
    data = b"".join(len(payload).to_bytes(4, "big") + payload for _ in range(3))
    w.append_frames(data, 0, 3004, FrameSpec(False, 1, 0, 1 << 20), 0, 1 << 40)  # block 0, written at the end
    assert len(q.submitted) == 1
    with pytest.raises(IOFailure, match="injected"):
        w.append_frames(data, 3004, len(data), FrameSpec(False, 1, 0, 1 << 20), 1, 1 << 40)
    assert len(q.submitted) == 1  # block 1, closed after the failure, was never written


def test_a_write_started_off_the_main_thread_enters_no_deferred_section(tmp_path, monkeypatch):
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=1, block_soft_limit_bytes=4096)
    d = Deferrals(monkeypatch)
    seen = spying(q, d)
    for i in range(3):
        w.append(REC4K, i)
    assert len(q.submitted) == 1 and [b.start for b in w._ready] == [4096]
    done: list = []
    t = threading.Thread(target=lambda: done.append(q.complete(0)), name="completion")
    t.start()
    t.join(30)
    assert done and len(q.submitted) == 2  # the completion thread started block 1's write...
    assert seen[-1] == (q.submitted[1], 0)  # ...outside any deferred section,
    assert d.entered.get(t.ident, 0) == 0  # and entered none


def test_append_frames_closes_a_full_block_in_the_section_that_packed_it(tmp_path, monkeypatch):
    from walctl.format import framepack
    from walctl.wal import writer_blocks
    from walctl.wal.writer_blocks import FrameSpec

    if not framepack.AVAILABLE:
        pytest.skip("walctl.format._native is not built here")
    w, q = held_writer(new_wal(tmp_path), FakeClock(), iodepth=16, block_soft_limit_bytes=4096)
    d = Deferrals(monkeypatch)
    monkeypatch.setattr(writer_blocks, "_signals_deferred", window._signals_deferred)  # counted too
    seen = spying(q, d)
    payload = b"p" * 3000  # 3057-byte records: one a 4 KiB block
    data = b"".join(len(payload).to_bytes(4, "big") + payload for _ in range(8))
    count, pos, stop, _ = w.append_frames(data, 0, len(data), FrameSpec(False, 1, 0, 1 << 20), 0, 1 << 40)
    assert (count, pos, stop) == (8, len(data), framepack.STOP_INPUT)
    # one section to learn the first record's size (no block open), one per block packed (blocks 0-6
    # closed and written in it), one for the last block's close at the call's end (batch interval 0)
    assert d.on_main() == 1 + 8 + 1
    assert q.submitted == [q.submitted[0] + 4096 * i for i in range(8)]
    assert all(depth == 1 for _, depth in seen)
    assert w._cur is None and not w._ready and w.next_block == 8 * 4096
