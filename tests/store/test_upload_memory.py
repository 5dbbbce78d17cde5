"""Upload in bounded memory (issue 19): peak RSS does not grow with the WAL's size.

The upload runs as its own process (``python -m walctl upload``); its peak RSS is read from
``/proc/<pid>/status`` (VmHWM) by a small wrapper around the CLI in that process. The WAL is
a sparse file (no prewrite) filled with large records, so building it is fast; the objects
are verified whole (footer, index, crcs, every block) and their payloads compared afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE
from walctl.store import manifest as mf
from walctl.store.local import LocalStore
from walctl.wal.lifecycle import init_wal, open_writer

KiB, MiB = 1 << 10, 1 << 20
RSS_BOUND = 256 * MiB  # issue 19: < 256 MiB at any WAL size

# Runs walctl's CLI, then reports its own peak RSS (VmHWM, from /proc) on the fd given in argv[1].
_WRAPPER = """
import atexit, os, sys
fd = int(sys.argv.pop(1))
def _report():
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    os.write(fd, hwm.encode())
atexit.register(_report)
from walctl.cli import main
sys.argv = ["walctl"] + sys.argv[1:]
main()
"""


def _fill(path: str, streams: int, record: int, total: int) -> tuple[dict[int, int], dict[int, bytes]]:
    """Append about ``total`` bytes of ``record``-byte payloads round-robin over ``streams``.

    Returns (stream -> end offset, stream -> its payload: each stream repeats one random payload).
    """
    writer = open_writer(path).writer
    ends = dict.fromkeys(range(1, streams + 1), 0)
    written = 0
    body_cache = {sid: os.urandom(record) for sid in ends}
    while written < total:
        for sid in ends:
            writer.append(StreamRecordBatch(sid, 0, ends[sid], 1, body_cache[sid]).encode())
            ends[sid] += 1
            written += record
    writer.close()
    return ends, body_cache


def _peak_rss_of(argv: list[str]) -> tuple[int, subprocess.CompletedProcess]:
    """Run the wrapper; returns (VmHWM bytes from /proc, completed process).

    (wait4's ru_maxrss is no check: it counts the forked image of this process before exec.)
    """
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", _WRAPPER, str(write_fd), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(write_fd,))
    os.close(write_fd)
    try:
        out = proc.stdout.read()
        err = proc.stderr.read()
        _, status, _ = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        proc.stdout.close()
        proc.stderr.close()
    with os.fdopen(read_fd, "rb") as f:
        line = f.read().decode()
    assert line.startswith("VmHWM:"), (line, err.decode())
    hwm = int(line.split()[1]) * KiB
    return hwm, subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture
def big_tmp(tmp_path):
    """tmp_path, emptied after the test: half a GiB of WAL and objects must not stay behind."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_upload_of_a_512_mib_wal_stays_under_256_mib_rss(big_tmp):
    tmp_path = big_tmp
    wal = str(tmp_path / "wal")
    init_wal(wal, 560 * MiB)  # a sparse file: nothing pre-written
    ends, payloads = _fill(wal, streams=3, record=1 * MiB - 64, total=512 * MiB)
    store_dir = tmp_path / "store"
    hwm, done = _peak_rss_of(["upload", wal, "--store", str(store_dir), "--json"])
    assert done.returncode == 0, done.stderr.decode()
    summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert summary["records"] == sum(ends.values())
    assert summary["payload_bytes"] >= 512 * MiB - 3 * MiB
    assert hwm < RSS_BOUND, f"upload peak RSS {hwm / MiB:.0f} MiB"
    # what was uploaded is all there: every stream complete in the manifest, objects whole
    store = LocalStore(str(store_dir), create=False)
    doc = mf.load_latest(store)
    assert {sid: span.end for sid, span in doc.streams.items()} == ends
    assert sum(o.size for o in doc.objects) > 512 * MiB
    for o in doc.objects:
        data = store.read_all(o.key)
        assert len(data) == o.size and obj.verify_object(data) == []
        footer = obj.Footer.decode(data, len(data) - obj.FOOTER_SIZE)
        for entry in obj.decode_index(data[footer.index_start_position:], footer):
            assert {b.payload for b in obj.iter_blocks(data, entry)} == {payloads[entry.stream_id]}
        del data


def test_a_large_object_goes_to_s3_in_parts_streamed_from_the_wal(tmp_path, s3_server, s3_bucket):
    from walctl.store.s3 import S3Store
    from walctl.pipeline.upload import upload

    store = S3Store(s3_bucket, "walctl-test", endpoint_url=s3_server, multipart_threshold_bytes=6 * MiB)
    wal = str(tmp_path / "wal")
    init_wal(wal, 40 * MiB)
    ends, payloads = _fill(wal, streams=1, record=64 * KiB, total=20 * MiB)
    store.stats.reset()
    result = upload(wal, store)
    assert [o["kind"] for o in result.objects] == ["SO"]
    size = result.objects[0]["size_bytes"]
    assert 20 * MiB < size < 21 * MiB
    # the object was cut into 8 MiB parts (put_large's default) as it was built: 3 parts
    assert store.stats.multipart_parts == -(-size // (8 * MiB)) == 3
    data = store.read_all(result.objects[0]["key"])
    assert obj.verify_object(data) == []
    footer = obj.Footer.decode(data, len(data) - obj.FOOTER_SIZE)
    batches = [b for e in obj.decode_index(data[footer.index_start_position:], footer)
               for b in obj.iter_blocks(data, e)]
    assert [b.base_offset for b in batches] == list(range(ends[1]))
    assert {b.payload for b in batches} == {payloads[1]}


def test_a_record_that_changed_after_the_scan_is_refused_and_nothing_is_committed(tmp_path, local_store,
                                                                                  monkeypatch):
    """The objects are built from a second read of the WAL: each record must still be the one scanned."""
    from walctl.errors import RefusedError
    from walctl.pipeline import upload as upload_mod
    from walctl.pipeline.upload import run as upload_run
    from walctl.pipeline.upload import spool as upload_spool

    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 0)  # the read-again path (larger uploads)
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)  # (no object written as the scan reads: S3's way)

    wal = str(tmp_path / "wal")
    init_wal(wal, 4 * MiB)
    _fill(wal, streams=2, record=10 * KiB, total=200 * KiB)
    real_commit = mf.commit
    calls = []

    def commit_then_damage(store, change, **kwargs):
        done = real_commit(store, change, **kwargs)
        if not calls:  # right after the prepare commit: flip a byte in a record body
            with open(wal, "r+b") as f:
                f.seek(HEADERS_SIZE + 4096)  # inside the first record's body (10 KiB)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0xFF]))
        calls.append(kwargs.get("command"))
        return done

    monkeypatch.setattr(mf, "commit", commit_then_damage)
    with pytest.raises(RefusedError, match="the WAL changed during the upload"):
        upload_mod.upload(wal, local_store)
    assert calls[0] == "upload (prepare)" and "upload" not in calls  # never made live (a roll-back may follow)
    doc = mf.load_latest(local_store)
    assert doc.objects == [] and doc.wal_uploads == {}


@pytest.mark.slow
def test_upload_to_s3_of_a_160_mib_wal_stays_under_256_mib_rss(big_tmp, s3_server, s3_bucket):
    """The S3 path too: one Stream Object of 160 MiB goes up as multipart parts built on the fly."""
    tmp_path = big_tmp
    wal = str(tmp_path / "wal")
    init_wal(wal, 176 * MiB)
    ends, payloads = _fill(wal, streams=1, record=1 * MiB - 64, total=160 * MiB)
    hwm, done = _peak_rss_of(["upload", wal, "--store", f"s3://{s3_bucket}/walctl-test", "--endpoint-url",
                              s3_server, "--json"])
    assert done.returncode == 0, done.stderr.decode()
    summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert summary["records"] == ends[1] and [o["kind"] for o in summary["objects"]] == ["SO"]
    assert summary["objects"][0]["size_bytes"] > 160 * MiB
    assert hwm < RSS_BOUND, f"upload peak RSS {hwm / MiB:.0f} MiB"
    from walctl.store.s3 import S3Store

    store = S3Store(s3_bucket, "walctl-test", endpoint_url=s3_server)
    key = summary["objects"][0]["key"]
    tail, size = store.read_tail(key, 64 * KiB)
    footer = obj.Footer.decode(tail, len(tail) - obj.FOOTER_SIZE, object_size=size)
    assert size == summary["objects"][0]["size_bytes"] and footer.index_start_position < size
    last = obj.decode_index(tail[len(tail) - obj.FOOTER_SIZE - footer.index_block_length:], footer)[-1]
    block = store.read_range(key, last.block_position, last.block_end)
    batches = list(obj.iter_blocks(block, last, base_position=last.block_position))
    assert batches[-1].end_offset == ends[1] and batches[-1].payload == payloads[1]
