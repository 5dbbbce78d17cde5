"""A task's GETs read ahead of its writes within its memory share, into a reused aligned arena."""

from __future__ import annotations

from typing import TYPE_CHECKING

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from walctl.device.pacing import Pacer  # one pacer for every budget

if TYPE_CHECKING:
    from walctl.store.base import Store

READ_THREADS = 8  # ranged GETs in flight per task (S3 and a local store's O_DIRECT reads: latency-bound)
# Bytes of GETs in flight per task: a local O_DIRECT read holds an aligned buffer of its size until
# it is copied out, so many small reads run at once but big ones (up to the 16 MiB read cut) one by one.
INFLIGHT_READ_BYTES = 16 << 20


class _Closed(Exception):
    """A read not started because the task stopped (never reaches a result: nobody waits for it)."""


class BufferPool:
    """A task's read buffers: extents of one page-aligned arena of ``cap`` bytes (for O_DIRECT),
    mapped once and reused from one read to the next. A read lands where its bytes are checked
    and written from (no copy), in pages already mapped (a fresh mapping costs a page fault per
    4 KiB, more than the copy would). First fit, freed extents merged with their neighbours; a
    read finding no room (the arena fragmented, or the read larger than it) gets a buffer of its
    own, freed with its last view. ``take`` returns (buffer, token), ``give`` takes the token."""

    def __init__(self, cap: int):
        from walctl.device.buffers import align_up

        self.cap = align_up(max(cap, 1))
        self.arena = None  # mapped at the first read
        self.free: list[tuple[int, int]] = [(0, self.cap)]  # (offset, length), by offset, never adjacent
        self.lock = threading.Lock()

    def take(self, size: int):
        from walctl.device.buffers import align_up, aligned_buffer

        size = align_up(max(size, 1))
        with self.lock:
            for i, (at, length) in enumerate(self.free):
                if length >= size:
                    if length == size:
                        del self.free[i]
                    else:
                        self.free[i] = (at + size, length - size)
                    if self.arena is None:
                        self.arena = aligned_buffer(self.cap)
                    return memoryview(self.arena)[at:at + size], (at, size)
        return aligned_buffer(size), None

    def give(self, token) -> None:
        if token is None:
            return
        import bisect

        at, size = token
        with self.lock:
            i = bisect.bisect(self.free, (at, size))
            if i < len(self.free) and at + size == self.free[i][0]:  # merge with the next extent
                size += self.free.pop(i)[1]
            if i and self.free[i - 1][0] + self.free[i - 1][1] == at:  # and with the previous
                self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + size)
            else:
                self.free.insert(i, (at, size))


class ReadAhead:
    """A task's GETs, every iteration's in plan order, read by a few threads ahead of the writes.

    A GET starts when the bytes it will hold fit the task's memory share beside the buffers
    not yet written out (or when none is held: a range larger than the share goes alone), and
    in order: the next iteration's reads take the memory the current one's writes give back,
    so reading iteration k+1 overlaps writing iteration k and the task never holds more than
    its share. Bytes of GETs in flight are bounded too (INFLIGHT_READ_BYTES: a local read holds
    an aligned buffer of its size until it is copied out). The GETs are exactly the plan's.
    """

    def __init__(self, store: Store, specs):
        self.store = store
        largest = max(sum(r.size for r in s.reads) for s in specs)
        self.memory = specs[0].memory_bytes or largest or 1
        self.pacer = Pacer.bytes_per_s(specs[0].read_rate_bps)  # the task's share of the read budget
        self.cond = threading.Condition()
        self.held = self.inflight = self.turn = 0
        self.closed = False
        self.spans = [[None, None, None] for _ in specs]  # per iteration: first start, last end (monotonic), wall start
        self.bytes = [0] * len(specs)
        self.pool = ThreadPoolExecutor(max_workers=max(1, specs[0].read_threads), thread_name_prefix="walctl-read")
        # A local store reads into the task's arena (read_range_into); others return bytes. The arena
        # is the memory share and 1/16 more: the reads' page alignment and some fragmentation (measured
        # on compact_bench's layout: no read needed a buffer of its own).
        self.buffers = BufferPool(self.memory + self.memory // 16) if store.capabilities.reads_into else None
        self.lent: dict[tuple[int, int], object] = {}  # (iteration, ticket) -> the arena extent its read holds
        self.futures = []
        self.first_ticket = []
        ticket = 0
        for k, spec in enumerate(specs):
            self.first_ticket.append(ticket)
            self.futures.append([self.pool.submit(self._fetch, k, ticket + n, read) for n, read in enumerate(spec.reads)])
            ticket += len(spec.reads)

    def _admissible(self, ticket: int, size: int) -> bool:
        return self.closed or (self.turn == ticket and (self.held == 0 or self.held + size <= self.memory)
                               and (self.inflight == 0 or self.inflight + size <= INFLIGHT_READ_BYTES))

    def _fetch(self, k: int, ticket: int, read):
        size = read.size
        with self.cond:
            self.cond.wait_for(lambda: self._admissible(ticket, size))
            if self.closed:
                raise _Closed()
            self.turn += 1
            self.held += size
            self.inflight += size
            self.cond.notify_all()
        started, wall = time.monotonic(), time.time()
        try:
            if self.buffers is None:
                data = self.store.read_range(read.key, read.start, read.end)
            else:  # into a buffer of the task's own: no copy, and no fresh pages once the pool is warm
                buf, token = self.buffers.take(self.store.into_size(read.start, read.end))
                with self.cond:
                    self.lent[(k, ticket)] = token
                data = self.store.read_range_into(read.key, read.start, read.end, buf)
                del buf
        finally:
            with self.cond:
                self.inflight -= size
                self.cond.notify_all()
        self.pacer.paid(len(data))
        if len(data) != size:
            from walctl.errors import CorruptionError

            raise CorruptionError(f"source object shorter than its index says ({len(data)} of "
                                  f"{size} bytes at {read.start})", where=read.key)
        ended = time.monotonic()
        with self.cond:
            span = self.spans[k]
            if span[0] is None or started < span[0]:
                span[0], span[2] = started, wall
            span[1] = ended if span[1] is None else max(span[1], ended)
            self.bytes[k] += size
        return data

    def release(self, size: int, read: tuple[int, int] | None = None) -> None:
        """A buffer written out: its bytes go to the reads waiting; ``read`` (iteration k, its read
        n): the pool's buffer it held goes back to the pool."""
        with self.cond:
            self.held -= size
            token = self.lent.pop((read[0], self.first_ticket[read[0]] + read[1]), None) if read else None
            self.cond.notify_all()
        if token is not None:
            self.buffers.give(token)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.pool.shutdown(wait=True, cancel_futures=True)
