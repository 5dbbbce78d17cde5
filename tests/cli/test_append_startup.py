"""What ``walctl append`` loads before its first record (issue 31: its start-up was a quarter of
the CPU a piped GiB costs): on a cleanly closed WAL, without --store, it imports neither pydantic
(typer's coercion of an int option's default: walctl.cli.coercion answers it), nor the crash
repair and the scan (a clean log opens from its checkpoint), nor the store's modules (the S3
settings are built only for --store). Checked in a fresh interpreter through sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ABSENT = ("pydantic", "walctl.wal.crash_repair", "walctl.wal.reader", "walctl.wal.native_scan", "walctl.wal.gaps",
          "walctl.store", "walctl.store.base", "importlib.metadata", "base64")

PROBE = """import json, sys
sys.argv = ['walctl', *{argv!r}]
from walctl.cli import main
try:
    main()
except SystemExit:
    pass
print('MODULES ' + json.dumps(sorted(sys.modules)))
"""


def _walctl(*args: str, stdin: bytes = b"") -> str:
    proc = subprocess.run([sys.executable, "-m", "walctl", *args], input=stdin, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


@pytest.fixture
def clean_wal(tmp_path):
    wal = str(tmp_path / "wal.img")
    _walctl("init", wal, "--capacity", "4MiB")
    _walctl("append", wal, "-s", "1", "a", "b")
    return wal


@pytest.mark.parametrize("how", ["data", "input"])
def test_append_to_a_clean_wal_loads_no_repair_scan_store_or_pydantic(clean_wal, how):
    argv = ["append", clean_wal, "-s", "1", "--json"]
    stdin = b""
    if how == "data":
        argv += ["c", "d"]
    else:
        argv += ["--input", "-", "--framing", "length-prefixed"]
        stdin = b"".join(len(p).to_bytes(4, "big") + p for p in (b"c", b"d"))
    proc = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], input=stdin, capture_output=True,
                          timeout=120)
    out = proc.stdout.decode()
    modules = set(json.loads(out.rsplit("MODULES ", 1)[1]))
    records = [json.loads(line) for line in out.split("MODULES ")[0].splitlines() if '"record"' in line]
    # it appended (after the two records already there), then loaded none of the rest
    assert [(r["stream_offset"], r["payload_bytes"]) for r in records] == [(2, 1), (3, 1)], proc.stderr
    assert "walctl.pipeline.append" in modules
    assert sorted(m for m in modules if m in ABSENT or m.split(".")[0] in ABSENT) == []


def test_append_after_a_crash_still_loads_the_repair(tmp_path):
    """The lazy import of the crash repair: a log whose writer crashed still gets it (and appends)."""
    from walctl.wal.lifecycle import open_writer

    wal = str(tmp_path / "wal.img")
    _walctl("init", wal, "--capacity", "4MiB")
    open_writer(wal).writer.abort()  # the open marks the header ungraceful; abort() leaves it so (a crash)
    argv = ["append", wal, "-s", "1", "--json", "x"]
    proc = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, timeout=120)
    out = proc.stdout.decode()
    assert '"record"' in out, proc.stderr
    assert "walctl.wal.crash_repair" in set(json.loads(out.rsplit("MODULES ", 1)[1]))


def test_plain_coercion_of_many_strings_and_int_defaults_gives_typers_answers():
    """The two answers walctl.cli.coercion gives itself for append (a list[str] argument's strings,
    an int option's default) are typer's own, on every such parameter of every command."""
    import typer.main
    from typer import _click as click
    from typer._coercion import build_runtime_param

    from walctl.cli import app
    from walctl.cli.coercion import PlainFirst

    group = typer.main.get_command(app)
    plain_answers = 0
    for command in (group, *group.commands.values()):
        ctx = click.Context(command, info_name=command.name)
        for param in command.get_params(ctx):
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is None or descriptor.file_annotation is not None:
                continue
            if param.multiple or param.nargs == -1:
                values = [("a", "b"), ["x"], (), ("1", "2KiB"), ("0:5",), ("a", 1)]
            elif descriptor.annotation is int:
                values = [param.default, 0, -1, 1 << 63, 7]
            else:
                continue
            for value in values:
                def outcome(coerce):
                    try:
                        return "ok", coerce()
                    except Exception as exc:  # noqa: BLE001 - the same refusal either way
                        return "error", type(exc).__name__, str(exc)
                typer_says = outcome(lambda: build_runtime_param(descriptor).coerce(value, param=param, ctx=ctx))
                plain = PlainFirst()
                assert outcome(lambda: plain.coerce(value, param, ctx)) == typer_says, (command.name, param.name,
                                                                                        value)
                plain_answers += plain._typer is None
    assert plain_answers > 20
