"""Upload's first pass takes the scan's runs of intact records in bulk (Run events, from the C
decoder's rows): what it uploads, keeps, skips and refuses must be what the record-by-record path
(an Entry per record) and the pure-Python decoder (WALCTL_NO_NATIVE=1) give, byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from walctl.device import open_device
from walctl.device.buffers import aligned_buffer
from walctl.format.header import HEADERS_SIZE
from walctl.pipeline.upload import upload
from walctl.store import open_store
from walctl.wal.lifecycle import open_writer

from storehelpers import make_wal, payload
from walhelpers import mark_ungraceful

# Runs upload on argv[1] (WAL) into argv[2] (store dir) and prints what it produced: the result,
# every object's bytes (hashed) and the manifest, without times. WALCTL_TEST_ENTRIES=1: the scan
# yields an Entry per record (no Run events), the path upload took before its bulk one.
_SCRIPT = r"""
import hashlib, json, os, sys
from walctl.pipeline.upload import upload
from walctl.store import manifest as mf, open_store
from walctl.wal import reader
if os.environ.get("WALCTL_TEST_ENTRIES") == "1":
    real = reader.Scan
    reader.Scan = lambda *a, **k: real(*a, **{**k, "bulk": False})
store = open_store(sys.argv[2])
out = upload(sys.argv[1], store, block_size=16 << 10, split_size=64 << 10).to_json()
out.pop("seconds")
doc = mf.load_latest(store).to_json()
for o in doc.get("objects", []):
    o.pop("data_time", None)
for g in doc.get("stream_gaps", []) or []:
    g.pop("time", None)
out["object_bytes"] = {o["key"]: hashlib.sha256(store.read_all(o["key"])).hexdigest() for o in out["objects"]}
keep = ("number", "next_object_id", "streams", "objects", "wal_uploads", "stream_gaps", "deleting")
out["manifest"] = {k: doc.get(k) for k in keep}
out["manifest"]["prepared"] = len(doc["prepared"])
print(json.dumps(out, sort_keys=True))
"""

BAD = struct.pack(">BqqqII", 0x22, 9, 0, (1 << 63) - 1, 1, 1) + b"!"  # a record whose body no reader accepts


def _streams(writer, ends: dict[int, int], rounds: int, per: int, size: int) -> None:
    """Streams 1, 2 and 3 interleaved ``per`` records at a time: several streams in one chunk."""
    for _ in range(rounds):
        for sid in (1, 2, 3):
            payloads = [payload(sid, ends[sid] + i, size) for i in range(per)]
            i = 0
            while i < per:
                i += writer.append_many(payloads, sid, 0, ends[sid] + i, index=i)
            ends[sid] += per


def _zero_block(path: str, offset: int) -> None:
    dev = open_device(path, writable=True)
    try:
        dev.pwrite(HEADERS_SIZE + offset, aligned_buffer(4096))
    finally:
        dev.close()


@pytest.fixture
def damaged_wal(tmp_path):
    """A WAL of three streams, part of it uploaded already (not trimmed), then a bad record, more
    records, and a crash hole: stream 3's block in the middle of its last three lost. The second
    writer's header is left as it wrote it at open (a crash never writes another): its durable
    points are where it began, so the hole is one a crash explains (below them it would be
    corruption, which upload refuses, as recover does)."""
    wal = make_wal(tmp_path, capacity=8 << 20)
    store_dir = str(tmp_path / "store")
    ends = {1: 0, 2: 0, 3: 0}
    opened = open_writer(wal)
    _streams(opened.writer, ends, rounds=6, per=120, size=900)
    opened.writer.close()
    first = upload(wal, open_store(store_dir), trim=False)
    assert first.records == 6 * 3 * 120 and first.trimmed_to is None

    opened = open_writer(wal)
    writer = opened.writer
    with open(wal, "rb") as f:
        crashed_header = f.read(HEADERS_SIZE)  # (what the open wrote: the header a crash leaves)
    _streams(writer, ends, rounds=3, per=100, size=700)
    writer.append(BAD)
    _streams(writer, ends, rounds=3, per=90, size=1100)
    lost = None
    for k in range(3):  # one block each
        body = struct.pack(">BqqqI", 0x22, 3, 0, ends[3], 1) + struct.pack(">I", 5) + b"tail" + bytes([k])
        at = writer.append(body, stream=(3, ends[3] + 1))
        writer.drain()
        ends[3] += 1
        if k == 1:
            lost = at
    writer.close()
    assert lost % 4096 == 0
    _zero_block(wal, lost)
    with open(wal, "r+b") as f:
        f.write(crashed_header)
    mark_ungraceful(wal)
    return wal, store_dir


def _run(tmp_path, name: str, wal: str, store_dir: str, env: dict) -> dict:
    own = tmp_path / name
    own.mkdir()
    shutil.copy(wal, own / "wal")
    shutil.copytree(store_dir, own / "store")
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(own / "wal"), str(own / "store")],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_upload_is_the_same_in_bulk_one_by_one_and_without_the_c_decoder(tmp_path, damaged_wal):
    wal, store_dir = damaged_wal
    bulk = _run(tmp_path, "bulk", wal, store_dir, {"WALCTL_NO_NATIVE": "0", "WALCTL_TEST_ENTRIES": "0"})
    twin = _run(tmp_path, "twin", wal, store_dir, {"WALCTL_NO_NATIVE": "1", "WALCTL_TEST_ENTRIES": "0"})
    entries = _run(tmp_path, "entries", wal, store_dir, {"WALCTL_NO_NATIVE": "0", "WALCTL_TEST_ENTRIES": "1"})
    # What the WAL holds made it through: the skipped prefix, the bad record, the crash gap.
    assert bulk["skipped_records"] == 6 * 3 * 120
    assert bulk["records"] == 3 * 3 * 100 + 3 * 3 * 90 + 2
    assert [b["offset"] for b in bulk["bad_records"]] == [bulk["bad_records"][0]["offset"]]
    assert [(g["stream_id"], g["cause"]) for g in bulk["gaps"]] == [(3, "crash")]
    assert len(bulk["objects"]) >= 3 and len(bulk["object_bytes"]) == len(bulk["objects"])
    assert twin == bulk
    assert entries == bulk


@pytest.mark.parametrize("second", [{1: 10, 2: 100, 3: 100}, {1: 100, 2: 130, 3: 100}])
def test_a_bulk_upload_refuses_an_overlap_or_gap_where_the_record_path_does(tmp_path, monkeypatch, second):
    """Stream 1 going back (overlap) or stream 2 jumping (a gap no crash explains) inside runs that
    interleave streams: the same refusal, at the same record, in bulk as one by one."""
    from walctl.errors import CorruptionError
    from walctl.wal import reader

    wal = make_wal(tmp_path, capacity=4 << 20)
    opened = open_writer(wal)
    _streams(opened.writer, {1: 0, 2: 0, 3: 0}, rounds=2, per=50, size=500)
    _streams(opened.writer, dict(second), rounds=1, per=50, size=500)
    opened.writer.close()
    errors = []
    for bulk in (True, False):
        real = reader.Scan
        monkeypatch.setattr(reader, "Scan", lambda *a, _real=real, _bulk=bulk, **k: _real(*a, **{**k, "bulk": _bulk}))
        with pytest.raises(CorruptionError) as caught:
            upload(wal, open_store(str(tmp_path / f"store-{bulk}")))
        monkeypatch.setattr(reader, "Scan", real)
        errors.append((caught.value.offset, str(caught.value)))
        assert not list((tmp_path / f"store-{bulk}").rglob("*.obj"))
    assert errors[0] == errors[1]
    assert ("offsets overlap in the WAL" if second[1] == 10 else "offset gap") in errors[0][1]
