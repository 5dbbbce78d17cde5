"""Damage to acknowledged records: verdicts from every durable fact, and the whole picture (issue 28, 1-2).

Each log is written through the CLI (``append --json``: its record lines are the
acknowledgements, the oracle), closed cleanly, crashed (SIGKILL once every record sent
was acknowledged) or crashed after a clean close; then 4 KiB of random bytes land on one,
two or five places of acknowledged records (as ``dd ... conv=notrunc`` would), on a
header slot or across the end of a lap. ``recover --json`` must then:
- report each damaged place as one finding whose verdict is corruption (the oracle: it
  holds acknowledged records) and name the rule that decided it;
- show every intact acknowledged record, before and after the damage, and count them per
  stream (``--stats``); each stream gap across the damage is "corruption", never a crash's;
- say ``complete`` (every part of the live log was read) and exit 3.
``status`` keeps its used/free figures and counts on the damaged log, and ``walctl salvage``
stores exactly the intact acknowledged records, the lost offsets recorded as corruption gaps.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
from collections import Counter

import pytest

from walctl import metrics
from walctl.device import open_device
from walctl.format.header import HEADERS_SIZE
from walctl.wal import reader
from walctl.wal.findings import BEYOND_WINDOW

from walhelpers import header_of, mark_ungraceful

KiB, MiB = 1 << 10, 1 << 20
RECORD_OVERHEAD = 24 + 33  # record header + StreamRecordBatch header
PAYLOAD = 1000


# -- writing through the CLI: the acknowledgements are the oracle ----------------------------

def _framed(stream: int, count: int, size: int = PAYLOAD, first: int = 0) -> bytes:
    """``count`` length-prefixed payloads, each a function of (stream, index)."""
    out = bytearray()
    for i in range(first, first + count):
        body = (f"{stream}:{i}:".encode() * (size // 4 + 1))[:size]
        out += struct.pack(">I", len(body)) + body
    return bytes(out)


def _acks(stdout: str) -> list[dict]:
    return [r for r in map(json.loads, stdout.splitlines()) if r["type"] == "record"]


def append_clean(tmp_path, dev: str, stream: int, count: int) -> list[dict]:
    """``append --input FILE`` (closed cleanly at the end of its input); its acknowledgements."""
    data = tmp_path / f"in-{stream}.bin"
    data.write_bytes(_framed(stream, count))
    proc = in_process("append", dev, "--stream", stream, "--input", data, "--framing", "length-prefixed", "--json")
    assert proc.returncode == 0, proc.stderr
    acks = _acks(proc.stdout.decode())
    assert len(acks) == count
    return acks


def append_crash(dev: str, stream: int, count: int) -> list[dict]:
    """``producer | append --input - --json``, killed (SIGKILL) once ``count`` records are acknowledged:
    the writer never closes, its header stays ungraceful."""
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "append", dev, "--stream", str(stream), "--input", "-",
                             "--framing", "length-prefixed", "--json"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acks = []
    # The producer writes from its own thread (the acknowledgements fill stdout meanwhile); stdin
    # stays open after it: the writer waits for more, as a slow producer's would.
    producer = threading.Thread(target=_produce, args=(proc.stdin, _framed(stream, count)), daemon=True)
    producer.start()
    try:
        while len(acks) < count:
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()
            row = json.loads(line)
            if row["type"] == "record":
                acks.append(row)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        producer.join(timeout=30)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            try:
                f.close()
            except BrokenPipeError:
                pass
    return acks


def _produce(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.flush()
    except (BrokenPipeError, ValueError):
        pass  # killed first (a test that failed)


def end_of(ack: dict) -> int:
    return ack["wal_offset"] + RECORD_OVERHEAD + ack["payload_bytes"]


# -- the damage --------------------------------------------------------------------------------

def _ring(dev: str) -> int:
    return header_of(dev).header.capacity - HEADERS_SIZE


def dd_random(dev: str, wal_offset: int, seed: int) -> tuple[int, int]:
    """4 KiB of random bytes over the aligned block holding ``wal_offset`` (``dd bs=4096 seek=N
    count=1 conv=notrunc`` of /dev/urandom); returns the damaged WAL range."""
    ring = _ring(dev)
    start = wal_offset - wal_offset % 4096
    position = HEADERS_SIZE + start % ring
    fd = os.open(dev, os.O_RDWR)
    try:
        os.pwrite(fd, random.Random(seed).randbytes(4096), position)
        os.fsync(fd)  # (a block device: past its page cache, for the readers' O_DIRECT reads)
    finally:
        os.close(fd)
    if dev.startswith("/dev/"):
        subprocess.run(["blockdev", "--flushbufs", dev], check=False, capture_output=True)
    return start, start + 4096


def oracle(acks: list[dict], damaged: list[tuple[int, int]]) -> tuple[list[dict], list[dict]]:
    """(intact, lost) acknowledged records: lost when any byte of it was damaged."""
    intact, lost = [], []
    for ack in acks:
        hit = any(ack["wal_offset"] < hi and lo < end_of(ack) for lo, hi in damaged)
        (lost if hit else intact).append(ack)
    return intact, lost


def lost_ranges(lost: list[dict]) -> set[tuple[int, int, int]]:
    """The stream offsets lost, as (stream, from, to) runs: the stream gaps recover must show."""
    runs: dict[int, list[list[int]]] = {}
    for ack in sorted(lost, key=lambda a: (a["stream_id"], a["stream_offset"])):
        sid, off = ack["stream_id"], ack["stream_offset"]
        if runs.get(sid) and runs[sid][-1][1] == off:
            runs[sid][-1][1] = off + 1
        else:
            runs.setdefault(sid, []).append([off, off + 1])
    return {(sid, lo, hi) for sid, spans in runs.items() for lo, hi in spans}


# -- reading back ------------------------------------------------------------------------------

def in_process(*args) -> subprocess.CompletedProcess:
    """``walctl ARGS`` in this process (typer's CliRunner: the same command, its exit code, stdout and
    stderr; the readers' checks run four times a case, the writes and salvages ~60 times in the file,
    and a process start costs 0.3 s of CPU). The crashed writers are processes (append_crash: SIGKILL);
    tests/wal/test_salvage.py runs salvage as its own process."""
    from typer.testing import CliRunner

    from walctl.cli import app

    env = {k: None for k in os.environ if k.startswith("WALCTL_")}  # as a process with a clean environment
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout_bytes, result.stderr_bytes)


def recover(dev: str, *args) -> tuple[int, dict[str, list[dict]]]:
    proc = in_process("recover", dev, "--json", *args)
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.strip()]
    assert lines and lines[-1]["type"] == "summary", proc.stderr
    assert b"Traceback" not in proc.stderr
    by_type: dict[str, list[dict]] = {}
    for line in lines:
        by_type.setdefault(line["type"], []).append(line)
    return proc.returncode, by_type


def status(dev: str, *args) -> tuple[int, dict]:
    proc = in_process("status", dev, "--json", *args)
    return proc.returncode, json.loads(proc.stdout)


def check_whole_picture(dev: str, acks: list[dict], damaged: list[tuple[int, int]]) -> dict:
    """The contract of this file, for one damaged log (see the module docstring)."""
    intact, lost = oracle(acks, damaged)
    assert lost, "the damage must hit acknowledged records"
    code, out = recover(dev)
    summary = out["summary"][0]
    shown = {(r["wal_offset"], r["stream_id"], r["stream_offset"]) for r in out.get("record", [])}
    expected = {(a["wal_offset"], a["stream_id"], a["stream_offset"]) for a in intact}
    assert expected <= shown, f"{len(expected - shown)} intact acknowledged records not shown"
    assert shown == expected  # (every record sent was acknowledged before the kill: none unacknowledged)
    assert not shown & {(a["wal_offset"], a["stream_id"], a["stream_offset"]) for a in lost}
    # one finding per damaged place, each corruption, with the rule that decided it
    findings = [f for f in out.get("finding", []) if f["kind"] != "bad_header_slot"]
    assert len(findings) == len(damaged), findings
    for (lo, hi), f in zip(sorted(damaged), sorted(findings, key=lambda f: f["offset"])):
        before = [end_of(a) for a in acks if end_of(a) <= lo]
        after = [a["wal_offset"] for a in intact if a["wal_offset"] >= hi]
        assert (max(before) if before else 0) <= f["offset"] <= lo, (lo, f)
        if after:
            assert f["end_offset"] == min(after), (hi, f)  # read on at the next intact record
        assert f["explained_by_crash"] is False, f
        assert f["rule"].startswith("below "), f
    # every stream gap across the damage is corruption: exactly the offsets lost
    gaps = out.get("stream_gap", [])
    assert {(g["stream_id"], g["from"], g["to"]) for g in gaps} == lost_ranges(lost)
    assert all(g["cause"] == "corruption" and "acknowledged" in g["explanation"] for g in gaps), gaps
    assert code == 3
    assert summary["complete"] is True and summary["corrupt_findings"] == len(findings)
    assert summary["records"] == len(shown) and summary["end_offset"] >= max(end_of(a) for a in intact)
    # counted per stream (--stats)
    _, stats = recover(dev, "--stats")
    assert {s["stream_id"]: s["records"] for s in stats["stream"]} == dict(Counter(a["stream_id"] for a in intact))
    return summary


# -- logs --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The undamaged logs, written once: each test damages a copy. {name: (path, acks)}."""
    root = tmp_path_factory.mktemp("images")
    built = {}

    def init(name: str, capacity: str) -> str:
        dev = str(root / f"{name}.img")
        assert in_process("init", dev, "--capacity", capacity, "--no-prewrite").returncode == 0
        return dev

    dev = init("clean", "16MiB")
    built["clean"] = (dev, sum((append_clean(root, dev, s, 2500) for s in (1, 2, 3)), []))
    dev = init("crash", "16MiB")
    built["crash"] = (dev, append_crash(dev, 4, 8000))
    dev = init("crash_after_clean", "32MiB")
    acks = sum((append_clean(root, dev, s, 2500) for s in (1, 2, 3)), [])
    built["crash_after_clean"] = (dev, acks + append_crash(dev, 4, 8000))
    return built


@pytest.fixture
def copy_of(images, tmp_path):
    def make(name: str) -> tuple[str, list[dict]]:
        src, acks = images[name]
        dst = str(tmp_path / os.path.basename(src))
        shutil.copyfile(src, dst)
        return dst, acks
    make.store = str(tmp_path / "store")  # where check_salvage uploads
    return make


def at(acks: list[dict], stream: int, fraction: float, below: int | None = None) -> int:
    """A WAL offset inside the record ``fraction`` of the way through ``stream``'s acknowledgements
    (``below``: of those that end before it)."""
    mine = [a for a in acks if a["stream_id"] == stream and (below is None or end_of(a) < below)]
    return mine[int(fraction * (len(mine) - 1))]["wal_offset"] + 300


def decidable(dev: str, acks: list[dict]) -> int | None:
    """Where damage of a crashed writer's records stops being decidable: one sliding window (and a
    block) before the crash's end; past it AutoMQ's window rule calls it crash damage (FORMATS 1.4)."""
    header = header_of(dev).header
    return None if header.clean else end_of(acks[-1]) - header.sliding_window_max_length - 8192


# (name, image, the WAL offsets to damage: (acks, where decidable ends) -> [offset])
TABLE = [
    ("clean close, one place", "clean", lambda a, d: [at(a, 1, 0.4)]),
    ("clean close, two places", "clean", lambda a, d: [at(a, 1, 0.5), at(a, 3, 0.2)]),
    ("clean close, five places", "clean",
     lambda a, d: [at(a, 1, 0.1), at(a, 1, 0.7), at(a, 2, 0.3), at(a, 3, 0.5), at(a, 3, 0.9)]),
    ("crash, one place", "crash", lambda a, d: [at(a, 4, 0.5, d)]),
    ("crash, two places", "crash", lambda a, d: [at(a, 4, 0.1, d), at(a, 4, 0.8, d)]),
    ("crash after a clean close, one place below its log end", "crash_after_clean", lambda a, d: [at(a, 1, 0.6)]),
    ("crash after a clean close, five places", "crash_after_clean",
     lambda a, d: [at(a, 1, 0.2), at(a, 2, 0.9), at(a, 3, 0.4), at(a, 4, 0.1, d), at(a, 4, 0.9, d)]),
]


@pytest.mark.parametrize("name,image,places", TABLE, ids=[t[0] for t in TABLE])
def test_damage_to_acknowledged_records_is_corruption_and_read_past(copy_of, name, image, places):
    dev, acks = copy_of(image)
    _, before = status(dev, "--scan")
    offsets = places(acks, decidable(dev, acks))
    damaged = [dd_random(dev, o, seed) for seed, o in enumerate(offsets)]
    summary = check_whole_picture(dev, acks, damaged)
    intact, _ = oracle(acks, damaged)
    # status: the same space used and free, every intact record counted, exit 3
    code, after = status(dev, "--scan")
    assert code == 3
    assert (after["used_bytes"], after["free_bytes"]) == (before["used_bytes"], before["free_bytes"])
    assert after["records"] == len(intact) and after["complete"] is True
    assert after["corrupt_findings"] == summary["corrupt_findings"] and after["durable_end"] is not None
    # reading past damage costs no read of its own in a clean log; in a crashed one, at most the
    # probe's first 1 MiB read past each place (the scan's own reads and read-ahead are kept)
    extra = after["bytes_read"] - before["bytes_read"]
    assert extra <= (0 if header_of(dev).header.clean else len(offsets) * MiB), extra
    check_salvage(dev, acks, damaged, copy_of.store)


def _body(stream: int, i: int, size: int = PAYLOAD) -> bytes:
    return (f"{stream}:{i}:".encode() * (size // 4 + 1))[:size]  # what _framed sent as record i


def check_salvage(dev: str, acks: list[dict], damaged: list[tuple[int, int]], store: str) -> None:
    """walctl salvage (issue 28 item 3) stores exactly the intact acknowledged records, records
    exactly the lost offsets as corruption gaps, and leaves the WAL clean and taking appends."""
    from walctl.store import manifest as mf
    from walctl.store import open_store

    from storehelpers import read_back

    intact, lost = oracle(acks, damaged)
    proc = in_process("salvage", dev, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    got = read_back(open_store(store))
    want: dict[int, list] = {}
    for a in sorted(intact, key=lambda a: (a["stream_id"], a["stream_offset"])):
        want.setdefault(a["stream_id"], []).append((a["stream_offset"], _body(a["stream_id"], a["stream_offset"])))
    assert got == want  # every intact acknowledged record, once; nothing lost in the damage
    gaps = mf.load_latest(open_store(store)).stream_gaps or []
    assert {(g.stream_id, g.from_offset, g.to_offset) for g in gaps} == lost_ranges(lost)
    assert all(g.cause == "corruption" for g in gaps)
    assert in_process("recover", dev, "--json").returncode == 0  # the damage is behind the trim point
    assert in_process("append", dev, "--stream", 1, "--store", store, "after").returncode == 0


def test_the_rule_names_the_fact_that_decided(copy_of):
    """Below the checkpoint of a clean close: that checkpoint; in a crashed writer's log past it,
    the sliding window before a valid record found further on (AutoMQ's window, turned round)."""
    dev, acks = copy_of("crash_after_clean")
    log_end = max(end_of(a) for a in acks if a["stream_id"] == 3)
    assert header_of(dev).checkpoint.log_end == log_end
    dd_random(dev, at(acks, 2, 0.5), 1)
    dd_random(dev, at(acks, 4, 0.3, decidable(dev, acks)), 2)
    code, out = recover(dev)
    rules = [f["rule"] for f in out["finding"]]
    assert rules[0] == f"below the checkpoint's log end {log_end:,}"
    assert rules[1].startswith("below the durable end ") and "sliding window" in rules[1]
    assert code == 3 and out["summary"][0]["durable_end_offset"] > log_end
    proc = in_process("recover", dev, "--stats")
    assert f"[CORRUPTION: below the checkpoint's log end {log_end:,}]" in proc.stdout.decode()
    assert "crash damage" not in proc.stdout.decode() and "never acknowledged" not in proc.stdout.decode()


def test_a_damaged_header_slot_leaves_the_other_slots_facts(copy_of):
    """The current slot (the last clean close) damaged: the other slot, the last writer's open
    (ungraceful), still says what was durable before it; the rest is read by the window rule."""
    dev, acks = copy_of("clean")
    state = header_of(dev)
    fd = os.open(dev, os.O_RDWR)
    try:
        os.pwrite(fd, random.Random(9).randbytes(512), state.current * 4096)
    finally:
        os.close(fd)
    assert header_of(dev).current != state.current
    damaged = [dd_random(dev, at(acks, 2, 0.5), 3)]
    check_whole_picture(dev, acks, damaged)
    _, out = recover(dev)
    slot = [f for f in out["finding"] if f["kind"] == "bad_header_slot"]
    assert len(slot) == 1 and slot[0]["explained_by_crash"] and "header write" in slot[0]["rule"]
    check_salvage(dev, acks, damaged, copy_of.store)


def test_damage_at_the_end_of_a_lap_is_read_past_into_the_next(tmp_path):
    """The last block before the ring's end and the first after it damaged: reading goes on
    across the lap's end (its padding record) to the records of the next lap."""
    dev = str(tmp_path / "lap.img")
    assert in_process("init", dev, "--capacity", "1MiB", "--no-prewrite").returncode == 0
    first = append_clean(tmp_path, dev, 1, 700)
    assert in_process("trim", dev, first[600]["wal_offset"]).returncode == 0
    second = append_clean(tmp_path, dev, 2, 700)
    ring = _ring(dev)
    assert second[0]["wal_offset"] < ring < second[-1]["wal_offset"]
    acks = first[601:] + second
    last_before = max(a["wal_offset"] for a in acks if end_of(a) <= ring)
    damaged = [dd_random(dev, last_before, 1), dd_random(dev, ring + 5000, 2)]
    check_whole_picture(dev, acks, damaged)
    check_salvage(dev, acks, damaged, str(tmp_path / "store"))


def test_a_damaged_tail_below_the_durable_end_is_one_lost_tail(copy_of):
    """The last acknowledged block of the clean close damaged, in a crashed writer's log whose
    writer never wrote: the log ends early, and that is corruption, not the crash's end."""
    dev, acks = copy_of("clean")
    mark_ungraceful(dev)  # a writer opened the clean log (ungraceful from then on) and died at once
    assert not header_of(dev).header.clean
    last = acks[-1]
    damaged = [dd_random(dev, last["wal_offset"], 1)]
    intact, lost = oracle(acks, damaged)
    code, out = recover(dev)
    findings = out["finding"]
    assert code == 3 and findings and all(not f["explained_by_crash"] for f in findings)
    assert findings[-1]["kind"] == "end_mismatch" and findings[-1]["end_offset"] == end_of(last)
    assert {r["wal_offset"] for r in out["record"]} == {a["wal_offset"] for a in intact}
    _, st = status(dev)
    _, clean_status = status(copy_of("clean")[0])
    assert st["used_bytes"] == clean_status["used_bytes"]


def test_a_writers_scan_keeps_its_rule_and_says_what_it_did_not_read(copy_of):
    """A writer's scan (no durable points: where a writer resumes, AutoMQ's window rule) still
    stops one window past mid-log damage and proves it mid-log with the probe; the records past
    it are not read, so the report is incomplete. A writer still refuses the log (exit 3)."""
    dev, acks = copy_of("crash")
    dd_random(dev, at(acks, 4, 0.2, decidable(dev, acks)), 1)
    d = open_device(dev, writable=False)
    try:
        report = reader.scan_report(d, header_of(dev).header)
    finally:
        d.close()
    assert BEYOND_WINDOW in [f.kind for f in report.findings] and report.corrupt
    assert report.complete is False and report.stopped_by == "one sliding window past the first invalid block"
    proc = in_process("append", dev, "--stream", 4, "more")
    assert proc.returncode == 3, proc.stderr


def test_the_reported_scenario_scaled_down(tmp_path):
    """Issue 28's report at 32 MiB: three streams closed cleanly, a fourth crashed (SIGKILL) after
    its records were acknowledged, then 4 KiB of random bytes 2 MiB in (dd seek=512)."""
    dev = str(tmp_path / "w.img")
    assert in_process("init", dev, "--capacity", "32MiB", "--no-prewrite").returncode == 0
    acks = sum((append_clean(tmp_path, dev, s, 3000) for s in (1, 2, 3)), [])
    acks += append_crash(dev, 4, 9000)
    damaged = [dd_random(dev, 512 * 4096, 7)]
    intact, lost = oracle(acks, damaged)
    assert {a["stream_id"] for a in lost} == {1}
    summary = check_whole_picture(dev, acks, damaged)
    assert summary["end_offset"] == end_of(acks[-1])
    code, out = recover(dev, "--stream", "2")
    assert len(out["record"]) == 3000 and out["summary"][0]["complete"] is True and code == 3
    prom = tmp_path / "wal.prom"
    code, st = status(dev, "--metrics-file", prom)
    assert code == 3 and st["used_bytes"] == end_of(acks[-1]) and st["records"] == len(intact)
    assert st["used_percent"] == round(100.0 * end_of(acks[-1]) / _ring(dev), 2)
    gauges = metrics.parse_values(prom.read_text(), {"device": dev, "node_id": ""})
    assert (gauges["walctl_wal_used_percent"], gauges["walctl_wal_free_bytes"]) == (st["used_percent"],
                                                                                    st["free_bytes"])
    assert gauges["walctl_wal_records"] == len(intact) and gauges["walctl_wal_corrupt_findings"] == 1
    text = in_process("recover", dev, "--stats").stdout.decode()
    assert "crash damage" not in text and "never acknowledged" not in text
    assert "mid-log" not in text and "not shown" not in text


def test_a_loop_device(loop_device, tmp_path):
    """The same on a block device (a loop device, direct I/O): a crash after a clean close, two places."""
    dev = loop_device(16 << 20)
    assert in_process("init", dev, "--force").returncode == 0
    acks = sum((append_clean(tmp_path, dev, s, 1500) for s in (1, 2)), [])
    acks += append_crash(dev, 4, 6000)
    damaged = [dd_random(dev, at(acks, 1, 0.5), 1), dd_random(dev, at(acks, 4, 0.2, decidable(dev, acks)), 2)]
    check_whole_picture(dev, acks, damaged)


def test_a_hole_in_the_crashed_writers_last_window_stays_crash_damage(copy_of):
    """Past the durable end, inside the last sliding window of the crashed writer, AutoMQ's rule
    decides: a hole there is what a crash leaves (blocks in flight), so it is crash damage (exit 0)
    and its stream gap the crash's; a reader cannot tell it from damage of records acknowledged
    in that window (nothing durable says they were), the one case the rule leaves open. As for a
    crash, the records of the damaged block after the damage are not looked for (the next block's are)."""
    dev, acks = copy_of("crash_after_clean")
    log_end = header_of(dev).checkpoint.log_end
    window = header_of(dev).header.sliding_window_max_length
    mine = [a for a in acks if a["stream_id"] == 4]
    lo, hi = dd_random(dev, mine[-500]["wal_offset"], 5)  # (a block holds at most 256 KiB: more follow)
    assert log_end < lo and lo + window > end_of(acks[-1])  # in the last window: no record a window past it
    code, out = recover(dev)
    (finding,) = out["finding"]
    assert finding["kind"] == "hole" and finding["explained_by_crash"] is True
    assert finding["offset"] <= lo < hi <= finding["end_offset"]
    assert finding["rule"].startswith(f"past the durable end {log_end:,}") and "AutoMQ's rule" in finding["rule"]
    assert out["stream_gap"] and all(g["cause"] == "crash" for g in out["stream_gap"])
    intact, _ = oracle(acks, [(lo, hi)])
    shown = {r["wal_offset"] for r in out["record"]}
    assert shown >= {a["wal_offset"] for a in intact if not finding["offset"] <= a["wal_offset"] < finding["end_offset"]}
    assert code == 0 and out["summary"][0]["complete"] is True
