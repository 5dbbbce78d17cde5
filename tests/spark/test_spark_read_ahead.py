"""A compaction task's reads run ahead of its writes (walctl.spark.job.ReadAhead): the next
iteration's GETs start while the current one's buffers are still held, yet the bytes held
never exceed the task's memory share, and the GETs are exactly the plan's, in its order."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from walctl.spark.job import ReadAhead

KiB = 1 << 10


class CountingStore:
    """read_range returns zeros and notes each GET, in the order they were made."""

    def __init__(self):
        self.gets: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def read_range(self, key: str, start: int, end: int) -> bytes:
        with self.lock:
            self.gets.append((key, start, end))
        return bytes(end - start)


def read(key: str, start: int, size: int):
    return SimpleNamespace(key=key, start=start, end=start + size, size=size)


def specs(memory: int):
    # three iterations of 3 x 10 KiB; the task's share holds 40 KiB: one iteration and a bit
    its = [tuple(read(f"o{k}", n * 10 * KiB, 10 * KiB) for n in range(3)) for k in range(3)]
    return [SimpleNamespace(reads=r, memory_bytes=memory, read_rate_bps=None, read_threads=4) for r in its], its


def test_reads_run_ahead_within_the_memory_share_and_in_plan_order():
    store = CountingStore()
    memory = 40 * KiB
    task, its = specs(memory)
    ahead = ReadAhead(store, task)
    peak = 0
    try:
        for k, futures in enumerate(ahead.futures):
            buffers = [f.result() for f in futures]
            peak = max(peak, ahead.held)
            assert ahead.held <= memory
            if k + 1 < len(task):
                # the next iteration's first GET starts once this one's reads are in: 30 + 10 KiB fit 40
                for _ in range(200):
                    with ahead.cond:
                        if len(store.gets) > 3 * (k + 1):
                            break
                    threading.Event().wait(0.01)
                assert len(store.gets) == 3 * (k + 1) + 1, "the next read started ahead of the writes, one only"
                peak = max(peak, ahead.held)
                assert ahead.held <= memory
            for b in buffers:  # written out: the memory goes back
                ahead.release(len(b))
    finally:
        ahead.close()
    assert peak == memory  # 40 KiB held at once: 3 reads of this iteration and 1 of the next
    assert store.gets == [(r.key, r.start, r.end) for it in its for r in it]  # the plan's GETs, in order
    assert ahead.bytes == [30 * KiB] * 3


def test_a_read_larger_than_the_share_goes_alone():
    store = CountingStore()
    task = [SimpleNamespace(reads=(read("big", 0, 64 * KiB), read("small", 0, KiB)), memory_bytes=16 * KiB,
                            read_rate_bps=None, read_threads=4)]
    ahead = ReadAhead(store, task)
    try:
        big = ahead.futures[0][0].result()
        threading.Event().wait(0.1)
        assert store.gets == [("big", 0, 64 * KiB)]  # the small one waits for the big one's memory
        ahead.release(len(big))
        assert len(ahead.futures[0][1].result()) == KiB
    finally:
        ahead.close()


def test_a_local_store_reads_into_the_tasks_pool_same_bytes_buffers_reused(tmp_path):
    """A local store's reads land in the task's own aligned arena (read_range_into: no copy):
    the bytes are read_range's, one GET each, and every extent goes back to the arena."""
    import os

    from walctl.store import open_store

    store = open_store(str(tmp_path / "s"))
    data = os.urandom(300 * KiB)
    store.put("o", data)
    reads = [read("o", 5, 100 * KiB), read("o", 100 * KiB + 5, 100 * KiB), read("o", 199 * KiB, 100 * KiB)]
    task = [SimpleNamespace(reads=(r,), memory_bytes=120 * KiB, read_rate_bps=None, read_threads=2) for r in reads]
    before = store.stats.snapshot().get("get", 0)
    ahead = ReadAhead(store, task)
    try:
        assert ahead.buffers is not None
        for k, r in enumerate(reads):
            got = ahead.futures[k][0].result()
            assert bytes(got) == data[r.start:r.end] == store.read_range("o", r.start, r.end)
            ahead.release(r.size, (k, 0))
        assert ahead.buffers.free == [(0, ahead.buffers.cap)]  # every extent given back, merged
    finally:
        ahead.close()
    assert store.stats.snapshot()["get"] - before == 2 * len(reads)  # one per read, and read_range's here


def test_read_range_into_a_short_object_and_a_small_buffer(tmp_path):
    from walctl.device.buffers import aligned_buffer
    from walctl.store import open_store

    store = open_store(str(tmp_path / "s"))
    store.put("o", b"x" * 5000)
    buf = aligned_buffer(store.into_size(4000, 9000))
    assert bytes(store.read_range_into("o", 4000, 9000, buf)) == b"x" * 1000  # the object ends at 5000
    import pytest

    with pytest.raises(ValueError):
        store.read_range_into("o", 0, 5000, aligned_buffer(4096))


def test_buffer_pool_extents_are_reused_merged_and_never_overlap():
    from walctl.spark.job import BufferPool

    pool = BufferPool(64 * KiB)
    a, ta = pool.take(10 * KiB)  # 12 KiB: whole pages
    b, tb = pool.take(4 * KiB)
    c, tc = pool.take(16 * KiB)
    assert (ta, tb, tc) == ((0, 12 * KiB), (12 * KiB, 4 * KiB), (16 * KiB, 16 * KiB))
    assert len(a) == 12 * KiB and len(b) == 4 * KiB and len(c) == 16 * KiB
    a[:] = b"a" * len(a)
    b[:] = b"b" * len(b)
    assert bytes(a) == b"a" * len(a)  # extents do not overlap
    big, none = pool.take(40 * KiB)  # 32 KiB left: a buffer of its own
    assert none is None and len(big) == 40 * KiB
    pool.give(tb)
    again, t2 = pool.take(3 * KiB)
    assert t2 == (12 * KiB, 4 * KiB)  # first fit: the extent given back
    for token in (t2, ta, tc):
        pool.give(token)
    assert pool.free == [(0, 64 * KiB)]
