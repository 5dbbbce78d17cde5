"""append_frames lets a waiting completion in at each block boundary (issue 31): the AIO reaper, once it
has taken completions off the ring, waits for the writer's lock, and until it has it the writer counts
their slots busy. An append_frames call packs a whole read (some 16 blocks of 256 KiB for 4 MiB); the
reaper used to wait for all of it (p99 1.5 ms per completion at 4 KiB records)."""

from __future__ import annotations

import threading

import pytest
from test_writer_append_many import EPOCH, LONG_S, STREAM, payload
from walhelpers import new_wal, scan_file

from walctl.device import open_device
from walctl.errors import IOFailure
from walctl.format import framepack
from walctl.format.checkpoint import Checkpoint
from walctl.wal.headers import read_headers
from walctl.wal.writer import WalWriter
from walctl.wal.writer_blocks import FrameSpec

KiB, MiB = 1 << 10, 1 << 20
WAIT_S = 10  # bounds every wait: a hang fails, it never blocks the suite

# Each test on the default engine (io_uring) and on native AIO (tests/conftest.py both_engines).
pytestmark = [pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here"),
              pytest.mark.usefixtures("both_engines")]


class ReapedLater:
    """A write queue whose first write is completed by a "reaper" thread while the appender is still
    packing (the appender, holding the writer's lock, waits in its second submit until the reaper
    calls the completion); the others are held until ``release``, then completed in order by a
    thread, as they come. Writes reach ``dev`` as they complete."""

    engine = "test"

    def __init__(self, dev, error: BaseException | None = None):
        self.dev, self.error = dev, error
        self.held: list = []
        self.submits = 0
        self.calling = threading.Event()  # the reaper is calling the first write's completion
        self.cond = threading.Condition()
        self.released = self.closed = False
        self.threads: list[threading.Thread] = []

    def submit(self, offset, buf, done, length=None) -> None:
        self.submits += 1
        if self.submits == 1:
            self._start(self._reap_first, offset, buf, done, length)
            return
        if self.submits == 2:
            assert self.calling.wait(WAIT_S)
        with self.cond:
            self.held.append((offset, buf, done, length))
            self.cond.notify_all()

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _reap_first(self, offset, buf, done, length) -> None:
        if self.error is None:
            with memoryview(buf) as mv:
                self.dev.pwrite(offset, mv[:length])
        self.calling.set()
        done(self.error, 0)  # waits for the writer's lock, as the AIO reaper's callback does

    def release(self) -> None:
        """From now on, complete every held and later write (in a thread, in submission order)."""
        self.released = True
        self._start(self._complete_held)

    def _complete_held(self) -> None:
        while True:
            with self.cond:
                if not self.cond.wait_for(lambda: self.held or self.closed, WAIT_S) or not self.held:
                    return
                offset, buf, done, length = self.held.pop(0)
            with memoryview(buf) as mv:
                self.dev.pwrite(offset, mv[:length])
            done(None, 0)

    def poll(self) -> int:
        return 0

    def wait(self, timeout_s=None, *, held: bool = False) -> int:
        return 0

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for thread in self.threads:
            if thread is not threading.current_thread():
                thread.join(WAIT_S)


def writer_with(tmp_path, queue_error: BaseException | None = None):
    path = new_wal(tmp_path / "w.img", 32 * MiB)
    dev = open_device(path, writable=True)
    # iodepth 32: every block's write starts at once, so the appender never waits for a slot (a wait
    # would let the reaper in anyway); blocks close only when full.
    writer = WalWriter(dev, read_headers(dev), 0, iodepth=32, batch_interval_s=LONG_S, checkpoint=Checkpoint(0))
    writer._queue.close()
    queue = ReapedLater(dev, queue_error)
    writer._queue = queue
    return path, writer, queue


def read_of(count: int, size: int) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in (payload(i, size) for i in range(count)))


def test_a_completion_waiting_for_the_lock_is_booked_at_the_next_block_not_after_the_call(tmp_path):
    path, writer, queue = writer_with(tmp_path)
    data = read_of(1024, 4 * KiB - 4)  # one 4 MiB read: 16 blocks
    returned = threading.Event()
    acks = []  # (first record offset, records, acknowledged before append_frames returned)
    writer.on_frames = lambda item: acks.append((item.offset, item.count, not returned.is_set()))
    spec = FrameSpec(False, STREAM, EPOCH, 1 << 20)
    count, pos, stop, _ = writer.append_frames(data, 0, len(data), spec, 0, 1 << 40)
    returned.set()
    assert (count, pos, stop) == (1024, len(data), framepack.STOP_INPUT)
    assert queue.submits >= 15  # every full block's write started in the call
    # The first block was durable and its completion waiting while the appender packed the next 14:
    # it was booked (acknowledged, its slot free) in the call, not once the call let go of the lock.
    assert acks and acks[0][0] == 0 and acks[0][2], acks[:2]
    queue.release()
    writer.close()
    # Acknowledged in log order, each record once, and the log reads back whole.
    assert [a[0] for a in acks] == sorted(a[0] for a in acks)
    assert sum(a[1] for a in acks) == 1024
    assert writer.records_acked == 1024
    entries, result = scan_file(path)
    assert not result.findings
    assert [e.batch.payload for e in entries] == [payload(i, 4 * KiB - 4) for i in range(1024)]
    assert [e.batch.base_offset for e in entries] == list(range(1024))


def test_a_failed_write_booked_between_blocks_stops_the_call(tmp_path):
    _, writer, queue = writer_with(tmp_path, IOFailure("write failed: injected"))
    data = read_of(1024, 4 * KiB - 4)
    acks = []
    writer.on_frames = lambda item: acks.append(item.count)
    spec = FrameSpec(False, STREAM, EPOCH, 1 << 20)
    # The failure is seen at the block boundary where the completion is let in, not at a later call.
    with pytest.raises(IOFailure, match="injected"):
        writer.append_frames(data, 0, len(data), spec, 0, 1 << 40)
    assert queue.submits < 16  # it stopped placing blocks
    queue.release()
    writer.abort()
    assert acks == []  # nothing at or after the failed block is acknowledged
