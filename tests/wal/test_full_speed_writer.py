"""The writer and the uploader at full speed (issue 27, rows 1 and 5): a producer faster than the
uploads is held back by a full ring instead of failing, and upload's scan never locks a writer out.

Each test drives the real CLI in subprocesses on a file WAL (and a loop device where the device
matters), with an oracle built from the records it gave the writer: every acknowledged record is
in the store (or the WAL) exactly once, in order.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walctl.store import open_store

from storehelpers import read_back

# Each test on the default engine (io_uring) and on native AIO (tests/conftest.py both_engines).
pytestmark = pytest.mark.usefixtures("both_engines")

REPO_ROOT = Path(__file__).resolve().parents[2]
KiB, MiB = 1 << 10, 1 << 20
RECORDS = 40_000          # 1 KiB each: about 2.5 rings of a 16 MiB WAL
UPLOAD_AT = 1 * MiB
WAIT_S = 60.0             # a step that takes longer than this fails the test


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def walctl(*args, env: dict | None = None, timeout: float = WAIT_S, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, text=True,
                          env=_env(env), timeout=timeout, stdin=stdin if stdin is not None else subprocess.DEVNULL)


def start(*args, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(env), stdin=subprocess.DEVNULL)


def payloads(first: int, n: int) -> list[bytes]:
    return [(b"%08d" % i) * 128 for i in range(first, first + n)]


def framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in items)


def acks(stdout: str) -> list[dict]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert lines and lines[-1]["type"] == "summary", stdout[-2000:]
    return lines


def assert_store_holds_exactly(store_dir: Path, stream: int, items: list[bytes]) -> None:
    """Every record of ``items`` in the store once, at stream offsets 0.., nothing else."""
    got = read_back(open_store(str(store_dir)))
    assert set(got) == {stream}
    offsets = [o for o, _ in got[stream]]
    assert offsets == list(range(len(items))), "a record is missing or duplicated"
    assert [p for _, p in got[stream]] == items


@pytest.fixture(params=["file", "loop"])
def wal16(request, tmp_path, loop_device):
    """A new 16 MiB walctl WAL: a sparse file, or a loop device with direct I/O."""
    if request.param == "file":
        path = tmp_path / "w.img"
        proc = walctl("init", path, "--capacity", "16MiB", "--no-prewrite")
    else:
        path = loop_device(16 * MiB)
        proc = walctl("init", path)
    assert proc.returncode == 0, proc.stderr
    return str(path)


def test_append_upload_at_holds_the_producer_back_instead_of_exiting_full(wal16, tmp_path):
    """Row 1: 40 MiB from a file into a 16 MiB ring with --upload-at 1MiB (the producer is far faster
    than the uploads): the writer waits for its own uploads and trims (exit 7 "WAL full" before), each
    upload is one object of at most --upload-at, and every record ends in the store exactly once."""
    items = payloads(0, RECORDS)
    (tmp_path / "in.bin").write_bytes(framed(items))
    store = tmp_path / "store"
    proc = walctl("append", wal16, "--stream", 7, "--store", store, "--upload-at", "1MiB", "--input",
                  tmp_path / "in.bin", "--framing", "length-prefixed", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = acks(proc.stdout)
    summary = lines[-1]
    assert [r["stream_offset"] for r in lines[:-1]] == list(range(RECORDS))
    assert summary["full_waits"] > 0 and summary["background_upload"]["uploads"] > 1
    assert "WAL full: appends held back until this writer's background upload" in proc.stderr
    # what the writer's uploads left in the WAL, then nothing lost, nothing twice
    done = walctl("upload", wal16, "--store", store, "--json")
    assert done.returncode == 0, done.stderr
    assert_store_holds_exactly(store, 7, items)
    # --upload-at caps each of the writer's uploads: one object of at most 1 MiB of log
    from walctl.store import manifest as mf

    objects = mf.load_latest(open_store(str(store))).objects
    writer_objects = sorted(objects, key=lambda o: o.id)[:-1]  # the last: the final walctl upload
    assert len(writer_objects) == summary["background_upload"]["objects"]
    assert max(o.size for o in writer_objects) <= UPLOAD_AT + 64 * KiB


def _fill(wal: str, tmp_path: Path) -> int:
    """Append 1 KiB records to ``wal`` until it is full (exit 7); return how many were acknowledged."""
    (tmp_path / "fill.bin").write_bytes(framed(payloads(0, 20_000)))
    proc = walctl("append", wal, "--stream", 7, "--input", tmp_path / "fill.bin", "--framing", "length-prefixed",
                  "--json")
    assert proc.returncode == 7, proc.stderr
    assert "WAL full: nothing freed room (no uploader is running)" in proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])["records"]


def test_a_writer_started_on_a_full_wal_with_upload_at_drains_it_first(tmp_path):
    """Row 1: a restart on a full WAL exited 7 at once with 0 uploads; now its uploader drains it."""
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    filled = _fill(wal, tmp_path)
    more = payloads(filled, 5_000)
    (tmp_path / "more.bin").write_bytes(framed(more))
    store = tmp_path / "store"
    proc = walctl("append", wal, "--stream", 7, "--store", store, "--upload-at", "2MiB", "--input",
                  tmp_path / "more.bin", "--framing", "length-prefixed", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = acks(proc.stdout)[-1]
    assert summary["records"] == len(more) and summary["background_upload"]["uploads"] >= 1
    assert walctl("upload", wal, "--store", store).returncode == 0
    assert_store_holds_exactly(store, 7, payloads(0, filled) + more)


def test_a_plain_writer_waits_for_an_upload_run_beside_it(tmp_path):
    """Row 1, the cron case: a writer without --upload-at on a full WAL waits (--full-wait) and goes on
    once a 'walctl upload' run beside it trims through the hand-off; with nothing to free room it exits
    7 after the wait, saying why."""
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    filled = _fill(wal, tmp_path)
    more = payloads(filled, 2_000)
    (tmp_path / "more.bin").write_bytes(framed(more))

    started = time.monotonic()
    alone = walctl("append", wal, "--stream", 7, "--input", tmp_path / "more.bin", "--framing", "length-prefixed",
                   "--full-wait", "1s")
    assert alone.returncode == 7
    assert time.monotonic() - started >= 1.0
    assert "nothing freed room for 1 s (no uploader is running)" in alone.stderr
    assert "WAL full: appends held back until 'walctl upload'" in alone.stderr

    writer = start("append", wal, "--stream", 7, "--input", tmp_path / "more.bin", "--framing", "length-prefixed",
                   "--full-wait", "50s", "--json")
    try:
        deadline = time.monotonic() + WAIT_S
        line = ""
        while "held back" not in line and time.monotonic() < deadline:
            line = writer.stderr.readline()
        assert "held back" in line, "the writer never said it was held back"
        store = tmp_path / "store"
        up = walctl("upload", wal, "--store", store)
        assert up.returncode == 0, up.stderr
        out, err = writer.communicate(timeout=WAIT_S)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["records"] == len(more)
    assert walctl("upload", wal, "--store", store).returncode == 0
    assert_store_holds_exactly(store, 7, payloads(0, filled) + more)


def wait_at_failpoint(ready: Path, proc: subprocess.Popen) -> None:
    """Until ``proc`` holds at its failpoint (it wrote ``ready``); fail if it ends or never gets there."""
    deadline = time.monotonic() + WAIT_S
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), "upload never reached its scan"


def test_a_writer_started_during_uploads_scan_runs(tmp_path):
    """Row 5: upload held the writer lock for its whole scan, so an append started meanwhile was
    refused (exit 5); only the trim takes it now (docs/CLI.md). The record appended during the scan is
    uploaded once (now or by the next upload), nothing is called damage."""
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    first = payloads(0, 3_000)
    (tmp_path / "in.bin").write_bytes(framed(first))
    assert walctl("append", wal, "--stream", 7, "--input", tmp_path / "in.bin", "--framing",
                  "length-prefixed").returncode == 0
    ready = tmp_path / "scan.ready"
    store = tmp_path / "store"
    uploader = start("upload", wal, "--store", store, "--json",
                     env={"WALCTL_FAILPOINT": "upload-scan:hold", "WALCTL_FAILPOINT_READY": str(ready)})
    try:
        wait_at_failpoint(ready, uploader)
        late = payloads(3_000, 1)
        appended = walctl("append", wal, "--stream", 7, late[0].decode())
        assert appended.returncode == 0, appended.stderr  # exit 5 'busy' before
        ready.unlink()  # the scan goes on
        out, err = uploader.communicate(timeout=WAIT_S)
    finally:
        if uploader.poll() is None:
            uploader.kill()
            uploader.communicate()
    assert uploader.returncode == 0, err
    assert "a writer started or stopped while upload read the log" in err  # it read the log again
    again = walctl("upload", wal, "--store", store)
    assert again.returncode == 0, again.stderr
    assert_store_holds_exactly(store, 7, first + late)


def test_a_second_upload_of_a_wal_waits_for_the_first(tmp_path):
    """Issue 30: two overlapping uploads of one WAL uploaded the same records twice (a duplicate
    object, exit 5, an orphaned prepared id). The upload lease makes the second wait for the first
    (saying so), then find nothing left (after upload.LEASE_WAIT_S it would refuse, exit 5, before
    uploading anything). Here: held at the upload-scan failpoint, the first holds the lease."""
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    first = payloads(0, 2_000)
    (tmp_path / "in.bin").write_bytes(framed(first))
    assert walctl("append", wal, "--stream", 7, "--input", tmp_path / "in.bin", "--framing",
                  "length-prefixed").returncode == 0
    ready, store = tmp_path / "scan.ready", tmp_path / "store"
    one = start("upload", wal, "--store", store, "--json",
                env={"WALCTL_FAILPOINT": "upload-scan:hold", "WALCTL_FAILPOINT_READY": str(ready)})
    two = None
    try:
        wait_at_failpoint(ready, one)
        two = start("upload", wal, "--store", store, "--json")
        line = two.stderr.readline()
        assert "another upload of this WAL is running; waiting" in line
        assert two.poll() is None  # it waits: nothing uploaded twice
        ready.unlink()
        out1, err1 = one.communicate(timeout=WAIT_S)
        out2, err2 = two.communicate(timeout=WAIT_S)
    finally:
        for proc in (one, two):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert one.returncode == 0, err1
    assert two.returncode == 0, err2
    assert json.loads(out1)["records"] == len(first) and json.loads(out2)["records"] == 0
    from walctl.store import manifest as mf

    doc = mf.load_latest(open_store(str(store)))
    assert len(doc.objects) == 1 and not doc.prepared  # one object, no orphaned prepared id
    assert_store_holds_exactly(store, 7, first)
