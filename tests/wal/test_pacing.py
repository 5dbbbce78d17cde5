"""The writer's IOPS/bandwidth budget and its per-block latency breakdown (issue 8).

The token bucket is checked against a fake clock (exact). The writer is checked on a
real file over a couple of seconds: the budget's upper bound (rate * t + burst) holds
on any machine, however loaded; the lower bound (half the budget) only says the budget,
not a stuck writer, set the pace: a loaded machine delays a write loop on a real clock
(the exact rates are the fake-clock tests' above).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from walhelpers import new_wal, run_walctl

from walctl.device.fdio import BufferedDevice
from walctl.errors import UsageError
from walctl.format.batch import StreamRecordBatch
from walctl.wal.headers import read_headers
from walctl.wal.lifecycle import open_writer
from walctl.wal.pacing import BURST_S, STAGES, Budget, Pacer, StageRecorder, TokenBucket
from walctl.wal.writer import WalWriter

MiB = 1 << 20
S = 1_000_000_000  # ns


class FakeClock:
    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        return self.now


# -- the token bucket -----------------------------------------------------------------

def test_bucket_starts_full_then_paces_at_its_rate():
    clock = FakeClock()
    bucket = TokenBucket(100, 5, clock)  # 100 per second, 5 held
    for _ in range(5):  # the burst goes at once
        assert bucket.delay_ns(1) == 0
        bucket.take(1)
    delay = bucket.delay_ns(1)
    assert 9_900_000 <= delay <= 10_100_000  # one token takes 10 ms
    clock.now += delay
    assert bucket.delay_ns(1) == 0


def test_bucket_never_holds_more_than_its_burst():
    clock = FakeClock()
    bucket = TokenBucket(100, 5, clock)
    clock.now += 60 * S  # idle for a minute
    taken = 0
    while bucket.delay_ns(1) == 0:
        bucket.take(1)
        taken += 1
    assert taken == 5


def test_a_write_larger_than_the_burst_goes_and_leaves_a_debt():
    clock = FakeClock()
    bucket = TokenBucket(1000, 100, clock)  # bytes: 1000/s, 100 held
    assert bucket.delay_ns(400) == 0  # a full bucket lets one large write start
    bucket.take(400)
    delay = bucket.delay_ns(10)
    assert delay >= 0.31 * S  # the debt of 300 is paid (and 10 earned) first
    clock.now += delay
    assert bucket.delay_ns(10) == 0


# The rate scales with the cost so that every case is ~100k writes over its 10 simulated
# seconds (cost 1 at 1e6/s was 10 million loop turns, ~20-47 s); the burst is still 50 ms of
# the rate, and 300_000 is still a cost larger than the burst (a write that leaves a debt).
@pytest.mark.parametrize("cost,rate", [(1, 10_000.0), (7, 70_000.0), (4096, 1_000_000.0), (300_000, 1_000_000.0)])
def test_greedy_writer_gets_the_rate_over_time(cost, rate):
    clock = FakeClock()
    bucket = TokenBucket(rate, rate * BURST_S, clock)
    spent = 0
    while clock.now < 10 * S:
        delay = bucket.delay_ns(cost)
        if delay:
            clock.now += delay
            continue
        bucket.take(cost)
        spent += cost
    # rate * t + burst, and at most one write's worth of debt below it
    assert rate * 10 - cost <= spent <= rate * 10 + rate * BURST_S + cost


def test_pacer_waits_for_the_slower_bucket():
    clock = FakeClock()
    pacer = Pacer(Budget(iops=10, bandwidth_bytes_per_s=1 * MiB), clock)
    assert pacer.iops.burst == 1.0  # never less than one write
    assert pacer.delay_ns(4096) == 0
    pacer.take(256 << 10)
    # the IOPS bucket wants 100 ms; the bandwidth bucket's debt of 256 KiB - 52 KiB wants ~195 ms
    assert pacer.delay_ns(4096) > 0.19 * S
    assert Pacer(Budget(iops=10), clock).delay_ns(10 * MiB) == 0  # no bandwidth budget: size is free


@pytest.mark.parametrize("iops,bandwidth", [(0, None), (-1, None), (None, 0.0)])
def test_budget_must_be_positive(iops, bandwidth):
    with pytest.raises(UsageError):
        Budget(iops, bandwidth)


def test_budget_of_none_is_unlimited():
    assert not Budget().limited
    assert Budget.from_options(None, 125).bandwidth_bytes_per_s == 125 * MiB


# -- the stage recorder ---------------------------------------------------------------

def test_stage_recorder_sums_and_samples_stay_consistent_after_halving():
    rec = StageRecorder(cap=64)
    for i in range(1000):
        rec.add(queued_ns=1000 * i, budget_ns=500 * i, write_ns=2000, flush_ns=i % 3)
    assert rec.count == 1000
    assert rec.sums["total"] == rec.sums["queued"] + rec.sums["write"] + rec.sums["flush"]
    kept = rec.samples
    assert 32 <= len(kept["total"]) < 64  # halved, not grown without bound
    for q, w, f, t, b in zip(kept["queued"], kept["write"], kept["flush"], kept["total"], kept["budget"]):
        assert q + w + f == t and b <= q
    summary = rec.summary()
    assert summary["blocks"] == 1000
    assert set(summary) == {"blocks", *STAGES}
    # the samples are spread over the whole run, not the first blocks only
    assert summary["queued"]["p99"] > 900.0


# -- the writer on a real file ---------------------------------------------------------

def _run(path, budget, seconds: float, record_size: int = 1024, offered: float | None = None, iodepth: int = 4):
    acks = []
    opened = open_writer(path, iodepth=iodepth, on_ack=lambda off, t: acks.append(off), budget=budget)
    writer = opened.writer
    body = StreamRecordBatch(0, 0, 0, 1, os.urandom(record_size)).encode()
    started = time.perf_counter()
    records = 0
    while (now := time.perf_counter()) - started < seconds:
        if offered is not None and records >= (now - started) * offered:
            time.sleep(0.0005)
            continue
        writer.append(body)
        records += 1
        if records % 256 == 0 and acks and writer.next_block - writer.trim_start > 16 * MiB:
            writer.update_header(trim_offset=acks[-1])
    writer.drain()
    elapsed = time.perf_counter() - started
    writer.close()
    return writer, records, elapsed


def test_iops_budget_paces_block_writes_and_records_batch(tmp_path):
    path = new_wal(tmp_path / "w.img", 64 * MiB)
    writer, records, elapsed = _run(path, Budget(iops=100), 2.5)
    blocks = writer.blocks_written - 1  # the first write is free (a full bucket holds one 50 ms: 5)
    assert blocks <= 100 * elapsed + 100 * BURST_S + 1
    assert blocks >= 0.5 * 100 * elapsed
    # The budget, not the disk, held the writer: records batched far beyond one per write.
    assert records / writer.blocks_written > 20
    assert writer.bytes_written / writer.blocks_written > 64 << 10
    stages = writer.stages.summary()
    assert stages["budget"]["p50"] > 0 and stages["budget"]["mean"] > 0


def test_bandwidth_budget_paces_bytes_written(tmp_path):
    path = new_wal(tmp_path / "w.img", 64 * MiB)
    budget = 4 * MiB
    writer, _, elapsed = _run(path, Budget(bandwidth_bytes_per_s=budget), 2.5, record_size=16 << 10)
    assert writer.bytes_written <= budget * elapsed + budget * BURST_S + (256 << 10) + 8192
    assert writer.bytes_written >= 0.5 * budget * elapsed


def test_budget_not_reached_adds_no_wait(tmp_path):
    path = new_wal(tmp_path / "w.img", 64 * MiB)
    writer, records, _ = _run(path, Budget(iops=10_000, bandwidth_bytes_per_s=500 * MiB), 1.0, offered=300)
    assert records >= 200
    assert writer.stages.count == writer.blocks_written
    assert writer.stages.sums["budget"] == 0  # never held by the budget
    assert max(writer.stages.samples["budget"]) == 0


def test_stages_of_every_block_add_up(tmp_path):
    path = new_wal(tmp_path / "w.img", 64 * MiB)
    writer, _, _ = _run(path, Budget(iops=300), 1.0)
    s = writer.stages.samples
    assert len(s["total"]) == writer.blocks_written
    for q, b, w, f, t in zip(s["queued"], s["budget"], s["write"], s["flush"], s["total"]):
        assert min(q, b, w, f) >= 0 and b <= q and q + w + f == t
    summary = writer.stages.summary()
    means = sum(summary[stage]["mean"] for stage in ("queued", "write", "flush"))
    assert abs(means - summary["total"]["mean"]) <= 0.2  # rounding to 0.1 µs, three times
    assert summary["flush"]["mean"] == 0.0  # O_DIRECT + O_DSYNC: the flush is inside the write


def test_buffered_device_reports_its_fdatasync_as_flush(tmp_path):
    path = new_wal(tmp_path / "w.img", 16 * MiB)
    dev = BufferedDevice(path, os.open(path, os.O_RDWR | os.O_CLOEXEC), writable=True)
    writer = WalWriter(dev, read_headers(dev), 0, iodepth=2)
    for i in range(50):
        writer.append(StreamRecordBatch(0, 0, i, 1, b"x" * 100).encode())
        writer.submit_open_block()
    writer.close()
    summary = writer.stages.summary()
    assert summary["blocks"] == writer.blocks_written >= 50
    assert summary["flush"]["mean"] > 0 and writer.stages.sums["flush"] <= writer.stages.sums["total"]
    s = writer.stages.samples
    assert all(q + w + f == t for q, w, f, t in zip(s["queued"], s["write"], s["flush"], s["total"]))


# -- the commands ---------------------------------------------------------------------

def test_append_json_summary_reports_budget_and_stages(tmp_path):
    path = new_wal(tmp_path / "w.img", 16 * MiB)
    out = run_walctl("append", path, "--json", "--input", "-", env={"WALCTL_IOPS": "50", "WALCTL_BANDWIDTH": "2"},
                  stdin=b"".join(b"record %d\n" % i for i in range(300)))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["type"] == "summary" and summary["records"] == 300
    assert summary["budget"] == {"iops": 50.0, "bandwidth_mib_per_s": 2.0}
    stages = summary["stages_us"]
    assert stages["blocks"] == summary["blocks_written"]
    assert set(stages) == {"blocks", *STAGES}
    for stage in STAGES:
        assert set(stages[stage]) == {"p50", "p99", "mean"}
    assert abs(sum(stages[s]["mean"] for s in ("queued", "write", "flush")) - stages["total"]["mean"]) <= 0.2
    # --iops on the command line wins over the environment
    out = run_walctl("append", path, "--json", "--iops", "1000", "x", env={"WALCTL_IOPS": "50"})
    assert json.loads(out.stdout.splitlines()[-1])["budget"]["iops"] == 1000.0


@pytest.mark.parametrize("args,env", [(["--iops", "0"], {}), (["--bandwidth", "-1"], {}),
                                      ([], {"WALCTL_IOPS": "many"}), ([], {"WALCTL_BANDWIDTH": "0"})])
def test_append_refuses_a_bad_budget(tmp_path, args, env):
    path = new_wal(tmp_path / "w.img", 16 * MiB)
    out = run_walctl("append", path, *args, "x", env=env)
    assert out.returncode == 2
    assert b"Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
