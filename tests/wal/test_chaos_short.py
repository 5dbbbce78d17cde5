"""The short version of bench/chaos_soak.py (issue 27): a writer fed faster than the disk with
--upload-at, a cron upload, two `read --follow --wal` followers, SO compaction and gc, each
SIGKILLed at random, until the run has done a fixed amount of work; the oracle (the writers'
acknowledgements) finds every acknowledged record in the store exactly once and in each follower's
output exactly once, in order, with no finding and no hang. On a file WAL with a local store, and
on a loop device with the store on S3 over HTTP behind a proxy that drops every connection now and
then.

The run ends once it has done what the checks ask for (over 1000 records acknowledged, two writers
and a follower killed, an outage ridden out), not after a fixed time: on a loaded machine a run of
fixed length did less (one writer kill in 21 s at load 15) and failed; an idle machine gets there
in a few seconds. CAP_S bounds a run that never gets there (the checks then say what it lacked);
WALCTL_CHAOS_SECONDS makes every run last at least that long (a longer soak)."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import pathlib
import threading
import time

import pytest

from threadhelpers import wait_until
from walctl.device.locks import mark_trim

_SPEC = importlib.util.spec_from_file_location(
    "walctl_chaos", pathlib.Path(__file__).resolve().parents[2] / "bench" / "chaos_soak.py")
chaos = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(chaos)

MIN_SECONDS = float(os.environ.get("WALCTL_CHAOS_SECONDS", "0"))
CAP_S = 150.0  # a run that has not done its work by then stops, and its checks fail
OUTAGE_MAX_S = 2.0  # S3Service's outages last 1-2 s (chaos.Chaos.outages): the run ends after one


def _done(run, proxy, outage_seen: list[float]) -> bool:
    """What _check asks for is done (and the first outage is over)."""
    if not (len(run.acked) > 1000 and run.counts["writer_kills"] >= 2 and run.counts["follower_kills"] >= 1):
        return False
    if proxy is None:
        return True
    if proxy.outages and not outage_seen:
        outage_seen.append(time.monotonic())
    return bool(outage_seen) and time.monotonic() - outage_seen[0] >= OUTAGE_MAX_S


def _run(run, proxy=None) -> dict:
    """run.run(), stopped (as its timer would) once the work is done, or at CAP_S."""
    assert run.seconds == CAP_S
    ended = threading.Event()
    outage_seen: list[float] = []

    def watch() -> None:
        started = time.monotonic()
        while not ended.wait(0.1):
            if time.monotonic() - started >= MIN_SECONDS and _done(run, proxy, outage_seen):
                run.stop.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return run.run()
    finally:
        ended.set()
        watcher.join(timeout=5)


def _check(out: dict) -> None:
    assert not out["problems"], out["problems"]
    assert out["records_acked"] > 1000 and out["writer_kills"] >= 2 and out["follower_kills"] >= 1, out
    assert out["store_records"] >= out["records_acked"], out


@pytest.mark.slow
def test_chaos_file_wal_local_store(tmp_path):
    run = chaos.Chaos(str(tmp_path), device=None, store_url=None, env=None, capacity=16 << 20, record_bytes=1024,
                      upload_at="1MiB", seconds=CAP_S, seed=int.from_bytes(os.urandom(4), "big"),
                      kill_every_s=(1.5, 3.0))
    _check(_run(run))


@pytest.mark.slow
def test_chaos_loop_device_s3_with_outages(tmp_path, loop_device):
    s3 = chaos.S3Service()  # moto and the dropping proxy in a process of their own
    try:
        run = chaos.Chaos(str(tmp_path), device=loop_device(16 << 20), store_url=s3.store_url, env=s3.env,
                          capacity=16 << 20, record_bytes=1024, upload_at="1MiB", seconds=CAP_S,
                          seed=int.from_bytes(os.urandom(4), "big"), kill_every_s=(1.5, 3.0), proxy=s3)
        out = _run(run, s3)
    finally:
        s3.close()
    _check(out)
    assert out["proxy_outages"] >= 1


def _held_by_a_trim(tmp_path, env=None):
    """A run whose WAL is held as an upload's direct trim holds it: the trim mark, then the writer's
    flock (walctl.device.opening's order), on a descriptor of this process (pid: os.getpid())."""
    run = chaos.Chaos(str(tmp_path), device=None, store_url=None, env=env, capacity=16 << 20, record_bytes=1024,
                      upload_at="1MiB", seconds=CAP_S, seed=1)
    res = run.walctl("init", run.device, "--force", "--capacity", run.capacity, "--no-prewrite")
    assert res.returncode == 0, res.stderr
    fd = os.open(run.device, os.O_RDWR)
    assert mark_trim(fd, argv=["walctl", "upload"])
    fcntl.flock(fd, fcntl.LOCK_EX)
    return run, fd


def test_a_writer_started_while_a_trim_holds_the_lock_waits_for_it(tmp_path):
    """After a writer's kill an upload may trim the WAL directly, under the writer's lock: the next
    writer, started meanwhile, waits for the trim (it says so on stderr) and then appends; the run
    starts no writer again and finds no problem (before the wait, it was refused with exit 5)."""
    run, fd = _held_by_a_trim(tmp_path)
    writer = threading.Thread(target=run.writer_loop)
    writer.start()
    try:
        wait_until(lambda: run.counts["writer_trim_waits"] >= 1 or run.problems)
    finally:
        os.close(fd)  # the trim is over
    try:
        wait_until(lambda: len(run.acked) > 100 or run.problems)
    finally:
        run.stop.set()
        writer.join(60)
    assert not writer.is_alive() and run.problems == []
    assert run.counts["writer_runs"] == 1 and run.counts["writer_trim_waits"] == 1
    assert run.counts["writer_kills"] == 0 and len(run.acked) > 100


def test_a_trim_holding_the_lock_past_the_wait_is_a_problem(tmp_path):
    run, fd = _held_by_a_trim(tmp_path, env={"WALCTL_TRIM_WAIT": "300ms"})
    writer = threading.Thread(target=run.writer_loop)
    writer.start()
    try:
        wait_until(lambda: run.problems)
    finally:
        run.stop.set()
        os.close(fd)
        writer.join(60)
    assert run.counts["writer_trim_waits"] >= 1
    problem = run.problems[0]
    assert problem.startswith("writer 1 exited 5: ") and problem.endswith(
        f"walctl: error: a trim by walctl upload (pid {os.getpid()}) holds the device, {run.device} (it still "
        f"held it after 0.3 s, the wait WALCTL_TRIM_WAIT sets; see what pid {os.getpid()} is doing, then run "
        f"this again)"), run.problems
