"""The second, streamed read of the WAL that builds the objects of an upload above KEEP_SCANNED_BYTES
(issues 13 and 19): large sequential reads from a read-ahead thread, records decoded in bulk and
checked against the scan, DataBlocks cut from the chunks.

Chunks are made tiny here (CHUNK_READ_BYTES 8 KiB, one chunk read ahead) so records straddle chunk
ends, some span several chunks, and streams interleave within a chunk: the objects must be byte for
byte those built from the bodies the scan kept, and a record rewritten between the scan and the
read (a valid record, another body) must be refused before the commit.
"""

from __future__ import annotations

import os

import pytest

from walctl.errors import RefusedError
from walctl.format import record as rec
from walctl.pipeline import upload as upload_mod
from walctl.pipeline.upload import run as upload_run
from walctl.pipeline.upload import spool as upload_spool
from walctl.pipeline.upload import walread as upload_walread
from walctl.store import manifest as mf
from walctl.store.local import LocalStore

from storehelpers import append, make_wal, read_back

KiB = 1 << 10


def _objects(store) -> list[bytes]:
    return [store.read_all(o.key) for o in mf.load_latest(store).objects]


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)  # no object written as the scan reads (S3's way)
    monkeypatch.setattr(upload_walread, "CHUNK_READ_BYTES", 8 * KiB)
    monkeypatch.setattr(upload_walread, "READ_AHEAD_CHUNKS", 1)


@pytest.mark.parametrize("split_size", [1 << 30, 8 * KiB])  # one Stream Set Object; a Stream Object each
def test_streamed_objects_are_the_kept_ones_byte_for_byte(tmp_path, monkeypatch, tiny_chunks, split_size):
    wal = make_wal(tmp_path)
    # interleaved streams; 20 KiB records span several 8 KiB chunks, 300 B ones share them
    appended = append(wal, {1: (40, 300), 2: (12, 20 * KiB), 3: (25, 1000), 4: (3, 5000)})
    kept = LocalStore(str(tmp_path / "kept"))
    upload_mod.upload(wal, kept, trim=False, block_size=4 * KiB, split_size=split_size)
    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 0)  # as an upload of more than 64 MiB
    streamed = LocalStore(str(tmp_path / "streamed"))
    result = upload_mod.upload(wal, streamed, trim=False, block_size=4 * KiB, split_size=split_size)
    assert result.records == 40 + 12 + 25 + 3
    assert _objects(streamed) == _objects(kept) and len(_objects(kept)) >= 1
    back = read_back(streamed)
    assert {sid: [p for _, p in batches] for sid, batches in back.items()} == appended


def test_a_record_rewritten_whole_after_the_scan_is_refused(tmp_path, monkeypatch, tiny_chunks):
    """A valid record (header and body crcs right) with another body at the same offset: only the
    comparison with the scan's crc can tell; nothing is committed."""
    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 0)
    wal = make_wal(tmp_path)
    append(wal, {1: (30, 1000), 2: (30, 1000)})
    store = LocalStore(str(tmp_path / "store"))
    real_commit = mf.commit
    seen: list = []

    def commit_then_rewrite(store_, change, **kwargs):
        done = real_commit(store_, change, **kwargs)
        if not seen:  # after the prepare: the 20th record of the log, same length, other payload
            from walctl.format.header import HEADERS_SIZE

            with open(wal, "r+b") as f:
                f.seek(HEADERS_SIZE)
                log = f.read(64 * KiB)
            offset = 0
            for _ in range(19):
                offset += rec.SIZE + int.from_bytes(log[offset + 4:offset + 8], "big")
                while not int.from_bytes(log[offset:offset + 4], "big"):  # block padding: next 4 KiB block
                    offset = (offset // 4096 + 1) * 4096
            length = int.from_bytes(log[offset + 4:offset + 8], "big")
            body = bytearray(log[offset + rec.SIZE:offset + rec.SIZE + length])
            body[-1] ^= 0xFF  # the payload's last byte: still a StreamRecordBatch of the same stream
            with open(wal, "r+b") as f:
                f.seek(HEADERS_SIZE + offset)
                f.write(rec.encode_record(offset, bytes(body)))
                os.fsync(f.fileno())
        seen.append(kwargs.get("command"))
        return done

    monkeypatch.setattr(mf, "commit", commit_then_rewrite)
    with pytest.raises(RefusedError, match="changed during the upload.*is another record now"):
        upload_mod.upload(wal, store)
    assert "upload" not in seen
    doc = mf.load_latest(store)
    assert doc.objects == [] and doc.wal_uploads == {}


def test_an_upload_opens_the_wal_once_for_its_scan_and_second_reads(tmp_path, monkeypatch, tiny_chunks):
    """Issue 29: the WAL is opened once a run (read-only) and that handle serves the scan and the
    second read of every object; the second read reopened the device by path for each segment."""
    import walctl.device

    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 0)
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (20, 3000), 2: (20, 3000), 3: (20, 3000)})
    real_open = walctl.device.open_device
    opened: list[tuple[str, bool]] = []

    def counting_open(path, *args, **kwargs):
        opened.append((str(path), kwargs.get("writable")))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(walctl.device, "open_device", counting_open)
    store = LocalStore(str(tmp_path / "store"))
    result = upload_mod.upload(wal, store, trim=False, block_size=4 * KiB, split_size=8 * KiB)
    assert len(result.objects) == 3 and result.records == 60  # a Stream Object each: three second reads
    assert opened == [(wal, False)]
    back = read_back(store)
    assert {sid: [p for _, p in batches] for sid, batches in back.items()} == appended
