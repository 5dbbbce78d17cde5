"""A plain ``pip install walctl`` has no pyspark (it is the [spark] extra, issue 18):
``walctl --help``, every command's --help and every command but SSO compaction work (``compact
--dry-run``, ``--level so`` and ``--force-split`` do).

The commands run as their own processes, where pyspark (and py4j, which comes with it)
are not installed as far as Python can tell: a sitecustomize on PYTHONPATH replaces the
path finder with one that never finds them, so ``import pyspark`` raises
ModuleNotFoundError and ``importlib.util.find_spec("pyspark")`` answers None, exactly as
on a machine without the extra; child processes (selftest's) inherit it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import manpage  # tools/manpage.py (pyproject's pytest pythonpath)

BLOCKED = ("pyspark", "py4j")

_SITECUSTOMIZE = f"""
import sys
from importlib.machinery import PathFinder

_BLOCKED = {set(BLOCKED)!r}


class _NotInstalled(PathFinder):
    \"\"\"PathFinder, except that the blocked top-level packages are never found.\"\"\"

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [_NotInstalled if finder is PathFinder else finder for finder in sys.meta_path]
"""

# In one process: every command's --help, and what it imported.
_HELP_ALL = """
import json, sys
from walctl.cli import main
results = {}
for path in json.loads(sys.argv[1]):
    sys.argv = ["walctl", *path, "--help"]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    results[" ".join(path)] = code
print("PROBE " + json.dumps({"codes": results, "pyspark": "pyspark" in sys.modules}))
"""

COMMAND_PATHS = [list(cmd.path) for cmd in manpage.describe().walk()]


@pytest.fixture
def no_spark_env(tmp_path):
    site = tmp_path / "no-spark-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=pythonpath, COLUMNS="200")
    for name in ("WALCTL_DEVICE", "WALCTL_STORE", "WALCTL_JSON", "WALCTL_STREAM", "WALCTL_CAPACITY"):
        env.pop(name, None)
    return env


def _walctl(env, *args, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True,
                          input=stdin, env=env, cwd=cwd, timeout=120, check=False)


def test_the_blocker_makes_pyspark_missing(no_spark_env, tmp_path):
    probe = ("import importlib.util, json\n"
             "try:\n    import pyspark\n    err = None\n"
             "except ModuleNotFoundError as exc:\n    err = exc.name\n"
             "print(json.dumps({'err': err, 'spec': importlib.util.find_spec('pyspark') is not None,"
             " 'py4j': importlib.util.find_spec('py4j') is not None}))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=no_spark_env,
                          cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"err": "pyspark", "spec": False, "py4j": False}


def test_every_help_works_without_pyspark(no_spark_env, tmp_path):
    assert len(COMMAND_PATHS) >= 14  # the root and every command (compact included)
    proc = subprocess.run([sys.executable, "-c", _HELP_ALL, json.dumps(COMMAND_PATHS)], capture_output=True,
                          text=True, env=no_spark_env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    probe = json.loads(proc.stdout.rsplit("PROBE ", 1)[1])
    assert probe["codes"] == {" ".join(p): 0 for p in COMMAND_PATHS}, proc.stderr
    assert probe["pyspark"] is False
    assert proc.stdout.count("Usage:") == len(COMMAND_PATHS)


def test_every_command_but_compact_works_without_pyspark(no_spark_env, tmp_path):
    env = no_spark_env
    wal, store = tmp_path / "wal.img", tmp_path / "store"

    def ok(*args, stdin: bytes | None = None) -> str:
        proc = _walctl(env, *args, cwd=tmp_path, stdin=stdin)
        assert proc.returncode == 0, (args, proc.stderr.decode(errors="replace"))
        assert b"Traceback" not in proc.stderr
        return proc.stdout.decode()

    assert json.loads(ok("init", wal, "--capacity", "1MiB", "--json"))
    offsets = ok("append", wal, "--stream", "7", "hello", "world").split()
    assert len(offsets) == 2
    ok("append", wal, "--stream", "8", "--input", "-", stdin=b"a\nb\nc\n")
    records = [json.loads(line) for line in ok("recover", wal, "--json", "--payload", "text").splitlines()]
    assert [r["payload"] for r in records if r.get("type") == "record"] == ["hello", "world", "a", "b", "c"]
    assert json.loads(ok("status", wal, "--json"))
    ok("trim", wal, offsets[0])
    upload = json.loads(ok("upload", wal, "--store", store, "--json").splitlines()[-1])
    assert upload
    listing = json.loads(ok("ls", "--store", store, "--json"))
    assert listing
    ok("objects", "--store", store)
    ok("inspect-object", "1", "--store", store, "--deep")
    ok("gc", "--store", store, "--dry-run")
    ok("compact", "--store", store, "--dry-run")  # the plan only: Spark is not needed
    ok("compact", "--store", store, "--level", "so")  # SO compaction and force split never need Spark
    ok("compact", "--store", store, "--force-split")
    ok("image", wal, tmp_path / "wal.copy")
    assert (tmp_path / "wal.copy").stat().st_size == 1 << 20
    ok("bench", tmp_path / "bench.img", "--size", "1MiB", "--mode", "iops", "--duration", "0.05")
    ok("selftest", "--no-compact")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["no-spark-site", "store", "wal.copy", "wal.copy.sha256", "wal.img"], left
