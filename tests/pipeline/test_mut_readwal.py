"""walctl/pipeline/readwal.py (issue 32): ``read --wal``'s WAL tail on a small WAL file: which
records are the stream's and after the upload mark, the gap finding between the store and the WAL,
when a missing range is no gap (a newer manifest, slots that moved, blocks in flight), the WAL's
own damage, and where a pass stops (--to, --limit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.device import open_device
from walctl.format import record as rec
from walctl.format.batch import StreamRecordBatch
from walctl.format.checkpoint import Checkpoint
from walctl.pipeline import readwal
from walctl.pipeline.readresult import GAP, WAL_DAMAGE, ReadFinding, ReadRecord
from walctl.store import manifest as mf
from walctl.wal.headers import read_headers, write_header
from walctl.wal.init import init_wal
from walctl.wal.layout import Ring

CAPACITY = 64 * 1024
RING = Ring(CAPACITY)
# (WAL offset, stream, base offset): stream 1 misses offsets 2..4 between 157 and 4096
RECORDS = [(0, 1, 0), (157, 1, 1), (314, 2, 0), (4096, 1, 5), (8192, 1, 6)]
END = 8192 + 157


def _poke(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(RING.physical(offset))
        f.write(data)


def _build(path, *, clean=True, node_id=3) -> str:
    init_wal(str(path), CAPACITY, node_id=node_id)
    for offset, sid, base in RECORDS:
        body = StreamRecordBatch(sid, 0, base, 1, bytes([base]) * 100).encode()
        _poke(str(path), offset, rec.encode_record(offset, body))
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=12288, shutdown_type=0 if clean else 1),
                     Checkpoint(log_end=END))
    finally:
        dev.close()
    return str(path)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return open(_build(tmp_path_factory.mktemp("r") / "w.img"), "rb").read()


@pytest.fixture
def wal(image, tmp_path):
    path = tmp_path / "w.img"
    path.write_bytes(image)
    return str(path)


class Tail(readwal.WalTail):
    """StreamReader's state, as much of it as the WAL tail uses (its _record, _done, _finding)."""

    def __init__(self, wal, stream_id=1, *, from_offset=None, to_offset=None, limit=None, numbers=(7,)):
        self.wal, self.stream_id = wal, stream_id
        self.from_offset, self.to_offset, self.limit = from_offset, to_offset, limit
        self.next = from_offset
        self.store = SimpleNamespace(numbers=list(numbers))
        self._unsettled = None
        self.records = 0
        self.found = []

    def _record(self, record):
        self.records += 1
        self.next = record.batch.end_offset
        return record

    def _finding(self, finding):
        self.found.append(finding)
        return finding

    def _done(self):
        if self.limit is not None and self.records >= self.limit:
            return True
        return self.to_offset is not None and self.next is not None and self.next >= self.to_offset


@pytest.fixture(autouse=True)
def numbers(monkeypatch):
    monkeypatch.setattr(mf, "manifest_numbers", lambda store: store.numbers)


class Doc:
    def __init__(self, mark=None):
        self.mark, self.asked = mark, []

    def upload_mark(self, node):
        self.asked.append(node)
        return None if self.mark is None else SimpleNamespace(offset=self.mark)


def _pass(tail, doc=None, *, number=7, moved=None, writer=None, session=None):
    session = session or tail._open_wal()
    if moved is not None:
        session.moved = moved
    if writer is not None:  # (and the slots as they were: moved() would see the lock's holder change)
        session.writer_now = writer
        if moved is None:
            session.moved = lambda: None
    try:
        return list(tail._wal_pass(doc or Doc(), number, session)), session
    finally:
        session.dev.close()


def _records(events):
    return [(e.wal_offset, e.batch.base_offset) for e in events if isinstance(e, ReadRecord)]


def test_open_wal_reads_the_slots_read_only(wal):
    session = Tail(wal)._open_wal()
    try:
        assert session.path == wal and session.state.header.node_id == 3 and not session.dev.writable
    finally:
        session.dev.close()


def test_the_stream_s_records_with_the_gap_between_them(wal):
    tail = Tail(wal)
    doc = Doc()
    events, _ = _pass(tail, doc)
    assert doc.asked == [3]  # the WAL's node id
    assert _records(events) == [(0, 0), (157, 1), (4096, 5), (8192, 6)]
    [gap] = [e for e in events if isinstance(e, ReadFinding)]
    assert gap == ReadFinding(GAP, "stream 1: offsets [2, 5) are neither in the store nor in the WAL", 2, 5,
                              position=4096)
    assert events[2] is gap and tail.found == [gap]
    assert all(e.source == "wal" for e in events if isinstance(e, ReadRecord))
    assert tail.next == 7 and tail._unsettled is None


def test_records_at_or_before_the_upload_mark_are_the_store_s(wal):
    events, _ = _pass(Tail(wal), Doc(mark=157))
    assert _records(events) == [(4096, 5), (8192, 6)]  # no gap: the store served up to the mark
    events, _ = _pass(Tail(wal), Doc(mark=156))
    assert _records(events) == [(157, 1), (4096, 5), (8192, 6)]
    events, _ = _pass(Tail(wal), Doc(mark=8192))
    assert events == []


def test_another_stream_s_records(wal):
    events, _ = _pass(Tail(wal, 2))
    assert _records(events) == [(314, 0)]
    assert _pass(Tail(wal, 9))[0] == []


def test_records_the_store_already_served_are_skipped(wal):
    tail = Tail(wal)
    tail.next = 2  # the store served 0 and 1
    events, _ = _pass(tail)
    assert _records(events)[0] == (4096, 5)
    assert [e.kind for e in events if isinstance(e, ReadFinding)] == [GAP]
    tail = Tail(wal)
    tail.next = 5
    events, _ = _pass(tail)
    assert _records(events) == [(4096, 5), (8192, 6)] and tail.found == []


def test_from_offset_starts_the_stream_there(wal):
    events, _ = _pass(Tail(wal, from_offset=1))
    assert _records(events) == [(157, 1), (4096, 5), (8192, 6)]
    events, _ = _pass(Tail(wal, from_offset=5))
    assert _records(events) == [(4096, 5), (8192, 6)]
    tail = Tail(wal, from_offset=0)
    events, _ = _pass(tail)
    assert _records(events) == [(0, 0), (157, 1), (4096, 5), (8192, 6)]


def test_a_batch_straddling_the_start_is_not_served(tmp_path):
    path = tmp_path / "w.img"
    init_wal(str(path), CAPACITY)
    body = StreamRecordBatch(1, 0, 0, 4, bytes(100)).encode()  # offsets 0..3 in one batch
    _poke(str(path), 0, rec.encode_record(0, body))
    body = StreamRecordBatch(1, 0, 4, 1, bytes(100)).encode()
    _poke(str(path), 157, rec.encode_record(157, body))
    dev = open_device(str(path), writable=True)
    try:
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=4096), Checkpoint(log_end=314))
    finally:
        dev.close()
    events, _ = _pass(Tail(str(path), from_offset=2))
    assert _records(events) == [(157, 4)]  # served from its own start only (the store's rule)


def test_to_offset_stops_the_pass(wal):
    events, _ = _pass(Tail(wal, to_offset=5))
    assert _records(events) == [(0, 0), (157, 1)]
    events, _ = _pass(Tail(wal, to_offset=6))
    assert _records(events) == [(0, 0), (157, 1), (4096, 5)]
    events, _ = _pass(Tail(wal, to_offset=1))
    assert _records(events) == [(0, 0)]


def test_the_limit_stops_the_pass(wal):
    events, _ = _pass(Tail(wal, limit=1))
    assert _records(events) == [(0, 0)]
    events, _ = _pass(Tail(wal, limit=3))
    assert _records(events) == [(0, 0), (157, 1), (4096, 5)]


def test_a_newer_manifest_makes_the_missing_range_unsettled(wal):
    tail = Tail(wal, numbers=(7, 8))
    events, _ = _pass(tail)
    assert _records(events) == [(0, 0), (157, 1)]  # nothing past the missing range
    assert tail._unsettled == "manifest 8 was committed" and tail.found == []
    tail = Tail(wal, numbers=())  # (no manifest listed: not a newer one)
    assert [e.kind for e in _pass(tail)[0] if isinstance(e, ReadFinding)] == [GAP]


def test_slots_that_moved_make_the_missing_range_unsettled(wal):
    tail = Tail(wal)
    events, _ = _pass(tail, moved=lambda: "a writer started while it was read")
    assert _records(events) == [(0, 0), (157, 1)] and tail._unsettled == "a writer started while it was read"


def test_blocks_in_flight_after_a_hole_make_the_missing_range_unsettled(wal):
    _poke(wal, 157, bytes(24))  # a hole before the gap: 157's block may be in flight
    tail = Tail(wal)
    events, _ = _pass(tail, writer=lambda: 4242)
    assert _records(events) == [(0, 0)] and tail._unsettled == "blocks of the running writer were in flight"
    tail = Tail(wal)
    events, _ = _pass(tail, writer=lambda: None)  # no writer: the gap is a gap
    assert tail.found[0].kind == GAP and tail.found[0].start_offset == 1


def test_a_running_writer_without_a_hole_leaves_the_gap_a_gap(wal):
    tail = Tail(wal)
    events, _ = _pass(tail, writer=lambda: 4242)
    assert [e.kind for e in tail.found] == [GAP] and tail._unsettled is None


def test_a_damaged_record_before_the_gap_is_a_hole_too(tmp_path):
    path = _build(tmp_path / "w.img", clean=False)
    # 157's body damaged: a range skipped before the gap
    _poke(path, 157 + 60, b"\xff")
    tail = Tail(path)
    events, _ = _pass(tail, writer=lambda: 4242)
    assert tail._unsettled == "blocks of the running writer were in flight"


def test_the_wal_s_damage_is_reported_after_its_records(wal):
    _poke(wal, 314, bytes(24))  # stream 2's record: damage below the checkpoint's end
    tail = Tail(wal)
    events, _ = _pass(tail)
    damage = [e for e in events if isinstance(e, ReadFinding) and e.kind == WAL_DAMAGE]
    assert len(damage) == 1 and events[-1] is damage[0]
    assert damage[0].message.startswith("WAL hole at offset 314: ")
    assert damage[0].position == 314 and damage[0].start_offset is None
    assert _records(events) == [(0, 0), (157, 1), (4096, 5), (8192, 6)]


def test_damage_seen_after_the_slots_moved_is_read_again(wal):
    _poke(wal, 314, bytes(24))
    tail = Tail(wal, 2)
    calls = []

    def moved():
        calls.append(1)
        return "the writer stopped while it was read"

    events, _ = _pass(tail, moved=moved)
    assert [e for e in events if isinstance(e, ReadFinding)] == [] and calls == [1]
    assert tail._unsettled == "the writer stopped while it was read"


def test_damage_is_not_judged_once_the_read_is_done(wal):
    _poke(wal, 4096 + 30, b"\xff\xff")  # 4096's body damaged: corruption below the checkpoint
    tail = Tail(wal, limit=1)
    events, _ = _pass(tail, moved=lambda: pytest.fail("not asked: the read is done"))
    assert _records(events) == [(0, 0)] and tail._unsettled is None


def test_the_scan_is_closed_whatever_ends_the_pass(wal, monkeypatch):
    from walctl.wal import reader

    closed = []
    real = reader.Scan.close
    monkeypatch.setattr(reader.Scan, "close", lambda self: (closed.append(1), real(self)))
    _pass(Tail(wal, limit=1))
    _pass(Tail(wal))
    assert closed == [1, 1]


def test_the_failpoint_for_a_writer_starting_mid_scan(wal, monkeypatch):
    import walctl.failpoints as fp

    calls = []
    monkeypatch.setattr(fp, "failpoint", calls.append)
    monkeypatch.setenv("WALCTL_FAILPOINT", "read-wal-scan:hold")
    _pass(Tail(wal))
    assert calls and set(calls) == {"read-wal-scan"}
    calls.clear()
    monkeypatch.setenv("WALCTL_FAILPOINT", "x-read-wal-scan")
    _pass(Tail(wal))
    assert calls == []


def test_moved_in_order_manifest_slots_then_writer(wal):
    tail = Tail(wal, numbers=(7, 9))
    session = SimpleNamespace(moved=lambda: "slots", writer_now=lambda: 1)
    assert tail._moved(7, session, True) == "manifest 9 was committed"
    tail.store.numbers = [6, 7]
    assert tail._moved(7, session, True) == "slots"
    session.moved = lambda: None
    assert tail._moved(7, session, True) == "blocks of the running writer were in flight"
    assert tail._moved(7, session, False) is None
    session.writer_now = lambda: None
    assert tail._moved(7, session, True) is None
    tail.store.numbers = []
    assert tail._moved(7, session, False) is None


def test_wal_batch_boundaries(wal):
    tail = Tail(wal)
    b = StreamRecordBatch(1, 0, 5, 2, b"x")
    ev = SimpleNamespace(offset=100, batch=b)
    assert tail._wal_batch(ev, 99) is b
    assert tail._wal_batch(ev, 100) is None and tail._wal_batch(ev, 101) is None
    assert tail._wal_batch(ev, -1) is b
    assert tail._wal_batch(SimpleNamespace(offset=100, batch=None), -1) is None
    assert tail._wal_batch(SimpleNamespace(offset=100, batch=StreamRecordBatch(2, 0, 5, 2, b"x")), -1) is None
    tail.next = 7
    assert tail._wal_batch(ev, -1) is None  # ends at 7: served
    tail.next = 6
    assert tail._wal_batch(ev, -1) is b
    tail.next = 0
    assert tail._wal_batch(ev, -1) is b


def test_moved_names_the_newest_manifest():
    tail = Tail("w", numbers=(6, 7, 8, 9))
    session = SimpleNamespace(moved=lambda: None, writer_now=lambda: None)
    assert tail._moved(7, session, False) == "manifest 9 was committed"


def test_from_offset_before_the_wal_s_first_batch_is_a_gap_from_there(wal):
    tail = Tail(wal, from_offset=3)
    events, _ = _pass(tail)
    assert _records(events) == [(4096, 5), (8192, 6)]
    assert tail.found == [ReadFinding(GAP, "stream 1: offsets [3, 5) are neither in the store nor in the WAL", 3, 5,
                                      position=4096)]


def test_no_damage_asks_nothing_of_the_slots(wal):
    tail = Tail(wal, 2)
    events, _ = _pass(tail, moved=lambda: "the writer stopped while it was read")
    assert _records(events) == [(314, 0)] and tail._unsettled is None


def test_the_scan_probes_past_a_crashed_window_only_without_a_writer(tmp_path):
    path = tmp_path / "p.img"
    init_wal(str(path), CAPACITY)
    for offset, base in ((0, 0), (12288, 2), (16384, 3)):
        _poke(str(path), offset, rec.encode_record(offset, StreamRecordBatch(1, 0, base, 1, bytes(100)).encode()))
    dev = open_device(str(path), writable=True)
    try:  # a crashed writer whose 4 KiB window ends at 4096: records far past it prove damage
        state = read_headers(dev)
        write_header(dev, state, state.header.with_(next_offset=4096, shutdown_type=1,
                                                    sliding_window_max_length=4096), None)
    finally:
        dev.close()
    tail = Tail(str(path))
    events, _ = _pass(tail, moved=lambda: None)
    assert _records(events) == [(0, 0)]
    assert [(e.kind, e.position) for e in events if isinstance(e, ReadFinding)] == [(WAL_DAMAGE, 12288)]
    tail = Tail(str(path))
    session = tail._open_wal()
    session.writer_pid = 4242  # a running writer: its window is its own, no probing
    events, _ = _pass(tail, moved=lambda: None, session=session)
    assert _records(events) == [(0, 0)] and tail.found == []
