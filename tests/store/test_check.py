"""walctl check (issue 28 item 4): a store against its manifest, on a local store and on S3 over HTTP.

One store of four live objects is damaged four ways (truncated, a bit flipped in a payload,
deleted, an orphan beside them) and checked with and without --read-data: each problem, the
verdict line, the exit code and the requests it cost. Then the other views of a truncated
object: inspect-object (by path, by id, --deep), ls, and compact's refusal.
"""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from walctl.cli import app
from walctl.format import object as obj
from walctl.pipeline.check import check_store
from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import KiB, append, make_wal, put_objects

# Four objects: two SSOs and two SOs, several blocks each (block_size below), ~100-200 KiB.
SPECS = [[(1, 6, 16 * KiB), (2, 4, 16 * KiB)], [(1, 6, 16 * KiB)], [(3, 8, 16 * KiB)],
         [(2, 3, 16 * KiB), (3, 3, 16 * KiB)]]
BLOCK = 32 * KiB
LONG_AGO = time.time() - 2 * mf.PREPARE_TTL_S


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def url_args(store, request) -> list[str]:
    """--store (and for S3 --endpoint-url) naming ``store`` on the command line."""
    if store.url.startswith("s3://"):
        return ["--store", store.url, "--endpoint-url", request.getfixturevalue("s3_server")]
    return ["--store", store.url]


def build(store) -> dict[int, dict]:
    """The four live objects (ids 1-4), then ids 5 and 6 prepared long ago: 5 released again with an
    object under its key (an orphan: allocated, referenced by nothing), 6 still prepared (stale)."""
    put_objects(store, SPECS, block_size=BLOCK)
    mf.commit(store, lambda m: m.prepare(2, mf.DEFAULT_NAMESPACE, now=LONG_AGO) and None, command="test prepare")
    mf.commit(store, lambda m: m.release([5]), command="test release")
    store.put(mf.object_key(5), store.read_all(mf.object_key(4)))
    return {o.id: o for o in mf.load_latest(store).objects}


def flip_payload_bit(store, key: str) -> None:
    """One bit inside the first batch's payload of the object's second block: no header, no index
    changes, only the footer's data crc (read with --read-data) can see it."""
    data = bytearray(store.read_all(key))
    _, entries = obj.parse_tail(data, len(data))
    position = entries[1].block_position + obj.DATA_BLOCK_HEADER_SIZE + 33 + 100  # 33: a batch header
    data[position] ^= 0x10
    store.put(key, bytes(data))


def damage(store, objects) -> None:
    store.put(objects[1].key, store.read_all(objects[1].key)[:objects[1].size * 3 // 5])
    flip_payload_bit(store, objects[2].key)
    store.delete(objects[3].key)


def kinds(result) -> set[tuple[str, int | None]]:
    return {(p.kind, p.object_id) for p in result.problems}


def test_a_clean_store_passes_and_costs_one_list_and_one_tail_read_per_object(store, request):
    objects = build(store)
    store.stats.reset()
    result = check_store(store)
    assert not result.damage and result.objects == 4
    assert kinds(result) == {("orphan", 5), ("stale_prepared", 6)}
    stats = store.stats.snapshot()
    # the manifest: its LIST and its GET; the objects: one LIST and one ranged GET of each tail
    assert stats["list"] == 2 and stats["get"] == 1 + 4 and stats["ranged_gets"] == 4 and stats["head"] == 0
    tails = sum(o.size - sum(r.bytes for r in o.ranges) for o in objects.values())
    manifest_bytes = len(store.read_all(mf.manifest_key(result.manifest_number)))
    assert stats["bytes_read"] == manifest_bytes + tails  # footers and indexes, never data

    code, out, err = cli("check", *url_args(store, request))
    assert code == 0, err
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("check: 0 problems in 4 live objects (")
    assert "data not read (--read-data checks every block)" in verdict
    assert "also 1 orphan object, 1 stale prepared id (not damage: walctl gc removes them)" in verdict
    orphan_row = next(line for line in out.splitlines() if mf.object_key(5) in line)
    assert "orphan" in orphan_row and " no " in orphan_row  # listed, as no damage


def test_truncated_missing_and_bit_flipped_objects_are_found(store, request):
    objects = build(store)
    damage(store, objects)
    store.stats.reset()
    result = check_store(store)
    size1 = objects[1].size
    assert {(p.kind, p.object_id) for p in result.damage} == {("truncated", 1), ("missing", 3)}
    truncated = next(p for p in result.problems if p.kind == "truncated")
    assert truncated.detail == f"truncated: {size1 * 3 // 5:,} of {size1:,} bytes"
    assert truncated.key == objects[1].key
    stats = store.stats.snapshot()
    assert stats["list"] == 2 and stats["get"] == 1 + 2  # tails of 2 and 4 only: 1 is short, 3 gone

    code, out, err = cli("check", *url_args(store, request))
    assert code == 3
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("check: 2 problems in 4 live objects (")
    assert ": 1 missing object, 1 truncated object;" in verdict or ": 1 truncated object, 1 missing object;" in verdict
    assert "data not read" in verdict  # so the flipped bit in object 2 is not claimed checked
    # the first damage (by kind: missing, then truncated, ...) names the object
    assert err.count("walctl: error:") == 1 and "2 problems; first: object 3 live in the manifest, not in the store" \
        in err and objects[3].key in err

    # --read-data: every block of 2 and 4; the flipped payload bit in 2 shows in the data crc
    store.stats.reset()
    result = check_store(store, read_data=True)
    assert {(p.kind, p.object_id) for p in result.damage} == {("truncated", 1), ("missing", 3), ("data", 2)}
    data = next(p for p in result.damage if p.kind == "data")
    assert "crc mismatch" in data.detail and "inside a record payload" in data.detail
    stats = store.stats.snapshot()
    # the manifest, then for 2 and 4 the tail and one ranged GET of the data region (< 16 MiB)
    assert stats["get"] == 1 + 2 * 2 and stats["bytes_read"] >= objects[2].size + objects[4].size
    assert result.data_objects == 2

    code, out, err = cli("check", *url_args(store, request), "--read-data", "--json")
    assert code == 3
    doc = json.loads(out)
    assert doc["verdict"] == "damaged" and doc["damage_count"] == 3 and doc["error"]["code"] == 3
    assert doc["live_objects"] == 4 and doc["data_objects_read"] == 2 and doc["requests"]["get"] == 1 + 2 * 2
    assert {(p["kind"], p["object_id"], p["damage"]) for p in doc["problems"]} == {
        ("truncated", 1, True), ("missing", 3, True), ("data", 2, True), ("orphan", 5, False),
        ("stale_prepared", 6, False)}
    assert all(p["key"] and p["detail"] for p in doc["problems"])
    assert "every block of 2 objects read" in doc["verdict_line"]


def test_subset_reads_the_data_of_one_share(local_store):
    objects = build(local_store)
    flip_payload_bit(local_store, objects[2].key)
    local_store.stats.reset()
    first = check_store(local_store, subset=(1, 2))  # ids 2 and 4 (id mod 2 == 0)
    assert first.read_data and first.data_objects == 2
    assert [(p.kind, p.object_id) for p in first.damage] == [("data", 2)]
    assert local_store.stats.get == 1 + 2 + 2 * 2  # manifest, tails of 1 and 3, tail and data of 2 and 4
    second = check_store(local_store, subset=(2, 2))  # ids 1 and 3: the footer check only for 2 and 4
    assert second.data_objects == 2 and not second.damage
    code, out, _ = cli("check", "--store", local_store.url, "--subset", "2/2")
    assert code == 0 and "(share 2/2)" in out
    code, _, err = cli("check", "--store", local_store.url, "--subset", "3/2")
    assert code == 2 and "--subset" in err


def test_coverage_holes_and_overlaps_in_the_manifest(local_store):
    objects = build(local_store)

    def broken(m):
        m.streams[3].end += 5  # offsets no object holds
        o4 = next(o for o in m.objects if o.id == 4)
        o4.ranges[0].start -= 1  # stream 2: claims an offset object 1 holds (and its index does not)

    mf.commit(local_store, broken, command="test break")
    result = check_store(local_store)
    found = {(p.kind, p.object_id) for p in result.damage}
    assert ("coverage", None) in found and ("overlap", 4) in found and ("index", 4) in found
    hole = next(p for p in result.damage if p.kind == "coverage")
    end = objects[3].ranges[0].end + 3
    assert f"stream 3: offsets [{end}, {end + 5}) are in no live object" in hole.detail
    assert "stream 2: objects 1 and 4 both hold offsets" in next(p for p in result.damage if p.kind == "overlap").detail


def test_no_store_or_no_manifest_is_not_found(tmp_path):
    code, _, err = cli("check", "--store", tmp_path / "nothing")
    assert code == 4 and not (tmp_path / "nothing").exists()
    (tmp_path / "empty").mkdir()
    code, out, err = cli("check", "--store", tmp_path / "empty", "--json")
    assert code == 4 and "no manifest" in err and json.loads(out)["error"]["code"] == 4


# -- the other views of a truncated object -------------------------------------------------------

def _uploaded_and_truncated(tmp_path):
    """A real upload of one object, then the object cut to 60%: (store dir, key, size, cut size)."""
    from walctl.pipeline.upload import upload

    wal = make_wal(tmp_path)
    append(wal, {1: (20, 4000), 2: (10, 4000)})
    store = open_store(str(tmp_path / "store"))
    key = upload(wal, store).objects[0]["key"]
    path = tmp_path / "store" / key
    data = path.read_bytes()
    path.write_bytes(data[:len(data) * 3 // 5])
    return tmp_path / "store", key, len(data), len(data) * 3 // 5


def test_inspect_object_names_a_truncated_object(tmp_path):
    store_dir, key, size, cut = _uploaded_and_truncated(tmp_path)
    named = f"truncated: {cut:,} of {size:,} bytes"
    for args in ([store_dir / key], ["1", "--store", store_dir]):  # by path (was: not ours, exit 4), by id
        code, _, err = cli("inspect-object", *args)
        assert code == 3 and named in err and "TARGET" not in err, err
        code, out, err = cli("inspect-object", *args, "--deep")  # (was: "bad magic" and no verdict)
        assert code == 3, err
        assert f"VERDICT: DAMAGED: 2 problems; first at byte {cut}: {named}" in out
        code, out, _ = cli("inspect-object", *args, "--deep", "--json")
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["verdict"] == "damaged" and named in summary["verdict_line"]
    code, out, _ = cli("check", "--store", store_dir)
    assert code == 3 and "1 truncated object" in out


def test_ls_shows_a_size_mismatch(tmp_path):
    store_dir, key, size, cut = _uploaded_and_truncated(tmp_path)
    code, out, err = cli("ls", "--store", store_dir)
    assert code == 0
    assert f"(truncated: {cut:,} of {size:,} bytes)" in out
    assert "1 live object differs from the manifest" in err and "walctl check" in err
    code, out, _ = cli("ls", "--store", store_dir, "--json")
    (o,) = json.loads(out)["objects"]
    assert o["size_bytes"] == size and o["store_size_bytes"] == cut


@pytest.mark.parametrize("dry_run", [["--dry-run"], []])
@pytest.mark.parametrize("how", ["truncated", "footer"])
def test_compact_refuses_a_damaged_source_by_name(tmp_path, dry_run, how):
    store = open_store(str(tmp_path / "store"))
    put_objects(store, [[(1, 3, 3000), (2, 3, 3000)], [(1, 2, 3000), (2, 2, 3000)]])
    victim = mf.load_latest(store).objects[1]
    path = tmp_path / "store" / victim.key
    data = bytearray(path.read_bytes())
    if how == "truncated":
        del data[victim.size // 2:]
    else:
        data[-8] ^= 0xFF  # the footer's magic
    path.write_bytes(bytes(data))
    code, _, err = cli("compact", "--store", tmp_path / "store", "--level", "sso", *dry_run)
    assert code == 3, err  # was 4, "not a walctl or AutoMQ object" with a hint about TARGET
    named = (f"truncated: {victim.size // 2:,} of {victim.size:,} bytes" if how == "truncated"
             else "live object has a damaged footer")
    assert named in err and victim.key in err and "TARGET" not in err
    assert mf.load_latest(store).number == 1  # nothing committed


def test_the_reported_case_a_9_mib_object_cut_to_5000000_bytes(tmp_path):
    """Issue 28's report: `truncate -s 5000000` of a 9.1 MiB object."""
    import os

    store = open_store(str(tmp_path / "store"))
    put_objects(store, [[(1, 145, 64 * KiB), (2, 1, 100)]], block_size=1 << 20)
    (o,) = mf.load_latest(store).objects
    assert 9 << 20 < o.size < 10 << 20
    os.truncate(tmp_path / "store" / o.key, 5_000_000)
    named = f"truncated: 5,000,000 of {o.size:,} bytes"
    code, out, err = cli("inspect-object", tmp_path / "store" / o.key, "--deep")
    assert code == 3 and f"VERDICT: DAMAGED: 2 problems; first at byte 5000000: {named}" in out, err
    code, out, err = cli("check", "--store", tmp_path / "store")
    assert code == 3 and named in out and named in err


@pytest.mark.parametrize("damage_at", [None, "payload", "block magic", "batch offset"])
@pytest.mark.parametrize("run_bytes", [1, 100 * KiB, 16 << 20])
def test_streamed_verify_finds_what_verify_report_finds(local_store, damage_at, run_bytes):
    """check --read-data's bounded-memory verify (ranged GETs of whole index entries) against
    inspect-object --deep's verify_report of the whole object: the same problems, blocks and batches."""
    from walctl.store.inspect import verify_streamed

    put_objects(local_store, [[(1, 6, 16 * KiB), (2, 5, 10 * KiB)]], block_size=BLOCK)
    (o,) = mf.load_latest(local_store).objects
    data = bytearray(local_store.read_all(o.key))
    footer, entries = obj.parse_tail(data, len(data))
    third = sorted(entries, key=lambda e: e.block_position)[2]
    where = {"payload": third.block_position + obj.DATA_BLOCK_HEADER_SIZE + 33 + 7,
             "block magic": third.block_position, "batch offset": third.block_position + obj.DATA_BLOCK_HEADER_SIZE + 20}
    if damage_at is not None:
        data[where[damage_at]] ^= 0x04
        local_store.put(o.key, bytes(data))
    whole = obj.verify_report(bytes(data))
    local_store.stats.reset()
    streamed = verify_streamed(local_store, o.key, footer, entries, run_bytes=run_bytes)
    assert streamed.problems == whole.problems and (damage_at is None) == (not streamed.problems)
    assert (streamed.blocks, streamed.batches) == (whole.blocks, whole.batches)
    assert local_store.stats.get == (len(entries) if run_bytes == 1 else 1 if run_bytes > o.size else 2)
    located = [p for p in streamed.problems if p.block_position is not None]
    if damage_at in ("block magic", "batch offset"):
        assert located and located[0].block_position == third.block_position
