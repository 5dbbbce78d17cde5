"""inspect-object --records (batches per block, with positions) and --deep's verdict and block narrowing."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from walctl.cli import app
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.pipeline.upload import upload

from storehelpers import append, make_wal


def inspect_json(*args):
    r = CliRunner().invoke(app, ["inspect-object", *map(str, args), "--json"])
    assert "Traceback" not in r.stderr
    return r.exit_code, [json.loads(x) for x in r.stdout.splitlines()], r.stderr


def sso(tmp_path, local_store):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (6, 300), 2: (4, 100)})
    result = upload(wal, local_store, block_size=700, split_size=1 << 20)
    key = result.objects[0]["key"]
    return appended, os.path.join(local_store.root, key)


def test_records_per_block_with_positions(tmp_path, local_store):
    appended, path = sso(tmp_path, local_store)
    code, lines, _ = inspect_json(path, "--records", "--payload", "hex")
    assert code == 0
    recs = [x for x in lines if x["type"] == "record"]
    assert [(x["stream_id"], x["base_offset"]) for x in recs] == [(1, i) for i in range(6)] + [(2, i) for i in range(4)]
    assert [bytes.fromhex(x["payload"]) for x in recs] == appended[1] + appended[2]
    data = open(path, "rb").read()
    for x in recs:  # each position really holds that batch, inside that block
        b = StreamRecordBatch.decode(data, x["batch_position"])
        assert (b.stream_id, b.base_offset) == (x["stream_id"], x["base_offset"])
        assert obj.DataBlockHeader.decode(data, x["block_position"]).block_size > x["batch_position"] - x["block_position"]
    summary = lines[-1]
    assert summary["records"] == 10 and summary["record_reads"] == 1  # all blocks adjacent: one read
    code, lines, _ = inspect_json(path, "--records", "--stream", 2)
    assert [x["stream_id"] for x in lines if x["type"] == "record"] == [2] * 4


def test_deep_verdict_ok_and_narrowed_damage(tmp_path, local_store):
    _, path = sso(tmp_path, local_store)
    r = CliRunner().invoke(app, ["inspect-object", path, "--deep"])
    assert r.exit_code == 0 and "VERDICT: OK" in r.stdout
    data = open(path, "rb").read()
    footer, entries = obj.parse_tail(data, len(data))
    third = [e for e in entries if e.stream_id == 1][1]  # a block in the middle of the object
    damaged = bytearray(data)
    damaged[third.block_position + 10] = 0x99  # its first batch's magic
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(damaged))
    code, lines, err = inspect_json(bad, "--deep")
    assert code == 3
    problems = [x for x in lines if x["type"] == "problem"]
    located = [p for p in problems if p["block_position"] is not None]
    assert located and located[0]["block_position"] == third.block_position
    assert located[0]["block_end"] == third.block_end and located[0]["start_offset"] == third.start_offset
    crc = next(p for p in problems if p["kind"] == "ChecksumError")
    assert f"[{third.block_position}, {third.block_end})" in crc["explanation"]
    assert lines[-1]["verdict"] == "damaged" and f"byte {third.block_position + 10}" in err
    r = CliRunner().invoke(app, ["inspect-object", str(bad), "--deep"])
    verdict = [x for x in r.stdout.splitlines() if x.startswith("VERDICT")]
    assert verdict and "DAMAGED" in verdict[0] and f"block [{third.block_position}, {third.block_end})" in verdict[0]


def test_deep_payload_flip_says_it_cannot_be_placed(tmp_path, local_store):
    _, path = sso(tmp_path, local_store)
    data = bytearray(open(path, "rb").read())
    data[10 + 33 + 5] ^= 0x01  # a payload byte: structure intact
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    code, lines, _ = inspect_json(bad, "--deep")
    assert code == 3
    (p,) = [x for x in lines if x["type"] == "problem"]
    assert p["kind"] == "ChecksumError" and "payload" in p["explanation"] and p["block_position"] is None
