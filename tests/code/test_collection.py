"""One way to run the tests (issue 32): plain `pytest` collected 264 fewer tests than
`python -m pytest` (three modules failed to import 'tests'); both must collect the same suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
IDLE_PLUGINS = ("cacheprovider", "fakefs", "platformdirs", "xdist", "xdist.looponfail", "reverse", "hypothesispytest")


def _collected(*cmd: str) -> tuple[int, str]:
    # Bytecode is written (PYTHONDONTWRITEBYTECODE dropped): most of a collection's time is pytest
    # rewriting every test module's asserts, and the second collection loads what the first wrote
    # (__pycache__, ignored by git) instead of rewriting all of it again. Which modules each command
    # finds on its sys.path, the point of the test, does not depend on it.
    # Both commands run without the plugins that neither add, drop nor import a test module
    # (pyfakefs' fs fixture, platformdirs', xdist's -n, pytest-reverse's order, hypothesis' per-item
    # settings and its scan of every local module's constants): ~0.5 s of CPU a collection of ~6.
    # Unknown fixtures fail at setup, never at collection; the count (4,963) is the same with them.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    idle = [arg for plugin in IDLE_PLUGINS for arg in ("-p", f"no:{plugin}")]
    proc = subprocess.run([*cmd, "--collect-only", "-q", *idle], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=240, env=env)
    found = re.search(r"^(\d+) tests? collected", proc.stdout, re.M)
    return (int(found.group(1)) if found and proc.returncode == 0 else -1), proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_plain_pytest_and_python_m_pytest_collect_the_same_tests():
    plain, plain_out = _collected(str(Path(sys.executable).with_name("pytest")))
    module, module_out = _collected(sys.executable, "-m", "pytest")
    assert module > 2000, module_out
    assert plain == module, plain_out
