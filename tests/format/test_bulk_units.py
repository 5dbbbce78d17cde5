"""walctl.format.bulk at the edges its property tests rarely draw (issue 32, bulk.py's survivors):
each stop reason's expected/found values in the C decoder and its Python twin, Stop.error's
lap check at lap end 0 and at a record ending exactly on it, a batch whose base + count reaches
2^63, batches=False, max_records 2, zeros at an aligned offset, rows_summary on sums that wrap
and which implementation answers."""

from __future__ import annotations

import struct

import pytest

from walctl.errors import BoundsError, ChecksumError, FormatError, TruncatedError
from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch

NATIVE = bulk._native


def both(fn, *args, **kwargs):
    """The answers of the C loop (when built) and of the Python twin, C first."""
    saved = bulk._native
    answers = []
    try:
        if saved is not None:
            answers.append(fn(*args, **kwargs))
        bulk._native = None
        answers.append(fn(*args, **kwargs))
    finally:
        bulk._native = saved
    return answers


def stops(buf, base, **kwargs):
    """(reason, pos, offset, expected, found, rows) of decode_records in each implementation."""
    return [(d.stop.reason, d.stop.pos, d.stop.offset, d.stop.expected, d.stop.found, d.tuples())
            for d in both(bulk.decode_records, buf, base, **kwargs)]


def header(magic, length, body_offset, body_crc=0) -> bytes:
    return rec.RecordHeader(magic, length, body_offset, body_crc).encode()


# ---- each stop reason's expected/found ---------------------------------------------------------

def test_a_header_cut_after_a_record_reports_the_bytes_left_from_its_position():
    buf = rec.encode_record(100, b"abc") + b"\x01" * 10
    for got in stops(buf, 100):
        assert got[:5] == (bulk.TRUNCATED_HEADER, 27, 127, 24, 10)


def test_a_body_length_of_zero_is_bad_length_with_no_values():
    buf = rec.encode_record(0, b"abc") + header(rec.DATA_MAGIC, 0, 27 + 24) + b"\x00" * 8
    for got in stops(buf, 0):
        assert got[:5] == (bulk.BAD_LENGTH, 27, 27, 0, 0) and len(got[5]) == 1


def test_a_body_offset_below_24_at_a_negative_logical_offset_is_low_body_offset():
    # a record at logical offset -24 claims bodyOffset 0: its own offset + 24, but below 24
    buf = header(rec.DATA_MAGIC, 3, 0, 0) + b"abc"
    for got in stops(buf, -24):
        assert got[:5] == (bulk.LOW_BODY_OFFSET, 0, -24, 0, 0)
    err = bulk.decode_records(buf, -24).stop.error(buf)
    assert isinstance(err, BoundsError) and err.field == "record bodyOffset" and err.found == 0


def test_a_body_offset_of_another_record_is_bad_body_offset_with_both_values():
    buf = rec.encode_record(0, b"abc") + rec.encode_record(500, b"d")  # the second one claims 500 + 24
    for got in stops(buf, 0):
        assert got[:5] == (bulk.BAD_BODY_OFFSET, 27, 27, 51, 524)


def test_each_body_failure_has_its_values_in_both():
    buf = bytearray(rec.encode_record(0, b"x" * 40))
    for got in stops(bytes(buf[:50]), 0):
        assert got[:5] == (bulk.TRUNCATED_BODY, 0, 0, 40, 26)
    buf[30] ^= 1
    body_crc = struct.unpack_from(">I", buf, 16)[0]
    for got in stops(bytes(buf), 0):
        assert got[:3] == (bulk.BODY_CRC, 0, 0) and got[4] == body_crc and got[3] != body_crc


# ---- the lap check: lap end 0, and a record ending exactly on the lap end -----------------------

def test_a_lap_end_of_zero_is_a_lap_end():
    buf = rec.encode_record(0, b"abc")
    for got in stops(buf, 0, lap_end=0):
        assert got[:5] == (bulk.CROSSES_LAP, 0, 0, 0, 27) and got[5] == []
    stop = bulk.decode_records(buf, 0, lap_end=0).stop
    err = stop.error(buf, None, 0)
    assert isinstance(err, BoundsError)
    assert str(err) == "record end 27 crosses the end of the lap at 0"
    assert (err.offset, err.found) == (4, 27)


def test_a_record_ending_on_the_lap_end_is_inside_the_lap():
    buf = rec.encode_record(100, b"abc") + rec.encode_record(127, b"defg")
    for got in stops(buf, 100, lap_end=127):
        assert got[:5] == (bulk.CROSSES_LAP, 27, 127, 127, 155) and len(got[5]) == 1
    for got in stops(buf, 100, lap_end=155):
        assert got[0] == bulk.END and len(got[5]) == 2
    damaged = bytearray(buf)
    damaged[-1] ^= 1  # the second record's body: a crc mismatch, and it ends on the lap end
    stop = bulk.decode_records(bytes(damaged), 100, lap_end=155).stop
    assert stop.reason == bulk.BODY_CRC
    err = stop.error(bytes(damaged), None, 155)
    assert isinstance(err, ChecksumError) and err.offset == 27 + 24


def test_stop_error_of_a_record_that_decodes_is_an_assertion():
    buf = rec.encode_record(0, b"abc")
    with pytest.raises(AssertionError) as info:
        bulk.Stop(bulk.BODY_CRC, 0, 0).error(buf)
    assert str(info.value) == "decode_records stopped (body crc mismatch) at 0 but the record decodes"


def test_stop_error_reads_the_whole_buffer_without_an_end():
    buf = rec.encode_record(0, b"abc")[:20]
    err = bulk.Stop(bulk.TRUNCATED_HEADER, 0, 0).error(buf)
    assert isinstance(err, TruncatedError) and (err.expected, err.found) == (24, 20)


# ---- batches: base + count at 2^63, batches=False ----------------------------------------------

def batch_record(offset, base, count) -> bytes:
    return rec.encode_record(offset, StreamRecordBatch(5, 1, base, count, b"pp").encode())


@pytest.mark.parametrize("base, count, is_batch", [
    ((1 << 63) - 2, 1, True), ((1 << 63) - 1, 1, False), ((1 << 63) - 3, 2, True), ((1 << 63) - 2, 2, False),
])
def test_a_batch_whose_base_plus_count_reaches_2_63_is_data(base, count, is_batch):
    buf = batch_record(0, base, count)
    try:
        StreamRecordBatch.decode(buf[24:], exact=True)
        decodes = True
    except FormatError:  # the reference refuses it
        decodes = False
    assert decodes is is_batch
    for got in stops(buf, 0):
        assert got[0] == bulk.END
        assert got[5][0][3:] == ((bulk.KIND_BATCH, 5, 1, base, count) if is_batch else (bulk.KIND_DATA, -1, -1, -1, -1))


def test_batches_false_gives_data_rows_without_batch_fields():
    buf = batch_record(0, 10, 2) + batch_record(59, 12, 1)
    for got in stops(buf, 0, batches=False):
        assert got[0] == bulk.END
        assert [r[3:] for r in got[5]] == [(bulk.KIND_DATA, -1, -1, -1, -1)] * 2
    for got in stops(buf, 0):
        assert [r[3:] for r in got[5]] == [(bulk.KIND_BATCH, 5, 1, 10, 2), (bulk.KIND_BATCH, 5, 1, 12, 1)]


def test_max_records_two_and_three_of_three():
    buf = rec.encode_record(0, b"abc") + rec.encode_record(27, b"defg") + rec.encode_record(55, b"h")
    for got in stops(buf, 0, max_records=2):
        assert (got[0], got[1], len(got[5])) == (bulk.LIMIT, 55, 2)
    for got in stops(buf, 0, max_records=3):
        assert (got[0], got[1], len(got[5])) == (bulk.END, len(buf), 3)


def test_zeros_at_an_aligned_offset_are_a_zeroed_header_not_padding():
    # align skips zeros only from an offset inside a block up to its end; zeros starting on a
    # block boundary are a zeroed header
    buf = bytes(4096) + rec.encode_record(8192, b"abc")
    for got in stops(buf, 4096, align=4096):
        assert got[:2] == (bulk.ZEROED, 0) and got[5] == []
    inside = bytes(96) + rec.encode_record(4096, b"abc")  # zeros from 4000 to the boundary: skipped
    for got in stops(inside, 4000, align=4096):
        assert got[0] == bulk.END and [r[0] for r in got[5]] == [4096]


# ---- rows_summary: sums that wrap, the refusal's words, which implementation answers ------------

def rows_of(*rows) -> memoryview:
    return bulk._int64s(struct.pack(f"={len(rows) * bulk.ROW}q", *[v for r in rows for v in r]))


def test_rows_summary_body_bytes_wrap_as_int64():
    top = (1 << 63) - 1
    rows = rows_of((0, 24, top, 0, 7, 0, 0, 1), (0, 24, 1, 0, 7, 0, 1, 1), (0, 24, top, 0, 7, 0, 2, 1))
    for got in both(bulk.rows_summary, rows, 0, 2):
        assert got == (True, True, 7, True, -(1 << 63))
    for got in both(bulk.rows_summary, rows, 0, 3):
        assert got == (True, True, 7, True, (1 << 63) - 1 + 1 + (1 << 63) - 1 - (1 << 64))


def test_rows_summary_base_offsets_follow_across_the_int64_wrap():
    top = (1 << 63) - 1
    rows = rows_of((0, 24, 40, 0, 7, 0, top, 1), (0, 24, 40, 0, 7, 0, -(1 << 63), 2))
    for got in both(bulk.rows_summary, rows, 0, 2):
        assert got == (True, True, 7, True, 80)
    unwrapped = rows_of((0, 24, 40, 0, 7, 0, top - 1, 3), (0, 24, 40, 0, 7, 0, -(1 << 63), 2))
    for got in both(bulk.rows_summary, unwrapped, 0, 2):
        assert got[3] is False
    assert bulk._wrap64(1 << 63) == -(1 << 63) and bulk._wrap64((1 << 64) + 5) == 5
    assert bulk._wrap64(-(1 << 63) - 1) == (1 << 63) - 1 and bulk._wrap64(3 << 64) == 0


def test_rows_summary_refusal_words():
    rows = rows_of((0, 24, 1, 0, 7, 0, 0, 1))
    for first, stop in ((0, 0), (0, 2)):
        for info in both(lambda: pytest.raises(ValueError, bulk.rows_summary, rows, first, stop)):
            assert str(info.value) == "rows_summary: rows [first, stop) must be a non-empty range of the rows"


def test_rows_summary_runs_the_c_loop_when_built_and_the_twin_without_it(monkeypatch):
    rows = rows_of((0, 24, 5, 0, 7, 0, 0, 1), (0, 24, 6, 1, 7, 0, 1, 1))
    calls = []

    def c_loop(*args):
        calls.append(args[1:])
        return ("from C",)

    monkeypatch.setattr(bulk, "_native_rows_summary", c_loop)
    monkeypatch.setattr(bulk, "_native", object())  # a built extension (its rows_summary is c_loop)
    assert bulk.rows_summary(rows, 0, 2) == ("from C",) and calls == [(0, 2)]
    monkeypatch.setattr(bulk, "_native", None)  # WALCTL_NO_NATIVE: the twin, whatever else is loaded
    assert bulk.rows_summary(rows, 0, 2) == (False, True, 7, True, 11) and calls == [(0, 2)]


# ---- inputs the property tests draw only by luck (a full run found them alive) -----------------

def test_stop_error_reads_only_up_to_end():
    buf = rec.encode_record(0, b"abc")  # intact, but `end` cuts its header at 20
    err = bulk.decode_records(buf, 0, end=20).stop.error(buf, 20)
    assert isinstance(err, TruncatedError) and (err.expected, err.found) == (24, 20)
    err = bulk.Stop(bulk.TRUNCATED_BODY, 0, 0).error(buf, 26)
    assert isinstance(err, TruncatedError) and (err.expected, err.found) == (3, 2)


def test_pack_fills_up_to_the_limit_exactly_from_a_position():
    for limit, want in ((36, (0, 10)), (37, (1, 37)), (64, (1, 37)), (65, (2, 65))):
        for got in both(bulk.pack_records, bytearray(100), 10, limit, 500, [b"abc", b"defg"]):
            assert got == want, limit
    out = bytearray(100)
    bulk.pack_records(out, 10, 65, 500, [b"abc", b"defg"])
    assert bytes(out[10:65]) == rec.encode_record(500, b"abc") + rec.encode_record(527, b"defg")
    assert not any(out[65:])


def test_split_lines_with_max_records_zero_and_an_empty_first_line():
    for got in both(bulk.split_lines, b"a\nb\n", 0, 0):
        assert (got.pairs(), got.next_pos) == ([], 0)
    for got in both(bulk.split_lines, b"\n\nx\n"):
        assert (got.pairs(), got.next_pos) == ([(0, 0), (1, 0), (2, 1)], 4)
