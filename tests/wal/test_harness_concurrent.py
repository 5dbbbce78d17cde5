"""Writer + reader at once: `walctl recover` runs again and again while a streaming writer appends.

Every reader result must be a consistent prefix of the log: offsets ascending, every
payload intact, every record the writer had acknowledged before that recover started
present, and nothing a crash would not explain. Meanwhile a second writer (append, trim)
is refused with exit 5 and leaves the log alone.

Duration: WALCTL_CONCURRENT_S, default 4 s; WALCTL_SOAK=1 makes it 60 s.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time

from typer.testing import CliRunner

from walctl.cli import app

from walhelpers import check_payload, make_payload, new_wal

MiB = 1 << 20
SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")
DURATION_S = float(os.environ.get("WALCTL_CONCURRENT_S", "60" if SOAK else "4"))


def test_reader_sees_a_consistent_prefix_while_a_writer_appends(tmp_path, capsys):
    path = new_wal(tmp_path / "wal", 64 * MiB)
    proc = subprocess.Popen(
        [sys.executable, "-m", "walctl", "append", path, "--input", "-", "--framing", "length-prefixed",
         "--json", "--iodepth", "4"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acked: list[tuple[int, bytes]] = []  # (offset, payload) as the writer printed them
    lock = threading.Lock()
    stop = threading.Event()
    payloads: dict[int, bytes] = {}

    def feed():
        try:
            for index in range(10_000_000):
                if stop.is_set():
                    break
                body = make_payload(0, index, (index * 7919) % 5000 + 1)
                payloads[index] = body
                proc.stdin.write(struct.pack(">I", len(body)) + body)
                proc.stdin.flush()
                if index % 4 == 0:
                    time.sleep(0.001)
        except (BrokenPipeError, OSError, ValueError):
            pass

    def collect():
        for line in proc.stdout:
            obj = json.loads(line)
            if obj.get("type") == "record":
                with lock:
                    acked.append((obj["offset"], payloads[obj["base_offset"]]))

    feeder = threading.Thread(target=feed, daemon=True)
    collector = threading.Thread(target=collect, daemon=True)
    feeder.start()
    collector.start()
    runner = CliRunner()
    recovers = records_checked = refusals = 0
    try:
        deadline = time.monotonic() + DURATION_S
        while not acked and time.monotonic() < deadline:
            time.sleep(0.05)
        while time.monotonic() < deadline:
            with lock:
                before = list(acked)
            result = runner.invoke(app, ["recover", path, "--json", "--payload", "hex"])
            assert result.exit_code == 0, result.stderr + result.stdout[-2000:]
            assert "Traceback" not in result.stderr
            lines = [json.loads(line) for line in result.stdout.splitlines()]
            assert lines[-1]["type"] == "summary" and lines[-1]["corrupt_findings"] == 0
            records = [x for x in lines if x["type"] == "record"]
            offsets = [r["offset"] for r in records]
            assert offsets == sorted(set(offsets)), "offsets must ascend"
            got = {}
            for r in records:
                payload = bytes.fromhex(r["payload"])
                check_payload(payload)
                got[r["offset"]] = payload
            for offset, payload in before:
                assert got.get(offset) == payload, f"acknowledged record at {offset} missing or different"
            recovers += 1
            records_checked += len(records)
            if recovers % 5 == 1:  # a second writer is refused while the first runs
                for args in (["append", path, "x"], ["trim", path, str(before[0][0])]):
                    refused = runner.invoke(app, args)
                    assert refused.exit_code == 5, refused.stderr
                    refusals += 1
    finally:
        stop.set()
        feeder.join(timeout=10)
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.wait(timeout=60)
        collector.join(timeout=10)
        err = proc.stderr.read().decode(errors="replace")
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0, err
    # after the writer closed: the log is clean and holds every acknowledged record
    final = runner.invoke(app, ["recover", path, "--json", "--payload", "hex"])
    assert final.exit_code == 0
    lines = [json.loads(line) for line in final.stdout.splitlines()]
    assert lines[-1]["findings"] == 0 and lines[-1]["shutdown_type"] == "graceful"
    got = {r["offset"]: bytes.fromhex(r["payload"]) for r in lines if r["type"] == "record"}
    assert all(got.get(o) == p for o, p in acked) and len(got) == len(acked)
    with capsys.disabled():
        print(f"\nwriter+reader harness: {recovers} recovers during {DURATION_S:.0f} s of appends, "
              f"{records_checked} records checked, {len(acked)} acknowledged, {refusals} second writers refused")
    assert recovers >= 3
