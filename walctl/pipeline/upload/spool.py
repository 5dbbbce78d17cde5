"""Upload's spool: one-pass uploads (stores with ``open_spool``: the local store).

Each segment's DataBlocks are cut and written to a temp object of the store as the scan reads its
records (blocks.py lays them out), by a writer thread (_SpoolWriter), so the WAL is read once and
its reads overlap the writes. A segment that the plan makes a Stream Object of its own gets its
index and footer and is published under its reserved key after the prepare commit; the others
(streams sharing a Stream Set Object, or beyond SPOOL_SEGMENTS) are built as before (kept bodies,
or a second read: walread.py) and their temp objects removed.

Imported only by an upload that spools (run.py's ``_new_spools``): a dry run or an S3 upload
never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walctl.device.buffers import align_down
from walctl.format.object import ObjectBuilder
from walctl.pipeline.upload.blocks import _BLOCK_HEAD, _NoSpool, _SegmentSpool, block_buffers

if TYPE_CHECKING:
    from walctl.device.prefetch import BufferPool
    from walctl.store.base import Store

    from walctl.pipeline.upload.plan import PlannedObject

SPOOL_SEGMENTS = 16  # segments written as they are read; more (many interleaved streams) read again
SPOOL_WRITE_BYTES = 4 << 20  # DataBlocks go to the writer thread this many bytes at a time (one system call)
SPOOL_WRITE_BLOCKS = 8  # ... or this many blocks (smaller ones), whichever comes first
SPOOL_QUEUE_WRITES = 2  # such batches waiting for the writer thread (about 8 MiB)
SPOOL_MAX_BLOCK = 2 << 20  # larger --block-size: built the usual way (memory: a block buffer per spool, queued block)
_BLOCK_SLACK = 64 << 10  # a block buffer's room past block_size for the record that ends the block


class _SpoolWriter:
    """The thread that writes the spooled DataBlocks (the writes release the GIL: they overlap the
    scan). The uploading thread hands the blocks over SPOOL_WRITE_BYTES (or SPOOL_WRITE_BLOCKS) at a
    time, one queue item each (one wake-up of the thread), which the thread writes with one system
    call per spool among them: O_DIRECT writes of 1 MiB took ~1.5x as long as 4 MiB ones beside the
    scan's reads. ``put`` waits while SPOOL_QUEUE_WRITES such batches are queued; ``kick`` and
    ``flush`` hand over what there is. An error of the thread is raised by the next ``put``, ``kick``
    or ``flush`` (the blocks after it are dropped).

    An aligned spool (O_DIRECT) is written in whole pages: a block buffer holds its block after the
    bytes of the object's page before it (``lead`` of them); the thread puts there the page's bytes
    carried over from the block before (``_SegmentSpool.carry``), writes the buffer's whole pages and
    carries the rest to the next block; ``publish`` writes the last carry with the index and footer.
    """

    def __init__(self, buffers: BufferPool):
        import queue
        import threading

        self._buffers = buffers
        self._queue: queue.Queue = queue.Queue(maxsize=SPOOL_QUEUE_WRITES)
        self._batch: list = []  # (uploading thread) blocks not handed over yet
        self._batch_bytes = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="walctl-upload-write", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        q = self._queue
        while True:
            batch = q.get()
            try:
                if batch is not None and self._error is None:
                    self._write(batch)
            except BaseException as exc:  # raised in the uploading thread
                self._error = exc
            finally:
                for item in batch or ():
                    self._buffers.give(item[1])
                q.task_done()
            if batch is None:
                return
            del batch

    @staticmethod
    def _write(items: list) -> None:
        """Write the blocks ``items``, each spool's consecutive ones together."""
        views, spool = [], None
        for item in items + [None]:
            if item is None or item[0] is not spool:
                if views:
                    spool.spool.write(views)
                views, spool = [], None if item is None else item[0]
            if spool is None or spool.dropped:
                continue
            seg_spool, buf, lead, end = item
            if seg_spool.aligned:
                buf[:lead] = seg_spool.carry  # the page's bytes before the block (carried from the one before)
                cut = align_down(end)
                seg_spool.carry = buf[cut:end]
            else:
                cut = end
            if cut:
                views.append(memoryview(buf)[:cut])

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, seg_spool: _SegmentSpool, buf, lead: int, end: int) -> None:
        """Write buf[lead:end] to the spool (an aligned one: from its page start), then give buf back
        to the buffers."""
        self._raise()
        self._batch.append((seg_spool, buf, lead, end))
        self._batch_bytes += end - lead
        if self._batch_bytes >= SPOOL_WRITE_BYTES or len(self._batch) >= SPOOL_WRITE_BLOCKS:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._batch:
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            self._queue.put(batch)

    def kick(self) -> None:
        """Have the blocks put so far written, without waiting for it."""
        self._raise()
        self._hand_over()

    def flush(self) -> None:
        """Wait until every block put is written."""
        self._raise()
        self._hand_over()
        self._queue.join()
        self._raise()

    def close(self) -> None:
        self._error = self._error or _NoSpool("closed")  # drop what is still queued
        self._batch = []
        self._queue.put(None)
        self._thread.join()


class _Spools:
    """The segments' spools of one upload (at most ``limit``) and their writer thread."""

    def __init__(self, store: Store, block_size: int, limit: int):
        self.store, self.block_size, self.limit = store, block_size, limit
        self.made = 0
        self.live: list[_SegmentSpool] = []  # written as the scan goes
        self.writer: _SpoolWriter | None = None
        self.buffers = block_buffers(block_size + _BLOCK_HEAD + _BLOCK_SLACK)
        self._dropped: list[_SegmentSpool] = []  # removed by close()

    @property
    def open(self) -> bool:
        """True while a segment may be written as it is read (the scan then hands over bodies)."""
        return bool(self.live) or self.made < self.limit

    def new(self, sid: int, first: int) -> _SegmentSpool | None:
        if self.made >= self.limit:
            return None
        self.made += 1
        if self.writer is None:
            self.writer = _SpoolWriter(self.buffers)
        seg_spool = _SegmentSpool(self.store.open_spool(), self.writer, self.buffers, sid, first, self.block_size)
        self.live.append(seg_spool)
        return seg_spool

    def drop(self, seg_spool: _SegmentSpool) -> None:
        """Write no more of it (its temp object is removed by ``close``, once the writer is done with it)."""
        seg_spool.dropped = True
        self.live.remove(seg_spool)
        self._dropped.append(seg_spool)

    def finish(self, plan: list[PlannedObject]) -> None:
        """The scan is over: close the last blocks of the plan's own Stream Objects; drop the other spools
        (and a segment's whose last block no index entry holds: it is built the usual way)."""
        keep = []
        for planned in plan:
            if planned.spooled:
                seg = planned.streams[0][1]
                try:
                    seg.spool.finish()
                    keep.append(seg.spool)
                except _NoSpool:
                    seg.spool = None
        for seg_spool in list(self.live):
            if not any(seg_spool is k for k in keep):
                self.drop(seg_spool)
        if self.writer is not None:
            self.writer.kick()  # the last blocks written while the prepare commit runs

    def publish(self, seg_spool: _SegmentSpool, key: str) -> ObjectBuilder:
        """The segment's object, whole and durable under ``key`` (its blocks written, then its index
        and footer; fsync and rename as a put)."""
        self.writer.flush()
        tail = seg_spool.builder.finish()
        seg_spool.spool.publish(key, seg_spool.carry + tail)
        self.live.remove(seg_spool)
        return seg_spool.builder

    def close(self) -> None:
        """Stop the writer; remove every temp object not published."""
        if self.writer is not None:
            self.writer.close()
        for seg_spool in self.live + self._dropped:
            seg_spool.spool.discard()
        self.live, self._dropped = [], []
