"""Each test's CPU, opt-in: WALCTL_TEST_CPU=PREFIX writes one JSON line per test to
PREFIX.<worker>.jsonl (PREFIX.main.jsonl without xdist); scripts/suite_cpu.py sums them.

A line: the test's node id, its wall time and its CPU seconds (user+sys) for setup, call and
teardown in the pytest process (RUSAGE_SELF), in the children it waited for (RUSAGE_CHILDREN), and,
over the whole test, in its live descendants (a Spark session's JVM, a moto server's process: their
utime+stime+cutime+cstime in /proc, read before and after the test; a process that outlives the test
counts in each test it ran in). Off (the default), this module does nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

_PREFIX = os.environ.get("WALCTL_TEST_CPU")
_TICK = os.sysconf("SC_CLK_TCK")
# Taken now: a test that patches time.monotonic or resource.getrusage does not change the figures.
_clock = time.monotonic
_cpu = time.process_time
_getrusage = resource.getrusage


def _rusage() -> tuple[float, float]:
    s = _getrusage(resource.RUSAGE_SELF)
    c = _getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def _descendants_cpu() -> float:
    """CPU seconds of this process's live descendants (reaped ones are in RUSAGE_CHILDREN)."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        pid = int(name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / _TICK
    me = os.getpid()
    total = 0.0
    for pid in cpu:
        p = parent.get(pid)
        while p and p != me and p in parent:
            p = parent[p]
        if p == me and pid != me:
            total += cpu[pid]
    return total


def _process_start() -> float:
    """This process's start on the _clock (time.monotonic) scale: /proc/self/stat's starttime."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    started_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return _clock() - (uptime - started_ticks / _TICK)


class _Recorder:
    def __init__(self, path: str) -> None:
        self.out = open(path, "a", buffering=1)
        self.overhead = 0.0

    def write(self, record: dict) -> None:
        self.out.write(json.dumps(record) + "\n")


_recorder: _Recorder | None = None


def pytest_configure(config) -> None:
    global _recorder
    if not _PREFIX:
        return
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    if worker == "main" and config.getoption("numprocesses", None):
        return  # xdist's controller: its workers record (they take the variable from it)
    os.environ.pop("WALCTL_TEST_CPU")  # a pytest a test starts records nothing here
    _recorder = _Recorder(f"{_PREFIX}.{worker}.jsonl")
    config._suitecpu_start = (_clock(), *_rusage())


def pytest_collection_finish(session) -> None:
    if _recorder is None:
        return
    now = (_clock(), *_rusage())
    # Since the process started (its start-up, its plugins' imports and the collection): this plugin
    # may be registered only once collection is under way (tests/conftest.py found from a file's path).
    _recorder.write({"kind": "collection", "wall": now[0] - _process_start(), "self": now[1], "children": now[2]})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _recorder is None:
        yield
        return
    t0 = _cpu()
    desc0 = _descendants_cpu()
    item._suitecpu = {}
    w0, s0, c0 = _clock(), *_rusage()
    _recorder.overhead += _cpu() - t0
    yield
    w1, s1, c1 = _clock(), *_rusage()
    t0 = _cpu()
    desc1 = _descendants_cpu()
    record = {"kind": "test", "id": item.nodeid, "wall": w1 - w0, "self": s1 - s0, "children": c1 - c0,
              "descendants": max(0.0, desc1 - desc0), "phases": item._suitecpu,
              "fixtures": sorted(getattr(item, "fixturenames", ()))}
    _recorder.write(record)
    _recorder.overhead += _cpu() - t0


def _phase(name):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item, *args):
        if _recorder is None:
            yield
            return
        w0, s0, c0 = _clock(), *_rusage()
        yield
        w1, s1, c1 = _clock(), *_rusage()
        item._suitecpu[name] = [round(w1 - w0, 4), round(s1 - s0, 4), round(c1 - c0, 4)]
    return hook


pytest_runtest_setup = _phase("setup")
pytest_runtest_call = _phase("call")
pytest_runtest_teardown = _phase("teardown")


def pytest_unconfigure(config) -> None:
    global _recorder
    if _recorder is None:
        return
    start = config._suitecpu_start
    now = (_clock(), *_rusage())
    _recorder.write({"kind": "process", "wall": now[0] - start[0], "self": now[1], "children": now[2],
                     "overhead": _recorder.overhead,
                     "descendants_left": _descendants_cpu()})
    _recorder.out.close()
    _recorder = None
