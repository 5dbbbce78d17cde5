"""store/manifest.py's small parts, exactly (issue 32: mutmut left 132 of its 446 mutants alive with
tests/store/test_manifest.py alone): keys, the listing, loading errors, commit fields, argv redaction."""

from __future__ import annotations

import json
import uuid

import pytest

from walctl.errors import CorruptionError, NotFoundError
from walctl.store import manifest as mf


def test_object_and_manifest_keys_are_laid_out_as_documented():
    # the id's 8 hex digits reversed first: keys spread over S3 prefixes (FORMATS.md)
    assert mf.object_key(0x1234) == "43210000/default/4660"
    assert mf.object_key(1, "ns") == "10000000/ns/1"
    assert mf.manifest_key(7) == "manifest/" + "7".rjust(mf.NUMBER_DIGITS, "0") + ".json"


def test_manifest_numbers_take_only_numbered_json_files(local_store):
    for n in (3, 12, 5):
        local_store.put(mf.manifest_key(n), b"{}")
    for name in ("notes.txt", "x1.json", "7.json.partial", "8.json", "\u00b3.json", "old/" + mf.manifest_key(9)[9:]):
        local_store.put(f"manifest/{name}", b"{}")
    local_store.put(mf.manifest_key(4)[9:], b"{}")  # outside manifest/
    assert mf.manifest_numbers(local_store) == [3, 5, 12]
    local_store.put(mf.manifest_key(10 ** 19), b"{}")  # all 20 digits significant
    assert mf.manifest_numbers(local_store) == [3, 5, 12, 10 ** 19]


def test_a_manifest_copied_into_a_subfolder_or_unpadded_is_not_the_latest(local_store):
    """A copy an operator keeps next to the manifests (manifest/backup/<n>.json, or manifest/7.json)
    is not manifest n: load_latest read manifest_key(n) for it and every command failed."""
    mf.commit(local_store, lambda m: None, command="one")
    raw = local_store.read_all(mf.manifest_key(1))
    local_store.put("manifest/backup/" + mf.manifest_key(9)[9:], raw)
    local_store.put("manifest/7.json", raw)
    assert mf.manifest_numbers(local_store) == [1]
    assert mf.load_latest(local_store).number == 1
    assert mf.commit(local_store, lambda m: None, command="two").number == 2


def test_an_empty_store_is_the_empty_manifest_unless_required(local_store):
    assert mf.load_latest(local_store) == mf.empty_manifest()
    with pytest.raises(NotFoundError) as info:
        mf.load_latest(local_store, required=True)
    err = info.value
    assert str(err).startswith("no manifest: not a walctl store, or nothing uploaded yet")
    assert err.where == f"{local_store.url}/manifest/"
    assert err.hint == "check --store; the first 'walctl upload' creates the store"


def _put_raw(store, number, doc) -> str:
    key = mf.manifest_key(number)
    store.put(key, doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return key


@pytest.mark.parametrize("raw, message", [
    (b"{not json", "manifest is not valid JSON: "),
    (b"[]", "manifest field "),
    ({"version": 1}, "manifest field "),
])
def test_a_broken_manifest_is_corruption_naming_its_key(local_store, raw, message):
    key = _put_raw(local_store, 1, raw)
    with pytest.raises(CorruptionError) as info:
        mf.load_latest(local_store)
    assert str(info.value).startswith(message) and info.value.where == key
    assert info.value.hint == mf._BAD_MANIFEST_HINT


def test_a_manifest_under_another_number_is_corruption(local_store):
    mf.commit(local_store, lambda m: None, command="test")
    doc = json.loads(local_store.read_all(mf.manifest_key(1)))
    key = _put_raw(local_store, 2, doc)  # manifest 1's document stored as manifest 2
    with pytest.raises(CorruptionError) as info:
        mf.load_latest(local_store)
    assert str(info.value).startswith("manifest says number 1") and info.value.where == key


def test_each_commit_has_its_own_id_parent_time_and_writer(local_store, monkeypatch):
    monkeypatch.setattr("sys.argv", ["walctl", "upload", "--secret-key", "s3cr3t", "w.img"])
    first = mf.commit(local_store, lambda m: None, command="test one").manifest
    second = mf.commit(local_store, lambda m: None, command="test two").manifest
    assert uuid.UUID(first.commit_id) != uuid.UUID(second.commit_id)
    assert (first.number, first.parent, second.number, second.parent) == (1, None, 2, 1)
    assert 0 < first.time <= second.time
    import os
    assert second.writer == {"host": os.uname().nodename, "pid": os.getpid(), "command": "test two",
                             "argv": ["upload", "--secret-key", "<redacted>", "w.img"]}
    assert mf.load(local_store, 2) == second


@pytest.mark.parametrize("argv, safe", [
    (["--secret-key", "abc", "x"], ["--secret-key", "<redacted>", "x"]),
    (["--secret-key=abc", "x"], ["--secret-key=<redacted>", "x"]),
    (["--token=a=b"], ["--token=<redacted>"]),  # a value holding "=": none of it is kept
    (["--access-key", "AK", "--token=t"], ["--access-key", "<redacted>", "--token=<redacted>"]),
    (["PASSWORD"], ["<redacted>"]),
    (["s3://user:pw@host/bucket", "--stream", "1"], ["s3://<redacted>@host/bucket", "--stream", "1"]),
    (["http://host/a@b"], ["http://host/a@b"]),
    (["--credential"], ["--credential"]),  # a secret flag last: nothing follows to redact
    (["plain", "--json"], ["plain", "--json"]),
])
def test_argv_is_recorded_without_secrets(argv, safe):
    assert mf._safe_argv(argv) == safe
