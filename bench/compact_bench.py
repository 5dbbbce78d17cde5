#!/usr/bin/env python3
"""Compaction benchmark (issue 20): a store of many small SSOs holding streams of Zipf-like sizes,
compacted by the real Spark job; speed against the disk's floor, peak memory, objects, requests.

    python bench/compact_bench.py [--ssos 160] [--streams 80] [--size 800MB] [--zipf 1.2]
        [--batch-bytes 65536] [--master local[2]] [--tasks N] [--no-compare] [--rounds N] [--memory-limit 64MiB]
        [--split-size 16MiB] [--store DIR] [--read-rate MIB/S]
    python bench/compact_bench.py --level so [so_compact_bench options]   # SO compaction (issue 17)
    python bench/compact_bench.py --level all                              # both, one after the other

Prints, in one run:
- the floor: the input objects' bytes read from the disk (evicted from the page cache first,
  as the compaction reads them with O_DIRECT) and written once, `cat INPUTS | dd of=OUT bs=1M
  conv=fsync`, and the compaction's speed as a fraction of it (the run, then with Spark's and
  its Python workers' start; target >= 0.5 on ~800 MB);
- peak memory: RSS summed over the whole process tree (this driver, the Spark JVM and its
  Python workers; a page two processes share is counted in each) with its parts, sampled
  every 100 ms from /proc, and PSS (each page once) every 500 ms, against memory limit + 400 MiB;
- objects in and out (kinds), data GETs against the plan's count and against one per run of
  adjacent blocks (a plan without memory limit), PUTs;
- a second compaction of the result: it must be idle (nothing written);
- the same layout compacted again (fresh copies, the JVM warm) by one task and by two at
  once, --rounds times, alternating which goes first: how much faster two were (median and
  range of the rounds' ratios; target > 1), with each run's workers' start and end and CPU.

With --read-rate, the read phase of every iteration is paced: the bench prints the achieved
read rate against the limit (issue 8).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from walctl.format.batch import StreamRecordBatch  # noqa: E402
from walctl.format.object import build_object  # noqa: E402
from walctl.sizes import format_size, parse_size  # noqa: E402
from walctl.store import manifest as mf  # noqa: E402
from walctl.store import open_store  # noqa: E402
from _common import evict  # noqa: E402


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from /proc/PID/task/TID/children: no /proc scan)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


def memory_of(pid: int, pss: bool) -> tuple[int, int, str]:
    """(RSS, PSS or 0, name) of a process; PSS counts a page shared by n processes as 1/n of it.
    RSS comes from statm (cheap); PSS from smaps_rollup, which walks the process's page tables
    under its memory lock, so it is read only when asked."""
    rss = pss_bytes = 0
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        if pss:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss_bytes = int(line.split()[1]) << 10
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return 0, 0, "gone"
    text = b" ".join(argv).decode(errors="replace")
    worker = any(w in text for w in ("pyspark", "walctl.spark.worker", "walctl.spark.daemon"))
    name = ("JVM" if "java" in argv[0].decode(errors="replace") else "python worker" if worker
            else "driver" if pid == os.getpid() else os.path.basename(argv[0].decode(errors="replace")))
    return rss, pss_bytes, name


class PeakSampler(threading.Thread):
    """Every 100 ms: RSS summed over this process and its descendants (the Spark JVM and its
    Python workers), PSS every 500 ms; keeps the peaks and, at the RSS peak, the sum per kind
    of process."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = self.peak_pss = 0
        self.parts: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self):
        rounds = 0
        while not self.stop.is_set():
            parts: dict[str, int] = {}
            total = pss_total = 0
            rounds += 1
            for pid in descendants(os.getpid()):
                rss, pss, name = memory_of(pid, rounds % 5 == 0)
                total += rss
                pss_total += pss
                parts[name] = parts.get(name, 0) + rss
            if total > self.peak:
                self.peak, self.parts = total, parts
            self.peak_pss = max(self.peak_pss, pss_total)
            time.sleep(0.1)

    def describe(self) -> str:
        return ", ".join(f"{name} {format_size(n)}" for name, n in sorted(self.parts.items()) if n)


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
        m.objects = [mf.LiveObject.from_json(o) for o in objects]
        m.next_object_id = ssos + 1
        m.streams = {s: mf.StreamSpan(0, e) for s, e in enumerate(next_offset) if e}

    mf.commit(store, install, command="bench generate")
    return total


def input_paths(store) -> list[str]:
    return [store._path(o.key) for o in mf.load_latest(store).objects]


def floor_seconds(store, directory: str) -> float:
    """`cat INPUTS | dd of=OUT bs=1M conv=fsync`: the inputs' bytes read (from the disk, not the
    page cache) and written once, synced."""
    import subprocess

    paths = input_paths(store)
    evict(paths)
    out = os.path.join(directory, "floor.out")
    started = time.monotonic()
    subprocess.run(f"cat {' '.join(paths)} | dd of={out} bs=1M conv=fsync status=none", shell=True, check=True)
    seconds = time.monotonic() - started
    os.unlink(out)
    return seconds


def run(store, directory: str, spark, args, tasks: int) -> tuple[object, float]:
    from walctl.spark.compact import compact

    evict(input_paths(store))
    rate = args.read_rate * (1 << 20) if args.read_rate else None
    run.wall = time.time()  # tasks report wall-clock times: where the run's time went
    started = time.monotonic()
    result = compact(store, directory, spark=spark, memory_limit=parse_size(args.memory_limit),
                     split_size=parse_size(args.split_size), read_rate_bps=rate, tasks=tasks)
    return result, time.monotonic() - started


def task_spans(result, wall: float) -> str:
    """Per Python worker: its start, its task's entry and its last iteration's end, seconds into the run."""
    workers: dict = {}
    for t in result.tasks:
        workers.setdefault(t.get("worker_started"), []).append(t)
    parts = []
    for started, ts in sorted(workers.items(), key=lambda kv: kv[0] or 0):
        begun = f"started {started - wall:.2f}, " if started else ""
        parts.append(f"{begun}in task {ts[0]['task_entered'] - wall:.2f}, done {max(t['finished'] for t in ts) - wall:.2f}")
    return "workers: " + "; ".join(parts)


def main() -> None:
    # --level so|all: SO compaction's bench (server-side copy: speed against a plain copy, RSS,
    # requests, bytes through the compactor) is bench/so_compact_bench.py; run it from here too, so
    # one command prints both levels' figures.
    level = "sso"
    if "--level" in sys.argv:
        at = sys.argv.index("--level")
        level = sys.argv[at + 1] if at + 1 < len(sys.argv) else ""
        del sys.argv[at:at + 2]
        if level not in ("sso", "so", "all"):
            raise SystemExit("--level: sso, so or all")
    if level in ("so", "all"):
        import runpy

        so_argv = sys.argv[1:] if level == "so" else []
        saved, sys.argv = sys.argv, [os.path.join(os.path.dirname(os.path.abspath(__file__)), "so_compact_bench.py"),
                                     *so_argv]
        try:
            print("== SO compaction (bench/so_compact_bench.py) ==", flush=True)
            runpy.run_path(sys.argv[0], run_name="__main__")
        finally:
            sys.argv = saved
        if level == "so":
            return
        print("== SSO compaction (Spark) ==", flush=True)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ssos", type=int, default=160)
    p.add_argument("--streams", type=int, default=80)
    p.add_argument("--size", default="800MB", help="total bytes of the input SSOs")
    p.add_argument("--zipf", type=float, default=1.2, help="exponent of the streams' size distribution")
    p.add_argument("--batch-bytes", type=int, default=65536)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--tasks", type=int, default=None, help="tasks at once (default 1, compact's on a local master)")
    p.add_argument("--no-compare", action="store_true", help="skip the 1-task against 2-task runs")
    p.add_argument("--rounds", type=int, default=1, help="rounds of the 1-task against 2-task runs (median, range)")
    p.add_argument("--memory-limit", default="64MiB")
    p.add_argument("--split-size", default="16MiB")
    p.add_argument("--store", default=None, help="directory for the stores (default: a temporary one, removed)")
    p.add_argument("--read-rate", type=float, default=None, help="MiB/s read across all tasks (default: unlimited)")
    args = p.parse_args()
    from walctl.spark.compact import compact
    from walctl.spark.session import spark_session, stop_session

    top = args.store or tempfile.mkdtemp(prefix="walctl-compact-bench-")
    directory = os.path.join(top, "a")
    store = open_store(directory)
    limit = parse_size(args.memory_limit)
    tasks = args.tasks or 1  # compact's default on a local master
    t0 = time.monotonic()
    total = generate(store, args.ssos, args.streams, parse_size(args.size), args.zipf, args.batch_bytes)
    print(f"generated {args.ssos} SSOs, {args.streams} streams (zipf {args.zipf}), {format_size(total)} "
          f"in {time.monotonic() - t0:.1f} s", flush=True)
    floor = floor_seconds(store, directory)
    print(f"floor: cat | dd conv=fsync of the same {format_size(total)}, read from the disk: {floor:.1f} s "
          f"({total / (1 << 20) / floor:.1f} MiB/s)", flush=True)
    minimum = compact(store, directory, memory_limit=1 << 60, split_size=parse_size(args.split_size), tasks=1,
                      dry_run=True).plan.gets  # one GET per run of adjacent blocks (<= 16 MiB), memory aside
    sampler = PeakSampler()
    sampler.start()
    t_start = time.monotonic()
    spark = spark_session(args.master)
    startup = time.monotonic() - t_start
    print(f"Spark start {startup:.1f} s", flush=True)
    result, seconds = run(store, directory, spark, args, tasks)
    sampler.stop.set()
    sampler.join()
    again = compact(store, directory, spark=spark, memory_limit=limit, split_size=parse_size(args.split_size))
    out = result.to_json()
    kinds = [m["kind"] for m in result.made]
    print(f"compacted {out['objects_in']} objects -> {out['objects_out']} ({kinds.count('SO')} SO + "
          f"{kinds.count('SSO')} SSO) in {seconds:.1f} s ({out['iterations']} iterations, {result.tasks_at_once} "
          f"tasks at once, memory limit {args.memory_limit}, master {args.master})")
    whole = seconds + startup
    print(f"read {format_size(out['bytes_read'])}, wrote {format_size(out['bytes_written'])}: "
          f"{out['bytes_read'] / (1 << 20) / seconds:.1f} MiB/s; against the floor: {floor / seconds:.2f}x "
          f"(the run: walctl shipped, Python workers started, as every CLI run does), {floor / whole:.2f}x "
          f"(with Spark's start); target >= 0.5x")
    if result.tasks:
        first = min(t["read_started"] for t in result.tasks) - run.wall
        spawned = [t["worker_started"] for t in result.tasks if t.get("worker_started")]
        if spawned:
            entered = min(t["task_entered"] for t in result.tasks) - run.wall
            print(f"before the first GET: {min(spawned) - run.wall:.1f} s until the first Python worker was "
                  f"started (indexes, plan, fence, shipping, scheduling), {entered - (min(spawned) - run.wall):.1f} s "
                  f"until its task began (interpreter, pyspark and walctl imports), {first - entered:.1f} s more")
        last = max(t["finished"] for t in result.tasks) - run.wall
        reading = sum(t["read_seconds"] for t in result.tasks)
        busy = sum(t["seconds"] for t in result.tasks)
        print(f"of the run's {seconds:.1f} s: {first:.1f} s before the first task read (indexes, plan, fence, "
              f"shipping, Python workers' start), {last - first:.1f} s of tasks (iterations: {reading:.1f} s "
              f"from each one's first GET to its last, {busy:.1f} s at the writer: "
              f"the reads run ahead of the writes, so the two overlap), {seconds - last:.1f} s after (the "
              f"driver's last parts, commit)")
    if result.tasks and result.tasks[0].get("worker_cpu") is not None:
        workers = {t["worker_started"]: t for t in result.tasks}
        print(f"Python workers' CPU: {sum(t['worker_cpu'] for t in workers.values()):.2f} s "
              f"({sum(t['entry_cpu'] for t in workers.values()):.2f} s of it before their task began), "
              f"against {seconds:.2f} s of run: the rest of the time they waited for the disk (or a core)")
    print(f"requests: {out['data_gets']} data GETs (the plan's {result.plan.gets}; one per run of adjacent "
          f"blocks, memory aside: {minimum}) + {result.index_gets} index reads, {out['puts']} PUTs")
    print(f"peak memory (driver + JVM + Python workers): RSS {format_size(sampler.peak)} ({sampler.describe()}); "
          f"PSS {format_size(sampler.peak_pss)}; target: limit + 400 MiB = {format_size(limit + (400 << 20))}")
    print(f"second compaction: {'idle' if again.idle else 'NOT IDLE'} ({again.plan.reason})", flush=True)
    if not args.no_compare:
        # Fresh copies of the layout, on the now warm JVM: one task, then two, alternating which
        # goes first from round to round; the ratio per round (the machine's load drifts slowly).
        times: dict[int, list[float]] = {1: [], 2: []}
        ratios = []
        for k in range(args.rounds):
            for n in ((1, 2) if k % 2 == 0 else (2, 1)):
                path = os.path.join(top, f"r{n}")
                generate(open_store(path), args.ssos, args.streams, parse_size(args.size), args.zipf,
                         args.batch_bytes)
                done, seconds_n = run(open_store(path), path, spark, args, n)
                times[n].append(seconds_n)
                cpu = {t["worker_started"]: t.get("worker_cpu", 0.0) for t in done.tasks}
                print(f"round {k + 1}: the same layout again, {n} task(s): {seconds_n:.2f} s "
                      f"({done.to_json()['data_gets']} data GETs; tasks' CPU {sum(cpu.values()):.2f} s; "
                      f"{task_spans(done, run.wall)}; load {os.getloadavg()[0]:.1f})", flush=True)
                shutil.rmtree(path)
            ratios.append(times[1][-1] / times[2][-1])
        med = statistics.median
        print(f"2 tasks at once are {med(ratios):.2f}x as fast as 1 (median of {len(ratios)} rounds, range "
              f"{min(ratios):.2f}-{max(ratios):.2f}; 1 task {med(times[1]):.2f} s, 2 tasks {med(times[2]):.2f} s; "
              f"target > 1)")
    stop_session(spark)
    if args.read_rate:
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
        shutil.rmtree(top)


if __name__ == "__main__":
    main()
