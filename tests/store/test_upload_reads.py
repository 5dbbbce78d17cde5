"""What one upload reads of its WAL, counted by the fd devices' read accounting (issue 12 item 3).

Bytes read are deterministic here: one stream, each record appended and drained on its own, so
each record fills one 64 KiB block. One upload reads:
  - the two header slots (8 KiB),
  - the scan: the log, and one 4 KiB block past its end (a clean header's nextOffset),
  - the objects, built a DataBlock at a time: nothing more when the scan wrote them as it read
    (a local store's Stream Objects) or kept the bodies (up to KEEP_SCANNED_BYTES of them), else
    the stream's span of the log again, in large sequential reads: from the 4 KiB block holding
    its first record to the one holding its last record's end,
  - the trim: the two header slots and the 4 KiB block holding the last uploaded record's header.
So each WAL byte is read once (twice above KEEP_SCANNED_BYTES when the objects are not written as
read: S3, a Stream Set Object); the trim scans nothing (it used
to scan the whole log again when the WAL had no trusted checkpoint, e.g. after a writer's crash).
"""

from __future__ import annotations

import pytest

from walctl.device.blockio import bytes_read_total
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE, StreamRecordBatch
from walctl.format.header import HEADERS_SIZE
from walctl.pipeline.upload import upload
from walctl.wal.lifecycle import open_writer, read_wal_state
from walctl.device import open_device

from storehelpers import make_wal, read_back

KiB, MiB = 1 << 10, 1 << 20
BLOCK = 4 * KiB
RECORDS = 40
RECORD_BLOCK = 64 * KiB  # each record (60 KiB payload + headers) is one block of the log


def _fill(wal: str, *, crash: bool) -> int:
    """RECORDS records of one stream, one block each; returns the end of the log."""
    writer = open_writer(wal).writer
    for i in range(RECORDS):
        writer.append(StreamRecordBatch(1, 0, i, 1, bytes([i]) * (60 * KiB)).encode())
        writer.drain()
    end = writer.next_block
    if crash:
        writer.abort()  # no clean-shutdown header: the log is not trusted, the next writer scans
    else:
        writer.close()
    return end


def _header(wal: str):
    dev = open_device(wal, writable=False)
    try:
        return read_wal_state(dev, wal).header
    finally:
        dev.close()


# Only a local store writes an object as the scan reads it (S3 has no spools).
@pytest.mark.parametrize("backend, keep", [("local", "kept"), ("local", "read again"), ("local", "written as read"),
                                           ("s3", "kept"), ("s3", "read again")])
def test_one_upload_reads_each_wal_byte_once_and_the_trim_one_header(tmp_path, request, backend, keep, monkeypatch):
    from walctl.pipeline.upload import run as upload_run
    from walctl.pipeline.upload import spool as upload_spool

    store = request.getfixturevalue(f"{backend}_store")
    assert hasattr(store, "open_spool") == (backend == "local")
    if keep != "kept":  # as an upload of more than KEEP_SCANNED_BYTES does
        monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", RECORDS * RECORD_BLOCK // 2)
    if keep != "written as read":  # a store without spools (S3), or more segments than SPOOL_SEGMENTS
        monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    wal = make_wal(tmp_path)
    log = _fill(wal, crash=False)
    assert log == RECORDS * RECORD_BLOCK and (log <= upload_run.KEEP_SCANNED_BYTES) == (keep == "kept")
    before = bytes_read_total()
    result = upload(wal, store)
    read = bytes_read_total() - before
    assert result.records == RECORDS and result.trimmed_to == log - RECORD_BLOCK
    # The second read spans the first record's block (offset 0) to the block holding the last record's end.
    last_end = (RECORDS - 1) * RECORD_BLOCK + rec.SIZE + BATCH_HEADER_SIZE + 60 * KiB
    objects = -(-last_end // BLOCK) * BLOCK if keep == "read again" else 0
    assert read == HEADERS_SIZE + (log + BLOCK) + objects + (HEADERS_SIZE + BLOCK)
    assert sorted(o for o, _ in read_back(store)[1]) == list(range(RECORDS))


def test_the_trim_after_a_crashed_writer_reads_one_header_not_the_log(tmp_path, store):
    # The scan of a crashed writer's log also probes the rest of the ring (mid-log damage);
    # the trim only checks the record header at its offset and leaves recovery to the next writer.
    wal = make_wal(tmp_path)
    capacity = _header(wal).capacity
    log = _fill(wal, crash=True)
    before = bytes_read_total()
    result = upload(wal, store)
    read = bytes_read_total() - before
    assert result.trimmed_to == log - RECORD_BLOCK
    ring = capacity - HEADERS_SIZE
    assert read == HEADERS_SIZE + ring + (HEADERS_SIZE + BLOCK)  # the bodies were kept: no second read
    header = _header(wal)
    assert header.trim_offset == log - RECORD_BLOCK and not header.clean  # the next writer recovers
    opened = open_writer(wal)  # recovers from the new trim point: one record left, nothing damaged
    assert opened.scan is not None and opened.scan.records == 0 and opened.scan.corrupt == []
    opened.writer.append(StreamRecordBatch(1, 0, RECORDS, 1, b"after").encode())
    opened.writer.close()
    again = upload(wal, store)
    assert again.records == 1 and again.skipped_records == 0
    assert sorted(o for o, _ in read_back(store)[1]) == list(range(RECORDS + 1))
