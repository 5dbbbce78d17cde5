"""walctl.device.prefetch: the one read-ahead and the one buffer pool (issue 29 item 5)."""

from __future__ import annotations

import threading

import pytest

from walctl.device.buffers import ALIGN, aligned_buffer
from walctl.device.opening import open_device
from walctl.device.fdio import bytes_read_total
from walctl.device.prefetch import BufferPool, Cancelled, ReadAhead


def test_reads_start_in_submission_order_and_return_their_values():
    started = []
    with ReadAhead(1) as ahead:
        reads = [ahead.submit(lambda n: started.append(n) or n * 2, n) for n in range(20)]
        assert [r.result() for r in reads] == [n * 2 for n in range(20)]
    assert started == list(range(20))


def test_an_error_is_raised_by_result_in_the_taking_thread():
    with ReadAhead(2) as ahead:
        read = ahead.submit(lambda: 1 // 0)
        read.wait()
        assert isinstance(read.error, ZeroDivisionError)
        with pytest.raises(ZeroDivisionError):
            read.result()


def test_memory_share_holds_back_reads_until_released():
    """A read starts only when its bytes fit the share beside those held; release lets the next go."""
    with ReadAhead(4, memory_bytes=100) as ahead:
        first = ahead.submit(lambda: "a", size=60)
        second = ahead.submit(lambda: "b", size=60)
        assert first.result() == "a"
        assert not second._done.wait(0.2)  # 60 held + 60 > 100: waits (bounded check, then the event)
        ahead.release(60)
        assert second.result() == "b"


def test_a_read_larger_than_the_share_runs_alone():
    with ReadAhead(2, memory_bytes=10) as ahead:
        assert ahead.submit(lambda: "big", size=1000).result() == "big"


def test_inflight_bytes_bound_reads_at_once():
    """Two reads of 60 bytes with inflight_bytes 100 never run together."""
    gate = threading.Event()
    running, most = [], []

    def read(tag):
        running.append(tag)
        most.append(len(running))
        gate.wait(5)
        running.remove(tag)
        return tag

    with ReadAhead(2, inflight_bytes=100) as ahead:
        reads = [ahead.submit(read, n, size=60) for n in range(3)]
        gate.set()
        assert [r.result() for r in reads] == [0, 1, 2]
    assert max(most) == 1


def test_close_cancels_the_reads_not_started_and_waits_for_the_running_one():
    gate, entered = threading.Event(), threading.Event()

    def slow():
        entered.set()
        gate.wait(5)
        return "done"

    ahead = ReadAhead(1)
    running = ahead.submit(slow)
    queued = ahead.submit(lambda: "never")
    assert entered.wait(5)
    closer = threading.Thread(target=ahead.close)
    closer.start()
    gate.set()
    closer.join(5)
    assert not closer.is_alive()
    assert running.result() == "done"
    with pytest.raises(Cancelled):
        queued.result()
    assert ahead.submit(lambda: 1).error is not None  # closed: cancelled at once


def test_device_reads_of_the_threads_count_as_the_takers(tmp_path):
    """bytes_read_total is per thread: a read-ahead thread's device reads are credited to the thread
    that takes them (once), and a read never taken can still be credited (ChunkReader.close)."""
    path = tmp_path / "dev.img"
    path.write_bytes(bytes(64 * ALIGN))
    dev = open_device(str(path), writable=False)
    try:
        bufs = [aligned_buffer(4 * ALIGN) for _ in range(3)]
        before = bytes_read_total()
        with ReadAhead(2) as ahead:
            reads = [ahead.submit(dev.pread_into, i * 4 * ALIGN, buf) for i, buf in enumerate(bufs)]
            reads[0].result()
            assert bytes_read_total() - before == 4 * ALIGN
            for r in reads[1:]:
                r.wait()
            assert reads[1].credit() == 4 * ALIGN and reads[1].credit() == 0
            reads[2].result()
        assert bytes_read_total() - before == 12 * ALIGN
    finally:
        dev.close()


def test_take_give_reuses_and_limit_holds():
    pool = BufferPool(3 * ALIGN, limit=2)
    a, _ = pool.take(), pool.take()
    assert len(a) == 3 * ALIGN and pool.take() is None and pool.made == 2
    pool.give(a)
    assert pool.take() is a and pool.made == 2
    pool.give(bytearray(8 * ALIGN))  # a larger buffer of one large record: not kept
    assert pool.take() is None


def test_lend_reuses_a_buffer_only_once_its_views_are_gone():
    pool = BufferPool(keep=2)
    first = pool.lend(ALIGN)
    first[:3] = b"abc"
    second = pool.lend(ALIGN)
    assert second.obj is not first.obj  # first's view is held: not read into
    held = first.obj
    first.release()
    third = pool.lend(ALIGN)
    assert third.obj is held


def test_extents_first_fit_and_merge_back():
    pool = BufferPool(arena_bytes=4 * ALIGN)
    v1, t1 = pool.extent(ALIGN)
    v2, t2 = pool.extent(2 * ALIGN)
    own, none = pool.extent(4 * ALIGN)  # no room left: a buffer of its own
    assert none is None and len(own) == 4 * ALIGN and len(v1) == ALIGN and len(v2) == 2 * ALIGN
    pool.give_extent(t1)
    pool.give_extent(t2)
    assert pool.free_extents == [(0, 4 * ALIGN)]
