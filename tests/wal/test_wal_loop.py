"""The whole WAL on a real loop device with direct I/O (root only; skipped with the reason otherwise)."""

from __future__ import annotations

import json

import pytest

from walctl.wal.trim import trim_wal

from walhelpers import append_records, header_of, payload_for, scan_file
from walhelpers import run_walctl as walctl

pytestmark = pytest.mark.loop
MiB = 1 << 20


def test_cli_pipeline_on_a_loop_device(loop_device):
    dev = loop_device(8 * MiB)
    r = walctl("init", dev, "--json")
    assert r.returncode == 0, r.stderr
    header = json.loads(r.stdout)["header"]
    assert header["capacity_bytes"] == 8 * MiB  # no --capacity: the whole device
    r = walctl("append", dev, "--json", "--input", "-", stdin=b"".join(b"rec%d\n" % i for i in range(200)))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    offsets = [x["offset"] for x in lines if x["type"] == "record"]
    assert len(offsets) == 200 and lines[-1]["type"] == "summary"
    r = walctl("recover", dev, "--json", "--payload", "text")
    assert r.returncode == 0, r.stderr
    records = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["payload"] for x in records if x["type"] == "record"] == [f"rec{i}" for i in range(200)]
    r = walctl("trim", dev, str(offsets[99]))
    assert r.returncode == 0, r.stderr
    r = walctl("recover", dev, "--json", "--payload", "text")
    assert [x["payload"] for x in map(json.loads, r.stdout.splitlines()) if x["type"] == "record"] == \
        [f"rec{i}" for i in range(100, 200)]
    # re-init refused without --force (exit 5); with it too while 100 records are not yet
    # uploaded; wiped with --force --discard-unuploaded
    assert walctl("init", dev).returncode == 5
    r = walctl("init", dev, "--force")
    assert r.returncode == 5 and b"holds 100 records" in r.stderr
    assert walctl("init", dev, "--force", "--discard-unuploaded").returncode == 0
    r = walctl("recover", dev, "--json")
    assert json.loads(r.stdout.splitlines()[-1])["records"] == 0


def test_wrapping_and_a_crash_on_a_loop_device(loop_device):
    dev = loop_device(1 * MiB)
    assert walctl("init", dev).returncode == 0
    live = []
    for _ in range(12):
        live += append_records(dev, 60, size=3000, iodepth=8)
        trim_wal(dev, live[-11][0])
        live = live[-10:]
    ring = header_of(dev).header.ring_size
    assert live[-1][0] > 2 * ring
    crashed = append_records(dev, 30, size=3000, clean=False)  # header left "ungraceful"
    live += crashed
    entries, result = scan_file(dev)
    assert [(e.offset, e.batch.base_offset) for e in entries] == live
    assert all(e.batch.payload == payload_for(0, e.batch.base_offset, 3000) for e in entries)
    assert not result.corrupt


def test_second_writer_refused_on_a_loop_device(loop_device, hold_writer):
    dev = loop_device(4 * MiB)
    assert walctl("init", dev).returncode == 0
    hold_writer(dev)
    r = walctl("append", dev, "x")
    assert r.returncode == 5
    assert r.stderr.decode().count("\n") == 1 and r.stderr.startswith(b"walctl: error: ")
    r = walctl("recover", dev)  # readers take no lock
    assert r.returncode == 0
