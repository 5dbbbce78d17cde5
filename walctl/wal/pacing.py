"""The WAL writer's IOPS and bandwidth budget, and its per-block latency breakdown.

Budget (the AutoMQ design: a WAL on a gp3-like disk may use its free 3000 IOPS and
125 MiB/s and no more): every block write takes one token from the IOPS bucket and
its size in bytes from the bandwidth bucket. A bucket refills at its rate and holds
at most ``BURST_S`` seconds of it, so a writer that was idle may send a short burst
but never more than ``rate * t + burst`` over any interval of ``t`` seconds.

A write may start while the bucket holds at least ``min(cost, burst)``; it then
takes its whole cost, leaving the bucket in debt when the cost is larger than the
burst (a 256 KiB block under a small bandwidth budget). The debt is paid before the
next write starts, so the long-run rate is exact whatever the block sizes.

Pacing adds nothing when the budget is not reached: a full bucket answers "now".
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass
from typing import Callable

from walctl.errors import UsageError
from walctl.percentile import nearest_rank

MIB = 1 << 20
BURST_S = 0.05  # a bucket holds this many seconds of its rate (at least one write)


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` held; a take may leave it in debt (see the module doc)."""

    __slots__ = ("rate", "burst", "tokens", "stamp", "clock")

    def __init__(self, rate: float, burst: float, clock: Callable[[], int] = time.perf_counter_ns):
        if rate <= 0 or burst <= 0:
            raise ValueError(f"rate and burst must be positive, got {rate} and {burst}")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = burst  # starts full: the first writes never wait
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
    """The two buckets of a Budget, asked and charged together, per block write."""

    def __init__(self, budget: Budget, clock: Callable[[], int] = time.perf_counter_ns):
        self.budget = budget
        self.clock = clock
        self.iops = TokenBucket(budget.iops, max(1.0, budget.iops * BURST_S), clock) if budget.iops else None
        rate = budget.bandwidth_bytes_per_s
        self.bandwidth = TokenBucket(rate, max(4096.0, rate * BURST_S), clock) if rate else None

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


# -- latency breakdown ---------------------------------------------------------------
STAGES = ("queued", "budget", "write", "flush", "total")
STAGE_HELP = {
    "queued": "first record in the block until its write started: the batch interval (group commit), "
              "batching behind busy I/O slots, the sliding window and the budget (budget is part of it)",
    "budget": "part of queued: the block could have been written but the IOPS/bandwidth budget held it",
    "write": "write submitted until the device returned it (with O_DSYNC, the device flush is inside)",
    "flush": "fdatasync after the write (buffered fallback only; 0 with O_DIRECT+O_DSYNC)",
    "total": "queued + write + flush: first record in the block until the block was durable",
}
SAMPLE_CAP = 1 << 18  # blocks kept per stage before halving (see StageRecorder)


class StageRecorder:
    """Per-block stage times in ns: exact sums and counts, and a uniform sample for percentiles.

    A long-running append may write millions of blocks: once ``cap`` blocks are kept,
    every other one is dropped and only every second block after that is kept (then
    every fourth...). The same blocks are kept for every stage, so per-block sums hold
    in the sample too.
    """

    def __init__(self, cap: int = SAMPLE_CAP):
        self.cap = cap
        self.count = 0
        self.sums = dict.fromkeys(STAGES, 0)
        self.samples = {stage: array("q") for stage in STAGES}
        self._stride = 1

    def add(self, queued_ns: int, budget_ns: int, write_ns: int, flush_ns: int) -> None:
        total_ns = queued_ns + write_ns + flush_ns
        sums = self.sums
        sums["queued"] += queued_ns
        sums["budget"] += budget_ns
        sums["write"] += write_ns
        sums["flush"] += flush_ns
        sums["total"] += total_ns
        self.count += 1
        if self.count % self._stride:
            return
        s = self.samples
        s["queued"].append(queued_ns)
        s["budget"].append(budget_ns)
        s["write"].append(write_ns)
        s["flush"].append(flush_ns)
        s["total"].append(total_ns)
        if len(s["total"]) >= self.cap:
            for stage in STAGES:
                s[stage] = s[stage][1::2]
            self._stride *= 2

    def summary(self) -> dict:
        """``{stage: {"p50": µs, "p99": µs, "mean": µs}}`` plus ``blocks``; means of the stages add up to total's."""
        out: dict = {"blocks": self.count}
        for stage in STAGES:
            data = sorted(self.samples[stage])
            out[stage] = {"p50": _rank(data, 50.0), "p99": _rank(data, 99.0),
                          "mean": round(self.sums[stage] / self.count / 1000, 1) if self.count else 0.0}
        return out


def _rank(data, pct: float) -> float:
    """Nearest-rank percentile of sorted ns samples, in µs (0 without samples)."""
    return round(nearest_rank(data, pct) / 1000, 1) if data else 0.0
