"""append's summary splits the packing's CPU time (issue 31): feed_us.pack_c, frame_pack's C loops
(copy, CRC, headers), is part of feed_us.pack_cpu; the rest is the writer's Python per block."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from walctl.format import framepack
from walctl.wal.lifecycle import init_wal

MiB = 1 << 20
pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


def test_the_summary_shows_the_c_packing_time_inside_the_packing_cpu_time(tmp_path):
    wal = str(tmp_path / "w")
    init_wal(wal, 16 * MiB)
    payload = os.urandom(64 << 10)
    data = b"".join(len(payload).to_bytes(4, "big") + payload for _ in range(64))  # 4 MiB of records
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", wal, "--input", "-", "--framing",
                           "length-prefixed", "--ack", "ranges", "--json"], input=data, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["records"] == 64
    feed = summary["feed_us"]
    assert 0 < feed["pack_c"] <= feed["pack_cpu"]
