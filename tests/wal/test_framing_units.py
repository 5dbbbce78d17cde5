"""wal/framing.py's edges (issue 32): --input's refusal, raw input, a reader without read1, the
last line without a newline, a prefix cut inside its 4 bytes, and the reads' size."""

from __future__ import annotations

import io
import struct
import sys

import pytest

from walctl.errors import UsageError
from walctl.wal import framing
from walctl.wal.framing import Framing


def test_open_input_is_stdin_a_file_or_a_usage_error(tmp_path, monkeypatch):
    stdin = io.TextIOWrapper(io.BytesIO(b"in"))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert framing.open_input("-") is stdin.buffer
    (tmp_path / "f").write_bytes(b"abc")
    with framing.open_input(str(tmp_path / "f")) as f:
        assert f.read() == b"abc" and f.mode == "rb"
    with pytest.raises(UsageError) as info:
        framing.open_input(str(tmp_path / "missing"))
    err = info.value
    assert (str(err), err.where, err.hint) == ("cannot read input file: No such file or directory",
                                               str(tmp_path / "missing"),
                                               "--input names a readable file, or '-' for standard input")
    assert isinstance(err.__cause__, OSError)


def test_raw_input_is_one_record_and_has_no_batches():
    assert [bytes(r) for r in framing.records(io.BytesIO(b"a\nb\n"), Framing.raw)] == [b"a\nb\n"]
    with pytest.raises(ValueError) as info:
        next(framing.batches(io.BytesIO(b"x"), Framing.raw))
    assert str(info.value) == "raw input is one record: use records()"
    assert [f.value for f in Framing] == ["lines", "length-prefixed", "raw"]


class _ReadOnly:
    """A source with read() only (no read1), returning at most ``most`` bytes a call."""

    def __init__(self, data: bytes, most: int):
        self.data, self.most, self.sizes = data, most, []

    def read(self, n):
        self.sizes.append(n)
        out, self.data = self.data[:min(n, self.most)], self.data[min(n, self.most):]
        return out


def test_lines_from_a_reader_without_read1_and_a_last_line_without_newline():
    src = _ReadOnly(b"one\ntwo\n\nthree", 3)
    assert [bytes(r) for r in framing.records(src, Framing.lines, chunk=64)] == [b"one", b"two", b"", b"three"]
    assert set(src.sizes) == {64}
    assert [bytes(r) for r in framing.records(_ReadOnly(b"", 5), Framing.lines)] == []
    assert [bytes(r) for r in framing.records(_ReadOnly(b"end\n", 5), Framing.lines)] == [b"end"]


def test_reads_are_a_mebibyte_by_default():
    src = _ReadOnly(b"a\n", 100)
    list(framing.records(src, Framing.lines))
    assert framing.CHUNK == 1 << 20 and src.sizes[0] == 1 << 20


@pytest.mark.parametrize("most", [1, 2, 3, 5])
def test_a_length_prefix_cut_inside_its_four_bytes(most):
    data = b"".join(struct.pack(">I", len(p)) + p for p in (b"ab", b"", b"cdefg", b"h" * 9))
    got = [bytes(r) for r in framing.records(_ReadOnly(data, most), Framing.length_prefixed, chunk=most)]
    assert got == [b"ab", b"", b"cdefg", b"h" * 9]


@pytest.mark.parametrize("tail, message", [
    (b"\x00\x00\x00", "truncated length prefix at input byte 6"),
    (b"\x00\x00\x00\x05abcd", "truncated record at input byte 6: length 5, got 4"),
    (b"\x00\x00\x00\x05", "truncated record at input byte 6: length 5, got 0"),
])
@pytest.mark.parametrize("most", [1, 4, 100])
def test_truncated_length_prefixed_input_names_its_byte(tail, message, most):
    data = struct.pack(">I", 2) + b"ok" + tail
    with pytest.raises(UsageError) as info:
        list(framing.records(_ReadOnly(data, most), Framing.length_prefixed, chunk=most))
    assert str(info.value) == message


def test_batches_hand_out_the_read_s_buffer_and_its_spans():
    data = b"".join(struct.pack(">I", len(p)) + p for p in (b"ab", b"cd", b"e"))
    out = [(bytes(view), spans.count) for view, spans in framing.batches(io.BytesIO(data), Framing.length_prefixed)]
    assert out == [(data, 3)]
