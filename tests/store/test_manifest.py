"""The manifest as a type (issue 12 item 3): the JSON on disk stays byte for byte what walctl wrote
before it was one, and each named transition makes the edit the raw-dict code made."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from walctl.errors import CorruptionError
from walctl.store import manifest as mf

# Written by walctl before the manifest was a type (two uploads, one with an accepted gap, an SO
# compaction, then a prepare): live SO and SSO objects, replaced objects, a prepared id, stream gaps.
EXISTING = Path(__file__).parent / "data" / "manifest-v1.json"
LATER = time.time() + 2 * mf.PREPARE_TTL_S  # when every prepared id has expired


def test_an_existing_document_round_trips_byte_for_byte():
    raw = EXISTING.read_bytes()
    doc = mf.parse_manifest(raw, "manifest/00000000000000000009.json")
    assert doc.encode() == raw
    assert doc.number == 9 and doc.stream(1) == mf.StreamSpan(0, 21) and doc.stream(3) is None
    assert doc.upload_mark(-1).offset == 36864 and [g.cause for g in doc.stream_gaps] == ["accepted"]
    assert doc.prepared_ids() == {6} and doc.live_ids() == {2, 4, 5} and doc.referenced_ids() == {1, 2, 3, 4, 5, 6}


def test_a_commit_rewrites_an_existing_document_unchanged_but_its_commit_fields(local_store):
    raw = EXISTING.read_bytes()
    local_store.put(mf.manifest_key(9), raw, if_absent=True)
    committed = mf.commit(local_store, lambda m: None, command="test: nothing")
    new = json.loads(local_store.read_all(mf.manifest_key(10)))
    old = json.loads(raw)
    commit_fields = {"number", "parent", "commit_id", "time", "writer"}
    assert {k: v for k, v in new.items() if k not in commit_fields} == \
        {k: v for k, v in old.items() if k not in commit_fields}
    assert (new["number"], new["parent"], committed.number) == (10, 9, 10)
    assert local_store.read_all(mf.manifest_key(10)) == committed.manifest.encode()


def test_no_stream_gaps_key_is_written_where_there_was_none_and_unknown_keys_are_kept():
    doc = json.loads(EXISTING.read_bytes())
    del doc["stream_gaps"]
    doc["from_a_later_walctl"] = {"kept": [1, 2]}
    raw = json.dumps(doc, indent=1, sort_keys=True).encode()
    parsed = mf.parse_manifest(raw, "k")
    assert parsed.stream_gaps is None and parsed.encode() == raw
    assert mf.Manifest().to_json() == {
        "version": 1, "number": 0, "parent": None, "commit_id": None, "time": None, "writer": None,
        "next_object_id": 1, "compactor_epoch": 0, "streams": {}, "objects": [], "prepared": [], "deleting": [],
        "wal_uploads": {}}


@pytest.mark.parametrize("damage", [lambda d: d.pop("streams"), lambda d: d.update(streams={"x": {}}),
                                    lambda d: d.update(version=2)])
def test_a_malformed_document_is_corruption(damage):
    doc = json.loads(EXISTING.read_bytes())
    damage(doc)
    with pytest.raises(CorruptionError):
        mf.parse_manifest(json.dumps(doc).encode(), "k")


def _obj(oid: int, sid: int, start: int, end: int) -> mf.LiveObject:
    return mf.LiveObject(oid, mf.object_key(oid), "SO", 10, [mf.ObjectRange(sid, start, end, 5)], order_id=oid,
                         data_time=1.0)


def test_the_transitions_make_the_documents_edits():
    m = mf.Manifest()
    prepared = m.prepare(3, "default", now=100.0)
    assert prepared == [mf.PreparedId(i, mf.object_key(i), 100.0, 100.0 + mf.PREPARE_TTL_S) for i in (1, 2, 3)]
    assert m.next_object_id == 4
    m.make_live([_obj(1, 7, 5, 10), _obj(2, 7, 0, 5)])  # the span grows both ways
    m.advance(-1, mf.UploadMark(offset=0, stream_id=7, base_offset=5, body_crc=1))
    assert m.to_json()["streams"] == {"7": {"start": 0, "end": 10}} and m.prepared_ids() == {3}
    assert m.upload_mark("-1") == m.upload_mark(-1) == m.wal_uploads["-1"]
    assert m.holds(7, 2, 4) and not m.holds(7, 10, 11) and not m.holds(8, 0, 1)
    assert m.fence() == 1 and m.compactor_epoch == 1
    m.replace({1, 2}, [_obj(3, 7, 0, 10)], reserved={3}, now=200.0)
    assert m.live_ids() == {3} and m.prepared == []
    assert m.deleting == [mf.DeletingEntry(1, mf.object_key(1), 200.0), mf.DeletingEntry(2, mf.object_key(2), 200.0)]
    m.retain(7, 4)
    m.retain(7, 2)  # never moves back
    m.retain(9, 4)  # no such stream: nothing
    assert m.stream(7) == mf.StreamSpan(4, 10) and m.holds(7, 0, 4) and 9 not in m.streams
    m.forget(prepared_ids=(), deleting_ids={1})
    assert [d.id for d in m.deleting] == [2]
    gap = {"stream_id": 7, "from": 10, "to": 12, "cause": "accepted", "hole_start": None, "sealed": False,
           "sealed_at_ns": None, "before_wal_offset": 0, "after_wal_offset": 4096, "node_id": -1, "time": 3.0}
    m.add_gaps([mf.StreamGap.from_json(gap)])
    assert m.to_json()["stream_gaps"] == [gap]


def test_entries_are_typed_and_keep_unknown_keys_byte_for_byte():
    doc = json.loads(EXISTING.read_bytes())
    doc["objects"][0]["later"] = {"a": 1}
    doc["objects"][0]["ranges"][0]["later"] = [1]
    doc["prepared"][0]["later"] = None
    doc["deleting"][0]["later"] = "x"
    doc["wal_uploads"]["-1"]["later"] = 2
    doc["stream_gaps"][0]["later"] = True
    doc["stream_gaps"][0]["hole_start"] = None  # an optional key with null stays null
    raw = json.dumps(doc, indent=1, sort_keys=True).encode()
    m = mf.parse_manifest(raw, "k")
    assert m.encode() == raw
    o = m.objects[0]
    assert isinstance(o, mf.LiveObject) and isinstance(o.ranges[0], mf.ObjectRange)
    assert (o.id, o.key, o.kind, o.order_id, o.ranges[0].stream_id, o.extra) == (2, "20000000/default/2", "SSO", 2, 2,
                                                                              {"later": {"a": 1}})
    assert isinstance(m.prepared[0], mf.PreparedId) and m.prepared[0].expires_at > m.prepared[0].prepared_at
    assert isinstance(m.deleting[0], mf.DeletingEntry) and m.deleting[0].marked_at > 0
    mark = m.upload_mark(-1)
    assert isinstance(mark, mf.UploadMark) and (mark.offset, mark.extra) == (36864, {"later": 2})
    gap = m.stream_gaps[0]
    assert isinstance(gap, mf.StreamGap) and gap.cause == "accepted" and gap.to_offset > gap.from_offset
    assert gap.hole_start is None and gap.to_json()["hole_start"] is None
    assert mark.to_json() == doc["wal_uploads"]["-1"] and gap.to_json() == doc["stream_gaps"][0]


def test_every_manifest_of_a_real_store_round_trips_byte_for_byte(tmp_path, local_store):
    """Uploads (one with a split into SOs), an SO compaction, an aborted prepare and gc: each
    manifest they wrote parses to typed entries and re-encodes to the very bytes on disk."""
    from walctl.compaction.so import compact_stream_objects
    from walctl.pipeline.upload import upload
    from walctl.store.gc import gc

    from storehelpers import append, make_wal

    wal = make_wal(tmp_path)
    append(wal, {1: (20, 300), 2: (5, 100)})
    upload(wal, local_store, split_size=1024)
    append(wal, {1: (20, 300)})
    upload(wal, local_store, split_size=1024)
    compact_stream_objects(local_store, target_size=1 << 30)
    mf.commit(local_store, lambda m: m.prepare(1, "default") and None, command="test: prepare")
    kinds = set()
    for n in mf.manifest_numbers(local_store):
        m = _round_trip(local_store, n)
        kinds |= {type(e) for e in (*m.objects, *m.prepared, *m.deleting, *m.wal_uploads.values())}
    assert kinds == {mf.LiveObject, mf.PreparedId, mf.DeletingEntry, mf.UploadMark}
    assert gc(local_store, grace_s=0, now=LATER).forgotten_prepared
    newest = _round_trip(local_store, mf.manifest_numbers(local_store)[-1])
    assert newest.prepared == [] and newest.deleting == []


def _round_trip(store, number: int) -> mf.Manifest:
    raw = store.read_all(mf.manifest_key(number))
    m = mf.parse_manifest(raw, mf.manifest_key(number))
    assert m.encode() == raw
    return m
