"""walctl.pipeline.rowcopy: the C functions and their pure-Python twins give the same results (and the
crcs combined from the records' bodyCRCs are the crcs of the bytes copied)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.crc import crc32c
from walctl.pipeline import rowcopy


def _log(bodies: list[bytes], gap: int) -> tuple[bytes, memoryview, int]:
    """Records packed back to back (``gap`` zero bytes before the first); their decoded rows."""
    buf = bytearray(gap)
    offset = 0
    for body in bodies:
        buf += rec.encode_record(offset, body)
        offset += rec.SIZE + len(body)
    found = bulk.decode_records(bytes(buf), -gap, start=gap)
    assert found.count == len(bodies)
    return bytes(buf), found.rows, found.count


bodies_st = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=30)


def _gather_case(bodies, gap, data):
    """A log of ``bodies``, a drawn row range [first, stop), its bodies back to back, a drawn
    position in two equal destination buffers with room to spare."""
    buf, rows, n = _log(bodies, gap)
    first = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(first, n))
    gathered = b"".join(bodies[first:stop])
    pos = data.draw(st.integers(0, 20))
    room = pos + len(gathered) + data.draw(st.integers(0, 5))
    return buf, rows, first, stop, gathered, pos, bytearray(b"\xee" * room), bytearray(b"\xee" * room)


@pytest.mark.skipif(not rowcopy.NATIVE, reason="the C extension is not built here")
@settings(max_examples=200, deadline=None)
@given(bodies=bodies_st, gap=st.integers(0, 50), data=st.data())
def test_body_crcs_twins_agree(bodies, gap, data):
    buf, rows, first, stop, *_ = _gather_case(bodies, gap, data)
    crcs = rowcopy.body_crcs(buf, rows, first, stop)
    assert crcs == rowcopy._py_body_crcs(buf, rows, first, stop)
    assert crcs == [rec.RecordHeader.decode(rec.encode_record(0, b)[:rec.SIZE]).body_crc for b in bodies[first:stop]]


@pytest.mark.parametrize("twin", ["native", "python"])
def test_rows_outside_the_buffer_are_refused(twin):
    if twin == "native" and not rowcopy.NATIVE:
        pytest.skip("the C extension is not built here")
    crcs = rowcopy.body_crcs if twin == "native" else rowcopy._py_body_crcs
    buf, rows, n = _log([StreamRecordBatch(1, 0, 0, 1, b"abc").encode()], 0)
    with pytest.raises(ValueError, match="out of range"):
        crcs(buf, rows, 1, 0)
    with pytest.raises(ValueError, match="outside the buffer"):
        crcs(buf[:-1], rows, 0, n)  # the body runs past the buffer's end
    bad = memoryview(bytearray(rows.cast("B"))).cast("q")
    bad[1] = 3  # a body that would start inside its own record header
    with pytest.raises(ValueError, match="outside the buffer"):
        crcs(buf, bad, 0, 1)


def test_walctl_no_native_uses_the_twins():
    code = "from walctl.pipeline import rowcopy; print(rowcopy.NATIVE)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "WALCTL_NO_NATIVE": "1"}).stdout
    assert out.strip() == "False"


@pytest.mark.skipif(not rowcopy.NATIVE, reason="the C extension is not built here")
@settings(max_examples=200, deadline=None)
@given(bodies=bodies_st, gap=st.integers(0, 50), before=st.binary(max_size=40), data=st.data())
def test_gather_crc_into_twins_agree_and_give_the_crc_of_the_bytes(bodies, gap, before, data):
    buf, rows, first, stop, gathered, pos, dst, twin = _gather_case(bodies, gap, data)
    got = rowcopy.gather_crc_into(dst, pos, buf, rows, first, stop, crc32c(before))
    assert got == rowcopy._py_gather_crc_into(twin, pos, buf, rows, first, stop, crc32c(before))
    assert got == (pos + len(gathered), crc32c(before + gathered))  # the copy's crc, as if read again
    assert dst == twin and dst[pos:pos + len(gathered)] == gathered


@pytest.mark.parametrize("twin", ["native", "python"])
def test_gather_crc_into_refuses_rows_outside_the_buffer_no_room_and_wide_crcs(twin):
    if twin == "native" and not rowcopy.NATIVE:
        pytest.skip("the C extension is not built here")
    into = rowcopy._native.gather_crc_into if twin == "native" else rowcopy._py_gather_crc_into
    buf, rows, n = _log([StreamRecordBatch(1, 0, 0, 1, b"abc").encode()], 0)
    with pytest.raises(ValueError, match="out of range"):
        into(bytearray(100), 0, buf, rows, 0, n + 1, 0)
    with pytest.raises(ValueError, match="outside the buffer"):
        into(bytearray(100), 0, buf[:-1], rows, 0, n, 0)  # the body runs past the buffer's end
    with pytest.raises(ValueError, match="do not fit"):
        into(bytearray(len(buf) - rec.SIZE), 2, buf, rows, 0, n, 0)  # room for all but 2 bytes
    with pytest.raises(ValueError, match="32-bit"):
        into(bytearray(100), 0, buf, rows, 0, n, 1 << 32)
