"""compact and a SIGTERM at its commit (issue 30): the commit is finished and stands, the SO level
is not started, the run exits 143 saying it is committed, and --json prints one document: the
result with the error in it. The same run checks the outputs' per-range crcs (issue 31 item 4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from walctl.format.crc import crc32c
from walctl.pipeline.upload import upload
from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import append, expect, make_wal, merge, read_back

KiB = 1 << 10


def _ssos(tmp_path, store, rounds=3):
    wal = make_wal(tmp_path)
    appended: dict = {}
    for _ in range(rounds):
        appended = merge(appended, append(wal, {s: (8, 3000) for s in (1, 2, 3)}, store))
        upload(wal, store, block_size=2 * KiB)
    return appended


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env.update(extra)
    return env


@pytest.mark.slow
def test_sigterm_at_the_commit_is_committed_one_document_exit_143(tmp_path):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    appended = _ssos(tmp_path, store)
    before = mf.load_latest(store)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "compact", "--store", str(store_dir), "--master",
                             "local[1]", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(WALCTL_FAILPOINT="compact-after-commit:hold", WALCTL_FAILPOINT_READY=str(ready)),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():  # held inside the commit's block, the commit written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "compact never reached its commit"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # held until the commit's block ends
        time.sleep(0.2)  # (the handler runs between two bytecodes of the held loop)
        ready.unlink()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, stderr[-3000:]
    errors = [ln for ln in stderr.splitlines() if ln.startswith("walctl:")]
    assert len(errors) == 1, stderr
    after = mf.load_latest(store)
    assert after.number > before.number
    assert errors[0].startswith(f"walctl: error: interrupted by SIGTERM after the commit: the compaction is "
                                f"committed (commit {after.number}); the SO level did not start")
    assert "rolled back" not in stderr
    (line,) = stdout.splitlines()  # one document
    out = json.loads(line)
    assert out["commit_number"] == after.number and out["committed"] is True and out["interrupted"] is True
    assert out["error"]["code"] == 143 and out["error"]["signal"] == "SIGTERM"
    assert "committed" in out["error"]["message"] and "so" not in out
    # committed: the SSOs were replaced, nothing lost
    assert len([o for o in after.objects if o.kind == "SSO"]) < len([o for o in before.objects if o.kind == "SSO"])
    assert read_back(store) == expect(appended)
    # the outputs' ranges carry their crcs, combined from the tasks' (issue 31 item 4)
    for o in after.objects:
        data = store.read_all(o.key)
        position = 0
        for r in o.ranges:
            assert r.crc == crc32c(data[position:position + r.bytes]), (o.key, r)
            position += r.bytes


_PRINT = r"""
import os, signal, sys
from walctl.cli.boundary import Interrupted, signals_interrupt
from walctl.commands.compact import _print_result

def render(out):  # a SIGTERM lands while the finished result is printed
    print("first half", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    print("second half", flush=True)

try:
    with signals_interrupt():
        _print_result({"done": True}, JSON, render)
        os.kill(os.getpid(), signal.SIGTERM)  # and one more after it: ignored while walctl exits
        print("returned", file=sys.stderr)
except Interrupted:
    print("interrupted", file=sys.stderr)
    sys.exit(143)
"""


@pytest.mark.parametrize("json_out", [False, True])
def test_a_signal_while_the_result_is_printed_changes_nothing(json_out):
    script = _PRINT.replace("JSON", str(json_out))
    if json_out:  # the SIGTERM lands as the document is written
        script = script.replace("try:\n", "import walctl.commands.compact as c\nwrite = c.emit_json\n"
                                "c.emit_json = lambda o: (os.kill(os.getpid(), signal.SIGTERM), write(o))\ntry:\n", 1)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "returned\n", proc.stderr
    if json_out:
        (line,) = proc.stdout.splitlines()
        assert json.loads(line)["done"] is True and "error" not in line
    else:
        assert proc.stdout == "first half\nsecond half\n"
