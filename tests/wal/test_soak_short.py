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
    # 7 s at 0.5 MiB/s of 1 KiB records, most in a 4 KiB block of their own (the log grows ~2 MiB/s),
    # through a 4 MiB WAL: the log laps the ring; without the drain it would be full in ~2 s
    out = soak.run_soak(str(tmp_path), mode=mode, capacity=4 << 20, rate_mib_s=0.5, seconds=7.0,
                        upload_at=512 << 10, upload_every_s=0.5)
    assert out["ring_laps"] > 1 and out["in_store"] > 0
    assert out["in_store"] + out["in_wal"] == out["records"]
