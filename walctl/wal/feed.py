"""Feeding a writer: records read from an input (append --input) or given as payloads, packed
into the WAL's blocks at the device's pace (issue 31).

    open_source(path)                 -> Source: stdin ('-', its pipe enlarged) or a file, read with readinto
    feed_frames(writer, source, spec, next_base, base_limit, check, stats) -> FeedEnd

feed_frames reads into one large buffer, reused: each read's complete records are framed and
packed straight into the block buffers in C (WalWriter.append_frames), so a record costs no
Python object, and the bytes go pipe -> read buffer -> block -> device. Only the incomplete
record at a read's end is moved to the buffer's front. A regular file's length-prefixed records
go straight from the file into the blocks (_feed_direct: framepack.frame_read, no read buffer)
until one it leaves to the buffered path (a small one, the file's end, a cut record). (DATA arguments, raw input and a build
without the C extension take WalWriter.append_many: walctl.pipeline.append.) It never prints:
acknowledgements go through the writer's callbacks.
"""

from __future__ import annotations

import io
import os
import stat
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable

from walctl.errors import UsageError
from walctl.format import framepack

BUFFER_BYTES = 4 << 20  # the read buffer: several pipe-fulls, many records a read
# A regular file's read buffer (--input FILE, or stdin redirected from one): it stays in the L2 cache
# from the read to the packing. The kernel's copy out of the page cache into a 4 MiB buffer took 40 %
# more CPU than into a 1 MiB one (dd of a 768 MiB file: 0.18 s against 0.13 s), and frame_pack then
# reads it back from L3 rather than L2 (issue 31).
FILE_BUFFER_BYTES = 1 << 20
PIPE_BYTES = 1 << 20  # F_SETPIPE_SZ asked of a stdin pipe (Linux's default pipe-max-size)
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Python 3.10+ names it; the number is Linux's)
PIPE_MAX_SIZE_FILE = "/proc/sys/fs/pipe-max-size"  # the largest F_SETPIPE_SZ an unprivileged process gets

# (stop taking input?) asked between packings: raises a pending SIGTERM/SIGINT, True once stdout's reader left
Check = Callable[[], bool]


@dataclass
class FeedStats:
    """Where the appender's time went (ns): reading input, framing + packing + CRC (with queueing
    and submitting the blocks it filled, and waiting for a free I/O slot: the writer's slot_wait_ns),
    the CPU time of the latter, and the bytes and reads it took."""

    read_ns: int = 0
    pack_ns: int = 0  # wall-clock, with the waits for a free I/O slot (the writer's slot_wait_ns)
    pack_cpu_ns: int = 0  # the appender thread's CPU time in it
    pack_c_ns: int = 0  # of that, frame_pack's C loops (copy + CRC + headers); the rest is the writer's Python
    reads: int = 0
    bytes_read: int = 0
    pipe_bytes: int = 0  # the stdin pipe's size after F_SETPIPE_SZ (0: not a pipe)


class Source:
    """An input read with ``readinto`` into the caller's buffer (no bytes object per read)."""

    def __init__(self, stream, owned: bool):
        self.stream, self.owned = stream, owned
        self.pipe_bytes = 0
        self.buffer_bytes = BUFFER_BYTES  # feed_frames' read buffer (FILE_BUFFER_BYTES for a regular file)
        self.direct = False  # a regular file: length-prefixed records may be read straight into the blocks

    def readinto(self, view) -> int:
        n = self.stream.readinto(view)
        return n or 0

    def close(self) -> None:
        if self.owned:
            self.stream.close()


def open_source(path: str) -> Source:
    """``--input``'s stream: '-' is standard input (a pipe is enlarged to PIPE_BYTES when the
    system allows), else the file, unbuffered (large reads straight into the buffer)."""
    if path == "-":
        stdin = sys.stdin.buffer
        raw = getattr(stdin, "raw", None)
        source = Source(raw if isinstance(raw, io.FileIO) else stdin, owned=False)
        source.pipe_bytes = _enlarge_pipe(source.stream)
        if _is_regular(source.stream):  # `< FILE`
            source.buffer_bytes, source.direct = FILE_BUFFER_BYTES, True
        return source
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        raise UsageError(f"cannot read input file: {exc.strerror}", where=path,
                         hint="--input names a readable file, or '-' for standard input") from exc
    try:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (OSError, AttributeError):
        pass
    source = Source(f, owned=True)
    if _is_regular(f):  # (a FIFO or a device named as FILE keeps the large buffer)
        source.buffer_bytes, source.direct = FILE_BUFFER_BYTES, True
    return source


def _is_regular(stream) -> bool:
    """True if ``stream`` reads a regular file (False: a pipe, a device, not a file at all)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation, AttributeError):
        return False


def _enlarge_pipe(stream) -> int:
    """F_SETPIPE_SZ on a stdin pipe: fewer, larger reads. Returns its size (0: not a pipe)."""
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
        import fcntl

        try:
            return fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        # Over pipe-max-size (without CAP_SYS_RESOURCE): the largest the system allows, not the
        # 64 KiB default (16 times the reads and several times the packing calls per GiB).
        try:
            with open(PIPE_MAX_SIZE_FILE) as f:
                allowed = int(f.read())
            if allowed < PIPE_BYTES:
                return fcntl.fcntl(fd, F_SETPIPE_SZ, allowed)
        except (OSError, ValueError):
            pass
        return fcntl.fcntl(fd, 1032)  # F_GETPIPE_SZ: keep the pipe as it is
    except (OSError, ValueError, io.UnsupportedOperation, AttributeError):
        return 0


class _Buffer:
    """The reusable read buffer: ``data[start:fill]`` is input not packed yet."""

    def __init__(self, size: int):
        self.data = bytearray(size)
        self.start = self.fill = 0
        self.consumed = 0  # input bytes before data[start]

    def compact(self, need: int) -> None:
        """Move the unpacked tail to the front; grow to hold ``need`` bytes of it."""
        tail = self.fill - self.start
        if need > len(self.data):
            grown = bytearray(max(need, 2 * len(self.data)))
            grown[:tail] = memoryview(self.data)[self.start:self.fill]
            self.data = grown
        elif self.start:
            with memoryview(self.data) as view:  # moved in place (no bytes object of the tail)
                view[:tail] = view[self.start:self.fill]
        self.start, self.fill = 0, tail


@dataclass(frozen=True)
class FeedEnd:
    """Where feed_frames stopped: the next stream offset, and ``stop`` (framepack.STOP_INPUT: the
    input's end; STOP_TOO_LARGE: a payload of ``next_len`` bytes over the bound; STOP_MAX: the
    stream offset reached ``base_limit``; None: ``check()`` stopped it)."""

    next_base: int
    stop: int | None = framepack.STOP_INPUT
    next_len: int = -1


def feed_frames(writer, source: Source, spec, next_base: int, base_limit: int, check: Check,
                stats: FeedStats | None = None) -> FeedEnd:
    """Append the records of ``source`` (``spec``: walctl.wal.writer_blocks.FrameSpec) from stream offset
    ``next_base`` until its end, a record out of bounds (the records before it are queued, the
    caller says why: walctl.bounds) or ``check()`` says stop.

    Raises:
        UsageError: truncated length-prefixed input (the records before it are queued).
    """
    stats = stats if stats is not None else FeedStats()
    stats.pipe_bytes = source.pipe_bytes
    buf = _Buffer(source.buffer_bytes)
    if source.direct and not spec.lines and framepack.DIRECT:
        end = _feed_direct(writer, source, spec, next_base, base_limit, check, stats, buf)
        if end.stop != framepack.STOP_INPUT:
            return end
        next_base = end.next_base  # the rest through the buffer, from the file offset it stopped at
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    c_cpu = framepack.cpu_ns
    c_before = c_cpu() - stats.pack_c_ns
    while True:
        t0 = clock()
        with memoryview(buf.data) as view:
            n = source.readinto(view[buf.fill:])
        t1 = clock()
        stats.read_ns += t1 - t0
        stats.reads += 1
        stats.bytes_read += n
        if not n:
            break
        buf.fill += n
        c1 = cpu_clock()
        end = _pack_read(writer, buf, spec, next_base, base_limit, check)
        stats.pack_ns += clock() - t1
        stats.pack_cpu_ns += cpu_clock() - c1
        stats.pack_c_ns = c_cpu() - c_before
        next_base = end.next_base
        if end.stop != framepack.STOP_INPUT:
            return end
        need = buf.fill - buf.start + 1
        if spec.lines and need - 1 > spec.max_payload:
            # A line with no end in sight (/dev/zero): never buffered past the largest record.
            return FeedEnd(next_base, framepack.STOP_TOO_LARGE, need - 1)
        if not spec.lines and end.next_len > spec.max_payload:
            # A length prefix over the largest record (garbage input): refused before buffering it.
            return FeedEnd(next_base, framepack.STOP_TOO_LARGE, end.next_len)
        if not spec.lines and end.next_len >= 0:
            need = max(need, 4 + end.next_len)
        buf.compact(need)
    return _last_record(writer, buf, spec, next_base, base_limit, check)


def _feed_direct(writer, source: Source, spec, next_base: int, base_limit: int, check: Check,
                 stats: FeedStats, buf: _Buffer) -> FeedEnd:
    """feed_frames' direct path (a regular file, length-prefixed): the records read from the file
    straight into the blocks (framepack.frame_read), ``source.buffer_bytes`` of the file a call, until
    a stop (returned as is) or a record frame_read leaves to the buffered path (STOP_INPUT: the file's
    end, a short read, max_records, a small payload): the file is then positioned at that record, and
    ``buf.consumed`` counts the input taken, for the buffered path. Its reads count in pack_ns."""
    fd = source.stream.fileno()
    first = offset = os.lseek(fd, 0, os.SEEK_CUR)
    direct = replace(spec, fd=fd)
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    c_cpu = framepack.cpu_ns
    c_before = c_cpu() - stats.pack_c_ns
    try:
        while True:
            chunk_end = offset + source.buffer_bytes
            t0, c0 = clock(), cpu_clock()
            count, pos, stop, next_len = writer.append_frames(None, offset, chunk_end, direct, next_base,
                                                              max(0, base_limit + 1 - next_base))
            stats.pack_ns += clock() - t0
            stats.pack_cpu_ns += cpu_clock() - c0
            stats.pack_c_ns = c_cpu() - c_before
            stats.reads += 1
            stats.bytes_read += pos - offset
            next_base += count
            offset = pos
            if check():
                return FeedEnd(next_base, None, next_len)
            if stop != framepack.STOP_INPUT:
                return FeedEnd(next_base, stop, next_len)
            if offset < chunk_end:  # left to the buffered path
                buf.consumed = offset - first
                return FeedEnd(next_base)
    finally:
        os.lseek(fd, offset, os.SEEK_SET)


def _pack_read(writer, buf: _Buffer, spec, next_base: int, base_limit: int, check: Check) -> FeedEnd:
    """Pack the complete records of ``buf``; where it stopped (see FeedEnd)."""
    while True:
        count, pos, stop, next_len = writer.append_frames(buf.data, buf.start, buf.fill, spec, next_base,
                                                          max(0, base_limit + 1 - next_base))
        buf.consumed += pos - buf.start
        buf.start = pos
        next_base += count
        if check():
            return FeedEnd(next_base, None, next_len)
        if stop != framepack.STOP_FULL:
            return FeedEnd(next_base, stop, next_len)


def _last_record(writer, buf: _Buffer, spec, next_base: int, base_limit: int, check: Check) -> FeedEnd:
    """At the input's end: a last line without a newline is a record (as readline() returns it);
    a length-prefixed tail is a truncated record (UsageError naming where it starts)."""
    tail = buf.fill - buf.start
    if not tail:
        return FeedEnd(next_base)
    if spec.lines:
        buf.compact(tail + 1)
        buf.data[buf.fill] = 0x0A
        buf.fill += 1
        return _pack_read(writer, buf, spec, next_base, base_limit, check)
    if tail < 4:
        raise UsageError(f"truncated length prefix at input byte {buf.consumed}")
    length = int.from_bytes(buf.data[buf.start:buf.start + 4], "big")
    raise UsageError(f"truncated record at input byte {buf.consumed}: length {length}, got {tail - 4}")
