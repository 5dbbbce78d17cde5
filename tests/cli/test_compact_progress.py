"""compact says what it does on stderr (issue 30): the plan before Spark starts, Spark's start,
then the iterations as they end; the JVM's own "WARNING:" lines stay off stderr (but with --debug),
while anything else it prints (an error) passes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from walctl.pipeline.upload import upload
from walctl.store import open_store

from storehelpers import append, make_wal

KiB = 1 << 10

_FILTER = r"""
import os, subprocess, sys
from walctl.spark.session import jvm_stderr_filtered
with jvm_stderr_filtered(True):
    # as the JVM does: a child that inherits fd 2 and goes on writing after the block
    child = subprocess.Popen(["sh", "-c", "echo 'WARNING: Using incubator modules: jdk.incubator.vector' >&2; "
                              "sleep 0.2; echo 'ERROR SparkContext: it failed' >&2; printf 'WARNING: tail' >&2"])
    # (one write: print's text and its newline can be two, and the child's line may land between)
    os.write(2, b"ours, inside\n")
os.write(2, b"ours, after\n")  # (one write, as above: the forwarder writes to this fd too)
child.wait()
"""


def test_the_jvm_stderr_filter_drops_only_its_warnings():
    proc = subprocess.run([sys.executable, "-c", _FILTER], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert sorted(lines) == ["ERROR SparkContext: it failed", "ours, after", "ours, inside"], proc.stderr


@pytest.mark.slow
def test_compact_prints_its_plan_before_spark_and_each_iteration(tmp_path):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    wal = make_wal(tmp_path)
    for _ in range(3):
        append(wal, {s: (8, 3000) for s in (1, 2, 3)}, store)
        upload(wal, store, block_size=2 * KiB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--store", str(store_dir), "--master",
                           "local[1]", "--level", "sso", "--memory-limit", "16KiB"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("compact: plan: 3 objects in (") and ", 1 out, 15 iterations, 22 GETs," in lines[0]
    assert lines[1] == "compact: starting Spark (local[1]) ..."
    assert lines[2].startswith("compact: Spark started in ") and lines[2].endswith("running 15 iterations")
    progress = lines[3:]
    assert progress and all(ln.startswith("compact: iteration ") for ln in progress), proc.stderr
    assert progress[-1].startswith("compact: iteration 15 of 15 done (")
    assert not any("WARNING" in ln for ln in lines)  # main: "WARNING: Using incubator modules: ..."
    assert "compacted: 3 objects in, 1 out, 15 iterations" in proc.stdout
