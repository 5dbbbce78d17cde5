#!/usr/bin/env python3
"""`walctl append`'s CPU per GiB, two (or more) walctl trees alternating on one loop device (issue 31).

    python bench/append_cpu_ab.py TREE[,TREE...] [--record 64KiB] [--data 1GiB] [--pairs 4] [--piped]
        [--dir /var/tmp]

On a loop device (--direct-io=on) over a prewritten file (bench/append_bench.py's), each round runs
every tree once, in turn (the order reversed every other round): `walctl append DEV --stream 1
--input FILE --framing length-prefixed --json > /dev/shm/...` (``--piped``: `cat FILE | walctl
append ... --input -`), a fresh `walctl init --force` before each, under /usr/bin/time. It prints
each run's and, per tree, the median's: CPU seconds (user + system) per GiB of payload, MiB/s,
voluntary and involuntary context switches and minor page faults: figures of the process itself,
which the machine's load moves less than its wall time (a shared machine: compare the trees, not
the MiB/s across runs). A tree is a checkout with its C extension built (`python setup.py
build_ext --inplace`), e.g. `git worktree add --detach /tmp/base main`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import append_bench as ab  # noqa: E402  (bench/append_bench.py: the device, the input, walctl's command)

FIELDS = ("cpu_s_per_gib", "mib_per_s", "voluntary", "involuntary", "minor_faults")


def run(tree: str, dev: str, inp: str, data: int, piped: bool) -> dict:
    ab.init(dev, tree)
    args = ab.walctl_cmd("append", dev, "--stream", "1", "--input", "-" if piped else inp, "--framing",
                         "length-prefixed", "--json")
    cat = subprocess.Popen(["cat", inp], stdout=subprocess.PIPE) if piped else None
    with open(ab.ACKS, "wb") as acks:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %w %c %R", *args], cwd=tree, env=ab.WALCTL_ENV,
                              stdout=acks, stderr=subprocess.PIPE, text=True, stdin=cat.stdout if cat else None)
    if cat is not None:
        cat.stdout.close()
        cat.wait()
    if proc.returncode != 0:
        raise SystemExit(f"walctl append failed in {tree}: {proc.stderr.strip()[-2000:]}")
    wall, user, system, vol, invol, minflt = proc.stderr.strip().splitlines()[-1].split()
    gib = data / (1 << 30)
    return {"cpu_s_per_gib": (float(user) + float(system)) / gib, "mib_per_s": data / (1 << 20) / float(wall),
            "voluntary": int(vol), "involuntary": int(invol), "minor_faults": int(minflt)}


def line(tree: str, r: dict) -> str:
    return (f"{tree}: CPU {r['cpu_s_per_gib']:.3f} s/GiB, {r['mib_per_s']:.0f} MiB/s, context switches "
            f"{r['voluntary']:.0f} voluntary {r['involuntary']:.0f} involuntary, {r['minor_faults']:.0f} minor faults")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", help="walctl checkouts, comma-separated")
    parser.add_argument("--record", default="64KiB", help="payload bytes per record")
    parser.add_argument("--data", default="1GiB", help="payload bytes per run")
    parser.add_argument("--pairs", type=int, default=4, help="rounds (each runs every tree once)")
    parser.add_argument("--piped", action="store_true", help="cat FILE | walctl append ... --input -")
    parser.add_argument("--dir", default="/var/tmp", help="where the backing file and the input go")
    opts = parser.parse_args()
    trees = [os.path.abspath(t) for t in opts.trees.split(",")]
    if not os.path.exists("/usr/bin/time"):
        raise SystemExit("/usr/bin/time is not installed (apt-get install -y time)")
    record, data = ab.parse_size(opts.record), ab.parse_size(opts.data)
    rows: dict[str, list[dict]] = {t: [] for t in trees}
    with ab.bench_device(data + (512 << 20), opts.dir, "walctl-cpu-ab-") as (loop, tmpdir):
        for tree in trees:
            ab.warm_up(loop, tree)
        inp = os.path.join(tmpdir, "input.bin")
        ab.make_input(inp, record, data)
        for r in range(opts.pairs):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                rows[tree].append(run(tree, loop, inp, data, opts.piped))
                print(line(tree, rows[tree][-1]), flush=True)
    print(f"medians of {opts.pairs} ({opts.record} records, {'piped' if opts.piped else '--input FILE'}):")
    for tree in trees:
        print("  " + line(tree, {k: statistics.median(r[k] for r in rows[tree]) for k in FIELDS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
