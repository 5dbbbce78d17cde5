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


def _held_lock_run(tmp_path):
    run = chaos.Chaos(str(tmp_path), device=None, store_url=None, env=None, capacity=16 << 20, record_bytes=1024,
                      upload_at="1MiB", seconds=CAP_S, seed=1)
    res = run.walctl("init", run.device, "--force", "--capacity", run.capacity, "--no-prewrite")
    assert res.returncode == 0, res.stderr
    fd = os.open(run.device, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what an upload's direct trim holds: the writer's lock
    return run, fd


def test_a_writer_refused_while_a_trim_holds_the_lock_is_started_again(tmp_path):
    """After a writer's kill an upload may trim the WAL directly, under the writer's lock, with a crash
    scan first: a writer started meanwhile is refused (exit 5, "another writer holds the device"). The
    run starts it again (a CI run at 3 workers once called this a problem) and finds no problem."""
    run, fd = _held_lock_run(tmp_path)
    writer = threading.Thread(target=run.writer_loop)
    writer.start()
    try:
        wait_until(lambda: run.counts["writer_refusals"] >= 2)
    finally:
        os.close(fd)  # the trim is over
    try:
        wait_until(lambda: len(run.acked) > 100)
    finally:
        run.stop.set()
        writer.join(60)
    assert not writer.is_alive() and run.problems == []
    assert run.counts["writer_runs"] == run.counts["writer_refusals"] + 1 and run.counts["writer_kills"] == 0


def test_a_lock_held_past_the_retry_bound_is_a_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(chaos, "REFUSED_RETRY_S", 0.3)
    run, fd = _held_lock_run(tmp_path)
    writer = threading.Thread(target=run.writer_loop)
    writer.start()
    try:
        wait_until(lambda: run.problems)
    finally:
        run.stop.set()
        os.close(fd)
        writer.join(60)
    assert run.counts["writer_refusals"] >= 2
    assert "exited 5: walctl: error: another writer holds the device" in run.problems[0], run.problems
