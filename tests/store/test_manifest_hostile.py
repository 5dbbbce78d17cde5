"""Hand-edited manifests (issue 30): every field with a wrong type, missing, null, NaN, negative or
2^64 is one finding at load (exit 3, the field's path named), never a crash (exit 1) and never a
command that goes on and writes (issue 29 item 3: the manifest is checked once, at load)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from walctl.cli import app
from walctl.errors import CorruptionError
from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import append, make_wal

NAN = float("nan")
MISSING = object()  # the mutation that deletes the key

# Every field of a manifest, by the kind of value it holds: (path, kind). Paths use the store built
# below: stream 1, object 0 with one range, a prepared id, a replaced object, WAL node -1, a gap.
FIELDS = [
    ("version", "int"), ("number", "int"), ("parent", "int?"), ("commit_id", "str?"), ("time", "time?"),
    ("writer", "dict?"), ("next_object_id", "int"), ("compactor_epoch", "int"),
    ("streams", "dict"), ("streams.1", "entry"), ("streams.1.start", "int"), ("streams.1.end", "int"),
    ("objects", "list"), ("objects[0]", "entry"), ("objects[0].id", "int"), ("objects[0].key", "key"),
    ("objects[0].kind", "str"), ("objects[0].size", "int"), ("objects[0].order_id", "int"),
    ("objects[0].data_time", "time"), ("objects[0].ranges", "list"), ("objects[0].ranges[0]", "entry"),
    ("objects[0].ranges[0].stream_id", "int"), ("objects[0].ranges[0].start", "int"),
    ("objects[0].ranges[0].end", "int"), ("objects[0].ranges[0].bytes", "int"),
    ("prepared", "list"), ("prepared[0]", "entry"), ("prepared[0].id", "int"), ("prepared[0].key", "key"),
    ("prepared[0].prepared_at", "time"), ("prepared[0].expires_at", "time"),
    ("deleting", "list"), ("deleting[0]", "entry"), ("deleting[0].id", "int"), ("deleting[0].key", "key"),
    ("deleting[0].marked_at", "time"),
    ("wal_uploads", "dict"), ("wal_uploads.-1", "entry"), ("wal_uploads.-1.offset", "int"),
    ("wal_uploads.-1.stream_id", "int"), ("wal_uploads.-1.base_offset", "int"), ("wal_uploads.-1.body_crc", "int"),
    ("stream_gaps", "list-"), ("stream_gaps[0]", "entry"), ("stream_gaps[0].stream_id", "int"),
    ("stream_gaps[0].from", "int"), ("stream_gaps[0].to", "int"), ("stream_gaps[0].cause", "str"),
    ("stream_gaps[0].hole_start", "int?"), ("stream_gaps[0].sealed_at_ns", "int?"),
    ("stream_gaps[0].before_wal_offset", "int?"), ("stream_gaps[0].after_wal_offset", "int?"),
    ("stream_gaps[0].damage_offset", "int?-"), ("stream_gaps[0].node_id", "node"), ("stream_gaps[0].sealed", "bool"),
    ("stream_gaps[0].time", "time"),
]

# What each kind of field must refuse ("?": null allowed; "-": may be absent).
BAD = {
    "int": ["x", 1.5, True, NAN, -1, 1 << 64, [], None, MISSING],
    "time": ["x", True, NAN, float("inf"), -1, None, MISSING],
    "str": [1, [], None, MISSING],
    "key": [1, "", "../x", "a/../../b", None, MISSING],
    "dict": ["x", [1], 1, None, MISSING],
    "entry": ["x", [1], 1, None],  # an element of a list or a map: without it the document is still whole
    "list": ["x", {}, 1, None, MISSING],
    "node": ["x", 1.5, True, NAN, 1 << 63, None, MISSING],  # a WAL's node id may be negative
    "bool": ["x", 1, None, MISSING],
}


def _bad_values(kind: str) -> list:
    base = kind.rstrip("?-")
    values = BAD[base]
    if "?" in kind:
        values = [v for v in values if v is not None]
    if "-" in kind:
        values = [v for v in values if v is not MISSING]
    return values


def _steps(path: str) -> list:
    """``objects[0].ranges[1].end`` -> ["objects", 0, "ranges", 1, "end"] (``wal_uploads.-1`` keeps "-1")."""
    out: list = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        out.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            out.append(int(index))
            rest = rest.lstrip("[")
    return out


def _set(doc: dict, path: str, value) -> dict:
    doc = copy.deepcopy(doc)
    *parents, last = _steps(path)
    node = doc
    for step in parents:
        node = node[step]
    if value is MISSING:
        del node[last]
    else:
        node[last] = value
    return doc


def _shown(value) -> str:
    return "missing" if value is MISSING else json.dumps(value)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, str, dict]:
    """A real store (an upload of two streams, a prepare, a replaced object, a recorded gap) and its
    WAL: (store directory, WAL path, the newest manifest's JSON)."""
    from walctl.pipeline.upload import upload

    tmp = tmp_path_factory.mktemp("hostile")
    store = open_store(str(tmp / "store"), create=True)
    wal = make_wal(tmp, capacity=1 << 20)
    append(wal, {1: (4, 100), 2: (2, 50)})
    upload(wal, store)

    def more(m: mf.Manifest) -> None:
        m.prepare(1, mf.DEFAULT_NAMESPACE)
        m.deleting.append(mf.DeletingEntry(99, mf.object_key(99), 1.0))
        m.add_gaps([mf.StreamGap(1, 10, 12, "accepted", hole_start=None, sealed=False, sealed_at_ns=None,
                                 before_wal_offset=0, after_wal_offset=4096, damage_offset=3, node_id=-1,
                                 time=2.0)])

    mf.commit(store, more, command="test: hostile base")
    number = mf.manifest_numbers(store)[-1]
    return str(tmp / "store"), wal, json.loads(store.read_all(mf.manifest_key(number)))


def test_the_base_document_is_valid_and_names_every_field(built):
    _, _, doc = built
    mf.parse_manifest(json.dumps(doc).encode(), "k")
    for path, _ in FIELDS:
        _set(doc, path, MISSING)  # every path exists in the base document


CASES = [(path, value) for path, kind in FIELDS for value in _bad_values(kind)]


@pytest.mark.parametrize("path,value", CASES, ids=[f"{p}={_shown(v)}" for p, v in CASES])
def test_every_field_wrong_is_a_finding_naming_its_path(built, path, value):
    _, _, doc = built
    raw = json.dumps(_set(doc, path, value)).encode()
    with pytest.raises(CorruptionError) as caught:
        mf.parse_manifest(raw, "manifest/00000000000000000007.json")
    message = str(caught.value)
    assert f"manifest field {path}: " in message or f"manifest field {path}." in message or \
        f"manifest field {path}[" in message, message
    assert caught.value.where == "manifest/00000000000000000007.json" and caught.value.hint


@pytest.mark.parametrize("path,lo,hi", [("streams.1", "start", "end"), ("objects[0].ranges[0]", "start", "end"),
                                        ("stream_gaps[0]", "from", "to")])
def test_a_reversed_range_is_a_finding(built, path, lo, hi):
    _, _, doc = built
    raw = json.dumps(_set(_set(doc, f"{path}.{lo}", 9), f"{path}.{hi}", 8)).encode()
    with pytest.raises(CorruptionError, match=re.escape(f"manifest field {path}.{hi}: 8 is below {lo} 9")):
        mf.parse_manifest(raw, "k")


@pytest.mark.parametrize("path,value,reported", [
    ("objects[0].kind", "XX", 'objects[0].kind: expected one of SO, SSO, got "XX"'),
    ("stream_gaps[0].cause", "hmm", 'stream_gaps[0].cause: expected one of crash, accepted, corruption, got "hmm"'),
    ("stream_gaps[0].sealed", "yes", 'stream_gaps[0].sealed: expected true or false, got "yes"'),
    ("wal_uploads.-1.body_crc", 1 << 32, f"wal_uploads.-1.body_crc: expected an integer in [0, {(1 << 32) - 1}]"),
    ("objects[0].later", NAN, "objects[0].later: expected a finite number, got NaN"),  # unknown keys too
    ("later", {"a": [float("inf")]}, "later.a[0]: expected a finite number, got Infinity"),
])
def test_values_out_of_their_domain_are_findings(built, path, value, reported):
    _, _, doc = built
    with pytest.raises(CorruptionError, match=re.escape(f"manifest field {reported}")):
        mf.parse_manifest(json.dumps(_set(doc, path, value)).encode(), "k")


def test_keys_of_streams_and_wal_uploads_are_ids(built):
    _, _, doc = built
    for name, key in (("streams", "x"), ("streams", "-1"), ("streams", str(1 << 64)), ("wal_uploads", "n1")):
        bad = copy.deepcopy(doc)
        bad[name][key] = next(iter(bad[name].values()))
        with pytest.raises(CorruptionError, match=rf"manifest field {name}\.{key}: "):
            mf.parse_manifest(json.dumps(bad).encode(), "k")


def test_a_prepare_past_the_last_64_bit_id_is_refused():
    from walctl.errors import RefusedError

    m = mf.Manifest(next_object_id=(1 << 63) - 1)
    assert [p.id for p in m.prepare(1, "default")] == [(1 << 63) - 1]
    with pytest.raises(RefusedError, match="no object ids left"):
        m.prepare(1, "default")


# -- the commands (issue 30's cases, and more) -------------------------------------------------------

COMMAND_CASES = {  # the 20 hand edits, then a few more
    "objects-string": ("objects", "x"), "objects-list-of-int": ("objects", [1]),
    "wal_uploads-null": ("wal_uploads", None), "wal_uploads-list": ("wal_uploads", []),
    "prepared-no-expires_at": ("prepared[0].expires_at", MISSING),
    "prepared-expires_at-string": ("prepared[0].expires_at", "soon"),
    "ranges-missing": ("objects[0].ranges", MISSING), "ranges-null": ("objects[0].ranges", None),
    "key-number": ("objects[0].key", 7), "stream-end-string": ("streams.1.end", "9"),
    "stream_gaps-string": ("stream_gaps", "x"), "data_time-nan": ("objects[0].data_time", NAN),
    "next_object_id-negative": ("next_object_id", -7), "next_object_id-2^70": ("next_object_id", 1 << 70),
    "key-dotdot": ("objects[0].key", "../../etc/passwd"), "deleting-key-dotdot": ("deleting[0].key", "a/../b"),
    "range-end-string": ("objects[0].ranges[0].end", "x"), "size-negative": ("objects[0].size", -1),
    "mark-offset-2^64": ("wal_uploads.-1.offset", 1 << 64), "marked_at-null": ("deleting[0].marked_at", None),
    "gap-from-float": ("stream_gaps[0].from", 1.5), "kind-unknown": ("objects[0].kind", "BIG"),
}
COMMANDS = {  # each reads the newest manifest first; {store}, {wal} filled in
    "ls": ["ls", "--store", "{store}"], "gc": ["gc", "--store", "{store}"],
    "gc-dry-run": ["gc", "--dry-run", "--store", "{store}"],
    "inspect-object": ["inspect-object", "1", "--store", "{store}"],
    "read": ["read", "--store", "{store}", "--stream", "1"],
    "upload-dry-run": ["upload", "{wal}", "--dry-run", "--store", "{store}"],
    "compact-dry-run": ["compact", "--dry-run", "--store", "{store}"],
    "check": ["check", "--store", "{store}"],
}


def _snapshot(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def _hand_edited(built, tmp_path, path: str, value) -> tuple[str, str, str]:
    """A copy of the built store whose newest manifest has ``path`` set to ``value``; (store, wal, key)."""
    store_dir, wal, doc = built
    store = str(tmp_path / "store")
    shutil.copytree(store_dir, store)
    key = mf.manifest_key(doc["number"])
    with open(os.path.join(store, key), "w") as f:
        f.write(json.dumps(_set(doc, path, value), indent=1, sort_keys=True))
    copied_wal = str(tmp_path / "wal")
    shutil.copyfile(wal, copied_wal)
    return store, copied_wal, key


def _args(command: str, store: str, wal: str) -> list[str]:
    return [a.format(store=store, wal=wal) for a in COMMANDS[command]]


def test_every_command_works_on_the_unedited_store(built, tmp_path):
    store, wal, _ = _hand_edited(built, tmp_path, "version", 1)
    for command in COMMANDS:
        if command in ("gc", "check"):
            continue  # gc would delete; check finds the made-up replaced object (99) missing: not a load error
        result = CliRunner().invoke(app, _args(command, store, wal))
        assert result.exit_code == 0, (command, result.stdout, result.stderr)


@pytest.mark.slow  # 22 cases x 8 commands in-process: ~30 s on an idle machine
@pytest.mark.parametrize("case", COMMAND_CASES)
def test_every_command_refuses_a_hand_edited_manifest_with_exit_3(built, tmp_path, case):
    path, value = COMMAND_CASES[case]
    store, wal, key = _hand_edited(built, tmp_path, path, value)
    before = _snapshot(store), _snapshot(str(tmp_path))
    for command in COMMANDS:
        result = CliRunner().invoke(app, [*_args(command, store, wal), "--json"])
        assert result.exit_code == 3, (command, result.exit_code, result.stdout, result.stderr)
        assert f"manifest field {path}" in result.stderr and key in result.stderr, (command, result.stderr)
        error = json.loads(result.stdout.strip().splitlines()[-1])["error"]
        assert error["code"] == 3 and f"manifest field {path}" in error["message"], (command, error)
    assert (_snapshot(store), _snapshot(str(tmp_path))) == before  # nothing written, nothing trimmed


def test_a_real_process_exits_3_with_one_error_line(built, tmp_path):
    store, wal, key = _hand_edited(built, tmp_path, "next_object_id", 1 << 70)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    run = subprocess.run([sys.executable, "-m", "walctl", "upload", wal, "--store", store], capture_output=True,
                         text=True, timeout=60, env=env)
    assert run.returncode == 3 and "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines == [f"walctl: error: manifest field next_object_id: expected an integer in "
                     f"[0, {(1 << 63) - 1}], got {1 << 70}, {key} ({mf._BAD_MANIFEST_HINT})"]
    assert mf.manifest_numbers(open_store(store, create=False))[-1] == built[2]["number"]  # nothing committed


def test_a_deeply_nested_unknown_key_is_a_finding(built):
    _, _, doc = built
    raw = json.dumps(doc)[:-1] + ', "later": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(CorruptionError):
        mf.parse_manifest(raw.encode(), "k")
