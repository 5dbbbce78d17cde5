"""Issue 16: no silent wrong turns, one consistent CLI.

Each item's contract: the exit code, exactly one stderr line ``walctl: error: ... (hint)``, and
nothing created or written. The environment-variable test walks every option of every command
by introspecting the app, so an option added later is covered without touching this file.
"""

from __future__ import annotations

import enum
import functools
import json
import os
import re
import time

import pytest
import typer

from tests.cli.conftest import assert_one_error_line


def error_with_hint(res, code: int) -> str:
    assert res.exit_code == code, res
    line = assert_one_error_line(res.stderr)
    assert re.search(r"\([^()]*(\([^()]*\)[^()]*)*\)$", line), f"no (hint) at the end: {line}"
    return line


def tree(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def wal(new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "one", "two", stream=1)
    return dev


# -- 1. store URL typos; readers never create; no manifest = not found ----------------------------

@pytest.mark.parametrize("url", ["s3:/my-bucket/wal", "s3:my-bucket", "S3//my-bucket", "s3//bucket/x",
                                 "file:/tmp/store", "gs://bucket/wal", "http://host/bucket"])
def test_store_url_typo_is_a_usage_error_and_nothing_moves(cli, tmp_path, monkeypatch, wal, url):
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    wal_bytes = open(wal, "rb").read()
    res = cli("upload", wal, "--store", url)
    line = error_with_hint(res, 2)
    assert url in line
    assert tree(tmp_path) == before, "a mistyped store URL created something"
    assert open(wal, "rb").read() == wal_bytes, "the WAL was written (trimmed) after a mistyped store URL"


STORE_COMMANDS = {
    "read": lambda wal, url: ["read", "--store", url, "--stream", "1"],
    "append": lambda wal, url: ["append", wal, "--stream", "1", "--store", url, "three"],
    "ls": lambda wal, url: ["ls", "--store", url],
    "gc": lambda wal, url: ["gc", "--store", url, "--dry-run"],
    "check": lambda wal, url: ["check", "--store", url],
    "inspect-object": lambda wal, url: ["inspect-object", "1", "--store", url],
    "upload --dry-run": lambda wal, url: ["upload", wal, "--store", url, "--dry-run"],
}


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
@pytest.mark.parametrize("url", ["s3:/my-bucket/wal", "gs://bucket/wal", "file://relative/dir", ""])
def test_every_command_refuses_a_mistyped_store_url(cli, tmp_path, monkeypatch, wal, command, url):
    """`read` took "s3:/b" for a missing directory (exit 4) and "" for the current directory;
    `append` ignored --store entirely while the stream was still in the WAL (exit 0, record
    written): a typo is a usage error (exit 2) before anything is read or written."""
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    wal_bytes = open(wal, "rb").read()
    res = cli(*STORE_COMMANDS[command](wal, url), "--json")
    error_with_hint(res, 2)
    assert json.loads(res.stdout.strip().splitlines()[-1])["error"]["code"] == 2
    assert tree(tmp_path) == before, "a mistyped store URL created something"
    assert open(wal, "rb").read() == wal_bytes, "the WAL was written after a mistyped store URL"


def test_a_directory_with_a_colon_is_still_reachable(cli, tmp_path, monkeypatch, wal):
    monkeypatch.chdir(tmp_path)
    res = cli("upload", wal, "--store", "./s3:odd", "--json")
    assert res.exit_code == 0, res
    assert (tmp_path / "s3:odd").is_dir()


@pytest.mark.parametrize("args", [["ls"], ["objects"], ["gc"], ["gc", "--dry-run"], ["check"]])
def test_readers_never_create_a_missing_store(cli, tmp_path, args):
    store = tmp_path / "nonexistent-store"
    res = cli(*args, "--store", store)
    line = error_with_hint(res, 4)
    assert str(store) in line
    assert not store.exists()


def test_upload_dry_run_creates_no_store(cli, tmp_path, wal):
    store = tmp_path / "store"
    res = cli("upload", wal, "--store", store, "--dry-run", "--json")
    assert res.exit_code == 0, res
    assert json.loads(res.stdout)["records"] == 2
    assert "does not exist yet" in res.stderr
    assert not store.exists()


@pytest.mark.parametrize("args", [["ls"], ["gc"], ["check"]])
def test_a_store_without_manifest_is_not_found(cli, tmp_path, args):
    store = tmp_path / "empty"
    store.mkdir()
    (store / "stray.txt").write_text("not ours")
    res = cli(*args, "--store", store, "--json")
    line = error_with_hint(res, 4)
    assert "no manifest" in line
    assert json.loads(res.stdout)["error"]["code"] == 4
    assert tree(store) == ["stray.txt"]  # gc deleted nothing of a directory that is not a store


def test_first_upload_creates_the_store(cli, tmp_path, wal):
    store = tmp_path / "store"
    assert cli("upload", wal, "--store", store).exit_code == 0
    assert cli("ls", "--store", store).exit_code == 0


# -- 2. init refuses /dev and memory filesystems ---------------------------------------------------

def test_init_never_creates_a_file_under_dev(cli):
    path = "/dev/walctl-test-no-such-disk"
    res = cli("init", path, "--capacity", "1MiB")
    line = error_with_hint(res, 4)
    assert "/dev" in line and "RAM" in line
    assert not os.path.lexists(path)


def test_init_refuses_tmpfs_without_force(tmp_path):
    from walctl.device.safety import check_safe_to_create
    from walctl.errors import RefusedError

    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ntmpfs {tmp_path} tmpfs rw 0 0\n")
    with pytest.raises(RefusedError) as refused:
        check_safe_to_create(str(tmp_path / "wal.img"), force=False, mounts_path=str(mounts))
    assert "tmpfs" in refused.value.line() and "--force" in refused.value.line()
    warnings = check_safe_to_create(str(tmp_path / "wal.img"), force=True, mounts_path=str(mounts))
    assert warnings and "tmpfs" in warnings[0]
    mounts.write_text(f"tmpfs {tmp_path} tmpfs rw 0 0\n/dev/vdb {tmp_path}/disk ext4 rw 0 0\n")
    assert check_safe_to_create(str(tmp_path / "disk" / "wal.img"), force=False, mounts_path=str(mounts)) == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (a tmpfs)")
def test_init_on_dev_shm_is_refused_then_forced(cli):
    path = f"/dev/shm/walctl-test-{os.getpid()}.img"
    try:
        res = cli("init", path, "--capacity", "64KiB")
        line = error_with_hint(res, 5)
        assert "tmpfs" in line and not os.path.lexists(path)
        forced = cli("init", path, "--capacity", "64KiB", "--force")
        assert forced.exit_code == 0 and "warning" in forced.stderr
    finally:
        if os.path.lexists(path):
            os.unlink(path)


# -- 5. '-' is standard input ---------------------------------------------------------------------

def test_append_dash_reads_stdin(cli, new_wal):
    dev = new_wal("1MiB")
    res = cli("append", dev, "-", "--stream", "3", input=b"alpha\nbeta\n")
    assert res.exit_code == 0, res
    got = cli("recover", dev, "--payload", "text", "--json").json_lines()
    assert [r["payload"] for r in got if r["type"] == "record"] == ["alpha", "beta"]


def test_append_dash_among_data_is_refused(cli, new_wal):
    dev = new_wal("1MiB")
    res = cli("append", dev, "x", "-", input=b"y\n")
    error_with_hint(res, 2)
    assert cli("recover", dev, "--json").json_lines()[-1]["records"] == 0


# -- 8. errors with the hint; options validated while parsing -------------------------------------

def test_device_comes_first(cli, new_wal, tmp_path, monkeypatch):
    dev = new_wal("1MiB")
    monkeypatch.chdir(tmp_path)
    res = cli("append", "hello", dev)
    line = error_with_hint(res, 2)
    assert "DEVICE comes first" in line and f"walctl append {dev} hello" in line
    assert not (tmp_path / "hello").exists()


def test_bare_walctl_prints_usage_and_one_error_line(run):
    res = run()
    assert res.exit_code == 2
    assert res.stdout.startswith("Usage: walctl")
    line = error_with_hint(res, 2)
    assert "no command" in line


def test_missing_device_has_a_hint(cli, tmp_path):
    line = error_with_hint(cli("status", tmp_path / "missing.img"), 4)
    assert "missing.img" in line


def test_a_directory_gets_the_same_message_from_init_and_append(cli, tmp_path):
    first = error_with_hint(cli("init", tmp_path, "--capacity", "1MiB", "--force"), 2)
    second = error_with_hint(cli("append", tmp_path, "x"), 2)
    assert first == second


@pytest.mark.parametrize("args,option", [
    (["upload", "{wal}", "--store", "{tmp}/s", "--block-size", "0"], "--block-size"),
    (["upload", "{wal}", "--store", "{tmp}/s", "--block-size", "0", "--dry-run"], "--block-size"),
    (["upload", "{wal}", "--store", "{tmp}/s", "--block-size", "100GiB"], "--block-size"),
    (["upload", "{wal}", "--store", "{tmp}/s", "--split-size", "lots"], "--split-size"),
    (["gc", "--store", "{tmp}/s", "--grace", "soon"], "--grace"),
    (["bench", "{tmp}/b.img", "--size", "1MiB", "--duration", "3x"], "--duration"),
    (["bench", "{tmp}/b.img", "--size", "1MiB", "--block-size", "1000"], "--block-size"),
    (["init", "{tmp}/new.img", "--capacity", "12XB"], "--capacity"),
    (["compact", "--store", "{tmp}/s", "--master", "bogus", "--dry-run"], "--master"),
])
def test_bad_option_values_are_refused_before_anything_happens(cli, tmp_path, wal, args, option):
    args = [a.format(wal=wal, tmp=tmp_path) for a in args]
    before = tree(tmp_path)
    wal_bytes = open(wal, "rb").read()
    res = cli(*args, "--json")
    line = error_with_hint(res, 2)
    assert f"invalid value for {option}" in line and "--help" in line
    assert json.loads(res.stdout)["error"]["code"] == 2  # --json still gets the error object
    assert tree(tmp_path) == before
    assert open(wal, "rb").read() == wal_bytes


def test_bad_value_from_an_environment_variable_is_refused_too(cli, tmp_path, wal):
    res = cli("upload", wal, "--store", tmp_path / "s", env={"WALCTL_BLOCK_SIZE": "0"})
    assert "--block-size" in error_with_hint(res, 2)


def test_empty_range_is_a_usage_error(cli, wal):
    res = cli("recover", wal, "--from", "100", "--to", "50", "--json")
    line = error_with_hint(res, 2)
    assert "--from 100" in line
    assert res.json_lines()[-1]["type"] == "summary"


def test_interrupted_has_a_hint():
    import signal

    from walctl.cli import Interrupted, interrupted_error

    line, error, code = interrupted_error(Interrupted(signal.SIGTERM))
    assert code == 143 and error["signal"] == "SIGTERM"
    assert line.startswith("walctl: error: interrupted by SIGTERM (") and line.endswith(")")


# -- 6. one vocabulary -----------------------------------------------------------------------------

def test_durations_take_units_everywhere(cli, tmp_path, wal):
    assert cli("upload", wal, "--store", tmp_path / "s").exit_code == 0
    assert cli("gc", "--store", tmp_path / "s", "--grace", "90s", "--dry-run").exit_code == 0
    res = cli("bench", tmp_path / "b.img", "--size", "1MiB", "--duration", "200ms", "--mode", "iops", "--json")
    assert res.exit_code == 0, res
    assert json.loads(res.stdout)["duration_s"] == pytest.approx(0.2)


def test_bench_iops_is_the_name_append_uses(cli):
    text = cli("bench", "--help").stdout
    assert "--iops" in text and "--rate" in text


@pytest.mark.parametrize("args", [
    ["--json", "status", "{wal}"], ["status", "{wal}", "--json"], ["-j", "status", "{wal}"],
    ["status", "{wal}", "--debug", "-j"], ["--debug", "status", "{wal}", "--json"],
])
def test_json_and_debug_on_both_sides(cli, wal, args):
    res = cli(*[a.format(wal=wal) for a in args])
    assert res.exit_code == 0, res
    assert json.loads(res.stdout)["device"] == wal


def test_version_short_and_long(cli):
    for flag in ("-V", "--version"):
        res = cli(flag)
        assert res.exit_code == 0 and res.stdout.startswith("walctl ")


def test_short_options(cli, new_wal, append_json):
    dev = new_wal("1MiB")
    append_json(dev, "a", "b", stream=1)
    append_json(dev, "c", stream=2)
    res = cli("recover", dev, "-j", "-n", "1", "-s", "1")
    assert res.exit_code == 0, res
    records = [r for r in res.json_lines() if r["type"] == "record"]
    assert len(records) == 1 and records[0]["stream_id"] == 1


def test_wal_offsets_and_stream_offsets_are_named_apart(cli, new_wal):
    dev = new_wal("1MiB")
    res = cli("append", dev, "x", "y", "--json", "--stream", "4")
    records = [r for r in res.json_lines() if r["type"] == "record"]
    for r in records:  # the old fields stay; the new ones say which offset is which
        assert r["wal_offset"] == r["offset"] and r["stream_offset"] == r["base_offset"]
    got = [r for r in cli("recover", dev, "--json").json_lines() if r["type"] == "record"]
    assert [(r["wal_offset"], r["stream_offset"]) for r in got] == [(r["offset"], r["base_offset"]) for r in records]


# -- every option has WALCTL_<OPTION>, shown in --help and honoured --------------------------------

@functools.cache
def _app():
    """walctl's click group, built once (0.7 s a test to build it again, for the same group: typer's
    build is deterministic and these tests only make contexts from it, which leaves it as it was)."""
    from walctl.cli import app

    return typer.main.get_command(app)


def _every_option():
    group = _app()
    yield "", group, [p for p in group.params if p.param_type_name == "option"]
    for name, command in sorted(group.commands.items()):
        yield name, command, [p for p in command.params if p.param_type_name == "option"]


SKIP = {"help", "install_completion", "show_completion", "version"}  # act at once, take no value


def _candidates(param) -> list[str]:
    if getattr(param, "is_flag", False):
        return ["1"]
    annotation = param.type_descriptor.annotation if hasattr(param, "type_descriptor") else None
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [list(annotation)[-1].value]
    return ["3", "90s", "1MiB", "local[2]", "7=1000", "1/2", "some-value"]


CASES = [(name, p) for name, command, params in _every_option() for p in params if p.name not in SKIP]


@pytest.mark.parametrize("command_name,param", CASES, ids=[f"{n or 'walctl'}:{p.opts[0]}" for n, p in CASES])
def test_every_option_reads_its_environment_variable(command_name, param, monkeypatch):
    """WALCTL_<OPTION> exists, --help shows it, and click takes the value from it."""
    from walctl.cli import env_name

    for key in [k for k in os.environ if k.startswith("WALCTL_") or k == "AWS_ENDPOINT_URL"]:
        monkeypatch.delenv(key)
    expected = env_name(param)
    envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
    assert envvars and envvars[0] == expected, f"{param.opts}: env vars {envvars}"
    assert param.show_envvar
    group = _app()
    command = group.commands[command_name] if command_name else group
    with command.make_context(command_name or "walctl", ["--help"], resilient_parsing=True) as ctx:
        assert expected in command.get_help(ctx)
    # required arguments and options come from their variables too
    monkeypatch.setenv("WALCTL_DEVICE", "/nonexistent/dev")
    monkeypatch.setenv("WALCTL_STORE", "/nonexistent/store")
    if param.name != "stream":
        monkeypatch.setenv("WALCTL_STREAM", "1")  # `read` requires --stream
    # positional arguments: DEVICE from its variable does not fill a later one, so give all
    positional = [p for p in command.params if p.param_type_name == "argument"]
    args = ["1"] * len(positional) if any(p.required and p.envvar is None for p in positional) else []
    for value in _candidates(param):
        monkeypatch.setenv(expected, value)
        try:
            ctx = command.make_context(command_name or "walctl", list(args) + (["status"] if not command_name else []))
        except Exception:
            continue
        assert ctx.get_parameter_source(param.name).name == "ENVIRONMENT", (param.opts, value)
        return
    pytest.fail(f"no value of {expected} was accepted for {param.opts}")


def test_documented_examples_of_ignored_variables_now_work(cli, new_wal, append_json, tmp_path):
    dev = new_wal("1MiB")
    append_json(dev, "a", "b", "c")
    res = cli("recover", dev, "--json", env={"WALCTL_LIMIT": "1", "WALCTL_PAYLOAD": "text"})
    records = [r for r in res.json_lines() if r["type"] == "record"]
    assert [r["payload"] for r in records] == ["a"]
    prom = tmp_path / "u.prom"
    res = cli("upload", dev, "--store", tmp_path / "s", env={"WALCTL_METRICS_FILE": str(prom)})
    assert res.exit_code == 0, res
    assert prom.exists()
    res = cli("gc", "--store", tmp_path / "s", env={"WALCTL_GRACE": "whenever"})
    assert "--grace" in error_with_hint(res, 2)


# -- 7. human output -------------------------------------------------------------------------------

def test_human_output_is_not_wrapped_when_piped(run, new_wal, append_json, tmp_path):
    long_dir = tmp_path / ("a-rather-long-directory-name-" * 3)
    long_dir.mkdir()
    dev = new_wal("1MiB", str(long_dir / "wal.img"))
    append_json(dev, "x", "y")
    res = run("status", dev, "--scan")  # stdout is a pipe; --scan counts the records
    assert res.exit_code == 0, res
    lines = res.stdout.splitlines()
    assert any(dev in line for line in lines), "the title must hold the whole path on one line"
    slot = [line for line in lines if "header slot 1" in line]
    assert len(slot) == 1 and "graceful" in slot[0], "a row was wrapped onto two lines"
    assert max(len(line) for line in lines) > 80
    text = res.stdout
    for raw in ("None", "False", "True", "_bytes", "_ns", " ns,"):
        assert raw not in text, f"{raw!r} in human output"
    assert re.search(r"written 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text
    assert "2 records in 1 stream," in text and "1,048,576 B (1.0 MiB)" in text


def test_ls_shows_commit_times_and_no_python_values(cli, tmp_path, wal):
    store = tmp_path / "store"
    assert cli("upload", wal, "--store", store).exit_code == 0
    text = cli("ls", "--store", store).stdout
    assert re.search(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text
    assert "[]" not in text and "None" not in text and "prepared object ids: -" in text


# -- 9. progress on stderr when it is a terminal, never with --json -----------------------------------

def _with_tty_stderr(args) -> tuple[int, str, str]:
    import pty
    import subprocess
    import sys

    from tests.cli.conftest import REPO_ROOT, _env

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "walctl", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, env=_env(None), cwd=str(REPO_ROOT))
    os.close(slave)
    out = proc.stdout.read()
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    proc.wait(timeout=60)
    return proc.returncode, out.decode(), err.decode(errors="replace")


@pytest.mark.parametrize("command,label", [("image", "imaging"), ("recover", "scanning the WAL"),
                                           ("upload", "uploading")])
def test_progress_bar_on_a_terminal_only(tmp_path, wal, command, label, run):
    args = {"image": [wal, tmp_path / "copy.img", "--force"], "recover": [wal],
            "upload": [wal, "--store", tmp_path / "store", "--no-trim"]}[command]
    code, out, err = _with_tty_stderr([command, *args])
    assert code == 0, err
    assert label in err, "no progress bar on a terminal"
    if command == "recover":
        assert "WAL OFFSET" in out and "WAL OFFSET" not in err  # data stays on stdout
    code, out, err = _with_tty_stderr([command, *args, "--json"])
    assert code == 0 and label not in err, "a progress bar with --json"
    piped = run(command, *args)
    assert piped.exit_code == 0 and label not in piped.stderr, "a progress bar on a pipe"


@pytest.mark.parametrize("command,label", [("status", "scanning the WAL"), ("read", "reading the stream"),
                                           ("inspect-object", "verifying the object")])
def test_progress_bar_of_long_reads_on_a_terminal_only(tmp_path, wal, command, label, run, cli):
    """status --scan, read and inspect-object --deep: a bar on a terminal's stderr; none with --json
    or on a pipe (read's data goes to stdout, never through the bar)."""
    store = tmp_path / "store"  # (made in-process: only the reads below are about the process)
    assert cli("upload", wal, "--store", store, "--no-trim").exit_code == 0
    object_id = json.loads(cli("ls", "--store", store, "--json").stdout)["objects"][0]["id"]
    args = {"status": [wal, "--scan"], "read": ["--store", store, "--stream", "1"],
            "inspect-object": [object_id, "--store", store, "--deep"]}[command]
    code, out, err = _with_tty_stderr([command, *args])
    assert code == 0, err
    assert label in err, "no progress bar on a terminal"
    if command == "read":
        assert "OFFSET" in out and "OFFSET" not in err  # data stays on stdout
    code, out, err = _with_tty_stderr([command, *args, "--json"])
    assert code == 0 and label not in err, "a progress bar with --json"
    piped = run(command, *args)
    assert piped.exit_code == 0 and label not in piped.stderr, "a progress bar on a pipe"


def test_no_progress_bar_when_nothing_long_runs(wal, run):
    """status answered from the checkpoint (no --scan) reads two header slots: no bar at all."""
    code, out, err = _with_tty_stderr(["status", wal])
    assert code == 0, err
    assert "scanning the WAL" not in err


def test_no_such_bucket_has_a_hint(cli, s3_server):
    res = cli("ls", "--store", "s3://no-such-bucket-walctl/wal", "--endpoint-url", s3_server)
    line = error_with_hint(res, 4)
    assert "no such bucket" in line and "check the bucket name" in line


def test_an_empty_bucket_is_not_a_store(cli, s3_server, s3_bucket):
    res = cli("ls", "--store", f"s3://{s3_bucket}/wal", "--endpoint-url", s3_server)
    assert "no manifest" in error_with_hint(res, 4)


def test_inspect_object_never_creates_a_store(cli, tmp_path):
    store = tmp_path / "typo-store"
    res = cli("inspect-object", "1", "--store", store)
    assert "typo-store" in error_with_hint(res, 4)
    assert not store.exists()


def test_upload_names_its_wal_offsets(cli, tmp_path, wal):
    out = json.loads(cli("upload", wal, "--store", tmp_path / "s", "--json").stdout)
    assert out["last_wal_offset"] == out["last_offset"] is not None
    assert out["trimmed_to_wal_offset"] == out["trimmed_to"] == out["last_offset"]


def test_force_from_the_environment_says_so_every_time(cli, tmp_path):
    # A WALCTL_FORCE=1 forgotten in a shell or unit file would apply to every destructive run:
    # it works (every option has its variable) but never silently.
    path = tmp_path / "w.img"
    assert cli("init", path, "--capacity", "1MiB").exit_code == 0
    refused = cli("init", path, "--capacity", "1MiB")
    assert refused.exit_code != 0  # a WAL is there: init needs --force
    forced = cli("init", path, "--capacity", "1MiB", env={"WALCTL_FORCE": "1"})
    assert forced.exit_code == 0, forced
    said = [line for line in forced.stderr.splitlines() if "WALCTL_FORCE" in line]
    assert said == ["walctl: warning: --force is set by the environment (WALCTL_FORCE); "
                    "unset it unless every run should use it"]
    typed = cli("init", path, "--capacity", "1MiB", "--force")
    assert typed.exit_code == 0 and "environment" not in typed.stderr
    unset = cli("init", tmp_path / "v.img", "--capacity", "1MiB", env={"WALCTL_FORCE": "0"})
    assert unset.exit_code == 0 and "environment" not in unset.stderr


@pytest.mark.parametrize("special", ["fifo", "char-device"])
def test_inspect_object_of_a_fifo_or_device_answers_instead_of_hanging(run, tmp_path, special):
    """`walctl inspect-object ./a-fifo` blocked forever in open() waiting for a writer (a reader
    that never returns); a FIFO or a character device is not an object: exit 4 at once."""
    if special == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    else:
        target = "/dev/null"
    res = run("inspect-object", target, "--json", timeout=30)
    line = error_with_hint(res, 4)
    assert "not a regular file" in line
    assert json.loads(res.stdout)["error"]["code"] == 4


@pytest.mark.parametrize("device", ["missing", "directory", "zeros", "truncated"])
def test_upload_of_a_wrong_device_creates_no_store(cli, tmp_path, monkeypatch, wal, device):
    """`walctl upload typo.img --store ./store` failed (exit 4) but left an empty ./store behind:
    the store was created before DEVICE was opened. Nothing is created when DEVICE holds no WAL."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / device
    if device == "directory":
        target.mkdir()
    elif device == "zeros":
        target.write_bytes(bytes(1 << 20))
    elif device == "truncated":
        target.write_bytes(open(wal, "rb").read()[: 1 << 19])  # headers say 1 MiB, the file has half
    store = tmp_path / "store"
    res = cli("upload", target, "--store", store, "--json")
    assert res.exit_code in (2, 3, 4), res
    error_with_hint(res, res.exit_code)
    assert json.loads(res.stdout)["error"]["code"] == res.exit_code
    assert not store.exists(), "a failed upload created the store"


@pytest.mark.parametrize("args", [["append", "{wal}", "three"], ["trim", "{wal}", "0"], ["status", "{wal}"]])
def test_a_bad_io_engine_variable_is_refused_before_the_wal_is_opened(run, wal, args):
    """WALCTL_IO_ENGINE=turbo was checked only when the writer built its write queue, after it had
    opened the WAL and rewritten both header slots (exit 2, WAL changed); readers ignored it.
    A bad value is exit 2 before anything is opened, like every other variable."""
    before = open(wal, "rb").read()
    res = run(*(a.format(wal=wal) for a in args), "--json", env={"WALCTL_IO_ENGINE": "turbo"})
    line = error_with_hint(res, 2)
    assert "WALCTL_IO_ENGINE" in line and "turbo" in line
    assert json.loads(res.stdout.strip().splitlines()[-1])["error"]["code"] == 2
    assert open(wal, "rb").read() == before, "the WAL was written before the bad variable was refused"


@pytest.mark.parametrize("which", ["behind the trim point", "past the end", "inside a record"])
def test_a_refused_trim_writes_nothing(cli, wal, append_json, which):
    """`walctl trim wal.img 5` behind the trim point (or past the log's end) was refused (exit 2)
    only after the writer had opened the WAL and rewritten both header slots (the older slot's
    state lost, timestamps changed). Offsets the header slots alone refute are refused first."""
    offsets = append_json(wal, "three", "four", stream=1)
    assert cli("trim", wal, offsets[0]).exit_code == 0
    before = open(wal, "rb").read()
    offset = {"behind the trim point": 0, "past the end": offsets[-1] + (1 << 16),
              "inside a record": offsets[-1] + 5}[which]
    res = cli("trim", wal, offset, "--json")
    line = error_with_hint(res, 2)
    assert {"behind the trim point": "not after the current trim point", "past the end": "the log ends at",
            "inside a record": "no live record starts at offset"}[which] in line
    assert json.loads(res.stdout)["error"]["code"] == 2
    assert open(wal, "rb").read() == before, "a refused trim wrote the WAL"


HINTLESS_BEFORE = {  # error lines that lacked the documented "(hint)" at their end
    "FIFO as DEVICE": (["status", "{fifo}"], 2),
    "character device as DEVICE": (["recover", "/dev/null"], 2),
    "file as --store": (["ls", "--store", "{wal}"], 2),
    "missing object id": (["inspect-object", "99", "--store", "{store}"], 4),
    "missing object file": (["inspect-object", "{tmp}/no-such-object"], 4),
    "missing --input file": (["append", "{wal}", "--input", "{tmp}/no-such-input"], 2),
    "WAL smaller than its headers": (["status", "{small}"], 4),
    "init without --capacity": (["init", "{tmp}/new.img"], 2),
    "selftest --dir not a directory": (["selftest", "--dir", "{wal}"], 2),
    "image into a missing directory": (["image", "{wal}", "{tmp}/no-such-dir/copy.img"], 6),
    "store under a file": (["upload", "{wal}", "--store", "{wal}/store"], 6),
    "recover of a WAL smaller than its headers": (["recover", "{small}"], 4),
    "append to an AutoMQ WAL": (["append", "{automq}", "x"], 5),
    "trim of an AutoMQ WAL": (["trim", "{automq}", "8192"], 5),
    "upload of an AutoMQ WAL": (["upload", "{automq}", "--store", "{store}", "--dry-run"], 5),
    "inspect-object of a file that is no object": (["inspect-object", "{small}"], 4),
    "inspect-object of a live object with a damaged footer": (["inspect-object", "1", "--store", "{store}"], 3),
}


def automq_wal(path) -> None:
    """A 4 MiB AutoMQ WAL (V1 header in both slots), built from AutoMQ's layout with struct/zlib."""
    import struct
    import zlib

    body = struct.pack(">IQqqqIiq", 0x01234567, 4 << 20, -1, 1_700_000_000_000, 1 << 20, 0, 1, 7)
    slot = (body + struct.pack(">I", zlib.crc32(body) & 0x7FFFFFFF)).ljust(4096, b"\0")
    path.write_bytes(slot + slot + bytes((4 << 20) - 8192))


@pytest.mark.parametrize("case", sorted(HINTLESS_BEFORE))
def test_every_error_line_ends_with_a_hint(cli, tmp_path, wal, case):
    """CLI.md: every non-zero exit prints `walctl: error: <what>, <where> (<hint>)`; these said
    what and where but gave no hint."""
    fifo, small, store = tmp_path / "fifo", tmp_path / "small.img", tmp_path / "store"
    os.mkfifo(fifo)
    small.write_bytes(bytes(6000))
    assert cli("upload", wal, "--store", store, "--no-trim").exit_code == 0
    if "damaged footer" in case:
        (obj,) = [p for p in store.rglob("*") if p.is_file() and "manifest" not in p.parts]
        obj.write_bytes(obj.read_bytes()[:100])  # the footer and index gone
    args, code = HINTLESS_BEFORE[case]
    automq = tmp_path / "automq.img"
    automq_wal(automq)
    names = {"fifo": fifo, "small": small, "store": store, "wal": wal, "tmp": tmp_path, "automq": automq}
    res = cli(*(a.format(**names) for a in args), "--json")
    error_with_hint(res, code)
    assert json.loads(res.stdout.strip().splitlines()[-1])["error"]["code"] == code


def test_append_warns_when_its_store_has_no_manifest(cli, tmp_path, wal):
    """`append --stream 9 --store DIR` with DIR not a walctl store (no manifest: a wrong directory)
    started stream 9 at offset 0 without a word, while a missing DIR was warned about: a wrong
    --store silently restarts a stream that may live in the real store. It is warned about too."""
    not_a_store = tmp_path / "elsewhere"
    not_a_store.mkdir()
    (not_a_store / "notes.txt").write_text("not ours")
    res = cli("append", wal, "--stream", "9", "--store", not_a_store, "--json", "x")
    assert res.exit_code == 0, res
    assert "no manifest" in res.stderr and "stream 9 starts at offset 0" in res.stderr
    lines = res.json_lines()
    assert lines[0]["base_offset"] == 0 and lines[-1]["type"] == "summary"
    assert tree(not_a_store) == ["notes.txt"]


def test_read_idle_timeout_takes_a_duration_with_its_unit(cli, tmp_path, wal):
    """CLI.md: durations take a unit (500ms, 90s, 30m). `read --follow --idle-timeout 500ms` was
    refused (exit 2, 'unable to parse string as a number'): --idle-timeout took bare seconds only."""
    store = tmp_path / "store"
    assert cli("upload", wal, "--store", store).exit_code == 0
    res = cli("read", "--store", store, "--stream", "1", "--follow", "--idle-timeout", "300ms", "--json")
    assert res.exit_code == 0, res
    assert res.json_lines()[-1]["records"] == 2
    res = cli("read", "--store", store, "--stream", "1", "--follow", "--idle-timeout", "5 parsecs")
    line = error_with_hint(res, 2)
    assert "--idle-timeout" in line and "500ms" in line


@pytest.mark.parametrize("command, option, value, variable", [("recover", "--limit", "abc", "WALCTL_LIMIT"),
                                                              ("init", "--capacity", "64MB?", "WALCTL_CAPACITY")])
def test_a_bad_value_names_where_it_came_from(cli, wal, command, option, value, variable):
    """`recover --limit abc` said "Invalid value for '--limit' / '-n' (env var: 'WALCTL_LIMIT')"
    although no variable was set, while a bad WALCTL_CAPACITY said "invalid value for --capacity"
    to someone who never typed that option. The line names the variable exactly when the value
    came from it."""
    target = wal if command == "recover" else wal + ".new"
    typed = cli(command, target, option, value)
    error_with_hint(typed, 2)
    assert option in typed.stderr and variable not in typed.stderr
    from_env = cli(command, target, env={variable: value})
    error_with_hint(from_env, 2)
    assert option in from_env.stderr and variable in from_env.stderr


def test_init_refuses_a_prewritten_file_larger_than_the_free_space(cli, tmp_path, monkeypatch):
    """`walctl init big.img --capacity 1TiB` on a file system with less free space zero-filled
    until ENOSPC (minutes, the whole disk full for every other process), then failed (exit 6) and
    removed the file. The free space is checked before the file is created."""
    real = os.statvfs(tmp_path)

    class Tight:  # the file system as it would be with 1 MiB free
        f_frsize, f_bavail = real.f_frsize, (1 << 20) // real.f_frsize

    monkeypatch.setattr(os, "statvfs", lambda path: Tight)
    path = tmp_path / "big.img"
    res = cli("init", path, "--capacity", "16MiB", "--json")
    line = error_with_hint(res, 6)
    assert "free space" in line and "--no-prewrite" in line
    assert json.loads(res.stdout)["error"]["code"] == 6
    assert not path.exists()
    assert cli("init", path, "--capacity", "16MiB", "--no-prewrite").exit_code == 0  # sparse: allowed


@pytest.mark.parametrize("args", [["--dry-run"], ["--level", "so"], ["--level", "sso", "--dry-run"],
                                  ["--force-split", "--level", "sso"]])
def test_compact_of_a_directory_that_is_not_a_store_is_not_found(cli, tmp_path, args):
    """`walctl compact --store ./wrong-dir` (a directory with no manifest) said "nothing to
    compact" and exited 0, so a cron job pointed at the wrong directory looked healthy forever.
    As for ls and gc (CLI.md), a store with no manifest is not found: exit 4, nothing touched."""
    store = tmp_path / "not-a-store"
    store.mkdir()
    (store / "notes.txt").write_text("not ours")
    res = cli("compact", "--store", store, *args, "--json")
    line = error_with_hint(res, 4)
    assert "no manifest" in line
    assert json.loads(res.stdout)["error"]["code"] == 4
    assert tree(store) == ["notes.txt"]


@pytest.mark.parametrize("args", [["--json"], ["-j", "--debug"]])
def test_walctl_with_only_json_says_no_command_given(run, args):
    """`walctl --json` said "No such option: --json (Possible options: --version)" although --json
    works on either side of a command name: the missing command is the error. Its JSON object is
    the whole stdout (no usage text there under --json)."""
    res = run(*args)
    line = error_with_hint(res, 2)
    assert "no command given" in line
    assert json.loads(res.stdout)["error"]["code"] == 2


def test_upload_dry_run_refuses_a_store_the_real_run_cannot_create(cli, tmp_path, wal):
    """`upload --dry-run --store wal.img/store` (a path under a file) said "the store does not
    exist yet; a real upload creates it" and exited 0; the real upload then failed (exit 6,
    'File exists'). Both now refuse it the same way, naming the file in the way."""
    store = f"{wal}/store"
    before = open(wal, "rb").read()
    dry = cli("upload", wal, "--store", store, "--dry-run", "--json")
    real = cli("upload", wal, "--store", store, "--json")
    for res in (dry, real):
        line = error_with_hint(res, 6)
        assert f"{wal} is not a directory" in line
        assert json.loads(res.stdout)["error"]["code"] == 6
    assert open(wal, "rb").read() == before


def test_gc_removes_the_temp_files_a_killed_upload_left(run, cli, tmp_path, new_wal):
    """An upload SIGKILLed (or a power loss) mid-way leaves its spool/put temp files (`.tmp-*`,
    which no listing shows) in a local store; a rerun finishes the upload but they stayed for ever:
    gc, which aborts a dead S3 multipart upload, never removed them. gc now deletes those untouched
    for longer than a prepared id lives (a running upload keeps writing its own); --dry-run
    lists them and deletes nothing."""
    wal, store = new_wal("8MiB"), tmp_path / "store"
    # 1.4 MiB: stream 1 gets its own Stream Object, spooled as it is read
    assert cli("append", wal, "-s", "1", "--input", "-", input=(b"x" * 999 + b"\n") * 1500).exit_code == 0
    assert cli("append", wal, "-s", "2", "a", "b").exit_code == 0
    res = run("upload", wal, "--store", store, "--split-size", "1MiB",
              env={"WALCTL_FAILPOINT": "upload-after-prepare"})
    assert res.exit_code == -9, res  # SIGKILL at the failpoint
    assert cli("upload", wal, "--store", store, "--split-size", "1MiB").exit_code == 0  # the rerun completes
    stale = [p for p in store.rglob(".tmp-*")]
    assert stale, "the killed upload left no temp file: nothing to test"
    old = time.time() - 2 * 3600
    for p in stale:
        os.utime(p, (old, old))
    fresh = store / ".tmp-running-upload"
    fresh.write_bytes(b"being written")
    dry = cli("gc", "--store", store, "--dry-run", "--json")
    assert dry.exit_code == 0, dry
    listed = json.loads(dry.stdout)["deleted_temp_files"]
    assert sorted(listed) == sorted(str(p.relative_to(store)) for p in stale)
    assert all(p.exists() for p in stale)
    done = cli("gc", "--store", store, "--json")
    assert done.exit_code == 0, done
    assert sorted(json.loads(done.stdout)["deleted_temp_files"]) == sorted(listed)
    assert not any(p.exists() for p in stale) and fresh.exists()
    assert cli("read", "--store", store, "--stream", "1", "--json").exit_code == 0


@pytest.mark.parametrize("args", [["bench", "{dev}", "--size", "8MiB", "--duration", "100ms", "--mode", "iops"],
                                  ["bench", "{dev}", "--duration", "100ms"], ["init", "{dev}"]])
def test_a_missing_device_under_dev_is_not_found_for_bench_and_init(cli, args):
    """`walctl bench /dev/nvme9n9 --size 8MiB` (a disk name typo) created a regular file under /dev
    (devtmpfs: RAM), benchmarked it and exited 0, a RAM figure reported as the disk's (--keep left
    the file in /dev); `init /dev/typo` without --capacity asked for --capacity instead of saying
    the device is not there. As CLI.md says for init: exit 4, nothing created under /dev."""
    dev = "/dev/walctl-test-no-such-disk"
    res = cli(*(a.format(dev=dev) for a in args), "--json")  # (bench and init as processes: test_examples)
    line = error_with_hint(res, 4)
    assert "no such device" in line and "/dev" in line
    assert json.loads(res.stdout.strip().splitlines()[-1])["error"]["code"] == 4
    assert not os.path.lexists(dev)
