#!/usr/bin/env python3
"""A WAL that runs for days (issue 13): what append, trim, status and recover --from cost on a
large, cleanly closed WAL, now that they start from the checkpoint instead of a full scan.

    python bench/continuous_bench.py [--capacity 1GiB] [--fill 900MiB] [--record-bytes 1024]
        [--dir DIR] [--keep]

Builds a WAL of --capacity holding at least --fill of live --record-bytes records (in-process,
through the writer), closes it cleanly, then runs each command as its own process and prints,
per command, the wall time and the bytes it read from the device: as walctl's device layer
counts them (device_bytes_read / bytes_read in its JSON) and as the kernel accounts the
process's block reads (ru_inblock x 512 from wait4; O_DIRECT reads bypass the page cache).
For comparison, `dd iflag=direct` reading the used part of the log: what a full scan reads.

Targets (issue 13): append, trim and status each read < 1 MiB and take < 0.5 s; recover --from
<the last 1 %> reads < 2 % of the log.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.sizes import format_size, parse_size  # noqa: E402
from walctl.wal.lifecycle import init_wal, open_writer  # noqa: E402


def build(path: str, capacity: int, fill: int, record_bytes: int) -> tuple[list[int], int]:
    """Init and fill; returns (a sample of record offsets, log end)."""
    init_wal(path, capacity)
    offsets: list[int] = []
    opened = open_writer(path, need_stream=0, iodepth=8, on_ack=lambda off, _: offsets.append(off))
    writer = opened.writer
    body_pad = b"b" * record_bytes
    n = 0
    while writer.next_block < fill:
        for sid in range(4):
            writer.append(StreamRecordBatch(sid, 0, n, 1, body_pad).encode(), None, (sid, n + 1))
        n += 1
    writer.close()
    return offsets, writer.acked_end


def timed_rusage(args: list[str]) -> dict:
    """Like timed(), with the child's rusage (ru_inblock) from wait4."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    lines = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    return {"exit": proc.returncode, "wall_s": wall, "json": lines[-1] if lines else {},
            "kernel_read_bytes": usage.ru_inblock * 512}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--capacity", default="1GiB")
    p.add_argument("--fill", default="900MiB", help="live bytes of records to write before measuring")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--dir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the WAL file")
    a = p.parse_args(argv)
    capacity, fill = parse_size(a.capacity), parse_size(a.fill)
    workdir = a.dir or tempfile.mkdtemp(prefix="walctl-continuous-")
    path = os.path.join(workdir, "wal.img")
    try:
        t0 = time.monotonic()
        offsets, end = build(path, capacity, fill, a.record_bytes)
        print(f"built {path}: {format_size(capacity)} WAL, log end {end} ({format_size(end)} of records, "
              f"{len(offsets)} records) in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        rows = []

        def measure(name: str, args: list[str], field: str, target_bytes: int, target_s: float | None):
            r = timed_rusage(args)
            walctl_bytes = r["json"].get(field)
            ok = r["exit"] == 0 and walctl_bytes is not None and walctl_bytes < target_bytes and (
                target_s is None or r["wall_s"] < target_s)
            rows.append({"command": name, "exit": r["exit"], "wall_s": round(r["wall_s"], 3),
                         "device_bytes_read": walctl_bytes, "kernel_read_bytes": r["kernel_read_bytes"],
                         "target_bytes": target_bytes, "target_s": target_s, "meets_target": ok})

        measure("append (one record)", ["append", path, "--stream", "1", "--json", "one"], "device_bytes_read",
                1 << 20, 0.5)
        measure("trim", ["trim", path, offsets[len(offsets) // 2], "--json"], "device_bytes_read", 1 << 20, 0.5)
        measure("status", ["status", path, "--json"], "device_bytes_read", 1 << 20, 0.5)
        from_offset = end - end // 100
        measure("recover --from <last 1 %>", ["recover", path, "--from", from_offset, "--json"], "bytes_read",
                end // 50, None)
        started = time.monotonic()
        dd = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", f"count={end >> 20}", "iflag=direct"],
                            capture_output=True)
        rows.append({"command": "dd iflag=direct of the used log (what a full scan reads)",
                     "exit": dd.returncode, "wall_s": round(time.monotonic() - started, 3),
                     "device_bytes_read": (end >> 20) << 20, "kernel_read_bytes": None, "target_bytes": None,
                     "target_s": None, "meets_target": None})
        for row in rows:
            print(json.dumps(row))
        return 0 if all(r["meets_target"] in (True, None) for r in rows) else 1
    finally:
        if not a.keep:
            if a.dir is None:
                shutil.rmtree(workdir, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
