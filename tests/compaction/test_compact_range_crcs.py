"""Every compaction level that writes an object records each of its ranges' crc32c in the manifest
(ObjectRange ``crc``), from the inputs' checksums, not by reading: SO compaction (one range, the
object's data crc) and force split (a range per SO). SSO compaction (Spark):
tests/cli/test_compact_after_commit.py."""

from __future__ import annotations

from walctl.compaction.so import compact_stream_objects
from walctl.compaction.split import force_split
from walctl.format.crc import crc32c
from walctl.store import manifest as mf

from storehelpers import put_objects

KiB = 1 << 10


def _assert_ranges_carry_their_crcs(store, kinds=("SO",)):
    doc = mf.load_latest(store)
    for o in doc.objects:
        assert o.kind in kinds
        data = store.read_all(o.key)
        position = 0
        for r in o.ranges:
            assert r.crc == crc32c(data[position:position + r.bytes]), (o.key, r)
            position += r.bytes


def test_so_compaction_and_force_split_record_their_outputs_crcs(local_store):
    put_objects(local_store, [[(1, 4, 3000)] for _ in range(6)] + [[(2, 3, 500), (3, 2, 700)]])
    assert compact_stream_objects(local_store, target_size=40 * KiB).commit_number is not None
    assert force_split(local_store).commit_number is not None
    doc = mf.load_latest(local_store)
    assert sum(o.ranges[0].stream_id == 1 for o in doc.objects) < 6  # merged
    _assert_ranges_carry_their_crcs(local_store)
