"""The one place errors become exit codes (docs/CLI.md "Exit codes").

``boundary(fn, stream)`` wraps every command function at registration: a WalctlError becomes
one stderr line and its exit code (with --json, the error object added to the error's
``summary``); SIGTERM/SIGINT the same, exit 143/130, after the command's own cleanup ran; any
other exception is a bug (exit 1, a traceback only with --debug). ``WalctlGroup`` does the same
for click's usage errors (exit 2) and bare ``walctl``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import traceback
from typing import Any, Callable

import typer
from typer.core import TyperGroup

try:  # typer >= 0.29 carries its own copy of click and raises that copy's exceptions
    from typer import _click as click
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover - older typer uses the click package
    import click
    from click.exceptions import UsageError as ClickUsageError

from walctl.cli import startup
from walctl.cli.coercion import plain_coercion
from walctl.cli.conventions import (COMMAND_ANYWHERE, ROOT_ANYWHERE, apply_conventions, json_requested,
                                    normalise_args)
from walctl.cli.render import report_error
from walctl.commands._shared import debug_requested, quiet_requested
from walctl.errors import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_OK, EXIT_SIGINT, EXIT_USAGE, WalctlError


class WalctlGroup(TyperGroup):
    """The app's click group: CLI conventions (and typer's coercion without pydantic for plain
    values) on every command, and click's usage errors in the one-line ``walctl: error: ...`` form,
    exit 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for command in (self, *self.commands.values()):
            apply_conventions(command)
            plain_coercion(command.params)  # no pydantic import for the plain values of a short command

    def get_params(self, ctx):
        params = super().get_params(ctx)
        plain_coercion(params)  # and for the options typer and click add later (--help, completion)
        return params

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            plain_coercion(command.get_params(ctx))  # the command's --help, made (and kept) on first use
        return name, command, rest

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if args is None:
            args = sys.argv[1:]
        args = normalise_args(list(args), self)
        try:
            given = [a for a in args if a not in COMMAND_ANYWHERE + ROOT_ANYWHERE]  # (--json alone: no command)
            if not given and not os.environ.get(complete_var or "_WALCTL_COMPLETE"):
                raise _NoCommand()
            rv = super().main(args=args, prog_name=prog_name or "walctl", complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except _NoCommand:
            # Bare `walctl`: the usage on stdout for the person, one error line for the rule.
            line = ("walctl: error: no command given (see 'walctl --help'; "
                    "'walctl COMMAND --help' for one command)")
            if json_requested(args):  # stdout is one JSON document: the error object, no usage text
                report_error(line, {"code": EXIT_USAGE, "message": line.removeprefix("walctl: error: ")},
                             True, False, None)
            else:
                with self.make_context("walctl", ["--help"], resilient_parsing=True) as ctx:
                    click.echo(self.get_help(ctx))
                click.echo(line, err=True)
            code = EXIT_USAGE
        except ClickUsageError as exc:
            line = usage_line(exc)
            report_error(line, {"code": EXIT_USAGE, "message": line.removeprefix("walctl: error: ")},
                         json_requested(args), _is_stream(exc), None)
            code = EXIT_USAGE
        except typer.Abort:
            click.echo("walctl: error: aborted (interrupted at a prompt)", err=True)
            code = EXIT_SIGINT
        except typer.Exit as exc:
            code = exc.exit_code
        if standalone_mode:
            sys.exit(code)
        return code


class _NoCommand(Exception):
    pass


def _is_stream(exc) -> bool:
    ctx = getattr(exc, "ctx", None)
    callback = getattr(getattr(ctx, "command", None), "callback", None)
    return bool(getattr(callback, "walctl_stream", False))


def usage_line(exc) -> str:
    """One line for a click usage error: ``walctl: error: <what>, <option> (<hint>; see --help)``."""
    see = f"see '{exc.ctx.command_path} --help'" if getattr(exc, "ctx", None) is not None else "see 'walctl --help'"
    hint = getattr(exc, "hint", None)
    param = getattr(exc, "param", None)
    variable = _variable_of(exc, param)
    if hint is not None and param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or [param.name]
        source = f" (from {variable})" if variable else ""
        what = f"invalid value for {opts[0]}{source}: {exc.message}"
        return f"walctl: error: {what} ({hint}; {see})"
    text = " ".join(exc.format_message().split())  # never more than one line
    if param is not None:  # click names the option's variable(s) even when the value was typed
        text = re.sub(r" \(env var: '(\[[^\]]*\]|[^']*)'\)", f" (from {variable})" if variable else "", text, count=1)
    return f"walctl: error: {text} ({see})"


def _variable_of(exc, param) -> str | None:
    """The WALCTL_* variable a bad value came from (None when it was typed, or not an option's)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None or param is None or getattr(param, "name", None) is None:
        return None
    source = ctx.get_parameter_source(param.name)  # (typer's own click: its ParameterSource, by name)
    if getattr(source, "name", None) != "ENVIRONMENT":
        return None
    names = param.envvar if isinstance(param.envvar, (list, tuple)) else [param.envvar]
    return next((n for n in names if n and os.environ.get(n) is not None), None)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived: raised where the command was, so every ``finally`` and
    rollback on the way out runs (a KeyboardInterrupt, so code that handles Ctrl-C handles it).
    A command may set ``summary`` (its result so far) for the JSON line the boundary prints."""

    summary: dict | None = None

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports: 130 for SIGINT, 143 for SIGTERM


class signals_interrupt:
    """While active, SIGTERM and SIGINT raise ``Interrupted`` in the main thread, once: a second
    signal while the command winds down is ignored (SIGKILL still ends it). Used by every
    command through ``boundary()``; the previous handlers come back on exit."""

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self):
        self.previous: dict = {}
        self.received: int | None = None

    def _handler(self, signum, frame):
        from walctl.device.signals import hold_interrupt

        if self.received is not None:
            return
        self.received = signum
        if hold_interrupt(Interrupted(signum)):  # in a block that must not be split: raised as it ends
            return
        raise Interrupted(signum)

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            from walctl.device.signals import holding_handler

            handler = self._handler
            holding_handler(handler)  # it asks hold_interrupt first: signals_deferred needs no mask
            for name in self.SIGNALS:
                num = getattr(signal, name)
                self.previous[num] = signal.signal(num, handler)
        return self

    def __exit__(self, *exc):
        import signal

        for num, handler in self.previous.items():
            signal.signal(num, handler)
        return False


def interrupted_error(exc: BaseException) -> tuple[str, dict, int]:
    """The stderr line, JSON error object and exit code of an interruption (SIGINT when unknown)."""
    import signal

    signum = getattr(exc, "signum", signal.SIGINT)
    name = signal.Signals(signum).name
    line = (f"walctl: error: interrupted by {name} (the step in progress was finished or rolled back; "
            f"rerun the command to continue)")
    return line, {"code": 128 + signum, "message": line.removeprefix("walctl: error: "), "signal": name}, 128 + signum


def _check_engine_variable() -> None:
    """WALCTL_IO_ENGINE is read by every command's writes deep in walctl.device: a bad value is a
    usage error (exit 2) here, before the command opens anything, not after a writer opened the WAL."""
    from walctl.defaults import IO_ENGINE_ENV, IO_ENGINES
    from walctl.errors import UsageError

    engine = os.environ.get(IO_ENGINE_ENV)
    if engine and engine not in IO_ENGINES:
        raise UsageError(f"invalid value for {IO_ENGINE_ENV}: {engine!r}", hint=f"one of {', '.join(IO_ENGINES)}")


class quiet_stderr:
    """With --quiet, the command's stderr goes to /dev/null while it runs: its progress, warnings and
    summary lines, and those of anything it starts (the Spark JVM's); at the file descriptor, so C
    code and child processes are silent too. The boundary's error line is printed after, on the
    real stderr. Without --quiet, nothing."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.saved_fd: int | None = None
        self.saved_stream = None

    def __enter__(self):
        if not self.quiet:
            return self
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        self.saved_stream = sys.stderr
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (closed in __exit__)
        try:
            self.saved_fd = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            self.saved_fd = None
        return self

    def __exit__(self, *exc):
        if not self.quiet:
            return False
        quiet, sys.stderr = sys.stderr, self.saved_stream
        quiet.close()
        if self.saved_fd is not None:
            os.dup2(self.saved_fd, 2)
            os.close(self.saved_fd)
        return False


def _about(error: dict, kwargs: dict, where: str | None = None) -> dict:
    """The JSON error object with ``where``: the device or store the run was about (cron's logs
    tell runs apart by it), else what the error names; none when neither is known."""
    about = kwargs.get("device") or kwargs.get("store") or where
    if isinstance(about, str) and about and "where" not in error:
        error = {**error, "where": about}
    return error


def boundary(fn: Callable, stream: bool = False) -> Callable:
    """Wrap a command body: WalctlError -> one stderr line + its exit code (+ JSON error object);
    SIGTERM/SIGINT -> the same, exit 143/130, after the body's own cleanup ran.

    Args:
        stream: the command prints NDJSON; its error object is the closing summary line.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        json_out = bool(kwargs.get("json_out"))
        startup.command_starts()  # the collector, paused while walctl.cli.main started, resumes
        try:
            _check_engine_variable()
            with signals_interrupt(), quiet_stderr(quiet_requested()):
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, ClickUsageError):
            raise
        except WalctlError as exc:
            report_error(exc.line(), _about(exc.to_json(), kwargs, exc.where), json_out, stream, exc.summary)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:  # Interrupted (SIGTERM/SIGINT), or Ctrl-C outside the handler
            line, error, code = interrupted_error(exc)
            report_error(line, _about(error, kwargs), json_out, stream, getattr(exc, "summary", None))
            raise typer.Exit(code) from None
        except BrokenPipeError:
            from walctl.commands._shared import silence_stdout

            silence_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None  # stdout's reader went away
        except Exception as exc:  # a bug: the only case that may print a traceback
            if debug_requested():
                traceback.print_exc()
            line = (f"walctl: error: internal error: {type(exc).__name__}: {exc} "
                    f"(a bug; rerun with --debug for the traceback)")
            report_error(line, _about({"code": EXIT_INTERNAL, "message": line.removeprefix("walctl: error: ")},
                                      kwargs), json_out, stream, None)
            raise typer.Exit(EXIT_INTERNAL) from None

    wrapper.walctl_stream = stream
    return wrapper
