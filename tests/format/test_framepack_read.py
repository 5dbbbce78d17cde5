"""framepack.frame_read (issue 31): length-prefixed records read from a file straight into the
block give the bytes, acknowledgement text and stops frame_pack gives for the same records in a
buffer; what it leaves to the buffered path (the end, a cut record, max_records, a small payload)
it leaves untouched, at that record's file offset."""

from __future__ import annotations

import os
import random

import pytest

from walctl.format import framepack

pytestmark = pytest.mark.skipif(not framepack.DIRECT, reason="walctl.format._native is not built here")

SID, EPOCH = 7, 3


def framed(payloads) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@pytest.fixture
def infile(tmp_path):
    def make(data: bytes):
        path = tmp_path / "in.bin"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        opened.append(fd)
        return fd

    opened = []
    yield make
    for fd in opened:
        os.close(fd)


def both(fd, data, *, size=1 << 20, pos=0, limit=None, offset=4096, start=0, end=None, base=10, max_records=-1,
         max_payload=1 << 30, render=framepack.RENDER_JSON, min_payload=0):
    """(frame_read's result and out, frame_pack's result and out) for the same records."""
    limit = size if limit is None else limit
    end = len(data) if end is None else end
    a, b = bytearray(b"\xee" * size), bytearray(b"\xee" * size)
    ra = framepack.frame_read(a, pos, limit, offset, fd, start, end, min_payload, SID, EPOCH, base, max_records,
                              max_payload, render)
    rb = framepack.frame_pack(b, pos, limit, offset, data, start, len(data), False, SID, EPOCH, base, max_records,
                              max_payload, render)
    return ra, a, rb, b


@pytest.mark.parametrize("render", [framepack.RENDER_NONE, framepack.RENDER_OFFSETS, framepack.RENDER_JSON])
def test_the_same_bytes_and_acknowledgements_as_frame_pack(infile, render):
    rng = random.Random(render)
    payloads = [rng.randbytes(rng.randrange(0, 70000)) for _ in range(12)] + [b"", b"x"]
    data = framed(payloads)
    ra, a, rb, b = both(infile(data), data, size=2 << 20, render=render, pos=100)
    assert ra == rb and a == b
    assert ra[0] == len(payloads) and ra[2] == len(data) and ra[6] == framepack.STOP_INPUT and ra[7] == -1


def test_a_full_block_stops_both_at_the_same_record(infile):
    payloads = [bytes([i]) * 30000 for i in range(10)]
    data = framed(payloads)
    fd = infile(data)
    ra, a, rb, b = both(fd, data, limit=100000)
    assert ra == rb and a == b
    assert ra[0] == 3 and ra[6] == framepack.STOP_FULL and ra[7] == 30000
    # the next call goes on from where it stopped (the file offset), into another block
    ra, a, rb, b = both(fd, data, start=ra[2], base=13)
    assert ra == rb and a == b and ra[0] == 7


def test_a_payload_over_the_largest_stops_both(infile):
    data = framed([b"a" * 20000, b"b" * 20001, b"c"])
    ra, a, rb, b = both(infile(data), data, max_payload=20000)
    assert ra == rb and a == b
    assert ra[0] == 1 and ra[2] == 20004 and ra[6] == framepack.STOP_TOO_LARGE and ra[7] == 20001


def test_a_payload_of_the_largest_is_taken(infile):
    data = framed([b"a" * 20000])
    ra, a, rb, b = both(infile(data), data, max_payload=20000)
    assert ra == rb and a == b and ra[0] == 1


def test_no_block_only_learns_the_next_size(infile):
    data = framed([b"q" * 5000])
    ra = framepack.frame_read(bytearray(0), 0, 0, 0, infile(data), 0, len(data), 0, SID, EPOCH, 0, -1, 1 << 30, 2)
    assert ra == (0, 0, 0, 0, -1, b"", framepack.STOP_FULL, 5000)


def test_records_starting_at_or_after_end_are_left(infile):
    payloads = [b"a" * 100, b"b" * 100, b"c" * 100]
    data = framed(payloads)
    fd = infile(data)
    a = bytearray(1 << 16)
    r = framepack.frame_read(a, 0, len(a), 0, fd, 0, 105, 0, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[0] == 2 and r[2] == 208 and r[6] == framepack.STOP_INPUT  # the second starts at 104 < 105
    r = framepack.frame_read(a, 0, len(a), 0, fd, 0, 104, 0, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[0] == 1 and r[2] == 104
    r = framepack.frame_read(a, 0, len(a), 0, fd, 208, 208, 0, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[:3] == (0, 0, 208)


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 4 + 99])
def test_a_record_cut_by_the_files_end_is_left_at_its_start(infile, cut):
    data = framed([b"a" * 100, b"b" * 100])[:104 + cut]  # the second record starts at byte 104
    ra, a, rb, b = both(infile(data), data)
    assert ra[:2] == rb[:2] and ra[2] == 104 and ra[6] == framepack.STOP_INPUT
    # what was read of the cut record lies past out_pos: not booked, written over by the next packing
    assert a[:ra[1]] == b[:rb[1]] and ra[0] == 1


def test_max_records_is_left_to_the_buffered_path(infile):
    data = framed([b"a" * 100] * 4)
    ra, a, rb, b = both(infile(data), data, max_records=2)
    assert ra[:2] == rb[:2] and ra[2] == rb[2] == 208 and a == b
    assert ra[6] == framepack.STOP_INPUT and rb[6] == framepack.STOP_MAX
    ra, a, rb, b = both(infile(data), data, max_records=4)
    assert ra == rb and a == b and ra[0] == 4


def test_a_small_payload_is_left_to_the_buffered_path(infile):
    data = framed([b"a" * 100, b"b" * 99, b"c" * 100])
    fd = infile(data)
    a = bytearray(1 << 16)
    r = framepack.frame_read(a, 0, len(a), 0, fd, 0, len(data), 100, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[0] == 1 and r[2] == 104 and r[6] == framepack.STOP_INPUT
    r = framepack.frame_read(a, 0, len(a), 0, fd, 104, len(data), 99, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[0] == 2 and r[2] == len(data)


def test_a_bad_descriptor_is_left_to_the_buffered_path():
    a = bytearray(1 << 12)
    r = framepack.frame_read(a, 0, len(a), 0, 1 << 24, 0, 100, 0, SID, EPOCH, 0, -1, 1 << 30, 0)
    assert r[:3] == (0, 0, 0) and r[6] == framepack.STOP_INPUT


def test_the_direct_minimum():
    assert framepack.DIRECT_MIN_PAYLOAD == 16 << 10
