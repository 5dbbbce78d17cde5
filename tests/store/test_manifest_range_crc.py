"""ObjectRange's optional ``crc`` (docs/FORMATS.md 5): written back unchanged, absent or null in older
manifests (they still load: split and check then read or skip), anything but a 32-bit unsigned
integer refused at load with the field's path."""

from __future__ import annotations

import json

import pytest

from walctl.errors import CorruptionError
from walctl.store import manifest as mf


def _doc(**range_fields) -> dict:
    r = {"stream_id": 1, "start": 0, "end": 10, "bytes": 500, **range_fields}
    o = {"id": 1, "key": mf.object_key(1), "kind": "SO", "size": 560, "ranges": [r], "order_id": 1,
         "data_time": 1.0}
    doc = json.loads(json.dumps(mf.empty_manifest().to_json()))
    doc.update(number=1, next_object_id=2, objects=[o], streams={"1": {"start": 0, "end": 10}})
    return doc


def _parse(doc: dict) -> mf.Manifest:
    return mf.parse_manifest(json.dumps(doc).encode(), mf.manifest_key(1))


def test_crc_round_trips_and_older_manifests_load_without_it():
    m = _parse(_doc(crc=0xDEADBEEF))
    assert m.objects[0].ranges[0].crc == 0xDEADBEEF
    assert m.objects[0].ranges[0].to_json()["crc"] == 0xDEADBEEF
    old = _parse(_doc())
    assert old.objects[0].ranges[0].crc is None and "crc" not in old.objects[0].ranges[0].to_json()
    assert _parse(_doc(crc=None)).objects[0].ranges[0].crc is None


@pytest.mark.parametrize("bad", ["x", -1, 1 << 32, 1.5, True, [1]])
def test_a_bad_crc_is_refused_naming_its_path(bad):
    with pytest.raises(CorruptionError, match=r"objects\[0\]\.ranges\[0\]\.crc"):
        _parse(_doc(crc=bad))
