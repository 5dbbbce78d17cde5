"""SSO compaction's budgets and tasks without a JVM: the Spark job's own code (the driver's and the
tasks') runs in this process through a stand-in SparkContext, and its pacers run on fake clocks,
so the byte rates are asserted exactly, never timed."""

from __future__ import annotations

import pytest

from walctl.device.pacing import Pacer
from walctl.spark.compact import compact

from storehelpers import put_objects, read_back

KiB = 1 << 10


class FakeRDD:
    def __init__(self, items):
        self.items = list(items)

    def map(self, f):
        return FakeRDD(f(x) for x in self.items)

    def collect(self):
        return self.items


class FakeContext:
    """What run_iterations asks of a SparkContext: one partition per batch, run here."""

    master = "local[2]"
    _walctl_shipped = True  # the tasks run in this process: nothing to ship

    def __init__(self):
        self.jobs: list[int] = []  # partitions per job

    def parallelize(self, items, slices):
        items = list(items)
        assert slices == len(items)
        self.jobs.append(slices)
        return FakeRDD(items)

    def cancelAllJobs(self):
        pass

    def setJobGroup(self, group, description, interruptOnCancel=False):  # the job's group (--task-timeout)
        self.group = group

    def cancelJobGroup(self, group):
        pass


class FakeSession:
    def __init__(self):
        self.sparkContext = FakeContext()


class FakeClock:
    def __init__(self):
        self.now_ns = 0

    @property
    def now(self) -> float:
        return self.now_ns / 1e9

    def clock(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)


@pytest.fixture
def pacers(monkeypatch):
    """Every Pacer the tasks make, each on a clock of its own that only its pauses move; each
    records (its time after the pause, bytes paid so far) at every payment."""
    made = []
    real = Pacer.bytes_per_s

    def fake(rate):
        clock = FakeClock()
        pacer = real(rate, clock=clock.clock, sleep=clock.sleep)
        pacer.log, pacer.total = [], 0
        pay = pacer.paid

        def paid(nbytes):
            pay(nbytes)
            pacer.total += nbytes
            pacer.log.append((clock.now, pacer.total))

        pacer.paid = paid
        made.append(pacer)
        return pacer

    monkeypatch.setattr(Pacer, "bytes_per_s", staticmethod(fake))
    return made


def small_store(store) -> dict:
    # stream 1: 4 x 320 KiB (an SO at a 512 KiB split size), streams 2 and 3 small (the SSO)
    return put_objects(store, [[(1, 8, 40 * KiB), (2, 2, 3 * KiB), (3, 1, 5 * KiB)] for _ in range(4)],
                       block_size=64 * KiB)


def test_write_budget_is_shared_by_the_tasks_and_paces_every_byte_written(local_store, pacers):
    written = small_store(local_store)
    budget = 100 * KiB  # bytes per second, all tasks together
    session = FakeSession()
    result = compact(local_store, local_store.url, spark=session, memory_limit=400 * KiB, split_size=512 * KiB,
                     write_rate_bps=budget, tasks=2)
    out = result.to_json()
    assert result.plan.tasks == out["tasks"] == 2 and result.tasks_at_once == 2
    assert session.sparkContext.jobs == [2]  # one Spark job of two tasks
    assert len(result.plan.iterations) >= 4 and any(o.multipart for o in result.plan.outputs)
    assert out["write_rate_bytes_per_s"] == budget and out["read_rate_bytes_per_s"] is None
    writes = [p for p in pacers if p.rate]  # the read pacers have no budget here
    assert len(writes) == len(result.plan.iterations)  # one per iteration
    assert all(p.rate == budget / 2 for p in writes)  # two tasks at once: each has half the budget
    # every byte the tasks wrote went through a write pacer: all the outputs' bytes but the
    # multipart objects' last parts (IndexBlock + Footer, a few hundred bytes the driver uploads)
    tails = sum(len(o.ranges) * 36 + 48 for o in result.plan.outputs if o.multipart)
    assert sum(p.total for p in writes) == out["bytes_written"] == result.plan.bytes_written - tails > 0
    # ... and no task ever ran ahead of its share: after each write, bytes so far <= share x time
    for p in writes:
        assert all(total <= p.rate * at * (1 + 1e-9) for at, total in p.log)
        assert p.log[-1][0] == pytest.approx(p.total / p.rate)  # paced to exactly its share, not slower
    assert read_back(local_store) == written
    assert result.commit_number is not None


def test_expected_duration_is_the_slower_of_the_two_budgets(local_store, pacers):
    small_store(local_store)
    plan_only = compact(local_store, local_store.url, memory_limit=400 * KiB, split_size=512 * KiB, dry_run=True,
                        read_rate_bps=1 << 20, write_rate_bps=10 * KiB, tasks=2)
    out = plan_only.to_json()
    assert out["expected_seconds"] == round(plan_only.plan.bytes_written / (10 * KiB), 3)
    fast_writes = compact(local_store, local_store.url, memory_limit=400 * KiB, split_size=512 * KiB,
                          dry_run=True, read_rate_bps=10 * KiB, write_rate_bps=1 << 20, tasks=2).to_json()
    assert fast_writes["expected_seconds"] == round(plan_only.plan.bytes_read / (10 * KiB), 3)
    assert compact(local_store, local_store.url, dry_run=True).to_json()["expected_seconds"] is None
    assert pacers == []  # a dry run paces nothing


def test_tasks_split_the_memory_limit_and_the_plan_says_so(local_store):
    small_store(local_store)
    one = compact(local_store, local_store.url, memory_limit=400 * KiB, split_size=512 * KiB, dry_run=True,
                  tasks=1).plan
    two = compact(local_store, local_store.url, memory_limit=400 * KiB, split_size=512 * KiB, dry_run=True,
                  tasks=2).plan
    assert (one.tasks, one.task_memory, two.tasks, two.task_memory) == (1, 400 * KiB, 2, 200 * KiB)
    assert all(it.data_bytes <= 200 * KiB for it in two.iterations)
    assert max(it.data_bytes for it in one.iterations) > 200 * KiB
    assert two.to_json()["task_memory_bytes"] == 200 * KiB
    # by default one task on a local master, two on a cluster
    assert compact(local_store, local_store.url, memory_limit=400 * KiB, dry_run=True,
                   master="local[3]").plan.tasks == 1
    assert compact(local_store, local_store.url, memory_limit=400 * KiB, dry_run=True,
                   master="spark://127.0.0.1:7077").plan.tasks == 2
