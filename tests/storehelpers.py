"""Helpers for store and compaction tests: build WALs, append per stream, read objects back."""

from __future__ import annotations

import time

from walctl.format import object as obj
from walctl.format.batch import StreamRecordBatch
from walctl.store import manifest as mf
from walctl.wal.lifecycle import init_wal, open_writer

KiB, MiB = 1 << 10, 1 << 20


def payload(stream_id: int, base: int, size: int) -> bytes:
    seed = f"s{stream_id}o{base}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def make_wal(tmp_path, name="wal", capacity=16 * MiB, node_id=-1) -> str:
    path = str(tmp_path / name)
    init_wal(path, capacity, node_id=node_id)
    return path


def append(path: str, plan: dict[int, tuple[int, int]], store=None) -> dict[int, list[bytes]]:
    """Append interleaved records: plan = {stream: (count, size)}; returns payloads per stream.

    Stream offsets continue from the WAL, else from the store (as `append --store` does).
    """
    return {sid: [b.payload for b in batches] for sid, batches in append_batches(path, plan, store).items()}


def append_batches(path: str, plan: dict[int, tuple[int, int]], store=None, *, count=1,
                   epoch=0) -> dict[int, list[StreamRecordBatch]]:
    """Like append, with batches shaped as AutoMQ writes them: ``count`` records each (an int, or
    ``count(stream, index)``) and epoch ``epoch``; returns the batches appended per stream."""
    opened = open_writer(path, scan=True)
    writer = opened.writer
    known = mf.load_latest(store).streams if store is not None else {}
    ends = {sid: span.end for sid, span in known.items()}
    ends.update(opened.scan.stream_ends)
    out: dict[int, list[StreamRecordBatch]] = {s: [] for s in plan}
    for i in range(max(c for c, _ in plan.values())):
        for sid, (n, size) in sorted(plan.items()):
            if i < n:
                base = ends.get(sid, 0)
                batch = StreamRecordBatch(sid, epoch, base, count(sid, i) if callable(count) else count,
                                          payload(sid, base, size))
                writer.append(batch.encode())
                ends[sid] = batch.end_offset
                out[sid].append(batch)
    writer.close()
    return out


def read_back(store) -> dict[int, list[tuple[int, bytes]]]:
    """Every batch of every live object, per stream, in offset order, read through the index."""
    return {s: [(b.base_offset, b.payload) for b in v] for s, v in read_back_batches(store).items()}


def read_back_batches(store) -> dict[int, list[StreamRecordBatch]]:
    """Every batch (count, epoch and all) of every live object, per stream, in offset order."""
    doc = mf.load_latest(store)
    streams: dict[int, list[StreamRecordBatch]] = {}
    for o in doc.objects:
        data = store.read_all(o.key)
        footer, entries = obj.parse_tail(data, len(data))
        for entry in entries:
            for batch in obj.iter_blocks(data, entry):
                streams.setdefault(batch.stream_id, []).append(batch)
    return {s: sorted(v, key=lambda b: b.base_offset) for s, v in streams.items()}


def expect(appended: dict[int, list[bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    return {s: list(enumerate(p)) for s, p in appended.items() if p}


def merge(a, b):
    out = {s: list(v) for s, v in a.items()}
    for s, v in b.items():
        out.setdefault(s, []).extend(v)
    return out


def put_objects(store, specs, *, version=obj.VERSION_WALCTL, block_size=256 * KiB, count=1, epoch=0):
    """Commit one object per spec: a spec is [(stream, batches, batch_bytes), ...] (one stream: an SO).

    Offsets continue from the manifest per stream; each batch holds ``count`` records (an int, or
    ``count(stream, index)``) of epoch ``epoch``. Returns (base offset, payload) per stream."""
    doc = mf.load_latest(store)
    ends = {sid: span.end for sid, span in doc.streams.items()}
    out: dict[int, list[tuple[int, bytes]]] = {}
    made = []
    ids = list(range(doc.next_object_id, doc.next_object_id + len(specs)))
    for oid, spec in zip(ids, specs):
        streams = []
        for sid, n, size in spec:
            batches = []
            for i in range(n):
                base = ends.get(sid, 0)
                data = payload(sid, base, size)
                batches.append(StreamRecordBatch(sid, epoch, base, count(sid, i) if callable(count) else count, data))
                out.setdefault(sid, []).append((base, data))
                ends[sid] = batches[-1].end_offset
            streams.append((sid, batches))
        built = obj.build_object(streams, block_size=block_size, version=version)
        key = mf.object_key(oid)
        store.put_large(key, built.data)
        made.append(mf.LiveObject(oid, key, "SO" if len(spec) == 1 else "SSO", len(built.data),
                                  [mf.ObjectRange(s, r.start_offset, r.end_offset, r.size_bytes)
                                   for s, r in sorted(built.ranges.items())],
                                  order_id=oid, data_time=time.time()))

    def add(m):
        m.next_object_id = ids[-1] + 1
        m.objects.extend(made)
        for o in made:
            for r in o.ranges:
                s = m.streams.setdefault(r.stream_id, mf.StreamSpan(r.start, r.end))
                s.end = max(s.end, r.end)

    mf.commit(store, add, command="test put")
    return out


def so_count(store, sid):
    return sum(1 for o in mf.load_latest(store).objects if o.ranges[0].stream_id == sid)


def live_keys_only(store):
    live = {o.key for o in mf.load_latest(store).objects}
    return {i.key for i in store.list() if not i.key.startswith("manifest/")} == live
