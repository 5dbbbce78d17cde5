"""The WAL's step decoder (FORMATS.md 1.2-1.4), like etcd's ``wal/decoder.go``.

At a logical offset the decoder yields one of two things:
- a ``Record``: an intact data record (its body) or a padding record;
- a ``Skip``: no record can be read here. ``kind`` says whether the header or the body
  failed, ``cause`` what the bytes look like, ``reason`` the words the findings print,
  with the expected/found CRC when a checksum failed.

It decides nothing about the log: whether a Skip is the end of the log, a crash hole or
corruption is the scan's policy (``walctl.wal.reader`` for walctl's logs,
``walctl.wal.automq_scan`` for AutoMQ's), which calls the decoder at every step.

The bulk form for the common case, a run of intact records in one buffer, is
``walctl.format.bulk.decode_records`` (C, with a Python twin built on the same
RecordHeader checks), which the scan's fast path calls through ``LogReader.intact_run``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from walctl.errors import BadMagicError, BoundsError, ChecksumError, FormatError, TruncatedError, ZeroedError
from walctl.format import record as rec
from walctl.format.crc import automq_crc, crc32c
from walctl.wal.findings import Cause

AUTOMQ_INT_MAX = 0x7FFFFFFF  # AutoMQ reads bodyLength as a Java int: above this it is negative


class SkipKind(enum.StrEnum):
    HEADER = "header"  # no valid record header at this offset
    BODY = "body"  # a valid header whose body fails its check (torn or damaged)


@dataclass(frozen=True, slots=True)
class Record:
    """A record read whole at ``offset``: a data record's body, or a padding record (empty body)."""

    offset: int
    end: int
    body: bytes
    padding: bool = False


@dataclass(frozen=True, slots=True)
class Skip:
    """No record could be read at ``offset``."""

    kind: SkipKind
    offset: int
    cause: Cause
    reason: str
    expected_crc: int | None = None
    found_crc: int | None = None
    end: int | None = None  # BODY: where the record its header describes would end


_MAGIC_NAMES = {rec.DATA_MAGIC: "the data record magic", rec.PADDING_MAGIC: "the padding record magic"}


def classify(exc: FormatError) -> tuple[Cause, str]:
    """(cause, reason words) of a record header the decoder refused, from the error's fields."""
    if isinstance(exc, ZeroedError):
        return Cause.ZERO_FILL, "zero fill"
    if isinstance(exc, BadMagicError):
        return _bad_magic(exc)
    if isinstance(exc, ChecksumError):
        return Cause.CHECKSUM_MISMATCH, "header crc mismatch"
    if isinstance(exc, TruncatedError):
        return Cause.TRUNCATED, "truncated"
    if isinstance(exc, BoundsError) and exc.field == "record bodyOffset":
        return Cause.STALE_LAP, "stale record of an earlier lap or another offset"
    return Cause.GARBAGE, str(exc)


def _bad_magic(exc: BadMagicError) -> tuple[Cause, str]:
    found = exc.found if isinstance(exc.found, int) else None
    if found is None:
        return Cause.GARBAGE, "bad magic"
    # A magic a bit or two away from a real one is a damaged header, not foreign bytes:
    # its crc (which covers the magic) cannot match either.
    near = min(_MAGIC_NAMES, key=lambda m: bin(m ^ found).count("1"))
    bits = bin(near ^ found).count("1")
    if bits == 0:
        return Cause.GARBAGE, exc.what  # a known magic where this log cannot have it
    if bits <= 2:
        return Cause.CHECKSUM_MISMATCH, (f"header crc mismatch (bad magic 0x{found:08X}, {bits} "
                                         f"bit{'s' if bits > 1 else ''} from {_MAGIC_NAMES[near]}: a damaged header)")
    return Cause.GARBAGE, f"bad magic 0x{found:08X}"


def _crcs(exc: FormatError) -> tuple[int | None, int | None]:
    return (exc.expected, exc.found) if isinstance(exc, ChecksumError) else (None, None)


def header_skip(offset: int, exc: FormatError) -> Skip:
    cause, reason = classify(exc)
    return Skip(SkipKind.HEADER, offset, cause, reason, *_crcs(exc))


def body_skip(offset: int, end: int, exc: FormatError) -> Skip:
    if isinstance(exc, ChecksumError):
        return Skip(SkipKind.BODY, offset, Cause.CHECKSUM_MISMATCH, "body crc mismatch", *_crcs(exc), end=end)
    cause, reason = classify(exc)
    return Skip(SkipKind.BODY, offset, cause, reason, end=end)


class Decoder:
    """Decodes the record at a logical offset of a ring, through a LogReader's cache.

    ``automq`` selects AutoMQ's record rules (its masked CRC-32, bodyLength a Java int, no
    padding record in V0); walctl's otherwise.
    """

    def __init__(self, reader, *, automq: bool = False, v1: bool = False):
        self.reader = reader
        self.ring = reader.ring
        self.automq = automq
        self.v1 = v1
        self.checksum = automq_crc if automq else crc32c

    def header(self, offset: int) -> rec.RecordHeader:
        """The checked header at ``offset``; raises the FormatError saying why there is none."""
        head = rec.RecordHeader.decode(self.reader.read(offset, rec.SIZE), expected_offset=offset,
                                       checksum=self.checksum)
        if self.automq:
            if head.is_padding and not self.v1:
                raise BadMagicError(f"padding record magic 0x{rec.PADDING_MAGIC:08X} in an AutoMQ V0 log "
                                    f"(V0 has none)", offset=offset, expected=rec.DATA_MAGIC, found=rec.PADDING_MAGIC)
            if head.body_length > AUTOMQ_INT_MAX:
                raise BoundsError(f"record bodyLength {head.body_length} is negative as AutoMQ reads it",
                                  offset=offset + 4, found=head.body_length, field="record bodyLength")
        lap_end = self.ring.lap_end(offset)
        if head.end > lap_end:
            raise BoundsError(f"record end {head.end} crosses the end of the lap at {lap_end}",
                              offset=offset + 4, found=head.end, field="record end")
        return head

    def step(self, offset: int) -> Record | Skip:
        """The record at ``offset``, or the Skip saying why none can be read there."""
        try:
            head = self.header(offset)
        except FormatError as exc:
            return header_skip(offset, exc)
        if head.is_padding:
            return Record(offset, head.end, b"", padding=True)
        body = self.reader.read(offset + rec.SIZE, head.body_length)
        try:
            head.check_body(body, offset + rec.SIZE, checksum=self.checksum)
        except FormatError as exc:
            return body_skip(offset, head.end, exc)
        return Record(offset, head.end, bytes(body))
