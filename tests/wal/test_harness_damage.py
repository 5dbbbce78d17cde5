"""Fault-injection harness: torn and damaged blocks in WAL images, and what recovery makes of them.

Each damage class is applied to a log whose writer crashed (header ungraceful: the damage
lies in its last window, a crash explains it, exit 0) and to the same log closed cleanly
(the same damage is corruption, exit 3; a damaged header slot stays explained). Recovery
must return exactly the intact records, byte for byte, and classify each finding by kind
and cause (``recover --json``). A randomized run then applies random damage many times
(WALCTL_SOAK=1 raises the count) to in-memory copies of the images.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from typer.testing import CliRunner

from walctl.cli import app
from walctl.device import MemoryDevice
from walctl.format import record as rec
from walctl.format.header import HEADERS_SIZE
from walctl.wal import reader
from walctl.wal.headers import read_headers
from walctl.wal.trim import trim_wal

from walhelpers import append_records, header_of, new_wal, payload_for, peek, physical, poke

KiB, MiB = 1 << 10, 1 << 20
SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")
RANDOM_TRIALS = int(os.environ.get("WALCTL_DAMAGE_TRIALS", "20000" if SOAK else "1000"))
STATS = {"cases": 0, "records_checked": 0, "findings_classified": 0}


# -- logs ------------------------------------------------------------------------------------

def flat_log(path, clean: bool, size: int = 3000, count: int = 40):
    """One record per block: record i at offset i * block (3000 B: 4 KiB blocks; 10000 B: 12 KiB)."""
    path = new_wal(path, 4 * MiB)
    acks = append_records(path, count, size=size, iodepth=1, flush_each=True, clean=clean)
    return path, acks, None


def wrapped_log(path, clean: bool):
    """A 64 KiB WAL (ring 56 KiB) in its second lap; returns it with the bytes of lap 0's block 2."""
    path = new_wal(path, 64 * KiB)
    first = append_records(path, 10, size=3000, iodepth=1, flush_each=True)
    old_block = peek(path, physical(path, 8192), 4096)
    trim_wal(path, first[7][0])
    second = append_records(path, 8, size=3000, iodepth=1, flush_each=True, clean=clean)
    ring = 64 * KiB - HEADERS_SIZE
    assert [o for o, _ in second][4:6] == [ring, ring + 4096]
    return path, first[8:] + second, old_block


def padded_log(path, clean: bool):
    """A lap-end padding record covering [44 KiB, 56 KiB), then a 16 KiB record in lap 1."""
    path = new_wal(path, 64 * KiB)
    first = append_records(path, 11, size=3000, iodepth=1, flush_each=True)
    trim_wal(path, first[9][0])
    second = append_records(path, 1, size=14000, iodepth=1, flush_each=True, clean=clean)
    ring = 64 * KiB - HEADERS_SIZE
    assert second[0][0] == ring
    head = rec.RecordHeader.decode(peek(path, physical(path, 44 * KiB), rec.SIZE), expected_offset=44 * KiB)
    assert head.is_padding and head.end == ring
    return path, first[10:] + second, None


# -- damage ----------------------------------------------------------------------------------

def flip(path, offset, delta, bit=0x01):
    pos = physical(path, offset) + delta
    poke(path, pos, bytes([peek(path, pos, 1)[0] ^ bit]))


def zero(path, offset, length=4096):
    poke(path, physical(path, offset), bytes(length))


def garbage(path, offset, length=4096, seed=7):
    poke(path, physical(path, offset), random.Random(seed).randbytes(length))


def slot_damage(path, which):
    state = header_of(path)
    slot = state.current if which == "current" else 1 - state.current
    poke(path, slot * 4096 + 30, bytes([peek(path, slot * 4096 + 30, 1)[0] ^ 0x10]))


def all_but(acks, *drop):
    return [a for i, a in enumerate(acks) if i not in drop and i - len(acks) not in drop]


# (name, log builder, damage(path, acks, extra), survivors(acks),
#  crashed: expected [(kind, cause)], clean: expected [(kind, cause)] or None for "same as crashed")
CASES = [
    ("zeroed 4 KiB sector mid-log", flat_log, lambda p, a, x: zero(p, a[20][0]),
     lambda a: all_but(a, 20), [("hole", "zero_fill")], None),
    ("random bytes over a block", flat_log, lambda p, a, x: garbage(p, a[20][0]),
     lambda a: all_but(a, 20), [("hole", "garbage")], None),
    ("random bytes after a block's last record", flat_log, lambda p, a, x: garbage(p, a[20][0] + 3057, 4096 - 3057),
     lambda a: a, [("hole", "garbage")], None),
    ("flipped bit in a record header's length", flat_log, lambda p, a, x: flip(p, a[20][0], 6),
     lambda a: all_but(a, 20), [("hole", "checksum_mismatch")], None),
    ("flipped bit in a record header's magic", flat_log, lambda p, a, x: flip(p, a[20][0], 1, 0x80),
     lambda a: all_but(a, 20), [("hole", "checksum_mismatch")], None),
    ("flipped bit in a record header's crc", flat_log, lambda p, a, x: flip(p, a[20][0], 22),
     lambda a: all_but(a, 20), [("hole", "checksum_mismatch")], None),
    ("flipped bit in a body mid-log", flat_log, lambda p, a, x: flip(p, a[20][0], 24 + 33 + 1500),
     lambda a: all_but(a, 20), [("hole", "checksum_mismatch")], None),
    ("flipped bit in the last body", flat_log, lambda p, a, x: flip(p, a[-1][0], 24 + 33 + 10),
     lambda a: all_but(a, -1), [("torn_tail", "torn_tail")], [("torn_tail", "torn_tail"), ("end_mismatch", "end_mismatch")]),
    ("last block never written", flat_log, lambda p, a, x: zero(p, a[-1][0]),
     lambda a: all_but(a, -1), [], [("end_mismatch", "end_mismatch")]),
    ("block half written mid-log", lambda p, c: flat_log(p, c, size=10000, count=20),
     lambda p, a, x: zero(p, a[10][0] + 6144, 6144),
     lambda a: all_but(a, 10), [("hole", "checksum_mismatch")], None),
    ("block half written at the tail", lambda p, c: flat_log(p, c, size=10000, count=20),
     lambda p, a, x: zero(p, a[-1][0] + 6144, 6144),
     lambda a: all_but(a, -1), [("torn_tail", "torn_tail")], [("torn_tail", "torn_tail"), ("end_mismatch", "end_mismatch")]),
    ("bad header slot: the older one", flat_log, lambda p, a, x: slot_damage(p, "other"),
     lambda a: a, [("bad_header_slot", "bad_header_slot")], [("bad_header_slot", "bad_header_slot")]),
    ("stale data of an earlier lap", wrapped_log,
     lambda p, a, x: poke(p, physical(p, a[-2][0]), x),
     lambda a: all_but(a, -2), [("hole", "stale_lap")], None),
    ("padding record cut short", padded_log,
     lambda p, a, x: poke(p, physical(p, 44 * KiB), rec.RecordHeader.padding(44 * KiB, 4096).encode()),
     lambda a: a, [("hole", "zero_fill")], None),
    ("padding record never written", padded_log,
     lambda p, a, x: zero(p, 44 * KiB),
     lambda a: a, [("hole", "zero_fill")], None),
]


def recover_json(path: str, *args) -> tuple[int, list[dict], list[dict]]:
    result = CliRunner().invoke(app, ["recover", path, "--json", "--payload", "hex", *args])
    assert "Traceback" not in result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert lines and lines[-1]["type"] == "summary"
    if result.exit_code:
        assert len([x for x in result.stderr.splitlines() if x.startswith("walctl: error: ")]) == 1
    return (result.exit_code, [x for x in lines if x["type"] == "record"],
            [x for x in lines if x["type"] == "finding"])


def check_payloads(records: list[dict], survivors: list[tuple[int, int]]) -> None:
    """Exactly the intact records, in order, byte for byte."""
    assert [(r["offset"], r["base_offset"]) for r in records] == survivors
    for r in records:
        payload = bytes.fromhex(r["payload"])
        assert payload == payload_for(0, r["base_offset"], len(payload))
        assert len(payload) in (3000, 10000, 14000)


@pytest.mark.parametrize("clean", [False, True], ids=["crashed", "clean"])
@pytest.mark.parametrize("name,builder,damage,survivors,crashed,clean_kinds", CASES, ids=[c[0] for c in CASES])
def test_damage_is_classified_and_only_intact_records_return(tmp_path, name, builder, damage, survivors, crashed,
                                                             clean_kinds, clean, capsys):
    path, acks, extra = builder(tmp_path / "w", clean)
    damage(path, acks, extra)
    code, records, findings = recover_json(path, "--hexdump")
    check_payloads(records, survivors(acks))
    expected = crashed if not clean or clean_kinds is None else clean_kinds
    assert [(f["kind"], f["cause"]) for f in findings] == expected, findings
    slot_only = all(k == "bad_header_slot" for k, _ in expected)
    for f in findings:
        assert f["explained_by_crash"] == (not clean or f["kind"] == "bad_header_slot")
        assert f["hexdump"] and len(f["hexdump"].splitlines()) <= 16
    assert code == (0 if not clean or slot_only else 3)
    STATS["cases"] += 1
    STATS["records_checked"] += len(records)
    STATS["findings_classified"] += len(findings)


# -- randomized damage on in-memory copies ----------------------------------------------------

DAMAGES = ("zero_sector", "garbage_sector", "flip_header", "flip_body", "stale_lap", "half_block", "slot")


def _memory(image: bytes) -> MemoryDevice:
    mem = MemoryDevice(len(image))
    mem.data[:] = image
    return mem


def _random_damage(rng, image: bytearray, acks, ring: int, old_block: bytes):
    """Damage one record's block; returns (index damaged or None, the causes it may be given)."""
    kind = rng.choice(DAMAGES)
    i = rng.randrange(len(acks))
    pos = HEADERS_SIZE + acks[i][0] % ring
    if kind == "zero_sector":
        image[pos:pos + 4096] = bytes(4096)
        return i, {"zero_fill"}
    if kind == "garbage_sector":
        image[pos:pos + 4096] = rng.randbytes(4096)
        return i, {"garbage", "checksum_mismatch"}
    if kind == "flip_header":
        image[pos + rng.randrange(24)] ^= 1 << rng.randrange(8)
        return i, {"checksum_mismatch", "stale_lap", "garbage"}
    if kind == "flip_body":
        image[pos + 24 + rng.randrange(3033)] ^= 1 << rng.randrange(8)
        return i, {"checksum_mismatch"}
    if kind == "half_block":
        cut = rng.choice([512, 1024, 2048, 3000])  # the record ends at 3057
        image[pos + cut:pos + 4096] = bytes(4096 - cut)
        return i, {"checksum_mismatch"}
    if kind == "stale_lap":
        image[pos:pos + 4096] = old_block
        return i, {"stale_lap"}
    slot = rng.randrange(2)
    image[slot * 4096 + rng.randrange(64)] ^= 1 << rng.randrange(8)
    return None, {"bad_header_slot"}


def test_random_damage_returns_exactly_the_intact_records(tmp_path, capsys):
    """Random damage to one block of a crashed, wrapped log: every other record returns intact,
    the damaged one never does, and each finding carries a cause its damage can produce."""
    path, acks, old_block = wrapped_log(tmp_path / "w", clean=False)
    ring = 64 * KiB - HEADERS_SIZE
    with open(path, "rb") as f:
        base = f.read()
    rng = random.Random(int(os.environ.get("WALCTL_DAMAGE_SEED", "6")))
    for trial in range(RANDOM_TRIALS):
        image = bytearray(base)
        damaged, causes = _random_damage(rng, image, acks, ring, old_block)
        mem = _memory(bytes(image))
        state = read_headers(mem)  # one flip never hits both slots
        entries, result = reader.run_scan(mem, state.header)
        got = [(e.offset, e.batch.base_offset) for e in entries]
        expected = [a for j, a in enumerate(acks) if j != damaged]
        assert got == expected, (trial, damaged, causes, [f.to_json() for f in result.findings])
        for e in entries:
            assert e.batch.payload == payload_for(0, e.batch.base_offset, 3000)
        for f in result.findings:
            if f.kind in ("hole", "torn_tail", "bad_header_slot"):
                assert f.cause in causes | {"torn_tail"}, (trial, f.to_json(), causes)
        STATS["records_checked"] += len(entries)
        STATS["findings_classified"] += len(result.findings)
    STATS["cases"] += RANDOM_TRIALS
    with capsys.disabled():
        print(f"\ndamage harness: {STATS['cases']} damaged images, {STATS['records_checked']} records checked "
              f"intact, {STATS['findings_classified']} findings classified, 0 lost or corrupt")
