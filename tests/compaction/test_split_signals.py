"""compact --force-split and a SIGTERM: before its commit nothing is committed (its objects are
left for gc); at its commit the commit is finished first and stands, and the line says so. Either
way one JSON document, exit 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import put_objects, read_back


def _run(tmp_path, store_dir, failpoint: str):
    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env.update(WALCTL_FAILPOINT=failpoint, WALCTL_FAILPOINT_READY=str(ready))
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "compact", "--force-split", "--json", "--store",
                             str(store_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        if failpoint.endswith(":hold"):
            time.sleep(0.2)
            ready.unlink()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors = [ln for ln in stderr.splitlines() if ln.startswith("walctl:")]
    assert len(errors) == 1, stderr
    (line,) = stdout.splitlines()
    return proc.returncode, errors[0], json.loads(line)


@pytest.mark.parametrize("committed", [False, True])
def test_sigterm_before_or_at_the_split_commit(tmp_path, committed):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    put_objects(store, [[(1, 2, 3000), (2, 1, 100)], [(1, 1, 100), (3, 1, 100)]])
    before, doc = read_back(store), mf.load_latest(store)
    code, line, out = _run(tmp_path, store_dir, "split-after-commit:hold" if committed else "split-before-commit:pause")
    assert code == 143 and out["error"]["code"] == 143 and out["error"]["signal"] == "SIGTERM"
    after = mf.load_latest(store)
    assert out["committed"] is committed and out["interrupted"] is True
    if committed:
        assert line.startswith(f"walctl: error: interrupted by SIGTERM after the commit: the force split is committed "
                               f"(commit {after.number})")
        assert out["commit_number"] == after.number and not [o for o in after.objects if o.kind == "SSO"]
    else:
        assert "interrupted by SIGTERM" in line and out["commit_number"] is None
        assert after.objects == doc.objects
    assert read_back(store) == before
