"""wal/framing.py's batches, read by read (issue 32): a record a read cut is joined alone (the
rest of the read is handed out as it is), a read ending at a record's end carries nothing over,
and the last line's spans are whole."""

from __future__ import annotations

import struct

from walctl.wal import framing
from walctl.wal.framing import Framing


class _Reads:
    """A source whose read1 returns the given pieces, one a call."""

    def __init__(self, *pieces: bytes):
        self.pieces = list(pieces)

    def read1(self, n):
        return self.pieces.pop(0) if self.pieces else b""


def _batches(source, framing_: Framing) -> list[tuple[bytes, list[bytes]]]:
    """(the buffer, its records) per batch."""
    out = []
    for view, spans in framing.batches(source, framing_):
        out.append((bytes(view), [bytes(view[p:p + n]) for p, n in spans.pairs()]))
    return out


def _lp(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


def test_a_line_cut_by_a_read_is_joined_alone_up_to_the_next_newline():
    got = _batches(_Reads(b"ab", b"c\nd\ne\nf", b"g\n"), Framing.lines)
    assert got == [(b"abc\n", [b"abc"]),  # the carried line and its end only, not the read's other lines
                   (b"c\nd\ne\nf", [b"d", b"e"]),  # the read itself, from after the joined line
                   (b"fg\n", [b"fg"])]


def test_a_read_ending_at_a_record_s_end_carries_nothing_over():
    got = _batches(_Reads(b"a\n", b"b\nc\n"), Framing.lines)
    assert got == [(b"a\n", [b"a"]), (b"b\nc\n", [b"b", b"c"])]  # two reads, two buffers, no copy
    data = _lp(b"xy"), _lp(b"z", b"")
    got = _batches(_Reads(*data), Framing.length_prefixed)
    assert got == [(data[0], [b"xy"]), (data[1], [b"z", b""])]


def test_a_length_prefixed_record_cut_by_a_read_is_joined_alone():
    data = _lp(b"abcdef", b"gh", b"ij")
    got = _batches(_Reads(data[:7], data[7:]), Framing.length_prefixed)
    assert got == [(data[:10], [b"abcdef"]), (data[7:], [b"gh", b"ij"])]


def test_the_last_line_without_newline_has_spans_of_its_whole_length():
    batches = list(framing.batches(_Reads(b"one\ntw", b"o"), Framing.lines))
    assert [bytes(v) for v, _ in batches] == [b"one\ntw", b"two"]
    last = batches[-1][1]
    assert (last.pairs(), last.count, last.next_pos) == ([(0, 3)], 1, 3)
    first = batches[0][1]  # as split_lines answers: the incomplete line starts at next_pos
    assert (first.pairs(), first.next_pos) == ([(0, 3)], 4)
