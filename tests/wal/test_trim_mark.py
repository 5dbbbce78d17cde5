"""The trim mark from the engine's side (docs/CLI.md "Safety"), in-process: `walctl trim`
(trim_wal) and upload's trim (trim_scanned) mark their writer lock as a trim's, stop at the failpoint
"trim-locked" with it held; open_writer (append) waits for a marked trim, up to WALCTL_TRIM_WAIT,
and is refused at once by anything else. (tests/cli/test_trim_wait.py: the same with processes.)"""

from __future__ import annotations

import os

import pytest

from walctl.device import open_device
from walctl.device import opening
from walctl.device.locks import TrimHolder, lock_holder, trim_holder
from walctl.errors import RefusedError
from walctl.wal import lifecycle, trim

from walhelpers import append_records, header_of, new_wal

CAPACITY = 256 * 1024


@pytest.fixture
def wal(tmp_path):
    path = str(tmp_path / "w.img")
    new_wal(path, CAPACITY)
    return path, [offset for offset, _ in append_records(path, 3)]


@pytest.fixture
def seen(monkeypatch):
    """The failpoints trim reaches, each with who held the device's lock and mark then."""
    reached = []

    def spy(name):
        path = reached_path[0]
        reached.append((name, lock_holder(path), trim_holder(path)))

    reached_path: list[str] = []
    monkeypatch.setattr(trim, "failpoint", spy)
    return reached, reached_path


@pytest.mark.parametrize("how", ["trim_wal", "trim_scanned"])
def test_a_trim_holds_the_lock_marked_at_its_failpoint(wal, seen, how, monkeypatch):
    path, offsets = wal
    reached, reached_path = seen
    reached_path.append(path)
    monkeypatch.setattr("sys.argv", ["/venv/bin/walctl", "trim" if how == "trim_wal" else "upload", path])
    getattr(trim, how)(path, offsets[1])
    command = "walctl trim" if how == "trim_wal" else "walctl upload"
    assert reached == [("trim-locked", os.getpid(), TrimHolder(os.getpid(), command))]
    assert header_of(path).header.trim_offset == offsets[1]
    assert trim_holder(path) is None and lock_holder(path) is None  # both gone with its descriptor


def test_open_writer_marks_only_when_asked(wal, monkeypatch):
    path, _ = wal
    opened = lifecycle.open_writer(path)
    try:
        assert trim_holder(path) is None
    finally:
        opened.writer.close()
    opened = lifecycle.open_writer(path, trim_mark=True)
    try:
        assert trim_holder(path) == TrimHolder(os.getpid(), "walctl")
    finally:
        opened.writer.close()


def test_open_writer_waits_for_a_trim_then_opens(wal, monkeypatch):
    path, offsets = wal
    monkeypatch.delenv("WALCTL_TRIM_WAIT", raising=False)
    holder = open_device(path, writable=True, trim_mark=True)
    said = []

    def on_wait(message):
        said.append(message)
        holder.close()

    opened = lifecycle.open_writer(path, on_trim_wait=on_wait)
    opened.writer.close()
    assert said == [f"{path}: waiting up to 30 s for walctl (pid {os.getpid()}) to finish trimming"]


def test_open_writer_takes_its_wait_from_the_environment_or_the_caller(wal, monkeypatch):
    path, _ = wal
    said = []
    with open_device(path, writable=True, trim_mark=True):
        monkeypatch.setenv("WALCTL_TRIM_WAIT", "0")
        with pytest.raises(RefusedError) as info:
            lifecycle.open_writer(path, on_trim_wait=said.append)
        assert info.value.what == f"a trim by walctl (pid {os.getpid()}) holds the device" and said == []
        monkeypatch.setenv("WALCTL_TRIM_WAIT", "1h")
        with pytest.raises(RefusedError):
            lifecycle.open_writer(path, on_trim_wait=said.append, trim_wait_s=0.05)
        assert said == [f"{path}: waiting up to 0.05 s for walctl (pid {os.getpid()}) to finish trimming"]


def test_trim_wal_waits_for_another_trim(wal, monkeypatch):
    """walctl trim waits for a trim as append does (two crons: upload's and an operator's)."""
    path, offsets = wal
    holder = open_device(path, writable=True, trim_mark=True)
    pauses = []
    monkeypatch.setattr(opening, "_sleep", lambda s: (pauses.append(s), holder.close()))
    result = trim.trim_wal(path, offsets[0])
    assert result.trim_offset == offsets[0] and pauses == [opening.TRIM_POLL_S]


def test_trim_scanned_does_not_wait_upload_retries_itself(wal, monkeypatch):
    path, offsets = wal
    monkeypatch.setattr(opening, "_sleep", lambda s: pytest.fail("trim_scanned waited"))
    with open_device(path, writable=True, trim_mark=True):
        with pytest.raises(RefusedError) as info:
            trim.trim_scanned(path, offsets[0])
    assert info.value.what == f"a trim by walctl (pid {os.getpid()}) holds the device"
    assert header_of(path).header.trim_offset == -1
