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
from typing import Callable, ClassVar

from walctl.errors import CorruptionError, NotFoundError, RefusedError
from walctl.store import manifest_schema as schema
from walctl.store.base import Store

MANIFEST_DIR = "manifest"
MANIFEST_VERSION = 1
NUMBER_DIGITS = 20  # zero-padded so that listing order is commit order
DEFAULT_NAMESPACE = "default"
PREPARE_TTL_S = 3600  # a prepared id older than this is garbage (its upload died or gave up)
MAX_COMMIT_ATTEMPTS = 20
MAX_OBJECT_ID = (1 << 63) - 1  # AutoMQ's object ids are Java longs


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


# -- the entries (FORMATS.md 5) ------------------------------------------------------------------
# Each is a dataclass read from and written back to its JSON object: ``from_json``/``to_json``, the
# keys this version does not know kept in ``extra`` and written back unchanged. An optional key is
# written only when its attribute is not None (an explicit null on disk stays in ``extra``).


class _Entry:
    """What the entries share: the JSON keys (``_KEYS`` required, ``_OPTIONAL``), their attributes
    (``_ATTRS``: where a key is not a Python name), and ``extra``."""

    _KEYS: ClassVar[tuple[str, ...]] = ()
    _OPTIONAL: ClassVar[tuple[str, ...]] = ()
    _ATTRS: ClassVar[dict[str, str]] = {}
    _KEY_SET: ClassVar[frozenset[str]] = frozenset()
    _OPTIONAL_SET: ClassVar[frozenset[str]] = frozenset()
    extra: dict

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._KEY_SET, cls._OPTIONAL_SET = frozenset(cls._KEYS), frozenset(cls._OPTIONAL)

    @classmethod
    def _fields_of(cls, doc: dict) -> dict:
        """The constructor's keyword arguments for the JSON object ``doc`` (a required key missing:
        the constructor's TypeError)."""
        known: dict = {}
        extra: dict = {}
        attrs, keys, optional = cls._ATTRS, cls._KEY_SET, cls._OPTIONAL_SET
        for k, v in doc.items():
            if k in keys or (k in optional and v is not None):
                known[attrs.get(k, k)] = v
            else:
                extra[k] = v
        known["extra"] = extra
        return known

    @classmethod
    def from_json(cls, doc: dict):
        return cls(**cls._fields_of(doc))

    def to_json(self) -> dict:
        out = dict(self.extra)
        for k in self._KEYS:
            out[k] = _json_of(getattr(self, self._ATTRS.get(k, k)))
        for k in self._OPTIONAL:
            value = getattr(self, self._ATTRS.get(k, k))
            if value is not None:
                out[k] = value
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, _Entry):
            return type(self) is type(other) and self.to_json() == other.to_json()
        return NotImplemented

    __hash__ = None  # mutable

    def __deepcopy__(self, memo):
        """Copied field by field (commit deep-copies every manifest: copy's generic path is 3x slower)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.extra = copy.deepcopy(self.extra, memo) if self.extra else {}
        return new


def _json_of(value):
    """A field's JSON value: entries (and lists of them) as their JSON objects."""
    if isinstance(value, list):
        return [v.to_json() if isinstance(v, _Entry) else v for v in value]
    return value.to_json() if isinstance(value, _Entry) else value


@dataclass(eq=False)
class ObjectRange(_Entry):
    """A stream's offsets [start, end) in a live object, and its bytes there (DataBlocks, headers included);
    ``crc``: the crc32c of those bytes, None when the writer did not record it (older manifests)."""

    stream_id: int
    start: int
    end: int
    bytes: int
    crc: int | None = None
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS, _OPTIONAL = schema.RANGE_KEYS, schema.RANGE_OPTIONAL


@dataclass(eq=False)
class LiveObject(_Entry):
    """A live object: its id and key, kind ("SO" or "SSO"), size, the order it sorts in (an SSO made
    by compaction takes its oldest input's), when its data was written, and its streams' ranges."""

    id: int
    key: str
    kind: str
    size: int
    ranges: list[ObjectRange]
    order_id: int | None = None  # every walctl manifest has it (parse_manifest checks); None: not written
    data_time: float | None = None  # likewise
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS, _OPTIONAL = schema.OBJECT_KEYS, schema.OBJECT_OPTIONAL

    @classmethod
    def from_json(cls, doc: dict) -> "LiveObject":
        known = cls._fields_of(doc)
        known["ranges"] = [ObjectRange.from_json(r) for r in known["ranges"]]
        return cls(**known)

    def __deepcopy__(self, memo):
        new = super().__deepcopy__(memo)
        new.ranges = [r.__deepcopy__(memo) for r in self.ranges]
        return new


@dataclass(eq=False)
class PreparedId(_Entry):
    """An object id reserved by a commit (its object may be being written); garbage after ``expires_at``."""

    id: int
    key: str
    prepared_at: float
    expires_at: float
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS = schema.PREPARED_KEYS


@dataclass(eq=False)
class DeletingEntry(_Entry):
    """An object compaction replaced at ``marked_at``: gc deletes it after a grace."""

    id: int
    key: str
    marked_at: float
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS = schema.DELETING_KEYS


@dataclass(eq=False)
class UploadMark(_Entry):
    """The last record of a WAL that is in the store: its WAL offset, its batch's stream and base
    offset, and its body's crc32c (enough to know the record again in a re-initialised WAL)."""

    offset: int
    stream_id: int
    base_offset: int
    body_crc: int
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS = schema.MARK_KEYS


@dataclass(eq=False)
class StreamGap(_Entry):
    """Stream offsets [from, to) no object holds, recorded by an upload: ``cause`` "crash" (a crash
    hole explains it: ``hole_start``, ``sealed``, ``sealed_at_ns``), "accepted" (``--accept-gap``) or
    "corruption" (salvage read past damage at ``damage_offset``, the one key written only when set);
    the WAL offsets of the records around it, the WAL's ``node_id`` and when it was recorded."""

    stream_id: int
    from_offset: int
    to_offset: int
    cause: str
    hole_start: int | None
    sealed: bool
    sealed_at_ns: int | None
    before_wal_offset: int | None
    after_wal_offset: int | None
    node_id: int
    time: float
    damage_offset: int | None = None
    extra: dict = field(default_factory=dict, repr=False)

    _KEYS, _OPTIONAL = schema.GAP_KEYS, schema.GAP_OPTIONAL
    _ATTRS = {"from": "from_offset", "to": "to_offset"}


# The document's keys (FORMATS.md 5), in the order of the dataclass below.
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
    objects: list[LiveObject] = field(default_factory=list)  # live objects
    prepared: list[PreparedId] = field(default_factory=list)  # reserved ids, with an expiry
    deleting: list[DeletingEntry] = field(default_factory=list)  # replaced objects, deleted by gc after a grace
    wal_uploads: dict[str, UploadMark] = field(default_factory=dict)  # WAL node id -> its last uploaded record
    stream_gaps: list[StreamGap] | None = None  # absent in older manifests: None writes no key
    extra: dict = field(default_factory=dict)  # keys this version does not know, written back unchanged

    # -- the document ---------------------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: dict) -> "Manifest":
        known = {k: doc[k] for k in _KEYS}
        known["streams"] = {int(sid): StreamSpan(v["start"], v["end"]) for sid, v in doc["streams"].items()}
        known["objects"] = [LiveObject.from_json(o) for o in doc["objects"]]
        known["prepared"] = [PreparedId.from_json(p) for p in doc["prepared"]]
        known["deleting"] = [DeletingEntry.from_json(d) for d in doc["deleting"]]
        known["wal_uploads"] = {node: UploadMark.from_json(m) for node, m in doc["wal_uploads"].items()}
        gaps = doc.get("stream_gaps")
        extra = {k: v for k, v in doc.items() if k not in _KEYS and k != "stream_gaps"}
        return cls(**known, stream_gaps=None if gaps is None else [StreamGap.from_json(g) for g in gaps],
                   extra=extra)

    def to_json(self) -> dict:
        doc = {k: getattr(self, k) for k in _KEYS}
        doc["streams"] = {str(sid): span.to_json() for sid, span in self.streams.items()}
        for name in ("objects", "prepared", "deleting"):
            doc[name] = [e.to_json() for e in doc[name]]
        doc["wal_uploads"] = {node: m.to_json() for node, m in self.wal_uploads.items()}
        if self.stream_gaps is not None:
            doc["stream_gaps"] = [g.to_json() for g in self.stream_gaps]
        doc.update(self.extra)
        return doc

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), indent=1, sort_keys=True).encode()

    # -- what it says -----------------------------------------------------------------------------

    def stream(self, stream_id: int) -> StreamSpan | None:
        return self.streams.get(stream_id)

    def upload_mark(self, node_id: int | str) -> UploadMark | None:
        """The last record of WAL ``node_id`` that is in the store, or None: nothing of it uploaded yet."""
        return self.wal_uploads.get(str(node_id))

    def live(self, kind: str | None = None) -> list[LiveObject]:
        """The live objects (of ``kind`` "SO" or "SSO" only, when given)."""
        return list(self.objects) if kind is None else [o for o in self.objects if o.kind == kind]

    def live_ids(self) -> set[int]:
        return {o.id for o in self.objects}

    def prepared_ids(self) -> set[int]:
        return {p.id for p in self.prepared}

    def referenced_ids(self) -> set[int]:
        """Every id a commit may still need: live, prepared or awaiting deletion."""
        return self.live_ids() | self.prepared_ids() | {d.id for d in self.deleting}

    def entry(self, object_id: int) -> LiveObject | PreparedId | DeletingEntry | None:
        """The live, prepared or deleting entry with this id."""
        return next((e for e in (*self.objects, *self.prepared, *self.deleting) if e.id == object_id), None)

    def known_object(self, key: str) -> LiveObject | DeletingEntry | None:
        """The live or replaced object with this key (so it must be a valid object), or None."""
        return next((e for e in (*self.objects, *self.deleting) if e.key == key), None)

    def names(self, key: str) -> bool:
        """A live or replaced object has this key (so it must be a valid object)."""
        return self.known_object(key) is not None

    def ranges_of(self, stream_id: int) -> list[tuple[int, int, LiveObject]]:
        """(start, end, object) of every live object's range of ``stream_id``, in manifest order."""
        return [(r.start, r.end, o) for o in self.objects for r in o.ranges if r.stream_id == stream_id]

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

    def prepare(self, count: int, namespace: str, *, now: float | None = None) -> list[PreparedId]:
        """Reserve ``count`` object ids: returns their prepared entries."""
        now = time.time() if now is None else now
        first = self.next_object_id
        if first + count - 1 > MAX_OBJECT_ID:
            raise RefusedError(f"no object ids left: next_object_id {first} + {count} passes 2^63-1 (AutoMQ's ids "
                               "are 64-bit)", hint="the store's ids are exhausted: start a new store")
        self.next_object_id = first + count
        entries = [PreparedId(i, object_key(i, namespace), now, now + PREPARE_TTL_S)
                   for i in range(first, first + count)]
        self.prepared.extend(entries)
        return entries

    def release(self, ids) -> None:
        """Give prepared ids up (an upload rolled back, or the objects went live)."""
        ids = set(ids)
        self.prepared = [p for p in self.prepared if p.id not in ids]

    def make_live(self, made: list[LiveObject]) -> None:
        """Objects written for prepared ids become live; their streams' spans grow to hold them."""
        made = list(made)
        self.release(o.id for o in made)
        self.objects.extend(made)
        for obj in made:
            for r in obj.ranges:
                span = self.streams.setdefault(r.stream_id, StreamSpan(r.start, r.end))
                span.start = min(span.start, r.start)
                span.end = max(span.end, r.end)

    def advance(self, node_id: int | str, mark: UploadMark) -> None:
        """WAL ``node_id`` is uploaded up to the record ``mark`` names."""
        self.wal_uploads[str(node_id)] = mark

    def add_gaps(self, gaps: list[StreamGap]) -> None:
        """Stream gaps an upload carried forward (why those streams have holes)."""
        if self.stream_gaps is None:
            self.stream_gaps = []
        self.stream_gaps.extend(gaps)

    def fence(self) -> int:
        """A compactor starts: older ones can no longer commit. Returns the new epoch."""
        self.compactor_epoch += 1
        return self.compactor_epoch

    def replace(self, input_ids, outputs: list[LiveObject], *, reserved, now: float) -> None:
        """Compaction: the inputs leave the live set (to ``deleting``, for gc after a grace), the
        outputs (entries for ids it prepared) become live, and every id it ``reserved`` stops
        being prepared."""
        input_ids = set(input_ids)
        self.deleting.extend(DeletingEntry(o.id, o.key, now) for o in self.objects if o.id in input_ids)
        self.objects = [o for o in self.objects if o.id not in input_ids]
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
        self.prepared = [p for p in self.prepared if p.id not in prepared_ids]
        self.deleting = [d for d in self.deleting if d.id not in deleting_ids]


@dataclass(frozen=True)
class Committed:
    number: int
    manifest: Manifest
    attempts: int


_BAD_MANIFEST_HINT = "edited by hand, or damaged: restore the file from a copy (walctl never rewrites one)"


def parse_manifest(raw: bytes, key: str) -> Manifest:
    """The manifest stored at ``key``, every field checked once (manifest_schema: types, ranges, keys).

    Raises:
        CorruptionError: not JSON, another version, or a field that is wrong (its path named:
            ``objects[3].ranges[0].end: expected an integer, got "x"``).
    """

    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CorruptionError(f"manifest is not valid JSON: {exc}", where=key, hint=_BAD_MANIFEST_HINT) from exc
    try:
        schema.check_document(doc)
    except schema.BadField as exc:
        raise CorruptionError(f"manifest field {exc}", where=key, hint=_BAD_MANIFEST_HINT) from None
    except RecursionError:
        raise CorruptionError("manifest nests too deeply", where=key, hint=_BAD_MANIFEST_HINT) from None
    if doc["version"] != MANIFEST_VERSION:
        raise CorruptionError(f"manifest version {doc['version']} is not {MANIFEST_VERSION}", where=key,
                              hint="written by another walctl version: use that version")
    return Manifest.from_json(doc)


def manifest_numbers(store: Store) -> list[int]:
    """The numbers of the manifests: keys exactly as ``manifest_key`` names them (a copy in a
    subfolder of manifest/, or an unpadded ``7.json``, is not manifest 7)."""
    numbers = []
    for info in store.list(MANIFEST_DIR + "/"):
        digits = info.key[len(MANIFEST_DIR) + 1:].removesuffix(".json")
        if digits.isascii() and digits.isdigit() and info.key == manifest_key(int(digits)):
            numbers.append(int(digits))
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
