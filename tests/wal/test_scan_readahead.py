"""The scan's read-ahead (LogReader(readahead=True), issue 19) changes when the device is read, nothing else.

Every scan below runs with read-ahead on and off on the same bytes, with small chunk and
read-ahead sizes (so chunk and read ends fall at every 4 KiB alignment of a small log): the
records, findings and report must be identical, on intact, trimmed, wrapped, padded and
damaged logs, crashed or closed cleanly; a clean log reads exactly the same bytes. A read
error or a short read mid-scan fails the scan as it does without read-ahead, and the
read-ahead thread never outlives its scan.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walctl.device import MemoryDevice
from walctl.device.base import io_failure
from walctl.device.fakes import FaultyDevice
from walctl.device.fdio import bytes_read_total
from walctl.errors import IOFailure
from walctl.format.header import ALIGN, HEADERS_SIZE
from walctl.wal import reader, ringread
from walctl.wal.headers import read_headers
from walctl.wal.readsession import open_reader

from walhelpers import append_records, mixed_wrapped_wal, new_wal

KiB, MiB = 1 << 10, 1 << 20
RING = 256 * KiB - HEADERS_SIZE
THREAD = "walctl-scan-read"


def _image(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class _Logs(dict):
    def __repr__(self) -> str:  # hypothesis prints its arguments: not megabytes of images
        return f"<logs {sorted(self)}>"


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, bytes]:
    """A wrapped 256 KiB WAL (three streams, small and large records, a bad batch, a trim
    point, a lap-end padding record), closed cleanly and after a crash; and a plain one."""
    out = _Logs()
    for clean in (True, False):
        out["clean" if clean else "crashed"] = mixed_wrapped_wal(tmp_path_factory.mktemp("w") / "w", clean=clean)
    path = new_wal(tmp_path_factory.mktemp("w") / "w", 1 * MiB)
    append_records(path, 60, size=9000, iodepth=2)  # records across most 4 KiB boundaries, no wrap
    out["plain"] = _image(path)
    return out


class _Recording:
    """A MemoryDevice that notes each read's thread name and range."""

    def __init__(self, image: bytes):
        self.inner = MemoryDevice(len(image))
        self.inner.data[:] = image
        self.reads: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def pread_into(self, offset: int, buf) -> None:
        with self.lock:
            self.reads.append((threading.current_thread().name, offset, memoryview(buf).nbytes))
        self.inner.pread_into(offset, buf)


def _scan(dev, readahead: bool, *, bulk: bool = False, seek: int | None = None, probe: bool = True):
    state = read_headers(dev)
    one = reader.Scan(dev, state.header, keep_offsets=True, readahead=readahead, bulk=bulk, seek=seek, probe=probe)
    events = []
    for e in one:
        if isinstance(e, reader.Finding):
            events.append(("finding", e.to_json()))
        elif isinstance(e, reader.Run):
            events.extend(("record", x.offset, x.body, x.batch) for x in e.entries())
        else:
            events.append(("record", e.offset, e.body, e.batch))
    r = one.report
    extra = [r.torn_offsets, r.unaligned_damage, r.stream_ends, r.record_offsets,
             [(h.start, h.end) for h in r.sealed_holes], [g.spec for g in r.stream_gaps],
             None if r.trim_entry is None else (r.trim_entry.offset, r.trim_entry.body)]
    summary = r.to_json()
    bytes_read = summary.pop("bytes_read")
    return events, summary, extra, bytes_read


def _sizes(monkeypatch, chunk: int | None = None, ahead: int | None = None, depth: int | None = None,
           threads: int | None = None) -> None:
    """The reader's chunk and read-ahead sizes for one test (None: the module's own)."""
    for name, value in (("CHUNK_BYTES", chunk), ("READ_AHEAD_BYTES", ahead), ("READ_AHEAD_CARRY", ahead),
                        ("READ_AHEAD_DEPTH", depth), ("READ_AHEAD_THREADS", threads)):
        if value is not None:
            monkeypatch.setattr(ringread, name, value)


def _both(image: bytes, **kwargs):
    off = _scan(_Recording(image), False, **kwargs)
    dev = _Recording(image)
    on = _scan(dev, True, **kwargs)
    assert on[:3] == off[:3]
    assert not any(t.name == THREAD for t in threading.enumerate())  # the scan ended its thread
    return on, off, dev


_SIZES = dict(chunk=st.integers(1, 12).map(lambda k: k * ALIGN), ahead=st.integers(1, 12).map(lambda k: k * ALIGN),
              depth=st.integers(1, 4), threads=st.integers(1, 4))
_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(**_SIZES, which=st.sampled_from(["clean", "crashed", "plain"]), bulk=st.booleans())
def test_intact_logs_scan_the_same_at_every_chunk_size(logs, monkeypatch, chunk, ahead, depth, threads, which, bulk):
    with monkeypatch.context() as m:
        _sizes(m, chunk, ahead, depth, threads)
        on, off, dev = _both(logs[which], bulk=bulk)
    assert sum(1 for e in on[0] if e[0] == "record") > 30
    # runs of records counted in bulk (Run, account_run) or one by one (accepted): the same report
    assert _scan(_Recording(logs[which]), False, bulk=not bulk)[:3] == off[:3]
    if which != "crashed":
        assert on[3] == off[3]  # a clean log: read to its known end, not a byte further
    assert any(name == THREAD for name, _, _ in dev.reads)  # read-ahead really read
    # each byte of the log is read once: the reads never overlap
    spans = sorted((o, o + n) for _, o, n in dev.reads)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


@_SETTINGS
@given(**_SIZES, which=st.sampled_from(["clean", "crashed"]),
       damage=st.lists(st.tuples(st.integers(0, RING - 1), st.integers(0, 2), st.binary(min_size=64, max_size=64)),
                       min_size=1, max_size=3))
def test_damaged_logs_scan_the_same_at_every_chunk_size(logs, monkeypatch, chunk, ahead, depth, threads, which,
                                                      damage):
    image = bytearray(logs[which])
    for where, how, noise in damage:
        pos = HEADERS_SIZE + where
        if how == 0:
            image[pos] ^= 1 + noise[0] % 255
        elif how == 1:
            image[pos:pos + 512] = bytes(len(image[pos:pos + 512]))
        else:
            image[pos:pos + 64] = noise[:len(image[pos:pos + 64])]
    with monkeypatch.context() as m:
        _sizes(m, chunk, ahead, depth, threads)
        on, off, _ = _both(bytes(image))
    # A crashed (or damaged) log has no known end: read-ahead may read up to its reads in
    # flight past where the scan stops, and counts them.
    assert off[3] - chunk <= on[3] <= off[3] + (depth + 1) * ahead + chunk


@_SETTINGS
@given(**_SIZES, at=st.integers(0, RING - 1))
def test_seek_scans_the_same(logs, monkeypatch, chunk, ahead, depth, threads, at):
    with monkeypatch.context() as m:
        _sizes(m, chunk, ahead, depth, threads)
        on, off, _ = _both(logs["plain"], seek=at)
    assert on[3] == off[3]


def _failing(image: bytes, bad: int, short: bool):
    dev = MemoryDevice(len(image))
    dev.data[:] = image
    if not short:
        return FaultyDevice(dev, fail_reads_at={bad})

    class Short(FaultyDevice):
        """The device ends at ``bad`` (a truncated image): a read past it is short."""

        def pread_into(self, offset: int, buf) -> None:
            n = memoryview(buf).nbytes
            if offset + n > bad:
                raise io_failure(f"short read: got {max(0, bad - offset)} of {n} bytes (end of device)",
                                 where=self.path, offset=max(offset, bad))
            self.inner.pread_into(offset, buf)

    return Short(dev)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("where", [0.3, 0.55, 0.9])
def test_a_read_error_mid_scan_fails_the_scan_as_without_read_ahead(logs, monkeypatch, short, where, threads):
    image = logs["plain"]
    every = _scan(_Recording(image), False)[0]
    end = max(e[1] for e in every if e[0] == "record")
    bad = HEADERS_SIZE + int(end * where) // ALIGN * ALIGN
    _sizes(monkeypatch, 64 * KiB, 96 * KiB, 3, threads)
    errors, seen = [], []
    for readahead in (False, True):
        dev = _failing(image, bad, short)
        state = read_headers(dev)
        got = []
        with pytest.raises(IOFailure) as exc:
            for e in reader.Scan(dev, state.header, readahead=readahead):
                got.append(("record", e.offset, e.body, e.batch))
        # the same error where the device fails (a short read's "got N of M bytes" is the read's own)
        errors.append((type(exc.value), exc.value.offset, str(exc.value).split(":")[0] if short else str(exc.value)))
        seen.append(got)
        assert not any(t.name == THREAD for t in threading.enumerate())
    assert errors[0] == errors[1]
    for got in seen:  # records in order up to the unreadable block, none from it or past it
        assert got == every[:len(got)]
        assert all(HEADERS_SIZE + e[1] + 24 + len(e[2]) <= bad for e in got)
        # and every record before the last read's reach (a read-ahead read plus a record) is there,
        # whichever of the reads in flight failed first
        assert got == [e for e in every if HEADERS_SIZE + e[1] + 24 + len(e[2]) <= bad - 96 * KiB - 16 * KiB] \
            + got[len([e for e in every if HEADERS_SIZE + e[1] + 24 + len(e[2]) <= bad - 96 * KiB - 16 * KiB]):]


def test_a_scan_stopped_early_ends_its_reads_and_thread(logs, monkeypatch):
    _sizes(monkeypatch, 16 * KiB, 32 * KiB)
    dev = _Recording(logs["plain"])
    state = read_headers(dev)
    dev.reads.clear()  # the header's
    one = reader.Scan(dev, state.header, readahead=True)
    for n, _ in enumerate(one):
        if n == 20:
            break
    assert any(t.name == THREAD for t in threading.enumerate())
    one.close()
    assert not any(t.name == THREAD for t in threading.enumerate())
    # every read the device made is counted, the read-ahead ones too
    assert one.report.bytes_read == sum(n for _, _, n in dev.reads)
    assert one.report.bytes_read <= 20 * 9100 + 16 * KiB + (ringread.READ_AHEAD_DEPTH + 1) * 32 * KiB


def test_read_ahead_reads_count_as_the_callers_device_reads(tmp_path):
    """bytes_read_total (per thread) counts the read-ahead thread's reads as the scan's caller's."""
    path = new_wal(tmp_path / "w", 32 * MiB)
    append_records(path, 300, size=64 * KiB, iodepth=2)
    session = open_reader(path)
    try:
        before = bytes_read_total()
        one = reader.Scan(session.dev, session.state.header, readahead=True, bulk=True)
        records = sum(e.count if isinstance(e, reader.Run) else 1 for e in one)
        read = bytes_read_total() - before
    finally:
        session.dev.close()
    assert records == 300 and one.report.records == 300
    log = one.report.end_offset - one.report.start_offset
    assert read == one.report.bytes_read and log < read <= log + 2 * ALIGN
    assert one.report.bytes_read > 2 * ringread.CHUNK_BYTES + ringread.READ_AHEAD_BYTES  # read-ahead had work


def test_memory_stays_bounded(logs, monkeypatch):
    """At most READ_AHEAD_DEPTH + 1 read-ahead buffers, whatever the log's length."""
    _sizes(monkeypatch, 8 * KiB, 8 * KiB)
    made = []
    real = ringread._ReadAhead.__init__
    monkeypatch.setattr(ringread._ReadAhead, "__init__", lambda self, *a: made.append(self) or real(self, *a))
    events = _scan(_Recording(logs["plain"]), True)[0]
    assert len(events) == 60 and len(made) == 1
    assert made[0]._buffers.made == ringread.READ_AHEAD_DEPTH + 1  # 60 records of 9000 bytes: ~66 reads


@pytest.mark.parametrize("bulk", [True, False])
def test_a_whole_log_scan_reads_ahead_from_its_first_read(logs, monkeypatch, bulk):
    """A scan of the whole log (bulk: no filter may stop it early) reads ahead from its first
    read; otherwise read-ahead starts once three reads in a row went forward."""
    _sizes(monkeypatch, 16 * KiB, 32 * KiB)
    dev = _Recording(logs["plain"])
    state = read_headers(dev)
    dev.reads.clear()
    one = reader.Scan(dev, state.header, readahead=True, bulk=bulk)
    one.drain()
    names = [name for name, _, _ in dev.reads]
    if bulk:
        assert names[0] == THREAD
    else:
        assert names[:3] == ["MainThread"] * 3 and THREAD in names


def test_reads_ahead_on_several_threads_at_once(logs, monkeypatch):
    """READ_AHEAD_THREADS reads at the device at once: the first read-ahead read waits (up to 10 s)
    until a second one is in flight beside it; the scan's events are the same."""
    _sizes(monkeypatch, ahead=16 * KiB, depth=4, threads=2)
    met = []

    class Paired(_Recording):
        def __init__(self, image):
            super().__init__(image)
            self.entered = 0
            self.cond = threading.Condition()

        def pread_into(self, offset: int, buf) -> None:
            if threading.current_thread().name == THREAD:
                with self.cond:
                    self.entered += 1
                    self.cond.notify_all()
                    if self.entered == 1:  # the first waits for the second, still reading beside it
                        met.append(self.cond.wait_for(lambda: self.entered >= 2, timeout=10))
            super().pread_into(offset, buf)

    off = _scan(_Recording(logs["plain"]), False, bulk=True)
    dev = Paired(logs["plain"])
    on = _scan(dev, True, bulk=True)
    assert on[:3] == off[:3] and on[3] == off[3]
    assert met == [True] and dev.entered > 10


def test_a_signal_while_waiting_for_a_read_leaves_read_ahead_clean(monkeypatch):
    """SIGINT/SIGTERM (KeyboardInterrupt) while the scan waits for a read-ahead read: the scan's
    cleanup (stop, close) still waits for every read in flight, then ends the thread."""
    import signal

    from walctl.wal.layout import Ring

    _sizes(monkeypatch, ahead=8 * KiB)
    gate = threading.Event()

    class Slow(MemoryDevice):
        def pread_into(self, offset: int, buf) -> None:
            gate.wait(10)
            super().pread_into(offset, buf)

    dev = Slow(1 * MiB)
    ahead = ringread._ReadAhead(dev, Ring(dev.size_bytes))

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        ahead.start(0, 64 * KiB)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            ahead.take(0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    gate.set()
    drained = ahead.stop()
    assert [seg.lo for seg in drained] == [i * 8 * KiB for i in range(ringread.READ_AHEAD_DEPTH)]
    assert all(seg.error is None for seg in drained)
    ahead.close()
    assert not any(t.name == THREAD for t in threading.enumerate())
