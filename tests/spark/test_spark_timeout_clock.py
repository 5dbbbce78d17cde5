"""compact --task-timeout's clock (walctl.spark.job.TimeoutClock) without a JVM: a stand-in
SparkContext whose executors register, and whose job ends, at set times of a fake clock that
moves one second each time the driver reads it. The clock starts with the job and again, once,
when its first executor registers: a cluster's slow start does not eat the tasks' time, and a
job no executor takes still fails at the timeout."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from walctl.spark import job

TIMEOUT_S = 10.0


class FakeClock:
    """monotonic(): one second later at every reading (the driver's loop reads it a few times a
    round). ``at(t, wait)``: an event set once the clock has passed t; the reading that passes it
    returns only after ``wait()`` (the job's thread has ended: no race with the driver's loop)."""

    def __init__(self):
        self.now = 0.0
        self._events: list[tuple[float, threading.Event, object]] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            self.now += 1.0
            now = self.now
            passed = [(event, wait) for t, event, wait in self._events if now >= t and not event.is_set()]
            for event, _ in passed:
                event.set()
        for _, wait in passed:
            wait()
        return now

    def at(self, t: float, wait) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events.append((t, event, wait))
        return event


class FakeContext:
    """What _collect asks of a SparkContext: ``executors_at`` (fake seconds; None: never) is when
    an executor registers with the driver, ``ends_at`` (None: never) when the job's one task ends."""

    def __init__(self, clock: FakeClock, master: str, executors_at: float | None, ends_at: float | None):
        self.clock, self.master, self.executors_at = clock, master, executors_at
        self.thread: threading.Thread | None = None  # the driver's thread that waits for the job
        self.started = threading.Event()  # (set once that thread is known)
        self.ended = clock.at(ends_at, self._job_thread_ended) if ends_at is not None else threading.Event()
        self.cancelled = threading.Event()
        tracker = SimpleNamespace(getExecutorInfos=self._executor_infos)
        self._jsc = SimpleNamespace(sc=lambda: SimpleNamespace(statusTracker=lambda: tracker))

    def _job_thread_ended(self) -> None:
        assert self.started.wait(60), "the job never started"
        self.thread.join(60)
        assert not self.thread.is_alive(), "the fake job did not end"

    def _executor_infos(self) -> list[str]:
        local = self.master.startswith("local")
        registered = self.executors_at is not None and self.clock.now >= self.executors_at
        return ["driver"] + (["executor 0"] if registered and not local else [])

    def statusTracker(self):
        return SimpleNamespace(getJobIdsForGroup=lambda group: [])

    def setJobGroup(self, group, description, interruptOnCancel=False):
        pass

    def cancelJobGroup(self, group):
        self.cancelled.set()

    def parallelize(self, batches, slices):
        context = self

        class RDD:
            def map(self, f):
                return self

            def collect(self):
                context.thread = threading.current_thread()
                context.started.set()
                while not (context.ended.wait(0.01) or context.cancelled.is_set()):
                    pass
                if context.cancelled.is_set():
                    raise RuntimeError("cancelled")
                return [[] for _ in batches]

        return RDD()


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(job, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def collect(clock: FakeClock, master: str = "spark://127.0.0.1:7077", *, executors_at: float | None,
            ends_at: float | None) -> list[dict]:
    return job._collect(FakeContext(clock, master, executors_at, ends_at), [[]], TIMEOUT_S)


def test_a_slow_executor_start_does_not_eat_the_timeout(clock):
    """The executor registers 8 s into the job, which ends 7 s later: 15 s from the job's start
    (past the 10 s timeout), 7 s from the registration (within it). Main cancelled it at 10 s."""
    assert collect(clock, executors_at=8, ends_at=15) == []
    assert clock.now >= 15


def test_the_clock_starts_again_only_once_at_the_first_executor(clock):
    """A task that never ends after its executor registered at 8 s: cancelled 10 s after the
    registration (not 10 s after the job's start, nor ever later)."""
    with pytest.raises(job.JobTimeout, match="did not finish within 10s"):
        collect(clock, executors_at=8, ends_at=None)
    assert 18 <= clock.now <= 22, clock.now


def test_a_job_no_executor_takes_fails_at_the_timeout_from_its_start(clock):
    with pytest.raises(job.JobTimeout, match="no executor ran it"):
        collect(clock, executors_at=None, ends_at=None)
    assert 10 <= clock.now <= 13, clock.now


def test_a_local_master_is_timed_from_the_job_s_start(clock):
    """The driver is the executor: it is there from the start, so the clock never starts again."""
    with pytest.raises(job.JobTimeout, match="did not finish within 10s"):
        collect(clock, "local[1]", executors_at=None, ends_at=15)
    assert clock.now < 15, clock.now
