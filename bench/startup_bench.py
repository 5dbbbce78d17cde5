#!/usr/bin/env python3
"""Start-up benchmark: short walctl commands on a tiny WAL and store, against ``python -c pass``.

    python bench/startup_bench.py [--runs 20] [--dir DIR] [--compare-root DIR]

Each command is a child process (``python -m walctl ...``, bytecode cached in the work directory
as an installed walctl's is); the commands and the ``pass`` reference run interleaved, ``--runs``
rounds. Printed per command: the median wall time and the median CPU seconds (user + sys, from
wait4: the figure a loaded machine blurs least), each also as the excess over ``python -c pass``
(what walctl itself adds to an interpreter's start and end). Two more references: a Python process
that imports only the standard modules walctl's readers use (dataclasses, json, threading ...), and
the same with typer: what any reader built on them pays before its first line of its own. --compare-root DIR also runs each
command with the walctl source tree in DIR (e.g. a `git archive` of an older commit, its extension
built), interleaved in the same rounds: its rows, marked "(compared)", are before/after under one load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The standard modules walctl's readers import (recover, status: python -X importtime), none of walctl.
READER_STDLIB = "import dataclasses, typing, enum, json, struct, threading, queue, signal, mmap, zlib"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="interleaved rounds (default 20)")
    p.add_argument("--dir", default=None, help="where the tiny WAL and store go (default: a temp dir, removed)")
    p.add_argument("--compare-root", default=None, help="another walctl source tree, timed interleaved with this one")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="walctl-startup-bench-", dir=args.dir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (ROOT, env.get("PYTHONPATH", "")) if x)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    wal, store = os.path.join(work, "wal.img"), os.path.join(work, "store")
    walctl = [sys.executable, "-m", "walctl"]
    try:
        for setup in (["init", wal, "--capacity", "4MiB"], ["append", wal, "-s", "1", "a", "b", "c"],
                      ["upload", wal, "--store", store]):
            subprocess.run([*walctl, *setup], env=env, check=True, capture_output=True)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            # What any reader written in Python with these modules pays before its own code (no walctl):
            "python: a reader's stdlib": [sys.executable, "-c", READER_STDLIB],
            "python: + typer": [sys.executable, "-c", READER_STDLIB + ", typer"],
            "--version": [*walctl, "--version"],
            "status --json": [*walctl, "status", wal, "--json"],
            "recover --stats --json": [*walctl, "recover", wal, "--stats", "--json"],
            "read --json": [*walctl, "read", "--store", store, "-s", "1", "--json"],
            "--help": [*walctl, "--help"],
        }
        envs = {name: env for name in commands}
        if args.compare_root:
            other = dict(env, PYTHONPATH=os.pathsep.join(
                x for x in (os.path.abspath(args.compare_root), os.environ.get("PYTHONPATH", "")) if x))
            for name, argv in [(n, a) for n, a in commands.items() if not n.startswith("python")]:
                commands[name + " (compared)"] = argv
                envs[name + " (compared)"] = other
        walls: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(1 + args.runs):  # the first round fills the bytecode cache: not counted
            for name, argv in commands.items():
                started = time.perf_counter()
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=envs[name],
                                        cwd=work)
                _, status, usage = os.wait4(proc.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"{name} exited {os.waitstatus_to_exitcode(status)}")
                walls[name].append(time.perf_counter() - started)
                cpus[name].append(usage.ru_utime + usage.ru_stime)
        print(f"{args.runs} interleaved rounds; load {os.getloadavg()[0]:.1f}; ms, medians")
        base_wall = statistics.median(walls["python -c pass"][1:]) * 1000
        base_cpu = statistics.median(cpus["python -c pass"][1:]) * 1000
        print(f"{'':35} {'wall':>7} {'cpu':>7} {'wall - pass':>12} {'cpu - pass':>11}")
        for name in commands:
            wall = statistics.median(walls[name][1:]) * 1000
            cpu = statistics.median(cpus[name][1:]) * 1000
            print(f"{name:35} {wall:7.1f} {cpu:7.1f} {wall - base_wall:12.1f} {cpu - base_cpu:11.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
