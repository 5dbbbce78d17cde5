"""Forensics of AutoMQ's own block WALs (V0 and V1 headers) and objects (footer version 0).

The images are built byte by byte from AutoMQ's layouts (s3stream BlockWALHeader,
RecordHeader, WALUtil, SlidingWindowService), with struct and zlib only, independent of
walctl's encoders:
- header slot: magic, capacity, trimOffset, lastWriteTimestamp, slidingWindowMaxLength,
  shutdownType, nodeId (i32), epoch (i64), crc (i32) over [0, 52); crc = CRC32 & 0x7FFFFFFF;
- record: magic 0x87654321, bodyLength, bodyOffset = offset + 24, bodyCrc, headerCrc (same crc);
- blocks 4 KiB aligned, padded with stale buffer bytes (here: random bytes);
- V0: a block that does not fit at the end of the lap starts at the next lap (the tail stays
  stale); V1: a padding record (magic 0x76543210) fills the tail of the lap.
walctl must return exactly AutoMQ's records, classify the damage, and never write.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import zlib

import pytest
from typer.testing import CliRunner

from walctl.cli import app

KiB, MiB = 1 << 10, 1 << 20
HEADERS = 8192
BLOCK = 4096
V0_MAGIC, V1_MAGIC = 0x12345678, 0x01234567
DATA_MAGIC, PADDING_MAGIC = 0x87654321, 0x76543210


def amq_crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def amq_header(magic: int, capacity: int, trim: int, ts: int, window: int, shutdown: int,
               node: int = 1, epoch: int = 7, block: int = BLOCK) -> bytes:
    body = struct.pack(">IQqqqIiq", magic, capacity, trim, ts, window, shutdown, node, epoch)
    return (body + struct.pack(">I", amq_crc(body))).ljust(block, b"\0")


def amq_record(offset: int, body: bytes, magic: int = DATA_MAGIC, crc=amq_crc) -> bytes:
    head = struct.pack(">IIqI", magic, len(body), offset + 24, crc(body) if magic == DATA_MAGIC else 0)
    return head + struct.pack(">I", crc(head)) + body


def batch(stream: int, base: int, payload: bytes) -> bytes:
    return struct.pack(">BqqqII", 0x22, stream, 3, base, 1, len(payload)) + payload


def payload_of(stream: int, base: int, size: int) -> bytes:
    seed = hashlib.sha256(f"amq:{stream}:{base}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


class AutoMQImage:
    """An AutoMQ block WAL built in memory, block by block, as its SlidingWindowService lays it out.

    ``block_size`` is WALUtil.BLOCK_SIZE (JVM option automq.ebswal.blocksize): the header slots are
    that large (BlockWALService.WAL_HEADER_CAPACITY), so the ring starts at 2 x block_size, and
    blocks are aligned and padded to it.
    """

    def __init__(self, capacity: int = 256 * KiB, version: int = 1, *, seed: int = 1, stale: bool = True,
                 block_size: int = BLOCK):
        self.capacity = capacity
        self.bs = block_size
        self.hs = 2 * block_size  # WAL_HEADER_TOTAL_CAPACITY
        self.ring = capacity - self.hs
        self.version = version
        self.rng = random.Random(seed)
        # A reused device: the record area holds old bytes; AutoMQ never wipes it.
        self.data = bytearray(self.rng.randbytes(capacity) if stale else bytes(capacity))
        self.data[:self.hs] = bytes(self.hs)
        self.next = 0  # next block start (logical)
        self.records: list[tuple[int, int, bytes]] = []  # (offset, base, payload) in log order
        self.blocks: list[int] = []  # block start offsets
        self.base = 0

    def pos(self, offset: int) -> int:
        return self.hs + offset % self.ring

    def put(self, offset: int, raw: bytes) -> None:
        p = self.pos(offset)
        assert p + len(raw) <= self.capacity, "AutoMQ never writes across the end of the lap"
        self.data[p:p + len(raw)] = raw

    def block(self, sizes: list[int], stream: int = 5, crc=amq_crc) -> list[int]:
        """Write one block of records of the given payload sizes; returns their offsets."""
        total = sum(24 + 33 + s for s in sizes)
        start = self.next
        if self.ring - start % self.ring < total:
            rest = self.ring - start % self.ring
            if self.version >= 1:  # a padding record fills the lap's tail (its body is never written)
                head = struct.pack(">IIqI", PADDING_MAGIC, rest - 24, start + 24, 0)
                self.put(start, head + struct.pack(">I", amq_crc(head)) + self.rng.randbytes(min(self.bs, rest) - 24))
            start += rest  # V0 just starts at the next lap
        offsets, o, raw = [], start, b""
        for size in sizes:
            payload = payload_of(stream, self.base, size)
            rec = amq_record(o, batch(stream, self.base, payload), crc=crc)
            offsets.append(o)
            self.records.append((o, self.base, payload))
            self.base += 1
            raw += rec
            o += len(rec)
        pad = -len(raw) % self.bs
        raw += self.rng.randbytes(pad)  # stale buffer bytes, as AutoMQ pads
        self.put(start, raw)
        self.blocks.append(start)
        self.next = start + len(raw)
        return offsets

    def headers(self, *, trim: int = -1, clean: bool = True, window: int = 128 * KiB, ts: int = 1_000_000,
                slot: int = 0) -> None:
        magic = V0_MAGIC if self.version == 0 else V1_MAGIC
        window = min(window, self.ring)  # AutoMQ caps the window at the record area
        bs = self.bs
        self.data[slot * bs:(slot + 1) * bs] = amq_header(magic, self.capacity, trim, ts, window, 0 if clean else 1,
                                                          block=bs)
        other = 1 - slot  # the older slot: a previous header write
        self.data[other * bs:(other + 1) * bs] = amq_header(magic, self.capacity, -1, ts - 10, window, 1, block=bs)

    def save(self, path) -> str:
        path.write_bytes(bytes(self.data))
        return str(path)

    def damage(self, offset: int, raw: bytes) -> None:
        p = self.pos(offset)
        self.data[p:p + len(raw)] = raw


def recover(path: str, *args) -> tuple[int, list[dict], list[dict], dict, str]:
    result = CliRunner().invoke(app, ["recover", path, "--json", "--payload", "hex", *args])
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    records = [o for o in lines if o["type"] == "record"]
    findings = [o for o in lines if o["type"] == "finding"]
    summary = [o for o in lines if o["type"] == "summary"]
    assert len(summary) == 1, result.stdout
    assert "Traceback" not in result.stderr
    return result.exit_code, records, findings, summary[0], result.stderr


def expect(records: list[dict], expected: list[tuple[int, int, bytes]]) -> None:
    assert [(r["offset"], r["base_offset"], bytes.fromhex(r["payload"])) for r in records] == expected


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def log_of(version: int, blocks: int = 12, *, seed: int = 1, capacity: int = 256 * KiB) -> AutoMQImage:
    img = AutoMQImage(capacity, version, seed=seed)
    rng = random.Random(seed)
    for _ in range(blocks):
        img.block([rng.choice([10, 200, 900, 2500]) for _ in range(rng.randint(1, 4))])
    return img


# -- clean logs: exactly AutoMQ's records, no findings -----------------------------------

@pytest.mark.parametrize("version", [0, 1])
def test_clean_log_recovers_every_record_and_never_writes(tmp_path, version):
    img = log_of(version)
    img.headers(clean=True)
    path = img.save(tmp_path / "amq.img")
    before = sha(path)
    code, records, findings, summary, stderr = recover(path)
    assert code == 0 and findings == []
    expect(records, img.records)
    assert summary["flavour"] == f"automq-v{version}" and summary["records"] == len(img.records)
    assert "AutoMQ" in stderr and "never writes" in stderr
    assert sha(path) == before


@pytest.mark.parametrize("version", [0, 1])
def test_walctl_checksums_do_not_pass_in_an_automq_log(tmp_path, version):
    """The masked CRC-32 is what AutoMQ computes; a crc32c record there is damage, not a record."""
    from walctl.format.crc import crc32c

    img = AutoMQImage(version=version)
    img.block([100, 100])
    img.block([50], crc=crc32c)  # the third record carries walctl's checksum: invalid here
    img.headers(clean=False)
    code, records, findings, summary, _ = recover(img.save(tmp_path / "amq.img"))
    expect(records, img.records[:2])
    # A header that fails AutoMQ's check at a block boundary, nothing valid after it: the end of a
    # crashed log (as in walctl's own logs), not damage and not a record: exit 0, nothing skipped.
    assert code == 0 and findings == []
    assert summary["records"] == 2


@pytest.mark.parametrize("version", [0, 1])
def test_ring_wraps_past_the_lap_end(tmp_path, version):
    """V1 fills the lap's tail with a padding record; V0 leaves it stale and starts the next lap."""
    img = AutoMQImage(64 * KiB, version, seed=3)  # a ring of 56 KiB
    for _ in range(9):
        img.block([3000])  # one 4 KiB block each: 36 KiB
    trim = img.records[5][0]
    img.block([9000])  # 12 KiB: 8 KiB left in the lap
    img.block([9000])  # does not fit: the next lap
    assert img.records[-1][0] == img.ring
    img.headers(trim=trim, clean=True)
    code, records, findings, summary, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0 and findings == [], findings
    expect(records, img.records[6:])
    assert summary["trim_offset"] == trim


def test_trim_to_the_block_before_the_first_free_one_is_not_a_finding(tmp_path):
    """Every AutoMQ start trims to 'first free block - 1', an offset that names no record."""
    img = AutoMQImage(version=1)
    img.block([100])
    img.block([100])
    first_kept = img.next
    img.block([100, 100])
    img.headers(trim=first_kept - 1, clean=True)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0 and findings == []
    expect(records, img.records[2:])


# -- crashes and damage, the way AutoMQ's recovery reads them ------------------------------

def test_v1_keeps_only_the_continuous_log_and_reports_the_discarded_blocks(tmp_path):
    img = log_of(1, blocks=10)
    starts = img.blocks
    hole = starts[6]
    img.damage(hole, bytes(starts[7] - hole))  # a block in flight at the crash never reached the disk
    img.headers(clean=False)
    code, records, findings, summary, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0  # a crash explains it
    expect(records, [r for r in img.records if r[0] < hole])
    assert [(f["kind"], f["offset"], f["cause"], f["explained_by_crash"]) for f in findings] == [
        ("discarded", hole, "zero_fill", True)]
    assert findings[0]["end_offset"] == starts[7]
    assert "AutoMQ V1" in summary["stopped_by"]


def test_v1_same_hole_after_a_clean_shutdown_is_corruption(tmp_path):
    img = log_of(1, blocks=10)
    hole = img.blocks[6]
    img.damage(hole, bytes(img.blocks[7] - hole))
    img.headers(clean=True)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 3
    assert [f["kind"] for f in findings] == ["discarded"] and not findings[0]["explained_by_crash"]


def test_v0_reads_past_a_hole_within_the_window(tmp_path):
    img = log_of(0, blocks=10)
    starts = img.blocks
    img.damage(starts[4], bytes(starts[5] - starts[4]))
    img.headers(clean=False)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0
    expect(records, [r for r in img.records if not starts[4] <= r[0] < starts[5]])
    assert [(f["kind"], f["cause"], f["explained_by_crash"]) for f in findings] == [("hole", "zero_fill", True)]


def test_v0_hole_in_a_clean_log_is_corruption(tmp_path):
    img = log_of(0, blocks=10)
    starts = img.blocks
    img.damage(starts[4] + 30, b"\xff")  # a damaged byte in the block's first body
    img.headers(clean=True)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 3
    assert [(f["kind"], f["cause"]) for f in findings] == [("hole", "checksum_mismatch")]
    assert len(records) == len(img.records) - sum(1 for r in img.records if starts[4] <= r[0] < starts[5])


@pytest.mark.parametrize("version", [0, 1])
def test_torn_tail(tmp_path, version):
    img = log_of(version, blocks=6)
    last = img.records[-1][0]
    img.damage(last + 24 + 40, b"\x00\x01\x02")  # the last record's body never fully landed
    img.headers(clean=False)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0
    expect(records, img.records[:-1])
    assert [(f["kind"], f["cause"]) for f in findings] == [("torn_tail", "torn_tail")]


def test_v0_stale_record_of_an_earlier_lap_never_passes(tmp_path):
    img = AutoMQImage(64 * KiB, 0, seed=5)
    for _ in range(10):
        img.block([3000])
    old_block = bytes(img.data[img.pos(8192):img.pos(8192) + BLOCK])  # lap 0's block at offset 8192
    trim = img.records[8][0]
    while img.next <= img.ring + 12 * KiB:
        img.block([3000])  # into lap 1, over the old blocks
    target = img.ring + 8192
    assert target in img.blocks and img.next > target + BLOCK
    img.put(target, old_block)  # that write was lost: the old lap's block is still there
    img.headers(trim=trim, clean=False)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0
    expect(records, [r for r in img.records[9:] if r[0] != target])
    assert [(f["kind"], f["cause"]) for f in findings] == [("hole", "stale_lap")]


def test_v1_padding_with_a_bad_crc_is_followed_and_reported(tmp_path):
    img = AutoMQImage(64 * KiB, 1, seed=4)
    for _ in range(10):
        img.block([3000])  # 40 KiB
    img.block([9000])  # 12 KiB: 4 KiB left in the lap
    img.block([9000])  # does not fit: a padding record at 52 KiB, then lap 1
    pad = 52 * KiB
    assert img.records[-1][0] == img.ring
    img.damage(pad + 21, b"\x55")  # the padding header's crc
    img.headers(trim=img.records[7][0], clean=True)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    expect(records, img.records[8:])  # AutoMQ follows it, so walctl shows what AutoMQ recovers
    assert [(f["kind"], f["offset"], f["cause"], f["explained_by_crash"]) for f in findings] == [
        ("bad_padding", pad, "checksum_mismatch", False)]
    assert code == 3


def test_damaged_header_slot_uses_the_other_one(tmp_path):
    img = log_of(1, blocks=4)
    img.headers(clean=True, slot=1)
    img.data[4096 + 20] ^= 0x04  # the newer slot's timestamp
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"), "--hexdump")
    # the older slot (ungraceful, no trim) is used; every record is still there
    expect(records, img.records)
    assert [(f["kind"], f["cause"], f["physical_offset"]) for f in findings] == [
        ("bad_header_slot", "bad_header_slot", 4096)]
    assert findings[0]["hexdump"].startswith("00001000: 0123 4567")
    assert code == 0


@pytest.mark.parametrize("version", [0, 1])
def test_damaged_record_at_an_aligned_trim_offset(tmp_path, version):
    """AutoMQ skips the record at trimOffset; V1 still stops at an invalid 4 KiB boundary there."""
    img = log_of(version, blocks=6)
    trim = img.blocks[2]
    img.damage(trim + 30, b"\xff\xff")  # its body
    img.headers(trim=trim, clean=False)
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    later = [r for r in img.records if r[0] >= img.blocks[3]]  # the rest of its block is skipped too
    if version == 0:
        assert code == 0
        expect(records, later)
        # resuming at the next 4 KiB boundary may land inside the rest of that block: a hole
        assert [(f["kind"], f["explained_by_crash"]) for f in findings][:1] == [("trim_record", True)]
        assert all(f["kind"] == "hole" and f["explained_by_crash"] for f in findings[1:])
    else:
        assert code == 3
        expect(records, [])
        assert [f["kind"] for f in findings] == ["trim_record", "discarded"]


# -- never written --------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["append", "{p}", "x"], ["trim", "{p}", "0"], ["init", "{p}"]])
def test_writers_refuse_an_automq_wal_and_leave_it_untouched(tmp_path, args):
    img = log_of(1, blocks=3)
    img.headers(clean=False)
    path = img.save(tmp_path / "amq.img")
    before = sha(path)
    result = CliRunner().invoke(app, [a.format(p=path) for a in args])
    assert result.exit_code == 5, result.stdout + result.stderr
    assert sha(path) == before


def test_image_copies_an_automq_wal_and_recover_reads_the_copy(tmp_path):
    img = log_of(0, blocks=5)
    img.headers(clean=True)
    path = img.save(tmp_path / "amq.img")
    with open(path, "ab") as f:
        f.write(b"\x99" * 12288)  # the device is larger than the WAL's capacity
    before = sha(path)
    copy = str(tmp_path / "copy.img")
    result = CliRunner().invoke(app, ["image", path, copy, "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["scope"] == "capacity" and out["size_bytes"] == img.capacity and out["flavour"] == "automq-v0"
    assert out["sha256"] == hashlib.sha256(bytes(img.data)).hexdigest() == sha(copy)
    assert open(copy + ".sha256").read() == f"{out['sha256']}  copy.img\n"
    assert sha(path) == before
    code, records, _, _, _ = recover(copy)
    expect(records, img.records)


# -- AutoMQ objects (footer version 0) -------------------------------------------------------

def automq_object(streams: dict[int, list[bytes]]) -> bytes:
    """DataBlocks + IndexBlock + Footer as AutoMQ's ObjectWriter lays them out (zeros at [12, 40))."""
    data, index = b"", b""
    for stream, payloads in sorted(streams.items()):
        batches = b"".join(struct.pack(">BqqqII", 0x22, stream, 0, i, 1, len(p)) + p for i, p in enumerate(payloads))
        block = struct.pack(">BBii", 0x5A, 0x02, len(payloads), len(batches)) + batches
        index += struct.pack(">qqiiqi", stream, 0, len(payloads), len(payloads), len(data), len(block))
        data += block
    footer = struct.pack(">qi", len(data), len(index)) + bytes(28) + struct.pack(">Q", 0x88E241B785F4CFF7)
    return data + index + footer


def test_inspect_object_reads_an_automq_object(tmp_path):
    path = tmp_path / "obj"
    path.write_bytes(automq_object({3: [b"a" * 10, b"b" * 20], 9: [b"c" * 5]}))
    result = CliRunner().invoke(app, ["inspect-object", str(path), "--deep", "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["version"] == 0 and lines[0]["index_crc"] is None
    assert [(e["stream_id"], e["end_offset"]) for e in lines if e["type"] == "index_entry"] == [(3, 2), (9, 1)]


# -- AutoMQ's configurable block size (WALUtil.BLOCK_SIZE, FORMATS.md 6) ----------------------

def sized_log(version: int, block_size: int, *, seed: int = 5, wrap: bool = True) -> AutoMQImage:
    """A log (that wraps its lap once) in a WAL whose slots and blocks are ``block_size`` bytes."""
    img = AutoMQImage(64 * KiB, version, seed=seed, block_size=block_size)
    rng = random.Random(seed)
    while img.next < (img.ring + 8 * KiB if wrap else img.ring // 2):
        img.block([rng.choice([10, 300, 1500, 5000]) for _ in range(rng.randint(1, 3))])
    return img


def live_from(img: AutoMQImage) -> int:
    """Index of the first record the last lap has not overwritten."""
    return next(i for i, r in enumerate(img.records) if r[0] >= img.next - img.ring)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("block_size", [512, 4096, 8192])
def test_block_sizes_recover_exactly(tmp_path, version, block_size):
    """Detected from where the second header slot is; every record back, no false finding."""
    img = sized_log(version, block_size)
    first = live_from(img)
    img.headers(trim=img.records[first][0], clean=True)
    path = img.save(tmp_path / "amq.img")
    before = sha(path)
    code, records, findings, summary, _ = recover(path)
    assert code == 0 and findings == [], findings
    expect(records, img.records[first + 1:])
    assert any(r[0] >= img.ring for r in img.records[first + 1:])  # the log really wrapped
    status = json.loads(CliRunner().invoke(app, ["status", path, "--json"]).stdout)
    assert (status["headers_bytes"], status["ring_bytes"], status["header"]["block_size_bytes"]) == (
        2 * block_size, img.ring, block_size)
    assert status["records"] == len(img.records) - first - 1 and status["findings"] == 0
    assert sha(path) == before


@pytest.mark.parametrize("block_size", [512, 8192])
def test_block_size_from_the_first_record_when_one_slot_was_ever_written(tmp_path, block_size):
    """A JVM that wrote its header once leaves the second slot empty: the first record tells."""
    img = sized_log(1, block_size, wrap=False)
    img.headers(clean=False)
    img.data[block_size:2 * block_size] = bytes(block_size)  # slot 1 never written
    code, records, findings, _, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0
    expect(records, img.records)
    assert [f["kind"] for f in findings] == ["bad_header_slot"] and findings[0]["physical_offset"] == block_size


def test_block_size_option_overrides_detection(tmp_path):
    img = sized_log(0, 512, wrap=False)
    img.headers(clean=True)
    path = img.save(tmp_path / "amq.img")
    code, records, _, _, _ = recover(path, "--block-size", "512")
    assert code == 0
    expect(records, img.records)
    # a wrong size is not a silent success: the records are not where it says
    code, records, findings, _, _ = recover(path, "--block-size", "4096")
    assert code != 0 or findings or records != []


def test_v0_hole_then_next_lap_resets_the_first_invalid_block(tmp_path):
    """V0 (RecoverIteratorV0): a valid record of a later lap than the first invalid block clears it,
    so the next lap's records past first-invalid + window are no "beyond the window" damage."""
    img = AutoMQImage(64 * KiB, 0, seed=9, block_size=512)
    while img.next < img.ring:
        img.block([1000])  # 1536-byte blocks: 42 fill the 63 KiB lap exactly
    assert img.next == img.ring
    hole_start, hole_end = img.blocks[-1], img.ring  # the lap's last block never reached the disk
    while img.next < img.ring + 16 * KiB:
        img.block([1000])
    img.damage(hole_start, bytes(hole_end - hole_start))
    img.headers(trim=img.records[20][0], clean=False, window=4 * KiB)
    code, records, findings, summary, _ = recover(img.save(tmp_path / "amq.img"))
    assert code == 0, findings
    expect(records, [r for r in img.records[21:] if not hole_start <= r[0] < hole_end])
    assert records[-1]["offset"] > hole_start + 4 * KiB  # past one window after the first invalid block
    # no "beyond_window": the reset cleared the first invalid block; and a V0 lap tail left
    # unwritten is what V0 does when a block does not fit, so the missing block is no finding
    assert findings == []


@pytest.mark.parametrize("version", [0, 1])
def test_a_ring_that_ends_inside_a_4k_block_recovers_exactly(tmp_path, version):
    """With 512-byte blocks an AutoMQ device (and its ring) may end inside a 4 KiB block, and
    the file with it: the last records there are read too, never an internal error (exit 1)."""
    img = AutoMQImage(64 * KiB + 5 * 512, version, seed=3, block_size=512)  # 5 x 512 B past a 4 KiB boundary
    rng = random.Random(3)
    while img.next + 3000 < img.ring:  # fill the lap to its last 512-byte blocks
        img.block([rng.choice([10, 200, 900]) for _ in range(rng.randint(1, 3))])
    img.headers(clean=True)
    path = img.save(tmp_path / "amq.img")
    assert os.path.getsize(path) % 4096 == 2560
    code, records, findings, summary, stderr = recover(path, "--block-size", "512")
    assert code == 0 and findings == [], (code, findings, stderr)
    expect(records, img.records)
    assert img.records[-1][0] + img.hs > 64 * KiB  # the last record lies in the unaligned tail
