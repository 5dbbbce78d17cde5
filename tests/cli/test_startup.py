"""What a short command imports (its start-up time is mostly imports): ``import walctl.cli``
imports no command module and nothing of boto3, botocore, pyspark or rich; a run imports the
module of its own command only, and not pydantic (typer's coercion of plain values is done by
walctl.cli.coercion, which gives typer's answers). Checked in fresh interpreters through
sys.modules: no timing.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys

import pytest

from walctl.cli import app as app_module_app  # the whole app (every command)
from walctl.cli.app import COMMAND_MODULE_OF, modules_for

from tests.cli.conftest import with_bytecode

HEAVY = ("boto3", "botocore", "pyspark", "py4j", "rich", "hypothesis")


def _probe(code: str, marker: str, argv: tuple = ()) -> tuple[object, str]:
    """Run ``code`` in a fresh Python (sys.argv: walctl and ``argv``; json and sys imported), which
    prints ``marker`` and a JSON value last: (that value, what it printed before it)."""
    probe = f"import json, sys\nsys.argv = ['walctl', *{list(argv)!r}]\n{code}\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env=with_bytecode(dict(os.environ)))
    line = [x for x in proc.stdout.splitlines() if x.startswith(marker)]
    assert line, proc.stderr
    return json.loads(line[-1].removeprefix(marker)), proc.stdout.rsplit(marker, 1)[0]


def _imported_after(code: str, *argv: str, with_output: bool = False):
    """The top-level packages and walctl modules in sys.modules after ``code`` ran in a fresh Python
    (``with_output``: and what it printed before them)."""
    modules, out = _probe(f"{code}\nprint('MODULES ' + json.dumps(sorted(sys.modules)))", "MODULES ", argv)
    return (set(modules), out) if with_output else set(modules)


def _run_main() -> str:
    return "from walctl.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"


def test_importing_the_cli_imports_no_command_and_no_heavy_library():
    modules = _imported_after("import walctl.cli")
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == [], heavy
    commands = sorted(m for m in modules if m.startswith("walctl.commands.") and not m.startswith("walctl.commands._"))
    assert commands == [], commands


@pytest.mark.parametrize("argv, wanted", [
    (("--version",), set()),
    (("status", "--help"), {"walctl.commands.status"}),
    (("upload", "--help"), {"walctl.commands.upload"}),
    # read shares recover's --payload encodings (imports walctl.commands.recover), nothing more
    (("--debug", "read", "--help"), {"walctl.commands.read", "walctl.commands.recover"}),
    (("status", "/nonexistent/wal"), {"walctl.commands.status"}),
    (("read", "--store", "/nonexistent/store", "-s", "0", "--limit", "1", "--json"),
     {"walctl.commands.read", "walctl.commands.recover"}),
    # an Enum option's value named on the command line: typer's choice matching, without pydantic
    (("read", "--store", "/nonexistent/store", "-s", "0", "--json", "--payload", "none"),
     {"walctl.commands.read", "walctl.commands.recover"}),
    (("recover", "/nonexistent/wal", "--payload", "hex"), {"walctl.commands.recover"}),
])
def test_a_run_imports_its_own_command_module_only(argv, wanted):
    modules = _imported_after(_run_main(), *argv)
    commands = {m for m in modules if m.startswith("walctl.commands.") and not m.startswith("walctl.commands._")}
    assert commands == wanted
    heavy = sorted(m for m in modules if m.split(".")[0] in ("boto3", "botocore", "pyspark", "py4j", "pydantic"))
    assert heavy == [], heavy
    assert "importlib.metadata" not in modules  # crc32c's __init__ (walctl.format.crc loads its C part)


SAMPLES = (None, "", "0", "7", "-1", "007", "-0", "+3", " 3", "12x", "1.5", "1KiB", "64MiB", "abc", "-", "1_000",
           "999999999999999999", "99999999999999999999", "s3://bucket/prefix", "\u00e9t\u00e9")


def _choice_samples(descriptor) -> tuple:
    """An Enum (or Literal) parameter's choices as typed on a command line: each exactly, upper-cased
    and padded (typer's choice matching answers or refuses them)."""
    choices = descriptor.choices or ()
    texts = [str(c.value) if isinstance(c, enum.Enum) else str(c) for c in choices]
    return (*texts, *(t.upper() for t in texts), *(f" {t}" for t in texts))


def _outcome(call):
    try:
        result = call()
    except Exception as exc:  # noqa: BLE001 - the very error is what is compared
        return "error", type(exc), str(exc)
    return "ok", type(result), result


def _walctls_own_number(param, value) -> bool:
    descriptor = param.type_descriptor
    return (type(value) is str and descriptor.annotation in (int, float)
            and getattr(descriptor.parameter_info, "parser", None) is None)


def test_plain_coercion_gives_typers_answers_on_every_parameter():
    import typer.main
    from typer import _click as click
    from typer._coercion import build_runtime_param

    from walctl.cli.coercion import PlainFirst

    group = typer.main.get_command(app_module_app)
    compared = answered_plainly = 0
    for command in (group, *group.commands.values()):
        ctx = click.Context(command, info_name=command.name)
        for param in command.get_params(ctx):
            if getattr(param, "type_descriptor", None) is None or param.type_descriptor.file_annotation is not None:
                continue  # not typer's; or a file (opened, even for writing: both hand it to typer alike)
            for value in (*SAMPLES, param.default, *_choice_samples(param.type_descriptor)):
                typer_says = _outcome(lambda: build_runtime_param(param.type_descriptor).coerce(value, param=param,
                                                                                               ctx=ctx))
                plain = PlainFirst()
                plain_says = _outcome(lambda: plain.coerce(value, param, ctx))
                if _walctls_own_number(param, value):
                    # an int or float option's text: walctl words the refusal (tests/cli/test_hostile_input.py)
                    # and refuses what typer takes past 64 bits or not finite; what both take is the same
                    assert plain_says[0] == "error" or plain_says == typer_says, (command.name, param.name, value)
                    assert typer_says[0] == "ok" or plain_says[0] == "error", (command.name, param.name, value)
                    compared += 1
                    continue
                assert plain_says == typer_says, (command.name, param.name, value)
                compared += 1
                answered_plainly += plain._typer is None
    assert compared > 1000 and answered_plainly > compared // 3, (compared, answered_plainly)


def test_every_command_name_maps_to_the_module_that_registers_it():
    import typer.main

    group = typer.main.get_command(app_module_app)
    registered = {name: cmd.callback.__module__.rsplit(".", 1)[1] for name, cmd in group.commands.items()}
    # selftest runs the other commands through its app: its run registers every module.
    assert {n: m for n, m in registered.items() if n != "selftest"} == COMMAND_MODULE_OF
    assert "selftest" in registered and modules_for(["selftest"]) is None


@pytest.mark.parametrize("args, wanted", [
    (["read", "x", "--limit", "1"], ("read",)),
    (["--debug", "--json", "objects"], ("ls",)),
    (["inspect-object", "--help"], ("inspect_object",)),
    (["--version"], ()),
    (["-V", "--help"], ()),  # eager, in order: the version wins
    (["--help", "--version"], None),  # the help lists every command
    ([], None),
    (["--debug"], None),
    (["bogus", "read"], None),  # an unknown command: click's error (and its suggestions) sees them all
    (["--", "read"], None),
    (["selftest"], None),
])
def test_modules_for(args, wanted):
    assert modules_for(args) == wanted


@pytest.mark.parametrize("argv, absent", [
    (("read", "--store", "/nonexistent/store", "-s", "0", "--json"),
     ("walctl.store.s3", "walctl.device.aio", "walctl.device.locks", "socket", "logging")),
    (("status", "/nonexistent/wal"), ("walctl.device.aio", "walctl.device.writequeue", "logging")),
    (("recover", "/nonexistent/wal"), ("walctl.device.aio", "walctl.device.writequeue", "logging")),
    # upload: its metrics file's writer only with --metrics-file, the gap spec parser only with --accept-gap
    (("upload", "/nonexistent/wal", "--store", "/nonexistent/store", "--json"), ("walctl.metrics", "walctl.bounds")),
])
def test_readers_do_not_load_what_only_writers_or_s3_use(argv, absent):
    modules = _imported_after(_run_main(), *argv)
    assert sorted(set(absent) & modules) == []


def _gc_probe(*argv: str) -> dict:
    """Run main() with argv in a fresh Python; report the collector's state in the command's body and after."""
    code = ("import gc\n"
            "from walctl.cli import main, startup\n"
            "seen = []\n"
            "starts = startup.command_starts\n"
            "def spy():\n"
            "    starts()\n"
            "    seen.append([gc.isenabled(), gc.get_freeze_count()])\n"
            "startup.command_starts = spy\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('GC ' + json.dumps({'body': seen, 'after': gc.isenabled()}))")
    return _probe(code, "GC ", argv)[0]


def test_the_collector_is_paused_only_while_starting():
    # A command's body collects as usual, the start-up's objects frozen (never traversed again).
    got = _gc_probe("status", "/nonexistent/wal")
    assert len(got["body"]) == 1 and got["body"][0][0] is True and got["body"][0][1] > 10_000
    assert got["after"] is True  # main() leaves the collector as it found it
    # No command body (help, a usage error): collection resumes when main() ends.
    for argv in (("--help",), ("status", "--bogus")):
        got = _gc_probe(*argv)
        assert got == {"body": [], "after": True}


def test_recover_of_a_walctl_log_loads_neither_automq_scan_nor_rich(tmp_path):
    """recover --stats --json of walctl's own log: AutoMQ's scan policy and rich (human output)
    are not imported."""
    wal = str(tmp_path / "wal.img")
    subprocess.run([sys.executable, "-m", "walctl", "init", wal, "--capacity", "1MiB"], check=True,
                   capture_output=True, timeout=120)
    subprocess.run([sys.executable, "-m", "walctl", "append", wal, "-s", "1", "a", "b"], check=True,
                   capture_output=True, timeout=120)
    modules = _imported_after(_run_main(), "recover", wal, "--stats", "--json")
    assert "walctl.wal.native_scan" in modules  # (it did scan)
    assert sorted(m for m in modules if m == "walctl.wal.automq_scan" or m.split(".")[0] == "rich") == []


@pytest.mark.parametrize("argv, prefetched", [
    (("recover", "/nonexistent/wal", "--stats", "--json"), [False]),
    (("--debug", "status", "/nonexistent/wal"), [False]),
    (("read", "--store", "/nonexistent/store", "-s", "0", "--json"), []),
    (("recover", "--help"), [False]),
])
def test_readers_start_reading_proc_locks_before_the_imports(argv, prefetched):
    """recover and status (readers that ask who holds the device) start /proc/locks' read
    (walctl.device.locks.prefetch) before typer is imported; other commands do not."""
    code = ("import walctl.device.locks as locks\n"
            "seen = []\n"
            "real = locks.prefetch\n"
            "def spy(*a, **k):\n"
            "    seen.append('typer' in sys.modules)\n"
            "    real(*a, **k)\n"
            "locks.prefetch = spy\n"
            f"{_run_main()}\n"
            "print('SEEN ' + json.dumps(seen))")
    assert _probe(code, "SEEN ", argv)[0] == prefetched


@pytest.fixture(scope="module")
def small_wal_and_store(tmp_path_factory):
    """A cleanly closed walctl WAL with a few records of streams 0 and 1, and a store holding them."""
    root = tmp_path_factory.mktemp("clean")
    wal, store = str(root / "wal.img"), str(root / "store")

    def walctl(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "walctl", *args], check=True, capture_output=True, timeout=120,
                   env=with_bytecode(dict(os.environ)))

    walctl("init", wal, "--capacity", "4MiB")
    walctl("append", wal, "-s", "0", "a", "b", "c")
    walctl("append", wal, "-s", "1", "d", "e")
    walctl("upload", wal, "--store", store, "--no-trim")
    return wal, store


# What a clean run of a short command does not use, so does not load: the device's creation and
# safety checks (init), seal descriptors (only in sealed padding records), socket (upload names its
# host through os.uname), AutoMQ's composite objects (only when the store holds one), base64 (only
# --payload base64), pydantic (typer's coercion of an Enum option's value), and for status of a
# cleanly closed WAL the whole scan (its checkpoint answers).
_NEVER_ON_A_CLEAN_RUN = ("pydantic", "socket", "base64", "walctl.device.create", "walctl.device.safety",
                         "walctl.format.seal", "walctl.format.composite", "walctl.store.inspect", "walctl.store.s3")
_SCAN = ("walctl.wal.reader", "walctl.wal.native_scan", "walctl.wal.ringread", "walctl.wal.decoder", "walctl.wal.gaps",
         "walctl.wal.findings", "walctl.format.bulk", "walctl.format.record", "walctl.format.batch")


@pytest.mark.parametrize("argv, loaded, absent", [
    # recover: walctl.options (and its size parsing) only to check a --from/--to range
    (("recover", "{wal}", "--stats", "--json"), ("walctl.wal.native_scan",),
     _NEVER_ON_A_CLEAN_RUN + ("walctl.options", "walctl.sizes")),
    # status of a cleanly closed WAL: nor the verdict (no findings to judge) or the ring's layout
    (("status", "{wal}", "--json"), ("walctl.status",),
     _NEVER_ON_A_CLEAN_RUN + _SCAN + ("walctl.options", "walctl.wal.verdict", "walctl.wal.layout")),
    (("upload", "{copy}", "--store", "{fresh}", "--json", "--no-trim"), ("walctl.pipeline.upload.run",),
     _NEVER_ON_A_CLEAN_RUN + ("walctl.device.locks", "walctl.wal.verdict", "walctl.pipeline.upload.background")),
    (("read", "--store", "{store}", "-s", "0", "--json", "--payload", "none"), ("walctl.pipeline.read",),
     tuple(m for m in _NEVER_ON_A_CLEAN_RUN if m != "walctl.format.composite") + ("walctl.options",)),
])
def test_a_clean_run_loads_nothing_only_rare_paths_use(small_wal_and_store, tmp_path, argv, loaded, absent):
    """A clean run's modules (checked in a fresh interpreter): what only damage, findings rendering,
    crash holes, writers' init, S3, composite objects or other encodings use is imported where it is used."""
    import shutil

    wal, store = small_wal_and_store
    copy = str(tmp_path / "copy.img")
    shutil.copyfile(wal, copy)
    names = {"wal": wal, "store": store, "copy": copy, "fresh": str(tmp_path / "fresh")}
    modules, out = _imported_after(_run_main(), *(a.format(**names) for a in argv), with_output=True)
    assert set(loaded) <= modules and '"error"' not in out and ('"records":' in out or '"objects_made":1' in out), out
    assert sorted(m for m in modules if m in absent or m.split(".")[0] in absent) == []


@pytest.mark.parametrize("argv", [("--help",), ("append", "--help"), ("upload", "--help")])
def test_help_loads_no_engine(argv):
    """The help needs the commands' signatures only: append's --framing type (walctl.wal.framing)
    without the bulk decoders its batches() use, and nothing of the formats, devices, stores or pipelines."""
    modules = _imported_after(_run_main(), *argv)
    engine = sorted(m for m in modules if m.startswith(("walctl.format", "walctl.device", "walctl.store",
                                                        "walctl.pipeline")))
    assert engine == [], engine
