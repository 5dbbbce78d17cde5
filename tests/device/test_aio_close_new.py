"""AioWriteQueue.close without the kernel's grace period (issue 31): io_destroy of an idle AIO context
waits ~30 ms, paid by every run and every in-process test. A queue whose writes were all reaped
leaves the destroy to a daemon thread (walctl.device.aio.destroy_later); one whose io_getevents
failed (writes may be in flight) still destroys the context before close() returns. Each test runs
on both AIO backends (the C extension and ctypes); an io_uring ring's close is
tests/device/test_uring.py's."""

from __future__ import annotations

import errno
import threading
import time

import pytest

from walctl.device import aligned_buffer
from walctl.device import aio as aio_mod
from walctl.device.aio import AioWriteQueue, ClosedLoop
from walctl.device.signals import signals_deferred
from walctl.errors import IOFailure

from test_aio_backends import built, dev  # noqa: F401 - the device fixture, shared


@pytest.fixture(params=["native", "ctypes"])
def backend(request) -> str:
    """The AIO backends (an AIO context's grace period is this file's subject)."""
    if request.param == "native" and built is None:
        pytest.skip("walctl.device._aio is not built here")
    return request.param


class HeldDestroy:
    """The queue's AIO context, its destroy held until ``release`` is set (a grace period we control);
    ``fail_getevents`` makes the next io_getevents fail as the kernel's would."""

    def __init__(self, io):
        self.inner = io
        self.release = threading.Event()
        self.destroyed = threading.Event()
        self.fail_getevents = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def getevents(self, min_nr, timeout_s):
        if self.fail_getevents:
            self.fail_getevents = False
            raise OSError(errno.EIO, "io_getevents: Input/output error")
        return self.inner.getevents(min_nr, timeout_s)

    def destroy(self):
        self.release.wait(5.0)  # bounded: a close that waits for it fails the test, it does not hang
        self.inner.destroy()
        self.destroyed.set()


def make_queue(dev, backend: str, reaper: bool) -> tuple[AioWriteQueue, HeldDestroy]:
    try:
        queue = AioWriteQueue(dev, 4, reaper=reaper, native=(backend == "native"), kind="aio")
    except OSError as exc:  # pragma: no cover - a kernel without AIO
        pytest.skip(f"native AIO is unavailable: {exc}")
    held = queue._io = HeldDestroy(queue._io)
    return queue, held


@pytest.mark.parametrize("reaper", [True, False], ids=["reaper", "caller-reaps"])
def test_close_of_a_quiet_queue_returns_before_the_context_s_destroy_ends(dev, backend, reaper):
    queue, held = make_queue(dev, backend, reaper)
    results = []
    all_done = threading.Event()

    def done(error, flush_ns):
        results.append(error)
        if len(results) == 3:
            all_done.set()

    bufs = [aligned_buffer(4096) for _ in range(3)]
    for i, buf in enumerate(bufs):
        buf[:] = bytes([0x61 + i]) * 4096
        queue.submit(i * 4096, buf, done)
    queue.close()  # without a reaper, close() reaps them itself
    # Every write completed and its callback ran before close() returned ...
    assert all_done.is_set() and results == [None, None, None]
    # ... but the context's destroy had not finished (it waits for `release`): close() did not wait.
    assert not held.destroyed.is_set()
    assert queue._ring is None and queue._views == {}
    held.release.set()
    assert aio_mod.settle_destroys(5.0)
    assert held.destroyed.is_set() and held.inner.ctx == 0
    with open(dev.path, "rb") as f:
        assert f.read(3 * 4096) == b"a" * 4096 + b"b" * 4096 + b"c" * 4096


def _close_destroys_before_returning(queue, held) -> None:
    """close() after a failed io_getevents: io_destroy (held 0.2 s, as the kernel waits for the writes
    in flight) has ended before close() returns."""
    release = threading.Timer(0.2, held.release.set)
    release.start()
    try:
        queue.close()
        assert held.destroyed.is_set() and held.inner.ctx == 0
    finally:
        release.cancel()
        held.release.set()

def test_after_a_failed_io_getevents_close_destroys_the_context_before_it_returns(dev, backend):
    queue, held = make_queue(dev, backend, reaper=False)
    errors = []
    buf = aligned_buffer(4096)
    buf[:] = b"z" * 4096
    queue.submit(0, buf, lambda error, flush_ns: errors.append(error))
    held.fail_getevents = True
    queue.wait(1.0)  # the failure finishes the write with an IOFailure; the kernel may still be writing it
    assert len(errors) == 1 and isinstance(errors[0], IOFailure)
    _close_destroys_before_returning(queue, held)


def test_a_closed_loop_s_failed_io_getevents_also_makes_close_destroy_first(dev, backend):
    # walctl bench's raw modes reap in ClosedLoop.run, not in the queue: its failure path must count too.
    queue, held = make_queue(dev, backend, reaper=False)
    bufs = [aligned_buffer(4096) for _ in range(2)]
    samples, counts = [[], []], [0, 0]
    loop = ClosedLoop(queue, bufs, [lambda: 0, lambda: 4096], samples, counts)
    with signals_deferred():
        loop.start()
        held.fail_getevents = True
        loop.run(time.perf_counter_ns() + 10**9, time.perf_counter_ns() + 5 * 10**9)
    assert isinstance(loop.error, IOFailure) and queue._outstanding == 0
    _close_destroys_before_returning(queue, held)


def test_many_quick_closes_leave_no_context_behind(dev, backend):
    contexts = []
    buf = aligned_buffer(4096)
    for i in range(40):
        queue = AioWriteQueue(dev, 2, reaper=bool(i % 2), native=(backend == "native"))
        contexts.append(queue._io)
        wrote = threading.Event()
        queue.submit((i % 8) * 4096, buf, lambda error, flush_ns: wrote.set())
        queue.close()
        assert wrote.is_set()
    # Destroyed side by side (one thread each), not one grace period after another: all are done soon.
    assert aio_mod.settle_destroys(10.0)
    assert [io.ctx for io in contexts] == [0] * len(contexts)
    assert not [t for t in threading.enumerate() if t.name == "walctl-aio-destroy"]
