"""walctl.wal.feed (issue 31): a regular file is read into a 1 MiB buffer (it stays in the L2 cache
from the read to the packing); a pipe, a device or a stream that is no file keeps the 4 MiB one."""

from __future__ import annotations

import io
import os
import sys

import pytest

from walctl.format import framepack
from walctl.wal import feed
from walctl.wal.feed import FeedEnd, FeedStats, Source, feed_frames, open_source
from walctl.wal.writer_blocks import FrameSpec

MiB = 1 << 20


class Sink:
    """A writer that takes every byte it is given as packed (the reads are what is looked at)."""

    def __init__(self):
        self.calls = []

    def append_frames(self, src, start, end, spec, base, max_records):
        self.calls.append(end - start)
        return 0, end, framepack.STOP_INPUT, -1


def test_the_buffer_sizes():
    assert feed.FILE_BUFFER_BYTES == 1 << 20 and feed.BUFFER_BYTES == 4 << 20


def test_a_regular_file_is_read_a_mebibyte_at_a_time(tmp_path):
    path = tmp_path / "in.bin"
    path.write_bytes(b"a\n" * (5 * MiB // 4))  # 2.5 MiB
    src = open_source(str(path))
    assert src.buffer_bytes == feed.FILE_BUFFER_BYTES
    stats = FeedStats()
    sink = Sink()
    try:
        end = feed_frames(sink, src, FrameSpec(True, 1, 0, 1000), 0, 1 << 40, lambda: False, stats)
    finally:
        src.close()
    assert end == FeedEnd(0)
    # 1 MiB, 1 MiB, the last half, then the end (a 4 MiB buffer: all of it, then the end)
    assert sink.calls == [MiB, MiB, MiB // 2]
    assert stats.reads == 4 and stats.bytes_read == 5 * MiB // 2


def test_a_source_made_by_hand_reads_into_the_large_buffer(monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 24)
    src = Source(io.BytesIO(b"x" * 60), owned=False)
    assert src.buffer_bytes == 24
    sink = Sink()
    assert feed_frames(sink, src, FrameSpec(True, 1, 0, 1000), 0, 1 << 40, lambda: False) == FeedEnd(0)
    assert sink.calls == [24, 24, 12]


def test_a_device_named_as_file_keeps_the_large_buffer():
    src = open_source("/dev/zero")
    try:
        assert src.buffer_bytes == feed.BUFFER_BYTES
    finally:
        src.close()


def test_a_fifo_named_as_file_keeps_the_large_buffer(tmp_path):
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    keep = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a reader first: the writer's open does not block
    w = os.open(path, os.O_WRONLY)
    try:
        src = open_source(path)  # a writer is there: this open does not block either
        try:
            assert src.buffer_bytes == feed.BUFFER_BYTES
        finally:
            src.close()
    finally:
        os.close(w)
        os.close(keep)


def test_stdin_from_a_regular_file_is_read_a_mebibyte_at_a_time(monkeypatch, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x\n")
    with open(path, "rb") as f:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f))
        assert open_source("-").buffer_bytes == feed.FILE_BUFFER_BYTES


def test_stdin_from_a_pipe_or_no_file_keeps_the_large_buffer(monkeypatch):
    r, w = os.pipe()
    try:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.FileIO(r, "rb", closefd=False))))
        assert open_source("-").buffer_bytes == feed.BUFFER_BYTES
    finally:
        os.close(r)
        os.close(w)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"y")))  # no fileno: UnsupportedOperation
    assert open_source("-").buffer_bytes == feed.BUFFER_BYTES


@pytest.mark.parametrize("kind", ["no fileno", "unsupported", "closed", "bad descriptor"])
def test_is_regular_is_false_for_what_is_no_open_file(kind, tmp_path):
    if kind == "no fileno":
        stream = object()  # AttributeError
    elif kind == "unsupported":
        stream = io.BytesIO(b"")  # io.UnsupportedOperation
    elif kind == "closed":
        stream = open(tmp_path / "c", "wb")
        stream.close()  # ValueError
    else:
        class Stale:
            def fileno(self):
                return 1 << 24  # no such descriptor (over any RLIMIT_NOFILE): fstat raises OSError (EBADF)

        stream = Stale()
    assert feed._is_regular(stream) is False


def test_is_regular_is_true_for_a_file(tmp_path):
    with open(tmp_path / "r", "wb") as f:
        assert feed._is_regular(f) is True
