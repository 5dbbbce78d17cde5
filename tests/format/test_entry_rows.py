"""entry_rows (the reader's payload-free decode) against iter_placed, its reference: the same rows
for every entry iter_placed decodes, and None exactly where iter_placed raises (any damage)."""

from __future__ import annotations

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
