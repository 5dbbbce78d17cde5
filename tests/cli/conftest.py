"""Fixtures for the CLI contract tests: in-process and subprocess runners, small file WALs,
byte-level damage helpers, and a real ``walctl append`` process holding the writer lock.

Everything lives in tmp_path; WALs are 64 KiB - 4 MiB so the whole CLI suite stays fast.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import functools

import pytest
import typer.main
import typer.testing

REPO_ROOT = Path(__file__).resolve().parents[2]

HEADERS = 8192  # two 4 KiB header slots; the record area (ring) starts here
RECORD_HEADER = 24  # magic, bodyLength, bodyOffset, bodyCrc, headerCrc
BATCH_HEADER = 33  # StreamRecordBatch header before the payload
ERROR_PREFIX = "walctl: error: "


def physical(offset: int, capacity: int) -> int:
    """Physical byte position of logical WAL offset ``offset`` (FORMATS.md 1)."""
    return HEADERS + offset % (capacity - HEADERS)


def flip_byte(path, position: int, mask: int = 0xFF) -> None:
    """XOR one byte of a file in place (crafted damage)."""
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(1)
        assert len(old) == 1, f"position {position} is past the end of {path}"
        f.seek(position)
        f.write(bytes([old[0] ^ mask]))


def ndjson(text: str) -> list[dict]:
    """Every non-empty stdout line must be one JSON object."""
    out = []
    for line in text.splitlines():
        if line.strip():
            obj = json.loads(line)
            assert isinstance(obj, dict), line
            out.append(obj)
    return out


def length_prefixed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


def assert_one_error_line(stderr: str, code: int | None = None) -> str:
    """The stderr rule for a non-zero exit: exactly one line, starting ``walctl: error: ``."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    assert "Traceback" not in stderr, stderr
    assert len(errors) == 1, f"expected exactly one error line on stderr, got: {stderr!r}"
    # warnings may precede the error, but nothing else may follow or look like an error
    assert lines[-1] == errors[0], f"the error line must be the last stderr line: {stderr!r}"
    return errors[0]


@dataclass
class Run:
    """What a run returned, the same shape for the in-process and the subprocess runner."""

    args: list[str]
    exit_code: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict]:
        return ndjson(self.stdout)

    def error_line(self) -> str:
        return assert_one_error_line(self.stderr)

    def __repr__(self) -> str:  # shown by pytest on a failed assert
        return (f"Run(walctl {' '.join(self.args)} -> {self.exit_code}\n"
                f"--stdout--\n{self.stdout}\n--stderr--\n{self.stderr})")


def with_bytecode(env: dict) -> dict:
    """``env`` for a child Python that keeps its compiled bytecode (__pycache__, ignored by git),
    as an installed walctl has it: without PYTHONDONTWRITEBYTECODE (set on some machines) every
    walctl process a test starts compiled the same unchanged modules again, 40 % of a short
    run's CPU. What the process runs, and which modules it imports, is the same."""
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _env(extra: dict | None) -> dict:
    env = with_bytecode(dict(os.environ))
    for key in [k for k in env if k.startswith("WALCTL_")]:
        del env[key]  # a WALCTL_* from the caller's shell must not leak into a test
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


@functools.cache
def walctl_command():
    """walctl's click group, built once a process. typer's CliRunner builds it again on every call
    (70 % of a short command's in-process cost); the build is deterministic (every option, its
    WALCTL_<OPTION> variable, the epilogs) and a run only makes contexts from it, so each call
    still runs the command exactly as a fresh build would (a process builds it once too)."""
    from walctl.cli import app

    return typer.main.get_command(app)


class CliRunner(typer.testing.CliRunner):
    """typer's CliRunner, running walctl's app through its click group built once (walctl_command)."""

    def invoke(self, app, args=None, **kwargs):
        from walctl.cli import app as walctl_app

        build = typer.testing._get_command
        typer.testing._get_command = lambda target: walctl_command() if target is walctl_app else build(target)
        try:
            return super().invoke(app, args, **kwargs)
        finally:
            typer.testing._get_command = build


@pytest.fixture
def cli(monkeypatch):
    """In-process runner: ``cli(*args, input=None, env=None) -> Run`` (typer's CliRunner)."""
    from walctl.cli import app

    for key in [k for k in os.environ if k.startswith("WALCTL_")]:
        monkeypatch.delenv(key)
    runner = CliRunner()

    def invoke(*args, input=None, env=None) -> Run:
        args = [str(a) for a in args]
        result = runner.invoke(app, args, input=input, env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            # An exception escaped the CLI: show it as a process would (traceback on stderr).
            import traceback

            tb = "".join(traceback.format_exception(result.exception))
            return Run(args, result.exit_code, result.stdout, result.stderr + tb)
        return Run(args, result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def run():
    """Subprocess runner: ``run(*args, input=bytes|None, env=None, timeout=60) -> Run``."""

    def execute(*args, input: bytes | None = None, env: dict | None = None, timeout: float = 60) -> Run:
        args = [str(a) for a in args]
        proc = subprocess.run([sys.executable, "-m", "walctl", *args], input=input if input is not None else b"",
                              capture_output=True, env=_env(env), timeout=timeout, cwd=str(REPO_ROOT))
        return Run(args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                   proc.stderr.decode("utf-8", "replace"))

    return execute


@pytest.fixture
def new_wal(tmp_path, cli):
    """Factory: ``new_wal(capacity="64KiB", name="wal.img") -> str``: a fresh, initialised file WAL."""
    counter = {"n": 0}

    def make(capacity: str = "64KiB", name: str | None = None, *extra: str) -> str:
        counter["n"] += 1
        path = str(tmp_path / (name or f"wal{counter['n']}.img"))
        res = cli("init", path, "--capacity", capacity, *extra)
        assert res.exit_code == 0, res
        return path

    return make


@pytest.fixture
def append_json(cli):
    """``append_json(dev, *data, stream=None) -> list of acknowledged offsets`` (asserts success)."""

    def do(dev: str, *data: str, stream: int | None = None, extra: tuple = ()) -> list[int]:
        args = ["append", dev, "--json", *extra]
        if stream is not None:
            args += ["--stream", str(stream)]
        res = cli(*args, *data)
        assert res.exit_code == 0, res
        lines = res.json_lines()
        return [obj["offset"] for obj in lines if obj["type"] == "record"]

    return do


class HeldWriter:
    """A ``walctl append DEV --input -`` process with stdin kept open: it holds the writer lock."""

    def __init__(self, dev: str):
        self.dev = dev
        self.proc = subprocess.Popen([sys.executable, "-m", "walctl", "append", dev, "--input", "-"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=_env(None), cwd=str(REPO_ROOT))
        self.offsets: list[int] = []

    def send(self, line: bytes) -> int:
        """Write one record (lines framing) and wait for its offset: it is durable then."""
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        if not out:
            err = self.proc.stderr.read().decode(errors="replace")
            pytest.fail(f"holding writer died before printing an offset: {err}")
        offset = int(out)
        self.offsets.append(offset)
        return offset

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """Close stdin (end of input) and collect the exit code and the rest of its output."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        out = self.proc.stdout.read()
        err = self.proc.stderr.read()
        code = self.proc.wait(timeout=timeout)
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: a crash, leaving the header 'ungraceful'."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            try:
                self.finish(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream and not stream.closed:
                stream.close()


@pytest.fixture
def held_writer():
    """Factory: ``held_writer(dev) -> HeldWriter`` that has already made one record durable."""
    writers: list[HeldWriter] = []

    def start(dev: str, first: bytes = b"held-1") -> HeldWriter:
        writer = HeldWriter(dev)
        writers.append(writer)
        writer.send(first)
        return writer

    yield start
    for writer in writers:
        writer.cleanup()


@pytest.fixture
def tools():
    """The module's helpers, for tests (conftest modules are not imported by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(physical=physical, flip_byte=flip_byte, ndjson=ndjson, length_prefixed=length_prefixed,
                           assert_one_error_line=assert_one_error_line, HEADERS=HEADERS,
                           RECORD_HEADER=RECORD_HEADER, BATCH_HEADER=BATCH_HEADER, ERROR_PREFIX=ERROR_PREFIX)
