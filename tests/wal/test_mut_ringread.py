"""wal/ringread.py's own code (issue 32): the LogReader's chunks (their size, the known end, the
carried tail, the device's unaligned end), read-ahead with small sizes (segments, the carry, a
record longer than a segment, a failed read), intact_run's answers, the report's JSON, batch_of,
Runs and their accounting, the trim record, probe and all_zero; on in-memory devices."""

from __future__ import annotations

import threading

import pytest

from walctl.device import MemoryDevice
from walctl.errors import IOFailure
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import ALIGN, HEADERS_SIZE, WalHeader
from walctl.wal import ringread as rr
from walctl.wal.findings import HOLE, Finding
from walctl.wal.gaps import StreamGap
from walctl.wal.layout import Ring
from walctl.wal.ringread import Entry, LogReader, ScanResult

from muthelpers import Image, KiB, body

MiB = 1 << 20


class Recording(MemoryDevice):
    """A MemoryDevice whose bytes are a pattern, noting each read (position, length)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.data[:] = (bytes(range(251)) * (size // 251 + 1))[:size]  # no two blocks alike
        self.reads: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def pread_into(self, offset, buf):
        with self.lock:
            self.reads.append((offset, memoryview(buf).nbytes))
        return super().pread_into(offset, buf)


def _at(dev, ring, offset, length):
    p = ring.physical(offset)
    return bytes(dev.data[p:p + length])


# -- Entry, Intact ----------------------------------------------------------------------------------

def test_an_entry_ends_after_its_header_and_body():
    assert Entry(100, b"x" * 10, None).end == 134


def test_intact_is_its_count_and_says_so():
    stop = bulk.Stop("end", 5, 7)
    i = rr.Intact(b"", 3, memoryview(b""), 4, stop, (1, 2))
    assert len(i) == 4 and (i.chunk, i.rel, i.count, i.stop, i.where) == (b"", 3, 4, stop, (1, 2))
    assert repr(i) == f"Intact(rel=3, count=4, stop={stop!r}, where=(1, 2))"


# -- LogReader without read-ahead --------------------------------------------------------------------

def test_a_read_reads_one_chunk_and_serves_later_reads_from_it():
    dev = Recording(4 * MiB)
    ring = Ring(4 * MiB)
    acct = ScanResult(WalHeader(4 * MiB), ring)
    r = LogReader(dev, ring, acct)
    assert (r.bytes_read, r.stop, r.bound, r.want, r.position()) == (0, None, None, rec.SIZE, (-1, 0))
    assert bytes(r.read(100, 50)) == _at(dev, ring, 100, 50)
    assert dev.reads == [(HEADERS_SIZE, MiB)] and r.bytes_read == MiB and acct.bytes_read == MiB
    assert r.position() == (HEADERS_SIZE, MiB)
    assert bytes(r.read(MiB - 24, 24)) == _at(dev, ring, MiB - 24, 24) and len(dev.reads) == 1
    assert bytes(r.read(0, 0)) == b"" and len(dev.reads) == 1


def test_a_read_across_the_chunk_s_end_carries_its_tail_and_reads_on():
    dev = Recording(4 * MiB)
    ring = Ring(4 * MiB)
    r = LogReader(dev, ring)
    r.read(0, 10)
    got = r.read(MiB - 100, 300)  # the chunk's last block moves to the front; the device read goes on
    assert bytes(got) == _at(dev, ring, MiB - 100, 300)
    assert dev.reads == [(HEADERS_SIZE, MiB), (HEADERS_SIZE + MiB, MiB - ALIGN)]
    assert r.bytes_read == 2 * MiB - ALIGN and r.position() == (HEADERS_SIZE + MiB - ALIGN, MiB)
    got = r.read(3 * MiB, 5000)  # elsewhere: read whole, nothing carried
    assert bytes(got) == _at(dev, ring, 3 * MiB, 5000) and dev.reads[-1] == (HEADERS_SIZE + 3 * MiB, MiB - 2 * ALIGN)
    assert r.position() == (HEADERS_SIZE + 3 * MiB, MiB - 2 * ALIGN)  # (the device's end)


def test_a_read_longer_than_a_chunk_reads_it_whole():
    dev = Recording(4 * MiB)
    ring = Ring(4 * MiB)
    r = LogReader(dev, ring)
    got = r.read(10, MiB + 5000)
    assert bytes(got) == _at(dev, ring, 10, MiB + 5000)
    assert dev.reads == [(HEADERS_SIZE, MiB + 8192)]


def test_a_read_stops_at_the_lap_end_and_wraps_to_the_ring_start():
    dev = Recording(64 * KiB)
    ring = Ring(64 * KiB)
    r = LogReader(dev, ring)
    got = r.read(ring.size - 10, 100)
    assert bytes(got) == _at(dev, ring, ring.size - 10, 10)
    assert dev.reads == [(HEADERS_SIZE + ring.size - ALIGN, ALIGN)]
    assert bytes(r.read(ring.size, 30)) == bytes(dev.data[HEADERS_SIZE:HEADERS_SIZE + 30])
    assert dev.reads[-1] == (HEADERS_SIZE, ring.size)  # the chunk is clipped to the device
    assert len(r.read(2 * ring.size - 1, 5)) == 1 and len(r.read(ring.size + 5, 0)) == 0
    assert len(r.read(ring.size + 5, -3)) == 0


def test_a_known_end_of_the_log_stops_a_chunk_one_block_past_it():
    dev = Recording(4 * MiB)
    ring = Ring(4 * MiB)
    r = LogReader(dev, ring)
    r.stop = 5000
    assert bytes(r.read(100, 50)) == _at(dev, ring, 100, 50)
    assert dev.reads == [(HEADERS_SIZE, 12288)]  # align_up(5000 + 4096)
    long = LogReader(dev, ring)
    long.stop = 5000
    assert bytes(long.read(100, 20000)) == _at(dev, ring, 100, 20000)
    assert dev.reads[-1] == (HEADERS_SIZE, 20480)  # the record's length wins
    r.stop = 9000
    r.read(9000 + ALIGN, 10)  # at or past the known end and its block: a whole chunk
    assert dev.reads[-1] == (HEADERS_SIZE + 3 * ALIGN, MiB)
    r2 = LogReader(dev, ring)
    r2.stop = 9000
    r2.read(9000 + ALIGN - 1, 10)  # just inside it: up to its block
    assert dev.reads[-1] == (HEADERS_SIZE + 3 * ALIGN, ALIGN)


def test_a_ring_ending_inside_a_block_reads_to_the_device_s_end():
    cap = 64 * KiB + 512  # an AutoMQ ring of 512-byte blocks: the device ends inside a 4 KiB block
    dev = Recording(cap)
    ring = Ring(cap, 512)
    r = LogReader(dev, ring)
    tail = ring.size - 300
    assert bytes(r.read(tail, 200)) == _at(dev, ring, tail, 200)
    start = (ring.physical(tail) // ALIGN) * ALIGN
    assert dev.reads == [(start, ALIGN)] and r.bytes_read == cap - start


class _Failing(Recording):
    def __init__(self, size, cause):
        super().__init__(size)
        self.cause = cause

    def pread_into(self, offset, buf):
        if offset + memoryview(buf).nbytes > self.size_bytes or self.cause == "always":
            err = IOFailure("boom", where="x")
            if self.cause is not None:
                err.__cause__ = OSError(5, "EIO")
            raise err
        return super().pread_into(offset, buf)


def test_a_real_read_error_fails_the_read():
    cap = 64 * KiB + 512
    r = LogReader(_Failing(cap, "eio"), Ring(cap, 512))
    with pytest.raises(IOFailure):
        r.read(Ring(cap, 512).size - 300, 200)
    r = LogReader(_Failing(64 * KiB, "always"), Ring(64 * KiB))
    with pytest.raises(IOFailure):
        r.read(0, 10)
    r = LogReader(_Failing(cap, None), Ring(cap, 512))  # a short read at the unaligned end: kept
    assert len(r.read(Ring(cap, 512).size - 300, 200)) == 200


class _Short(Recording):
    """Refuses reads ending past a point inside the device (not its end)."""

    def pread_into(self, offset, buf):
        if offset + memoryview(buf).nbytes > 20 * KiB:
            raise IOFailure("short", where="x")
        return super().pread_into(offset, buf)


def test_a_short_read_inside_the_device_is_an_error():
    with pytest.raises(IOFailure):
        LogReader(_Short(64 * KiB), Ring(64 * KiB)).read(0, 10)


# -- intact_run ---------------------------------------------------------------------------------------

def _img():
    img = Image(64 * KiB)
    img.block([body(1, i) for i in range(3)])  # 0, 107, 214 (ends 321)
    img.block([body(2, 0, 500), body(1, 3)])  # 4096, 4653 (ends 4760)
    return img


def test_intact_run_decodes_the_chunk_s_records_in_one_call():
    img = _img()
    r = LogReader(img.dev, img.ring)
    run = r.intact_run(0)
    assert isinstance(run, rr.Intact) and run.count == 5 and run.rel == 0
    assert run.where == r.position() == (HEADERS_SIZE, img.ring.size)
    assert run.rows[0:run.count * bulk.ROW:bulk.ROW].tolist() == [0, 107, 214, 4096, 4653]
    assert run.stop.offset == 8192 and r.want == rec.SIZE  # (past the zero padding after 4760)
    one = r.intact_run(107, 1)
    assert one.count == 1 and one.rel == 107 and one.stop.offset == 214
    r.bound = 4096  # no record starting at or past the bound
    assert r.intact_run(0).rows[0:3 * bulk.ROW:bulk.ROW].tolist() == [0, 107, 214] and r.intact_run(0).count == 3
    r.bound = 0
    assert r.intact_run(214).count == 0


def test_intact_run_without_padding_skipping_for_one_record():
    img = _img()
    r = LogReader(img.dev, img.ring)
    assert r.intact_run(214, 2).count == 2  # bulk: the zero padding after 321 is skipped
    one = r.intact_run(214, 1)
    assert one.count == 1 and one.stop.offset == 321
    nxt = r.intact_run(321, 1)
    assert nxt.count == 0 and nxt.stop.offset == 321


def test_intact_run_reads_when_the_chunk_does_not_hold_what_it_wants():
    img = _img()
    dev = img.dev
    reads = []
    real = dev.pread_into
    dev.pread_into = lambda o, b: (reads.append((o, memoryview(b).nbytes)), real(o, b))[1]
    r = LogReader(dev, img.ring)
    r.stop = 0  # chunks of one block past the start
    assert r.intact_run(0).count == 3 and reads == [(HEADERS_SIZE, ALIGN)]
    assert r.want == rec.SIZE
    r.want = 600
    run = r.intact_run(4096)  # past the known end's block: the rest of the ring
    assert reads[-1] == (HEADERS_SIZE + 4096, img.ring.size - 4096) and run.count == 2 and r.want == rec.SIZE
    r = LogReader(dev, img.ring)
    r.stop = 4096
    assert r.intact_run(4096).count == 2 and reads[-1] == (HEADERS_SIZE + 4096, ALIGN)
    r.want = 2 * ALIGN
    run = r.intact_run(4096)  # the chunk holds less than wanted: read on, as far as asked
    assert reads[-1] == (HEADERS_SIZE + 2 * ALIGN, ALIGN) and run.count == 2
    assert r.position() == (HEADERS_SIZE + 4096, 2 * ALIGN) and r.want == rec.SIZE


def test_intact_run_is_empty_where_no_header_fits_before_the_lap_end():
    img = _img()
    r = LogReader(img.dev, img.ring)
    assert r.intact_run(img.ring.size - rec.SIZE + 1) == []
    assert r.intact_run(img.ring.size - rec.SIZE) != []
    r2 = LogReader(img.dev, img.ring)
    r2.read(0, 10)
    r2._chunk_len = 4096 + 10  # a chunk ending inside the header at 4096 (a short device read)
    r2.want = 0
    assert r2.intact_run(4096) == []


def test_intact_run_in_the_second_lap_knows_its_lap_end():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(size - 107, body(1, 0))  # the lap's last record, ending exactly on the lap end
    r = LogReader(img.dev, img.ring)
    assert r.intact_run(size - 107).count == 1
    img.put(2 * size - 107, body(1, 0))
    r = LogReader(img.dev, img.ring)
    run = r.intact_run(2 * size - 107)
    assert run.count == 1 and run.rows[0] == 2 * size - 107


# -- read-ahead, with small sizes --------------------------------------------------------------------

@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(rr, "CHUNK_BYTES", 8 * KiB)
    monkeypatch.setattr(rr, "READ_AHEAD_BYTES", 8 * KiB)
    monkeypatch.setattr(rr, "READ_AHEAD_CARRY", 8 * KiB)
    monkeypatch.setattr(rr, "READ_AHEAD_DEPTH", 2)


def _forward(r, dev, ring, step, length, stop, o=0):
    while o < stop:
        got = r.read(o, length)
        assert bytes(got) == _at(dev, ring, o, len(got)), o
        o += step


def test_read_ahead_only_on_aligned_rings_a_device_holds():
    assert LogReader(Recording(64 * KiB), Ring(64 * KiB), readahead=True)._ahead is not None
    odd = 64 * KiB + 512
    assert LogReader(Recording(odd), Ring(odd, 512))._ahead is None
    assert LogReader(Recording(odd), Ring(odd, 512), readahead=True)._ahead is None
    assert LogReader(Recording(64 * KiB), Ring(64 * KiB + 8192), readahead=True)._ahead is None
    assert LogReader(Recording(64 * KiB), Ring(64 * KiB, 2048), readahead=True)._ahead is not None  # at 4096
    assert LogReader(Recording(68 * KiB), Ring(66 * KiB, 1024), readahead=True)._ahead is None  # at 2048
    r = LogReader(Recording(64 * KiB), Ring(64 * KiB))
    r.read_ahead(forward=True)
    assert r._ahead is not None and r._kick is True
    r.close()
    assert r._ahead is None
    r.close()  # (twice: a no-op)
    r = LogReader(Recording(odd), Ring(odd, 512))
    r.read_ahead(forward=True)
    assert r._kick is False


def test_read_ahead_starts_after_three_reads_in_a_row(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring, readahead=True)
    r.bound = ring.size  # (as a scan's: else read-ahead goes on into the next lap)
    try:
        r.read(0, 100)
        r.read(8 * KiB, 100)
        assert not r._ahead.reading() and r._following == 1
        r.read(16 * KiB, 100)  # the third in a row: read ahead from the chunk's end
        assert r._following == 2 and r._ahead.reading()
        _forward(r, dev, ring, 8 * KiB, 100, ring.size, 24 * KiB)
    finally:
        r.close()
    offsets = sorted(o - HEADERS_SIZE for o, _ in dev.reads)
    assert offsets == list(range(0, ring.size, 8 * KiB))  # every block read once
    assert r.bytes_read == ring.size and threading.active_count() < 50


def test_read_ahead_after_a_seek_goes_forward_from_the_next_read(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.read_ahead(forward=True)
    try:
        r.read(0, 100)
        assert r._kick is False
        _forward(r, dev, ring, 4 * KiB, 3000, ring.size, 4096)
    finally:
        r.close()
    assert sorted(o - HEADERS_SIZE for o, _ in dev.reads) == list(range(0, ring.size, 8 * KiB))
    assert sorted(n for _, n in dev.reads) == [8 * KiB] * (ring.size // (8 * KiB))
    assert r.bytes_read == ring.size


def test_read_ahead_carries_a_record_across_segments(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.read_ahead(forward=True)
    try:
        o = 0
        for length in (100, 3000, 7000, 9000, 20000, 500, 30000):
            got = r.read(o, length)
            assert bytes(got) == _at(dev, ring, o, length), (o, length)
            o += length - 50
    finally:
        r.close()
    assert sum(n for _, n in dev.reads) == r.bytes_read == 11 * 8 * KiB  # (69250 bytes asked for)
    assert sorted(o - HEADERS_SIZE for o, _ in dev.reads) == list(range(0, 88 * KiB, 8 * KiB))


def test_read_ahead_stops_at_the_bound_and_the_known_end(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    assert r._ahead_limit(0) == ring.size and r._ahead_limit(4096) == 4096 + ring.size
    r.bound = 50000
    assert r._ahead_limit(0) == 53248
    r.stop = 20000
    assert r._ahead_limit(0) == 24576 and r._ahead_limit(24095) == 24576 and r._ahead_limit(24096) == 24096
    r.bound = None
    assert r._ahead_limit(8192) == 24576
    r.stop = 100000
    assert r._ahead_limit(8192) == min(8192 + ring.size, 106496)


def test_a_failed_read_ahead_read_is_read_again_here(small):
    class Flaky(Recording):
        fail_at = None

        def pread_into(self, offset, buf):
            if threading.current_thread().name == "walctl-scan-read" and offset == self.fail_at:
                raise IOFailure("flaky", where="x")
            return super().pread_into(offset, buf)

    dev = Flaky(128 * KiB)
    dev.fail_at = HEADERS_SIZE + 24 * KiB
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = ring.size
    r.read_ahead(forward=True)
    try:
        _forward(r, dev, ring, 8 * KiB, 100, ring.size)
    finally:
        r.close()
    # the failed read is made here; the two read ahead after it (drained, counted) are read again
    # here until three reads in a row start read-ahead again
    assert r.bytes_read == ring.size + 2 * 8 * KiB
    offsets = sorted(o - HEADERS_SIZE for o, _ in dev.reads)
    assert offsets == sorted(list(range(0, ring.size, 8 * KiB)) + [32 * KiB, 40 * KiB])


def test_a_record_longer_than_a_segment_is_assembled(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.read_ahead(forward=True)
    try:
        assert bytes(r.read(0, 100)) == _at(dev, ring, 0, 100)
        got = r.read(100, 30000)
        assert bytes(got) == _at(dev, ring, 100, 30000)
        got = r.read(30100, 40000)
        assert bytes(got) == _at(dev, ring, 30100, 40000)
    finally:
        r.close()
    offsets = sorted(o - HEADERS_SIZE for o, _ in dev.reads)
    assert offsets == list(range(0, 88 * KiB, 8 * KiB))  # each once: segments copied together, none read again
    assert r.bytes_read == 88 * KiB


def test_the_read_ahead_segments_never_cross_the_lap_end(small):
    dev = Recording(64 * KiB + 4096)  # a device larger than the WAL
    ring = Ring(60 * KiB)  # 53248 bytes: 6.5 segments
    ahead = rr._ReadAhead(dev, ring)
    try:
        ahead.start(40 * KiB, 40 * KiB + ring.size)
        segs = []
        lo = 40 * KiB
        while lo < 40 * KiB + ring.size:
            seg = ahead.take(lo)
            assert seg is not None and seg.error is None
            assert bytes(memoryview(seg.buf)[8 * KiB:8 * KiB + seg.n]) == _at(dev, ring, lo, seg.n)
            segs.append((seg.lo, seg.n))
            ahead.release(seg.buf)
            lo += seg.n
        assert segs[0] == (40 * KiB, 8 * KiB) and segs[1] == (48 * KiB, ring.size - 48 * KiB)
        assert segs[2] == (ring.size, 8 * KiB)
        assert ahead.take(lo) is None and not ahead.reading()
        ahead.start(4096, 4096)  # empty, or unaligned: nothing
        ahead.start(4095, 8192)
        ahead.start(4096, 8191)
        assert not ahead.reading()
        ahead.start(4096, 12288)
        assert ahead.reading() and ahead.take(8192) is None
        drained = ahead.stop()
        assert [(s.lo, s.n) for s in drained] == [(4096, 8192)] and not ahead.reading()
    finally:
        ahead.close()


def test_read_ahead_waits_for_a_free_buffer(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    ahead = rr._ReadAhead(dev, ring)
    try:
        ahead.start(0, ring.size)
        assert len(ahead._queued) == 2  # READ_AHEAD_DEPTH
        a = ahead.take(0)
        b = ahead.take(8192)
        assert len(ahead._queued) == 0 or ahead._queued[0].lo == 16384
        ahead.top_up()
        held = [a.buf, b.buf]
        while ahead._buffers.take() is not None:  # every buffer taken: nothing more is asked for
            pass
        before = ahead._next
        ahead.top_up()
        assert ahead._next == before
    finally:
        ahead.stop()
        ahead.close()
    assert held


# -- ScanResult --------------------------------------------------------------------------------------

def test_a_report_s_json_and_its_corrupt_findings():
    ring = Ring(64 * KiB)
    res = ScanResult(WalHeader(64 * KiB, trim_offset=5, shutdown_type=1), ring, start_offset=5, end_offset=4097,
                     records=3, payload_bytes=99, bytes_read=8192)
    res.findings += [Finding(HOLE, 10, ring, "a"), Finding(HOLE, 20, ring, "b", explained=True),
                     Finding(HOLE, 30, ring, "c")]
    res.findings[2].moved = True
    assert res.corrupt == [res.findings[0]]
    assert res.next_block_offset == 8192
    assert res.to_json() == {"type": "summary", "records": 3, "payload_bytes": 99, "trim_offset": 5,
                             "start_offset": 5, "end_offset": 4097, "findings": 3, "corrupt_findings": 1,
                             "shutdown_type": "ungraceful", "stopped_by": "end of log", "complete": True,
                             "bytes_read": 8192, "read_from_offset": 5}
    res.read_from_offset = 0
    assert res.to_json()["read_from_offset"] == 0
    clean = ScanResult(WalHeader(64 * KiB), ring)
    assert clean.to_json()["shutdown_type"] == "graceful" and clean.next_block_offset == 0
    assert (clean.start_offset, clean.end_offset, clean.records, clean.payload_bytes, clean.bytes_read) == (0,) * 5
    assert clean.stopped_by == "end of log" and clean.complete is True and clean.read_from_offset is None
    assert clean.durable is None and clean.trim_entry is None and clean.stream_gaps == []


# -- batch_of, accepted, note_trimmed --------------------------------------------------------------

@pytest.mark.parametrize("sid, base, count", [(0, 0, 1), (5, 10, 3), (2 ** 62, 2 ** 63 - 2, 1)])
def test_batch_of_an_intact_batch(sid, base, count):
    b = StreamRecordBatch(sid, 7, base, count, b"payload")
    got, err = rr.batch_of(b.encode())
    assert err is None and got == b


@pytest.mark.parametrize("raw", [
    StreamRecordBatch(1, 0, 0, 1, b"p").encode() + b"x",  # longer than its length says
    StreamRecordBatch(1, 0, 0, 1, b"pp").encode()[:-1],
    StreamRecordBatch(1, 0, 2 ** 63 - 1, 1, b"p").encode(),  # ends at 2^63
    StreamRecordBatch(1, 0, 0, 0, b"p").encode(),
    StreamRecordBatch(-1, 0, 0, 1, b"p").encode(),
    StreamRecordBatch(1, 0, -1, 1, b"p").encode(),
    b"\x23" + StreamRecordBatch(1, 0, 0, 1, b"p").encode()[1:],
    b"short",
    b"",
])
def test_batch_of_what_is_no_batch_says_why_as_decode_does(raw):
    got, err = rr.batch_of(raw)
    assert got is None and err is not None
    with pytest.raises(type(err)) as exc:
        StreamRecordBatch.decode(raw, exact=True)
    assert str(exc.value) == str(err)


def test_batch_of_decodes_a_batch_the_fast_path_passes_on(monkeypatch):
    b = StreamRecordBatch(1, 0, 5, 2, b"abc")
    seen = []
    real = StreamRecordBatch.decode
    monkeypatch.setattr(StreamRecordBatch, "decode",
                        classmethod(lambda cls, buf, **kw: seen.append(kw) or real.__func__(cls, buf, **kw)))
    assert rr.batch_of(b.encode()) == (b, None) and seen == []
    raw = StreamRecordBatch(1, 0, 0, 1, b"p").encode() + b"x"
    assert rr.batch_of(raw)[0] is None and seen == [{"exact": True}]


def test_accepted_counts_a_record_and_its_stream():
    res = ScanResult(WalHeader(64 * KiB), Ring(64 * KiB))
    b1 = StreamRecordBatch(3, 0, 10, 2, b"abcd")
    e = rr.accepted(res, 100, b1.encode(), b1, False)
    assert e == Entry(100, b1.encode(), b1) and res.records == 1 and res.payload_bytes == 4
    assert res.stream_ends == {3: 12} and res.record_offsets == [] and res.streams.last == {3: (100, 12)}
    b2 = StreamRecordBatch(3, 0, 15, 1, b"x")
    rr.accepted(res, 200, b2.encode(), b2, True)
    assert res.stream_gaps == [StreamGap(3, 12, 15, 100, 200)] and res.record_offsets == [200]
    rr.accepted(res, 300, b"not a batch", None, True)
    assert res.records == 3 and res.payload_bytes == 4 + 1 + 11 and res.record_offsets == [200, 300]
    assert res.stream_ends == {3: 16}


def test_note_trimmed_keeps_the_trim_record_s_stream_end():
    res = ScanResult(WalHeader(64 * KiB), Ring(64 * KiB))
    b = StreamRecordBatch(4, 0, 7, 3, b"q")
    rr.note_trimmed(res, 50, b.encode(), b)
    assert res.trim_entry == Entry(50, b.encode(), b) and res.stream_ends == {4: 10}
    assert res.streams.last == {4: (50, 10)} and res.records == 0
    res2 = ScanResult(WalHeader(64 * KiB), Ring(64 * KiB))
    rr.note_trimmed(res2, 50, b"junk", None)
    assert res2.trim_entry == Entry(50, b"junk", None) and res2.stream_ends == {} and res2.streams.last == {}


# -- Run, account_run -------------------------------------------------------------------------------

def _run_of(bodies, first=0, stop=None):
    img = Image(64 * KiB)
    img.block(bodies)
    r = LogReader(img.dev, img.ring)
    found = r.intact_run(0)
    return rr.Run(found.chunk, found.rows, first, found.count if stop is None else stop), img


def test_a_run_s_offsets_columns_and_entries():
    bodies = [body(1, 0, 10), body(1, 1, 20, count=2), body(2, 5, 30)]
    run, img = _run_of(bodies)
    assert (run.count, run.offset, run.end) == (3, 0, 231)
    assert run.column(0) == [0, 67, 144] and run.column(4) == [1, 1, 2] and run.column(6) == [0, 1, 5]
    assert run.column(7) == [1, 2, 1] and run.column(2) == [len(b) for b in bodies]
    assert run.payload_bytes() == 60 and run.one_stream() is None
    entries = run.entries()
    assert [(e.offset, e.body) for e in entries] == [(0, bodies[0]), (67, bodies[1]), (144, bodies[2])]
    assert [e.batch for e in entries] == [StreamRecordBatch.decode(b) for b in bodies]
    assert [e.offset for e in run.entries(2)] == [0, 67] and [e.offset for e in run.entries(9)] == [0, 67, 144]
    assert run.entries(0) == []
    mid = rr.Run(run.chunk, run.rows, 1, 3)
    assert (mid.count, mid.offset, mid.end) == (2, 67, run.end) and mid.column(0) == [67, 144]
    assert mid.summary == (True, False, 1, False, len(bodies[1]) + len(bodies[2]))
    assert mid.payload_bytes() == 50 and [e.offset for e in mid.entries(1)] == [67]
    one = rr.Run(run.chunk, run.rows, 0, 2)
    assert one.one_stream() == 1 and one.end == 144
    given = rr.Run(run.chunk, run.rows, 0, 2, summary=(True, True, 9, True, 5))
    assert given.one_stream() == 9 and given.payload_bytes() == 5 - 2 * 33


def _res():
    return ScanResult(WalHeader(64 * KiB), Ring(64 * KiB))


def test_account_run_one_stream_following_on():
    run, _ = _run_of([body(1, 5), body(1, 6, count=2), body(1, 8)])
    res = _res()
    res.streams.last[1] = (9999, 3)  # the stream's batch before: a gap 3..5
    res.records, res.payload_bytes = 1, 7
    rr.account_run(res, run, True)
    assert res.records == 4 and res.payload_bytes == 7 + 150
    assert res.stream_ends == {1: 9} and res.streams.last == {1: (214, 9)}
    assert res.stream_gaps == [StreamGap(1, 3, 5, 9999, 0)] and res.record_offsets == [0, 107, 214]
    res2 = _res()
    res2.streams.last[1] = (9999, 5)  # no gap: it follows
    rr.account_run(res2, run, False)
    assert res2.stream_gaps == [] and res2.record_offsets == [] and res2.streams.last == {1: (214, 9)}
    res3 = _res()
    res3.streams.last[1] = (9999, 6)  # an overlap is no gap
    rr.account_run(res3, run, False)
    assert res3.stream_gaps == []


def test_account_run_of_several_streams_or_jumps():
    run, _ = _run_of([body(1, 5), body(2, 0), body(1, 7), body(2, 1, count=3)])
    res = _res()
    res.streams.last[2] = (8888, 0)
    rr.account_run(res, run, True)
    assert res.records == 4 and res.payload_bytes == 200
    assert res.stream_ends == {1: 8, 2: 4} and res.streams.last == {1: (214, 8), 2: (321, 4)}
    assert res.stream_gaps == [StreamGap(1, 6, 7, 0, 214)] and res.record_offsets == [0, 107, 214, 321]
    res2 = _res()
    rr.account_run(res2, run, False)
    assert res2.record_offsets == [] and res2.stream_gaps == [StreamGap(1, 6, 7, 0, 214)]
    jumpy, _ = _run_of([body(1, 0), body(1, 4)])  # one stream, not following on
    res3 = _res()
    rr.account_run(res3, jumpy, True)
    assert res3.stream_gaps == [StreamGap(1, 1, 4, 0, 107)] and res3.stream_ends == {1: 5}
    assert res3.record_offsets == [0, 107]


# -- probe, all_zero ----------------------------------------------------------------------------------

def test_probe_finds_the_first_block_with_a_current_record():
    img = Image(64 * KiB)
    img.put(3 * ALIGN, body(1, 0))
    img.put(5 * ALIGN, body(1, 1))
    img.put(ALIGN + 100, body(1, 2))  # not on a block boundary: not looked at
    img.put(img.ring.size + ALIGN, body(1, 3))  # a record of the next lap, at 4096 physically
    r = LogReader(img.dev, img.ring)
    assert rr.probe(r, 0, img.ring.size) == 3 * ALIGN
    assert rr.probe(r, 1, img.ring.size) == 3 * ALIGN
    assert rr.probe(r, 3 * ALIGN, img.ring.size) == 3 * ALIGN
    assert rr.probe(r, 3 * ALIGN + 1, img.ring.size) == 5 * ALIGN
    assert rr.probe(r, 0, 3 * ALIGN) is None and rr.probe(r, 0, 3 * ALIGN + 1) == 3 * ALIGN
    assert rr.probe(r, img.ring.size, 2 * img.ring.size) == img.ring.size + ALIGN


def test_probe_skips_a_record_across_the_lap_end():
    img = Image(64 * KiB)
    size = img.ring.size
    last = size - ALIGN
    raw = rec.RecordHeader.for_body(last, b"x" * ALIGN).encode()
    img.raw(last, raw)  # a header whose body would cross the lap end
    r = LogReader(img.dev, img.ring)
    assert rr.probe(r, last, size) is None
    img.raw(last, rec.encode_record(last, b"x" * (ALIGN - rec.SIZE)))  # ending exactly on it
    assert rr.probe(LogReader(img.dev, img.ring), last, size) == last


def test_probe_of_an_automq_log_uses_its_block_size_and_checksum():
    cap = 64 * KiB + 1024
    img = Image(cap)
    img.ring = Ring(cap, 512)
    from walctl.format.crc import automq_crc
    head = rec.RecordHeader.for_body(1536, b"")
    b = body(1, 0)
    raw = rec.STRUCT.pack(rec.DATA_MAGIC, len(b), 1536 + 24, automq_crc(b), 0)[:20]
    raw += automq_crc(raw).to_bytes(4, "big") + b
    p = img.ring.physical(1536)
    img.dev.data[p:p + len(raw)] = raw
    r = LogReader(img.dev, img.ring)
    assert rr.probe(r, 0, 8192, automq=True) == 1536
    assert rr.probe(r, 0, 8192) is None  # walctl's step and crc: not found
    img.dev.data[p:p + len(raw)] = rec.encode_record(1536, b)
    assert rr.probe(LogReader(img.dev, img.ring), 0, 8192, automq=True) is None
    assert head.offset == 1536


def test_all_zero():
    assert rr.all_zero(b"") and rr.all_zero(bytes(100)) and rr.all_zero(memoryview(bytes(5)))
    assert not rr.all_zero(b"\0\0\1") and not rr.all_zero(b"\1")


def test_read_ahead_s_device_reads_count_as_the_reader_s_thread_s(small, tmp_path):
    from walctl.device import open_device
    from walctl.device.fdio import bytes_read_total
    path = tmp_path / "w"
    path.write_bytes((bytes(range(251)) * 600)[:128 * KiB])
    dev = open_device(str(path), writable=False)
    try:
        ring = Ring(128 * KiB)
        before = bytes_read_total()
        r = LogReader(dev, ring)
        r.bound = ring.size
        r.read_ahead(forward=True)
        o = 0
        while o < 64 * KiB:
            assert len(r.read(o, 5000)) == 5000
            o += 5000
        r.close()
        assert bytes_read_total() - before == r.bytes_read == 88 * KiB  # (what was in flight counts too)
    finally:
        dev.close()


def test_intact_run_at_its_bound_decodes_nothing_and_says_end():
    img = _img()
    r = LogReader(img.dev, img.ring)
    for bound in (214, 0):
        r.bound = bound
        found = r.intact_run(214)
        assert found.count == 0 and found.stop == bulk.Stop(bulk.END, 214, 214, 0, 0)


def test_intact_run_refuses_a_record_crossing_the_lap_end():
    img = _img()
    size = img.ring.size
    last = size - 107
    img.raw(last, rec.RecordHeader.for_body(last, b"x" * 200).encode())
    r = LogReader(img.dev, img.ring)
    for n in (1, 1 << 30):
        stop = r.intact_run(last, n).stop
        assert (stop.reason, stop.offset, stop.expected, stop.found) == (bulk.CROSSES_LAP, last, size, last + 224)


def test_a_first_read_longer_than_a_segment_is_assembled_in_a_new_buffer(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.read_ahead(forward=True)
    try:
        assert bytes(r.read(0, 30000)) == _at(dev, ring, 0, 30000)
        assert r.position() == (HEADERS_SIZE, 32 * KiB)
    finally:
        r.close()
    assert sorted(o - HEADERS_SIZE for o, _ in dev.reads) == list(range(0, 48 * KiB, 8 * KiB))
    assert r.bytes_read == 48 * KiB


class Named(Recording):
    """Notes each read's thread too."""

    def pread_into(self, offset, buf):
        self.names = getattr(self, "names", [])
        self.names.append(threading.current_thread().name)
        return super().pread_into(offset, buf)


def test_read_ahead_kicked_after_a_seek_goes_on_from_the_carried_bytes(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.read(0, 100)  # (no read-ahead yet: a seek)
    r.read_ahead(forward=True)
    try:
        assert bytes(r.read(8 * KiB - 100, 300)) == _at(dev, ring, 8 * KiB - 100, 300)
    finally:
        r.close()
    assert [o - HEADERS_SIZE for o, _ in dev.reads] == [0, 8 * KiB, 16 * KiB, 24 * KiB]
    assert dev.names == ["MainThread"] + ["walctl-scan-read"] * 3 and r.bytes_read == 32 * KiB


def test_a_read_behind_read_ahead_is_read_here(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = ring.size
    r.read_ahead(forward=True)
    try:
        _forward(r, dev, ring, 8 * KiB, 100, 40 * KiB)
        assert bytes(r.read(0, 100)) == _at(dev, ring, 0, 100)
    finally:
        r.close()
    assert [o - HEADERS_SIZE for o, _ in dev.reads] == list(range(0, 56 * KiB, 8 * KiB)) + [0]
    assert dev.names[-1] == "MainThread" and r.bytes_read == 64 * KiB


def test_read_ahead_reads_up_to_the_bound_s_block(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = 20 * KiB
    r.read_ahead(forward=True)
    try:
        _forward(r, dev, ring, 4 * KiB, 100, 24 * KiB)
    finally:
        r.close()
    assert [(o - HEADERS_SIZE, n) for o, n in dev.reads] == [(0, 8 * KiB), (8 * KiB, 8 * KiB), (16 * KiB, 4 * KiB),
                                                           (20 * KiB, 8 * KiB)]
    assert dev.names[-1] == "MainThread" and r.bytes_read == 28 * KiB


def test_a_long_record_past_what_is_read_ahead_is_read_here(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = 16 * KiB
    r.read_ahead(forward=True)
    try:
        r.read(0, 100)
        assert bytes(r.read(100, 30000)) == _at(dev, ring, 100, 30000)
        assert bytes(r.read(30100, 100)) == _at(dev, ring, 30100, 100)
    finally:
        r.close()
    assert [(o - HEADERS_SIZE, n) for o, n in dev.reads] == [(0, 8 * KiB), (8 * KiB, 8 * KiB), (16 * KiB, 16 * KiB)]
    assert r.bytes_read == 32 * KiB


def test_a_forward_scan_s_reads_are_made_on_the_read_ahead_thread(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = ring.size
    r.read_ahead(forward=True)
    try:
        _forward(r, dev, ring, 8 * KiB, 100, ring.size)
    finally:
        r.close()
    assert dev.names == ["walctl-scan-read"] * (ring.size // (8 * KiB))


def test_a_failed_read_while_assembling_a_long_record_is_read_here(small):
    class Flaky(Named):
        def pread_into(self, offset, buf):
            if threading.current_thread().name == "walctl-scan-read" and offset == HEADERS_SIZE + 16 * KiB:
                raise IOFailure("flaky", where="x")
            return super().pread_into(offset, buf)

    dev = Flaky(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    r.bound = ring.size
    r.read_ahead(forward=True)
    try:
        r.read(0, 100)
        assert bytes(r.read(100, 30000)) == _at(dev, ring, 100, 30000)
        _forward(r, dev, ring, 8 * KiB, 100, ring.size, 32 * KiB)
    finally:
        r.close()
    assert sorted(o - HEADERS_SIZE for o, _ in dev.reads)[:4] == [0, 8 * KiB, 16 * KiB, 24 * KiB]


@pytest.mark.parametrize("b", [StreamRecordBatch(0, 0, 0, 1, b""), StreamRecordBatch(0, -1, 0, 1, b"x"),
                               StreamRecordBatch(3, 0, 0, 1, b"xy"), StreamRecordBatch(0, 0, 9, 1, b"")])
def test_batch_of_takes_the_fast_path_for_every_intact_batch(b, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(StreamRecordBatch, "decode", refuse)
    assert rr.batch_of(b.encode()) == (b, None)


def test_probe_passes_over_a_stale_record_of_an_earlier_lap():
    img = Image(64 * KiB)
    size = img.ring.size
    img.put(3 * ALIGN, body(1, 0))
    r = LogReader(img.dev, img.ring)
    assert rr.probe(r, size, 2 * size) is None  # (physically there, but it names lap 0's offset)


def test_probe_of_small_automq_blocks_starts_at_the_next_block():
    cap = 64 * KiB + 1024
    ring = Ring(cap, 512)
    dev = MemoryDevice(cap)
    from walctl.format.crc import automq_crc
    b = body(1, 0)
    raw = rec.STRUCT.pack(rec.DATA_MAGIC, len(b), 1536 + 24, automq_crc(b), 0)[:20]
    raw += automq_crc(raw).to_bytes(4, "big") + b
    p = ring.physical(1536)
    dev.data[p:p + len(raw)] = raw
    r = LogReader(dev, ring)
    assert rr.probe(r, 1, 8192, automq=True) == 1536 and rr.probe(r, 1025, 8192, automq=True) == 1536
    assert rr.probe(r, 1537, 8192, automq=True) is None


def test_reads_in_a_row_at_any_offset_in_their_block_start_read_ahead(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring, readahead=True)
    r.bound = ring.size
    try:
        for o in (100, 8 * KiB + 200, 16 * KiB + 300):
            assert bytes(r.read(o, 50)) == _at(dev, ring, o, 50)
        assert r._following == 2 and r._ahead.reading()
    finally:
        r.close()


def test_reads_carrying_the_chunk_s_tail_are_reads_in_a_row(small):
    dev = Recording(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring, readahead=True)
    r.bound = ring.size
    try:
        r.read(0, 100)
        assert bytes(r.read(8 * KiB - 100, 300)) == _at(dev, ring, 8 * KiB - 100, 300)
        assert r._following == 1 and not r._ahead.reading()
        assert bytes(r.read(12 * KiB - 100, 300)) == _at(dev, ring, 12 * KiB - 100, 300)
        assert r._following == 2 and r._ahead.reading()
    finally:
        r.close()


def test_a_device_shorter_than_its_ring_is_read_to_its_end():
    dev = Recording(64 * KiB + 512)
    ring = Ring(128 * KiB, 512)  # (a truncated image)
    r = LogReader(dev, ring)
    got = r.read(64 * KiB - 1024 - 300, 200)
    assert bytes(got) == bytes(dev.data[64 * KiB - 300:64 * KiB - 100])
    assert dev.reads == [(60 * KiB, 2 * ALIGN)]  # up to the device end, aligned: no more


def test_without_read_ahead_every_read_is_made_here(small):
    dev = Named(128 * KiB)
    ring = Ring(128 * KiB)
    r = LogReader(dev, ring)
    _forward(r, dev, ring, 8 * KiB, 100, 64 * KiB)
    r.close()
    assert r._ahead is None and dev.names == ["MainThread"] * 8 and r.bytes_read == 64 * KiB
