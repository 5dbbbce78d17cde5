"""CLI contract of walctl init / append / trim / recover (docs/CLI.md, FORMATS.md 1-2, the issue).

Behaviour and output shapes: JSON field names, offsets, filters, framing, sizes, the
WALCTL_DEVICE variable, trim then recover, a concurrent writer. Exit codes of every error
class are in test_cli_exit_codes.py. Every WAL here is a small file under tmp_path.
"""

from __future__ import annotations

import base64
import os

import pytest

APPEND_RECORD_FIELDS = {"type", "offset", "stream_id", "base_offset", "count", "payload_bytes"}
APPEND_SUMMARY_FIELDS = {"type", "records", "payload_bytes", "first_offset", "last_offset", "seconds", "mib_per_s"}
RECOVER_RECORD_FIELDS = {"type", "offset", "stream_id", "base_offset", "count", "payload_bytes"}
RECOVER_SUMMARY_FIELDS = {"type", "records", "payload_bytes", "trim_offset", "end_offset", "findings"}
# Every field of the native WALHeader (FORMATS.md 1.1) but the magic and crc, snake_case;
# the JSON name may carry a unit suffix (capacity_bytes, last_write_timestamp_ns).
HEADER_FIELDS = ["capacity", "trim_offset", "last_write_timestamp", "sliding_window_max_length",
                 "shutdown_type", "node_id", "epoch", "next_offset"]






def header_of(obj: dict) -> dict:
    """The header fields of init's JSON object: at the top level or under "header"."""
    return obj["header"] if isinstance(obj.get("header"), dict) else obj


def header_value(header: dict, field: str):
    keys = [k for k in header if k == field or k.startswith(field + "_")]
    assert keys, f"header field {field!r} missing from {sorted(header)}"
    return header[keys[0]]


def recover_json(cli, dev, *extra) -> tuple[list[dict], list[dict], dict]:
    """(records, findings, summary) of a successful ``recover --json``; checks the NDJSON framing."""
    res = cli("recover", dev, "--json", *extra)
    assert res.exit_code == 0, res
    lines = res.json_lines()
    assert lines, res
    assert all("type" in obj for obj in lines), res
    summaries = [obj for obj in lines if obj["type"] == "summary"]
    assert len(summaries) == 1 and lines[-1]["type"] == "summary", res
    records = [obj for obj in lines if obj["type"] == "record"]
    findings = [obj for obj in lines if obj["type"] == "finding"]
    return records, findings, summaries[0]


# --------------------------------------------------------------------------- init
class TestInit:
    def test_creates_a_file_of_capacity_and_prints_every_header_field_as_json(self, cli, tmp_path):
        dev = tmp_path / "new.img"
        res = cli("init", dev, "--capacity", "64KiB", "--json")
        assert res.exit_code == 0, res
        lines = res.json_lines()
        assert len(lines) == 1, "init --json prints one object"
        header = header_of(lines[0])
        for field in HEADER_FIELDS:
            header_value(header, field)
        assert header_value(header, "capacity") == 64 << 10
        assert header_value(header, "trim_offset") is None  # never trimmed: null (docs/CLI.md)
        assert header_value(header, "next_offset") == 0
        assert header_value(header, "node_id") is None  # unset (-1 in the header): null (docs/CLI.md)
        assert dev.is_file() and dev.stat().st_size == 64 << 10
        assert "walctl: error" not in res.stderr

    def test_human_output_is_the_header_on_stdout(self, cli, tmp_path):
        res = cli("init", tmp_path / "h.img", "--capacity", "64KiB")
        assert res.exit_code == 0, res
        assert "65,536 B (64.0 KiB)" in res.stdout
        for word in ("capacity", "trim point", "next WAL offset", "last write"):
            assert word in res.stdout, res
        assert "_" not in res.stdout.split("\n", 1)[1], "labels, not snake_case keys (issue 16)"
        assert "walctl: error" not in res.stderr

    def test_node_id_is_recorded(self, cli, tmp_path):
        res = cli("init", tmp_path / "n.img", "--capacity", "64KiB", "--node-id", "7", "--json")
        assert res.exit_code == 0, res
        assert header_value(header_of(res.json_lines()[0]), "node_id") == 7

    @pytest.mark.parametrize("text,expected", [
        ("64KiB", 64 << 10),
        ("256KiB", 256 << 10),
        ("1MiB", 1 << 20),
        ("65536", 65536),
        ("70000", 69632),  # aligned down to 4 KiB
        ("1GB", 10**9 // 4096 * 4096),  # decimal GB (sparse: --no-prewrite; init would write 1 GB)
    ])
    def test_capacity_sizes(self, cli, tmp_path, text, expected):
        dev = tmp_path / "sized.img"
        res = cli("init", dev, "--capacity", text, "--json", "--no-prewrite")
        assert res.exit_code == 0, res
        assert header_value(header_of(res.json_lines()[0]), "capacity") == expected
        assert dev.stat().st_size >= expected

    def test_larger_device_uses_only_capacity(self, cli, tmp_path, tools):
        dev = tmp_path / "big.img"
        marker = b"BEYOND-CAPACITY"
        with open(dev, "wb") as f:
            f.truncate(1 << 20)
            f.seek(512 << 10)
            f.write(marker)
        res = cli("init", dev, "--capacity", "64KiB", "--json")
        assert res.exit_code == 0, res
        assert header_value(header_of(res.json_lines()[0]), "capacity") == 64 << 10
        # Fill it: the WAL is full at 64 KiB although the file is 1 MiB.
        payloads = [bytes([65 + i % 26]) * 3000 for i in range(40)]
        full = cli("append", dev, "--input", "-", "--framing", "length-prefixed",
                   input=tools.length_prefixed(payloads))
        assert full.exit_code == 7, full
        assert dev.stat().st_size == 1 << 20
        with open(dev, "rb") as f:
            f.seek(512 << 10)
            assert f.read(len(marker)) == marker, "bytes beyond capacity must stay untouched"

    def test_reinit_with_force_empties_the_wal(self, cli, new_wal, append_json):
        dev = new_wal("64KiB")
        append_json(dev, "a", "b")
        # records not yet uploaded: --force alone refuses them (tests/cli/test_init_guard.py)
        res = cli("init", dev, "--capacity", "64KiB", "--force", "--discard-unuploaded", "--json")
        assert res.exit_code == 0, res
        records, findings, summary = recover_json(cli, dev)
        assert records == [] and findings == [] and summary["records"] == 0

    def test_walctl_device_env_replaces_the_argument(self, cli, tmp_path):
        dev = str(tmp_path / "env.img")
        res = cli("init", "--capacity", "64KiB", "--json", env={"WALCTL_DEVICE": dev})
        assert res.exit_code == 0, res
        assert os.path.getsize(dev) == 64 << 10


# --------------------------------------------------------------------------- append
class TestAppend:
    def test_json_record_lines_then_one_summary(self, cli, new_wal):
        dev = new_wal("64KiB")
        res = cli("append", dev, "--json", "--stream", "3", "x", "yy", "zzz")
        assert res.exit_code == 0, res
        lines = res.json_lines()
        records = [o for o in lines if o["type"] == "record"]
        assert len(records) == 3
        for i, (obj, payload) in enumerate(zip(records, ["x", "yy", "zzz"])):
            assert APPEND_RECORD_FIELDS <= set(obj), obj
            assert obj["stream_id"] == 3
            assert obj["base_offset"] == i
            assert obj["count"] == 1
            assert obj["payload_bytes"] == len(payload)
            assert isinstance(obj["offset"], int)
        offsets = [o["offset"] for o in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == 3
        assert lines[-1]["type"] == "summary"
        assert sum(1 for o in lines if o["type"] == "summary") == 1
        summary = lines[-1]
        assert APPEND_SUMMARY_FIELDS <= set(summary), summary
        assert summary["records"] == 3
        assert summary["payload_bytes"] == 6
        assert summary["first_offset"] == offsets[0]
        assert summary["last_offset"] == offsets[-1]
        assert isinstance(summary["seconds"], (int, float)) and summary["seconds"] >= 0
        assert isinstance(summary["mib_per_s"], (int, float)) and summary["mib_per_s"] >= 0

    def test_human_stdout_is_only_offsets_matching_recover(self, cli, new_wal):
        dev = new_wal("64KiB")
        res = cli("append", dev, "one", "two", "three")
        assert res.exit_code == 0, res
        lines = res.stdout.splitlines()
        assert len(lines) == 3
        offsets = [int(line) for line in lines]  # nothing but integers on stdout
        records, _, _ = recover_json(cli, dev)
        assert [r["offset"] for r in records] == offsets

    def test_offsets_continue_the_stream_across_runs_and_streams_are_independent(self, cli, new_wal, append_json):
        dev = new_wal("256KiB")
        append_json(dev, "a", "b", stream=1)
        append_json(dev, "x", stream=2)
        res = cli("append", dev, "--json", "--stream", "1", "c", "d")
        assert res.exit_code == 0, res
        assert [o["base_offset"] for o in res.json_lines() if o["type"] == "record"] == [2, 3]
        res = cli("append", dev, "--json", "--stream", "2", "y")
        assert [o["base_offset"] for o in res.json_lines() if o["type"] == "record"] == [1]
        records, _, _ = recover_json(cli, dev)
        by_stream = {}
        for r in records:
            by_stream.setdefault(r["stream_id"], []).append(r["base_offset"])
        assert by_stream == {1: [0, 1, 2, 3], 2: [0, 1]}

    def test_default_stream_is_0(self, cli, new_wal):
        dev = new_wal("64KiB")
        res = cli("append", dev, "--json", "p")
        assert [o["stream_id"] for o in res.json_lines() if o["type"] == "record"] == [0]

    def test_base_offset_sets_the_first_offset(self, cli, new_wal):
        dev = new_wal("64KiB")
        res = cli("append", dev, "--json", "--stream", "5", "--base-offset", "100", "a", "b")
        assert res.exit_code == 0, res
        assert [o["base_offset"] for o in res.json_lines() if o["type"] == "record"] == [100, 101]
        records, _, _ = recover_json(cli, dev, "--stream", "5")
        assert [r["base_offset"] for r in records] == [100, 101]

    def test_input_file_lines_framing(self, cli, new_wal, tmp_path):
        dev = new_wal("64KiB")
        src = tmp_path / "in.txt"
        src.write_bytes(b"first\nsecond\nthird\n")
        res = cli("append", dev, "--input", src, "--framing", "lines", "--json")
        assert res.exit_code == 0, res
        assert res.json_lines()[-1]["records"] == 3
        records, _, _ = recover_json(cli, dev, "--payload", "text")
        assert [r["payload"] for r in records] == ["first", "second", "third"]

    def test_input_file_raw_framing_is_one_record(self, cli, new_wal, tmp_path):
        dev = new_wal("64KiB")
        data = b"line one\nline two\n\x00\x01\x02"
        src = tmp_path / "raw.bin"
        src.write_bytes(data)
        res = cli("append", dev, "--input", src, "--framing", "raw", "--json")
        assert res.exit_code == 0, res
        records, _, _ = recover_json(cli, dev, "--payload", "hex")
        assert len(records) == 1
        assert bytes.fromhex(records[0]["payload"]) == data
        assert records[0]["payload_bytes"] == len(data)

    @pytest.mark.parametrize("data,expected", [
        (b"alpha\nbeta\ngamma\n", [b"alpha", b"beta", b"gamma"]),
        (b"alpha\nbeta\ngamma", [b"alpha", b"beta", b"gamma"]),  # no final newline
    ])
    def test_lines_framing_from_stdin_subprocess(self, run, new_wal, cli, data, expected):
        dev = new_wal("64KiB")
        res = run("append", dev, "--input", "-", "--framing", "lines", input=data)
        assert res.exit_code == 0, res
        offsets = [int(line) for line in res.stdout.splitlines()]
        assert len(offsets) == len(expected)
        records, _, _ = recover_json(cli, dev, "--payload", "hex")
        assert [r["offset"] for r in records] == offsets
        assert [bytes.fromhex(r["payload"]) for r in records] == expected

    def test_length_prefixed_framing_from_stdin_subprocess(self, run, new_wal, cli, tools):
        dev = new_wal("256KiB")
        payloads = [b"\x00\x01\x02binary", b"has\nnewlines\n", b"x" * 5000, b"\xff" * 3, b"end"]
        res = run("append", dev, "--input", "-", "--framing", "length-prefixed", "--json",
                  input=tools.length_prefixed(payloads))
        assert res.exit_code == 0, res
        lines = res.json_lines()
        recs = [o for o in lines if o["type"] == "record"]
        assert [o["payload_bytes"] for o in recs] == [len(p) for p in payloads]
        assert lines[-1]["type"] == "summary" and lines[-1]["records"] == len(payloads)
        assert lines[-1]["payload_bytes"] == sum(map(len, payloads))
        records, _, _ = recover_json(cli, dev, "--payload", "base64")
        assert [base64.b64decode(r["payload"]) for r in records] == payloads

    def test_input_stdin_with_walctl_device_env(self, run, new_wal, cli):
        dev = new_wal("64KiB")
        res = run("append", "--input", "-", input=b"via-env\n", env={"WALCTL_DEVICE": dev})
        assert res.exit_code == 0, res
        records, _, _ = recover_json(cli, dev, "--payload", "text")
        assert [r["payload"] for r in records] == ["via-env"]

    def test_full_wal_acknowledges_the_records_before_it(self, cli, new_wal, tools):
        dev = new_wal("64KiB")
        payloads = [bytes([97 + i % 26]) * 3000 for i in range(40)]
        res = cli("append", dev, "--input", "-", "--framing", "length-prefixed", "--json",
                  input=tools.length_prefixed(payloads))
        assert res.exit_code == 7, res
        line = res.error_line()
        assert "WAL full" in line and "trim or upload first" in line
        lines = res.json_lines()
        acked = [o["offset"] for o in lines if o["type"] == "record"]
        assert 0 < len(acked) < len(payloads)
        summary = lines[-1]
        assert summary["type"] == "summary" and summary["error"]["code"] == 7
        assert summary["records"] == len(acked)
        records, _, _ = recover_json(cli, dev)
        assert [r["offset"] for r in records] == acked, "every acknowledged record is in the WAL"

    def test_full_then_trim_makes_room(self, cli, new_wal, tools):
        dev = new_wal("64KiB")
        payloads = [b"q" * 3000] * 40
        res = cli("append", dev, "--input", "-", "--framing", "length-prefixed",
                  input=tools.length_prefixed(payloads))
        assert res.exit_code == 7, res
        offsets = [int(x) for x in res.stdout.split()]
        trimmed = cli("trim", dev, offsets[len(offsets) // 2])
        assert trimmed.exit_code == 0, trimmed
        again = cli("append", dev, "after-trim")
        assert again.exit_code == 0, again


# --------------------------------------------------------------------------- recover
@pytest.fixture
def three_streams(new_wal, append_json):
    """A 256 KiB WAL with streams 1, 2, 1 interleaved: returns (dev, offsets by record order, payloads)."""
    dev = new_wal("256KiB")
    layout = [(1, ["s1-a", "s1-b"]), (2, ["s2-a", "s2-b", "s2-c"]), (1, ["s1-c"])]
    offsets, payloads, streams = [], [], []
    for stream, data in layout:
        got = append_json(dev, *data, stream=stream)
        assert len(got) == len(data)
        offsets += got
        payloads += data
        streams += [stream] * len(data)
    return dev, offsets, payloads, streams


class TestRecover:
    def test_json_record_and_summary_shapes(self, cli, three_streams):
        dev, offsets, payloads, streams = three_streams
        records, findings, summary = recover_json(cli, dev)
        assert findings == []
        assert [r["offset"] for r in records] == offsets
        for r, stream, payload in zip(records, streams, payloads):
            assert RECOVER_RECORD_FIELDS <= set(r), r
            assert r["stream_id"] == stream and r["count"] == 1
            assert r["payload_bytes"] == len(payload)
            assert "payload" not in r, "the payload appears only when asked"
        assert RECOVER_SUMMARY_FIELDS <= set(summary), summary
        assert summary["records"] == len(offsets)
        assert summary["payload_bytes"] == sum(map(len, payloads))
        assert summary["trim_offset"] is None
        assert summary["end_offset"] > offsets[-1]
        assert summary["findings"] == 0

    @pytest.mark.parametrize("how,decode", [
        ("text", lambda s: s.encode()),
        ("hex", bytes.fromhex),
        ("base64", base64.b64decode),
    ])
    def test_payload_encodings(self, cli, three_streams, how, decode):
        dev, _, payloads, _ = three_streams
        records, _, _ = recover_json(cli, dev, "--payload", how)
        assert [decode(r["payload"]) for r in records] == [p.encode() for p in payloads]

    def test_payload_none_omits_it(self, cli, three_streams):
        dev, _, _, _ = three_streams
        records, _, _ = recover_json(cli, dev, "--payload", "none")
        assert records and all("payload" not in r for r in records)

    def test_text_payload_escapes_invalid_utf8(self, cli, new_wal, tools):
        dev = new_wal("64KiB")
        res = cli("append", dev, "--input", "-", "--framing", "raw", input=b"ok\xff\xfe")
        assert res.exit_code == 0, res
        records, _, _ = recover_json(cli, dev, "--payload", "text")
        assert records[0]["payload"].startswith("ok") and records[0]["payload_bytes"] == 4

    def test_from_to_select_offsets(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        records, _, _ = recover_json(cli, dev, "--from", offsets[1], "--to", offsets[4])
        assert [r["offset"] for r in records] == offsets[1:4]  # from inclusive, to exclusive
        records, _, _ = recover_json(cli, dev, "--from", offsets[-2])
        assert [r["offset"] for r in records] == offsets[-2:]
        records, _, _ = recover_json(cli, dev, "--to", offsets[2])
        assert [r["offset"] for r in records] == offsets[:2]
        records, _, _ = recover_json(cli, dev, "--from", offsets[0] + 1, "--to", offsets[1] + 1)
        assert [r["offset"] for r in records] == [offsets[1]]

    def test_stream_filter(self, cli, three_streams):
        dev, offsets, _, streams = three_streams
        for stream in (1, 2):
            records, _, _ = recover_json(cli, dev, "--stream", stream)
            assert [r["offset"] for r in records] == [o for o, s in zip(offsets, streams) if s == stream]
            assert all(r["stream_id"] == stream for r in records)
        records, _, _ = recover_json(cli, dev, "--stream", "9")
        assert records == []

    def test_limit(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        records, _, _ = recover_json(cli, dev, "--limit", "2")
        assert [r["offset"] for r in records] == offsets[:2]
        assert cli("recover", dev, "--json", "--limit", "0").exit_code == 2  # as read -n 0 (issue 30)

    def test_filters_combine(self, cli, three_streams):
        dev, offsets, _, streams = three_streams
        s2 = [o for o, s in zip(offsets, streams) if s == 2]
        records, _, _ = recover_json(cli, dev, "--stream", "2", "--from", s2[1], "--limit", "1")
        assert [r["offset"] for r in records] == [s2[1]]

    def test_stats_json(self, cli, three_streams):
        dev, _, payloads, streams = three_streams
        res = cli("recover", dev, "--stats", "--json")
        assert res.exit_code == 0, res
        lines = res.json_lines()
        assert not [o for o in lines if o["type"] == "record"], "--stats prints no record lines"
        assert lines[-1]["type"] == "summary"
        assert sum(1 for o in lines if o["type"] == "summary") == 1
        per_stream = {o["stream_id"]: o for o in lines if o.get("stream_id") is not None and o["type"] != "summary"}
        for stream in (1, 2):
            mine = [p for p, s in zip(payloads, streams) if s == stream]
            assert per_stream[stream]["records"] == len(mine)
            assert per_stream[stream]["payload_bytes"] == sum(map(len, mine))
        assert lines[-1]["records"] == len(payloads)

    def test_stats_human(self, cli, three_streams):
        dev, _, payloads, _ = three_streams
        res = cli("recover", dev, "--stats")
        assert res.exit_code == 0, res
        assert "s1-a" not in res.stdout
        out = res.stdout
        assert "records" in out and "payload" in out
        assert str(len(payloads)) in out

    def test_human_output_lists_records(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        res = cli("recover", dev, "--payload", "text")
        assert res.exit_code == 0, res
        for offset in offsets:
            assert str(offset) in res.stdout
        assert "s2-b" in res.stdout
        assert "walctl:" not in res.stdout, "logs and warnings belong on stderr"

    def test_walctl_device_env_replaces_the_argument(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        res = cli("recover", "--json", env={"WALCTL_DEVICE": dev})
        assert res.exit_code == 0, res
        assert [o["offset"] for o in res.json_lines() if o["type"] == "record"] == offsets

    def test_walctl_device_env_in_a_subprocess(self, run, three_streams):
        dev, offsets, _, _ = three_streams
        res = run("recover", "--json", env={"WALCTL_DEVICE": dev})
        assert res.exit_code == 0, res
        assert [o["offset"] for o in res.json_lines() if o["type"] == "record"] == offsets

    def test_option_beats_the_env_variable(self, cli, three_streams, tmp_path):
        dev, offsets, _, _ = three_streams
        res = cli("recover", dev, "--json", env={"WALCTL_DEVICE": str(tmp_path / "absent.img")})
        assert res.exit_code == 0, res

    def test_recover_never_writes(self, cli, three_streams):
        dev, _, _, _ = three_streams
        before = open(dev, "rb").read()
        mtime = os.stat(dev).st_mtime_ns
        for extra in ([], ["--json"], ["--stats"], ["--payload", "hex"]):
            assert cli("recover", dev, *extra).exit_code == 0
        assert open(dev, "rb").read() == before
        assert os.stat(dev).st_mtime_ns == mtime

    @pytest.mark.parametrize("slot", [0, 1])
    def test_one_damaged_header_slot_is_a_finding_exit_0(self, cli, three_streams, tools, slot):
        dev, offsets, _, _ = three_streams
        tools.flip_byte(dev, slot * 4096 + 13)  # inside capacity: that slot's crc fails
        res = cli("recover", dev, "--json")
        assert res.exit_code == 0, res
        lines = res.json_lines()
        findings = [o for o in lines if o["type"] == "finding"]
        assert len(findings) == 1, findings
        assert lines[-1]["findings"] >= 1
        assert [o["offset"] for o in lines if o["type"] == "record"] == offsets

    def test_crash_torn_tail_is_reported_exit_0(self, cli, new_wal, held_writer, tools):
        dev = new_wal("256KiB")
        writer = held_writer(dev, b"rec-0")
        writer.send(b"rec-1")
        last = writer.send(b"rec-2")
        writer.kill()  # the header stays "ungraceful"
        tools.flip_byte(dev, tools.physical(last, 256 << 10) + tools.RECORD_HEADER + tools.BATCH_HEADER + 1)
        res = cli("recover", dev, "--json")
        assert res.exit_code == 0, res
        lines = res.json_lines()
        assert [o["offset"] for o in lines if o["type"] == "record"] == writer.offsets[:-1]
        findings = [o for o in lines if o["type"] == "finding"]
        assert findings and findings[0]["offset"] == last
        assert lines[-1]["findings"] == len(findings)
        # a new writer seals the tail; afterwards the log is clean
        assert cli("append", dev, "next").exit_code == 0
        _, findings, summary = recover_json(cli, dev)
        assert findings == [] and summary["findings"] == 0


# --------------------------------------------------------------------------- trim
class TestTrim:
    def test_trim_then_recover_shows_only_later_records(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        res = cli("trim", dev, offsets[2], "--json")
        assert res.exit_code == 0, res
        obj = res.json_lines()
        assert len(obj) == 1 and obj[0]["trim_offset"] == offsets[2]
        records, _, summary = recover_json(cli, dev)
        assert [r["offset"] for r in records] == offsets[3:]
        assert summary["trim_offset"] == offsets[2]
        assert summary["records"] == len(offsets) - 3

    def test_trim_human(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        res = cli("trim", dev, offsets[0])
        assert res.exit_code == 0, res
        assert str(offsets[0]) in res.stdout

    def test_trim_moves_forward_repeatedly_and_to_the_last_record(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        for offset in (offsets[0], offsets[3], offsets[-1]):
            assert cli("trim", dev, offset).exit_code == 0
        records, _, summary = recover_json(cli, dev)
        assert records == [] and summary["trim_offset"] == offsets[-1]

    def test_non_record_offset_exit_2_names_the_nearest(self, cli, three_streams, tools):
        dev, offsets, _, _ = three_streams
        target = offsets[1] + 10
        res = cli("trim", dev, target)
        assert res.exit_code == 2, res
        line = res.error_line()
        assert "nearest" in line
        assert str(offsets[1]) in line and str(offsets[2]) in line
        records, _, summary = recover_json(cli, dev)
        assert summary["trim_offset"] is None and len(records) == len(offsets), "a refused trim changes nothing"

    def test_backwards_is_refused_exit_2(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        assert cli("trim", dev, offsets[3]).exit_code == 0
        for offset in (offsets[1], offsets[3]):
            res = cli("trim", dev, offset)
            assert res.exit_code == 2, res
            res.error_line()
        _, _, summary = recover_json(cli, dev)
        assert summary["trim_offset"] == offsets[3]

    def test_append_after_trim_continues_the_stream(self, cli, three_streams):
        dev, offsets, _, streams = three_streams
        assert cli("trim", dev, offsets[1]).exit_code == 0
        res = cli("append", dev, "--json", "--stream", "1", "s1-d")
        assert res.exit_code == 0, res
        assert [o["base_offset"] for o in res.json_lines() if o["type"] == "record"] == [3]

    def test_walctl_device_env_replaces_the_argument(self, cli, three_streams):
        dev, offsets, _, _ = three_streams
        res = cli("trim", offsets[0], env={"WALCTL_DEVICE": dev})
        assert res.exit_code == 0, res


# --------------------------------------------------------------------------- concurrency
class TestConcurrentWriter:
    def test_second_writer_refused_reader_warns(self, cli, run, new_wal, held_writer):
        dev = new_wal("1MiB")
        writer = held_writer(dev, b"held-1")  # printed its offset: durable, and the lock is held
        pid = str(writer.proc.pid)
        for args in (("append", dev, "intruder"), ("trim", dev, writer.offsets[0]),
                     ("append", dev, "--input", "-"), ("init", dev, "--capacity", "1MiB", "--force")):
            res = run(*args, input=b"x\n")
            assert res.exit_code == 5, res
            line = res.error_line()
            assert pid in line, f"the holder's pid should be named: {line}"
            assert res.stdout == ""
        res = run("recover", dev, "--json", "--payload", "text")
        assert res.exit_code == 0, res
        assert "warning" in res.stderr and "walctl: error" not in res.stderr
        lines = res.json_lines()
        assert lines[-1]["type"] == "summary"
        assert [o["payload"] for o in lines if o["type"] == "record"] == ["held-1"]
        # the holder is unaffected: more records, then a clean end
        writer.send(b"held-2")
        code, out, err = writer.finish()
        assert code == 0, err
        records, findings, _ = recover_json(cli, dev, "--payload", "text")
        assert [r["payload"] for r in records] == ["held-1", "held-2"]
        assert [r["offset"] for r in records] == writer.offsets
        assert findings == []

    def test_offsets_are_printed_as_records_become_durable(self, cli, new_wal, held_writer):
        dev = new_wal("256KiB")
        writer = held_writer(dev, b"one")  # would hang here if offsets were printed only at the end
        writer.send(b"two")
        # a reader sees both acknowledged records while the writer is still running
        res = cli("recover", dev, "--json", "--payload", "text")
        assert res.exit_code == 0, res
        assert [o["payload"] for o in res.json_lines() if o["type"] == "record"] == ["one", "two"]
        code, _, err = writer.finish()
        assert code == 0, err
