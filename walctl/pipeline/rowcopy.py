"""Upload's per-record copies over a run of decoded records, one call a run (issue 19).

The rows are walctl.format.bulk.decode_records' (``bulk.ROW`` int64s each: offset, body_pos,
body_length, ...) over ``buf``, which holds each row's record: its 24-byte header, then its body.

    body_crcs(buf, rows, first, stop)     -> list[int]: each row's bodyCRC, read from its record header
    gather_crc_into(dst, pos, buf, rows, first, stop, crc) -> (int, int): the bodies of rows [first, stop)
                                          written back to back into dst from pos (where they end), and
                                          ``crc`` (the crc32c of some bytes X) extended to crc32c(X + the
                                          bodies) from their bodyCRCs (combined: not read again)

In C (walctl.format._native) when it is built, else the pure Python twins below: same results
(tests/pipeline/test_rowcopy.py compares them). WALCTL_NO_NATIVE=1 forces the Python path.
crc32c_combine itself is walctl.format.crc's (C when built, by the same rule).
"""

from __future__ import annotations

import struct

from walctl.format import bulk
from walctl.format import record as rec
from walctl.format.crc import _crc32c_combine_py

# The extension when walctl.format.bulk uses it (walctl.format.extension's rule, and bulk's row
# layout) and the build has this module's functions (one older than them: the twins).
_native = bulk._native if hasattr(bulk._native, "gather_crc_into") else None

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


def body_crcs(buf, rows, first: int, stop: int) -> list[int]:
    """The bodyCRC field of each row's record header (the decoder checked it against the body)."""
    if _native is not None:
        return memoryview(_native.body_crcs(buf, rows, first, stop)).cast("I").tolist()
    return _py_body_crcs(buf, rows, first, stop)


def gather_crc_into(dst, pos: int, buf, rows, first: int, stop: int, crc: int) -> tuple[int, int]:
    """The bodies of rows [first, stop), back to back, into the writable buffer ``dst`` from ``pos``
    (one copy; ValueError when they do not fit), and ``crc`` extended over them: (where they end,
    crc32c(X + bodies)) for ``crc`` = crc32c(X), from the rows' bodyCRCs (which the decoder checked
    against the bodies)."""
    if _native is not None:
        return _native.gather_crc_into(dst, pos, buf, rows, first, stop, crc)
    return _py_gather_crc_into(dst, pos, buf, rows, first, stop, crc)


def _py_gather_crc_into(dst, pos: int, buf, rows, first: int, stop: int, crc: int) -> tuple[int, int]:
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError("gather_crc_into: the crc is 32-bit")
    end = _py_gather_into(dst, pos, buf, rows, first, stop)
    lengths = [length for _, length in _check(buf, rows, first, stop)]
    for body_crc, length in zip(_py_body_crcs(buf, rows, first, stop), lengths):
        crc = _crc32c_combine_py(crc, body_crc, length)
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

