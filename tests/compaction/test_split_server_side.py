"""Force split copies every range of >= 5 MiB server-side, its crc the one the manifest recorded at
upload (ObjectRange ``crc``): only the ranges under S3's part minimum pass through walctl. A
recorded crc that disagrees with the footer, or with the bytes read, stops the split; bytes damaged
at rest after the upload end up in an SO whose footer disagrees with them, which check reports."""

from __future__ import annotations

import os

import pytest

from walctl.compaction.split import force_split
from walctl.errors import CorruptionError
from walctl.format import object as obj
from walctl.format.crc import crc32c
from walctl.pipeline.check import check_store
from walctl.pipeline.upload import upload
from walctl.store import manifest as mf

from storehelpers import append, make_wal, read_back

KiB, MiB = 1 << 10, 1 << 20


def _uploaded_sso(tmp_path, store, plan):
    """One SSO holding ``plan`` ({stream: (records, record bytes)}), through upload."""
    wal = make_wal(tmp_path, capacity=64 * MiB)
    append(wal, plan)
    result = upload(wal, store, split_size=1 << 40)  # every stream in the one SSO
    assert [o["kind"] for o in result.objects] == ["SSO"]
    return mf.load_latest(store).objects[0]


def test_upload_records_each_ranges_crc(tmp_path, local_store):
    sso = _uploaded_sso(tmp_path, local_store, {1: (20, 3000), 2: (3, 100), 3: (7, 5000)})
    data = local_store.read_all(sso.key)
    footer, entries = obj.parse_tail(data, len(data))
    position = 0
    for r in sso.ranges:  # streams lie back to back in the SSO, in stream order
        assert r.crc == crc32c(data[position:position + r.bytes]), r
        position += r.bytes
    assert position == footer.index_start_position


def test_force_split_on_s3_copies_big_ranges_without_reading_them(tmp_path, faulty_s3):
    store = faulty_s3.store
    # streams 1 and 3: 6 MiB each (copied); stream 2: 100 KiB (under the part minimum: read, re-put)
    sso = _uploaded_sso(tmp_path, store, {1: (24, 256 * KiB), 2: (4, 25 * KiB), 3: (24, 256 * KiB)})
    before = read_back(store)
    faulty_s3.proxy.clear()
    read0, written0 = store.stats.bytes_read, store.stats.bytes_written
    out = force_split(store).to_json()
    through = store.stats.bytes_read - read0 + store.stats.bytes_written - written0
    split = sum(g["data_bytes"] for g in out["outputs"])
    assert [g["crc"] for g in out["outputs"]] == ["manifest", "manifest", "manifest"]
    assert split == sum(r.bytes for r in sso.ranges) > 12 * MiB
    assert through <= split // 10, (through, split)  # main read both 6 MiB ranges but the derived one
    assert out["crc_read_bytes"] == next(g["data_bytes"] for g in out["outputs"] if g["stream_id"] == 2)
    copies = [e for e in faulty_s3.proxy.seen("PUT") if "x-amz-copy-source" in e.headers]
    assert len(copies) == 2
    assert out["bytes_copied"] == sum(g["data_bytes"] for g in out["outputs"] if g["stream_id"] != 2)
    assert read_back(store) == before
    doc = mf.load_latest(store)
    assert [o.kind for o in doc.objects] == ["SO"] * 3
    for o in doc.objects:  # each new SO's range carries its crc too, for the next split or check
        assert o.ranges[0].crc is not None
        assert obj.verify_object(store.read_all(o.key)) == [], o.key
    assert check_store(store, read_data=True).problems == []


def test_a_recorded_crc_that_disagrees_with_the_footer_stops_the_split(tmp_path, local_store):
    _uploaded_sso(tmp_path, local_store, {1: (24, 256 * KiB), 2: (24, 256 * KiB)})
    before = mf.load_latest(local_store)

    def lie(m):
        m.objects[0].ranges[1].crc ^= 1

    mf.commit(local_store, lie, command="test: a wrong recorded crc")
    with pytest.raises(CorruptionError, match="do not combine to its footer's data crc"):
        force_split(local_store)
    after = mf.load_latest(local_store)
    assert [o.id for o in after.objects] == [o.id for o in before.objects]  # nothing split
    # check reports it as well, without reading the data
    found = check_store(local_store).problems
    assert [p.kind for p in found] == ["footer"] and "recorded" in found[0].detail


def test_a_small_range_whose_bytes_disagree_with_its_recorded_crc_stops_the_split(tmp_path, local_store):
    sso = _uploaded_sso(tmp_path, local_store, {1: (4, 25 * KiB), 2: (24, 256 * KiB)})

    def lie(m):  # both the range's crc and (to pass the footer check) the other's shifted: the read one fails
        m.objects[0].ranges[0].crc ^= 1
        m.objects[0].ranges[1].crc ^= _shifted_one(sso.ranges[1].bytes)

    mf.commit(local_store, lie, command="test: a wrong recorded crc")
    with pytest.raises(CorruptionError, match="the manifest recorded"):
        force_split(local_store)


def _shifted_one(length: int) -> int:
    """What flipping bit 0 of crc(A) changes in crc(A + B) for len(B) = ``length``."""
    from walctl.format.crc import crc32c_combine

    return crc32c_combine(1, 0, length) ^ crc32c_combine(0, 0, length)


def test_bytes_damaged_at_rest_are_copied_into_an_so_that_check_reports(tmp_path, local_store):
    sso = _uploaded_sso(tmp_path, local_store, {1: (24, 256 * KiB), 2: (24, 256 * KiB)})
    path = os.path.join(local_store.root, sso.key)
    with open(path, "r+b") as f:  # a byte of stream 1's second block, after the upload
        f.seek(300 * KiB)
        byte = f.read(1)
        f.seek(300 * KiB)
        f.write(bytes([byte[0] ^ 0xFF]))
    out = force_split(local_store).to_json()
    assert [g["crc"] for g in out["outputs"]] == ["manifest", "manifest"]  # nothing read: a copy
    found = check_store(local_store, read_data=True).problems
    damaged = mf.load_latest(local_store).objects[0]
    assert [(p.kind, p.key) for p in found] == [("data", damaged.key)]
    assert obj.verify_object(local_store.read_all(damaged.key)) != []
