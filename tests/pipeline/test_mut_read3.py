"""walctl/pipeline/read.py's WAL pass (issue 32, the last two survivors of its mutmut run): offsets
missing from both the store and the WAL of a stopped writer are a gap at once (not a WAL that moved),
and a manifest damaged in place between two --follow polls is named by its key.

In-process on a local store and a 1 MiB WAL file; the polls' clock and sleep are the test's.
"""

from __future__ import annotations

import pytest

from walctl.errors import CorruptionError
from walctl.format.batch import StreamRecordBatch
from walctl.pipeline.read import GAP, StreamReader, read_stream
from walctl.pipeline.upload import upload
from walctl.store import manifest as mf
from walctl.wal.lifecycle import open_writer

from storehelpers import MiB, make_wal, payload
from storehelpers import append as wal_append
from tests.pipeline.test_mut_read import Clock, finds


def uploaded_wal(tmp_path, store) -> str:
    """Stream 1's offsets [0, 3) uploaded to ``store``, and the WAL they came from."""
    wal = make_wal(tmp_path, capacity=1 * MiB)
    wal_append(wal, {1: (3, 50)})
    upload(wal, store)
    return wal


def test_offsets_missing_from_the_store_and_a_stopped_writer_s_wal_are_a_gap(tmp_path, local_store):
    wal = uploaded_wal(tmp_path, local_store)
    opened = open_writer(wal, scan=True)
    at = opened.writer.append(StreamRecordBatch(1, 0, 5, 1, payload(1, 5, 50)).encode(), None, (1, 6))
    opened.writer.close()  # the writer stopped: nothing is in flight, the manifest is the newest
    c = Clock()
    events, s = read_stream(local_store, 1, wal=wal, sleep=c.sleep, clock=c)
    assert [(e.batch.base_offset, e.source) for e in events if hasattr(e, "batch")] == \
        [(0, "store"), (1, "store"), (2, "store"), (5, "wal")]
    assert finds(events) == [(GAP, "stream 1: offsets [3, 5) are neither in the store nor in the WAL", 3, 5,
                              None, None, at)]
    assert (s.polls, s.retries, s.log_moved, c.slept) == (1, 0, False, [])


def test_a_manifest_damaged_between_polls_is_named_by_its_key(tmp_path, local_store):
    wal = uploaded_wal(tmp_path, local_store)
    key = mf.manifest_key(mf.manifest_numbers(local_store)[-1])
    c = Clock(on_sleep=lambda n: local_store.put(key, b"{not json"))
    r = StreamReader(local_store, 1, wal=wal)
    got = []
    with pytest.raises(CorruptionError) as e:
        for event in r.events(follow=True, sleep=c.sleep, clock=c):
            got.append(event)
    assert [ev.batch.base_offset for ev in got] == [0, 1, 2]  # the first poll, before the damage
    assert e.value.where == key and e.value.what.startswith("manifest is not valid JSON")
    assert r.summary.polls == 2 and c.slept == [0.2]
