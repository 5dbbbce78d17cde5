"""A task's GETs read ahead of its writes within its memory share, into a reused aligned arena:
walctl.device.prefetch's ReadAhead and BufferPool (the one read-ahead and buffer pool), with
the task's pacing, short-read check and timing spans around each GET."""

from __future__ import annotations

from typing import TYPE_CHECKING

import threading
import time

from walctl.device.pacing import Pacer  # one pacer for every budget
from walctl.device.prefetch import BufferPool, ReadAhead

if TYPE_CHECKING:
    from walctl.store.base import Store

READ_THREADS = 8  # ranged GETs in flight per task (S3 and a local store's O_DIRECT reads: latency-bound)
# Bytes of GETs in flight per task: a local O_DIRECT read holds an aligned buffer of its size until
# it is copied out, so many small reads run at once but big ones (up to the 16 MiB read cut) one by one.
INFLIGHT_READ_BYTES = 16 << 20


class TaskReads:
    """A task's GETs, every iteration's in plan order, read by a few threads ahead of the writes.

    prefetch.ReadAhead starts a GET when the bytes it will hold fit the task's memory share beside
    the buffers not yet written out (or when none is held: a range larger than the share goes
    alone), and in order: the next iteration's reads take the memory the current one's writes give
    back, so reading iteration k+1 overlaps writing iteration k and the task never holds more than
    its share. Bytes of GETs in flight are bounded too (INFLIGHT_READ_BYTES). The GETs are exactly
    the plan's. Reads not started when the task stops fail with prefetch.Cancelled (nobody waits).
    ``futures[k][n]``: iteration k's read n (a prefetch.Read: ``result()``).
    """

    def __init__(self, store: Store, specs):
        self.store = store
        largest = max(sum(r.size for r in s.reads) for s in specs)
        memory = specs[0].memory_bytes or largest or 1
        self.pacer = Pacer.bytes_per_s(specs[0].read_rate_bps)  # the task's share of the read budget
        self.lock = threading.Lock()
        self.spans = [[None, None, None] for _ in specs]  # per iteration: first start, last end (monotonic), wall start
        self.bytes = [0] * len(specs)
        # A local store reads into the task's arena (read_range_into); others return bytes. The arena
        # is the memory share and 1/16 more: the reads' page alignment and some fragmentation (measured
        # on compact_bench's layout: no read needed a buffer of its own).
        self.buffers = BufferPool(arena_bytes=memory + memory // 16) if store.capabilities.reads_into else None
        self.lent: dict[tuple[int, int], object] = {}  # (iteration, read) -> the arena extent its read holds
        self.ahead = ReadAhead(max(1, specs[0].read_threads), memory_bytes=memory,
                               inflight_bytes=INFLIGHT_READ_BYTES, name="walctl-read")
        self.futures = [[self.ahead.submit(self._fetch, k, n, read, size=read.size) for n, read in enumerate(spec.reads)]
                        for k, spec in enumerate(specs)]

    @property
    def held(self) -> int:
        """Bytes of started GETs not released yet."""
        return self.ahead.held

    def _fetch(self, k: int, n: int, read):
        size = read.size
        started, wall = time.monotonic(), time.time()
        if self.buffers is None:
            data = self.store.read_range(read.key, read.start, read.end)
        else:  # into a buffer of the task's own: no copy, and no fresh pages once the pool is warm
            buf, token = self.buffers.extent(self.store.into_size(read.start, read.end))
            with self.lock:
                self.lent[(k, n)] = token
            data = self.store.read_range_into(read.key, read.start, read.end, buf)
            del buf
        self.pacer.paid(len(data))
        if len(data) != size:
            from walctl.errors import CorruptionError

            raise CorruptionError(f"source object shorter than its index says ({len(data)} of "
                                  f"{size} bytes at {read.start})", where=read.key)
        ended = time.monotonic()
        with self.lock:
            span = self.spans[k]
            if span[0] is None or started < span[0]:
                span[0], span[2] = started, wall
            span[1] = ended if span[1] is None else max(span[1], ended)
            self.bytes[k] += size
        return data

    def release(self, size: int, read: tuple[int, int] | None = None) -> None:
        """A buffer written out: its bytes go to the reads waiting; ``read`` (iteration k, its read
        n): the arena extent it held goes back to the pool."""
        with self.lock:
            token = self.lent.pop(read, None) if read else None
        self.ahead.release(size)
        if token is not None:
            self.buffers.give_extent(token)

    def close(self) -> None:
        self.ahead.close()
