"""walctl.wal.feed (issue 32): records read from an input and packed into a real writer's blocks,
through feed_frames' contract: which records are acknowledged with which stream offsets, where it
stops and why, the input errors' exact words, and the stdin pipe's enlargement."""

from __future__ import annotations

import io
import os
import sys
import time

import pytest

from walctl.device import open_device
from walctl.errors import UsageError
from walctl.format import framepack
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import HEADERS_SIZE
from walctl.wal import feed
from walctl.wal.feed import FeedEnd, FeedStats, Source, feed_frames, open_source
from walctl.wal.headers import read_headers
from walctl.wal.init import init_wal
from walctl.wal.writer import WalWriter
from walctl.wal.writer_blocks import FrameSpec

from threadhelpers import this_thread_only

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")

STREAM = 3


class Chunks(io.RawIOBase):
    """An input that returns at most ``step`` bytes a read (a pipe delivering pieces)."""

    def __init__(self, data: bytes, step: int):
        self.data, self.pos, self.step = data, 0, step

    def readable(self):
        return True

    def readinto(self, view):
        n = min(len(view), self.step, len(self.data) - self.pos)
        view[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


@pytest.fixture
def writer(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 << 20 | HEADERS_SIZE)
    dev = open_device(path, writable=True)
    state = read_headers(dev)
    w = WalWriter(dev, state, 0, batch_interval_s=3600.0, checkpoint=Checkpoint(0, complete=True))
    got = []

    def on_frames(f):
        got.append((f.base_offset, f.count, f.payload_bytes))

    w.on_frames = on_frames
    w.got = got
    yield w
    if not w._closed:
        w.abort()


def run(writer, data: bytes, *, lines=True, step=1 << 30, next_base=0, base_limit=1 << 40, check=lambda: False,
        max_payload=1000, stats=None):
    spec = FrameSpec(lines, STREAM, 0, max_payload)
    src = Source(Chunks(data, step), owned=True)
    end = feed_frames(writer, src, spec, next_base, base_limit, check, stats)
    writer.drain()
    return end


def prefixed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def test_lines_are_records_and_the_last_line_needs_no_newline(writer):
    stats = FeedStats()
    end = run(writer, b"one\ntwo\nthree", next_base=10, stats=stats)
    assert end == FeedEnd(13, framepack.STOP_INPUT, -1)
    assert writer.got == [(10, 2, 6), (12, 1, 5)]  # the last line: packed at the input's end
    assert writer.records_acked == 3
    assert stats.reads == 2 and stats.bytes_read == 13 and stats.pipe_bytes == 0
    assert stats.read_ns > 0 and stats.pack_ns > 0


def test_an_empty_input_is_no_record(writer):
    assert run(writer, b"", next_base=4) == FeedEnd(4)
    assert writer.got == [] and writer.records_acked == 0


def test_records_cut_across_reads_are_joined(writer):
    data = b"".join(b"%d:" % i + b"x" * i + b"\n" for i in range(40))
    end = run(writer, data, step=7)
    assert end.next_base == 40 and end.stop == framepack.STOP_INPUT
    assert writer.records_acked == 40
    assert sum(n for _, n, _ in writer.got) == 40
    assert sum(p for _, _, p in writer.got) == len(data) - 40


def test_length_prefixed_records_cut_across_reads(writer):
    payloads = [bytes([i]) * (i * 13) for i in range(30)]
    end = run(writer, prefixed(*payloads), lines=False, step=5)
    assert end == FeedEnd(30, framepack.STOP_INPUT, -1)
    assert writer.records_acked == 30
    assert sum(p for _, _, p in writer.got) == sum(map(len, payloads))


def test_a_record_larger_than_the_read_buffer_grows_it(writer, monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 16)
    payloads = [b"a" * 5, b"b" * 100, b"c" * 3]
    end = run(writer, prefixed(*payloads), lines=False, step=1000)
    assert end == FeedEnd(3, framepack.STOP_INPUT, -1)
    assert sum(p for _, _, p in writer.got) == 108
    end = run(writer, b"x" * 50 + b"\nyy\n", next_base=3)
    assert end == FeedEnd(5, framepack.STOP_INPUT, -1)
    assert writer.records_acked == 5


def test_a_line_longer_than_the_largest_record_stops_before_buffering_it(writer, monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 64)
    end = run(writer, b"ok\n" + b"z" * 500, step=64, max_payload=100)
    assert end.stop == framepack.STOP_TOO_LARGE
    assert end.next_base == 1
    assert end.next_len == 128  # the unfinished line's bytes read so far, over 100
    assert writer.records_acked == 1


def test_a_line_exactly_the_largest_record_is_taken(writer, monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 8)
    end = run(writer, b"a" * 20 + b"\n" + b"b" * 20 + b"\n", step=8, max_payload=20)
    assert end == FeedEnd(2, framepack.STOP_INPUT, -1)
    end = run(writer, b"a" * 21 + b"\n", step=8, max_payload=20, next_base=2)
    assert end == FeedEnd(2, framepack.STOP_TOO_LARGE, 21)


def test_a_length_prefix_over_the_largest_record_stops_at_once(writer):
    data = prefixed(b"fine") + (5000).to_bytes(4, "big") + b"partial"
    end = run(writer, data, lines=False, step=11, max_payload=1000)
    assert end == FeedEnd(1, framepack.STOP_TOO_LARGE, 5000)
    assert writer.records_acked == 1
    end = run(writer, prefixed(b"y" * 1000), lines=False, step=3, max_payload=1000, next_base=1)
    assert end == FeedEnd(2, framepack.STOP_INPUT, -1)


def test_a_truncated_length_prefix_names_where_it_starts(writer):
    with pytest.raises(UsageError) as info:
        run(writer, prefixed(b"abc") + b"\0\0\0", lines=False, step=2)
    assert info.value.what == "truncated length prefix at input byte 7"
    writer.drain()
    assert writer.records_acked == 1  # the records before it are queued
    with pytest.raises(UsageError) as info:
        run(writer, prefixed(b"abc") + b"\0", lines=False)
    assert info.value.what == "truncated length prefix at input byte 7"


def test_a_truncated_record_names_where_it_starts_its_length_and_what_came(writer):
    with pytest.raises(UsageError) as info:
        run(writer, prefixed(b"abc", b"de") + (300).to_bytes(4, "big") + b"x" * 10, lines=False, step=4)
    assert info.value.what == "truncated record at input byte 13: length 300, got 10"
    with pytest.raises(UsageError) as info:
        run(writer, (9).to_bytes(4, "big"), lines=False)
    assert info.value.what == "truncated record at input byte 0: length 9, got 0"


def test_the_stream_offset_limit_stops_after_the_last_allowed_record(writer):
    end = run(writer, b"a\nb\nc\nd\n", next_base=5, base_limit=6)
    assert end == FeedEnd(7, framepack.STOP_MAX, -1)
    assert writer.got == [(5, 2, 2)]


def test_check_stops_taking_input(writer):
    calls = []

    def check():
        calls.append(1)
        return True

    end = run(writer, b"a\nb\n" * 10, step=4, check=check)
    assert end == FeedEnd(2, None, -1)
    assert len(calls) == 1
    assert writer.records_acked == 2


def test_check_is_asked_after_each_packing_until_it_says_stop(writer):
    calls = []
    end = run(writer, b"a\nb\n" * 3, step=4, check=lambda: calls.append(1) or len(calls) >= 2)
    assert end == FeedEnd(4, None, -1)


def test_buffer_compact_moves_the_tail_and_grows():
    buf = feed._Buffer(8)
    buf.data[:] = b"abcdefgh"
    buf.start, buf.fill = 5, 8
    buf.compact(4)
    assert (bytes(buf.data[:3]), buf.start, buf.fill, len(buf.data)) == (b"fgh", 0, 3, 8)
    buf.start = 1
    buf.compact(20)
    assert (bytes(buf.data[:2]), buf.start, buf.fill, len(buf.data)) == (b"gh", 0, 2, 20)
    buf.compact(21)
    assert len(buf.data) == 40 and bytes(buf.data[:2]) == b"gh"
    buf.compact(40)
    assert len(buf.data) == 40


def test_open_source_reads_a_file_and_closes_what_it_opened(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"hello\n")
    src = open_source(str(path))
    view = bytearray(16)
    assert src.readinto(memoryview(view)) == 6 and view[:6] == b"hello\n"
    assert src.readinto(memoryview(view)) == 0
    assert src.owned and src.pipe_bytes == 0
    src.close()
    assert src.stream.closed


def test_open_source_refuses_a_missing_file(tmp_path):
    with pytest.raises(UsageError) as info:
        open_source(str(tmp_path / "nope"))
    assert info.value.what == "cannot read input file: No such file or directory"
    assert info.value.where == str(tmp_path / "nope")
    assert info.value.hint == "--input names a readable file, or '-' for standard input"


def test_a_source_that_reads_nothing_returns_zero():
    class Empty:
        def readinto(self, view):
            return None

    assert Source(Empty(), owned=False).readinto(memoryview(bytearray(4))) == 0
    closed = []

    class Stream:
        def close(self):
            closed.append(1)

    Source(Stream(), owned=False).close()
    assert closed == []


def test_stdin_is_read_raw_and_its_pipe_enlarged(monkeypatch):
    r, w = os.pipe()
    try:
        stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(r, "rb", closefd=False)))
        monkeypatch.setattr(sys, "stdin", stdin)
        src = open_source("-")
        assert isinstance(src.stream, io.FileIO) and not src.owned
        assert src.pipe_bytes >= 1 << 16
        if os.geteuid() == 0:
            assert src.pipe_bytes == feed.PIPE_BYTES
        os.write(w, b"abc")
        view = bytearray(8)
        assert src.readinto(memoryview(view)) == 3
        src.close()
        os.write(w, b"d")  # not closed: standard input is not the source's
        assert src.readinto(memoryview(view)) == 1
    finally:
        os.close(r)
        os.close(w)


def test_stdin_that_is_not_a_pipe_is_left_as_it_is(monkeypatch, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with open(path, "rb") as f:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f))
        src = open_source("-")
        assert src.pipe_bytes == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"y")))
    src = open_source("-")
    assert src.pipe_bytes == 0 and isinstance(src.stream, io.BytesIO)
    assert feed._enlarge_pipe(object()) == 0


def test_constants():
    assert feed.BUFFER_BYTES == 4 << 20 and feed.PIPE_BYTES == 1 << 20 and feed.F_SETPIPE_SZ == 1031
    assert FeedEnd(3) == FeedEnd(3, framepack.STOP_INPUT, -1)


class Asked(Chunks):
    """Chunks that records how many bytes each read asked for."""

    def __init__(self, data: bytes, step: int):
        super().__init__(data, step)
        self.asked = []

    def readinto(self, view):
        self.asked.append(len(view))
        return super().readinto(view)


def test_a_file_is_read_unbuffered_straight_into_the_buffer(tmp_path):
    path = tmp_path / "in.bin"
    path.write_bytes(b"x")
    src = open_source(str(path))
    try:
        assert type(src.stream) is io.FileIO
    finally:
        src.close()


def test_a_pipe_that_cannot_be_enlarged_keeps_its_size(monkeypatch, tmp_path):
    monkeypatch.setattr(feed, "PIPE_BYTES", (1 << 31) - 1)  # over any pipe-max-size: F_SETPIPE_SZ fails
    monkeypatch.setattr(feed, "PIPE_MAX_SIZE_FILE", str(tmp_path / "missing"))  # and the limit is not known
    r, w = os.pipe()
    try:
        with io.FileIO(r, "rb", closefd=False) as f:
            assert feed._enlarge_pipe(f) == 65536  # F_GETPIPE_SZ: the default pipe
    finally:
        os.close(r)
        os.close(w)


def test_a_pipe_asked_over_pipe_max_size_gets_pipe_max_size(monkeypatch, tmp_path):
    """Asked more than the system lets this process have, the pipe still gets the most it may
    (issue 31: at the 64 KiB default a GiB takes 16 times the reads), not its default size."""
    limit = tmp_path / "pipe-max-size"
    limit.write_text("262144\n")
    monkeypatch.setattr(feed, "PIPE_MAX_SIZE_FILE", str(limit))
    monkeypatch.setattr(feed, "PIPE_BYTES", (1 << 31) - 1)  # over any pipe-max-size: F_SETPIPE_SZ fails
    r, w = os.pipe()
    try:
        with io.FileIO(r, "rb", closefd=False) as f:
            assert feed._enlarge_pipe(f) == 262144
    finally:
        os.close(r)
        os.close(w)


def test_the_first_read_fills_the_whole_buffer(writer, monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 16)
    stats = FeedStats()
    spec = FrameSpec(True, STREAM, 0, 1000)
    src = Asked(b"a\n" * 8, 1 << 20)
    assert feed_frames(writer, Source(src, True), spec, 0, 1 << 40, lambda: False, stats) == FeedEnd(8)
    assert src.asked == [16, 16]
    assert stats.reads == 2 and stats.bytes_read == 16


def test_a_length_prefixed_record_larger_than_the_buffer_is_taken_in_one_more_read(writer, monkeypatch):
    monkeypatch.setattr(feed, "BUFFER_BYTES", 16)
    spec = FrameSpec(False, STREAM, 0, 1000)
    src = Asked(prefixed(b"r" * 100, b"s"), 1 << 20)
    assert feed_frames(writer, Source(src, True), spec, 0, 1 << 40, lambda: False) == FeedEnd(2)
    # 16 bytes, then the buffer grows to the record's 104 bytes (not by doubling) for its other 88
    assert src.asked == [16, 88, 104, 104]
    writer.drain()
    assert writer.records_acked == 2


def test_the_time_spent_reading_and_packing_adds_up(writer, monkeypatch):
    # feed.time is the time module: only this thread's calls tick (a writer's completion thread, or
    # one an earlier test left, reads the real clock).
    ticks = iter(range(0, 10 ** 9, 10))
    monkeypatch.setattr(feed.time, "perf_counter_ns", this_thread_only(lambda: next(ticks), time.perf_counter_ns))
    stats = FeedStats()
    end = run(writer, b"a\nb\nc\n", step=2, stats=stats)
    assert end == FeedEnd(3)
    assert stats.reads == 4  # three reads of a line, then the end
    assert stats.read_ns == 40 and stats.pack_ns == 30


def test_a_line_is_refused_once_its_unfinished_part_passes_the_largest_record(writer):
    end = run(writer, b"a" * 30, step=7, max_payload=20)
    assert end == FeedEnd(0, framepack.STOP_TOO_LARGE, 21)
    end = run(writer, b"b" * 20 + b"\n", step=10, max_payload=20)  # 20 unfinished bytes: may still end
    assert end == FeedEnd(1, framepack.STOP_INPUT, -1)


def test_no_record_is_taken_past_the_stream_offset_limit(writer):
    assert run(writer, b"a\nb\n", next_base=7, base_limit=6) == FeedEnd(7, framepack.STOP_MAX, -1)
    assert writer.records_acked == 0


def test_a_truncated_tail_after_full_blocks_names_its_input_byte(writer):
    big = [bytes([i]) * 100_000 for i in range(3)]  # a block takes two: the third starts a new one
    with pytest.raises(UsageError) as info:
        run(writer, prefixed(*big) + b"\0\0", lines=False, max_payload=200_000)
    assert info.value.what == "truncated length prefix at input byte 300012"


def test_a_check_stopping_at_a_too_large_record_keeps_its_length(writer):
    assert run(writer, prefixed(b"c" * 50), lines=False, max_payload=10, check=lambda: True) == FeedEnd(0, None, 50)


def test_the_last_line_is_one_record_whatever_the_buffer_held_before(writer):
    end = run(writer, b"ab\n\ncd")
    assert end == FeedEnd(3)
    assert writer.records_acked == 3
    assert sum(p for _, _, p in writer.got) == 4


def test_buffer_compact_moves_a_tail_that_overlaps_where_it_goes():
    """The tail is moved in place (memoryview, no bytes copy of it) even when it overlaps the front."""
    data = bytes(range(32))
    for start in range(1, 20):
        buf = feed._Buffer(32)
        buf.data[:] = data
        buf.start, buf.fill = start, 30
        buf.compact(4)
        assert (bytes(buf.data[:30 - start]), buf.start, buf.fill) == (data[start:30], 0, 30 - start)


def test_the_c_packing_time_is_part_of_the_packing_cpu_time(writer):
    """feed_us.pack_c (issue 31): frame_pack's own CPU time, inside pack_cpu (the rest: the writer's Python)."""
    stats = FeedStats()
    payloads = [os.urandom(1000) for _ in range(400)]
    end = run(writer, prefixed(*payloads), lines=False, step=1 << 16, stats=stats)
    assert end == FeedEnd(400, framepack.STOP_INPUT, -1)
    assert 0 < stats.pack_c_ns <= stats.pack_cpu_ns
