"""walctl selftest: run the whole pipeline on this machine and check every answer."""

from __future__ import annotations

from typing import Annotated

import typer

from walctl.commands._shared import JsonOpt, StatusLine, command, emit_json, quiet_requested, stdout_console, warn


@command("selftest")
def selftest_cmd(
    loop: Annotated[bool, typer.Option(
        "--loop", help="Use a fresh loop device with direct I/O (losetup --direct-io=on) instead of a "
                       "regular file; needs root. Detached at the end, even on failure.")] = False,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the temporary directory (WAL file or loop backing file, store, metrics file, "
                       "Spark log) and print where it is.")] = False,
    no_compact: Annotated[bool, typer.Option(
        "--no-compact", help="Skip the compaction step (it starts Spark local[1] and takes ~10-15 s).")] = False,
    directory: Annotated[str | None, typer.Option(
        "--dir", metavar="DIR",
        help="Make the temporary directory inside DIR (its file system is the one tested; default: "
             "$TMPDIR or /tmp).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Smoke-test walctl on this machine: init, status, append, recover, trim, upload, ls, inspect-object
    --deep, compact and gc on a temporary WAL and local store, checking every answer.

    The WAL is a temporary file, or with --loop a fresh loop device with direct I/O; the store a
    temporary directory. Prints a pass/fail table (or one JSON object) and cleans up, even on
    failure. Exit 0 when every check passed; 3 when a check found a wrong answer, wrong data or an
    unexpected exit code; 6 on an I/O failure (a command exited 6, or the file or loop device could not
    be set up or cleaned up); 5 with --loop when not root.
    """
    import os
    import sys

    from walctl.commands._shared import debug_requested, running_app
    from walctl.errors import CorruptionError, IOFailure, NotFoundError
    from walctl.selftest import FAIL, IO_FAILED, PREREQ_MISSING, selftest

    if directory is not None and not os.path.isdir(directory):
        from walctl.errors import UsageError

        raise UsageError("--dir is not a directory", where=directory,
                         hint="give an existing directory on the file system to test")
    progress = _Progress() if not json_out and sys.stderr.isatty() and not quiet_requested() else None
    try:
        result = selftest(running_app(), loop=loop, keep=keep, compact=not no_compact, base_dir=directory,
                          on_step=progress, debug=debug_requested())
    finally:
        if progress is not None:
            progress.clear()
    for message in result.warnings:
        warn(message)
    out = result.to_json()
    if not json_out:
        _render(result)
    if result.passed:
        if json_out:
            emit_json(out)
        return
    first = result.failed[0]
    cls = {IO_FAILED: IOFailure, PREREQ_MISSING: NotFoundError}.get(first.failure, CorruptionError)
    from walctl.human import plural

    count = sum(1 for c in result.checks if c.status == FAIL)
    exc = cls(f"selftest failed: {plural(count, 'check')} failed; first: {first.name}: {first.detail}",
              where=result.device or result.work_dir,
              hint=("install it, or skip the step with --no-compact" if first.failure == PREREQ_MISSING
                    else "rerun with --keep to look at the files" if not keep else f"files kept in {result.work_dir}"),
              summary=out)
    raise exc


class _Progress(StatusLine):
    """The check running now, on one line of stderr (a terminal) rewritten in place and cleared at the
    end: the table on stdout is the one list of checks (a line per check on stderr showed the list
    twice on a terminal)."""

    def __call__(self, check) -> None:
        self.show(f"selftest: {check.status.upper()} {check.name}")


def _render(result) -> None:
    from rich.table import Table
    from rich.text import Text

    styles = {"pass": "green", "fail": "bold red", "skip": "yellow"}
    what = f"loop device {result.device}" if result.loop else f"file {result.device}"
    console = stdout_console()
    wide = console.width >= 140  # the command column only where it fits (--json always has it)
    table = Table(title=Text(f"walctl selftest: {what}, store {result.store}"), title_justify="left")
    columns = [("check", "left"), ("result", "left"), ("time", "right")]
    columns += [("command", "left")] if wide else []
    for col, justify in columns + [("detail", "left")]:
        table.add_column(col, justify=justify)
    for c in result.checks:
        cells = [Text(c.name), Text(c.status.upper(), style=styles[c.status]), f"{c.seconds:.2f} s"]
        cells += [Text(c.command)] if wide else []
        table.add_row(*cells, Text(c.detail))
    console.print(table)
    passed = sum(1 for c in result.checks if c.status == "pass")
    skipped = sum(1 for c in result.checks if c.status == "skip")
    verdict = "PASSED" if result.passed else "FAILED"
    console.print(Text(f"selftest {verdict}: {passed} passed, {len(result.failed)} failed, {skipped} skipped "
                       f"in {result.seconds:.1f} s" + (f"; files kept in {result.work_dir}"
                                                       if result.keep and result.work_dir else ""),
                       style="green" if result.passed else "bold red"))
