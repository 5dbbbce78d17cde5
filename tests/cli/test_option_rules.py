"""Option parsing rules of issue 30: one syntax, units and words for every option, checked on the
app itself; each case here failed before (exit 1, 6, a parser's words, or a wrong value taken)."""

from __future__ import annotations

import typing

import pytest
from typer.main import get_command

from walctl.cli import app
from walctl.cli.conventions import env_name

GROUP = get_command(app)
# Declarations owned by another change (h-append: append.py, recover.py) that still repeat the
# variable the conventions derive; remove an entry when its declaration goes.
REDUNDANT_ELSEWHERE: set = set()


def test_no_option_declares_the_variable_the_conventions_give_it():
    redundant = []
    for name, cmd in GROUP.commands.items():
        hints = typing.get_type_hints(cmd.callback.__wrapped__, include_extras=True)
        for param in cmd.params:
            if param.param_type_name != "option":
                continue
            info = next((m for m in getattr(hints.get(param.name), "__metadata__", ()) if hasattr(m, "envvar")), None)
            declared = getattr(info, "envvar", None)
            if declared == env_name(param) and (name, param.name) not in REDUNDANT_ELSEWHERE:
                redundant.append((name, param.name))
    assert redundant == []


@pytest.mark.parametrize("name", sorted(GROUP.commands))
def test_help_names_each_variable_once(cli, name):
    out = cli(name, "--help").stdout
    assert "Env: WALCTL_" not in out
    for param in GROUP.commands[name].params:
        if param.param_type_name == "option" and param.name != "help":
            assert out.count(f"{env_name(param)}]") + out.count(f"{env_name(param)},") <= 1, (name, param.name)


def test_trim_usage_shows_offset_required(cli):
    assert "walctl trim [OPTIONS] {DEVICE} {OFFSET}" in cli("trim", "--help").stdout


@pytest.mark.parametrize("value, words", [
    ("10", "'10' is below the minimum 16.0 KiB"),
    ("9223372036854775807", "is above the maximum 1024.0 TiB"),
    ("18446744073709551616", "is above the maximum 1024.0 TiB"),
])
def test_init_capacity_bounds_are_usage_errors(cli, tmp_path, value, words):
    res = cli("init", tmp_path / "new.img", "--capacity", value, "--no-prewrite")
    assert res.exit_code == 2 and words in res.error_line(), res
    assert not (tmp_path / "new.img").exists()


@pytest.mark.parametrize("args, words", [
    (("read", "--store", "S", "-s", "1", "--limit", "x"), "'x' is not an integer (an integer from 1 to"),
    (("read", "--store", "S", "-s", "99999999999999999999"), "is above the maximum 9223372036854775807"),
    (("bench", "D", "--iops", "nan"), "'nan' is not a finite number"),
    (("init", "D", "--node-id", "4294967296"), "is above the maximum 2147483647"),
])
def test_number_errors_are_walctls_words(cli, args, words):
    res = cli(*args)
    assert res.exit_code == 2 and words in res.error_line() and "Input should" not in res.stderr, res


def test_bench_size_beyond_the_maximum_is_exit_2(cli, tmp_path):
    res = cli("bench", tmp_path / "b.img", "--size", "100000000000000000000000GiB")
    assert res.exit_code == 2 and "above the maximum" in res.error_line(), res


@pytest.fixture
def small_filesystem(tmp_path):
    """A 16 MiB tmpfs (root only): a bench that zero-filled past its free space fills only it."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs (not root?)")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_bench_refuses_a_size_its_filesystem_lacks_before_writing(cli, small_filesystem):
    res = cli("bench", small_filesystem / "b.img", "--size", "64MiB", "--duration", "100ms", "--mode", "iops")
    assert res.exit_code == 6 and "not enough free space for the bench file" in res.error_line(), res
    assert not (small_filesystem / "b.img").exists()


@pytest.mark.parametrize("value, code, words", [
    ("", 2, "invalid value for --metrics-file: is empty"),
    ("/dev/zero", 2, "is not a regular file"),
])
def test_status_metrics_file_that_is_no_file(cli, new_wal, value, code, words):
    res = cli("status", new_wal(), "--metrics-file", value)
    assert res.exit_code == code and words in res.error_line(), res


def test_a_huge_metrics_file_is_refused_not_read(cli, tmp_path):
    from walctl import metrics

    prom = tmp_path / "big.prom"
    with open(prom, "wb") as f:
        f.truncate(metrics.MAX_METRICS_FILE_BYTES + 1)
    res = cli("gc", "--store", tmp_path / "store", "--metrics-file", prom)
    assert res.exit_code == 2 and "larger than 16 MiB" in res.error_line(), res


def test_read_previous_reads_at_most_the_cap(tmp_path):
    from walctl import metrics

    prom = tmp_path / "grown.prom"
    prom.write_bytes(b"a 1\n" * ((metrics.MAX_METRICS_FILE_BYTES // 4) + 10))
    text = metrics.read_previous(str(prom))
    assert len(text) <= metrics.MAX_METRICS_FILE_BYTES and text.endswith("a 1\n")
    assert metrics.read_previous("/dev/zero") == ""


@pytest.mark.parametrize("option", ["--split-read-rate", "--split-write-rate", "--so-read-rate", "--so-write-rate"])
@pytest.mark.parametrize("value", ["nan", "-1", "50", "fast"])
def test_compact_rates_need_a_unit_and_a_sane_value(cli, tmp_path, option, value):
    res = cli("compact", "--store", tmp_path / "store", option, value)  # without --force-split too
    assert res.exit_code == 2 and f"invalid value for {option}" in res.error_line(), res


def test_compact_read_rate_takes_a_size_per_second(cli, tmp_path):
    from walctl.options import Rate

    assert Rate(bare=1 << 20)("50MiB/s") == Rate(bare=1 << 20)("50MiB") == Rate(bare=1 << 20)("50") == 50 << 20
    assert Rate(zero_unlimited=True)("50MiB/s") == 50 << 20 and Rate(zero_unlimited=True)("0") is None
    res = cli("compact", "--store", tmp_path / "store", "--read-rate", "50MiB")
    assert res.exit_code == 4, res  # parsed; the store does not exist


def test_retention_start_syntax(cli, tmp_path):
    from walctl.options import stream_offset

    assert stream_offset("7:1000") == "7:1000"
    res = cli("compact", "--store", tmp_path / "store", "--retention-start", f"1:{1 << 64}")
    assert res.exit_code == 2 and "above the maximum" in res.error_line(), res
    res = cli("compact", "--store", tmp_path / "store", "--retention-start", "1=5")
    assert res.exit_code == 4 and "STREAM=OFFSET is deprecated" in res.stderr, res
    res = cli("compact", "--store", tmp_path / "store", "--level", "so", "--retention-start", "1:5")
    assert res.exit_code == 2 and "SSO compaction only" in res.error_line(), res


def test_compact_help_says_sigterm_is_143(cli):
    assert "exits 143 (SIGTERM)" in " ".join(cli("compact", "--help").stdout.split())
