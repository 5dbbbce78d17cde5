"""A bench run: the target opened once for the raw modes, then the WAL mode, in that order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from walctl.bench import raw, target, walmode
from walctl.bench.stats import ModeResult
from walctl.device.base import Device
from walctl.device.blockio import open_write_queue
from walctl.device.buffers import aligned_buffer
from walctl.errors import UsageError
from walctl.format.header import MIN_CAPACITY

MODES = ("iops", "bandwidth", "wal", "all")
IOPS_BLOCK_SIZE = 4096  # fio's and the industry's IOPS unit
# 256 KiB is the WAL's block soft limit (the most one WAL write carries); 1 MiB shows
# whether larger writes would still gain.
BANDWIDTH_BLOCK_SIZES = (256 << 10, 1 << 20)
DEFAULT_RECORD_SIZE = 64 << 10
# The WAL mode's capacity at most: AutoMQ's default WAL size; more only lengthens the wipe.
WAL_MAX_CAPACITY = 1 << 30
# Zeros are written in pieces of this size before the WAL mode (see _wipe_for_wal).
WIPE_CHUNK_BYTES = 8 << 20

# Called from the measuring thread: (label, writes or records, bytes, elapsed_s, duration_s).
Progress = Callable[[str, int, int, float, float], None]


@dataclass
class BenchOptions:
    path: str
    mode: str = "all"
    block_size: int | None = None  # None: 4 KiB for iops, 256 KiB then 1 MiB for bandwidth
    iodepth: int = 4
    record_size: int = DEFAULT_RECORD_SIZE
    rate: float | None = None  # WAL mode: the writer's IOPS budget (block writes/s)
    bandwidth_mib: float | None = None  # WAL mode: the writer's bandwidth budget (device MiB/s)
    offered_rate: float | None = None  # WAL mode: records appended per second at most
    duration_s: float = 10.0
    size_bytes: int | None = None
    force: bool = False
    engine: str | None = None  # None: WALCTL_IO_ENGINE or auto
    keep: bool = False  # keep a file bench created


@dataclass
class BenchReport:
    path: str
    size_bytes: int
    created: bool
    removed: bool
    direct: bool
    results: list[ModeResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def by_mode(self) -> dict[str, dict]:
        """One JSON object per mode; bandwidth's top level is its first block size (256 KiB)."""
        out: dict[str, dict] = {}
        for result in self.results:
            obj = result.to_json()
            if result.mode in out:
                out[result.mode].setdefault("by_block_size", [dict(out[result.mode])]).append(obj)
            else:
                out[result.mode] = obj
        return out


def _check(options: BenchOptions) -> None:
    if options.mode not in MODES:
        raise UsageError(f"unknown mode {options.mode!r}", hint=f"one of {', '.join(MODES)}")
    if options.iodepth < 1:
        raise UsageError(f"--iodepth must be >= 1, got {options.iodepth}")
    if options.duration_s <= 0:
        raise UsageError(f"--duration must be positive, got {options.duration_s}")
    if options.block_size is not None and (options.block_size <= 0 or options.block_size % 4096):
        raise UsageError(f"--block-size must be a positive multiple of 4096, got {options.block_size}")
    if options.record_size <= 0:
        raise UsageError(f"--record-size must be positive, got {options.record_size}")
    for name, value in (("--rate", options.rate), ("--bandwidth", options.bandwidth_mib),
                        ("--offered-rate", options.offered_rate)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive, got {value}")
        if value is not None and options.mode not in ("wal", "all"):
            raise UsageError(f"{name} paces the WAL mode only", hint="use --mode wal or all")


def run_bench(options: BenchOptions, progress: Progress | None = None) -> BenchReport:
    """Run the selected modes on ``options.path``; see BenchOptions for the knobs.

    Raises:
        UsageError: bad options, or a region too small for a block.
        RefusedError: see walctl.bench.target.open_target.
        IOFailure: a write failed.
    """
    _check(options)
    modes = ("iops", "bandwidth", "wal") if options.mode == "all" else (options.mode,)
    plan: list[tuple[str, int]] = []
    if "iops" in modes:
        plan.append(("iops", options.block_size or IOPS_BLOCK_SIZE))
    if "bandwidth" in modes:
        plan += [("bandwidth", size) for size in ((options.block_size,) if options.block_size
                                                  else BANDWIDTH_BLOCK_SIZES)]
    created: list[str] = []  # a file bench creates is removed on the way out, whatever interrupts it
    report = None
    try:
        tgt = target.open_target(options.path, options.size_bytes, force=options.force, created_paths=created)
        report = BenchReport(options.path, tgt.size_bytes, tgt.created, False, tgt.dev.direct, warnings=tgt.warnings)
        wal_capacity = min(tgt.size_bytes, WAL_MAX_CAPACITY)
        try:
            _run_raw_modes(tgt, plan, options, report, progress)
            if "wal" in modes and not tgt.created:  # a created file is all zeros already
                _wipe_for_wal(tgt.dev, wal_capacity)
        finally:
            tgt.dev.close()
        if "wal" in modes:
            _run_wal_mode(options, wal_capacity, report, progress)
    finally:
        if created and not options.keep:
            removed = target.remove_file(options.path)
            if report is not None:
                report.removed = removed
    return report


def _run_raw_modes(tgt: target.Target, plan, options: BenchOptions, report: BenchReport, progress) -> None:
    for mode, block_size in plan:
        if block_size > tgt.size_bytes:
            raise UsageError(f"block size {block_size} bytes is larger than the region ({tgt.size_bytes} bytes)",
                             where=options.path, hint="raise --size or lower --block-size")
    for mode, block_size in plan:
        label = f"{mode} {block_size >> 10} KiB"
        queue = open_write_queue(tgt.dev, options.iodepth, options.engine, reaper=False)
        try:
            result = raw.run_raw(queue, mode, block_size=block_size, region_start=0,
                                 region_bytes=tgt.size_bytes, iodepth=options.iodepth,
                                 duration_s=options.duration_s,
                                 progress=_bind(progress, label, options.duration_s))
        finally:
            queue.close()
        report.results.append(result)


def _wipe_for_wal(dev: Device, capacity: int) -> None:
    """Zero the area the WAL mode will use (earlier runs left data there), with plain writes.

    init_wal would wipe it too, but on a block device with BLKZEROOUT, which on a loop
    device deallocates the backing file's blocks: every later write would then pay for
    allocating them again, and the next run would measure the filesystem, not the device.
    """
    zeros = aligned_buffer(min(WIPE_CHUNK_BYTES, capacity))
    done = 0
    while done < capacity:
        n = min(len(zeros), capacity - done)
        with memoryview(zeros)[:n] as piece:
            # Durable on return (O_DSYNC): init_wal then finds the area zeroed, not dirty.
            dev.pwrite(done, piece)
        done += n


def _run_wal_mode(options: BenchOptions, size_bytes: int, report: BenchReport, progress) -> None:
    if size_bytes < MIN_CAPACITY:
        raise UsageError(f"the WAL mode needs --size of at least {MIN_CAPACITY} bytes", where=options.path)
    label = f"wal {_size_label(options.record_size)} records"
    result, warnings = walmode.run_wal(options.path, capacity=size_bytes, record_size=options.record_size,
                                       iodepth=options.iodepth, duration_s=options.duration_s, rate=options.rate,
                                       bandwidth_mib=options.bandwidth_mib, engine=options.engine,
                                       offered_rate=options.offered_rate,
                                       progress=_bind(progress, label, options.duration_s))
    report.results.append(result)
    report.warnings += [w for w in warnings if w not in report.warnings]


def _bind(progress: Progress | None, label: str, duration_s: float):
    if progress is None:
        return None
    return lambda count, nbytes, elapsed: progress(label, count, nbytes, elapsed, duration_s)


def _size_label(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"
