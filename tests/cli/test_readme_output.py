"""The README shows real output: its "What the output looks like" section makes a WAL and a store
with a ``<!-- test: run -->`` block (tests/cli/test_readme.py runs it with the others); here that block
runs again in a directory of its own, then each command the section shows (a line "`walctl ...`:"
before a fenced block) runs there, and its output must be the block's, but for what changes from
run to run: times, commit ids, the host name (and so the tables' widths: compared without their
borders and padding). That the README's other examples do what they say (the "days" example
uploads in the background, the budget one writes blocks the budget holds back) is checked by
tests/cli/test_readme.py's test_readme_blocks_did_what_they_say, where they ran."""

from __future__ import annotations

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

