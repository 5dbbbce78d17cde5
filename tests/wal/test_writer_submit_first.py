"""A completed write frees its slot for the next block before the completed block's records are
acknowledged (issue 31): printing acknowledgements never keeps the device idle. Durability is
unchanged: a record is acknowledged only once its block and every earlier one are durable."""

from __future__ import annotations

import io
import threading
import time

import pytest
from test_writer_append_many import EPOCH, STREAM, payload
from test_writer_slot_wait import gated_writer

from walctl.device import aligned_buffer, open_device
from walctl.device.aio import AioWriteQueue
from walctl.device.writequeue import open_write_queue
from walctl.errors import UsageError
from walctl.format import framepack
from walctl.wal.feed import Source, feed_frames
from walctl.wal.writer_blocks import FrameSpec

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")
def test_the_next_block_is_in_flight_before_the_completed_one_is_acknowledged(tmp_path):
    gate = threading.Event()
    writer = gated_writer(tmp_path, gate)  # one slot; the first write held until the gate opens
    payloads = [payload(i, 60 * KiB) for i in range(40)]  # ten blocks
    data = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    seen = []  # per acknowledged block: (its first stream offset, writes in flight, acked end so far)
    writer.on_frames = lambda item: seen.append((item.base_offset, writer._busy, writer.acked_end, item.count))
    spec = FrameSpec(False, STREAM, EPOCH, 1 << 30)
    appender = threading.Thread(target=feed_frames, args=(writer, Source(io.BytesIO(data), owned=False), spec,
                                                          0, 1 << 60, lambda: False))
    appender.start()
    deadline = time.monotonic() + 10
    while len(writer._ready) <= writer.run_ahead and appender.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(writer._ready) == writer.run_ahead + 1  # blocks wait for the one slot
    gate.set()
    appender.join(10)
    writer.close()
    assert [s[0] for s in seen] == sorted(s[0] for s in seen) and sum(s[3] for s in seen) == len(payloads)
    # When the first block's records were acknowledged, the second block's write had started.
    assert seen[0][1] == 1
    # ... and acknowledgements still wait for durability: each came with its block's end acknowledged.
    assert all(end > 0 for _, _, end, _ in seen) and writer.records_acked == len(payloads)


@pytest.mark.parametrize("engine", ["io_uring", "aio"])
def test_flush_submits_starts_the_writes_a_completion_callback_submitted(tmp_path, engine):
    path = tmp_path / "q.img"
    path.write_bytes(bytes(1 << 20))
    dev = open_device(str(path), writable=True)
    try:
        try:
            queue = open_write_queue(dev, 2, engine, reaper=False)
        except UsageError as exc:  # pragma: no cover - a kernel without it
            pytest.skip(f"{engine} is unavailable here: {exc}")
        assert isinstance(queue, AioWriteQueue) and queue.engine == engine
        if engine == "aio" and queue._ring is None:  # pragma: no cover
            queue.close()
            pytest.skip("native AIO's completion ring is not mapped here")
        # Completions posted and not reaped: the AIO context's ring read in Python, or the io_uring's in C.
        posted = queue._waiting if engine == "io_uring" else (lambda ring=queue._ring: ring.head != ring.tail)
        second_done = []
        first_saw = []
        buf_a, buf_b = aligned_buffer(4096), aligned_buffer(4096)
        buf_a[:], buf_b[:] = b"a" * 4096, b"b" * 4096

        def first(error, flush_ns=0):
            queue.submit(4096, buf_b, lambda e, f=0: second_done.append(e))
            queue.flush_submits()
            # The second write reaches the device now, not after this callback: its completion shows
            # up in the kernel's ring while this callback still runs.
            deadline = time.monotonic() + 10
            while not posted() and time.monotonic() < deadline:
                time.sleep(0.0005)
            first_saw.append(posted())

        queue.submit(0, buf_a, first)
        while not first_saw:
            queue.wait(1.0)
        while not second_done:
            queue.wait(1.0)
        queue.close()
        assert first_saw == [True] and second_done == [None]
        assert path.read_bytes()[:8192] == b"a" * 4096 + b"b" * 4096
    finally:
        dev.close()
