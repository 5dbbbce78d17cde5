"""store/manifest.py's queries, transitions and entries one by one (issue 32: the transitions were
exercised only by the upload, gc and compaction tests, too slow for a mutant's selection)."""

from __future__ import annotations

import copy
import json
import time

import pytest

from walctl.errors import CorruptionError, RefusedError
from walctl.store import manifest as mf


def _obj(oid: int, kind: str = "SO", ranges=((7, 0, 10),)) -> mf.LiveObject:
    return mf.LiveObject(oid, mf.object_key(oid), kind, 100 + oid,
                         [mf.ObjectRange(sid, s, e, 5) for sid, s, e in ranges], order_id=oid, data_time=1.0)


def _state() -> mf.Manifest:
    m = mf.Manifest()
    m.objects = [_obj(1), _obj(2, "SSO", ((7, 10, 20), (8, 0, 3))), _obj(3, "SO", ((8, 3, 5),))]
    m.prepared = [mf.PreparedId(4, mf.object_key(4), 1.0, 2.0), mf.PreparedId(5, mf.object_key(5), 1.0, 2.0)]
    m.deleting = [mf.DeletingEntry(6, mf.object_key(6), 3.0)]
    m.streams = {7: mf.StreamSpan(0, 20), 8: mf.StreamSpan(0, 5)}
    return m


def test_live_objects_of_a_kind_and_entries_by_id_or_key():
    m = _state()
    assert [o.id for o in m.live()] == [1, 2, 3] and m.live() is not m.objects
    assert [o.id for o in m.live("SO")] == [1, 3] and [o.id for o in m.live("SSO")] == [2]
    assert m.live("XX") == []
    assert m.entry(2) is m.objects[1] and m.entry(5) is m.prepared[1] and m.entry(6) is m.deleting[0]
    assert m.entry(9) is None
    assert m.known_object(mf.object_key(3)) is m.objects[2]
    assert m.known_object(mf.object_key(6)) is m.deleting[0]
    assert m.known_object(mf.object_key(4)) is None  # prepared: no object yet
    assert m.names(mf.object_key(1)) is True and m.names(mf.object_key(6)) is True
    assert m.names(mf.object_key(4)) is False and m.names("x") is False
    assert m.live_ids() == {1, 2, 3} and m.prepared_ids() == {4, 5} and m.referenced_ids() == {1, 2, 3, 4, 5, 6}
    assert m.ranges_of(8) == [(0, 3, m.objects[1]), (3, 5, m.objects[2])] and m.ranges_of(9) == []


def test_holds_is_exactly_a_live_range_or_below_the_retained_start():
    m = _state()
    m.streams[7].start = 4
    assert m.holds(7, 0, 10) and m.holds(7, 10, 20) and m.holds(7, 12, 15)
    assert not m.holds(7, 9, 11)  # across two objects: neither holds it alone
    assert not m.holds(7, 19, 21) and not m.holds(7, 20, 21)
    assert m.holds(7, 0, 4) and m.holds(7, 3, 4)  # below the start: retention dropped them
    assert not m.holds(9, 0, 1)
    m.objects = []
    assert m.holds(7, 0, 4) and not m.holds(7, 0, 5) and not m.holds(7, 4, 5)
    assert m.holds(8, 0, 0) and not m.holds(8, 0, 1)


def test_prepare_reserves_ids_up_to_the_last_java_long():
    # small ids first: a range of ids from 0 (not from next_object_id) fails here, not as a runaway below
    assert [p.id for p in mf.Manifest(next_object_id=5).prepare(2, "d", now=0.0)] == [5, 6]
    m = mf.Manifest(next_object_id=mf.MAX_OBJECT_ID - 1)
    before = time.time()
    got = m.prepare(2, "ns")
    after = time.time()
    assert [p.id for p in got] == [mf.MAX_OBJECT_ID - 1, mf.MAX_OBJECT_ID] and m.next_object_id == mf.MAX_OBJECT_ID + 1
    assert [p.key for p in got] == [mf.object_key(mf.MAX_OBJECT_ID - 1, "ns"), mf.object_key(mf.MAX_OBJECT_ID, "ns")]
    assert all(before <= p.prepared_at <= after and p.expires_at == p.prepared_at + mf.PREPARE_TTL_S for p in got)
    assert m.prepared == got
    assert mf.PREPARE_TTL_S == 3600 and mf.MAX_OBJECT_ID == 2 ** 63 - 1
    m = mf.Manifest(next_object_id=mf.MAX_OBJECT_ID - 1)
    with pytest.raises(RefusedError) as info:
        m.prepare(3, "ns", now=5.0)
    assert str(info.value) == (f"no object ids left: next_object_id {mf.MAX_OBJECT_ID - 1} + 3 passes 2^63-1 "
                               "(AutoMQ's ids are 64-bit)")
    assert info.value.hint == "the store's ids are exhausted: start a new store"
    assert m.next_object_id == mf.MAX_OBJECT_ID - 1 and m.prepared == []
    assert mf.Manifest(next_object_id=mf.MAX_OBJECT_ID).prepare(1, "d", now=0.0)[0].id == mf.MAX_OBJECT_ID


def test_make_live_releases_the_ids_and_grows_or_creates_spans():
    m = _state()
    m.make_live([_obj(4, ranges=((7, 20, 30), (9, 5, 6))), _obj(5, ranges=((8, 0, 1),))])
    assert m.prepared == [] and m.live_ids() == {1, 2, 3, 4, 5}
    assert m.streams == {7: mf.StreamSpan(0, 30), 8: mf.StreamSpan(0, 5), 9: mf.StreamSpan(5, 6)}
    m.streams[7].start = 25
    m.make_live([_obj(10, ranges=((7, 12, 14),))])
    assert m.streams[7] == mf.StreamSpan(12, 30)


def test_advance_fence_gaps_replace_retain_forget():
    m = _state()
    mark = mf.UploadMark(1, 2, 3, 4)
    m.advance(-1, mark)
    m.advance("2", mf.UploadMark(5, 6, 7, 8))
    assert m.wal_uploads == {"-1": mark, "2": mf.UploadMark(5, 6, 7, 8)} and m.upload_mark(2).offset == 5
    assert m.upload_mark(3) is None
    assert (m.fence(), m.fence(), m.compactor_epoch) == (1, 2, 2)
    gap = mf.StreamGap(7, 20, 22, "accepted", None, False, None, 0, 4096, -1, 3.0)
    assert m.stream_gaps is None
    m.add_gaps([gap])
    m.add_gaps([gap])
    assert m.stream_gaps == [gap, gap]
    m.replace([1, 3], [_obj(11)], reserved=[4], now=9.0)
    assert [o.id for o in m.objects] == [2, 11] and [p.id for p in m.prepared] == [5]
    assert m.deleting == [mf.DeletingEntry(6, mf.object_key(6), 3.0), mf.DeletingEntry(1, mf.object_key(1), 9.0),
                          mf.DeletingEntry(3, mf.object_key(3), 9.0)]
    m.retain(8, 2)
    assert m.streams[8] == mf.StreamSpan(2, 5)
    m.forget([5, 99], [1])
    assert m.prepared == [] and [d.id for d in m.deleting] == [6, 3]
    m.forget([], [6, 3])
    assert m.deleting == []


def test_entries_compare_by_type_and_json_and_are_not_hashable():
    a = mf.DeletingEntry(1, "k", 2.0)
    assert a == mf.DeletingEntry(1, "k", 2.0) and a != mf.DeletingEntry(1, "k", 3.0)
    assert a != mf.PreparedId(1, "k", 2.0, 2.0)
    assert mf.ObjectRange(1, 2, 3, 4) != mf.UploadMark(1, 2, 3, 4)  # same values, another entry
    assert a.__eq__("x") is NotImplemented and a != {"id": 1, "key": "k", "marked_at": 2.0}
    assert mf.DeletingEntry(1, "k", 2.0, extra={"x": 1}) != a
    with pytest.raises(TypeError):
        hash(a)


def test_an_optional_key_is_written_only_when_set_and_null_stays_extra():
    o = mf.LiveObject.from_json({"id": 1, "key": "k", "kind": "SO", "size": 2, "ranges": [],
                                 "order_id": None, "data_time": 4.5})
    assert o.order_id is None and o.data_time == 4.5 and o.extra == {"order_id": None}
    assert o.to_json() == {"id": 1, "key": "k", "kind": "SO", "size": 2, "ranges": [], "order_id": None,
                           "data_time": 4.5}
    o.data_time = None
    assert "data_time" not in o.to_json()
    assert list(mf.LiveObject(1, "k", "SO", 2, [], order_id=0, data_time=0.0).to_json()) == [
        "id", "key", "kind", "size", "ranges", "order_id", "data_time"]
    g = mf.StreamGap.from_json({"stream_id": 1, "from": 2, "to": 3, "cause": "corruption", "hole_start": None,
                                "sealed": True, "sealed_at_ns": None, "before_wal_offset": None,
                                "after_wal_offset": None, "node_id": 0, "time": 1.0, "damage_offset": 0})
    assert (g.from_offset, g.to_offset, g.damage_offset, g.extra) == (2, 3, 0, {})
    assert g.to_json()["damage_offset"] == 0 and g.to_json()["from"] == 2 and g.to_json()["to"] == 3
    g.damage_offset = None
    assert "damage_offset" not in g.to_json()
    with pytest.raises(TypeError):
        mf.ObjectRange.from_json({"stream_id": 1, "start": 2, "end": 3})  # a required key missing


def test_a_deep_copy_shares_nothing_mutable():
    o = mf.LiveObject(1, "k", "SO", 2, [mf.ObjectRange(1, 0, 1, 5, extra={"a": [1]})], order_id=1, data_time=1.0,
                      extra={"b": {"c": 1}})
    c = copy.deepcopy(o)
    assert c == o and type(c) is mf.LiveObject and c is not o
    c.ranges[0].end = 9
    c.ranges[0].extra["a"].append(2)
    c.extra["b"]["c"] = 2
    c.ranges.append(mf.ObjectRange(2, 0, 1, 1))
    assert o.ranges == [mf.ObjectRange(1, 0, 1, 5, extra={"a": [1]})] and o.extra == {"b": {"c": 1}}
    p = mf.PreparedId(1, "k", 1.0, 2.0)
    q = copy.deepcopy(p)
    assert q == p and q.extra == {} and q.extra is not p.extra
    q.extra["x"] = 1
    assert p.extra == {}


def test_a_manifest_of_another_version_names_it_and_the_version_to_use():
    doc = mf.Manifest(number=3).to_json()
    doc["version"] = 2
    with pytest.raises(CorruptionError) as info:
        mf.parse_manifest(json.dumps(doc).encode(), "manifest/x.json")
    err = info.value
    assert (str(err), err.where, err.hint) == ("manifest version 2 is not 1", "manifest/x.json",
                                               "written by another walctl version: use that version")
    assert mf.MANIFEST_VERSION == 1
    doc["version"] = 1
    assert mf.parse_manifest(json.dumps(doc).encode(), "k") == mf.Manifest(number=3)


def test_a_field_finding_names_the_field_and_the_key():
    doc = mf.Manifest(number=3).to_json()
    doc["next_object_id"] = -1
    with pytest.raises(CorruptionError) as info:
        mf.parse_manifest(json.dumps(doc).encode(), "manifest/y.json")
    assert str(info.value) == f"manifest field next_object_id: expected an integer in [0, {2 ** 63 - 1}], got -1"
    assert info.value.where == "manifest/y.json" and info.value.hint == mf._BAD_MANIFEST_HINT
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_manifest_that_nests_too_deeply_is_corruption_not_a_crash(monkeypatch):
    def deep(doc):
        raise RecursionError
    monkeypatch.setattr(mf.schema, "check_document", deep)
    with pytest.raises(CorruptionError) as info:
        mf.parse_manifest(b"{}", "manifest/z.json")
    assert (str(info.value), info.value.where, info.value.hint) == ("manifest nests too deeply", "manifest/z.json",
                                                                    mf._BAD_MANIFEST_HINT)
    monkeypatch.undo()
    with pytest.raises(CorruptionError) as info:
        mf.parse_manifest(b"[" * 100000, "manifest/w.json")
    assert str(info.value).startswith("manifest is not valid JSON: ") and info.value.where == "manifest/w.json"
    assert info.value.hint == mf._BAD_MANIFEST_HINT


def test_load_reads_the_numbered_key(local_store):
    mf.commit(local_store, lambda m: None, command="one")
    mf.commit(local_store, lambda m: setattr(m, "next_object_id", 9), command="two")
    assert mf.load(local_store, 1).next_object_id == 1 and mf.load(local_store, 2).next_object_id == 9
    local_store.put(mf.manifest_key(3), b"{}")
    with pytest.raises(CorruptionError) as info:
        mf.load(local_store, 3)
    assert info.value.where == mf.manifest_key(3)
    with pytest.raises(CorruptionError) as info:
        mf.load_latest(local_store, required=True)
    assert info.value.where == mf.manifest_key(3)


def test_commit_takes_the_change_s_returned_manifest(local_store):
    replacement = mf.Manifest(next_object_id=42)
    committed = mf.commit(local_store, lambda m: replacement, command="c")
    assert committed.manifest is replacement and committed.attempts == 1
    assert mf.load_latest(local_store).next_object_id == 42 and mf.load_latest(local_store).parent is None


def test_an_entry_class_takes_its_key_sets_from_its_keys():
    class Later(mf._Entry):
        _KEYS, _OPTIONAL = ("a", "b"), ("c",)

    assert (Later._KEY_SET, Later._OPTIONAL_SET) == (frozenset({"a", "b"}), frozenset({"c"}))
    assert mf.StreamGap._KEY_SET == frozenset(mf.schema.GAP_KEYS) and mf.StreamGap._OPTIONAL_SET == {"damage_offset"}


def test_a_parsed_manifest_keeps_its_gaps_typed_not_as_an_extra_key():
    from pathlib import Path
    raw = (Path(__file__).parent / "data" / "manifest-v1.json").read_bytes()
    m = mf.parse_manifest(raw, "k")
    assert m.extra == {} and len(m.stream_gaps) == 1
    gap = mf.StreamGap(2, 3, 4, "accepted", None, False, None, 0, 1, -1, 5.0)
    m.add_gaps([gap])
    assert [g["stream_id"] for g in m.to_json()["stream_gaps"]] == [1, 2]  # the new gap is written


class _AlwaysLoses:
    """A store where another writer always commits first."""

    url = "mem://busy"

    def __init__(self):
        self.puts = 0

    def list(self, prefix):
        return []

    def put(self, key, data, *, if_absent=False):
        from walctl.store.base import PreconditionFailed
        self.puts += 1
        raise PreconditionFailed(key)


def test_a_lost_commit_backs_off_50ms_more_each_attempt_up_to_half_a_second(monkeypatch):
    import types
    slept = []
    monkeypatch.setattr(mf, "time", types.SimpleNamespace(time=time.time, sleep=slept.append))  # manifest's own
    store = _AlwaysLoses()
    with pytest.raises(RefusedError) as info:
        mf.commit(store, lambda m: None, command="c")
    assert store.puts == mf.MAX_COMMIT_ATTEMPTS == 20
    assert slept == pytest.approx([min(0.05 * a, 0.5) for a in range(1, 21)])
    assert slept[0] == pytest.approx(0.05) and slept[9] == pytest.approx(0.5) and max(slept) == pytest.approx(0.5)
    assert str(info.value) == "could not commit after 20 attempts: the store is too busy"
    assert info.value.where == "mem://busy"


def test_an_empty_store_without_a_url_is_named_by_itself():
    class Bare:
        def list(self, prefix):
            return []

        def __str__(self):
            return "bare-store"

    with pytest.raises(mf.NotFoundError) as info:
        mf.load_latest(Bare(), required=True)
    assert info.value.where == "bare-store/manifest/"
