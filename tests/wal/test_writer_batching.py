"""Group commit in the WAL writer (issue 13): records share a block while its batch interval runs
or while every I/O slot is busy; a full block is written at once; acknowledgements still wait for
the block's write. And flush timing travels with each write completion (issue 12 item 4)."""

from __future__ import annotations

import json
import os
import threading

import pytest
from walhelpers import new_wal, run_walctl, scan_file

from walctl.device import FaultyDevice, MemoryDevice, open_device
from walctl.device.fdio import BufferedDevice, DirectDevice
from walctl.device.writequeue import ThreadWriteQueue
from walctl.device.buffers import aligned_buffer
from walctl.errors import UsageError
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE
from walctl.wal.headers import read_headers
from walctl.wal.writer import BLOCK_SOFT_LIMIT_BYTES, WalWriter

KiB, MiB = 1 << 10, 1 << 20
LONG_S = 3600.0  # a batch interval no test run outlives: only fullness, a drain or a close writes
REC = 24 + 33 + 1000  # bytes of one record of body(): record header, StreamRecordBatch header, payload


def body(i: int, size: int = 1000) -> bytes:
    return StreamRecordBatch(0, 0, i, 1, bytes([65 + i % 26]) * size).encode()


class Gated(FaultyDevice):
    """Holds every record-area write until ``gate`` is set (a slow disk); counts the writes that started."""

    def __init__(self, inner, gate):
        super().__init__(inner)
        self.gate = gate
        self.started = 0

    def pwrite(self, offset, buf):
        if offset >= HEADERS_SIZE:
            self.started += 1
            self.gate.wait()
        return super().pwrite(offset, buf)


def _writer(tmp_path, *, gate=None, **kwargs):
    path = new_wal(tmp_path / "w.img", 16 * MiB)
    dev = open_device(path, writable=True)
    if gate is not None:
        dev = Gated(dev, gate)
    acks: list[int] = []
    writer = WalWriter(dev, read_headers(dev), 0, on_ack=lambda o, t: acks.append(o), **kwargs)
    return path, dev, writer, acks


@pytest.mark.usefixtures("both_engines")  # the default engine and native AIO (tests/conftest.py)
def test_records_share_a_block_while_its_interval_runs_and_are_acknowledged_only_after_its_write(tmp_path):
    path, _, writer, acks = _writer(tmp_path, batch_interval_s=LONG_S, iodepth=4)
    offsets = [writer.append(body(i), i) for i in range(100)]  # 100 x ~1.1 KiB: well under the soft limit
    assert writer.blocks_written == 0 and acks == []  # nothing written yet, so nothing acknowledged
    writer.drain()
    assert writer.blocks_written == 1 and acks == offsets
    writer.close()
    entries, result = scan_file(path)
    assert [e.offset for e in entries] == offsets and not result.findings


@pytest.mark.usefixtures("both_engines")  # the default engine and native AIO (tests/conftest.py)
def test_the_timer_writes_an_idle_appenders_block_once_its_interval_passes(tmp_path):
    acked = threading.Event()
    path, _, writer, acks = _writer(tmp_path, batch_interval_s=0.05)
    writer.on_ack = lambda o, t: (acks.append(o), acked.set())
    writer.append(body(0), 0)
    writer.append(body(1), 1)
    # no drain, no submit_open_block: the appender stays idle, the timer thread closes the block
    assert acked.wait(60), "the batch interval passed but the block was never written"
    assert writer.blocks_written == 1 and acks == [0, REC]
    writer.close()


@pytest.mark.usefixtures("both_engines")  # the default engine and native AIO (tests/conftest.py)
def test_a_full_block_is_written_at_once_without_waiting_for_the_interval(tmp_path):
    acked = threading.Event()
    path, _, writer, acks = _writer(tmp_path, batch_interval_s=LONG_S)
    writer.on_ack = lambda o, t: (acks.append(o), acked.set())
    count = BLOCK_SOFT_LIMIT_BYTES // REC + 1  # one record more than the soft limit holds
    offsets = [writer.append(body(i), i) for i in range(count)]
    assert acked.wait(60), "the full block waited for its batch interval"
    assert acks == offsets[:-1]  # the first block, full; the last record waits in the open block
    writer.drain()
    assert acks == offsets and writer.blocks_written == 2
    writer.close()


def test_without_an_interval_records_join_the_open_block_only_while_every_slot_is_busy(tmp_path):
    gate = threading.Event()
    path, dev, writer, acks = _writer(tmp_path, gate=gate, batch_interval_s=0, iodepth=2)
    offsets = [writer.append(body(i), i) for i in range(5)]
    # records 0 and 1 took the two idle slots alone; 2, 3 and 4 waited together for a slot
    assert offsets == [0, 4096, 8192, 8192 + REC, 8192 + 2 * REC]
    assert acks == []
    gate.set()
    writer.close()
    assert acks == offsets and writer.blocks_written == 3 and dev.started == 3


def test_a_failed_write_acknowledges_none_of_the_records_batched_into_it(tmp_path):
    path = new_wal(tmp_path / "w.img", 16 * MiB)
    dev = FaultyDevice(open_device(path, writable=True), fail_writes_after=None)
    acks: list[int] = []
    writer = WalWriter(dev, read_headers(dev), 0, on_ack=lambda o, t: acks.append(o), batch_interval_s=LONG_S)
    first = [writer.append(body(i), i) for i in range(10)]
    writer.drain()
    dev.fail_writes_after = dev.writes  # the next block's write fails
    for i in range(10, 20):
        writer.append(body(i), i)
    with pytest.raises(Exception):
        writer.drain()
    writer.abort()
    assert acks == first


def test_batch_interval_must_not_be_negative(tmp_path):
    path, _, writer, _ = _writer(tmp_path)
    with pytest.raises(UsageError):
        writer.batch_interval_s = -0.001
    writer.close()


def test_append_batch_interval_option(tmp_path):
    wal = new_wal(tmp_path / "w.img", 16 * MiB)
    bad = run_walctl("append", wal, "--batch-interval", "2x", "x")
    assert bad.returncode == 2 and "--batch-interval" in bad.stderr.decode()
    too_long = run_walctl("append", wal, "--batch-interval", "2m", "x")
    assert too_long.returncode == 2
    lines = b"".join(b"r%d\n" % i for i in range(50))
    for value in ("0", "0.5ms", "1s"):
        res = run_walctl("append", wal, "--input", "-", "--batch-interval", value, "--json", stdin=lines)
        assert res.returncode == 0, res.stderr
        out = [json.loads(x) for x in res.stdout.splitlines()]
        assert [o["stream_offset"] for o in out if o["type"] == "record"][-50:] == \
            [out[-1]["next_base_offset"] - 50 + i for i in range(50)]
        assert out[-1]["records"] == 50


# -- flush timing with each completion (no thread-local) -----------------------------------
def test_buffered_pwrite_returns_its_fdatasync_time_and_direct_returns_zero(tmp_path):
    path = tmp_path / "d.img"
    path.write_bytes(bytes(1 << 20))
    buf = aligned_buffer(4096)
    buffered = BufferedDevice(str(path), os.open(path, os.O_RDWR | os.O_CLOEXEC), writable=True)
    try:
        assert buffered.pwrite(0, buf) > 0
    finally:
        buffered.close()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_DIRECT | os.O_DSYNC)
    except OSError:
        pytest.skip("this filesystem refuses O_DIRECT")
    direct = DirectDevice(str(path), fd, writable=True)
    try:
        assert direct.pwrite(0, buf) == 0
    finally:
        direct.close()


def test_thread_queue_hands_each_completion_its_own_flush_time(tmp_path):
    path = tmp_path / "q.img"
    path.write_bytes(bytes(1 << 20))
    dev = BufferedDevice(str(path), os.open(path, os.O_RDWR | os.O_CLOEXEC), writable=True)
    memory = MemoryDevice(1 << 20)
    done: list[tuple] = []
    for device, positive in ((dev, True), (memory, False)):
        queue = ThreadWriteQueue(device, 2)
        for i in range(4):
            queue.submit(i * 4096, aligned_buffer(4096),
                         lambda error, flush_ns, p=positive: done.append((error, flush_ns, p)))
        queue.close()
    dev.close()
    assert len(done) == 8
    assert all(error is None and (flush_ns > 0 if p else flush_ns == 0) for error, flush_ns, p in done)
