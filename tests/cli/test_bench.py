"""walctl bench: the report's shape, the safety rules, and the write queue it shares with the WAL.

No timing assertions: every run is 0.3 s on a few MiB under tmp_path (or a loop device
when root), and only the shape and consistency of the numbers are checked.
"""

from __future__ import annotations

import json
import os

import pytest

DUR = "0.3"
MODE_FIELDS = {"iops", "mib_per_s", "latency_us_p50", "latency_us_p90", "latency_us_p99", "latency_us_p999",
               "latency_us_max", "block_size_bytes", "engine", "writes", "seconds"}
WAL_FIELDS = MODE_FIELDS | {"records_per_s", "records", "payload_bytes", "record_size_bytes", "blocks_written",
                            "avg_block_bytes", "device_mib_per_s", "stages_us", "budget_iops", "budget_mib_per_s"}


def bench_json(cli, *args) -> dict:
    res = cli("bench", *args, "--duration", DUR, "--json")
    assert res.exit_code == 0, res
    lines = res.json_lines()
    assert len(lines) == 1, "bench --json prints one object"
    return lines[0]


def check_mode(obj: dict, fields: set[str]) -> None:
    missing = fields - set(obj)
    assert not missing, f"missing {sorted(missing)} in {obj}"
    assert obj["writes"] > 0 and obj["seconds"] > 0
    assert obj["iops"] > 0 and obj["mib_per_s"] > 0
    lat = [obj[k] for k in ("latency_us_p50", "latency_us_p90", "latency_us_p99", "latency_us_p999",
                            "latency_us_max")]
    assert all(v > 0 for v in lat) and lat == sorted(lat), lat


# --------------------------------------------------------------------------- report shape
def test_all_modes_on_a_new_file_report_every_field_and_remove_the_file(cli, tmp_path):
    dev = tmp_path / "bench.img"
    out = bench_json(cli, dev, "--size", "8MiB", "--record-size", "4KiB")
    assert out["device"] == str(dev) and out["size_bytes"] == 8 << 20
    assert out["created"] is True and out["removed"] is True
    assert not dev.exists(), "a file bench created is removed after the run"
    modes = out["modes"]
    assert set(modes) == {"iops", "bandwidth", "wal"}
    check_mode(modes["iops"], MODE_FIELDS)
    assert modes["iops"]["block_size_bytes"] == 4096
    check_mode(modes["bandwidth"], MODE_FIELDS)
    sizes = [m["block_size_bytes"] for m in modes["bandwidth"]["by_block_size"]]
    assert sizes == [256 << 10, 1 << 20]
    assert modes["bandwidth"]["block_size_bytes"] == 256 << 10  # the top level is the WAL's block limit
    for m in modes["bandwidth"]["by_block_size"]:
        check_mode(m, MODE_FIELDS)
    wal = modes["wal"]
    check_mode(wal, WAL_FIELDS)
    assert wal["records_per_s"] > 0 and wal["record_size_bytes"] == 4096
    assert wal["payload_bytes"] == wal["records"] * 4096
    assert wal["blocks_written"] == wal["writes"]
    # mib_per_s of the WAL mode is payload; what reached the device is at least that much
    assert wal["device_mib_per_s"] >= wal["mib_per_s"]


@pytest.mark.parametrize("mode,key", [("iops", "iops"), ("bandwidth", "bandwidth"), ("wal", "wal")])
def test_one_mode_reports_only_that_mode(cli, tmp_path, mode, key):
    out = bench_json(cli, tmp_path / "one.img", "--size", "4MiB", "--mode", mode, "--block-size", "64KiB",
                     "--record-size", "1KiB")
    assert list(out["modes"]) == [key]
    check_mode(out["modes"][key], WAL_FIELDS if mode == "wal" else MODE_FIELDS)
    if mode != "wal":
        assert out["modes"][key]["block_size_bytes"] == 64 << 10


def test_threads_engine(cli, tmp_path):
    out = bench_json(cli, tmp_path / "t.img", "--size", "4MiB", "--mode", "iops", "--engine", "threads",
                     "--iodepth", "2")
    assert out["modes"]["iops"]["engine"] == "threads" and out["modes"]["iops"]["iodepth"] == 2


def test_offered_rate_paces_the_appender(cli, tmp_path):
    out = bench_json(cli, tmp_path / "p.img", "--size", "4MiB", "--mode", "wal", "--record-size", "512",
                     "--offered-rate", "200")
    wal = out["modes"]["wal"]
    assert wal["offered_records_per_s"] == 200 and wal["budget_iops"] is None
    # appends follow an absolute schedule: never more than rate x elapsed (+ the first one)
    assert 0 < wal["records"] <= 200 * wal["seconds"] + 1


def test_rate_is_the_writers_iops_budget(cli, tmp_path):
    out = bench_json(cli, tmp_path / "b.img", "--size", "8MiB", "--mode", "wal", "--record-size", "1KiB",
                     "--rate", "100", "--bandwidth", "50")
    wal = out["modes"]["wal"]
    assert wal["budget_iops"] == 100 and wal["budget_mib_per_s"] == 50
    # blocks (the WAL mode's IOPS) never beat the budget: rate x elapsed + 50 ms of burst + the first
    assert 0 < wal["blocks_written"] <= 100 * wal["seconds"] + 5 + 1
    # records batch while the budget holds the writer: many records per block
    assert wal["records"] > 4 * wal["blocks_written"]
    stages = wal["stages_us"]
    assert stages["blocks"] == wal["blocks_written"]
    assert abs(sum(stages[s]["mean"] for s in ("queued", "write", "flush")) - stages["total"]["mean"]) <= 0.2
    assert stages["budget"]["mean"] > 0


def test_human_output_is_a_table_on_stdout(cli, tmp_path):
    res = cli("bench", tmp_path / "h.img", "--size", "4MiB", "--duration", DUR, "--record-size", "1KiB")
    assert res.exit_code == 0, res
    for word in ("iops", "bandwidth", "wal", "MiB/s", "p99", "records/s"):
        assert word in res.stdout, res
    assert "walctl: error" not in res.stderr
    assert "\r" not in res.stderr, "no progress line when stderr is not a terminal"


def test_kept_file_then_rerun_on_the_existing_file(cli, tmp_path):
    dev = tmp_path / "k.img"
    out = bench_json(cli, dev, "--size", "4MiB", "--mode", "wal", "--record-size", "1KiB", "--keep")
    assert out["created"] is True and out["removed"] is False and dev.stat().st_size == 4 << 20
    # the wal mode trims its own records: an empty WAL is left, which bench may overwrite
    rec = cli("recover", dev, "--json")
    assert rec.exit_code == 0, rec
    summary = rec.json_lines()[-1]
    assert summary["type"] == "summary" and summary["records"] == 0
    again = bench_json(cli, dev, "--mode", "iops")
    assert again["created"] is False and again["size_bytes"] == 4 << 20 and dev.exists()


# --------------------------------------------------------------------------- safety
def test_refuses_a_wal_with_live_records_and_leaves_it_intact(cli, new_wal):
    dev = new_wal("1MiB")
    assert cli("append", dev, "keep-me").exit_code == 0
    before = open(dev, "rb").read()
    res = cli("bench", dev, "--duration", DUR, "--mode", "iops")
    assert res.exit_code == 5, res
    line = res.error_line()
    assert "live records" in line and dev in line and "--force" in line
    assert open(dev, "rb").read() == before, "nothing may be written before the refusal"
    rec = cli("recover", dev, "--payload", "text")
    assert rec.exit_code == 0 and "keep-me" in rec.stdout


def test_refusal_with_json_carries_the_error(cli, new_wal):
    dev = new_wal("1MiB")
    assert cli("append", dev, "x").exit_code == 0
    res = cli("bench", dev, "--duration", DUR, "--json")
    assert res.exit_code == 5, res
    assert res.json_lines()[-1]["error"]["code"] == 5


def test_force_overwrites_a_wal_with_live_records(cli, new_wal):
    dev = new_wal("4MiB")
    assert cli("append", dev, "old").exit_code == 0
    out = bench_json(cli, dev, "--mode", "iops", "--force")
    assert out["modes"]["iops"]["writes"] > 0


def test_an_empty_wal_may_be_overwritten(cli, new_wal):
    dev = new_wal("4MiB")
    out = bench_json(cli, dev, "--mode", "iops")
    assert out["modes"]["iops"]["writes"] > 0


def test_a_fully_trimmed_wal_may_be_overwritten(cli, new_wal, append_json):
    dev = new_wal("4MiB")
    offsets = append_json(dev, "a", "b")
    assert cli("trim", dev, offsets[-1]).exit_code == 0
    assert bench_json(cli, dev, "--mode", "iops")["modes"]["iops"]["writes"] > 0


def test_refuses_a_filesystem_signature_unless_forced(cli, tmp_path):
    dev = tmp_path / "xfs.img"
    with open(dev, "wb") as f:
        f.write(b"XFSB")
        f.truncate(4 << 20)
    res = cli("bench", dev, "--duration", DUR, "--mode", "iops")
    assert res.exit_code == 5, res
    assert "XFS" in res.error_line()
    out = bench_json(cli, dev, "--mode", "iops", "--force")
    assert out["modes"]["iops"]["writes"] > 0


def test_refuses_while_another_writer_holds_the_device(cli, new_wal, held_writer):
    dev = new_wal("1MiB")
    writer = held_writer(dev)
    res = cli("bench", dev, "--duration", DUR, "--force")
    assert res.exit_code == 5, res
    assert "writer" in res.error_line()
    writer.finish()


@pytest.mark.parametrize("args,needle", [
    (["--mode", "iops"], "--size is required"),
    (["--size", "4MiB", "--mode", "iops", "--rate", "10"], "--rate"),
    (["--size", "4MiB", "--block-size", "1000"], "multiple of 4096"),
    (["--size", "512KiB", "--mode", "bandwidth"], "larger than the region"),
    (["--size", "4MiB", "--record-size", "lots"], "is not a size"),
])
def test_usage_errors_exit_2(cli, tmp_path, args, needle):
    dev = tmp_path / "u.img"
    res = cli("bench", dev, "--duration", DUR, *args)
    assert res.exit_code == 2, res
    assert needle in res.error_line()


def test_size_larger_than_an_existing_file_is_a_usage_error(cli, tmp_path):
    dev = tmp_path / "small.img"
    dev.write_bytes(bytes(1 << 20))
    res = cli("bench", dev, "--size", "2MiB", "--duration", DUR, "--mode", "iops")
    assert res.exit_code == 2, res


def test_subprocess_run_exit_code_and_one_error_line(run, new_wal):
    dev = new_wal("1MiB")
    assert run("append", dev, "live").exit_code == 0
    res = run("bench", dev, "--duration", DUR)
    assert res.exit_code == 5, res
    res.error_line()


@pytest.mark.loop
def test_bench_on_a_loop_device(cli, loop_device):
    dev = loop_device(16 << 20)
    out = bench_json(cli, dev, "--record-size", "4KiB", "--block-size", "64KiB")
    assert out["created"] is False and out["direct"] is True
    assert set(out["modes"]) == {"iops", "bandwidth", "wal"}
    check_mode(out["modes"]["wal"], WAL_FIELDS)
    assert cli("recover", dev, "--json").exit_code == 0


# --------------------------------------------------------------------------- the shared write queue
def test_aio_queue_writes_what_it_was_given_and_reports_errors(tmp_path):
    import threading

    from tests.aiohelpers import submit_when_free
    from walctl.device import aligned_buffer, open_device
    from walctl.device.blockio import AioWriteQueue, open_write_queue

    path = tmp_path / "q.img"
    path.write_bytes(bytes(1 << 20))
    dev = open_device(str(path), writable=True)
    try:
        for reaper in (True, False):
            queue = open_write_queue(dev, 4, reaper=reaper)
            if not isinstance(queue, AioWriteQueue):
                queue.close()
                pytest.skip("native AIO is not available here")
            done = threading.Semaphore(0)
            errors = []

            def callback(error, flush_ns=0, errors=errors, done=done):
                errors.append(error)
                done.release()

            bufs = []
            for i in range(8):
                buf = aligned_buffer(8192)
                buf[:] = bytes([i + (16 if reaper else 0)]) * 8192
                bufs.append(buf)
            for i, buf in enumerate(bufs):
                submit_when_free(queue, i * 8192, buf, callback, done, reaper=reaper,
                                 length=4096 if i % 2 else None)
            queue.close()
            assert errors == [None] * 8
            data = path.read_bytes()
            for i in range(8):
                want = bytes([i + (16 if reaper else 0)]) * (4096 if i % 2 else 8192)
                assert data[i * 8192:i * 8192 + len(want)] == want
        with pytest.raises(ValueError):
            queue = open_write_queue(dev, 1)
            try:
                queue.submit((1 << 20) - 4096, aligned_buffer(8192), lambda e: None)  # past the end
            finally:
                queue.close()
    finally:
        dev.close()


@pytest.mark.parametrize("engine", ["io_uring", "aio", "threads"])
def test_append_and_recover_with_each_engine(run, new_wal, engine):
    dev = new_wal("1MiB")
    res = run("append", dev, "--input", "-", input=b"".join(b"r%d\n" % i for i in range(300)),
              env={"WALCTL_IO_ENGINE": engine})
    assert res.exit_code == 0, res
    assert len(res.stdout.split()) == 300
    rec = run("recover", dev, "--json")
    assert rec.exit_code == 0, rec
    records = [json.loads(line) for line in rec.stdout.splitlines() if '"record"' in line]
    assert len(records) == 300
    assert os.path.getsize(dev) == 1 << 20


def test_aio_iops_loop_holds_signals_per_window_not_per_reap(tmp_path, monkeypatch):
    """The iops loop reaps on the calling thread: SIGINT/SIGTERM are held once per raw.HOLD_S of
    reaps (issue 31: two sigprocmask calls per reap were a fifth of a 4 KiB write's CPU time)."""
    from walctl.bench import raw
    from walctl.device import open_device, signals
    from walctl.device.blockio import open_write_queue

    calls = []
    real = signals._sigmask
    monkeypatch.setattr(signals, "_sigmask", lambda how, mask: calls.append(how) or real(how, mask))
    path = tmp_path / "iops.img"
    path.write_bytes(bytes(4 << 20))
    dev = open_device(str(path), writable=True)
    try:
        queue = open_write_queue(dev, 4, "aio", reaper=False)
        if queue.engine != "aio":
            pytest.skip("native AIO is unavailable here")
        try:
            result = raw.run_raw(queue, "iops", block_size=4096, region_start=0, region_bytes=4 << 20, iodepth=4,
                                 duration_s=0.3)
        finally:
            queue.close()
    finally:
        dev.close()
    windows = 0.3 / getattr(raw, "HOLD_S", 0.1) + 2
    assert result.writes > 8 * windows  # many reaps a window (two mask changes each before)
    assert len(calls) <= 2 * windows + 4, (len(calls), result.writes)
