"""Fault-injection harness: SIGKILL a streaming `walctl append` on a small WAL that wraps often.

The companion of test_crash_sigkill.py (an 8 MiB WAL): here the ring is 504 KiB, so the
log laps it every few kills, crash damage meets the end of a lap and stale bytes of
earlier laps, and sealing runs over both. After every kill: each acknowledged record is
recovered byte for byte, nothing phantom or corrupt comes back, stream offsets are
contiguous except at crash holes, and no finding is corruption.

Trials: WALCTL_SIGKILL_TRIALS, default 12; WALCTL_SOAK=1 makes it 300.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from walctl.format.header import HEADERS_SIZE
from walctl.wal.ops import trim_wal

from walhelpers import check_payload, make_payload, new_wal, scan_file

KiB = 1 << 10
CAPACITY = 512 * KiB  # a ring of 504 KiB; a slow feed puts one record in each 4 KiB block
SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")
TRIALS = int(os.environ.get("WALCTL_SIGKILL_TRIALS", "300" if SOAK else "12"))




def kill_trial(path: str, trial: int, rng: random.Random) -> tuple[list[tuple[int, int, int]], bool]:
    """One writer fed ~200 KiB/s, killed at a random moment; its acks and whether the kill landed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "walctl", "append", path, "--input", "-", "--framing", "length-prefixed",
         "--json", "--iodepth", str(rng.choice([1, 2, 4, 8]))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stop = threading.Event()
    feed_rng = random.Random(rng.random())

    def feed():
        try:
            for index in range(1_000_000):
                if stop.is_set():
                    return
                body = make_payload(trial, index, feed_rng.choice([10, 100, 700, 1500, 3000]))
                proc.stdin.write(struct.pack(">I", len(body)) + body)
                proc.stdin.flush()
                time.sleep(0.008)  # ~130 KiB/s: a kill usually lands before the ring fills
        except (BrokenPipeError, OSError, ValueError):
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    time.sleep(rng.uniform(0.25, 0.8))  # includes the interpreter's start-up
    killed = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stop.set()
    out = proc.stdout.read().decode(errors="replace")
    err = proc.stderr.read().decode(errors="replace")
    feeder.join(timeout=5)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except OSError:
            pass
    assert "Traceback" not in err, err
    if not killed:  # it ended by itself: only "WAL full" (exit 7) is acceptable
        assert proc.returncode == 7, err
    acks = []
    for line in out.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # the line the kill cut in half is no acknowledgement
        if obj.get("type") == "record":
            acks.append((obj["offset"], obj["base_offset"], len(acks)))
    return acks, killed


@pytest.mark.slow
def test_sigkill_on_a_small_wrapping_wal(tmp_path, capsys):
    rng = random.Random(int(os.environ.get("WALCTL_CRASH_SEED", "20261123")))
    path = new_wal(tmp_path / "wal", CAPACITY)
    ring = CAPACITY - HEADERS_SIZE
    acked: dict[int, tuple[int, int, int]] = {}  # offset -> (trial, index, base_offset)
    kills = total_acks = checked = findings = holes = 0
    end = 0
    for trial in range(TRIALS):
        acks, killed = kill_trial(path, trial, rng)
        kills += killed
        total_acks += len(acks)
        for offset, base, index in acks:
            acked[offset] = (trial, index, base)
        entries, result = scan_file(path)
        assert not result.corrupt, f"trial {trial}: {[f.to_json() for f in result.corrupt]}"
        findings += len(result.findings)
        seen = {}
        for e in entries:
            seen[e.offset] = e
            check_payload(e.batch.payload)
        checked += len(entries)
        assert [e.offset for e in entries] == sorted(seen)
        for offset, (t, index, base) in acked.items():
            assert offset in seen, f"trial {trial}: acknowledged record at {offset} lost"
            got = seen[offset]
            assert check_payload(got.batch.payload) == (t, index) and got.batch.base_offset == base
        hole_offsets = [f.offset for f in result.findings if f.kind == "hole"]
        for prev, cur in zip(entries, entries[1:]):
            if cur.batch.base_offset != prev.batch.end_offset:
                assert cur.batch.base_offset > prev.batch.end_offset, "stream offsets overlap"
                assert any(prev.offset < h < cur.offset for h in hole_offsets), \
                    f"trial {trial}: stream gap without a hole"
                holes += 1
        end = max(end, result.end_offset)
        # keep the ring from filling: trim all but the last few records (trim seals crash damage)
        keep = rng.choice([0, 3, 10])
        if len(entries) > keep + 1:
            cut = entries[-(keep + 1)].offset
            trim_wal(path, cut)
            acked = {o: v for o, v in acked.items() if o > cut}
    laps = end // ring
    with capsys.disabled():
        print(f"\nsigkill harness (504 KiB ring): {TRIALS} trials, {kills} kills, {total_acks} acknowledged "
              f"records, {checked} records checked, {findings} findings classified (all crash damage), "
              f"{holes} crash gaps, {laps} laps of the ring, 0 lost or corrupt")
    assert kills >= TRIALS // 2
    assert laps >= (2 if TRIALS >= 10 else 0), "the log must wrap the ring"
