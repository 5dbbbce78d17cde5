"""Readers racing writers with the real CLI (tests/wal/test_reader_races.py, tests/pipeline/
test_read_races.py): walctl in subprocesses, a reader stopped at a failpoint (``name:hold``) while
a writer starts, then let go; and loops bounded in time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

from tests.cli.conftest import REPO_ROOT, _env


def walctl(*args, input: bytes | None = None, env: dict | None = None, timeout: float = 60):
    """Run ``walctl ARGS`` to its end: (exit code, stdout, stderr) as text."""
    done = subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], input=input, capture_output=True,
                          env=_env(env), cwd=str(REPO_ROOT), timeout=timeout)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def start(*args, env: dict | None = None, stdin=None, stderr=subprocess.PIPE) -> subprocess.Popen:
    """Start ``walctl ARGS`` (stdout piped, stderr too unless given; text)."""
    return subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=stderr, env=_env(env), cwd=str(REPO_ROOT), text=True)


def ndjson(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Stopped:
    """``walctl ARGS`` stopped at failpoint ``name`` (``name:hold``) until ``resume()``."""

    def __init__(self, tmp_path, failpoint: str, *args, timeout: float = 30):
        self.ready = tmp_path / f"ready-{uuid.uuid4().hex}"
        self.proc = start(*args, env={"WALCTL_FAILPOINT": f"{failpoint}:hold",
                                      "WALCTL_FAILPOINT_READY": str(self.ready)})
        # Its output is read as it comes: a full pipe would stop it before the failpoint.
        self._out: dict[str, str] = {}
        self._drains = [threading.Thread(target=lambda name=name: self._out.__setitem__(
            name, getattr(self.proc, name).read())) for name in ("stdout", "stderr")]
        for drain in self._drains:
            drain.start()
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                out, err = self._ended()
                raise AssertionError(f"walctl ended (exit {self.proc.returncode}) before failpoint {failpoint}: "
                                     f"{out[-2000:]} {err[-2000:]}")
            assert time.monotonic() < deadline, f"walctl never reached failpoint {failpoint}"
            time.sleep(0.01)

    def resume(self, timeout: float = 60) -> tuple[int, str, str]:
        """Let it go on; wait for its end: (exit code, stdout, stderr)."""
        self.ready.unlink()  # (name:hold goes on once its ready file is gone)
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        out, err = self._ended()
        return self.proc.returncode, out, err

    def _ended(self) -> tuple[str, str]:
        for drain in self._drains:
            drain.join()
        return self._out.get("stdout", ""), self._out.get("stderr", "")


def clean_log(tmp_path, *, capacity: str = "32MiB", records: int = 12000, size: int = 1000,
              stream: int = 1, device: str | None = None) -> str:
    """A cleanly closed WAL holding ``records`` lines of ``size`` bytes (12 MiB by default: more than
    a scan reads ahead (8 MiB), so a scan stopped at its first event has not read the log's end yet)."""
    wal = device or str(tmp_path / "w.img")  # (device: a loop device of that capacity)
    code, out, err = walctl("init", wal, "--capacity", capacity, "--no-prewrite")
    assert code == 0, err
    line = b"x" * (size - 1) + b"\n"
    code, out, err = walctl("append", wal, "--stream", stream, "-", input=line * records)
    assert code == 0, err
    return wal
