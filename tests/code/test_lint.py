"""Dead code and oversized functions fail the suite (issue 12 items 5 and "Done when").

ruff runs with pyproject.toml's [tool.ruff] configuration:
  - everywhere (walctl, tests, bench, tools): no unused import (F401) or variable (F841);
  - in all of walctl/ (issue 29 item 6), the size gate: cyclomatic complexity at most 12
    (C901), at most 50 statements (PLR0915), and at most MAX_BODY_LINES lines of body
    (signature and docstring not counted: a command's typer options are its signature);
    and no module over MAX_MODULE_LINES lines (the C extension aside: it is not Python).

OVERSIZED names each function over a threshold today and the item of issue 12 that splits
it. The list can only shrink: a listed function that fits fails the test until its entry
is deleted; a new offender fails until it is split (or, knowingly, listed).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GATED_DIRS = ("walctl",)
MAX_BODY_LINES = 60
MAX_MODULE_LINES = 720  # "no module over ~700 lines"

# module: why it is still over MAX_MODULE_LINES, and what splits it.
OVERSIZED_MODULES = {
}

# (file, function): why it is still over, and what splits it.
OVERSIZED = {
}


def _ruff(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert "No module named ruff" not in proc.stderr, "ruff is a test extra: pip install -e '.[test]'"
    return proc


def _function_at(path: Path, row: int) -> str:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == row:
            return node.name
    raise AssertionError(f"no function starts at {path}:{row}")


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return node.end_lineno - body[0].lineno + 1


def _oversized() -> dict[tuple[str, str], list[str]]:
    """(file, function) -> what it is over, for every function in GATED_DIRS over a threshold."""
    found: dict[tuple[str, str], list[str]] = {}
    proc = _ruff("--select", "C901,PLR0915", "--output-format", "json", *GATED_DIRS)
    assert proc.returncode in (0, 1), proc.stderr
    for item in json.loads(proc.stdout):
        path = Path(item["filename"])
        key = (path.relative_to(REPO_ROOT).as_posix(), _function_at(path, item["location"]["row"]))
        found.setdefault(key, []).append(f'{item["code"]} {item["message"]}')
    for folder in GATED_DIRS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = _body_lines(node)
                    if lines > MAX_BODY_LINES:
                        key = (path.relative_to(REPO_ROOT).as_posix(), node.name)
                        found.setdefault(key, []).append(f"{lines} body lines > {MAX_BODY_LINES}")
    return found


def test_no_unused_imports_or_variables():
    proc = _ruff("walctl", "tests", "bench", "tools")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_functions_in_wal_and_commands_stay_small():
    found = _oversized()
    new = {key: why for key, why in found.items() if key not in OVERSIZED}
    assert not new, "split these (or list them in OVERSIZED): " + "; ".join(
        f"{path}:{name} ({', '.join(why)})" for (path, name), why in sorted(new.items()))
    fixed = sorted(set(OVERSIZED) - set(found))
    assert not fixed, f"within the thresholds now, so remove from OVERSIZED in {__file__}: {fixed}"


def test_modules_stay_small():
    found = {}
    for path in sorted((REPO_ROOT / "walctl").rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found[path.relative_to(REPO_ROOT).as_posix()] = lines
    new = {path: lines for path, lines in found.items() if path not in OVERSIZED_MODULES}
    assert not new, f"split these modules by role (at most {MAX_MODULE_LINES} lines): {new}"
    fixed = sorted(set(OVERSIZED_MODULES) - set(found))
    assert not fixed, f"within the limit now, so remove from OVERSIZED_MODULES in {__file__}: {fixed}"


def test_the_gate_measures_what_it_says(tmp_path):
    # Body lines: the signature and the docstring do not count, every other line does.
    src = 'def f(\n    a,\n    b,\n):\n    """Doc."""\n' + "    x = 1\n" * (MAX_BODY_LINES + 1)
    assert _body_lines(ast.parse(src).body[0]) == MAX_BODY_LINES + 1
    # And ruff applies the configured thresholds (a function of 13 branches is over 12).
    branches = "".join(f"    if a == {i}:\n        return {i}\n" for i in range(12))
    (tmp_path / "big.py").write_text(f"def big(a):\n{branches}    return -1\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901",
                           "--config", str(REPO_ROOT / "pyproject.toml"), "--output-format", "json",
                           str(tmp_path / "big.py")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert [item["code"] for item in json.loads(proc.stdout)] == ["C901"], proc.stderr
