#!/usr/bin/env python3
"""walctl bench against fio on the same device, same parameters, alternating runs.

    python bench/fio_compare.py --loop [--size 1GiB]          # a loop device (--direct-io=on), detached after
    python bench/fio_compare.py --file /var/tmp/walctl.img    # a regular file (created, removed after)
    python bench/fio_compare.py --device /dev/nvme1n1         # an existing device (destroys its data)
        [--duration 5] [--rounds 3] [--iodepth 4] [--fio-ioengine libaio] [--json] [--only iops]
        [--compare OTHER_TREE]

Each round runs, with the order of the pair flipped every other round so drift and
warm-up hit both sides alike:
  - 4 KiB random writes at --iodepth: fio vs walctl bench --mode iops;
  - 256 KiB and 1 MiB sequential writes: fio vs walctl bench --mode bandwidth --block-size;
  - walctl bench --mode wal with 64 KiB records (payload MiB/s against fio's 256 KiB
    sequential MiB/s) and with 1 KiB records (device MiB/s against fio at the same average
    write size with fresh contents: group commit fills a 1 KiB WAL's blocks; its blocks/s
    against fio's 4 KiB IOPS, the target before group commit, stays as an informational row);
  - fio at the 64 KiB WAL's average write size (the soft limit fits 3 such records in a
    block), with its default buffers and with fresh contents per write (--refill_buffers,
    as a WAL's blocks are): three informational rows split the WAL's gap into its write
    size, the cost of fresh data on this device, and the WAL path itself.
The 4 KiB pair also gives each side's CPU time per write (user + system, µs): fio's from its
own report (usr_cpu, sys_cpu over the job's runtime), walctl's from its report
(cpu_us_per_write: os.times around the run), or for a tree without it (--compare with an older
checkout) from the rusage of its process less that of a 1 ms run of the same command.
On a shared machine, compare these more than the IOPS. --compare OTHER_TREE runs that tree's
walctl bench (python -m walctl from there, e.g. main's checkout) in the same round, in
turn with this tree's and fio, and prints its rows as "(other)".
fio uses the same durability as walctl: --direct=1 --sync=dsync (O_DIRECT | O_DSYNC,
each write on stable media when it completes). Ratios are walctl / fio within a
round; the table shows their median and spread (min..max) over the rounds.

Needs fio (Debian: apt-get install -y fio) and, for --loop, root and losetup.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO_ROOT)

from walctl.sizes import parse_size  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
ZERO_CHUNK = 8 * MiB

# (name, what walctl reports / what fio reports, target ratio)
TARGETS = (
    ("iops 4KiB randwrite", "IOPS / IOPS", 0.95),
    ("bandwidth 256KiB seq", "MiB/s / MiB/s", 0.95),
    ("bandwidth 1MiB seq", "MiB/s / MiB/s", 0.95),
    ("wal 64KiB records", "payload MiB/s / fio 256KiB MiB/s", 0.80),
    ("cpu/write 4KiB", "CPU µs per write, fio / walctl", 0.95),
    # Group commit (append --batch-interval) fills a 1 KiB WAL's blocks (~255 KiB under load), so
    # its writes are compared with fio's at the same write size, fresh contents, as the 64 KiB WAL's.
    ("wal 1KiB/fio fresh", "WAL device MiB/s / fio fresh", 0.50),
)
# Not targets: where the 64 KiB WAL's gap comes from (its write size, or the path itself); and
# the 1 KiB WAL's blocks/s against 4 KiB IOPS (its target before group commit, when each block
# held a few records: it drops as blocks grow, while records/s rise; shown for comparison).
INFO = (
    ("(other) iops 4KiB", "--compare tree's IOPS / fio IOPS"),
    ("(other) cpu/write 4KiB", "CPU µs per write, fio / other"),
    ("fio WAL size/256KiB", "fio MiB/s, WAL write size/256K"),
    ("fio fresh/default", "--refill_buffers/default buffers"),
    ("wal 64KiB/fio fresh", "WAL device MiB/s / fio fresh"),
    ("wal 1KiB records", "blocks/s / fio 4KiB IOPS"),
)


def fio(target: str, *, rw: str, block_size: int, iodepth: int, duration: float, size: int, engine: str,
        fresh: bool = False) -> dict:
    """One fio job; returns iops, mib_per_s and p99 latency (µs) of its writes.

    fresh: new random contents for every write (--refill_buffers), as a WAL's blocks have;
    by default fio rewrites its buffers, only slightly scrambled.
    """
    cmd = ["fio", "--name=walctl-compare", f"--filename={target}", f"--rw={rw}", f"--bs={block_size}",
           f"--iodepth={iodepth}", f"--ioengine={engine}", "--direct=1", "--sync=dsync", "--time_based",
           f"--runtime={duration}", f"--size={size}", "--randrepeat=0", "--output-format=json",
           *(["--refill_buffers"] if fresh else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"fio failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    text = proc.stdout[proc.stdout.index("{"):]  # fio may print notes before the JSON
    job = json.loads(text)["jobs"][0]
    write = job["write"]
    clat = write.get("clat_ns", {}).get("percentile", {})
    cpu_s = (job.get("usr_cpu", 0) + job.get("sys_cpu", 0)) / 100 * job.get("job_runtime", 0) / 1000
    return {"iops": write["iops"], "mib_per_s": write["bw_bytes"] / MiB,
            "latency_us_p99": clat.get("99.000000", 0) / 1000,
            "cpu_us_per_write": cpu_s / write["total_ios"] * 1e6 if write.get("total_ios") else 0.0}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def walctl(target: str, *args: str, root: str = REPO_ROOT) -> dict:
    """One ``walctl bench --json`` run of the tree at ``root``; returns the object of its only mode,
    with "cpu_s": the process's user + system CPU seconds."""
    cmd = [sys.executable, "-m", "walctl", "bench", target, "--json", *args]
    before = _children_cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root)
    cpu_s = _children_cpu_s() - before
    if proc.returncode != 0:
        raise SystemExit(f"walctl bench failed ({proc.returncode}): {proc.stderr.strip()}")
    modes = json.loads(proc.stdout)["modes"]
    (result,) = modes.values()
    result["cpu_s"] = cpu_s
    return result


def walctl_iops(target: str, common: list[str], root: str) -> dict:
    """The 4 KiB random-write run of the tree at ``root``, with "cpu_us_per_write": its own figure, or
    its CPU time less that of a 1 ms run (startup, opening, exit) over the writes in between."""
    full = walctl(target, "--mode", "iops", *common, root=root)
    if "cpu_us_per_write" in full:  # measured by walctl itself around the run (os.times)
        return full
    base = walctl(target, "--mode", "iops", *common[2:], "--duration", "0.001", root=root)
    writes = full["writes"] - base["writes"]
    full["cpu_us_per_write"] = (full["cpu_s"] - base["cpu_s"]) / writes * 1e6 if writes > 0 else 0.0
    return full


def one_round(target: str, opts, size: int, flip: bool) -> dict[str, tuple[float, float]]:
    """Returns {target name: (walctl value, fio value)} for one round."""
    common = ["--duration", str(opts.duration), "--iodepth", str(opts.iodepth), "--size", str(size)]
    fio_args = {"iodepth": opts.iodepth, "duration": opts.duration, "size": size, "engine": opts.fio_ioengine}

    def pair(fio_call, walctl_call):
        if flip:
            w = walctl_call()
            f = fio_call()
        else:
            f = fio_call()
            w = walctl_call()
        return w, f

    out = {}
    runs = [("fio", lambda: fio(target, rw="randwrite", block_size=4 * KiB, **fio_args)),
            ("walctl", lambda: walctl_iops(target, common, REPO_ROOT))]
    if opts.compare:
        runs.append(("other", lambda: walctl_iops(target, common, opts.compare)))
    got = {name: call() for name, call in (reversed(runs) if flip else runs)}
    w, f4k = got["walctl"], got["fio"]
    out["iops 4KiB randwrite"] = (w["iops"], f4k["iops"])
    # Lower is better: the ratio is fio's CPU per write over walctl's (>= 1: walctl spends less).
    out["cpu/write 4KiB"] = (w["cpu_us_per_write"], f4k["cpu_us_per_write"])
    if opts.compare:
        out["(other) iops 4KiB"] = (got["other"]["iops"], f4k["iops"])
        out["(other) cpu/write 4KiB"] = (got["other"]["cpu_us_per_write"], f4k["cpu_us_per_write"])
    if opts.only == "iops":
        return out
    w, f256 = pair(lambda: fio(target, rw="write", block_size=256 * KiB, **fio_args),
                   lambda: walctl(target, "--mode", "bandwidth", "--block-size", "256KiB", *common))
    out["bandwidth 256KiB seq"] = (w["mib_per_s"], f256["mib_per_s"])
    w, f1m = pair(lambda: fio(target, rw="write", block_size=MiB, **fio_args),
                  lambda: walctl(target, "--mode", "bandwidth", "--block-size", "1MiB", *common))
    out["bandwidth 1MiB seq"] = (w["mib_per_s"], f1m["mib_per_s"])
    w = walctl(target, "--mode", "wal", "--record-size", "64KiB", *common)
    out["wal 64KiB records"] = (w["mib_per_s"], f256["mib_per_s"], w)
    # The soft limit makes the WAL's writes smaller than 256 KiB (3 records of 64 KiB + headers):
    # fio at the WAL's own average write size tells how much of the gap the format explains.
    wal_bs = max(4 * KiB, w["avg_block_bytes"] // (4 * KiB) * (4 * KiB))
    fwal = fio(target, rw="write", block_size=wal_bs, **fio_args)
    out["fio WAL size/256KiB"] = (fwal["mib_per_s"], f256["mib_per_s"])
    # Fresh contents per write cost some devices (dedup, compression): a WAL's blocks are fresh.
    ffresh = fio(target, rw="write", block_size=wal_bs, fresh=True, **fio_args)
    out["fio fresh/default"] = (ffresh["mib_per_s"], fwal["mib_per_s"])
    out["wal 64KiB/fio fresh"] = (w["device_mib_per_s"], ffresh["mib_per_s"])
    w = walctl(target, "--mode", "wal", "--record-size", "1KiB", *common)
    out["wal 1KiB records"] = (w["iops"], f4k["iops"], w)
    f1k = fio(target, rw="write", block_size=max(4 * KiB, w["avg_block_bytes"] // (4 * KiB) * (4 * KiB)), fresh=True,
              **fio_args)
    out["wal 1KiB/fio fresh"] = (w["device_mib_per_s"], f1k["mib_per_s"])
    return out


def _ratios(name: str, pairs) -> list[float]:
    """walctl / fio, but fio / walctl for CPU per write (lower is better there)."""
    if "cpu/write" in name:
        return [p[1] / p[0] for p in pairs if p[0]]
    return [p[0] / p[1] for p in pairs if p[1]]


def report(rounds: list[dict], opts, where: str) -> dict:
    print(f"\n{where}: {len(rounds)} rounds of {opts.duration:g} s per run, iodepth {opts.iodepth}, "
          f"fio --ioengine={opts.fio_ioengine} --direct=1 --sync=dsync")
    header = f"{'measure':<22} {'unit':<34} {'walctl':>10} {'fio':>10} {'ratio':>6} {'spread':>13} {'target':>6}"
    print(header)
    print("-" * len(header))
    summary = {}
    for name, unit, goal in TARGETS:
        if name not in rounds[0]:
            continue
        pairs = [r[name] for r in rounds]
        ratios = _ratios(name, pairs)
        med = statistics.median(ratios)
        line = (f"{name:<22} {unit:<34} {statistics.median(p[0] for p in pairs):>10.1f} "
                f"{statistics.median(p[1] for p in pairs):>10.1f} {med:>6.2f} "
                f"{min(ratios):>6.2f}..{max(ratios):<5.2f} {goal:>6.2f} {'ok' if med >= goal else 'MISSED'}")
        print(line)
        summary[name] = {"walctl": [p[0] for p in pairs], "fio": [p[1] for p in pairs], "ratios": ratios,
                         "ratio_median": med, "target": goal}
    for name, unit in INFO:
        if name not in rounds[0]:
            continue
        pairs = [r[name] for r in rounds]
        ratios = _ratios(name, pairs)
        print(f"{name:<22} {unit:<34} {statistics.median(p[0] for p in pairs):>10.1f} "
              f"{statistics.median(p[1] for p in pairs):>10.1f} {statistics.median(ratios):>6.2f} "
              f"{min(ratios):>6.2f}..{max(ratios):<5.2f} {'(info)':>6}")
        summary[name] = {"a": [p[0] for p in pairs], "b": [p[1] for p in pairs], "ratios": ratios}
    print(f"  iops pairs (walctl, fio): {[tuple(round(v) for v in r['iops 4KiB randwrite']) for r in rounds]}")
    print(f"  CPU µs per write (walctl, fio): "
          f"{[tuple(round(v, 2) for v in r['cpu/write 4KiB']) for r in rounds]}")
    if "(other) iops 4KiB" in rounds[0]:
        print(f"  --compare tree {opts.compare}: iops {[round(r['(other) iops 4KiB'][0]) for r in rounds]}, "
              f"CPU µs per write {[round(r['(other) cpu/write 4KiB'][0], 2) for r in rounds]}")
    for name in ("wal 64KiB records", "wal 1KiB records") if opts.only is None else ():
        details = [r[name][2] for r in rounds]
        print(f"  {name}: records/s {[round(d['records_per_s']) for d in details]}, payload MiB/s "
              f"{[round(d['mib_per_s'], 1) for d in details]}, blocks/s {[round(d['iops']) for d in details]}, "
              f"avg block {[d['avg_block_bytes'] // KiB for d in details]} KiB, "
              f"p99 µs {[round(d['latency_us_p99']) for d in details]}")
    return summary


def prepare_backing(path: str, size: int) -> None:
    """A fully written file, so neither tool measures block allocation."""
    with open(path, "wb") as f:
        zeros = bytes(ZERO_CHUNK)
        left = size
        while left > 0:
            left -= f.write(zeros[:min(ZERO_CHUNK, left)])
        f.flush()
        os.fsync(f.fileno())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--loop", action="store_true", help="attach a loop device (--direct-io=on) and detach it after")
    where.add_argument("--file", help="a regular file (created of --size, removed after)")
    where.add_argument("--device", help="an existing device or file (its data is destroyed)")
    parser.add_argument("--size", default="1GiB", help="bytes used (and of a created file or loop backing)")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iodepth", type=int, default=4)
    parser.add_argument("--fio-ioengine", default="libaio", help="fio's --ioengine (libaio, io_uring, ...)")
    parser.add_argument("--compare", metavar="OTHER_TREE", help="another walctl checkout (its C extensions "
                        "built): its 4 KiB random-write run in the same rounds, printed as '(other)' rows")
    parser.add_argument("--json", help="also write the raw numbers to this file")
    parser.add_argument("--only", choices=("iops",), help="run only this pair (iops: 4 KiB random writes), "
                        "for many cheap rounds on a busy machine")
    opts = parser.parse_args()
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (apt-get install -y fio)")
    size = parse_size(opts.size)
    # SIGTERM runs the finally blocks too: a loop device is never left attached.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmpdir = tempfile.mkdtemp(prefix="walctl-fio-")
    loop = None
    created = None
    try:
        if opts.loop:
            backing = os.path.join(tmpdir, "loop-backing.img")
            prepare_backing(backing, size)
            proc = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", backing],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"losetup failed: {proc.stderr.strip()}")
            loop = target = proc.stdout.strip()
            where_name = f"loop device {target} (--direct-io=on, backing file {backing})"
        elif opts.file:
            target = opts.file
            if os.path.lexists(target):
                raise SystemExit(f"{target} exists: give a new path (it is created and removed)")
            prepare_backing(target, size)
            created = target
            where_name = f"file {target}"
        else:
            target = opts.device
            where_name = f"device {target}"
        rounds = []
        for i in range(opts.rounds):
            print(f"round {i + 1}/{opts.rounds} ...", file=sys.stderr, flush=True)
            rounds.append(one_round(target, opts, size, flip=bool(i % 2)))
        summary = report(rounds, opts, where_name)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump({"target": where_name, "duration_s": opts.duration, "iodepth": opts.iodepth,
                           "fio_ioengine": opts.fio_ioengine, "results": summary}, f, indent=1)
    finally:
        if loop is not None:
            subprocess.run(["losetup", "-d", loop], check=False)
        if created is not None and os.path.exists(created):
            os.unlink(created)
        shutil.rmtree(tmpdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
