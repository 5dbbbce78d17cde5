"""Every --help ends with real examples (walctl/cli/examples.py), and each one runs: here, with sh,
in a folder holding what the examples name (``wal.img``: a 1 MiB WAL whose stream 7 goes on from the store
with records at WAL offsets 0 and 4096; ``store``: a local store with object 1, stream 7's offsets 0 to 3)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from walctl.cli.examples import EXAMPLES

from tests.cli.conftest import with_bytecode

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("walctl", "append", "init", "recover", "trim", "upload", "salvage", "inspect-object", "ls", "objects",
            "gc", "check", "compact", "status", "selftest", "image", "bench", "read")


def _env(tmp_path: Path) -> dict:
    env = with_bytecode({k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")})
    bin_dir = tmp_path / "bin"  # `walctl` on PATH: this interpreter's walctl
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "walctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m walctl "$@"\n')
    shim.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmp_path)
    return env


def _sh(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    base = tmp_path_factory.mktemp("examples")
    env = _env(base)
    work = base / "work"
    work.mkdir()
    # the store's objects come from another node's WAL: wal.img (node 2) may upload into it too
    setup = ("walctl init old.img --capacity 1MiB --node-id 1 && walctl append old.img --stream 7 a b c"
             " && walctl upload old.img --store store && rm old.img"
             " && walctl init wal.img --capacity 1MiB --node-id 2"
             " && walctl append wal.img --stream 7 --base-offset 3 hello"
             " && walctl append wal.img --stream 7 --base-offset 4 world")
    done = _sh(setup, work, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "4096"], done.stdout
    return work


@pytest.fixture
def folder(template, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(template, work)
    return work, _env(tmp_path)


def test_every_help_ends_with_examples():
    from walctl.cli import app

    from tests.cli.conftest import CliRunner, walctl_command

    group = walctl_command()
    assert set(EXAMPLES) == set(COMMANDS) == {"walctl", *group.commands}
    runner = CliRunner()  # (in this process: the help a process prints, without 20 process starts)
    for name in COMMANDS:
        args = ["--help"] if name == "walctl" else [name, "--help"]
        result = runner.invoke(app, args, env={k: None for k in os.environ if k.startswith("WALCTL_")})
        assert result.exit_code == 0, result.output
        out = result.stdout
        tail = out[out.rindex("Examples:"):]
        assert 1 <= len(EXAMPLES[name]) <= 3
        for what, line in EXAMPLES[name]:
            assert what in tail and f"$ {line}" in tail, (name, line)


# docs/CLI.md's output rules: plural agreement ("1 record", never "1 records" or "record(s)"), sizes
# as 1.5 MiB (no unformatted "16777216 bytes"), no Python values.
_WORDS = ("records|streams|objects|blocks|findings|batches|entries|GETs|PUTs|ranges|groups|iterations|SSOs|SOs"
          "|bytes")
OUTPUT_RULES = (
    (re.compile(rf"(?<![\d.,])1 ({_WORDS})\b"), "plural after 1"),
    (re.compile(r"\w\((s|es)\)"), "a (s) plural"),
    (re.compile(r"\b\d{5,} bytes\b"), "an unformatted size"),
    (re.compile(r"\b(None|True|False)\b"), "a Python value"),
)


def output_problems(text: str) -> list[str]:
    return [f"{why}: ...{text[max(0, m.start() - 50):m.end() + 20]!r}"
            for rule, why in OUTPUT_RULES for m in rule.finditer(text)]


# Examples that are not one run of a command: --help screens; selftest runs everything
# (tests/cli/test_output_polish.py runs it on a terminal, with -q and with --json).
NOT_ONE_RUN = ("--help", "walctl selftest")


def _quiet(line: str) -> str:
    """``line`` with -q given to each walctl it runs (before the command name: it works on either side)."""
    return line.replace("walctl ", "walctl -q ")


@pytest.mark.parametrize("name, line", [(n, line) for n in COMMANDS for _, line in EXAMPLES[n]])
def test_example_runs(folder, template, name, line):
    """Each example runs as written (sh, a real walctl process for each walctl in it), by the output
    rules; and (issue 30) again with -q: exit 0, nothing on stderr, as many stdout lines.

    The JSON of each example is checked in-process by test_output_polish.py's
    test_every_commands_json_follows_the_rules (these runs are the real-process path of each line)."""
    work, env = folder
    done = _sh(line, work, env)
    assert done.returncode == 0, f"$ {line}\n{done.stdout}\n{done.stderr}"
    assert "walctl: error" not in done.stderr
    assert output_problems(done.stdout + done.stderr) == []
    if any(s in line for s in NOT_ONE_RUN):
        return
    quiet_dir = work.parent / "quiet"  # the same folder as the loud run started from
    shutil.copytree(template, quiet_dir)
    quiet = _sh(_quiet(line), quiet_dir, env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", f"$ {_quiet(line)}\n{quiet.stderr}"
    assert len(quiet.stdout.splitlines()) == len(done.stdout.splitlines()), (done.stdout, quiet.stdout)
