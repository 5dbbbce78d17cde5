"""walctl selftest: the pipeline on a file (and, as root, a loop device), every answer checked,
a documented exit code for each kind of failure, and nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from walctl.selftest import runner as st

FAST = ("selftest", "--no-compact")


def _names(out: dict, status: str) -> list[str]:
    return [c["name"] for c in out["checks"] if c["status"] == status]


def test_passes_on_a_file_and_cleans_up(cli, tmp_path):
    res = cli(*FAST, "--json", "--dir", tmp_path)
    assert res.exit_code == 0, res
    lines = res.json_lines()
    assert len(lines) == 1
    out = lines[0]
    assert out["passed"] is True and out["exit_code"] == 0 and out["loop"] is False
    assert _names(out, "fail") == []
    assert _names(out, "skip") == ["compact"]  # --no-compact shows what was not covered
    passed = _names(out, "pass")
    for name in ("set-up", "init", "status (empty)", "append (arguments)", "append (stdin)", "recover", "trim",
                 "recover (after trim)", "status", "upload", "upload --metrics-file", "ls", "inspect-object --deep",
                 "read back objects", "read", "gc", "status (final)", "clean-up"):
        assert name in passed, name
    assert passed[0] == "set-up" and passed[-1] == "clean-up"
    for check in out["checks"]:
        assert set(check) == {"name", "command", "status", "seconds", "detail", "exit_code", "failure"}
    assert out["device"].startswith(str(tmp_path)) and out["kept"] is False
    assert list(tmp_path.iterdir()) == []  # the temporary directory is gone


def test_human_table(cli, tmp_path):
    res = cli(*FAST, "--dir", tmp_path)
    assert res.exit_code == 0, res
    assert "selftest PASSED" in res.stdout
    assert res.stdout.count("PASS ") >= 15 and "SKIP" in res.stdout and "FAIL " not in res.stdout
    assert res.stderr == ""  # no progress lines without a terminal


def test_keep_leaves_the_files(cli, tmp_path):
    res = cli(*FAST, "--keep", "--json", "--dir", tmp_path)
    assert res.exit_code == 0, res
    out = res.json_lines()[0]
    work = out["work_dir"]
    assert out["kept"] is True and os.path.dirname(work) == str(tmp_path)
    assert sorted(os.listdir(work)) == ["store", "wal.img", "walctl-upload.prom"]
    human = cli(*FAST, "--keep", "--dir", tmp_path)
    assert "files kept in" in human.stdout


def test_a_wrong_answer_is_exit_3_and_still_cleans_up(cli, tmp_path, monkeypatch):
    real = st.Run.expected_in_store

    def tampered(self):
        want = real(self)
        want[2][0] = b"not what was appended"
        return want

    monkeypatch.setattr(st.Run, "expected_in_store", tampered)
    res = cli(*FAST, "--json", "--dir", tmp_path)
    assert res.exit_code == 3, res
    line = res.error_line()
    assert "selftest failed" in line and "read back objects" in line and "stream 2 offset 0" in line
    out = res.json_lines()[0]
    assert out["passed"] is False and out["exit_code"] == 3 and out["error"]["code"] == 3
    failed = [c for c in out["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["read back objects"] and failed[0]["failure"] == "check"
    # the later checks did not run, but the clean-up did
    assert "gc" in _names(out, "skip") and out["checks"][-1]["name"] == "clean-up"
    assert out["checks"][-1]["status"] == "pass"
    assert list(tmp_path.iterdir()) == []
    human = cli(*FAST, "--dir", tmp_path)
    assert human.exit_code == 3 and "selftest FAILED" in human.stdout and "FAIL" in human.stdout


def test_a_command_exiting_non_zero_fails_its_check(cli, tmp_path, monkeypatch):
    real = st.Run.cli

    def failing_trim(self, *args, input=None):
        if args and args[0] == "trim":
            args = ("trim", args[1], "1")  # not a record's offset: exit 2
        return real(self, *args, input=input)

    monkeypatch.setattr(st.Run, "cli", failing_trim)
    res = cli(*FAST, "--json", "--dir", tmp_path)
    assert res.exit_code == 3, res
    trim = next(c for c in res.json_lines()[0]["checks"] if c["name"] == "trim")
    assert trim["status"] == "fail" and trim["exit_code"] == 2 and "no live record starts at offset 1" in trim["detail"]


def test_an_io_failure_is_exit_6(cli, tmp_path, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(st.tempfile, "mkdtemp", no_space)
    res = cli(*FAST, "--json")
    assert res.exit_code == 6, res
    assert "No space left on device" in res.error_line()
    out = res.json_lines()[0]
    assert out["checks"][0]["name"] == "set-up" and out["checks"][0]["failure"] == "io"


def test_a_command_exiting_6_is_an_io_failure(cli, tmp_path, monkeypatch):
    real = st.Run.cli

    def eio_on_upload(self, *args, input=None):
        answer = real(self, *args, input=input)
        if args and args[0] == "upload":
            return st.Answer(list(args), 6, "", "walctl: error: Input/output error, STORE\n")
        return answer

    monkeypatch.setattr(st.Run, "cli", eio_on_upload)
    res = cli(*FAST, "--json", "--dir", tmp_path)
    assert res.exit_code == 6, res
    assert res.json_lines()[0]["error"]["code"] == 6


def test_interrupted_run_cleans_up(cli, tmp_path, monkeypatch):
    def interrupt(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(st.Run, "read_back", interrupt)
    res = cli(*FAST, "--dir", tmp_path)
    assert res.exit_code == 130
    assert list(tmp_path.iterdir()) == []


def test_loop_needs_root(cli, monkeypatch):
    monkeypatch.setattr(st.os, "geteuid", lambda: 1000)
    res = cli("selftest", "--loop", "--json")
    assert res.exit_code == 5, res
    assert "needs root" in res.error_line()
    assert res.json_lines()[0]["error"]["code"] == 5


def test_bad_dir_is_a_usage_error(cli, tmp_path):
    res = cli(*FAST, "--dir", tmp_path / "missing")
    assert res.exit_code == 2
    res.error_line()


def test_operator_settings_do_not_leak_in(cli, tmp_path):
    """WALCTL_* of the operator's shell (a device, a store, a failpoint) never reach the inner commands."""
    env = {"WALCTL_STORE": str(tmp_path / "operator-store"), "WALCTL_FAILPOINT": "upload-after-prepare",
           "WALCTL_STREAM": "99", "WALCTL_CAPACITY": "1GiB"}
    res = cli(*FAST, "--json", "--dir", tmp_path / "", env=env)
    assert res.exit_code == 0, res
    assert not (tmp_path / "operator-store").exists()


@pytest.mark.loop
def test_passes_on_a_loop_device_and_detaches_it(cli, tmp_path):
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup (a loop device)")
    res = cli(*FAST, "--loop", "--json", "--dir", tmp_path)
    assert res.exit_code == 0, res
    out = res.json_lines()[0]
    assert out["loop"] is True and out["device"].startswith("/dev/loop")
    # ext4/xfs backing files take O_DIRECT; where the kernel refuses (tmpfs), the run says so
    assert out["direct_io"] is True or any("direct I/O" in w for w in out["warnings"])
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    assert str(tmp_path) not in listed  # detached
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_full_selftest_with_compaction_in_a_process(tmp_path):
    """The real thing, as a CI job runs it: its own process (Spark's JVM included), compaction on."""
    tmpdir = tmp_path.parent / f"{tmp_path.name}-tmpdir"  # TMPDIR: Spark's and walctl's temporary files
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env["TMPDIR"] = str(tmpdir)
    proc = subprocess.run([sys.executable, "-m", "walctl", "selftest", "--json", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["passed"] is True and _names(out, "skip") == []
    compact = next(c for c in out["checks"] if c["name"] == "compact")
    assert compact["status"] == "pass" and "objects into" in compact["detail"]
    gc = next(c for c in out["checks"] if c["name"] == "gc")
    assert gc["detail"].startswith("2 replaced objects deleted")
    assert "Stage 0" not in proc.stderr  # Spark's console noise went to the run's log, not to stderr
    assert list(tmp_path.iterdir()) == []
    assert list(tmpdir.iterdir()) == []  # compact's Spark files and shipped zip included (issue 18.4)
