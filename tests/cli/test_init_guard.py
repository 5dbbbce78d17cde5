"""`init --force` over a WAL holding records not yet uploaded (issue 28, item 3).

It printed only "initialised" and wiped every acknowledged record an upload had not taken yet.
Now it refuses (exit 5) with how many records and bytes would go, leaving the device as it was,
unless --discard-unuploaded is given too; a WAL whose live records are all uploaded (an upload
trims what it committed) is re-initialised by --force alone, as before.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest


def _digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _records(cli, dev) -> list[dict]:
    res = cli("recover", dev, "--json")
    assert res.exit_code == 0, res
    return [o for o in res.json_lines() if o["type"] == "record"]


def _unuploaded(dev):
    from walctl.device.opening import open_device
    from walctl.wal.lifecycle import read_wal_state, unuploaded

    handle = open_device(dev, writable=False)
    try:
        return unuploaded(handle, read_wal_state(handle, dev))
    finally:
        handle.close()


def test_force_refuses_unuploaded_records_with_their_count_and_leaves_the_wal(cli, new_wal, append_json, tools):
    dev = new_wal("1MiB")
    append_json(dev, "a" * 1000, "b" * 1000, "c" * 1000, stream=4)
    before = _digest(dev)
    res = cli("init", dev, "--capacity", "1MiB", "--force")
    assert res.exit_code == 5, res
    line = tools.assert_one_error_line(res.stderr)
    assert re.search(r"holds 3 records \(3\.\d KiB\) not yet uploaded", line), line
    assert "walctl upload DEVICE --store URL" in line and "--force --discard-unuploaded" in line
    assert _digest(dev) == before, "a refused init must not write one byte"
    assert len(_records(cli, dev)) == 3
    # --json: the refusal is in the JSON too, with the same exit code
    res = cli("init", dev, "--capacity", "1MiB", "--force", "--json")
    assert res.exit_code == 5 and json.loads(res.stdout)["error"]["code"] == 5
    assert _digest(dev) == before


def test_discard_unuploaded_reinitialises(cli, new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "x", "y", stream=1)
    res = cli("init", dev, "--capacity", "1MiB", "--force", "--discard-unuploaded", "--json")
    assert res.exit_code == 0, res
    assert json.loads(res.stdout)["header"]["trim_offset"] is None
    assert _records(cli, dev) == []


def test_discard_unuploaded_alone_still_needs_force(cli, new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "x", stream=1)
    before = _digest(dev)
    res = cli("init", dev, "--capacity", "1MiB", "--discard-unuploaded")
    assert res.exit_code == 5 and "--force" in res.stderr
    assert _digest(dev) == before


def test_an_all_uploaded_wal_reinitialises_with_plain_force(cli, tmp_path, new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "x" * 500, "y" * 500, stream=2)
    up = cli("upload", dev, "--store", tmp_path / "store", "--json")
    assert up.exit_code == 0, up
    assert _unuploaded(dev).scanned is False  # the checkpoint and the trim record's header answered
    res = cli("init", dev, "--capacity", "1MiB", "--force")
    assert res.exit_code == 0, res
    assert _records(cli, dev) == []


def test_a_partly_trimmed_wal_counts_only_the_records_after_the_trim_point(cli, new_wal, append_json, tools):
    dev = new_wal("1MiB")
    offsets = append_json(dev, "one", "two", "three", "four", stream=3)
    assert cli("trim", dev, str(offsets[1])).exit_code == 0
    res = cli("init", dev, "--capacity", "1MiB", "--force")
    assert res.exit_code == 5, res
    assert "holds 2 records (" in tools.assert_one_error_line(res.stderr)


def test_a_crashed_wal_is_counted_by_a_scan(cli, new_wal, held_writer, tools):
    dev = new_wal("1MiB")
    writer = held_writer(dev)
    writer.send(b"second")
    writer.kill()  # the header says "ungraceful": no checkpoint answers, the live log is scanned
    before = _digest(dev)
    res = cli("init", dev, "--capacity", "1MiB", "--force")
    assert res.exit_code == 5, res
    assert "holds 2 records (" in tools.assert_one_error_line(res.stderr)
    assert _digest(dev) == before


def test_an_empty_wal_needs_only_force(cli, new_wal):
    dev = new_wal("1MiB")
    assert cli("init", dev, "--capacity", "1MiB", "--force").exit_code == 0


@pytest.mark.parametrize("version", [0, 1])
def test_an_automq_wal_with_records_needs_discard_unuploaded(cli, tmp_path, tools, version):
    """walctl cannot know what AutoMQ uploaded: every record after its trim point counts."""
    from test_automq_forensics import log_of

    img = log_of(version, blocks=3)
    img.headers(clean=True)
    path = img.save(tmp_path / "amq.img")
    before = _digest(path)
    res = cli("init", path, "--force")
    assert res.exit_code == 5, res
    line = tools.assert_one_error_line(res.stderr)
    assert f"holds {len(img.records)} record" in line and "cannot tell uploaded" in line
    assert "walctl image DEVICE FILE" in line and _digest(path) == before
    res = cli("init", path, "--force", "--discard-unuploaded")
    assert res.exit_code == 0, res
    assert _records(cli, path) == []


def test_discard_unuploaded_from_the_environment_is_said(cli, new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "x", stream=1)
    res = cli("init", dev, "--capacity", "1MiB", "--force", env={"WALCTL_DISCARD_UNUPLOADED": "1"})
    assert res.exit_code == 0, res
    assert "--discard-unuploaded is set by the environment (WALCTL_DISCARD_UNUPLOADED)" in res.stderr
