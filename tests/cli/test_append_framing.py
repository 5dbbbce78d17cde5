"""append's length-prefixed input, parsed from large reads (issue 19): records of any size cut
anywhere by the reads come out whole, in order; truncation names its input byte; every
acknowledgement line arrives though they are flushed in batches."""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys

import pytest

from walctl.commands.append import Framing, _records
from walctl.device import open_device
from walctl.errors import UsageError
from walctl.wal.ops import init_wal, read_wal_state
from walctl.wal.reader import run_scan

MiB = 1 << 20


class Trickle:
    """A reader whose read1 returns at most a random few bytes (a pipe fed slowly)."""

    def __init__(self, data: bytes, seed: int, most: int):
        self.data, self.pos, self.rng, self.most = data, 0, random.Random(seed), most

    def read1(self, n: int) -> bytes:
        take = min(n, self.rng.randint(1, self.most))
        out = self.data[self.pos:self.pos + take]
        self.pos += len(out)
        return out


def _framed(payloads) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


@pytest.mark.parametrize("most", [1, 7, 4096, 3 * MiB])
def test_records_cut_anywhere_by_the_reads_come_out_whole(most):
    rng = random.Random(most)
    payloads = [b"", b"x", rng.randbytes(100), rng.randbytes(2 * MiB + 3), rng.randbytes(1000), b"",
                rng.randbytes(5000)]
    got = list(_records(Trickle(_framed(payloads), 1, most), Framing.length_prefixed))
    assert got == payloads


@pytest.mark.parametrize("cut, message", [
    (2, "truncated length prefix at input byte 104"),
    (4 + 50, "truncated record at input byte 104: length 100, got 50"),
])
def test_truncated_input_names_the_byte(cut, message):
    data = _framed([b"a" * 100, b"b" * 100])[:104 + cut]  # the second record starts at byte 104
    with pytest.raises(UsageError, match=message):
        list(_records(Trickle(data, 2, 33), Framing.length_prefixed))


def test_every_acknowledgement_line_arrives(tmp_path):
    wal = str(tmp_path / "wal")
    init_wal(wal, 32 * MiB)
    payloads = [bytes([i % 251]) * (i % 300) for i in range(5000)] + [b"z" * (3 * MiB)]
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", wal, "--input", "-", "--framing",
                           "length-prefixed", "--json"], input=_framed(payloads), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    acks = [line for line in lines if line["type"] == "record"]
    assert [a["base_offset"] for a in acks] == list(range(len(payloads)))
    assert [a["payload_bytes"] for a in acks] == [len(p) for p in payloads]
    assert lines[-1]["type"] == "summary" and lines[-1]["records"] == len(payloads)
    dev = open_device(wal, writable=False)
    try:
        entries, _ = run_scan(dev, read_wal_state(dev, wal).header)
    finally:
        dev.close()
    assert [e.batch.payload for e in entries] == payloads
    assert [e.offset for e in entries] == [a["offset"] for a in acks]
