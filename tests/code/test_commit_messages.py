"""Commit messages git can show (issue 29 item 7).

Every commit since BASE (the last commit before the rule was enforced) has a subject of at
most MAX_SUBJECT characters; every commit but a merge has a body (the why, the figures, the
test) after one blank line. Older history is left as it is: rewriting published commits
would change every id operators and notes refer to.

In a clone without BASE (a shallow CI checkout), the commits that are there are checked.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE = "739b040586d36b3d4fbd4c78e5b059a4b497da57"
MAX_SUBJECT = 72
SEP = "\x1e"  # between commits
FIELD = "\x1f"  # between a commit's fields


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          check=False)


def _commits() -> list[tuple[str, int, str, str]]:
    """(short id, number of parents, subject, body) of each commit since BASE."""
    known = _git("cat-file", "-e", f"{BASE}^{{commit}}").returncode == 0
    span = [f"{BASE}..HEAD"] if known else ["HEAD"]
    proc = _git("log", f"--format=%h{FIELD}%p{FIELD}%s{FIELD}%b{SEP}", *span)
    assert proc.returncode == 0, proc.stderr
    out = []
    for chunk in proc.stdout.split(SEP):
        chunk = chunk.strip("\n")
        if chunk:
            short, parents, subject, body = chunk.split(FIELD, 3)
            out.append((short, len(parents.split()), subject, body.strip()))
    return out


def check_message(subject: str, body: str, parents: int) -> list[str]:
    """What is wrong with one commit's message (empty: nothing)."""
    problems = []
    if len(subject) > MAX_SUBJECT:
        problems.append(f"subject is {len(subject)} characters (at most {MAX_SUBJECT})")
    if not subject.strip():
        problems.append("empty subject")
    if parents < 2 and not body:
        problems.append("no body (the why, the figures, the test)")
    return problems


def test_the_rule_itself():
    assert check_message("store: one line", "why", 1) == []
    assert check_message("x" * 73, "why", 1) == ["subject is 73 characters (at most 72)"]
    assert check_message("store: one line", "", 1) == ["no body (the why, the figures, the test)"]
    assert check_message("Merge branch 'h-read'", "", 2) == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(),
                    reason="not a git checkout (an installed sdist has no history to check)")
def test_commits_since_the_rule_have_short_subjects_and_a_body():
    bad = [f"{short} {subject[:60]!r}: {'; '.join(problems)}"
           for short, parents, subject, body in _commits()
           if (problems := check_message(subject, body, parents))]
    assert not bad, "commit messages break the rule (docs/STYLE.md, Commits):\n" + "\n".join(bad)
