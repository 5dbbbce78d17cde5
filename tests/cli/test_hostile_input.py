"""Hostile input, generated from the app itself (issue 30): every numeric option of every command at
0, -1, 2^63-1, 2^64, 1e23, nan and empty, and every path option at /dev/zero, a directory, a FIFO and
a missing path. No case may exit 1 (a bug), hang (each run is bounded by an alarm), print the
parser's own words ("Input should be ..."), or exit 0 having broken what it wrote: after a case
that exits 0, the WAL still reads back (``status``) and the store still checks (``check``).

The options are walked from the click commands typer builds, so an option added later is in the
table with no edit here; a string option that is neither numeric (by its type, parser or metavar)
nor a path must be named in NOT_NUMERIC_OR_PATH, or the classification test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from walctl.cli import app

VALUES = ("0", "-1", str((1 << 63) - 1), str(1 << 64), "1e23", "nan", "", "1e23GiB", "18446744073709551616GiB")
NUMERIC_METAVARS = {"SIZE", "DURATION", "SIZE/S", "MIB/S", "K/N", "IOPS", "RECORDS/S"}
# Parameters that take a path (a device, a file, a directory; a store URL is a directory path here).
PATH_PARAMS = {"device", "input_path", "store", "metrics_file", "state_file", "directory", "wal", "file", "target"}
# String parameters that are neither: names, URLs, record data, a Spark master.
NOT_NUMERIC_OR_PATH = {"data", "namespace", "endpoint_url", "master", "retention_start", "accept_gap", "ack"}
CASE_TIMEOUT_S = 20
# Cases another change fixes (owner named), each kept below as a strict xfail of its own.
ELSEWHERE: set = set()
# Each command's shortest real run on the case's own copy of a small WAL and store ({d}: its folder).
BASE = {
    "append": ["append", "{d}/wal.img", "x"],
    "init": ["init", "{d}/new.img", "--capacity", "64KiB"],
    "recover": ["recover", "{d}/wal.img"],
    "trim": ["trim", "{d}/wal.img", "4096"],
    "upload": ["upload", "{d}/wal.img", "--store", "{d}/store"],
    "salvage": ["salvage", "{d}/wal.img", "--store", "{d}/store", "--dry-run"],
    "inspect-object": ["inspect-object", "{key}", "--store", "{d}/store"],
    "ls": ["ls", "--store", "{d}/store"],
    "objects": ["objects", "--store", "{d}/store"],
    "gc": ["gc", "--store", "{d}/store"],
    "check": ["check", "--store", "{d}/store"],
    "compact": ["compact", "--store", "{d}/store", "--dry-run"],
    "status": ["status", "{d}/wal.img"],
    "selftest": ["selftest", "--no-compact", "--dir", "{d}/selftest"],
    "image": ["image", "{d}/wal.img", "{d}/out.img"],
    "bench": ["bench", "{d}/bench.img", "--size", "1MiB", "--duration", "100ms", "--mode", "iops"],
    "read": ["read", "--store", "{d}/store", "--stream", "1"],
}
# A parameter whose case needs another base: append's --input replaces the record on the command line.
BASE_FOR = {("append", "input_path"): ["append", "{d}/wal.img"]}
GROUP = get_command(app)


class CaseTimeout(BaseException):
    """Raised by the alarm: the case hung (a BaseException, so no command's handler takes it)."""


def _kind(param) -> str | None:
    """"flag", "numeric", "path", "other", or None for a string parameter nobody classified."""
    if getattr(param, "is_flag", False) or param.name in ("help",):
        return "flag"
    descriptor = param.type_descriptor
    if param.name in PATH_PARAMS:
        return "path"
    if (descriptor.annotation in (int, float) or getattr(descriptor.parameter_info, "parser", None) is not None
            or param.metavar in NUMERIC_METAVARS):
        return "numeric" if param.name not in NOT_NUMERIC_OR_PATH else "other"
    if param.name in NOT_NUMERIC_OR_PATH or isinstance(descriptor.annotation, type) \
            and descriptor.annotation.__name__ in ("Payload", "Framing", "Level", "Mode", "Engine"):
        return "other"
    return None


def _params(kind: str) -> list:
    return [pytest.param(name, p, id=f"{name}-{p.name}")
            for name, cmd in GROUP.commands.items() for p in cmd.params if _kind(p) == kind]


def test_every_string_option_is_classified():
    unclassified = [(name, p.name) for name, cmd in GROUP.commands.items() for p in cmd.params if _kind(p) is None]
    assert unclassified == []
    assert set(BASE) == set(GROUP.commands)
    assert len(_params("numeric")) > 60 and len(_params("path")) > 20


@pytest.fixture(scope="module", autouse=True)
def built_once():
    """Every run uses the one click group built above (typer's runner would build it per run: 0.2 s)."""
    import typer.testing

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", lambda _app: GROUP)
        yield


@pytest.fixture(scope="module")
def template(tmp_path_factory, built_once):
    """A 256 KiB WAL (stream 1: one record uploaded, one not) and its store."""
    folder = tmp_path_factory.mktemp("hostile-template")
    runner = CliRunner()
    for args in (["init", f"{folder}/wal.img", "--capacity", "256KiB"],
                 ["append", f"{folder}/wal.img", "hello", "--stream", "1"],
                 ["upload", f"{folder}/wal.img", "--store", f"{folder}/store"],
                 ["append", f"{folder}/wal.img", "again", "--stream", "1"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.stderr)
    keys = [str(p.relative_to(folder / "store")) for p in (folder / "store").rglob("*")
            if p.is_file() and "manifest" not in str(p)]
    assert keys, "upload wrote no object"
    (folder / "selftest").mkdir()
    return folder, sorted(keys)[0]


class Case:
    """One run: a fresh copy of the template, the command line, the run bounded by an alarm."""

    def __init__(self, template, tmp_path: Path, number: int):
        folder, self.key = template
        self.d = tmp_path / f"case{number}"
        shutil.copytree(folder, self.d)

    def base(self, command: str, param) -> list[str]:
        base = BASE_FOR.get((command, param.name), BASE[command])
        return [a.format(d=self.d, key=self.key) for a in base]

    def run(self, args: list[str]) -> tuple[int | str, str, str]:
        def alarm(*_):
            raise CaseTimeout()

        previous = signal.signal(signal.SIGALRM, alarm)
        signal.alarm(CASE_TIMEOUT_S)
        try:
            result = CliRunner().invoke(app, args)
        except CaseTimeout:
            return "hang", "", ""
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return f"exception {type(result.exception).__name__}: {result.exception}", result.stdout, result.stderr
        return result.exit_code, result.stdout, result.stderr

    def still_sound(self) -> list[str]:
        """What a case that exited 0 broke: the WAL must still read, the store still check."""
        broken = []
        for args in (["status", f"{self.d}/wal.img"], ["check", "--store", f"{self.d}/store"]):
            code, _, err = self.run(args)
            if code != 0:
                broken.append(f"afterwards `walctl {' '.join(args)}` exits {code}: {err.strip()}")
        return broken


def _with_value(args: list[str], param, value: str) -> list[str]:
    """``args`` with ``param`` set to ``value`` (an option replaced or added; an argument replaced)."""
    if param.param_type_name == "argument":
        positions = [i for i, a in enumerate(args[1:], 1) if not a.startswith("-")
                     and (i == 1 or not args[i - 1].startswith("--"))]
        index = [p.name for p in GROUP.commands[args[0]].params if p.param_type_name == "argument"].index(param.name)
        if index < len(positions):
            return [*args[:positions[index]], value, *args[positions[index] + 1:]]
        return [*args, value]
    opt = param.opts[0]
    if opt in args:
        i = args.index(opt)
        args = args[:i] + args[i + 2:]
    return [*args, opt, value]


def _judge(case: Case, args: list[str], outcome) -> list[str]:
    code, out, err = outcome
    where = f"walctl {' '.join(a.replace(str(case.d), 'D') for a in args)}"
    if code == "hang":
        return [f"{where}: still running after {CASE_TIMEOUT_S} s"]
    if not isinstance(code, int) or code == 1:
        return [f"{where}: exit {code}: {err.strip()[-300:]}"]
    problems = []
    if "Input should" in err or "Traceback" in err:
        problems.append(f"{where}: the parser's words: {err.strip()}")
    if code != 0 and "walctl: error: " not in err:
        problems.append(f"{where}: exit {code} without an error line")
    if code == 0:
        problems += [f"{where}: {p}" for p in case.still_sound()]
    return problems


@pytest.mark.parametrize("command, param", _params("numeric"))
def test_numeric_option_at_hostile_values(template, tmp_path, command, param):
    problems = []
    for n, value in enumerate(VALUES):
        case = Case(template, tmp_path, n)
        args = _with_value(case.base(command, param), param, value)
        problems += _judge(case, args, case.run(args))
    assert problems == []


def _fifo(path: Path) -> str:
    """A FIFO that a helper thread opens for writing and closes (a reader sees an empty input, EOF)."""
    os.mkfifo(path)

    def feed():
        try:
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    return str(path)


def _release(path: Path) -> None:
    """Unblock the helper thread if no reader ever opened the FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        time.sleep(0.01)
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize("command, param", _params("path"))
def test_path_option_at_non_regular_files(template, tmp_path, command, param):
    problems = []
    for n, kind in enumerate(("/dev/zero", "directory", "fifo", "missing")):
        case = Case(template, tmp_path, n)
        if kind == "directory":
            value = str(case.d / "a-directory")
            os.mkdir(value)
        elif kind == "fifo":
            value = _fifo(case.d / "a-fifo")
        elif kind == "missing":
            value = str(case.d / "missing" / "nothing-here")
        else:
            value = kind
        if (command, param.name, kind) in ELSEWHERE:
            continue
        args = _with_value(case.base(command, param), param, value)
        problems += _judge(case, args, case.run(args))
        if kind == "fifo":
            _release(case.d / "a-fifo")
    assert problems == []


@pytest.mark.parametrize("framing, source", [
    ("lines", "/dev/zero"), ("raw", "/dev/zero"), ("length-prefixed", "garbage"), ("lines", "long-line")])
def test_append_input_from_dev_zero_is_bounded(template, tmp_path, framing, source):
    """A record is cut at the WAL's largest record: exit 2 with a hint, never an unbounded read."""
    case = Case(template, tmp_path, 0)
    if source == "garbage":  # a length prefix of 2^31 bytes, then too few bytes
        path = tmp_path / "garbage.bin"
        path.write_bytes(b"\x7f\xff\xff\xf0" + b"x" * 100)
        source = str(path)
    elif source == "long-line":  # one line longer than the whole WAL
        path = tmp_path / "long.txt"
        path.write_bytes(b"ok\n" + b"y" * (os.path.getsize(case.d / "wal.img") + 1) + b"\n")
        source = str(path)
    args = ["append", f"{case.d}/wal.img", "--input", source, "--framing", framing]
    code, out, err = outcome = case.run(args)
    assert _judge(case, args, outcome) == []
    assert code == 2, err
    assert "larger than this WAL's largest record" in err and "walctl init --capacity" in err
