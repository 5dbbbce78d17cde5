"""--metrics-file on upload, compact and gc: Prometheus text format for node_exporter's textfile
collector, replaced atomically, a failed run keeping the last success timestamp."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from walctl import metrics

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def parse_strict(text: str, labels: str = "") -> dict[str, tuple[str, str, float]]:
    """Check the exposition format as the textfile collector needs it; return name -> (type, help, value)
    of the samples carrying exactly ``labels`` (``{device="...",...}``; "" for none).

    Every family: HELP, then TYPE, then its samples, each label set once; counters end in _total;
    no family twice.
    """
    assert text.endswith("\n")
    lines = text.splitlines()
    out: dict[str, tuple[str, str, float]] = {}
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        help_line, type_line = lines[i:i + 2]
        assert help_line.startswith("# HELP "), help_line
        _, _, name, help_text = help_line.split(" ", 3)
        assert NAME.match(name) and help_text.strip()
        assert type_line == f"# TYPE {name} counter" or type_line == f"# TYPE {name} gauge", type_line
        kind = type_line.rsplit(" ", 1)[1]
        if kind == "counter":
            assert name.endswith("_total"), name
        assert name not in seen, f"duplicate {name}"
        seen.add(name)
        i += 2
        label_sets = set()
        while i < len(lines) and not lines[i].startswith("#"):
            sample, value = lines[i].rsplit(" ", 1)
            sample_name, _, rest = sample.partition("{")
            assert sample_name == name, lines[i]
            sample_labels = "{" + rest if rest else ""
            assert sample_labels not in label_sets, f"duplicate sample {lines[i]}"
            label_sets.add(sample_labels)
            if sample_labels == labels:
                out[name] = (kind, help_text, float(value))
            i += 1
        assert label_sets, f"{name} has no sample"
    return out


def values(path, labels: str | None = None) -> dict[str, float]:
    """The samples of one label set: ``labels``, or the only one the file's first family has."""
    text = open(path, encoding="utf-8").read()
    if labels is None:
        first = next(line for line in text.splitlines() if not line.startswith("#"))
        sample = first.rsplit(" ", 1)[0]
        labels = sample[sample.index("{"):] if "{" in sample else ""
    return {k: v[2] for k, v in parse_strict(text, labels).items()}


# -- the module ------------------------------------------------------------------------------

def test_render_a_success_then_a_failure():
    first = metrics.render("upload", "", success=True, now=1000.5, duration_s=2.0,
                           amounts={"bytes": 100, "objects": 2, "records": 7, "payload_bytes": 50, "requests": 9})
    fams = parse_strict(first)
    assert fams["walctl_upload_success"] == ("gauge", fams["walctl_upload_success"][1], 1.0)
    v = {k: x[2] for k, x in fams.items()}
    assert v["walctl_upload_last_success_timestamp_seconds"] == 1000.5
    assert v["walctl_upload_last_failure_timestamp_seconds"] == 0
    assert (v["walctl_upload_bytes_total"], v["walctl_upload_objects_total"], v["walctl_upload_requests_total"],
            v["walctl_upload_records_total"], v["walctl_upload_seconds_total"]) == (100, 2, 9, 7, 2.0)
    assert (v["walctl_upload_runs_total"], v["walctl_upload_failures_total"]) == (1, 0)
    assert v["walctl_upload_last_run_bytes"] == 100 and v["walctl_upload_last_run_duration_seconds"] == 2.0
    assert fams["walctl_upload_bytes_total"][0] == "counter"

    second = metrics.render("upload", first, success=False, now=2000.0, duration_s=1.0, amounts={"bytes": 5})
    v2 = {k: x[2] for k, x in parse_strict(second).items()}
    assert v2["walctl_upload_success"] == 0
    assert v2["walctl_upload_last_success_timestamp_seconds"] == 1000.5  # carried over
    assert v2["walctl_upload_last_failure_timestamp_seconds"] == 2000.0
    assert v2["walctl_upload_last_run_timestamp_seconds"] == 2000.0
    assert v2["walctl_upload_bytes_total"] == 100  # a failed run adds nothing it did not finish
    assert v2["walctl_upload_last_run_bytes"] == 0
    assert (v2["walctl_upload_runs_total"], v2["walctl_upload_failures_total"]) == (2, 1)
    assert v2["walctl_upload_seconds_total"] == 3.0

    third = metrics.render("upload", second, success=True, now=3000.0, duration_s=1.0, amounts={"bytes": 1})
    v3 = {k: x[2] for k, x in parse_strict(third).items()}
    assert v3["walctl_upload_last_failure_timestamp_seconds"] == 2000.0  # kept after a success
    assert v3["walctl_upload_bytes_total"] == 101 and v3["walctl_upload_success"] == 1


def test_other_jobs_lines_are_kept_and_garbage_is_dropped():
    gc_text = metrics.render("gc", "", success=True, now=5.0, duration_s=0.1, amounts={"objects": 3})
    previous = gc_text + "# some comment\nnot a metric line at all {\nwalctl_upload_runs_total 4\n"
    text = metrics.render("upload", previous, success=True, now=6.0, duration_s=0.1, amounts={})
    assert gc_text in text
    assert "some comment" not in text and "not a metric" not in text
    assert text.count("walctl_upload_runs_total 5\n") == 1  # continued from the previous value
    parse_strict(text)


def test_a_corrupt_previous_value_restarts_the_counter():
    text = metrics.render("gc", "walctl_gc_runs_total NaN\nwalctl_gc_objects_total -5\n", success=True, now=1.0,
                          duration_s=0.0, amounts={"objects": 2})
    v = {k: x[2] for k, x in parse_strict(text).items()}
    assert v["walctl_gc_runs_total"] == 1 and v["walctl_gc_objects_total"] == 2


def test_every_job_has_its_families():
    for job, amounts in metrics.AMOUNTS.items():
        fams = parse_strict(metrics.render(job, "", success=True, now=1.0, duration_s=0.5, amounts={}))
        for name in ("success", "last_success_timestamp_seconds", "last_failure_timestamp_seconds",
                     "runs_total", "failures_total", "seconds_total", "last_run_duration_seconds"):
            assert f"walctl_{job}_{name}" in fams
        for amount in amounts:
            assert f"walctl_{job}_{amount}_total" in fams and f"walctl_{job}_last_run_{amount}" in fams


def test_write_is_atomic_and_readable_by_others(tmp_path, monkeypatch):
    path = tmp_path / "walctl.prom"
    metrics.write_atomic(str(path), "a 1\n")
    assert path.read_text() == "a 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # a failure between write and rename leaves the old file whole and no temporary file
    def boom(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(metrics.os, "replace", boom)
    with pytest.raises(metrics.IOFailure):
        metrics.write_atomic(str(path), "a 2\n")
    assert path.read_text() == "a 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["walctl.prom"]


# -- through the commands ------------------------------------------------------------------------

@pytest.fixture
def wal_with_records(new_wal, append_json):
    dev = new_wal("256KiB")
    append_json(dev, "one", "two", stream=1)
    append_json(dev, "three", stream=2)
    return dev


def test_upload_success_then_failure(cli, tmp_path, wal_with_records):
    store = tmp_path / "store"
    prom = tmp_path / "textfile" / "walctl-upload.prom"
    prom.parent.mkdir()
    res = cli("upload", wal_with_records, "--store", store, "--json", "--metrics-file", prom)
    assert res.exit_code == 0, res
    out = res.json_lines()
    assert len(out) == 1
    v = values(prom)
    assert v["walctl_upload_success"] == 1
    assert v["walctl_upload_objects_total"] == out[0]["objects_made"] == 1
    assert v["walctl_upload_records_total"] == 3 and v["walctl_upload_payload_bytes_total"] == 11
    assert v["walctl_upload_bytes_total"] == sum(o["size_bytes"] for o in out[0]["objects"])
    assert v["walctl_upload_requests_total"] > 0
    success_ts = v["walctl_upload_last_success_timestamp_seconds"]
    assert success_ts > 1.6e9

    # a failure of the same WAL and store (its manifest damaged): the last success is kept
    mine = metrics.labels_text({"device": wal_with_records, "store": store, "node_id": ""})
    assert values(prom, mine) == v
    newest = sorted((store / "manifest").iterdir())[-1]
    good = newest.read_bytes()
    newest.write_bytes(b"{not json")
    res = cli("upload", wal_with_records, "--store", store, "--json", "--metrics-file", prom)
    newest.write_bytes(good)
    assert res.exit_code == 3
    res.error_line()
    v = values(prom, mine)
    assert v["walctl_upload_success"] == 0
    assert v["walctl_upload_last_success_timestamp_seconds"] == success_ts
    assert v["walctl_upload_last_failure_timestamp_seconds"] >= success_ts
    assert (v["walctl_upload_runs_total"], v["walctl_upload_failures_total"]) == (2, 1)
    assert v["walctl_upload_objects_total"] == 1

    # another WAL failing writes its own series and leaves this one alone (issue 16, item 10)
    missing = tmp_path / "missing.img"
    res = cli("upload", missing, "--store", store, "--json", "--metrics-file", prom)
    assert res.exit_code == 4
    other = values(prom, metrics.labels_text({"device": missing, "store": store, "node_id": ""}))
    assert other["walctl_upload_success"] == 0 and other["walctl_upload_last_success_timestamp_seconds"] == 0
    assert values(prom, mine) == v
    assert sorted(p.name for p in prom.parent.iterdir()) == ["walctl-upload.prom"]


def test_dry_run_writes_no_metrics(cli, tmp_path, wal_with_records):
    prom = tmp_path / "upload.prom"
    res = cli("upload", wal_with_records, "--store", tmp_path / "store", "--dry-run", "--metrics-file", prom)
    assert res.exit_code == 0, res
    assert not prom.exists()
    assert not (tmp_path / "store").exists()  # a dry run creates nothing, not even the store
    assert cli("upload", wal_with_records, "--store", tmp_path / "store").exit_code == 0
    assert cli("gc", "--store", tmp_path / "store", "--dry-run", "--metrics-file", prom).exit_code == 0
    assert not prom.exists()


def test_missing_directory_is_a_usage_error_before_the_run(cli, tmp_path, wal_with_records):
    store = tmp_path / "store"
    res = cli("upload", wal_with_records, "--store", store, "--metrics-file", tmp_path / "nope" / "u.prom")
    assert res.exit_code == 2
    assert "--metrics-file" in res.error_line()
    assert not store.exists()  # nothing ran
    res = cli("gc", "--store", store, "--metrics-file", tmp_path)
    assert res.exit_code == 2 and "directory" in res.error_line()


def test_metrics_write_failure_after_a_good_run_is_exit_6_with_the_result(cli, tmp_path, wal_with_records,
                                                                          monkeypatch):
    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metrics.os, "replace", boom)
    prom = tmp_path / "upload.prom"
    res = cli("upload", wal_with_records, "--store", tmp_path / "store", "--json", "--metrics-file", prom)
    assert res.exit_code == 6
    line = res.error_line()
    assert "metrics file" in line and "upload run itself succeeded" in line
    out = res.json_lines()
    assert len(out) == 1 and out[0]["records"] == 3 and out[0]["error"]["code"] == 6
    assert not prom.exists()


def test_gc_and_idle_compact_write_their_metrics(cli, tmp_path, wal_with_records):
    store = tmp_path / "store"
    assert cli("upload", wal_with_records, "--store", store).exit_code == 0
    gc_prom, compact_prom = tmp_path / "gc.prom", tmp_path / "compact.prom"
    res = cli("gc", "--store", store, "--json", "--metrics-file", gc_prom)
    assert res.exit_code == 0, res
    v = values(gc_prom)
    assert v["walctl_gc_success"] == 1 and v["walctl_gc_objects_total"] == 0 and v["walctl_gc_requests_total"] > 0
    # one Stream Object and no Stream Set Object: nothing to compact, Spark never starts
    res = cli("compact", "--store", store, "--json", "--metrics-file", compact_prom)
    assert res.exit_code == 0, res
    assert res.json_lines()[0]["idle"] is True
    v = values(compact_prom)
    assert v["walctl_compact_success"] == 1 and v["walctl_compact_objects_total"] == 0
    assert v["walctl_compact_input_objects_total"] == 0


def test_failed_compact_keeps_the_last_success(cli, tmp_path, wal_with_records):
    prom = tmp_path / "compact.prom"
    store = tmp_path / "store"
    assert cli("compact", "--store", store, "--metrics-file", prom).exit_code == 4  # no store: compact never makes one
    assert not store.exists()
    assert cli("upload", wal_with_records, "--store", store).exit_code == 0
    assert cli("compact", "--store", store, "--metrics-file", prom).exit_code == 0  # no SSO: idle
    first = values(prom)["walctl_compact_last_success_timestamp_seconds"]
    res = cli("compact", "--store", store, "--retention-start", "99:1", "--metrics-file", prom)
    assert res.exit_code == 4  # no stream 99 (a bad value is refused while parsing, before the metrics run)
    v = values(prom)
    assert v["walctl_compact_success"] == 0 and v["walctl_compact_last_success_timestamp_seconds"] == first


def test_one_file_shared_by_two_jobs(cli, tmp_path, wal_with_records):
    prom = tmp_path / "walctl.prom"
    store = tmp_path / "store"
    assert cli("upload", wal_with_records, "--store", store, "--metrics-file", prom).exit_code == 0
    assert cli("gc", "--store", store, "--metrics-file", prom).exit_code == 0
    up = values(prom, metrics.labels_text({"device": wal_with_records, "store": store, "node_id": ""}))
    gc = values(prom, metrics.labels_text({"store": store}))
    assert up["walctl_upload_success"] == 1 and gc["walctl_gc_success"] == 1


def test_two_wals_share_one_file_without_colliding(cli, tmp_path, new_wal, append_json):
    prom = tmp_path / "walctl.prom"
    first, second = new_wal("1MiB"), new_wal("1MiB", None, "--node-id", "7")
    append_json(first, "a", "b", stream=1)
    append_json(second, "c", stream=2)
    store = tmp_path / "store"
    for dev in (first, second, first):
        assert cli("upload", dev, "--store", store, "--metrics-file", prom).exit_code == 0
    a = values(prom, metrics.labels_text({"device": first, "store": store, "node_id": ""}))
    b = values(prom, metrics.labels_text({"device": second, "store": store, "node_id": "7"}))
    assert (a["walctl_upload_runs_total"], a["walctl_upload_records_total"]) == (2, 2)
    assert (b["walctl_upload_runs_total"], b["walctl_upload_records_total"]) == (1, 1)


def test_status_exports_fill_trim_lag_and_shutdown(cli, tmp_path, new_wal, append_json):
    prom = tmp_path / "wal.prom"
    dev = new_wal("1MiB", None, "--node-id", "3")
    append_json(dev, "x" * 1000, "y" * 1000)
    res = cli("status", dev, "--json", "--metrics-file", prom)  # from the checkpoint: findings unknown
    assert res.exit_code == 0, res
    v = values(prom, metrics.labels_text({"device": dev, "node_id": "3"}))
    assert "walctl_wal_corrupt_findings" not in v and "walctl_wal_records" not in v  # left out, not NaN
    res = cli("status", dev, "--scan", "--json", "--metrics-file", prom)
    assert res.exit_code == 0, res
    out = json.loads(res.stdout)
    v = values(prom, metrics.labels_text({"device": dev, "node_id": "3"}))
    assert v["walctl_wal_up"] == 1 and v["walctl_wal_last_shutdown_graceful"] == 1
    assert v["walctl_wal_used_percent"] == out["used_percent"] > 0
    assert v["walctl_wal_trim_lag_bytes"] == out["used_bytes"] > 2000
    assert v["walctl_wal_free_bytes"] == out["free_bytes"] and v["walctl_wal_corrupt_findings"] == 0
    # a WAL that cannot be read: up 0 under its own labels, the first one kept
    missing = tmp_path / "gone.img"
    assert cli("status", missing, "--metrics-file", prom).exit_code == 4
    assert values(prom, metrics.labels_text({"device": missing, "node_id": ""}))["walctl_wal_up"] == 0
    assert values(prom, metrics.labels_text({"device": dev, "node_id": "3"})) == v


@pytest.mark.parametrize("cmd", ["upload", "compact", "gc"])
def test_help_names_the_option(cli, cmd):
    res = cli(cmd, "--help")
    assert "--metrics-file" in res.stdout and "textfile" in res.stdout


def test_no_temporary_files_after_many_runs(cli, tmp_path, wal_with_records):
    prom = tmp_path / "m" / "gc.prom"
    prom.parent.mkdir()
    assert cli("upload", wal_with_records, "--store", tmp_path / "store").exit_code == 0
    for _ in range(3):
        assert cli("gc", "--store", tmp_path / "store", "--metrics-file", prom).exit_code == 0
    assert os.listdir(prom.parent) == ["gc.prom"]
    assert values(prom)["walctl_gc_runs_total"] == 3
