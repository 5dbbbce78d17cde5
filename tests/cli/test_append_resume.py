"""append's summary says where a producer resumes (`next_base_offset`): the stream offset after the
last acknowledged record, also when the run stops on an error (a full WAL, exit 7) or a signal.
It used to stay at the run's first offset then, so a producer resuming from it would have
written stream offsets already in the log a second time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from walctl.wal.lifecycle import init_wal

MiB = 1 << 20


def summary_and_acks(stdout: bytes):
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines and lines[-1]["type"] == "summary"
    return lines[-1], lines[:-1]


@pytest.mark.parametrize("framing, ack", [("lines", "records"), ("lines", "ranges"), ("raw-args", "records")])
def test_a_full_wal_s_summary_resumes_after_the_last_acknowledged_record(tmp_path, framing, ack):
    wal = str(tmp_path / "w.img")
    init_wal(wal, 1 * MiB)
    if framing == "raw-args":  # DATA arguments: the payload path (append_many), not the C framing
        args, data = [f"record-{i:05d}-" + "x" * 16000 for i in range(80)], None
    else:
        args, data = ["--input", "-", "--framing", "lines"], b"".join(b"line %07d\n" % i for i in range(300_000))
    proc = subprocess.run([sys.executable, "-m", "walctl", "append", wal, "--stream", "7", "--base-offset", "1000",
                           "--json", "--ack", ack, *args], input=data, capture_output=True, timeout=120)
    assert proc.returncode == 7, proc.stderr  # WAL full: nothing freed room
    summary, acks = summary_and_acks(proc.stdout)
    assert summary["error"]["code"] == 7
    taken = summary["records"]
    assert 0 < taken < (80 if framing == "raw-args" else 300_000)
    last = acks[-1]
    assert last["base_offset"] + last["count"] == 1000 + taken
    assert summary["next_base_offset"] == 1000 + taken

