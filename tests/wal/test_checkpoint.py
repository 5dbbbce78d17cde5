"""Checkpointed state (FORMATS.md 1.6): a cleanly closed WAL opens, trims and reports from its
headers; the byte budgets are counted through the device layer (deterministic)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from walctl.device import open_device
from walctl.device.fdio import bytes_read_total
from walctl.errors import UsageError
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import MAX_STREAMS, POSITION
from walctl.format.header import SLOT_SIZE
from walctl.status import wal_status
from walctl.wal import reader
from walctl.wal.headers import read_headers
from walctl.wal.init import init_wal
from walctl.wal.lifecycle import open_writer
from walctl.wal.trim import trim_wal

from walhelpers import header_of, payload_for, poke, run_walctl

MiB = 1 << 20
BUDGET = 1 * MiB  # issue 13: append of one record, trim and status read less than this


def _fill(path: str, streams: dict[int, int], size: int, *, clean: bool = True) -> dict[int, list[int]]:
    """Append ``streams[sid]`` records of ``size`` bytes to each stream (interleaved) with stream
    marks, continuing each stream's offsets; returns stream -> acknowledged WAL offsets."""
    acks: dict[int, list[int]] = {}
    opened = open_writer(path, on_ack=lambda off, sid: acks.setdefault(sid, []).append(off), need_stream=-1)
    writer = opened.writer
    ends = dict(opened.checkpoint.streams)
    for i in range(max(streams.values())):
        for sid, count in streams.items():
            if i < count:
                base = ends.get(sid, 0)
                body = StreamRecordBatch(sid, 0, base, 1, payload_for(sid, base, size)).encode()
                writer.append(body, sid, (sid, base + 1))
                ends[sid] = base + 1
    if clean:
        writer.close()
    else:
        writer.drain()
        writer.abort()
    return acks


@pytest.fixture(scope="module")
def big_wal(tmp_path_factory):
    """A 64 MiB WAL holding ~48 MiB of 16 KiB records in 3 streams, cleanly closed."""
    path = str(tmp_path_factory.mktemp("cp") / "big.img")
    init_wal(path, 64 * MiB)
    acks = _fill(path, {1: 1000, 2: 1000, 3: 1000}, 16 << 10)
    yield path, acks
    os.unlink(path)


@pytest.fixture
def big_copy(big_wal, tmp_path):
    """A private copy of big_wal (the test writes to it), removed afterwards."""
    path, acks = big_wal
    copy = tmp_path / "copy.img"
    with open(path, "rb") as src, open(copy, "wb") as dst:
        shutil.copyfileobj(src, dst, 8 << 20)
    yield str(copy), acks
    copy.unlink()


def _reads(fn):
    before = bytes_read_total()
    value = fn()
    return value, bytes_read_total() - before


def test_append_one_record_reads_only_the_headers(big_copy):
    path, _ = big_copy
    used = header_of(path).header.next_offset
    assert used > 45 * MiB

    def one():
        opened = open_writer(path, need_stream=2)
        assert opened.scan is None
        nxt = opened.checkpoint.streams[2]
        opened.writer.append(StreamRecordBatch(2, 0, nxt, 1, b"x").encode(), None, (2, nxt + 1))
        opened.writer.close()
        return nxt
    nxt, read = _reads(one)
    assert nxt == 1000 and read < BUDGET, read
    # the CLI too, in its own process: its summary counts the device bytes it read
    res = run_walctl("append", path, "--stream", "2", "--json", "y")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert lines[0]["base_offset"] == 1001
    assert lines[-1]["scanned"] is False and lines[-1]["device_bytes_read"] < BUDGET
    # a full scan agrees with the checkpoint
    dev = open_device(path, writable=False)
    try:
        _, result = reader.run_scan(dev, read_headers(dev).header)
    finally:
        dev.close()
    assert result.stream_ends == {1: 1000, 2: 1002, 3: 1000} == header_of(path).checkpoint.streams


def test_status_and_trim_read_under_a_mib(big_copy):
    path, acks = big_copy
    status, read = _reads(lambda: wal_status(path))
    assert status.scan is None and read < BUDGET
    assert status.end_offset == header_of(path).checkpoint.log_end and status.used_bytes > 45 * MiB
    target = acks[3][700]
    result, read = _reads(lambda: trim_wal(path, target))
    assert result.trim_offset == target and not result.scanned and read < BUDGET, read
    assert header_of(path).header.trim_offset == target
    # a wrong offset is refused after a read near it only, with the nearest records as the hint
    before = bytes_read_total()
    with pytest.raises(UsageError) as info:
        trim_wal(path, acks[3][800] + 8)
    assert str(acks[3][800]) in info.value.hint and bytes_read_total() - before < 4 * BUDGET  # not a scan
    res = run_walctl("trim", path, acks[3][900], "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["scanned"] is False and out["device_bytes_read"] < BUDGET and out["trim_offset"] == acks[3][900]
    res = run_walctl("status", path, "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["scanned"] is False and out["device_bytes_read"] < BUDGET


def test_a_stream_trimmed_away_continues_and_a_new_stream_starts_at_zero(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    acks = _fill(path, {5: 3, 6: 2}, 100)
    trim_wal(path, max(acks[5] + acks[6]))  # every record of both streams is gone
    for sid, expect in ((5, 3), (6, 2), (9, 0)):
        res = run_walctl("append", path, "--stream", sid, "--json", "z")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout.splitlines()[0])["base_offset"] == expect
        assert json.loads(res.stdout.splitlines()[-1])["scanned"] is False


def test_after_a_crash_the_recovery_scan_runs_once(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    _fill(path, {1: 5}, 100)
    trim_wal(path, _fill(path, {1: 5}, 100)[1][-1])  # stream 1: all 10 trimmed
    _fill(path, {2: 4}, 100, clean=False)  # the writer "crashes" (no clean close)
    assert not header_of(path).header.clean
    opened = open_writer(path, need_stream=1)
    assert opened.scan is not None  # recovery
    assert opened.checkpoint.streams == {1: 10, 2: 4} and opened.checkpoint.complete
    # the recovery's result is in the header now, before any new record
    assert header_of(path).checkpoint.streams == {1: 10, 2: 4}
    opened.writer.close()
    again = open_writer(path, need_stream=1)
    assert again.scan is None and again.checkpoint.streams == {1: 10, 2: 4}
    again.writer.close()


def _zero_checkpoints(path: str) -> None:
    for slot in (0, 1):
        poke(path, slot * SLOT_SIZE + POSITION, bytes(SLOT_SIZE - POSITION))


def test_a_wal_written_before_checkpoints_is_scanned(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    _fill(path, {1: 3}, 100)
    _zero_checkpoints(path)  # what walctl wrote before checkpoints: zeros after the 64-byte header
    assert header_of(path).checkpoint is None and header_of(path).header.clean
    assert wal_status(path).scan is not None
    opened = open_writer(path, need_stream=1)
    assert opened.scan is not None and opened.checkpoint.streams == {1: 3}
    assert opened.checkpoint.complete  # never trimmed: the scan saw every record
    opened.writer.close()
    again = open_writer(path, need_stream=1)  # the scan's result was checkpointed at close
    assert again.scan is None and again.checkpoint.streams == {1: 3}
    again.writer.close()


def test_without_a_complete_checkpoint_a_trimmed_stream_needs_store_or_base_offset(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    acks = _fill(path, {1: 3, 2: 3}, 100)
    trim_wal(path, acks[2][-1])  # the last record, of stream 2: every record of stream 1 is gone
    _zero_checkpoints(path)  # an older walctl closed it: stream 1's end is lost with its records
    res = run_walctl("append", path, "--stream", "1", "x")
    assert res.returncode == 2 and b"--base-offset" in res.stderr
    res = run_walctl("append", path, "--stream", "2", "--json", "x")
    assert res.returncode == 0 and json.loads(res.stdout.splitlines()[0])["base_offset"] == 3


def test_a_damaged_checkpoint_falls_back_to_a_scan(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    _fill(path, {1: 3}, 100)
    current = header_of(path).current
    poke(path, current * SLOT_SIZE + POSITION + 30, b"\xff")
    state = header_of(path)
    assert state.checkpoint is None and state.slots[current].checkpoint_error is not None
    assert state.header.clean  # the header itself stands
    opened = open_writer(path, need_stream=1)
    assert opened.scan is not None and opened.checkpoint.streams == {1: 3}
    opened.writer.close()


def test_more_streams_than_fit_keep_the_latest_and_scan_for_the_rest(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 4 * MiB)
    _fill(path, {sid: 1 for sid in range(MAX_STREAMS + 10)}, 10)
    cp = header_of(path).checkpoint
    assert len(cp.streams) == MAX_STREAMS and not cp.complete
    assert MAX_STREAMS + 9 in cp.streams  # written last
    listed = open_writer(path, need_stream=MAX_STREAMS + 9)
    assert listed.scan is None
    listed.writer.close()
    missing = next(s for s in range(MAX_STREAMS + 10) if s not in cp.streams)
    unlisted = open_writer(path, need_stream=missing)
    assert unlisted.scan is not None and unlisted.checkpoint.streams[missing] == 1
    unlisted.writer.close()


# -- recover --from seek and --limit (issue 13) ----------------------------------------------

@pytest.fixture(scope="module")
def long_wal(tmp_path_factory):
    """A 200 MiB WAL holding ~180 MiB of 64 KiB records, cleanly closed (removed afterwards).

    Large enough that a seek's fixed costs (a look back for the block holding --from, one chunk)
    stay well inside 2 % of the log."""
    path = str(tmp_path_factory.mktemp("cp-long") / "long.img")
    init_wal(path, 200 * MiB)
    acks = _fill(path, {1: 1400, 2: 1400}, 64 << 10)
    yield path, acks
    os.unlink(path)


def test_recover_from_seeks_and_reads_under_two_percent(long_wal):
    path, acks = long_wal
    end = header_of(path).checkpoint.log_end
    target = end - end // 100  # the last 1 % of the log
    res = run_walctl("recover", path, "--from", target, "--json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    summary = lines[-1]
    records = [x for x in lines if x["type"] == "record"]
    every = sorted(o for offs in acks.values() for o in offs)
    assert [r["offset"] for r in records] == [o for o in every if o >= target]
    # reading starts at the first record at or after --from (found through the block holding
    # --from, so no record at or after --from is skipped)
    assert summary["read_from_offset"] == min(o for o in every if o >= target)
    assert summary["complete"] is False  # what lies before the seek point was not checked
    assert summary["bytes_read"] < end * 2 // 100, (summary["bytes_read"], end)


def test_recover_from_past_the_end_shows_nothing_and_reads_little(big_wal):
    path, _ = big_wal
    end = header_of(path).checkpoint.log_end
    res = run_walctl("recover", path, "--from", end + 10, "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.splitlines()[-1])
    assert summary["records_shown"] == 0 and summary["bytes_read"] <= 2 << 20  # the seek, not a scan


def test_recover_limit_never_hides_damage(tmp_path):
    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    acks = _fill(path, {1: 20}, 3000)[1]
    poke(path, 8192 + acks[15] + 24 + 40, b"\xff\xfe")  # a body byte of a record further on
    full = run_walctl("recover", path, "--json")
    assert full.returncode == 3
    assert json.loads(full.stdout.splitlines()[-1])["complete"] is True
    limited = run_walctl("recover", path, "--limit", "3", "--json")
    assert limited.returncode == 0, limited.stderr  # what was read is clean: exit codes unchanged
    summary = json.loads(limited.stdout.splitlines()[-1])
    assert (summary["complete"], summary["stopped_by"], summary["records_shown"]) == (False, "limit", 3)
    human = run_walctl("recover", path, "--limit", "3")
    assert b"incomplete" in human.stderr and b"stopped by limit" in human.stderr
    assert re.search(rb"complete\W+no\b", human.stdout), human.stdout
    to = run_walctl("recover", path, "--to", acks[5], "--json")
    summary = json.loads(to.stdout.splitlines()[-1])
    assert (to.returncode, summary["complete"], summary["stopped_by"], summary["records_shown"]) == (0, False, "to", 5)
    clean_limit = run_walctl("recover", path, "--limit", "100", "--json")  # limit not reached: a full run
    assert clean_limit.returncode == 3


@pytest.mark.parametrize("where", ["a record's start", "inside a record", "a block's zero padding"])
def test_recover_from_starts_at_the_first_record_at_or_after_it(tmp_path, where):
    """--from inside a block never skips that block's later records: reading starts at the first
    record at or after --from (the summary's read_from_offset), whatever --from points into."""
    from walctl.wal.headers import read_headers
    from walctl.wal.reader import Entry, Scan

    from walhelpers import scan_file

    path = str(tmp_path / "w.img")
    init_wal(path, 1 * MiB)
    writer = open_writer(path, iodepth=1).writer
    for i in range(60):  # five records per block
        writer.append(StreamRecordBatch(1, 0, i, 1, bytes(300)).encode(), i)
        if i % 5 == 4:
            writer.submit_open_block()
    writer.close()
    ends = {e.offset: e.end for e in scan_file(path)[0]}
    offsets = sorted(ends)
    # a record in the middle of a block, and the last record of that block (zero padding after it)
    inner = next(o for o in offsets[1:] if o % 4096 and ends[o] % 4096 and ends[o] in ends)
    last = next(o for o in offsets[:-1] if o > inner and ends[o] not in ends)
    assert ends[last] % 4096, "the block ends in zero padding"
    seek = {"a record's start": inner, "inside a record": inner + 30, "a block's zero padding": ends[last] + 1}[where]
    want = [o for o in offsets if o >= seek]
    dev = open_device(path, writable=False)
    try:
        scan = Scan(dev, read_headers(dev).header, seek=seek)
        shown = [e.offset for e in scan if isinstance(e, Entry)]
    finally:
        dev.close()
    assert shown == want
    assert scan.report.read_from_offset == want[0]
