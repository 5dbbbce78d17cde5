"""Objects of AutoMQ-shaped batches (issue 32): count > 1, epoch != 0, index entries over several
DataBlocks. walctl writes batches of count 1 and epoch 0, where a batch count and an offset span
are the same number; these tests build what AutoMQ writes, through both builders and every reader.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch as B
from walctl.format.crc import crc32c
from walctl.format.object import DATA_BLOCK_HEADER_SIZE, DataBlockHeader, ObjectBuilder, build_object


@st.composite
def stream_batches(draw):
    """Streams in ascending order, each a contiguous run of batches of count 1..6 and any epoch."""
    sids = sorted(draw(st.sets(st.integers(0, 1 << 40), min_size=1, max_size=4)))
    streams = []
    for sid in sids:
        offset = draw(st.integers(0, 1 << 40))
        batches = []
        for _ in range(draw(st.integers(1, 8))):
            count = draw(st.integers(1, 6))
            epoch = draw(st.sampled_from([0, 1, 7, (1 << 40) + 3, -1]))
            batches.append(B(sid, epoch, offset, count, draw(st.binary(max_size=50))))
            offset += count
        streams.append((sid, batches))
    return streams


def streamed(streams, block_size, *, laid_out=False, version=obj.VERSION_WALCTL):
    """The same object through ObjectBuilder, a block at a time as upload builds it."""
    builder = ObjectBuilder(version=version)
    parts = []
    for sid, batches in streams:
        for group in obj.iter_block_groups(batches, block_size):
            encoded = [b.encode() for b in group]
            if laid_out:  # upload's spools: the caller lays the block out and gives its size and crc
                data = DataBlockHeader(len(group), sum(map(len, encoded))).encode() + b"".join(encoded)
                builder.add_laid_out(sid, group[0].base_offset, group[-1].end_offset, len(group), len(data),
                                     crc32c(data))
            else:
                data = builder.add_block(sid, group[0].base_offset, group[-1].end_offset, encoded)
            parts.append(data)
    parts.append(builder.finish())
    return b"".join(parts), builder


SHAPES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SHAPES
@given(streams=stream_batches(), block_size=st.sampled_from([1, 60, 120, 1 << 20]), laid_out=st.booleans(),
       version=st.sampled_from(obj.VERSIONS))
def test_streaming_builder_matches_build_object(streams, block_size, laid_out, version):
    built = build_object(streams, block_size=block_size, version=version)
    data, builder = streamed(streams, block_size, laid_out=laid_out, version=version)
    assert data == built.data
    assert builder.entries == built.entries and builder.ranges == built.ranges and builder.footer == built.footer


@SHAPES
@given(streams=stream_batches(), block_size=st.sampled_from([1, 60, 120, 1 << 20]))
def test_every_reader_gives_back_the_batches_and_the_index_counts_batches(streams, block_size):
    built = build_object(streams, block_size=block_size)
    data = built.data
    footer, entries = obj.parse_tail(data, len(data))
    assert entries == built.entries and obj.verify_object(data) == []
    got = {}
    for e in entries:
        batches = list(obj.iter_blocks(data, e))
        # recordCount counts StreamRecordBatches, not offsets (FORMATS.md 3; AutoMQ's DataBlockIndex),
        # read from the entry's bytes (offset 20 of its 36) rather than through IndexEntry
        raw = data[footer.index_start_position + entries.index(e) * 36:][:36]
        assert struct.unpack_from(">I", raw, 20)[0] == len(batches) == e.record_count
        assert e.end_offset - e.start_offset == sum(b.count for b in batches)
        rows = obj.entry_rows(data, e)
        assert rows is not None
        assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == \
            [(b.stream_id, b.base_offset, b.end_offset, b.count, b.epoch, len(b.payload)) for b in batches]
        placed = [p.batch for p in obj.iter_placed(data, e)]
        assert placed == batches
        got.setdefault(e.stream_id, []).extend(batches)
    assert got == dict(streams)
    for sid, batches in streams:
        r = built.ranges[sid]
        assert (r.start_offset, r.end_offset) == (batches[0].base_offset, batches[-1].end_offset)


def test_one_block_of_count_3_batches_is_indexed_by_batches():
    """The survivor of issue 32: recordCount written as end - start (9) instead of the batches (3)."""
    batches = [B(5, 2, 10 + 3 * i, 3, bytes([i]) * 4) for i in range(3)]
    built = build_object([(5, batches)])
    data, builder = streamed([(5, batches)], 1 << 20)
    assert data == built.data
    (entry,) = builder.entries
    assert (entry.start_offset, entry.end_offset, entry.record_count) == (10, 19, 3)
    block = data[:entry.block_size]
    assert struct.unpack_from(">BBII", block, 0) == (0x5A, 0x02, 3, entry.block_size - DATA_BLOCK_HEADER_SIZE)
    assert [b.epoch for b in obj.iter_blocks(data, entry)] == [2, 2, 2]


@SHAPES
@given(streams=stream_batches(), block_size=st.sampled_from([1, 60, 1 << 20]))
def test_assemble_object_of_an_object_s_own_blocks_is_that_object(streams, block_size):
    """Compaction copies DataBlock runs verbatim (assemble_object): the runs of an object, in order,
    make the same object again, counts and epochs included."""
    built = build_object(streams, block_size=block_size)
    parts = [(e, built.data[e.block_position:e.block_position + e.block_size]) for e in built.entries]
    again = obj.assemble_object(parts)
    assert again.data == built.data and again.entries == built.entries and again.ranges == built.ranges


def test_assemble_object_refuses_runs_that_do_not_fit():
    batches = [B(3, 1, 10 + 2 * i, 2, bytes([i]) * 9) for i in range(4)]
    built = build_object([(3, batches)], block_size=40)
    runs = [(e, built.data[e.block_position:e.block_position + e.block_size]) for e in built.entries]
    assert len(runs) >= 2
    with pytest.raises(ValueError, match=r"^block run of stream 3 at 10: \d+ bytes, its entry says \d+$"):
        obj.assemble_object([(runs[0][0], runs[0][1][:-1])])
    with pytest.raises(ValueError, match=r"^parts must be sorted by \(stream, offset\) without overlap$"):
        obj.assemble_object([runs[1], runs[0]])
    with pytest.raises(ValueError, match=r"^stream 3: parts not contiguous \(\d+ then \d+\); an object holds"):
        obj.assemble_object([runs[0], runs[2]])
    with pytest.raises(ValueError, match=r"^an object needs at least one block$"):
        obj.assemble_object([])
    other = build_object([(2, [B(2, 0, 0, 1, b"x")])])
    mixed = obj.assemble_object([(other.entries[0], other.data[:other.entries[0].block_size]), runs[0]])
    assert [e.stream_id for e in mixed.entries] == [2, 3] and mixed.entries[1].block_position == other.entries[0].block_size


INT32_MAX = (1 << 31) - 1


def test_object_builder_refuses_what_an_index_cannot_say():
    one = [B(4, 0, 0, 1, b"x").encode()]
    b = ObjectBuilder()
    with pytest.raises(ValueError, match=r"^footer version 9 unknown, expected one of "):
        ObjectBuilder(version=9)
    with pytest.raises(ValueError, match=r"^an object needs at least one stream$"):
        b.finish()
    with pytest.raises(ValueError, match=r"^stream 4: an empty DataBlock$"):
        b.add_block(4, 0, 1, [])
    for sid in (-1, 1 << 63, "4"):
        with pytest.raises(ValueError, match=r"^stream id .* out of range \[0, 2\^63\)$"):
            b.add_block(sid, 0, 1, one)
    b.add_block((1 << 63) - 1, 0, 1, [B((1 << 63) - 1, 0, 0, 1, b"x").encode()])  # the largest stream id
    b = ObjectBuilder()
    b.add_block(4, 0, 1, one)
    with pytest.raises(ValueError, match=r"^streams must be strictly ascending: 3 after 4$"):
        b.add_block(3, 0, 1, one)
    with pytest.raises(ValueError, match=r"^stream 4: block at offset 2, expected 1 \(a gap or overlap\)$"):
        b.add_block(4, 2, 3, one)
    for start, end in ((1, 1), (1, 0), (1, 2 + INT32_MAX)):
        with pytest.raises(ValueError, match=r"^stream 5: block offsets \[1, -?\d+\) do not fit an index entry$"):
            ObjectBuilder().add_block(5, start, end, one)
    ObjectBuilder().add_laid_out(5, 1, 1 + INT32_MAX, 1, 40, 0)  # the widest span an entry holds
    with pytest.raises(ValueError, match=r"do not fit an index entry$"):
        ObjectBuilder().add_laid_out(5, (1 << 63) - 2, 1 << 63, 1, 40, 0)
    with pytest.raises(ValueError, match=r"^stream 5: a DataBlock of 2147483648 bytes does not fit a Java int$"):
        ObjectBuilder().add_laid_out(5, 0, 1, 1, INT32_MAX + 1, 0)
    ObjectBuilder().add_laid_out(5, 0, 1, 1, INT32_MAX, 0)
    b.finish()
    for late in (lambda: b.finish(), lambda: b.add_block(9, 0, 1, one)):
        with pytest.raises(ValueError, match=r"^the object is already finished$"):
            late()

