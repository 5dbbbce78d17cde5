"""What the timeout's error and the idle warning read (walctl.spark.job.job_state): a running task
shows in Spark's status tracker as soon as Spark's listener has taken its start, not 10-20 s later.

By default Spark's status store takes a stage's change only if the stage was last written 100 ms
before: a task that starts within 100 ms of its stage (a warm session, or a busy machine where the
listener takes both events at once) stayed "0 running" until a heartbeat flushed it, and a CI run
(of c9e5e91, three workers, two helpers beside it) saw `compact --task-timeout 6s` call a hung
task "none of its 1 task is running (lost executors?)". walctl's sessions set
spark.ui.liveUpdate.period to 0 (without it this test failed 1 run in 3 here)."""

from __future__ import annotations

import threading
import time

from walctl.spark.job import job_state

from threadhelpers import wait_until


def test_a_started_task_shows_as_running_at_once(spark, tmp_path):
    sc = spark.sparkContext
    assert sc.getConf().get("spark.ui.liveUpdate.period") == "0ms"
    group = "walctl-test-status"
    started, release = tmp_path / "started", tmp_path / "release"

    def hold(_):  # (runs in a Python worker: files, not events)
        started.touch()
        deadline = time.time() + 60
        while not release.exists() and time.time() < deadline:
            time.sleep(0.01)
        return [1]

    box = {}

    def job():
        sc.setJobGroup(group, "status test", interruptOnCancel=True)
        box["result"] = sc.parallelize([0], 1).mapPartitions(hold).collect()

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    try:
        wait_until(started.exists)
        sc._jsc.sc().listenerBus().waitUntilEmpty()  # the task's start event has been handled
        for _ in range(3):  # (and it stays there while the task runs)
            assert job_state(sc, group) == {"executors": 1, "running": 1, "tasks": 1}
            time.sleep(0.2)
    finally:
        release.touch()
        thread.join(60)
    assert box["result"] == [1]
    assert job_state(sc, group)["running"] == 0  # done: the last event (the task's end) written too
