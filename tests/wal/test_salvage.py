"""walctl salvage (issue 28, item 3): from a damaged WAL, every intact acknowledged record reaches the
store exactly once, each lost range is recorded as a gap (cause corruption) with the damage's WAL
offset, the damaged bytes are kept as evidence, and the WAL takes appends again. The oracle is the
writers' acknowledgements (append --json)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import read_back

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
RECORDS = 1500  # per stream (~460 B each: a stream fills ~730 KiB of the log)
BIG_STREAM = 5  # "grown": one record of BIG_STREAM larger than the 1 MiB initial window grows it


def walctl(*args, env=None, input: bytes | None = None, process: bool = False) -> subprocess.CompletedProcess:
    """``walctl ARGS`` as a process with no WALCTL_* variable but ``env``'s would run it. In this process
    (typer's CliRunner: the same command, its exit code, stdout and stderr; a process start costs
    0.3 s of CPU and these tests run ~40 commands), or with ``process`` as its own process (the
    salvage of the first test: the entry point's own exit)."""
    if not process:
        from typer.testing import CliRunner

        from walctl.cli import app

        changes = {k: None for k in os.environ if k.startswith("WALCTL_")}
        changes.update(env or {})
        result = CliRunner().invoke(app, [str(a) for a in args], env=changes, input=input or b"")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout_bytes, result.stderr_bytes)
    full = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "walctl", *map(str, args)], capture_output=True, env=full,
                          input=input if input is not None else b"", timeout=WAIT_S)


def payload(stream: int, i: int) -> bytes:
    return (b"s%d-%07d|" % (stream, i)) * (40 if stream != BIG_STREAM else 150_000)


def framed(items: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in items)


def acked(proc: subprocess.CompletedProcess, stream: int, where: dict | None = None) -> dict[int, bytes]:
    """stream offset -> payload, for every record the run acknowledged (``where``: (stream, stream
    offset) -> WAL offset, filled in)."""
    out = {}
    for line in proc.stdout.decode().splitlines():
        rec = json.loads(line)
        if rec["type"] == "record":
            out[rec["stream_offset"]] = payload(stream, rec["stream_offset"])
            if where is not None:
                where[stream, rec["stream_offset"]] = rec["wal_offset"]
    return out


def crashed_append(wal: str, stream: int, count: int, where: dict) -> dict[int, bytes]:
    """A writer fed exactly ``count`` records through a pipe that stays open, SIGKILLed once it has
    acknowledged every one of them (a crash, after the clean closes before it: its header says
    ungraceful, no checkpoint of its own); returns what it acknowledged. --iodepth 1: its window
    never needs to grow (the crash leaves the header's window as the runs before it left it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "append", wal, "--stream", str(stream), "--input", "-",
                             "--framing", "length-prefixed", "--json", "--iodepth", "1"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    got: dict[int, bytes] = {}
    try:
        proc.stdin.write(framed([payload(stream, i) for i in range(count)]))
        proc.stdin.flush()  # and left open: the writer waits for more, idle, every record acknowledged
        while len(got) < count:
            line = proc.stdout.readline()  # (bounded: the test's timeout)
            if not line:
                break
            rec = json.loads(line)
            if rec["type"] == "record":
                got[rec["stream_offset"]] = payload(stream, rec["stream_offset"])
                where[stream, rec["stream_offset"]] = rec["wal_offset"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert len(got) == count, "the writer did not acknowledge the records before the kill"
    return got


def damage(path: str, physical: int, length: int = 4096) -> bytes:
    """Overwrite ``length`` bytes at ``physical`` with a pattern no checksum passes; return what was there."""
    with open(path, "r+b") as f:
        f.seek(physical)
        before = f.read(length)
        f.seek(physical)
        f.write(bytes((b ^ 0x5A) or 0x77 for b in before))
    return before


def build(wal: str, *, grown: bool) -> tuple[dict[int, dict[int, bytes]], dict[tuple[int, int], int]]:
    """Streams 1-3 appended and closed cleanly, stream 4 crashed: the issue's scenario, scaled down.
    ``grown``: a record larger than the initial 1 MiB window (stream BIG_STREAM) before the crash
    grows the header's window to 5 MiB, so it reaches back over the whole log (what a busy
    writer's window does at random: the test's placements flaked with it). Returns the oracle
    and each acknowledged record's WAL offset. --iodepth 1 throughout: no other run grows it."""
    oracle, where = {}, {}
    streams = (1, 2, 3, BIG_STREAM) if grown else (1, 2, 3)
    for s in streams:
        count = 1 if s == BIG_STREAM else RECORDS
        proc = walctl("append", wal, "--stream", s, "--input", "-", "--framing", "length-prefixed", "--json",
                      "--iodepth", 1, input=framed([payload(s, i) for i in range(count)]))
        assert proc.returncode == 0, proc.stderr
        oracle[s] = acked(proc, s, where)
    oracle[4] = crashed_append(wal, 4, RECORDS, where)
    return oracle, where


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Factory: ``built(grown) -> (image, oracle, where)``, each variant built once per module (a
    test damages its own copy)."""
    cache = {}

    def get(grown: bool):
        if grown not in cache:
            wal = str(tmp_path_factory.mktemp("built") / "w.img")
            assert walctl("init", wal, "--capacity", "16MiB", "--no-prewrite").returncode == 0
            oracle, where = build(wal, grown=grown)
            header = json.loads(walctl("status", wal, "--json").stdout)
            assert header["shutdown_type"] == "ungraceful" and header["checkpoint"]["complete"]
            window = header["sliding_window_max_length_bytes"]
            assert window == (5 << 20 if grown else 1 << 20), window
            cache[grown] = (wal, oracle, where, header)
        return cache[grown]

    return get


def copy_of(built, tmp_path, grown: bool):
    image, oracle, where, header = built(grown)
    wal = str(tmp_path / "w.img")
    shutil.copyfile(image, wal)
    return wal, oracle, where, header


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


# Where the damage goes: (stream, stream offset) of the first record it hits, in records closed
# cleanly, so below the checkpoint's log end: acknowledged, durable, never a crash's to lose.
# "far": more than one 1 MiB window before the log's end; "near": within one window of it.
FAR_1, FAR_3, NEAR_3 = (1, 823), (3, 280), (3, 1300)


def test_salvage_saves_every_intact_acknowledged_record_and_reopens_the_wal(tmp_path, built):
    """The placements that flaked (1 run in 4): two damaged places in records closed cleanly, under
    a crashed writer's window grown to reach them. upload said "crash hole ... never acknowledged"
    and exited 0 (the window rule alone); it must refuse as recover does."""
    wal, oracle, where, header = copy_of(built, tmp_path, grown=True)
    hit = 8192 + where[FAR_1]
    first = damage(wal, hit)
    damage(wal, 8192 + where[FAR_3], 3 * 4096)
    assert where[FAR_3] + 3 * 4096 < header["checkpoint"]["log_end_offset"]
    store = tmp_path / "store"
    refused = walctl("upload", wal, "--store", store)
    assert refused.returncode == 3 and b"walctl salvage" in refused.stderr, refused.stderr
    assert b"below the checkpoint's log end" in refused.stderr and b"never acknowledged" not in refused.stderr
    proc = walctl("salvage", wal, "--store", store, "--json", process=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["damage"]) == 2 and result["trimmed_to_wal_offset"] is not None
    assert [d["offset"] for d in result["damage"]] == [where[FAR_1], where[FAR_3]]
    # the evidence holds the damaged bytes as they lie on the device (from where the damage starts)
    evidence = json.loads(Path(result["evidence_file"]).read_text())["damage"][0]
    kept, at = bytes.fromhex(evidence["hex"]), evidence["physical_offset"]
    written = bytes((b ^ 0x5A) or 0x77 for b in first)
    lo, hi = max(at, hit), min(at + len(kept), hit + len(written))
    assert hi > lo and kept[lo - at:hi - at] == written[lo - hit:hi - hit]
    check_salvaged(wal, store, oracle, result)
    again = walctl("salvage", wal, "--store", store, "--json")  # no damage left: a plain upload
    assert again.returncode == 0 and json.loads(again.stdout)["records"] == len(oracle)  # check_salvaged's appends


@pytest.mark.parametrize("grown, places", [
    pytest.param(True, [FAR_1], id="grown-window-stream1"),  # exit 0 "never acknowledged" on 44a6b2c
    pytest.param(True, [NEAR_3], id="grown-window-stream3"),  # exit 0
    pytest.param(False, [NEAR_3], id="window-stream3-near-end"),  # exit 0: the 1 MiB window reaches it
    pytest.param(False, [FAR_1, FAR_3], id="window-both-far"),  # exit 3, but the holes called crash damage
])
def test_upload_calls_damage_below_the_checkpoint_corruption_as_recover_does(tmp_path, built, grown, places):
    """Damage to records a clean close acknowledged (below the checkpoint's log end) is corruption
    wherever the crashed writer's window reaches: upload refuses it (exit 3, nothing uploaded), each
    hole judged by the checkpoint, the same findings recover reports."""
    wal, oracle, where, header = copy_of(built, tmp_path, grown)
    for place in places:
        damage(wal, 8192 + where[place])
        assert where[place] + 4096 < header["checkpoint"]["log_end_offset"]
    window = header["sliding_window_max_length_bytes"]
    near = [where[p] for p in places if header["end_offset"] - where[p] < window]
    assert bool(near) == (places != [FAR_1, FAR_3] or grown), "the placement is not the one named"
    store = tmp_path / "store"
    refused = walctl("upload", wal, "--store", store, "--json")
    assert refused.returncode == 3, refused.stderr
    assert b"never acknowledged" not in refused.stderr
    assert not [p for p in store.rglob("*") if p.is_file()], "upload stored something"
    error = json.loads(refused.stdout.splitlines()[-1])["error"]
    assert error["offset"] == where[places[0]] and "hole at offset" in error["message"]
    assert "below the checkpoint's log end" in error["message"]
    lines = [json.loads(line) for line in walctl("recover", wal, "--json", "--stats").stdout.splitlines()]
    findings = [f for f in lines if f["type"] == "finding"]
    assert [(f["offset"], f["explained_by_crash"]) for f in findings] == [(where[p], False) for p in places]
    assert all(f["rule"].startswith("below the checkpoint's log end") for f in findings)
    gaps = [g for g in lines if g["type"] == "stream_gap"]
    assert [g["stream_id"] for g in gaps] == [s for s, _ in places] and all(g["cause"] == "corruption" for g in gaps)


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
