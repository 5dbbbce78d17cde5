"""Fixtures for the install tests: a git clone of the repository, as a user gets it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def clone(tmp_path_factory) -> Path:
    """``git clone`` of the repository's committed HEAD into a temporary directory.

    What a user who clones the project has: committed files only, nothing from
    ../ (shared/, other worktrees) and nothing untracked. Skips, saying why, when
    the tests do not run from a git checkout.
    """
    if shutil.which("git") is None:
        pytest.skip("needs git to clone the repository")
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=60, check=False)
    if head.returncode != 0:
        pytest.skip(f"{REPO_ROOT} is not a git checkout: {head.stderr.strip()}")
    dest = tmp_path_factory.mktemp("clone") / "walctl"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO_ROOT), str(dest)], check=True,
                   capture_output=True, timeout=120)
    # HEAD itself, also when it is detached (CI) or on a branch the clone did not take.
    subprocess.run(["git", "-C", str(dest), "fetch", "--quiet", str(REPO_ROOT), head.stdout.strip()], check=True,
                   capture_output=True, timeout=120)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", "--detach", head.stdout.strip()], check=True,
                   capture_output=True, timeout=120)
    return dest
