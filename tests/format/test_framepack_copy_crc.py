"""frame_pack copies each payload and takes its CRC in one pass (issue 31: copy_crc in _native.c,
SSE4.2 or the table-driven twin). The bytes must be those of the bulk path (split_length_prefixed
+ pack_records) and each record's bodyCRC the crc32c package's, for every payload length around
the copy loop's 8-, 16- and 768-byte strides, at every alignment of the input and of the block,
with the SSE4.2 code and with WALCTL_NATIVE_CRC=soft."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from walctl.format import framepack

pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")

CHECK = r"""
import os, struct, crc32c
from walctl.format import _native, bulk

LENGTHS = list(range(0, 40)) + [767, 768, 769, 783, 784, 785, 1535, 1536, 1537, 2304 + 5, 4096, 65536 + 3]
data = os.urandom(70000)
checked = 0
for skew in range(16):  # where the payloads start in the input (the copy's source alignment)
    for pos in (0, 1, 3, 8, 13):  # where the record starts in the block (its destination alignment)
        payloads = [data[i * 7:i * 7 + n] for i, n in enumerate(LENGTHS)]
        src = bytes(skew) + b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
        limit = pos + sum(24 + 33 + len(p) for p in payloads)
        out = bytearray(limit)
        n, end, used, *_ = _native.frame_pack(out, pos, limit, 4096, src, skew, len(src), False, 9, 2, 100, -1,
                                              1 << 30, 0)
        assert (n, end, used) == (len(payloads), limit, len(src)), (skew, pos, n, end, used)
        expected = bytearray(limit)
        assert bulk.pack_records(expected, pos, limit, 4096, payloads, batch=(9, 2, 100)) == (n, limit)
        assert out == expected, (skew, pos)
        at = pos
        for p in payloads:  # the bodyCRC (record header byte 16) is crc32c(batch header + payload)
            body = bytes(out[at + 24:at + 24 + 33 + len(p)])
            assert body[33:] == p
            assert struct.unpack_from(">I", out, at + 16)[0] == crc32c.crc32c(body), (skew, pos, len(p))
            at += 24 + 33 + len(p)
            checked += 1
print(_native.CRC_IMPL, checked)
"""


@pytest.mark.parametrize("impl", ["default", "soft"])
def test_frame_pack_copies_and_crcs_every_length_at_every_alignment(impl):
    env = dict(os.environ, WALCTL_NATIVE_CRC=impl)
    proc = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    name, checked = proc.stdout.split()
    assert int(checked) == 16 * 5 * 52
    if impl == "soft":
        assert name == "slicing-by-8"
