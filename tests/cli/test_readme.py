"""The README's examples run: every ```sh block after a ``<!-- test: run -->`` comment is
extracted from README.md (never copied here) and executed with bash, in order, in one
temporary directory, with ``walctl`` on PATH and WALCTL_* pointing at temporary paths.
``<!-- test: run-as-root -->`` blocks run only as root (loop devices).

The README also documents every command the CLI has, and shell completion.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import manpage  # tools/manpage.py (pyproject's pytest pythonpath)
from tests.cli.conftest import with_bytecode

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
MARKER = re.compile(r"^<!--\s*test:\s*(run|run-as-root)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^```(sh|bash|shell)\s*$")
BLOCK_TIMEOUT_S = 60


@dataclass(frozen=True)
class Block:
    kind: str  # "run" or "run-as-root"
    line: int  # 1-based line of the opening fence in README.md
    text: str


def extract_blocks(text: str) -> list[Block]:
    """The marked shell blocks, in README order; a marker must be followed by a sh fence."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = MARKER.match(lines[i])
        if not match:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not FENCE_OPEN.match(lines[j]):
            raise AssertionError(f"README.md:{i + 1}: a test marker must be followed by a ```sh block")
        end = j + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end >= len(lines):
            raise AssertionError(f"README.md:{j + 1}: unterminated code block")
        blocks.append(Block(match.group(1), j + 1, "\n".join(lines[j + 1:end]) + "\n"))
        i = end + 1
    return blocks


BLOCKS = extract_blocks(README.read_text(encoding="utf-8"))


def test_the_readme_has_runnable_examples():
    kinds = [b.kind for b in BLOCKS]
    assert kinds.count("run") >= 5, "README lost its runnable examples"
    assert "run-as-root" in kinds, "README lost its loop device example"


def test_extraction_handles_markers_and_fences():
    text = ("intro\n<!-- test: run -->\n\n```sh\necho one\n```\n```sh\necho not-marked\n```\n"
            "<!--test: run-as-root-->\n```bash\necho two\necho three\n```\n")
    assert extract_blocks(text) == [Block("run", 4, "echo one\n"), Block("run-as-root", 11, "echo two\necho three\n")]
    with pytest.raises(AssertionError, match="must be followed"):
        extract_blocks("<!-- test: run -->\ntext\n```sh\necho\n```\n")


@pytest.fixture(scope="module")
def readme_env(tmp_path_factory):
    """A work directory and an environment: walctl on PATH (this checkout), WALCTL_* temporary."""
    work = tmp_path_factory.mktemp("readme")
    bin_dir = work / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "walctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m walctl "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = with_bytecode({k: v for k, v in os.environ.items() if not k.startswith(("WALCTL_", "AWS_", "PYSPARK_"))})
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "HOME": str(work / ".home"),  # nothing may touch the real home (completion, AWS config)
        "TMPDIR": str(work / ".tmp"),
        "WALCTL_STORE": str(work / "default-store"),
        "WALCTL_DEVICE": str(work / "default-wal.img"),
    })
    (work / ".home").mkdir()
    (work / ".tmp").mkdir()
    return work, env, set()  # (the indexes of the "run" blocks run in this directory)


def _run_earlier_blocks(readme_env, index: int) -> None:
    """Run, in this directory, the "run" blocks before ``index`` that did not run here yet: a block
    may use the files an earlier one made, and pytest-xdist may give the blocks to two workers
    (each with its own directory), so a block never depends on which worker ran the others."""
    work, env, ran = readme_env
    for i in range(index):
        if BLOCKS[i].kind == "run" and i not in ran:
            _run_block(i, work, env)
            ran.add(i)


def _run_block(index: int, work, env) -> None:
    block = BLOCKS[index]
    script = "set -euo pipefail\n" + block.text
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)
    assert proc.returncode == 0, (f"README.md:{block.line} block failed with exit {proc.returncode}\n"
                                  f"--- block ---\n{block.text}--- stdout ---\n{proc.stdout}"
                                  f"--- stderr ---\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_block_runs(index, readme_env):
    """Blocks run in README order (one bash each, sharing the directory): a block may use the
    files an earlier one made (run first here if this worker did not run them). A failed block
    names its README line."""
    work, env, ran = readme_env
    block = BLOCKS[index]
    if block.kind == "run-as-root" and (os.geteuid() != 0 or shutil.which("losetup") is None):
        pytest.skip("needs root and losetup (a loop device)")
    if block.kind == "run-as-root":
        work = work / f"root-{index}"  # its own directory: leaves nothing the other blocks see
        work.mkdir(exist_ok=True)
        _run_block(index, work, env)
        return
    _run_earlier_blocks(readme_env, index)
    if index not in ran:
        _run_block(index, work, env)
        ran.add(index)


def test_readme_blocks_did_what_they_say(readme_env):
    """After the blocks ran (here: those this worker did not run are run first): the files they
    promise exist and hold what the README says."""
    work, _, _ = readme_env
    _run_earlier_blocks(readme_env, len(BLOCKS))
    import json

    assert json.loads((work / "status.json").read_text())["device"].endswith("wal.img")
    assert (work / "textfile" / "walctl-upload.prom").exists()
    prom = (work / "textfile" / "walctl-upload.prom").read_text()
    # the README's last upload (of missing.img) failed on purpose: its own series says so (labels
    # carry the device's absolute path: one series per device however it was typed)
    missing, wal = re.escape(str(work / "missing.img")), re.escape(str(work / "wal.img"))
    assert re.search(rf'^walctl_upload_success\{{device="{missing}",[^}}]*\}} 0$', prom, re.M), prom
    assert re.search(rf'^walctl_upload_last_success_timestamp_seconds\{{device="{wal}",[^}}]*\}} [1-9]', prom, re.M)
    assert not list((work / "textfile").glob(".*"))  # no temporary file left behind
    assert "complete" in (work / "walctl-completion.bash").read_text()
    # the "days" example uploads in the background: 1.8 MiB of log through a 1 MiB ring needs >= 4
    # uploads of 256 KiB to finish; with the final upload every record is in the store once
    days = json.loads((work / "days.json").read_text())
    assert days["background_upload"]["uploads"] >= 3, days["background_upload"]
    upload = json.loads((work / "days-upload.json").read_text())
    assert days["background_upload"]["records"] + upload["records"] == days["records"] + 1  # (+ "continues")
    # the budget example: more than one block, held back by the budget
    budget = json.loads((work / "budget.json").read_text())
    assert budget["blocks_written"] > 1 and budget["stages_us"]["budget"]["p50"] > 0, budget


def test_readme_documents_every_command():
    text = README.read_text(encoding="utf-8")
    for cmd in manpage.describe().walk():
        if cmd.path:
            assert f"`walctl {' '.join(cmd.path)}" in text, f"README.md does not document 'walctl {cmd.invocation}'"


def test_readme_documents_operations():
    text = README.read_text(encoding="utf-8")
    for needle in ("--install-completion", "--metrics-file", "losetup --direct-io=on", "--endpoint-url",
                   "spark.executorEnv.AWS_ACCESS_KEY_ID", "--master yarn", "addPyFile", "crc32c", "boto3",
                   "walctl selftest --loop", "_last_success_timestamp_seconds"):
        assert needle in text, f"README.md lost {needle!r}"
