"""Test tools for the WAL writer's submission window (walctl/wal/writer_window.py), issue 32: a fake clock
shared by the writer and its pacer, a write queue whose writes complete when the test says, and
conditions that never block (a wait runs the test's next step instead). With them a test drives the
writer on one thread, in order, and every latency figure is what the test advanced the clock by.
"""

from __future__ import annotations

from collections import deque

from walctl.wal.pacing import Pacer

from test_mut_writer import make_writer


class FakeClock:
    """Nanoseconds that move only when the test says (the writer's ``_clock`` and its pacer's)."""

    def __init__(self, now: int = 10 ** 12):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> int:
        self.now += ns
        return self.now


class Write:
    """One submitted write: the queue keeps it until the test completes it."""

    def __init__(self, offset: int, buf, done, length):
        self.offset, self.buf, self.done, self.length = offset, buf, done, length


class HeldWrites:
    """A write queue (walctl.device.writequeue's interface) whose writes complete on ``complete``: the
    test chooses the order, the error and the flush time. A completed write without error reaches
    ``dev`` first, as a real queue's would. ``refuse``: the next submit raises it (io_submit's EAGAIN)."""

    engine = "held"

    def __init__(self, dev):
        self.dev = dev
        self.pending: list[Write] = []
        self.submitted: list[int] = []  # device offsets, in submission order
        self.flushes = 0  # flush_submits calls
        self.refuse: BaseException | None = None

    def submit(self, offset: int, buf, done, length: int | None = None) -> None:
        if self.refuse is not None:
            exc, self.refuse = self.refuse, None
            raise exc
        self.pending.append(Write(offset, buf, done, length))
        self.submitted.append(offset)

    def flush_submits(self) -> None:
        self.flushes += 1

    def complete(self, index: int = 0, error: BaseException | None = None, **flush) -> Write:
        """Complete the ``index``-th pending write; ``flush_ns=`` is passed on only when given."""
        w = self.pending.pop(index)
        if error is None:
            with memoryview(w.buf) as mv:
                self.dev.pwrite(w.offset, mv[:w.length])
        w.done(error, *flush.values())
        return w

    def poll(self) -> int:
        return 0

    def wait(self, timeout_s=None, *, held: bool = False) -> int:
        return 0

    def close(self) -> None:
        pass


class WouldBlock(AssertionError):
    """The writer waited where the test had no step left: on real threads it would block."""


class ScriptedCondition:
    """Stands for a threading.Condition over ``lock`` on one thread: ``wait`` records its timeout and
    runs the next of ``steps`` (or ``on_idle``) instead of blocking; with neither it raises WouldBlock."""

    # threading.Condition's waiter list, which the writer looks at before notify_all: never empty here,
    # so every notification it would send is counted
    _waiters = (None,)

    def __init__(self, lock):
        self._lock = lock
        self.waits: list = []
        self.steps: deque = deque()
        self.on_idle = None
        self.notified = 0

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self._lock.release()

    def wait(self, timeout=None) -> bool:
        self.waits.append(timeout)
        if self.steps:
            self.steps.popleft()()
        elif self.on_idle is not None:
            self.on_idle()
        else:
            raise WouldBlock(f"wait({timeout}) with nothing to wake it")
        return True

    def notify(self, n: int = 1) -> None:
        self.notified += 1

    def notify_all(self) -> None:
        self.notified += 1


class TimerStop(BaseException):
    """Ends one run of the timer loop when it goes idle (see ``timer_step``)."""


class IdleTimerThread:
    """Put where the writer keeps its timer thread, so none is started: the test runs the loop itself."""

    def __init__(self):
        self.joined = 0

    def join(self, timeout=None) -> None:
        self.joined += 1


def held_writer(path, clock: FakeClock, *, budget=None, **kwargs):
    """A writer on ``path`` (test_mut_writer's make_writer) with ``clock``, a HeldWrites queue, scripted
    conditions and no timer thread; with ``budget`` its pacer reads ``clock`` too. Returns (writer, queue)."""
    kwargs.setdefault("batch_interval_s", 0)
    w = make_writer(path, **kwargs)
    w._queue.close()
    queue = HeldWrites(w.dev)
    w._queue = queue
    w._clock = clock
    if budget is not None:
        w.budget = budget
        w._pacer = Pacer(budget, clock)
    w._lock = ScriptedCondition(w._mutex)
    w._timer_cond = ScriptedCondition(w._mutex)
    w._timer_thread = IdleTimerThread()
    return w, queue


def timer_step(w, *steps) -> list:
    """Run the writer's timer loop on this thread until it goes idle (a wait with no step left) or
    ends; ``steps`` run at its first waits. Returns the timeouts of the waits of this run."""
    cond = w._timer_cond
    first = len(cond.waits)
    cond.steps.extend(steps)
    cond.on_idle = _stop
    try:
        w._timer_loop()
    except TimerStop:
        pass
    finally:
        cond.on_idle = None
        cond.steps.clear()
    return cond.waits[first:]


def _stop() -> None:
    raise TimerStop


def complete_all(queue: HeldWrites) -> None:
    """An on_idle for the writer's waits (drain, close): complete the oldest write."""
    if not queue.pending:
        raise WouldBlock("the writer waits with no write in flight")
    queue.complete(0)
