#!/usr/bin/env python3
"""Compaction benchmark (issue 20): a store of many small SSOs holding streams of Zipf-like sizes,
compacted by the real Spark job; speed against the disk's floor, peak memory, objects, requests.

    python bench/compact_bench.py [--ssos 160] [--streams 80] [--size 800MB] [--zipf 1.2]
        [--batch-bytes 65536] [--master local[2]] [--memory-limit 64MiB] [--split-size 16MiB]
        [--store DIR] [--read-rate MIB/S]

Prints, in one run:
- the floor: the input objects' bytes read and written once, `cat INPUTS | dd of=OUT bs=1M
  conv=fsync`, and the compaction's time (Spark's start excluded, then included) as a
  fraction of it (target >= 0.5 on ~800 MB);
- peak memory: the largest resident set of the whole process tree (this driver, the Spark
  JVM and its Python workers), sampled every 50 ms from /proc, against memory limit + 400 MiB;
- objects in and out (kinds), GETs against the plan's minimum, PUTs;
- a second compaction of the result: it must be idle (nothing written).

With --read-rate, the read phase of every iteration is paced: the bench prints the achieved
read rate against the limit (issue 8).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.format.object import build_object  # noqa: E402
from walctl.sizes import format_size, parse_size  # noqa: E402
from walctl.store import manifest as mf  # noqa: E402
from walctl.store import open_store  # noqa: E402


def tree_rss_bytes(root: int) -> int:
    """Sum of RSS over ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class PeakSampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))
            time.sleep(0.05)


def generate(store, ssos: int, streams: int, size: int, zipf: float, batch_bytes: int, seed: int = 7) -> int:
    """``ssos`` SSOs of ~size/ssos bytes; stream s gets a share ~ 1/(s+1)^zipf of every SSO
    (a stream whose share is below one batch is in an SSO with that probability)."""
    rng = random.Random(seed)
    weights = [1 / (s + 1) ** zipf for s in range(streams)]
    scale = size / ssos / sum(weights) / batch_bytes  # batches per SSO per unit of weight
    next_offset = [0] * streams
    objects, total = [], 0
    payload = os.urandom(batch_bytes * 4)
    for i in range(ssos):
        parts = []
        for sid in range(streams):
            expected = weights[sid] * scale
            n = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
            if not n:
                continue
            batches = []
            for _ in range(n):
                at = rng.randrange(0, 3 * batch_bytes)
                batches.append(StreamRecordBatch(sid, 0, next_offset[sid], 1, payload[at:at + batch_bytes]))
                next_offset[sid] += 1
            parts.append((sid, batches))
        built = build_object(parts, block_size=1 << 20)
        object_id = i + 1
        key = mf.object_key(object_id)
        store.put_large(key, built.data)
        total += len(built.data)
        objects.append({"id": object_id, "key": key, "kind": "SSO", "size": len(built.data), "order_id": object_id,
                        "data_time": time.time(),
                        "ranges": [{"stream_id": s, "start": r.start_offset, "end": r.end_offset, "bytes": r.size_bytes}
                                   for s, r in sorted(built.ranges.items())]})

    def install(m):
        m.objects = objects
        m.next_object_id = ssos + 1
        m.streams = {s: mf.StreamSpan(0, e) for s, e in enumerate(next_offset) if e}

    mf.commit(store, install, command="bench generate")
    return total


def floor_seconds(store, directory: str) -> float:
    """`cat INPUTS | dd of=OUT bs=1M conv=fsync`: the inputs' bytes read and written once, synced."""
    import subprocess

    paths = [store._path(o["key"]) for o in mf.load_latest(store).objects]
    out = os.path.join(directory, "floor.out")
    started = time.monotonic()
    subprocess.run(f"cat {' '.join(paths)} | dd of={out} bs=1M conv=fsync status=none", shell=True, check=True)
    seconds = time.monotonic() - started
    os.unlink(out)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ssos", type=int, default=160)
    p.add_argument("--streams", type=int, default=80)
    p.add_argument("--size", default="800MB", help="total bytes of the input SSOs")
    p.add_argument("--zipf", type=float, default=1.2, help="exponent of the streams' size distribution")
    p.add_argument("--batch-bytes", type=int, default=65536)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--memory-limit", default="64MiB")
    p.add_argument("--split-size", default="16MiB")
    p.add_argument("--store", default=None, help="directory for the store (default: a temporary one, removed)")
    p.add_argument("--read-rate", type=float, default=None, help="MiB/s read across all tasks (default: unlimited)")
    args = p.parse_args()
    from walctl.spark.compact import compact
    from walctl.spark.job import spark_session, stop_session

    directory = args.store or tempfile.mkdtemp(prefix="walctl-compact-bench-")
    store = open_store(directory)
    limit = parse_size(args.memory_limit)
    t0 = time.monotonic()
    total = generate(store, args.ssos, args.streams, parse_size(args.size), args.zipf, args.batch_bytes)
    print(f"generated {args.ssos} SSOs, {args.streams} streams (zipf {args.zipf}), {format_size(total)} "
          f"in {time.monotonic() - t0:.1f} s", flush=True)
    floor = floor_seconds(store, directory)
    print(f"floor: cat | dd conv=fsync of the same {format_size(total)}: {floor:.1f} s "
          f"({total / (1 << 20) / floor:.1f} MiB/s)", flush=True)
    sampler = PeakSampler()
    sampler.start()
    t_start = time.monotonic()
    spark = spark_session(args.master)
    startup = time.monotonic() - t_start
    t1 = time.monotonic()
    rate = args.read_rate * (1 << 20) if args.read_rate else None
    result = compact(store, directory, spark=spark, memory_limit=limit, split_size=parse_size(args.split_size),
                     read_rate_bps=rate)
    seconds = time.monotonic() - t1
    sampler.stop.set()
    sampler.join()
    again = compact(store, directory, spark=spark, memory_limit=limit, split_size=parse_size(args.split_size))
    stop_session(spark)
    out = result.to_json()
    kinds = [m["kind"] for m in result.made]
    print(f"compacted {out['objects_in']} objects -> {out['objects_out']} ({kinds.count('SO')} SO + "
          f"{kinds.count('SSO')} SSO) in {seconds:.1f} s + {startup:.1f} s of Spark start "
          f"({out['iterations']} iterations, memory limit {args.memory_limit}, master {args.master})")
    print(f"read {format_size(out['bytes_read'])}, wrote {format_size(out['bytes_written'])}: "
          f"{out['bytes_read'] / (1 << 20) / seconds:.1f} MiB/s; against the floor: {floor / seconds:.2f}x "
          f"(job), {floor / (seconds + startup):.2f}x (with Spark's start); target >= 0.5x")
    print(f"requests: {out['data_gets']} data GETs (plan's minimum {result.plan.gets}) + {result.index_gets} "
          f"index reads, {out['puts']} PUTs")
    print(f"peak memory (driver + JVM + workers): {format_size(sampler.peak)}; limit + 400 MiB = "
          f"{format_size(limit + (400 << 20))}")
    print(f"second compaction: {'idle' if again.idle else 'NOT IDLE'} ({again.plan.reason})")
    if rate:
        made = [t for t in result.tasks if t.get("read_seconds")]
        per_task = [m["bytes_read"] / m["read_seconds"] / (1 << 20) for m in made]
        starts = [m["read_started"] for m in made]
        ends = [m["read_started"] + m["read_seconds"] for m in made]
        span = (max(ends) - min(starts)) if starts else seconds
        total_read = sum(m["bytes_read"] for m in made)
        print(f"read rate limit {args.read_rate:g} MiB/s: all tasks together {total_read / (1 << 20) / span:.3f} MiB/s "
              f"({total_read / (1 << 20) / span / args.read_rate:.3f} of the limit, over {span:.1f} s of reads); "
              f"per task {[round(x, 3) for x in per_task]} MiB/s")
    if args.store is None:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
