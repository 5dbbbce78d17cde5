"""`man walctl` after each documented install path (issue 30): the README's MANPATH recipe on a
checkout (man/ holds man1/, as man expects), the editable .venv of the README's commands (no
share/man: `walctl --help` names the checkout's man/ for MANPATH), and a prefix install whose
pages nobody linked (Debian's pipx 1.1.0: tests/install/test_packaging.py installs the wheel so)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HINT = re.compile(r'export MANPATH="([^"]+):\$\(manpath\)"')


def man_finds(args: list[str], env: dict | None = None) -> Path:
    if shutil.which("man") is None:
        pytest.skip("man is not installed (apt-get install man-db)")
    found = subprocess.run(["man", *args, "-w", "walctl-recover"], capture_output=True, text=True, timeout=60,
                           env=env, check=False)
    assert found.returncode == 0, found.stderr
    return Path(found.stdout.strip())


def help_hint(env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "walctl", "--help"], capture_output=True, text=True, timeout=60,
                         env=env, check=True).stdout
    match = HINT.search(out)
    assert match, out[-400:]
    return match.group(1)


def test_the_readme_manpath_recipe_finds_the_checkouts_pages():
    env = {**os.environ, "MANPATH": str(REPO_ROOT / "man")}
    assert man_finds([], env) == REPO_ROOT / "man" / "man1" / "walctl-recover.1"


def test_walctl_help_names_the_folder_for_this_install():
    folder = help_hint({**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert man_finds(["-M", folder]).is_file()
    assert man_finds(["-M", folder]).read_bytes() == (REPO_ROOT / "man" / "man1" / "walctl-recover.1").read_bytes()
