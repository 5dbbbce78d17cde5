"""The record format's per-record loops over whole buffers: decode, encode, input framing (issue 19).

Each function does in one call what record.py and batch.py do one record at a time, with the
same checks in the same order, so a WAL block or a megabyte of input costs one call, not one
Python step per record. The work runs in walctl.format._native (C, built by ``pip install``
when a compiler is there) or, when that is missing or WALCTL_NO_NATIVE=1 is set, in the pure
Python twins below: same results, slower. ``NATIVE`` says which one runs.

    decode_records(buf, base_offset, ...)  -> Decoded: rows (offset, body_pos, length, kind, batch fields) + Stop
    pack_records(buf, pos, limit, offset, bodies, ...) -> (count, end_pos): records packed back to back
    split_length_prefixed(buf, start)      -> Spans: (pos, length) of each complete length-prefixed record
    split_lines(buf, start)                -> Spans: (pos, length) of each newline-terminated line
    crc32c(data, value=0)                  -> int: the same CRC-32C as walctl.format.crc.crc32c
    rows_summary(rows, first, stop)        -> (all_batch, one_stream, stream_id, follows, body_bytes) of decoded rows

Rows and spans are flat int64 memoryviews (``ROW`` and 2 values per item): indexing them
costs no object per record until the caller asks for one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError, ZeroedError
from walctl.format import batch as batch_format
from walctl.format import record as rec
from walctl.format.crc import crc32c as _py_crc32c
from walctl.format.extension import load_native

_native = load_native()

NATIVE = _native is not None
CRC_IMPL = _native.CRC_IMPL if _native is not None else "crc32c package"

# A decoded row: offset, body_pos, body_length, kind, stream_id, epoch, base_offset, count.
ROW = 8
KIND_BATCH = 0  # a data record whose body is an intact StreamRecordBatch (batch fields filled)
KIND_DATA = 1  # a data record whose body is not one (or batches=False): batch fields -1
KIND_PADDING = 2  # a padding record: its body is neither read nor checked

# Why decode_records stopped. END: the buffer's end (or `end`) reached between records.
END, TRUNCATED_HEADER, ZEROED, BAD_MAGIC, HEADER_CRC, BAD_LENGTH, BAD_BODY_OFFSET, LOW_BODY_OFFSET, \
    CROSSES_LAP, TRUNCATED_BODY, BODY_CRC, LIMIT = range(12)
REASONS = ("end", "truncated header", "zeroed header", "bad magic", "header crc mismatch", "bodyLength 0",
           "bodyOffset not the record's", "bodyOffset below 24", "record crosses the lap end",
           "truncated body", "body crc mismatch", "max_records reached")

if _native is not None and _native.ROW != ROW:  # a stale build of another layout: do without it
    _native, NATIVE, CRC_IMPL = None, False, "crc32c package"


@dataclass(frozen=True)
class Stop:
    """Where and why decode_records stopped: ``pos`` is the buffer position of the record that
    failed (or where the next would start); ``expected``/``found`` the values of the failed check."""

    reason: int
    pos: int
    offset: int  # logical offset of pos
    expected: int = 0
    found: int = 0

    @property
    def name(self) -> str:
        return REASONS[self.reason]

    @property
    def clean(self) -> bool:
        """Stopped at the end of the buffer or the row limit, not at a bad record."""
        return self.reason in (END, LIMIT)

    def error(self, buf, end: int | None = None, lap_end: int = -1) -> FormatError | None:
        """The exception the one-record decoders raise for this record (None when clean):
        RecordHeader.decode(buf, pos, expected_offset=offset), the scan's lap check, then
        RecordHeader.check_body; positions are buf's, as theirs are."""
        if self.clean:
            return None
        view = memoryview(buf)[:len(buf) if end is None else end]
        try:
            head = rec.RecordHeader.decode(view, self.pos, expected_offset=self.offset)
            if 0 <= lap_end < head.end:
                raise BoundsError(f"record end {head.end} crosses the end of the lap at {lap_end}",
                                  offset=self.pos + 4, found=head.end)
            head.check_body(view[self.pos + rec.SIZE:], self.pos + rec.SIZE)
        except FormatError as exc:
            return exc
        raise AssertionError(f"decode_records stopped ({self.name}) at {self.pos} but the record decodes")


@dataclass(frozen=True)
class Decoded:
    """decode_records' answer: ``rows`` (ROW int64 per record) and where it stopped."""

    rows: memoryview
    count: int
    stop: Stop

    def __len__(self) -> int:
        return self.count

    def row(self, i: int) -> tuple[int, ...]:
        return tuple(self.rows[i * ROW:(i + 1) * ROW])

    def tuples(self) -> list[tuple[int, ...]]:
        return [self.row(i) for i in range(self.count)]


@dataclass(frozen=True)
class Spans:
    """split_*'s answer: ``spans`` holds (pos, length) pairs; ``next_pos`` is where the first
    incomplete item starts (the caller keeps the bytes from there)."""

    spans: memoryview
    count: int
    next_pos: int

    @classmethod
    def of(cls, pairs, next_pos: int) -> "Spans":
        flat = [v for pair in pairs for v in pair]
        return cls(_int64s(struct.pack(f"={len(flat)}q", *flat)), len(flat) // 2, next_pos)

    def pairs(self) -> list[tuple[int, int]]:
        s = self.spans
        return [(s[2 * i], s[2 * i + 1]) for i in range(self.count)]


def _int64s(data: bytes) -> memoryview:
    return memoryview(data).cast("q")


# ---- decode -----------------------------------------------------------------------------------


def decode_records(buf, base_offset: int, *, start: int = 0, end: int | None = None, lap_end: int = -1,
                   align: int = 0, max_records: int = -1, batches: bool = True) -> Decoded:
    """Decode the records of ``buf[start:end]``, whose byte 0 sits at logical ``base_offset``.

    Per record, RecordHeader.decode(expected_offset=its offset)'s checks in their order
    (truncated, all-zero, magic, header crc, bodyLength > 0, bodyOffset), then its end against
    ``lap_end`` (when >= 0), then for a data record check_body's (truncated, crc); with
    ``batches`` the body's StreamRecordBatch.decode(exact=True) checks fill the batch fields.
    Stops at the first record failing a check, at ``end``, or after ``max_records`` rows.
    ``align`` > 0: a failing header at an offset not a multiple of ``align`` with zeros up to
    the next multiple (in the buffer) is a block's zero padding, skipped without a row.
    """
    stop_at = len(buf) if end is None or end < 0 or end > len(buf) else end
    if not 0 <= start <= stop_at:
        raise ValueError("start must lie in [0, end]")
    if _native is not None:
        data, count, reason, pos, expected, found = _native.decode_records(
            buf, base_offset, start, stop_at, lap_end, align, max_records, batches)
        rows = _int64s(data)
    else:
        values: list[int] = []
        reason, pos, expected, found = _py_decode(buf, base_offset, start, stop_at, lap_end, align, max_records,
                                                  batches, values)
        rows = _int64s(struct.pack(f"={len(values)}q", *values))
        count = len(values) // ROW
    return Decoded(rows, count, Stop(reason, pos, base_offset + pos, expected, found))


_BATCH = batch_format.STRUCT.unpack_from


def _header_failure(view, pos: int, end: int, o: int, lap_end: int):
    """(reason, expected, found, header) of the header at pos: RecordHeader.decode's checks (the one
    Python record decoder, the spec the C decoder is tested against) as decode_records' reasons,
    then the lap check. The header is None when a check failed."""
    try:
        head = rec.RecordHeader.decode(view[:end], pos, expected_offset=o)
    except TruncatedError:
        return TRUNCATED_HEADER, rec.SIZE, end - pos, None
    except ZeroedError:
        return ZEROED, 0, 0, None
    except BadMagicError as exc:
        return BAD_MAGIC, exc.expected, exc.found, None
    except ChecksumError as exc:
        return HEADER_CRC, exc.expected, exc.found, None
    except BoundsError as exc:
        if exc.field == "record bodyLength":
            return BAD_LENGTH, 0, 0, None
        if exc.found != o + rec.SIZE:
            return BAD_BODY_OFFSET, o + rec.SIZE, exc.found, None
        return LOW_BODY_OFFSET, 0, exc.found, None
    if lap_end >= 0 and head.end > lap_end:
        return CROSSES_LAP, lap_end, head.end, None
    return END, 0, 0, head


def _batch_fields(view, body_pos: int, length: int) -> tuple[int, int, int, int] | None:
    """(stream_id, epoch, base_offset, count) when the body passes StreamRecordBatch.decode(exact=True)."""
    if length < batch_format.HEADER_SIZE:
        return None
    magic, stream_id, epoch, base, count, plen = _BATCH(view, body_pos)
    if (magic == batch_format.MAGIC and stream_id >= 0 and base >= 0 and count >= 1 and base + count < 1 << 63
            and plen == length - batch_format.HEADER_SIZE):
        return stream_id, epoch, base, count
    return None


def _py_decode(buf, base: int, pos: int, end: int, lap_end: int, align: int, max_records: int, batches: bool,
               rows: list[int]) -> tuple[int, int, int, int]:
    view = memoryview(buf)
    count = 0
    while True:
        if pos >= end:
            return END, pos, 0, 0
        if 0 <= max_records <= count:
            return LIMIT, pos, 0, 0
        o = base + pos
        reason, expected, found, head = _header_failure(view, pos, end, o, lap_end)
        if head is None:
            if align > 0 and o % align:
                boundary = pos + align - o % align
                if boundary <= end and not any(view[pos:boundary]):
                    pos = boundary
                    continue
            return reason, pos, expected, found
        length = head.body_length
        body_pos = pos + rec.SIZE
        kind, extra = KIND_PADDING, None
        if not head.is_padding:
            try:
                head.check_body(view[body_pos:end], body_pos)
            except TruncatedError as exc:
                return TRUNCATED_BODY, pos, exc.expected, exc.found
            except ChecksumError as exc:
                return BODY_CRC, pos, exc.expected, exc.found
            extra = _batch_fields(view, body_pos, length) if batches else None
            kind = KIND_BATCH if extra is not None else KIND_DATA
        rows += (o, body_pos, length, kind, *(extra or (-1, -1, -1, -1)))
        count += 1
        pos = body_pos + length


# ---- encode -----------------------------------------------------------------------------------


def pack_records(buf, pos: int, limit: int, offset: int, bodies, *, index: int = 0,
                 batch: tuple[int, int, int] | None = None) -> tuple[int, int]:
    """Pack ``bodies[index:]`` back to back into ``buf[pos:limit]`` as data records, the first at
    logical ``offset``, until the next would pass ``limit``; returns (records packed, end pos).

    ``batch`` None: each body is a record body as is (the bytes of rec.encode_record).
    ``batch`` (stream_id, epoch, base_offset): each body is a payload, wrapped in a
    StreamRecordBatch of count 1 whose baseOffset is base_offset + its index from ``index``.
    Raises ValueError for a body of 0 bytes or over 2^32 - 1 (nothing after it is packed).
    """
    if _native is not None:
        return _native.pack_records(buf, pos, limit, offset, bodies, index, batch)
    return _py_pack(buf, pos, min(limit, len(buf)), offset, bodies, index, batch)


_BATCH_PACK = batch_format.STRUCT.pack_into


def _py_pack(buf, pos: int, limit: int, offset: int, bodies, index: int, batch) -> tuple[int, int]:
    view = memoryview(buf)
    head = batch_format.HEADER_SIZE if batch is not None else 0
    done = 0
    for body in bodies[max(index, 0):]:
        body_len = head + len(body)
        if not 0 < body_len <= 0xFFFFFFFF:
            raise ValueError(f"record body of {body_len} bytes out of bounds (1 .. 2^32 - 1)")
        if pos < 0 or rec.SIZE + body_len > limit - pos:
            break
        start = pos + rec.SIZE
        if batch is not None:
            stream_id, epoch, base = batch
            _BATCH_PACK(view, start, batch_format.MAGIC, stream_id, epoch, base + done, 1, len(body))
        view[start + head:start + body_len] = body
        rec.pack_data_header_into(view, pos, offset, view[start:start + body_len])
        pos += rec.SIZE + body_len
        offset += rec.SIZE + body_len
        done += 1
    return done, pos


# ---- input framing ----------------------------------------------------------------------------


def split_length_prefixed(buf, start: int = 0, max_records: int = -1) -> Spans:
    """(payload pos, length) of every complete record (4-byte big-endian length + bytes) from ``start``."""
    if _native is not None:
        data, count, next_pos = _native.split_length_prefixed(buf, start, max_records)
        return Spans(_int64s(data), count, next_pos)
    view = memoryview(buf)
    end = len(view)
    pos = max(start, 0)
    out: list[int] = []
    while end - pos >= 4 and (max_records < 0 or len(out) < 2 * max_records):
        length = int.from_bytes(view[pos:pos + 4], "big")
        if length > end - pos - 4:
            break
        out += (pos + 4, length)
        pos += 4 + length
    return Spans(_int64s(struct.pack(f"={len(out)}q", *out)), len(out) // 2, pos)


def split_lines(buf, start: int = 0, max_records: int = -1) -> Spans:
    """(pos, length without the newline) of every line from ``start`` that ends in b"\\n"."""
    if _native is not None:
        data, count, next_pos = _native.split_lines(buf, start, max_records)
        return Spans(_int64s(data), count, next_pos)
    data = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    pos = max(start, 0)
    out: list[int] = []
    while max_records < 0 or len(out) < 2 * max_records:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        out += (pos, nl - pos)
        pos = nl + 1
    return Spans(_int64s(struct.pack(f"={len(out)}q", *out)), len(out) // 2, pos)


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data`` continuing ``value`` (the native one when built: tests compare them)."""
    if _native is not None:
        return _native.crc32c(data, value)
    return _py_crc32c(data, value)


# ---- rows summary (recover's scan) --------------------------------------------------------------


def rows_summary(rows, first: int, stop: int) -> tuple[bool, bool, int, bool, int]:
    """What the scan asks of decode_records' rows [first, stop) (non-empty), in one pass:
    (every row a KIND_BATCH, every row of the first row's stream, that stream id, each row's
    base_offset the row before's base_offset + count, the sum of the body lengths)."""
    if _native is not None and _native_rows_summary is not None:
        return _native_rows_summary(rows, first, stop)
    rows = memoryview(rows).cast("B").cast("q")
    if not 0 <= first < stop <= len(rows) // ROW:
        raise ValueError("rows_summary: rows [first, stop) must be a non-empty range of the rows")
    kinds, sids = rows[first * ROW + 3:stop * ROW:ROW].tolist(), rows[first * ROW + 4:stop * ROW:ROW].tolist()
    bases, counts = rows[first * ROW + 6:stop * ROW:ROW].tolist(), rows[first * ROW + 7:stop * ROW:ROW].tolist()
    n = stop - first
    follows = all(bases[i] == _wrap64(bases[i - 1] + counts[i - 1]) for i in range(1, n))
    return (kinds.count(KIND_BATCH) == n, sids.count(sids[0]) == n, sids[0], follows,
            _wrap64(sum(rows[first * ROW + 2:stop * ROW:ROW].tolist())))


def _wrap64(n: int) -> int:
    """``n`` as the C twin's int64 arithmetic has it (two's complement wrap)."""
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


# (an older build of the extension without it: the Python twin)
_native_rows_summary = getattr(_native, "rows_summary", None)
