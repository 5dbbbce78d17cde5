"""Upload's trim hand-off (walctl/pipeline/upload/handoff.py) on its own: where the trim goes with
bad records in the log, its warnings word for word, the writer taking the trim, a refused trim, and
the exit-8 error naming the pid that holds the WAL (issue 32: each of the module's mutants killed
here, in milliseconds; the trim itself is walctl.wal.handoff's, replaced by a recorder)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from walctl.errors import TrimPendingError, UsageError
from walctl.pipeline.upload import handoff
from walctl.pipeline.upload.plan import UploadResult
from walctl.pipeline.upload.scanindex import _Bad

WAL = "/dev/wal0"


class _Trims:
    """walctl.wal.handoff.trim_or_hand_off: records each call, answers ``how`` or raises ``error``."""

    def __init__(self, how="direct", error=None):
        self.how, self.error, self.calls = how, error, []

    def __call__(self, path, offset, timeout_s, trim_directly):
        self.calls.append((path, offset, timeout_s, trim_directly))
        if self.error is not None:
            raise self.error
        return self.how


@pytest.fixture
def trims(monkeypatch):
    from walctl.wal import handoff as wal_handoff

    rec = _Trims()
    monkeypatch.setattr(wal_handoff, "trim_or_hand_off", rec)
    return rec


def _records(bad=(), good_before_bad=None, last_good=None):
    return SimpleNamespace(bad=list(bad), good_before_bad=good_before_bad, last_good=last_good)


def _result(last_offset):
    r = UploadResult()
    r.last_offset = last_offset
    return r


def test_a_clean_log_is_trimmed_to_the_last_uploaded_record_directly(trims):
    from walctl.wal.lifecycle import trim_scanned

    result = _result(8192)
    handoff.trim_after_commit(WAL, 4096, _records(last_good=8192), result, trim=True, timeout_s=2.5)
    assert trims.calls == [(WAL, 8192, 2.5, trim_scanned)]
    assert result.trimmed_to == 8192 and result.warnings == []


def test_no_trim_when_off_when_nothing_was_uploaded_or_when_trimmed_that_far(trims):
    for trim, last, trim_offset in [(False, 8192, 0), (True, None, 0), (True, 8192, 8192), (True, 8192, 9000)]:
        result = _result(last)
        handoff.trim_after_commit(WAL, trim_offset, _records(), result, trim=trim, timeout_s=1.0)
        assert result.trimmed_to is None and result.warnings == []
    assert trims.calls == []
    result = _result(8193)  # one byte past the trim point: trimmed
    handoff.trim_after_commit(WAL, 8192, _records(), result, trim=True, timeout_s=1.0)
    assert result.trimmed_to == 8193 and [c[1] for c in trims.calls] == [8193]


def test_one_bad_record_stops_the_trim_before_it_with_its_recover_command(trims):
    result = _result(20000)
    records = _records([_Bad(12288, 77)], good_before_bad=8192, last_good=20000)
    handoff.trim_after_commit(WAL, 0, records, result, trim=True, timeout_s=1.0)
    assert [c[1] for c in trims.calls] == [8192] and result.trimmed_to == 8192
    assert result.warnings == [
        "1 record is not a StreamRecordBatch and was not uploaded (first at WAL offset 12288); the WAL is "
        "not trimmed past it: save it with 'walctl recover /dev/wal0 --from 12288 --to 12289 --payload hex', "
        "then drop it with 'walctl trim /dev/wal0 20000'"]


def test_several_bad_records_say_so_and_drop_up_to_the_last_bad_one(trims):
    result = _result(None)
    records = _records([_Bad(4096, 1), _Bad(16384, 2), _Bad(24576, 3)], good_before_bad=None, last_good=20000)
    handoff.trim_after_commit(WAL, -1, records, result, trim=True, timeout_s=1.0)
    assert trims.calls == [] and result.trimmed_to is None
    assert result.warnings == [
        "3 records are not StreamRecordBatches and were not uploaded (first at WAL offset 4096); the WAL is "
        "not trimmed past it: save it with 'walctl recover /dev/wal0 --from 4096 --to 4097 --payload hex', "
        "then drop it with 'walctl trim /dev/wal0 24576'"]


def test_bad_records_with_no_good_record_drop_to_the_last_bad_one(trims):
    result = _result(None)
    handoff.trim_after_commit(WAL, 0, _records([_Bad(4096, 1), _Bad(8192, 1)]), result, trim=True, timeout_s=1.0)
    assert result.warnings[0].endswith("then drop it with 'walctl trim /dev/wal0 8192'")
    result = _result(None)  # a good record at offset 0 after them: 0 is a record, not "none"
    handoff.trim_after_commit(WAL, 0, _records([_Bad(4096, 1)], last_good=0), result, trim=True, timeout_s=1.0)
    assert result.warnings[0].endswith("then drop it with 'walctl trim /dev/wal0 4096'")
    result = _result(None)
    handoff.trim_after_commit(WAL, 0, _records([_Bad(4096, 1)], last_good=-5), result, trim=True, timeout_s=1.0)
    assert result.warnings[0].endswith("then drop it with 'walctl trim /dev/wal0 4096'")


def test_a_lone_bad_record_at_offset_0_is_dropped_with_a_trim_to_0(trims):
    result = _result(None)
    handoff.trim_after_commit(WAL, -1, _records([_Bad(0, 9)]), result, trim=True, timeout_s=1.0)
    assert result.warnings[0].endswith("then drop it with 'walctl trim /dev/wal0 0'")
    assert "(first at WAL offset 0)" in result.warnings[0] and "--from 0 --to 1 " in result.warnings[0]


def test_a_bad_record_after_good_ones_trims_to_the_good_one_before_it(trims):
    result = _result(30000)
    records = _records([_Bad(12288, 5)], good_before_bad=8192, last_good=30000)
    handoff.trim_after_commit(WAL, 8191, records, result, trim=True, timeout_s=1.0)
    assert result.trimmed_to == 8192
    result = _result(30000)  # trimmed that far already: no trim
    handoff.trim_after_commit(WAL, 8192, records, result, trim=True, timeout_s=1.0)
    assert result.trimmed_to is None and len(trims.calls) == 1


def test_a_writer_that_takes_the_trim_is_said(trims):
    trims.how = "writer"
    result = _result(8192)
    handoff.trim_after_commit(WAL, 0, _records(), result, trim=True, timeout_s=1.0)
    assert result.trimmed_to == 8192
    assert result.warnings == ["/dev/wal0: a writer is active; it took the trim to 8192"]
    warnings = []
    trims.how = "direct"
    assert handoff._trim_after(WAL, 4096, warnings, 1.0) == 4096 and warnings == []


def test_a_refused_trim_is_a_warning_and_no_trim(trims):
    trims.error = UsageError("offset 8192 is behind the trim point", where=WAL)
    result = _result(8192)
    handoff.trim_after_commit(WAL, 0, _records(), result, trim=True, timeout_s=1.0)
    assert result.trimmed_to is None
    assert result.warnings == ["/dev/wal0: not trimmed (offset 8192 is behind the trim point); the next upload "
                               "skips what is already uploaded"]


def test_a_trim_no_one_took_names_the_writer_pid(trims, monkeypatch):
    from walctl.device import locks

    trims.error = TrimPendingError("the writer did not take the trim", where=WAL, hint="old hint")
    asked = []
    monkeypatch.setattr(locks, "lock_holder", lambda path: asked.append(path) or 4321)
    with pytest.raises(TrimPendingError) as err:
        handoff.trim_after_commit(WAL, 0, _records(), _result(8192), trim=True, timeout_s=1.0)
    assert asked == [WAL]
    assert err.value is trims.error and err.value.__cause__ is None and err.value.__suppress_context__
    assert err.value.what == "the writer did not take the trim; writer pid 4321 holds the WAL and did not answer"
    assert err.value.hint == ("is pid 4321 stopped (kill -CONT 4321) or running without the trim hand-off? "
                              "rerun upload (it skips what is committed), or pass --no-trim")
    assert err.value.where == WAL


def test_a_trim_no_one_took_behind_another_trim_names_that_trim(trims, monkeypatch):
    """Not "writer pid N did not answer" and kill -CONT: a marked trim held the lock (FORMATS.md 1.8)."""
    from walctl.device import locks

    trims.error = TrimPendingError("the writer did not take the trim", where=WAL, hint="old hint")
    monkeypatch.setattr(locks, "trim_holder", lambda path: locks.TrimHolder(77, "walctl trim"))
    monkeypatch.setattr(locks, "lock_holder", lambda path: 77)
    with pytest.raises(TrimPendingError) as err:
        handoff._trim_after(WAL, 8192, [], 1.0)
    assert err.value.what == "the writer did not take the trim"  # (the refusal it quotes names the trim)
    assert err.value.hint == ("see what pid 77 is doing; rerun upload once it is done (it skips what is "
                              "committed), or pass --no-trim")
    assert err.value.where == WAL
    # the mark of a trim refused itself, while a writer (pid 4321) holds the flock: that writer is named
    monkeypatch.setattr(locks, "lock_holder", lambda path: 4321)
    trims.error = TrimPendingError("the writer did not take the trim", where=WAL, hint="old hint")
    with pytest.raises(TrimPendingError) as err:
        handoff._trim_after(WAL, 8192, [], 1.0)
    assert err.value.what == "the writer did not take the trim; writer pid 4321 holds the WAL and did not answer"


def test_a_trim_no_one_took_without_a_lock_holder_is_left_as_it_is(trims, monkeypatch):
    from walctl.device import locks

    trims.error = TrimPendingError("the writer did not take the trim", where=WAL, hint="old hint")
    monkeypatch.setattr(locks, "lock_holder", lambda path: None)
    with pytest.raises(TrimPendingError) as err:
        handoff._trim_after(WAL, 8192, [], 1.0)
    assert err.value.what == "the writer did not take the trim" and err.value.hint == "old hint"
    assert err.value.__cause__ is None


def test_a_real_trim_of_a_wal_file(tmp_path):
    """No recorder: the WAL's header really moves to the offset."""
    from storehelpers import append, make_wal
    from walctl.device import open_device
    from walctl.wal.lifecycle import read_wal_state

    def trim_offset(wal):
        dev = open_device(wal, writable=False)
        try:
            return read_wal_state(dev, wal).header.trim_offset
        finally:
            dev.close()

    wal = make_wal(tmp_path, capacity=1 << 20)
    append(wal, {1: (3, 100)})
    assert trim_offset(wal) == -1
    warnings: list[str] = []
    assert handoff._trim_after(wal, 0, warnings, 1.0) == 0 and warnings == []
    assert trim_offset(wal) == 0
