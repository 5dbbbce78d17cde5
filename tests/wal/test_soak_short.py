"""The short version of bench/soak.py (issue 13): a writer fed continuously through a small ring,
drained by its own background upload, or by `walctl upload` from another process, never reaches
full; afterwards every acknowledged record is in exactly one place, exactly once."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "walctl_soak", pathlib.Path(__file__).resolve().parents[2] / "bench" / "soak.py")
soak = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(soak)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["writer", "cron"])
def test_short_soak(tmp_path, mode):
    # 7 s at 0.5 MiB/s of 1 KiB records, fed every 10 ms and batched by group commit (the log grows
    # ~0.7 MiB/s), through a 3 MiB WAL: the log laps the ring; without the drain it would fill in ~4 s.
    # "cron" is the plain writer beside `walctl upload` from another process every 0.5 s, each upload
    # keeping no scanned bytes: its objects come from the streamed second read of the WAL (as above
    # 64 MiB), checked record by record against the scan while the writer goes on appending.
    out = soak.run_soak(str(tmp_path), mode=mode, capacity=3 << 20, rate_mib_s=0.5, seconds=7.0,
                        upload_at=512 << 10, upload_every_s=0.5, upload_keep_bytes=0 if mode == "cron" else None)
    assert out["ring_laps"] > 1 and out["in_store"] > 0 and out["exactly_once"]
    assert out["in_store"] + out["in_wal"] == out["records"]
    assert 0 < out["peak_fill_pct"] < 100
    if mode == "cron":
        assert out["cron_uploads"] > 0
