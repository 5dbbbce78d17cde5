#!/usr/bin/env python3
"""Field-tuning figures (issue 8), each measured in one run on this machine:

    python bench/tuning_bench.py pacing    [--dir /var/tmp] [--duration 5]
    python bench/tuning_bench.py prewrite  [--dir /var/tmp] [--capacity 512MiB] [--rounds 3]
    python bench/tuning_bench.py pagecache [--dir /var/tmp] [--capacity 1GiB]
    python bench/tuning_bench.py all

pacing: ``walctl bench --mode wal`` on a file in --dir, first without a budget (what the
  device gives), then with an IOPS budget and a bandwidth budget at half of that (so the
  budget, not the device, is the limit): achieved/budget ratios (target: within 5%).
  Then the same IOPS budget with records of 512 B, 4 KiB and 16 KiB: blocks per second
  stay at the budget while payload MiB/s grows with the records batched per block. Then a
  load under the budget (--offered-rate), with and without the budget: append latency
  and the budget stage, which must stay 0.
prewrite: first-lap append throughput (64 KiB records until the ring is full once) on a
  WAL file made by ``walctl init`` (every byte pre-written) against one made with
  ``--no-prewrite`` (a sparse file: each first write allocates blocks); rounds alternate.
pagecache: fills a WAL, drops it from the page cache, then runs ``recover``, ``upload``
  and ``inspect-object --deep`` (O_DIRECT reads), reporting /proc/meminfo ``Cached`` and
  ``fincore`` of the files before and after; then ``cat`` of the WAL as a control (a
  buffered read does fill the cache, so the measurement can see it).

Files are created under --dir (not tmpfs: it refuses O_DIRECT) and removed after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO_ROOT)

from walctl.sizes import format_size, parse_size  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import evict  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


def walctl(*args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, input=stdin,
                          cwd=REPO_ROOT, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"walctl {args[0]} failed ({proc.returncode}): {proc.stderr.decode().strip()}")
    return proc


def bench_wal(path: str, duration: float, *args: str) -> dict:
    out = walctl("bench", path, "--mode", "wal", "--json", "--duration", str(duration), "--size", "256MiB", *args)
    return json.loads(out.stdout)["modes"]["wal"]


# -- pacing ---------------------------------------------------------------------------

def pacing(opts) -> dict:
    path = os.path.join(opts.dir, "walctl-pacing.img")
    d = opts.duration
    free = bench_wal(path, d, "--record-size", "4KiB")
    free64 = bench_wal(path, d, "--record-size", "64KiB")
    # Budgets at half of what the device gave: the budget is the bottleneck, not the disk.
    iops_budget = round(min(3000.0, free["iops"] / 2))
    bw_budget = round(min(125.0, free64["device_mib_per_s"] / 2), 1)
    print(f"\npacing: {d:g} s per run on {path}; unlimited: {free['iops']:.0f} blocks/s with 4 KiB records, "
          f"{free64['device_mib_per_s']:.1f} MiB/s to the device with 64 KiB records")
    print(f"budgets: {iops_budget} IOPS, {bw_budget} MiB/s (gp3 gives 3000 and 125; half the device here "
          f"where it gives less)")
    rows = []
    paced_iops = bench_wal(path, d, "--record-size", "4KiB", "--rate", str(iops_budget))
    rows.append(("IOPS budget, 4 KiB records", "blocks/s", paced_iops["iops"], iops_budget, paced_iops))
    paced_bw = bench_wal(path, d, "--record-size", "64KiB", "--bandwidth", str(bw_budget))
    rows.append(("bandwidth budget, 64 KiB records", "device MiB/s", paced_bw["device_mib_per_s"], bw_budget,
                 paced_bw))
    print(f"{'run':<36} {'measure':<13} {'achieved':>9} {'budget':>8} {'ratio':>6}  budget stage p50/p99 µs")
    for name, unit, got, want, res in rows:
        st = res["stages_us"]["budget"]
        print(f"{name:<36} {unit:<13} {got:>9.1f} {want:>8} {got / want:>6.3f}  {st['p50']:.0f}/{st['p99']:.0f}")
    print(f"\nbatching under an IOPS budget of {iops_budget}:")
    print(f"{'record size':>11} {'blocks/s':>9} {'avg block':>10} {'records/s':>10} {'payload MiB/s':>14}")
    batching = []
    for size in ("512", "4KiB", "16KiB"):
        res = bench_wal(path, d, "--record-size", size, "--rate", str(iops_budget))
        batching.append(res)
        print(f"{size:>11} {res['iops']:>9.1f} {format_size(res['avg_block_bytes']):>10} "
              f"{res['records_per_s']:>10.0f} {res['mib_per_s']:>14.1f}")
    offered = max(50.0, round(iops_budget / 6))
    under: dict[str, list[dict]] = {}
    print(f"\nunder the budget: {offered:g} records/s of 4 KiB offered, {opts.rounds} rounds alternating "
          f"(medians; per round in brackets)")
    print(f"{'':<22} {'p50 µs':>8} {'p99 µs':>8} {'budget stage p99 µs':>20}")
    runs = (("no budget", ()), (f"budget {iops_budget} IOPS", ("--rate", str(iops_budget))))
    for i in range(opts.rounds):
        for label, extra in (runs if i % 2 == 0 else runs[::-1]):
            res = bench_wal(path, d, "--record-size", "4KiB", "--offered-rate", str(offered), *extra)
            under.setdefault(label, []).append(res)
    for label, _ in runs:
        got = under[label]
        print(f"{label:<22} {statistics.median(r['latency_us_p50'] for r in got):>8.0f} "
              f"{statistics.median(r['latency_us_p99'] for r in got):>8.0f} "
              f"{max(r['stages_us']['budget']['p99'] for r in got):>20.0f}  "
              f"p50 {[round(r['latency_us_p50']) for r in got]}")
    return {"unlimited": free, "unlimited_64k": free64, "iops_budget": iops_budget, "bandwidth_budget": bw_budget,
            "paced_iops": paced_iops, "paced_bandwidth": paced_bw, "batching": batching, "under_budget": under}


# -- prewrite -------------------------------------------------------------------------

FIRST_LAP = r"""
import sys, time
from walctl.format.batch import StreamRecordBatch
from walctl.wal.lifecycle import open_writer
path, record = sys.argv[1], int(sys.argv[2])
w = open_writer(path, iodepth=4).writer
body = StreamRecordBatch(0, 0, 0, 1, bytes(record)).encode()
ring = w.ring.size - (1 << 20)  # one lap, less the room the last blocks need
t = time.perf_counter(); n = 0
while w.next_block < ring:
    w.append(body); n += 1
w.drain(); elapsed = time.perf_counter() - t
w.close()
print(n * record / elapsed / (1 << 20))
"""


def first_lap(path: str, prewrite: bool, capacity: int, record: int) -> tuple[float, float]:
    if os.path.exists(path):
        os.unlink(path)
    t = time.perf_counter()
    walctl("init", path, "--capacity", str(capacity), *(() if prewrite else ("--no-prewrite",)))
    init_s = time.perf_counter() - t
    out = subprocess.run([sys.executable, "-c", FIRST_LAP, path, str(record)], capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True)
    os.unlink(path)
    return float(out.stdout), init_s


def prewrite(opts) -> dict:
    path = os.path.join(opts.dir, "walctl-prewrite.img")
    capacity = parse_size(opts.capacity)
    results = {"prewritten": [], "sparse": [], "init_s_prewritten": [], "init_s_sparse": []}
    for i in range(opts.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        for pre in order:
            mib, init_s = first_lap(path, pre, capacity, 64 * KiB)
            results["prewritten" if pre else "sparse"].append(mib)
            results["init_s_prewritten" if pre else "init_s_sparse"].append(init_s)
    ratios = [p / s for p, s in zip(results["prewritten"], results["sparse"])]
    results["ratio_median"] = statistics.median(ratios)
    print(f"\nprewrite: first lap of a {format_size(capacity)} WAL file in {opts.dir}, 64 KiB records, "
          f"{opts.rounds} rounds alternating")
    print(f"{'':<28} {'MiB/s (median)':>15} {'per round':>30} {'init s':>8}")
    for key, label in (("prewritten", "init (pre-written)"), ("sparse", "init --no-prewrite")):
        print(f"{label:<28} {statistics.median(results[key]):>15.1f} "
              f"{str([round(x) for x in results[key]]):>30} "
              f"{statistics.median(results['init_s_' + key]):>8.2f}")
    print(f"ratio pre-written / sparse: {results['ratio_median']:.2f} (per round {[round(r, 2) for r in ratios]})")
    return results


# -- page cache -----------------------------------------------------------------------

def cached_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1])
    raise SystemExit("no Cached line in /proc/meminfo")


def resident(path: str) -> int:
    if shutil.which("fincore") is None:
        return -1
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


FILL = r"""
import sys
from walctl.format.batch import StreamRecordBatch
from walctl.wal.lifecycle import open_writer
path = sys.argv[1]
w = open_writer(path, iodepth=4).writer
payload = bytes(range(256)) * 256
stop = w.ring.size - (8 << 20)
i = 0
while w.next_block < stop:
    w.append(StreamRecordBatch(i % 16, 0, i // 16, 1, payload).encode()); i += 1
w.close()
print(i)
"""


def pagecache(opts) -> dict:
    tmp = tempfile.mkdtemp(prefix="walctl-pagecache-", dir=opts.dir)
    wal = os.path.join(tmp, "wal.img")
    store = os.path.join(tmp, "store")
    capacity = parse_size(opts.capacity)
    try:
        walctl("init", wal, "--capacity", str(capacity))
        records = int(subprocess.run([sys.executable, "-c", FILL, wal], capture_output=True, text=True,
                                     cwd=REPO_ROOT, check=True).stdout)
        print(f"\npagecache: a {format_size(capacity)} WAL in {tmp} with {records:,} records of 64 KiB")
        print(f"{'step':<40} {'Cached before':>14} {'after':>12} {'delta':>10} {'file resident after':>20} {'store resident':>14}")
        rows = {}

        def step(name: str, target: str, *args: str, cmd: list[str] | None = None) -> None:
            evict(target)
            subprocess.run(["sync"], check=False)
            before = cached_kib()
            if cmd is not None:
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            else:
                walctl(*args)
            after = cached_kib()
            res = resident(target)
            in_store = sum(resident(os.path.join(d, f)) for d, _, fs in os.walk(store) for f in fs)
            rows[name] = {"cached_kib_before": before, "cached_kib_after": after, "resident_bytes": res,
                          "store_resident_bytes": in_store}
            print(f"{name:<40} {before / 1024:>11.1f} MiB {after / 1024:>8.1f} MiB {(after - before) / 1024:>+7.1f} MiB "
                  f"{format_size(res) if res >= 0 else 'no fincore':>20} {format_size(max(in_store, 0)):>14}")

        step("walctl recover --payload none", wal, "recover", wal, "--json", "--payload", "none")
        step("walctl upload --no-trim", wal, "upload", wal, "--store", store, "--no-trim")
        objects = sorted((os.path.join(d, f) for d, _, fs in os.walk(store) for f in fs
                          if os.path.getsize(os.path.join(d, f)) > MiB), key=os.path.getsize)
        if objects:
            step(f"walctl inspect-object --deep ({format_size(os.path.getsize(objects[-1]))})", objects[-1],
                 "inspect-object", objects[-1], "--deep", "--json")
        step("control: cat wal.img > /dev/null", wal, cmd=["cat", wal])
        return {"records": records, "capacity": capacity, "steps": rows}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("pacing", "prewrite", "pagecache", "all"))
    parser.add_argument("--dir", default="/var/tmp", help="where the files go (not tmpfs)")
    parser.add_argument("--duration", type=float, default=5.0, help="pacing: seconds per run")
    parser.add_argument("--capacity", default=None, help="WAL size (prewrite: 512MiB, pagecache: 1GiB)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="prewrite, and pacing's under-budget runs: rounds (each runs both kinds)")
    parser.add_argument("--json", help="also write the numbers to this file")
    opts = parser.parse_args()
    out = {}
    if opts.what in ("pacing", "all"):
        out["pacing"] = pacing(opts)
    if opts.what in ("prewrite", "all"):
        opts.capacity = opts.capacity or "512MiB"
        out["prewrite"] = prewrite(opts)
        opts.capacity = None if opts.what == "all" else opts.capacity
    if opts.what in ("pagecache", "all"):
        opts.capacity = opts.capacity or "1GiB"
        out["pagecache"] = pagecache(opts)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
