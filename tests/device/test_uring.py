"""The io_uring engine (walctl.device._aio.Ring; issue 31): walctl's default where the kernel sets a
ring up, AIO where it does not (seccomp, kernel.io_uring_disabled, a kernel before 5.11). Its close
returns with the ring gone (no grace period for the process's exit to wait out), after the writes
in flight; its rings are shared by threads that submit and reap at once. The calls it shares with
the AIO context run on every backend in test_aio_backends.py."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from walctl.device import aio as aio_mod
from walctl.device import open_device
from walctl.device.aio import AioWriteQueue
from walctl.device.writequeue import open_write_queue
from walctl.errors import UsageError

from test_aio_backends import built, dev, filled  # noqa: F401 - the device fixture, shared

MiB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ring_or_skip(depth: int, fd: int, resfd: int = -1):
    if built is None or not hasattr(built, "Ring"):
        pytest.skip("walctl.device._aio has no io_uring here")
    try:
        return built.Ring(depth, fd, resfd)
    except OSError as exc:  # pragma: no cover - a kernel or sandbox without io_uring
        pytest.skip(f"io_uring is unavailable here: {exc}")


class _NoRing:
    """A Ring the kernel refuses, as io_uring_setup does under seccomp or io_uring_disabled=2."""

    def __init__(self, depth, fd, resfd):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))


def test_auto_takes_a_ring_and_falls_back_to_aio_where_the_kernel_refuses_one(dev, monkeypatch):
    ring_or_skip(2, dev.fileno()).destroy()
    queue = open_write_queue(dev, 2, reaper=False)
    try:
        assert queue.engine == "io_uring" and isinstance(queue._io, built.Ring)
    finally:
        queue.close()
    monkeypatch.setattr(built, "Ring", _NoRing)
    queue = open_write_queue(dev, 2, reaper=False)
    try:
        assert queue.engine == "aio" and isinstance(queue._io, built.Context)
        buf = filled(9, 4096)
        errors = []
        queue.submit(4096, buf, lambda e, f=0: errors.append(e))
        for _ in range(30):
            if errors:
                break
            queue.wait(1.0)
        assert errors == [None]
    finally:
        queue.close()
    assert open(dev.path, "rb").read(8192)[4096:] == b"\x09" * 4096
    # Asked for by name, a refused ring is the operator's error, said so (exit 2), not silently AIO.
    with pytest.raises(UsageError) as info:
        open_write_queue(dev, 2, "io_uring", reaper=False)
    assert "io_uring is unavailable" in str(info.value) and info.value.exit_code == 2
    with pytest.raises(OSError) as raw:
        AioWriteQueue(dev, 2, reaper=False, kind="io_uring")
    assert "io_uring_setup" in str(raw.value)


def test_a_build_without_the_extension_never_takes_a_ring(dev, monkeypatch):
    monkeypatch.setenv("WALCTL_NO_NATIVE", "1")
    queue = open_write_queue(dev, 2, reaper=False)
    try:
        assert queue.engine == "aio" and queue.backend == "ctypes"
    finally:
        queue.close()
    # Asked for by name there: exit 2 saying why (not a ModuleNotFoundError, nor the extension loaded
    # against WALCTL_NO_NATIVE).
    with pytest.raises(UsageError) as info:
        open_write_queue(dev, 2, "io_uring", reaper=False)
    assert "io_uring is unavailable" in str(info.value) and "WALCTL_NO_NATIVE" in str(info.value)
    assert info.value.exit_code == 2


def test_close_of_a_ring_queue_destroys_the_ring_before_it_returns(dev):
    ring_or_skip(2, dev.fileno()).destroy()
    for reaper in (True, False):
        queue = AioWriteQueue(dev, 4, reaper=reaper, kind="io_uring")
        io = queue._io
        done = threading.Semaphore(0)
        results = []
        for i in range(3):
            queue.submit(i * 4096, filled(0x61 + i, 4096), lambda e, f=0: (results.append(e), done.release()))
            if not reaper:
                queue.wait(1.0)
        queue.close()
        assert results == [None] * 3
        # No daemon thread left to destroy it (AIO's destroy_later): the ring is gone already.
        with pytest.raises(RuntimeError, match="destroyed"):
            io.getevents(0, None)
        assert io.waiting() is False
        io.destroy()  # idempotent
        assert queue._waiting is None and queue._views == {}
    assert open(dev.path, "rb").read(3 * 4096) == b"a" * 4096 + b"b" * 4096 + b"c" * 4096


def test_destroy_waits_for_the_writes_still_in_flight(dev):
    ring = ring_or_skip(8, dev.fileno())
    bufs = [filled(0x30 + i, 64 * 1024) for i in range(8)]
    addrs = [aio_mod.buffer_address(memoryview(b)) for b in bufs]
    for i, addr in enumerate(addrs):
        ring.prepare(i, addr, 64 * 1024, i * 64 * 1024)
    assert ring.submit_slots(list(range(8)), 0) == 8
    ring.destroy()  # nothing reaped: it waits for the eight writes, then closes the ring
    data = open(dev.path, "rb").read(8 * 64 * 1024)
    assert data == b"".join(bytes(b) for b in bufs)


def test_destroy_while_other_threads_wait_or_submit_refuses_them_and_waits_for_them(dev):
    """destroy() unmaps the rings: a thread waiting in getevents meanwhile gets io_getevents's EINVAL
    (as from an AIO context destroyed under it), one submitting after it a RuntimeError, waiting() says
    False, and two destroys at once are one (no read of unmapped memory: a crash would end the run)."""
    for timeout in (None, 5.0):
        ring = ring_or_skip(4, dev.fileno())
        out = []

        def reap():
            try:
                out.append(ring.getevents(1, timeout))
            except OSError as exc:
                out.append(exc.errno)
            except RuntimeError:
                out.append("destroyed")  # destroy() came first

        waiter = threading.Thread(target=reap)
        waiter.start()
        time.sleep(0.1)  # most often inside its wait by now; either order must end well
        destroyers = [threading.Thread(target=ring.destroy) for _ in range(2)]
        for t in destroyers:
            t.start()
        for t in destroyers:
            t.join(10)
        waiter.join(10)
        assert not waiter.is_alive() and not any(t.is_alive() for t in destroyers)
        assert out in ([errno.EINVAL], ["destroyed"]), out
        with pytest.raises(RuntimeError, match="destroyed"):
            ring.submit(0, 0, 4096, 0)
        with pytest.raises(RuntimeError, match="destroyed"):
            ring.getevents(1, None)
        assert ring.waiting() is False


def test_a_ring_dropped_without_destroy_waits_for_its_writes(dev):
    """The last reference gone (a forgotten close, a failed test): the writes in flight still land
    before the ring's memory goes, as an AIO context's dealloc waits in io_destroy."""
    ring = ring_or_skip(8, dev.fileno())
    bufs = [filled(0x50 + i, 64 * 1024) for i in range(8)]
    for i, buf in enumerate(bufs):
        ring.prepare(i, aio_mod.buffer_address(memoryview(buf)), 64 * 1024, i * 64 * 1024)
    assert ring.submit_slots(list(range(8)), 0) == 8
    del ring
    assert open(dev.path, "rb").read(8 * 64 * 1024) == b"".join(bytes(b) for b in bufs)


def test_threads_submitting_and_reaping_at_once_lose_and_repeat_no_completion(dev):
    """The rings are single-producer, single-consumer in memory; the Ring's locks make them safe for
    walctl's threads (the appender and completion callbacks submit, the reaper and poll reap)."""
    depth, per_thread, threads = 8, 400, 4
    ring = ring_or_skip(depth, dev.fileno())
    bufs = [filled(0x41 + i, 4096) for i in range(depth)]
    addrs = [aio_mod.buffer_address(memoryview(b)) for b in bufs]
    free = list(range(depth))
    lock = threading.Condition()
    seen: list[tuple[int, int]] = []
    submitted = [0]
    stop = threading.Event()

    failures: list[str] = []
    deadline = time.monotonic() + 60  # a lost completion leaves a slot taken for ever: failed, not hung

    def take_slot() -> int | None:
        with lock:
            while not free and time.monotonic() < deadline:
                lock.wait(0.1)
            return free.pop() if free else None

    def producer(n: int) -> None:
        for _ in range(per_thread):
            slot = take_slot()
            if slot is None:
                failures.append(f"producer {n}: no slot came back")
                return
            got = ring.submit(slot, addrs[slot], 4096, slot * 4096)
            with lock:
                if got != 1:
                    failures.append(f"submit: {got}")
                submitted[0] += 1

    def reaper(wait: bool) -> None:
        while not stop.is_set():
            got = ring.getevents(1, 0.05) if wait else ring.getevents(0, None)
            if not wait:
                time.sleep(0.0002)  # a poller, not a spin holding the GIL
            if got:
                with lock:
                    seen.extend(got)
                    free.extend(slot for slot, _ in got)
                    lock.notify_all()

    workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    reapers = [threading.Thread(target=reaper, args=(w,)) for w in (True, True, False)]
    for t in reapers + workers:
        t.start()
    for t in workers:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    while time.monotonic() < deadline:
        with lock:
            if len(seen) >= submitted[0]:
                break
        time.sleep(0.01)
    stop.set()
    for t in reapers:
        t.join(10)
    # Checked before the destroy, which would wait for a completion lost in the rings.
    assert failures == [] and submitted[0] == per_thread * threads
    assert len(seen) == submitted[0] and all(res == 4096 for _, res in seen)
    assert sorted(free) == list(range(depth))  # every slot back once: no completion lost or repeated
    ring.destroy()
    data = open(dev.path, "rb").read(depth * 4096)
    assert data == b"".join(bytes(b) for b in bufs)


def _append_summary(path: str, engine: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "WALCTL_IO_ENGINE"}
    if engine is not None:
        env["WALCTL_IO_ENGINE"] = engine
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", path, "--stream", "1", "--json", "a", "b"],
                          capture_output=True, env=env, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_append_writes_through_a_ring_by_default_and_aio_when_asked(tmp_path):
    path = str(tmp_path / "wal.img")
    subprocess.run([sys.executable, "-m", "walctl", "init", path, "--capacity", "1MiB"], check=True,
                   capture_output=True, cwd=REPO, timeout=60)
    probe = open_device(path, writable=True)
    try:
        ring_or_skip(2, probe.fileno()).destroy()
    finally:
        probe.close()
    assert _append_summary(path, None)["io_engine"] == "io_uring"
    assert _append_summary(path, "aio")["io_engine"] == "aio"
    assert _append_summary(path, "io_uring")["io_engine"] == "io_uring"
    summary = _append_summary(path, "threads")
    assert summary["io_engine"] == "threads" and summary["next_base_offset"] == 8
