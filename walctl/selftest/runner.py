"""The machinery of a selftest run: its result, one run's state, running a command, set-up and clean-up.

The commands run in-process through typer's CliRunner on the app the selftest command itself
runs in (handed in as ``app``: nothing here imports ``walctl.cli``), so the checks see exactly
what an operator or a cron job sees (exit codes and JSON). ``compact`` alone runs as a child
process in a session of its own: Spark's JVM is its child, so stopping that session on Ctrl-C
or SIGTERM stops the JVM too (in-process, a JVM still starting would be orphaned), and Spark's
console noise goes to a log in the temporary directory. The steps themselves are the table in
walctl.selftest.steps. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from walctl.errors import (EXIT_CORRUPT, EXIT_IO, EXIT_NOT_FOUND, EXIT_SIGINT, EXIT_SIGTERM, RefusedError,
                           WalctlError)

PASS, FAIL, SKIP = "pass", "fail", "skip"
# What a failed check means for the exit status (documented in the command's help and README).
CHECK_FAILED = "check"  # a wrong answer, wrong data or an unexpected exit code: exit 3
IO_FAILED = "io"  # an I/O or store failure (a command exited 6, or the file/loop device set-up): exit 6
PREREQ_MISSING = "prerequisite"  # a step's prerequisite is not installed (pyspark, Java): exit 4
EXIT_CODES = {CHECK_FAILED: EXIT_CORRUPT, IO_FAILED: EXIT_IO, PREREQ_MISSING: EXIT_NOT_FOUND}

FILE_CAPACITY = "4MiB"  # a small WAL: the run stays well under a second without compaction
LOOP_BACKING_BYTES = 16 << 20  # the loop device's size; init takes the whole device
COMPACT_MASTER = "local[1]"  # one core: starting Spark dominates anyway (~10 s)
SEED = 20240607  # payloads are pseudo-random but the same on every run


@dataclass
class Check:
    """One step: what ran, whether its answer was right, and why not."""

    name: str
    command: str = ""  # the command line, DEVICE and STORE standing for the temporary paths
    status: str = SKIP
    seconds: float = 0.0
    detail: str = ""
    exit_code: int | None = None  # of the walctl command the step ran, if any
    failure: str | None = None  # CHECK_FAILED, IO_FAILED or PREREQ_MISSING when status is FAIL

    def to_json(self) -> dict:
        return {"name": self.name, "command": self.command, "status": self.status,
                "seconds": round(self.seconds, 3), "detail": self.detail, "exit_code": self.exit_code,
                "failure": self.failure}


@dataclass
class SelftestResult:
    """Every check in run order (set-up first, clean-up last) and where the run happened."""

    loop: bool
    compact: bool
    keep: bool
    work_dir: str | None = None
    device: str | None = None
    store: str | None = None
    direct_io: bool | None = None  # loop only: the kernel's dio flag for the device
    checks: list[Check] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        """0 when every check passed; else the first failure's code (3 wrong answer, 6 I/O)."""
        failed = self.failed
        return 0 if not failed else EXIT_CODES[failed[0].failure or CHECK_FAILED]

    def to_json(self) -> dict:
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in (PASS, FAIL, SKIP)}
        return {"passed": self.passed, "exit_code": self.exit_code, "loop": self.loop, "compact": self.compact,
                "device": self.device, "store": self.store, "direct_io": self.direct_io,
                "work_dir": self.work_dir, "kept": self.keep and self.work_dir is not None,
                "seconds": round(self.seconds, 3), "counts": counts,
                "checks": [c.to_json() for c in self.checks], "warnings": self.warnings}


class StepFailed(Exception):
    """A check found a wrong answer (or an I/O failure, with ``kind`` IO_FAILED)."""

    def __init__(self, detail: str, kind: str = CHECK_FAILED):
        super().__init__(detail)
        self.detail = detail
        self.kind = kind


@dataclass
class Answer:
    args: list[str]
    exit_code: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else "(nothing on stderr)"

    def one(self) -> dict:
        """The single JSON object a non-streaming command prints."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if len(lines) != 1:
            raise StepFailed(f"expected one JSON object on stdout, got {len(lines)} lines")
        return _loads(lines[0])

    def lines(self) -> list[dict]:
        """NDJSON: every line an object, the last one the summary."""
        out = [_loads(line) for line in self.stdout.splitlines() if line.strip()]
        if not out or out[-1].get("type") != "summary":
            raise StepFailed("NDJSON output does not end with a summary line")
        if sum(1 for o in out if o.get("type") == "summary") != 1:
            raise StepFailed("NDJSON output has more than one summary line")
        return out


def _loads(line: str) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise StepFailed(f"stdout line is not JSON: {line[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise StepFailed(f"stdout line is not a JSON object: {line[:80]!r}")
    return obj


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise StepFailed(what)


def expect_eq(found, expected, what: str) -> None:
    if found != expected:
        raise StepFailed(f"{what}: expected {expected!r}, found {found!r}")


def _payloads() -> dict[int, list[bytes]]:
    """What the run appends, by stream, in stream-offset order (rounds 1 and 2)."""
    rng = random.Random(SEED)
    return {
        # stream 1: text records given as arguments
        1: [f"selftest stream 1 record {i} \u00e9\u6f22".encode() for i in range(5)],
        # stream 2: binary records through stdin, length-prefixed; one spans several 4 KiB blocks
        2: [b"\x00binary\xff\n\r", rng.randbytes(10_000), b"z" * 3000, rng.randbytes(1), rng.randbytes(5000)],
    }


class Run:
    """The state one selftest carries from step to step."""

    def __init__(self, result: SelftestResult, on_step: Callable[[Check], None] | None, debug: bool, app):
        self.result = result
        self.on_step = on_step
        self.debug = debug
        self.app = app  # the typer app the commands run in
        self.state: dict = {}  # what a step found that a later one checks against
        self.payloads = _payloads()
        self.appended: list[tuple[int, int, int]] = []  # (wal offset, stream id, stream offset), in order
        self.trimmed: set[tuple[int, int]] = set()  # (stream id, stream offset) deleted before any upload
        self.spark_log: str | None = None
        self.loop_device: str | None = None  # attached by the set-up, detached by the clean-up

    # -- running commands ---------------------------------------------------------------------
    def cli(self, *args: str, input: bytes | None = None) -> Answer:
        from typer.testing import CliRunner

        argv = [str(a) for a in args]
        env = {k: None for k in os.environ if k.startswith("WALCTL_")}  # the operator's settings stay out
        runner = CliRunner()
        res = runner.invoke(self.app, (["--debug"] if self.debug else []) + argv, input=input, env=env)
        stderr = res.stderr
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            stderr += f"\nwalctl: error: {type(res.exception).__name__}: {res.exception}"
        if self.debug and stderr.strip():
            sys.__stderr__.write(stderr if stderr.endswith("\n") else stderr + "\n")
        if res.exit_code in (EXIT_SIGINT, EXIT_SIGTERM):  # the command was interrupted
            # The command caught Ctrl-C or SIGTERM (and turned it into its exit status): the
            # whole selftest stops, cleaning up, rather than failing one check and going on.
            raise KeyboardInterrupt
        return Answer(argv, res.exit_code, res.stdout, stderr)

    def process(self, *args: str, log: str, timeout_s: float = 600) -> Answer:
        """Run a command in a child process of its own session, its stderr into ``log``.

        For compact: Spark's JVM is a child of the command, so stopping the session's process
        group on Ctrl-C, SIGTERM or a timeout stops the JVM too; in-process, a JVM still
        starting when the run is interrupted would be orphaned. Its console noise goes to the log.
        """
        import walctl

        argv = [str(a) for a in args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
        root = os.path.dirname(os.path.dirname(os.path.abspath(walctl.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-m", "walctl"] + (["--debug"] if self.debug else []) + argv
        with open(log, "ab") as err:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                    env=env, cwd=self.result.work_dir, start_new_session=True)
            try:
                stdout, _ = proc.communicate(timeout=timeout_s)
            except BaseException as exc:
                _stop_group(proc)
                if isinstance(exc, subprocess.TimeoutExpired):
                    raise StepFailed(f"no answer after {timeout_s:.0f} s (stopped)") from exc
                raise
        _reap_group(proc.pid)
        if proc.returncode in (EXIT_SIGINT, EXIT_SIGTERM, -signal.SIGINT, -signal.SIGTERM):
            raise KeyboardInterrupt
        return Answer(argv, proc.returncode, stdout.decode("utf-8", "replace"), _tail(log, 1))

    def ok(self, *args: str, input: bytes | None = None, check: Check) -> Answer:
        """Run a command that must exit 0; an exit 6 is an I/O failure, anything else a wrong answer."""
        answer = self.cli(*args, input=input)
        check.exit_code = answer.exit_code
        if answer.exit_code != 0:
            kind = IO_FAILED if answer.exit_code == EXIT_IO else CHECK_FAILED
            raise StepFailed(f"exit {answer.exit_code}: {answer.error_line()}", kind)
        return answer

    def shown(self, *args: str) -> str:
        """The command line as the table shows it: temporary paths by their role."""
        words = ["walctl"]
        for a in args:
            a = str(a)
            if a == self.result.device:
                a = "DEVICE"
            elif a == self.result.store:
                a = "STORE"
            elif self.result.work_dir and a.startswith(self.result.work_dir + os.sep):
                a = "TMP/" + os.path.relpath(a, self.result.work_dir)
            words.append(a)
        return " ".join(words)

    def step(self, name: str, fn: Callable[[Check], str | None], *, command: str = "") -> bool:
        """Run one step, recording its check; a failed check does not raise. Returns whether it passed."""
        check = Check(name, command)
        started = time.monotonic()
        try:
            check.detail = fn(check) or ""
            check.status = PASS
        except StepFailed as exc:
            check.status, check.detail, check.failure = FAIL, exc.detail, exc.kind
        except OSError as exc:
            check.status, check.detail, check.failure = FAIL, f"{type(exc).__name__}: {exc}", IO_FAILED
        except WalctlError as exc:  # raised by the read-back through the engine
            check.status, check.detail = FAIL, exc.line().removeprefix("walctl: error: ")
            check.failure = IO_FAILED if exc.exit_code == EXIT_IO else CHECK_FAILED
        except (KeyError, IndexError, TypeError) as exc:  # an answer without a field its contract promises
            check.status, check.failure = FAIL, CHECK_FAILED
            check.detail = f"unexpected answer ({type(exc).__name__}: {exc})"
        except BaseException:
            check.status, check.detail = FAIL, "interrupted"
            raise
        finally:
            check.seconds = time.monotonic() - started
            self.result.checks.append(check)
            if self.on_step is not None:
                self.on_step(check)
        return check.status == PASS

    def skip(self, name: str, reason: str, command: str = "") -> None:
        check = Check(name, command, SKIP, 0.0, reason)
        self.result.checks.append(check)
        if self.on_step is not None:
            self.on_step(check)

    # -- what the store must hold ---------------------------------------------------------------
    def expected_in_store(self) -> dict[int, dict[int, bytes]]:
        out: dict[int, dict[int, bytes]] = {}
        for _, sid, soff in self.appended:
            if (sid, soff) not in self.trimmed:
                out.setdefault(sid, {})[soff] = self.payloads[sid][soff]
        return out

    def read_back(self) -> str:
        """Read every live object in full and compare each batch with what was appended."""
        from walctl.format import object as obj
        from walctl.store import manifest as mf
        from walctl.store import open_store

        store = open_store(self.result.store)
        doc = mf.load_latest(store)
        got: dict[int, dict[int, bytes]] = {}
        for o in doc.objects:
            data = store.read_all(o.key)
            expect_eq(len(data), o.size, f"size of object {o.key}")
            footer, entries = obj.parse_tail(data, len(data))
            if entries is None:
                entries = obj.decode_index(data[footer.index_start_position:footer.index_start_position +
                                                footer.index_block_length], footer,
                                           base_position=footer.index_start_position)
            for entry in entries:
                for batch in obj.iter_blocks(data, entry):
                    expect_eq(batch.count, 1, f"record count of a batch of stream {batch.stream_id}")
                    slot = got.setdefault(batch.stream_id, {})
                    expect(batch.base_offset not in slot,
                           f"stream {batch.stream_id} offset {batch.base_offset} is in two live objects")
                    slot[batch.base_offset] = batch.payload
        want = self.expected_in_store()
        expect_eq(sorted(got), sorted(want), "streams in the live objects")
        for sid in want:
            expect_eq(sorted(got[sid]), sorted(want[sid]), f"stream {sid} offsets in the live objects")
            for soff, payload in want[sid].items():
                expect(got[sid][soff] == payload, f"stream {sid} offset {soff}: payload differs from what was "
                                                  f"appended ({len(got[sid][soff])} bytes read, {len(payload)} "
                                                  f"written)")
        for sid, span in doc.streams.items():
            if sid in want:
                expect_eq((span.start, span.end), (min(want[sid]), max(want[sid]) + 1),
                          f"manifest range of stream {sid}")
        records = sum(len(v) for v in want.values())
        return f"{len(doc.objects)} objects, {records} records, every payload as appended"


# -- set-up and clean-up ------------------------------------------------------------------------

def _attach_loop(backing: str) -> str:
    try:
        proc = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", backing], capture_output=True,
                              text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StepFailed(f"losetup failed: {exc}", IO_FAILED) from exc
    device = proc.stdout.strip()
    if proc.returncode != 0 or not device.startswith("/dev/"):
        raise StepFailed(f"losetup --direct-io=on -f --show failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip() or proc.stdout.strip()}", IO_FAILED)
    return device


def _loop_direct_io(device: str) -> bool | None:
    try:
        with open(f"/sys/block/{os.path.basename(device)}/loop/dio", encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def _detach_loop(device: str) -> str | None:
    """Detach; returns an error text, or None when done."""
    try:
        proc = subprocess.run(["losetup", "-d", device], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"losetup -d {device}: {exc}"
    if proc.returncode != 0:
        return f"losetup -d {device} failed (exit {proc.returncode}): {proc.stderr.strip()}"
    return None


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group (the command and its JVM), then SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The command is gone; its JVM (same group) may still be shutting down: make sure.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break


def _reap_group(pgid: int, grace_s: float = 5.0) -> None:
    """After the command ended: its JVM exits once its stdin closes; stop it if it lingers."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        time.sleep(1.0)


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM (a CI job's timeout, systemd) unwinds like Ctrl-C, so clean-up still runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _tail(path: str | None, lines: int = 3) -> str:
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = [line.strip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(text[-lines:])


# -- the run --------------------------------------------------------------------------------------

def selftest(app, steps, *, loop: bool = False, keep: bool = False, compact: bool = True, base_dir: str | None = None,
             on_step: Callable[[Check], None] | None = None, debug: bool = False) -> SelftestResult:
    """Run every check; return the result (it never raises for a failed check).

    Args:
        app: the typer app whose commands the steps run (the one ``walctl selftest`` runs in).
        steps: the table of steps (walctl.selftest.steps.STEPS).
        loop: use a fresh loop device with direct I/O (needs root and losetup).
        keep: leave the temporary directory (WAL or loop backing file, store, logs) in place.
        compact: run the compaction step (Spark local[1], ~10-15 s).
        base_dir: where the temporary directory is made (default: $TMPDIR or /tmp).
        on_step: called with each check as it ends (progress).
        debug: pass --debug to the commands and copy their stderr to ours.
    Raises:
        RefusedError: ``loop`` without root, or without losetup.
    """
    if loop:
        if os.geteuid() != 0:
            raise RefusedError("selftest --loop needs root (it attaches a loop device)",
                               hint="run it as root, or without --loop to test on a file")
        if shutil.which("losetup") is None:
            raise RefusedError("selftest --loop needs losetup, which is not installed",
                               hint="install util-linux, or run without --loop")
    result = SelftestResult(loop=loop, compact=compact, keep=keep)
    run = Run(result, on_step, debug, app)
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            try:
                set_up = run.step("set-up", lambda check: _set_up(run, base_dir),
                                  command="mkdtemp" + (" + losetup --direct-io=on -f --show" if loop else ""))
                if set_up:
                    run_steps(run, steps)
            finally:
                if run.loop_device is not None or result.work_dir:
                    _cleanup(run)
    finally:
        result.seconds = time.monotonic() - started
    return result


def _set_up(run: Run, base_dir: str | None) -> str:
    """The temporary directory, and the WAL's path in it or a loop device backed by a file in it."""
    result = run.result
    result.work_dir = tempfile.mkdtemp(prefix="walctl-selftest-", dir=base_dir)
    result.store = os.path.join(result.work_dir, "store")
    if not result.loop:
        result.device = os.path.join(result.work_dir, "wal.img")
        return f"TMP = {result.work_dir}; DEVICE = TMP/wal.img, STORE = TMP/store"
    backing = os.path.join(result.work_dir, "loop-backing.img")
    with open(backing, "wb") as f:
        f.truncate(LOOP_BACKING_BYTES)
    run.loop_device = result.device = _attach_loop(backing)
    result.direct_io = _loop_direct_io(run.loop_device)
    if result.direct_io is False:
        result.warnings.append(f"{run.loop_device}: the kernel did not enable direct I/O on the loop device "
                               f"(the file system of {result.work_dir} may not support O_DIRECT)")
    dio = {True: "on", False: "OFF", None: "unknown"}[result.direct_io]
    return (f"TMP = {result.work_dir}; DEVICE = {run.loop_device} (direct I/O {dio}) backed by "
            f"TMP/loop-backing.img, STORE = TMP/store")


def _cleanup(run: Run) -> None:
    result = run.result
    loop_device = run.loop_device

    def clean(check: Check) -> str:
        done, problems = [], []
        if loop_device is not None:
            error = _detach_loop(loop_device)
            if error:
                problems.append(error)
            else:
                done.append(f"detached {loop_device}")
        if result.work_dir and not result.keep:
            shutil.rmtree(result.work_dir, ignore_errors=True)
            if os.path.exists(result.work_dir):
                problems.append(f"could not remove {result.work_dir}")
            else:
                done.append(f"removed {result.work_dir}")
        elif result.work_dir:
            done.append(f"kept {result.work_dir}")
        if problems:
            raise StepFailed("; ".join(problems), IO_FAILED)
        return "; ".join(done)

    actions = (["losetup -d DEVICE"] if loop_device else []) + ["rm -r TMP" if not result.keep else "keep TMP"]
    run.step("clean-up", clean, command=" + ".join(actions))


def run_steps(run: Run, steps) -> None:
    """The steps in order; the first failure stops the run (later steps depend on earlier ones).

    A step with ``compact`` set is shown as skipped under --no-compact (so a reader of the table
    sees what was not covered); one with ``after_compact`` set is left out then.
    """
    failed = False
    for step in steps:
        if step.after_compact and not run.result.compact:
            continue
        command = step.command(run)
        if step.compact and not run.result.compact:
            run.skip(step.name, "--no-compact", command)
        elif failed:
            run.skip(step.name, "not run: an earlier check failed", command)
        else:
            failed = not run.step(step.name, lambda check, fn=step.check: fn(run, check), command=command)
