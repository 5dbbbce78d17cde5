"""Append's input framing and record packing in one C pass, and payloads rendered as text in bulk
(issue 31): walctl.format._native's frame_pack, hex_lines and base64_lines.

    frame_pack(out, pos, limit, offset, src, start, end, lines, stream_id, epoch, base, max_records,
               max_payload, render) -> (count, out_pos, src_pos, payload_bytes, last_offset, acks, stop, next_len)

packs the complete records of ``src[start:end]`` (lines, or 4-byte big-endian length + payload)
into ``out[pos:limit]`` as WAL data records carrying StreamRecordBatches: the same bytes as
walctl.format.bulk.split_* then pack_records(batch=...) (tests/format/test_framepack.py checks it
byte for byte). It exists only with the C extension (AVAILABLE); without it, append takes the
bulk path (walctl.wal.framing.batches + WalWriter.append_many).

    frame_read(out, pos, limit, offset, fd, start, end, min_payload, stream_id, epoch, base, max_records,
               max_payload, render) -> the same tuple (src_pos: the file offset reached)

packs length-prefixed records read from a regular file (pread from offset ``start``, records that
start before ``end``) with each payload read straight to its place in ``out`` and its CRC taken
there: no read buffer, no second copy (DIRECT). It stops as frame_pack at STOP_FULL and
STOP_TOO_LARGE, and returns STOP_INPUT at the first record it leaves to the buffered path (the
file's end, a short read, max_records reached, a payload under ``min_payload``: DIRECT_MIN_PAYLOAD).

    cpu_ns() -> int

the CPU time frame_pack's loops took so far in this process (append's feed_us.pack_c).

    hex_lines(buf, spans, first=0, stop=-1) / base64_lines(...) -> bytes

the payloads ``buf[pos:pos + len]`` of (pos, len) int64 spans, each encoded and ended by a
newline: what ``bytes.hex()`` / ``base64.b64encode()`` give, one call for many payloads
(a pure-Python twin when the C extension is missing).
"""

from __future__ import annotations

import binascii
import struct

from walctl.format.extension import load_native

_native = load_native()
AVAILABLE = _native is not None and hasattr(_native, "frame_pack")

DIRECT = AVAILABLE and hasattr(_native, "frame_read")
# frame_read's min_payload: smaller payloads are read through the buffer (a system call per record
# costs more than copying a small payload once more)
DIRECT_MIN_PAYLOAD = 16 << 10

# Why frame_pack stopped (its ``stop``), as _native.c numbers them.
STOP_INPUT = 0  # no complete record left in src[start:end]
STOP_FULL = 1  # the next record does not fit before ``limit`` (next_len: its payload length)
STOP_TOO_LARGE = 2  # the next record's payload is over max_payload (next_len: its length)
STOP_MAX = 3  # max_records packed and another record is there
# frame_pack's ``render``: the acknowledgement text it writes for each record packed.
RENDER_NONE, RENDER_OFFSETS, RENDER_JSON = 0, 1, 2


def frame_pack(*args):
    """See the module doc; AVAILABLE must be true."""
    return _native.frame_pack(*args)


if AVAILABLE:
    frame_pack = _native.frame_pack  # noqa: F811 - the C function itself: no Python call per block


if DIRECT:
    frame_read = _native.frame_read


def cpu_ns() -> int:
    """The CPU nanoseconds frame_pack's C loops took in this process so far (copying, CRC, headers,
    acknowledgement text: not the call's Python around them); 0 without the C extension."""
    if _native is None or not hasattr(_native, "frame_pack_cpu_ns"):
        return 0
    return _native.frame_pack_cpu_ns()


def _spans_list(spans, first: int, stop: int) -> list[tuple[int, int]]:
    flat = struct.unpack(f"={len(spans) // 8}q", bytes(spans))
    pairs = list(zip(flat[0::2], flat[1::2]))
    return pairs[first:stop if stop >= 0 else len(pairs)]


def hex_lines(buf, spans, first: int = 0, stop: int = -1) -> bytes:
    """Each span's bytes in lower-case hex, one per line (``spans``: native int64 (pos, len) pairs)."""
    if _native is not None and hasattr(_native, "hex_lines"):
        return _native.hex_lines(buf, spans, first, stop if stop >= 0 else 1 << 62)
    view = memoryview(buf)
    return b"".join(binascii.hexlify(view[p:p + n]) + b"\n" for p, n in _spans_list(spans, first, stop))


def base64_lines(buf, spans, first: int = 0, stop: int = -1) -> bytes:
    """Each span's bytes in standard base64 (padded), one per line."""
    if _native is not None and hasattr(_native, "base64_lines"):
        return _native.base64_lines(buf, spans, first, stop if stop >= 0 else 1 << 62)
    import base64  # the twin only (append, which imports this module, never encodes base64)

    view = memoryview(buf)
    return b"".join(base64.b64encode(view[p:p + n]) + b"\n" for p, n in _spans_list(spans, first, stop))


RECORD_LINE_MODES = {"hex": 0, "base64": 1, "text": 2}


def record_lines(buf, rows, first: int, stop: int, payload: str) -> bytes | None:
    """recover --json's NDJSON lines, payload included (``payload``: hex, base64 or text: UTF-8,
    invalid bytes as \\xNN, JSON-escaped as json.dumps does), of the decoded rows[first:stop]
    (walctl.format.bulk rows of StreamRecordBatch records) in one C call; None when that cannot
    be done (no C extension, or a row that is not an intact batch): the caller renders those
    records one by one."""
    if _native is None or not hasattr(_native, "record_lines"):
        return None
    return _native.record_lines(buf, rows, first, stop, RECORD_LINE_MODES[payload])
