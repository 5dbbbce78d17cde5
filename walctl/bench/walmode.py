"""The WAL mode: records appended through the real engine (init_wal, open_writer, WalWriter).

A record counts when ``on_ack`` reports it: its block and every block before it
came back from a durable write. Latency is from ``append`` to that acknowledgement.
``rate`` and ``bandwidth_mib`` are the writer's budget (block writes per second,
MiB per second written to the device), as ``append --iops/--bandwidth`` sets it;
``offered_rate`` paces the appender itself (records per second), to show what the
budget costs a load that stays under it.
Like a WAL whose data is uploaded, the log is trimmed as it fills, and trimmed
empty at the end so the device can be benchmarked again without --force.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Callable

from walctl.bench.stats import LatencyRecorder, LatencySummary, ModeResult
from walctl.device.blockio import IO_ENGINE_ENV
from walctl.errors import FullError, UsageError
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE, MIN_CAPACITY

# Called about twice a second from the appending thread: (records, payload bytes, elapsed_s).
Progress = Callable[[int, int, float], None]
PROGRESS_INTERVAL_NS = 500_000_000
# Trim once more than this share of the ring is in use (an uploader would do it).
TRIM_FRACTION = 0.5
# Look at the trim point every so many records (a header write each time it moves).
TRIM_CHECK_EVERY = 64
# Pacing sleeps in slices no longer than this, so the end of the run is not overslept.
MAX_SLEEP_S = 0.05


def run_wal(path: str, *, capacity: int, record_size: int, iodepth: int, duration_s: float,
            rate: float | None = None, bandwidth_mib: float | None = None, engine: str | None = None,
            offered_rate: float | None = None, progress: Progress | None = None) -> tuple[ModeResult, list[str]]:
    """Initialise a WAL over [0, capacity) of ``path`` and append records of ``record_size`` payload bytes.

    Args:
        rate: the writer's IOPS budget, block writes per second (None: unlimited).
        bandwidth_mib: the writer's bandwidth budget, MiB per second written to the device.
        offered_rate: append at most this many records per second (None: as fast as the WAL takes them).
        engine: the I/O engine of the writer ("io_uring", "aio", "threads"; None: the default choice).
    Returns:
        The result and the warnings of opening the WAL.
    Raises:
        UsageError: capacity too small for the record size.
    """
    if capacity < MIN_CAPACITY:
        raise UsageError(f"the WAL mode needs at least {MIN_CAPACITY} bytes, got {capacity}", where=path)
    acks = _Acks()
    writer, warnings = _open_wal(path, capacity, iodepth, rate, bandwidth_mib, engine, acks.on_ack)
    loop = _Loop(writer, acks, record_size, capacity, offered_rate, progress)
    try:
        seconds = loop.run(duration_s)
    except BaseException:  # Ctrl-C or an I/O error: still leave an empty WAL if the device lets us
        try:
            writer.drain()
            _trim_all(writer, acks.last_offset)
            writer.close()
        except Exception:
            writer.abort()
        raise
    writer.close()
    extra = {"record_size_bytes": record_size, "records": acks.records,
             "records_per_s": round(acks.records / seconds, 1) if seconds > 0 else 0.0,
             "payload_bytes": acks.records * record_size, "blocks_written": writer.blocks_written,
             "avg_block_bytes": writer.bytes_written // writer.blocks_written if writer.blocks_written else 0,
             "header_writes": writer.header_writes, "capacity_bytes": capacity,
             "budget_iops": rate, "budget_mib_per_s": bandwidth_mib,
             "offered_records_per_s": offered_rate, "stages_us": writer.stages.summary()}
    return (ModeResult("wal", writer.io_engine, None, iodepth, seconds, writer.blocks_written, writer.bytes_written,
                       LatencySummary.from_ns(acks.samples), extra), warnings)


class _Acks:
    """The acknowledged records: their latencies (append to acknowledgement), count, last offset."""

    def __init__(self):
        self.samples = LatencyRecorder().samples
        self.records = 0
        self.last_offset = -1
        self.clock = time.perf_counter_ns

    def on_ack(self, offset: int, token: int) -> None:
        self.samples.append(self.clock() - token)
        self.records += 1
        self.last_offset = offset


def _open_wal(path: str, capacity: int, iodepth: int, rate, bandwidth_mib, engine, on_ack):
    """(writer, warnings): a new WAL over [0, capacity) opened for appending with the budget."""
    from walctl.wal.lifecycle import init_wal, open_writer
    from walctl.wal.pacing import Budget

    with _engine(engine):
        # The target was checked (and --force honoured) by the caller: init may overwrite.
        result = init_wal(path, capacity, force=True, discard_unuploaded=True)
        budget = Budget.from_options(rate, bandwidth_mib)
        opened = open_writer(path, iodepth=iodepth, on_ack=on_ack, budget=budget)
    return opened.writer, result.warnings + opened.warnings


class _Loop:
    """The appending loop: records as fast as the WAL takes them (or at ``offered_rate``), the log
    trimmed as it fills (an uploader would), progress about twice a second."""

    def __init__(self, writer, acks: _Acks, record_size: int, capacity: int, offered_rate, progress):
        self.writer, self.acks, self.progress = writer, acks, progress
        self.payload = os.urandom(record_size)
        self.record_size = record_size
        self.trim_at = max(int((capacity - HEADERS_SIZE) * TRIM_FRACTION), 1)
        self.interval_ns = 1e9 / offered_rate if offered_rate else 0.0
        self.records = 0

    def run(self, duration_s: float) -> float:
        """Append for ``duration_s``; returns the seconds until every record was durable."""
        clock = time.perf_counter_ns
        started = clock()
        deadline = started + int(duration_s * 1e9)
        next_progress = started + PROGRESS_INTERVAL_NS
        while True:
            now = clock()
            if now >= deadline:
                break
            if self.interval_ns and self._pace(started, now, deadline):
                continue
            self._append_one()
            if self.progress is not None and now >= next_progress:
                next_progress = now + PROGRESS_INTERVAL_NS
                self.progress(self.acks.records, self.acks.records * self.record_size, (now - started) / 1e9)
        self.writer.drain()
        seconds = (clock() - started) / 1e9
        _trim_all(self.writer, self.acks.last_offset)
        return seconds

    def _pace(self, started: int, now: int, deadline: int) -> bool:
        """True after sleeping towards the next record's due time (an absolute schedule, so
        sleeping late never lowers the average rate); False when it is due."""
        due = started + self.records * self.interval_ns
        if due <= now:
            return False
        time.sleep(min(due - now, deadline - now, MAX_SLEEP_S * 1e9) / 1e9)
        return True

    def _append_one(self) -> None:
        writer, clock = self.writer, time.perf_counter_ns
        body = StreamRecordBatch(0, 0, self.records, 1, self.payload).encode()
        try:
            writer.append(body, clock())
        except FullError:
            # The writer got ahead of the trims (every block unacknowledged at the last check,
            # e.g. a slow device): wait for the writes in flight, trim what they acknowledged
            # (an uploader would have) and go on; full again after that is a real error.
            writer.drain()
            _trim_all(writer, self.acks.last_offset)
            writer.append(body, clock())
        self.records += 1
        if self.records % TRIM_CHECK_EVERY == 0:
            last = self.acks.last_offset
            if last >= 0 and writer.next_block - writer.trim_start > self.trim_at and last > writer.header.trim_offset:
                writer.update_header(trim_offset=last)


def _trim_all(writer, last_offset: int) -> None:
    """Bench records are nobody's data: trim them all, leaving an empty WAL a rerun may overwrite."""
    if last_offset > writer.header.trim_offset:
        writer.update_header(trim_offset=last_offset)


@contextlib.contextmanager
def _engine(engine: str | None):
    """The writer picks its I/O engine from WALCTL_IO_ENGINE: set it while the WAL is opened."""
    if engine is None:
        yield
        return
    previous = os.environ.get(IO_ENGINE_ENV)
    os.environ[IO_ENGINE_ENV] = engine
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(IO_ENGINE_ENV, None)
        else:
            os.environ[IO_ENGINE_ENV] = previous
