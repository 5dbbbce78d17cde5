"""The man pages and --help cannot drift from the CLI: every command and option has help,
a man entry, and the committed pages equal what the generator makes of the code."""

from __future__ import annotations

import enum
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer

import manpage  # tools/manpage.py (pyproject's pytest pythonpath)
from walctl import errors

REPO_ROOT = Path(__file__).resolve().parents[2]
MAN_DIR = REPO_ROOT / "man" / "man1"
ROOT = manpage.describe()
COMMANDS = [cmd for cmd in ROOT.walk() if cmd is not ROOT]
# The man(7) macros and requests the generator may emit.
REQUESTS = {"TH", "SH", "SY", "YS", "nh", "ad", "PP", "TP", "IP", "RS", "RE", "nf", "fi", "br", "BR"}
GROFF_MISSING = "groff is not installed (apt-get install groff-base)"


def _ids(cmds):
    return [cmd.invocation for cmd in cmds]


def _groff_warnings(path: Path) -> str:
    proc = subprocess.run(["groff", "-ww", "-man", "-Tutf8", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


# -- (a) help text -------------------------------------------------------------------------
def test_there_are_commands():
    assert {"init", "append", "trim", "recover"} <= {cmd.name for cmd in COMMANDS}


@pytest.mark.parametrize("cmd", [ROOT, *COMMANDS], ids=_ids([ROOT, *COMMANDS]))
def test_command_and_every_param_has_help(cmd):
    assert cmd.help.strip(), f"{cmd.invocation} has no help text (give the command a docstring)"
    assert cmd.summary.strip()
    for param in (*cmd.arguments, *cmd.options):
        label = "/".join(param.all_opts) or param.display_name
        assert param.help.strip(), f"{cmd.invocation} {label} has no help text"


# -- (b) a page per command naming every option --------------------------------------------
@pytest.mark.parametrize("cmd", COMMANDS, ids=_ids(COMMANDS))
def test_command_has_a_page_with_every_option(cmd):
    page = MAN_DIR / cmd.filename
    assert page.exists(), f"{page} missing: run scripts/gen-man"
    text = page.read_text(encoding="utf-8")
    for param in cmd.options:
        for opt in param.all_opts:
            assert manpage.esc(opt) in text, f"{opt} of {cmd.invocation} not in {page}: run scripts/gen-man"
    for param in cmd.arguments:
        assert manpage.esc(param.display_name) in text, f"{param.display_name} not in {page}"
    assert f"\\fB{manpage.esc(cmd.page)}\\fR({manpage.SECTION})" in (MAN_DIR / ROOT.filename).read_text(
        encoding="utf-8"), f"{cmd.invocation} not listed in walctl.1: run scripts/gen-man"


def test_every_page_has_the_sections():
    for cmd in [ROOT, *COMMANDS]:
        text = (MAN_DIR / cmd.filename).read_text(encoding="utf-8")
        sections = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", '"EXIT STATUS"', "ENVIRONMENT", '"SEE ALSO"']
        sections += ["COMMANDS"] if cmd is ROOT else ["EXAMPLES"]
        sections += ["ARGUMENTS"] if cmd.arguments else []
        for section in sections:
            assert f"\n.SH {section}\n" in text, f"{cmd.filename} lacks {section}"
        for code, _ in manpage.EXIT_STATUS:
            assert f".TP\n\\fB{code}\\fR\n" in text


# -- (c) no drift --------------------------------------------------------------------------
def test_committed_pages_equal_generated_output():
    problems = manpage.check_pages(MAN_DIR)
    assert not problems, "man pages out of date, run scripts/gen-man:\n" + "\n".join(problems)


def test_generation_is_deterministic():
    assert manpage.render_pages() == manpage.render_pages()


# -- (d) rendering -------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("groff") is None, reason=GROFF_MISSING)
@pytest.mark.parametrize("name", sorted(p.name for p in MAN_DIR.glob("walctl*.1")))
def test_page_renders_without_warnings(name):
    assert _groff_warnings(MAN_DIR / name) == ""


def test_man_dir_has_pages():
    assert (MAN_DIR / "walctl.1").exists()


def test_variables_no_option_reads_are_on_the_pages_of_their_commands():
    """WALCTL_TRIM_WAIT (walctl.device.opening) has no option: walctl.1 and the pages of the commands
    that read it name it."""
    from walctl.device.opening import TRIM_WAIT_ENV

    pages = manpage.render_pages()
    having = sorted(name for name, text in pages.items() if f"\\fB{TRIM_WAIT_ENV}\\fR" in text)
    assert having == ["walctl-append.1", "walctl-bench.1", "walctl-trim.1", "walctl.1"]


# -- examples and exit codes stay true -------------------------------------------------------
def test_examples_name_existing_commands():
    known = {" ".join(cmd.path) for cmd in COMMANDS}
    assert set(manpage.EXAMPLES) <= known, "EXAMPLES has a command the CLI lacks"
    assert set(manpage.SEE_ALSO) <= known, "SEE_ALSO has a command the CLI lacks"


@pytest.mark.parametrize("key,line", [(k, line) for k, examples in sorted(manpage.EXAMPLES.items())
                                      for _, line in examples])
def test_example_parses(key, line):
    """Each example is a valid command line: options exist, values pass their type and range."""
    tokens = shlex.split(line.rsplit("|", 1)[-1])
    assert tokens[0] == "walctl"
    path = key.split()
    assert tokens[1:1 + len(path)] == path, f"example for {key} runs {tokens[1:1 + len(path)]}"
    cmd = manpage.root_command()
    for name in path:
        cmd = cmd.commands[name]
    # Parses and converts every value (types, ranges, choices) without running the command.
    with cmd.make_context(f"walctl {key}", tokens[1 + len(path):]):
        pass


def test_exit_status_covers_every_error_class():
    def codes(cls):
        yield cls.exit_code
        for sub in cls.__subclasses__():
            yield from codes(sub)

    documented = {code for code, _ in manpage.EXIT_STATUS}
    assert documented == set(range(9))  # docs/CLI.md
    assert set(codes(errors.WalctlError)) <= documented


# -- escaping and new commands (a demo app, as a command added later would look) ----------------
class Mode(str, enum.Enum):
    fast = "fast"
    safe_ish = "safe-ish"


demo = typer.Typer(name="walctl", rich_markup_mode=None,
                   context_settings={"help_option_names": ["-h", "--help"]})


@demo.callback()
def _demo_root(debug: Annotated[bool, typer.Option("--debug", help="Tracebacks.")] = False) -> None:
    """.Demo root: a leading dot, a 'quote' and a back\\slash."""


@demo.command("do-thing")
def _do_thing(
    device: Annotated[str, typer.Argument(metavar="DEVICE", envvar="WALCTL_DEVICE", help="The device.")],
    extra: Annotated[list[str] | None, typer.Argument(help="More things.")] = None,
    mode: Annotated[Mode, typer.Option("--mode", "-m", help="How: fast or safe-ish.")] = Mode.safe_ish,
    depth: Annotated[int, typer.Option("--queue-depth", envvar="WALCTL_QUEUE_DEPTH", min=1, max=64,
                                       help="'Depth' of the queue; \\n is a backslash-n.")] = 8,
    endpoint: Annotated[str | None, typer.Option("--endpoint-url", help="S3 endpoint.")] = None,
    secret: Annotated[bool, typer.Option("--secret", hidden=True, help="Hidden.")] = False,
) -> None:
    """Do the thing.

    .TH is not a request here; nor is the next line.
    'also text, with an ellipsis \u2026

    \b
    .keep   this
      layout
    """


def test_new_command_is_picked_up_and_escaped(tmp_path):
    pages = manpage.render_pages(demo, version="9.9")
    assert sorted(pages) == ["walctl-do-thing.1", "walctl.1"]
    page = pages["walctl-do-thing.1"]
    assert '.TH WALCTL\\-DO\\-THING 1 "" "walctl 9.9"' in page
    assert "\\fB\\-m\\fR, \\fB\\-\\-mode\\fR \\fBfast\\fR|\\fBsafe\\-ish\\fR" in page
    assert "Default: \\fBsafe\\-ish\\fR." in page
    assert "Range: 1 to 64. Default: \\fB8\\fR." in page
    assert "\\fIDEVICE\\fR" in page and "\\fI[EXTRA...]\\fR" in page
    assert "\\(aqDepth\\(aq of the queue; \\en is a backslash\\-n." in page
    assert "\\-\\-secret" not in page  # hidden
    assert "\\fBAWS_ENDPOINT_URL\\fR" in page  # implied by --endpoint-url
    assert "\\fBWALCTL_QUEUE_DEPTH\\fR" in page
    assert "walctl do\\-thing \\fIDEVICE\\fR" in page  # the generic example
    assert "\\[u2026]" in page
    for line in page.splitlines() + pages["walctl.1"].splitlines():
        # Only the generator's own requests start a line with a control character.
        assert not line.startswith("'"), line
        if line.startswith("."):
            assert line.startswith('.\\"') or line[1:].split(" ", 1)[0] in REQUESTS, line
    assert "\n\\&.TH is not a request here" in page
    assert "\n\\&.keep   this\n  layout\n" in page
    root = pages["walctl.1"]
    assert "\n\\&.Demo root: a leading dot, a \\(aqquote\\(aq and a back\\eslash.\n" in root
    assert "\\fBwalctl\\-do\\-thing\\fR(1)" in root

    if shutil.which("groff") is None:
        pytest.skip(GROFF_MISSING)
    for name, text in pages.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert _groff_warnings(tmp_path / name) == ""
    rendered = subprocess.run(["groff", "-man", "-Tutf8", str(tmp_path / "walctl-do-thing.1")],
                              capture_output=True, text=True, check=True).stdout
    plain = rendered.replace("\b", "")
    assert ".TH is not a request here" in plain
    assert "'Depth' of the queue; \\n is a backslash-n." in " ".join(plain.split())


def test_write_then_check_round_trip(tmp_path):
    pages = manpage.render_pages(demo, version="1.0")
    (tmp_path / "walctl-gone.1").write_text(manpage.GENERATED_MARK + "\n.TH OLD\n", encoding="utf-8")
    (tmp_path / "walctl-handwritten.1").write_text(".TH MINE 1\n", encoding="utf-8")
    assert sorted(manpage.check_pages(tmp_path, pages)) == [
        f"{tmp_path}/walctl-do-thing.1: missing", f"{tmp_path}/walctl-gone.1: no such command any more",
        f"{tmp_path}/walctl.1: missing"]
    done = manpage.write_pages(tmp_path, pages)
    assert f"removed {tmp_path}/walctl-gone.1" in done
    assert manpage.check_pages(tmp_path, pages) == []
    assert (tmp_path / "walctl-handwritten.1").exists()  # not ours: never deleted
    assert manpage.write_pages(tmp_path, pages) == []  # nothing changed, nothing rewritten
    (tmp_path / "walctl.1").write_text("edited\n", encoding="utf-8")
    assert manpage.check_pages(tmp_path, pages) == [f"{tmp_path}/walctl.1: differs from the CLI"]


def _run_python(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env=env, check=False)


def test_check_entry_point_reports_drift(tmp_path):
    proc = _run_python(str(REPO_ROOT / "tools" / "manpage.py"), "--out", str(tmp_path), "--check")
    assert proc.returncode == 1
    assert f"{tmp_path}/walctl.1: missing" in proc.stderr
    assert "scripts/gen-man" in proc.stderr
    proc = _run_python(str(REPO_ROOT / "tools" / "manpage.py"), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in MAN_DIR.glob("walctl*.1"))
    proc = _run_python(str(REPO_ROOT / "tools" / "manpage.py"), "--out", str(tmp_path), "--check")
    assert proc.returncode == 0, proc.stderr


def test_gen_man_script_checks_the_repo():
    proc = subprocess.run([str(REPO_ROOT / "scripts" / "gen-man"), "--check"], capture_output=True,
                          text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stderr


# -- --help stays light ----------------------------------------------------------------------
_HELP_PROBE = """
import json, sys
from walctl.cli import main
sys.argv = ["walctl", *sys.argv[1:], "--help"]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("PROBE " + json.dumps({"code": code, "boto3": "boto3" in sys.modules,
                             "pyspark": "pyspark" in sys.modules}))
"""


@pytest.mark.parametrize("path", [(), *(cmd.path for cmd in COMMANDS)],
                         ids=["walctl", *_ids(COMMANDS)])
def test_help_imports_neither_boto3_nor_pyspark(path):
    proc = _run_python("-c", _HELP_PROBE, *path)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    probe = json.loads(proc.stdout.rsplit("PROBE ", 1)[1])
    assert probe == {"code": 0, "boto3": False, "pyspark": False}, f"walctl {' '.join(path)} --help"
