"""Upload's commit (walctl/pipeline/upload/commit.py) step by step on a local store: the prepare
commit, the objects written under the reserved keys, the commit that makes them live (and each of
its refusals), the roll back (issue 32: each of the module's mutants killed here, in milliseconds)."""

from __future__ import annotations

import time

import pytest

from walctl.errors import RefusedError
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.pipeline.upload import commit as upload_commit
from walctl.pipeline.upload.plan import PlannedObject, Segment
from walctl.store import manifest as mf
from walctl.store.local import LocalStore


@pytest.fixture
def store(tmp_path):
    return LocalStore(str(tmp_path / "store"))


def _batches(sid: int, start: int, n: int, size: int = 50) -> list[StreamRecordBatch]:
    return [StreamRecordBatch(sid, 0, start + i, 1, bytes([sid, i]) * (size // 2)) for i in range(n)]


class _Fetch:
    """walread._WalBatches' ``blocks``: a segment's blocks of encoded batches (two batches a block)."""

    def __init__(self, batches: dict[int, list[StreamRecordBatch]]):
        self.batches = batches
        self.asked: list[tuple[int, int]] = []

    def blocks(self, seg: Segment, block_size: int):
        self.asked.append((seg.stream_id, block_size))
        todo = self.batches[seg.stream_id]
        for i in range(0, len(todo), 2):
            part = todo[i:i + 2]
            yield part[0].base_offset, part[-1].end_offset, [b.encode() for b in part]


def _segment(sid: int, batches: list[StreamRecordBatch]) -> Segment:
    seg = Segment(sid, batches[0].base_offset)
    for i, b in enumerate(batches):
        seg.add(i * 1000, b.end_offset, len(b.encode()), 0)
    return seg


def test_prepare_reserves_the_ids_and_keys_in_one_commit(store):
    before = time.time()
    prepared = upload_commit.prepare(store, 3, "ns1")
    doc = mf.load_latest(store)
    assert [p.id for p in prepared] == [1, 2, 3] and doc.next_object_id == 4
    assert [p.key for p in prepared] == [mf.object_key(i, "ns1") for i in (1, 2, 3)]
    assert {p.id for p in doc.prepared} == {1, 2, 3} and doc.number == 1
    assert doc.writer["command"] == "upload (prepare)"
    assert all(before <= p.prepared_at < p.expires_at for p in prepared)


def test_put_objects_writes_each_planned_object_under_its_key(store):
    batches = {1: _batches(1, 0, 5), 2: _batches(2, 10, 3), 3: _batches(3, 7, 2)}
    segs = {sid: _segment(sid, b) for sid, b in batches.items()}
    plan = [PlannedObject("SO", [(3, segs[3])]), PlannedObject("SSO", [(1, segs[1]), (2, segs[2])])]
    prepared = upload_commit.prepare(store, 2, "ns")
    fetch = _Fetch(batches)
    seen = []
    before = time.time()
    made = upload_commit.put_objects(store, plan, prepared, fetch, 4096, None,
                                     lambda done, total: seen.append((done, total)))
    after = time.time()
    assert fetch.asked == [(3, 4096), (1, 4096), (2, 4096)]
    total = sum(s.bytes for s in segs.values())
    assert seen == [(segs[3].bytes, total), (total, total)]
    assert [(o.id, o.key, o.kind, o.order_id) for o in made] == [
        (prepared[0].id, prepared[0].key, "SO", prepared[0].id), (prepared[1].id, prepared[1].key, "SSO", prepared[1].id)]
    assert all(before <= o.data_time <= after for o in made)
    for o, streams in zip(made, [[3], [1, 2]]):
        data = store.read_all(o.key)
        assert o.size == len(data)
        # the same bytes as build_object's for the same DataBlocks (two batches a block)
        want = obj.build_object([(sid, batches[sid]) for sid in streams], block_size=2 * len(batches[1][0].encode()) - 1)
        assert data == want.data
        footer, entries = obj.parse_tail(data, len(data))
        spans = {}
        for e in entries:
            spans.setdefault(e.stream_id, []).append(e)
        assert [(r.stream_id, r.start, r.end, r.bytes) for r in o.ranges] == [
            (sid, es[0].start_offset, es[-1].end_offset, sum(e.block_size for e in es)) for sid, es in sorted(spans.items())]
    assert [(r.stream_id, r.start, r.end) for r in made[1].ranges] == [(1, 0, 5), (2, 10, 13)]


def test_put_objects_without_progress(store):
    batches = {4: _batches(4, 0, 1)}
    plan = [PlannedObject("SO", [(4, _segment(4, batches[4]))])]
    made = upload_commit.put_objects(store, plan, upload_commit.prepare(store, 1, "n"), _Fetch(batches), 1, None, None)
    assert [(r.stream_id, r.start, r.end) for r in made[0].ranges] == [(4, 0, 1)]


def test_a_spooled_object_is_published_not_built(store):
    seg = _segment(5, _batches(5, 0, 1))
    seg.spool = type("Spool", (), {"dropped": False})()
    built = obj.ObjectBuilder()
    built.add_block(5, 0, 1, [_batches(5, 0, 1)[0].encode()])
    built.finish()
    published = []

    class Spools:
        def publish(self, spool, key):
            published.append((spool, key))
            return built

    class NoFetch:
        def blocks(self, seg, block_size):
            raise AssertionError("a spooled object is not read again")

    prepared = upload_commit.prepare(store, 1, "n")
    made = upload_commit.put_objects(store, [PlannedObject("SO", [(5, seg)])], prepared, NoFetch(), 1, Spools(), None)
    assert published == [(seg.spool, prepared[0].key)]
    assert (made[0].size, made[0].kind) == (built.size, "SO")
    assert [(r.stream_id, r.start, r.end, r.bytes) for r in made[0].ranges] == [(5, 0, 1, built.ranges[5].size_bytes)]


def _made(store, prepared, sid=1, start=0, end=5):
    return [mf.LiveObject(prepared[0].id, prepared[0].key, "SO", 100, [mf.ObjectRange(sid, start, end, 90)],
                          order_id=prepared[0].id, data_time=1.0)]


def _gap(sid=1):
    return {"stream_id": sid, "from": 5, "to": 9, "cause": "accepted", "hole_start": None, "sealed": False,
            "sealed_at_ns": None, "before_wal_offset": 10, "after_wal_offset": 20}


def test_make_live_commits_the_objects_the_mark_and_the_gaps(store):
    prepared = upload_commit.prepare(store, 1, "n")
    mark = mf.UploadMark(100, 1, 4, 77)
    before = time.time()
    number = upload_commit.make_live(store, _made(store, prepared), "7", None, mark, {1: None}, [_gap()], 7)
    doc = mf.load_latest(store)
    assert number == doc.number == 2 and doc.writer["command"] == "upload"
    assert [o.id for o in doc.objects] == [prepared[0].id] and doc.prepared == []
    assert doc.upload_mark("7") == mark and upload_commit.stream_end(doc, 1) == 5
    (gap,) = doc.stream_gaps
    assert (gap.stream_id, gap.from_offset, gap.to_offset, gap.cause, gap.node_id) == (1, 5, 9, "accepted", 7)
    assert (gap.before_wal_offset, gap.after_wal_offset) == (10, 20) and before <= gap.time <= time.time()


def test_make_live_without_gaps_records_none(store):
    prepared = upload_commit.prepare(store, 1, "n")
    upload_commit.make_live(store, _made(store, prepared), "11", None, mf.UploadMark(1, 1, 4, 0), {}, [], 1)
    assert mf.load_latest(store).stream_gaps is None


def test_make_live_refuses_ids_gc_collected(store):
    prepared = upload_commit.prepare(store, 2, "n")
    mf.commit(store, lambda m: m.release({prepared[0].id}), command="gc")
    with pytest.raises(RefusedError) as err:
        upload_commit.make_live(store, _made(store, prepared), "11", None, mf.UploadMark(1, 1, 4, 0), {}, [], 1)
    assert str(err.value.args[0]) == "the prepared object ids were collected by gc during the upload"
    assert err.value.where == store.url and err.value.hint == "rerun upload; nothing was lost"
    assert mf.load_latest(store).number == 2  # nothing committed


def test_make_live_refuses_when_another_upload_of_the_wal_committed_first(store):
    prepared = upload_commit.prepare(store, 1, "n")
    mf.commit(store, lambda m: m.advance("11", mf.UploadMark(9, 1, 0, 0)), command="upload")
    with pytest.raises(RefusedError) as err:
        upload_commit.make_live(store, _made(store, prepared), "11", None, mf.UploadMark(1, 1, 4, 0), {}, [], 1)
    assert err.value.args[0] == "another upload of this WAL (node 11) committed first"
    assert err.value.where == store.url
    assert err.value.hint == "rerun upload: it skips what is already uploaded"
    # the mark it started from is still there: it commits
    upload_commit.make_live(store, _made(store, prepared), "11", mf.UploadMark(9, 1, 0, 0),
                            mf.UploadMark(1, 1, 4, 0), {}, [], 1)


def test_make_live_refuses_a_stream_whose_end_moved(store):
    prepared = upload_commit.prepare(store, 1, "n")
    with pytest.raises(RefusedError) as err:
        upload_commit.make_live(store, _made(store, prepared), "11", None, mf.UploadMark(1, 1, 4, 0),
                                {2: None, 1: 3}, [], 1)
    assert err.value.args[0] == "stream 1 changed in the store during the upload (end 3 -> None)"
    assert err.value.where == store.url and err.value.hint == "rerun upload"
    assert mf.load_latest(store).number == 1


def test_roll_back_deletes_the_objects_and_releases_the_ids(store):
    prepared = upload_commit.prepare(store, 2, "n")
    keep = upload_commit.prepare(store, 1, "n")
    for p in prepared + keep:
        store.put(p.key, b"x")
    warnings = []
    upload_commit.roll_back(store, prepared, warnings)
    doc = mf.load_latest(store)
    assert warnings == [] and {p.id for p in doc.prepared} == {keep[0].id}
    assert doc.writer["command"] == "upload (roll back)"
    written = {p.key for p in prepared + keep}
    assert [o.key for o in store.list("") if o.key in written] == [keep[0].key]


def test_a_failed_roll_back_is_a_warning(store, monkeypatch):
    prepared = upload_commit.prepare(store, 2, "n")

    def fail(key):
        raise OSError("disk on fire")

    monkeypatch.setattr(store, "delete", fail)
    warnings = []
    upload_commit.roll_back(store, prepared, warnings)
    assert warnings == [f"could not roll back the prepared objects {[1, 2]} (disk on fire); "
                        "they expire within an hour and gc deletes them"]
    assert mf.load_latest(store).number == 1  # nothing released


def test_stream_end_of_a_stream_and_of_none(store):
    prepared = upload_commit.prepare(store, 1, "n")
    upload_commit.make_live(store, _made(store, prepared, sid=3, start=2, end=8), "11", None,
                            mf.UploadMark(1, 3, 7, 0), {3: None}, [], 1)
    doc = mf.load_latest(store)
    assert upload_commit.stream_end(doc, 3) == 8 and upload_commit.stream_end(doc, 4) is None


def test_make_live_checks_each_stream_s_end_in_the_store_now(store):
    prepared = upload_commit.prepare(store, 1, "n")
    upload_commit.make_live(store, _made(store, prepared), "11", None, mf.UploadMark(1, 1, 4, 0), {1: None}, [], 1)
    mark = mf.UploadMark(1, 1, 4, 0)
    more = upload_commit.prepare(store, 1, "n")
    with pytest.raises(RefusedError) as err:
        upload_commit.make_live(store, _made(store, more, start=5, end=9), "11", mark, mf.UploadMark(2, 1, 8, 0),
                                {1: 4}, [], 1)
    assert err.value.args[0] == "stream 1 changed in the store during the upload (end 4 -> 5)"
    upload_commit.make_live(store, _made(store, more, start=5, end=9), "11", mark, mf.UploadMark(2, 1, 8, 0),
                            {1: 5}, [], 1)
    assert upload_commit.stream_end(mf.load_latest(store), 1) == 9
