#!/usr/bin/env python3
"""`walctl append --input FILE` against what the same file can give the same device (issue 31).

    python bench/file_ceiling.py [--record 64KiB] [--data 1GiB] [--size 2GiB] [--rounds 4]
        [--duration 5] [--dir /var/tmp] [--json FILE]

On a loop device (--direct-io=on) over a prewritten file, each round runs, one after the other:
  walctl     `walctl append DEV --stream 1 --input FILE --framing length-prefixed --json
             > /dev/shm/acks` (a fresh `walctl init --force` first): payload MiB/s, its average write;
  fio        `fio --rw=write --bs=<walctl's average write> --iodepth=4 --direct=1 --sync=dsync
             --ioengine=libaio` (fio's default buffers: the same random bytes written again and again);
  fio fresh  the same with --refill_buffers (new random bytes for every write, as a WAL's are);
  bare file  `python bench/aio_ceiling.py DEV --bs <the same> --iodepth <walctl's> < FILE`: the file read
             with readinto into aligned buffers and written with O_DIRECT | O_DSYNC native AIO, no walctl
             (no framing, CRC, acknowledgements): the file's bytes on this device with nothing else
             to do; then the same at depth 4 (bare4), fio's depth;
  fio depth  fio at walctl's own --iodepth for a file (default 10, or WALCTL_IODEPTH; run even when that is 4).
and prints each one's MiB/s as a ratio to fio's, and walctl's ratio to the bare file copy. If the
bare copy of the file stays under a target ratio, no implementation of `--input FILE` reaches that
ratio on this machine: the bytes, not the WAL logic, set the bound. The machine is shared: compare
the ratios within a round, not the MiB/s across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import append_bench as ab  # noqa: E402  (bench/append_bench.py: the input, the walctl runs, fio)

MiB = 1 << 20


def bare_file(dev: str, inp: str, block_size: int, depth: int) -> dict:
    """bench/aio_ceiling.py with the file itself as its stdin: MiB/s and CPU s."""
    script = os.path.join(ab.REPO_ROOT, "bench", "aio_ceiling.py")
    with open(inp, "rb") as f:
        out = subprocess.run([sys.executable, script, dev, "--bs", str(block_size), "--iodepth", str(depth)], stdin=f,
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def one_round(dev: str, inp: str, opts, size: int) -> dict:
    s = ab.run_append(dev, inp, False, "records", None)
    avg = s["bytes_written"] // max(1, s["blocks_written"])
    bs = max(4096, avg // 4096 * 4096)
    walctl = s["payload_bytes"] / MiB / s["wall_s"]
    own = s["payload_bytes"] / MiB / s["seconds"] if s.get("seconds") else 0.0
    return {"bs": bs, "walctl": walctl, "walctl_own": own, "walctl_cpu_s_per_gib": (s.get("cpu_s") or 0) * MiB * 1024
            / max(s["payload_bytes"], 1),
            "fio": ab.fio(dev, bs, opts.duration, size)["mib_per_s"],
            "fio_fresh": ab.fio(dev, bs, opts.duration, size, fresh=True)["mib_per_s"],
            "bare_file": bare_file(dev, inp, bs, opts.depth)["mib_per_s"],
            "bare_file4": bare_file(dev, inp, bs, 4)["mib_per_s"],
            "fio_depth": ab.fio(dev, bs, opts.duration, size, depth=opts.depth)["mib_per_s"]}


def report(rows: list[dict]) -> None:
    print(f"{'round':>5} {'bs':>7} {'walctl':>7} {'fio':>7} {'w/fio':>6} {'fresh/fio':>9} {'bare/fio':>8} "
          f"{'bare4/fio':>9} {'w/bare':>6} {'own/fio':>7} {'@depth':>6} {'CPU s/GiB':>9}")
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['bs'] // 1024:>5}Ki {r['walctl']:>7.0f} {r['fio']:>7.0f} {r['walctl'] / r['fio']:>6.2f} "
              f"{r['fio_fresh'] / r['fio']:>9.2f} {r['bare_file'] / r['fio']:>8.2f} "
              f"{r.get('bare_file4', 0) / r['fio']:>9.2f} {r['walctl'] / r['bare_file']:>6.2f} "
              f"{r['walctl_own'] / r['fio']:>7.2f} {r['walctl'] / r.get('fio_depth', r['fio']):>6.2f} "
              f"{r['walctl_cpu_s_per_gib']:>9.2f}")
    med = {k: statistics.median(r[a] / r[b] for r in rows)
           for k, a, b in (("w/fio", "walctl", "fio"), ("fresh/fio", "fio_fresh", "fio"),
                           ("bare/fio", "bare_file", "fio"), ("w/bare", "walctl", "bare_file"))}
    if all("bare_file4" in r for r in rows):
        med["bare4/fio"] = statistics.median(r["bare_file4"] / r["fio"] for r in rows)
        med["@depth"] = statistics.median(r["walctl"] / r["fio_depth"] for r in rows)
    print("median " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    print("MiB/s: walctl's payload; w/fio: walctl / fio (default buffers); fresh/fio: fio --refill_buffers / fio; "
          "bare/fio: the file copied to the device by bare AIO at walctl's depth (bench/aio_ceiling.py < FILE) / fio; "
          "bare4/fio: the same at depth 4; @depth: walctl / fio at walctl's depth; "
          "w/bare: walctl / that copy; own/fio: walctl over its own seconds (its summary: start-up left out) / fio; "
          "CPU s/GiB: walctl's user + system seconds per GiB of payload.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", default="64KiB", help="payload bytes per record (KiB/MiB suffixes)")
    parser.add_argument("--data", default="1GiB", help="payload bytes per walctl run")
    parser.add_argument("--size", default="2GiB", help="the loop device's size (more than --data's log)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of each fio run")
    parser.add_argument("--dir", default="/var/tmp", help="where the backing file and the input go")
    parser.add_argument("--json", help="also write the rounds to this file")
    opts = parser.parse_args()
    record, data, size = ab.parse_size(opts.record), ab.parse_size(opts.data), ab.parse_size(opts.size)
    opts.depth = ab.walctl_depth(file=True)  # --input FILE: a regular file's depth
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (apt-get install -y fio)")
    with ab.bench_device(size, opts.dir, "walctl-file-ceiling-") as (loop, tmpdir):
        ab.warm_up(loop, ab.REPO_ROOT)
        inp = os.path.join(tmpdir, "input.bin")
        ab.make_input(inp, record, data)
        rows = []
        for r in range(opts.rounds):
            print(f"round {r + 1} ...", file=sys.stderr, flush=True)
            rows.append(one_round(loop, inp, opts, size))
        report(rows)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump(rows, f, indent=1)
    return 0

if __name__ == "__main__":
    sys.exit(main())
