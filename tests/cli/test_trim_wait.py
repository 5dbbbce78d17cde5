"""A writer started while a trim holds the device (docs/CLI.md "Safety": the trim mark), with
real processes on a file WAL: `walctl upload`'s or `walctl trim`'s trim is held at its failpoint
"trim-locked" (the writer lock taken, the mark on) for as long as a test likes.

An `append` started meanwhile waits for the trim, says so once on stderr, then appends; past
WALCTL_TRIM_WAIT it exits 5 naming the trim. A long-lived writer is refused at once, as before; a
reader is never held; a SIGKILLed trim leaves no mark (the kernel drops it); `init` does not wait."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.cli.conftest import REPO_ROOT, _env
from threadhelpers import wait_until
from walctl.device.locks import TrimHolder, lock_holder, trim_holder


def _start(*args, env: dict | None = None, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env),
                            cwd=str(REPO_ROOT))


def _finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture
def held_trim(tmp_path):
    """Factory: ``held_trim(*args, how="hold") -> (proc, ready)``: ``walctl ARGS`` started and stopped
    at its failpoint "trim-locked" (``how``: hold, until ``ready`` is removed; pause, until a signal);
    killed at the end of the test if still running."""
    procs: list[subprocess.Popen] = []

    def start(*args, how: str = "hold"):
        ready = tmp_path / f"ready-{len(procs)}"
        proc = _start(*args, env={"WALCTL_FAILPOINT": f"trim-locked:{how}", "WALCTL_FAILPOINT_READY": str(ready)})
        procs.append(proc)
        wait_until(lambda: ready.exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        return proc, ready

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _waiting_line(proc: subprocess.Popen) -> str:
    """The first stderr line of a writer that waits (it prints nothing before)."""
    return proc.stderr.readline()


def _records(run, dev: str) -> list[str]:
    res = run("recover", dev, "--payload", "text", "--json")
    assert res.exit_code == 0, res
    return [r["payload"] for r in res.json_lines() if r["type"] == "record"]


def test_an_append_started_while_an_upload_trims_waits_and_then_appends(run, new_wal, held_trim, tmp_path):
    dev = new_wal("1MiB")
    assert run("append", dev, "--stream", "1", "a", "b").exit_code == 0
    upload, ready = held_trim("upload", dev, "--store", tmp_path / "store", "--json")
    assert trim_holder(dev) == TrimHolder(upload.pid, "walctl upload")
    assert lock_holder(dev) == upload.pid
    append = _start("append", dev, "--stream", "1", "c", "d", "e")
    assert _waiting_line(append) == (f"walctl: warning: {dev}: waiting up to 30 s for walctl upload "
                                     f"(pid {upload.pid}) to finish trimming\n")
    ready.unlink()  # the trim goes on, and ends
    code, out, err = _finish(upload)
    assert code == 0, err
    assert json.loads(out)["trimmed_to"] is not None
    code, out, err = _finish(append)
    assert code == 0, err
    # each acknowledged; the summary last (a tmpfs's buffered-I/O warning may come before it)
    assert len(out.split()) == 3 and err.splitlines()[-1].startswith("appended 3 records")
    assert _records(run, dev) == ["c", "d", "e"]  # the upload trimmed a and b; nothing of the append lost
    assert trim_holder(dev) is None


def test_a_trim_held_past_the_wait_refuses_the_append_naming_it(run, new_wal, held_trim):
    dev = new_wal("1MiB")
    offsets = [int(x) for x in run("append", dev, "a", "b").stdout.split()]
    trim, _ = held_trim("trim", dev, offsets[0], how="pause")
    res = run("append", dev, "c", env={"WALCTL_TRIM_WAIT": "200ms"})
    assert res.exit_code == 5, res
    assert res.stderr.splitlines() == [
        f"walctl: warning: {dev}: waiting up to 0.2 s for walctl trim (pid {trim.pid}) to finish trimming",
        f"walctl: error: a trim by walctl trim (pid {trim.pid}) holds the device, {dev} (it still held it after "
        f"0.2 s, the wait WALCTL_TRIM_WAIT sets; see what pid {trim.pid} is doing, then run this again)"]
    assert res.stdout == ""
    trim.terminate()
    assert trim.wait(timeout=30) == 143
    assert _records(run, dev) == ["a", "b"]  # neither the trim nor the append wrote
    # --quiet: the wait's warning left out like append's others; the error still said
    trim, _ = held_trim("trim", dev, offsets[0], how="pause")
    res = run("append", dev, "c", "--quiet", env={"WALCTL_TRIM_WAIT": "200ms"})
    assert res.exit_code == 5, res
    assert res.stderr.splitlines() == [
        f"walctl: error: a trim by walctl trim (pid {trim.pid}) holds the device, {dev} (it still held it after "
        f"0.2 s, the wait WALCTL_TRIM_WAIT sets; see what pid {trim.pid} is doing, then run this again)"]
    trim.terminate()
    assert trim.wait(timeout=30) == 143


def test_a_bad_wait_is_a_usage_error(run, new_wal):
    dev = new_wal("1MiB")
    res = run("append", dev, "c", env={"WALCTL_TRIM_WAIT": "soon"})
    assert res.exit_code == 2, res
    assert res.error_line() == ("walctl: error: invalid value for WALCTL_TRIM_WAIT: 'soon' "
                                "(a duration such as 30s, 500ms, or 0 for no wait; at most 7d)")


def test_a_long_lived_writer_is_refused_at_once_and_named(run, new_wal, held_writer):
    dev = new_wal("1MiB")
    writer = held_writer(dev)
    res = run("append", dev, "c")
    assert res.exit_code == 5, res
    assert res.stderr == (f"walctl: error: another writer holds the device, {dev} "
                       f"(pid {writer.proc.pid}, walctl append)\n")  # no wait, and the holder named
    res = run("trim", dev, writer.offsets[0])
    assert res.exit_code == 5 and "waiting" not in res.stderr, res


def test_readers_are_never_held_by_a_trim(run, new_wal, held_trim):
    dev = new_wal("1MiB")
    offsets = [int(x) for x in run("append", dev, "a", "b").stdout.split()]
    trim, ready = held_trim("trim", dev, offsets[0])
    assert _records(run, dev) == ["a", "b"]
    res = run("status", dev, "--json")
    assert res.exit_code == 0, res
    status = res.json_lines()[-1]
    assert (status["lock_holder_pid"], status["lock_holder_trim"]) == (trim.pid, "walctl trim")  # said as a trim
    human = run("status", dev)
    assert human.exit_code == 0 and ", trimming (walctl trim)" in human.stdout, human
    assert trim_holder(dev) == TrimHolder(trim.pid, "walctl trim")  # the readers took nothing from it
    ready.unlink()
    code, _, err = _finish(trim)
    assert code == 0, err
    assert _records(run, dev) == ["b"]


def test_a_sigkilled_trim_leaves_no_mark(run, new_wal, held_trim):
    dev = new_wal("1MiB")
    offsets = [int(x) for x in run("append", dev, "a", "b").stdout.split()]
    trim, _ = held_trim("trim", dev, offsets[0], how="pause")
    assert trim_holder(dev) == TrimHolder(trim.pid, "walctl trim")
    trim.kill()
    assert trim.wait(timeout=30) == -signal.SIGKILL
    assert trim_holder(dev) is None and lock_holder(dev) is None  # the kernel dropped both with the process
    res = run("append", dev, "c")
    assert res.exit_code == 0 and "waiting" not in res.stderr, res
    assert _records(run, dev) == ["a", "b", "c"]


def test_sigterm_during_the_wait_exits_143_without_a_traceback(run, new_wal, held_trim):
    dev = new_wal("1MiB")
    offsets = [int(x) for x in run("append", dev, "a", "b").stdout.split()]
    trim, ready = held_trim("trim", dev, offsets[0])
    append = _start("append", dev, "c")
    assert "to finish trimming" in _waiting_line(append)
    append.send_signal(signal.SIGTERM)
    code, out, err = _finish(append)
    assert code == 143 and out == "", err
    assert "Traceback" not in err and err.startswith("walctl: error: interrupted"), err
    ready.unlink()
    assert _finish(trim)[0] == 0
    assert _records(run, dev) == ["b"]


def test_a_trim_waits_for_another_trim_but_init_does_not(run, new_wal, held_trim):
    dev = new_wal("1MiB")
    offsets = [int(x) for x in run("append", dev, "a", "b", "c").stdout.split()]
    first, ready = held_trim("trim", dev, offsets[0])
    res = run("init", dev, "--force", "--discard-unuploaded")
    assert res.exit_code == 5, res
    assert res.stderr == (f"walctl: error: a trim by walctl trim (pid {first.pid}) holds the device, {dev} "
                       f"(a trim holds it for moments: run this again when it has finished)\n")
    second = _start("trim", dev, offsets[1])
    assert _waiting_line(second) == (f"walctl: warning: {dev}: waiting up to 30 s for walctl trim "
                                     f"(pid {first.pid}) to finish trimming\n")
    ready.unlink()
    assert _finish(first)[0] == 0
    code, _, err = _finish(second)
    assert code == 0, err
    assert _records(run, dev) == ["c"]
