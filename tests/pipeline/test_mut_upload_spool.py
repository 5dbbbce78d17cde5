"""Upload's spool writer and spools (walctl/pipeline/upload/spool.py) without an upload: when the
writer thread gets a batch of blocks (SPOOL_WRITE_BYTES or SPOOL_WRITE_BLOCKS, whichever first),
what one write call holds, a dropped spool's blocks skipped, and the spools' finish and close
(issue 32: the survivors of tests/store/test_upload_spool.py's whole uploads, killed quickly)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from walctl.format.batch import StreamRecordBatch
from walctl.pipeline.upload import blocks, spool
from walctl.pipeline.upload.plan import PlannedObject, Segment
from walctl.store.base import TEMP_PREFIX
from walctl.store.local import LocalStore


class _Target:
    """A store spool's ``write``: records each call's views (as bytes) and the thread that made it."""

    def __init__(self):
        self.writes: list[list[bytes]] = []
        self.threads: list[str] = []

    def write(self, views):
        self.writes.append([bytes(v) for v in views])
        self.threads.append(threading.current_thread().name)


class _Seg:
    """A _SegmentSpool as the writer sees it: its store spool, dropped or not, buffered."""

    def __init__(self, dropped=False, aligned=False):
        self.spool, self.dropped, self.aligned, self.carry = _Target(), dropped, aligned, b""


@pytest.fixture
def writer():
    w = spool._SpoolWriter(blocks.block_buffers(4096))
    yield w
    w.close()


def _put(w, seg, n: int, lead: int = 0, fill: int = 0x41):
    buf = w._buffers.take()
    buf[lead:lead + n] = bytes([fill]) * n
    w.put(seg, buf, lead, lead + n)


def test_blocks_go_to_the_thread_once_they_reach_the_batch_bytes(writer, monkeypatch):
    monkeypatch.setattr(spool, "SPOOL_WRITE_BYTES", 100)
    monkeypatch.setattr(spool, "SPOOL_WRITE_BLOCKS", 99)
    seg = _Seg()
    _put(writer, seg, 99, fill=1)
    assert len(writer._batch) == 1  # 99 bytes: below the batch
    _put(writer, seg, 1, fill=2)
    assert writer._batch == []  # 100: handed over
    _put(writer, seg, 99, fill=3)
    _put(writer, seg, 1, fill=4)  # counted afresh after a hand-over: 100 again
    assert writer._batch == []
    _put(writer, seg, 98, fill=5)
    writer.flush()
    # one write call per batch (the spool's consecutive blocks together), from the writer thread
    assert seg.spool.writes == [[b"\x01" * 99, b"\x02"], [b"\x03" * 99, b"\x04"], [b"\x05" * 98]]
    assert set(seg.spool.threads) == {"walctl-upload-write"}
    assert writer._buffers.out == 0  # every block buffer given back once written
    assert writer._thread.daemon  # (an upload that dies without close never waits for it at exit)


def test_blocks_go_to_the_thread_once_they_reach_the_batch_blocks(writer, monkeypatch):
    monkeypatch.setattr(spool, "SPOOL_WRITE_BLOCKS", 3)
    seg = _Seg()
    for i in range(4):
        _put(writer, seg, 1, fill=i)
    writer.flush()
    assert seg.spool.writes == [[b"\x00", b"\x01", b"\x02"], [b"\x03"]]


def test_a_batch_writes_each_spool_s_run_of_blocks_and_skips_dropped_ones():
    a, gone, b = _Seg(), _Seg(dropped=True), _Seg()
    items = [(a, bytearray(b"A1"), 0, 2), (a, bytearray(b"A2"), 0, 2), (gone, bytearray(b"G"), 0, 1),
             (b, bytearray(b"B1"), 0, 2), (gone, bytearray(b"G"), 0, 1), (a, bytearray(b"A3"), 0, 2)]
    spool._SpoolWriter._write(items)
    assert a.spool.writes == [[b"A1", b"A2"], [b"A3"]]
    assert b.spool.writes == [[b"B1"]] and gone.spool.writes == []


def test_an_aligned_spool_s_blocks_count_without_their_lead_and_go_in_whole_pages(writer, monkeypatch):
    monkeypatch.setattr(spool, "SPOOL_WRITE_BYTES", 8192)
    seg = _Seg(aligned=True)
    data = bytes(range(256)) * 36  # 9216 bytes: three blocks of 3000, then the last 216 in a fourth
    position = 0
    for size in (3000, 3000, 3000, 216):
        lead = position % 4096  # where the block starts in its page (blocks._SegmentSpool's rule)
        buf = writer._buffers.take()
        buf[lead:lead + size] = data[position:position + size]
        writer.put(seg, buf, lead, lead + size)
        position += size
        if size == 3000 and position < 9000:
            assert writer._batch != []  # 3000, 6000 block bytes: below the batch
    writer.flush()
    # the first three blocks (9000 bytes) in one call: the whole pages they fill
    assert seg.spool.writes == [[data[:4096], data[4096:8192]]]
    assert seg.carry == data[8192:9216]  # the last block's bytes past the last whole page: the publish's


def test_an_error_of_the_thread_is_raised_by_the_next_call(writer):
    seg = _Seg()

    def fail(views):
        raise OSError("no space")

    seg.spool.write = fail
    _put(writer, seg, 5)
    with pytest.raises(OSError, match="no space"):
        writer.flush()
    with pytest.raises(OSError, match="no space"):
        writer.kick()
    assert writer._buffers.out == 0  # the thread gave every buffer back


def test_the_blocks_queued_after_a_failed_write_are_dropped(writer, monkeypatch):
    monkeypatch.setattr(spool, "SPOOL_WRITE_BLOCKS", 1)  # each block its own batch
    bad, good = _Seg(), _Seg()
    release = threading.Event()

    def fail(views):
        assert release.wait(10)
        raise OSError("no space")

    bad.spool.write = fail
    _put(writer, bad, 5)  # the thread takes it and waits in the write
    _put(writer, good, 5)  # queued behind it
    release.set()
    with pytest.raises(OSError, match="no space"):
        writer.flush()
    assert good.spool.writes == [] and writer._buffers.out == 0


def test_close_drops_what_is_still_queued_and_refuses_more(monkeypatch):
    monkeypatch.setattr(spool, "SPOOL_WRITE_BLOCKS", 1)
    w = spool._SpoolWriter(blocks.block_buffers(4096))
    first, queued = _Seg(), _Seg()
    release, writing = threading.Event(), threading.Event()

    def slow(views):
        writing.set()
        assert release.wait(10)
        first.spool.writes.append([bytes(v) for v in views])

    first.spool.write = slow
    _put(w, first, 5)  # being written
    assert writing.wait(10)  # (the writer thread has taken it: close must not find it queued)
    _put(w, queued, 5)  # still queued when close starts
    closer = threading.Thread(target=w.close)
    closer.start()
    deadline = time.monotonic() + 10
    while w._error is None and time.monotonic() < deadline:  # close has begun: it set its error first
        time.sleep(0.001)
    release.set()
    closer.join(10)
    assert not closer.is_alive() and not w._thread.is_alive()
    assert first.spool.writes == [[b"A" * 5]] and queued.spool.writes == []
    assert w._buffers.out == 0
    with pytest.raises(blocks._NoSpool, match="^closed$"):
        w.flush()


def _spools(tmp_path, limit=4):
    return spool._Spools(LocalStore(str(tmp_path / "store")), 1 << 20, limit)


def _temp_files(tmp_path):
    return [n for _, _, names in os.walk(tmp_path / "store") for n in names if n.startswith(TEMP_PREFIX)]


def test_spools_up_to_the_limit_and_a_dropped_one_is_written_no_more(tmp_path):
    spools = _spools(tmp_path, limit=2)
    assert spools.open and spools.writer is None
    first = spools.new(1, 0)
    assert spools.writer is not None and first.writer is spools.writer and (first.sid, first.first) == (1, 0)
    second = spools.new(2, 5)
    assert spools.new(3, 0) is None and spools.made == 2
    spools.drop(first)
    assert first.dropped is True and spools.live == [second] and spools.open
    spools.drop(second)
    assert not spools.open  # none live, the limit reached: the scan keeps no bodies for spools
    assert len(_temp_files(tmp_path)) == 2  # a dropped spool's temp object stays until close
    spools.close()
    assert _temp_files(tmp_path) == []


def test_finish_keeps_the_plan_s_spooled_objects_and_drops_the_rest(tmp_path):
    spools = _spools(tmp_path)
    batch = StreamRecordBatch(1, 0, 0, 1, b"payload").encode()
    segs = []
    for sid in (1, 2, 3):
        seg = Segment(sid, 0)
        seg.spool = spools.new(sid, 0)
        seg.spool.add(blocks._Bodies([batch]), 0, [len(batch)], [1])
        segs.append(seg)
    bad = Segment(1 << 63, 0)  # no index entry holds its stream id: its last block cannot close
    bad.spool = spools.new(1 << 63, 0)
    bad.spool.add(blocks._Bodies([batch]), 0, [len(batch)], [1])
    plan = [PlannedObject("SO", [(1, segs[0])]), PlannedObject("SSO", [(2, segs[1]), (3, segs[2])]),
            PlannedObject("SO", [(1 << 63, bad)])]
    spools.finish(plan)
    assert bad.spool is None and plan[2].spooled is False  # built the usual way (which refuses it)
    assert spools.live == [segs[0].spool] and plan[0].spooled
    assert segs[1].spool.dropped and segs[2].spool.dropped
    spools.publish(segs[0].spool, "obj/1")
    assert spools.live == []
    spools.close()
    assert _temp_files(tmp_path) == [] and os.path.exists(tmp_path / "store" / "obj" / "1")


def test_finish_and_close_without_any_spool(tmp_path):
    spools = _spools(tmp_path)
    spools.finish([])
    spools.close()
    assert spools.writer is None
