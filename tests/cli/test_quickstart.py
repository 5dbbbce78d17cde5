"""The README's first command (scripts/quickstart.sh) runs the main job on embedded defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quickstart_runs_the_pipeline(tmp_path):
    env = dict(os.environ, WALCTL_SKIP_INSTALL="1", WALCTL_QUICKSTART_DIR=str(tmp_path),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh")], capture_output=True, env=env,
                          timeout=300, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("hello" in line for line in lines) and any("event 3" in line for line in lines)
    second_upload = json.loads([line for line in lines if line.startswith('{"device"')][-1])
    assert second_upload["records"] == 2 and second_upload["objects"][0]["streams"][0]["start"] == 3
    assert (tmp_path / "wal.img").stat().st_size == 64 << 20
    assert any((tmp_path / "store" / "manifest").iterdir())
