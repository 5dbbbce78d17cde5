"""Issue 30's output polish, over the invocations tests/cli/test_examples.py runs (every command's
--help examples, walctl/cli/examples.py, in the same folder): ``--quiet`` on every command, docs/CLI.md's
JSON rules (numbers, nulls, names, times, WAL offsets) over every command's JSON, progress bars in one
unit family, and selftest's check list shown once on a terminal.

Every example runs as a real process with and without -q in test_examples.py's test_example_runs;
here, what is about a command's output (its JSON, which spelling of --quiet silences what) runs
in-process (the cli fixture), and what is about a terminal runs under script(1)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_examples import (COMMANDS, EXAMPLES, NOT_ONE_RUN, REPO, _env, _sh, output_problems,  # noqa: F401
                                     template)  # (template: a fixture)


def _runs(only_simple: bool = False) -> list[tuple[str, str]]:
    return [(name, line) for name in COMMANDS for _, line in EXAMPLES[name]
            if not any(s in line for s in NOT_ONE_RUN) and not (only_simple and ("|" in line or "&&" in line))]


@pytest.fixture
def folder(template, tmp_path):  # noqa: F811
    work = tmp_path / "work"
    shutil.copytree(template, work)
    return work, _env(tmp_path)


@pytest.fixture
def walctl(folder, cli, monkeypatch):
    """``walctl(line, env=None) -> Run``: one `walctl ...` line of the examples' kind, in-process
    (the cli fixture) in the examples' folder."""
    work, _ = folder
    monkeypatch.chdir(work)

    def line_run(line: str, env: dict | None = None):
        args = shlex.split(line)
        assert args[0] == "walctl" and "|" not in args and "&&" not in args, line
        return cli(*args[1:], env=env)

    return line_run


# -- 1. --quiet (each example as a process with and without -q: test_examples.py) --------------
def test_quiet_silences_what_each_kind_of_command_says_on_stderr(walctl):
    """What -q removes: append's summary line, recover's --limit warning, read's summary line (each
    asserted present without -q), also as --quiet before the command and as WALCTL_QUIET."""
    lines = ("walctl append wal.img --stream 7 again", "walctl recover wal.img --limit 1 --json",
             "walctl read --store store --stream 7")
    for line in lines:
        assert walctl(line).stderr.strip(), line
        assert walctl(line + " -q").stderr == "", line
        assert walctl(line.replace("walctl ", "walctl --quiet ", 1)).stderr == "", line
        assert walctl(line, env={"WALCTL_QUIET": "1"}).stderr == "", line


def test_quiet_still_prints_errors(walctl):
    done = walctl("walctl -q recover missing.img")
    assert done.exit_code == 4 and done.stderr.startswith("walctl: error: no such device"), done.stderr
    done = walctl("walctl upload wal.img --store nowhere --dry-run -q --json")
    assert done.exit_code == 0 and done.stderr == ""  # the "store does not exist yet" warning: not an error
    done = walctl("walctl ls --store nowhere -q --json")
    assert done.exit_code == 4 and done.stderr.count("walctl: error:") == 1
    assert json.loads(done.stdout)["error"]["code"] == 4


# -- 5. docs/CLI.md's JSON rules over every command's JSON --------------------------------------
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
_ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_HUMAN_SIZE = re.compile(r"^-?[\d.,]+ ?(B|KiB|MiB|GiB|TiB|KB|MB|GB|bytes)$")
# Counts: integers, never a string or a float.
_COUNT_KEYS = {"records", "count", "objects_made", "findings", "corrupt_findings", "entries", "streams", "problems",
               "reads", "writes", "gets", "lists", "rescans", "retries", "polls", "blocks_written", "live_objects"}
_DURATION_UNITS = ("_s", "_ms", "_us", "_ns", "seconds")
# Keys holding a WAL position (docs/CLI.md "Offsets are named apart"), and the older name each had
# before `*_wal_offset`: the old name is kept beside the new one (a field name is a contract).
WAL_OFFSET_ALIASES = {"last_offset": "last_wal_offset", "first_offset": "first_wal_offset",
                      "trimmed_to": "trimmed_to_wal_offset"}


def json_rule_problems(obj, path: str = "") -> list[str]:
    """docs/CLI.md's JSON rules broken by one parsed document (nested objects too)."""
    problems = []
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            problems += json_rule_problems(item, f"{path}[{i}]")
        return problems
    if not isinstance(obj, dict):
        return problems
    for key, value in obj.items():
        where = f"{path}.{key}"
        if not (key.isdigit() or _SNAKE.match(key)):  # (a map keyed by id: wal_uploads' node ids)
            problems.append(f"{where}: not snake_case")
        if value == "" or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == -1):
            problems.append(f"{where}: {value!r} for none (null rule)")
        if isinstance(value, str) and _HUMAN_SIZE.match(value):
            problems.append(f"{where}: size as text {value!r} (bytes as an integer)")
        if (key.endswith("_bytes") or key in _COUNT_KEYS or key.endswith("_count")) and value is not None \
                and not (isinstance(value, int) and not isinstance(value, bool)):
            if not isinstance(value, list):  # (or the list of them: "problems", "streams")
                problems.append(f"{where}: {value!r} is not an integer")
        if key.endswith(_DURATION_UNITS) and value is not None and not isinstance(value, (int, float, dict)):
            problems.append(f"{where}: duration {value!r} is not a number")
        if (key == "time" or key.endswith("_at")) and value is not None \
                and not (isinstance(value, str) and _ISO_MS.match(value)):
            problems.append(f"{where}: {value!r} is not ISO 8601 UTC to the millisecond")
        if key in WAL_OFFSET_ALIASES and WAL_OFFSET_ALIASES[key] not in obj:
            problems.append(f"{where}: a WAL position without its {WAL_OFFSET_ALIASES[key]} name")
        problems += json_rule_problems(value, where)
    return problems


@pytest.mark.parametrize("name, line", _runs(only_simple=True))
def test_every_commands_json_follows_the_rules(walctl, name, line):
    """Each example's --json (selftest's: test_selftest_lists_its_checks_once_on_a_terminal): exit 0,
    every stdout line JSON, stderr by the output rules, and docs/CLI.md's JSON rules."""
    done = walctl(line if " --json" in line else line + " --json")
    assert done.exit_code == 0, done
    docs = [json.loads(text) for text in done.stdout.splitlines()]  # NDJSON or one document: every line JSON
    assert docs
    assert output_problems(done.stderr) == []
    problems = [p for doc in docs for p in json_rule_problems(doc)]
    assert problems == [], f"$ {line} --json\n" + "\n".join(problems)
    # the document (or the closing summary) says when it was rendered; per-record lines need not
    assert "time" in docs[-1]


def test_json_rules_over_a_trimmed_wal_an_error_and_append(walctl):
    """Documents the examples do not make: trim of a never-trimmed WAL (previous_trim_offset), an
    error object, append's summary (its WAL offsets), init's header (node id and epoch unset)."""
    for line in ("walctl trim wal.img 0 --json", "walctl status missing.img --json",
                 "walctl append wal.img --stream 7 x y --json", "walctl init fresh.img --capacity 64KiB --json",
                 "walctl upload wal.img --store store --json"):
        done = walctl(line)
        docs = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
        problems = [p for doc in docs for p in json_rule_problems(doc)]
        assert docs and problems == [], f"$ {line}\n" + "\n".join(problems)
    trim = json.loads(walctl("walctl trim wal.img 4096 --json").stdout)
    assert trim["previous_trim_offset"] == 0 and trim["trim_offset"] == 4096
    init = json.loads(walctl("walctl init fresh2.img --capacity 64KiB --json").stdout)
    assert init["header"]["node_id"] is None and init["header"]["epoch"] is None and init["header"]["trim_offset"] is None


def test_json_rule_checker_finds_what_it_looks_for():
    bad = {"Size": 1, "trim_offset": -1, "used": "16 MiB", "records": 2.0, "elapsed_s": "3 s",
           "time": 1795875475.3, "last_offset": 5, "x": {"note": ""}}
    found = "\n".join(json_rule_problems(bad))
    for what in (".Size: not snake_case", ".trim_offset: -1", ".used: size as text", ".records: 2.0",
                 ".elapsed_s: duration", ".time: 1795875475.3", ".last_offset: a WAL position", ".x.note: ''"):
        assert what in found, (what, found)
    assert json_rule_problems({"wal_uploads": {"1": {"offset": 0}}, "time": "2026-11-28T12:45:14.123Z",
                               "last_offset": 3, "last_wal_offset": 3, "node_id": None}) == []


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


# -- 6. per-record lines carry no time; the summary does (docs/CLI.md says why) ----------------
def test_record_lines_carry_no_time_the_summary_does(walctl):
    for line in ("walctl append wal.img --stream 7 x y --json", "walctl append wal.img --stream 7 z --ack ranges --json",
                 "walctl recover wal.img --json", "walctl read --store store --stream 7 --wal wal.img --json"):
        docs = [json.loads(text) for text in walctl(line).stdout.splitlines()]
        rows, summary = docs[:-1], docs[-1]
        assert rows and all(d["type"] in ("record", "range") and "time" not in d for d in rows), line
        assert summary["type"] == "summary" and _ISO_MS.match(summary["time"]), line
    text = (REPO / "docs" / "CLI.md").read_text()
    assert "per-record lines (`append`'s acknowledgements" in text and "by design" in text


def test_ls_json_times_are_iso_like_every_json_time(folder, walctl):
    """The manifest keeps times as seconds since the epoch; ls --json shows them as every JSON time:
    a commit's ``time``, a prepared id's ``prepared_at`` and ``expires_at`` (here one hand-added)."""
    work, env = folder
    path = work / "store" / "manifest" / "00000000000000000002.json"
    doc = json.loads(path.read_text())
    doc["prepared"] = [{"id": 2, "key": "20000000/default/2", "prepared_at": 1795875475.25,
                        "expires_at": 1795879075.5}]
    doc["next_object_id"] = 3
    path.write_text(json.dumps(doc))
    done = walctl("walctl ls --store store --json")
    assert done.exit_code == 0, done
    out = json.loads(done.stdout)
    assert out["prepared"] == [{"id": 2, "key": "20000000/default/2", "prepared_at": "2026-11-28T14:17:55.250Z",
                                "expires_at": "2026-11-28T15:17:55.500Z"}]
    assert all(_ISO_MS.match(c["time"]) for c in out["last_commits"]) and json_rule_problems(out) == []
