"""AutoMQ's composite objects and DEFAULT namespace: inspect-object and read follow them to their members.

The composite object is built here from the rules of AutoMQ's CompositeObjectWriter (s3stream,
branch 1.4), with struct only:
    ObjectsBlock: magic 0x52 (1), count (4), count x [objectId (8), blockStartIndex (4), bucketId (2)]
    IndexesBlock: the members' own DataBlockIndex entries (36 bytes each), member after member
    Footer: indexesBlockStartPosition (8), indexBlockLength (4), 28 zero bytes, magic 0x88e241b785f4cff8
Members live at ObjectUtils.genKey(0, "DEFAULT", objectId) = <reversed 8 hex digits>/DEFAULT/<id>.
"""

from __future__ import annotations

import json
import os
import struct

from typer.testing import CliRunner

from walctl.cli import app
from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.pipeline.read import MISSING, ReadFinding, ReadRecord, read_stream
from walctl.store import manifest as mf

COMPOSITE_MAGIC = 0x88E241B785F4CFF8


def gen_key(object_id: int, namespace: str = "DEFAULT") -> str:
    return f"{object_id:08x}"[::-1] + f"/{namespace}/{object_id}"


def composite_bytes(members: list[tuple[int, list[bytes]]], bucket: int = 0) -> bytes:
    """members: (objectId, [36-byte index entries]) in order."""
    objects = struct.pack(">Bi", 0x52, len(members))
    start = 0
    for object_id, entries in members:
        objects += struct.pack(">qih", object_id, start, bucket)
        start += len(entries)
    index = b"".join(e for _, entries in members for e in entries)
    footer = struct.pack(">qi", len(objects), len(index)) + bytes(28) + struct.pack(">Q", COMPOSITE_MAGIC)
    return objects + index + footer


def payload(stream: int, base: int) -> bytes:
    return f"amq-{stream}-{base}-".encode() * (3 + base % 7)


def automq_store(local_store, member_ids=(11, 12, 13), per_member=5, stream=9):
    """Member objects (AutoMQ footer version 0, several blocks each) and a composite object 20 over them."""
    appended, members, base = [], [], 0
    for oid in member_ids:
        batches = [StreamRecordBatch(stream, 0, base + i, 1, payload(stream, base + i)) for i in range(per_member)]
        base += per_member
        built = obj.build_object([(stream, batches)], block_size=150, version=obj.VERSION_AUTOMQ)
        local_store.put(gen_key(oid), built.data)
        members.append((oid, [e.encode() for e in built.entries]))
        appended += [b.payload for b in batches]
    comp = composite_bytes(members)
    local_store.put(gen_key(20), comp)
    return appended, comp


def invoke(*args):
    r = CliRunner().invoke(app, [*map(str, args)])
    assert "Traceback" not in r.stderr
    return r


def test_inspect_names_the_members_and_reads_through_them(local_store):
    appended, _ = automq_store(local_store)
    r = invoke("inspect-object", 20, "--store", local_store.root, "--json", "--records", "--payload", "hex", "--deep")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    footer = lines[0]
    assert footer["kind"] == "composite" and footer["key"] == gen_key(20)  # found in AutoMQ's DEFAULT namespace
    assert [m["object_id"] for m in footer["members"]] == [11, 12, 13]
    assert [m["key"] for m in footer["members"]] == [gen_key(11), gen_key(12), gen_key(13)]
    recs = [x for x in lines if x["type"] == "record"]
    assert [bytes.fromhex(x["payload"]) for x in recs] == appended
    assert lines[-1]["verdict"] == "ok"
    # a local file path inside the store tree finds the members too
    r = invoke("inspect-object", os.path.join(local_store.root, gen_key(20)), "--deep")
    assert r.exit_code == 0 and "VERDICT: OK" in r.stdout and "composite" in r.stderr
    # another namespace has no such object
    assert invoke("inspect-object", 20, "--store", local_store.root, "--namespace", "other").exit_code == 4


def test_deep_finds_a_damaged_member_block(local_store):
    automq_store(local_store)
    path = os.path.join(local_store.root, gen_key(12))
    data = bytearray(open(path, "rb").read())
    data[0] = 0x00  # the first block's magic
    with open(path, "wb") as f:
        f.write(data)
    r = invoke("inspect-object", 20, "--store", local_store.root, "--deep", "--json")
    assert r.exit_code == 3
    problems = [json.loads(x) for x in r.stdout.splitlines() if '"problem"' in x]
    assert problems and "member object 12" in problems[0]["message"] and problems[0]["start_offset"] == 5


def test_read_follows_a_composite_object_in_the_manifest(local_store):
    appended, comp = automq_store(local_store)

    def add(m):
        m.objects.append(mf.LiveObject(20, gen_key(20), "SO", len(comp), [mf.ObjectRange(9, 0, 15, 0)], order_id=20,
                                       data_time=0))
        m.streams[9] = mf.StreamSpan(0, 15)

    mf.commit(local_store, add, command="test: an AutoMQ composite object")
    events, s = read_stream(local_store, 9)
    assert [e.batch.payload for e in events if isinstance(e, ReadRecord)] == appended
    assert [e.key for e in events if isinstance(e, ReadRecord)][::5] == [gen_key(11), gen_key(12), gen_key(13)]
    assert s.gets == 1 + 1 + 3 and s.block_gets == 3  # manifest, composite (whole, one GET), a run per member
    events, _ = read_stream(local_store, 9, from_offset=7, limit=2)
    assert [e.batch.base_offset for e in events] == [7, 8]
    os.unlink(os.path.join(local_store.root, gen_key(13)))
    events, _ = read_stream(local_store, 9)
    missing = [e for e in events if isinstance(e, ReadFinding)]
    assert [(f.kind, f.start_offset, f.end_offset, f.key) for f in missing] == [(MISSING, 10, 15, gen_key(13))]
