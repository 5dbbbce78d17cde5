"""frame_pack counts the CPU time of its C loops (issue 31: append's feed_us.pack_c, the copy and
CRC part of pack_cpu; the rest is the writer's Python around the calls)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from walctl.format import framepack

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


def test_cpu_ns_grows_by_the_packing_time():
    payload = os.urandom(64 << 10)
    src = b"".join(len(payload).to_bytes(4, "big") + payload for _ in range(64))  # 4 MiB of records
    out = bytearray(len(src) + 64 * 57)
    before = framepack.cpu_ns()
    count = 0
    for _ in range(8):  # 32 MiB copied and CRC'd: milliseconds of CPU on any machine
        count += framepack.frame_pack(out, 0, len(out), 0, src, 0, len(src), False, 1, 0, 0, -1, 1 << 30, 0)[0]
    spent = framepack.cpu_ns() - before
    assert count == 8 * 64
    assert 0 < spent < 10 ** 10
    assert framepack.cpu_ns() - before == spent  # only frame_pack moves it


def test_cpu_ns_is_zero_without_the_c_extension():
    code = "from walctl.format import framepack; print(framepack.AVAILABLE, framepack.cpu_ns())"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, WALCTL_NO_NATIVE="1"),
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == ["False", "0"]
