"""Latency percentiles and the per-mode result a bench run reports."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from walctl.percentile import nearest_rank

MIB = 1 << 20
# The percentiles every mode reports (fio's usual set, plus the maximum).
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))


@dataclass(frozen=True)
class LatencySummary:
    """Completion latencies of one run, in microseconds (nearest-rank percentiles)."""

    count: int
    mean_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float
    max_us: float

    @classmethod
    def from_ns(cls, samples_ns) -> "LatencySummary":
        """Summarise latencies given in nanoseconds (any iterable of ints)."""
        data = sorted(samples_ns)
        if not data:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        n = len(data)
        values = {name: nearest_rank(data, pct) / 1000 for name, pct in PERCENTILES}
        return cls(n, sum(data) / n / 1000, values["p50"], values["p90"], values["p99"], values["p999"],
                   data[-1] / 1000)

    def to_json(self) -> dict:
        return {"latency_us_mean": round(self.mean_us, 1), "latency_us_p50": round(self.p50_us, 1),
                "latency_us_p90": round(self.p90_us, 1), "latency_us_p99": round(self.p99_us, 1),
                "latency_us_p999": round(self.p999_us, 1), "latency_us_max": round(self.max_us, 1)}


class LatencyRecorder:
    """Collects nanosecond samples; one recorder per I/O slot, so no lock is needed."""

    __slots__ = ("samples",)

    def __init__(self):
        self.samples = array("q")


@dataclass
class ModeResult:
    """What one mode measured. ``iops`` counts device writes; for the WAL mode, blocks."""

    mode: str  # "iops", "bandwidth" or "wal"
    engine: str  # the WriteQueue engine: "io_uring", "aio" or "threads"
    block_size_bytes: int | None  # None for the WAL mode (blocks vary up to 256 KiB)
    iodepth: int
    seconds: float
    writes: int
    bytes_written: int
    latency: LatencySummary
    extra: dict = field(default_factory=dict)  # mode-specific fields (WAL: records, payload, limits)

    @property
    def iops(self) -> float:
        return self.writes / self.seconds if self.seconds > 0 else 0.0

    @property
    def device_mib_per_s(self) -> float:
        return self.bytes_written / MIB / self.seconds if self.seconds > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        """Device MiB/s for raw modes; payload MiB/s for the WAL mode."""
        if self.mode == "wal":
            payload = self.extra.get("payload_bytes", 0)
            return payload / MIB / self.seconds if self.seconds > 0 else 0.0
        return self.device_mib_per_s

    def to_json(self) -> dict:
        out = {"mode": self.mode, "engine": self.engine, "block_size_bytes": self.block_size_bytes,
               "iodepth": self.iodepth, "seconds": round(self.seconds, 6), "writes": self.writes,
               "bytes_written": self.bytes_written, "iops": round(self.iops, 1),
               "mib_per_s": round(self.mib_per_s, 2), **self.latency.to_json()}
        if self.mode == "wal":
            out["device_mib_per_s"] = round(self.device_mib_per_s, 2)
        out.update(self.extra)
        return out
