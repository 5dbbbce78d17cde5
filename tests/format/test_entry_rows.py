"""entry_rows (the reader's payload-free decode) against iter_placed, its reference: the same rows
for every entry iter_placed decodes, and None exactly where iter_placed raises (any damage)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl.errors import FormatError
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch as B


def _reference(buf, entry, base_position):
    """iter_placed's rows, or None when it raises (after any number of batches)."""
    try:
        return [(p.batch.stream_id, p.batch.base_offset, p.batch.end_offset, p.batch.count, p.batch.epoch,
                 len(p.batch.payload), p.block_position, p.batch_position)
                for p in obj.iter_placed(buf, entry, base_position=base_position, copy=False)]
    except (FormatError, ValueError):
        return None


@st.composite
def objects(draw):
    streams = []
    for sid in sorted(draw(st.sets(st.integers(0, 2**40), min_size=1, max_size=3))):
        base = draw(st.integers(0, 2**62))
        batches = []
        for _ in range(draw(st.integers(1, 12))):
            count = draw(st.integers(1, 5))
            batches.append(B(sid, draw(st.integers(-2, 2**40)), base, count, draw(st.binary(max_size=300))))
            base += count
        streams.append((sid, batches))
    return obj.build_object(streams, block_size=draw(st.integers(1, 900)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(built=objects(), data=st.data())
def test_rows_are_iter_placeds_or_none_where_it_raises(built, data):
    buf = bytearray(built.data)
    data_end = built.footer.index_start_position
    for _ in range(data.draw(st.integers(0, 3))):  # damage: bytes flipped, set or zeroed in the data region
        at = data.draw(st.integers(0, data_end - 1))
        buf[at] = data.draw(st.sampled_from([buf[at] ^ (1 << data.draw(st.integers(0, 7))), 0, 0xFF]))
    cut = data.draw(st.sampled_from([len(buf), data_end, data.draw(st.integers(0, len(buf)))]))
    view = memoryview(bytes(buf[:cut]))
    for entry in built.entries:
        for base in (0, entry.block_position):  # the whole object, or just the entry's range
            part = view if base == 0 else view[base:]
            want = _reference(part, entry, base)
            assert obj.entry_rows(part, entry, base_position=base) == want


def test_a_clean_object_never_falls_back():
    built = obj.build_object([(3, [B(3, 1, i, 1, bytes(100)) for i in range(40)])], block_size=1000)
    rows = [r for e in built.entries for r in obj.entry_rows(built.data, e)]
    assert [r[1] for r in rows] == list(range(40)) and {r[5] for r in rows} == {100}


@pytest.mark.parametrize("change", ["block_magic", "batch_stream", "batch_count", "past_entry", "record_count"])
def test_each_check_sends_the_entry_back_to_iter_placed(change):
    built = obj.build_object([(3, [B(3, 1, i, 1, bytes(100)) for i in range(4)])], block_size=10_000)
    (entry,) = built.entries
    buf = bytearray(built.data)
    if change == "block_magic":
        buf[0] = 0x5B
    elif change == "batch_stream":
        buf[10 + 8] ^= 1  # the first batch's streamId, low byte
    elif change == "batch_count":
        buf[10 + 25 + 3] = 0  # the first batch's count: 0
    elif change == "past_entry":
        entry = obj.IndexEntry(3, 0, entry.end_offset_delta, entry.record_count, 0, entry.block_size - 1)
    elif change == "record_count":
        entry = obj.IndexEntry(3, 0, entry.end_offset_delta, entry.record_count + 1, 0, entry.block_size)
    assert obj.entry_rows(bytes(buf), entry) is None
    assert _reference(bytes(buf), entry, 0) is None


def _batch(stream_id, base, count, payload=b"") -> bytes:
    """A StreamRecordBatch's bytes, fields as given (even those B.encode would not write)."""
    return struct.pack(">BqqqII", 0x22, stream_id, 0, base, count, len(payload)) + payload


def _block(*batches, count=None, length=None) -> bytes:
    body = b"".join(batches)
    return struct.pack(">BBii", 0x5A, 0x02, len(batches) if count is None else count,
                       len(body) if length is None else length) + body


@pytest.mark.parametrize("buf, entry", [
    # the entry's own fields out of range, with batches that match them
    (_block(_batch(-1, 0, 1)), obj.IndexEntry(-1, 0, 1, 1, 0, 43)),
    (_block(_batch(3, -1, 2)), obj.IndexEntry(3, -1, 2, 1, 0, 43)),
    # an empty block (count 0, no bytes) after a good one
    (_block(_batch(3, 0, 1)) + _block(count=0), obj.IndexEntry(3, 0, 1, 1, 0, 53)),
    # the range ends inside a block header, or a block ends inside a batch header, at the buffer's end
    (_block(_batch(3, 0, 1)) + b"\x5a\x02\x00", obj.IndexEntry(3, 0, 1, 1, 0, 46)),
    (_block(_batch(3, 0, 1)[:5], count=1), obj.IndexEntry(3, 0, 1, 1, 0, 15)),
    # a batch ending at 2^63, past the last offset a stream has
    (_block(_batch(3, (1 << 63) - 2, 2)), obj.IndexEntry(3, (1 << 63) - 2, 2, 1, 0, 43)),
], ids=["negative-stream", "negative-start", "empty-block", "header-cut", "batch-header-cut", "end-2^63"])
def test_what_iter_placed_refuses_entry_rows_sends_back(buf, entry):
    assert _reference(buf, entry, 0) is None
    assert obj.entry_rows(buf, entry) is None


def test_one_entry_over_several_blocks_gives_every_row():
    blocks = _block(_batch(3, 0, 2, b"ab"), _batch(3, 2, 1)) + _block(_batch(3, 3, 4, b"xyz"))
    entry = obj.IndexEntry(3, 0, 7, 3, 100, len(blocks))
    want = [(3, 0, 2, 2, 0, 2, 100, 110), (3, 2, 3, 1, 0, 0, 100, 145), (3, 3, 7, 4, 0, 3, 178, 188)]
    assert obj.entry_rows(blocks, entry, base_position=100) == want == _reference(blocks, entry, 100)
