"""Cutting an input stream into record payloads (append --input/--framing), from large reads.

Each read takes up to 1 MiB (read1: what has arrived, so records written to a pipe are taken
without waiting for a full buffer); the records inside are found in one call
(walctl.format.bulk.split_*, C when built) and handed out as memoryview slices of that read:
no read and no copy per record. Only a record cut by a read's end is carried over, and a large
one is joined once, when all its bytes are there.

    records(source, framing)  -> payloads one by one (memoryview or bytes)
    batches(source, framing)  -> (buffer, spans) per read: a writer packing many records at once
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from walctl.errors import UsageError

if TYPE_CHECKING:
    from walctl.format import bulk  # imported by batches(): the CLI's option type (Framing) does not load it

CHUNK = 1 << 20  # bytes per read


class Framing(str, enum.Enum):
    lines = "lines"
    length_prefixed = "length-prefixed"
    raw = "raw"


def open_input(path: str):
    """The binary stream ``--input`` names ('-': standard input); UsageError when unreadable."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise UsageError(f"cannot read input file: {exc.strerror}", where=path,
                         hint="--input names a readable file, or '-' for standard input") from exc


def records(source, framing: Framing, chunk: int = CHUNK) -> Iterator[bytes | memoryview]:
    """Yield payloads from ``source`` as they arrive; truncated length-prefixed input raises
    UsageError naming the input byte where the incomplete record starts."""
    if framing is Framing.raw:
        yield source.read()
        return
    for view, spans in batches(source, framing, chunk):
        for i in range(0, 2 * spans.count, 2):
            pos = spans.spans[i]
            yield view[pos:pos + spans.spans[i + 1]]


def batches(source, framing: Framing, chunk: int = CHUNK) -> Iterator[tuple[memoryview, bulk.Spans]]:
    """Per read: (the buffer, the spans of the complete records in it); lines or length-prefixed.

    The buffer is never reused, so the slices a caller keeps stay valid.
    """
    if framing is Framing.raw:
        raise ValueError("raw input is one record: use records()")
    from walctl.format import bulk

    read = source.read1 if hasattr(source, "read1") else source.read
    split = bulk.split_lines if framing is Framing.lines else bulk.split_length_prefixed
    carry = _Carry(framing is Framing.lines)
    while True:
        data = read(chunk)
        if not data:
            break
        for buf, start in carry.add(data):
            found = split(buf, start)
            if found.count:
                yield memoryview(buf), found
            carry.keep(buf, start, found.next_pos)
    tail = carry.rest()
    if not tail:
        return
    if framing is Framing.lines:
        # The last line without a newline is a record, as readline() returns it.
        yield memoryview(tail), bulk.Spans.of([(0, len(tail))], len(tail))
        return
    if len(tail) < 4:
        raise UsageError(f"truncated length prefix at input byte {carry.consumed}")
    length = int.from_bytes(tail[:4], "big")
    raise UsageError(f"truncated record at input byte {carry.consumed}: length {length}, got {len(tail) - 4}")


class _Carry:
    """The bytes of the one record a read cut, kept until its end has arrived.

    Reads are only collected while it is incomplete (its length prefix, then its length, or a
    newline still to come); when its end arrives, its bytes alone are joined (one copy of the
    record, not of the read), and the read goes on from right after it.
    """

    def __init__(self, lines: bool):
        self.lines = lines
        self.parts: list = []
        self.size = 0
        self.need: int | None = None  # length-prefixed: bytes of the carried record, once its prefix is known
        self.consumed = 0  # input bytes before the carried ones

    def add(self, data: bytes) -> list[tuple[bytes, int]]:
        """The buffers to parse now, each with the position to start from."""
        if not self.parts:
            return [(data, 0)]
        if self.lines:
            cut = data.find(b"\n") + 1  # the carried line ends at the read's first newline
        else:
            if self.need is None:  # the length prefix was cut: known once 4 bytes are here
                prefix = (b"".join(self.parts) + data[:4])[:4]  # the carried part is < 4 bytes
                if len(prefix) == 4:
                    self.need = 4 + int.from_bytes(prefix, "big")
            missing = self.need - self.size if self.need is not None else len(data) + 1
            cut = missing if missing <= len(data) else 0
        if not cut:
            self.parts.append(data)
            self.size += len(data)
            return []
        self.parts.append(memoryview(data)[:cut])
        return [(self._join(), 0), (data, cut)]

    def keep(self, buf: bytes, start: int, next_pos: int) -> None:
        """Carry ``buf[next_pos:]`` (the incomplete record) over to the next read."""
        self.consumed += next_pos - start
        self.need = None
        if next_pos < len(buf):
            tail = memoryview(buf)[next_pos:]
            self.parts, self.size = [tail], len(tail)
            if len(tail) >= 4 and not self.lines:
                self.need = 4 + int.from_bytes(tail[:4], "big")

    def _join(self) -> bytes:
        buf = b"".join(self.parts)
        self.parts, self.size = [], 0
        return buf

    def rest(self) -> bytes:
        return self._join()
