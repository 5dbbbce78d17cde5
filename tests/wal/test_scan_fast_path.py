"""The recovery scan's fast path (LogReader.intact_run over bulk.decode_records, issue 19) changes nothing but speed.

Every scan below runs twice on the same bytes: as shipped, and with the fast path switched
off (every record through RecordHeader.decode / check_body / StreamRecordBatch.decode). The
records, findings and summary must be identical, on intact, trimmed, wrapped, padded and
randomly damaged logs, crashed or closed cleanly.
"""

from __future__ import annotations

import io
import json
import random

import pytest

from walctl.device import MemoryDevice
from walctl.format.header import HEADERS_SIZE
from walctl.wal import reader
from walctl.wal.headers import read_headers

from walhelpers import damaged, mixed_wrapped_wal

KiB, MiB = 1 << 10, 1 << 20
RING = 256 * KiB - HEADERS_SIZE


def _scan(image: bytes, fast: bool, monkeypatch) -> tuple[list, dict, list]:
    mem = MemoryDevice(len(image))
    mem.data[:] = image
    state = read_headers(mem)
    hits = []
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(reader.LogReader, "intact_run", lambda self, offset, max_records=1: [])
        else:
            real = reader.LogReader.intact_run

            def counted(self, offset, max_records=1 << 30):
                found = real(self, offset, max_records)
                hits.append(bool(found))
                return found

            m.setattr(reader.LogReader, "intact_run", counted)
        result = reader.ScanResult(state.header, reader.Ring(state.header.capacity))
        events = []
        for e in reader.scan(mem, state.header, result=result, keep_offsets=True):
            events.append(("finding", e.to_json()) if isinstance(e, reader.Finding)
                          else ("record", e.offset, e.body, e.batch))
    extra = [result.torn_offsets, result.unaligned_damage, result.stream_ends, result.record_offsets,
             [(h.start, h.end) for h in result.sealed_holes], [g.spec for g in result.stream_gaps],
             None if result.trim_entry is None else (result.trim_entry.offset, result.trim_entry.body)]
    if fast and any(e[0] == "record" for e in events):
        assert any(hits)  # the fast path really ran
    return events, result.to_json(), extra


def _same(image: bytes, monkeypatch) -> list:
    fast = _scan(image, True, monkeypatch)
    slow = _scan(image, False, monkeypatch)
    assert fast == slow
    return fast[0]


def _log(tmp_path, clean: bool) -> bytes:
    return mixed_wrapped_wal(tmp_path / "w", clean=clean)


@pytest.mark.parametrize("clean", [True, False])
def test_intact_logs_scan_the_same(tmp_path, monkeypatch, clean):
    events = _same(_log(tmp_path, clean), monkeypatch)
    assert sum(1 for e in events if e[0] == "record") > 30
    assert any(e[0] == "finding" and e[1]["kind"] == reader.BAD_BATCH for e in events)


def test_randomly_damaged_logs_scan_the_same(tmp_path, monkeypatch):
    base = _log(tmp_path, clean=False)
    rng = random.Random(19)
    for _ in range(60):
        _same(damaged(base, rng, RING), monkeypatch)


def test_recover_ndjson_fast_lines_are_the_dict_rendering(tmp_path, monkeypatch):
    """recover --json --payload none formats its record lines without a dict: the same bytes."""
    from walctl.commands.recover import Payload, _Printer

    events = _same(_log(tmp_path, clean=True), monkeypatch)
    records = [reader.Entry(e[1], e[2], e[3]) for e in events if e[0] == "record"]
    assert any(r.batch is None for r in records) and any(r.batch is not None for r in records)
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    printer = _Printer(True, Payload.none, False)
    for r in records:
        printer.record(r)
    printer.flush()  # (record lines are gathered and written in pieces)
    assert printer._fast == {True: True, False: True}  # both templates in use: no fallback
    lines = out.getvalue().splitlines(keepends=True)
    assert lines == [printer._render(r, r.batch.payload if r.batch else r.body) for r in records]
    assert [json.loads(line)["offset"] for line in lines] == [r.offset for r in records]


def test_every_header_bit_field_damaged_scans_the_same(tmp_path, monkeypatch):
    """A flipped bit in each of a record header's 24 bytes (magic, length, offset, both crcs)."""
    base = _log(tmp_path, clean=False)
    events = _same(base, monkeypatch)
    offsets = [e[1] for e in events if e[0] == "record"]
    rng = random.Random(1919)
    for offset in [offsets[0], offsets[len(offsets) // 2], offsets[-1]]:
        for byte in range(24):
            image = bytearray(base)
            image[HEADERS_SIZE + offset % RING + byte] ^= 1 << rng.randrange(8)
            _same(bytes(image), monkeypatch)
