"""Shared fixtures: real loop devices (root only) and a writer held by another process."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# No test needs more than two devices at once (say, a source and a target); a
# third is a leak or a bug, and the machine has only eight loop devices.
MAX_LOOP_DEVICES_PER_TEST = 2
LOOP_SKIP_REASON = "needs root and losetup to attach a loop device"


def _detach(device: str) -> None:
    # If the test left the device open, the kernel marks it autoclear and detaches
    # it on the last close, so this still leaves nothing behind.
    subprocess.run(["losetup", "-d", device], capture_output=True, timeout=30, check=False)


@pytest.fixture
def loop_device(tmp_path):
    """Factory: ``loop_device(size_bytes=16 MiB, direct_io=True) -> "/dev/loopN"``.

    The backing file lives in tmp_path; every device is detached when the test
    ends, whether it passed or not. Skips when not root or losetup is missing
    or fails; raises on a third device in one test.
    """
    attached: list[str] = []

    def attach(size_bytes: int = 16 << 20, direct_io: bool = True) -> str:
        if len(attached) >= MAX_LOOP_DEVICES_PER_TEST:
            raise RuntimeError(f"a test may hold at most {MAX_LOOP_DEVICES_PER_TEST} loop devices")
        if os.geteuid() != 0 or shutil.which("losetup") is None:
            pytest.skip(LOOP_SKIP_REASON)
        backing = tmp_path / f"loop-backing-{len(attached)}.img"
        with open(backing, "wb") as f:
            f.truncate(size_bytes)
        cmd = ["losetup", f"--direct-io={'on' if direct_io else 'off'}", "-f", "--show", str(backing)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pytest.skip(LOOP_SKIP_REASON)
        device = proc.stdout.strip()
        if proc.returncode != 0 or not device.startswith("/dev/"):
            pytest.skip(f"{LOOP_SKIP_REASON} (losetup: {proc.stderr.strip()})")
        attached.append(device)
        return device

    yield attach
    for device in reversed(attached):
        _detach(device)


# Run in a child: open PATH as a writer and hold it until stdin closes.
# mode "walctl": open_device(writable=True) (O_EXCL on block devices + flock);
# mode "flock": a plain read-only open + flock, to test the flock path alone.
_HOLDER_SCRIPT = """
import fcntl, os, sys
path, mode = sys.argv[1], sys.argv[2]
if mode == "walctl":
    from walctl.device import open_device
    dev = open_device(path, writable=True)
else:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hold_writer():
    """Factory: ``hold_writer(path, mode="walctl") -> pid`` of a child holding the device.

    The child keeps the device until the test ends.
    """
    children: list[subprocess.Popen] = []

    def start(path: str, mode: str = "walctl") -> int:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p))
        child = subprocess.Popen([sys.executable, "-c", _HOLDER_SCRIPT, path, mode],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        children.append(child)
        line = child.stdout.readline()
        if line.strip() != "ready":
            child.kill()
            _, err = child.communicate(timeout=10)
            pytest.fail(f"writer child did not start: {err}")
        return child.pid

    yield start
    for child in children:
        if child.poll() is None:
            child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        child.stdout.close()
        child.stderr.close()


# Session fixtures that start a JVM (tests/spark/conftest.py): the tests that use them go first
# with the slow ones, so all of them are in worker 1's first run and the run starts Spark once (two
# workers each started a local session when one such test, not marked slow, came later: ~20 s of a
# loaded worker's time and ~15 s of CPU for the second JVM).
JVM_FIXTURES = ("spark", "spark_master", "standalone_cluster")


def _starts_spark(item) -> bool:
    return any(name in JVM_FIXTURES for name in getattr(item, "fixturenames", ()))


def _goes_first(item) -> bool:
    return item.get_closest_marker("slow") is not None or _starts_spark(item)


def _may_start_a_jvm(item) -> bool:
    """A Spark session fixture's test, tests/spark's, or one that says it compacts (walctl compact
    starts a driver JVM): among the tests that go first, these go after the others."""
    return _starts_spark(item) or item.nodeid.startswith("tests/spark/") or "compact" in item.nodeid


def pytest_collection_modifyitems(config, items):
    """The slow tests first, and those using a Spark session fixture (a stable sort; issue 32, the suite's time). xdist 3.8's load scheduler
    sends each worker a run of consecutive tests first (the first quarter of its share: worker 1
    gets all the slow ones) and then refills whichever worker runs low, a few tests at a time: the
    other worker takes the rest while worker 1 works through them, and both end together.
    Simulated with the whole suite's --durations=0 profile (44a6b2c): the workers end 36 s apart
    of 2,062 (collection order: 72 s); with aedc1b7's (3,798 tests, 6,029 s of tests on a loaded
    machine) they end 2 s apart, worker 1's first run (474 tests, the 71 slow ones first) holding
    2,487 s of them. A longest-first order by measured time ends 2,589 s apart
    (worker 1's first run holds every long test) and sets module fixtures up again and again.
    Among those first tests, the ones that start Spark come after the others: a fresh virtualenv's
    run (CI's) dumps the JVMs' class archive (spark_class_archive) in its first ~30-60 s, and a
    JVM that starts before it is in place takes twice the CPU (the slow cli compact tests, first
    in collection order, took 22-26 s each in a clean clone's run, 9-10 s with the archive).

    WALCTL_HYPOTHESIS_MAX_EXAMPLES=N caps every property test at N examples (scripts/mutation.sh
    sets it: a mutant runs the same tests hundreds of times). Unset (the suite): each test's own.
    """
    items.sort(key=lambda item: (0, _may_start_a_jvm(item)) if _goes_first(item) else (1, False))
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers >= 3:
        _spread_first_tests(items, workers)
    cap = os.environ.get("WALCTL_HYPOTHESIS_MAX_EXAMPLES")
    if not cap:
        return
    from hypothesis import settings

    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is not None and current.max_examples > int(cap):
            test._hypothesis_internal_use_settings = settings(current, max_examples=int(cap))


def _spread_first_tests(items: list, workers: int) -> None:
    """With 3 workers or more (WALCTL_TEST_WORKERS=3), the first tests that start no JVM are dealt to
    the heads of every worker's first run, not all to worker 1's: there they would hold worker 1
    (with the Spark ones, which must share its session) past the others' end. Worker 1 takes its
    share of them, then the Spark ones. Left as sorted when the Spark tests do not fit in worker 1's
    first run. xdist's first runs: ``len(items) // workers // 4`` consecutive tests each; every worker
    computes the same order (xdist checks it). Simulated with a loaded run's durations (suite7,
    2,031 s of tests): 3 workers end at 917/557/557 s as sorted, 678/678/675 s spread."""
    chunk = max(2, len(items) // workers // 4)
    first = [item for item in items if _goes_first(item)]
    spark = [item for item in first if _may_start_a_jvm(item)]
    others = [item for item in first if not _may_start_a_jvm(item)]
    shares = [others[w::workers] for w in range(workers)]
    if len(shares[0]) + len(spark) > chunk or any(len(share) > chunk for share in shares):
        return
    rest = items[len(first):]
    spread = []
    for w, share in enumerate(shares):
        head = share + (spark if w == 0 else [])
        take = chunk - len(head)
        spread += head + rest[:take]
        rest = rest[take:]
    items[:] = spread + rest


@pytest.fixture(scope="session", autouse=True)
def one_click_group_per_app():
    """typer's CliRunner builds the click group from the app on every invoke (~0.06 s of CPU, five
    times the run of a small command such as ``ls``); build it once per app for the session. The
    build is deterministic and walctl's conventions (walctl.cli.conventions) are idempotent, so
    every invoke sees the same commands, options and variables as before."""
    import typer.testing

    build = typer.testing._get_command
    built: dict[int, tuple] = {}

    def cached(app):
        entry = built.get(id(app))
        if entry is None or entry[0] is not app:
            entry = built[id(app)] = (app, build(app))  # (app kept: its id is not reused)
        return entry[1]

    typer.testing._get_command = cached
    yield
    typer.testing._get_command = build


# A job that loads what a compaction's driver loads (a session, a job with a Python worker).
_ARCHIVE_WORKLOAD = """
from pyspark.sql import SparkSession
s = SparkSession.builder.master("local[1]").getOrCreate()
assert s.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
s.stop()
"""
_STALE_LOCK_S = 900  # a lock older than this is a dump that died with its run: take it over


def _archive_path() -> Path | None:
    """Where the archive of this Java and this Spark's jars lives (a new Java or Spark: a new name), or
    None without Java or pyspark."""
    try:
        import pyspark
    except ImportError:
        return None
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get(
        "JAVA_HOME") else shutil.which("java")
    if java is None:
        return None
    from walctl.spark.session import JVM_CONF

    jars = Path(pyspark.__file__).parent / "jars"
    # (the archive holds the class path: jars elsewhere, another virtualenv's, need their own)
    key = hashlib.sha1(repr((os.path.realpath(java), os.stat(os.path.realpath(java)).st_mtime_ns, str(jars.resolve()),
                             sorted(p.name for p in jars.glob("*.jar")), JVM_CONF)).encode()).hexdigest()[:16]
    # Kept with the virtualenv whose jars it holds (~120 MB: gone with it; never in the temp dir, which
    # a test run leaves as it found it); outside a virtualenv in the user's cache.
    home = Path(sys.prefix) if sys.prefix != sys.base_prefix else Path.home() / ".cache"
    return home / "walctl-spark-cds" / f"driver-{key}.jsa"


@pytest.fixture(scope="session", autouse=True)
def spark_class_archive(request):
    """Driver JVMs the tests start (a walctl compact's, spark-submit's, tests/spark's session) map
    the classes Spark loads from one class-data-sharing archive instead of loading them from its jars:
    ~8.6 s of CPU instead of ~15.3 s for a local job's spark-submit on this 2-core VM. The first
    session on a machine that runs tests/spark (or a Spark session fixture) dumps it in the
    background (a short local job, ~29 s of CPU, once per Java and Spark version; other sessions
    only use one already there); the JVMs that start before it is in place (renamed there whole)
    start as before. SPARK_SUBMIT_OPTS reaches only the driver JVM that spark-submit starts; -Xlog:cds=off:
    a missing or unusable archive is passed over without a word (the JVM would print a warning on
    its stdout, a --json run's)."""
    path = _archive_path()
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_suffix(".lock")
    dump = None
    if not path.exists() and any(item.nodeid.startswith("tests/spark/") or _starts_spark(item)
                                 for item in request.session.items):
        try:
            if lock.exists() and time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
                lock.unlink()
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass  # another worker dumps it
        else:
            from walctl.spark.session import JVM_CONF

            script = path.with_suffix(f".{os.getpid()}.py")
            script.write_text(_ARCHIVE_WORKLOAD)
            partial = path.with_suffix(f".{os.getpid()}.partial")
            submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
            options = f"{JVM_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={partial}"
            line = (f"{shlex.quote(submit)} --driver-java-options {shlex.quote(options)} {shlex.quote(str(script))}"
                    f" && mv {shlex.quote(str(partial))} {shlex.quote(str(path))}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_") and k != "SPARK_SUBMIT_OPTS"}
            env["PYSPARK_PYTHON"] = sys.executable
            dump = subprocess.Popen(["sh", "-c", line], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [
        before, f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]))
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before
        if dump is not None:
            if dump.poll() is None:  # the run ended first: stop it, a later run dumps again
                import signal

                os.killpg(dump.pid, signal.SIGKILL)
                dump.wait()
            for leftover in (path.with_suffix(f".{os.getpid()}.py"), path.with_suffix(f".{os.getpid()}.partial")):
                leftover.unlink(missing_ok=True)
            if not path.exists():
                lock.unlink(missing_ok=True)


# tests/testbounds.py: the per-process memory cap beside pytest-timeout's time cap; tests/suitecpu.py:
# each test's CPU, with WALCTL_TEST_CPU=PREFIX (scripts/suite_cpu.py sums it).
pytest_plugins = ["testbounds", "suitecpu"]


# The moto S3 server, buckets, stores and the fault proxy, for tests/store and tests/spark.
from s3_fixtures import *  # noqa: E402,F401,F403


@pytest.fixture(params=["auto", "aio"])
def both_engines(request, monkeypatch):
    """The test twice: on walctl's default I/O engine (io_uring where the kernel sets a ring up) and on
    native AIO, what a sandbox refusing io_uring (Docker's seccomp profile) gets. For the writer's
    full-speed, failure and slot-wait tests: `pytestmark = pytest.mark.usefixtures("both_engines")`."""
    monkeypatch.setenv("WALCTL_IO_ENGINE", request.param)
    return request.param
