"""The store's metadata (docs/FORMATS.md 5): immutable, numbered manifest snapshots.

Commit N+1 is created only if absent (S3 If-None-Match: *, or create-exclusive +
fsync locally), so two writers can never both commit N+1: the loser re-reads the
newest manifest, re-applies its change (which re-checks its preconditions), and
tries N+2. Object ids are reserved by one commit (prepare) before their objects
are written, and made live by a later one, so a crash leaves only prepared ids
(garbage for gc), never a manifest pointing at a missing object.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from walctl.errors import CorruptionError, NotFoundError, RefusedError
from walctl.store.base import Store

MANIFEST_DIR = "manifest"
MANIFEST_VERSION = 1
NUMBER_DIGITS = 20  # zero-padded so that listing order is commit order
DEFAULT_NAMESPACE = "default"
PREPARE_TTL_S = 3600  # a prepared id older than this is garbage (its upload died or gave up)
MAX_COMMIT_ATTEMPTS = 20


def manifest_key(number: int) -> str:
    return f"{MANIFEST_DIR}/{number:0{NUMBER_DIGITS}d}.json"


def object_key(object_id: int, namespace: str = DEFAULT_NAMESPACE) -> str:
    """``<reverse of the 8+ hex digits of the id>/<namespace>/<id>``: reversed hex spreads S3 partitions."""
    return f"{f'{object_id:08x}'[::-1]}/{namespace}/{object_id}"


def empty_manifest() -> "Manifest":
    """The state before the first commit (number 0 is never written)."""
    return Manifest()


@dataclass
class StreamSpan:
    """A stream's offsets in the store: [start, end). ``start`` rises with retention, ``end`` with uploads."""

    start: int
    end: int

    def to_json(self) -> dict:
        return {"start": self.start, "end": self.end}


# The document's keys (FORMATS.md 5), in the order of the dataclass below. Entries of ``objects``
# ({id, key, kind, size, order_id, data_time, ranges: [{stream_id, start, end, bytes}]}),
# ``prepared`` ({id, key, prepared_at, expires_at}), ``deleting`` ({id, key, marked_at}),
# ``wal_uploads`` values (upload marks) and ``stream_gaps`` stay the JSON objects they are on disk.
_KEYS = ("version", "number", "parent", "commit_id", "time", "writer", "next_object_id", "compactor_epoch",
         "streams", "objects", "prepared", "deleting", "wal_uploads")


@dataclass
class Manifest:
    """One manifest snapshot (FORMATS.md 5) and the transitions a commit makes on it.

    ``commit`` hands a copy of the newest one to a change function, which calls the transitions
    (``prepare``, ``make_live``, ``advance``, ``replace``, ``release``, ``forget``, ``fence``,
    ``retain``); each edits this snapshot only. The JSON on disk is ``to_json`` (byte for byte what
    earlier walctl versions wrote and read: same keys, same values, ``stream_gaps`` only when present,
    keys walctl does not know kept as they were).
    """

    version: int = MANIFEST_VERSION
    number: int = 0
    parent: int | None = None
    commit_id: str | None = None
    time: float | None = None
    writer: dict | None = None  # who committed: host, pid, command, argv
    next_object_id: int = 1
    compactor_epoch: int = 0
    streams: dict[int, StreamSpan] = field(default_factory=dict)
    objects: list[dict] = field(default_factory=list)  # live objects
    prepared: list[dict] = field(default_factory=list)  # reserved ids, with an expiry
    deleting: list[dict] = field(default_factory=list)  # replaced objects, deleted by gc after a grace
    wal_uploads: dict[str, dict] = field(default_factory=dict)  # WAL node id -> its last uploaded record
    stream_gaps: list[dict] | None = None  # absent in older manifests: None writes no key
    extra: dict = field(default_factory=dict)  # keys this version does not know, written back unchanged

    # -- the document ---------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: dict) -> "Manifest":
        known = {k: doc[k] for k in _KEYS}
        known["streams"] = {int(sid): StreamSpan(v["start"], v["end"]) for sid, v in doc["streams"].items()}
        extra = {k: v for k, v in doc.items() if k not in _KEYS and k != "stream_gaps"}
        return cls(**known, stream_gaps=doc.get("stream_gaps"), extra=extra)

    def to_json(self) -> dict:
        doc = {k: getattr(self, k) for k in _KEYS}
        doc["streams"] = {str(sid): span.to_json() for sid, span in self.streams.items()}
        if self.stream_gaps is not None:
            doc["stream_gaps"] = self.stream_gaps
        doc.update(self.extra)
        return doc

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), indent=1, sort_keys=True).encode()

    # -- what it says -----------------------------------------------------------------------------

    def stream(self, stream_id: int) -> StreamSpan | None:
        return self.streams.get(stream_id)

    def upload_mark(self, node_id: int | str) -> dict | None:
        """The last record of WAL ``node_id`` that is in the store ({offset, stream_id, base_offset,
        body_crc}), or None: nothing of it uploaded yet."""
        return self.wal_uploads.get(str(node_id))

    def live(self, kind: str | None = None) -> list[dict]:
        """The live objects (of ``kind`` "SO" or "SSO" only, when given)."""
        return list(self.objects) if kind is None else [o for o in self.objects if o["kind"] == kind]

    def live_ids(self) -> set[int]:
        return {o["id"] for o in self.objects}

    def prepared_ids(self) -> set[int]:
        return {p["id"] for p in self.prepared}

    def referenced_ids(self) -> set[int]:
        """Every id a commit may still need: live, prepared or awaiting deletion."""
        return self.live_ids() | self.prepared_ids() | {d["id"] for d in self.deleting}

    def entry(self, object_id: int) -> dict | None:
        """The live, prepared or deleting entry with this id."""
        return next((e for e in (*self.objects, *self.prepared, *self.deleting) if e["id"] == object_id), None)

    def names(self, key: str) -> bool:
        """A live or replaced object has this key (so it must be a valid object)."""
        return any(e["key"] == key for e in (*self.objects, *self.deleting))

    def ranges_of(self, stream_id: int) -> list[tuple[int, int, dict]]:
        """(start, end, object) of every live object's range of ``stream_id``, in manifest order."""
        return [(r["start"], r["end"], o) for o in self.objects for r in o["ranges"] if r["stream_id"] == stream_id]

    def holds(self, stream_id: int, base_offset: int, end_offset: int) -> bool:
        """The store holds these offsets of the stream: a live object's range holds them, or
        retention dropped them (below the stream's start)."""
        span = self.streams.get(stream_id)
        if span is None:
            return False
        if end_offset <= span.start:
            return True
        return any(start <= base_offset and end_offset <= end for start, end, _ in self.ranges_of(stream_id))

    # -- transitions (each edits this snapshot; ``commit`` writes it) ----------------------------

    def prepare(self, count: int, namespace: str, *, now: float | None = None) -> list[dict]:
        """Reserve ``count`` object ids: returns their prepared entries ({id, key, prepared_at, expires_at})."""
        now = time.time() if now is None else now
        first = self.next_object_id
        self.next_object_id = first + count
        entries = [{"id": i, "key": object_key(i, namespace), "prepared_at": now, "expires_at": now + PREPARE_TTL_S}
                   for i in range(first, first + count)]
        self.prepared.extend(entries)
        return entries

    def release(self, ids) -> None:
        """Give prepared ids up (an upload rolled back, or the objects went live)."""
        ids = set(ids)
        self.prepared = [p for p in self.prepared if p["id"] not in ids]

    def make_live(self, made: list[dict]) -> None:
        """Objects written for prepared ids become live; their streams' spans grow to hold them."""
        self.release(o["id"] for o in made)
        self.objects.extend(made)
        for obj in made:
            for r in obj["ranges"]:
                span = self.streams.setdefault(r["stream_id"], StreamSpan(r["start"], r["end"]))
                span.start = min(span.start, r["start"])
                span.end = max(span.end, r["end"])

    def advance(self, node_id: int | str, mark: dict) -> None:
        """WAL ``node_id`` is uploaded up to the record ``mark`` names."""
        self.wal_uploads[str(node_id)] = mark

    def add_gaps(self, gaps: list[dict]) -> None:
        """Stream gaps an upload carried forward (why those streams have holes)."""
        if self.stream_gaps is None:
            self.stream_gaps = []
        self.stream_gaps.extend(gaps)

    def fence(self) -> int:
        """A compactor starts: older ones can no longer commit. Returns the new epoch."""
        self.compactor_epoch += 1
        return self.compactor_epoch

    def replace(self, input_ids, outputs: list[dict], *, reserved, now: float) -> None:
        """Compaction: the inputs leave the live set (to ``deleting``, for gc after a grace), the
        outputs (entries for ids it prepared) become live, and every id it ``reserved`` stops
        being prepared."""
        input_ids = set(input_ids)
        self.deleting.extend({"id": o["id"], "key": o["key"], "marked_at": now}
                             for o in self.objects if o["id"] in input_ids)
        self.objects = [o for o in self.objects if o["id"] not in input_ids]
        self.release(reserved)
        self.objects.extend(outputs)

    def retain(self, stream_id: int, start: int) -> None:
        """Retention: the stream's offsets below ``start`` are dropped (its start never moves back)."""
        span = self.streams.get(stream_id)
        if span is not None:
            span.start = max(span.start, start)

    def forget(self, prepared_ids, deleting_ids) -> None:
        """gc: expired prepared ids and replaced objects past their grace leave the manifest."""
        prepared_ids, deleting_ids = set(prepared_ids), set(deleting_ids)
        self.prepared = [p for p in self.prepared if p["id"] not in prepared_ids]
        self.deleting = [d for d in self.deleting if d["id"] not in deleting_ids]


@dataclass(frozen=True)
class Committed:
    number: int
    manifest: Manifest
    attempts: int


def parse_manifest(raw: bytes, key: str) -> Manifest:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CorruptionError(f"manifest is not valid JSON: {exc}", where=key) from exc
    if not isinstance(doc, dict) or any(k not in doc for k in _KEYS):
        raise CorruptionError("manifest lacks required fields", where=key,
                              hint="not written by walctl, or damaged")
    if doc["version"] != MANIFEST_VERSION:
        raise CorruptionError(f"manifest version {doc['version']} is not {MANIFEST_VERSION}", where=key)
    try:
        return Manifest.from_json(doc)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CorruptionError(f"manifest has a malformed field: {exc}", where=key,
                              hint="not written by walctl, or damaged") from exc


def manifest_numbers(store: Store) -> list[int]:
    numbers = []
    for info in store.list(MANIFEST_DIR + "/"):
        name = info.key.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            numbers.append(int(name[:-5]))
    return sorted(numbers)


def load_latest(store: Store, *, required: bool = False) -> Manifest:
    """The newest manifest, or the empty state when the store has none yet.

    Raises:
        NotFoundError: ``required`` (a command that only reads) and the store has no manifest.
    """
    numbers = manifest_numbers(store)
    if not numbers:
        if required:
            raise NotFoundError("no manifest: not a walctl store, or nothing uploaded yet",
                                where=f"{getattr(store, 'url', store)}/{MANIFEST_DIR}/",
                                hint="check --store; the first 'walctl upload' creates the store")
        return empty_manifest()
    key = manifest_key(numbers[-1])
    doc = parse_manifest(store.read_all(key), key)
    if doc.number != numbers[-1]:
        raise CorruptionError(f"manifest says number {doc.number}", where=key)
    return doc


def load(store: Store, number: int) -> Manifest:
    key = manifest_key(number)
    return parse_manifest(store.read_all(key), key)


def commit(store: Store, change: Callable[[Manifest], Manifest | None], *, command: str) -> Committed:
    """Apply ``change`` to the newest manifest and create the next one, only if absent.

    ``change`` gets a deep copy of the newest manifest, edits it through its transitions (or
    returns a new one), and raises RefusedError when its preconditions no longer hold; it is
    re-run after every lost race, against the manifest that won.
    """
    from walctl.store.base import PreconditionFailed

    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        base = load_latest(store)
        doc = copy.deepcopy(base)
        result = change(doc)
        if result is not None:
            doc = result
        doc.number = base.number + 1
        doc.parent = base.number or None
        doc.commit_id = str(uuid.uuid4())
        doc.time = time.time()
        # The host name as socket.gethostname() gives it (glibc's gethostname is uname's nodename
        # on Linux), without importing socket (~2 ms of a short upload's start-up).
        doc.writer = {"host": os.uname().nodename, "pid": os.getpid(), "command": command, "argv": _safe_argv()}
        try:
            store.put(manifest_key(doc.number), doc.encode(), if_absent=True)
        except PreconditionFailed:
            time.sleep(min(0.05 * attempt, 0.5))  # someone else committed first: re-read, re-check
            continue
        return Committed(doc.number, doc, attempt)
    raise RefusedError(f"could not commit after {MAX_COMMIT_ATTEMPTS} attempts: the store is too busy",
                       where=store.url, hint="retry later")


_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "key=", "access-key", "access_key")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def _safe_argv(argv: list[str] | None = None) -> list[str]:
    """The command line, without anything that looks like a secret: values of secret-named
    flags (``--secret-key X`` and ``--secret-key=X``) and user:password@ in URLs."""
    out: list[str] = []
    redact_next = False
    for arg in (sys.argv[1:] if argv is None else argv):
        lowered = arg.lower()
        if redact_next:
            out.append("<redacted>")
            redact_next = False
            continue
        if any(w in lowered for w in _SECRET_WORDS):
            if arg.startswith("-") and "=" not in arg:
                out.append(arg)
                redact_next = True  # the value follows as the next argument
            else:
                out.append(arg.split("=", 1)[0] + "=<redacted>" if "=" in arg else "<redacted>")
            continue
        out.append(_USERINFO.sub("<redacted>@", arg))
    return out
