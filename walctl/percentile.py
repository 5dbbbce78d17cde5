"""Nearest-rank percentiles, shared by bench's latency summaries and the WAL writer's stage breakdown."""

from __future__ import annotations


def nearest_rank(data, pct: float):
    """The smallest sample of sorted, non-empty ``data`` with at least ``pct``% of the samples at or below it."""
    n = len(data)
    return data[min(n - 1, max(0, -(-int(pct * n * 10) // 1000) - 1))]
