#!/usr/bin/env python3
"""Compaction benchmark: generate a store of many small SSOs and many streams, compact it
with the real Spark job, and print throughput, peak memory and request counts.

    python bench/compact_bench.py [--ssos 300] [--streams 3000] [--streams-per-sso 100]
        [--batch-bytes 2048] [--master local[2]] [--memory-limit 64MiB] [--store DIR] [--read-rate MIB/S]

With --read-rate, the read phase of every output object is paced (the limit is shared by
the tasks running at once): the bench prints the achieved read rate against the limit,
per task and for all tasks together (bytes read over the span from the first read to the
last), the figure for "throttle by bytes" (issue 8).

Peak memory is the largest resident set of the whole process tree (this driver, the
Spark JVM and its Python workers), sampled every 50 ms from /proc.
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


def generate(store, ssos: int, streams: int, per_sso: int, batch_bytes: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    next_offset = [0] * streams
    objects, total = [], 0
    for i in range(ssos):
        chosen = sorted(rng.sample(range(streams), per_sso))
        parts = []
        for sid in chosen:
            n = rng.randint(1, 3)
            batches = [StreamRecordBatch(sid, 0, next_offset[sid] + k, 1, os.urandom(batch_bytes)) for k in range(n)]
            next_offset[sid] += n
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
        m["objects"] = objects
        m["next_object_id"] = ssos + 1
        m["streams"] = {str(s): {"start": 0, "end": e} for s, e in enumerate(next_offset) if e}

    mf.commit(store, install, command="bench generate")
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ssos", type=int, default=300)
    p.add_argument("--streams", type=int, default=3000)
    p.add_argument("--streams-per-sso", type=int, default=100)
    p.add_argument("--batch-bytes", type=int, default=2048)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--memory-limit", default="64MiB")
    p.add_argument("--store", default=None, help="directory for the store (default: a temporary one, removed)")
    p.add_argument("--read-rate", type=float, default=None, help="MiB/s read across all tasks (default: unlimited)")
    args = p.parse_args()
    from walctl.spark.compact import compact
    from walctl.spark.job import spark_session

    directory = args.store or tempfile.mkdtemp(prefix="walctl-compact-bench-")
    store = open_store(directory)
    t0 = time.monotonic()
    total = generate(store, args.ssos, args.streams, args.streams_per_sso, args.batch_bytes)
    print(f"generated {args.ssos} SSOs, {args.streams} streams, {format_size(total)} in {time.monotonic() - t0:.1f} s",
          flush=True)
    spark = spark_session(args.master)
    sampler = PeakSampler()
    sampler.start()
    t1 = time.monotonic()
    rate = args.read_rate * (1 << 20) if args.read_rate else None
    result = compact(store, directory, spark=spark, memory_limit=parse_size(args.memory_limit), read_rate_bps=rate)
    seconds = time.monotonic() - t1
    sampler.stop.set()
    sampler.join()
    spark.stop()
    out = result.to_json()
    print(f"compacted {out['objects_in']} objects -> {out['objects_out']} in {seconds:.1f} s "
          f"({out['iterations']} iterations, memory limit {args.memory_limit})")
    print(f"read {format_size(out['bytes_read'])}, wrote {format_size(out['bytes_written'])}: "
          f"{out['bytes_read'] / (1 << 20) / seconds:.1f} MiB/s read, "
          f"{out['bytes_written'] / (1 << 20) / seconds:.1f} MiB/s written")
    print(f"requests: {out['gets']} GETs (index reads {result.index_gets}), {out['puts']} PUTs")
    print(f"peak memory (driver + JVM + workers): {format_size(sampler.peak)}")
    if rate:
        made = [m for m in result.made if m.get("read_seconds")]
        per_task = [m["bytes_read"] / m["read_seconds"] / (1 << 20) for m in made]
        starts = [m["read_started"] for m in made if "read_started" in m]
        ends = [m["read_started"] + m["read_seconds"] for m in made if "read_started" in m]
        span = (max(ends) - min(starts)) if starts else seconds
        total_read = sum(m["bytes_read"] for m in made)
        print(f"read rate limit {args.read_rate:g} MiB/s: all tasks together {total_read / (1 << 20) / span:.3f} MiB/s "
              f"({total_read / (1 << 20) / span / args.read_rate:.3f} of the limit, over {span:.1f} s of reads); "
              f"per task {[round(x, 3) for x in per_task]} MiB/s")
    if args.store is None:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
