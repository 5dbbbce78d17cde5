"""Exit codes of every error class for every command (docs/CLI.md "Exit codes"), and the error
output rules: exactly one stderr line ``walctl: error: ...`` (no traceback) on any non-zero exit,
stdout only data, and with --json the closing object carries ``"error": {"code", "message"}``.

Each scenario runs as a real process (``python -m walctl``: its exit status, one error line, no
traceback) and, where --json applies, in-process with --json (typer's CliRunner: the closing object
carries the error, the exit code and error line again). A third run, in-process without --json,
asserted a subset of what the real process's run asserts, over the same scenario: it was dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import pytest

CAP = 64 << 10






@dataclass
class Ctx:
    tmp_path: object
    new_wal: Callable
    cli: Callable
    tools: object
    held_writer: Callable

    def populated(self, capacity: str = "64KiB", *data: str) -> tuple[str, list[int]]:
        dev = self.new_wal(capacity)
        res = self.cli("append", dev, *(data or ("a", "b", "c")))
        assert res.exit_code == 0, res
        return dev, [int(x) for x in res.stdout.split()]

    def corrupt(self, checkpoint: bool = True) -> tuple[str, list[int]]:
        """A cleanly closed log with one flipped payload byte in its first record.

        ``checkpoint=False``: without the header slots' checkpoints (as walctl wrote before them),
        so writers scan the log; with one, append and trim read only the headers (FORMATS.md 1.6).
        """
        dev, offsets = self.populated("64KiB", "hello", "world", "again")
        self.tools.flip_byte(dev, self.tools.physical(offsets[0], CAP) + 24 + 33 + 1)
        if not checkpoint:
            with open(dev, "r+b") as f:
                for slot in (0, 4096):
                    f.seek(slot + 64)
                    f.write(bytes(4096 - 64))
        return dev, offsets

    def file(self, name: str, data: bytes) -> str:
        path = self.tmp_path / name
        path.write_bytes(data)
        return str(path)


# Each scenario: build(ctx) -> (args, stdin bytes or None); expected code; whether --json applies
# (the closing JSON object must then carry the error).
@dataclass
class Scenario:
    id: str
    build: Callable[[Ctx], tuple[list, bytes | None]]
    code: int
    json: bool = True
    bug: str | None = None
    message: tuple[str, ...] = ()  # substrings the error line must contain
    click_usage: bool = False  # rejected by click's parser, before the command runs

    def param(self):
        marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {self.bug}")] if self.bug else []
        return pytest.param(self, id=self.id, marks=marks)


def _init_new(c: Ctx):
    return ["init", c.tmp_path / "fresh.img", "--capacity", "64KiB"], None


def _init_smaller_device(c: Ctx):
    dev = c.file("small.img", bytes(32 << 10))
    return ["init", dev, "--capacity", "64KiB"], None


def _init_1gb_on_1mib(c: Ctx):
    dev = c.tmp_path / "onemib.img"
    with open(dev, "wb") as f:
        f.truncate(1 << 20)
    return ["init", dev, "--capacity", "1GB"], None


def _init_held(c: Ctx):
    dev = c.new_wal("256KiB")
    c.held_writer(dev)
    return ["init", dev, "--capacity", "256KiB", "--force"], None


def _append_full(c: Ctx):
    dev = c.new_wal("64KiB")
    return (["append", dev, "--input", "-", "--framing", "length-prefixed"],
            c.tools.length_prefixed([b"f" * 3000] * 40))


def _append_held(c: Ctx):
    dev = c.new_wal("256KiB")
    c.held_writer(dev)
    return ["append", dev, "second"], None


def _trim_held(c: Ctx):
    dev = c.new_wal("256KiB")
    w = c.held_writer(dev)
    return ["trim", dev, w.offsets[0]], None


def _random(c: Ctx) -> str:
    return c.file("random.img", os.urandom(CAP))


def _zeros(c: Ctx) -> str:
    return c.file("zeros.img", bytes(CAP))


def _both_slots_damaged(c: Ctx) -> str:
    dev, _ = c.populated()
    c.tools.flip_byte(dev, 13)
    c.tools.flip_byte(dev, 4096 + 13)
    return dev


def _mid_record_header_flip(c: Ctx) -> str:
    """Flip a byte in the header of a record in the middle of the log (a 4 KiB aligned one)."""
    # One append per record: each closes its block, so every record after the first starts a block
    # (records given to one append are packed into a block together).
    dev = c.new_wal("64KiB")
    offsets = []
    for data in ("r0", "r1", "r2", "r3"):
        res = c.cli("append", dev, data)
        assert res.exit_code == 0, res
        offsets += [int(x) for x in res.stdout.split()]
    aligned = [o for o in offsets[1:-1] if o % 4096 == 0]
    assert aligned, offsets
    c.tools.flip_byte(dev, c.tools.physical(aligned[0], CAP) + 1)
    return dev


def _mid_block_record_header_flip(c: Ctx) -> str:
    """A block of several records inside one 4 KiB page, followed by another block; flip a byte in
    the header of the block's 3rd record: the records after it in the block are lost."""
    import threading

    from walctl.device import FaultyDevice, open_device
    from walctl.format.batch import StreamRecordBatch
    from walctl.wal.headers import read_headers
    from walctl.wal.writer import WalWriter

    class Gated(FaultyDevice):  # holds record-area writes: the only I/O slot stays busy
        def pwrite(self, offset, buf):
            if offset >= 8192:
                gate.wait()
            super().pwrite(offset, buf)

    dev = c.new_wal("64KiB")
    gate = threading.Event()
    raw = Gated(open_device(str(dev), writable=True))
    offsets: list[int] = []
    writer = WalWriter(raw, read_headers(raw), 0, iodepth=1, on_ack=lambda o, t: offsets.append(o))
    for i in range(5):  # r0 alone (in flight, held), then r1..r4 batched into one block
        writer.append(StreamRecordBatch(0, 0, i, 1, b"r%d" % i).encode(), i)
    gate.set()
    writer.close()
    assert c.cli("append", dev, "later").exit_code == 0  # a later block
    unaligned = [o for o in offsets if o % 4096]
    assert len(unaligned) >= 2, f"records must share a block: {offsets}"
    c.tools.flip_byte(dev, c.tools.physical(unaligned[1], CAP) + 1)
    return dev


def _crash_tail(c: Ctx) -> str:
    dev = c.new_wal("256KiB")
    w = c.held_writer(dev, b"one")
    last = w.send(b"two")
    w.kill()
    c.tools.flip_byte(dev, c.tools.physical(last, 256 << 10) + 24 + 33 + 1)
    return dev


def _recover_held(c: Ctx) -> str:
    dev = c.new_wal("256KiB")
    c.held_writer(dev)
    return dev


def _missing(c: Ctx) -> str:
    return str(c.tmp_path / "no-such.img")


SCENARIOS = [
    # ---- init
    Scenario("init-0-new-file", _init_new, 0),
    Scenario("init-0-larger-device", lambda c: (["init", c.file("big.img", bytes(256 << 10)), "--capacity", "64KiB"],
                                                None), 0),
    Scenario("init-0-force", lambda c: (["init", c.new_wal("64KiB"), "--capacity", "64KiB", "--force"], None), 0),
    Scenario("init-2-bad-size", lambda c: (["init", c.tmp_path / "x.img", "--capacity", "12XB"], None), 2,
             message=("12XB",)),
    Scenario("init-2-smaller-device", _init_smaller_device, 2, message=("32768", "65536")),
    Scenario("init-2-1GB-on-1MiB-device", _init_1gb_on_1mib, 2, message=("1048576", "999997440")),
    Scenario("init-2-capacity-too-small", lambda c: (["init", c.tmp_path / "t.img", "--capacity", "4KiB"], None), 2),
    Scenario("init-2-no-capacity-for-new-file", lambda c: (["init", c.tmp_path / "nocap.img"], None), 2),
    Scenario("init-2-unknown-option", lambda c: (["init", c.tmp_path / "u.img", "--capacity", "64KiB", "--bogus"],
                                                 None), 2, json=False, click_usage=True),
    Scenario("init-4-no-parent-dir", lambda c: (["init", c.tmp_path / "nodir" / "w.img", "--capacity", "64KiB"],
                                                None), 4),
    Scenario("init-5-already-a-wal", lambda c: (["init", c.new_wal("64KiB"), "--capacity", "64KiB"], None), 5,
             message=("--force",)),
    Scenario("init-5-held-by-writer", _init_held, 5),
    # ---- append
    Scenario("append-0", lambda c: (["append", c.new_wal("64KiB"), "a", "b"], None), 0),
    Scenario("append-0-stdin", lambda c: (["append", c.new_wal("64KiB"), "--input", "-"], b"x\ny\n"), 0),
    Scenario("append-2-missing-input-file", lambda c: (["append", c.new_wal("64KiB"), "--input",
                                                        c.tmp_path / "absent.txt"], None), 2, message=("absent.txt",)),
    Scenario("append-2-data-and-input", lambda c: (["append", c.new_wal("64KiB"), "--input", "-", "d"], b"x\n"), 2),
    Scenario("append-2-nothing-to-append", lambda c: (["append", c.new_wal("64KiB")], None), 2),
    Scenario("append-2-truncated-length-prefix", lambda c: (["append", c.new_wal("64KiB"), "--input", "-",
                                                             "--framing", "length-prefixed"],
                                                            b"\x00\x00\x00\x05ab"), 2),
    Scenario("append-2-unknown-option", lambda c: (["append", c.new_wal("64KiB"), "--bogus", "a"], None), 2,
             json=False, click_usage=True),
    Scenario("append-2-bad-framing", lambda c: (["append", c.new_wal("64KiB"), "--input", "-", "--framing", "csv"],
                                                b"x\n"), 2, json=False, click_usage=True),
    Scenario("append-2-negative-stream", lambda c: (["append", c.new_wal("64KiB"), "--stream", "-1", "a"], None), 2,
             json=False, click_usage=True),
    Scenario("append-3-corrupt-log", lambda c: (["append", c.corrupt(checkpoint=False)[0], "more"], None), 3),
    Scenario("append-4-no-such-device", lambda c: (["append", _missing(c), "a"], None), 4),
    Scenario("append-4-zeros", lambda c: (["append", _zeros(c), "a"], None), 4),
    Scenario("append-4-random", lambda c: (["append", _random(c), "a"], None), 4),
    Scenario("append-5-busy", _append_held, 5),
    Scenario("append-7-full", _append_full, 7, message=("WAL full", "trim or upload first")),
    # ---- trim
    Scenario("trim-0", lambda c: (["trim", *(lambda d, o: (d, o[1]))(*c.populated())], None), 0),
    Scenario("trim-2-not-a-record-offset", lambda c: (["trim", *(lambda d, o: (d, o[1] + 1))(*c.populated())], None),
             2, message=("nearest",)),
    Scenario("trim-2-beyond-the-end", lambda c: (["trim", *(lambda d, o: (d, o[-1] + 100000))(*c.populated())],
                                                 None), 2, message=("nearest",)),
    Scenario("trim-2-empty-log", lambda c: (["trim", c.new_wal("64KiB"), "0"], None), 2),
    Scenario("trim-2-missing-offset", lambda c: (["trim", c.new_wal("64KiB")], None), 2,
             json=False, click_usage=True),
    Scenario("trim-2-non-integer-offset", lambda c: (["trim", c.new_wal("64KiB"), "abc"], None), 2,
             json=False, click_usage=True),
    Scenario("trim-3-corrupt-log",
             lambda c: (["trim", *(lambda d, o: (d, o[2]))(*c.corrupt(checkpoint=False))], None), 3),
    Scenario("trim-4-no-such-device", lambda c: (["trim", _missing(c), "0"], None), 4),
    Scenario("trim-4-zeros", lambda c: (["trim", _zeros(c), "0"], None), 4),
    Scenario("trim-5-busy", _trim_held, 5),
    # ---- recover
    Scenario("recover-0-clean", lambda c: (["recover", c.populated()[0]], None), 0),
    Scenario("recover-0-empty", lambda c: (["recover", c.new_wal("64KiB")], None), 0),
    Scenario("recover-0-one-header-slot-damaged",
             lambda c: (["recover", (lambda d: (c.tools.flip_byte(d, 13), d)[1])(c.populated()[0])], None), 0),
    Scenario("recover-0-crash-torn-tail", lambda c: (["recover", _crash_tail(c)], None), 0),
    Scenario("recover-0-while-a-writer-holds-it", lambda c: (["recover", _recover_held(c)], None), 0),
    Scenario("recover-2-bad-payload-choice", lambda c: (["recover", c.new_wal("64KiB"), "--payload", "rot13"], None),
             2, json=False, click_usage=True),
    Scenario("recover-2-negative-limit", lambda c: (["recover", c.new_wal("64KiB"), "--limit", "-1"], None), 2,
             json=False, click_usage=True),
    Scenario("recover-2-unknown-option", lambda c: (["recover", c.new_wal("64KiB"), "--bogus"], None), 2,
             json=False, click_usage=True),
    Scenario("recover-2-missing-device", lambda c: (["recover"], None), 2, json=False, click_usage=True),
    Scenario("recover-3-flipped-body-byte", lambda c: (["recover", c.corrupt()[0]], None), 3),
    Scenario("recover-3-flipped-record-header-byte", lambda c: (["recover", _mid_record_header_flip(c)], None), 3),
    Scenario("recover-3-flipped-header-byte-mid-block", lambda c: (["recover", _mid_block_record_header_flip(c)],
                                                                   None), 3),
    Scenario("recover-4-zeros", lambda c: (["recover", _zeros(c)], None), 4),
    Scenario("recover-4-random", lambda c: (["recover", _random(c)], None), 4),
    Scenario("recover-4-no-such-device", lambda c: (["recover", _missing(c)], None), 4),
    Scenario("recover-4-both-header-slots-damaged", lambda c: (["recover", _both_slots_damaged(c)], None), 4),
]


@pytest.fixture
def ctx(tmp_path, new_wal, cli, tools, held_writer):
    return Ctx(tmp_path, new_wal, cli, tools, held_writer)


def _check_error_output(res, scenario: Scenario, tools) -> None:
    line = tools.assert_one_error_line(res.stderr)
    for text in scenario.message:
        assert text in line, f"error line should name {text!r}: {line}"


@pytest.mark.parametrize("scenario", [s.param() for s in SCENARIOS])
def test_exit_code_subprocess(ctx, run, tools, scenario):
    """A real process: the exit status, one stderr line and no traceback."""
    args, stdin = scenario.build(ctx)
    res = run(*args, input=stdin)
    assert res.exit_code == scenario.code, res
    assert "Traceback" not in res.stderr, res
    if scenario.code:
        _check_error_output(res, scenario, tools)
    else:
        assert "walctl: error" not in res.stderr, res


@pytest.mark.parametrize("scenario", [s.param() for s in SCENARIOS if s.json])
def test_json_output_carries_the_error(ctx, cli, tools, scenario):
    args, stdin = scenario.build(ctx)
    res = cli(*args, "--json", input=stdin)
    assert res.exit_code == scenario.code, res
    lines = res.json_lines()  # every stdout line parses as JSON
    if scenario.code == 0:
        assert "walctl: error" not in res.stderr, res
        assert all("error" not in obj for obj in lines), res
        return
    _check_error_output(res, scenario, tools)
    assert lines, f"--json must print the closing object with the error: {res}"
    last = lines[-1]
    assert "error" in last, res
    assert last["error"]["code"] == scenario.code
    assert isinstance(last["error"]["message"], str) and last["error"]["message"]
    assert [obj for obj in lines if "error" in obj] == [last], "only the closing object carries the error"
    if args[0] in ("append", "recover"):  # NDJSON commands close with exactly one summary line
        assert last["type"] == "summary"
        assert sum(1 for obj in lines if obj.get("type") == "summary") == 1


@pytest.mark.parametrize("argv", [
    ["init", "--help"], ["append", "--help"], ["trim", "--help"], ["recover", "--help"], ["--version"],
])
def test_help_and_version_exit_0(run, argv):
    res = run(*argv)
    assert res.exit_code == 0, res
    assert res.stdout.strip()
    assert res.stderr == ""


def test_debug_flag_is_accepted(cli, new_wal):
    dev = new_wal("64KiB")
    res = cli("--debug", "recover", dev, "--json")
    assert res.exit_code == 0, res


def test_one_exit_code_table_behind_the_docs_the_errors_and_the_man_pages():
    """walctl.errors.EXIT_CODES is the one table: docs/CLI.md lists its codes, every error class and
    the man pages take theirs from it, and selftest's failure kinds map into it."""
    import re
    from pathlib import Path

    import manpage
    from walctl import errors
    from walctl.selftest import EXIT_CODES as SELFTEST_EXIT_CODES

    table = {e.code for e in errors.EXIT_CODES}
    docs = (Path(__file__).resolve().parents[2] / "docs" / "CLI.md").read_text(encoding="utf-8")
    section = docs.split("## Exit codes", 1)[1].split("\n\n", 1)[0]
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert documented == table
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.WalctlError)]
    assert {c.exit_code for c in classes} <= table
    assert manpage.EXIT_STATUS == tuple((e.code, e.meaning) for e in errors.EXIT_CODES)
    assert set(SELFTEST_EXIT_CODES.values()) <= table
    assert errors.UsageError("x").summary is None and errors.IOFailure("x", summary={"a": 1}).summary == {"a": 1}
