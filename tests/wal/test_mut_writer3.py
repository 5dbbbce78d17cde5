"""walctl/wal/writer_blocks.py's last two mutation survivors (issue 32): the budget stage of a block
opened after the writer had stalled, and the pump after a padding block while the budget holds it.

In-process writers on a 64 KiB ring in a file (tests/wal/test_mut_writer.py's helpers), with a clock
the test sets (the writer's and its pacer's): every budget figure is exact, nothing sleeps.
"""
from __future__ import annotations

from walctl.format import record as rec
from walctl.wal.pacing import Budget, Pacer

from test_mut_writer import KiB, RING, acking, make_writer, new_wal

MS = 1_000_000
T0 = 10**12  # a clock reading of 0 means "not stalled" to the writer: start far from it


class SetClock:
    """perf_counter_ns as the test sets it."""

    def __init__(self):
        self.now = T0

    def __call__(self) -> int:
        return self.now


def on_set_clock(w, budget: Budget) -> SetClock:
    clock = SetClock()
    w._clock = clock
    w._pacer = Pacer(budget, clock)
    return clock


def test_a_block_opened_after_a_stall_counts_only_its_own_budget_time(tmp_path):
    # 81920 B/s holds one 4 KiB block (50 ms of it): each block write empties the bucket.
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    clock = on_set_clock(w, Budget(bandwidth_bytes_per_s=81920))
    acks = acking(w)
    body = b"r" * (4000 - rec.SIZE)
    assert [w.append(body, i) for i in range(3)] == [0, 4096, 8192]
    # at T0: block 0 was written; block 1 (closed) is held by the budget; block 2 is open
    clock.now = T0 + 60 * MS  # the timer thread starts block 1's write: the stall lasted 60 ms
    with w._lock:
        assert w._lock.wait_for(lambda: w.blocks_written == 2, timeout=30)
    clock.now = T0 + 200 * MS  # the bucket is full again: block 2 is written as it closes
    assert w.append(body, 3) == 12288  # opens block 3, no stall under way (60 ms so far in all)
    clock.now = T0 + 1000 * MS
    w.drain()  # block 3 is written at once: the budget never held it
    assert acks == [(0, 0), (4096, 1), (8192, 2), (12288, 3)]
    st = w.stages
    assert st.count == 4
    # queued: 0, 60, 200 and 800 ms; budget: block 1's 60 ms, and block 2's (open through the same stall)
    assert st.sums["queued"] == 1060 * MS
    assert sorted(st.samples["budget"]) == [0, 0, 60 * MS, 60 * MS]
    assert st.sums["budget"] == 120 * MS
    w.close()


def test_a_block_opened_mid_stall_counts_the_stall_from_its_opening(tmp_path):
    """The budget stalls the writer from T0; block 3 opens 20 ms into that stall, so of the 200 ms the
    writer stalls in all it was there for 180: its budget stage is 180 ms, not the whole stall."""
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    clock = on_set_clock(w, Budget(bandwidth_bytes_per_s=81920))
    acks = acking(w)
    body = b"r" * (4000 - rec.SIZE)
    assert [w.append(body, i) for i in range(3)] == [0, 4096, 8192]
    # at T0: block 0 was written; block 1 (closed) is held by the budget; block 2 is open
    clock.now = T0 + 20 * MS
    assert w.append(body, 3) == 12288  # closes block 2 (queued behind block 1), opens block 3 mid-stall
    clock.now = T0 + 60 * MS  # the timer thread writes block 1; the budget holds block 2 from here
    with w._lock:
        assert w._lock.wait_for(lambda: w.blocks_written == 2, timeout=30)
    clock.now = T0 + 200 * MS  # the bucket is full again: the timer writes block 2
    with w._lock:
        assert w._lock.wait_for(lambda: w.blocks_written == 3, timeout=30)
    clock.now = T0 + 1000 * MS
    w.drain()  # block 3 is written at once
    assert acks == [(0, 0), (4096, 1), (8192, 2), (12288, 3)]
    st = w.stages
    assert st.count == 4
    assert sorted(st.samples["queued"]) == [0, 60 * MS, 200 * MS, 980 * MS]
    # block 1: the stall's first 60 ms; block 2: all 200; block 3: the 180 after its opening
    assert sorted(st.samples["budget"]) == [0, 60 * MS, 180 * MS, 200 * MS]
    w.close()


def test_a_padding_block_the_budget_holds_queues_behind_the_last_block(tmp_path):
    # 819200 B/s: a 40 KiB bucket, emptied (and in debt) by the first 48 KiB block
    w = make_writer(new_wal(tmp_path))
    clock = on_set_clock(w, Budget(bandwidth_bytes_per_s=819200))
    acks = acking(w)
    body = b"r" * (16 * KiB - rec.SIZE)
    offs = [w.append(body, i) for i in range(3)]
    w.drain()
    w.trim_to(offs[2])  # room for the next lap
    assert w.append(b"q" * 100, 3) == 48 * KiB
    # closes [48K, 52K) and the padding [52K, 64K): both held by the budget, queued (run ahead)
    assert w.append(body, 4) == RING
    assert w.blocks_written == 1 and w.stages.count == 1
    clock.now = T0 + 1000 * MS  # the bucket is full again: the three blocks left fit in it
    w.drain()
    assert [o for o, _ in acks] == [0, 16 * KiB, 32 * KiB, 48 * KiB, RING]
    assert w.blocks_written == 4 and w.acked_end == RING + 16 * KiB
    # the padding block was held from T0 too: its queued time is all budget
    assert w.stages.sums["budget"] == 3 * 1000 * MS
    w.close()


def test_the_set_clock_is_the_writer_s(tmp_path):
    """The helper above really drives the writer's budget (else the tests above prove nothing)."""
    w = make_writer(new_wal(tmp_path), block_soft_limit_bytes=4096)
    on_set_clock(w, Budget(bandwidth_bytes_per_s=81920))
    w.append(b"a" * 100)
    w.append(b"b" * 4000)  # closes block 0: written at once
    w.append(b"c" * 4000)  # closes block 1: held (the clock never moves)
    assert w.blocks_written + w._busy == 1 and len(w._ready) == 1
    w.abort()
