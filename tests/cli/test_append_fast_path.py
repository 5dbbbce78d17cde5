"""append's C path (issue 31): --ack ranges prints durable ranges that cover exactly the records
a per-record run acknowledges; --input FILE (read with large reads, not a pipe) writes the same
log as the same bytes piped; the log and the acknowledgements match the pure-Python path's byte
for byte; recover --payload hex|base64|text prints the same lines through the C renderer."""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import sys

import pytest

from walctl.format import framepack
from walctl.format.header import HEADERS_SIZE
from walctl.wal.lifecycle import init_wal

MiB = 1 << 20
pytestmark = pytest.mark.skipif(not framepack.AVAILABLE, reason="walctl.format._native is not built here")


def framed(payloads) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


def payloads_of(seed: int, n: int = 3000) -> list[bytes]:
    rng = random.Random(seed)
    out = [rng.randbytes(rng.choice([0, 1, 100, 1000, 5000])) for _ in range(n)]
    out.append(rng.randbytes(300 << 10))  # larger than a block: a block of its own
    return out


# Blocks close only when full (or at the close): the same blocks, so the same offsets, in every run.
SAME_BLOCKS = ("--batch-interval", "60s")


def walctl(*args, data: bytes | None = None, env: dict | None = None, stdin=None) -> subprocess.CompletedProcess:
    if args[0] == "append":
        args = (*args, *SAME_BLOCKS)
    proc = subprocess.run([sys.executable, "-m", "walctl", *args], input=data, stdin=stdin, capture_output=True,
                          timeout=120, env=dict(os.environ, **(env or {})))
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def ring(path) -> bytes:
    with open(path, "rb") as f:
        f.seek(HEADERS_SIZE)
        return f.read()


def lines(proc) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_ranges_cover_exactly_the_acknowledged_records(tmp_path):
    payloads = payloads_of(1)
    walr, walp = str(tmp_path / "r"), str(tmp_path / "p")
    for wal in (walr, walp):
        init_wal(wal, 32 * MiB)
    per_record = [x for x in lines(walctl("append", walp, "--stream", "4", "--input", "-", "--framing",
                                          "length-prefixed", "--json", data=framed(payloads)))
                  if x["type"] == "record"]
    out = lines(walctl("append", walr, "--stream", "4", "--input", "-", "--framing", "length-prefixed", "--json",
                       "--ack", "ranges", data=framed(payloads)))
    ranges, summary = out[:-1], out[-1]
    assert {r["type"] for r in ranges} == {"range"} and summary["type"] == "summary"
    assert len(ranges) < len(payloads) // 10  # a line per durable range, not per record
    # back to back, in order, covering every record once
    assert [r["base_offset"] for r in ranges] == [0] + [sum(r["count"] for r in ranges[:i])
                                                        for i in range(1, len(ranges))]
    assert sum(r["count"] for r in ranges) == len(payloads) == summary["records"]
    by_base = {a["base_offset"]: a for a in per_record}
    for r in ranges:
        assert r["stream_id"] == 4
        assert r["first_offset"] == by_base[r["base_offset"]]["offset"]
        assert r["last_offset"] == by_base[r["base_offset"] + r["count"] - 1]["offset"]
        assert r["payload_bytes"] == sum(len(p) for p in payloads[r["base_offset"]:r["base_offset"] + r["count"]])
    assert ring(walr) == ring(walp)  # the acknowledgement mode changes nothing in the log


def test_ranges_in_text_and_for_data_arguments(tmp_path):
    wal = str(tmp_path / "w")
    init_wal(wal, 8 * MiB)
    text = walctl("append", wal, "--input", "-", "--ack", "ranges", data=b"a\nbb\nccc\n").stdout.decode()
    assert text == "0 117 0 3\n"  # FIRST LAST BASE COUNT: 58 bytes for "a" (24 + 33 + 1), 59 for "bb"
    out = lines(walctl("append", wal, "x", "yy", "--ack", "ranges", "--json"))
    assert out[0] == {"type": "range", "stream_id": 0, "first_offset": 4096, "last_offset": 4154,
                      "first_wal_offset": 4096, "last_wal_offset": 4154, "base_offset": 3,
                      "count": 2, "payload_bytes": 3}


def test_input_file_writes_what_the_same_bytes_piped_write(tmp_path):
    payloads = payloads_of(2)
    data = framed(payloads)
    src = tmp_path / "input.bin"
    src.write_bytes(data)
    walf, walp = str(tmp_path / "f"), str(tmp_path / "p")
    for wal in (walf, walp):
        init_wal(wal, 32 * MiB)
    by_file = walctl("append", walf, "--input", str(src), "--framing", "length-prefixed", "--json")
    with open(src, "rb") as f:
        piped = walctl("append", walp, "--input", "-", "--framing", "length-prefixed", "--json", stdin=f)
    assert ring(walf) == ring(walp)
    assert [x for x in lines(by_file) if x["type"] == "record"] == [x for x in lines(piped) if x["type"] == "record"]
    assert lines(by_file)[-1]["feed_us"]["reads"] <= len(data) // (1 << 20) + 3  # large reads, not a pipe's


@pytest.mark.parametrize("framing", ["length-prefixed", "lines"])
def test_the_c_path_writes_and_acknowledges_what_the_python_path_does(tmp_path, framing):
    payloads = payloads_of(3)
    if framing == "lines":
        payloads = [p.replace(b"\n", b"") for p in payloads]
        data = b"".join(p + b"\n" for p in payloads)[:-1]  # the last line without its newline
    else:
        data = framed(payloads)
    out = {}
    for native in ("0", "1"):
        wal = str(tmp_path / f"w{native}")
        init_wal(wal, 32 * MiB)
        proc = walctl("append", wal, "--input", "-", "--framing", framing, "--json", data=data,
                      env={"WALCTL_NO_NATIVE": native})
        text = proc.stdout.decode()
        out[native] = (ring(wal), text[:text.index('{"type":"summary"')])
    assert out["0"] == out["1"]
    assert out["0"][1].count("\n") == len(payloads)


def _untimed(out: bytes) -> bytes:
    """The output without the summary documents' "time" (when each run ended: never the same)."""
    return re.sub(rb',"time":"[^"]*"', b"", out)


@pytest.mark.parametrize("payload", ["hex", "base64", "text"])
def test_recover_payload_lines_are_the_python_renderings(tmp_path, payload):
    rng = random.Random(4)
    records = [rng.randbytes(rng.randint(0, 300)) for _ in range(2000)]
    records += [b"plain ascii text", "caf\u00e9 \"q\" \\".encode(), b"\x00\xff"]  # text JSON escapes
    wal = str(tmp_path / "w")
    init_wal(wal, 16 * MiB)
    walctl("append", wal, "--stream", "2", "--input", "-", "--framing", "length-prefixed", data=framed(records))
    fast = walctl("recover", wal, "--json", "--payload", payload).stdout
    slow = walctl("recover", wal, "--json", "--payload", payload, env={"WALCTL_NO_NATIVE": "1"}).stdout
    assert _untimed(fast) == _untimed(slow)  # byte for byte, but the summary's time of day
    got = [x for x in (json.loads(line) for line in fast.splitlines()) if x["type"] == "record"]
    assert len(got) == len(records)
    if payload == "hex":
        assert [bytes.fromhex(x["payload"]) for x in got] == records
