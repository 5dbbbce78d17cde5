"""Issue 30's remaining operator polish: recover's --limit bound and partial --json warning,
the time and where of every JSON document, the resolved path in metrics labels, null for -1."""

from __future__ import annotations

import pytest

from walctl.commands.recover import PARTIAL_JSON_WARNING


def test_recover_limit_zero_is_refused_like_read(cli, new_wal):
    dev = new_wal()
    assert cli("append", dev, "a").exit_code == 0
    res = cli("recover", dev, "-n", "0")
    assert res.exit_code == 2, res
    assert cli("read", "--store", "x", "-n", "0").exit_code == 2


@pytest.mark.parametrize("part", [("--limit", "1"), ("--from", "0"), ("--to", "999999")])
def test_recover_json_part_of_the_log_warns_on_stderr(cli, new_wal, part):
    dev = new_wal()
    assert cli("append", dev, "a", "b", "c").exit_code == 0
    res = cli("recover", dev, "--json", *part)
    assert res.exit_code == 0, res
    assert f"walctl: warning: {PARTIAL_JSON_WARNING}" in res.stderr.splitlines(), res
    assert PARTIAL_JSON_WARNING not in res.stdout
    whole = cli("recover", dev, "--json")
    assert PARTIAL_JSON_WARNING not in whole.stderr, whole


def test_append_store_from_the_convention_variable(cli, new_wal, tmp_path):
    """WALCTL_UPLOAD_AT without --store is still read (from the conventions, not a declaration)."""
    dev = new_wal()
    res = cli("append", dev, "a", env={"WALCTL_UPLOAD_AT": "1MiB"})
    assert res.exit_code == 2 and "--upload-at needs --store" in res.stderr, res


def _is_utc_iso(text: str) -> bool:
    from datetime import datetime, timedelta, timezone

    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when.utcoffset() == timedelta(0) and abs(datetime.now(timezone.utc) - when) < timedelta(minutes=5)


def test_json_documents_carry_their_time(cli, new_wal):
    dev = new_wal()
    appended = cli("append", dev, "a", "--json")
    summary = appended.json_lines()[-1]
    assert summary["type"] == "summary" and _is_utc_iso(summary["time"]), appended
    status = cli("status", dev, "--json")
    assert _is_utc_iso(status.json_lines()[-1]["time"]), status


@pytest.mark.parametrize("args, where", [
    (("status", "{d}/missing.img", "--json"), "{d}/missing.img"),
    (("ls", "--store", "{d}/no-store", "--json"), "{d}/no-store"),
])
def test_a_failed_runs_json_names_where_and_when(cli, tmp_path, args, where):
    res = cli(*[a.format(d=tmp_path) for a in args])
    assert res.exit_code != 0, res
    doc = res.json_lines()[-1]
    assert doc["error"]["where"] == where.format(d=tmp_path), res
    assert _is_utc_iso(doc["time"]), res


def test_metrics_labels_use_the_resolved_path(cli, new_wal, tmp_path, monkeypatch):
    dev = new_wal(name="wal.img")
    metrics = tmp_path / "m.prom"
    monkeypatch.chdir(tmp_path)
    assert cli("status", "wal.img", "--metrics-file", metrics).exit_code == 0
    assert cli("status", dev, "--metrics-file", metrics).exit_code == 0
    text = metrics.read_text()
    assert f'device="{dev}"' in text, text
    assert 'device="wal.img"' not in text, text


def test_upload_exit_8_names_a_stopped_writers_pid(new_wal, held_writer, run, tmp_path):
    import os
    import signal

    dev = new_wal("1MiB")
    writer = held_writer(dev, b"r0")
    os.kill(writer.proc.pid, signal.SIGSTOP)
    try:
        res = run("upload", dev, "--store", tmp_path / "store", "--trim-timeout", "500ms", timeout=60)
    finally:
        os.kill(writer.proc.pid, signal.SIGCONT)
    assert res.exit_code == 8, res
    line = res.error_line()
    assert f"writer pid {writer.proc.pid}" in line and f"kill -CONT {writer.proc.pid}" in line, res


def test_a_never_trimmed_wals_trim_offset_is_null_in_json_and_words_for_people(cli, new_wal):
    dev = new_wal()
    status = cli("status", dev, "--json").json_lines()[-1]
    assert status["trim_offset"] is None and status["header"]["trim_offset"] is None, status
    summary = cli("recover", dev, "--json").json_lines()[-1]
    assert summary["trim_offset"] is None, summary
    assert "never trimmed" in cli("status", dev).stdout


def test_inspect_object_reads_the_object_from_stdin(cli, run, new_wal, tmp_path):
    dev, store = new_wal("1MiB"), tmp_path / "store"
    assert cli("append", dev, "a", "b", "-s", "7").exit_code == 0
    assert cli("upload", dev, "--store", store).exit_code == 0
    objects = [p for p in store.rglob("*") if p.is_file() and "manifest" not in p.parts]
    from_file = run("inspect-object", objects[0], "--json", "--deep")
    assert from_file.exit_code == 0, from_file  # (the object, among the store's files)
    res = run("inspect-object", "-", "--json", "--deep", input=objects[0].read_bytes())
    assert res.exit_code == 0, res
    summary = res.json_lines()[-1]
    assert summary["verdict"] == "ok" and summary["entries"] == 1, res
    assert {r["stream_id"] for r in res.json_lines() if "stream_id" in r} == {7}
    refused = run("inspect-object", "-", "--store", store, input=b"")
    assert refused.exit_code == 2 and "standard input" in refused.error_line(), refused
