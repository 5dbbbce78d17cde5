"""Regressions from review: each scenario once made walctl lose, hide or refuse data."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from walctl.device import FaultyDevice, open_device
from walctl.errors import RefusedError
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE, SHUTDOWN_UNGRACEFUL
from walctl.wal.headers import read_headers, write_header
from walctl.wal.init import init_wal
from walctl.wal.trim import trim_wal
from walctl.wal.writer import WalWriter

from walhelpers import append_records, new_wal, physical, poke, scan_file

KiB, MiB = 1 << 10, 1 << 20


def batch(i: int, size: int) -> bytes:
    return StreamRecordBatch(0, 0, i, 1, bytes([65 + i % 26]) * size).encode()


class Gated(FaultyDevice):
    """Holds every record-area write until ``gate`` is set (a slow disk)."""

    def __init__(self, inner, gate):
        super().__init__(inner)
        self.gate = gate

    def pwrite(self, offset, buf):
        if offset >= HEADERS_SIZE:
            self.gate.wait()
        super().pwrite(offset, buf)


def test_block_torn_mid_record_is_sealed_and_the_wal_stays_writable(tmp_path):
    path = new_wal(tmp_path / "w", 4 * MiB)
    gate = threading.Event()
    dev = Gated(open_device(path, writable=True), gate)
    state = read_headers(dev)
    state = write_header(dev, state, state.header.with_(shutdown_type=SHUTDOWN_UNGRACEFUL))
    acks = []
    # batch_interval_s=0: block 1 is written at once (with group commit the next records would join it)
    writer = WalWriter(dev, state, 0, iodepth=1, on_ack=lambda o, t: acks.append(o), batch_interval_s=0)
    writer.append(batch(0, 100), 0)  # block 1, held in flight
    for i in range(1, 4):  # batched into block 2: records at 4096, 4253, 4410 (the last spans sectors)
        writer.append(batch(i, 100 if i < 3 else 6000), i)
    dev.fail_writes_after = dev.writes + 1  # the power goes during block 2, after its first 4 KiB
    dev.torn_write_bytes = 4096
    gate.set()
    with pytest.raises(Exception):
        writer.drain()
    writer.abort()
    entries, result = scan_file(path)
    assert not result.corrupt and [f.kind for f in result.findings] == ["torn_tail"]
    more = append_records(path, 2)  # once refused with "sealing did not leave a clean log"
    entries, result = scan_file(path)
    assert result.findings == [] and [e.offset for e in entries][-2:] == [o for o, _ in more]
    assert acks == [0]


def test_crash_hole_across_the_end_of_a_lap_is_sealed(tmp_path):
    capacity = HEADERS_SIZE + 60 * KiB
    ring = capacity - HEADERS_SIZE
    path = new_wal(tmp_path / "w", capacity)
    first = append_records(path, 6, size=5000, iodepth=1, flush_each=True)
    trim_wal(path, first[4][0])
    second = append_records(path, 4, size=5000, iodepth=1, flush_each=True, clean=False)
    last_in_lap0 = [o for o, _ in second if o < ring][-1]
    next_lap = [o for o, _ in second if o >= ring]
    assert next_lap, "the log must cross the end of the lap"
    # the lap-end padding block and the first block of the next lap were lost together
    poke(path, physical(path, last_in_lap0 + 8192), bytes(4096))
    poke(path, physical(path, next_lap[0]), bytes(4096))
    entries, result = scan_file(path)
    assert not result.corrupt
    append_records(path, 1)  # once refused: "record end ... crosses the end of the lap"
    append_records(path, 1)
    _, result = scan_file(path)
    assert result.findings == []


def test_sigterm_while_waiting_for_an_io_slot_keeps_queued_records(tmp_path):
    path = new_wal(tmp_path / "w", 16 * MiB)
    gate = threading.Event()
    dev = Gated(open_device(path, writable=True), gate)
    acks = []
    writer = WalWriter(dev, read_headers(dev), 0, iodepth=1, on_ack=lambda o, t: acks.append(t))

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    threading.Timer(0.6, gate.set).start()
    queued = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for i in range(1000):
                writer.append(batch(i, 20000), i)  # block 1 in flight, then batches wait for the slot
                queued += 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    writer.close()
    assert queued > 1 and len(acks) == queued  # every record that got an offset became durable


def test_init_refuses_a_device_with_data_but_no_header(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    append_records(path, 3)
    poke(path, 0, bytes(HEADERS_SIZE))  # both header slots destroyed; the records are still there
    with pytest.raises(RefusedError) as info:
        init_wal(path, 1 * MiB)
    assert "--force" in info.value.hint
    init_wal(path, 1 * MiB, force=True)
    entries, result = scan_file(path)
    assert entries == [] and result.findings == []


def test_init_of_an_all_zero_file_needs_no_force_and_no_wipe(tmp_path):
    path = tmp_path / "zeros.img"
    path.write_bytes(bytes(1 * MiB))
    result = init_wal(str(path), 1 * MiB)
    assert result.wiped_bytes == 0
