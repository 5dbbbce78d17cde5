"""walctl read: a stream back from the store, byte for byte, with GET budgets asserted (local and S3 over HTTP)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from typer.testing import CliRunner

from walctl.cli import app
from walctl.format import object as obj
from walctl.pipeline.read import DAMAGE, GAP, MISSING, ReadFinding, ReadRecord, StreamReader, read_stream
from walctl.store import manifest as mf
from walctl.pipeline.upload import upload

from storehelpers import append, make_wal

KiB, MiB = 1 << 10, 1 << 20


def records(events) -> list[ReadRecord]:
    return [e for e in events if isinstance(e, ReadRecord)]


def findings(events) -> list[ReadFinding]:
    return [e for e in events if isinstance(e, ReadFinding)]


def many_uploads(tmp_path, store, rounds=4, plan=None, block_size=2 * KiB):
    """A WAL appended and uploaded ``rounds`` times; returns every payload appended, per stream."""
    wal = make_wal(tmp_path)
    plan = plan or {1: (12, 300), 2: (5, 100), 3: (3, 5000)}
    appended: dict[int, list[bytes]] = {}
    for _ in range(rounds):
        got = append(wal, plan, store=store)
        for sid, payloads in got.items():
            appended.setdefault(sid, []).extend(payloads)
        upload(wal, store, block_size=block_size, split_size=1 * MiB)
    return wal, appended


def test_many_uploads_read_back_byte_identical(tmp_path, store):
    _, appended = many_uploads(tmp_path, store)
    doc = mf.load_latest(store)
    assert len(doc.objects) == 4
    for sid, payloads in appended.items():
        events, summary = read_stream(store, sid)
        assert findings(events) == []
        got = records(events)
        assert [r.batch.payload for r in got] == payloads  # byte-identical, in order
        assert [r.batch.base_offset for r in got] == list(range(len(payloads)))
        assert summary.records == len(payloads) and summary.next_offset == len(payloads)
        assert summary.objects == 4
        # budget: 1 manifest GET + per object 1 tail GET (index inside) + 1 GET for its adjacent blocks
        assert summary.gets == 1 + 2 * 4 and summary.block_gets == 4 and summary.lists == 1


def test_gets_on_the_wire_s3(tmp_path, faulty_s3):
    """Counted at the HTTP proxy, not by the store's own counters: what S3 would bill."""
    store = faulty_s3.store
    _, appended = many_uploads(tmp_path, store, rounds=3)
    faulty_s3.proxy.clear()
    before = len(faulty_s3.proxy.seen("GET"))
    events, summary = read_stream(faulty_s3.make_store(), 1)
    assert [r.batch.payload for r in records(events)] == appended[1]
    gets = faulty_s3.proxy.seen("GET")
    # the LIST of manifest/ is a GET too on the wire: 1 list + 1 manifest + 3 x (tail + blocks)
    assert len(gets) - before == 1 + 1 + 2 * 3
    assert summary.gets == 1 + 2 * 3 and summary.lists == 1


def test_big_index_costs_a_second_tail_get_and_runs_are_cut(tmp_path, local_store):
    wal = make_wal(tmp_path)
    appended = append(wal, {5: (40, 1000)})[5]
    upload(wal, local_store, block_size=1)  # one block per batch: 40 index entries
    # guess of 4 entries: the tail GET misses the index, a second GET reads it exactly
    reader = StreamReader(local_store, 5, entries_guess=4, run_bytes=10 * KiB)
    got = records(reader.events())
    assert [r.batch.payload for r in got] == appended
    s = reader.summary
    block = 10 + 33 + 1000
    per_run = (10 * KiB) // block  # adjacent blocks that fit one 10 KiB run
    runs = -(-40 // per_run)
    assert s.block_gets == runs and s.gets == 1 + 2 + runs
    # memory bound: no run read more than run_bytes
    assert s.bytes_read <= 2 * 1024 + 40 * 36 + 48 + 40 * block + 4 * 36 + 48


def test_sso_stream_in_the_middle_is_one_run(tmp_path, local_store):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (10, 1000), 2: (10, 1000), 3: (10, 1000)})  # ~30 KiB: stream 2 is not in the tail
    upload(wal, local_store, block_size=1 * KiB, split_size=1 * MiB)
    doc = mf.load_latest(local_store)
    assert [o.kind for o in doc.objects] == ["SSO"]
    events, s = read_stream(local_store, 2)
    assert [r.batch.payload for r in records(events)] == appended[2]
    assert s.block_gets == 1
    size = doc.objects[0].size
    stream2 = next(r for r in doc.objects[0].ranges if r.stream_id == 2)
    # only stream 2's blocks and the object's tail were read, not streams 1 and 3
    assert s.bytes_read - len(local_store.read_all(mf.manifest_key(doc.number))) <= stream2.bytes + \
        obj.tail_length_hint(object_size=size)


@pytest.mark.parametrize("kwargs, want", [
    ({"from_offset": 20}, range(20, 48)),
    ({"from_offset": 11, "to_offset": 26}, range(11, 26)),
    ({"to_offset": 1}, range(0, 1)),
    ({"limit": 3}, range(0, 3)),
    ({"from_offset": 23, "limit": 5}, range(23, 28)),
    ({"from_offset": 48}, range(0)),
])
def test_ranges_and_limits(tmp_path, local_store, kwargs, want):
    _, appended = many_uploads(tmp_path, local_store, plan={1: (12, 300), 2: (2, 10)})
    events, s = read_stream(local_store, 1, **kwargs)
    assert findings(events) == []
    got = records(events)
    assert [r.batch.base_offset for r in got] == list(want)
    # no read ahead is wasted: exactly the objects holding the wanted offsets are read (12 per object);
    # each is smaller than the first tail read, so that one GET brings its blocks too
    touched = {r.object_id for r in got}
    assert s.objects == len(touched) and s.block_gets == 0 and s.gets == 1 + len(touched)
    assert [r.batch.payload for r in got] == [appended[1][i] for i in want]


def test_a_whole_stream_object_is_one_get(tmp_path, local_store):
    """Wanted whole, a Stream Object is read in one GET (blocks, index and footer together)."""
    _, appended = many_uploads(tmp_path, local_store, rounds=3, plan={6: (30, 2000)}, block_size=8 * KiB)
    doc = mf.load_latest(local_store)
    assert all(o.size > obj.tail_length_hint() for o in doc.objects)  # the tail alone would not do
    events, s = read_stream(local_store, 6)
    assert [r.batch.payload for r in records(events)] == appended[6]
    assert s.gets == 1 + 3 and s.block_gets == 0
    assert s.bytes_read == len(local_store.read_all(mf.manifest_key(doc.number))) + sum(
        o.size for o in doc.objects)
    # from the middle of the first object: that one is read as tail + blocks, the others whole
    events, s = read_stream(local_store, 6, from_offset=15)
    assert [r.batch.base_offset for r in records(events)] == list(range(15, 90))
    assert s.gets == 1 + 2 + 2 and s.block_gets == 1


def test_limit_reads_only_what_it_needs(tmp_path, local_store):
    wal = make_wal(tmp_path)
    append(wal, {1: (50, 1000)})
    upload(wal, local_store, block_size=1)  # 50 blocks, all adjacent
    events, s = read_stream(local_store, 1, limit=2)
    assert len(records(events)) == 2
    doc = mf.load_latest(local_store)
    overhead = len(local_store.read_all(mf.manifest_key(doc.number))) + obj.tail_length_hint()
    assert s.block_gets == 1 and s.bytes_read == overhead + 2 * (10 + 33 + 1000)  # two blocks, not fifty
    events, s = read_stream(local_store, 1, from_offset=40, limit=1)
    assert [r.batch.base_offset for r in records(events)] == [40]
    assert s.block_gets == 1


def _flip(store, key: str, position: int) -> None:
    path = os.path.join(store.root, key)
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


def test_damaged_block_is_a_finding_and_the_rest_is_served(tmp_path, local_store):
    wal = make_wal(tmp_path)
    appended = append(wal, {1: (6, 100)})[1]
    upload(wal, local_store, block_size=1)
    appended += append(wal, {1: (6, 100)}, store=local_store)[1]
    upload(wal, local_store, block_size=1)
    doc = mf.load_latest(local_store)
    first = min(doc.objects, key=lambda o: o.id)
    entry = obj.parse_tail(local_store.read_all(first.key), first.size)[1][2]
    _flip(local_store, first.key, entry.block_position)  # the third block's magic
    events, s = read_stream(local_store, 1)
    crc, bad = findings(events)  # the data crc says "somewhere", the blocks say where
    assert crc.kind == DAMAGE and "data crc" in crc.message and crc.key == first.key
    assert bad.kind == DAMAGE and bad.key == first.key and bad.position == entry.block_position
    assert (bad.start_offset, bad.end_offset) == (2, 3)
    got = records(events)
    assert [r.batch.base_offset for r in got] == [0, 1] + list(range(3, 12))
    assert [r.batch.payload for r in got] == appended[:2] + appended[3:]


def test_payload_flip_is_caught_by_the_data_crc_before_serving(tmp_path, local_store):
    wal = make_wal(tmp_path)
    append(wal, {1: (4, 100)})
    upload(wal, local_store)
    o = mf.load_latest(local_store).objects[0]
    _flip(local_store, o.key, 10 + 33 + 50)  # inside the first batch's payload: structure intact
    events, _ = read_stream(local_store, 1)
    assert isinstance(events[0], ReadFinding) and events[0].kind == DAMAGE and "data crc" in events[0].message
    assert len(records(events)) == 4


def test_missing_object_and_gap_are_findings(tmp_path, local_store):
    many_uploads(tmp_path, local_store, rounds=3, plan={1: (4, 100)})
    doc = mf.load_latest(local_store)
    middle = sorted(doc.objects, key=lambda o: o.id)[1]
    os.unlink(os.path.join(local_store.root, middle.key))
    events, s = read_stream(local_store, 1)
    bad = findings(events)
    assert [f.kind for f in bad] == [MISSING] and (bad[0].start_offset, bad[0].end_offset) == (4, 8)
    assert [r.batch.base_offset for r in records(events)] == [0, 1, 2, 3, 8, 9, 10, 11]

    def drop(m):
        m.objects = [o for o in m.objects if o.id != middle.id]

    mf.commit(local_store, drop, command="test: lose an object")
    events, _ = read_stream(local_store, 1)
    assert [(f.kind, f.start_offset, f.end_offset) for f in findings(events)] == [(GAP, 4, 8)]


def test_wal_tail_follows_the_store(tmp_path, local_store):
    wal, appended = many_uploads(tmp_path, local_store, rounds=2, plan={1: (3, 50), 2: (2, 50)})
    tail = append(wal, {1: (4, 70), 2: (1, 10)}, store=local_store)
    events, s = read_stream(local_store, 1, wal=wal)
    got = records(events)
    assert [r.batch.payload for r in got] == appended[1] + tail[1]
    assert [r.source for r in got] == ["store"] * 6 + ["wal"] * 4
    assert s.wal_records == 4 and findings(events) == []
    # a stream only in the WAL so far
    only = append(wal, {9: (2, 20)})
    events, _ = read_stream(local_store, 9, wal=wal)
    assert [r.batch.payload for r in records(events)] == only[9]


def test_follow_serves_new_commits(tmp_path, local_store):
    wal, appended = many_uploads(tmp_path, local_store, rounds=1, plan={1: (3, 50)})
    later: list[bytes] = []
    sleeps: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:  # a commit lands during the first two waits
        sleeps.append(seconds)
        now[0] += seconds
        if len(sleeps) <= 2:
            later.extend(append(wal, {1: (2, 60)}, store=local_store)[1])
            upload(wal, local_store)

    reader = StreamReader(local_store, 1)
    got = records(reader.events(follow=True, poll_s=0.1, max_poll_s=0.4, idle_timeout_s=1.0, sleep=sleep,
                                clock=lambda: now[0]))
    assert [r.batch.payload for r in got] == appended[1] + later and len(later) == 4
    # backoff: the wait resets after new data, then doubles up to the cap until the idle timeout
    assert sleeps == [0.1, 0.1, 0.1, 0.1, 0.2, 0.4, 0.4]
    assert reader.summary.polls == len(sleeps) + 1


# -- the command --------------------------------------------------------------------------------

def run_read(*args):
    result = CliRunner().invoke(app, ["read", *map(str, args)])
    assert "Traceback" not in result.stderr
    return result


def test_cli_json_contract_and_exit_codes(tmp_path, local_store):
    _, appended = many_uploads(tmp_path, local_store, rounds=2, plan={4: (3, 20)})
    r = run_read("--store", local_store.root, "--stream", 4, "--json", "--payload", "base64", "-n", 2)
    assert r.exit_code == 0
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["type"] for x in lines] == ["record", "record", "summary"]
    import base64
    assert base64.b64decode(lines[0]["payload"]) == appended[4][0]
    s = lines[-1]
    for field in ("gets", "bytes_read", "objects", "records", "next_offset", "findings"):
        assert field in s
    assert s["records"] == 2 and s["complete"] is False

    r = run_read("--store", tmp_path / "nothing", "--stream", 4)
    assert r.exit_code == 4 and not (tmp_path / "nothing").exists()  # a reader creates nothing
    r = run_read("--store", local_store.root, "--stream", 77)
    assert r.exit_code == 4 and r.stderr.startswith("walctl: error: no stream 77")
    r = run_read("--store", local_store.root, "--stream", 4, "--from", 5, "--to", 5)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1


def test_cli_damage_exits_3_with_findings_and_summary(tmp_path, local_store):
    many_uploads(tmp_path, local_store, rounds=2, plan={4: (3, 20)})
    o = sorted(mf.load_latest(local_store).objects, key=lambda o: o.id)[0]
    _flip(local_store, o.key, 0)
    r = run_read("--store", local_store.root, "--stream", 4, "--json")
    assert r.exit_code == 3
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["type"] == "finding" and lines[0]["kind"] == "damage" and lines[0]["key"] == o.key
    assert [x["base_offset"] for x in lines if x["type"] == "record"] == [3, 4, 5]
    assert lines[-1]["type"] == "summary" and lines[-1]["error"]["code"] == 3
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("walctl: error: ")


def test_cli_follow_bounded_and_wal(tmp_path, local_store):
    wal, appended = many_uploads(tmp_path, local_store, rounds=1, plan={4: (3, 20)})
    tail = append(wal, {4: (2, 30)}, store=local_store)[4]
    r = run_read("--store", local_store.root, "--stream", 4, "--json", "--follow", "--idle-timeout", "0.3",
                 "--wal", wal, "--payload", "hex")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    recs = [x for x in lines if x["type"] == "record"]
    assert [bytes.fromhex(x["payload"]) for x in recs] == appended[4] + tail
    assert [x["source"] for x in recs] == ["store"] * 3 + ["wal"] * 2
    assert lines[-1]["type"] == "summary" and lines[-1]["interrupted"] is False and lines[-1]["polls"] >= 2
    r = run_read("--store", local_store.root, "--stream", 4, "--idle-timeout", "1")
    assert r.exit_code == 2  # --idle-timeout without --follow: a usage error, not ignored


def test_follow_ends_on_ctrl_c_with_a_summary(tmp_path, local_store):
    import signal
    import subprocess
    import sys

    many_uploads(tmp_path, local_store, rounds=1, plan={4: (3, 20)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALCTL_")}
    proc = subprocess.Popen([sys.executable, "-m", "walctl", "read", "--store", local_store.root, "--stream", "4",
                             "--json", "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = [proc.stdout.readline() for _ in range(3)]  # the three batches: it is following now
        assert all(json.loads(x)["type"] == "record" for x in first)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["type"] == "summary" and summary["interrupted"] is True and summary["records"] == 3


def test_a_read_without_follow_stopped_by_sigterm_exits_143(tmp_path, local_store):
    """Not following, a signal leaves the read incomplete: exit 128 + the signal (143 for SIGTERM,
    not 130 as for Ctrl-C), its summary 'complete': false with that code, as CLI.md's rule says."""
    from signalhelpers import signalled

    many_uploads(tmp_path, local_store, rounds=1, plan={4: (300, 2000)})  # ~1.2 MB of hex: more than a pipe holds
    code, out, err = signalled(tmp_path, ["read", "--store", local_store.root, "--stream", "4", "--json",
                                          "--payload", "hex"], full_pipe=True)
    assert code == 143, err
    lines = [json.loads(x) for x in out.splitlines()]  # every line whole: none cut short
    records, summaries = lines[:-1], [x for x in lines if x["type"] == "summary"]
    assert [x["type"] for x in records] == ["record"] * len(records) and 0 < len(records) < 300
    assert [x["base_offset"] for x in records] == list(range(len(records)))
    assert summaries == [lines[-1]]  # one summary, the last line
    assert lines[-1]["complete"] is False and lines[-1]["records"] >= len(records)
    assert lines[-1]["error"]["code"] == 143 and lines[-1]["error"]["signal"] == "SIGTERM"
    assert "SIGTERM" in err


def test_overlapping_objects_are_a_finding_and_served_once(tmp_path, local_store):
    _, appended = many_uploads(tmp_path, local_store, rounds=2, plan={1: (4, 100)})
    doc = mf.load_latest(local_store)
    first = min(doc.objects, key=lambda o: o.id)
    copy_key = mf.object_key(99)
    local_store.put(copy_key, local_store.read_all(first.key))

    def add_copy(m):
        m.objects.append(dataclasses.replace(first, id=99, key=copy_key, order_id=99))

    mf.commit(local_store, add_copy, command="test: two objects with the same range")
    events, s = read_stream(local_store, 1)
    assert [(f.kind, f.object_id) for f in findings(events)] == [("overlap", 99)]
    assert [r.batch.payload for r in records(events)] == appended[1]  # each offset once
    assert s.objects == 2  # the duplicate's bytes were never needed


def test_cli_record_lines_are_the_dicts_rendering_and_flushed_before_a_follow_wait(tmp_path, local_store, capsys):
    """The --payload none fast lines are byte for byte the dict's rendering; lines are gathered, and
    written before a --follow poll waits (a follower sees each poll's batches at once)."""
    from walctl.commands.read import _Printer
    from walctl.commands.recover import Payload

    many_uploads(tmp_path, local_store, rounds=2, plan={4: (3, 20)})
    events, _ = read_stream(local_store, 4)
    printer = _Printer(True, Payload.none)
    for event in records(events):
        printer.event(event)
    assert printer._fast is True
    assert capsys.readouterr().out == ""  # gathered, not written one by one
    printer.flush_and_sleep(0)
    out = capsys.readouterr().out
    assert out == "".join(printer._render(e) for e in records(events))
    assert [json.loads(line)["base_offset"] for line in out.splitlines()] == list(range(6))


def test_payload_views_are_the_same_bytes_without_a_copy(tmp_path, local_store):
    _, appended = many_uploads(tmp_path, local_store, rounds=2, plan={4: (30, 700)})
    reader = StreamReader(local_store, 4, payload_views=True)
    got = [e.batch.payload for e in reader.events() if isinstance(e, ReadRecord)]
    assert got == appended[4] and reader.summary.findings == 0
    assert all(isinstance(p, memoryview) and p.readonly and isinstance(p.obj, bytes) for p in got)
    events, _ = read_stream(local_store, 4)  # the default: copies
    assert all(type(r.batch.payload) is bytes for r in records(events))


@pytest.mark.parametrize("which", [1, 2, 3])
def test_payload_flip_in_an_object_read_ahead_is_caught_by_its_data_crc(tmp_path, local_store, which):
    """Objects after the first are read ahead (their data crc computed in the read-ahead thread):
    a flipped payload byte in any of them is still a data crc finding, before its batches."""
    _, appended = many_uploads(tmp_path, local_store, rounds=4, plan={1: (12, 300)})
    objects = sorted(mf.load_latest(local_store).objects, key=lambda o: o.id)
    assert len(objects) == 4
    bad = objects[which]
    _flip(local_store, bad.key, 10 + 33 + 50)  # inside its first batch's payload: structure intact
    reader = StreamReader(local_store, 1, payload_views=True)
    events = list(reader.events())
    (f,) = findings(events)
    assert f.kind == DAMAGE and "data crc" in f.message and f.key == bad.key
    first_of_bad = next(i for i, e in enumerate(events) if isinstance(e, ReadRecord) and e.key == bad.key)
    assert events.index(f) == first_of_bad - 1  # said before any batch of that object
    assert len(records(events)) == len(appended[1]) and reader.summary.gets == 1 + 4


def test_payload_views_of_lent_buffers_stay_intact_while_held(tmp_path, local_store):
    """Objects over a MiB are read into buffers the local store lends (no copy out): holding every
    record's payload view (more buffers than it keeps) never lets a buffer be read into again."""
    _, appended = many_uploads(tmp_path, local_store, rounds=10, plan={1: (40, 40 * KiB)})
    objects = mf.load_latest(local_store).objects
    assert len(objects) == 10 and min(o.size for o in objects) > MiB
    reader = StreamReader(local_store, 1, payload_views=True)
    got = records(list(reader.events()))
    assert reader._lends and reader.summary.findings == 0
    assert {type(r.batch.payload.obj).__name__ for r in got} == {"mmap"}  # views of lent buffers
    assert [r.batch.payload for r in got] == appended[1]  # all still intact at the end


# -- rows (StreamReader(rows=True), what `walctl read --payload none` uses) ----------------------

def _flat(events) -> list:
    """Events with each store batch as (object_id, key, row): ReadRecords and ReadRows compare alike."""
    from walctl.pipeline.read import ReadRows

    out = []
    for e in events:
        if isinstance(e, ReadRows):
            assert e.rows  # never an empty event
            out += [(e.object_id, e.key, row) for row in e.rows]
        elif isinstance(e, ReadRecord) and e.source == "store":
            b = e.batch
            out.append((e.object_id, e.key, (b.stream_id, b.base_offset, b.end_offset, b.count, b.epoch,
                                            len(b.payload), e.block_position, e.batch_position)))
        else:
            out.append(e)
    return out


def _same_with_rows(store, sid, **kwargs):
    """rows=True serves what rows=False does: the same batches, findings, order and summary."""
    events, summary = read_stream(store, sid, **kwargs)
    rows_events, rows_summary = read_stream(store, sid, rows=True, **kwargs)
    assert _flat(rows_events) == _flat(events)
    assert rows_summary.to_json() == summary.to_json()
    return events, rows_events


@pytest.mark.parametrize("kwargs", [{}, {"from_offset": 20}, {"from_offset": 11, "to_offset": 26}, {"to_offset": 1},
                                    {"limit": 3}, {"from_offset": 23, "limit": 5}, {"from_offset": 48},
                                    {"limit": 13}, {"from_offset": 5, "to_offset": 40, "limit": 30}])
def test_rows_serve_what_records_do(tmp_path, local_store, kwargs):
    many_uploads(tmp_path, local_store, plan={1: (12, 300), 2: (2, 10)}, block_size=700)
    _, rows_events = _same_with_rows(local_store, 1, **kwargs)
    assert not any(isinstance(e, ReadRecord) for e in rows_events)  # every batch came as a row


def test_rows_with_damage_missing_objects_gaps_and_overlaps(tmp_path, local_store):
    wal = make_wal(tmp_path)
    append(wal, {1: (6, 100)})
    upload(wal, local_store, block_size=1)
    append(wal, {1: (6, 100)}, store=local_store)
    upload(wal, local_store, block_size=1)
    append(wal, {1: (6, 100)}, store=local_store)
    upload(wal, local_store, block_size=250)
    objects = sorted(mf.load_latest(local_store).objects, key=lambda o: o.id)
    entry = obj.parse_tail(local_store.read_all(objects[0].key), objects[0].size)[1][2]
    _flip(local_store, objects[0].key, entry.block_position)  # a block's magic: served one by one
    _flip(local_store, objects[1].key, 10 + 33 + 50)  # a payload byte: the data crc finding
    events, _ = _same_with_rows(local_store, 1)
    assert [f.kind for f in findings(events)] == [DAMAGE, DAMAGE, DAMAGE]
    copy_key = mf.object_key(99)
    local_store.put(copy_key, local_store.read_all(objects[2].key))

    def add_copy(m):
        m.objects.append(dataclasses.replace(objects[2], id=99, key=copy_key, order_id=99))

    mf.commit(local_store, add_copy, command="test: two objects with the same range")
    os.unlink(os.path.join(local_store.root, objects[1].key))
    events, _ = _same_with_rows(local_store, 1)
    assert {f.kind for f in findings(events)} == {DAMAGE, MISSING, "overlap"}
    _same_with_rows(local_store, 1, from_offset=3, limit=4)


def test_rows_gap_inside_an_object(tmp_path, local_store):
    """Two index entries of one object with a hole between their offsets: a gap finding between rows."""
    from walctl.format.batch import StreamRecordBatch

    blocks, entries, position = [], [], 0
    for bases in ((0, 1), (5, 6)):  # assemble_object refuses the hole: the layout is done here
        built = obj.build_object([(7, [StreamRecordBatch(7, 0, base, 1, b"x" * 10) for base in bases])])
        (entry,) = built.entries
        blocks.append(built.data[entry.block_position:entry.block_end])
        entries.append(obj.IndexEntry(7, entry.start_offset, entry.end_offset_delta, entry.record_count, position,
                                      entry.block_size))
        position += entry.block_size
    whole = obj._finish(blocks, entries, {}, obj.VERSION_WALCTL)
    local_store.put(mf.object_key(1), whole.data)

    def add(m):
        m.next_object_id = 2
        m.objects = [mf.LiveObject(1, mf.object_key(1), "SO", len(whole.data),
                                   [mf.ObjectRange(7, 0, 7, len(whole.data))], order_id=1, data_time=0)]
        m.streams = {7: mf.StreamSpan(0, 7)}

    mf.commit(local_store, add, command="test: a hole inside an object")
    events, rows_events = _same_with_rows(local_store, 7)
    assert [(f.kind, f.start_offset, f.end_offset) for f in findings(events)] == [(GAP, 2, 5)]
    assert [type(e).__name__ for e in rows_events] == ["ReadRows", "ReadFinding", "ReadRows"]
    _same_with_rows(local_store, 7, limit=3)
    _same_with_rows(local_store, 7, from_offset=1, to_offset=6)


def test_an_object_replaced_and_deleted_under_the_pass_is_read_from_the_newer_manifest(tmp_path, local_store):
    """The chaos run's race (a follower 'missing_object' on a healthy store, then offsets skipped):
    the pass reads manifest N; compaction replaces object X by a copy (N+1) and gc deletes X past its
    grace; then the pass reads X. Not a finding: the pass stops and the next reads N+1 from there.
    The same object gone with no newer manifest stays a missing_object (the test above)."""
    many_uploads(tmp_path, local_store, rounds=3, plan={1: (4, 100)})
    doc = mf.load_latest(local_store)
    middle = sorted(doc.objects, key=lambda o: o.id)[1]
    path = os.path.join(local_store.root, middle.key)
    raw = open(path, "rb").read()

    def replace_and_delete():
        def change(m):
            (new,) = m.prepare(1, mf.DEFAULT_NAMESPACE)
            local_store.put(new.key, raw)
            copy = dataclasses.replace(middle, id=new.id, key=new.key, order_id=new.id)
            m.replace([middle.id], [copy], reserved=[new.id], now=0.0)
        mf.commit(local_store, change, command="test: compaction")
        os.unlink(path)  # gc, past the grace

    real_tail = local_store.read_tail
    armed = [True]

    def racing_tail(key, length):
        if key == middle.key and armed[0]:
            armed[0] = False
            replace_and_delete()
        return real_tail(key, length)

    local_store.read_tail = racing_tail  # the pass read manifest N; X goes before its tail is read
    events, summary = read_stream(local_store, 1, read_ahead=False, sleep=lambda s: None)
    assert not armed[0], "the race did not happen"
    assert findings(events) == []
    assert [r.batch.base_offset for r in records(events)] == list(range(12))
    assert summary.retries >= 1 and summary.manifest_number == doc.number + 1
