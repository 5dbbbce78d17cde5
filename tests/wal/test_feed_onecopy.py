"""walctl.wal.feed's direct path (issue 31): `append --input FILE` of length-prefixed records reads
a regular file straight into the blocks (framepack.frame_read). The same records reach the log with
the same acknowledgements, and the same errors stop it, as through a pipe (the buffered path) or
without the C extension; the small records and every unusual end go through the buffer."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from walctl.device import open_device
from walctl.format import framepack
from walctl.wal import feed
from walctl.wal.feed import FeedEnd, FeedStats, feed_frames, open_source
from walctl.wal.lifecycle import init_wal, read_wal_state
from walctl.wal.reader import run_scan
from walctl.wal.writer_blocks import FrameSpec

from test_mut_feed import Chunks  # a pipe-like input: at most ``step`` bytes a read

pytestmark = pytest.mark.skipif(not framepack.DIRECT, reason="walctl.format._native is not built here")

MiB = 1 << 20


def framed(payloads) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def append(tmp_path, data: bytes, how: str, *extra: str, skip: int = 0):
    """`walctl append` of ``data`` (how: file, pipe, stdin-file, no-native) on a new 32 MiB WAL:
    (exit code, stderr's last line, acknowledgements, (payload, stream offset) of the log's records)."""
    wal = str(tmp_path / f"wal-{how}")
    init_wal(wal, 32 * MiB)
    path = tmp_path / "in.bin"
    path.write_bytes(data)
    env = dict(os.environ, WALCTL_NO_NATIVE="1" if how == "no-native" else "0")
    args = [sys.executable, "-m", "walctl", "append", wal, "--stream", "5", "--framing", "length-prefixed", "--json",
            *extra]
    if how in ("file", "no-native"):
        proc = subprocess.run([*args, "--input", str(path)], capture_output=True, timeout=120, env=env)
    elif how == "pipe":
        proc = subprocess.run([*args, "--input", "-"], input=data, capture_output=True, timeout=120, env=env)
    else:
        with open(path, "rb") as f:
            f.seek(skip)
            proc = subprocess.run([*args, "--input", "-"], stdin=f, capture_output=True, timeout=120, env=env)
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    acks = [line for line in lines if line["type"] == "record"]
    dev = open_device(wal, writable=False)
    try:
        entries, _ = run_scan(dev, read_wal_state(dev, wal).header)
    finally:
        dev.close()
    got = [(e.batch.payload, e.batch.base_offset) for e in entries]
    assert [e.offset for e in entries] == [a["offset"] for a in acks]
    err = proc.stderr.decode().strip().splitlines()
    return proc.returncode, err[-1].replace(wal, "WAL") if err else "", acks, got


def mixed() -> list[bytes]:
    rng = random.Random(31)
    return ([rng.randbytes(rng.randrange(16 << 10, 70000)) for _ in range(40)] + [b"", b"s" * 100]
            + [rng.randbytes(40000) for _ in range(5)] + [rng.randbytes(3 * MiB + 5)]
            + [rng.randbytes(20000) for _ in range(30)])


@pytest.mark.parametrize("how", ["file", "stdin-file", "pipe", "no-native"])
def test_the_log_holds_the_input_records(tmp_path, how):
    payloads = mixed()
    code, err, acks, got = append(tmp_path, framed(payloads), how)
    assert code == 0, err
    assert got == [(p, i) for i, p in enumerate(payloads)]
    assert [a["payload_bytes"] for a in acks] == list(map(len, payloads))
    assert [a["stream_offset"] for a in acks] == list(range(len(payloads)))


def test_stdin_from_a_file_starts_where_its_offset_is(tmp_path):
    payloads = [bytes([i]) * 30000 for i in range(6)]
    code, err, acks, got = append(tmp_path, framed(payloads), "stdin-file", skip=2 * 30004)
    assert code == 0, err
    assert got == [(p, i) for i, p in enumerate(payloads[2:])]


def _same_as_piped(tmp_path, data: bytes, *extra: str):
    file_run = append(tmp_path, data, "file", *extra)
    pipe_run = append(tmp_path, data, "pipe", *extra)
    assert file_run[0] == pipe_run[0] and file_run[1] == pipe_run[1]
    assert file_run[3] == pipe_run[3]
    assert [a["payload_bytes"] for a in file_run[2]] == [a["payload_bytes"] for a in pipe_run[2]]
    return file_run


@pytest.mark.parametrize("cut, message", [
    (2, "truncated length prefix at input byte 100008"),
    (4 + 7, "truncated record at input byte 100008: length 50000, got 7"),
    (4 + 49999, "truncated record at input byte 100008: length 50000, got 49999"),
])
def test_truncated_input_stops_with_the_pipes_error(tmp_path, cut, message):
    data = framed([b"a" * 50000, b"b" * 50000, b"c" * 50000])[:100008 + cut]  # the third starts at 100008
    code, err, acks, got = _same_as_piped(tmp_path, data)
    assert code == 2 and message in err
    assert got == [(b"a" * 50000, 0), (b"b" * 50000, 1)]


def test_a_length_over_the_wals_largest_stops_with_the_pipes_error(tmp_path):
    data = framed([b"a" * 50000, b"b" * 50000]) + (64 * MiB).to_bytes(4, "big") + b"x" * 10
    code, err, acks, got = _same_as_piped(tmp_path, data)
    assert code == 2 and "larger than this WAL's largest record" in err
    assert len(got) == 2


def test_the_last_stream_offset_stops_with_the_pipes_error(tmp_path):
    from walctl import bounds

    data = framed([b"a" * 30000] * 4)
    code, err, acks, got = _same_as_piped(tmp_path, data, "--base-offset", str(bounds.OFFSET_END_LIMIT - 2 - 1))
    assert code == 2 and len(got) == 2


class Sink:
    """A writer that records append_frames' calls: the direct ones take nothing (as frame_read leaving
    the first record to the buffered path), the buffered ones every byte."""

    def __init__(self):
        self.calls = []

    def append_frames(self, src, start, end, spec, base, max_records):
        self.calls.append((start, end, spec.fd >= 0))
        return 0, start if spec.fd >= 0 else end, framepack.STOP_INPUT, -1


def test_feed_direct_positions_the_file_for_the_buffered_path(tmp_path):
    path = tmp_path / "in.bin"
    path.write_bytes(framed([b"a" * 10]))
    src = open_source(str(path))
    try:
        assert src.direct
        stats = FeedStats()
        sink = Sink()
        assert feed_frames(sink, src, FrameSpec(False, 1, 0, 1000), 0, 1 << 40, lambda: False, stats) == FeedEnd(0)
        # the direct call took nothing: the buffered path read the file from its start
        assert sink.calls[0] == (0, feed.FILE_BUFFER_BYTES, True) and sink.calls[1][2] is False
        assert stats.bytes_read == 14 and stats.reads == 3
    finally:
        src.close()


def test_lines_and_pipes_never_go_direct(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\nb\n")
    src = open_source(str(path))
    try:
        sink = Sink()
        feed_frames(sink, src, FrameSpec(True, 1, 0, 1000), 0, 1 << 40, lambda: False)
        assert all(not direct for _, _, direct in sink.calls)
    finally:
        src.close()
    r, w = os.pipe()
    os.close(w)
    try:
        src = feed.Source(os.fdopen(r, "rb", buffering=0), owned=True)
        assert not src.direct
    finally:
        src.close()


# ---- in-process, against a real writer (what mutation testing runs) ----

from walctl.device import open_device as _open_device  # noqa: E402
from walctl.format.checkpoint import Checkpoint  # noqa: E402
from walctl.format.header import HEADERS_SIZE  # noqa: E402
from walctl.wal.headers import read_headers  # noqa: E402
from walctl.wal.writer import WalWriter  # noqa: E402


@pytest.fixture
def writers(tmp_path):
    made = []

    def make():
        path = str(tmp_path / f"w{len(made)}.img")
        init_wal(path, 1 << 20 | HEADERS_SIZE)
        dev = _open_device(path, writable=True)
        w = WalWriter(dev, read_headers(dev), 0, batch_interval_s=3600.0, checkpoint=Checkpoint(0, complete=True))
        w.got = []
        w.on_frames = lambda f: w.got.append((f.base_offset, f.count, f.payload_bytes))
        w.path = path
        made.append(w)
        return w

    yield make
    for w in made:
        if not w._closed:
            w.abort()


def scanned(w) -> list[tuple[bytes, int]]:
    w.close()
    dev = _open_device(w.path, writable=False)
    try:
        entries, _ = run_scan(dev, read_wal_state(dev, w.path).header)
    finally:
        dev.close()
    return [(e.batch.payload, e.batch.base_offset) for e in entries]


def direct_and_buffered(writers, tmp_path, data: bytes, *, max_payload=1 << 19, base=0, base_limit=1 << 40,
                        buffer_bytes=None, check=lambda: False, skip=0, preset=0):
    """feed_frames of ``data[skip:]`` from a file positioned at ``skip`` (the direct path) and through a
    pipe-like source: both ends, the file's position after the direct run, the run's stats (their
    times starting at ``preset``), its append_frames calls ((direct?, records)) and both logs' records."""
    path = tmp_path / "in.bin"
    path.write_bytes(data)
    spec = FrameSpec(False, 4, 0, max_payload)
    runs = []
    for direct in (True, False):
        w = writers()
        calls = []
        plain = w.append_frames

        def spy(src, start, end, spec, base, max_records, plain=plain, calls=calls):
            got = plain(src, start, end, spec, base, max_records)
            calls.append((spec.fd >= 0, got[0]))
            return got

        w.append_frames = spy
        stats = FeedStats(read_ns=preset, pack_ns=preset, pack_cpu_ns=preset, pack_c_ns=preset)
        if direct:
            src = feed.Source(open(path, "rb", buffering=0), owned=True)
            src.stream.seek(skip)
            src.direct, src.buffer_bytes = True, buffer_bytes or feed.FILE_BUFFER_BYTES
        else:
            src = feed.Source(Chunks(data[skip:], 4096), owned=False)
        try:
            try:
                end = feed_frames(w, src, spec, base, base_limit, check, stats)
            except Exception as exc:  # noqa: BLE001 - compared between the two paths
                end = (type(exc), str(exc))
            position = os.lseek(src.stream.fileno(), 0, os.SEEK_CUR) if direct else None
        finally:
            src.close()
        w.drain()
        runs.append((end, position, stats, calls, scanned(w)))
    return runs


def big(n: int, size: int = 20000) -> list[bytes]:
    return [bytes([65 + i % 26]) * (size + i) for i in range(n)]


def test_direct_records_and_stops_are_the_buffered_ones(writers, tmp_path):
    payloads = big(12) + [b"", b"small"] + big(3)
    data = framed(payloads)
    (d_end, pos, stats, d_got, d_log), (b_end, _, _, b_got, b_log) = direct_and_buffered(writers, tmp_path, data)
    assert d_end == b_end == FeedEnd(len(payloads))
    assert d_log == b_log == [(p, i) for i, p in enumerate(payloads)]
    assert sum(n for _, n in d_got) == len(payloads) and pos == len(data)
    assert sum(n for direct, n in d_got if direct) == 12  # the small ones and all after them: buffered
    assert stats.bytes_read == len(data)
    assert stats.read_ns > 0 and stats.pack_c_ns > 0 and stats.pack_cpu_ns > 0 and stats.pack_ns >= stats.pack_cpu_ns // 2


def test_all_direct_takes_one_call_a_chunk_and_reads_once_more_at_the_end(writers, tmp_path):
    data = framed(big(8))
    runs = direct_and_buffered(writers, tmp_path, data, buffer_bytes=3 * 20004)
    (d_end, pos, stats, _, d_log), (b_end, _, _, _, b_log) = runs
    assert d_end == b_end and d_log == b_log and pos == len(data)
    # 8 records of ~20 KiB, 3 starting in each 60 KiB chunk: 3 direct calls, then the buffered path's read of the end
    assert stats.reads == 4 and stats.bytes_read == len(data)


def test_a_payload_over_the_largest_stops_the_direct_path_there(writers, tmp_path):
    data = framed(big(3) + [b"x" * 30000] + big(2))
    (d_end, pos, _, _, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data,
                                                                             max_payload=25000)
    assert d_end == b_end == FeedEnd(3, framepack.STOP_TOO_LARGE, 30000)
    assert d_log == b_log and len(d_log) == 3
    assert pos == 3 * 4 + 20000 + 20001 + 20002  # at the record it refused


def test_a_payload_of_the_largest_is_taken_directly(writers, tmp_path):
    data = framed([b"x" * 25000, b"y" * 24999])
    (d_end, _, _, _, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data, max_payload=25000)
    assert d_end == b_end == FeedEnd(2) and d_log == b_log


def test_the_last_stream_offset_is_the_buffered_paths(writers, tmp_path):
    data = framed(big(5))
    (d_end, _, _, calls, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data, base=10,
                                                                               base_limit=12)
    assert d_end == b_end and d_end.stop == framepack.STOP_MAX and d_end.next_base == 13
    assert d_log == b_log and len(d_log) == 3
    assert calls[0] == (True, 3)  # all three directly, then the buffered path finds the stop


def test_past_the_last_stream_offset_nothing_is_taken(writers, tmp_path):
    data = framed(big(2))
    (d_end, _, _, calls, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data, base=13,
                                                                               base_limit=12)
    assert d_end == b_end and d_end.stop == framepack.STOP_MAX and d_end.next_base == 13
    assert d_log == b_log == [] and calls[0] == (True, 0)


@pytest.mark.parametrize("cut", [2, 4 + 7])
def test_a_cut_end_is_the_buffered_paths_error(writers, tmp_path, cut):
    data = framed(big(4))[:2 * 4 + 20000 + 20001 + cut]
    (d_end, _, _, _, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data)
    assert d_end == b_end and d_end[0].__name__ == "UsageError" and "input byte 40009" in d_end[1]
    assert d_log == b_log and len(d_log) == 2


def test_check_stops_the_direct_path_after_a_chunk(writers, tmp_path):
    data = framed(big(8))
    asked = []

    def check():
        asked.append(1)
        return len(asked) == 2

    (d_end, pos, stats, _, d_log), _ = direct_and_buffered(writers, tmp_path, data, buffer_bytes=3 * 20004,
                                                           check=check)
    assert d_end == FeedEnd(6, None, -1) and len(d_log) == 6
    assert pos == sum(4 + len(p) for p in big(6)) and stats.reads == 2 and stats.bytes_read == pos


def test_stdin_from_a_file_goes_direct_at_descriptor_zero(writers, tmp_path):
    import io

    payloads = big(4)
    path = tmp_path / "in.bin"
    path.write_bytes(framed(payloads))
    saved = os.dup(0)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.dup2(fd, 0)
        src = feed.Source(io.FileIO(0, "rb", closefd=False), owned=False)
        src.direct, src.buffer_bytes = True, feed.FILE_BUFFER_BYTES
        w = writers()
        stats = FeedStats()
        assert feed_frames(w, src, FrameSpec(False, 4, 0, 1 << 19), 0, 1 << 40, lambda: False, stats) == FeedEnd(4)
        # the records came by frame_read (descriptor 0 is a file too): one call, then the read of the end
        assert stats.reads == 2
        assert os.lseek(0, 0, os.SEEK_CUR) == len(framed(payloads))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(fd)
    w.drain()
    assert scanned(w) == [(p, i) for i, p in enumerate(payloads)]


def test_the_stage_times_add_to_what_was_there(writers, tmp_path):
    preset = 5 * 10**9
    (d_end, _, stats, _, _), _ = direct_and_buffered(writers, tmp_path, framed(big(6)), preset=preset)
    assert d_end == FeedEnd(6)
    for took in (stats.pack_ns, stats.pack_cpu_ns, stats.pack_c_ns):
        assert preset < took < preset + 10**10
    assert stats.pack_c_ns - preset <= stats.pack_cpu_ns - preset + 10**6


def test_check_at_a_refused_record_reports_its_length(writers, tmp_path):
    data = framed(big(2) + [b"x" * 30000] + big(1))
    (d_end, pos, _, _, d_log), _ = direct_and_buffered(writers, tmp_path, data, max_payload=25000,
                                                       check=lambda: True)
    assert d_end == FeedEnd(2, None, 30000) and len(d_log) == 2 and pos == 2 * 4 + 20000 + 20001


def test_a_file_read_from_its_middle_counts_input_bytes_from_there(writers, tmp_path):
    skip = 2 * 4 + 20000 + 20001
    data = framed(big(5))[:skip + 2 * 4 + 20002 + 20003 + 4 + 5]  # from skip: two whole records, then a cut one
    (d_end, pos, _, calls, d_log), (b_end, _, _, _, b_log) = direct_and_buffered(writers, tmp_path, data, skip=skip)
    assert d_end == b_end and "truncated record at input byte 40013: length 20004, got 5" in d_end[1]
    assert d_log == b_log and len(d_log) == 2 and calls[0] == (True, 2)


def test_a_record_ending_at_a_chunks_end_keeps_the_direct_path(writers, tmp_path):
    payloads = [bytes([i]) * 20000 for i in range(4)]
    data = framed(payloads)
    (d_end, pos, stats, calls, d_log), _ = direct_and_buffered(writers, tmp_path, data, buffer_bytes=2 * 20004)
    assert d_end == FeedEnd(4) and pos == len(data) and len(d_log) == 4
    # two chunks of two records, a third call at the end of the file, then the buffered read of the end
    assert [c for c in calls if c[0]] == [(True, 2), (True, 2), (True, 0)] and stats.reads == 4


def test_stdin_from_a_regular_file_may_go_direct(monkeypatch, tmp_path):
    import io

    path = tmp_path / "f"
    path.write_bytes(b"x")
    with open(path, "rb") as f:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f))
        assert open_source("-").direct is True
    r, w = os.pipe()
    try:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.FileIO(r, "rb", closefd=False))))
        assert open_source("-").direct is False
    finally:
        os.close(r)
        os.close(w)
    assert open_source("/dev/zero").direct is False
