"""Upload's block builder (walctl/pipeline/upload/blocks.py) without an upload: a segment's spool fed
batches as the scan hands them over (in stretches, as bodies or as a run of the scan's chunk) must
lay out exactly build_object's DataBlocks, index and all, at every block size, batch count and
size; its refusals are _NoSpool (issue 32: each of the module's mutants killed here, quickly)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.device.buffers import ALIGN
from walctl.format import bulk
from walctl.format import object as obj
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.format.index_entry import INT32_MAX
from walctl.pipeline.upload import blocks

_SLACK = 64 << 10


class _Writer:
    """spool._SpoolWriter's ``put``: keeps each closed block's bytes and where it started in its buffer."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.blocks: list[bytes] = []
        self.leads: list[int] = []
        self.sizes: list[int] = []

    def put(self, seg_spool, buf, lead, end):
        self.blocks.append(bytes(buf[lead:end]))
        self.leads.append(lead)
        self.sizes.append(len(buf))
        self.buffers.give(buf)


def _spool(block_size: int, sid: int = 1, first: int = 0, direct: bool = False):
    buffers = blocks.block_buffers(block_size + blocks._BLOCK_HEAD + _SLACK)
    writer = _Writer(buffers)
    return blocks._SegmentSpool(SimpleNamespace(direct=direct), writer, buffers, sid, first, block_size), writer


def _batches(sid: int, shapes, first: int = 0) -> list[StreamRecordBatch]:
    out, base = [], first
    for count, size in shapes:
        out.append(StreamRecordBatch(sid, 0, base, count, bytes([(base + i) % 251 for i in range(size)])))
        base += count
    return out


def _feed(seg, batches, cuts, kind: str) -> None:
    """Hand ``batches`` to ``seg`` in stretches cut at ``cuts``, as the scan does."""
    encoded = [b.encode() for b in batches]
    ends = [b.end_offset for b in batches]
    lengths = [len(e) for e in encoded]
    if kind == "run":
        chunk, positions, pos = bytearray(), [], 0
        for i, body in enumerate(encoded):
            chunk += rec.encode_record(pos, body)
            positions.append(pos + rec.SIZE)
            pos += rec.SIZE + len(body)
        found = bulk.decode_records(bytes(chunk), 0)
        bodies = blocks._RunBodies(bytes(chunk), found.rows, 0, positions, lengths)
    elif kind == "select":  # one stream's records of a run shared with another (every other record)
        chunk, positions, pos, idx = bytearray(), [], 0, []
        for i, body in enumerate(encoded):
            other = b"\x00" * 7
            for item in (other, body):
                chunk += rec.encode_record(pos, item)
                positions.append(pos + rec.SIZE)
                pos += rec.SIZE + len(item)
            idx.append(2 * i + 1)
        all_lengths = [7 if i % 2 == 0 else lengths[i // 2] for i in range(2 * len(encoded))]
        found = bulk.decode_records(bytes(chunk), 0)
        bodies = blocks._RunBodies(bytes(chunk), found.rows, 0, positions, all_lengths).select(idx)
        assert [bytes(item) for item in bodies.items] == encoded
    else:
        bodies = blocks._Bodies(encoded)
    at = 0
    for cut in list(cuts) + [len(batches)]:
        if cut > at:
            seg.add(bodies, at, lengths[at:cut], ends[at:cut])
            at = cut


def _object(seg, writer) -> bytes:
    seg.finish()
    return b"".join(writer.blocks) + seg.builder.finish()


shapes_st = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 700)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(shapes=shapes_st, block_size=st.sampled_from([1, 100, 512, 1000, 4096]),
       cuts=st.lists(st.integers(0, 25), max_size=4), kind=st.sampled_from(["bodies", "run", "select"]),
       first=st.integers(0, 1 << 40))
def test_a_spooled_segment_is_build_object_s_byte_for_byte(shapes, block_size, cuts, kind, first):
    batches = _batches(3, shapes, first)
    seg, writer = _spool(block_size, sid=3, first=first)
    _feed(seg, batches, sorted(c for c in cuts if c < len(batches)), kind)
    assert seg.next == batches[-1].end_offset
    assert _object(seg, writer) == obj.build_object([(3, batches)], block_size=block_size).data
    assert writer.leads == [0] * len(writer.blocks)  # buffered: each block at its buffer's start
    assert seg.builder.ranges[3].start_offset == first and seg.builder.ranges[3].end_offset == batches[-1].end_offset


def test_a_block_closes_once_its_payload_reaches_the_block_size():
    sizes = [len(b.encode()) for b in _batches(1, [(1, 100)] * 3)]
    block = sizes[0] * 2  # two batches reach it exactly: the block closes after the second
    seg, writer = _spool(block)
    _feed(seg, _batches(1, [(1, 100)] * 3), [], "bodies")
    assert len(writer.blocks) == 1  # the third is still open
    assert (seg.count, seg.payload, seg.first, seg.last_end, seg.next) == (1, sizes[0], 2, 3, 3)
    seg.finish()
    assert [len(b) for b in writer.blocks] == [blocks._BLOCK_HEAD + block, blocks._BLOCK_HEAD + sizes[0]]
    seg.finish()  # nothing open: no block of nothing
    assert len(writer.blocks) == 2 and seg.buf is None


def test_block_cuts_over_a_run_joining_an_open_block():
    # lengths 10, 20, 30, 40 (accumulated), 25 bytes already in the open block, blocks of 50
    assert list(blocks._block_cuts([10, 30, 60, 100], 25, 50)) == [(0, 1, 30, True), (2, 3, 70, True)]
    assert list(blocks._block_cuts([10, 30, 60, 100], 0, 50)) == [(0, 2, 60, True), (3, 3, 40, False)]
    assert list(blocks._block_cuts([10], 0, 50)) == [(0, 0, 10, False)]
    assert list(blocks._block_cuts([10, 20], 40, 50)) == [(0, 0, 10, True), (1, 1, 10, False)]
    assert list(blocks._block_cuts([50], 0, 50)) == [(0, 0, 50, True)]


def test_an_aligned_spool_lays_each_block_at_its_page_offset():
    batches = _batches(1, [(1, 1000)] * 12)
    seg, writer = _spool(3000, direct=True)
    assert seg.aligned
    _feed(seg, batches, [5], "bodies")
    data = _object(seg, writer)
    assert data == obj.build_object([(1, batches)], block_size=3000).data
    starts, pos = [], 0
    for block in writer.blocks:
        starts.append(pos % ALIGN)
        pos += len(block)
    assert writer.leads == starts and any(starts)


def test_a_record_larger_than_a_block_buffer_gets_a_buffer_of_its_own():
    batches = _batches(1, [(1, 100), (1, 3 * _SLACK), (1, 100)])
    seg, writer = _spool(1)
    room = seg.buffers.size
    _feed(seg, batches, [], "run")
    assert _object(seg, writer) == obj.build_object([(1, batches)], block_size=1).data
    assert writer.sizes[0] == room and writer.sizes[1] >= 3 * _SLACK and writer.sizes[1] > room


def test_large_offset_spans_are_cut_as_build_object_cuts_them():
    # counts that put a block's offset span past INT32_MAX: one batch at a time, cut early
    shapes = [(1 << 29, 10), (1 << 29, 10), (1 << 30, 10), (INT32_MAX - 5, 10), (3, 10), (1, 10)]
    batches = _batches(2, shapes, first=7)
    for cuts in ([], [2], [1, 4]):
        seg, writer = _spool(1 << 20, sid=2, first=7)
        _feed(seg, batches, cuts, "bodies")
        assert _object(seg, writer) == obj.build_object([(2, batches)], block_size=1 << 20).data
        assert len(writer.blocks) == 3


def test_a_run_just_below_the_safe_span_is_cut_by_the_usual_rule():
    span = blocks._SAFE_SPAN
    batches = _batches(2, [(span - 2, 10), (1, 10)], first=0)
    seg, writer = _spool(1 << 20, sid=2)
    _feed(seg, batches, [], "bodies")
    assert _object(seg, writer) == obj.build_object([(2, batches)], block_size=1 << 20).data
    assert len(writer.blocks) == 1


def test_a_batch_no_index_entry_holds_is_refused():
    seg, _ = _spool(1 << 20, sid=2, first=0)
    huge = StreamRecordBatch(2, 0, 0, INT32_MAX + 1, b"x")
    with pytest.raises(blocks._NoSpool) as err:
        seg.add(blocks._Bodies([huge.encode()]), 0, [len(huge.encode())], [huge.end_offset])
    assert str(err.value) == "batch at offset 0 too large for one DataBlock index entry"
    # a batch of INT32_MAX records fits
    seg, writer = _spool(1 << 20, sid=2, first=5)
    fits = StreamRecordBatch(2, 0, 5, INT32_MAX, b"x")
    seg.add(blocks._Bodies([fits.encode()]), 0, [len(fits.encode())], [fits.end_offset])
    assert _object(seg, writer) == obj.build_object([(2, [fits])]).data


def test_a_body_no_index_entry_holds_is_refused_before_it_is_copied():
    seg, writer = _spool(1 << 20, sid=2, first=0)
    seg.add(blocks._Bodies([b"a" * 10]), 0, [10], [1])
    with pytest.raises(blocks._NoSpool) as err:
        seg.add(blocks._Bodies([b""]), 0, [INT32_MAX - blocks._BLOCK_HEAD + 1], [2])
    assert str(err.value) == "batch at offset 1 too large for one DataBlock index entry"
    assert seg.payload == 10 and writer.blocks == []


def test_a_stream_id_no_index_holds_is_refused_when_its_block_closes():
    seg, _ = _spool(1, sid=1 << 63, first=0)
    with pytest.raises(blocks._NoSpool) as err:
        seg.add(blocks._Bodies([b"abc"]), 0, [3], [1])
    assert "stream id" in str(err.value) and isinstance(err.value.__cause__, ValueError)


def test_bodies_copy_into_extends_the_crc():
    items = [b"abc", b"", b"defgh"]
    buf = bytearray(b"\xee" * 12)
    end, crc = blocks._Bodies(items).copy_into(buf, 2, 0, 3, crc32c(b"XY"))
    assert (end, bytes(buf)) == (10, b"\xee\xeeabcdefgh\xee\xee") and crc == crc32c(b"XYabcdefgh")
    end, crc = blocks._Bodies(items).copy_into(buf, 0, 2, 3, 0)
    assert (end, crc) == (5, crc32c(b"defgh"))


def test_run_bodies_copy_a_stretch_of_rows():
    encoded = [b"first", b"second!", b"third"]
    chunk, positions, pos = bytearray(), [], 0
    for body in encoded:
        chunk += rec.encode_record(pos, body)
        positions.append(pos + rec.SIZE)
        pos += rec.SIZE + len(body)
    found = bulk.decode_records(bytes(chunk), 0)
    run = blocks._RunBodies(bytes(chunk), found.rows, 1, positions[1:], [7, 5])  # the run starts at row 1
    buf = bytearray(20)
    end, crc = run.copy_into(buf, 3, 0, 2, crc32c(b"Q"))
    assert (end, bytes(buf[3:end])) == (15, b"second!third") and crc == crc32c(b"Qsecond!third")
    end, crc = run.copy_into(buf, 0, 1, 2, 0)
    assert (end, bytes(buf[:end]), crc) == (5, b"third", crc32c(b"third"))
    assert [bytes(b) for b in run.select([1]).items] == [b"third"]


def test_block_buffers_are_page_aligned_room_for_a_block_and_its_lead():
    pool = blocks.block_buffers(10)
    assert pool.size == 2 * ALIGN and pool.keep == blocks._KEEP_BLOCK_BUFFERS
    assert blocks.block_buffers(ALIGN * 3).size == 4 * ALIGN


def test_blocks_close_where_the_payload_reaches_the_block_size_in_one_run():
    batches = _batches(1, [(1, 100)] * 6)
    size = len(batches[0].encode())
    seg, writer = _spool(2 * size + 1)  # three batches a block: two are one byte short
    _feed(seg, batches, [], "bodies")
    _object(seg, writer)
    assert [len(b) for b in writer.blocks] == [blocks._BLOCK_HEAD + 3 * size] * 2


@pytest.fixture
def small_int32(monkeypatch):
    """The spool's own index-entry limits (INT32_MAX) made small, and every run taken one batch at a
    time, so its boundaries are reached with small batches (the builder keeps the real limits)."""
    from walctl.format import index_entry

    monkeypatch.setattr(index_entry, "INT32_MAX", 1000)
    monkeypatch.setattr(blocks, "_SAFE_SPAN", 0)
    return 1000 - blocks._BLOCK_HEAD  # the largest block payload


def _bodies_of(*lengths):
    return blocks._Bodies([bytes([i]) * n for i, n in enumerate(lengths)])


def test_one_by_one_a_body_of_the_largest_payload_fits_one_more_byte_does_not(small_int32):
    seg, writer = _spool(1 << 20)
    seg.add(_bodies_of(small_int32), 0, [small_int32], [1])
    seg.finish()
    assert [len(b) for b in writer.blocks] == [1000]
    seg, writer = _spool(1 << 20)
    with pytest.raises(blocks._NoSpool, match="batch at offset 0 too large"):
        seg.add(_bodies_of(small_int32 + 1), 0, [small_int32 + 1], [1])


@pytest.mark.parametrize("extra, blocks_made", [(0, 1), (1, 2)])
def test_one_by_one_a_block_is_cut_before_its_payload_passes_the_limit(small_int32, extra, blocks_made):
    seg, writer = _spool(1 << 20)
    seg.add(_bodies_of(500, small_int32 - 500 + extra), 0, [500, small_int32 - 500 + extra], [1, 2])
    seg.finish()
    assert len(writer.blocks) == blocks_made
    assert sum(len(b) for b in writer.blocks) == blocks_made * blocks._BLOCK_HEAD + small_int32 + extra


@pytest.mark.parametrize("span, blocks_made", [(1000, 1), (1001, 2)])
def test_one_by_one_a_block_is_cut_before_its_offset_span_passes_the_limit(small_int32, span, blocks_made):
    seg, writer = _spool(1 << 20, first=10)
    seg.add(_bodies_of(5, 5), 0, [5, 5], [11, 10 + span])
    seg.finish()
    assert len(writer.blocks) == blocks_made and seg.next == 10 + span


@pytest.mark.parametrize("total, blocks_made", [(64, 1), (63, 0)])
def test_one_by_one_a_block_closes_once_its_payload_reaches_the_block_size(small_int32, total, blocks_made):
    seg, writer = _spool(64)
    seg.add(_bodies_of(32, total - 32), 0, [32, total - 32], [1, 2])
    assert len(writer.blocks) == blocks_made


class _NoDirect:
    """A store spool without a ``direct`` attribute (written buffered)."""


def test_a_spool_without_direct_is_buffered():
    buffers = blocks.block_buffers(1000)
    seg = blocks._SegmentSpool(_NoDirect(), _Writer(buffers), buffers, 1, 0, 100)
    assert seg.aligned is False
    seg = blocks._SegmentSpool(SimpleNamespace(direct=True), _Writer(buffers), buffers, 1, 0, 100)
    assert seg.aligned is True


@pytest.mark.parametrize("direct", [True, False])
def test_spooled_through_the_writer_thread_into_a_local_store(tmp_path, monkeypatch, direct):
    """Blocks laid out here, written by the spool's writer thread (whole pages when direct), published
    with the index and footer: the object is build_object's."""
    from walctl.pipeline.upload import spool as spool_mod
    from walctl.store import local as local_mod
    from walctl.store.local import LocalStore

    if not direct:
        monkeypatch.setattr(local_mod.LocalSpool, "_set_direct", lambda self, on: False)
    spools = spool_mod._Spools(LocalStore(str(tmp_path / "store")), 3000, 4)
    batches = _batches(4, [(1, 700)] * 8 + [(2, 5000)] + [(1, 300)] * 5, first=9)
    seg = spools.new(4, 9)
    if direct and not seg.aligned:
        spools.close()
        pytest.skip("this filesystem refuses O_DIRECT")
    assert seg.aligned is direct
    _feed(seg, batches, [3, 9], "run")
    seg.finish()
    spools.publish(seg, "obj/4")
    spools.close()
    data = (tmp_path / "store" / "obj" / "4").read_bytes()
    assert data == obj.build_object([(4, batches)], block_size=3000).data


def test_an_open_block_s_payload_adds_up_over_several_runs():
    batches = _batches(1, [(1, 100)] * 3)
    size = len(batches[0].encode())
    seg, writer = _spool(3 * size - 1)
    for i, batch in enumerate(batches):  # one batch a run: the third reaches the block size
        seg.add(blocks._Bodies([batch.encode()]), 0, [size], [batch.end_offset])
        assert len(writer.blocks) == (i == 2)
    assert _object(seg, writer) == obj.build_object([(1, batches)], block_size=3 * size - 1).data
