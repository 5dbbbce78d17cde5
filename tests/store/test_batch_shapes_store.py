"""AutoMQ-shaped batches through upload, compaction and read (issue 32): batches of count > 1 and
epoch != 0, and index entries over several DataBlocks. walctl's own writers make batches of count 1
and epoch 0, where a batch count and an offset span are the same number."""

from __future__ import annotations

import pytest

from walctl.compaction.so import compact_stream_objects
from walctl.format import object as obj
from walctl.pipeline.read import ReadRecord, read_stream
from walctl.pipeline.upload import run as upload_run
from walctl.pipeline.upload import spool as upload_spool
from walctl.pipeline.upload import upload
from walctl.store import manifest as mf
from walctl.store.local import LocalStore

from storehelpers import append_batches, make_wal, put_objects, read_back, read_back_batches

KiB, MiB = 1 << 10, 1 << 20
EPOCH = (1 << 33) + 7


def shape(sid: int, i: int) -> int:
    """Records per batch: 1 to 5, varying within each stream."""
    return 1 + (sid * 7 + i * 3) % 5


PLAN = {1: (30, 300), 2: (12, 1500), 9: (5, 40)}


def _check_objects(store, appended):
    """Every object's index counts batches (not offsets), and is what build_object makes of them."""
    spans_differ = False
    for o in mf.load_latest(store).objects:
        data = store.read_all(o.key)
        assert obj.verify_object(data) == [], o["key"]
        _, entries = obj.parse_tail(data, len(data))
        for e in entries:
            batches = list(obj.iter_blocks(data, e))
            assert e.record_count == len(batches)
            assert e.end_offset - e.start_offset == sum(b.count for b in batches)
            spans_differ |= e.record_count != e.end_offset - e.start_offset
    assert spans_differ, "no index entry where batches and offsets differ: the shapes test nothing"
    assert read_back_batches(store) == {s: v for s, v in appended.items() if v}


@pytest.mark.parametrize("path", ["spool", "kept", "streamed"])
def test_upload_of_multi_record_batches_round_trips(tmp_path, store, monkeypatch, path):
    """The three ways upload builds an object (spooled as the scan reads, from the bodies the scan kept,
    from a second read of the log) on both stores: same batches back, offsets and epochs included."""
    if path != "spool":
        monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    if path == "streamed":
        monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 0)
    wal = make_wal(tmp_path)
    appended = append_batches(wal, PLAN, count=shape, epoch=EPOCH)
    result = upload(wal, store, block_size=2 * KiB, split_size=8 * KiB)
    assert result.records == sum(n for n, _ in PLAN.values())
    _check_objects(store, appended)
    doc = mf.load_latest(store)
    assert {s: (span.start, span.end) for s, span in doc.streams.items()} == \
        {s: (v[0].base_offset, v[-1].end_offset) for s, v in appended.items()}
    # the next append continues each stream after its last record, not after its last batch's base
    more = append_batches(wal, {1: (3, 100)}, store, count=4, epoch=EPOCH + 1)
    assert more[1][0].base_offset == appended[1][-1].end_offset
    upload(wal, store, block_size=2 * KiB, split_size=8 * KiB)
    assert read_back_batches(store)[1] == appended[1] + more[1]


def test_uploaded_objects_are_build_objects_bytes(tmp_path):
    """One Stream Set Object: upload's bytes are build_object's for the same batches and block size."""
    wal = make_wal(tmp_path)
    appended = append_batches(wal, PLAN, count=shape, epoch=EPOCH)
    store = LocalStore(str(tmp_path / "store"))
    upload(wal, store, block_size=2 * KiB, split_size=1 * MiB)
    (o,) = mf.load_latest(store).objects
    built = obj.build_object(sorted(appended.items()), block_size=2 * KiB)
    assert store.read_all(o.key) == built.data


def test_read_from_inside_a_batch_starts_at_the_batch_holding_it(tmp_path, local_store):
    wal = make_wal(tmp_path)
    appended = append_batches(wal, PLAN, count=shape, epoch=EPOCH)
    upload(wal, local_store, block_size=2 * KiB, split_size=8 * KiB)
    batches = appended[1]
    events, summary = read_stream(local_store, 1)
    got = [e.batch for e in events if isinstance(e, ReadRecord)]
    assert got == batches and summary.next_offset == batches[-1].end_offset
    holder = next(b for b in batches if b.count > 2)
    inside = holder.base_offset + 1  # an offset inside a batch: that batch is the first read
    events, _ = read_stream(local_store, 1, from_offset=inside)
    got = [e.batch for e in events if isinstance(e, ReadRecord)]
    assert got[0] == holder and got == [b for b in batches if b.end_offset > inside]


def test_so_compaction_keeps_multi_record_batches(local_store):
    appended = put_objects(local_store, [[(1, 6, 3000)] for _ in range(8)] + [[(2, 3, 500)]], count=shape,
                           epoch=EPOCH, block_size=4 * KiB)
    before = read_back_batches(local_store)
    assert any(b.count > 1 for b in before[1]) and {b.epoch for b in before[1]} == {EPOCH}
    result = compact_stream_objects(local_store, target_size=64 * KiB)
    assert result.commit_number is not None and result.to_json()["objects_in"] == 8
    assert read_back_batches(local_store) == before
    assert read_back(local_store) == {s: sorted(v) for s, v in appended.items()}
    _check_objects(local_store, before)
