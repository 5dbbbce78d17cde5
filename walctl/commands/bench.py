"""walctl bench: measure the device (random and sequential durable writes) and the WAL's append path."""

from __future__ import annotations

import enum
import sys
from typing import Annotated

import typer

from walctl.commands._shared import DeviceArg, JsonOpt, StatusLine, command, emit_json, stdout_console, warn
from walctl.options import Duration, Size


class Mode(str, enum.Enum):
    iops = "iops"
    bandwidth = "bandwidth"
    wal = "wal"
    all = "all"


class Engine(str, enum.Enum):
    auto = "auto"
    io_uring = "io_uring"
    aio = "aio"
    threads = "threads"


@command("bench")
def bench_cmd(
    device: DeviceArg,
    mode: Annotated[Mode, typer.Option(
        "--mode", help="What to measure: 'iops' (4 KiB random writes), 'bandwidth' (sequential writes of "
                       "256 KiB, then 1 MiB), 'wal' (records appended through the WAL engine, each "
                       "acknowledged once durable; its IOPS counts blocks written and its MiB/s is "
                       "payload) or 'all' (the three, in that order).")] = Mode.all,
    block_size: Annotated[int | None, typer.Option(
        "--block-size", metavar="SIZE", parser=Size(min=4096, max=64 << 20, multiple_of=4096),
        help="Bytes per write of the iops and bandwidth modes, a multiple of 4096 (default: 4KiB for iops; "
             "256KiB, the WAL's block limit, then 1MiB for bandwidth).")] = None,
    iodepth: Annotated[int, typer.Option(
        "--iodepth", min=1, max=256,
        help="Writes in flight at once (queue depth), in every mode; the WAL mode's blocks in flight.")] = 4,
    record_size: Annotated[int, typer.Option(
        "--record-size", metavar="SIZE", parser=Size(min=1, max=64 << 20),
        help="Payload bytes per record in the wal mode (1 B to 64 MiB).")] = "64KiB",
    rate: Annotated[float | None, typer.Option(
        "--iops", "--rate", metavar="IOPS", min=0.001,
        help="wal mode: the WAL writer's IOPS budget, block writes per second, as 'append --iops' sets it "
             "(AutoMQ's IOPS limit). Records batch into larger blocks while it holds writes. "
             "--rate is the old name. Default: unlimited.")] = None,
    bandwidth: Annotated[float | None, typer.Option(
        "--bandwidth", metavar="MIB/S", min=0.001,
        help="wal mode: the WAL writer's bandwidth budget, MiB (2^20 bytes) per second written to the "
             "device, as 'append --bandwidth' sets it (AutoMQ's bandwidth limit). Default: unlimited.")] = None,
    offered_rate: Annotated[float | None, typer.Option(
        "--offered-rate", metavar="RECORDS/S", min=0.001,
        help="wal mode: append at most this many records per second (the offered load; default: as fast "
             "as the WAL takes them).")] = None,
    duration: Annotated[float, typer.Option(
        "--duration", metavar="DURATION", parser=Duration(min=0.001, max=7 * 86400),
        help="How long each mode runs (500ms, 10s, 2m; a bare number is seconds; one block size of "
             "bandwidth counts as one mode).")] = "10s",
    size: Annotated[int | None, typer.Option(
        "--size", metavar="SIZE", parser=Size(min=4096, max=1 << 50),
        help="Bytes of DEVICE to use, from its start (4KiB to 1024TiB; default: all of it). A DEVICE that does "
             "not exist is created as a file of this size, zero-filled (refused, exit 6, when its filesystem "
             "has less free space; then removed, unless --keep).")] = None,
    engine: Annotated[Engine, typer.Option(
        "--engine", envvar="WALCTL_IO_ENGINE",
        help="I/O engine of every mode: 'io_uring' (an io_uring ring on the O_DIRECT+O_DSYNC device, Linux "
             "5.11+), 'aio' (Linux native AIO on that device), 'threads' (a pool of threads, each in a durable "
             "pwrite) or 'auto' (io_uring where the kernel allows a ring, else aio where it works, else "
             "threads); WALCTL_IO_ENGINE sets it for every command.")] = Engine.auto,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the file bench created for DEVICE (it is removed by default).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite a device holding a WAL with live records or a filesystem/partition "
                        "signature (never a mounted or held device).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Benchmark durable writes on DEVICE (destroys its data): IOPS, MiB/s and latency percentiles."""
    from walctl.bench import BenchOptions, run_bench
    from walctl.sizes import parse_size

    if size is not None:
        _check_free_space(device, parse_size(size))
    options = BenchOptions(
        path=device, mode=mode.value, block_size=parse_size(block_size) if block_size is not None else None,
        iodepth=iodepth, record_size=parse_size(record_size), rate=rate, bandwidth_mib=bandwidth,
        offered_rate=offered_rate,
        duration_s=duration, size_bytes=parse_size(size) if size is not None else None, force=force,
        engine=None if engine is Engine.auto else engine.value, keep=keep)
    progress = _progress() if not json_out else None
    try:
        report = run_bench(options, progress)
    finally:
        if progress is not None:
            progress.clear()
    for message in report.warnings:
        warn(message)
    if json_out:
        emit_json({"device": report.path, "size_bytes": report.size_bytes, "direct": report.direct,
                   "created": report.created, "removed": report.removed, "iodepth": iodepth,
                   "duration_s": duration, "modes": report.by_mode()})
        return
    _render(report)


def _check_free_space(path: str, size: int) -> None:
    """A DEVICE bench creates is zero-filled: refuse (exit 6, as init does) a size its filesystem lacks."""
    import os

    from walctl.errors import IOFailure
    from walctl.sizes import format_size

    if os.path.exists(path):
        return
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return  # creating the file names the problem
    free = st.f_bavail * st.f_frsize
    if free < size:
        raise IOFailure(f"not enough free space for the bench file: {format_size(free)} free, --size needs "
                        f"{format_size(size)}",
                        where=path, hint="choose a smaller --size, or free space")


def _render(report) -> None:
    """One column per run (mode and write size), one row per measure: fits a terminal of 80 columns."""
    from rich.table import Table

    from walctl.sizes import format_size

    title = f"walctl bench {report.path} ({format_size(report.size_bytes)}" + (", created" if report.created else "")
    table = Table(title=title + ")", title_justify="left")
    table.add_column("")
    rows: dict[str, list[str]] = {name: [] for name in (
        "write size", "engine", "IOPS", "MiB/s", "records/s", "latency p50 µs", "p90 µs", "p99 µs", "p99.9 µs",
        "max µs")}
    for result in report.results:
        lat = result.latency
        if result.mode == "wal":
            header = "wal"
            size = f"{format_size(result.extra['avg_block_bytes'])} avg"
            records = f"{result.extra['records_per_s']:,.0f}"
        else:
            header, size, records = result.mode, format_size(result.block_size_bytes), "-"
        table.add_column(header, justify="right")
        values = (size, result.engine, f"{result.iops:,.0f}", f"{result.mib_per_s:,.1f}", records,
                  *(f"{v:,.0f}" for v in (lat.p50_us, lat.p90_us, lat.p99_us, lat.p999_us, lat.max_us)))
        for row, value in zip(rows.values(), values):
            row.append(value)
    for name, values in rows.items():
        table.add_row(name, *values)
    console = stdout_console()
    console.print(table)
    for result in report.results:
        if result.mode == "wal":
            extra = result.extra
            console.print(f"wal: records of {format_size(extra['record_size_bytes'])} payload; IOPS counts blocks "
                          f"written ({extra['blocks_written']:,}, {result.device_mib_per_s:,.1f} MiB/s to the "
                          f"device), MiB/s is payload; latency is append to acknowledgement.")
            stages = extra["stages_us"]
            parts = ", ".join(f"{stage} {stages[stage]['p50']:,.0f}/{stages[stage]['p99']:,.0f}"
                              for stage in ("queued", "budget", "write", "flush", "total"))
            budget = [f"{extra['budget_iops']:g} IOPS" if extra["budget_iops"] else "",
                      f"{extra['budget_mib_per_s']:g} MiB/s" if extra["budget_mib_per_s"] else ""]
            budget_text = " and ".join(b for b in budget if b) or "none"
            console.print(f"wal blocks, p50/p99 µs: {parts} (budget is part of queued; budget: {budget_text})")


class _Progress(StatusLine):
    """The live line on stderr (a terminal only): mode, elapsed time, rate so far."""

    def __call__(self, label: str, count: int, nbytes: int, elapsed_s: float, duration_s: float) -> None:
        if elapsed_s <= 0:
            return
        unit = "records/s" if label.startswith("wal") else "IOPS"
        line = (f"{label}: {min(elapsed_s, duration_s):.1f}/{duration_s:g} s  {count / elapsed_s:,.0f} {unit}  "
                f"{nbytes / (1 << 20) / elapsed_s:,.1f} MiB/s")
        self.show(line)


def _progress() -> _Progress | None:
    return _Progress() if sys.stderr.isatty() else None
