"""Where a piped append's "pack" time goes (issue 31): the writer counts the time appends wait for a
free I/O slot (every write in flight, closed blocks queued) apart from packing, so a device-bound
append no longer reads as a slow packer; and feed_frames reports the appender's CPU time apart."""

from __future__ import annotations

import io
import threading
import time

import pytest
from test_writer_append_many import EPOCH, STREAM, LONG_S, payload
from walhelpers import new_wal

from walctl.device import FaultyDevice, open_device
from walctl.format import framepack
from walctl.format.checkpoint import Checkpoint
from walctl.format.header import HEADERS_SIZE
from walctl.wal.feed import FeedStats, Source, feed_frames
from walctl.wal.headers import read_headers
from walctl.wal.writer import WalWriter
from walctl.wal.writer_blocks import FrameSpec

KiB, MiB = 1 << 10, 1 << 20
HELD_S = 0.2

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


def gated_writer(tmp_path, gate: threading.Event) -> WalWriter:
    class Gated(FaultyDevice):
        def pwrite(self, offset, buf):
            if offset >= HEADERS_SIZE:
                gate.wait()
            return super().pwrite(offset, buf)

    path = new_wal(tmp_path / "w.img", 32 * MiB)
    dev = Gated(open_device(path, writable=True))
    return WalWriter(dev, read_headers(dev), 0, batch_interval_s=LONG_S, iodepth=1, checkpoint=Checkpoint(0))


def test_appends_waiting_for_a_free_slot_are_counted_as_slot_wait_and_not_as_pack_cpu(tmp_path):
    gate = threading.Event()
    writer = gated_writer(tmp_path, gate)
    payloads = [payload(i, 60 * KiB) for i in range(40)]  # ~2.4 MiB: ten blocks through one slot
    data = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    stats = FeedStats()
    acks = []
    writer.on_frames = lambda item: acks.append(item.count)
    result = {}

    def feed():
        spec = FrameSpec(False, STREAM, EPOCH, 1 << 30)
        result["end"] = feed_frames(writer, Source(io.BytesIO(data), owned=False), spec, 0, 1 << 60,
                                    lambda: False, stats)

    appender = threading.Thread(target=feed)
    appender.start()
    # The first write is held: the appender closes blocks until run_ahead of them wait, then waits too.
    deadline = time.monotonic() + 10
    while len(writer._ready) <= writer.run_ahead and appender.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(writer._ready) == writer.run_ahead + 1 and appender.is_alive()
    waiting_since = time.perf_counter_ns()
    time.sleep(HELD_S)  # how long the device holds the appender back
    gate.set()
    appender.join(10)
    writer.close()
    held_ns = time.perf_counter_ns() - waiting_since
    assert result["end"].next_base == len(payloads) and sum(acks) == len(payloads)
    # At least the time it was held is counted as waiting for a slot: the pack stage's wall clock
    # holds it, its CPU time does not.
    assert writer.slot_wait_ns >= HELD_S * 1e9
    assert stats.pack_ns >= writer.slot_wait_ns >= HELD_S * 1e9
    assert stats.pack_cpu_ns < held_ns - HELD_S * 1e9 / 2
