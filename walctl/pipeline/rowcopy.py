"""Upload's per-record copies over a run of decoded records, one call a run (issue 19).

The rows are walctl.format.bulk.decode_records' (``bulk.ROW`` int64s each: offset, body_pos,
body_length, ...) over ``buf``, which holds each row's record: its 24-byte header, then its body.

    gather_into(dst, pos, buf, rows, first, stop) -> int: the bodies of rows [first, stop) written back
                                                          to back into dst from pos; where they end
    body_crcs(buf, rows, first, stop)     -> list[int]: each row's bodyCRC, read from its record header
    gather_crc_into(dst, pos, buf, rows, first, stop, crc) -> (int, int): gather_into, and ``crc`` (the
                                          crc32c of some bytes X) extended to crc32c(X + the bodies) from
                                          their bodyCRCs (combined: the bodies are not read again)
    crc32c_combine(crc_a, crc_b, length_b) -> int: crc32c(A + B) from crc32c(A), crc32c(B) and len(B)

In C (walctl.format._native) when it is built, else the pure Python twins below: same results
(tests/pipeline/test_rowcopy.py compares them). WALCTL_NO_NATIVE=1 forces the Python path.
"""

from __future__ import annotations

import os
import struct

from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.crc import crc32c_combine as _py_crc32c_combine

try:
    if os.environ.get("WALCTL_NO_NATIVE", "") not in ("", "0"):
        raise ImportError("WALCTL_NO_NATIVE is set")
    from walctl.format import _native

    if _native.ROW != bulk.ROW or not hasattr(_native, "gather_crc_into"):
        raise ImportError("a stale build of the extension")
except ImportError:
    _native = None

NATIVE = _native is not None
_ROW = bulk.ROW
_CRC_BACK = rec.SIZE - 16  # the bodyCRC field sits at byte 16 of the 24-byte record header
_CRC_AT = struct.Struct(">I").unpack_from


def _check(buf, rows, first: int, stop: int) -> list[tuple[int, int]]:
    """(body_pos, body_length) of rows [first, stop); ValueError as the C functions raise it."""
    rows = memoryview(rows)
    if rows.format != "q":
        rows = rows.cast("B").cast("q")
    if first < 0 or stop < first or stop > len(rows) // _ROW:
        raise ValueError("rows [first, stop) out of range")
    size = memoryview(buf).nbytes
    spans = list(zip(rows[first * _ROW + 1:stop * _ROW:_ROW].tolist(), rows[first * _ROW + 2:stop * _ROW:_ROW].tolist()))
    for pos, length in spans:
        if pos < rec.SIZE or length < 0 or pos > size or length > size - pos:
            raise ValueError("a row's record lies outside the buffer")
    return spans


def gather_into(dst, pos: int, buf, rows, first: int, stop: int) -> int:
    """The bodies of rows [first, stop), back to back, into the writable buffer ``dst`` from ``pos``
    (one copy; ValueError when they do not fit); returns where they end."""
    if _native is not None:
        return _native.gather_into(dst, pos, buf, rows, first, stop)
    return _py_gather_into(dst, pos, buf, rows, first, stop)


def body_crcs(buf, rows, first: int, stop: int) -> list[int]:
    """The bodyCRC field of each row's record header (the decoder checked it against the body)."""
    if _native is not None:
        return memoryview(_native.body_crcs(buf, rows, first, stop)).cast("I").tolist()
    return _py_body_crcs(buf, rows, first, stop)


def gather_crc_into(dst, pos: int, buf, rows, first: int, stop: int, crc: int) -> tuple[int, int]:
    """gather_into, and ``crc`` extended over the bodies copied: (where they end, crc32c(X + bodies))
    for ``crc`` = crc32c(X), from the rows' bodyCRCs (which the decoder checked against the bodies)."""
    if _native is not None:
        return _native.gather_crc_into(dst, pos, buf, rows, first, stop, crc)
    return _py_gather_crc_into(dst, pos, buf, rows, first, stop, crc)


def crc32c_combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """crc32c(A + B) from crc32c(A), crc32c(B) and len(B), without the bytes."""
    if _native is not None:
        return _native.crc32c_combine(crc_a, crc_b, length_b)
    return _py_crc32c_combine(crc_a, crc_b, length_b)


def _py_gather_crc_into(dst, pos: int, buf, rows, first: int, stop: int, crc: int) -> tuple[int, int]:
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError("gather_crc_into: the crc is 32-bit")
    end = _py_gather_into(dst, pos, buf, rows, first, stop)
    lengths = [length for _, length in _check(buf, rows, first, stop)]
    for body_crc, length in zip(_py_body_crcs(buf, rows, first, stop), lengths):
        crc = _py_crc32c_combine(crc, body_crc, length)
    return end, crc


def _py_gather_bodies(buf, rows, first: int, stop: int) -> bytes:
    spans = _check(buf, rows, first, stop)
    view = memoryview(buf)
    return b"".join(view[pos:pos + length] for pos, length in spans)


def _py_gather_into(dst, pos: int, buf, rows, first: int, stop: int) -> int:
    data = _py_gather_bodies(buf, rows, first, stop)
    out = memoryview(dst)
    if pos < 0 or pos > len(out) or len(data) > len(out) - pos:
        raise ValueError("the bodies do not fit dst from pos")
    out[pos:pos + len(data)] = data
    return pos + len(data)


def _py_body_crcs(buf, rows, first: int, stop: int) -> list[int]:
    return [_CRC_AT(buf, pos - _CRC_BACK)[0] for pos, _ in _check(buf, rows, first, stop)]

