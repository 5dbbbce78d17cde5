"""Issue 30's output polish, over the invocations tests/cli/test_examples.py runs (every command's
--help examples, walctl/cli/examples.py, in the same folder): ``--quiet`` on every command, progress
bars in one unit family, and selftest's check list shown once on a terminal."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_examples import COMMANDS, EXAMPLES, _env, _sh, template  # noqa: F401 (a fixture)

# Examples that are not one run of a command: --help screens; selftest runs everything (tested below).
_SKIP = ("--help", "walctl selftest")


def _runs(only_simple: bool = False) -> list[tuple[str, str]]:
    return [(name, line) for name in COMMANDS for _, line in EXAMPLES[name]
            if not any(s in line for s in _SKIP) and not (only_simple and ("|" in line or "&&" in line))]


@pytest.fixture
def folder(template, tmp_path):  # noqa: F811
    work = tmp_path / "work"
    shutil.copytree(template, work)
    return work, _env(tmp_path)


def _quiet(line: str) -> str:
    """``line`` with -q given to each walctl it runs (before the command name: it works on either side)."""
    return line.replace("walctl ", "walctl -q ")


# -- 1. --quiet -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, line", _runs())
def test_quiet_prints_nothing_on_stderr_but_keeps_stdout(folder, name, line):
    """Every example with -q: exit 0, stderr empty; stdout's lines as many as without it."""
    work, env = folder
    loud_dir = work.parent / "loud"
    shutil.copytree(work, loud_dir)
    loud = _sh(line, loud_dir, env)
    quiet = _sh(_quiet(line), work, env)
    assert quiet.returncode == loud.returncode == 0, (quiet.stderr, loud.stderr)
    assert quiet.stderr == "", f"$ {_quiet(line)}\n{quiet.stderr}"
    assert len(quiet.stdout.splitlines()) == len(loud.stdout.splitlines()), (loud.stdout, quiet.stdout)


def test_quiet_silences_what_each_kind_of_command_says_on_stderr(folder):
    """What -q removes: append's summary line, recover's --limit warning, read's summary line (each
    asserted present without -q), also as --quiet before the command and as WALCTL_QUIET."""
    work, env = folder
    lines = ("walctl append wal.img --stream 7 again", "walctl recover wal.img --limit 1 --json",
             "walctl read --store store --stream 7")
    for line in lines:
        assert _sh(line, work, env).stderr.strip(), line
        assert _sh(line + " -q", work, env).stderr == "", line
        assert _sh(line.replace("walctl ", "walctl --quiet ", 1), work, env).stderr == "", line
        assert _sh(line, work, {**env, "WALCTL_QUIET": "1"}).stderr == "", line


def test_quiet_still_prints_errors(folder):
    work, env = folder
    done = _sh("walctl -q recover missing.img", work, env)
    assert done.returncode == 4 and done.stderr.startswith("walctl: error: no such device"), done.stderr
    done = _sh("walctl upload wal.img --store nowhere --dry-run -q --json", work, env)
    assert done.returncode == 0 and done.stderr == ""  # the "store does not exist yet" warning: not an error
    done = _sh("walctl ls --store nowhere -q --json", work, env)
    assert done.returncode == 4 and done.stderr.count("walctl: error:") == 1
    assert json.loads(done.stdout)["error"]["code"] == 4


# -- 3. progress bars: one unit family ----------------------------------------------------------
def test_progress_bar_shows_binary_units_for_size_and_rate(monkeypatch):
    import sys

    from rich.console import Console

    from walctl.commands import _shared

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = _shared.progress_bar(16 << 20, "copying")
    assert bar.bar is not None
    task = bar.bar.tasks[0]
    task.completed = 3 << 20
    monkeypatch.setattr(type(task), "speed", property(lambda self: 1.5 * (1 << 20)))
    console = Console(width=200, record=True)
    texts = [str(col.render(task)) for col in bar.bar.columns if not hasattr(col, "bar_width")]
    console.print(*texts)
    shown = console.export_text()
    assert "3.0/16.0 MiB" in shown and "1.5 MiB/s" in shown, shown
    assert not re.search(r"\b[kMG]B/s\b|\bMB\b", shown), shown


# -- 7. selftest's check list, once on a terminal ------------------------------------------------
def _terminal_lines(raw: str) -> list[str]:
    """What a terminal shows of ``raw``: each line as left by carriage returns and erase-line codes."""
    shown = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        line = re.split(r"\r(?:\x1b\[K)?", line)[-1]
        shown.append(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line))
    return [line for line in shown if line.strip()]


def test_selftest_lists_its_checks_once_on_a_terminal(tmp_path):
    """On a terminal (script(1): stdout and stderr one pty), each check appears in the table only,
    not again as a progress line; with --quiet nothing but the table; with --json no progress."""
    env = _env(tmp_path)
    if shutil.which("script") is None:
        pytest.skip("script(1) not installed")
    typescript = tmp_path / "typescript"
    for line in ("walctl selftest --no-compact", "walctl selftest --no-compact -q"):
        done = subprocess.run(["script", "-q", "-e", "-c", line, str(typescript)], cwd=tmp_path, env=env,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        raw = done.stdout.decode(errors="replace")  # (bytes: text mode would turn each \r into a new line)
        assert done.returncode == 0, raw
        shown = _terminal_lines(raw)
        assert sum("inspect-object --deep" in s for s in shown) == 1, "\n".join(shown)
        assert any("selftest PASSED" in s for s in shown)
    done = _sh("walctl selftest --no-compact --json", Path(tmp_path), env)
    assert done.returncode == 0 and done.stderr == "" and json.loads(done.stdout)["passed"] is True
