"""write_lines from append's reaper thread (issue 31: one os.write of a block's acknowledgement lines,
no import or memoryview per call): what sys.stdout held goes out first, and a short write(2) is
finished, in order, so no acknowledgement line is ever cut or lost."""

from __future__ import annotations

import os
import sys
import threading

from walctl.commands import _shared


def _in_thread(fn) -> None:
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive() and not errors, errors


def test_off_the_main_thread_buffered_text_goes_first_and_a_short_write_is_finished(tmp_path, monkeypatch):
    path = tmp_path / "acks"
    with open(path, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        out.write('{"type":"note"}\n')  # held in sys.stdout's buffer, not yet at the descriptor
        real_write = os.write
        sizes = []

        def short_write(fd, data):  # the kernel may take part of a write (a pipe, a signal)
            sizes.append(real_write(fd, bytes(data[:7])))
            return sizes[-1]

        lines = b"".join(b"%d\n" % n for n in range(1000, 1020))
        monkeypatch.setattr(os, "write", short_write)
        _in_thread(lambda: _shared.write_lines(lines))
        _in_thread(lambda: _shared.write_lines("2000\n2001\n"))  # text (str) too
        monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"type":"note"}\n' + lines + b"2000\n2001\n"
    assert len(sizes) == -(-len(lines) // 7) + 2 and max(sizes) == 7


def test_off_the_main_thread_a_closed_reader_raises_broken_pipe(monkeypatch):
    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        seen = []

        def write():
            try:
                _shared.write_lines(b"1\n")
            except BrokenPipeError:
                seen.append("broken pipe")  # append's emit turns it into exit 141

        _in_thread(write)
        assert seen == ["broken pipe"]
        monkeypatch.setattr(sys, "stdout", sys.__stdout__)
