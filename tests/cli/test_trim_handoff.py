"""Trim hand-off (issue 13): an upload beside a live `walctl append --input -` gets its trim done
by the writer, or fails with exit 8 and success 0 in its metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from walctl.wal.lifecycle import read_wal_state
from walctl.device import open_device


def _trim_point(dev: str) -> int:
    d = open_device(dev, writable=False)
    try:
        return read_wal_state(d, dev).header.trim_offset
    finally:
        d.close()


def _walctl(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_upload_beside_a_live_writer_gets_its_trim(new_wal, held_writer, tmp_path):
    dev = new_wal("1MiB")
    store = tmp_path / "store"
    writer = held_writer(dev, b"r0")
    for i in range(1, 6):
        writer.send(f"r{i}".encode())
    res = _walctl("upload", dev, "--store", store, "--json", "--trim-timeout", "20")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["records"] == 6 and out["trimmed_to"] == writer.offsets[-1]
    assert _trim_point(dev) == writer.offsets[-1]  # durable in the header before upload returned
    assert "took the trim" in res.stderr
    # the writer goes on; a second upload takes only the new records, trimmed again by the writer
    writer.send(b"r6")
    res = _walctl("upload", dev, "--store", store, "--json", "--trim-timeout", "20")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["records"] == 1 and _trim_point(dev) == writer.offsets[-1]
    code, _, err = writer.finish()
    assert code == 0, err
    # the writer's clean close keeps the trim point and checkpoints the stream
    status = json.loads(_walctl("status", dev, "--json").stdout)
    assert status["trim_offset"] == writer.offsets[-1] and status["checkpoint"]["stream_next_offsets"] == {"0": 7}
    assert json.loads(_walctl("append", dev, "--json", "next").stdout.splitlines()[0])["base_offset"] == 7


def test_upload_fails_with_exit_8_when_no_writer_takes_the_trim(new_wal, hold_writer, tmp_path):
    dev = new_wal("1MiB")
    assert _walctl("append", dev, "a", "b").returncode == 0
    store, metrics = tmp_path / "store", tmp_path / "upload.prom"
    hold_writer(dev)  # a lock holder without the hand-off (an older walctl, or another program)
    res = _walctl("upload", dev, "--store", store, "--json", "--trim-timeout", "0.5", "--metrics-file", metrics)
    assert res.returncode == 8, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("walctl: error:")]
    assert len(lines) == 1 and "not trimmed" in lines[0] and "--no-trim" in lines[0]
    out = json.loads(res.stdout)
    assert out["error"]["code"] == 8 and out["records"] == 2 and out["commit_number"] is not None
    assert re.search(r"^walctl_upload_success(\{[^}]*\})? 0$", metrics.read_text(), re.M), metrics.read_text()
    res = _walctl("upload", dev, "--store", store, "--json", "--no-trim", "--metrics-file", metrics)
    assert res.returncode == 0 and json.loads(res.stdout)["records"] == 0  # committed the first time
    assert "walctl_upload_success 1" in metrics.read_text()


def test_a_writer_killed_after_a_hand_off_trim_recovers_from_it(new_wal, held_writer, tmp_path):
    dev = new_wal("1MiB")
    store = tmp_path / "store"
    writer = held_writer(dev, b"r0")
    for i in range(1, 4):
        writer.send(f"r{i}".encode())
    res = _walctl("upload", dev, "--store", store, "--json")
    assert res.returncode == 0, res.stderr
    writer.kill()  # SIGKILL right after the writer took the trim: its header says "ungraceful"
    assert _trim_point(dev) == writer.offsets[-1]
    # every record of stream 0 is trimmed, yet the next writer continues it (from the checkpoint the
    # hand-off trim wrote), after its recovery scan; recover finds nothing wrong
    out = _walctl("append", dev, "--json", "after-crash")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert lines[0]["base_offset"] == 4 and lines[-1]["scanned"] is True
    rec = _walctl("recover", dev, "--json")
    assert rec.returncode == 0 and json.loads(rec.stdout.splitlines()[-1])["records"] == 1
