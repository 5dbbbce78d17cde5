"""The short version of bench/chaos_soak.py (issue 27): a writer fed faster than the disk with
--upload-at, a cron upload, two `read --follow --wal` followers, SO compaction and gc, each
SIGKILLed at random, for a few seconds; the oracle (the writers' acknowledgements) finds every
acknowledged record in the store exactly once and in each follower's output exactly once, in
order, with no finding and no hang. On a file WAL with a local store, and on a loop device with
the store on S3 over HTTP behind a proxy that drops every connection now and then."""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "walctl_chaos", pathlib.Path(__file__).resolve().parents[2] / "bench" / "chaos_soak.py")
chaos = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(chaos)

SECONDS = float(os.environ.get("WALCTL_CHAOS_SECONDS", "15"))


def _check(out: dict) -> None:
    assert not out["problems"], out["problems"]
    assert out["records_acked"] > 1000 and out["writer_kills"] >= 2 and out["follower_kills"] >= 1, out
    assert out["store_records"] >= out["records_acked"], out


@pytest.mark.slow
def test_chaos_file_wal_local_store(tmp_path):
    run = chaos.Chaos(str(tmp_path), device=None, store_url=None, env=None, capacity=16 << 20, record_bytes=1024,
                      upload_at="1MiB", seconds=SECONDS, seed=int.from_bytes(os.urandom(4), "big"),
                      kill_every_s=(1.5, 3.0))
    _check(run.run())


@pytest.mark.slow
def test_chaos_loop_device_s3_with_outages(tmp_path, loop_device):
    s3 = chaos.S3Service()  # moto and the dropping proxy in a process of their own
    try:
        run = chaos.Chaos(str(tmp_path), device=loop_device(16 << 20), store_url=s3.store_url, env=s3.env,
                          capacity=16 << 20, record_bytes=1024, upload_at="1MiB", seconds=SECONDS,
                          seed=int.from_bytes(os.urandom(4), "big"), kill_every_s=(1.5, 3.0), proxy=s3)
        out = run.run()
    finally:
        s3.close()
    _check(out)
    assert out["proxy_outages"] >= 1
