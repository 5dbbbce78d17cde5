"""append's acknowledgements written from the reaper thread (issue 31): straight to stdout's
descriptor by write_lines, whole and in order, without its signal deferral (Python raises signals
on the main thread only); a reader that left still stops the input (stdout_closed)."""

from __future__ import annotations

import io
import os
import threading

import pytest

import walctl.device.signals
from walctl.commands import append as append_cmd


def _in_thread(fn) -> None:
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive() and not errors, errors


@pytest.fixture
def stdout_pipe():
    """A fresh pipe and a text stream on its write end: (its read end, the text stream), set as
    sys.stdout by the test itself (pytest's capture sets sys.stdout again between setup and call)."""
    r, w = os.pipe()
    out = io.TextIOWrapper(io.FileIO(w, "wb"), write_through=False)
    yield r, out
    out.close()
    os.close(r)


def test_acks_from_the_reaper_thread_go_to_the_descriptor_whole_and_after_what_stdout_held(stdout_pipe, monkeypatch):
    r, out = stdout_pipe
    monkeypatch.setattr("sys.stdout", out)

    class no_deferral:
        def __init__(self, *args, **kwargs):
            raise AssertionError("signals deferred off the main thread")

    monkeypatch.setattr(walctl.device.signals, "signals_deferred", no_deferral)
    acks = append_cmd._Acks(1, True, False)
    out.write("held\n")  # written the usual way before: it must come first
    lines = [b'{"type":"record","offset":%d}\n' % i for i in range(1000)]  # under a pipe's 64 KiB
    _in_thread(lambda: [acks.emit(b"".join(lines[i:i + 100])) for i in range(0, 1000, 100)])
    os.set_blocking(r, False)
    got = b""
    while True:
        try:
            piece = os.read(r, 1 << 20)
        except BlockingIOError:
            break
        if not piece:
            break
        got += piece
    assert got == b"held\n" + b"".join(lines)
    assert acks.stats["stdout_closed"] is False


def test_a_reader_gone_is_seen_from_the_reaper_thread(monkeypatch):
    r, w = os.pipe()
    os.close(r)  # the reader left (Python ignores SIGPIPE: the write fails with EPIPE)
    out = io.TextIOWrapper(io.FileIO(w, "wb"))
    monkeypatch.setattr("sys.stdout", out)
    acks = append_cmd._Acks(1, False, False)
    try:
        _in_thread(lambda: acks.emit(b"1\n2\n"))
        assert acks.stats["stdout_closed"] is True
    finally:
        out.close()
