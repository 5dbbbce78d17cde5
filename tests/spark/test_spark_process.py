"""compact as a process: missing prerequisites (pyspark, Java), SIGTERM mid-job, a master set by
spark-submit, and nothing left in the temporary directory (issues 16.4, 18.2-4, 20.7)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from walctl.store import manifest as mf
from walctl.store import open_store
from walctl.spark.session import JVM_CONF

from storehelpers import expect, read_back
from test_spark_compact import fill

KiB, MiB = 1 << 10, 1 << 20

BLOCK_PYSPARK = '''
import sys


class _NoPyspark:
    """As if pyspark were not installed (walctl without its [spark] extra)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPyspark())
'''


def env_with(**changes) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env.update(changes)
    return env


def walctl(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walctl", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("walctl: ")]


def session_processes(sid: int) -> list[str]:
    """Processes still alive in session ``sid`` (the command's own session: it, its JVM, Python workers)."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(f"{pid}: {cmd}")
    return alive


def wait_empty(what, timeout_s: float = 20.0):
    """Poll ``what()`` until it returns an empty list (or the timeout); returns its last value."""
    deadline = time.monotonic() + timeout_s
    left = what()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = what()
    return left


@pytest.fixture
def two_ssos(tmp_path):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    _, appended = fill(tmp_path, store, rounds=3, streams=(1, 2, 3), count=8, size=3000)
    return store, str(store_dir), appended


def test_without_pyspark_compact_says_what_to_install_and_dry_run_still_plans(tmp_path, two_ssos):
    store, url, _ = two_ssos
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_PYSPARK)
    env = env_with(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    probe = subprocess.run([sys.executable, "-c", "import pyspark"], env=env, capture_output=True)
    assert probe.returncode != 0  # the blocker works
    before = mf.load_latest(store)
    proc = walctl("compact", "--store", url, "--json", env=env)
    assert proc.returncode == 4, proc.stderr
    (line,) = error_lines(proc.stderr)
    assert "pyspark is not installed" in line and "pip install 'walctl[spark]'" in line
    assert proc.stderr.strip() == line  # one line, no traceback
    assert json.loads(proc.stdout)["error"]["code"] == 4
    assert mf.load_latest(store) == before  # nothing written: not even the fence
    dry = walctl("compact", "--store", url, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["plan"]
    assert plan["input_count"] == 3 and plan["sso_count"] == 1


def test_without_java_compact_exits_4_in_one_line_and_selftest_calls_it_a_prerequisite(tmp_path, two_ssos):
    store, url, _ = two_ssos
    env = env_with(JAVA_HOME=str(tmp_path / "no-java"))
    before = mf.load_latest(store)
    proc = walctl("compact", "--store", url, env=env)
    assert proc.returncode == 4, proc.stderr
    (line,) = error_lines(proc.stderr)
    assert "Java not found" in line and "JAVA_HOME" in line and proc.stderr.strip() == line
    assert mf.load_latest(store) == before
    selftest = walctl("selftest", "--json", "--dir", str(tmp_path), env=env)
    assert selftest.returncode == 4, selftest.stderr
    out = json.loads(selftest.stdout)
    (check,) = [c for c in out["checks"] if c["name"] == "compact"]
    assert check["status"] == "fail" and check["failure"] == "prerequisite" and "Java not found" in check["detail"]


@pytest.mark.slow
def test_sigterm_mid_job_rolls_back_reports_and_leaves_nothing(tmp_path, two_ssos):
    store, url, appended = two_ssos
    before = mf.load_latest(store)
    keys_before = sorted(i.key for i in store.list() if not i.key.startswith("manifest/"))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    metrics = tmp_path / "compact.prom"
    # ~216 KB read at 10 KiB/s: the job runs for ~20 s once Spark is up
    args = [sys.executable, "-m", "walctl", "compact", "--store", url, "--master", "local[1]", "--read-rate", "0.01",
            "--metrics-file", str(metrics), "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_with(TMPDIR=str(tmpdir)), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while mf.load_latest(store).number == before.number:  # the fence + prepare commit
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        while not any(w in p for p in session_processes(proc.pid)  # the task's worker is up
                      for w in ("pyspark.worker", "pyspark.daemon", "walctl.spark.worker", "walctl.spark.daemon")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        time.sleep(1.5)  # the task reads (paced)
        assert proc.poll() is None, "compact ended before the SIGTERM: slow the read rate down"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr[-3000:]  # 128 + SIGTERM, like every command (docs/CLI.md)
    (line,) = error_lines(stderr)
    assert line.startswith("walctl: error: interrupted")
    out = json.loads(stdout)
    assert out["error"]["code"] == 143 and out["error"]["signal"] == "SIGTERM" and out["interrupted"] is True and out["commit_number"] is None
    assert re.search(r"^walctl_compact_success(\{[^}]*\})? 0$", metrics.read_text(), re.M), metrics.read_text()
    assert wait_empty(lambda: session_processes(proc.pid)) == []  # its JVM and Python workers too
    assert wait_empty(lambda: sorted(p.name for p in tmpdir.iterdir())) == []
    after = mf.load_latest(store)
    assert after.objects == before.objects  # nothing replaced
    # no output left behind: finished ones deleted, open multipart objects aborted
    assert sorted(i.key for i in store.list() if not i.key.startswith("manifest/")) == keys_before
    assert read_back(store) == expect(appended)


@pytest.mark.slow
def test_spark_submit_master_is_respected_and_no_temp_dir_is_left(tmp_path, two_ssos):
    store, url, appended = two_ssos
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    script = tmp_path / "walctl_main.py"
    script.write_text("from walctl.cli import main\nmain()\n")
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    env = env_with(TMPDIR=str(tmpdir), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    # (the driver JVM spark-submit starts gets the options walctl gives the JVM it starts itself: ~half
    # the CPU time of the default compilers and collector for the same job; the master stays local[2])
    proc = subprocess.run([submit, "--master", "local[2]", "--driver-java-options",
                           JVM_CONF["spark.driver.extraJavaOptions"], str(script), "compact", "--store", url, "--json"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["spark_master"] == "local[2]"  # not local[*]: spark-submit's master stands
    assert out["commit_number"] is not None and read_back(store) == expect(appended)
    assert wait_empty(lambda: sorted(p.name for p in tmpdir.iterdir())) == []


def test_local_workers_do_not_import_a_walctl_from_the_current_directory(tmp_path, two_ssos):
    """A local master's Python workers start as `python -m ...`, which would put the current
    directory first on their path: run from a directory holding another walctl (an old checkout),
    they must still import the driver's."""
    store, url, appended = two_ssos
    cwd = tmp_path / "elsewhere"
    (cwd / "walctl").mkdir(parents=True)
    (cwd / "walctl" / "__init__.py").write_text('raise ImportError("the walctl of the current directory")\n')
    proc = subprocess.run([sys.executable, "-P", "-m", "walctl", "compact", "--store", url, "--json"],
                          capture_output=True, text=True, timeout=300, env=env_with(), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["commit_number"] is not None
    assert read_back(store) == expect(appended)


@pytest.mark.slow
def test_hung_task_is_cancelled_at_the_task_timeout_and_rolled_back(tmp_path, two_ssos):
    """A task that never ends (paused on the executor after writing its output): at --task-timeout
    the job is cancelled, its Python worker killed, the output deleted, nothing committed, exit 6."""
    store, url, appended = two_ssos
    before = mf.load_latest(store)
    keys_before = sorted(i.key for i in store.list() if not i.key.startswith("manifest/"))
    paused = tmp_path / "task-paused"
    env = env_with(WALCTL_FAILPOINT="compact-task-after-piece:pause", WALCTL_FAILPOINT_READY=str(paused))
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "compact", "--store", url, "--master", "local[1]",
                             # (the job's start to the task's pause: 2.6-3.3 s at load 8-9 on 2 cores;
                             # the run waits the rest of it out: A/B, 10s 16.0-16.5 s, 6s 12.0-12.5 s)
                             "--task-timeout", "6s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=240)  # main: the task pauses 120 s, then it commits
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert paused.exists(), stderr[-3000:]  # the task did write its output and hang
    assert proc.returncode == 6, stderr[-3000:]
    (line,) = error_lines(stderr)
    assert line.startswith("walctl: error: the Spark job did not finish within 6s and was cancelled: 1 of its 1 "
                           "task still running"), line
    assert "local[1]" in line and "--task-timeout" in line and "nothing was committed" in line
    out = json.loads(stdout)
    assert out["error"]["code"] == 6 and out["commit_number"] is None and out["task_timeout_seconds"] == 6
    assert wait_empty(lambda: session_processes(proc.pid)) == []  # the hung Python worker too
    after = mf.load_latest(store)
    assert after.objects == before.objects and after.prepared
    assert sorted(i.key for i in store.list() if not i.key.startswith("manifest/")) == keys_before
    assert read_back(store) == expect(appended)
