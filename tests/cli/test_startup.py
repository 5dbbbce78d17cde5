"""What a short command imports (its start-up time is mostly imports): ``import walctl.cli``
imports no command module and nothing of boto3, botocore, pyspark or rich; a run imports the
module of its own command only. Checked in fresh interpreters through sys.modules: no timing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from walctl.cli import app as app_module_app  # the whole app (every command)
from walctl.cli.app import COMMAND_MODULE_OF, modules_for

HEAVY = ("boto3", "botocore", "pyspark", "py4j", "rich", "hypothesis")


def _imported_after(code: str, *argv: str) -> set[str]:
    """The top-level packages and walctl modules in sys.modules after ``code`` ran in a fresh Python."""
    probe = (f"import json, sys\nsys.argv = ['walctl', *{list(argv)!r}]\n{code}\n"
             "print('MODULES ' + json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    line = [x for x in proc.stdout.splitlines() if x.startswith("MODULES ")]
    assert line, proc.stderr
    return set(json.loads(line[-1].removeprefix("MODULES ")))


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
])
def test_a_run_imports_its_own_command_module_only(argv, wanted):
    modules = _imported_after(_run_main(), *argv)
    commands = {m for m in modules if m.startswith("walctl.commands.") and not m.startswith("walctl.commands._")}
    assert commands == wanted
    heavy = sorted(m for m in modules if m.split(".")[0] in ("boto3", "botocore", "pyspark", "py4j"))
    assert heavy == [], heavy


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
