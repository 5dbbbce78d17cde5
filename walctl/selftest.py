"""walctl selftest: the whole pipeline, run and checked on this machine, in a temporary directory.

On a regular file or, with ``loop``, on a fresh loop device with direct I/O, and a
temporary local object store, it runs the real commands in-process through typer's
CliRunner on ``walctl.cli.app``, so the checks see exactly what an operator or a cron job
sees (exit codes and JSON). ``compact`` alone runs as a child process in a session of its
own: Spark's JVM is its child, so stopping that session on Ctrl-C or SIGTERM stops the JVM
too (in-process, a JVM still starting would be orphaned), and Spark's console noise goes
to a log in the temporary directory.

    init, status, append (arguments; length-prefixed stdin), recover, trim, recover,
    status, upload, append --store, upload --metrics-file, ls, inspect-object --deep, read,
    read back every object, compact (Spark local[1]; optional), gc, status

and checks every answer against what it wrote. It stops at the first failed check
(the later ones depend on it) and always cleans up: the loop device is detached and
the temporary directory removed (unless ``keep``), on failure and on Ctrl-C/SIGTERM too.

It sits above the CLI (it runs it), so it imports ``walctl.cli`` lazily; it never prints.
"""

from __future__ import annotations

import base64
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

from walctl.errors import RefusedError, WalctlError

PASS, FAIL, SKIP = "pass", "fail", "skip"
# What a failed check means for the exit status (documented in the command's help and README).
CHECK_FAILED = "check"  # a wrong answer, wrong data or an unexpected exit code: exit 3
IO_FAILED = "io"  # an I/O or store failure (a command exited 6, or the file/loop device set-up): exit 6
PREREQ_MISSING = "prerequisite"  # a step's prerequisite is not installed (pyspark, Java): exit 4
EXIT_CODES = {CHECK_FAILED: 3, IO_FAILED: 6, PREREQ_MISSING: 4}

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


class _Run:
    """The state one selftest carries from step to step."""

    def __init__(self, result: SelftestResult, on_step: Callable[[Check], None] | None, debug: bool):
        self.result = result
        self.on_step = on_step
        self.debug = debug
        self.payloads = _payloads()
        self.appended: list[tuple[int, int, int]] = []  # (wal offset, stream id, stream offset), in order
        self.trimmed: set[tuple[int, int]] = set()  # (stream id, stream offset) deleted before any upload
        self.spark_log: str | None = None
        self.loop_device: str | None = None  # attached by the set-up, detached by the clean-up

    # -- running commands ---------------------------------------------------------------------
    def cli(self, *args: str, input: bytes | None = None) -> Answer:
        from typer.testing import CliRunner

        from walctl.cli import app

        argv = [str(a) for a in args]
        env = {k: None for k in os.environ if k.startswith("WALCTL_")}  # the operator's settings stay out
        runner = CliRunner()
        res = runner.invoke(app, (["--debug"] if self.debug else []) + argv, input=input, env=env)
        stderr = res.stderr
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            stderr += f"\nwalctl: error: {type(res.exception).__name__}: {res.exception}"
        if self.debug and stderr.strip():
            sys.__stderr__.write(stderr if stderr.endswith("\n") else stderr + "\n")
        if res.exit_code in (130, 143):  # SIGINT, SIGTERM (walctl.cli.command)
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
        if proc.returncode in (130, 143, -signal.SIGINT, -signal.SIGTERM):
            raise KeyboardInterrupt
        return Answer(argv, proc.returncode, stdout.decode("utf-8", "replace"), _tail(log, 1))

    def ok(self, *args: str, input: bytes | None = None, check: Check) -> Answer:
        """Run a command that must exit 0; an exit 6 is an I/O failure, anything else a wrong answer."""
        answer = self.cli(*args, input=input)
        check.exit_code = answer.exit_code
        if answer.exit_code != 0:
            kind = IO_FAILED if answer.exit_code == 6 else CHECK_FAILED
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
            check.failure = IO_FAILED if exc.exit_code == 6 else CHECK_FAILED
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
            data = store.read_all(o["key"])
            expect_eq(len(data), o["size"], f"size of object {o['key']}")
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

def selftest(*, loop: bool = False, keep: bool = False, compact: bool = True, base_dir: str | None = None,
             on_step: Callable[[Check], None] | None = None, debug: bool = False) -> SelftestResult:
    """Run every check; return the result (it never raises for a failed check).

    Args:
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
    run = _Run(result, on_step, debug)
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            try:
                set_up = run.step("set-up", lambda check: _set_up(run, base_dir),
                                  command="mkdtemp" + (" + losetup --direct-io=on -f --show" if loop else ""))
                if set_up:
                    _steps(run)
            finally:
                if run.loop_device is not None or result.work_dir:
                    _cleanup(run)
    finally:
        result.seconds = time.monotonic() - started
    return result


def _set_up(run: _Run, base_dir: str | None) -> str:
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


def _cleanup(run: _Run) -> None:
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


def _merged(ranges) -> list[tuple[int, int, int]]:
    """(stream, start, end) ranges with contiguous ones of a stream joined (an index has one per block)."""
    out: list[list[int]] = []
    for sid, start, end in sorted(ranges):
        if out and out[-1][0] == sid and out[-1][2] == start:
            out[-1][2] = end
        else:
            out.append([sid, start, end])
    return [tuple(r) for r in out]


def _steps(run: _Run) -> None:
    """The checks in order; the first failure stops the run (later steps depend on earlier ones)."""
    r = run.result
    dev, store = r.device, r.store
    state: dict = {}
    steps: list[tuple[str, str, Callable[[Check], str | None] | None]] = []

    def add(name: str, args: list[str] | str, fn: Callable[[Check], str | None] | None) -> None:
        """A step; ``args`` the walctl command line it runs (or a description), ``fn`` None: skipped."""
        steps.append((name, run.shown(*args) if isinstance(args, list) else args, fn))

    init_args = ["init", dev, "--json"] + ([] if r.loop else ["--capacity", FILE_CAPACITY])

    def init(check: Check) -> str:
        out = run.ok(*init_args, check=check).one()
        header = out["header"]
        capacity = LOOP_BACKING_BYTES if r.loop else 4 << 20
        expect_eq(header["capacity_bytes"], capacity, "header capacity")
        expect_eq(header["trim_offset"], -1, "trim offset of a new WAL")
        expect_eq(header["shutdown_type"], "graceful", "shutdown type of a new WAL")
        expect_eq(out["created"], not r.loop, "created")
        state["ring"] = header["ring_bytes"]
        return f"{header['capacity_bytes']} bytes, ring {header['ring_bytes']} bytes"
    add("init", init_args, init)

    def status_empty(check: Check) -> str:
        out = run.ok("status", dev, "--json", check=check).one()
        expect_eq((out["end_offset"], out["used_bytes"], out["free_bytes"]), (0, 0, state["ring"]),
                  "end of log, used and free bytes of an empty WAL")
        expect_eq((out["scanned"], out["records"]), (False, None), "answered from the checkpoint, records not counted")
        expect_eq(out["lock_holder_pid"], None, "lock holder")
        expect_eq(sum(1 for s in out["slots"] if s["valid"]), 2, "valid header slots")
        expect_eq(out["shutdown_type"], "graceful", "shutdown type")
        return "empty, both header slots valid, no lock holder"
    add("status (empty)", ["status", dev, "--json"], status_empty)

    def append_stream(stream: int, indexes: range, *, stdin: bool, extra: tuple = ()) -> Callable[[Check], str]:
        def do(check: Check) -> str:
            payloads = run.payloads[stream]
            if stdin:
                data = b"".join(len(payloads[i]).to_bytes(4, "big") + payloads[i] for i in indexes)
                args = ["append", dev, "--stream", str(stream), "--input", "-", "--framing", "length-prefixed",
                        "--json", *extra]
                answer = run.ok(*args, input=data, check=check)
            else:
                args = ["append", dev, "--stream", str(stream), "--json", *extra,
                        *[payloads[i].decode() for i in indexes]]
                answer = run.ok(*args, check=check)
            lines = answer.lines()
            records = [o for o in lines if o["type"] == "record"]
            expect_eq(len(records), len(indexes), "records acknowledged")
            expect_eq([o["base_offset"] for o in records], list(indexes), "stream offsets")
            expect_eq([o["payload_bytes"] for o in records], [len(payloads[i]) for i in indexes], "payload bytes")
            offsets = [o["offset"] for o in records]
            previous = run.appended[-1][0] if run.appended else -1
            expect(all(a < b for a, b in zip([previous] + offsets, offsets)),
                   f"WAL offsets must increase: {offsets} after {previous}")
            summary = lines[-1]
            expect_eq(summary["records"], len(indexes), "summary records")
            expect_eq(summary["next_base_offset"], indexes[-1] + 1, "summary next_base_offset")
            run.appended += [(off, stream, i) for off, i in zip(offsets, indexes)]
            return f"{len(indexes)} records at WAL offsets {offsets[0]}..{offsets[-1]}"
        return do

    def stream1_args(indexes, extra=()) -> str:
        return run.shown("append", dev, "--stream", "1", "--json", *extra) + f" DATA x{len(indexes)}"

    add("append (arguments)", stream1_args(range(3)), append_stream(1, range(3), stdin=False))
    add("append (stdin)", ["append", dev, "--stream", "2", "--input", "-", "--framing", "length-prefixed", "--json"],
        append_stream(2, range(3), stdin=True))

    def recover_check(label: str) -> Callable[[Check], str]:
        def do(check: Check) -> str:
            lines = run.ok("recover", dev, "--json", "--payload", "base64", check=check).lines()
            records = [o for o in lines if o["type"] == "record"]
            findings = [o for o in lines if o["type"] == "finding"]
            expect_eq(findings, [], "findings in a clean log")
            live = [(off, sid, soff) for off, sid, soff in run.appended
                    if (sid, soff) not in run.trimmed and off > state.get("trim", -1)]
            expect_eq([o["offset"] for o in records], [off for off, _, _ in live], "record offsets")
            for o, (off, sid, soff) in zip(records, live):
                expect_eq((o["stream_id"], o["base_offset"]), (sid, soff), f"stream and offset of record {off}")
                expect(base64.b64decode(o["payload"]) == run.payloads[sid][soff],
                       f"payload of record {off} differs from what was appended")
            summary = lines[-1]
            expect_eq(summary["records"], len(live), "summary records")
            expect_eq(summary["corrupt_findings"], 0, "summary corrupt findings")
            state["end"] = summary["end_offset"]
            return f"{len(records)} records{label}, payloads as appended, no findings"
        return do
    add("recover", ["recover", dev, "--json", "--payload", "base64"], recover_check(""))

    def trim(check: Check) -> str:
        first, sid, soff = run.appended[0]
        out = run.ok("trim", dev, str(first), "--scan", "--json", check=check).one()
        expect_eq((out["trim_offset"], out["records_deleted"], out["records_left"]), (first, 1, len(run.appended) - 1),
                  "trim offset, records deleted and left")
        run.trimmed.add((sid, soff))
        state["trim"] = first
        return f"trimmed to WAL offset {first}: 1 record deleted"
    add("trim", ["trim", dev, "FIRST-OFFSET", "--scan", "--json"], trim)
    add("recover (after trim)", ["recover", dev, "--json", "--payload", "base64"], recover_check(" after the trim"))

    def status_used(check: Check) -> str:
        out = run.ok("status", dev, "--scan", "--json", check=check).one()
        expect_eq(out["trim_offset"], state["trim"], "trim point")
        expect_eq(out["end_offset"], state["end"], "end of log (as recover found it)")
        expect_eq(out["used_bytes"], state["end"] - state["trim"], "used bytes (end of log - trim point)")
        expect_eq(out["used_bytes"] + out["free_bytes"], state["ring"], "used + free bytes")
        expect_eq(out["records"], len(run.appended) - 1, "records")
        expect_eq(out["shutdown_type"], "graceful", "shutdown type after clean runs")
        return f"used {out['used_bytes']} bytes ({out['used_percent']}%), free {out['free_bytes']}"
    add("status", ["status", dev, "--scan", "--json"], status_used)

    def upload(label_round: int, metrics: str | None = None) -> Callable[[Check], str]:
        def do(check: Check) -> str:
            args = ["upload", dev, "--store", store, "--json"] + (["--metrics-file", metrics] if metrics else [])
            out = run.ok(*args, check=check).one()
            pending = [a for a in run.appended if a[0] > state.get("uploaded", state["trim"])]
            expect_eq(out["records"], len(pending), "records uploaded")
            expect_eq(out["payload_bytes"], sum(len(run.payloads[s][o]) for _, s, o in pending), "payload bytes")
            expect(out["objects_made"] >= 1, "no object made")
            expect_eq(out["trimmed_to"], pending[-1][0], "WAL trimmed to the last uploaded record")
            expect(out["commit_number"] is not None, "no commit number")
            state["uploaded"] = pending[-1][0]
            state.setdefault("objects", []).extend(o["key"] for o in out["objects"])
            detail = f"{out['records']} records in {out['objects_made']} object(s), commit {out['commit_number']}"
            if metrics:
                from walctl.metrics import parse_values

                with open(metrics, encoding="utf-8") as f:
                    values = parse_values(f.read())
                expect_eq(values.get("walctl_upload_success"), 1.0, "walctl_upload_success in the metrics file")
                expect_eq(values.get("walctl_upload_records_total"), float(out["records"]),
                          "walctl_upload_records_total in the metrics file")
                detail += "; metrics file written"
            return detail
        return do
    add("upload", ["upload", dev, "--store", store, "--json"], upload(1))
    add("append --store (stream 1)", stream1_args(range(3, 5), ("--store", store)),
        append_stream(1, range(3, 5), stdin=False, extra=("--store", store)))
    add("append --store (stream 2)", ["append", dev, "--stream", "2", "--input", "-", "--framing", "length-prefixed",
                                      "--json", "--store", store],
        append_stream(2, range(3, 5), stdin=True, extra=("--store", store)))
    metrics_path = os.path.join(r.work_dir, "walctl-upload.prom")
    add("upload --metrics-file", ["upload", dev, "--store", store, "--json", "--metrics-file", metrics_path],
        upload(2, metrics_path))

    def ls(check: Check) -> str:
        out = run.ok("ls", "--store", store, "--json", check=check).one()
        want = run.expected_in_store()
        streams = {s["stream_id"]: (s["start_offset"], s["end_offset"]) for s in out["streams"]}
        expect_eq(streams, {sid: (min(v), max(v) + 1) for sid, v in want.items()}, "stream ranges")
        keys = sorted(o["key"] for o in out["objects"])
        expect_eq(keys, sorted(state["objects"]), "live objects")
        expect_eq(out["prepared"], [], "prepared ids left after clean uploads")
        state["live"] = out["objects"]
        return f"{len(streams)} streams, {len(keys)} live objects"
    add("ls", ["ls", "--store", store, "--json"], ls)

    def inspect_all(check: Check) -> str:
        entries = 0
        for o in state["live"]:
            lines = run.ok("inspect-object", str(o["id"]), "--store", store, "--deep", "--json", check=check).lines()
            summary = lines[-1]
            expect_eq(summary["problems"], 0, f"problems in object {o['key']}")
            expect_eq(summary["key"], o["key"], f"key of object {o['id']}")
            rows = [x for x in lines if x["type"] == "index_entry"]
            expect_eq(_merged((x["stream_id"], x["start_offset"], x["end_offset"]) for x in rows),
                      _merged((s["stream_id"], s["start"], s["end"]) for s in o["streams"]),
                      f"stream ranges of object {o['key']}'s index against the manifest")
            entries += len(rows)
        return f"{len(state['live'])} objects verified block by block, {entries} index entries"
    add("inspect-object --deep", ["inspect-object", "ID", "--store", store, "--deep", "--json"], inspect_all)
    add("read back objects", "read every live object in full, compare with what was appended",
        lambda check: run.read_back())

    def read_streams(check: Check) -> str:
        """`walctl read` of every stream: every payload in offset order, one summary, no finding."""
        want = run.expected_in_store()
        gets = 0
        for sid, payloads in sorted(want.items()):
            lines = run.ok("read", "--store", store, "--stream", str(sid), "--payload", "base64", "--json",
                           check=check).lines()
            recs = [x for x in lines if x["type"] == "record"]
            summary = lines[-1]
            expect_eq(summary["type"], "summary", f"last line of read --stream {sid}")
            expect_eq(summary["findings"], 0, f"findings reading stream {sid}")
            expect_eq([x["base_offset"] for x in recs], sorted(payloads), f"offsets read of stream {sid}")
            for x in recs:
                expect(base64.b64decode(x["payload"]) == payloads[x["base_offset"]],
                       f"stream {sid} offset {x['base_offset']}: read returned other bytes than appended")
            gets += summary["gets"]
        return f"{len(want)} streams read back in offset order, every payload as appended, {gets} GETs"
    add("read", ["read", "--store", store, "--stream", "ID", "--payload", "base64", "--json"], read_streams)

    compact_args = ["compact", "--store", store, "--master", COMPACT_MASTER, "--json"]

    def compact(check: Check) -> str:
        from walctl.spark.job import MissingPrerequisite, check_java, check_pyspark

        try:  # a machine without Spark's prerequisites is not a wrong answer
            check_pyspark()
            check_java()
        except MissingPrerequisite as exc:
            check.exit_code = exc.exit_code
            raise StepFailed(f"missing prerequisite: {exc.line().removeprefix('walctl: error: ')}; "
                             "--no-compact skips this step", PREREQ_MISSING) from None
        run.spark_log = os.path.join(r.work_dir, "spark.log")
        answer = run.process(*compact_args, log=run.spark_log)
        check.exit_code = answer.exit_code
        if answer.exit_code != 0:
            kind = (IO_FAILED if answer.exit_code == 6 else PREREQ_MISSING
                    if answer.exit_code == 4 and "executors cannot import" in answer.error_line() else CHECK_FAILED)
            raise StepFailed(f"exit {answer.exit_code}: {answer.error_line()} (Spark log: {_tail(run.spark_log)}; "
                             f"Spark needs Java 17; --no-compact skips this step)", kind)
        out = answer.one()
        expect(not out["idle"], "compaction found nothing to do with two Stream Set Objects")
        expect_eq(out["objects_in"], len(state["objects"]), "objects compacted")
        expect(out["commit_number"] is not None, "no commit")
        state["replaced"] = sorted(state["objects"])
        state["objects"] = [o["key"] for o in out["objects"]]
        return (f"{out['objects_in']} objects into {out['objects_out']}, commit {out['commit_number']}, "
                f"{out['seconds']} s; " + run.read_back())

    add("compact", compact_args, compact if r.compact else None)
    if r.compact:
        add("ls + inspect-object --deep (compacted)", ["inspect-object", "ID", "--store", store, "--deep", "--json"],
            lambda check: (ls(check), inspect_all(check))[1])

    def gc(check: Check) -> str:
        out = run.ok("gc", "--store", store, "--grace", "0s", "--json", check=check).one()
        replaced = state.get("replaced", [])
        expect_eq(sorted(out["deleted_objects"]), replaced, "objects deleted (those compaction replaced)")
        from walctl.store import open_store

        st = open_store(store)
        for key in replaced:
            expect(not any(i.key == key for i in st.list(key)), f"replaced object {key} still in the store")
        return f"{len(out['deleted_objects'])} replaced objects deleted; " + run.read_back()
    add("gc", ["gc", "--store", store, "--grace", "0s", "--json"], gc)

    def status_final(check: Check) -> str:
        out = run.ok("status", dev, "--scan", "--json", check=check).one()
        expect_eq(out["trim_offset"], state["uploaded"], "trim point after the uploads")
        expect_eq(out["records"], 0, "live records after everything was uploaded")
        expect_eq((out["findings"], out["shutdown_type"]), (0, "graceful"), "findings and shutdown type")
        return f"every record uploaded and trimmed; {out['used_bytes']} bytes used (the trimmed last record)"
    add("status (final)", ["status", dev, "--scan", "--json"], status_final)

    failed = False
    for name, command, fn in steps:
        if fn is None:  # shown, so a reader of the table sees what was not covered
            run.skip(name, "--no-compact", command)
        elif failed:
            run.skip(name, "not run: an earlier check failed", command)
        else:
            failed = not run.step(name, fn, command=command)
