"""The README shows real output: its "What the output looks like" section makes a WAL and a store
with a ``<!-- test: run -->`` block (tests/cli/test_readme.py runs it with the others); here that block
runs again in a directory of its own, then each command the section shows (a line "`walctl ...`:"
before a fenced block) runs there, and its output must be the block's, but for what changes from
run to run: times, commit ids, the host name (and so the tables' widths: compared without their
borders and padding). The README's other examples must do what they say: the "days" example
uploads in the background (its ring is smaller than its log: it must), the budget example writes
more than one block and the budget holds them back."""

from __future__ import annotations

import json
import re
import socket
import subprocess

from tests.cli.test_readme import BLOCKS, README, _run_block, readme_env  # noqa: F401 (a fixture)

_SECTION = "### What the output looks like"
_SHOWN = re.compile(r"^`(walctl [^`]+)`[^\n]*?:\n\n```\n(.*?)\n```", re.M | re.S)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_BOX = re.compile(r"[\u2500-\u257f]")


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(_SECTION)
    return text[start:text.index("\n### ", start + len(_SECTION))]


def _normal(text: str, host: str) -> list[str]:
    """Lines as words: no borders, no padding; times, commit ids and the host as placeholders."""
    out = []
    for line in text.splitlines():
        line = _TIME.sub("TIME", _BOX.sub(" ", line))
        words = line.split()
        if words and words[0].isdigit() and len(words) >= 4 and re.fullmatch(r"[0-9a-f]{8}", words[-1]):
            words[-1] = "COMMIT"  # ls's last commits: "N TIME command... host commit-id"
            if len(words) >= 2 and words[-2] in (host, "vm"):
                words[-2] = "HOST"
        if words:
            out.append(" ".join(words))
    return out


def test_readme_output_section_shows_real_output(tmp_path, readme_env):
    _, env, _ = readme_env
    section = _section()
    scenario = [i for i, b in enumerate(BLOCKS) if b.kind == "run" and "mkdir output-demo" in b.text]
    assert len(scenario) == 1 and scenario[0] is not None
    _run_block(scenario[0], tmp_path, env)
    shown = _SHOWN.findall(section)
    assert [cmd.split()[1] for cmd, _ in shown] == ["status", "recover", "ls", "inspect-object"]
    host = socket.gethostname()
    for cmd, block in shown:
        real = subprocess.run(["bash", "-c", cmd], cwd=tmp_path / "output-demo", env=env, capture_output=True,
                              text=True, timeout=60)
        assert real.returncode == 0, real.stderr
        assert _normal(real.stdout, host) == _normal(block, host), f"README.md shows stale output of `{cmd}`"
    assert "live records 2 records" not in " ".join(_normal(section, host))


def test_readme_days_and_budget_examples_do_what_they_say(readme_env):
    """Run in README order with the other blocks (test_readme's directory): the files they leave."""
    from tests.cli.test_readme import _run_earlier_blocks

    work, _, _ = readme_env
    _run_earlier_blocks(readme_env, len(BLOCKS))
    days = json.loads((work / "days.json").read_text())
    assert days["background_upload"]["uploads"] >= 3, days["background_upload"]  # (1.8 MiB through 1 MiB: >= 4)
    upload = json.loads((work / "days-upload.json").read_text())
    assert days["background_upload"]["records"] + upload["records"] == days["records"] + 1  # (+ "continues")
    budget = json.loads((work / "budget.json").read_text())
    assert budget["blocks_written"] > 1 and budget["stages_us"]["budget"]["p50"] > 0, budget
