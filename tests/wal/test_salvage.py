"""walctl salvage (issue 28, item 3): from a damaged WAL, every intact acknowledged record reaches the
store exactly once, each lost range is recorded as a gap (cause corruption) with the damage's WAL
offset, the damaged bytes are kept as evidence, and the WAL takes appends again. The oracle is the
writers' acknowledgements (append --json)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path


from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import read_back

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def walctl(*args, env=None, input: bytes | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, env=full,
                          input=input if input is not None else b"", timeout=WAIT_S)


def payload(stream: int, i: int) -> bytes:
    return (b"s%d-%07d|" % (stream, i)) * 40


def framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in items)


def acked(proc: subprocess.CompletedProcess, stream: int) -> dict[int, bytes]:
    """stream offset -> payload, for every record the run acknowledged."""
    out = {}
    for line in proc.stdout.decode().splitlines():
        rec = json.loads(line)
        if rec["type"] == "record":
            out[rec["stream_offset"]] = payload(stream, rec["stream_offset"])
    return out


def crashed_append(wal: str, stream: int, count: int) -> dict[int, bytes]:
    """A producer feeding a writer through a pipe until the writer is SIGKILLed, once it has
    acknowledged ``count`` records (a crash, after the clean closes before it); returns what it
    acknowledged. Records durable but not yet acknowledged may follow them in the log."""
    import threading

    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "append", wal, "--stream", str(stream), "--input", "-",
                             "--framing", "length-prefixed", "--json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)

    def produce() -> None:
        i = 0
        try:
            while True:
                proc.stdin.write(framed([payload(stream, j) for j in range(i, i + 500)]))
                i += 500
        except (BrokenPipeError, ValueError, OSError):
            pass

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        rec = json.loads(line)
        if rec["type"] == "record":
            got[rec["stream_offset"]] = payload(stream, rec["stream_offset"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    feeder.join(timeout=10)
    proc.stdout.close()
    assert len(got) >= count, "the writer did not acknowledge the records before the kill"
    return got


def damage(path: str, physical: int, length: int = 4096) -> bytes:
    """Overwrite ``length`` bytes at ``physical`` with a pattern no checksum passes; return what was there."""
    with open(path, "r+b") as f:
        f.seek(physical)
        before = f.read(length)
        f.seek(physical)
        f.write(bytes((b ^ 0x5A) or 0x77 for b in before))
    return before


def build(wal: str) -> dict[int, dict[int, bytes]]:
    """Streams 1-3 appended and closed cleanly, stream 4 crashed: the issue's scenario, scaled down."""
    oracle = {}
    for s in (1, 2, 3):
        proc = walctl("append", wal, "--stream", s, "--input", "-", "--framing", "length-prefixed", "--json",
                      input=framed([payload(s, i) for i in range(1500)]))
        assert proc.returncode == 0, proc.stderr
        oracle[s] = acked(proc, s)
    oracle[4] = crashed_append(wal, 4, 1500)
    return oracle


def check_salvaged(wal: str, store: Path, oracle: dict[int, dict[int, bytes]], result: dict) -> None:
    """The store holds exactly the acknowledged records outside the recorded corruption gaps, each
    once; the gaps lie in the damage; the WAL takes appends again and each stream continues."""
    got = read_back(open_store(str(store)))
    gaps = [g for g in mf.load_latest(open_store(str(store))).stream_gaps or () if g.cause == "corruption"]
    assert gaps and all(g.damage_offset is not None for g in gaps)
    lost = {(g.stream_id, o) for g in gaps for o in range(g.from_offset, g.to_offset)}
    for s, records in oracle.items():
        have = got.get(s, [])
        offsets = [o for o, _ in have]
        assert len(offsets) == len(set(offsets)), f"stream {s}: a record twice"
        expected = {o: p for o, p in records.items() if (s, o) not in lost}
        extra = {o: p for o, p in have if o not in expected}  # durable, never acknowledged: after the crash
        assert {o: p for o, p in have if o in expected} == expected, f"stream {s}: an intact record is missing"
        assert all(o > max(records) and p == payload(s, o) for o, p in extra.items()), f"stream {s}: a stray record"
    assert all(o in oracle[s] for s, o in lost), "a gap names offsets that were never acknowledged"
    damaged = [(d["offset"], d["end_offset"]) for d in result["damage"]]
    assert damaged and all(any(lo <= g.damage_offset < hi for lo, hi in damaged) for g in gaps)
    rec = walctl("recover", wal, "--json")
    assert rec.returncode == 0, rec.stderr  # the damage lies behind the trim point now
    for s in oracle:
        more = walctl("append", wal, "--stream", s, "--store", store, "--json", "again")
        assert more.returncode == 0, more.stderr
        assert json.loads(more.stdout.splitlines()[0])["stream_offset"] == max(o for o, _ in got[s]) + 1


def test_salvage_saves_every_intact_acknowledged_record_and_reopens_the_wal(tmp_path):
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
    oracle = build(wal)
    first = damage(wal, 8192 + 100 * 4096)    # stream 1's records (~460 B each), acknowledged long before the crash
    damage(wal, 8192 + 400 * 4096, 3 * 4096)  # and a second place, in stream 3's
    store = tmp_path / "store"
    refused = walctl("upload", wal, "--store", store)
    assert refused.returncode == 3 and b"walctl salvage" in refused.stderr
    proc = walctl("salvage", wal, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["damage"]) == 2 and result["trimmed_to_wal_offset"] is not None
    # the evidence holds the damaged bytes as they lie on the device (from where the damage starts)
    evidence = json.loads(Path(result["evidence_file"]).read_text())["damage"][0]
    kept, at, hit = bytes.fromhex(evidence["hex"]), evidence["physical_offset"], 8192 + 100 * 4096
    written = bytes((b ^ 0x5A) or 0x77 for b in first)
    lo, hi = max(at, hit), min(at + len(kept), hit + len(written))
    assert hi > lo and kept[lo - at:hi - at] == written[lo - hit:hi - hit]
    check_salvaged(wal, store, oracle, result)
    again = walctl("salvage", wal, "--store", store, "--json")  # no damage left: a plain upload
    assert again.returncode == 0 and json.loads(again.stdout)["records"] == len(oracle)  # check_salvaged's appends


def test_salvage_refuses_while_a_writer_holds_the_wal(tmp_path, hold_writer):
    wal = str(tmp_path / "w.img")
    assert walctl("init", wal, "--capacity", "4MiB", "--no-prewrite").returncode == 0
    assert walctl("append", wal, "--stream", 1, "a", "b").returncode == 0
    hold_writer(wal)
    proc = walctl("salvage", wal, "--store", tmp_path / "store")
    assert proc.returncode == 5 and b"holds the WAL" in proc.stderr
    assert not (tmp_path / "store").exists()


def test_salvage_of_a_loop_device_keeps_its_evidence_where_told(tmp_path, loop_device):
    dev = loop_device(16 << 20)
    assert walctl("init", dev).returncode == 0
    oracle = {}
    for s in (1, 2):
        proc = walctl("append", dev, "--stream", s, "--input", "-", "--framing", "length-prefixed", "--json",
                      input=framed([payload(s, i) for i in range(1500)]))
        assert proc.returncode == 0, proc.stderr
        oracle[s] = acked(proc, s)
    backing = tmp_path / "loop-backing-0.img"
    subprocess.run(["sync"], check=False)
    with open(dev, "r+b", buffering=0) as f:  # the damage goes through the device itself
        f.seek(8192 + 100 * 4096)
        f.write(b"\xa5" * 4096)
        os.fsync(f.fileno())
    assert backing.exists()
    store = tmp_path / "store"
    nowhere = walctl("salvage", dev, "--store", store)
    assert nowhere.returncode == 5 and b"WALCTL_REPAIR_EVIDENCE_DIR" in nowhere.stderr
    evidence_dir = tmp_path / "evidence"
    evidence_dir.mkdir()
    proc = walctl("salvage", dev, "--store", store, "--json", env={"WALCTL_REPAIR_EVIDENCE_DIR": str(evidence_dir)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert Path(result["evidence_file"]).parent == evidence_dir
    evidence = json.loads(Path(result["evidence_file"]).read_text())["damage"][0]
    kept, at, hit = bytes.fromhex(evidence["hex"]), evidence["physical_offset"], 8192 + 100 * 4096
    lo, hi = max(at, hit), min(at + len(kept), hit + 4096)
    assert hi > lo and kept[lo - at:hi - at] == b"\xa5" * (hi - lo)
    check_salvaged(dev, store, oracle, result)
