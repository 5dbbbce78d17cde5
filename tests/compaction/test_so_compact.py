"""SO compaction by server-side copy: local store (copy_file_range) and S3 over HTTP (UploadPartCopy)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walctl.compaction.so import DEFAULT_SO_TARGET_SIZE, compact_stream_objects, plan_groups
from walctl.errors import CorruptionError
from walctl.format import object as obj
from walctl.format.crc import crc32c, crc32c_combine
from walctl.store import manifest as mf
from walctl.store.base import CopySource
from walctl.store.gc import gc
from walctl.store.multipart import plan_compose_parts

from storehelpers import live_keys_only, put_objects, read_back, so_count

KiB, MiB = 1 << 10, 1 << 20
LATER = time.time() + 2 * mf.PREPARE_TTL_S


def test_crc32c_combine_matches_a_crc_of_the_whole():
    for a, b in ((b"", b""), (b"abc", b""), (b"", b"xyz"), (os.urandom(1000), os.urandom(4097))):
        assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)


def test_plan_groups_follows_automq_group0():
    def so(oid, sid, start, end, size):
        return mf.LiveObject(oid, f"k{oid}", "SO", size, [mf.ObjectRange(sid, start, end, size)])

    doc = mf.Manifest(streams={1: mf.StreamSpan(10, 100), 2: mf.StreamSpan(0, 9)},
                      objects=[so(1, 1, 0, 10, 5), so(2, 1, 10, 20, 5), so(3, 1, 20, 30, 5), so(4, 1, 30, 40, 5),
                               so(5, 1, 50, 60, 5), so(6, 1, 60, 70, 5), so(7, 2, 0, 9, 5), so(8, 3, 0, 5, 5)])
    plan = plan_groups(doc, 10)
    # 1 expired (end 10 <= start 10); [2,3], [4] alone (size), gap before 5: [5,6]; 7 alone; 8 deleted
    assert [[o.id for o in g] for g in plan.groups] == [[2, 3], [5, 6]]
    assert [(o.id, why) for o, why in plan.expired] == [(1, "below stream start"), (8, "stream deleted")]


def test_compose_parts_copy_every_part_of_5_mib_or_more():
    M = 5 * MiB
    pieces = [CopySource("a", 0, 8 * MiB), CopySource("b", 0, 3 * MiB), CopySource("c", 0, 8 * MiB),
              CopySource("d", 0, 6 * MiB), b"tail"]
    parts = plan_compose_parts(pieces)
    assert parts[0] == CopySource("a", 0, 8 * MiB)
    assert parts[1] == [CopySource("b", 0, 3 * MiB), CopySource("c", 0, 2 * MiB)]  # topped up to 5 MiB
    assert parts[2] == CopySource("c", 2 * MiB, 8 * MiB)
    assert parts[3] == CopySource("d", 0, 6 * MiB)
    assert parts[4] == [b"tail"]
    assert all(isinstance(p, CopySource) and p.size >= M or sum(
        x.size if isinstance(x, CopySource) else len(x) for x in p) >= M for p in parts[:-1])


def test_compose_parts_top_up_from_the_previous_range_too():
    parts = plan_compose_parts([CopySource("a", 0, 8 * MiB), CopySource("b", 0, 1 * MiB),
                                CopySource("c", 0, 6 * MiB), b"tail"])
    # b needs 4 MiB more: c can spare 1 MiB (it stays >= 5 MiB), a the other 3
    assert parts == [CopySource("a", 0, 5 * MiB),
                     [CopySource("a", 5 * MiB, 8 * MiB), CopySource("b", 0, 1 * MiB), CopySource("c", 0, 1 * MiB)],
                     CopySource("c", 1 * MiB, 6 * MiB), [b"tail"]]


@given(st.lists(st.one_of(st.integers(1, 12 * MiB), st.binary(min_size=1, max_size=64)), max_size=12))
@settings(max_examples=200, deadline=None)
def test_compose_parts_keep_order_and_every_part_but_the_last_is_big_enough(spec):
    pieces = [CopySource(f"k{i}", 100, 100 + x) if isinstance(x, int) else x for i, x in enumerate(spec)]
    parts = plan_compose_parts(pieces)

    def size(part):
        items = [part] if isinstance(part, CopySource) else part
        return sum(i.size if isinstance(i, CopySource) else len(i) for i in items)

    def bytes_of(items):  # the byte sequence, with copies as (key, position) ranges merged
        out = []
        for i in items:
            if isinstance(i, CopySource):
                if out and out[-1][0] == i.key and out[-1][2] == i.start:
                    out[-1] = (i.key, out[-1][1], i.end)
                else:
                    out.append((i.key, i.start, i.end))
            elif out and out[-1][0] == "bytes":
                out[-1] = ("bytes", out[-1][1] + i, None)
            else:
                out.append(("bytes", i, None))
        return out

    flat_parts = [i for p in parts for i in ([p] if isinstance(p, CopySource) else p)]
    assert bytes_of(flat_parts) == bytes_of(pieces)
    assert all(size(p) >= 5 * MiB for p in parts[:-1])
    assert all(p.size >= 5 * MiB for p in parts if isinstance(p, CopySource))


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_so_compaction_of_ten_small_sos_is_byte_identical(request, backend):
    store = request.getfixturevalue(f"{backend}_store")
    appended = put_objects(store, [[(1, 4, 3000)] for _ in range(12)] + [[(2, 2, 500)]])
    before = read_back(store)
    total = sum(o.size for o in mf.load_latest(store).objects if o.ranges[0].stream_id == 1)
    target = 40 * KiB
    result = compact_stream_objects(store, target_size=target)
    assert result.commit_number is not None
    assert read_back(store) == before == {s: sorted(v) for s, v in appended.items()}
    assert so_count(store, 1) <= math.ceil(total / target)
    assert so_count(store, 2) == 1
    for o in mf.load_latest(store).objects:
        data = store.read_all(o.key)
        assert obj.verify_object(data) == [], o.key  # both footer checksums right
    out = result.to_json()
    data = sum(g["data_bytes"] for g in out["groups"])
    assert out["objects_in"] == 12
    # local: all copied in the kernel; S3: objects below 5 MiB cannot be copied parts, so they are re-put
    assert out["bytes_copied"] == (data if backend == "local" else 0)
    gc(store, grace_s=0, now=LATER)
    assert live_keys_only(store) and read_back(store) == before


@pytest.mark.slow  # ~4 s: 66 MiB through moto
def test_s3_copies_every_part_of_5_mib_and_gets_none_of_those_bytes(faulty_s3):
    store = faulty_s3.store
    # 10 SOs of stream 1: most above 5 MiB, some below (those must be read and re-put).
    sizes_mib = [6, 6, 6, 1, 12, 6, 6, 2, 12, 6]
    put_objects(store, [[(1, 2, s * MiB // 2)] for s in sizes_mib], block_size=1 * MiB)
    before = read_back(store)
    doc = mf.load_latest(store)
    keys = {o.key for o in doc.objects}
    data_bytes = sum(o.ranges[0].bytes for o in doc.objects)
    faulty_s3.proxy.clear()
    result = compact_stream_objects(store, target_size=DEFAULT_SO_TARGET_SIZE)
    assert so_count(store, 1) == 1 and read_back(store) == before
    copies = [e for e in faulty_s3.proxy.seen("PUT") if "x-amz-copy-source" in e.headers]
    uploads = [e for e in faulty_s3.proxy.seen("PUT", query="partNumber") if "x-amz-copy-source" not in e.headers]
    gets = [e for e in faulty_s3.proxy.seen("GET") if any(e.path.endswith(k) for k in keys)]

    sizes = {o.key.rsplit("/", 1)[-1]: o.size for o in doc.objects}

    def span(header, size=None):
        a, b = header.split("=")[1].split("-")
        return (size - int(b), size) if a == "" else (int(a), int(b) + 1)  # "bytes=-N": the last N

    copied = {}
    for e in copies:
        src = e.headers["x-amz-copy-source"]
        a, b = span(e.headers["x-amz-copy-source-range"])
        assert b - a >= 5 * MiB
        copied.setdefault(src.rsplit("/", 1)[-1], []).append((a, b))
    # every source object of >= 5 MiB of data was copied, not read
    assert len(copies) >= 8 and all(u.body_bytes < 11 * MiB for u in uploads)
    read_bytes = 0
    for e in gets:
        if "range" not in e.headers:
            continue
        a, b = span(e.headers["range"], sizes[e.path.rsplit("/", 1)[-1]])
        read_bytes += b - a
        for ca, cb in copied.get(e.path.rsplit("/", 1)[-1], []):
            assert b <= ca or a >= cb, "a GET read bytes that were copied server-side"
    out = result.to_json()
    assert out["through_read_bytes"] == out["planned_get_bytes"]  # the plan said what would pass through
    index_bytes = sum(o.size - o.ranges[0].bytes for o in doc.objects)
    assert read_bytes == out["through_read_bytes"] + index_bytes  # indexes and footers read exactly
    # only the two small SOs pass through us (laid out last, they join the index and footer
    # in the last part), re-put with the new index and footer
    small = sum(o.ranges[0].bytes for o in doc.objects if o.ranges[0].bytes < 5 * MiB)
    assert out["through_read_bytes"] == small
    assert out["through_written_bytes"] == out["through_read_bytes"] + out["output_bytes"] - out["data_bytes"]
    assert out["bytes_copied"] == data_bytes - out["through_read_bytes"]


def test_small_sources_laid_out_last_still_read_back_and_compact_again(local_store):
    put_objects(local_store, [[(1, 2, 3 * MiB)], [(1, 1, 1 * MiB)], [(1, 2, 3 * MiB)]], block_size=1 * MiB)
    compact_stream_objects(local_store, target_size=1 << 30)
    (only,) = mf.load_latest(local_store).objects
    data = local_store.read_all(only.key)
    _, entries = obj.parse_tail(data, len(data))
    positions = [e.block_position for e in entries]
    assert positions != sorted(positions)  # the 1 MiB source's block lies after the others
    assert obj.verify_object(data) == []
    put_objects(local_store, [[(1, 1, 2000)], [(1, 1, 3000)]])
    before = read_back(local_store)
    compact_stream_objects(local_store, target_size=1 << 30)  # a reordered SO is a valid source
    assert so_count(local_store, 1) == 1 and read_back(local_store) == before
    (only,) = mf.load_latest(local_store).objects
    assert obj.verify_object(local_store.read_all(only.key)) == []


def test_automq_sources_are_read_for_the_footer_crc(local_store):
    put_objects(local_store, [[(1, 3, 1000)] for _ in range(3)], version=obj.VERSION_AUTOMQ)
    before = read_back(local_store)
    result = compact_stream_objects(local_store, target_size=1 * MiB)
    out = result.to_json()
    assert out["crc_read_bytes"] == out["data_bytes"] > 0  # said, and only for that reason
    assert read_back(local_store) == before
    only = mf.load_latest(local_store).objects[0]
    assert obj.verify_object(local_store.read_all(only.key)) == []


def test_damaged_index_position_refuses_and_commits_nothing(local_store):
    put_objects(local_store, [[(1, 2, 1000)] for _ in range(3)])
    doc = mf.load_latest(local_store)
    victim = doc.objects[1]
    data = bytearray(local_store.read_all(victim.key))
    footer, entries = obj.parse_tail(bytes(data), len(data))
    bad = obj.IndexEntry(entries[0].stream_id, entries[0].start_offset, entries[0].end_offset_delta,
                         entries[0].record_count, entries[0].block_position + 1, entries[0].block_size - 1)
    index = bad.encode() + b"".join(e.encode() for e in entries[1:])
    start = footer.index_start_position
    data[start:start + len(index)] = index
    data[-48:] = obj.Footer(start, len(index), index_crc=crc32c(index), data_crc=footer.data_crc).encode()
    local_store.put(victim.key, bytes(data))
    with pytest.raises(CorruptionError):
        compact_stream_objects(local_store, target_size=1 * MiB)
    assert mf.load_latest(local_store).objects == doc.objects


def test_dry_run_shows_the_budget_and_writes_nothing(local_store):
    put_objects(local_store, [[(1, 2, 4000)] for _ in range(4)])
    doc = mf.load_latest(local_store)
    listing = local_store.list()
    out = compact_stream_objects(local_store, target_size=1 * MiB, dry_run=True,
                                 write_rate_bps=1000.0).to_json()
    assert out["dry_run"] and out["commit_number"] is None and len(out["groups"]) == 1
    assert out["expected_seconds"] == round(out["output_bytes"] / 1000.0, 3)
    assert local_store.list() == listing and mf.load_latest(local_store) == doc


def test_write_rate_paces_the_run(local_store):
    put_objects(local_store, [[(1, 1, 20000)] for _ in range(4)])
    started = time.monotonic()
    out = compact_stream_objects(local_store, target_size=1 * MiB, write_rate_bps=80000.0).to_json()
    elapsed = time.monotonic() - started
    assert out["output_bytes"] / 80000.0 <= elapsed + 0.05  # ~1 s of copying at 80 kB/s


@pytest.mark.parametrize("point", ["so-compact-after-prepare", "so-compact-after-object", "so-compact-before-commit"])
def test_kill_before_commit_leaves_the_store_plus_garbage(tmp_path, point):
    from walctl.store import open_store

    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    put_objects(store, [[(1, 2, 3000)] for _ in range(6)])
    before, doc = read_back(store), mf.load_latest(store)
    env = dict(os.environ, WALCTL_FAILPOINT=point)
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--level", "so", "--so-target-size",
                           "16KiB", "--store", str(store_dir)], capture_output=True, env=env, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    after = mf.load_latest(store)
    assert after.objects == doc.objects and read_back(store) == before
    gc(store, grace_s=0, now=LATER)
    assert live_keys_only(store) and read_back(store) == before
    assert mf.load_latest(store).prepared == []


def test_kill_during_the_multipart_copy_on_s3_leaves_an_upload_that_gc_aborts(s3_store, s3_server):
    put_objects(s3_store, [[(1, 1, 6 * MiB)], [(1, 1, 6 * MiB)]], block_size=8 * MiB)
    before, doc = read_back(s3_store), mf.load_latest(s3_store)
    env = dict(os.environ, WALCTL_FAILPOINT="compose-after-part")
    proc = subprocess.run([sys.executable, "-m", "walctl", "compact", "--level", "so", "--store",
                           f"s3://{s3_store.bucket}/{s3_store.prefix}", "--endpoint-url", s3_server],
                          capture_output=True, env=env, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert mf.load_latest(s3_store).objects == doc.objects and read_back(s3_store) == before
    assert len(s3_store.open_multipart_uploads()) == 1  # the killed copy's parts
    result = gc(s3_store, grace_s=0, now=LATER)
    assert len(result.aborted_uploads) == 1 and s3_store.open_multipart_uploads() == []
    assert live_keys_only(s3_store) and read_back(s3_store) == before


def test_compose_survives_s3_errors_and_a_lost_complete(faulty_s3):
    store = faulty_s3.store
    put_objects(store, [[(1, 1, 6 * MiB)], [(1, 1, 6 * MiB)], [(1, 1, 1000)]], block_size=8 * MiB)
    before = read_back(store)
    failed = faulty_s3.proxy.fail(1, status=503, method="PUT", query="partNumber")  # a part, retried
    lost = faulty_s3.proxy.add("drop_after", method="POST", query="uploadId")  # complete lands, answer lost
    compact_stream_objects(store, target_size=1 << 30)
    assert failed.hits == 1 and lost.hits == 1
    assert so_count(store, 1) == 1 and read_back(store) == before
    assert store.open_multipart_uploads() == []
