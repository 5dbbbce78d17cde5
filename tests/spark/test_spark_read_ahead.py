"""A compaction task's reads run ahead of its writes (walctl.spark.readahead.TaskReads): the next
iteration's GETs start while the current one's buffers are still held, yet the bytes held
never exceed the task's memory share, and the GETs are exactly the plan's, in its order."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from walctl.spark.readahead import TaskReads
from walctl.store.base import StoreCapabilities

KiB = 1 << 10


class CountingStore:
    """read_range returns zeros and notes each GET, in the order they were made."""

    capabilities = StoreCapabilities()  # returns bytes: no read_range_into

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
    ahead = TaskReads(store, task)
    peak = 0
    try:
        for k, futures in enumerate(ahead.futures):
            buffers = [f.result() for f in futures]
            peak = max(peak, ahead.held)
            assert ahead.held <= memory
            if k + 1 < len(task):
                # the next iteration's first GET starts once this one's reads are in: 30 + 10 KiB fit 40
                for _ in range(200):
                    with store.lock:
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
    ahead = TaskReads(store, task)
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
    ahead = TaskReads(store, task)
    try:
        assert ahead.buffers is not None
        for k, r in enumerate(reads):
            got = ahead.futures[k][0].result()
            assert bytes(got) == data[r.start:r.end] == store.read_range("o", r.start, r.end)
            ahead.release(r.size, (k, 0))
        assert ahead.buffers.free_extents == [(0, ahead.buffers.arena_bytes)]  # every extent given back, merged
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
    from walctl.device.prefetch import BufferPool

    pool = BufferPool(arena_bytes=64 * KiB)
    a, ta = pool.extent(10 * KiB)  # 12 KiB: whole pages
    b, tb = pool.extent(4 * KiB)
    c, tc = pool.extent(16 * KiB)
    assert (ta, tb, tc) == ((0, 12 * KiB), (12 * KiB, 4 * KiB), (16 * KiB, 16 * KiB))
    assert len(a) == 12 * KiB and len(b) == 4 * KiB and len(c) == 16 * KiB
    a[:] = b"a" * len(a)
    b[:] = b"b" * len(b)
    assert bytes(a) == b"a" * len(a)  # extents do not overlap
    big, none = pool.extent(40 * KiB)  # 32 KiB left: a buffer of its own
    assert none is None and len(big) == 40 * KiB
    pool.give_extent(tb)
    again, t2 = pool.extent(3 * KiB)
    assert t2 == (12 * KiB, 4 * KiB)  # first fit: the extent given back
    for token in (t2, ta, tc):
        pool.give_extent(token)
    assert pool.free_extents == [(0, 64 * KiB)]


def test_a_reads_memory_goes_back_once_its_last_chunk_is_written_not_with_the_piece(tmp_path, monkeypatch):
    """A local store's task gives a read's arena extent back as soon as the write has taken its
    last chunk: the next iteration's read starts while the piece is still being written (it
    waited for the whole piece, fsync included, before), and the bytes written are the plan's."""
    import os

    from walctl.format.batch import StreamRecordBatch
    from walctl.format.object import build_object
    from walctl.spark.compact import read_indexes
    from walctl.spark.job import index_block
    from walctl.spark.task import IterationSpec, PieceSpec, run_iterations_in_task
    from walctl.compaction.planner import plan_compaction
    from walctl.store import manifest as mf
    from walctl.store import open_store
    from walctl.store.local import LocalStore

    root = str(tmp_path / "s")
    store = open_store(root)
    objects, offset = [], 0
    for object_id in (1, 2):
        batches = []
        for _ in range(4):
            batches.append(StreamRecordBatch(1, 0, offset, 1, os.urandom(8 * KiB)))
            offset += 1
        built = build_object([(1, batches)], block_size=8 * KiB)
        key = mf.object_key(object_id)
        store.put_large(key, built.data)
        objects.append(mf.LiveObject(object_id, key, "SSO", len(built.data),
                                     [mf.ObjectRange(1, r.start_offset, r.end_offset, r.size_bytes)
                                      for r in built.ranges.values()], order_id=object_id, data_time=0))

    def install(m):
        m.objects = objects
        m.next_object_id = 3
        m.streams = {1: mf.StreamSpan(0, offset)}

    mf.commit(store, install, command="test")
    doc = mf.load_latest(store)
    indexes, _ = read_indexes(store, doc.live())
    one = sum(e.block_size for e in indexes[1])
    plan = plan_compaction(doc, indexes, memory_limit=one, split_size=1 << 40)
    assert [len(it.reads) for it in plan.iterations] == [1, 1]  # one GET per source object, one per iteration
    (out,) = plan.outputs
    key = mf.object_key(9)
    upload = store.create_multipart(key)
    specs = [IterationSpec(root, None, it.index, it.reads,
                           tuple(PieceSpec(key, p, upload, out.data_bytes, None) for p in it.pieces),
                           memory_bytes=plan.task_memory) for it in plan.iterations]
    assert index_block(out)  # (the driver's tail part: not this test's)

    second_read = threading.Event()
    real_read, real_part = LocalStore.read_range_into, LocalStore.put_part

    def read_into(self, key, start, end, buf):
        if key == mf.object_key(2):
            second_read.set()
        return real_read(self, key, start, end, buf)

    waited = []

    def put_part(self, key, upload_id, number, chunks, position, size=None):
        def spy():
            yield from chunks
            if number == 1:  # every chunk of part 1 written, the part not yet synced nor returned
                waited.append(second_read.wait(10))
        return real_part(self, key, upload_id, number, spy(), position, size=size)

    monkeypatch.setattr(LocalStore, "read_range_into", read_into)
    monkeypatch.setattr(LocalStore, "put_part", put_part)
    results = run_iterations_in_task(specs)
    assert [r.get("error") for r in results] == [None, None]
    assert waited == [True]  # the next iteration's read had started while part 1 was being written
    with open(store._path(key), "rb") as f:
        written = f.read()
    expected = b"".join(store.read_range(r.key, r.position, r.end_position) for r in out.ranges)
    assert written == expected
