"""walctl.device.aio on each of its backends (issue 31): the C extension walctl.device._aio's AIO
context (``native``) and io_uring ring (``uring``), and the ctypes AIO fallback, give the same writes,
the same completions and the same errors; the closed loop of walctl bench's raw modes books every
write and stops when told. Each test runs on each backend (``native`` and ``uring`` skipped where the
extension is not built or the kernel sets up no ring); one test checks which backend a queue picks."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.aiohelpers import submit_when_free
from walctl.bench import raw
from walctl.device import aligned_buffer, open_device
from walctl.device import aio as aio_mod
from walctl.device.aio import AioWriteQueue, ClosedLoop, _CtypesContext, native_aio
from walctl.errors import IOFailure

MiB = 1 << 20

try:
    from walctl.device import _aio as built
except ImportError:  # pragma: no cover - a build without a compiler
    built = None


@pytest.fixture(params=["native", "uring", "ctypes"])
def backend(request) -> str:
    if request.param != "ctypes" and built is None:
        pytest.skip("walctl.device._aio is not built here")
    return request.param


ENGINE_OF = {"native": "aio", "ctypes": "aio", "uring": "io_uring"}


@pytest.fixture
def dev(tmp_path):
    path = tmp_path / "aio.img"
    path.write_bytes(bytes(4 * MiB))
    d = open_device(str(path), writable=True)
    yield d
    d.close()


def make_queue(dev, backend: str, depth: int = 4, reaper: bool = False) -> AioWriteQueue:
    try:
        queue = AioWriteQueue(dev, depth, reaper=reaper, native=(backend != "ctypes"), kind=ENGINE_OF[backend])
    except OSError as exc:  # pragma: no cover - a kernel without AIO (or, for uring, without io_uring)
        pytest.skip(f"{ENGINE_OF[backend]} is unavailable: {exc}")
    assert queue.backend == ("ctypes" if backend == "ctypes" else "native")
    assert queue.engine == ENGINE_OF[backend]
    return queue


def filled(byte: int, size: int = 8192):
    buf = aligned_buffer(size)
    buf[:] = bytes([byte]) * size
    return buf


def test_a_queue_runs_the_extension_when_built_and_ctypes_when_switched_off(dev, monkeypatch):
    monkeypatch.delenv("WALCTL_NO_NATIVE", raising=False)
    queue = AioWriteQueue(dev, 2, reaper=False)
    try:
        assert queue.backend == ("native" if built is not None else "ctypes")
        assert isinstance(queue._io, _CtypesContext) == (built is None)
    finally:
        queue.close()
    monkeypatch.setenv("WALCTL_NO_NATIVE", "1")
    assert native_aio() is None
    queue = AioWriteQueue(dev, 2, reaper=False)
    try:
        assert queue.backend == "ctypes" and isinstance(queue._io, _CtypesContext)
    finally:
        queue.close()
    monkeypatch.setenv("WALCTL_NO_NATIVE", "0")
    assert native_aio() is built


@pytest.mark.parametrize("reaper", [False, True])
def test_writes_land_where_asked_and_every_callback_runs_once(dev, backend, reaper):
    queue = make_queue(dev, backend, reaper=reaper)
    done = threading.Semaphore(0)
    results = []
    bufs = [filled(i + 1) for i in range(12)]

    def callback(error, flush_ns=0):
        results.append((error, flush_ns))
        done.release()

    for i, buf in enumerate(bufs):
        submit_when_free(queue, i * 8192, buf, callback, done, reaper=reaper, length=4096 if i % 2 else None)
    queue.close()
    assert results == [(None, 0)] * 12
    data = open(dev.path, "rb").read(12 * 8192)
    for i in range(12):
        want = bytes([i + 1]) * (4096 if i % 2 else 8192)
        assert data[i * 8192:i * 8192 + len(want)] == want
        if i % 2:
            assert data[i * 8192 + 4096:(i + 1) * 8192] == bytes(4096)  # length= wrote no more


def test_writes_callbacks_start_are_submitted_after_their_batch_of_completions(dev, backend):
    queue = make_queue(dev, backend, depth=4)
    calls = []
    queue._io = _Spy(queue._io, calls)
    bufs = [filled(i + 1, 4096) for i in range(8)]
    finished = []

    def chain(i):
        def done(error, flush_ns=0):
            finished.append((i, error))
            if i < 4:
                queue.submit((i + 4) * 4096, bufs[i + 4], chain(i + 4))
        return done

    for i in range(4):
        queue.submit(i * 4096, bufs[i], chain(i))
    while len(finished) < 8:
        queue.wait(1.0)
    queue.close()
    assert sorted(finished) == [(i, None) for i in range(8)]
    assert sum(calls) == 4  # every successor went through the batch's io_submit, none lost
    assert open(dev.path, "rb").read(8 * 4096) == b"".join(bytes(b) for b in bufs)


class _Spy:
    """A Context whose submit_slots records how many iocbs each call carried."""

    def __init__(self, io, calls):
        self._io, self._calls = io, calls

    def submit_slots(self, slots, start):
        self._calls.append(len(slots) - start)
        return self._io.submit_slots(slots, start)

    def __getattr__(self, name):
        return getattr(self._io, name)


def test_a_write_the_kernel_fails_reaches_its_callback_as_an_io_failure(dev, backend):
    queue = make_queue(dev, backend, depth=2)
    buf = filled(7, 4096)
    errors = []
    queue.submit(0, buf, lambda e, f=0: errors.append(e))
    while not errors:
        queue.wait(1.0)
    # The same buffer, its remembered address shifted off the O_DIRECT alignment: the kernel refuses
    # the write (EINVAL, at io_submit or as the completion's result, as the filesystem decides).
    entry = queue._views[id(buf)]
    queue._views[id(buf)] = (entry[0], entry[1], entry[2] + 1)
    queue.submit(4096, buf, lambda e, f=0: errors.append(e))
    while len(errors) < 2:
        queue.wait(1.0)
    queue._views[id(buf)] = entry
    queue.close()
    assert errors[0] is None
    assert isinstance(errors[1], IOFailure) and "write failed" in str(errors[1])
    assert errors[1].__cause__ is None or isinstance(errors[1].__cause__, OSError)


def test_poll_runs_the_posted_completions_and_never_blocks(dev, backend):
    """poll(): the completion ring looked at without a system call (AIO's mapped ring, io_uring's
    in C), its completions' callbacks run in the calling thread; 0 at once when none is posted."""
    queue = make_queue(dev, backend, depth=2)
    try:
        assert queue.poll() == 0  # nothing in flight
        done = []
        queue.submit(0, filled(5, 4096), lambda e, f=0: done.append(e))
        deadline = time.monotonic() + 10
        handled = 0
        while not handled and time.monotonic() < deadline:
            handled = queue.poll()
            time.sleep(0.0005)
        assert handled == 1 and done == [None] and queue._outstanding == 0
        assert queue.poll() == 0
    finally:
        queue.close()
    assert queue.poll() == 0  # closed: the ring is no longer looked at


@pytest.mark.parametrize("name", ["native", "uring", "ctypes"])
def test_every_context_reports_the_same_completions_and_errors(dev, name):
    if name != "ctypes" and built is None:
        pytest.skip("walctl.device._aio is not built here")
    make = {"native": getattr(built, "Context", None), "uring": getattr(built, "Ring", None),
            "ctypes": _CtypesContext}[name]
    try:
        ctx = make(2, dev.fileno(), -1)
    except (OSError, TypeError) as exc:  # pragma: no cover - no io_uring here
        pytest.skip(f"{name} is unavailable: {exc}")
    try:
        assert (ctx.ctx != 0) == (name != "uring") and ctx.getevents(0, None) == []
        buf = filled(3, 8192)
        addr = aio_mod.buffer_address(memoryview(buf))
        assert ctx.submit(1, addr, 8192, 4096) == 1
        assert ctx.iocb(1) == (addr, 8192, 4096)
        assert ctx.getevents(1, 5.0) == [(1, 8192)]
        ctx.prepare(0, addr, 4096, 0)
        ctx.prepare(1, addr + 4096, 4096, 3 * 4096 + 8192)
        assert ctx.submit_slots([0, 1], 0) == 2
        got = []
        while len(got) < 2:
            got += ctx.getevents(1, 5.0)
        assert sorted(got) == [(0, 4096), (1, 4096)]
        assert ctx.getevents(1, 0.01) == []  # nothing in flight: the timeout ends the wait
        bad = ctx.submit(0, addr + 1, 4096, 0)  # misaligned for O_DIRECT
        if bad == 1:
            (event,) = ctx.getevents(1, 5.0)
            bad = event[1]
        assert bad == -22  # -EINVAL, by value or by completion
    finally:
        ctx.destroy()
        ctx.destroy()  # idempotent
    data = open(dev.path, "rb").read(6 * 4096)
    assert data[:4096] == b"\3" * 4096 and data[4096:12288] == b"\3" * 8192 and data[5 * 4096:] == b"\3" * 4096


def test_the_closed_loop_books_every_write_and_stops_when_told(dev, backend):
    queue = make_queue(dev, backend, depth=4)
    bufs = [filled(0x40 + i, 4096) for i in range(4)]
    seen = [[] for _ in bufs]

    def offsets(i):
        def nxt():
            offset = (len(seen[i]) * 4 + i) * 4096 % (4 * MiB)
            seen[i].append(offset)
            return offset
        return nxt

    samples, counts = [[] for _ in bufs], [0] * 4
    loop = ClosedLoop(queue, bufs, [offsets(i) for i in range(4)], samples, counts)
    loop.start()
    assert loop.in_flight == 4
    stop = time.perf_counter_ns() + 100_000_000
    while loop.in_flight:
        loop.run(stop, time.perf_counter_ns() + 50_000_000)
    assert loop.error is None and queue._outstanding == 0 and sorted(queue._free) == [0, 1, 2, 3]
    # Every write submitted completed, once, with a latency; each landed at its offset.
    assert counts == [len(s) for s in seen] == [len(s) for s in samples] and min(counts) > 1
    assert all(v > 0 for s in samples for v in s)
    data = open(dev.path, "rb").read()
    for i, offs in enumerate(seen):
        for off in offs:
            assert data[off:off + 4096] == bytes([0x40 + i]) * 4096
    queue.close()


def test_a_failed_write_stops_the_closed_loop(dev, backend):
    queue = make_queue(dev, backend, depth=2)
    calls = [0]

    def bad_offset():
        calls[0] += 1
        return 0 if calls[0] == 1 else 100  # the second write: misaligned, refused by the kernel

    loop = ClosedLoop(queue, [filled(1, 4096), filled(2, 4096)], [bad_offset, lambda: 8192], [[], []], [0, 0])
    loop.start()
    deadline = time.perf_counter_ns() + 10_000_000_000
    while loop.in_flight and time.perf_counter_ns() < deadline:
        loop.run(deadline, time.perf_counter_ns() + 100_000_000)
    assert loop.in_flight == 0 and queue._outstanding == 0
    assert isinstance(loop.error, IOFailure) and "write failed" in str(loop.error)
    queue.close()


def test_raw_iops_through_the_closed_loop_on_either_backend(dev, backend):
    queue = make_queue(dev, backend, depth=4)
    try:
        t0 = os.times()
        result = raw.run_raw(queue, "iops", block_size=4096, region_start=0, region_bytes=4 * MiB, iodepth=4,
                             duration_s=0.5)
        t1 = os.times()
    finally:
        queue.close()
    # More writes than the queue's depth: each slot's write was reaped and the slot given another.
    # (Not a rate: under three test workers one batch has taken 242 ms; 0.5 s leaves room for two.)
    assert result.engine == ENGINE_OF[backend] and result.writes > 4 and result.latency.count == result.writes
    assert 0.45 < result.seconds < 5 and queue._outstanding == 0
    # The run's own CPU time per write (what bench/fio_compare.py sets beside fio's), os.times' ticks apart.
    cpu_us = ((t1.user - t0.user) + (t1.system - t0.system)) / result.writes * 1e6
    assert 0 <= result.to_json()["cpu_us_per_write"] <= cpu_us + 0.02 / result.writes * 1e6
