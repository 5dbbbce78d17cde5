"""One pacer for every budget walctl keeps: the WAL writer's IOPS and bandwidth, compaction's bytes/s.

Budget (the AutoMQ design: a WAL on a gp3-like disk may use its free 3000 IOPS and
125 MiB/s and no more): every block write takes one token from the IOPS bucket and
its size in bytes from the bandwidth bucket. A bucket refills at its rate and holds
at most ``BURST_S`` seconds of it, so a writer that was idle may send a short burst
but never more than ``rate * t + burst`` over any interval of ``t`` seconds.

A write may start while the bucket holds at least ``min(cost, burst)``; it then
takes its whole cost, leaving the bucket in debt when the cost is larger than the
burst (a 256 KiB block under a small bandwidth budget). The debt is paid before the
next write starts, so the long-run rate is exact whatever the block sizes.

Two ways to use a Pacer: the WAL writer asks ``delay_ns`` and schedules the write itself,
then ``take``s (it never sleeps: its event loop does); compaction's readers and writers call
``paid(n)`` after moving n bytes, from any thread, and sleep until the budget has caught up
(``Pacer.bytes_per_s``: a bandwidth budget whose bucket starts empty, so the bytes moved never
exceed ``rate * t``, t counted from the pacer's start).

Pacing adds nothing when the budget is not reached: a full bucket answers "now".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from walctl.errors import UsageError

MIB = 1 << 20
BURST_S = 0.05  # a bucket holds this many seconds of its rate (at least one write)


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` held; a take may leave it in debt (see the module doc)."""

    __slots__ = ("rate", "burst", "tokens", "stamp", "clock")

    def __init__(self, rate: float, burst: float, clock: Callable[[], int] = time.perf_counter_ns, *,
                 full: bool = True):
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be positive, got {rate} and {burst}")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = burst if full else 0.0  # full: the first writes never wait
        self.stamp = clock()

    def _refill(self, now: int) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate / 1e9)
            self.stamp = now

    def delay_ns(self, cost: float, now: int | None = None) -> int:
        """Nanoseconds until a write costing ``cost`` may start (0: now)."""
        now = self.clock() if now is None else now
        self._refill(now)
        need = min(cost, self.burst)
        if self.tokens >= need:
            return 0
        return max(1, int((need - self.tokens) * 1e9 / self.rate) + 1)

    def take(self, cost: float, now: int | None = None) -> None:
        """Spend ``cost`` tokens (the caller saw ``delay_ns`` answer 0)."""
        now = self.clock() if now is None else now
        self._refill(now)
        self.tokens -= cost

    def debt_ns(self) -> int:
        """Nanoseconds until the bucket is out of debt (0: it is not), as of its last refill."""
        return max(0, int(-self.tokens * 1e9 / self.rate) + 1) if self.tokens < 0 else 0


@dataclass(frozen=True)
class Budget:
    """The writer's limits: block writes per second and bytes written per second (None: unlimited)."""

    iops: float | None = None  # block writes per second
    bandwidth_bytes_per_s: float | None = None

    def __post_init__(self):
        for name, value in (("IOPS", self.iops), ("bandwidth", self.bandwidth_bytes_per_s)):
            if value is not None and not value > 0:
                raise UsageError(f"the {name} budget must be positive, got {value}")

    @property
    def limited(self) -> bool:
        return self.iops is not None or self.bandwidth_bytes_per_s is not None

    @classmethod
    def from_options(cls, iops: float | None, bandwidth_mib_per_s: float | None) -> "Budget":
        return cls(iops, bandwidth_mib_per_s * MIB if bandwidth_mib_per_s is not None else None)

    def to_json(self) -> dict:
        return {"iops": self.iops,
                "bandwidth_mib_per_s": self.bandwidth_bytes_per_s / MIB if self.bandwidth_bytes_per_s is not None else None}


class Pacer:
    """The two buckets of a Budget, asked and charged together: per block write (``delay_ns``,
    ``take``), or per transfer already made (``paid``, which sleeps; thread-safe).

    ``clock``: nanoseconds; ``sleep``: seconds. ``full``: the buckets start full (a burst is
    allowed at once) or empty (``bytes_per_s``).
    """

    def __init__(self, budget: Budget, clock: Callable[[], int] = time.perf_counter_ns, *,
                 sleep: Callable[[float], None] = time.sleep, full: bool = True):
        self.budget = budget
        self.clock = clock
        self.sleep = sleep
        self.lock = threading.Lock()
        self.iops = TokenBucket(budget.iops, max(1.0, budget.iops * BURST_S), clock, full=full) \
            if budget.iops else None
        rate = budget.bandwidth_bytes_per_s
        self.bandwidth = TokenBucket(rate, max(4096.0, rate * BURST_S), clock, full=full) if rate else None

    @classmethod
    def bytes_per_s(cls, rate_bps: float | None, *, clock: Callable[[], int] = time.perf_counter_ns,
                    sleep: Callable[[float], None] = time.sleep) -> "Pacer":
        """A pacer of bytes only (compaction's read and write budgets): ``paid(n)`` after each
        transfer keeps the bytes so far within ``rate_bps * t``. None or 0: no limit."""
        return cls(Budget(bandwidth_bytes_per_s=rate_bps or None), clock, sleep=sleep, full=False)

    @property
    def rate(self) -> float | None:
        """The bandwidth budget, bytes per second (None: unlimited)."""
        return self.budget.bandwidth_bytes_per_s

    def paid(self, nbytes: int) -> None:
        """``nbytes`` moved (a block write counts one I/O): charge them, then sleep until the
        budget has caught up with them. No budget: returns at once."""
        if self.iops is None and self.bandwidth is None:
            return
        with self.lock:
            self.take(nbytes)
            wait_ns = max(bucket.debt_ns() for bucket in (self.iops, self.bandwidth) if bucket is not None)
        if wait_ns:
            self.sleep(wait_ns / 1e9)

    def delay_ns(self, nbytes: int, now: int | None = None) -> int:
        """Nanoseconds until a block write of ``nbytes`` may start (0: now)."""
        now = self.clock() if now is None else now
        delay = 0
        if self.iops is not None:
            delay = self.iops.delay_ns(1, now)
        if self.bandwidth is not None:
            delay = max(delay, self.bandwidth.delay_ns(nbytes, now))
        return delay

    def take(self, nbytes: int, now: int | None = None) -> None:
        now = self.clock() if now is None else now
        if self.iops is not None:
            self.iops.take(1, now)
        if self.bandwidth is not None:
            self.bandwidth.take(nbytes, now)
