"""The scan's read pattern (issue 19): 1 MiB aligned chunks into one reused buffer, and a
record across a chunk's end is not read twice (the chunk's tail moves to the front and the
device read goes on from the chunk's end): a whole scan reads the log's bytes about once."""

from __future__ import annotations

from walctl.format.header import ALIGN
from walctl.wal import reader
from walctl.wal.readsession import open_reader

from walhelpers import append_records, new_wal

KiB, MiB = 1 << 10, 1 << 20


def _scan(path: str, probe: bool = True):
    session = open_reader(path)
    dev, state = session.dev, session.state
    try:
        chunks = []
        real = dev.pread_into

        def counted(position, view):
            chunks.append(len(view))
            return real(position, view)

        dev.pread_into = counted
        entries, report = reader.run_scan(dev, state.header, probe=probe)
    finally:
        dev.close()
    return entries, report, chunks


def test_large_records_across_chunk_ends_are_read_once(tmp_path):
    path = new_wal(tmp_path / "w", 16 * MiB)
    acks = append_records(path, 90, size=70 * KiB, iodepth=2)  # ~6 MiB: records straddle 1 MiB chunk ends
    entries, report, chunks = _scan(path)
    assert [e.offset for e in entries] == [o for o, _ in acks] and not report.findings
    log = report.end_offset - report.start_offset
    # Once each, plus the last chunk's block past the end (a clean header says where it is).
    assert log < report.bytes_read <= log + 2 * ALIGN, (report.bytes_read, log)
    assert sum(chunks) == report.bytes_read and max(chunks) <= reader.CHUNK_BYTES + ALIGN


def test_a_crashed_log_reads_at_most_its_window_and_a_chunk_past_its_end(tmp_path):
    path = new_wal(tmp_path / "w", 16 * MiB)
    append_records(path, 90, size=70 * KiB, iodepth=2, clean=False)
    entries, report, chunks = _scan(path, probe=False)  # the probe reads the rest of the ring
    log = report.end_offset - report.start_offset
    assert len(entries) == 90 and not report.corrupt
    window = report.header.sliding_window_max_length  # a crashed log is read one window past its end
    assert log < report.bytes_read <= log + window + reader.CHUNK_BYTES, (report.bytes_read, log, window)
