"""Stopping a walctl process mid-work with a signal, for the signal tests (tests/cli/test_signals.py,
tests/pipeline/test_read.py): it is started, waited for until it is mid-work, signalled, and
checked to leave no process of its run behind."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

from tests.cli.conftest import REPO_ROOT, _env


def _survivors(mark: str) -> list[int]:
    """Pids of processes whose environment carries ``mark`` (the run's children included)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def signalled(tmp_path, args, *, failpoint: str | None = None, ready_path=None, full_pipe: bool = False,
              sig=signal.SIGTERM, stdin: bytes | None = None, timeout: float = 60):
    """Start ``walctl ARGS``, wait until it is mid-work, send ``sig``; returns (code, stdout, stderr).

    Mid-work is: paused at ``failpoint``; or once ``ready_path`` exists; or (``full_pipe``) once it
    has written to stdout, which nothing reads until the signal is sent, and half a second more:
    its writes then wait on the full pipe."""
    mark = f"WALCTL_TEST_RUN={uuid.uuid4().hex}"
    ready = tmp_path / f"ready-{uuid.uuid4().hex}"
    env = _env({"WALCTL_TEST_RUN": mark.split("=", 1)[1]})
    if failpoint is not None:
        env.update(WALCTL_FAILPOINT=f"{failpoint}:pause", WALCTL_FAILPOINT_READY=str(ready))
    proc = subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(REPO_ROOT))
    try:
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        if full_pipe:
            assert select.select([proc.stdout], [], [], timeout)[0], "the command never wrote to stdout"
            time.sleep(0.5)
        wait_for = ready if failpoint is not None else ready_path
        deadline = time.monotonic() + timeout
        while wait_for is not None and not os.path.exists(wait_for):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never reached its pause point"
            time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _survivors(mark) == [], "a process of the interrupted run survived it"
    return proc.returncode, out.decode(), err.decode()
