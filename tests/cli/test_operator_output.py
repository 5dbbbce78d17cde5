"""Operator-facing wording and leftovers (issue 30): gc --dry-run says what it would do, the
quickstart removes its temporary files and says where they were."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_gc_dry_run_says_would_forget(cli, tmp_path, new_wal):
    wal = new_wal("256KiB")
    assert cli("append", wal, "x").exit_code == 0
    assert cli("upload", wal, "--store", tmp_path / "store").exit_code == 0
    out = cli("gc", "--store", tmp_path / "store", "--dry-run").stdout
    assert "would delete" in out and "would forget" in out and "forgot" not in out.replace("would forget", ""), out


@pytest.mark.slow
def test_quickstart_leaves_no_temporary_directory(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env.update(WALCTL_SKIP_INSTALL="1", TMPDIR=str(temp), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(temp.iterdir()) == []
    assert f"quickstart: removed its files in {temp}/" in proc.stderr
