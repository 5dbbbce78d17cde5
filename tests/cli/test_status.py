"""walctl status: the header slots, space, end of log, shutdown type and lock holder; read-only."""

from __future__ import annotations

import hashlib

import pytest

CAPACITY = 64 << 10
RING = CAPACITY - 8192


def _status(cli, dev, *extra):
    res = cli("status", dev, "--json", *extra)
    return res, (res.json_lines()[-1] if res.stdout.strip() else None)


def _digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_new_wal(cli, new_wal):
    dev = new_wal("64KiB")
    res, out = _status(cli, dev)
    assert res.exit_code == 0, res
    assert len(res.json_lines()) == 1
    assert out["device"] == dev and out["flavour"] == "walctl"
    assert (out["capacity_bytes"], out["ring_bytes"], out["headers_bytes"]) == (CAPACITY, RING, 8192)
    assert (out["trim_offset"], out["start_offset"], out["end_offset"]) == (None, 0, 0)
    assert (out["used_bytes"], out["free_bytes"], out["used_percent"], out["free_percent"]) == (0, RING, 0.0, 100.0)
    assert out["shutdown_type"] == "graceful"
    assert out["sliding_window_max_length_bytes"] == out["header"]["sliding_window_max_length_bytes"] > 0
    # a new WAL is cleanly closed with a checkpoint: the answer comes from the headers alone
    assert (out["scanned"], out["device_bytes_read"], out["records"]) == (False, 8192, None)
    assert out["checkpoint"] == {"log_end_offset": 0, "complete": True, "uploaded_offset": None, "streams": 0,
                                 "stream_next_offsets": {}}
    _, scanned = _status(cli, dev, "--scan")
    assert (scanned["records"], scanned["streams"], scanned["findings"], scanned["corrupt_findings"]) == (0, 0, 0, 0)
    assert scanned["scanned"] is True
    assert (out["lock_holder_pid"], out["writer_active"]) == (None, False)
    # init writes slot 0 then slot 1 (a later timestamp): slot 1 is current
    assert out["current_slot"] == 1
    assert [s["slot"] for s in out["slots"]] == [0, 1]
    assert [s["current"] for s in out["slots"]] == [False, True]
    assert all(s["valid"] and s["header"]["capacity_bytes"] == CAPACITY for s in out["slots"])
    assert out["slots"][0]["physical_offset"] == 0 and out["slots"][1]["physical_offset"] == 4096


def test_used_and_free_follow_the_log_and_the_trim_point(cli, new_wal, append_json, tools):
    dev = new_wal("64KiB")
    offsets = append_json(dev, "one", "two", "three", stream=3)
    append_json(dev, "x" * 5000, stream=4)
    _, before = _status(cli, dev, "--scan")
    _, quick = _status(cli, dev)
    rec = cli("recover", dev, "--json").json_lines()[-1]
    assert quick["end_offset"] == before["end_offset"] and quick["used_bytes"] == before["used_bytes"]
    assert quick["checkpoint"]["stream_next_offsets"] == {"3": 3, "4": 1}
    assert before["end_offset"] == rec["end_offset"] > offsets[-1]
    assert before["used_bytes"] == before["end_offset"]  # never trimmed: from offset 0
    assert before["used_bytes"] + before["free_bytes"] == RING
    assert before["used_percent"] == round(100 * before["used_bytes"] / RING, 2)
    assert (before["records"], before["streams"], before["stream_ids"]) == (4, 2, [3, 4])
    assert before["payload_bytes"] == 3 + 3 + 5 + 5000
    assert cli("trim", dev, offsets[1]).exit_code == 0
    res, after = _status(cli, dev, "--scan")
    assert res.exit_code == 0, res
    assert (after["trim_offset"], after["start_offset"]) == (offsets[1], offsets[1])
    assert after["end_offset"] == before["end_offset"]
    assert after["used_bytes"] == after["end_offset"] - offsets[1]  # as the writer counts room
    assert after["free_bytes"] == RING - after["used_bytes"]
    assert after["records"] == 2
    # each header write goes to the other slot: the current slot carries the trim point
    current = after["slots"][after["current_slot"]]
    assert current["current"] and current["header"]["trim_offset"] == offsets[1]


def test_human_output(cli, new_wal, append_json):
    dev = new_wal("64KiB")
    append_json(dev, "a", stream=1)
    res = cli("status", dev)
    assert res.exit_code == 0, res
    for label in ("header slot 0", "header slot 1", "(current)", "capacity", "trim point", "never trimmed",
                  "end of log", "used", "free", "last shutdown", "graceful", "sliding window", "lock holder",
                  "none"):
        assert label in res.stdout, label
    assert res.stderr == ""


def test_is_read_only(cli, new_wal, append_json):
    dev = new_wal("64KiB")
    append_json(dev, "keep", "me", stream=1)
    digest = _digest(dev)
    for args in (("--json",), ()):
        assert cli("status", dev, *args).exit_code == 0
    assert _digest(dev) == digest


def test_live_writer_is_reported(cli, new_wal, held_writer):
    dev = new_wal("64KiB")
    writer = held_writer(dev)
    res, out = _status(cli, dev)
    assert res.exit_code == 0, res
    assert out["lock_holder_pid"] == writer.proc.pid and out["writer_active"] is True
    assert out["lock_holder_command"]  # the process name from /proc, never its arguments
    assert out["lock_holder_trim"] is None  # a writer, not a trim (its mark: FORMATS.md 1.8)
    assert out["shutdown_type"] == "ungraceful"  # a running writer has not closed the log
    assert out["records"] == 1
    assert f"a writer (pid {writer.proc.pid}) holds the device" in res.stderr
    assert res.stderr.count("walctl: warning:") == 1
    human = cli("status", dev)
    assert f"pid {writer.proc.pid}" in human.stdout
    assert "ungraceful" in human.stdout


def test_a_damaged_slot_is_shown_and_the_other_is_current(cli, new_wal, tools):
    dev = new_wal("64KiB")
    tools.flip_byte(dev, 4096 + 10)  # slot 1 (the current one) loses its checksum
    res, out = _status(cli, dev)
    assert res.exit_code == 0, res
    assert out["current_slot"] == 0
    slot1 = out["slots"][1]
    assert slot1["valid"] is False and slot1["header"] is None and slot1["error"]
    assert "INVALID" in cli("status", dev).stdout


def test_corruption_exits_3_with_the_status(cli, new_wal, append_json, tools):
    dev = new_wal("64KiB")
    offsets = append_json(dev, "first", "second", "third", stream=1)
    # Damage the middle record's body in a cleanly closed log: a crash does not explain it.
    tools.flip_byte(dev, tools.physical(offsets[1], CAPACITY) + tools.RECORD_HEADER + tools.BATCH_HEADER)
    res, out = _status(cli, dev)
    assert res.exit_code == 0 and out["scanned"] is False  # the checkpoint answers: the log is not read
    res, out = _status(cli, dev, "--scan")
    assert res.exit_code == 3, res
    line = res.error_line()
    assert dev in line and "walctl recover" in line
    assert out["error"]["code"] == 3
    assert out["corrupt_findings"] >= 1 and out["capacity_bytes"] == CAPACITY  # the status is still there
    human = cli("status", dev, "--scan")
    assert human.exit_code == 3 and "header slot 0" in human.stdout


@pytest.mark.parametrize("setup,code", [("missing", 4), ("zeros", 4), ("dir", None)])
def test_not_a_wal(cli, tmp_path, setup, code):
    path = tmp_path / "dev"
    if setup == "zeros":
        path.write_bytes(bytes(64 << 10))
    elif setup == "dir":
        path.mkdir()
    res = cli("status", path, "--json")
    assert res.exit_code != 0
    if code is not None:
        assert res.exit_code == code
    res.error_line()
    assert res.json_lines()[-1]["error"]["code"] == res.exit_code


def test_device_from_the_environment(cli, new_wal):
    dev = new_wal("64KiB")
    res = cli("status", "--json", env={"WALCTL_DEVICE": dev})
    assert res.exit_code == 0, res
    assert res.json_lines()[0]["device"] == dev


def test_automq_wal_is_shown_read_only(cli, tmp_path):
    """An AutoMQ block WAL (header V1, empty log): its header and space, never written to."""
    import struct
    import zlib

    capacity = 256 << 10
    body = struct.pack(">IQqqqIiq", 0x01234567, capacity, -1, 1_000_000, 64 << 10, 0, 3, 7)
    slot = (body + struct.pack(">I", zlib.crc32(body) & 0x7FFFFFFF)).ljust(4096, b"\0")
    path = tmp_path / "amq.img"
    path.write_bytes(slot + slot + bytes(capacity - 8192))
    digest = _digest(path)
    res, out = _status(cli, path)
    assert res.exit_code == 0, res
    assert out["flavour"] == "automq-v1" and out["node_id"] == 3 and out["epoch"] == 7
    assert out["next_offset_in_header"] is None  # AutoMQ's header has no nextOffset
    assert (out["end_offset"], out["used_bytes"], out["records"]) == (0, 0, 0)
    assert _digest(path) == digest


def test_scan_lists_every_stream_of_bulk_runs(tmp_path):
    """status --scan reads runs of intact records in bulk (one Run per decoded chunk): every
    stream of every run is listed, and the counts match a per-record scan's."""
    from walctl.device import open_device
    from walctl.format.batch import StreamRecordBatch
    from walctl.status import wal_status
    from walctl.wal.headers import read_headers
    from walctl.wal.lifecycle import init_wal, open_writer
    from walctl.wal.reader import Entry, Run, Scan, scan

    path = str(tmp_path / "wal")
    init_wal(path, 8 << 20)
    opened = open_writer(path)
    bodies = [(5 + i % 5, i // 5, b"p" * 1000) for i in range(3000)]  # interleaved, several MiB
    for sid, base, payload in bodies + [(42, 0, b"last")]:
        opened.writer.append(StreamRecordBatch(sid, 0, base, 1, payload).encode(), stream=(sid, base + 1))
    opened.writer.close()
    status = wal_status(path, scan=True)
    assert status.live_streams == [5, 6, 7, 8, 9, 42]
    assert (status.scan.records, status.scan.payload_bytes) == (3001, 3000 * 1000 + 4)
    dev = open_device(path, writable=False)
    try:
        entries = [e for e in scan(dev, read_headers(dev).header) if isinstance(e, Entry)]
        assert any(isinstance(e, Run) for e in Scan(dev, read_headers(dev).header, bulk=True))  # the bulk path
    finally:
        dev.close()
    assert len(entries) == 3001 and sorted({e.batch.stream_id for e in entries}) == status.live_streams


def test_a_damaged_log_keeps_its_figures_and_says_which_rule(cli, new_wal, append_json):
    """4 KiB of random bytes over acknowledged records of a cleanly closed log: status --scan
    reads past them (every other record counted, used and free as before the damage), names the
    durable end it judged by, and exits 3; the human table says so too."""
    import random

    dev = new_wal("1MiB")
    offsets = append_json(dev, *[f"record {i} " * 60 for i in range(600)], stream=3)
    _, before = _status(cli, dev, "--scan")
    with open(dev, "r+b") as f:
        f.seek(8192 + 64 * 1024)
        f.write(random.Random(3).randbytes(4096))
    res, out = _status(cli, dev, "--scan")
    assert res.exit_code == 3 and out["corrupt_findings"] == 1 and out["complete"] is True
    assert (out["used_bytes"], out["free_bytes"], out["end_offset"]) == (
        before["used_bytes"], before["free_bytes"], before["end_offset"])
    assert len(offsets) - 8 <= out["records"] < len(offsets)  # only the records the 4 KiB held are lost
    assert out["durable_end"] == f"the checkpoint's log end {before['end_offset']:,}"
    assert out["durable_end_offset"] == before["end_offset"]
    text = cli("status", dev, "--scan")
    assert text.exit_code == 3
    assert "durable end" in text.stdout and f"end {before['end_offset']:,}" in text.stdout
