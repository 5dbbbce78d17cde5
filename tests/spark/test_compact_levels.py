"""compact --level all: SSO compaction (Spark, the session fixture's local[2]) then SO compaction,
driven through the CLI in-process."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from walctl.cli import app
from walctl.store import manifest as mf
from walctl.store import open_store

from storehelpers import put_objects, read_back

pytestmark = pytest.mark.slow


def test_level_all_runs_sso_then_so(tmp_path, spark):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    put_objects(store, [[(1, 2, 1000)], [(1, 2, 1000)], [(1, 1, 1000)],  # three consecutive SOs
                        [(2, 2, 300), (3, 1, 300)], [(2, 1, 300), (3, 2, 300)]])  # two small SSOs
    before = read_back(store)
    result = CliRunner().invoke(app, ["compact", "--store", str(store_dir), "--master", "local[2]", "--split-size",
                                      "1MiB", "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["objects_in"] == 2 and out["commit_number"] is not None  # the SSO level
    assert out["so"]["objects_in"] == 3 and out["so"]["objects_out"] == 1  # then the SO level
    assert out["idle"] is False
    doc = mf.load_latest(store)
    assert sorted(o.kind for o in doc.objects) == ["SO", "SSO"]
    assert read_back(store) == before
    # nothing left to do at either level: idle, and Spark is not needed for that
    result = CliRunner().invoke(app, ["compact", "--store", str(store_dir), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["idle"] is True
