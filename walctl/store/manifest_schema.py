"""The manifest document checked once, at load (docs/FORMATS.md 5): every field's type and range.

A manifest is walctl's own JSON, but an operator may edit it by hand (or a tool may damage it):
``check_document`` walks the decoded document before it becomes a Manifest, so that a wrong type,
a missing or null field, NaN, a negative or 2^64 id, a reversed range or a ``../`` key is refused
as one finding that names the field's path (``objects[3].ranges[0].end``), never met later as a
crash deep in a command. Unknown keys are allowed (a later walctl's), but not NaN or infinity in them.
"""

from __future__ import annotations

import json
import math

from walctl.errors import UsageError
from walctl.store.base import check_key

MAX_ID = (1 << 63) - 1  # ids, offsets and epochs are AutoMQ's (Java) longs: [0, 2^63-1]
MAX_CRC = (1 << 32) - 1
MIN_NODE = -(1 << 63)  # a WAL's node id may be negative (-1: no node id given)
KINDS = ("SO", "SSO")
GAP_CAUSES = ("crash", "accepted", "corruption")


class BadField(ValueError):
    """One field of the document is wrong: ``path`` (``objects[3].ranges[0].end``) and what."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


def _shown(value) -> str:
    """The value as JSON (null, "x", 1.5, NaN), cut to 40 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _want(path: str, expected: str, value):
    raise BadField(path, f"expected {expected}, got {_shown(value)}")


def integer(value, path: str, lo: int = 0, hi: int = MAX_ID) -> int:
    """An integer (not a bool, not 1.0) in [lo, hi]."""
    if type(value) is not int:
        _want(path, "an integer", value)
    if not lo <= value <= hi:
        _want(path, f"an integer in [{lo}, {hi}]", value)
    return value


def number(value, path: str) -> float:
    """A finite number, not negative (a time in seconds since the epoch)."""
    if type(value) not in (int, float):
        _want(path, "a number", value)
    if not math.isfinite(value) or value < 0:
        _want(path, "a finite number >= 0", value)
    return value


def text(value, path: str, choices: tuple[str, ...] | None = None) -> str:
    if type(value) is not str:
        _want(path, "a string", value)
    if choices is not None and value not in choices:
        _want(path, "one of " + ", ".join(choices), value)
    return value


def object_key(value, path: str) -> str:
    text(value, path)
    try:
        check_key(value)
    except UsageError as exc:
        raise BadField(path, f"not a valid object key ({exc.args[0] if exc.args else exc})") from None
    return value


def mapping(value, path: str) -> dict:
    if type(value) is not dict:
        _want(path, "an object", value)
    return value


def array(value, path: str) -> list:
    if type(value) is not list:
        _want(path, "a list", value)
    return value


def optional(check, value, path: str, *args):
    return None if value is None else check(value, path, *args)


def field(doc: dict, name: str, path: str):
    """``doc[name]``; a missing key is a finding."""
    if name not in doc:
        raise BadField(_join(path, name), "missing")
    return doc[name]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def finite_everywhere(value, path: str) -> None:
    """No NaN or infinity anywhere inside ``value`` (keys walctl does not know included)."""
    if type(value) is float:
        if not math.isfinite(value):
            _want(path, "a finite number", value)
    elif type(value) is dict:
        for k, v in value.items():
            finite_everywhere(v, _join(path, k))
    elif type(value) is list:
        for i, v in enumerate(value):
            finite_everywhere(v, f"{path}[{i}]")


def _extras(entry: dict, known: frozenset[str], path: str) -> None:
    for k, v in entry.items():
        if k not in known:
            finite_everywhere(v, _join(path, k))


# -- the entries ------------------------------------------------------------------------------------

# Each entry's keys: the ones every entry has, then the optional ones. The entry classes in
# manifest.py take theirs from here (their _KEYS and _OPTIONAL), so a key is declared once.
RANGE_KEYS = ("stream_id", "start", "end", "bytes")
# crc: crc32c of the range's bytes in the object (its DataBlocks, headers included), when the writer
# knew it (walctl since the per-range crc; absent in older manifests and AutoMQ's, null: not known).
RANGE_OPTIONAL = ("crc",)
CRC_MAX = (1 << 32) - 1
OBJECT_KEYS, OBJECT_OPTIONAL = ("id", "key", "kind", "size", "ranges"), ("order_id", "data_time")
PREPARED_KEYS = ("id", "key", "prepared_at", "expires_at")
DELETING_KEYS = ("id", "key", "marked_at")
MARK_KEYS = ("offset", "stream_id", "base_offset", "body_crc")
GAP_KEYS = ("stream_id", "from", "to", "cause", "hole_start", "sealed", "sealed_at_ns", "before_wal_offset",
            "after_wal_offset", "node_id", "time")
GAP_OPTIONAL = ("damage_offset",)
_GAP_NULLABLE = ("hole_start", "sealed_at_ns", "before_wal_offset", "after_wal_offset")  # null: not known

_RANGE_KEYS = frozenset((*RANGE_KEYS, *RANGE_OPTIONAL))
_OBJECT_KEYS = frozenset((*OBJECT_KEYS, *OBJECT_OPTIONAL))
_PREPARED_KEYS = frozenset(PREPARED_KEYS)
_DELETING_KEYS = frozenset(DELETING_KEYS)
_MARK_KEYS = frozenset(MARK_KEYS)
_GAP_KEYS = frozenset((*GAP_KEYS, *GAP_OPTIONAL))


def _span(doc: dict, path: str, lo: str, hi: str) -> None:
    """doc[lo] <= doc[hi], both offsets."""
    start = integer(field(doc, lo, path), f"{path}.{lo}")
    end = integer(field(doc, hi, path), f"{path}.{hi}")
    if end < start:
        raise BadField(f"{path}.{hi}", f"{end} is below {lo} {start}")


def check_range(r, path: str) -> None:
    mapping(r, path)
    integer(field(r, "stream_id", path), f"{path}.stream_id")
    _span(r, path, "start", "end")
    integer(field(r, "bytes", path), f"{path}.bytes")
    optional(integer, r.get("crc"), f"{path}.crc", 0, CRC_MAX)  # absent or null: not known (read to check)
    _extras(r, _RANGE_KEYS, path)


def check_object(o, path: str) -> None:
    mapping(o, path)
    integer(field(o, "id", path), f"{path}.id")
    object_key(field(o, "key", path), f"{path}.key")
    text(field(o, "kind", path), f"{path}.kind", KINDS)
    integer(field(o, "size", path), f"{path}.size")
    integer(field(o, "order_id", path), f"{path}.order_id")
    number(field(o, "data_time", path), f"{path}.data_time")
    for i, r in enumerate(array(field(o, "ranges", path), f"{path}.ranges")):
        check_range(r, f"{path}.ranges[{i}]")
    _extras(o, _OBJECT_KEYS, path)


def check_prepared(p, path: str) -> None:
    mapping(p, path)
    integer(field(p, "id", path), f"{path}.id")
    object_key(field(p, "key", path), f"{path}.key")
    number(field(p, "prepared_at", path), f"{path}.prepared_at")
    number(field(p, "expires_at", path), f"{path}.expires_at")
    _extras(p, _PREPARED_KEYS, path)


def check_deleting(d, path: str) -> None:
    mapping(d, path)
    integer(field(d, "id", path), f"{path}.id")
    object_key(field(d, "key", path), f"{path}.key")
    number(field(d, "marked_at", path), f"{path}.marked_at")
    _extras(d, _DELETING_KEYS, path)


def check_mark(m, path: str) -> None:
    mapping(m, path)
    integer(field(m, "offset", path), f"{path}.offset")
    integer(field(m, "stream_id", path), f"{path}.stream_id")
    integer(field(m, "base_offset", path), f"{path}.base_offset")
    integer(field(m, "body_crc", path), f"{path}.body_crc", 0, MAX_CRC)
    _extras(m, _MARK_KEYS, path)


def check_gap(g, path: str) -> None:
    mapping(g, path)
    integer(field(g, "stream_id", path), f"{path}.stream_id")
    _span(g, path, "from", "to")
    text(field(g, "cause", path), f"{path}.cause", GAP_CAUSES)
    for name in _GAP_NULLABLE:
        optional(integer, field(g, name, path), f"{path}.{name}")
    if type(field(g, "sealed", path)) is not bool:
        _want(f"{path}.sealed", "true or false", g["sealed"])
    integer(field(g, "node_id", path), f"{path}.node_id", MIN_NODE, MAX_ID)
    number(field(g, "time", path), f"{path}.time")
    optional(integer, g.get("damage_offset"), f"{path}.damage_offset")  # absent or null: no damage
    _extras(g, _GAP_KEYS, path)


# -- the document -----------------------------------------------------------------------------------

_TOP_KEYS = frozenset(("version", "number", "parent", "commit_id", "time", "writer", "next_object_id",
                       "compactor_epoch", "streams", "objects", "prepared", "deleting", "wal_uploads",
                       "stream_gaps"))


def _stream_id(name, path: str) -> None:
    """A stream id as a JSON object key: the decimal digits of an id."""
    if not (name.isascii() and name.isdigit() and name == str(int(name))):
        raise BadField(path, "expected a stream id (decimal digits)")
    integer(int(name), path)


def _node_id(name, path: str) -> None:
    """A WAL node id as a JSON object key: a decimal integer (negative: no node id given)."""
    digits = name[1:] if name.startswith("-") else name
    if not (digits.isascii() and digits.isdigit() and name == str(int(name))):
        raise BadField(path, "expected a WAL node id (a decimal integer)")
    integer(int(name), path, MIN_NODE, MAX_ID)


def check_header(doc: dict) -> None:
    """The document's own fields: version, commit, ids, epoch."""
    integer(field(doc, "version", ""), "version")
    integer(field(doc, "number", ""), "number")
    optional(integer, field(doc, "parent", ""), "parent")
    optional(text, field(doc, "commit_id", ""), "commit_id")
    optional(number, field(doc, "time", ""), "time")
    writer = optional(mapping, field(doc, "writer", ""), "writer")
    if writer is not None:
        finite_everywhere(writer, "writer")
    integer(field(doc, "next_object_id", ""), "next_object_id")
    integer(field(doc, "compactor_epoch", ""), "compactor_epoch")


def check_document(doc) -> None:
    """Raise BadField for the first field of the decoded manifest ``doc`` that is wrong."""
    if type(doc) is not dict:
        _want("(the document)", "an object", doc)
    check_header(doc)
    for sid, span in mapping(field(doc, "streams", ""), "streams").items():
        _stream_id(sid, f"streams.{sid}")
        mapping(span, f"streams.{sid}")
        _span(span, f"streams.{sid}", "start", "end")
        _extras(span, frozenset(("start", "end")), f"streams.{sid}")
    for name, check in (("objects", check_object), ("prepared", check_prepared), ("deleting", check_deleting)):
        for i, entry in enumerate(array(field(doc, name, ""), name)):
            check(entry, f"{name}[{i}]")
    for node, mark in mapping(field(doc, "wal_uploads", ""), "wal_uploads").items():
        _node_id(node, f"wal_uploads.{node}")
        check_mark(mark, f"wal_uploads.{node}")
    if "stream_gaps" in doc:
        for i, gap in enumerate(array(doc["stream_gaps"], "stream_gaps")):
            check_gap(gap, f"stream_gaps[{i}]")
    _extras(doc, _TOP_KEYS, "")
