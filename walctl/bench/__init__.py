"""The measurement code behind ``walctl bench``: raw device I/O and the WAL's append path.

Engine functions return result dataclasses and never print; walctl.commands.bench
renders them. Layers: ``target`` (safety checks, creating a file), ``raw`` (iops
and bandwidth loops on a WriteQueue), ``walmode`` (WalWriter appends), ``stats``
(latency percentiles), ``run`` (the modes in order).
"""

from walctl.bench.run import MODES, BenchOptions, BenchReport, run_bench
from walctl.bench.stats import LatencySummary, ModeResult

__all__ = ["MODES", "BenchOptions", "BenchReport", "LatencySummary", "ModeResult", "run_bench"]
