"""`walctl status --verify-budget`: the cron recipe that alerts on corruption (issue 28, item 5).

The README's crontab ran `status --metrics-file` without a scan: a cleanly closed WAL is answered
from its checkpoint, so walctl_wal_corrupt_findings was never written, the README's alert on it
could never fire, and status exited 0 on a clean-closed WAL holding a corrupt record. The
incremental verification reads at most a budget of the live log per run, going on from where
the last run stopped (a state file beside the metrics file), and exits 3 while it knows a
finding a crash does not explain.
"""

from __future__ import annotations

import json

import pytest

from walctl import metrics

MiB = 1 << 20
BUDGET = MiB
# A run reads its budget, the 4 KiB block past it, the record across its end (3 KiB here) and,
# when it goes on from a remembered record, the 64 KiB its seek looks back for a block start;
# and the two header slots, twice (before, and after to see a trim made meanwhile).
READ_SLACK = 64 * 1024 + 2 * 8192 + 4096 + 4096


@pytest.fixture
def full_wal(new_wal, cli):
    """A cleanly closed 4 MiB WAL holding 900 records of ~3 KiB (2.6 MiB of log)."""

    def make(name: str | None = None) -> str:
        dev = new_wal("4MiB", name)
        data = b"".join((b"rec%05d-" % i) + b"x" * 3000 + b"\n" for i in range(900))
        res = cli("append", dev, "--stream", "1", "--input", "-", input=data)
        assert res.exit_code == 0, res
        return dev

    return make


def _cron(cli, dev, prom, *extra):
    """The README's crontab form (with --json to read the run's figures)."""
    res = cli("status", dev, "--verify-budget", "1MiB", "--metrics-file", prom, "--json", *extra)
    out = json.loads(res.stdout)
    return res, out


def _gauges(prom, dev) -> dict:
    return metrics.parse_values(open(prom).read(), {"device": dev, "node_id": ""})


def _record_offsets(cli, dev) -> list[int]:
    res = cli("recover", dev, "--json")
    return [o["offset"] for o in res.json_lines() if o["type"] == "record"]


def test_a_healthy_wal_is_verified_a_budget_at_a_time_and_wraps(cli, tmp_path, full_wal):
    dev = full_wal()
    prom = tmp_path / "wal.prom"
    state_file = tmp_path / "wal.prom.verify-state"
    runs = []
    while not (runs and runs[-1]["pass_complete"]):
        if runs:  # no pass has ended yet: no age to alert on
            assert "walctl_wal_verify_last_pass_timestamp_seconds" not in _gauges(prom, dev)
        assert len(runs) < 5, runs  # 2.6 MiB of log, 1 MiB a run
        res, out = _cron(cli, dev, prom)
        assert res.exit_code == 0, res
        runs.append(out["verification"])
        v = _gauges(prom, dev)
        assert v["walctl_wal_corrupt_findings"] == 0
        assert v["walctl_wal_verified_bytes"] == out["verification"]["verified_bytes"] <= BUDGET
        assert v["walctl_wal_verified_through_offset"] == out["verification"]["verified_through_offset"]
        assert out["device_bytes_read"] <= BUDGET + READ_SLACK, out["device_bytes_read"]
        state = json.loads(state_file.read_text())["devices"][dev]
        # (the state file keeps -1 for "from the trim point"; JSON says null: docs/CLI.md's null rule)
        assert state["next_offset"] == (out["verification"]["next_offset"] if out["verification"]["next_offset"]
                                        is not None else -1)
    assert len(runs) >= 3 and runs[0]["from_offset"] == 0
    for before, after in zip(runs, runs[1:]):  # each run goes on where the one before stopped
        assert after["from_offset"] == before["next_offset"] >= before["verified_through_offset"] > 0
        assert before["next_offset"] % 4096 == 0  # a record on a block boundary: a cheap seek
    assert runs[-1]["verified_through_offset"] == out["end_offset"] and runs[-1]["next_offset"] is None
    assert sum(r["records"] for r in runs) == 900  # every record counted once in the pass
    res, out = _cron(cli, dev, prom)
    assert res.exit_code == 0 and out["verification"]["from_offset"] == 0  # wrapped to the trim point
    assert out["verification"]["passes"] == 1
    assert _gauges(prom, dev)["walctl_wal_verify_last_pass_timestamp_seconds"] > 0


def test_a_corrupt_record_in_a_clean_wal_alerts_within_a_few_runs(cli, tmp_path, full_wal, tools):
    dev = full_wal()
    offsets = _record_offsets(cli, dev)
    bad = offsets[len(offsets) // 2]  # in the second run's range
    tools.flip_byte(dev, tools.physical(bad, 4 << 20) + tools.RECORD_HEADER + 100)
    prom = tmp_path / "wal.prom"
    # without a verification: nothing measured, the metric is absent, and the exit is 0
    plain = cli("status", dev, "--metrics-file", prom)
    assert plain.exit_code == 0 and "walctl_wal_corrupt_findings" not in _gauges(prom, dev)
    codes = []
    for _ in range(3):
        res, out = _cron(cli, dev, prom)
        codes.append(res.exit_code)
        if res.exit_code == 3:
            break
    assert codes[-1] == 3, codes
    line = tools.assert_one_error_line(res.stderr)
    assert f"offset {bad}" in line and "crash does not explain" in line
    assert out["error"]["code"] == 3 and out["verification"]["corrupt"][0]["offset"] == bad
    assert _gauges(prom, dev)["walctl_wal_corrupt_findings"] == 1
    # it stays known: the runs after it (the rest of the pass, the next pass) still exit 3
    for _ in range(3):
        res, _out = _cron(cli, dev, prom)
        assert res.exit_code == 3 and _gauges(prom, dev)["walctl_wal_corrupt_findings"] == 1
    # a run that verifies nothing removes the earlier run's value: absent means not measured
    assert cli("status", dev, "--metrics-file", prom).exit_code == 0
    assert "walctl_wal_corrupt_findings" not in _gauges(prom, dev)


def test_a_finding_trimmed_away_is_forgotten_and_a_trimmed_position_restarts_at_the_trim_point(
        cli, tmp_path, full_wal, tools):
    dev = full_wal()
    offsets = _record_offsets(cli, dev)
    bad = offsets[5]
    tools.flip_byte(dev, tools.physical(bad, 4 << 20) + tools.RECORD_HEADER + 100)
    prom = tmp_path / "wal.prom"
    res, first = _cron(cli, dev, prom)
    assert res.exit_code == 3 and first["verification"]["next_offset"] > 0
    # trim past the damaged record and past where the next run would start
    past = [o for o in offsets if o > first["verification"]["next_offset"]][10]
    assert cli("trim", dev, str(past)).exit_code == 0
    res, second = _cron(cli, dev, prom)
    assert res.exit_code == 0, res
    assert second["verification"]["from_offset"] == past  # the trim point (its record is deleted)
    assert second["verification"]["corrupt_findings"] == 0
    assert _gauges(prom, dev)["walctl_wal_corrupt_findings"] == 0


def test_a_reinitialised_wal_starts_over(cli, tmp_path, full_wal, tools):
    dev = full_wal()
    prom = tmp_path / "wal.prom"
    offsets = _record_offsets(cli, dev)
    assert cli("trim", dev, str(offsets[3])).exit_code == 0
    res, first = _cron(cli, dev, prom)
    assert res.exit_code == 0 and first["verification"]["next_offset"] > 0
    assert cli("init", dev, "--capacity", "4MiB", "--force", "--discard-unuploaded").exit_code == 0
    assert cli("append", dev, "--stream", "1", "a", "b").exit_code == 0
    res, second = _cron(cli, dev, prom)
    assert res.exit_code == 0, res
    v = second["verification"]
    assert v["from_offset"] == 0 and v["records"] == 2 and v["pass_complete"]
    assert "re-initialised" in v["restarted"]

    # never trimmed, before and after: the log now ends before where the last run stopped
    other = full_wal("other.img")
    res, first = _cron(cli, other, prom)
    assert res.exit_code == 0 and first["verification"]["next_offset"] > 0
    assert cli("init", other, "--capacity", "4MiB", "--force", "--discard-unuploaded").exit_code == 0
    assert cli("append", other, "--stream", "1", "a").exit_code == 0
    res, second = _cron(cli, other, prom)
    assert res.exit_code == 0 and second["verification"]["from_offset"] == 0
    assert "ends before" in second["verification"]["restarted"]


def test_two_wals_share_one_state_file(cli, tmp_path, full_wal, new_wal):
    first, second = full_wal("a.img"), new_wal("1MiB", "b.img")
    assert cli("append", second, "--stream", "2", "x").exit_code == 0
    prom = tmp_path / "wal.prom"
    for dev in (first, second, first):
        res, out = _cron(cli, dev, prom)
        assert res.exit_code == 0, res
    state = json.loads((tmp_path / "wal.prom.verify-state").read_text())["devices"]
    assert state[first]["next_offset"] > 0 and state[second]["passes"] == 1
    assert out["verification"]["from_offset"] > 0  # the first WAL went on from its own position


def test_state_file_option_and_usage_errors(cli, tmp_path, full_wal, tools):
    dev = full_wal()
    res = cli("status", dev, "--verify-budget", "1MiB")
    assert res.exit_code == 2 and "--state-file" in tools.assert_one_error_line(res.stderr)
    res = cli("status", dev, "--state-file", tmp_path / "s.json")
    assert res.exit_code == 2 and "--verify-budget" in tools.assert_one_error_line(res.stderr)
    res = cli("status", dev, "--verify-budget", "100")
    assert res.exit_code == 2 and "minimum" in tools.assert_one_error_line(res.stderr)
    res = cli("status", dev, "--verify-budget", "1MiB", "--state-file", tmp_path / "nodir" / "s.json")
    assert res.exit_code == 2, res
    state = tmp_path / "s.json"
    res = cli("status", dev, "--verify-budget", "64MiB", "--state-file", state, "--json")
    assert res.exit_code == 0, res
    out = json.loads(res.stdout)["verification"]
    assert out["pass_complete"] and out["records"] == 900 and out["state_file"] == str(state)
    state.write_text("not json")  # a damaged state file: the verification starts over, the job runs
    res = cli("status", dev, "--verify-budget", "1MiB", "--state-file", state, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["verification"]["from_offset"] == 0


def test_a_whole_scan_counts_as_a_pass(cli, tmp_path, full_wal, tools):
    """--scan (or a log no checkpoint answers) reads the whole log anyway: that is the pass."""
    dev = full_wal()
    offsets = _record_offsets(cli, dev)
    tools.flip_byte(dev, tools.physical(offsets[-5], 4 << 20) + tools.RECORD_HEADER + 100)
    prom = tmp_path / "wal.prom"
    res, out = _cron(cli, dev, prom, "--scan")
    assert res.exit_code == 3, res
    known = out["verification"]["corrupt_findings"]
    assert out["verification"]["pass_complete"] and known == out["corrupt_findings"] >= 1
    assert _gauges(prom, dev)["walctl_wal_corrupt_findings"] == known


def test_damage_in_the_acknowledged_log_of_a_running_writer_counts(cli, tmp_path, full_wal, held_writer, tools):
    """A running writer's log has no trusted checkpoint: status scans it whole (that is the pass),
    and damage before the header's nextOffset (durable before the writer opened) is no crash tail."""
    dev = full_wal()
    offsets = _record_offsets(cli, dev)
    writer = held_writer(dev)  # its open wrote nextOffset = the clean end of the 900 records
    tools.flip_byte(dev, tools.physical(offsets[450], 4 << 20) + tools.RECORD_HEADER + 100)
    res, out = _cron(cli, dev, tmp_path / "wal.prom")
    assert res.exit_code == 3, res
    assert out["writer_active"] and out["verification"]["pass_complete"]
    assert out["verification"]["corrupt"][0]["offset"] == offsets[450]
    writer.finish()


def test_a_live_log_across_the_end_of_the_ring_is_verified_whole(cli, tmp_path, new_wal):
    """Offsets past the ring's size (a later lap): the runs go on across the lap's end."""
    dev = new_wal("1MiB")
    store = tmp_path / "store"
    chunk = b"".join((b"r%04d-" % i) + b"y" * 2000 + b"\n" for i in range(150))  # ~300 KiB
    for _ in range(3):
        assert cli("append", dev, "--stream", "1", "--input", "-", input=chunk).exit_code == 0
        assert cli("upload", dev, "--store", store).exit_code == 0  # trims what it committed
    for _ in range(2):
        assert cli("append", dev, "--stream", "1", "--input", "-", input=chunk).exit_code == 0
    status = json.loads(cli("status", dev, "--json").stdout)
    ring = status["ring_bytes"]
    assert status["start_offset"] < ring < status["end_offset"]  # the live log crosses the lap's end
    prom = tmp_path / "wal.prom"
    runs = []
    while not (runs and runs[-1]["pass_complete"]):
        assert len(runs) < 12, runs
        res = cli("status", dev, "--verify-budget", "128KiB", "--metrics-file", prom, "--json")
        assert res.exit_code == 0, res
        runs.append(json.loads(res.stdout)["verification"])
    assert sum(r["records"] for r in runs) == 300
    assert any(r["from_offset"] < ring < r["verified_through_offset"] or r["from_offset"] >= ring for r in runs)
    assert _gauges(prom, dev)["walctl_wal_corrupt_findings"] == 0
