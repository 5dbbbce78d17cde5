"""Crash test: SIGKILL a streaming `walctl append` at random moments, many times.

After every kill: each record whose offset the writer printed is recovered byte for
byte; nothing corrupt or phantom is ever returned; stream offsets stay contiguous;
the damage is classified as crash damage (no corruption). Trials: WALCTL_CRASH_TRIALS
(default 30); the ring wraps several times over a run because each trial trims.
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

from walctl.wal.ops import trim_wal

from walhelpers import check_payload, make_payload, new_wal, scan_file

MiB = 1 << 20




def run_trial(path: str, trial: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """One writer killed at a random moment; returns its acknowledged (offset, base_offset, index)."""
    iodepth = rng.choice([1, 2, 4, 16])
    proc = subprocess.Popen(
        [sys.executable, "-m", "walctl", "append", path, "--input", "-", "--framing", "length-prefixed",
         "--json", "--iodepth", str(iodepth)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stop = threading.Event()

    def feed():
        try:
            for index in range(1_000_000):
                if stop.is_set():
                    return
                body = make_payload(trial, index, rng.choice([10, 100, 1000, 3000, 9000]))
                proc.stdin.write(struct.pack(">I", len(body)) + body)
                proc.stdin.flush()
                if index % 8 == 0:
                    time.sleep(0.002)  # ~ a few MiB/s: the WAL must not fill before the kill
        except (BrokenPipeError, OSError, ValueError):
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    # The kill lands at a random moment after the first acknowledgement, not after a fixed
    # guess at the interpreter's start-up (which cost ~0.3 s of every trial, idle or not):
    # every kill now hits a writer that is acknowledging records.
    first = proc.stdout.readline()
    time.sleep(rng.uniform(0.0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stop.set()
    out = (first + proc.stdout.read()).decode(errors="replace")
    err = proc.stderr.read().decode(errors="replace")
    feeder.join(timeout=5)
    acks = []
    for line in out.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # the line the kill cut in half: not an acknowledgement
        if obj.get("type") == "record":
            acks.append((obj["offset"], obj["base_offset"], len(acks)))
    assert "Traceback" not in err, err
    return acks


@pytest.mark.slow
def test_sigkill_while_streaming_loses_no_acknowledged_record(tmp_path):
    trials = int(os.environ.get("WALCTL_CRASH_TRIALS", "300" if os.environ.get("WALCTL_SOAK") else "30"))
    rng = random.Random(int(os.environ.get("WALCTL_CRASH_SEED", "20261122")))
    path = new_wal(tmp_path / "wal", 8 * MiB)
    acked: dict[int, tuple[int, int, int]] = {}  # offset -> (trial, index, base_offset)
    total_acks = kills_with_acks = gaps_seen = 0
    for trial in range(trials):
        acks = run_trial(path, trial, rng)
        total_acks += len(acks)
        kills_with_acks += bool(acks)
        for offset, base, index in acks:
            acked[offset] = (trial, index, base)
        entries, result = scan_file(path)
        assert not result.corrupt, f"trial {trial}: {[f.to_json() for f in result.corrupt]}"
        seen = {}
        for e in entries:
            seen[e.offset] = e
            check_payload(e.batch.payload)
        for offset, (t, index, base) in acked.items():
            assert offset in seen, f"trial {trial}: acknowledged record at {offset} lost"
            got = seen[offset]
            assert check_payload(got.batch.payload) == (t, index) and got.batch.base_offset == base
        # Stream offsets are contiguous, except where a crash lost a block in flight while later
        # blocks survived (a hole): records after it are kept (durable, never acknowledged).
        holes = [f for f in result.findings if f.kind == "hole"]
        for prev, cur in zip(entries, entries[1:]):
            if cur.batch.base_offset != prev.batch.end_offset:
                assert cur.batch.base_offset > prev.batch.end_offset, "stream offsets overlap"
                assert any(prev.offset < f.offset < cur.offset for f in holes), \
                    f"trial {trial}: stream gap {prev.batch.end_offset}..{cur.batch.base_offset} without a hole"
                assert all(o < prev.offset or o > cur.offset for o in acked), "a lost record was acknowledged"
                gaps_seen += 1
        # keep room: trim all but the last 20 records (trim also seals the crash damage)
        if len(entries) > 20:
            cut = entries[-21].offset
            trim_wal(path, cut)
            acked = {o: v for o, v in acked.items() if o > cut}
    print(f"\ncrash test: {trials} kills, {kills_with_acks} with acknowledged records, "
          f"{total_acks} acknowledged records checked, {gaps_seen} crash gaps (holes with later records kept)")
    assert kills_with_acks == trials, "every kill must land while records are being acknowledged"
