"""wal/verify.py's own code (issue 32): the state file's entries, its load and atomic save, which
remembered entry a run takes, the budgeted range (where it stops, what it reads), the verdict on
a running log's findings and what a run remembers; on in-memory logs and tmp files."""

from __future__ import annotations

import json
import os

import pytest

from walctl.errors import IOFailure, UsageError
from walctl.format.header import WalHeader
from walctl.wal import verify as v
from walctl.wal.findings import BAD_BATCH, END_MISMATCH, HOLE, TORN_TAIL, TRIM_RECORD, Finding
from walctl.wal.layout import Ring
from walctl.wal.ringread import ScanResult

from muthelpers import Image, KiB, body

CAP = 256 * KiB
RING = Ring(CAP)


def _finding(kind, offset, explained=False, end=None, reason="r"):
    return Finding(kind, offset, RING, reason, end, explained=explained)


def _header(**kw):
    return WalHeader(CAP, **kw)


# -- VerifyRange, Verification ------------------------------------------------------------------

def test_verified_bytes_is_the_range_s_length_never_negative():
    assert v.VerifyRange(100, 350, 2, [], False, 350, 0).verified_bytes == 250
    assert v.VerifyRange(400, 350, 0, [], True, -1, 0).verified_bytes == 0
    assert v.VerifyRange(7, 7, 0, [], True, -1, 0).verified_bytes == 0


def test_a_verification_s_json_names_every_field():
    r = v.VerifyRange(100, 350, 2, [_finding(HOLE, 200)], True, -1, 8192)
    out = v.Verification(r, [{"offset": 200}], 1, "/x/state", 3, 42, "why").to_json()
    assert out == {"state_file": "/x/state", "from_offset": 100, "verified_through_offset": 350,
                   "verified_bytes": 250, "records": 2, "findings": 1, "pass_complete": True, "next_offset": -1,
                   "device_bytes_read": 8192, "corrupt_findings": 1, "corrupt_found_now": 1,
                   "corrupt": [{"offset": 200}], "passes": 3, "last_pass_timestamp_ns": 42, "restarted": "why"}
    plain = v.Verification(v.VerifyRange(0, 0, 0, [], False, 5, 0), [], 0, "s", 0, 0)
    assert plain.restarted is None and plain.to_json()["restarted"] is None
    assert plain.to_json()["pass_complete"] is False and plain.to_json()["next_offset"] == 5


# -- DeviceEntry ----------------------------------------------------------------------------------

def test_a_device_entry_from_json_takes_its_fields_and_defaults():
    e = v.DeviceEntry.from_json({"capacity": 10, "trim_offset": 3})
    assert (e.capacity, e.trim_offset, e.next_offset, e.corrupt, e.passes, e.last_pass_ns) == (10, 3, -1, [], 0, 0)
    e = v.DeviceEntry.from_json({"capacity": "10", "trim_offset": 3, "next_offset": 9, "passes": 2,
                                 "last_pass_ns": 77, "corrupt": [{"offset": 5}, {"offset": "x"}, 4, {"no": 1}]})
    assert (e.capacity, e.trim_offset, e.next_offset, e.passes, e.last_pass_ns) == (10, 3, 9, 2, 77)
    assert e.corrupt == [{"offset": 5}]


@pytest.mark.parametrize("obj", [None, [], "x", 5, {"trim_offset": 3}, {"capacity": 1},
                                 {"capacity": None, "trim_offset": 3}, {"capacity": "ten", "trim_offset": 3},
                                 {"capacity": 1, "trim_offset": 3, "corrupt": 5},
                                 {"capacity": 1, "trim_offset": 3, "passes": "many"}])
def test_a_damaged_device_entry_is_none(obj):
    assert v.DeviceEntry.from_json(obj) is None


def test_a_device_entry_to_json_keeps_the_first_hundred_findings():
    e = v.DeviceEntry(10, 3, 9, [{"offset": i} for i in range(150)], 2, 77)
    out = e.to_json()
    assert out == {"capacity": 10, "trim_offset": 3, "next_offset": 9, "corrupt": [{"offset": i} for i in range(100)],
                   "passes": 2, "last_pass_ns": 77}
    assert v.MAX_REMEMBERED == 100
    assert v.DeviceEntry.from_json(out) == v.DeviceEntry(10, 3, 9, [{"offset": i} for i in range(100)], 2, 77)
    fresh = v.DeviceEntry(1, 2)
    assert (fresh.next_offset, fresh.corrupt, fresh.passes, fresh.last_pass_ns) == (-1, [], 0, 0)


# -- the state file ------------------------------------------------------------------------------

def test_the_default_state_path_is_beside_the_metrics_file():
    assert v.default_state_path("/var/lib/node/walctl.prom") == "/var/lib/node/walctl.prom.verify-state"


def test_check_state_path_refuses_a_directory_and_a_missing_directory(tmp_path, monkeypatch):
    with pytest.raises(UsageError) as exc:
        v.check_state_path(str(tmp_path))
    assert exc.value.what == "--state-file names a directory" and exc.value.where == str(tmp_path)
    assert exc.value.hint == "give a file path"
    missing = str(tmp_path / "no" / "state")
    with pytest.raises(UsageError) as exc:
        v.check_state_path(missing)
    assert exc.value.what == "the directory of the verification state file does not exist"
    assert exc.value.where == missing and exc.value.hint == "create it, or name another with --state-file"
    v.check_state_path(str(tmp_path / "state"))  # a new file in an existing directory
    monkeypatch.chdir(tmp_path)
    v.check_state_path("relative-state")  # (its directory: the current one)


def test_load_state_reads_our_devices_or_starts_over(tmp_path):
    path = tmp_path / "s"
    assert v.load_state(str(path)) == {}
    path.write_text(json.dumps({"version": 1, "devices": {"/dev/x": {"capacity": 1}}}))
    assert v.load_state(str(path)) == {"/dev/x": {"capacity": 1}}
    for text in ["{", json.dumps({"version": 2, "devices": {"a": 1}}), json.dumps({"devices": {"a": 1}}),
                 json.dumps({"version": 1, "devices": []}), json.dumps({"version": 1}), json.dumps([1]),
                 "\xff\xfe"]:
        path.write_text(text, encoding="latin-1")
        assert v.load_state(str(path)) == {}, text
    assert v.load_state(str(tmp_path)) == {}  # a directory: unreadable, start over


def test_save_state_writes_the_whole_file_atomically(tmp_path):
    path = tmp_path / "s"
    path.write_text("old")
    v.save_state(str(path), {"b": {"x": 1}, "a": [1]})
    text = path.read_text()
    assert text == json.dumps({"version": 1, "devices": {"b": {"x": 1}, "a": [1]}}, indent=1, sort_keys=True) + "\n"
    assert sorted(os.listdir(tmp_path)) == ["s"]
    assert v.load_state(str(path)) == {"a": [1], "b": {"x": 1}}


def test_save_state_fails_with_an_io_failure_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "d"
    target.mkdir()
    (target / "inside").write_text("x")  # a non-empty directory: the rename fails
    with pytest.raises(IOFailure) as exc:
        v.save_state(str(target), {})
    assert exc.value.what.startswith("cannot write the verification state file: ")
    assert exc.value.where == str(target) and exc.value.hint == "check the directory's permissions and free space"
    assert sorted(os.listdir(tmp_path)) == ["d"]
    with pytest.raises(IOFailure) as exc:
        v.save_state(str(tmp_path / "no" / "s"), {})
    assert exc.value.what == "cannot write the verification state file: No such file or directory"


def test_save_state_keeps_the_error_when_the_temporary_file_is_gone(tmp_path, monkeypatch):
    def fail(src, dst):
        os.unlink(src)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(v.os, "replace", fail)
    with pytest.raises(IOFailure) as exc:
        v.save_state(str(tmp_path / "s"), {})
    assert exc.value.what == "cannot write the verification state file: Permission denied"
    assert os.listdir(tmp_path) == []


def test_save_state_says_the_error_itself_when_it_has_no_strerror(tmp_path, monkeypatch):
    def fail(src, dst):
        raise OSError("odd")

    monkeypatch.setattr(v.os, "replace", fail)
    with pytest.raises(IOFailure) as exc:
        v.save_state(str(tmp_path / "s"), {})
    assert exc.value.what == "cannot write the verification state file: odd"
    assert isinstance(exc.value.__cause__, OSError) and os.listdir(tmp_path) == []


# -- entry_for, resume_offset ---------------------------------------------------------------------

def test_entry_for_keeps_the_remembered_entry_of_the_same_wal():
    h = _header(trim_offset=100)
    devices = {"/d": {"capacity": CAP, "trim_offset": 50, "next_offset": 900, "passes": 2}}
    entry, why = v.entry_for(devices, "/d", h)
    assert why is None and (entry.capacity, entry.trim_offset, entry.next_offset, entry.passes) == (CAP, 50, 900, 2)
    assert v.entry_for(devices, "/d", h, log_end=900)[1] is None
    assert v.entry_for(devices, "/d", _header(trim_offset=50))[1] is None


@pytest.mark.parametrize("stored, header, log_end, why", [
    (None, _header(trim_offset=7), None, None),
    ({"capacity": "x"}, _header(trim_offset=7), None, None),
    ({"capacity": CAP + 1, "trim_offset": 0}, _header(trim_offset=7), None, "the capacity changed: another WAL"),
    ({"capacity": CAP, "trim_offset": 8}, _header(trim_offset=7), None,
     "the trim point went back: the WAL was re-initialised"),
    ({"capacity": CAP, "trim_offset": 0, "next_offset": 901}, _header(trim_offset=7), 900,
     "the log ends before where the last run stopped: the WAL was re-initialised"),
])
def test_entry_for_starts_over_on_another_wal(stored, header, log_end, why):
    entry, got = v.entry_for({"/d": stored} if stored is not None else {}, "/d", header, log_end)
    assert got == why
    assert entry == v.DeviceEntry(CAP, 7)


def test_resume_offset_is_the_remembered_record_or_the_trim_point():
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 900), _header(trim_offset=100)) == 900
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 100), _header(trim_offset=100)) == 100
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 101), _header(trim_offset=100)) == 101
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 50), _header(trim_offset=100)) == 100
    assert v.resume_offset(v.DeviceEntry(CAP, 0, -1), _header(trim_offset=-1)) == 0
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 1), _header(trim_offset=-1)) == 1
    assert v.resume_offset(v.DeviceEntry(CAP, 0, 0), _header(trim_offset=-1)) == 0


# -- _Walk ----------------------------------------------------------------------------------------

class _E:
    def __init__(self, offset, end):
        self.offset, self.end = offset, end


def test_a_walk_takes_the_first_record_whatever_its_size():
    w = v._Walk(0)
    assert (w.records, w.through, w.next_offset) == (0, None, -1)
    assert w.take(_E(0, 5000), 100) is True and (w.records, w.through) == (1, 5000)
    assert w.take(_E(5000, 5001), 100) is False and w.next_offset == 5000 and (w.records, w.through) == (1, 5000)


def test_a_walk_stops_at_a_record_ending_past_the_budget_not_at_one_ending_on_it():
    w = v._Walk(10)
    assert w.take(_E(10, 50), 100) and w.take(_E(50, 100), 100)
    assert not w.take(_E(100, 101), 100)
    assert (w.records, w.through, w.next_offset) == (2, 100, 100)


def test_a_walk_goes_back_to_the_last_block_start_it_saw():
    w = v._Walk(100)
    assert w.take(_E(100, 300), 10_000)
    assert w.take(_E(4096, 4200), 10_000)  # a block's first record: the next run may start here
    assert w.take(_E(4200, 4300), 10_000)
    assert w.take(_E(8192, 8292), 10_000)  # another: the latest counts
    assert w.take(_E(8292, 9000), 10_000)
    assert not w.take(_E(9000, 10_001), 10_000)
    assert (w.next_offset, w.records, w.through) == (8192, 3, 4300)


def test_a_walk_s_first_or_starting_record_is_no_place_to_go_back_to():
    w = v._Walk(4096)
    assert w.take(_E(4096, 4200), 1000) and w.take(_E(4200, 4300), 4300)
    assert not w.take(_E(4300, 4400), 4300)
    assert (w.next_offset, w.records, w.through) == (4300, 2, 4300)
    w = v._Walk(0)  # an aligned first record after the starting offset: not a place either (no records yet)
    assert w.take(_E(8192, 8300), 100)
    assert not w.take(_E(8300, 8400), 100)
    assert (w.next_offset, w.records, w.through) == (8300, 1, 8300)


def test_a_walk_ignores_records_off_a_block_start():
    w = v._Walk(0)
    assert w.take(_E(0, 4097), 10_000) and w.take(_E(4097, 8000), 10_000)
    assert not w.take(_E(8000, 10_001), 10_000)
    assert (w.next_offset, w.records, w.through) == (8000, 2, 8000)


# -- judge, finding_json --------------------------------------------------------------------------

def test_judge_a_clean_or_automq_log_by_the_scan_s_verdict_alone():
    fs = [_finding(HOLE, 10), _finding(HOLE, 20, explained=True), _finding(TORN_TAIL, 30, explained=True)]
    assert v.judge(fs, _header(next_offset=1000), 5) == [fs[0]]
    amq = WalHeader(CAP, shutdown_type=1, next_offset=1000, flavour="automq-v0")
    assert v.judge(fs, amq, 5) == [fs[0]]


def test_judge_a_running_log_s_damage_before_next_offset_is_corruption():
    fs = [_finding(HOLE, 10), _finding(HOLE, 20, explained=True), _finding(TORN_TAIL, 999, explained=True),
          _finding(TORN_TAIL, 1000, explained=True), _finding(BAD_BATCH, 30, explained=True),
          _finding(TRIM_RECORD, 40, explained=True)]
    h = _header(next_offset=1000, shutdown_type=1)
    assert v.judge(fs, h, None) == [fs[0], fs[1], fs[2]]
    assert v.judge(fs, h, 1000) == [fs[0], fs[1], fs[2]]


def test_judge_a_running_log_that_ends_before_next_offset():
    h = _header(next_offset=1000, shutdown_type=1)
    out = v.judge([], h, 999)
    assert len(out) == 1
    f = out[0]
    assert (f.kind, f.offset, f.end_offset, f.explained, f.ring) == (END_MISMATCH, 999, 1000, False, RING)
    assert f.reason == "the log ends at 999, before the header's nextOffset 1000 (the acknowledged log)"
    amq_ring = v.judge([], WalHeader(CAP + 512, shutdown_type=1, next_offset=10, block_size=512), 0)[0].ring
    assert amq_ring == Ring(CAP + 512, 512)


def test_finding_json_is_its_offsets_kind_and_reason():
    assert v.finding_json(_finding(HOLE, 10, end=20, reason="why")) == {
        "offset": 10, "end_offset": 20, "kind": "hole", "reason": "why"}


# -- remember -------------------------------------------------------------------------------------

def _f(o):
    return {"offset": o, "end_offset": None, "kind": "hole", "reason": "r"}


def test_remember_replaces_the_verified_range_s_findings_and_drops_trimmed_ones():
    entry = v.DeviceEntry(CAP - 1, 0, 100, [_f(50), _f(99), _f(100), _f(150), _f(199), _f(200), _f(300)], 4, 9)
    verified = v.VerifyRange(100, 200, 3, [], False, 200, 0)
    added = v.remember(entry, _header(trim_offset=50), verified, [_finding(HOLE, 120), _finding(HOLE, 40)],
                       clock=lambda: 1 / 0)
    assert added == 1
    assert [f["offset"] for f in entry.corrupt] == [99, 120, 200, 300]
    assert entry.corrupt[1] == {"offset": 120, "end_offset": None, "kind": "hole", "reason": "r"}
    assert (entry.trim_offset, entry.capacity, entry.next_offset, entry.passes, entry.last_pass_ns) == \
        (50, CAP, 200, 4, 9)


def test_remember_a_complete_pass_counts_it_and_clears_to_the_end():
    entry = v.DeviceEntry(CAP, 0, 100, [_f(99), _f(100), _f(10 ** 9)], 4, 9)
    verified = v.VerifyRange(100, 500, 3, [], True, -1, 0)
    added = v.remember(entry, _header(trim_offset=-1), verified, [_finding(HOLE, 0), _finding(HOLE, 0 - 1)],
                       clock=lambda: 12345)
    assert added == 1 and [f["offset"] for f in entry.corrupt] == [0, 99]
    assert (entry.next_offset, entry.passes, entry.last_pass_ns, entry.trim_offset) == (-1, 5, 12345, -1)


def test_remember_reads_the_clock_by_default(monkeypatch):
    monkeypatch.setattr(v.time, "time_ns", lambda: 777)
    entry = v.DeviceEntry(CAP, 0)
    v.remember(entry, _header(), v.VerifyRange(0, 5, 1, [], True, -1, 0), [])
    # (the default is time.time_ns itself, bound when remember was defined: a real clock)
    assert entry.passes == 1 and entry.last_pass_ns > 10 ** 18


# -- from_full_scan -------------------------------------------------------------------------------

def test_a_full_scan_is_a_complete_pass_from_where_it_read():
    rep = ScanResult(_header(), RING, start_offset=100, end_offset=900, records=7, bytes_read=4096)
    rep.findings.append(_finding(HOLE, 300))
    r = v.from_full_scan(rep)
    assert r == v.VerifyRange(100, 900, 7, rep.findings, True, -1, 4096) and r.findings is not rep.findings
    rep.read_from_offset = 200
    assert v.from_full_scan(rep).from_offset == 200
    rep.read_from_offset = 0
    assert v.from_full_scan(rep).from_offset == 0


# -- verify_range on a log ------------------------------------------------------------------------

def _log(clean=True):
    """Three blocks of three 107-byte records: at 0, 4096 and 8192 (the log ends at 8513)."""
    img = Image(CAP, window=16 * KiB)
    for b in range(3):
        img.block([body(1, 3 * b + i) for i in range(3)])
    return img, img.header(clean=clean)


def test_verify_range_reads_the_whole_log_within_a_large_budget():
    img, h = _log()
    progress = []
    r = v.verify_range(img.dev, h, 0, 1 << 20, progress=progress.append)
    assert (r.from_offset, r.through_offset, r.records, r.findings, r.reached_end, r.next_offset) == \
        (0, 8513, 9, [], True, -1)
    assert progress == [107, 214, 321, 4203, 4310, 4417, 8299, 8406, 8513]
    assert r.bytes_read == 16384  # one block past the clean header's nextOffset (12288): no more


def test_verify_range_stops_at_the_last_block_start_inside_its_budget():
    img, h = _log()
    progress = []
    r = v.verify_range(img.dev, h, 0, 5000, progress=progress.append)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (0, 321, 3, False, 4096)
    assert progress == [107, 214, 321, 4203, 4310, 4417]
    assert r.bytes_read == 3 * 4096  # the budget's end (5000) and one block more, aligned


def test_verify_range_with_a_tiny_budget_takes_one_record():
    img, h = _log(clean=False)
    r = v.verify_range(img.dev, h, 0, 100)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (0, 107, 1, False, 107)
    assert r.bytes_read == 8192


def test_verify_range_goes_on_from_a_remembered_record():
    img, h = _log(clean=False)
    r = v.verify_range(img.dev, h, 4096, 100)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (4096, 4203, 1, False, 4203)
    r = v.verify_range(img.dev, h, 4203, 300)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (4203, 4417, 2, False, 8192)
    r = v.verify_range(img.dev, h, 8192, 1 << 20)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (8192, 8513, 3, True, -1)
    r = v.verify_range(img.dev, h, 8513, 1 << 20)  # nothing left: the pass ends where it began
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (8513, 8513, 0, True, -1)


def test_verify_range_starts_at_the_trim_point():
    img, _ = _log(clean=False)
    h = img.header(clean=False, trim=107)
    r = v.verify_range(img.dev, h, 0, 250)
    assert (r.from_offset, r.through_offset, r.records, r.reached_end, r.next_offset) == (107, 321, 1, False, 4096)
    r = v.verify_range(img.dev, h, 50, 1 << 20)
    assert (r.from_offset, r.records, r.reached_end) == (107, 7, True)


def test_verify_range_collects_the_scan_s_findings():
    img, h = _log(clean=False)
    img.raw(4096 + 30, b"\xff" * 8)  # the first record of the second block: a bad body
    r = v.verify_range(img.dev, h, 0, 1 << 20)
    assert [(f.kind, f.offset) for f in r.findings] == [(HOLE, 4096)]
    assert (r.records, r.reached_end, r.through_offset) == (6, True, 8513)


def test_save_state_writes_a_hidden_temporary_file_beside_the_state_file(tmp_path, monkeypatch):
    renamed = []
    real = os.replace

    def replace(src, dst):
        renamed.append((src, dst, open(src).read()))
        return real(src, dst)

    monkeypatch.setattr(v.os, "replace", replace)
    path = tmp_path / "state"
    v.save_state(str(path), {})
    [(src, dst, text)] = renamed
    assert dst == str(path) and os.path.dirname(src) == str(tmp_path)
    name = os.path.basename(src)
    assert name.startswith(".state.") and name.endswith(".tmp") and len(name) > len(".state..tmp")
    assert text == '{\n "devices": {},\n "version": 1\n}\n'


def test_verify_range_s_budget_counts_from_the_start_of_the_log():
    img, h = _log(clean=False)
    r = v.verify_range(img.dev, h, 0, 320)  # the third record ends at 321: one byte past the budget
    assert (r.records, r.through_offset, r.next_offset, r.findings) == (2, 214, 214, [])
    r = v.verify_range(img.dev, h, 0, 321)
    assert (r.records, r.through_offset, r.next_offset) == (3, 321, 4096)


def test_verify_range_from_inside_a_record_begins_at_the_next():
    img, h = _log(clean=False)
    progress = []
    r = v.verify_range(img.dev, h, 4150, 200, progress=progress.append)
    assert (r.from_offset, r.through_offset, r.records, r.next_offset) == (4203, 4310, 1, 4310)
    assert progress == [160]  # verified bytes from where it was asked to start, at most the budget
    progress.clear()
    v.verify_range(img.dev, h, 4096, 250, progress=progress.append)
    assert progress == [107, 214]


def test_verify_range_does_not_probe_past_damage():
    img, h = _log(clean=False)
    img.raw(4096, b"\xa5" * 24)  # a hole at 4096 and nothing more for a window (16 KiB)...
    for o in range(8192, 12288, 107):
        img.raw(o, bytes(107))
    img.block([body(3, 0)], start=40960)  # ... then a valid record far past it: the probe would say so
    r = v.verify_range(img.dev, h, 0, 1 << 20)
    assert [(f.kind, f.offset) for f in r.findings] == [] and (r.records, r.reached_end) == (3, True)


def test_the_state_file_is_utf_8_whatever_the_locale(tmp_path, monkeypatch):
    import builtins
    import codecs

    seen = []

    def spy(real):
        def opener(*args, **kwargs):
            seen.append(kwargs.get("encoding"))
            return real(*args, **kwargs)
        return opener

    monkeypatch.setattr(v, "open", spy(builtins.open), raising=False)
    monkeypatch.setattr(v.os, "fdopen", spy(os.fdopen))
    path = str(tmp_path / "s")
    v.save_state(path, {"/dev/disk/by-id/é": {"capacity": 1}})
    assert v.load_state(path) == {"/dev/disk/by-id/é": {"capacity": 1}}
    assert len(seen) == 2 and all(e is not None and codecs.lookup(e).name == "utf-8" for e in seen)
