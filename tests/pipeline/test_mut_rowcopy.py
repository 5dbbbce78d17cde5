"""walctl.pipeline.rowcopy's pure-Python twins at their boundaries (issue 32): the row range and
record bounds ``_check`` accepts and refuses (exact messages), rows given as bytes, the copy's
destination bounds, the crc's 32-bit range, and the native/twin dispatch of the public calls."""

from __future__ import annotations

import struct

import pytest

from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.crc import crc32c
from walctl.pipeline import rowcopy


def _rows(*spans, width=bulk.ROW):
    """Rows of ``bulk.ROW`` int64s whose body_pos and body_length are ``spans``' (the rest -1)."""
    out = []
    for pos, length in spans:
        row = [-1] * width
        row[1], row[2] = pos, length
        out += row
    return memoryview(struct.pack(f"={len(out)}q", *out)).cast("B").cast("q")


def _buf(*bodies):
    """Records packed back to back, their rows (body positions and lengths) and bodies."""
    buf = bytearray()
    spans = []
    for i, body in enumerate(bodies):
        start = len(buf)
        buf += rec.encode_record(start, body)
        spans.append((start + rec.SIZE, len(body)))
    return bytes(buf), _rows(*spans)


def test_check_returns_the_spans_of_the_rows_asked_for():
    buf, rows = _buf(b"abc", b"", b"defgh")
    assert rowcopy._check(buf, rows, 0, 3) == [(24, 3), (51, 0), (75, 5)]
    assert rowcopy._check(buf, rows, 1, 3) == [(51, 0), (75, 5)]
    assert rowcopy._check(buf, rows, 1, 2) == [(51, 0)]
    assert rowcopy._check(buf, rows, 3, 3) == [] and rowcopy._check(buf, rows, 0, 0) == []


def test_check_takes_rows_as_raw_bytes():
    buf, rows = _buf(b"abc", b"xy")
    raw = bytes(rows.cast("B"))
    assert memoryview(raw).format == "B"
    assert rowcopy._check(buf, raw, 0, 2) == [(24, 3), (51, 2)]
    assert rowcopy._check(buf, bytearray(raw), 1, 2) == [(51, 2)]


@pytest.mark.parametrize("first,stop", [(-1, 0), (-1, 1), (2, 1), (0, 3), (3, 3), (1, 0)])
def test_check_refuses_a_row_range_out_of_range(first, stop):
    buf, rows = _buf(b"abc", b"xy")
    with pytest.raises(ValueError) as err:
        rowcopy._check(buf, rows, first, stop)
    assert str(err.value) == "rows [first, stop) out of range"


def test_check_accepts_a_record_at_the_buffer_s_bounds():
    buf = bytes(40)
    assert rowcopy._check(buf, _rows((24, 16)), 0, 1) == [(24, 16)]  # ends at the buffer's end
    assert rowcopy._check(buf, _rows((40, 0)), 0, 1) == [(40, 0)]  # empty, at the end
    assert rowcopy._check(buf, _rows((24, 0)), 0, 1) == [(24, 0)]  # right after its header


@pytest.mark.parametrize("span", [(23, 0), (24, -1), (41, 0), (24, 17), (40, 1), (0, 5), (-5, 1)])
def test_check_refuses_a_record_outside_the_buffer(span):
    with pytest.raises(ValueError) as err:
        rowcopy._check(bytes(40), _rows((24, 1), span), 0, 2)
    assert str(err.value) == "a row's record lies outside the buffer"


def test_check_measures_the_buffer_in_bytes_not_items():
    buf = memoryview(bytearray(40)).cast("I")  # 10 items, 40 bytes
    assert rowcopy._check(buf, _rows((24, 16)), 0, 1) == [(24, 16)]


def test_body_crcs_reads_each_record_header_s_body_crc():
    buf, rows = _buf(b"abc", b"", b"defgh")
    want = [crc32c(b"abc"), crc32c(b""), crc32c(b"defgh")]
    assert rowcopy._py_body_crcs(buf, rows, 0, 3) == want
    assert rowcopy._py_body_crcs(buf, rows, 1, 2) == want[1:2]
    assert rowcopy.body_crcs(buf, rows, 0, 3) == want
    assert rowcopy.body_crcs(buf, rows, 2, 3) == want[2:]


def test_gather_into_copies_the_bodies_from_pos_and_returns_their_end():
    buf, rows = _buf(b"abc", b"", b"defgh")
    assert rowcopy._py_gather_bodies(buf, rows, 0, 3) == b"abcdefgh"
    assert rowcopy._py_gather_bodies(buf, rows, 1, 3) == b"defgh"
    dst = bytearray(b"." * 12)
    assert rowcopy._py_gather_into(dst, 2, buf, rows, 0, 3) == 10
    assert dst == b"..abcdefgh.."
    dst = bytearray(b"." * 8)
    assert rowcopy._py_gather_into(dst, 0, buf, rows, 0, 3) == 8 and dst == b"abcdefgh"  # exactly fits
    dst = bytearray(b"." * 8)
    assert rowcopy._py_gather_into(dst, 8, buf, rows, 1, 2) == 8 and dst == b"." * 8  # nothing, at the end


@pytest.mark.parametrize("size,pos", [(7, 0), (10, 3), (8, -1), (8, 9)])
def test_gather_into_refuses_bodies_that_do_not_fit(size, pos):
    buf, rows = _buf(b"abc", b"defgh")
    dst = bytearray(b"." * size)
    with pytest.raises(ValueError) as err:
        rowcopy._py_gather_into(dst, pos, buf, rows, 0, 2)
    assert str(err.value) == "the bodies do not fit dst from pos"
    assert dst == b"." * size


def test_gather_into_at_pos_past_the_end_is_refused_even_for_no_bodies():
    buf, rows = _buf(b"abc")
    with pytest.raises(ValueError, match="do not fit"):
        rowcopy._py_gather_into(bytearray(4), 5, buf, rows, 0, 0)
    assert rowcopy._py_gather_into(bytearray(4), 4, buf, rows, 0, 0) == 4


@pytest.mark.parametrize("gather", ["python", "public"])
def test_gather_crc_into_extends_the_crc_over_the_bodies(gather):
    into = rowcopy._py_gather_crc_into if gather == "python" else rowcopy.gather_crc_into
    buf, rows = _buf(b"abc", b"", b"defgh")
    dst = bytearray(b"." * 12)
    assert into(dst, 1, buf, rows, 0, 3, crc32c(b"XY")) == (9, crc32c(b"XYabcdefgh"))
    assert dst == b".abcdefgh..."
    assert into(bytearray(8), 0, buf, rows, 2, 3, crc32c(b"")) == (5, crc32c(b"defgh"))
    assert into(bytearray(8), 0, buf, rows, 1, 1, 0xFFFFFFFF) == (0, 0xFFFFFFFF)  # no bodies: crc as given
    assert into(bytearray(8), 0, buf, rows, 0, 1, 0) == (3, crc32c(b"abc"))  # crc32c(b"") is 0


def test_gather_crc_into_combines_with_the_crc_given():
    buf, rows = _buf(b"abc", b"defgh")
    for before in (b"", b"\x00", b"some bytes before"):
        got = rowcopy._py_gather_crc_into(bytearray(8), 0, buf, rows, 0, 2, crc32c(before))
        assert got == (8, crc32c(before + b"abcdefgh"))
    assert rowcopy._py_gather_crc_into(bytearray(8), 0, buf, rows, 0, 2, 0xFFFFFFFF)[0] == 8


@pytest.mark.parametrize("crc", [-1, 1 << 32])
def test_gather_crc_into_refuses_a_crc_wider_than_32_bits(crc):
    buf, rows = _buf(b"abc")
    dst = bytearray(b"." * 4)
    with pytest.raises(ValueError) as err:
        rowcopy._py_gather_crc_into(dst, 0, buf, rows, 0, 1, crc)
    assert str(err.value) == "gather_crc_into: the crc is 32-bit"
    assert dst == b"...."  # refused before anything is copied


def test_the_public_calls_use_the_twins_without_the_extension(monkeypatch):
    buf, rows = _buf(b"abc", b"defgh")
    monkeypatch.setattr(rowcopy, "_native", None)
    assert rowcopy.body_crcs(buf, rows, 0, 2) == [crc32c(b"abc"), crc32c(b"defgh")]
    dst = bytearray(9)
    assert rowcopy.gather_crc_into(dst, 1, buf, rows, 0, 2, crc32c(b"Z")) == (9, crc32c(b"Zabcdefgh"))
    assert dst[1:] == b"abcdefgh"


def test_the_public_calls_use_the_extension_when_it_is_there(monkeypatch):
    calls = []

    class Fake:
        @staticmethod
        def body_crcs(*args):
            calls.append(("body_crcs", args))
            return struct.pack("=2I", 7, 0xFFFFFFFF)

        @staticmethod
        def gather_crc_into(*args):
            calls.append(("gather", args))
            return 11, 12

    monkeypatch.setattr(rowcopy, "_native", Fake)
    assert rowcopy.body_crcs(b"b", b"r", 1, 2) == [7, 0xFFFFFFFF]
    assert rowcopy.gather_crc_into(b"d", 3, b"b", b"r", 4, 5, 6) == (11, 12)
    assert calls == [("body_crcs", (b"b", b"r", 1, 2)), ("gather", (b"d", 3, b"b", b"r", 4, 5, 6))]
