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

from walctl.device import open_device
from walctl.errors import UsageError
from walctl.wal.framing import Framing
from walctl.wal.framing import records as _records
from walctl.wal.lifecycle import init_wal, read_wal_state
from walctl.wal.reader import run_scan

MiB = 1 << 20


class Trickle:
    """A reader whose read1 returns at most a random few bytes (a pipe fed slowly)."""

    def __init__(self, data: bytes, seed: int, most: int):
        self.data, self.pos, self.rng, self.most = data, 0, random.Random(seed), most

    def read(self, n: int = -1) -> bytes:  # raw framing reads everything at once
        out = self.data[self.pos:] if n < 0 else self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out

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


@pytest.mark.parametrize("no_native", ["0", "1"])  # the C splitter, then its pure-Python twin
def test_every_acknowledgement_line_arrives(tmp_path, no_native):
    import os

    wal = str(tmp_path / "wal")
    init_wal(wal, 32 * MiB)
    payloads = [bytes([i % 251]) * (i % 300) for i in range(5000)] + [b"z" * (3 * MiB)]
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", wal, "--input", "-", "--framing",
                           "length-prefixed", "--json"], input=_framed(payloads), capture_output=True, timeout=120,
                          env=dict(os.environ, WALCTL_NO_NATIVE=no_native))
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    acks = [line for line in lines if line["type"] == "record"]
    # the lines json.dumps(..., separators=(",", ":")) printed before acknowledgements were batched
    assert list(acks[0]) == ["type", "offset", "stream_id", "base_offset", "count", "payload_bytes", "wal_offset",
                             "stream_offset"]
    assert proc.stdout.decode().splitlines()[:len(acks)] == [json.dumps(a, separators=(",", ":")) for a in acks]
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


@pytest.mark.parametrize("json_out", [False, True])
def test_a_blocks_acknowledgements_are_one_write(monkeypatch, json_out):
    from walctl.commands.append import _acknowledger

    class Out:
        def __init__(self):
            self.writes, self.flushes = [], 0

        def write(self, text):
            self.writes.append(text)

        def flush(self):
            self.flushes += 1

    out = Out()
    monkeypatch.setattr(sys, "stdout", out)
    stats, hooks = _acknowledger(3, json_out)
    payloads = [b"a", b"bb", b"", b"dddd"]
    hooks.on_acks([4096, 4096 + 58, 4096 + 117], (payloads, 10), 1)  # the records of payloads[1:4] in one block
    assert len(out.writes) == 1 and out.flushes == 1
    lines = out.writes[0].splitlines()
    if json_out:
        assert [json.loads(line)["stream_offset"] for line in lines] == [11, 12, 13]
        assert [json.loads(line)["payload_bytes"] for line in lines] == [2, 0, 4]
        assert {json.loads(line)["stream_id"] for line in lines} == {3}
    else:
        assert lines == ["4096", "4154", "4213"]
    assert stats["records"] == 3 and stats["payload_bytes"] == 6
    assert (stats["first_offset"], stats["last_offset"]) == (4096, 4213)


# --- walctl.wal.framing against the one-record-at-a-time parser it replaced -------------------
# (readline for lines, a bytearray for length-prefixed; the errors are today's, word for word),
# with the C splitter and its pure-Python twin (WALCTL_NO_NATIVE=1), reads cut anywhere.

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from walctl.format import bulk  # noqa: E402
from walctl.wal import framing  # noqa: E402


def _reference(data: bytes, kind: Framing) -> tuple[list[bytes], str | None]:
    """The payloads and the error message of the parser before issue 19 (its loop, unbuffered)."""
    if kind is Framing.raw:
        return [data], None
    if kind is Framing.lines:
        lines = data.split(b"\n")
        return lines[:-1] + ([lines[-1]] if lines[-1] else []), None
    out, pos = [], 0
    while len(data) - pos >= 4:
        stop = pos + 4 + int.from_bytes(data[pos:pos + 4], "big")
        if stop > len(data):
            break
        out.append(data[pos + 4:stop])
        pos = stop
    rest = data[pos:]
    if not rest:
        return out, None
    if len(rest) < 4:
        return out, f"truncated length prefix at input byte {pos}"
    return out, f"truncated record at input byte {pos}: length {int.from_bytes(rest[:4], 'big')}, got {len(rest) - 4}"


def _parse(data: bytes, kind: Framing, seed: int, most: int, chunk: int) -> tuple[list[bytes], str | None]:
    out = []
    try:
        for payload in framing.records(Trickle(data, seed, most), kind, chunk):
            out.append(bytes(payload))
    except UsageError as exc:
        return out, str(exc)
    return out, None


@pytest.fixture(params=["native", "python"])
def impl(request, monkeypatch):
    if request.param == "native":
        if not bulk.NATIVE:
            pytest.skip("walctl.format._native is not built here (test_native checks it is where cc exists)")
    else:
        monkeypatch.setattr(bulk, "_native", None)
    return request.param


@pytest.mark.parametrize("kind", [Framing.lines, Framing.length_prefixed, Framing.raw])
def test_empty_input(impl, kind):
    # lines and length-prefixed: no record; raw: the whole (empty) input is one record, as before
    assert _parse(b"", kind, 0, 10, 16) == ([b""] if kind is Framing.raw else [], None)


@pytest.mark.parametrize("data, payloads", [
    (b"a\nb\n", [b"a", b"b"]), (b"a\nb", [b"a", b"b"]), (b"\n\n", [b"", b""]), (b"x", [b"x"]),
    (b"long" * 5000 + b"\nend", [b"long" * 5000, b"end"]), (b"a\r\n", [b"a\r"]),
])
@pytest.mark.parametrize("most", [1, 3, 1 << 20])
def test_lines_cut_anywhere(impl, data, payloads, most):
    assert _parse(data, Framing.lines, 5, most, 8) == (payloads, None)


@pytest.mark.parametrize("data, message", [
    (b"\x00", "truncated length prefix at input byte 0"),
    (b"\x00\x00\x00\x05abc", "truncated record at input byte 0: length 5, got 3"),
    (b"\x00\x00\x00\x01a\x00\x00\x01", "truncated length prefix at input byte 5"),
    (b"\x00\x00\x00\x01a\xff\xff\xff\xff" + b"z" * 100, "truncated record at input byte 5: length 4294967295, got 100"),
])
@pytest.mark.parametrize("most", [1, 2, 1 << 20])
def test_truncated_length_prefix_errors_as_before(impl, data, message, most):
    got = _parse(data, Framing.length_prefixed, 3, most, 4)
    assert got == _reference(data, Framing.length_prefixed)
    assert got[1] == message


@settings(max_examples=150, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=30), cut=st.integers(0, 4),
       kind=st.sampled_from([Framing.lines, Framing.length_prefixed]), most=st.integers(1, 400),
       chunk=st.sampled_from([1, 5, 64, 1 << 20]), seed=st.integers(0, 99))
def test_framing_matches_the_old_parser(payloads, cut, kind, most, chunk, seed):
    if kind is Framing.lines:
        data = b"\n".join(p.replace(b"\n", b"") for p in payloads)
    else:
        data = _framed(payloads)
    data = data[:len(data) - cut] if cut < len(data) else data
    expected = _reference(data, kind)
    assert _parse(data, kind, seed, most, chunk) == expected
    saved = bulk._native
    bulk._native = None  # the pure-Python splitter must agree as well
    try:
        assert _parse(data, kind, seed, most, chunk) == expected
    finally:
        bulk._native = saved


def test_records_are_slices_of_large_reads_not_copies(impl):
    payloads = [bytes([i]) * 100 for i in range(50)]
    reads = []

    class Counting(Trickle):
        def read1(self, n):
            reads.append(n)
            return super().read1(n)

    got = list(framing.records(Counting(_framed(payloads), 0, 1 << 20), Framing.length_prefixed))
    assert [bytes(g) for g in got] == payloads
    assert all(isinstance(g, memoryview) for g in got)
    assert len({id(g.obj) for g in got}) == 1  # every record a view of the one read
    assert len(reads) == 2  # one read for all 50 records, one that saw the end


def test_a_large_record_arriving_in_small_reads_is_joined_once(impl, monkeypatch):
    joined = []
    real_join = framing._Carry._join

    def join(self):
        buf = real_join(self)
        joined.append(len(buf))
        return buf

    monkeypatch.setattr(framing._Carry, "_join", join)
    payload = b"q" * 200_000
    got = [bytes(p) for p in framing.records(Trickle(_framed([payload, b"after"]), 4, 64), Framing.length_prefixed)]
    assert got == [payload, b"after"]
    # the prefix's join (a few bytes) and the whole record's, never one per read (~6000 reads)
    assert len(joined) <= 3 and sum(joined) <= len(payload) + 4 + 200, joined
