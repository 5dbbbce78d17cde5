"""Upload's second read (walctl/pipeline/upload/walread.py) on its own, on small WAL files: a
segment's DataBlocks from the kept bodies and from the log read again (chunks of a few KiB, records
across chunks, across a lap's end, streams interleaved), each cut where iter_block_groups cuts,
the chunk reader's reads, and each way the log can have changed since the scan, word for word
(issue 32: the module's mutants killed here, in milliseconds)."""

from __future__ import annotations

import os

import pytest

from walctl.device import open_device
from walctl.errors import RefusedError
from walctl.format import object as obj
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE, StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.pipeline.upload import walread
from walctl.pipeline.upload.plan import Segment
from walctl.wal import reader
from walctl.wal.layout import Ring
from walctl.wal.lifecycle import init_wal, open_writer, read_wal_state

KiB = 1 << 10


class _Wal:
    """A WAL file written with ``items`` ((stream, base, count, payload size)), then scanned."""

    def __init__(self, tmp_path, items, capacity=256 * KiB, name="wal", trim_to=None, more=()):
        self.path = str(tmp_path / name)
        init_wal(self.path, capacity)
        self._append(items)
        if trim_to is not None:
            from walctl.wal.lifecycle import trim_scanned

            trim_scanned(self.path, self.entries[trim_to].offset)
            self._append(more)
        self.dev = open_device(self.path, writable=False)
        self.header = read_wal_state(self.dev, self.path).header

    def _append(self, items):
        w = open_writer(self.path, scan=True).writer
        for sid, base, count, size in items:
            w.append(StreamRecordBatch(sid, 0, base, count, (bytes([sid, base % 256]) * size)[:size]).encode())
        w.close()
        dev = open_device(self.path, writable=False)
        try:
            header = read_wal_state(dev, self.path).header
            self.entries = [e for e in reader.Scan(dev, header) if isinstance(e, reader.Entry)]
            self.end = max(e.end for e in self.entries) if self.entries else 0
        finally:
            dev.close()

    def segment(self, sid, which=None):
        es = [e for e in self.entries if e.batch.stream_id == sid]
        if which is not None:
            es = es[which]
        seg = Segment(sid, es[0].batch.base_offset)
        for e in es:
            seg.add(e.offset, e.batch.end_offset, len(e.body), crc32c(e.body))
        return seg, es

    def fetch(self, kept=None, end=None):
        return walread._WalBatches(self.dev, self.path, self.header, self.end if end is None else end, kept)

    def close(self):
        self.dev.close()


@pytest.fixture
def wals():
    made = []
    yield made
    for w in made:
        w.close()


def _mk(wals, tmp_path, items, **kw):
    w = _Wal(tmp_path, items, **kw)
    wals.append(w)
    return w


def _expected(entries, block_size):
    batches = [walread._Batch(e.batch.base_offset, e.batch.count, e.batch.end_offset, len(e.body), e.body)
               for e in entries]
    return [(g[0].base_offset, g[-1].end_offset, [b.data for b in g]) for g in obj.iter_block_groups(batches, block_size)]


def _got(blocks):
    return [(first, end, [bytes(p) for p in parts]) for first, end, parts in blocks]


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", 4 * KiB)


# -- kept bodies and the second read give the same blocks -----------------------------------------

@pytest.mark.parametrize("block_size", [1, 300, 1000, 1 << 20])
def test_a_segment_s_blocks_kept_or_read_again_are_iter_block_groups_cuts(tmp_path, wals, block_size):
    w = _mk(wals, tmp_path, [(1, 5 + 3 * i, 3, 100 + 37 * i) for i in range(12)])
    seg, es = w.segment(1)
    want = _expected(es, block_size)
    assert _got(w.fetch().blocks(seg, block_size)) == want
    kept = {e.offset: e.body for e in es}
    assert _got(w.fetch(kept).blocks(seg, block_size)) == want
    assert sum(len(b[2]) for b in want) == 12


def test_kept_bodies_are_not_read_again_and_one_missing_reads_the_log(tmp_path, wals, monkeypatch):
    w = _mk(wals, tmp_path, [(1, i, 1, 200) for i in range(5)])
    seg, es = w.segment(1)
    reads = []
    real = walread._ChunkReader
    monkeypatch.setattr(walread, "_ChunkReader", lambda *a: reads.append(a[2:]) or real(*a))
    kept = {e.offset: e.body for e in es}
    assert _got(w.fetch(kept).blocks(seg, 500)) == _expected(es, 500) and reads == []
    del kept[es[2].offset]
    assert _got(w.fetch(kept).blocks(seg, 500)) == _expected(es, 500)
    # the 4 KiB blocks holding the segment (where the writer put the records depends on its timing)
    assert reads == [(es[0].offset // 4096 * 4096, -(-seg.wal_end // 4096) * 4096)]


def test_the_second_read_stops_at_the_block_holding_the_scanned_end(tmp_path, wals, monkeypatch):
    w = _mk(wals, tmp_path, [(1, i, 1, 3000) for i in range(6)])
    seg, es = w.segment(1, slice(1, 3))
    reads = []
    real = walread._ChunkReader
    monkeypatch.setattr(walread, "_ChunkReader", lambda *a: reads.append(a[2:]) or real(*a))
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20)
    lo = es[0].offset // 4096 * 4096
    assert reads == [(lo, -(-seg.wal_end // 4096) * 4096)]
    reads.clear()
    with pytest.raises(RefusedError):  # the scan ended inside the segment: the rest is not read
        list(w.fetch(end=es[0].end).blocks(seg, 1 << 20))
    assert reads == [(lo, -(-es[0].end // 4096) * 4096)]


def test_the_kept_path_refuses_a_body_of_another_batch(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, 0, 1, 100), (1, 1, 1, 100), (2, 0, 1, 100)])
    seg, es = w.segment(1)
    kept = {es[0].offset: es[0].body, es[1].offset: w.entries[2].body}  # stream 2's body at stream 1's place
    with pytest.raises(RefusedError) as err:
        list(w.fetch(kept).blocks(seg, 1 << 20))
    assert err.value.what == (f"the WAL changed during the upload: the record of stream 1 at WAL offset "
                              f"{es[1].offset} holds another batch now; nothing was committed")
    assert (err.value.where, err.value.offset) == (w.path, es[1].offset)
    assert err.value.hint == "another upload or trim ran meanwhile? rerun upload: it skips what is already uploaded"
    kept = {es[0].offset: es[1].body, es[1].offset: es[1].body}  # the right stream, not the expected base
    with pytest.raises(RefusedError, match=f"WAL offset {es[0].offset} holds another batch now"):
        list(w.fetch(kept).blocks(seg, 1 << 20))


# -- the second read: chunks ----------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [1, 2000, 1 << 20])
def test_records_across_small_chunks_are_gathered_whole(tmp_path, wals, small_chunks, block_size):
    sizes = [100, 5000, 60, 9000, 3000, 4070, 200]  # records cut by 4 KiB chunks, some longer than two
    w = _mk(wals, tmp_path, [(1, i, 1, s) for i, s in enumerate(sizes)])
    seg, es = w.segment(1)
    assert _got(w.fetch().blocks(seg, block_size)) == _expected(es, block_size)


@pytest.mark.parametrize("into", [1, 10, 23])
def test_a_record_header_cut_by_a_chunk_is_gathered(tmp_path, wals, small_chunks, into):
    """Records laid back to back by hand (the writer never starts a header in a block's last bytes,
    another writer might): one header starts ``into`` bytes before a 4 KiB chunk's end and is
    gathered from the next chunk before its body."""
    w = _mk(wals, tmp_path, [])
    first = 4096 - into - rec.SIZE - BATCH_HEADER_SIZE
    batches = [StreamRecordBatch(1, 0, 0, 1, b"a" * first), StreamRecordBatch(1, 1, 1, 1, b"b" * 5000),
               StreamRecordBatch(1, 2, 2, 1, b"c" * 10)]
    log, o, seg = bytearray(), 0, Segment(1, 0)
    for b in batches:
        body = b.encode()
        log += rec.encode_record(o, body)
        seg.add(o, b.end_offset, len(body), crc32c(body))
        o += rec.SIZE + len(body)
    assert seg.wal[1] == 4096 - into
    fd = os.open(w.path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(log), Ring(w.header.capacity).physical(0))
    finally:
        os.close(fd)
    fetch = w.fetch(end=o)
    want = [(0, 3, [b.encode() for b in batches])]
    assert _got(fetch.blocks(seg, 1 << 20)) == want
    assert _got(fetch.blocks(seg, 1)) == [(i, i + 1, [b.encode()]) for i, b in enumerate(batches)]


@pytest.mark.parametrize("chunk", [4 * KiB, 64 * KiB])
def test_interleaved_streams_each_read_their_own_records(tmp_path, wals, monkeypatch, chunk):
    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", chunk)
    items = []
    for i in range(40):
        items.append((1 + i % 3 if i % 5 else 1, 0, 1, 50 + 30 * (i % 7)))
    bases: dict[int, int] = {}
    fixed = []
    for sid, _, count, size in items:
        fixed.append((sid, bases.get(sid, 0), count, size))
        bases[sid] = bases.get(sid, 0) + count
    w = _mk(wals, tmp_path, fixed)
    for sid in (1, 2, 3):
        seg, es = w.segment(sid)
        assert _got(w.fetch().blocks(seg, 700)) == _expected(es, 700)


def test_long_runs_of_one_stream_grow_the_decoder_s_guess(tmp_path, wals, monkeypatch):
    from walctl.format import bulk

    w = _mk(wals, tmp_path, [(1, i, 1, 10) for i in range(1000)], capacity=1 << 20)
    seg, es = w.segment(1)
    asked = []
    real = bulk.decode_records
    monkeypatch.setattr(bulk, "decode_records", lambda *a, **k: (asked.append(k.get("max_records")), real(*a, **k))[1])
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20)
    assert asked[:3] == [256, 512, 1024]


def test_a_segment_across_the_lap_end_is_read_in_two_parts(tmp_path, wals, small_chunks):
    cap = 8192 + 32 * KiB  # headers + a 32 KiB ring
    w = _mk(wals, tmp_path, [(1, i, 1, 3000) for i in range(8)], capacity=cap, trim_to=6,
            more=[(1, 8 + i, 1, 3000) for i in range(6)])
    seg, es = w.segment(1)
    assert es[0].batch.base_offset == 7 and len(es) == 7
    ring = Ring(cap)
    assert es[0].offset < ring.lap_end(es[0].offset) < es[-1].offset  # it wraps
    assert _got(w.fetch().blocks(seg, 5000)) == _expected(es, 5000)


def test_the_chunk_reader_reads_whole_chunks_never_across_a_lap_end(monkeypatch):
    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", 8192)
    monkeypatch.setattr(walread, "READ_AHEAD_CHUNKS", 1)

    class Dev:
        def __init__(self):
            self.reads = []

        def pread_into(self, offset, buf):
            self.reads.append((offset, len(buf)))
            buf[:] = bytes([offset % 251]) * len(buf)
            return len(buf)

    ring = Ring(8192 + 20480)  # a 20 KiB ring: laps end at 20480, 40960, ...
    dev = Dev()
    r = walread._ChunkReader(dev, ring, 16384, 45056)
    assert len(r._queued) == 2  # READ_AHEAD_CHUNKS + 1 submitted at once
    got = [(o, len(v), bytes(v[:1])) for o, v in r]
    assert [(o, n) for o, n, _ in got] == [(16384, 4096), (20480, 8192), (28672, 8192), (36864, 4096),
                                           (40960, 4096)]
    assert sorted(dev.reads) == sorted([(8192 + 16384, 4096), (8192, 8192), (8192 + 8192, 8192),
                                        (8192 + 16384, 4096), (8192, 4096)])
    assert [b for _, _, b in got] == [bytes([(8192 + 16384) % 251]), bytes([8192 % 251]), bytes([16384 % 251]),
                                      bytes([24576 % 251]), bytes([8192 % 251])]
    r.close()


def test_the_chunk_reader_s_views_are_read_only_and_close_ends_it(monkeypatch):
    from walctl.device.blockio import bytes_read_total

    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", 4096)

    class Dev:
        def pread_into(self, offset, buf):
            buf[:] = b"x" * len(buf)
            return len(buf)

    r = walread._ChunkReader(Dev(), Ring(8192 + 65536), 0, 65536)
    it = iter(r)
    o, view = next(it)
    assert o == 0 and view.readonly and bytes(view) == b"x" * 4096
    del view
    r.close()
    assert r._next == 65536 and not r._queued
    assert list(it) == [] and bytes_read_total() >= 0


def test_close_ends_the_second_reads_still_open(tmp_path, wals, small_chunks):
    w = _mk(wals, tmp_path, [(1, i, 1, 3000) for i in range(8)])
    seg, es = w.segment(1)
    fetch = w.fetch()
    gen = fetch.blocks(seg, 1)
    next(gen)
    assert len(fetch._open) == 1
    reader_ = fetch._open[0]
    fetch.close()
    assert fetch._open == [] and reader_._next == reader_._hi
    gen.close()
    fetch.close()
    gen = fetch.blocks(seg, 1 << 20)  # read to its end: nothing left open
    list(gen)
    assert fetch._open == []


# -- the log changed since the scan ---------------------------------------------------------------

def _overwrite(w, entry, body):
    """Rewrite the record at ``entry`` with ``body`` (an intact record, same place)."""
    data = rec.encode_record(entry.offset, body)
    phys = Ring(w.header.capacity).physical(entry.offset)
    fd = os.open(w.path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, phys)
    finally:
        os.close(fd)


def _refused(w, seg, block_size=1 << 20):
    with pytest.raises(RefusedError) as err:
        list(w.fetch().blocks(seg, block_size))
    return err.value


@pytest.mark.parametrize("chunk", [4 * KiB, 1 << 20])
def test_a_record_rewritten_with_other_bytes_is_another_record(tmp_path, wals, monkeypatch, chunk):
    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", chunk)
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(6)])
    seg, es = w.segment(1)
    _overwrite(w, es[3], StreamRecordBatch(1, 0, 3, 1, b"\x09" * 100).encode())
    err = _refused(w, seg)
    assert err.what == (f"the WAL changed during the upload: the record of stream 1 at WAL offset {es[3].offset} "
                        f"is another record now; nothing was committed")
    assert err.offset == es[3].offset and err.where == w.path


def test_a_record_of_another_stream_or_offset_holds_another_batch(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(6)])
    seg, es = w.segment(1)
    _overwrite(w, es[2], StreamRecordBatch(2, 0, 2, 1, es[2].batch.payload).encode())
    seg.crcs[2] = crc32c(StreamRecordBatch(2, 0, 2, 1, es[2].batch.payload).encode())  # the crc matches now
    err = _refused(w, seg)
    assert err.what.endswith(f"at WAL offset {es[2].offset} holds another batch now; nothing was committed")
    w2 = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(4)], name="w2")
    seg, es = w2.segment(1)
    seg.start = 1  # the scan saw the segment start one offset later: the first record is not the one expected
    err = _refused(w2, seg)
    assert err.what.endswith(f"at WAL offset {es[0].offset} holds another batch now; nothing was committed")


def test_a_segment_that_ends_elsewhere_than_the_scan_saw_is_refused(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(4)])
    seg, es = w.segment(1)
    seg.end += 1
    err = _refused(w, seg)
    assert err.what.endswith(f"at WAL offset {es[-1].offset} holds another batch now; nothing was committed")


def test_a_zeroed_record_is_no_intact_record(tmp_path, wals, small_chunks):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(6)])
    seg, es = w.segment(1)
    fd = os.open(w.path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\0" * 40, Ring(w.header.capacity).physical(es[4].offset))
    finally:
        os.close(fd)
    err = _refused(w, seg)
    assert err.what == (f"the WAL changed during the upload: the record of stream 1 at WAL offset {es[4].offset} "
                        f"is no intact record now; nothing was committed")


def test_a_damaged_record_across_chunks_is_no_intact_record(tmp_path, wals, small_chunks):
    w = _mk(wals, tmp_path, [(1, 0, 1, 3000), (1, 1, 1, 6000), (1, 2, 1, 100)])
    seg, es = w.segment(1)
    fd = os.open(w.path, os.O_WRONLY)
    try:  # the second record's body, past the first chunk: its header checks out, its body does not
        os.pwrite(fd, b"\xff" * 8, Ring(w.header.capacity).physical(es[1].offset) + 5000)
    finally:
        os.close(fd)
    err = _refused(w, seg)
    assert err.what.endswith(f"at WAL offset {es[1].offset} is no intact record now; nothing was committed")


def test_a_record_offset_the_log_does_not_hold_is_no_intact_record(tmp_path, wals, small_chunks):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(4)])
    seg, es = w.segment(1)
    seg.wal[2] += 8  # the scan put a record where none starts
    err = _refused(w, seg)
    assert err.what.endswith(f"at WAL offset {es[2].offset + 8} is no intact record now; nothing was committed")


def test_a_segment_past_the_scanned_end_runs_out_of_chunks(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(4)])
    seg, es = w.segment(1)
    seg.add(w.end + 8192, seg.end + 1, 100, 0)  # one more record, far past the log
    err = _refused(w, seg)
    assert err.what.endswith(f"at WAL offset {w.end + 8192} is no intact record now; nothing was committed")
    assert err.offset == w.end + 8192


def test_refuse_names_the_first_record_that_differs(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(6)])
    seg, es = w.segment(1)
    cutter = walread._Cutter(w.fetch(), seg, Ring(w.header.capacity), 1 << 20)
    crcs = list(seg.crcs)
    kinds, sids, bases, ends = [0] * 6, [1] * 6, list(range(6)), list(range(1, 7))
    with pytest.raises(AssertionError, match="none of them fails it"):
        cutter._refuse(kinds, sids, bases, ends, crcs)
    for field, j, want in [("crc", 4, "is another record now"), ("kind", 3, "holds another batch now"),
                           ("sid", 2, "holds another batch now"), ("base", 5, "holds another batch now")]:
        k, s, b, c = list(kinds), list(sids), list(bases), list(crcs)
        {"crc": c, "kind": k, "sid": s, "base": b}[field][j] += 1
        with pytest.raises(RefusedError) as err:
            cutter._refuse(k, s, b, ends, c)
        assert err.value.what.endswith(f"at WAL offset {es[j].offset} {want}; nothing was committed"), field
    cutter.i = 2  # from the third record: the scan's crcs from there, bases from its start
    cutter.expected = 2
    with pytest.raises(RefusedError) as err:
        cutter._refuse([0, 0], [1, 1], [2, 4], [3, 5], crcs[2:4])
    assert err.value.what.endswith(f"at WAL offset {es[3].offset} holds another batch now; nothing was committed")


def test_changed_names_the_last_record_for_an_index_past_the_end(tmp_path, wals):
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(3)])
    seg, es = w.segment(1)
    cutter = walread._Cutter(w.fetch(), seg, Ring(w.header.capacity), 1 << 20)
    assert cutter.changed(1, "x").offset == es[1].offset
    assert cutter.changed(3, "x").offset == es[2].offset and cutter.changed(9, "x").offset == es[2].offset


# -- the Java-int limits of a block, one by one ----------------------------------------------------

def test_near_the_safe_span_records_are_cut_one_by_one_as_iter_block_groups_does(tmp_path, wals, monkeypatch):
    monkeypatch.setattr(walread, "_SAFE_SPAN", 0)
    w = _mk(wals, tmp_path, [(1, 7 * i, 7, 100 + 10 * i) for i in range(10)])
    seg, es = w.segment(1)
    for block_size in (1, 250, 1 << 20):
        assert _got(w.fetch().blocks(seg, block_size)) == _expected(es, block_size)


def test_the_one_by_one_path_closes_blocks_at_the_int32_limits(tmp_path, wals, monkeypatch):
    monkeypatch.setattr(walread, "_SAFE_SPAN", 0)
    monkeypatch.setattr(obj, "INT32_MAX", 400)
    w = _mk(wals, tmp_path, [(1, 7 * i, 7, 100) for i in range(6)] + [(1, 42, 300, 50), (1, 342, 7, 40)])
    seg, es = w.segment(1)
    got = _got(w.fetch().blocks(seg, 1 << 20))
    assert got == _expected(es, 1 << 20)  # iter_block_groups reads the same patched limit
    # 3 records of 133 bytes pass 400 - the block header: 2 a block; then 28..342 (133 + 133 + 83 bytes,
    # an offset span of 314) takes no 73 bytes more
    assert [(a, b) for a, b, _ in got] == [(0, 14), (14, 28), (28, 342), (342, 349)]


def test_a_batch_too_large_for_an_index_entry_is_refused(tmp_path, wals, monkeypatch):
    monkeypatch.setattr(walread, "_SAFE_SPAN", 0)
    w = _mk(wals, tmp_path, [(1, 0, 1, 100), (1, 1, 500, 100)])
    seg, es = w.segment(1)
    monkeypatch.setattr(obj, "INT32_MAX", 499)
    with pytest.raises(ValueError, match="batch at offset 1 too large for one DataBlock index entry"):
        list(w.fetch().blocks(seg, 1 << 20))
    monkeypatch.setattr(obj, "INT32_MAX", 500)  # it fits, in a block of its own: 0..501 spans 501
    assert [(a, b) for a, b, _ in _got(w.fetch().blocks(seg, 1 << 20))] == [(0, 1), (1, 501)]
    monkeypatch.setattr(obj, "INT32_MAX", 501)
    assert [(a, b) for a, b, _ in _got(w.fetch().blocks(seg, 1 << 20))] == [(0, 501)]
    monkeypatch.setattr(obj, "INT32_MAX", len(es[1].body) + obj.DATA_BLOCK_HEADER_SIZE - 1)
    with pytest.raises(ValueError, match="batch at offset 0 too large"):
        list(w.fetch().blocks(seg, 1 << 20))


def test_the_safe_span_chooses_the_one_by_one_path_at_its_boundary(tmp_path, wals, monkeypatch):
    w = _mk(wals, tmp_path, [(1, 10 * i, 10, 100) for i in range(5)])
    seg, es = w.segment(1)
    calls = []
    real = walread._Cutter._take_one_by_one

    def spy(self, *a):
        calls.append(len(a[1]))  # the records taken one by one
        return real(self, *a)

    monkeypatch.setattr(walread._Cutter, "_take_one_by_one", spy)
    total = sum(len(e.body) for e in es)
    monkeypatch.setattr(walread, "_SAFE_SPAN", total + 1)
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20) and calls == []
    monkeypatch.setattr(walread, "_SAFE_SPAN", total)
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20) and calls == [5]
    calls.clear()
    monkeypatch.setattr(walread, "_SAFE_SPAN", 50)  # the offset span (50) reaches it, the bytes too
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20) and calls == [5]


def test_the_offset_span_alone_chooses_the_one_by_one_path_at_its_boundary(tmp_path, wals, monkeypatch):
    w = _mk(wals, tmp_path, [(1, 1000 * i, 1000, 10) for i in range(5)])  # 215 bytes, offsets 0..5000
    seg, es = w.segment(1)
    calls = []
    real = walread._Cutter._take_one_by_one

    def spy(self, *a):
        calls.append(len(a[1]))
        return real(self, *a)

    monkeypatch.setattr(walread._Cutter, "_take_one_by_one", spy)
    monkeypatch.setattr(walread, "_SAFE_SPAN", 5001)
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20) and calls == []
    monkeypatch.setattr(walread, "_SAFE_SPAN", 5000)
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20) and calls == [5]


# -- what the first run's survivors asked for -----------------------------------------------------

@pytest.mark.parametrize("safe_span", [None, 0])  # the batched cuts, and one by one
def test_blocks_close_at_the_block_size_exactly_and_start_again_from_zero(tmp_path, wals, monkeypatch, safe_span):
    if safe_span is not None:
        monkeypatch.setattr(walread, "_SAFE_SPAN", safe_span)
    w = _mk(wals, tmp_path, [(1, i, 1, 100) for i in range(9)])
    seg, es = w.segment(1)
    body = len(es[0].body)
    for block_size in (2 * body, 2 * body + 1, 3 * body):
        got = _got(w.fetch().blocks(seg, block_size))
        assert got == _expected(es, block_size)
        per = 2 if block_size == 2 * body else 3
        assert [len(parts) for _, _, parts in got] == [per] * (9 // per) + ([9 % per] if 9 % per else [])


def test_the_one_by_one_path_fills_a_block_to_the_int32_limit_exactly(tmp_path, wals, monkeypatch):
    monkeypatch.setattr(walread, "_SAFE_SPAN", 0)
    w = _mk(wals, tmp_path, [(1, 1000 + i, 1, 100) for i in range(6)])  # blocks start at offset 1000 and up
    seg, es = w.segment(1)
    body = len(es[0].body)
    monkeypatch.setattr(obj, "INT32_MAX", 2 * body + obj.DATA_BLOCK_HEADER_SIZE)  # two bodies fit exactly
    got = _got(w.fetch().blocks(seg, 1 << 20))
    assert got == _expected(es, 1 << 20) and [len(p) for _, _, p in got] == [2, 2, 2]
    monkeypatch.setattr(obj, "INT32_MAX", body + obj.DATA_BLOCK_HEADER_SIZE)  # one body fits exactly
    got = _got(w.fetch().blocks(seg, 1 << 20))
    assert got == _expected(es, 1 << 20) and [len(p) for _, _, p in got] == [1] * 6


def test_the_one_by_one_offset_span_counts_from_the_block_s_first_offset(tmp_path, wals, monkeypatch):
    monkeypatch.setattr(walread, "_SAFE_SPAN", 0)
    monkeypatch.setattr(obj, "INT32_MAX", 1000)  # far above 6 bodies' bytes and their offset span
    w = _mk(wals, tmp_path, [(1, 5000 + i, 1, 10) for i in range(6)])
    seg, es = w.segment(1)
    got = _got(w.fetch().blocks(seg, 1 << 20))
    assert got == _expected(es, 1 << 20) and [(a, b) for a, b, _ in got] == [(5000, 5006)]


def test_refuse_s_last_resort_words():
    cutter = walread._Cutter(None, Segment(1, 0), None, 1)
    cutter.seg.add(0, 1, 40, 7)
    with pytest.raises(AssertionError) as err:
        cutter._refuse([0], [1], [0], [1], [7])
    assert str(err.value) == "a run of records failed a check and none of them fails it"


def test_the_decoder_s_guess_follows_a_stream_s_share_of_an_interleaved_log(tmp_path, wals, monkeypatch):
    from walctl.format import bulk

    items, bases = [], {1: 0, 2: 0}
    for _ in range(30):
        for sid in (1, 1, 1, 2):
            items.append((sid, bases[sid], 1, 20))
            bases[sid] += 1
    w = _mk(wals, tmp_path, items)
    seg, es = w.segment(1)
    asked = []
    real = bulk.decode_records
    monkeypatch.setattr(bulk, "decode_records", lambda *a, **k: (asked.append(k.get("max_records")), real(*a, **k))[1])
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20)
    assert asked == [256] + [6] * 29  # three of ours, then stream 2's: twice three rows are asked next


def test_the_chunks_are_read_on_the_upload_read_thread(monkeypatch):
    import threading

    monkeypatch.setattr(walread, "CHUNK_READ_BYTES", 4096)

    class Dev:
        def __init__(self):
            self.threads = set()

        def pread_into(self, offset, buf):
            self.threads.add(threading.current_thread().name)
            return len(buf)

    dev = Dev()
    r = walread._ChunkReader(dev, Ring(8192 + 65536), 0, 5 * 4096)
    assert [o for o, _ in r] == [0, 4096, 8192, 12288, 16384]
    r.close()
    assert dev.threads == {"walctl-upload-read"}


def test_the_decoder_s_guess_is_at_least_two_rows(tmp_path, wals, monkeypatch):
    from walctl.format import bulk

    w = _mk(wals, tmp_path, [(1 + i % 2, i // 2, 1, 20) for i in range(40)])  # streams 1 and 2 alternate
    seg, es = w.segment(1)
    asked = []
    real = bulk.decode_records
    monkeypatch.setattr(bulk, "decode_records", lambda *a, **k: (asked.append(k.get("max_records")), real(*a, **k))[1])
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20)
    assert asked == [256] + [2] * 19  # one of ours at a time: two rows asked (ours and the next)


def test_a_decode_cut_by_the_chunk_s_end_asks_twice_what_it_found_next(tmp_path, wals, small_chunks, monkeypatch):
    from walctl.format import bulk

    w = _mk(wals, tmp_path, [(1, i, 1, 20) for i in range(200)])  # ~53 records a 4 KiB chunk
    seg, es = w.segment(1)
    asked, found = [], []
    real = bulk.decode_records

    def spy(*a, **k):
        got = real(*a, **k)
        asked.append(k.get("max_records"))
        found.append(got.count)
        return got

    monkeypatch.setattr(bulk, "decode_records", spy)
    assert _got(w.fetch().blocks(seg, 1 << 20)) == _expected(es, 1 << 20)
    assert asked[0] == 256 and 0 < found[0] < 256
    later = [a for a in asked[1:] if a != 1]  # (1: a record gathered across chunks)
    assert later[0] == 2 * found[0]
