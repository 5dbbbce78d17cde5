#!/usr/bin/env python3
"""Where the test suite's CPU goes: sums what WALCTL_TEST_CPU=PREFIX recorded (tests/suitecpu.py).

    WALCTL_TEST_CPU=/tmp/cpu bash scripts/test.sh
    python3 scripts/suite_cpu.py /tmp/cpu [--top 30] [--by file|dir|test|fixture|phase]

A test's CPU: its pytest process's (user+sys, setup to teardown), the children it waited for, and
its live descendants' growth. Prints each worker's start-up and collection, its total and what its tests hold,
then the top consumers for each --by (all of them when none is given).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json


def load(prefix: str):
    tests, procs, collections_ = [], [], []
    for path in sorted(glob.glob(f"{prefix}.*.jsonl")):
        worker = path[len(prefix) + 1:-len(".jsonl")]
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                rec["worker"] = worker
                {"test": tests, "process": procs, "collection": collections_}[rec["kind"]].append(rec)
    return tests, procs, collections_


def cpu(rec: dict) -> float:
    return rec["self"] + rec["children"] + rec.get("descendants", 0.0)


def key_of(by: str, rec: dict) -> list[str]:
    nodeid = rec["id"]
    path = nodeid.split("::")[0]
    if by == "test":
        return [nodeid.split("[")[0]]
    if by == "file":
        return [path]
    if by == "dir":
        return [path.rsplit("/", 1)[0]]
    if by == "fixture":
        return rec["fixtures"] or ["(none)"]
    raise ValueError(by)


def table(title: str, rows: dict, total: float, top: int) -> None:
    print(f"\n== {title} (top {top}) ==")
    print(f"{'cpu s':>9} {'%':>5} {'wall s':>8} {'n':>5}  name")
    for name, (c, w, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{c:9.1f} {100 * c / total if total else 0:5.1f} {w:8.1f} {n:5d}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", action="append", choices=["dir", "file", "test", "fixture", "phase"])
    args = ap.parse_args()
    tests, procs, colls = load(args.prefix)
    total_tests = sum(cpu(r) for r in tests)
    print(f"tests: {len(tests)}, their CPU {total_tests:.1f} s (self "
          f"{sum(r['self'] for r in tests):.1f}, waited children {sum(r['children'] for r in tests):.1f}, "
          f"live descendants {sum(r.get('descendants', 0) for r in tests):.1f}), "
          f"wall {sum(r['wall'] for r in tests):.1f} s")
    for c in colls:
        print(f"  {c['worker']}: start-up and collection {c['self'] + c['children']:.1f} s CPU, {c['wall']:.1f} s wall")
    for p in procs:
        mine = [r for r in tests if r["worker"] == p["worker"]]
        held = sum(r["self"] + r["children"] for r in mine)
        print(f"  {p['worker']}: process {p['self'] + p['children']:.1f} s CPU (self {p['self']:.1f}, children "
              f"{p['children']:.1f}), {p['wall']:.1f} s wall; tests hold {held:.1f}; recorder "
              f"{p['overhead']:.1f}")
    for by in args.by or ["dir", "file", "test", "fixture", "phase"]:
        if by == "phase":
            rows: dict = collections.defaultdict(lambda: [0.0, 0.0, 0])
            for r in tests:
                for name, (w, s, c) in r["phases"].items():
                    row = rows[name]
                    row[0] += s + c
                    row[1] += w
                    row[2] += 1
            table("by phase (pytest process + waited children)", rows, total_tests, args.top)
            continue
        everywhere = set.intersection(*(set(r["fixtures"]) for r in tests)) if tests else set()
        rows = collections.defaultdict(lambda: [0.0, 0.0, 0])
        for r in tests:
            for k in key_of(by, r):
                if by == "fixture" and k in everywhere:
                    continue
                row = rows[k]
                row[0] += cpu(r)
                row[1] += r["wall"]
                row[2] += 1
        table(f"by {by}" + (" (a test counts in each; those of every test left out)" if by == "fixture" else ""),
              rows, total_tests, args.top)


if __name__ == "__main__":
    main()
