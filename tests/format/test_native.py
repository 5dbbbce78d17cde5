"""walctl.format.bulk (issue 19): the C loops and their pure-Python twins give the same answers,
and both the answers of the one-record decoders (RecordHeader.decode, check_body,
StreamRecordBatch.decode) on the same bytes: same records, same stop, same exception."""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
import sys

import crc32c as crc32c_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.errors import (BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError,
                           ZeroedError)
from walctl.format import bulk
from walctl.format import crc
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch

NATIVE = bulk._native
needs_native = pytest.mark.skipif(NATIVE is None, reason="walctl.format._native is not built here "
                                  "(test_the_extension_is_built_where_a_compiler_is checks it is where cc exists)")


def both(fn, *args, **kwargs):
    """(native answer, pure-Python answer) of a bulk function."""
    saved = bulk._native
    try:
        native = fn(*args, **kwargs)
        bulk._native = None
        python = fn(*args, **kwargs)
    finally:
        bulk._native = saved
    return native, python


def test_the_extension_is_built_where_a_compiler_is():
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler on this machine: walctl runs its pure-Python loops")
    assert importlib.util.find_spec("walctl.format._native") is not None, \
        "pip install built walctl without walctl.format._native although a compiler is here"


def test_walctl_no_native_forces_the_python_loops():
    code = "from walctl.format import bulk; print(bulk.NATIVE, bulk.CRC_IMPL)"
    env = dict(os.environ, WALCTL_NO_NATIVE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False"


# ---- CRC-32C ---------------------------------------------------------------------------------

@needs_native
@pytest.mark.parametrize("impl", ["default", "soft"])
def test_crc32c_matches_the_crc32c_package(impl):
    """Every length around the C loop's 8-byte and 768-byte strides, at every alignment, chained."""
    code = """
import os, sys, crc32c
from walctl.format import _native
data = os.urandom(5000)
for start in range(8):
    for n in list(range(0, 40)) + [767, 768, 769, 1535, 1536, 1537, 2304 + 5, 4096, 4900]:
        piece = memoryview(data)[start:start + n]
        assert _native.crc32c(piece) == crc32c.crc32c(piece), (start, n)
        assert _native.crc32c(piece, 0xDEADBEEF) == crc32c.crc32c(piece, 0xDEADBEEF), (start, n)
big = os.urandom(3 << 20)
assert _native.crc32c(big) == crc32c.crc32c(big)
print(_native.CRC_IMPL)
"""
    env = dict(os.environ, WALCTL_NATIVE_CRC=impl)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if impl == "soft":
        assert out.stdout.strip() == "slicing-by-8"


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3000), value=st.integers(0, 0xFFFFFFFF))
def test_crc32c_random(data, value):
    assert NATIVE.crc32c(data, value) == crc32c_package.crc32c(data, value)


# ---- CRC-32C combine ---------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(a=st.binary(max_size=200), b=st.binary(max_size=5000), crcs=st.tuples(st.integers(0, 2**32 - 1),
       st.integers(0, 2**32 - 1)), length=st.integers(0, 2**50))
def test_crc32c_combine_twins_agree(a, b, crcs, length):
    """walctl.format.crc.crc32c_combine (the C one where built) and its pure-Python twin: the crc
    of the whole, and the same answer on any crcs and length."""
    for combine in (crc.crc32c_combine, crc._crc32c_combine_py):
        assert combine(crc.crc32c(a), crc.crc32c(b), len(b)) == crc.crc32c(a + b)
    assert crc.crc32c_combine(*crcs, length) == crc._crc32c_combine_py(*crcs, length)


@pytest.mark.parametrize("zeros", [(1 << 29) - 1, 1 << 29, (1 << 29) + 4097, 3 << 30, (1 << 32) + 7])
def test_crc32c_combine_past_512_mib_matches_the_bytes(zeros):
    """Lengths of 512 MiB and more (2^32 bits and more): zlib's table of x^(2^k) wraps k at 32,
    true for CRC-32's polynomial but not Castagnoli's; with the wrap both twins gave wrong crcs
    from 512 MiB on (SO compaction and force split combine whole data regions). The bytes here are
    ``head`` and then ``zeros`` zero bytes, their crc computed by reading them (1 MiB at a time)."""
    head = bytes(range(256)) * 3
    chunk = bytes(1 << 20)
    whole = crc.crc32c(head)
    tail = 0
    left = zeros
    while left:
        piece = chunk if left >= len(chunk) else chunk[:left]
        whole = crc.crc32c(piece, whole)
        tail = crc.crc32c(piece, tail)
        left -= len(piece)
    for combine in (crc.crc32c_combine, crc._crc32c_combine_py):
        assert combine(crc.crc32c(head), tail, zeros) == whole


def test_crc32c_combine_is_the_c_one_where_built_and_loads_it_on_first_use():
    """Importing walctl.format.crc loads neither bulk nor the extension (start-up); the first
    combine picks the C function when walctl runs its extension (walctl.format.extension's rule: built,
    WALCTL_NO_NATIVE unset), the twin under WALCTL_NO_NATIVE=1."""
    code = """
import sys
from walctl.format import crc
print("walctl.format.bulk" in sys.modules, "walctl.format._native" in sys.modules)
assert crc.crc32c_combine(crc.crc32c(b"ab"), crc.crc32c(b"c"), 1) == crc.crc32c(b"abc")
from walctl.format import bulk
print(crc._combine_impl() is crc._crc32c_combine_py, bulk.NATIVE)
"""
    built = importlib.util.find_spec("walctl.format._native") is not None
    for no_native in ("0", "1"):
        env = dict(os.environ, WALCTL_NO_NATIVE=no_native)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        native = no_native == "0" and built
        assert out.stdout.split() == ["False", "False", str(not native), str(native)]
    if NATIVE is not None:
        assert crc._combine_impl() is NATIVE.crc32c_combine


# ---- decode ----------------------------------------------------------------------------------

REASON_ERROR = {
    bulk.TRUNCATED_HEADER: TruncatedError, bulk.ZEROED: ZeroedError, bulk.BAD_MAGIC: BadMagicError,
    bulk.HEADER_CRC: ChecksumError, bulk.BAD_LENGTH: BoundsError, bulk.BAD_BODY_OFFSET: BoundsError,
    bulk.LOW_BODY_OFFSET: BoundsError, bulk.CROSSES_LAP: BoundsError, bulk.TRUNCATED_BODY: TruncatedError,
    bulk.BODY_CRC: ChecksumError,
}


def reference_decode(buf, base, start, end, lap_end, align):
    """The one-record decoders in the scan's order: (rows, stop pos, exception or None)."""
    view = memoryview(buf)[:end]
    rows, pos = [], start
    while pos < end:
        o = base + pos
        try:
            head = rec.RecordHeader.decode(view, pos, expected_offset=o)
            if 0 <= lap_end < head.end:
                raise BoundsError("crosses the lap", offset=pos + 4)
        except FormatError as exc:
            if align and o % align:
                boundary = pos + align - o % align
                if boundary <= end and not any(view[pos:boundary]):
                    pos = boundary
                    continue
            return rows, pos, exc
        if head.is_padding:
            rows.append((o, pos + rec.SIZE, head.body_length, bulk.KIND_PADDING, -1, -1, -1, -1))
            pos = head.end - base
            continue
        try:
            head.check_body(view[pos + rec.SIZE:], pos + rec.SIZE)
        except FormatError as exc:
            return rows, pos, exc
        body = bytes(view[pos + rec.SIZE:pos + rec.SIZE + head.body_length])
        try:
            b = StreamRecordBatch.decode(body, exact=True)
            rows.append((o, pos + rec.SIZE, head.body_length, bulk.KIND_BATCH, b.stream_id, b.epoch,
                         b.base_offset, b.count))
        except FormatError:
            rows.append((o, pos + rec.SIZE, head.body_length, bulk.KIND_DATA, -1, -1, -1, -1))
        pos = head.end - base
    return rows, pos, None


item = st.one_of(
    st.tuples(st.just("batch"), st.binary(max_size=200), st.integers(0, 5), st.integers(-1, 3),
              st.integers(0, 1 << 40), st.integers(1, 3)),
    st.tuples(st.just("raw"), st.binary(min_size=1, max_size=120)),
    # "almost a batch" (issue 32): an intact batch and extra bytes in one record body: data, not a batch
    st.tuples(st.just("almost"), st.binary(max_size=60), st.integers(0, 5), st.integers(1, 3),
              st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("pad"), st.integers(1, 100)),
    st.tuples(st.just("zeros"), st.integers(1, 70)),
)


def build(base, items) -> bytearray:
    buf = bytearray()
    for it in items:
        o = base + len(buf)
        if it[0] == "batch":
            _, payload, sid, epoch, bo, count = it
            buf += rec.encode_record(o, StreamRecordBatch(sid, epoch, bo, count, payload).encode())
        elif it[0] == "raw":
            buf += rec.encode_record(o, it[1])
        elif it[0] == "almost":
            _, payload, sid, count, extra = it
            buf += rec.encode_record(o, StreamRecordBatch(sid, 1, 0, count, payload).encode() + extra)
        elif it[0] == "pad":
            buf += rec.RecordHeader.padding(o, rec.SIZE + it[1]).encode() + bytes(it[1])
        else:
            buf += bytes(it[1])
    return buf


def check_decode(buf, base, start=0, end=None, lap_end=-1, align=0, max_records=-1):
    native, python = both(bulk.decode_records, buf, base, start=start, end=end, lap_end=lap_end, align=align,
                          max_records=max_records)
    if NATIVE is not None:
        assert native.tuples() == python.tuples()
        assert native.stop == python.stop
    stop_end = len(buf) if end is None else end
    rows, pos, exc = reference_decode(buf, base, start, stop_end, lap_end, align)
    got = python
    if 0 <= max_records <= len(rows):  # stopped right after the last row it may give
        after = rows[max_records - 1][1] + rows[max_records - 1][2] if max_records else start
        assert got.tuples() == rows[:max_records]
        assert (got.stop.reason, got.stop.pos) == (bulk.END if after >= stop_end else bulk.LIMIT, after)
        return got
    assert got.tuples() == rows
    assert got.stop.pos == pos and got.stop.offset == base + pos
    if exc is None:
        assert got.stop.reason == bulk.END and got.stop.error(buf, stop_end, lap_end) is None
    else:
        assert isinstance(exc, REASON_ERROR[got.stop.reason]), (got.stop.name, exc)
        err = got.stop.error(buf, stop_end, lap_end)
        assert type(err) is type(exc) and err.offset == exc.offset
        if got.stop.reason != bulk.CROSSES_LAP:  # the reference's own message there is shorter
            assert str(err) == str(exc)
        if isinstance(exc, ChecksumError):
            assert (got.stop.expected, got.stop.found) == (exc.expected, exc.found)
    return got


@settings(max_examples=400, deadline=None)
@given(items=st.lists(item, max_size=12), base=st.integers(0, 1 << 44),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=2),
       cut=st.integers(0, 30), align=st.sampled_from([0, 0, 64, 4096]), lap_cut=st.integers(-1, 200),
       max_records=st.sampled_from([-1, -1, 0, 1, 3]))
def test_decode_matches_the_one_record_decoders(items, base, flips, cut, align, lap_cut, max_records):
    buf = build(base, items)
    for where, value in flips:
        if buf:
            buf[int(where * len(buf))] = value
    end = max(len(buf) - cut, 0)
    lap_end = -1 if lap_cut < 0 else base + max(len(buf) - lap_cut, 0)
    check_decode(bytes(buf), base, end=end, lap_end=lap_end, align=align, max_records=max_records)


def test_decode_of_an_intact_block_returns_every_record_and_its_batch():
    base = 4096 * 7
    payloads = [bytes([i]) * (i * 37 % 500) for i in range(200)]
    buf = bytearray(1 << 16)
    count, end = bulk.pack_records(buf, 0, len(buf), base, payloads, batch=(9, 2, 1000))
    assert count == len(payloads)
    got = check_decode(bytes(buf[:end]), base)
    assert got.count == 200 and got.stop.reason == bulk.END and got.stop.pos == end
    rows = got.tuples()
    assert [r[3] for r in rows] == [bulk.KIND_BATCH] * 200
    assert [r[4:] for r in rows] == [(9, 2, 1000 + i, 1) for i in range(200)]
    assert [bytes(buf[r[1] + 33:r[1] + r[2]]) for r in rows] == payloads


def test_zero_padding_between_blocks_is_skipped_only_with_align():
    base = 4096
    block = bytearray(8192)
    _, end = bulk.pack_records(block, 0, 4096, base, [b"a" * 100, b"b" * 100])
    bulk.pack_records(block, 4096, 8192, base + 4096, [b"c" * 100])
    without = check_decode(bytes(block), base)
    assert without.count == 2 and without.stop.reason == bulk.ZEROED and without.stop.pos == end
    with_align = check_decode(bytes(block), base, align=4096)
    assert with_align.count == 3 and with_align.stop.reason == bulk.END and with_align.stop.pos == 8192
    block[5000] = 1  # damage inside the padding: a torn block, not padding
    torn = check_decode(bytes(block), base, align=4096)
    assert torn.count == 3 and torn.stop.reason == bulk.ZEROED and torn.stop.pos == 4096 + 124
    block[4096 + 126] = 7
    torn = check_decode(bytes(block), base, align=4096)
    assert torn.count == 3 and torn.stop.reason == bulk.BAD_MAGIC and torn.stop.pos == 4096 + 124


@pytest.mark.parametrize("damage, reason", [
    (lambda b: b.__setitem__(0, 0x11), bulk.BAD_MAGIC),
    (lambda b: b.__setitem__(10, b[10] ^ 1), bulk.HEADER_CRC),
    (lambda b: b.__setitem__(30, b[30] ^ 1), bulk.BODY_CRC),
    (lambda b: b.__setitem__(slice(0, 24), bytes(24)), bulk.ZEROED),
])
def test_each_damage_names_its_check(damage, reason):
    buf = bytearray(rec.encode_record(24, b"x" * 40))
    damage(buf)
    got = check_decode(bytes(buf), 24)
    assert got.count == 0 and got.stop.reason == reason


@pytest.mark.parametrize("extra", [1, 2, 33, 500])
def test_a_batch_followed_by_extra_bytes_is_data_not_a_batch(extra):
    """"Almost a batch" (issue 32): a record body holding an intact StreamRecordBatch and ``extra``
    bytes more is a data record in all three decoders (native, twin, reference), not a batch:
    StreamRecordBatch.decode(exact=True) refuses it, so payloadLength must equal bodyLength - 33."""
    batch = StreamRecordBatch(7, 3, 100, 5, b"p" * 40).encode()
    buf = rec.encode_record(4096, batch + b"\x22" * extra) + rec.encode_record(4096 + 24 + len(batch) + extra, batch)
    got = check_decode(buf, 4096)
    rows = got.tuples()
    assert got.stop.reason == bulk.END and [r[3] for r in rows] == [bulk.KIND_DATA, bulk.KIND_BATCH]
    assert rows[0][4:] == (-1, -1, -1, -1) and rows[1][4:] == (7, 3, 100, 5)
    assert rows[0][2] == len(batch) + extra
    # a body one byte short of its batch's payloadLength is not a batch either
    short = rec.encode_record(0, batch[:-1])
    assert [r[3] for r in check_decode(short, 0).tuples()] == [bulk.KIND_DATA]


def test_a_record_of_another_lap_is_refused():
    buf = rec.encode_record(1 << 30, b"old")  # written at offset 2^30: read back at offset 0
    got = check_decode(buf, 0)
    assert got.stop.reason == bulk.BAD_BODY_OFFSET and (got.stop.expected, got.stop.found) == (24, (1 << 30) + 24)


# ---- encode ----------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=40), offset=st.integers(0, 1 << 40),
       limit=st.integers(0, 6000), pos=st.integers(0, 100), index=st.integers(0, 5),
       batch=st.one_of(st.none(), st.tuples(st.integers(0, 1 << 62), st.integers(-1, 1 << 62),
                                            st.integers(0, 1 << 61))))
def test_pack_matches_the_one_record_encoders(payloads, offset, limit, pos, index, batch):
    if batch is None:
        payloads = [p or b"-" for p in payloads]  # a record body is never empty
    outs = [bytearray(b"\xaa" * 6000), bytearray(b"\xaa" * 6000)]
    saved = bulk._native
    try:
        results = [bulk.pack_records(outs[0], pos, limit, offset, payloads, index=index, batch=batch)]
        bulk._native = None
        results.append(bulk.pack_records(outs[1], pos, limit, offset, payloads, index=index, batch=batch))
    finally:
        bulk._native = saved
    assert results[0] == results[1] and outs[0] == outs[1]
    count, end = results[1]
    expected, o = b"", offset
    for i, p in enumerate(payloads[index:index + count]):
        body = p if batch is None else StreamRecordBatch(batch[0], batch[1], batch[2] + i, 1, p).encode()
        expected += rec.encode_record(o, body)
        o += rec.SIZE + len(body)
    assert bytes(outs[1][pos:end]) == expected
    assert outs[1][:pos] == b"\xaa" * pos and outs[1][end:] == b"\xaa" * (6000 - end)  # nothing else touched
    rest = payloads[index + count:]
    if rest:  # it stopped because the next record would pass the limit
        nxt = rec.SIZE + len(rest[0]) + (33 if batch is not None else 0)
        assert end + nxt > min(limit, 6000)


def test_pack_refuses_an_empty_body_in_both():
    for impl in both(lambda: _pack_error([b"ok", b""])):
        assert impl == "record body of 0 bytes out of bounds (1 .. 2^32 - 1)"


def _pack_error(bodies):
    try:
        bulk.pack_records(bytearray(100), 0, 100, 0, bodies)
    except ValueError as exc:
        return str(exc)
    return None


# ---- input framing ---------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(payloads=st.lists(st.binary(max_size=100), max_size=30), cut=st.integers(0, 5), start=st.integers(0, 3),
       max_records=st.sampled_from([-1, 0, 2]))
def test_split_length_prefixed(payloads, cut, start, max_records):
    data = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    data = bytes(start) + data[:len(data) - cut] if cut < len(data) else bytes(start)
    native, python = both(bulk.split_length_prefixed, data, start, max_records)
    assert native.pairs() == python.pairs() and native.next_pos == python.next_pos
    expected, pos = [], start
    while len(data) - pos >= 4 and (max_records < 0 or len(expected) < max_records):
        n = int.from_bytes(data[pos:pos + 4], "big")
        if pos + 4 + n > len(data):
            break
        expected.append((pos + 4, n))
        pos += 4 + n
    assert python.pairs() == expected and python.next_pos == pos
    if cut == 0 and max_records < 0:
        assert [data[p:p + n] for p, n in expected] == payloads and pos == len(data)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200).map(lambda b: b.replace(b"\x01", b"\n")), start=st.integers(0, 5),
       max_records=st.sampled_from([-1, 0, 2]))
def test_split_lines(data, start, max_records):
    start = min(start, len(data))
    native, python = both(bulk.split_lines, data, start, max_records)
    assert native.pairs() == python.pairs() and native.next_pos == python.next_pos
    lines = data[start:].split(b"\n")[:-1]
    if max_records >= 0:
        lines = lines[:max_records]
    assert [data[p:p + n] for p, n in python.pairs()] == lines
    assert python.next_pos == start + sum(len(line) + 1 for line in lines)


# ---- rows summary (recover's scan) -------------------------------------------------------------

_int64 = st.integers(-(1 << 63), (1 << 63) - 1)
_row = st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 40), st.integers(0, 1 << 32), st.sampled_from([0, 1, 2]),
                 st.sampled_from([-1, 0, 7]), _int64, st.one_of(st.integers(-1, 50), _int64), st.integers(-1, 5))


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=30), data=st.data(), follow=st.booleans())
def test_rows_summary_matches_its_twin_and_the_rows(rows, data, follow):
    if follow:  # chain the base offsets, as one stream's batches are
        rows = [r[:6] + (rows[0][6] + sum(x[7] for x in rows[:i]),) + r[7:] for i, r in enumerate(rows)]
    first = data.draw(st.integers(0, len(rows) - 1))
    stop = data.draw(st.integers(first + 1, len(rows)))
    buf = bulk._int64s(struct.pack(f"={len(rows) * bulk.ROW}q", *[bulk._wrap64(v) for r in rows for v in r]))
    native, python = both(bulk.rows_summary, buf, first, stop)
    if NATIVE is not None and bulk._native_rows_summary is not None:
        assert native == python
    part = rows[first:stop]
    assert python == (all(r[3] == bulk.KIND_BATCH for r in part), len({r[4] for r in part}) == 1, part[0][4],
                      all(bulk._wrap64(part[i][6]) == bulk._wrap64(part[i - 1][6] + part[i - 1][7])
                          for i in range(1, len(part))),
                      sum(r[2] for r in part))


def test_rows_summary_refuses_an_empty_or_outside_range():
    buf = bulk._int64s(bytes(8 * bulk.ROW * 2))
    for first, stop in ((0, 0), (1, 1), (-1, 1), (0, 3), (2, 1)):
        for answer in both(lambda *a: pytest.raises(ValueError, bulk.rows_summary, *a), buf, first, stop):
            assert "rows_summary" in str(answer.value)


# ---- the twins on inputs the property tests rarely draw (issue 32, survivors of bulk.py) -------
# several lines at once, a memoryview, the defaults, and the record body's size limit (checked
# before any byte is copied, so a stand-in of 4 GiB is enough)

LINES = b"a\nbb\n\nccc\nrest"


def test_split_lines_gives_every_line_in_both():
    for got in both(bulk.split_lines, LINES):
        assert (got.pairs(), got.next_pos, got.count) == ([(0, 1), (2, 2), (5, 0), (6, 3)], 10, 4)
    for got in both(bulk.split_lines, memoryview(LINES), 2, 3):
        assert (got.pairs(), got.next_pos) == ([(2, 2), (5, 0), (6, 3)], 10)
    for got in both(bulk.split_lines, bytearray(LINES), 0, 2):
        assert (got.pairs(), got.next_pos) == ([(0, 1), (2, 2)], 5)
    for got in both(bulk.split_lines, b"no newline"):
        assert (got.pairs(), got.next_pos) == ([], 0)


def test_split_length_prefixed_defaults_in_both():
    data = b"\0\0\0\2ab\0\0\0\0\0\0\0\3xyz\0\0\0\5ab"
    for got in both(bulk.split_length_prefixed, data):
        assert (got.pairs(), got.next_pos) == ([(4, 2), (10, 0), (14, 3)], 17)
    for got in both(bulk.split_length_prefixed, memoryview(data), 0, 1):
        assert (got.pairs(), got.next_pos) == ([(4, 2)], 6)


class Huge:
    """A body that says it holds ``n`` bytes: the size check comes before any byte is read."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_pack_takes_a_body_of_2_32_minus_1_bytes_and_refuses_one_more():
    out = bytearray(100)
    assert bulk._py_pack(out, 0, 100, 0, [Huge(0xFFFFFFFF)], 0, None) == (0, 0)  # fits no buffer: not packed
    assert bulk._py_pack(out, 0, 100, 0, [Huge(0xFFFFFFFF - 33)], 0, (1, 0, 0)) == (0, 0)  # with its batch header
    with pytest.raises(ValueError) as info:
        bulk._py_pack(out, 0, 100, 0, [Huge(0xFFFFFFFF + 1)], 0, None)
    assert str(info.value) == "record body of 4294967296 bytes out of bounds (1 .. 2^32 - 1)"
    with pytest.raises(ValueError):
        bulk._py_pack(out, 0, 100, 0, [Huge(0xFFFFFFFF - 32)], 0, (1, 0, 0))


def test_bulk_crc32c_is_the_crc32c_in_both():
    for got in both(bulk.crc32c, b"123456789"):
        assert got == 0xE3069283
    for got in both(bulk.crc32c, b"6789", crc.crc32c(b"12345")):
        assert got == 0xE3069283


def test_spans_of_pairs():
    spans = bulk.Spans.of([(0, 5), (7, 0), (9, 3)], 12)
    assert (spans.pairs(), spans.count, spans.next_pos) == ([(0, 5), (7, 0), (9, 3)], 3, 12)
    assert spans.spans.format == "q" and list(spans.spans) == [0, 5, 7, 0, 9, 3]
    empty = bulk.Spans.of([], 4)
    assert (empty.pairs(), empty.count, empty.next_pos) == ([], 0, 4)


def test_decode_limits_and_ends_in_both():
    buf = rec.encode_record(0, b"abc") + rec.encode_record(27, b"defg") + rec.encode_record(55, b"h")
    for got in both(bulk.decode_records, buf, 0, max_records=0):
        assert (got.count, got.stop.reason, got.stop.pos) == (0, bulk.LIMIT, 0)
    for got in both(bulk.decode_records, buf, 0, max_records=1):
        assert (got.count, got.stop.reason, got.stop.pos) == (1, bulk.LIMIT, 27)
    for got in both(bulk.decode_records, buf, 0, end=0):
        assert (got.count, got.stop.reason, got.stop.pos) == (0, bulk.END, 0)
    for got in both(bulk.decode_records, buf, 0, end=-1):  # negative: the whole buffer
        assert (got.count, got.stop.reason, got.stop.pos) == (3, bulk.END, len(buf))
    for got in both(bulk.decode_records, buf, 0, end=20):  # a header cut at 20: its 20 bytes found
        assert (got.count, got.stop.reason, got.stop.expected, got.stop.found) == (0, bulk.TRUNCATED_HEADER, 24, 20)
    for message in both(lambda: pytest.raises(ValueError, bulk.decode_records, buf, 0, start=5, end=3)):
        assert str(message.value) == "start must lie in [0, end]"


def test_split_length_prefixed_takes_an_empty_record_in_the_last_4_bytes():
    for got in both(bulk.split_length_prefixed, b"\0\0\0\0"):
        assert (got.pairs(), got.next_pos) == ([(4, 0)], 4)
    for got in both(bulk.split_length_prefixed, b"\0\0\0"):
        assert (got.pairs(), got.next_pos) == ([], 0)
