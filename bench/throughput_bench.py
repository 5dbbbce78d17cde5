#!/usr/bin/env python3
"""append, recover and upload throughput against fio / dd / cp in the same run (issue 19).

    python bench/throughput_bench.py [--dir /var/tmp] [--loop]
        [--record-sizes 100,1KiB,4KiB,64KiB] [--wal-sizes 64MiB,256MiB,1GiB] [--json]
        [--phases append,recover,upload] [--rounds N] [--compare-root DIR]

For each WAL size and record size, in this order on the same target:
  1. append: `walctl append --input FILE --framing length-prefixed` of records of that size
     until about that much payload is in the WAL (records/s, payload MiB/s, device MiB/s);
  2. recover: `walctl recover --stats` (records/s, MiB/s of the log's bytes), against
     `dd iflag=direct bs=1M` of the same bytes of the device, --rounds times interleaved (medians,
     and the range of the rounds' ratios); plus the start-up (`recover --stats` of an empty WAL
     of the same capacity, timed in the same rounds) and a "scan only" ratio: dd against the
     median recover minus the median start-up (the end-to-end ratio stays the headline), and the
     ceiling dd / (start-up + the faster of dd and that scan): the end-to-end ratio of a process
     with that start-up whose scan went at that pace (on a disk that serves no more to larger or
     parallel reads, fio at 1-16 reads in flight reads no faster than dd here). 0.8x needs a
     start-up of at most dd / 4: 0.01 s for a 64 MiB log, where dd takes ~0.04 s, and the
     interpreter alone takes ~0.02 s, so no Python process reaches it there;
  3. upload: `walctl upload --store DIR` into a local directory store (records/s, payload
     MiB/s), against `cp` of the input file (the same payload bytes) into that directory
     followed by `sync` of the copy (upload fsyncs its objects too); the input was just written,
     so that cp reads it from the page cache (the headline "cp" column and ratio). Each round
     also copies it once more after dropping it from the page cache (bench/_common.evict): a cp
     that reads from the disk, as upload reads the WAL with O_DIRECT, printed on a line below
     ("cold_ratio" in the JSON), and a plain copy of the log's bytes from the WAL into that
     directory, O_DIRECT reads and writes of 4 MiB and an fsync, timed inside the bench (no
     process start); with cp / (those two starts + the faster of the cold cp and that copy): what
     a Python process whose reads and writes went at that pace would reach;
  4. fio: sequential writes at the average block size append submitted (bytes written /
     blocks written), with append's durability (--direct=1 --sync=dsync), --iodepth 4 as
     append's default, the same number of bytes: the reference for append.
Ratios are walctl / reference (higher is better for walctl): append device MiB/s / fio MiB/s,
recover seconds of dd / seconds of walctl, upload payload MiB/s / cp MiB/s. Peak RSS is each
walctl process's VmHWM (from /proc, read by a wrapper inside the process).

--phases leaves out recover and the fio reference of append (append always runs: it builds the
WAL). --rounds N times upload (and its cp) and recover (and its dd) N times, interleaved, and
reports the medians (the JSON also has each round's times and the range of the ratios). Upload's
"CPU s" is the median user + system CPU time of the upload process: on a shared machine, its work
when wall times wander with the others' load.
--compare-root DIR also times upload and recover with the walctl source tree in DIR (e.g. a `git
archive` of an older commit, with its built extension), interleaved with this tree's on the same
WAL, and prints its row below ("before" and "after" under the same load).

The target is a file in --dir (O_DIRECT where the filesystem has it), or with --loop (root) a
loop device with --direct-io=on over that file, detached after. Times are wall-clock on a
shared machine: compare the ratios of one run, not absolute figures across runs.
Needs fio and dd (Debian: apt-get install -y fio).

At the end the bench prints each of issue 19's targets it measured, with a verdict: "met", "not
met", or "out of reach" where even the ceiling above (of any Python process, or of one on
walctl's stack) stays under the goal (with --json also one {"targets": [...]} line).
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

REPO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import evict  # noqa: E402
from walctl.sizes import parse_size  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
RECORD_OVERHEAD = 24 + 33 + 4  # record header + StreamRecordBatch header + the input's length prefix

# Runs walctl's CLI, then writes its own peak RSS (VmHWM, /proc) to the fd given in argv[1].
_WRAPPER = """
import atexit, os, sys
fd = int(sys.argv.pop(1))
def _report():
    with open("/proc/self/status") as f:
        os.write(fd, next(line for line in f if line.startswith("VmHWM:")).encode())
atexit.register(_report)
from walctl.cli import main
sys.argv = ["walctl"] + sys.argv[1:]
main()
"""


def walctl(*args: str, root: str = REPO_ROOT) -> tuple[float, int, list[str]]:
    """Run walctl (from the source tree ``root``); returns (seconds, peak RSS bytes, stdout lines). Exits on failure."""
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "PYTHONPATH": root}
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        # -P: the working directory is not put first on sys.path, or a walctl tree there (the bench run
        # from a checkout) would shadow ``root`` and --compare-root would time the same code twice.
        proc = subprocess.run([sys.executable, "-P", "-c", _WRAPPER, str(write_fd), *args], stdout=out,
                              stderr=subprocess.PIPE, pass_fds=(write_fd,), env=env)
        seconds = time.monotonic() - started
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as f:
            hwm = f.read().decode()
        out.seek(0)
        lines = out.read().decode().splitlines()
    if proc.returncode != 0:
        raise SystemExit(f"walctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode().strip()}")
    return seconds, int(hwm.split()[1]) * KiB, lines


# The standard modules walctl's readers import (python -X importtime), and typer: none of walctl.
STACK_IMPORTS = "import dataclasses, typing, enum, json, struct, threading, queue, signal, mmap, zlib, typer"


def python_start() -> tuple[float, float]:
    """Seconds of (the bare interpreter, the interpreter importing typer and the standard modules
    walctl's readers use), started as walctl's children are (``-P``, its site and venv), nothing of
    walctl imported: floors no Python process (no CLI on walctl's stack) starts below."""
    return (timed([sys.executable, "-P", "-c", "pass"]), timed([sys.executable, "-P", "-c", STACK_IMPORTS]))


def timed(cmd: list[str]) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return time.monotonic() - started


def raw_copy(src: str, dst: str, nbytes: int, chunk: int = 4 * MiB) -> float:
    """Seconds of a plain copy of ``src``'s first ``nbytes`` (rounded up to ``chunk``) to a new file
    ``dst``, both sides O_DIRECT as upload's are, one read then one write at a time, fsync at the end;
    timed inside this process (no process start). ``dst`` is removed after."""
    import mmap

    buf = mmap.mmap(-1, chunk)
    nbytes = -(-nbytes // chunk) * chunk
    started = time.monotonic()
    r = os.open(src, os.O_RDONLY | os.O_DIRECT)
    w = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        done = 0
        while done < nbytes:
            n = os.preadv(r, [buf], done)
            if n <= 0:
                break
            os.pwritev(w, [memoryview(buf)[:n]], done)
            done += n
        os.fsync(w)
    finally:
        os.close(r)
        os.close(w)
        os.unlink(dst)
    return time.monotonic() - started


def fio_write(target: str, block_size: int, size: int) -> float:
    """MiB/s of fio's sequential O_DIRECT|O_DSYNC writes of ``size`` bytes at ``block_size``."""
    size = max(block_size, size - size % block_size)
    cmd = ["fio", "--name=walctl-throughput", f"--filename={target}", "--rw=write", f"--bs={block_size}",
           f"--size={size}", "--direct=1", "--sync=dsync", "--ioengine=libaio", "--iodepth=4",
           "--output-format=json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fio failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    job = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]["write"]
    return job["bw_bytes"] / MiB


def make_input(path: str, record: int, payload_bytes: int) -> int:
    """A length-prefixed input of ``record``-byte payloads totalling about ``payload_bytes``; returns records."""
    count = max(1, payload_bytes // record)
    prefix = record.to_bytes(4, "big")
    block = b"".join(prefix + os.urandom(record) for _ in range(min(count, max(1, (4 * MiB) // record))))
    per_block = len(block) // (4 + record)
    written = 0
    with open(path, "wb") as f:
        while written + per_block <= count:
            f.write(block)
            written += per_block
        rest = count - written
        f.write(block[:rest * (4 + record)])
    return count


def upload_rounds(target: str, store: str, inp: str, records: int, rounds: int, roots: list[str],
                  log_bytes: int) -> list[dict]:
    """Upload (--no-trim: the WAL stays) ``rounds`` times with each source tree, interleaved, each
    round with a cp of the input beside it; one dict per tree, with the medians."""
    import statistics

    import resource

    runs: dict[str, list[tuple[float, int, int, float]]] = {root: [] for root in roots}
    cps, cold_cps, raw_copies, pythons = [], [], [], []
    for _ in range(rounds):
        pythons.append(python_start())
        for root in roots:
            shutil.rmtree(store, ignore_errors=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            secs, rss, lines = walctl("upload", target, "--store", store, "--json", "--no-trim", root=root)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            s = json.loads(lines[-1])
            assert s["records"] == records, s
            runs[root].append((secs, rss, s["payload_bytes"], cpu))
        os.makedirs(store, exist_ok=True)
        copy = os.path.join(store, "cp-copy")
        cps.append(timed(["sh", "-c", f'cp "{inp}" "{copy}" && sync "{copy}"']))
        os.unlink(copy)
        # The same copy with its input read from the disk, as upload reads the WAL (O_DIRECT).
        evict(inp)
        cold_cps.append(timed(["sh", "-c", f'cp "{inp}" "{copy}" && sync "{copy}"']))
        os.unlink(copy)
        # The log's bytes (``log_bytes``: what append wrote), read and written as upload does.
        raw_copies.append(raw_copy(target, copy, log_bytes))
    cp_secs = statistics.median(cps)
    cp_mib_s = os.path.getsize(inp) / MiB / cp_secs
    cold_cp_mib_s = os.path.getsize(inp) / MiB / statistics.median(cold_cps)
    python_secs = statistics.median(p[0] for p in pythons)
    stack_secs = statistics.median(p[1] for p in pythons)
    # The copy a process could do at best here: the faster of the two that read from the disk.
    io_secs = min(statistics.median(cold_cps), statistics.median(raw_copies))
    out = []
    for root in roots:
        secs = statistics.median(r[0] for r in runs[root])
        payload = runs[root][0][2]
        ratios = sorted(payload / MiB / r[0] / cp_mib_s for r in runs[root])
        out.append({"root": root, "records_per_s": records / secs, "payload_mib_s": payload / MiB / secs,
                    "seconds": secs, "all_seconds": [round(r[0], 3) for r in runs[root]],
                    "ratio_range": [round(ratios[0], 3), round(ratios[-1], 3)],
                    "cpu_seconds": statistics.median(r[3] for r in runs[root]),
                    "all_cp_seconds": [round(c, 3) for c in cps],
                    "rss": max(r[1] for r in runs[root]), "cp_seconds": cp_secs, "cp_mib_s": cp_mib_s,
                    "ratio": payload / MiB / secs / cp_mib_s,
                    "cold_cp_seconds": statistics.median(cold_cps), "cold_cp_mib_s": cold_cp_mib_s,
                    "cold_ratio": payload / MiB / secs / cold_cp_mib_s, "python_seconds": python_secs,
                    "raw_copy_seconds": statistics.median(raw_copies),
                    "all_raw_copy_seconds": [round(c, 3) for c in raw_copies],
                    "io_seconds": io_secs, "python_ceiling_ratio": cp_secs / (python_secs + io_secs),
                    "stack_seconds": stack_secs, "stack_ceiling_ratio": cp_secs / (stack_secs + io_secs)})
    return out


def recover_rounds(workdir: str, target: str, capacity: int, records: int, rounds: int,
                   roots: list[str]) -> list[dict]:
    """``walctl recover --stats --json`` of the WAL (with each source tree in ``roots``) against
    ``dd iflag=direct bs=1M`` of the same bytes, and the same recover of an empty WAL of the same
    capacity (a file in ``workdir``: the process's start-up, open and header read, no log),
    ``rounds`` times interleaved; one dict per tree, with the medians.

    The headline ratio is end to end (dd seconds / recover seconds). "scan only" subtracts the
    median start-up from the median recover: what the scan itself costs against dd (a process
    start that dd does not pay is most of a small WAL's time)."""
    import statistics

    empty = os.path.join(workdir, "empty.img")
    walctl("init", empty, "--capacity", str(capacity))
    try:
        runs: dict[str, list[tuple[float, int, float]]] = {root: [] for root in roots}
        dds, pythons = [], []
        log_bytes = 0
        for _ in range(rounds):
            pythons.append(python_start())
            for root in roots:
                start = walctl("recover", empty, "--stats", "--json", root=root)[0]
                secs, rss, lines = walctl("recover", target, "--stats", "--json", root=root)
                s = json.loads(lines[-1])
                assert s["records"] == records and s["findings"] == 0, s
                log_bytes = s["end_offset"] - s["start_offset"]
                runs[root].append((secs, rss, start))
            dds.append(timed(["dd", f"if={target}", "of=/dev/null", "bs=1M", "iflag=direct",
                              f"count={-(-(log_bytes + 8192) // MiB)}"]))
    finally:
        os.unlink(empty)
    dd_secs = statistics.median(dds)
    python_secs = statistics.median(p[0] for p in pythons)
    stack_secs = statistics.median(p[1] for p in pythons)
    out = []
    for root in roots:
        secs = statistics.median(r[0] for r in runs[root])
        start = statistics.median(r[2] for r in runs[root])
        ratios = [d / r[0] for d, r in zip(dds, runs[root])]
        scan = max(secs - start, 1e-6)
        out.append({"root": root, "records_per_s": records / secs, "mib_s": log_bytes / MiB / secs,
                    "seconds": secs, "rss": max(r[1] for r in runs[root]), "dd_seconds": dd_secs,
                    "dd_mib_s": log_bytes / MiB / dd_secs, "ratio": dd_secs / secs,
                    "ratio_range": (min(ratios), max(ratios)), "rounds": rounds,
                    "all_seconds": [round(r[0], 3) for r in runs[root]], "all_dd_seconds": [round(d, 3) for d in dds],
                    "startup_seconds": start, "all_startup_seconds": [round(r[2], 3) for r in runs[root]],
                    "scan_seconds": scan, "scan_only_ratio": dd_secs / scan,
                    "ceiling_ratio": dd_secs / (start + min(dd_secs, scan)), "python_seconds": python_secs,
                    "python_ceiling_ratio": dd_secs / (python_secs + min(dd_secs, scan)),
                    "stack_seconds": stack_secs, "stack_ceiling_ratio": dd_secs / (stack_secs + min(dd_secs, scan))})
    return out


def one_case(workdir: str, record: int, wal_size: int, use_loop: bool, phases: tuple[str, ...] = ("append",
             "recover", "upload"), rounds: int = 1, compare_root: str | None = None,
             append_only: bool = False) -> dict:
    inp = os.path.join(workdir, "input.bin")
    backing = os.path.join(workdir, "wal.img")
    store = os.path.join(workdir, "store")
    # The device has room for the payload with the headers and some block padding to spare.
    payload = int(wal_size * record / (record + RECORD_OVERHEAD))
    capacity = wal_size * 2 + 16 * MiB
    records = make_input(inp, record, payload)
    with open(backing, "wb") as f:
        f.truncate(capacity)  # sparse: not pre-written
    loop = None
    target = backing
    try:
        if use_loop:
            loop = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", backing], capture_output=True,
                                  text=True, check=True).stdout.strip()
            target = loop
        walctl("init", target, *([] if use_loop else ["--capacity", str(capacity)]))
        secs, rss, lines = walctl("append", target, "--stream", "1", "--input", inp, "--framing",
                                  "length-prefixed", "--json")
        s = json.loads(lines[-1])
        assert s["records"] == records, s
        append = {"records_per_s": records / secs, "payload_mib_s": s["payload_bytes"] / MiB / secs,
                  "device_mib_s": s["bytes_written"] / MiB / secs, "seconds": secs, "rss": rss,
                  "write_size": s["bytes_written"] // max(1, s["blocks_written"]),
                  "bytes_written": s["bytes_written"]}
        if append_only:
            return {"record_bytes": record, "wal_bytes": wal_size, "records": records, "append": append_vs_fio(
                append, target)}
        recover = upload = None
        compared = []
        recover_compared = []
        if "recover" in phases:
            roots = [REPO_ROOT] + ([compare_root] if compare_root else [])
            recover, *recover_compared = recover_rounds(workdir, target, capacity, records, rounds, roots)
        if "upload" in phases:
            roots = [REPO_ROOT] + ([compare_root] if compare_root else [])
            upload, *compared = upload_rounds(target, store, inp, records, rounds, roots, append["bytes_written"])
        if "append" in phases:
            append_vs_fio(append, target)
        return {"record_bytes": record, "wal_bytes": wal_size, "records": records, "append": append,
                "recover": recover, "recover_compared": recover_compared, "upload": upload, "upload_compared": compared}
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        for path in (inp, backing):
            if os.path.exists(path):
                os.unlink(path)
        shutil.rmtree(store, ignore_errors=True)


def append_vs_fio(append: dict, target: str) -> dict:
    """Add fio at the average block size append submitted (and the ratio) to ``append``'s result."""
    fio_mib_s = fio_write(target, max(4 * KiB, append["write_size"] - append["write_size"] % (4 * KiB)),
                          append["bytes_written"])
    append["fio_mib_s"] = fio_mib_s
    append["ratio"] = append["device_mib_s"] / fio_mib_s
    # records/s fio's rate would allow at append's bytes per record: the "0.8x fio" target
    append["fio_records_per_s"] = append["records_per_s"] / append["ratio"]
    return append


def size_text(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def print_header() -> None:
    print(f"{'WAL':>7} {'record':>7} | {'append rec/s':>12} {'MiB/s':>7} {'fio':>7} {'ratio':>5} {'RSS':>5} | "
          f"{'recover rec/s':>13} {'MiB/s':>7} {'dd':>7} {'ratio':>5} {'RSS':>5} | "
          f"{'upload rec/s':>12} {'MiB/s':>7} {'cp':>7} {'ratio':>5} {'RSS':>5} {'CPU s':>6}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/var/tmp", help="where the WAL file, input and store go")
    parser.add_argument("--loop", action="store_true", help="a loop device (--direct-io=on) over the WAL file")
    parser.add_argument("--record-sizes", default="100,1KiB,4KiB,64KiB", help="payload bytes per record")
    parser.add_argument("--wal-sizes", default="64MiB,256MiB,1GiB", help="bytes of log per case")
    parser.add_argument("--json", action="store_true", help="also print every result as one JSON line")
    parser.add_argument("--phases", default="append,recover,upload",
                        help="which to measure (append always runs: it builds the WAL; without 'append' no fio)")
    parser.add_argument("--rounds", type=int, default=1, help="uploads and recovers per case (interleaved; medians)")
    parser.add_argument("--compare-root", default=None,
                        help="another walctl source tree whose upload and recover are timed interleaved with this one's")
    parser.add_argument("--append-only", action="store_true", help="only append and its fio reference")
    opts = parser.parse_args()
    # Bytecode compiled once, as an installed package has it (with PYTHONDONTWRITEBYTECODE every
    # measured process would compile walctl's modules again, ~0.1-0.3 s each).
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO_ROOT, "walctl")], check=False)
    phases = tuple(p.strip() for p in opts.phases.split(","))
    for tool in ("fio", "dd", "cp", "sync") + (("losetup",) if opts.loop else ()):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install -y fio)")
    records = [parse_size(x) for x in opts.record_sizes.split(",")]
    wals = [parse_size(x) for x in opts.wal_sizes.split(",")]
    workdir = tempfile.mkdtemp(prefix="walctl-throughput-", dir=opts.dir)
    print(f"# target: {'loop device (--direct-io=on) over ' if opts.loop else ''}a file in {opts.dir}; "
          f"MiB/s: append = device bytes, recover = log bytes, upload = payload; RSS in MiB", flush=True)
    results = []
    try:
        for wal in wals:
            for record in records:
                if not results and not opts.append_only:
                    print_header()
                results.append(one_case(workdir, record, wal, opts.loop, phases, opts.rounds,
                                        opts.compare_root and os.path.abspath(opts.compare_root), opts.append_only))
                (print_append_row if opts.append_only else print_row)(results[-1])
                if opts.json:
                    print(json.dumps(results[-1]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    cells = target_cells(results)
    print_targets(cells)
    if opts.json:
        print(json.dumps({"targets": cells}), flush=True)
    return 0


# Issue 19's targets, by phase and record size: (what is measured, the goal).
APPEND_GOALS = {1 * KiB: 100_000, 100: 150_000}  # records/s (1 KiB: or 0.8x fio, whichever is lower)
RECOVER_GOALS = {64 * KiB: 0.8, 1 * KiB: 0.5}  # x dd
UPLOAD_GOALS = {64 * KiB: 0.5}  # x cp
UPLOAD_RSS_GOAL = 256 * MiB  # peak RSS at any WAL size (the issue names 1 GiB)


def _reach(ratio: float, goal: float, python: float, stack: float, walctl: float | None, what: str) -> str:
    """Why a ratio below its goal is (or is not) out of reach: the ceilings a process reaches when its
    own work goes at the reference's pace (``what``) and only its start-up is extra."""
    if ratio >= goal:
        return "met"
    if python < goal:
        return f"out of reach for any Python process: {python:.2f} at most ({what})"
    if stack < goal:
        return f"out of reach on walctl's stack (typer and a reader's stdlib): {stack:.2f} at most ({what})"
    if walctl is not None and walctl < goal:
        return f"not met: {walctl:.2f} at most with walctl's start-up ({what}); {stack:.2f} on its stack"
    return f"not met: {stack:.2f} at most on walctl's stack ({what})"


def target_cells(results: list[dict]) -> list[dict]:
    """Each of issue 19's targets that this run measured: the figure, the goal, and a verdict that tells
    "met", "not met" and "out of reach" apart. A ceiling is the ratio of a process whose reads (and
    writes) went at the reference's pace with only its start-up added (dd for recover, a cp reading its
    input from the disk for upload): measured start-ups of the bare interpreter, of one importing typer
    and a reader's standard modules, and of walctl itself (recover of an empty WAL)."""
    cells = []
    for r in results:
        rec, wal = r["record_bytes"], r["wal_bytes"]
        where = {"wal_bytes": wal, "record_bytes": rec}
        a = r["append"]
        if rec in APPEND_GOALS:
            goal = APPEND_GOALS[rec]
            if rec == 1 * KiB and "fio_records_per_s" in a:
                goal = min(goal, 0.8 * a["fio_records_per_s"])
            cells.append({"target": "append records/s", **where, "measured": round(a["records_per_s"]),
                          "goal": round(goal), "verdict": "met" if a["records_per_s"] >= goal else "not met"})
        rc = r.get("recover")
        if rc and rec in RECOVER_GOALS:
            goal = RECOVER_GOALS[rec]
            cells.append({"target": "recover --stats x dd", **where, "measured": round(rc["ratio"], 3), "goal": goal,
                          "range": [round(x, 3) for x in rc["ratio_range"]],
                          "verdict": _reach(rc["ratio"], goal, rc["python_ceiling_ratio"], rc["stack_ceiling_ratio"],
                                            rc["ceiling_ratio"], f"a scan at the faster of dd and this scan, "
                                            f"{min(rc['dd_seconds'], rc['scan_seconds']):.3f} s")})
        u = r.get("upload")
        if u and rec in UPLOAD_GOALS:
            goal = UPLOAD_GOALS[rec]
            cells.append({"target": "upload x cp", **where, "measured": round(u["ratio"], 3), "goal": goal,
                          "range": u["ratio_range"],
                          "verdict": _reach(u["ratio"], goal, u["python_ceiling_ratio"], u["stack_ceiling_ratio"],
                                            None, f"reading and writing at the pace of the faster of the "
                                            f"cold cp and the raw copy, {u['io_seconds']:.3f} s; cp "
                                            f"{u['cp_seconds']:.3f} s")})
        if u:
            cells.append({"target": "upload peak RSS MiB", **where, "measured": u["rss"] // MiB,
                          "goal": UPLOAD_RSS_GOAL // MiB, "verdict": "met" if u["rss"] < UPLOAD_RSS_GOAL else "not met"})
    return cells


def print_targets(cells: list[dict]) -> None:
    if not cells:
        return
    print("# issue 19's targets in this run (ceilings: see throughput_bench.target_cells)", flush=True)
    for c in cells:
        measured = f"{c['measured']:,}" if isinstance(c["measured"], int) else f"{c['measured']:.3f}"
        goal = f"{c['goal']:,}" if isinstance(c["goal"], int) else f"{c['goal']:.2f}"
        spread = f" (rounds {c['range'][0]:.2f}-{c['range'][1]:.2f})" if "range" in c else ""
        print(f"  {c['target']:<21} {size_text(c['wal_bytes']):>7} {size_text(c['record_bytes']):>7}: "
              f"{measured}{spread}, goal {'<' if 'RSS' in c['target'] else '>='} {goal}: {c['verdict']}", flush=True)


def print_append_row(r: dict) -> None:
    a = r["append"]
    print(f"{size_text(r['wal_bytes']):>7} {size_text(r['record_bytes']):>7} | append {a['records_per_s']:>9,.0f} "
          f"records/s in {a['seconds']:.3f} s, {a['device_mib_s']:.1f} MiB/s in {size_text(a['write_size'])} "
          f"writes; fio {a['fio_mib_s']:.1f} MiB/s = {a['fio_records_per_s']:,.0f} records/s; "
          f"ratio {a['ratio']:.2f}; RSS {a['rss'] // MiB} MiB", flush=True)


def print_row(r: dict) -> None:
    a, rc = r["append"], r["recover"]
    fio = (f"{a['fio_mib_s']:>7.1f} {a['ratio']:>5.2f}" if "fio_mib_s" in a else f"{'-':>7} {'-':>5}")
    rec = (f"{rc['records_per_s']:>13,.0f} {rc['mib_s']:>7.1f} {rc['dd_mib_s']:>7.1f} {rc['ratio']:>5.2f} "
           f"{rc['rss'] // MiB:>5}" if rc else f"{'-':>13} {'-':>7} {'-':>7} {'-':>5} {'-':>5}")
    lead = f"{size_text(r['wal_bytes']):>7} {size_text(r['record_bytes']):>7} | "
    ups = [r["upload"]] + r["upload_compared"] if r["upload"] else [None]
    for n, u in enumerate(ups):
        up = (f"{u['records_per_s']:>12,.0f} {u['payload_mib_s']:>7.1f} {u['cp_mib_s']:>7.1f} {u['ratio']:>5.2f} "
              f"{u['rss'] // MiB:>5} {u['cpu_seconds']:>6.2f}" if u else f"{'-':>12} {'-':>7} {'-':>7} {'-':>5} {'-':>5}")
        if n == 0:
            print(f"{lead}{a['records_per_s']:>12,.0f} {a['device_mib_s']:>7.1f} {fio} {a['rss'] // MiB:>5} | "
                  f"{rec} | {up}", flush=True)
        else:  # the compared tree's upload, same WAL, same rounds
            print(f"{'':>{len(lead) - 2}}| {'upload with ' + u['root']:<{len(rec) + 41}} | {up}", flush=True)
    for n, c in enumerate([rc] + r.get("recover_compared", []) if rc else []):
        lo, hi = c["ratio_range"]
        who = "recover" if n == 0 else f"recover with {c['root']}"
        print(f"{'':>{len(lead) - 2}}| {who}: median of {c['rounds']} interleaved rounds: walctl {c['seconds']:.3f} s "
              f"({c['records_per_s']:,.0f} records/s, RSS {c['rss'] // MiB} MiB), dd {c['dd_seconds']:.3f} s, "
              f"ratio {c['ratio']:.2f} (rounds {lo:.2f}-{hi:.2f}); start-up (recover --stats of an empty WAL) "
              f"{c['startup_seconds']:.3f} s; scan only (walctl minus start-up) {c['scan_seconds']:.3f} s, "
              f"ratio {c['scan_only_ratio']:.2f}; ceiling with a scan at the faster of dd and this scan: "
              f"dd / (start-up + that) {c['ceiling_ratio']:.2f} (0.8x needs a start-up <= dd / 4 = "
              f"{c['dd_seconds'] / 4:.3f} s); any Python process: dd / (its start + that) = "
              f"{c['python_ceiling_ratio']:.2f} at most (bare interpreter "
              f"{c['python_seconds']:.3f} s), {c['stack_ceiling_ratio']:.2f} importing typer and a reader's stdlib "
              f"({c['stack_seconds']:.3f} s, no walctl)", flush=True)
    for u in ups if r["upload"] else []:
        who = "upload" if u is r["upload"] else f"upload with {u['root']}"
        lo, hi = u["ratio_range"]
        print(f"{'':>{len(lead) - 2}}| {who}: median {u['seconds']:.3f} s (rounds {lo:.2f}-{hi:.2f} of cp); cp + sync "
              f"{u['cp_seconds']:.3f} s with its input in the page cache (the cp column), "
              f"{u['cold_cp_seconds']:.3f} s with its input read from the disk as upload reads the WAL: "
              f"ratio {u['cold_ratio']:.2f}; a plain O_DIRECT copy of the log's bytes (in the bench, no start) "
              f"{u['raw_copy_seconds']:.3f} s; a Python process whose I/O went at the faster of the two: "
              f"cp / (its start + that) = {u['python_ceiling_ratio']:.2f} (bare interpreter "
              f"{u['python_seconds']:.3f} s), {u['stack_ceiling_ratio']:.2f} importing typer and a reader's stdlib "
              f"({u['stack_seconds']:.3f} s, no walctl)",
              flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
