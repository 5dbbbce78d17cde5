"""walctl read's passes and object reading (walctl/pipeline/read.py, readobject.py) on a small local
store: each record's object and byte positions, the summary's counts and GETs, the runs cut at
run_bytes and at a limit, read ahead on and off, rows, and every finding with its words, offsets
and position (trimmed, gaps, overlaps, missing and damaged objects, a data crc, composite
objects), then --follow's polling and backoff with a fake clock (issue 32: the two modules'
mutants killed here, in-process and fast)."""

from __future__ import annotations

import pytest

from walctl.errors import NotFoundError
from walctl.format import object as obj
from walctl.pipeline import readobject as ro
from walctl.pipeline.read import (DAMAGE, GAP, MISSING, OVERLAP, RECORDED_GAP, TRIMMED, WAL_MOVED, ReadFinding,
                                  ReadRecord, ReadRows, StreamReader, open_for_read, read_stream)
from walctl.store import manifest as mf

from storehelpers import put_objects
from tests.store.test_automq_objects import automq_store, gen_key

# Stream 1: object 1 (an SSO with stream 2) holds [0, 4) in two blocks at 0 and 2076, object 2
# [4, 7) (blocks at 0 and 2076), object 3 [7, 9) (one block); batches of 1000 bytes, one record each.
SPECS = [[(1, 4, 1000), (2, 3, 1000)], [(1, 3, 1000)], [(1, 2, 1000)]]
# (offset, object, block position, batch position) of each batch of stream 1
LAYOUT = [(0, 1, 0, 10), (1, 1, 0, 1043), (2, 1, 2076, 2086), (3, 1, 2076, 3119), (4, 2, 0, 10), (5, 2, 0, 1043),
          (6, 2, 2076, 2086), (7, 3, 0, 10), (8, 3, 0, 1043)]


@pytest.fixture
def st(local_store):
    put_objects(local_store, SPECS, block_size=2000)
    return local_store


def objects(store):
    return {o.id: o for o in mf.load_latest(store).objects}


def recs(events):
    return [(e.batch.base_offset, e.object_id, e.block_position, e.batch_position) for e in events
            if isinstance(e, ReadRecord)]


def finds(events):
    return [(f.kind, f.message, f.start_offset, f.end_offset, f.object_id, f.key, f.position) for f in events
            if isinstance(f, ReadFinding)]


def counts(s):
    return (s.records, s.payload_bytes, s.objects, s.gets, s.block_gets, s.lists, s.next_offset, s.findings,
            s.corrupt_findings, s.limited)


def rewrite(store, key, change):
    data = bytearray(store.read_all(key))
    change(data)
    store.put(key, bytes(data))


def edit(store, change):
    mf.commit(store, change, command="test edit")


# -- a clean read -------------------------------------------------------------------------------------


@pytest.mark.parametrize("read_ahead", [True, False])
def test_the_whole_stream_object_by_object(st, read_ahead):
    events, s = read_stream(st, 1, entries_guess=1, read_ahead=read_ahead)
    assert recs(events) == LAYOUT
    assert all(e.batch.payload.startswith(f"s1o{i}:".encode()) for i, e in enumerate(events))
    assert all(e.source == "store" and e.key == mf.object_key(e.object_id) for e in events)
    # GETs: the manifest; object 1: tail, index (4 entries, the guess is 1), one run; 2 and 3: whole
    assert counts(s) == (9, 9000, 3, 6, 1, 1, 9, 0, 0, False)
    assert (s.manifest_number, s.polls, s.retries, s.wal_records, s.log_moved) == (1, 1, 0, 0, False)


def test_the_default_guess_catches_every_index_in_the_tail(st):
    events, s = read_stream(st, 1)
    assert recs(events) == LAYOUT
    assert counts(s) == (9, 9000, 3, 4, 0, 1, 9, 0, 0, False)
    events, s = read_stream(st, 2, entries_guess=2)
    assert [e.batch.base_offset for e in events] == [0, 1, 2]
    assert s.gets == 1 + 3 and s.block_gets == 1  # the index is not in the tail: a second GET


@pytest.mark.parametrize("read_ahead", [True, False])
def test_runs_are_cut_at_run_bytes(st, read_ahead):
    events, s = read_stream(st, 1, entries_guess=1, run_bytes=2500, read_ahead=read_ahead)
    assert recs(events) == LAYOUT
    # objects 1 and 2 are larger than a run: tail (+ index) and a GET per block; object 3 whole
    assert counts(s) == (9, 9000, 3, 10, 4, 1, 9, 0, 0, False)
    events, s = read_stream(st, 1, entries_guess=1, run_bytes=4152, read_ahead=read_ahead)
    assert recs(events) == LAYOUT and s.block_gets == 1  # object 1: one run of exactly run_bytes
    events, s = read_stream(st, 1, entries_guess=1, run_bytes=4151, read_ahead=read_ahead)
    assert recs(events) == LAYOUT and s.block_gets == 2


def test_a_limit_reads_no_more_than_it_serves(st):
    events, s = read_stream(st, 1, entries_guess=1, limit=3)
    assert recs(events) == LAYOUT[:3]
    assert counts(s) == (3, 3000, 1, 4, 1, 1, 3, 0, 0, True)
    events, s = read_stream(st, 1, entries_guess=1, limit=2)
    assert recs(events) == LAYOUT[:2] and s.limited and s.block_gets == 1
    events, s = read_stream(st, 1, limit=4)
    assert recs(events) == LAYOUT[:4] and s.objects == 1 and s.limited
    events, s = read_stream(st, 1, limit=5, rows=True)
    assert [r[1] for e in events for r in e.rows] == [0, 1, 2, 3, 4] and s.limited and s.records == 5
    events, s = read_stream(st, 1, limit=9)
    assert len(events) == 9 and s.limited
    events, s = read_stream(st, 1, limit=10)
    assert len(events) == 9 and not s.limited


def test_from_and_to_offsets(st):
    events, s = read_stream(st, 1, from_offset=2, to_offset=6, entries_guess=1)
    assert recs(events) == LAYOUT[2:6]
    assert counts(s) == (4, 4000, 2, 7, 2, 1, 6, 0, 0, False)  # object 2 is not read whole: to_offset
    events, s = read_stream(st, 1, from_offset=5, to_offset=7)
    assert recs(events) == LAYOUT[5:7] and s.objects == 1
    events, s = read_stream(st, 1, from_offset=4, to_offset=5)
    assert recs(events) == LAYOUT[4:5] and s.objects == 1
    events, s = read_stream(st, 1, from_offset=3, to_offset=4, entries_guess=1)
    assert recs(events) == LAYOUT[3:4] and s.objects == 1 and s.gets == 1 + 3
    events, s = read_stream(st, 1, from_offset=9)
    assert events == [] and s.objects == 0 and s.next_offset is None
    events, s = read_stream(st, 1, to_offset=0)
    assert events == [] and s.objects == 0


@pytest.mark.parametrize("read_ahead", [True, False])
def test_rows_serve_the_same_batches(st, read_ahead):
    events, s = read_stream(st, 1, rows=True, entries_guess=1, read_ahead=read_ahead)
    assert all(isinstance(e, ReadRows) for e in events)
    rows = [(r[1], e.object_id, r[6], r[7]) for e in events for r in e.rows]
    assert rows == LAYOUT
    assert [len(e.rows) for e in events] == [2, 2, 2, 1, 2]
    assert all(e.key == mf.object_key(e.object_id) for e in events)
    assert counts(s) == (9, 9000, 3, 6, 1, 1, 9, 0, 0, False)
    events, s = read_stream(st, 1, rows=True, from_offset=3, to_offset=5)
    assert [r[1] for e in events for r in e.rows] == [3, 4] and s.next_offset == 5 and s.records == 2


def test_a_batch_holding_the_first_offset_is_served_whole(local_store):
    put_objects(local_store, [[(1, 3, 100)]], count=4)  # batches [0, 4), [4, 8), [8, 12)
    for rows in (False, True):
        events, s = read_stream(local_store, 1, from_offset=5, to_offset=9, rows=rows)
        got = ([(r[1], r[2]) for e in events for r in e.rows] if rows
               else [(e.batch.base_offset, e.batch.end_offset) for e in events])
        assert got == [(4, 8), (8, 12)] and s.next_offset == 12
        events, s = read_stream(local_store, 1, from_offset=4, to_offset=8, rows=rows)
        assert s.records == 1 and s.next_offset == 8


def test_payload_views_and_copies_hold_the_same_bytes(st):
    a, _ = read_stream(st, 1, payload_views=True)
    b, _ = read_stream(st, 1)
    assert [bytes(e.batch.payload) for e in a] == [e.batch.payload for e in b]
    assert any(isinstance(e.batch.payload, memoryview) for e in a)
    assert not any(isinstance(e.batch.payload, memoryview) for e in b)


# -- findings --------------------------------------------------------------------------------------------


def test_no_manifest_and_no_stream_are_not_found(local_store):
    with pytest.raises(NotFoundError) as e:
        read_stream(local_store, 1)
    assert e.value.what == "no manifest: not a walctl store, or nothing uploaded yet"
    assert e.value.where == local_store.url and e.value.hint == "check --store; upload creates the first commit"
    put_objects(local_store, SPECS, block_size=2000)
    with pytest.raises(NotFoundError) as e:
        read_stream(local_store, 7)
    assert e.value.what == "no stream 7 in the store"
    assert e.value.where == local_store.url and e.value.hint == "'walctl ls --store URL' lists the streams"
    events, s = read_stream(local_store, 7, follow=True, idle_timeout_s=0, sleep=lambda t: None)
    assert events == [] and s.polls == 1


def test_offsets_below_the_stream_s_start_are_trimmed(st):
    def retain(m):
        m.streams[1].start = 2
    edit(st, retain)
    events, s = read_stream(st, 1, from_offset=0)
    assert finds(events) == [(TRIMMED, "offsets [0, 2) are below the stream's start (deleted by retention or "
                              "compaction)", 0, 2, None, None, None)]
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == list(range(2, 9))
    assert s.findings == 1 and s.corrupt_findings == 0
    events, _ = read_stream(st, 1)
    assert finds(events) == [] and recs(events) == LAYOUT[2:]
    events, _ = read_stream(st, 1, from_offset=2)
    assert finds(events) == [] and recs(events) == LAYOUT[2:]


def test_an_object_gone_from_the_manifest_is_a_gap(st):
    def drop(m):
        m.objects = [o for o in m.objects if o.id != 2]
    edit(st, drop)
    events, s = read_stream(st, 1)
    assert finds(events) == [(GAP, "stream 1: offsets [4, 7) are in no live object", 4, 7, None, None, None)]
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == [0, 1, 2, 3, 7, 8]
    assert s.findings == 1 and s.corrupt_findings == 1 and s.next_offset == 9

    def record(m):
        m.stream_gaps = [mf.StreamGap(1, 4, 7, "crash", None, False, None, None, None, 1, 0.0)]
    edit(st, record)
    events, s = read_stream(st, 1)
    assert [f[0] for f in finds(events)] == [RECORDED_GAP] and s.corrupt_findings == 0


def test_the_stream_s_end_past_every_object_is_a_gap(st):
    def extend(m):
        m.streams[1].end = 12
    edit(st, extend)
    events, s = read_stream(st, 1)
    assert finds(events) == [(GAP, "stream 1: the manifest says the stream ends at 12, but no live object holds "
                              "[9, 12)", 9, 12, None, None, None)]
    assert s.next_offset == 9
    events, _ = read_stream(st, 1, to_offset=10)
    assert finds(events)[0][1:4] == ("stream 1: the manifest says the stream ends at 12, but no live object holds "
                                     "[9, 10)", 9, 10)
    events, _ = read_stream(st, 1, to_offset=9)
    assert finds(events) == []
    events, _ = read_stream(st, 1, limit=9)
    assert finds(events) == []


def add_copy(store, of_id, new_id, ranges=None):
    """A live object ``new_id`` holding object ``of_id``'s bytes (and its ranges, or ``ranges``)."""
    src = objects(store)[of_id]
    key = mf.object_key(new_id)
    store.put(key, store.read_all(src.key))

    def add(m):
        m.next_object_id = max(m.next_object_id, new_id + 1)
        m.objects.append(mf.LiveObject(new_id, key, src.kind, src.size, ranges or [
            mf.ObjectRange(r.stream_id, r.start, r.end, r.bytes) for r in src.ranges], order_id=new_id, data_time=0))
    edit(store, add)
    return key


def test_a_second_object_holding_the_same_offsets_is_an_overlap(st):
    key = add_copy(st, 3, 4)
    events, s = read_stream(st, 1)
    assert finds(events) == [(OVERLAP, "stream 1: object 4 holds [7, 9), offsets another live object holds too",
                              7, 9, 4, key, None)]
    assert recs(events) == LAYOUT and s.corrupt_findings == 1 and s.objects == 3
    events, _ = read_stream(st, 1, to_offset=8)
    assert finds(events) == [] and recs(events) == LAYOUT[:8]


def test_an_object_starting_inside_the_one_before_overlaps(st):
    key = add_copy(st, 3, 4, [mf.ObjectRange(1, 6, 9, 2076)])  # says [6, 9); its batches are [7, 9)
    events, s = read_stream(st, 1)
    o = objects(st)
    assert finds(events) == [
        (OVERLAP, "stream 1: object 4 holds [6, 9), overlapping offsets another live object holds", 6, 7, 4, key, None),
        (OVERLAP, "stream 1: object 3 holds [7, 9), offsets another live object holds too", 7, 9, 3, o[3].key, None)]
    assert [e.object_id for e in events if isinstance(e, ReadRecord)] == [1, 1, 1, 1, 2, 2, 2, 4, 4]
    key5 = add_copy(st, 3, 5, [mf.ObjectRange(1, 8, 11, 2076)])  # past the others' end: read from 9 on
    events, s = read_stream(st, 1)
    assert finds(events)[-1] == (OVERLAP, "stream 1: object 5 holds [8, 11), overlapping offsets another live "
                                 "object holds", 8, 9, 5, key5, None)
    assert len(finds(events)) == 3 and s.records == 9
    assert s.findings == 3 and s.corrupt_findings == 3
    assert s.findings_list == [e for e in events if isinstance(e, ReadFinding)]


def test_ranges_of_equal_start_are_read_in_order_id_order(st):
    add_copy(st, 3, 4)

    def reorder(m):
        for o in m.objects:
            if o.id == 4:
                o.order_id = 1
    edit(st, reorder)
    events, _ = read_stream(st, 1)
    assert [e.object_id for e in events if isinstance(e, ReadRecord)][-2:] == [4, 4]
    assert finds(events)[0][4] == 3


def test_a_missing_object_is_a_finding_and_the_read_goes_on(st):
    o = objects(st)
    st.delete(o[2].key)
    for kw in ({}, {"read_ahead": False}, {"entries_guess": 1}):
        events, s = read_stream(st, 1, **kw)
        assert finds(events) == [(MISSING, "object 2 is live in the manifest but missing from the store", 4, 7, 2,
                                  o[2].key, None)]
        assert recs(events) == LAYOUT[:4] + LAYOUT[7:]
        assert s.next_offset == 9 and s.corrupt_findings == 1
    events, _ = read_stream(st, 1, from_offset=5)
    assert finds(events)[0][2:4] == (5, 7)


def test_a_missing_object_after_a_newer_commit_is_read_again(st, monkeypatch):
    o = objects(st)
    st.delete(o[2].key)
    calls = []
    real = ro.ObjectReading._manifest_moved

    def moved(self):
        calls.append(1)
        if len(calls) == 1:
            mf.commit(st, lambda m: None, command="test: a newer manifest")
            return "manifest 2 was committed"
        return real(self)

    monkeypatch.setattr(ro.ObjectReading, "_manifest_moved", moved)
    slept = []
    events, s = read_stream(st, 1, sleep=slept.append, poll_s=0.125)
    assert s.retries == 1 and slept == [0.125]
    assert [f[0] for f in finds(events)] == [MISSING]
    assert recs(events) == LAYOUT[:4] + LAYOUT[7:]


def test_a_store_whose_manifest_moved_says_so():
    class Store:
        def list(self, prefix=""):
            raise AssertionError

    r = StreamReader.__new__(StreamReader)
    r._manifest_number = 3
    import walctl.store.manifest as m

    for numbers, why in (([1, 2, 3], None), ([1, 4], "manifest 4 was committed"), ([], None)):
        r.store = Store()
        orig = m.manifest_numbers
        m.manifest_numbers = lambda store, n=numbers: n
        try:
            assert r._manifest_moved() == why
        finally:
            m.manifest_numbers = orig


def test_a_damaged_footer_makes_the_object_s_offsets_unreadable(st):
    o = objects(st)
    rewrite(st, o[2].key, lambda d: d.__setitem__(slice(len(d) - 8, len(d)), b"\0" * 8))
    events, s = read_stream(st, 1)
    f = finds(events)
    assert len(f) == 1 and f[0][0] == DAMAGE and f[0][2:6] == (4, 7, 2, o[2].key)
    assert f[0][1].startswith("footer or index: ") and f[0][1].endswith("; offsets up to 7 unreadable")
    assert f[0][6] is not None
    assert recs(events) == LAYOUT[:4] + LAYOUT[7:] and s.next_offset == 9


def test_an_object_of_another_size_than_the_manifest_s(st):
    o = objects(st)

    def grow(m):
        for x in m.objects:
            if x.id == 1:
                x.size += 1
    edit(st, grow)
    events, s = read_stream(st, 1, entries_guess=1)
    assert finds(events) == [(DAMAGE, f"object is {o[1].size} bytes, the manifest says {o[1].size + 1}", 0, 4, 1,
                              o[1].key, None)]
    assert recs(events) == LAYOUT[4:]


def test_a_changed_payload_byte_is_a_data_crc_mismatch(st):
    o = objects(st)
    raw = st.read_all(o[2].key)
    footer, _ = obj.parse_tail(raw, len(raw))
    rewrite(st, o[2].key, lambda d: d.__setitem__(500, d[500] ^ 1))
    for kw in ({}, {"entries_guess": 1, "read_ahead": False}, {"entries_guess": 1, "run_bytes": 2500}):
        events, s = read_stream(st, 1, **kw)
        f = finds(events)
        assert len(f) == 1
        kind, msg, lo, hi, oid, key, pos = f[0]
        assert (kind, lo, hi, oid, key, pos) == (DAMAGE, 4, 7, 2, o[2].key, 0) or "run_bytes" in kw
        assert msg.startswith(f"data crc mismatch over [0, 3119) (expected 0x{footer.data_crc:08X}, found 0x")
        assert msg.endswith("): a byte of this object changed; its batches passed their structure checks, "
                            "'walctl inspect-object --deep' narrows it to the block")
        assert recs(events) == LAYOUT  # every batch still served
        assert events.index(next(e for e in events if isinstance(e, ReadFinding))) == (4 if "run_bytes" not in kw
                                                                                      else 6)


def test_a_data_crc_checked_only_when_the_reads_cover_the_data_region(st):
    o = objects(st)
    rewrite(st, o[2].key, lambda d: d.__setitem__(500, d[500] ^ 1))
    events, _ = read_stream(st, 1, from_offset=6)
    assert finds(events) == []
    events, _ = read_stream(st, 1, to_offset=5, entries_guess=1, run_bytes=2500)
    assert finds(events) == []


def test_a_damaged_batch_makes_its_entry_s_offsets_unreadable(st):
    o = objects(st)
    rewrite(st, o[1].key, lambda d: d.__setitem__(2086, d[2086] ^ 0xFF))  # the batch at offset 2: its magic
    for kw in ({"entries_guess": 1}, {"rows": True}, {}):
        events, s = read_stream(st, 1, **kw)
        f = finds(events)
        assert len(f) >= 1
        kind, msg, lo, hi, oid, key, pos = f[0]
        assert (kind, lo, hi, oid, key) == (DAMAGE, 2, 4, 1, o[1].key)
        assert msg.endswith("; offsets [2, 4) of this index entry unreadable") and pos is not None
        assert s.next_offset == 9 and s.records == 7


def test_a_short_read_is_an_object_ending_inside_its_blocks(st, monkeypatch):
    o = objects(st)
    real = st.read_range

    def short(key, start, end):
        data = real(key, start, end)
        return data[:-100] if key == o[1].key and end - start > 2000 and start < 7000 else data

    monkeypatch.setattr(st, "read_range", short)
    events, s = read_stream(st, 1, entries_guess=1, read_ahead=False)
    assert finds(events) == [(DAMAGE, "object ends at 4052, inside blocks [0, 4152)", 0, 4, 1, o[1].key, 4052)]
    assert recs(events) == LAYOUT[4:]


def test_a_read_ahead_that_failed_is_read_again(st, monkeypatch):
    o = objects(st)
    real = st.read_tail
    failed = []

    def flaky(key, length):
        import threading

        if key == o[2].key and threading.current_thread() is not threading.main_thread() and not failed:
            failed.append(key)
            raise OSError("flaky")
        return real(key, length)

    monkeypatch.setattr(st, "read_tail", flaky)
    events, s = read_stream(st, 1)
    assert failed == [o[2].key]
    assert recs(events) == LAYOUT and finds(events) == []


def test_a_read_ahead_of_a_missing_object_is_a_missing_finding(st):
    o = objects(st)
    st.delete(o[3].key)
    events, s = read_stream(st, 1)
    assert [f[0] for f in finds(events)] == [MISSING] and recs(events) == LAYOUT[:7]


# -- composite objects ------------------------------------------------------------------------------------


def composite_store(store):
    appended, comp = automq_store(store)

    def add(m):
        m.objects.append(mf.LiveObject(20, gen_key(20), "SO", len(comp), [mf.ObjectRange(9, 0, 15, 0)], order_id=20,
                                       data_time=0))
        m.streams[9] = mf.StreamSpan(0, 15)
        m.next_object_id = 21
    mf.commit(store, add, command="test: a composite object")
    return appended, comp


def test_a_composite_object_is_read_through_its_members(local_store):
    appended, comp = composite_store(local_store)
    events, s = read_stream(local_store, 9, entries_guess=1)
    assert [e.batch.payload for e in events] == appended
    assert [(e.object_id, e.key) for e in events][::5] == [(11, gen_key(11)), (12, gen_key(12)), (13, gen_key(13))]
    assert s.gets == 1 + 2 + 3 and s.block_gets == 3 and s.objects == 1
    events, s = read_stream(local_store, 9, from_offset=6, to_offset=11)
    assert [e.batch.base_offset for e in events] == [6, 7, 8, 9, 10]
    events, s = read_stream(local_store, 9, limit=7)
    assert [e.batch.base_offset for e in events] == list(range(7)) and s.limited
    events, s = read_stream(local_store, 9, rows=True, from_offset=13)
    assert [r[1] for e in events for r in e.rows] == [13, 14]


def test_a_composite_s_missing_or_short_member(local_store, monkeypatch):
    composite_store(local_store)
    local_store.delete(gen_key(12))
    events, s = read_stream(local_store, 9)
    assert finds(events) == [(MISSING, "member object 12 of composite object 20 is missing from the store", 5, 10,
                              12, gen_key(12), None)]
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    real = local_store.read_range

    def short(key, start, end):
        data = real(key, start, end)
        return data[:-3] if key == gen_key(13) else data

    monkeypatch.setattr(local_store, "read_range", short)
    events, s = read_stream(local_store, 9, from_offset=8)
    f = finds(events)
    assert len(f) == 2 and f[0][:6] == (MISSING, "member object 12 of composite object 20 is missing from the store",
                                        8, 10, 12, gen_key(12))
    assert f[1][0] == DAMAGE and f[1][1].startswith("member object ends inside blocks [0, ")
    assert f[1][2:6] == (10, 15, 13, gen_key(13)) and f[1][6] > 0
    assert s.next_offset is None and s.records == 0 and s.corrupt_findings == 2


def test_a_damaged_composite_object(local_store):
    _, comp = composite_store(local_store)
    local_store.put(gen_key(20), b"\0" + comp[1:])  # the objects block's magic
    events, s = read_stream(local_store, 9)
    f = finds(events)
    assert len(f) == 1 and f[0][0] == DAMAGE and f[0][2:6] == (0, 15, 20, gen_key(20))
    assert f[0][1].startswith("composite object: ") and f[0][1].endswith("; offsets up to 15 unreadable")
    assert s.next_offset is None or s.next_offset == 0


# -- the read-ahead choices ---------------------------------------------------------------------------------


def reader(store, **kw):
    return StreamReader(store, 1, **kw)


def test_whole_objects_read_in_one_get(st):
    o = objects(st)
    r = reader(st)
    assert not r._whole(o[1], 0)  # stream 1 is 56% of it
    assert r._whole(o[2], 4) and r._whole(o[3], 7)
    assert not r._whole(o[2], 5)  # not from its start
    assert not reader(st, to_offset=6)._whole(o[2], 4) and reader(st, to_offset=7)._whole(o[2], 4)
    assert not reader(st, limit=5)._whole(o[2], 4)
    assert not reader(st, run_bytes=o[2].size - 1)._whole(o[2], 4) and reader(st, run_bytes=o[2].size)._whole(o[2], 4)
    assert not StreamReader(st, 5)._whole(o[2], 0)
    # exactly 90%
    x = mf.LiveObject(9, "k", "SO", 1000, [mf.ObjectRange(1, 0, 5, 900)])
    assert r._whole(x, 0)
    x.ranges[0].bytes = 899
    assert not r._whole(x, 0)


def test_later_objects_read_ahead(st):
    o = objects(st)
    ranges = sorted(mf.load_latest(st).ranges_of(1), key=lambda t: t[0])
    r = reader(st)
    assert r._later(ranges, 0, 4) == [(o[2], 4), (o[3], 7)]
    assert r._later(ranges, 1, 7) == [(o[3], 7)]
    assert r._later(ranges, 2, 9) == []
    assert reader(st, to_offset=7)._later(ranges, 0, 4) == [(o[2], 4)]
    assert reader(st, to_offset=8)._later(ranges, 0, 4) == [(o[2], 4), (o[3], 7)]
    assert reader(st, limit=3)._later(ranges, 0, 4) == []
    assert reader(st, read_ahead=False)._later(ranges, 0, 4) == []
    assert r._later(ranges, 0, 8) == [(o[3], 7)]  # object 2 ends before 8: read already
    x = mf.LiveObject(9, "k9", "SO", 10, [])
    more = ranges + [(9, 12, x), (12, 14, o[2]), (14, 16, mf.LiveObject(10, "k10", "SO", 10, []))]
    assert r._later(more, 1, 7) == [(o[3], 7), (x, 9)]
    assert r._later(more, 0, 4)[:2] == [(o[2], 4), (o[3], 7)]
    same = [ranges[0], (4, 7, ranges[0][2]), ranges[1], ranges[2]]
    assert r._later(same, 0, 4) == [(o[2], 4), (o[3], 7)]
    assert r._later([ranges[0], ranges[1], (6, 8, ranges[1][2]), ranges[2]], 0, 4) == [(o[2], 4), (o[3], 7)]


def test_next_run(st):
    E = obj.IndexEntry if hasattr(obj, "IndexEntry") else None
    raw = st.read_all(objects(st)[1].key)
    _, entries = obj.parse_tail(raw, len(raw))
    wanted = obj.find_entries(entries, 1, 0)
    assert [len(reader(st)._next_run(wanted, 0)), len(reader(st)._next_run(wanted, 1))] == [2, 1]
    assert len(reader(st, run_bytes=4151)._next_run(wanted, 0)) == 1
    assert len(reader(st, run_bytes=4152)._next_run(wanted, 0)) == 2
    assert len(reader(st, limit=2)._next_run(wanted, 0)) == 1
    assert len(reader(st, limit=3)._next_run(wanted, 0)) == 2
    r = reader(st, limit=4)
    r.summary.records = 2
    assert len(r._next_run(wanted, 0)) == 1
    all_entries = [e for e in entries]  # streams 1 and 2, back to back
    assert len(reader(st)._next_run(all_entries, 0)) == 4
    gap = [all_entries[0], all_entries[2]]
    assert len(reader(st)._next_run(gap, 0)) == 1
    assert E is None or E


def test_close_stops_the_read_ahead(st):
    r = reader(st)
    events = r.events()
    next(events)
    assert r._ahead is not None
    events.close()
    assert r._ahead is None and r._tails == {}
    r.close()
    assert r._ahead is None


def test_the_first_run_read_ahead_is_used(st):
    from walctl.format.crc import crc32c

    o = objects(st)
    raw = st.read_all(o[1].key)
    r = reader(st, entries_guess=4)  # the tail holds the index, not the blocks
    p = r._prefetch(o[1], 0)
    assert (len(p.tail), p.size, p.span, p.data, p.crc) == (192, o[1].size, (0, 4152), raw[:4152], crc32c(raw[:4152]))
    p = r._prefetch(o[1], 2)
    assert (p.span, p.data, p.crc) == ((2076, 4152), raw[2076:4152], None)
    p = reader(st, entries_guess=1)._prefetch(o[1], 0)  # the index is not in the tail
    assert (p.span, p.data, p.crc) == (None, None, None)
    raw2 = st.read_all(o[2].key)
    p = reader(st)._prefetch(o[2], 4)  # whole: the first run is in the tail
    assert (len(p.tail), p.span, p.data, p.crc) == (o[2].size, (0, 3119), None, crc32c(raw2[:3119]))
    p = reader(st, to_offset=6)._prefetch(o[2], 4)
    assert (p.span, p.crc) == ((0, 2076), crc32c(raw2[:2076]))
    p = reader(st)._prefetch(o[2], 9)
    assert (p.span, p.data, p.crc) == (None, None, None)
    p = reader(st, to_offset=4)._prefetch(o[2], 4)
    assert p.span is None


def test_a_prefetched_first_run_is_served(st, monkeypatch):
    o = objects(st)
    r = reader(st, entries_guess=4)
    events, s = read_stream(st, 1, entries_guess=4)
    assert recs(events) == LAYOUT and s.block_gets == 1 and s.gets == 1 + 2 + 1 + 1
    # object 1 read ahead (as if a previous object was being served): its run is not read again
    r.next = 0
    ahead = r._submit(r._prefetch, o[1], 0)
    ahead.result()
    r._tails[o[1].key] = ahead
    before = st.stats.snapshot()["get"]
    got = list(r._read_object(o[1], 4))
    assert [e.batch.base_offset for e in got] == [0, 1, 2, 3]
    assert st.stats.snapshot()["get"] == before and r.summary.block_gets == 1
    r.close()


def test_a_composite_object_read_ahead_is_taken_whole(local_store):
    appended, comp = composite_store(local_store)
    o = objects(local_store)[20]
    p = StreamReader(local_store, 9)._prefetch(o, 0)
    assert (p.tail, p.size, p.span, p.data, p.crc) == (comp, len(comp), None, None, None)


# -- --follow -------------------------------------------------------------------------------------------------


class Clock:
    def __init__(self, on_sleep=None):
        self.t, self.slept, self.on_sleep = 0.0, [], on_sleep

    def sleep(self, s):
        self.slept.append(s)
        self.t += s
        if self.on_sleep is not None:
            self.on_sleep(len(self.slept))

    def __call__(self):
        return self.t


def test_follow_backs_off_while_nothing_new_lands(st):
    c = Clock()
    events, s = read_stream(st, 1, follow=True, poll_s=0.2, max_poll_s=0.5, idle_timeout_s=1.0, sleep=c.sleep,
                            clock=c)
    assert recs(events) == LAYOUT
    assert c.slept == [0.2, 0.2, 0.4, 0.5]
    assert s.polls == 5


def test_follow_serves_new_commits_and_starts_the_backoff_again(st):
    def on_sleep(n):
        if n == 3:
            put_objects(st, [[(1, 2, 10)]])

    c = Clock(on_sleep)
    events, s = read_stream(st, 1, follow=True, poll_s=0.25, max_poll_s=4, idle_timeout_s=1.0, sleep=c.sleep,
                            clock=c)
    assert [e.batch.base_offset for e in events] == list(range(11))
    assert c.slept == [0.25, 0.25, 0.5, 0.25, 0.25, 0.5]
    assert s.manifest_number == 2 and s.next_offset == 11


def test_follow_ends_at_the_limit_or_to_offset(st):
    c = Clock()
    events, s = read_stream(st, 1, follow=True, limit=9, sleep=c.sleep, clock=c)
    assert len(events) == 9 and c.slept == []
    events, s = read_stream(st, 1, follow=True, to_offset=9, sleep=c.sleep, clock=c)
    assert len(events) == 9 and c.slept == []
    events, s = read_stream(st, 1, follow=True, to_offset=10, idle_timeout_s=0.5, sleep=c.sleep, clock=c)
    assert len(events) == 9 and c.slept


def test_follow_waits_for_a_first_manifest(local_store):
    def on_sleep(n):
        if n == 2:
            put_objects(local_store, [[(1, 2, 10)]])

    c = Clock(on_sleep)
    events, s = read_stream(local_store, 1, follow=True, poll_s=0.1, idle_timeout_s=0.5, sleep=c.sleep, clock=c)
    assert [e.batch.base_offset for e in events] == [0, 1]
    assert c.slept[:3] == [0.1, 0.2, 0.1]


def test_follow_without_a_timeout_polls_until_closed(st):
    c = Clock()
    it = StreamReader(st, 1).events(follow=True, poll_s=0.1, max_poll_s=0.3, sleep=c.sleep, clock=c)
    assert [next(it).batch.base_offset for _ in range(9)] == list(range(9))

    def stop(n):
        if n == 5:
            raise StopIteration

    c.on_sleep = stop
    with pytest.raises((StopIteration, RuntimeError)):
        next(it)
    assert c.slept == [0.1, 0.1, 0.2, 0.3, 0.3]


class Moving(StreamReader):
    """A reader whose every pass is cut short (the WAL moved under it), serving ``serve`` records first."""

    def __init__(self, *a, serve=0, **kw):
        super().__init__(*a, **kw)
        self.left = serve

    def _pass(self, *, first, follow):
        self.summary.polls += 1
        self._unsettled = "the header slots changed"
        if self.left:
            self.left -= 1
            self.summary.records += 1
            self.next = (self.next or 0) + 1
        return iter(())


def test_a_wal_that_keeps_moving_ends_the_read(st):
    from walctl.wal.readsession import RESCANS

    c = Clock()
    r = Moving(st, 1, from_offset=3)
    events = list(r.events(sleep=c.sleep, clock=c, poll_s=0.05))
    assert finds(events) == [(WAL_MOVED, f"the WAL moved under {RESCANS + 1} reads (the header slots changed): its "
                              "records from stream offset 3 on were not served; read again, or use --follow", 3, None,
                              None, None, None)]
    assert r.summary.log_moved and r.summary.retries == RESCANS + 1 and c.slept == [0.05] * RESCANS
    assert r.summary.findings == 1 and r.summary.corrupt_findings == 0
    # a pass that served something starts the count again
    r = Moving(st, 1, from_offset=3, serve=2)
    events = list(r.events(sleep=c.sleep, clock=c, poll_s=0.05))
    assert r.summary.retries == RESCANS + 3 and finds(events)[0][2] == 5


def test_a_moving_wal_with_a_limit_reached_is_done(st):
    c = Clock()
    r = Moving(st, 1, from_offset=0, limit=1, serve=1)
    assert list(r.events(sleep=c.sleep, clock=c)) == [] and r.summary.retries == 0 and not r.summary.log_moved


def test_stats_are_counted_from_the_reader_s_start(st):
    st.read_all(objects(st)[1].key)
    events, s = read_stream(st, 1)
    assert s.gets == 4 and s.lists == 1
    assert s.bytes_read == sum(o.size for o in objects(st).values()) + len(st.read_all(mf.manifest_key(1)))


def test_open_for_read_never_creates_a_store(tmp_path):
    with pytest.raises(NotFoundError):
        open_for_read(str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()
    from walctl.errors import UsageError

    with pytest.raises(UsageError):
        open_for_read("nosuch://x")


# -- a gap inside an object, the WAL's tail --------------------------------------------------------------------


def test_offsets_an_object_s_index_does_not_start_at_are_a_gap_inside_it(local_store):
    mf.commit(local_store, lambda m: m.streams.__setitem__(5, mf.StreamSpan(0, 2)), command="test: stream 5")
    put_objects(local_store, [[(5, 3, 100)]])  # batches [2, 5)

    def lower(m):
        m.objects[0].ranges[0].start = 0
    edit(local_store, lower)
    o = objects(local_store)[1]
    for rows in (False, True):
        events, s = read_stream(local_store, 5, rows=rows)
        assert finds(events) == [(GAP, "stream 5: offsets [0, 2) missing inside object 1", 0, 2, 1, o.key, 10)]
        assert s.records == 3 and s.next_offset == 5 and s.corrupt_findings == 1
        first = events[1]
        assert (first.rows[0][1] if rows else first.batch.base_offset) == 2


def test_the_wal_s_tail_follows_the_store(tmp_path, local_store):
    from walctl.pipeline.upload import upload

    from storehelpers import append as wal_append
    from storehelpers import make_wal

    wal = make_wal(tmp_path)
    first = wal_append(wal, {1: (3, 50)})[1]
    upload(wal, local_store)
    more = wal_append(wal, {1: (2, 50)}, store=local_store)[1]
    events, s = read_stream(local_store, 1, wal=wal)
    assert [(e.batch.base_offset, e.source) for e in events] == [(0, "store"), (1, "store"), (2, "store"),
                                                                 (3, "wal"), (4, "wal")]
    assert [e.batch.payload for e in events] == first + more
    assert s.wal_records == 2 and s.records == 5 and s.next_offset == 5
    events, s = read_stream(local_store, 1, wal=wal, limit=3)
    assert [e.source for e in events] == ["store"] * 3 and s.wal_records == 0
    events, s = read_stream(local_store, 1, wal=wal, to_offset=4)
    assert [e.batch.base_offset for e in events] == [0, 1, 2, 3]
    # a stream only in the WAL: no error with a WAL
    wal_append(wal, {2: (1, 10)}, store=local_store)
    events, s = read_stream(local_store, 2, wal=wal)
    assert [(e.batch.base_offset, e.source) for e in events] == [(0, "wal")]

    def on_sleep(n):
        if n == 1:
            wal_append(wal, {1: (1, 50)}, store=local_store)

    c = Clock(on_sleep)
    events, s = read_stream(local_store, 1, wal=wal, follow=True, idle_timeout_s=0.3, poll_s=0.1, sleep=c.sleep,
                            clock=c)
    assert [(e.batch.base_offset, e.source) for e in events][-2:] == [(4, "wal"), (5, "wal")]


# -- composite objects, closer ------------------------------------------------------------------------------------


def member_entries(store, oid):
    raw = store.read_all(gen_key(oid))
    return obj.parse_tail(raw, len(raw))[1]


def test_a_composite_read_whole_from_its_tail_costs_no_second_get(local_store):
    composite_store(local_store)
    events, s = read_stream(local_store, 9)
    assert s.gets == 1 + 1 + 3 and s.block_gets == 3 and s.records == 15


@pytest.mark.parametrize("lo, hi, members", [(7, None, 2), (5, None, 2), (4, None, 3), (0, 10, 2), (0, 11, 3),
                                             (0, 5, 1), (5, 10, 1)])
def test_a_composite_reads_only_the_members_holding_wanted_offsets(local_store, lo, hi, members):
    composite_store(local_store)
    events, s = read_stream(local_store, 9, from_offset=lo, to_offset=hi)
    assert [e.batch.base_offset for e in events] == list(range(lo, 15 if hi is None else hi))
    assert s.block_gets == members


def test_a_composite_read_a_block_a_run(local_store):
    composite_store(local_store)
    n = sum(len(member_entries(local_store, m)) for m in (11, 12, 13))
    assert n > 6  # several entries a member
    events, s = read_stream(local_store, 9, run_bytes=1)
    assert [e.batch.base_offset for e in events] == list(range(15)) and s.block_gets == n


def test_a_composite_s_missing_member_is_one_finding_a_run(local_store):
    composite_store(local_store)
    local_store.delete(gen_key(12))
    runs = member_entries(local_store, 13) and None
    events, s = read_stream(local_store, 9, run_bytes=1)
    f = finds(events)
    assert [x[0] for x in f] == [MISSING] * len(f) and len(f) >= 2
    assert f[0][2] == 5 and f[-1][3] == 10 and all(x[4:6] == (12, gen_key(12)) for x in f)
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == [0, 1, 2, 3, 4] + list(range(10, 15))
    assert runs is None


def test_a_composite_s_short_member_names_its_blocks(local_store, monkeypatch):
    composite_store(local_store)
    entries = member_entries(local_store, 13)
    real = local_store.read_range

    def short(key, start, end):
        data = real(key, start, end)
        return data[:-3] if key == gen_key(13) else data

    monkeypatch.setattr(local_store, "read_range", short)
    events, s = read_stream(local_store, 9)
    end = entries[-1].block_end
    assert len(entries) >= 3
    assert finds(events) == [(DAMAGE, f"member object ends inside blocks [0, {end})", 10, 15, 13, gen_key(13),
                              end - 3)]
    events, s = read_stream(local_store, 9, run_bytes=1)
    f = finds(events)
    assert len(f) == len(entries) and [x[0] for x in f] == [DAMAGE] * len(entries)
    assert f[1][1] == f"member object ends inside blocks [{entries[1].block_position}, {entries[1].block_end})"
    assert f[1][6] == entries[1].block_end - 3


def test_a_damaged_composite_s_finding_has_its_position(local_store):
    _, comp = composite_store(local_store)
    local_store.put(gen_key(20), b"\0" + comp[1:])
    events, s = read_stream(local_store, 9)
    assert finds(events)[0][6] == 0


def test_a_composite_holding_another_stream_than_the_manifest_says(local_store):
    """A composite object holds one stream: the manifest naming another finds none of its batches."""
    appended, comp = automq_store(local_store)

    def add(m):
        m.objects.append(mf.LiveObject(20, gen_key(20), "SO", len(comp), [mf.ObjectRange(7, 0, 15, 0)], order_id=20,
                                       data_time=0))
        m.streams[7] = mf.StreamSpan(0, 15)
        m.next_object_id = 21
    mf.commit(local_store, add, command="test: a composite under another stream")
    events, s = read_stream(local_store, 7)
    assert [f[:4] for f in finds(events)] == [(GAP, "stream 7: the manifest says the stream ends at 15, but no live "
                                                    "object holds [0, 15)", 0, 15)]
    assert s.records == 0 and s.block_gets == 0


def test_the_newest_manifest_number_is_the_last(st, monkeypatch):
    import walctl.store.manifest as m

    r = StreamReader(st, 1)
    r._manifest_number = 3
    monkeypatch.setattr(m, "manifest_numbers", lambda store: [1, 2, 5])
    assert r._manifest_moved() == "manifest 5 was committed"


def test_read_ahead_threads_are_named(st):
    import threading

    r = reader(st)
    seen = []
    r._submit(lambda: seen.append(threading.current_thread().name)).result()
    r.close()
    assert seen == ["walctl-read-ahead"]


def test_an_object_without_a_data_crc_gets_no_run_crc(local_store):
    put_objects(local_store, [[(1, 3, 1000)]], block_size=2000, version=obj.VERSION_AUTOMQ)
    o = objects(local_store)[1]
    p = reader(local_store)._prefetch(o, 0)
    assert p.span is not None and p.span[0] == 0 and p.crc is None
    p = reader(local_store, entries_guess=2)._prefetch(o, 0)
    assert p.span is not None and p.crc is None
    events, s = read_stream(local_store, 1)
    assert finds(events) == [] and s.records == 3


def test_a_data_crc_mismatch_is_said_once():
    from types import SimpleNamespace

    from walctl.format.crc import crc32c

    footer = SimpleNamespace(checksummed=True, index_start_position=6, data_crc=crc32c(b"abcdef") ^ 1)
    c = ro._DataCrc(footer)
    assert c.add(b"abc", 0, 3, None) is False
    assert c.add(b"xyz", 4, 7, None) is False  # a hole: no longer covered from 0
    assert c.add(b"def", 3, 6, None) is True and c.covered == 6 and c.crc == crc32c(b"abcdef")
    assert c.add(b"", 6, 6, None) is False  # said once
    c = ro._DataCrc(footer)
    assert c.add(b"abcdef", 0, 6, crc32c(b"abcdef")) is True
    footer.data_crc ^= 1
    assert ro._DataCrc(footer).add(b"abcdef", 0, 6, None) is False
    footer.checksummed = False
    assert ro._DataCrc(footer).add(b"abcdef", 0, 6, None) is False


@pytest.mark.parametrize("guess", [1, 1000])
def test_a_damaged_index_read_apart_names_its_position(st, guess):
    import struct

    o = objects(st)
    rewrite(st, o[1].key, lambda d: struct.pack_into(">q", d, 7271 + 36 + 24, 99999))  # entry 1's blockPosition
    events, s = read_stream(st, 1, entries_guess=guess)
    f = finds(events)
    assert len(f) == 1 and f[0][0] == DAMAGE and f[0][2:7] == (0, 4, 1, o[1].key, 7271)
    assert f[0][1].startswith("footer or index: object index block: crc mismatch, stored 0x")
    assert recs(events) == LAYOUT[4:]


@pytest.mark.parametrize("read_ahead", [True, False])
def test_runs_partly_and_wholly_in_a_larger_tail(st, read_ahead):
    """A tail of 3648 bytes (100 entries guessed) starts at 3815 in object 1: stream 1's run [0, 4152)
    is read apart (it starts before the tail), stream 2's [4152, 7271) is in the tail."""
    assert obj.tail_length_hint(100, 7463) == 3648
    events, s = read_stream(st, 1, entries_guess=100, read_ahead=read_ahead, to_offset=4)
    assert recs(events) == LAYOUT[:4] and s.block_gets == 1 and s.gets == 1 + 2
    events, s = read_stream(st, 2, entries_guess=100, read_ahead=read_ahead)
    assert [(e.batch.base_offset, e.block_position) for e in events] == [(0, 4152), (1, 4152), (2, 6228)]
    assert finds(events) == [] and s.block_gets == 0 and s.gets == 1 + 1
    events, s = read_stream(st, 1, entries_guess=1, read_ahead=read_ahead, run_bytes=2500, to_offset=7)
    assert s.block_gets == 4 and recs(events) == LAYOUT[:7]


def test_follow_goes_on_after_the_end_gap(st):
    def extend(m):
        m.streams[1].end = 12
    edit(st, extend)

    def on_sleep(n):
        if n == 1:
            put_objects(st, [[(1, 2, 10)]])  # [12, 14)

    c = Clock(on_sleep)
    events, s = read_stream(st, 1, follow=True, poll_s=0.1, idle_timeout_s=0.3, sleep=c.sleep, clock=c)
    assert [e.batch.base_offset for e in events if isinstance(e, ReadRecord)] == list(range(9)) + [12, 13]
    assert [f[2:4] for f in finds(events)] == [(9, 12)]
    assert s.next_offset == 14


def test_payload_views_of_a_lending_store_are_views_everywhere(st):
    assert st.capabilities.lends_views
    for kw in ({}, {"entries_guess": 1}, {"entries_guess": 1, "run_bytes": 2500, "read_ahead": False}):
        events, _ = read_stream(st, 1, payload_views=True, **kw)
        assert len(events) == 9 and all(isinstance(e.batch.payload, memoryview) for e in events)


def test_runs_of_one_block_a_batch(local_store):
    put_objects(local_store, [[(1, 6, 1000)]], block_size=1)  # six blocks of 1043 bytes
    raw = local_store.read_all(mf.object_key(1))
    wanted = obj.find_entries(obj.parse_tail(raw, len(raw))[1], 1, 0)
    assert [e.block_size for e in wanted] == [1043] * 6
    assert [len(reader(local_store, run_bytes=2500)._next_run(wanted, i)) for i in (0, 2, 4, 5)] == [2, 2, 2, 1]
    assert len(reader(local_store, run_bytes=3129)._next_run(wanted, 0)) == 3
    assert len(reader(local_store, limit=3)._next_run(wanted, 0)) == 3
    r = reader(local_store, limit=5)
    r.summary.records = 1
    assert len(r._next_run(wanted, 1)) == 4
    events, s = read_stream(local_store, 1, run_bytes=2500, entries_guess=1, read_ahead=False)
    assert s.records == 6 and s.block_gets == 3


def test_a_gap_before_to_offset_is_said_once_without_reading_past_it(st):
    def drop(m):
        m.objects = [o for o in m.objects if o.id != 2]
    edit(st, drop)
    events, s = read_stream(st, 1, to_offset=7)
    assert finds(events) == [(GAP, "stream 1: the manifest says the stream ends at 9, but no live object holds "
                              "[4, 7)", 4, 7, None, None, None)]
    assert s.objects == 1 and s.next_offset == 4


def test_an_object_inside_an_earlier_longer_one_still_overlaps_the_next(st):
    add_copy(st, 2, 4, [mf.ObjectRange(1, 4, 9, 3119)])  # says [4, 9); its batches are [4, 7)

    def first(m):
        for o in m.objects:
            if o.id == 4:
                o.order_id = 1  # read before object 2
    edit(st, first)
    events, s = read_stream(st, 1)
    assert [(f[0], f[4]) for f in finds(events)] == [(OVERLAP, 2), (OVERLAP, 3)]
    assert [e.object_id for e in events if isinstance(e, ReadRecord)] == [1, 1, 1, 1, 4, 4, 4, 3, 3]


def test_a_manifest_that_does_not_parse_names_its_key(st):
    from walctl.errors import CorruptionError

    st.put(mf.manifest_key(2), b"{not json")
    with pytest.raises(CorruptionError) as e:
        read_stream(st, 1)
    assert e.value.where == mf.manifest_key(2)
