"""compact --level so / --force-split through the CLI (in-process): human output, budgets, bad input."""

from __future__ import annotations

from typer.testing import CliRunner

from walctl.cli import app
from walctl.store import open_store

from storehelpers import put_objects


def test_human_output_of_so_and_split_levels(tmp_path):
    store_dir = tmp_path / "store"
    store = open_store(str(store_dir))
    put_objects(store, [[(1, 2, 1000)], [(1, 2, 1000)], [(2, 1, 100), (3, 1, 100)]])
    runner = CliRunner()
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--level", "so", "--dry-run",
                                 "--so-read-rate", "1MiB", "--so-write-rate", "2KiB"])
    assert result.exit_code == 0, result.stderr
    assert "SO compaction plan: 2 objects in, 1 out" in result.stdout
    assert "read 1.0 MiB/s, write 2.0 KiB/s, expected" in result.stdout
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--force-split"])
    assert result.exit_code == 0, result.stderr
    assert "force split done: 1 objects in, 2 out" in result.stdout and "commit" in result.stdout
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--force-split"])
    assert result.exit_code == 0 and "nothing to split" in result.stdout
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--level", "so", "--so-write-rate", "fast"])
    assert result.exit_code == 2 and "is not a rate" in result.stderr


def test_sso_dry_run_shows_its_read_budget_and_expected_duration(tmp_path):
    import json

    store_dir = tmp_path / "store"
    put_objects(open_store(str(store_dir)), [[(2, 2, 3000), (3, 1, 300)], [(2, 1, 300), (3, 2, 300)]])
    runner = CliRunner()
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--level", "sso", "--dry-run", "--json",
                                 "--read-rate", "0.5"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["read_rate_bytes_per_s"] == 0.5 * (1 << 20)
    assert out["expected_seconds"] == round(out["plan"]["bytes_read"] / (0.5 * (1 << 20)), 3) > 0
    result = runner.invoke(app, ["compact", "--store", str(store_dir), "--level", "sso", "--dry-run"])
    assert "budget: read 32.0 MiB/s, expected" in result.stdout  # derived from --interval, at least 32 MiB/s


def test_sso_dry_run_shows_its_write_budget(tmp_path):
    import json

    store_dir = tmp_path / "store"
    put_objects(open_store(str(store_dir)), [[(2, 2, 3000), (3, 1, 300)], [(2, 1, 300), (3, 2, 300)]])
    runner = CliRunner()
    args = ["compact", "--store", str(store_dir), "--level", "sso", "--dry-run", "--read-rate", "0.5",
            "--write-rate", "0.001", "--tasks", "1"]
    out = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert out["write_rate_bytes_per_s"] == 0.001 * (1 << 20) and out["plan"]["tasks"] == 1
    # the writes at 1 KiB/s take longer than the reads at 512 KiB/s: they set the duration
    assert out["expected_seconds"] == round(out["plan"]["bytes_written"] / (0.001 * (1 << 20)), 3) > 1
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert "budget: read 512.0 KiB/s, write 1.0 KiB/s, expected" in result.stdout


def test_sso_dry_run_shows_its_task_timeout_default_derived_or_given(tmp_path):
    import json

    store_dir = tmp_path / "store"
    put_objects(open_store(str(store_dir)), [[(2, 80, 3000), (3, 1, 300)], [(2, 80, 3000), (3, 2, 300)]])
    runner = CliRunner()
    args = ["compact", "--store", str(store_dir), "--level", "sso", "--dry-run", "--json", "--split-size", "1MiB"]

    def timeout(*more):
        result = runner.invoke(app, [*args, *more])
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)
        return out["task_timeout_seconds"], out

    assert timeout()[0] == 600  # 10m: the plan's bytes take far less at 32 MiB/s
    assert timeout("--task-timeout", "2m")[0] == 120
    assert timeout("--task-timeout", "0")[0] is None  # no limit
    # a job paced to take longer than 5 minutes gets twice its expected duration
    derived, out = timeout("--write-rate", "0.001")  # 1 KiB/s
    assert out["expected_seconds"] > 300 and derived == 2 * out["expected_seconds"]
    result = runner.invoke(app, [*args, "--task-timeout", "soon"])
    assert result.exit_code == 2 and "--task-timeout" in result.stderr and "not a duration" in result.stderr
