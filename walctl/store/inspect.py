"""inspect-object: read an object's footer and index (at most two ranged reads), or verify it all."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from walctl.errors import BadMagicError, NotFoundError, TruncatedError, UsageError, ZeroedError
from walctl.store.base import Store

TAIL_READ_BYTES = 64 << 10  # one read catches the footer and an index of up to ~1800 entries
DEEP_READ_BYTES = 16 << 20  # --deep reads the object in ranged GETs of this size


@dataclass
class InspectResult:
    key: str
    size_bytes: int
    footer: object
    entries: list
    reads: int
    deep: bool = False
    problems: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def resolve(target: str, store_url: str | None, endpoint_url: str | None):
    """(store, key, known) for an object id, a key (full or relative to the store prefix), or a
    local file; ``known``: the store's manifest names it, so it must be a valid object."""
    store, key = _resolve(target, store_url, endpoint_url)
    known = False
    if store_url is not None:
        from walctl.store import manifest as mf

        doc = mf.load_latest(store)
        known = any(e["key"] == key for e in doc["objects"] + doc["deleting"])
    return store, key, known


def _resolve(target: str, store_url: str | None, endpoint_url: str | None):
    from walctl.store import manifest as mf
    from walctl.store import open_store

    if store_url is None:
        if not os.path.exists(target):
            raise (UsageError if target.isdigit() else NotFoundError)(
                "no such file" if not target.isdigit() else "an object id needs --store", where=target)
        path = os.path.abspath(target)
        return open_store(os.path.dirname(path)), os.path.basename(path)
    store = open_store(store_url, endpoint_url=endpoint_url)
    if target.isdigit():
        doc = mf.load_latest(store)
        object_id = int(target)
        for entry in doc["objects"] + doc["prepared"] + doc["deleting"]:
            if entry["id"] == object_id:
                return store, entry["key"]
        return store, mf.object_key(object_id)
    key = target
    if store_url.startswith("s3://"):
        bucket_and_prefix = store_url[len("s3://"):].rstrip("/")
        parts = bucket_and_prefix.split("/", 1)
        prefix = parts[1] + "/" if len(parts) == 2 else ""
        if key.startswith("s3://"):
            key = key[len("s3://"):].split("/", 1)[1] if "/" in key[len("s3://"):] else ""
        if prefix and key.startswith(prefix):
            key = key[len(prefix):]
    return store, key.lstrip("/")


def inspect(store: Store, key: str, *, deep: bool = False, known: bool = False) -> InspectResult:
    """Footer and index (and with ``deep`` every byte) of the object at ``key``.

    Raises:
        NotFoundError: no such object, or not an object of this format (unless ``known``).
        CorruptionError: a failed check; also a bad footer of an object the manifest names.
    """
    from walctl.errors import CorruptionError
    from walctl.format import object as obj

    before = store.stats.get
    tail, size = store.read_tail(key, TAIL_READ_BYTES)
    try:
        footer, entries = obj.parse_tail(tail, size)
    except (BadMagicError, ZeroedError, TruncatedError) as exc:
        if known:  # the manifest says this is one of ours: a bad footer is damage, not "not ours"
            raise CorruptionError(f"live object has a damaged footer ({exc})", where=key,
                                  offset=exc.offset) from exc
        raise NotFoundError(f"not a walctl or AutoMQ object ({exc})", where=key) from exc
    if entries is None:
        index = store.read_range(key, footer.index_start_position,
                                 footer.index_start_position + footer.index_block_length)
        entries = obj.decode_index(index, footer, base_position=footer.index_start_position)
    result = InspectResult(key, size, footer, entries, store.stats.get - before, deep=deep)
    if footer.version == 0:
        result.notes.append("AutoMQ object (footer version 0): it carries no checksums to verify")
    if deep:
        data = bytearray()
        for start in range(0, size, DEEP_READ_BYTES):
            data += store.read_range(key, start, min(size, start + DEEP_READ_BYTES))
        result.problems = obj.verify_object(bytes(data))
        result.reads = store.stats.get - before
    return result


def index_rows(entries) -> list[dict]:
    return [{"type": "index_entry", "stream_id": e.stream_id, "start_offset": e.start_offset,
             "end_offset": e.end_offset, "record_count": e.record_count, "block_position": e.block_position,
             "block_size_bytes": e.block_size} for e in entries]
