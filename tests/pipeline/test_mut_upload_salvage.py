"""Salvage's refusals and evidence (walctl/pipeline/upload/salvage.py) on their own: each damaged
range's bounds, bytes and fields from a device image, the evidence file and the result's list, its
write failure, and the two refusals word for word (issue 32: each of the module's mutants killed
here, in milliseconds; tests/wal/test_salvage.py runs whole salvages)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from walctl.errors import IOFailure, RefusedError
from walctl.pipeline.upload import salvage
from walctl.pipeline.upload.plan import UploadResult
from walctl.wal.findings import Finding, Kind
from walctl.wal.layout import Ring

HEADERS = 8192
LAP = 64 << 10
CAPACITY = HEADERS + LAP
NOW = 1_700_000_000_123_456_789


class _Image:
    """A device: bytes i % 251 at byte i; each read recorded (offset, length)."""

    def __init__(self, size=CAPACITY, is_block_device=None):
        self.data = (bytes(range(251)) * (size // 251 + 1))[:size]
        self.reads: list[tuple[int, int]] = []
        if is_block_device is not None:
            self.is_block_device = is_block_device

    def pread_into(self, offset, buf):
        self.reads.append((offset, len(buf)))
        buf[:] = self.data[offset:offset + len(buf)]
        return len(buf)


def _finding(offset, end=None, kind=Kind.HOLE, rule="a rule in words"):
    return Finding(kind, offset, Ring(CAPACITY), "the reason", end_offset=end, rule=rule)


def _hex(dev, phys, n):
    return dev.data[phys:phys + n].hex()


def test_a_damaged_range_is_its_bounds_its_fields_and_its_bytes():
    dev, ring = _Image(), Ring(CAPACITY)
    got = salvage._damaged(dev, ring, _finding(100, 300))
    assert got == {"offset": 100, "end_offset": 300, "length_bytes": 200, "kept_bytes": 200,
                   "kind": Kind.HOLE.value, "reason": "the reason", "rule": "a rule in words",
                   "physical_offset": HEADERS + 100, "hex": _hex(dev, HEADERS + 100, 200)}
    assert dev.reads == [(HEADERS, 4096)]  # aligned: the 4 KiB block holding it
    assert type(got["kind"]) is str  # the plain value, not the enum member


def test_a_range_across_blocks_is_read_aligned_whole():
    dev, ring = _Image(), Ring(CAPACITY)
    got = salvage._damaged(dev, ring, _finding(4000, 9000))
    assert got["kept_bytes"] == 5000 and got["hex"] == _hex(dev, HEADERS + 4000, 5000)
    assert dev.reads == [(HEADERS, 3 * 4096)]


def test_a_range_without_a_known_end_runs_to_the_next_4_kib_boundary():
    dev, ring = _Image(), Ring(CAPACITY)
    for offset, end, want in [(100, None, 4096), (0, None, 4096), (4095, None, 4096), (4096, None, 8192),
                              (5000, 5000, 8192), (5000, 4999, 8192), (5000, 5001, 5001)]:
        got = salvage._damaged(dev, ring, _finding(offset, end))
        assert (got["end_offset"], got["length_bytes"], got["kept_bytes"]) == (want, want - offset, want - offset)
        assert got["hex"] == _hex(dev, HEADERS + offset, want - offset)


def test_a_range_is_kept_up_to_its_lap_end_and_in_the_next_lap_at_its_place():
    dev, ring = _Image(), Ring(CAPACITY)
    got = salvage._damaged(dev, ring, _finding(LAP - 100, LAP + 200))
    assert (got["length_bytes"], got["kept_bytes"]) == (300, 100)
    assert got["hex"] == _hex(dev, HEADERS + LAP - 100, 100) and got["physical_offset"] == HEADERS + LAP - 100
    got = salvage._damaged(dev, ring, _finding(LAP + 50, LAP + 60))  # the second lap: back at the ring's start
    assert got["physical_offset"] == HEADERS + 50 and got["hex"] == _hex(dev, HEADERS + 50, 10)
    got = salvage._damaged(dev, ring, _finding(LAP - 1))  # its 4 KiB boundary is the lap's end
    assert (got["end_offset"], got["kept_bytes"]) == (LAP, 1)


def test_at_most_evidence_range_bytes_of_a_range_are_kept(monkeypatch):
    assert salvage.EVIDENCE_RANGE_BYTES == 1 << 20
    monkeypatch.setattr(salvage, "EVIDENCE_RANGE_BYTES", 50)
    dev, ring = _Image(), Ring(CAPACITY)
    got = salvage._damaged(dev, ring, _finding(100, 300))
    assert (got["length_bytes"], got["kept_bytes"]) == (200, 50) and got["hex"] == _hex(dev, HEADERS + 100, 50)
    monkeypatch.setattr(salvage, "EVIDENCE_RANGE_BYTES", 200)
    assert salvage._damaged(dev, ring, _finding(100, 300))["kept_bytes"] == 200
    monkeypatch.setattr(salvage, "EVIDENCE_RANGE_BYTES", 201)
    assert salvage._damaged(dev, ring, _finding(100, 300))["kept_bytes"] == 200


def test_a_range_of_more_than_a_mib_keeps_its_first_mib():
    big = Ring(HEADERS + (4 << 20))
    dev = _Image(HEADERS + (4 << 20))
    got = salvage._damaged(dev, big, Finding(Kind.HOLE, 4096, big, "r", end_offset=3 << 20))
    assert (got["length_bytes"], got["kept_bytes"]) == ((3 << 20) - 4096, 1 << 20)
    assert got["hex"] == _hex(dev, HEADERS + 4096, 1 << 20)


def test_a_kind_without_a_value_is_kept_as_it_is():
    dev, ring = _Image(), Ring(CAPACITY)
    f = SimpleNamespace(offset=100, end_offset=200, kind="torn", reason="why", verdict_rule="rule")
    got = salvage._damaged(dev, ring, f)
    assert (got["kind"], got["reason"], got["rule"]) == ("torn", "why", "rule")


def _run(tmp_path, dev, damage, wal=None):
    return SimpleNamespace(header=SimpleNamespace(capacity=CAPACITY), dev=dev, damage=damage,
                           result=UploadResult(), wal_path=wal or str(tmp_path / "wal"))


def test_keep_evidence_writes_every_range_and_lists_them_without_their_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(salvage.time, "time_ns", lambda: NOW)
    dev = _Image()
    u = _run(tmp_path, dev, [_finding(100, 300), _finding(5000)])
    salvage.keep_evidence(u)
    target = str(tmp_path / "wal") + f".salvage-{NOW}.broken.json"
    assert u.result.evidence_file == target
    ranges = [salvage._damaged(dev, Ring(CAPACITY), f) for f in u.damage]
    assert u.result.damage == [{k: v for k, v in r.items() if k != "hex"} for r in ranges]
    assert [set(r) for r in u.result.damage] == [set(ranges[0]) - {"hex"}] * 2
    with open(target, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc == {"type": "salvage", "wal": u.wal_path, "salvaged_at_ns": NOW, "evidence_file": target,
                   "damage": ranges}
    assert not os.path.exists(target + ".partial")


def test_keep_evidence_of_a_block_device_goes_to_the_evidence_folder(tmp_path, monkeypatch):
    from walctl.wal.crash_repair import EVIDENCE_DIR_ENV

    monkeypatch.setattr(salvage.time, "time_ns", lambda: NOW)
    folder = tmp_path / "evidence"
    folder.mkdir()
    monkeypatch.setenv(EVIDENCE_DIR_ENV, str(folder))
    u = _run(tmp_path, _Image(is_block_device=True), [_finding(100, 300)], wal="/dev/loop9")
    salvage.keep_evidence(u)
    assert u.result.evidence_file == str(folder / f"loop9.salvage-{NOW}.broken.json")
    assert os.path.exists(u.result.evidence_file)
    u = _run(tmp_path, _Image(is_block_device=False), [_finding(100, 300)])  # a file: beside it
    salvage.keep_evidence(u)
    assert u.result.evidence_file == str(tmp_path / "wal") + f".salvage-{NOW}.broken.json"


def test_evidence_that_cannot_be_written_is_an_io_failure(tmp_path, monkeypatch):
    from walctl.wal.crash_repair import EVIDENCE_DIR_ENV

    monkeypatch.setattr(salvage.time, "time_ns", lambda: NOW)
    u = _run(tmp_path, _Image(), [_finding(100, 300)], wal=str(tmp_path / "missing" / "wal"))
    with pytest.raises(IOFailure) as err:
        salvage.keep_evidence(u)
    target = str(tmp_path / "missing" / "wal") + f".salvage-{NOW}.broken.json"
    assert err.value.what == "cannot keep the damaged bytes: No such file or directory"
    assert err.value.where == target
    assert err.value.hint == (f"the records are uploaded, the WAL is not trimmed; free space there (or set "
                              f"{EVIDENCE_DIR_ENV}) and rerun salvage")
    assert isinstance(err.value.__cause__, OSError) and u.result.evidence_file is None


def test_salvage_is_refused_while_a_writer_holds_the_wal(monkeypatch):
    from walctl.device import locks

    monkeypatch.setattr(locks, "lock_holder", lambda path: 777 if path == "/w" else None)
    with pytest.raises(RefusedError) as err:
        salvage.check_can_salvage("/w", False)
    assert (err.value.what, err.value.where, err.value.hint) == (
        "a writer (pid 777) holds the WAL", "/w",
        "stop it first: salvage reads the log as it lies, and trims it at the end")
    salvage.check_can_salvage("/other", False)  # no holder: allowed


def test_salvage_of_a_block_device_needs_an_evidence_folder(monkeypatch):
    from walctl.device import locks
    from walctl.wal.crash_repair import EVIDENCE_DIR_ENV

    monkeypatch.setattr(locks, "lock_holder", lambda path: None)
    monkeypatch.delenv(EVIDENCE_DIR_ENV, raising=False)
    salvage.check_can_salvage("/w", False)  # a file: its evidence goes beside it
    for value in (None, ""):
        if value is not None:
            monkeypatch.setenv(EVIDENCE_DIR_ENV, value)
        with pytest.raises(RefusedError) as err:
            salvage.check_can_salvage("/dev/sdz", True)
        assert (err.value.what, err.value.where, err.value.hint) == (
            "salvage keeps the damaged bytes as evidence, and a block device has no folder for them", "/dev/sdz",
            f"set {EVIDENCE_DIR_ENV} to a directory on another disk")
    monkeypatch.setenv(EVIDENCE_DIR_ENV, "/var/evidence")
    salvage.check_can_salvage("/dev/sdz", True)

