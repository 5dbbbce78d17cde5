"""The one read-ahead and the one buffer pool every reader uses (issue 29 item 5).

``ReadAhead`` runs reads submitted in order on a few threads, ahead of the thread that uses
them: the device (or the store) reads while the caller decodes what it has. Reads start in the
order they were submitted, and only when their bytes fit the memory share beside the bytes the
caller still holds (``memory_bytes``; a read larger than the share goes alone) and beside the
reads in flight (``inflight_bytes``). Each read's device bytes (walctl.device.fdio's per-thread
count) are the caller's: ``Read.credit`` adds them to the thread that takes the read.

``BufferPool`` hands out page-aligned buffers (O_DIRECT) and takes them back for the next read:
a reused buffer costs no page fault and no zeroing, a fresh mapping costs one per 4 KiB. Three
ways to give one back, for three kinds of holder:
  - ``take``/``give``: the holder says when it is done (a read-ahead segment, a block written out);
  - ``lend``: a view is handed out and the buffer is read into again only once no view of it is
    left (mmap.resize refuses while one is), so a view's bytes never change while held;
  - ``extent``/``give_extent``: extents of one arena of ``arena_bytes`` (first fit, freed extents
    merged), for a task whose reads of any size share one memory budget.

Users: walctl.wal.ringread (the scan's read-ahead), walctl.pipeline.upload.walread (upload's
second read), walctl.pipeline.upload.blocks (the spool's block buffers), walctl.pipeline.read
(the store reads of ``walctl read``). Imports only device/ and the standard library.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from typing import Callable

from walctl.device.buffers import align_up, aligned_buffer
from walctl.device.fdio import add_bytes_read, bytes_read_total


class Cancelled(Exception):
    """A read never started: its ReadAhead was closed first (nobody waits for its result)."""


class Read:
    """One read submitted to a ReadAhead: wait for it with ``result()`` (or ``wait()``, then
    ``error``/``value``), like a concurrent.futures.Future."""

    __slots__ = ("fn", "args", "size", "value", "error", "counted", "_done")

    def __init__(self, fn: Callable, args: tuple, size: int):
        self.fn, self.args, self.size = fn, args, size
        self.value = None
        self.error: BaseException | None = None
        self.counted = 0  # device bytes the thread read for it (fdio.bytes_read_total is per thread)
        self._done = threading.Event()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        """Until the read ran (or was cancelled). Interrupted by a signal, the read stays queued."""
        self._done.wait()

    def result(self):
        """The read's value (its device bytes credited to the calling thread); raises its error."""
        self.wait()
        self.credit()
        if self.error is not None:
            raise self.error
        return self.value

    def credit(self) -> int:
        """Count the read's device bytes as the calling thread's (once); how many there were."""
        counted, self.counted = self.counted, 0
        if counted:
            add_bytes_read(counted)
        return counted

    def _run(self) -> None:
        before = bytes_read_total()
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that takes the read
            self.error = exc
        self.counted = bytes_read_total() - before
        self.fn = self.args = None
        self._done.set()

    def _cancel(self) -> None:
        self.error = Cancelled("the read-ahead was closed before this read started")
        self.fn = self.args = None
        self._done.set()


class ReadAhead:
    """Reads run ahead of their consumer, in submission order, by up to ``threads`` threads.

    Args:
        threads: reads at the device (or the store) at once; threads start as reads queue up.
        memory_bytes: the memory share: a read starts only when its ``size`` fits beside the
            bytes held (submitted sizes not yet ``release``d); None: no bound (and no holding).
        inflight_bytes: bytes of reads running at once at most (one larger read runs alone).
        name: the threads' name (ps, py-spy).
    """

    def __init__(self, threads: int, *, memory_bytes: int | None = None, inflight_bytes: int | None = None,
                 name: str = "walctl-read-ahead"):
        self.threads = max(1, threads)
        self.memory_bytes = memory_bytes
        self.inflight_bytes = inflight_bytes
        self.name = name
        self.held = 0  # bytes of started reads the consumer has not released (memory_bytes set)
        self.inflight = 0  # bytes of reads running now
        self._queue: deque[Read] = deque()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable, *args, size: int = 0) -> Read:
        """Queue ``fn(*args)``, a read of ``size`` bytes; it starts after those submitted before it."""
        read = Read(fn, args, size)
        with self._cond:
            if self._closed:
                read._cancel()
                return read
            self._queue.append(read)
            if len(self._threads) < min(self.threads, len(self._queue) + self._running()):
                self._start_thread()
            self._cond.notify()
        return read

    def release(self, size: int) -> None:
        """``size`` bytes of a read's result are given back (with memory_bytes): reads waiting for
        room may start."""
        with self._cond:
            self.held -= size
            self._cond.notify_all()

    def pending(self) -> int:
        """Reads queued, not started yet."""
        return len(self._queue)

    def close(self) -> None:
        """Cancel the reads not started, wait for the running ones, end the threads."""
        with self._cond:
            self._closed = True
            while self._queue:
                self._queue.popleft()._cancel()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the threads ------------------------------------------------------------------------

    _busy = 0  # threads running a read now

    def _running(self) -> int:
        return self._busy

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, name=self.name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _admissible(self, size: int) -> bool:
        """The next read (of ``size`` bytes) may start: it fits the memory share and the bytes in flight."""
        memory, inflight = self.memory_bytes, self.inflight_bytes
        return ((memory is None or self.held == 0 or self.held + size <= memory)
                and (inflight is None or self.inflight == 0 or self.inflight + size <= inflight))

    def _next(self) -> Read | None:
        """The next read to run, once it may start; None when closed."""
        with self._cond:
            while not self._closed and not (self._queue and self._admissible(self._queue[0].size)):
                self._cond.wait()
            if self._closed:
                return None
            read = self._queue.popleft()
            if self.memory_bytes is not None:
                self.held += read.size
            self.inflight += read.size
            self._busy += 1
            return read

    def _work(self) -> None:
        while True:
            read = self._next()
            if read is None:
                return
            try:
                read._run()
            finally:
                size = read.size
                del read  # (its value, a view of a pooled buffer, is the consumer's alone to hold)
                with self._cond:
                    self.inflight -= size
                    self._busy -= 1
                    self._cond.notify_all()


def unviewed(buf) -> bool:
    """True when no view of the mmap ``buf`` is left (a resize to its own size is refused while one is)."""
    try:
        buf.resize(len(buf))
    except BufferError:
        return False
    return True


class BufferPool:
    """Page-aligned buffers kept for reuse (the module's doc says the three ways back).

    Args:
        size: the buffers' size for ``take()`` without a size (rounded up to a page).
        keep: buffers kept for reuse at most; beyond, a buffer is freed with its last reference.
        limit: buffers ``take`` hands out at once at most (None: no limit); at the limit it
            returns None, the caller waits for one to come back.
        arena_bytes: the arena ``extent`` cuts extents from (mapped at the first extent).
    """

    def __init__(self, size: int = 0, *, keep: int = 8, limit: int | None = None, arena_bytes: int = 0):
        self.size = align_up(size) if size else 0
        self.keep = keep
        self.limit = limit
        self.out = 0  # buffers taken and not given back
        self.made = 0  # buffers take() mapped (the rest were reused)
        self._free: list = []  # given back, by size order of arrival
        self._lent: list = []  # buffers lent as views
        self._lock = threading.Lock()
        self.arena_bytes = align_up(max(arena_bytes, 1)) if arena_bytes else 0
        self._arena = None
        self._extents: list[tuple[int, int]] = [(0, self.arena_bytes)] if arena_bytes else []

    # -- take / give ------------------------------------------------------------------------

    def take(self, size: int | None = None):
        """A buffer of at least ``size`` bytes (default: the pool's size), reused when one was given
        back; None when ``limit`` buffers are out."""
        need = align_up(size) if size else self.size
        with self._lock:
            for i, buf in enumerate(self._free):
                if len(buf) >= need:
                    self.out += 1
                    return self._free.pop(i)
            if self.limit is not None and self.out >= self.limit:
                return None
            self.out += 1
            self.made += 1
        return aligned_buffer(need)

    def give(self, buf) -> None:
        """``buf`` (from ``take``) is free again: the next take may hand it out (with a pool size, a
        buffer of another size is dropped: a larger one made for one large record)."""
        if self.size and len(buf) != self.size:
            return  # not one of take()'s
        with self._lock:
            self.out -= 1
            if len(self._free) < self.keep:
                self._free.append(buf)

    # -- lend -------------------------------------------------------------------------------

    def lend(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes of a buffer no other view holds, the smallest that fits
        (chosen under the lock: two threads never get the same buffer). The buffer is read into
        again only once every view of it is released."""
        with self._lock:
            for buf in sorted(self._lent, key=len):
                if len(buf) >= size and unviewed(buf):
                    return memoryview(buf)[:size]
            buf = aligned_buffer(align_up(max(size, 1)))
            if len(self._lent) < self.keep:
                self._lent.append(buf)
        return memoryview(buf)[:size]

    # -- extents of one arena ---------------------------------------------------------------

    def extent(self, size: int):
        """(a view of ``size`` bytes of the arena, its token) first fit; when none fits (the arena
        fragmented, or the size larger than it) a buffer of its own and the token None."""
        size = align_up(max(size, 1))
        with self._lock:
            for i, (at, length) in enumerate(self._extents):
                if length >= size:
                    if length == size:
                        del self._extents[i]
                    else:
                        self._extents[i] = (at + size, length - size)
                    if self._arena is None:
                        self._arena = aligned_buffer(self.arena_bytes)
                    return memoryview(self._arena)[at:at + size], (at, size)
        return aligned_buffer(size), None

    def give_extent(self, token) -> None:
        """The extent ``token`` (from ``extent``) is free again, merged with free neighbours."""
        if token is None:
            return
        at, size = token
        with self._lock:
            free = self._extents
            i = bisect.bisect(free, (at, size))
            if i < len(free) and at + size == free[i][0]:  # merge with the next extent
                size += free.pop(i)[1]
            if i and free[i - 1][0] + free[i - 1][1] == at:  # and with the previous
                free[i - 1] = (free[i - 1][0], free[i - 1][1] + size)
            else:
                free.insert(i, (at, size))

    @property
    def free_extents(self) -> list[tuple[int, int]]:
        """(offset, length) of the arena's free extents, by offset (tests)."""
        return list(self._extents)


__all__ = ["BufferPool", "Cancelled", "Read", "ReadAhead", "unviewed"]
