"""A reader that goes away (`| head`): exit 141 like SIGPIPE, and the WAL is left closed cleanly."""

from __future__ import annotations

import json
import subprocess
import sys


def test_append_and_recover_into_a_closed_pipe(tmp_path):
    wal = tmp_path / "w.img"
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"{i}\n" for i in range(20000)))
    walctl = f"{sys.executable} -m walctl"
    assert subprocess.run(f"{walctl} init {wal} --capacity 16MiB --no-prewrite", shell=True, capture_output=True).returncode == 0
    # a log whose dump is far larger than a pipe's buffer, so `recover | head` really meets a closed pipe
    assert subprocess.run(f"{walctl} append {wal} --input {lines} >/dev/null", shell=True).returncode == 0
    script = (f"{walctl} append {wal} --input {lines} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}; "
              f"{walctl} recover {wal} 2>/dev/null | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}; "
              f"{walctl} recover {wal} --json | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["141", "141", "141"], proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    summary = json.loads(subprocess.run(f"{walctl} recover {wal} --json", shell=True, capture_output=True,
                                        text=True).stdout.splitlines()[-1])
    assert summary["shutdown_type"] == "graceful" and summary["records"] >= 1
