"""walctl check's engine (walctl/pipeline/check.py) on a local store of small objects: each problem
kind with its exact words, object and order, what is read with and without --read-data and with a
subset, the progress figures, and the manifest-only checks (coverage, overlaps, leftovers) on
manifests built in memory (issue 32: the module's mutants killed here, in-process and fast)."""

from __future__ import annotations

import time

import pytest

from walctl.errors import CorruptionError, NotFoundError
from walctl.format import object as obj
from walctl.pipeline import check as ck
from walctl.store import manifest as mf

from storehelpers import put_objects

NOW = 1_800_000_000.0
# Three objects: an SSO (streams 1 and 2), an SO of stream 1, an SO of stream 3; small blocks.
SPECS = [[(1, 3, 100), (2, 2, 100)], [(1, 2, 100)], [(3, 4, 50)]]


def build(store):
    put_objects(store, SPECS, block_size=100)
    return mf.load_latest(store).objects


def found(result):
    return [(p.kind, p.object_id, p.key, p.detail) for p in result.problems]


# -- small pieces -----------------------------------------------------------------------------


def test_problem_damage_and_json():
    for kind in ck.KINDS:
        p = ck.Problem(kind, "what", 7, "k")
        assert p.damage is (kind not in ("orphan", "stale_prepared"))
        assert p.to_json() == {"kind": kind, "object_id": 7, "key": "k", "detail": "what", "damage": p.damage}
    assert ck.Problem("orphan", "x").to_json() == {"kind": "orphan", "object_id": None, "key": None,
                                                   "detail": "x", "damage": False}


def test_check_result_json_with_and_without_damage():
    r = ck.CheckResult("url", 4, 2, 100, True, (2, 3))
    assert r.to_json() == {"store": "url", "manifest_number": 4, "live_objects": 2, "size_bytes": 100,
                           "read_data": True, "subset": "2/3", "data_objects_read": 0, "data_bytes_read": 0,
                           "problems": [], "damage_count": 0, "verdict": "ok", "requests": {}}
    r.problems = [ck.Problem("orphan", "o"), ck.Problem("data", "d", 1, "k"), ck.Problem("stale_prepared", "s")]
    r.data_objects, r.data_bytes, r.requests = 1, 9, {"get": 1}
    assert r.damage == [r.problems[1]]
    j = ck.CheckResult("url", 4, 2, 100, False, None).to_json()
    assert j["subset"] is None and j["read_data"] is False
    j = r.to_json()
    assert (j["damage_count"], j["verdict"], j["data_objects_read"], j["data_bytes_read"], j["requests"]) == (
        1, "damaged", 1, 9, {"get": 1})
    assert [p["kind"] for p in j["problems"]] == ["orphan", "data", "stale_prepared"]


@pytest.mark.parametrize("oid, subset, inside", [
    (5, None, True), (3, (1, 3), True), (4, (1, 3), False), (4, (2, 3), True), (5, (3, 3), True),
    (5, (2, 3), False), (0, (1, 1), True)])
def test_in_subset(oid, subset, inside):
    assert ck.in_subset(oid, subset) is inside


@pytest.mark.parametrize("seconds, words", [
    (0, "0s"), (119.4, "119s"), (120, "2m"), (150, "2m"), (7199, "120m"), (7200, "2h"), (36000, "10h")])
def test_ago(seconds, words):
    assert ck._ago(seconds) == words


def test_union_joins_touching_and_overlapping_intervals():
    assert ck._union([]) == []
    assert ck._union([(5, 7), (0, 2), (2, 3), (6, 9), (10, 11), (1, 2)]) == [(0, 3), (5, 9), (10, 11)]
    assert ck._union([(0, 10), (2, 3)]) == [(0, 10)]


def test_missing_lists_the_holes():
    assert ck._missing([], 3, 9) == [(3, 9)]
    assert ck._missing([(0, 9)], 3, 9) == []
    assert ck._missing([(0, 2), (4, 5), (7, 20)], 3, 9) == [(3, 4), (5, 7)]
    assert ck._missing([(3, 5)], 3, 9) == [(5, 9)]
    assert ck._missing([(0, 3), (3, 4), (9, 12)], 3, 9) == [(4, 9)]
    assert ck._missing([(0, 1), (5, 6)], 3, 5) == [(3, 5)]
    assert ck._missing([(1, 2), (6, 8)], 3, 9) == [(3, 6), (8, 9)]
    assert ck._missing([(2, 4), (4, 9)], 3, 9) == []


def test_size_problem():
    o = mf.LiveObject(4, "k4", "SO", 1000, [])
    assert ck._size_problem(o, 1000) is None
    assert ck._size_problem(o, None) == ck.Problem("missing", "live in the manifest, not in the store", 4, "k4")
    assert ck._size_problem(o, 999) == ck.Problem("truncated", "truncated: 999 of 1,000 bytes", 4, "k4")
    assert ck._size_problem(o, 1001) == ck.Problem("size", "1,001 bytes, 1 more than the manifest's 1,000", 4, "k4")
    assert ck._size_problem(o, 0).kind == "truncated"


# -- check_store on a local store ---------------------------------------------------------------


def test_a_clean_store_reads_tails_only(local_store):
    objects = build(local_store)
    before = local_store.stats.snapshot()
    r = ck.check_store(local_store, now=NOW)
    assert r.problems == [] and r.damage == []
    assert (r.store, r.manifest_number, r.objects, r.size_bytes, r.read_data, r.subset) == (
        local_store.url, 1, 3, sum(o.size for o in objects), False, None)
    assert (r.data_objects, r.data_bytes) == (0, 0)
    after = local_store.stats.snapshot()
    assert r.requests == after
    # the manifest (LIST + GET), the objects' LIST, one tail GET per object
    assert after["list"] - before["list"] == 2 and after["get"] - before["get"] == 1 + 3


def test_read_data_reads_every_block_and_reports_progress(local_store):
    objects = build(local_store)
    data_sizes = []
    for o in objects:
        raw = local_store.read_all(o.key)
        data_sizes.append(obj.parse_tail(raw, len(raw))[0].index_start_position)
    total = sum(sum(r.bytes for r in o.ranges) for o in objects)
    assert total == sum(data_sizes)
    seen = []
    r = ck.check_store(local_store, read_data=True, now=NOW, progress=lambda done, tot: seen.append((done, tot)))
    assert r.problems == [] and r.read_data and r.subset is None
    assert (r.data_objects, r.data_bytes) == (3, total)
    assert seen and all(t == total for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (total, total)
    # after the first object, progress counts on from its bytes
    assert any(d > data_sizes[0] for d, _ in seen)
    assert ck.check_store(local_store, read_data=True, now=NOW).data_objects == 3  # without progress


def test_a_subset_reads_the_data_of_its_share_only(local_store):
    objects = build(local_store)
    r = ck.check_store(local_store, subset=(1, 2), now=NOW)
    assert r.read_data is True and r.subset == (1, 2) and r.problems == []
    assert r.data_objects == 1  # object 2 only (id % 2 == 0)
    assert r.data_bytes == sum(x.bytes for x in objects[1].ranges)
    r = ck.check_store(local_store, subset=(2, 2), now=NOW)
    assert r.data_objects == 2 and r.data_bytes == sum(x.bytes for o in (objects[0], objects[2]) for x in o.ranges)


def test_sizes_missing_and_leftovers_in_report_order(local_store):
    o1, o2, o3 = build(local_store)
    local_store.put(o1.key, local_store.read_all(o1.key)[:-10])
    local_store.put(o2.key, local_store.read_all(o2.key) + b"xx")
    local_store.delete(o3.key)
    local_store.put("junk/x", b"abc")
    local_store.put(mf.object_key(99), b"abcd")
    local_store.put(mf.object_key(0), b"abcde" * 300)
    r = ck.check_store(local_store, now=NOW)
    assert found(r) == [
        ("missing", 3, o3.key, "live in the manifest, not in the store"),
        ("truncated", 1, o1.key, f"truncated: {o1.size - 10:,} of {o1.size:,} bytes"),
        ("size", 2, o2.key, f"{o2.size + 2:,} bytes, 2 more than the manifest's {o2.size:,}"),
        ("orphan", None, "junk/x", "3 bytes, not a walctl object key; gc leaves it"),
        ("orphan", 0, mf.object_key(0), "1,500 bytes, in no manifest entry; walctl gc deletes it"),
        ("orphan", 99, mf.object_key(99), "4 bytes, id 99 not yet allocated (next id 4); gc leaves it"),
    ]
    assert [p.damage for p in r.problems] == [True, True, True, False, False, False]
    assert len(r.damage) == 3
    # damaged objects are not read (and not read with --read-data)
    r = ck.check_store(local_store, read_data=True, now=NOW)
    assert r.data_objects == 0 and r.data_bytes == 0


def test_an_orphan_at_the_next_id_is_not_yet_allocated(local_store):
    build(local_store)
    local_store.put(mf.object_key(4), b"x")
    local_store.put(mf.object_key(3, "other"), b"y")
    r = ck.check_store(local_store, now=NOW)
    assert found(r) == [
        ("orphan", 4, mf.object_key(4), "1 bytes, id 4 not yet allocated (next id 4); gc leaves it")]


def test_prepared_ids_expire_and_their_objects_are_not_orphans(local_store):
    build(local_store)
    mf.commit(local_store, lambda m: m.prepare(3, mf.DEFAULT_NAMESPACE, now=NOW) and None, command="t")
    doc = mf.load_latest(local_store)
    p4, p5, p6 = doc.prepared
    local_store.put(p4.key, b"written by a killed upload")
    ttl = p4.expires_at - NOW
    assert ck.check_store(local_store, now=p4.expires_at - 1).problems == []
    r = ck.check_store(local_store, now=p4.expires_at)
    assert found(r) == [("stale_prepared", i, mf.object_key(i), f"prepared id {i} expired 0s ago; walctl gc forgets it")
                        for i in (4, 5, 6)]
    assert r.damage == []
    r = ck.check_store(local_store, now=NOW + ttl + 3 * 3600)
    assert [p.detail for p in r.problems] == [f"prepared id {i} expired 3h ago; walctl gc forgets it" for i in (4, 5, 6)]


def _rewrite(store, key, change):
    data = bytearray(store.read_all(key))
    change(data)
    store.put(key, bytes(data))


def test_a_damaged_footer_is_a_footer_problem(local_store):
    o1, o2, _ = build(local_store)
    _rewrite(local_store, o2.key, lambda d: d.__setitem__(slice(len(d) - 8, len(d)), b"\0" * 8))
    for read_data in (False, True):
        r = ck.check_store(local_store, read_data=read_data, now=NOW)
        assert [(p.kind, p.object_id, p.key) for p in r.problems] == [("footer", 2, o2.key)]
        assert "magic" in r.problems[0].detail
        assert r.data_objects == (2 if read_data else 0)


def test_an_object_gone_between_the_list_and_its_read_is_missing(local_store, monkeypatch):
    import walctl.compaction.common as common

    o1, o2, o3 = build(local_store)
    real = common.read_index

    def read_index(store, o):
        if o.id == 2:
            raise NotFoundError("gone")
        if o.id == 3:
            raise CorruptionError("bad index")
        return real(store, o)

    monkeypatch.setattr(common, "read_index", read_index)
    for read_data in (False, True):
        r = ck.check_store(local_store, read_data=read_data, now=NOW)
        assert found(r) == [("missing", 2, o2.key, "live in the manifest, not in the store"),
                            ("footer", 3, o3.key, "bad index")]
        assert r.data_objects == (1 if read_data else 0)


def _edit_object(store, oid, change):
    def edit(m):
        change(next(o for o in m.objects if o.id == oid))
    mf.commit(store, edit, command="test edit")


def test_an_index_that_disagrees_with_the_manifest_is_an_index_problem(local_store):
    o1, o2, o3 = build(local_store)

    def shrink(o):
        o.ranges[0].end -= 1
    _edit_object(local_store, 3, shrink)
    for read_data in (False, True):
        r = ck.check_store(local_store, read_data=read_data, now=NOW)
        assert [(p.kind, p.object_id, p.key) for p in r.problems] == [("index", 3, o3.key),
                                                                       ("coverage", None, None)]
        assert r.problems[0].detail.startswith("object 3:")
        assert r.problems[1].detail == "stream 3: offsets [3, 4) are in no live object (the stream holds [0, 4))"


def test_recorded_crcs_that_disagree_with_the_footer(local_store):
    o1, o2, o3 = build(local_store)
    raw = local_store.read_all(o3.key)
    footer, _ = obj.parse_tail(raw, len(raw))

    def set_crc(value):
        def change(o):
            o.ranges[0].crc = value
        _edit_object(local_store, 3, change)

    set_crc(footer.data_crc)
    assert ck.check_store(local_store, now=NOW).problems == []
    set_crc(footer.data_crc ^ 1)
    for read_data in (False, True):
        r = ck.check_store(local_store, read_data=read_data, now=NOW)
        assert found(r) == [("footer", 3, o3.key, (
            f"the crcs the manifest recorded for its ranges combine to {footer.data_crc ^ 1:#010x}, its footer's "
            f"data crc is {footer.data_crc:#010x}: a range's recorded crc or the footer is wrong"))]


def _entries(store, key):
    raw = store.read_all(key)
    return obj.parse_tail(raw, len(raw))[1]


def test_a_flipped_payload_bit_is_found_with_read_data_only(local_store):
    o1, o2, o3 = build(local_store)
    e = _entries(local_store, o3.key)[1]
    at = e.block_position + obj.DATA_BLOCK_HEADER_SIZE + 33 + 5
    _rewrite(local_store, o3.key, lambda d: d.__setitem__(at, d[at] ^ 1))
    assert ck.check_store(local_store, now=NOW).problems == []
    r = ck.check_store(local_store, read_data=True, now=NOW)
    assert [(p.kind, p.object_id, p.key) for p in r.problems] == [("data", 3, o3.key)]
    d = r.problems[0].detail
    assert d.startswith("byte 0: ") and d.endswith(
        "; every block checks out, so the changed bytes lie inside a record payload")
    assert " in block " not in d


def test_a_damaged_block_header_names_the_block(local_store):
    o1, o2, o3 = build(local_store)
    e = _entries(local_store, o3.key)[1]
    _rewrite(local_store, o3.key, lambda d: d.__setitem__(e.block_position, d[e.block_position] ^ 0xFF))
    r = ck.check_store(local_store, read_data=True, now=NOW)
    assert [(p.kind, p.object_id) for p in r.problems] == [("data", 3)]
    d = r.problems[0].detail
    assert d.startswith(f"byte {e.block_position} in block [{e.block_position}, {e.block_end}) of stream 3 "
                        f"offsets [{e.start_offset}, {e.end_offset}): ")
    assert d.endswith("(and 1 more)")  # and the data crc
    assert "every block checks out" not in d


# -- coverage, on manifests built in memory ------------------------------------------------------


def _doc(objects, streams, gaps=None):
    m = mf.empty_manifest()
    m.objects = objects
    m.streams = {s: mf.StreamSpan(a, b) for s, (a, b) in streams.items()}
    m.stream_gaps = gaps
    return m


def _o(oid, *ranges):
    return mf.LiveObject(oid, f"k{oid}", "SSO", 100, [mf.ObjectRange(s, a, b, b - a) for s, a, b in ranges])


def _gap(sid, lo, hi):
    return mf.StreamGap(sid, lo, hi, "accepted", None, False, None, None, None, 1, 0.0)


def cov(doc):
    return [(p.kind, p.object_id, p.key, p.detail) for p in ck._coverage(doc)]


def test_coverage_of_a_tiled_stream_is_clean():
    assert cov(_doc([_o(1, (1, 0, 5), (2, 0, 3)), _o(2, (1, 5, 9))], {1: (0, 9), 2: (0, 3)})) == []
    # offsets below the start are what compaction drops
    assert cov(_doc([_o(1, (1, 0, 5)), _o(2, (1, 5, 9))], {1: (4, 9)})) == []


def test_coverage_holes_and_offsets_past_the_end():
    doc = _doc([_o(1, (1, 2, 5)), _o(2, (1, 7, 12)), _o(3, (2, 0, 4))], {1: (0, 10), 2: (0, 4), 3: (5, 6)})
    assert cov(doc) == [
        ("coverage", None, None, "stream 1: offsets [0, 2) are in no live object (the stream holds [0, 10))"),
        ("coverage", None, None, "stream 1: offsets [5, 7) are in no live object (the stream holds [0, 10))"),
        ("coverage", 2, "k2", "stream 1: object 2 holds offsets up to 12, past the stream's end 10"),
        ("coverage", None, None, "stream 3: offsets [5, 6) are in no live object (the stream holds [5, 6))"),
    ]


def test_recorded_gaps_cover_their_offsets_only_for_their_stream():
    objects = [_o(1, (1, 0, 3)), _o(2, (1, 6, 9)), _o(3, (2, 0, 3)), _o(4, (2, 6, 9))]
    doc = _doc(objects, {1: (0, 9), 2: (0, 9)}, [_gap(1, 3, 6), _gap(2, 3, 5)])
    assert cov(doc) == [
        ("coverage", None, None, "stream 2: offsets [5, 6) are in no live object (the stream holds [0, 9))")]


def test_overlaps_between_objects_and_inside_one():
    doc = _doc([_o(1, (1, 0, 5)), _o(2, (1, 3, 9)), _o(3, (2, 0, 4), (2, 2, 6)), _o(4, (3, 0, 2))],
               {1: (0, 9), 2: (0, 6)})
    assert cov(doc) == [
        ("overlap", 3, "k3", "the manifest gives object 3 overlapping ranges of stream 2"),
        ("overlap", 2, "k2", "stream 1: objects 1 and 2 both hold offsets [3, 5)"),
        ("coverage", None, None, "stream 2: offsets [0, 6) are in no live object (the stream holds [0, 6))"),
    ]  # stream 3 is deleted: its range is garbage, not a problem


def test_overlaps_are_checked_pairwise_in_offset_order():
    doc = _doc([_o(1, (1, 0, 9)), _o(2, (1, 2, 4)), _o(3, (1, 4, 6)), _o(4, (1, 5, 7))], {1: (0, 9)})
    assert cov(doc) == [
        ("overlap", 2, "k2", "stream 1: objects 1 and 2 both hold offsets [2, 4)"),
        ("overlap", 4, "k4", "stream 1: objects 3 and 4 both hold offsets [5, 6)"),
    ]


def test_check_store_sorts_coverage_after_the_object_problems(local_store):
    o1, o2, o3 = build(local_store)

    def widen(m):
        m.streams[3].end = 6
        m.streams[1].start = 0
    mf.commit(local_store, widen, command="t")
    local_store.delete(o2.key)
    r = ck.check_store(local_store, now=NOW)
    assert found(r) == [
        ("missing", 2, o2.key, "live in the manifest, not in the store"),
        ("coverage", None, None, "stream 3: offsets [4, 6) are in no live object (the stream holds [0, 6))"),
    ]


def test_no_manifest_is_not_found(local_store):
    with pytest.raises(NotFoundError):
        ck.check_store(local_store)


def test_now_defaults_to_the_clock(local_store, monkeypatch):
    build(local_store)
    mf.commit(local_store, lambda m: m.prepare(1, mf.DEFAULT_NAMESPACE, now=time.time() - 10 * mf.PREPARE_TTL_S)
              and None, command="t")
    r = ck.check_store(local_store)
    assert [(p.kind, p.object_id) for p in r.problems] == [("stale_prepared", 4)]
    assert r.problems[0].detail.endswith("h ago; walctl gc forgets it")


# -- the first run's survivors ------------------------------------------------------------------------


def test_a_subset_still_checks_the_tails_of_the_other_objects(local_store):
    o1, o2, o3 = build(local_store)
    _rewrite(local_store, o3.key, lambda d: d.__setitem__(slice(len(d) - 8, len(d)), b"\0" * 8))
    r = ck.check_store(local_store, subset=(1, 2), now=NOW)  # reads object 2's data; 1 and 3: tails
    assert [(p.kind, p.object_id) for p in r.problems] == [("footer", 3)] and r.data_objects == 1


def test_one_problem_in_an_object_without_a_data_crc_is_named_alone(local_store):
    put_objects(local_store, [[(3, 4, 50)]], block_size=100, version=obj.VERSION_AUTOMQ)
    o = mf.load_latest(local_store).objects[0]
    e = _entries(local_store, o.key)[1]
    _rewrite(local_store, o.key, lambda d: d.__setitem__(e.block_position, d[e.block_position] ^ 0xFF))
    r = ck.check_store(local_store, read_data=True, now=NOW)
    assert [(p.kind, p.object_id) for p in r.problems] == [("data", o.id)]
    d = r.problems[0].detail
    assert d.startswith(f"byte {e.block_position} in block [{e.block_position}, {e.block_end}) of stream 3 ")
    assert "more" not in d and "every block checks out" not in d and not d.endswith("XX")


def test_an_object_the_manifest_gives_overlapping_ranges_does_not_hide_the_next(local_store):
    doc = _doc([_o(1, (2, 0, 4), (2, 2, 6)), _o(2, (1, 0, 3)), _o(3, (1, 5, 9))], {1: (0, 9), 2: (0, 6)})
    assert cov(doc) == [
        ("overlap", 1, "k1", "the manifest gives object 1 overlapping ranges of stream 2"),
        ("coverage", None, None, "stream 1: offsets [3, 5) are in no live object (the stream holds [0, 9))"),
        ("coverage", None, None, "stream 2: offsets [0, 6) are in no live object (the stream holds [0, 6))"),
    ]


def test_a_deleted_stream_does_not_hide_the_streams_after_it():
    doc = _doc([_o(1, (0, 0, 4), (1, 0, 3)), _o(2, (1, 5, 9))], {1: (0, 9)})
    assert cov(doc) == [
        ("coverage", None, None, "stream 1: offsets [3, 5) are in no live object (the stream holds [0, 9))")]


def test_hours_are_rounded_from_3600_seconds():
    assert ck._ago(3600 * 20.5 + 1) == "21h"
    assert ck._ago(60 * 20.5 + 1) == "21m"
