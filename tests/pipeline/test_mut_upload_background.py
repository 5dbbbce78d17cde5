"""The writer-side uploader (walctl/pipeline/upload/background.py) on its own: its stats, when its
loop uploads, what it asks upload() for, the trim through the writer and its retries, failures and
a busy lease (issue 32: each of the module's mutants killed here, in milliseconds; upload() and the
writer are recorders, the loop's waits are counted instead of slept)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from walctl.errors import UsageError
from walctl.pipeline.upload import background
from walctl.pipeline.upload.plan import UploadResult
from walctl.pipeline.upload.run import UploadBusy


class _Writer:
    """The writer's side the uploader uses: its acknowledged end, its header's trim point, trim_to."""

    def __init__(self, acked_end=0, trim_offset=-1, refuse=0):
        self.acked_end = acked_end
        self.header = SimpleNamespace(trim_offset=trim_offset)
        self.refuse = refuse  # trim_to raises UsageError this many times first
        self.trims: list[tuple[int, bool]] = []

    def trim_to(self, offset, *, uploaded):
        self.trims.append((offset, uploaded))
        if self.refuse:
            self.refuse -= 1
            raise UsageError("not acknowledged yet")
        self.header.trim_offset = offset


class _Uploads:
    """background.upload: records each call's arguments; returns results, or raises, in turn."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple] = []

    def __call__(self, wal_path, store, **kwargs):
        self.calls.append((wal_path, store, kwargs))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class _Stop:
    """threading.Event's wait for _loop: answers in turn (True: stop), recording each timeout."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.waits: list[float | None] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        return self.answers.pop(0)


def _result(records=0, objects=0, last_offset=None):
    r = UploadResult()
    r.records, r.objects, r.last_offset = records, [{}] * objects, last_offset
    return r


def _idle(writer, upload_at=1000, **kwargs):
    """An uploader whose thread has already ended (stopped at once): _loop is driven by the test."""
    b = background.BackgroundUploader("/w", "STORE", writer, upload_at, **kwargs)
    b.stop()
    return b


def test_the_defaults_and_the_stats_json():
    assert background.DEFAULT_UPLOAD_AT == 512 << 20 and background.UPLOAD_POLL_S == 0.05
    s = background.BackgroundStats()
    assert s.to_json() == {"uploads": 0, "records": 0, "objects": 0, "failures": 0, "last_error": None}
    s = background.BackgroundStats(1, 2, 3, 4, "boom")
    assert s.to_json() == {"uploads": 1, "records": 2, "objects": 3, "failures": 4, "last_error": "boom"}


def test_the_thread_is_a_named_daemon_and_stop_ends_it():
    b = background.BackgroundUploader("/w", "STORE", _Writer(), 1000, namespace="ns")
    assert b._thread.name == "walctl-uploader" and b._thread.daemon
    assert (b.wal_path, b.store, b.upload_at, b.options, b.on_warning) == ("/w", "STORE", 1000, {"namespace": "ns"},
                                                                          None)
    b.stop()
    assert not b._thread.is_alive() and b._stop.is_set()


def test_pending_bytes_count_from_the_trim_point_or_the_log_start():
    w = _Writer(acked_end=5000, trim_offset=-1)
    b = _idle(w)
    assert b.pending_bytes() == 5000
    w.header.trim_offset = 0
    assert b.pending_bytes() == 5000
    w.header.trim_offset = 1200
    assert b.pending_bytes() == 3800


def test_upload_once_asks_for_at_most_upload_at_bytes_then_trims_through_the_writer(monkeypatch):
    uploads = _Uploads(_result(records=7, objects=2, last_offset=4096))
    monkeypatch.setattr(background, "upload", uploads)
    w = _Writer(acked_end=9000, trim_offset=0)
    b = _idle(w, upload_at=1000, namespace="ns", block_size=512)
    result = b.upload_once()
    assert uploads.calls == [("/w", "STORE", {"trim": False, "max_bytes": 1000, "lease_wait_s": 0.0,
                                                "namespace": "ns", "block_size": 512})]
    assert w.trims == [(4096, True)] and result.trimmed_to == 4096
    assert b.stats.to_json() == {"uploads": 1, "records": 7, "objects": 2, "failures": 0, "last_error": None}
    b.upload_once()  # counts add up
    assert (b.stats.uploads, b.stats.records, b.stats.objects) == (2, 14, 4)


def test_upload_once_does_not_trim_what_is_trimmed_already_or_nothing(monkeypatch):
    for last, trim_offset in [(None, -1), (4096, 4096), (4096, 5000)]:
        monkeypatch.setattr(background, "upload", _Uploads(_result(last_offset=last)))
        w = _Writer(trim_offset=trim_offset)
        result = _idle(w).upload_once()
        assert w.trims == [] and result.trimmed_to is None
    monkeypatch.setattr(background, "upload", _Uploads(_result(last_offset=0)))
    w = _Writer(trim_offset=-1)
    assert _idle(w).upload_once().trimmed_to == 0 and w.trims == [(0, True)]


class _Clock:
    def __init__(self, step=0.0):
        self.now, self.step, self.sleeps = 100.0, step, []

    def monotonic(self):
        self.now += self.step
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)


def test_a_trim_the_writer_refuses_for_a_moment_is_retried(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(background, "time", clock)
    monkeypatch.setattr(background, "upload", _Uploads(_result(last_offset=4096)))
    w = _Writer(trim_offset=0, refuse=3)
    result = _idle(w).upload_once()
    assert w.trims == [(4096, True)] * 4 and clock.sleeps == [0.01] * 3 and result.trimmed_to == 4096


def test_a_trim_refused_for_5_seconds_is_raised(monkeypatch):
    clock = _Clock(step=1.0)  # each look at the clock: a second later (the deadline is taken at 101)
    monkeypatch.setattr(background, "time", clock)
    monkeypatch.setattr(background, "upload", _Uploads(_result(last_offset=4096)))
    w = _Writer(trim_offset=0, refuse=100)
    with pytest.raises(UsageError):
        _idle(w).upload_once()
    # retried while the clock is at most 106 (deadline 101 + 5): 102 .. 106, then raised at 107
    assert len(w.trims) == 6 and clock.sleeps == [0.01] * 5


def test_a_trim_refused_because_someone_trimmed_past_it_is_raised_at_once(monkeypatch):
    monkeypatch.setattr(background, "time", _Clock())
    monkeypatch.setattr(background, "upload", _Uploads(_result(last_offset=4096)))
    w = _Writer(trim_offset=0, refuse=100)
    b = _idle(w)
    w.trim_to = lambda offset, uploaded: (setattr(w.header, "trim_offset", 8192), (_ for _ in ()).throw(
        UsageError("behind the trim point")))
    with pytest.raises(UsageError, match="behind the trim point"):
        b.upload_once()
    w2 = _Writer(trim_offset=0)
    b2 = _idle(w2)

    def trim_to(offset, uploaded):  # trimmed to exactly this offset by someone else: still retried
        w2.trims.append(offset)
        if len(w2.trims) == 1:
            w2.header.trim_offset = 4096
            raise UsageError("already there")

    w2.trim_to = trim_to
    assert b2.upload_once().trimmed_to == 4096 and w2.trims == [4096, 4096]


def test_the_loop_uploads_only_once_upload_at_bytes_are_pending(monkeypatch):
    uploads = _Uploads(_result())
    monkeypatch.setattr(background, "upload", uploads)
    w = _Writer(acked_end=999, trim_offset=-1)
    b = _idle(w, upload_at=1000)
    b._stop = _Stop(False, False, True)
    b._loop()
    assert uploads.calls == [] and b._stop.waits == [0.05] * 3
    w.acked_end = 1000
    b._stop = _Stop(False, False, True)
    b._loop()
    assert len(uploads.calls) == 2 and b.stats.uploads == 2 and b._stop.waits == [0.05] * 3


def test_a_failed_upload_is_counted_said_and_waited_out(monkeypatch):
    said = []
    monkeypatch.setattr(background, "upload", _Uploads(RuntimeError("store down"), _result()))
    b = _idle(_Writer(acked_end=5000), upload_at=1000, on_warning=said.append)
    b._stop = _Stop(False, False, False, True)
    b._loop()
    assert b.stats.failures == 1 and b.stats.last_error == "store down" and b.stats.uploads == 1
    assert said == ["/w: background upload failed (store down); retrying later"]
    assert b._stop.waits == [0.05, 1.0, 0.05, 0.05]


def test_a_failure_without_a_warning_callback_is_only_counted(monkeypatch):
    monkeypatch.setattr(background, "upload", _Uploads(RuntimeError("x")))
    b = _idle(_Writer(acked_end=5000), upload_at=1000)
    b._stop = _Stop(False, False, True)
    b._loop()
    assert b.stats.failures == 1 and b.stats.last_error == "x"


def test_a_busy_lease_is_no_failure(monkeypatch):
    said = []
    monkeypatch.setattr(background, "upload", _Uploads(UploadBusy("another upload", where="/w")))
    b = _idle(_Writer(acked_end=5000), upload_at=1000, on_warning=said.append)
    b._stop = _Stop(False, False, True)
    b._loop()
    assert b.stats.failures == 0 and b.stats.last_error is None and said == [] and b._stop.waits == [0.05] * 3


def test_the_thread_runs_the_loop(monkeypatch):
    done = threading.Event()
    uploads = _Uploads(_result())
    monkeypatch.setattr(background, "upload", lambda *a, **k: (done.set(), uploads(*a, **k))[1])
    monkeypatch.setattr(background, "UPLOAD_POLL_S", 0.001)
    b = background.BackgroundUploader("/w", "STORE", _Writer(acked_end=5000), 1000)
    try:
        assert done.wait(10)
    finally:
        b.stop()
    assert uploads.calls and not b._thread.is_alive()


def test_failures_add_up_and_the_last_error_is_the_latest(monkeypatch):
    monkeypatch.setattr(background, "upload", _Uploads(RuntimeError("first"), RuntimeError("second")))
    b = _idle(_Writer(acked_end=5000), upload_at=1000)
    b._stop = _Stop(False, False, False, False, True)
    b._loop()
    assert b.stats.failures == 2 and b.stats.last_error == "second" and b.stats.uploads == 0
