"""Every test is bounded (issue 32): one that loops for ever fails at pytest-timeout's limit, one
that allocates without bound fails at the memory cap (tests/testbounds.py), and the others still
run. Checked on a throw-away test module run by pytest in a subprocess with small bounds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]

RUNAWAYS = textwrap.dedent("""
    def test_loops_for_ever():
        while True:
            pass

    def test_allocates_without_bound():
        hog = []
        while True:
            hog.append(bytearray(16 << 20))

    def test_after_them_still_runs():
        assert True
""")


def test_a_runaway_test_fails_alone_within_its_time_and_memory_caps(tmp_path):
    (tmp_path / "test_runaways.py").write_text(RUNAWAYS)
    env = dict(os.environ, WALCTL_TEST_RSS_CAP=str(400 << 20),
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "testbounds", "--timeout", "3", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert "Timeout (>3.0s)" in out, out
    assert "test memory cap: the process grew past 400 MiB" in out and "test_allocates_without_bound" in out, out
