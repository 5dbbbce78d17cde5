"""The WAL writer's per-block latency breakdown (StageRecorder).

Its IOPS and bandwidth budget (Budget, TokenBucket, Pacer) is walctl.device.pacing's, the one
pacer walctl has (compaction paces its reads and writes with it too); re-exported here.
"""

from __future__ import annotations

from array import array

from walctl.percentile import nearest_rank

# The budget and its pacer live in walctl.device.pacing (one pacer for the WAL and compaction).
from walctl.device.pacing import BURST_S, MIB, Budget, Pacer, TokenBucket  # noqa: F401 - re-exported


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
