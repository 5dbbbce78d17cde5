"""compact --json stays bounded as the iterations grow (issue 30): each iteration carries counts and
its outputs' indexes, never every output's range list again (main printed 60 MB of JSON at
--memory-limit 8MiB). The plan is the same one a real run prints (CompactResult.to_json)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from walctl.cli import app
from walctl.store import open_store

from storehelpers import put_objects

KiB = 1 << 10


def _plan_json(store_dir, memory_limit: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["compact", "--store", str(store_dir), "--level", "sso", "--dry-run", "--json",
                                      "--memory-limit", memory_limit, "--split-size", "1MiB"])
    assert result.exit_code == 0, result.stderr
    return len(result.stdout), json.loads(result.stdout)


def test_json_size_is_bounded_as_iterations_grow(tmp_path):
    store_dir = tmp_path / "store"
    # 6 SSOs of 3 streams, 4 KiB blocks: 144 source ranges, all in one output SSO
    specs = [[(1, 15, 3000), (2, 15, 3000), (3, 15, 3000)] for _ in range(6)]
    put_objects(open_store(str(store_dir)), specs, block_size=4 * KiB)
    one_size, one = _plan_json(store_dir, "64MiB")
    many_size, many = _plan_json(store_dir, "16KiB")
    assert one["plan"]["iteration_count"] == 1
    iterations = many["plan"]["iteration_count"]
    assert iterations > 40
    # the same outputs (in more parts), however many iterations
    assert [(o["streams"], o["range_count"]) for o in many["plan"]["outputs"]] == \
        [(o["streams"], o["range_count"]) for o in one["plan"]["outputs"]]
    # per iteration a few counts: ~160 bytes each, not the output's 144 ranges (~50 KB) each
    assert many_size - one_size <= 200 * iterations, (one_size, many_size, iterations)
    it = many["plan"]["iterations"][0]
    assert set(it) == {"index", "data_bytes", "gets", "read_bytes", "piece_count", "range_count", "outputs"}
    assert it["outputs"] == [0] and sum(i["range_count"] for i in many["plan"]["iterations"]) == \
        many["plan"]["outputs"][0]["range_count"]
    assert sum(i["gets"] for i in many["plan"]["iterations"]) == many["plan"]["gets"]
