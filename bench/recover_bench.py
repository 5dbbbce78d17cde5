#!/usr/bin/env python3
"""recover's scan in-process against `dd iflag=direct bs=1M` of the same bytes (issue 19).

throughput_bench.py times whole `walctl recover --stats` processes, so at 64 MiB its ratio is
mostly the interpreter's and the CLI's start-up (typer, pydantic, ... : 0.15 s on an idle
machine, far more under load), not the scan. This one builds a WAL per record size with
`walctl append` once, then times, interleaved for --rounds rounds, in one process:
  dd      `dd if=WAL of=/dev/null bs=1M iflag=direct` of the log's bytes (a process);
  stats   walctl.wal.verdict.recover(stats=True): what `recover --stats` does after start-up;
  no-ra   the same with the scan's read-ahead off (readahead=False: each chunk read when needed);
  ndjson  recover() rendering `--json --payload none` lines into a null sink (/dev/null, at its fd);
  hex     the same with `--payload hex` (issue 31: at least half the speed of ndjson);
and prints the best of each with the ratio dd seconds / walctl seconds (higher is better).
It times the walctl tree it sits in (copy it into a checkout of another commit to time that).

    python bench/recover_bench.py [--dir /var/tmp] [--record-sizes 1KiB,64KiB] [--wal-size 64MiB] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import throughput_bench as tb  # noqa: E402  (its WAL-making helpers)

from walctl.sizes import parse_size  # noqa: E402


def make_wal(workdir: str, record: int, wal_size: int) -> str:
    inp, path = os.path.join(workdir, "input.bin"), os.path.join(workdir, f"wal-{record}.img")
    tb.make_input(inp, record, int(wal_size * record / (record + tb.RECORD_OVERHEAD)))
    capacity = wal_size * 2 + 16 * tb.MiB
    with open(path, "wb") as f:
        f.truncate(capacity)
    tb.walctl("init", path, "--capacity", str(capacity))
    tb.walctl("append", path, "--stream", "1", "--input", inp, "--framing", "length-prefixed", "--json")
    os.remove(inp)
    return path


def engine(path: str, ndjson: bool, readahead: bool = True, payload: str = "none") -> tuple[float, int, int]:
    """(seconds, records, log bytes) of one recover() after the device is open."""
    import inspect

    from walctl.commands.recover import Payload, _Printer
    from walctl.wal.lifecycle import open_reader
    from walctl.wal.verdict import recover

    session = open_reader(path)
    try:
        # A null sink with a file descriptor, as a CLI's stdout redirected to /dev/null: the lines go
        # out through walctl's write_lines at the descriptor (a StringIO made it decode every line's
        # bytes and keep the whole output: 2 GiB of text for a 1 GiB log rendered in hex).
        sink = open(os.devnull, "w")
        with sink, redirect_stdout(sink):
            out = _Printer(True, Payload(payload), not ndjson)
            started = time.perf_counter()
            params = inspect.signature(recover).parameters
            bulk = {"on_run": out.run} if "on_run" in params else {}
            if "readahead" in params:
                bulk["readahead"] = readahead
            run = recover(session.dev, session.state, path, stats=not ndjson, on_record=out.record,
                          on_finding=out.finding, **bulk)
            seconds = time.perf_counter() - started
    finally:
        session.dev.close()
    return seconds, run.report.records, run.report.end_offset - run.report.start_offset


def dd(path: str, log_bytes: int) -> float:
    started = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct",
                    f"count={-(-(log_bytes + 8192) // tb.MiB)}"], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--record-sizes", default="1KiB,64KiB")
    parser.add_argument("--wal-size", default="64MiB")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    import walctl
    print(f"walctl from {os.path.dirname(walctl.__file__)}; best of {opts.rounds} interleaved rounds")
    with tempfile.TemporaryDirectory(dir=opts.dir) as workdir:
        for record in (parse_size(s) for s in opts.record_sizes.split(",")):
            path = make_wal(workdir, record, parse_size(opts.wal_size))
            best = {"dd": 1e9, "stats": 1e9, "ndjson": 1e9, "no-ra": 1e9, "hex": 1e9}
            for _ in range(opts.rounds):
                secs, records, log = engine(path, False)
                best["stats"] = min(best["stats"], secs)
                best["no-ra"] = min(best["no-ra"], engine(path, False, readahead=False)[0])
                best["dd"] = min(best["dd"], dd(path, log))
                best["ndjson"] = min(best["ndjson"], engine(path, True)[0])
                best["hex"] = min(best["hex"], engine(path, True, payload="hex")[0])
            print(f"record {record:>6} B, {records} records, {log / tb.MiB:.0f} MiB: dd {best['dd']:.3f} s | "
                  f"stats {best['stats']:.3f} s ratio {best['dd'] / best['stats']:.2f} "
                  f"({records / best['stats']:,.0f} records/s) | no-ra {best['no-ra']:.3f} s ratio "
                  f"{best['dd'] / best['no-ra']:.2f} | ndjson {best['ndjson']:.3f} s ratio "
                  f"{best['dd'] / best['ndjson']:.2f} | hex {best['hex']:.3f} s, x ndjson "
                  f"{best['ndjson'] / best['hex']:.2f}", flush=True)
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
