"""The writer against a failing device: nothing is acknowledged that was not made durable."""

from __future__ import annotations

import pytest

from walctl.device import FaultyDevice, MemoryDevice
from walctl.errors import IOFailure
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import WalHeader
from walctl.wal import reader
from walctl.wal.headers import read_headers, write_slot
from walctl.wal.writer import WalWriter

MiB = 1 << 20


def memory_wal(capacity=4 * MiB) -> MemoryDevice:
    mem = MemoryDevice(capacity)
    header = WalHeader(capacity=capacity, sliding_window_max_length=1 * MiB, last_write_timestamp_ns=1)
    write_slot(mem, 0, header)
    write_slot(mem, 1, header.with_(last_write_timestamp_ns=2))
    return mem


@pytest.mark.parametrize("fail_after,iodepth,torn", [(0, 1, None), (5, 1, None), (7, 4, None), (20, 8, 4096)])
def test_eio_mid_stream_acknowledges_only_durable_records(fail_after, iodepth, torn):
    mem = memory_wal()
    # the writer's own header writes count as writes too: it writes none here before blocks
    faulty = FaultyDevice(mem, fail_writes_after=fail_after, torn_write_bytes=torn)
    acks = []
    writer = WalWriter(faulty, read_headers(mem), 0, iodepth=iodepth, on_ack=lambda o, t: acks.append((o, t)))
    with pytest.raises(IOFailure):
        for i in range(200):
            writer.append(StreamRecordBatch(0, 0, i, 1, bytes([i % 251]) * 3000).encode(), i)
            writer.submit_open_block()
        writer.drain()
    with pytest.raises(IOFailure):
        writer.close()  # a failed writer does not claim a clean shutdown
    image = MemoryDevice(len(mem.data))  # the writer closed its device: read the bytes it left
    image.data[:] = mem.data
    state = read_headers(image)
    assert state.header.shutdown_type == 0  # (the memory WAL's header was never rewritten)
    entries, result = reader.run_scan(image, state.header.with_(shutdown_type=1))
    recovered = {e.offset: e for e in entries}
    assert len(acks) <= fail_after
    if iodepth == 1:  # one block per record, one at a time: exactly the successful writes are acked
        assert len(acks) == fail_after
    for offset, i in acks:
        assert recovered[offset].batch.base_offset == i
        assert recovered[offset].batch.payload == bytes([i % 251]) * 3000
    assert not result.corrupt
