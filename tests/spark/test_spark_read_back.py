"""A stream uploaded in many uploads, then compacted by the real Spark job, reads back
byte-identical through ``walctl read``'s engine (issue 15), on the local store and on S3 over HTTP."""

from __future__ import annotations

import pytest

from walctl.pipeline.read import ReadFinding, ReadRecord, read_stream
from walctl.store import manifest as mf
from walctl.pipeline.upload import upload

from storehelpers import append, make_wal

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_compacted_store_reads_back_byte_identical(tmp_path, request, spark, backend):
    from walctl.spark.compact import compact

    store = request.getfixturevalue(f"{backend}_store")
    endpoint = request.getfixturevalue("s3_server") if backend == "s3" else None
    wal = make_wal(tmp_path)
    appended: dict[int, list[bytes]] = {}
    for _ in range(4):
        for sid, payloads in append(wal, {1: (6, 300), 2: (4, 200), 3: (3, 100)}, store=store).items():
            appended.setdefault(sid, []).extend(payloads)
        upload(wal, store, block_size=1 * KiB, split_size=1 * MiB)
    before = len(mf.load_latest(store).objects)
    result = compact(store, store.url, endpoint_url=endpoint, spark=spark, split_size=4 * KiB)
    doc = mf.load_latest(store)
    assert result.commit_number and len(doc.objects) < before
    for sid, payloads in appended.items():
        events, _ = read_stream(store, sid)
        assert [e for e in events if isinstance(e, ReadFinding)] == []
        assert [e.batch.payload for e in events if isinstance(e, ReadRecord)] == payloads
