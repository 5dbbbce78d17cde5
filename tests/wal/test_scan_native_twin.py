"""The scan's bulk decode (walctl.format.bulk.decode_records, issue 19) finds the same whether
the C kernel or its pure Python twin runs it (WALCTL_NO_NATIVE=1), and whether the records
come one Entry each or as Run events (recover without filters): same records, findings,
report, --stats counts and NDJSON lines, on intact and randomly damaged logs.
"""

from __future__ import annotations

import json
import os
import re
import random
import subprocess
import sys

import pytest

from walctl.device import MemoryDevice
from walctl.format import bulk
from walctl.format.batch import StreamRecordBatch
from walctl.format.header import HEADERS_SIZE
from walctl.wal.headers import read_headers
from walctl.wal.lifecycle import open_writer
from walctl.wal.trim import trim_wal
from walctl.wal.verdict import RecoverFilter, recover

from walhelpers import append_records, damaged, new_wal

KiB = 1 << 10
RING = 256 * KiB - HEADERS_SIZE


def _log(tmp_path, clean: bool) -> bytes:
    """A wrapped 256 KiB WAL: three interleaved streams with a gap, a bad batch, a trim point."""
    path = new_wal(tmp_path / "w", 256 * KiB)
    first = append_records(path, 40, size=3000, iodepth=1, flush_each=True)
    trim_wal(path, first[37][0])
    w = open_writer(path, scan=True).writer
    for i in range(30):
        w.append(StreamRecordBatch(7 + i % 3, 0, 100 + i // 3 + (5 if i > 20 else 0), 1,
                                   bytes([i]) * (40 + 37 * i)).encode())
    w.append(b"not a batch at all")
    w.close()
    acks = []
    while not acks or acks[-1][0] < RING:  # into the second lap (a lap-end padding record before it)
        acks = append_records(path, 3, size=700, iodepth=2, flush_each=True, stream_id=1)
    append_records(path, 2, size=5000, iodepth=2, flush_each=True, clean=clean, stream_id=1)
    with open(path, "rb") as f:
        return f.read()


def _device(image: bytes) -> MemoryDevice:
    mem = MemoryDevice(len(image))
    mem.data[:] = image
    return mem


def _recover(image: bytes, native: bool, monkeypatch, *, stats: bool, filters=RecoverFilter()):
    """recover()'s records, findings, per-stream counts and summary; native or the Python twin."""
    with monkeypatch.context() as m:
        if not native:
            m.setattr(bulk, "_native", None)
        mem = _device(image)
        records, findings, runs = [], [], []

        def on_run(run):
            runs.append(run.count)
            records.extend((e.offset, e.body, e.batch) for e in run.entries())

        out = recover(mem, read_headers(mem), "mem", filters=filters, stats=stats,
                      on_record=lambda e: records.append((e.offset, e.body, e.batch)),
                      on_finding=lambda f: findings.append(f.to_json()), on_run=on_run)
    report = out.report
    extra = [report.torn_offsets, report.unaligned_damage, report.stream_ends,
             [(h.start, h.end) for h in report.sealed_holes], [g.spec for g in report.stream_gaps],
             None if report.trim_entry is None else (report.trim_entry.offset, report.trim_entry.body)]
    return (records, findings, out.per_stream, out.summary(), extra), runs


def _images(tmp_path):
    base = _log(tmp_path, clean=False)
    yield base
    (tmp_path / "clean").mkdir(exist_ok=True)
    yield _log(tmp_path / "clean", clean=True)
    rng = random.Random(1919)
    for _ in range(40):
        yield damaged(base, rng, RING)


@pytest.mark.skipif(not bulk.NATIVE, reason="the C kernel is not built here")
def test_native_and_python_twin_find_the_same(tmp_path, monkeypatch):
    seen_findings = seen_runs = 0
    for image in _images(tmp_path):
        native, runs = _recover(image, True, monkeypatch, stats=False)
        twin, twin_runs = _recover(image, False, monkeypatch, stats=False)
        assert native == twin and runs == twin_runs
        seen_findings += bool(native[1])
        seen_runs += bool(runs)
        # --stats: the same counts per stream as showing every record
        stats, _ = _recover(image, True, monkeypatch, stats=True)
        per_stream: dict = {}
        for _, body, batch in native[0]:
            counts = per_stream.setdefault(batch.stream_id if batch else -1, [0, 0])
            counts[0] += 1
            counts[1] += len(batch.payload) if batch else len(body)
        assert stats[2] == per_stream and stats[1] == native[1] and stats[4] == native[4]
        assert {k: v for k, v in stats[3].items() if k != "records_shown"} == \
               {k: v for k, v in native[3].items() if k != "records_shown"}
    assert seen_findings > 20 and seen_runs > 20  # damage was found, and the bulk path ran


def test_runs_and_entries_are_the_same_records(tmp_path, monkeypatch):
    """A filter that shows everything goes record by record (no Run events): same result."""
    for image in list(_images(tmp_path))[:12]:
        whole, runs = _recover(image, True, monkeypatch, stats=False)
        one_by_one, none = _recover(image, True, monkeypatch, stats=False, filters=RecoverFilter(from_offset=0))
        assert none == [] and runs
        assert whole[:3] == one_by_one[:3] and whole[4] == one_by_one[4]


def test_recover_cli_with_and_without_native_prints_the_same(tmp_path):
    """`walctl recover --json` (fast NDJSON lines from Run events) and --stats, with the C kernel
    and with WALCTL_NO_NATIVE=1: byte for byte the same output and exit code on a damaged log;
    the same as the record-by-record path."""
    image = bytearray(_log(tmp_path, clean=True))
    image[HEADERS_SIZE + 40 * 3100] ^= 0x10  # damage in a clean log: corruption, exit 3
    path = tmp_path / "damaged.img"
    path.write_bytes(bytes(image))
    outs = []
    for no_native in ("0", "1"):
        env = {**os.environ, "WALCTL_NO_NATIVE": no_native}
        for args in (["--json"], ["--stats", "--json"], ["--payload", "hex", "--json"]):
            proc = subprocess.run([sys.executable, "-m", "walctl", "recover", str(path), *args],
                                  capture_output=True, text=True, env=env, timeout=120)
            # byte for byte, but the summary's time of day (when the run ended)
            outs.append((args, proc.returncode, re.sub(r',"time":"[^"]*"', "", proc.stdout)))
    assert outs[:3] == outs[3:]
    # --from 0 shows the same records one Entry at a time (a filter: no Run events)
    proc = subprocess.run([sys.executable, "-m", "walctl", "recover", str(path), "--json", "--from", "0"],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, re.sub(r',"time":"[^"]*"', "", proc.stdout)) == outs[0][1:]
    code, text = outs[0][1], outs[0][2]
    lines = [json.loads(x) for x in text.splitlines()]
    assert code == 3 and any(x["type"] == "finding" for x in lines)
    assert sum(x["type"] == "record" for x in lines) == lines[-1]["records_shown"] > 50
