"""Raw device modes: random writes (iops) and sequential writes (bandwidth) at a queue depth.

Writes go through the same WriteQueue as the WAL writer (walctl.device.blockio:
io_uring or native AIO on the O_DIRECT | O_DSYNC fd, or threads), so each one is as durable
as a WAL block when it completes. Each I/O slot resubmits from its own completion,
keeping ``iodepth`` writes in flight until the duration is over, like fio. With the
io_uring and aio engines this thread reaps and resubmits itself through walctl.device.aio.ClosedLoop
(fio's loop: a few lines of Python per write, one io_submit per batch of completions);
with threads, each slot's completion callback submits its next write.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from typing import Callable

from walctl.bench.stats import LatencyRecorder, LatencySummary, ModeResult
from walctl.device.aio import ClosedLoop
from walctl.device.buffers import aligned_buffer
from walctl.device.signals import signals_deferred

# Called about twice a second from the calling thread: (writes, bytes, elapsed_s).
Progress = Callable[[int, int, float], None]
PROGRESS_INTERVAL_S = 0.5
HOLD_S = 0.1  # the longest a SIGINT/SIGTERM waits while the aio engine's reaping holds it


class _Run:
    """Shared state of one raw run; each slot's callback touches only its own counters."""

    def __init__(self, queue, *, block_size: int, region_start: int, region_bytes: int, sequential: bool,
                 iodepth: int, seed: int):
        self.queue = queue
        self.block_size = block_size
        self.region_start = region_start
        self.blocks = region_bytes // block_size
        self.sequential = sequential
        self.deadline_ns = 0  # set when the run starts
        self.stop = False
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = iodepth
        self.next_block = itertools.count()  # next() is atomic in CPython: slots share it safely
        self.rngs = [random.Random(seed + slot) for slot in range(iodepth)]
        self.recorders = [LatencyRecorder() for _ in range(iodepth)]
        self.started_ns = [0] * iodepth
        self.counts = [0] * iodepth
        # Incompressible contents, like fio's default buffers.
        self.buffers = []
        for _ in range(iodepth):
            buf = aligned_buffer(block_size)
            buf[:] = os.urandom(block_size)
            self.buffers.append(buf)
        self.callbacks = [self._callback(slot) for slot in range(iodepth)]
        self.last_done_ns = 0

    def offset(self, slot: int) -> int:
        if self.sequential:
            index = next(self.next_block) % self.blocks
        else:
            # Uniform over the region's blocks; random() is several times cheaper than randrange().
            index = int(self.rngs[slot].random() * self.blocks)
        return self.region_start + index * self.block_size

    def offset_function(self, slot: int) -> Callable[[], int]:
        """Slot ``slot``'s next write offset as one call (made once per write): ``offset`` with the
        random case's names bound once."""
        if self.sequential:
            return lambda: self.offset(slot)
        rand, blocks, block_size, region_start = self.rngs[slot].random, self.blocks, self.block_size, self.region_start
        return lambda: region_start + int(rand() * blocks) * block_size

    def start(self, slot: int) -> None:
        self.started_ns[slot] = time.perf_counter_ns()
        self.queue.submit(self.offset(slot), self.buffers[slot], self.callbacks[slot])

    def _callback(self, slot: int):
        """Slot ``slot``'s completion: book it and submit the slot's next write. Per write in Python,
        so the names it uses are bound here once, and the next write's start time is the completion's
        own clock reading (one clock call per write, not two)."""
        samples = self.recorders[slot].samples
        counts = self.counts
        clock = time.perf_counter_ns
        started = self.started_ns
        submit = self.queue.submit
        buf = self.buffers[slot]
        next_offset = self.offset_function(slot)

        def done(error: BaseException | None, flush_ns: int = 0) -> None:
            now = clock()
            if error is None:
                samples.append(now - started[slot])
                counts[slot] += 1
                if not self.stop and now < self.deadline_ns:
                    try:
                        started[slot] = now
                        submit(next_offset(), buf, done)
                        return
                    except BaseException as exc:  # a submit refused: stop like an I/O error
                        if self.error is None:
                            self.error = exc
            elif self.error is None:
                self.error = error
            self._retire(now)

        return done

    def _retire(self, now: int) -> None:
        with self.lock:
            self.in_flight -= 1
            self.last_done_ns = max(self.last_done_ns, now)
            if self.in_flight == 0:
                self.finished.set()


def _run_closed_loop(run: _Run, queue, started: int, progress: Progress | None) -> None:
    """The aio engine: this thread reaps and resubmits (ClosedLoop), as fio does; SIGINT/SIGTERM held
    once per HOLD_S of reaps, not twice per reap (a signal waits at most that long)."""
    loop = ClosedLoop(queue, run.buffers, [run.offset_function(slot) for slot in range(len(run.buffers))],
                      [r.samples for r in run.recorders], run.counts)
    clock = time.perf_counter_ns
    next_progress = clock() + int(PROGRESS_INTERVAL_S * 1e9)
    try:
        # Held too: a signal's exception inside AioWriteQueue.submit, after it took a slot and before its
        # io_submit, would leave a write counted that never completes, and the drain below and the
        # queue's close would wait for it forever (a SIGTERMed bench that hung).
        with signals_deferred():
            loop.start()
        while loop.in_flight:
            with signals_deferred():
                loop.run(run.deadline_ns, clock() + int(HOLD_S * 1e9))
            if progress is not None and clock() >= next_progress:
                next_progress = clock() + int(PROGRESS_INTERVAL_S * 1e9)
                writes = sum(run.counts)
                progress(writes, writes * run.block_size, (clock() - started) / 1e9)
    except BaseException:
        # Ctrl-C or a failed first submit: let what is in flight finish, submitting nothing more.
        while loop.in_flight:
            with signals_deferred():
                loop.run(0, clock() + int(PROGRESS_INTERVAL_S * 1e9))
        raise
    finally:
        run.last_done_ns = loop.last_done_ns
    run.error = loop.error


def run_raw(queue, mode: str, *, block_size: int, region_start: int, region_bytes: int, iodepth: int,
            duration_s: float, progress: Progress | None = None, seed: int = 1) -> ModeResult:
    """Keep ``iodepth`` writes of ``block_size`` in flight for ``duration_s``; random for "iops".

    Raises:
        IOFailure: a write failed (after every write in flight has finished).
    """
    run = _Run(queue, block_size=block_size, region_start=region_start, region_bytes=region_bytes,
               sequential=(mode == "bandwidth"), iodepth=iodepth, seed=seed)
    cpu_before = os.times()
    started = time.perf_counter_ns()
    run.deadline_ns = started + int(duration_s * 1e9)
    if queue.engine in ("io_uring", "aio") and getattr(queue, "_reaper", None) is None:
        _run_closed_loop(run, queue, started, progress)
    else:
        _run_callbacks(run, queue, started, iodepth, progress)
    if run.error is not None:
        raise run.error
    cpu_after = os.times()
    writes = sum(run.counts)
    seconds = (max(run.last_done_ns, started + 1) - started) / 1e9
    latency = LatencySummary.from_ns(itertools.chain.from_iterable(r.samples for r in run.recorders))
    # The process's CPU time (user + system, every thread) per write during the run: on a shared
    # machine a steadier figure than IOPS (bench/fio_compare.py sets it beside fio's).
    cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    extra = {"cpu_us_per_write": round(cpu_s / writes * 1e6, 2) if writes else 0.0}
    return ModeResult(mode, queue.engine, block_size, iodepth, seconds, writes, writes * block_size, latency, extra)


def _run_callbacks(run: _Run, queue, started: int, iodepth: int, progress: Progress | None) -> None:
    """Each slot's completion callback submits its next write (the threads engine, or aio with a reaper)."""
    submitted = 0
    try:
        with signals_deferred():  # (as _run_closed_loop's start: never a submit torn in half, nor its count)
            for slot in range(iodepth):
                run.start(slot)
                submitted += 1
        next_progress = time.monotonic() + PROGRESS_INTERVAL_S
        while not run.finished.is_set():
            run.finished.wait(PROGRESS_INTERVAL_S)
            if progress is not None and time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_INTERVAL_S
                writes = sum(run.counts)
                progress(writes, writes * run.block_size, (time.perf_counter_ns() - started) / 1e9)
    except BaseException:
        run.stop = True  # Ctrl-C or a failed first submit: let what is in flight finish
        with run.lock:
            run.in_flight -= iodepth - submitted
            if run.in_flight == 0:
                run.finished.set()
        run.finished.wait()
        raise
