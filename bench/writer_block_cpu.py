#!/usr/bin/env python3
"""The WAL writer's Python per block (issue 31): thread CPU of the appender and of the AIO reaper
per block, in-process, no CLI, no pipe, no acknowledgement output.

    python bench/writer_block_cpu.py [--tree DIR] [--data 384MiB] [--record 64KiB] [--call 196KiB]
        [--runs 5] [--dir /var/tmp] [--inline] [--calls [--top N]]

Inside the CLI's signal handlers (as `walctl append` runs), a WalWriter on a prewritten WAL file (O_DIRECT, native AIO, iodepth 4) gets length-prefixed
records through ``append_frames`` (``--call`` bytes of frames a call, as feed_frames' reads give
them), then ``drain``; ``on_frames`` only counts. Printed per run and as the median of ``--runs``:
  app   the appender thread's CPU per block, less frame_pack's C (copy, CRC, headers): the writer's
        Python on the appender side (with the completions it polls);
  reap  the AIO reaper thread's CPU per block (its Python, plus io_submit of the next write);
  all   the process's user+sys CPU per block (also the kernel's side of the writes).
``--inline``: no device and no reaper: the writer's write queue completes each write on the appender's
next poll, in its thread, without writing it (``app`` is then all the writer's Python per block, both
sides; the least noisy CPU figure here, as nothing waits). ``--calls``: one run more, with a profiler counting the function calls per block (Python frames, and C
functions called from Python) over all threads: a figure the machine's load does not move (CPU times
on a shared machine do, by 2x); with ``--top N``, also the N functions (Python and C) called most per
block. ``--tree`` runs another checkout's walctl (e.g. a build of main) for an A/B in one shell.
"""

from __future__ import annotations

import argparse
import resource
import os
import statistics
import sys
import tempfile
import threading
import time

KiB, MiB = 1 << 10, 1 << 20


def parse(text: str) -> int:
    units = {"KiB": KiB, "MiB": MiB, "GiB": 1 << 30, "B": 1}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * scale
    return int(text)


class InlineQueue:
    """A write queue that writes nothing: each write completes on the next ``poll`` (or flush), in the
    polling thread (``--inline``)."""

    engine = "inline"

    def __init__(self):
        self.pending = []

    def submit(self, offset, buf, done, length=None):
        self.pending.append(done)

    def flush_submits(self):
        pass

    def poll(self):
        pending, self.pending = self.pending, []
        for done in pending:
            done(None, 0)
        return len(pending)

    def wait(self, timeout_s=None, *, held=False):
        return self.poll()

    def close(self):
        self.poll()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--data", default="384MiB")
    ap.add_argument("--record", default="64KiB")
    ap.add_argument("--call", default="196KiB")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--inline", action="store_true", help="no device, no reaper: writes complete on the next poll")
    ap.add_argument("--calls", action="store_true", help="also count function calls per block (one more run)")
    ap.add_argument("--top", type=int, default=0, metavar="N",
                    help="with --calls: also print the N functions called most per block")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.tree))
    import walctl
    from walctl.device import open_device
    from walctl.format import framepack
    from walctl.format.checkpoint import Checkpoint
    from walctl.format.header import HEADERS_SIZE
    from walctl.wal.headers import read_headers
    from walctl.wal.init import init_wal
    from walctl.wal.writer import WalWriter
    from walctl.wal.writer_blocks import FrameSpec

    data_bytes, record, call = parse(args.data), parse(args.record), parse(args.call)
    one = len(bytes(4)) + record
    frames = (record.to_bytes(4, "big") + bytes(range(256)) * (record // 256) + bytes(record % 256))
    assert len(frames) == one
    per_call = max(1, call // one)
    chunk = frames * per_call
    calls = data_bytes // len(chunk)
    ring = data_bytes + 64 * MiB
    spec = FrameSpec(False, 1, 0, 1 << 30)
    rows = []
    from walctl.cli.boundary import signals_interrupt
    with signals_interrupt(), tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "w.img")
        init_wal(path, ring + HEADERS_SIZE, prewrite=True)
        counting = [False]
        counts = {"py": 0, "c": 0}
        by_function: dict[str, int] = {}

        def profile(frame, event, arg):
            if counting[0]:
                if event == "call":
                    counts["py"] += 1
                    if args.top:
                        code = frame.f_code
                        name = f"{os.path.basename(code.co_filename)}:{code.co_name}"
                        by_function[name] = by_function.get(name, 0) + 1
                elif event == "c_call":
                    counts["c"] += 1
                    if args.top:
                        name = f"C {getattr(arg, '__qualname__', None) or getattr(arg, '__name__', arg)}"
                        by_function[name] = by_function.get(name, 0) + 1

        if args.calls:
            threading.setprofile(profile)  # threads started from here on (the writer's reaper and timer)
            sys.setprofile(profile)
        for run in range(args.runs + args.calls):
            profiled = args.calls and run == args.runs
            init_wal(path, ring + HEADERS_SIZE, force=True, discard_unuploaded=True)
            dev = open_device(path, writable=True)
            state = read_headers(dev)
            w = WalWriter(dev, state, 0, checkpoint=Checkpoint(0, complete=True))
            if args.inline:
                w._queue.close()
                w._queue = InlineQueue()
            elif w.io_engine != "aio":
                sys.exit(f"the writer uses {w.io_engine}, not aio: run on a filesystem with O_DIRECT")
            acked = [0]

            def on_frames(item, acked=acked):
                acked[0] += item.count

            w.on_frames = on_frames
            reaper = getattr(w._queue, "_reaper", None) or threading.current_thread()  # --inline: none
            reaper_clock = time.pthread_getcpuclockid(reaper.ident) if not args.inline else time.CLOCK_THREAD_CPUTIME_ID
            base = 0
            def ticks(tid):
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                return int(fields[11]), int(fields[12])  # utime, stime (clock ticks)

            main_tid = threading.get_native_id()
            ru0, rs0 = ticks(reaper.native_id)
            au0, as0 = ticks(main_tid)
            r0, a0, c0, p0 = time.clock_gettime_ns(reaper_clock), time.thread_time_ns(), framepack.cpu_ns(), \
                resource.getrusage(resource.RUSAGE_SELF)
            counting[0] = profiled
            t0 = time.perf_counter()
            for _ in range(calls):
                pos = 0
                while pos < len(chunk):
                    count, pos, stop, _ = w.append_frames(chunk, pos, len(chunk), spec, base, 1 << 40)
                    base += count
            if args.inline:  # (drain would wait for completions nobody polls)
                w.submit_open_block()
                w._queue.poll()
            w.drain()
            t1 = time.perf_counter()
            r1, a1, c1, p1 = time.clock_gettime_ns(reaper_clock), time.thread_time_ns(), framepack.cpu_ns(), \
                resource.getrusage(resource.RUSAGE_SELF)
            counting[0] = False
            ru1, rs1 = ticks(reaper.native_id)
            au1, as1 = ticks(main_tid)
            blocks = w.blocks_written
            w.close()
            assert acked[0] == base == calls * per_call, (acked[0], base)
            app = (a1 - a0 - (c1 - c0)) / blocks / 1e3
            reap = (r1 - r0) / blocks / 1e3 if not args.inline else 0.0
            total = ((p1.ru_utime - p0.ru_utime) + (p1.ru_stime - p0.ru_stime)) / blocks * 1e6
            if profiled:
                sys.setprofile(None)
                print(f"calls per block (all threads): {counts['py'] / blocks:.1f} Python, "
                      f"{counts['c'] / blocks:.1f} C")
                for name, n in sorted(by_function.items(), key=lambda kv: -kv[1])[:args.top]:
                    print(f"  {n / blocks:6.2f}  {name}")
                continue
            rows.append((app, reap, total))
            print(f"run {run + 1}: {blocks} blocks of {w.bytes_written // blocks // KiB} KiB, "
                  f"app {app:.1f} us, reap {reap:.1f} us, all {total:.1f} us a block, "
                  f"{data_bytes / MiB / (t1 - t0):.0f} MiB/s; user/sys ticks: app {au1 - au0}/{as1 - as0}, "
                  f"reap {ru1 - ru0}/{rs1 - rs0}", flush=True)
    if not rows:
        return
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"{os.path.dirname(walctl.__file__)}: median of {len(rows)}: app {med[0]:.1f} us, "
          f"reap {med[1]:.1f} us, app+reap {med[0] + med[1]:.1f} us, all {med[2]:.1f} us a block")


if __name__ == "__main__":
    main()
