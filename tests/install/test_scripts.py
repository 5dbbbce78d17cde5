"""scripts/gen-man picks the right interpreter (issue 18: in the README's set-up it ran
``python3``, which has no typer, and its only test set PYTHON, which hid that).

The script runs from a copy of the repository's layout in tmp_path whose ``python3`` on
PATH is a stand-in that fails loudly, so only the interpreter the script chose can pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

WRONG_PYTHON = "#!/bin/sh\necho 'the python3 on PATH ran' >&2\nexit 97\n"


def _layout(tmp_path: Path, with_venv: bool) -> tuple[Path, dict]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "scripts" / "gen-man", repo / "scripts" / "gen-man")
    shutil.copytree(REPO_ROOT / "man", repo / "man")
    (repo / "walctl").symlink_to(REPO_ROOT / "walctl", target_is_directory=True)
    (repo / "tools").symlink_to(REPO_ROOT / "tools", target_is_directory=True)
    if with_venv:
        venv_python = repo / ".venv" / "bin" / "python"
        venv_python.parent.mkdir(parents=True)
        venv_python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n", encoding="utf-8")
        venv_python.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python"):
        (bin_dir / name).write_text(WRONG_PYTHON, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    return repo, env


def _gen_man(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(repo / "scripts" / "gen-man"), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_gen_man_uses_the_repos_venv_without_PYTHON(tmp_path):
    repo, env = _layout(tmp_path, with_venv=True)
    proc = _gen_man(repo, env, "--check")
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout + proc.stderr
    (repo / "man" / "man1" / "walctl-recover.1").unlink()
    proc = _gen_man(repo, env)
    assert proc.returncode == 0, proc.stderr
    assert (repo / "man" / "man1" / "walctl-recover.1").read_bytes() == (REPO_ROOT / "man" / "man1" / "walctl-recover.1").read_bytes()


def test_gen_man_prefers_PYTHON_when_set(tmp_path):
    repo, env = _layout(tmp_path, with_venv=True)
    env["PYTHON"] = str(tmp_path / "bin" / "python3")  # the failing stand-in: PYTHON must win over .venv
    proc = _gen_man(repo, env, "--check")
    assert proc.returncode == 2
    assert proc.stderr.startswith("walctl: error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "cannot import typer" in proc.stderr


def test_gen_man_without_a_venv_says_what_to_do(tmp_path):
    repo, env = _layout(tmp_path, with_venv=False)
    proc = _gen_man(repo, env, "--check")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "walctl: error: python3 cannot import typer" in proc.stderr and "PYTHON" in proc.stderr
