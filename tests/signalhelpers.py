"""Stopping a walctl process mid-work with a signal, for the signal tests (tests/cli/test_signals.py,
tests/pipeline/test_read.py): it is started, waited for until it is mid-work, signalled, and
checked to leave no process of its run behind."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Iterator

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


F_GETPIPE_SZ = 1032  # fcntl.F_GETPIPE_SZ (Linux's number)
PIPE_BUF = 4096  # a pipe write of at most this many bytes is atomic: it waits for that much room


def _feeder(fd: int, feed: Iterator[bytes]) -> None:
    """Write ``feed`` to the pipe ``fd`` until it ends or the reader is gone; the pipe stays open
    (no end of input) while the feed lasts."""
    try:
        for chunk in feed:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
    except OSError:
        pass  # the command exited: EPIPE
    finally:
        os.close(fd)


def _wait_full(stdout, deadline: float) -> None:
    """Until the unread pipe on ``stdout`` is full: less room left in it than one atomic write, so
    the command's next line waits for a reader."""
    fd = stdout.fileno()
    while True:
        buf = bytearray(4)
        fcntl.ioctl(fd, termios.FIONREAD, buf)
        if int.from_bytes(buf, sys.byteorder) >= fcntl.fcntl(fd, F_GETPIPE_SZ) - PIPE_BUF:
            return
        assert time.monotonic() < deadline, "the command never filled its stdout pipe"
        time.sleep(0.01)


def signalled(tmp_path, args, *, failpoint: str | None = None, ready_path=None, full_pipe: bool = False,
              sig=signal.SIGTERM, stdin: bytes | None = None, feed: Iterator[bytes] | None = None,
              timeout: float = 60):
    """Start ``walctl ARGS``, wait until it is mid-work, send ``sig``; returns (code, stdout, stderr).

    Mid-work is: paused at ``failpoint``; or once ``ready_path`` exists; or (``full_pipe``) once
    its stdout pipe, which nothing reads until the signal is sent, is full: its writes then wait
    on it. ``stdin`` is written to its stdin at the start (left open); ``feed`` is written to it by
    a thread for as long as the feed lasts or the command runs, so an endless feed never lets the
    command reach the end of its input."""
    mark = f"WALCTL_TEST_RUN={uuid.uuid4().hex}"
    ready = tmp_path / f"ready-{uuid.uuid4().hex}"
    env = _env({"WALCTL_TEST_RUN": mark.split("=", 1)[1]})
    if failpoint is not None:
        env.update(WALCTL_FAILPOINT=f"{failpoint}:pause", WALCTL_FAILPOINT_READY=str(ready))
    feed_read = None
    if feed is not None:
        feed_read, feed_write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)],
                            stdin=subprocess.PIPE if feed_read is None else feed_read,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(REPO_ROOT))
    if feed_read is not None:
        os.close(feed_read)
        threading.Thread(target=_feeder, args=(feed_write, feed), daemon=True).start()
    try:
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        if full_pipe:
            _wait_full(proc.stdout, time.monotonic() + timeout)
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
