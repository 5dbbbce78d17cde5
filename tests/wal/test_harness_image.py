"""`walctl image` (a forensic copy with its sha256) and `recover --hexdump` (a finding's bytes)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from typer.testing import CliRunner

from walctl.cli import app

from walhelpers import append_records, new_wal, physical, poke

KiB, MiB = 1 << 10, 1 << 20


def run(*args, input=None):
    result = CliRunner().invoke(app, [str(a) for a in args], input=input)
    assert "Traceback" not in result.stderr
    if result.exit_code:
        errors = [line for line in result.stderr.splitlines() if line.startswith("walctl: error: ")]
        assert len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    return result


def sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture
def wal(tmp_path):
    path = new_wal(tmp_path / "wal.img", 1 * MiB)
    with open(path, "ab") as f:
        f.write(b"\x5a" * 64 * KiB)  # a device larger than the WAL's capacity
    append_records(path, 20, size=500)
    return path


def test_copies_the_capacity_with_its_checksum_and_never_writes_the_source(wal, tmp_path):
    before = (sha(wal), os.stat(wal).st_mtime_ns)
    copy = tmp_path / "copy.img"
    result = run("image", wal, copy, "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    with open(wal, "rb") as f:
        expected = f.read(1 * MiB)
    assert copy.read_bytes() == expected
    assert out["sha256"] == hashlib.sha256(expected).hexdigest()
    assert out["scope"] == "capacity" and out["size_bytes"] == 1 * MiB and out["flavour"] == "walctl"
    assert out["device_size_bytes"] == 1 * MiB + 64 * KiB and out["file"] == str(copy)
    assert (tmp_path / "copy.img.sha256").read_text() == f"{out['sha256']}  copy.img\n"
    assert not (tmp_path / "copy.img.partial").exists()
    assert (sha(wal), os.stat(wal).st_mtime_ns) == before
    # the copy is a WAL like the original
    a = json.loads(run("recover", wal, "--json", "--stats").stdout.splitlines()[-1])
    b = json.loads(run("recover", copy, "--json", "--stats").stdout.splitlines()[-1])
    assert a["records"] == b["records"] == 20


def test_whole_device(wal, tmp_path):
    result = run("image", wal, tmp_path / "all.img", "--whole-device", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["scope"] == "device" and out["size_bytes"] == 1 * MiB + 64 * KiB
    assert sha(tmp_path / "all.img") == sha(wal) == out["sha256"]


def test_refuses_an_existing_file_unless_forced(wal, tmp_path):
    copy = tmp_path / "copy.img"
    copy.write_bytes(b"evidence")
    result = run("image", wal, copy)
    assert result.exit_code == 5 and "--force" in result.stderr
    assert copy.read_bytes() == b"evidence"
    (tmp_path / "other.img.sha256").write_text("x")
    assert run("image", wal, tmp_path / "other.img").exit_code == 5  # its checksum file exists
    result = run("image", wal, copy, "--force")
    assert result.exit_code == 0 and sha(copy) in result.stdout


def test_never_overwrites_the_source_even_with_force(wal, tmp_path):
    before = sha(wal)
    link = tmp_path / "link.img"
    link.symlink_to(wal)
    for target in (wal, link):
        result = run("image", wal, target, "--force")
        assert result.exit_code == 5 and "source" in result.stderr
    assert sha(wal) == before


def test_no_header_copies_the_whole_device_with_a_warning(tmp_path):
    junk = tmp_path / "junk.img"
    junk.write_bytes(os.urandom(40000))  # not a multiple of 4096: the tail goes through the page cache
    result = run("image", junk, tmp_path / "junk.copy", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["scope"] == "device" and out["flavour"] is None and out["size_bytes"] == 40000
    assert "no valid WAL header" in result.stderr
    assert sha(tmp_path / "junk.copy") == sha(junk) == out["sha256"]


def test_missing_device_and_unwritable_target(wal, tmp_path):
    assert run("image", tmp_path / "nope", tmp_path / "x.img").exit_code == 4
    assert run("image", wal, tmp_path / "no" / "such" / "dir.img").exit_code == 6


def test_reads_without_a_lock_while_a_writer_holds_the_device(wal, tmp_path, hold_writer):
    hold_writer(wal)
    assert run("append", wal, "x").exit_code == 5  # the device is held
    result = run("image", wal, tmp_path / "live.img", "--json")
    assert result.exit_code == 0, result.stderr


def test_human_output_ends_with_the_sha256sum_line(wal, tmp_path):
    result = run("image", wal, tmp_path / "h.img")
    assert result.exit_code == 0
    digest = sha(tmp_path / "h.img")
    assert result.stdout.splitlines()[-1] == f"{digest}  {tmp_path / 'h.img'}"


# -- recover --hexdump ------------------------------------------------------------------------

def test_hexdump_shows_each_findings_first_bytes(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    acks = append_records(path, 6, size=3000, iodepth=1, flush_each=True)
    pos = physical(path, acks[2][0])
    poke(path, pos, b"JUNKJUNK")
    result = run("recover", path, "--json", "--hexdump")
    assert result.exit_code == 3
    finding = [json.loads(x) for x in result.stdout.splitlines() if '"finding"' in x][0]
    lines = finding["hexdump"].splitlines()
    assert len(lines) == 16  # 256 bytes, 16 a line
    assert lines[0].startswith(f"{pos:08x}: 4a55 4e4b 4a55 4e4b") and lines[0].endswith("  JUNKJUNK...... .")
    assert finding["cause"] == "garbage"
    human = run("recover", path, "--hexdump")
    assert f"    {pos:08x}: 4a55 4e4b" in human.stdout and "(garbage)" in human.stdout
    plain = run("recover", path, "--json")
    assert "hexdump" not in [json.loads(x) for x in plain.stdout.splitlines() if '"finding"' in x][0]


def test_hexdump_of_a_header_slot_and_a_short_finding(tmp_path):
    path = new_wal(tmp_path / "w", 1 * MiB)
    append_records(path, 2, size=100)
    poke(path, 4096 + 8, b"\xee")  # one slot's capacity field
    result = run("recover", path, "--json", "--hexdump")
    finding = [json.loads(x) for x in result.stdout.splitlines() if '"finding"' in x][0]
    assert finding["kind"] == "bad_header_slot" and finding["physical_offset"] == 4096
    assert finding["hexdump"].startswith("00001000: 5741 4c43")  # "WALC"


def test_a_file_shorter_than_the_header_slots_is_not_a_wal(tmp_path):
    short = tmp_path / "short.img"
    for size in (0, 100, 8191):
        short.write_bytes(b"\x01" * size)
        result = run("recover", short, "--json")
        assert result.exit_code == 4, result.stderr
