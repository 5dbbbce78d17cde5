"""Crash harness: SIGKILL a streaming `walctl append` at random moments, many times, on two WALs.

One harness, two profiles:
  - an 8 MiB WAL fed fast (test_sigkill_while_streaming_loses_no_acknowledged_record): every
    kill lands after the first acknowledgement, while records are being acknowledged; the
    ring wraps several times over a run because each trial trims. Trials:
    WALCTL_CRASH_TRIALS (default 30, soak 300), seed WALCTL_CRASH_SEED.
  - a 512 KiB WAL (a ring of 504 KiB) fed slowly (test_sigkill_on_a_small_wrapping_wal):
    the log laps the ring every few kills, crash damage meets the end of a lap and stale
    bytes of earlier laps, and sealing runs over both. Trials: WALCTL_SIGKILL_TRIALS
    (default 12, soak 300).

The writers are forked from one pre-imported Python (tests/wal/forkhelpers.py: a process of its
own each, SIGKILLed as before, without an interpreter start per trial).

Kills follow the writer's progress, never a guess at how long it takes to start: a trial waits
(up to PROGRESS_TIMEOUT_S) until the writer has acknowledged a record a random number of log
bytes past its first acknowledgement, then kills after a random short delay. So a loaded
machine (a slow interpreter start, a writer sharing its core) changes how long a trial takes,
not what it covers.

After every kill (check_after_kill): each record whose offset the writer printed is
recovered byte for byte; nothing corrupt or phantom is ever returned; stream offsets stay
contiguous except at crash holes; the damage is classified as crash damage (no corruption).
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import threading
import time
from dataclasses import dataclass

import pytest

from walctl.format.header import HEADERS_SIZE
from walctl.wal.trim import trim_wal

from forkhelpers import ForkServer, alive
from walhelpers import check_payload, make_payload, new_wal, scan_file

KiB, MiB = 1 << 10, 1 << 20
SOAK = os.environ.get("WALCTL_SOAK", "") not in ("", "0")


@dataclass(frozen=True)
class Profile:
    """How a trial feeds the writer and when it kills it."""

    iodepths: tuple[int, ...]
    payload_sizes: tuple[int, ...]
    pause_s: float            # sleep after every ``pause_every`` records
    pause_every: int
    # The kill waits for an acknowledged record this many log bytes (a random number in the
    # range) past the first acknowledged one, then for a random delay in kill_delay_s.
    kill_after_bytes: tuple[int, int]
    kill_delay_s: tuple[float, float]
    own_feed_rng: bool          # the feed draws from its own generator (seeded from the trial's)
    batch_interval: str = "2ms"  # append --batch-interval (group commit)


# ~ a few MiB/s: the WAL must not fill before the kill. Every kill lands after the first
# acknowledgement, while records are being acknowledged.
STREAMING = Profile(iodepths=(1, 2, 4, 16), payload_sizes=(10, 100, 1000, 3000, 9000), pause_s=0.002,
                    pause_every=8, kill_after_bytes=(0, 0), kill_delay_s=(0.0, 0.5), own_feed_rng=False)
# ~130 KiB/s of payload, one record in each 4 KiB block while the writer keeps up (no group
# commit): at most ~500 KiB/s of log. Each trial writes 96-224 KiB of log past its first
# acknowledgement, so 12 trials lap the 504 KiB ring at least twice (12 * 96 KiB > 2 * 504 KiB),
# and the most a trial can add -- 224 KiB, the delay's ~25 KiB, 8 blocks in flight, the <= 10
# records kept from the trial before -- stays below the ring: the kill lands before it fills.
WRAPPING = Profile(iodepths=(1, 2, 4, 8), payload_sizes=(10, 100, 700, 1500, 3000), pause_s=0.008,
                   pause_every=1, kill_after_bytes=(96 * 1024, 224 * 1024), kill_delay_s=(0.0, 0.05),
                   own_feed_rng=True, batch_interval="0")
PROGRESS_TIMEOUT_S = 120.0  # a writer that makes no progress for this long fails the trial


@pytest.fixture
def writers(tmp_path):
    """(fork server, (stdin FIFO, stdout FIFO)) for kill_trial: the trials' writers are forked from
    one pre-imported Python (tests/wal/forkhelpers.py), each a process of its own that the trial
    SIGKILLs, instead of an interpreter start (~0.3 s of CPU) per trial."""
    fifos = (str(tmp_path / "stdin.fifo"), str(tmp_path / "stdout.fifo"))
    for fifo in fifos:
        os.mkfifo(fifo)
    server = ForkServer()
    yield server, fifos
    server.close()


def kill_trial(server: ForkServer, fifos: tuple[str, str], path: str, trial: int, rng: random.Random,
               profile: Profile) -> tuple[list[tuple[int, int, int]], bool]:
    """One writer killed at a random moment; its acknowledged (offset, base_offset, index), and whether the kill landed.
    The writer is forked by ``server`` (its stdin and stdout the two FIFOs of ``fifos``)."""
    fifo_in, fifo_out = fifos
    err_path = f"{fifo_out}.stderr"
    pid = server.spawn(["append", path, "--input", "-", "--framing", "length-prefixed", "--json", "--iodepth",
                        str(rng.choice(profile.iodepths)), "--batch-interval", profile.batch_interval],
                       stdin=fifo_in, stdout=fifo_out, stderr=err_path,
                       # Every other trial on native AIO: the engine where io_uring is refused (Docker's
                       # seccomp profile), keeps its durability checked as walctl's default's is.
                       env={"WALCTL_IO_ENGINE": "aio" if trial % 2 else "auto"})
    stop = threading.Event()
    feed_rng = random.Random(rng.random()) if profile.own_feed_rng else rng

    def feed():
        try:
            with open(fifo_in, "wb") as pipe:  # (opened as the writer opens its end)
                for index in range(1_000_000):
                    if stop.is_set():
                        return
                    body = make_payload(trial, index, feed_rng.choice(profile.payload_sizes))
                    pipe.write(struct.pack(">I", len(body)) + body)
                    pipe.flush()
                    if index % profile.pause_every == 0:
                        time.sleep(profile.pause_s)
        except (BrokenPipeError, OSError, ValueError):
            return

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    lines: list[bytes] = []
    target = rng.randint(*profile.kill_after_bytes)
    reached = threading.Event()

    def collect():  # every stdout line; ``reached`` once the writer got far enough (or ended)
        first = None
        with open(fifo_out, "rb") as stdout:
            for line in stdout:
                lines.append(line)
                offset = _ack_offset(line)
                if offset is not None:
                    first = offset if first is None else first
                    if offset - first >= target:
                        reached.set()
        reached.set()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    if not reached.wait(PROGRESS_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"trial {trial}: the writer did not acknowledge {target} bytes of log in {PROGRESS_TIMEOUT_S} s")
    time.sleep(rng.uniform(*profile.kill_delay_s))
    killed = alive(pid)
    os.kill(pid, signal.SIGKILL)
    status = server.wait(pid)
    stop.set()
    collector.join(timeout=30)
    out = b"".join(lines).decode(errors="replace")
    with open(err_path, "rb") as f:
        err = f.read().decode(errors="replace")
    feeder.join(timeout=5)
    assert "Traceback" not in err, err
    if not killed:  # it ended by itself: only "WAL full" (exit 7) is acceptable
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, err
    acks = []
    for line in out.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # the line the kill cut in half: not an acknowledgement
        if obj.get("type") == "record":
            acks.append((obj["offset"], obj["base_offset"], len(acks)))
    return acks, killed


def _ack_offset(line: bytes) -> int | None:
    """The WAL offset of the record a line of ``append --json`` acknowledges (None: another line,
    or one the kill cut)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj["offset"] if isinstance(obj, dict) and obj.get("type") == "record" else None


def check_after_kill(path: str, trial: int, acked: dict[int, tuple[int, int, int]]):
    """Scan the WAL and check every promise; returns (entries, scan result, crash gaps seen)."""
    entries, result = scan_file(path)
    assert not result.corrupt, f"trial {trial}: {[f.to_json() for f in result.corrupt]}"
    seen = {}
    for e in entries:
        seen[e.offset] = e
        check_payload(e.batch.payload)
    assert [e.offset for e in entries] == sorted(seen)
    for offset, (t, index, base) in acked.items():
        assert offset in seen, f"trial {trial}: acknowledged record at {offset} lost"
        got = seen[offset]
        assert check_payload(got.batch.payload) == (t, index) and got.batch.base_offset == base
    # Stream offsets are contiguous, except where a crash lost a block in flight while later
    # blocks survived (a hole): records after it are kept (durable, never acknowledged).
    holes = [f.offset for f in result.findings if f.kind == "hole"]
    gaps = 0
    for prev, cur in zip(entries, entries[1:]):
        if cur.batch.base_offset != prev.batch.end_offset:
            assert cur.batch.base_offset > prev.batch.end_offset, "stream offsets overlap"
            assert any(prev.offset < h < cur.offset for h in holes), \
                f"trial {trial}: stream gap {prev.batch.end_offset}..{cur.batch.base_offset} without a hole"
            assert all(o < prev.offset or o > cur.offset for o in acked), "a lost record was acknowledged"
            gaps += 1
    return entries, result, gaps


def trim_keeping(path: str, entries, keep: int, acked: dict) -> dict:
    """Trim all but the last ``keep`` records (trim also seals the crash damage); the acks still checkable."""
    cut = entries[-(keep + 1)].offset
    trim_wal(path, cut)
    return {o: v for o, v in acked.items() if o > cut}


@pytest.mark.slow
def test_sigkill_while_streaming_loses_no_acknowledged_record(tmp_path, writers):
    trials = int(os.environ.get("WALCTL_CRASH_TRIALS", "300" if os.environ.get("WALCTL_SOAK") else "30"))
    rng = random.Random(int(os.environ.get("WALCTL_CRASH_SEED", "20261122")))
    path = new_wal(tmp_path / "wal", 8 * MiB)
    acked: dict[int, tuple[int, int, int]] = {}  # offset -> (trial, index, base_offset)
    total_acks = kills_with_acks = gaps_seen = 0
    for trial in range(trials):
        acks, _ = kill_trial(*writers, path, trial, rng, STREAMING)
        total_acks += len(acks)
        kills_with_acks += bool(acks)
        for offset, base, index in acks:
            acked[offset] = (trial, index, base)
        entries, _, gaps = check_after_kill(path, trial, acked)
        gaps_seen += gaps
        if len(entries) > 20:  # keep room
            acked = trim_keeping(path, entries, 20, acked)
    print(f"\ncrash test: {trials} kills, {kills_with_acks} with acknowledged records, "
          f"{total_acks} acknowledged records checked, {gaps_seen} crash gaps (holes with later records kept)")
    assert kills_with_acks == trials, "every kill must land while records are being acknowledged"


@pytest.mark.slow
def test_sigkill_on_a_small_wrapping_wal(tmp_path, capsys, writers):
    trials = int(os.environ.get("WALCTL_SIGKILL_TRIALS", "300" if SOAK else "12"))
    rng = random.Random(int(os.environ.get("WALCTL_CRASH_SEED", "20261123")))
    capacity = 512 * KiB
    path = new_wal(tmp_path / "wal", capacity)
    ring = capacity - HEADERS_SIZE
    acked: dict[int, tuple[int, int, int]] = {}  # offset -> (trial, index, base_offset)
    kills = total_acks = checked = findings = holes = 0
    end = 0
    for trial in range(trials):
        acks, killed = kill_trial(*writers, path, trial, rng, WRAPPING)
        kills += killed
        total_acks += len(acks)
        for offset, base, index in acks:
            acked[offset] = (trial, index, base)
        entries, result, gaps = check_after_kill(path, trial, acked)
        findings += len(result.findings)
        checked += len(entries)
        holes += gaps
        end = max(end, result.end_offset)
        keep = rng.choice([0, 3, 10])  # keep the ring from filling
        if len(entries) > keep + 1:
            acked = trim_keeping(path, entries, keep, acked)
    laps = end // ring
    with capsys.disabled():
        print(f"\nsigkill harness (504 KiB ring): {trials} trials, {kills} kills, {total_acks} acknowledged "
              f"records, {checked} records checked, {findings} findings classified (all crash damage), "
              f"{holes} crash gaps, {laps} laps of the ring, 0 lost or corrupt")
    assert kills >= trials // 2
    assert laps >= (2 if trials >= 10 else 0), "the log must wrap the ring"
