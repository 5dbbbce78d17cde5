"""store/manifest_schema.py exactly (issue 32): each check's boundary and the one-line finding it
gives (the field's path, what was expected, the value as JSON), as plain calls on a decoded document.
tests/store/test_manifest_hostile.py drives the same refusals through the CLI, field by field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from walctl.store import manifest_schema as schema

EXISTING = json.loads((Path(__file__).parent / "data" / "manifest-v1.json").read_bytes())
M = (1 << 63) - 1
NAN, INF = float("nan"), float("inf")


def _finding(damage) -> str | None:
    doc = copy.deepcopy(EXISTING)
    damage(doc)
    try:
        schema.check_document(doc)
    except schema.BadField as exc:
        assert str(exc) == f"{exc.path}: {exc.what}"
        return str(exc)
    return None


def _set(where: str, key, value):
    """A damage: ``doc`` at ``where`` (a path of keys and indexes, "." separated) gets key = value."""
    def damage(doc):
        node = doc
        for part in where.split(".") if where else ():
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[key] = value
    return damage


def _drop(where: str, key):
    def damage(doc):
        node = doc
        for part in where.split(".") if where else ():
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[key]
    return damage


def test_the_existing_document_passes():
    assert _finding(lambda d: None) is None


# (damage, the finding); None: the document passes (a boundary that is allowed)
CASES = [
    # the header
    (_set("", "version", True), "version: expected an integer, got true"),
    (_set("", "version", 1.0), "version: expected an integer, got 1.0"),
    (_set("", "number", -1), f"number: expected an integer in [0, {M}], got -1"),
    (_set("", "number", M + 1), f"number: expected an integer in [0, {M}], got {M + 1}"),
    (_set("", "number", M), None),
    (_set("", "number", 0), None),
    (_drop("", "number"), "number: missing"),
    (_set("", "parent", None), None),
    (_set("", "parent", "8"), 'parent: expected an integer, got "8"'),
    (_drop("", "parent"), "parent: missing"),
    (_set("", "commit_id", None), None),
    (_set("", "commit_id", 5), "commit_id: expected a string, got 5"),
    (_set("", "time", None), None),
    (_set("", "time", 0), None),
    (_set("", "time", 0.0), None),
    (_set("", "time", -0.5), "time: expected a finite number >= 0, got -0.5"),
    (_set("", "time", NAN), "time: expected a finite number >= 0, got NaN"),
    (_set("", "time", INF), "time: expected a finite number >= 0, got Infinity"),
    (_set("", "time", False), "time: expected a number, got false"),
    (_set("", "time", "1"), 'time: expected a number, got "1"'),
    (_set("", "writer", None), None),
    (_set("", "writer", []), "writer: expected an object, got []"),
    (_set("writer", "pid", NAN), "writer.pid: expected a finite number, got NaN"),
    (_set("writer", "argv", ["a", -INF]), "writer.argv[1]: expected a finite number, got -Infinity"),
    (_set("writer", "deep", {"a": [{"b": NAN}]}), "writer.deep.a[0].b: expected a finite number, got NaN"),
    (_set("writer", "pid", 1.5), None),
    (_drop("", "next_object_id"), "next_object_id: missing"),
    (_set("", "next_object_id", -1), f"next_object_id: expected an integer in [0, {M}], got -1"),
    (_set("", "compactor_epoch", "1"), 'compactor_epoch: expected an integer, got "1"'),
    (_drop("", "compactor_epoch"), "compactor_epoch: missing"),
    # streams
    (_drop("", "streams"), "streams: missing"),
    (_set("", "streams", []), "streams: expected an object, got []"),
    (_set("streams", "01", {"start": 0, "end": 1}), "streams.01: expected a stream id (decimal digits)"),
    (_set("streams", "-1", {"start": 0, "end": 1}), "streams.-1: expected a stream id (decimal digits)"),
    (_set("streams", "x", {"start": 0, "end": 1}), "streams.x: expected a stream id (decimal digits)"),
    (_set("streams", "\u0663", {"start": 0, "end": 1}), "streams.\u0663: expected a stream id (decimal digits)"),
    (_set("streams", str(M + 1), {"start": 0, "end": 1}),
     f"streams.{M + 1}: expected an integer in [0, {M}], got {M + 1}"),
    (_set("streams", str(M), {"start": 0, "end": 1}), None),
    (_set("streams", "0", {"start": 0, "end": 1}), None),
    (_set("streams", "1", [0, 1]), "streams.1: expected an object, got [0, 1]"),
    (_set("streams.1", "end", -1), f"streams.1.end: expected an integer in [0, {M}], got -1"),
    (_drop("streams.1", "start"), "streams.1.start: missing"),
    (_set("streams.1", "start", 22), "streams.1.end: 21 is below start 22"),
    (_set("streams.1", "start", 21), None),
    (_set("streams.1", "later", NAN), "streams.1.later: expected a finite number, got NaN"),
    # objects and their ranges
    (_drop("", "objects"), "objects: missing"),
    (_set("", "objects", {}), "objects: expected a list, got {}"),
    (_set("objects", 1, 4), "objects[1]: expected an object, got 4"),
    (_drop("objects.2", "id"), "objects[2].id: missing"),
    (_set("objects.1", "id", M + 1), f"objects[1].id: expected an integer in [0, {M}], got {M + 1}"),
    (_set("objects.0", "key", 7), "objects[0].key: expected a string, got 7"),
    (_set("objects.0", "key", "a/../b"),
     "objects[0].key: not a valid object key (object key has an empty, '.' or '..' component: 'a/../b')"),
    (_set("objects.0", "key", ""), "objects[0].key: not a valid object key (object key must be a non-empty "
                                   "string: '')"),
    (_set("objects.0", "kind", "XO"), 'objects[0].kind: expected one of SO, SSO, got "XO"'),
    (_set("objects.0", "kind", "SO"), None),
    (_set("objects.0", "kind", None), "objects[0].kind: expected a string, got null"),
    (_set("objects.0", "size", -1), f"objects[0].size: expected an integer in [0, {M}], got -1"),
    (_drop("objects.0", "order_id"), "objects[0].order_id: missing"),
    (_set("objects.0", "order_id", None), "objects[0].order_id: expected an integer, got null"),
    (_drop("objects.0", "data_time"), "objects[0].data_time: missing"),
    (_set("objects.0", "data_time", -1), "objects[0].data_time: expected a finite number >= 0, got -1"),
    (_set("objects.0", "ranges", None), "objects[0].ranges: expected a list, got null"),
    (_set("objects.0", "ranges", []), None),
    (_set("objects.0.ranges", 0, "r"), 'objects[0].ranges[0]: expected an object, got "r"'),
    (_set("objects.2.ranges.0", "stream_id", -1),
     f"objects[2].ranges[0].stream_id: expected an integer in [0, {M}], got -1"),
    (_set("objects.2.ranges.0", "end", -1), f"objects[2].ranges[0].end: expected an integer in [0, {M}], got -1"),
    (_set("objects.2.ranges.0", "start", 10), "objects[2].ranges[0].end: 9 is below start 10"),
    (_drop("objects.2.ranges.0", "bytes"), "objects[2].ranges[0].bytes: missing"),
    (_set("objects.2.ranges.0", "bytes", 1.5), "objects[2].ranges[0].bytes: expected an integer, got 1.5"),
    (_set("objects.2.ranges.0", "later", [NAN]), "objects[2].ranges[0].later[0]: expected a finite number, got NaN"),
    (_set("objects.2.ranges.0", "later", [1.5, "x"]), None),
    (_set("objects.2", "later", {"x": INF}), "objects[2].later.x: expected a finite number, got Infinity"),
    # prepared and deleting
    (_set("", "prepared", None), "prepared: expected a list, got null"),
    (_set("prepared", 0, []), "prepared[0]: expected an object, got []"),
    (_set("prepared.0", "id", -1), f"prepared[0].id: expected an integer in [0, {M}], got -1"),
    (_set("prepared.0", "key", "/abs"),
     "prepared[0].key: not a valid object key (object key must be relative (no leading '/'): '/abs')"),
    (_set("prepared.0", "prepared_at", "now"), 'prepared[0].prepared_at: expected a number, got "now"'),
    (_drop("prepared.0", "expires_at"), "prepared[0].expires_at: missing"),
    (_set("prepared.0", "later", NAN), "prepared[0].later: expected a finite number, got NaN"),
    (_drop("", "deleting"), "deleting: missing"),
    (_set("deleting", 1, None), "deleting[1]: expected an object, got null"),
    (_set("deleting.1", "id", "3"), 'deleting[1].id: expected an integer, got "3"'),
    (_set("deleting.1", "key", None), "deleting[1].key: expected a string, got null"),
    (_set("deleting.1", "marked_at", NAN), "deleting[1].marked_at: expected a finite number >= 0, got NaN"),
    (_set("deleting.1", "later", NAN), "deleting[1].later: expected a finite number, got NaN"),
    # WAL upload marks
    (_drop("", "wal_uploads"), "wal_uploads: missing"),
    (_set("", "wal_uploads", []), "wal_uploads: expected an object, got []"),
    (_set("wal_uploads", str(-(1 << 63)), {"offset": 0, "stream_id": 0, "base_offset": 0, "body_crc": 0}), None),
    (_set("wal_uploads", str(-(1 << 63) - 1), {"offset": 0, "stream_id": 0, "base_offset": 0, "body_crc": 0}),
     f"wal_uploads.{-(1 << 63) - 1}: expected an integer in [{-(1 << 63)}, {M}], got {-(1 << 63) - 1}"),
    (_set("wal_uploads", "7", {"offset": 0, "stream_id": 0, "base_offset": 0, "body_crc": 0}), None),
    (_set("wal_uploads", "-01", {}), "wal_uploads.-01: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "07", {}), "wal_uploads.07: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "+7", {}), "wal_uploads.+7: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "--7", {}), "wal_uploads.--7: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "-", {}), "wal_uploads.-: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "-\u0663", {}), "wal_uploads.-\u0663: expected a WAL node id (a decimal integer)"),
    (_set("wal_uploads", "-1", 5), "wal_uploads.-1: expected an object, got 5"),
    (_drop("wal_uploads.-1", "offset"), "wal_uploads.-1.offset: missing"),
    (_set("wal_uploads.-1", "stream_id", -1), f"wal_uploads.-1.stream_id: expected an integer in [0, {M}], got -1"),
    (_set("wal_uploads.-1", "base_offset", None), "wal_uploads.-1.base_offset: expected an integer, got null"),
    (_set("wal_uploads.-1", "body_crc", (1 << 32) - 1), None),
    (_set("wal_uploads.-1", "body_crc", 1 << 32),
     f"wal_uploads.-1.body_crc: expected an integer in [0, {(1 << 32) - 1}], got {1 << 32}"),
    (_set("wal_uploads.-1", "body_crc", -1),
     f"wal_uploads.-1.body_crc: expected an integer in [0, {(1 << 32) - 1}], got -1"),
    (_set("wal_uploads.-1", "later", NAN), "wal_uploads.-1.later: expected a finite number, got NaN"),
    # stream gaps (the key is optional)
    (_drop("", "stream_gaps"), None),
    (_set("", "stream_gaps", None), "stream_gaps: expected a list, got null"),
    (_set("stream_gaps", 0, 1), "stream_gaps[0]: expected an object, got 1"),
    (_set("stream_gaps.0", "stream_id", -2), f"stream_gaps[0].stream_id: expected an integer in [0, {M}], got -2"),
    (_set("stream_gaps.0", "from", 21), "stream_gaps[0].to: 20 is below from 21"),
    (_drop("stream_gaps.0", "to"), "stream_gaps[0].to: missing"),
    (_set("stream_gaps.0", "cause", "crash"), None),
    (_set("stream_gaps.0", "cause", "corruption"), None),
    (_set("stream_gaps.0", "cause", "bug"), 'stream_gaps[0].cause: expected one of crash, accepted, corruption, '
                                            'got "bug"'),
    (_set("stream_gaps.0", "hole_start", 5), None),
    (_set("stream_gaps.0", "hole_start", -5), f"stream_gaps[0].hole_start: expected an integer in [0, {M}], got -5"),
    (_drop("stream_gaps.0", "hole_start"), "stream_gaps[0].hole_start: missing"),
    (_set("stream_gaps.0", "sealed_at_ns", "x"), 'stream_gaps[0].sealed_at_ns: expected an integer, got "x"'),
    (_set("stream_gaps.0", "before_wal_offset", None), None),
    (_set("stream_gaps.0", "before_wal_offset", -1),
     f"stream_gaps[0].before_wal_offset: expected an integer in [0, {M}], got -1"),
    (_set("stream_gaps.0", "after_wal_offset", 1.0), "stream_gaps[0].after_wal_offset: expected an integer, got 1.0"),
    (_set("stream_gaps.0", "sealed", True), None),
    (_set("stream_gaps.0", "sealed", 0), "stream_gaps[0].sealed: expected true or false, got 0"),
    (_set("stream_gaps.0", "sealed", None), "stream_gaps[0].sealed: expected true or false, got null"),
    (_drop("stream_gaps.0", "sealed"), "stream_gaps[0].sealed: missing"),
    (_set("stream_gaps.0", "node_id", -(1 << 63)), None),
    (_set("stream_gaps.0", "node_id", -(1 << 63) - 1),
     f"stream_gaps[0].node_id: expected an integer in [{-(1 << 63)}, {M}], got {-(1 << 63) - 1}"),
    (_set("stream_gaps.0", "node_id", M + 1),
     f"stream_gaps[0].node_id: expected an integer in [{-(1 << 63)}, {M}], got {M + 1}"),
    (_set("stream_gaps.0", "time", -1.0), "stream_gaps[0].time: expected a finite number >= 0, got -1.0"),
    (_set("stream_gaps.0", "damage_offset", None), None),
    (_set("stream_gaps.0", "damage_offset", 4096), None),
    (_set("stream_gaps.0", "damage_offset", -1), f"stream_gaps[0].damage_offset: expected an integer in [0, {M}], "
                                                 "got -1"),
    (_set("stream_gaps.0", "later", NAN), "stream_gaps[0].later: expected a finite number, got NaN"),
    # every entry field, missing: the finding names its whole path
    *[(_drop(where, key), f"{shown}.{key}: missing") for where, shown, keys in [
        ("", "", ()),
        ("objects.1", "objects[1]", ("key", "kind", "size", "ranges")),
        ("objects.2.ranges.0", "objects[2].ranges[0]", ("stream_id", "end")),
        ("prepared.0", "prepared[0]", ("id", "key", "prepared_at")),
        ("deleting.0", "deleting[0]", ("id", "key", "marked_at")),
        ("wal_uploads.-1", "wal_uploads.-1", ("stream_id", "base_offset", "body_crc")),
        ("stream_gaps.0", "stream_gaps[0]", ("stream_id", "from", "cause", "node_id", "time", "after_wal_offset")),
    ] for key in keys],
    (_drop("", "commit_id"), "commit_id: missing"),
    (_drop("", "time"), "time: missing"),
    (_drop("", "writer"), "writer: missing"),
    (_set("streams.2", "start", -1), f"streams.2.start: expected an integer in [0, {M}], got -1"),
    (_set("wal_uploads.-1", "offset", -1), f"wal_uploads.-1.offset: expected an integer in [0, {M}], got -1"),
    (_set("prepared.0", "expires_at", -1), "prepared[0].expires_at: expected a finite number >= 0, got -1"),
    # keys walctl does not know, at the top
    (_set("", "later", {"a": [1, NAN]}), "later.a[1]: expected a finite number, got NaN"),
    (_set("", "later", {"a": [1, 2.5, None, "x", True]}), None),
]


@pytest.mark.parametrize("damage, finding", CASES)
def test_each_field_is_checked_at_its_boundary(damage, finding):
    assert _finding(damage) == finding


def test_the_first_wrong_field_is_the_finding():
    def two(doc):
        doc["objects"][1]["size"] = -1
        doc["objects"][0]["id"] = "x"
    assert _finding(two) == 'objects[0].id: expected an integer, got "x"'
    doc = copy.deepcopy(EXISTING)
    doc["wal_uploads"]["-1"]["offset"] = None
    doc["streams"]["2"]["end"] = None
    with pytest.raises(schema.BadField) as info:
        schema.check_document(doc)
    assert (info.value.path, info.value.what) == ("streams.2.end", "expected an integer, got null")


@pytest.mark.parametrize("doc, finding", [
    ([], "(the document): expected an object, got []"),
    (None, "(the document): expected an object, got null"),
    ("x" * 50, '(the document): expected an object, got "' + "x" * 36 + "..."),
    ({}, "version: missing"),
])
def test_a_document_that_is_not_an_object_is_refused(doc, finding):
    with pytest.raises(schema.BadField) as info:
        schema.check_document(doc)
    assert str(info.value) == finding


def test_a_value_is_shown_as_json_cut_to_40_characters():
    assert schema._shown("a" * 38) == '"' + "a" * 38 + '"'  # 40: whole
    assert schema._shown("a" * 39) == '"' + "a" * 36 + "..."  # 41: cut to 37 + "..."
    assert len(schema._shown(list(range(100)))) == 40
    assert schema._shown(NAN) == "NaN" and schema._shown(None) == "null"
    assert schema._shown({1, 2}) == "{1, 2}"  # not JSON: its repr
    assert schema._shown(b"x") == "b'x'"


@pytest.mark.parametrize("value, lo, hi, finding", [
    (3, 3, 5, None), (5, 3, 5, None), (2, 3, 5, "p: expected an integer in [3, 5], got 2"),
    (6, 3, 5, "p: expected an integer in [3, 5], got 6"), (False, 0, 5, "p: expected an integer, got false"),
])
def test_integer_bounds_are_inclusive(value, lo, hi, finding):
    if finding is None:
        assert schema.integer(value, "p", lo, hi) == value
    else:
        with pytest.raises(schema.BadField, match=r"^" + finding.replace("[", r"\[").replace("]", r"\]") + "$"):
            schema.integer(value, "p", lo, hi)


def test_the_checks_return_their_value():
    assert schema.integer(M, "p") == M and schema.integer(0, "p") == 0
    assert schema.number(0, "p") == 0 and schema.number(2.5, "p") == 2.5
    assert schema.text("SO", "p", schema.KINDS) == "SO" and schema.text("", "p") == ""
    assert schema.object_key("a/b", "p") == "a/b"
    assert schema.mapping({}, "p") == {} and schema.array([], "p") == []
    assert schema.optional(schema.integer, None, "p") is None
    assert schema.optional(schema.integer, 4, "p", 4, 4) == 4
    assert schema.field({"a": None}, "a", "x") is None
    with pytest.raises(schema.BadField) as info:
        schema.optional(schema.integer, 5, "p", 0, 4)
    assert info.value.path == "p"
    with pytest.raises(schema.BadField) as info:
        schema.field({}, "a", "")
    assert (info.value.path, info.value.what) == ("a", "missing")


def test_the_entry_classes_take_their_keys_from_the_schema():
    from walctl.store import manifest as mf
    assert mf.ObjectRange._KEYS == schema.RANGE_KEYS == ("stream_id", "start", "end", "bytes")
    assert mf.StreamGap._OPTIONAL == ("damage_offset",)
    assert schema.KINDS == ("SO", "SSO") and schema.GAP_CAUSES == ("crash", "accepted", "corruption")
    assert (schema.MAX_ID, schema.MAX_CRC, schema.MIN_NODE) == (M, (1 << 32) - 1, -(1 << 63))
