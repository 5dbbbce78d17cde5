"""Option values checked against the bounds of the format fields they end up in.

A value the format cannot hold must be refused before anything is written (exit 2,
naming the field and its bound), never acknowledged and then found "out of bounds" by
every later reader, and never left to ``struct.pack`` (exit 1). Each function takes the
option's name for the message and returns the value; ``walctl.options.bounds_callback`` adapts
one to a typer option's ``callback=``. The bounds are the decoders' (walctl.format): what a reader
accepts is exactly what these let through.
"""

from __future__ import annotations

import re

from walctl.errors import UsageError
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE
from walctl.sizes import plural

INT64_MAX = (1 << 63) - 1  # streamId, epoch, baseOffset: signed 64-bit (FORMATS.md 2)
UINT32_MAX = (1 << 32) - 1  # count, payloadLength, bodyLength: unsigned 32-bit
INT32_MAX = (1 << 31) - 1  # nodeId: signed 32-bit
# A batch covers [baseOffset, baseOffset + count): its end must stay a valid int64 too
# (StreamRecordBatch.decode refuses base + count >= 2^63).
OFFSET_END_LIMIT = 1 << 63


def check_range(value: int, option: str, field: str, low: int, high: int, rule: str | None = None) -> int:
    """``value`` if ``low <= value <= high``, else UsageError naming ``field``'s bound."""
    if not low <= value <= high:
        raise UsageError(f"{option} {value} is out of bounds: {field} must be {rule or f'{low}..{high}'}",
                         hint="the WAL format cannot hold it; nothing was written")
    return value


def stream_id(value: int, option: str = "--stream") -> int:
    """A streamId: StreamRecordBatch int64, >= 0."""
    return check_range(value, option, "StreamRecordBatch streamId (int64)", 0, INT64_MAX, "0..2^63-1")


def base_offset(value: int, count: int = 1, option: str = "--base-offset") -> int:
    """A baseOffset from which ``count`` offsets follow: every batch end stays below 2^63."""
    return check_range(value, option, f"StreamRecordBatch baseOffset (int64) with {plural(count, 'record')} after it",
                       0, OFFSET_END_LIMIT - 1 - max(count, 1),
                       f"0..2^63-1-{max(count, 1)} (the last batch's end offset, base + count, must be < 2^63)")


def stream_offset(value: int, option: str) -> int:
    """A stream offset (a batch boundary): 0..2^63-1."""
    return check_range(value, option, "a stream offset (int64)", 0, INT64_MAX, "0..2^63-1")


def record_payload(length: int, option: str = "record") -> int:
    """A payload that fits one record: payloadLength and the record's bodyLength are u32."""
    return check_range(length, option + " payload", "bytes (StreamRecordBatch payloadLength and the record's "
                       "bodyLength are u32)", 0, min(UINT32_MAX, rec.MAX_BODY_LENGTH) - BATCH_HEADER_SIZE,
                       f"at most 2^32-1-{BATCH_HEADER_SIZE}")


def node_id(value: int, option: str = "--node-id") -> int:
    """A WAL header nodeId: int32, -1 = none."""
    return check_range(value, option, "WAL header nodeId (int32)", -1, INT32_MAX, "-1..2^31-1")


_GAP = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*-\s*(\d+)\s*$")


def stream_gap(spec: str, option: str = "--accept-gap") -> tuple[int, int, int]:
    """``STREAM:FROM-TO`` -> (stream, from, to): stream offsets [from, to) of one stream, from < to."""
    match = _GAP.match(spec)
    if match is None:
        raise UsageError(f"{option} {spec!r} is not STREAM:FROM-TO", hint="for example 3:1-2 (stream 3, "
                         "offsets 1 up to 2, as 'walctl recover' and 'walctl status' print it)")
    sid, low, high = (int(g) for g in match.groups())
    stream_id(sid, option + " STREAM")
    stream_offset(low, option + " FROM")
    stream_offset(high, option + " TO")
    if low >= high:
        raise UsageError(f"{option} {spec!r}: FROM must be below TO", hint="the gap is offsets FROM up to TO")
    return sid, low, high

