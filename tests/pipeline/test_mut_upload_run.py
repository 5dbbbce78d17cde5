"""Upload's steps in order (walctl/pipeline/upload/run.py), in process, on small WAL files and a local
store: what one upload returns field by field, the dry run, the lease, the spools' choice, the
bodies kept, the --upload-at cap, a writer found during the scan, salvage's hooks, the roll back
and the trim's failure (issue 32: the module's mutants killed here, each upload in tens of ms).
"""

from __future__ import annotations

import errno
from types import SimpleNamespace

import pytest

from storehelpers import make_wal, read_back_batches
from walctl.errors import IOFailure, NotFoundError, RefusedError, TrimPendingError
from walctl.format import record as rec
from walctl.format.batch import HEADER_SIZE as BATCH_HEADER_SIZE, StreamRecordBatch
from walctl.pipeline.upload import run as upload_run
from walctl.pipeline.upload import spool as upload_spool
from walctl.pipeline.upload.run import UploadBusy, upload
from walctl.store import manifest as mf
from walctl.store.local import LocalStore
from walctl.wal.lifecycle import open_writer

KiB = 1 << 10


@pytest.fixture
def store(tmp_path):
    return LocalStore(str(tmp_path / "store"))


@pytest.fixture
def wal(tmp_path):
    return make_wal(tmp_path, capacity=1 << 20)


def _write(wal, items, *, crash=False):
    """Append (stream, base, payload size) batches; returns their WAL offsets."""
    opened = open_writer(wal, scan=True)
    w = opened.writer
    offsets = []
    for sid, base, size in items:
        offsets.append(w.append(StreamRecordBatch(sid, 0, base, 1, bytes([sid]) * size).encode()))
    if crash:
        w.drain()
        w.abort()
    else:
        w.close()
    return offsets


def _offsets(wal):
    from walctl.device import open_device
    from walctl.wal import reader
    from walctl.wal.lifecycle import read_wal_state

    dev = open_device(wal, writable=False)
    try:
        header = read_wal_state(dev, wal).header
        return [e.offset for e in reader.Scan(dev, header) if isinstance(e, reader.Entry)], header
    finally:
        dev.close()


def _header(wal):
    return _offsets(wal)[1]


# -- one upload, field by field -------------------------------------------------------------------

def test_an_upload_s_result_field_by_field(wal, store):
    _write(wal, [(1, 0, 100), (2, 0, 200), (1, 1, 100), (2, 1, 50)])
    offsets, header = _offsets(wal)
    seen = []
    result = upload(wal, store, progress=lambda done, total: seen.append((done, total)))
    assert result.records == 4 and result.skipped_records == 0
    assert result.payload_bytes == 450
    assert result.last_offset == offsets[-1] and result.trimmed_to == offsets[-1]
    doc = mf.load_latest(store)
    assert result.commit_number == doc.number == 2  # the prepare, then the live commit
    assert result.dry_run is False and result.warnings == [] and result.gaps == [] and result.bad_records == []
    assert result.seconds > 0
    assert len(result.objects) == 1
    o = result.objects[0]
    live = doc.objects[0]
    assert o == {"id": live.id, "key": live.key, "kind": "SSO", "size_bytes": live.size,
                 "streams": [r.to_json() for r in live.ranges]}
    assert [(r["stream_id"], r["start"], r["end"]) for r in o["streams"]] == [(1, 0, 2), (2, 0, 2)]
    body_total = 450 + 4 * BATCH_HEADER_SIZE
    assert seen[-1] == (body_total, body_total)
    got = read_back_batches(store)
    assert {s: [b.base_offset for b in v] for s, v in got.items()} == {1: [0, 1], 2: [0, 1]}
    assert doc.upload_mark(str(header.node_id)).offset == offsets[-1]
    assert _header(wal).trim_offset == offsets[-1]


def test_an_upload_with_trim_off_leaves_the_wal_as_it_was(wal, store):
    _write(wal, [(1, 0, 100)])
    result = upload(wal, store, trim=False)
    assert result.trimmed_to is None and result.records == 1 and _header(wal).trim_offset == -1


def test_one_stream_makes_a_stream_object_and_split_size_splits(wal, store):
    _write(wal, [(1, 0, 100), (2, 0, 30), (1, 1, 100), (3, 0, 30)])
    result = upload(wal, store, split_size=150, namespace="ns7", block_size=64)
    kinds = [(o["kind"], [r["stream_id"] for r in o["streams"]]) for o in result.objects]
    assert kinds == [("SO", [1]), ("SSO", [2, 3])]
    assert all("/ns7/" in o["key"] for o in result.objects)
    assert [o.key for o in mf.load_latest(store).objects] == [o["key"] for o in result.objects]


def test_a_rerun_uploads_nothing_and_says_where_the_log_was_uploaded_to(tmp_path, wal, store):
    _write(wal, [(1, 0, 100), (1, 1, 100)])
    upload(wal, store, trim=False)
    offsets, _ = _offsets(wal)
    again = upload(wal, store, trim=False)
    assert again.records == 0 and again.objects == [] and again.commit_number is None
    assert again.last_offset == offsets[-1] and again.payload_bytes == 0
    assert mf.load_latest(store).number == 2
    empty = make_wal(tmp_path, name="empty", capacity=1 << 20)
    nothing = upload(empty, LocalStore(str(tmp_path / "store2")))
    assert nothing.last_offset is None and nothing.records == 0 and nothing.trimmed_to is None


def test_a_run_of_interleaved_streams_cut_by_the_mark_uploads_each_stream_s_own_records(wal, store):
    """A second upload over a log the first did not trim (--no-trim, a trim that failed): the scan's
    run holds records at and below the mark, then stream 2's and stream 1's records after it. Each
    must go to its own stream (the bulk path once counted stream 2's records over the whole run,
    put stream 1's batch into stream 2's range and committed an object the index refuses)."""
    _write(wal, [(1, 0, 50), (2, 0, 50), (1, 1, 50)])
    assert upload(wal, store, trim=False).records == 3
    _write(wal, [(2, 1, 50), (1, 2, 50)])
    result = upload(wal, store, trim=False)
    assert result.records == 2
    assert sorted((r["stream_id"], r["start"], r["end"]) for o in result.objects for r in o["streams"]) == [
        (1, 2, 3), (2, 1, 2)]
    got = read_back_batches(store)
    assert {s: [b.base_offset for b in v] for s, v in got.items()} == {1: [0, 1, 2], 2: [0, 1]}
    assert {s: span.end for s, span in mf.load_latest(store).streams.items()} == {1: 3, 2: 2}


# -- the dry run ----------------------------------------------------------------------------------

def test_a_dry_run_plans_the_objects_and_writes_nothing(wal, store, monkeypatch):
    from walctl.device import lease

    _write(wal, [(1, 0, 100), (2, 0, 60)])
    offsets, _ = _offsets(wal)
    monkeypatch.setattr(lease, "take_lease", lambda *a, **k: pytest.fail("a dry run takes no lease"))
    result = upload(wal, store, dry_run=True)
    assert result.dry_run is True and result.records == 2 and result.payload_bytes == 160
    assert result.objects == [{"id": None, "key": None, "kind": "SSO", "size_bytes": None,
                               "data_bytes": 160 + 2 * BATCH_HEADER_SIZE,
                               "streams": [{"stream_id": 1, "start": 0, "end": 1, "bytes": 100 + BATCH_HEADER_SIZE},
                                           {"stream_id": 2, "start": 0, "end": 1, "bytes": 60 + BATCH_HEADER_SIZE}]}]
    assert result.last_offset == offsets[-1] and result.trimmed_to is None and result.commit_number is None
    assert result.seconds > 0
    assert mf.load_latest(store).number == 0 and list(store.list()) == []
    assert _header(wal).trim_offset == -1


# -- the lease ------------------------------------------------------------------------------------

def test_a_held_lease_is_upload_busy_after_saying_it_waits(wal, store, monkeypatch):
    from walctl.device import lease

    asked = []

    def take(path, *, wait_s, on_wait=None):
        asked.append((path, wait_s))
        if on_wait is not None:
            on_wait()
        return None

    monkeypatch.setattr(lease, "take_lease", take)
    said = []
    with pytest.raises(UploadBusy) as err:
        upload(wal, store, lease_wait_s=2.5, on_wait=said.append)
    assert asked == [(wal, 2.5)]
    assert said == [f"{wal}: another upload of this WAL is running; waiting up to 2.5 s for it to end"]
    assert (err.value.what, err.value.where, err.value.hint) == (
        "another upload of this WAL is running", wal,
        "nothing was uploaded; rerun when it has ended (it uploads the same records)")
    assert isinstance(err.value, RefusedError) and mf.load_latest(store).number == 0
    with pytest.raises(UploadBusy):
        upload_run._take_lease(wal, 600.0, None)  # no on_wait: nothing to call
    assert asked[-1] == (wal, 600.0)


def test_the_lease_is_released_after_the_upload(wal, store, monkeypatch):
    from walctl.device import lease

    released = []
    real = lease.take_lease

    def take(path, **kw):
        got = real(path, **kw)
        orig = got.release
        got.release = lambda: (released.append(path), orig())
        return got

    monkeypatch.setattr(lease, "take_lease", take)
    _write(wal, [(1, 0, 10)])
    upload(wal, store)
    assert released == [wal]


def test_a_wal_that_cannot_be_opened_writable_uploads_without_a_lease(monkeypatch):
    from walctl.device import lease

    for code in (errno.EROFS, errno.EACCES):
        monkeypatch.setattr(lease, "take_lease", lambda *a, _c=code, **k: (_ for _ in ()).throw(OSError(_c, "x")))
        assert upload_run._take_lease("/w", 1.0, None) is None
    monkeypatch.setattr(lease, "take_lease", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOENT, "gone")))
    with pytest.raises(NotFoundError) as err:
        upload_run._take_lease("/w", 1.0, None)
    assert err.value.where == "/w" and isinstance(err.value.__cause__, OSError)


def test_a_missing_wal_is_not_found(tmp_path, store):
    with pytest.raises(NotFoundError):
        upload(str(tmp_path / "nope"), store)
    with pytest.raises(NotFoundError):
        upload_run.check_wal(str(tmp_path / "nope"))


# -- check_wal and the flavour --------------------------------------------------------------------

def test_check_wal_passes_walctl_s_wal_and_refuses_another_flavour(wal, monkeypatch):
    upload_run.check_wal(wal)
    with pytest.raises(RefusedError) as err:
        upload_run._check_flavour(SimpleNamespace(flavour="automq"), "/w")
    assert (err.value.what, err.value.where, err.value.hint) == (
        "automq WAL: upload reads only walctl's WALs", "/w",
        "read its records with 'walctl recover'; AutoMQ uploads its own WAL")
    from walctl.wal import lifecycle

    real = lifecycle.read_wal_state

    def as_automq(dev, path):
        state = real(dev, path)
        return SimpleNamespace(header=SimpleNamespace(flavour="automq"), real=state)

    monkeypatch.setattr(lifecycle, "read_wal_state", as_automq)
    with pytest.raises(RefusedError, match="automq WAL"):
        upload_run.check_wal(wal)


def test_the_upload_handle_is_read_only_and_asks_no_holder(wal, monkeypatch):
    from walctl import device

    asked = []
    real = device.open_device
    monkeypatch.setattr(device, "open_device", lambda path, **kw: (asked.append((path, kw)), real(path, **kw))[1])
    upload_run._open_for_upload(wal).close()
    assert asked == [(wal, {"writable": False, "ask_holder": False})]


# -- the spools and the kept bodies ---------------------------------------------------------------

class _Spoolable:
    def open_spool(self):
        pass


def _opts(**kw):
    base = dict(namespace="ns", block_size=4096, split_size=1 << 20, trim=True, dry_run=False, accept_gaps=(),
                progress=None, trim_timeout_s=1.0, max_bytes=None)
    base.update(kw)
    return upload_run.Options(**base)


def test_spools_only_for_a_real_upload_to_a_store_that_has_them(monkeypatch):
    made = []
    monkeypatch.setattr(upload_spool, "_Spools", lambda *a: made.append(a) or "SPOOLS")
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 3)
    monkeypatch.setattr(upload_spool, "SPOOL_MAX_BLOCK", 4096)
    st = _Spoolable()
    assert upload_run._new_spools(st, _opts(block_size=4096)) == "SPOOLS" and made == [(st, 4096, 3)]
    assert upload_run._new_spools(st, _opts(block_size=4097)) is None
    assert upload_run._new_spools(st, _opts(dry_run=True)) is None
    assert upload_run._new_spools(object(), _opts()) is None
    st.open_spool = "not callable"
    assert upload_run._new_spools(st, _opts()) is None
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    assert upload_run._new_spools(_Spoolable(), _opts()) is None
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 1)
    assert upload_run._new_spools(_Spoolable(), _opts()) == "SPOOLS"


def test_keep_bytes_is_none_only_for_a_clean_log_too_large_whose_objects_are_spooled(monkeypatch):
    monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 1000)

    def h(clean, nxt, trim):
        return SimpleNamespace(clean=clean, next_offset=nxt, trim_offset=trim)

    assert upload_run._keep_bytes(h(True, 5000, 0), "S") == 0
    assert upload_run._keep_bytes(h(True, 1000, 0), "S") == 1000
    assert upload_run._keep_bytes(h(True, 1001, 0), "S") == 0
    assert upload_run._keep_bytes(h(True, 1500, 500), "S") == 1000
    assert upload_run._keep_bytes(h(True, 1501, 500), "S") == 0
    assert upload_run._keep_bytes(h(True, 1000, -1), "S") == 1000  # no trim yet: from 0
    assert upload_run._keep_bytes(h(False, 5000, 0), "S") == 1000
    assert upload_run._keep_bytes(h(True, 5000, 0), None) == 1000
    assert upload_run.KEEP_SCANNED_BYTES == 1000


def test_the_constants():
    assert upload_run.KEEP_SCANNED_BYTES == 64 << 20 and upload_run.LEASE_WAIT_S == 600.0
    assert upload_run.DEFAULT_TRIM_TIMEOUT_S == 30.0


@pytest.mark.parametrize("keep, spool", [("kept", 0), ("read again", 0), ("kept", 4), ("read again", 4)])
def test_objects_are_the_same_kept_read_again_or_spooled(tmp_path, monkeypatch, keep, spool):
    from walctl.pipeline.upload import walread

    made = []
    real = walread._WalBatches
    monkeypatch.setattr(walread, "_WalBatches", lambda *a: made.append(a) or real(*a))
    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", spool)
    if keep == "read again":
        monkeypatch.setattr(upload_run, "KEEP_SCANNED_BYTES", 100)
    wal = make_wal(tmp_path, capacity=1 << 20)
    store = LocalStore(str(tmp_path / "store"))
    _write(wal, [(1, 0, 300), (1, 1, 300), (1, 2, 300)])
    offsets, header = _offsets(wal)
    result = upload(wal, store)
    assert result.records == 3
    got = read_back_batches(store)
    assert [b.payload for b in got[1]] == [b"\x01" * 300] * 3
    if spool:  # a local store's Stream Object, written as the scan read it: no second read
        assert made == []
    else:
        (dev, path, hdr, end, kept), = made
        assert path == wal and hdr == header and end == offsets[-1] + rec.SIZE + 300 + BATCH_HEADER_SIZE
        assert (kept is None) == (keep == "read again")
        if kept is not None:
            assert sorted(kept) == offsets


# -- the --upload-at cap --------------------------------------------------------------------------

def test_the_cap_uploads_the_records_that_start_before_it(wal, store):
    # (caps from the records' own offsets: where the writer puts them depends on its timing)
    _write(wal, [(1, i, 100) for i in range(10)])
    offsets, _ = _offsets(wal)
    result = upload(wal, store, max_bytes=offsets[3])  # from 0: the records at offsets[0..2] start before it
    assert result.records == 3 and result.last_offset == offsets[2]
    result = upload(wal, store, max_bytes=offsets[6] - offsets[2])  # from the trim point: up to offsets[5]
    assert result.records == 3 and result.last_offset == offsets[5]
    result = upload(wal, store, max_bytes=1)  # at least one record
    assert result.records == 1 and result.last_offset == offsets[6]
    result = upload(wal, store)
    assert result.records == 3 and result.last_offset == offsets[9]


def test_the_cap_counts_from_the_upload_mark_when_the_wal_was_not_trimmed(wal, store):
    _write(wal, [(1, i, 100) for i in range(10)])
    offsets, _ = _offsets(wal)
    result = upload(wal, store, trim=False, max_bytes=offsets[2])
    assert result.records == 2 and result.last_offset == offsets[1]
    result = upload(wal, store, trim=False, max_bytes=offsets[4] - offsets[1])  # from the mark's record
    assert result.records == 2 and result.last_offset == offsets[3]


class _Idx:
    def __init__(self, todo=0):
        self.todo_count, self.runs = todo, []

    def add_run(self, run):
        self.runs.append(run)


def test_stop_at_cap_for_a_record_past_the_cap():
    entry = SimpleNamespace(offset=100, end=200)
    assert upload_run._stop_at_cap(_Idx(todo=1), entry, 100) is True  # starts at the cap, something to upload
    assert upload_run._stop_at_cap(_Idx(todo=1), entry, 99) is True
    assert upload_run._stop_at_cap(_Idx(todo=0), entry, 100) is False  # nothing yet: taken whole
    assert upload_run._stop_at_cap(_Idx(todo=1), entry, 101) is False  # starts before the cap: taken


def _run_of(offsets, length=10):
    from array import array

    from walctl.format import bulk
    from walctl.wal.reader import Run

    rows = array("q")
    for o in offsets:
        rows.extend([o, 0, length, bulk.KIND_BATCH, 1, 0, 0, 1])
    return Run(b"", memoryview(rows), 0, len(offsets))


def test_stop_at_cap_takes_a_run_s_records_before_the_cap():
    run = _run_of([0, 100, 200, 300])
    idx = _Idx(todo=0)
    assert upload_run._stop_at_cap(idx, run, 250) is True
    assert [(r.first, r.stop) for r in idx.runs] == [(0, 3)]
    idx = _Idx(todo=5)
    assert upload_run._stop_at_cap(idx, _run_of([100, 200]), 150) is True
    assert [(r.first, r.stop) for r in idx.runs] == [(0, 1)]
    idx = _Idx(todo=5)  # a run starting at the cap with records to upload: none of it
    assert upload_run._stop_at_cap(idx, _run_of([100, 200]), 100) is True and idx.runs == []


def test_run_before_keeps_at_least_one_record():
    run = _run_of([0, 100, 200, 300])
    for end, stop in [(0, 1), (1, 1), (100, 1), (101, 2), (300, 3), (301, 4), (10_000, 4)]:
        cut = upload_run._run_before(run, end)
        assert (cut.first, cut.stop, cut.chunk, cut.rows) == (0, stop, run.chunk, run.rows)
    from walctl.wal.reader import Run

    later = Run(b"", run.rows, 1, 4)  # a run that starts at row 1
    cut = upload_run._run_before(later, 250)
    assert (cut.first, cut.stop) == (1, 3)


# -- a writer met during the scan -----------------------------------------------------------------

def test_a_writer_holding_a_crashed_log_is_read_as_live(wal, store, monkeypatch):
    _write(wal, [(1, 0, 10), (1, 1, 10)], crash=True)
    assert not _header(wal).clean
    asked = []
    monkeypatch.setattr(upload_run, "_writer_holds", lambda path: asked.append(path) or True)
    result = upload(wal, store, trim=False)
    assert asked and asked[0] == wal
    assert result.warnings[0] == f"{wal}: a writer is active; uploading the records before its blocks in flight"
    assert result.records == 2


def test_no_lock_lookup_for_a_clean_log(wal, store, monkeypatch):
    _write(wal, [(1, 0, 10)])
    monkeypatch.setattr(upload_run, "_writer_holds", lambda path: pytest.fail("a clean log needs no lookup"))
    assert upload(wal, store, trim=False).warnings == []


def test_a_crashed_log_no_writer_holds_is_quiet(wal, store, monkeypatch):
    _write(wal, [(1, 0, 10)], crash=True)
    monkeypatch.setattr(upload_run, "_writer_holds", lambda path: False)
    assert upload(wal, store, trim=False).warnings == []


def test_a_writer_that_started_during_the_scan_makes_it_read_again_as_live(wal, store, monkeypatch):
    from walctl.wal import reader

    _write(wal, [(1, 0, 10), (1, 1, 10)])
    passes = []
    real_read = upload_run._read_log

    def read_log(u, events):
        passes.append(u.live)
        real_read(u, events)
        if len(passes) == 1:
            u.findings.append(SimpleNamespace(kind=reader.HOLE))

    moved = []
    monkeypatch.setattr(upload_run, "_read_log", read_log)
    monkeypatch.setattr(upload_run, "_log_moved", lambda dev, path, header: moved.append(path) or True)
    closed = []
    real_new = upload_run._new_spools

    def new_spools(st, opts):
        sp = real_new(st, opts)
        if sp is not None:
            orig = sp.close
            sp.close = lambda: (closed.append(1), orig())
        return sp

    monkeypatch.setattr(upload_run, "_new_spools", new_spools)
    result = upload(wal, store)
    assert passes == [None, True] and moved == [wal] and len(closed) == 2
    assert result.warnings[0] == (f"{wal}: a writer started or stopped while upload read the log; read it again, "
                                  f"up to its first block in flight")
    assert result.records == 2


def test_bad_batch_findings_alone_do_not_look_for_a_writer(wal, store, monkeypatch):
    from walctl.wal import reader

    _write(wal, [(1, 0, 10)])
    real_read = upload_run._read_log

    def read_log(u, events):
        real_read(u, events)
        u.findings.append(SimpleNamespace(kind=reader.BAD_BATCH))

    monkeypatch.setattr(upload_run, "_read_log", read_log)
    monkeypatch.setattr(upload_run, "judge", lambda u: None)  # (judge would list the fake finding)
    monkeypatch.setattr(upload_run, "_log_moved", lambda *a: pytest.fail("no look"))
    assert upload(wal, store).records == 1


def test_salvage_refuses_a_writer_that_started_during_its_scan(wal, store, monkeypatch):
    from walctl.wal import reader

    _write(wal, [(1, 0, 10)])
    real_read = upload_run._read_log

    def read_log(u, events):
        real_read(u, events)
        u.findings.append(SimpleNamespace(kind=reader.HOLE))

    monkeypatch.setattr(upload_run, "_read_log", read_log)
    monkeypatch.setattr(upload_run, "_log_moved", lambda *a: True)
    with pytest.raises(RefusedError) as err:
        upload(wal, store, salvage=True)
    assert (err.value.what, err.value.where, err.value.hint) == (
        "a writer started while salvage read the log", wal,
        "stop every writer of this WAL, then rerun salvage; nothing was uploaded")
    assert mf.load_latest(store).number == 0


class _Taker:
    """_Records' side _read_log feeds: what it was handed, in order."""

    def __init__(self, todo=0):
        self.got, self.todo_count, self.stopped = [], todo, False

    def add(self, e):
        self.got.append(("add", e.offset))

    def add_run(self, run):
        self.got.append(("run", run.first, run.stop))

    def stop(self):
        self.got.append("stop")


def _reading(live=None, max_bytes=None, trim_offset=-1, mark=None, todo=0):
    return SimpleNamespace(records=_Taker(todo), findings=[], live=live, opts=_opts(max_bytes=max_bytes),
                           header=SimpleNamespace(trim_offset=trim_offset), mark=mark)


def _finding(kind, offset=0):
    from walctl.wal.findings import Finding
    from walctl.wal.layout import Ring

    return Finding(kind, offset, Ring(1 << 20), "why")


def test_read_log_hands_records_runs_and_findings_apart():
    from walctl.wal.findings import Kind

    u = _reading()
    hole = _finding(Kind.HOLE)
    run = _run_of([100, 200])
    upload_run._read_log(u, [SimpleNamespace(offset=0, end=50), run, hole, SimpleNamespace(offset=300, end=350)])
    assert u.records.got == [("add", 0), ("run", 0, 2), ("add", 300)] and u.findings == [hole]


def test_a_live_writer_s_blocks_in_flight_stop_the_records_a_bad_batch_does_not():
    from walctl.wal.findings import Kind

    for live, kind, want in [(True, Kind.HOLE, ["stop"]), (True, Kind.BAD_BATCH, []), (None, Kind.HOLE, []),
                             (False, Kind.TORN_TAIL, [])]:
        u = _reading(live=live)
        upload_run._read_log(u, [_finding(kind)])
        assert u.records.got == want and len(u.findings) == 1


def test_read_log_s_cap_from_the_trim_point_the_mark_or_the_log_start():
    events = [SimpleNamespace(offset=o, end=o + 100) for o in (0, 100, 200, 300, 400)]
    for trim, mark, cap, taken in [(-1, None, 250, 3), (100, None, 250, 4), (-1, SimpleNamespace(offset=200), 100, 3),
                                   (300, SimpleNamespace(offset=100), 50, 4), (-1, None, 300, 3),
                                   (-1, None, None, 5)]:
        u = _reading(max_bytes=cap, trim_offset=trim, mark=mark, todo=1)
        upload_run._read_log(u, list(events))
        assert len(u.records.got) == taken, (trim, mark, cap)


def test_log_moved_when_the_header_changed_or_a_writer_holds_a_crashed_log(wal, monkeypatch):
    from walctl.device import open_device

    _write(wal, [(1, 0, 10)])
    header = _header(wal)
    dev = open_device(wal, writable=False)
    try:
        monkeypatch.setattr(upload_run, "_writer_holds", lambda path: pytest.fail("clean: no lookup"))
        assert upload_run._log_moved(dev, wal, header) is False
        _write(wal, [(1, 1, 10)], crash=True)
        assert upload_run._log_moved(dev, wal, header) is True
        crashed = _header(wal)
        monkeypatch.setattr(upload_run, "_writer_holds", lambda path: path == wal)
        assert upload_run._log_moved(dev, wal, crashed) is True
        monkeypatch.setattr(upload_run, "_writer_holds", lambda path: False)
        assert upload_run._log_moved(dev, wal, crashed) is False
    finally:
        dev.close()


def test_writer_holds_asks_the_lock_table(monkeypatch):
    from walctl.device import locks

    monkeypatch.setattr(locks, "lock_holder", lambda path: 55 if path == "/a" else None)
    assert upload_run._writer_holds("/a") is True and upload_run._writer_holds("/b") is False
    monkeypatch.setattr(locks, "lock_holder", lambda path: 0)
    assert upload_run._writer_holds("/a") is True


# -- salvage's hooks ------------------------------------------------------------------------------

def test_durable_points_only_for_salvage(monkeypatch):
    from walctl.wal import verdict

    monkeypatch.setattr(verdict, "durable_points", lambda state: ("points of", state))
    u = SimpleNamespace(opts=_opts(salvage=True), state="STATE")
    assert upload_run._durable(u) == ("points of", "STATE")
    assert upload_run._durable(SimpleNamespace(opts=_opts(), state="STATE")) is None


def test_salvage_keeps_its_evidence_only_when_it_read_past_damage(wal, store, monkeypatch):
    from walctl.pipeline.upload import salvage

    kept = []
    monkeypatch.setattr(salvage, "keep_evidence", lambda u: kept.append(list(u.damage)))
    _write(wal, [(1, 0, 10)])
    upload(wal, store, salvage=True, trim=False)
    assert kept == []
    real = upload_run._upload_leased

    def leased(*a):
        u = real(*a)
        u.damage.append("D")
        return u

    monkeypatch.setattr(upload_run, "_upload_leased", leased)
    upload(wal, store, salvage=True, trim=False)
    assert kept == [["D"]]
    upload(wal, store, trim=False)  # not salvage: no evidence, whatever the damage
    assert kept == [["D"]]


# -- the roll back and the trim's failure ---------------------------------------------------------

def test_a_failure_before_the_commit_rolls_back_and_closes_the_second_read(tmp_path, monkeypatch):
    from walctl.pipeline.upload import commit, walread

    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 0)
    closed, rolled = [], []
    real = walread._WalBatches

    class Fetch(real):
        def close(self):
            closed.append(1)
            super().close()

    monkeypatch.setattr(walread, "_WalBatches", Fetch)
    monkeypatch.setattr(commit, "put_objects", lambda *a: (_ for _ in ()).throw(IOFailure("disk gone")))
    real_roll = commit.roll_back
    monkeypatch.setattr(commit, "roll_back", lambda st, prepared, warnings: (rolled.append(len(prepared)),
                                                                           real_roll(st, prepared, warnings)))
    wal = make_wal(tmp_path, capacity=1 << 20)
    store = LocalStore(str(tmp_path / "store"))
    _write(wal, [(1, 0, 10), (2, 0, 10)])
    with pytest.raises(IOFailure, match="disk gone"):
        upload(wal, store, split_size=1)
    assert closed == [1] and rolled == [2]
    doc = mf.load_latest(store)
    assert doc.objects == [] and doc.prepared == [] and _header(wal).trim_offset == -1


def test_a_failure_with_spooled_objects_only_rolls_back(tmp_path, monkeypatch):
    from walctl.pipeline.upload import commit, walread

    monkeypatch.setattr(upload_spool, "SPOOL_SEGMENTS", 4)
    monkeypatch.setattr(walread, "_WalBatches", lambda *a: pytest.fail("spooled: no second read"))
    monkeypatch.setattr(commit, "put_objects", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    wal = make_wal(tmp_path, capacity=1 << 20)
    store = LocalStore(str(tmp_path / "store"))
    _write(wal, [(1, 0, 10)])
    with pytest.raises(KeyboardInterrupt):
        upload(wal, store)
    assert mf.load_latest(store).prepared == []


def test_make_live_gets_each_stream_s_end_as_the_scan_found_it(wal, store, monkeypatch):
    from walctl.pipeline.upload import commit

    _write(wal, [(1, 0, 10), (2, 0, 10)])
    upload(wal, store)
    _write(wal, [(1, 1, 10), (3, 0, 10)])
    seen = []
    real = commit.make_live
    monkeypatch.setattr(commit, "make_live", lambda *a: (seen.append(a), real(*a))[1])
    upload(wal, store)
    (st, made, node_key, mark, last_mark, expected_ends, gaps, node_id), = seen
    assert expected_ends == {1: 1, 3: None}  # stream 1 ends at 1 in the store; stream 3 is new
    assert node_key == str(node_id) and mark is not None and last_mark.offset > mark.offset


def test_a_failed_trim_still_carries_the_committed_result(wal, store, monkeypatch):
    from walctl.pipeline.upload import handoff

    _write(wal, [(1, 0, 10)])
    monkeypatch.setattr(handoff, "trim_after_commit",
                        lambda *a, **k: (_ for _ in ()).throw(TrimPendingError("writer did not answer")))
    with pytest.raises(TrimPendingError) as err:
        upload(wal, store)
    assert err.value.result.records == 1 and err.value.result.commit_number == 2
    assert err.value.result.seconds > 0


def test_the_trim_gets_the_header_s_trim_point_and_the_options(wal, store, monkeypatch):
    from walctl.pipeline.upload import handoff

    _write(wal, [(1, 0, 10)])
    calls = []
    monkeypatch.setattr(handoff, "trim_after_commit", lambda *a, **k: calls.append((a, k)))
    result = upload(wal, store, trim=False, trim_timeout_s=7.5)
    (path, trim_offset, records, res), kw = calls[0]
    assert (path, trim_offset, res) == (wal, -1, result) and kw == {"trim": False, "timeout_s": 7.5}
    assert records.todo_count == 1


# -- what the first run's survivors asked for -----------------------------------------------------

def test_a_file_that_holds_no_wal_is_named_in_the_error(tmp_path, store):
    path = str(tmp_path / "zeros")
    with open(path, "wb") as f:
        f.truncate(1 << 20)
    for call in (lambda: upload_run.check_wal(path), lambda: upload(path, store, trim=False)):
        with pytest.raises(Exception) as err:
            call()
        assert getattr(err.value, "where", None) == path


def test_another_flavour_is_refused_naming_the_wal_by_check_wal_and_upload(wal, store, monkeypatch):
    from walctl.wal import lifecycle

    real = lifecycle.read_wal_state

    def as_automq(dev, path):
        state = real(dev, path)
        return SimpleNamespace(header=SimpleNamespace(flavour="automq", clean=True), real=state)

    monkeypatch.setattr(lifecycle, "read_wal_state", as_automq)
    for call in (lambda: upload_run.check_wal(wal), lambda: upload(wal, store, trim=False)):
        with pytest.raises(RefusedError) as err:
            call()
        assert err.value.what == "automq WAL: upload reads only walctl's WALs" and err.value.where == wal


def test_a_dry_run_s_seconds_are_its_own(wal, store):
    _write(wal, [(1, 0, 10)])
    result = upload(wal, store, dry_run=True)
    assert 0 < result.seconds < 60


class _ScanSpy:
    """reader.Scan, recording how upload opened it (its report and options)."""

    def __init__(self, monkeypatch):
        from walctl.wal import reader

        self.calls = []
        real = reader.Scan

        def scan(*a, **k):
            if "report" in k:  # upload's own scan (not the test's helpers')
                self.calls.append(k)
            return real(*a, **k)

        monkeypatch.setattr(reader, "Scan", scan)


def test_a_quiet_log_is_scanned_in_bulk_with_read_ahead_and_probing(wal, store, monkeypatch):
    spy = _ScanSpy(monkeypatch)
    _write(wal, [(1, 0, 10)])
    upload(wal, store, trim=False)
    (k,) = spy.calls
    assert (k["probe"], k["bulk"], k["readahead"]) == (True, True, True)
    assert k["report"].durable is None and k["report"].header == _header(wal)


def test_a_live_writer_s_log_is_scanned_without_probing(wal, store, monkeypatch):
    spy = _ScanSpy(monkeypatch)
    _write(wal, [(1, 0, 10)], crash=True)
    monkeypatch.setattr(upload_run, "_writer_holds", lambda path: True)
    upload(wal, store, trim=False)
    (k,) = spy.calls
    assert (k["probe"], k["bulk"], k["readahead"]) == (False, True, True)


def test_salvage_scans_with_the_header_slots_durable_points(wal, store, monkeypatch):
    from walctl.device import open_device
    from walctl.wal.lifecycle import read_wal_state
    from walctl.wal.verdict import durable_points

    spy = _ScanSpy(monkeypatch)
    _write(wal, [(1, 0, 10), (1, 1, 10)], crash=True)
    dev = open_device(wal, writable=False)
    try:
        want = durable_points(read_wal_state(dev, wal))
    finally:
        dev.close()
    upload(wal, store, trim=False, salvage=True)
    (k,) = spy.calls
    got = k["report"].durable
    assert type(got) is type(want) and repr(got) == repr(want)


def test_a_finding_in_a_quiet_log_that_did_not_move_is_judged_in_one_pass(wal, store, monkeypatch):
    from walctl.wal import reader

    _write(wal, [(1, 0, 10)])
    passes = []
    real_read = upload_run._read_log

    def read_log(u, events):
        passes.append(u.live)
        real_read(u, events)
        u.findings.append(SimpleNamespace(kind=reader.HOLE))

    monkeypatch.setattr(upload_run, "_read_log", read_log)
    monkeypatch.setattr(upload_run, "judge", lambda u: None)  # (judge would refuse the fake finding)
    result = upload(wal, store, trim=False)
    assert passes == [None] and result.warnings == [] and result.records == 1


def test_the_failpoints_in_order(wal, store, monkeypatch):
    """The crash tests (tests/store/test_store_upload.py) kill upload at these names."""
    seen = []
    monkeypatch.setattr(upload_run, "failpoint", seen.append)
    _write(wal, [(1, 0, 10)])
    upload(wal, store)
    assert seen == ["upload-scan", "upload-after-prepare", "upload-before-commit", "upload-after-commit"]


def test_read_log_s_cap_counts_from_offset_0_before_any_trim():
    events = [SimpleNamespace(offset=0, end=299), SimpleNamespace(offset=299, end=400)]
    u = _reading(max_bytes=300, trim_offset=-1, todo=1)
    upload_run._read_log(u, events)
    assert u.records.got == [("add", 0), ("add", 299)]  # 299 starts before the cap at 300


def test_findings_after_a_run_ending_at_the_cap_are_still_read():
    from walctl.wal.findings import Kind

    run = _run_of([0, 100], length=10)  # ends at 134
    hole = _finding(Kind.HOLE, 134)
    u = _reading(max_bytes=134, trim_offset=-1, todo=1)
    upload_run._read_log(u, [run, hole, SimpleNamespace(offset=134, end=200)])
    assert u.records.got == [("run", 0, 2)] and u.findings == [hole]


def test_records_after_an_accepted_gap_go_to_an_object_of_their_own_and_the_gap_to_the_manifest(wal, store):
    _write(wal, [(1, 0, 10), (1, 1, 10), (1, 5, 10)])
    result = upload(wal, store, accept_gaps=[(1, 2, 5)])
    assert [[(r["start"], r["end"]) for r in o["streams"]] for o in result.objects] == [[(0, 2)], [(5, 6)]]
    assert [(g["stream_id"], g["from"], g["to"], g["cause"]) for g in result.gaps] == [(1, 2, 5, "accepted")]
    doc = mf.load_latest(store)
    assert [(g.stream_id, g.from_offset, g.to_offset) for g in doc.stream_gaps or []] == [(1, 2, 5)]
    assert [b.base_offset for b in read_back_batches(store)[1]] == [0, 1, 5]


def test_a_roll_back_s_warnings_go_to_the_result(tmp_path, monkeypatch):
    from walctl.pipeline.upload import commit

    got = []
    monkeypatch.setattr(commit, "put_objects", lambda *a: (_ for _ in ()).throw(IOFailure("disk gone")))
    monkeypatch.setattr(commit, "roll_back", lambda st, prepared, warnings: got.append(warnings))
    wal = make_wal(tmp_path, capacity=1 << 20)
    _write(wal, [(1, 0, 10)])
    with pytest.raises(IOFailure):
        upload(wal, LocalStore(str(tmp_path / "store")))
    assert got == [[]] and type(got[0]) is list
